//! The connection's settings, states, events, errors and counters.

use plaza_proto::frame::{EntityRecord, FrameError, OwnState};
use plaza_proto::pb;

/// Settings of a connection.
#[derive(Clone, Debug)]
pub struct ConnectionConfig {
    /// `Negotiate.auth_token` (empty: a guest identity in dev mode; `guest:<name>`).
    pub auth_token: String,
    /// `Negotiate.client_name` (for the server's logs).
    pub client_name: String,
    /// Protocol versions spoken.
    pub versions: Vec<pb::ProtocolVersion>,
    /// The room joined right after `Negotiated` (and after a resume that did not bring the
    /// session back into it). `None`: the caller calls [`Connection::join`](super::Connection::join).
    pub room: Option<String>,
    /// A second `Resync` goes only when no keyframe came this long after the first, seconds.
    pub resync_retry_s: f64,
    /// A `Ping` goes every this many seconds while negotiated (0: never).
    pub ping_interval_s: f64,
    /// Whether [`Connection::roster`](super::Connection::roster) keeps who each avatar is (default true). A caller that
    /// only counts the `Roster` events (the load tool's thousands of bots) saves the memory.
    pub keep_roster: bool,
    /// Whether frames queue one [`Event::EntityEntered`] / [`Event::EntityUpdated`] /
    /// [`Event::EntityLeft`] per entity (default true: the replica directory is built on
    /// them). A caller that reads each frame itself after its [`Event::Frame`]
    /// ([`Connection::last_frame`](super::Connection::last_frame) for the ids changed and removed, [`Connection::decoder`](super::Connection::decoder) for
    /// the records: the load tool's thousands of bots) saves the events, their queue and the
    /// index of reported entities they are diffed against. Read at every frame; switched on
    /// mid-stream, entities already held are reported entered with the next frame that
    /// changes them.
    pub entity_events: bool,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        Self {
            auth_token: String::new(),
            client_name: "plaza-client".into(),
            versions: vec![pb::ProtocolVersion { major: 1, minor: 0 }],
            room: None,
            resync_retry_s: 2.0,
            ping_interval_s: 5.0,
            keep_roster: true,
            entity_events: true,
        }
    }
}

/// Where the session is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// No transport (before [`Connection::connected`](super::Connection::connected), or after a close).
    Disconnected,
    /// `Negotiate` sent, waiting for `Negotiated`.
    Negotiating,
    /// Negotiated, not in a room.
    Ready,
    /// `Join` sent, waiting for `Joined`.
    Joining,
    /// In a room.
    Joined,
    /// The room is moving between nodes (`RoomStatus MOVING`); the session lives on.
    Moving,
    /// `Leave` sent, waiting for `Left`.
    Leaving,
}

/// The room the session is in (`Joined`).
#[derive(Clone, Debug, PartialEq)]
pub struct RoomInfo {
    /// Room id.
    pub room_id: String,
    /// This client's avatar.
    pub entity: u32,
    /// Simulation rate.
    pub tick_hz: u32,
    /// Frames per second.
    pub broadcast_hz: u32,
    /// Spawn position, metres.
    pub spawn: [f32; 3],
    /// Spawn yaw, degrees.
    pub spawn_yaw_deg: f32,
    /// What the room is (bounds, destinations, limits), when the server sent it.
    pub description: Option<pb::RoomDescription>,
}

/// How a transport close is to be taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseKind {
    /// The client or the server ended the session on purpose (1000): do not reconnect.
    Normal,
    /// Reconnect with the resume token (server going away, abrupt loss, room unavailable,
    /// internal error, slow consumer, handshake timeout).
    Resume,
    /// Reconnect later as a new session, with a longer backoff (room full).
    RetryLater,
    /// Do not reconnect: the client is at fault or was refused for good (bad frame, auth,
    /// version, rate limit, too large, kicked).
    Terminal,
}

