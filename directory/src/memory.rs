//! [`MemoryDirectory`]: the in-process backend (the embedded default of `plaza up`, and the
//! reference the Redis backend is tested against). One mutex over plain maps; time from an
//! injected [`Clock`]. It does not persist anything: a process restart loses all state, which is
//! fine because the rooms it fenced die with the same process.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::clock::{Clock, SystemClock};
use crate::error::DirectoryError;
use crate::sync::Mutex;
use crate::types::{
    AnnounceOutcome, AuditRecord, Epoch, NodeInfo, Placement, PresenceEntry, Sources,
};
use crate::{Directory, MAX_AUDIT_READ, PROFILE_ORPHAN_GRACE_MS, policy, validate};

/// The in-memory directory.
pub struct MemoryDirectory {
    clock: Arc<dyn Clock>,
    era: u64,
    state: Mutex<State>,
}

impl std::fmt::Debug for MemoryDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryDirectory")
            .field("era", &self.era)
            .finish_non_exhaustive()
    }
}

/// A stored presence entry with the epoch that registered it.
#[derive(Clone, Debug)]
struct Stored {
    entry: PresenceEntry,
    epoch: Epoch,
}

/// A profile announcement record.
#[derive(Clone, Debug)]
struct ProfileRec {
    version: u64,
    sources: Sources,
    at_ms: u64,
}

#[derive(Debug, Default)]
struct State {
    nodes: HashMap<String, NodeInfo>,
    placements: HashMap<String, Placement>,
    /// Activations issued so far (the counter of every epoch; unique across rooms).
    activations: u64,
    presence: HashMap<String, Stored>,
    by_entity: HashMap<(String, u32), String>,
    by_room: HashMap<String, HashSet<String>>,
    profiles: HashMap<String, ProfileRec>,
    audit: HashMap<String, Vec<AuditRecord>>,
    handoff: HashMap<String, (Epoch, Vec<u8>)>,
    /// token → (expiry in store ms, entry).
    resume: HashMap<String, (u64, Vec<u8>)>,
    /// One-time claims: key → expiry in store ms.
    once: HashMap<String, u64>,
    /// holder → (lease end in store ms, token → entry).
    held: HashMap<String, (u64, HashMap<String, Vec<u8>>)>,
}

impl MemoryDirectory {
    /// A directory on the system clock; its era is the current unix ms.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock::new()))
    }

    /// A directory on `clock`; its era is `clock.now_ms()` at construction.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        let era = clock.now_ms();
        Self::with_clock_and_era(clock, era)
    }

    /// A directory on `clock` issuing epochs of era `era` (or higher).
    pub fn with_clock_and_era(clock: Arc<dyn Clock>, era: u64) -> Self {
        Self {
            clock,
            era,
            state: Mutex::new(State::default()),
        }
    }

    /// The clock's current reading.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }
}

impl Default for MemoryDirectory {
    fn default() -> Self {
        Self::new()
    }
}

// === impl State ===

impl State {
    fn live_placement(&self, room: &str, now: u64) -> Option<&Placement> {
        self.placements.get(room).filter(|p| p.lease_until_ms > now)
    }

    fn check_epoch(
        &self,
        room: &str,
        epoch: Epoch,
        now: u64,
    ) -> Result<&Placement, DirectoryError> {
        match self.live_placement(room, now) {
            Some(p) if p.epoch == epoch => Ok(p),
            p => Err(DirectoryError::StaleEpoch {
                room: room.to_string(),
                presented: epoch,
                current: p.map(|p| p.epoch),
            }),
        }
    }

    fn live_entry(&self, wallet: &str, now: u64) -> Option<&Stored> {
        self.presence
            .get(wallet)
            .filter(|s| s.entry.lease_until_ms > now)
    }

    /// Deletes the wallet's entry and its indexes (and its profile record).
    fn remove_entry(&mut self, wallet: &str) -> Option<Stored> {
        let s = self.presence.remove(wallet)?;
        let key = (s.entry.room.clone(), s.entry.entity);
        if self.by_entity.get(&key).is_some_and(|w| w == wallet) {
            self.by_entity.remove(&key);
        }
        if let Some(set) = self.by_room.get_mut(&s.entry.room) {
            set.remove(wallet);
            if set.is_empty() {
                self.by_room.remove(&s.entry.room);
            }
        }
        self.profiles.remove(wallet);
        Some(s)
    }

    fn next_epoch(&mut self, era: u64) -> Epoch {
        self.activations += 1;
        Epoch::new(era, self.activations)
    }
}

// === impl Directory ===

