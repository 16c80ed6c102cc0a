//! One client connection: handshake, limits, pinning to the room node, forwarding both ways,
//! resume after the room's stream broke, and a typed close for every way it can end.
//!
//! A session is two tasks: this one reads the client and the node stream; a writer task owns
//! the socket's sink and drains the session's bounded [`OutQueue`].

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use bytes::Bytes;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt as _, StreamExt as _};
use plaza_node_proto::{self as node, NodeInbound, NodeOutbound, node_inbound, node_outbound};
use plaza_proto::pb::{self, client_envelope, server_envelope};
use plaza_proto::room_id::valid_room_id;
use plaza_proto::version;
use prost::Message as _;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tracing::Instrument as _;

use crate::Shared;
use crate::close::CloseCode;
use crate::limits::{TokenBucket, Verdict};
use crate::queue::{OutItem, OutQueue, Pushed};
use crate::resume::ResumeEntry;
use crate::router::Transport;

/// How long a node may take to open an attach stream and acknowledge it.
const ATTACH_ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs one connection to its end.
pub(crate) async fn run(socket: WebSocket, shared: Arc<Shared>) {
    let (sink, mut stream) = socket.split();
    let queue = Arc::new(OutQueue::new(shared.limits.outbound_queue));
    let writer = tokio::spawn(writer(sink, queue.clone(), shared.clone()));
    shared.metrics.sessions.inc();
    let mut s = Session::new(shared.clone(), queue.clone());
    let span = tracing::info_span!("session", session_id = tracing::field::Empty);
    let code = s.run(&mut stream).instrument(span.clone()).await;
    s.finish(code).instrument(span).await;
    shared.metrics.sessions.dec();
    shared.metrics.close(code);
    // The writer sends the close frame and exits; a dead socket ends it sooner.
    let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
}

async fn writer(mut sink: SplitSink<WebSocket, Message>, q: Arc<OutQueue>, shared: Arc<Shared>) {
    let mut batch = Vec::new();
    loop {
        q.drain(&mut batch).await;
        for item in batch.drain(..) {
            match item {
                OutItem::Frame { bytes, .. } => {
                    shared.metrics.bytes_out.inc_by(bytes.len() as u64);
                    shared.metrics.frames_out.inc();
                    if sink.feed(Message::Binary(bytes)).await.is_err() {
                        return;
                    }
                }
                OutItem::Close(code, reason) => {
                    let _ = sink
                        .send(Message::Close(Some(CloseFrame {
                            code,
                            reason: reason.into(),
                        })))
                        .await;
                    let _ = sink.close().await;
                    return;
                }
            }
        }
        if sink.flush().await.is_err() {
            return;
        }
    }
}

/// The session's link to its room node.
struct NodeLink {
    room: String,
    tx: mpsc::Sender<NodeInbound>,
    stream: Downlink,
    entity: u32,
}

/// What the node sends the session: the gRPC response stream, or the channel of a node in
/// this process (same messages; its end is the stream's end).
enum Downlink {
    Grpc(Box<tonic::Streaming<NodeOutbound>>),
    Local(mpsc::Receiver<NodeOutbound>),
}

impl Downlink {
    async fn recv(&mut self) -> Option<Result<NodeOutbound, tonic::Status>> {
        match self {
            Self::Grpc(s) => s.message().await.transpose(),
            Self::Local(rx) => rx.recv().await.map(Ok),
        }
    }
}

enum Step {
    Continue,
    Close(CloseCode),
}

struct Session {
    shared: Arc<Shared>,
    queue: Arc<OutQueue>,
    session_id: u64,
    wallet: String,
    resume_token: String,
    last_client_seq: Option<u32>,
    movement: TokenBucket,
    events: TokenBucket,
    node: Option<NodeLink>,
    /// The client asked to leave; the end of the node stream is expected.
    leaving: bool,
    /// Overflow instants within the slow-consumer window.
    overflows: Vec<Instant>,
}

