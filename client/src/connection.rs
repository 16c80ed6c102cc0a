//! The sans-I/O connection: negotiate, join, leave, frames, events, resync, resume.
//!
//! A [`Connection`] is one Plaza session seen from the client, in the quinn style: the caller
//! owns the transport (a WebSocket carrying one binary message per envelope) and the clock, and
//! drives the state machine with
//!
//! * [`Connection::connected`] when the transport is open (queues `Negotiate`, with the resume
//!   token of the last session if there is one),
//! * [`Connection::handle_input`] with each binary message received and the local time,
//! * [`Connection::handle_close`] when the transport closed (with the close code, if any),
//! * [`Connection::handle_timeout`] when [`Connection::poll_timeout`] says so,
//!
//! and drains [`Connection::poll_transmit`] (messages to send, in order) and
//! [`Connection::poll_event`] (typed [`Event`]s). Times are seconds of the caller's monotonic
//! clock (`f64`, the same clock [`crate::Smoother`] and [`crate::ReplicaDirectory`] take).
//!
//! What the connection holds is exact: `session_id` and every u64 of the protocol stay `u64`,
//! frame records stay the quantized integers of `plaza_proto::frame::FrameDecoder`.
//!
//! Bounded memory: one decoder (at most 65,536 entities, the protocol's limit), a roster of the
//! avatars the server lists (capped at the same number), and event and transmit queues capped at
//! [`MAX_QUEUED`] (the oldest event is dropped and counted when a caller stops polling).

use std::collections::{BTreeMap, VecDeque};

use plaza_proto::frame::{
    DecodedFrame, EntityRecord, FrameDecoder, FrameError, MAX_ENTITIES, OwnState,
};
use plaza_proto::pb::{
    self, ClientEnvelope, client_envelope::Body as CBody, event::Kind as EventKind,
    server_envelope::Body as SBody,
};
use prost::Message as _;
use prost::bytes::Bytes;

/// Most events (and transmits) queued before the oldest is dropped.
pub const MAX_QUEUED: usize = 4096;

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
    /// session back into it). `None`: the caller calls [`Connection::join`].
    pub room: Option<String>,
    /// A second `Resync` goes only when no keyframe came this long after the first, seconds.
    pub resync_retry_s: f64,
    /// A `Ping` goes every this many seconds while negotiated (0: never).
    pub ping_interval_s: f64,
    /// Whether [`Connection::roster`] keeps who each avatar is (default true). A caller that
    /// only counts the `Roster` events (the load tool's thousands of bots) saves the memory.
    pub keep_roster: bool,
    /// Whether frames queue one [`Event::EntityEntered`] / [`Event::EntityUpdated`] /
    /// [`Event::EntityLeft`] per entity (default true: the replica directory is built on
    /// them). A caller that reads each frame itself after its [`Event::Frame`]
    /// ([`Connection::last_frame`] for the ids changed and removed, [`Connection::decoder`] for
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
    /// No transport (before [`Connection::connected`], or after a close).
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

/// An entity reported entered and not yet left (what entity events are diffed against).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Reported {
    id: u32,
    generation: u16,
    kind: u8,
}

impl Reported {
    fn of(r: &EntityRecord) -> Self {
        Self {
            id: r.id,
            generation: r.generation,
            kind: r.kind,
        }
    }
}

/// One Plaza session, sans I/O.
#[derive(Debug)]
pub struct Connection {
    cfg: ConnectionConfig,
    state: State,
    session_id: u64,
    wallet: String,
    resume_token: String,
    /// The token presented with the current negotiate (to tell a resume from a new session).
    presented: String,
    seq: u32,
    decoder: FrameDecoder,
    /// The entities reported entered and not yet left, ascending by id: after each frame the
    /// decoder's held set while entity events are on (empty while they are off).
    held: Vec<Reported>,
    /// A keyframe's diff is built here (kept: no allocation per keyframe).
    held_scratch: Vec<Reported>,
    /// What the last frame applied changed and removed (see [`Connection::last_frame`]).
    last_frame: Option<DecodedFrame>,
    room: Option<RoomInfo>,
    want_room: Option<String>,
    awaiting_keyframe: bool,
    resync_sent_at: Option<f64>,
    roster: BTreeMap<u32, pb::RosterEntry>,
    pings: VecDeque<(u64, f64)>,
    next_ping: f64,
    last_error: Option<ServerError>,
    events: VecDeque<Event>,
    transmits: VecDeque<Vec<u8>>,
    stats: ConnectionStats,
    wall_ms: u64,
    /// Packs [`Connection::send_movement_compressed`]'s moves (the last sent one picks the
    /// next one's velocity tier).
    compressed: plaza_proto::compressed::CompressedSender,
}

impl Connection {
    /// A disconnected connection.
    pub fn new(cfg: ConnectionConfig) -> Self {
        let want_room = cfg.room.clone();
        Self {
            cfg,
            state: State::Disconnected,
            session_id: 0,
            wallet: String::new(),
            resume_token: String::new(),
            presented: String::new(),
            seq: 0,
            decoder: FrameDecoder::new(),
            held: Vec::new(),
            held_scratch: Vec::new(),
            last_frame: None,
            room: None,
            want_room,
            awaiting_keyframe: true,
            resync_sent_at: None,
            roster: BTreeMap::new(),
            pings: VecDeque::new(),
            next_ping: 0.0,
            last_error: None,
            events: VecDeque::new(),
            transmits: VecDeque::new(),
            stats: ConnectionStats::default(),
            wall_ms: 0,
            compressed: plaza_proto::compressed::CompressedSender::new(),
        }
    }

