//! The gateway router actor: owns the session → room-node routes and one HTTP/2 channel per
//! room node.
//!
//! A node that runs in the gateway's own process (`plaza up`) is reached through a
//! [`LocalNode`] instead: sessions attach to it with the same messages and no HTTP/2 stream
//! (a [`LocalUplink`] into the room's mailbox, a channel back); other nodes of the cluster are
//! still reached over gRPC.
//!
//! Pinning resolves the room's placement in the directory (placing it on a live node if it has
//! none), reuses the node's channel, and records the route. A route is dropped when its session
//! ends; `invalidate` forgets a room's cached placement after its stream broke or an attach
//! failed, so the next pin resolves afresh.
//!
//! Failover: the node of an invalidated room is *suspected* for [`SUSPECT_FOR`]. While the room
//! still has a live lease, pins go to its owner (only the owner may run it); once the lease
//! lapsed, a new placement skips suspected nodes, so a node killed with `kill -9` (whose
//! heartbeat has not lapsed yet) does not get the room back. If every live node is suspected,
//! the directory's own pick is used.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use plaza_directory::{NodeInfo, SharedDirectory, rendezvous_pick};
use plaza_node_proto::room_host_client::RoomHostClient;
use plaza_node_proto::{AttachRequest, NodeInbound, NodeOutbound};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

/// How long the node of an invalidated room is skipped by new placements.
pub const SUSPECT_FOR: Duration = Duration::from_secs(3);

/// What [`LocalNode::attach`] returns: the session's two halves of the link, or the `Status`
/// the gRPC call would have failed with.
pub type LocalAttach = Pin<Box<dyn Future<Output = Result<LocalLink, tonic::Status>> + Send>>;

/// A session attached to a node of this process.
pub struct LocalLink {
    /// Into the room: what the request stream would carry after the attach request.
    pub uplink: Box<dyn LocalUplink>,
    /// From the room: what the response stream would carry (ack, frames with their
    /// droppable/keyframe flags, detach); it ends when the node drops the session.
    pub downlink: mpsc::Receiver<NodeOutbound>,
}

/// The room stopped: a [`LocalUplink`] takes nothing more (as a closed request stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the room stopped")]
pub struct RoomStopped;

/// A session's way into its room on a node of this process: each message goes straight into
/// the room's mailbox (no channel and no forwarder task between them).
///
/// Dropping it detaches the session, once, as the end of the `RoomHost/Attach` request stream
/// does.
pub trait LocalUplink: Send + 'static {
    /// Delivers `msg` (an envelope or a keyframe request; anything else is ignored) to the
    /// room without waiting. `Err` once the room has stopped: `msg` is dropped.
    fn send(&mut self, msg: NodeInbound) -> Result<(), RoomStopped>;
}

/// A room node in the gateway's own process, attached to without gRPC.
///
/// The contract is the `RoomHost/Attach` stream's: `request` is the stream's first message;
/// the returned [`LocalLink`] carries the rest both ways (its uplink's drop is the end of the
/// request stream, its downlink's end the end of the response stream).
pub trait LocalNode: Send + Sync + 'static {
    /// The node's id as registered in the directory.
    fn node_id(&self) -> &str;
    /// Attaches a session.
    fn attach(&self, request: AttachRequest) -> LocalAttach;
}

/// How a route reaches its node.
#[derive(Clone)]
pub enum Transport {
    /// Over the node's shared HTTP/2 channel.
    Grpc(RoomHostClient<Channel>),
    /// In this process.
    Local(Arc<dyn LocalNode>),
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Grpc(_) => f.write_str("Grpc"),
            Self::Local(n) => write!(f, "Local({})", n.node_id()),
        }
    }
}

/// Where a session is pinned.
#[derive(Clone, Debug)]
pub struct Route {
    /// The room node's id.
    pub node_id: String,
    /// Its gRPC address.
    pub addr: String,
    /// How to reach it.
    pub transport: Transport,
}