impl Session {
    fn new(shared: Arc<Shared>, queue: Arc<OutQueue>) -> Self {
        let now = Instant::now();
        let l = &shared.limits;
        let movement = TokenBucket::new(l.movement_hz, l.movement_hz, now);
        let events = TokenBucket::new(l.events_per_s, l.events_burst, now);
        Self {
            shared,
            queue,
            session_id: 0,
            wallet: String::new(),
            resume_token: String::new(),
            last_client_seq: None,
            movement,
            events,
            node: None,
            leaving: false,
            overflows: Vec::new(),
        }
    }

    async fn run(&mut self, stream: &mut SplitStream<WebSocket>) -> CloseCode {
        let mut shutdown = self.shared.shutdown.clone();
        if is_shutdown(&shutdown) {
            return CloseCode::GoingAway;
        }
        // One wait for the whole connection: a fresh `wait_for` per loop turn registered and
        // removed a waiter in the watch channel every session shares (a contended lock per
        // message). It is polled only until it fires, then the session returns.
        let shutdown = wait_shutdown(&mut shutdown);
        tokio::pin!(shutdown);
        // === handshake ===
        let first = tokio::select! {
            m = stream.next() => m,
            _ = tokio::time::sleep(self.shared.limits.handshake_deadline) => {
                return CloseCode::HandshakeTimeout;
            }
            _ = &mut shutdown => return CloseCode::GoingAway,
        };
        let env = match self.read(first) {
            Ok(Some(env)) => env,
            Ok(None) => return CloseCode::Normal,
            Err(code) => return code,
        };
        let Some(client_envelope::Body::Negotiate(neg)) = env.body else {
            self.error(
                pb::ErrorCode::BadFrame,
                "the first message must be negotiate",
                0,
            );
            return CloseCode::BadFrame;
        };
        if let Err(code) = self.negotiate(neg).await {
            return code;
        }
        // === session ===
        loop {
            let step = tokio::select! {
                _ = &mut shutdown => Step::Close(CloseCode::GoingAway),
                m = stream.next() => match self.read(m) {
                    Ok(Some(env)) => self.on_client(env).await,
                    Ok(None) => Step::Close(CloseCode::Normal),
                    Err(code) => Step::Close(code),
                },
                out = next_node(&mut self.node) => self.on_node(out).await,
            };
            if let Step::Close(code) = step {
                return code;
            }
        }
    }

    /// Reads one client message: `Ok(None)` when the client closed or the socket died.
    fn read(
        &mut self,
        m: Option<Result<Message, axum::Error>>,
    ) -> Result<Option<pb::ClientEnvelope>, CloseCode> {
        let msg = match m {
            None => return Ok(None),
            Some(Err(e)) => {
                return if is_capacity_error(&e) {
                    self.shared.metrics.dropped("too_large");
                    Err(CloseCode::TooLarge)
                } else {
                    Ok(None)
                };
            }
            Some(Ok(msg)) => msg,
        };
        match msg {
            Message::Binary(b) => {
                self.shared.metrics.bytes_in.inc_by(b.len() as u64);
                if b.len() > self.shared.limits.max_frame_bytes {
                    return Err(CloseCode::TooLarge);
                }
                match pb::ClientEnvelope::decode(b) {
                    Ok(env) => Ok(Some(env)),
                    Err(_) => Err(CloseCode::BadFrame),
                }
            }
            Message::Text(_) => Err(CloseCode::BadFrame),
            Message::Close(_) => Ok(None),
            // Pings are answered by the WebSocket layer.
            Message::Ping(_) | Message::Pong(_) => Ok(Some(pb::ClientEnvelope::default())),
        }
    }

