//! Tunables of a room's physics and of movement validation, with the seed's defaults
//! (50 Hz step, 12 m/s speed limit, capsule 0.9 m half-height / 0.25 m radius).
//!
//! Plain data only; nothing here reads files or the environment (the ops crate maps its
//! configuration onto this struct).

use serde::{Deserialize, Serialize};

/// Physics and anti-cheat parameters of one room.
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize)]
#[serde(default)]
pub struct PhysicsConfig {
    /// Fixed simulation step in seconds (default 1/50). Never derived from wall time.
    pub step_dt: f32,
    /// Speed limit (m/s) for movement kinds outside `speed_by_kind` (default 12).
    pub max_speed_mps: f32,
    /// Speed limit per movement kind, indexed by `MoveClaim::movement_kind`
    /// (seed kinds: 0 idle, 1 walk, 2 jog, 3 run). Default 12 m/s each.
    pub speed_by_kind: [f32; 4],
    /// Distance slack (metres) added to `speed × dt` before a move counts as too fast; also how
    /// close an instant placement must be to the spawn/teleport position (default 0.25).
    pub tolerance_m: f32,
    /// Slack (m/s) on the claimed velocity's magnitude above the kind's limit (default 1.0).
    pub velocity_tolerance_mps: f32,
    /// Longest time one move may claim for the speed check (seconds, default 1.0). A larger
    /// claimed `dt_s` (an idle client) is clamped to this, so no single move covers more than
    /// `limit × max_move_dt_s + tolerance_m`; farther jumps are [`crate::RejectReason::Teleport`].
    pub max_move_dt_s: f32,
    /// How far (ms) a client's claimed clock may run ahead of the server's before moves are
    /// flagged `clock_flagged` (default 500).
    pub max_clock_lead_ms: u64,
    /// Hard bound (ms) on the clock lead: beyond it moves are rejected with
    /// [`crate::RejectReason::Clock`] (default 2000). A burst of moves delivered together after
    /// a network stall also builds a lead (up to the stall minus `max_clock_lag_ms`), so stalls
    /// longer than about `clock_reject_lead_ms + max_clock_lag_ms` (2.5 s) get the tail of their
    /// burst corrected; a 2x speed hack is flagged after ~1 s and refused after ~4 s.
    pub clock_reject_lead_ms: u64,
    /// How far (ms) a client's clock may lag (idle credit) before the lag stops counting; this
    /// bounds the time a client can "bank" and spend later at double speed (default 500).
    pub max_clock_lag_ms: u64,
    /// Fraction of server time by which a positive clock lead decays (default 0.05): a client's
    /// clock may run up to 5 % fast without ever being flagged, and the lead built by a burst
    /// after a network stall drains again (1 s of lead in 20 s).
    pub clock_drift_allowance: f32,
    /// A resolved position farther than this (metres) from the claim is reported `blocked`
    /// (default 0.02).
    pub blocked_epsilon_m: f32,
    /// When geometry leaves the avatar more than this (metres) from its claim, the move is
    /// rejected with [`crate::RejectReason::Blocked`] (the avatar still moves up to the obstacle;
    /// default 1.0).
    pub blocked_reject_m: f32,
    /// Anti-fly rule: an avatar whose feet are more than this (metres) above the geometry
    /// below it must be falling, at least `min_fall_speed_mps`; otherwise the move is rejected
    /// with [`crate::RejectReason::Airborne`]. Covers jumps (and double jumps) up to this height.
    /// `None` (or `0` in a configuration file) allows flying (default `Some(3.0)`).
    pub max_height_above_ground_m: Option<f32>,
    /// How fast (m/s) an avatar above `max_height_above_ground_m` must at least descend
    /// (default 2.0; free fall is far faster).
    pub min_fall_speed_mps: f32,
    /// Avatar capsule half-height of the cylindrical part (default 0.9).
    pub capsule_half_height: f32,
    /// Avatar capsule radius (default 0.25).
    pub capsule_radius: f32,
    /// Steps up to this height (metres) are climbed automatically (default 0.3; 0 disables).
    pub autostep_height_m: f32,
    /// Steepest slope (degrees) an avatar can walk up (default 45).
    pub max_slope_deg: f32,
    /// Where a held prop sits relative to its holder's feet position (default `[0, 1.2, 0.5]`:
    /// chest height, clear of the 0.25 m capsule; the room core may re-place it on release).
    pub hold_offset: [f32; 3],
    /// Fastest throw (m/s); faster throws are scaled down to it (default 20).
    pub max_throw_speed_mps: f32,
}

