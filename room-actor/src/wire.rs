//! Mapping between the wire (`plaza.v1` protobuf) and the room core's inputs and events.
//!
//! Generated types stop here: the core sees only its own `Input`, the client sees only
//! `plaza.v1` messages. Every arm is explicit, so a new message or event is a compile error
//! until it is mapped.

use plaza_proto::compressed::TimestampDecoder;
use plaza_proto::pb::{self, client_envelope};
use plaza_proto::quant::Pose;
use plaza_room_core::consent::ConsentOp;
use plaza_room_core::emotes::EmoteRequest;
use plaza_room_core::events::{EventBody, PropChange, RoomEvent, TeleportCause};
use plaza_room_core::interactions::{InteractionKind, InteractionRequest};
use plaza_room_core::people::BlockOp;
use plaza_room_core::scene::{SceneClientEvent, SceneOp};
use plaza_room_core::{Input, MoveInput};

/// What a client envelope asks of the room.
#[derive(Debug)]
pub(crate) enum Decoded {
    /// An input for the core.
    Input(Input),
    /// The client leaves the room.
    Leave,
    /// Refused before reaching the core: `(what, why)`.
    Invalid(&'static str, &'static str),
    /// A moderator's action (`plaza.v1.OperatorAction`): carried out by the actor for an
    /// operator's link only ([`crate::room::admin`]), never by the core.
    Operator {
        /// The action (`UNSPECIFIED` for an unknown value: refused `unknown_op`).
        op: pb::OperatorOp,
        /// The member acted on.
        target_wallet: String,
    },
    /// Nothing for the room (handled by the gateway or empty).
    Ignore,
}

/// A wire vector as the core's; a missing one is zero.
fn v3(v: &Option<pb::Vec3>) -> [f32; 3] {
    v.as_ref().map_or([0.0; 3], |v| [v.x, v.y, v.z])
}

/// The float pose of a movement message; missing vectors are zero.
pub(crate) fn pose_from_movement(m: &pb::Movement) -> Pose {
    let head =
        (m.head_ik_yaw_enabled || m.head_ik_pitch_enabled).then_some([m.head_yaw, m.head_pitch]);
    Pose {
        position: v3(&m.position),
        velocity: v3(&m.velocity),
        yaw_deg: m.rotation_y,
        movement_kind: m.movement_kind.clamp(0, 3) as u8,
        anim_flags: (m.anim_flags & 0xffff) as u16,
        head,
        point_at: m.is_pointing_at.then(|| v3(&m.point_at)),
    }
}

