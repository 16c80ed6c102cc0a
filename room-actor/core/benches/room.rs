//! Room benchmarks: the interest query per client, the cost of one full room tick (simulate +
//! broadcast) for 100 to 1,000 random-walking avatars, and the bytes each client receives per
//! second through [`Room`] (not just the encoder), beside the bandwidth floor of REQUIREMENTS.md.
//!
//! `cargo bench -p plaza-room-core --bench room` prints the tick table (mean, p50, p99, max of
//! per-tick time from its own measurement loop) and the bandwidth table first, then runs the
//! criterion benches. With `CI` set the sizes and tick counts shrink; `ROOM_BENCH_N=1000` keeps
//! the rooms of that size, `ROOM_BENCH_TIER=stadium` (or `class`) the rooms of that tier;
//! `ROOM_BENCH_THREADS=2` sets `RoomConfig::encode_threads` (default 1); `ROOM_BENCH_CLOCK=cpu`
//! times each wake by the thread's CPU time (`/proc/thread-self/schedstat`) instead of the wall
//! clock, which on a machine shared with other builds leaves out the time the thread waited for
//! a core (it still pays the caches the others share). `ROOM_BENCH_SPREAD=0` sets
//! `RoomConfig::spread_from_members` (0: frames never spread); `ROOM_BENCH_BYTES_ONLY=1` prints
//! the bandwidth table only (with `CI` too, `ROOM_BENCH_N=1000` keeps the 1,000 stadium, and any
//! other `ROOM_BENCH_N` adds a stadium of that size).
//!
//! A tick is one wake of the room as the room actor's shell schedules it: the shell wakes the
//! room on the core's `WakeGrid` (every 50 Hz simulation step and every 20 Hz broadcast, each on
//! its own evenly spaced grid, and, in a room whose frames are spread
//! (`RoomConfig::spread_from_members`), every 10 ms group slot) and calls `Room::advance`,
//! which runs the step, the broadcast and the frame group that are due. Its duration is what the
//! shell's tick-duration metric observes.
//!
//! The walkers are physically valid clients: they start where `Joined` put them, send a move
//! every 100 ms (10 Hz, so a fifth of them per 50 Hz tick) with timestamps advancing by 0.1 s,
//! step 0.14 m (walk) or 0.3 m (jog) per move, steer around the plaza's static geometry and adopt
//! every correction the room sends.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use plaza_proto::quant::Pose;
use plaza_room_core::interest::{DEFAULT_TIER_BANDS_M, InterestIndex, InterestSet};
use plaza_room_core::{
    Advanced, CapacityTier, Input, MoveInput, Outbound, Room, RoomConfig, SessionId, WakeGrid,
};

/// Simulation steps per second (the room default).
const TICK_HZ: u64 = 50;
/// Milliseconds per step.
const TICK_MS: u64 = 1000 / TICK_HZ;
/// A client moves every this many steps (10 Hz).
const MOVE_EVERY: u64 = 5;

/// A clock for one wake: wall time, or with `ROOM_BENCH_CLOCK=cpu` this thread's CPU time.
#[derive(Clone, Copy)]
enum Clock {
    Wall(Instant),
    Cpu(u64),
}

fn cpu_clock() -> bool {
    std::env::var("ROOM_BENCH_CLOCK").is_ok_and(|v| v == "cpu")
}

/// Nanoseconds this thread has run on a CPU (the first field of its schedstat).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

impl Clock {
    fn start() -> Self {
        if cpu_clock() {
            Self::Cpu(thread_cpu_ns())
        } else {
            Self::Wall(Instant::now())
        }
    }

    fn elapsed(self) -> Duration {
        match self {
            Self::Wall(t) => t.elapsed(),
            Self::Cpu(ns) => Duration::from_nanos(thread_cpu_ns().saturating_sub(ns)),
        }
    }
}

