//! The run report: JSON (serde), a Markdown summary, a terminal summary, and the files beside
//! the JSON (`<stem>.md`, `<stem>-*.png` via the private `plot` module).
//!
//! Latencies are [`Percentiles`] in milliseconds. Byte rates are per bot per second of that
//! bot's connected time. This module computes nothing from the network; `lib.rs` fills it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::stats::{KeyedCounts, Percentiles};
use crate::steady::{ServerMark, Steady};

/// One second of the run.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Serialize)]
pub struct SeriesPoint {
    /// Seconds since the run started.
    pub t_s: f64,
    /// Bots joined at that moment.
    pub connected: u64,
    /// Snapshot frames received per second (all bots).
    pub frames_per_s: f64,
    /// WS payload bytes received per connected bot in that second.
    pub down_bytes_per_bot_per_s: f64,
    /// WS payload bytes sent per connected bot in that second.
    pub up_bytes_per_bot_per_s: f64,
    /// Snapshot interval p99 in that second (ms).
    pub snapshot_interval_p99_ms: Option<f64>,
    /// Move-to-seen p50 in that second (ms).
    pub move_to_seen_p50_ms: Option<f64>,
    /// Move-to-seen p99 in that second (ms).
    pub move_to_seen_p99_ms: Option<f64>,
    /// Ping round trip p99 in that second (ms).
    pub rtt_p99_ms: Option<f64>,
    /// Server room tick p99 in that second (ms), from `plaza_room_tick_duration_seconds`.
    pub server_tick_p99_ms: Option<f64>,
}

