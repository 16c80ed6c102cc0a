//! [`RedisDirectory`]: the cluster backend on one Redis (standalone; not Redis Cluster).
//!
//! Every read-check-write runs as one Lua script (`redis::Script`, EVALSHA with automatic
//! reload after a Redis restart), so claims, renewals, fencing checks, presence refcounts and
//! audit appends are atomic. Lease deadlines are computed inside the scripts from Redis `TIME`
//! (absolute server milliseconds), never from the caller's wall clock; expiry is logical
//! (`until > now` checks in every script) and the sweeper deletes expired records — there are no
//! key TTLs and no keyspace notifications.
//!
//! # Epochs across data loss
//! Era and counter live together in hash `{prefix}epoch` (one key, so they vanish together).
//! Every claim that activates a room increments the counter: an epoch is unique across all
//! rooms, not only per room. When the key is missing (fresh or flushed Redis) the claim starts
//! a new era `max(redis_now_ms, min_era + 1)`, where `min_era` is the max of the client's boot
//! era and every era this client has seen. A Redis that lost its data therefore starts a
//! strictly higher era than any epoch issued before (as long as the Redis host clock does not
//! run backwards past the old era, and in any case above everything the claiming process has
//! seen), and every write of an old epoch is refused (the old placement is gone). If the
//! store's era is *below* an era this client has already seen (Redis restored from an older
//! backup), the claim starts a new era the same way. (Fencing itself compares the presented
//! epoch for equality with the live placement, so it holds even without monotonicity;
//! monotonicity is what lets observers order activations.)
//!
//! # Deployment requirements
//! - Standalone Redis (or a primary with replicas for reads only); not Redis Cluster: the
//!   scripts touch keys they compute from arguments.
//! - `maxmemory-policy noeviction`: an evicted `epoch` key would weaken fencing.
//! - The consent audit log and handoff snapshots are only as durable as Redis persistence:
//!   run with AOF (`appendonly yes`, `appendfsync everysec` or `always`) for G3. Leases and
//!   presence need no persistence (they are rebuilt by renewals within one lease TTL).
//! - Someone must call [`Directory::sweep`] periodically (e.g. [`crate::Sweeper`] on every
//!   node; concurrent sweeps are safe).
//!
//! # Keys (prefix `P`, default `plaza:`)
//! `Pepoch` (hash era, ctr), `Pnodes` (zset id→until), `Pnode:{id}` (hash), `Pplaces` (zset room→until),
//! `Pplace:{room}` (hash), `Ppres` (zset wallet→until), `Pp:{wallet}`
//! (hash), `Pents:{room}` (hash entity→wallet), `Proom:{room}` (set of wallets), `Pprofs`
//! (zset wallet→at), `Pprof:{wallet}` (hash), `Paudit:{room}` (list of JSON records),
//! `Phandoff:{room}` (hash), `Presume:{token}` (string with a Redis TTL), `Ponce:{key}` (one-time claim, string with a Redis TTL). Scripts build keys from arguments, which standalone Redis allows.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Script, Value};
use serde::{Deserialize, Serialize};

use crate::era::EraFloor;
use crate::error::DirectoryError;
use crate::types::{
    AnnounceOutcome, AuditRecord, Epoch, NodeInfo, Placement, PresenceEntry, Sources,
};
use crate::{Directory, MAX_AUDIT_READ, PROFILE_ORPHAN_GRACE_MS, policy, validate};

/// Largest integer the Lua scripts (doubles) represent exactly.
const LUA_MAX_INT: u64 = (1 << 53) - 1;
/// Records each category of one sweep script call handles before yielding.
const SWEEP_BATCH: u32 = 500;

/// Options of the Redis backend.
#[derive(Clone, Debug)]
pub struct RedisOptions {
    /// Prefix of every key (default `plaza:`); distinct prefixes isolate tenants and tests.
    pub prefix: String,
    /// Timeout of one command (default 2 s); a timed-out call is [`DirectoryError::Unavailable`].
    pub response_timeout: Duration,
    /// Timeout of one connection attempt (default 1 s).
    pub connection_timeout: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            prefix: "plaza:".into(),
            response_timeout: Duration::from_secs(2),
            connection_timeout: Duration::from_secs(1),
        }
    }
}

