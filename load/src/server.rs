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
            out.timeline.push((now.into_std(), cpu, rss_mib));
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

/// One room as a node's admin API (`GET /v1/rooms`) describes it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoomView {
    /// The node the room is live on.
    pub node: String,
    /// The p99 of the room's last 1,000 tick durations (ms).
    pub tick_p99_ms: Option<f64>,
    /// Frame bytes the room encoded over its last 10 s, per second, per member.
    pub bytes_per_client_per_s: Option<f64>,
}

/// Errors of [`room_views`].
#[derive(Debug, thiserror::Error)]
pub enum RoomViewError {
    /// The request failed.
    #[error("{url}: {source}")]
    Scrape {
        /// The URL asked.
        url: String,
        /// Why.
        source: prom::ScrapeError,
    },
    /// The answer is not the documented JSON.
    #[error("{url}: not a rooms list: {why}")]
    Body {
        /// The URL asked.
        url: String,
        /// Why.
        why: String,
    },
}

/// The rooms a node serves, by room id, from its admin API: `admin` is the admin base URL
/// (`http://host:port`), asked for `/v1/rooms` (no token: the admin API lets loopback callers
/// in when none is configured).
pub async fn room_views(
    admin: &str,
) -> Result<std::collections::BTreeMap<String, RoomView>, RoomViewError> {
    let url = format!("{}/v1/rooms", admin.trim_end_matches('/'));
    let body = prom::scrape(&url, Duration::from_secs(5))
        .await
        .map_err(|source| RoomViewError::Scrape {
            url: url.clone(),
            source,
        })?;
    parse_rooms(&body).map_err(|why| RoomViewError::Body { url, why })
}

fn parse_rooms(body: &str) -> Result<std::collections::BTreeMap<String, RoomView>, String> {
    let v: serde_json::Value = serde_json::from_str(body).map_err(|e| e.to_string())?;
    let rooms = v
        .get("rooms")
        .and_then(serde_json::Value::as_array)
        .ok_or("no `rooms` array")?;
    let mut out = std::collections::BTreeMap::new();
    for r in rooms {
        let id = r
            .get("id")
            .and_then(serde_json::Value::as_str)
            .ok_or("a room without an `id`")?;
        out.insert(
            id.to_owned(),
            RoomView {
                node: r
                    .get("node")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                tick_p99_ms: r.get("tick_p99_ms").and_then(serde_json::Value::as_f64),
                bytes_per_client_per_s: r
                    .get("bytes_per_client_per_s")
                    .and_then(serde_json::Value::as_f64),
            },
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rooms_list_parses_and_junk_is_an_error() {
        let body = r#"{"ok":true,"rooms":[{"id":"load-0","node":"n1.ab","epoch":"1.2",
            "tick_p99_ms":1.25,"bytes_per_client_per_s":900.0},
            {"id":"load-1","node":"n1.ab","tick_p99_ms":null}],"total":2}"#;
        let rooms = parse_rooms(body).unwrap();
        assert_eq!(rooms["load-0"].tick_p99_ms, Some(1.25));
        assert_eq!(rooms["load-0"].bytes_per_client_per_s, Some(900.0));
        assert_eq!(rooms["load-1"].tick_p99_ms, None);
        assert_eq!(rooms["load-1"].node, "n1.ab");
        assert!(parse_rooms("[]").is_err());
        assert!(parse_rooms("{\"rooms\":[{}]}").is_err());
        assert!(parse_rooms("not json").is_err());
    }
}
