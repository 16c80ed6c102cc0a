//! The Plaza room, sans I/O.
//!
//! A [`Room`] is the authority for everything inside one room: who is a member, where every
//! avatar is, and what each client is sent. It does no I/O, reads no clock and spawns nothing:
//! the shell (`plaza-room-actor`) feeds it joins, leaves and inputs as they arrive, calls
//! [`Room::step`] at the fixed simulation rate with the current time, and delivers the
//! [`Outbound`] messages the step produced. The same calls give the same outputs, byte for byte.
//!
//! # Layout
//! * [`interest`]: nearest-N interest on an rstar R-tree, with distance tiers.
//! * [`ids`]: entity id allocation with generations.
//! * [`interactions`]: prop ownership (pickup, place, throw, drop) and props as entities.
//! * [`consent`]: the consent state machine (requests between two members).
//! * [`emotes`]: monotonic emote scheduling.
//! * [`scene`]: lockstep scene actions with late joiners (seed 001).
//! * [`events`]: the discrete events and refusals the room sends.
//! * [`snapshot`]: a plain copy of the room's state for drain and restore.
//! * this module: [`RoomConfig`], [`Room`], its inputs ([`Input`]) and outputs ([`Outbound`]).
//!
//! Joins, leaves and inputs are queued and applied at the next tick, in arrival order. A step
//! runs, in order: joins and leaves; movements (per member, in session order); every other
//! input (interactions, consent, emotes, scenes) in the order the room received it across all
//! members; consent timeouts; the physics step; the scenes' end-of-tick actions; then, in a room
//! whose broadcasts are spread ([`RoomConfig::spread_from_members`]), the frames of the group
//! due at this step.

pub mod consent;
pub mod emotes;
pub mod events;
pub mod ids;
pub mod interactions;
pub mod interest;
pub mod scene;
pub mod snapshot;
mod validate;

use std::collections::{BTreeMap, VecDeque};

use plaza_physics::{MoveClaim, PhysicsConfig, RoomDefinition, RoomPhysics};
use plaza_proto::frame::{EncoderConfig, EntityRecord, FrameEncoder, OwnState, Visible};
use plaza_proto::quant::{Pose, quantize};

use crate::consent::{ConsentBook, ConsentConfig, ConsentOp, ConsentRequest, Party, Transition};
use crate::emotes::{EmoteOutcome, EmoteRequest, Emotes};
use crate::events::{EventBody, JsonObject, Refusal, RoomEvent};
use crate::ids::EntityIds;
use crate::interactions::{
    Actor, DEFAULT_REACH_M, InteractionRequest, PROP_KIND, PropUpdate, Props, prop_entity,
};
use crate::interest::{DEFAULT_TIER_BANDS_M, InterestIndex, InterestSet};
use crate::scene::{SceneConfig, SceneOp, SceneOut, Scenes};

/// A session's id, issued by the gateway; unique within the cluster.
pub type SessionId = u64;

/// A room's capacity tier: it sets the default interest cap and bandwidth budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CapacityTier {
    /// Up to 32 visible avatars, 32 kbit/s per client.
    #[default]
    Class,
    /// Up to 256 visible avatars, 256 kbit/s per client.
    Stadium,
}

impl CapacityTier {
    /// The tier's default number of avatars a client sees.
    pub fn default_interest_cap(self) -> u32 {
        match self {
            Self::Class => 32,
            Self::Stadium => 256,
        }
    }

    /// The tier's default bandwidth budget, bytes per second per client.
    pub fn default_budget_bytes_per_s(self) -> u32 {
        match self {
            Self::Class => 32_000 / 8,
            Self::Stadium => 256_000 / 8,
        }
    }
}

