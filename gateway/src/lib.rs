//! The Plaza gateway: the client WebSocket edge.
//!
//! Clients connect to `/v1/ws` and speak `plaza.v1` envelopes, one per binary frame. The gateway
//! negotiates the version, authenticates (dev mode issues guests), enforces limits (frame size,
//! input rates, a bounded outbound queue, the handshake deadline), pins each session to the
//! node that hosts its room over the `RoomHost` gRPC service (or, for the node in its own
//! process, in-process with no HTTP/2 stream: [`router::LocalNode`]), and closes every refused
//! connection with a typed code ([`close::CloseCode`]).
//!
//! # Layout
//! * [`session`]: one connection, end to end.
//! * [`router`]: the router actor that owns session → node routes and node channels.
//! * [`edge`]: the accept loop, the per-socket and per-address limits, TLS.
//! * [`limits`], [`queue`]: the per-session limits and the bounded outbound queue.
//! * [`auth`]: the authentication seam; [`resume`]: resume tokens.
//! * [`session_core`]: the sans-I/O decisions of one session, which [`session`] executes.
//! * [`sessions`]: the session registry the admin API lists and kicks from.
//! * [`close`]: close codes; [`refusal`]: every refusal with its error and close codes;
//!   [`metrics`]: Prometheus metrics.

pub mod auth;
pub mod close;
pub mod edge;
pub mod limits;
pub mod metrics;
pub mod queue;
pub mod refusal;
pub mod resume;
pub mod router;
pub mod session;
pub mod session_core;
pub mod sessions;
mod trace;
mod viewer;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::Router as HttpRouter;
use axum::extract::State;
use axum::extract::ws::WebSocketUpgrade;
use axum::routing::get;
use plaza_directory::SharedDirectory;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::auth::{Authenticator, DevAuthenticator};
use crate::edge::{Conn, Edge, EdgeLimits, ServerTls, TlsFiles};
use crate::limits::Limits;
use crate::metrics::GatewayMetrics;
use crate::resume::ResumeStore;
use crate::router::{LocalNode, Router, RouterArgs};

/// How a gateway runs.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    /// Where clients connect.
    pub listen: SocketAddr,
    /// Per-session limits.
    pub limits: Limits,
    /// How long a resume token stays valid after its connection dropped.
    pub resume_ttl: Duration,
    /// Per-socket and per-address limits (connection cap, pre-auth caps, per-address session
    /// and join caps, the descriptor reserve).
    pub edge: EdgeLimits,
    /// Serve `wss://` with this certificate and key (PEM files), re-read when they change.
    pub tls: Option<TlsFiles>,
    /// How often the TLS files are checked for a change.
    pub tls_reload: Duration,
    /// Sent as `authorization: Bearer <token>` on every gRPC call to a node (`node.grpc_token`).
    pub node_token: Option<String>,
    /// Dial nodes over TLS (`gateway.node_tls_ca`, with a client certificate for mTLS).
    pub node_tls: Option<NodeClientTls>,
    /// Kernel send buffer per client socket (bytes); `None` leaves the OS default (autotuned,
    /// up to megabytes per socket).
    pub socket_send_buffer: Option<usize>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            listen: ([127, 0, 0, 1], 7777).into(),
            limits: Limits::default(),
            resume_ttl: Duration::from_secs(30),
            edge: EdgeLimits::default(),
            tls: None,
            tls_reload: Duration::from_secs(10),
            node_token: None,
            node_tls: None,
            socket_send_buffer: Some(64 * 1024),
        }
    }
}

/// How a gateway dials nodes over TLS (PEM files).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeClientTls {
    /// The CA nodes' certificates must chain to; their SANs must cover the address each node
    /// advertises (IP SAN for an IP, DNS SAN for a name).
    pub ca: std::path::PathBuf,
    /// This gateway's client certificate and key, presented to nodes that require one.
    pub identity: Option<TlsFiles>,
}

