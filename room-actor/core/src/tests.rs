use plaza_proto::frame::FrameDecoder;
use plaza_proto::quant::POSITION_ERROR_M;

use super::*;
use crate::test_support::ms;

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
        timestamp_period_s: None,
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
        room.advance(ms(*now), &mut out);
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
    // The moves are applied at the first step; the broadcast shows them carried forward along
    // their velocity (1 m/s along x) to its own step.
    let applied_ms = now + 20;
    let out = step_until_broadcast(&mut room, &mut now, &mut decoders);
    let lead_m = (now - applied_ms) as f32 / 1000.0;
    assert!(
        !out.iter().any(|o| matches!(o, Outbound::Correction { .. })),
        "{out:?}"
    );
    for viewer in 1..=5u64 {
        for s in (1..=5u64).filter(|s| *s != viewer) {
            let e = room.entity_of(s).unwrap();
            let p = decoders[&viewer].get(e).unwrap().pose.position_m();
            assert!((p[0] - (spawn[&s][0] + 0.5 + lead_m)).abs() <= POSITION_ERROR_M);
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

// === interactions, consent, emotes, scenes through the Room ===

use crate::consent::{ConsentKind, ConsentOp, ConsentState};
use crate::emotes::EmoteRequest;
use crate::events::{EventBody, PropChange, Refusal};
use crate::interactions::{InteractionKind, InteractionRequest, PROP_KIND, prop_entity};
use crate::scene::{SceneClientEvent, SceneClientState, SceneOp};

/// A plaza whose spawn is near props 1 and 2 (at x 5 and 6, z 5), with a 4 m reach so the
/// first four spawns (a spiral around the spawn point) reach both.
fn near_props_config() -> RoomConfig {
    let mut cfg = RoomConfig::default();
    cfg.definition.spawn = [5.5, 0.0, 3.0];
    cfg.reach_m = 4.0;
    cfg
}

/// A room with sessions `1..=n` joined (one step applied).
fn room_with(n: u64, cfg: RoomConfig) -> (Room, u64) {
    let mut room = Room::new("r", cfg);
    for s in 1..=n {
        room.join(s);
    }
    let mut out = Vec::new();
    room.step(20, &mut out);
    (room, 20)
}

fn step(room: &mut Room, now: &mut u64) -> Vec<Outbound> {
    let mut out = Vec::new();
    *now += 20;
    room.advance(ms(*now), &mut out);
    out
}

/// The events of `out` other than roster updates (those go with frames; `people_tests`
/// checks them).
fn events(out: &[Outbound]) -> Vec<&RoomEvent> {
    out.iter()
        .filter_map(|o| match o {
            Outbound::Event(e) if !matches!(e.body, EventBody::Roster { .. }) => Some(e),
            _ => None,
        })
        .collect()
}

fn interact(seq: u32, kind: InteractionKind, prop_id: u32) -> Input {
    Input::Interact {
        seq,
        request: InteractionRequest {
            kind,
            prop_id,
            room: None,
            position: [0.0; 3],
            velocity: [0.0; 3],
        },
    }
}

fn rejected(out: &[Outbound]) -> Vec<(Vec<SessionId>, u32, Refusal)> {
    events(out)
        .into_iter()
        .filter_map(|e| match e.body {
            EventBody::Rejected {
                in_reply_to,
                reason,
            } => Some((e.to.clone(), in_reply_to, reason)),
            _ => None,
        })
        .collect()
}

fn prop_events(out: &[Outbound]) -> Vec<(u32, u32, u64, PropChange)> {
    events(out)
        .into_iter()
        .filter_map(|e| match e.body {
            EventBody::Prop {
                prop_id,
                holder_entity,
                revision,
                change,
                ..
            } => Some((prop_id, holder_entity, revision, change)),
            _ => None,
        })
        .collect()
}

#[test]
fn props_are_entities_every_member_sees() {
    let mut room = Room::new("r", RoomConfig::default());
    room.join(1);
    let mut decoders = BTreeMap::new();
    let mut now = 0;
    step_until_broadcast(&mut room, &mut now, &mut decoders);
    for prop_id in 1..=5 {
        let rec = decoders[&1]
            .get(prop_entity(prop_id).unwrap())
            .expect("every prop is visible");
        assert_eq!(rec.kind, PROP_KIND);
    }
    let p = decoders[&1].get(prop_entity(1).unwrap()).unwrap();
    let pos = p.pose.position_m();
    assert!(
        (pos[0] - 5.0).abs() < 0.05 && (pos[2] - 5.0).abs() < 0.05,
        "{pos:?}"
    );
}

#[test]
fn concurrent_grabs_resolve_to_the_first_and_refusals_go_to_the_requester() {
    let (mut room, mut now) = room_with(3, near_props_config());
    room.input(2, interact(7, InteractionKind::Pickup, 1));
    room.input(1, interact(9, InteractionKind::Pickup, 1));
    let out = step(&mut room, &mut now);
    let e2 = room.entity_of(2).unwrap();
    assert_eq!(prop_events(&out), vec![(1, e2, 1, PropChange::Pickup)]);
    assert_eq!(rejected(&out), vec![(vec![1], 9, Refusal::AlreadyHeld)]);
    let ev = events(&out);
    assert_eq!(ev[0].to, vec![1, 2, 3], "prop events reach every member");
    // Only the holder places.
    let place = |seq| Input::Interact {
        seq,
        request: InteractionRequest {
            kind: InteractionKind::Place,
            prop_id: 1,
            room: None,
            position: [5.5, 0.6, 4.6],
            velocity: [0.0; 3],
        },
    };
    room.input(1, place(10));
    room.input(2, place(8));
    let out = step(&mut room, &mut now);
    assert_eq!(rejected(&out), vec![(vec![1], 10, Refusal::NotHolder)]);
    assert_eq!(prop_events(&out), vec![(1, 0, 2, PropChange::Place)]);
    assert_eq!(room.stats().refusals["already_held"], 1);
    assert_eq!(room.stats().refusals["not_holder"], 1);
}

#[test]
fn cross_room_pickup_and_non_members_are_rejected() {
    let (mut room, mut now) = room_with(1, near_props_config());
    room.input(
        1,
        Input::Interact {
            seq: 3,
            request: InteractionRequest {
                kind: InteractionKind::Pickup,
                prop_id: 1,
                room: Some("elsewhere".into()),
                position: [0.0; 3],
                velocity: [0.0; 3],
            },
        },
    );
    room.input(99, interact(4, InteractionKind::Pickup, 1));
    room.input(1, interact(5, InteractionKind::Pickup, 42));
    let out = step(&mut room, &mut now);
    assert_eq!(
        rejected(&out),
        vec![
            (vec![1], 3, Refusal::WrongRoom),
            (vec![99], 4, Refusal::NotMember),
            (vec![1], 5, Refusal::NoSuchProp),
        ]
    );
    assert!(prop_events(&out).is_empty());
}

#[test]
fn a_holder_who_leaves_drops_the_prop_and_it_follows_before() {
    let (mut room, mut now) = room_with(2, near_props_config());
    room.input(1, interact(1, InteractionKind::Pickup, 2));
    step(&mut room, &mut now);
    // The held prop follows its holder (physics), so it is off the ground.
    step(&mut room, &mut now);
    let held_at = room.physics.prop_position(2).unwrap();
    assert!(held_at[1] > 1.0, "{held_at:?}");
    room.leave(1);
    let out = step(&mut room, &mut now);
    assert_eq!(prop_events(&out), vec![(2, 0, 2, PropChange::Drop)]);
    let drop_event = events(&out)[0];
    assert_eq!(drop_event.to, vec![2]);
    let left_at = out
        .iter()
        .position(|o| matches!(o, Outbound::Left { .. }))
        .unwrap();
    assert!(
        out.iter()
            .position(|o| matches!(o, Outbound::Event(_)))
            .unwrap()
            < left_at,
        "the drop is announced in the leave's step"
    );
    room.input(2, interact(1, InteractionKind::Pickup, 2));
    let out = step(&mut room, &mut now);
    let e2 = room.entity_of(2).unwrap();
    assert_eq!(prop_events(&out), vec![(2, e2, 3, PropChange::Pickup)]);
}

#[test]
fn props_carry_their_rotation_in_frames() {
    let mut cfg = RoomConfig::default();
    cfg.definition.spawn = [-5.0, 0.0, 3.0];
    let (mut room, mut now) = room_with(1, cfg);
    let mut decoders = BTreeMap::new();
    step_until_broadcast(&mut room, &mut now, &mut decoders);
    let ball = crate::interactions::prop_entity(3).unwrap();
    // At rest and upright: yaw 0, no tilt (the record as before props carried rotation).
    let r = decoders[&1].get(ball).copied().unwrap();
    assert_eq!((r.pose.yaw, r.pose.head), (0, None));
    // Rolled along +x, the ball turns about z: its frames follow the body's orientation.
    room.physics
        .throw_prop(3, [-5.0, 0.3, 5.0], [4.0, 0.0, 0.0]);
    let mut tilted = 0;
    for _ in 0..30 {
        step_until_broadcast(&mut room, &mut now, &mut decoders);
        let body = room.physics.prop_state(3).unwrap().rotation.map(f64::from);
        let r = decoders[&1].get(ball).copied().unwrap();
        if r.pose.head.is_some() {
            tilted += 1;
        }
        let q = r.pose.prop_rotation();
        let d: f64 = (0..4).map(|i| f64::from(q[i]) * body[i]).sum();
        let off = 2.0 * d.abs().min(1.0).acos().to_degrees();
        assert!(off < 1.5, "the record is {off}° off the body");
    }
    assert!(
        tilted > 5,
        "the rolling ball's frames showed it tilted {tilted} times"
    );
}

fn consent(seq: u32, op: ConsentOp, kind: &str, target_entity: u32, consent_id: u64) -> Input {
    Input::Consent {
        seq,
        op: Some(op),
        kind: kind.into(),
        target_entity,
        consent_id,
    }
}

/// (audit kind, event state or refusal) in output order.
fn consent_trail(out: &[Outbound]) -> Vec<String> {
    out.iter()
        .filter_map(|o| match o {
            Outbound::Audit { kind, .. } => Some(format!("audit:{kind}")),
            Outbound::Event(RoomEvent {
                body: EventBody::Consent { state, .. },
                to,
                ..
            }) => Some(format!("event:{}:{to:?}", state.as_str())),
            Outbound::Event(RoomEvent {
                body: EventBody::Rejected { reason, .. },
                to,
                ..
            }) => Some(format!("rejected:{}:{to:?}", reason.code())),
            _ => None,
        })
        .collect()
}

#[test]
fn consent_transitions_are_audited_before_they_are_acknowledged() {
    let (mut room, mut now) = room_with(3, RoomConfig::default());
    let (e1, e2) = (room.entity_of(1).unwrap(), room.entity_of(2).unwrap());
    room.input(1, consent(1, ConsentOp::Request, "asana_lock", e2, 0));
    let out = step(&mut room, &mut now);
    assert_eq!(
        consent_trail(&out),
        vec!["audit:consent.requested", "event:requested:[1, 2]"]
    );
    let id = events(&out)
        .iter()
        .find_map(|e| match e.body {
            EventBody::Consent {
                consent_id,
                kind,
                requester_entity,
                target_entity,
                ..
            } => {
                assert_eq!(
                    (kind, requester_entity, target_entity),
                    (ConsentKind::AsanaLock, e1, e2)
                );
                Some(consent_id)
            }
            _ => None,
        })
        .unwrap();
    // Consent by anyone but the target is rejected, and the refusal is audited.
    room.input(3, consent(2, ConsentOp::Consent, "", 0, id));
    room.input(1, consent(3, ConsentOp::Consent, "", 0, id));
    room.input(2, consent(4, ConsentOp::Consent, "", 0, id));
    room.input(1, consent(5, ConsentOp::Activate, "", 0, id));
    room.input(2, consent(6, ConsentOp::Release, "", 0, id));
    let out = step(&mut room, &mut now);
    assert_eq!(
        consent_trail(&out),
        vec![
            "audit:consent.refused",
            "rejected:not_target:[3]",
            "audit:consent.refused",
            "rejected:not_target:[1]",
            "audit:consent.consented",
            "event:consented:[1, 2]",
            "audit:consent.active",
            "event:active:[1, 2]",
            "audit:consent.released",
            "event:released:[1, 2]",
        ]
    );
    let seqs: Vec<u64> = out
        .iter()
        .filter_map(|o| match o {
            Outbound::Audit { local_seq, .. } => Some(*local_seq),
            _ => None,
        })
        .collect();
    assert_eq!(seqs, vec![2, 3, 4, 5, 6], "gap-free");
    let detail = out
        .iter()
        .find_map(|o| match o {
            Outbound::Audit {
                kind, detail_json, ..
            } if kind == "consent.active" => Some(detail_json.clone()),
            _ => None,
        })
        .unwrap();
    assert!(
        detail.contains(r#""from":"consented","to":"active","cause":"activate""#),
        "{detail}"
    );
}

#[test]
fn consent_requests_expire_and_leaving_cancels() {
    let mut cfg = RoomConfig::default();
    cfg.consent.request_timeout_ms = 100;
    let (mut room, mut now) = room_with(3, cfg);
    let e2 = room.entity_of(2).unwrap();
    let e3 = room.entity_of(3).unwrap();
    room.input(1, consent(1, ConsentOp::Request, "follow", e2, 0));
    room.input(2, consent(1, ConsentOp::Request, "hand_hold", e3, 0));
    step(&mut room, &mut now);
    let mut trail = Vec::new();
    for _ in 0..4 {
        trail.extend(consent_trail(&step(&mut room, &mut now)));
    }
    assert!(trail.is_empty(), "not yet: {trail:?}");
    room.leave(3);
    let mut trail = consent_trail(&step(&mut room, &mut now));
    trail.extend(consent_trail(&step(&mut room, &mut now)));
    assert_eq!(
        trail,
        vec![
            "audit:consent.cancelled",
            "event:cancelled:[2]",
            "audit:consent.expired",
            "event:expired:[1, 2]",
        ]
    );
    // A target that is not a member is refused (and audited).
    room.input(1, consent(9, ConsentOp::Request, "follow", e3, 0));
    assert_eq!(
        consent_trail(&step(&mut room, &mut now)),
        vec!["audit:consent.refused", "rejected:no_such_target:[1]"]
    );
}

#[test]
fn emotes_reach_the_members_who_see_the_emoter_and_stale_ones_are_dropped() {
    let cfg = RoomConfig {
        interest_cap: 1,
        ..RoomConfig::default()
    };
    let mut room = Room::new("r", cfg);
    for s in 1..=3 {
        room.join(s);
    }
    let mut decoders = BTreeMap::new();
    let mut now = 0;
    step_until_broadcast(&mut room, &mut now, &mut decoders);
    let e1 = room.entity_of(1).unwrap();
    let viewers: Vec<SessionId> = (1..=3)
        .filter(|s| *s == 1 || decoders[s].get(e1).is_some())
        .collect();
    let emote = |seq, ts, id: &str| Input::Emote {
        seq,
        request: EmoteRequest {
            emote_id: id.into(),
            timestamp_ms: ts,
            stop: false,
        },
    };
    room.input(1, emote(1, 500, "wave"));
    room.input(1, emote(2, 400, "old"));
    let out = step(&mut room, &mut now);
    let ev = events(&out);
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].to, viewers);
    assert!(
        matches!(&ev[0].body, EventBody::Emote { emote_id, stop: false, timestamp_ms: 500, .. } if emote_id == "wave")
    );
    assert_eq!(room.stats().emotes_stale, 1);
}

/// The `EmoteInProgress` events of `out`: (recipient, entity, emote, elapsed ms).
fn in_progress(out: &[Outbound]) -> Vec<(SessionId, u32, String, u64)> {
    events(out)
        .into_iter()
        .filter_map(|e| match &e.body {
            EventBody::EmoteInProgress {
                entity,
                emote_id,
                elapsed_ms,
                timestamp_ms,
            } => {
                assert_eq!(*timestamp_ms, 500, "the emoter's own timestamp");
                Some((e.to[0], *entity, emote_id.clone(), *elapsed_ms))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_viewer_that_starts_seeing_a_running_emote_is_told_it_plays_and_since_when() {
    let (mut room, mut now) = room_with(2, RoomConfig::default());
    let mut decoders = BTreeMap::new();
    step_until_broadcast(&mut room, &mut now, &mut decoders);
    let e1 = room.entity_of(1).unwrap();
    room.input(
        1,
        Input::Emote {
            seq: 1,
            request: EmoteRequest {
                emote_id: "dance".into(),
                timestamp_ms: 500,
                stop: false,
            },
        },
    );
    let started = now + 20;
    // Session 2 saw the emoter already: it gets the emote itself, never an in-progress one.
    let mut told = Vec::new();
    for _ in 0..20 {
        told.extend(in_progress(&step(&mut room, &mut now)));
    }
    assert!(told.is_empty(), "{told:?}");
    // A joiner's first frames show the dancer: it is told the emote plays, and for how long.
    room.join(3);
    let mut out = Vec::new();
    for _ in 0..10 {
        out.extend(step(&mut room, &mut now));
    }
    let told = in_progress(&out);
    assert_eq!(told.len(), 1, "told once: {told:?}");
    let (to, entity, id, elapsed) = told[0].clone();
    assert_eq!((to, entity, id.as_str()), (3, e1, "dance"));
    let frame_at = now - 9 * 20;
    assert!(
        elapsed >= frame_at.saturating_sub(started).saturating_sub(200) && elapsed <= now - started,
        "elapsed {elapsed} ms (started at {started}, now {now})"
    );
    // The told event goes before the frame that shows the avatar.
    let ev = out
        .iter()
        .position(|o| matches!(o, Outbound::Event(e) if matches!(e.body, EventBody::EmoteInProgress { .. })))
        .unwrap();
    let frame = out
        .iter()
        .position(|o| matches!(o, Outbound::Frame { session: 3, .. }))
        .unwrap();
    assert!(ev < frame);
    // Sequence numbers stay gap-free with it.
    let seqs: Vec<u64> = out
        .iter()
        .filter_map(|o| match o {
            Outbound::Event(e) => Some(e.room_seq),
            _ => None,
        })
        .collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    // A viewer whose (delta) frames stop and start showing the dancer again: told when it
    // comes back, once.
    let space = |seq, radius_m| Input::PersonalSpace { seq, radius_m };
    room.input(2, space(2, 4.0));
    for _ in 0..10 {
        assert!(in_progress(&step(&mut room, &mut now)).is_empty());
    }
    room.input(2, space(3, 0.0));
    let mut told = Vec::new();
    for _ in 0..20 {
        told.extend(in_progress(&step(&mut room, &mut now)));
    }
    assert_eq!(
        told.iter().map(|t| (t.0, t.1)).collect::<Vec<_>>(),
        vec![(2, e1)],
        "{told:?}"
    );
    // Once it stops, a new viewer is not told.
    room.input(
        1,
        Input::Emote {
            seq: 2,
            request: EmoteRequest {
                emote_id: String::new(),
                timestamp_ms: 900,
                stop: true,
            },
        },
    );
    step(&mut room, &mut now);
    room.join(4);
    let mut told = Vec::new();
    for _ in 0..10 {
        told.extend(in_progress(&step(&mut room, &mut now)));
    }
    assert!(told.is_empty(), "{told:?}");
}

#[test]
fn scene_actions_come_back_in_the_same_step_and_late_joiners_catch_up() {
    let (mut room, mut now) = room_with(2, RoomConfig::default());
    let scene = |seq, op| Input::Scene {
        seq,
        scene: "game".into(),
        op,
    };
    room.input(1, scene(1, SceneOp::Join));
    room.input(1, scene(2, SceneOp::Action(b"move e4".to_vec())));
    let out = step(&mut room, &mut now);
    let tick = room.tick();
    let e1 = room.entity_of(1).unwrap();
    let e2 = room.entity_of(2).unwrap();
    let ticks: Vec<_> = events(&out)
        .into_iter()
        .filter_map(|e| match &e.body {
            EventBody::SceneTick { tick, actions, .. } => {
                Some((e.to.clone(), *tick, actions.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        ticks,
        vec![(vec![1], tick, vec![(e1, b"move e4".to_vec())])]
    );
    room.input(2, scene(1, SceneOp::Action(b"x".to_vec())));
    room.input(2, scene(2, SceneOp::Join));
    let out = step(&mut room, &mut now);
    assert_eq!(rejected(&out), vec![(vec![2], 1, Refusal::NotInScene)]);
    let client: Vec<_> = events(&out)
        .into_iter()
        .filter_map(|e| match &e.body {
            EventBody::SceneClient {
                entity,
                event,
                state,
                ..
            } => Some((e.to.clone(), *entity, *event, *state)),
            EventBody::SceneSync {
                tick: t,
                client_state,
                ..
            } => {
                assert_eq!(
                    *t,
                    tick - 1,
                    "the initial state, from before the scene's first tick"
                );
                assert_eq!(*client_state, SceneClientState::CatchingUp);
                None
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        client,
        vec![
            (
                vec![1, 2],
                e2,
                SceneClientEvent::ClientJoined,
                SceneClientState::CatchingUp
            ),
            (
                vec![1, 2],
                e2,
                SceneClientEvent::BeginCatchUp,
                SceneClientState::CatchingUp
            ),
        ]
    );
    room.input(2, scene(3, SceneOp::CaughtUp));
    let out = step(&mut room, &mut now);
    assert!(events(&out).iter().any(|e| matches!(
        e.body,
        EventBody::SceneClient {
            event: SceneClientEvent::CaughtUp,
            state: SceneClientState::Normal,
            ..
        }
    )));
    room.leave(1);
    let out = step(&mut room, &mut now);
    let left: Vec<_> = events(&out)
        .into_iter()
        .filter_map(|e| match &e.body {
            EventBody::SceneClient { entity, event, .. } => Some((e.to.clone(), *entity, *event)),
            _ => None,
        })
        .collect();
    assert_eq!(
        left,
        vec![
            (vec![2], e1, SceneClientEvent::ClientLeft),
            (vec![2], e2, SceneClientEvent::MasterChanged),
            (vec![2], e2, SceneClientEvent::Alone),
        ]
    );
}

#[test]
fn event_sequence_numbers_are_gap_free() {
    let (mut room, mut now) = room_with(2, near_props_config());
    room.input(1, interact(1, InteractionKind::Pickup, 1));
    room.input(2, interact(1, InteractionKind::Pickup, 1));
    room.input(2, interact(2, InteractionKind::Pickup, 2));
    let mut all = step(&mut room, &mut now);
    room.leave(1);
    all.extend(step(&mut room, &mut now));
    let seqs: Vec<u64> = all
        .iter()
        .filter_map(|o| match o {
            Outbound::Event(e) => Some(e.room_seq),
            _ => None,
        })
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert!(seqs.len() >= 4);
}

#[test]
fn save_restore_round_trip() {
    let (mut room, mut now) = room_with(3, near_props_config());
    let e2 = room.entity_of(2).unwrap();
    room.input(1, interact(1, InteractionKind::Pickup, 1));
    room.input(1, consent(2, ConsentOp::Request, "hand_hold", e2, 0));
    room.input(3, consent(2, ConsentOp::Request, "follow", e2, 0));
    room.input(
        2,
        Input::Emote {
            seq: 3,
            request: EmoteRequest {
                emote_id: "clap".into(),
                timestamp_ms: 77,
                stop: false,
            },
        },
    );
    room.input(
        3,
        Input::Scene {
            seq: 4,
            scene: "s".into(),
            op: SceneOp::Join,
        },
    );
    step(&mut room, &mut now);
    room.input(
        3,
        Input::Scene {
            seq: 5,
            scene: "s".into(),
            op: SceneOp::Action(vec![1, 2, 3]),
        },
    );
    room.input(2, consent(6, ConsentOp::Consent, "", 0, 1));
    for _ in 0..5 {
        step(&mut room, &mut now);
    }
    let snap = room.save_state();
    assert_eq!(snap.members.len(), 3);
    assert_eq!(snap.consents.len(), 2);
    assert_eq!(snap.consents[0].state, ConsentState::Consented);
    assert_eq!(snap.props[0].holder, Some((1, room.entity_of(1).unwrap())));
    assert_eq!(snap.scenes["s"].log.len(), 1);

    let mut restored = Room::new("r", near_props_config());
    restored.restore(snap.clone());
    let mut again = restored.save_state();
    // Rotations restart upright; positions of loose props are exact, held ones follow hands.
    for (a, b) in again.props.iter_mut().zip(&snap.props) {
        for k in 0..3 {
            assert!(
                (a.position[k] - b.position[k]).abs() < 1e-3,
                "{a:?} vs {b:?}"
            );
        }
        a.position = b.position;
        a.rotation = b.rotation;
        a.velocity = b.velocity;
    }
    assert_eq!(again, snap);
    // The restored room carries on: ids are not reused, sequences continue.
    restored.join(9);
    restored.input(2, consent(1, ConsentOp::Activate, "", 0, 1));
    restored.input(1, consent(2, ConsentOp::Activate, "", 0, 1));
    let mut out = Vec::new();
    restored.step(now + 20, &mut out);
    let e9 = restored.entity_of(9).unwrap();
    assert!(snap.members.iter().all(|m| m.entity != e9));
    assert_eq!(
        consent_trail(&out),
        vec![
            "audit:consent.refused",
            "rejected:not_requester:[2]",
            "audit:consent.active",
            "event:active:[1, 2]",
        ]
    );
    let first_seq = events(&out)[0].room_seq;
    assert_eq!(first_seq, snap.room_seq + 1);
    assert!(
        matches!(out.iter().find(|o| matches!(o, Outbound::Audit { .. })), Some(Outbound::Audit { local_seq, .. }) if *local_seq == snap.audit_seq + 1)
    );
}

#[test]
fn restore_drops_what_does_not_fit_together() {
    let (mut room, mut now) = room_with(3, near_props_config());
    let (e1, e2) = (room.entity_of(1).unwrap(), room.entity_of(2).unwrap());
    room.input(1, interact(1, InteractionKind::Pickup, 1));
    room.input(1, consent(2, ConsentOp::Request, "hand_hold", e2, 0));
    step(&mut room, &mut now);
    let good = room.save_state();
    assert_eq!(
        Room::new("r", near_props_config()).restore(good.clone()),
        0,
        "a room's own saved state restores whole"
    );

    let mut bad = good.clone();
    // A duplicate entity, entity 0, a prop-range entity and a duplicate session.
    let mut dup = bad.members[1].clone();
    dup.session = 40;
    bad.members.push(dup);
    let mut zero = bad.members[0].clone();
    zero.session = 41;
    zero.entity = 0;
    bad.members.push(zero);
    let mut prop = bad.members[0].clone();
    prop.session = 42;
    prop.entity = interactions::PROP_ENTITY_BASE + 3;
    bad.members.push(prop);
    bad.members.push(bad.members[2].clone());
    // A non-finite pose goes back to the spawn point.
    bad.members[2].pose.position = [f32::NAN, 0.0, 1.0];
    // A consent whose target is gone; an emote and a scene client of a stranger.
    let mut stray = bad.consents[0];
    stray.id = 99;
    stray.target.session = 77;
    bad.consents.push(stray);
    bad.emotes.insert(77, Default::default());
    bad.scenes.insert(
        "ghost".into(),
        scene::Scene {
            clients: [(77, (5, SceneClientState::Normal))].into(),
            ..Default::default()
        },
    );
    let mut restored = Room::new("r", near_props_config());
    assert_eq!(restored.restore(bad), 7);
    let snap = restored.save_state();
    assert_eq!(
        snap.members.iter().map(|m| m.session).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    let p3 = restored.pose_of(3).unwrap().position;
    assert!(p3.iter().all(|v| v.is_finite()), "{p3:?}");
    assert_eq!(snap.consents.len(), 1);
    assert_eq!(snap.consents[0].target.entity, e2);
    // The stray consent's id is never handed out again.
    assert_eq!(snap.consent_last_id, 99);
    assert!(snap.emotes.is_empty() && snap.scenes.is_empty());
    assert_eq!(snap.props[0].holder, Some((1, e1)));
}

#[test]
fn same_inputs_give_the_same_outputs_with_every_kind_of_input() {
    fn run() -> Vec<Outbound> {
        let mut room = Room::new("r", near_props_config());
        let mut all = Vec::new();
        for s in 1..=4 {
            room.join(s);
        }
        for t in 1..=60u64 {
            let s = t % 4 + 1;
            let other = (t + 1) % 4 + 1;
            match t % 6 {
                0 => room.input(
                    s,
                    interact(t as u32, InteractionKind::Pickup, (t % 2 + 1) as u32),
                ),
                1 => room.input(
                    s,
                    Input::Interact {
                        seq: t as u32,
                        request: InteractionRequest {
                            kind: InteractionKind::Throw,
                            prop_id: (t % 2 + 1) as u32,
                            room: None,
                            position: [0.0; 3],
                            velocity: [1.0, 2.0, 0.5],
                        },
                    },
                ),
                2 => room.input(
                    s,
                    consent(t as u32, ConsentOp::Request, "follow", other as u32, 0),
                ),
                3 => room.input(
                    other,
                    consent(t as u32, ConsentOp::Consent, "", 0, t / 6 + 1),
                ),
                4 => room.input(
                    s,
                    Input::Scene {
                        seq: t as u32,
                        scene: "s".into(),
                        op: if t < 12 {
                            SceneOp::Join
                        } else {
                            SceneOp::Action(vec![t as u8])
                        },
                    },
                ),
                _ => room.input(
                    s,
                    Input::Emote {
                        seq: t as u32,
                        request: EmoteRequest {
                            emote_id: "wave".into(),
                            timestamp_ms: t,
                            stop: false,
                        },
                    },
                ),
            }
            if t == 40 {
                room.leave(2);
            }
            room.step(t * 20, &mut all);
        }
        all
    }
    let a = run();
    assert!(a.iter().any(|o| matches!(o, Outbound::Audit { .. })));
    assert!(a.iter().any(|o| matches!(
        o,
        Outbound::Event(RoomEvent {
            body: EventBody::Prop { .. },
            ..
        })
    )));
    assert_eq!(a, run());
}

#[test]
fn out_of_reach_pickups_are_refused() {
    // Default reach (2.5 m) from the default spawn (z = -8): props 1 and 2 are ~13 m away.
    let (mut room, mut now) = room_with(1, RoomConfig::default());
    room.input(1, interact(1, InteractionKind::Pickup, 1));
    let out = step(&mut room, &mut now);
    assert_eq!(rejected(&out), vec![(vec![1], 1, Refusal::OutOfReach)]);
    assert_eq!(room.props.slots()[&1].revision, 0);
}

#[test]
fn a_joiner_may_act_in_the_step_that_applies_its_join() {
    let mut room = Room::new("r", near_props_config());
    room.join(1);
    room.input(1, interact(1, InteractionKind::Pickup, 1));
    let mut out = Vec::new();
    room.step(20, &mut out);
    let joined = out
        .iter()
        .position(|o| matches!(o, Outbound::Joined { .. }))
        .unwrap();
    let picked = out
        .iter()
        .position(|o| matches!(o, Outbound::Event(_)))
        .unwrap();
    assert!(joined < picked);
    assert_eq!(prop_events(&out), vec![(1, 1, 1, PropChange::Pickup)]);
}

#[test]
fn a_late_joiner_waits_for_the_masters_state_when_the_log_overflowed() {
    let mut cfg = RoomConfig::default();
    cfg.scene.max_log_actions = 2;
    let (mut room, mut now) = room_with(2, cfg);
    let scene = |seq, op| Input::Scene {
        seq,
        scene: "g".into(),
        op,
    };
    room.input(1, scene(1, SceneOp::Join));
    step(&mut room, &mut now);
    let mut requested = None;
    for i in 0..4u8 {
        room.input(1, scene(2, SceneOp::Action(vec![i])));
        let out = step(&mut room, &mut now);
        for e in events(&out) {
            if let EventBody::SceneStateRequest { min_tick, .. } = e.body {
                assert_eq!(e.to, vec![1], "asked of the master");
                requested.get_or_insert(min_tick);
            }
        }
    }
    assert!(requested.is_some());
    room.input(2, scene(1, SceneOp::Join));
    let out = step(&mut room, &mut now);
    assert!(
        !events(&out)
            .iter()
            .any(|e| matches!(e.body, EventBody::SceneSync { .. })),
        "the log no longer reaches the initial state"
    );
    let at = room.tick() - 1;
    room.input(
        1,
        scene(
            3,
            SceneOp::State {
                tick: at,
                game_state: b"board".to_vec(),
            },
        ),
    );
    let out = step(&mut room, &mut now);
    let sync = events(&out)
        .into_iter()
        .find_map(|e| match &e.body {
            EventBody::SceneSync {
                tick, game_state, ..
            } => Some((e.to.clone(), *tick, game_state.clone())),
            _ => None,
        })
        .expect("the joiner gets the reported state");
    assert_eq!(sync, (vec![2], at, b"board".to_vec()));
}

#[test]
fn a_joiner_learns_who_holds_what() {
    let (mut room, mut now) = room_with(1, near_props_config());
    room.input(1, interact(1, InteractionKind::Pickup, 2));
    step(&mut room, &mut now);
    room.join(2);
    let out = step(&mut room, &mut now);
    let ev = events(&out);
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].to, vec![2], "only the joiner");
    assert_eq!(prop_events(&out), vec![(2, 1, 1, PropChange::Pickup)]);
}

#[test]
fn a_resumed_session_gets_its_entity_back_when_free() {
    let mut room = Room::new("r", RoomConfig::default());
    room.join_with_entity(1, 7);
    room.join_with_entity(2, 7);
    room.join(3);
    let mut out = Vec::new();
    room.step(20, &mut out);
    assert_eq!(room.entity_of(1), Some(7), "a free id is given back");
    let e2 = room.entity_of(2).unwrap();
    assert_ne!(e2, 7, "a taken id is not");
    assert_ne!(room.entity_of(3), Some(7));
    assert_ne!(room.entity_of(3), Some(e2));
}

/// Spread broadcasts and encode threads.
mod spread {
    use std::collections::BTreeMap;

    use plaza_proto::frame::FrameDecoder;

    use super::*;

    /// A room with sessions `1..=n` joined (the joins applied by one step at 20 ms).
    fn room_with(n: u64, cfg: RoomConfig) -> Room {
        let mut room = Room::new("spread", cfg);
        for s in 1..=n {
            room.join(s);
        }
        let mut out = Vec::new();
        room.simulate(20, &mut out);
        assert_eq!(room.member_count(), n as usize);
        room
    }

    /// Every member walks along x, one move per 100 ms (a fifth of them per step).
    fn moves(room: &mut Room, step: u64) {
        let sessions: Vec<(SessionId, Pose)> =
            room.members.iter().map(|(s, m)| (*s, m.pose)).collect();
        for (s, pose) in sessions {
            if s % 5 != step % 5 {
                continue;
            }
            let t = step as f64 * 0.02;
            let mut p = pose;
            p.position[0] += 0.1;
            p.velocity = [1.0, 0.0, 0.0];
            p.movement_kind = 1;
            room.input(
                s,
                Input::Move(MoveInput {
                    seq: step as u32,
                    pose: p,
                    timestamp_s: t,
                    is_instant: false,
                    timestamp_period_s: None,
                }),
            );
        }
    }

    /// Frames of `out` by session, applied to each session's decoder (every one must apply).
    fn deliver(
        out: &[Outbound],
        decoders: &mut BTreeMap<SessionId, FrameDecoder>,
    ) -> BTreeMap<SessionId, u32> {
        let mut got = BTreeMap::new();
        for o in out {
            if let Outbound::Frame { session, bytes, .. } = o {
                decoders
                    .entry(*session)
                    .or_default()
                    .apply(bytes)
                    .expect("every frame applies");
                *got.entry(*session).or_default() += 1;
            }
        }
        got
    }

    /// Every client holds exactly what its encoder says it holds (its nearest avatars + props).
    fn assert_holds_what_encoders_sent(room: &Room, decoders: &BTreeMap<SessionId, FrameDecoder>) {
        assert_eq!(decoders.len(), room.member_count());
        for (s, d) in decoders {
            let enc = &room.members[s].encoder;
            assert_eq!(d.len(), enc.held_len(), "session {s}");
            let others = (room.member_count() - 1).min(room.config().interest_cap as usize);
            assert!(d.len() >= others, "session {s} sees its nearest");
            assert_eq!(d.check(), enc.held_check(), "session {s}");
        }
    }

    #[test]
    fn spread_frames_reach_every_member_once_per_broadcast_period_at_a_fixed_phase() {
        let cfg = RoomConfig {
            spread_from_members: 8,
            ..RoomConfig::default()
        };
        let mut room = Room::new("spread", cfg);
        for s in 1..=40 {
            room.join(s);
        }
        let mut decoders = BTreeMap::new();
        // The shell's schedule: the core's wake grid (steps every 20 ms, broadcasts every
        // 50 ms, group slots every 10 ms while spread), the step first when both are due.
        let grid = WakeGrid::new(room.config());
        let mut now = std::time::Duration::ZERO;
        // Frames per session in the current period; the slot (0: the broadcast's own) at which
        // each session got its frame.
        let mut period: BTreeMap<SessionId, u32> = BTreeMap::new();
        let mut phase_of: BTreeMap<SessionId, u64> = BTreeMap::new();
        let mut periods_checked = 0;
        while room.tick() < 200 {
            now = grid.next_after(now, room.wakes_on_group_grid());
            let now_ms = now.as_millis() as u64;
            if now_ms.is_multiple_of(50) && now_ms > 50 {
                // A complete period: one frame for every member, none left for the flush.
                assert_eq!(period.len(), 40, "every member got a frame");
                assert!(period.values().all(|n| *n == 1), "{period:?}");
                periods_checked += 1;
                period.clear();
            }
            if now_ms.is_multiple_of(20) {
                let next = room.tick() + 1;
                moves(&mut room, next);
            }
            let mut out = Vec::new();
            room.advance(now, &mut out);
            for (s, n) in deliver(&out, &mut decoders) {
                *period.entry(s).or_default() += n;
                let slot = now_ms % 50 / 10;
                let phase = *phase_of.entry(s).or_insert(slot);
                assert_eq!(phase, slot, "session {s} keeps its phase");
            }
        }
        assert!(periods_checked >= 70, "{periods_checked}");
        // The work is spread: every slot of the period has members.
        let mut per_phase = [0; 5];
        for p in phase_of.values() {
            per_phase[*p as usize] += 1;
        }
        assert!(per_phase.iter().all(|n| *n >= 6), "{per_phase:?}");
        assert_holds_what_encoders_sent(&room, &decoders);
    }

    #[test]
    fn spread_frames_through_step_keep_the_broadcast_rate() {
        let cfg = RoomConfig {
            spread_from_members: 8,
            ..RoomConfig::default()
        };
        let mut room = room_with(24, cfg);
        let mut decoders = BTreeMap::new();
        let mut frames: BTreeMap<SessionId, u32> = BTreeMap::new();
        for t in 2..=101u64 {
            moves(&mut room, t);
            let mut out = Vec::new();
            room.step(t * 20, &mut out);
            for (s, n) in deliver(&out, &mut decoders) {
                assert_eq!(n, 1, "one frame per step at most");
                *frames.entry(s).or_default() += n;
            }
        }
        // 100 steps at 50 Hz are 40 broadcast periods at 20 Hz: 40 frames each, give or take
        // the period still under way.
        assert_eq!(frames.len(), 24);
        assert!(frames.values().all(|n| (39..=40).contains(n)), "{frames:?}");
        assert_holds_what_encoders_sent(&room, &decoders);
    }

    #[test]
    fn encode_threads_give_the_same_frames() {
        let run = |threads: u32, spread: u32| {
            let cfg = RoomConfig {
                encode_threads: threads,
                spread_from_members: spread,
                max_members: 200,
                ..RoomConfig::default()
            };
            let mut room = room_with(140, cfg);
            let mut all = Vec::new();
            for t in 2..=12u64 {
                moves(&mut room, t);
                room.step(t * 20, &mut all);
            }
            (all, room.stats().frames, room.stats().frame_bytes)
        };
        for spread in [0, 64] {
            let one = run(1, spread);
            let two = run(2, spread);
            assert!(one.1 > 0);
            assert_eq!(one.1, two.1);
            assert_eq!(one.2, two.2);
            assert!(one.0 == two.0, "same outbound, in the same order");
        }
    }
}

/// A frame shows each moving avatar where its last move's velocity has carried it by the
/// frame's tick, for at most `MAX_LEAD_MS`; a stopped avatar where it stopped.
#[test]
fn frames_carry_a_moving_avatar_forward_to_their_tick() {
    let mut room = Room::new("r", RoomConfig::default());
    room.join(1);
    room.join(2);
    let mut decoders = BTreeMap::new();
    let mut now = 0;
    let spawn = spawns(&step_until_broadcast(&mut room, &mut now, &mut decoders));
    let p = spawn[&2];
    room.input(2, mv(1, p[0], p[2], 1.0));
    step_until_broadcast(&mut room, &mut now, &mut decoders);
    // A move at 1 m/s along x, then one broadcast per step count until it is shown.
    room.input(2, mv(2, p[0] + 0.1, p[2], 1.1));
    let e = room.entity_of(2).unwrap();
    let applied_ms = now + 20;
    step_until_broadcast(&mut room, &mut now, &mut decoders);
    let lead = (now - applied_ms).min(100) as f32 / 1000.0;
    let x = decoders[&1].get(e).unwrap().pose.position_m()[0];
    assert!(
        (x - (p[0] + 0.1 + lead)).abs() <= POSITION_ERROR_M,
        "{x} vs {}",
        p[0] + 0.1 + lead
    );
    // One second without a move: carried at most the client's own step between its moves
    // (0.1 s here), never further.
    for _ in 0..10 {
        step_until_broadcast(&mut room, &mut now, &mut decoders);
    }
    let x = decoders[&1].get(e).unwrap().pose.position_m()[0];
    assert!((x - (p[0] + 0.1 + 0.1)).abs() <= POSITION_ERROR_M, "{x}");
    // A client stepping 40 ms between moves is carried at most 40 ms.
    room.input(2, mv(3, p[0] + 0.14, p[2], 1.14));
    for _ in 0..10 {
        step_until_broadcast(&mut room, &mut now, &mut decoders);
    }
    let x = decoders[&1].get(e).unwrap().pose.position_m()[0];
    assert!((x - (p[0] + 0.14 + 0.04)).abs() <= POSITION_ERROR_M, "{x}");
    // The mover's own state is its authoritative pose, not carried forward.
    let own = room.pose_of(2).unwrap();
    assert!((own.position[0] - (p[0] + 0.14)).abs() < 1e-6);
}

#[test]
fn lead_pose_leaves_a_still_avatar_alone() {
    let still = Pose {
        position: [1.0, 0.0, 2.0],
        ..Pose::default()
    };
    assert_eq!(encode::lead_pose(&still, 80), still);
    let moving = Pose {
        velocity: [2.0, 0.0, -1.0],
        ..still
    };
    let led = encode::lead_pose(&moving, 40);
    assert!((led.position[0] - 1.08).abs() < 1e-6 && (led.position[2] - 1.96).abs() < 1e-6);
    let capped = encode::lead_pose(&moving, 10_000);
    assert!((capped.position[0] - 1.2).abs() < 1e-6);
}
