//! The decisions of one client session, sans I/O.
//!
//! [`SessionCore`] takes what happens to a session — a client envelope, a message or the end of
//! the node stream, the result of an attach, a timer — and returns [`Effect`]s for its shell
//! (`session.rs`) to execute: queue a message to the client, forward one to the node, start or
//! cancel an attach, drop the node link, close. It reads no clock (time comes in as `now`),
//! holds no socket and spawns nothing, so the simulated pair and its unit tests drive it on
//! simulated time.
//!
//! # The room link
//! A session is in no room, joining one, attached, leaving, or *moving*: its room's stream broke
//! (the node died, drained, or stalled) and the shell is re-attaching it. While moving, the
//! session keeps living: pings are answered, the limits apply in real time, the latest movement
//! is kept (and sent once the room is back; earlier ones are dropped and counted) and any other
//! input is refused with the retryable [`Refusal::RoomMoving`]. Nothing is queued for later, so
//! a re-attach that takes a lease TTL cannot turn into a burst of inputs after it. The client is
//! told with a [`RoomStatus`] when its room starts moving and when it is back.
//!
//! # Stalls
//! A room sends every member a frame per broadcast period, so a stream silent for
//! `Limits::node_silence` has stalled (a paused, partitioned or wedged node). The core then
//! re-attaches *before breaking*: the old stream stays, an attach that avoids the stalled node
//! while its lease is live starts, and whichever answers first wins — frames on the old stream
//! cancel the attach, a completed attach replaces the old stream. The room's lease, not this
//! timer, decides when another node may take the room.

use std::time::Duration;

use bytes::Bytes;
use plaza_node_proto::FrameKind;
use plaza_proto::pb::{self, client_envelope, server_envelope};
use plaza_proto::room_id::valid_room_id;
use plaza_proto::version;
use prost::Message as _;
use tokio::time::Instant;

use crate::close::CloseCode;
use crate::limits::{Limits, TokenBucket, Verdict};
use crate::refusal::{Outcome, Refusal};

/// Who the session is, once the handshake is done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The session id (kept across a resume).
    pub session_id: u64,
    /// The authenticated wallet.
    pub wallet: String,
    /// Whether the identity has the operator role (a JWT's role claim): only then is an
    /// `OperatorAction` forwarded to the room (which checks the attach's flag again).
    pub operator: bool,
    /// The token the client may resume with.
    pub resume_token: String,
    /// The room (and entity) of a resumed session, re-attached at once.
    pub room: Option<(String, u32)>,
}

/// Why an attach starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachCause {
    /// The client joined.
    Join,
    /// The client came back with a resume token.
    Reconnect,
    /// The room's stream ended or broke.
    StreamEnded,
    /// The room's node hands the room to another node.
    Draining,
    /// The room's stream went silent.
    Stalled,
}

impl AttachCause {
    /// Whether the attach asks the room for the session's old entity.
    pub fn is_resume(self) -> bool {
        !matches!(self, Self::Join)
    }

    /// The resume-outcome label counted when such an attach starts (none for a join).
    pub fn label(self) -> Option<&'static str> {
        match self {
            Self::Join => None,
            Self::Reconnect => Some("reconnect"),
            Self::StreamEnded => Some("node_stream"),
            Self::Draining => Some("draining"),
            Self::Stalled => Some("stalled"),
        }
    }
}

/// What the client is told about its room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoomStatus {
    /// The room is moving to another node (or its node stalled); inputs other than the latest
    /// movement are refused until it is back.
    Moving,
    /// The room is back: frames flow again.
    Back,
    /// The gateway is going away: reconnect with the resume token after this delay.
    Reconnect {
        /// The delay, ms.
        after_ms: u32,
    },
}

