//! One client connection: the I/O shell around its [`SessionCore`].
//!
//! The core decides (handshake, limits, what to forward, when to re-attach, every refusal); this
//! shell owns the socket, the node link, the attach in flight with its retries ([`attach`]), and
//! executes the core's effects. A session is one task: it reads the client, the node stream, the
//! attach in flight and the core's timer in one `select!` — so a session whose room is moving
//! keeps reading its client, answering pings and applying its limits — and writes the session's
//! bounded [`OutQueue`] to the same socket ([`SocketWriter`]): a room frame costs one channel
//! send and one task wake from the room to the socket, the socket is not split (no lock between
//! a reader and a writer half), and every frame queued by the time the socket is written goes
//! out in one `write`.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use bytes::Bytes;
use futures_util::{Sink as _, StreamExt as _};
use plaza_node_proto::{
    self as node, FrameKind, NodeInbound, NodeOutbound, node_inbound, node_outbound,
};
use plaza_proto::pb::{self, server_envelope};
use prost::Message as _;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::Shared;
use crate::auth::{AuthError, Purpose, is_guest};
use crate::close::CloseCode;
use crate::edge::Conn;
use crate::metrics::GatewayMetrics;
use crate::queue::{OutItem, OutQueue, Pushed};
use crate::refusal::Refusal;
use crate::resume::ResumeEntry;
use crate::router::LocalUplink;
use crate::session_core::{
    AttachCause, AttachResult, DetachReason, Effect, Identity, NodeEvent, RoomStatus, SessionCore,
};

mod attach;
use attach::{AttachArgs, attach_with_retries};

/// How many more node messages one wake takes from an in-process stream before the socket is
/// written (their frames go out in one `write`).
const NODE_BATCH: usize = 32;

/// Runs one connection to its end.
pub(crate) async fn run(mut socket: WebSocket, shared: Arc<Shared>, conn: Arc<Conn>) {
    let queue = Arc::new(OutQueue::new(shared.limits.outbound_queue));
    let mut out = SocketWriter::default();
    shared.metrics.sessions.inc();
    let mut s = Session::new(shared.clone(), queue.clone(), conn);
    let span = tracing::info_span!("session", session_id = tracing::field::Empty);
    let code = s.run(&mut socket, &mut out).instrument(span.clone()).await;
    if !matches!(code, CloseCode::Normal | CloseCode::GoingAway) {
        span.in_scope(|| tracing::info!(code = code.name(), "session closed"));
    }
    s.finish(code).instrument(span).await;
    shared.metrics.sessions.dec();
    shared.metrics.close(code);
    // What is still queued, then the close frame; a dead socket ends it sooner.
    let m = &shared.metrics;
    let _ = tokio::time::timeout(
        Duration::from_secs(2),
        std::future::poll_fn(|cx| out.poll_write(cx, &mut socket, &queue, m)),
    )
    .await;
}

/// The socket's write side, driven by the session's task: items taken from the queue and not
/// yet handed to the socket, and whether the socket holds frames not yet written out.
///
/// Items are taken from the queue all at once (as a separate writer task did), handed to the
/// socket while it takes them, and flushed with one `write` for all of them.
#[derive(Default)]
struct SocketWriter {
    batch: VecDeque<OutItem>,
    unflushed: bool,
    /// The close frame was handed to the socket.
    closing: bool,
    /// Writing failed; nothing more is written.
    failed: bool,
}

impl SocketWriter {
    /// Writes what is queued. `Pending` while there is nothing to write or the socket is full
    /// (the socket then wakes the task); `Ready` once the close frame went out or the socket
    /// failed, and at every call after.
    fn poll_write(
        &mut self,
        cx: &mut Context<'_>,
        ws: &mut WebSocket,
        q: &OutQueue,
        m: &GatewayMetrics,
    ) -> Poll<()> {
        if self.failed {
            return Poll::Ready(());
        }
        let (mut frames, mut bytes) = (0u64, 0u64);
        let res = self.write_batch(cx, ws, q, &mut frames, &mut bytes);
        if frames > 0 {
            m.frames_out.inc_by(frames);
            m.bytes_out.inc_by(bytes);
        }
        if res.is_ready() {
            self.failed = true;
        }
        res
    }

