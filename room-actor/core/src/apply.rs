//! What one step applies: the queued joins and leaves, each member's movements, and the
//! room-wide queue of every other input (interactions, consent, emotes, scenes, teleports,
//! blocks, profiles), in the order [`crate::Room`]'s module doc gives.
//!
//! Performance: runs every tick.

use plaza_physics::MoveClaim;
use plaza_proto::frame::{EncoderConfig, FrameEncoder};
use plaza_proto::quant::Pose;

use crate::consent::{ConsentOp, ConsentRequest, Party};
use crate::emotes::EmoteOutcome;
use crate::events::{EventBody, JsonObject, Refusal, TeleportCause};
use crate::interactions::{self, Actor};
use crate::people::{self, Announced, Identity};
use crate::scene::SceneOp;
use crate::{
    Input, JoinRefusal, Member, Outbound, Pending, RejectReason, Room, SessionId, validate,
};

impl Room {
    /// Apply the queued joins and leaves, in arrival order.
    pub(crate) fn apply_pending(&mut self, out: &mut Vec<Outbound>) {
        for p in std::mem::take(&mut self.pending) {
            match p {
                Pending::Join(session, wanted_entity, wallet) => {
                    if self.members.contains_key(&session) {
                        out.push(Outbound::JoinRefused {
                            session,
                            reason: JoinRefusal::AlreadyJoined,
                        });
                        continue;
                    }
                    if self.members.len() as u32 >= self.cfg.max_members {
                        out.push(Outbound::JoinRefused {
                            session,
                            reason: JoinRefusal::RoomFull,
                        });
                        continue;
                    }
                    let entity = if wanted_entity != 0
                        && wanted_entity < interactions::PROP_ENTITY_BASE
                        && self.ids.is_free(wanted_entity)
                    {
                        self.ids
                            .claim(wanted_entity, self.ids.generation(wanted_entity));
                        wanted_entity
                    } else {
                        self.ids.allocate().0
                    };
                    let wanted = spawn_point(self.cfg.definition.spawn, entity);
                    let spawn = self.physics.add_avatar(entity, wanted);
                    let pose = Pose {
                        position: spawn,
                        ..Pose::default()
                    };
                    let encoder = FrameEncoder::new(EncoderConfig {
                        budget_bytes_per_s: self.cfg.budget_bytes_per_s,
                        broadcast_hz: self.cfg.broadcast_hz,
                        check_every: self.cfg.check_every,
                    });
                    self.identities.insert(
                        entity,
                        Identity {
                            wallet: wallet.clone(),
                            display_name: String::new(),
                            profile_version: 0,
                            generation: self.ids.generation(entity),
                        },
                    );
                    self.members.insert(
                        session,
                        Member::new(entity, pose, wallet, encoder, self.now_ms),
                    );
                    self.refresh_hidden();
                    out.push(Outbound::Joined {
                        session,
                        entity,
                        spawn,
                    });
                    self.tell_holders(session, out);
                }
                Pending::Leave(session) => {
                    if let Some(m) = self.members.remove(&session) {
                        if !m.expression.is_neutral() {
                            self.expressive -= 1;
                        }
                        // What the leaver held falls, its consents end, it leaves its scenes.
                        for up in self.props.drop_held_by(&mut self.physics, session) {
                            self.prop_event(&up, out);
                        }
                        for t in self.consents.party_left(session, self.now_ms) {
                            self.consent_transition(&t, out);
                        }
                        self.emotes.remove(session);
                        for (to, body) in self.scenes.member_left(session) {
                            self.emit(to, body, out);
                        }
                        self.physics.remove_avatar(m.entity);
                        self.ids.free(m.entity);
                        self.instants.retain(|(e, _)| *e != m.entity);
                        self.identities.remove(&m.entity);
                        self.refresh_hidden();
                        out.push(Outbound::Left {
                            session,
                            entity: m.entity,
                        });
                    }
                }
            }
        }
    }