/// The Redis directory. Cheap to share behind an `Arc`; the connection manager reconnects on
/// its own after Redis comes back.
pub struct RedisDirectory {
    con: ConnectionManager,
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
        let (client, cfg) = Self::config(url, boot_era, &opts)?;
        let con = ConnectionManager::new_with_config(client, cfg)
            .await
            .map_err(unavailable)?;
        Ok(Self::from_parts(con, boot_era, opts))
    }

    /// Like [`Self::connect_with`] but does not wait for Redis: the first call connects, and
    /// calls fail with [`DirectoryError::Unavailable`] until Redis is up (for processes that
    /// may start before Redis). Must be called inside a tokio runtime.
    pub fn connect_lazy(
        url: &str,
        boot_era: u64,
        opts: RedisOptions,
    ) -> Result<Self, DirectoryError> {
        let (client, cfg) = Self::config(url, boot_era, &opts)?;
        let con = ConnectionManager::new_lazy_with_config(client, cfg).map_err(unavailable)?;
        Ok(Self::from_parts(con, boot_era, opts))
    }

    fn config(
        url: &str,
        boot_era: u64,
        opts: &RedisOptions,
    ) -> Result<(redis::Client, ConnectionManagerConfig), DirectoryError> {
        if boot_era > LUA_MAX_INT {
            return Err(DirectoryError::Invalid(
                "boot_era must be below 2^53".into(),
            ));
        }
        let client = redis::Client::open(url)
            .map_err(|e| DirectoryError::Invalid(format!("redis url: {e}")))?;
        let cfg = ConnectionManagerConfig::new()
            .set_response_timeout(Some(opts.response_timeout))
            .set_connection_timeout(Some(opts.connection_timeout))
            .set_number_of_retries(3)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_secs(1));
        Ok((client, cfg))
    }

    fn from_parts(con: ConnectionManager, boot_era: u64, opts: RedisOptions) -> Self {
        Self {
            con,
            prefix: opts.prefix,
            eras: EraFloor::new(boot_era),
            s: Scripts::new(),
        }
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Redis server time in unix milliseconds (the clock every lease is measured on).
    pub async fn server_time_ms(&self) -> Result<u64, DirectoryError> {
        let (secs, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut self.con.clone())
            .await
            .map_err(unavailable)?;
        Ok(secs * 1000 + micros / 1000)
    }

    /// Deletes every key under this directory's prefix (tests; simulates data loss of a
    /// shared Redis). Uses SCAN, not KEYS.
    pub async fn delete_all_keys(&self) -> Result<u64, DirectoryError> {
        let mut con = self.con.clone();
        let pattern = format!("{}*", glob_escape(&self.prefix));
        let mut cursor: u64 = 0;
        let mut n = 0;
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(500)
                .query_async(&mut con)
                .await
                .map_err(unavailable)?;
            if !keys.is_empty() {
                let d: u64 = redis::cmd("DEL")
                    .arg(&keys)
                    .query_async(&mut con)
                    .await
                    .map_err(unavailable)?;
                n += d;
            }
            if next == 0 {
                return Ok(n);
            }
            cursor = next;
        }
    }

    async fn run(&self, script: &Script, args: &[&[u8]]) -> Result<Vec<Value>, DirectoryError> {
        let mut inv = script.prepare_invoke();
        inv.arg(self.prefix.as_bytes());
        for a in args {
            inv.arg(*a);
        }
        let v: Value = inv
            .invoke_async(&mut self.con.clone())
            .await
            .map_err(unavailable)?;
        match v {
            Value::Array(items) if !items.is_empty() => Ok(items),
            other => Err(DirectoryError::Unavailable(format!(
                "unexpected script reply {other:?}"
            ))),
        }
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
        _ => Err(bad_reply("bytes expected")),
    }
}

fn int(r: &[Value], i: usize) -> Result<u64, DirectoryError> {
    match r.get(i) {
        Some(Value::Int(n)) => u64::try_from(*n).map_err(|_| bad_reply("negative integer")),
        Some(Value::BulkString(b)) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad_reply("integer expected")),
        _ => Err(bad_reply("integer expected")),
    }
}

fn array(r: &[Value], i: usize) -> Result<&[Value], DirectoryError> {
    match r.get(i) {
        Some(Value::Array(a)) => Ok(a),
        _ => Err(bad_reply("array expected")),
    }
}