    async fn negotiate(&mut self, neg: pb::Negotiate) -> Result<(), CloseCode> {
        let Some(v) = version::negotiate(&neg.versions) else {
            self.send(server_envelope::Body::Error(pb::Error {
                code: pb::ErrorCode::UnsupportedVersion as i32,
                message: "unsupported_version: no protocol version in common".into(),
                supported_versions: version::SUPPORTED.to_vec(),
                retryable: false,
                in_reply_to: 0,
            }));
            return Err(CloseCode::UnsupportedVersion);
        };
        let mut resumed: Option<ResumeEntry> = None;
        if !neg.resume_token.is_empty() {
            resumed = self.shared.resume.take_shared(&neg.resume_token).await;
            if resumed.is_none() {
                self.shared.metrics.resume("unknown_token");
            }
        }
        match resumed {
            Some(entry) => {
                self.session_id = entry.session_id;
                self.wallet = entry.wallet;
                self.resume_token = neg.resume_token;
                self.send_negotiated(v);
                if let Some(room) = entry.room {
                    self.shared.metrics.resume("reconnect");
                    match self.attach(&room, true, entry.entity).await {
                        Ok(()) => {}
                        Err(code) => return Err(code),
                    }
                }
            }
            None => {
                let ident = match self.shared.auth.authenticate(&neg.auth_token) {
                    Ok(i) => i,
                    Err(e) => {
                        self.error(pb::ErrorCode::Auth, &e.to_string(), 0);
                        return Err(CloseCode::Auth);
                    }
                };
                self.session_id = new_session_id();
                self.wallet = ident.wallet;
                self.resume_token = crate::resume::new_token();
                self.send_negotiated(v);
            }
        }
        tracing::Span::current().record("session_id", self.session_id);
        tracing::debug!(session = self.session_id, wallet = %self.wallet, "negotiated");
        Ok(())
    }

    fn send_negotiated(&mut self, v: pb::ProtocolVersion) {
        let l = &self.shared.limits;
        let limits = pb::Limits {
            max_frame_bytes: l.max_frame_bytes as u32,
            max_movement_hz: l.movement_hz,
            max_events_per_s: l.events_per_s,
        };
        self.send(server_envelope::Body::Negotiated(pb::Negotiated {
            version: Some(v),
            session_id: self.session_id,
            wallet: self.wallet.clone(),
            resume_token: self.resume_token.clone(),
            limits: Some(limits),
        }));
    }

    async fn on_client(&mut self, env: pb::ClientEnvelope) -> Step {
        let Some(body) = env.body else {
            // Empty envelopes (and WebSocket pings) carry nothing to act on.
            return Step::Continue;
        };
        if env.session_id != self.session_id {
            self.error(pb::ErrorCode::BadFrame, "wrong session id", env.sequence);
            return Step::Close(CloseCode::BadFrame);
        }
        // Replayed or reordered envelopes are ignored (B4).
        if self
            .last_client_seq
            .is_some_and(|last| env.sequence <= last)
        {
            self.shared.metrics.dropped("replayed_sequence");
            return Step::Continue;
        }
        self.last_client_seq = Some(env.sequence);
        let now = Instant::now();
        let is_move = matches!(
            body,
            client_envelope::Body::Movement(_) | client_envelope::Body::MovementCompressed(_)
        );
        let verdict = if is_move {
            self.movement.check(now)
        } else {
            self.events.check(now)
        };
        match verdict {
            Verdict::Allow => {}
            Verdict::Drop => {
                self.shared.metrics.dropped("rate_limited");
                return Step::Continue;
            }
            Verdict::Flood => {
                self.error(
                    pb::ErrorCode::RateLimited,
                    "input rate exceeded",
                    env.sequence,
                );
                return Step::Close(CloseCode::RateLimited);
            }
        }
        match body {
            client_envelope::Body::Negotiate(_) => {
                self.error(pb::ErrorCode::BadFrame, "already negotiated", env.sequence);
                Step::Close(CloseCode::BadFrame)
            }
            client_envelope::Body::Ping(p) => {
                self.send(server_envelope::Body::Pong(pb::Pong {
                    client_time_ms: p.client_time_ms,
                    server_time_ms: unix_ms(),
                }));
                Step::Continue
            }
            client_envelope::Body::Join(j) => {
                if self.node.is_some() {
                    self.error(
                        pb::ErrorCode::AlreadyJoined,
                        "already in a room",
                        env.sequence,
                    );
                    return Step::Continue;
                }
                if !valid_room_id(&j.room_id) {
                    self.error(pb::ErrorCode::InvalidInput, "invalid room id", env.sequence);
                    return Step::Continue;
                }
                match self.attach(&j.room_id, false, 0).await {
                    Ok(()) => Step::Continue,
                    Err(code) => Step::Close(code),
                }
            }
            client_envelope::Body::Leave(_) => {
                if self.node.is_none() {
                    self.error(pb::ErrorCode::NotJoined, "not in a room", env.sequence);
                    return Step::Continue;
                }
                self.leaving = true;
                self.forward(pb::ClientEnvelope {
                    body: Some(client_envelope::Body::Leave(pb::Leave {})),
                    ..env
                });
                Step::Continue
            }
            body => {
                if self.node.is_none() {
                    if !is_move {
                        self.error(pb::ErrorCode::NotJoined, "not in a room", env.sequence);
                    } else {
                        self.shared.metrics.dropped("not_joined");
                    }
                    return Step::Continue;
                }
                self.forward(pb::ClientEnvelope {
                    body: Some(body),
                    ..env
                });
                Step::Continue
            }
        }
    }