/// Decodes one envelope body into room input. `timestamps` is the session's decoder of
/// compressed movement timestamps (one per sender, as the seed requires).
pub(crate) fn decode(
    body: client_envelope::Body,
    seq: u32,
    timestamps: &mut TimestampDecoder,
) -> Decoded {
    use client_envelope::Body as B;
    match body {
        B::Movement(m) => Decoded::Input(Input::Move(MoveInput {
            seq,
            pose: pose_from_movement(&m),
            timestamp_s: m.timestamp,
            is_instant: m.is_instant,
            timestamp_period_s: None,
        })),
        B::MovementCompressed(c) => {
            let compressed = plaza_proto::compressed::Compressed::from(c);
            match plaza_proto::compressed::decompress(&compressed, timestamps) {
                Ok(d) => Decoded::Input(Input::Move(MoveInput {
                    seq,
                    pose: d.pose,
                    timestamp_s: d.timestamp_s,
                    is_instant: d.is_instant,
                    timestamp_period_s: Some(plaza_proto::compressed::TIMESTAMP_BUFFER_S),
                })),
                Err(_) => Decoded::Invalid("movement_compressed", "does not decode"),
            }
        }
        B::Resync(_) => Decoded::Input(Input::Resync),
        B::Leave(_) => Decoded::Leave,
        B::Interaction(i) => {
            let kind = match pb::InteractionKind::try_from(i.kind) {
                Ok(pb::InteractionKind::Pickup) => InteractionKind::Pickup,
                Ok(pb::InteractionKind::Place) => InteractionKind::Place,
                Ok(pb::InteractionKind::Throw) => InteractionKind::Throw,
                _ => return Decoded::Invalid("interaction", "unknown interaction kind"),
            };
            Decoded::Input(Input::Interact {
                seq,
                request: InteractionRequest {
                    kind,
                    prop_id: i.prop_id,
                    room: (!i.room_id.is_empty()).then_some(i.room_id),
                    position: v3(&i.position),
                    velocity: v3(&i.velocity),
                },
            })
        }
        B::Consent(c) => {
            let op = match pb::ConsentOp::try_from(c.op) {
                Ok(pb::ConsentOp::Request) => Some(ConsentOp::Request),
                Ok(pb::ConsentOp::Consent) => Some(ConsentOp::Consent),
                Ok(pb::ConsentOp::Decline) => Some(ConsentOp::Decline),
                Ok(pb::ConsentOp::Activate) => Some(ConsentOp::Activate),
                Ok(pb::ConsentOp::Release) => Some(ConsentOp::Release),
                Ok(pb::ConsentOp::Cancel) => Some(ConsentOp::Cancel),
                // Refused (and audited) by the core.
                _ => None,
            };
            Decoded::Input(Input::Consent {
                seq,
                op,
                kind: c.kind,
                target_entity: c.target_entity,
                consent_id: c.consent_id,
            })
        }
        B::Emote(e) => Decoded::Input(Input::Emote {
            seq,
            request: EmoteRequest {
                emote_id: e.emote_id,
                timestamp_ms: e.timestamp_ms,
                stop: e.stop,
            },
        }),
        B::SceneAction(a) => Decoded::Input(Input::Scene {
            seq,
            scene: a.scene_id,
            op: SceneOp::Action(a.payload.to_vec()),
        }),
        B::SceneControl(c) => {
            let op = match pb::SceneControlOp::try_from(c.op) {
                Ok(pb::SceneControlOp::Join) => SceneOp::Join,
                Ok(pb::SceneControlOp::Leave) => SceneOp::Leave,
                Ok(pb::SceneControlOp::CaughtUp) => SceneOp::CaughtUp,
                Ok(pb::SceneControlOp::State) => SceneOp::State {
                    tick: c.tick,
                    game_state: c.game_state.to_vec(),
                },
                _ => return Decoded::Invalid("scene_control", "unknown scene op"),
            };
            Decoded::Input(Input::Scene {
                seq,
                scene: c.scene_id,
                op,
            })
        }
        B::Negotiate(_) | B::Join(_) | B::Ping(_) => Decoded::Ignore,
        B::Operator(o) => Decoded::Operator {
            op: pb::OperatorOp::try_from(o.op).unwrap_or_default(),
            target_wallet: o.target_wallet,
        },
        // Issue 12: the room core does not take these yet; refused with a typed reason until it
        // does.
        B::Teleport(t) => Decoded::Input(Input::Teleport {
            seq,
            destination: t.destination,
        }),
        B::Block(b) => Decoded::Input(Input::Block {
            seq,
            op: match pb::BlockOp::try_from(b.op) {
                Ok(pb::BlockOp::Block) => Some(BlockOp::Block),
                Ok(pb::BlockOp::Unblock) => Some(BlockOp::Unblock),
                // Refused by the core.
                _ => None,
            },
            target_entity: b.target_entity,
            target_wallet: b.target_wallet,
        }),
        B::PersonalSpace(p) => Decoded::Input(Input::PersonalSpace {
            seq,
            radius_m: p.radius_m,
        }),
        B::Expression(e) => Decoded::Input(Input::Expression {
            expression_id: e.expression_id,
            intensity_bp: e.intensity_bp,
        }),
        B::Profile(p) => Decoded::Input(Input::Profile {
            seq,
            version: p.version,
            display_name: p.display_name,
        }),
    }
}

