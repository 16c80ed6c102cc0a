//! The bot's behaviour, once per client frame: walk and send movements, churn (leave, come
//! back), expressions, pings, and an interactor's actions (props, consents, scenes, emotes)
//! with its consent policy.

use super::*;

impl Bot {
    // === Client frame: movement, churn, interactions, pings ===

    pub(super) fn on_client_frame(&mut self) {
        let now = Instant::now();
        self.frame_no = self.frame_no.wrapping_add(1);
        self.conn.set_wall_clock_ms(unix_ms());
        // A resync whose keyframe did not come goes again.
        self.conn.handle_timeout(self.secs(now));
        match self.phase {
            Phase::Joined => {
                self.walker.step(&self.spec.mix, now, &mut self.rng);
                // The jitter walk sends every input (the standard benchmark's 10 Hz).
                let changed =
                    self.walker.always_sends() || self.walker.changed_since(&self.last_sent);
                if self.rate.poll(now, changed, self.first_move).should_send() {
                    self.send_movement(now);
                }
                self.send_expressions();
                if self.leave_at.is_some_and(|t| now >= t) {
                    self.leave_at = None;
                    if self.conn.leave().is_none() {
                        self.send(CBody::Leave(pb::Leave {}));
                    }
                    self.phase = Phase::Leaving { since: now };
                } else if self.interact.next_action.is_some_and(|t| now >= t) {
                    self.interact_once(now);
                }
            }
            Phase::Leaving { since } => {
                if now - since > Duration::from_secs(5) {
                    // No Left came: assume we are out.
                    self.enter_away(now);
                }
            }
            Phase::Away { until } => {
                if now >= until {
                    if self.conn.join(&self.spec.room).is_none() {
                        let room_id = self.spec.room.clone();
                        self.send(CBody::Join(Join { room_id }));
                    }
                    self.phase = Phase::Joining { since: now };
                }
            }
            Phase::Joining { since } => {
                if now - since > self.shared.cfg.connect_timeout {
                    // Rejoin unanswered: try again.
                    self.phase = Phase::Away { until: now };
                }
            }
        }
        let ping_frames =
            (self.shared.cfg.ping_interval.as_millis() / self.client_frame().as_millis()).max(1);
        if u128::from(self.frame_no) % ping_frames == 0 && self.conn.ping(self.secs(now)).is_some()
        {
            self.samples.pings += 1;
        }
        self.count_connection_stats();
        if self.frame_no.is_multiple_of(FLUSH_EVERY) {
            self.shared.stats.flush(&mut self.samples);
        }
    }

    /// The client frame period in effect ([`CLIENT_FRAME`], shortened to the send rate's
    /// `move_interval`).
    pub(super) fn client_frame(&self) -> Duration {
        CLIENT_FRAME
            .min(self.shared.cfg.send_rate.move_interval)
            .max(Duration::from_millis(10))
    }

    /// `expression_hz` expressions per second, spread over the client frames (an accumulator:
    /// 10 Hz is one per 100 ms frame); each a new id and intensity.
    pub(super) fn send_expressions(&mut self) {
        let hz = self.shared.cfg.expression_hz;
        if hz == 0 {
            return;
        }
        let per_s = (1000 / self.client_frame().as_millis()) as u32;
        self.expression_acc += hz;
        while self.expression_acc >= per_s {
            self.expression_acc -= per_s;
            self.expression_no = self.expression_no.wrapping_add(1);
            let n = self.expression_no;
            let e = pb::Expression {
                expression_id: 1 + n % 7,
                intensity_bp: (n * 1_300) % 10_001,
            };
            self.send(CBody::Expression(e));
            Counters::add(&self.shared.stats.counters.expressions_sent, 1);
        }
    }

