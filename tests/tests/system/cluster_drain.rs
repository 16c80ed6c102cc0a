//! Multi-process drain: Redis + 3 nodes + 1 gateway (separate processes), bots in this
//! process. One node gets SIGTERM mid-run: it marks itself draining, stores each room's handoff
//! state in the directory, stops its rooms and exits once empty; the gateway moves every
//! session to the rooms' next activations without a client disconnect. Two test clients in a
//! room of the drained node hold a prop and hands before the drain: after it, on another node,
//! the prop is still held by the same avatar and the hand-hold is still active. No bot is lost,
//! no session is closed 4004, and the bots' ping RTT p99 stays under 1 s.
//!
//! Run on the shipped defaults and as an extra fast variant (lease TTL 2 s).

use std::time::Duration;

use plaza_proto::pb::{self, InteractionKind};
use plaza_tests::cluster::{Cluster, ClusterOpts, assert_fault_held, wait_until};
use plaza_tests::{
    Client, assert_crate_1_still_held, consent, consent_state, hold_hands, interaction,
    pick_up_crate_1, pump_both_until, wait_event,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_node_hands_its_rooms_off_without_disconnects() {
    drain(ClusterOpts::default(), "dr-").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_node_hands_its_rooms_off_without_disconnects_fast() {
    drain(ClusterOpts::fast(), "dq-").await;
}

async fn drain(opts: ClusterOpts, prefix: &str) {
    let state_room = format!("{prefix}state");
    let state_room = state_room.as_str();
    let mut c = Cluster::start(opts).await.unwrap();
    let ttl = Duration::from_millis(c.opts().lease_ttl_ms);
    let cfg = c.load_config(60, 6, prefix, 24);
    let (bots, rooms) = (cfg.bots, cfg.rooms);
    let room_ids: Vec<String> = (0..rooms).map(|i| format!("{prefix}{i}")).collect();
    let load = tokio::spawn(plaza_load::run(cfg));
    c.wait_all_online(bots).await;

    // a holds crate 1 and holds hands with b (active).
    let url = c.ws_url();
    let mut a = Client::connect(&url).await.unwrap();
    let ea = a.join(state_room).await.unwrap();
    let mut b = Client::connect(&url).await.unwrap();
    let eb = b.join(state_room).await.unwrap();
    let p = pick_up_crate_1(&mut a, ea, &mut 1.0).await;
    let rev = p.revision;
    let hold = hold_hands(&mut a, &mut b, eb).await;
    assert_eq!((a.joins, b.joins), (1, 1));

    // The victim is the node hosting the two clients' room.
    let by_node = c.presence_by_node().await.unwrap();
    let state_node = c.placements(&[state_room.to_owned()]).await;
    let victim = state_node[state_room].clone();
    // Bot sessions on it (a and b are not bots).
    let affected = by_node[&victim] - 2;
    let placed = c.placements(&room_ids).await;
    let moved_rooms: Vec<String> = placed
        .iter()
        .filter(|(_, n)| **n == victim)
        .map(|(r, _)| r.clone())
        .collect();
    let idx = c.node_index(&victim).expect("victim is one of ours");
    c.nodes[idx].sigterm().unwrap();
    eprintln!("SIGTERM to {victim} hosting {affected} sessions in rooms {moved_rooms:?}");

    // The node exits by itself once its rooms are gone; a and b stay connected throughout.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    let status = loop {
        pump_both_until(&mut a, &mut b, Duration::from_millis(100), |_, _| false).await;
        if let Some(s) = c.nodes[idx].wait_exit(Duration::from_millis(1)).await {
            break Some(s);
        }
        if tokio::time::Instant::now() > deadline {
            break None;
        }
    };
    assert!(
        status.is_some_and(|s| s.success()),
        "draining node did not exit cleanly: {status:?}\n{}",
        c.nodes[idx].log_tail(30)
    );
    // a and b were moved inside their connections, kept their avatars, and the room's state
    // came with them: the crate is still a's, the hand-hold still active.
    let resumed = pump_both_until(&mut a, &mut b, Duration::from_secs(10), |a, b| {
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
        "same avatars after the move"
    );
    assert_crate_1_still_held(&mut b, "the move").await;
    a.send(interaction(InteractionKind::Place, 1, [5.0, 0.25, 4.5], ""))
        .await
        .unwrap();
    let k = wait_event(
        "placed",
        &mut a,
        |k| matches!(k, pb::event::Kind::Prop(p) if p.holder_entity == 0),
    )
    .await;
    let pb::event::Kind::Prop(p) = k else {
        unreachable!()
    };
    assert!(p.revision > rev, "prop revisions continue");
    consent(&mut b, pb::ConsentOp::Release, "", 0, hold).await;
    wait_event("released", &mut a, |k| {
        consent_state(k).is_some_and(|s| s == (hold, "released".into()))
    })
    .await;

    let back = wait_until(ttl + Duration::from_secs(5), || async {
        let Ok(m) = c.presence_by_node().await else {
            return false;
        };
        !m.contains_key(&victim) && m.values().sum::<usize>() == bots + 2
    })
    .await;
    assert!(
        back.is_some(),
        "sessions not moved: {:?}",
        c.presence_by_node().await
    );
    a.close().await;
    b.close().await;
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

    let sum = assert_fault_held("drain", &report, &c.event_logs());
    assert!(
        sum.handoffs_taken >= moved_rooms.len(),
        "every moved room took its handoff state: {sum:?}"
    );
}
