//! The simulation's directory protocol: one JSON request line, one JSON response line, over a
//! turmoil TCP connection per request. [`Remote`] implements [`Directory`] on the client side
//! (so the real [`plaza_directory::RoomLease`] runs against it); [`serve`] wraps the real
//! [`MemoryDirectory`] on the directory host and logs every applied request for the checker.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use plaza_directory::{
    AnnounceOutcome, AuditRecord, Clock, Directory, DirectoryError, Epoch, MemoryDirectory,
    NodeInfo, Placement, PresenceEntry, Sources, Sweeper,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use turmoil::net::{TcpListener, TcpStream};

/// The directory host's name and port.
pub(crate) const DIR_HOST: &str = "dir";
pub(crate) const DIR_PORT: u16 = 7000;

/// A request of the simulation protocol (the subset of [`Directory`] the nodes use).
#[derive(Clone, Debug, Deserialize, Serialize)]
pub(crate) enum Req {
    RegisterNode {
        info: NodeInfo,
        ttl_ms: u64,
    },
    Place {
        room: String,
    },
    Resolve {
        room: String,
    },
    Claim {
        room: String,
        node: String,
        ttl_ms: u64,
    },
    Renew {
        room: String,
        node: String,
        epoch: Epoch,
        ttl_ms: u64,
    },
    Release {
        room: String,
        node: String,
        epoch: Epoch,
    },
    PresenceRegister {
        entry: PresenceEntry,
        epoch: Epoch,
        ttl_ms: u64,
    },
    PresenceAddSource {
        wallet: String,
        source: Sources,
        epoch: Epoch,
    },
    PresenceRelease {
        wallet: String,
        source: Sources,
        epoch: Epoch,
    },
    PresenceRenew {
        node: String,
        room: String,
        epoch: Epoch,
        ttl_ms: u64,
    },
    PresenceGet {
        wallet: String,
    },
    Peers,
    Sweep,
    AuditAppend {
        room: String,
        epoch: Epoch,
        kind: String,
        detail: String,
    },
}

impl Req {
    /// The wallet a presence request is about.
    pub(crate) fn wallet(&self) -> Option<&str> {
        match self {
            Req::PresenceRegister { entry, .. } => Some(&entry.wallet),
            Req::PresenceAddSource { wallet, .. }
            | Req::PresenceRelease { wallet, .. }
            | Req::PresenceGet { wallet } => Some(wallet),
            _ => None,
        }
    }
}

/// A [`DirectoryError`] on the wire.
#[derive(Clone, Debug, Deserialize, Eq, PartialEq, Serialize)]
pub(crate) enum WireErr {
    Stale {
        room: String,
        presented: Epoch,
        current: Option<Epoch>,
    },
    NotOwner,
    Unavailable(String),
    Conflict(String),
    Invalid(String),
    NotFound(String),
}

impl From<DirectoryError> for WireErr {
    fn from(e: DirectoryError) -> Self {
        match e {
            DirectoryError::StaleEpoch {
                room,
                presented,
                current,
            } => Self::Stale {
                room,
                presented,
                current,
            },
            DirectoryError::NotOwner => Self::NotOwner,
            DirectoryError::Unavailable(m) => Self::Unavailable(m),
            DirectoryError::Conflict(m) => Self::Conflict(m),
            DirectoryError::Invalid(m) => Self::Invalid(m),
            DirectoryError::NotFound(m) => Self::NotFound(m),
        }
    }
}

impl From<WireErr> for DirectoryError {
    fn from(e: WireErr) -> Self {
        match e {
            WireErr::Stale {
                room,
                presented,
                current,
            } => Self::StaleEpoch {
                room,
                presented,
                current,
            },
            WireErr::NotOwner => Self::NotOwner,
            WireErr::Unavailable(m) => Self::Unavailable(m),
            WireErr::Conflict(m) => Self::Conflict(m),
            WireErr::Invalid(m) => Self::Invalid(m),
            WireErr::NotFound(m) => Self::NotFound(m),
        }
    }
}

pub(crate) type WireResult = Result<Value, WireErr>;

/// One event of the directory's history, in the order the store applied it.
#[allow(clippy::large_enum_variant)] // a test log; `Start` is rare
#[derive(Clone, Debug)]
pub(crate) enum StoreEvent {
    /// The directory host (re)started with an empty store issuing epochs of `era`.
    Start { t: u64, era: u64 },
    /// A request applied to the store at store time `t`, with its result and, for presence
    /// requests, the wallet's live entry right after it (same instant).
    Applied {
        t: u64,
        req: Req,
        result: WireResult,
        post: Option<PresenceEntry>,
    },
}

