//! The handoff state a draining node leaves in the directory for a room's next activation
//! (`plaza.node.v1.Handoff`), and its mapping to and from the room core's
//! [`RoomState`].
//!
//! The handoff pairs each member's session with its wallet (the core knows sessions only) and
//! carries the room core's whole state in `room_state` (a `plaza.node.v1.RoomState`): poses,
//! held props, open consents, emote schedules, lockstep scenes, and the counters that keep event
//! and audit sequences gap-free. Session ids are gateway-issued and survive a resume, so a
//! session that re-attaches to the next activation finds its avatar, its prop and its consents
//! where it left them.
//!
//! The bytes come back from the directory, so decoding trusts nothing: an unknown layout, an
//! unknown enum name, a non-finite number or a handoff of another room is a typed
//! [`HandoffError`]; [`plaza_room_core::Room::restore`] then drops entries that do not fit
//! together.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use plaza_node_proto::{self as pbn, Handoff, HandoffMember};
use plaza_proto::quant::Pose;
use plaza_room_core::SessionId;
use plaza_room_core::consent::{Consent, ConsentKind, ConsentState, Party};
use plaza_room_core::emotes::EmoteSlot;
use plaza_room_core::scene::{Scene, SceneClientState};
use plaza_room_core::state::{MemberState, PropState, RoomState};
use prost::Message as _;

/// The `RoomState` layout this node writes and reads.
pub const LAYOUT: u32 = 1;

/// Why a handoff state was not usable.
#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    /// The bytes are not a `Handoff` (or its `room_state` not a `RoomState`).
    #[error("handoff state does not decode: {0}")]
    Decode(#[from] prost::DecodeError),
    /// A `RoomState` layout this node does not know.
    #[error("room state layout {0} is not known (this node reads layout {LAYOUT})")]
    Layout(u32),
    /// The handoff names another room.
    #[error("handoff state is for room {found:?}, not {expected:?}")]
    WrongRoom {
        /// The room being activated.
        expected: String,
        /// The room the handoff names.
        found: String,
    },
    /// A field holds a value no node writes.
    #[error("room state: {0}")]
    Invalid(String),
}

/// One member of a handed-off room.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandedOffMember {
    /// Identity.
    pub wallet: String,
    /// Gateway-issued session id (0 when the writer did not know it).
    pub session: SessionId,
    /// Avatar entity id.
    pub entity: u32,
}

/// A decoded handoff state.
#[derive(Clone, Debug, PartialEq)]
pub struct HandedOff {
    /// The members, with their wallets.
    pub members: Vec<HandedOffMember>,
    /// The room core's state, when the writer could take one.
    pub room: Option<RoomState>,
    /// The writer's last appended audit sequence number (0: none known).
    pub audit_seq: u64,
}

/// Encodes a handoff state of `room_id`: `members` pair sessions with wallets; `room` is the
/// core's state (`None`: members and entities only).
pub fn encode(room_id: &str, members: &[HandedOffMember], room: Option<&RoomState>) -> Vec<u8> {
    encode_at(room_id, members, room, 0)
}

/// [`encode`], recording `audit_seq`: the last audit record the writer had appended.
pub fn encode_at(
    room_id: &str,
    members: &[HandedOffMember],
    room: Option<&RoomState>,
    audit_seq: u64,
) -> Vec<u8> {
    Handoff {
        room_id: room_id.to_owned(),
        members: members
            .iter()
            .map(|m| HandoffMember {
                wallet: m.wallet.clone(),
                entity: m.entity,
                session: m.session,
            })
            .collect(),
        room_state: room
            .map(|r| room_state(r).encode_to_vec().into())
            .unwrap_or_default(),
        audit_seq,
    }
    .encode_to_vec()
}

