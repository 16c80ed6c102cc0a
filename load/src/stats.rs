//! Shared run statistics: counters, keyed counts and latency histograms of all bots.
//!
//! Bots record into a small bot-local `LocalSamples` batch and flush it once per second, so
//! the shared histograms are locked a few thousand times per second at most. Histograms hold
//! microseconds; [`Percentiles`] reports milliseconds. Each histogram exists twice: for the
//! whole run and for the current one-second window of the time series. This module does not
//! talk to the network and does not format reports.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use hdrhistogram::Histogram;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// Largest recordable latency: one hour in microseconds; larger samples saturate.
const MAX_MICROS: u64 = 3_600_000_000;

/// p50 / p99 / max (milliseconds) and the sample count of one latency distribution.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Serialize)]
pub struct Percentiles {
    /// Median in milliseconds.
    pub p50: f64,
    /// 99th percentile in milliseconds.
    pub p99: f64,
    /// Maximum in milliseconds.
    pub max: f64,
    /// Mean in milliseconds.
    pub mean: f64,
    /// Number of samples.
    pub count: u64,
}

impl Percentiles {
    /// Summarizes a histogram of microseconds; all zero when it is empty.
    pub fn from_micros(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Self {
            p50: ms(h.value_at_quantile(0.50)),
            p99: ms(h.value_at_quantile(0.99)),
            max: ms(h.max()),
            mean: h.mean() / 1000.0,
            count: h.len(),
        }
    }
}

/// A new microsecond histogram (1 µs .. 1 h, 3 significant digits).
pub(crate) fn new_histogram() -> Histogram<u64> {
    // The bounds are constants that hdrhistogram accepts (low >= 1, high >= 2 * low).
    Histogram::new_with_bounds(1, MAX_MICROS, 3).expect("constant histogram bounds are valid")
}

/// Which latency a sample belongs to.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(crate) enum Metric {
    SnapshotInterval,
    MoveToSeen,
    Rtt,
    Resume,
    Connect,
}

const METRICS: usize = 5;

/// One histogram per [`Metric`].
pub(crate) struct HistSet {
    pub(crate) hists: [Histogram<u64>; METRICS],
}

impl HistSet {
    fn new() -> Self {
        Self {
            hists: std::array::from_fn(|_| new_histogram()),
        }
    }

    pub(crate) fn get(&self, m: Metric) -> &Histogram<u64> {
        &self.hists[m as usize]
    }

    fn reset(&mut self) {
        for h in &mut self.hists {
            h.reset();
        }
    }
}

/// Counters shared by all bots. All monotonic except `connected`.
#[derive(Default)]
pub(crate) struct Counters {
    /// Bots currently joined (a gauge).
    pub(crate) connected: AtomicU64,
    /// Bots that joined at least once.
    pub(crate) ever_joined: AtomicU64,
    /// Bots whose start time had not come when the run was stopped early.
    pub(crate) not_started: AtomicU64,
    pub(crate) bots_lost: AtomicU64,
    pub(crate) connect_failures: AtomicU64,
    pub(crate) frames: AtomicU64,
    pub(crate) keyframes: AtomicU64,
    pub(crate) decode_errors: AtomicU64,
    pub(crate) check_failures: AtomicU64,
    pub(crate) keyframes_requested: AtomicU64,
    pub(crate) frames_awaiting_keyframe: AtomicU64,
    pub(crate) down_bytes: AtomicU64,
    pub(crate) up_bytes: AtomicU64,
    /// Sum over bots of the time spent joined, in microseconds.
    pub(crate) joined_micros: AtomicU64,
    pub(crate) movements_sent: AtomicU64,
    pub(crate) pings_sent: AtomicU64,
    pub(crate) resumes: AtomicU64,
    pub(crate) resumes_in_session: AtomicU64,
    pub(crate) keyframes_unrequested: AtomicU64,
    pub(crate) rejoins: AtomicU64,
    pub(crate) interactions_sent: AtomicU64,
    pub(crate) consent_sent: AtomicU64,
    pub(crate) emotes_sent: AtomicU64,
    pub(crate) expressions_sent: AtomicU64,
    /// `ExpressionFrame` messages received, the states in them, and their WS payload bytes.
    pub(crate) expression_frames: AtomicU64,
    pub(crate) expression_states: AtomicU64,
    pub(crate) expression_down_bytes: AtomicU64,
    pub(crate) double_holds: AtomicU64,
    pub(crate) holder_handoffs: AtomicU64,
}