/// Why a pin failed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum PinError {
    /// No live node can take the room.
    #[error("no room node available")]
    NoNode,
    /// The directory failed.
    #[error("directory: {0}")]
    Directory(String),
    /// The node's address is not a valid endpoint.
    #[error("bad node address {0}")]
    BadAddress(String),
    /// The router is gone.
    #[error("router unavailable")]
    Unavailable,
    /// The room's lease is live on the node the pin was asked to avoid (a stalled node): the
    /// room cannot move yet.
    #[error("the room's lease is live on the avoided node")]
    OwnerStalled,
    /// The directory failed moments ago and answers again: an unplaced room is not placed yet,
    /// so the activation that ran it (frozen while its lease was unconfirmed) can reclaim it in
    /// place with its state, instead of a new, empty activation elsewhere.
    #[error("the directory just came back; the room's owner gets the first claim")]
    DirectoryReturning,
}

/// How long after a directory failure the router places no unplaced room (see
/// [`PinError::DirectoryReturning`]): a frozen room retries its renewal every 250 ms, each try
/// bounded by the directory's 2 s response timeout.
pub const PLACE_GRACE_AFTER_DIRECTORY_ERROR: Duration = Duration::from_secs(3);

/// Router messages.
#[derive(Debug)]
pub enum RouterMsg {
    /// Pin `session` to the node of `room`.
    Pin {
        /// The session.
        session: u64,
        /// The room.
        room: String,
        /// A node not to pin to while the room's lease on it is live (a stalled node), and
        /// not to place the room on.
        avoid: Option<String>,
        /// Answer.
        reply: RpcReplyPort<Result<Route, PinError>>,
    },
    /// The session ended.
    Unpin {
        /// The session.
        session: u64,
    },
    /// Forget the cached placement of `room`.
    Invalidate {
        /// The room.
        room: String,
    },
    /// Number of pinned sessions.
    Count {
        /// Answer.
        reply: RpcReplyPort<usize>,
    },
}

/// The router actor.
#[derive(Debug)]
pub struct RouterActor;

/// Router state.
pub struct RouterState {
    directory: SharedDirectory,
    /// session → (room, node id).
    routes: HashMap<u64, (String, String)>,
    /// room → node id (cached placement).
    placements: HashMap<String, String>,
    /// node id → route (address and channel).
    nodes: HashMap<String, Route>,
    /// node id → until when new placements skip it.
    suspects: HashMap<String, Instant>,
    /// The node in this process, if any.
    local: Option<Arc<dyn LocalNode>>,
    /// Dial nodes over TLS with this (`https://`), else plain HTTP/2.
    node_tls: Option<ClientTlsConfig>,
    /// When a directory call of the router last failed.
    directory_failed_at: Option<Instant>,
}

/// What the router starts with.
pub struct RouterArgs {
    /// The directory (placements, live nodes).
    pub directory: SharedDirectory,
    /// The node in this process, if any.
    pub local: Option<Arc<dyn LocalNode>>,
    /// Dial nodes over TLS (`https://`, the node's certificate checked against the address it
    /// advertises; with a client identity for mTLS); `None` = plain HTTP/2.
    pub node_tls: Option<ClientTlsConfig>,
}

impl Actor for RouterActor {
    type Msg = RouterMsg;
    type State = RouterState;
    type Arguments = RouterArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<RouterMsg>,
        args: RouterArgs,
    ) -> Result<RouterState, ActorProcessingErr> {
        Ok(RouterState {
            directory: args.directory,
            routes: HashMap::new(),
            placements: HashMap::new(),
            nodes: HashMap::new(),
            suspects: HashMap::new(),
            local: args.local,
            node_tls: args.node_tls,
            directory_failed_at: None,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<RouterMsg>,
        msg: RouterMsg,
        state: &mut RouterState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            RouterMsg::Pin {
                session,
                room,
                avoid,
                reply,
            } => {
                if reply.is_closed() {
                    return Ok(());
                }
                let res = state.pin(session, &room, avoid.as_deref()).await;
                let _ = reply.send(res);
            }
            RouterMsg::Unpin { session } => {
                state.routes.remove(&session);
            }
            RouterMsg::Invalidate { room } => {
                if let Some(node) = state.placements.remove(&room) {
                    state.suspects.insert(node, Instant::now() + SUSPECT_FOR);
                }
            }
            RouterMsg::Count { reply } => {
                let _ = reply.send(state.routes.len());
            }
        }
        Ok(())
    }
}

impl RouterState {
    async fn pin(
        &mut self,
        session: u64,
        room: &str,
        avoid: Option<&str>,
    ) -> Result<Route, PinError> {
        let res = self.pin_inner(session, room, avoid).await;
        if let Err(PinError::Directory(_)) = &res {
            self.directory_failed_at = Some(Instant::now());
        }
        res
    }

