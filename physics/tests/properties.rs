//! Property tests of movement authority (REQUIREMENTS.md G6): whatever a client sends, no
//! accepted step exceeds `v_max·Δt + ε`, no accepted position leaves the room or sinks into
//! static geometry, and nothing panics.

use plaza_physics::{MoveClaim, PhysicsConfig, RejectReason, RoomDefinition, RoomPhysics};
use proptest::prelude::*;

/// One client message: a displacement (possibly huge or non-finite), a claimed dt and flags.
#[derive(Clone, Debug)]
struct Step {
    delta: [f32; 3],
    dt_s: f32,
    server_ms: u64,
    kind: u8,
    instant: bool,
    teleport_to: Option<[f32; 3]>,
}

fn any_f32() -> impl Strategy<Value = f32> {
    prop_oneof![
        8 => -3.0f32..3.0,
        1 => -60.0f32..60.0,
        1 => prop::sample::select(vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0]),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    (
        (any_f32(), -0.5f32..0.5, any_f32()).prop_map(|(x, y, z)| [x, y, z]),
        prop_oneof![
            6 => 0.01f32..0.3,
            1 => -1.0f32..5.0,
            1 => prop::sample::select(vec![0.0, f32::NAN, 1e30]),
        ],
        0u64..300,
        0u8..6,
        prop::bool::weighted(0.1),
        prop::option::weighted(0.03, [-30.0f32..30.0, 0.0f32..3.0, -30.0f32..30.0]),
    )
        .prop_map(
            |(delta, dt_s, server_ms, kind, instant, teleport_to)| Step {
                delta,
                dt_s,
                server_ms,
                kind,
                instant,
                teleport_to,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn accepted_moves_respect_speed_bounds_and_geometry(
        start in [-25.0f32..25.0, 0.0f32..0.5, -25.0f32..25.0],
        steps in prop::collection::vec(step(), 1..120),
    ) {
        let cfg = PhysicsConfig::default();
        let mut room = RoomPhysics::new(&RoomDefinition::default_plaza(), cfg.clone());
        let mut pos = room.add_avatar(1, start);
        prop_assert!(room.in_bounds(pos));
        let mut pending = true;
        let mut now = 0u64;
        for s in steps {
            if let Some(to) = s.teleport_to {
                room.teleport(1, to);
                pos = room.avatar_position(1).unwrap();
                pending = true;
                prop_assert!(!room.penetrates_statics(pos));
                continue;
            }
            now += s.server_ms;
            let claim = MoveClaim {
                position: [pos[0] + s.delta[0], pos[1] + s.delta[1], pos[2] + s.delta[2]],
                velocity: [0.0; 3],
                dt_s: s.dt_s,
                client_time_ms: now,
                movement_kind: s.kind,
                is_instant: s.instant,
            };
            let step_len = |a: [f32; 3], b: [f32; 3]| {
                ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2) + (a[2] - b[2]).powi(2)).sqrt()
            };
            match room.validate_and_move(1, claim, now) {
                Ok(out) => {
                    let moved = step_len(out.position, pos);
                    let limit = cfg.speed_limit(s.kind);
                    let bound = if pending || s.instant {
                        // An instant placement may cover at most the tolerance (or a normal step).
                        (limit * s.dt_s.min(cfg.max_move_dt_s)).max(0.0) + cfg.tolerance_m
                    } else {
                        limit * s.dt_s.min(cfg.max_move_dt_s) + cfg.tolerance_m
                    };
                    prop_assert!(moved <= bound + 1e-3, "moved {moved} > {bound}: {s:?}");
                    prop_assert!(s.dt_s > 0.0 && s.dt_s.is_finite());
                    prop_assert!(room.in_bounds(out.position));
                    prop_assert!(!room.penetrates_statics(out.position), "{out:?}");
                    pos = out.position;
                    pending = false;
                }
                Err(e) => {
                    if e.reason == RejectReason::Blocked {
                        pending = false;
                    }
                    // The correction is where the avatar now is, and it is a sane place.
                    prop_assert_eq!(Some(e.authoritative), room.avatar_position(1));
                    prop_assert!(!room.penetrates_statics(e.authoritative));
                    pos = e.authoritative;
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// An avatar west of a 0.5 m wall (inner face at x = 5, taller than the room: avatars are
    /// not held to the ground, so they could climb over a low one) never gets east of it,
    /// whatever sequence of in-speed moves it claims (diagonal, vertical, sliding).
    #[test]
    fn no_move_crosses_a_wall(
        start_x in -4.0f32..4.5,
        moves in prop::collection::vec(
            ((-1.0f32..3.5), (-0.5f32..1.5), (-3.0f32..3.0), (0.05f32..0.3)),
            1..80,
        ),
    ) {
        let def = RoomDefinition::from_toml_str(
            r#"
name = "wall"
bounds_min = [-10.0, -1.0, -10.0]
bounds_max = [10.0, 20.0, 10.0]
spawn = [0.0, 0.0, 0.0]
[[statics]]
shape = "box"
center = [0.0, -0.5, 0.0]
half_extents = [10.0, 0.5, 10.0]
[[statics]]
shape = "box"
center = [5.25, 10.0, 0.0]
half_extents = [0.25, 12.0, 10.0]
"#,
        )
        .unwrap();
        let mut room = RoomPhysics::new(&def, PhysicsConfig::default());
        room.add_avatar(1, [start_x, 0.0, 0.0]);
        let mut now = 0;
        for (dx, dy, dz, dt) in moves {
            now += (dt * 1000.0) as u64;
            let p = room.avatar_position(1).unwrap();
            let to = [p[0] + dx * dt * 4.0, (p[1] + dy * dt * 4.0).max(-0.5), p[2] + dz * dt * 4.0];
            let c = MoveClaim {
                position: to,
                velocity: [0.0; 3],
                dt_s: dt,
                client_time_ms: now,
                movement_kind: 3,
                is_instant: false,
            };
            let _ = room.validate_and_move(1, c, now);
            let p = room.avatar_position(1).unwrap();
            // Contact may be up to 5 mm deep (the controller nudges while sliding).
            prop_assert!(p[0] <= 4.75 + 0.005, "crossed: {p:?}");
            prop_assert!(!room.penetrates_statics(p), "sank: {p:?}");
        }
    }
}