    // === Accessors ===

    /// Where the session is.
    pub fn state(&self) -> State {
        self.state
    }

    /// The session id (0 before `Negotiated`).
    pub fn session_id(&self) -> u64 {
        self.session_id
    }

    /// The identity.
    pub fn wallet(&self) -> &str {
        &self.wallet
    }

    /// The token a reconnect presents (empty: none).
    pub fn resume_token(&self) -> &str {
        &self.resume_token
    }

    /// The room the session is in.
    pub fn room(&self) -> Option<&RoomInfo> {
        self.room.as_ref()
    }

    /// This client's avatar in the room.
    pub fn entity(&self) -> Option<u32> {
        self.room.as_ref().map(|r| r.entity)
    }

    /// What the frames say the client holds.
    pub fn decoder(&self) -> &FrameDecoder {
        &self.decoder
    }

    /// The last frame applied: its sequence, tick, keyframe flag and the ids it changed (or
    /// brought) and removed, ascending. Set before its [`Event::Frame`] is queued and kept until
    /// the next frame applies (None before the first, and after the room's frames are
    /// forgotten). With [`ConnectionConfig::entity_events`] off this and [`Connection::decoder`]
    /// are how a caller learns what a frame did.
    pub fn last_frame(&self) -> Option<&DecodedFrame> {
        self.last_frame.as_ref()
    }

    /// The roster: who the avatars are, by entity.
    pub fn roster(&self) -> &BTreeMap<u32, pb::RosterEntry> {
        &self.roster
    }

    /// Counters.
    pub fn stats(&self) -> &ConnectionStats {
        &self.stats
    }

    /// Whether frames are being dropped until a keyframe comes.
    pub fn awaiting_keyframe(&self) -> bool {
        self.awaiting_keyframe
    }

    /// The last client sequence sent.
    pub fn last_sequence(&self) -> u32 {
        self.seq
    }

    /// Sets the wall clock written into `sent_at_ms` of the next envelopes (milliseconds since
    /// the Unix epoch; 0 when the caller has none). The server does not interpret it.
    pub fn set_wall_clock_ms(&mut self, ms: u64) {
        self.wall_ms = ms;
    }

    /// The token the next [`Connection::connected`] presents (a session resumed from another
    /// process or connection; empty: none). The session id stays unknown until `Negotiated`.
    pub fn set_resume_token(&mut self, token: impl Into<String>) {
        self.resume_token = token.into();
    }

    /// The settings (read at the next [`Connection::connected`]: versions, auth, name).
    pub fn config(&self) -> &ConnectionConfig {
        &self.cfg
    }

    /// The settings, to change them before the next [`Connection::connected`] (versions,
    /// auth token, name, resync retry, ping interval).
    pub fn config_mut(&mut self) -> &mut ConnectionConfig {
        &mut self.cfg
    }

    /// The frame decoder, mutable (tests that corrupt the held state on purpose to see the
    /// check fail and a keyframe heal it).
    pub fn decoder_mut(&mut self) -> &mut FrameDecoder {
        &mut self.decoder
    }

    /// Forget the resume token (the next connect starts a new session).
    pub fn forget_session(&mut self) {
        self.resume_token.clear();
        self.session_id = 0;
    }

    // === Driving ===

    /// The transport is open: queues `Negotiate` (presenting the resume token, if any).
    pub fn connected(&mut self, now: f64) {
        self.decoder.reset();
        self.last_frame = None;
        self.awaiting_keyframe = true;
        self.resync_sent_at = None;
        self.pings.clear();
        self.last_error = None;
        self.state = State::Negotiating;
        self.stats.connects += 1;
        self.presented = self.resume_token.clone();
        self.next_ping = now + self.cfg.ping_interval_s;
        // The envelope before `Negotiated` carries session id 0.
        let sid = self.session_id;
        self.session_id = 0;
        self.push_body(CBody::Negotiate(pb::Negotiate {
            versions: self.cfg.versions.clone(),
            auth_token: self.cfg.auth_token.clone(),
            resume_token: self.presented.clone(),
            client_name: self.cfg.client_name.clone(),
        }));
        self.session_id = sid;
    }

    /// The transport closed with `code` (None: without a close frame). Forgets the room's
    /// frames (the next connection starts from a keyframe) and reports [`Event::Closed`].
    pub fn handle_close(&mut self, code: Option<u16>) {
        if self.state == State::Disconnected {
            return;
        }
        let mut kind = CloseKind::of(code);
        // A resume token the gateway no longer knows: come back as a new session.
        if code == Some(4003) && !self.presented.is_empty() {
            self.forget_session();
            kind = CloseKind::RetryLater;
        }
        if kind == CloseKind::Terminal || kind == CloseKind::Normal {
            self.resume_token.clear();
        }
        if kind == CloseKind::RetryLater {
            self.forget_session();
        }
        if kind.retryable() {
            // The session comes back (resume) or the room is joined again: what was held stays
            // until the next keyframe says what is still there (replicas keep their bindings).
            self.decoder.reset();
            self.last_frame = None;
            self.awaiting_keyframe = true;
            self.resync_sent_at = None;
            self.pings.clear();
            self.last_error = None;
        } else {
            self.reset_transport();
            self.clear_room();
        }
        self.state = State::Disconnected;
        self.transmits.clear();
        let error = self.last_error.take();
        self.push_event(Event::Closed { code, kind, error });
    }