/// Decodes a handoff state stored for `room_id`.
pub fn decode(room_id: &str, bytes: &[u8]) -> Result<HandedOff, HandoffError> {
    let h = Handoff::decode(bytes)?;
    if h.room_id != room_id {
        return Err(HandoffError::WrongRoom {
            expected: room_id.to_owned(),
            found: h.room_id,
        });
    }
    let members = h
        .members
        .into_iter()
        .map(|m| HandedOffMember {
            wallet: m.wallet,
            session: m.session,
            entity: m.entity,
        })
        .collect();
    let room = if h.room_state.is_empty() {
        None
    } else {
        let s = pbn::RoomState::decode(h.room_state)?;
        let snap = core_state(room_id, s)?;
        Some(snap)
    };
    Ok(HandedOff {
        members,
        room,
        audit_seq: h.audit_seq,
    })
}

/// What [`fold_audit`] did to a checkpoint's consents.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuditFold {
    /// Consent records of the writer after the checkpoint that were applied.
    pub replayed: usize,
    /// Consents of the checkpoint the audit shows ended since: not brought back.
    pub ended: usize,
    /// Consents the audit shows opened or moved on since the checkpoint.
    pub changed: usize,
    /// The highest audit sequence number read (the log's head as far as it was read).
    pub last_seq: u64,
}

/// Folds into a checkpoint's room state the consent transitions that its writer (the
/// activation of epoch `writer`) appended to the audit log after the checkpoint
/// (`seq > after_seq`): the audit log is the truth. A consent the audit shows ended is not
/// brought back; one it shows opened or moved on is restored in its audited state (parties,
/// kind and state are all in the record). Records of other epochs, non-consent records and
/// records that do not parse are skipped (they are read, not trusted).
pub fn fold_audit(
    snap: &mut RoomState,
    writer: plaza_directory::Epoch,
    after_seq: u64,
    records: &[plaza_directory::AuditRecord],
) -> AuditFold {
    let mut fold = AuditFold {
        last_seq: after_seq,
        ..AuditFold::default()
    };
    for r in records {
        fold.last_seq = fold.last_seq.max(r.seq);
        if r.seq <= after_seq || r.epoch != writer || !r.kind.starts_with("consent.") {
            continue;
        }
        let Some(c) = consent_of_record(&r.detail, snap.now_ms) else {
            continue;
        };
        fold.replayed += 1;
        snap.consent_last_id = snap.consent_last_id.max(c.id);
        let at = snap.consents.iter().position(|o| o.id == c.id);
        match (at, c.state.is_terminal()) {
            (Some(i), true) => {
                snap.consents.remove(i);
                fold.ended += 1;
            }
            (Some(i), false) => {
                snap.consents[i] = c;
                fold.changed += 1;
            }
            (None, false) => {
                snap.consents.push(c);
                fold.changed += 1;
            }
            (None, true) => {}
        }
    }
    snap.consents.sort_by_key(|c| c.id);
    fold
}

/// The consent a `consent.*` audit record describes (its `to` state), if it parses.
fn consent_of_record(detail: &str, now_ms: u64) -> Option<Consent> {
    let v: serde_json::Value = serde_json::from_str(detail).ok()?;
    let num = |k: &str| v.get(k).and_then(serde_json::Value::as_u64);
    let text = |k: &str| v.get(k).and_then(serde_json::Value::as_str);
    let state = ConsentState::ALL
        .into_iter()
        .find(|s| Some(s.as_str()) == text("to"))?;
    Some(Consent {
        id: num("consent_id")?,
        kind: ConsentKind::parse(text("kind")?)?,
        requester: Party {
            session: num("requester_session")?,
            entity: u32::try_from(num("requester")?).ok()?,
        },
        target: Party {
            session: num("target_session")?,
            entity: u32::try_from(num("target")?).ok()?,
        },
        state,
        since_ms: now_ms,
    })
}

fn v3(v: [f32; 3]) -> Option<pbn::Vec3f> {
    Some(pbn::Vec3f {
        x: v[0],
        y: v[1],
        z: v[2],
    })
}

