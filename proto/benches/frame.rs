//! Frame codec benchmarks: encode cost per avatar-update, decode cost per frame, and the
//! bandwidth per client per second of (a) 100 avatars random-walking in one room, all visible,
//! (b) 1,000 avatars in a stadium room where each client sees its 256 nearest.
//!
//! `cargo bench -p plaza-proto --bench frame -- --quick` (bandwidth lines print first).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use plaza_proto::frame::{
    EncoderConfig, EntityRecord, FrameDecoder, FrameEncoder, OwnState, Visible,
};
use plaza_proto::quant::{Pose, quantize};

const HZ: u32 = 20;

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

/// Avatars random-walking in a square room: heading drifts, speed walk/jog, short stops,
/// bounce at the walls. Velocity is the true velocity of the step.
struct World {
    rng: Rng,
    half: f32,
    poses: Vec<Pose>,
    heading: Vec<f32>,
    speed: Vec<f32>,
    rest: Vec<u32>,
}

impl World {
    fn new(n: usize, half: f32, seed: u64) -> Self {
        let mut rng = Rng(seed);
        let poses = (0..n)
            .map(|_| Pose {
                position: [
                    (rng.unit() * 2.0 - 1.0) * half,
                    0.0,
                    (rng.unit() * 2.0 - 1.0) * half,
                ],
                anim_flags: 1,
                movement_kind: 1,
                ..Pose::default()
            })
            .collect();
        let heading = (0..n).map(|_| rng.unit() * std::f32::consts::TAU).collect();
        let speed = (0..n)
            .map(|_| if rng.unit() < 0.8 { 1.4 } else { 3.0 })
            .collect();
        Self {
            rng,
            half,
            poses,
            heading,
            speed,
            rest: vec![0; n],
        }
    }

    fn step(&mut self, moving_always: bool) {
        let dt = 1.0 / HZ as f32;
        for i in 0..self.poses.len() {
            let p = &mut self.poses[i];
            if self.rest[i] > 0 {
                self.rest[i] -= 1;
                p.velocity = [0.0; 3];
                p.movement_kind = 0;
                continue;
            }
            if !moving_always && self.rng.unit() < 0.005 {
                self.rest[i] = 20 + (self.rng.next() % 40) as u32;
            }
            self.heading[i] += (self.rng.unit() - 0.5) * 0.3;
            if self.rng.unit() < 0.01 {
                self.speed[i] = if self.speed[i] < 2.0 { 3.0 } else { 1.4 };
            }
            let (s, c) = self.heading[i].sin_cos();
            let v = [c * self.speed[i], 0.0, s * self.speed[i]];
            for a in [0, 2] {
                p.position[a] += v[a] * dt;
                if p.position[a].abs() > self.half {
                    p.position[a] = p.position[a].clamp(-self.half, self.half);
                    self.heading[i] += std::f32::consts::PI;
                }
            }
            p.velocity = v;
            p.yaw_deg = s.atan2(c).to_degrees();
            p.movement_kind = if self.speed[i] < 2.0 { 1 } else { 2 };
        }
    }

    /// The room's per-tick arena: every entity quantized once.
    fn arena(&self) -> Vec<EntityRecord> {
        self.poses
            .iter()
            .enumerate()
            .map(|(i, p)| EntityRecord {
                id: i as u32,
                generation: 0,
                kind: 0,
                pose: quantize(p),
            })
            .collect()
    }
}

/// The `cap` nearest others of `viewer` (ties by id), sorted by id; tier by distance band.
fn nearest<'a>(arena: &'a [EntityRecord], viewer: usize, cap: usize) -> Vec<Visible<'a>> {
    let me = arena[viewer].pose.position_mm;
    let mut d: Vec<(i64, u32)> = arena
        .iter()
        .filter(|r| r.id as usize != viewer)
        .map(|r| {
            let dx = i64::from(r.pose.position_mm[0] - me[0]);
            let dz = i64::from(r.pose.position_mm[2] - me[2]);
            (dx * dx + dz * dz, r.id)
        })
        .collect();
    if d.len() > cap {
        d.select_nth_unstable(cap);
        d.truncate(cap);
    }
    d.sort_unstable_by_key(|&(_, id)| id);
    d.iter()
        .map(|&(d2, id)| {
            let m = (d2 as f64).sqrt() / 1000.0;
            let tier = if m < 20.0 {
                0
            } else if m < 40.0 {
                1
            } else if m < 80.0 {
                2
            } else {
                3
            };
            Visible {
                record: &arena[id as usize],
                tier,
            }
        })
        .collect()
}

struct Run {
    bytes_per_s: f64,
    steady_bytes_per_s: f64,
    deferred: u32,
}