    /// One binary message from the server, received at `now`.
    pub fn handle_input(&mut self, bytes: &[u8], now: f64) -> Result<(), InputError> {
        if self.state == State::Disconnected {
            return Err(InputError::NotConnected);
        }
        let env = match pb::ServerEnvelope::decode(bytes) {
            Ok(e) => e,
            Err(e) => {
                self.stats.bad_envelopes += 1;
                return Err(InputError::Decode(e.to_string()));
            }
        };
        self.handle_envelope(env, now)
    }

    /// [`Connection::handle_input`] with the message's own buffer (what a WebSocket library
    /// hands over): the frame bytes inside the envelope are not copied out of it.
    pub fn handle_input_bytes(&mut self, bytes: Bytes, now: f64) -> Result<(), InputError> {
        if self.state == State::Disconnected {
            return Err(InputError::NotConnected);
        }
        let env = match pb::ServerEnvelope::decode(bytes) {
            Ok(e) => e,
            Err(e) => {
                self.stats.bad_envelopes += 1;
                return Err(InputError::Decode(e.to_string()));
            }
        };
        self.handle_envelope(env, now)
    }

    /// One server envelope already decoded by the caller (a harness that also keeps the raw
    /// bodies), received at `now`. [`Connection::handle_input`] is this after the decode.
    pub fn handle_envelope(&mut self, env: pb::ServerEnvelope, now: f64) -> Result<(), InputError> {
        if self.state == State::Disconnected {
            return Err(InputError::NotConnected);
        }
        self.stats.envelopes += 1;
        let Some(body) = env.body else {
            return Ok(());
        };
        match body {
            SBody::Negotiated(n) => {
                let resumed = !self.presented.is_empty() && n.session_id == self.session_id;
                if resumed {
                    self.stats.resumes += 1;
                }
                self.session_id = n.session_id;
                self.wallet = n.wallet.clone();
                self.resume_token = n.resume_token;
                self.state = State::Ready;
                self.push_event(Event::Negotiated {
                    session_id: n.session_id,
                    wallet: n.wallet,
                    resumed,
                });
                // A resumed session in a room gets `Joined` from the gateway; otherwise join.
                if !resumed || self.room.is_none() {
                    if self.room.is_some() {
                        // A new session: the old one's room state is gone.
                        self.clear_room();
                    }
                    if let Some(r) = self.want_room.clone() {
                        self.send_join(&r);
                    }
                } else {
                    self.state = State::Joining;
                }
            }
            SBody::Joined(j) => {
                let p = j.position.unwrap_or_default();
                let info = RoomInfo {
                    room_id: j.room_id.clone(),
                    entity: j.entity_id,
                    tick_hz: j.tick_hz,
                    broadcast_hz: j.broadcast_hz,
                    spawn: [p.x, p.y, p.z],
                    spawn_yaw_deg: j.rotation_y,
                    description: j.room,
                };
                if self.room.as_ref().is_some_and(|r| r.room_id != j.room_id) {
                    // A room transfer: nothing of the old room stays.
                    self.clear_room();
                }
                self.want_room = Some(j.room_id);
                self.room = Some(info.clone());
                self.state = State::Joined;
                // A new stream: its first frame is a keyframe.
                self.decoder.reset();
                self.last_frame = None;
                self.awaiting_keyframe = true;
                self.resync_sent_at = None;
                self.push_event(Event::Joined(Box::new(info)));
            }
            SBody::SnapshotFrame(f) => {
                self.stats.frames_received += 1;
                self.frame(&f.frame, now);
            }
            SBody::Error(e) => {
                let se = ServerError {
                    code: pb::ErrorCode::try_from(e.code).unwrap_or(pb::ErrorCode::Unspecified),
                    message: e.message,
                    retryable: e.retryable,
                    in_reply_to: e.in_reply_to,
                };
                if self.state == State::Joining && se.code != pb::ErrorCode::RoomUnavailable {
                    self.state = State::Ready;
                }
                self.last_error = Some(se.clone());
                self.push_event(Event::Error(se));
            }
            SBody::Pong(p) => {
                while let Some(&(t, at)) = self.pings.front() {
                    if t > p.client_time_ms {
                        break;
                    }
                    self.pings.pop_front();
                    if t == p.client_time_ms {
                        self.push_event(Event::Pong { rtt_s: now - at });
                    }
                }
            }
            SBody::Correction(c) => self.push_event(Event::Correction(c)),
            SBody::Event(e) => self.event(e),
            SBody::Left(l) => {
                self.clear_room();
                self.want_room = None;
                self.state = State::Ready;
                self.push_event(Event::Left { room_id: l.room_id });
            }
            SBody::Expressions(x) => self.push_event(Event::Expressions(x)),
            SBody::RoomStatus(s) => match pb::RoomStatusKind::try_from(s.kind) {
                Ok(pb::RoomStatusKind::Moving) => {
                    if self.state == State::Joined {
                        self.state = State::Moving;
                    }
                    self.push_event(Event::RoomMoving { room_id: s.room_id });
                }
                Ok(pb::RoomStatusKind::Back) => {
                    if self.state == State::Moving {
                        self.state = State::Joined;
                    }
                    self.push_event(Event::RoomBack { room_id: s.room_id });
                }
                Ok(pb::RoomStatusKind::Reconnect) => self.push_event(Event::ReconnectAdvised {
                    after_s: f64::from(s.reconnect_after_ms) / 1000.0,
                }),
                _ => {}
            },
            SBody::OperatorResult(r) => self.push_event(Event::OperatorResult(r)),
        }
        Ok(())
    }

