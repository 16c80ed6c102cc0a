//! Movement claims, their outcomes and typed rejections, plus the pure checks behind them
//! (finite values, time step, speed, teleport jumps, client clock lead).
//!
//! Geometry (walls, floors) is not checked here: [`crate::RoomPhysics::validate_and_move`]
//! runs these checks first and then moves the capsule with the character controller.

use crate::config::PhysicsConfig;

/// A client's claimed move (decoded from its movement message).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoveClaim {
    /// Claimed feet position (metres).
    pub position: [f32; 3],
    /// Claimed velocity (m/s), used by other clients for extrapolation.
    pub velocity: [f32; 3],
    /// The client's claimed time since its previous move (seconds).
    pub dt_s: f32,
    /// The client's clock when it sent the move (informational; the clock check uses `dt_s`).
    pub client_time_ms: u64,
    /// Seed movement kind (0 idle, 1 walk, 2 jog, 3 run); selects the speed limit.
    pub movement_kind: u8,
    /// The client asks for a snap rather than a walk (first message, acknowledging a teleport).
    pub is_instant: bool,
}

/// An accepted move.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoveOutcome {
    /// Where the avatar is now (authoritative feet position).
    pub position: [f32; 3],
    /// Static geometry stopped part of the move: `position` differs from the claim, so the
    /// client should get a correction.
    pub blocked: bool,
    /// The client's clock runs ahead of the server's by more than `max_clock_lead_ms`
    /// (a likely speed hack); the move was still accepted.
    pub clock_flagged: bool,
}

/// Why a move (or a prop placement) was refused. The one definition: the room core re-exports
/// it as the reason of a correction, and `plaza.v1.RejectReason` is its wire form.
#[derive(thiserror::Error, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// The move implies more than the speed limit (or the claimed velocity exceeds it).
    #[error("too fast")]
    Speed,
    /// A NaN or infinite value in the claim.
    #[error("non-finite value")]
    NonFinite,
    /// `dt_s` is zero or negative.
    #[error("non-positive time step")]
    NonPositiveDt,
    /// The claimed position is outside the room bounds.
    #[error("outside the room")]
    OutOfBounds,
    /// A jump farther than any single move may cover, without a server-issued teleport.
    #[error("teleport without server permission")]
    Teleport,
    /// Static geometry stopped the move far from the claim (or a prop cannot be put there).
    #[error("blocked by geometry")]
    Blocked,
    /// The client's clock runs ahead of the server's beyond the hard bound.
    #[error("client clock runs too fast")]
    Clock,
    /// The avatar or prop is not in this room's physics world.
    #[error("unknown entity")]
    UnknownEntity,
    /// Higher above the ground than a jump reaches and not falling (fly hack).
    #[error("airborne without falling")]
    Airborne,
}

impl RejectReason {
    /// Stable lowercase label for metrics and protocol reason codes.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Speed => "speed",
            Self::NonFinite => "non_finite",
            Self::NonPositiveDt => "non_positive_dt",
            Self::OutOfBounds => "out_of_bounds",
            Self::Teleport => "teleport",
            Self::Blocked => "blocked",
            Self::Clock => "clock",
            Self::UnknownEntity => "unknown_entity",
            Self::Airborne => "airborne",
        }
    }

    /// Every reason, in metric-label order (the room's rejection counters are indexed by it).
    pub const ALL: [Self; 9] = [
        Self::Speed,
        Self::NonFinite,
        Self::NonPositiveDt,
        Self::OutOfBounds,
        Self::Teleport,
        Self::Blocked,
        Self::Clock,
        Self::Airborne,
        Self::UnknownEntity,
    ];
}

/// A refused move: why, and the authoritative position the client must snap to (its correction).
#[derive(thiserror::Error, Debug, Clone, Copy, PartialEq)]
#[error("move rejected: {reason}")]
pub struct MoveRejection {
    /// Why.
    pub reason: RejectReason,
    /// The authoritative position (feet position for avatars, centre for props).
    pub authoritative: [f32; 3],
}