/// The store clock: simulated milliseconds since the start of the sim plus a base.
#[derive(Debug)]
pub(crate) struct SimClock {
    pub(crate) base_ms: u64,
}

impl Clock for SimClock {
    fn now_ms(&self) -> u64 {
        let e = turmoil::sim_elapsed().expect("store clock read outside the simulation");
        self.base_ms + u64::try_from(e.as_millis()).expect("sim time fits u64")
    }
}

/// How the directory host picks the era of a fresh (data-lost) store.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(crate) enum EraPolicy {
    /// Like the Redis backend: `max(store clock now, highest era issued before + 1)`, the floor
    /// surviving the data loss.
    Floor,
    /// A broken store that restarts at a fixed era (negative control: epochs get reused).
    Fixed(u64),
}

/// What the directory host keeps across its own restarts (the durable bits: the era floor)
/// plus the recorded history (outside the simulated world).
#[derive(Debug)]
pub(crate) struct DirShared {
    pub(crate) era_floor: AtomicU64,
    pub(crate) policy: EraPolicy,
    pub(crate) base_ms: u64,
    pub(crate) sweep_every: Duration,
    pub(crate) log: Mutex<Vec<StoreEvent>>,
}

/// The directory host: a fresh [`MemoryDirectory`] per (re)start, its [`Sweeper`], and the
/// request server.
pub(crate) async fn serve(sh: Arc<DirShared>) -> turmoil::Result {
    let clock = Arc::new(SimClock {
        base_ms: sh.base_ms,
    });
    let now = clock.now_ms();
    let era = match sh.policy {
        EraPolicy::Floor => now.max(sh.era_floor.load(Ordering::SeqCst) + 1),
        EraPolicy::Fixed(e) => e,
    };
    sh.era_floor.fetch_max(era, Ordering::SeqCst);
    sh.log.lock().push(StoreEvent::Start { t: now, era });
    let dir = Arc::new(MemoryDirectory::with_clock_and_era(clock.clone(), era));
    let _sweeper = Sweeper::spawn(dir.clone(), sh.sweep_every);
    let listener = TcpListener::bind(("0.0.0.0", DIR_PORT)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let (dir, sh, clock) = (dir.clone(), sh.clone(), clock.clone());
        tokio::task::spawn_local(async move {
            // A peer that crashed or got partitioned mid-request must not pin the task.
            let _ = tokio::time::timeout(Duration::from_secs(5), async move {
                let mut stream = BufReader::new(stream);
                let mut line = String::new();
                if stream.read_line(&mut line).await.ok()? == 0 {
                    return None;
                }
                let req: Req = serde_json::from_str(&line).ok()?;
                let result = apply(&dir, &sh, &clock, req).await;
                let mut out = serde_json::to_vec(&result).ok()?;
                out.push(b'\n');
                stream.get_mut().write_all(&out).await.ok()?;
                stream.get_mut().shutdown().await.ok()
            })
            .await;
        });
    }
}

fn ok<T: Serialize>(r: Result<T, DirectoryError>) -> WireResult {
    r.map(|v| serde_json::to_value(v).expect("serializable"))
        .map_err(WireErr::from)
}

/// Applies `req` and records it. The memory backend's calls never yield, so the call, the
/// post-state read and the log push happen at one simulated instant with nothing in between.
async fn apply(dir: &MemoryDirectory, sh: &DirShared, clock: &SimClock, req: Req) -> WireResult {
    let t = clock.now_ms();
    let result = match req.clone() {
        Req::RegisterNode { info, ttl_ms } => ok(dir.register_node(info, ttl_ms).await),
        Req::Place { room } => ok(dir.place(&room).await),
        Req::Resolve { room } => ok(dir.resolve(&room).await),
        Req::Claim { room, node, ttl_ms } => ok(dir.claim(&room, &node, ttl_ms).await),
        Req::Renew {
            room,
            node,
            epoch,
            ttl_ms,
        } => ok(dir.renew(&room, &node, epoch, ttl_ms).await),
        Req::Release { room, node, epoch } => ok(dir.release(&room, &node, epoch).await),
        Req::PresenceRegister {
            entry,
            epoch,
            ttl_ms,
        } => ok(dir.presence_register(entry, epoch, ttl_ms).await),
        Req::PresenceAddSource {
            wallet,
            source,
            epoch,
        } => ok(dir.presence_add_source(&wallet, source, epoch).await),
        Req::PresenceRelease {
            wallet,
            source,
            epoch,
        } => ok(dir.presence_release(&wallet, source, epoch).await),
        Req::PresenceRenew {
            node,
            room,
            epoch,
            ttl_ms,
        } => ok(dir.presence_renew(&node, &room, epoch, ttl_ms).await),
        Req::PresenceGet { wallet } => ok(dir.presence_get(&wallet).await),
        Req::Peers => ok(dir.peers(None).await),
        Req::Sweep => ok(dir.sweep().await),
        Req::AuditAppend {
            room,
            epoch,
            kind,
            detail,
        } => ok(dir.audit_append(&room, epoch, &kind, &detail, t).await),
    };
    let post = match req.wallet() {
        Some(w) => dir.presence_get(w).await.expect("valid wallet"),
        None => None,
    };
    assert_eq!(clock.now_ms(), t, "the memory backend yielded mid-request");
    sh.log.lock().push(StoreEvent::Applied {
        t,
        req,
        result: result.clone(),
        post,
    });
    result
}

