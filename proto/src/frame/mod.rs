//! Per-client delta-snapshot frames: [`FrameEncoder`] (server, one per client) and
//! [`FrameDecoder`] (client).
//!
//! The connection is ordered and reliable, so the encoder knows exactly what the client holds
//! (it keeps the same model) and every frame is a delta against the frame before it: a bit-packed
//! prediction residual of each entity that changed, one bit (or less) for each that did not, new
//! entities whole, removed ones by id. Frames chain by sequence number; keyframes start over; a
//! periodic FNV-1a check of everything the client should hold catches any divergence. A bandwidth
//! budget with a priority accumulator defers the least important pose updates; tiers send far
//! entities' poses on their turn only (start/stop at once). The byte layout is in
//! `docs/PROTOCOL.md`.
//!
//! Not here: interest management (which entities are visible, and their tier) is the room's job;
//! transport and resync messages are the gateway's.
//!
//! # Layout
//!
//! * `types`: the public records, settings, statistics and errors.
//! * `fields`: the model both sides keep of what a client holds, and the bit coding of its fields.
//! * `encode`: [`FrameEncoder`] (server side).
//! * `decode`: [`FrameDecoder`] (client side).
//! * `hash`: the FNV-1a check of a held set.

// Per-axis loops index several arrays in step; iterators would only obscure them.
#![allow(clippy::needless_range_loop)]

mod decode;
mod encode;
mod fields;
mod hash;
mod types;

pub use decode::FrameDecoder;
pub use encode::{EncodeScratch, FrameEncoder};
pub use hash::fnv1a32;
pub use types::{
    DecodedFrame, EncodeStats, EncoderConfig, EntityRecord, FrameError, OwnState, Visible,
};

/// Frame format version, the high nibble of the first byte.
pub const FRAME_VERSION: u8 = 1;
/// First-byte flag: keyframe (the client forgets what it held first).
pub const FLAG_KEYFRAME: u8 = 0x01;
/// First-byte flag: a 4-byte FNV-1a check follows the header.
pub const FLAG_CHECK: u8 = 0x02;
/// First-byte flag: the client's own state follows the tick.
pub const FLAG_OWN: u8 = 0x04;
/// First-byte flag: the client no longer has an own entity.
pub const FLAG_OWN_CLEAR: u8 = 0x08;
/// Largest frame the decoder accepts.
pub const MAX_FRAME_BYTES: usize = 1 << 20;
/// Most entities a client may hold.
pub const MAX_ENTITIES: usize = 1 << 16;
/// A tier-`t` entity's steady pose goes every `TIER_EVERY[t]` frames.
pub const TIER_EVERY: [u32; 4] = [1, 2, 4, 8];
// The tier turn test masks with `TIER_EVERY[t] - 1`.
const _: () = {
    let mut t = 0;
    while t < TIER_EVERY.len() {
        assert!(TIER_EVERY[t].is_power_of_two());
        t += 1;
    }
};
/// Priority a pending pose update of a tier-`t` entity gains per frame it waits.
pub const TIER_WEIGHT: [u32; 4] = [8, 4, 2, 1];
