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
//! * this module: [`Node`], which binds the gRPC listener, registers in the directory and
//!   heartbeats, drains (hands rooms off to other nodes) and shuts everything down in order;
//!   [`EventLog`], the optional log of room activations and directory commits that cluster tests
//!   check for single activation.

pub mod admin;
pub mod handoff;
pub mod metrics;
pub mod record;
pub mod room;
pub mod service;
pub mod supervisor;
mod trace;
mod wire;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use plaza_directory::{Epoch, NodeInfo, SharedDirectory};
use plaza_node_proto::room_host_server::RoomHostServer;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::metrics::NodeMetrics;
use crate::room::RoomActorConfig;
use crate::service::RoomHostService;
use crate::supervisor::{Rooms, RoomsArgs};

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
    /// Register as `<node_id>.<random boot id>` so a restarted process never renews (and
    /// commits under) a lease its previous incarnation still holds.
    pub unique_id: bool,
    /// Append activations and directory commits to this file (see [`EventLog`]).
    pub event_log: Option<PathBuf>,
    /// Every gRPC call must carry `authorization: Bearer <token>` (gateways send it); calls
    /// without it are refused `UNAUTHENTICATED`. `None` = any caller.
    pub grpc_token: Option<String>,
    /// Serve gRPC over TLS (and, with a client CA, require gateways' client certificates).
    /// `None` = plain HTTP/2.
    pub tls: Option<NodeTls>,
}

/// The node's gRPC TLS files (PEM): its certificate chain and key, and optionally the CA that
/// gateways' client certificates must chain to (mTLS).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeTls {
    /// Certificate chain, leaf first. Its SANs must cover the address the node advertises
    /// (an IP SAN for an IP, a DNS SAN for a name): gateways check it.
    pub cert: PathBuf,
    /// Private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// With a client CA, a connection without a client certificate signed by it is refused
    /// in the TLS handshake, before any call.
    pub client_ca: Option<PathBuf>,
}

impl NodeTls {
    /// Reads the files and builds tonic's server TLS configuration.
    pub fn server_config(&self) -> Result<tonic::transport::ServerTlsConfig, NodeError> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|source| NodeError::TlsFile {
                path: path.to_path_buf(),
                source,
            })
        };
        let identity = tonic::transport::Identity::from_pem(read(&self.cert)?, read(&self.key)?);
        let mut cfg = tonic::transport::ServerTlsConfig::new().identity(identity);
        if let Some(ca) = &self.client_ca {
            cfg = cfg.client_ca_root(tonic::transport::Certificate::from_pem(read(ca)?));
        }
        Ok(cfg)
    }
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
            unique_id: true,
            event_log: None,
            grpc_token: None,
            tls: None,
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
    Rooms(#[from] supervisor::RoomsError),
    /// Registration in the directory failed.
    #[error("directory: {0}")]
    Directory(#[from] plaza_directory::DirectoryError),
    /// A TLS file could not be read.
    #[error("node TLS file {path}: {source}")]
    TlsFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The TLS certificate, key or client CA is not usable.
    #[error("node TLS: {0}")]
    Tls(String),
    /// The event log could not be opened.
    #[error("event log {path}: {source}")]
    EventLog {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
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
        let node_id = if cfg.unique_id {
            format!("{}.{:08x}", cfg.node_id, rand_u32())
        } else {
            cfg.node_id.clone()
        };
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

/// A random `u32` from the std hasher's per-process random keys (no extra dependency).
fn rand_u32() -> u32 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish() as u32
}

/// An append-only text log of room activations and directory commits, one line per event,
/// for checking single activation across processes after a run. Disabled unless a path is
/// given (`plaza node --event-log PATH`). Lines (times are Unix milliseconds):
///
/// ```text
/// activate ROOM ERA.COUNTER NODE AT_MS
/// commit ROOM ERA.COUNTER SENT_MS DONE_MS WHAT
/// release ROOM ERA.COUNTER NODE AT_MS
/// handoff ROOM ERA.COUNTER put|taken MEMBERS AT_MS
/// ```
///
/// A `commit` is a directory write of the room that the directory accepted; it took effect at
/// some instant in `[SENT_MS, DONE_MS]`. Writes are small synchronous appends (a diagnostic,
/// not a hot path: a few lines per room per second).
#[derive(Clone, Debug, Default)]
pub struct EventLog {
    file: Option<Arc<std::sync::Mutex<std::fs::File>>>,
}

impl EventLog {
    /// A log that records nothing.
    pub fn disabled() -> Self {
        Self { file: None }
    }

    /// Appends to `path` (created if missing).
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Self {
            file: Some(Arc::new(std::sync::Mutex::new(f))),
        })
    }

    /// A room activation under `epoch` on `node`.
    pub fn activate(&self, room: &str, epoch: Epoch, node: &str) {
        self.line(format_args!("activate {room} {epoch} {node} {}", now_ms()));
    }

    /// An accepted directory write of `room` under `epoch`.
    pub fn commit(&self, room: &str, epoch: Epoch, sent_ms: u64, done_ms: u64, what: &str) {
        self.line(format_args!(
            "commit {room} {epoch} {sent_ms} {done_ms} {what}"
        ));
    }

    /// The lease of `epoch` was given up.
    pub fn release(&self, room: &str, epoch: Epoch, node: &str) {
        self.line(format_args!("release {room} {epoch} {node} {}", now_ms()));
    }

    /// A handoff state was stored (`put`) or taken over (`taken`).
    pub fn handoff(&self, room: &str, epoch: Epoch, what: &str, members: usize) {
        self.line(format_args!(
            "handoff {room} {epoch} {what} {members} {}",
            now_ms()
        ));
    }

    fn line(&self, args: std::fmt::Arguments<'_>) {
        let Some(f) = &self.file else { return };
        let text = format!("{args}\n");
        let mut g = f.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = g.write_all(text.as_bytes()) {
            tracing::warn!(error = %e, "event log write failed");
        }
    }
}

fn now_ms() -> u64 {
    room::unix_ms()
}

/// An error and its sources, `: `-joined.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// The node's gRPC gate: with a token configured, every call must carry
/// `authorization: Bearer <token>` (compared in constant time), else `UNAUTHENTICATED`.
fn require_token(
    token: Option<String>,
) -> impl FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Clone {
    move |req: tonic::Request<()>| {
        let Some(token) = &token else {
            return Ok(req);
        };
        let presented = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        let same = presented.len() == token.len()
            && presented
                .bytes()
                .zip(token.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
        if same {
            Ok(req)
        } else {
            Err(tonic::Status::unauthenticated(
                "this node requires the cluster's node.grpc_token",
            ))
        }
    }
}