impl CloseKind {
    /// How to take close code `code` (`None`: the transport ended without a close frame).
    pub fn of(code: Option<u16>) -> Self {
        match code {
            None => Self::Resume,
            Some(1000) => Self::Normal,
            Some(1001 | 1006 | 1011 | 1012 | 1013 | 4000 | 4006 | 4008 | 4009) => Self::Resume,
            Some(4005) => Self::RetryLater,
            Some(1009 | 4001 | 4002 | 4003 | 4004 | 4010) => Self::Terminal,
            // An unknown code: a later server's; retrying is the safe side.
            Some(_) => Self::Resume,
        }
    }

    /// Whether reconnecting may succeed.
    pub fn retryable(self) -> bool {
        matches!(self, Self::Resume | Self::RetryLater)
    }
}

/// An `Error` envelope from the server.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerError {
    /// The error code.
    pub code: pb::ErrorCode,
    /// The server's message.
    pub message: String,
    /// Whether retrying later may succeed (the server's flag).
    pub retryable: bool,
    /// The client sequence it answers (0: none).
    pub in_reply_to: u32,
}

/// What kind of failure a frame had (`plaza_proto::frame::FrameError` without its numbers,
/// `Copy`, for counting by kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameErrorKind {
    /// The frame ended early.
    Truncated,
    /// The frame's base is not the last frame applied.
    ChainBreak,
    /// The held state does not hash to the frame's check.
    CheckMismatch,
    /// The frame breaks the format (what is wrong).
    Malformed(&'static str),
    /// The frame or a count in it exceeds the limits.
    TooLarge,
}

impl FrameErrorKind {
    /// The kind of `e`.
    pub fn of(e: &FrameError) -> Self {
        match e {
            FrameError::Truncated => Self::Truncated,
            FrameError::ChainBreak { .. } => Self::ChainBreak,
            FrameError::CheckMismatch { .. } => Self::CheckMismatch,
            FrameError::Malformed(what) => Self::Malformed(what),
            FrameError::TooLarge => Self::TooLarge,
        }
    }

    /// Whether the frame was well formed but did not fit the held state (a chain break or a
    /// check mismatch), as opposed to bytes that do not decode.
    pub fn is_check_failure(self) -> bool {
        matches!(self, Self::ChainBreak | Self::CheckMismatch)
    }
}

/// Why a frame was not applied (a resync went or is pending).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameFailure {
    /// The decoder's error, as text.
    pub error: String,
    /// The decoder's error, as a kind.
    pub kind: FrameErrorKind,
    /// The resync reason it maps to (chain break, check mismatch, decode error).
    pub reason: pb::ResyncReason,
    /// Whether a `Resync` was sent for it (only the first failure until the keyframe sends one).
    pub resync_sent: bool,
}

/// An entity record as a frame left it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntityChange {
    /// The record (id, generation, kind, exact quantized pose).
    pub record: EntityRecord,
    /// The tick its pose (position, velocity, yaw) was measured at.
    pub pose_tick: u32,
    /// Its tier for this client (0 near .. 3 far).
    pub tier: u8,
    /// Whether the frame was a keyframe.
    pub keyframe: bool,
}

impl EntityChange {
    /// Entity id.
    pub fn entity(&self) -> u32 {
        self.record.id
    }
}

