//! The `RoomHost` service of a node: one bidirectional stream per attached session.
//!
//! The first inbound message must be an `AttachRequest`; the service finds (or spawns) the
//! room's actor and joins the session. Every later inbound message goes to the actor through
//! the session's [`RoomUplink`]; the end of the inbound stream drops it, which detaches the
//! session. Outbound, the actor writes into a bounded channel that backs the response stream.
//!
//! Two transports run the same attach logic: the tonic `RoomHost/Attach` stream (gateways in
//! other processes; one forwarder task per session feeds the stream into the uplink), and
//! [`RoomHostService::attach_local`] for a gateway in this process (`plaza up`), which skips
//! the HTTP/2 hop and hands the gateway the uplink itself (no inbound channel, no task).

use std::pin::Pin;

use futures::Stream;
use plaza_node_proto::room_host_server::RoomHost;
use plaza_node_proto::{
    AttachRequest, NodeInbound, NodeOutbound, PresenceSourceReply, PresenceSourceRequest,
    StatusReply, StatusRequest, node_inbound,
};
use plaza_room_core::SessionId;
use ractor::ActorRef;
use tokio::sync::mpsc;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

pub use plaza_proto::room_id::{MAX_ROOM_ID_LEN, valid_room_id};

use crate::room::RoomMsg;
use crate::supervisor::{Rooms, RoomsError};

/// Attachment ids, unique in this process.
static NEXT_LINK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The `RoomHost` implementation.
#[derive(Clone)]
pub struct RoomHostService {
    node_id: String,
    rooms: Rooms,
    /// Capacity of each session's outbound channel (frames).
    session_queue: usize,
    metrics: crate::metrics::NodeMetrics,
    draining: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// For the presence-source calls.
    directory: plaza_directory::SharedDirectory,
}

impl std::fmt::Debug for RoomHostService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoomHostService")
            .field("node_id", &self.node_id)
            .field("session_queue", &self.session_queue)
            .finish_non_exhaustive()
    }
}

impl RoomHostService {
    /// A service over `rooms`.
    pub fn new(
        node_id: String,
        rooms: Rooms,
        session_queue: usize,
        metrics: crate::metrics::NodeMetrics,
        draining: std::sync::Arc<std::sync::atomic::AtomicBool>,
        directory: plaza_directory::SharedDirectory,
    ) -> Self {
        Self {
            node_id,
            rooms,
            session_queue,
            metrics,
            draining,
            directory,
        }
    }

    /// This node's id as registered in the directory.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// Attaches a session without gRPC (a gateway in this process): the same checks and join
    /// as `RoomHost/Attach`, with `attach` its first message. The returned [`RoomUplink`]
    /// takes the rest of what the request stream would carry, straight into the room's
    /// mailbox, and dropping it detaches the session, as the end of the request stream does;
    /// the returned receiver is the response stream and ends when the room drops the session.
    ///
    /// Errors are the `Status` the gRPC call would return. Runs in a `node.attach` span, a
    /// child of the caller's current span.
    pub async fn attach_local(
        &self,
        attach: AttachRequest,
    ) -> Result<(RoomUplink, mpsc::Receiver<NodeOutbound>), Status> {
        let span = tracing::info_span!("node.attach", node = %self.node_id);
        self.join(attach).instrument(span).await
    }
}

/// One attached session's way into its room: what the attach stream carries after the attach
/// request, cast into the room actor's mailbox.
///
/// Closing it ([`RoomUplink::close`], or dropping it) detaches the session from the room
/// exactly once, for this attachment only (its `link_id`: the detach of an older stream never
/// detaches a newer one of the same session). Once the room has stopped, nothing more is sent,
/// the detach included.
#[derive(Debug)]
pub struct RoomUplink {
    room: ActorRef<RoomMsg>,
    session: SessionId,
    link_id: u64,
    /// Neither closed nor found stopped.
    open: bool,
}

/// The room stopped: a [`RoomUplink`] takes nothing more.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the room stopped")]
pub struct RoomStopped;

impl RoomUplink {
    /// The uplink of attachment `link_id` of `session` in `room`.
    pub fn new(room: ActorRef<RoomMsg>, session: SessionId, link_id: u64) -> Self {
        Self {
            room,
            session,
            link_id,
            open: true,
        }
    }

    /// Casts `msg` into the room without waiting: an envelope is a [`RoomMsg::Input`], a
    /// keyframe request a [`RoomMsg::KeyframeNeeded`]; anything else (a second attach
    /// request, an empty message) is ignored. `Err` once the room has stopped, or after
    /// [`RoomUplink::close`].
    pub fn send(&mut self, msg: NodeInbound) -> Result<(), RoomStopped> {
        if !self.open {
            return Err(RoomStopped);
        }
        let session = self.session;
        let m = match msg.body {
            Some(node_inbound::Body::Envelope(envelope)) => RoomMsg::Input { session, envelope },
            Some(node_inbound::Body::KeyframeNeeded(_)) => RoomMsg::KeyframeNeeded { session },
            Some(node_inbound::Body::Attach(_)) | None => return Ok(()),
        };
        self.room.cast(m).map_err(|_| {
            self.open = false;
            RoomStopped
        })
    }

