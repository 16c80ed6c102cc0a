//! Who is who: member identities and profiles, each member's roster (issue 12 item 1), blocks
//! between wallets and personal space (item 5).
//!
//! * A member joins with an identity (its wallet); its profile (display name, version) starts
//!   empty at version 0 and changes only by `plaza.v1.ProfileAnnouncement`-style announcements with
//!   the seed's version-aware dedup ([`Identity::announce`]).
//! * Each member's roster view ([`RosterView`]) remembers which entries its client holds and
//!   sends only differences, budgeted per broadcast ([`RosterView::update`]).
//! * [`Blocks`] holds blocks per wallet pair; a blocked pair never sees each other.

use std::collections::{BTreeMap, BTreeSet};

use crate::events::EventBody;

/// Longest display name, bytes of UTF-8.
pub const MAX_DISPLAY_NAME: usize = 64;
/// Longest wallet (identity) a block may name, bytes.
pub const MAX_WALLET: usize = 128;
/// Most wallets one wallet may block in a room.
pub const MAX_BLOCKS_PER_WALLET: usize = 256;
/// Most blocks a room keeps (all wallets together).
pub const MAX_BLOCKS: usize = 65_536;
/// Largest personal-space radius, metres.
pub const MAX_PERSONAL_SPACE_M: f32 = 4.0;

/// A member's identity and profile, as others' rosters show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Wallet (or guest id).
    pub wallet: String,
    /// The announced display name (empty until announced).
    pub display_name: String,
    /// The announced profile version (0 until announced).
    pub profile_version: u64,
    /// The avatar entity's generation (a reused id is a new entry).
    pub generation: u16,
}

/// What an announcement did ([`Identity::announce`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Announced {
    /// A higher version: it supersedes (every viewer gets an upsert).
    Superseded,
    /// The same version: merged, no news.
    Merged,
    /// A lower version: dropped.
    Stale,
}

impl Identity {
    /// Applies an announcement with version-aware dedup: a higher version supersedes (name
    /// and version replaced), an equal one merges (nothing changes), a lower one is dropped.
    pub fn announce(&mut self, version: u64, display_name: &str) -> Announced {
        use std::cmp::Ordering::*;
        match version.cmp(&self.profile_version) {
            Greater => {
                self.profile_version = version;
                self.display_name = clean_display_name(display_name);
                Announced::Superseded
            }
            Equal => Announced::Merged,
            Less => Announced::Stale,
        }
    }

    fn entry(&self, entity: u32) -> RosterEntry {
        RosterEntry {
            entity,
            wallet: self.wallet.clone(),
            display_name: self.display_name.clone(),
            profile_version: self.profile_version,
        }
    }

    /// Bytes the entry costs on the wire, about (`RosterEntry` fields and their tags).
    fn wire_bytes(&self) -> usize {
        16 + self.wallet.len() + self.display_name.len()
    }
}

/// A display name as the room shows it: control characters removed, at most
/// [`MAX_DISPLAY_NAME`] bytes (cut at a character boundary).
pub fn clean_display_name(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars().filter(|c| !c.is_control()) {
        if out.len() + c.len_utf8() > MAX_DISPLAY_NAME {
            break;
        }
        out.push(c);
    }
    out
}

/// One roster entry (`plaza.v1.RosterEntry`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RosterEntry {
    /// The avatar.
    pub entity: u32,
    /// Its member's wallet.
    pub wallet: String,
    /// Its member's display name.
    pub display_name: String,
    /// Its member's profile version.
    pub profile_version: u64,
}

/// The room's identities by entity. Every change goes through a method that bumps a
/// revision, so a client's [`RosterView`] can tell in O(|seen|) that nothing it shows changed.
#[derive(Clone, Debug, Default)]
pub struct Identities {
    map: BTreeMap<u32, Identity>,
    rev: u64,
}

impl Identities {
    /// The identity of `entity`'s member.
    pub fn get(&self, entity: &u32) -> Option<&Identity> {
        self.map.get(entity)
    }

    /// The identity of `entity`'s member, to change (counts as a change).
    pub fn get_mut(&mut self, entity: &u32) -> Option<&mut Identity> {
        self.rev += 1;
        self.map.get_mut(entity)
    }

    /// Sets `entity`'s identity.
    pub fn insert(&mut self, entity: u32, id: Identity) -> Option<Identity> {
        self.rev += 1;
        self.map.insert(entity, id)
    }

    /// Forgets `entity`'s identity.
    pub fn remove(&mut self, entity: &u32) -> Option<Identity> {
        self.rev += 1;
        self.map.remove(entity)
    }

    /// Forgets every identity.
    pub fn clear(&mut self) {
        self.rev += 1;
        self.map.clear();
    }

    /// How many identities are held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The revision: changes whenever any identity may have changed.
    pub fn rev(&self) -> u64 {
        self.rev
    }
}

impl FromIterator<(u32, Identity)> for Identities {
    fn from_iter<I: IntoIterator<Item = (u32, Identity)>>(iter: I) -> Self {
        Identities {
            map: iter.into_iter().collect(),
            rev: 0,
        }
    }
}

