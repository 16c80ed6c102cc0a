//! `plaza-load`: drives N bot avatars through the real Plaza gateway and reports what they saw.
//!
//! [`run`] spawns every bot as a tokio task (no thread per bot), ramps connections up, samples a
//! per-second time series (and the server's tick p99 from `--metrics-url`), and returns a
//! [`Report`]. Bots speak protocol v1 over WebSocket, random-walk with the seed's adaptive send
//! rate, decode every snapshot frame with `plaza_proto::frame::FrameDecoder`, and measure
//! snapshot intervals, move-to-seen latency, ping RTT, bytes, errors, close codes and resumes.
//!
//! # Layout
//! * [`scenario`]: TOML bot mixes (walkers, idlers, churners, interactors).
//! * [`rate`]: the adaptive send-rate state machine.
//! * [`walk`]: the random-walking body.
//! * `bot`: one bot's connect / session / resume loop.
//! * `seen`: move-to-seen matching; `props`: double-hold bookkeeping; `stats`: shared counters.
//! * [`prom`]: Prometheus text parsing and scraping; [`report`] + `plot`: JSON, Markdown, PNG.
//!
//! Not here: the CLI (`main.rs`), any server code.

use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod bot;
mod plot;
pub mod prom;
mod props;
pub mod rate;
pub mod report;
pub mod scenario;
mod seen;
pub mod server;
pub mod stats;
pub mod steady;
pub mod tls;
pub mod walk;

pub use rate::{SendRate, SendRateConfig};
pub use report::{Report, RoomReport, SeriesPoint, WrittenFiles};
pub use scenario::{BotKind, BotMix, Scenario};
pub use stats::{KeyedCounts, Percentiles};
pub use walk::WalkModel;

use crate::stats::{Counters, Metric, Stats};

/// The server histogram whose p99 the report carries.
pub const TICK_METRIC: &str = "plaza_room_tick_duration_seconds";

/// Everything a run needs.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// Gateway WebSocket URL, e.g. `ws://127.0.0.1:7777/v1/ws`.
    pub gateway: String,
    /// Further gateway URLs (default none). With several, bot `i` starts at URL `i mod n` of
    /// `[gateway, more_gateways..]`, and a bot whose connect fails or whose session ends
    /// against its will goes to the next one (with its resume token): a killed or rolling
    /// gateway's clients come back through the others.
    pub more_gateways: Vec<String>,
    /// Number of bots.
    pub bots: usize,
    /// Number of rooms; bots go to `<room_prefix>0..rooms-1` round-robin.
    pub rooms: usize,
    /// Room id prefix (default `load-`).
    pub room_prefix: String,
    /// How long the run lasts from the first connect.
    pub duration: Duration,
    /// Connections are spread evenly over this time; `None`: 200 connects per second.
    pub ramp: Option<Duration>,
    /// The bot mix.
    pub scenario: Scenario,
    /// Seed of every random choice (bot kinds, walks, actions).
    pub seed: u64,
    /// Prometheus text endpoint to scrape once per second (`http://host:port/metrics`).
    pub metrics_url: Option<String>,
    /// Show a progress bar on stderr (hidden automatically when stderr is not a terminal).
    pub progress: bool,
    /// Adaptive movement send rate.
    pub send_rate: SendRateConfig,
    /// Ping period (default 2 s).
    pub ping_interval: Duration,
    /// Move-to-seen match tolerance on x and z in metres (default 2 mm).
    pub seen_tolerance_m: f32,
    /// Connect + negotiate + join deadline (default 10 s).
    pub connect_timeout: Duration,
    /// Attempts to join before a bot counts as failed (default 3).
    pub connect_attempts: u32,
    /// PEM files of extra CA certificates to trust for a `wss://` gateway (besides the webpki
    /// roots), e.g. a private CA or a self-signed certificate.
    pub ca_certs: Vec<std::path::PathBuf>,
    /// Expression messages each joined bot sends per second (0: none, the default); the
    /// expression id and intensity change every time.
    pub expression_hz: u32,
    /// The negotiate's `auth_token` of every bot (default empty: a fresh guest each, which
    /// needs `auth.mode` with guest). A terminal refusal (4003) is not retried.
    pub auth_token: String,
    /// How bots send their moves (default [`MovementMode::Plain`]).
    pub movement: MovementMode,
    /// How bots walk (default [`WalkModel::Waypoint`]).
    pub walk: WalkModel,
    /// The steady-state window starts this long after every bot joined (default 10 s).
    pub warmup: Duration,
}

