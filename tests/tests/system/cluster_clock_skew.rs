//! Clock skew on room nodes (REQUIREMENTS.md F9): two nodes run with their wall clocks 2 s ahead
//! and 2 s behind (libfaketime, `faketime -f ±2s`; the monotonic clock is left alone, as NTP
//! skew would leave it). Every lease is measured on the directory's clock (Redis `TIME`) and
//! every local deadline on the monotonic clock, so the skew must change nothing: when the one
//! unskewed node that holds every room is killed -9, the skewed nodes take its rooms over no
//! earlier than the lease can have lapsed (kill + TTL − one renewal period, measured on this
//! test's own clock), the event-log checker finds no overlapping activations, and no bot is
//! lost. Shipped defaults (lease TTL 10 s).

use std::collections::BTreeMap;
use std::time::Duration;

use plaza_tests::cluster::{Cluster, ClusterOpts, NodeSpawn, assert_fault_held};

fn skewed(offset: &str) -> NodeSpawn {
    NodeSpawn {
        wrapper: vec!["faketime".into(), "-f".into(), offset.into()],
        env: vec![("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into())],
        ..NodeSpawn::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewed_nodes_take_over_no_earlier_than_the_lease_lapses() {
    assert!(
        std::process::Command::new("faketime")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "faketime (Debian package faketime) is required; .ci/run installs it"
    );
    // One unskewed node places every room of the run.
    let mut c = Cluster::start(ClusterOpts {
        nodes: 1,
        ..ClusterOpts::default()
    })
    .await
    .unwrap();
    let ttl = Duration::from_millis(c.opts().lease_ttl_ms);
    let cfg = c.load_config(60, 6, "f9-", 45);
    let bots = cfg.bots;
    let rooms: Vec<String> = (0..cfg.rooms).map(|i| format!("f9-{i}")).collect();
    let load = tokio::spawn(plaza_load::run(cfg));
    c.wait_all_online(bots).await;
    let first = c.placements(&rooms).await;
    assert_eq!(first.len(), rooms.len(), "every room placed: {first:?}");
    // Then the skewed nodes join.
    let ahead = c.start_node_with(skewed("+2s")).await.unwrap();
    let behind = c.start_node_with(skewed("-2s")).await.unwrap();
    for i in [ahead, behind] {
        let log = std::fs::read_to_string(&c.nodes[i].log).unwrap_or_default();
        assert!(!log.contains("panicked"), "{}", c.nodes[i].log_tail(20));
    }

    c.nodes[0].kill9();
    let killed = tokio::time::Instant::now();
    // When each room is first placed on another node, on this test's clock.
    let mut moved: BTreeMap<String, Duration> = BTreeMap::new();
    let deadline = killed + ttl + Duration::from_secs(15);
    while moved.len() < rooms.len() {
        let now = c.placements(&rooms).await;
        for (room, node) in now {
            if first.get(&room) != Some(&node) {
                moved.entry(room).or_insert_with(|| killed.elapsed());
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "rooms not taken over within TTL + 15 s: {moved:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The lease is renewed every third of its TTL (or oftener): the last renewal before the kill
    // was at most that long ago, so no lease could lapse before kill + TTL − TTL/3.
    let earliest = ttl - ttl / 3;
    eprintln!("taken over after {moved:?} (lease TTL {ttl:?}, earliest legal {earliest:?})");
    for (room, after) in &moved {
        assert!(
            *after + Duration::from_millis(100) >= earliest,
            "{room} taken over {after:?} after the kill: before its lease could lapse"
        );
    }
    let placed = c.placements(&rooms).await;
    let skewed_ids = [&c.nodes[ahead].name, &c.nodes[behind].name];
    assert!(
        placed
            .values()
            .all(|n| skewed_ids.iter().any(|s| n.starts_with(&format!("{s}.")))),
        "every room on a skewed node: {placed:?}"
    );
    let report = load.await.unwrap().unwrap();
    eprintln!(
        "corrections by reason {:?}, rejections {:?}",
        report.corrections_by_reason, report.rejections_by_reason
    );
    assert_fault_held("clock skew ±2 s + kill -9", &report, &c.event_logs());
    assert!(
        !report.corrections_by_reason.0.contains_key("CLOCK"),
        "a skewed node refused honest timestamps: {:?}",
        report.corrections_by_reason
    );
}
