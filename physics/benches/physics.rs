//! Cost of movement validation and of the fixed step in the default plaza with 1,000 avatars.
//!
//! Run: `cargo bench -p plaza-physics --bench physics`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use plaza_physics::{MoveClaim, PhysicsConfig, RoomDefinition, RoomPhysics};

const AVATARS: u32 = 1000;

/// The plaza with `AVATARS` avatars on a grid, each placed (first move made).
fn crowded_plaza() -> (RoomPhysics, Vec<[f32; 3]>) {
    let mut room = RoomPhysics::new(&RoomDefinition::default_plaza(), PhysicsConfig::default());
    let mut homes = Vec::new();
    for e in 0..AVATARS {
        let (i, j) = (e % 32, e / 32);
        let at = [-27.0 + i as f32 * 1.75, 0.0, -27.0 + j as f32 * 1.75];
        let used = room.add_avatar(e, at);
        room.validate_and_move(e, claim(used, true), 0)
            .expect("placement");
        homes.push(used);
    }
    (room, homes)
}

fn claim(position: [f32; 3], is_instant: bool) -> MoveClaim {
    MoveClaim {
        position,
        velocity: [2.0, 0.0, 0.0],
        dt_s: 0.1,
        client_time_ms: 0,
        movement_kind: 1,
        is_instant,
    }
}

/// Round `round`'s target for an avatar: it walks 0.2 m right and back.
fn target(home: [f32; 3], round: u64) -> [f32; 3] {
    let dx = if round % 2 == 1 { 0.2 } else { 0.0 };
    [home[0] + dx, home[1], home[2]]
}

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("plaza_1000_avatars");

    // One validate_and_move (checks + character-controller sweep), round-robin over avatars.
    g.throughput(Throughput::Elements(1));
    let (mut room, homes) = crowded_plaza();
    let (mut e, mut round, mut now) = (0u32, 1u64, 0u64);
    g.bench_function("validate_and_move", |b| {
        b.iter(|| {
            if e == 0 {
                now += 100;
            }
            let out =
                room.validate_and_move(e, claim(target(homes[e as usize], round), false), now);
            black_box(out.ok());
            e += 1;
            if e == AVATARS {
                e = 0;
                round += 1;
            }
        })
    });

    // Worst common case: a move into a wall (the controller's slide path), avatar 0 pushing
    // into the plaza's east wall while sliding along it.
    let (mut room, _) = crowded_plaza();
    room.teleport(0, [31.6, 0.0, 0.0]);
    let mut now = 0u64;
    let mut k = 0u64;
    room.validate_and_move(0, claim([31.6, 0.0, 0.0], true), now)
        .expect("placement");
    g.bench_function("validate_and_move_into_wall", |b| {
        b.iter(|| {
            now += 100;
            k += 1;
            let z = if k.is_multiple_of(2) { 0.0 } else { 0.3 };
            let out = room.validate_and_move(0, claim([32.0, 0.0, z], false), now);
            black_box(out.ok());
        })
    });

    // Components of a move: the overlap guard and the ground probe of the anti-fly rule.
    let (room, homes) = crowded_plaza();
    let mut i = 0usize;
    g.bench_function("penetrates_statics", |b| {
        b.iter(|| {
            i = (i + 1) % homes.len();
            black_box(room.penetrates_statics(homes[i]))
        })
    });
    g.bench_function("height_above_ground", |b| {
        b.iter(|| {
            i = (i + 1) % homes.len();
            let h = homes[i];
            black_box(room.height_above_ground([h[0], h[1] + 4.0, h[2]]))
        })
    });

    // One fixed step with every avatar standing still.
    let (mut room, _) = crowded_plaza();
    room.step();
    g.bench_function("step_idle", |b| b.iter(|| room.step()));

    // One full tick: every avatar moves (1,000 validations), then one step moves their bodies.
    g.throughput(Throughput::Elements(u64::from(AVATARS)));
    let (mut room, homes) = crowded_plaza();
    let (mut round, mut now) = (1u64, 0u64);
    g.bench_function("tick_all_moving", |b| {
        b.iter(|| {
            now += 100;
            for (e, home) in homes.iter().enumerate() {
                let out = room.validate_and_move(e as u32, claim(target(*home, round), false), now);
                black_box(out.ok());
            }
            room.step();
            round += 1;
        })
    });

    // A realistic 50 Hz tick: clients send at 10 Hz, so a fifth of the avatars move per tick.
    let (mut room, homes) = crowded_plaza();
    let (mut tick, mut now) = (0u64, 0u64);
    g.throughput(Throughput::Elements(u64::from(AVATARS / 5)));
    g.bench_function("tick_fifth_moving", |b| {
        b.iter(|| {
            now += 20;
            tick += 1;
            let phase = (tick % 5) as usize;
            let round = tick / 5 + 1;
            for (e, home) in homes.iter().enumerate().skip(phase).step_by(5) {
                let out = room.validate_and_move(e as u32, claim(target(*home, round), false), now);
                black_box(out.ok());
            }
            room.step();
        })
    });

    // The step alone right after every avatar moved (kinematic bodies all in motion).
    let (mut room, homes) = crowded_plaza();
    let (mut round, mut now) = (1u64, 0u64);
    g.throughput(Throughput::Elements(1));
    g.bench_function("step_after_all_moved", |b| {
        b.iter_custom(|iters| {
            let mut total = std::time::Duration::ZERO;
            for _ in 0..iters {
                now += 100;
                for (e, home) in homes.iter().enumerate() {
                    let _ =
                        room.validate_and_move(e as u32, claim(target(*home, round), false), now);
                }
                round += 1;
                let t = std::time::Instant::now();
                room.step();
                total += t.elapsed();
            }
            total
        })
    });
    g.finish();
}

criterion_group!(physics, benches);
criterion_main!(physics);