    /// Apply each member's queued movements and resyncs (per member, in session order).
    pub(crate) fn apply_inputs(&mut self, out: &mut Vec<Outbound>) {
        let now_ms = self.now_ms;
        // Members whose accepted move ended in a portal, with the portal's target.
        let mut portals: Vec<(SessionId, String)> = Vec::new();
        for (session, m) in self.members.iter_mut() {
            while let Some(input) = m.inputs.pop_front() {
                match input {
                    Input::Resync => m.encoder.request_keyframe(),
                    // Queued room-wide by `input`, never here.
                    Input::Interact { .. }
                    | Input::Consent { .. }
                    | Input::Emote { .. }
                    | Input::Scene { .. }
                    | Input::Teleport { .. }
                    | Input::Block { .. }
                    | Input::PersonalSpace { .. }
                    | Input::Profile { .. }
                    | Input::Expression { .. } => {}
                    Input::Move(mv) => {
                        let correct = |m: &mut Member, reason, out: &mut Vec<Outbound>| {
                            out.push(Outbound::Correction {
                                session: *session,
                                reason,
                                pose: m.pose,
                                last_input_seq: m.last_input_seq,
                            });
                        };
                        // Yaw, head, point-at and the timestamp are not the physics
                        // authority's: a non-finite one refuses the move, which leaves no trace.
                        if let Err(reason) = validate::check_finite(&mv) {
                            self.stats.count_rejection(reason);
                            correct(m, reason, out);
                            continue;
                        }
                        let dt_s = match m.last_timestamp_s {
                            Some(prev) => validate::time_step_s(
                                mv.timestamp_s,
                                prev,
                                mv.timestamp_period_s,
                                now_ms.saturating_sub(m.last_move_ms) as f64 / 1000.0,
                            ),
                            // The first move has no previous one: it is a placement, checked
                            // against the spawn point by the physics authority.
                            None => 0.1,
                        };
                        let claim = MoveClaim {
                            position: mv.pose.position,
                            velocity: mv.pose.velocity,
                            dt_s,
                            client_time_ms: (mv.timestamp_s.max(0.0) * 1000.0) as u64,
                            movement_kind: mv.pose.movement_kind,
                            is_instant: mv.is_instant || m.last_timestamp_s.is_none(),
                        };
                        match self.physics.validate_and_move(m.entity, claim, now_ms) {
                            Ok(outcome) => {
                                // The client's declared step between its moves bounds how far
                                // frames carry this one forward (none for a placement).
                                m.lead_cap_ms = if m.last_timestamp_s.is_some() {
                                    (dt_s.clamp(0.0, 1.0) * 1000.0) as u64
                                } else {
                                    0
                                };
                                m.pose = validate::sanitise(&mv.pose, outcome.position);
                                m.last_input_seq = mv.seq;
                                m.last_timestamp_s = Some(mv.timestamp_s);
                                m.last_move_ms = now_ms;
                                self.stats.moves_applied += 1;
                                if let Some(p) = self.cfg.definition.portal_at(m.pose.position) {
                                    // The rest of this member's queue was made before the
                                    // portal moved it: the teleport drops its moves.
                                    portals.push((*session, p.target.clone()));
                                    break;
                                }
                                if outcome.blocked {
                                    // Geometry stopped part of the move: the client must adopt
                                    // where it actually is.
                                    m.pose.velocity = [0.0; 3];
                                    correct(m, RejectReason::Blocked, out);
                                }
                            }
                            Err(rej) => {
                                let reason = rej.reason;
                                self.stats.count_rejection(reason);
                                m.pose.position = rej.authoritative;
                                m.pose.velocity = [0.0; 3];
                                // A refused step that could be real still advances the client's
                                // reference time (it is not claimed twice); any other refused
                                // move leaves no trace, so a timestamp far ahead (+5 s, +1e9 s)
                                // cannot refuse the client's later honest moves.
                                let cfg = self.physics.config();
                                if plaza_physics::refused_step_counts(rej.reason, dt_s, cfg) {
                                    m.last_timestamp_s = Some(mv.timestamp_s);
                                    m.last_move_ms = now_ms;
                                }
                                correct(m, reason, out);
                            }
                        }
                    }
                }
            }
        }
        for (session, target) in portals {
            // A definition's portal always names a spawn point (`RoomDefinition::validate`).
            let _ = self.teleport_to_spawn_point(session, &target, TeleportCause::Portal, out);
        }
    }

