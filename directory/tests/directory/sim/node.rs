//! A simulated room node: claims rooms with the real [`RoomLease`] (placement-guided, sometimes
//! against placement to force contention), renews / reclaims them, registers and releases
//! presence sources and appends audit records — every write only while
//! [`RoomLease::may_commit`], fenced by the lease's epoch — and records what it committed.
//! When it loses a lease it sometimes sends one more write with the old epoch (a paused process
//! waking up), which the store must refuse unless that epoch still holds the live lease.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use plaza_directory::{
    Directory, DirectoryError, Epoch, NodeInfo, PresenceEntry, Renewal, RoomLease, Sources,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use super::wire::Remote;

pub(crate) const ROOMS: usize = 2;
pub(crate) const WALLETS: usize = 6;
pub(crate) const LEASE_TTL: Duration = Duration::from_millis(1_000);
pub(crate) const LEASE_MARGIN: Duration = Duration::from_millis(250);
pub(crate) const PRESENCE_TTL_MS: u64 = 1_000;
pub(crate) const NODE_TTL_MS: u64 = 1_000;
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_millis(150);

pub(crate) fn room(r: usize) -> String {
    format!("room{r}")
}

pub(crate) fn wallet(w: usize) -> String {
    format!("w{w}")
}

/// Simulated milliseconds since the start (the same time base as the store's log).
pub(crate) fn sim_ms() -> u64 {
    u64::try_from(turmoil::sim_elapsed().expect("in sim").as_millis()).expect("fits")
}

/// A write a node committed (acknowledged by the store) while its lease allowed it.
#[derive(Clone, Debug)]
pub(crate) struct Commit {
    pub(crate) room: String,
    pub(crate) epoch: Epoch,
    pub(crate) node: String,
    /// When the node decided to commit (sent the write), sim ms.
    pub(crate) sent_ms: u64,
    pub(crate) kind: &'static str,
}

/// A write sent with an epoch the node already knew it had lost.
#[derive(Clone, Debug)]
pub(crate) struct Zombie {
    pub(crate) room: String,
    pub(crate) epoch: Epoch,
    pub(crate) sent_ms: u64,
    pub(crate) result: Result<u64, DirectoryError>,
}

/// What every node recorded (shared across incarnations; outside the simulated world).
#[derive(Debug, Default)]
pub(crate) struct NodeHistory {
    pub(crate) commits: Vec<Commit>,
    pub(crate) zombies: Vec<Zombie>,
    pub(crate) activations: Vec<(String, String, Epoch)>,
}

/// Shared between the nodes and the test driver.
#[derive(Debug)]
pub(crate) struct NodeShared {
    pub(crate) seed: u64,
    pub(crate) stop: AtomicBool,
    /// Incarnation counter per node host (a bounced node gets a new node id, like a new boot).
    pub(crate) boots: Vec<AtomicU64>,
    pub(crate) hist: Mutex<NodeHistory>,
}

struct Held {
    lease: RoomLease,
    next_renew: Instant,
    /// wallet index → sources this node believes it registered.
    sessions: BTreeMap<usize, Sources>,
}

struct Node {
    id: String,
    sh: Arc<NodeShared>,
    dir: Remote,
    rng: SmallRng,
    held: BTreeMap<usize, Held>,
}

impl Node {
    fn commit(&self, room: usize, epoch: Epoch, sent_ms: u64, kind: &'static str) {
        self.sh.hist.lock().commits.push(Commit {
            room: self.room_name(room),
            epoch,
            node: self.id.clone(),
            sent_ms,
            kind,
        });
    }

    fn room_name(&self, r: usize) -> String {
        room(r)
    }

    /// Drops a lease the node may no longer commit under; sometimes sends a zombie write.
    async fn lose(&mut self, r: usize) {
        let Some(h) = self.held.remove(&r) else {
            return;
        };
        if self.rng.random_bool(0.5) {
            let sent_ms = sim_ms();
            let epoch = h.lease.epoch();
            let result = self
                .dir
                .audit_append(&room(r), epoch, "zombie", "{}", 0)
                .await;
            self.sh.hist.lock().zombies.push(Zombie {
                room: room(r),
                epoch,
                sent_ms,
                result,
            });
        }
    }

    async fn heartbeat(&mut self) {
        let load = self.held.values().map(|h| h.sessions.len() as u32).sum();
        let info = NodeInfo {
            id: self.id.clone(),
            addr: format!("{}:1", self.id),
            load,
            draining: false,
            heartbeat_until_ms: 0,
        };
        let _ = self.dir.register_node(info, NODE_TTL_MS).await;
    }

