//! Plaza operations: configuration, the admin endpoints (health, readiness, Prometheus
//! metrics), telemetry setup, and the composition of roles that the `plaza` binary runs.
//!
//! # Layout
//! * [`config`]: layered configuration (defaults → file → env) with provenance.
//! * [`admin`]: `/healthz`, `/readyz`, `/metrics`, the operator API (`/v1/…`, [`admin::operator`])
//!   and the operator console page (`/console`, [`admin::console`]).
//! * [`metrics`]: `/metrics` content negotiation, `process_*` metrics, `plaza_build_info`.
//! * [`directory_metrics`]: directory operation latency by operation.
//! * this module: [`Plaza`], a running set of roles (`up` = every role in one process with the
//!   embedded directory; `node`; `gateway`), and its orderly shutdown.

pub mod admin;
pub mod config;
pub mod directory_metrics;
pub mod metrics;
pub mod telemetry;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use plaza_directory::{MemoryDirectory, RedisDirectory, RedisOptions, SharedDirectory, Sweeper};
use plaza_gateway::Gateway;
use plaza_gateway::auth::{Authenticator, Combined};
use plaza_gateway::metrics::GatewayMetrics;
use plaza_gateway::router::{LocalAttach, LocalLink, LocalNode, LocalUplink};
use plaza_node_proto::{AttachRequest, NodeInbound};
use plaza_room_actor::Node;
use plaza_room_actor::metrics::NodeMetrics;
use plaza_room_actor::service::{RoomHostService, RoomUplink};
use prometheus_client::registry::Registry;

use crate::admin::{Admin, AdminState};
use crate::config::PlazaConfig;
use crate::directory_metrics::{DirectoryMetrics, InstrumentedDirectory};

/// Which roles a process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Roles {
    /// Gateway + node + embedded (or Redis) directory in one process.
    All,
    /// A room node only.
    Node,
    /// A gateway only.
    Gateway,
}

/// A running Plaza process.
pub struct Plaza {
    gateway: Option<Gateway>,
    node: Option<Node>,
    admin: Admin,
    directory: SharedDirectory,
    /// How long the gateway waits for its sessions to close on shutdown.
    shutdown_timeout: Duration,
    /// Deletes expired directory records every `directory.sweep_interval_ms` (every role runs
    /// one: sweeps are idempotent, so several sweepers only cost a little Redis time).
    _sweeper: Sweeper,
}

impl std::fmt::Debug for Plaza {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plaza")
            .field("ws_addr", &self.ws_addr())
            .field("node_addr", &self.node_addr())
            .field("admin_addr", &self.admin_addr())
            .finish()
    }
}

impl Plaza {
    /// Starts `roles` as `cfg` says. The admin server starts first, so `/healthz` answers and
    /// `/readyz` reports "waiting for the directory" while Redis is retried
    /// (`directory.connect_timeout_ms`, backoff up to `directory.connect_backoff_max_ms`).
    pub async fn start(cfg: &PlazaConfig, roles: Roles) -> anyhow::Result<Self> {
        Self::start_inner(cfg, roles, None).await
    }

    /// Starts `roles` over an existing directory (tests share one between processes' roles).
    pub async fn start_with_directory(
        cfg: &PlazaConfig,
        roles: Roles,
        directory: SharedDirectory,
    ) -> anyhow::Result<Self> {
        Self::start_inner(cfg, roles, Some(directory)).await
    }