#[async_trait::async_trait]
impl Directory for MemoryDirectory {
    async fn register_node(&self, mut info: NodeInfo, ttl_ms: u64) -> Result<(), DirectoryError> {
        validate::id("node id", &info.id)?;
        validate::ttl(ttl_ms)?;
        info.heartbeat_until_ms = self.now_ms() + ttl_ms;
        self.state.lock().nodes.insert(info.id.clone(), info);
        Ok(())
    }

    async fn deregister_node(&self, id: &str) -> Result<(), DirectoryError> {
        validate::id("node id", id)?;
        self.state.lock().nodes.remove(id);
        Ok(())
    }

    async fn live_nodes(&self) -> Result<Vec<NodeInfo>, DirectoryError> {
        let now = self.now_ms();
        let st = self.state.lock();
        let mut v: Vec<NodeInfo> = st
            .nodes
            .values()
            .filter(|n| n.heartbeat_until_ms > now)
            .cloned()
            .collect();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(v)
    }

    async fn resolve(&self, room: &str) -> Result<Option<Placement>, DirectoryError> {
        validate::id("room", room)?;
        let now = self.now_ms();
        Ok(self.state.lock().live_placement(room, now).cloned())
    }

    async fn place(&self, room: &str) -> Result<NodeInfo, DirectoryError> {
        validate::id("room", room)?;
        let now = self.now_ms();
        let st = self.state.lock();
        if let Some(p) = st.live_placement(room, now) {
            return st
                .nodes
                .get(&p.node)
                .filter(|n| n.heartbeat_until_ms > now)
                .cloned()
                .ok_or_else(|| {
                    DirectoryError::Unavailable(format!(
                        "room {room} is leased by unregistered node {}",
                        p.node
                    ))
                });
        }
        let nodes: Vec<NodeInfo> = st.nodes.values().cloned().collect();
        policy::rendezvous_pick(room, &nodes, now)
            .cloned()
            .ok_or_else(|| DirectoryError::Unavailable("no live node accepts rooms".into()))
    }

    async fn claim(
        &self,
        room: &str,
        node: &str,
        ttl_ms: u64,
    ) -> Result<Placement, DirectoryError> {
        validate::id("room", room)?;
        validate::id("node id", node)?;
        validate::ttl(ttl_ms)?;
        let now = self.now_ms();
        let mut st = self.state.lock();
        if let Some(p) = st.live_placement(room, now) {
            if p.node != node {
                return Err(DirectoryError::Conflict(format!(
                    "room {room} is held by node {} (epoch {})",
                    p.node, p.epoch
                )));
            }
            let mut p = p.clone();
            p.lease_until_ms = p.lease_until_ms.max(now + ttl_ms);
            st.placements.insert(room.to_string(), p.clone());
            return Ok(p);
        }
        let epoch = st.next_epoch(self.era);
        let p = Placement {
            room: room.to_string(),
            node: node.to_string(),
            epoch,
            lease_until_ms: now + ttl_ms,
        };
        st.placements.insert(room.to_string(), p.clone());
        tracing::debug!(room, node, %epoch, "room claimed");
        Ok(p)
    }

    async fn renew(
        &self,
        room: &str,
        node: &str,
        epoch: Epoch,
        ttl_ms: u64,
    ) -> Result<Placement, DirectoryError> {
        validate::id("room", room)?;
        validate::id("node id", node)?;
        validate::ttl(ttl_ms)?;
        let now = self.now_ms();
        let mut st = self.state.lock();
        let p = st.check_epoch(room, epoch, now)?;
        if p.node != node {
            return Err(DirectoryError::NotOwner);
        }
        let mut p = p.clone();
        p.lease_until_ms = p.lease_until_ms.max(now + ttl_ms);
        st.placements.insert(room.to_string(), p.clone());
        Ok(p)
    }

    async fn release(&self, room: &str, node: &str, epoch: Epoch) -> Result<(), DirectoryError> {
        validate::id("room", room)?;
        validate::id("node id", node)?;
        let now = self.now_ms();
        let mut st = self.state.lock();
        let Some(p) = st.live_placement(room, now) else {
            return Ok(());
        };
        if p.epoch != epoch {
            return Err(DirectoryError::StaleEpoch {
                room: room.to_string(),
                presented: epoch,
                current: Some(p.epoch),
            });
        }
        if p.node != node {
            return Err(DirectoryError::NotOwner);
        }
        st.placements.remove(room);
        Ok(())
    }

    async fn check_epoch(&self, room: &str, epoch: Epoch) -> Result<(), DirectoryError> {
        validate::id("room", room)?;
        let now = self.now_ms();
        self.state.lock().check_epoch(room, epoch, now).map(|_| ())
    }

