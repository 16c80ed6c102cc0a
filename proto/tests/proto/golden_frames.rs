//! Golden scenario frames (`fixtures/golden/frames.json`, documented frame by frame in
//! `docs/PROTOCOL.md` §4.1): one short scripted stream in which each frame exercises a part of the
//! format the canonical pair of §4 does not — list and bitmap selection, an exact and a scaled
//! prediction, velocity and yaw deltas, a record with several groups, head and point deltas, a
//! generation change, OWN_CLEAR and an own state with head and point. The TypeScript decoder
//! reads the same file (`sdk/typescript/test/golden.test.ts`): a decoder with a wrong predictor,
//! a wrong selection reading or a wrong own-state coding fails on the check of some frame.
//!
//! Regenerate after a deliberate format change with
//! `PLAZA_BLESS=1 cargo test --workspace --test proto golden_frames::`.

use crate::support;

use plaza_proto::frame::{
    EncoderConfig, EntityRecord, FrameDecoder, FrameEncoder, OwnState, Visible,
};
use plaza_proto::quant::{Pose, quantize};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../fixtures/golden/frames.json"
);

fn avatar(id: u32, generation: u16, pose: Pose) -> EntityRecord {
    EntityRecord {
        id,
        generation,
        kind: 0,
        pose: quantize(&pose),
    }
}

fn at(x: f32, z: f32) -> Pose {
    Pose {
        position: [x, 0.0, z],
        anim_flags: 1,
        ..Pose::default()
    }
}

/// One scripted frame: the room tick, what the client sees, its own state, and what it shows.
struct Step {
    tick: u32,
    entities: Vec<EntityRecord>,
    own: Option<OwnState>,
    shows: &'static str,
}

fn script() -> Vec<Step> {
    let walker = |x: f32, vx: f32, yaw: f32| Pose {
        position: [x, 0.0, 2.0],
        velocity: [vx, 0.0, 0.0],
        yaw_deg: yaw,
        movement_kind: 1,
        anim_flags: 1,
        ..Pose::default()
    };
    let prop = EntityRecord {
        id: 2,
        generation: 0,
        kind: 1,
        pose: quantize(&Pose {
            position: [-3.5, 0.75, 4.25],
            ..Pose::default()
        }),
    };
    let looker = |head: [f32; 2], point: [f32; 3], flags: u16| Pose {
        position: [0.5, 0.0, -1.0],
        anim_flags: flags,
        head: Some(head),
        point_at: Some(point),
        ..Pose::default()
    };
    // Eight idle avatars (ids 10..=17) make a one-change frame cheaper as a list.
    let idle = |moving: bool, gen10: u16| -> Vec<EntityRecord> {
        (10..18u32)
            .map(|id| {
                let mut p = at(id as f32, 5.0);
                if moving && id > 10 {
                    p.velocity = [0.0, 0.0, 1.0];
                    p.movement_kind = 1;
                }
                avatar(id, if id == 10 { gen10 } else { 0 }, p)
            })
            .collect()
    };
    let own = |seq: u32, head_point: bool| OwnState {
        entity: 9,
        pose: Pose {
            position: [0.25, 0.0, 0.5],
            anim_flags: 1,
            head: head_point.then_some([12.5, -3.0]),
            point_at: head_point.then_some([1.0, 1.5, 3.0]),
            ..Pose::default()
        },
        last_input_seq: seq,
    };
    let frame = |tick, w: Pose, l: Pose, idle: Vec<EntityRecord>, own, shows| {
        let mut entities = vec![avatar(1, 0, w), prop, avatar(3, 0, l)];
        entities.extend(idle);
        Step {
            tick,
            entities,
            own,
            shows,
        }
    };
    let l0 = looker([10.0, -5.0], [2.0, 1.0, 0.0], 1);
    vec![
        frame(
            1000,
            walker(1.0, 1.5, 90.0),
            l0,
            idle(false, 0),
            Some(own(41, false)),
            "keyframe: a walker (1), a prop (2), an avatar with head and point (3), eight idle avatars (10-17), an own state",
        ),
        frame(
            1001,
            walker(1.075, 1.5, 90.0),
            l0,
            idle(false, 0),
            Some(own(42, false)),
            "list selection (1 of 11 held changed); the walker's first MOTION after it appeared is predicted at its held position (t1 == t0): residual +75 mm in x; own last_input_seq +1",
        ),
        frame(
            1002,
            walker(1.15, 1.5, 90.0),
            l0,
            idle(false, 0),
            Some(own(43, false)),
            "exact linear prediction: the walker moved as much as in the frame before, residuals 0",
        ),
        frame(
            1005,
            walker(1.35, 2.0, 95.0),
            looker([14.0, -2.0], [2.5, 1.25, -0.5], 3),
            idle(false, 0),
            Some(own(44, false)),
            "scaled prediction: 3 ticks after a 1-tick step, pred = p1 + round(75 mm × 3 / 1) = +225 mm, the walker moved +200 mm: residual -25 mm; velocity delta +10 steps in x; yaw delta +7 steps; avatar 3: one record with STATE, HEAD and POINT groups (anim flags 3, head and point deltas)",
        ),
        frame(
            1006,
            walker(1.35, 0.0, 95.0),
            looker([14.0, -2.0], [2.5, 1.25, -0.5], 3),
            idle(true, 1),
            None,
            "generation change: id 10 is removed and comes back whole with generation 1 (in new); bitmap selection (8 of the 10 held after the removal changed: the walker stops, 11-17 get a velocity); OWN_CLEAR",
        ),
        frame(
            1007,
            walker(1.35, 0.0, 95.0),
            looker([14.0, -2.0], [2.5, 1.25, -0.5], 3),
            idle(true, 1),
            Some(own(45, true)),
            "own state again, coded against the all-zero state: entity, last_input_seq, position, head and point as XOR floats against 0.0; nothing else changed (a list selection of count 0)",
        ),
    ]
}

