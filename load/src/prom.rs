//! Scrapes a Prometheus text exposition and computes a quantile of one histogram from it.
//!
//! [`parse_histogram`] sums the `_bucket`, `_count` and `_sum` series of a histogram across all
//! label sets (for example one per room); [`HistogramBuckets::delta`] turns two scrapes into the
//! interval between them; [`HistogramBuckets::quantile`] interpolates linearly inside the bucket
//! like PromQL's `histogram_quantile`. [`scrape`] is a minimal HTTP/1.0 GET over plain TCP (no
//! TLS, no redirects): enough for the local admin port, not a general HTTP client.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Errors of [`scrape`].
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// The URL is not `http://host:port/path`.
    #[error("unsupported metrics url: {0}")]
    BadUrl(String),
    /// Connecting, writing or reading failed.
    #[error("metrics request failed: {0}")]
    Io(#[from] std::io::Error),
    /// The scrape took longer than its deadline.
    #[error("metrics request timed out")]
    Timeout,
    /// The response was not `200 OK` with a body.
    #[error("bad metrics response: {0}")]
    BadResponse(String),
}

/// The buckets of one Prometheus histogram, summed over its label sets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistogramBuckets {
    /// `(upper bound, cumulative count)`, ascending by bound; the last bound may be `+Inf`.
    pub buckets: Vec<(f64, f64)>,
    /// The `_count` series.
    pub count: f64,
    /// The `_sum` series.
    pub sum: f64,
}

impl HistogramBuckets {
    /// Whether no observation is in the histogram.
    pub fn is_empty(&self) -> bool {
        self.buckets.last().is_none_or(|(_, c)| *c <= 0.0)
    }

    /// The observations made between `earlier` and `self` (bucket-wise difference; a bound that
    /// `earlier` lacks counts from zero, and a counter reset yields `self` unchanged).
    pub fn delta(&self, earlier: &Self) -> Self {
        if self.count < earlier.count {
            return self.clone();
        }
        let before: BTreeMap<u64, f64> = earlier
            .buckets
            .iter()
            .map(|(le, c)| (le.to_bits(), *c))
            .collect();
        Self {
            buckets: self
                .buckets
                .iter()
                .map(|(le, c)| {
                    (
                        *le,
                        (c - before.get(&le.to_bits()).copied().unwrap_or(0.0)).max(0.0),
                    )
                })
                .collect(),
            count: self.count - earlier.count,
            sum: self.sum - earlier.sum,
        }
    }

    /// The `q` quantile (0..=1), interpolated inside its bucket; `None` when empty. A quantile
    /// that lands in the `+Inf` bucket returns the highest finite bound.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.buckets.last()?.1;
        if total <= 0.0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total;
        let mut prev_le = 0.0;
        let mut prev_count = 0.0;
        for &(le, count) in &self.buckets {
            if count >= rank && count > prev_count {
                if le.is_infinite() {
                    return Some(prev_le);
                }
                let frac = (rank - prev_count) / (count - prev_count);
                return Some(prev_le + (le - prev_le) * frac);
            }
            if le.is_finite() {
                prev_le = le;
            }
            prev_count = count;
        }
        Some(prev_le)
    }
}

/// Parses the histogram `name` (without the `_bucket` suffix) out of a text exposition, summed
/// over all its label sets. Unparsable lines are skipped; `None` if no bucket line was found.
pub fn parse_histogram(text: &str, name: &str) -> Option<HistogramBuckets> {
    let bucket_name = format!("{name}_bucket");
    let count_name = format!("{name}_count");
    let sum_name = format!("{name}_sum");
    let mut buckets: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
    let mut out = HistogramBuckets::default();
    let mut found = false;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((series, labels, value)) = split_sample(line) else {
            continue;
        };
        if series == bucket_name {
            let Some(le) = label_value(labels, "le").and_then(parse_float) else {
                continue;
            };
            found = true;
            // Order buckets by bound; f64 bits of non-negative floats sort like the floats.
            let key = if le.is_infinite() {
                u64::MAX
            } else {
                le.max(0.0).to_bits()
            };
            buckets.entry(key).or_insert((le, 0.0)).1 += value;
        } else if series == count_name {
            out.count += value;
        } else if series == sum_name {
            out.sum += value;
        }
    }
    if !found {
        return None;
    }
    out.buckets = buckets.into_values().collect();
    Some(out)
}

