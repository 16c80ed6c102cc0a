//! The seed's 160-bit compressed movement message (`plaza.v1.MovementCompressed`).
//!
//! A client may send its movement as four packed integers instead of the float message:
//!
//! * `temporal_data` (32 bits, high → low): velocity tier (2) · yaw (6) · long-fall · falling ·
//!   long-jump · jump count (2) · grounded · sliding · movement kind (2) · timestamp (15, circular,
//!   0.02 s quantum: a 655 s buffer).
//! * `movement_data` (64 bits, high → low): velocity z, y, x (sign + magnitude, per-tier bits) ·
//!   y (absolute, per-tier bits over `[Y_MIN, Y_MAX]`) · z, x (relative to the cell origin,
//!   per-tier bits) · cell index (17 bits, [`ParcelEncoder`]).
//! * `head_sync_data` (32 bits): bit 13 yaw enabled · bit 12 pitch enabled · yaw (6, bits 6..11)
//!   · pitch (6, bits 0..5); bit 29 instant (`Movement.is_instant`), bit 30 stunned, bit 31
//!   emoting (the seed's layout has no room for these in `temporal_data`, so Plaza carries them
//!   here). Zero when idle.
//! * `point_at_data` (32 bits): bit 30 pointing · z, y, x (10 bits each: sign + 9-bit magnitude
//!   on a square-root curve, relative to the sender's position, range [`POINT_AT_MAX_M`]).
//!   Zero when not pointing.
//!
//! [`FloatQuantizer`] does every scalar; the four [`VelocityTier`]s trade position precision for
//! velocity range. [`TimestampDecoder`] unwraps the circular timestamp and is stateful: keep one
//! per sender. This module does not validate movement (physics does) nor rate-limit it.

use thiserror::Error;

use crate::quant::Pose;

/// Timestamp bits (circular).
pub const TIMESTAMP_BITS: u32 = 15;
/// Timestamp quantum in seconds.
pub const TIMESTAMP_QUANTUM_S: f64 = 0.02;
/// Timestamp buffer length in seconds (`2^TIMESTAMP_BITS * quantum` ≈ 655 s).
pub const TIMESTAMP_BUFFER_S: f64 = (1u64 << TIMESTAMP_BITS) as f64 * TIMESTAMP_QUANTUM_S;
/// Cell-index bits.
pub const PARCEL_BITS: u32 = 17;
/// Side of one cell in metres.
pub const CELL_SIZE_M: f32 = 16.0;
/// Yaw bits (≈ 5.6° steps).
pub const ROTATION_BITS: u32 = 6;
/// Head IK yaw/pitch bits each.
pub const HEAD_ROTATION_BITS: u32 = 6;
/// Head IK yaw range (± degrees).
pub const HEAD_YAW_MAX_DEG: f32 = 180.0;
/// Head IK pitch range (± degrees).
pub const HEAD_PITCH_MAX_DEG: f32 = 90.0;
/// Point-at bits per axis (including the sign).
pub const POINT_AT_AXIS_BITS: u32 = 10;
/// Point-at range per axis in metres from the sender.
pub const POINT_AT_MAX_M: f32 = 64.0;
/// Height range: `[Y_MIN_M, Y_MAX_M]`.
pub const Y_MIN_M: f32 = 0.0;
/// Upper end of the height range.
pub const Y_MAX_M: f32 = 500.0;
/// Velocities below this squared magnitude (m²/s²) travel as zero.
pub const SAFE_ZONE: f32 = 0.05;

/// One velocity tier's bit budget.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VelocityTier {
    /// Bits of x and z each (relative to the cell origin).
    pub xz_bits: u32,
    /// Bits of y (absolute).
    pub y_bits: u32,
    /// Bits of each velocity axis, sign included.
    pub velocity_bits: u32,
    /// Largest speed per axis in m/s.
    pub velocity_range: f32,
}

/// The four tiers, by speed: each fits `17 + 2·xz + y + 3·v <= 64` bits.
pub const VELOCITY_TIERS: [VelocityTier; 4] = [
    VelocityTier {
        xz_bits: 10,
        y_bits: 13,
        velocity_bits: 4,
        velocity_range: 2.0,
    },
    VelocityTier {
        xz_bits: 9,
        y_bits: 13,
        velocity_bits: 5,
        velocity_range: 4.0,
    },
    VelocityTier {
        xz_bits: 9,
        y_bits: 12,
        velocity_bits: 5,
        velocity_range: 8.0,
    },
    VelocityTier {
        xz_bits: 8,
        y_bits: 12,
        velocity_bits: 6,
        velocity_range: 20.0,
    },
];

/// The smallest tier whose velocity range holds `speed` (m/s).
pub fn velocity_tier_from_speed(speed: f32) -> u8 {
    VELOCITY_TIERS
        .iter()
        .position(|t| speed <= t.velocity_range)
        .unwrap_or(3) as u8
}

