//! `plaza-load` CLI: parses flags into a [`plaza_load::LoadConfig`], runs it on a tokio runtime
//! of `--threads` workers, samples the server's process metrics when `--metrics-url` is given,
//! judges the run against the thresholds given on the command line, prints the summary and
//! writes the report files.
//!
//! Exit status: 0 = pass; 2 = bots failed or were lost (every bot; with `--strict`, any bot, or
//! any decode error or check failure); 3 = a `--max-*` threshold was breached.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use plaza_load::report::{ServerProcess, Thresholds};
use plaza_load::{LoadConfig, Scenario};

/// Drive N bot avatars through a Plaza gateway and report what they saw.
#[derive(Debug, Parser)]
#[command(name = "plaza-load", version)]
struct Args {
    /// Gateway WebSocket URL: `ws://` or `wss://` (TLS with the webpki roots and --ca-cert).
    /// Repeat it for several gateways: bots are spread over them, and a bot whose gateway goes
    /// away comes back through the next one with its resume token.
    #[arg(long, default_value = "ws://127.0.0.1:7777/v1/ws")]
    gateway: Vec<String>,
    /// Also trust the CA certificates in this PEM file for `wss://` (repeatable).
    #[arg(long = "ca-cert", value_name = "FILE")]
    ca_cert: Vec<PathBuf>,
    /// The `auth_token` every bot negotiates with (a JWT, `guest:<name>`); default none (a
    /// fresh guest each). A gateway's terminal refusal (4003) is not retried.
    #[arg(long = "auth-token", value_name = "TOKEN", default_value = "")]
    auth_token: String,
    /// Number of bots.
    #[arg(long, default_value_t = 10)]
    bots: usize,
    /// Expression messages each bot sends per second once joined (0: none); the report shows
    /// the expression bytes received per bot separately.
    #[arg(long, default_value_t = 0)]
    expressions: u32,
    /// Movement messages each moving bot sends per second at most (the send rate's fastest
    /// interval and its per-second cap; default 10, the seed's rate; the gateway accepts up to
    /// `gateway.movement_hz`, shipped 20).
    #[arg(long = "input-hz", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100))]
    input_hz: u32,
    /// How bots send their moves: `plain` (`Movement`, floats), `compressed` (the seed's
    /// 160-bit `MovementCompressed`, the tier picked by the sender) or `mixed` (odd-numbered
    /// bots compressed, even-numbered plain).
    #[arg(long, default_value = "plain")]
    movement: plaza_load::MovementMode,
    /// How bots walk: `waypoint` (straight lines to random waypoints, moves sent when the pose
    /// changed) or `jitter` (the standard room benchmark: heading ±0.3 rad and speed ±0.5 m/s
    /// per 100 ms input, 0–6 m/s below the room's limit, every input sent, in a 200 m × 200 m
    /// world clipped to the room's bounds: serve `load/rooms/open-200.toml` for the whole of it).
    #[arg(long, default_value = "waypoint")]
    walk: plaza_load::WalkModel,
    /// The steady-state window (`steady` in the report) starts this long after every bot
    /// joined and lasts until the run ends.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    warmup: Duration,
    /// Number of rooms (`load-0` .. `load-<R-1>`, bots round-robin).
    #[arg(long, default_value_t = 1)]
    rooms: usize,
    /// Room id prefix.
    #[arg(long, default_value = "load-")]
    room_prefix: String,
    /// Run length, e.g. `20s`, `2m`, `1500ms`.
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    duration: Duration,
    /// Spread connects over this time (default: 200 connects per second).
    #[arg(long, value_parser = parse_duration)]
    ramp: Option<Duration>,
    /// JSON report path; the Markdown summary and PNG plots go beside it.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Scenario TOML file, or a built-in name: walkers, mixed, interact, churn.
    #[arg(long)]
    scenario: Option<String>,
    /// Prometheus endpoint to scrape each second for the room tick p99 (and, without
    /// --server-metrics, for the server's CPU and RSS).
    #[arg(long)]
    metrics_url: Option<String>,
    /// A server's `/metrics` to read its CPU and RSS from (`process_cpu_seconds_total`,
    /// `process_resident_memory_bytes`) once per second; repeat it for several processes
    /// (gateway and nodes): the report lists each and their sum. Default: --metrics-url.
    #[arg(long = "server-metrics", value_name = "URL")]
    server_metrics: Vec<String>,
    /// A node's admin base URL (`http://host:port`, repeatable): its `GET /v1/rooms` is read
    /// one second before the run ends for each room's own tick p99 and bytes per client.
    #[arg(long = "admin-url", value_name = "URL")]
    admin_url: Vec<String>,
    /// Seed of all random choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Ping period.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    ping_interval: Duration,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Exit with status 2 if any bot failed or was lost, or any decode error or check failure
    /// was counted (without it: only if every bot failed or was lost).
    #[arg(long)]
    strict: bool,
    /// Tokio worker threads of the bots.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..))]
    threads: u16,
    /// Fail (exit 3) if more bots than this failed or were lost.
    #[arg(long)]
    max_bots_failed: Option<u64>,
    /// Fail (exit 3) if the snapshot interval p99 exceeds this many milliseconds.
    #[arg(long)]
    max_snapshot_p99_ms: Option<f64>,
    /// Fail (exit 3) if the move-to-seen p99 exceeds this many milliseconds.
    #[arg(long)]
    max_move_to_seen_p99_ms: Option<f64>,
    /// Fail (exit 3) if the server's room tick p99 exceeds this many milliseconds (needs
    /// --metrics-url).
    #[arg(long)]
    max_tick_p99_ms: Option<f64>,
    /// Fail (exit 3) if the server used more than this many cores on average, summed over the
    /// scraped processes (needs --server-metrics or --metrics-url).
    #[arg(long)]
    max_server_cpu_cores: Option<f64>,
}

