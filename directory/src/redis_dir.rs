//! [`RedisDirectory`]: the cluster backend on Redis — one server, a Redis Cluster, or a
//! Sentinel-managed primary.
//!
//! Every read-check-write runs as one Lua script (`directory/src/redis/scripts/*.lua`,
//! `redis::Script`: EVALSHA with automatic reload after a Redis restart), and **every script
//! touches the keys of one hash slot only**: a room's lease, epoch history, members, audit log
//! and handoff state share the hash tag `{r:ROOM}`; a wallet's room pointer and profile
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
//! activation's presence deadline. One renewal per room per period ([`crate::Directory::renew_room`]:
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
//! - The consent audit log and handoff states are only as durable as Redis persistence:
//!   run with AOF (`appendonly yes`, `appendfsync everysec` or `always`) for G3. Leases and
//!   presence need no persistence (they are rebuilt by renewals within one lease TTL).
//! - Someone must call [`crate::Directory::sweep`] periodically (e.g. [`crate::Sweeper`] on every
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
//!
//! # Files
//! - `connect`: options, the URL forms and the connection (one server, Cluster, Sentinel).
//! - `keys`: the key of every record (hash tags, one slot per script).
//! - `scripts`: the Lua scripts (`directory/src/redis/scripts/*.lua`) and how they are invoked.
//! - `reply`: parsing script replies and encoding their arguments.
//! - `sweep`: the sweep index and one sweep step.
//! - `contract`: `impl Directory for RedisDirectory`, one script sequence per operation.

mod connect;
mod contract;
mod keys;
mod reply;
mod scripts;
mod sweep;

use connect::Backend;
pub use connect::{RedisOptions, RedisTarget, RedisTls};
use scripts::Scripts;

use crate::era::EraFloor;

/// Largest integer the Lua scripts (doubles) represent exactly.
const LUA_MAX_INT: u64 = (1 << 53) - 1;

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
