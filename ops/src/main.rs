//! The `plaza` binary: `plaza up` runs every role in one process; `plaza node` and
//! `plaza gateway` run one role of a cluster; `plaza config print` shows the effective
//! configuration (secrets redacted) and where each value came from; `plaza config check`
//! validates it without starting anything.
//!
//! Errors are printed once, as one `plaza: …` line naming their source, never with a
//! backtrace; the exit status is 1 (2 for command-line usage errors, from clap).
//!
//! Signals: SIGINT/SIGTERM stop the process in order; a `plaza node` first drains (hands its
//! rooms to other nodes, whose gateways move the sessions without a disconnect).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use plaza_ops::config::{self, Address, PlazaConfig, Provenance, Source};
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
    /// Print the effective configuration and where each value came from (secrets redacted).
    Print(RoleArgs),
    /// Validate the configuration (file, environment, flags, log filter, OpenTelemetry
    /// variables, URLs and the rules between keys) without starting anything.
    Check(RoleArgs),
}

#[derive(Debug, Args)]
struct RoleArgs {
    /// Configuration file (TOML).
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    /// Listen address (`host:port`): the client WebSocket for `up`/`gateway`, the gRPC
    /// address for `node`.
    #[arg(long)]
    listen: Option<Address>,
    /// Admin address (`host:port`: health, readiness, metrics, operator API).
    #[arg(long)]
    admin_listen: Option<Address>,
    /// Redis URL of the cluster directory.
    #[arg(long)]
    redis: Option<String>,
    /// Node id (for `node`; registered with a boot suffix).
    #[arg(long)]
    node_id: Option<String>,
    /// Append room activations and directory commits to this file (for `node`/`up`).
    #[arg(long)]
    event_log: Option<PathBuf>,
    /// Serve `wss://`: the certificate chain (PEM) of the client listener (`gateway.tls_cert`;
    /// re-read when it changes). Needs --tls-key.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert (`gateway.tls_key`).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

fn load(args: &RoleArgs, role: Roles) -> anyhow::Result<(PlazaConfig, Provenance)> {
    let (mut cfg, mut prov) = config::load(args.config.as_deref(), None)?;
    if let Some(l) = args.listen.clone() {
        if role == Roles::Node {
            cfg.node.listen = l;
            prov.insert("node.listen".into(), Source::Flag);
        } else {
            cfg.gateway.listen = l;
            prov.insert("gateway.listen".into(), Source::Flag);
        }
    }
    if let Some(a) = args.admin_listen.clone() {
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
    if let (Some(c), Some(k)) = (&args.tls_cert, &args.tls_key) {
        cfg.gateway.tls_cert = c.display().to_string();
        cfg.gateway.tls_key = k.display().to_string();
        prov.insert("gateway.tls_cert".into(), Source::Flag);
        prov.insert("gateway.tls_key".into(), Source::Flag);
    }
    if let Some(p) = &args.event_log {
        cfg.node.event_log = p.display().to_string();
        prov.insert("node.event_log".into(), Source::Flag);
    }
    cfg.validate()
        .map_err(|e| e.with_origin(&prov, args.config.as_deref()))?;
    Ok((cfg, prov))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match real_main(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Once, on one line, with its causes joined: no "Caused by" repeat, no backtrace.
            eprintln!("plaza: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn real_main(cli: Cli) -> anyhow::Result<()> {
    let (args, roles) = match cli.cmd {
        Cmd::Config {
            cmd: ConfigCmd::Print(args),
        } => {
            let (cfg, prov) = load(&args, Roles::All)?;
            print!("{}", config::render(&cfg, &prov));
            return Ok(());
        }
        Cmd::Config {
            cmd: ConfigCmd::Check(args),
        } => {
            let (cfg, prov) = load(&args, Roles::All)?;
            plaza_ops::telemetry::check(&cfg, &plaza_ops::telemetry::process_env())?;
            let from = |src: Source| match src {
                Source::Default => "default",
                Source::File => "file",
                Source::Env => "env",
                Source::Flag => "flag",
            };
            let set: Vec<String> = prov
                .iter()
                .filter(|(_, s)| **s != Source::Default)
                .map(|(k, s)| format!("{k} ({})", from(*s)))
                .collect();
            println!(
                "configuration ok: {} keys, {} set ({})",
                prov.len(),
                set.len(),
                if set.is_empty() {
                    "all defaults".to_owned()
                } else {
                    set.join(", ")
                }
            );
            return Ok(());
        }
        Cmd::Up(a) => (a, Roles::All),
        Cmd::Node(a) => (a, Roles::Node),
        Cmd::Gateway(a) => (a, Roles::Gateway),
    };
    let (cfg, _) = load(&args, roles)?;
    // The log filter and OTEL_* variables are checked before anything starts.
    plaza_ops::telemetry::check(&cfg, &plaza_ops::telemetry::process_env())?;
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
    // The handlers are installed before anything starts, so a SIGTERM during start-up (a pod
    // deleted while Redis is still retried) stops the process cleanly instead of killing it.
    let mut stop = StopSignal::install()?;
    let telemetry = plaza_ops::telemetry::init(&cfg, service)?;
    let plaza = tokio::select! {
        started = Plaza::start(&cfg, roles) => started?,
        () = stop.recv() => {
            tracing::info!("stopped during start-up");
            telemetry.shutdown();
            return Ok(());
        }
    };
    if let Some(a) = plaza.ws_addr() {
        let scheme = if cfg.gateway.tls_cert.trim().is_empty() {
            "ws"
        } else {
            "wss"
        };
        tracing::info!("clients: {scheme}://{a}/v1/ws");
    }
    let scheme = if cfg.admin.tls_cert.trim().is_empty() {
        "http"
    } else {
        "https"
    };
    tracing::info!(
        "admin: {scheme}://{}/healthz /readyz /metrics",
        plaza.admin_addr()
    );
    stop.recv().await;
    if roles == Roles::Node {
        // A node hands its rooms to other nodes first; gateways move the sessions.
        tracing::info!("draining");
        let handed = plaza
            .drain(Duration::from_millis(cfg.node.drain_timeout_ms))
            .await;
        tracing::info!(rooms = handed, "drained");
    }
    tracing::info!("shutting down");
    plaza.shutdown().await;
    tracing::info!("stopped");
    telemetry.shutdown();
    Ok(())
}

/// SIGTERM or SIGINT (Ctrl-C), listened for from the moment it is installed.
struct StopSignal {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl StopSignal {
    fn install() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Self {
                term: signal(SignalKind::terminate())?,
                int: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    async fn recv(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
