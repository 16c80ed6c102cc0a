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

// Per-axis loops index several arrays in step; iterators would only obscure them.
#![allow(clippy::needless_range_loop)]

use crate::bits::{BitCounter, BitReader, BitSink, BitWriter};
use crate::quant::{FNV_OFFSET, Pose, QuantPose, YAW_STEPS, fnv_feed};

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

/// Change-mask group: position, velocity and yaw.
const G_MOTION: u8 = 0x01;
/// Change-mask group: movement kind and animation flags.
const G_STATE: u8 = 0x02;
/// Change-mask group: head IK.
const G_HEAD: u8 = 0x04;
/// Change-mask group: point-at.
const G_POINT: u8 = 0x08;
/// Change-mask group: tier.
const G_TIER: u8 = 0x10;

/// Exp-Golomb orders of the residuals (tuned on the random-walk bandwidth bench).
const K_POS: u32 = 1;
const K_VEL: u32 = 0;
const K_YAW: u32 = 0;
const K_TICK: u32 = 1;
const K_SEL_GAP: u32 = 2;

/// Computes the 32-bit FNV-1a hash of `bytes`.
pub fn fnv1a32(bytes: &[u8]) -> u32 {
    let mut h = FNV_OFFSET;
    fnv_feed(&mut h, bytes);
    h
}

/// One entity as a client holds it.
///
/// `repr(C)`: the id, generation and kind come first, so the encoder's merge of what a client
/// holds with what it should hold (ids, then the pose only when ids match) reads one cache line
/// per entity where it can.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct EntityRecord {
    /// Entity id (unique in the room while the entity lives).
    pub id: u32,
    /// Life of the entity under its id; a new generation is a new entity.
    pub generation: u16,
    /// 0 avatar, 1 prop.
    pub kind: u8,
    /// The quantized pose.
    pub pose: QuantPose,
}

/// An entity a client should hold this frame, with its tier for that client.
#[derive(Clone, Copy, Debug)]
pub struct Visible<'a> {
    /// The entity's record (quantized once per tick by the room).
    pub record: &'a EntityRecord,
    /// 0 near .. 3 far: a tier-`t` entity's steady pose goes every `TIER_EVERY[t]` frames.
    pub tier: u8,
}

/// The client's own avatar: its full-precision pose and the last input the server applied.
#[derive(Clone, Debug, PartialEq)]
pub struct OwnState {
    /// The client's own entity id.
    pub entity: u32,
    /// Full-precision pose (sent bit-exact) for prediction and reconciliation.
    pub pose: Pose,
    /// The last input sequence the server applied.
    pub last_input_seq: u32,
}

/// Encoder settings.
#[derive(Clone, Debug)]
pub struct EncoderConfig {
    /// Bandwidth budget in bytes per second (0 = unlimited). Class 4,000 (32 kbit/s), stadium
    /// 32,000 (256 kbit/s). Default 4,000.
    pub budget_bytes_per_s: u32,
    /// Frames per second this encoder is called at (spreads the budget). Default 20.
    pub broadcast_hz: u32,
    /// A check goes every `check_every` frames (0 = never; keyframes always carry one), on the
    /// frames whose sequence plus the client's own entity id is a multiple of it.
    /// Default 20.
    pub check_every: u32,
}

impl Default for EncoderConfig {
    fn default() -> Self {
        Self {
            budget_bytes_per_s: 4_000,
            broadcast_hz: 20,
            check_every: 20,
        }
    }
}

/// What one [`FrameEncoder::encode`] did.
#[derive(Clone, Copy, Debug, Default)]
pub struct EncodeStats {
    /// Bytes appended.
    pub bytes: usize,
    /// Whether the frame is a keyframe.
    pub keyframe: bool,
    /// Entities sent (changed or new).
    pub changed: u32,
    /// Entities removed (including those whose generation changed).
    pub removed: u32,
    /// Pose updates deferred by the bandwidth budget.
    pub deferred: u32,
}

/// What a frame told the client.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DecodedFrame {
    /// This frame's sequence number.
    pub seq: u32,
    /// The sequence number of the frame it applies onto.
    pub base_seq: u32,
    /// The room tick the frame describes.
    pub tick: u32,
    /// Whether the client forgot what it held first.
    pub keyframe: bool,
    /// Ids whose record changed or arrived, ascending.
    pub changed: Vec<u32>,
    /// Ids removed (a new generation is removed and in `changed`), ascending.
    pub removed: Vec<u32>,
    /// Whether the frame carried a check (and it matched).
    pub checked: bool,
}

/// Why a frame was not applied. On any of these the client should send `Resync`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    /// The frame ended early.
    #[error("truncated frame")]
    Truncated,
    /// The frame's base is not the last frame applied.
    #[error("chain break: expected base {expected}, got {got}")]
    ChainBreak {
        /// The last sequence number applied (0 when none).
        expected: u32,
        /// The base the frame named.
        got: u32,
    },
    /// The held state does not hash to the frame's check.
    #[error("check mismatch: expected {expected:#010x}, got {got:#010x}")]
    CheckMismatch {
        /// The check the frame carried.
        expected: u32,
        /// The hash of what the client would hold.
        got: u32,
    },
    /// The frame breaks the format.
    #[error("malformed frame: {0}")]
    Malformed(&'static str),
    /// The frame or a count in it exceeds the limits.
    #[error("frame too large")]
    TooLarge,
}

// === Shared model ===

/// What a client holds for one entity, plus the predictor state both sides keep.
///
/// `repr(C)`, fields the encoder reads for every held entity first (tier, priority, id), the
/// pose after them and the predictor state last.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
struct Held {
    tier: u8,
    /// Encoder only: priority accumulated while a pose update waits.
    acc: u32,
    rec: EntityRecord,
    /// Position before the last motion update (predictor).
    prev_pos: [i32; 3],
    /// Tick of the last motion update.
    pose_tick: u32,
    /// Tick of the motion update before it.
    prev_tick: u32,
}

impl Held {
    fn new(rec: EntityRecord, tier: u8, tick: u32) -> Self {
        Self {
            rec,
            tier,
            prev_pos: rec.pose.position_mm,
            pose_tick: tick,
            prev_tick: tick,
            acc: 0,
        }
    }