/// Why a compressed message could not be read.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CompressedError {
    /// The cell index is outside the room's grid.
    #[error("cell index out of range")]
    CellOutOfRange,
}

/// Scalar quantizer: `value` in `[min, max]` to an integer of `bits` bits and back.
#[derive(Clone, Copy, Debug)]
pub struct FloatQuantizer;

impl FloatQuantizer {
    /// Quantizes (clamping to the range; NaN → `min`).
    pub fn compress(value: f32, min: f32, max: f32, bits: u32) -> u32 {
        let max_step = ((1u64 << bits) - 1) as f32;
        let n = ((value - min) / (max - min)).clamp(0.0, 1.0);
        let n = if n.is_nan() { 0.0 } else { n };
        (n * max_step).round() as u32
    }

    /// The value of a quantized step.
    pub fn decompress(q: u32, min: f32, max: f32, bits: u32) -> f32 {
        let max_step = ((1u64 << bits) - 1) as f32;
        min + (q as f32 / max_step) * (max - min)
    }

    /// Largest error of a round trip of a value inside the range.
    pub fn max_error(min: f32, max: f32, bits: u32) -> f32 {
        (max - min) / ((1u64 << bits) - 1) as f32 / 2.0
    }
}

/// Flattens a grid of square cells over the room into a [`PARCEL_BITS`]-bit index.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ParcelEncoder {
    min_x: i32,
    min_z: i32,
    width: u32,
    height: u32,
}

impl ParcelEncoder {
    /// A grid covering `[-half_extent_m, half_extent_m]` on x and z (at most 5.7 km across).
    pub fn for_room(half_extent_m: f32) -> Self {
        let cells = (half_extent_m / CELL_SIZE_M).ceil().clamp(1.0, 180.0) as i32;
        Self {
            min_x: -cells,
            min_z: -cells,
            width: (2 * cells) as u32,
            height: (2 * cells) as u32,
        }
    }

    /// The cell holding world `(x, z)`, clamped to the grid.
    pub fn cell_of(&self, x: f32, z: f32) -> [i32; 2] {
        let c = |v: f32, min: i32, n: u32| {
            let c = (v / CELL_SIZE_M).floor();
            let c = if c.is_nan() { 0.0 } else { c };
            (c.clamp(min as f32, (min + n as i32 - 1) as f32)) as i32
        };
        [c(x, self.min_x, self.width), c(z, self.min_z, self.height)]
    }

    /// Index of a cell (in the grid).
    pub fn encode(&self, cell: [i32; 2]) -> u32 {
        (cell[0] - self.min_x) as u32 + (cell[1] - self.min_z) as u32 * self.width
    }

    /// Cell of an index.
    pub fn decode(&self, index: u32) -> Result<[i32; 2], CompressedError> {
        if index >= self.width * self.height {
            return Err(CompressedError::CellOutOfRange);
        }
        Ok([
            (index % self.width) as i32 + self.min_x,
            (index / self.width) as i32 + self.min_z,
        ])
    }
}

impl Default for ParcelEncoder {
    /// A 4 km room (±2,048 m).
    fn default() -> Self {
        Self::for_room(2048.0)
    }
}

/// Circular timestamp encoder ([`TIMESTAMP_BITS`] bits at [`TIMESTAMP_QUANTUM_S`]).
pub fn compress_timestamp(timestamp_s: f64) -> u32 {
    let steps = 1u64 << TIMESTAMP_BITS;
    let q = (timestamp_s.max(0.0) / TIMESTAMP_QUANTUM_S).round();
    let q = if q.is_finite() { q as u64 } else { 0 };
    (q % steps) as u32
}

/// Unwraps one sender's circular timestamps: keep one per sender (it holds the wrap state).
#[derive(Clone, Debug, Default)]
pub struct TimestampDecoder {
    last: Option<f64>,
    offset: f64,
}

impl TimestampDecoder {
    /// A decoder that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// The absolute timestamp of a compressed one: when it lands more than 0.75 of the buffer
    /// before the last one, the sender's counter wrapped and the offset advances a buffer.
    pub fn decompress(&mut self, q: u32) -> f64 {
        let steps = 1u32 << TIMESTAMP_BITS;
        let mut t = f64::from(q % steps) * TIMESTAMP_QUANTUM_S + self.offset;
        if let Some(last) = self.last
            && t < last - 0.75 * TIMESTAMP_BUFFER_S
        {
            self.offset += TIMESTAMP_BUFFER_S;
            t += TIMESTAMP_BUFFER_S;
        }
        self.last = Some(t);
        t
    }
}

