//! Property tests: `decode(base, encode(base, next)) == quantize(next)` over arbitrary entity
//! sets, churn, generations, tiers and budgets; and fail-closed decoding.

use plaza_proto::frame::{
    EncodeScratch, EncoderConfig, EntityRecord, FrameDecoder, FrameEncoder, OwnState, Visible,
};
use plaza_proto::quant::{Pose, QuantPose, quantize};
use proptest::prelude::*;

fn arb_quant() -> impl Strategy<Value = QuantPose> {
    (
        prop_oneof![
            4 => prop::array::uniform3(-300_000i32..300_000),
            1 => prop::array::uniform3(any::<i32>()),
        ],
        prop::array::uniform3(any::<i16>()),
        any::<u16>(),
        any::<u8>(),
        any::<u16>(),
        prop::option::of(prop::array::uniform2(any::<i16>())),
        prop::option::of(prop::array::uniform3(any::<i32>())),
    )
        .prop_map(
            |(position_mm, velocity, yaw, movement_kind, anim_flags, head, point_at_mm)| {
                QuantPose {
                    position_mm,
                    velocity,
                    yaw,
                    movement_kind,
                    anim_flags,
                    head,
                    point_at_mm,
                }
            },
        )
}

fn arb_pose() -> impl Strategy<Value = Pose> {
    (
        prop::array::uniform3(-500.0f32..500.0),
        prop::array::uniform3(-8.0f32..8.0),
        -720.0f32..720.0,
        0u8..4,
    )
        .prop_map(|(position, velocity, yaw_deg, movement_kind)| Pose {
            position,
            velocity,
            yaw_deg,
            movement_kind,
            ..Pose::default()
        })
}

/// One frame's world: which of 48 ids are visible, with generation, pose and tier.
#[derive(Clone, Debug)]
struct Step {
    present: Vec<(u32, u16, u8, QuantPose, u8)>,
    own: Option<(u32, Pose, u32)>,
    tick_step: u32,
}

fn arb_steps() -> impl Strategy<Value = Vec<Step>> {
    let entity = (0u32..48, 0u16..3, 0u8..2, arb_quant(), 0u8..6);
    let step = (
        prop::collection::vec(entity, 0..24),
        prop::option::of((0u32..3, arb_pose(), any::<u32>())),
        1u32..4,
    )
        .prop_map(|(mut present, own, tick_step)| {
            present.sort_by_key(|e| e.0);
            present.dedup_by_key(|e| e.0);
            Step {
                present,
                own,
                tick_step,
            }
        });
    prop::collection::vec(step, 1..20)
}

/// A moving variant: the previous step's poses nudged, so deltas (not only adds) are exercised.
fn evolve(steps: &[Step]) -> Vec<Step> {
    let mut out = Vec::new();
    for s in steps {
        out.push(s.clone());
        let mut moved = s.clone();
        for e in &mut moved.present {
            e.3.position_mm[0] = e.3.position_mm[0].wrapping_add(37);
            e.3.position_mm[2] = e.3.position_mm[2].wrapping_sub(5);
        }
        out.push(moved);
    }
    out
}

fn run(steps: &[Step], cfg: EncoderConfig, exact: bool) -> Result<(), TestCaseError> {
    let mut enc = FrameEncoder::new(cfg);
    let mut dec = FrameDecoder::new();
    let (mut reused, mut buf) = (
        FrameDecoder::new(),
        plaza_proto::frame::DecodedFrame::default(),
    );
    let mut tick = 1000u32;
    for (n, s) in steps.iter().enumerate() {
        tick = tick.wrapping_add(s.tick_step);
        let recs = records(s);
        let vis: Vec<Visible<'_>> = recs
            .iter()
            .zip(&s.present)
            .map(|(r, e)| Visible {
                record: r,
                tier: if exact { 0 } else { e.4 },
            })
            .collect();
        let own = s.own.map(|(entity, pose, last_input_seq)| OwnState {
            entity,
            pose,
            last_input_seq,
        });
        if n == 7 {
            enc.request_keyframe();
        }
        let mut out = Vec::new();
        let st = enc.encode(tick, own.as_ref(), &vis, &mut out);
        prop_assert_eq!(st.bytes, out.len());
        let d = dec
            .apply(&out)
            .map_err(|e| TestCaseError::fail(format!("frame {n}: {e}")))?;
        // The same frames into one reused `DecodedFrame` decode to the same.
        reused
            .apply_into(&out, &mut buf)
            .map_err(|e| TestCaseError::fail(format!("frame {n}, apply_into: {e}")))?;
        prop_assert_eq!(&buf, &d);
        prop_assert_eq!(reused.check(), dec.check());
        prop_assert_eq!(d.tick, tick);
        prop_assert_eq!(
            dec.check(),
            enc.held_check(),
            "decoder and encoder model agree"
        );
        prop_assert_eq!(dec.own(), own.as_ref());
        if exact {
            prop_assert_eq!(st.deferred, 0);
            prop_assert_eq!(dec.len(), recs.len());
            for r in &recs {
                let mut want = *r;
                want.pose = want.pose.canonical();
                prop_assert_eq!(dec.get(r.id), Some(&want));
            }
        } else {
            // Whatever was deferred, the client holds exactly the visible set (ids, generations).
            let ids: Vec<(u32, u16)> = dec.entities().map(|e| (e.id, e.generation)).collect();
            let want: Vec<(u32, u16)> = recs.iter().map(|r| (r.id, r.generation)).collect();
            prop_assert_eq!(ids, want);
        }
    }
    Ok(())
}