/// The client side: one connection per request, bounded by `timeout`; any transport failure
/// or timeout is [`DirectoryError::Unavailable`] (the request may or may not have been
/// applied, as with a real store).
#[derive(Clone, Debug)]
pub(crate) struct Remote {
    pub(crate) timeout: Duration,
}

impl Remote {
    pub(crate) async fn call(&self, req: &Req) -> Result<Value, DirectoryError> {
        let line = serde_json::to_vec(req).expect("serializable");
        let fut = async move {
            let mut s = TcpStream::connect((DIR_HOST, DIR_PORT)).await?;
            s.write_all(&line).await?;
            s.write_all(b"\n").await?;
            let mut r = BufReader::new(s);
            let mut resp = String::new();
            r.read_line(&mut resp).await?;
            Ok::<_, std::io::Error>(resp)
        };
        let resp = match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(resp)) if !resp.is_empty() => resp,
            Ok(Ok(_)) => return Err(DirectoryError::Unavailable("connection closed".into())),
            Ok(Err(e)) => return Err(DirectoryError::Unavailable(e.to_string())),
            Err(_) => return Err(DirectoryError::Unavailable("timeout".into())),
        };
        let r: WireResult = serde_json::from_str(&resp)
            .map_err(|e| DirectoryError::Unavailable(format!("bad response: {e}")))?;
        r.map_err(DirectoryError::from)
    }

    async fn typed<T: for<'de> Deserialize<'de>>(&self, req: Req) -> Result<T, DirectoryError> {
        let v = self.call(&req).await?;
        serde_json::from_value(v).map_err(|e| DirectoryError::Unavailable(e.to_string()))
    }
}

fn not_in_sim(what: &str) -> DirectoryError {
    DirectoryError::Invalid(format!("{what} is not part of the simulation protocol"))
}