/// The four packed integers of the compressed movement message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Compressed {
    /// Tier, yaw, animation flags, movement kind, timestamp.
    pub temporal_data: u32,
    /// Velocity, height, cell-relative position, cell index.
    pub movement_data: u64,
    /// Head IK yaw/pitch and their enable flags (+ stunned/emoting).
    pub head_sync_data: u32,
    /// Point-at offset from the sender.
    pub point_at_data: u32,
}

impl From<crate::pb::MovementCompressed> for Compressed {
    fn from(m: crate::pb::MovementCompressed) -> Self {
        Self {
            temporal_data: m.temporal_data,
            movement_data: m.movement_data,
            head_sync_data: m.head_sync_data,
            point_at_data: m.point_at_data,
        }
    }
}

impl From<Compressed> for crate::pb::MovementCompressed {
    fn from(c: Compressed) -> Self {
        Self {
            temporal_data: c.temporal_data,
            movement_data: c.movement_data,
            head_sync_data: c.head_sync_data,
            point_at_data: c.point_at_data,
        }
    }
}

/// A decompressed movement message.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decompressed {
    /// The pose (head yaw/pitch: a disabled axis reads 0).
    pub pose: Pose,
    /// Absolute sender timestamp in seconds (unwrapped by the sender's [`TimestampDecoder`]).
    pub timestamp_s: f64,
    /// The velocity tier the sender chose.
    pub tier: u8,
    /// Head IK enables per axis: `[yaw, pitch]` (bits 13 and 12 of `head_sync_data`).
    pub head_enabled: [bool; 2],
    /// The sender asks for a placement instead of a walk (bit [`INSTANT_BIT`] of
    /// `head_sync_data`): `Movement.is_instant`.
    pub is_instant: bool,
}

impl Decompressed {
    /// The plain movement message this one stands for (`timestamp` the unwrapped one,
    /// `velocity_tier` the tier it was packed with).
    pub fn to_movement(&self) -> crate::pb::Movement {
        let v = |a: [f32; 3]| {
            Some(crate::pb::Vec3 {
                x: a[0],
                y: a[1],
                z: a[2],
            })
        };
        let p = &self.pose;
        let head = p.head.unwrap_or_default();
        crate::pb::Movement {
            position: v(p.position),
            velocity: v(p.velocity),
            rotation_y: p.yaw_deg,
            movement_kind: i32::from(p.movement_kind),
            anim_flags: u32::from(p.anim_flags),
            head_ik_yaw_enabled: self.head_enabled[0],
            head_ik_pitch_enabled: self.head_enabled[1],
            head_yaw: head[0],
            head_pitch: head[1],
            is_pointing_at: p.point_at.is_some(),
            point_at: p.point_at.and_then(v),
            is_instant: self.is_instant,
            timestamp: self.timestamp_s,
            velocity_tier: u32::from(self.tier),
        }
    }
}

/// Bit of `head_sync_data` that carries `Movement.is_instant` (Plaza's addition, beside
/// stunned (30) and emoting (31); the seed's compressed form has no room for it elsewhere).
pub const INSTANT_BIT: u32 = 29;

/// The speed (m/s) a sender picks its velocity tier by: the distance from the position of
/// its last sent message over the time since it (seed 000: not the controller's velocity,
/// which reads 0 on a moving platform), but never below the message's own horizontal and
/// vertical speed (so its velocity is not clamped by a tier too small for it). The first
/// message, an `is_instant` one (a placement, not a walk) and a non-increasing timestamp
/// use the message's own speed.
pub fn tier_speed(
    last_sent: Option<([f32; 3], f64)>,
    position: [f32; 3],
    velocity: [f32; 3],
    timestamp_s: f64,
    is_instant: bool,
) -> f32 {
    let own = velocity.iter().map(|c| c.abs()).fold(0.0f32, f32::max);
    let travelled = match last_sent {
        Some((at, t)) if !is_instant && timestamp_s > t => {
            let d2: f32 = (0..3).map(|i| (position[i] - at[i]).powi(2)).sum();
            (f64::from(d2.sqrt()) / (timestamp_s - t)) as f32
        }
        _ => 0.0,
    };
    let s = travelled.max(own);
    if s.is_finite() {
        s
    } else {
        VELOCITY_TIERS[3].velocity_range
    }
}

/// A sender of compressed movement: packs each `plaza.v1.Movement` with the velocity tier
/// [`tier_speed`] picks from the last message it sent. Keep one per session (it holds the
/// last sent position and time).
#[derive(Clone, Debug, Default)]
pub struct CompressedSender {
    /// The room's cell grid (the server decodes over the default one).
    pub codec: MovementCodec,
    last_sent: Option<([f32; 3], f64)>,
}

impl CompressedSender {
    /// A sender over the default grid.
    pub fn new() -> Self {
        Self::default()
    }