fn ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Regions of the default plaza (`physics/rooms/plaza.toml`) a walker steers around, grown by
/// the capsule radius and a margin: the fountain, pillars, benches, gallery wall, stage and ramp.
fn blocked(p: [f32; 3]) -> bool {
    let (x, z) = (p[0], p[2]);
    let circle = |cx: f32, cz: f32, r: f32| (x - cx).powi(2) + (z - cz).powi(2) < r * r;
    let rect = |cx: f32, cz: f32, hx: f32, hz: f32| (x - cx).abs() < hx && (z - cz).abs() < hz;
    x.abs() > 31.0
        || z.abs() > 31.0
        || circle(0.0, 0.0, 3.6)
        || circle(15.0, 15.0, 1.0)
        || circle(-15.0, 15.0, 1.0)
        || circle(15.0, -15.0, 1.0)
        || circle(-15.0, -15.0, 1.0)
        || rect(-10.0, 0.0, 1.9, 0.8)
        || rect(10.0, 0.0, 0.8, 1.9)
        || rect(-20.0, -10.0, 0.6, 6.4)
        || rect(0.0, 17.0, 9.0, 8.0)
}

/// One bot client.
struct Walker {
    session: SessionId,
    /// Where the client believes its avatar is (the spawn, then its own moves and corrections).
    pos: [f32; 3],
    heading: f32,
    speed: f32,
    seq: u32,
    placed: bool,
}

/// A room with `n` random-walking members, driven tick by tick.
struct Sim {
    room: Room,
    walkers: Vec<Walker>,
    rng: Rng,
    /// Simulation steps run.
    tick: u64,
    /// The shell's wake grid.
    grid: WakeGrid,
    /// The time of the last wake since the room started.
    now: Duration,
    out: Vec<Outbound>,
    frame_bytes: u64,
    frames: u64,
    corrections: u64,
}