/// How a room runs. Defaults follow the seeds: 50 Hz simulation, 20 Hz broadcast.
#[derive(Clone, Debug)]
pub struct RoomConfig {
    /// Simulation steps per second.
    pub tick_hz: u32,
    /// Snapshot broadcasts per second (at most `tick_hz`).
    pub broadcast_hz: u32,
    /// Most members the room admits; a join beyond it is refused with [`JoinRefusal::RoomFull`].
    pub max_members: u32,
    /// Capacity tier (interest cap and budget defaults).
    pub tier: CapacityTier,
    /// Avatars each client sees at most (nearest first).
    pub interest_cap: u32,
    /// Bandwidth budget per client, bytes per second.
    pub budget_bytes_per_s: u32,
    /// A check hash every this many frames.
    pub check_every: u32,
    /// Distance bands (metres) for tiers 0..=2; beyond the last is tier 3.
    pub tier_bands_m: [f32; 3],
    /// Inputs a member may have queued between two ticks; older ones are dropped beyond it.
    pub max_pending_inputs: usize,
    /// From this many members on, a broadcast's frames are spread over the steps that follow it
    /// (0: never). Members are split into `1 + tick_hz / broadcast_hz` groups by entity id; a
    /// broadcast encodes the first group's frames, each of the next simulation steps one more
    /// group (of the state at that step), and the next broadcast first finishes any group still
    /// due. Every member still gets one frame per broadcast period, always at the same phase of
    /// it; the cost of a step is bounded by a group instead of the whole room.
    pub spread_from_members: u32,
    /// Threads that encode one step's frames (the room's own and scoped helpers), used when
    /// there are at least 64 frames per thread; 1 (the default) encodes on the room's thread
    /// only. The frames are the same whatever the count. On a node whose cores are busy with
    /// other rooms a helper only waits for a core (docs/BENCHMARKS.md, room core).
    pub encode_threads: u32,
    /// The room's static geometry, bounds, spawn point and props.
    pub definition: RoomDefinition,
    /// Physics and movement-validation parameters.
    pub physics: PhysicsConfig,
    /// How far a member reaches to pick up or place a prop, metres (from its capsule centre).
    pub reach_m: f32,
    /// Consent timeouts and limits.
    pub consent: ConsentConfig,
    /// Lockstep scene limits.
    pub scene: SceneConfig,
}

impl Default for RoomConfig {
    fn default() -> Self {
        let tier = CapacityTier::Class;
        Self {
            tick_hz: 50,
            broadcast_hz: 20,
            max_members: 256,
            tier,
            interest_cap: tier.default_interest_cap(),
            budget_bytes_per_s: tier.default_budget_bytes_per_s(),
            check_every: 20,
            tier_bands_m: DEFAULT_TIER_BANDS_M,
            max_pending_inputs: 32,
            spread_from_members: 64,
            encode_threads: 1,
            definition: RoomDefinition::default_plaza(),
            physics: PhysicsConfig::default(),
            reach_m: DEFAULT_REACH_M,
            consent: ConsentConfig::default(),
            scene: SceneConfig::default(),
        }
    }
}

impl RoomConfig {
    /// A config for `tier` with that tier's cap and budget.
    pub fn for_tier(tier: CapacityTier) -> Self {
        Self {
            tier,
            interest_cap: tier.default_interest_cap(),
            budget_bytes_per_s: tier.default_budget_bytes_per_s(),
            ..Self::default()
        }
    }
}

/// A client's movement input, already decoded from the wire.
#[derive(Clone, Debug, PartialEq)]
pub struct MoveInput {
    /// The client's envelope sequence.
    pub seq: u32,
    /// The pose the client claims.
    pub pose: Pose,
    /// The client's clock when it sampled the pose, seconds.
    pub timestamp_s: f64,
    /// The client asks to be placed, not interpolated (first message, after a teleport).
    pub is_instant: bool,
    /// `Some(period)` when `timestamp_s` comes from a circular timestamp (the compressed
    /// movement's, [`plaza_proto::compressed::TIMESTAMP_BUFFER_S`]): the time step is then
    /// taken modulo the period, so a wrap the decoder counted wrongly shifts nothing.
    pub timestamp_period_s: Option<f64>,
}

