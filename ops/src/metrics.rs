//! Process-wide metrics and their exposition: `/metrics` content negotiation (classic Prometheus
//! text 0.0.4 by default, OpenMetrics 1.0.0 when the `Accept` header names it), the standard
//! `process_*` metrics read from `/proc` at scrape time, and `plaza_build_info`.
//!
//! `prometheus-client` encodes OpenMetrics only; [`to_classic`] rewrites its output into the
//! classic text format (counter families named with their `_total` sample name, `info` as a
//! gauge, no `# UNIT`, no exemplars, no `# EOF`), which is what `promtool check metrics`, `curl`
//! and most non-Prometheus scrapers read.
//!
//! It does not define the role metrics: those live with their role (`GatewayMetrics`,
//! `NodeMetrics`) and the directory's in [`crate::directory_metrics`].

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric as _};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

/// The `Content-Type` of classic Prometheus text.
pub const CLASSIC_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// The `Content-Type` of OpenMetrics text.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// An exposition format of `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text 0.0.4.
    Classic,
    /// OpenMetrics 1.0.0.
    OpenMetrics,
}

impl Format {
    /// The format an `Accept` header asks for: OpenMetrics when it names
    /// `application/openmetrics-text` with a quality at least that of `text/plain` (or of a
    /// wildcard); classic text otherwise, including when there is no header.
    ///
    /// Prometheus's default scrape header
    /// (`application/openmetrics-text;version=1.0.0,…,text/plain;version=0.0.4;q=0.5,*/*;q=0.1`)
    /// prefers OpenMetrics and gets it; `curl` (`*/*`) and `promtool`-style pipes get classic.
    pub fn negotiate(accept: Option<&str>) -> Self {
        let Some(accept) = accept else {
            return Self::Classic;
        };
        let (mut om, mut text) = (0.0f32, 0.0f32);
        for part in accept.split(',') {
            let mut params = part.split(';');
            let media = params.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = params
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|v| v.trim().parse::<f32>().ok())
                .unwrap_or(1.0)
                .clamp(0.0, 1.0);
            match media.as_str() {
                "application/openmetrics-text" => om = om.max(q),
                "text/plain" | "text/*" | "*/*" => text = text.max(q),
                _ => {}
            }
        }
        if om > 0.0 && om >= text {
            Self::OpenMetrics
        } else {
            Self::Classic
        }
    }

    /// Its `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Classic => CLASSIC_CONTENT_TYPE,
            Self::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
        }
    }
}

/// Encodes `registry` in `format`.
pub fn encode(registry: &Registry, format: Format) -> Result<String, std::fmt::Error> {
    let mut body = String::new();
    prometheus_client::encoding::text::encode(&mut body, registry)?;
    Ok(match format {
        Format::OpenMetrics => body,
        Format::Classic => to_classic(&body),
    })
}

/// Rewrites OpenMetrics text (as `prometheus-client` writes it) into classic Prometheus text.
pub fn to_classic(openmetrics: &str) -> String {
    // Metadata names of counter / info families, renamed to their sample names.
    let mut out = String::with_capacity(openmetrics.len());
    let mut pending_help: Option<(String, String)> = None;
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            // Held until the TYPE line says whether the name changes.
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            if let Some((n, h)) = pending_help.take() {
                out.push_str(&format!("# HELP {n} {h}\n"));
            }
            pending_help = Some((name.to_owned(), help.to_owned()));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (name, kind) = match kind {
                "counter" if !name.ends_with("_total") => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "unknown" => (name.to_owned(), "untyped"),
                "gaugehistogram" => (name.to_owned(), "histogram"),
                "stateset" => (name.to_owned(), "gauge"),
                k => (name.to_owned(), k),
            };
            if let Some((n, h)) = pending_help.take() {
                let n = if name.starts_with(&n) {
                    name.as_str()
                } else {
                    &n
                };
                out.push_str(&format!("# HELP {n} {h}\n"));
            }
            out.push_str(&format!("# TYPE {name} {kind}\n"));
            continue;
        }
        if let Some((n, h)) = pending_help.take() {
            out.push_str(&format!("# HELP {n} {h}\n"));
        }
        if line.starts_with('#') {
            continue;
        }
        // Exemplars (` # {…} v`) and `_created` samples are OpenMetrics-only.
        let sample = match line.find(" # {") {
            Some(i) => &line[..i],
            None => line,
        };
        let name_end = sample.find(['{', ' ']).unwrap_or(sample.len());
        if sample[..name_end].ends_with("_created") {
            continue;
        }
        out.push_str(sample);
        out.push('\n');
    }
    if let Some((n, h)) = pending_help.take() {
        out.push_str(&format!("# HELP {n} {h}\n"));
    }
    out
}

// === process metrics ===

/// The standard `process_*` metrics, read from `/proc/self` at every scrape (Linux; on other
/// systems it encodes nothing).
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// One reading of `/proc/self`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcessSample {
    /// User + system CPU time, seconds.
    pub cpu_seconds: f64,
    /// Resident set size, bytes.
    pub resident_bytes: u64,
    /// Virtual memory size, bytes.
    pub virtual_bytes: u64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The soft limit on open file descriptors (0 = unlimited or unknown).
    pub max_fds: u64,
    /// OS threads.
    pub threads: u64,
    /// Start time, seconds since the Unix epoch.
    pub start_time_seconds: f64,
}