    /// Sends an envelope to the room node; a full channel drops it (the node is behind).
    fn forward(&mut self, env: pb::ClientEnvelope) {
        if let Some(link) = &self.node {
            let msg = NodeInbound {
                body: Some(node_inbound::Body::Envelope(env)),
            };
            if link.tx.try_send(msg).is_err() {
                self.shared.metrics.dropped("node_backlog");
            }
        }
    }

    async fn on_node(&mut self, out: Option<Result<NodeOutbound, tonic::Status>>) -> Step {
        match out {
            Some(Ok(msg)) => match msg.body {
                Some(node_outbound::Body::ServerEnvelope(bytes)) => {
                    match self.queue.push_frame(bytes, msg.droppable, msg.keyframe) {
                        Pushed::Queued | Pushed::Skipped => Step::Continue,
                        Pushed::Overflow => self.on_overflow(),
                    }
                }
                Some(node_outbound::Body::Ack(a)) => {
                    if let Some(link) = &mut self.node {
                        link.entity = a.entity_id;
                    }
                    Step::Continue
                }
                Some(node_outbound::Body::Detach(d)) => self.on_detach(d).await,
                None => Step::Continue,
            },
            end => {
                let link = self.node.take().map(|l| (l.room, l.entity));
                let entity = link.as_ref().map_or(0, |l| l.1);
                let room = link.map(|l| l.0);
                if self.leaving {
                    self.leaving = false;
                    if let Some(_room) = room {
                        self.shared.router.unpin(self.session_id);
                    }
                    return Step::Continue;
                }
                let Some(room) = room else {
                    return Step::Continue;
                };
                if let Some(Err(status)) = &end {
                    tracing::info!(session = self.session_id, room, %status, "room stream broke; resuming");
                } else {
                    tracing::info!(
                        session = self.session_id,
                        room,
                        "room stream ended; resuming"
                    );
                }
                self.shared.router.invalidate(&room);
                self.shared.metrics.resume("node_stream");
                // Ask for the same entity back: the new activation gives it if it is free.
                match self.attach(&room, true, entity).await {
                    Ok(()) => Step::Continue,
                    Err(code) => Step::Close(code),
                }
            }
        }
    }

    fn on_overflow(&mut self) -> Step {
        let now = Instant::now();
        self.shared.metrics.overflows.inc();
        if let Some(link) = &self.node {
            let _ = link.tx.try_send(NodeInbound {
                body: Some(node_inbound::Body::KeyframeNeeded(node::KeyframeNeeded {})),
            });
        }
        let window = self.shared.limits.slow_window;
        self.overflows.retain(|t| now.duration_since(*t) < window);
        self.overflows.push(now);
        if self.overflows.len() as u32 >= self.shared.limits.slow_strikes {
            Step::Close(CloseCode::SlowConsumer)
        } else {
            Step::Continue
        }
    }

