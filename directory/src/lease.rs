//! Owner-side helpers: [`RoomLease`], which tells a room actor whether it may still commit, and
//! [`Sweeper`], the periodic [`Directory::sweep`] task.
//!
//! [`RoomLease`] implements "a node that cannot renew stops committing before its lease can
//! expire": the local validity window is measured on the local monotonic clock from the moment
//! the claim/renew request was *sent* (the store's lease starts no earlier than that), minus a
//! safety margin for clock-rate drift. It does not run a timer itself; the room actor calls
//! [`RoomLease::renew`] every [`RoomLease::renew_every`] and checks
//! [`RoomLease::may_commit`] before every side effect. Uses `tokio::time::Instant`, so tests can
//! pause time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::error::DirectoryError;
use crate::types::{Epoch, Placement};
use crate::{Directory, SharedDirectory};

/// A held room lease with a conservative local deadline.
#[derive(Clone, Debug)]
pub struct RoomLease {
    placement: Placement,
    ttl: Duration,
    margin: Duration,
    valid_until: Instant,
    /// With a presence TTL, every renewal also renews the presence of the activation's
    /// entries ([`Directory::renew_room`]: one store operation per room per period).
    presence_ttl: Option<Duration>,
    /// How many presence entries the last renewal renewed (0 before the first, or without a
    /// presence TTL).
    presence_renewed: u32,
}

fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

impl RoomLease {
    /// Claims `room` for `node` with lease `ttl`; the holder stops committing `margin` before
    /// the earliest moment the store's lease can lapse. `margin` must be below `ttl`.
    pub async fn claim(
        dir: &dyn Directory,
        room: &str,
        node: &str,
        ttl: Duration,
        margin: Duration,
    ) -> Result<Self, DirectoryError> {
        if margin >= ttl {
            return Err(DirectoryError::Invalid(
                "lease margin must be below the ttl".into(),
            ));
        }
        let sent = Instant::now();
        let placement = dir.claim(room, node, ttl_ms(ttl)).await?;
        Ok(Self {
            placement,
            ttl,
            margin,
            valid_until: sent + (ttl - margin),
            presence_ttl: None,
            presence_renewed: 0,
        })
    }

    /// Makes every renewal renew the activation's presence too, with `ttl` (`None`: the lease
    /// only). Kept across a reclaim.
    pub fn set_presence_ttl(&mut self, ttl: Option<Duration>) {
        self.presence_ttl = ttl;
    }

    /// The fencing epoch to attach to every write.
    pub fn epoch(&self) -> Epoch {
        self.placement.epoch
    }

    /// The placement as last confirmed by the store.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// True while the holder may commit effects (local deadline not reached).
    pub fn may_commit(&self) -> bool {
        Instant::now() < self.valid_until
    }

    /// The lease TTL the store grants.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Time left before the holder must stop committing.
    pub fn remaining(&self) -> Duration {
        self.valid_until.saturating_duration_since(Instant::now())
    }

    /// How often to renew: a third of the safe window, so two renewals may fail in a row.
    pub fn renew_every(&self) -> Duration {
        (self.ttl - self.margin) / 3
    }

    /// Renews the lease. On success the local deadline moves to `send time + ttl − margin`.
    /// On a fencing error (the lease was lost) the holder must stop at once: `may_commit`
    /// turns false. On `Unavailable` the deadline is unchanged, so the holder stops on its own
    /// when the store stays unreachable.
    pub async fn renew(&mut self, dir: &dyn Directory) -> Result<(), DirectoryError> {
        let sent = Instant::now();
        let p = &self.placement;
        let renewed = match self.presence_ttl {
            Some(pt) => {
                dir.renew_room(&p.room, &p.node, p.epoch, ttl_ms(self.ttl), ttl_ms(pt))
                    .await
            }
            None => dir
                .renew(&p.room, &p.node, p.epoch, ttl_ms(self.ttl))
                .await
                .map(|p| (p, 0)),
        };
        match renewed {
            Ok((p, n)) => {
                self.placement = p;
                self.presence_renewed = n;
                self.valid_until = self.valid_until.max(sent + (self.ttl - self.margin));
                Ok(())
            }
            Err(e) => {
                if e.is_fenced() {
                    self.valid_until = Instant::now();
                    tracing::warn!(room = %self.placement.room, epoch = %self.placement.epoch,
                        error = %e, "room lease lost");
                }
                Err(e)
            }
        }
    }

    /// How many presence entries of this activation the last successful renewal renewed
    /// (members and entries held only by other sources, `crate::sources`).
    pub fn presence_renewed(&self) -> u32 {
        self.presence_renewed
    }

    /// Renews, and if the room has **no live placement at all** (the lease lapsed unclaimed,
    /// or the store lost its data) claims it again under a new, greater epoch. Any other
    /// failure is returned like [`Self::renew`]. On [`Renewal::Reclaimed`] the holder must
    /// re-register its presence entries with the new epoch (the old epoch is refused from now
    /// on); single activation still holds because claims are exclusive.
    pub async fn renew_or_reclaim(
        &mut self,
        dir: &dyn Directory,
    ) -> Result<Renewal, DirectoryError> {
        match self.renew(dir).await {
            Ok(()) => Ok(Renewal::Renewed),
            Err(DirectoryError::StaleEpoch { current: None, .. }) => {
                let old = self.epoch();
                let p = &self.placement;
                let mut fresh = Self::claim(dir, &p.room, &p.node, self.ttl, self.margin).await?;
                fresh.presence_ttl = self.presence_ttl;
                *self = fresh;
                tracing::info!(room = %self.placement.room, %old, new = %self.epoch(),
                    "room lease reclaimed under a new epoch");
                Ok(Renewal::Reclaimed { old })
            }
            Err(e) => Err(e),
        }
    }