impl Counters {
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// Counts keyed by a name (close codes, error codes, correction reasons ...).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Serialize)]
pub struct KeyedCounts(pub BTreeMap<String, u64>);

impl KeyedCounts {
    /// Adds one to `key`.
    pub fn bump(&mut self, key: impl Into<String>) {
        *self.0.entry(key.into()).or_default() += 1;
    }

    /// The sum of all counts.
    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }
}

/// The rare-event maps, under one lock.
#[derive(Default)]
pub(crate) struct Keyed {
    pub(crate) close_codes: KeyedCounts,
    pub(crate) error_codes: KeyedCounts,
    pub(crate) corrections_by_reason: KeyedCounts,
    pub(crate) rejections_by_reason: KeyedCounts,
    pub(crate) events_by_kind: KeyedCounts,
    pub(crate) connect_errors: KeyedCounts,
    pub(crate) frame_errors: KeyedCounts,
    /// When each reconnect with the resume token went through (Unix ms).
    pub(crate) reconnect_times_unix_ms: Vec<u64>,
}

/// What the bots of one room recorded (the per-room breakdown of the report).
#[derive(Default)]
pub(crate) struct RoomStats {
    /// Bots assigned to the room that started.
    pub(crate) bots: AtomicU64,
    /// Of those, bots that joined at least once.
    pub(crate) joined: AtomicU64,
    /// Bots that joined but ended the run disconnected against their will.
    pub(crate) lost: AtomicU64,
    pub(crate) down_bytes: AtomicU64,
    pub(crate) up_bytes: AtomicU64,
    pub(crate) frames: AtomicU64,
    /// Sum over the room's bots of the time spent joined, in microseconds.
    pub(crate) joined_micros: AtomicU64,
    snapshot_interval: Mutex<Option<Histogram<u64>>>,
}

impl RoomStats {
    /// The snapshot interval distribution of the room's bots.
    pub(crate) fn snapshot_interval(&self) -> Percentiles {
        self.snapshot_interval
            .lock()
            .as_ref()
            .map(Percentiles::from_micros)
            .unwrap_or_default()
    }

    fn record(&self, local: &LocalSamples) {
        Counters::add(&self.down_bytes, local.down_bytes);
        Counters::add(&self.up_bytes, local.up_bytes);
        Counters::add(&self.frames, local.frames);
        if local.snapshot_interval.is_empty() {
            return;
        }
        let mut h = self.snapshot_interval.lock();
        let h = h.get_or_insert_with(new_histogram);
        for v in &local.snapshot_interval {
            h.saturating_record((*v).clamp(1, MAX_MICROS));
        }
    }
}

/// Everything the bots of a run record into.
pub(crate) struct Stats {
    pub(crate) counters: Counters,
    pub(crate) keyed: Mutex<Keyed>,
    total: Mutex<HistSet>,
    window: Mutex<HistSet>,
    rooms: Mutex<BTreeMap<String, std::sync::Arc<RoomStats>>>,
}

impl Stats {
    pub(crate) fn new() -> Self {
        Self {
            counters: Counters::default(),
            keyed: Mutex::new(Keyed::default()),
            total: Mutex::new(HistSet::new()),
            window: Mutex::new(HistSet::new()),
            rooms: Mutex::new(BTreeMap::new()),
        }
    }

    /// The statistics of `room` (created on first use; bots keep the `Arc`).
    pub(crate) fn room(&self, room: &str) -> std::sync::Arc<RoomStats> {
        self.rooms
            .lock()
            .entry(room.to_owned())
            .or_default()
            .clone()
    }

