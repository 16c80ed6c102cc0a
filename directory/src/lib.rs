//! # plaza-directory
//!
//! The cluster directory of Plaza: who is online (presence), which node hosts which room
//! (placement with single activation), which nodes are alive (node registry), the durable consent
//! audit log, and handoff states for drains.
//!
//! It does **not** run timers: owners renew their leases and someone calls [`Directory::sweep`]
//! periodically (the sweeper is the source of truth for ghost cleanup; keyspace notifications are
//! never used). It does not talk to clients or rooms either; it is a store with fenced writes.
//!
//! # Layout
//! - [`types`]: value types ([`Epoch`], [`Sources`], [`PresenceEntry`], [`Placement`], …).
//! - [`error`]: [`DirectoryError`] with stable [`DirectoryError::code`]s.
//! - [`clock`]: the injectable [`Clock`] used by the in-memory backend.
//! - [`policy`]: the placement policy (weighted rendezvous hashing), shared by both backends.
//! - [`lease`]: owner-side [`RoomLease`] (stop committing before the lease can lapse) and
//!   the periodic [`Sweeper`].
//! - [`memory`]: [`MemoryDirectory`], the embedded backend of `plaza up`.
//! - [`redis_dir`]: [`RedisDirectory`], the cluster backend (Lua scripts, server time; one
//!   server, a Redis Cluster or Sentinel).
//! - `test_util` (feature `test-util`): a `redis-server` harness for integration tests.
//!
//! # Semantics shared by both backends
//! - **Epochs** ([`Epoch`]) are `(era, counter)` compared lexicographically. A claim of a free or
//!   expired room issues a strictly greater epoch than any epoch the store has issued before
//!   (for any room: an epoch identifies one activation of one room); the era makes this hold
//!   even after the store lost all its data (see [`RedisDirectory`]).
//! - **Fencing**: every side-effecting write of a room (presence, audit, handoff) carries the
//!   room's epoch; it is accepted only while that epoch holds a *live* lease, otherwise it fails
//!   with [`DirectoryError::StaleEpoch`]. An expired lease can not be renewed: the owner must
//!   stop committing and re-claim (which yields a new epoch).
//! - **Presence** entries are keyed by wallet (one room per wallet at a time), carry the OR of the
//!   [`Sources`] they are visible through, and are leased; expired entries are invisible to reads
//!   at once and deleted by [`Directory::sweep`]. Writes by wallet are fenced by the epoch of the
//!   room the entry is in *now*: a [`DirectoryError::StaleEpoch`] whose `room` is not the
//!   caller's room means the wallet moved on, not that the caller lost its lease.
//! - **Resume entries** are opaque bytes under an unguessable token with a TTL, taken once
//!   (a gateway stores one when a client's connection drops; any gateway takes it back).
//!   Expired entries are invisible at once and deleted by [`Directory::sweep`] (memory) or by
//!   Redis key expiry.
//! - **One-time claims** ([`Directory::claim_once`]) are keys held for a TTL; the first claim
//!   wins, later ones see `false` until the TTL lapses (then the key is free again).
//! - **Time**: lease deadlines are absolute milliseconds of the *store's* clock (the injected
//!   [`Clock`] in memory, Redis `TIME` in Redis), never the caller's wall clock.

pub mod clock;
#[doc(hidden)]
pub mod era;
pub mod error;
pub mod lease;
pub mod memory;
pub mod policy;
#[cfg(not(loom))]
pub mod redis_dir;
pub mod sources;
mod sync;
#[cfg(any(test, feature = "test-util"))]
pub mod test_util;
pub mod types;

use std::sync::Arc;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::DirectoryError;
pub use lease::{Renewal, RoomLease, Sweeper};
pub use memory::MemoryDirectory;
pub use policy::rendezvous_pick;
#[cfg(not(loom))]
pub use redis_dir::{RedisDirectory, RedisOptions, RedisTls};
pub use types::{
    AnnounceOutcome, AuditRecord, Epoch, NodeId, NodeInfo, Placement, PresenceEntry, Sources,
    Wallet,
};

/// A directory shared by every task of a process.
pub type SharedDirectory = Arc<dyn Directory>;

