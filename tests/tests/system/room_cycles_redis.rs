//! Reliability row L3: room create / join / leave / destroy cycles against a real Redis (the
//! harness's own `redis-server`), with an in-process Plaza (every role) whose directory is the
//! real [`plaza_directory::RedisDirectory`] under a key prefix of its own.
//!
//! One cycle, on a fresh room `l3-N`: client A joins (the room is created and activated), client
//! B joins, A's presence is seen in the directory (its room-source refcount is 1), A sends
//! `Leave` and closes; then B goes one of three ways, by `N mod 3` — it closes its socket
//! without a leave, it sends `Leave`, or the operator closes the room under it
//! (`Rooms::close`, the admin API's `POST /v1/rooms/ROOM/close`) — and the room is destroyed
//! (after `room.empty_grace_ms`, or at once by the close). Cycles run `PLAZA_L3_CONCURRENCY`
//! (default 16) at a time.
//!
//! At the end: no room is live on the node, no session is open, every wallet's presence entry
//! is gone (refcount 0) and `/v1/peers` is empty; then, within presence TTL + sweep interval
//! (+ 5 s; the TTL is the longer of the presence TTL and the resume tokens' `gateway.resume_ttl_ms`,
//! shipped 15 s and 30 s), a `SCAN` of the keyspace under the prefix finds nothing but what the directory keeps
//! by design: the node registry, the epoch source, the sweep index (with no room left in it)
//! and one epoch-history hash `{r:ROOM}last` per room ever activated (the fencing history the
//! sweep keeps, `Directory::sweep`). Anything else is an orphan and is listed in the failure.
//!
//! `PLAZA_L3_CYCLES` sets the count: 1,000 by default, which CI runs (about 41 s in debug on
//! 2 shared cores: 11 s of cycles, then about 28 s until the last resume tokens expire).
//!
//! Regression: a room destroyed before its first presence renewal left its activation record
//! `{r:ROOM}act` (only the pending flag `E:p`, no deadline) behind forever — the sweep only
//! looked at records with a deadline. Found by this test (one orphan hash per short-lived room).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use plaza_directory::test_util::RedisServer;
use plaza_load::prom::parse_sample;
use plaza_proto::pb;
use plaza_tests::cluster::wait_until;
use plaza_tests::{Client, scrape_metrics, start_plaza, test_config, ws_url};

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Every key under `prefix` (SCAN, not KEYS).
async fn scan_keys(con: &mut redis::aio::MultiplexedConnection, prefix: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1_000)
            .query_async(con)
            .await
            .expect("SCAN");
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    keys.sort();
    keys.dedup();
    keys
}

/// Keys under `prefix` that are not in `kept`, and the rooms still in the sweep index.
async fn leftovers(
    con: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
    kept: &BTreeSet<String>,
) -> (Vec<String>, Vec<String>) {
    let orphans = scan_keys(con, prefix)
        .await
        .into_iter()
        .filter(|k| !kept.contains(k))
        .collect();
    let due: Vec<String> = redis::cmd("ZRANGE")
        .arg(format!("{prefix}{{i}}due"))
        .arg(0)
        .arg(-1)
        .query_async(con)
        .await
        .unwrap_or_default();
    let due_rooms = due.into_iter().filter(|i| i.starts_with("r:")).collect();
    (orphans, due_rooms)
}

/// How one cycle's second client leaves.
#[derive(Clone, Copy, Debug)]
enum LastLeave {
    /// Closes its socket without a `Leave`.
    Disconnect,
    /// Sends `Leave`, then closes.
    Leave,
    /// The operator closes the room under it.
    OperatorClose,
}