/// What happened, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// `Negotiated`: the session is open. `resumed`: the server took the old session back.
    Negotiated {
        /// Session id (u64, exact).
        session_id: u64,
        /// Identity.
        wallet: String,
        /// Whether the resume token took the old session back.
        resumed: bool,
    },
    /// `Joined` (a join, a resume into the room, or a new activation of the room). Boxed: the
    /// room description is large and rare, and every queued event pays for the largest variant.
    Joined(Box<RoomInfo>),
    /// `Left`: the session left its room (it may join again).
    Left {
        /// The room left.
        room_id: String,
    },
    /// A snapshot frame was applied (after its entered / updated / left events).
    Frame {
        /// Frame sequence.
        seq: u32,
        /// The sequence of the frame it applied onto (a keyframe's is its own business).
        base_seq: u32,
        /// Room tick the frame describes.
        tick: u32,
        /// Whether it was a keyframe (everything held before was forgotten).
        keyframe: bool,
    },
    /// A frame failed to apply.
    FrameFailed(FrameFailure),
    /// An entity (avatar or prop) entered this client's view.
    EntityEntered(EntityChange),
    /// An entity's record changed.
    EntityUpdated(EntityChange),
    /// An entity left this client's view (or its id was reused: left then entered).
    EntityLeft {
        /// Entity id.
        entity: u32,
    },
    /// The own state of the frame (the server's exact pose of this avatar and the last input
    /// it applied).
    Own(OwnState),
    /// Who avatars are: `full` replaced everything held.
    Roster(pb::RosterUpdate),
    /// A prop changed.
    Prop(pb::PropEvent),
    /// A consent transition.
    Consent(pb::ConsentEvent),
    /// An emote.
    Emote(pb::EmoteEvent),
    /// Expressions of visible avatars.
    Expressions(pb::ExpressionFrame),
    /// A lockstep scene tick.
    SceneTick(pb::SceneTick),
    /// A lockstep scene's state for a late joiner. Boxed: rare and the largest payload, and
    /// every queued event pays for the largest variant.
    SceneSync(Box<pb::SceneSync>),
    /// A lockstep scene membership event.
    SceneClient(pb::SceneClientEvent),
    /// The server moved an avatar (this one or another): snap.
    Teleported(pb::Teleported),
    /// A block or unblock took effect.
    Block(pb::BlockEvent),
    /// A request was refused.
    Rejected(pb::RequestRejected),
    /// The answer to an `OperatorAction` this client sent (moderators; see
    /// docs/PROTOCOL.md "Operator messages").
    OperatorResult(pb::OperatorResult),
    /// A move was refused or adjusted: adopt the pose.
    Correction(pb::Correction),
    /// The room is moving between nodes; the session stays open.
    RoomMoving {
        /// Room id.
        room_id: String,
    },
    /// The room answers again.
    RoomBack {
        /// Room id.
        room_id: String,
    },
    /// The gateway is going away: reconnect with the resume token after this delay.
    ReconnectAdvised {
        /// Seconds.
        after_s: f64,
    },
    /// A `Pong`: round trip of the ping, seconds.
    Pong {
        /// Round-trip time, seconds.
        rtt_s: f64,
    },
    /// An `Error` envelope.
    Error(ServerError),
    /// The transport closed.
    Closed {
        /// The close code (None: no close frame).
        code: Option<u16>,
        /// How to take it.
        kind: CloseKind,
        /// The last `Error` the server sent before closing, if any.
        error: Option<ServerError>,
    },
}

/// Why an input was not taken.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InputError {
    /// The bytes are not a `ServerEnvelope`.
    #[error("bad server envelope: {0}")]
    Decode(String),
    /// A message arrived with no transport open.
    #[error("not connected")]
    NotConnected,
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnectionStats {
    /// Envelopes received.
    pub envelopes: u64,
    /// `SnapshotFrame` envelopes received (applied, failed or dropped while a keyframe was
    /// awaited).
    pub frames_received: u64,
    /// Frames applied.
    pub frames: u64,
    /// Keyframes applied.
    pub keyframes: u64,
    /// Chain breaks (not counting those while a keyframe was awaited).
    pub chain_breaks: u64,
    /// Check mismatches.
    pub check_mismatches: u64,
    /// Other decode errors (malformed, truncated, too large).
    pub decode_errors: u64,
    /// Frames dropped while waiting for a keyframe.
    pub dropped_awaiting_keyframe: u64,
    /// Resyncs sent.
    pub resyncs: u64,
    /// Envelopes that did not decode.
    pub bad_envelopes: u64,
    /// Events dropped because the queue was full.
    pub events_dropped: u64,
    /// Sessions the server took back with the resume token.
    pub resumes: u64,
    /// Connections (transports) opened.
    pub connects: u64,
}