/// The directory contract, implemented identically by [`MemoryDirectory`] and
/// [`RedisDirectory`] (one shared test suite runs against both).
///
/// All `ttl_ms` arguments must be in `1..=`[`MAX_TTL_MS`]; ids must be non-empty and at most
/// [`MAX_ID_LEN`] bytes, otherwise [`DirectoryError::Invalid`].
#[async_trait::async_trait]
pub trait Directory: Send + Sync + 'static {
    // === nodes ===

    /// Registers or heartbeats a node: stores `info` with `heartbeat_until_ms = now + ttl_ms`
    /// (the field in `info` is ignored). Call again to heartbeat / update load or draining.
    async fn register_node(&self, info: NodeInfo, ttl_ms: u64) -> Result<(), DirectoryError>;
    /// Removes a node from the registry (its leases are untouched and lapse on their own).
    async fn deregister_node(&self, id: &str) -> Result<(), DirectoryError>;
    /// Nodes whose heartbeat has not lapsed, sorted by id (draining ones included).
    async fn live_nodes(&self) -> Result<Vec<NodeInfo>, DirectoryError>;

    // === placement (single activation) ===

    /// The room's live placement, if any.
    async fn resolve(&self, room: &str) -> Result<Option<Placement>, DirectoryError>;
    /// The node that hosts or should host `room`: the live owner if the room is placed,
    /// otherwise the pick of [`rendezvous_pick`] among live, non-draining nodes. Does not claim.
    /// [`DirectoryError::Unavailable`] if no node qualifies (or the live owner is unregistered).
    async fn place(&self, room: &str) -> Result<NodeInfo, DirectoryError>;
    /// Takes the room's lease for `node` if it is free or expired (with a new, strictly greater
    /// epoch), or renews it if `node` already holds it (same epoch).
    /// [`DirectoryError::Conflict`] if another node holds a live lease.
    async fn claim(&self, room: &str, node: &str, ttl_ms: u64)
    -> Result<Placement, DirectoryError>;
    /// Extends a live lease held by `node` under `epoch`. [`DirectoryError::StaleEpoch`] if the
    /// lease lapsed or another epoch holds the room; [`DirectoryError::NotOwner`] if the epoch
    /// matches but the node does not.
    async fn renew(
        &self,
        room: &str,
        node: &str,
        epoch: Epoch,
        ttl_ms: u64,
    ) -> Result<Placement, DirectoryError>;
    /// Gives the lease up. Idempotent when the room has no live placement; StaleEpoch if another
    /// epoch holds it; NotOwner if the node does not match.
    async fn release(&self, room: &str, node: &str, epoch: Epoch) -> Result<(), DirectoryError>;
    /// The fencing check: `Ok` iff `epoch` holds the room's live lease.
    async fn check_epoch(&self, room: &str, epoch: Epoch) -> Result<(), DirectoryError>;

    // === presence (every write fenced by the room's epoch) ===

    /// Registers (or replaces) the wallet's entry. Fenced by `epoch` on `entry.room`, whose
    /// owner must be `entry.node` (else NotOwner). `entry.lease_until_ms` is ignored and set to
    /// `now + ttl_ms`; `entry.sources` must be non-empty. A live entry of another wallet on the
    /// same `(room, entity)` under an older epoch is evicted; under the same epoch it is a
    /// [`DirectoryError::Conflict`].
    async fn presence_register(
        &self,
        entry: PresenceEntry,
        epoch: Epoch,
        ttl_ms: u64,
    ) -> Result<(), DirectoryError>;
    /// ORs `source` into the wallet's live entry (NotFound if none), fenced by the entry's room.
    async fn presence_add_source(
        &self,
        wallet: &str,
        source: Sources,
        epoch: Epoch,
    ) -> Result<(), DirectoryError>;
    /// Removes `source` from the wallet's entry, fenced by the entry's room. Returns `true` iff
    /// this removed the last source (the entry is then deleted and the room should delete the
    /// entity). An absent or expired entry, or a source not present, yields `false`.
    async fn presence_release(
        &self,
        wallet: &str,
        source: Sources,
        epoch: Epoch,
    ) -> Result<bool, DirectoryError>;
    /// Extends the leases of every live entry of `room` registered by `node` under `epoch`
    /// (the activation); fenced. Returns how many were renewed. An entry that lapsed is not
    /// renewed. The Redis backend does this in O(1) commands plus one per entry registered
    /// since the previous renewal (entries are chained to their activation's deadline).
    async fn presence_renew(
        &self,
        node: &str,
        room: &str,
        epoch: Epoch,
        ttl_ms: u64,
    ) -> Result<u32, DirectoryError>;
    /// Renews the lease like [`Self::renew`] and, in the same step, the presence of every live
    /// entry of `room` registered under `epoch` like [`Self::presence_renew`] (with
    /// `presence_ttl_ms`); returns the placement and how many entries were renewed. The room's
    /// directory writer calls this once per renewal period: one store operation per room,
    /// whatever its number of members (the Redis backend overrides the default, which makes
    /// two calls).
    async fn renew_room(
        &self,
        room: &str,
        node: &str,
        epoch: Epoch,
        ttl_ms: u64,
        presence_ttl_ms: u64,
    ) -> Result<(Placement, u32), DirectoryError> {
        let p = self.renew(room, node, epoch, ttl_ms).await?;
        let n = self
            .presence_renew(node, room, epoch, presence_ttl_ms)
            .await?;
        Ok((p, n))
    }
    /// The wallet's live entry.
    async fn presence_get(&self, wallet: &str) -> Result<Option<PresenceEntry>, DirectoryError>;
    /// The live entry holding `entity` in `room`.
    async fn presence_by_entity(
        &self,
        room: &str,
        entity: u32,
    ) -> Result<Option<PresenceEntry>, DirectoryError>;
    /// Online users (`GET /v1/peers`): every live entry, or only the given wallets; sorted by
    /// wallet. At most [`MAX_PEERS_FILTER`] filter ids.
    async fn peers(&self, filter: Option<&[String]>) -> Result<Vec<PresenceEntry>, DirectoryError>;
    /// Deletes expired presence entries, placements (the epoch history is kept), node
    /// registrations and orphaned profile announcements; returns how many records it removed.
    async fn sweep(&self) -> Result<u32, DirectoryError>;
    /// Records a profile-version announcement with version-aware dedup: a higher version
    /// supersedes, an equal one merges `source`, a lower one is dropped. Also raises the live
    /// entry's `profile_version`. Records die with the wallet's entry (or, orphaned, after
    /// [`PROFILE_ORPHAN_GRACE_MS`] at the next sweep).
    async fn announce_profile(
        &self,
        wallet: &str,
        version: u64,
        source: Sources,
    ) -> Result<AnnounceOutcome, DirectoryError>;

    // === durable consent audit log ===

    /// Appends a record to the room's log, fenced by `epoch`; returns its sequence number
    /// (per room, starting at 1, gap-free, assigned by the store).
    async fn audit_append(
        &self,
        room: &str,
        epoch: Epoch,
        kind: &str,
        detail: &str,
        at_ms: u64,
    ) -> Result<u64, DirectoryError>;
    /// Up to `limit` (capped at [`MAX_AUDIT_READ`]) records with `seq >= from_seq`, in order.
    async fn audit_read(
        &self,
        room: &str,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, DirectoryError>;

    // === handoff states (drain) ===

    /// Stores an opaque handoff state for `room`, fenced by `epoch` (replaces an older one).
    async fn put_handoff(
        &self,
        room: &str,
        epoch: Epoch,
        state: Vec<u8>,
    ) -> Result<(), DirectoryError>;
    /// Removes and returns the room's handoff state with the epoch that wrote it.
    async fn take_handoff(&self, room: &str) -> Result<Option<(Epoch, Vec<u8>)>, DirectoryError>;

    // === resume tokens (a client comes back through any gateway) ===

    /// Stores an opaque resume entry under `token` for `ttl_ms` of store time (replacing one
    /// stored under the same token). Not fenced: tokens are unguessable and taken once.
    async fn put_resume(
        &self,
        token: &str,
        entry: Vec<u8>,
        ttl_ms: u64,
    ) -> Result<(), DirectoryError>;
    /// Removes and returns the live entry of `token`; `None` if absent or expired.
    async fn take_resume(&self, token: &str) -> Result<Option<Vec<u8>>, DirectoryError>;

    // === one-time claims (anti-replay shared by every gateway) ===

    /// Claims `key` for `ttl_ms` of store time: `true` the first time (the key is now held),
    /// `false` while an earlier claim is live. One atomic step on every backend (Redis
    /// `SET key 1 NX PX ttl`), so two gateways racing on the same key see one `true`. Used for
    /// the wallet-signature anti-replay cache: the key names a (wallet, timestamp) pair.
    async fn claim_once(&self, key: &str, ttl_ms: u64) -> Result<bool, DirectoryError>;
    /// Stores a resume entry under `token` held by `holder` (a gateway): it lives as long as
    /// the holder's lease, which this extends to at least `ttl_ms` and
    /// [`Self::renew_resume_holder`] extends for all of the holder's entries at once (a live
    /// session's shared entry costs one write when it changes, not one per refresh period).
    async fn put_resume_held(
        &self,
        holder: &str,
        token: &str,
        entry: Vec<u8>,
        ttl_ms: u64,
    ) -> Result<(), DirectoryError>;
    /// Extends the lease of every entry `holder` holds to `ttl_ms` from now (one write).
    async fn renew_resume_holder(&self, holder: &str, ttl_ms: u64) -> Result<(), DirectoryError>;
    /// Removes and returns `holder`'s entry under `token`; `None` if absent or the holder's
    /// lease lapsed.
    async fn take_resume_held(
        &self,
        holder: &str,
        token: &str,
    ) -> Result<Option<Vec<u8>>, DirectoryError>;
}

