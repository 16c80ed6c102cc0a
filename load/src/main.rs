//! `plaza-load` CLI: parses flags into a [`plaza_load::LoadConfig`], runs it on a two-worker
//! tokio runtime, prints the summary and writes the report files. All logic is in the library.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use plaza_load::{LoadConfig, Scenario};

/// Drive N bot avatars through a Plaza gateway and report what they saw.
#[derive(Debug, Parser)]
#[command(name = "plaza-load", version)]
struct Args {
    /// Gateway WebSocket URL.
    #[arg(long, default_value = "ws://127.0.0.1:7777/v1/ws")]
    gateway: String,
    /// Number of bots.
    #[arg(long, default_value_t = 10)]
    bots: usize,
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
    /// Prometheus endpoint to scrape each second for the room tick p99.
    #[arg(long)]
    metrics_url: Option<String>,
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
    /// was counted.
    #[arg(long)]
    strict: bool,
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
    let mut cfg = LoadConfig::new(args.gateway, args.bots);
    cfg.rooms = args.rooms;
    cfg.room_prefix = args.room_prefix;
    cfg.duration = args.duration;
    cfg.ramp = args.ramp;
    cfg.scenario = scenario;
    cfg.seed = args.seed;
    cfg.metrics_url = args.metrics_url;
    cfg.ping_interval = args.ping_interval;
    cfg.progress = !args.quiet;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
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
    let report = runtime.block_on(plaza_load::run_with_stop(cfg, stop))?;
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
    let bad = report.bots_failed + report.bots_lost + report.decode_errors + report.check_failures;
    if args.strict && bad > 0 {
        std::process::exit(2);
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
        ])
        .unwrap();
        assert_eq!(a.bots, 300);
        assert_eq!(a.duration, Duration::from_secs(20));
    }
}