fn entry(r: &[Value]) -> Result<PresenceEntry, DirectoryError> {
    Ok(PresenceEntry {
        wallet: string(r, 0)?,
        entity: u32::try_from(int(r, 1)?).map_err(|_| bad_reply("entity"))?,
        room: string(r, 2)?,
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
                &[
                    info.id.as_bytes(),
                    info.addr.as_bytes(),
                    &num(u64::from(info.load)),
                    draining,
                    &num(ttl_ms),
                ],
            )
            .await?;
        status("", Epoch::default(), &r)
    }

    async fn deregister_node(&self, id: &str) -> Result<(), DirectoryError> {
        validate::id("node id", id)?;
        let r = self.run(&self.s.deregister_node, &[id.as_bytes()]).await?;
        status("", Epoch::default(), &r)
    }

    async fn live_nodes(&self) -> Result<Vec<NodeInfo>, DirectoryError> {
        let r = self.run(&self.s.live_nodes, &[]).await?;
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
        let r = self.run(&self.s.resolve, &[room.as_bytes()]).await?;
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
        let (min_era, seen_era) = self.eras.claim_args();
        let r = self
            .run(
                &self.s.claim,
                &[
                    room.as_bytes(),
                    node.as_bytes(),
                    &num(ttl_ms),
                    &num(min_era),
                    &num(seen_era),
                ],
            )
            .await?;
        match string(&r, 0)?.as_str() {
            "ok" => {
                let p = self.placement(room, &r)?;
                tracing::debug!(room, node, epoch = %p.epoch, "room claimed");
                Ok(p)
            }
            "conflict" => {
                let owner = self.placement(room, &r)?;
                Err(DirectoryError::Conflict(format!(
                    "room {room} is held by node {} (epoch {})",
                    owner.node, owner.epoch
                )))
            }
            other => Err(bad_reply(other)),
        }
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
        let (e, c) = epoch_arg(epoch)?;
        let r = self
            .run(
                &self.s.renew,
                &[room.as_bytes(), node.as_bytes(), &e, &c, &num(ttl_ms)],
            )
            .await?;
        status(room, epoch, &r)?;
        self.placement(room, &r)
    }

    async fn release(&self, room: &str, node: &str, epoch: Epoch) -> Result<(), DirectoryError> {
        validate::id("room", room)?;
        validate::id("node id", node)?;
        let (e, c) = epoch_arg(epoch)?;
        let r = self
            .run(&self.s.release, &[room.as_bytes(), node.as_bytes(), &e, &c])
            .await?;
        status(room, epoch, &r)
    }

    async fn check_epoch(&self, room: &str, epoch: Epoch) -> Result<(), DirectoryError> {
        validate::id("room", room)?;
        let (e, c) = epoch_arg(epoch)?;
        let r = self.run(&self.s.check, &[room.as_bytes(), &e, &c]).await?;
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
        let r = self
            .run(
                &self.s.pres_register,
                &[
                    entry.wallet.as_bytes(),
                    &num(u64::from(entry.entity)),
                    entry.room.as_bytes(),
                    &num(u64::from(entry.sources.bits())),
                    entry.node.as_bytes(),
                    &num(entry.profile_version),
                    &e,
                    &c,
                    &num(ttl_ms),
                ],
            )
            .await?;
        status(&entry.room, epoch, &r)
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
        let r = self
            .run(
                &self.s.pres_add,
                &[wallet.as_bytes(), &num(u64::from(source.bits())), &e, &c],
            )
            .await?;
        let room = if string(&r, 0)? == "stale" {
            string(&r, r.len() - 1)?
        } else {
            String::new()
        };
        status(&room, epoch, &r[..r.len().min(3)])
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
        let r = self
            .run(
                &self.s.pres_release,
                &[wallet.as_bytes(), &num(u64::from(source.bits())), &e, &c],
            )
            .await?;
        if string(&r, 0)? == "stale" {
            let room = string(&r, r.len() - 1)?;
            return status(&room, epoch, &r[..r.len().min(3)]).map(|()| false);
        }
        status("", epoch, &r)?;
        Ok(int(&r, 1)? == 1)
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
            .run(
                &self.s.pres_renew,
                &[node.as_bytes(), room.as_bytes(), &e, &c, &num(ttl_ms)],
            )
            .await?;
        status(room, epoch, &r)?;
        u32::try_from(int(&r, 1)?).map_err(|_| bad_reply("count"))
    }

    async fn presence_get(&self, wallet: &str) -> Result<Option<PresenceEntry>, DirectoryError> {
        validate::id("wallet", wallet)?;
        let r = self.run(&self.s.pres_get, &[wallet.as_bytes()]).await?;
        match string(&r, 0)?.as_str() {
            "ok" => entry(array(&r, 1)?).map(Some),
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
            .run(
                &self.s.pres_by_entity,
                &[room.as_bytes(), &num(u64::from(entity))],
            )
            .await?;
        match string(&r, 0)?.as_str() {
            "ok" => entry(array(&r, 1)?).map(Some),
            _ => Ok(None),
        }
    }

    async fn peers(&self, filter: Option<&[String]>) -> Result<Vec<PresenceEntry>, DirectoryError> {
        validate::peers_filter(filter)?;
        let mut args: Vec<&[u8]> = Vec::new();
        let mut ids: Vec<&String>;
        match filter {
            None => args.push(b"all"),
            Some(f) => {
                ids = f.iter().collect();
                ids.sort();
                ids.dedup();
                args.push(b"ids");
                args.extend(ids.iter().map(|s| s.as_bytes()));
            }
        }
        let r = self.run(&self.s.peers, &args).await?;
        let mut out = Vec::new();
        for e in array(&r, 1)? {
            let Value::Array(f) = e else {
                return Err(bad_reply("peer"));
            };
            out.push(entry(f)?);
        }
        out.sort_by(|a, b| a.wallet.cmp(&b.wallet));
        Ok(out)
    }

    async fn sweep(&self) -> Result<u32, DirectoryError> {
        let mut total = 0u32;
        loop {
            let r = self
                .run(
                    &self.s.sweep,
                    &[&num(u64::from(SWEEP_BATCH)), &num(PROFILE_ORPHAN_GRACE_MS)],
                )
                .await?;
            let removed = u32::try_from(int(&r, 1)?).map_err(|_| bad_reply("count"))?;
            total = total.saturating_add(removed);
            if int(&r, 2)? == 0 {
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
            .run(
                &self.s.announce,
                &[
                    wallet.as_bytes(),
                    &num(version),
                    &num(u64::from(source.bits())),
                ],
            )
            .await?;
        Ok(match string(&r, 0)?.as_str() {
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
        })
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
            .run(&self.s.audit_append, &[room.as_bytes(), &e, &c, &payload])
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
        let raw: Vec<Vec<u8>> = redis::cmd("LRANGE")
            .arg(format!("{}audit:{room}", self.prefix))
            .arg(start)
            .arg(stop)
            .query_async(&mut self.con.clone())
            .await
            .map_err(unavailable)?;
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
            .run(&self.s.put_handoff, &[room.as_bytes(), &e, &c, &state])
            .await?;
        status(room, epoch, &r)
    }

    async fn take_handoff(&self, room: &str) -> Result<Option<(Epoch, Vec<u8>)>, DirectoryError> {
        validate::id("room", room)?;
        let r = self.run(&self.s.take_handoff, &[room.as_bytes()]).await?;
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
        let ttl = ttl_ms.to_string();
        self.run(
            &self.s.put_resume,
            &[token.as_bytes(), &entry, ttl.as_bytes()],
        )
        .await?;
        Ok(())
    }

    async fn take_resume(&self, token: &str) -> Result<Option<Vec<u8>>, DirectoryError> {
        validate::id("resume token", token)?;
        let r = self.run(&self.s.take_resume, &[token.as_bytes()]).await?;
        match string(&r, 0)?.as_str() {
            "ok" => Ok(Some(bytes(&r, 1)?)),
            _ => Ok(None),
        }
    }

    async fn claim_once(&self, key: &str, ttl_ms: u64) -> Result<bool, DirectoryError> {
        validate::id("claim key", key)?;
        validate::ttl(ttl_ms)?;
        let ttl = ttl_ms.to_string();
        let r = self
            .run(&self.s.claim_once, &[key.as_bytes(), ttl.as_bytes()])
            .await?;
        Ok(string(&r, 0)? == "ok")
    }
}

// === Lua ===

/// The loaded scripts.
struct Scripts {
    register_node: Script,
    deregister_node: Script,
    live_nodes: Script,
    resolve: Script,
    claim: Script,
    renew: Script,
    release: Script,
    check: Script,
    pres_register: Script,
    pres_add: Script,
    pres_release: Script,
    pres_renew: Script,
    pres_get: Script,
    pres_by_entity: Script,
    peers: Script,
    sweep: Script,
    announce: Script,
    audit_append: Script,
    put_handoff: Script,
    take_handoff: Script,
    put_resume: Script,
    take_resume: Script,
    claim_once: Script,
}

impl Scripts {
    fn new() -> Self {
        let s = |body: &str| Script::new(&format!("{PRELUDE}\n{body}"));
        Self {
            register_node: s(REGISTER_NODE),
            deregister_node: s(DEREGISTER_NODE),
            live_nodes: s(LIVE_NODES),
            resolve: s(RESOLVE),
            claim: s(CLAIM),
            renew: s(RENEW),
            release: s(RELEASE),
            check: s(CHECK),
            pres_register: s(PRES_REGISTER),
            pres_add: s(PRES_ADD),
            pres_release: s(PRES_RELEASE),
            pres_renew: s(PRES_RENEW),
            pres_get: s(PRES_GET),
            pres_by_entity: s(PRES_BY_ENTITY),
            peers: s(PEERS),
            sweep: s(SWEEP),
            announce: s(ANNOUNCE),
            audit_append: s(AUDIT_APPEND),
            put_handoff: s(PUT_HANDOFF),
            take_handoff: s(TAKE_HANDOFF),
            put_resume: s(PUT_RESUME),
            take_resume: s(TAKE_RESUME),
            claim_once: s(CLAIM_ONCE),
        }
    }
}

/// Shared helpers; `ARGV[1]` is always the key prefix.
const PRELUDE: &str = r#"
local P = ARGV[1]
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function s(x) return string.format('%d', x) end
local function u32(x) if x < 0 then return x + 4294967296 end return x end
local function live_placement(room, now)
  local p = redis.call('HMGET', P .. 'place:' .. room, 'node', 'era', 'counter', 'until')
  if p[1] and tonumber(p[4]) > now then
    return p[1], tonumber(p[2]), tonumber(p[3]), tonumber(p[4])
  end
  return nil
end
local function check(room, era, counter, now)
  local node, e, c = live_placement(room, now)
  if not node then return nil, {'stale'} end
  if e ~= era or c ~= counter then return nil, {'stale', e, c} end
  return node, nil
end
local function remove_entry(w, drop_profile)
  local k = P .. 'p:' .. w
  local f = redis.call('HMGET', k, 'room', 'entity')
  if f[1] then
    local ek = P .. 'ents:' .. f[1]
    if redis.call('HGET', ek, f[2]) == w then redis.call('HDEL', ek, f[2]) end
    redis.call('SREM', P .. 'room:' .. f[1], w)
  end
  redis.call('DEL', k)
  redis.call('ZREM', P .. 'pres', w)
  if drop_profile then
    redis.call('DEL', P .. 'prof:' .. w)
    redis.call('ZREM', P .. 'profs', w)
  end
end
local function entry_reply(w, now)
  local f = redis.call('HMGET', P .. 'p:' .. w, 'entity', 'room', 'sources', 'node', 'pv', 'until')
  if not f[1] or tonumber(f[6]) <= now then return nil end
  return {w, tonumber(f[1]), f[2], tonumber(f[3]), f[4], tonumber(f[5]), tonumber(f[6])}
end
"#;

const REGISTER_NODE: &str = r#"
local now = now_ms()
local u = now + tonumber(ARGV[6])
redis.call('HSET', P .. 'node:' .. ARGV[2], 'addr', ARGV[3], 'load', ARGV[4], 'draining', ARGV[5], 'until', s(u))
redis.call('ZADD', P .. 'nodes', s(u), ARGV[2])
return {'ok'}
"#;

const DEREGISTER_NODE: &str = r#"
redis.call('DEL', P .. 'node:' .. ARGV[2])
redis.call('ZREM', P .. 'nodes', ARGV[2])
return {'ok'}
"#;

const LIVE_NODES: &str = r#"
local now = now_ms()
local out = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'nodes', '(' .. s(now), '+inf')) do
  local f = redis.call('HMGET', P .. 'node:' .. id, 'addr', 'load', 'draining', 'until')
  if f[1] and tonumber(f[4]) > now then
    table.insert(out, {id, f[1], tonumber(f[2]), tonumber(f[3]), tonumber(f[4])})
  end
end
return {'ok', out}
"#;

const RESOLVE: &str = r#"
local node, e, c, u = live_placement(ARGV[2], now_ms())
if not node then return {'none'} end
return {'ok', node, e, c, u}
"#;

const CLAIM: &str = r#"
local now = now_ms()
local room, node, ttl, min_era = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local seen_era = tonumber(ARGV[6])
local pk = P .. 'place:' .. room
local owner, e, c, u = live_placement(room, now)
if owner then
  if owner ~= node then return {'conflict', owner, e, c, u} end
  u = math.max(u, now + ttl)
  redis.call('HSET', pk, 'until', s(u))
  redis.call('ZADD', P .. 'places', s(u), room)
  return {'ok', node, e, c, u}
end
local ek = P .. 'epoch'
local f = redis.call('HMGET', ek, 'era', 'ctr')
if f[1] and tonumber(f[1]) >= seen_era then
  e = tonumber(f[1]); c = tonumber(f[2]) + 1
else
  e = math.max(now, min_era + 1); c = 1
end
redis.call('HSET', ek, 'era', s(e), 'ctr', s(c))
u = now + ttl
redis.call('HSET', pk, 'node', node, 'era', s(e), 'counter', s(c), 'until', s(u))
redis.call('ZADD', P .. 'places', s(u), room)
return {'ok', node, e, c, u}
"#;

const RENEW: &str = r#"
local now = now_ms()
local room, node = ARGV[2], ARGV[3]
local era, counter, ttl = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local owner, err = check(room, era, counter, now)
if err then return err end
if owner ~= node then return {'notowner'} end
local pk = P .. 'place:' .. room
local u = math.max(tonumber(redis.call('HGET', pk, 'until')), now + ttl)
redis.call('HSET', pk, 'until', s(u))
redis.call('ZADD', P .. 'places', s(u), room)
return {'ok', node, era, counter, u}
"#;

const RELEASE: &str = r#"
local now = now_ms()
local room, node = ARGV[2], ARGV[3]
local era, counter = tonumber(ARGV[4]), tonumber(ARGV[5])
local owner, e, c = live_placement(room, now)
if not owner then return {'ok'} end
if e ~= era or c ~= counter then return {'stale', e, c} end
if owner ~= node then return {'notowner'} end
redis.call('DEL', P .. 'place:' .. room)
redis.call('ZREM', P .. 'places', room)
return {'ok'}
"#;

const CHECK: &str = r#"
local _, err = check(ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), now_ms())
if err then return err end
return {'ok'}
"#;