/// Parses `250ms`, `20s`, `2m`, `1h` or a bare number of seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let v: f64 = num.parse().map_err(|_| format!("bad duration {s:?}"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" => v,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        _ => return Err(format!("bad duration unit in {s:?} (use ms, s, m or h)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("bad duration {s:?}: {e}"))
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let scenario = match &args.scenario {
        Some(s) => Scenario::load(s).with_context(|| format!("loading scenario {s}"))?,
        None => Scenario::walkers(),
    };
    let thresholds = Thresholds {
        strict: args.strict,
        max_bots_failed: args.max_bots_failed,
        max_snapshot_p99_ms: args.max_snapshot_p99_ms,
        max_move_to_seen_p99_ms: args.max_move_to_seen_p99_ms,
        max_tick_p99_ms: args.max_tick_p99_ms,
        max_server_cpu_cores: args.max_server_cpu_cores,
    };
    let mut gateways = args.gateway.into_iter();
    let first = gateways
        .next()
        .unwrap_or_else(|| "ws://127.0.0.1:7777/v1/ws".into());
    let mut cfg = LoadConfig::new(first, args.bots);
    cfg.more_gateways = gateways.collect();
    cfg.rooms = args.rooms;
    cfg.room_prefix = args.room_prefix;
    cfg.duration = args.duration;
    cfg.ramp = args.ramp;
    cfg.scenario = scenario;
    cfg.seed = args.seed;
    cfg.metrics_url = args.metrics_url.clone();
    cfg.ping_interval = args.ping_interval;
    cfg.progress = !args.quiet;
    cfg.ca_certs = args.ca_cert.clone();
    cfg.expression_hz = args.expressions;
    cfg.send_rate.move_interval = Duration::from_secs_f64(1.0 / f64::from(args.input_hz));
    cfg.send_rate.max_per_second = args.input_hz;
    cfg.auth_token = args.auth_token.clone();
    cfg.movement = args.movement;
    cfg.walk = args.walk;
    cfg.warmup = args.warmup;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(usize::from(args.threads))
        .enable_all()
        .build()?;
    let stop = async {
        // On Ctrl-C the bots close normally and the report covers the time run.
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("interrupted: closing the bots and writing the report");
        } else {
            std::future::pending::<()>().await;
        }
    };
    let (sampler_stop, sampler_rx) = tokio::sync::watch::channel(false);
    let server_urls = if args.server_metrics.is_empty() {
        args.metrics_url.iter().cloned().collect()
    } else {
        args.server_metrics.clone()
    };
    let samplers: Vec<_> = server_urls
        .into_iter()
        .map(|url| {
            let task = runtime.spawn(plaza_load::server::sample(url.clone(), sampler_rx.clone()));
            (url, task)
        })
        .collect();
    // The rooms' own view, read while the bots are still in them.
    let admin_urls = args.admin_url.clone();
    let views_at = args
        .duration
        .saturating_sub(Duration::from_secs(1))
        .max(args.duration / 2);
    let views = runtime.spawn(async move {
        tokio::time::sleep(views_at).await;
        let mut all = std::collections::BTreeMap::new();
        for url in admin_urls {
            match plaza_load::server::room_views(&url).await {
                Ok(v) => all.extend(v),
                Err(e) => eprintln!("warning: {e}; its rooms' tick p99 is not in the report"),
            }
        }
        all
    });
    let mut report = runtime.block_on(plaza_load::run_with_stop(cfg, stop))?;
    if !args.admin_url.is_empty()
        && let Ok(views) = runtime.block_on(views)
    {
        report.apply_room_views(&views);
    }
    let _ = sampler_stop.send(true);
    for (url, task) in samplers {
        match runtime.block_on(task).ok().flatten() {
            Some(p) => report.servers.push(p),
            None => eprintln!(
                "warning: {url} never returned process_cpu_seconds_total and \
                 process_resident_memory_bytes; its CPU and RSS are not in the report"
            ),
        }
    }
    report.server = ServerProcess::total(&report.servers);
    report.apply_server_steady();
    let verdict = thresholds.judge(&report);
    let (bots_ok, thresholds_ok) = (verdict.bots_ok, verdict.thresholds_ok);
    println!("{}", verdict.line().replace("**", ""));
    report.verdict = Some(verdict);
    println!("{}", report.summary());
    if let Some(path) = &args.report {
        let files = report.write_files(path)?;
        println!(
            "report: {} (+ {}, {} plots)",
            files.json.display(),
            files.markdown.display(),
            files.plots.len()
        );
    }
    if !bots_ok {
        std::process::exit(2);
    }
    if !thresholds_ok {
        std::process::exit(3);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("20s"), Ok(Duration::from_secs(20)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("3x").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn cli_parses() {
        let a = Args::try_parse_from([
            "plaza-load",
            "--bots",
            "300",
            "--rooms",
            "3",
            "--duration",
            "20s",
            "--report",
            "r.json",
            "--ca-cert",
            "ca.pem",
            "--server-metrics",
            "http://127.0.0.1:9201/metrics",
            "--server-metrics",
            "http://127.0.0.1:9202/metrics",
        ])
        .unwrap();
        assert_eq!(a.bots, 300);
        assert_eq!(a.ca_cert, [PathBuf::from("ca.pem")]);
        assert_eq!(a.server_metrics.len(), 2);
        assert_eq!(a.duration, Duration::from_secs(20));
        assert_eq!(a.walk, plaza_load::WalkModel::Waypoint);
        assert_eq!(a.warmup, Duration::from_secs(10));
        let b = Args::try_parse_from(["plaza-load", "--walk", "jitter", "--warmup", "5s"]).unwrap();
        assert_eq!(b.walk, plaza_load::WalkModel::Jitter);
        assert_eq!(b.warmup, Duration::from_secs(5));
        assert!(Args::try_parse_from(["plaza-load", "--walk", "drunk"]).is_err());
    }
}