fn records(s: &Step) -> Vec<EntityRecord> {
    s.present
        .iter()
        .map(|&(id, generation, kind, pose, _)| EntityRecord {
            id,
            generation,
            kind,
            pose,
        })
        .collect()
}

/// Clients encoded in turn with one shared [`EncodeScratch`] (as a room's encode thread does)
/// get the same frames, byte for byte, as encoders that keep their own.
fn shared_scratch_is_invisible(
    clients: &[Vec<Step>],
    cfg: EncoderConfig,
) -> Result<(), TestCaseError> {
    let mut own: Vec<FrameEncoder> = clients
        .iter()
        .map(|_| FrameEncoder::new(cfg.clone()))
        .collect();
    let mut shared: Vec<FrameEncoder> = clients
        .iter()
        .map(|_| FrameEncoder::new(cfg.clone()))
        .collect();
    let mut scratch = EncodeScratch::default();
    let rounds = clients.iter().map(Vec::len).max().unwrap_or(0);
    for n in 0..rounds {
        for (c, steps) in clients.iter().enumerate() {
            let s = &steps[n % steps.len()];
            let recs = records(s);
            let vis: Vec<Visible<'_>> = recs
                .iter()
                .zip(&s.present)
                .map(|(record, e)| Visible { record, tier: e.4 })
                .collect();
            let tick = 1000 + 2 * n as u32;
            if n == 5 {
                own[c].request_keyframe();
                shared[c].request_keyframe();
            }
            let (mut a, mut b) = (Vec::new(), Vec::new());
            let sa = own[c].encode(tick, None, &vis, &mut a);
            let sb = shared[c].encode_with(&mut scratch, tick, None, &vis, &mut b);
            prop_assert_eq!(&a, &b, "client {} frame {}", c, n);
            prop_assert_eq!(sa, sb);
            prop_assert_eq!(own[c].held_check(), shared[c].held_check());
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn a_shared_scratch_encodes_the_same_frames(
        a in arb_steps(), b in arb_steps(), c in arb_steps(), budget in prop_oneof![Just(0u32), 0u32..3000],
    ) {
        let cfg = EncoderConfig { budget_bytes_per_s: budget, broadcast_hz: 20, check_every: 2 };
        shared_scratch_is_invisible(&[evolve(&a), evolve(&b), evolve(&c)], cfg)?;
    }

    #[test]
    fn decode_of_encode_is_quantize_exactly(steps in arb_steps()) {
        run(&evolve(&steps), EncoderConfig { budget_bytes_per_s: 0, broadcast_hz: 20, check_every: 3 }, true)?;
    }

    #[test]
    fn tiers_and_tight_budgets_keep_client_and_server_in_step(steps in arb_steps(), budget in 0u32..3000) {
        run(&evolve(&steps), EncoderConfig { budget_bytes_per_s: budget, broadcast_hz: 20, check_every: 2 }, false)?;
    }

    #[test]
    fn quantized_float_poses_round_trip(pose in arb_pose(), id in any::<u32>(), generation in any::<u16>()) {
        let rec = EntityRecord { id, generation, kind: 1, pose: quantize(&pose) };
        let mut enc = FrameEncoder::new(EncoderConfig::default());
        let mut dec = FrameDecoder::new();
        let mut out = Vec::new();
        enc.encode(0, None, &[Visible { record: &rec, tier: 2 }], &mut out);
        dec.apply(&out).unwrap();
        prop_assert_eq!(dec.get(id), Some(&rec));
        prop_assert_eq!(dec.tier(id), Some(2));
    }

    #[test]
    fn corrupted_frames_fail_closed(steps in arb_steps(), flip in any::<(usize, u8)>(), cut in any::<usize>()) {
        let mut enc = FrameEncoder::new(EncoderConfig { budget_bytes_per_s: 0, broadcast_hz: 20, check_every: 1 });
        let mut dec = FrameDecoder::new();
        let mut tick = 0;
        for s in &steps {
            tick += s.tick_step;
            let recs = records(s);
            let vis: Vec<Visible<'_>> = recs.iter().map(|r| Visible { record: r, tier: 0 }).collect();
            let mut out = Vec::new();
            enc.encode(tick, None, &vis, &mut out);
            let before = (dec.check(), dec.len(), dec.last_seq());
            // A truncated frame is rejected and changes nothing.
            let short = &out[..cut % out.len()];
            prop_assert!(dec.apply(short).is_err());
            prop_assert_eq!((dec.check(), dec.len(), dec.last_seq()), before);
            // A bit-flipped frame either fails (state unchanged) or, if it still parses and
            // passes the check, yields the same state the encoder holds.
            let mut bad = out.clone();
            let i = flip.0 % bad.len();
            bad[i] ^= flip.1 | 1;
            let mut probe = dec.clone();
            if probe.apply(&bad).is_ok() {
                // Only possible when the flip hit what the check does not cover (the tick, a
                // tier); the held records must still match.
                prop_assert_eq!(probe.check(), enc.held_check());
            }
            dec.apply(&out).unwrap();
        }
    }
}