    /// Gives the lease up (after the room stopped committing).
    pub async fn release(mut self, dir: &dyn Directory) -> Result<(), DirectoryError> {
        self.valid_until = Instant::now();
        let p = &self.placement;
        dir.release(&p.room, &p.node, p.epoch).await
    }
}

/// The result of [`RoomLease::renew_or_reclaim`].
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Renewal {
    /// The lease was extended under the same epoch.
    Renewed,
    /// The room had no live placement and was claimed again under a new epoch
    /// ([`RoomLease::epoch`]); presence must be re-registered with it.
    Reclaimed {
        /// The epoch that is now stale.
        old: Epoch,
    },
}

/// A background task calling [`Directory::sweep`] periodically; aborted on drop.
#[derive(Debug)]
pub struct Sweeper {
    handle: JoinHandle<()>,
    removed: Arc<AtomicU64>,
}

impl Sweeper {
    /// Spawns the sweeper on the current tokio runtime; first sweep after `every`.
    pub fn spawn(dir: SharedDirectory, every: Duration) -> Self {
        let removed = Arc::new(AtomicU64::new(0));
        let count = removed.clone();
        let handle = tokio::spawn(async move {
            let mut tick = tokio::time::interval_at(Instant::now() + every, every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                match dir.sweep().await {
                    Ok(n) => {
                        count.fetch_add(u64::from(n), Ordering::Relaxed);
                    }
                    Err(e) => tracing::warn!(error = %e, "directory sweep failed"),
                }
            }
        });
        Self { handle, removed }
    }

    /// Records removed by this sweeper so far.
    pub fn removed(&self) -> u64 {
        self.removed.load(Ordering::Relaxed)
    }
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ManualClock, MemoryDirectory, PresenceEntry, Sources};

    const TTL: Duration = Duration::from_secs(10);
    const MARGIN: Duration = Duration::from_secs(2);

    #[tokio::test(start_paused = true)]
    async fn stops_committing_before_the_store_lease_lapses() {
        let clock = Arc::new(ManualClock::new(1_000));
        let d = MemoryDirectory::with_clock(clock.clone());
        let mut lease = RoomLease::claim(&d, "r", "a", TTL, MARGIN).await.unwrap();
        assert!(lease.may_commit());
        assert_eq!(lease.renew_every(), (TTL - MARGIN) / 3);
        // Renewals keep it valid.
        tokio::time::advance(Duration::from_secs(5)).await;
        clock.advance(5_000);
        lease.renew(&d).await.unwrap();
        tokio::time::advance(Duration::from_secs(7)).await;
        clock.advance(7_000);
        assert!(lease.may_commit());
        // No renewal: the holder stops at ttl − margin while the store lease still holds.
        tokio::time::advance(Duration::from_millis(1_001)).await;
        clock.advance(1_001);
        assert!(!lease.may_commit());
        assert_eq!(lease.remaining(), Duration::ZERO);
        d.check_epoch("r", lease.epoch()).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn lost_lease_stops_at_once() {
        let clock = Arc::new(ManualClock::new(1_000));
        let d = MemoryDirectory::with_clock(clock.clone());
        let mut lease = RoomLease::claim(&d, "r", "a", TTL, MARGIN).await.unwrap();
        clock.advance(10_001);
        let other = d.claim("r", "b", 10_000).await.unwrap();
        assert!(other.epoch > lease.epoch());
        assert!(lease.may_commit(), "local clock has not moved");
        let e = lease.renew(&d).await.unwrap_err();
        assert!(e.is_fenced(), "{e:?}");
        assert!(!lease.may_commit());
        assert!(RoomLease::claim(&d, "r", "a", TTL, TTL).await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn reclaims_only_an_unplaced_room() {
        let clock = Arc::new(ManualClock::new(1_000));
        let d = MemoryDirectory::with_clock(clock.clone());
        let mut lease = RoomLease::claim(&d, "r", "a", TTL, MARGIN).await.unwrap();
        assert_eq!(lease.renew_or_reclaim(&d).await.unwrap(), Renewal::Renewed);
        // Lapsed and unclaimed: reclaimed under a greater epoch.
        clock.advance(10_001);
        let old = lease.epoch();
        assert_eq!(
            lease.renew_or_reclaim(&d).await.unwrap(),
            Renewal::Reclaimed { old }
        );
        assert!(lease.epoch() > old);
        assert!(lease.may_commit());
        assert!(d.check_epoch("r", old).await.is_err());
        d.check_epoch("r", lease.epoch()).await.unwrap();
        // Lapsed and taken by another node: lost, not reclaimed.
        clock.advance(10_001);
        d.claim("r", "b", 10_000).await.unwrap();
        let e = lease.renew_or_reclaim(&d).await.unwrap_err();
        assert!(e.is_fenced(), "{e:?}");
        assert!(!lease.may_commit());
    }

    #[tokio::test]
    async fn sweeper_removes_expired_entries() {
        let clock = Arc::new(ManualClock::new(1_000));
        let d: SharedDirectory = Arc::new(MemoryDirectory::with_clock(clock.clone()));
        let p = d.claim("r", "a", 60_000).await.unwrap();
        let e = PresenceEntry {
            wallet: "w".into(),
            entity: 1,
            room: "r".into(),
            sources: Sources::ROOM,
            node: "a".into(),
            profile_version: 0,
            lease_until_ms: 0,
        };
        d.presence_register(e, p.epoch, 100).await.unwrap();
        clock.advance(101);
        let s = Sweeper::spawn(d.clone(), Duration::from_millis(5));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while s.removed() == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "sweeper never removed the entry"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(s.removed(), 1);
        assert_eq!(d.sweep().await.unwrap(), 0);
    }
}
