//! The admin endpoints: `/healthz` (the process is alive), `/readyz` (it takes traffic and its
//! directory answers), `/metrics` (Prometheus text), the operator API under `/v1/` (peers from
//! the directory; this node, its rooms and the gateway's sessions, with kick, mute, close,
//! drain and teleport: [`operator`]) and the operator console page `/console` ([`console`]).
//!
//! # Readiness, per role (`/readyz`)
//! The admin server starts before anything else, so `/healthz` answers `ok` from the first
//! moment and `/readyz` explains why the process is not ready yet:
//! * every role: 503 `waiting for the directory (URL): attempt N failed: CODE` while Redis is
//!   retried at start; 503 `starting` while the roles start; 503 `directory unavailable`
//!   whenever the directory stops answering later (Redis down); 503 `not ready` while stopping.
//! * `plaza gateway`: 200 once its WebSocket listener is bound (it can attach sessions to any
//!   live node; with no node yet, joins are refused with a retryable close).
//! * `plaza node`: 200 once its gRPC listener is bound and it is registered in the directory;
//!   503 again as soon as it drains (SIGTERM), so no new session is routed to it.
//! * `plaza up`: 200 once both are.
//!
//! # Operator API
//! Documented call by call in `docs/ADMIN-API.md`. `/v1/…` needs `Authorization: Bearer <admin.token>`. With no token configured only callers
//! on a loopback address get in (`plaza up` on a laptop); every other caller gets 401. Every operator call is audited to the
//! `plaza::audit` log target (caller address, method, path, outcome).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use axum::Json;
use axum::extract::{ConnectInfo, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{any, get, post};
use plaza_directory::SharedDirectory;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::metrics::Format;

pub mod console;
pub mod operator;
mod presence;

pub use operator::Operator;

/// What the admin handlers read.
pub struct AdminState {
    registry: Registry,
    /// The operator API's bearer token; empty = open, allowed only on a loopback listener.
    token: String,
    ready: AtomicBool,
    /// Set once the directory is connected (start-up retries it first).
    directory: OnceLock<SharedDirectory>,
    /// Why the process is not ready yet (shown by `/readyz`).
    status: Mutex<String>,
    /// What the operator calls act on (set once the roles run).
    operator: OnceLock<Operator>,
}

impl AdminState {
    /// State over a metrics registry; the directory comes later ([`AdminState::set_directory`]).
    pub fn new(registry: Registry) -> Self {
        Self::with_token(registry, String::new())
    }

    /// State whose operator API (`/v1/…`) needs `Authorization: Bearer <token>`.
    pub fn with_token(registry: Registry, token: String) -> Self {
        Self {
            registry,
            token,
            ready: AtomicBool::new(false),
            directory: OnceLock::new(),
            status: Mutex::new("starting".into()),
            operator: OnceLock::new(),
        }
    }

    /// The roles the operator calls act on, once they run.
    pub fn set_operator(&self, operator: Operator) {
        let _ = self.operator.set(operator);
    }

    /// The directory, once connected.
    pub fn set_directory(&self, directory: SharedDirectory) {
        let _ = self.directory.set(directory);
    }

    /// What `/readyz` says while not ready.
    pub fn set_status(&self, status: &str) {
        *self
            .status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = status.to_owned();
    }

    fn status(&self) -> String {
        self.status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// The running admin server.
pub struct Admin {
    addr: SocketAddr,
    state: Arc<AdminState>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    tls_watch: Option<JoinHandle<()>>,
}

/// How the admin port serves besides its address.
#[derive(Clone, Debug, Default)]
pub struct AdminServe {
    /// Serve https with this certificate and key (re-read when they change).
    pub tls: Option<plaza_gateway::edge::TlsFiles>,
    /// Counts accepts that failed for lack of file descriptors.
    pub fd_exhausted: prometheus_client::metrics::counter::Counter,
}

/// How long an admin client may take to send its request head.
const ADMIN_HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How often the admin TLS files are checked for a change.
const ADMIN_TLS_RELOAD: std::time::Duration = std::time::Duration::from_secs(10);

impl Admin {
    /// Binds and serves plain http.
    pub async fn start(listen: SocketAddr, state: Arc<AdminState>) -> anyhow::Result<Self> {
        Self::start_with(listen, state, AdminServe::default()).await
    }

    /// Binds and serves (https when `serve.tls` is set). The accept loop survives descriptor
    /// exhaustion and keeps answering (see [`plaza_gateway::edge::serve_http`]).
    pub async fn start_with(
        listen: SocketAddr,
        state: Arc<AdminState>,
        serve: AdminServe,
    ) -> anyhow::Result<Self> {
        let tls = match &serve.tls {
            Some(files) => Some(
                plaza_gateway::edge::ServerTls::load(files)
                    .map_err(|e| anyhow::anyhow!("admin TLS: {e}"))?,
            ),
            None => None,
        };
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|e| anyhow::anyhow!("admin bind {listen}: {e}"))?;
        let addr = listener.local_addr()?;
        use operator as op;
        let operator = axum::Router::new()
            .route("/v1/peers", get(peers))
            .route(
                "/v1/presence/{wallet}/sources/{source}",
                post(presence::hold).delete(presence::release),
            )
            .route("/v1/node", get(op::get_node))
            .route("/v1/node/drain", post(op::drain))
            .route("/v1/nodes", get(op::get_nodes))
            .route("/v1/rooms", get(op::get_rooms))
            .route("/v1/rooms/{room}", get(op::get_room))
            .route("/v1/rooms/{room}/close", post(op::close_room))
            .route("/v1/rooms/{room}/members/{wallet}/mute", post(op::mute))
            .route("/v1/rooms/{room}/members/{wallet}/unmute", post(op::unmute))
            .route(
                "/v1/rooms/{room}/members/{wallet}/teleport",
                post(op::teleport),
            )
            .route("/v1/sessions", get(op::get_sessions))
            .route("/v1/sessions/{id}/kick", post(op::kick))
            .route("/v1/{*rest}", any(op::not_found))
            .route_layer(axum::middleware::from_fn_with_state(
                state.clone(),
                require_token,
            ));
        let app = axum::Router::new()
            .route("/healthz", get(|| async { "ok\n" }))
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics))
            .route("/console", get(console::page))
            .merge(operator)
            .with_state(state.clone());
        let (stop, rx) = watch::channel(false);
        let tls_watch = tls.as_ref().map(|t| t.watch(ADMIN_TLS_RELOAD));
        let scheme = if tls.is_some() { "https" } else { "http" };
        let task = tokio::spawn(plaza_gateway::edge::serve_http(
            listener,
            app,
            tls,
            ADMIN_HEADER_TIMEOUT,
            serve.fd_exhausted,
            rx,
        ));
        tracing::info!(%addr, scheme, "admin listening (/healthz /readyz /metrics /v1/ /console)");
        Ok(Self {
            addr,
            state,
            stop,
            task,
            tls_watch,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What `/readyz` says while not ready.
    pub fn set_status(&self, status: &str) {
        self.state.set_status(status);
    }

    /// Sets readiness.
    pub fn set_ready(&self, ready: bool) {
        self.state.ready.store(ready, Ordering::Relaxed);
    }

    /// Stops serving.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.tls_watch {
            t.abort();
        }
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), self.task).await;
    }
}

