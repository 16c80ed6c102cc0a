//! A bot's body: random walk inside the room bounds, alternating with idle pauses, sans I/O.
//!
//! [`Walker::step`] advances the pose to `now` (straight lines towards random waypoints at a
//! speed ≤ [`MAX_SPEED`]) and [`Walker::changed_since`] applies the seed's change thresholds
//! (1 mm position, 1 cm/s velocity, 0.1° yaw) against the last sent pose. It reads no clock and
//! sends nothing.

use std::time::{Duration, Instant};

use rand::Rng;

use crate::scenario::{BotKind, BotMix};

/// The fastest a bot walks, m/s (below the server's speed check).
pub const MAX_SPEED: f32 = 4.0;
/// Keep waypoints this far inside the bounds.
const MARGIN: f32 = 1.0;

/// The pose a bot sends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pose {
    /// Position in metres.
    pub position: [f32; 3],
    /// Velocity in m/s.
    pub velocity: [f32; 3],
    /// Yaw in degrees.
    pub yaw_deg: f32,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    /// Walking towards the target; `until` ends the walk phase (None: walk forever).
    Walking { until: Option<Instant> },
    /// Standing; `until` ends the pause (None: stand forever).
    Idle { until: Option<Instant> },
}

/// A random-walking body.
#[derive(Clone, Debug)]
pub struct Walker {
    pose: Pose,
    target: [f32; 2],
    speed: f32,
    mode: Mode,
    half_extent: f32,
    last_step: Instant,
}

impl Walker {
    /// A body at a random point of the room, walking unless `mix` is an idler.
    pub fn new(mix: &BotMix, half_extent: f32, now: Instant, rng: &mut impl Rng) -> Self {
        let h = (half_extent - MARGIN).max(0.5);
        let position = [rng.random_range(-h..=h), 0.0, rng.random_range(-h..=h)];
        let mut w = Self {
            pose: Pose {
                position,
                velocity: [0.0; 3],
                yaw_deg: 0.0,
            },
            target: [position[0], position[2]],
            speed: 0.0,
            mode: Mode::Idle { until: None },
            half_extent,
            last_step: now,
        };
        if mix.kind != BotKind::Idler {
            w.start_walk(mix, now, rng);
        }
        w
    }

    /// The current pose.
    pub fn pose(&self) -> Pose {
        self.pose
    }

    /// Whether the body is walking now.
    pub fn is_walking(&self) -> bool {
        matches!(self.mode, Mode::Walking { .. })
    }

    /// Adopts an authoritative position (spawn or correction); clamps x and z to the bounds.
    pub fn teleport(&mut self, position: [f32; 3]) {
        let h = self.half_extent;
        let clamp = |v: f32| if v.is_finite() { v.clamp(-h, h) } else { 0.0 };
        self.pose.position = [
            clamp(position[0]),
            if position[1].is_finite() {
                position[1]
            } else {
                0.0
            },
            clamp(position[2]),
        ];
        self.target = [self.pose.position[0], self.pose.position[2]];
    }

    /// Walks towards `target` (x, z) from now on, at the current speed (or 1.5 m/s when
    /// standing), until it is reached; then the random walk goes on.
    pub fn head_to(&mut self, target: [f32; 2]) {
        let h = (self.half_extent - MARGIN).max(0.5);
        self.target = [target[0].clamp(-h, h), target[1].clamp(-h, h)];
        if !self.is_walking() {
            self.mode = Mode::Walking { until: None };
        }
        if self.speed < 0.1 {
            self.speed = 1.5;
        }
    }

    fn start_walk(&mut self, mix: &BotMix, now: Instant, rng: &mut impl Rng) {
        let until = mix
            .walk_s
            .map(|r| now + Duration::from_secs_f64(r.sample(rng)));
        self.mode = Mode::Walking { until };
        self.speed = (mix.speed_mps.sample(rng) as f32).clamp(0.1, MAX_SPEED);
        self.pick_target(rng);
    }

    fn pick_target(&mut self, rng: &mut impl Rng) {
        let h = (self.half_extent - MARGIN).max(0.5);
        self.target = [rng.random_range(-h..=h), rng.random_range(-h..=h)];
    }

