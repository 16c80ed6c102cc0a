use plaza_proto::frame::FrameDecoder;
use plaza_proto::quant::POSITION_ERROR_M;

use super::*;

fn mv(seq: u32, x: f32, z: f32, t: f64) -> Input {
    Input::Move(MoveInput {
        seq,
        pose: Pose {
            position: [x, 0.0, z],
            velocity: [1.0, 0.0, 0.0],
            yaw_deg: 90.0,
            movement_kind: 1,
            ..Pose::default()
        },
        timestamp_s: t,
        is_instant: false,
    })
}

/// Steps the room until it broadcasts, feeding each session's frames into its decoder.
fn step_until_broadcast(
    room: &mut Room,
    now: &mut u64,
    decoders: &mut BTreeMap<SessionId, FrameDecoder>,
) -> Vec<Outbound> {
    let mut all = Vec::new();
    for _ in 0..5 {
        let mut out = Vec::new();
        *now += 20;
        room.step(*now, &mut out);
        let broadcast = out.iter().any(|o| matches!(o, Outbound::Frame { .. }));
        for o in &out {
            if let Outbound::Frame { session, bytes, .. } = o {
                decoders
                    .entry(*session)
                    .or_default()
                    .apply(bytes)
                    .expect("frame applies");
            }
        }
        all.extend(out);
        if broadcast {
            break;
        }
    }
    all
}

#[test]
fn joins_are_applied_at_the_tick_and_get_a_keyframe() {
    let mut room = Room::new("r", RoomConfig::default());
    room.join(1);
    room.join(2);
    assert_eq!(room.member_count(), 0, "joins wait for the tick");
    let mut decoders = BTreeMap::new();
    let mut now = 0;
    let out = step_until_broadcast(&mut room, &mut now, &mut decoders);
    let joined: Vec<_> = out
        .iter()
        .filter_map(|o| match o {
            Outbound::Joined {
                session, entity, ..
            } => Some((*session, *entity)),
            _ => None,
        })
        .collect();
    assert_eq!(joined, vec![(1, 1), (2, 2)]);
    assert!(out.iter().any(|o| matches!(
        o,
        Outbound::Frame {
            session: 1,
            keyframe: true,
            ..
        }
    )));
    // Each sees the other, not itself.
    assert!(decoders[&1].get(2).is_some());
    assert!(decoders[&1].get(1).is_none());
    assert_eq!(decoders[&1].own().map(|o| o.entity), Some(1));
}

fn spawns(out: &[Outbound]) -> BTreeMap<SessionId, [f32; 3]> {
    out.iter()
        .filter_map(|o| match o {
            Outbound::Joined { session, spawn, .. } => Some((*session, *spawn)),
            _ => None,
        })
        .collect()
}

#[test]
fn movement_reaches_every_other_member() {
    let mut room = Room::new("r", RoomConfig::default());
    for s in 1..=5 {
        room.join(s);
    }
    let mut decoders = BTreeMap::new();
    let mut now = 0;
    let spawn = spawns(&step_until_broadcast(&mut room, &mut now, &mut decoders));
    // First the placement at the spawn point, then a plausible step (0.5 m in 0.1 s).
    for s in 1..=5u64 {
        let p = spawn[&s];
        room.input(s, mv(1, p[0], p[2], 1.0));
        room.input(s, mv(2, p[0] + 0.5, p[2] - 0.25, 1.1));
    }
    let out = step_until_broadcast(&mut room, &mut now, &mut decoders);
    assert!(
        !out.iter().any(|o| matches!(o, Outbound::Correction { .. })),
        "{out:?}"
    );
    for viewer in 1..=5u64 {
        for s in (1..=5u64).filter(|s| *s != viewer) {
            let e = room.entity_of(s).unwrap();
            let p = decoders[&viewer].get(e).unwrap().pose.position_m();
            assert!((p[0] - (spawn[&s][0] + 0.5)).abs() <= POSITION_ERROR_M);
            assert!((p[2] - (spawn[&s][2] - 0.25)).abs() <= POSITION_ERROR_M);
        }
    }
}

