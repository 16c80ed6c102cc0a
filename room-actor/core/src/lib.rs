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
//! * this module: [`RoomConfig`], [`Room`], its inputs ([`Input`]) and outputs ([`Outbound`]).
//!
//! Joins, leaves and inputs are queued and applied at the next tick, in arrival order.

pub mod ids;
pub mod interest;

use std::collections::{BTreeMap, VecDeque};

use plaza_physics::{MoveClaim, PhysicsConfig, RoomDefinition, RoomPhysics};
use plaza_proto::frame::{EncoderConfig, EntityRecord, FrameEncoder, OwnState, Visible};
use plaza_proto::quant::{Pose, quantize};

use crate::ids::EntityIds;
use crate::interest::{DEFAULT_TIER_BANDS_M, InterestIndex, InterestSet};

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
    /// The room's static geometry, bounds, spawn point and props.
    pub definition: RoomDefinition,
    /// Physics and movement-validation parameters.
    pub physics: PhysicsConfig,
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
            definition: RoomDefinition::default_plaza(),
            physics: PhysicsConfig::default(),
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
}

/// Inputs a member sends between ticks.
#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    /// A movement.
    Move(MoveInput),
    /// The client lost its chain or failed a check: send a keyframe.
    Resync,
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
}

impl RejectReason {
    /// All reasons, in metric-label order.
    pub const ALL: [Self; 7] = [
        Self::Speed,
        Self::NonFinite,
        Self::NonPositiveDt,
        Self::OutOfBounds,
        Self::Teleport,
        Self::Blocked,
        Self::Clock,
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
            // The room only validates moves of its members' avatars; an unknown one is a room
            // bug, reported as the closest client-visible reason.
            _ => Self::OutOfBounds,
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

/// What a step asks the shell to deliver.
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
    pub moves_rejected: [u64; 7],
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
}

/// One member of the room.
#[derive(Debug)]
struct Member {
    entity: u32,
    pose: Pose,
    last_input_seq: u32,
    /// Client timestamp of the last applied move, for its time step.
    last_timestamp_s: Option<f64>,
    inputs: VecDeque<Input>,
    encoder: FrameEncoder,
}

#[derive(Debug)]
enum Pending {
    Join(SessionId),
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
        Self {
            id: id.into(),
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

    /// Queue a join; applied at the next tick.
    pub fn join(&mut self, session: SessionId) {
        self.pending.push(Pending::Join(session));
    }

    /// Queue a leave; applied at the next tick.
    pub fn leave(&mut self, session: SessionId) {
        self.pending.push(Pending::Leave(session));
    }

    /// Queue an input from a member; applied at the next tick. Inputs from non-members are
    /// dropped (the shell only forwards inputs of attached sessions, so this is a race with a
    /// leave, not an error).
    pub fn input(&mut self, session: SessionId, input: Input) {
        let cap = self.cfg.max_pending_inputs;
        if let Some(m) = self.members.get_mut(&session) {
            if m.inputs.len() >= cap {
                m.inputs.pop_front();
                self.stats.inputs_dropped += 1;
            }
            m.inputs.push_back(input);
        } else if self
            .pending
            .iter()
            .any(|p| matches!(p, Pending::Join(s) if *s == session))
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
        self.physics.step();
    }

    fn apply_pending(&mut self, out: &mut Vec<Outbound>) {
        for p in std::mem::take(&mut self.pending) {
            match p {
                Pending::Join(session) => {
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
                    let (entity, _generation) = self.ids.allocate();
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
                            inputs: VecDeque::new(),
                            encoder,
                        },
                    );
                    out.push(Outbound::Joined {
                        session,
                        entity,
                        spawn,
                    });
                }
                Pending::Leave(session) => {
                    if let Some(m) = self.members.remove(&session) {
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
                    Input::Move(mv) => {
                        let dt_s = match m.last_timestamp_s {
                            Some(prev) => (mv.timestamp_s - prev) as f32,
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
                                m.pose = mv.pose;
                                m.pose.position = outcome.position;
                                m.last_input_seq = mv.seq;
                                m.last_timestamp_s = Some(mv.timestamp_s);
                                self.stats.moves_applied += 1;
                                if outcome.blocked {
                                    // Geometry stopped part of the move: the client must adopt
                                    // where it actually is.
                                    m.pose.velocity = [0.0; 3];
                                    out.push(Outbound::Correction {
                                        session: *session,
                                        reason: RejectReason::Blocked,
                                        pose: m.pose,
                                        last_input_seq: m.last_input_seq,
                                    });
                                }
                            }
                            Err(rej) => {
                                let reason = RejectReason::from_physics(rej.reason);
                                let i = RejectReason::ALL
                                    .iter()
                                    .position(|r| *r == reason)
                                    .unwrap_or(0);
                                self.stats.moves_rejected[i] += 1;
                                m.pose.position = rej.authoritative;
                                m.pose.velocity = [0.0; 3];
                                // A rejected move still advances the client's clock when its
                                // time is sane, so one bad step does not poison the next.
                                if mv.timestamp_s.is_finite()
                                    && m.last_timestamp_s.is_none_or(|p| mv.timestamp_s > p)
                                {
                                    m.last_timestamp_s = Some(mv.timestamp_s);
                                }
                                out.push(Outbound::Correction {
                                    session: *session,
                                    reason,
                                    pose: m.pose,
                                    last_input_seq: m.last_input_seq,
                                });
                            }
                        }
                    }
                }
            }
        }
    }

    /// Encode and emit one frame per member from the current state.
    ///
    /// Performance: runs every broadcast.
    pub fn broadcast(&mut self, out: &mut Vec<Outbound>) {
        self.stats.broadcasts += 1;
        // Quantize every avatar once (the arena), sorted by entity id.
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
        let index = InterestIndex::build(
            self.arena.iter().map(|r| (r.id, r.pose.position_m())),
            self.cfg.tier_bands_m,
        );
        let cap = self.cfg.interest_cap as usize;
        let tick = self.tick as u32;
        let mut visible: Vec<Visible<'_>> = Vec::with_capacity(cap.min(self.arena.len()));
        for (session, m) in self.members.iter_mut() {
            let at = quantized_position(&self.arena, m.entity).unwrap_or(m.pose.position);
            index.nearest(m.entity, at, cap, &mut self.interest);
            visible.clear();
            for (id, tier) in &self.interest.entries {
                if let Ok(i) = self.arena.binary_search_by_key(id, |r| r.id) {
                    visible.push(Visible {
                        record: &self.arena[i],
                        tier: *tier,
                    });
                }
            }
            let own = OwnState {
                entity: m.entity,
                pose: m.pose,
                last_input_seq: m.last_input_seq,
            };
            let mut bytes = Vec::new();
            let st = m.encoder.encode(tick, Some(&own), &visible, &mut bytes);
            self.stats.frames += 1;
            self.stats.frame_bytes += bytes.len() as u64;
            self.stats.deferrals += u64::from(st.deferred);
            if st.keyframe {
                self.stats.keyframes += 1;
            }
            out.push(Outbound::Frame {
                session: *session,
                bytes,
                keyframe: st.keyframe,
            });
        }
    }
}

fn quantized_position(arena: &[EntityRecord], id: u32) -> Option<[f32; 3]> {
    arena
        .binary_search_by_key(&id, |r| r.id)
        .ok()
        .map(|i| arena[i].pose.position_m())
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
mod tests;