/// The sum over all label sets of the sample `name` (a counter's `_total` series or a gauge);
/// `None` if there is no such sample.
pub fn parse_sample(text: &str, name: &str) -> Option<f64> {
    let mut total = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some((series, _, value)) = split_sample(line)
            && series == name
        {
            *total.get_or_insert(0.0) += value;
        }
    }
    total
}

/// Splits `name{labels} value [timestamp]` into its parts.
fn split_sample(line: &str) -> Option<(&str, &str, f64)> {
    let (head, rest) = match line.find('{') {
        Some(open) => {
            let close = line[open..].find('}')? + open;
            (&line[..open], (&line[open + 1..close], &line[close + 1..]))
        }
        None => {
            let sp = line.find(char::is_whitespace)?;
            (&line[..sp], ("", &line[sp..]))
        }
    };
    let (labels, tail) = rest;
    let value = parse_float(tail.split_whitespace().next()?)?;
    Some((head.trim(), labels, value))
}

/// The value of `key` in `a="x",le="0.5"` (no escapes inside values are expected for `le`).
fn label_value<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    let mut rest = labels;
    while !rest.is_empty() {
        let eq = rest.find('=')?;
        let k = rest[..eq].trim().trim_start_matches(',').trim();
        let after = rest[eq + 1..].trim_start().strip_prefix('"')?;
        let end = after.find('"')?;
        if k == key {
            return Some(&after[..end]);
        }
        rest = &after[end + 1..];
    }
    None
}

fn parse_float(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => s.parse().ok(),
    }
}

/// GETs `url` (`http://host:port/path`) and returns the body, within `timeout`.
pub async fn scrape(url: &str, timeout: Duration) -> Result<String, ScrapeError> {
    tokio::time::timeout(timeout, scrape_inner(url))
        .await
        .map_err(|_| ScrapeError::Timeout)?
}

async fn scrape_inner(url: &str) -> Result<String, ScrapeError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| ScrapeError::BadUrl(url.to_owned()))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/metrics"),
    };
    if authority.is_empty() {
        return Err(ScrapeError::BadUrl(url.to_owned()));
    }
    let addr = if authority.contains(':') {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let req = format!(
        "GET {path} HTTP/1.0\r\nHost: {authority}\r\nAccept: text/plain\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(req.as_bytes()).await?;
    let mut raw = Vec::with_capacity(64 * 1024);
    // Cap the body at 64 MiB: a metrics page is far smaller.
    (&mut stream).take(64 << 20).read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| ScrapeError::BadResponse("no header end".into()))?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(ScrapeError::BadResponse(status.to_owned()));
    }
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if chunked {
        dechunk(body).ok_or_else(|| ScrapeError::BadResponse("bad chunked body".into()))
    } else {
        Ok(body.to_owned())
    }
}

