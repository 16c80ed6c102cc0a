//! The admin endpoints: `/healthz` (the process is alive), `/readyz` (it takes traffic and its
//! directory answers), `/metrics` (Prometheus text), and `/v1/peers` (online users from the
//! directory, optionally `?ids=a,b`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use plaza_directory::SharedDirectory;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::metrics::Format;

/// What the admin handlers read.
pub struct AdminState {
    registry: Registry,
    ready: AtomicBool,
    directory: SharedDirectory,
}

impl AdminState {
    /// State over a metrics registry and the directory.
    pub fn new(registry: Registry, directory: SharedDirectory) -> Self {
        Self {
            registry,
            ready: AtomicBool::new(false),
            directory,
        }
    }
}

/// The running admin server.
pub struct Admin {
    addr: SocketAddr,
    state: Arc<AdminState>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Admin {
    /// Binds and serves.
    pub async fn start(listen: SocketAddr, state: Arc<AdminState>) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|e| anyhow::anyhow!("admin bind {listen}: {e}"))?;
        let addr = listener.local_addr()?;
        let app = axum::Router::new()
            .route("/healthz", get(|| async { "ok\n" }))
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics))
            .route("/v1/peers", get(peers))
            .with_state(state.clone());
        let (stop, mut rx) = watch::channel(false);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = rx.wait_for(|s| *s).await;
                })
                .await;
        });
        tracing::info!(%addr, "admin listening (/healthz /readyz /metrics /v1/peers)");
        Ok(Self {
            addr,
            state,
            stop,
            task,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets readiness.
    pub fn set_ready(&self, ready: bool) {
        self.state.ready.store(ready, Ordering::Relaxed);
    }

    /// Stops serving.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), self.task).await;
    }
}

async fn readyz(State(s): State<Arc<AdminState>>) -> impl IntoResponse {
    if !s.ready.load(Ordering::Relaxed) {
        return (StatusCode::SERVICE_UNAVAILABLE, "not ready\n");
    }
    match s.directory.live_nodes().await {
        Ok(_) => (StatusCode::OK, "ready\n"),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "directory unavailable\n"),
    }
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

/// One online user, as `/v1/peers` lists it.
#[derive(Debug, serde::Serialize)]
struct Peer {
    address: String,
    room: String,
    entity: u32,
    node: String,
}

async fn peers(
    State(s): State<Arc<AdminState>>,
    Query(q): Query<HashMap<String, String>>,
) -> impl IntoResponse {
    let ids: Option<Vec<String>> = q.get("ids").map(|v| {
        v.split(',')
            .filter(|s| !s.is_empty())
            .take(1000)
            .map(str::to_owned)
            .collect()
    });
    match s.directory.peers(ids.as_deref()).await {
        Ok(entries) => {
            let peers: Vec<Peer> = entries
                .into_iter()
                .map(|e| Peer {
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
            Json(serde_json::json!({ "ok": false, "error": e.code() })),
        )
            .into_response(),
    }
}