/// How bots send their moves (`plaza-load --movement`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MovementMode {
    /// `plaza.v1.Movement` (floats).
    #[default]
    Plain,
    /// The seed's 160-bit `MovementCompressed` (docs/PROTOCOL.md §3), tier picked by the
    /// sender.
    Compressed,
    /// Odd-numbered bots compressed, even-numbered plain.
    Mixed,
}

impl MovementMode {
    /// Whether bot `index` sends compressed moves.
    pub fn compressed(self, index: usize) -> bool {
        match self {
            Self::Plain => false,
            Self::Compressed => true,
            Self::Mixed => index % 2 == 1,
        }
    }
}

impl std::str::FromStr for MovementMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "plain" => Ok(Self::Plain),
            "compressed" => Ok(Self::Compressed),
            "mixed" => Ok(Self::Mixed),
            _ => Err(format!(
                "unknown movement mode {s:?} (compressed, plain or mixed)"
            )),
        }
    }
}

impl LoadConfig {
    /// A config with defaults for `gateway` and `bots`.
    pub fn new(gateway: impl Into<String>, bots: usize) -> Self {
        Self {
            gateway: gateway.into(),
            more_gateways: Vec::new(),
            bots,
            rooms: 1,
            room_prefix: "load-".into(),
            duration: Duration::from_secs(20),
            ramp: None,
            scenario: Scenario::walkers(),
            seed: 1,
            metrics_url: None,
            progress: false,
            send_rate: SendRateConfig::default(),
            ping_interval: Duration::from_secs(2),
            seen_tolerance_m: 0.002,
            connect_timeout: Duration::from_secs(10),
            connect_attempts: 3,
            ca_certs: Vec::new(),
            expression_hz: 0,
            auth_token: String::new(),
            movement: MovementMode::Plain,
            walk: WalkModel::Waypoint,
            warmup: Duration::from_secs(10),
        }
    }

    /// The `i`-th gateway URL, cycling over `[gateway, more_gateways..]`.
    pub fn gateway_url(&self, i: usize) -> &str {
        match i % (1 + self.more_gateways.len()) {
            0 => &self.gateway,
            k => &self.more_gateways[k - 1],
        }
    }

    /// The ramp in effect.
    pub fn effective_ramp(&self) -> Duration {
        self.ramp
            .unwrap_or_else(|| Duration::from_secs_f64(self.bots as f64 / 200.0))
    }
}

/// State shared by all bots of a run.
pub(crate) struct Shared {
    pub(crate) cfg: LoadConfig,
    /// True once the run is stopped early.
    pub(crate) stop: tokio::sync::watch::Receiver<bool>,
    pub(crate) stats: Stats,
    pub(crate) board: seen::MoveBoard,
    pub(crate) props: props::PropBoard,
    /// The TLS client configuration of a `wss://` gateway.
    pub(crate) tls: Option<Arc<rustls::ClientConfig>>,
    /// A bot warned that its room is smaller than the jitter walk's world.
    pub(crate) walk_world_warned: std::sync::atomic::AtomicBool,
}

/// Runs the load test for its duration and returns its report. Bots that cannot connect are
/// counted, not fatal; an invalid config is an error.
pub async fn run(cfg: LoadConfig) -> anyhow::Result<Report> {
    run_with_stop(cfg, std::future::pending()).await
}

