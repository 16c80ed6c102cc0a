//! D2 of docs/TESTING.md: loom models of the directory's concurrency kernels. Every
//! interleaving (and, for the atomics, every allowed weak-memory outcome) of a few concurrent
//! callers is explored:
//! - the memory backend's lease table: concurrent claims of one room grant exactly one
//!   activation; a renewal racing an expiry-and-takeover never leaves two epochs live;
//! - the memory backend's presence refcounts: concurrent releases of a wallet's sources report
//!   the last one exactly once, also racing an add or a sweep;
//! - the Redis backend's era floor ([`EraFloor`]): a claim never sends a floor below an era it
//!   reports as seen (a real race, fixed; `old_era_floor_order_is_caught` shows loom finds it).
//!
//! Run: `scripts/loom.sh` (`RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test
//! --release -p plaza-directory --test loom`). Under `--cfg loom` the crate's mutex, the
//! manual clock's atomic and the era floor's atomics are loom's (`src/sync.rs`).
//!
//! Its own test binary, not a module of `directory` (tests/directory/main.rs): it builds only
//! under `--cfg loom`, where the other tests' dependencies (turmoil, proptest) are not built.
#![cfg(loom)]

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};

use loom::sync::Arc;
use loom::sync::atomic::AtomicU64;
use loom::thread;
use plaza_directory::era::EraFloor;
use plaza_directory::{
    Directory, DirectoryError, Epoch, ManualClock, MemoryDirectory, PresenceEntry, Sources,
};

/// Polls a memory-backend future once: its calls never await anything, so they are ready.
fn now<F: Future>(f: F) -> F::Output {
    match pin!(f).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("a memory backend call was pending"),
    }
}

const TTL: u64 = 1_000;

fn directory() -> (Arc<ManualClock>, Arc<MemoryDirectory>) {
    let clock = Arc::new(ManualClock::new(10_000));
    let d = MemoryDirectory::with_clock_and_era(std::sync::Arc::new(ClockRef(clock.clone())), 7);
    (clock, Arc::new(d))
}

/// A [`plaza_directory::Clock`] reading a loom-shared [`ManualClock`].
struct ClockRef(Arc<ManualClock>);

impl plaza_directory::Clock for ClockRef {
    fn now_ms(&self) -> u64 {
        plaza_directory::Clock::now_ms(&*self.0)
    }
}

fn entry(wallet: &str, node: &str, sources: Sources) -> PresenceEntry {
    PresenceEntry {
        wallet: wallet.into(),
        entity: 1,
        room: "r".into(),
        sources,
        node: node.into(),
        profile_version: 0,
        lease_until_ms: 0,
    }
}

