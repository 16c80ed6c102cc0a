//! Move-to-seen matching: when does another bot first decode a bot's move?
//!
//! All bots run in one process, so each room keeps a shared table: entity → ring of the last
//! [`RING`] movement sends of the bot that owns the entity (a process-unique send id, the send
//! instant, x and z). When an observer decodes a frame, each changed entity's decoded position is
//! matched against that ring (x and z within the tolerance, default 2 mm; y is left out because
//! the server owns the height). The newest matching send the observer has not yet matched gives
//! one sample `now - sent`. The first sighting of an entity by an observer (it entered the
//! observer's interest, or a keyframe started over) records nothing: it is not a move.
//!
//! **Every observer records** (not only the first): a move in a room of N bots yields up to
//! N - 1 samples, so p99 reflects what clients see, not the luckiest client. This module does
//! not decode frames and does not record histograms itself.
//!
//! Matching runs for every changed entity of every decoded frame (hundreds of thousands of times
//! a second), so it is built for memory traffic: the room's rings are indexed by entity id (ids
//! are small integers, reused lowest-first), a ring is read without a lock (each slot is a small
//! seqlock: its send id is zeroed while the owner rewrites it, and readers skip a slot whose id
//! changed under them), and a match scans from the newest send backwards and stops at the first
//! send the observer already matched (usually after one or two slots). The observer's own
//! memory of matched sends ([`Matched`]) is a vector indexed by entity id (a map with a
//! multiplicative hash for ids beyond [`DENSE_IDS`]). The owner
//! writes its ring at its send rate (≤ 10 Hz); readers never write shared memory.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::time::Instant;

use parking_lot::{Mutex, RwLock};

/// Sends remembered per entity.
pub(crate) const RING: usize = 16;

/// Entity ids at or above this are not tracked (avatar ids are small; props start at 2^20).
const MAX_TRACKED_ID: u32 = 1 << 20;

/// A hasher for entity ids (small integers): one multiplication, no SipHash rounds.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 ^ u64::from(n)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A map keyed by entity id.
pub(crate) type IdMap<V> = HashMap<u32, V, BuildHasherDefault<IdHasher>>;

/// Entity ids below this are remembered in [`Matched`]'s vector (8 bytes per id up to the
/// largest seen), the rest in its map.
pub(crate) const DENSE_IDS: u32 = 4096;

/// "Not seen yet" in [`Matched`]'s vector.
const UNSEEN: u64 = u64::MAX;

/// An observer's memory per entity of the newest send id it matched (an entity absent: not
/// seen yet).
#[derive(Debug, Default)]
pub(crate) struct Matched {
    dense: Vec<u64>,
    sparse: IdMap<u64>,
}

impl Matched {
    /// Forgets every entity (a keyframe: everything is seen anew).
    pub(crate) fn clear(&mut self) {
        self.dense.clear();
        self.sparse.clear();
    }

    /// Forgets `entity` (it left the observer's view).
    pub(crate) fn remove(&mut self, entity: u32) {
        match self.dense.get_mut(entity as usize) {
            Some(v) => *v = UNSEEN,
            None => {
                self.sparse.remove(&entity);
            }
        }
    }

    /// Remembers `send` as the newest matched of `entity`.
    pub(crate) fn insert(&mut self, entity: u32, send: u64) {
        *self.slot(entity) = send;
    }

    /// The entity's memory (`UNSEEN` when not seen yet).
    fn slot(&mut self, entity: u32) -> &mut u64 {
        if entity < DENSE_IDS {
            let i = entity as usize;
            if self.dense.len() <= i {
                self.dense.resize(i + 1, UNSEEN);
            }
            &mut self.dense[i]
        } else {
            self.sparse.entry(entity).or_insert(UNSEEN)
        }
    }
}

impl FromIterator<(u32, u64)> for Matched {
    fn from_iter<I: IntoIterator<Item = (u32, u64)>>(iter: I) -> Self {
        let mut m = Self::default();
        for (entity, send) in iter {
            m.insert(entity, send);
        }
        m
    }
}

/// One remembered movement send.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Sent {
    id: u64,
    /// Microseconds since the room table's epoch.
    at_us: u64,
    x: f32,
    z: f32,
}

/// One ring slot, a seqlock keyed by the send id (0: empty or being written).
#[derive(Debug, Default)]
struct Slot {
    id: AtomicU64,
    at_us: AtomicU64,
    /// x and z as `f32` bits, x in the high half.
    xz: AtomicU64,
}

