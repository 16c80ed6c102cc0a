//! Issue 12 item 8, compressed movement end to end: two `plaza-client` sessions in one room move
//! only with the seed's 160-bit `MovementCompressed` (`Connection::send_movement_compressed`):
//! the sender picks the velocity tier from the distance over the time since its last message
//! (walk → tier 0, jog → 1, run → 2), the first move is a placement (`is_instant` in the
//! compressed form), the head travels with only its yaw axis enabled. The room accepts every
//! move (no correction), each client sees the other where the other's quantized moves put it,
//! and the walker's own state is the pose its compressed moves carried.

use std::time::{Duration, Instant};

use plaza_client::Event;
use plaza_client::tokio::{Client, ClientOptions, Polled};
use plaza_proto::pb;
use plaza_tests::{start_plaza, test_config, ws_url};

const ROOM: &str = "compressed";

fn v3(a: [f32; 3]) -> Option<pb::Vec3> {
    Some(pb::Vec3 {
        x: a[0],
        y: a[1],
        z: a[2],
    })
}

/// What a mover saw and sent.
#[derive(Debug, Default)]
struct Run {
    entity: u32,
    spawn: [f32; 3],
    /// The velocity tier of every compressed move sent, in order.
    tiers: Vec<u8>,
    /// The position the last move carried (as the server reads it).
    last_sent: [f32; 3],
    corrections: Vec<pb::Correction>,
    /// The other client's entity as last seen in this client's frames (position, head).
    other_seen: Option<([f32; 3], Option<[i16; 2]>)>,
    /// The own state's position (the server's pose of this client) at the end.
    own: Option<[f32; 3]>,
    instant_first: bool,
}