    async fn presence_register(
        &self,
        mut entry: PresenceEntry,
        epoch: Epoch,
        ttl_ms: u64,
    ) -> Result<(), DirectoryError> {
        validate::id("wallet", &entry.wallet)?;
        validate::id("room", &entry.room)?;
        validate::id("node id", &entry.node)?;
        validate::sources(entry.sources)?;
        validate::ttl(ttl_ms)?;
        let now = self.now_ms();
        let mut st = self.state.lock();
        let owner = st.check_epoch(&entry.room, epoch, now)?;
        if owner.node != entry.node {
            return Err(DirectoryError::NotOwner);
        }
        let key = (entry.room.clone(), entry.entity);
        if let Some(other) = st.by_entity.get(&key).cloned()
            && other != entry.wallet
        {
            match st.live_entry(&other, now) {
                Some(s) if s.epoch >= epoch => {
                    return Err(DirectoryError::Conflict(format!(
                        "entity {} of room {} belongs to another wallet",
                        entry.entity, entry.room
                    )));
                }
                _ => {
                    st.remove_entry(&other);
                }
            }
        }
        if let Some(old) = st.presence.get(&entry.wallet).cloned() {
            // A rejoin of the same room keeps the sources other services hold (a voice
            // channel outlives the room session it began in; `sources`).
            if old.entry.room == entry.room && old.entry.lease_until_ms > now {
                entry.sources |= old.entry.sources - Sources::ROOM;
            }
            // Re-registration (possibly in another room): drop the old indexes, keep the
            // profile record.
            let profile = st.profiles.remove(&entry.wallet);
            st.remove_entry(&old.entry.wallet);
            if let Some(p) = profile {
                st.profiles.insert(entry.wallet.clone(), p);
            }
        }
        if let Some(p) = st.profiles.get(&entry.wallet) {
            entry.profile_version = entry.profile_version.max(p.version);
        }
        entry.lease_until_ms = now + ttl_ms;
        st.by_entity.insert(key, entry.wallet.clone());
        st.by_room
            .entry(entry.room.clone())
            .or_default()
            .insert(entry.wallet.clone());
        st.presence
            .insert(entry.wallet.clone(), Stored { entry, epoch });
        Ok(())
    }

    async fn presence_add_source(
        &self,
        wallet: &str,
        source: Sources,
        epoch: Epoch,
    ) -> Result<(), DirectoryError> {
        validate::id("wallet", wallet)?;
        validate::sources(source)?;
        let now = self.now_ms();
        let mut st = self.state.lock();
        let Some(room) = st.live_entry(wallet, now).map(|s| s.entry.room.clone()) else {
            return Err(DirectoryError::NotFound(format!(
                "no presence for {wallet}"
            )));
        };
        st.check_epoch(&room, epoch, now)?;
        if let Some(s) = st.presence.get_mut(wallet) {
            s.entry.sources |= source;
        }
        Ok(())
    }

    async fn presence_release(
        &self,
        wallet: &str,
        source: Sources,
        epoch: Epoch,
    ) -> Result<bool, DirectoryError> {
        validate::id("wallet", wallet)?;
        validate::sources(source)?;
        let now = self.now_ms();
        let mut st = self.state.lock();
        let Some(s) = st.live_entry(wallet, now) else {
            return Ok(false);
        };
        let room = s.entry.room.clone();
        let before = s.entry.sources;
        st.check_epoch(&room, epoch, now)?;
        if !before.intersects(source) {
            return Ok(false);
        }
        let after = before - source;
        if after.is_empty() {
            st.remove_entry(wallet);
            return Ok(true);
        }
        if let Some(s) = st.presence.get_mut(wallet) {
            s.entry.sources = after;
        }
        Ok(false)
    }

    async fn presence_renew(
        &self,
        node: &str,
        room: &str,
        epoch: Epoch,
        ttl_ms: u64,
    ) -> Result<u32, DirectoryError> {
        validate::id("node id", node)?;
        validate::id("room", room)?;
        validate::ttl(ttl_ms)?;
        let now = self.now_ms();
        let mut st = self.state.lock();
        if st.check_epoch(room, epoch, now)?.node != node {
            return Err(DirectoryError::NotOwner);
        }
        let wallets: Vec<String> = st
            .by_room
            .get(room)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        let mut n = 0;
        for w in wallets {
            if let Some(s) = st.presence.get_mut(&w)
                && s.entry.node == node
                && s.epoch == epoch
                && s.entry.lease_until_ms > now
            {
                s.entry.lease_until_ms = s.entry.lease_until_ms.max(now + ttl_ms);
                n += 1;
            }
        }
        Ok(n)
    }

