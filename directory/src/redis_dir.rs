//! [`RedisDirectory`]: the cluster backend on Redis — one server, a Redis Cluster, or a
//! Sentinel-managed primary.
//!
//! Every read-check-write runs as one Lua script (`directory/src/redis/scripts/*.lua`,
//! `redis::Script`: EVALSHA with automatic reload after a Redis restart), and **every script
//! touches the keys of one hash slot only**: a room's lease, epoch history, members, audit log
//! and handoff snapshot share the hash tag `{r:ROOM}`; a wallet's room pointer and profile
//! announcement share `{w:WALLET}`; the node registry, the epoch source and the sweep index are
//! one slot each. Operations that span slots (a registration touches the room and the wallet; a
//! sweep touches the index, the room and its wallets) are short sequences of single-slot
//! scripts, ordered so that a crash between two steps leaves at worst a record the sweeper
//! collects. The same code runs on one server and on a Cluster.
//!
//! Lease deadlines are computed inside the scripts from Redis `TIME` (absolute server
//! milliseconds), never from the caller's wall clock; expiry is logical (`until > now` checks
//! in every script) and the sweeper deletes expired records — there are no key TTLs on leases
//! and no keyspace notifications.
//!
//! # Writes that scale with rooms
//! A room's members are leased through their **activation** (the room's epoch): a member is
//! live while its own lease from registration runs, or while it is *chained* to its
//! activation's presence deadline. One renewal per room per period ([`Directory::renew_room`]:
//! one script, a handful of commands) extends the lease and the activation's presence deadline
//! and chains the members registered since the previous renewal that are still live; members
//! are never touched one by one on the hot path. A dead node's activations stop being renewed,
//! so its members lapse together, within the presence TTL, as before. The sweeper reads one
//! index (`{i}due`: room, node registry, profile → when to look at it) with
//! `ZRANGEBYSCORE … LIMIT`, and looks at a live room about once per presence TTL.
//!
//! # Epochs across data loss and failover
//! Epochs come from one hash `{e}epoch` (era, counter): every claim that activates a room
//! increments the counter, so an epoch is unique across all rooms. Each room also keeps the
//! last epoch it was issued (`{r:ROOM}last`) and refuses a claim at or below it. A new era
//! `max(redis_now_ms, min_era + 1, seen + 1)` starts when the epoch hash is missing (fresh or
//! flushed Redis), when it is below an epoch the claimer has seen (here, or as the room's last
//! epoch: Redis restored from an older backup), or when the **master marker** does not match:
//! `{e}mark` is written with `redis.set_repl(REPL_AOF)`, i.e. to the master and its AOF but
//! never to replicas, so a replica promoted after a master failure — which may lack
//! acknowledged increments (asynchronous replication) — starts a new era exactly as a
//! restarted empty Redis does, and no epoch is issued twice. Fencing itself compares the
//! presented epoch for equality with the live placement.
//!
//! # Connecting ([`RedisDirectory::connect`])
//! - `redis://host:port/db`, `rediss://…`, `unix:///path`: one server.
//! - `redis+cluster://[user:pass@]host1:port1,host2:port2,…` (or `rediss+cluster://`): a Redis
//!   Cluster, given any of its nodes as seeds.
//! - `redis+sentinel://[user:pass@]sentinel1:port1,sentinel2:port2,…/SERVICE`: the primary of
//!   `SERVICE` as the Sentinels report it; the connection is resolved again after an error,
//!   so a Sentinel failover is followed.
//!
//! # Deployment requirements
//! - `maxmemory-policy noeviction`: an evicted epoch or placement key would weaken fencing.
//! - The consent audit log and handoff snapshots are only as durable as Redis persistence:
//!   run with AOF (`appendonly yes`, `appendfsync everysec` or `always`) for G3. Leases and
//!   presence need no persistence (they are rebuilt by renewals within one lease TTL).
//! - Someone must call [`Directory::sweep`] periodically (e.g. [`crate::Sweeper`] on every
//!   node; concurrent sweeps are safe).
//! - The key prefix must not contain `{` or `}` (it would pin every key to one slot).
//!
//! # Keys (prefix `P`, default `plaza:`)
//! Room `R`: `P{r:R}place` (hash node, era, counter, until), `P{r:R}last` (hash era, ctr),
//! `P{r:R}act` (hash of activation presence records), `P{r:R}mem` (hash wallet → member),
//! `P{r:R}ents` (hash entity → wallet), `P{r:R}pend` (set), `P{r:R}audit` (list of JSON
//! records), `P{r:R}handoff` (hash). Wallet `W`: `P{w:W}` (hash room, version, psrc, at).
//! `P{n}nodes` (hash id → registration), `P{e}epoch`, `P{e}mark`, `P{i}due` (zset),
//! `Presume:TOKEN` (string with a Redis TTL), `Ponce:KEY` (one-time claim, string with a Redis
//! TTL), `P{h:H}resume` (hash token → entry; the key's
//! Redis TTL is holder `H`'s lease).

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Script, Value};
use serde::{Deserialize, Serialize};

use crate::era::EraFloor;
use crate::error::DirectoryError;
use crate::types::{
    AnnounceOutcome, AuditRecord, Epoch, NodeInfo, Placement, PresenceEntry, Sources,
};
use crate::{Directory, MAX_AUDIT_READ, MAX_ID_LEN, PROFILE_ORPHAN_GRACE_MS, policy, validate};

/// Largest integer the Lua scripts (doubles) represent exactly.
const LUA_MAX_INT: u64 = (1 << 53) - 1;
/// Index items one sweep step reads.
const SWEEP_BATCH: u32 = 500;
/// How long a sweeper holds the index items it is looking at (others skip them), ms.
const SWEEP_LEASE_MS: u64 = 5_000;
/// Most sweep steps of one [`Directory::sweep`] call (bounds one call's work).
const SWEEP_STEPS: u32 = 64;

/// Options of the Redis backend.
#[derive(Clone, Debug)]
pub struct RedisOptions {
    /// Prefix of every key (default `plaza:`); distinct prefixes isolate tenants and tests.
    pub prefix: String,
    /// Timeout of one command (default 2 s); a timed-out call is [`DirectoryError::Unavailable`].
    pub response_timeout: Duration,
    /// Timeout of one connection attempt (default 1 s).
    pub connection_timeout: Duration,
    /// Private CA and client certificate for `rediss://` (default: the system's roots, no
    /// client certificate).
    pub tls: Option<RedisTls>,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            prefix: "plaza:".into(),
            response_timeout: Duration::from_secs(2),
            connection_timeout: Duration::from_secs(1),
            tls: None,
        }
    }
}