    /// Linear extrapolation of the last two motion updates, for a moving entity.
    fn predict(&self, tick: u32) -> [i32; 3] {
        let p1 = self.rec.pose.position_mm;
        if self.rec.pose.at_rest() {
            return p1;
        }
        let dt1 = i64::from(self.pose_tick.wrapping_sub(self.prev_tick));
        let dt = i64::from(tick.wrapping_sub(self.pose_tick));
        if dt1 == 0 || dt1 > 1 << 16 || dt > 1 << 16 {
            return p1;
        }
        let mut out = p1;
        for i in 0..3 {
            let d = i64::from(p1[i]) - i64::from(self.prev_pos[i]);
            let step = if dt == dt1 { d } else { div_round(d * dt, dt1) };
            out[i] =
                (i64::from(p1[i]) + step).clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
        }
        out
    }

    fn apply(&mut self, mask: u8, p: &QuantPose, tier: u8, tick: u32) {
        let pose = &mut self.rec.pose;
        if mask & G_MOTION != 0 {
            self.prev_pos = pose.position_mm;
            self.prev_tick = self.pose_tick;
            self.pose_tick = tick;
            pose.position_mm = p.position_mm;
            pose.velocity = p.velocity;
            pose.yaw = p.yaw;
        }
        if mask & G_STATE != 0 {
            pose.movement_kind = p.movement_kind;
            pose.anim_flags = p.anim_flags;
        }
        if mask & G_HEAD != 0 {
            pose.head = p.head;
        }
        if mask & G_POINT != 0 {
            pose.point_at_mm = p.point_at_mm;
        }
        if mask & G_TIER != 0 {
            self.tier = tier;
        }
    }
}

/// Rounds `a / b` to nearest, halves away from zero (`b > 0`).
fn div_round(a: i64, b: i64) -> i64 {
    if a >= 0 {
        (a + b / 2) / b
    } else {
        -((-a + b / 2) / b)
    }
}

/// Signed shortest yaw step from `a` to `b`, in `-256..256`.
fn yaw_diff(a: u16, b: u16) -> i64 {
    let steps = i64::from(YAW_STEPS);
    let d = (i64::from(b) - i64::from(a)).rem_euclid(steps);
    if d >= steps / 2 { d - steps } else { d }
}

fn groups(old: &QuantPose, new: &QuantPose) -> u8 {
    let mut mask = 0;
    if old.position_mm != new.position_mm || old.velocity != new.velocity || old.yaw != new.yaw {
        mask |= G_MOTION;
    }
    if old.movement_kind != new.movement_kind || old.anim_flags != new.anim_flags {
        mask |= G_STATE;
    }
    if old.head != new.head {
        mask |= G_HEAD;
    }
    if old.point_at_mm != new.point_at_mm {
        mask |= G_POINT;
    }
    mask
}

