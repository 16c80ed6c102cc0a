//! The Plaza room, sans I/O.
//!
//! A [`Room`] is the authority for everything inside one room: who is a member, where every
//! avatar is, and what each client is sent. It does no I/O, reads no clock and spawns nothing:
//! the shell (`plaza-room-actor`) feeds it joins, leaves and inputs as they arrive, calls
//! [`Room::advance`] at every wake with the time since the activation started (the room runs
//! the steps and the broadcast that are due, `schedule`), and delivers the [`Outbound`]
//! messages they produced. The same calls give the same outputs, byte for byte.
//!
//! # Layout
//! * [`admin`]: operator decisions (members by wallet, teleport targets, mutes, tick p99).
//! * [`interest`]: nearest-N interest on an rstar R-tree, with distance tiers.
//! * [`ids`]: entity id allocation with generations.
//! * [`interactions`]: prop ownership (pickup, place, throw, drop) and props as entities.
//! * [`consent`]: the consent state machine (requests between two members).
//! * [`emotes`]: monotonic emote scheduling.
//! * [`expressions`]: the expression channel (seed 004): validation and each viewer's deltas.
//! * [`scene`]: lockstep scene actions with late joiners (seed 001).
//! * [`people`]: identities and profiles, each client's roster, blocks and personal space.
//! * [`events`]: the discrete events and refusals the room sends.
//! * [`state`]: a plain copy of the room's state for drain and restore.
//! * `config`: [`RoomConfig`] and [`CapacityTier`].
//! * `io`: the room's inputs ([`Input`]) and outputs ([`Outbound`], [`RoomStats`]).
//! * `schedule`: [`Room::advance`], when steps and broadcasts run; the step itself.
//! * `apply`: what a step applies (joins and leaves, movements, the room-wide input queue).
//! * `encode`: the broadcast and each member's frame encoding.
//! * this module: [`Room`], its members, queueing inputs, and the events a step emits.
//!
//! Joins, leaves and inputs are queued and applied at the next tick, in arrival order. A step
//! runs, in order: joins and leaves; movements (per member, in session order); every other
//! input (interactions, consent, emotes, scenes) in the order the room received it across all
//! members; consent timeouts; the physics step; the scenes' end-of-tick actions. In a room whose
//! broadcasts are spread ([`RoomConfig::spread_from_members`]), [`Room::advance`] encodes each
//! member group's frames at its own slot of the broadcast period (see [`WakeGrid`]), after the
//! step due at the same wake.

pub mod admin;
pub mod consent;
pub mod emotes;
pub mod events;
pub mod expressions;
pub mod ids;
pub mod interactions;
pub mod interest;
pub mod people;
pub mod scene;
pub mod state;
mod validate;

mod apply;
mod config;
mod encode;
mod io;
mod schedule;

pub use config::{CapacityTier, RoomConfig, RoomRegistry, RoomRule, glob_match};
pub use io::{Input, JoinRefusal, MoveInput, Outbound, RejectReason, RoomStats, SessionId};
pub use plaza_physics::{RoomDefinition, SpawnPoint};
pub use schedule::{Advanced, DEFAULT_MAX_CATCH_UP, Due, GROUP_SLOT_MS, WakeGrid, group_count};

use std::collections::{BTreeMap, VecDeque};

use plaza_physics::RoomPhysics;
use plaza_proto::frame::{EntityRecord, FrameEncoder};
use plaza_proto::quant::Pose;

use crate::apply::spawn_point;
use crate::consent::{ConsentBook, Party, Transition};
use crate::emotes::Emotes;
use crate::events::{EventBody, JsonObject, Refusal, RoomEvent, TeleportCause};
use crate::expressions::{Expression, ExpressionView};
use crate::ids::EntityIds;
use crate::interactions::{PropUpdate, Props, prop_entity};
use crate::interest::{InterestIndex, InterestSet};
use crate::people::{BlockOp, Blocks, Identity, RosterView};
use crate::scene::{SceneOut, Scenes};

impl RoomStats {
    fn count_rejection(&mut self, reason: RejectReason) {
        let i = RejectReason::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0);
        self.moves_rejected[i] += 1;
    }
}

