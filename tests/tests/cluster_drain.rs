//! Multi-process drain: Redis + 3 nodes + 1 gateway (separate processes), bots in this
//! process. One node gets SIGTERM mid-run: it marks itself draining, stores each room's handoff
//! snapshot in the directory, stops its rooms and exits once empty; the gateway moves every
//! session to the rooms' next activations without a client disconnect.

use std::time::Duration;

use plaza_tests::cluster::{Cluster, ClusterOpts, check_single_activation, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_node_hands_its_rooms_off_without_disconnects() {
    let mut c = Cluster::start(ClusterOpts::default()).await.unwrap();
    let ttl = Duration::from_millis(c.opts().lease_ttl_ms);
    let cfg = c.load_config(60, 6, "dr-", 14);
    let (bots, rooms) = (cfg.bots, cfg.rooms);
    let room_ids: Vec<String> = (0..rooms).map(|i| format!("dr-{i}")).collect();
    let load = tokio::spawn(plaza_load::run(cfg));
    let online = wait_until(Duration::from_secs(30), || async {
        c.peers_count().await.unwrap_or(0) == bots
    })
    .await;
    assert!(online.is_some(), "bots never all online");

    let by_node = c.presence_by_node().await.unwrap();
    let (victim, affected) = by_node
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(id, n)| (id.clone(), *n))
        .expect("some node hosts sessions");
    let placed = c.placements(&room_ids).await;
    let moved_rooms: Vec<String> = placed
        .iter()
        .filter(|(_, n)| **n == victim)
        .map(|(r, _)| r.clone())
        .collect();
    let idx = c.node_index(&victim).expect("victim is one of ours");
    c.nodes[idx].sigterm().unwrap();
    eprintln!("SIGTERM to {victim} hosting {affected} sessions in rooms {moved_rooms:?}");

    // The node exits by itself once its rooms are gone.
    let status = c.nodes[idx].wait_exit(Duration::from_secs(40)).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "draining node did not exit cleanly: {status:?}\n{}",
        c.nodes[idx].log_tail(30)
    );
    let back = wait_until(ttl + Duration::from_secs(5), || async {
        let Ok(m) = c.presence_by_node().await else {
            return false;
        };
        !m.contains_key(&victim) && m.values().sum::<usize>() == bots
    })
    .await;
    assert!(
        back.is_some(),
        "sessions not moved: {:?}",
        c.presence_by_node().await
    );
    let now = c.placements(&room_ids).await;
    for r in &moved_rooms {
        assert!(
            now.get(r).is_some_and(|n| *n != victim),
            "{r} not moved: {now:?}"
        );
    }

    let report = load.await.unwrap().unwrap();
    eprintln!(
        "moved in {back:?}; load: lost {} resumes {} (in session {}) resume_ms p50 {:.0} max {:.0} \
         close codes {:?}",
        report.bots_lost,
        report.resumes,
        report.resumes_in_session,
        report.resume_ms.p50,
        report.resume_ms.max,
        report.close_codes
    );
    assert_eq!(report.bots_failed, 0);
    assert_eq!(report.bots_lost, 0);
    // 0 disconnects: every resume happened inside the session (no reconnect with a token).
    assert_eq!(report.resumes, report.resumes_in_session, "{report:?}");
    assert!(report.resumes_in_session as usize >= affected);

    let sum = check_single_activation(&c.event_logs()).unwrap();
    eprintln!("event logs: {sum:?}");
    assert!(
        sum.handoffs_taken >= moved_rooms.len(),
        "every moved room took its handoff snapshot: {sum:?}"
    );
}
