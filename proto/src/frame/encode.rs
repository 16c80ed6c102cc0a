//! [`FrameEncoder`]: the server side of the codec, one per client.

use super::fields::*;
use super::hash::state_hash;
use super::types::{EncodeStats, EncoderConfig, EntityRecord, OwnState, Visible};
use super::{
    FLAG_CHECK, FLAG_KEYFRAME, FLAG_OWN, FLAG_OWN_CLEAR, FRAME_VERSION, TIER_EVERY, TIER_WEIGHT,
};
use crate::bits::{BitCounter, BitSink, BitWriter};

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

/// What one frame's encode works in and no client keeps between frames: the changes, removals
/// and new entities of the frame being written. [`FrameEncoder::encode_with`] borrows one for
/// the frame, so a room keeps one per encoding thread instead of one per client (≈ 4 KiB per
/// client in a room of 50, where each vector grows to the room's view once, at the keyframe).
#[derive(Debug, Default)]
pub struct EncodeScratch {
    removed: Vec<u32>,
    pending: Vec<Pending>,
    news: Vec<(EntityRecord, u8)>,
    sel: Vec<u32>,
    order: Vec<u32>,
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
    /// Scratch of [`FrameEncoder::encode`]; empty between the frames of
    /// [`FrameEncoder::encode_with`].
    scratch: EncodeScratch,
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
            scratch: EncodeScratch::default(),
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

    /// [`FrameEncoder::encode`] working in `scratch` instead of the encoder's own scratch: the
    /// same frame, bit for bit, for any scratch (its contents are cleared before use). An
    /// encoder only ever encoded this way holds its model and nothing else.
    pub fn encode_with(
        &mut self,
        scratch: &mut EncodeScratch,
        tick: u32,
        own: Option<&OwnState>,
        visible: &[Visible<'_>],
        out: &mut Vec<u8>,
    ) -> EncodeStats {
        std::mem::swap(&mut self.scratch, scratch);
        let st = self.encode(tick, own, visible, out);
        std::mem::swap(&mut self.scratch, scratch);
        st
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
        self.scratch.removed.clear();
        self.scratch.pending.clear();
        self.scratch.news.clear();
        let (mut i, mut j, mut post) = (0usize, 0usize, 0u32);
        let mut last_vis: Option<u32> = None;
        while i < self.model.len() || j < visible.len() {
            let Some(v) = visible.get(j) else {
                // Nothing more to hold: the rest of what the client holds goes.
                self.scratch
                    .removed
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
                self.scratch.news.push(sanitized(v));
                j += 1;
                continue;
            };
            if h.rec.id < vid {
                self.scratch.removed.push(h.rec.id);
                i += 1;
                continue;
            }
            last_vis = Some(vid);
            if h.rec.id > vid {
                self.scratch.news.push(sanitized(v));
                j += 1;
                continue;
            }
            i += 1;
            j += 1;
            if h.rec.generation != v.record.generation || h.rec.kind != v.record.kind {
                self.scratch.removed.push(h.rec.id);
                self.scratch.news.push(sanitized(v));
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
            // A teleported avatar's move goes at once, with the instant bit that says so.
            let instant = new.anim_flags & crate::quant::ANIM_INSTANT != 0;
            if mask & G_MOTION != 0
                && !start_stop
                && !instant
                && seq.wrapping_add(h.rec.id) & (TIER_EVERY[usize::from(tier)] - 1) != 0
            {
                mask &= !G_MOTION;
            }
            if mask != 0 {
                let mandatory = start_stop || instant || mask != G_MOTION;
                self.scratch.pending.push(Pending {
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
        let optional = self.scratch.pending.iter().filter(|p| !p.mandatory).count();
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
            removed.eg(self.scratch.removed.len() as u64, 0);
            for &id in &self.scratch.removed {
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
            fixed.eg(self.scratch.removed.len() as u64, 0);
            for &id in &self.scratch.removed {
                fixed.eg(u64::from(id), 2);
            }
            fixed.eg(self.scratch.news.len() as u64, 0);
            let mut prev = None;
            for (rec, tier) in &self.scratch.news {
                write_new(&mut fixed, prev, rec, *tier);
                prev = Some((rec.id, rec.pose.position_mm));
            }
            fixed.bits += held_after as u64 + 1;
            let mut total = fixed.bits;
            for p in &mut self.scratch.pending {
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
                self.scratch.order.clear();
                self.scratch.order.extend(
                    self.scratch
                        .pending
                        .iter()
                        .enumerate()
                        .filter(|(_, p)| !p.mandatory)
                        .map(|(k, _)| k as u32),
                );
                let pending = &self.scratch.pending;
                let model = &self.model;
                self.scratch.order.sort_unstable_by(|&a, &b| {
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
                        .scratch
                        .pending
                        .iter()
                        .filter(|p| p.mandatory)
                        .map(|p| u64::from(p.bits))
                        .sum::<u64>();
                for &k in &self.scratch.order {
                    let p = &mut self.scratch.pending[k as usize];
                    if used + u64::from(p.bits) <= allowed {
                        used += u64::from(p.bits);
                    } else {
                        p.include = false;
                        deferred += 1;
                    }
                }
            }
        }
        for p in &self.scratch.pending {
            let h = &mut self.model[p.model_idx as usize];
            if p.include {
                h.acc = 0;
            } else {
                h.acc = p.prio;
            }
        }
        self.scratch.pending.retain(|p| p.include);

        let check_at = match written {
            Some(at) => at,
            None => self.write_frame(out, &head, held_after, visible).0,
        };

        // Update the model exactly as the decoder will.
        for p in &self.scratch.pending {
            let pose = visible[p.vis as usize].record.pose.canonical();
            self.model[p.model_idx as usize].apply(p.mask, &pose, p.tier, tick);
        }
        if !self.scratch.removed.is_empty() {
            // `removed` is in the model's (id) order.
            let removed = &self.scratch.removed;
            let mut r = 0;
            self.model.retain(|h| {
                let gone = removed.get(r) == Some(&h.rec.id);
                r += usize::from(gone);
                !gone
            });
        }
        // Both are sorted by id.
        merge_in_place(
            &mut self.model,
            &self.scratch.news,
            |n| n.0.id,
            |&(rec, tier)| Held::new(rec, tier, tick),
        );
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
            changed: (self.scratch.pending.len() + self.scratch.news.len()) as u32,
            removed: self.scratch.removed.len() as u32,
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
        w.eg(self.scratch.removed.len() as u64, 0);
        let mut prev: i64 = -1;
        for &id in &self.scratch.removed {
            w.eg((i64::from(id) - prev - 1) as u64, 2);
            prev = i64::from(id);
        }
        self.scratch.sel.clear();
        self.scratch
            .sel
            .extend(self.scratch.pending.iter().map(|p| p.post_idx));
        write_selection(&mut w, held_after, &self.scratch.sel);
        let at = w.bit_len();
        for p in &self.scratch.pending {
            let h = &self.model[p.model_idx as usize];
            let pose = visible[p.vis as usize].record.pose.canonical();
            write_change(&mut w, h, p.mask, &pose, p.tier, tick);
        }
        bits.changes = w.bit_len() - at;
        let at = w.bit_len();
        w.eg(self.scratch.news.len() as u64, 0);
        let mut prev = None;
        for (rec, tier) in &self.scratch.news {
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