    async fn pin_inner(
        &mut self,
        session: u64,
        room: &str,
        avoid: Option<&str>,
    ) -> Result<Route, PinError> {
        let cached = self
            .placements
            .get(room)
            .filter(|n| avoid != Some(n.as_str()));
        let node_id = match cached {
            Some(n) if self.nodes.contains_key(n) => n.clone(),
            _ => {
                let d = &self.directory;
                let node = match d
                    .resolve(room)
                    .await
                    .map_err(|e| PinError::Directory(e.to_string()))?
                {
                    // Only the lease holder may run the room: a stalled holder is waited out.
                    Some(p) if avoid == Some(p.node.as_str()) => {
                        return Err(PinError::OwnerStalled);
                    }
                    Some(p) => {
                        let nodes = d
                            .live_nodes()
                            .await
                            .map_err(|e| PinError::Directory(e.to_string()))?;
                        match nodes.into_iter().find(|n| n.id == p.node) {
                            Some(n) => n,
                            None => d.place(room).await.map_err(|_| PinError::NoNode)?,
                        }
                    }
                    None if self
                        .directory_failed_at
                        .is_some_and(|t| t.elapsed() < PLACE_GRACE_AFTER_DIRECTORY_ERROR) =>
                    {
                        return Err(PinError::DirectoryReturning);
                    }
                    None => self.place_unsuspected(room, avoid).await?,
                };
                if self.nodes.get(&node.id).is_none_or(|r| r.addr != node.addr) {
                    let route = match &self.local {
                        Some(l) if l.node_id() == node.id => Route {
                            node_id: node.id.clone(),
                            addr: node.addr.clone(),
                            transport: Transport::Local(l.clone()),
                        },
                        _ => connect(&node.id, &node.addr, self.node_tls.as_ref())?,
                    };
                    self.nodes.insert(node.id.clone(), route);
                }
                self.placements.insert(room.to_owned(), node.id.clone());
                node.id
            }
        };
        let route = self.nodes.get(&node_id).cloned().ok_or(PinError::NoNode)?;
        self.routes.insert(session, (room.to_owned(), node_id));
        Ok(route)
    }
}

impl RouterState {
    /// A node for an unplaced room: the rendezvous pick among live, non-draining nodes that
    /// are not suspected, else the directory's own pick.
    async fn place_unsuspected(
        &mut self,
        room: &str,
        avoid: Option<&str>,
    ) -> Result<NodeInfo, PinError> {
        let now = Instant::now();
        self.suspects.retain(|_, until| *until > now);
        let d = &self.directory;
        if !self.suspects.is_empty() || avoid.is_some() {
            let nodes: Vec<NodeInfo> = d
                .live_nodes()
                .await
                .map_err(|e| PinError::Directory(e.to_string()))?
                .into_iter()
                .filter(|n| !self.suspects.contains_key(&n.id) && avoid != Some(n.id.as_str()))
                .collect();
            // `live_nodes` already dropped lapsed heartbeats; 0 keeps every one of them.
            if let Some(n) = rendezvous_pick(room, &nodes, 0) {
                return Ok(n.clone());
            }
        }
        d.place(room).await.map_err(|_| PinError::NoNode)
    }
}

fn connect(node_id: &str, addr: &str, tls: Option<&ClientTlsConfig>) -> Result<Route, PinError> {
    let bare = addr
        .strip_prefix("http://")
        .or_else(|| addr.strip_prefix("https://"))
        .unwrap_or(addr);
    // The scheme follows the gateway's configuration, not the advertised string: a gateway
    // with node TLS never dials a node in the clear.
    let uri = match tls {
        Some(_) => format!("https://{bare}"),
        None => format!("http://{bare}"),
    };
    let mut ep = Endpoint::from_shared(uri).map_err(|_| PinError::BadAddress(addr.to_owned()))?;
    if let Some(tls) = tls {
        // The server name checked is the advertised host: an IP SAN for an IP, a DNS SAN for
        // a name (tonic takes it from the URI).
        ep = ep
            .tls_config(tls.clone())
            .map_err(|_| PinError::BadAddress(addr.to_owned()))?;
    }
    let channel = ep
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(3))
        // A node that stops answering HTTP/2 pings (paused, partitioned) breaks its streams
        // within 2 + 4 s; session streams notice silence sooner (`Limits::node_silence`, 3 s).
        .http2_keep_alive_interval(Duration::from_secs(2))
        .keep_alive_timeout(Duration::from_secs(4))
        .keep_alive_while_idle(true)
        .initial_stream_window_size(256 * 1024)
        .initial_connection_window_size(16 * 1024 * 1024)
        .connect_lazy();
    Ok(Route {
        node_id: node_id.to_owned(),
        addr: addr.to_owned(),
        transport: Transport::Grpc(RoomHostClient::new(channel)),
    })
}

