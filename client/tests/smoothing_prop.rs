//! Issue 13's proptest: random sample sequences (reordering, gaps, teleports, duplicates, random
//! arrival and render times) never panic, never render NaN, and keep every rendered position
//! within the inputs' bounding box grown by the extrapolation cap (the fastest input speed times
//! the longest extrapolation travel), with tier changes (announced gaps) among them.

use plaza_client::{Extrapolation, Sample, Smoother, SmoothingConfig, Spline};
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct Step {
    dt_server: f64,
    position: [f64; 3],
    velocity: [f64; 3],
    yaw: f64,
    kind: u8,
    flags: u16,
    teleport: bool,
    delay: f64,
    duplicate: bool,
    swap: bool,
}

fn step() -> impl Strategy<Value = Step> {
    (
        prop_oneof![4 => 0.02f64..0.06, 1 => 0.0f64..0.8],
        prop::array::uniform3(-20.0f64..20.0),
        prop::array::uniform3(-6.0f64..6.0),
        -720.0f64..720.0,
        0u8..4,
        prop_oneof![Just(0u16), Just(1), Just(0x0101), Just(0x0200)],
        prop::bool::weighted(0.05),
        0.0f64..0.4,
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.1),
    )
        .prop_map(
            |(
                dt_server,
                position,
                velocity,
                yaw,
                kind,
                flags,
                teleport,
                delay,
                duplicate,
                swap,
            )| Step {
                dt_server,
                position,
                velocity,
                yaw,
                kind,
                flags,
                teleport,
                delay,
                duplicate,
                swap,
            },
        )
}

fn config() -> impl Strategy<Value = SmoothingConfig> {
    (
        prop_oneof![
            Just(Extrapolation::DAMPED),
            Just(Extrapolation::CAPPED),
            (0.0f64..0.5, 0.0f64..1.0)
                .prop_map(|(linear_s, stop_s)| Extrapolation::Damped { linear_s, stop_s }),
        ],
        prop_oneof![
            Just(Spline::Hermite),
            Just(Spline::VelocityBlending),
            Just(Spline::Linear)
        ],
        1usize..12,
    )
        .prop_map(|(extrapolation, spline, inbox_cap)| SmoothingConfig {
            extrapolation,
            spline,
            inbox_cap,
            ..SmoothingConfig::default()
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn smoothing_stays_finite_and_bounded(
        cfg in config(),
        steps in prop::collection::vec(step(), 1..80),
        frame_dts in prop::collection::vec(0.0f64..0.05, 1..400),
        gaps in prop::collection::vec(prop::option::weighted(0.1, -0.1f64..1.0), 0..80),
    ) {
        // Server times and deliveries.
        // Positions follow the velocities (a walk), plus a random jump on a teleport or one step
        // in twenty, so extrapolation past the newest sample can leave the inputs' box.
        let mut t = 10.0;
        let mut at = [0.0f64; 3];
        let mut deliveries: Vec<(f64, Sample)> = Vec::new();
        for (i, s) in steps.iter().enumerate() {
            t += s.dt_server;
            if s.teleport || i % 20 == 19 {
                at = s.position;
            } else {
                for (p, v) in at.iter_mut().zip(s.velocity) {
                    *p += v * s.dt_server;
                }
            }
            let sample = Sample {
                t,
                position: at,
                velocity: s.velocity,
                yaw_deg: s.yaw,
                movement_kind: s.kind,
                anim_flags: s.flags,
                head: Some([s.yaw, s.yaw / 10.0]),
                point_at: Some(at),
                teleport: s.teleport,
            };
            let arrival = t + 0.05 + s.delay;
            deliveries.push((arrival, sample));
            if s.duplicate {
                deliveries.push((arrival + 0.01, sample));
            }
        }
        for (i, s) in steps.iter().enumerate() {
            if s.swap && i + 1 < deliveries.len() {
                let a = deliveries[i].0;
                deliveries[i].0 = deliveries[i + 1].0;
                deliveries[i + 1].0 = a;
            }
        }
        deliveries.sort_by(|a, b| a.0.total_cmp(&b.0));

        let mut lo = [f64::INFINITY; 3];
        let mut hi = [f64::NEG_INFINITY; 3];
        let mut vmax: f64 = 0.0;
        for (_, s) in &deliveries {
            for k in 0..3 {
                lo[k] = lo[k].min(s.position[k]);
                hi[k] = hi[k].max(s.position[k]);
            }
            vmax = vmax.max((s.velocity.iter().map(|v| v * v).sum::<f64>()).sqrt());
        }
        let slack = vmax * cfg.extrapolation.max_travel_s() + 1e-9;

        let mut sm = Smoother::new(cfg);
        let mut now = 10.0;
        let mut next = 0;
        for dt in frame_dts {
            now += dt;
            while next < deliveries.len() && deliveries[next].0 <= now {
                // Tier changes: an announced gap (any, even beyond the clamps) before a sample.
                if let Some(&Some(g)) = gaps.get(next) {
                    sm.expect_gap(g);
                }
                sm.push(deliveries[next].1, deliveries[next].0);
                next += 1;
            }
            if let Some(r) = sm.advance(now) {
                prop_assert!(r.render_t.is_finite() && r.yaw_deg.is_finite());
                for k in 0..3 {
                    let p = r.position[k];
                    prop_assert!(p.is_finite(), "NaN at {now}: {r:?}");
                    prop_assert!(
                        p >= lo[k] - slack && p <= hi[k] + slack,
                        "axis {k} at {now}: {p} outside [{}, {}] ± {slack}", lo[k], hi[k]
                    );
                }
                if let Some(h) = r.head {
                    prop_assert!(h.iter().all(|v| v.is_finite()));
                }
                if let Some(p) = r.point_at {
                    prop_assert!(p.iter().all(|v| v.is_finite()));
                }
            }
        }
    }
}