/// The `plaza.v1.Event` of a room event.
pub(crate) fn event(e: &RoomEvent) -> pb::Event {
    use pb::event::Kind as K;
    let kind = match &e.body {
        EventBody::Prop {
            prop_id,
            entity: _,
            holder_entity,
            revision,
            change,
            position,
        } => K::Prop(pb::PropEvent {
            prop_id: *prop_id,
            holder_entity: *holder_entity,
            revision: *revision,
            kind: match change {
                PropChange::Pickup => pb::InteractionKind::Pickup,
                PropChange::Place => pb::InteractionKind::Place,
                PropChange::Throw => pb::InteractionKind::Throw,
                PropChange::Drop => pb::InteractionKind::Drop,
            } as i32,
            position: Some(vec3(*position)),
        }),
        EventBody::Consent {
            consent_id,
            kind,
            requester_entity,
            target_entity,
            state,
        } => K::Consent(pb::ConsentEvent {
            consent_id: *consent_id,
            kind: kind.as_str().to_owned(),
            requester_entity: *requester_entity,
            target_entity: *target_entity,
            state: state.as_str().to_owned(),
        }),
        EventBody::Emote {
            entity,
            emote_id,
            stop,
            timestamp_ms,
        } => K::Emote(pb::EmoteEvent {
            entity_id: *entity,
            emote_id: emote_id.clone(),
            stop: *stop,
            timestamp_ms: *timestamp_ms,
            ..Default::default()
        }),
        EventBody::EmoteInProgress {
            entity,
            emote_id,
            timestamp_ms,
            elapsed_ms,
        } => K::Emote(pb::EmoteEvent {
            entity_id: *entity,
            emote_id: emote_id.clone(),
            stop: false,
            timestamp_ms: *timestamp_ms,
            in_progress: true,
            elapsed_ms: *elapsed_ms,
        }),
        EventBody::SceneTick {
            scene,
            tick,
            actions,
        } => K::SceneTick(pb::SceneTick {
            scene_id: scene.clone(),
            tick: *tick,
            actions: actions
                .iter()
                .map(|(entity, payload)| pb::SceneActionEntry {
                    entity_id: *entity,
                    payload: payload.clone().into(),
                })
                .collect(),
        }),
        EventBody::SceneSync {
            scene,
            tick,
            game_state,
            client_state,
            members,
            master_entity,
        } => K::SceneSync(pb::SceneSync {
            scene_id: scene.clone(),
            tick: *tick,
            game_state: game_state.clone().into(),
            client_state: client_state.as_str().to_owned(),
            members: members
                .iter()
                .map(|(entity, state)| pb::SceneMember {
                    entity_id: *entity,
                    client_state: state.as_str().to_owned(),
                })
                .collect(),
            master_entity: *master_entity,
        }),
        EventBody::SceneClient {
            scene,
            entity,
            event,
            state,
        } => K::SceneClient(pb::SceneClientEvent {
            scene_id: scene.clone(),
            entity_id: *entity,
            kind: match event {
                SceneClientEvent::ClientJoined => pb::SceneClientEventKind::ClientJoined,
                SceneClientEvent::BeginCatchUp => pb::SceneClientEventKind::BeginCatchUp,
                SceneClientEvent::CaughtUp => pb::SceneClientEventKind::CaughtUp,
                SceneClientEvent::ClientLeft => pb::SceneClientEventKind::ClientLeft,
                SceneClientEvent::MasterChanged => pb::SceneClientEventKind::MasterChanged,
                SceneClientEvent::SyncRetry => pb::SceneClientEventKind::SyncRetry,
                SceneClientEvent::Alone => pb::SceneClientEventKind::Alone,
            } as i32,
            client_state: state.as_str().to_owned(),
            tick: 0,
        }),
        EventBody::SceneStateRequest { scene, min_tick } => K::SceneClient(pb::SceneClientEvent {
            scene_id: scene.clone(),
            entity_id: 0,
            kind: pb::SceneClientEventKind::StateRequested as i32,
            client_state: String::new(),
            tick: *min_tick,
        }),
        EventBody::Teleported {
            entity,
            position,
            yaw_deg,
            destination,
            cause,
            last_input_seq,
        } => K::Teleported(pb::Teleported {
            entity_id: *entity,
            position: Some(vec3(*position)),
            rotation_y: *yaw_deg,
            destination: destination.clone(),
            cause: match cause {
                TeleportCause::Request => pb::TeleportCause::Request,
                TeleportCause::Portal => pb::TeleportCause::Portal,
                TeleportCause::Operator => pb::TeleportCause::Operator,
            } as i32,
            last_input_sequence: *last_input_seq,
        }),
        EventBody::Roster {
            full,
            upserts,
            removed,
        } => K::Roster(pb::RosterUpdate {
            full: *full,
            upserts: upserts
                .iter()
                .map(|u| pb::RosterEntry {
                    entity_id: u.entity,
                    wallet: u.wallet.clone(),
                    display_name: u.display_name.clone(),
                    profile_version: u.profile_version,
                })
                .collect(),
            removed: removed.clone(),
        }),
        EventBody::Block {
            target_wallet,
            target_entity,
            blocked,
        } => K::Block(pb::BlockEvent {
            target_wallet: target_wallet.clone(),
            target_entity: *target_entity,
            blocked: *blocked,
        }),
        EventBody::Rejected {
            in_reply_to,
            reason,
        } => K::Rejected(pb::RequestRejected {
            in_reply_to: *in_reply_to,
            reason: reason.code().to_owned(),
        }),
    };
    pb::Event {
        room_seq: e.room_seq,
        kind: Some(kind),
    }
}

