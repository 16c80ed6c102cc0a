//! [`FrameDecoder`]: the client side of the codec.

use std::cell::RefCell;

use super::fields::*;
use super::hash::state_hash;
use super::types::{DecodedFrame, EntityRecord, FrameError, OwnState};
use super::{
    FLAG_CHECK, FLAG_KEYFRAME, FLAG_OWN, FLAG_OWN_CLEAR, FRAME_VERSION, MAX_ENTITIES,
    MAX_FRAME_BYTES,
};
use crate::bits::BitReader;
use crate::quant::QuantPose;

// === Decoder ===

/// Client-side frame decoder: holds what the server says the client should hold.
///
/// Memory: besides the held set, a frame that removes or adds entities builds the next held
/// set beside it (fail closed: the held set stays as it was until the frame checked out) and
/// drops the old one after the swap, so no second held-sized vector stays per decoder between
/// such frames; new entities are merged in place. The scratch of a frame (the selection, the
/// patch of changed entities, the new ones) is the thread's, not the decoder's: a process with
/// thousands of decoders (`plaza-load`) keeps one per thread instead of one held-sized patch
/// per decoder.
#[derive(Clone, Debug, Default)]
pub struct FrameDecoder {
    held: Vec<Held>,
    own: Option<OwnState>,
    last_seq: Option<u32>,
    last_tick: u32,
    next: Vec<Held>,
}

/// What [`FrameDecoder::apply_into`] needs only while it runs.
#[derive(Debug, Default)]
struct Scratch {
    /// The frame's new entities before they are merged into `next`.
    fresh: Vec<Held>,
    sel: Vec<u32>,
    patch: Vec<(u32, Held)>,
}

thread_local! {
    /// The thread's decoding scratch (a frame is applied without yielding, so one is enough).
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

impl FrameDecoder {
    /// An empty decoder (expects a keyframe first).
    pub fn new() -> Self {
        Self::default()
    }

    /// Apply one frame onto what the decoder holds. Fail closed: on any error the held state is
    /// unchanged and the client should send Resync (ChainBreak / CheckMismatch / malformed).
    pub fn apply(&mut self, frame: &[u8]) -> Result<DecodedFrame, FrameError> {
        let mut out = DecodedFrame::default();
        self.apply_into(frame, &mut out)?;
        Ok(out)
    }

    /// [`FrameDecoder::apply`] into `out`, reusing its vectors (a caller that decodes every
    /// frame keeps one `DecodedFrame` and allocates nothing for it per frame). On success `out`
    /// is what `apply` would return; on an error its contents are unspecified (the held state
    /// is unchanged, as with `apply`).
    pub fn apply_into(&mut self, frame: &[u8], out: &mut DecodedFrame) -> Result<(), FrameError> {
        SCRATCH.with(|s| match s.try_borrow_mut() {
            Ok(mut s) => self.apply_with(frame, out, &mut s),
            // Not reentrant in practice; a fresh scratch keeps it correct if it ever were.
            Err(_) => self.apply_with(frame, out, &mut Scratch::default()),
        })
    }

    fn apply_with(
        &mut self,
        frame: &[u8],
        out: &mut DecodedFrame,
        sc: &mut Scratch,
    ) -> Result<(), FrameError> {
        out.changed.clear();
        out.removed.clear();
        out.checked = false;
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

        out.seq = seq;
        out.base_seq = base_seq;
        out.tick = tick;
        out.keyframe = keyframe;
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
        sc.patch.clear();
        if patching {
            read_selection(&mut r, held.len(), &mut sc.sel)?;
            for &s in &sc.sel {
                let mut h = held[s as usize];
                read_change(&mut r, &mut h, tick)?;
                out.changed.push(h.rec.id);
                sc.patch.push((s, h));
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
            read_selection(&mut r, self.next.len(), &mut sc.sel)?;
            for &s in &sc.sel {
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
                let patch = &sc.patch;
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
            for (s, h) in &sc.patch {
                self.held[*s as usize] = *h;
            }
            self.own = own;
            self.last_seq = Some(seq);
            self.last_tick = tick;
            return Ok(());
        }
        if patching {
            self.next.clear();
            self.next.reserve_exact(held.len() + n_new as usize);
            self.next.extend_from_slice(held);
            for (s, h) in &sc.patch {
                self.next[*s as usize] = *h;
            }
        }
        let mut prev = None;
        sc.fresh.clear();
        for _ in 0..n_new {
            let (rec, tier) = read_new(&mut r, prev)?;
            prev = Some((rec.id, rec.pose.position_mm));
            sc.fresh.push(Held::new(rec, tier, tick));
            out.changed.push(rec.id);
        }
        r.finish()?;
        if self.next.is_empty() {
            // A keyframe (or nothing kept): the new entities are the set; the scratch keeps
            // the empty vector, so it stays as small as a delta's new entities.
            std::mem::swap(&mut self.next, &mut sc.fresh);
        } else {
            merge_in_place(&mut self.next, &sc.fresh, |h| h.rec.id, |h| *h);
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
        // The old held set goes: the next such frame builds its own (see the type's docs).
        self.held = std::mem::take(&mut self.next);
        self.own = own;
        self.last_seq = Some(seq);
        self.last_tick = tick;
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::QuantPose;

    fn held(id: u32, tier: u8) -> Held {
        let rec = EntityRecord {
            id,
            generation: 0,
            kind: 0,
            pose: QuantPose::default(),
        };
        Held::new(rec, tier, 0)
    }

    #[test]
    fn merge_in_place_is_a_stable_merge() {
        let ids = |v: &[Held]| v.iter().map(|h| (h.rec.id, h.tier)).collect::<Vec<_>>();
        for (a, b) in [
            (vec![1, 4, 9], vec![2, 3, 10]),
            (vec![], vec![5, 6]),
            (vec![5, 6], vec![]),
            (vec![7, 8], vec![1, 2]),
            (vec![1, 2], vec![7, 8]),
            (vec![3, 5], vec![3, 5, 6]),
        ] {
            let mut v: Vec<Held> = a.iter().map(|&id| held(id, 0)).collect();
            let fresh: Vec<Held> = b.iter().map(|&id| held(id, 1)).collect();
            let mut want: Vec<Held> = v.iter().chain(&fresh).copied().collect();
            want.sort_by_key(|h| h.rec.id);
            merge_in_place(&mut v, &fresh, |h| h.rec.id, |h| *h);
            assert_eq!(ids(&v), ids(&want), "{a:?} + {b:?}");
        }
    }
}
