//! What goes into a room ([`Input`], [`MoveInput`]) and what comes out of a step ([`Outbound`],
//! with [`RoomStats`]).

use std::collections::BTreeMap;

use plaza_proto::quant::Pose;

use crate::consent::ConsentOp;
use crate::emotes::EmoteRequest;
use crate::events::RoomEvent;
use crate::interactions::InteractionRequest;
use crate::scene::SceneOp;

/// A session's id, issued by the gateway; unique within the cluster.
pub type SessionId = u64;

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
/// the `in_reply_to` of [`crate::events::EventBody::Rejected`].
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
        /// For request: the kind's name ([`crate::consent::CONSENT_KINDS`]).
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
    /// Block or unblock another member (`plaza.v1.BlockAction`).
    Block {
        /// Client envelope sequence.
        seq: u32,
        /// The op; `None` for `BLOCK_OP_UNSPECIFIED` or an unknown value (refused).
        op: Option<crate::people::BlockOp>,
        /// The other member's avatar (used when `target_wallet` is empty).
        target_entity: u32,
        /// The other member's wallet (wins over `target_entity`).
        target_wallet: String,
    },
    /// Set the member's personal-space radius (`plaza.v1.PersonalSpace`).
    PersonalSpace {
        /// Client envelope sequence.
        seq: u32,
        /// Metres; 0 turns it off; capped at [`crate::people::MAX_PERSONAL_SPACE_M`].
        radius_m: f32,
    },
    /// Announce the member's profile (`plaza.v1.ProfileAnnouncement`).
    Profile {
        /// Client envelope sequence.
        seq: u32,
        /// Profile version (monotonic per wallet).
        version: u64,
        /// Display name.
        display_name: String,
    },
    /// The member's avatar expression (`plaza.v1.Expression`); applied at once (the latest
    /// wins), validated by [`crate::expressions::Expression::from_wire`].
    Expression {
        /// Expression id (0: neutral).
        expression_id: u32,
        /// Intensity, basis points (clamped to 10,000, quantized to 100).
        intensity_bp: u32,
    },
    /// Ask to be moved to a named destination (`plaza.v1.TeleportRequest`): a spawn point of
    /// the room definition with `requestable` set.
    Teleport {
        /// Client envelope sequence.
        seq: u32,
        /// The destination's name.
        destination: String,
    },
}

/// Why a movement was rejected: the physics authority's reasons, one definition for physics,
/// the room and (through the shell's wire mapping) `plaza.v1.RejectReason`.
/// [`RejectReason::UnknownEntity`] is a room bug here: the room validates only its members'
/// avatars (the client is corrected to its last known pose).
pub use plaza_physics::RejectReason;

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
    /// An expression message (`plaza.v1.ExpressionFrame`) for one session: the expressions of
    /// avatars in its frames that changed since the last one (`full`: replace everything held).
    Expressions {
        /// For whom.
        session: SessionId,
        /// The room tick.
        tick: u64,
        /// Replace everything the client holds.
        full: bool,
        /// `(entity, expression)` in entity order.
        states: Vec<(u32, crate::expressions::Expression)>,
    },
    /// A member announced a higher profile version: record it in the directory
    /// (`announce_profile`, source ROOM).
    ProfileAnnounced {
        /// Who.
        session: SessionId,
        /// The new version.
        version: u64,
    },
    /// A consent audit record to append durably before delivering the events that follow.
    Audit {
        /// This room instance's audit counter (1, 2, ...; restored by [`crate::Room::restore`]): a
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
    /// Requests refused (interactions, consent, emotes, scenes), by [`crate::events::Refusal`] code.
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
    /// Server-made teleports (requests, portals, operators).
    pub teleports: u64,
    /// Profile announcements that superseded (a higher version).
    pub profiles_superseded: u64,
    /// Profile announcements merged (the same version).
    pub profiles_merged: u64,
    /// Profile announcements dropped (a lower version).
    pub profiles_stale: u64,
    /// Roster updates sent.
    pub roster_updates: u64,
    /// Blocks and unblocks that changed something.
    pub block_changes: u64,
    /// Expressions received from members.
    pub expressions: u64,
    /// Expression messages sent.
    pub expression_messages: u64,
    /// Expression states sent (all messages).
    pub expression_states: u64,
}