async fn readyz(State(s): State<Arc<AdminState>>) -> impl IntoResponse {
    let Some(directory) = s.directory.get() else {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("{}\n", s.status()));
    };
    if !s.ready.load(Ordering::Relaxed) {
        let status = s.status();
        let why = if status == "ready" {
            "not ready".into()
        } else {
            status
        };
        return (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n"));
    }
    match directory.live_nodes().await {
        Ok(_) => (StatusCode::OK, "ready\n".to_owned()),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("directory unavailable: {}\n", e.code()),
        ),
    }
}

/// The operator API's gate: `Authorization: Bearer <admin.token>` (compared in constant time),
/// or, with no token configured, a loopback caller; 401 otherwise. Every call, allowed or not, is written to the `plaza::audit` log target with
/// the caller's address, method and path.
async fn require_token(
    State(s): State<Arc<AdminState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let presented = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    // No token configured: only callers on this host (loopback) get in.
    let allowed = if s.token.is_empty() {
        peer.ip().is_loopback()
    } else {
        constant_time_eq(presented.as_bytes(), s.token.as_bytes())
    };
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    if !allowed {
        tracing::warn!(target: "plaza::audit", %peer, %method, %path, outcome = "denied", "operator call");
        return (
            StatusCode::UNAUTHORIZED,
            [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
            Json(serde_json::json!({
                "ok": false,
                "error": "unauthorized",
                "message": "send Authorization: Bearer <admin.token>",
            })),
        )
            .into_response();
    }
    let response = next.run(req).await;
    tracing::info!(
        target: "plaza::audit",
        %peer,
        %method,
        %path,
        status = response.status().as_u16(),
        outcome = "allowed",
        "operator call"
    );
    response
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Classic Prometheus text unless the `Accept` header prefers OpenMetrics (see
/// [`Format::negotiate`]).
async fn metrics(State(s): State<Arc<AdminState>>, headers: HeaderMap) -> impl IntoResponse {
    let accept = headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok());
    let format = Format::negotiate(accept);
    match crate::metrics::encode(&s.registry, format) {
        Ok(body) => (
            [
                (axum::http::header::CONTENT_TYPE, format.content_type()),
                (axum::http::header::VARY, "Accept"),
            ],
            body,
        )
            .into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, String::new()).into_response(),
    }
}

/// One online user, as `/v1/peers` lists it. `position` is the avatar's feet `[x, y, z]` in
/// metres (the seed's shape) when the room runs on this process's node, else `null` (the
/// directory does not hold positions; ask the room's node, or a wallet held only by another
/// source has no avatar).
#[derive(Debug, serde::Serialize)]
struct Peer {
    address: String,
    room: String,
    entity: u32,
    node: String,
    position: Option<[f32; 3]>,
}

/// The avatar positions of `entries` whose room runs on this process's node, by (room, wallet):
/// each of those rooms (at most `operator::MAX_ROOMS`) is inspected once, all at once.
async fn local_positions(
    s: &AdminState,
    entries: &[plaza_directory::PresenceEntry],
) -> std::collections::HashMap<(String, String), [f32; 3]> {
    let mut out = std::collections::HashMap::new();
    let Some(node) = s.operator.get().and_then(|o| o.node.as_ref()) else {
        return out;
    };
    let rooms: std::collections::BTreeSet<&str> = entries
        .iter()
        .filter(|e| e.node == node.node_id())
        .map(|e| e.room.as_str())
        .collect();
    let mut asks = tokio::task::JoinSet::new();
    for room in rooms.into_iter().take(operator::MAX_ROOMS) {
        let (rooms, room) = (node.rooms().clone(), room.to_owned());
        asks.spawn(async move { rooms.inspect(&room).await });
    }
    while let Some(r) = asks.join_next().await {
        // A room that stopped meanwhile (or did not answer) gives no positions.
        if let Ok(Ok(r)) = r {
            for m in &r.view.members {
                out.insert((r.view.room.clone(), m.wallet.clone()), m.position);
            }
        }
    }
    out
}

/// The wallets a `/v1/peers` query names: `ids=a,b` (comma-separated) and the seed's
/// repeated `id=a&id=b`, together; `None` when neither is given (everyone). At most
/// `plaza_directory::MAX_PEERS_FILTER` are kept.
fn peer_filter(query: Option<&str>) -> Option<Vec<String>> {
    let mut ids: Option<Vec<String>> = None;
    for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match &*k {
            "ids" => ids
                .get_or_insert_with(Vec::new)
                .extend(v.split(',').filter(|s| !s.is_empty()).map(str::to_owned)),
            "id" => {
                let list = ids.get_or_insert_with(Vec::new);
                if !v.is_empty() {
                    list.push(v.into_owned());
                }
            }
            _ => {}
        }
    }
    if let Some(list) = ids.as_mut() {
        list.truncate(plaza_directory::MAX_PEERS_FILTER);
    }
    ids
}