/// Clock ticks per second of `/proc/*/stat` times (`USER_HZ`, 100 on every Linux ABI).
const USER_HZ: f64 = 100.0;

impl ProcessSample {
    /// Reads `/proc/self`; `None` where there is no procfs.
    pub fn read() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // Fields after the command name, which is in parentheses and may contain anything.
        let after = &stat[stat.rfind(')')? + 1..];
        let f: Vec<&str> = after.split_whitespace().collect();
        // `after` starts at field 3 (state): field N is f[N - 3].
        let field = |n: usize| f.get(n - 3).and_then(|v| v.parse::<u64>().ok());
        let cpu_ticks = field(14)? + field(15)?;
        let threads = field(20)?;
        let start_ticks = field(22)?;
        let virtual_bytes = field(23)?;
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let resident_kb = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0);
        let open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
        let max_fds = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|l| {
                l.lines()
                    .find(|l| l.starts_with("Max open files"))
                    .and_then(|l| l.split_whitespace().nth(3)?.parse::<u64>().ok())
            })
            .unwrap_or(0);
        let boot = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("btime "))
                    .and_then(|v| v.trim().parse::<u64>().ok())
            })
            .unwrap_or(0);
        Some(Self {
            cpu_seconds: cpu_ticks as f64 / USER_HZ,
            resident_bytes: resident_kb * 1024,
            virtual_bytes,
            open_fds,
            max_fds,
            threads,
            start_time_seconds: boot as f64 + start_ticks as f64 / USER_HZ,
        })
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let Some(s) = ProcessSample::read() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(s.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            None,
            cpu.metric_type(),
        )?)?;
        let gauges: [(&str, &str, f64); 6] = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                s.resident_bytes as f64,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                s.virtual_bytes as f64,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                s.open_fds as f64,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                s.max_fds as f64,
            ),
            ("process_threads", "Number of OS threads.", s.threads as f64),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                s.start_time_seconds,
            ),
        ];
        for (name, help, v) in gauges {
            let g = ConstGauge::new(v);
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
        }
        Ok(())
    }
}

/// `plaza_build_info`'s labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
    revision: String,
}

/// Registers the process collector and `plaza_build_info` (constant 1, labelled with the
/// version and the git revision the build was given in `PLAZA_GIT_REVISION`).
pub fn register_process(registry: &mut Registry) {
    registry.register_collector(Box::new(ProcessCollector));
    let info: Family<BuildLabels, Gauge> = Family::default();
    info.get_or_create(&BuildLabels {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        revision: option_env!("PLAZA_GIT_REVISION")
            .unwrap_or("unknown")
            .to_owned(),
    })
    .set(1);
    registry.register(
        "plaza_build_info",
        "A constant 1 labelled with the build's version and revision",
        info,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_gets_openmetrics_and_curl_gets_classic() {
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                    version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prom)), Format::OpenMetrics);
        assert_eq!(Format::negotiate(None), Format::Classic);
        assert_eq!(Format::negotiate(Some("*/*")), Format::Classic);
        assert_eq!(
            Format::negotiate(Some("text/plain;version=0.0.4")),
            Format::Classic
        );
        assert_eq!(
            Format::negotiate(Some("text/plain;q=1,application/openmetrics-text;q=0.5")),
            Format::Classic
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;q=0")),
            Format::Classic
        );
    }

    #[test]
    fn classic_text_renames_counters_and_info_and_drops_openmetrics_only_lines() {
        let om = "# HELP plaza_x Things.\n# TYPE plaza_x counter\nplaza_x_total 3\n\
                  plaza_x_created 1.5\n# HELP plaza_v Version.\n# TYPE plaza_v info\n\
                  plaza_v_info{version=\"1\"} 1\n# HELP plaza_d_seconds D.\n\
                  # TYPE plaza_d_seconds histogram\n# UNIT plaza_d_seconds seconds\n\
                  plaza_d_seconds_bucket{le=\"1.0\"} 1 # {trace=\"a\"} 0.5\n\
                  plaza_d_seconds_sum 0.5\nplaza_d_seconds_count 1\n# EOF\n";
        let classic = to_classic(om);
        assert_eq!(
            classic,
            "# HELP plaza_x_total Things.\n# TYPE plaza_x_total counter\nplaza_x_total 3\n\
             # HELP plaza_v_info Version.\n# TYPE plaza_v_info gauge\n\
             plaza_v_info{version=\"1\"} 1\n# HELP plaza_d_seconds D.\n\
             # TYPE plaza_d_seconds histogram\nplaza_d_seconds_bucket{le=\"1.0\"} 1\n\
             plaza_d_seconds_sum 0.5\nplaza_d_seconds_count 1\n"
        );
    }

    #[test]
    fn process_metrics_are_read_from_proc() {
        let s = ProcessSample::read().expect("Linux has /proc");
        assert!(s.resident_bytes > 0 && s.virtual_bytes >= s.resident_bytes);
        assert!(s.threads >= 1 && s.open_fds >= 3);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(s.start_time_seconds > now - 3600.0 && s.start_time_seconds <= now + 1.0);
        let mut r = Registry::default();
        register_process(&mut r);
        let text = encode(&r, Format::Classic).unwrap();
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
            "process_threads",
            "plaza_build_info{",
        ] {
            assert!(text.contains(name), "{name} in\n{text}");
        }
    }
}
