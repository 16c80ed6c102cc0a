//! Multi-process failover: Redis + 3 `plaza node` processes + 1 `plaza gateway` process on
//! loopback, bots from `plaza-load` in this process. One node is killed with SIGKILL mid-run:
//! its rooms' leases lapse, the rooms are re-placed on live nodes at the gateway's next attach,
//! and the gateway resumes every affected session itself (the bots stay connected). The nodes'
//! event logs must show that no two epochs of a room committed at once, and after the bots
//! leave `GET /v1/peers` must empty within lease TTL + sweep interval.
//!
//! Default size: 60 bots / 6 rooms / 24 s with the shipped lease, TTL and sweep;
//! `scripts/cluster-soak.sh` runs 300 bots.

use std::time::Duration;

use plaza_proto::pb;
use plaza_proto::pb::server_envelope::Body;
use plaza_tests::Client;
use plaza_tests::cluster::{Cluster, ClusterOpts, assert_fault_held, wait_until};

/// What the probe client saw across the failover.
#[derive(Debug)]
struct ProbeSeen {
    wallet_before: String,
    wallet_after: String,
    entity_before: u32,
    entity_after: u32,
    first_frame_after_is_keyframe: bool,
    frame_errors: u32,
    /// A `RoomStatus` MOVING, then BACK, reached the client.
    told_moving_and_back: bool,
    /// Pings answered between MOVING and the new `Joined`.
    pongs_while_moving: u32,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_s_sessions_resume_on_live_nodes() {
    let mut c = Cluster::start(ClusterOpts::default()).await.unwrap();
    let ttl = Duration::from_millis(c.opts().lease_ttl_ms);
    let sweep = Duration::from_millis(c.opts().sweep_interval_ms);
    let cfg = c.load_config(60, 6, "fo-", 24);
    let (bots, rooms) = (cfg.bots, cfg.rooms);
    let room_ids: Vec<String> = (0..rooms).map(|i| format!("fo-{i}")).collect();
    let load = tokio::spawn(plaza_load::run(cfg));

    // Every bot online (presence registered through its room).
    c.wait_all_online(bots).await;

    // Kill the node with the most sessions.
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
    // A probe client in one of the victim's rooms, reading through the failover.
    let mut probe = Client::connect(&c.ws_url()).await.unwrap();
    let wallet_before = probe.wallet.clone();
    let entity_before = probe.join(&moved_rooms[0]).await.unwrap();
    let probe = tokio::spawn(async move {
        // Frames until the failover's Joined (same connection, no close), pinging every second
        // like a client does: the gateway answers while the room moves.
        let (mut moving, mut back, mut pongs_while_moving) = (false, false, 0u32);
        let mut t = 0u64;
        let mut next_ping = tokio::time::Instant::now();
        loop {
            if tokio::time::Instant::now() >= next_ping {
                t += 1;
                next_ping += Duration::from_secs(1);
                probe
                    .send(pb::client_envelope::Body::Ping(pb::Ping {
                        client_time_ms: t,
                    }))
                    .await?;
            }
            let Ok(got) = tokio::time::timeout_at(next_ping, probe.recv()).await else {
                continue;
            };
            match got? {
                Some(Body::Joined(_)) => break,
                Some(Body::RoomStatus(s)) => match pb::RoomStatusKind::try_from(s.kind) {
                    Ok(pb::RoomStatusKind::Moving) => moving = true,
                    Ok(pb::RoomStatusKind::Back) => back = true,
                    _ => {}
                },
                Some(Body::Pong(_)) if moving => pongs_while_moving += 1,
                Some(_) => {}
                None => anyhow::bail!("probe closed: {:?}", probe.errors),
            }
        }
        let entity_after = probe.entity;
        let n = probe.frames.len();
        // ...then the first frame of the new activation.
        while probe.frames.len() == n {
            match probe.recv().await? {
                Some(Body::RoomStatus(_)) => back = true,
                Some(_) => {}
                None => anyhow::bail!("probe closed after rejoin"),
            }
        }
        let seen = ProbeSeen {
            wallet_before,
            wallet_after: probe.wallet.clone(),
            entity_before,
            entity_after,
            first_frame_after_is_keyframe: probe.frames[n].keyframe,
            frame_errors: probe.frame_errors,
            told_moving_and_back: moving && back,
            pongs_while_moving,
        };
        probe.close().await;
        Ok(seen)
    });
    let idx = c.node_index(&victim).expect("victim is one of ours");
    c.nodes[idx].kill9();
    eprintln!("killed {victim} hosting {affected} sessions in rooms {moved_rooms:?}");

    // Every affected session is back in its room on a live node within lease TTL + 5 s.
    // (Waited for longer than the bound, so a miss says by how much.)
    let back = wait_until(ttl * 3, || async {
        let Ok(m) = c.presence_by_node().await else {
            return false;
        };
        !m.contains_key(&victim) && m.values().sum::<usize>() >= bots
    })
    .await;
    eprintln!("presence whole again after {back:?}");
    assert!(
        back.is_some_and(|b| b <= ttl + Duration::from_secs(5)),
        "sessions not resumed within lease TTL + 5 s ({back:?}): {:?}\ngateway log:\n{}",
        c.presence_by_node().await,
        c.gateway.log_tail(20)
    );
    let now = c.placements(&room_ids).await;
    for r in &moved_rooms {
        assert!(
            now.get(r).is_some_and(|n| *n != victim),
            "{r} not re-placed: {now:?}"
        );
    }
    // The probe stayed connected, got Joined and a keyframe, kept its identity.
    let seen = probe.await.unwrap().unwrap();
    eprintln!("probe: {seen:?}");
    assert_eq!(seen.wallet_before, seen.wallet_after);
    assert!(seen.first_frame_after_is_keyframe, "{seen:?}");
    assert_eq!(seen.frame_errors, 0, "{seen:?}");
    // The session kept living while its room moved (issue 11).
    assert!(seen.told_moving_and_back, "{seen:?}");
    assert!(seen.pongs_while_moving >= 1, "{seen:?}");
    // ... and its entity: the gateway asks the new activation for it (`resume_entity`).
    assert_eq!(seen.entity_before, seen.entity_after, "{seen:?}");

    let report = load.await.unwrap().unwrap();
    eprintln!("resumed in {back:?}");
    // No bot lost or failed, no 4004, ping RTT p99 < 1 s through the kill, single activation.
    let sum = assert_fault_held("node kill -9", &report, &c.event_logs());
    assert!(
        report.resumes_in_session as usize >= affected,
        "every affected bot resumed in session: {} < {affected}",
        report.resumes_in_session
    );
    // From each bot's last frame before the kill to its new `Joined`: within lease TTL + 5 s.
    assert!(
        report.resume_ms.p99 <= (ttl + Duration::from_secs(5)).as_millis() as f64,
        "resume_ms p99 {:.0} over lease TTL + 5 s",
        report.resume_ms.p99
    );

    // Single activation held on the event logs of every node (the killed one's included), and
    // the moved rooms committed under a second epoch.
    assert!(
        sum.rooms_with_several_epochs >= moved_rooms.len(),
        "{sum:?}"
    );

    // Bots left at the end of the run: presence empties within lease TTL + sweep interval.
    let empty = c.assert_presence_empties(ttl + sweep).await;
    eprintln!("peers empty {empty:?} after the run ended");
}
