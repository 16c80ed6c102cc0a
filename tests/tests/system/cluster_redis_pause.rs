//! Multi-process: Redis unreachable for everyone for 30 s (REQUIREMENTS.md F3), on the shipped
//! defaults (lease TTL 10 s, sweep 5 s). The `redis-server` process the harness started is
//! frozen with SIGSTOP for 30 s and continued with SIGCONT, mid-run: every connection to it
//! stays open and silent, like a Redis host that stopped answering.
//!
//! Asserted: no bot is lost, no session is closed 4004, the bots' ping RTT p99 stays under
//! 1 s (the gateway answers throughout); the rooms serve frames again within 5 s of Redis's
//! return; the room's state is intact (a prop held before the outage is still held by the same
//! avatar after it); no two epochs of a room committed at once (event logs).

use std::time::Duration;

use plaza_tests::cluster::{
    Cluster, ClusterOpts, assert_fault_held, redis_pid, signal_pid, wait_until,
};
use plaza_tests::{Client, assert_crate_1_still_held, pick_up_crate_1};

/// How long Redis is frozen.
const OUTAGE: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_of_30_s_keeps_every_session_and_the_room_state() {
    let c = Cluster::start(ClusterOpts::default()).await.unwrap();
    let prefix = "rp-";
    let ttl = Duration::from_millis(c.opts().lease_ttl_ms);
    let sweep = Duration::from_millis(c.opts().sweep_interval_ms);
    // The run lasts the outage plus the time to come back, with margin.
    let cfg = c.load_config(60, 6, prefix, OUTAGE.as_secs() + 15);
    let bots = cfg.bots;
    let load = tokio::spawn(plaza_load::run(cfg));
    c.wait_all_online(bots).await;

    // a holds crate 1 in a room of its own (b watches).
    let state_room = format!("{prefix}state");
    let url = c.ws_url();
    let mut a = Client::connect(&url).await.unwrap();
    let ea = a.join(&state_room).await.unwrap();
    let mut b = Client::connect(&url).await.unwrap();
    b.join(&state_room).await.unwrap();
    pick_up_crate_1(&mut a, ea, &mut 1.0).await;

    let pid = redis_pid(c.redis.port()).await.unwrap();
    signal_pid(pid, "STOP").unwrap();
    let stopped = tokio::time::Instant::now();
    eprintln!("SIGSTOP redis-server {pid} for {OUTAGE:?}");
    // The outage's duration is the fault, not a wait for a condition; a and b stay connected
    // (their sockets are read: pumped, not closed) throughout.
    while stopped.elapsed() < OUTAGE {
        let close = a.pump_for(Duration::from_millis(100)).await;
        assert!(
            close.is_ok(),
            "a stays connected through the outage: {close:?}"
        );
        let close = b.pump_for(Duration::from_millis(100)).await;
        assert!(
            close.is_ok(),
            "b stays connected through the outage: {close:?}"
        );
    }
    signal_pid(pid, "CONT").unwrap();
    let returned = tokio::time::Instant::now();
    eprintln!("SIGCONT redis-server {pid}");

    // Frames again within 5 s of Redis's return: a's frame count grows.
    let frames_at_return = a.frames.len();
    let mut frames_back = None;
    while returned.elapsed() < Duration::from_secs(15) {
        a.pump_for(Duration::from_millis(50))
            .await
            .expect("a stays connected after the outage");
        b.pump_for(Duration::from_millis(10))
            .await
            .expect("b stays connected after the outage");
        if a.frames.len() > frames_at_return + 1 {
            frames_back = Some(returned.elapsed());
            break;
        }
    }
    eprintln!(
        "frames again {frames_back:?} after Redis returned (a joins {}, b joins {})",
        a.joins, b.joins
    );
    assert!(
        frames_back.is_some_and(|d| d <= Duration::from_secs(5)),
        "the room serves frames within 5 s of Redis's return: {frames_back:?}"
    );
    // The state is intact: the crate is still a's, a is the same avatar.
    assert_eq!(a.entity, ea, "same avatar after the outage");
    assert_crate_1_still_held(&mut b, "the outage").await;

    // Presence is whole again (the writers renewed or reclaimed and re-registered).
    let whole = wait_until(ttl + sweep, || async {
        c.peers_count().await.ok() == Some(bots + 2)
    })
    .await;
    eprintln!("presence whole {whole:?} after the return");
    assert!(
        whole.is_some(),
        "presence not whole within lease TTL + sweep of Redis's return: {:?}",
        c.peers_count().await
    );
    a.close().await;
    b.close().await;

    let report = load.await.unwrap().unwrap();
    assert_fault_held("redis paused 30 s", &report, &c.event_logs());
}