/// A handle to the router actor.
#[derive(Clone, Debug)]
pub struct Router {
    actor: ActorRef<RouterMsg>,
}

impl Router {
    /// Starts the router.
    pub async fn start(directory: SharedDirectory) -> Result<Self, PinError> {
        Self::start_with(RouterArgs {
            directory,
            local: None,
            node_tls: None,
        })
        .await
    }

    /// Starts the router with the node of this process, if any.
    pub async fn start_with(args: RouterArgs) -> Result<Self, PinError> {
        let (actor, _) = Actor::spawn(None, RouterActor, args)
            .await
            .map_err(|_| PinError::Unavailable)?;
        Ok(Self { actor })
    }

    /// Pins `session` to the node of `room`; with `avoid`, never to that node while the room's
    /// lease on it is live ([`PinError::OwnerStalled`]), and a new placement skips it.
    pub async fn pin(
        &self,
        session: u64,
        room: &str,
        avoid: Option<&str>,
    ) -> Result<Route, PinError> {
        let room = room.to_owned();
        let avoid = avoid.map(str::to_owned);
        match self
            .actor
            .call(
                |reply| RouterMsg::Pin {
                    session,
                    room,
                    avoid,
                    reply,
                },
                Some(Duration::from_secs(10)),
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(r)) => r,
            _ => Err(PinError::Unavailable),
        }
    }

    /// Drops the session's route.
    pub fn unpin(&self, session: u64) {
        let _ = self.actor.cast(RouterMsg::Unpin { session });
    }

    /// Forgets the cached placement of `room`.
    pub fn invalidate(&self, room: &str) {
        let _ = self.actor.cast(RouterMsg::Invalidate {
            room: room.to_owned(),
        });
    }

    /// Number of pinned sessions.
    pub async fn count(&self) -> usize {
        match self
            .actor
            .call(
                |reply| RouterMsg::Count { reply },
                Some(Duration::from_secs(5)),
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(n)) => n,
            _ => 0,
        }
    }

    /// Stops the router.
    pub fn stop(&self) {
        self.actor.stop(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plaza_directory::MemoryDirectory;
    use plaza_directory::test_util::FaultyDirectory;
    use plaza_directory::types::NodeInfo;

    /// F3: right after the directory failed, an unplaced room is not placed (its frozen owner
    /// reclaims it first); a placed room still routes, and after the grace placement resumes.
    #[tokio::test]
    async fn no_room_is_placed_right_after_a_directory_failure() {
        let faulty = Arc::new(FaultyDirectory::new(Arc::new(MemoryDirectory::new())));
        let dir: SharedDirectory = faulty.clone();
        let node = NodeInfo {
            id: "n1".into(),
            addr: "127.0.0.1:1".into(),
            load: 0,
            draining: false,
            heartbeat_until_ms: 0,
        };
        dir.register_node(node, 60_000).await.unwrap();
        dir.claim("placed", "n1", 60_000).await.unwrap();
        let router = Router::start(dir.clone()).await.unwrap();

        faulty.fail("resolve", true);
        let e = router.pin(1, "fresh", None).await.unwrap_err();
        assert!(matches!(e, PinError::Directory(_)), "{e}");
        faulty.fail("resolve", false);
        let e = router.pin(1, "fresh", None).await.unwrap_err();
        assert!(matches!(e, PinError::DirectoryReturning), "{e}");
        // A room that has a placement is routed to it at once.
        let r = router.pin(2, "placed", None).await.unwrap();
        assert_eq!(r.node_id, "n1");

        tokio::time::sleep(PLACE_GRACE_AFTER_DIRECTORY_ERROR).await;
        let r = router.pin(1, "fresh", None).await.unwrap();
        assert_eq!(r.node_id, "n1", "placed once the grace is over");
        router.stop();
    }
}