/// Longest accepted id (wallet, room, node, kind) in bytes.
pub const MAX_ID_LEN: usize = 256;
/// Largest accepted resume entry in bytes.
pub const MAX_RESUME_BYTES: usize = 64 * 1024;
/// Longest accepted lease TTL (one day).
pub const MAX_TTL_MS: u64 = 86_400_000;
/// Largest accepted audit `detail` in bytes.
pub const MAX_AUDIT_DETAIL: usize = 64 * 1024;
/// Most records one [`Directory::audit_read`] returns.
pub const MAX_AUDIT_READ: usize = 10_000;
/// Largest accepted handoff state in bytes.
pub const MAX_HANDOFF_BYTES: usize = 64 * 1024 * 1024;
/// Most wallet ids accepted in a [`Directory::peers`] filter.
pub const MAX_PEERS_FILTER: usize = 10_000;
/// How long a profile announcement without a presence entry survives sweeps.
pub const PROFILE_ORPHAN_GRACE_MS: u64 = 30_000;

/// Validation shared by both backends.
pub(crate) mod validate {
    use crate::{DirectoryError, MAX_ID_LEN, MAX_TTL_MS, Sources};

    pub(crate) fn id(what: &str, v: &str) -> Result<(), DirectoryError> {
        if v.is_empty() {
            return Err(DirectoryError::Invalid(format!("{what} is empty")));
        }
        if v.len() > MAX_ID_LEN {
            return Err(DirectoryError::Invalid(format!(
                "{what} longer than {MAX_ID_LEN} bytes"
            )));
        }
        Ok(())
    }