impl Default for PhysicsConfig {
    fn default() -> Self {
        Self {
            step_dt: 1.0 / 50.0,
            max_speed_mps: 12.0,
            speed_by_kind: [12.0; 4],
            tolerance_m: 0.25,
            velocity_tolerance_mps: 1.0,
            max_move_dt_s: 1.0,
            max_clock_lead_ms: 500,
            clock_reject_lead_ms: 2000,
            max_clock_lag_ms: 500,
            clock_drift_allowance: 0.05,
            blocked_epsilon_m: 0.02,
            blocked_reject_m: 1.0,
            max_height_above_ground_m: Some(3.0),
            min_fall_speed_mps: 2.0,
            capsule_half_height: 0.9,
            capsule_radius: 0.25,
            autostep_height_m: 0.3,
            max_slope_deg: 45.0,
            hold_offset: [0.0, 1.2, 0.5],
            max_throw_speed_mps: 20.0,
        }
    }
}

impl PhysicsConfig {
    /// The speed limit for a movement kind.
    pub fn speed_limit(&self, movement_kind: u8) -> f32 {
        self.speed_by_kind
            .get(usize::from(movement_kind))
            .copied()
            .unwrap_or(self.max_speed_mps)
    }

    /// Replaces nonsensical values (non-finite, non-positive) by the defaults, so a bad
    /// configuration cannot make every move pass or fail.
    pub fn sanitized(mut self) -> Self {
        let d = Self::default();
        let fix = |v: &mut f32, dv: f32| {
            if !v.is_finite() || *v <= 0.0 {
                *v = dv;
            }
        };
        fix(&mut self.step_dt, d.step_dt);
        fix(&mut self.max_speed_mps, d.max_speed_mps);
        for (v, dv) in self.speed_by_kind.iter_mut().zip(d.speed_by_kind) {
            fix(v, dv);
        }
        fix(&mut self.tolerance_m, d.tolerance_m);
        fix(&mut self.velocity_tolerance_mps, d.velocity_tolerance_mps);
        fix(&mut self.max_move_dt_s, d.max_move_dt_s);
        if !self.clock_drift_allowance.is_finite()
            || !(0.0..=1.0).contains(&self.clock_drift_allowance)
        {
            self.clock_drift_allowance = d.clock_drift_allowance;
        }
        fix(&mut self.blocked_epsilon_m, d.blocked_epsilon_m);
        fix(&mut self.blocked_reject_m, d.blocked_reject_m);
        fix(&mut self.min_fall_speed_mps, d.min_fall_speed_mps);
        self.max_height_above_ground_m = match self.max_height_above_ground_m {
            // TOML has no null: 0 (or less) is how a file turns the rule off.
            Some(h) if h.is_finite() && h <= 0.0 => None,
            Some(h) if !h.is_finite() => d.max_height_above_ground_m,
            other => other,
        };
        fix(&mut self.capsule_half_height, d.capsule_half_height);
        fix(&mut self.capsule_radius, d.capsule_radius);
        fix(&mut self.max_slope_deg, d.max_slope_deg);
        fix(&mut self.max_throw_speed_mps, d.max_throw_speed_mps);
        if !self.autostep_height_m.is_finite() || self.autostep_height_m < 0.0 {
            self.autostep_height_m = d.autostep_height_m;
        }
        if !self.hold_offset.iter().all(|x| x.is_finite()) {
            self.hold_offset = d.hold_offset;
        }
        self.clock_reject_lead_ms = self.clock_reject_lead_ms.max(self.max_clock_lead_ms);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_replaces_nonsense_and_zero_height_disables_the_fly_rule() {
        let cfg = PhysicsConfig {
            step_dt: f32::NAN,
            max_speed_mps: -1.0,
            speed_by_kind: [0.0, 5.0, f32::INFINITY, 12.0],
            max_height_above_ground_m: Some(0.0),
            clock_reject_lead_ms: 10,
            clock_drift_allowance: 7.0,
            ..PhysicsConfig::default()
        }
        .sanitized();
        let d = PhysicsConfig::default();
        assert_eq!(cfg.step_dt, d.step_dt);
        assert_eq!(cfg.max_speed_mps, d.max_speed_mps);
        assert_eq!(cfg.speed_by_kind, [12.0, 5.0, 12.0, 12.0]);
        assert_eq!(cfg.max_height_above_ground_m, None);
        assert_eq!(cfg.clock_reject_lead_ms, cfg.max_clock_lead_ms);
        assert_eq!(cfg.clock_drift_allowance, d.clock_drift_allowance);
        assert_eq!(cfg.speed_limit(1), 5.0);
        assert_eq!(cfg.speed_limit(200), cfg.max_speed_mps);
    }

    #[test]
    fn config_reads_from_toml_with_defaults_for_missing_keys() {
        let cfg: PhysicsConfig =
            toml::from_str("max_speed_mps = 8.0\nmax_height_above_ground_m = 0.0\n").unwrap();
        assert_eq!(cfg.max_speed_mps, 8.0);
        assert_eq!(cfg.step_dt, 1.0 / 50.0);
        assert_eq!(cfg.sanitized().max_height_above_ground_m, None);
    }
}
