//! Value types of the directory: epochs, source flags, presence entries, placements, nodes,
//! audit records and announcement outcomes. Plain data; no behaviour beyond flag arithmetic.

use std::fmt;
use std::ops::{BitAnd, BitOr, BitOrAssign, Sub};

use serde::{Deserialize, Serialize};

/// A node's id (stable for a process lifetime; e.g. hostname + boot id).
pub type NodeId = String;
/// A user's wallet address (the identity presence is keyed by).
pub type Wallet = String;

/// A fencing epoch: `(era, counter)`, compared lexicographically (`era` first).
///
/// `era` comes from a source that survives the store losing its data (Redis server time at the
/// store's (re)initialisation, max'ed with the claimant's boot era and every era seen);
/// `counter` increments per claim of a room within an era.
#[derive(
    Clone, Copy, Debug, Default, Deserialize, Eq, Hash, Ord, PartialEq, PartialOrd, Serialize,
)]
pub struct Epoch {
    /// The store incarnation's era (monotonic across data loss).
    pub era: u64,
    /// Claims of the room within the era (starts at 1).
    pub counter: u64,
}

impl Epoch {
    /// Builds an epoch.
    pub const fn new(era: u64, counter: u64) -> Self {
        Self { era, counter }
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.era, self.counter)
    }
}

/// The set of sources a participant is visible through (the seed's `RoomSource` flags).
/// A plain `u32` bit set; the entry lives while at least one bit is set.
#[derive(Clone, Copy, Default, Deserialize, Eq, Hash, PartialEq, Serialize)]
pub struct Sources(pub u32);

impl Sources {
    /// No source.
    pub const NONE: Self = Self(0);
    /// The room itself (the participant's avatar is in the room).
    pub const ROOM: Self = Self(1);
    /// A second transport (e.g. WebTransport next to WebSocket).
    pub const TRANSPORT2: Self = Self(1 << 1);
    /// A voice channel.
    pub const VOICE: Self = Self(1 << 2);
    /// A chat channel (metadata only).
    pub const CHAT: Self = Self(1 << 3);
    /// Every defined flag.
    pub const ALL: Self = Self(0b1111);

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }
    /// From raw bits (unknown bits are kept: newer nodes may define more sources).
    pub const fn from_bits(bits: u32) -> Self {
        Self(bits)
    }
    /// True if no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// True if every bit of `other` is set in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
    /// True if `self` and `other` share a bit.
    pub const fn intersects(self, other: Self) -> bool {
        self.0 & other.0 != 0
    }
    /// Sets the bits of `other`.
    pub fn insert(&mut self, other: Self) {
        self.0 |= other.0;
    }
    /// Clears the bits of `other`.
    pub fn remove(&mut self, other: Self) {
        self.0 &= !other.0;
    }
}

impl BitOr for Sources {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}
impl BitOrAssign for Sources {
    fn bitor_assign(&mut self, rhs: Self) {
        self.0 |= rhs.0;
    }
}
impl BitAnd for Sources {
    type Output = Self;
    fn bitand(self, rhs: Self) -> Self {
        Self(self.0 & rhs.0)
    }
}
impl Sub for Sources {
    type Output = Self;
    fn sub(self, rhs: Self) -> Self {
        Self(self.0 & !rhs.0)
    }
}

impl fmt::Debug for Sources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Self::ROOM, "ROOM"),
            (Self::TRANSPORT2, "TRANSPORT2"),
            (Self::VOICE, "VOICE"),
            (Self::CHAT, "CHAT"),
        ];
        let mut parts: Vec<String> = names
            .iter()
            .filter(|(s, _)| self.contains(*s))
            .map(|(_, n)| (*n).to_string())
            .collect();
        let unknown = self.0 & !Self::ALL.0;
        if unknown != 0 {
            parts.push(format!("{unknown:#x}"));
        }
        if parts.is_empty() {
            write!(f, "Sources(NONE)")
        } else {
            write!(f, "Sources({})", parts.join("|"))
        }
    }
}

/// A presence entry: wallet ↔ entity in a room, with the sources it is visible through.
#[derive(Clone, Debug, Deserialize, Eq, PartialEq, Serialize)]
pub struct PresenceEntry {
    /// The user's wallet (primary key).
    pub wallet: Wallet,
    /// The room-local entity id of the user's avatar.
    pub entity: u32,
    /// The room the user is in.
    pub room: String,
    /// OR of the sources the user is visible through; never empty in a stored entry.
    pub sources: Sources,
    /// The node that registered (and renews) the entry.
    pub node: NodeId,
    /// Highest profile version known for the user.
    pub profile_version: u64,
    /// Lease deadline in store milliseconds (set by the store).
    pub lease_until_ms: u64,
}