impl Sim {
    fn new(n: usize, tier: CapacityTier, seed: u64) -> Self {
        let mut cfg = RoomConfig::for_tier(tier);
        cfg.max_members = cfg.max_members.max(n as u32);
        if let Some(t) = std::env::var("ROOM_BENCH_THREADS")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            cfg.encode_threads = t;
        }
        if let Some(s) = std::env::var("ROOM_BENCH_SPREAD")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            cfg.spread_from_members = s;
        }
        let mut room = Room::new("bench", cfg);
        let mut rng = Rng(seed);
        let mut walkers: Vec<Walker> = (0..n)
            .map(|i| Walker {
                session: i as SessionId + 1,
                pos: [0.0; 3],
                heading: rng.unit() * std::f32::consts::TAU,
                speed: if rng.unit() < 0.8 { 1.4 } else { 3.0 },
                seq: 0,
                placed: false,
            })
            .collect();
        for w in &walkers {
            room.join(w.session);
        }
        let mut out = Vec::new();
        let now = Duration::from_millis(TICK_MS);
        room.advance(now, &mut out);
        let mut joined = 0;
        for o in &out {
            if let Outbound::Joined { session, spawn, .. } = o {
                walkers[(*session - 1) as usize].pos = *spawn;
                joined += 1;
            }
        }
        assert_eq!(joined, n, "every bot joins");
        Self {
            walkers,
            rng,
            tick: 1,
            grid: WakeGrid::new(room.config()),
            now,
            room,
            out,
            frame_bytes: 0,
            frames: 0,
            corrections: 0,
        }
    }

    /// Queue this tick's moves: the fifth of the walkers whose turn it is.
    fn inputs(&mut self, now_ms: u64) {
        let phase = self.tick % MOVE_EVERY;
        let timestamp_s = now_ms as f64 / 1000.0;
        let dt = (MOVE_EVERY * TICK_MS) as f32 / 1000.0;
        for (i, w) in self.walkers.iter_mut().enumerate() {
            if i as u64 % MOVE_EVERY != phase {
                continue;
            }
            w.seq += 1;
            let pose = if w.placed {
                w.heading += (self.rng.unit() - 0.5) * 0.6;
                let mut next = w.pos;
                for _ in 0..8 {
                    let (s, c) = w.heading.sin_cos();
                    next = [
                        w.pos[0] + c * w.speed * dt,
                        w.pos[1],
                        w.pos[2] + s * w.speed * dt,
                    ];
                    // Inside a keep-out region already (a spawn spot): walk out of it.
                    if !blocked(next) || blocked(w.pos) {
                        break;
                    }
                    w.heading += 0.5 + self.rng.unit() * std::f32::consts::PI;
                }
                let (s, c) = w.heading.sin_cos();
                w.pos = next;
                Pose {
                    position: next,
                    velocity: [c * w.speed, 0.0, s * w.speed],
                    yaw_deg: w.heading.to_degrees(),
                    movement_kind: if w.speed > 2.0 { 2 } else { 1 },
                    anim_flags: 1,
                    ..Pose::default()
                }
            } else {
                // The first message places the client where it spawned.
                w.placed = true;
                Pose {
                    position: w.pos,
                    ..Pose::default()
                }
            };
            self.room.input(
                w.session,
                Input::Move(MoveInput {
                    seq: w.seq,
                    pose,
                    timestamp_s,
                    is_instant: w.seq == 1,
                    timestamp_period_s: None,
                }),
            );
        }
    }

    /// One wake of the room, scheduled as the room actor's shell (`plaza-room-actor`) does it:
    /// at the next time of the core's wake grid, the inputs of the step due then (if one is),
    /// then `Room::advance`. Returns the time of `advance` and what it ran.
    fn tick(&mut self) -> (Duration, Advanced) {
        self.now = self
            .grid
            .next_after(self.now, self.room.wakes_on_group_grid());
        let tick_hz = u128::from(self.room.config().tick_hz);
        let due_steps = (self.now.as_nanos() * tick_hz / 1_000_000_000) as u64;
        self.out.clear();
        if due_steps > self.tick {
            self.tick += 1;
            self.inputs(self.tick * TICK_MS);
        }
        let t0 = Clock::start();
        let ran = self.room.advance(self.now, &mut self.out);
        let took = t0.elapsed();
        self.tick = self.room.tick();
        self.absorb();
        (took, ran)
    }

    /// Wakes until `steps` more simulation steps have run.
    fn run_steps(&mut self, steps: u64) {
        let until = self.tick + steps;
        while self.tick < until {
            self.tick();
        }
    }

    /// Walkers adopt corrections; frames are counted.
    fn absorb(&mut self) {
        for o in &self.out {
            match o {
                Outbound::Correction { session, pose, .. } => {
                    let w = &mut self.walkers[(*session - 1) as usize];
                    w.pos = pose.position;
                    w.heading += std::f32::consts::PI * (0.5 + self.rng.unit());
                    self.corrections += 1;
                }
                Outbound::Frame { bytes, .. } => {
                    self.frame_bytes += bytes.len() as u64;
                    self.frames += 1;
                }
                _ => {}
            }
        }
    }

    fn reset_counters(&mut self) {
        self.frame_bytes = 0;
        self.frames = 0;
        self.corrections = 0;
    }
}

struct Dist {
    mean: f64,
    p50: f64,
    p99: f64,
    max: f64,
}

/// Mean and percentiles in milliseconds.
fn dist(mut v: Vec<Duration>) -> Dist {
    v.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let at = |q: f64| ms(v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1]);
    Dist {
        mean: v.iter().map(|d| ms(*d)).sum::<f64>() / v.len() as f64,
        p50: at(0.50),
        p99: at(0.99),
        max: ms(*v.last().unwrap_or(&Duration::ZERO)),
    }
}

/// `ROOM_BENCH_N=1000` limits the reports to rooms of that many avatars (for profiling).
fn wanted(n: usize) -> bool {
    std::env::var("ROOM_BENCH_N")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .is_none_or(|only| only == n)
}