    /// When [`Connection::handle_timeout`] wants to run next (None: nothing scheduled).
    pub fn poll_timeout(&self) -> Option<f64> {
        if matches!(self.state, State::Disconnected | State::Negotiating) {
            return None;
        }
        let mut t = None::<f64>;
        if self.cfg.ping_interval_s > 0.0 {
            t = Some(self.next_ping);
        }
        if let Some(at) = self.resync_sent_at {
            let r = at + self.cfg.resync_retry_s;
            t = Some(t.map_or(r, |x| x.min(r)));
        }
        t
    }

    /// Runs timers due at `now`: pings, a resync whose keyframe did not come.
    pub fn handle_timeout(&mut self, now: f64) {
        if matches!(self.state, State::Disconnected | State::Negotiating) {
            return;
        }
        if self.cfg.ping_interval_s > 0.0 && now >= self.next_ping {
            self.next_ping = now + self.cfg.ping_interval_s;
            self.ping(now);
        }
        if let Some(at) = self.resync_sent_at
            && now >= at + self.cfg.resync_retry_s
            && self.awaiting_keyframe
            && self.state == State::Joined
        {
            self.send_resync(pb::ResyncReason::ChainBreak, now);
        }
    }

    /// The next message to send (one WebSocket binary message), in order.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.transmits.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    // === Requests ===

    /// Joins `room` (now if negotiated, else right after `Negotiated`). Returns the sequence.
    pub fn join(&mut self, room: &str) -> Option<u32> {
        self.want_room = Some(room.to_owned());
        if self.state == State::Ready {
            Some(self.send_join(room))
        } else {
            None
        }
    }

    /// Leaves the room.
    pub fn leave(&mut self) -> Option<u32> {
        self.want_room = None;
        if matches!(self.state, State::Joined | State::Moving | State::Joining) {
            self.state = State::Leaving;
            Some(self.push_body(CBody::Leave(pb::Leave {})))
        } else {
            None
        }
    }

    /// Sends a ping (its pong reports the round trip).
    pub fn ping(&mut self, now: f64) -> Option<u32> {
        if matches!(self.state, State::Disconnected | State::Negotiating) {
            return None;
        }
        // Ping ids are the local clock in ms (increasing); cap the outstanding ones.
        let id = ((now.max(0.0)) * 1000.0) as u64;
        if self.pings.back().is_some_and(|&(t, _)| t >= id) {
            return None;
        }
        if self.pings.len() >= 16 {
            self.pings.pop_front();
        }
        self.pings.push_back((id, now));
        Some(self.push_body(CBody::Ping(pb::Ping { client_time_ms: id })))
    }

    /// Sends a movement. Returns its sequence (the `last_input_sequence` that later confirms
    /// it), or None when not in a room.
    pub fn send_movement(&mut self, m: pb::Movement) -> Option<u32> {
        if !matches!(self.state, State::Joined | State::Moving) {
            return None;
        }
        Some(self.push_body(CBody::Movement(m)))
    }

    /// Sends a movement as the seed's 160-bit `MovementCompressed` (docs/PROTOCOL.md §3) over
    /// the default grid, with the velocity tier picked from the distance over the time since
    /// the last compressed move sent (`plaza_proto::compressed::tier_speed`; `m.velocity_tier`
    /// is ignored); head enables and `is_instant` travel with it. Returns its sequence and
    /// what the server reads from it (the quantized pose: what a prediction should hold), or
    /// None when not in a room.
    pub fn send_movement_compressed(
        &mut self,
        m: &pb::Movement,
    ) -> Option<(u32, plaza_proto::compressed::Decompressed)> {
        if !matches!(self.state, State::Joined | State::Moving) {
            return None;
        }
        let (c, d) = self.compressed.encode(m);
        Some((self.push_body(CBody::MovementCompressed(c.into())), d))
    }

    /// Sends any other request (teleport, interaction, consent, emote, scene, block, profile,
    /// personal space, expression). Returns its sequence, or None when not negotiated.
    pub fn send(&mut self, body: CBody) -> Option<u32> {
        if matches!(self.state, State::Disconnected | State::Negotiating) {
            return None;
        }
        Some(self.push_body(body))
    }

    /// Sends `body` whatever the state (even before `Negotiated`, even a second `Negotiate`):
    /// for tests that send what a well-behaved client never would, to see the server refuse
    /// it. Returns its sequence. Normal clients use [`Connection::send`].
    pub fn send_unchecked(&mut self, body: CBody) -> u32 {
        self.push_body(body)
    }

    // === Internals ===

    fn send_join(&mut self, room: &str) -> u32 {
        self.state = State::Joining;
        self.push_body(CBody::Join(pb::Join {
            room_id: room.to_owned(),
        }))
    }

    fn push_body(&mut self, body: CBody) -> u32 {
        self.seq = self.seq.wrapping_add(1).max(1);
        let env = ClientEnvelope {
            session_id: self.session_id,
            sequence: self.seq,
            sent_at_ms: self.wall_ms,
            body: Some(body),
        };
        if self.transmits.len() >= MAX_QUEUED {
            self.transmits.pop_front();
        }
        self.transmits.push_back(env.encode_to_vec());
        self.seq
    }

    fn push_event(&mut self, e: Event) {
        push_event(&mut self.events, &mut self.stats, e);
    }

    fn reset_transport(&mut self) {
        self.pings.clear();
        self.last_error = None;
    }

    fn clear_room_frames(&mut self) {
        self.decoder.reset();
        self.last_frame = None;
        for h in std::mem::take(&mut self.held) {
            push_event(
                &mut self.events,
                &mut self.stats,
                Event::EntityLeft { entity: h.id },
            );
        }
        self.awaiting_keyframe = true;
        self.resync_sent_at = None;
    }