/// Everything a run measured.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Serialize)]
pub struct Report {
    /// Gateway URL.
    pub gateway: String,
    /// Scenario name.
    pub scenario: String,
    /// Bot kinds and how many bots of each.
    pub bot_kinds: KeyedCounts,
    /// Rooms the bots were spread over.
    pub rooms: usize,
    /// RNG seed of the run.
    pub seed: u64,
    /// Configured duration (s).
    pub duration_s: f64,
    /// Wall time the run took (s).
    pub elapsed_s: f64,
    /// Bots asked for.
    pub bots_requested: u64,
    /// Bots that joined their room at least once.
    pub bots_connected: u64,
    /// Bots that never joined (of those that were started).
    pub bots_failed: u64,
    /// Bots whose ramp slot had not come when the run was stopped early.
    pub bots_not_started: u64,
    /// Whether the run was stopped before its duration (Ctrl-C).
    pub stopped_early: bool,
    /// Bots that joined but ended the run disconnected against their will.
    pub bots_lost: u64,
    /// Failed connect / handshake attempts (including retries).
    pub connect_failures: u64,
    /// Failed attempts by cause.
    pub connect_errors: KeyedCounts,
    /// Snapshot frames received.
    pub frames_received: u64,
    /// Keyframes received (joins and resyncs).
    pub keyframes_received: u64,
    /// Frames or envelopes that did not decode (not chain breaks or check mismatches).
    pub decode_errors: u64,
    /// Chain breaks plus check mismatches.
    pub check_failures: u64,
    /// Decode errors and check failures by kind (`chain_break`, `check_mismatch`, `truncated`,
    /// `malformed_<what>`, `too_large`, `envelope`, `text_message`).
    pub frame_errors: KeyedCounts,
    /// `Resync` messages sent.
    pub keyframes_requested: u64,
    /// Keyframes the bot did not ask for (besides each join's first frame): the server started
    /// over, e.g. after a slow-consumer overflow or a room move.
    pub keyframes_unrequested: u64,
    /// Deltas that arrived between a `Resync` and its keyframe (not applied, expected).
    pub frames_awaiting_keyframe: u64,
    /// Movement messages sent.
    pub movements_sent: u64,
    /// Pings sent.
    pub pings_sent: u64,
    /// WS payload bytes received, all bots.
    pub down_bytes_total: u64,
    /// WS payload bytes sent, all bots.
    pub up_bytes_total: u64,
    /// Received bytes per bot per second of connected time.
    pub down_bytes_per_bot_per_s: f64,
    /// Sent bytes per bot per second of connected time.
    pub up_bytes_per_bot_per_s: f64,
    /// Time between consecutive snapshot frames of one bot.
    pub snapshot_interval_ms: Percentiles,
    /// Time from a bot's move until another bot in the room decodes it (every observer).
    pub move_to_seen_ms: Percentiles,
    /// Ping → Pong round trip.
    pub rtt_ms: Percentiles,
    /// Connect + negotiate + join of a bot's first session.
    pub connect_ms: Percentiles,
    /// Disconnect (or last frame, in session) → joined again, for resumed sessions.
    pub resume_ms: Percentiles,
    /// Sessions taken back: reconnects with the resume token, plus in-session resumes.
    pub resumes: u64,
    /// Of `resumes`, those where the gateway re-joined the bot to its room without a reconnect
    /// (a new `Joined` mid-session, e.g. after a node loss); `resume_ms` counts these from the
    /// last frame before the gap.
    pub resumes_in_session: u64,
    /// When each resume by reconnect (not in session) went through, Unix ms, sorted: how a
    /// gateway roll's reconnects spread over time.
    #[serde(default)]
    pub reconnect_times_unix_ms: Vec<u64>,
    /// Churner rejoins on the same connection.
    pub rejoins: u64,
    /// Close codes the server closed with ("1006": no close frame).
    pub close_codes: KeyedCounts,
    /// `Error` messages by code.
    pub error_codes: KeyedCounts,
    /// Corrections by reason.
    pub corrections_by_reason: KeyedCounts,
    /// Refused requests (`RequestRejected`) by reason.
    pub rejections_by_reason: KeyedCounts,
    /// Room events by kind.
    pub events_by_kind: KeyedCounts,
    /// Interaction messages sent (pickup / place).
    pub interactions_sent: u64,
    /// Consent messages sent.
    pub consent_sent: u64,
    /// Emote messages sent.
    pub emotes_sent: u64,
    /// Expression messages sent (`--expressions HZ`).
    #[serde(default)]
    pub expressions_sent: u64,
    /// `ExpressionFrame` messages received and decoded.
    #[serde(default)]
    pub expression_frames_received: u64,
    /// Expression states in them (other avatars' expressions decoded).
    #[serde(default)]
    pub expression_states_received: u64,
    /// WS payload bytes of the `ExpressionFrame` messages (also counted in `down_bytes_total`).
    #[serde(default)]
    pub expression_down_bytes_total: u64,
    /// Of the received bytes per bot per second, those of expression messages.
    #[serde(default)]
    pub expression_down_bytes_per_bot_per_s: f64,
    /// Props seen with two holders at one revision.
    pub double_holds: u64,
    /// Props passed straight from one holder to another.
    pub holder_handoffs: u64,
    /// Server room tick p99 over the whole run (ms), if `--metrics-url` was scraped.
    pub server_tick_p99_ms: Option<f64>,
    /// Server room tick p50 over the whole run (ms).
    pub server_tick_p50_ms: Option<f64>,
    /// Room ticks observed in the scrape window.
    pub server_ticks: Option<u64>,
    /// CPU seconds (user + system) the load tool itself used.
    pub load_cpu_seconds: f64,
    /// Peak resident memory of the load tool (MiB).
    pub load_peak_rss_mib: f64,
    /// The bots' walk model (`waypoint`, `jitter`).
    #[serde(default)]
    pub walk: String,
    /// The steady-state window: from every bot joined plus `--warmup` to the end (None: the
    /// run ended before it had two seconds).
    #[serde(default)]
    pub steady: Option<Steady>,
    /// When the run started (the steady window's time base; not in the JSON).
    #[serde(skip)]
    pub started_at: Option<std::time::Instant>,
    /// Per-second series.
    pub series: Vec<SeriesPoint>,
    /// The server process over the run (from its `process_*` metrics), if `--metrics-url` was
    /// scraped.
    #[serde(default)]
    pub server: Option<ServerProcess>,
    /// Each scraped server process (`--server-metrics URL`, one entry per URL); `server` is
    /// their sum.
    #[serde(default)]
    pub servers: Vec<ServerProcess>,
    /// The run broken down by room, in room id order.
    #[serde(default)]
    pub per_room: Vec<RoomReport>,
    /// The verdict against the command line's thresholds (filled in by the CLI).
    #[serde(default)]
    pub verdict: Option<Verdict>,
}

/// One room's share of a run.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Serialize)]
pub struct RoomReport {
    /// The room id.
    pub room: String,
    /// Bots assigned to the room that started.
    pub bots: u64,
    /// Bots that joined at least once.
    pub connected: u64,
    /// Bots that never joined.
    pub failed: u64,
    /// Bots that joined but ended the run disconnected against their will.
    pub lost: u64,
    /// Snapshot frames the room's bots received.
    pub frames: u64,
    /// Received bytes per bot per second of connected time.
    pub down_bytes_per_bot_per_s: f64,
    /// Sent bytes per bot per second of connected time.
    pub up_bytes_per_bot_per_s: f64,
    /// Time between consecutive snapshot frames of one bot of the room.
    pub snapshot_interval_ms: Percentiles,
    /// The server's room tick p99 over the run (ms). Plaza's tick histogram carries no room
    /// label (labels stay bounded), so this is the p99 over every room of the scraped
    /// `--metrics-url` process, the same in every row; a server that labels its tick
    /// histogram with `room` gets its own value per row.
    pub server_tick_p99_ms: Option<f64>,
    /// From the node's admin API (`--admin-url`, `GET /v1/rooms`) at the end of the run: the
    /// node the room was live on.
    #[serde(default)]
    pub node: Option<String>,
    /// From the admin API: the p99 of the room's own last 1,000 ticks (ms).
    #[serde(default)]
    pub room_tick_p99_ms: Option<f64>,
    /// From the admin API: frame bytes the room encoded per member per second (last 10 s).
    #[serde(default)]
    pub room_bytes_per_client_per_s: Option<f64>,
}

