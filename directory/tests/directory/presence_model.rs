//! Property test: presence source refcounts of [`MemoryDirectory`] against a simple model over
//! random register / add-source / release / renew / time-passes (crash = leases lapse) / sweep
//! sequences.

use std::collections::BTreeMap;
use std::sync::Arc;

use plaza_directory::{
    Directory, DirectoryError, MAX_TTL_MS, ManualClock, MemoryDirectory, PresenceEntry, Sources,
};
use proptest::prelude::*;

const TTL: u64 = 1_000;
const WALLETS: usize = 5;
const ROOMS: usize = 2;

#[derive(Clone, Debug)]
enum Op {
    Register {
        w: usize,
        room: usize,
        src: u32,
    },
    Add {
        w: usize,
        src: u32,
    },
    Release {
        w: usize,
        src: u32,
    },
    Renew {
        room: usize,
    },
    Advance {
        ms: u64,
    },
    /// The owning node dies: nothing is renewed for longer than the lease.
    Crash,
    Sweep,
}

fn op() -> impl Strategy<Value = Op> {
    let w = 0..WALLETS;
    let src = 1u32..16;
    prop_oneof![
        3 => (w.clone(), 0..ROOMS, src.clone()).prop_map(|(w, room, src)| Op::Register { w, room, src }),
        3 => (w.clone(), src.clone()).prop_map(|(w, src)| Op::Add { w, src }),
        4 => (w, src).prop_map(|(w, src)| Op::Release { w, src }),
        1 => (0..ROOMS).prop_map(|room| Op::Renew { room }),
        2 => (0u64..700).prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Crash),
        1 => Just(Op::Sweep),
    ]
}

#[derive(Clone, Debug)]
struct ModelEntry {
    room: usize,
    sources: u32,
    until: u64,
}

fn wallet(w: usize) -> String {
    format!("w{w}")
}

fn room(r: usize) -> String {
    format!("room{r}")
}

async fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let clock = Arc::new(ManualClock::new(10_000));
    let d = MemoryDirectory::with_clock(clock.clone());
    let mut epochs = Vec::new();
    for r in 0..ROOMS {
        epochs.push(d.claim(&room(r), "a", MAX_TTL_MS).await.unwrap().epoch);
    }
    let mut model: BTreeMap<usize, ModelEntry> = BTreeMap::new();
    let mut now = 10_000u64;
    for op in ops {
        let live = |m: &BTreeMap<usize, ModelEntry>, w: usize, now: u64| {
            m.get(&w).filter(|e| e.until > now).cloned()
        };
        match op {
            Op::Register { w, room: r, src } => {
                let e = PresenceEntry {
                    wallet: wallet(w),
                    entity: (r * 100 + w) as u32,
                    room: room(r),
                    sources: Sources::from_bits(src),
                    node: "a".into(),
                    profile_version: 0,
                    lease_until_ms: 0,
                };
                d.presence_register(e, epochs[r], TTL).await.unwrap();
                // A rejoin of the same room keeps the other services' sources.
                let kept = live(&model, w, now)
                    .filter(|e| e.room == r)
                    .map_or(0, |e| e.sources & !Sources::ROOM.bits());
                model.insert(
                    w,
                    ModelEntry {
                        room: r,
                        sources: src | kept,
                        until: now + TTL,
                    },
                );
            }
            Op::Add { w, src } => {
                let epoch = live(&model, w, now).map_or(epochs[0], |e| epochs[e.room]);
                let got = d
                    .presence_add_source(&wallet(w), Sources::from_bits(src), epoch)
                    .await;
                match live(&model, w, now) {
                    Some(_) => {
                        prop_assert_eq!(got, Ok(()));
                        model.get_mut(&w).unwrap().sources |= src;
                    }
                    None => prop_assert!(matches!(got, Err(DirectoryError::NotFound(_)))),
                }
            }
            Op::Release { w, src } => {
                let epoch = live(&model, w, now).map_or(epochs[0], |e| epochs[e.room]);
                let got = d
                    .presence_release(&wallet(w), Sources::from_bits(src), epoch)
                    .await
                    .unwrap();
                let expect = match live(&model, w, now) {
                    Some(e) if e.sources & src != 0 => {
                        let after = e.sources & !src;
                        if after == 0 {
                            model.remove(&w);
                            true
                        } else {
                            model.get_mut(&w).unwrap().sources = after;
                            false
                        }
                    }
                    _ => false,
                };
                prop_assert_eq!(got, expect, "release w{} src {:#x}", w, src);
            }
            Op::Renew { room: r } => {
                let n = d
                    .presence_renew("a", &room(r), epochs[r], TTL)
                    .await
                    .unwrap();
                let mut expect = 0;
                for e in model.values_mut() {
                    if e.room == r && e.until > now {
                        e.until = e.until.max(now + TTL);
                        expect += 1;
                    }
                }
                prop_assert_eq!(n, expect);
            }
            Op::Advance { ms } => {
                clock.advance(ms);
                now += ms;
            }
            Op::Crash => {
                clock.advance(TTL + 1);
                now += TTL + 1;
            }
            Op::Sweep => {
                let n = d.sweep().await.unwrap();
                let before = model.len();
                model.retain(|_, e| e.until > now);
                prop_assert_eq!(n as usize, before - model.len());
            }
        }
        // After every step the directory shows exactly the model's live entries.
        let peers = d.peers(None).await.unwrap();
        let want: Vec<(String, u32, String)> = model
            .iter()
            .filter(|(_, e)| e.until > now)
            .map(|(w, e)| (wallet(*w), e.sources, room(e.room)))
            .collect();
        let got: Vec<(String, u32, String)> = peers
            .iter()
            .map(|p| (p.wallet.clone(), p.sources.bits(), p.room.clone()))
            .collect();
        prop_assert_eq!(&got, &want);
        prop_assert!(peers.iter().all(|p| !p.sources.is_empty()));
        for w in 0..WALLETS {
            let g = d
                .presence_get(&wallet(w))
                .await
                .unwrap()
                .map(|p| p.sources.bits());
            prop_assert_eq!(g, live(&model, w, now).map(|e| e.sources));
        }
        for (w, e) in model.iter().filter(|(_, e)| e.until > now) {
            let by = d
                .presence_by_entity(&room(e.room), (e.room * 100 + w) as u32)
                .await
                .unwrap();
            prop_assert_eq!(by.map(|p| p.wallet), Some(wallet(*w)));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn presence_refcounts_match_model(ops in proptest::collection::vec(op(), 1..60)) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(run(ops))?;
    }
}