    fn write_batch(
        &mut self,
        cx: &mut Context<'_>,
        ws: &mut WebSocket,
        q: &OutQueue,
        frames: &mut u64,
        bytes: &mut u64,
    ) -> Poll<()> {
        let mut ws = Pin::new(ws);
        loop {
            if self.closing {
                return ws.as_mut().poll_close(cx).map(|_| ());
            }
            // Nothing more is taken from the queue until what the socket holds is written: a
            // client that does not read fills the queue (and overflows it), not the socket's
            // buffer.
            if self.unflushed {
                match ws.as_mut().poll_flush(cx) {
                    Poll::Ready(Ok(())) => self.unflushed = false,
                    Poll::Ready(Err(_)) => return Poll::Ready(()),
                    Poll::Pending => return Poll::Pending,
                }
            }
            if self.batch.is_empty() {
                q.take_all(&mut self.batch);
                if self.batch.is_empty() {
                    return Poll::Pending;
                }
            }
            while !self.batch.is_empty() {
                match ws.as_mut().poll_ready(cx) {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(_)) => return Poll::Ready(()),
                    // Full: `poll_ready` flushes and wakes the task when it drained.
                    Poll::Pending => return Poll::Pending,
                }
                match self.batch.pop_front() {
                    Some(OutItem::Frame { bytes: b, .. }) => {
                        *frames += 1;
                        *bytes += b.len() as u64;
                        if ws.as_mut().start_send(Message::Binary(b)).is_err() {
                            return Poll::Ready(());
                        }
                        self.unflushed = true;
                    }
                    Some(OutItem::Close(code, reason)) => {
                        let _ = ws.as_mut().start_send(Message::Close(Some(CloseFrame {
                            code,
                            reason: reason.into(),
                        })));
                        self.closing = true;
                        break;
                    }
                    None => break,
                }
            }
        }
    }
}

/// What the socket did in one turn of the session's loop.
enum SocketEvent {
    /// A client message (or the end of the client's stream).
    Read(Option<Result<Message, axum::Error>>),
    /// Writing failed (or the socket closed).
    WriteEnded,
}

/// Writes what is queued and reads the next client message, on the one socket.
async fn socket_io(
    ws: &mut WebSocket,
    out: &mut SocketWriter,
    q: &OutQueue,
    m: &GatewayMetrics,
) -> SocketEvent {
    std::future::poll_fn(|cx| {
        // A failed writer is reported once; the reads go on until they end too.
        if !out.failed && out.poll_write(cx, ws, q, m).is_ready() {
            return Poll::Ready(SocketEvent::WriteEnded);
        }
        ws.poll_next_unpin(cx).map(SocketEvent::Read)
    })
    .await
}

/// The session's link to its room node.
struct NodeLink {
    up: Uplink,
    stream: Downlink,
}

/// What the session sends its node: the gRPC request stream's channel, or (a node in this
/// process) straight into the room's mailbox. Dropping it detaches the session either way.
enum Uplink {
    Grpc(mpsc::Sender<NodeInbound>),
    Local(Box<dyn LocalUplink>),
}

/// Why an [`Uplink`] did not take a message (the message is dropped).
#[derive(Debug)]
enum UplinkError {
    /// The stream's channel is full: the node is behind.
    Full,
    /// The stream ended, or the room stopped.
    Closed,
}

impl Uplink {
    /// Sends without waiting.
    fn try_send(&mut self, msg: NodeInbound) -> Result<(), UplinkError> {
        match self {
            Self::Grpc(tx) => tx.try_send(msg).map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => UplinkError::Full,
                mpsc::error::TrySendError::Closed(_) => UplinkError::Closed,
            }),
            Self::Local(up) => up.send(msg).map_err(|_| UplinkError::Closed),
        }
    }
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