    pub(super) fn send_movement(&mut self, now: Instant) {
        let pose = self.walker.pose();
        let speed = (pose.velocity[0].powi(2) + pose.velocity[2].powi(2)).sqrt();
        let kind = if !self.walker.is_walking() || speed < 0.01 {
            MovementKind::Idle
        } else if speed < 2.0 {
            MovementKind::Walk
        } else {
            MovementKind::Jog
        };
        let m = Movement {
            position: Some(vec3(pose.position)),
            velocity: Some(vec3(pose.velocity)),
            rotation_y: pose.yaw_deg,
            movement_kind: kind as i32,
            anim_flags: pb::AnimFlag::Grounded as u32,
            is_instant: self.first_move,
            timestamp: now.duration_since(self.epoch).as_secs_f64(),
            ..Movement::default()
        };
        // What the room will hold: the float pose, or the compressed message's quantized one.
        let sent_at = if self.shared.cfg.movement.compressed(self.spec.index) {
            match self.conn.send_movement_compressed(&m) {
                Some((_, d)) => d.pose.position,
                None => return,
            }
        } else if self.conn.send_movement(m).is_some() {
            pose.position
        } else {
            // Not in a room at the connection's word (a join or resume is under way).
            return;
        };
        if let Some(own) = &mut self.own_moves {
            own.sent(now, sent_at);
        }
        self.samples.movements += 1;
        self.last_sent = pose;
        self.first_move = false;
    }

    /// One interactor action: place a held prop, pick one up, request consent, or emote.
    pub(super) fn interact_once(&mut self, now: Instant) {
        let mix = &self.spec.mix;
        self.interact.next_action = Some(now + secs(mix.action_every_s.sample(&mut self.rng)));
        let pos = self.walker.pose().position;
        let counters = &self.shared.stats.counters;
        if let Some(consent_id) = self.interact.active.pop() {
            Counters::add(&counters.consent_sent, 1);
            let c = ConsentAction {
                op: ConsentOp::Release as i32,
                consent_id,
                ..ConsentAction::default()
            };
            self.send(CBody::Consent(c));
            return;
        }
        let roll: f64 = self.rng.random();
        if let Some(prop) = self.interact.held_prop.filter(|_| roll < 0.5) {
            Counters::add(&counters.interactions_sent, 1);
            let i = Interaction {
                kind: InteractionKind::Place as i32,
                prop_id: prop,
                position: Some(vec3([pos[0] + 0.5, pos[1] + 0.5, pos[2]])),
                velocity: Some(vec3([0.0; 3])),
                room_id: String::new(),
            };
            self.send(CBody::Interaction(i));
            return;
        }
        if roll < 0.6 && self.interact.held_prop.is_none() {
            // Go for the nearest prop the bot sees (props are snapshot entities of kind 1,
            // entity id = PROP_ENTITY_BASE + prop id); pick it up once within reach.
            let nearest = self
                .conn
                .decoder()
                .entities()
                .filter(|r| r.kind == PROP_KIND && r.id > PROP_ENTITY_BASE)
                .map(|r| {
                    let p = r.pose.position_m();
                    let d2 = (p[0] - pos[0]).powi(2) + (p[2] - pos[2]).powi(2);
                    (d2, r.id - PROP_ENTITY_BASE, p)
                })
                .min_by(|a, b| a.0.total_cmp(&b.0));
            let prop_id = match nearest {
                Some((d2, id, _)) if d2 <= PICKUP_RANGE_M * PICKUP_RANGE_M => id,
                Some((_, _, p)) => {
                    self.walker.head_to([p[0], p[2]]);
                    // Try anyway now and then: the room's refusal (out of reach) is counted.
                    if self.rng.random::<f64>() >= 0.2 {
                        return;
                    }
                    self.rng.random_range(1..=mix.props)
                }
                None => self.rng.random_range(1..=mix.props),
            };
            Counters::add(&counters.interactions_sent, 1);
            let i = Interaction {
                kind: InteractionKind::Pickup as i32,
                prop_id,
                position: Some(vec3(pos)),
                velocity: None,
                room_id: String::new(),
            };
            self.send(CBody::Interaction(i));
            return;
        }
        if roll < 0.85 {
            let own = self.own_entity;
            let others: Vec<u32> = self
                .conn
                .decoder()
                .entities()
                .filter(|r| r.kind == 0 && Some(r.id) != own)
                .map(|r| r.id)
                .collect();
            if !others.is_empty() {
                let target = others[self.rng.random_range(0..others.len())];
                let kind = ["hand_hold", "follow", "adjust"][self.rng.random_range(0..3)];
                Counters::add(&counters.consent_sent, 1);
                let c = ConsentAction {
                    op: ConsentOp::Request as i32,
                    kind: kind.into(),
                    target_entity: target,
                    consent_id: 0,
                };
                self.send(CBody::Consent(c));
                return;
            }
        }
        if roll < 0.92 {
            // Lockstep scene actions: join the scene once, then submit small input actions.
            let body = if self.interact.in_scene {
                let payload: [u8; 8] = self.rng.random();
                CBody::SceneAction(pb::SceneAction {
                    scene_id: SCENE_ID.into(),
                    payload: payload.to_vec().into(),
                })
            } else {
                self.interact.in_scene = true;
                CBody::SceneControl(pb::SceneControl {
                    scene_id: SCENE_ID.into(),
                    op: pb::SceneControlOp::Join as i32,
                    ..Default::default()
                })
            };
            Counters::add(&counters.interactions_sent, 1);
            self.send(body);
            return;
        }
        Counters::add(&counters.emotes_sent, 1);
        self.interact.emoting = !self.interact.emoting;
        let e = Emote {
            emote_id: if self.interact.emoting {
                "wave".into()
            } else {
                String::new()
            },
            timestamp_ms: unix_ms(),
            stop: !self.interact.emoting,
        };
        self.send(CBody::Emote(e));
    }
}