const PRES_REGISTER: &str = r#"
local now = now_ms()
local w, ent, room, src, node, pv = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7])
local era, counter, ttl = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local owner, err = check(room, era, counter, now)
if err then return err end
if owner ~= node then return {'notowner'} end
local ek = P .. 'ents:' .. room
local other = redis.call('HGET', ek, ent)
if other and other ~= w then
  local o = redis.call('HMGET', P .. 'p:' .. other, 'until', 'eera', 'ecounter')
  if o[1] and tonumber(o[1]) > now then
    local oe, oc = tonumber(o[2]), tonumber(o[3])
    if oe > era or (oe == era and oc >= counter) then return {'conflict'} end
  end
  remove_entry(other, true)
end
if redis.call('EXISTS', P .. 'p:' .. w) == 1 then remove_entry(w, false) end
local known = redis.call('HGET', P .. 'prof:' .. w, 'version')
if known and tonumber(known) > pv then pv = tonumber(known) end
local u = now + ttl
redis.call('HSET', P .. 'p:' .. w, 'entity', ent, 'room', room, 'sources', src, 'node', node,
  'pv', s(pv), 'until', s(u), 'eera', s(era), 'ecounter', s(counter))
redis.call('HSET', ek, ent, w)
redis.call('SADD', P .. 'room:' .. room, w)
redis.call('ZADD', P .. 'pres', s(u), w)
return {'ok'}
"#;