/// The last sends of one entity: written by its owner only, read by every observer.
#[derive(Debug, Default)]
pub(crate) struct MoveRing {
    /// Writes so far: the newest send is in slot `(head - 1) % RING`.
    head: AtomicU64,
    slots: [Slot; RING],
}

impl MoveRing {
    /// Writes `s` into slot `i` (the owner's only, in order; ids are unique and never 0).
    fn write(&self, i: usize, s: Sent) {
        let slot = &self.slots[i % RING];
        slot.id.store(0, Ordering::Relaxed);
        // Readers that see any of the stores below also see the id cleared.
        fence(Ordering::Release);
        slot.at_us.store(s.at_us, Ordering::Relaxed);
        slot.xz.store(
            (u64::from(s.x.to_bits()) << 32) | u64::from(s.z.to_bits()),
            Ordering::Relaxed,
        );
        slot.id.store(s.id, Ordering::Release);
        self.head.store(i as u64 + 1, Ordering::Release);
    }

    /// Slot `i`, unless it is empty or was rewritten while being read.
    fn read(&self, i: usize) -> Option<Sent> {
        let slot = &self.slots[i];
        let id = slot.id.load(Ordering::Acquire);
        if id == 0 {
            return None;
        }
        let at_us = slot.at_us.load(Ordering::Relaxed);
        let xz = slot.xz.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        if slot.id.load(Ordering::Relaxed) != id {
            return None;
        }
        Some(Sent {
            id,
            at_us,
            x: f32::from_bits((xz >> 32) as u32),
            z: f32::from_bits(xz as u32),
        })
    }

    /// The id of the newest send (0 when none).
    fn newest_id(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| s.id.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0)
    }

    /// The newest send with `id > after` whose x and z are within `tol` of `pos`: walks from
    /// the newest send backwards and stops at the first one with `id <= after` (sends are
    /// written in id order).
    fn find(&self, pos: [f32; 3], tol: f32, after: u64) -> Option<Sent> {
        let head = self.head.load(Ordering::Acquire) as usize;
        for back in 1..=RING.min(head) {
            let i = (head - back) % RING;
            let Some(s) = self.read(i) else {
                // Being rewritten: the owner is lapping us; older slots are still valid.
                continue;
            };
            if s.id <= after {
                return None;
            }
            if (s.x - pos[0]).abs() <= tol && (s.z - pos[2]).abs() <= tol {
                return Some(s);
            }
        }
        None
    }
}

/// Handle a bot keeps for its own entity while joined; unregisters on drop.
pub(crate) struct OwnMoves {
    room: Arc<RoomMoves>,
    entity: u32,
    ring: Arc<MoveRing>,
    /// Sends written so far.
    written: usize,
}

impl OwnMoves {
    /// Remembers a movement send at `at` to `pos`.
    pub(crate) fn sent(&mut self, at: Instant, pos: [f32; 3]) {
        let id = self.room.ids.fetch_add(1, Ordering::Relaxed) + 1;
        self.ring.write(
            self.written,
            Sent {
                id,
                at_us: self.room.micros(at),
                x: pos[0],
                z: pos[2],
            },
        );
        self.written += 1;
    }
}

impl Drop for OwnMoves {
    fn drop(&mut self) {
        let mut map = self.room.entities.write();
        // Only remove our own registration (a later join may reuse the entity id).
        if let Some(slot) = map.get_mut(self.entity as usize)
            && slot.as_ref().is_some_and(|r| Arc::ptr_eq(r, &self.ring))
        {
            *slot = None;
        }
    }
}

/// The shared table of one room.
pub(crate) struct RoomMoves {
    /// Rings by entity id.
    entities: RwLock<Vec<Option<Arc<MoveRing>>>>,
    /// Send ids, increasing across the room (so a reused entity id never matches old sends).
    ids: AtomicU64,
    /// Send instants are kept as microseconds since this instant.
    epoch: Instant,
}

impl Default for RoomMoves {
    fn default() -> Self {
        Self {
            entities: RwLock::default(),
            ids: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }
}

impl RoomMoves {
    fn micros(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_micros() as u64
    }

    /// Registers `entity` as owned by the caller.
    pub(crate) fn register(self: &Arc<Self>, entity: u32) -> OwnMoves {
        let ring = Arc::new(MoveRing::default());
        if entity < MAX_TRACKED_ID {
            let mut map = self.entities.write();
            let i = entity as usize;
            if map.len() <= i {
                map.resize(i + 1, None);
            }
            map[i] = Some(ring.clone());
        }
        OwnMoves {
            room: self.clone(),
            entity,
            ring,
            written: 0,
        }
    }