/// What an interactor does about a consent event.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(super) enum ConsentReaction {
    /// Send this op for the event's consent id.
    Answer(ConsentOp),
    /// Our request is active: release it at the next action.
    ReleaseLater,
}

/// The interactor's consent policy. The target answers a request (consent when `accept`, else
/// decline); the requester activates a granted request and releases an active one later.
/// State names are matched loosely (`request`/`pending`, `consent`/`accept`/`grant`, `activ`)
/// because the room's names are not fixed yet.
pub(super) fn consent_reaction(
    c: &pb::ConsentEvent,
    own: Option<u32>,
    accept: bool,
) -> Option<ConsentReaction> {
    let own = own?;
    let state = c.state.to_ascii_lowercase();
    if own == c.target_entity && (state.contains("request") || state.contains("pending")) {
        let op = if accept {
            ConsentOp::Consent
        } else {
            ConsentOp::Decline
        };
        return Some(ConsentReaction::Answer(op));
    }
    if own != c.requester_entity {
        return None;
    }
    if state.contains("activ") {
        Some(ConsentReaction::ReleaseLater)
    } else if state.contains("consent") || state.contains("accept") || state.contains("grant") {
        Some(ConsentReaction::Answer(ConsentOp::Activate))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consent_policy() {
        let ev = |state: &str| pb::ConsentEvent {
            consent_id: 9,
            kind: "hand_hold".into(),
            requester_entity: 1,
            target_entity: 2,
            state: state.into(),
        };
        let answer = |op| Some(ConsentReaction::Answer(op));
        assert_eq!(
            consent_reaction(&ev("REQUESTED"), Some(2), true),
            answer(ConsentOp::Consent)
        );
        assert_eq!(
            consent_reaction(&ev("requested"), Some(2), false),
            answer(ConsentOp::Decline)
        );
        // The requester does not answer its own request; bystanders never act.
        assert_eq!(consent_reaction(&ev("requested"), Some(1), true), None);
        assert_eq!(consent_reaction(&ev("requested"), Some(3), true), None);
        assert_eq!(
            consent_reaction(&ev("consented"), Some(1), true),
            answer(ConsentOp::Activate)
        );
        assert_eq!(
            consent_reaction(&ev("active"), Some(1), true),
            Some(ConsentReaction::ReleaseLater)
        );
        assert_eq!(consent_reaction(&ev("active"), Some(2), true), None);
        assert_eq!(consent_reaction(&ev("released"), Some(1), true), None);
        assert_eq!(consent_reaction(&ev("requested"), None, true), None);
    }
}