/// An attach in flight, with its retries: the link, or the final answer without one.
type AttachFuture = Pin<Box<dyn Future<Output = (AttachResult, Option<NodeLink>)> + Send>>;

struct Session {
    shared: Arc<Shared>,
    queue: Arc<OutQueue>,
    core: SessionCore,
    link: Option<NodeLink>,
    attach: Option<AttachFuture>,
    /// Fires when an operator kicks the session (registered once negotiated).
    kick: Option<tokio::sync::oneshot::Receiver<()>>,
    /// This connection's registration in the session registry.
    registered: Option<(u64, u64)>,
    /// The room and entity last shared as this session's resume entry, and when.
    shared_entry: Option<(String, u32)>,
    /// The admitted socket: its handshake deadline, its address's session and join limits.
    conn: Arc<Conn>,
}

impl Session {
    fn new(shared: Arc<Shared>, queue: Arc<OutQueue>, conn: Arc<Conn>) -> Self {
        // The handshake deadline counts from the socket's accept, not from the upgrade.
        let core = SessionCore::new(shared.limits.clone(), conn.accepted());
        Self {
            shared,
            queue,
            core,
            link: None,
            attach: None,
            kick: None,
            registered: None,
            shared_entry: None,
            conn,
        }
    }

    /// While the session is in a room, keeps its resume entry in the directory (written when
    /// the room or entity changes; the gateway renews all the entries it holds at once, see
    /// [`crate::resume`]): a gateway killed
    /// with SIGKILL writes nothing at the end, and its clients still resume elsewhere with the
    /// same entity.
    fn share_resume_entry(&mut self) {
        let Some((room, entity)) = self.core.room() else {
            return;
        };
        if entity == 0 || self.core.is_moving() {
            return;
        }
        if self
            .shared_entry
            .as_ref()
            .is_some_and(|(r, e)| r == room && *e == entity)
        {
            return;
        }
        let Some(ident) = self.core.identity() else {
            return;
        };
        self.shared.resume.share(
            &ident.resume_token,
            &ResumeEntry {
                session_id: ident.session_id,
                wallet: ident.wallet.clone(),
                room: Some(room.to_owned()),
                entity,
            },
        );
        self.shared_entry = Some((room.to_owned(), entity));
    }