#[async_trait::async_trait]
impl Directory for Remote {
    async fn register_node(&self, info: NodeInfo, ttl_ms: u64) -> Result<(), DirectoryError> {
        self.typed(Req::RegisterNode { info, ttl_ms }).await
    }
    async fn deregister_node(&self, _id: &str) -> Result<(), DirectoryError> {
        Err(not_in_sim("deregister_node"))
    }
    async fn live_nodes(&self) -> Result<Vec<NodeInfo>, DirectoryError> {
        Err(not_in_sim("live_nodes"))
    }
    async fn resolve(&self, room: &str) -> Result<Option<Placement>, DirectoryError> {
        self.typed(Req::Resolve { room: room.into() }).await
    }
    async fn place(&self, room: &str) -> Result<NodeInfo, DirectoryError> {
        self.typed(Req::Place { room: room.into() }).await
    }
    async fn claim(
        &self,
        room: &str,
        node: &str,
        ttl_ms: u64,
    ) -> Result<Placement, DirectoryError> {
        self.typed(Req::Claim {
            room: room.into(),
            node: node.into(),
            ttl_ms,
        })
        .await
    }
    async fn renew(
        &self,
        room: &str,
        node: &str,
        epoch: Epoch,
        ttl_ms: u64,
    ) -> Result<Placement, DirectoryError> {
        self.typed(Req::Renew {
            room: room.into(),
            node: node.into(),
            epoch,
            ttl_ms,
        })
        .await
    }
    async fn release(&self, room: &str, node: &str, epoch: Epoch) -> Result<(), DirectoryError> {
        self.typed(Req::Release {
            room: room.into(),
            node: node.into(),
            epoch,
        })
        .await
    }
    async fn check_epoch(&self, _room: &str, _epoch: Epoch) -> Result<(), DirectoryError> {
        Err(not_in_sim("check_epoch"))
    }
    async fn presence_register(
        &self,
        entry: PresenceEntry,
        epoch: Epoch,
        ttl_ms: u64,
    ) -> Result<(), DirectoryError> {
        self.typed(Req::PresenceRegister {
            entry,
            epoch,
            ttl_ms,
        })
        .await
    }
    async fn presence_add_source(
        &self,
        wallet: &str,
        source: Sources,
        epoch: Epoch,
    ) -> Result<(), DirectoryError> {
        self.typed(Req::PresenceAddSource {
            wallet: wallet.into(),
            source,
            epoch,
        })
        .await
    }
    async fn presence_release(
        &self,
        wallet: &str,
        source: Sources,
        epoch: Epoch,
    ) -> Result<bool, DirectoryError> {
        self.typed(Req::PresenceRelease {
            wallet: wallet.into(),
            source,
            epoch,
        })
        .await
    }
    async fn presence_renew(
        &self,
        node: &str,
        room: &str,
        epoch: Epoch,
        ttl_ms: u64,
    ) -> Result<u32, DirectoryError> {
        self.typed(Req::PresenceRenew {
            node: node.into(),
            room: room.into(),
            epoch,
            ttl_ms,
        })
        .await
    }
    async fn presence_get(&self, wallet: &str) -> Result<Option<PresenceEntry>, DirectoryError> {
        self.typed(Req::PresenceGet {
            wallet: wallet.into(),
        })
        .await
    }
    async fn presence_by_entity(
        &self,
        _room: &str,
        _entity: u32,
    ) -> Result<Option<PresenceEntry>, DirectoryError> {
        Err(not_in_sim("presence_by_entity"))
    }
    async fn peers(&self, filter: Option<&[String]>) -> Result<Vec<PresenceEntry>, DirectoryError> {
        if filter.is_some() {
            return Err(not_in_sim("peers with a filter"));
        }
        self.typed(Req::Peers).await
    }
    async fn sweep(&self) -> Result<u32, DirectoryError> {
        self.typed(Req::Sweep).await
    }
    async fn announce_profile(
        &self,
        _wallet: &str,
        _version: u64,
        _source: Sources,
    ) -> Result<AnnounceOutcome, DirectoryError> {
        Err(not_in_sim("announce_profile"))
    }
    async fn audit_append(
        &self,
        room: &str,
        epoch: Epoch,
        kind: &str,
        detail: &str,
        _at_ms: u64,
    ) -> Result<u64, DirectoryError> {
        self.typed(Req::AuditAppend {
            room: room.into(),
            epoch,
            kind: kind.into(),
            detail: detail.into(),
        })
        .await
    }
    async fn audit_read(
        &self,
        _room: &str,
        _from_seq: u64,
        _limit: usize,
    ) -> Result<Vec<AuditRecord>, DirectoryError> {
        Err(not_in_sim("audit_read"))
    }
    async fn put_handoff(
        &self,
        _room: &str,
        _epoch: Epoch,
        _state: Vec<u8>,
    ) -> Result<(), DirectoryError> {
        Err(not_in_sim("put_handoff"))
    }
    async fn take_handoff(&self, _room: &str) -> Result<Option<(Epoch, Vec<u8>)>, DirectoryError> {
        Err(not_in_sim("take_handoff"))
    }
    async fn put_resume(
        &self,
        _token: &str,
        _entry: Vec<u8>,
        _ttl_ms: u64,
    ) -> Result<(), DirectoryError> {
        Err(not_in_sim("put_resume"))
    }
    async fn take_resume(&self, _token: &str) -> Result<Option<Vec<u8>>, DirectoryError> {
        Err(not_in_sim("take_resume"))
    }
    async fn claim_once(&self, _key: &str, _ttl_ms: u64) -> Result<bool, DirectoryError> {
        Err(not_in_sim("claim_once"))
    }
    async fn put_resume_held(
        &self,
        _holder: &str,
        _token: &str,
        _entry: Vec<u8>,
        _ttl_ms: u64,
    ) -> Result<(), DirectoryError> {
        Err(not_in_sim("put_resume_held"))
    }
    async fn renew_resume_holder(&self, _holder: &str, _ttl_ms: u64) -> Result<(), DirectoryError> {
        Err(not_in_sim("renew_resume_holder"))
    }
    async fn take_resume_held(
        &self,
        _holder: &str,
        _token: &str,
    ) -> Result<Option<Vec<u8>>, DirectoryError> {
        Err(not_in_sim("take_resume_held"))
    }
}
