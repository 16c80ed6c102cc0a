//! What the bot does with the connection's events: joins, leaves, frames (move-to-seen),
//! failed frames, pongs, corrections, props, consents, scenes, and the counters of the rest.

use super::behaviour::{ConsentReaction, consent_reaction};
use super::*;

impl Bot {
    /// Events in a joined session (a `Joined` here is a rejoin or an in-session resume).
    pub(super) fn on_session_event(&mut self, ev: Event, now: Instant, len: usize) {
        match ev {
            Event::Joined(info) => {
                let stats = &self.shared.stats;
                match self.phase {
                    Phase::Joining { .. } => Counters::add(&stats.counters.rejoins, 1),
                    Phase::Joined if self.own_entity.is_some() => {
                        // The gateway moved us to another room activation (node loss) without
                        // a reconnect: an in-session resume, measured from the last frame.
                        Counters::add(&stats.counters.resumes, 1);
                        Counters::add(&stats.counters.resumes_in_session, 1);
                        let since = self.last_frame_at.unwrap_or(now);
                        stats.record(Metric::Resume, micros(now - since));
                    }
                    _ => {}
                }
                self.on_joined(&info, now);
            }
            Event::Error(e) => {
                let code = error_name(e.code as i32);
                self.shared.stats.keyed.lock().error_codes.bump(code);
            }
            other => self.on_event(other, now, len),
        }
    }

    /// Events that mean the same in the handshake and in the session. `len`: bytes of the
    /// message that carried them.
    pub(super) fn on_event(&mut self, ev: Event, now: Instant, len: usize) {
        match ev {
            Event::Frame { keyframe, .. } => self.on_frame(keyframe, now),
            Event::FrameFailed(f) => self.on_frame_failed(&f),
            Event::Pong { rtt_s } => self.samples.rtt.push((rtt_s.max(0.0) * 1e6) as u64),
            Event::Correction(c) => {
                let reason = RejectReason::try_from(c.reason).map_or_else(
                    |_| format!("unknown_{}", c.reason),
                    |r| short(r.as_str_name(), "REJECT_REASON_"),
                );
                self.shared
                    .stats
                    .keyed
                    .lock()
                    .corrections_by_reason
                    .bump(reason);
                if let Some(p) = c.position {
                    self.walker.teleport([p.x, p.y, p.z]);
                }
            }
            Event::Error(e) => {
                let code = error_name(e.code as i32);
                self.shared.stats.keyed.lock().error_codes.bump(code);
            }
            Event::Joined(info) => self.on_joined(&info, now),
            Event::Left { .. } => self.enter_away(now),
            // Moving / back need nothing while the session stays open; a gateway going away
            // says when to reconnect.
            Event::ReconnectAdvised { after_s } => {
                self.reconnect_after = Some(secs(after_s));
            }
            Event::Expressions(x) => {
                let c = &self.shared.stats.counters;
                Counters::add(&c.expression_frames, 1);
                Counters::add(&c.expression_states, x.states.len() as u64);
                Counters::add(&c.expression_down_bytes, len as u64);
            }
            Event::Prop(p) => {
                self.count_event("prop");
                self.shared
                    .props
                    .observe(&self.spec.room, &p, &self.shared.stats);
                if self.own_entity.is_some_and(|o| o == p.holder_entity) {
                    self.interact.held_prop = Some(p.prop_id);
                } else if self.interact.held_prop == Some(p.prop_id) {
                    self.interact.held_prop = None;
                }
            }
            Event::Rejected(r) => {
                self.count_event("rejected");
                let reason = if r.reason.is_empty() {
                    "unspecified".into()
                } else {
                    r.reason
                };
                self.shared
                    .stats
                    .keyed
                    .lock()
                    .rejections_by_reason
                    .bump(reason);
            }
            Event::Consent(c) => {
                self.count_event("consent");
                if self.spec.mix.kind == BotKind::Interactor {
                    self.on_consent(&c);
                }
            }
            Event::SceneSync(s) => {
                self.count_event("scene_sync");
                // A late joiner got the scene's state and the ticks since: it has run them.
                if self.spec.mix.kind == BotKind::Interactor {
                    self.send(CBody::SceneControl(pb::SceneControl {
                        scene_id: s.scene_id,
                        op: pb::SceneControlOp::CaughtUp as i32,
                        ..Default::default()
                    }));
                }
            }
            Event::SceneClient(e) => {
                self.count_event("scene_client");
                // The room asks the scene's master for its game state (bots keep none: an
                // empty state at the asked tick).
                if self.spec.mix.kind == BotKind::Interactor
                    && e.kind == pb::SceneClientEventKind::StateRequested as i32
                {
                    self.send(CBody::SceneControl(pb::SceneControl {
                        scene_id: e.scene_id,
                        op: pb::SceneControlOp::State as i32,
                        tick: e.tick,
                        game_state: Default::default(),
                    }));
                }
            }
            Event::Emote(_) => self.count_event("emote"),
            Event::SceneTick(_) => self.count_event("scene_tick"),
            Event::Roster(_) => self.count_event("roster"),
            Event::Teleported(_) => self.count_event("teleported"),
            Event::Block(_) => self.count_event("block"),
            // Entity events are off (`entity_events: false`): `on_frame` reads the frame.
            Event::EntityEntered(_)
            | Event::EntityUpdated(_)
            | Event::EntityLeft { .. }
            | Event::Negotiated { .. }
            | Event::Own(_)
            | Event::RoomMoving { .. }
            | Event::RoomBack { .. }
            | Event::Closed { .. }
            // Bots send no operator actions.
            | Event::OperatorResult(_) => {}
        }
    }

