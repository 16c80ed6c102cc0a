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

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::{Mutex, RwLock};

/// Sends remembered per entity.
pub(crate) const RING: usize = 16;

/// One remembered movement send.
#[derive(Clone, Copy, Debug)]
struct Sent {
    id: u64,
    at: Instant,
    x: f32,
    z: f32,
}

/// The last sends of one entity.
#[derive(Debug, Default)]
pub(crate) struct MoveRing {
    entries: Vec<Sent>,
    next: usize,
}

impl MoveRing {
    fn push(&mut self, s: Sent) {
        if self.entries.len() < RING {
            self.entries.push(s);
        } else {
            self.entries[self.next] = s;
        }
        self.next = (self.next + 1) % RING;
    }

    /// The id of the newest send (0 when none).
    fn newest_id(&self) -> u64 {
        self.entries.iter().map(|s| s.id).max().unwrap_or(0)
    }

    /// The newest send with `id > after` whose x and z are within `tol` of `pos`.
    fn find(&self, pos: [f32; 3], tol: f32, after: u64) -> Option<Sent> {
        self.entries
            .iter()
            .filter(|s| s.id > after)
            .filter(|s| (s.x - pos[0]).abs() <= tol && (s.z - pos[2]).abs() <= tol)
            .max_by_key(|s| s.id)
            .copied()
    }
}

/// Handle a bot keeps for its own entity while joined; unregisters on drop.
pub(crate) struct OwnMoves {
    room: Arc<RoomMoves>,
    entity: u32,
    ring: Arc<Mutex<MoveRing>>,
}

impl OwnMoves {
    /// Remembers a movement send at `at` to `pos`.
    pub(crate) fn sent(&self, at: Instant, pos: [f32; 3]) {
        let id = self.room.ids.fetch_add(1, Ordering::Relaxed) + 1;
        self.ring.lock().push(Sent {
            id,
            at,
            x: pos[0],
            z: pos[2],
        });
    }
}

impl Drop for OwnMoves {
    fn drop(&mut self) {
        let mut map = self.room.entities.write();
        // Only remove our own registration (a later join may reuse the entity id).
        if map
            .get(&self.entity)
            .is_some_and(|r| Arc::ptr_eq(r, &self.ring))
        {
            map.remove(&self.entity);
        }
    }
}

/// The shared table of one room.
#[derive(Default)]
pub(crate) struct RoomMoves {
    entities: RwLock<HashMap<u32, Arc<Mutex<MoveRing>>>>,
    /// Send ids, increasing across the room (so a reused entity id never matches old sends).
    ids: AtomicU64,
}

impl RoomMoves {
    /// Registers `entity` as owned by the caller.
    pub(crate) fn register(self: &Arc<Self>, entity: u32) -> OwnMoves {
        let ring = Arc::new(Mutex::new(MoveRing::default()));
        self.entities.write().insert(entity, ring.clone());
        OwnMoves {
            room: self.clone(),
            entity,
            ring,
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
        last_matched: &mut HashMap<u32, u64>,
        mut record: impl FnMut(u64),
    ) {
        let map = self.entities.read();
        for (entity, pos) in changed {
            let ring = map.get(&entity);
            let Some(after) = last_matched.get(&entity).copied() else {
                let newest = ring.map_or(0, |r| r.lock().newest_id());
                last_matched.insert(entity, newest);
                continue;
            };
            let Some(ring) = ring else {
                continue;
            };
            if let Some(s) = ring.lock().find(pos, tol, after) {
                last_matched.insert(entity, s.id);
                record(now.saturating_duration_since(s.at).as_micros() as u64);
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
        let a = room.register(7);
        let t0 = Instant::now();
        let mut b_seen = HashMap::new();
        let mut c_seen = HashMap::new();
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
        let a = room.register(7);
        let t0 = Instant::now();
        a.sent(t0, [5.0, 0.0, 5.0]);
        let mut seen = HashMap::new();
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
    fn drop_unregisters_only_its_own_ring() {
        let board = MoveBoard::default();
        let room = board.room("r");
        let old = room.register(3);
        let new = room.register(3);
        drop(old);
        new.sent(Instant::now(), [0.0; 3]);
        let mut n = 0;
        room.observe(
            Instant::now(),
            [(3, [0.0; 3])],
            0.002,
            &mut HashMap::from([(3, 0)]),
            |_| n += 1,
        );
        assert_eq!(n, 1);
        drop(new);
        room.observe(
            Instant::now(),
            [(3, [0.0; 3])],
            0.002,
            &mut HashMap::from([(3, 0)]),
            |_| n += 1,
        );
        assert_eq!(n, 1);
    }

    #[test]
    fn ring_keeps_the_last_sends() {
        let mut ring = MoveRing::default();
        let t = Instant::now();
        for i in 0..40u64 {
            ring.push(Sent {
                id: i + 1,
                at: t,
                x: i as f32,
                z: 0.0,
            });
        }
        assert_eq!(ring.entries.len(), RING);
        assert!(ring.find([39.0, 0.0, 0.0], 0.001, 0).is_some());
        assert!(ring.find([0.0, 0.0, 0.0], 0.001, 0).is_none());
    }
}
