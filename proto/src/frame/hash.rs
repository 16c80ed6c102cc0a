//! The FNV-1a check of everything a client holds (what a frame's check carries).

use super::fields::Held;
use super::types::OwnState;
use crate::quant::{FNV_OFFSET, Pose, fnv_feed};

/// Computes the 32-bit FNV-1a hash of `bytes`.
pub fn fnv1a32(bytes: &[u8]) -> u32 {
    let mut h = FNV_OFFSET;
    fnv_feed(&mut h, bytes);
    h
}

pub(super) fn state_hash<'a>(held: impl Iterator<Item = &'a Held>, own: Option<&OwnState>) -> u32 {
    let mut h = FNV_OFFSET;
    for e in held {
        fnv_feed(&mut h, &e.rec.id.to_le_bytes());
        fnv_feed(&mut h, &e.rec.generation.to_le_bytes());
        fnv_feed(&mut h, &[e.rec.kind]);
        e.rec.pose.hash_into(&mut h);
    }
    match own {
        Some(o) => {
            fnv_feed(&mut h, &[1]);
            fnv_feed(&mut h, &o.entity.to_le_bytes());
            fnv_feed(&mut h, &o.last_input_seq.to_le_bytes());
            for f in pose_floats(&o.pose) {
                fnv_feed(&mut h, &f.to_le_bytes());
            }
            fnv_feed(&mut h, &[o.pose.movement_kind]);
            fnv_feed(&mut h, &o.pose.anim_flags.to_le_bytes());
            fnv_feed(
                &mut h,
                &[
                    u8::from(o.pose.head.is_some()),
                    u8::from(o.pose.point_at.is_some()),
                ],
            );
        }
        None => fnv_feed(&mut h, &[0]),
    }
    h
}

/// The bits of every float of a pose (absent options as 0).
pub(super) fn pose_floats(p: &Pose) -> [u32; 12] {
    let head = p.head.unwrap_or_default();
    let pt = p.point_at.unwrap_or_default();
    [
        p.position[0].to_bits(),
        p.position[1].to_bits(),
        p.position[2].to_bits(),
        p.velocity[0].to_bits(),
        p.velocity[1].to_bits(),
        p.velocity[2].to_bits(),
        p.yaw_deg.to_bits(),
        head[0].to_bits(),
        head[1].to_bits(),
        pt[0].to_bits(),
        pt[1].to_bits(),
        pt[2].to_bits(),
    ]
}