/// TLS material of a `rediss://` connection, PEM bytes.
#[derive(Clone, Default)]
pub struct RedisTls {
    /// The CA the server's certificate must chain to, instead of the system's roots.
    pub ca: Option<Vec<u8>>,
    /// A client certificate chain and its key, for a server with `tls-auth-clients yes`.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTls")
            .field("ca", &self.ca.is_some())
            .field("client", &self.client.is_some())
            .finish()
    }
}

impl RedisTls {
    fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.ca.clone(),
        }
    }
}

/// What `directory.redis_url` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedisTarget {
    /// One server (`redis://`, `rediss://`, `unix://`).
    Single(String),
    /// A Redis Cluster given by seed node URLs (`redis+cluster://h1:p1,h2:p2`).
    Cluster(Vec<String>),
    /// Sentinels (URLs) and the service name (`redis+sentinel://s1:p1,s2:p2/SERVICE`).
    Sentinel {
        /// The Sentinels.
        sentinels: Vec<String>,
        /// The monitored service (master group) name.
        service: String,
        /// The `redis://` or `rediss://` scheme to reach the primary with, and its userinfo.
        template: String,
    },
}

impl RedisTarget {
    /// Parses a `directory.redis_url`.
    pub fn parse(url: &str) -> Result<Self, DirectoryError> {
        let bad = |why: &str| DirectoryError::Invalid(format!("redis url: {why}"));
        let url = url.trim();
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(bad("no scheme"));
        };
        let hosts = |rest: &str, plain: &str| -> Result<(Vec<String>, String), DirectoryError> {
            let (auth, hosts) = match rest.rsplit_once('@') {
                Some((a, h)) => (format!("{a}@"), h),
                None => (String::new(), rest),
            };
            let (hosts, path) = match hosts.split_once('/') {
                Some((h, p)) => (h, p.to_string()),
                None => (hosts, String::new()),
            };
            let list: Vec<String> = hosts
                .split(',')
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .map(|h| format!("{plain}://{auth}{h}"))
                .collect();
            if list.is_empty() {
                return Err(bad("no host"));
            }
            Ok((list, path))
        };
        match scheme {
            "redis" | "rediss" | "unix" | "redis+unix" => Ok(Self::Single(url.to_string())),
            "redis+cluster" | "rediss+cluster" => {
                let plain = scheme.trim_end_matches("+cluster");
                let (list, _) = hosts(rest, plain)?;
                Ok(Self::Cluster(list))
            }
            "redis+sentinel" => {
                let plain = "redis";
                let (auth, _) = rest.rsplit_once('@').unwrap_or(("", rest));
                let (list, service) = hosts(rest, "redis")?;
                let service = service.trim_matches('/').to_string();
                if service.is_empty() {
                    return Err(bad("sentinel URL needs /SERVICE"));
                }
                let auth = if auth.is_empty() {
                    String::new()
                } else {
                    format!("{auth}@")
                };
                Ok(Self::Sentinel {
                    sentinels: list,
                    service,
                    template: format!("{plain}://{auth}"),
                })
            }
            _ => Err(bad(
                "scheme must be redis, rediss, unix, redis+cluster or redis+sentinel",
            )),
        }
    }
}

/// One connection of any kind (cheap clones).
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }
    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(cmd, offset, count),
            Self::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }
    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

/// How connections are made: once (one server), lazily (a cluster, connected on first use),
/// or through Sentinel (resolved again after an error).
enum Backend {
    Single(ConnectionManager),
    Cluster {
        client: ClusterClient,
        con: tokio::sync::Mutex<Option<ClusterConnection>>,
    },
    Sentinel {
        sentinel: tokio::sync::Mutex<redis::sentinel::SentinelClient>,
        cfg: ConnectionManagerConfig,
        con: tokio::sync::Mutex<Option<ConnectionManager>>,
    },
}

/// The Redis directory. Cheap to share behind an `Arc`; connections reconnect on their own
/// after Redis comes back.
pub struct RedisDirectory {
    backend: Backend,
    prefix: String,
    /// Max of the boot era and every era seen from the store, and the max era seen.
    eras: EraFloor,
    s: Scripts,
}

impl std::fmt::Debug for RedisDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisDirectory")
            .field("prefix", &self.prefix)
            .field("min_era", &self.eras.min_era())
            .finish_non_exhaustive()
    }
}

/// An audit record as stored in the list (its seq is its position).
#[derive(Deserialize, Serialize)]
struct StoredAudit {
    era: u64,
    counter: u64,
    at_ms: u64,
    kind: String,
    detail: String,
}

/// The keys of one room, all in the room's slot (the order the room scripts expect).
struct RoomKeys([Vec<u8>; 8]);

impl RedisDirectory {
    /// Connects with default options. `boot_era` is the node's own era floor (e.g. its boot
    /// time in unix ms, or a persisted counter); must be below 2^53.
    pub async fn connect(url: &str, boot_era: u64) -> Result<Self, DirectoryError> {
        Self::connect_with(url, boot_era, RedisOptions::default()).await
    }

    /// Connects with `opts`. Fails with [`DirectoryError::Unavailable`] if Redis is unreachable.
    pub async fn connect_with(
        url: &str,
        boot_era: u64,
        opts: RedisOptions,
    ) -> Result<Self, DirectoryError> {
        let d = Self::connect_lazy(url, boot_era, opts)?;
        // One round trip proves the connection (and, for a cluster, its slot map).
        d.server_time_ms().await?;
        Ok(d)
    }