fn state_hash<'a>(held: impl Iterator<Item = &'a Held>, own: Option<&OwnState>) -> u32 {
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
fn pose_floats(p: &Pose) -> [u32; 12] {
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

fn own_eq(a: &OwnState, b: &OwnState) -> bool {
    a.entity == b.entity
        && a.last_input_seq == b.last_input_seq
        && pose_floats(&a.pose) == pose_floats(&b.pose)
        && a.pose.movement_kind == b.pose.movement_kind
        && a.pose.anim_flags == b.pose.anim_flags
        && a.pose.head.is_some() == b.pose.head.is_some()
        && a.pose.point_at.is_some() == b.pose.point_at.is_some()
}

const OWN_ZERO: OwnState = OwnState {
    entity: 0,
    pose: Pose {
        position: [0.0; 3],
        velocity: [0.0; 3],
        yaw_deg: 0.0,
        movement_kind: 0,
        anim_flags: 0,
        head: None,
        point_at: None,
    },
    last_input_seq: 0,
};

// === Bit coding of records ===

fn write_xor_f32<S: BitSink>(w: &mut S, old: f32, new: f32) {
    let x = old.to_bits() ^ new.to_bits();
    if x == 0 {
        w.bit(false);
        return;
    }
    w.bit(true);
    let trail = x.trailing_zeros();
    let len = 32 - x.leading_zeros() - trail;
    w.put(u64::from(trail), 5);
    w.put(u64::from(len - 1), 5);
    w.put(u64::from(x >> trail), len);
}

fn read_xor_f32(r: &mut BitReader<'_>, old: f32) -> Result<f32, FrameError> {
    if !r.bit()? {
        return Ok(old);
    }
    let trail = r.get(5)? as u32;
    let len = r.get(5)? as u32 + 1;
    if trail + len > 32 {
        return Err(FrameError::Malformed("float field"));
    }
    let x = (r.get(len)? as u32) << trail;
    Ok(f32::from_bits(old.to_bits() ^ x))
}

fn write_own<S: BitSink>(w: &mut S, base: &OwnState, own: &OwnState) {
    if own.entity == base.entity {
        w.bit(false);
    } else {
        w.bit(true);
        w.put(u64::from(own.entity), 32);
    }
    w.seg(
        i64::from(own.last_input_seq.wrapping_sub(base.last_input_seq) as i32),
        2,
    );
    let (b, p) = (&base.pose, &own.pose);
    for i in 0..3 {
        write_xor_f32(w, b.position[i], p.position[i]);
    }
    for i in 0..3 {
        write_xor_f32(w, b.velocity[i], p.velocity[i]);
    }
    write_xor_f32(w, b.yaw_deg, p.yaw_deg);
    w.put(u64::from(p.movement_kind & 3), 2);
    if p.anim_flags == b.anim_flags {
        w.bit(false);
    } else {
        w.bit(true);
        w.put(u64::from(p.anim_flags), 16);
    }
    match p.head {
        Some(h) => {
            w.bit(true);
            let bh = b.head.unwrap_or_default();
            write_xor_f32(w, bh[0], h[0]);
            write_xor_f32(w, bh[1], h[1]);
        }
        None => w.bit(false),
    }
    match p.point_at {
        Some(a) => {
            w.bit(true);
            let ba = b.point_at.unwrap_or_default();
            for i in 0..3 {
                write_xor_f32(w, ba[i], a[i]);
            }
        }
        None => w.bit(false),
    }
}

fn read_own(r: &mut BitReader<'_>, base: &OwnState) -> Result<OwnState, FrameError> {
    let entity = if r.bit()? {
        r.get(32)? as u32
    } else {
        base.entity
    };
    let d = r.seg(2)?;
    let d = i32::try_from(d).map_err(|_| FrameError::Malformed("input seq"))?;
    let last_input_seq = base.last_input_seq.wrapping_add(d as u32);
    let b = &base.pose;
    let mut p = Pose::default();
    for i in 0..3 {
        p.position[i] = read_xor_f32(r, b.position[i])?;
    }
    for i in 0..3 {
        p.velocity[i] = read_xor_f32(r, b.velocity[i])?;
    }
    p.yaw_deg = read_xor_f32(r, b.yaw_deg)?;
    p.movement_kind = r.get(2)? as u8;
    p.anim_flags = if r.bit()? {
        r.get(16)? as u16
    } else {
        b.anim_flags
    };
    if r.bit()? {
        let bh = b.head.unwrap_or_default();
        p.head = Some([read_xor_f32(r, bh[0])?, read_xor_f32(r, bh[1])?]);
    }
    if r.bit()? {
        let ba = b.point_at.unwrap_or_default();
        p.point_at = Some([
            read_xor_f32(r, ba[0])?,
            read_xor_f32(r, ba[1])?,
            read_xor_f32(r, ba[2])?,
        ]);
    }
    Ok(OwnState {
        entity,
        pose: p,
        last_input_seq,
    })
}

fn write_head<S: BitSink>(w: &mut S, old: Option<[i16; 2]>, new: Option<[i16; 2]>) {
    match new {
        Some(h) => {
            w.bit(true);
            let (base, k) = match old {
                Some(o) => (o, 1),
                None => ([0, 0], 4),
            };
            w.seg(i64::from(h[0]) - i64::from(base[0]), k);
            w.seg(i64::from(h[1]) - i64::from(base[1]), k);
        }
        None => w.bit(false),
    }
}

fn read_head(r: &mut BitReader<'_>, old: Option<[i16; 2]>) -> Result<Option<[i16; 2]>, FrameError> {
    if !r.bit()? {
        return Ok(None);
    }
    let (base, k) = match old {
        Some(o) => (o, 1),
        None => ([0, 0], 4),
    };
    let mut h = [0i16; 2];
    for i in 0..2 {
        let v = i64::from(base[i]) + r.seg(k)?;
        h[i] = i16::try_from(v).map_err(|_| FrameError::Malformed("head"))?;
    }
    Ok(Some(h))
}

fn write_point<S: BitSink>(w: &mut S, old: Option<[i32; 3]>, new: Option<[i32; 3]>, pos: [i32; 3]) {
    match new {
        Some(a) => {
            w.bit(true);
            let (base, k) = match old {
                Some(o) => (o, 4),
                None => (pos, 8),
            };
            for i in 0..3 {
                w.seg(i64::from(a[i]) - i64::from(base[i]), k);
            }
        }
        None => w.bit(false),
    }
}

fn read_point(
    r: &mut BitReader<'_>,
    old: Option<[i32; 3]>,
    pos: [i32; 3],
) -> Result<Option<[i32; 3]>, FrameError> {
    if !r.bit()? {
        return Ok(None);
    }
    let (base, k) = match old {
        Some(o) => (o, 4),
        None => (pos, 8),
    };
    let mut a = [0i32; 3];
    for i in 0..3 {
        a[i] = add_i32(base[i], r.seg(k)?, "point-at")?;
    }
    Ok(Some(a))
}

fn add_i32(base: i32, d: i64, what: &'static str) -> Result<i32, FrameError> {
    i64::from(base)
        .checked_add(d)
        .and_then(|v| i32::try_from(v).ok())
        .ok_or(FrameError::Malformed(what))
}

fn add_i16(base: i16, d: i64, what: &'static str) -> Result<i16, FrameError> {
    i64::from(base)
        .checked_add(d)
        .and_then(|v| i16::try_from(v).ok())
        .ok_or(FrameError::Malformed(what))
}

/// Writes the change of a held entity: mask, then each group's residual.
fn write_change<S: BitSink>(w: &mut S, h: &Held, mask: u8, p: &QuantPose, tier: u8, tick: u32) {
    if mask == G_MOTION {
        w.bit(true);
    } else {
        w.bit(false);
        w.put(u64::from(mask), 5);
    }
    let old = &h.rec.pose;
    if mask & G_MOTION != 0 {
        let pred = h.predict(tick);
        for i in 0..3 {
            w.seg(i64::from(p.position_mm[i]) - i64::from(pred[i]), K_POS);
        }
        if p.velocity == old.velocity {
            w.bit(false);
        } else {
            w.bit(true);
            for i in 0..3 {
                w.seg(i64::from(p.velocity[i]) - i64::from(old.velocity[i]), K_VEL);
            }
        }
        if p.yaw == old.yaw {
            w.bit(false);
        } else {
            w.bit(true);
            w.seg(yaw_diff(old.yaw, p.yaw), K_YAW);
        }
    }
    if mask & G_STATE != 0 {
        w.put(u64::from(p.movement_kind & 3), 2);
        w.put(u64::from(p.anim_flags), 16);
    }
    if mask & G_HEAD != 0 {
        write_head(w, old.head, p.head);
    }
    if mask & G_POINT != 0 {
        // Relative to the position the client holds after this change.
        let pos = if mask & G_MOTION != 0 {
            p.position_mm
        } else {
            old.position_mm
        };
        write_point(w, old.point_at_mm, p.point_at_mm, pos);
    }
    if mask & G_TIER != 0 {
        w.put(u64::from(tier & 3), 2);
    }
}

/// Reads a change and applies it to `h`.
fn read_change(r: &mut BitReader<'_>, h: &mut Held, tick: u32) -> Result<(), FrameError> {
    let mask = if r.bit()? { G_MOTION } else { r.get(5)? as u8 };
    if mask == 0 {
        return Err(FrameError::Malformed("empty change"));
    }
    let old = h.rec.pose;
    let mut p = old;
    if mask & G_MOTION != 0 {
        let pred = h.predict(tick);
        for i in 0..3 {
            p.position_mm[i] = add_i32(pred[i], r.seg(K_POS)?, "position")?;
        }
        if r.bit()? {
            for i in 0..3 {
                p.velocity[i] = add_i16(old.velocity[i], r.seg(K_VEL)?, "velocity")?;
            }
        }
        if r.bit()? {
            let d = r.seg(K_YAW)?;
            let steps = i64::from(YAW_STEPS);
            if d.abs() >= steps {
                return Err(FrameError::Malformed("yaw"));
            }
            p.yaw = (i64::from(old.yaw) + d).rem_euclid(steps) as u16;
        }
    }
    if mask & G_STATE != 0 {
        p.movement_kind = r.get(2)? as u8;
        p.anim_flags = r.get(16)? as u16;
    }
    if mask & G_HEAD != 0 {
        p.head = read_head(r, old.head)?;
    }
    if mask & G_POINT != 0 {
        p.point_at_mm = read_point(r, old.point_at_mm, p.position_mm)?;
    }
    let tier = if mask & G_TIER != 0 {
        r.get(2)? as u8
    } else {
        h.tier
    };
    h.apply(mask, &p, tier, tick);
    Ok(())
}

/// Writes a new entity whole; `prev` is the previous new entity's (id, position) in this frame.
fn write_new<S: BitSink>(w: &mut S, prev: Option<(u32, [i32; 3])>, rec: &EntityRecord, tier: u8) {
    let (ref_pos, gap) = match prev {
        Some((id, pos)) => (pos, u64::from(rec.id - id - 1)),
        None => ([0; 3], u64::from(rec.id)),
    };
    w.eg(gap, 2);
    w.eg(u64::from(rec.generation), 0);
    w.eg(u64::from(rec.kind), 0);
    w.put(u64::from(tier & 3), 2);
    let p = &rec.pose;
    for i in 0..3 {
        let k = if i == 1 { 6 } else { 12 };
        w.seg(i64::from(p.position_mm[i]) - i64::from(ref_pos[i]), k);
    }
    for v in p.velocity {
        w.seg(i64::from(v), 2);
    }
    w.put(u64::from(p.yaw), 9);
    w.put(u64::from(p.movement_kind & 3), 2);
    if p.anim_flags == 0 {
        w.bit(false);
    } else {
        w.bit(true);
        w.put(u64::from(p.anim_flags), 16);
    }
    write_head(w, None, p.head);
    write_point(w, None, p.point_at_mm, p.position_mm);
}

fn read_new(
    r: &mut BitReader<'_>,
    prev: Option<(u32, [i32; 3])>,
) -> Result<(EntityRecord, u8), FrameError> {
    let gap = r.eg(2)?;
    let (ref_pos, id) = match prev {
        Some((id, pos)) => (pos, u64::from(id) + 1 + gap),
        None => ([0; 3], gap),
    };
    let id = u32::try_from(id).map_err(|_| FrameError::Malformed("entity id"))?;
    let generation = u16::try_from(r.eg(0)?).map_err(|_| FrameError::Malformed("generation"))?;
    let kind = u8::try_from(r.eg(0)?).map_err(|_| FrameError::Malformed("kind"))?;
    let tier = r.get(2)? as u8;
    let mut p = QuantPose::default();
    for i in 0..3 {
        let k = if i == 1 { 6 } else { 12 };
        p.position_mm[i] = add_i32(ref_pos[i], r.seg(k)?, "position")?;
    }
    for i in 0..3 {
        p.velocity[i] = add_i16(0, r.seg(2)?, "velocity")?;
    }
    let yaw = r.get(9)? as u16;
    if yaw >= YAW_STEPS {
        return Err(FrameError::Malformed("yaw"));
    }
    p.yaw = yaw;
    p.movement_kind = r.get(2)? as u8;
    p.anim_flags = if r.bit()? { r.get(16)? as u16 } else { 0 };
    p.head = read_head(r, None)?;
    p.point_at_mm = read_point(r, None, p.position_mm)?;
    Ok((
        EntityRecord {
            id,
            generation,
            kind,
            pose: p,
        },
        tier,
    ))
}

fn write_leb(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn read_leb(data: &[u8], pos: &mut usize) -> Result<u32, FrameError> {
    let mut v: u64 = 0;
    for i in 0..5 {
        let b = *data.get(*pos).ok_or(FrameError::Truncated)?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return u32::try_from(v).map_err(|_| FrameError::Malformed("varint"));
        }
    }
    Err(FrameError::Malformed("varint"))
}

/// Writes the selected post-removal indices (ascending) of `n` held entities: a mode bit, then a
/// bitmap of `n` bits or a count and gaps, whichever is smaller.
fn write_selection<S: BitSink>(w: &mut S, n: usize, sel: &[u32]) {
    if n == 0 {
        return;
    }
    let mut list = BitCounter::default();
    list.eg(sel.len() as u64, 0);
    let mut prev: i64 = -1;
    for &i in sel {
        list.eg((i64::from(i) - prev - 1) as u64, K_SEL_GAP);
        prev = i64::from(i);
    }
    if list.bits < n as u64 {
        w.bit(true);
        w.eg(sel.len() as u64, 0);
        let mut prev: i64 = -1;
        for &i in sel {
            w.eg((i64::from(i) - prev - 1) as u64, K_SEL_GAP);
            prev = i64::from(i);
        }
    } else {
        w.bit(false);
        // One bit per held entity, 32 at a time; `sel` is ascending and below `n`.
        let n = n as u64;
        let mut word = 0u64;
        let mut base = 0u64;
        for &i in sel {
            let i = u64::from(i);
            while i >= base + 32 {
                w.put(word, 32);
                word = 0;
                base += 32;
            }
            word |= 1 << (i - base);
        }
        while base + 32 <= n {
            w.put(word, 32);
            word = 0;
            base += 32;
        }
        if n > base {
            w.put(word, (n - base) as u32);
        }
    }
}

fn read_selection(r: &mut BitReader<'_>, n: usize, sel: &mut Vec<u32>) -> Result<(), FrameError> {
    sel.clear();
    if n == 0 {
        return Ok(());
    }
    if r.bit()? {
        let count = r.eg(0)?;
        if count > n as u64 {
            return Err(FrameError::Malformed("selection count"));
        }
        let mut prev: i64 = -1;
        for _ in 0..count {
            let gap = r.eg(K_SEL_GAP)?;
            let i =
                prev + 1 + i64::try_from(gap).map_err(|_| FrameError::Malformed("selection"))?;
            if i >= n as i64 {
                return Err(FrameError::Malformed("selection index"));
            }
            sel.push(i as u32);
            prev = i;
        }
    } else {
        let mut i = 0u32;
        let mut left = n as u32;
        while left > 0 {
            let take = left.min(32);
            let mut word = r.get(take)?;
            while word != 0 {
                let b = word.trailing_zeros();
                sel.push(i + b);
                word &= word - 1;
            }
            i += take;
            left -= take;
        }
    }
    Ok(())
}

// === Encoder ===

/// A pending change of a held entity this frame.
#[derive(Clone, Copy, Debug)]
struct Pending {
    model_idx: u32,
    post_idx: u32,
    /// Index in `visible` of the entity's record (its canonical pose is the new pose).
    vis: u32,
    mask: u8,
    tier: u8,
    mandatory: bool,
    prio: u32,
    bits: u32,
    include: bool,
}

/// Per-client frame encoder (server side). Keeps the exact model of what the client holds.
#[derive(Debug)]
pub struct FrameEncoder {
    cfg: EncoderConfig,
    model: Vec<Held>,
    own: Option<OwnState>,
    seq: u32,
    last_tick: u32,
    started: bool,
    key_requested: bool,
    credit: i64,
    removed: Vec<u32>,
    pending: Vec<Pending>,
    news: Vec<(EntityRecord, u8)>,
    sel: Vec<u32>,
    next: Vec<Held>,
    order: Vec<u32>,
    /// The last budgeted frame was over its budget: count before writing (congestion lasts).
    over_budget: bool,
}

impl FrameEncoder {
    /// A new encoder; its first frame is a keyframe.
    pub fn new(cfg: EncoderConfig) -> Self {
        Self {
            cfg,
            model: Vec::new(),
            own: None,
            seq: 0,
            last_tick: 0,
            started: false,
            key_requested: false,
            credit: 0,
            removed: Vec::new(),
            pending: Vec::new(),
            news: Vec::new(),
            sel: Vec::new(),
            next: Vec::new(),
            order: Vec::new(),
            over_budget: false,
        }
    }

    /// Makes the next frame a keyframe (on the client's `Resync`).
    pub fn request_keyframe(&mut self) {
        self.key_requested = true;
    }

    /// The sequence number of the last frame encoded (0 before the first).
    pub fn last_seq(&self) -> u32 {
        self.seq
    }

    /// Number of entities the client holds after the last frame.
    pub fn held_len(&self) -> usize {
        self.model.len()
    }

    /// The FNV-1a check of what the client holds after the last frame.
    pub fn held_check(&self) -> u32 {
        state_hash(self.model.iter(), self.own.as_ref())
    }

    fn per_frame_budget(&self) -> i64 {
        if self.cfg.budget_bytes_per_s == 0 {
            return 1 << 40;
        }
        i64::from(self.cfg.budget_bytes_per_s) / i64::from(self.cfg.broadcast_hz.max(1))
    }

    /// Encode the frame for `tick` from what this client should now hold. `visible` is sorted by
    /// id, no duplicates (debug builds assert it; release builds skip out-of-order entries).
    /// Appends to `out`. The first frame is always a keyframe.
    pub fn encode(
        &mut self,
        tick: u32,
        own: Option<&OwnState>,
        visible: &[Visible<'_>],
        out: &mut Vec<u8>,
    ) -> EncodeStats {
        debug_assert!(
            visible.windows(2).all(|w| w[0].record.id < w[1].record.id),
            "visible must be sorted by id without duplicates"
        );
        let keyframe = !self.started || self.key_requested;
        self.started = true;
        self.key_requested = false;
        if keyframe {
            self.model.clear();
            self.own = None;
        }
        let base = self.seq;
        let seq = self.seq.wrapping_add(1);
        let per_frame = self.per_frame_budget();
        self.credit = (self.credit.max(-per_frame * 64) + per_frame).min(per_frame * 2);

        // Merge what the client holds with what it should hold.
        self.removed.clear();
        self.pending.clear();
        self.news.clear();
        let (mut i, mut j, mut post) = (0usize, 0usize, 0u32);
        let mut last_vis: Option<u32> = None;
        while i < self.model.len() || j < visible.len() {
            let Some(v) = visible.get(j) else {
                // Nothing more to hold: the rest of what the client holds goes.
                self.removed
                    .extend(self.model[i..].iter().map(|h| h.rec.id));
                break;
            };
            let vid = v.record.id;
            if last_vis.is_some_and(|l| vid <= l) {
                // Out of order (release builds): skipped.
                j += 1;
                continue;
            }
            let Some(h) = self.model.get(i) else {
                last_vis = Some(vid);
                self.news.push(sanitized(v));
                j += 1;
                continue;
            };
            if h.rec.id < vid {
                self.removed.push(h.rec.id);
                i += 1;
                continue;
            }
            last_vis = Some(vid);
            if h.rec.id > vid {
                self.news.push(sanitized(v));
                j += 1;
                continue;
            }
            i += 1;
            j += 1;
            if h.rec.generation != v.record.generation || h.rec.kind != v.record.kind {
                self.removed.push(h.rec.id);
                self.news.push(sanitized(v));
                continue;
            }
            let tier = v.tier.min(3);
            // What the client holds is canonical: an identical pose is unchanged without
            // canonicalizing and comparing group by group.
            let same = v.record.pose == h.rec.pose;
            if same && tier == h.tier {
                post += 1;
                continue;
            }
            let new = &if same {
                h.rec.pose
            } else {
                v.record.pose.canonical()
            };
            let mut mask = if same { 0 } else { groups(&h.rec.pose, new) };
            if tier != h.tier {
                mask |= G_TIER;
            }
            let start_stop = h.rec.pose.at_rest() != new.at_rest();
            if mask & G_MOTION != 0
                && !start_stop
                && seq.wrapping_add(h.rec.id) & (TIER_EVERY[usize::from(tier)] - 1) != 0
            {
                mask &= !G_MOTION;
            }
            if mask != 0 {
                let mandatory = start_stop || mask != G_MOTION;
                self.pending.push(Pending {
                    model_idx: (i - 1) as u32,
                    post_idx: post,
                    vis: (j - 1) as u32,
                    mask,
                    tier,
                    mandatory,
                    prio: h.acc.saturating_add(TIER_WEIGHT[usize::from(tier)]),
                    bits: 0,
                    include: true,
                });
            }
            post += 1;
        }
        let held_after = post as usize;

        // Own state.
        let own_base = self.own.clone();
        let own_flag = match (own, own_base.as_ref()) {
            (Some(o), Some(b)) if own_eq(o, b) => 0,
            (Some(_), _) => FLAG_OWN,
            (None, Some(_)) => FLAG_OWN_CLEAR,
            (None, None) => 0,
        };
        // Checks are staggered by the client's own entity, so a room's clients do not all hash
        // what they hold in the same broadcast.
        let phase = own.map_or(0, |o| o.entity);
        let check = keyframe
            || (self.cfg.check_every > 0
                && seq.wrapping_add(phase).is_multiple_of(self.cfg.check_every));

        // Budget: defer the least important steady pose updates.
        let mut deferred = 0u32;
        let optional = self.pending.iter().filter(|p| !p.mandatory).count();
        let mut flags = own_flag;
        if keyframe {
            flags |= FLAG_KEYFRAME;
        }
        if check {
            flags |= FLAG_CHECK;
        }
        let head = Head {
            flags,
            seq,
            base,
            tick,
            keyframe,
            check,
            own: if own_flag == FLAG_OWN { own } else { None },
            own_base: own_base.as_ref(),
        };
        let start = out.len();
        let mut written: Option<usize> = None;
        let budgeted = optional > 0 && self.cfg.budget_bytes_per_s > 0 && !keyframe;
        if budgeted && !self.over_budget {
            // Optimistic: write the whole frame and measure it, since most frames fit; only a
            // frame over its budget pays for the counting pass below. The estimate is the same
            // as the counting pass's, so the bytes are the same either way. After a frame over
            // its budget the next ones count first, until one fits.
            let (check_at, bits) = self.write_frame(out, &head, held_after, visible);
            let mut removed = BitCounter::default();
            removed.eg(self.removed.len() as u64, 0);
            for &id in &self.removed {
                removed.eg(u64::from(id), 2);
            }
            let total =
                8 * 16 + bits.own + removed.bits + bits.news + held_after as u64 + 1 + bits.changes;
            if total <= (self.credit.max(0) as u64) * 8 {
                written = Some(check_at);
            } else {
                out.truncate(start);
            }
        }
        if budgeted && written.is_none() {
            let mut fixed = BitCounter::default();
            fixed.bits += 8 * 16; // header upper bound
            if own_flag == FLAG_OWN
                && let Some(o) = own
            {
                write_own(&mut fixed, own_base.as_ref().unwrap_or(&OWN_ZERO), o);
            }
            fixed.eg(self.removed.len() as u64, 0);
            for &id in &self.removed {
                fixed.eg(u64::from(id), 2);
            }
            fixed.eg(self.news.len() as u64, 0);
            let mut prev = None;
            for (rec, tier) in &self.news {
                write_new(&mut fixed, prev, rec, *tier);
                prev = Some((rec.id, rec.pose.position_mm));
            }
            fixed.bits += held_after as u64 + 1;
            let mut total = fixed.bits;
            for p in &mut self.pending {
                let mut c = BitCounter::default();
                let h = &self.model[p.model_idx as usize];
                let pose = visible[p.vis as usize].record.pose.canonical();
                write_change(&mut c, h, p.mask, &pose, p.tier, tick);
                p.bits = c.bits as u32;
                // Bigger moves cost more bits and matter more: small ones wait first.
                p.prio = p.prio.saturating_add((p.bits / 16).min(8));
                total += c.bits;
            }
            let allowed = (self.credit.max(0) as u64) * 8;
            self.over_budget = total > allowed;
            if total > allowed {
                self.order.clear();
                self.order.extend(
                    self.pending
                        .iter()
                        .enumerate()
                        .filter(|(_, p)| !p.mandatory)
                        .map(|(k, _)| k as u32),
                );
                let pending = &self.pending;
                let model = &self.model;
                self.order.sort_unstable_by(|&a, &b| {
                    let (pa, pb) = (&pending[a as usize], &pending[b as usize]);
                    pb.prio.cmp(&pa.prio).then(
                        model[pa.model_idx as usize]
                            .rec
                            .id
                            .cmp(&model[pb.model_idx as usize].rec.id),
                    )
                });
                let mut used: u64 = fixed.bits
                    + self
                        .pending
                        .iter()
                        .filter(|p| p.mandatory)
                        .map(|p| u64::from(p.bits))
                        .sum::<u64>();
                for &k in &self.order {
                    let p = &mut self.pending[k as usize];
                    if used + u64::from(p.bits) <= allowed {
                        used += u64::from(p.bits);
                    } else {
                        p.include = false;
                        deferred += 1;
                    }
                }
            }
        }
        for p in &self.pending {
            let h = &mut self.model[p.model_idx as usize];
            if p.include {
                h.acc = 0;
            } else {
                h.acc = p.prio;
            }
        }
        self.pending.retain(|p| p.include);

        let check_at = match written {
            Some(at) => at,
            None => self.write_frame(out, &head, held_after, visible).0,
        };

        // Update the model exactly as the decoder will.
        for p in &self.pending {
            let pose = visible[p.vis as usize].record.pose.canonical();
            self.model[p.model_idx as usize].apply(p.mask, &pose, p.tier, tick);
        }
        if !self.removed.is_empty() || !self.news.is_empty() {
            self.next.clear();
            let mut r = 0;
            for h in &self.model {
                if self.removed.get(r) == Some(&h.rec.id) {
                    r += 1;
                    continue;
                }
                self.next.push(*h);
            }
            let kept = self.next.len();
            for (rec, tier) in &self.news {
                self.next.push(Held::new(*rec, *tier, tick));
            }
            if kept > 0 && kept < self.next.len() {
                merge_sorted(&mut self.next, kept, &mut self.model);
            }
            std::mem::swap(&mut self.model, &mut self.next);
        }
        match own_flag {
            FLAG_OWN => self.own = own.cloned(),
            FLAG_OWN_CLEAR => self.own = None,
            _ => {}
        }
        if check {
            let h = state_hash(self.model.iter(), self.own.as_ref());
            out[check_at..check_at + 4].copy_from_slice(&h.to_le_bytes());
        }
        self.seq = seq;
        self.last_tick = tick;
        let bytes = out.len() - start;
        self.credit -= bytes as i64;
        EncodeStats {
            bytes,
            keyframe,
            changed: (self.pending.len() + self.news.len()) as u32,
            removed: self.removed.len() as u32,
            deferred,
        }
    }
}

/// What the frame header and the body's own-state part are made of.
struct Head<'a> {
    flags: u8,
    seq: u32,
    base: u32,
    tick: u32,
    keyframe: bool,
    check: bool,
    /// The own state to write (only when it changed).
    own: Option<&'a OwnState>,
    /// What the client holds of its own state.
    own_base: Option<&'a OwnState>,
}

/// Bits of the parts of a written frame that the budget estimate counts.
#[derive(Clone, Copy, Debug, Default)]
struct FrameBits {
    own: u64,
    changes: u64,
    news: u64,
}

impl FrameEncoder {
    /// Writes the frame (header and body) for the current `removed`, `pending` and `news`;
    /// returns where the check hash goes and the measured bits of its parts.
    fn write_frame(
        &mut self,
        out: &mut Vec<u8>,
        head: &Head<'_>,
        held_after: usize,
        visible: &[Visible<'_>],
    ) -> (usize, FrameBits) {
        let tick = head.tick;
        out.push((FRAME_VERSION << 4) | head.flags);
        write_leb(out, head.seq);
        write_leb(out, head.seq.wrapping_sub(head.base));
        let check_at = out.len();
        if head.check {
            out.extend_from_slice(&[0; 4]);
        }
        let mut bits = FrameBits::default();
        let mut w = BitWriter::new(out);
        if head.keyframe {
            w.eg(u64::from(tick), 8);
        } else {
            w.seg(i64::from(tick.wrapping_sub(self.last_tick) as i32), K_TICK);
        }
        if let Some(o) = head.own {
            let at = w.bit_len();
            write_own(&mut w, head.own_base.unwrap_or(&OWN_ZERO), o);
            bits.own = w.bit_len() - at;
        }
        w.eg(self.removed.len() as u64, 0);
        let mut prev: i64 = -1;
        for &id in &self.removed {
            w.eg((i64::from(id) - prev - 1) as u64, 2);
            prev = i64::from(id);
        }
        self.sel.clear();
        self.sel.extend(self.pending.iter().map(|p| p.post_idx));
        write_selection(&mut w, held_after, &self.sel);
        let at = w.bit_len();
        for p in &self.pending {
            let h = &self.model[p.model_idx as usize];
            let pose = visible[p.vis as usize].record.pose.canonical();
            write_change(&mut w, h, p.mask, &pose, p.tier, tick);
        }
        bits.changes = w.bit_len() - at;
        let at = w.bit_len();
        w.eg(self.news.len() as u64, 0);
        let mut prev = None;
        for (rec, tier) in &self.news {
            write_new(&mut w, prev, rec, *tier);
            prev = Some((rec.id, rec.pose.position_mm));
        }
        bits.news = w.bit_len() - at;
        w.finish();
        (check_at, bits)
    }
}

/// A visible entity as it will travel: canonical pose, tier clamped.
fn sanitized(v: &Visible<'_>) -> (EntityRecord, u8) {
    let mut rec = *v.record;
    rec.pose = rec.pose.canonical();
    (rec, v.tier.min(3))
}

/// Merges the two sorted runs `v[..mid]` and `v[mid..]` by id, using `tmp` as scratch.
fn merge_sorted(v: &mut Vec<Held>, mid: usize, tmp: &mut Vec<Held>) {
    tmp.clear();
    let (a, b) = v.split_at(mid);
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i].rec.id <= b[j].rec.id {
            tmp.push(a[i]);
            i += 1;
        } else {
            tmp.push(b[j]);
            j += 1;
        }
    }
    tmp.extend_from_slice(&a[i..]);
    tmp.extend_from_slice(&b[j..]);
    std::mem::swap(v, tmp);
}

// === Decoder ===

/// Client-side frame decoder: holds what the server says the client should hold.
#[derive(Clone, Debug, Default)]
pub struct FrameDecoder {
    held: Vec<Held>,
    own: Option<OwnState>,
    last_seq: Option<u32>,
    last_tick: u32,
    next: Vec<Held>,
    tmp: Vec<Held>,
    sel: Vec<u32>,
    patch: Vec<(u32, Held)>,
}

impl FrameDecoder {
    /// An empty decoder (expects a keyframe first).
    pub fn new() -> Self {
        Self::default()
    }

    /// Apply one frame onto what the decoder holds. Fail closed: on any error the held state is
    /// unchanged and the client should send Resync (ChainBreak / CheckMismatch / malformed).
    pub fn apply(&mut self, frame: &[u8]) -> Result<DecodedFrame, FrameError> {
        if frame.len() > MAX_FRAME_BYTES {
            return Err(FrameError::TooLarge);
        }
        let first = *frame.first().ok_or(FrameError::Truncated)?;
        if first >> 4 != FRAME_VERSION {
            return Err(FrameError::Malformed("version"));
        }
        let flags = first & 0x0f;
        let keyframe = flags & FLAG_KEYFRAME != 0;
        if flags & FLAG_OWN != 0 && flags & FLAG_OWN_CLEAR != 0 {
            return Err(FrameError::Malformed("own flags"));
        }
        let mut pos = 1;
        let seq = read_leb(frame, &mut pos)?;
        let back = read_leb(frame, &mut pos)?;
        let base_seq = seq.wrapping_sub(back);
        if !keyframe {
            match self.last_seq {
                Some(l) if l == base_seq => {}
                l => {
                    return Err(FrameError::ChainBreak {
                        expected: l.unwrap_or(0),
                        got: base_seq,
                    });
                }
            }
        }
        let check = if flags & FLAG_CHECK != 0 {
            let b = frame.get(pos..pos + 4).ok_or(FrameError::Truncated)?;
            pos += 4;
            Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        } else {
            None
        };
        let mut r = BitReader::new(&frame[pos..]);
        let tick = if keyframe {
            u32::try_from(r.eg(8)?).map_err(|_| FrameError::Malformed("tick"))?
        } else {
            let d = i32::try_from(r.seg(K_TICK)?).map_err(|_| FrameError::Malformed("tick"))?;
            self.last_tick.wrapping_add(d as u32)
        };
        let held: &[Held] = if keyframe { &[] } else { &self.held };
        let old_own = if keyframe { None } else { self.own.as_ref() };
        let own = if flags & FLAG_OWN != 0 {
            Some(read_own(&mut r, old_own.unwrap_or(&OWN_ZERO))?)
        } else if flags & FLAG_OWN_CLEAR != 0 {
            None
        } else {
            old_own.cloned()
        };

        let mut out = DecodedFrame {
            seq,
            base_seq,
            tick,
            keyframe,
            ..DecodedFrame::default()
        };
        let n_removed = r.eg(0)?;
        if n_removed > held.len() as u64 {
            return Err(FrameError::Malformed("removed count"));
        }
        let mut prev: i64 = -1;
        for _ in 0..n_removed {
            let gap = i64::try_from(r.eg(2)?).map_err(|_| FrameError::Malformed("removed id"))?;
            let id = prev + 1 + gap;
            let id = u32::try_from(id).map_err(|_| FrameError::Malformed("removed id"))?;
            out.removed.push(id);
            prev = i64::from(id);
        }
        // Without removals the changes are read into a patch list and, when nothing arrives
        // either, committed in place (no copy of the held set).
        let patching = out.removed.is_empty();
        self.patch.clear();
        if patching {
            read_selection(&mut r, held.len(), &mut self.sel)?;
            for &s in &self.sel {
                let mut h = held[s as usize];
                read_change(&mut r, &mut h, tick)?;
                out.changed.push(h.rec.id);
                self.patch.push((s, h));
            }
        } else {
            // Kept entities, in order; verify every removed id is held.
            self.next.clear();
            let mut k = 0;
            for h in held {
                if out.removed.get(k) == Some(&h.rec.id) {
                    k += 1;
                } else {
                    self.next.push(*h);
                }
            }
            if k != out.removed.len() {
                return Err(FrameError::Malformed("removed id not held"));
            }
            read_selection(&mut r, self.next.len(), &mut self.sel)?;
            for &s in &self.sel {
                let h = &mut self.next[s as usize];
                read_change(&mut r, h, tick)?;
                out.changed.push(h.rec.id);
            }
        }
        let kept = if patching {
            held.len()
        } else {
            self.next.len()
        };
        let n_new = r.eg(0)?;
        if n_new as usize + kept > MAX_ENTITIES {
            return Err(FrameError::TooLarge);
        }
        if patching && n_new == 0 {
            r.finish()?;
            if let Some(expected) = check {
                let patch = &self.patch;
                let mut next_patch = patch.iter().peekable();
                let overlay = held
                    .iter()
                    .enumerate()
                    .map(|(i, h)| match next_patch.peek() {
                        Some((s, p)) if *s as usize == i => {
                            next_patch.next();
                            p
                        }
                        _ => h,
                    });
                let got = state_hash(overlay, own.as_ref());
                if got != expected {
                    return Err(FrameError::CheckMismatch { expected, got });
                }
                out.checked = true;
            }
            if keyframe {
                self.held.clear();
            }
            for (s, h) in &self.patch {
                self.held[*s as usize] = *h;
            }
            self.own = own;
            self.last_seq = Some(seq);
            self.last_tick = tick;
            return Ok(out);
        }
        if patching {
            self.next.clear();
            self.next.extend_from_slice(held);
            for (s, h) in &self.patch {
                self.next[*s as usize] = *h;
            }
        }
        let mut prev = None;
        for _ in 0..n_new {
            let (rec, tier) = read_new(&mut r, prev)?;
            prev = Some((rec.id, rec.pose.position_mm));
            self.next.push(Held::new(rec, tier, tick));
            out.changed.push(rec.id);
        }
        r.finish()?;
        if kept > 0 && kept < self.next.len() {
            merge_sorted(&mut self.next, kept, &mut self.tmp);
        }
        if self.next.windows(2).any(|w| w[0].rec.id >= w[1].rec.id) {
            return Err(FrameError::Malformed("duplicate id"));
        }
        if let Some(expected) = check {
            let got = state_hash(self.next.iter(), own.as_ref());
            if got != expected {
                return Err(FrameError::CheckMismatch { expected, got });
            }
            out.checked = true;
        }
        out.changed.sort_unstable();
        std::mem::swap(&mut self.held, &mut self.next);
        self.own = own;
        self.last_seq = Some(seq);
        self.last_tick = tick;
        Ok(out)
    }

    /// The record held for `id`.
    pub fn get(&self, id: u32) -> Option<&EntityRecord> {
        self.find(id).map(|i| &self.held[i].rec)
    }

    /// The tier of `id` for this client (how often its steady pose comes).
    pub fn tier(&self, id: u32) -> Option<u8> {
        self.find(id).map(|i| self.held[i].tier)
    }

    fn find(&self, id: u32) -> Option<usize> {
        self.held.binary_search_by_key(&id, |h| h.rec.id).ok()
    }

    /// The tick of the frame that last brought `id`'s position, velocity or yaw: when its held
    /// pose was measured (older than the last frame's tick for a far or deferred entity).
    pub fn pose_tick(&self, id: u32) -> Option<u32> {
        self.find(id).map(|i| self.held[i].pose_tick)
    }

    /// Every held record, by id.
    pub fn entities(&self) -> impl Iterator<Item = &EntityRecord> {
        self.held.iter().map(|h| &h.rec)
    }

    /// Number of held entities.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether no entity is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// The client's own state, if the server sent one.
    pub fn own(&self) -> Option<&OwnState> {
        self.own.as_ref()
    }

    /// Sequence number of the last frame applied.
    pub fn last_seq(&self) -> Option<u32> {
        self.last_seq
    }

    /// The FNV-1a check of what the decoder holds (as a frame's check would carry it).
    pub fn check(&self) -> u32 {
        state_hash(self.held.iter(), self.own.as_ref())
    }

    /// Forget everything (before a keyframe).
    pub fn reset(&mut self) {
        self.held.clear();
        self.own = None;
        self.last_seq = None;
        self.last_tick = 0;
    }

    /// Test hook: overwrites the pose held for `id` (simulates a client whose state got
    /// corrupted; the next check detects it). Returns whether `id` was held.
    pub fn corrupt_pose(&mut self, id: u32, pose: QuantPose) -> bool {
        match self.find(id) {
            Some(i) => {
                self.held[i].rec.pose = pose;
                true
            }
            None => false,
        }
    }
}