const PRES_ADD: &str = r#"
local now = now_ms()
local w, src = ARGV[2], tonumber(ARGV[3])
local f = redis.call('HMGET', P .. 'p:' .. w, 'room', 'sources', 'until')
if not f[1] or tonumber(f[3]) <= now then return {'notfound'} end
local _, err = check(f[1], tonumber(ARGV[4]), tonumber(ARGV[5]), now)
if err then table.insert(err, f[1]); return err end
redis.call('HSET', P .. 'p:' .. w, 'sources', s(u32(bit.bor(tonumber(f[2]), src))))
return {'ok'}
"#;

const PRES_RELEASE: &str = r#"
local now = now_ms()
local w, src = ARGV[2], tonumber(ARGV[3])
local f = redis.call('HMGET', P .. 'p:' .. w, 'room', 'sources', 'until')
if not f[1] or tonumber(f[3]) <= now then return {'ok', 0} end
local _, err = check(f[1], tonumber(ARGV[4]), tonumber(ARGV[5]), now)
if err then table.insert(err, f[1]); return err end
local cur = tonumber(f[2])
if bit.band(cur, src) == 0 then return {'ok', 0} end
local after = u32(bit.band(cur, bit.bnot(src)))
if after == 0 then
  remove_entry(w, true)
  return {'ok', 1}