    /// Like [`Self::connect_with`] but does not wait for Redis: the first call connects, and
    /// calls fail with [`DirectoryError::Unavailable`] until Redis is up (for processes that
    /// may start before Redis). Must be called inside a tokio runtime.
    pub fn connect_lazy(
        url: &str,
        boot_era: u64,
        opts: RedisOptions,
    ) -> Result<Self, DirectoryError> {
        if boot_era > LUA_MAX_INT {
            return Err(DirectoryError::Invalid(
                "boot_era must be below 2^53".into(),
            ));
        }
        if opts.prefix.contains(['{', '}']) {
            return Err(DirectoryError::Invalid(
                "key prefix must not contain { or }".into(),
            ));
        }
        let cfg = ConnectionManagerConfig::new()
            .set_response_timeout(Some(opts.response_timeout))
            .set_connection_timeout(Some(opts.connection_timeout))
            .set_number_of_retries(3)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_secs(1));
        let bad = |e: redis::RedisError| DirectoryError::Invalid(format!("redis url: {e}"));
        let backend = match RedisTarget::parse(url)? {
            RedisTarget::Single(u) => {
                let client = match &opts.tls {
                    // rustls under the process's default provider (ring, installed at start).
                    Some(tls) if u.starts_with("rediss://") => {
                        redis::Client::build_with_tls(u.as_str(), tls.certificates())
                            .map_err(bad)?
                    }
                    _ => redis::Client::open(u.as_str()).map_err(bad)?,
                };
                Backend::Single(
                    ConnectionManager::new_lazy_with_config(client, cfg).map_err(unavailable)?,
                )
            }
            RedisTarget::Cluster(seeds) => {
                let mut builder = ClusterClient::builder(seeds);
                if let Some(tls) = &opts.tls {
                    builder = builder.certs(tls.certificates());
                }
                let client = builder
                    .connection_timeout(opts.connection_timeout)
                    .response_timeout(opts.response_timeout)
                    .retries(3)
                    .min_retry_wait(50)
                    .max_retry_wait(1000)
                    .build()
                    .map_err(bad)?;
                Backend::Cluster {
                    client,
                    con: tokio::sync::Mutex::new(None),
                }
            }
            RedisTarget::Sentinel {
                sentinels,
                service,
                template,
            } => {
                let info = redis::Client::open(format!("{template}127.0.0.1"))
                    .map_err(bad)?
                    .get_connection_info()
                    .clone();
                let node = redis::sentinel::SentinelNodeConnectionInfo::default()
                    .set_redis_connection_info(info.redis_settings().clone());
                let sentinel = redis::sentinel::SentinelClient::build(
                    sentinels,
                    service.clone(),
                    Some(node),
                    redis::sentinel::SentinelServerType::Master,
                )
                .map_err(bad)?;
                Backend::Sentinel {
                    sentinel: tokio::sync::Mutex::new(sentinel),
                    cfg,
                    con: tokio::sync::Mutex::new(None),
                }
            }
        };
        Ok(Self {
            backend,
            prefix: opts.prefix,
            eras: EraFloor::new(boot_era),
            s: Scripts::new(),
        })
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// True when connected to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.backend, Backend::Cluster { .. })
    }

    async fn con(&self) -> Result<Conn, DirectoryError> {
        match &self.backend {
            Backend::Single(c) => Ok(Conn::Single(c.clone())),
            Backend::Cluster { client, con } => {
                let mut g = con.lock().await;
                if let Some(c) = &*g {
                    return Ok(Conn::Cluster(c.clone()));
                }
                let c = client.get_async_connection().await.map_err(unavailable)?;
                *g = Some(c.clone());
                Ok(Conn::Cluster(c))
            }
            Backend::Sentinel { sentinel, cfg, con } => {
                let mut g = con.lock().await;
                if let Some(c) = &*g {
                    return Ok(Conn::Single(c.clone()));
                }
                let client = sentinel
                    .lock()
                    .await
                    .async_get_client()
                    .await
                    .map_err(unavailable)?;
                let c = ConnectionManager::new_with_config(client, cfg.clone())
                    .await
                    .map_err(unavailable)?;
                *g = Some(c.clone());
                Ok(Conn::Single(c))
            }
        }
    }

    /// After a failed call through Sentinel, the next call asks the Sentinels for the primary
    /// again (it may have moved: the old one answers READONLY or not at all).
    async fn failed(&self, e: &redis::RedisError) {
        if let Backend::Sentinel { con, .. } = &self.backend
            && (e.is_io_error()
                || e.is_timeout()
                || e.is_connection_dropped()
                || e.to_string().contains("READONLY"))
        {
            *con.lock().await = None;
        }
    }

    async fn query<T: redis::FromRedisValue>(&self, cmd: &Cmd) -> Result<T, DirectoryError> {
        let mut con = self.con().await?;
        match cmd.query_async(&mut con).await {
            Ok(v) => Ok(v),
            Err(e) => {
                self.failed(&e).await;
                Err(unavailable(e))
            }
        }
    }

    /// Redis server time in unix milliseconds (the clock every lease is measured on).
    pub async fn server_time_ms(&self) -> Result<u64, DirectoryError> {
        let (secs, micros): (u64, u64) = self.query(&redis::cmd("TIME")).await?;
        Ok(secs * 1000 + micros / 1000)
    }

    /// Deletes every key under this directory's prefix (tests; simulates data loss of a
    /// shared Redis). Uses SCAN, not KEYS; one server only.
    pub async fn delete_all_keys(&self) -> Result<u64, DirectoryError> {
        if self.is_cluster() {
            return Err(DirectoryError::Invalid(
                "delete_all_keys needs a single server".into(),
            ));
        }
        let pattern = format!("{}*", glob_escape(&self.prefix));
        let mut cursor: u64 = 0;
        let mut n = 0;
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = self
                .query(
                    redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(&pattern)
                        .arg("COUNT")
                        .arg(500),
                )
                .await?;
            for k in keys {
                // One key per DEL: keys of different slots can not share a command.
                let d: u64 = self.query(redis::cmd("DEL").arg(k)).await?;
                n += d;
            }
            if next == 0 {
                return Ok(n);
            }
            cursor = next;
        }
    }

    // === keys ===

    fn room_keys(&self, room: &str) -> RoomKeys {
        let base = format!("{}{{r:{room}}}", self.prefix);
        let k = |s: &str| format!("{base}{s}").into_bytes();
        RoomKeys([
            k("place"),
            k("last"),
            k("act"),
            k("mem"),
            k("ents"),
            k("pend"),
            k("audit"),
            k("handoff"),
        ])
    }
    fn wallet_key(&self, wallet: &str) -> Vec<u8> {
        format!("{}{{w:{wallet}}}", self.prefix).into_bytes()
    }
    fn nodes_key(&self) -> Vec<u8> {
        format!("{}{{n}}nodes", self.prefix).into_bytes()
    }
    fn epoch_keys(&self) -> [Vec<u8>; 2] {
        [
            format!("{}{{e}}epoch", self.prefix).into_bytes(),
            format!("{}{{e}}mark", self.prefix).into_bytes(),
        ]
    }
    fn due_key(&self) -> Vec<u8> {
        format!("{}{{i}}due", self.prefix).into_bytes()
    }
    fn resume_key(&self, token: &str) -> Vec<u8> {
        format!("{}resume:{token}", self.prefix).into_bytes()
    }
    fn holder_key(&self, holder: &str) -> Vec<u8> {
        format!("{}{{h:{holder}}}resume", self.prefix).into_bytes()
    }

    // === script calls ===

    async fn run(
        &self,
        script: &Script,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<Vec<Value>, DirectoryError> {
        let mut inv = script.prepare_invoke();
        for k in keys {
            inv.key(*k);
        }
        for a in args {
            inv.arg(*a);
        }
        let mut con = self.con().await?;
        let v: Value = match inv.invoke_async(&mut con).await {
            Ok(v) => v,
            Err(e) => {
                self.failed(&e).await;
                return Err(unavailable(e));
            }
        };
        match v {
            Value::Array(items) if !items.is_empty() => Ok(items),
            other => Err(DirectoryError::Unavailable(format!(
                "unexpected script reply {other:?}"
            ))),
        }
    }

    async fn room(
        &self,
        script: &Script,
        room: &str,
        args: &[&[u8]],
    ) -> Result<Vec<Value>, DirectoryError> {
        let k = self.room_keys(room);
        let keys: Vec<&[u8]> = k.0.iter().map(Vec::as_slice).collect();
        self.run(script, &keys, args).await
    }

    async fn wallet(
        &self,
        script: &Script,
        wallet: &str,
        args: &[&[u8]],
    ) -> Result<Vec<Value>, DirectoryError> {
        self.run(script, &[&self.wallet_key(wallet)], args).await
    }

    /// The room the wallet's pointer names, if any.
    async fn wallet_room(&self, wallet: &str) -> Result<Option<String>, DirectoryError> {
        let v: Option<Vec<u8>> = self
            .query(redis::cmd("HGET").arg(self.wallet_key(wallet)).arg("room"))
            .await?;
        v.map(|b| String::from_utf8(b).map_err(|_| bad_reply("utf8")))
            .transpose()
    }

    async fn unpoint(&self, wallet: &str, room: &str, drop_profile: bool) {
        let flag: &[u8] = if drop_profile { b"1" } else { b"0" };
        if let Err(e) = self
            .wallet(&self.s.w_unpoint, wallet, &[room.as_bytes(), flag])
            .await
        {
            // A pointer left behind names a room without the wallet: reads treat it as absent.
            tracing::debug!(wallet, room, error = %e, "wallet pointer not cleared");
        }
    }

    /// Adds (or lowers the score of) a sweep index item.
    async fn index(&self, item: &[u8], score: i64) -> Result<(), DirectoryError> {
        let _: i64 = self
            .query(
                redis::cmd("ZADD")
                    .arg(self.due_key())
                    .arg("LT")
                    .arg(score)
                    .arg(item),
            )
            .await?;
        Ok(())
    }

    fn seen(&self, epoch: Epoch) {
        self.eras.seen(epoch);
    }

    fn placement(&self, room: &str, r: &[Value]) -> Result<Placement, DirectoryError> {
        let p = Placement {
            room: room.to_string(),
            node: string(r, 1)?,
            epoch: Epoch::new(int(r, 2)?, int(r, 3)?),
            lease_until_ms: int(r, 4)?,
        };
        self.seen(p.epoch);
        Ok(p)
    }

    fn conflict(&self, room: &str, r: &[Value]) -> Result<DirectoryError, DirectoryError> {
        let owner = self.placement(room, r)?;
        Ok(DirectoryError::Conflict(format!(
            "room {room} is held by node {} (epoch {})",
            owner.node, owner.epoch
        )))
    }

    /// One sweep step over up to [`SWEEP_BATCH`] due index items; returns (removed, more).
    async fn sweep_step(&self) -> Result<(u32, bool), DirectoryError> {
        let due = self.due_key();
        let r = self
            .run(
                &self.s.due,
                &[&due],
                &[&num(u64::from(SWEEP_BATCH)), &num(SWEEP_LEASE_MS)],
            )
            .await?;
        let items = array(&r, 1)?;
        let mut removed = 0u32;
        for pair in items.chunks(2) {
            let item = bytes(pair, 0)?;
            let score = bytes(pair, 1)?;
            let (n, next) = if let Some(room) = item.strip_prefix(b"r:") {
                let room = String::from_utf8(room.to_vec()).map_err(|_| bad_reply("room"))?;
                let r = self.room(&self.s.sweep_room, &room, &[]).await?;
                for i in 3..r.len() {
                    self.unpoint(&string(&r, i)?, &room, true).await;
                }
                (int(&r, 1)?, sint(&r, 2)?)
            } else if item == b"n" {
                let r = self
                    .run(&self.s.sweep_nodes, &[&self.nodes_key()], &[])
                    .await?;
                (int(&r, 1)?, sint(&r, 2)?)
            } else if let Some(w) = item.strip_prefix(b"f:") {
                let w = String::from_utf8(w.to_vec()).map_err(|_| bad_reply("wallet"))?;
                let r = self
                    .wallet(&self.s.sweep_prof, &w, &[&num(PROFILE_ORPHAN_GRACE_MS)])
                    .await?;
                (int(&r, 1)?, sint(&r, 2)?)
            } else {
                (0, -1)
            };
            removed = removed.saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
            if next < 0 {
                self.run(&self.s.cas_remove, &[&due], &[&item, &score])
                    .await?;
            } else {
                // Only ever later: a registration or claim that lowered the score meanwhile is
                // looked at by the next sweep of the new score at the latest (a later look at
                // a lapsed record only delays its deletion; reads treat it as absent already).
                let _: i64 = self
                    .query(
                        redis::cmd("ZADD")
                            .arg(&due)
                            .arg("XX")
                            .arg("GT")
                            .arg(next)
                            .arg(&item),
                    )
                    .await?;
            }
        }
        Ok((removed, items.len() / 2 >= SWEEP_BATCH as usize))
    }
}

