//! The room is the authority, end to end through the gateway: consent with a durable, ordered,
//! gap-free audit trail that survives a room restart; pickup and place with ownership rules;
//! rejected moves corrected.

use std::time::Duration;

use plaza_proto::pb;
use plaza_room_actor::room::RoomMsg;
use plaza_tests::{
    Client, consent, consent_state, interaction, start_plaza, test_config, wait_event, walk,
    walk_from, ws_url,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consent_is_explicit_audited_in_order_and_survives_a_room_restart() {
    let plaza = start_plaza(&test_config()).await;
    let url = ws_url(&plaza);
    let mut a = Client::connect(&url).await.unwrap();
    let ea = a.join("consent").await.unwrap();
    let mut b = Client::connect(&url).await.unwrap();
    let eb = b.join("consent").await.unwrap();

    consent(&mut a, pb::ConsentOp::Request, "hand_hold", eb, 0).await;
    let k = wait_event("wait 1", &mut b, |k| {
        consent_state(k).is_some_and(|s| s.1 == "requested")
    })
    .await;
    let (id, _) = consent_state(&k).unwrap();
    // The requester cannot consent for the target: refused and audited.
    consent(&mut a, pb::ConsentOp::Consent, "", 0, id).await;
    let rej = wait_event("wait 2", &mut a, |k| {
        matches!(k, pb::event::Kind::Rejected(_))
    })
    .await;
    let pb::event::Kind::Rejected(r) = rej else {
        unreachable!()
    };
    assert_eq!(r.reason, "not_target");
    // Only the target consents; the requester activates; the target releases.
    consent(&mut b, pb::ConsentOp::Consent, "", 0, id).await;
    wait_event("wait 3", &mut a, |k| {
        consent_state(k).is_some_and(|s| s.1 == "consented")
    })
    .await;
    consent(&mut a, pb::ConsentOp::Activate, "", 0, id).await;
    wait_event("wait 4", &mut b, |k| {
        consent_state(k).is_some_and(|s| s.1 == "active")
    })
    .await;
    consent(&mut b, pb::ConsentOp::Release, "", 0, id).await;
    wait_event("wait 5", &mut a, |k| {
        consent_state(k).is_some_and(|s| s.1 == "released")
    })
    .await;

    let dir = plaza.directory().clone();
    let trail = dir.audit_read("consent", 1, 100).await.unwrap();
    let kinds: Vec<&str> = trail.iter().map(|r| r.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "consent.requested",
            "consent.refused",
            "consent.consented",
            "consent.active",
            "consent.released"
        ]
    );
    for (i, r) in trail.iter().enumerate() {
        assert_eq!(r.seq, i as u64 + 1, "gap-free per-room sequence");
    }
    let _ = ea;

    // The room restarts (a panic; the supervisor removes it, the gateway resumes both
    // sessions into a new activation). The trail survives and continues without a gap.
    let room = plaza
        .node()
        .unwrap()
        .rooms()
        .get_or_spawn("consent")
        .await
        .unwrap();
    room.cast(RoomMsg::Panic).unwrap();
    let ea2 = a.wait_joined().await.unwrap();
    let eb2 = b.wait_joined().await.unwrap();
    // Ask only once a sees b in the new activation.
    for _ in 0..100 {
        if a.decoder().get(eb2).is_some() {
            break;
        }
        a.recv().await.unwrap();
    }
    assert!(a.decoder().get(eb2).is_some(), "a sees b after the restart");
    consent(&mut a, pb::ConsentOp::Request, "follow", eb2, 0).await;
    a.pump_for(Duration::from_millis(200)).await.unwrap();
    let a_events = format!("{:?}", &a.events[a.events.len().saturating_sub(3)..]);
    let k = wait_event(
        &format!("wait 6 (a's last events {a_events})"),
        &mut b,
        |k| consent_state(k).is_some_and(|s| s.1 == "requested"),
    )
    .await;
    let (id2, _) = consent_state(&k).unwrap();
    consent(&mut b, pb::ConsentOp::Decline, "", 0, id2).await;
    wait_event("wait 7", &mut a, |k| {
        consent_state(k).is_some_and(|s| s.1 == "declined")
    })
    .await;
    let trail = dir.audit_read("consent", 1, 100).await.unwrap();
    assert_eq!(trail.len(), 7, "{trail:?}");
    for (i, r) in trail.iter().enumerate() {
        assert_eq!(r.seq, i as u64 + 1, "gap-free across the restart");
    }
    assert_eq!(trail[5].kind, "consent.requested");
    assert_eq!(trail[6].kind, "consent.declined");
    assert!(
        trail[5].epoch > trail[4].epoch,
        "the new activation has a newer epoch"
    );
    let _ = ea2;
    plaza.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pickup_and_place_follow_the_ownership_rules() {
    let plaza = start_plaza(&test_config()).await;
    let url = ws_url(&plaza);
    let mut a = Client::connect(&url).await.unwrap();
    let ea = a.join("props").await.unwrap();
    let mut b = Client::connect(&url).await.unwrap();
    b.join("props").await.unwrap();
    // Crate A is at (5, 0.25, 5); walk east of the fountain, then north.
    let mut ta = 1.0;
    walk(&mut a, [5.0, 0.0, -8.0], &mut ta).await;
    let mut tb = 1.0;
    // b stays far away: its pickup is out of reach.
    b.move_to(b.spawn, tb).await.unwrap();
    tb += 0.1;
    let _ = tb;
    let interact = |kind, pos, room| interaction(kind, 1, pos, room);
    // Out of reach from the south side.
    a.send(interact(pb::InteractionKind::Pickup, [0.0; 3], ""))
        .await
        .unwrap();
    let k = wait_event("wait 8", &mut a, |k| {
        matches!(k, pb::event::Kind::Rejected(_))
    })
    .await;
    assert!(
        matches!(&k, pb::event::Kind::Rejected(r) if r.reason == "out_of_reach"),
        "{k:?}"
    );
    walk_from(&mut a, [5.0, 0.0, -8.0], [5.0, 0.0, 3.6], &mut ta).await;
    // A pickup naming another room is refused.
    a.send(interact(pb::InteractionKind::Pickup, [0.0; 3], "elsewhere"))
        .await
        .unwrap();
    let k = wait_event("wait 9", &mut a, |k| {
        matches!(k, pb::event::Kind::Rejected(_))
    })
    .await;
    assert!(
        matches!(&k, pb::event::Kind::Rejected(r) if r.reason == "wrong_room"),
        "{k:?}"
    );
    a.send(interact(pb::InteractionKind::Pickup, [0.0; 3], ""))
        .await
        .unwrap();
    let k = wait_event("wait 10", &mut a, |k| matches!(k, pb::event::Kind::Prop(_))).await;
    let pb::event::Kind::Prop(p) = k else {
        unreachable!()
    };
    assert_eq!((p.prop_id, p.holder_entity), (1, ea));
    let rev = p.revision;
    // b is not the holder: it cannot place it.
    b.send(interact(pb::InteractionKind::Place, [5.0, 0.25, 4.0], ""))
        .await
        .unwrap();
    let k = wait_event("wait 11", &mut b, |k| {
        matches!(k, pb::event::Kind::Rejected(_))
    })
    .await;
    assert!(
        matches!(&k, pb::event::Kind::Rejected(r) if r.reason == "not_holder"),
        "{k:?}"
    );
    // The holder places it; the revision moves on.
    a.send(interact(pb::InteractionKind::Place, [5.0, 0.25, 4.5], ""))
        .await
        .unwrap();
    let k = wait_event(
        "wait 12",
        &mut a,
        |k| matches!(k, pb::event::Kind::Prop(p) if p.holder_entity == 0),
    )
    .await;
    let pb::event::Kind::Prop(p) = k else {
        unreachable!()
    };
    assert!(p.revision > rev);
    plaza.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teleport_hack_is_corrected() {
    let plaza = start_plaza(&test_config()).await;
    let mut a = Client::connect(&ws_url(&plaza)).await.unwrap();
    a.join("hack").await.unwrap();
    let s = a.spawn;
    a.move_to(s, 1.0).await.unwrap();
    a.move_to([s[0] + 20.0, s[1], s[2]], 1.1).await.unwrap();
    for _ in 0..100 {
        if !a.corrections.is_empty() {
            break;
        }
        a.recv().await.unwrap();
    }
    let c = a.corrections.first().expect("a correction");
    assert_eq!(c.reason, pb::RejectReason::Teleport as i32);
    let p = c.position.as_ref().unwrap();
    assert!((p.x - s[0]).abs() < 0.01 && (p.z - s[2]).abs() < 0.01);
    plaza.shutdown().await;
}