    async fn start_inner(
        cfg: &PlazaConfig,
        roles: Roles,
        directory: Option<SharedDirectory>,
    ) -> anyhow::Result<Self> {
        let started_at = std::time::Instant::now();
        // Libraries that build their own rustls configuration (the Redis client) need a
        // process-wide provider; Plaza's own TLS settings name `ring` explicitly.
        plaza_gateway::edge::install_default_crypto_provider();
        let mut registry = Registry::default();
        metrics::register_process(&mut registry);
        let admin_fd_exhausted = prometheus_client::metrics::counter::Counter::default();
        registry.register(
            "plaza_admin_accept_fd_exhausted",
            "Admin accepts that failed for lack of file descriptors (EMFILE/ENFILE)",
            admin_fd_exhausted.clone(),
        );
        let directory_metrics = DirectoryMetrics::default();
        directory_metrics.register(&mut registry);
        let node_metrics = NodeMetrics::default();
        let gateway_metrics = GatewayMetrics::default();
        let runs_node = matches!(roles, Roles::All | Roles::Node);
        let runs_gateway = matches!(roles, Roles::All | Roles::Gateway);
        if runs_node {
            node_metrics.register(&mut registry);
        }
        if runs_gateway {
            gateway_metrics.register(&mut registry);
        }
        let admin_addr = cfg
            .admin
            .listen
            .resolve()
            .map_err(|e| anyhow::anyhow!("admin.listen `{}`: {e}", cfg.admin.listen))?;
        let state = Arc::new(AdminState::with_token(registry, cfg.admin.token.clone()));
        let admin = Admin::start_with(
            admin_addr,
            state.clone(),
            admin::AdminServe {
                tls: config::tls_files(&cfg.admin.tls_cert, &cfg.admin.tls_key),
                fd_exhausted: admin_fd_exhausted,
            },
        )
        .await?;
        let directory = match directory {
            Some(d) => d,
            None => match open_directory(cfg, roles, &state).await {
                Ok(d) => d,
                Err(e) => {
                    admin.shutdown().await;
                    return Err(e);
                }
            },
        };
        let directory: SharedDirectory =
            Arc::new(InstrumentedDirectory::new(directory, directory_metrics));
        state.set_directory(directory.clone());
        let started =
            Self::start_roles(cfg, roles, &directory, node_metrics, gateway_metrics).await;
        let (node, gateway) = match started {
            Ok(r) => r,
            Err(e) => {
                admin.shutdown().await;
                return Err(e);
            }
        };
        state.set_operator(admin::Operator {
            node: node.as_ref().map(|n| n.control().clone()),
            sessions: gateway.as_ref().map(|g| g.sessions().clone()),
            roles: match roles {
                Roles::All => vec!["gateway", "node"],
                Roles::Node => vec!["node"],
                Roles::Gateway => vec!["gateway"],
            },
            started: started_at,
            drain_timeout: Duration::from_millis(cfg.node.drain_timeout_ms),
        });
        let sweeper = Sweeper::spawn(
            directory.clone(),
            Duration::from_millis(cfg.directory.sweep_interval_ms),
        );
        state.set_status("ready");
        admin.set_ready(true);
        Ok(Self {
            gateway,
            node,
            admin,
            directory,
            shutdown_timeout: Duration::from_millis(cfg.gateway.shutdown_timeout_ms),
            _sweeper: sweeper,
        })
    }

    async fn start_roles(
        cfg: &PlazaConfig,
        roles: Roles,
        directory: &SharedDirectory,
        node_metrics: NodeMetrics,
        gateway_metrics: GatewayMetrics,
    ) -> anyhow::Result<(Option<Node>, Option<Gateway>)> {
        let node = if matches!(roles, Roles::All | Roles::Node) {
            Some(Node::start(cfg.node_config()?, directory.clone(), node_metrics).await?)
        } else {
            None
        };
        let gateway = if matches!(roles, Roles::All | Roles::Gateway) {
            // The node of this process is attached to through channels: no loopback gRPC hop.
            let local = node
                .as_ref()
                .filter(|_| cfg.gateway.in_process_node)
                .map(|n| Arc::new(InProcessNode(n.host().clone())) as Arc<dyn LocalNode>);
            let auth = authenticator(cfg, directory, roles == Roles::All).await?;
            Some(
                Gateway::start_with(
                    cfg.gateway_config()?,
                    directory.clone(),
                    gateway_metrics,
                    auth,
                    local,
                )
                .await?,
            )
        } else {
            None
        };
        Ok((node, gateway))
    }

    /// The gateway's client address (`ws://ADDR/v1/ws`), if this process runs one.
    pub fn ws_addr(&self) -> Option<SocketAddr> {
        self.gateway.as_ref().map(Gateway::addr)
    }

    /// The node's gRPC address, if this process runs one.
    pub fn node_addr(&self) -> Option<SocketAddr> {
        self.node.as_ref().map(Node::addr)
    }