    async fn maintain(&mut self, r: usize) {
        let Some(h) = self.held.get_mut(&r) else {
            return;
        };
        if Instant::now() >= h.next_renew {
            let sent_ms = sim_ms();
            match h.lease.renew_or_reclaim(&self.dir).await {
                Ok(Renewal::Renewed) => {
                    h.next_renew = Instant::now() + h.lease.renew_every();
                    let epoch = h.lease.epoch();
                    if h.lease.may_commit()
                        && self
                            .dir
                            .presence_renew(&self.id, &room(r), epoch, PRESENCE_TTL_MS)
                            .await
                            .is_ok()
                    {
                        self.commit(r, epoch, sim_ms(), "presence_renew");
                    }
                }
                Ok(Renewal::Reclaimed { .. }) => {
                    // A new activation: the old epoch is refused from now on; re-register.
                    h.next_renew = Instant::now() + h.lease.renew_every();
                    let epoch = h.lease.epoch();
                    self.sh
                        .hist
                        .lock()
                        .activations
                        .push((room(r), self.id.clone(), epoch));
                    let _ = sent_ms;
                    let sessions: Vec<(usize, Sources)> =
                        h.sessions.iter().map(|(w, s)| (*w, *s)).collect();
                    for (w, s) in sessions {
                        self.register(r, w, s).await;
                    }
                }
                Err(e) if e.is_retryable() => {
                    h.next_renew = Instant::now() + Duration::from_millis(50);
                }
                Err(_) => {}
            }
        }
        if self.held.get(&r).is_some_and(|h| !h.lease.may_commit()) {
            self.lose(r).await;
        }
    }

    /// Registers wallet `w` in held room `r` with `sources` (if the lease allows).
    async fn register(&mut self, r: usize, w: usize, sources: Sources) {
        let Some(h) = self.held.get(&r) else {
            return;
        };
        if !h.lease.may_commit() {
            return;
        }
        let epoch = h.lease.epoch();
        let entry = PresenceEntry {
            wallet: wallet(w),
            entity: w as u32 + 1,
            room: room(r),
            sources,
            node: self.id.clone(),
            profile_version: 0,
            lease_until_ms: 0,
        };
        let sent_ms = sim_ms();
        match self
            .dir
            .presence_register(entry, epoch, PRESENCE_TTL_MS)
            .await
        {
            Ok(()) => {
                self.commit(r, epoch, sent_ms, "presence_register");
                // The wallet is in this room now, not in any other this node holds.
                for (other, h) in &mut self.held {
                    if *other != r {
                        h.sessions.remove(&w);
                    }
                }
                if let Some(h) = self.held.get_mut(&r) {
                    h.sessions.insert(w, sources);
                }
            }
            Err(_) => {
                if let Some(h) = self.held.get_mut(&r) {
                    h.sessions.remove(&w);
                }
            }
        }
    }

    async fn claim(&mut self, r: usize) {
        let placed_here = match self.dir.place(&room(r)).await {
            Ok(n) => n.id == self.id,
            Err(_) => false,
        };
        // Mostly follow placement; sometimes claim anyway (a gateway with a stale view).
        if !placed_here && !self.rng.random_bool(0.2) {
            return;
        }
        if let Ok(lease) =
            RoomLease::claim(&self.dir, &room(r), &self.id, LEASE_TTL, LEASE_MARGIN).await
        {
            self.sh
                .hist
                .lock()
                .activations
                .push((room(r), self.id.clone(), lease.epoch()));
            let next_renew = Instant::now() + lease.renew_every();
            self.held.insert(
                r,
                Held {
                    lease,
                    next_renew,
                    sessions: BTreeMap::new(),
                },
            );
        }
    }

    /// Releases every session of room `r` and then the lease (a drain / empty room).
    async fn release_room(&mut self, r: usize) {
        let Some(h) = self.held.get(&r) else {
            return;
        };
        let epoch = h.lease.epoch();
        let sessions: Vec<usize> = h.sessions.keys().copied().collect();
        for w in sessions {
            if !self.held.get(&r).is_some_and(|h| h.lease.may_commit()) {
                break;
            }
            // The session ends: every source it is visible through goes at once.
            let sent_ms = sim_ms();
            // `Ok(false)` may be a no-op (an absent entry is not fenced), so only a release
            // that removed the last source counts as a commit.
            if let Ok(true) = self
                .dir
                .presence_release(&wallet(w), Sources::ALL, epoch)
                .await
            {
                self.commit(r, epoch, sent_ms, "presence_release");
            }
        }
        if let Some(h) = self.held.remove(&r) {
            let _ = h.lease.release(&self.dir).await;
        }
    }