    fn clear_room(&mut self) {
        self.clear_room_frames();
        self.room = None;
        self.roster.clear();
    }

    fn send_resync(&mut self, reason: pb::ResyncReason, now: f64) {
        self.stats.resyncs += 1;
        self.resync_sent_at = Some(now);
        let last = self.decoder.last_seq().unwrap_or(0);
        self.push_body(CBody::Resync(pb::Resync {
            last_frame_seq: last,
            reason: reason as i32,
        }));
    }

    fn frame(&mut self, bytes: &[u8], now: f64) {
        let keyframe = bytes
            .first()
            .is_some_and(|b| b & plaza_proto::frame::FLAG_KEYFRAME != 0);
        if self.awaiting_keyframe && !keyframe {
            // A delta against a base the client no longer trusts (PROTOCOL 2.9).
            self.stats.dropped_awaiting_keyframe += 1;
            return;
        }
        match self.decoder.apply(bytes) {
            Ok(d) => {
                self.awaiting_keyframe = false;
                self.resync_sent_at = None;
                self.applied(d);
            }
            Err(error) => {
                let reason = match error {
                    FrameError::ChainBreak { .. } => {
                        self.stats.chain_breaks += 1;
                        pb::ResyncReason::ChainBreak
                    }
                    FrameError::CheckMismatch { .. } => {
                        self.stats.check_mismatches += 1;
                        pb::ResyncReason::CheckMismatch
                    }
                    _ => {
                        self.stats.decode_errors += 1;
                        pb::ResyncReason::DecodeError
                    }
                };
                let resync_sent = !self.awaiting_keyframe;
                if resync_sent {
                    self.awaiting_keyframe = true;
                    self.send_resync(reason, now);
                }
                self.push_event(Event::FrameFailed(FrameFailure {
                    error: error.to_string(),
                    kind: FrameErrorKind::of(&error),
                    reason,
                    resync_sent,
                }));
            }
        }
    }

    fn applied(&mut self, d: DecodedFrame) {
        self.stats.frames += 1;
        if d.keyframe {
            self.stats.keyframes += 1;
        }
        if !self.cfg.entity_events {
            self.held.clear();
        } else if d.keyframe {
            self.keyframe_events(d.tick);
        } else {
            self.delta_events(&d);
        }
        if let Some(own) = self.decoder.own() {
            self.push_event(Event::Own(own.clone()));
        }
        self.push_event(Event::Frame {
            seq: d.seq,
            base_seq: d.base_seq,
            tick: d.tick,
            keyframe: d.keyframe,
        });
        self.last_frame = Some(d);
    }

    /// The change event's payload for `record` (held by the decoder).
    fn change(
        decoder: &FrameDecoder,
        record: EntityRecord,
        tick: u32,
        keyframe: bool,
    ) -> EntityChange {
        let id = record.id;
        EntityChange {
            record,
            pose_tick: decoder.pose_tick(id).unwrap_or(tick),
            tier: decoder.tier(id).unwrap_or(0),
            keyframe,
        }
    }

    /// A keyframe: everything reported that it does not hold (or holds under another
    /// generation or kind) left; what it holds entered, or was updated when reported as it is.
    fn keyframe_events(&mut self, tick: u32) {
        let old = std::mem::take(&mut self.held);
        for h in &old {
            match self.decoder.get(h.id) {
                Some(r) if Reported::of(r) == *h => {}
                _ => push_event(
                    &mut self.events,
                    &mut self.stats,
                    Event::EntityLeft { entity: h.id },
                ),
            }
        }
        let mut next = std::mem::take(&mut self.held_scratch);
        next.clear();
        let mut k = 0;
        for r in self.decoder.entities() {
            while old.get(k).is_some_and(|h| h.id < r.id) {
                k += 1;
            }
            let was = old.get(k).is_some_and(|h| *h == Reported::of(r));
            let change = Self::change(&self.decoder, *r, tick, true);
            let ev = if was {
                Event::EntityUpdated(change)
            } else {
                Event::EntityEntered(change)
            };
            push_event(&mut self.events, &mut self.stats, ev);
            next.push(Reported::of(r));
        }
        self.held = next;
        self.held_scratch = old;
    }

    /// A delta: its removed ids left; the ids it changed were updated, or entered when not
    /// reported before (new, or a new generation under a removed id).
    fn delta_events(&mut self, d: &DecodedFrame) {
        // Performance: runs every frame. A delta with no removal whose held set is the size of
        // what was reported brought nothing new (what was reported is the held set before the
        // frame): every change is an update, with no lookup in the reported index.
        if d.removed.is_empty() && self.held.len() == self.decoder.len() {
            for &id in &d.changed {
                let Some(record) = self.decoder.get(id).copied() else {
                    continue;
                };
                let change = Self::change(&self.decoder, record, d.tick, false);
                push_event(
                    &mut self.events,
                    &mut self.stats,
                    Event::EntityUpdated(change),
                );
            }
            return;
        }
        for &entity in &d.removed {
            if let Ok(i) = self.held.binary_search_by_key(&entity, |h| h.id) {
                self.held.remove(i);
                push_event(
                    &mut self.events,
                    &mut self.stats,
                    Event::EntityLeft { entity },
                );
            }
        }
        for &id in &d.changed {
            let Some(record) = self.decoder.get(id).copied() else {
                continue;
            };
            let change = Self::change(&self.decoder, record, d.tick, false);
            let now = Reported::of(&record);
            match self.held.binary_search_by_key(&id, |h| h.id) {
                Ok(i) if self.held[i] == now => {
                    push_event(
                        &mut self.events,
                        &mut self.stats,
                        Event::EntityUpdated(change),
                    );
                }
                Ok(i) => {
                    push_event(
                        &mut self.events,
                        &mut self.stats,
                        Event::EntityLeft { entity: id },
                    );
                    self.held[i] = now;
                    push_event(
                        &mut self.events,
                        &mut self.stats,
                        Event::EntityEntered(change),
                    );
                }
                Err(i) => {
                    if self.held.len() < MAX_ENTITIES {
                        self.held.insert(i, now);
                    }
                    push_event(
                        &mut self.events,
                        &mut self.stats,
                        Event::EntityEntered(change),
                    );
                }
            }
        }
    }