impl RoomReport {
    /// The tick p99 to show: the room's own when the admin API gave it, else the server's.
    pub fn tick_p99_ms(&self) -> Option<f64> {
        self.room_tick_p99_ms.or(self.server_tick_p99_ms)
    }
}

/// The server's CPU and memory over a run, from the `process_cpu_seconds_total` and
/// `process_resident_memory_bytes` of its `/metrics`, scraped once per second.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Serialize)]
pub struct ServerProcess {
    /// The scraped `/metrics` URL (`total` for the sum of several).
    #[serde(default)]
    pub url: String,
    /// CPU seconds the server used between the first and the last scrape.
    pub cpu_seconds: f64,
    /// Seconds between the first and the last scrape.
    pub window_s: f64,
    /// `cpu_seconds / window_s`: cores busy on average.
    pub cpu_cores_avg: f64,
    /// Highest one-second CPU rate seen (cores).
    pub cpu_cores_peak: f64,
    /// Resident memory at the first scrape (MiB).
    pub rss_start_mib: f64,
    /// Resident memory at the last scrape (MiB).
    pub rss_end_mib: f64,
    /// Highest resident memory seen (MiB).
    pub rss_peak_mib: f64,
    /// Scrapes that returned both metrics.
    pub samples: u64,
    /// Each scrape: when, CPU seconds, RSS (MiB); for the steady window, not in the JSON.
    #[serde(skip)]
    pub timeline: Vec<(std::time::Instant, f64, f64)>,
}

/// Limits a run is judged against (all optional; the bots rule always applies).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Serialize)]
pub struct Thresholds {
    /// `--strict`: any failed or lost bot, decode error or check failure fails the run;
    /// otherwise only "every bot failed or was lost" does.
    pub strict: bool,
    /// Most bots that may fail or be lost.
    pub max_bots_failed: Option<u64>,
    /// Snapshot interval p99 limit (ms).
    pub max_snapshot_p99_ms: Option<f64>,
    /// Move-to-seen p99 limit (ms).
    pub max_move_to_seen_p99_ms: Option<f64>,
    /// Server room tick p99 limit (ms).
    pub max_tick_p99_ms: Option<f64>,
    /// Server CPU limit (average cores over the run).
    pub max_server_cpu_cores: Option<f64>,
}

/// A run's verdict.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Serialize)]
pub struct Verdict {
    /// No bots rule broken.
    pub bots_ok: bool,
    /// No threshold breached.
    pub thresholds_ok: bool,
    /// Every check, with its outcome, as one line each (`PASS snapshot p99 61 ms <= 100 ms`).
    pub checks: Vec<String>,
}

impl Verdict {
    /// Whether the run passed.
    pub fn pass(&self) -> bool {
        self.bots_ok && self.thresholds_ok
    }

    /// The one-line verdict that opens the Markdown summary.
    pub fn line(&self) -> String {
        let failed: Vec<&str> = self
            .checks
            .iter()
            .filter_map(|c| c.strip_prefix("FAIL "))
            .collect();
        if failed.is_empty() {
            format!("**Verdict: PASS** ({} checks)", self.checks.len())
        } else {
            format!("**Verdict: FAIL**: {}", failed.join("; "))
        }
    }
}

impl Thresholds {
    /// Judges `r`.
    pub fn judge(&self, r: &Report) -> Verdict {
        let mut checks = Vec::new();
        let started = r.bots_requested.saturating_sub(r.bots_not_started);
        let gone = r.bots_failed + r.bots_lost;
        let bots_ok = if self.strict {
            let bad = gone + r.decode_errors + r.check_failures;
            checks.push(format!(
                "{} {gone} bots failed or lost, {} decode errors, {} check failures (strict: 0)",
                if bad == 0 { "PASS" } else { "FAIL" },
                r.decode_errors,
                r.check_failures
            ));
            bad == 0
        } else {
            let all = started > 0 && gone >= started;
            checks.push(format!(
                "{} {gone} of {started} bots failed or lost",
                if all { "FAIL" } else { "PASS" }
            ));
            !all
        };
        let mut thresholds_ok = true;
        let mut limit = |name: &str, value: Option<f64>, max: Option<f64>, unit: &str| {
            let Some(max) = max else { return };
            match value {
                Some(v) if v <= max => {
                    checks.push(format!("PASS {name} {v:.1}{unit} <= {max}{unit}"))
                }
                Some(v) => {
                    thresholds_ok = false;
                    checks.push(format!("FAIL {name} {v:.1}{unit} > {max}{unit}"));
                }
                None => {
                    thresholds_ok = false;
                    checks.push(format!("FAIL {name} not measured (limit {max}{unit})"));
                }
            }
        };
        limit(
            "bots failed or lost",
            Some(gone as f64),
            self.max_bots_failed.map(|m| m as f64),
            "",
        );
        let measured = |p: Percentiles| (p.count > 0).then_some(p.p99);
        limit(
            "snapshot p99",
            measured(r.snapshot_interval_ms),
            self.max_snapshot_p99_ms,
            " ms",
        );
        limit(
            "move-to-seen p99",
            measured(r.move_to_seen_ms),
            self.max_move_to_seen_p99_ms,
            " ms",
        );
        limit(
            "server tick p99",
            r.server_tick_p99_ms,
            self.max_tick_p99_ms,
            " ms",
        );
        limit(
            "server CPU",
            r.server.as_ref().map(|s| s.cpu_cores_avg),
            self.max_server_cpu_cores,
            " cores",
        );
        Verdict {
            bots_ok,
            thresholds_ok,
            checks,
        }
    }
}

