//! A bot's body: random walk inside the room bounds, alternating with idle pauses, sans I/O.
//!
//! Two walk models ([`WalkModel`], `plaza-load --walk`):
//! * `waypoint` (default): [`Walker::step`] advances the pose to `now` along straight lines
//!   towards random waypoints at a speed ≤ [`MAX_SPEED`], and [`Walker::changed_since`] applies
//!   the seed's change thresholds (1 mm position, 1 cm/s velocity, 0.1° yaw) against the last
//!   sent pose.
//! * `jitter`: the standard room benchmark's walk. Every step (one per 100 ms input) first
//!   moves the body with the velocity in effect since the last input, then drifts the heading
//!   uniformly by ±[`JITTER_HEADING_DRIFT`] rad and the speed by ±[`JITTER_SPEED_DRIFT`] m/s
//!   (0 to [`JITTER_MAX_SPEED`], capped below the room's limit: [`Walker::adopt_room`]), in a
//!   world of ±[`JITTER_HALF_WORLD_M`] m (clipped to the room's bounds) whose edges reflect the
//!   body. [`Walker::always_sends`] is true: the bot sends every input, no change threshold.
//!
//! It reads no clock and sends nothing.

use std::time::{Duration, Instant};

use rand::Rng;

use crate::scenario::{BotKind, BotMix};

/// The fastest a bot walks, m/s (below the server's speed check).
pub const MAX_SPEED: f32 = 4.0;
/// Keep waypoints this far inside the bounds.
const MARGIN: f32 = 1.0;
/// The jitter walk's fastest speed, m/s (the standard benchmark's 6 m/s).
pub const JITTER_MAX_SPEED: f32 = 6.0;
/// The jitter walk's speed stays below this fraction of the room's speed limit.
pub const JITTER_LIMIT_SHARE: f32 = 0.9;
/// Heading drift per input, ± radians (uniform).
pub const JITTER_HEADING_DRIFT: f32 = 0.3;
/// Speed drift per input, ± m/s (uniform).
pub const JITTER_SPEED_DRIFT: f32 = 0.5;
/// Half the jitter world's side: 200 m × 200 m around the origin.
pub const JITTER_HALF_WORLD_M: f32 = 100.0;
/// The jitter world stays this far inside the room's bounds (metres).
const JITTER_ROOM_MARGIN: f32 = 0.5;

/// How a bot walks (`plaza-load --walk`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WalkModel {
    /// Straight lines to random waypoints, sent when the pose changed (today's walker).
    #[default]
    Waypoint,
    /// The standard benchmark's jittery walk, sent at every input.
    Jitter,
}

impl WalkModel {
    /// The name `--walk` takes.
    pub fn name(self) -> &'static str {
        match self {
            Self::Waypoint => "waypoint",
            Self::Jitter => "jitter",
        }
    }
}

impl std::str::FromStr for WalkModel {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "waypoint" => Ok(Self::Waypoint),
            "jitter" => Ok(Self::Jitter),
            _ => Err(format!("unknown walk model {s:?} (waypoint or jitter)")),
        }
    }
}

/// The jitter walk's state.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Jitter {
    /// Heading, radians: the velocity is `speed × (sin, 0, cos)`.
    heading: f32,
    /// Fastest speed (m/s).
    max_speed: f32,
    /// The world's x / z extent the body reflects at: `[min_x, min_z]`, `[max_x, max_z]`.
    lo: [f32; 2],
    hi: [f32; 2],
}

/// Reflects `v` into `[lo, hi]`; true if it was reflected.
fn reflect(v: &mut f32, lo: f32, hi: f32) -> bool {
    let out = *v < lo || *v > hi;
    if *v > hi {
        *v = 2.0 * hi - *v;
    }
    if *v < lo {
        *v = 2.0 * lo - *v;
    }
    // A step longer than the world is wide: clamp what one reflection did not fix.
    *v = v.clamp(lo, hi);
    out
}

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
    /// Some: the jitter walk.
    jitter: Option<Jitter>,
}