    async fn on_detach(&mut self, d: node::Detach) -> Step {
        let reason =
            node::DetachReason::try_from(d.reason).unwrap_or(node::DetachReason::Unspecified);
        let link = self.node.take();
        self.shared.router.unpin(self.session_id);
        // The node hands its room to another node: move the session there without a
        // disconnect. (A Detach answering an attach has no link; it closes as before.)
        if let (node::DetachReason::Draining, Some(link)) = (reason, &link) {
            self.shared.router.invalidate(&link.room);
            self.shared.metrics.resume("draining");
            return match Box::pin(self.attach(&link.room, true, link.entity)).await {
                Ok(()) => Step::Continue,
                Err(code) => Step::Close(code),
            };
        }
        match reason {
            node::DetachReason::RoomFull => {
                self.error(pb::ErrorCode::RoomFull, "room is full", 0);
                Step::Close(CloseCode::RoomFull)
            }
            node::DetachReason::Rejected => {
                self.error(pb::ErrorCode::Rejected, &d.message, 0);
                Step::Continue
            }
            _ => {
                self.error(pb::ErrorCode::RoomUnavailable, &d.message, 0);
                Step::Close(CloseCode::RoomUnavailable)
            }
        }
    }

    /// Pins the session to `room`'s node and opens its stream; retries while the room is being
    /// (re)placed, up to the resume deadline.
    async fn attach(&mut self, room: &str, resume: bool, entity: u32) -> Result<(), CloseCode> {
        let started = Instant::now();
        let deadline = started
            + if resume {
                self.shared.limits.resume_deadline
            } else {
                Duration::from_secs(10)
            };
        let mut backoff = Duration::from_millis(50);
        loop {
            match self.try_attach(room, resume, entity).await {
                Ok(link) => {
                    self.node = Some(link);
                    if resume {
                        self.shared.metrics.resume("resumed");
                        self.shared
                            .metrics
                            .resume_seconds
                            .observe(started.elapsed().as_secs_f64());
                    }
                    return Ok(());
                }
                Err(AttachFail::Detached(d)) => {
                    return match self.on_detach(d).await {
                        Step::Continue => Ok(()),
                        Step::Close(c) => Err(c),
                    };
                }
                Err(AttachFail::Invalid(msg)) => {
                    self.error(pb::ErrorCode::InvalidInput, &msg, 0);
                    return Ok(());
                }
                Err(AttachFail::Retry(why)) => {
                    tracing::debug!(
                        session = self.session_id,
                        room,
                        why,
                        "attach failed; retrying"
                    );
                    self.shared.router.invalidate(room);
                }
            }
            if Instant::now() + backoff > deadline || is_shutdown(&self.shared.shutdown) {
                self.shared.metrics.resume("failed");
                self.error(pb::ErrorCode::RoomUnavailable, "room unavailable", 0);
                return Err(CloseCode::RoomUnavailable);
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    async fn try_attach(
        &mut self,
        room: &str,
        resume: bool,
        entity: u32,
    ) -> Result<NodeLink, AttachFail> {
        let route = self
            .shared
            .router
            .pin(self.session_id, room)
            .await
            .map_err(|e| AttachFail::Retry(e.to_string()))?;
        let (tx, rx) = mpsc::channel(64);
        let attach = node::AttachRequest {
            room_id: room.to_owned(),
            session_id: self.session_id,
            wallet: self.wallet.clone(),
            resume_entity: entity,
            resume,
        };
        let span = tracing::info_span!("gateway.attach", room, node = %route.node_id, resume);
        let refused = |s: tonic::Status| match s.code() {
            tonic::Code::InvalidArgument => AttachFail::Invalid(s.message().to_owned()),
            _ => AttachFail::Retry(s.to_string()),
        };
        let mut stream = match &route.transport {
            Transport::Grpc(client) => {
                let req = NodeInbound {
                    body: Some(node_inbound::Body::Attach(attach)),
                };
                tx.try_send(req)
                    .map_err(|_| AttachFail::Retry("channel".into()))?;
                let mut client = client.clone();
                let mut req = tonic::Request::new(ReceiverStream::new(rx));
                span.in_scope(|| crate::trace::inject(&mut req));
                // A node that accepts the stream but never answers (paused, wedged) must not hold
                // the session: give up on it like on a missing ack, and re-resolve.
                let resp =
                    tokio::time::timeout(ATTACH_ACK_TIMEOUT, client.attach(req).instrument(span))
                        .await
                        .map_err(|_| AttachFail::Retry("node did not answer the attach".into()))?
                        .map_err(refused)?;
                Downlink::Grpc(Box::new(resp.into_inner()))
            }
            Transport::Local(local) => {
                let rx = local
                    .attach(attach, rx)
                    .instrument(span)
                    .await
                    .map_err(refused)?;
                Downlink::Local(rx)
            }
        };
        let first = tokio::time::timeout(ATTACH_ACK_TIMEOUT, stream.recv())
            .await
            .map_err(|_| AttachFail::Retry("no ack".into()))?
            .ok_or_else(|| AttachFail::Retry("stream ended before ack".into()))?
            .map_err(|s| AttachFail::Retry(s.to_string()))?;
        match first.body {
            Some(node_outbound::Body::Ack(a)) => Ok(NodeLink {
                room: room.to_owned(),
                tx,
                stream,
                entity: a.entity_id,
            }),
            Some(node_outbound::Body::Detach(d)) => Err(AttachFail::Detached(d)),
            _ => Err(AttachFail::Retry("unexpected first message".into())),
        }
    }

    /// Ends the session: detach from the room, keep a resume entry if the client may come back,
    /// and queue the close frame.
    async fn finish(&mut self, code: CloseCode) {
        let room = self.node.take().map(|l| (l.room, l.entity));
        if self.session_id != 0 {
            self.shared.router.unpin(self.session_id);
        }
        let may_resume = matches!(code, CloseCode::Normal | CloseCode::GoingAway)
            && !self.resume_token.is_empty()
            && !self.leaving;
        if may_resume {
            self.shared.resume.put(
                self.resume_token.clone(),
                ResumeEntry {
                    session_id: self.session_id,
                    wallet: self.wallet.clone(),
                    room: room.as_ref().map(|r| r.0.clone()),
                    entity: room.as_ref().map_or(0, |r| r.1),
                },
            );
        }
        if code == CloseCode::GoingAway {
            self.error(pb::ErrorCode::GoingAway, "server shutting down", 0);
        }
        self.queue.close(code.code(), code.name());
    }

    fn error(&mut self, code: pb::ErrorCode, message: &str, in_reply_to: u32) {
        self.send(server_envelope::Body::Error(pb::Error {
            code: code as i32,
            message: message.to_owned(),
            supported_versions: Vec::new(),
            retryable: matches!(
                code,
                pb::ErrorCode::RoomFull | pb::ErrorCode::RoomUnavailable | pb::ErrorCode::GoingAway
            ),
            in_reply_to,
        }));
    }

    /// Queues an envelope that originates at the gateway (sequence 0: not from the room).
    fn send(&mut self, body: server_envelope::Body) {
        let env = pb::ServerEnvelope {
            sequence: 0,
            sent_at_ms: unix_ms(),
            body: Some(body),
        };
        let _ = self
            .queue
            .push_frame(Bytes::from(env.encode_to_vec()), false, false);
    }
}

enum AttachFail {
    Retry(String),
    Invalid(String),
    Detached(node::Detach),
}

async fn wait_shutdown(rx: &mut tokio::sync::watch::Receiver<bool>) {
    if rx.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

fn is_shutdown(rx: &tokio::sync::watch::Receiver<bool>) -> bool {
    *rx.borrow()
}

async fn next_node(link: &mut Option<NodeLink>) -> Option<Result<NodeOutbound, tonic::Status>> {
    match link {
        Some(l) => l.stream.recv().await,
        None => std::future::pending().await,
    }
}

fn is_capacity_error(e: &axum::Error) -> bool {
    use std::error::Error as _;
    let mut src: Option<&(dyn std::error::Error + 'static)> = e.source();
    while let Some(s) = src {
        if let Some(t) = s.downcast_ref::<tokio_tungstenite::tungstenite::Error>() {
            return matches!(t, tokio_tungstenite::tungstenite::Error::Capacity(_));
        }
        src = s.source();
    }
    false
}

fn new_session_id() -> u64 {
    loop {
        let id: u64 = rand::random();
        if id != 0 {
            return id;
        }
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