    /// Apply the room-wide queue of non-movement inputs, in arrival order.
    pub(crate) fn apply_actions(&mut self, out: &mut Vec<Outbound>) {
        self.action_counts.clear();
        while let Some((session, input)) = self.actions.pop_front() {
            match input {
                // Never queued here (`Room::input` applies an expression at once).
                Input::Move(_) | Input::Resync | Input::Expression { .. } => {}
                Input::Block {
                    seq,
                    op,
                    target_entity,
                    target_wallet,
                } => {
                    if let Err(r) = self.block(session, op, target_entity, target_wallet, out) {
                        self.refuse(session, seq, r, out);
                    }
                }
                Input::PersonalSpace { seq, radius_m } => {
                    let Some(m) = self.members.get_mut(&session) else {
                        self.refuse(session, seq, Refusal::NotMember, out);
                        continue;
                    };
                    if !radius_m.is_finite() || radius_m < 0.0 {
                        self.refuse(session, seq, Refusal::InvalidValue, out);
                        continue;
                    }
                    m.personal_space_m = radius_m.min(people::MAX_PERSONAL_SPACE_M);
                }
                Input::Profile {
                    seq,
                    version,
                    display_name,
                } => {
                    let Some(entity) = self.members.get(&session).map(|m| m.entity) else {
                        self.refuse(session, seq, Refusal::NotMember, out);
                        continue;
                    };
                    let Some(id) = self.identities.get_mut(&entity) else {
                        continue;
                    };
                    match id.announce(version, &display_name) {
                        Announced::Superseded => {
                            self.stats.profiles_superseded += 1;
                            out.push(Outbound::ProfileAnnounced { session, version });
                        }
                        Announced::Merged => self.stats.profiles_merged += 1,
                        Announced::Stale => self.stats.profiles_stale += 1,
                    }
                }
                Input::Teleport { seq, destination } => {
                    if let Err(r) = self.teleport_to_spawn_point(
                        session,
                        &destination,
                        TeleportCause::Request,
                        out,
                    ) {
                        self.refuse(session, seq, r, out);
                    }
                }
                Input::Interact { seq, request } => {
                    let actor = self.members.get(&session).map(|m| Actor {
                        session,
                        entity: m.entity,
                        feet: self
                            .physics
                            .avatar_position(m.entity)
                            .unwrap_or(m.pose.position),
                    });
                    match self.props.apply(&mut self.physics, actor, &request) {
                        Ok(up) => self.prop_event(&up, out),
                        Err(r) => self.refuse(session, seq, r, out),
                    }
                }
                Input::Consent {
                    seq,
                    op,
                    kind,
                    target_entity,
                    consent_id,
                } => {
                    let req = ConsentRequest {
                        op,
                        kind,
                        target: self.party_of_entity(target_entity),
                        consent_id,
                    };
                    let blocked = op == Some(ConsentOp::Request)
                        && req
                            .target
                            .is_some_and(|t| self.blocked_between(session, t.session));
                    let result = match self.members.get(&session) {
                        Some(m) if blocked => Err((
                            Refusal::Blocked,
                            Some(Party {
                                session,
                                entity: m.entity,
                            }),
                        )),
                        Some(m) => {
                            let actor = Party {
                                session,
                                entity: m.entity,
                            };
                            self.consents
                                .apply(actor, &req, self.now_ms)
                                .map_err(|r| (r, Some(actor)))
                        }
                        None => Err((Refusal::NotMember, None)),
                    };
                    match result {
                        Ok(t) => self.consent_transition(&t, out),
                        Err((r, actor)) => {
                            let mut d = JsonObject::new()
                                .str("op", op.map_or("unspecified", ConsentOp::as_str))
                                .num("consent_id", req.consent_id)
                                .str("kind", &req.kind)
                                .num("target", u64::from(target_entity))
                                .num("actor_session", session);
                            if let Some(a) = actor {
                                d = d.num("actor", u64::from(a.entity));
                            }
                            let d = d.str("reason", r.code()).num("tick", self.tick).finish();
                            self.audit("consent.refused", d, out);
                            self.refuse(session, seq, r, out);
                        }
                    }
                }
                Input::Emote { seq, request } => {
                    let Some(entity) = self.members.get(&session).map(|m| m.entity) else {
                        self.refuse(session, seq, Refusal::NotMember, out);
                        continue;
                    };
                    match self.emotes.apply(session, &request, self.now_ms) {
                        Ok(EmoteOutcome::Accepted {
                            emote_id,
                            stop,
                            timestamp_ms,
                        }) => {
                            self.stats.emotes += 1;
                            let to = self
                                .members
                                .iter()
                                .filter(|(s, m)| {
                                    **s == session || m.seen.binary_search(&entity).is_ok()
                                })
                                .map(|(s, _)| *s)
                                .collect();
                            let body = EventBody::Emote {
                                entity,
                                emote_id,
                                stop,
                                timestamp_ms,
                            };
                            self.emit(to, body, out);
                        }
                        Ok(EmoteOutcome::Stale) => self.stats.emotes_stale += 1,
                        Err(r) => self.refuse(session, seq, r, out),
                    }
                }
                Input::Scene { seq, scene, op } => {
                    let Some(entity) = self.members.get(&session).map(|m| m.entity) else {
                        self.refuse(session, seq, Refusal::NotMember, out);
                        continue;
                    };
                    let is_action = matches!(op, SceneOp::Action(_));
                    match self.scenes.apply(session, entity, &scene, op, self.tick) {
                        Ok(outs) => {
                            if is_action {
                                self.stats.scene_actions += 1;
                            }
                            self.emit_scene(outs, out);
                        }
                        Err(r) => self.refuse(session, seq, r, out),
                    }
                }
            }
        }
    }
}

/// Where the avatar `entity` is placed at its join: on a golden-angle spiral around `center`.
pub(crate) fn spawn_point(center: [f32; 3], entity: u32) -> [f32; 3] {
    let k = entity as f32;
    let angle = k * 2.399_963; // golden angle
    let radius = 0.8 * k.sqrt();
    [
        center[0] + radius * angle.cos(),
        center[1],
        center[2] + radius * angle.sin(),
    ]
}
