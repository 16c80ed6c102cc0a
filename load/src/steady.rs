//! The steady-state window of a run (issue 16's measurement): from the moment every bot that
//! joined had joined, plus `--warmup`, to the end of the run. Sans I/O: the arithmetic over the
//! run's once-per-second marks (the load tool's own CPU, bytes and connected bots) and the
//! server's `/metrics` samples.
//!
//! Per bot per second means per bot-second the bots were connected in the window (the
//! connected count integrated over the marks, trapezoids), so a bot lost mid-window does not
//! inflate the figure.

use serde::{Deserialize, Serialize};

/// The load tool's counters at one instant of the run (one per second).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Mark {
    /// Seconds since the run started.
    pub t_s: f64,
    /// Bots connected at that instant.
    pub connected: u64,
    /// Bots that had joined at least once by then.
    pub ever_joined: u64,
    /// The load tool's CPU seconds so far (user + system).
    pub cpu_s: f64,
    /// WS payload bytes received so far, all bots.
    pub down_bytes: u64,
    /// WS payload bytes sent so far, all bots.
    pub up_bytes: u64,
    /// The load tool's resident memory (MiB).
    pub rss_mib: f64,
}

/// One server `/metrics` sample.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServerMark {
    /// Seconds since the run started.
    pub t_s: f64,
    /// `process_cpu_seconds_total`.
    pub cpu_s: f64,
    /// `process_resident_memory_bytes`, MiB.
    pub rss_mib: f64,
}

/// The steady-state figures (JSON `steady`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Serialize)]
pub struct Steady {
    /// When every bot that joined in the run had joined (s since the start).
    pub all_joined_s: f64,
    /// Bots joined by then.
    pub bots_joined: u64,
    /// The warm-up after that (s).
    pub warmup_s: f64,
    /// Window start and end (s since the start; the marks nearest inside).
    pub from_s: f64,
    /// Window end.
    pub to_s: f64,
    /// `to_s - from_s`.
    pub window_s: f64,
    /// Bots connected on average over the window.
    pub bots_avg: f64,
    /// The load tool's CPU, ms per connected bot per second.
    pub load_cpu_ms_per_bot_s: f64,
    /// The load tool's CPU, cores.
    pub load_cpu_cores: f64,
    /// WS payload bytes received per client per second.
    pub down_bytes_per_client_s: f64,
    /// WS payload bytes sent per client per second.
    pub up_bytes_per_client_s: f64,
    /// The load tool's resident memory at the window's start and end (MiB).
    pub load_rss_start_mib: f64,
    /// At the end.
    pub load_rss_end_mib: f64,
    /// The server's CPU (summed over the scraped processes), ms per connected bot per second.
    #[serde(default)]
    pub server_cpu_ms_per_bot_s: Option<f64>,
    /// The server's CPU, cores.
    #[serde(default)]
    pub server_cpu_cores: Option<f64>,
    /// The server's window between its first and last scrape inside the window (s; the
    /// longest over the processes).
    #[serde(default)]
    pub server_window_s: Option<f64>,
    /// The server's resident memory at its first scrape in the window (MiB, summed).
    #[serde(default)]
    pub server_rss_start_mib: Option<f64>,
    /// At its last scrape in the window.
    #[serde(default)]
    pub server_rss_end_mib: Option<f64>,
}