    /// Matches decoded positions of `changed` entities against their sends; calls `record` with
    /// the latency in microseconds of each new match. `last_matched` is the observer's memory
    /// per entity of the newest send id already accounted for; an entity missing from it is
    /// seen for the first time (it entered the observer's view, or a keyframe started over):
    /// that sighting records nothing, so entering interest is not mistaken for a move, and only
    /// later sends can match.
    pub(crate) fn observe(
        &self,
        now: Instant,
        changed: impl IntoIterator<Item = (u32, [f32; 3])>,
        tol: f32,
        last_matched: &mut Matched,
        mut record: impl FnMut(u64),
    ) {
        let now_us = self.micros(now);
        let map = self.entities.read();
        for (entity, pos) in changed {
            let ring = map.get(entity as usize).and_then(Option::as_ref);
            let after = last_matched.slot(entity);
            if *after == UNSEEN {
                *after = ring.map_or(0, |r| r.newest_id());
                continue;
            }
            let Some(ring) = ring else {
                continue;
            };
            if let Some(s) = ring.find(pos, tol, *after) {
                *after = s.id;
                record(now_us.saturating_sub(s.at_us));
            }
        }
    }
}

/// All rooms' tables, by room id.
#[derive(Default)]
pub(crate) struct MoveBoard {
    rooms: Mutex<HashMap<String, Arc<RoomMoves>>>,
}

impl MoveBoard {
    /// The table of `room`, created on first use.
    pub(crate) fn room(&self, room: &str) -> Arc<RoomMoves> {
        self.rooms
            .lock()
            .entry(room.to_owned())
            .or_default()
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn every_observer_matches_each_move_once() {
        let board = MoveBoard::default();
        let room = board.room("r");
        let mut a = room.register(7);
        let t0 = Instant::now();
        let mut b_seen = Matched::default();
        let mut c_seen = Matched::default();
        let mut samples = Vec::new();
        // Both observers first see A standing at its spawn: no sample.
        room.observe(t0, [(7, [0.0; 3])], 0.002, &mut b_seen, |us| {
            samples.push(us)
        });
        room.observe(t0, [(7, [0.0; 3])], 0.002, &mut c_seen, |us| {
            samples.push(us)
        });
        assert!(samples.is_empty());

        a.sent(t0, [1.0, 0.0, 2.0]);
        a.sent(t0 + Duration::from_millis(100), [1.2, 0.0, 2.0]);
        let now = t0 + Duration::from_millis(150);
        // B sees the second move (decoded within quantization error), C the first.
        room.observe(
            now,
            [(7, [1.2004, 0.9, 1.9991])],
            0.002,
            &mut b_seen,
            |us| samples.push(us),
        );
        room.observe(now, [(7, [1.0, 0.0, 2.0])], 0.002, &mut c_seen, |us| {
            samples.push(us)
        });
        assert_eq!(samples, vec![50_000, 150_000]);
        // Seeing the same position again records nothing, and C seeing the older move after
        // the newer one records nothing either.
        room.observe(now, [(7, [1.2, 0.0, 2.0])], 0.002, &mut b_seen, |us| {
            samples.push(us)
        });
        room.observe(now, [(7, [1.0, 0.0, 2.0])], 0.002, &mut c_seen, |us| {
            samples.push(us)
        });
        assert_eq!(samples.len(), 2);
        // Outside the tolerance or an unknown entity: no sample.
        c_seen.insert(8, 0);
        room.observe(
            now,
            [(7, [1.21, 0.0, 2.0]), (8, [0.0; 3])],
            0.002,
            &mut c_seen,
            |us| samples.push(us),
        );
        assert_eq!(samples.len(), 2);
    }

    #[test]
    fn first_sighting_does_not_match_old_sends() {
        let board = MoveBoard::default();
        let room = board.room("r");
        let mut a = room.register(7);
        let t0 = Instant::now();
        a.sent(t0, [5.0, 0.0, 5.0]);
        let mut seen = Matched::default();
        let mut samples = Vec::new();
        // A late observer sees A standing where it stopped long ago: that is no move.
        let late = t0 + Duration::from_secs(10);
        room.observe(late, [(7, [5.0, 0.0, 5.0])], 0.002, &mut seen, |us| {
            samples.push(us)
        });
        assert!(samples.is_empty());
        a.sent(late, [5.1, 0.0, 5.0]);
        room.observe(
            late + Duration::from_millis(40),
            [(7, [5.1, 0.0, 5.0])],
            0.002,
            &mut seen,
            |us| samples.push(us),
        );
        assert_eq!(samples, vec![40_000]);
    }

    #[test]
    fn matched_remembers_small_and_large_ids_alike() {
        let board = MoveBoard::default();
        let room = board.room("r");
        let big = DENSE_IDS + 5;
        let (mut a, mut b) = (room.register(2), room.register(big));
        let t0 = Instant::now();
        let mut seen = Matched::default();
        let mut samples = Vec::new();
        let mut look = |seen: &mut Matched, ms: u64, x: f32| {
            let now = t0 + Duration::from_millis(ms);
            room.observe(now, [(2, [x; 3]), (big, [x; 3])], 0.002, seen, |us| {
                samples.push(us)
            });
        };
        // First sightings record nothing; the next moves do, once each.
        look(&mut seen, 0, 0.0);
        a.sent(t0, [1.0; 3]);
        b.sent(t0, [1.0; 3]);
        look(&mut seen, 30, 1.0);
        look(&mut seen, 40, 1.0);
        // Removed (left the view): seen anew, no sample; a keyframe (clear) likewise.
        seen.remove(2);
        seen.remove(big);
        a.sent(t0, [2.0; 3]);
        b.sent(t0, [2.0; 3]);
        look(&mut seen, 50, 2.0);
        seen.clear();
        a.sent(t0, [3.0; 3]);
        b.sent(t0, [3.0; 3]);
        look(&mut seen, 60, 3.0);
        assert_eq!(samples, vec![30_000, 30_000]);
    }

    #[test]
    fn drop_unregisters_only_its_own_ring() {
        let board = MoveBoard::default();
        let room = board.room("r");
        let old = room.register(3);
        let mut new = room.register(3);
        drop(old);
        new.sent(Instant::now(), [0.0; 3]);
        let mut n = 0;
        room.observe(
            Instant::now(),
            [(3, [0.0; 3])],
            0.002,
            &mut Matched::from_iter([(3, 0)]),
            |_| n += 1,
        );
        assert_eq!(n, 1);
        drop(new);
        room.observe(
            Instant::now(),
            [(3, [0.0; 3])],
            0.002,
            &mut Matched::from_iter([(3, 0)]),
            |_| n += 1,
        );
        assert_eq!(n, 1);
    }

    #[test]
    fn ring_keeps_the_last_sends() {
        let ring = MoveRing::default();
        for i in 0..40u64 {
            ring.write(
                i as usize,
                Sent {
                    id: i + 1,
                    at_us: i,
                    x: i as f32,
                    z: 0.0,
                },
            );
        }
        assert_eq!((0..RING).filter_map(|i| ring.read(i)).count(), RING);
        assert_eq!(ring.newest_id(), 40);
        assert!(ring.find([39.0, 0.0, 0.0], 0.001, 0).is_some());
        assert!(ring.find([39.0, 0.0, 0.0], 0.001, 40).is_none());
        assert!(ring.find([0.0, 0.0, 0.0], 0.001, 0).is_none());
        // The newest of several matches wins; the walk stops at sends already matched.
        ring.write(
            40,
            Sent {
                id: 41,
                at_us: 41,
                x: 39.0,
                z: 0.0,
            },
        );
        assert_eq!(
            ring.find([39.0, 0.0, 0.0], 0.001, 0).map(|s| s.id),
            Some(41)
        );
        assert_eq!(
            ring.find([38.0, 0.0, 0.0], 0.001, 38).map(|s| s.id),
            Some(39)
        );
        assert!(ring.find([38.0, 0.0, 0.0], 0.001, 39).is_none());
    }

    #[test]
    fn readers_never_see_a_torn_slot() {
        // One writer rewrites a slot with x == z == id while readers check every read.
        let ring = Arc::new(MoveRing::default());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let ring = ring.clone();
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut seen = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        if let Some(s) = ring.read(0) {
                            assert_eq!(s.x, s.id as f32);
                            assert_eq!(s.z, s.id as f32);
                            assert_eq!(s.at_us, s.id);
                            seen += 1;
                        }
                    }
                    seen
                })
            })
            .collect();
        for id in 1..200_000u64 {
            let v = id as f32;
            ring.write(
                0,
                Sent {
                    id,
                    at_us: id,
                    x: v,
                    z: v,
                },
            );
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
    }

    #[test]
    fn id_hasher_spreads_ids() {
        let mut m: IdMap<u32> = IdMap::default();
        for i in 0..10_000 {
            m.insert(i, i);
        }
        assert!((0..10_000).all(|i| m.get(&i) == Some(&i)));
    }
}