impl NodeClientTls {
    /// Reads and checks the files and builds tonic's client TLS configuration.
    pub fn client_config(&self) -> Result<tonic::transport::ClientTlsConfig, edge::TlsError> {
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|e| edge::TlsError::File {
                path: p.to_owned(),
                why: e.to_string(),
            })
        };
        // Parsed here so a bad file is a typed error at start, not a failed handshake later.
        edge::read_certs(&self.ca)?;
        let mut cfg = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(read(&self.ca)?));
        if let Some(id) = &self.identity {
            edge::read_certs(&id.cert)?;
            edge::read_key(&id.key)?;
            cfg = cfg.identity(tonic::transport::Identity::from_pem(
                read(&id.cert)?,
                read(&id.key)?,
            ));
        }
        Ok(cfg)
    }
}

/// Errors starting a gateway.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The listener could not be bound.
    #[error("bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The router actor could not start.
    #[error("router: {0}")]
    Router(#[from] router::PinError),
    /// The node token is not a valid header value.
    #[error("node.grpc_token must be printable ASCII")]
    NodeToken,
    /// The TLS certificate or key could not be loaded.
    #[error("gateway TLS: {0}")]
    Tls(#[from] edge::TlsError),
}

/// What every session of a gateway shares.
pub(crate) struct Shared {
    pub(crate) limits: Limits,
    pub(crate) auth: Arc<dyn Authenticator>,
    pub(crate) router: Router,
    pub(crate) metrics: GatewayMetrics,
    pub(crate) resume: ResumeStore,
    pub(crate) shutdown: watch::Receiver<bool>,
    pub(crate) sessions: sessions::Sessions,
    pub(crate) node_token: Option<tonic::metadata::AsciiMetadataValue>,
}

/// A running gateway.
pub struct Gateway {
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    server: JoinHandle<()>,
    router: Router,
    metrics: GatewayMetrics,
    sessions: sessions::Sessions,
    edge: Arc<Edge>,
    tls_watch: Option<JoinHandle<()>>,
}

impl Gateway {
    /// Binds the client listener and starts serving `/v1/ws`.
    pub async fn start(
        cfg: GatewayConfig,
        directory: SharedDirectory,
        metrics: GatewayMetrics,
    ) -> Result<Self, GatewayError> {
        Self::start_with_auth(cfg, directory, metrics, Arc::new(DevAuthenticator)).await
    }

    /// As [`Gateway::start`], with an explicit authenticator.
    pub async fn start_with_auth(
        cfg: GatewayConfig,
        directory: SharedDirectory,
        metrics: GatewayMetrics,
        auth: Arc<dyn Authenticator>,
    ) -> Result<Self, GatewayError> {
        Self::start_with(cfg, directory, metrics, auth, None).await
    }

    /// As [`Gateway::start_with_auth`], with the room node that runs in this process (if any):
    /// sessions whose room it hosts attach to it through channels, not gRPC.
    pub async fn start_with(
        cfg: GatewayConfig,
        directory: SharedDirectory,
        metrics: GatewayMetrics,
        auth: Arc<dyn Authenticator>,
        local: Option<Arc<dyn LocalNode>>,
    ) -> Result<Self, GatewayError> {
        let listener =
            TcpListener::bind(cfg.listen)
                .await
                .map_err(|source| GatewayError::Bind {
                    addr: cfg.listen,
                    source,
                })?;
        let addr = listener.local_addr().map_err(|source| GatewayError::Bind {
            addr: cfg.listen,
            source,
        })?;
        let tls = match &cfg.tls {
            Some(files) => Some(ServerTls::load(files)?),
            None => None,
        };
        let node_token = match &cfg.node_token {
            Some(t) => Some(
                format!("Bearer {t}")
                    .parse()
                    .map_err(|_| GatewayError::NodeToken)?,
            ),
            None => None,
        };
        let node_tls = match &cfg.node_tls {
            Some(t) => Some(t.client_config()?),
            None => None,
        };
        let router = Router::start_with(RouterArgs {
            directory: directory.clone(),
            local,
            node_tls,
        })
        .await?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let sessions = sessions::Sessions::default();
        let shared = Arc::new(Shared {
            sessions: sessions.clone(),
            limits: cfg.limits.clone(),
            auth,
            router: router.clone(),
            metrics: metrics.clone(),
            // Resume entries live in the directory too, so a client whose gateway died can
            // take its session back through any gateway.
            resume: ResumeStore::with_directory(
                cfg.resume_ttl,
                cfg.edge.max_connections.saturating_mul(2),
                directory.clone(),
            ),
            shutdown: shutdown_rx.clone(),
            node_token,
        });
        let app = HttpRouter::new()
            .route("/v1/ws", get(ws_handler))
            .with_state(shared)
            .merge(viewer::router());
        let edge = Edge::new(cfg.edge.clone(), metrics.clone());
        let tls_watch = tls.as_ref().map(|t| t.watch(cfg.tls_reload));
        let scheme = if tls.is_some() { "wss" } else { "ws" };
        let server = tokio::spawn(edge::serve_gateway(
            edge::GatewayListener {
                listener,
                app,
                edge: edge.clone(),
                tls,
                handshake_deadline: cfg.limits.handshake_deadline,
                send_buffer: cfg.socket_send_buffer,
                metrics: metrics.clone(),
            },
            shutdown_rx,
        ));
        tracing::info!(%addr, scheme, "gateway listening on /v1/ws");
        Ok(Self {
            addr,
            shutdown,
            server,
            router,
            metrics,
            sessions,
            edge,
            tls_watch,
        })
    }

    /// The edge's admission state (open and pre-auth sockets, the effective connection cap).
    pub fn edge(&self) -> &Edge {
        &self.edge
    }

    /// The session registry (the admin API lists and kicks sessions through it).
    pub fn sessions(&self) -> &sessions::Sessions {
        &self.sessions
    }

    /// The bound client address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The gateway's metrics.
    pub fn metrics(&self) -> &GatewayMetrics {
        &self.metrics
    }

    /// Number of sessions pinned to rooms.
    pub async fn pinned_sessions(&self) -> usize {
        self.router.count().await
    }

    /// Stops accepting, closes every session with going-away (1001), waits for them (bounded).
    pub async fn shutdown(self, grace: Duration) {
        let _ = self.shutdown.send(true);
        let until = tokio::time::Instant::now() + grace;
        let _ = tokio::time::timeout_at(until, self.server).await;
        // Every socket (each session's) gives its slot back when it closes.
        while self.edge.open() > 0 && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if let Some(t) = self.tls_watch {
            t.abort();
        }
        self.router.stop();
    }
}

/// Per-session WebSocket read buffer (the chunk each socket read fills).
const READ_BUFFER_BYTES: usize = 2 * 1024;

async fn ws_handler(
    ws: WebSocketUpgrade,
    State(shared): State<Arc<Shared>>,
    Extension(conn): Extension<Arc<Conn>>,
) -> axum::response::Response {
    let max = shared.limits.max_frame_bytes;
    // The WebSocket layer refuses frames past 4x the cap before allocating them; frames between
    // the cap and that are refused by the session. Both close with 1009.
    // The read buffer is zero-filled up to its size on every read: the 128 KiB default cost a
    // fifth of the server's CPU (profiled) and 128 KiB per connection; 8 KiB was still the
    // largest heap item per session (heaptrack, 1,000 bots). Client frames are tens of bytes
    // (an input, a ping); a larger message is still read whole (the buffer grows to it).
    ws.max_message_size(max * 4)
        .max_frame_size(max * 4)
        .read_buffer_size(READ_BUFFER_BYTES)
        .on_upgrade(move |socket| session::run(socket, shared, conn))
}