/// How the node answered an attach (after the shell's retries).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttachResult {
    /// Attached: the room's ack.
    Attached {
        /// The session's entity in the room.
        entity: u32,
        /// The node that hosts the room.
        node: String,
    },
    /// The node refused the attach.
    Detached {
        /// Its reason.
        reason: DetachReason,
        /// Its message.
        message: String,
    },
    /// The node refused the request's arguments.
    Invalid(String),
    /// No node answered before the deadline.
    GaveUp,
}

/// Why a node detaches a session (the node protocol's `DetachReason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DetachReason {
    /// The room is full.
    RoomFull,
    /// The room stopped.
    RoomStopped,
    /// The node hands its rooms to other nodes.
    Draining,
    /// The room refused the join.
    Rejected,
    /// An operator kicked the member (an `OperatorAction` of another session).
    Kicked,
    /// Anything else.
    Other,
}

impl DetachReason {
    /// The node protocol's reason (its wire value) as the session reads it.
    pub fn from_wire(code: i32) -> Self {
        use plaza_node_proto::DetachReason as W;
        match W::try_from(code).unwrap_or(W::Unspecified) {
            W::RoomFull => Self::RoomFull,
            W::RoomStopped => Self::RoomStopped,
            W::Draining => Self::Draining,
            W::Rejected => Self::Rejected,
            W::Kicked => Self::Kicked,
            W::Unspecified | W::Internal => Self::Other,
        }
    }
}

/// What the node sent on the session's stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeEvent {
    /// An encoded `ServerEnvelope`, forwarded untouched.
    Frame {
        /// The envelope.
        bytes: Bytes,
        /// What it is, for the queue's backpressure.
        kind: FrameKind,
    },
    /// The room's ack (the entity).
    Ack {
        /// The session's entity.
        entity: u32,
    },
    /// The node detaches the session.
    Detach {
        /// Why.
        reason: DetachReason,
        /// Its message.
        message: String,
    },
    /// The stream ended: `broken` when it failed (a reset connection, a keepalive timeout)
    /// rather than closed by the node.
    Ended {
        /// It failed rather than ended.
        broken: bool,
    },
}