/// One member of the room.
#[derive(Debug)]
struct Member {
    entity: u32,
    pose: Pose,
    last_input_seq: u32,
    /// Client timestamp of the last applied move, for its time step (only an accepted move,
    /// or a refused one whose step counts, moves it: `plaza_physics::refused_step_counts`).
    last_timestamp_s: Option<f64>,
    /// Room time (ms) when `last_timestamp_s` was set: unwraps circular timestamps.
    last_move_ms: u64,
    /// How far (ms) frames carry the avatar forward along its velocity at most: the client's
    /// own time step to its last accepted move (`encode::lead_pose`); 0 until it made two.
    lead_cap_ms: u64,
    inputs: VecDeque<Input>,
    encoder: FrameEncoder,
    /// Avatars this member saw in the last broadcast (sorted): who is told about emotes.
    seen: Vec<u32>,
    /// The member's identity (wallet or guest id).
    wallet: String,
    /// Avatars of members this one blocks or is blocked by (sorted): never in its view.
    hidden: Vec<u32>,
    /// Avatars closer than this (metres) are left out of its view (0: off).
    personal_space_m: f32,
    /// What its client holds of the roster.
    roster: RosterView,
    /// Its avatar's expression.
    expression: Expression,
    /// What its client holds of the others' expressions.
    expressions: ExpressionView,
}

impl Member {
    /// A member that just joined (or was restored) at `pose`.
    fn new(entity: u32, pose: Pose, wallet: String, encoder: FrameEncoder, now_ms: u64) -> Self {
        Self {
            entity,
            pose,
            last_input_seq: 0,
            last_timestamp_s: None,
            last_move_ms: now_ms,
            lead_cap_ms: 0,
            inputs: VecDeque::new(),
            encoder,
            seen: Vec::new(),
            wallet,
            hidden: Vec::new(),
            personal_space_m: 0.0,
            roster: RosterView::default(),
            expression: Expression::NEUTRAL,
            expressions: ExpressionView::default(),
        }
    }
}

#[derive(Debug)]
enum Pending {
    /// A join, with the entity id the session asks to get back (0: any) and its wallet.
    Join(SessionId, u32, String),
    Leave(SessionId),
}

/// One room: members, avatars, and a frame encoder per member.
pub struct Room {
    id: String,
    cfg: RoomConfig,
    tick: u64,
    /// Broadcast accumulator of `Room::step` (tests only): grows by `broadcast_hz` per tick, a broadcast
    /// is due at `tick_hz`.
    broadcast_acc: u32,
    /// Where [`Room::advance`] stands on the step and broadcast grids.
    schedule: schedule::Schedule,
    /// The tick whose poses the arena holds (the broadcast that built it).
    arena_tick: u64,
    members: BTreeMap<SessionId, Member>,
    pending: Vec<Pending>,
    ids: EntityIds,
    physics: RoomPhysics,
    /// Room time of the current step, milliseconds.
    now_ms: u64,
    stats: RoomStats,
    /// Reused per broadcast: the quantized arena, sorted by entity id.
    arena: Vec<EntityRecord>,
    /// Reused per broadcast: one viewer's interest.
    interest: InterestSet,
    /// The interest index of the current broadcast period (built by [`Room::broadcast`]; the
    /// groups encoded at later steps reuse it).
    index: InterestIndex,
    /// Frame groups of the current broadcast period (1: all frames at the broadcast).
    groups: u32,
    /// The next group of the current period still to encode (`groups`: none left).
    next_group: u32,
    /// Room time (ms) of the broadcast that started the current period ([`Room::advance`]'s
    /// group slots count from it).
    period_start_ms: u64,
    /// Reused per encode pass: arena index of each avatar id, `u32::MAX` for none.
    slot: Vec<u32>,
    /// Reused per encode pass: each avatar's quantized position in metres, by arena index.
    pos_m: Vec<[f32; 3]>,
    /// Reused per encode pass: one frame's bytes.
    frame_buf: Vec<u8>,
    /// The frame encoders' shared scratch (`FrameEncoder::encode_with`): one per encoding
    /// thread, not one per member.
    frame_scratch: plaza_proto::frame::EncodeScratch,
    /// Prop ownership.
    props: Props,
    /// Open consents.
    consents: ConsentBook,
    /// Emote schedules.
    emotes: Emotes,
    /// Lockstep scenes.
    scenes: Scenes,
    /// Non-movement inputs, room-wide, in arrival order.
    actions: VecDeque<(SessionId, Input)>,
    /// Queued non-movement inputs per session (bounded by `max_pending_inputs`).
    action_counts: BTreeMap<SessionId, usize>,
    /// Last event sequence number issued.
    room_seq: u64,
    /// Last audit record counter issued.
    audit_seq: u64,
    /// Avatars teleported by the server, with the broadcast count at the teleport: their
    /// records carry [`plaza_proto::quant::ANIM_INSTANT`] while the broadcast count is at most
    /// one more (every member's first frame after the teleport, spread or not).
    instants: Vec<(u32, u64)>,
    /// Every member's identity and profile, by avatar entity.
    identities: people::Identities,
    /// Blocks per wallet pair (kept while the room runs, members or not).
    blocks: Blocks,
    /// Expression accumulator: grows by `expression_hz` per tick, a pass is due at `tick_hz`.
    expression_acc: u32,
    /// Members whose expression is not neutral.
    expressive: usize,
}