    async fn presence_get(&self, wallet: &str) -> Result<Option<PresenceEntry>, DirectoryError> {
        validate::id("wallet", wallet)?;
        let now = self.now_ms();
        Ok(self
            .state
            .lock()
            .live_entry(wallet, now)
            .map(|s| s.entry.clone()))
    }

    async fn presence_by_entity(
        &self,
        room: &str,
        entity: u32,
    ) -> Result<Option<PresenceEntry>, DirectoryError> {
        validate::id("room", room)?;
        let now = self.now_ms();
        let st = self.state.lock();
        Ok(st
            .by_entity
            .get(&(room.to_string(), entity))
            .and_then(|w| st.live_entry(w, now))
            .map(|s| s.entry.clone()))
    }

    async fn peers(&self, filter: Option<&[String]>) -> Result<Vec<PresenceEntry>, DirectoryError> {
        validate::peers_filter(filter)?;
        let now = self.now_ms();
        let st = self.state.lock();
        let mut v: Vec<PresenceEntry> = match filter {
            Some(ids) => {
                let ids: HashSet<&String> = ids.iter().collect();
                ids.into_iter()
                    .filter_map(|w| st.live_entry(w, now))
                    .map(|s| s.entry.clone())
                    .collect()
            }
            None => st
                .presence
                .values()
                .filter(|s| s.entry.lease_until_ms > now)
                .map(|s| s.entry.clone())
                .collect(),
        };
        v.sort_by(|a, b| a.wallet.cmp(&b.wallet));
        Ok(v)
    }

    async fn sweep(&self) -> Result<u32, DirectoryError> {
        let now = self.now_ms();
        let mut st = self.state.lock();
        let mut removed = 0u32;
        let dead: Vec<String> = st
            .presence
            .values()
            .filter(|s| s.entry.lease_until_ms <= now)
            .map(|s| s.entry.wallet.clone())
            .collect();
        for w in dead {
            st.remove_entry(&w);
            removed += 1;
        }
        let before = st.placements.len();
        st.placements.retain(|_, p| p.lease_until_ms > now);
        removed += (before - st.placements.len()) as u32;
        let before = st.nodes.len();
        st.nodes.retain(|_, n| n.heartbeat_until_ms > now);
        removed += (before - st.nodes.len()) as u32;
        let State {
            profiles, presence, ..
        } = &mut *st;
        let before = profiles.len();
        profiles.retain(|w, p| {
            presence.contains_key(w) || p.at_ms.saturating_add(PROFILE_ORPHAN_GRACE_MS) > now
        });
        removed += (before - profiles.len()) as u32;
        let before = st.resume.len();
        st.resume.retain(|_, (until, _)| *until > now);
        removed += (before - st.resume.len()) as u32;
        let before = st.once.len();
        st.once.retain(|_, until| *until > now);
        removed += (before - st.once.len()) as u32;
        st.held.retain(|_, (until, _)| *until > now);
        if removed > 0 {
            tracing::debug!(removed, "directory sweep");
        }
        Ok(removed)
    }

    async fn announce_profile(
        &self,
        wallet: &str,
        version: u64,
        source: Sources,
    ) -> Result<AnnounceOutcome, DirectoryError> {
        validate::id("wallet", wallet)?;
        validate::sources(source)?;
        let now = self.now_ms();
        let mut st = self.state.lock();
        let outcome = match st.profiles.get_mut(wallet) {
            None => {
                st.profiles.insert(
                    wallet.to_string(),
                    ProfileRec {
                        version,
                        sources: source,
                        at_ms: now,
                    },
                );
                AnnounceOutcome::Fresh
            }
            Some(p) if version > p.version => {
                let previous = p.version;
                *p = ProfileRec {
                    version,
                    sources: source,
                    at_ms: now,
                };
                AnnounceOutcome::Superseded { previous }
            }
            Some(p) if version == p.version => {
                p.sources |= source;
                p.at_ms = now;
                AnnounceOutcome::Merged { sources: p.sources }
            }
            Some(p) => AnnounceOutcome::Dropped { current: p.version },
        };
        if outcome.should_fetch()
            && let Some(s) = st.presence.get_mut(wallet)
        {
            s.entry.profile_version = s.entry.profile_version.max(version);
        }
        Ok(outcome)
    }

