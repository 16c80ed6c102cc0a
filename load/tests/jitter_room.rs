//! The jitter walk against the room's own movement rules, sans I/O: in the load room
//! (`load/rooms/open-200.toml`, the shipped physics limits) no move of a seeded jitter walker is
//! refused or blocked, and the walker covers its 200 m x 200 m world.

use std::time::{Duration, Instant};

use plaza_load::walk::{JITTER_HALF_WORLD_M, WalkModel, Walker};
use plaza_load::{BotKind, BotMix};
use plaza_physics::{MoveClaim, PhysicsConfig, RoomDefinition, RoomPhysics};
use rand::SeedableRng;
use rand::rngs::SmallRng;

const OPEN_200: &str = include_str!("../rooms/open-200.toml");

#[test]
fn the_jitter_walk_is_never_refused_in_the_load_room() {
    let def = RoomDefinition::from_toml_str(OPEN_200).expect("open-200.toml is valid");
    let cfg = PhysicsConfig::default();
    let limit = cfg.max_speed_mps;
    let mut room = RoomPhysics::new(&def, cfg);
    let (lo, hi) = room.bounds();
    let mix = BotMix::of(BotKind::Walker);
    let mut far = 0.0f32;
    for seed in 1..=4u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let t0 = Instant::now();
        let mut w = Walker::with_model(WalkModel::Jitter, &mix, 30.0, t0, &mut rng);
        assert!(
            w.adopt_room(Some(limit), Some(([lo[0], lo[2]], [hi[0], hi[2]]))),
            "the load room holds the whole 200 m world"
        );
        let entity = seed as u32;
        let at = room.add_avatar(entity, def.spawn);
        w.teleport(at);
        let mut now_ms = 1_000 * seed * 100_000;
        let first = w.pose();
        let claim = |p: plaza_load::walk::Pose, dt_s: f32, is_instant: bool| {
            let speed = (p.velocity[0].powi(2) + p.velocity[2].powi(2)).sqrt();
            MoveClaim {
                position: p.position,
                velocity: p.velocity,
                dt_s,
                client_time_ms: 0,
                // As the bot labels it (`send_movement`): idle, walk under 2 m/s, else jog.
                movement_kind: if speed < 0.01 {
                    0
                } else if speed < 2.0 {
                    1
                } else {
                    2
                },
                is_instant,
            }
        };
        room.validate_and_move(entity, claim(first, 0.1, true), now_ms)
            .expect("the first move places the avatar");
        // Two simulated minutes of 100 ms inputs, the room stepping at 50 Hz between them.
        for i in 1..=1_200u64 {
            w.step(&mix, t0 + Duration::from_millis(i * 100), &mut rng);
            now_ms += 100;
            for _ in 0..5 {
                room.step();
            }
            let p = w.pose();
            let out = room
                .validate_and_move(entity, claim(p, 0.1, false), now_ms)
                .unwrap_or_else(|r| panic!("seed {seed} input {i}: {r:?} for {p:?}"));
            assert!(!out.blocked, "seed {seed} input {i}: blocked at {p:?}");
            far = far.max(p.position[0].abs().max(p.position[2].abs()));
            assert!(p.position[0].abs() <= JITTER_HALF_WORLD_M);
            assert!(p.position[2].abs() <= JITTER_HALF_WORLD_M);
        }
        room.remove_avatar(entity);
    }
    assert!(far > 60.0, "the walkers stayed near the spawn: {far} m");
}