fn room_state(r: &RoomState) -> pbn::RoomState {
    pbn::RoomState {
        layout: LAYOUT,
        tick: r.tick,
        now_ms: r.now_ms,
        broadcast_acc: r.broadcast_acc,
        room_seq: r.room_seq,
        audit_seq: r.audit_seq,
        members: r
            .members
            .iter()
            .map(|m| pbn::MemberState {
                session: m.session,
                entity: m.entity,
                generation: u32::from(m.generation),
                position: v3(m.pose.position),
                velocity: v3(m.pose.velocity),
                yaw_deg: m.pose.yaw_deg,
                movement_kind: u32::from(m.pose.movement_kind),
                anim_flags: u32::from(m.pose.anim_flags),
                has_head: m.pose.head.is_some(),
                head_yaw: m.pose.head.map_or(0.0, |h| h[0]),
                head_pitch: m.pose.head.map_or(0.0, |h| h[1]),
                point_at: m.pose.point_at.and_then(v3),
                last_input_seq: m.last_input_seq,
                has_last_timestamp: m.last_timestamp_s.is_some(),
                last_timestamp_s: m.last_timestamp_s.unwrap_or(0.0),
                wallet: m.wallet.clone(),
                display_name: m.display_name.clone(),
                profile_version: m.profile_version,
                personal_space_m: m.personal_space_m,
            })
            .collect(),
        props: r
            .props
            .iter()
            .map(|p| pbn::PropState {
                prop_id: p.prop_id,
                revision: p.revision,
                holder_session: p.holder.map_or(0, |h| h.0),
                holder_entity: p.holder.map_or(0, |h| h.1),
                position: v3(p.position),
                rotation: p.rotation.to_vec(),
                velocity: v3(p.velocity),
            })
            .collect(),
        consent_last_id: r.consent_last_id,
        consents: r
            .consents
            .iter()
            .map(|c| pbn::OpenConsent {
                id: c.id,
                kind: c.kind.as_str().to_owned(),
                requester_session: c.requester.session,
                requester_entity: c.requester.entity,
                target_session: c.target.session,
                target_entity: c.target.entity,
                state: c.state.as_str().to_owned(),
                since_ms: c.since_ms,
            })
            .collect(),
        emotes: r
            .emotes
            .iter()
            .map(|(session, e)| pbn::EmoteState {
                session: *session,
                last_ms: e.last_ms,
                current: e.current.clone().unwrap_or_default(),
            })
            .collect(),
        emotes_stale: r.emotes_stale,
        scenes: r
            .scenes
            .iter()
            .map(|(id, s)| pbn::SceneState {
                id: id.clone(),
                clients: s
                    .clients
                    .iter()
                    .map(|(session, (entity, st))| pbn::SceneClient {
                        session: *session,
                        entity: *entity,
                        state: st.as_str().to_owned(),
                    })
                    .collect(),
                current: actions(&s.current),
                log: s
                    .log
                    .iter()
                    .map(|(tick, a)| pbn::SceneTickLog {
                        tick: *tick,
                        actions: actions(a),
                    })
                    .collect(),
                log_actions: s.log_actions as u64,
                state: s.state.clone().into(),
                state_tick: s.state_tick,
                dropped_upto: s.dropped_upto,
                last_sent_tick: s.last_sent_tick,
                state_requested: s.state_requested,
                catching_up: s.catching_up.iter().copied().collect(),
            })
            .collect(),
        blocks: r
            .blocks
            .iter()
            .map(|(a, b)| pbn::BlockPair {
                blocker: a.clone(),
                blocked: b.clone(),
            })
            .collect(),
    }
}

fn actions(a: &[(u32, Vec<u8>)]) -> Vec<pbn::SceneAction> {
    a.iter()
        .map(|(entity, payload)| pbn::SceneAction {
            entity: *entity,
            payload: payload.clone().into(),
        })
        .collect()
}

fn invalid(what: impl Into<String>) -> HandoffError {
    HandoffError::Invalid(what.into())
}