// === reply parsing ===

fn unavailable(e: redis::RedisError) -> DirectoryError {
    DirectoryError::Unavailable(e.to_string())
}

fn bad_reply(what: &str) -> DirectoryError {
    DirectoryError::Unavailable(format!("malformed redis reply: {what}"))
}

fn string(r: &[Value], i: usize) -> Result<String, DirectoryError> {
    match r.get(i) {
        Some(Value::BulkString(b)) => String::from_utf8(b.clone()).map_err(|_| bad_reply("utf8")),
        Some(Value::SimpleString(s)) => Ok(s.clone()),
        Some(Value::Int(n)) => Ok(n.to_string()),
        _ => Err(bad_reply("string expected")),
    }
}

fn bytes(r: &[Value], i: usize) -> Result<Vec<u8>, DirectoryError> {
    match r.get(i) {
        Some(Value::BulkString(b)) => Ok(b.clone()),
        Some(Value::SimpleString(s)) => Ok(s.clone().into_bytes()),
        _ => Err(bad_reply("bytes expected")),
    }
}

fn sint(r: &[Value], i: usize) -> Result<i64, DirectoryError> {
    match r.get(i) {
        Some(Value::Int(n)) => Ok(*n),
        Some(Value::BulkString(b)) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad_reply("integer expected")),
        _ => Err(bad_reply("integer expected")),
    }
}