fn generate() -> String {
    let cfg = EncoderConfig {
        budget_bytes_per_s: 0,
        broadcast_hz: 20,
        check_every: 2,
    };
    let mut enc = FrameEncoder::new(cfg);
    let mut dec = FrameDecoder::new();
    let mut out = String::from(
        "{\"about\":\"Golden scenario frames: docs/PROTOCOL.md section 4.1; asserted by proto/tests/golden_frames.rs and sdk/typescript/test/golden.test.ts. Encoder settings: budget 0, 20 Hz, check_every 2.\",\"budget_bytes_per_s\":0,\"check_every\":2,\"frames\":[",
    );
    for (i, s) in script().iter().enumerate() {
        let vis: Vec<Visible<'_>> = s
            .entities
            .iter()
            .map(|r| Visible { record: r, tier: 0 })
            .collect();
        let mut frame = Vec::new();
        enc.encode(s.tick, s.own.as_ref(), &vis, &mut frame);
        if i > 0 {
            out.push(',');
        }
        support::frame_json(
            &mut out,
            &mut dec,
            &enc,
            &frame,
            &format!(",\"shows\":\"{}\"", s.shows),
        );
        // What the client holds is exactly what the room sent.
        let mut want = s.entities.clone();
        want.sort_by_key(|r| r.id);
        assert_eq!(
            dec.entities().copied().collect::<Vec<_>>(),
            want,
            "frame {i}"
        );
        assert_eq!(dec.own(), s.own.as_ref(), "frame {i}");
    }
    out.push(']');
    support::final_json(&mut out, &dec);
    out.push_str("}\n");
    out
}

#[test]
fn scenario_frames_match_the_committed_fixture() {
    let fresh = generate();
    if std::env::var_os("PLAZA_BLESS").is_some() {
        std::fs::write(FIXTURE, &fresh).expect("write fixtures/golden/frames.json");
    }
    let committed = std::fs::read_to_string(FIXTURE).expect("fixtures/golden/frames.json");
    assert!(
        committed == fresh,
        "fixtures/golden/frames.json is stale: regenerate it (see this file's doc)"
    );
}
