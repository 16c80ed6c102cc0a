//! The model both sides keep of what a client holds ([`Held`], with its predictor state) and the
//! bit coding of each record field.

use super::hash::pose_floats;
use super::types::{EntityRecord, FrameError, OwnState};
use crate::bits::{BitCounter, BitReader, BitSink};
use crate::quant::{Pose, QuantPose, YAW_STEPS};

/// Change-mask group: position, velocity and yaw.
pub(super) const G_MOTION: u8 = 0x01;
/// Change-mask group: movement kind and animation flags.
pub(super) const G_STATE: u8 = 0x02;
/// Change-mask group: head IK.
pub(super) const G_HEAD: u8 = 0x04;
/// Change-mask group: point-at.
pub(super) const G_POINT: u8 = 0x08;
/// Change-mask group: tier.
pub(super) const G_TIER: u8 = 0x10;

/// Exp-Golomb orders of the residuals (tuned on the random-walk bandwidth bench).
pub(super) const K_POS: u32 = 1;
pub(super) const K_VEL: u32 = 0;
pub(super) const K_YAW: u32 = 0;
pub(super) const K_TICK: u32 = 1;
pub(super) const K_SEL_GAP: u32 = 2;

// === Shared model ===

/// What a client holds for one entity, plus the predictor state both sides keep.
///
/// `repr(C)`, fields the encoder reads for every held entity first (tier, priority, id), the
/// pose after them and the predictor state last.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub(super) struct Held {
    pub(super) tier: u8,
    /// Encoder only: priority accumulated while a pose update waits.
    pub(super) acc: u32,
    pub(super) rec: EntityRecord,
    /// Position before the last motion update (predictor).
    pub(super) prev_pos: [i32; 3],
    /// Tick of the last motion update.
    pub(super) pose_tick: u32,
    /// Tick of the motion update before it.
    pub(super) prev_tick: u32,
}

impl Held {
    pub(super) fn new(rec: EntityRecord, tier: u8, tick: u32) -> Self {
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
    pub(super) fn predict(&self, tick: u32) -> [i32; 3] {
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

    pub(super) fn apply(&mut self, mask: u8, p: &QuantPose, tier: u8, tick: u32) {
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
pub(super) fn div_round(a: i64, b: i64) -> i64 {
    if a >= 0 {
        (a + b / 2) / b
    } else {
        -((-a + b / 2) / b)
    }
}

/// Signed shortest yaw step from `a` to `b`, in `-256..256`.
pub(super) fn yaw_diff(a: u16, b: u16) -> i64 {
    let steps = i64::from(YAW_STEPS);
    let d = (i64::from(b) - i64::from(a)).rem_euclid(steps);
    if d >= steps / 2 { d - steps } else { d }
}

pub(super) fn groups(old: &QuantPose, new: &QuantPose) -> u8 {
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

pub(super) fn own_eq(a: &OwnState, b: &OwnState) -> bool {
    a.entity == b.entity
        && a.last_input_seq == b.last_input_seq
        && pose_floats(&a.pose) == pose_floats(&b.pose)
        && a.pose.movement_kind == b.pose.movement_kind
        && a.pose.anim_flags == b.pose.anim_flags
        && a.pose.head.is_some() == b.pose.head.is_some()
        && a.pose.point_at.is_some() == b.pose.point_at.is_some()
}

pub(super) const OWN_ZERO: OwnState = OwnState {
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

pub(super) fn write_xor_f32<S: BitSink>(w: &mut S, old: f32, new: f32) {
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

pub(super) fn read_xor_f32(r: &mut BitReader<'_>, old: f32) -> Result<f32, FrameError> {
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

pub(super) fn write_own<S: BitSink>(w: &mut S, base: &OwnState, own: &OwnState) {
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

pub(super) fn read_own(r: &mut BitReader<'_>, base: &OwnState) -> Result<OwnState, FrameError> {
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

pub(super) fn write_head<S: BitSink>(w: &mut S, old: Option<[i16; 2]>, new: Option<[i16; 2]>) {
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

pub(super) fn read_head(
    r: &mut BitReader<'_>,
    old: Option<[i16; 2]>,
) -> Result<Option<[i16; 2]>, FrameError> {
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

pub(super) fn write_point<S: BitSink>(
    w: &mut S,
    old: Option<[i32; 3]>,
    new: Option<[i32; 3]>,
    pos: [i32; 3],
) {
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

pub(super) fn read_point(
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

pub(super) fn add_i32(base: i32, d: i64, what: &'static str) -> Result<i32, FrameError> {
    i64::from(base)
        .checked_add(d)
        .and_then(|v| i32::try_from(v).ok())
        .ok_or(FrameError::Malformed(what))
}

pub(super) fn add_i16(base: i16, d: i64, what: &'static str) -> Result<i16, FrameError> {
    i64::from(base)
        .checked_add(d)
        .and_then(|v| i16::try_from(v).ok())
        .ok_or(FrameError::Malformed(what))
}

/// Writes the change of a held entity: mask, then each group's residual.
pub(super) fn write_change<S: BitSink>(
    w: &mut S,
    h: &Held,
    mask: u8,
    p: &QuantPose,
    tier: u8,
    tick: u32,
) {
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
pub(super) fn read_change(
    r: &mut BitReader<'_>,
    h: &mut Held,
    tick: u32,
) -> Result<(), FrameError> {
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
pub(super) fn write_new<S: BitSink>(
    w: &mut S,
    prev: Option<(u32, [i32; 3])>,
    rec: &EntityRecord,
    tier: u8,
) {
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

pub(super) fn read_new(
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

pub(super) fn write_leb(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(super) fn read_leb(data: &[u8], pos: &mut usize) -> Result<u32, FrameError> {
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
pub(super) fn write_selection<S: BitSink>(w: &mut S, n: usize, sel: &[u32]) {
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

pub(super) fn read_selection(
    r: &mut BitReader<'_>,
    n: usize,
    sel: &mut Vec<u32>,
) -> Result<(), FrameError> {
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

/// Merges `fresh` (sorted by id) into `v` (sorted by id) in place, from the back (of equal ids,
/// those of `v` first, as a stable merge would): `v` grows once by `fresh.len()` and no second
/// held-sized vector is needed. `make` turns a fresh item into what `v` holds. Encoder and
/// decoder merge their new entities alike.
pub(super) fn merge_in_place<T>(
    v: &mut Vec<Held>,
    fresh: &[T],
    id: impl Fn(&T) -> u32,
    make: impl Fn(&T) -> Held,
) {
    let Some(first) = fresh.first() else {
        return;
    };
    let (mut i, mut j) = (v.len(), fresh.len());
    let mut k = i + j;
    // Grown by what it needs plus a quarter, not doubled: a keyframe's set (every entity new)
    // is allocated to size, not rounded up to the next power of two (a room of 50: 4.2, not
    // 5.4 KiB per client), and a set that grows one entity at a time still grows geometrically.
    if k > v.capacity() {
        v.reserve_exact(j.max(i / 4));
    }
    v.resize(k, make(first));
    while j > 0 {
        k -= 1;
        if i > 0 && v[i - 1].rec.id > id(&fresh[j - 1]) {
            v[k] = v[i - 1];
            i -= 1;
        } else {
            v[k] = make(&fresh[j - 1]);
            j -= 1;
        }
    }
}