    async fn run(&mut self, ws: &mut WebSocket, out: &mut SocketWriter) -> CloseCode {
        let mut shutdown = self.shared.shutdown.clone();
        if is_shutdown(&shutdown) {
            return CloseCode::GoingAway;
        }
        // One wait for the whole connection: a fresh `wait_for` per loop turn registered and
        // removed a waiter in the watch channel every session shares (a contended lock per
        // message). It is polled only until it fires, then the session returns.
        let shutdown = wait_shutdown(&mut shutdown);
        tokio::pin!(shutdown);
        let mut shut = false;
        // One timer for the connection. It is moved only when the core's deadline comes
        // earlier: every node frame pushes the silence deadline later, and moving the timer for
        // each would re-register it in the timer wheel per frame. A timer that fires before the
        // core's (later) deadline is re-armed without waking the core.
        let timer = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(timer);
        let mut armed: Option<Instant> = None;
        loop {
            // What the last turn queued goes out now (the socket wakes the task while full).
            let ended = !out.failed
                && std::future::poll_fn(|cx| {
                    Poll::Ready(
                        out.poll_write(cx, ws, &self.queue, &self.shared.metrics)
                            .is_ready(),
                    )
                })
                .await;
            if ended {
                // The socket failed (or closed): the client is gone.
                let fx = self.core.on_client_closed();
                if let Some(code) = self.apply(fx).await {
                    return code;
                }
            }
            let deadline = self.core.poll_timeout();
            if let Some(t) = deadline
                && armed.is_none_or(|a| t < a)
            {
                timer.as_mut().reset(t);
                armed = Some(t);
            }
            let fx = tokio::select! {
                _ = &mut shutdown, if !shut => {
                    shut = true;
                    // Each client its own delay: a roll's reconnects spread over the window.
                    let window = self.shared.limits.reconnect_window;
                    let after = window.mul_f64(rand::random::<f64>());
                    self.core.on_shutdown(after)
                }
                ev = socket_io(ws, out, &self.queue, &self.shared.metrics) => match ev {
                    SocketEvent::Read(m) => self.read(m),
                    SocketEvent::WriteEnded => self.core.on_client_closed(),
                },
                ev = next_node(&mut self.link) => self.node_messages(ev),
                (res, link) = next_attach(&mut self.attach) => {
                    self.attach = None;
                    if let Some(link) = link {
                        // The old stream, if any (a stall re-attach), ends here: the room swaps.
                        self.link = Some(link);
                    }
                    let node = match &res {
                        AttachResult::Attached { node, .. } => Some(node.clone()),
                        _ => None,
                    };
                    let fx = self.core.on_attach_result(res, Instant::now());
                    self.sync_registry(node.as_deref());
                    fx
                }
                _ = next_kick(&mut self.kick) => {
                    self.kick = None;
                    tracing::info!(session = self.core.session_id(), "kicked by an operator");
                    self.core.on_kick()
                }
                _ = &mut timer, if armed.is_some() => {
                    armed = None;
                    let now = Instant::now();
                    if self.core.poll_timeout().is_some_and(|t| t <= now) {
                        self.core.on_timer(now)
                    } else {
                        Vec::new()
                    }
                }
            };
            if let Some(code) = self.apply(fx).await {
                return code;
            }
            self.share_resume_entry();
        }
    }

    /// Handles what the node stream delivered, then (an in-process stream) what else it holds
    /// now, up to [`NODE_BATCH`]: a room frame of an attached session goes straight into the
    /// queue; anything else stops the batch and goes through the core.
    fn node_messages(&mut self, ev: Option<Result<NodeOutbound, tonic::Status>>) -> Vec<Effect> {
        let mut ev = ev;
        let mut taken = 0;
        loop {
            let msg = match ev {
                Some(Ok(msg)) => msg,
                other => {
                    let e = self.node_event(other);
                    return self.core.on_node(e, Instant::now());
                }
            };
            let kind = msg.frame_kind();
            match msg.body {
                Some(node_outbound::Body::ServerEnvelope(bytes))
                    if self.core.on_plain_frame(Instant::now()) =>
                {
                    if self.queue.push_frame(bytes, kind) == Pushed::Overflow {
                        self.shared.metrics.overflows.inc();
                        return self.core.on_overflow(Instant::now());
                    }
                }
                body => {
                    let e = self.node_event(Some(Ok(NodeOutbound { body, ..msg })));
                    return self.core.on_node(e, Instant::now());
                }
            }
            taken += 1;
            if taken > NODE_BATCH {
                return Vec::new();
            }
            ev = match &mut self.link {
                Some(NodeLink {
                    stream: Downlink::Local(rx),
                    ..
                }) => match rx.try_recv() {
                    Ok(m) => Some(Ok(m)),
                    Err(_) => return Vec::new(),
                },
                _ => return Vec::new(),
            };
        }
    }

    /// Reads one client message into the core.
    fn read(&mut self, m: Option<Result<Message, axum::Error>>) -> Vec<Effect> {
        let msg = match m {
            None => return self.core.on_client_closed(),
            Some(Err(e)) => {
                return if is_capacity_error(&e) {
                    self.core.on_bad_frame(Refusal::TooLarge)
                } else {
                    self.core.on_client_closed()
                };
            }
            Some(Ok(msg)) => msg,
        };
        match msg {
            Message::Binary(b) => {
                self.shared.metrics.bytes_in.inc_by(b.len() as u64);
                self.core.on_client_bytes(&b, Instant::now())
            }
            Message::Text(_) => self.core.on_bad_frame(Refusal::BadFrame),
            Message::Close(_) => self.core.on_client_closed(),
            // Pings are answered by the WebSocket layer.
            Message::Ping(_) | Message::Pong(_) => Vec::new(),
        }
    }