/// Paths of the files [`Report::write_files`] wrote.
#[derive(Clone, Debug, Default)]
pub struct WrittenFiles {
    /// The JSON report.
    pub json: PathBuf,
    /// The Markdown summary.
    pub markdown: PathBuf,
    /// The PNG plots.
    pub plots: Vec<PathBuf>,
}

impl Report {
    /// Adds the servers' side of the steady window from `servers`' scrape timelines.
    pub fn apply_server_steady(&mut self) {
        let (Some(start), Some(steady)) = (self.started_at, self.steady.as_mut()) else {
            return;
        };
        let marks: Vec<Vec<ServerMark>> = self
            .servers
            .iter()
            .map(|p| {
                p.timeline
                    .iter()
                    .map(|&(at, cpu_s, rss_mib)| ServerMark {
                        t_s: if at >= start {
                            at.duration_since(start).as_secs_f64()
                        } else {
                            -start.duration_since(at).as_secs_f64()
                        },
                        cpu_s,
                        rss_mib,
                    })
                    .collect()
            })
            .collect();
        steady.add_servers(marks.iter().map(Vec::as_slice));
    }

    /// Fills each room's `node`, `room_tick_p99_ms` and `room_bytes_per_client_per_s` from
    /// the nodes' admin views (`crate::server::room_views`, merged over the nodes).
    pub fn apply_room_views(
        &mut self,
        views: &std::collections::BTreeMap<String, crate::server::RoomView>,
    ) {
        for r in &mut self.per_room {
            if let Some(v) = views.get(&r.room) {
                r.node = Some(v.node.clone()).filter(|n| !n.is_empty());
                r.room_tick_p99_ms = v.tick_p99_ms;
                r.room_bytes_per_client_per_s = v.bytes_per_client_per_s;
            }
        }
    }

    /// Writes the JSON to `json_path`, the Markdown summary beside it (`<stem>.md`), and the PNG
    /// plots (`<stem>-<name>.png`). A failed plot is reported as an error after the JSON and the
    /// Markdown are written.
    pub fn write_files(&self, json_path: &Path) -> anyhow::Result<WrittenFiles> {
        if let Some(dir) = json_path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(json_path, serde_json::to_vec_pretty(self)?)?;
        let stem = json_path
            .file_stem()
            .map_or_else(|| "report".into(), |s| s.to_string_lossy().into_owned());
        let sibling = |suffix: &str| json_path.with_file_name(format!("{stem}{suffix}"));
        // The Markdown summary is written even when plotting fails; the plot error comes last.
        let plotted = crate::plot::write_plots(self, &sibling);
        let plots = plotted.as_ref().map_or_else(|_| Vec::new(), Clone::clone);
        let markdown = sibling(".md");
        let names: Vec<String> = plots
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        std::fs::write(&markdown, self.to_markdown(&names))?;
        plotted?;
        Ok(WrittenFiles {
            json: json_path.to_owned(),
            markdown,
            plots,
        })
    }