impl Walker {
    /// A body at a random point of the room, walking unless `mix` is an idler, with the
    /// waypoint walk.
    pub fn new(mix: &BotMix, half_extent: f32, now: Instant, rng: &mut impl Rng) -> Self {
        Self::with_model(WalkModel::Waypoint, mix, half_extent, now, rng)
    }

    /// A body of walk `model`: the waypoint walk within ±`half_extent`, or the jitter walk in
    /// its 200 m world (`half_extent` unused; [`Walker::adopt_room`] clips it to the room).
    pub fn with_model(
        model: WalkModel,
        mix: &BotMix,
        half_extent: f32,
        now: Instant,
        rng: &mut impl Rng,
    ) -> Self {
        let jitter = (model == WalkModel::Jitter).then(|| Jitter {
            heading: rng.random_range(0.0..std::f32::consts::TAU),
            max_speed: JITTER_MAX_SPEED,
            lo: [-JITTER_HALF_WORLD_M; 2],
            hi: [JITTER_HALF_WORLD_M; 2],
        });
        let half_extent = if jitter.is_some() {
            JITTER_HALF_WORLD_M
        } else {
            half_extent
        };
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
            jitter,
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

    /// Whether the bot sends every input regardless of change (the jitter walk).
    pub fn always_sends(&self) -> bool {
        self.jitter.is_some()
    }

    /// The jitter walk's fastest speed, world minimum and maximum corner (x, z); None for the
    /// waypoint walk.
    pub fn jitter_world(&self) -> Option<(f32, [f32; 2], [f32; 2])> {
        self.jitter.map(|j| (j.max_speed, j.lo, j.hi))
    }

    /// Fits the jitter walk to the room a join described: speed at most
    /// [`JITTER_LIMIT_SHARE`] of the room's limit (and [`JITTER_MAX_SPEED`]), the world clipped
    /// to the room's bounds (minus a margin). Returns false if the room is smaller than the
    /// 200 m world (the walk then uses what there is). The waypoint walk ignores it.
    pub fn adopt_room(
        &mut self,
        max_speed_mps: Option<f32>,
        bounds: Option<([f32; 2], [f32; 2])>,
    ) -> bool {
        let Some(j) = &mut self.jitter else {
            return true;
        };
        j.max_speed = match max_speed_mps {
            Some(l) if l.is_finite() && l > 0.0 => JITTER_MAX_SPEED.min(l * JITTER_LIMIT_SHARE),
            _ => JITTER_MAX_SPEED,
        };
        if let Some((lo, hi)) = bounds {
            for i in 0..2 {
                let (a, b) = (lo[i] + JITTER_ROOM_MARGIN, hi[i] - JITTER_ROOM_MARGIN);
                if !(a.is_finite() && b.is_finite() && a < b) {
                    continue;
                }
                j.lo[i] = (-JITTER_HALF_WORLD_M).max(a);
                j.hi[i] = JITTER_HALF_WORLD_M.min(b);
                if j.lo[i] >= j.hi[i] {
                    (j.lo[i], j.hi[i]) = (a, b);
                }
            }
        }
        (0..2).all(|i| j.lo[i] <= -JITTER_HALF_WORLD_M && j.hi[i] >= JITTER_HALF_WORLD_M)
    }

    /// Adopts an authoritative position (spawn or correction); clamps x and z to the bounds.
    pub fn teleport(&mut self, position: [f32; 3]) {
        let (lo, hi) = match &self.jitter {
            Some(j) => (j.lo, j.hi),
            None => ([-self.half_extent; 2], [self.half_extent; 2]),
        };
        let clamp = |v: f32, i: usize| {
            if v.is_finite() {
                v.clamp(lo[i], hi[i])
            } else {
                0.0_f32.clamp(lo[i], hi[i])
            }
        };
        self.pose.position = [
            clamp(position[0], 0),
            if position[1].is_finite() {
                position[1]
            } else {
                0.0
            },
            clamp(position[2], 1),
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
        if let Some(j) = &mut self.jitter {
            let (dx, dz) = (
                self.target[0] - self.pose.position[0],
                self.target[1] - self.pose.position[2],
            );
            if dx != 0.0 || dz != 0.0 {
                j.heading = dx.atan2(dz);
            }
            self.speed = self.speed.min(j.max_speed);
        }
    }

    fn start_walk(&mut self, mix: &BotMix, now: Instant, rng: &mut impl Rng) {
        let until = mix
            .walk_s
            .map(|r| now + Duration::from_secs_f64(r.sample(rng)));
        self.mode = Mode::Walking { until };
        let max = self.jitter.map_or(MAX_SPEED, |j| j.max_speed);
        self.speed = (mix.speed_mps.sample(rng) as f32).clamp(0.1, max);
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
                if self.jitter.is_some() {
                    self.jitter_step(dt, rng);
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

    /// One jitter input: move `dt` with the velocity in effect (reflecting at the world's
    /// edges), then drift heading and speed.
    fn jitter_step(&mut self, dt: f32, rng: &mut impl Rng) {
        let Some(j) = &mut self.jitter else {
            return;
        };
        let p = &mut self.pose.position;
        p[0] += self.pose.velocity[0] * dt;
        p[2] += self.pose.velocity[2] * dt;
        // Reflect: x mirrors the heading's sine, z its cosine.
        if reflect(&mut p[0], j.lo[0], j.hi[0]) {
            j.heading = -j.heading;
        }
        if reflect(&mut p[2], j.lo[1], j.hi[1]) {
            j.heading = std::f32::consts::PI - j.heading;
        }
        j.heading = (j.heading + rng.random_range(-JITTER_HEADING_DRIFT..=JITTER_HEADING_DRIFT))
            .rem_euclid(std::f32::consts::TAU);
        self.speed = (self.speed + rng.random_range(-JITTER_SPEED_DRIFT..=JITTER_SPEED_DRIFT))
            .clamp(0.0, j.max_speed);
        let (s, c) = j.heading.sin_cos();
        self.pose.velocity = [s * self.speed, 0.0, c * self.speed];
        self.pose.yaw_deg = j.heading.to_degrees();
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

    fn jitter_walker(seed: u64) -> (Walker, BotMix, SmallRng, Instant) {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mix = BotMix::of(BotKind::Walker);
        let t0 = Instant::now();
        let w = Walker::with_model(WalkModel::Jitter, &mix, 30.0, t0, &mut rng);
        (w, mix, rng, t0)
    }

    #[test]
    fn walk_models_parse() {
        assert_eq!("jitter".parse(), Ok(WalkModel::Jitter));
        assert_eq!("waypoint".parse(), Ok(WalkModel::Waypoint));
        assert!("brownian".parse::<WalkModel>().is_err());
        assert_eq!(WalkModel::default(), WalkModel::Waypoint);
        assert_eq!(WalkModel::Jitter.name(), "jitter");
        let (mut rng, mix) = (SmallRng::seed_from_u64(1), BotMix::of(BotKind::Walker));
        let w = Walker::new(&mix, 10.0, Instant::now(), &mut rng);
        assert!(!w.always_sends() && w.jitter_world().is_none());
    }

    #[test]
    fn jitter_drifts_within_its_steps_and_stays_in_the_200_m_world() {
        let (mut w, mix, mut rng, t0) = jitter_walker(7);
        assert!(w.always_sends());
        assert!(w.adopt_room(Some(12.0), Some(([-101.0, -101.0], [101.0, 101.0]))));
        assert_eq!(
            w.jitter_world(),
            Some((6.0, [-100.0, -100.0], [100.0, 100.0]))
        );
        w.teleport([0.0, 0.0, -8.0]);
        let (mut reflections, mut far, mut top_speed) = (0, 0.0f32, 0.0f32);
        // The first input sets the first velocity (the body stood before it).
        w.step(&mix, t0 + Duration::from_millis(100), &mut rng);
        let mut prev = w.pose();
        assert_eq!(prev.position, [0.0, 0.0, -8.0]);
        let speed = |p: &Pose| (p.velocity[0].powi(2) + p.velocity[2].powi(2)).sqrt();
        for i in 2..=20_000u64 {
            w.step(&mix, t0 + Duration::from_millis(i * 100), &mut rng);
            let p = w.pose();
            let [x, _, z] = p.position;
            assert!(x.abs() <= 100.0 && z.abs() <= 100.0, "{p:?}");
            far = far.max(x.abs().max(z.abs()));
            let (s0, s1) = (speed(&prev), speed(&p));
            top_speed = top_speed.max(s1);
            assert!(s1 <= 6.0 + 1e-4, "{s1}");
            assert!((s1 - s0).abs() <= 0.5 + 1e-4, "{s0} -> {s1}");
            // The step moved with the previous input's velocity, 100 ms.
            let d = ((x - prev.position[0]).powi(2) + (z - prev.position[2]).powi(2)).sqrt();
            assert!(d <= s0 * 0.1 + 1e-3, "{d} > {s0} * 0.1");
            let turned = (p.yaw_deg - prev.yaw_deg)
                .to_radians()
                .rem_euclid(std::f32::consts::TAU);
            let turn = turned.min(std::f32::consts::TAU - turned);
            if turn > 0.3 + 1e-3 {
                // Only a reflection turns more than the drift.
                reflections += 1;
                assert!(
                    x.abs() > 99.0 - 0.7 || z.abs() > 99.0 - 0.7,
                    "{turn} at {p:?}"
                );
            }
            prev = p;
        }
        assert!(reflections > 0, "never reached an edge");
        assert!(far > 90.0, "{far}");
        assert!(top_speed > 5.0, "{top_speed}");
    }

    #[test]
    fn jitter_is_seeded_and_fits_the_room() {
        let run = |seed| {
            let (mut w, mix, mut rng, t0) = jitter_walker(seed);
            w.teleport([0.0; 3]);
            (1..=50u64)
                .map(|i| {
                    w.step(&mix, t0 + Duration::from_millis(i * 100), &mut rng);
                    w.pose()
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));

        // The default plaza room (64 m, 12 m/s): the world is clipped, the speed stays 6.
        let (mut w, mix, mut rng, t0) = jitter_walker(5);
        assert!(!w.adopt_room(Some(12.0), Some(([-32.0, -32.0], [32.0, 32.0]))));
        assert_eq!(w.jitter_world(), Some((6.0, [-31.5, -31.5], [31.5, 31.5])));
        // A slow room: 0.9 of its limit.
        assert!(
            !w.adopt_room(Some(5.0), None),
            "no bounds: the clipped world stays"
        );
        assert_eq!(w.jitter_world().map(|j| j.0), Some(4.5));
        w.adopt_room(Some(5.0), Some(([-32.0, -32.0], [32.0, 32.0])));
        w.teleport([500.0, 0.0, f32::NAN]);
        assert_eq!(w.pose().position, [31.5, 0.0, 0.0]);
        for i in 1..=3_000u64 {
            w.step(&mix, t0 + Duration::from_millis(i * 100), &mut rng);
            let p = w.pose();
            assert!(p.position[0].abs() <= 31.5 && p.position[2].abs() <= 31.5);
            assert!((p.velocity[0].powi(2) + p.velocity[2].powi(2)).sqrt() <= 4.5 + 1e-4);
        }
        // Junk from the server keeps the world; an unknown limit means the 6 m/s cap.
        assert!(!w.adopt_room(Some(f32::NAN), Some(([5.0, 5.0], [5.0, f32::NAN]))));
        assert_eq!(w.jitter_world(), Some((6.0, [-31.5, -31.5], [31.5, 31.5])));
    }

    #[test]
    fn reflection_mirrors_into_the_range() {
        let mut v = 101.0;
        assert!(reflect(&mut v, -100.0, 100.0));
        assert_eq!(v, 99.0);
        let mut v = -100.5;
        assert!(reflect(&mut v, -100.0, 100.0));
        assert_eq!(v, -99.5);
        let mut v = 50.0;
        assert!(!reflect(&mut v, -100.0, 100.0));
        assert_eq!(v, 50.0);
        let mut v = 500.0;
        assert!(reflect(&mut v, -1.0, 1.0));
        assert!((-1.0..=1.0).contains(&v));
    }
}
