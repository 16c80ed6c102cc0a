//! The `plaza` binary: `plaza up` runs every role in one process; `plaza node` and
//! `plaza gateway` run one role of a cluster; `plaza config print` shows the effective
//! configuration and where each value came from.
//!
//! Signals: SIGINT/SIGTERM stop the process in order; a `plaza node` first drains (hands its
//! rooms to other nodes, whose gateways move the sessions without a disconnect).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use plaza_ops::config::{self, PlazaConfig, Provenance, Source};
use plaza_ops::{Plaza, Roles};

#[derive(Debug, Parser)]
#[command(
    name = "plaza",
    version,
    about = "Plaza: shared realtime rooms for thousands of avatars"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run every role in one process with the embedded directory (no Redis needed).
    Up(RoleArgs),
    /// Run a room node (needs --redis).
    Node(RoleArgs),
    /// Run a gateway (needs --redis).
    Gateway(RoleArgs),
    /// Configuration tools.
    Config {
        #[command(subcommand)]
        cmd: ConfigCmd,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCmd {
    /// Print the effective configuration and where each value came from.
    Print(RoleArgs),
}

#[derive(Debug, Args)]
struct RoleArgs {
    /// Configuration file (TOML).
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    /// Listen address: the client WebSocket for `up`/`gateway`, the gRPC address for `node`.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Admin address (health, readiness, metrics).
    #[arg(long)]
    admin_listen: Option<SocketAddr>,
    /// Redis URL of the cluster directory.
    #[arg(long)]
    redis: Option<String>,
    /// Node id (for `node`; registered with a boot suffix).
    #[arg(long)]
    node_id: Option<String>,
    /// Append room activations and directory commits to this file (for `node`/`up`).
    #[arg(long)]
    event_log: Option<PathBuf>,
}

fn load(args: &RoleArgs, role: Roles) -> anyhow::Result<(PlazaConfig, Provenance)> {
    let (mut cfg, mut prov) = config::load(args.config.as_deref(), None)?;
    if let Some(l) = args.listen {
        if role == Roles::Node {
            cfg.node.listen = l;
            prov.insert("node.listen".into(), Source::Flag);
        } else {
            cfg.gateway.listen = l;
            prov.insert("gateway.listen".into(), Source::Flag);
        }
    }
    if let Some(a) = args.admin_listen {
        cfg.admin.listen = a;
        prov.insert("admin.listen".into(), Source::Flag);
    }
    if let Some(r) = &args.redis {
        cfg.directory.redis_url = r.clone();
        prov.insert("directory.redis_url".into(), Source::Flag);
    }
    if let Some(n) = &args.node_id {
        cfg.node.id = n.clone();
        prov.insert("node.id".into(), Source::Flag);
    }
    if let Some(p) = &args.event_log {
        cfg.node.event_log = p.display().to_string();
        prov.insert("node.event_log".into(), Source::Flag);
    }
    cfg.validate()?;
    Ok((cfg, prov))
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let (args, roles) = match cli.cmd {
        Cmd::Config {
            cmd: ConfigCmd::Print(args),
        } => {
            let (cfg, prov) = load(&args, Roles::All)?;
            print!("{}", config::render(&cfg, &prov));
            return Ok(());
        }
        Cmd::Up(a) => (a, Roles::All),
        Cmd::Node(a) => (a, Roles::Node),
        Cmd::Gateway(a) => (a, Roles::Gateway),
    };
    let (cfg, _) = load(&args, roles)?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run(cfg, roles))
}

async fn run(cfg: PlazaConfig, roles: Roles) -> anyhow::Result<()> {
    let service = match roles {
        Roles::All => "plaza",
        Roles::Node => "plaza-node",
        Roles::Gateway => "plaza-gateway",
    };
    let telemetry = plaza_ops::telemetry::init(&cfg, service)?;
    let plaza = Plaza::start(&cfg, roles).await?;
    if let Some(a) = plaza.ws_addr() {
        tracing::info!("clients: ws://{a}/v1/ws");
    }
    tracing::info!(
        "admin: http://{}/healthz /readyz /metrics",
        plaza.admin_addr()
    );
    wait_for_signal().await;
    if roles == Roles::Node {
        // A node hands its rooms to other nodes first; gateways move the sessions.
        tracing::info!("draining");
        let handed = plaza.drain(DRAIN_TIMEOUT).await;
        tracing::info!(rooms = handed, "drained");
    }
    tracing::info!("shutting down");
    plaza.shutdown().await;
    tracing::info!("stopped");
    telemetry.shutdown();
    Ok(())
}

/// Longest a node waits for its rooms and sessions to move away on SIGTERM.
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