/// The load side of the window over `marks` (in time order): None if the run ended before
/// the window had two marks.
pub fn load_window(marks: &[Mark], warmup_s: f64) -> Option<Steady> {
    let joined = marks.iter().map(|m| m.ever_joined).max()?;
    if joined == 0 {
        return None;
    }
    let all = marks.iter().find(|m| m.ever_joined >= joined)?;
    let from = all.t_s + warmup_s;
    let i0 = marks.iter().position(|m| m.t_s >= from - 1e-9)?;
    let win = &marks[i0..];
    let (a, b) = (win.first()?, win.last()?);
    let window_s = b.t_s - a.t_s;
    if win.len() < 2 || window_s <= 0.0 {
        return None;
    }
    let bot_s: f64 = win
        .windows(2)
        .map(|p| (p[0].connected + p[1].connected) as f64 / 2.0 * (p[1].t_s - p[0].t_s))
        .sum();
    let per_bot_s = |v: f64| if bot_s > 0.0 { v / bot_s } else { 0.0 };
    let cpu = (b.cpu_s - a.cpu_s).max(0.0);
    Some(Steady {
        all_joined_s: all.t_s,
        bots_joined: joined,
        warmup_s,
        from_s: a.t_s,
        to_s: b.t_s,
        window_s,
        bots_avg: bot_s / window_s,
        load_cpu_ms_per_bot_s: per_bot_s(cpu * 1e3),
        load_cpu_cores: cpu / window_s,
        down_bytes_per_client_s: per_bot_s(b.down_bytes.saturating_sub(a.down_bytes) as f64),
        up_bytes_per_client_s: per_bot_s(b.up_bytes.saturating_sub(a.up_bytes) as f64),
        load_rss_start_mib: a.rss_mib,
        load_rss_end_mib: b.rss_mib,
        ..Steady::default()
    })
}

/// One server process over `[from_s, to_s]`: its first and last sample inside the window as
/// (seconds between them, CPU seconds between them, RSS at the first, RSS at the last); None
/// with fewer than two samples inside.
pub fn server_window(
    samples: &[ServerMark],
    from_s: f64,
    to_s: f64,
) -> Option<(f64, f64, f64, f64)> {
    let mut inside = samples
        .iter()
        .filter(|s| s.t_s >= from_s - 1e-9 && s.t_s <= to_s + 1e-9);
    let a = inside.next()?;
    let b = inside.next_back()?;
    let dt = b.t_s - a.t_s;
    (dt > 0.0).then(|| (dt, (b.cpu_s - a.cpu_s).max(0.0), a.rss_mib, b.rss_mib))
}