/// A room's placement: the node holding its lease and the fencing epoch.
#[derive(Clone, Debug, Deserialize, Eq, PartialEq, Serialize)]
pub struct Placement {
    /// The room.
    pub room: String,
    /// The owning node.
    pub node: NodeId,
    /// The fencing epoch of this activation.
    pub epoch: Epoch,
    /// Lease deadline in store milliseconds.
    pub lease_until_ms: u64,
}

/// A registered node.
#[derive(Clone, Debug, Deserialize, Eq, PartialEq, Serialize)]
pub struct NodeInfo {
    /// The node id.
    pub id: NodeId,
    /// The node's gRPC address (`host:port` or URL) that gateways dial.
    pub addr: String,
    /// Current load (e.g. hosted sessions); placement prefers lighter nodes.
    pub load: u32,
    /// True while the node drains: it gets no new rooms.
    pub draining: bool,
    /// Heartbeat deadline in store milliseconds (set by the store).
    pub heartbeat_until_ms: u64,
}

/// One record of a room's consent audit log.
#[derive(Clone, Debug, Deserialize, Eq, PartialEq, Serialize)]
pub struct AuditRecord {
    /// The room.
    pub room: String,
    /// Per-room sequence number, from 1, gap-free.
    pub seq: u64,
    /// The epoch of the activation that wrote it.
    pub epoch: Epoch,
    /// The writer's timestamp (unix ms).
    pub at_ms: u64,
    /// Record kind (e.g. `consent_granted`, `consent_denied`).
    pub kind: String,
    /// Details as JSON text.
    pub detail: String,
}

/// What [`crate::Directory::announce_profile`] decided.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum AnnounceOutcome {
    /// First announcement known for the wallet: fetch this version.
    Fresh,
    /// Higher than the known version: supersedes it (cancel the old fetch, fetch this one).
    Superseded {
        /// The version it replaced.
        previous: u64,
    },
    /// Equal to the known version: the source was merged; nothing new to fetch.
    Merged {
        /// The merged source set.
        sources: Sources,
    },
    /// Lower than the known version: dropped.
    Dropped {
        /// The known (higher) version.
        current: u64,
    },
}

impl AnnounceOutcome {
    /// True if the caller should fetch the announced profile version.
    pub fn should_fetch(&self) -> bool {
        matches!(self, Self::Fresh | Self::Superseded { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_flag_arithmetic() {
        let mut s = Sources::ROOM | Sources::VOICE;
        assert!(s.contains(Sources::ROOM) && s.intersects(Sources::VOICE | Sources::CHAT));
        assert!(!s.contains(Sources::ROOM | Sources::CHAT));
        s.remove(Sources::ROOM);
        assert_eq!(s, Sources::VOICE);
        s.insert(Sources::CHAT);
        assert_eq!(s - Sources::VOICE, Sources::CHAT);
        assert_eq!(s & Sources::CHAT, Sources::CHAT);
        assert!((s - s).is_empty());
        assert_eq!(format!("{s:?}"), "Sources(VOICE|CHAT)");
        assert_eq!(
            format!("{:?}", Sources::from_bits(0x101)),
            "Sources(ROOM|0x100)"
        );
        assert_eq!(format!("{:?}", Sources::NONE), "Sources(NONE)");
    }

    #[test]
    fn epochs_order_by_era_first() {
        assert!(Epoch::new(2, 1) > Epoch::new(1, 99));
        assert!(Epoch::new(1, 2) > Epoch::new(1, 1));
        assert_eq!(Epoch::new(3, 4).to_string(), "3.4");
        let json = serde_json::to_string(&Epoch::new(5, 6)).unwrap();
        assert_eq!(
            serde_json::from_str::<Epoch>(&json).unwrap(),
            Epoch::new(5, 6)
        );
    }

    #[test]
    fn announce_outcome_fetch() {
        assert!(AnnounceOutcome::Fresh.should_fetch());
        assert!(AnnounceOutcome::Superseded { previous: 1 }.should_fetch());
        assert!(
            !AnnounceOutcome::Merged {
                sources: Sources::ROOM
            }
            .should_fetch()
        );
        assert!(!AnnounceOutcome::Dropped { current: 1 }.should_fetch());
    }
}