impl std::fmt::Debug for Room {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Room")
            .field("id", &self.id)
            .field("tick", &self.tick)
            .field("members", &self.members.len())
            .finish_non_exhaustive()
    }
}

impl Room {
    /// A new, empty room.
    pub fn new(id: impl Into<String>, cfg: RoomConfig) -> Self {
        let physics = RoomPhysics::new(&cfg.definition, cfg.physics.clone());
        let id = id.into();
        let props = Props::new(id.clone(), cfg.reach_m, &physics);
        let consents = ConsentBook::new(cfg.consent);
        let scenes = Scenes::new(cfg.scene);
        Self {
            id,
            props,
            consents,
            emotes: Emotes::default(),
            scenes,
            actions: VecDeque::new(),
            action_counts: BTreeMap::new(),
            room_seq: 0,
            audit_seq: 0,
            instants: Vec::new(),
            identities: people::Identities::default(),
            blocks: Blocks::default(),
            expression_acc: 0,
            expressive: 0,
            cfg,
            tick: 0,
            broadcast_acc: 0,
            schedule: schedule::Schedule::default(),
            arena_tick: 0,
            members: BTreeMap::new(),
            pending: Vec::new(),
            ids: EntityIds::default(),
            physics,
            now_ms: 0,
            stats: RoomStats::default(),
            arena: Vec::new(),
            interest: InterestSet::default(),
            index: InterestIndex::default(),
            groups: 1,
            next_group: 1,
            period_start_ms: 0,
            slot: Vec::new(),
            pos_m: Vec::new(),
            frame_buf: Vec::new(),
            frame_scratch: Default::default(),
        }
    }

    /// The room's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The room's config.
    pub fn config(&self) -> &RoomConfig {
        &self.cfg
    }

    /// Steps run so far.
    pub fn tick(&self) -> u64 {
        self.tick
    }

