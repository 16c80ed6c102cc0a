//! Teleports: the operator API, portals, requests, and the instant bit in frames.

use std::collections::BTreeMap;

use plaza_physics::{Portal, SpawnPoint};
use plaza_proto::frame::FrameDecoder;
use plaza_proto::quant::{ANIM_INSTANT, Pose};

use crate::events::{EventBody, Refusal, TeleportCause};
use crate::test_support::refusals;
use crate::{Input, MoveInput, Outbound, RejectReason, Room, RoomConfig, SessionId};

fn mv(seq: u32, p: [f32; 3], t: f64) -> Input {
    Input::Move(MoveInput {
        seq,
        pose: Pose {
            position: p,
            velocity: [0.0; 3],
            yaw_deg: 0.0,
            movement_kind: 1,
            ..Pose::default()
        },
        timestamp_s: t,
        is_instant: false,
        timestamp_period_s: None,
    })
}

/// A plaza with a requestable spawn point "stage", a private one "backstage", and a portal
/// "gate" at (6, 0, -8) that leads to "stage".
fn portal_config() -> RoomConfig {
    let mut cfg = RoomConfig::default();
    cfg.definition.spawn_points = vec![
        SpawnPoint {
            name: "stage".into(),
            position: [-20.0, 0.0, 20.0],
            yaw_deg: 180.0,
            requestable: true,
        },
        SpawnPoint {
            name: "backstage".into(),
            position: [20.0, 0.0, 20.0],
            yaw_deg: 0.0,
            requestable: false,
        },
    ];
    cfg.definition.portals = vec![Portal {
        name: "gate".into(),
        position: [6.0, 0.0, -8.0],
        radius: 1.0,
        target: "stage".into(),
    }];
    cfg.definition.validate().expect("a valid definition");
    cfg
}

/// Runs one step (and the broadcast it brings), feeding frames into the decoders.
fn step(
    room: &mut Room,
    now: &mut u64,
    decoders: &mut BTreeMap<SessionId, FrameDecoder>,
) -> Vec<Outbound> {
    let mut out = Vec::new();
    *now += 20;
    room.advance(crate::test_support::ms(*now), &mut out);
    feed(&out, decoders);
    out
}

fn feed(out: &[Outbound], decoders: &mut BTreeMap<SessionId, FrameDecoder>) {
    for o in out {
        if let Outbound::Frame { session, bytes, .. } = o {
            decoders
                .entry(*session)
                .or_default()
                .apply(bytes)
                .expect("frame applies");
        }
    }
}

fn until_broadcast(
    room: &mut Room,
    now: &mut u64,
    decoders: &mut BTreeMap<SessionId, FrameDecoder>,
) -> Vec<Outbound> {
    let mut all = Vec::new();
    for _ in 0..5 {
        let out = step(room, now, decoders);
        let frames = out.iter().any(|o| matches!(o, Outbound::Frame { .. }));
        all.extend(out);
        if frames {
            break;
        }
    }
    all
}

/// A Teleported event: recipients, entity, position, destination, cause.
type Tp = (Vec<SessionId>, u32, [f32; 3], String, TeleportCause);

