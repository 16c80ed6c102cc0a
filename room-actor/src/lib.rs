//! The Plaza room node: room actors (ractor) around `plaza-room-core`, their supervisor, and
//! the tonic `RoomHost` service that gateways attach sessions through.
//!
//! # Layout
//! * [`room`]: the room actor (mailbox, fixed-timestep ticker, delivery, directory writes).
//! * [`supervisor`]: the room supervisor (spawn on first attach, forget on stop or failure).
//! * [`service`]: the `RoomHost` gRPC service.
//! * [`handoff`]: the drain handoff state (members, wallets and the room core's state) and
//!   its checked decoding.
//! * [`metrics`]: the node's Prometheus metrics.
//! * [`admin`]: operator calls on a room (view, mute, close, teleport) and [`NodeControl`]
//!   (drain without stopping, for the admin API); the room actor's side is `room/admin.rs`.
//! * `config`: [`NodeConfig`] and [`NodeTls`]; `event_log`: [`EventLog`], the optional log of
//!   room activations and directory commits that cluster tests check for single activation;
//!   `grpc_gate`: the bearer-token gate on every gRPC call.
//! * this module: [`Node`], which binds the gRPC listener, registers in the directory and
//!   heartbeats, drains (hands rooms off to other nodes) and shuts everything down in order.

pub mod admin;
mod config;
mod event_log;
mod grpc_gate;
pub mod handoff;
pub mod metrics;
pub mod record;
pub mod room;
pub mod service;
pub mod supervisor;
mod trace;
mod wire;

pub use config::{NodeConfig, NodeError, NodeTls};
pub use event_log::EventLog;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use plaza_directory::{NodeInfo, SharedDirectory};
use plaza_node_proto::room_host_server::RoomHostServer;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::grpc_gate::{error_chain, require_token};
use crate::metrics::NodeMetrics;
use crate::service::RoomHostService;
use crate::supervisor::{Rooms, RoomsArgs};

/// A running node.
pub struct Node {
    addr: SocketAddr,
    node_id: String,
    rooms: Rooms,
    shutdown: watch::Sender<bool>,
    server: JoinHandle<()>,
    heartbeat: JoinHandle<()>,
    directory: SharedDirectory,
    host: RoomHostService,
    control: NodeControl,
}