    /// Advances the body to `now`.
    pub fn step(&mut self, mix: &BotMix, now: Instant, rng: &mut impl Rng) {
        let dt = now.saturating_duration_since(self.last_step).as_secs_f32();
        self.last_step = now;
        match self.mode {
            Mode::Idle { until } => {
                self.pose.velocity = [0.0; 3];
                if until.is_some_and(|u| now >= u) {
                    self.start_walk(mix, now, rng);
                }
            }
            Mode::Walking { until } => {
                if until.is_some_and(|u| now >= u) {
                    let pause = mix
                        .idle_range()
                        .map(|r| now + Duration::from_secs_f64(r.sample(rng)));
                    self.mode = Mode::Idle { until: pause };
                    self.pose.velocity = [0.0; 3];
                    return;
                }
                let [x, _, z] = self.pose.position;
                let (dx, dz) = (self.target[0] - x, self.target[1] - z);
                let dist = (dx * dx + dz * dz).sqrt();
                let reach = self.speed * dt;
                if dist <= reach || dist < 1e-3 {
                    self.pose.position[0] = self.target[0];
                    self.pose.position[2] = self.target[1];
                    self.pick_target(rng);
                } else {
                    self.pose.position[0] += dx / dist * reach;
                    self.pose.position[2] += dz / dist * reach;
                }
                let [x2, _, z2] = self.pose.position;
                let (tx, tz) = (self.target[0] - x2, self.target[1] - z2);
                let d = (tx * tx + tz * tz).sqrt().max(1e-6);
                self.pose.velocity = [tx / d * self.speed, 0.0, tz / d * self.speed];
                self.pose.yaw_deg = tx.atan2(tz).to_degrees();
            }
        }
    }

    /// The seed's change detection against the last sent pose.
    pub fn changed_since(&self, sent: &Pose) -> bool {
        let d2 = |a: [f32; 3], b: [f32; 3]| {
            (a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2) + (a[2] - b[2]).powi(2)
        };
        d2(self.pose.position, sent.position) > 1e-6
            || d2(self.pose.velocity, sent.velocity) > 1e-4
            || (self.pose.yaw_deg - sent.yaw_deg).abs() > 0.1
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    use super::*;
    use crate::scenario::Range;

    #[test]
    fn walker_stays_in_bounds_and_under_speed() {
        let mut rng = SmallRng::seed_from_u64(1);
        let mix = BotMix::of(BotKind::Walker);
        let t0 = Instant::now();
        let mut w = Walker::new(&mix, 10.0, t0, &mut rng);
        let mut prev = w.pose();
        for i in 1..=2000u64 {
            w.step(&mix, t0 + Duration::from_millis(i * 100), &mut rng);
            let p = w.pose();
            assert!(
                p.position[0].abs() <= 10.0 && p.position[2].abs() <= 10.0,
                "{p:?}"
            );
            let dx = p.position[0] - prev.position[0];
            let dz = p.position[2] - prev.position[2];
            assert!((dx * dx + dz * dz).sqrt() <= MAX_SPEED * 0.1 + 1e-4);
            assert!(w.changed_since(&prev));
            prev = p;
        }
    }

    #[test]
    fn alternates_walking_and_idling() {
        let mut rng = SmallRng::seed_from_u64(2);
        let mut mix = BotMix::of(BotKind::Walker);
        mix.walk_s = Some(Range::new(1.0, 1.0));
        mix.idle_s = Some(Range::new(2.0, 2.0));
        let t0 = Instant::now();
        let mut w = Walker::new(&mix, 60.0, t0, &mut rng);
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        w.step(&mix, at(500), &mut rng);
        assert!(w.is_walking());
        w.step(&mix, at(1000), &mut rng);
        assert!(!w.is_walking());
        let still = w.pose();
        w.step(&mix, at(2000), &mut rng);
        assert!(!w.changed_since(&still));
        w.step(&mix, at(3000), &mut rng);
        assert!(w.is_walking());
    }

    #[test]
    fn idler_never_moves_and_teleport_clamps() {
        let mut rng = SmallRng::seed_from_u64(3);
        let mix = BotMix::of(BotKind::Idler);
        let t0 = Instant::now();
        let mut w = Walker::new(&mix, 60.0, t0, &mut rng);
        let p = w.pose();
        w.step(&mix, t0 + Duration::from_secs(10), &mut rng);
        assert!(!w.changed_since(&p));
        w.teleport([100.0, 0.5, f32::NAN]);
        assert_eq!(w.pose().position, [60.0, 0.5, 0.0]);
    }
}