end
redis.call('HSET', P .. 'p:' .. w, 'sources', s(after))
return {'ok', 0}
"#;

const PRES_RENEW: &str = r#"
local now = now_ms()
local node, room = ARGV[2], ARGV[3]
local owner, err = check(room, tonumber(ARGV[4]), tonumber(ARGV[5]), now)
if err then return err end
if owner ~= node then return {'notowner'} end
local u = now + tonumber(ARGV[6])
local n = 0
for _, w in ipairs(redis.call('SMEMBERS', P .. 'room:' .. room)) do
  local k = P .. 'p:' .. w
  local f = redis.call('HMGET', k, 'node', 'until')
  if f[1] == node and tonumber(f[2]) > now then
    local nu = math.max(tonumber(f[2]), u)
    redis.call('HSET', k, 'until', s(nu))
    redis.call('ZADD', P .. 'pres', s(nu), w)
    n = n + 1
  end
end
return {'ok', n}
"#;

const PRES_GET: &str = r#"
local e = entry_reply(ARGV[2], now_ms())
if not e then return {'none'} end
return {'ok', e}
"#;

const PRES_BY_ENTITY: &str = r#"
local w = redis.call('HGET', P .. 'ents:' .. ARGV[2], ARGV[3])
if not w then return {'none'} end
local e = entry_reply(w, now_ms())
if not e then return {'none'} end
return {'ok', e}
"#;

