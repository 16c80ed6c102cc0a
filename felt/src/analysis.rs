//! Compares what observers rendered with the room's recorded authoritative poses.
//!
//! **The true path.** The room records each member's pose at every step where it changed
//! (`PLAZA_RECORD_POSES`). Between two records the server's pose is a staircase: it changes
//! when a move is applied. The true path used here is the polyline through those change points,
//! each reached at its tick and left one move interval (`tick_hz / 20` steps, the walkers' move
//! period) before the next (so a standing avatar that starts walking stands until its first
//! move); a change of more than 2 m is a teleport (a step, no ramp).
//!
//! **Error.** Each rendered pose is compared with the true path at the server time the smoother
//! declares it shows (`render_t`: the local clock minus the link-delay envelope minus the
//! interpolation interval), i.e. the true path delayed by the declared interpolation delay.
//! Poses in a first-sighting cooldown and within 0.5 s of a teleport of that avatar are left
//! out (a teleport is a snap by design).
//!
//! **Start / stop lag.** A start is the first change of position by more than 2 cm after at
//! least 0.5 s at rest, a stop the last change before at least 0.5 s at rest; the same rule is
//! applied to the rendered path. Server ticks are put on the observer's clock with the smallest
//! `arrival − tick / tick_hz` over all frames (clock offset plus the link's smallest one-way
//! delay), so the lag is what the observer sees beyond the fastest delivery.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::observer::ObserverLog;

/// One recorded authoritative pose.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TruePose {
    /// Room tick.
    pub(crate) tick: u64,
    /// Position, metres.
    pub(crate) p: [f64; 3],
}

/// Reads the recorder's JSON lines of `room`.
pub(crate) fn read_truth(text: &str, room: &str) -> BTreeMap<u32, Vec<TruePose>> {
    let mut out: BTreeMap<u32, Vec<TruePose>> = BTreeMap::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["room"].as_str() != Some(room) {
            continue;
        }
        let (Some(tick), Some(entity), Some(p)) =
            (v["tick"].as_u64(), v["entity"].as_u64(), v["p"].as_array())
        else {
            continue;
        };
        let f = |i: usize| p.get(i).and_then(serde_json::Value::as_f64).unwrap_or(0.0);
        out.entry(entity as u32).or_default().push(TruePose {
            tick,
            p: [f(0), f(1), f(2)],
        });
    }
    for v in out.values_mut() {
        v.sort_by_key(|t| t.tick);
    }
    out
}

const TELEPORT_M: f64 = 2.0;

fn dist(a: [f64; 3], b: [f64; 3]) -> f64 {
    ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2) + (a[2] - b[2]).powi(2)).sqrt()
}

/// The true position at room tick `k` (fractional).
pub(crate) fn truth_at(path: &[TruePose], k: f64, ramp_ticks: f64) -> Option<[f64; 3]> {
    let first = path.first()?;
    if k < first.tick as f64 {
        return None;
    }
    let i = path.partition_point(|t| (t.tick as f64) <= k) - 1;
    let a = path[i];
    let Some(b) = path.get(i + 1) else {
        return Some(a.p);
    };
    if dist(a.p, b.p) > TELEPORT_M {
        return Some(a.p);
    }
    let start = (a.tick as f64).max(b.tick as f64 - ramp_ticks);
    if k <= start {
        return Some(a.p);
    }
    let u = ((k - start) / (b.tick as f64 - start)).clamp(0.0, 1.0);
    Some(std::array::from_fn(|j| a.p[j] + (b.p[j] - a.p[j]) * u))
}

/// The server's pose at room tick `k` exactly as it held it (the last change at or before `k`).
pub(crate) fn held_at(path: &[TruePose], k: u64) -> Option<[f64; 3]> {
    let i = path.partition_point(|t| t.tick <= k);
    (i > 0).then(|| path[i - 1].p)
}