    /// Packs `m` (its `velocity_tier` is ignored: the sender picks it) and remembers it as the
    /// last sent message. Returns the message and what the server will read from it (its
    /// timestamp unwrapped as a fresh decoder would, which within one buffer is the same).
    pub fn encode(&mut self, m: &crate::pb::Movement) -> (Compressed, Decompressed) {
        let pose = Pose::from(m);
        let speed = tier_speed(
            self.last_sent,
            pose.position,
            pose.velocity,
            m.timestamp,
            m.is_instant,
        );
        let tier = velocity_tier_from_speed(speed);
        let c = self.codec.compress_movement(m, tier);
        self.last_sent = Some((pose.position, m.timestamp));
        let mut ts = TimestampDecoder::new();
        let mut d = self
            .codec
            .decompress(&c, &mut ts)
            .expect("the sender's own grid decodes its cells");
        d.timestamp_s = m.timestamp;
        (c, d)
    }

    /// Forget the last sent message (a new room: the next one picks its tier from its own
    /// speed).
    pub fn reset(&mut self) {
        self.last_sent = None;
    }
}

// AnimFlag bits (plaza.v1.AnimFlag).
const ANIM_GROUNDED: u16 = 1;
const ANIM_FALLING: u16 = 2;
const ANIM_LONG_JUMP: u16 = 4;
const ANIM_LONG_FALL: u16 = 8;
const ANIM_STUNNED: u16 = 16;
const ANIM_SLIDING: u16 = 32;
const ANIM_EMOTING: u16 = 64;
const ANIM_JUMP_SHIFT: u16 = 8;

fn mask(bits: u32) -> u64 {
    (1u64 << bits) - 1
}

fn signed_compress(v: f32, range: f32, bits: u32) -> u32 {
    let q = FloatQuantizer::compress(v.abs(), 0.0, range, bits - 1);
    (q << 1) | u32::from(v < 0.0 && q != 0)
}

fn signed_decompress(q: u32, range: f32, bits: u32) -> f32 {
    let m = FloatQuantizer::decompress(q >> 1, 0.0, range, bits - 1);
    if q & 1 == 1 { -m } else { m }
}

fn sqrt_compress(v: f32) -> u32 {
    let mag = (v.abs() / POINT_AT_MAX_M).clamp(0.0, 1.0).sqrt();
    let mag = if mag.is_nan() { 0.0 } else { mag };
    let q = FloatQuantizer::compress(mag, 0.0, 1.0, POINT_AT_AXIS_BITS - 1);
    (q << 1) | u32::from(v < 0.0 && q != 0)
}

fn sqrt_decompress(q: u32) -> f32 {
    let m = FloatQuantizer::decompress(q >> 1, 0.0, 1.0, POINT_AT_AXIS_BITS - 1);
    let v = m * m * POINT_AT_MAX_M;
    if q & 1 == 1 { -v } else { v }
}

/// Compresses and decompresses movement for one room's cell grid.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MovementCodec {
    /// The room's cell grid.
    pub parcels: ParcelEncoder,
}

impl MovementCodec {
    /// A codec over a room's grid.
    pub fn new(parcels: ParcelEncoder) -> Self {
        Self { parcels }
    }

    /// Packs a plain movement message with velocity `tier` (its own `velocity_tier` is
    /// ignored): like [`MovementCodec::compress`] of its pose, with the head IK enables per
    /// axis (a disabled axis packs 0 and its bit stays clear) and `is_instant` in
    /// [`INSTANT_BIT`].
    pub fn compress_movement(&self, m: &crate::pb::Movement, tier: u8) -> Compressed {
        let mut c = self.compress(&Pose::from(m), m.timestamp, tier);
        if !m.head_ik_yaw_enabled {
            c.head_sync_data &=
                !((1 << 13) | (mask(HEAD_ROTATION_BITS) as u32) << HEAD_ROTATION_BITS);
        }
        if !m.head_ik_pitch_enabled {
            c.head_sync_data &= !((1 << 12) | mask(HEAD_ROTATION_BITS) as u32);
        }
        if m.is_instant {
            c.head_sync_data |= 1 << INSTANT_BIT;
        }
        c
    }