fn teleported(out: &[Outbound]) -> Vec<Tp> {
    out.iter()
        .filter_map(|o| match o {
            Outbound::Event(e) => match &e.body {
                EventBody::Teleported {
                    entity,
                    position,
                    destination,
                    cause,
                    ..
                } => Some((
                    e.to.clone(),
                    *entity,
                    *position,
                    destination.clone(),
                    *cause,
                )),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn corrections(out: &[Outbound]) -> Vec<(SessionId, RejectReason)> {
    out.iter()
        .filter_map(|o| match o {
            Outbound::Correction {
                session, reason, ..
            } => Some((*session, *reason)),
            _ => None,
        })
        .collect()
}

/// Two members placed at their spawns and seen by each other; returns the room, the clock,
/// the decoders and each member's position.
type Decoders = BTreeMap<SessionId, FrameDecoder>;

fn two_members(cfg: RoomConfig) -> (Room, u64, Decoders, BTreeMap<SessionId, [f32; 3]>) {
    let mut room = Room::new("r", cfg);
    room.join(1);
    room.join(2);
    let mut decoders = BTreeMap::new();
    let mut now = 0;
    until_broadcast(&mut room, &mut now, &mut decoders);
    let mut at = BTreeMap::new();
    for s in [1, 2] {
        let p = room.pose_of(s).unwrap().position;
        room.input(s, mv(1, p, 1.0));
        at.insert(s, p);
    }
    let out = until_broadcast(&mut room, &mut now, &mut decoders);
    assert!(corrections(&out).is_empty(), "{out:?}");
    (room, now, decoders, at)
}

#[test]
fn an_operator_teleport_snaps_every_viewer_once_and_the_next_move_counts_from_there() {
    let (mut room, mut now, mut decoders, _) = two_members(RoomConfig::default());
    let a = room.entity_of(1).unwrap();
    let mut out = Vec::new();
    let to = [10.0, 0.0, 10.0];
    let at = room.teleport(1, to, &mut out).expect("a member in bounds");
    assert!(
        (at[0] - to[0]).abs() < 0.5 && (at[2] - to[2]).abs() < 0.5,
        "{at:?}"
    );
    let t = teleported(&out);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].0, vec![1, 2], "to the mover and its viewer");
    assert_eq!(t[0].1, a);
    assert_eq!(t[0].4, TeleportCause::Operator);
    assert_eq!(room.pose_of(1).unwrap().position, at);
    // The next frame shows the new place with the instant bit, the one after without it.
    until_broadcast(&mut room, &mut now, &mut decoders);
    let seen = decoders[&2].get(a).expect("B still sees A").pose;
    assert_ne!(seen.anim_flags & ANIM_INSTANT, 0, "the instant bit travels");
    let p = seen.position_m();
    assert!((p[0] - at[0]).abs() < 0.01 && (p[2] - at[2]).abs() < 0.01);
    // The mover walks on from the new place: accepted, not a TELEPORT refusal.
    room.input(1, mv(2, [at[0] + 0.3, at[1], at[2]], 1.1));
    let out = until_broadcast(&mut room, &mut now, &mut decoders);
    assert!(corrections(&out).is_empty(), "{out:?}");
    let seen = decoders[&2].get(a).unwrap().pose;
    assert_eq!(
        seen.anim_flags & ANIM_INSTANT,
        0,
        "only the first frame snaps"
    );
    let now_at = room.pose_of(1).unwrap().position;
    assert!((now_at[0] - (at[0] + 0.3)).abs() < 0.01, "{now_at:?}");
    assert_eq!(room.stats().teleports, 1);
}

#[test]
fn operator_teleports_are_refused_for_non_members_and_impossible_places() {
    let (mut room, _, _, _) = two_members(RoomConfig::default());
    let mut out = Vec::new();
    assert_eq!(
        room.teleport(9, [0.0; 3], &mut out),
        Err(Refusal::NotMember)
    );
    assert_eq!(
        room.teleport(1, [0.0, 0.0, 1000.0], &mut out),
        Err(Refusal::InvalidPlacement)
    );
    assert_eq!(
        room.teleport(1, [f32::NAN, 0.0, 0.0], &mut out),
        Err(Refusal::InvalidPlacement)
    );
    assert!(out.is_empty());
}

#[test]
fn a_client_cannot_claim_the_instant_bit() {
    let (mut room, mut now, mut decoders, at) = two_members(RoomConfig::default());
    let Input::Move(mut m) = mv(2, [at[&1][0] + 0.2, 0.0, at[&1][2]], 1.1) else {
        unreachable!()
    };
    m.pose.anim_flags = ANIM_INSTANT | 1;
    room.input(1, Input::Move(m));
    until_broadcast(&mut room, &mut now, &mut decoders);
    let seen = decoders[&2].get(room.entity_of(1).unwrap()).unwrap().pose;
    assert_eq!(seen.anim_flags, 1);
}

#[test]
fn walking_into_a_portal_sends_the_avatar_to_its_target() {
    let (mut room, mut now, mut decoders, at) = two_members(portal_config());
    let a = room.entity_of(1).unwrap();
    // Walk towards the portal at (6, 0, -8) in plausible steps.
    let mut p = at[&1];
    let mut t = 1.0;
    let mut seq = 1;
    let mut moved = Vec::new();
    for _ in 0..100 {
        let d = [6.0 - p[0], 0.0, -8.0 - p[2]];
        let len = (d[0] * d[0] + d[2] * d[2]).sqrt();
        if len < 0.5 {
            break;
        }
        let s = len.min(0.4);
        p = [p[0] + d[0] / len * s, 0.0, p[2] + d[2] / len * s];
        seq += 1;
        t += 0.1;
        room.input(1, mv(seq, p, t));
        moved.extend(until_broadcast(&mut room, &mut now, &mut decoders));
        if !teleported(&moved).is_empty() {
            break;
        }
    }
    let tp = teleported(&moved);
    assert_eq!(tp.len(), 1, "{moved:?}");
    assert_eq!(tp[0].1, a);
    assert_eq!(tp[0].3, "stage");
    assert_eq!(tp[0].4, TeleportCause::Portal);
    let at = room.pose_of(1).unwrap();
    assert!((at.position[0] + 20.0).abs() < 0.5 && (at.position[2] - 20.0).abs() < 0.5);
    assert_eq!(at.yaw_deg, 180.0, "the spawn point's yaw");
    assert!(corrections(&moved).is_empty(), "{moved:?}");
    // The mover's next move from the stage is accepted.
    room.input(
        1,
        mv(
            seq + 1,
            [at.position[0] + 0.3, 0.0, at.position[2]],
            t + 0.1,
        ),
    );
    let out = until_broadcast(&mut room, &mut now, &mut decoders);
    assert!(corrections(&out).is_empty(), "{out:?}");
}

#[test]
fn teleport_requests_go_to_requestable_destinations_only() {
    let (mut room, mut now, mut decoders, _) = two_members(portal_config());
    let req = |seq, name: &str| Input::Teleport {
        seq,
        destination: name.into(),
    };
    room.input(1, req(7, "backstage"));
    room.input(1, req(8, "nowhere"));
    room.input(2, req(9, "stage"));
    let out = until_broadcast(&mut room, &mut now, &mut decoders);
    assert_eq!(
        refusals(&out),
        vec![
            (1, 7, Refusal::NoSuchDestination),
            (1, 8, Refusal::NoSuchDestination)
        ]
    );
    let tp = teleported(&out);
    assert_eq!(tp.len(), 1);
    assert_eq!(tp[0].0, vec![1, 2]);
    assert_eq!(
        (tp[0].3.as_str(), tp[0].4),
        ("stage", TeleportCause::Request)
    );
    let b = room.entity_of(2).unwrap();
    let seen = decoders[&1].get(b).unwrap().pose;
    assert_ne!(seen.anim_flags & ANIM_INSTANT, 0);
}

#[test]
fn in_a_spread_room_every_viewers_first_frame_after_a_teleport_is_instant() {
    let cfg = RoomConfig {
        spread_from_members: 2,
        ..RoomConfig::default()
    };
    let mut room = Room::new("r", cfg);
    for s in 1..=7 {
        room.join(s);
    }
    let mut decoders: BTreeMap<SessionId, FrameDecoder> = BTreeMap::new();
    let mut now = 0;
    for _ in 0..20 {
        step(&mut room, &mut now, &mut decoders);
    }
    let a = room.entity_of(1).unwrap();
    // Teleport at every phase of the broadcast period; each viewer's first frame that shows
    // the new place carries the bit.
    for k in 0..6 {
        let mut out = Vec::new();
        let to = [-10.0 + k as f32 * 3.0, 0.0, 12.0];
        let at = room.teleport(1, to, &mut out).unwrap();
        let mut pending: Vec<SessionId> = (2..=7).collect();
        for _ in 0..12 {
            let out = step(&mut room, &mut now, &mut decoders);
            for o in &out {
                if let Outbound::Frame { session, .. } = o
                    && let Some(i) = pending.iter().position(|s| s == session)
                {
                    let pose = decoders[session].get(a).expect("seen").pose;
                    assert!(
                        (pose.position_m()[0] - at[0]).abs() < 0.01,
                        "shows the new place"
                    );
                    assert_ne!(pose.anim_flags & ANIM_INSTANT, 0, "viewer {session} k {k}");
                    pending.remove(i);
                }
            }
            if pending.is_empty() {
                break;
            }
        }
        assert!(pending.is_empty(), "every viewer got a frame: {pending:?}");
        for _ in (k % 3)..4 {
            step(&mut room, &mut now, &mut decoders);
        }
    }
    // Over: nobody's frames carry the bit any more.
    for _ in 0..8 {
        step(&mut room, &mut now, &mut decoders);
    }
    for s in 2..=7 {
        assert_eq!(
            decoders[&s].get(a).unwrap().pose.anim_flags & ANIM_INSTANT,
            0
        );
    }
}