/// What the clock tracker says about one move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClockVerdict {
    /// Within bounds.
    Ok,
    /// Ahead by more than `max_clock_lead_ms`.
    Flagged,
    /// Ahead by more than `clock_reject_lead_ms`: reject the move.
    Reject,
}

/// Tracks how far a client's claimed clock (the sum of its `dt_s`) runs ahead of the server's
/// clock, as a leaky bucket: idle lag is credited only up to `max_clock_lag_ms`, so time cannot
/// be banked and spent later.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ClockTracker {
    /// Server time of the previous observed move; `None` before the first move.
    last_server_ms: Option<u64>,
    /// Claimed minus server elapsed time (ms); positive means the client runs fast.
    lead_ms: i64,
}

impl ClockTracker {
    /// Accounts one move claiming `dt_s` seconds, received at server time `now_ms`.
    /// A rejected move's claimed time is not added, so an honest follow-up is not punished.
    pub(crate) fn observe(&mut self, dt_s: f32, now_ms: u64, cfg: &PhysicsConfig) -> ClockVerdict {
        let Some(last) = self.last_server_ms else {
            // First move: it only sets the baseline (its dt covers time before we knew it).
            self.last_server_ms = Some(now_ms);
            return ClockVerdict::Ok;
        };
        // A server clock that steps back counts as no elapsed time.
        let server_delta = i64::try_from(now_ms.saturating_sub(last)).unwrap_or(i64::MAX);
        self.last_server_ms = Some(now_ms.max(last));
        // dt_s is finite and positive here (checked before); cap it to keep the sum bounded.
        let claimed_ms = (f64::from(dt_s) * 1000.0).round().min(1.0e12) as i64;
        let floor = -i64::try_from(cfg.max_clock_lag_ms).unwrap_or(i64::MAX);
        // A positive lead decays by the drift allowance (never below zero by that decay).
        let decay = if self.lead_ms > 0 {
            let d = (server_delta as f64 * f64::from(cfg.clock_drift_allowance)) as i64;
            d.min(self.lead_ms)
        } else {
            0
        };
        let drained = self
            .lead_ms
            .saturating_sub(server_delta)
            .saturating_sub(decay);
        let lead = drained.saturating_add(claimed_ms).max(floor);
        if lead > i64::try_from(cfg.clock_reject_lead_ms).unwrap_or(i64::MAX) {
            // The refused move's time is not counted; the server's elapsed time still is.
            self.lead_ms = drained.max(floor);
            return ClockVerdict::Reject;
        }
        self.lead_ms = lead;
        if lead > i64::try_from(cfg.max_clock_lead_ms).unwrap_or(i64::MAX) {
            ClockVerdict::Flagged
        } else {
            ClockVerdict::Ok
        }
    }

    /// Current lead in milliseconds (positive: client ahead).
    pub(crate) fn lead_ms(&self) -> i64 {
        self.lead_ms
    }
}

/// Whether a refused move's time step still counts: the caller advances its reference time to
/// the refused move's timestamp and the clock tracker keeps what it observed.
///
/// Only a step that could be real counts: finite, positive, at most `max_move_dt_s`, and past
/// the clock check (so not [`RejectReason::NonFinite`], [`RejectReason::NonPositiveDt`] or
/// [`RejectReason::UnknownEntity`]). Then the step is not claimed twice by the next move (the
/// tail of an honest burst after a stall is refused [`RejectReason::Clock`] and forgiven).
/// Any other refused move leaves no trace: a timestamp far ahead (`+5 s`, `+1e9 s`) does not
/// become the reference, so the client's next honest move is judged against its last
/// accepted one.
pub fn refused_step_counts(reason: RejectReason, dt_s: f32, cfg: &PhysicsConfig) -> bool {
    let before_clock = matches!(
        reason,
        RejectReason::NonFinite | RejectReason::NonPositiveDt | RejectReason::UnknownEntity
    );
    !before_clock && dt_s.is_finite() && dt_s > 0.0 && dt_s <= cfg.max_move_dt_s
}