    /// The Markdown summary; `plots` are file names of PNGs beside it to embed.
    pub fn to_markdown(&self, plots: &[String]) -> String {
        let mut s = String::new();
        if let Some(v) = &self.verdict {
            let _ = writeln!(s, "{}\n", v.line());
        }
        let _ = writeln!(s, "# plaza-load report: {}\n", self.scenario);
        let _ = writeln!(
            s,
            "{} bots requested over {} rooms against `{}` for {:.0} s (seed {}, walk {}).\n",
            self.bots_requested,
            self.rooms,
            self.gateway,
            self.duration_s,
            self.seed,
            if self.walk.is_empty() {
                "waypoint"
            } else {
                &self.walk
            }
        );
        let _ = writeln!(s, "| | |\n|---|---|");
        let rows: Vec<(&str, String)> = vec![
            (
                "bots connected / failed / lost",
                format!(
                    "{} / {} / {}",
                    self.bots_connected, self.bots_failed, self.bots_lost
                ),
            ),
            ("bot kinds", kv(&self.bot_kinds)),
            ("frames received", self.frames_received.to_string()),
            ("decode errors", self.decode_errors.to_string()),
            ("check failures", self.check_failures.to_string()),
            ("keyframes requested", self.keyframes_requested.to_string()),
            ("frame errors by kind", kv(&self.frame_errors)),
            (
                "down bytes / bot / s",
                format!("{:.0}", self.down_bytes_per_bot_per_s),
            ),
            (
                "up bytes / bot / s",
                format!("{:.0}", self.up_bytes_per_bot_per_s),
            ),
            (
                "expression bytes / bot / s (of down)",
                format!("{:.0}", self.expression_down_bytes_per_bot_per_s),
            ),
            (
                "expressions sent / frames / states received",
                format!(
                    "{} / {} / {}",
                    self.expressions_sent,
                    self.expression_frames_received,
                    self.expression_states_received
                ),
            ),
            (
                "resumes (in session)",
                format!("{} ({})", self.resumes, self.resumes_in_session),
            ),
            (
                "keyframes unrequested",
                self.keyframes_unrequested.to_string(),
            ),
            ("rejoins (churn)", self.rejoins.to_string()),
            (
                "connect failures",
                format!("{} {}", self.connect_failures, kv(&self.connect_errors)),
            ),
            ("close codes", kv(&self.close_codes)),
            ("error codes", kv(&self.error_codes)),
            ("corrections by reason", kv(&self.corrections_by_reason)),
            ("rejections by reason", kv(&self.rejections_by_reason)),
            ("events by kind", kv(&self.events_by_kind)),
            ("double holds", self.double_holds.to_string()),
            (
                "server tick p50 / p99",
                match (self.server_tick_p50_ms, self.server_tick_p99_ms) {
                    (Some(a), Some(b)) => format!("{a:.3} ms / {b:.3} ms"),
                    _ => "not scraped".into(),
                },
            ),
            (
                "server CPU (avg / peak cores, CPU s)",
                self.server.as_ref().map_or("not scraped".into(), |p| {
                    format!(
                        "{:.2} / {:.2} ({:.1} s over {:.1} s)",
                        p.cpu_cores_avg, p.cpu_cores_peak, p.cpu_seconds, p.window_s
                    )
                }),
            ),
            (
                "server RSS (start / end / peak)",
                self.server.as_ref().map_or("not scraped".into(), |p| {
                    format!(
                        "{:.0} / {:.0} / {:.0} MiB",
                        p.rss_start_mib, p.rss_end_mib, p.rss_peak_mib
                    )
                }),
            ),
            (
                "load tool CPU",
                format!(
                    "{:.1} s over {:.1} s wall",
                    self.load_cpu_seconds, self.elapsed_s
                ),
            ),
            (
                "load tool peak RSS",
                format!("{:.0} MiB", self.load_peak_rss_mib),
            ),
        ];
        for (k, v) in rows {
            let _ = writeln!(s, "| {k} | {v} |");
        }
        if !self.per_room.is_empty() {
            let _ = writeln!(
                s,
                "\n## Rooms\n\n| room | bots | connected / failed / lost | down bytes / bot / s | \
                 up bytes / bot / s | snapshot interval p99 (ms) | tick p99 (ms) |\n\
                 |---|---|---|---|---|---|---|"
            );
            for r in &self.per_room {
                let snap = if r.snapshot_interval_ms.count > 0 {
                    format!("{:.1}", r.snapshot_interval_ms.p99)
                } else {
                    "-".into()
                };
                let tick = match (r.room_tick_p99_ms, r.server_tick_p99_ms) {
                    (Some(t), _) => format!("{t:.3}"),
                    (None, Some(t)) => format!("{t:.3} (server)"),
                    (None, None) => "not scraped".into(),
                };
                let _ = writeln!(
                    s,
                    "| {} | {} | {} / {} / {} | {:.0} | {:.0} | {snap} | {tick} |",
                    r.room,
                    r.bots,
                    r.connected,
                    r.failed,
                    r.lost,
                    r.down_bytes_per_bot_per_s,
                    r.up_bytes_per_bot_per_s
                );
            }
            if self
                .per_room
                .iter()
                .any(|r| r.room_tick_p99_ms.is_none() && r.server_tick_p99_ms.is_some())
            {
                let _ = writeln!(
                    s,
                    "\nTick p99 marked (server): the tick histogram of the `--metrics-url` process \
                     over all its rooms (it has no room label); `--admin-url` gives each room's own."
                );
            }
        }
        if !self.servers.is_empty() {
            let _ = writeln!(
                s,
                "\n## Server processes\n\n| /metrics | CPU avg / peak (cores) | CPU s / window s | \
                 RSS start / end / peak (MiB) | samples |\n|---|---|---|---|---|"
            );
            for p in &self.servers {
                let _ = writeln!(
                    s,
                    "| {} | {:.2} / {:.2} | {:.1} / {:.1} | {:.0} / {:.0} / {:.0} | {} |",
                    p.url,
                    p.cpu_cores_avg,
                    p.cpu_cores_peak,
                    p.cpu_seconds,
                    p.window_s,
                    p.rss_start_mib,
                    p.rss_end_mib,
                    p.rss_peak_mib,
                    p.samples
                );
            }
        }
        let _ = writeln!(s, "\n## Steady state\n");
        match &self.steady {
            Some(st) => {
                let _ = writeln!(
                    s,
                    "From {:.1} s to {:.1} s ({:.1} s; every bot joined at {:.1} s, {} bots, \
                     plus {:.0} s warm-up), {:.1} bots connected on average.\n",
                    st.from_s,
                    st.to_s,
                    st.window_s,
                    st.all_joined_s,
                    st.bots_joined,
                    st.warmup_s,
                    st.bots_avg
                );
                let _ = writeln!(s, "| steady | |\n|---|---|");
                let opt = |v: Option<f64>, digits: usize| {
                    v.map_or_else(|| "not scraped".into(), |v| format!("{v:.digits$}"))
                };
                let rows = [
                    (
                        "server CPU, ms per bot per s (cores)",
                        format!(
                            "{} ({})",
                            opt(st.server_cpu_ms_per_bot_s, 3),
                            opt(st.server_cpu_cores, 2)
                        ),
                    ),
                    (
                        "load tool CPU, ms per bot per s (cores)",
                        format!("{:.3} ({:.2})", st.load_cpu_ms_per_bot_s, st.load_cpu_cores),
                    ),
                    (
                        "down / up bytes per client per s",
                        format!(
                            "{:.0} / {:.0}",
                            st.down_bytes_per_client_s, st.up_bytes_per_client_s
                        ),
                    ),
                    (
                        "server RSS start / end of window (MiB)",
                        format!(
                            "{} / {}",
                            opt(st.server_rss_start_mib, 1),
                            opt(st.server_rss_end_mib, 1)
                        ),
                    ),
                    (
                        "load tool RSS start / end of window (MiB)",
                        format!("{:.1} / {:.1}", st.load_rss_start_mib, st.load_rss_end_mib),
                    ),
                ];
                for (k, v) in rows {
                    let _ = writeln!(s, "| {k} | {v} |");
                }
            }
            None => {
                let _ = writeln!(
                    s,
                    "None: the run ended before two seconds of the window (every bot joined, \
                     plus the warm-up)."
                );
            }
        }
        let _ = writeln!(
            s,
            "\n| latency (ms) | p50 | p99 | max | samples |\n|---|---|---|---|---|"
        );
        for (name, p) in self.latencies() {
            let _ = writeln!(
                s,
                "| {name} | {:.1} | {:.1} | {:.1} | {} |",
                p.p50, p.p99, p.max, p.count
            );
        }
        if !plots.is_empty() {
            let _ = writeln!(s);
            for p in plots {
                let _ = writeln!(s, "![{p}]({p})");
            }
        }
        s
    }