    /// The admin address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin.addr()
    }

    /// The directory this process uses.
    pub fn directory(&self) -> &SharedDirectory {
        &self.directory
    }

    /// The node, if this process runs one.
    pub fn node(&self) -> Option<&Node> {
        self.node.as_ref()
    }

    /// Drains the node role (if any): no new rooms, every room handed off to another node and
    /// its sessions moved there by the gateways; waits at most `timeout` for the node to empty.
    /// Returns how many rooms were handed off. Call [`Plaza::shutdown`] afterwards.
    pub async fn drain(&self, timeout: Duration) -> usize {
        // A draining node takes no new sessions: not ready from now on.
        self.admin.set_status("draining");
        self.admin.set_ready(false);
        match &self.node {
            Some(n) => n.drain(timeout).await,
            None => 0,
        }
    }

    /// Orderly shutdown: not ready; stop accepting and close sessions with going-away; stop
    /// rooms; stop the admin server.
    pub async fn shutdown(self) {
        self.admin.set_ready(false);
        if let Some(g) = self.gateway {
            g.shutdown(self.shutdown_timeout).await;
        }
        if let Some(n) = self.node {
            n.shutdown().await;
        }
        self.admin.shutdown().await;
    }
}

/// The node of this process as the gateway's [`LocalNode`]: the `RoomHost` attach logic, its
/// sessions' inputs cast straight into their rooms ([`RoomUplink`]).
struct InProcessNode(RoomHostService);

impl LocalNode for InProcessNode {
    fn node_id(&self) -> &str {
        self.0.node_id()
    }

    fn attach(&self, request: AttachRequest) -> LocalAttach {
        let host = self.0.clone();
        Box::pin(async move {
            let (up, downlink) = host.attach_local(request).await?;
            Ok(LocalLink {
                uplink: Box::new(InProcessUplink(up)),
                downlink,
            })
        })
    }
}

/// A session's [`RoomUplink`] as the gateway's [`LocalUplink`] (its drop detaches).
struct InProcessUplink(RoomUplink);

impl LocalUplink for InProcessUplink {
    fn send(&mut self, msg: NodeInbound) -> Result<(), plaza_gateway::router::RoomStopped> {
        self.0
            .send(msg)
            .map_err(|_| plaza_gateway::router::RoomStopped)
    }
}

/// The embedded directory (`plaza up` without Redis) or Redis, retried with exponential backoff
/// (100 ms doubling to `directory.connect_backoff_max_ms`) for at most
/// `directory.connect_timeout_ms`; every failure is logged and shown by `/readyz`.
async fn open_directory(
    cfg: &PlazaConfig,
    roles: Roles,
    state: &AdminState,
) -> anyhow::Result<SharedDirectory> {
    let url = cfg.directory.redis_url.trim();
    if url.is_empty() {
        anyhow::ensure!(
            roles == Roles::All,
            "`plaza node` and `plaza gateway` need a shared directory: set --redis URL \
             (or directory.redis_url / PLAZA__DIRECTORY__REDIS_URL)"
        );
        return Ok(Arc::new(MemoryDirectory::new()));
    }
    let shown = config::redact("directory.redis_url", url);
    let tls = config::redis_tls(&cfg.directory).map_err(anyhow::Error::msg)?;
    // Checked here, not in `validate`: `--redis` may set the URL after the file was checked.
    anyhow::ensure!(
        tls.is_none() || url.starts_with("rediss"),
        "directory.redis_ca / redis_cert apply to TLS only: use a rediss:// or rediss+cluster:// \
         URL (directory {shown})"
    );
    let era = boot_era();
    let limit = Duration::from_millis(cfg.directory.connect_timeout_ms);
    let max_backoff = Duration::from_millis(cfg.directory.connect_backoff_max_ms);
    let started = tokio::time::Instant::now();
    let mut backoff = Duration::from_millis(100).min(max_backoff);
    let mut attempt = 1u32;
    loop {
        let opts = RedisOptions {
            prefix: cfg.directory.key_prefix.clone(),
            tls: tls.clone(),
            ..RedisOptions::default()
        };
        match RedisDirectory::connect_with(url, era, opts).await {
            Ok(dir) => {
                if attempt > 1 {
                    tracing::info!(url = %shown, attempt, "directory connected");
                }
                return Ok(Arc::new(dir));
            }
            Err(e) => {
                let waited = started.elapsed();
                if waited + backoff > limit {
                    anyhow::bail!(
                        "directory {shown}: still unreachable after {attempt} attempts in {} ms \
                         (directory.connect_timeout_ms): {e}",
                        waited.as_millis()
                    );
                }
                tracing::warn!(
                    url = %shown,
                    attempt,
                    retry_in_ms = backoff.as_millis() as u64,
                    error = %e,
                    "directory unreachable; retrying"
                );
                state.set_status(&format!(
                    "waiting for the directory ({shown}): attempt {attempt} failed: {}",
                    e.code()
                ));
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(max_backoff);
                attempt += 1;
            }
        }
    }
}