/// One create / join / leave / destroy cycle on room `room`; returns both wallets.
async fn cycle(
    url: &str,
    plaza: &plaza_ops::Plaza,
    room: &str,
    how: LastLeave,
) -> anyhow::Result<[String; 2]> {
    let mut a = Client::connect(url).await?;
    a.join(room).await?;
    let mut b = Client::connect(url).await?;
    b.join(room).await?;
    // A's room source is registered: its refcount went to 1.
    let dir = plaza.directory();
    let seen = wait_until(Duration::from_secs(5), || async {
        matches!(dir.presence_get(&a.wallet).await, Ok(Some(e)) if e.room == room)
    })
    .await;
    anyhow::ensure!(seen.is_some(), "{room}: A's presence never registered");
    let wallets = [a.wallet.clone(), b.wallet.clone()];
    a.send(pb::client_envelope::Body::Leave(pb::Leave {}))
        .await?;
    a.close().await;
    match how {
        LastLeave::Disconnect => b.close().await,
        LastLeave::Leave => {
            b.send(pb::client_envelope::Body::Leave(pb::Leave {}))
                .await?;
            b.close().await;
        }
        LastLeave::OperatorClose => {
            let node = plaza.node().expect("every role runs a node");
            node.rooms()
                .close(room)
                .await
                .map_err(|e| anyhow::anyhow!("{room}: close: {e}"))?;
            b.close().await;
        }
    }
    Ok(wallets)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn room_cycles_leave_no_refcount_and_no_orphan_key_in_redis() {
    let cycles = env_usize("PLAZA_L3_CYCLES", 1_000);
    let concurrency = env_usize("PLAZA_L3_CONCURRENCY", 16).max(1);
    let redis = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap()
        .unwrap();
    let prefix = format!("l3-{}:", std::process::id());
    let mut cfg = test_config();
    cfg.directory.redis_url = redis.url();
    cfg.directory.key_prefix = prefix.clone();
    let (presence_ttl, sweep) = (
        Duration::from_millis(cfg.room.presence_ttl_ms),
        Duration::from_millis(cfg.directory.sweep_interval_ms),
    );
    let grace = Duration::from_millis(cfg.room.empty_grace_ms);
    // A session's resume token (`resume:TOKEN`) lives `gateway.resume_ttl_ms` (a Redis TTL)
    // after the session ends, so the client may come back: the longest TTL of the lot.
    let ttl = presence_ttl.max(Duration::from_millis(cfg.gateway.resume_ttl_ms));
    let plaza = Arc::new(start_plaza(&cfg).await);
    let url = ws_url(&plaza);
    let admin = plaza.admin_addr();

    let started = tokio::time::Instant::now();
    let sem = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..cycles {
        let permit = sem.clone().acquire_owned().await.unwrap();
        let (url, plaza) = (url.clone(), plaza.clone());
        let how = match i % 3 {
            0 => LastLeave::Disconnect,
            1 => LastLeave::Leave,
            _ => LastLeave::OperatorClose,
        };
        tasks.spawn(async move {
            let room = format!("l3-{i}");
            let out = cycle(&url, &plaza, &room, how).await;
            drop(permit);
            out.map_err(|e| format!("cycle {i} ({how:?}): {e:#}"))
        });
    }
    let mut wallets = Vec::new();
    let mut failures = Vec::new();
    while let Some(r) = tasks.join_next().await {
        match r.unwrap() {
            Ok(w) => wallets.extend(w),
            Err(e) => failures.push(e),
        }
    }
    let ran = started.elapsed();
    eprintln!(
        "L3: {cycles} cycles ({concurrency} at a time) in {ran:?}; {} failed",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "cycles failed:\n{}",
        failures.join("\n")
    );

    // Every room destroyed (empty grace), every session gone.
    let metric = |name: &'static str| async move {
        parse_sample(&scrape_metrics(admin).await.unwrap_or_default(), name)
    };
    let destroyed = wait_until(grace + Duration::from_secs(10), || async {
        metric("plaza_rooms").await == Some(0.0)
            && metric("plaza_gateway_sessions").await == Some(0.0)
    })
    .await;
    assert!(
        destroyed.is_some(),
        "rooms {:?} / sessions {:?} left after the cycles",
        metric("plaza_rooms").await,
        metric("plaza_gateway_sessions").await
    );

    // Refcounts at 0: no wallet has a presence entry, `/v1/peers` is empty.
    let dir = plaza.directory();
    let mut present = Vec::new();
    for w in &wallets {
        if let Some(e) = dir.presence_get(w).await.unwrap() {
            present.push(format!("{w} in {} via {:?}", e.room, e.sources));
        }
    }
    assert!(
        present.is_empty(),
        "{} of {} wallets still present: {present:?}",
        present.len(),
        wallets.len()
    );
    assert!(dir.peers(None).await.unwrap().is_empty(), "peers left");

    // No orphan key after presence TTL + sweep: only what the directory keeps by design.
    let client = redis::Client::open(redis.url()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let kept: BTreeSet<String> = ["{n}nodes", "{e}epoch", "{e}mark", "{i}due"]
        .iter()
        .map(|k| format!("{prefix}{k}"))
        .chain((0..cycles).map(|i| format!("{prefix}{{r:l3-{i}}}last")))
        .collect();
    let clean = wait_until(ttl + sweep + Duration::from_secs(5), || {
        let (mut con, kept, prefix) = (con.clone(), &kept, &prefix);
        async move {
            let (orphans, due_rooms) = leftovers(&mut con, prefix, kept).await;
            orphans.is_empty() && due_rooms.is_empty()
        }
    })
    .await;
    let (orphans, due_rooms) = leftovers(&mut con, &prefix, &kept).await;
    let keys = scan_keys(&mut con, &prefix).await;
    let last = keys.iter().filter(|k| k.ends_with("}last")).count();
    eprintln!(
        "L3: keyspace clean after {clean:?} (TTL {ttl:?} + sweep {sweep:?}); \
         {} keys left: {last} room epoch histories + {} others",
        keys.len(),
        keys.len() - last
    );
    assert!(
        clean.is_some(),
        "orphan keys after TTL + sweep ({}): {orphans:#?}\nrooms still in the sweep \
         index ({}): {due_rooms:?}",
        orphans.len(),
        due_rooms.len()
    );
    // Each activated room left its epoch history and nothing else.
    assert_eq!(last, cycles, "epoch histories");
    Arc::into_inner(plaza)
        .expect("every cycle task ended")
        .shutdown()
        .await;
}
