//! [`EraFloor`]: the client-side era floor of [`crate::RedisDirectory`] (see its "Epochs
//! across data loss"), kept apart so `tests/loom.rs` can model it.
//!
//! Not part of the directory contract: exposed (hidden) for the loom models only.

use std::sync::atomic::Ordering;

use crate::sync::AtomicU64;
use crate::types::Epoch;

/// The max of the boot era and every era seen from the store (`min_era`), and the max era
/// seen (`seen_era`, 0 if none yet). A claim that finds the store's era missing or below
/// `seen_era` starts a new era `max(store now, min_era + 1)`, so the floor it sends must never
/// be below the `seen_era` it sends with it.
#[derive(Debug)]
pub struct EraFloor {
    min_era: AtomicU64,
    seen_era: AtomicU64,
}

impl EraFloor {
    /// A floor at `boot_era` with nothing seen yet.
    pub fn new(boot_era: u64) -> Self {
        Self {
            min_era: AtomicU64::new(boot_era),
            seen_era: AtomicU64::new(0),
        }
    }

    /// Records an epoch the store returned.
    pub fn seen(&self, epoch: Epoch) {
        self.min_era.fetch_max(epoch.era, Ordering::Relaxed);
        self.seen_era.fetch_max(epoch.era, Ordering::Relaxed);
    }

    /// `(min_era, seen_era)` for a claim, with `min_era >= seen_era` even while another task
    /// records an era between the two loads (reading `min_era` first and `seen_era` second
    /// could pair an old floor with a newer seen era: the fallback era could then be at or
    /// below an era already seen).
    pub fn claim_args(&self) -> (u64, u64) {
        let seen = self.seen_era.load(Ordering::Relaxed);
        let min = self.min_era.load(Ordering::Relaxed).max(seen);
        (min, seen)
    }

    /// The current floor (`min_era`).
    pub fn min_era(&self) -> u64 {
        self.min_era.load(Ordering::Relaxed)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn floor_covers_boot_and_seen_eras() {
        let f = EraFloor::new(10);
        assert_eq!(f.claim_args(), (10, 0));
        f.seen(Epoch::new(5, 1));
        assert_eq!(f.claim_args(), (10, 5));
        f.seen(Epoch::new(100, 3));
        assert_eq!(f.claim_args(), (100, 100));
        assert_eq!(f.min_era(), 100);
    }
}