/// This process's boot era for fencing epochs: wall-clock milliseconds at start, so a node that
/// restarts (or a Redis that lost its data) never re-issues an older epoch.
fn boot_era() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The authenticator `[auth]` configures: guests, JWTs (key set loaded now; a JWKS file that
/// does not load stops start-up) and wallet signatures (replay-checked through `directory`),
/// with the ban list. An empty `auth.mode` is the role's default: guests for the all-in-one
/// process (`all_in_one`, `plaza up`), nothing for a gateway of a cluster.
pub async fn authenticator(
    cfg: &PlazaConfig,
    directory: &SharedDirectory,
    all_in_one: bool,
) -> anyhow::Result<Arc<dyn Authenticator>> {
    use plaza_gateway::auth::jwt::{JwksSource, JwtAuthenticator, JwtConfig};
    use plaza_gateway::auth::wallet::{WalletAuthenticator, WalletConfig};
    let a = &cfg.auth;
    let modes = a
        .modes_for(all_in_one)
        .map_err(|e| anyhow::anyhow!("auth.mode: {e}"))?;
    if !(modes.guest || modes.jwt || modes.wallet) {
        tracing::warn!(
            "auth.mode enables no sign-in: every client is refused auth_required (set auth.mode = \"jwt\" and/or \"wallet\"; \"guest\" for development)"
        );
    }
    let leeway = Duration::from_secs(a.leeway_s);
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    let jwt = if modes.jwt {
        let jwks = if !a.jwks_file.is_empty() {
            Some(JwksSource::File(a.jwks_file.clone().into()))
        } else {
            non_empty(&a.jwks_url).map(JwksSource::Url)
        };
        let jcfg = JwtConfig {
            jwks,
            issuer: non_empty(&a.issuer),
            audience: non_empty(&a.audience),
            identity_claim: a.identity_claim.clone(),
            role_claim: a.role_claim.clone(),
            leeway,
            hs256_secret: non_empty(&a.hs256_secret).map(String::into_bytes),
            refresh: Duration::from_secs(a.jwks_refresh_s),
            ..JwtConfig::new()
        };
        if jcfg.hs256_secret.is_some() {
            tracing::warn!(
                "auth.hs256_secret is set: HS256 tokens are accepted (development only)"
            );
        }
        Some(
            JwtAuthenticator::start(jcfg)
                .await
                .map_err(|e| anyhow::anyhow!("auth: {e}"))?,
        )
    } else {
        None
    };
    let wallet = modes.wallet.then(|| {
        Arc::new(WalletAuthenticator::new(
            WalletConfig {
                domain: a.wallet_domain.clone(),
                window: Duration::from_secs(a.wallet_window_s),
                leeway,
            },
            directory.clone(),
        ))
    });
    if modes.guest && !cfg.directory.redis_url.is_empty() {
        tracing::warn!(
            "auth.mode has guest: anyone may connect and claim any guest name (set auth.mode = \"jwt\" and/or \"wallet\" in production)"
        );
    }
    Ok(Arc::new(Combined {
        guest: modes.guest,
        jwt,
        wallet,
        banned: Combined::parse_ban_list(&a.banned),
    }))
}