/// Inputs a member sends between ticks.
///
/// `seq` is the client envelope sequence: a refusal answers it in
/// [`EventBody::Rejected::in_reply_to`].
#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    /// A movement.
    Move(MoveInput),
    /// The client lost its chain or failed a check: send a keyframe.
    Resync,
    /// Pickup, place or throw a prop (`plaza.v1.Interaction`).
    Interact {
        /// Client envelope sequence.
        seq: u32,
        /// The request.
        request: InteractionRequest,
    },
    /// A consent op (`plaza.v1.ConsentAction`).
    Consent {
        /// Client envelope sequence.
        seq: u32,
        /// The op; `None` for `CONSENT_OP_UNSPECIFIED` or an unknown value (refused).
        op: Option<ConsentOp>,
        /// For request: the kind's name ([`consent::CONSENT_KINDS`]).
        kind: String,
        /// For request: the target's avatar entity.
        target_entity: u32,
        /// For every other op: the consent id.
        consent_id: u64,
    },
    /// Start or stop an emote (`plaza.v1.Emote`).
    Emote {
        /// Client envelope sequence.
        seq: u32,
        /// The emote.
        request: EmoteRequest,
    },
    /// A lockstep scene op (`plaza.v1.SceneAction`, `SceneControl`, `SceneState`).
    Scene {
        /// Client envelope sequence.
        seq: u32,
        /// The scene id.
        scene: String,
        /// The op.
        op: SceneOp,
    },
}

/// Why a movement was rejected (the physics authority's reasons, in the room's terms).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// Faster than the speed limit.
    Speed,
    /// NaN or infinite values.
    NonFinite,
    /// A time step that is zero or negative.
    NonPositiveDt,
    /// Outside the room.
    OutOfBounds,
    /// A jump without a server-issued teleport.
    Teleport,
    /// Static geometry is in the way.
    Blocked,
    /// The client's clock runs faster than the server's.
    Clock,
    /// Higher above the ground than a jump reaches, and not falling (fly hack).
    Airborne,
    /// The avatar is not in the room's physics world (a room bug; the client is corrected to
    /// its last known pose).
    UnknownEntity,
}

impl RejectReason {
    /// All reasons, in metric-label order.
    pub const ALL: [Self; 9] = [
        Self::Speed,
        Self::NonFinite,
        Self::NonPositiveDt,
        Self::OutOfBounds,
        Self::Teleport,
        Self::Blocked,
        Self::Clock,
        Self::Airborne,
        Self::UnknownEntity,
    ];

    /// The room's reason for a physics rejection.
    pub fn from_physics(r: plaza_physics::RejectReason) -> Self {
        use plaza_physics::RejectReason as P;
        match r {
            P::Speed => Self::Speed,
            P::NonFinite => Self::NonFinite,
            P::NonPositiveDt => Self::NonPositiveDt,
            P::OutOfBounds => Self::OutOfBounds,
            P::Teleport => Self::Teleport,
            P::Blocked => Self::Blocked,
            P::Clock => Self::Clock,
            P::Airborne => Self::Airborne,
            // The room only validates moves of its members' avatars: an unknown one (or a reason
            // newer than this crate) is a room bug.
            _ => Self::UnknownEntity,
        }
    }

    /// Stable code for metrics and logs.
    pub fn code(self) -> &'static str {
        match self {
            Self::Speed => "speed",
            Self::NonFinite => "non_finite",
            Self::NonPositiveDt => "non_positive_dt",
            Self::OutOfBounds => "out_of_bounds",
            Self::Teleport => "teleport",
            Self::Blocked => "blocked",
            Self::Clock => "clock",
            Self::Airborne => "airborne",
            Self::UnknownEntity => "unknown_entity",
        }
    }
}

/// Why a join was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JoinRefusal {
    /// The room has `max_members` members.
    RoomFull,
    /// The session is already a member.
    AlreadyJoined,
}