fn int(r: &[Value], i: usize) -> Result<u64, DirectoryError> {
    u64::try_from(sint(r, i)?).map_err(|_| bad_reply("negative integer"))
}

fn array(r: &[Value], i: usize) -> Result<&[Value], DirectoryError> {
    match r.get(i) {
        Some(Value::Array(a)) => Ok(a),
        _ => Err(bad_reply("array expected")),
    }
}

/// A member reply `{wallet, entity, '', sources, node, pv, until}` of `room`.
fn entry(room: &str, r: &[Value]) -> Result<PresenceEntry, DirectoryError> {
    Ok(PresenceEntry {
        wallet: string(r, 0)?,
        entity: u32::try_from(int(r, 1)?).map_err(|_| bad_reply("entity"))?,
        room: room.to_string(),
        sources: Sources::from_bits(u32::try_from(int(r, 3)?).map_err(|_| bad_reply("src"))?),
        node: string(r, 4)?,
        profile_version: int(r, 5)?,
        lease_until_ms: int(r, 6)?,
    })
}

/// Maps a non-`ok` status reply to its error; `Ok(())` for `ok`.
fn status(room: &str, presented: Epoch, r: &[Value]) -> Result<(), DirectoryError> {
    match string(r, 0)?.as_str() {
        "ok" => Ok(()),
        "stale" => Err(DirectoryError::StaleEpoch {
            room: room.to_string(),
            presented,
            current: if r.len() >= 3 {
                Some(Epoch::new(int(r, 1)?, int(r, 2)?))
            } else {
                None
            },
        }),
        "notowner" => Err(DirectoryError::NotOwner),
        "notfound" => Err(DirectoryError::NotFound("no live presence entry".into())),
        "conflict" => Err(DirectoryError::Conflict(format!(
            "room {room}: entity belongs to another wallet"
        ))),
        other => Err(bad_reply(other)),
    }
}

fn num(n: u64) -> Vec<u8> {
    n.to_string().into_bytes()
}

fn epoch_arg(e: Epoch) -> Result<(Vec<u8>, Vec<u8>), DirectoryError> {
    if e.era > LUA_MAX_INT || e.counter > LUA_MAX_INT {
        return Err(DirectoryError::Invalid("epoch out of range".into()));
    }
    Ok((num(e.era), num(e.counter)))
}

fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The index item of a room.
fn room_item(room: &str) -> Vec<u8> {
    format!("r:{room}").into_bytes()
}

/// A score below every deadline and unlikely to repeat: an index item a claim re-scored is
/// never removed by a sweeper that read the item before the claim (see `cas_remove.lua`).
fn fresh_score() -> i64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    -(i64::from(nanos) + 1)
}

// === impl Directory ===

#[async_trait::async_trait]
impl Directory for RedisDirectory {
    async fn register_node(&self, info: NodeInfo, ttl_ms: u64) -> Result<(), DirectoryError> {
        validate::id("node id", &info.id)?;
        validate::ttl(ttl_ms)?;
        let draining: &[u8] = if info.draining { b"1" } else { b"0" };
        let r = self
            .run(
                &self.s.register_node,
                &[&self.nodes_key()],
                &[
                    info.id.as_bytes(),
                    info.addr.as_bytes(),
                    &num(u64::from(info.load)),
                    draining,
                    &num(ttl_ms),
                ],
            )
            .await?;
        status("", Epoch::default(), &r)?;
        if int(&r, 1)? == 1 {
            // A first registration: the sweeper must watch the registry.
            self.index(b"n", fresh_score()).await?;
        }
        Ok(())
    }

    async fn deregister_node(&self, id: &str) -> Result<(), DirectoryError> {
        validate::id("node id", id)?;
        let _: i64 = self
            .query(redis::cmd("HDEL").arg(self.nodes_key()).arg(id))
            .await?;
        Ok(())
    }