/// What the admin API needs of a node, cloneable: its rooms, and the drain that keeps the
/// process up ([`NodeControl::drain`], the same drain as [`Node::drain`]).
#[derive(Clone)]
pub struct NodeControl {
    node_id: String,
    rooms: Rooms,
    directory: SharedDirectory,
    draining: Arc<AtomicBool>,
    info: NodeInfo,
    heartbeat_ttl_ms: u64,
    metrics: NodeMetrics,
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
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = &cfg.tls {
            // Loaded (and checked: a key that does not parse fails here) before anything runs.
            builder = builder
                .tls_config(tls.server_config()?)
                .map_err(|e| NodeError::Tls(error_chain(&e)))?;
        }
        let node_id = config::registered_id(&cfg);
        let events = match &cfg.event_log {
            Some(path) => EventLog::open(path).map_err(|source| NodeError::EventLog {
                path: path.clone(),
                source,
            })?,
            None => EventLog::disabled(),
        };
        let (rooms, _sup) = Rooms::start(RoomsArgs {
            node_id: node_id.clone(),
            room_cfg: cfg.room.clone(),
            metrics: metrics.clone(),
            directory: directory.clone(),
            lease_ttl: cfg.lease_ttl,
            events,
        })
        .await?;
        let draining = Arc::new(AtomicBool::new(false));
        let svc = RoomHostService::new(
            node_id.clone(),
            rooms.clone(),
            cfg.session_queue,
            metrics.clone(),
            draining.clone(),
            directory.clone(),
        );
        let svc_grpc = svc.clone();
        let (shutdown, mut rx) = watch::channel(false);
        // TCP_NODELAY: tonic leaves Nagle on for a listener we bind ourselves.
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let server = tokio::spawn(async move {
            let res = builder
                .http2_keepalive_interval(Some(Duration::from_secs(10)))
                .http2_keepalive_timeout(Some(Duration::from_secs(20)))
                .max_concurrent_streams(Some(100_000))
                .initial_stream_window_size(Some(256 * 1024))
                .initial_connection_window_size(Some(16 * 1024 * 1024))
                .add_service(RoomHostServer::with_interceptor(
                    svc_grpc,
                    require_token(cfg.grpc_token.clone()),
                ))
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
            id: node_id.clone(),
            addr: advertise,
            load: 0,
            draining: false,
            heartbeat_until_ms: 0,
        };
        let ttl_ms = cfg.heartbeat_ttl.as_millis() as u64;
        directory.register_node(info.clone(), ttl_ms).await?;
        let heartbeat = {
            let info = info.clone();
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
        tracing::info!(node = %node_id, %addr, "room node listening");
        let control = NodeControl {
            node_id: node_id.clone(),
            rooms: rooms.clone(),
            directory: directory.clone(),
            draining,
            info,
            heartbeat_ttl_ms: ttl_ms,
            metrics,
        };
        Ok(Self {
            addr,
            node_id,
            rooms,
            shutdown,
            server,
            heartbeat,
            directory,
            host: svc,
            control,
        })
    }

    /// The bound gRPC address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// This node's id as registered (with its boot suffix when `unique_id` is set).
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The `RoomHost` service, for a gateway in this process to attach through
    /// ([`RoomHostService::attach_local`]) instead of over gRPC.
    pub fn host(&self) -> &RoomHostService {
        &self.host
    }

    /// The room supervisor.
    pub fn rooms(&self) -> &Rooms {
        &self.rooms
    }

    /// The node's admin handle.
    pub fn control(&self) -> &NodeControl {
        &self.control
    }

    /// Stops taking new rooms.
    pub fn set_draining(&self) {
        self.control.set_draining();
    }

    /// Drains the node: it takes no new rooms (and says so in the directory at once, so
    /// placement skips it), hands every room off through the directory and stops it, then waits
    /// (at most `timeout`) until no room and no session is left. Gateways move the sessions to
    /// the rooms' next activations on other nodes. Returns how many rooms were handed off; call
    /// [`Node::shutdown`] afterwards.
    pub async fn drain(&self, timeout: Duration) -> usize {
        self.control.drain(timeout).await
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

impl std::fmt::Debug for NodeControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeControl")
            .field("node_id", &self.node_id)
            .field("draining", &self.is_draining())
            .finish_non_exhaustive()
    }
}

impl NodeControl {
    /// This node's id as registered.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The room supervisor.
    pub fn rooms(&self) -> &Rooms {
        &self.rooms
    }

    /// Sessions attached to this node's rooms.
    pub fn sessions(&self) -> i64 {
        self.metrics.sessions.get()
    }

    /// Whether the node drains (takes no new rooms).
    pub fn is_draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Stops taking new rooms.
    pub fn set_draining(&self) {
        self.draining
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.rooms.set_draining(true);
    }

    /// [`Node::drain`] through the handle: the node keeps running (its listener, heartbeat and
    /// admin), empty and draining, until the process stops.
    pub async fn drain(&self, timeout: Duration) -> usize {
        self.set_draining();
        let mut info = self.info.clone();
        info.draining = true;
        info.load = self.metrics.sessions.get().max(0) as u32;
        if let Err(e) = self
            .directory
            .register_node(info, self.heartbeat_ttl_ms)
            .await
        {
            tracing::warn!(error = %e, "could not mark the node draining");
            self.metrics.directory_error(e.code());
        }
        let handed = self.rooms.drain().await;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let empty = self.rooms.list().await.is_empty() && self.metrics.sessions.get() <= 0;
            if empty || tokio::time::Instant::now() >= deadline {
                tracing::info!(node = %self.node_id, handed, empty, "drain finished");
                return handed;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
