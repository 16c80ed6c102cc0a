//! Compares what observers rendered with the room's recorded authoritative poses.
//!
//! **The true path.** The room records each member's pose at every step where it changed
//! (`PLAZA_RECORD_POSES`). Between two records the server's pose is a staircase: it changes
//! when a move is applied. The true path used here is the polyline through those change points,
//! each reached at its tick: a moving avatar (the record's velocity is not zero) goes straight
//! on to the next change point; a standing one stands until one move interval (`tick_hz / 20`
//! steps, the walkers' move period) before it, so a start is reached one interval after the
//! walker set off; a change of more than 2 m is a teleport (a step, no ramp).
//!
//! **Error.** Each rendered pose is compared with the true path at the server time the smoother
//! declares it shows (`render_t`: the local clock minus the link-delay envelope minus the
//! interpolation interval), i.e. the true path delayed by the declared interpolation delay.
//! Poses in a first-sighting cooldown and within 0.5 s of a teleport of that avatar are left
//! out (a teleport is a snap by design).
//!
//! **Start / stop lag.** Around each rest of the true path (a record with zero velocity that
//! holds for at least 0.5 s), the time between the true path and the rendered path crossing
//! the same boundary, [`REST_EPS_M`] around the rest position: a stop when the path comes
//! within it (and stays within [`STOP_WOBBLE_M`]: an overshoot that comes back is part of
//! stopping), a start when it leaves it for good. Server ticks are put on the observer's clock
//! with the smallest `arrival − tick / tick_hz` over all frames (clock offset plus the link's
//! smallest one-way delay), so the lag is what the observer sees beyond the fastest delivery,
//! the interpolation delay included.
//!
//! **The broadcast path** ([`broadcast_at`]): what the frames carried (the held pose carried
//! forward along its velocity to the frame's tick, as the room does), joined by straight
//! lines: its error is what the link and the smoothing add, without the server's sampling.

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
    /// Velocity the move declared, m/s (zero: standing).
    pub(crate) v: [f64; 3],
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
        let f = |a: &Vec<serde_json::Value>, i: usize| {
            a.get(i).and_then(serde_json::Value::as_f64).unwrap_or(0.0)
        };
        let v = v["v"]
            .as_array()
            .map_or([0.0; 3], |v| [f(v, 0), f(v, 1), f(v, 2)]);
        out.entry(entity as u32).or_default().push(TruePose {
            tick,
            p: [f(p, 0), f(p, 1), f(p, 2)],
            v,
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
    // Moving: straight on to the next change. Standing: stand until one move interval before
    // it (the first move of a start is reached one interval after the walker set off).
    let start = if a.v == [0.0; 3] {
        (a.tick as f64).max(b.tick as f64 - ramp_ticks)
    } else {
        a.tick as f64
    };
    if k <= start {
        return Some(a.p);
    }
    let u = ((k - start) / (b.tick as f64 - start)).clamp(0.0, 1.0);
    Some(std::array::from_fn(|j| a.p[j] + (b.p[j] - a.p[j]) * u))
}

/// What a frame stamped room tick `k` carries of an avatar: the last change at or before `k`,
/// carried forward along its velocity for at most the room's lead (100 ms, as the room core's
/// `encode::lead_pose` does).
pub(crate) fn held_at(path: &[TruePose], k: u64, hz: f64) -> Option<[f64; 3]> {
    let i = path.partition_point(|t| t.tick <= k);
    (i > 0).then(|| {
        let t = path[i - 1];
        let lead_s = ((k - t.tick) as f64 / hz).min(0.1);
        std::array::from_fn(|j| t.p[j] + t.v[j] * lead_s)
    })
}

/// The broadcast path at tick `k` (fractional): what the frames the observer got carried (see
/// [`held_at`]), joined by straight lines (a step at a teleport).
pub(crate) fn broadcast_at(path: &[TruePose], frames: &[u64], k: f64, hz: f64) -> Option<[f64; 3]> {
    let i = frames.partition_point(|&t| (t as f64) <= k);
    if i == 0 {
        return None;
    }
    let a_t = frames[i - 1];
    let a = held_at(path, a_t, hz)?;
    let Some(&b_t) = frames.get(i) else {
        return Some(a);
    };
    let b = held_at(path, b_t, hz)?;
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

/// Distance from a rest position within which a path counts as at rest (start / stop lag).
pub(crate) const REST_EPS_M: f64 = 0.02;

/// A rest of the true path: the walker declared zero velocity at `p`, from room tick `from`
/// until the next recorded change at tick `until`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Rest {
    pub(crate) p: [f64; 3],
    pub(crate) from: u64,
    pub(crate) until: u64,
}

/// The rests of at least `min_s` seconds: a record with zero velocity (the walker stood) and
/// no change until the next record, which is not a teleport.
pub(crate) fn rests(path: &[TruePose], hz: f64, min_s: f64) -> Vec<Rest> {
    path.windows(2)
        .filter(|w| w[0].v == [0.0; 3] && dist(w[0].p, w[1].p) <= TELEPORT_M)
        .filter(|w| (w[1].tick - w[0].tick) as f64 / hz >= min_s)
        .map(|w| Rest {
            p: w[0].p,
            from: w[0].tick,
            until: w[1].tick,
        })
        .collect()
}

/// How far past a rest position a path may wobble and still count as stopped: an overshoot of
/// a few centimetres that comes back is part of stopping, a pass-through at walking speed is
/// not (it leaves this radius within a frame or two).
pub(crate) const STOP_WOBBLE_M: f64 = 0.10;

/// When a sampled path `(time, position)` stops at `p`: the first sample in `[from, to]` within
/// [`REST_EPS_M`] of `p` from which the path stays within [`STOP_WOBBLE_M`] for `hold` seconds
/// (None if it never does).
pub(crate) fn settles(
    path: &[(f64, [f64; 3])],
    p: [f64; 3],
    from: f64,
    to: f64,
    hold: f64,
) -> Option<f64> {
    let start = path.partition_point(|s| s.0 < from);
    let mut candidate: Option<f64> = None;
    for s in &path[start..] {
        let d = dist(s.1, p);
        if d > STOP_WOBBLE_M {
            candidate = None;
        } else if candidate.is_none() && d <= REST_EPS_M {
            candidate = Some(s.0);
        }
        match candidate {
            Some(c) if c > to => return None,
            Some(c) if s.0 - c >= hold => return Some(c),
            None if s.0 > to => return None,
            _ => {}
        }
    }
    None
}

/// When a sampled path starts away from `p` in `[from, to]`: the first sample beyond
/// [`REST_EPS_M`] from which it goes on past [`STOP_WOBBLE_M`] without coming back within
/// [`REST_EPS_M`] (a wobble of a stop that comes back is not a start).
pub(crate) fn departs(path: &[(f64, [f64; 3])], p: [f64; 3], from: f64, to: f64) -> Option<f64> {
    let start = path.partition_point(|s| s.0 < from);
    let mut candidate: Option<f64> = None;
    for s in &path[start..] {
        let d = dist(s.1, p);
        if d <= REST_EPS_M {
            candidate = None;
        } else if candidate.is_none() {
            if s.0 > to {
                return None;
            }
            candidate = Some(s.0);
        }
        if d > STOP_WOBBLE_M {
            return candidate;
        }
    }
    None
}

/// The true path sampled every millisecond over `[from, to]` (seconds on the room clock).
fn sample_truth(path: &[TruePose], hz: f64, ramp: f64, from: f64, to: f64) -> Vec<(f64, [f64; 3])> {
    let n = ((to - from) * 1000.0).max(0.0) as usize;
    (0..=n)
        .filter_map(|i| {
            let t = from + i as f64 / 1000.0;
            truth_at(path, t * hz, ramp).map(|p| (t, p))
        })
        .collect()
}

/// Stop and start lags (ms, rendered minus true) around each rest of at least 0.5 s: the true
/// path and the rendered one cross the same [`REST_EPS_M`] boundary around the rest position,
/// inward (stop) and outward (start). `offset` puts room time on the observer's clock. Returns
/// the lags and how many crossings the rendered path never made within 2 s.
pub(crate) fn rest_lags(
    path: &[TruePose],
    shown: &[(f64, [f64; 3])],
    hz: f64,
    ramp: f64,
    offset: f64,
    keep: impl Fn(f64) -> bool,
) -> (Vec<(f64, bool, f64)>, u64) {
    let mut lags = Vec::new();
    let mut unmatched = 0;
    for r in rests(path, hz, 0.5) {
        let (from, until) = (r.from as f64 / hz, r.until as f64 / hz);
        let hold = ((until - from) / 2.0).min(0.2);
        let truth = sample_truth(path, hz, ramp, from - 0.5, until + 2.0);
        let stop = settles(&truth, r.p, from - 0.5, from + 0.001, hold);
        let start = departs(&truth, r.p, until - (ramp + 1.0) / hz, until + 2.0);
        let mut rendered_stop = None;
        if let Some(t) = stop {
            let t = t + offset;
            if keep(t) {
                rendered_stop = settles(shown, r.p, t - 0.5, t + 2.0, hold);
                match rendered_stop {
                    Some(x) => lags.push((t, false, (x - t) * 1000.0)),
                    None => unmatched += 1,
                }
            }
        }
        if let Some(t) = start {
            let t = t + offset;
            if keep(t) {
                let after = rendered_stop.map_or(t - 0.5, |x| x.max(t - 0.5));
                match departs(shown, r.p, after, t + 2.0) {
                    Some(x) => lags.push((t, true, (x - t) * 1000.0)),
                    None => unmatched += 1,
                }
            }
        }
    }
    (lags, unmatched)
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
    /// Each start / stop lag minus the interpolation delay the smoother declared when the
    /// rendered path crossed, ms: what the replica adds beyond the delay it declares.
    pub(crate) lags_beyond_delay_ms: Vec<f64>,
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
    // the broadcast path, x, z, extrapolating 0/1, declared delay ms, the smoother's interval
    // and link envelope beyond the fastest delivery, ms, tier), for looking into a run;
    // FELT_FRAMES=path: every frame's (arrival, tick); FELT_LAGS=1 prints each start / stop lag
    // to stderr.
    let mut dump = std::env::var_os("FELT_DUMP").and_then(|p| std::fs::File::create(p).ok());
    if let Some(p) = std::env::var_os("FELT_FRAMES") {
        let text: String = log
            .frames
            .iter()
            .map(|(l, t)| format!("{l},{t}\n"))
            .collect();
        let _ = std::fs::write(p, text);
    }
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
            if let Some(t) = broadcast_at(path, &frames, s.render_t * hz, hz) {
                m.broadcast_errors.push(dist(s.position, t));
                if let Some(d) = dump.as_mut() {
                    use std::io::Write as _;
                    let e = m.errors.last().map_or(0.0, |e| e.1);
                    let _ = writeln!(
                        d,
                        "{},{},{},{},{},{},{},{},{:.1},{:.1},{:.1},{}",
                        s.local_s,
                        entity,
                        s.render_t,
                        e,
                        dist(s.position, t),
                        s.position[0],
                        s.position[2],
                        u8::from(s.extrapolating),
                        (s.local_s - offset - s.render_t) * 1000.0,
                        s.interval_s * 1000.0,
                        (s.link_s - offset) * 1000.0,
                        s.tier,
                    );
                }
            }
        }
        // Start / stop lag.
        let first_local = shown.first().map_or(0.0, |s| s.local_s);
        let last_local = shown.last().map_or(0.0, |s| s.local_s);
        let shown_path: Vec<(f64, [f64; 3])> =
            shown.iter().map(|s| (s.local_s, s.position)).collect();
        let keep =
            |t: f64| t >= first_local + 1.0 && t <= last_local - 2.5 && !near_tp(t - offset, 1.0);
        let (lags, unmatched) = rest_lags(path, &shown_path, hz, ramp, offset, keep);
        for (t, start, lag) in lags {
            // The declared delay when the rendered path crossed.
            let crossed = t + lag / 1000.0;
            let i = shown
                .partition_point(|s| s.local_s < crossed)
                .min(shown.len() - 1);
            let delay_ms = (shown[i].local_s - offset - shown[i].render_t) * 1000.0;
            if std::env::var_os("FELT_LAGS").is_some() {
                eprintln!(
                    "lag entity={entity} t={t:.3} start={start} lag_ms={lag:.0} delay_ms={delay_ms:.0} tier={}",
                    shown[i].tier
                );
            }
            m.lags_ms.push(lag);
            m.lags_beyond_delay_ms.push(lag - delay_ms);
        }
        m.lag_unmatched += unmatched;
    }
    m
}
