//! Multi-process partition between a room node and Redis (REQUIREMENTS.md F5): the third node
//! reaches Redis through a [`Blackhole`] proxy, which the test cuts mid-run (bytes stop both
//! ways; nothing is reset). The isolated node cannot renew its leases: its rooms stop sending
//! before their leases can lapse, give up after a TTL, and the gateway (which still reaches
//! Redis) moves their sessions to the rooms' next activations on the other nodes, in session,
//! with the same entity. After the heal, the event logs show no two epochs of a room committing
//! at once, and no bot is lost, no session is closed 4004 and the bots' ping RTT p99 stays
//! under 1 s.
//!
//! Run on the shipped defaults (lease TTL 10 s) and as an extra fast variant (lease TTL 2 s).

use std::net::SocketAddr;
use std::time::Duration;

use plaza_tests::blackhole::Blackhole;
use plaza_tests::cluster::{Cluster, ClusterOpts, assert_fault_held};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_node_stops_committing_and_its_rooms_move() {
    partitioned(ClusterOpts::default(), "pt-").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_node_stops_committing_and_its_rooms_move_fast() {
    partitioned(ClusterOpts::fast(), "pq-").await;
}

async fn partitioned(opts: ClusterOpts, prefix: &str) {
    let mut c = Cluster::start(ClusterOpts { nodes: 2, ..opts })
        .await
        .unwrap();
    let redis: SocketAddr = ([127, 0, 0, 1], c.redis.port()).into();
    let link = Blackhole::start(redis).await.unwrap();
    let idx = c
        .start_node_via(&format!("redis://{}", link.addr()))
        .await
        .unwrap();
    let ttl = Duration::from_millis(c.opts().lease_ttl_ms);
    // The run outlasts the move bound (3 × TTL + 8 s) after the cut.
    let cfg = c.load_config(60, 6, prefix, 3 * ttl.as_secs() + 14);
    let bots = cfg.bots;
    let load = tokio::spawn(plaza_load::run(cfg));
    c.wait_all_online(bots).await;

    // A probe in a room of the isolated-to-be node (join rooms until one lands there).
    let victim_prefix = format!("{}.", c.nodes[idx].name);
    let (mut probe, room, entity) = c.probe_on_node(idx, prefix).await;
    let on_victim = c
        .presence_by_node()
        .await
        .unwrap()
        .into_iter()
        .find(|(n, _)| n.starts_with(&victim_prefix))
        .map_or(0, |(_, n)| n);
    eprintln!("cutting {victim_prefix}* from Redis; {on_victim} sessions there, probe in {room}");

    link.cut();
    let cut = tokio::time::Instant::now();
    // The isolated node's rooms give up after their lease's safe window plus a TTL; the
    // gateway moves every session (the probe in its connection, same entity).
    let deadline = tokio::time::Instant::now() + ttl * 3 + Duration::from_secs(8);
    loop {
        probe
            .pump_for(Duration::from_millis(100))
            .await
            .expect("the probe stays connected");
        let moved = c.presence_by_node().await.is_ok_and(|m| {
            !m.keys().any(|n| n.starts_with(&victim_prefix))
                && m.values().sum::<usize>() == bots + 1
        });
        if moved && probe.joins >= 2 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "sessions not moved off the isolated node: {:?} (probe joins {})\n{}",
            c.presence_by_node().await,
            probe.joins,
            c.nodes[idx].log_tail(30)
        );
    }
    eprintln!("moved off the isolated node after {:?}", cut.elapsed());
    assert_eq!(probe.entity, entity, "same entity after the move");
    let placed = c.placements(std::slice::from_ref(&room)).await;
    assert!(
        placed
            .get(&room)
            .is_some_and(|n| !n.starts_with(&victim_prefix)),
        "{room} re-placed: {placed:?}"
    );
    let log = std::fs::read_to_string(&c.nodes[idx].log).unwrap();
    // Its rooms withheld their ticks (committed nothing once the lease could lapse); the
    // gateway moved their sessions away (a room left without sessions then gives up).
    assert!(
        log.contains("ticks withheld"),
        "the isolated node withheld its ticks:\n{}",
        c.nodes[idx].log_tail(40)
    );

    link.heal();
    probe.close().await;
    let report = load.await.unwrap().unwrap();
    let sum = assert_fault_held("node-redis partition", &report, &c.event_logs());
    assert!(sum.rooms_with_several_epochs >= 1, "{sum:?}");
}