/// Decodes an HTTP/1.1 chunked body.
fn dechunk(mut body: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size_line, rest) = body.split_once("\r\n")?;
        let size = usize::from_str_radix(size_line.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.push_str(rest.get(..size)?);
        body = rest.get(size..)?.strip_prefix("\r\n")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_summed_over_label_sets() {
        let text = "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.5\n\
                    plaza_x_total{a=\"1\"} 2\nplaza_x_total{a=\"2\"} 3\n";
        assert_eq!(parse_sample(text, "process_cpu_seconds_total"), Some(1.5));
        assert_eq!(parse_sample(text, "plaza_x_total"), Some(5.0));
        assert_eq!(parse_sample(text, "plaza_y"), None);
    }

    const TEXT: &str = r#"# HELP plaza_room_tick_duration_seconds Duration of one room tick.
# TYPE plaza_room_tick_duration_seconds histogram
plaza_room_tick_duration_seconds_bucket{le="0.001"} 50
plaza_room_tick_duration_seconds_bucket{le="0.002"} 90
plaza_room_tick_duration_seconds_bucket{le="0.005"} 99
plaza_room_tick_duration_seconds_bucket{le="0.01"} 100
plaza_room_tick_duration_seconds_bucket{le="+Inf"} 100
plaza_room_tick_duration_seconds_sum 0.12
plaza_room_tick_duration_seconds_count 100
plaza_room_tick_overruns_total 3
"#;

    #[test]
    fn parses_buckets_and_interpolates_p99() {
        let h = parse_histogram(TEXT, "plaza_room_tick_duration_seconds").unwrap();
        assert_eq!(h.buckets.len(), 5);
        assert_eq!(h.count, 100.0);
        assert!((h.sum - 0.12).abs() < 1e-12);
        // Rank 99 is the top of the 0.005 bucket.
        assert!((h.quantile(0.99).unwrap() - 0.005).abs() < 1e-9);
        // Rank 50 is the top of the first bucket; rank 70 is half way through 0.001..0.002.
        assert!((h.quantile(0.5).unwrap() - 0.001).abs() < 1e-9);
        assert!((h.quantile(0.7).unwrap() - 0.0015).abs() < 1e-9);
    }

    #[test]
    fn sums_label_sets_and_ignores_other_metrics() {
        let text = r#"
plaza_room_tick_duration_seconds_bucket{room="a",le="0.001"} 10
plaza_room_tick_duration_seconds_bucket{room="b",le="0.001"} 0
plaza_room_tick_duration_seconds_bucket{le="+Inf",room="a"} 10
plaza_room_tick_duration_seconds_bucket{room="b",le="+Inf"} 10
plaza_room_tick_duration_seconds_count{room="a"} 10
plaza_room_tick_duration_seconds_count{room="b"} 10
other_bucket{le="0.001"} 99
"#;
        let h = parse_histogram(text, "plaza_room_tick_duration_seconds").unwrap();
        assert_eq!(h.buckets, vec![(0.001, 10.0), (f64::INFINITY, 20.0)]);
        assert_eq!(h.count, 20.0);
        // Half the ticks are above the largest finite bound: p99 reports that bound.
        assert_eq!(h.quantile(0.99), Some(0.001));
        assert!(parse_histogram(text, "missing").is_none());
    }

    #[test]
    fn delta_between_scrapes() {
        let a = parse_histogram(TEXT, "plaza_room_tick_duration_seconds").unwrap();
        let later = TEXT
            .replace("{le=\"0.01\"} 100", "{le=\"0.01\"} 200")
            .replace("{le=\"+Inf\"} 100", "{le=\"+Inf\"} 200")
            .replace("_count 100", "_count 200");
        let b = parse_histogram(&later, "plaza_room_tick_duration_seconds").unwrap();
        let d = b.delta(&a);
        assert_eq!(d.count, 100.0);
        // All 100 new ticks fell in 0.005..0.01.
        let p99 = d.quantile(0.99).unwrap();
        assert!(p99 > 0.005 && p99 <= 0.01, "{p99}");
        assert!(HistogramBuckets::default().quantile(0.99).is_none());
        assert!(a.delta(&a).is_empty());
    }

    #[test]
    fn dechunks_bodies() {
        assert_eq!(
            dechunk("4\r\nabcd\r\n2\r\nef\r\n0\r\n\r\n").as_deref(),
            Some("abcdef")
        );
        assert_eq!(dechunk("zz\r\n"), None);
    }

    #[tokio::test]
    async fn scrape_rejects_non_http_urls() {
        let err = scrape("https://x/metrics", Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(matches!(err, ScrapeError::BadUrl(_)));
    }

    #[tokio::test]
    async fn scrape_reads_a_local_server() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await.unwrap();
            let body = TEXT;
            let resp = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            s.write_all(resp.as_bytes()).await.unwrap();
        });
        let text = scrape(&format!("http://{addr}/metrics"), Duration::from_secs(5))
            .await
            .unwrap();
        server.await.unwrap();
        let h = parse_histogram(&text, "plaza_room_tick_duration_seconds").unwrap();
        assert_eq!(h.count, 100.0);
    }
}