/// Like [`run`], but ends early when `stop` resolves (e.g. on Ctrl-C): every bot closes normally
/// and the report covers the time run (`stopped_early` is set; bots whose ramp slot had not
/// come count in `bots_not_started`, not in `bots_failed`).
pub async fn run_with_stop(
    cfg: LoadConfig,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<Report> {
    anyhow::ensure!(cfg.bots > 0, "--bots must be at least 1");
    anyhow::ensure!(cfg.rooms > 0, "--rooms must be at least 1");
    anyhow::ensure!(!cfg.duration.is_zero(), "--duration must be positive");
    anyhow::ensure!(cfg.scenario.total_weight() > 0, "the scenario has no bots");
    let tls = if cfg.gateway.starts_with("wss://") {
        Some(tls::client_config(&cfg.ca_certs)?)
    } else {
        anyhow::ensure!(
            cfg.gateway.starts_with("ws://"),
            "--gateway must be a ws:// or wss:// URL, not `{}`",
            cfg.gateway
        );
        None
    };
    if let Some(limit) = open_files_limit()
        && limit < cfg.bots as u64 + 64
    {
        tracing::warn!(
            limit,
            bots = cfg.bots,
            "the open-files limit is below one socket per bot; raise it (ulimit -n) or bots will fail to connect"
        );
    }
    let cpu_start = cpu_seconds();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let shared = Arc::new(Shared {
        stop: stop_rx,
        cfg: cfg.clone(),
        stats: Stats::new(),
        board: seen::MoveBoard::default(),
        props: props::PropBoard::default(),
        tls,
        walk_world_warned: std::sync::atomic::AtomicBool::new(false),
    });
    let start = Instant::now();
    let deadline = start + cfg.duration;
    let ramp = cfg.effective_ramp().min(cfg.duration);
    let mut rng = SmallRng::seed_from_u64(cfg.seed);
    let total_weight = cfg.scenario.total_weight();
    let mut bot_kinds = KeyedCounts::default();
    let mut tasks = tokio::task::JoinSet::new();
    for index in 0..cfg.bots {
        let mix = cfg.scenario.pick(rng.random_range(0..total_weight)).clone();
        bot_kinds.bump(mix.kind.name());
        let spec = bot::BotSpec {
            index,
            room: format!("{}{}", cfg.room_prefix, index % cfg.rooms),
            mix,
            start_at: start + ramp.mul_f64(index as f64 / cfg.bots as f64),
            seed: rng.random(),
        };
        let b = bot::Bot::new(shared.clone(), spec);
        tasks.spawn(b.run(deadline));
    }

    let sampler = tokio::spawn(sample_series(shared.clone(), start, deadline));
    // Bots end by themselves at the deadline (plus a close handshake); abort stragglers.
    let grace = cfg.connect_timeout + Duration::from_secs(5);
    let mut hard_stop = deadline + grace;
    let mut stopped_early = false;
    tokio::pin!(stop);
    loop {
        tokio::select! {
            res = tasks.join_next() => match res {
                None => break,
                Some(Err(e)) => tracing::warn!(error = %e, "bot task failed"),
                Some(Ok(())) => {}
            },
            () = &mut stop, if !stopped_early => {
                stopped_early = true;
                let _ = stop_tx.send(true);
                hard_stop = hard_stop.min(Instant::now() + grace);
            }
            () = tokio::time::sleep_until(hard_stop.into()) => break,
        }
    }
    tasks.abort_all();
    let (series, tick, marks) = sampler.await.unwrap_or_default();
    let steady = steady::load_window(&marks, cfg.warmup.as_secs_f64());
    let elapsed = start.elapsed();

    let st = &shared.stats;
    let c = &st.counters;
    let joined_s = Counters::get(&c.joined_micros) as f64 / 1e6;
    let per_bot_s = |bytes: u64| {
        if joined_s > 0.0 {
            bytes as f64 / joined_s
        } else {
            0.0
        }
    };
    let connected = Counters::get(&c.ever_joined);
    let not_started = Counters::get(&c.not_started);
    let (snapshot, seen_p, rtt, connect, resume) = st.with_total(|h| {
        (
            Percentiles::from_micros(h.get(Metric::SnapshotInterval)),
            Percentiles::from_micros(h.get(Metric::MoveToSeen)),
            Percentiles::from_micros(h.get(Metric::Rtt)),
            Percentiles::from_micros(h.get(Metric::Connect)),
            Percentiles::from_micros(h.get(Metric::Resume)),
        )
    });
    let keyed = std::mem::take(&mut *st.keyed.lock());
    let server_tick_p99_ms = tick
        .as_ref()
        .and_then(|h| h.quantile(0.99))
        .map(|s| s * 1e3);
    let per_room = st
        .rooms()
        .into_iter()
        .map(|(room, r)| {
            let joined_s = Counters::get(&r.joined_micros) as f64 / 1e6;
            let rate = |bytes: u64| {
                if joined_s > 0.0 {
                    bytes as f64 / joined_s
                } else {
                    0.0
                }
            };
            let bots = Counters::get(&r.bots);
            let connected = Counters::get(&r.joined);
            RoomReport {
                room,
                bots,
                connected,
                failed: bots.saturating_sub(connected),
                lost: Counters::get(&r.lost),
                frames: Counters::get(&r.frames),
                down_bytes_per_bot_per_s: rate(Counters::get(&r.down_bytes)),
                up_bytes_per_bot_per_s: rate(Counters::get(&r.up_bytes)),
                snapshot_interval_ms: r.snapshot_interval(),
                server_tick_p99_ms,
                ..RoomReport::default()
            }
        })
        .collect();
    Ok(Report {
        gateway: cfg.gateway.clone(),
        scenario: cfg.scenario.name.clone(),
        bot_kinds,
        rooms: cfg.rooms,
        seed: cfg.seed,
        duration_s: cfg.duration.as_secs_f64(),
        elapsed_s: elapsed.as_secs_f64(),
        bots_requested: cfg.bots as u64,
        bots_connected: connected,
        bots_failed: (cfg.bots as u64).saturating_sub(connected + not_started),
        bots_not_started: not_started,
        stopped_early,
        bots_lost: Counters::get(&c.bots_lost),
        connect_failures: Counters::get(&c.connect_failures),
        connect_errors: keyed.connect_errors,
        frames_received: Counters::get(&c.frames),
        keyframes_received: Counters::get(&c.keyframes),
        decode_errors: Counters::get(&c.decode_errors),
        check_failures: Counters::get(&c.check_failures),
        frame_errors: keyed.frame_errors,
        keyframes_requested: Counters::get(&c.keyframes_requested),
        frames_awaiting_keyframe: Counters::get(&c.frames_awaiting_keyframe),
        movements_sent: Counters::get(&c.movements_sent),
        pings_sent: Counters::get(&c.pings_sent),
        down_bytes_total: Counters::get(&c.down_bytes),
        up_bytes_total: Counters::get(&c.up_bytes),
        down_bytes_per_bot_per_s: per_bot_s(Counters::get(&c.down_bytes)),
        up_bytes_per_bot_per_s: per_bot_s(Counters::get(&c.up_bytes)),
        snapshot_interval_ms: snapshot,
        move_to_seen_ms: seen_p,
        rtt_ms: rtt,
        connect_ms: connect,
        resume_ms: resume,
        resumes: Counters::get(&c.resumes),
        resumes_in_session: Counters::get(&c.resumes_in_session),
        reconnect_times_unix_ms: {
            let mut v = keyed.reconnect_times_unix_ms;
            v.sort_unstable();
            v
        },
        keyframes_unrequested: Counters::get(&c.keyframes_unrequested),
        rejoins: Counters::get(&c.rejoins),
        close_codes: keyed.close_codes,
        error_codes: keyed.error_codes,
        corrections_by_reason: keyed.corrections_by_reason,
        rejections_by_reason: keyed.rejections_by_reason,
        events_by_kind: keyed.events_by_kind,
        interactions_sent: Counters::get(&c.interactions_sent),
        consent_sent: Counters::get(&c.consent_sent),
        emotes_sent: Counters::get(&c.emotes_sent),
        expressions_sent: Counters::get(&c.expressions_sent),
        expression_frames_received: Counters::get(&c.expression_frames),
        expression_states_received: Counters::get(&c.expression_states),
        expression_down_bytes_total: Counters::get(&c.expression_down_bytes),
        expression_down_bytes_per_bot_per_s: per_bot_s(Counters::get(&c.expression_down_bytes)),
        double_holds: Counters::get(&c.double_holds),
        holder_handoffs: Counters::get(&c.holder_handoffs),
        server_tick_p99_ms,
        server_tick_p50_ms: tick
            .as_ref()
            .and_then(|h| h.quantile(0.50))
            .map(|s| s * 1e3),
        server_ticks: tick.as_ref().map(|h| h.count.max(0.0) as u64),
        load_cpu_seconds: (cpu_seconds() - cpu_start).max(0.0),
        load_peak_rss_mib: peak_rss_mib(),
        walk: cfg.walk.name().into(),
        steady,
        started_at: Some(start),
        series,
        server: None,
        servers: Vec::new(),
        per_room,
        verdict: None,
    })
}

/// Samples one [`SeriesPoint`] per second until the deadline; also returns the whole run's
/// tick histogram (last scrape minus first) and the steady window's marks.
async fn sample_series(
    shared: Arc<Shared>,
    start: Instant,
    deadline: Instant,
) -> (
    Vec<SeriesPoint>,
    Option<prom::HistogramBuckets>,
    Vec<steady::Mark>,
) {
    let cfg = &shared.cfg;
    let bar = if cfg.progress {
        let bar = ProgressBar::with_draw_target(
            Some(cfg.duration.as_secs()),
            ProgressDrawTarget::stderr_with_hz(4),
        );
        if let Ok(style) =
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len}s {msg}")
        {
            bar.set_style(style);
        }
        bar
    } else {
        ProgressBar::hidden()
    };
    let st = &shared.stats;
    let c = &st.counters;
    let mut series = Vec::new();
    let mut marks = Vec::new();
    let mut tick = tokio::time::interval_at(
        (start + Duration::from_secs(1)).into(),
        Duration::from_secs(1),
    );
    // A slow scrape must not make the next points burst in: skip missed seconds instead.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let (mut last_down, mut last_up, mut last_frames) = (0u64, 0u64, 0u64);
    let mut last_at = start;
    let mut first_scrape: Option<prom::HistogramBuckets> = None;
    let mut prev_scrape: Option<prom::HistogramBuckets> = None;
    let scrape = |url: String| async move {
        let text = prom::scrape(&url, Duration::from_millis(800)).await.ok()?;
        prom::parse_histogram(&text, TICK_METRIC)
    };
    if let Some(url) = &cfg.metrics_url {
        first_scrape = scrape(url.clone()).await;
        prev_scrape = first_scrape.clone();
    }
    loop {
        let now_t = tick.tick().await;
        let now = Instant::from(now_t).max(Instant::now());
        let dt = now.duration_since(last_at).as_secs_f64().max(1e-3);
        last_at = now;
        let connected = Counters::get(&c.connected);
        let (down, up, frames) = (
            Counters::get(&c.down_bytes),
            Counters::get(&c.up_bytes),
            Counters::get(&c.frames),
        );
        let per_bot = |d: u64| {
            if connected > 0 {
                d as f64 / dt / connected as f64
            } else {
                0.0
            }
        };
        let (snap, seen, rtt) = st.take_window(|h| {
            (
                Percentiles::from_micros(h.get(Metric::SnapshotInterval)),
                Percentiles::from_micros(h.get(Metric::MoveToSeen)),
                Percentiles::from_micros(h.get(Metric::Rtt)),
            )
        });
        let some = |p: Percentiles, v: f64| (p.count > 0).then_some(v);
        let mut server_tick = None;
        if let Some(url) = &cfg.metrics_url
            && let Some(h) = scrape(url.clone()).await
        {
            if let Some(prev) = &prev_scrape {
                server_tick = h.delta(prev).quantile(0.99).map(|s| s * 1e3);
            }
            if first_scrape.is_none() {
                first_scrape = Some(h.clone());
            }
            prev_scrape = Some(h);
        }
        marks.push(steady::Mark {
            t_s: now.duration_since(start).as_secs_f64(),
            connected,
            ever_joined: Counters::get(&c.ever_joined),
            cpu_s: cpu_seconds(),
            down_bytes: down,
            up_bytes: up,
            rss_mib: rss_mib(),
        });
        let point = SeriesPoint {
            t_s: now.duration_since(start).as_secs_f64(),
            connected,
            frames_per_s: (frames - last_frames) as f64 / dt,
            down_bytes_per_bot_per_s: per_bot(down - last_down),
            up_bytes_per_bot_per_s: per_bot(up - last_up),
            snapshot_interval_p99_ms: some(snap, snap.p99),
            move_to_seen_p50_ms: some(seen, seen.p50),
            move_to_seen_p99_ms: some(seen, seen.p99),
            rtt_p99_ms: some(rtt, rtt.p99),
            server_tick_p99_ms: server_tick,
        };
        (last_down, last_up, last_frames) = (down, up, frames);
        bar.set_position(point.t_s as u64);
        bar.set_message(format!(
            "connected {} frames/s {:.0} seen p99 {} tick p99 {}",
            connected,
            point.frames_per_s,
            point
                .move_to_seen_p99_ms
                .map_or("-".into(), |v| format!("{v:.0}ms")),
            point
                .server_tick_p99_ms
                .map_or("-".into(), |v| format!("{v:.2}ms")),
        ));
        series.push(point);
        if now >= deadline || *shared.stop.borrow() {
            break;
        }
    }
    bar.finish_and_clear();
    let whole = match (prev_scrape, first_scrape) {
        (Some(last), Some(first)) => Some(last.delta(&first)),
        _ => None,
    };
    (series, whole, marks)
}