/// Joins, places itself (a compressed `is_instant` move), then moves at each `(speed, secs)`
/// leg along +x, a move every 100 ms (each move's step is its speed times the time since the
/// last one, so distance over time is the leg's speed), all with compressed moves; head yaw
/// 30° enabled, pitch disabled. Then stands for 1.5 s and notes the other avatar it sees (the
/// one that is not itself) and its own state. Returns the client still connected.
async fn mover(url: String, legs: Vec<(f32, f32)>) -> (Run, Client) {
    let mut c = Client::connect(ClientOptions::new(url).room(ROOM))
        .await
        .expect("connects");
    let mut run = Run::default();
    let mut pos: Option<[f32; 3]> = None;
    let mut first = true;
    let mut next = Instant::now();
    let mut leg = 0usize;
    let mut leg_left = 0.0f32;
    let mut speed = 0.0f32;
    let mut last_t = 0.0f64;
    // Let the other client join before moving off (both are placed first).
    let mut settle = 10u32;
    loop {
        match c.next(Some(next)).await {
            Polled::Event(Event::Joined(j)) => {
                run.entity = j.entity;
                run.spawn = j.spawn;
                pos = Some(j.spawn);
            }
            Polled::Event(Event::Correction(k)) => run.corrections.push(k),
            Polled::Event(_) => {}
            Polled::Deadline => {
                next = Instant::now() + Duration::from_millis(100);
                let Some(p) = pos.as_mut() else {
                    continue;
                };
                let t = c.now();
                let dt = (t - last_t) as f32;
                last_t = t;
                if !first && settle > 0 {
                    settle -= 1;
                } else if !first {
                    if leg_left <= 0.0 {
                        if leg == legs.len() {
                            break;
                        }
                        (speed, leg_left) = legs[leg];
                        leg += 1;
                    }
                    leg_left -= dt;
                    p[0] += speed * dt;
                }
                let m = pb::Movement {
                    position: v3(*p),
                    velocity: v3([speed, 0.0, 0.0]),
                    rotation_y: 90.0,
                    movement_kind: if speed > 0.0 {
                        pb::MovementKind::Walk as i32
                    } else {
                        pb::MovementKind::Idle as i32
                    },
                    anim_flags: pb::AnimFlag::Grounded as u32,
                    head_ik_yaw_enabled: true,
                    head_ik_pitch_enabled: false,
                    head_yaw: 30.0,
                    head_pitch: 45.0,
                    is_instant: first,
                    timestamp: t,
                    // Ignored: the sender picks the tier.
                    velocity_tier: 3,
                    ..Default::default()
                };
                if let Some((_, d)) = c.connection_mut().send_movement_compressed(&m) {
                    if first {
                        run.instant_first = d.is_instant;
                    }
                    assert_eq!(d.head_enabled, [true, false]);
                    run.tiers.push(d.tier);
                    run.last_sent = d.pose.position;
                    first = false;
                }
            }
            Polled::Ended => panic!("mover ended"),
        }
    }
    // Stand still (the frames settle on the last move), watching the other.
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        match c.next(Some(until)).await {
            Polled::Event(Event::Correction(k)) => run.corrections.push(k),
            Polled::Ended => panic!("mover ended"),
            _ => {}
        }
    }
    let me = run.entity;
    let dec = c.connection().decoder();
    run.other_seen = dec
        .entities()
        .find(|r| r.kind == 0 && r.id != me)
        .map(|r| (r.pose.position_m(), r.pose.head));
    run.own = dec.own().map(|o| o.pose.position);
    (run, c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_moving_with_compressed_movement_see_each_other() {
    let plaza = start_plaza(&test_config()).await;
    let url = ws_url(&plaza);
    // The walker: 1.4 m/s (walk), 3.5 m/s (jog), 7 m/s (run), then stops; the other stands
    // (it still sends compressed moves), then walks a little so the walker sees a move too.
    // Both take 4 s and end standing.
    let walker = tokio::spawn(mover(
        url.clone(),
        vec![(1.4, 1.5), (3.5, 1.0), (7.0, 1.0), (0.0, 0.5)],
    ));
    let stander = tokio::spawn(mover(url, vec![(0.0, 1.5), (1.0, 1.5), (0.0, 1.0)]));
    let (w, mut wc) = walker.await.unwrap();
    let (s, sc) = stander.await.unwrap();

    // The instant bit reaches the room: a compressed placement 5 m away from where the walker
    // stands is refused as a teleport (a walk would be refused as too fast).
    let own = w.own.expect("an own state");
    let far = pb::Movement {
        position: v3([own[0] - 5.0, own[1], own[2]]),
        velocity: v3([0.0; 3]),
        anim_flags: pb::AnimFlag::Grounded as u32,
        is_instant: true,
        timestamp: wc.now(),
        ..Default::default()
    };
    let (_, d) = wc
        .connection_mut()
        .send_movement_compressed(&far)
        .expect("in the room");
    assert!(d.is_instant);
    let until = Instant::now() + Duration::from_secs(3);
    let mut refused = None;
    while refused.is_none() && Instant::now() < until {
        match wc.next(Some(until)).await {
            Polled::Event(Event::Correction(k)) => refused = Some(k),
            Polled::Ended => panic!("walker ended"),
            _ => {}
        }
    }
    let k = refused.expect("the placement is refused");
    assert_eq!(k.reason, pb::RejectReason::Teleport as i32, "{k:?}");
    wc.close().await;
    sc.close().await;

    for (name, r) in [("walker", &w), ("stander", &s)] {
        assert!(
            r.corrections.is_empty(),
            "{name}: every compressed move accepted: {:?}",
            r.corrections
        );
        assert!(
            r.instant_first,
            "{name}: the placement travelled as is_instant"
        );
        let own = r.own.expect("an own state");
        for i in [0, 2] {
            assert!(
                (own[i] - r.last_sent[i]).abs() < 0.02,
                "{name}: the server holds the compressed pose: {own:?} vs {:?}",
                r.last_sent
            );
        }
    }
    // The sender picked the tier from its speed: walk 0, jog 1, run 2 (the first move and the
    // settling moves stand: tier 0).
    let tiers = &w.tiers;
    assert_eq!(tiers[0], 0);
    for t in [0u8, 1, 2] {
        assert!(tiers.contains(&t), "tier {t} used: {tiers:?}");
    }
    assert!(!tiers.contains(&3), "{tiers:?}");
    // Tiers go up with the legs, and back to 0 when it stops.
    let last_run = tiers.iter().rposition(|&t| t == 2).unwrap();
    assert!(
        tiers[..=last_run].windows(2).all(|p| p[1] >= p[0]),
        "{tiers:?}"
    );
    assert!(tiers[last_run + 1..].iter().all(|&t| t == 0), "{tiers:?}");
    assert!(s.tiers.iter().all(|&t| t == 0), "{:?}", s.tiers);

    // Each sees the other where its compressed moves put it (the frame's mm of the server's
    // pose: within the contact offset), with the head yaw only (pitch disabled reads 0).
    for (viewer, other) in [("stander", (&s, &w)), ("walker", (&w, &s))] {
        let (v, o) = other;
        let (seen, head) = v
            .other_seen
            .unwrap_or_else(|| panic!("{viewer} sees the other"));
        for i in [0, 2] {
            assert!(
                (seen[i] - o.last_sent[i]).abs() < 0.03,
                "{viewer} sees {seen:?}, the other sent {:?}",
                o.last_sent
            );
        }
        let head = head.expect("the head travels");
        assert!((i32::from(head[0]) - 30).abs() <= 3, "head yaw {head:?}");
        assert_eq!(head[1], 0, "the disabled pitch reads 0");
    }
    // The walker went 2.1 + 3.5 + 7 m, the other 1.5 m.
    // (A leg ends at the first move past its time: up to one move's step longer.)
    let went = w.last_sent[0] - w.spawn[0];
    assert!(
        (12.5..14.0).contains(&went),
        "the walker went {went} m: {w:?}"
    );
    let went = s.last_sent[0] - s.spawn[0];
    assert!(
        (1.45..1.7).contains(&went),
        "the other went {went} m: {s:?}"
    );
    plaza.shutdown().await;
}
