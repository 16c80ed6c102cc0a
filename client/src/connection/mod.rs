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

mod frames;
#[cfg(test)]
mod tests;
mod types;

use frames::Reported;
pub use types::*;

use std::collections::{BTreeMap, VecDeque};

use plaza_proto::frame::{DecodedFrame, FrameDecoder, MAX_ENTITIES};
use plaza_proto::pb::{
    self, ClientEnvelope, client_envelope::Body as CBody, event::Kind as EventKind,
    server_envelope::Body as SBody,
};
use prost::Message as _;
use prost::bytes::Bytes;

/// Most events (and transmits) queued before the oldest is dropped.
pub const MAX_QUEUED: usize = 4096;

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
    /// The next frame is decoded into this (the one before the last, kept for its vectors:
    /// no allocation per frame).
    spare_frame: DecodedFrame,
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
            spare_frame: DecodedFrame::default(),
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
        self.decode_input(bytes, now)
    }

    /// [`Connection::handle_input`] with the message's own buffer (what a WebSocket library
    /// hands over): the frame bytes inside the envelope are not copied out of it.
    pub fn handle_input_bytes(&mut self, bytes: Bytes, now: f64) -> Result<(), InputError> {
        self.decode_input(bytes, now)
    }

    /// Decodes one server message from `buf` (a slice, or a `Bytes` the frame bytes are not
    /// copied out of) and handles it.
    fn decode_input(&mut self, buf: impl prost::bytes::Buf, now: f64) -> Result<(), InputError> {
        if self.state == State::Disconnected {
            return Err(InputError::NotConnected);
        }
        let env = match pb::ServerEnvelope::decode(buf) {
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