    async fn audit_append(
        &self,
        room: &str,
        epoch: Epoch,
        kind: &str,
        detail: &str,
        at_ms: u64,
    ) -> Result<u64, DirectoryError> {
        validate::id("room", room)?;
        validate::audit(kind, detail)?;
        let now = self.now_ms();
        let mut st = self.state.lock();
        st.check_epoch(room, epoch, now)?;
        let log = st.audit.entry(room.to_string()).or_default();
        let seq = log.len() as u64 + 1;
        log.push(AuditRecord {
            room: room.to_string(),
            seq,
            epoch,
            at_ms,
            kind: kind.to_string(),
            detail: detail.to_string(),
        });
        Ok(seq)
    }

    async fn audit_read(
        &self,
        room: &str,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, DirectoryError> {
        validate::id("room", room)?;
        let st = self.state.lock();
        let Some(log) = st.audit.get(room) else {
            return Ok(Vec::new());
        };
        let start = usize::try_from(from_seq.max(1) - 1).unwrap_or(usize::MAX);
        Ok(log
            .iter()
            .skip(start)
            .take(limit.min(MAX_AUDIT_READ))
            .cloned()
            .collect())
    }

    async fn put_handoff(
        &self,
        room: &str,
        epoch: Epoch,
        state: Vec<u8>,
    ) -> Result<(), DirectoryError> {
        validate::id("room", room)?;
        validate::handoff(&state)?;
        let now = self.now_ms();
        let mut st = self.state.lock();
        st.check_epoch(room, epoch, now)?;
        st.handoff.insert(room.to_string(), (epoch, state));
        Ok(())
    }

    async fn take_handoff(&self, room: &str) -> Result<Option<(Epoch, Vec<u8>)>, DirectoryError> {
        validate::id("room", room)?;
        Ok(self.state.lock().handoff.remove(room))
    }

    async fn put_resume(
        &self,
        token: &str,
        entry: Vec<u8>,
        ttl_ms: u64,
    ) -> Result<(), DirectoryError> {
        validate::id("resume token", token)?;
        validate::ttl(ttl_ms)?;
        validate::resume(&entry)?;
        let now = self.now_ms();
        self.state
            .lock()
            .resume
            .insert(token.to_string(), (now + ttl_ms, entry));
        Ok(())
    }

    async fn take_resume(&self, token: &str) -> Result<Option<Vec<u8>>, DirectoryError> {
        validate::id("resume token", token)?;
        let now = self.now_ms();
        let taken = self.state.lock().resume.remove(token);
        Ok(taken.and_then(|(until, e)| (until > now).then_some(e)))
    }

    async fn claim_once(&self, key: &str, ttl_ms: u64) -> Result<bool, DirectoryError> {
        validate::id("claim key", key)?;
        validate::ttl(ttl_ms)?;
        let now = self.now_ms();
        let mut st = self.state.lock();
        match st.once.get(key) {
            Some(until) if *until > now => Ok(false),
            _ => {
                st.once.insert(key.to_string(), now + ttl_ms);
                Ok(true)
            }
        }
    }

    async fn put_resume_held(
        &self,
        holder: &str,
        token: &str,
        entry: Vec<u8>,
        ttl_ms: u64,
    ) -> Result<(), DirectoryError> {
        validate::id("resume holder", holder)?;
        validate::id("resume token", token)?;
        validate::ttl(ttl_ms)?;
        validate::resume(&entry)?;
        let now = self.now_ms();
        let mut st = self.state.lock();
        let h = st.held.entry(holder.to_string()).or_default();
        if h.0 <= now {
            h.1.clear();
        }
        h.0 = h.0.max(now + ttl_ms);
        h.1.insert(token.to_string(), entry);
        Ok(())
    }

    async fn renew_resume_holder(&self, holder: &str, ttl_ms: u64) -> Result<(), DirectoryError> {
        validate::id("resume holder", holder)?;
        validate::ttl(ttl_ms)?;
        let now = self.now_ms();
        let mut st = self.state.lock();
        if let Some(h) = st.held.get_mut(holder) {
            if h.0 <= now {
                st.held.remove(holder);
            } else {
                h.0 = now + ttl_ms;
            }
        }
        Ok(())
    }

    async fn take_resume_held(
        &self,
        holder: &str,
        token: &str,
    ) -> Result<Option<Vec<u8>>, DirectoryError> {
        validate::id("resume holder", holder)?;
        validate::id("resume token", token)?;
        let now = self.now_ms();
        let mut st = self.state.lock();
        let Some(h) = st.held.get_mut(holder) else {
            return Ok(None);
        };
        if h.0 <= now {
            st.held.remove(holder);
            return Ok(None);
        }
        Ok(h.1.remove(token))
    }
}