    /// Maps what the node stream delivered; its end drops the link.
    fn node_event(&mut self, ev: Option<Result<NodeOutbound, tonic::Status>>) -> NodeEvent {
        let sid = self.core.session_id();
        match ev {
            Some(Ok(msg)) => {
                let kind = msg.frame_kind();
                match msg.body {
                    Some(node_outbound::Body::ServerEnvelope(bytes)) => {
                        NodeEvent::Frame { bytes, kind }
                    }
                    Some(node_outbound::Body::Ack(a)) => NodeEvent::Ack {
                        entity: a.entity_id,
                    },
                    Some(node_outbound::Body::Detach(d)) => NodeEvent::Detach {
                        reason: DetachReason::from_wire(d.reason),
                        message: d.message,
                    },
                    // An empty message still shows the node is alive.
                    None => NodeEvent::Ack {
                        entity: self.core.room().map_or(0, |r| r.1),
                    },
                }
            }
            Some(Err(status)) => {
                self.link = None;
                tracing::info!(session = sid, %status, "room stream broke");
                NodeEvent::Ended { broken: true }
            }
            None => {
                self.link = None;
                tracing::debug!(session = sid, "room stream ended");
                NodeEvent::Ended { broken: false }
            }
        }
    }

    /// Executes the core's effects (and those they lead to); `Some` when the session closes.
    async fn apply(&mut self, fx: Vec<Effect>) -> Option<CloseCode> {
        let mut todo: VecDeque<Effect> = fx.into();
        while let Some(e) = todo.pop_front() {
            match e {
                Effect::Send(body) => self.send(body),
                Effect::Pong { client_time_ms } => {
                    self.send(server_envelope::Body::Pong(pb::Pong {
                        client_time_ms,
                        server_time_ms: unix_ms(),
                    }))
                }
                Effect::Deliver { bytes, kind } => {
                    if self.queue.push_frame(bytes, kind) == Pushed::Overflow {
                        self.shared.metrics.overflows.inc();
                        todo.extend(self.core.on_overflow(Instant::now()));
                    }
                }
                Effect::Forward(env) => self.send_to_node(node_inbound::Body::Envelope(env)),
                Effect::KeyframeNeeded => {
                    self.send_to_node(node_inbound::Body::KeyframeNeeded(node::KeyframeNeeded {}));
                }
                Effect::Authenticate(neg) => {
                    // Authentication is inside the handshake deadline too.
                    let deadline = self.conn.accepted() + self.shared.limits.handshake_deadline;
                    let ident = match tokio::time::timeout_at(deadline, identify(&self.shared, neg))
                        .await
                    {
                        Ok(Ok(i)) => match self.conn.negotiated() {
                            Ok(()) => Ok(i),
                            Err(_) => Err((Refusal::TooManySessions, String::new())),
                        },
                        Ok(Err(e)) => Err(e),
                        Err(_) => Err((Refusal::HandshakeTimeout, String::new())),
                    };
                    if let Ok(i) = &ident {
                        tracing::Span::current().record("session_id", i.session_id);
                        tracing::debug!(session = i.session_id, wallet = %i.wallet, "negotiated");
                        let (rx, conn) = self.shared.sessions.register(i.session_id, &i.wallet);
                        self.kick = Some(rx);
                        self.registered = Some((i.session_id, conn));
                    }
                    todo.extend(self.core.on_identity(ident, Instant::now()));
                }
                Effect::Attach {
                    room,
                    cause,
                    entity,
                    avoid,
                } => {
                    if let Some(label) = cause.label() {
                        self.shared.metrics.resume(label);
                    }
                    let Some(ident) = self.core.identity() else {
                        continue;
                    };
                    if cause == AttachCause::Join && !self.conn.allow_join(Instant::now()) {
                        todo.extend(self.core.on_attach_result(
                            AttachResult::Detached {
                                reason: DetachReason::Rejected,
                                message: "too many joins from this address; slow down".into(),
                            },
                            Instant::now(),
                        ));
                        continue;
                    }
                    if let Some((id, _)) = self.registered {
                        self.shared.sessions.set_room(id, Some(&room), None);
                    }
                    self.attach = Some(Box::pin(attach_with_retries(
                        self.shared.clone(),
                        AttachArgs {
                            session_id: ident.session_id,
                            wallet: ident.wallet.clone(),
                            operator: ident.operator,
                            room,
                            cause,
                            entity,
                            avoid,
                        },
                    )));
                }
                Effect::CancelAttach => self.attach = None,
                Effect::DropLink => {
                    self.link = None;
                    self.shared.router.unpin(self.core.session_id());
                    self.sync_registry(None);
                }
                Effect::Invalidate(room) => self.shared.router.invalidate(&room),
                Effect::Status { room, status } => {
                    tracing::debug!(
                        session = self.core.session_id(),
                        room,
                        ?status,
                        "room status"
                    );
                    self.send_status(&room, status);
                }
                Effect::Dropped(reason) => self.shared.metrics.dropped(reason),
                Effect::AuditOperator {
                    op,
                    target,
                    refused,
                } => {
                    tracing::warn!(
                        target: "plaza::audit",
                        session = self.core.session_id(),
                        wallet = self.core.identity().map_or("", |i| i.wallet.as_str()),
                        op = op.as_str_name(),
                        target,
                        outcome = "refused",
                        reason = refused,
                        "operator action"
                    );
                }
                Effect::Resumed(took) => {
                    self.shared.metrics.resume("resumed");
                    self.shared
                        .metrics
                        .resume_seconds
                        .observe(took.as_secs_f64());
                }
                Effect::ResumeFailed => self.shared.metrics.resume("failed"),
                Effect::Close(code) => return Some(code),
            }
        }
        None
    }