#[test]
fn a_teleport_jump_is_rejected_with_the_authoritative_pose() {
    let mut room = Room::new("r", RoomConfig::default());
    room.join(1);
    let mut out = Vec::new();
    room.step(20, &mut out);
    let p = spawns(&out)[&1];
    room.input(1, mv(1, p[0], p[2], 1.0));
    room.input(1, mv(2, p[0] + 20.0, p[2], 1.1));
    out.clear();
    room.step(40, &mut out);
    let c = out
        .iter()
        .find_map(|o| match o {
            Outbound::Correction {
                reason,
                pose,
                last_input_seq,
                ..
            } => Some((*reason, *pose, *last_input_seq)),
            _ => None,
        })
        .expect("a correction");
    assert_eq!(c.0, RejectReason::Teleport);
    assert!(
        (c.1.position[0] - p[0]).abs() < 0.01,
        "corrected to where it was"
    );
    assert_eq!(c.2, 1, "the placement was applied, the jump was not");
}

#[test]
fn a_full_room_refuses_joins() {
    let cfg = RoomConfig {
        max_members: 2,
        ..RoomConfig::default()
    };
    let mut room = Room::new("r", cfg);
    for s in 1..=3 {
        room.join(s);
    }
    let mut out = Vec::new();
    room.step(20, &mut out);
    assert!(out.contains(&Outbound::JoinRefused {
        session: 3,
        reason: JoinRefusal::RoomFull
    }));
    assert_eq!(room.member_count(), 2);
}

#[test]
fn non_finite_moves_are_corrected_not_applied() {
    let mut room = Room::new("r", RoomConfig::default());
    room.join(1);
    let mut out = Vec::new();
    room.step(20, &mut out);
    room.input(1, mv(1, f32::NAN, 0.0, 1.0));
    out.clear();
    room.step(40, &mut out);
    assert!(out.iter().any(|o| matches!(
        o,
        Outbound::Correction {
            session: 1,
            reason: RejectReason::NonFinite,
            ..
        }
    )));
    assert_eq!(room.stats().moves_rejected[1], 1);
}

#[test]
fn leaving_removes_the_entity_from_every_view() {
    let mut room = Room::new("r", RoomConfig::default());
    room.join(1);
    room.join(2);
    let mut decoders = BTreeMap::new();
    let mut now = 0;
    step_until_broadcast(&mut room, &mut now, &mut decoders);
    assert!(decoders[&1].get(2).is_some());
    room.leave(2);
    let out = step_until_broadcast(&mut room, &mut now, &mut decoders);
    assert!(out.contains(&Outbound::Left {
        session: 2,
        entity: 2
    }));
    assert!(decoders[&1].get(2).is_none());
    assert!(room.is_empty() || room.member_count() == 1);
}

#[test]
fn broadcasts_run_at_the_configured_rate() {
    let mut room = Room::new("r", RoomConfig::default());
    room.join(1);
    let mut frames = 0;
    for t in 1..=50u64 {
        let mut out = Vec::new();
        room.step(t * 20, &mut out);
        frames += out
            .iter()
            .filter(|o| matches!(o, Outbound::Frame { .. }))
            .count();
    }
    assert_eq!(frames, 20, "50 ticks at 50 Hz = 1 s = 20 broadcasts");
}

#[test]
fn same_inputs_give_the_same_bytes() {
    fn run() -> Vec<Outbound> {
        let mut room = Room::new("r", RoomConfig::default());
        let mut all = Vec::new();
        for s in 1..=8 {
            room.join(s);
        }
        for t in 1..=30u64 {
            for s in 1..=8u64 {
                room.input(
                    s,
                    mv(t as u32, (s + t) as f32 * 0.1, s as f32, t as f64 * 0.02),
                );
            }
            room.step(t * 20, &mut all);
        }
        all
    }
    assert_eq!(run(), run());
}