const PEERS: &str = r#"
local now = now_ms()
local ids
if ARGV[2] == 'all' then
  ids = redis.call('ZRANGEBYSCORE', P .. 'pres', '(' .. s(now), '+inf')
else
  ids = {}
  for i = 3, #ARGV do table.insert(ids, ARGV[i]) end
end
local out = {}
for _, w in ipairs(ids) do
  local e = entry_reply(w, now)
  if e then table.insert(out, e) end
end
return {'ok', out}
"#;

const SWEEP: &str = r#"
local now = now_ms()
local b = tonumber(ARGV[2])
local grace = tonumber(ARGV[3])
local n, more = 0, 0
local ws = redis.call('ZRANGEBYSCORE', P .. 'pres', '-inf', s(now), 'LIMIT', 0, b)
if #ws >= b then more = 1 end
for _, w in ipairs(ws) do
  local u = redis.call('HGET', P .. 'p:' .. w, 'until')
  if (not u) or tonumber(u) <= now then
    remove_entry(w, true); n = n + 1
  else
    redis.call('ZADD', P .. 'pres', u, w)
  end
end
local rs = redis.call('ZRANGEBYSCORE', P .. 'places', '-inf', s(now), 'LIMIT', 0, b)
if #rs >= b then more = 1 end
for _, r in ipairs(rs) do
  local u = redis.call('HGET', P .. 'place:' .. r, 'until')
  if (not u) or tonumber(u) <= now then
    redis.call('DEL', P .. 'place:' .. r)
    redis.call('ZREM', P .. 'places', r)
    n = n + 1
  else
    redis.call('ZADD', P .. 'places', u, r)
  end