/// Whether every number of the claim is finite.
pub(crate) fn claim_is_finite(c: &MoveClaim) -> bool {
    c.position
        .iter()
        .chain(c.velocity.iter())
        .all(|v| v.is_finite())
        && c.dt_s.is_finite()
}

/// Euclidean length of a 3-vector.
pub(crate) fn length(v: [f32; 3]) -> f32 {
    (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt()
}

/// Distance between two points.
pub(crate) fn distance(a: [f32; 3], b: [f32; 3]) -> f32 {
    length([a[0] - b[0], a[1] - b[1], a[2] - b[2]])
}

/// Speed/teleport check of a displacement of `dist` metres claimed over `dt_s` seconds.
pub(crate) fn check_displacement(
    dist: f32,
    dt_s: f32,
    limit_mps: f32,
    cfg: &PhysicsConfig,
) -> Result<(), RejectReason> {
    let dt = dt_s.min(cfg.max_move_dt_s);
    let allowed = limit_mps * dt + cfg.tolerance_m;
    if dist <= allowed {
        return Ok(());
    }
    let farthest_any_move = limit_mps * cfg.max_move_dt_s + cfg.tolerance_m;
    if dist > farthest_any_move {
        Err(RejectReason::Teleport)
    } else {
        Err(RejectReason::Speed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_stable_and_unique() {
        let codes: std::collections::BTreeSet<_> =
            RejectReason::ALL.iter().map(|r| r.code()).collect();
        assert_eq!(codes.len(), RejectReason::ALL.len());
        assert_eq!(RejectReason::Speed.code(), "speed");
        assert_eq!(RejectReason::NonFinite.code(), "non_finite");
        assert_eq!(RejectReason::NonPositiveDt.code(), "non_positive_dt");
        assert_eq!(RejectReason::OutOfBounds.code(), "out_of_bounds");
        assert_eq!(RejectReason::Teleport.code(), "teleport");
        assert_eq!(RejectReason::Blocked.code(), "blocked");
        assert_eq!(RejectReason::Clock.code(), "clock");
    }

    #[test]
    fn only_plausible_refused_steps_count() {
        let cfg = PhysicsConfig::default();
        assert!(refused_step_counts(RejectReason::Clock, 0.1, &cfg));
        assert!(refused_step_counts(RejectReason::Speed, 1.0, &cfg));
        assert!(!refused_step_counts(RejectReason::Clock, 5.0, &cfg));
        assert!(!refused_step_counts(RejectReason::Clock, 1.0e9, &cfg));
        assert!(!refused_step_counts(
            RejectReason::Speed,
            f32::INFINITY,
            &cfg
        ));
        assert!(!refused_step_counts(RejectReason::NonFinite, 0.1, &cfg));
        assert!(!refused_step_counts(
            RejectReason::NonPositiveDt,
            -0.1,
            &cfg
        ));
        assert!(!refused_step_counts(RejectReason::Clock, f32::NAN, &cfg));
    }

    #[test]
    fn displacement_limits() {
        let cfg = PhysicsConfig::default();
        // 12 m/s for 0.1 s = 1.2 m + 0.25 tolerance.
        assert_eq!(check_displacement(1.4, 0.1, 12.0, &cfg), Ok(()));
        assert_eq!(
            check_displacement(2.4, 0.1, 12.0, &cfg),
            Err(RejectReason::Speed)
        );
        assert_eq!(
            check_displacement(50.0, 0.1, 12.0, &cfg),
            Err(RejectReason::Teleport)
        );
        // A huge claimed dt does not allow a huge jump.
        assert_eq!(
            check_displacement(50.0, 100.0, 12.0, &cfg),
            Err(RejectReason::Teleport)
        );
    }

    #[test]
    fn honest_clock_never_flags() {
        let cfg = PhysicsConfig::default();
        let mut c = ClockTracker::default();
        let mut now = 1_000_000;
        for i in 0..1000 {
            // Jitter: arrivals bunch up and spread out, claimed dt is the true 100 ms
            // (a client clock 3 % fast is within the drift allowance).
            let jitter = [0, 40, 0, 80, 10][i % 5];
            now += 97;
            assert_eq!(c.observe(0.1, now + jitter, &cfg), ClockVerdict::Ok);
        }
        assert!(c.lead_ms() < 200, "{}", c.lead_ms());
        // Idle for a minute, then resume: no flag, and no banked credit beyond the lag cap.
        now += 60_000;
        assert_eq!(c.observe(60.0, now, &cfg), ClockVerdict::Ok);
        assert!(c.lead_ms().abs() <= 500);
    }

    #[test]
    fn fast_clock_is_flagged_then_rejected() {
        let cfg = PhysicsConfig::default();
        let mut c = ClockTracker::default();
        let mut now = 0;
        assert_eq!(c.observe(0.1, now, &cfg), ClockVerdict::Ok);
        let mut verdicts = Vec::new();
        for _ in 0..60 {
            // Client claims 100 ms per move but sends every 50 ms (2x speed hack).
            now += 50;
            verdicts.push(c.observe(0.1, now, &cfg));
        }
        // 2x: the lead grows by ~45 % of server time (50 % minus the 5 % drift allowance).
        let first_flag = verdicts.iter().position(|v| *v == ClockVerdict::Flagged);
        let first_reject = verdicts.iter().position(|v| *v == ClockVerdict::Reject);
        assert!(first_flag.is_some() && first_reject.is_some());
        assert!(first_flag < first_reject);
        // Once at the hard bound, the lead stops growing.
        assert!(c.lead_ms() <= 2000);
    }

    #[test]
    fn a_burst_after_a_short_stall_is_not_refused() {
        let cfg = PhysicsConfig::default();
        let mut c = ClockTracker::default();
        let mut now = 0;
        for _ in 0..20 {
            now += 100;
            assert_eq!(c.observe(0.1, now, &cfg), ClockVerdict::Ok);
        }
        // TCP stall of 2 s: 20 moves (sent every 100 ms) arrive at once.
        now += 2000;
        let verdicts: Vec<_> = (0..20).map(|_| c.observe(0.1, now, &cfg)).collect();
        assert!(!verdicts.contains(&ClockVerdict::Reject), "{verdicts:?}");
        let after_burst = c.lead_ms();
        assert!(after_burst > 1000, "{after_burst}");
        // Back to normal, the lead drains (5 % of server time): below the flag within 30 s.
        let mut flagged = 0;
        for _ in 0..300 {
            now += 100;
            if c.observe(0.1, now, &cfg) != ClockVerdict::Ok {
                flagged += 1;
            }
        }
        assert!(flagged < 300, "never recovered");
        assert!(c.lead_ms() <= 500, "{}", c.lead_ms());
    }

    #[test]
    fn banked_idle_time_is_capped() {
        let cfg = PhysicsConfig::default();
        let mut c = ClockTracker::default();
        c.observe(0.1, 0, &cfg);
        // Idle 10 s but claim only 0.1 s: the lag is capped at 500 ms of credit.
        c.observe(0.1, 10_000, &cfg);
        assert!(c.lead_ms() >= -500);
        // Then send every 50 ms claiming 100 ms: must flag within ~(500+500)/50 = 20 moves.
        let mut now = 10_000;
        let flagged = (0..30).any(|_| {
            now += 50;
            c.observe(0.1, now, &cfg) != ClockVerdict::Ok
        });
        assert!(flagged);
    }
}
