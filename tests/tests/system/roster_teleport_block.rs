//! Issue 12, items 1, 2 and 5 end to end: Redis + 3 node processes + a gateway process (the
//! shipped timing defaults), three real clients in one room.
//!
//! * Roster: each client learns the others' wallets and announced display names.
//! * Teleport: a client walks into a portal of the room definition (the default plaza plus a
//!   portal, given to the nodes as `room.definition`), later asks for a named destination; each
//!   time the others see the instant bit on the mover's record and the mover's next move from
//!   the new place is accepted.
//! * Block: A blocks B; from the next broadcast on neither is in the other's frames; B's consent
//!   request to A is refused ("blocked"); the block is in the room's durable audit log.
//! * Drain: the node hosting the room gets SIGTERM; after the clients are moved (inside their
//!   connections) the block still holds, the names are still known (not announced again), and a
//!   teleport still snaps.

use std::collections::BTreeMap;
use std::time::Duration;

use plaza_proto::pb::{self, client_envelope, server_envelope};
use plaza_proto::quant::ANIM_INSTANT;
use plaza_tests::cluster::{Cluster, ClusterOpts};
use plaza_tests::{Client, consent, wait_event, walk_from};

const ROOM: &str = "rtb-room";

/// What `c` holds of the roster, folded from every roster event it received (in order; a
/// `full` update replaces everything).
fn roster(c: &Client) -> BTreeMap<u32, pb::RosterEntry> {
    let mut held = BTreeMap::new();
    for e in &c.events {
        if let Some(pb::event::Kind::Roster(r)) = &e.kind {
            if r.full {
                held.clear();
            }
            for id in &r.removed {
                held.remove(id);
            }
            for u in &r.upserts {
                held.insert(u.entity_id, u.clone());
            }
        }
    }
    held
}

/// Pumps every client for `d` (they must stay connected).
async fn pump_all(clients: &mut [&mut Client], d: Duration) {
    for c in clients.iter_mut() {
        c.pump_for(d).await.expect("client stays connected");
    }
}

/// Pumps every client until `done` holds (or `timeout` passes); returns whether it held.
async fn pump_until(
    clients: &mut [&mut Client],
    timeout: Duration,
    mut done: impl FnMut(&[&mut Client]) -> bool,
) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < deadline {
        pump_all(clients, Duration::from_millis(40)).await;
        if done(clients) {
            return true;
        }
    }
    false
}

async fn profile(c: &mut Client, version: u64, name: &str) {
    c.send(client_envelope::Body::Profile(pb::ProfileAnnouncement {
        version,
        display_name: name.into(),
    }))
    .await
    .unwrap();
}

/// Whether `viewer`'s roster names `who` (its entity, wallet and display name).
fn knows(viewer: &Client, who: &Client, name: &str) -> bool {
    roster(viewer)
        .get(&who.entity)
        .is_some_and(|e| e.wallet == who.wallet && e.display_name == name)
}

/// The room definition of this test's nodes: the default plaza plus a portal "gate" at
/// (6, 0, -8), radius 1 m, to the spawn point "stage".
fn definition_with_portal(dir: &std::path::Path) -> std::path::PathBuf {
    let base = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../physics/rooms/plaza.toml"),
    )
    .expect("the default plaza definition");
    let path = dir.join("plaza-with-portal.toml");
    std::fs::write(
        &path,
        format!(
            "{base}\n[[portals]]\nname = \"gate\"\nposition = [6.0, 0.0, -8.0]\nradius = 1.0\n\
             target = \"stage\"\n"
        ),
    )
    .unwrap();
    path
}

/// `mover` asks for `destination`; see [`check_teleport`].
async fn teleport_and_check(
    mover: &mut Client,
    watcher: &mut Client,
    destination: &str,
    t: &mut f64,
) -> [f32; 3] {
    let from = mover.events.len();
    mover
        .send(client_envelope::Body::Teleport(pb::TeleportRequest {
            destination: destination.into(),
        }))
        .await
        .unwrap();
    check_teleport(
        mover,
        watcher,
        from,
        destination,
        pb::TeleportCause::Request,
        t,
    )
    .await
}