/// What the shell does for the core.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Queue a gateway-originated envelope to the client.
    Send(server_envelope::Body),
    /// Answer a ping (the shell stamps its wall clock).
    Pong {
        /// The client's time from the ping.
        client_time_ms: u64,
    },
    /// Queue a frame from the node as it came; report an overflow with
    /// [`SessionCore::on_overflow`].
    Deliver {
        /// The encoded envelope.
        bytes: Bytes,
        /// What it is, for the queue's backpressure.
        kind: FrameKind,
    },
    /// Send an envelope to the node.
    Forward(pb::ClientEnvelope),
    /// Ask the node for a keyframe.
    KeyframeNeeded,
    /// Authenticate this negotiate (or take its resume token) and answer with
    /// [`SessionCore::on_identity`].
    Authenticate(pb::Negotiate),
    /// Start attaching to `room`'s node, replacing any attach in flight; the current link (if
    /// any) stays until the attach completes or [`Effect::DropLink`].
    Attach {
        /// The room.
        room: String,
        /// Why.
        cause: AttachCause,
        /// The entity to ask back (0: any).
        entity: u32,
        /// A node not to attach to while the room's lease on it is live (the stalled one).
        avoid: Option<String>,
    },
    /// Stop the attach in flight.
    CancelAttach,
    /// Drop the node link and the session's route.
    DropLink,
    /// Forget the room's cached placement (its node broke or moved it).
    Invalidate(String),
    /// Tell the client about its room.
    Status {
        /// The room.
        room: String,
        /// Moving or back.
        status: RoomStatus,
    },
    /// Count a dropped client message.
    Dropped(&'static str),
    /// Write an operator action this gateway refused to the audit log (`plaza::audit`); the
    /// ones it forwards are audited by the room that carries them out.
    AuditOperator {
        /// The action.
        op: pb::OperatorOp,
        /// Its target wallet (empty for a room close).
        target: String,
        /// Why it was refused (the `OperatorResult.reason`).
        refused: &'static str,
    },
    /// A re-attach completed after this long.
    Resumed(Duration),
    /// A re-attach failed for good.
    ResumeFailed,
    /// Close the connection.
    Close(CloseCode),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for `negotiate`.
    Handshake,
    /// Waiting for [`SessionCore::on_identity`].
    Authenticating,
    /// Negotiated.
    Open,
    /// Closed; every input is ignored.
    Closed,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Link {
    /// In no room.
    None,
    /// Attaching for a join.
    Joining { room: String },
    /// Attached to the room's node.
    Attached {
        room: String,
        entity: u32,
        node: String,
        /// When the node last sent anything on the stream.
        heard: Instant,
        /// Set while a stall re-attach is in flight (the old stream still open): when the stream
        /// went quiet.
        stalled: Option<Instant>,
    },
    /// Re-attaching after the stream broke, ended or was drained.
    Moving {
        room: String,
        entity: u32,
        since: Instant,
    },
    /// The client asked to leave; the end of the stream is expected.
    Leaving,
}

/// One session's state machine (see the module docs).
#[derive(Debug)]
pub struct SessionCore {
    limits: Limits,
    opened: Instant,
    phase: Phase,
    version: Option<pb::ProtocolVersion>,
    identity: Option<Identity>,
    last_client_seq: Option<u32>,
    movement: TokenBucket,
    expressions: TokenBucket,
    events: TokenBucket,
    link: Link,
    /// The latest movement that arrived with no room attached (sent when it is back).
    held: Option<pb::ClientEnvelope>,
    /// Overflow instants within the slow-consumer window.
    overflows: Vec<Instant>,
    /// Since when the negotiated session is in no room (its idle deadline counts from here).
    unjoined_since: Option<Instant>,
}

impl SessionCore {
    /// A session whose connection opened at `now`.
    pub fn new(limits: Limits, now: Instant) -> Self {
        let movement = TokenBucket::new(limits.movement_hz, limits.movement_hz, now);
        let expressions = TokenBucket::new(limits.expression_hz, limits.expression_hz, now);
        let events = TokenBucket::new(limits.events_per_s, limits.events_burst, now);
        Self {
            limits,
            opened: now,
            phase: Phase::Handshake,
            version: None,
            identity: None,
            last_client_seq: None,
            movement,
            expressions,
            events,
            link: Link::None,
            held: None,
            overflows: Vec::new(),
            unjoined_since: None,
        }
    }

    /// Starts (or stops) the idle clock out of a room after an input at `now`.
    fn settle(&mut self, now: Instant) {
        if self.phase == Phase::Open && self.link == Link::None {
            self.unjoined_since.get_or_insert(now);
        } else {
            self.unjoined_since = None;
        }
    }

    // === getters ===

    /// The session's identity, once negotiated.
    pub fn identity(&self) -> Option<&Identity> {
        self.identity.as_ref()
    }

    /// Whether the session's identity has the operator role.
    pub fn is_operator(&self) -> bool {
        self.identity.as_ref().is_some_and(|i| i.operator)
    }

    /// Whether the session is in (or joining, or moving with) a room.
    fn in_room(&self) -> bool {
        !matches!(self.link, Link::None | Link::Leaving)
    }

    /// The session id (0 before negotiation).
    pub fn session_id(&self) -> u64 {
        self.identity.as_ref().map_or(0, |i| i.session_id)
    }

    /// The room the session is in, joining or moving to, and its entity (0 while joining).
    pub fn room(&self) -> Option<(&str, u32)> {
        match &self.link {
            Link::Joining { room } => Some((room, 0)),
            Link::Attached { room, entity, .. } | Link::Moving { room, entity, .. } => {
                Some((room, *entity))
            }
            Link::None | Link::Leaving => None,
        }
    }

    /// Whether the client asked to leave its room (no resume entry is kept for it).
    pub fn is_leaving(&self) -> bool {
        self.link == Link::Leaving
    }

    /// Whether the session is re-attaching its room.
    pub fn is_moving(&self) -> bool {
        matches!(
            self.link,
            Link::Moving { .. }
                | Link::Attached {
                    stalled: Some(_),
                    ..
                }
        )
    }

    /// Whether the session closed.
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    /// When [`SessionCore::on_timer`] must run next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (&self.phase, &self.link) {
            (Phase::Handshake, _) => Some(self.opened + self.limits.handshake_deadline),
            (Phase::Open, Link::None) => self.unjoined_since.map(|t| t + self.limits.unjoined_idle),
            (
                Phase::Open,
                Link::Attached {
                    heard,
                    stalled: None,
                    ..
                },
            ) => Some(*heard + self.limits.node_silence),
            _ => None,
        }
    }

    // === inputs ===

    /// A decoded client envelope.
    pub fn on_client(&mut self, env: pb::ClientEnvelope, now: Instant) -> Vec<Effect> {
        let mut out = Vec::new();
        match self.phase {
            Phase::Closed | Phase::Authenticating => {}
            Phase::Handshake => match env.body {
                Some(client_envelope::Body::Negotiate(neg)) => {
                    match version::negotiate(&neg.versions) {
                        Some(v) => {
                            self.version = Some(v);
                            self.phase = Phase::Authenticating;
                            out.push(Effect::Authenticate(neg));
                        }
                        None => self.refuse(Refusal::UnsupportedVersion, None, 0, &mut out),
                    }
                }
                // A WebSocket ping or an empty envelope before negotiate carries nothing.
                None => {}
                Some(_) => self.refuse(Refusal::NotNegotiated, None, 0, &mut out),
            },
            Phase::Open => self.on_open_client(env, now, &mut out),
        }
        self.settle(now);
        out
    }

    /// A binary client message as it came off the socket: one encoded envelope, refused
    /// ([`Refusal::TooLarge`]) over `Limits::max_frame_bytes` or ([`Refusal::BadFrame`]) when it
    /// does not decode.
    pub fn on_client_bytes(&mut self, bytes: &[u8], now: Instant) -> Vec<Effect> {
        if bytes.len() > self.limits.max_frame_bytes {
            return self.on_bad_frame(Refusal::TooLarge);
        }
        match pb::ClientEnvelope::decode(bytes) {
            Ok(env) => self.on_client(env, now),
            Err(_) => self.on_bad_frame(Refusal::BadFrame),
        }
    }

    /// A frame the shell could not read (over the socket's own size cap), or a text frame.
    pub fn on_bad_frame(&mut self, refusal: Refusal) -> Vec<Effect> {
        let mut out = Vec::new();
        if self.phase != Phase::Closed {
            out.push(Effect::Dropped(refusal.name()));
            self.refuse(refusal, None, 0, &mut out);
        }
        out
    }

    /// The client closed its socket (or it died).
    pub fn on_client_closed(&mut self) -> Vec<Effect> {
        let mut out = Vec::new();
        if self.phase != Phase::Closed {
            self.close(CloseCode::Normal, &mut out);
        }
        out
    }

    /// The gateway is shutting down: the client is told to reconnect with its resume token
    /// after `reconnect_after` (the shell draws it from the roll window, so reconnects spread),
    /// then the session closes with going-away.
    pub fn on_shutdown(&mut self, reconnect_after: Duration) -> Vec<Effect> {
        let mut out = Vec::new();
        if self.phase == Phase::Open {
            out.push(Effect::Status {
                room: self.room().map(|r| r.0.to_owned()).unwrap_or_default(),
                status: RoomStatus::Reconnect {
                    after_ms: reconnect_after.as_millis().min(u128::from(u32::MAX)) as u32,
                },
            });
        }
        if self.phase != Phase::Closed {
            self.refuse(Refusal::GoingAway, None, 0, &mut out);
        }
        out
    }

    /// An operator kicked the session: it is told ([`Refusal::Kicked`]) and closes with
    /// [`CloseCode::Kicked`]; no resume entry is kept.
    pub fn on_kick(&mut self) -> Vec<Effect> {
        let mut out = Vec::new();
        if self.phase != Phase::Closed {
            self.refuse(Refusal::Kicked, None, 0, &mut out);
        }
        out
    }

    /// The answer to [`Effect::Authenticate`]: who the session is, or the refusal and its detail.
    pub fn on_identity(
        &mut self,
        identity: Result<Identity, (Refusal, String)>,
        now: Instant,
    ) -> Vec<Effect> {
        let mut out = Vec::new();
        if self.phase != Phase::Authenticating {
            return out;
        }
        let ident = match identity {
            Ok(i) => i,
            Err((refusal, detail)) => {
                self.refuse(refusal, Some(&detail), 0, &mut out);
                return out;
            }
        };
        self.phase = Phase::Open;
        let l = &self.limits;
        out.push(Effect::Send(server_envelope::Body::Negotiated(
            pb::Negotiated {
                version: self.version,
                session_id: ident.session_id,
                wallet: ident.wallet.clone(),
                resume_token: ident.resume_token.clone(),
                limits: Some(pb::Limits {
                    max_frame_bytes: l.max_frame_bytes as u32,
                    max_movement_hz: l.movement_hz,
                    max_expression_hz: l.expression_hz,
                    max_events_per_s: l.events_per_s,
                }),
            },
        )));
        if let Some((room, entity)) = ident.room.clone() {
            self.start_moving(room, entity, AttachCause::Reconnect, None, now, &mut out);
        }
        self.identity = Some(ident);
        self.settle(now);
        out
    }

    /// A message (or the end) of the current node stream.
    pub fn on_node(&mut self, ev: NodeEvent, now: Instant) -> Vec<Effect> {
        let mut out = Vec::new();
        if self.phase != Phase::Open {
            return out;
        }
        if let Link::Attached {
            heard,
            stalled,
            room,
            ..
        } = &mut self.link
        {
            *heard = now;
            if !matches!(ev, NodeEvent::Ended { .. }) && stalled.take().is_some() {
                // The old stream speaks again: it was slow, not gone.
                out.push(Effect::CancelAttach);
                out.push(Effect::Status {
                    room: room.clone(),
                    status: RoomStatus::Back,
                });
            }
        }
        match ev {
            NodeEvent::Frame { bytes, kind } => out.push(Effect::Deliver { bytes, kind }),
            NodeEvent::Ack { entity: e } => {
                if let Link::Attached { entity, .. } = &mut self.link {
                    *entity = e;
                }
            }
            NodeEvent::Detach { reason, message } => {
                self.on_detach(reason, &message, now, &mut out)
            }
            NodeEvent::Ended { broken } => self.on_stream_end(broken, now, &mut out),
        }
        self.settle(now);
        out
    }

    /// A room frame of the current node stream, when its delivery is all that follows (the
    /// session is open and attached, its stream not stalled): notes the node was heard and
    /// returns `true`; the caller queues the frame. `false`: hand it to [`Self::on_node`] as
    /// [`NodeEvent::Frame`]. The same as `on_node` with a frame, without its `Vec` per frame.
    pub fn on_plain_frame(&mut self, now: Instant) -> bool {
        if self.phase != Phase::Open {
            return false;
        }
        match &mut self.link {
            Link::Attached {
                heard,
                stalled: None,
                ..
            } => {
                *heard = now;
                self.unjoined_since = None;
                true
            }
            _ => false,
        }
    }

    /// The outbound queue overflowed (the client is behind).
    pub fn on_overflow(&mut self, now: Instant) -> Vec<Effect> {
        let mut out = vec![Effect::KeyframeNeeded];
        let window = self.limits.slow_window;
        self.overflows.retain(|t| now.duration_since(*t) < window);
        self.overflows.push(now);
        if self.overflows.len() as u32 >= self.limits.slow_strikes {
            self.refuse(Refusal::SlowConsumer, None, 0, &mut out);
        }
        out
    }

    /// The answer to the last [`Effect::Attach`].
    pub fn on_attach_result(&mut self, result: AttachResult, now: Instant) -> Vec<Effect> {
        let mut out = Vec::new();
        if self.phase != Phase::Open {
            return out;
        }
        let (room, started, resumed) = match &self.link {
            Link::Joining { room } => (room.clone(), now, false),
            Link::Moving { room, since, .. } => (room.clone(), *since, true),
            Link::Attached {
                room,
                stalled: Some(since),
                ..
            } => (room.clone(), *since, true),
            // Nothing waits for an attach (a leave cancelled it).
            _ => return out,
        };
        match result {
            AttachResult::Attached { entity, node } => {
                self.link = Link::Attached {
                    room: room.clone(),
                    entity,
                    node,
                    heard: now,
                    stalled: None,
                };
                if resumed {
                    out.push(Effect::Resumed(now.saturating_duration_since(started)));
                    out.push(Effect::Status {
                        room,
                        status: RoomStatus::Back,
                    });
                }
                if let Some(m) = self.held.take() {
                    out.push(Effect::Forward(m));
                }
            }
            AttachResult::Detached { reason, message } => {
                self.link = Link::None;
                self.held = None;
                out.push(Effect::DropLink);
                let refusal = match reason {
                    DetachReason::RoomFull => Refusal::RoomFull,
                    DetachReason::Rejected => Refusal::Rejected,
                    DetachReason::Kicked => Refusal::Kicked,
                    _ => Refusal::RoomUnavailable,
                };
                self.refuse(refusal, Some(&message), 0, &mut out);
            }
            AttachResult::Invalid(message) => {
                self.link = Link::None;
                self.held = None;
                out.push(Effect::DropLink);
                self.refuse(Refusal::InvalidInput, Some(&message), 0, &mut out);
            }
            AttachResult::GaveUp => {
                self.link = Link::None;
                self.held = None;
                out.push(Effect::DropLink);
                if resumed {
                    out.push(Effect::ResumeFailed);
                }
                self.refuse(Refusal::RoomUnavailable, None, 0, &mut out);
            }
        }
        self.settle(now);
        out
    }

    /// Timers: the handshake deadline, the idle deadline out of a room and the node-silence
    /// check.
    pub fn on_timer(&mut self, now: Instant) -> Vec<Effect> {
        let mut out = Vec::new();
        if self.poll_timeout().is_none_or(|t| now < t) {
            return out;
        }
        match (&self.phase, &mut self.link) {
            (Phase::Handshake, _) => self.refuse(Refusal::HandshakeTimeout, None, 0, &mut out),
            (Phase::Open, Link::None) => self.refuse(Refusal::IdleTimeout, None, 0, &mut out),
            (
                Phase::Open,
                Link::Attached {
                    room,
                    entity,
                    node,
                    heard,
                    stalled,
                },
            ) => {
                // The room went quiet at the last message heard: the resume is timed from it.
                *stalled = Some(*heard);
                out.push(Effect::Invalidate(room.clone()));
                out.push(Effect::Attach {
                    room: room.clone(),
                    cause: AttachCause::Stalled,
                    entity: *entity,
                    avoid: Some(node.clone()),
                });
                out.push(Effect::Status {
                    room: room.clone(),
                    status: RoomStatus::Moving,
                });
            }
            _ => {}
        }
        out
    }

    // === decisions ===

    fn on_open_client(&mut self, env: pb::ClientEnvelope, now: Instant, out: &mut Vec<Effect>) {
        let Some(body) = env.body else {
            // Empty envelopes (and WebSocket pings) carry nothing to act on.
            return;
        };
        if env.session_id != self.session_id() {
            return self.refuse(Refusal::WrongSession, None, env.sequence, out);
        }
        // Replayed or reordered envelopes are ignored (B4).
        if self
            .last_client_seq
            .is_some_and(|last| env.sequence <= last)
        {
            out.push(Effect::Dropped("replayed_sequence"));
            return;
        }
        self.last_client_seq = Some(env.sequence);
        let is_move = matches!(
            body,
            client_envelope::Body::Movement(_) | client_envelope::Body::MovementCompressed(_)
        );
        let is_expression = matches!(body, client_envelope::Body::Expression(_));
        // The limits apply at arrival, whatever the room is doing.
        let verdict = if is_move {
            self.movement.check(now)
        } else if is_expression {
            self.expressions.check(now)
        } else {
            self.events.check(now)
        };
        match verdict {
            Verdict::Allow => {}
            Verdict::Drop => return out.push(Effect::Dropped("rate_limited")),
            Verdict::Flood => return self.refuse(Refusal::RateLimited, None, env.sequence, out),
        }
        let seq = env.sequence;
        match body {
            client_envelope::Body::Negotiate(_) => {
                self.refuse(Refusal::AlreadyNegotiated, None, seq, out);
            }
            client_envelope::Body::Ping(p) => out.push(Effect::Pong {
                client_time_ms: p.client_time_ms,
            }),
            client_envelope::Body::Join(j) => {
                if !matches!(self.link, Link::None | Link::Leaving) {
                    self.refuse(Refusal::AlreadyJoined, None, seq, out);
                } else if !valid_room_id(&j.room_id) {
                    self.refuse(Refusal::InvalidRoomId, None, seq, out);
                } else {
                    if self.link == Link::Leaving {
                        // The old stream's end is no longer waited for.
                        out.push(Effect::DropLink);
                    }
                    self.link = Link::Joining {
                        room: j.room_id.clone(),
                    };
                    out.push(Effect::Attach {
                        room: j.room_id,
                        cause: AttachCause::Join,
                        entity: 0,
                        avoid: None,
                    });
                }
            }
            client_envelope::Body::Operator(action) if !self.is_operator() || !self.in_room() => {
                // Refused here, never forwarded: only an operator identity's session in a room
                // reaches the room with one (and the room checks the attach's flag again).
                let refused = if self.is_operator() {
                    "not_joined"
                } else {
                    "not_operator"
                };
                let op = pb::OperatorOp::try_from(action.op).unwrap_or_default();
                out.push(Effect::AuditOperator {
                    op,
                    target: action.target_wallet.clone(),
                    refused,
                });
                out.push(Effect::Send(server_envelope::Body::OperatorResult(
                    pb::OperatorResult {
                        in_reply_to: seq,
                        op: op as i32,
                        target_wallet: action.target_wallet,
                        ok: false,
                        reason: refused.to_owned(),
                    },
                )));
            }
            client_envelope::Body::Leave(leave) => match &self.link {
                Link::Attached { stalled, .. } => {
                    if stalled.is_some() {
                        out.push(Effect::CancelAttach);
                    }
                    self.link = Link::Leaving;
                    out.push(Effect::Forward(pb::ClientEnvelope {
                        body: Some(client_envelope::Body::Leave(leave)),
                        ..env
                    }));
                }
                Link::Joining { .. } | Link::Moving { .. } => {
                    // Nothing to tell a room that is not attached.
                    self.link = Link::None;
                    self.held = None;
                    out.push(Effect::CancelAttach);
                    out.push(Effect::DropLink);
                }
                Link::None | Link::Leaving => self.refuse(Refusal::NotJoined, None, seq, out),
            },
            body => {
                let env = pb::ClientEnvelope {
                    body: Some(body),
                    ..env
                };
                match &self.link {
                    Link::Attached { .. } => out.push(Effect::Forward(env)),
                    Link::Joining { .. } | Link::Moving { .. } if is_move => {
                        // Keep only the latest movement for when the room is (back) there.
                        if self.held.replace(env).is_some() {
                            out.push(Effect::Dropped("room_moving"));
                        }
                    }
                    Link::Moving { .. } => {
                        out.push(Effect::Dropped("room_moving"));
                        // A resync is answered by the keyframe the re-attach brings anyway; an
                        // expression is a stream (the next one replaces it).
                        if !matches!(env.body, Some(client_envelope::Body::Resync(_)))
                            && !is_expression
                        {
                            self.refuse(Refusal::RoomMoving, None, seq, out);
                        }
                    }
                    _ if is_move || is_expression => out.push(Effect::Dropped("not_joined")),
                    _ => self.refuse(Refusal::NotJoined, None, seq, out),
                }
            }
        }
    }

    fn on_detach(
        &mut self,
        reason: DetachReason,
        message: &str,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        let Link::Attached { room, entity, .. } = &self.link else {
            return;
        };
        let (room, entity) = (room.clone(), *entity);
        out.push(Effect::DropLink);
        if reason == DetachReason::Draining {
            // The node hands its room to another node: move the session there, no disconnect.
            out.push(Effect::Invalidate(room.clone()));
            return self.start_moving(room, entity, AttachCause::Draining, None, now, out);
        }
        self.link = Link::None;
        match reason {
            DetachReason::RoomFull => self.refuse(Refusal::RoomFull, Some(message), 0, out),
            DetachReason::Rejected => self.refuse(Refusal::Rejected, Some(message), 0, out),
            DetachReason::Kicked => self.refuse(Refusal::Kicked, Some(message), 0, out),
            _ => self.refuse(Refusal::RoomUnavailable, Some(message), 0, out),
        }
    }

    fn on_stream_end(&mut self, broken: bool, now: Instant, out: &mut Vec<Effect>) {
        match std::mem::replace(&mut self.link, Link::None) {
            Link::Leaving => out.push(Effect::DropLink),
            Link::Attached {
                room,
                entity,
                stalled: Some(since),
                ..
            } => {
                // A stall re-attach is already in flight: it goes on, now without a fallback.
                self.link = Link::Moving {
                    room,
                    entity,
                    since,
                };
            }
            Link::Attached {
                room, entity, node, ..
            } => {
                out.push(Effect::Invalidate(room.clone()));
                // Ask for the same entity back: the new activation gives it if it is free. A
                // node whose stream failed (killed, unreachable) keeps the room only while its
                // lease is live: wait that out rather than dial it again.
                let avoid = broken.then_some(node);
                self.start_moving(room, entity, AttachCause::StreamEnded, avoid, now, out);
            }
            other => self.link = other,
        }
    }

    fn start_moving(
        &mut self,
        room: String,
        entity: u32,
        cause: AttachCause,
        avoid: Option<String>,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        self.link = Link::Moving {
            room: room.clone(),
            entity,
            since: now,
        };
        out.push(Effect::Attach {
            room: room.clone(),
            cause,
            entity,
            avoid,
        });
        out.push(Effect::Status {
            room,
            status: RoomStatus::Moving,
        });
    }

    fn refuse(
        &mut self,
        r: Refusal,
        detail: Option<&str>,
        in_reply_to: u32,
        out: &mut Vec<Effect>,
    ) {
        out.push(Effect::Send(server_envelope::Body::Error(
            r.error(detail, in_reply_to),
        )));
        if let Outcome::Close(code) = r.outcome() {
            self.close(code, out);
        }
    }

    fn close(&mut self, code: CloseCode, out: &mut Vec<Effect>) {
        if !matches!(self.link, Link::None) {
            out.push(Effect::CancelAttach);
        }
        self.phase = Phase::Closed;
        out.push(Effect::Close(code));
    }
}

#[cfg(test)]
mod tests;
