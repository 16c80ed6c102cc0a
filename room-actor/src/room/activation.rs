//! The activation a room and its directory writer share with the supervisor: the members the
//! writer registered, the epoch it commits under, and until when it may commit.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use parking_lot::Mutex;
use plaza_directory::{Epoch, RoomLease};
use tokio::time::Instant;

/// What a room activation's directory writer shares with the supervisor and the room: the
/// members it has registered (wallet → entity), the epoch it commits under (a reclaim after the
/// store lost its data changes it), and until when it may commit (the lease's local deadline,
/// moved on by every renewal). The supervisor reads members for drain handoffs; the room reads
/// the deadline before every tick.
#[derive(Debug)]
pub struct Activation {
    members: Mutex<BTreeMap<String, u32>>,
    epoch: Mutex<Epoch>,
    commit_until: Mutex<Instant>,
    /// The room gave its handoff state (a drain): no checkpoint is stored after that.
    frozen: AtomicBool,
    /// Presence entries of this activation that no member of the room holds (the last
    /// renewal's count less the members): wallets kept online by another source (a voice
    /// channel) after their room session left. The room does not stop empty while any is.
    held_elsewhere: AtomicU32,
    /// Held around every store of this room's handoff state (checkpoints by the writer, the
    /// drain's by the supervisor), so the two are ordered.
    handoff_lock: tokio::sync::Mutex<()>,
}

impl Activation {
    /// A fresh activation holding `lease`.
    pub fn new(lease: &RoomLease) -> Self {
        Self {
            members: Mutex::new(BTreeMap::new()),
            epoch: Mutex::new(lease.epoch()),
            commit_until: Mutex::new(Instant::now() + lease.remaining()),
            frozen: AtomicBool::new(false),
            held_elsewhere: AtomicU32::new(0),
            handoff_lock: tokio::sync::Mutex::new(()),
        }
    }

    /// Marks the room handed off: checkpoints stop.
    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }

    /// Whether the room gave its handoff state.
    pub fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::SeqCst)
    }

    /// The lock every store of the room's handoff state holds.
    pub fn handoff_lock(&self) -> &tokio::sync::Mutex<()> {
        &self.handoff_lock
    }

    /// True while the activation's lease is surely held (its local deadline, which ends a
    /// safety margin before the store's lease can lapse, has not passed).
    pub fn may_commit(&self) -> bool {
        Instant::now() < *self.commit_until.lock()
    }

    pub(crate) fn set_lease(&self, lease: &RoomLease) {
        *self.commit_until.lock() = Instant::now() + lease.remaining();
        let members = u32::try_from(self.members.lock().len()).unwrap_or(u32::MAX);
        self.held_elsewhere.store(
            lease.presence_renewed().saturating_sub(members),
            Ordering::SeqCst,
        );
    }

    /// A member's release left its entry held by another source: counted at once (the next
    /// renewal's count replaces it).
    pub(crate) fn note_held_elsewhere(&self) {
        self.held_elsewhere.fetch_add(1, Ordering::SeqCst);
    }

    /// Presence entries of this activation held only by other sources, as of the last renewal.
    pub fn held_elsewhere(&self) -> u32 {
        self.held_elsewhere.load(Ordering::SeqCst)
    }

    /// The members whose presence the room has registered, sorted by wallet.
    pub fn members(&self) -> Vec<(String, u32)> {
        let g = self.members.lock();
        g.iter().map(|(w, e)| (w.clone(), *e)).collect()
    }

    /// The epoch the activation commits under now.
    pub fn epoch(&self) -> Epoch {
        *self.epoch.lock()
    }

    pub(crate) fn set_member(&self, wallet: &str, entity: Option<u32>) {
        let mut g = self.members.lock();
        match entity {
            Some(e) => {
                g.insert(wallet.to_owned(), e);
            }
            None => {
                g.remove(wallet);
            }
        }
    }

    pub(crate) fn set_epoch(&self, epoch: Epoch) {
        *self.epoch.lock() = epoch;
    }
}

impl super::host::LeaseView for Activation {
    fn may_commit(&self) -> bool {
        Self::may_commit(self)
    }

    fn epoch(&self) -> Epoch {
        Self::epoch(self)
    }

    fn held_elsewhere(&self) -> bool {
        Self::held_elsewhere(self) > 0
    }
}