    /// Every room's statistics, by room id.
    pub(crate) fn rooms(&self) -> Vec<(String, std::sync::Arc<RoomStats>)> {
        self.rooms
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Records one sample directly (for rare samples such as connects and resumes).
    pub(crate) fn record(&self, m: Metric, micros: u64) {
        let v = micros.clamp(1, MAX_MICROS);
        self.total.lock().hists[m as usize].saturating_record(v);
        self.window.lock().hists[m as usize].saturating_record(v);
    }

    /// Merges a bot's batch of samples and byte counts, and empties it.
    pub(crate) fn flush(&self, local: &mut LocalSamples) {
        if let Some(room) = local.room.clone() {
            room.record(local);
        }
        Counters::add(
            &self.counters.down_bytes,
            std::mem::take(&mut local.down_bytes),
        );
        Counters::add(&self.counters.up_bytes, std::mem::take(&mut local.up_bytes));
        Counters::add(&self.counters.frames, std::mem::take(&mut local.frames));
        Counters::add(
            &self.counters.movements_sent,
            std::mem::take(&mut local.movements),
        );
        Counters::add(&self.counters.pings_sent, std::mem::take(&mut local.pings));
        if local.is_empty() {
            return;
        }
        for set in [&self.total, &self.window] {
            let mut set = set.lock();
            for (m, samples) in local.batches() {
                let h = &mut set.hists[m as usize];
                for v in samples {
                    h.saturating_record((*v).clamp(1, MAX_MICROS));
                }
            }
        }
        local.clear();
    }

    /// Calls `f` on the whole-run histograms.
    pub(crate) fn with_total<R>(&self, f: impl FnOnce(&HistSet) -> R) -> R {
        f(&self.total.lock())
    }

    /// Calls `f` on the current window's histograms, then starts a new window.
    pub(crate) fn take_window<R>(&self, f: impl FnOnce(&HistSet) -> R) -> R {
        let mut w = self.window.lock();
        let r = f(&w);
        w.reset();
        r
    }
}

/// A bot's unflushed samples (microseconds) and byte counts.
#[derive(Default)]
pub(crate) struct LocalSamples {
    /// The bot's room, which [`Stats::flush`] also records into.
    pub(crate) room: Option<std::sync::Arc<RoomStats>>,
    pub(crate) snapshot_interval: Vec<u64>,
    pub(crate) move_to_seen: Vec<u64>,
    pub(crate) rtt: Vec<u64>,
    pub(crate) down_bytes: u64,
    pub(crate) up_bytes: u64,
    pub(crate) frames: u64,
    pub(crate) movements: u64,
    pub(crate) pings: u64,
}

impl LocalSamples {
    fn is_empty(&self) -> bool {
        self.snapshot_interval.is_empty() && self.move_to_seen.is_empty() && self.rtt.is_empty()
    }

    fn batches(&self) -> [(Metric, &[u64]); 3] {
        [
            (Metric::SnapshotInterval, &self.snapshot_interval),
            (Metric::MoveToSeen, &self.move_to_seen),
            (Metric::Rtt, &self.rtt),
        ]
    }

    fn clear(&mut self) {
        self.snapshot_interval.clear();
        self.move_to_seen.clear();
        self.rtt.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_known_samples() {
        let stats = Stats::new();
        let mut local = LocalSamples::default();
        // 1..=100 ms.
        local.move_to_seen.extend((1..=100).map(|ms| ms * 1000));
        local.down_bytes = 500;
        local.frames = 3;
        stats.flush(&mut local);
        assert!(local.move_to_seen.is_empty());
        assert_eq!(local.down_bytes, 0);
        assert_eq!(Counters::get(&stats.counters.down_bytes), 500);
        assert_eq!(Counters::get(&stats.counters.frames), 3);
        let p = stats.with_total(|s| Percentiles::from_micros(s.get(Metric::MoveToSeen)));
        assert_eq!(p.count, 100);
        assert!((p.p50 - 50.0).abs() < 0.1, "{p:?}");
        assert!((p.p99 - 99.0).abs() < 0.1, "{p:?}");
        assert!((p.max - 100.0).abs() < 0.1, "{p:?}");
        // The window holds the same samples once, then starts empty.
        let w = stats.take_window(|s| Percentiles::from_micros(s.get(Metric::MoveToSeen)));
        assert_eq!(w.count, 100);
        let w = stats.take_window(|s| Percentiles::from_micros(s.get(Metric::MoveToSeen)));
        assert_eq!(w, Percentiles::default());
    }

    #[test]
    fn out_of_range_samples_saturate_instead_of_failing() {
        let stats = Stats::new();
        stats.record(Metric::Rtt, 0);
        stats.record(Metric::Rtt, u64::MAX);
        let p = stats.with_total(|s| Percentiles::from_micros(s.get(Metric::Rtt)));
        assert_eq!(p.count, 2);
        assert!(p.max >= 3_600_000.0 * 0.99, "{p:?}");
    }

    #[test]
    fn keyed_counts_bump_and_total() {
        let mut k = KeyedCounts::default();
        k.bump("4004");
        k.bump("4004");
        k.bump("1000");
        assert_eq!(k.0["4004"], 2);
        assert_eq!(k.total(), 3);
    }
}