/// `ROOM_BENCH_TIER=stadium` (or `class`) limits the tick report to rooms of that tier.
fn wanted_tier(tier: CapacityTier) -> bool {
    std::env::var("ROOM_BENCH_TIER")
        .ok()
        .is_none_or(|t| t.eq_ignore_ascii_case(&format!("{tier:?}")))
}

fn tier_for(n: usize) -> CapacityTier {
    if n >= 1000 {
        CapacityTier::Stadium
    } else {
        CapacityTier::Class
    }
}

/// Per-tick time of simulate + broadcast, from a measurement loop (criterion reports means).
fn tick_report() {
    use CapacityTier::{Class, Stadium};
    let (cases, ticks): (&[(usize, CapacityTier)], usize) = if ci() {
        (&[(100, Class), (250, Class)], 200)
    } else {
        (
            &[
                (100, Class),
                (250, Class),
                (500, Class),
                (1000, Class),
                (250, Stadium),
                (500, Stadium),
                (1000, Stadium),
            ],
            2000,
        )
    };
    println!(
        "room tick (one wake of the room on the core's wake grid: the 50 Hz step, the 20 Hz \
         broadcast and/or the 10 ms frame group due; {ticks} steps measured after 100)"
    );
    println!(
        "{:>6} {:>8} {:>4} | {:>9} {:>9} {:>9} {:>9} | {:>12} {:>12} | {:>12} {:>9}",
        "avatars",
        "tier",
        "cap",
        "tick mean",
        "p50",
        "p99",
        "max",
        "step-wake avg",
        "p99",
        "bcast-wake avg",
        "p99"
    );
    let mut prev: Option<(usize, CapacityTier, f64)> = None;
    for &(n, tier) in cases.iter().filter(|c| wanted(c.0) && wanted_tier(c.1)) {
        let mut sim = Sim::new(n, tier, 0x5eed + n as u64);
        sim.run_steps(100);
        let mut total = Vec::with_capacity(ticks * 3);
        let mut sims = Vec::with_capacity(ticks);
        let mut bcasts = Vec::with_capacity(ticks);
        let until = sim.tick + ticks as u64;
        while sim.tick < until {
            let (took, ran) = sim.tick();
            if !ran.ran() {
                continue;
            }
            total.push(took);
            if ran.steps > 0 {
                sims.push(took);
            }
            if ran.broadcast {
                bcasts.push(took);
            }
        }
        let (t, s, b) = (dist(total), dist(sims), dist(bcasts));
        println!(
            "{:>7} {:>8} {:>4} | {:>7.3}ms {:>7.3}ms {:>7.3}ms {:>7.3}ms | {:>10.3}ms {:>10.3}ms | {:>10.3}ms {:>7.3}ms",
            n,
            format!("{tier:?}"),
            sim.room.config().interest_cap,
            t.mean,
            t.p50,
            t.p99,
            t.max,
            s.mean,
            s.p99,
            b.mean,
            b.p99
        );
        if let Some((pn, _, pm)) = prev.filter(|p| p.1 == tier) {
            let r = n as f64 / pn as f64;
            let nlogn = r * (n as f64).ln() / (pn as f64).ln();
            println!(
                "        growth {pn} -> {n}: mean x{:.2} (N x{r:.2}, N log N x{nlogn:.2})",
                t.mean / pm
            );
        }
        prev = Some((n, tier, t.mean));
        black_box(sim.corrections);
    }
}