    /// Packs a pose (the sender's clock `timestamp_s`, velocity `tier` 0..=3); a head, when
    /// present, with both axes enabled.
    pub fn compress(&self, p: &Pose, timestamp_s: f64, tier: u8) -> Compressed {
        let tier = tier.min(3);
        let cfg = VELOCITY_TIERS[usize::from(tier)];

        let yaw = FloatQuantizer::compress(
            (f64::from(p.yaw_deg).rem_euclid(360.0)) as f32,
            0.0,
            360.0,
            ROTATION_BITS,
        ) % (1 << ROTATION_BITS);
        let f = p.anim_flags;
        let bit = |flag: u16| u32::from(f & flag != 0);
        let jumps = u32::from((f >> ANIM_JUMP_SHIFT) & 3);
        let mut t = u32::from(tier);
        t = (t << ROTATION_BITS) | yaw;
        t = (t << 1) | bit(ANIM_LONG_FALL);
        t = (t << 1) | bit(ANIM_FALLING);
        t = (t << 1) | bit(ANIM_LONG_JUMP);
        t = (t << 2) | jumps;
        t = (t << 1) | bit(ANIM_GROUNDED);
        t = (t << 1) | bit(ANIM_SLIDING);
        t = (t << 2) | u32::from(p.movement_kind.min(3));
        t = (t << TIMESTAMP_BITS) | compress_timestamp(timestamp_s);

        let [x, y, z] = p.position;
        let cell = self.parcels.cell_of(x, z);
        let origin = [cell[0] as f32 * CELL_SIZE_M, cell[1] as f32 * CELL_SIZE_M];
        let v = if p.velocity.iter().map(|c| c * c).sum::<f32>() < SAFE_ZONE {
            [0.0; 3]
        } else {
            p.velocity
        };
        let vb = cfg.velocity_bits;
        let mut m = u64::from(signed_compress(v[2], cfg.velocity_range, vb));
        m = (m << vb) | u64::from(signed_compress(v[1], cfg.velocity_range, vb));
        m = (m << vb) | u64::from(signed_compress(v[0], cfg.velocity_range, vb));
        m = (m << cfg.y_bits)
            | u64::from(FloatQuantizer::compress(y, Y_MIN_M, Y_MAX_M, cfg.y_bits));
        let rel = |v: f32, o: f32| FloatQuantizer::compress(v - o, 0.0, CELL_SIZE_M, cfg.xz_bits);
        m = (m << cfg.xz_bits) | u64::from(rel(z, origin[1]));
        m = (m << cfg.xz_bits) | u64::from(rel(x, origin[0]));
        m = (m << PARCEL_BITS) | u64::from(self.parcels.encode(cell));

        let mut head = 0u32;
        if let Some([hy, hp]) = p.head {
            let y = FloatQuantizer::compress(
                hy,
                -HEAD_YAW_MAX_DEG,
                HEAD_YAW_MAX_DEG,
                HEAD_ROTATION_BITS,
            );
            let pt = FloatQuantizer::compress(
                hp,
                -HEAD_PITCH_MAX_DEG,
                HEAD_PITCH_MAX_DEG,
                HEAD_ROTATION_BITS,
            );
            head = (1 << 13) | (1 << 12) | (y << HEAD_ROTATION_BITS) | pt;
        }
        head |= bit(ANIM_STUNNED) << 30 | bit(ANIM_EMOTING) << 31;

        let point = match p.point_at {
            Some(a) => {
                let axis = |i: usize| sqrt_compress(a[i] - p.position[i]);
                (1 << 30)
                    | (axis(2) << (2 * POINT_AT_AXIS_BITS))
                    | (axis(1) << POINT_AT_AXIS_BITS)
                    | axis(0)
            }
            None => 0,
        };
        Compressed {
            temporal_data: t,
            movement_data: m,
            head_sync_data: head,
            point_at_data: point,
        }
    }