impl Steady {
    /// Adds the server side from each scraped process's samples (CPU and RSS add up over the
    /// processes; each process's CPU rate is its own samples' delta over their own span).
    pub fn add_servers<'a>(&mut self, processes: impl IntoIterator<Item = &'a [ServerMark]>) {
        let (mut cores, mut rss0, mut rss1, mut span, mut any) = (0.0, 0.0, 0.0, 0.0f64, false);
        for samples in processes {
            if let Some((dt, cpu, r0, r1)) = server_window(samples, self.from_s, self.to_s) {
                cores += cpu / dt;
                rss0 += r0;
                rss1 += r1;
                span = span.max(dt);
                any = true;
            }
        }
        if !any {
            return;
        }
        self.server_cpu_cores = Some(cores);
        self.server_cpu_ms_per_bot_s = Some(if self.bots_avg > 0.0 {
            cores * 1e3 / self.bots_avg
        } else {
            0.0
        });
        self.server_window_s = Some(span);
        self.server_rss_start_mib = Some(rss0);
        self.server_rss_end_mib = Some(rss1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(t_s: f64, connected: u64, ever_joined: u64, cpu_s: f64, down: u64) -> Mark {
        Mark {
            t_s,
            connected,
            ever_joined,
            cpu_s,
            down_bytes: down,
            up_bytes: down / 4,
            rss_mib: 10.0 + t_s,
        }
    }

    #[test]
    fn the_window_starts_a_warmup_after_the_last_join() {
        // 100 bots join over 2 s; from then 100 connected, the tool burns 0.02 cores-s per s
        // (0.2 ms per bot per s), each bot receives 1,000 B/s.
        let mut marks = vec![
            mark(1.0, 50, 50, 0.01, 50_000),
            mark(2.0, 100, 100, 0.03, 150_000),
        ];
        for t in 3..=22u64 {
            let k = (t - 2) as f64;
            marks.push(mark(
                t as f64,
                100,
                100,
                0.03 + 0.02 * k,
                150_000 + 100_000 * (t - 2),
            ));
        }
        let s = load_window(&marks, 10.0).unwrap();
        assert_eq!((s.all_joined_s, s.bots_joined), (2.0, 100));
        assert_eq!((s.from_s, s.to_s, s.window_s), (12.0, 22.0, 10.0));
        assert!((s.bots_avg - 100.0).abs() < 1e-9);
        assert!((s.load_cpu_ms_per_bot_s - 0.2).abs() < 1e-9, "{s:?}");
        assert!((s.load_cpu_cores - 0.02).abs() < 1e-9);
        assert!((s.down_bytes_per_client_s - 1_000.0).abs() < 1e-9);
        assert!((s.up_bytes_per_client_s - 250.0).abs() < 1e-9);
        assert_eq!((s.load_rss_start_mib, s.load_rss_end_mib), (22.0, 32.0));

        // The server: 0.011 cores-s per s over 100 bots = 0.11 ms per bot per s; samples
        // before and after the window are not used.
        let server: Vec<ServerMark> = (0..30)
            .map(|i| ServerMark {
                t_s: f64::from(i) + 0.5,
                cpu_s: if i < 12 {
                    0.5 * f64::from(i)
                } else {
                    6.0 + 0.011 * f64::from(i - 12)
                },
                rss_mib: 100.0 + f64::from(i),
            })
            .collect();
        let other: Vec<ServerMark> = server
            .iter()
            .map(|m| ServerMark { cpu_s: 0.0, ..*m })
            .collect();
        let mut s2 = s.clone();
        s2.add_servers([server.as_slice(), other.as_slice()]);
        assert!(
            (s2.server_cpu_cores.unwrap() - 0.011).abs() < 1e-9,
            "{s2:?}"
        );
        assert!((s2.server_cpu_ms_per_bot_s.unwrap() - 0.11).abs() < 1e-9);
        assert_eq!(s2.server_window_s, Some(9.0));
        // First sample in the window 12.5 (i = 12), last 21.5 (i = 21); two processes.
        assert_eq!(s2.server_rss_start_mib, Some(224.0));
        assert_eq!(s2.server_rss_end_mib, Some(242.0));
        // No server samples in the window: no server figures.
        let mut s3 = s.clone();
        s3.add_servers([&server[..5]]);
        assert_eq!(s3.server_cpu_cores, None);
    }

    #[test]
    fn bots_lost_mid_window_count_by_their_connected_time() {
        // 10 bots, half gone at t = 5 (a step between two marks: trapezoid over that second).
        let marks: Vec<Mark> = (0..=10u64)
            .map(|t| mark(t as f64, if t < 5 { 10 } else { 5 }, 10, t as f64 * 0.01, 0))
            .collect();
        let s = load_window(&marks, 0.0).unwrap();
        assert_eq!((s.from_s, s.to_s), (0.0, 10.0));
        // 4 s x 10 + 1 s x 7.5 + 5 s x 5 = 72.5 bot-seconds.
        assert!((s.bots_avg - 7.25).abs() < 1e-9);
        assert!((s.load_cpu_ms_per_bot_s - 100.0 / 72.5).abs() < 1e-9);
    }

    #[test]
    fn too_short_a_run_has_no_window() {
        let marks: Vec<Mark> = (1..=5u64).map(|t| mark(t as f64, 3, 3, 0.0, 0)).collect();
        assert_eq!(load_window(&marks, 10.0), None);
        assert_eq!(load_window(&marks[..1], 0.0), None);
        assert_eq!(load_window(&[], 0.0), None);
        let none: Vec<Mark> = (1..=5u64).map(|t| mark(t as f64, 0, 0, 0.0, 0)).collect();
        assert_eq!(load_window(&none, 0.0), None);
        // Only the last second inside the window: one mark, no window.
        assert_eq!(load_window(&marks, 4.0), None);
        assert!(load_window(&marks, 3.0).is_some());
        assert_eq!(server_window(&[], 0.0, 10.0), None);
    }
}