/// CPU seconds (user + system) of this process, from `/proc/self/stat`; 0 where unavailable.
pub fn cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| parse_proc_stat_cpu(&s))
        .unwrap_or(0.0)
}

/// The soft limit of open files of this process (`/proc/self/limits`), if known.
pub fn open_files_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    parse_open_files_limit(&text)
}

fn parse_open_files_limit(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Peak resident memory of this process in MiB (`VmHWM` of `/proc/self/status`); 0 where
/// unavailable.
pub fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| parse_vm_hwm_kib(&s))
        .map_or(0.0, |kib| kib as f64 / 1024.0)
}

/// Resident memory of this process now in MiB (`VmRSS`); 0 where unavailable.
pub fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| parse_status_kib(&s, "VmRSS:"))
        .map_or(0.0, |kib| kib as f64 / 1024.0)
}

fn parse_vm_hwm_kib(status: &str) -> Option<u64> {
    parse_status_kib(status, "VmHWM:")
}

fn parse_status_kib(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Parses utime + stime (fields 14 and 15, in clock ticks of 1/100 s) out of a
/// `/proc/<pid>/stat` line.
fn parse_proc_stat_cpu(stat: &str) -> Option<f64> {
    // The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state), so field n is at index n - 3.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // USER_HZ is 100 on every Linux platform Rust supports.
    Some((utime + stime) as f64 / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn movement_modes() {
        let m = |s: &str| s.parse::<MovementMode>();
        assert_eq!(m("plain"), Ok(MovementMode::Plain));
        assert_eq!(m("compressed"), Ok(MovementMode::Compressed));
        assert_eq!(m("mixed"), Ok(MovementMode::Mixed));
        assert!(m("zip").is_err());
        let compressed =
            |mode: MovementMode| (0..4).map(|i| mode.compressed(i)).collect::<Vec<_>>();
        assert_eq!(compressed(MovementMode::Plain), [false; 4]);
        assert_eq!(compressed(MovementMode::Compressed), [true; 4]);
        assert_eq!(compressed(MovementMode::Mixed), [false, true, false, true]);
        assert_eq!(LoadConfig::new("ws://x", 1).movement, MovementMode::Plain);
    }

    #[test]
    fn parses_proc_stat() {
        let line = "1234 (plaza load (x)) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 3 0 100 0 0";
        assert_eq!(parse_proc_stat_cpu(line), Some(3.0));
        assert_eq!(parse_proc_stat_cpu("garbage"), None);
        assert!(cpu_seconds() >= 0.0);
        assert_eq!(
            parse_vm_hwm_kib("Name:\tx\nVmHWM:\t  20480 kB\n"),
            Some(20480)
        );
        assert_eq!(parse_vm_hwm_kib("Name:\tx\n"), None);
        assert_eq!(
            parse_status_kib("VmHWM:\t 9 kB\nVmRSS:\t  2048 kB\n", "VmRSS:"),
            Some(2048)
        );
        assert!(rss_mib() > 0.0);
        let limits = "Limit  Soft Limit  Hard Limit  Units\nMax open files            1024                 524288               files\n";
        assert_eq!(parse_open_files_limit(limits), Some(1024));
        assert_eq!(
            parse_open_files_limit("Max open files  unlimited unlimited files"),
            None
        );
    }

    #[test]
    fn default_ramp_is_200_connects_per_second() {
        let cfg = LoadConfig::new("ws://x", 2000);
        assert_eq!(cfg.effective_ramp(), Duration::from_secs(10));
    }
}
