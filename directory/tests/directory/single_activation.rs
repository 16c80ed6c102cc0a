//! G1 end to end on a real `redis-server`: three "nodes" (separate clients) contend for one
//! room with [`RoomLease`], commit audit records only while `may_commit()`, one node pauses for
//! 2×TTL (SIGSTOP-like) and then writes with its old epoch, and Redis restarts empty mid-run.
//! Afterwards a checker asserts that, per era, the committed records' epochs never go back in
//! store order (no two activations committing interleaved), that the paused node's late write
//! was refused, and that the room kept making progress after the data loss.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use plaza_directory::test_util::RedisServer;
use plaza_directory::{Directory, DirectoryError, Epoch, RedisDirectory, RedisOptions, RoomLease};
use tokio::time::Instant;

const TTL: Duration = Duration::from_millis(300);
const MARGIN: Duration = Duration::from_millis(100);
const ROOM: &str = "arena";

#[derive(Debug, Default)]
struct History {
    /// (epoch, seq) of every acknowledged append.
    commits: Vec<(Epoch, u64)>,
    /// Results of the paused node's late writes with its old epoch.
    late_writes: Vec<Result<u64, DirectoryError>>,
    activations: Vec<(String, Epoch)>,
}

async fn node_loop(
    d: Arc<RedisDirectory>,
    name: String,
    pause_once: bool,
    stop: Arc<AtomicBool>,
    hist: Arc<Mutex<History>>,
) {
    let mut lease: Option<RoomLease> = None;
    let mut next_renew = Instant::now();
    let mut paused = !pause_once;
    let mut held_since = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let Some(l) = lease.as_mut() else {
            match RoomLease::claim(&*d, ROOM, &name, TTL, MARGIN).await {
                Ok(l) => {
                    hist.lock().activations.push((name.clone(), l.epoch()));
                    next_renew = Instant::now() + l.renew_every();
                    held_since = Instant::now();
                    lease = Some(l);
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(15)).await,
            }
            continue;
        };
        if Instant::now() >= next_renew {
            match l.renew(&*d).await {
                Ok(()) => next_renew = Instant::now() + l.renew_every(),
                Err(e) if e.is_fenced() => {
                    lease = None;
                    continue;
                }
                Err(_) => next_renew = Instant::now() + Duration::from_millis(20),
            }
        }
        if !paused && held_since.elapsed() > Duration::from_millis(150) {
            // SIGSTOP for 2×TTL: no renewals, no checks; then a write that was "in flight".
            paused = true;
            let epoch = l.epoch();
            tokio::time::sleep(2 * TTL).await;
            let r = d.audit_append(ROOM, epoch, "late", "{}", 0).await;
            hist.lock().late_writes.push(r);
            lease = None;
            continue;
        }
        if paused && held_since.elapsed() > Duration::from_millis(250) {
            // Hand the room over (drain-like) so every node gets a turn.
            if let Some(l) = lease.take() {
                let _ = l.release(&*d).await;
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
            continue;
        }
        if !l.may_commit() {
            lease = None;
            continue;
        }
        let epoch = l.epoch();
        match d
            .audit_append(
                ROOM,
                epoch,
                "commit",
                &format!("{{\"node\":\"{name}\"}}"),
                0,
            )
            .await
        {
            Ok(seq) => hist.lock().commits.push((epoch, seq)),
            Err(e) if e.is_fenced() => lease = None,
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if let Some(l) = lease {
        let _ = l.release(&*d).await;
    }
}

static N: AtomicU64 = AtomicU64::new(0);

/// Retries while the connection manager reconnects after the restart (bounded).
async fn until_available<T, F, Fut>(mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, DirectoryError>>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) if e.is_retryable() && std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_activation_under_contention_pause_and_data_loss() {
    let mut server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let prefix = format!("g1:{}:", N.fetch_add(1, Ordering::Relaxed));
    let stop = Arc::new(AtomicBool::new(false));
    let hist = Arc::new(Mutex::new(History::default()));
    let mut tasks = Vec::new();
    for i in 0..3 {
        let opts = RedisOptions {
            prefix: prefix.clone(),
            ..RedisOptions::default()
        };
        let d = Arc::new(
            RedisDirectory::connect_with(&server.url(), 0, opts)
                .await
                .unwrap(),
        );
        tasks.push(tokio::spawn(node_loop(
            d,
            format!("n{i}"),
            true,
            stop.clone(),
            hist.clone(),
        )));
    }
    let observer = RedisDirectory::connect_with(
        &server.url(),
        0,
        RedisOptions {
            prefix: prefix.clone(),
            ..RedisOptions::default()
        },
    )
    .await
    .unwrap();

    // Wait (bounded) until every node has paused once and several activations happened.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (late, acts) = {
            let h = hist.lock();
            (h.late_writes.len(), h.activations.len())
        };
        if late >= 3 && acts >= 4 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no progress: {late} late, {acts} activations"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before_loss = hist.lock().commits.len();
    tokio::task::block_in_place(|| server.restart_empty()).unwrap();
    // Progress after the data loss: commits in a new era.
    let old_max_era = hist
        .lock()
        .commits
        .iter()
        .map(|(e, _)| e.era)
        .max()
        .unwrap();
    loop {
        let after = hist
            .lock()
            .commits
            .iter()
            .filter(|(e, _)| e.era > old_max_era)
            .count();
        if after >= 20 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no commits after data loss"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }

    let h = std::mem::take(&mut *hist.lock());
    assert!(before_loss > 0);
    // The paused nodes' late writes were all refused by the store.
    assert_eq!(h.late_writes.len(), 3);
    for r in &h.late_writes {
        assert!(
            matches!(r, Err(DirectoryError::StaleEpoch { .. })),
            "late write: {r:?}"
        );
    }
    // Activations of the room never reuse an epoch: no epoch is issued to two nodes, and a
    // node gets an epoch again only as its own latest activation. (A node that dropped its
    // lease locally — `may_commit()` false after a renewal came late on a loaded machine, e.g.
    // while the clients reconnect after the restart — and claims again while the store still
    // holds its lease gets that same activation back: `claim` renews the caller's own live
    // lease, `claim_try.lua`. That is one activation, not two.)
    let mut holder: HashMap<Epoch, &str> = HashMap::new();
    let mut latest: HashMap<&str, Epoch> = HashMap::new();
    for (node, epoch) in &h.activations {
        if let Some(prev) = holder.insert(*epoch, node) {
            assert_eq!(
                prev, node,
                "epoch {epoch} was issued to two nodes: {:?}",
                h.activations
            );
            assert_eq!(
                latest.get(node.as_str()),
                Some(epoch),
                "{node} got back an epoch that was not its latest activation: {:?}",
                h.activations
            );
        }
        latest.insert(node, *epoch);
    }
    // Per era (store incarnation), in store order, epochs never go back and seqs are unique.
    let mut commits = h.commits.clone();
    commits.sort_by_key(|(e, seq)| (e.era, *seq));
    for w in commits.windows(2) {
        let ((e1, s1), (e2, s2)) = (w[0], w[1]);
        if e1.era == e2.era {
            assert!(s2 > s1, "duplicate seq {s1} in era {}", e1.era);
            assert!(
                e2 >= e1,
                "epoch went back: seq {s1}@{e1} then seq {s2}@{e2}"
            );
        }
    }
    // The surviving log agrees with what was acknowledged in the last era.
    let last_era = commits.last().unwrap().0.era;
    let acked: Vec<(Epoch, u64)> = commits
        .iter()
        .copied()
        .filter(|(e, _)| e.era == last_era)
        .collect();
    let log = until_available(|| observer.audit_read(ROOM, 1, 10_000)).await;
    let stored: Vec<(Epoch, u64)> = log
        .iter()
        .filter(|r| r.kind == "commit")
        .map(|r| (r.epoch, r.seq))
        .collect();
    assert_eq!(stored, acked);
    assert!(log.iter().all(|r| r.kind != "late"));
}