    /// The latency distributions with their names.
    pub fn latencies(&self) -> [(&'static str, Percentiles); 5] {
        [
            ("snapshot interval", self.snapshot_interval_ms),
            ("move to seen", self.move_to_seen_ms),
            ("ping rtt", self.rtt_ms),
            ("connect", self.connect_ms),
            ("resume", self.resume_ms),
        ]
    }

    /// A short human summary for the terminal.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "bots {}/{} connected ({} failed, {} lost), {} frames, {} decode errors, {} check failures, {} keyframes requested",
            self.bots_connected,
            self.bots_requested,
            self.bots_failed,
            self.bots_lost,
            self.frames_received,
            self.decode_errors,
            self.check_failures,
            self.keyframes_requested
        );
        let _ = writeln!(
            s,
            "bytes/bot/s down {:.0} (expressions {:.0}) up {:.0}; resumes {}; close codes {}; corrections {}",
            self.down_bytes_per_bot_per_s,
            self.expression_down_bytes_per_bot_per_s,
            self.up_bytes_per_bot_per_s,
            self.resumes,
            kv(&self.close_codes),
            kv(&self.corrections_by_reason)
        );
        if !self.frame_errors.0.is_empty() {
            let _ = writeln!(s, "frame errors: {}", kv(&self.frame_errors));
        }
        for (name, p) in self.latencies() {
            if p.count > 0 {
                let _ = writeln!(
                    s,
                    "{name:>18}: p50 {:7.1} ms  p99 {:7.1} ms  max {:7.1} ms  ({} samples)",
                    p.p50, p.p99, p.max, p.count
                );
            }
        }
        let tick = self.server_tick_p99_ms.map_or_else(
            || "server tick not scraped".into(),
            |t| format!("server tick p99 {t:.3} ms"),
        );
        let _ = writeln!(
            s,
            "{tick}; load tool CPU {:.1} s, peak RSS {:.0} MiB",
            self.load_cpu_seconds, self.load_peak_rss_mib
        );
        if let Some(st) = &self.steady {
            let _ = writeln!(
                s,
                "steady {:.0}-{:.0} s ({:.1} bots): server {} ms/bot/s, load tool {:.3} ms/bot/s, \
                 down {:.0} up {:.0} B/client/s",
                st.from_s,
                st.to_s,
                st.bots_avg,
                st.server_cpu_ms_per_bot_s
                    .map_or_else(|| "-".into(), |v| format!("{v:.3}")),
                st.load_cpu_ms_per_bot_s,
                st.down_bytes_per_client_s,
                st.up_bytes_per_client_s
            );
        }
        for p in &self.servers {
            let _ = writeln!(
                s,
                "server {}: CPU {:.2} cores avg ({:.2} peak), RSS {:.0} MiB peak",
                p.url, p.cpu_cores_avg, p.cpu_cores_peak, p.rss_peak_mib
            );
        }
        for r in &self.per_room {
            let _ = writeln!(
                s,
                "room {}: {} bots ({} connected, {} failed, {} lost), down {:.0} B/bot/s, snapshot p99 {:.1} ms",
                r.room,
                r.bots,
                r.connected,
                r.failed,
                r.lost,
                r.down_bytes_per_bot_per_s,
                r.snapshot_interval_ms.p99
            );
        }
        s
    }
}