/// The mover was teleported (its `Teleported` event is among its events from index `from`, or
/// still to come): checks the event, that `watcher` sees the mover's record with the instant bit
/// at the new place in one of its frames, and that the mover's next move (0.3 m on from there) is
/// accepted. Returns where that move went.
async fn check_teleport(
    mover: &mut Client,
    watcher: &mut Client,
    from: usize,
    destination: &str,
    cause: pb::TeleportCause,
    t: &mut f64,
) -> [f32; 3] {
    let corrections = mover.corrections.len();
    let held = mover.events[from..].iter().find_map(|e| match &e.kind {
        Some(pb::event::Kind::Teleported(tp)) => Some(tp.clone()),
        _ => None,
    });
    let tp = match held {
        Some(tp) => tp,
        None => {
            let k = wait_event("teleported (mover)", mover, |k| {
                matches!(k, pb::event::Kind::Teleported(_))
            })
            .await;
            let pb::event::Kind::Teleported(tp) = k else {
                unreachable!()
            };
            tp
        }
    };
    assert_eq!(tp.entity_id, mover.entity);
    assert_eq!(tp.destination, destination);
    assert_eq!(tp.cause, cause as i32);
    let p = tp.position.expect("a position");
    let at = [p.x, p.y, p.z];
    // The watcher's frames: one shows the mover at the new place with the instant bit.
    let mut snapped = false;
    let mut teleported_event = false;
    for _ in 0..200 {
        match watcher.recv().await.unwrap() {
            Some(server_envelope::Body::SnapshotFrame(_)) => {
                if let Some(r) = watcher.decoder().get(mover.entity)
                    && r.pose.anim_flags & ANIM_INSTANT != 0
                {
                    let q = r.pose.position_m();
                    assert!(
                        (q[0] - at[0]).abs() < 0.05 && (q[2] - at[2]).abs() < 0.05,
                        "the instant record shows the new place: {q:?} vs {at:?}"
                    );
                    snapped = true;
                }
            }
            Some(server_envelope::Body::Event(pb::Event {
                kind: Some(pb::event::Kind::Teleported(w)),
                ..
            })) if w.entity_id == mover.entity => teleported_event = true,
            Some(_) => {}
            None => panic!("watcher closed"),
        }
        if snapped && teleported_event {
            break;
        }
    }
    assert!(snapped, "the watcher saw the instant bit");
    assert!(teleported_event, "the watcher was told");
    // The mover walks on from the new place: accepted (no correction), and its own state says so.
    let next = [at[0] + 0.3, at[1], at[2]];
    *t += 0.1;
    mover.move_to(next, *t).await.unwrap();
    let moved = pump_until(&mut [mover], Duration::from_secs(3), |c| {
        c[0].decoder()
            .own()
            .is_some_and(|o| (o.pose.position[0] - next[0]).abs() < 0.01)
    })
    .await;
    assert!(moved, "the move after the teleport was applied");
    assert_eq!(
        mover.corrections.len(),
        corrections,
        "no correction: {:?}",
        &mover.corrections[corrections..]
    );
    next
}