fn finite(what: &str, v: &[f32]) -> Result<(), HandoffError> {
    if v.iter().all(|x| x.is_finite()) {
        Ok(())
    } else {
        Err(invalid(format!("{what} is not finite")))
    }
}

fn vec(what: &str, v: Option<pbn::Vec3f>) -> Result<[f32; 3], HandoffError> {
    let v = v.ok_or_else(|| invalid(format!("{what} missing")))?;
    let a = [v.x, v.y, v.z];
    finite(what, &a)?;
    Ok(a)
}

fn core_state(room_id: &str, s: pbn::RoomState) -> Result<RoomState, HandoffError> {
    if s.layout != LAYOUT {
        return Err(HandoffError::Layout(s.layout));
    }
    let mut members = Vec::with_capacity(s.members.len());
    for m in s.members {
        let head = m.has_head.then_some([m.head_yaw, m.head_pitch]);
        let point_at = m.point_at.map(|p| vec("point_at", Some(p))).transpose()?;
        finite("yaw", &[m.yaw_deg, m.head_yaw, m.head_pitch])?;
        let timestamp = m.has_last_timestamp.then_some(m.last_timestamp_s);
        if timestamp.is_some_and(|t| !t.is_finite()) {
            return Err(invalid("last_timestamp_s is not finite"));
        }
        members.push(MemberState {
            session: m.session,
            entity: m.entity,
            generation: u16::try_from(m.generation)
                .map_err(|_| invalid(format!("generation {} out of range", m.generation)))?,
            pose: Pose {
                position: vec("position", m.position)?,
                velocity: vec("velocity", m.velocity)?,
                yaw_deg: m.yaw_deg,
                movement_kind: u8::try_from(m.movement_kind.min(3)).unwrap_or(0),
                anim_flags: (m.anim_flags & 0xffff) as u16,
                head,
                point_at,
            },
            last_input_seq: m.last_input_seq,
            last_timestamp_s: timestamp,
            wallet: m.wallet,
            display_name: m.display_name,
            profile_version: m.profile_version,
            personal_space_m: m.personal_space_m,
        });
    }
    let mut props = Vec::with_capacity(s.props.len());
    for p in s.props {
        let rotation: [f32; 4] = p.rotation.as_slice().try_into().map_err(|_| {
            invalid(format!(
                "prop {} rotation has {} parts",
                p.prop_id,
                p.rotation.len()
            ))
        })?;
        finite("rotation", &rotation)?;
        props.push(PropState {
            prop_id: p.prop_id,
            revision: p.revision,
            holder: (p.holder_session != 0).then_some((p.holder_session, p.holder_entity)),
            position: vec("prop position", p.position)?,
            rotation,
            velocity: vec("prop velocity", p.velocity)?,
        });
    }
    let mut consents = Vec::with_capacity(s.consents.len());
    for c in s.consents {
        let kind = ConsentKind::parse(&c.kind)
            .ok_or_else(|| invalid(format!("consent kind {:?}", c.kind)))?;
        let state = ConsentState::ALL
            .into_iter()
            .find(|st| st.as_str() == c.state)
            .ok_or_else(|| invalid(format!("consent state {:?}", c.state)))?;
        consents.push(Consent {
            id: c.id,
            kind,
            requester: Party {
                session: c.requester_session,
                entity: c.requester_entity,
            },
            target: Party {
                session: c.target_session,
                entity: c.target_entity,
            },
            state,
            since_ms: c.since_ms,
        });
    }
    let emotes = s
        .emotes
        .into_iter()
        .map(|e| {
            let slot = EmoteSlot {
                last_ms: e.last_ms,
                current: (!e.current.is_empty()).then_some(e.current),
            };
            (e.session, slot)
        })
        .collect();
    let mut scenes = BTreeMap::new();
    for sc in s.scenes {
        let mut clients = BTreeMap::new();
        for c in sc.clients {
            let st = scene_client_state(&c.state)?;
            clients.insert(c.session, (c.entity, st));
        }
        let scene = Scene {
            clients,
            current: tick_actions(sc.current),
            log: sc
                .log
                .into_iter()
                .map(|l| (l.tick, tick_actions(l.actions)))
                .collect::<VecDeque<_>>(),
            log_actions: usize::try_from(sc.log_actions).unwrap_or(usize::MAX),
            state: sc.state.to_vec(),
            state_tick: sc.state_tick,
            dropped_upto: sc.dropped_upto,
            last_sent_tick: sc.last_sent_tick,
            state_requested: sc.state_requested,
            catching_up: sc.catching_up.into_iter().collect::<BTreeSet<_>>(),
        };
        scenes.insert(sc.id, scene);
    }
    Ok(RoomState {
        room_id: room_id.to_owned(),
        tick: s.tick,
        now_ms: s.now_ms,
        broadcast_acc: s.broadcast_acc,
        room_seq: s.room_seq,
        audit_seq: s.audit_seq,
        members,
        props,
        consent_last_id: s.consent_last_id,
        consents,
        emotes,
        emotes_stale: s.emotes_stale,
        scenes,
        blocks: s
            .blocks
            .into_iter()
            .map(|b| (b.blocker, b.blocked))
            .collect(),
    })
}