    async fn act(&mut self) {
        let r = self.rng.random_range(0..ROOMS);
        let roll = self.rng.random_range(0..100);
        if !self.held.contains_key(&r) {
            if roll < 40 {
                self.claim(r).await;
            }
            return;
        }
        if !self.held[&r].lease.may_commit() {
            return;
        }
        let epoch = self.held[&r].lease.epoch();
        let w = self.rng.random_range(0..WALLETS);
        match roll {
            0..4 => self.release_room(r).await,
            4..40 => {
                let s = if self.rng.random_bool(0.7) {
                    Sources::ROOM
                } else {
                    Sources::ROOM | Sources::VOICE
                };
                self.register(r, w, s).await;
            }
            40..55 => {
                let src = [Sources::VOICE, Sources::CHAT, Sources::TRANSPORT2]
                    [self.rng.random_range(0..3)];
                let sent_ms = sim_ms();
                if let Ok(()) = self.dir.presence_add_source(&wallet(w), src, epoch).await {
                    self.commit(r, epoch, sent_ms, "presence_add_source");
                    if let Some(s) = self.held.get_mut(&r).and_then(|h| h.sessions.get_mut(&w)) {
                        *s |= src;
                    }
                }
            }
            55..80 => {
                let src = [Sources::ROOM, Sources::VOICE, Sources::CHAT, Sources::ALL]
                    [self.rng.random_range(0..4)];
                let sent_ms = sim_ms();
                match self.dir.presence_release(&wallet(w), src, epoch).await {
                    Ok(last) => {
                        // `Ok(false)` may be a no-op (an absent entry is not fenced).
                        if last {
                            self.commit(r, epoch, sent_ms, "presence_release");
                        }
                        if let Some(h) = self.held.get_mut(&r) {
                            if last {
                                h.sessions.remove(&w);
                            } else if let Some(s) = h.sessions.get_mut(&w) {
                                s.remove(src);
                                if s.is_empty() {
                                    // The store kept a source this node did not know it
                                    // added (an add whose reply was lost).
                                    *s = Sources::ROOM;
                                }
                            }
                        }
                    }
                    Err(DirectoryError::StaleEpoch { room: other, .. }) if other != room(r) => {
                        // The wallet moved to another room: not ours any more.
                        if let Some(h) = self.held.get_mut(&r) {
                            h.sessions.remove(&w);
                        }
                    }
                    Err(_) => {}
                }
            }
            _ => {
                let sent_ms = sim_ms();
                if self
                    .dir
                    .audit_append(&room(r), epoch, "consent", "{}", 0)
                    .await
                    .is_ok()
                {
                    self.commit(r, epoch, sent_ms, "audit_append");
                }
            }
        }
    }

    /// Graceful stop: release sessions and leases while still allowed.
    async fn shutdown(&mut self) {
        let rooms: Vec<usize> = self.held.keys().copied().collect();
        for r in rooms {
            if self.held[&r].lease.may_commit() {
                self.release_room(r).await;
            } else {
                self.held.remove(&r);
            }
        }
    }
}

/// The software of node host `idx` (re-run from scratch on every bounce).
pub(crate) async fn run_node(sh: Arc<NodeShared>, idx: usize) -> turmoil::Result {
    let boot = sh.boots[idx].fetch_add(1, Ordering::SeqCst);
    let mut node = Node {
        id: format!("n{idx}.{boot}"),
        rng: SmallRng::seed_from_u64(
            sh.seed
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .wrapping_add((idx as u64) << 32 | boot),
        ),
        sh,
        dir: Remote {
            timeout: REQUEST_TIMEOUT,
        },
        held: BTreeMap::new(),
    };
    let mut next_heartbeat = Instant::now();
    loop {
        if node.sh.stop.load(Ordering::SeqCst) {
            node.shutdown().await;
            return Ok(());
        }
        if Instant::now() >= next_heartbeat {
            node.heartbeat().await;
            next_heartbeat = Instant::now() + Duration::from_millis(300);
        }
        for r in 0..ROOMS {
            node.maintain(r).await;
        }
        node.act().await;
        let pause = node.rng.random_range(5..40);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}