end
local ns = redis.call('ZRANGEBYSCORE', P .. 'nodes', '-inf', s(now), 'LIMIT', 0, b)
if #ns >= b then more = 1 end
for _, id in ipairs(ns) do
  local u = redis.call('HGET', P .. 'node:' .. id, 'until')
  if (not u) or tonumber(u) <= now then
    redis.call('DEL', P .. 'node:' .. id)
    redis.call('ZREM', P .. 'nodes', id)
    n = n + 1
  else
    redis.call('ZADD', P .. 'nodes', u, id)
  end
end
local ps = redis.call('ZRANGEBYSCORE', P .. 'profs', '-inf', '(' .. s(now - grace), 'LIMIT', 0, b)
if #ps >= b then more = 1 end
for _, w in ipairs(ps) do
  if redis.call('EXISTS', P .. 'p:' .. w) == 0 then
    redis.call('DEL', P .. 'prof:' .. w)
    redis.call('ZREM', P .. 'profs', w)
    n = n + 1
  else
    redis.call('ZADD', P .. 'profs', s(now), w)
  end
end
return {'ok', n, more}
"#;

const ANNOUNCE: &str = r#"
local now = now_ms()
local w, v, src = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local k = P .. 'prof:' .. w
local f = redis.call('HMGET', k, 'version', 'sources')
local out
if not f[1] then
  redis.call('HSET', k, 'version', s(v), 'sources', s(src), 'at', s(now))
  out = {'fresh'}
elseif v > tonumber(f[1]) then
  redis.call('HSET', k, 'version', s(v), 'sources', s(src), 'at', s(now))
  out = {'superseded', tonumber(f[1])}
elseif v == tonumber(f[1]) then
  local m = u32(bit.bor(tonumber(f[2]), src))
  redis.call('HSET', k, 'sources', s(m), 'at', s(now))
  out = {'merged', m}
else
  return {'dropped', tonumber(f[1])}
end
redis.call('ZADD', P .. 'profs', s(now), w)
if out[1] ~= 'merged' then
  local pk = P .. 'p:' .. w
  local pv = redis.call('HGET', pk, 'pv')
  if pv and tonumber(pv) < v then redis.call('HSET', pk, 'pv', s(v)) end
end
return out
"#;

const AUDIT_APPEND: &str = r#"
local _, err = check(ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), now_ms())
if err then return err end
local n = redis.call('RPUSH', P .. 'audit:' .. ARGV[2], ARGV[5])
return {'ok', n}
"#;

const PUT_HANDOFF: &str = r#"
local _, err = check(ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), now_ms())
if err then return err end
redis.call('HSET', P .. 'handoff:' .. ARGV[2], 'era', ARGV[3], 'counter', ARGV[4], 'state', ARGV[5])
return {'ok'}
"#;

/// ARGV: prefix, token, entry, ttl ms. Redis expires the key (server time).
const PUT_RESUME: &str = r#"
redis.call('SET', P .. 'resume:' .. ARGV[2], ARGV[3], 'PX', tonumber(ARGV[4]))
return {'ok'}
"#;

/// ARGV: prefix, token. Taken once.
const TAKE_RESUME: &str = r#"
local k = P .. 'resume:' .. ARGV[2]
local v = redis.call('GET', k)
if not v then return {'none'} end
redis.call('DEL', k)
return {'ok', v}
"#;

/// ARGV: prefix, key, ttl ms. `SET NX PX`: the first claim wins; Redis expires the key.
const CLAIM_ONCE: &str = r#"
local ok = redis.call('SET', P .. 'once:' .. ARGV[2], '1', 'NX', 'PX', tonumber(ARGV[3]))
if ok then return {'ok'} end
return {'taken'}
"#;

const TAKE_HANDOFF: &str = r#"
local k = P .. 'handoff:' .. ARGV[2]
local f = redis.call('HMGET', k, 'era', 'counter', 'state')
if not f[1] then return {'none'} end
redis.call('DEL', k)
return {'ok', tonumber(f[1]), tonumber(f[2]), f[3]}
"#;