async fn peers(State(s): State<Arc<AdminState>>, RawQuery(query): RawQuery) -> impl IntoResponse {
    let ids = peer_filter(query.as_deref());
    let Some(directory) = s.directory.get() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({
                "ok": false,
                "error": "unavailable",
                "message": "the directory is not connected yet",
            })),
        )
            .into_response();
    };
    match directory.peers(ids.as_deref()).await {
        Ok(entries) => {
            let positions = local_positions(&s, &entries).await;
            let peers: Vec<Peer> = entries
                .into_iter()
                .map(|e| Peer {
                    position: positions.get(&(e.room.clone(), e.wallet.clone())).copied(),
                    address: e.wallet,
                    room: e.room,
                    entity: e.entity,
                    node: e.node,
                })
                .collect();
            Json(serde_json::json!({ "ok": true, "peers": peers })).into_response()
        }
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({
                "ok": false,
                "error": e.code(),
                "message": format!("the directory does not answer: {e}"),
            })),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::peer_filter;

    #[test]
    fn peers_take_ids_and_the_seed_s_repeated_id() {
        assert_eq!(peer_filter(None), None);
        assert_eq!(peer_filter(Some("other=1")), None);
        assert_eq!(
            peer_filter(Some("ids=0xa,0xb")),
            Some(vec!["0xa".to_owned(), "0xb".to_owned()])
        );
        assert_eq!(
            peer_filter(Some("id=0xa&id=guest%3Aann&ids=0xc")),
            Some(vec!["0xa".into(), "guest:ann".into(), "0xc".into()])
        );
        assert_eq!(peer_filter(Some("id=")), Some(vec![]));
        let many = (0..20_000)
            .map(|i| format!("id={i}"))
            .collect::<Vec<_>>()
            .join("&");
        assert_eq!(
            peer_filter(Some(&many)).map(|v| v.len()),
            Some(plaza_directory::MAX_PEERS_FILTER)
        );
    }
}