impl ServerProcess {
    /// The sum of several processes (CPU and memory add up; the window is the longest).
    pub fn total(parts: &[Self]) -> Option<Self> {
        match parts {
            [] => None,
            [one] => Some(one.clone()),
            _ => Some(Self {
                url: "total".into(),
                cpu_seconds: parts.iter().map(|p| p.cpu_seconds).sum(),
                window_s: parts.iter().map(|p| p.window_s).fold(0.0, f64::max),
                cpu_cores_avg: parts.iter().map(|p| p.cpu_cores_avg).sum(),
                cpu_cores_peak: parts.iter().map(|p| p.cpu_cores_peak).sum(),
                rss_start_mib: parts.iter().map(|p| p.rss_start_mib).sum(),
                rss_end_mib: parts.iter().map(|p| p.rss_end_mib).sum(),
                rss_peak_mib: parts.iter().map(|p| p.rss_peak_mib).sum(),
                samples: parts.iter().map(|p| p.samples).min().unwrap_or(0),
                timeline: Vec::new(),
            }),
        }
    }
}

fn kv(k: &KeyedCounts) -> String {
    if k.0.is_empty() {
        return "-".into();
    }
    k.0.iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_opens_the_summary_and_judges_thresholds() {
        let mut r = sample_report();
        let t = Thresholds {
            max_snapshot_p99_ms: Some(100.0),
            max_tick_p99_ms: Some(1.0),
            ..Thresholds::default()
        };
        let v = t.judge(&r);
        assert!(v.bots_ok && !v.thresholds_ok, "{v:?}");
        r.verdict = Some(v);
        let md = r.to_markdown(&[]);
        assert!(
            md.starts_with("**Verdict: FAIL**: server tick p99 1.5 ms > 1 ms\n"),
            "{md}"
        );
        // Without --strict only "every bot failed or was lost" fails the bots rule.
        r.bots_connected = 0;
        r.bots_failed = 10;
        assert!(!Thresholds::default().judge(&r).bots_ok);
        r.bots_connected = 9;
        r.bots_failed = 1;
        assert!(Thresholds::default().judge(&r).pass());
        let strict = Thresholds {
            strict: true,
            ..Thresholds::default()
        };
        assert!(!strict.judge(&r).bots_ok);
        r.server = Some(ServerProcess {
            cpu_cores_avg: 0.5,
            ..ServerProcess::default()
        });
        assert!(
            r.to_markdown(&[])
                .contains("| server CPU (avg / peak cores, CPU s) | 0.50 /")
        );
    }

    pub(crate) fn sample_report() -> Report {
        let mut r = Report {
            gateway: "ws://127.0.0.1:7777/v1/ws".into(),
            scenario: "walkers".into(),
            rooms: 2,
            bots_requested: 10,
            bots_connected: 9,
            bots_failed: 1,
            duration_s: 3.0,
            snapshot_interval_ms: Percentiles {
                p50: 50.0,
                p99: 60.0,
                max: 80.0,
                mean: 50.0,
                count: 100,
            },
            server_tick_p99_ms: Some(1.5),
            server_tick_p50_ms: Some(0.5),
            ..Report::default()
        };
        r.close_codes.bump("4004");
        for t in 0..3 {
            r.series.push(SeriesPoint {
                t_s: f64::from(t),
                connected: 9,
                frames_per_s: 180.0,
                down_bytes_per_bot_per_s: 1000.0 + f64::from(t),
                up_bytes_per_bot_per_s: 300.0,
                snapshot_interval_p99_ms: Some(55.0),
                move_to_seen_p50_ms: Some(40.0),
                move_to_seen_p99_ms: Some(90.0),
                rtt_p99_ms: None,
                server_tick_p99_ms: Some(1.0),
            });
        }
        r
    }

    #[test]
    fn json_round_trips_with_the_required_fields() {
        let r = sample_report();
        let text = serde_json::to_string(&r).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        for key in [
            "bots_requested",
            "bots_connected",
            "bots_failed",
            "decode_errors",
            "check_failures",
            "keyframes_requested",
            "frames_received",
            "down_bytes_per_bot_per_s",
            "up_bytes_per_bot_per_s",
            "close_codes",
            "corrections_by_reason",
            "resumes",
            "bots_lost",
            "load_cpu_seconds",
            "series",
        ] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        for key in [
            "snapshot_interval_ms",
            "move_to_seen_ms",
            "rtt_ms",
            "resume_ms",
        ] {
            for p in ["p50", "p99", "max"] {
                assert!(v[key].get(p).is_some(), "missing {key}.{p}");
            }
        }
        assert_eq!(v["snapshot_interval_ms"]["p99"], 60.0);
        assert_eq!(v["close_codes"]["4004"], 1);
        let back: Report = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn markdown_and_summary_carry_the_numbers() {
        let r = sample_report();
        let md = r.to_markdown(&["r-latency.png".into()]);
        assert!(
            md.contains("| bots connected / failed / lost | 9 / 1 / 0 |"),
            "{md}"
        );
        assert!(
            md.contains("| snapshot interval | 50.0 | 60.0 | 80.0 | 100 |"),
            "{md}"
        );
        assert!(md.contains("![r-latency.png](r-latency.png)"));
        assert!(md.contains("4004: 1"));
        let s = r.summary();
        assert!(s.contains("bots 9/10 connected"), "{s}");
        assert!(s.contains("server tick p99 1.500 ms"), "{s}");
    }

    #[test]
    fn steady_window_reaches_json_markdown_and_summary() {
        let mut r = sample_report();
        assert!(r.to_markdown(&[]).contains("## Steady state\n\nNone:"));
        let marks: Vec<crate::steady::Mark> = (1..=30u64)
            .map(|t| crate::steady::Mark {
                t_s: t as f64,
                connected: 10,
                ever_joined: 10,
                cpu_s: 0.002 * t as f64,
                down_bytes: 12_000 * t,
                up_bytes: 3_000 * t,
                rss_mib: 20.0,
            })
            .collect();
        r.steady = crate::steady::load_window(&marks, 10.0);
        let start = std::time::Instant::now();
        r.started_at = Some(start);
        let at = |s: f64| start + std::time::Duration::from_secs_f64(s);
        r.servers.push(ServerProcess {
            url: "http://x/metrics".into(),
            // 0.0011 cores from 11 s on: 0.11 ms per bot per s over 10 bots.
            timeline: (0..35)
                .map(|i| {
                    (
                        at(f64::from(i) + 0.5),
                        0.0011 * f64::from(i),
                        50.0 + f64::from(i),
                    )
                })
                .collect(),
            ..ServerProcess::default()
        });
        r.apply_server_steady();
        let st = r.steady.clone().unwrap();
        assert_eq!((st.from_s, st.to_s), (11.0, 30.0));
        assert!(
            (st.server_cpu_ms_per_bot_s.unwrap() - 0.11).abs() < 1e-9,
            "{st:?}"
        );
        assert!((st.load_cpu_ms_per_bot_s - 0.2).abs() < 1e-9);
        assert!((st.down_bytes_per_client_s - 1_200.0).abs() < 1e-9);
        assert_eq!(st.server_rss_start_mib, Some(61.0));
        let v: serde_json::Value = serde_json::to_value(&r).unwrap();
        for key in [
            "server_cpu_ms_per_bot_s",
            "load_cpu_ms_per_bot_s",
            "down_bytes_per_client_s",
            "up_bytes_per_client_s",
            "window_s",
            "server_rss_start_mib",
            "server_rss_end_mib",
        ] {
            assert!(v["steady"].get(key).is_some(), "missing steady.{key}");
        }
        assert!(v["servers"][0].get("timeline").is_none());
        let md = r.to_markdown(&[]);
        assert!(
            md.contains("| server CPU, ms per bot per s (cores) | 0.110 (0.00) |"),
            "{md}"
        );
        assert!(
            md.contains("| down / up bytes per client per s | 1200 / 300 |"),
            "{md}"
        );
        let s = r.summary();
        assert!(
            s.contains("server 0.110 ms/bot/s, load tool 0.200 ms/bot/s"),
            "{s}"
        );
    }

    #[test]
    fn writes_json_markdown_and_plots() {
        let dir = std::env::temp_dir().join(format!("plaza-load-report-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let files = sample_report().write_files(&dir.join("run.json")).unwrap();
        let json: Report = serde_json::from_slice(&std::fs::read(&files.json).unwrap()).unwrap();
        assert_eq!(json.bots_connected, 9);
        assert!(files.markdown.ends_with("run.md"));
        assert!(
            std::fs::read_to_string(&files.markdown)
                .unwrap()
                .contains("run-latency.png")
        );
        assert_eq!(files.plots.len(), 4);
        for p in &files.plots {
            let bytes = std::fs::read(p).unwrap();
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", p.display());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