/// The broadcast path at tick `k` (fractional): the server's held pose at the ticks of the
/// frames the observer got, joined by straight lines (a step at a teleport).
pub(crate) fn broadcast_at(path: &[TruePose], frames: &[u64], k: f64) -> Option<[f64; 3]> {
    let i = frames.partition_point(|&t| (t as f64) <= k);
    if i == 0 {
        return None;
    }
    let a_t = frames[i - 1];
    let a = held_at(path, a_t)?;
    let Some(&b_t) = frames.get(i) else {
        return Some(a);
    };
    let b = held_at(path, b_t)?;
    if dist(a, b) > TELEPORT_M || b_t == a_t {
        return Some(a);
    }
    let u = ((k - a_t as f64) / (b_t - a_t) as f64).clamp(0.0, 1.0);
    Some(std::array::from_fn(|j| a[j] + (b[j] - a[j]) * u))
}

/// Teleport ticks of a path.
pub(crate) fn teleports(path: &[TruePose]) -> Vec<u64> {
    path.windows(2)
        .filter(|w| dist(w[0].p, w[1].p) > TELEPORT_M)
        .map(|w| w[1].tick)
        .collect()
}

/// Starts and stops of a sampled path `(time, position)`: (time, is_start).
pub(crate) fn starts_stops(path: &[(f64, [f64; 3])], rest_s: f64) -> Vec<(f64, bool)> {
    let eps = 0.02;
    let mut out = Vec::new();
    if path.len() < 2 {
        return out;
    }
    // Moves: times at which the position changed by more than eps from the last anchor.
    let mut anchor = path[0].1;
    let mut last_change = path[0].0;
    let mut moving = false;
    for &(t, p) in &path[1..] {
        if dist(p, anchor) > eps {
            if dist(p, anchor) > TELEPORT_M {
                // A teleport: neither a start nor a stop.
                anchor = p;
                last_change = t;
                continue;
            }
            if moving && t - last_change >= rest_s {
                // Nothing changed for a while (a recorder writes only changes): it had stopped.
                out.push((last_change, false));
                moving = false;
            }
            if !moving && t - last_change >= rest_s {
                out.push((t, true));
            }
            moving = true;
            anchor = p;
            last_change = t;
        } else if moving && t - last_change >= rest_s {
            out.push((last_change, false));
            moving = false;
        }
    }
    out
}

/// Percentiles of a sample.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(crate) struct Pct {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub(crate) max: f64,
    /// Samples.
    pub(crate) n: usize,
}