    async fn live_nodes(&self) -> Result<Vec<NodeInfo>, DirectoryError> {
        let r = self
            .run(&self.s.live_nodes, &[&self.nodes_key()], &[])
            .await?;
        let mut out = Vec::new();
        for n in array(&r, 1)? {
            let Value::Array(f) = n else {
                return Err(bad_reply("node"));
            };
            out.push(NodeInfo {
                id: string(f, 0)?,
                addr: string(f, 1)?,
                load: u32::try_from(int(f, 2)?).map_err(|_| bad_reply("load"))?,
                draining: int(f, 3)? != 0,
                heartbeat_until_ms: int(f, 4)?,
            });
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    async fn resolve(&self, room: &str) -> Result<Option<Placement>, DirectoryError> {
        validate::id("room", room)?;
        let r = self.room(&self.s.resolve, room, &[]).await?;
        match string(&r, 0)?.as_str() {
            "ok" => self.placement(room, &r).map(Some),
            _ => Ok(None),
        }
    }

    async fn place(&self, room: &str) -> Result<NodeInfo, DirectoryError> {
        let placed = self.resolve(room).await?;
        let nodes = self.live_nodes().await?;
        if let Some(p) = placed {
            return nodes.into_iter().find(|n| n.id == p.node).ok_or_else(|| {
                DirectoryError::Unavailable(format!(
                    "room {room} is leased by unregistered node {}",
                    p.node
                ))
            });
        }
        // Every node in `nodes` was live at the script's server time.
        policy::rendezvous_pick(room, &nodes, 0)
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
        let ttl = num(ttl_ms);
        let r = self
            .room(&self.s.claim_try, room, &[node.as_bytes(), &ttl])
            .await?;
        let (mut last_era, mut last_ctr) = match string(&r, 0)?.as_str() {
            "ok" => return self.placement(room, &r),
            "conflict" => return Err(self.conflict(room, &r)?),
            "free" => (int(&r, 1)?, int(&r, 2)?),
            other => return Err(bad_reply(other)),
        };
        let item = room_item(room);
        // Watched before the room holds anything, so a crash in between leaves nothing
        // unwatched; re-scored after, so a sweeper that found the room empty just before does
        // not drop the item (cas_remove.lua).
        self.index(&item, 0).await?;
        let [ek, mk] = self.epoch_keys();
        for _ in 0..4 {
            let (min_era, seen_era) = self.eras.claim_args();
            let (seen_era, seen_ctr) = if last_era > seen_era {
                (last_era, last_ctr)
            } else {
                (seen_era, 0)
            };
            let e = self
                .run(
                    &self.s.next_epoch,
                    &[&ek, &mk],
                    &[&num(min_era.max(seen_era)), &num(seen_era), &num(seen_ctr)],
                )
                .await?;
            let (era, ctr) = (int(&e, 1)?, int(&e, 2)?);
            let r = self
                .room(
                    &self.s.claim_set,
                    room,
                    &[node.as_bytes(), &ttl, &num(era), &num(ctr)],
                )
                .await?;
            match string(&r, 0)?.as_str() {
                "ok" => {
                    self.index(&item, fresh_score()).await?;
                    let p = self.placement(room, &r)?;
                    tracing::debug!(room, node, epoch = %p.epoch, "room claimed");
                    return Ok(p);
                }
                "conflict" => return Err(self.conflict(room, &r)?),
                "behind" => {
                    // The epoch source is behind this room's history (it lost data): ask
                    // again above it.
                    (last_era, last_ctr) = (int(&r, 1)?, int(&r, 2)?);
                    self.seen(Epoch::new(last_era, last_ctr));
                }
                other => return Err(bad_reply(other)),
            }
        }
        Err(DirectoryError::Unavailable(format!(
            "room {room}: the epoch source stays behind the room's history"
        )))
    }

    async fn renew(
        &self,
        room: &str,
        node: &str,
        epoch: Epoch,
        ttl_ms: u64,
    ) -> Result<Placement, DirectoryError> {
        self.renew_room(room, node, epoch, ttl_ms, 0)
            .await
            .map(|(p, _)| p)
    }

    async fn renew_room(
        &self,
        room: &str,
        node: &str,
        epoch: Epoch,
        ttl_ms: u64,
        presence_ttl_ms: u64,
    ) -> Result<(Placement, u32), DirectoryError> {
        validate::id("room", room)?;
        validate::id("node id", node)?;
        validate::ttl(ttl_ms)?;
        if presence_ttl_ms != 0 {
            validate::ttl(presence_ttl_ms)?;
        }
        let (e, c) = epoch_arg(epoch)?;
        let r = self
            .room(
                &self.s.renew,
                room,
                &[node.as_bytes(), &e, &c, &num(ttl_ms), &num(presence_ttl_ms)],
            )
            .await?;
        status(room, epoch, &r)?;
        let p = self.placement(room, &r)?;
        let n = u32::try_from(int(&r, 5)?).map_err(|_| bad_reply("count"))?;
        Ok((p, n))
    }

    async fn release(&self, room: &str, node: &str, epoch: Epoch) -> Result<(), DirectoryError> {
        validate::id("room", room)?;
        validate::id("node id", node)?;
        let (e, c) = epoch_arg(epoch)?;
        let r = self
            .room(&self.s.release, room, &[node.as_bytes(), &e, &c])
            .await?;
        status(room, epoch, &r)
    }

    async fn check_epoch(&self, room: &str, epoch: Epoch) -> Result<(), DirectoryError> {
        validate::id("room", room)?;
        let (e, c) = epoch_arg(epoch)?;
        let r = self.room(&self.s.check, room, &[&e, &c]).await?;
        status(room, epoch, &r)
    }

    async fn presence_register(
        &self,
        entry: PresenceEntry,
        epoch: Epoch,
        ttl_ms: u64,
    ) -> Result<(), DirectoryError> {
        validate::id("wallet", &entry.wallet)?;
        validate::id("room", &entry.room)?;
        validate::id("node id", &entry.node)?;
        validate::sources(entry.sources)?;
        validate::ttl(ttl_ms)?;
        if entry.profile_version > LUA_MAX_INT {
            return Err(DirectoryError::Invalid(
                "profile_version must be below 2^53".into(),
            ));
        }
        let (e, c) = epoch_arg(epoch)?;
        let (w, room) = (entry.wallet.as_str(), entry.room.as_str());
        // 1. Where the wallet is now, and its announced profile version.
        let (old_room, known): (Option<String>, Option<u64>) = self
            .query(
                redis::cmd("HMGET")
                    .arg(self.wallet_key(w))
                    .arg("room")
                    .arg("version"),
            )
            .await?;
        let pv = entry.profile_version.max(known.unwrap_or(0));
        // 2. The member, fenced, in the room's slot.
        let r = self
            .room(
                &self.s.join,
                room,
                &[
                    w.as_bytes(),
                    &num(u64::from(entry.entity)),
                    &num(u64::from(entry.sources.bits())),
                    entry.node.as_bytes(),
                    &num(pv),
                    &e,
                    &c,
                    &num(ttl_ms),
                ],
            )
            .await?;
        status(room, epoch, &r)?;
        let until = int(&r, 1)?;
        let evicted = string(&r, 2)?;
        // 3. The wallet points at the room (a profile announced meanwhile is carried over).
        let p = self.wallet(&self.s.w_point, w, &[room.as_bytes()]).await?;
        let version = int(&p, 1)?;
        if version > pv {
            self.room(&self.s.raise_pv, room, &[w.as_bytes(), &num(version)])
                .await?;
        }
        // 4. Out of the room it was in, and the evicted wallet's pointer.
        if let Some(old) = old_room.filter(|o| o != room) {
            self.room(&self.s.leave, &old, &[w.as_bytes()]).await?;
        }
        if !evicted.is_empty() {
            self.unpoint(&evicted, room, true).await;
        }
        // 5. The sweeper looks at the room by the member's lease end at the latest.
        self.index(&room_item(room), i64::try_from(until).unwrap_or(i64::MAX))
            .await
    }

    async fn presence_add_source(
        &self,
        wallet: &str,
        source: Sources,
        epoch: Epoch,
    ) -> Result<(), DirectoryError> {
        validate::id("wallet", wallet)?;
        validate::sources(source)?;
        let (e, c) = epoch_arg(epoch)?;
        let Some(room) = self.wallet_room(wallet).await? else {
            return Err(DirectoryError::NotFound("no live presence entry".into()));
        };
        let r = self
            .room(
                &self.s.src_add,
                &room,
                &[wallet.as_bytes(), &num(u64::from(source.bits())), &e, &c],
            )
            .await?;
        status(&room, epoch, &r)
    }

    async fn presence_release(
        &self,
        wallet: &str,
        source: Sources,
        epoch: Epoch,
    ) -> Result<bool, DirectoryError> {
        validate::id("wallet", wallet)?;
        validate::sources(source)?;
        let (e, c) = epoch_arg(epoch)?;
        let Some(room) = self.wallet_room(wallet).await? else {
            return Ok(false);
        };
        let r = self
            .room(
                &self.s.src_del,
                &room,
                &[wallet.as_bytes(), &num(u64::from(source.bits())), &e, &c],
            )
            .await?;
        status(&room, epoch, &r)?;
        let last = int(&r, 1)? == 1;
        if last {
            self.unpoint(wallet, &room, true).await;
        }
        Ok(last)
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
        let (e, c) = epoch_arg(epoch)?;
        let r = self
            .room(
                &self.s.pres_renew,
                room,
                &[node.as_bytes(), &e, &c, &num(ttl_ms)],
            )
            .await?;
        status(room, epoch, &r)?;
        u32::try_from(int(&r, 1)?).map_err(|_| bad_reply("count"))
    }

    async fn presence_get(&self, wallet: &str) -> Result<Option<PresenceEntry>, DirectoryError> {
        validate::id("wallet", wallet)?;
        let Some(room) = self.wallet_room(wallet).await? else {
            return Ok(None);
        };
        let r = self
            .room(&self.s.member, &room, &[wallet.as_bytes()])
            .await?;
        match string(&r, 0)?.as_str() {
            "ok" => entry(&room, array(&r, 1)?).map(Some),
            _ => Ok(None),
        }
    }

    async fn presence_by_entity(
        &self,
        room: &str,
        entity: u32,
    ) -> Result<Option<PresenceEntry>, DirectoryError> {
        validate::id("room", room)?;
        let r = self
            .room(&self.s.by_entity, room, &[&num(u64::from(entity))])
            .await?;
        match string(&r, 0)?.as_str() {
            "ok" => entry(room, array(&r, 1)?).map(Some),
            _ => Ok(None),
        }
    }

    async fn peers(&self, filter: Option<&[String]>) -> Result<Vec<PresenceEntry>, DirectoryError> {
        validate::peers_filter(filter)?;
        // Room → wallets asked for (`None`: every member).
        let mut rooms: std::collections::BTreeMap<String, Option<Vec<String>>> = Default::default();
        match filter {
            None => {
                let items: Vec<Vec<u8>> = self
                    .query(redis::cmd("ZRANGE").arg(self.due_key()).arg(0).arg(-1))
                    .await?;
                for i in items {
                    if let Some(r) = i.strip_prefix(b"r:") {
                        let r = String::from_utf8(r.to_vec()).map_err(|_| bad_reply("room"))?;
                        rooms.insert(r, None);
                    }
                }
            }
            Some(ids) => {
                let mut ids: Vec<&String> = ids.iter().collect();
                ids.sort();
                ids.dedup();
                for w in ids {
                    if let Some(r) = self.wallet_room(w).await?
                        && let Some(list) = rooms.entry(r).or_insert_with(|| Some(Vec::new()))
                    {
                        list.push(w.clone());
                    }
                }
            }
        }
        let mut out = Vec::new();
        for (room, ids) in rooms {
            if room.is_empty() || room.len() > MAX_ID_LEN {
                continue;
            }
            let mut args: Vec<&[u8]> = Vec::new();
            match &ids {
                None => args.push(b"all"),
                Some(list) => {
                    args.push(b"ids");
                    args.extend(list.iter().map(|w| w.as_bytes()));
                }
            }
            let r = self.room(&self.s.members, &room, &args).await?;
            for e in array(&r, 1)? {
                let Value::Array(f) = e else {
                    return Err(bad_reply("peer"));
                };
                out.push(entry(&room, f)?);
            }
        }
        // A wallet whose move between rooms is half done shows up once.
        out.sort_by(|a, b| a.wallet.cmp(&b.wallet));
        out.dedup_by(|a, b| a.wallet == b.wallet);
        Ok(out)
    }

    async fn sweep(&self) -> Result<u32, DirectoryError> {
        let mut total = 0u32;
        for _ in 0..SWEEP_STEPS {
            let (n, more) = self.sweep_step().await?;
            total = total.saturating_add(n);
            if !more {
                break;
            }
        }
        if total > 0 {
            tracing::debug!(removed = total, "directory sweep");
        }
        Ok(total)
    }

    async fn announce_profile(
        &self,
        wallet: &str,
        version: u64,
        source: Sources,
    ) -> Result<AnnounceOutcome, DirectoryError> {
        validate::id("wallet", wallet)?;
        validate::sources(source)?;
        if version > LUA_MAX_INT {
            return Err(DirectoryError::Invalid(
                "profile version must be below 2^53".into(),
            ));
        }
        let r = self
            .wallet(
                &self.s.announce,
                wallet,
                &[&num(version), &num(u64::from(source.bits()))],
            )
            .await?;
        let outcome = match string(&r, 0)?.as_str() {
            "fresh" => AnnounceOutcome::Fresh,
            "superseded" => AnnounceOutcome::Superseded {
                previous: int(&r, 1)?,
            },
            "merged" => AnnounceOutcome::Merged {
                sources: Sources::from_bits(
                    u32::try_from(int(&r, 1)?).map_err(|_| bad_reply("sources"))?,
                ),
            },
            "dropped" => AnnounceOutcome::Dropped {
                current: int(&r, 1)?,
            },
            other => return Err(bad_reply(other)),
        };
        if int(&r, 2)? == 1 {
            let mut item = b"f:".to_vec();
            item.extend_from_slice(wallet.as_bytes());
            self.index(&item, fresh_score()).await?;
        }
        let room = string(&r, 3)?;
        if !room.is_empty()
            && matches!(
                outcome,
                AnnounceOutcome::Fresh | AnnounceOutcome::Superseded { .. }
            )
        {
            self.room(&self.s.raise_pv, &room, &[wallet.as_bytes(), &num(version)])
                .await?;
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
        let (e, c) = epoch_arg(epoch)?;
        let payload = serde_json::to_vec(&StoredAudit {
            era: epoch.era,
            counter: epoch.counter,
            at_ms,
            kind: kind.to_string(),
            detail: detail.to_string(),
        })
        .map_err(|e| DirectoryError::Invalid(e.to_string()))?;
        let r = self
            .room(&self.s.audit_append, room, &[&e, &c, &payload])
            .await?;
        status(room, epoch, &r)?;
        int(&r, 1)
    }

    async fn audit_read(
        &self,
        room: &str,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, DirectoryError> {
        validate::id("room", room)?;
        let limit = limit.min(MAX_AUDIT_READ);
        if limit == 0 {
            return Ok(Vec::new());
        }
        let from = from_seq.max(1);
        let start = i64::try_from(from - 1).unwrap_or(i64::MAX);
        let stop = start.saturating_add(limit as i64 - 1);
        let key = self.room_keys(room).0[6].clone();
        let raw: Vec<Vec<u8>> = self
            .query(redis::cmd("LRANGE").arg(key).arg(start).arg(stop))
            .await?;
        raw.into_iter()
            .enumerate()
            .map(|(i, b)| {
                let s: StoredAudit =
                    serde_json::from_slice(&b).map_err(|_| bad_reply("audit record"))?;
                Ok(AuditRecord {
                    room: room.to_string(),
                    seq: from + i as u64,
                    epoch: Epoch::new(s.era, s.counter),
                    at_ms: s.at_ms,
                    kind: s.kind,
                    detail: s.detail,
                })
            })
            .collect()
    }

    async fn put_handoff(
        &self,
        room: &str,
        epoch: Epoch,
        state: Vec<u8>,
    ) -> Result<(), DirectoryError> {
        validate::id("room", room)?;
        validate::handoff(&state)?;
        let (e, c) = epoch_arg(epoch)?;
        let r = self
            .room(&self.s.put_handoff, room, &[&e, &c, &state])
            .await?;
        status(room, epoch, &r)
    }

    async fn take_handoff(&self, room: &str) -> Result<Option<(Epoch, Vec<u8>)>, DirectoryError> {
        validate::id("room", room)?;
        let r = self.room(&self.s.take_handoff, room, &[]).await?;
        match string(&r, 0)?.as_str() {
            "ok" => Ok(Some((Epoch::new(int(&r, 1)?, int(&r, 2)?), bytes(&r, 3)?))),
            _ => Ok(None),
        }
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
        let _: () = self
            .query(
                redis::cmd("SET")
                    .arg(self.resume_key(token))
                    .arg(entry)
                    .arg("PX")
                    .arg(ttl_ms),
            )
            .await?;
        Ok(())
    }

    async fn take_resume(&self, token: &str) -> Result<Option<Vec<u8>>, DirectoryError> {
        validate::id("resume token", token)?;
        self.query(redis::cmd("GETDEL").arg(self.resume_key(token)))
            .await
    }

    async fn claim_once(&self, key: &str, ttl_ms: u64) -> Result<bool, DirectoryError> {
        validate::id("claim key", key)?;
        validate::ttl(ttl_ms)?;
        // One key, one command: `SET NX PX`, the first claim wins; Redis expires the key.
        let ok: Option<String> = self
            .query(
                redis::cmd("SET")
                    .arg(format!("{}once:{key}", self.prefix))
                    .arg("1")
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl_ms),
            )
            .await?;
        Ok(ok.is_some())
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
        let r = self
            .run(
                &self.s.put_held,
                &[&self.holder_key(holder)],
                &[token.as_bytes(), &entry, &num(ttl_ms)],
            )
            .await?;
        status("", Epoch::default(), &r)
    }

    async fn renew_resume_holder(&self, holder: &str, ttl_ms: u64) -> Result<(), DirectoryError> {
        validate::id("resume holder", holder)?;
        validate::ttl(ttl_ms)?;
        let _: i64 = self
            .query(
                redis::cmd("PEXPIRE")
                    .arg(self.holder_key(holder))
                    .arg(ttl_ms),
            )
            .await?;
        Ok(())
    }

    async fn take_resume_held(
        &self,
        holder: &str,
        token: &str,
    ) -> Result<Option<Vec<u8>>, DirectoryError> {
        validate::id("resume holder", holder)?;
        validate::id("resume token", token)?;
        let r = self
            .run(
                &self.s.take_held,
                &[&self.holder_key(holder)],
                &[token.as_bytes()],
            )
            .await?;
        match string(&r, 0)?.as_str() {
            "ok" => Ok(Some(bytes(&r, 1)?)),
            _ => Ok(None),
        }
    }
}

// === Lua (directory/src/redis/scripts) ===

macro_rules! scripts {
    ($( $name:ident : $kind:ident ),* $(,)?) => {
        /// The loaded scripts.
        struct Scripts {
            $( $name: Script, )*
        }

        impl Scripts {
            fn new() -> Self {
                Self {
                    $( $name: scripts!(@make $kind, $name), )*
                }
            }
        }
    };
    (@make room, $name:ident) => {
        Script::new(concat!(
            include_str!("redis/scripts/prelude.lua"),
            include_str!("redis/scripts/room_prelude.lua"),
            include_str!(concat!("redis/scripts/", stringify!($name), ".lua")),
        ))
    };
    (@make plain, $name:ident) => {
        Script::new(concat!(
            include_str!("redis/scripts/prelude.lua"),
            include_str!(concat!("redis/scripts/", stringify!($name), ".lua")),
        ))
    };
}

scripts! {
    register_node: plain,
    live_nodes: plain,
    sweep_nodes: plain,
    next_epoch: plain,
    due: plain,
    cas_remove: plain,
    w_point: plain,
    w_unpoint: plain,
    announce: plain,
    sweep_prof: plain,
    put_held: plain,
    take_held: plain,
    resolve: room,
    claim_try: room,
    claim_set: room,
    renew: room,
    release: room,
    check: room,
    join: room,
    leave: room,
    src_add: room,
    src_del: room,
    pres_renew: room,
    member: room,
    by_entity: room,
    members: room,
    raise_pv: room,
    sweep_room: room,
    audit_append: room,
    put_handoff: room,
    take_handoff: room,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            RedisTarget::parse("redis://h:1/0").unwrap(),
            RedisTarget::Single("redis://h:1/0".into())
        );
        assert_eq!(
            RedisTarget::parse("redis+cluster://:pw@a:1,b:2").unwrap(),
            RedisTarget::Cluster(vec!["redis://:pw@a:1".into(), "redis://:pw@b:2".into()])
        );
        assert_eq!(
            RedisTarget::parse("rediss+cluster://a:1/").unwrap(),
            RedisTarget::Cluster(vec!["rediss://a:1".into()])
        );
        assert_eq!(
            RedisTarget::parse("redis+sentinel://s1:26379,s2:26379/mymaster").unwrap(),
            RedisTarget::Sentinel {
                sentinels: vec!["redis://s1:26379".into(), "redis://s2:26379".into()],
                service: "mymaster".into(),
                template: "redis://".into(),
            }
        );
        assert!(RedisTarget::parse("redis+sentinel://s1:26379").is_err());
        assert!(RedisTarget::parse("redis+cluster://").is_err());
        assert!(RedisTarget::parse("http://x").is_err());
    }
}