    pub(super) fn count_event(&self, name: &'static str) {
        self.shared.stats.keyed.lock().events_by_kind.bump(name);
    }

    pub(super) fn on_consent(&mut self, c: &pb::ConsentEvent) {
        let accept = self.rng.random_bool(0.8);
        match consent_reaction(c, self.own_entity, accept) {
            Some(ConsentReaction::Answer(op)) => {
                Counters::add(&self.shared.stats.counters.consent_sent, 1);
                self.send(CBody::Consent(ConsentAction {
                    op: op as i32,
                    consent_id: c.consent_id,
                    ..ConsentAction::default()
                }));
            }
            Some(ConsentReaction::ReleaseLater) => self.interact.active.push(c.consent_id),
            None => {}
        }
    }

    pub(super) fn on_joined(&mut self, info: &RoomInfo, now: Instant) {
        self.own_entity = Some(info.entity);
        self.own_moves = Some(self.room_moves.register(info.entity));
        let desc = info.description.as_ref();
        let limit = desc
            .and_then(|d| d.limits.as_ref())
            .map(|l| l.max_speed_mps);
        let bounds = desc.and_then(|d| match (&d.bounds_min, &d.bounds_max) {
            (Some(a), Some(b)) => Some(([a.x, a.z], [b.x, b.z])),
            _ => None,
        });
        if !self.walker.adopt_room(limit, bounds)
            && !self
                .shared
                .walk_world_warned
                .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(
                room = %info.room_id,
                world = ?self.walker.jitter_world(),
                "the room is smaller than the jitter walk's 200 m x 200 m world: walking in what \
                 there is (a load room definition: load/rooms/open-200.toml)"
            );
        }
        self.walker.teleport(info.spawn);
        self.resync_pending = false;
        self.expect_keyframe = true;
        self.last_frame_at = None;
        self.seen_last.clear();
        self.first_move = true;
        self.rate = SendRate::new(self.shared.cfg.send_rate);
        self.phase = Phase::Joined;
        self.leave_at = (self.spec.mix.kind == BotKind::Churner)
            .then(|| now + secs(self.spec.mix.stay_s.sample(&mut self.rng)));
        if self.spec.mix.kind == BotKind::Interactor {
            self.interact = Interact {
                next_action: Some(now + secs(self.spec.mix.action_every_s.sample(&mut self.rng))),
                ..Interact::default()
            };
        }
    }

    pub(super) fn enter_away(&mut self, now: Instant) {
        self.leave_room_state();
        self.phase = Phase::Away {
            until: now + secs(self.spec.mix.away_s.sample(&mut self.rng)),
        };
    }

    /// Forgets the room (own entity registration, frame timing); the connection forgets its
    /// held frames itself.
    pub(super) fn leave_room_state(&mut self) {
        self.own_moves = None;
        self.own_entity = None;
        self.last_frame_at = None;
    }

    // === Frames ===

    /// A frame was applied: what it removed is forgotten, and the positions of the other
    /// avatars it changed are matched against the room's moves (move-to-seen).
    pub(super) fn on_frame(&mut self, keyframe: bool, now: Instant) {
        let counters = &self.shared.stats.counters;
        if keyframe {
            if !self.resync_pending && !self.expect_keyframe {
                Counters::add(&counters.keyframes_unrequested, 1);
            }
            self.resync_pending = false;
            // Everything arrives anew: first sightings, not moves.
            self.seen_last.clear();
            Counters::add(&counters.keyframes, 1);
        }
        self.expect_keyframe = false;
        let Some(frame) = self.conn.last_frame() else {
            return;
        };
        for &id in &frame.removed {
            self.seen_last.remove(id);
        }
        if frame.changed.is_empty() {
            return;
        }
        let own = self.own_entity;
        // The changed ids and the held records are both in id order: one walk over the held
        // set finds every changed record (a binary search per id cost ~1,800 instructions a
        // frame of 50).
        let mut held = self.conn.decoder().entities().peekable();
        let samples = &mut self.samples.move_to_seen;
        let moves = frame
            .changed
            .iter()
            .filter(|&&id| Some(id) != own)
            .filter_map(move |&id| {
                while held.next_if(|r| r.id < id).is_some() {}
                held.next_if(|r| r.id == id)
            })
            .filter(|r| r.kind == 0)
            .map(|r| (r.id, r.pose.position_m()));
        self.room_moves.observe(
            now,
            moves,
            self.shared.cfg.seen_tolerance_m,
            &mut self.seen_last,
            |us| samples.push(us),
        );
        // In a room of 50 a bot matches ~500 moves a second: flushed at a bound, its batch
        // stays a small buffer instead of a second's worth per bot.
        if self.samples.move_to_seen.len() >= SAMPLE_BATCH {
            self.shared.stats.flush(&mut self.samples);
        }
    }

    /// A frame did not apply: counted by kind (the connection sent the `Resync`).
    pub(super) fn on_frame_failed(&mut self, f: &FrameFailure) {
        let counters = &self.shared.stats.counters;
        if f.kind.is_check_failure() {
            Counters::add(&counters.check_failures, 1);
        } else {
            Counters::add(&counters.decode_errors, 1);
        }
        let kind = match f.kind {
            FrameErrorKind::ChainBreak => "chain_break".to_owned(),
            FrameErrorKind::CheckMismatch => "check_mismatch".to_owned(),
            FrameErrorKind::Truncated => "truncated".to_owned(),
            FrameErrorKind::TooLarge => "too_large".to_owned(),
            FrameErrorKind::Malformed(what) => format!("malformed_{}", what.replace(' ', "_")),
        };
        self.shared.stats.keyed.lock().frame_errors.bump(kind);
        tracing::debug!(bot = self.spec.index, error = %f.error, "frame not applied");
    }
}
