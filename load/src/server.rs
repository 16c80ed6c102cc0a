//! The server's CPU and memory over a run, read from its `/metrics` process metrics
//! (`process_cpu_seconds_total`, `process_resident_memory_bytes`), once per second.

use std::time::Duration;

use crate::prom;
use crate::report::ServerProcess;

/// Scrapes the process metrics at `url` once per second until `stop` fires (or is dropped);
/// `None` if no scrape returned both metrics.
pub async fn sample(
    url: String,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Option<ServerProcess> {
    let mut first: Option<(tokio::time::Instant, f64, f64)> = None;
    let mut last: Option<(tokio::time::Instant, f64, f64)> = None;
    let mut out = ServerProcess {
        url: url.clone(),
        ..ServerProcess::default()
    };
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        // A dropped sender ends the sampling like a stop.
        let gone = tokio::select! {
            _ = tick.tick() => false,
            r = stop.changed() => r.is_err(),
        };
        if let Ok(text) = prom::scrape(&url, Duration::from_millis(800)).await
            && let (Some(cpu), Some(rss)) = (
                prom::parse_sample(&text, "process_cpu_seconds_total"),
                prom::parse_sample(&text, "process_resident_memory_bytes"),
            )
        {
            let now = tokio::time::Instant::now();
            let rss_mib = rss / (1024.0 * 1024.0);
            if let Some((t, c, _)) = last {
                let dt = now.duration_since(t).as_secs_f64();
                if dt > 0.0 {
                    out.cpu_cores_peak = out.cpu_cores_peak.max((cpu - c).max(0.0) / dt);
                }
            }
            first.get_or_insert((now, cpu, rss_mib));
            last = Some((now, cpu, rss_mib));
            out.rss_peak_mib = out.rss_peak_mib.max(rss_mib);
            out.samples += 1;
        }
        if gone || *stop.borrow() {
            break;
        }
    }
    let ((t0, c0, r0), (t1, c1, r1)) = (first?, last?);
    out.window_s = t1.duration_since(t0).as_secs_f64();
    out.cpu_seconds = (c1 - c0).max(0.0);
    out.cpu_cores_avg = if out.window_s > 0.0 {
        out.cpu_seconds / out.window_s
    } else {
        0.0
    };
    out.rss_start_mib = r0;
    out.rss_end_mib = r1;
    Some(out)
}