#[test]
fn concurrent_claims_grant_one_activation() {
    loom::model(|| {
        let (_clock, d) = directory();
        let handles: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|node| {
                let d = d.clone();
                thread::spawn(move || now(d.claim("r", node, TTL)))
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let won: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(won.len(), 1, "{results:?}");
        assert!(
            results
                .iter()
                .any(|r| matches!(r, Err(DirectoryError::Conflict(_)))),
            "{results:?}"
        );
        let live = now(d.resolve("r")).unwrap().unwrap();
        assert_eq!(live.epoch, won[0].epoch);
        assert_eq!(live.node, won[0].node);
    });
}

#[test]
fn renewal_racing_expiry_and_takeover_leaves_one_live_epoch() {
    loom::model(|| {
        let (clock, d) = directory();
        let old = now(d.claim("r", "a", TTL)).unwrap().epoch;
        // Owner a renews for two TTLs; meanwhile time reaches the lease's end and b tries to
        // take over.
        let da = d.clone();
        let renew = thread::spawn(move || now(da.renew("r", "a", old, 2 * TTL)));
        let (db, cb) = (d.clone(), clock.clone());
        let takeover = thread::spawn(move || {
            cb.advance(TTL);
            now(db.claim("r", "b", TTL))
        });
        let renewed = renew.join().unwrap();
        let taken = takeover.join().unwrap();
        let live = now(d.resolve("r")).unwrap().expect("someone holds r");
        match (&renewed, &taken) {
            // The renewal landed before the lease lapsed: a keeps the room.
            (Ok(p), Err(DirectoryError::Conflict(_))) => {
                assert_eq!((p.epoch, live.epoch), (old, old));
            }
            // b took over the lapsed lease: a's renewal must have been refused (it came after
            // the lease lapsed, or after b's claim).
            (Err(DirectoryError::StaleEpoch { .. }), Ok(p)) => {
                assert!(p.epoch > old);
                assert_eq!(live.epoch, p.epoch);
                assert!(now(d.check_epoch("r", old)).is_err());
            }
            other => panic!("unexpected outcome {other:?}"),
        }
        // Exactly one epoch passes the fencing check.
        let a_ok = now(d.check_epoch("r", old)).is_ok();
        let b_ok = taken
            .as_ref()
            .is_ok_and(|p| now(d.check_epoch("r", p.epoch)).is_ok());
        assert!(a_ok ^ b_ok, "a {a_ok}, b {b_ok}");
    });
}

#[test]
fn concurrent_source_releases_report_the_last_exactly_once() {
    loom::model(|| {
        let (_clock, d) = directory();
        let e = now(d.claim("r", "a", 60_000)).unwrap().epoch;
        now(d.presence_register(entry("w", "a", Sources::ROOM | Sources::VOICE), e, TTL)).unwrap();
        let handles: Vec<_> = [Sources::ROOM, Sources::VOICE]
            .into_iter()
            .map(|s| {
                let d = d.clone();
                thread::spawn(move || now(d.presence_release("w", s, e)).unwrap())
            })
            .collect();
        let adder = {
            let d = d.clone();
            thread::spawn(move || now(d.presence_add_source("w", Sources::CHAT, e)))
        };
        let lasts = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|b| *b)
            .count();
        let added = adder.join().unwrap();
        let left = now(d.presence_get("w")).unwrap();
        match added {
            // CHAT came in before the last release: nobody released the last source.
            Ok(()) => {
                assert_eq!(lasts, 0);
                assert_eq!(left.map(|p| p.sources), Some(Sources::CHAT));
            }
            // The entry was already gone: exactly one release removed it.
            Err(DirectoryError::NotFound(_)) => {
                assert_eq!(lasts, 1);
                assert!(left.is_none());
            }
            Err(e) => panic!("{e}"),
        }
    });
}

#[test]
fn release_racing_expiry_and_sweep_counts_once() {
    loom::model(|| {
        let (clock, d) = directory();
        let e = now(d.claim("r", "a", 60_000)).unwrap().epoch;
        now(d.presence_register(entry("w", "a", Sources::ROOM), e, TTL)).unwrap();
        let dr = d.clone();
        let release = thread::spawn(move || now(dr.presence_release("w", Sources::ROOM, e)));
        let (ds, cs) = (d.clone(), clock.clone());
        let sweeper = thread::spawn(move || {
            cs.advance(TTL);
            now(ds.sweep()).unwrap()
        });
        let released = release.join().unwrap().unwrap();
        let swept = sweeper.join().unwrap();
        // The entry goes exactly once: by its last release or by the sweep, never both,
        // never neither (no ghost, no double count).
        assert_eq!(
            u32::from(released) + swept,
            1,
            "released {released}, swept {swept}"
        );
        assert!(now(d.presence_get("w")).unwrap().is_none());
        assert_eq!(now(d.sweep()).unwrap(), 0);
    });
}

#[test]
fn era_floor_is_never_below_a_seen_era() {
    loom::model(|| {
        let f = Arc::new(EraFloor::new(10));
        let w = f.clone();
        let writer = thread::spawn(move || w.seen(Epoch::new(100, 1)));
        let (min, seen) = f.claim_args();
        assert!(
            min >= seen,
            "claim would send floor {min} with seen era {seen}"
        );
        assert!(min >= 10);
        writer.join().unwrap();
        let (min, seen) = f.claim_args();
        assert_eq!((min, seen), (100, 100));
    });
}

/// The era floor as it was before this model: `min_era` loaded before `seen_era`. loom finds
/// the interleaving where a concurrent `seen()` lands between the two loads.
#[test]
#[should_panic(expected = "claim would send floor")]
fn old_era_floor_order_is_caught() {
    loom::model(|| {
        let min_era = Arc::new(AtomicU64::new(10));
        let seen_era = Arc::new(AtomicU64::new(0));
        let (m, s) = (min_era.clone(), seen_era.clone());
        let writer = thread::spawn(move || {
            m.fetch_max(100, Ordering::Relaxed);
            s.fetch_max(100, Ordering::Relaxed);
        });
        let min = min_era.load(Ordering::Relaxed);
        let seen = seen_era.load(Ordering::Relaxed);
        assert!(
            min >= seen,
            "claim would send floor {min} with seen era {seen}"
        );
        writer.join().unwrap();
    });
}