/// What a step asks the shell to deliver, in the order it must act on them.
///
/// # Ordering contract
/// An [`Outbound::Audit`] always comes before the [`Outbound::Event`]s that acknowledge the
/// same consent transition or refusal. The shell must append the audit record durably
/// (`Directory::audit_append`) before it delivers any later event of the same step, so no
/// client ever sees a transition the log does not hold. Events of a step are in `room_seq`
/// order.
#[derive(Clone, Debug, PartialEq)]
pub enum Outbound {
    /// A join was applied: the session's avatar is `entity`.
    Joined {
        /// Who joined.
        session: SessionId,
        /// The session's avatar.
        entity: u32,
        /// Where it spawned.
        spawn: [f32; 3],
    },
    /// A join was refused.
    JoinRefused {
        /// Who asked.
        session: SessionId,
        /// Why not.
        reason: JoinRefusal,
    },
    /// A snapshot frame for one session.
    Frame {
        /// For whom.
        session: SessionId,
        /// The encoded frame (`plaza_proto::frame`).
        bytes: Vec<u8>,
        /// Whether it is a keyframe.
        keyframe: bool,
    },
    /// A movement was rejected; the client must adopt this pose.
    Correction {
        /// For whom.
        session: SessionId,
        /// Why.
        reason: RejectReason,
        /// The authoritative pose.
        pose: Pose,
        /// The last input sequence the server applied.
        last_input_seq: u32,
    },
    /// A leave was applied.
    Left {
        /// Who left.
        session: SessionId,
        /// The entity that was removed.
        entity: u32,
    },
    /// A discrete event (`plaza.v1.Event`) for the sessions in `to`.
    Event(RoomEvent),
    /// A consent audit record to append durably before delivering the events that follow.
    Audit {
        /// This room instance's audit counter (1, 2, ...; restored by [`Room::restore`]): a
        /// check that the shell appends every record once and in order. The store assigns the
        /// durable sequence number.
        local_seq: u64,
        /// `consent.<state>` for a transition (`consent.requested`, ...), `consent.refused`
        /// for a refused attempt.
        kind: String,
        /// A flat JSON object: consent id, kind, parties (entity and session), from, to, cause,
        /// actor, reason, tick.
        detail_json: String,
        /// Room time of the step, ms.
        at_ms: u64,
    },
}

/// Counters a room keeps; the shell exports them as metrics.
#[derive(Clone, Debug, Default)]
pub struct RoomStats {
    /// Steps run.
    pub ticks: u64,
    /// Broadcasts run.
    pub broadcasts: u64,
    /// Movements applied.
    pub moves_applied: u64,
    /// Movements rejected, by [`RejectReason::ALL`] index.
    pub moves_rejected: [u64; 9],
    /// Inputs dropped because a member queued more than `max_pending_inputs`.
    pub inputs_dropped: u64,
    /// Frames produced.
    pub frames: u64,
    /// Bytes of frames produced.
    pub frame_bytes: u64,
    /// Keyframes produced.
    pub keyframes: u64,
    /// Entity changes deferred by bandwidth budgets.
    pub deferrals: u64,
    /// Prop changes accepted (pickups, places, throws, drops).
    pub prop_changes: u64,
    /// Requests refused (interactions, consent, emotes, scenes), by [`Refusal`] code.
    pub refusals: BTreeMap<&'static str, u64>,
    /// Consent transitions.
    pub consent_transitions: u64,
    /// Audit records emitted.
    pub audits: u64,
    /// Emotes accepted.
    pub emotes: u64,
    /// Emotes dropped as older than the member's last one.
    pub emotes_stale: u64,
    /// Scene actions accepted.
    pub scene_actions: u64,
    /// Events emitted.
    pub events: u64,
}

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
    inputs: VecDeque<Input>,
    encoder: FrameEncoder,
    /// Avatars this member saw in the last broadcast (sorted): who is told about emotes.
    seen: Vec<u32>,
}

#[derive(Debug)]
enum Pending {
    /// A join, with the entity id the session asks to get back (0: any).
    Join(SessionId, u32),
    Leave(SessionId),
}

/// One room: members, avatars, and a frame encoder per member.
pub struct Room {
    id: String,
    cfg: RoomConfig,
    tick: u64,
    /// Broadcast accumulator: grows by `broadcast_hz` per tick, a broadcast is due at `tick_hz`.
    broadcast_acc: u32,
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
    /// Reused per encode pass: arena index of each avatar id, `u32::MAX` for none.
    slot: Vec<u32>,
    /// Reused per encode pass: each avatar's quantized position in metres, by arena index.
    pos_m: Vec<[f32; 3]>,
    /// Reused per encode pass: one frame's bytes.
    frame_buf: Vec<u8>,
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
            cfg,
            tick: 0,
            broadcast_acc: 0,
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
            slot: Vec::new(),
            pos_m: Vec::new(),
            frame_buf: Vec::new(),
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

    /// Queue a join; applied at the next tick.
    pub fn join(&mut self, session: SessionId) {
        self.pending.push(Pending::Join(session, 0));
    }