    fn event(&mut self, e: pb::Event) {
        let Some(kind) = e.kind else {
            return;
        };
        let ev = match kind {
            EventKind::Prop(p) => Event::Prop(p),
            EventKind::Consent(c) => Event::Consent(c),
            EventKind::Emote(m) => Event::Emote(m),
            EventKind::SceneTick(t) => Event::SceneTick(t),
            EventKind::SceneSync(s) => Event::SceneSync(Box::new(s)),
            EventKind::Rejected(r) => Event::Rejected(r),
            EventKind::SceneClient(c) => Event::SceneClient(c),
            EventKind::Roster(r) => {
                if r.full {
                    self.roster.clear();
                }
                for id in &r.removed {
                    self.roster.remove(id);
                }
                for u in r.upserts.iter().filter(|_| self.cfg.keep_roster) {
                    if self.roster.len() < MAX_ENTITIES || self.roster.contains_key(&u.entity_id) {
                        self.roster.insert(u.entity_id, u.clone());
                    }
                }
                Event::Roster(r)
            }
            EventKind::Teleported(t) => Event::Teleported(t),
            EventKind::Block(b) => Event::Block(b),
        };
        self.push_event(ev);
    }
}

/// Queues `e`, dropping (and counting) the oldest event when the queue is full.
fn push_event(events: &mut VecDeque<Event>, stats: &mut ConnectionStats, e: Event) {
    if events.len() >= MAX_QUEUED {
        events.pop_front();
        stats.events_dropped += 1;
    }
    events.push_back(e);
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaza_proto::frame::{EncoderConfig, EntityRecord, FrameEncoder, Visible};
    use plaza_proto::quant::{Pose, quantize};

    fn env(body: SBody) -> Vec<u8> {
        pb::ServerEnvelope {
            sequence: 1,
            sent_at_ms: 0,
            body: Some(body),
        }
        .encode_to_vec()
    }

    fn sent(c: &mut Connection) -> Vec<ClientEnvelope> {
        std::iter::from_fn(|| c.poll_transmit())
            .map(|b| ClientEnvelope::decode(b.as_slice()).unwrap())
            .collect()
    }

    fn events(c: &mut Connection) -> Vec<Event> {
        std::iter::from_fn(|| c.poll_event()).collect()
    }

    fn negotiated(sid: u64, token: &str) -> Vec<u8> {
        env(SBody::Negotiated(pb::Negotiated {
            session_id: sid,
            wallet: "guest:a".into(),
            resume_token: token.into(),
            ..Default::default()
        }))
    }

    fn joined(entity: u32) -> Vec<u8> {
        env(SBody::Joined(pb::Joined {
            room_id: "r".into(),
            entity_id: entity,
            tick_hz: 50,
            broadcast_hz: 20,
            ..Default::default()
        }))
    }

    fn rec(id: u32, x: f32) -> EntityRecord {
        EntityRecord {
            id,
            generation: 0,
            kind: 0,
            pose: quantize(&Pose {
                position: [x, 0.0, 0.0],
                ..Pose::default()
            }),
        }
    }

    fn frame(enc: &mut FrameEncoder, tick: u32, recs: &[EntityRecord]) -> Vec<u8> {
        let vis: Vec<Visible<'_>> = recs
            .iter()
            .map(|r| Visible { record: r, tier: 0 })
            .collect();
        let mut out = Vec::new();
        enc.encode(tick, None, &vis, &mut out);
        env(SBody::SnapshotFrame(pb::SnapshotFrame {
            frame: out.into(),
        }))
    }

    #[test]
    fn negotiate_join_frames_and_u64_session() {
        let mut c = Connection::new(ConnectionConfig {
            room: Some("r".into()),
            ..ConnectionConfig::default()
        });
        c.connected(0.0);
        let s = sent(&mut c);
        assert!(matches!(s[0].body, Some(CBody::Negotiate(_))));
        assert_eq!(s[0].session_id, 0);
        let big = (1u64 << 60) + 7;
        c.handle_input(&negotiated(big, "t1"), 0.1).unwrap();
        let s = sent(&mut c);
        assert_eq!(s[0].session_id, big);
        assert!(matches!(s[0].body, Some(CBody::Join(_))));
        c.handle_input(&joined(9), 0.2).unwrap();
        assert_eq!(c.state(), State::Joined);
        let mut enc = FrameEncoder::new(EncoderConfig {
            budget_bytes_per_s: 0,
            ..EncoderConfig::default()
        });
        c.handle_input(&frame(&mut enc, 10, &[rec(1, 1.0), rec(2, 2.0)]), 0.3)
            .unwrap();
        c.handle_input(&frame(&mut enc, 12, &[rec(1, 1.5)]), 0.35)
            .unwrap();
        let ev = events(&mut c);
        let entered: Vec<u32> = ev
            .iter()
            .filter_map(|e| match e {
                Event::EntityEntered(c) => Some(c.entity()),
                _ => None,
            })
            .collect();
        assert_eq!(entered, [1, 2]);
        assert!(
            ev.iter()
                .any(|e| matches!(e, Event::EntityUpdated(c) if c.entity() == 1))
        );
        assert!(ev.contains(&Event::EntityLeft { entity: 2 }));
        assert_eq!(c.session_id(), big);
    }

    #[test]
    fn chain_break_sends_one_resync_and_drops_deltas_until_keyframe() {
        let mut c = Connection::new(ConnectionConfig {
            room: Some("r".into()),
            ..ConnectionConfig::default()
        });
        c.connected(0.0);
        c.handle_input(&negotiated(5, "t"), 0.0).unwrap();
        c.handle_input(&joined(9), 0.0).unwrap();
        sent(&mut c);
        let mut enc = FrameEncoder::new(EncoderConfig::default());
        c.handle_input(&frame(&mut enc, 1, &[rec(1, 1.0)]), 0.0)
            .unwrap();
        let _lost = frame(&mut enc, 2, &[rec(1, 1.1)]);
        c.handle_input(&frame(&mut enc, 3, &[rec(1, 1.2)]), 0.1)
            .unwrap();
        c.handle_input(&frame(&mut enc, 4, &[rec(1, 1.3)]), 0.15)
            .unwrap();
        let s = sent(&mut c);
        assert_eq!(s.len(), 1);
        assert!(matches!(s[0].body, Some(CBody::Resync(_))));
        assert_eq!(c.stats().chain_breaks, 1);
        assert_eq!(c.stats().dropped_awaiting_keyframe, 1);
        // No keyframe within the retry: one more.
        c.handle_timeout(2.2);
        assert_eq!(sent(&mut c).len(), 1);
        enc.request_keyframe();
        c.handle_input(&frame(&mut enc, 5, &[rec(1, 1.4)]), 2.3)
            .unwrap();
        assert!(!c.awaiting_keyframe());
        c.handle_timeout(4.5);
        assert!(
            sent(&mut c)
                .iter()
                .all(|e| !matches!(e.body, Some(CBody::Resync(_))))
        );
    }

    #[test]
    fn close_codes_and_resume() {
        assert_eq!(CloseKind::of(Some(1001)), CloseKind::Resume);
        assert_eq!(CloseKind::of(None), CloseKind::Resume);
        assert_eq!(CloseKind::of(Some(4010)), CloseKind::Terminal);
        assert_eq!(CloseKind::of(Some(4005)), CloseKind::RetryLater);
        assert!(!CloseKind::of(Some(4002)).retryable());
        let mut c = Connection::new(ConnectionConfig {
            room: Some("r".into()),
            ..ConnectionConfig::default()
        });
        c.connected(0.0);
        c.handle_input(&negotiated(77, "tok"), 0.0).unwrap();
        c.handle_input(&joined(9), 0.0).unwrap();
        c.handle_close(None);
        let ev = events(&mut c);
        assert!(matches!(
            ev.last(),
            Some(Event::Closed {
                kind: CloseKind::Resume,
                ..
            })
        ));
        c.connected(1.0);
        let s = sent(&mut c);
        match &s[0].body {
            Some(CBody::Negotiate(n)) => assert_eq!(n.resume_token, "tok"),
            b => panic!("{b:?}"),
        }
        c.handle_input(&negotiated(77, "tok2"), 1.0).unwrap();
        assert!(matches!(
            events(&mut c).first(),
            Some(Event::Negotiated { resumed: true, .. })
        ));
        // Resumed into the room: the gateway sends Joined, no second Join.
        assert!(sent(&mut c).is_empty());
        assert_eq!(c.resume_token(), "tok2");
        // A stale token refused with 4003 makes the next connect a new session.
        c.handle_close(Some(4003));
        assert_eq!(c.resume_token(), "");
    }

    /// Entered / updated / left of every frame, as (kind, entity): 'e', 'u', 'l'.
    fn entity_events(c: &mut Connection) -> Vec<(char, u32)> {
        events(c)
            .iter()
            .filter_map(|e| match e {
                Event::EntityEntered(c) => Some(('e', c.entity())),
                Event::EntityUpdated(c) => Some(('u', c.entity())),
                Event::EntityLeft { entity } => Some(('l', *entity)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn delta_entries_generations_and_keyframes_diff_against_what_was_reported() {
        let joined_conn = |entity_events| {
            let mut c = Connection::new(ConnectionConfig {
                room: Some("r".into()),
                entity_events,
                ..ConnectionConfig::default()
            });
            c.connected(0.0);
            c.handle_input(&negotiated(5, "t"), 0.0).unwrap();
            c.handle_input(&joined(9), 0.0).unwrap();
            events(&mut c);
            c
        };
        let mut c = joined_conn(true);
        let mut enc = FrameEncoder::new(EncoderConfig {
            budget_bytes_per_s: 0,
            ..EncoderConfig::default()
        });
        let mut frames = Vec::new();
        frames.push(frame(&mut enc, 1, &[rec(1, 1.0), rec(2, 2.0)]));
        // 3 enters in a delta; 1 moves.
        frames.push(frame(&mut enc, 2, &[rec(1, 1.5), rec(2, 2.0), rec(3, 3.0)]));
        // Only moves (the path without a lookup in the reported index).
        frames.push(frame(&mut enc, 3, &[rec(1, 1.7), rec(2, 2.2), rec(3, 3.0)]));
        // 2 comes back under a new generation: left, then entered.
        let mut two = rec(2, 2.2);
        two.generation = 1;
        frames.push(frame(&mut enc, 4, &[rec(1, 1.7), two, rec(3, 3.0)]));
        // 1 leaves.
        frames.push(frame(&mut enc, 5, &[two, rec(3, 3.1)]));
        enc.request_keyframe();
        // A keyframe: 2 and 3 as reported (updated), 4 new.
        frames.push(frame(&mut enc, 6, &[two, rec(3, 3.1), rec(4, 4.0)]));
        let want: [&[(char, u32)]; 6] = [
            &[('e', 1), ('e', 2)],
            &[('u', 1), ('e', 3)],
            &[('u', 1), ('u', 2)],
            &[('l', 2), ('e', 2)],
            &[('l', 1), ('u', 3)],
            &[('u', 2), ('u', 3), ('e', 4)],
        ];
        let mut quiet = joined_conn(false);
        for (f, want) in frames.iter().zip(want) {
            c.handle_input(f, 0.1).unwrap();
            assert_eq!(entity_events(&mut c), want);
            // Without entity events: only the frame's own lists, the same frame applied.
            quiet.handle_input(f, 0.1).unwrap();
            let ev = events(&mut quiet);
            assert!(ev.iter().all(|e| !matches!(
                e,
                Event::EntityEntered(_) | Event::EntityUpdated(_) | Event::EntityLeft { .. }
            )));
            assert!(ev.iter().any(|e| matches!(e, Event::Frame { .. })));
            assert_eq!(quiet.last_frame(), c.last_frame());
            assert_eq!(quiet.decoder().check(), c.decoder().check());
        }
        let last = quiet.last_frame().unwrap();
        assert!(last.keyframe);
        assert_eq!(last.changed, [2, 3, 4]);
        // Leaving the room reports every entity left, and forgets the frame.
        c.handle_input(
            &env(SBody::Left(pb::Left {
                room_id: "r".into(),
            })),
            0.2,
        )
        .unwrap();
        assert_eq!(entity_events(&mut c), [('l', 2), ('l', 3), ('l', 4)]);
        assert!(c.last_frame().is_none());
    }

    #[test]
    fn events_stay_small() {
        // Thousands of connections in one load tool each queue a keyframe's worth of events.
        assert!(size_of::<Event>() <= 72, "{}", size_of::<Event>());
    }

    #[test]
    fn unchecked_sends_and_frame_kinds() {
        let mut c = Connection::new(ConnectionConfig::default());
        assert_eq!(c.send(CBody::Ping(pb::Ping { client_time_ms: 1 })), None);
        let seq = c.send_unchecked(CBody::Join(pb::Join {
            room_id: "early".into(),
        }));
        let s = sent(&mut c);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].sequence, seq);
        c.set_resume_token("tok");
        c.config_mut().versions = vec![pb::ProtocolVersion { major: 9, minor: 0 }];
        c.connected(0.0);
        match &sent(&mut c)[0].body {
            Some(CBody::Negotiate(n)) => {
                assert_eq!(n.resume_token, "tok");
                assert_eq!(n.versions[0].major, 9);
            }
            b => panic!("{b:?}"),
        }
        c.handle_input(&negotiated(3, "t2"), 0.0).unwrap();
        c.handle_input(&joined(1), 0.0).unwrap();
        let mut enc = FrameEncoder::new(EncoderConfig::default());
        c.handle_input(&frame(&mut enc, 1, &[rec(1, 1.0)]), 0.0)
            .unwrap();
        c.handle_input(&frame(&mut enc, 2, &[rec(1, 1.1)]), 0.0)
            .unwrap();
        let frames: Vec<(u32, u32, bool)> = events(&mut c)
            .iter()
            .filter_map(|e| match e {
                Event::Frame {
                    seq,
                    base_seq,
                    keyframe,
                    ..
                } => Some((*seq, *base_seq, *keyframe)),
                _ => None,
            })
            .collect();
        assert_eq!(frames.len(), 2);
        assert!(frames[0].2 && !frames[1].2);
        assert_eq!(frames[1].1, frames[0].0);
        assert_eq!(c.stats().frames_received, 2);
        assert!(c.decoder().get(1).is_some());
        let junk = env(SBody::SnapshotFrame(pb::SnapshotFrame {
            frame: vec![0x17, 0xff, 0xff].into(),
        }));
        c.handle_input(&junk, 0.0).unwrap();
        let failed = events(&mut c);
        match failed.as_slice() {
            [Event::FrameFailed(f)] => {
                assert!(f.resync_sent);
                assert!(!f.kind.is_check_failure());
            }
            e => panic!("{e:?}"),
        }
        assert_eq!(c.stats().frames_received, 3);
    }

    #[test]
    fn garbage_is_a_typed_error() {
        let mut c = Connection::new(ConnectionConfig::default());
        assert_eq!(
            c.handle_input(&[1, 2, 3], 0.0),
            Err(InputError::NotConnected)
        );
        c.connected(0.0);
        assert!(matches!(
            c.handle_input(&[0xff, 0xff, 0xff], 0.0),
            Err(InputError::Decode(_))
        ));
        let junk = env(SBody::SnapshotFrame(pb::SnapshotFrame {
            frame: vec![0x17, 0xff, 0xff].into(),
        }));
        c.handle_input(&negotiated(1, ""), 0.0).unwrap();
        c.handle_input(&joined(1), 0.0).unwrap();
        c.handle_input(&junk, 0.0).unwrap();
        assert_eq!(c.stats().decode_errors, 1);
    }
}