/// Nearest-rank percentiles.
pub(crate) fn pct(v: &mut [f64]) -> Pct {
    if v.is_empty() {
        return Pct::default();
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[(((v.len() as f64) * q).ceil() as usize).clamp(1, v.len()) - 1];
    Pct {
        p50: at(0.5),
        p99: at(0.99),
        max: *v.last().unwrap_or(&0.0),
        n: v.len(),
    }
}

/// What one observer's run measured.
#[derive(Debug, Default)]
pub(crate) struct Measured {
    /// Position errors, metres, with their local time.
    pub(crate) errors: Vec<(f64, f64)>,
    /// Errors against the broadcast path (what the frames carried, joined by lines): what the
    /// link and the smoothing add, without the server's sampling.
    pub(crate) broadcast_errors: Vec<f64>,
    /// Non-teleport snaps (distance, gap, blend) not within 1 s of a true teleport.
    pub(crate) snaps_outside_teleport: u64,
    /// Teleport snaps.
    pub(crate) teleport_snaps: u64,
    /// Start / stop lags, ms.
    pub(crate) lags_ms: Vec<f64>,
    /// Unmatched server starts / stops (the replica never showed them within 2 s).
    pub(crate) lag_unmatched: u64,
    /// Declared interpolation delay (`now − offset − render_t`), ms.
    pub(crate) delays_ms: Vec<f64>,
    /// Largest rendered step between two frames, outside teleports, metres.
    pub(crate) max_frame_step_m: f64,
}

/// Measures one observer's log against the truth.
pub(crate) fn measure(log: &ObserverLog, truth: &BTreeMap<u32, Vec<TruePose>>) -> Measured {
    let mut m = Measured::default();
    let hz = f64::from(log.tick_hz.max(1));
    let ramp = hz / 20.0;
    let offset = log
        .frames
        .iter()
        .map(|&(l, tick)| l - f64::from(tick) / hz)
        .fold(f64::INFINITY, f64::min);
    let offset = if offset.is_finite() { offset } else { 0.0 };
    // FELT_DUMP=path: every compared pose as CSV (local_s, entity, render_t, error, error vs
    // the broadcast path, x, z), for looking into a run.
    let mut dump = std::env::var_os("FELT_DUMP").and_then(|p| std::fs::File::create(p).ok());
    let mut frames: Vec<u64> = log.frames.iter().map(|&(_, t)| u64::from(t)).collect();
    frames.sort_unstable();
    frames.dedup();
    let mut by_entity: BTreeMap<u32, Vec<&crate::observer::Shown>> = BTreeMap::new();
    for s in &log.shown {
        by_entity.entry(s.entity).or_default().push(s);
    }
    for (entity, shown) in &by_entity {
        let Some(path) = truth.get(entity) else {
            continue;
        };
        let tps: Vec<f64> = teleports(path).iter().map(|&t| t as f64 / hz).collect();
        let near_tp = |t: f64, w: f64| tps.iter().any(|&x| (t - x).abs() <= w);
        let mut prev: Option<&crate::observer::Shown> = None;
        for s in shown {
            m.delays_ms.push((s.local_s - offset - s.render_t) * 1000.0);
            if let Some(p) = prev {
                let d_snaps: Vec<u64> = (0..4)
                    .map(|i| s.snaps[i].saturating_sub(p.snaps[i]))
                    .collect();
                m.teleport_snaps += d_snaps[0];
                let other: u64 = d_snaps[1..].iter().sum();
                if other > 0 && !near_tp(s.render_t, 1.0) {
                    m.snaps_outside_teleport += other;
                }
                if !near_tp(s.render_t, 0.5) && d_snaps[0] == 0 {
                    m.max_frame_step_m = m.max_frame_step_m.max(dist(s.position, p.position));
                }
            }
            prev = Some(s);
            if s.cooling || near_tp(s.render_t, 0.5) {
                continue;
            }
            if let Some(t) = truth_at(path, s.render_t * hz, ramp) {
                m.errors.push((s.local_s, dist(s.position, t)));
            }
            if let Some(t) = broadcast_at(path, &frames, s.render_t * hz) {
                m.broadcast_errors.push(dist(s.position, t));
                if let Some(d) = dump.as_mut() {
                    use std::io::Write as _;
                    let e = m.errors.last().map_or(0.0, |e| e.1);
                    let _ = writeln!(
                        d,
                        "{},{},{},{},{},{},{}",
                        s.local_s,
                        entity,
                        s.render_t,
                        e,
                        dist(s.position, t),
                        s.position[0],
                        s.position[2]
                    );
                }
            }
        }
        // Start / stop lag.
        let first_local = shown.first().map_or(0.0, |s| s.local_s);
        let last_local = shown.last().map_or(0.0, |s| s.local_s);
        let true_path: Vec<(f64, [f64; 3])> = path
            .iter()
            .map(|t| (t.tick as f64 / hz + offset, t.p))
            .collect();
        let shown_path: Vec<(f64, [f64; 3])> =
            shown.iter().map(|s| (s.local_s, s.position)).collect();
        let server_ev = starts_stops(&true_path, 0.5);
        let replica_ev = starts_stops(&shown_path, 0.5);
        for (t, start) in server_ev {
            if t < first_local + 1.0 || t > last_local - 2.5 {
                continue;
            }
            match replica_ev
                .iter()
                .find(|&&(r, s)| s == start && r >= t - 0.05 && r <= t + 2.0)
            {
                Some(&(r, _)) => m.lags_ms.push((r - t) * 1000.0),
                None => m.lag_unmatched += 1,
            }
        }
    }
    m
}