    /// Tells the registry where the session is (after an attach answered).
    fn sync_registry(&self, node: Option<&str>) {
        if let Some((id, _)) = self.registered {
            let room = self.core.room().map(|r| r.0);
            self.shared
                .sessions
                .set_room(id, room, node.filter(|_| room.is_some()));
        }
    }

    /// Sends to the node; a full channel (the node is behind) or a stopped room drops it.
    fn send_to_node(&mut self, body: node_inbound::Body) {
        if let Some(link) = &mut self.link {
            let msg = NodeInbound { body: Some(body) };
            if link.up.try_send(msg).is_err() {
                self.shared.metrics.dropped("node_backlog");
            }
        }
    }

    /// Ends the session: detach from the room, keep a resume entry if the client may come back,
    /// and queue the close frame.
    async fn finish(&mut self, code: CloseCode) {
        self.attach = None;
        self.link = None;
        if let Some((id, conn)) = self.registered.take() {
            self.shared.sessions.remove(id, conn);
        }
        let Some(ident) = self.core.identity().cloned() else {
            self.queue.close(code.code(), code.name());
            return;
        };
        self.shared.router.unpin(ident.session_id);
        let may_resume =
            matches!(code, CloseCode::Normal | CloseCode::GoingAway) && !self.core.is_leaving();
        if !may_resume && self.shared_entry.is_some() {
            self.shared.resume.unshare(&ident.resume_token);
        }
        if may_resume {
            let room = self.core.room().map(|(r, e)| (r.to_owned(), e));
            self.shared.resume.put(
                ident.resume_token.clone(),
                ResumeEntry {
                    session_id: ident.session_id,
                    wallet: ident.wallet.clone(),
                    room: room.as_ref().map(|r| r.0.clone()),
                    entity: room.as_ref().map_or(0, |r| r.1),
                },
            );
        }
        self.queue.close(code.code(), code.name());
    }