    /// Unpacks a message; `ts` is the sender's timestamp decoder.
    pub fn decompress(
        &self,
        c: &Compressed,
        ts: &mut TimestampDecoder,
    ) -> Result<Decompressed, CompressedError> {
        let mut t = c.temporal_data;
        let stamp = t & mask(TIMESTAMP_BITS) as u32;
        t >>= TIMESTAMP_BITS;
        let movement_kind = (t & 3) as u8;
        t >>= 2;
        let mut flags = 0u16;
        let mut take = |flag: u16, t: &mut u32| {
            if *t & 1 == 1 {
                flags |= flag;
            }
            *t >>= 1;
        };
        take(ANIM_SLIDING, &mut t);
        take(ANIM_GROUNDED, &mut t);
        let jumps = (t & 3) as u16;
        t >>= 2;
        take(ANIM_LONG_JUMP, &mut t);
        take(ANIM_FALLING, &mut t);
        take(ANIM_LONG_FALL, &mut t);
        flags |= jumps << ANIM_JUMP_SHIFT;
        let yaw_q = t & mask(ROTATION_BITS) as u32;
        t >>= ROTATION_BITS;
        let tier = (t & 3) as u8;
        let cfg = VELOCITY_TIERS[usize::from(tier)];

        let mut m = c.movement_data;
        let cell = self.parcels.decode((m & mask(PARCEL_BITS)) as u32)?;
        m >>= PARCEL_BITS;
        let x_rel = (m & mask(cfg.xz_bits)) as u32;
        m >>= cfg.xz_bits;
        let z_rel = (m & mask(cfg.xz_bits)) as u32;
        m >>= cfg.xz_bits;
        let y_q = (m & mask(cfg.y_bits)) as u32;
        m >>= cfg.y_bits;
        let vb = cfg.velocity_bits;
        let mut v = [0.0f32; 3];
        for axis in &mut v {
            *axis = signed_decompress((m & mask(vb)) as u32, cfg.velocity_range, vb);
            m >>= vb;
        }
        let position = [
            cell[0] as f32 * CELL_SIZE_M
                + FloatQuantizer::decompress(x_rel, 0.0, CELL_SIZE_M, cfg.xz_bits),
            FloatQuantizer::decompress(y_q, Y_MIN_M, Y_MAX_M, cfg.y_bits),
            cell[1] as f32 * CELL_SIZE_M
                + FloatQuantizer::decompress(z_rel, 0.0, CELL_SIZE_M, cfg.xz_bits),
        ];

        let h = c.head_sync_data;
        if h & (1 << 30) != 0 {
            flags |= ANIM_STUNNED;
        }
        if h & (1 << 31) != 0 {
            flags |= ANIM_EMOTING;
        }
        let hm = mask(HEAD_ROTATION_BITS) as u32;
        let head = if h & (3 << 12) != 0 {
            let yaw_on = h & (1 << 13) != 0;
            let pitch_on = h & (1 << 12) != 0;
            let y = FloatQuantizer::decompress(
                (h >> HEAD_ROTATION_BITS) & hm,
                -HEAD_YAW_MAX_DEG,
                HEAD_YAW_MAX_DEG,
                HEAD_ROTATION_BITS,
            );
            let p = FloatQuantizer::decompress(
                h & hm,
                -HEAD_PITCH_MAX_DEG,
                HEAD_PITCH_MAX_DEG,
                HEAD_ROTATION_BITS,
            );
            Some([if yaw_on { y } else { 0.0 }, if pitch_on { p } else { 0.0 }])
        } else {
            None
        };
        let pa = c.point_at_data;
        let point_at = if pa & (1 << 30) != 0 {
            let am = mask(POINT_AT_AXIS_BITS) as u32;
            let axis = |i: u32| sqrt_decompress((pa >> (i * POINT_AT_AXIS_BITS)) & am);
            Some([
                position[0] + axis(0),
                position[1] + axis(1),
                position[2] + axis(2),
            ])
        } else {
            None
        };
        let pose = Pose {
            position,
            velocity: v,
            yaw_deg: FloatQuantizer::decompress(yaw_q, 0.0, 360.0, ROTATION_BITS),
            movement_kind,
            anim_flags: flags,
            head,
            point_at,
        };
        Ok(Decompressed {
            pose,
            timestamp_s: ts.decompress(stamp),
            tier,
            head_enabled: [h & (1 << 13) != 0, h & (1 << 12) != 0],
            is_instant: h & (1 << INSTANT_BIT) != 0,
        })
    }
}

/// [`MovementCodec::compress`] over the default grid (±2,048 m).
pub fn compress(p: &Pose, timestamp_s: f64, tier: u8) -> Compressed {
    MovementCodec::default().compress(p, timestamp_s, tier)
}