    /// Queue a join that asks for `entity` back (a session resumed after its room's activation
    /// ended): it gets that id if the id is free here, a fresh one otherwise.
    pub fn join_with_entity(&mut self, session: SessionId, entity: u32) {
        self.pending.push(Pending::Join(session, entity));
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
            .any(|p| matches!(p, Pending::Join(s, _) if *s == session))
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

    /// Ask for a keyframe for `session` at its next frame (the shell dropped frames for it).
    pub fn request_keyframe(&mut self, session: SessionId) {
        if let Some(m) = self.members.get_mut(&session) {
            m.encoder.request_keyframe();
        }
    }

    /// Run one simulation step at `now_ms`, then a broadcast when the broadcast rate says one
    /// is due (every `tick_hz / broadcast_hz` steps on average), appending what must be
    /// delivered to `out`.
    ///
    /// Performance: runs every tick.
    pub fn step(&mut self, now_ms: u64, out: &mut Vec<Outbound>) {
        self.simulate(now_ms, out);
        self.broadcast_acc += self.cfg.broadcast_hz.min(self.cfg.tick_hz);
        if self.broadcast_acc >= self.cfg.tick_hz {
            self.broadcast_acc -= self.cfg.tick_hz;
            self.broadcast(out);
        }
    }

    /// Run one simulation step at `now_ms` without broadcasting: for a shell that schedules
    /// broadcasts on their own clock (evenly spaced, independent of the step grid).
    ///
    /// Performance: runs every tick.
    pub fn simulate(&mut self, now_ms: u64, out: &mut Vec<Outbound>) {
        self.now_ms = now_ms;
        self.tick += 1;
        self.stats.ticks += 1;
        self.apply_pending(out);
        self.apply_inputs(out);
        self.apply_actions(out);
        let expired = self.consents.expire(now_ms);
        for t in expired {
            self.consent_transition(&t, out);
        }
        self.physics.step();
        for up in self.props.reconcile(&self.physics) {
            self.prop_event(&up, out);
        }
        let tick = self.tick;
        for (to, body) in self.scenes.finish_tick(tick) {
            self.emit(to, body, out);
        }
        // The next group of the current broadcast period, if its frames are spread.
        if self.next_group < self.groups {
            let g = self.next_group;
            self.next_group += 1;
            self.build_arena();
            self.encode_frames(g..g + 1, out);
        }
    }

    fn apply_pending(&mut self, out: &mut Vec<Outbound>) {
        for p in std::mem::take(&mut self.pending) {
            match p {
                Pending::Join(session, wanted_entity) => {
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
                    self.members.insert(
                        session,
                        Member {
                            entity,
                            pose,
                            last_input_seq: 0,
                            last_timestamp_s: None,
                            last_move_ms: self.now_ms,
                            inputs: VecDeque::new(),
                            encoder,
                            seen: Vec::new(),
                        },
                    );
                    out.push(Outbound::Joined {
                        session,
                        entity,
                        spawn,
                    });
                    self.tell_holders(session, out);
                }
                Pending::Leave(session) => {
                    if let Some(m) = self.members.remove(&session) {
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
                        out.push(Outbound::Left {
                            session,
                            entity: m.entity,
                        });
                    }
                }
            }
        }
    }

    fn apply_inputs(&mut self, out: &mut Vec<Outbound>) {
        let now_ms = self.now_ms;
        for (session, m) in self.members.iter_mut() {
            while let Some(input) = m.inputs.pop_front() {
                match input {
                    Input::Resync => m.encoder.request_keyframe(),
                    // Queued room-wide by `input`, never here.
                    Input::Interact { .. }
                    | Input::Consent { .. }
                    | Input::Emote { .. }
                    | Input::Scene { .. } => {}
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
                                m.pose = validate::sanitise(&mv.pose, outcome.position);
                                m.last_input_seq = mv.seq;
                                m.last_timestamp_s = Some(mv.timestamp_s);
                                m.last_move_ms = now_ms;
                                self.stats.moves_applied += 1;
                                if outcome.blocked {
                                    // Geometry stopped part of the move: the client must adopt
                                    // where it actually is.
                                    m.pose.velocity = [0.0; 3];
                                    correct(m, RejectReason::Blocked, out);
                                }
                            }
                            Err(rej) => {
                                let reason = RejectReason::from_physics(rej.reason);
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
    }

    /// Apply the room-wide queue of non-movement inputs, in arrival order.
    fn apply_actions(&mut self, out: &mut Vec<Outbound>) {
        self.action_counts.clear();
        while let Some((session, input)) = self.actions.pop_front() {
            match input {
                Input::Move(_) | Input::Resync => {}
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
                    let result = match self.members.get(&session) {
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
                    match self.emotes.apply(session, &request) {
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

    /// Start a broadcast period: every member gets one frame of the current state, at once or
    /// (from [`RoomConfig::spread_from_members`] members on) spread over this call and the
    /// simulation steps that follow it. Frames of the previous period that are still due go
    /// first.
    ///
    /// Performance: runs every broadcast.
    pub fn broadcast(&mut self, out: &mut Vec<Outbound>) {
        self.build_arena();
        let avatars = self.avatars();
        self.index = InterestIndex::build(
            self.arena[..avatars]
                .iter()
                .map(|r| (r.id, r.pose.position_m())),
            self.cfg.tier_bands_m,
        );
        if self.next_group < self.groups {
            let rest = self.next_group..self.groups;
            self.encode_frames(rest, out);
        }
        self.stats.broadcasts += 1;
        let spread = self.cfg.spread_from_members > 0
            && self.members.len() >= self.cfg.spread_from_members as usize;
        self.groups = if spread {
            (1 + self.cfg.tick_hz / self.cfg.broadcast_hz.max(1)).clamp(1, 16)
        } else {
            1
        };
        self.next_group = 1;
        self.encode_frames(0..1, out);
    }

    /// Avatars in the arena (they come first, props after them).
    fn avatars(&self) -> usize {
        self.arena.partition_point(|r| r.kind != PROP_KIND)
    }

    /// Quantize every avatar once (sorted by entity id), then every prop, into the arena; index
    /// the avatars' positions by id.
    fn build_arena(&mut self) {
        self.arena.clear();
        for m in self.members.values() {
            self.arena.push(EntityRecord {
                id: m.entity,
                generation: self.ids.generation(m.entity),
                kind: 0,
                pose: quantize(&m.pose),
            });
        }
        self.arena.sort_unstable_by_key(|r| r.id);
        let avatars = self.arena.len();
        // Props after the avatars: their ids are above every avatar's, so the arena stays
        // sorted. Every member sees every prop.
        for (prop_id, st) in self.physics.prop_states() {
            let Some(id) = prop_entity(prop_id) else {
                continue;
            };
            let pose = Pose {
                position: st.position,
                velocity: st.velocity,
                ..Pose::default()
            };
            self.arena.push(EntityRecord {
                id,
                generation: 0,
                kind: PROP_KIND,
                pose: quantize(&pose),
            });
        }
        // Arena index of each avatar id (ids are small and dense), `u32::MAX` for none, and
        // each avatar's position in metres (converted once).
        let max_id = self.arena[..avatars].last().map_or(0, |r| r.id as usize);
        self.slot.clear();
        self.slot.resize(max_id + 1, u32::MAX);
        self.pos_m.clear();
        for (i, r) in self.arena[..avatars].iter().enumerate() {
            self.slot[r.id as usize] = i as u32;
            self.pos_m.push(r.pose.position_m());
        }
    }

    /// Encode and emit one frame for each member whose group (entity id modulo the period's
    /// group count) is in `groups`, from the arena and the period's interest index, in session
    /// order. With [`RoomConfig::encode_threads`] above 1 and enough frames, the members are
    /// split into that many runs encoded on scoped threads; the frames and their order are the
    /// same either way.
    fn encode_frames(&mut self, groups: std::ops::Range<u32>, out: &mut Vec<Outbound>) {
        let k = self.groups.max(1);
        let ctx = EncodeCtx {
            arena: &self.arena,
            avatars: self.avatars(),
            index: &self.index,
            slot: &self.slot,
            pos_m: &self.pos_m,
            bands_sq: self.cfg.tier_bands_m.map(|b| b * b),
            cap: self.cfg.interest_cap as usize,
            tick: self.tick as u32,
            // Interest is recomputed every `REFRESH_EVERY`-th broadcast per member, staggered
            // by entity; in between a member keeps whom it saw (see `interest::REFRESH_EVERY`).
            phase: self.stats.broadcasts,
        };
        let mut jobs: Vec<(SessionId, &mut Member)> = self
            .members
            .iter_mut()
            .filter(|(_, m)| groups.contains(&(m.entity % k)))
            .map(|(s, m)| (*s, m))
            .collect();
        let threads = (self.cfg.encode_threads.max(1) as usize)
            .min(jobs.len() / PARALLEL_MIN_FRAMES)
            .max(1);
        let stats = &mut self.stats;
        if threads == 1 {
            let mut scratch = EncodeScratch {
                interest: std::mem::take(&mut self.interest),
                buf: std::mem::take(&mut self.frame_buf),
            };
            encode_run(&ctx, &mut jobs, &mut scratch, stats, out);
            self.interest = scratch.interest;
            self.frame_buf = scratch.buf;
            return;
        }
        let per = jobs.len().div_ceil(threads);
        let mut runs = jobs.chunks_mut(per);
        let first = runs.next().unwrap_or_default();
        let ctx = &ctx;
        let results: Vec<(Vec<Outbound>, RoomStats)> = std::thread::scope(|scope| {
            let handles: Vec<_> = runs
                .map(|run| {
                    scope.spawn(move || {
                        let mut scratch = EncodeScratch::default();
                        let mut stats = RoomStats::default();
                        let mut out = Vec::with_capacity(run.len());
                        encode_run(ctx, run, &mut scratch, &mut stats, &mut out);
                        (out, stats)
                    })
                })
                .collect();
            let mut scratch = EncodeScratch {
                interest: std::mem::take(&mut self.interest),
                buf: std::mem::take(&mut self.frame_buf),
            };
            encode_run(ctx, first, &mut scratch, stats, out);
            self.interest = scratch.interest;
            self.frame_buf = scratch.buf;
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        });
        for (frames, st) in results {
            out.extend(frames);
            stats.frames += st.frames;
            stats.frame_bytes += st.frame_bytes;
            stats.deferrals += st.deferrals;
            stats.keyframes += st.keyframes;
        }
    }
}

/// A pass of [`Room::encode_frames`] runs on threads only with at least this many frames per
/// thread (below it a thread costs more than it saves).
const PARALLEL_MIN_FRAMES: usize = 64;

/// What every member's frame of one encode pass reads (shared by the threads of a pass).
struct EncodeCtx<'a> {
    arena: &'a [EntityRecord],
    /// Avatars in the arena (props after them).
    avatars: usize,
    index: &'a InterestIndex,
    /// Arena index of each avatar id, `u32::MAX` for none.
    slot: &'a [u32],
    /// Each avatar's position in metres, by arena index.
    pos_m: &'a [[f32; 3]],
    bands_sq: [f32; 3],
    cap: usize,
    tick: u32,
    phase: u64,
}

/// Buffers one thread of an encode pass reuses from frame to frame.
#[derive(Default)]
struct EncodeScratch {
    interest: InterestSet,
    buf: Vec<u8>,
}

/// Encodes one frame for each of `jobs`, in order, appending them to `out` and counting them in
/// `stats`.
fn encode_run(
    ctx: &EncodeCtx<'_>,
    jobs: &mut [(SessionId, &mut Member)],
    scratch: &mut EncodeScratch,
    stats: &mut RoomStats,
    out: &mut Vec<Outbound>,
) {
    let EncodeCtx {
        arena,
        avatars,
        index,
        slot,
        pos_m,
        bands_sq,
        cap,
        tick,
        phase,
    } = *ctx;
    let slot_of = |id: u32| slot.get(id as usize).copied().filter(|s| *s != u32::MAX);
    let refresh_all = avatars <= cap + 1;
    let mut visible: Vec<Visible<'_>> = Vec::with_capacity(cap.min(arena.len()) + 8);
    for (session, m) in jobs.iter_mut() {
        let at = slot_of(m.entity).map_or(m.pose.position, |i| pos_m[i as usize]);
        if refresh_all
            || m.seen.is_empty()
            || (phase + u64::from(m.entity)).is_multiple_of(interest::REFRESH_EVERY)
        {
            index.nearest(m.entity, at, cap, &mut scratch.interest);
            m.seen.clear();
            m.seen.extend(scratch.interest.entries.iter().map(|e| e.0));
        }
        // Whom the member sees, minus those who left, with tiers from the current distance.
        visible.clear();
        m.seen.retain(|id| match slot_of(*id) {
            Some(i) => {
                let record = &arena[i as usize];
                let p = pos_m[i as usize];
                let (dx, dy, dz) = (p[0] - at[0], p[1] - at[1], p[2] - at[2]);
                let tier = index.tier_of(dx * dx + dy * dy + dz * dz);
                visible.push(Visible { record, tier });
                true
            }
            None => false,
        });
        for record in &arena[avatars..] {
            let p = record.pose.position_m();
            let d2 = (0..3).map(|k| (p[k] - at[k]) * (p[k] - at[k])).sum::<f32>();
            let tier = interest::tier_in(&bands_sq, d2);
            visible.push(Visible { record, tier });
        }
        let own = OwnState {
            entity: m.entity,
            pose: m.pose,
            last_input_seq: m.last_input_seq,
        };
        let buf = &mut scratch.buf;
        buf.clear();
        let st = m.encoder.encode(tick, Some(&own), &visible, buf);
        // One exact-size allocation per frame; `buf` keeps its capacity.
        let bytes = buf.clone();
        stats.frames += 1;
        stats.frame_bytes += bytes.len() as u64;
        stats.deferrals += u64::from(st.deferred);
        if st.keyframe {
            stats.keyframes += 1;
        }
        out.push(Outbound::Frame {
            session: *session,
            bytes,
            keyframe: st.keyframe,
        });
    }
}

/// Spawn points on a spiral around the room's spawn, so capsules never start inside each other.
fn spawn_point(center: [f32; 3], entity: u32) -> [f32; 3] {
    let k = entity as f32;
    let angle = k * 2.399_963; // golden angle
    let radius = 0.8 * k.sqrt();
    [
        center[0] + radius * angle.cos(),
        center[1],
        center[2] + radius * angle.sin(),
    ]
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

#[cfg(test)]
mod spread_tests {
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
        let mut room = room_with(40, cfg);
        let mut decoders = BTreeMap::new();
        // The shell's schedule: steps every 20 ms, broadcasts every 50 ms on their own grid, the
        // step first when both are due.
        let (mut steps, mut bcasts) = (1u64, 0u64);
        // Frames per session since the last broadcast call; the wake (0: the broadcast's own)
        // at which each session got its frame in the last complete period.
        let mut period: BTreeMap<SessionId, u32> = BTreeMap::new();
        let mut wake_in_period = 0u32;
        let mut phase_of: BTreeMap<SessionId, u32> = BTreeMap::new();
        let mut periods_checked = 0;
        while steps < 200 {
            let next_step = (steps + 1) * 20;
            let next_bcast = (bcasts + 1) * 50;
            let now = next_step.min(next_bcast);
            let mut out = Vec::new();
            let mut step_out = Vec::new();
            if next_step == now {
                steps += 1;
                moves(&mut room, steps);
                room.simulate(now, &mut step_out);
            }
            for (s, n) in deliver(&step_out, &mut decoders) {
                *period.entry(s).or_default() += n;
                if bcasts > 1 {
                    let phase = *phase_of.entry(s).or_insert(wake_in_period);
                    assert_eq!(phase, wake_in_period, "session {s} keeps its phase");
                }
            }
            if next_bcast == now {
                bcasts += 1;
                if bcasts > 1 {
                    // A complete period: one frame for every member, none left for the flush.
                    assert_eq!(period.len(), 40, "every member got a frame");
                    assert!(period.values().all(|n| *n == 1), "{period:?}");
                    periods_checked += 1;
                }
                period.clear();
                wake_in_period = 0;
                room.broadcast(&mut out);
                for (s, n) in deliver(&out, &mut decoders) {
                    *period.entry(s).or_default() += n;
                    if bcasts > 1 {
                        let phase = *phase_of.entry(s).or_insert(0);
                        assert_eq!(phase, 0, "session {s} keeps its phase");
                    }
                }
            }
            wake_in_period += 1;
        }
        assert!(periods_checked >= 70, "{periods_checked}");
        // The work is spread: every phase (the broadcast and the two steps after it) has members.
        let mut per_phase = [0; 3];
        for p in phase_of.values() {
            per_phase[*p as usize % 3] += 1;
        }
        assert!(per_phase.iter().all(|n| *n >= 10), "{per_phase:?}");
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