    /// Tells the client its room is moving or back.
    fn send_status(&mut self, room: &str, status: RoomStatus) {
        let (kind, reconnect_after_ms) = match status {
            RoomStatus::Moving => (pb::RoomStatusKind::Moving, 0),
            RoomStatus::Back => (pb::RoomStatusKind::Back, 0),
            RoomStatus::Reconnect { after_ms } => (pb::RoomStatusKind::Reconnect, after_ms),
        };
        self.send(server_envelope::Body::RoomStatus(pb::RoomStatus {
            room_id: room.to_owned(),
            kind: kind as i32,
            reconnect_after_ms,
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
            .push_frame(Bytes::from(env.encode_to_vec()), FrameKind::Control);
    }
}

/// Who a negotiate is: the session of its resume token, or a fresh authenticated one.
///
/// A resume token is bound to its identity: presented with an `auth_token`, that token must
/// prove the same identity ([`Purpose::Resume`]); presented without one, only a guest session
/// (which has no credentials) is resumed. Either way the presented token is used up.
async fn identify(shared: &Shared, neg: pb::Negotiate) -> Result<Identity, (Refusal, String)> {
    let refuse = |e: AuthError| e.verdict();
    if !neg.resume_token.is_empty() {
        match shared.resume.take_shared(&neg.resume_token).await {
            Some(entry) => {
                let mut operator = false;
                if neg.auth_token.is_empty() {
                    if !is_guest(&entry.wallet) {
                        shared.metrics.resume("identity_mismatch");
                        return Err(refuse(AuthError::ResumeMismatch));
                    }
                    // A guest's credentials are its resume token; the ban list still applies.
                    shared
                        .auth
                        .authenticate(
                            &format!("guest:{}", &entry.wallet["guest-".len()..]),
                            Purpose::Resume,
                        )
                        .await
                        .map_err(|e| match e {
                            AuthError::InvalidToken(_) | AuthError::Required(_) => {
                                refuse(AuthError::ResumeMismatch)
                            }
                            other => refuse(other),
                        })?;
                } else {
                    let who = shared
                        .auth
                        .authenticate(&neg.auth_token, Purpose::Resume)
                        .await
                        .map_err(refuse)?;
                    if who.wallet != entry.wallet {
                        shared.metrics.resume("identity_mismatch");
                        return Err(refuse(AuthError::ResumeMismatch));
                    }
                    operator = who.operator;
                }
                return Ok(Identity {
                    session_id: entry.session_id,
                    wallet: entry.wallet,
                    // The role comes from the credentials presented now (a guest has none).
                    operator,
                    // A fresh token: the presented one is used up (the session's live entry,
                    // shared in the directory while it is in a room, is under the new one).
                    resume_token: shared.resume.new_token(),
                    room: entry.room.map(|r| (r, entry.entity)),
                });
            }
            None => shared.metrics.resume("unknown_token"),
        }
    }
    let ident = shared
        .auth
        .authenticate(&neg.auth_token, Purpose::Login)
        .await
        .map_err(refuse)?;
    Ok(Identity {
        session_id: new_session_id(),
        wallet: ident.wallet,
        operator: ident.operator,
        resume_token: shared.resume.new_token(),
        room: None,
    })
}

async fn next_attach(a: &mut Option<AttachFuture>) -> (AttachResult, Option<NodeLink>) {
    match a {
        Some(f) => f.as_mut().await,
        None => std::future::pending().await,
    }
}

async fn next_kick(kick: &mut Option<tokio::sync::oneshot::Receiver<()>>) {
    match kick {
        Some(rx) => {
            if rx.await.is_err() {
                // The registry dropped the sender without a kick: never fires.
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
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