/// [`MovementCodec::decompress`] over the default grid (±2,048 m).
pub fn decompress(
    c: &Compressed,
    ts: &mut TimestampDecoder,
) -> Result<Decompressed, CompressedError> {
    MovementCodec::default().decompress(c, ts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pose(speed: f32) -> Pose {
        Pose {
            position: [123.45, 1.7, -987.6],
            velocity: [speed * 0.8, -speed * 0.1, -speed * 0.6],
            yaw_deg: 211.0,
            movement_kind: 2,
            anim_flags: ANIM_GROUNDED | ANIM_LONG_JUMP | ANIM_STUNNED | ANIM_EMOTING | (2 << 8),
            head: Some([35.0, -20.0]),
            point_at: Some([125.0, 2.5, -990.0]),
        }
    }

    #[test]
    fn round_trip_all_four_tiers() {
        for (tier, speed) in [(0u8, 1.5f32), (1, 3.5), (2, 7.0), (3, 18.0)] {
            assert_eq!(velocity_tier_from_speed(speed), tier);
            let cfg = VELOCITY_TIERS[usize::from(tier)];
            assert!(PARCEL_BITS + 2 * cfg.xz_bits + cfg.y_bits + 3 * cfg.velocity_bits <= 64);
            let p = pose(speed);
            let c = compress(&p, 12.34, tier);
            let mut ts = TimestampDecoder::new();
            let d = decompress(&c, &mut ts).unwrap();
            assert_eq!(d.tier, tier);
            assert!((d.timestamp_s - 12.34).abs() < 1e-6);
            let xz_err = FloatQuantizer::max_error(0.0, CELL_SIZE_M, cfg.xz_bits) + 1e-3;
            let y_err = FloatQuantizer::max_error(Y_MIN_M, Y_MAX_M, cfg.y_bits) + 1e-3;
            assert!(
                (d.pose.position[0] - p.position[0]).abs() <= xz_err,
                "tier {tier}"
            );
            assert!(
                (d.pose.position[2] - p.position[2]).abs() <= xz_err,
                "tier {tier}"
            );
            assert!(
                (d.pose.position[1] - p.position[1]).abs() <= y_err,
                "tier {tier}"
            );
            let v_err =
                FloatQuantizer::max_error(0.0, cfg.velocity_range, cfg.velocity_bits - 1) + 1e-4;
            for i in 0..3 {
                assert!(
                    (d.pose.velocity[i] - p.velocity[i]).abs() <= v_err,
                    "tier {tier} axis {i}"
                );
            }
            assert!((d.pose.yaw_deg - p.yaw_deg).abs() <= 360.0 / 63.0 / 2.0 + 1e-3);
            assert_eq!(d.pose.movement_kind, 2);
            assert_eq!(d.pose.anim_flags, p.anim_flags);
            let h = d.pose.head.unwrap();
            assert!((h[0] - 35.0).abs() <= 360.0 / 63.0 / 2.0 + 1e-3);
            assert!((h[1] + 20.0).abs() <= 180.0 / 63.0 / 2.0 + 1e-3);
            let a = d.pose.point_at.unwrap();
            let b = p.point_at.unwrap();
            for i in 0..3 {
                assert!(
                    (a[i] - b[i]).abs() < 0.1,
                    "point-at axis {i}: {} vs {}",
                    a[i],
                    b[i]
                );
            }
        }
    }

    #[test]
    fn idle_pose_is_small_and_exact_where_it_can_be() {
        let p = Pose {
            position: [0.0, 0.0, 0.0],
            ..Pose::default()
        };
        let c = compress(&p, 0.0, 0);
        assert_eq!(c.head_sync_data, 0);
        assert_eq!(c.point_at_data, 0);
        let d = decompress(&c, &mut TimestampDecoder::new()).unwrap();
        assert_eq!(d.pose.position, [0.0; 3]);
        assert_eq!(d.pose.velocity, [0.0; 3]);
        assert_eq!(d.pose.head, None);
        assert_eq!(d.pose.point_at, None);
        // Below the safe zone velocity travels as zero.
        let slow = Pose {
            velocity: [0.1, 0.0, 0.1],
            ..p
        };
        let d = decompress(&compress(&slow, 0.0, 0), &mut TimestampDecoder::new()).unwrap();
        assert_eq!(d.pose.velocity, [0.0; 3]);
    }

    #[test]
    fn timestamp_decoder_unwraps_per_sender() {
        let mut a = TimestampDecoder::new();
        let mut t = 600.0;
        let mut prev = a.decompress(compress_timestamp(t));
        for _ in 0..200 {
            t += 0.5;
            let got = a.decompress(compress_timestamp(t));
            assert!((got - t).abs() < 0.011, "{got} vs {t}");
            assert!(got > prev);
            prev = got;
        }
        assert!(t > TIMESTAMP_BUFFER_S, "the run crossed a wrap");
        // A second sender starting fresh is independent.
        let mut b = TimestampDecoder::new();
        assert!((b.decompress(compress_timestamp(3.0)) - 3.0).abs() < 1e-9);
    }

    fn movement(pos: [f32; 3], vel: [f32; 3], t: f64) -> crate::pb::Movement {
        let v = |a: [f32; 3]| {
            Some(crate::pb::Vec3 {
                x: a[0],
                y: a[1],
                z: a[2],
            })
        };
        crate::pb::Movement {
            position: v(pos),
            velocity: v(vel),
            rotation_y: 90.0,
            movement_kind: 1,
            anim_flags: u32::from(ANIM_GROUNDED),
            timestamp: t,
            ..Default::default()
        }
    }

    #[test]
    fn head_enables_per_axis_and_instant_travel() {
        let codec = MovementCodec::default();
        for (yaw_on, pitch_on) in [(true, true), (true, false), (false, true), (false, false)] {
            for instant in [false, true] {
                let mut m = movement([3.0, 0.0, 4.0], [1.0, 0.0, 0.0], 7.5);
                m.head_ik_yaw_enabled = yaw_on;
                m.head_ik_pitch_enabled = pitch_on;
                m.head_yaw = 40.0;
                m.head_pitch = -30.0;
                m.is_instant = instant;
                let c = codec.compress_movement(&m, 0);
                let d = codec.decompress(&c, &mut TimestampDecoder::new()).unwrap();
                assert_eq!(d.head_enabled, [yaw_on, pitch_on]);
                assert_eq!(d.is_instant, instant);
                let back = d.to_movement();
                assert_eq!(back.head_ik_yaw_enabled, yaw_on);
                assert_eq!(back.head_ik_pitch_enabled, pitch_on);
                assert_eq!(back.is_instant, instant);
                assert_eq!(back.velocity_tier, 0);
                let step = 360.0 / 63.0 / 2.0 + 1e-3;
                if yaw_on {
                    assert!((back.head_yaw - 40.0).abs() <= step);
                } else {
                    assert_eq!(back.head_yaw, 0.0);
                    assert_eq!(c.head_sync_data & (0x3f << 6), 0, "a disabled yaw packs 0");
                }
                if pitch_on {
                    assert!((back.head_pitch + 30.0).abs() <= step);
                } else {
                    assert_eq!(back.head_pitch, 0.0);
                    assert_eq!(c.head_sync_data & 0x3f, 0, "a disabled pitch packs 0");
                }
                if !yaw_on && !pitch_on && !instant {
                    assert_eq!(c.head_sync_data, 0, "zero when idle");
                }
                assert_eq!(Pose::from(&back).head, d.pose.head);
            }
        }
        // A pose packed with `compress` (no enables, no instant) reads as before.
        let c = compress(&pose(1.0), 1.0, 0);
        let d = decompress(&c, &mut TimestampDecoder::new()).unwrap();
        assert_eq!(d.head_enabled, [true, true]);
        assert!(!d.is_instant);
    }

    #[test]
    fn sender_picks_the_tier_from_distance_over_time() {
        let mut s = CompressedSender::new();
        // First message: its own speed (1.4 m/s: tier 0), even when it is a placement.
        let mut first = movement([0.0, 0.0, 0.0], [1.4, 0.0, 0.0], 1.0);
        first.is_instant = true;
        first.velocity_tier = 3;
        let (c, d) = s.encode(&first);
        assert_eq!(d.tier, 0, "the message's own velocity_tier is ignored");
        assert!(d.is_instant);
        assert_eq!(c.temporal_data >> 30, 0);
        assert_eq!(d.timestamp_s, 1.0);
        // A walker at 1.4 m/s, 10 Hz: tier 0; 3.5 m/s: tier 1.
        let (_, d) = s.encode(&movement([0.14, 0.0, 0.0], [1.4, 0.0, 0.0], 1.1));
        assert_eq!(d.tier, 0);
        let (_, d) = s.encode(&movement([0.49, 0.0, 0.0], [3.5, 0.0, 0.0], 1.2));
        assert_eq!(d.tier, 1);
        // Carried by a platform: its velocity reads 0 but it covered 0.7 m in 0.1 s (7 m/s):
        // tier 2, from the distance.
        let (_, d) = s.encode(&movement([1.19, 0.0, 0.0], [0.0; 3], 1.3));
        assert_eq!(d.tier, 2);
        // 30 m in 2 s (15 m/s): tier 3.
        let (_, d) = s.encode(&movement([31.19, 0.0, 0.0], [0.0; 3], 3.3));
        assert_eq!(d.tier, 3);
        // A slow distance but a fast own velocity: the velocity is never clamped by the tier.
        let (_, d) = s.encode(&movement([31.2, 0.0, 0.0], [3.9, 0.0, 0.0], 4.3));
        assert_eq!(d.tier, 1);
        assert!((d.pose.velocity[0] - 3.9).abs() < 0.14);
        // A placement far away is not a speed; nor is a non-increasing timestamp.
        let mut jump = movement([500.0, 0.0, 0.0], [0.0; 3], 4.4);
        jump.is_instant = true;
        assert_eq!(s.encode(&jump).1.tier, 0);
        assert_eq!(
            s.encode(&movement([510.0, 0.0, 0.0], [0.0; 3], 4.4)).1.tier,
            0
        );
        // After a reset the next message is a first one.
        s.reset();
        assert_eq!(s.encode(&movement([0.0; 3], [0.0; 3], 9.0)).1.tier, 0);
        assert_eq!(
            tier_speed(Some(([0.0; 3], 0.0)), [3.0, 4.0, 0.0], [0.0; 3], 1.0, false),
            5.0
        );
    }

    #[test]
    fn bad_cell_index_is_an_error() {
        let c = Compressed {
            movement_data: mask(PARCEL_BITS),
            ..Compressed::default()
        };
        assert_eq!(
            decompress(&c, &mut TimestampDecoder::new()),
            Err(CompressedError::CellOutOfRange)
        );
    }

    #[test]
    fn cells_cover_the_room() {
        let g = ParcelEncoder::default();
        for (x, z) in [
            (-2048.0, -2048.0),
            (2047.9, 2047.9),
            (0.0, -0.1),
            (5000.0, -5000.0),
        ] {
            let cell = g.cell_of(x, z);
            let i = g.encode(cell);
            assert!(i < 1 << PARCEL_BITS);
            assert_eq!(g.decode(i), Ok(cell));
        }
    }
}
