//! A node's death keeps its rooms' state (issue 11 item 4; REQUIREMENTS.md F1 with G3): rooms
//! checkpoint their state to the directory every `room.checkpoint_interval_ms` (5 s shipped),
//! and the next activation after a kill -9 restores the latest checkpoint, brought up to date
//! from the audit log. Two clients in a room: a holds crate 1 and holds hands with b (active);
//! b has a "follow" request from a open. Right after a checkpoint is stored, b declines the
//! follow (audited after the checkpoint), and the room's node is killed -9. On the room's next
//! activation (another node, shipped defaults) both are back in session with their avatars, the
//! crate is still a's, the hand-hold still active, and the declined follow did not come back
//! (the audit log is the truth). No bot of the load around it is lost.

use std::time::Duration;

use plaza_proto::pb;
use plaza_tests::cluster::{Cluster, ClusterOpts, assert_fault_held};
use plaza_tests::{
    Client, assert_crate_1_still_held, consent, consent_state, hold_hands, pick_up_crate_1,
    pump_both_until, scrape_metrics, wait_event,
};

/// The node's `plaza_placement_events_total{event="checkpointed"}`.
async fn checkpoints(admin: std::net::SocketAddr) -> u64 {
    let text = scrape_metrics(admin).await.unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("plaza_placement_events_total{event=\"checkpointed\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_s_room_comes_back_from_its_checkpoint() {
    let mut c = Cluster::start(ClusterOpts {
        nodes: 2,
        ..ClusterOpts::default()
    })
    .await
    .unwrap();
    let cfg = c.load_config(40, 4, "ck-", 45);
    let bots = cfg.bots;
    let load = tokio::spawn(plaza_load::run(cfg));
    c.wait_all_online(bots).await;

    let room = "ck-state";
    let url = c.ws_url();
    let mut a = Client::connect(&url).await.unwrap();
    let ea = a.join(room).await.unwrap();
    let mut b = Client::connect(&url).await.unwrap();
    let eb = b.join(room).await.unwrap();
    pick_up_crate_1(&mut a, ea, &mut 1.0).await;
    let hold = hold_hands(&mut a, &mut b, eb).await;
    consent(&mut a, pb::ConsentOp::Request, "follow", eb, 0).await;
    let k = wait_event("follow requested", &mut b, |k| {
        consent_state(k).is_some_and(|s| s.1 == "requested" && s.0 != hold)
    })
    .await;
    let (follow, _) = consent_state(&k).unwrap();

    let victim = c.placements(&[room.to_owned()]).await[room].clone();
    let idx = c
        .node_index(&victim)
        .expect("the room's node is one of ours");
    // Wait for a checkpoint that has all of the above (two stored after the requests, so the
    // second was taken after them), then decline the follow right away: its audit record is
    // the only thing after the last checkpoint.
    let admin = c.nodes[idx].admin;
    let start = checkpoints(admin).await;
    let stored = pump_both_until(&mut a, &mut b, Duration::from_secs(15), |_, _| false).await;
    assert!(!stored);
    let now = checkpoints(admin).await;
    assert!(
        now >= start + 2,
        "checkpoints were stored every 5 s: {start} then {now} in 15 s"
    );
    let before = checkpoints(admin).await;
    while checkpoints(admin).await == before {
        pump_both_until(&mut a, &mut b, Duration::from_millis(50), |_, _| false).await;
    }
    consent(&mut b, pb::ConsentOp::Decline, "", 0, follow).await;
    wait_event("declined", &mut a, |k| {
        consent_state(k).is_some_and(|s| s == (follow, "declined".into()))
    })
    .await;
    c.nodes[idx].kill9();
    eprintln!("killed {victim} right after its checkpoint and the decline");

    let resumed = pump_both_until(&mut a, &mut b, Duration::from_secs(30), |a, b| {
        a.joins >= 2 && b.joins >= 2
    })
    .await;
    assert!(
        resumed,
        "a and b resumed in session: joins {} {}",
        a.joins, b.joins
    );
    assert_eq!(
        (a.entity, b.entity),
        (ea, eb),
        "same avatars after the crash"
    );
    // The crate is still a's.
    assert_crate_1_still_held(&mut b, "the crash").await;
    // The declined follow did not come back: consenting to it is refused.
    consent(&mut b, pb::ConsentOp::Consent, "", 0, follow).await;
    let k = wait_event("follow refused", &mut b, |k| {
        matches!(k, pb::event::Kind::Rejected(_))
    })
    .await;
    assert!(
        matches!(&k, pb::event::Kind::Rejected(r) if r.reason == "no_such_consent"),
        "the declined follow stays declined: {k:?}"
    );
    // The hand-hold is still active: releasing it is acknowledged to both.
    consent(&mut b, pb::ConsentOp::Release, "", 0, hold).await;
    wait_event("released", &mut a, |k| {
        consent_state(k).is_some_and(|s| s == (hold, "released".into()))
    })
    .await;
    // Exactly one audit record of the decline (nothing committed twice).
    let records = c.directory.audit_read(room, 1, 1000).await.unwrap();
    let declines = records
        .iter()
        .filter(|r| {
            r.kind == "consent.declined" && r.detail.contains(&format!("\"consent_id\":{follow}"))
        })
        .count();
    assert_eq!(declines, 1, "{records:#?}");
    let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "gap-free audit: {seqs:?}"
    );

    a.close().await;
    b.close().await;
    let report = load.await.unwrap().unwrap();
    assert_fault_held("kill -9 with checkpoints", &report, &c.event_logs());
}