/// The `plaza.v1.ExpressionFrame` of an expression message.
pub(crate) fn expression_frame(
    tick: u64,
    full: bool,
    states: &[(u32, plaza_room_core::expressions::Expression)],
) -> pb::ExpressionFrame {
    pb::ExpressionFrame {
        tick,
        full,
        states: states
            .iter()
            .map(|(entity, e)| pb::ExpressionState {
                entity_id: *entity,
                expression_id: e.id,
                intensity_bp: u32::from(e.intensity_bp),
            })
            .collect(),
    }
}

/// A wire vector.
pub(crate) fn vec3(p: [f32; 3]) -> pb::Vec3 {
    pb::Vec3 {
        x: p[0],
        y: p[1],
        z: p[2],
    }
}

/// `Joined.room`: the room a client joined, from the room's config and definition.
pub(crate) fn room_description(cfg: &plaza_room_core::RoomConfig) -> pb::RoomDescription {
    use plaza_proto::compressed::CELL_SIZE_M;
    let def = &cfg.definition;
    let ph = &cfg.physics;
    // The server decodes MovementCompressed over the default grid (±2,048 m,
    // `plaza_proto::compressed::decompress`).
    let cells = (2048.0 / CELL_SIZE_M).ceil() as i32;
    let destinations = def
        .spawn_points
        .iter()
        .map(|sp| pb::Destination {
            name: sp.name.clone(),
            kind: pb::DestinationKind::Spawn as i32,
            position: Some(vec3(sp.position)),
            rotation_y: sp.yaw_deg,
            radius_m: 0.0,
            target: String::new(),
            requestable: sp.requestable,
        })
        .chain(def.portals.iter().map(|p| pb::Destination {
            name: p.name.clone(),
            kind: pb::DestinationKind::Portal as i32,
            position: Some(vec3(p.position)),
            rotation_y: 0.0,
            radius_m: p.radius,
            target: p.target.clone(),
            requestable: false,
        }))
        .collect();
    pb::RoomDescription {
        bounds_min: Some(vec3(def.bounds_min)),
        bounds_max: Some(vec3(def.bounds_max)),
        ground_y: def.spawn[1],
        cell_grid: Some(pb::CellGrid {
            cell_size_m: CELL_SIZE_M,
            min_x: -cells,
            min_z: -cells,
            width: (2 * cells) as u32,
            depth: (2 * cells) as u32,
        }),
        destinations,
        limits: Some(pb::MovementLimits {
            max_speed_mps: ph.max_speed_mps,
            teleport_distance_m: ph.max_speed_mps * ph.max_move_dt_s + ph.tolerance_m,
            clock_tolerance_s: ph.clock_reject_lead_ms as f32 / 1000.0,
            speed_tolerance: if ph.max_speed_mps > 0.0 {
                ph.velocity_tolerance_mps / ph.max_speed_mps
            } else {
                0.0
            },
            // No vertical limit of its own: the anti-fly rule bounds height instead.
            max_vertical_speed_mps: 0.0,
        }),
        max_members: cfg.max_members,
        budget_bytes_per_s: cfg.budget_bytes_per_s,
        expression_hz: cfg.expression_hz.min(cfg.tick_hz),
        definition: def.name.clone(),
        capsule_half_height_m: ph.capsule_half_height,
        capsule_radius_m: ph.capsule_radius,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_room_description_lists_destinations_and_limits() {
        let cfg = plaza_room_core::RoomConfig::default();
        let d = room_description(&cfg);
        assert_eq!(d.definition, "plaza");
        assert_eq!(d.bounds_min, Some(vec3([-32.0, -2.0, -32.0])));
        let stage = d.destinations.iter().find(|x| x.name == "stage").unwrap();
        assert!(stage.requestable);
        assert_eq!(stage.kind, pb::DestinationKind::Spawn as i32);
        let l = d.limits.unwrap();
        assert_eq!(l.max_speed_mps, 12.0);
        assert!((l.teleport_distance_m - 12.25).abs() < 1e-4);
        let g = d.cell_grid.unwrap();
        assert_eq!((g.min_x, g.width), (-128, 256));
        assert_eq!(d.max_members, cfg.max_members);
        assert_eq!(d.expression_hz, 50, "60 Hz, at most the 50 Hz tick");
    }
}
