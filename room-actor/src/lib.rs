//! The Plaza room node: room actors (ractor) around `plaza-room-core`, their supervisor, and
//! the tonic `RoomHost` service that gateways attach sessions through.
//!
//! # Layout
//! * [`room`]: the room actor (mailbox, fixed-timestep ticker, delivery, directory writes).
//! * [`rooms`]: the room supervisor (spawn on first attach, forget on stop or failure).
//! * [`service`]: the `RoomHost` gRPC service.
//! * [`metrics`]: the node's Prometheus metrics.
//! * this module: [`Node`], which binds the gRPC listener, registers in the directory and
//!   heartbeats, and shuts everything down in order.

pub mod metrics;
pub mod room;
pub mod rooms;
pub mod service;
mod trace;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use plaza_directory::{NodeInfo, SharedDirectory};
use plaza_proto::node::room_host_server::RoomHostServer;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::metrics::NodeMetrics;
use crate::room::RoomActorConfig;
use crate::rooms::{Rooms, RoomsArgs};
use crate::service::RoomHostService;

/// How a node runs.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This node's id (unique in the cluster).
    pub node_id: String,
    /// Where the gRPC service listens (`127.0.0.1:0` for an ephemeral port).
    pub listen: SocketAddr,
    /// The address gateways dial, if different from the bound one (e.g. a pod DNS name).
    pub advertise: Option<String>,
    /// How rooms run.
    pub room: RoomActorConfig,
    /// Placement lease TTL.
    pub lease_ttl: Duration,
    /// Node heartbeat TTL in the directory (renewed at a third of it).
    pub heartbeat_ttl: Duration,
    /// Capacity of each session's outbound channel, frames.
    pub session_queue: usize,
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            node_id: "node-1".into(),
            listen: ([127, 0, 0, 1], 0).into(),
            advertise: None,
            room: RoomActorConfig::default(),
            lease_ttl: Duration::from_secs(10),
            heartbeat_ttl: Duration::from_secs(10),
            session_queue: 64,
        }
    }
}

/// Errors starting a node.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The listener could not be bound.
    #[error("bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The supervisor could not start.
    #[error(transparent)]
    Rooms(#[from] rooms::RoomsError),
    /// Registration in the directory failed.
    #[error("directory: {0}")]
    Directory(#[from] plaza_directory::DirectoryError),
}

/// A running node.
pub struct Node {
    addr: SocketAddr,
    node_id: String,
    rooms: Rooms,
    shutdown: watch::Sender<bool>,
    server: JoinHandle<()>,
    heartbeat: JoinHandle<()>,
    directory: SharedDirectory,
    draining: Arc<AtomicBool>,
}

impl Node {
    /// Binds the listener, starts the supervisor and the gRPC server, registers in the directory.
    pub async fn start(
        cfg: NodeConfig,
        directory: SharedDirectory,
        metrics: NodeMetrics,
    ) -> Result<Self, NodeError> {
        let listener = TcpListener::bind(cfg.listen)
            .await
            .map_err(|source| NodeError::Bind {
                addr: cfg.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| NodeError::Bind {
            addr: cfg.listen,
            source,
        })?;
        let (rooms, _sup) = Rooms::start(RoomsArgs {
            node_id: cfg.node_id.clone(),
            room_cfg: cfg.room.clone(),
            metrics: metrics.clone(),
            directory: directory.clone(),
            lease_ttl: cfg.lease_ttl,
        })
        .await?;
        let draining = Arc::new(AtomicBool::new(false));
        let svc = RoomHostService::new(
            cfg.node_id.clone(),
            rooms.clone(),
            cfg.session_queue,
            metrics.clone(),
            draining.clone(),
        );
        let (shutdown, mut rx) = watch::channel(false);
        // TCP_NODELAY: tonic leaves Nagle on for a listener we bind ourselves (STACK.md G3).
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let server = tokio::spawn(async move {
            let res = tonic::transport::Server::builder()
                .http2_keepalive_interval(Some(Duration::from_secs(10)))
                .http2_keepalive_timeout(Some(Duration::from_secs(20)))
                .max_concurrent_streams(Some(100_000))
                .initial_stream_window_size(Some(256 * 1024))
                .initial_connection_window_size(Some(16 * 1024 * 1024))
                .add_service(RoomHostServer::new(svc))
                .serve_with_incoming_shutdown(incoming, async move {
                    let _ = rx.wait_for(|s| *s).await;
                })
                .await;
            if let Err(e) = res {
                tracing::error!(error = %e, "room host server stopped with an error");
            }
        });
        let advertise = cfg.advertise.clone().unwrap_or_else(|| addr.to_string());
        let info = NodeInfo {
            id: cfg.node_id.clone(),
            addr: advertise,
            load: 0,
            draining: false,
            heartbeat_until_ms: 0,
        };
        let ttl_ms = cfg.heartbeat_ttl.as_millis() as u64;
        directory.register_node(info.clone(), ttl_ms).await?;
        let heartbeat = {
            let directory = directory.clone();
            let metrics = metrics.clone();
            let draining = draining.clone();
            let period = cfg.heartbeat_ttl / 3;
            tokio::spawn(async move {
                let mut iv = tokio::time::interval(period);
                loop {
                    iv.tick().await;
                    let mut info = info.clone();
                    info.load = metrics.sessions.get().max(0) as u32;
                    info.draining = draining.load(std::sync::atomic::Ordering::Relaxed);
                    if let Err(e) = directory.register_node(info, ttl_ms).await {
                        tracing::warn!(error = %e, "node heartbeat failed");
                        metrics.directory_error(e.code());
                    }
                }
            })
        };
        tracing::info!(node = %cfg.node_id, %addr, "room node listening");
        Ok(Self {
            addr,
            node_id: cfg.node_id,
            rooms,
            shutdown,
            server,
            heartbeat,
            directory,
            draining,
        })
    }

    /// The bound gRPC address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// This node's id.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The room supervisor.
    pub fn rooms(&self) -> &Rooms {
        &self.rooms
    }

    /// Stops taking new rooms.
    pub fn set_draining(&self) {
        self.draining
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.rooms.set_draining(true);
    }

    /// Stops rooms and the server, deregisters from the directory.
    pub async fn shutdown(self) {
        self.set_draining();
        self.heartbeat.abort();
        self.rooms.stop();
        let _ = self.shutdown.send(true);
        // Streams end when their room actors drop their senders; give the server a moment.
        let _ = tokio::time::timeout(Duration::from_secs(5), self.server).await;
        if let Err(e) = self.directory.deregister_node(&self.node_id).await {
            tracing::warn!(error = %e, "deregister failed");
        }
    }
}