    pub(crate) fn ttl(ttl_ms: u64) -> Result<(), DirectoryError> {
        if ttl_ms == 0 || ttl_ms > MAX_TTL_MS {
            return Err(DirectoryError::Invalid(format!(
                "ttl_ms {ttl_ms} outside 1..={MAX_TTL_MS}"
            )));
        }
        Ok(())
    }

    pub(crate) fn sources(s: Sources) -> Result<(), DirectoryError> {
        if s.is_empty() {
            return Err(DirectoryError::Invalid("empty source set".into()));
        }
        Ok(())
    }

    pub(crate) fn peers_filter(f: Option<&[String]>) -> Result<(), DirectoryError> {
        if let Some(ids) = f {
            if ids.len() > crate::MAX_PEERS_FILTER {
                return Err(DirectoryError::Invalid("too many peer ids".into()));
            }
            for w in ids {
                id("wallet", w)?;
            }
        }
        Ok(())
    }

    pub(crate) fn audit(kind: &str, detail: &str) -> Result<(), DirectoryError> {
        id("audit kind", kind)?;
        if detail.len() > crate::MAX_AUDIT_DETAIL {
            return Err(DirectoryError::Invalid("audit detail too large".into()));
        }
        Ok(())
    }

    pub(crate) fn resume(entry: &[u8]) -> Result<(), DirectoryError> {
        if entry.len() > crate::MAX_RESUME_BYTES {
            return Err(DirectoryError::Invalid("resume entry too large".into()));
        }
        Ok(())
    }

    pub(crate) fn handoff(state: &[u8]) -> Result<(), DirectoryError> {
        if state.len() > crate::MAX_HANDOFF_BYTES {
            return Err(DirectoryError::Invalid("handoff state too large".into()));
        }
        Ok(())
    }
}