/// Whether `viewer`'s frames hold `other`'s avatar.
fn sees(viewer: &Client, other: &Client) -> bool {
    viewer.decoder().get(other.entity).is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roster_teleport_and_blocks_work_end_to_end_and_survive_a_drain() {
    let dir = std::env::temp_dir().join(format!("plaza-rtb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let definition = definition_with_portal(&dir);
    let mut c = Cluster::start(ClusterOpts {
        env: vec![(
            "PLAZA__ROOM__DEFINITION".into(),
            definition.display().to_string(),
        )],
        ..ClusterOpts::default()
    })
    .await
    .unwrap();
    let url = c.ws_url();
    let mut a = Client::connect(&url).await.unwrap();
    a.join(ROOM).await.unwrap();
    let mut b = Client::connect(&url).await.unwrap();
    b.join(ROOM).await.unwrap();
    let mut w = Client::connect(&url).await.unwrap();
    w.join(ROOM).await.unwrap();
    let (mut ta, mut tb, mut tw) = (1.0, 1.0, 1.0);
    for (cl, t) in [(&mut a, &mut ta), (&mut b, &mut tb), (&mut w, &mut tw)] {
        let s = cl.spawn;
        cl.move_to(s, *t).await.unwrap();
    }

    // Roster: wallets at once, names once announced.
    profile(&mut a, 1, "Ana").await;
    profile(&mut b, 3, "Bo").await;
    let named = pump_until(
        &mut [&mut a, &mut b, &mut w],
        Duration::from_secs(5),
        |cl| {
            let (a, b, w) = (&*cl[0], &*cl[1], &*cl[2]);
            knows(a, b, "Bo") && knows(b, a, "Ana") && knows(w, a, "Ana") && knows(w, b, "Bo")
        },
    )
    .await;
    assert!(
        named,
        "rosters: a {:?} b {:?} w {:?}",
        roster(&a),
        roster(&b),
        roster(&w)
    );
    assert_eq!(roster(&a)[&b.entity].profile_version, 3);
    // A lower version is dropped: the name stays.
    profile(&mut b, 2, "Old").await;
    pump_all(&mut [&mut a, &mut b, &mut w], Duration::from_millis(300)).await;
    assert!(knows(&a, &b, "Bo"));
    // The directory has the announced version (the production caller of announce_profile).
    let peers = c.directory.peers(Some(&[b.wallet.clone()])).await.unwrap();
    assert_eq!(
        peers.first().map(|p| p.profile_version),
        Some(3),
        "{peers:?}"
    );

    // a walks into the portal: the server sends it to the stage; w sees the instant bit; a's
    // next move, from the stage, is accepted.
    let from = a.events.len();
    let spawn_a = a.spawn;
    walk_from(&mut a, spawn_a, [5.2, 0.0, -8.0], &mut ta).await;
    let at = check_teleport(
        &mut a,
        &mut w,
        from,
        "stage",
        pb::TeleportCause::Portal,
        &mut ta,
    )
    .await;
    assert!((at[2] - 20.0).abs() < 0.5, "on the stage: {at:?}");
    // A named destination the room allows: w sees the instant bit again.
    teleport_and_check(&mut a, &mut w, "stage", &mut ta).await;
    // Back near the others, so that a and b would see each other if not blocked.
    teleport_and_check(&mut a, &mut w, "entrance", &mut ta).await;
    let both = pump_until(
        &mut [&mut a, &mut b, &mut w],
        Duration::from_secs(3),
        |cl| sees(cl[0], cl[1]) && sees(cl[1], cl[0]),
    )
    .await;
    assert!(both, "a and b see each other before the block");

    // A blocks B: the acknowledgement, then neither in the other's next frame.
    a.send(client_envelope::Body::Block(pb::BlockAction {
        op: pb::BlockOp::Block as i32,
        target_entity: b.entity,
        target_wallet: String::new(),
    }))
    .await
    .unwrap();
    let k = wait_event("block ack", &mut a, |k| {
        matches!(k, pb::event::Kind::Block(_))
    })
    .await;
    assert_eq!(
        k,
        pb::event::Kind::Block(pb::BlockEvent {
            target_wallet: b.wallet.clone(),
            target_entity: b.entity,
            blocked: true,
        })
    );
    // The next frame a gets is of the next broadcast (or later): b is gone from it.
    loop {
        if let Some(server_envelope::Body::SnapshotFrame(_)) = a.recv().await.unwrap() {
            break;
        }
    }
    assert!(!sees(&a, &b), "b left a's frames within one broadcast");
    let gone = pump_until(&mut [&mut b], Duration::from_millis(200), |cl| {
        !sees(cl[0], &a)
    })
    .await;
    assert!(gone, "a left b's frames");
    assert!(!roster(&a).contains_key(&b.entity) && !roster(&b).contains_key(&a.entity));
    assert!(sees(&w, &a) && sees(&w, &b), "the block is theirs only");

    // B's consent request to A is refused.
    consent(&mut b, pb::ConsentOp::Request, "hand_hold", a.entity, 0).await;
    let k = wait_event("refused", &mut b, |k| {
        matches!(k, pb::event::Kind::Rejected(_))
    })
    .await;
    assert!(
        matches!(&k, pb::event::Kind::Rejected(r) if r.reason == "blocked"),
        "{k:?}"
    );
    // The block is in the durable audit log.
    let log = c.directory.audit_read(ROOM, 0, 100).await.unwrap();
    let added: Vec<_> = log.iter().filter(|r| r.kind == "block.added").collect();
    assert_eq!(added.len(), 1, "{log:?}");
    assert!(
        added[0]
            .detail
            .contains(&format!(r#""blocker":"{}""#, a.wallet))
    );
    assert!(
        added[0]
            .detail
            .contains(&format!(r#""blocked":"{}""#, b.wallet))
    );

    // Drain the node hosting the room.
    let victim = c.placements(&[ROOM.to_owned()]).await[ROOM].clone();
    let idx = c.node_index(&victim).expect("one of ours");
    c.nodes[idx].sigterm().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        pump_all(&mut [&mut a, &mut b, &mut w], Duration::from_millis(50)).await;
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
    let moved = pump_until(
        &mut [&mut a, &mut b, &mut w],
        Duration::from_secs(20),
        |cl| cl.iter().all(|x| x.joins >= 2),
    )
    .await;
    assert!(
        moved,
        "moved in session: joins {} {} {}",
        a.joins, b.joins, w.joins
    );
    let now = c.placements(&[ROOM.to_owned()]).await;
    assert_ne!(
        now.get(ROOM),
        Some(&victim),
        "the room runs elsewhere: {now:?}"
    );

    // After the drain: names still known (from the handoff state, not announced again), the
    // block still holds, consents still refused, teleports still snap.
    let settled = pump_until(
        &mut [&mut a, &mut b, &mut w],
        Duration::from_secs(5),
        |cl| {
            let (a, b, w) = (&*cl[0], &*cl[1], &*cl[2]);
            knows(w, a, "Ana") && knows(w, b, "Bo") && sees(w, a) && sees(w, b)
        },
    )
    .await;
    assert!(settled, "w's roster after the drain: {:?}", roster(&w));
    pump_all(&mut [&mut a, &mut b, &mut w], Duration::from_millis(300)).await;
    assert!(
        !sees(&a, &b) && !sees(&b, &a),
        "the block survived the drain"
    );
    assert!(!roster(&a).contains_key(&b.entity) && !roster(&b).contains_key(&a.entity));
    consent(&mut b, pb::ConsentOp::Request, "hand_hold", a.entity, 0).await;
    let k = wait_event("refused after drain", &mut b, |k| {
        matches!(k, pb::event::Kind::Rejected(_))
    })
    .await;
    assert!(
        matches!(&k, pb::event::Kind::Rejected(r) if r.reason == "blocked"),
        "{k:?}"
    );
    // The mover's reference time came with the handoff: its moves go on from where it is.
    let here = a.decoder().own().expect("own state").pose.position;
    ta += 0.1;
    a.move_to([here[0] + 0.2, here[1], here[2]], ta)
        .await
        .unwrap();
    teleport_and_check(&mut a, &mut w, "stage", &mut ta).await;

    // Unblock by wallet: they see each other again.
    a.send(client_envelope::Body::Block(pb::BlockAction {
        op: pb::BlockOp::Unblock as i32,
        target_entity: 0,
        target_wallet: b.wallet.clone(),
    }))
    .await
    .unwrap();
    wait_event(
        "unblock ack",
        &mut a,
        |k| matches!(k, pb::event::Kind::Block(e) if !e.blocked),
    )
    .await;
    let log = c.directory.audit_read(ROOM, 0, 100).await.unwrap();
    assert!(log.iter().any(|r| r.kind == "block.removed"), "{log:?}");
    // The room's node counts what happened by kind (no ids in the labels).
    let host = c.placements(&[ROOM.to_owned()]).await[ROOM].clone();
    let n = c.node_index(&host).expect("one of ours");
    let metrics = plaza_tests::scrape_metrics(c.nodes[n].admin).await.unwrap();
    let count = |kind: &str| -> f64 {
        let key = format!("plaza_room_people_events_total{{event=\"{kind}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&key))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    assert!(count("teleport") >= 1.0, "{metrics}");
    assert!(
        count("block_change") >= 1.0 && count("roster_update") >= 1.0,
        "{metrics}"
    );
    a.close().await;
    b.close().await;
    w.close().await;
}
