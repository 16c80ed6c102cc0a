//! Fuzzes the encoder and decoder together: the input bytes script a sequence of frames (which
//! of 32 ids are visible, their generation, pose nudges, tiers, own state, budget, keyframe
//! requests). Every frame must decode, and the client must hold what the encoder says it holds;
//! with no budget and tier 0, exactly the visible records.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plaza_proto::frame::{EncoderConfig, EntityRecord, FrameDecoder, FrameEncoder, OwnState, Visible};
use plaza_proto::quant::{Pose, QuantPose};

fuzz_target!(|data: &[u8]| {
    let Some((&cfg_byte, mut rest)) = data.split_first() else { return };
    let exact = cfg_byte & 1 == 0;
    let budget = if exact { 0 } else { u32::from(cfg_byte) * 16 };
    let mut enc = FrameEncoder::new(EncoderConfig {
        budget_bytes_per_s: budget,
        broadcast_hz: 20,
        check_every: u32::from(cfg_byte >> 5),
    });
    let mut dec = FrameDecoder::new();
    let mut world: Vec<Option<EntityRecord>> = vec![None; 32];
    let mut tick = 0u32;
    while rest.len() >= 4 {
        let (op, tail) = rest.split_at(4);
        rest = tail;
        let id = u32::from(op[0] & 31);
        let slot = &mut world[id as usize];
        match op[0] >> 5 {
            0 => *slot = None,
            1 => {
                let generation = slot.map_or(0, |r| r.generation.wrapping_add(1));
                *slot = Some(EntityRecord { id, generation, kind: op[1] & 1, pose: QuantPose::default() });
            }
            2 | 3 => {
                if let Some(r) = slot {
                    let p = &mut r.pose;
                    p.position_mm[usize::from(op[1] % 3)] += i32::from(op[2] as i8) * 37;
                    p.velocity[usize::from(op[3] % 3)] = i16::from(op[3] as i8);
                    p.yaw = u16::from(op[2]) * 2;
                }
            }
            4 => {
                if let Some(r) = slot {
                    r.pose.head = (op[1] & 1 == 1).then_some([i16::from(op[2] as i8), 3]);
                    r.pose.point_at_mm = (op[1] & 2 == 2).then_some([i32::from(op[3]), 0, -5]);
                    r.pose.anim_flags = u16::from(op[2]);
                    r.pose.movement_kind = op[3] & 3;
                }
            }
            5 => enc.request_keyframe(),
            _ => {
                tick = tick.wrapping_add(u32::from(op[1] & 7) + 1);
                let recs: Vec<EntityRecord> = world.iter().flatten().copied().collect();
                let vis: Vec<Visible<'_>> = recs
                    .iter()
                    .map(|r| Visible { record: r, tier: if exact { 0 } else { op[2] & 3 } })
                    .collect();
                let own = (op[3] & 1 == 1).then(|| OwnState {
                    entity: u32::from(op[3] >> 6),
                    pose: Pose { position: [f32::from(op[2]) * 0.01, 0.0, 1.0], ..Pose::default() },
                    last_input_seq: tick,
                });
                let mut out = Vec::new();
                enc.encode(tick, own.as_ref(), &vis, &mut out);
                dec.apply(&out).expect("every encoded frame decodes");
                assert_eq!(dec.check(), enc.held_check());
                if exact {
                    assert_eq!(dec.entities().copied().collect::<Vec<_>>(), recs);
                }
            }
        }
    }
});