/// What one client holds of the roster, and what it still has to be told.
#[derive(Clone, Debug, Default)]
pub struct RosterView {
    /// Entries the client holds: entity → (generation, profile version) as told.
    told: BTreeMap<u32, (u16, u64)>,
    /// Entities in the client's frames whose entry is still to be sent (over budget).
    pending: BTreeSet<u32>,
    /// The next update's `full` flag (a keyframe reset the client's roster).
    full: bool,
    /// The `seen` and the identities' revision of the last update: when both are the same
    /// and nothing is pending, the client holds everything already (the common case).
    last_seen: Vec<u32>,
    last_rev: Option<u64>,
}

impl RosterView {
    /// The roster update that goes with a frame showing the avatars `seen` (sorted):
    /// entries for avatars that entered the view or changed their profile, ids of those that
    /// left, at most `budget` bytes of entries (at least one entry when any is due). With
    /// `keyframe` the client forgets its roster: the update carries `full` and starts over.
    /// `None` when there is nothing to tell.
    ///
    /// Performance: runs for every frame; O(|seen|) with no allocation when neither the view
    /// nor any identity changed since the last update, else O(|seen| log |seen|).
    pub fn update(
        &mut self,
        seen: &[u32],
        identities: &Identities,
        keyframe: bool,
        budget: usize,
    ) -> Option<EventBody> {
        if !keyframe
            && !self.full
            && self.pending.is_empty()
            && self.last_rev == Some(identities.rev())
            && self.last_seen == seen
        {
            return None;
        }
        self.last_seen.clear();
        self.last_seen.extend_from_slice(seen);
        self.last_rev = Some(identities.rev());
        if keyframe {
            self.told.clear();
            self.pending.clear();
            self.full = true;
        }
        let mut removed = Vec::new();
        self.told.retain(|e, _| {
            let keep = seen.binary_search(e).is_ok();
            if !keep {
                removed.push(*e);
            }
            keep
        });
        self.pending.retain(|e| seen.binary_search(e).is_ok());
        for e in seen {
            let Some(id) = identities.get(e) else {
                continue;
            };
            if self.told.get(e) != Some(&(id.generation, id.profile_version)) {
                self.pending.insert(*e);
            }
        }
        let mut upserts = Vec::new();
        let mut bytes = 0;
        while let Some(&e) = self.pending.first() {
            let Some(id) = identities.get(&e) else {
                self.pending.pop_first();
                continue;
            };
            let cost = id.wire_bytes();
            if !upserts.is_empty() && bytes + cost > budget {
                break;
            }
            bytes += cost;
            self.pending.pop_first();
            self.told.insert(e, (id.generation, id.profile_version));
            upserts.push(id.entry(e));
        }
        if !self.full && upserts.is_empty() && removed.is_empty() {
            return None;
        }
        let full = std::mem::take(&mut self.full);
        Some(EventBody::Roster {
            full,
            upserts,
            removed,
        })
    }

    /// Entries the client holds (for tests and stats).
    pub fn held(&self) -> usize {
        self.told.len()
    }
}

/// Blocks per wallet pair: `(blocker, blocked)`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Blocks {
    by_blocker: BTreeSet<(String, String)>,
    by_blocked: BTreeSet<(String, String)>,
}

/// Why a block was not added.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockLimit {
    /// The blocker has [`MAX_BLOCKS_PER_WALLET`] blocks, or the room [`MAX_BLOCKS`].
    TooMany,
}

impl Blocks {
    /// `blocker` blocks `blocked`; `Ok(false)` when it already did.
    pub fn add(&mut self, blocker: &str, blocked: &str) -> Result<bool, BlockLimit> {
        let key = (blocker.to_owned(), blocked.to_owned());
        if self.by_blocker.contains(&key) {
            return Ok(false);
        }
        if self.by_blocker.len() >= MAX_BLOCKS
            || self.blocked_by(blocker).count() >= MAX_BLOCKS_PER_WALLET
        {
            return Err(BlockLimit::TooMany);
        }
        self.by_blocked.insert((key.1.clone(), key.0.clone()));
        self.by_blocker.insert(key);
        Ok(true)
    }

    /// `blocker` unblocks `blocked`; `false` when it had not blocked it.
    pub fn remove(&mut self, blocker: &str, blocked: &str) -> bool {
        let key = (blocker.to_owned(), blocked.to_owned());
        self.by_blocked.remove(&(key.1.clone(), key.0.clone()));
        self.by_blocker.remove(&key)
    }

    /// Whether either of `a`, `b` blocks the other.
    pub fn between(&self, a: &str, b: &str) -> bool {
        let has = |x: &str, y: &str| self.by_blocker.contains(&(x.to_owned(), y.to_owned()));
        has(a, b) || has(b, a)
    }