fn scene_client_state(s: &str) -> Result<SceneClientState, HandoffError> {
    [
        SceneClientState::Master,
        SceneClientState::WaitingForLateJoinerSync,
        SceneClientState::CatchingUp,
        SceneClientState::Normal,
    ]
    .into_iter()
    .find(|st| st.as_str() == s)
    .ok_or_else(|| invalid(format!("scene client state {s:?}")))
}

fn tick_actions(a: Vec<pbn::SceneAction>) -> Vec<(u32, Vec<u8>)> {
    a.into_iter()
        .map(|x| (x.entity, x.payload.to_vec()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> RoomState {
        let pose = Pose {
            position: [1.0, 0.0, -2.5],
            velocity: [0.5, 0.0, 0.25],
            yaw_deg: 90.0,
            movement_kind: 2,
            anim_flags: 0x0102,
            head: Some([10.0, -5.0]),
            point_at: Some([3.0, 1.0, 3.0]),
        };
        let party = |session, entity| Party { session, entity };
        let mut scene = Scene {
            clients: [
                (11, (1, SceneClientState::Master)),
                (12, (2, SceneClientState::CatchingUp)),
            ]
            .into(),
            current: vec![(1, vec![9, 9])],
            log: [(41, vec![(2, vec![1, 2, 3])])].into(),
            log_actions: 1,
            state: vec![7; 5],
            state_tick: 40,
            dropped_upto: 3,
            last_sent_tick: 41,
            state_requested: true,
            catching_up: [12].into(),
        };
        scene.log.push_back((42, Vec::new()));
        RoomState {
            room_id: "r".into(),
            tick: 4_000,
            now_ms: 80_000,
            broadcast_acc: 2,
            room_seq: 77,
            audit_seq: 9,
            members: vec![
                MemberState {
                    session: 11,
                    entity: 1,
                    generation: 3,
                    pose,
                    last_input_seq: 500,
                    last_timestamp_s: Some(1234.5),
                    wallet: "0xaaa".into(),
                    display_name: "Ana".into(),
                    profile_version: 4,
                    personal_space_m: 1.5,
                },
                MemberState {
                    session: 12,
                    entity: 2,
                    generation: 0,
                    pose: Pose::default(),
                    last_input_seq: 0,
                    last_timestamp_s: None,
                    wallet: "0xbbb".into(),
                    display_name: String::new(),
                    profile_version: 0,
                    personal_space_m: 0.0,
                },
            ],
            props: vec![
                PropState {
                    prop_id: 1,
                    revision: 4,
                    holder: Some((11, 1)),
                    position: [5.0, 1.2, 4.0],
                    rotation: [0.0, 0.0, 0.0, 1.0],
                    velocity: [0.0; 3],
                },
                PropState {
                    prop_id: 2,
                    revision: 0,
                    holder: None,
                    position: [-5.0, 0.25, 5.0],
                    rotation: [0.0, 0.7, 0.0, 0.7],
                    velocity: [1.0, 0.0, 0.0],
                },
            ],
            consent_last_id: 3,
            consents: vec![
                Consent {
                    id: 2,
                    kind: ConsentKind::HandHold,
                    requester: party(11, 1),
                    target: party(12, 2),
                    state: ConsentState::Active,
                    since_ms: 79_000,
                },
                Consent {
                    id: 3,
                    kind: ConsentKind::Follow,
                    requester: party(12, 2),
                    target: party(11, 1),
                    state: ConsentState::Requested,
                    since_ms: 79_500,
                },
            ],
            emotes: [(
                11,
                EmoteSlot {
                    last_ms: 99,
                    current: Some("wave".into()),
                },
            )]
            .into(),
            emotes_stale: 2,
            scenes: [("chess".to_owned(), scene)].into(),
            blocks: vec![("0xaaa".into(), "0xbbb".into())],
        }
    }

    fn members() -> Vec<HandedOffMember> {
        vec![
            HandedOffMember {
                wallet: "0xa".into(),
                session: 11,
                entity: 1,
            },
            HandedOffMember {
                wallet: "0xb".into(),
                session: 12,
                entity: 2,
            },
        ]
    }

    #[test]
    fn round_trips_members_and_the_whole_room_state() {
        let snap = sample();
        let bytes = encode("r", &members(), Some(&snap));
        let back = decode("r", &bytes).unwrap();
        assert_eq!(back.members, members());
        assert_eq!(back.room, Some(snap));
    }

    #[test]
    fn members_only_handoffs_decode_without_room_state() {
        let bytes = encode("r", &members(), None);
        let back = decode("r", &bytes).unwrap();
        assert_eq!(back.room, None);
        assert_eq!(back.members.len(), 2);
    }

    #[test]
    fn bad_handoffs_are_typed_errors() {
        let snap = sample();
        let bytes = encode("r", &members(), Some(&snap));
        assert!(matches!(
            decode("other", &bytes),
            Err(HandoffError::WrongRoom { .. })
        ));
        assert!(matches!(
            decode("r", &[0xff, 0xff, 0xff]),
            Err(HandoffError::Decode(_))
        ));
        let mut st = room_state(&snap);
        st.layout = 2;
        let h = |st: &pbn::RoomState| {
            Handoff {
                room_id: "r".into(),
                members: Vec::new(),
                room_state: st.encode_to_vec().into(),
                audit_seq: 0,
            }
            .encode_to_vec()
        };
        assert!(matches!(decode("r", &h(&st)), Err(HandoffError::Layout(2))));
        let mut st = room_state(&snap);
        st.consents[0].state = "dancing".into();
        assert!(matches!(
            decode("r", &h(&st)),
            Err(HandoffError::Invalid(_))
        ));
        let mut st = room_state(&snap);
        st.members[0].position = None;
        assert!(matches!(
            decode("r", &h(&st)),
            Err(HandoffError::Invalid(_))
        ));
        let mut st = room_state(&snap);
        st.props[0].velocity.as_mut().unwrap().y = f32::INFINITY;
        assert!(matches!(
            decode("r", &h(&st)),
            Err(HandoffError::Invalid(_))
        ));
        let mut st = room_state(&snap);
        st.members[1].generation = 70_000;
        assert!(matches!(
            decode("r", &h(&st)),
            Err(HandoffError::Invalid(_))
        ));
    }

    proptest! {
        /// Whatever the directory hands back, decoding returns (never panics).
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode("r", &bytes);
        }

        /// A valid handoff with bytes flipped decodes or fails with a typed error.
        #[test]
        fn corrupted_handoffs_never_panic(
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)
        ) {
            let mut bytes = encode("r", &members(), Some(&sample()));
            for (i, b) in flips {
                let at = i.index(bytes.len());
                bytes[at] ^= b;
            }
            let _ = decode("r", &bytes);
        }
    }

    fn record(
        seq: u64,
        epoch: plaza_directory::Epoch,
        kind: &str,
        detail: &str,
    ) -> plaza_directory::AuditRecord {
        plaza_directory::AuditRecord {
            room: "r".into(),
            seq,
            epoch,
            at_ms: 0,
            kind: kind.into(),
            detail: detail.into(),
        }
    }

    fn transition(
        id: u64,
        kind: &str,
        req: (u64, u32),
        tgt: (u64, u32),
        from: &str,
        to: &str,
    ) -> String {
        format!(
            r#"{{"consent_id":{id},"kind":"{kind}","requester":{},"requester_session":{},"target":{},"target_session":{},"from":"{from}","to":"{to}","cause":"x","tick":1}}"#,
            req.1, req.0, tgt.1, tgt.0
        )
    }

    /// A checkpoint's consents are brought up to what the writer audited after it: ended ones
    /// stay ended, moved-on ones take their audited state, newly opened ones come back; other
    /// epochs' records, records before the checkpoint and junk are skipped.
    #[test]
    fn the_audit_log_after_a_checkpoint_is_folded_into_its_consents() {
        let writer = plaza_directory::Epoch::new(1, 7);
        let other = plaza_directory::Epoch::new(1, 6);
        let mut snap = sample();
        let recs = vec![
            // Before the checkpoint: ignored even though it would end consent 2.
            record(
                40,
                writer,
                "consent.released",
                &transition(2, "hand_hold", (11, 1), (12, 2), "active", "released"),
            ),
            // Consent 3 (requested in the checkpoint) was declined after it.
            record(
                42,
                writer,
                "consent.declined",
                &transition(3, "follow", (12, 2), (11, 1), "requested", "declined"),
            ),
            // A new consent 4 was requested and consented after it.
            record(
                43,
                writer,
                "consent.requested",
                &transition(4, "follow", (11, 1), (12, 2), "", "requested"),
            ),
            record(
                44,
                writer,
                "consent.consented",
                &transition(4, "follow", (11, 1), (12, 2), "requested", "consented"),
            ),
            // Another epoch's record (not the writer's) and a refusal and junk: skipped.
            record(
                45,
                other,
                "consent.released",
                &transition(2, "hand_hold", (11, 1), (12, 2), "active", "released"),
            ),
            record(
                46,
                writer,
                "consent.refused",
                r#"{"consent_id":9,"reason":"blocked"}"#,
            ),
            record(47, writer, "consent.active", "not json"),
            record(48, writer, "admin.kick", "{}"),
        ];
        let fold = fold_audit(&mut snap, writer, 41, &recs);
        assert_eq!(fold.last_seq, 48);
        assert_eq!(fold.replayed, 3, "{fold:?}");
        assert_eq!(fold.ended, 1);
        assert_eq!(fold.changed, 2);
        let ids: Vec<(u64, ConsentState)> = snap.consents.iter().map(|c| (c.id, c.state)).collect();
        assert_eq!(
            ids,
            vec![(2, ConsentState::Active), (4, ConsentState::Consented)]
        );
        assert_eq!(snap.consent_last_id, 4);
        let c4 = snap.consents[1];
        assert_eq!(c4.kind, ConsentKind::Follow);
        assert_eq!((c4.requester.session, c4.requester.entity), (11, 1));
        assert_eq!((c4.target.session, c4.target.entity), (12, 2));
        assert_eq!(c4.since_ms, snap.now_ms);
        // The checkpoint's audit sequence number travels with the handoff.
        let bytes = encode_at("r", &[], Some(&snap), 48);
        assert_eq!(decode("r", &bytes).unwrap().audit_seq, 48);
    }
}