    /// Members now (joins and leaves still queued are not counted).
    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    /// Whether the room has no member and nothing queued.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.pending.is_empty()
    }

    /// The room's counters.
    pub fn stats(&self) -> &RoomStats {
        &self.stats
    }

    /// A member's avatar, if the session is a member.
    pub fn entity_of(&self, session: SessionId) -> Option<u32> {
        self.members.get(&session).map(|m| m.entity)
    }

    /// A member's authoritative pose, if the session is a member.
    pub fn pose_of(&self, session: SessionId) -> Option<Pose> {
        self.members.get(&session).map(|m| m.pose)
    }

    /// Queue a join; applied at the next tick. The member's identity is `session:<id>` (a
    /// shell that knows wallets uses [`Room::join_member`]).
    pub fn join(&mut self, session: SessionId) {
        self.join_member(session, format!("session:{session}"), 0);
    }

    /// Queue a join that asks for `entity` back (a session resumed after its room's activation
    /// ended): it gets that id if the id is free here, a fresh one otherwise.
    pub fn join_with_entity(&mut self, session: SessionId, entity: u32) {
        self.join_member(session, format!("session:{session}"), entity);
    }

    /// Queue a join of `session` whose identity is `wallet` (its roster entry; blocks are per
    /// wallet), asking for `entity` back (0: any; see [`Room::join_with_entity`]).
    pub fn join_member(&mut self, session: SessionId, wallet: String, entity: u32) {
        self.pending.push(Pending::Join(session, entity, wallet));
    }

    /// A member's wallet, if the session is a member.
    pub fn wallet_of(&self, session: SessionId) -> Option<&str> {
        self.members.get(&session).map(|m| m.wallet.as_str())
    }

    /// A member's identity and profile, by its avatar entity.
    pub fn identity(&self, entity: u32) -> Option<&Identity> {
        self.identities.get(&entity)
    }

    /// Whether `blocker` blocks `blocked` (wallets).
    pub fn blocks(&self, blocker: &str, blocked: &str) -> bool {
        self.blocks.blocked_by(blocker).any(|b| b == blocked)
    }

    /// Queue a leave; applied at the next tick.
    pub fn leave(&mut self, session: SessionId) {
        self.pending.push(Pending::Leave(session));
    }

    /// Queue an input from a member; applied at the next tick.
    ///
    /// Movements and resyncs of non-members are dropped (the shell only forwards inputs of
    /// attached sessions, so this is a race with a leave, not an error); beyond
    /// `max_pending_inputs` the oldest is dropped. Every other input is queued room-wide in
    /// arrival order, also from non-members (they are refused with [`Refusal::NotMember`]);
    /// beyond `max_pending_inputs` per session the newest is dropped.
    pub fn input(&mut self, session: SessionId, input: Input) {
        if let Input::Expression {
            expression_id,
            intensity_bp,
        } = input
        {
            self.set_expression(session, Expression::from_wire(expression_id, intensity_bp));
            return;
        }
        let cap = self.cfg.max_pending_inputs;
        if !matches!(input, Input::Move(_) | Input::Resync) {
            let n = self.action_counts.entry(session).or_default();
            if *n >= cap {
                self.stats.inputs_dropped += 1;
            } else {
                *n += 1;
                self.actions.push_back((session, input));
            }
            return;
        }
        if let Some(m) = self.members.get_mut(&session) {
            if m.inputs.len() >= cap {
                m.inputs.pop_front();
                self.stats.inputs_dropped += 1;
            }
            m.inputs.push_back(input);
        } else if self
            .pending
            .iter()
            .any(|p| matches!(p, Pending::Join(s, _, _) if *s == session))
        {
            // Joined in this same tick: keep the input for after the join.
            self.pending_inputs_for_joiner(session, input);
        }
    }

    fn pending_inputs_for_joiner(&mut self, _session: SessionId, _input: Input) {
        // A client cannot have seen Joined before the join is applied, so an input that races
        // its own join carries no state worth keeping; it is dropped and counted.
        self.stats.inputs_dropped += 1;
    }

    /// Move a member's avatar to `to` (feet, metres) now, as an operator: the server's own
    /// move, exempt from the speed and teleport checks. The avatar lands at `to` or the nearest
    /// free spot; its next frame record carries the instant bit so every receiver snaps; a
    /// `Teleported` event (cause [`TeleportCause::Operator`]) goes to the mover and the members
    /// who saw it at the last broadcast (pushed to `out`, delivered like a step's outputs);
    /// the mover's next move is validated from the new place. Returns where it landed.
    ///
    /// Refused with [`Refusal::NotMember`] for a session that is not a member (a queued join is
    /// not one yet) and [`Refusal::InvalidPlacement`] for a non-finite `to` or one outside the
    /// room's bounds.
    pub fn teleport(
        &mut self,
        session: SessionId,
        to: [f32; 3],
        out: &mut Vec<Outbound>,
    ) -> Result<[f32; 3], Refusal> {
        self.teleport_as(session, to, None, "", TeleportCause::Operator, out)
    }

    /// The server moves `session`'s avatar (see [`Room::teleport`]).
    fn teleport_as(
        &mut self,
        session: SessionId,
        to: [f32; 3],
        yaw_deg: Option<f32>,
        destination: &str,
        cause: TeleportCause,
        out: &mut Vec<Outbound>,
    ) -> Result<[f32; 3], Refusal> {
        if !to.iter().all(|v| v.is_finite()) || !self.physics.in_bounds(to) {
            return Err(Refusal::InvalidPlacement);
        }
        let Some(m) = self.members.get_mut(&session) else {
            return Err(Refusal::NotMember);
        };
        self.physics.teleport(m.entity, to);
        let at = self.physics.avatar_position(m.entity).unwrap_or(to);
        m.pose.position = at;
        m.pose.velocity = [0.0; 3];
        if let Some(y) = yaw_deg.filter(|y| y.is_finite()) {
            m.pose.yaw_deg = y.rem_euclid(360.0);
        }
        // Moves queued before the teleport were made from the old place: they would only be
        // refused now. The client continues from the Teleported event.
        m.inputs.retain(|i| !matches!(i, Input::Move(_)));
        let (entity, yaw, last_input_seq) = (m.entity, m.pose.yaw_deg, m.last_input_seq);
        let broadcasts = self.stats.broadcasts;
        self.instants.retain(|(e, _)| *e != entity);
        self.instants.push((entity, broadcasts));
        self.stats.teleports += 1;
        let to = self
            .members
            .iter()
            .filter(|(s, m)| **s == session || m.seen.binary_search(&entity).is_ok())
            .map(|(s, _)| *s)
            .collect();
        let body = EventBody::Teleported {
            entity,
            position: at,
            yaw_deg: yaw,
            destination: destination.to_owned(),
            cause,
            last_input_seq,
        };
        self.emit(to, body, out);
        Ok(at)
    }

    /// A teleport to the definition's spawn point `name` (requestable only, unless `cause` is
    /// not a request).
    fn teleport_to_spawn_point(
        &mut self,
        session: SessionId,
        name: &str,
        cause: TeleportCause,
        out: &mut Vec<Outbound>,
    ) -> Result<[f32; 3], Refusal> {
        let Some(sp) = self.cfg.definition.spawn_point(name) else {
            return Err(Refusal::NoSuchDestination);
        };
        if cause == TeleportCause::Request && !sp.requestable {
            return Err(Refusal::NoSuchDestination);
        }
        let (position, yaw, name) = (sp.position, sp.yaw_deg, sp.name.clone());
        self.teleport_as(session, position, Some(yaw), &name, cause, out)
    }

    /// A member's avatar shows `e` from now on (the latest wins; sent at the next expression
    /// pass to the members who see it). A non-member's expression is dropped and counted.
    fn set_expression(&mut self, session: SessionId, e: Expression) {
        let Some(m) = self.members.get_mut(&session) else {
            self.stats.inputs_dropped += 1;
            return;
        };
        self.stats.expressions += 1;
        match (m.expression.is_neutral(), e.is_neutral()) {
            (true, false) => self.expressive += 1,
            (false, true) => self.expressive -= 1,
            _ => {}
        }
        m.expression = e;
    }

    /// A member's avatar's expression, if the session is a member.
    pub fn expression_of(&self, session: SessionId) -> Option<Expression> {
        self.members.get(&session).map(|m| m.expression)
    }

    /// One expression pass: each member gets the expressions of the avatars in its frames that
    /// changed since its client last heard (`full` after its keyframe), within its share of
    /// the expression budget.
    ///
    /// Performance: runs at the expression rate (60 Hz by default); O(members · visible) when
    /// anyone shows an expression, O(members) otherwise.
    fn send_expressions(&mut self, out: &mut Vec<Outbound>) {
        let hz = i64::from(self.cfg.expression_hz.clamp(1, self.cfg.tick_hz.max(1)));
        let per_message = match self.cfg.expression_budget_bytes_per_s {
            0 => i64::MAX / 256,
            b => i64::from(b) / hz,
        };
        // Each avatar's expression, by entity id (ids are small and dense).
        let max_id = self.members.values().map(|m| m.entity).max().unwrap_or(0);
        let mut by_entity = vec![Expression::NEUTRAL; max_id as usize + 1];
        if self.expressive > 0 {
            for m in self.members.values() {
                by_entity[m.entity as usize] = m.expression;
            }
        }
        let current = |e: u32| by_entity.get(e as usize).copied().unwrap_or_default();
        let tick = self.tick;
        let mut filtered = Vec::new();
        for (session, m) in self.members.iter_mut() {
            if self.expressive == 0 && m.expressions.is_idle() {
                continue;
            }
            // Blocks apply at once (the frames' view is refreshed at the next broadcast).
            let seen: &[u32] = if m.hidden.is_empty() {
                &m.seen
            } else {
                filtered.clear();
                filtered.extend(m.seen.iter().filter(|e| m.hidden.binary_search(e).is_err()));
                &filtered
            };
            let Some(u) = m.expressions.update(seen, current, per_message) else {
                continue;
            };
            self.stats.expression_messages += 1;
            self.stats.expression_states += u.states.len() as u64;
            out.push(Outbound::Expressions {
                session: *session,
                tick,
                full: u.full,
                states: u.states,
            });
        }
    }

    /// Ask for a keyframe for `session` at its next frame (the shell dropped frames for it).
    pub fn request_keyframe(&mut self, session: SessionId) {
        if let Some(m) = self.members.get_mut(&session) {
            m.encoder.request_keyframe();
        }
    }

    /// Whether the members `a` and `b` block each other (either way).
    fn blocked_between(&self, a: SessionId, b: SessionId) -> bool {
        match (self.members.get(&a), self.members.get(&b)) {
            (Some(x), Some(y)) => self.blocks.between(&x.wallet, &y.wallet),
            _ => false,
        }
    }

    /// A block or unblock by `session`: audited (`block.added`, `block.removed`) when it
    /// changes something, acknowledged with a `Block` event to the blocker, in force from the
    /// next frame on.
    fn block(
        &mut self,
        session: SessionId,
        op: Option<BlockOp>,
        target_entity: u32,
        target_wallet: String,
        out: &mut Vec<Outbound>,
    ) -> Result<(), Refusal> {
        let Some(me) = self.members.get(&session) else {
            return Err(Refusal::NotMember);
        };
        let (my_wallet, my_entity) = (me.wallet.clone(), me.entity);
        let Some(op) = op else {
            return Err(Refusal::UnknownOp);
        };
        let target = if target_wallet.is_empty() {
            self.identities
                .get(&target_entity)
                .map(|id| id.wallet.clone())
                .ok_or(Refusal::NoSuchTarget)?
        } else if target_wallet.len() > people::MAX_WALLET {
            return Err(Refusal::TooLarge);
        } else {
            target_wallet
        };
        if target == my_wallet {
            return Err(Refusal::SelfTarget);
        }
        let other = self.members.iter().find(|(_, m)| m.wallet == target);
        let (other_session, other_entity) = other.map_or((0, 0), |(s, m)| (*s, m.entity));
        if op == BlockOp::Block && other.is_none() && !self.blocks(&my_wallet, &target) {
            // A wallet that is not here: blocking it needs it to be a member (unblocking one
            // that left is fine).
            return Err(Refusal::NoSuchTarget);
        }
        let changed = match op {
            BlockOp::Block => self
                .blocks
                .add(&my_wallet, &target)
                .map_err(|_| Refusal::TooMany)?,
            BlockOp::Unblock => self.blocks.remove(&my_wallet, &target),
        };
        if changed {
            self.stats.block_changes += 1;
            self.refresh_hidden();
            let d = JsonObject::new()
                .str("blocker", &my_wallet)
                .num("blocker_entity", u64::from(my_entity))
                .num("blocker_session", session)
                .str("blocked", &target)
                .num("blocked_entity", u64::from(other_entity))
                .num("blocked_session", other_session)
                .num("tick", self.tick)
                .finish();
            let kind = match op {
                BlockOp::Block => "block.added",
                BlockOp::Unblock => "block.removed",
            };
            self.audit(kind, d, out);
        }
        let body = EventBody::Block {
            target_wallet: target,
            target_entity: other_entity,
            blocked: op == BlockOp::Block,
        };
        self.emit(vec![session], body, out);
        Ok(())
    }

    /// Recomputes every member's hidden avatars from the blocks (after a block, an unblock, a
    /// join or a leave).
    fn refresh_hidden(&mut self) {
        if self.blocks.is_empty() {
            for m in self.members.values_mut() {
                m.hidden.clear();
            }
            return;
        }
        let by_wallet: BTreeMap<&str, u32> = self
            .members
            .values()
            .map(|m| (m.wallet.as_str(), m.entity))
            .collect();
        let hidden: Vec<Vec<u32>> = self
            .members
            .values()
            .map(|m| {
                let mut h: Vec<u32> = self
                    .blocks
                    .blocked_by(&m.wallet)
                    .chain(self.blocks.blockers_of(&m.wallet))
                    .filter_map(|w| by_wallet.get(w).copied())
                    .collect();
                h.sort_unstable();
                h.dedup();
                h
            })
            .collect();
        for (m, h) in self.members.values_mut().zip(hidden) {
            m.hidden = h;
        }
    }

    /// The party whose avatar is `entity`, if a member's.
    fn party_of_entity(&self, entity: u32) -> Option<Party> {
        self.members
            .iter()
            .find(|(_, m)| m.entity == entity)
            .map(|(s, m)| Party {
                session: *s,
                entity: m.entity,
            })
    }

    /// Push an event for the members among `to` (a refusal also reaches a non-member).
    fn emit(&mut self, mut to: Vec<SessionId>, body: EventBody, out: &mut Vec<Outbound>) {
        if !matches!(body, EventBody::Rejected { .. }) {
            to.retain(|s| self.members.contains_key(s));
        }
        to.sort_unstable();
        to.dedup();
        if to.is_empty() {
            return;
        }
        self.room_seq += 1;
        self.stats.events += 1;
        out.push(Outbound::Event(RoomEvent {
            room_seq: self.room_seq,
            to,
            body,
        }));
    }

    fn emit_scene(&mut self, outs: Vec<SceneOut>, out: &mut Vec<Outbound>) {
        for (to, body) in outs {
            self.emit(to, body, out);
        }
    }

    fn refuse(&mut self, session: SessionId, seq: u32, reason: Refusal, out: &mut Vec<Outbound>) {
        *self.stats.refusals.entry(reason.code()).or_default() += 1;
        let body = EventBody::Rejected {
            in_reply_to: seq,
            reason,
        };
        self.emit(vec![session], body, out);
    }

    fn audit(&mut self, kind: &str, detail_json: String, out: &mut Vec<Outbound>) {
        self.audit_seq += 1;
        self.stats.audits += 1;
        out.push(Outbound::Audit {
            local_seq: self.audit_seq,
            kind: kind.to_owned(),
            detail_json,
            at_ms: self.now_ms,
        });
    }

    fn prop_event(&mut self, up: &PropUpdate, out: &mut Vec<Outbound>) {
        self.stats.prop_changes += 1;
        let Some(entity) = prop_entity(up.prop_id) else {
            return;
        };
        let to = self.members.keys().copied().collect();
        let body = EventBody::Prop {
            prop_id: up.prop_id,
            entity,
            holder_entity: up.holder.map_or(0, |(_, e)| e),
            revision: up.revision,
            change: up.change,
            position: up.position,
        };
        self.emit(to, body, out);
    }

    /// Tell a joiner who holds what: one `Pickup` prop event per held prop, at its current
    /// revision (nothing changes; the joiner missed the original event).
    fn tell_holders(&mut self, session: SessionId, out: &mut Vec<Outbound>) {
        let held: Vec<(u32, u32, u64)> = self
            .props
            .slots()
            .iter()
            .filter_map(|(id, s)| s.holder.map(|(_, e)| (*id, e, s.revision)))
            .collect();
        for (prop_id, holder_entity, revision) in held {
            let Some(entity) = prop_entity(prop_id) else {
                continue;
            };
            let body = EventBody::Prop {
                prop_id,
                entity,
                holder_entity,
                revision,
                change: events::PropChange::Pickup,
                position: self.physics.prop_position(prop_id).unwrap_or([0.0; 3]),
            };
            self.emit(vec![session], body, out);
        }
    }

    /// One consent transition: its audit record, then the event to both parties.
    fn consent_transition(&mut self, t: &Transition, out: &mut Vec<Outbound>) {
        self.stats.consent_transitions += 1;
        let c = &t.consent;
        let mut d = JsonObject::new()
            .num("consent_id", c.id)
            .str("kind", c.kind.as_str())
            .num("requester", u64::from(c.requester.entity))
            .num("requester_session", c.requester.session)
            .num("target", u64::from(c.target.entity))
            .num("target_session", c.target.session)
            .str("from", t.from.map_or("", |s| s.as_str()))
            .str("to", c.state.as_str())
            .str("cause", t.cause.as_str());
        if let Some(a) = t.actor {
            d = d.num("actor", u64::from(a.entity));
        }
        let d = d.num("tick", self.tick).finish();
        self.audit(&format!("consent.{}", c.state.as_str()), d, out);
        let body = EventBody::Consent {
            consent_id: c.id,
            kind: c.kind,
            requester_entity: c.requester.entity,
            target_entity: c.target.entity,
            state: c.state,
        };
        self.emit(vec![c.requester.session, c.target.session], body, out);
    }
}

#[cfg(test)]
mod expression_tests;
#[cfg(test)]
mod people_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod teleport_tests;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;