    /// Detaches the session (the end of its stream); the first call only.
    pub fn close(&mut self) {
        if std::mem::replace(&mut self.open, false) {
            let _ = self.room.cast(RoomMsg::Detach {
                session: self.session,
                link_id: self.link_id,
            });
        }
    }
}

impl Drop for RoomUplink {
    fn drop(&mut self) {
        self.close();
    }
}

type OutStream = Pin<Box<dyn Stream<Item = Result<NodeOutbound, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl RoomHost for RoomHostService {
    type AttachStream = OutStream;

    async fn attach(
        &self,
        request: Request<Streaming<NodeInbound>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let parent = crate::trace::extract(request.metadata());
        let span = tracing::info_span!("node.attach", node = %self.node_id);
        let _ = span.set_parent(parent);
        self.attach_grpc(request.into_inner())
            .instrument(span)
            .await
    }

    async fn status(&self, _req: Request<StatusRequest>) -> Result<Response<StatusReply>, Status> {
        let rooms = self.rooms.list().await;
        Ok(Response::new(StatusReply {
            node_id: self.node_id.clone(),
            rooms: rooms.len() as u32,
            sessions: self.metrics.sessions.get().max(0) as u32,
            draining: self.draining.load(std::sync::atomic::Ordering::Relaxed),
        }))
    }

    async fn presence_source(
        &self,
        req: Request<PresenceSourceRequest>,
    ) -> Result<Response<PresenceSourceReply>, Status> {
        use plaza_directory::{DirectoryError, sources};
        let r = req.into_inner();
        let to_status = |e: DirectoryError| match e {
            DirectoryError::Invalid(m) => Status::invalid_argument(m),
            DirectoryError::NotFound(m) => Status::not_found(m),
            DirectoryError::Unavailable(m) => Status::unavailable(m),
            e => Status::aborted(e.to_string()),
        };
        let source = sources::external(&r.source).map_err(to_status)?;
        let entry = sources::apply(&*self.directory, &r.wallet, source, r.hold)
            .await
            .map_err(to_status)?;
        Ok(Response::new(match entry {
            Some(e) => PresenceSourceReply {
                online: true,
                room: e.room,
                sources: sources::names(e.sources)
                    .into_iter()
                    .map(str::to_owned)
                    .collect(),
            },
            None => PresenceSourceReply::default(),
        }))
    }
}

impl RoomHostService {
    async fn attach_grpc(
        &self,
        mut inbound: Streaming<NodeInbound>,
    ) -> Result<Response<OutStream>, Status> {
        let first = inbound
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("empty attach stream"))?;
        let Some(node_inbound::Body::Attach(attach)) = first.body else {
            return Err(Status::invalid_argument(
                "first message must be an attach request",
            ));
        };
        let (up, rx) = self.join(attach).await?;
        tokio::spawn(forward(inbound, up));
        let out = ReceiverStream::new(rx).map(Ok::<_, Status>);
        Ok(Response::new(Box::pin(out)))
    }

    /// The attach itself, whatever the transport: checks the room id, finds or spawns the
    /// room, joins the session with a fresh outbound channel, and returns the session's uplink
    /// into the room with that channel's receiver.
    async fn join(
        &self,
        attach: AttachRequest,
    ) -> Result<(RoomUplink, mpsc::Receiver<NodeOutbound>), Status> {
        if !valid_room_id(&attach.room_id) {
            return Err(Status::invalid_argument("invalid room id"));
        }
        let room = self
            .rooms
            .get_or_spawn(&attach.room_id)
            .await
            .map_err(|e| match e {
                RoomsError::PlacedElsewhere => Status::failed_precondition(e.to_string()),
                RoomsError::Draining => Status::unavailable(e.to_string()),
                RoomsError::Directory(_) => Status::unavailable(e.to_string()),
                RoomsError::Spawn(_) => Status::internal(e.to_string()),
            })?;
        let session = attach.session_id;
        let (tx, rx) = mpsc::channel(self.session_queue);
        let link_id = NEXT_LINK.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        room.cast(RoomMsg::Join {
            session,
            wallet: attach.wallet,
            tx,
            entity: if attach.resume {
                attach.resume_entity
            } else {
                0
            },
            link_id,
            operator: attach.operator,
        })
        .map_err(|_| Status::unavailable("room stopped; retry"))?;
        tracing::info!(room = %attach.room_id, session, resume = attach.resume, "session attached");
        Ok((RoomUplink::new(room, session, link_id), rx))
    }
}

/// Feeds a gRPC attach stream into its session's uplink until the stream ends or breaks (then
/// the uplink's drop detaches the session) or the room stops.
async fn forward(mut inbound: Streaming<NodeInbound>, mut up: RoomUplink) {
    while let Some(Ok(msg)) = inbound.next().await {
        if up.send(msg).is_err() {
            break;
        }
    }
}

#[cfg(test)]
mod tests;
