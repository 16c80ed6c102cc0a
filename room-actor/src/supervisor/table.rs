//! The supervisor's bookkeeping, sans I/O: which room runs in which actor, which rooms a
//! drain takes no more of, and the epoch of each room's last activation here that ended (a new
//! activation must not run under it). Generic over the actor handle `A` and the actor's id `K`
//! so it is tested without ractor; the supervisor actor (`supervisor.rs`) executes the rest.

use std::collections::HashMap;
use std::hash::Hash;

use plaza_directory::Epoch;

/// What to do with a request for a room.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admit<'a, A> {
    /// The room runs here already: its actor.
    Live(&'a A),
    /// The node drains and takes no new rooms.
    Draining,
    /// Claim the room's lease and spawn it.
    Claim,
}

/// The rooms live on this node (`L`: what the supervisor keeps of one, keyed by actor id `K`).
#[derive(Debug)]
pub(crate) struct RoomTable<K, L> {
    rooms: HashMap<String, L>,
    by_actor: HashMap<K, String>,
    draining: bool,
    /// The epoch of each room's last activation on this node that ended. A new activation must
    /// not run under it: the old activation's writer releases that lease after its last write.
    retired: HashMap<String, Epoch>,
}

impl<K, L> Default for RoomTable<K, L> {
    fn default() -> Self {
        Self {
            rooms: HashMap::new(),
            by_actor: HashMap::new(),
            draining: false,
            retired: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq, L> RoomTable<K, L> {
    /// Whether a request for `room` finds it live, is refused (draining), or spawns it.
    pub(crate) fn admit(&self, room: &str) -> Admit<'_, L> {
        match self.rooms.get(room) {
            Some(live) => Admit::Live(live),
            None if self.draining => Admit::Draining,
            None => Admit::Claim,
        }
    }

    /// The live room `room`.
    pub(crate) fn get(&self, room: &str) -> Option<&L> {
        self.rooms.get(room)
    }

    /// The live rooms, by id.
    pub(crate) fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.rooms.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// The live rooms, by id.
    pub(crate) fn live(&self) -> Vec<(&str, &L)> {
        let mut v: Vec<(&str, &L)> = self.rooms.iter().map(|(r, l)| (r.as_str(), l)).collect();
        v.sort_by(|a, b| a.0.cmp(b.0));
        v
    }

    /// Take no new rooms (or again).
    pub(crate) fn set_draining(&mut self, draining: bool) {
        self.draining = draining;
    }

    /// Whether a claim of `room` that came back under `epoch` renewed the lease of an
    /// activation of ours that just ended (give it back and claim afresh).
    pub(crate) fn is_retired(&self, room: &str, epoch: Epoch) -> bool {
        self.retired.get(room) == Some(&epoch)
    }

    /// `room` was claimed under an epoch that is not retired: the retired one is moot.
    pub(crate) fn claimed(&mut self, room: &str) {
        self.retired.remove(room);
    }

    /// `room` runs in the actor `key` from now on.
    pub(crate) fn activated(&mut self, room: &str, key: K, live: L) {
        self.by_actor.insert(key, room.to_owned());
        self.rooms.insert(room.to_owned(), live);
    }

    /// The actor `key` stopped or failed: its room (if it was one) is forgotten and its epoch
    /// (`epoch_of` the live room) retired. Returns the room's id.
    pub(crate) fn forget(&mut self, key: &K, epoch_of: impl FnOnce(&L) -> Epoch) -> Option<String> {
        let room = self.by_actor.remove(key)?;
        let live = self.rooms.remove(&room)?;
        self.retired.insert(room.clone(), epoch_of(&live));
        Some(room)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Table = RoomTable<u32, (&'static str, Epoch)>;

    #[test]
    fn a_room_is_claimed_once_then_found_live() {
        let mut t = Table::default();
        assert_eq!(t.admit("a"), Admit::Claim);
        t.activated("a", 7, ("actor-a", Epoch::new(1, 1)));
        assert_eq!(t.admit("a"), Admit::Live(&("actor-a", Epoch::new(1, 1))));
        assert_eq!(t.get("a").map(|l| l.0), Some("actor-a"));
        assert!(t.get("b").is_none());
    }

    #[test]
    fn a_draining_table_refuses_new_rooms_but_finds_live_ones() {
        let mut t = Table::default();
        t.activated("a", 1, ("actor-a", Epoch::new(1, 1)));
        t.set_draining(true);
        assert_eq!(t.admit("b"), Admit::Draining);
        assert!(matches!(t.admit("a"), Admit::Live(_)));
        t.set_draining(false);
        assert_eq!(t.admit("b"), Admit::Claim);
    }

    #[test]
    fn ids_and_live_rooms_are_sorted() {
        let mut t = Table::default();
        for (k, r) in [(1, "c"), (2, "a"), (3, "b")] {
            t.activated(r, k, (r, Epoch::new(1, k.into())));
        }
        assert_eq!(t.ids(), ["a", "b", "c"]);
        let live: Vec<&str> = t.live().into_iter().map(|(r, _)| r).collect();
        assert_eq!(live, ["a", "b", "c"]);
    }

    #[test]
    fn a_stopped_actor_retires_its_epoch_until_the_room_runs_again() {
        let mut t = Table::default();
        let e = Epoch::new(1, 4);
        t.activated("a", 9, ("actor-a", e));
        assert!(!t.is_retired("a", e));
        assert_eq!(t.forget(&9, |l| l.1), Some("a".to_owned()));
        assert!(t.get("a").is_none());
        assert!(
            t.is_retired("a", e),
            "a claim renewing the ended lease is refused"
        );
        assert!(!t.is_retired("a", Epoch::new(1, 5)));
        assert_eq!(t.admit("a"), Admit::Claim);
        t.claimed("a");
        assert!(
            !t.is_retired("a", e),
            "a fresh claim clears the retired epoch"
        );
        t.activated("a", 10, ("actor-a2", Epoch::new(1, 5)));
        assert!(t.get("a").is_some());
    }

    #[test]
    fn an_unknown_actor_is_ignored() {
        let mut t = Table::default();
        t.activated("a", 1, ("actor-a", Epoch::new(1, 1)));
        assert_eq!(t.forget(&2, |l| l.1), None);
        assert!(t.get("a").is_some());
        assert!(!t.is_retired("a", Epoch::new(1, 1)));
    }
}
