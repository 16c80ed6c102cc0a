//! The activation a room and its directory writer share with the supervisor: the members the
//! writer registered, the epoch it commits under, and until when it may commit.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

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
}