/// Bytes per client per second over `seconds` for `viewers` clients.
fn bandwidth(
    n: usize,
    half: f32,
    cap: usize,
    cfg: &EncoderConfig,
    seconds: u32,
    viewers: &[usize],
) -> Run {
    let mut world = World::new(n, half, 42);
    let mut encs: Vec<FrameEncoder> = viewers
        .iter()
        .map(|_| FrameEncoder::new(cfg.clone()))
        .collect();
    let mut decs: Vec<FrameDecoder> = viewers.iter().map(|_| FrameDecoder::new()).collect();
    let (mut total, mut steady, mut deferred) = (0usize, 0usize, 0u32);
    let mut out = Vec::new();
    let frames = seconds * HZ;
    for tick in 0..frames {
        world.step(cap >= n);
        let arena = world.arena();
        for (k, &v) in viewers.iter().enumerate() {
            let vis = nearest(&arena, v, cap);
            let own = OwnState {
                entity: v as u32,
                pose: world.poses[v],
                last_input_seq: tick,
            };
            out.clear();
            let st = encs[k].encode(tick, Some(&own), &vis, &mut out);
            decs[k].apply(&out).expect("decodes");
            total += st.bytes;
            deferred += st.deferred;
            if tick >= HZ {
                steady += st.bytes;
            }
        }
    }
    let per = viewers.len() as f64;
    Run {
        bytes_per_s: total as f64 / per / f64::from(seconds),
        steady_bytes_per_s: steady as f64 / per / f64::from(seconds - 1),
        deferred,
    }
}

fn report_bandwidth() {
    let unlimited = EncoderConfig {
        budget_bytes_per_s: 0,
        broadcast_hz: HZ,
        check_every: 20,
    };
    let stadium = EncoderConfig {
        budget_bytes_per_s: 32_000,
        broadcast_hz: HZ,
        check_every: 20,
    };
    let a = bandwidth(100, 50.0, 256, &unlimited, 20, &[0, 37, 99]);
    println!(
        "bandwidth (a) 100 avatars all moving, all visible: {:.0} B/s per client ({:.0} B/s after the keyframe second; DESIGN floor for 100 visible ≈ 9,250–10,900 B/s good bit-packer, ≈ 30% lower entropy floor)",
        a.bytes_per_s, a.steady_bytes_per_s
    );
    let a50 = bandwidth(50, 35.0, 256, &unlimited, 20, &[0, 25]);
    println!(
        "bandwidth (a') 50 avatars all moving, all visible: {:.0} B/s per client ({:.0} steady; north star ≤ 3,600)",
        a50.bytes_per_s, a50.steady_bytes_per_s
    );
    let b = bandwidth(1000, 100.0, 256, &stadium, 20, &[0, 500, 999]);
    println!(
        "bandwidth (b) 1,000 avatars, 256 nearest visible, stadium budget: {:.0} B/s per client ({:.0} steady, {} deferred; DESIGN floor for 256 visible ≈ 23,750–25,000 B/s when all move)",
        b.bytes_per_s, b.steady_bytes_per_s, b.deferred
    );
}

fn bench(c: &mut Criterion) {
    report_bandwidth();

    // Encode: 100 visible avatars, all moving, one client.
    let mut world = World::new(101, 50.0, 9);
    let cfg = EncoderConfig {
        budget_bytes_per_s: 0,
        broadcast_hz: HZ,
        check_every: 20,
    };
    let mut frames_arena = Vec::new();
    for _ in 0..64 {
        world.step(true);
        frames_arena.push(world.arena());
    }
    let mut g = c.benchmark_group("encode");
    g.throughput(Throughput::Elements(100));
    g.bench_function("frame_100_moving_avatars", |b| {
        let mut enc = FrameEncoder::new(cfg.clone());
        let mut out = Vec::with_capacity(4096);
        let mut k = 0usize;
        let mut tick = 0u32;
        b.iter(|| {
            let arena = &frames_arena[k % frames_arena.len()];
            let vis: Vec<Visible<'_>> = arena[1..]
                .iter()
                .map(|r| Visible { record: r, tier: 0 })
                .collect();
            out.clear();
            let st = enc.encode(tick, None, &vis, &mut out);
            k += 1;
            tick += 1;
            black_box(st)
        });
    });
    g.bench_function("frame_100_moving_avatars_class_budget", |b| {
        let mut enc = FrameEncoder::new(EncoderConfig::default());
        let mut out = Vec::with_capacity(4096);
        let mut k = 0usize;
        let mut tick = 0u32;
        b.iter(|| {
            let arena = &frames_arena[k % frames_arena.len()];
            let vis: Vec<Visible<'_>> = arena[1..]
                .iter()
                .map(|r| Visible { record: r, tier: 0 })
                .collect();
            out.clear();
            let st = enc.encode(tick, None, &vis, &mut out);
            k += 1;
            tick += 1;
            black_box(st)
        });
    });
    g.finish();

    // Decode: a recorded stream of frames, replayed from a keyframe.
    let mut enc = FrameEncoder::new(cfg.clone());
    let mut stream = Vec::new();
    for (tick, arena) in frames_arena.iter().enumerate() {
        let vis: Vec<Visible<'_>> = arena[1..]
            .iter()
            .map(|r| Visible { record: r, tier: 0 })
            .collect();
        let mut out = Vec::new();
        enc.encode(tick as u32, None, &vis, &mut out);
        stream.push(out);
    }
    let mut g = c.benchmark_group("decode");
    g.throughput(Throughput::Elements(1));
    g.bench_function("frame_100_moving_avatars", |b| {
        let mut dec = FrameDecoder::new();
        dec.apply(&stream[0]).unwrap();
        let base = dec.clone();
        let mut k = 1usize;
        b.iter(|| {
            if k == stream.len() {
                dec = base.clone();
                k = 1;
            }
            let d = dec.apply(&stream[k]).unwrap();
            k += 1;
            black_box(d.seq)
        });
    });
    g.finish();

    c.bench_function("quantize_pose", |b| {
        let p = world.poses[3];
        b.iter(|| black_box(quantize(black_box(&p))))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