/// Bytes per client per second through the room, beside the bandwidth floor of REQUIREMENTS.md.
fn bandwidth_report() {
    let secs: u64 = if ci() { 4 } else { 20 };
    let cases: &[(usize, CapacityTier, &str)] = &[
        (
            50,
            CapacityTier::Class,
            "32 visible: 24-36 kbit/s = 3,000-4,500 B/s (target <= 3,600)",
        ),
        (
            100,
            CapacityTier::Class,
            "32 visible: 24-36 kbit/s = 3,000-4,500 B/s",
        ),
        (
            1000,
            CapacityTier::Stadium,
            "256 visible: 190-200 kbit/s = 23,750-25,000 B/s (target <= 29,000)",
        ),
    ];
    println!(
        "bytes per client per second through Room ({secs} s measured after 2 s; moves at 10 Hz)"
    );
    let only: Option<usize> = std::env::var("ROOM_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok());
    let extra = only
        .filter(|n| !cases.iter().any(|c| c.0 == *n))
        .map(|n| (n, CapacityTier::Stadium, "-"));
    for &(n, tier, floor) in cases.iter().chain(extra.iter()) {
        if (ci() && n > 100 && only != Some(n)) || !wanted(n) || !wanted_tier(tier) {
            continue;
        }
        let mut sim = Sim::new(n, tier, 0xb17e + n as u64);
        sim.run_steps(2 * TICK_HZ);
        sim.reset_counters();
        sim.run_steps(secs * TICK_HZ);
        let per_client = sim.frame_bytes as f64 / n as f64 / secs as f64;
        println!(
            "  {n:>5} avatars {tier:?} cap {:>3}: {per_client:>8.0} B/s ({:>5.1} kbit/s) per client, \
             {:.0} B/frame; {} corrections; floor: {floor}",
            sim.room.config().interest_cap,
            per_client * 8.0 / 1000.0,
            sim.frame_bytes as f64 / sim.frames.max(1) as f64,
            sim.corrections,
        );
    }
}

fn bench_interest(c: &mut Criterion) {
    let sizes: &[usize] = if ci() { &[100] } else { &[100, 1000] };
    let mut g = c.benchmark_group("interest_query");
    g.sample_size(20)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    for &n in sizes {
        let mut rng = Rng(n as u64);
        let pts: Vec<(u32, [f32; 3])> = (0..n as u32)
            .map(|i| {
                (
                    i + 1,
                    [(rng.unit() - 0.5) * 62.0, 0.0, (rng.unit() - 0.5) * 62.0],
                )
            })
            .collect();
        let index = InterestIndex::build(pts.iter().copied(), DEFAULT_TIER_BANDS_M);
        for cap in [32usize, 256] {
            let mut set = InterestSet::default();
            let mut k = 0usize;
            g.throughput(Throughput::Elements(1));
            g.bench_with_input(BenchmarkId::new(format!("cap{cap}"), n), &n, |b, _| {
                b.iter(|| {
                    let (id, at) = pts[k % pts.len()];
                    k += 1;
                    index.nearest(id, at, cap, &mut set);
                    black_box(set.entries.len())
                })
            });
        }
        g.bench_with_input(BenchmarkId::new("build", n), &n, |b, _| {
            b.iter(|| InterestIndex::build(pts.iter().copied(), DEFAULT_TIER_BANDS_M).len())
        });
    }
    g.finish();
}

fn bench_tick(c: &mut Criterion) {
    let sizes: &[usize] = if ci() { &[100] } else { &[100, 250, 500, 1000] };
    let mut g = c.benchmark_group("room_tick");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    for &n in sizes {
        let mut sim = Sim::new(n, tier_for(n), 0x7e57 + n as u64);
        sim.run_steps(50);
        g.bench_with_input(BenchmarkId::new("simulate+broadcast", n), &n, |b, _| {
            b.iter(|| black_box(sim.tick()))
        });
    }
    g.finish();
}

fn main() {
    // `cargo test --benches` runs this binary without `--bench`: only criterion's quick test.
    if std::env::var_os("ROOM_BENCH_BYTES_ONLY").is_some() {
        bandwidth_report();
        return;
    }
    if std::env::args().any(|a| a == "--bench") {
        tick_report();
        bandwidth_report();
    }
    let mut c = Criterion::default().configure_from_args();
    bench_interest(&mut c);
    bench_tick(&mut c);
    c.final_summary();
}