    /// Wallets `blocker` blocks.
    pub fn blocked_by<'a>(&'a self, blocker: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.by_blocker
            .range((blocker.to_owned(), String::new())..)
            .take_while(move |(a, _)| a == blocker)
            .map(|(_, b)| b.as_str())
    }

    /// Wallets that block `blocked`.
    pub fn blockers_of<'a>(&'a self, blocked: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.by_blocked
            .range((blocked.to_owned(), String::new())..)
            .take_while(move |(a, _)| a == blocked)
            .map(|(_, b)| b.as_str())
    }

    /// Every block, `(blocker, blocked)`, sorted.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.by_blocker
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
    }

    /// How many blocks there are.
    pub fn len(&self) -> usize {
        self.by_blocker.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_blocker.is_empty()
    }
}

/// A block or unblock (`plaza.v1.BlockOp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockOp {
    /// Block.
    Block,
    /// Unblock.
    Unblock,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u32) -> Identities {
        (1..=n)
            .map(|e| {
                (
                    e,
                    Identity {
                        wallet: format!("0xwallet{e:02}"),
                        display_name: String::new(),
                        profile_version: 0,
                        generation: 0,
                    },
                )
            })
            .collect()
    }

    fn parts(b: Option<EventBody>) -> (bool, Vec<u32>, Vec<u32>) {
        match b {
            Some(EventBody::Roster {
                full,
                upserts,
                removed,
            }) => (full, upserts.iter().map(|u| u.entity).collect(), removed),
            None => (false, vec![], vec![]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn announcements_supersede_merge_or_drop_by_version() {
        let mut id = ids(1).remove(&1).unwrap();
        assert_eq!(id.announce(2, "Ana"), Announced::Superseded);
        assert_eq!(id.announce(2, "Other"), Announced::Merged);
        assert_eq!(id.display_name, "Ana");
        assert_eq!(id.announce(1, "Old"), Announced::Stale);
        assert_eq!((id.profile_version, id.display_name.as_str()), (2, "Ana"));
        assert_eq!(id.announce(3, "B\u{7}ob\n"), Announced::Superseded);
        assert_eq!(id.display_name, "Bob");
    }

    #[test]
    fn display_names_are_cut_at_a_character_boundary() {
        let long = "é".repeat(40);
        let c = clean_display_name(&long);
        assert!(c.len() <= MAX_DISPLAY_NAME);
        assert_eq!(c, "é".repeat(32));
    }

    #[test]
    fn the_roster_sends_differences_only() {
        let mut ids = ids(5);
        let mut v = RosterView::default();
        assert_eq!(
            parts(v.update(&[1, 2], &ids, true, 4096)),
            (true, vec![1, 2], vec![])
        );
        assert_eq!(
            parts(v.update(&[1, 2], &ids, false, 4096)),
            (false, vec![], vec![])
        );
        assert_eq!(
            parts(v.update(&[2, 3], &ids, false, 4096)),
            (false, vec![3], vec![1])
        );
        ids.get_mut(&3).unwrap().announce(1, "C");
        assert_eq!(
            parts(v.update(&[2, 3], &ids, false, 4096)),
            (false, vec![3], vec![])
        );
        // A reused id is a new entry.
        ids.get_mut(&2).unwrap().generation = 1;
        assert_eq!(
            parts(v.update(&[2, 3], &ids, false, 4096)),
            (false, vec![2], vec![])
        );
        assert_eq!(v.held(), 2);
    }

    #[test]
    fn a_long_roster_is_split_over_broadcasts_within_the_budget() {
        let ids = ids(5);
        let seen = [1, 2, 3, 4, 5];
        let per = ids.get(&1).unwrap().wire_bytes();
        let mut v = RosterView::default();
        assert_eq!(
            parts(v.update(&seen, &ids, true, per * 2)),
            (true, vec![1, 2], vec![])
        );
        assert_eq!(
            parts(v.update(&seen, &ids, false, per * 2)),
            (false, vec![3, 4], vec![])
        );
        assert_eq!(
            parts(v.update(&seen, &ids, false, per * 2)),
            (false, vec![5], vec![])
        );
        assert_eq!(
            parts(v.update(&seen, &ids, false, per * 2)),
            (false, vec![], vec![])
        );
        // A budget below one entry still sends one per update.
        let mut v = RosterView::default();
        assert_eq!(
            parts(v.update(&seen, &ids, true, 1)),
            (true, vec![1], vec![])
        );
    }

    #[test]
    fn blocks_are_per_pair_and_bounded() {
        let mut b = Blocks::default();
        assert_eq!(b.add("a", "b"), Ok(true));
        assert_eq!(b.add("a", "b"), Ok(false));
        assert!(b.between("a", "b") && b.between("b", "a"));
        assert!(!b.between("a", "c"));
        assert_eq!(b.blocked_by("a").collect::<Vec<_>>(), vec!["b"]);
        assert_eq!(b.blockers_of("b").collect::<Vec<_>>(), vec!["a"]);
        assert!(b.remove("a", "b"));
        assert!(!b.remove("a", "b"));
        assert!(!b.between("a", "b"));
        for i in 0..MAX_BLOCKS_PER_WALLET {
            b.add("x", &format!("w{i}")).unwrap();
        }
        assert_eq!(b.add("x", "one-more"), Err(BlockLimit::TooMany));
        assert_eq!(b.len(), MAX_BLOCKS_PER_WALLET);
    }
}
