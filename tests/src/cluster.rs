//! A multi-process Plaza cluster on loopback for whole-system fault tests: a real `redis-server`
//! ([`RedisServer`]), `plaza node` processes and a `plaza gateway` process, each with its own
//! admin port, log file and (nodes) event log; plus [`check_single_activation`], which reads
//! the nodes' event logs after a run.
//!
//! The `plaza` binary belongs to another package (`plaza-ops`), so `CARGO_BIN_EXE_plaza` is not
//! set for these tests. [`plaza_bin`] builds it once per test process with the `cargo` that runs
//! the tests (`$CARGO test --workspace --no-run --test ops`, which builds the bin for one of
//! plaza-ops's own tests with the test run's features: a no-op when it is up to date; with
//! `--release` when the tests are built in release) and uses `<target dir>/{debug,release}/plaza`;
//! `PLAZA_BIN` overrides the path. This works on a clean checkout
//! with `cargo test --workspace` or `cargo test -p plaza-tests`.
//!
//! It does not restart crashed processes or judge results; tests do. Every wait is a bounded
//! poll. Processes are killed (SIGKILL) when their handle drops.
//!
//! The whole-system tests are one binary (`tests/tests/system`), so tests of different files
//! run at once. A [`Cluster`] holds one of [`CLUSTERS_AT_ONCE`] process-wide slots while it
//! lives ([`ClusterOpts::alone`]: all of them), whatever `--test-threads` is: the clusters of
//! one process take turns.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use plaza_directory::test_util::{RedisCluster, RedisServer};
use plaza_directory::{RedisDirectory, RedisOptions, SharedDirectory};
use plaza_load::LoadConfig;

use crate::http_get;

mod verdict;

pub use verdict::{
    ActivationSummary, assert_fault_held, assert_nothing_lost, check_single_activation,
};

/// The `plaza` binary, built on first use (see the module docs).
pub fn plaza_bin() -> Result<PathBuf, String> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("PLAZA_BIN") {
            return Ok(PathBuf::from(p));
        }
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        let workspace = manifest.parent().ok_or("no workspace dir")?;
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        // Same profile as the tests themselves (`cargo test --release` → a release `plaza`),
        // and the same feature unification as `cargo test --workspace`: building the bin as a
        // dependency of one of plaza-ops's own integration tests with `--workspace` reuses what
        // the test run already compiled (a no-op under `cargo test --workspace`), where a
        // `cargo build -p plaza-ops` would resolve other features (no dev-dependencies: tokio
        // without `test-util`, …) and rebuild most of the dependency graph a second time.
        let release = !cfg!(debug_assertions);
        let mut args = vec!["test", "-q", "--workspace", "--no-run", "--test", "ops"];
        if release {
            args.push("--release");
        }
        let out = Command::new(cargo)
            .args(&args)
            .current_dir(workspace)
            .output()
            .map_err(|e| format!("run cargo build: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cargo test --no-run --test ops (to build plaza) failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace.join("target"));
        let bin = target
            .join(if release { "release" } else { "debug" })
            .join("plaza");
        if bin.exists() {
            Ok(bin)
        } else {
            Err(format!("{} not found after the build", bin.display()))
        }
    })
    .clone()
}

/// How many [`Cluster`]s one test process runs at once. Each is Redis, 3 nodes, a gateway and
/// usually 60 load bots, and a starved process misses leases and pings (the fault tests assert
/// ping RTT p99 < 1 s and moves within lease TTL + 5 s), which is not the fault tested. One: in
/// a run of the former per-file binaries on the shared 2-core machine (load average 15), the
/// files whose two cluster tests ran at once (`cluster_drain`, `cluster_gateway`) failed those
/// bounds while the one-cluster files passed. Other tests still run beside a cluster.
pub const CLUSTERS_AT_ONCE: u32 = 1;

static CLUSTER_SLOTS: tokio::sync::Semaphore =
    tokio::sync::Semaphore::const_new(CLUSTERS_AT_ONCE as usize);

/// Waits for a cluster slot (every slot when `alone`), bounded: a test holds one cluster at a
/// time, so a wait longer than the longest cluster test means something hangs.
async fn cluster_slot(alone: bool) -> anyhow::Result<tokio::sync::SemaphorePermit<'static>> {
    let n = if alone { CLUSTERS_AT_ONCE } else { 1 };
    let within = Duration::from_secs(900);
    tokio::time::timeout(within, CLUSTER_SLOTS.acquire_many(n))
        .await
        .map_err(|_| anyhow::anyhow!("no cluster slot free within {within:?}"))?
        .map_err(anyhow::Error::from)
}

/// A free loopback port (bound then released; a race with other processes is possible but
/// unlikely, and a failed start is reported).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral loopback port")
}

/// Timing knobs of a test cluster.
///
/// [`ClusterOpts::default`] is the shipped configuration (`ops/plaza.example.toml`: lease TTL
/// 10 s, presence TTL 15 s, sweep 5 s, empty grace 10 s), passed to the processes as nothing at
/// all: no environment override is set for a value equal to its shipped default, so the fault
/// tests run what users run. [`ClusterOpts::fast`] shortens the timings for extra fast variants.
#[derive(Clone, Debug)]
pub struct ClusterOpts {
    /// Room nodes to start.
    pub nodes: usize,
    /// Gateways to start (default 1): [`Cluster::gateway`] and [`Cluster::more_gateways`].
    pub gateways: usize,
    /// Placement lease TTL (also the node heartbeat TTL), ms.
    pub lease_ttl_ms: u64,
    /// Presence lease TTL, ms.
    pub presence_ttl_ms: u64,
    /// Directory sweep period of every process, ms.
    pub sweep_interval_ms: u64,
    /// How long an empty room lives, ms.
    pub empty_grace_ms: u64,
    /// Log filter of the processes.
    pub log: String,
    /// More environment variables of every process (`PLAZA__SECTION__KEY` settings).
    pub env: Vec<(String, String)>,
    /// The directory: one `redis-server` (`None`, the default) or a Redis Cluster of
    /// `(masters, replicas per master)` started on loopback
    /// ([`plaza_directory::test_util::RedisCluster`]) that every process reaches by
    /// `redis+cluster://` seed URL. Only the Redis side differs (its short
    /// `cluster-node-timeout` is Redis's own configuration); Plaza runs its shipped defaults.
    pub redis_cluster: Option<(usize, usize)>,
    /// Run with no other [`Cluster`] of this test process beside it (takes every one of the
    /// [`CLUSTERS_AT_ONCE`] slots): for a test whose bound is a latency under load (the join
    /// burst's 200 bots).
    pub alone: bool,
}

/// The shipped defaults of the timing knobs (`ops/plaza.example.toml`).
const SHIPPED: ClusterOpts = ClusterOpts {
    nodes: 3,
    gateways: 1,
    lease_ttl_ms: 10_000,
    presence_ttl_ms: 15_000,
    sweep_interval_ms: 5_000,
    empty_grace_ms: 10_000,
    log: String::new(),
    env: Vec::new(),
    redis_cluster: None,
    alone: false,
};

impl Default for ClusterOpts {
    fn default() -> Self {
        Self {
            log: "info".into(),
            ..SHIPPED
        }
    }
}

impl ClusterOpts {
    /// Shortened timings (lease 2 s, presence 3 s, sweep 1 s, empty grace 2 s) for fast extra
    /// variants of the fault tests; never instead of the defaults.
    pub fn fast() -> Self {
        Self {
            nodes: 3,
            gateways: 1,
            lease_ttl_ms: 2_000,
            presence_ttl_ms: 3_000,
            sweep_interval_ms: 1_000,
            empty_grace_ms: 2_000,
            log: "info".into(),
            env: Vec::new(),
            redis_cluster: None,
            alone: false,
        }
    }
}

/// One `plaza` child process.
#[derive(Debug)]
pub struct Proc {
    child: Child,
    /// `n1`, `n2`, … for nodes, `gw` for the gateway.
    pub name: String,
    /// Its admin address.
    pub admin: SocketAddr,
    /// The gateway's client address (gateway only).
    pub ws: Option<SocketAddr>,
    /// Its stdout/stderr.
    pub log: PathBuf,
    /// Its event log (nodes only).
    pub event_log: Option<PathBuf>,
    /// It runs under a wrapper (`faketime` forks the node and waits for it) in a process group
    /// of its own: signals go to the group, so a kill reaches the node, not only the wrapper.
    group: bool,
}

impl Proc {
    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL (the whole group of a wrapped node), and reap it.
    pub fn kill9(&mut self) {
        if self.group {
            let _ = self.signal("KILL");
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM (an orderly stop; a node drains first).
    pub fn sigterm(&self) -> Result<(), String> {
        self.signal("TERM")
    }

    /// Sends signal `sig` (`TERM`, `STOP`, `CONT`, …) with `kill -SIG` (to the process group
    /// of a wrapped node).
    pub fn signal(&self, sig: &str) -> Result<(), String> {
        if self.group {
            signal_target(&format!("-{}", self.child.id()), sig)
        } else {
            signal_pid(self.child.id(), sig)
        }
    }

    /// Waits (bounded) for the process to exit.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The last `n` lines of its log (for failure messages).
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The directory's Redis of a test [`Cluster`]: one server or a Redis Cluster.
#[derive(Debug)]
pub enum TestRedis {
    /// One `redis-server` (the default).
    Single(RedisServer),
    /// A Redis Cluster on loopback ([`ClusterOpts::redis_cluster`]).
    Cluster(RedisCluster),
}

impl From<RedisServer> for TestRedis {
    fn from(s: RedisServer) -> Self {
        Self::Single(s)
    }
}

impl TestRedis {
    fn start(cluster: Option<(usize, usize)>) -> Result<Self, String> {
        match cluster {
            None => RedisServer::start().map(Self::Single),
            Some((masters, replicas)) => RedisCluster::start(masters, replicas).map(Self::Cluster),
        }
    }

    /// The URL every process is given: `redis://127.0.0.1:PORT/`, or
    /// `redis+cluster://127.0.0.1:P1,…` with every cluster node as a seed.
    pub fn url(&self) -> String {
        match self {
            Self::Single(s) => s.url(),
            Self::Cluster(c) => c.url(),
        }
    }

    /// The single server's port. Panics on a Redis Cluster (use [`Self::cluster`]).
    pub fn port(&self) -> u16 {
        self.single().port()
    }

    /// Kills the single server and starts it again empty (a Redis restart that lost its
    /// data). Panics on a Redis Cluster.
    pub fn restart_empty(&mut self) -> Result<(), String> {
        match self {
            Self::Single(s) => s.restart_empty(),
            Self::Cluster(_) => panic!("restart_empty: this harness runs a Redis Cluster"),
        }
    }

    /// The single server. Panics on a Redis Cluster.
    pub fn single(&self) -> &RedisServer {
        match self {
            Self::Single(s) => s,
            Self::Cluster(_) => panic!("this harness runs a Redis Cluster, not one server"),
        }
    }

    /// The Redis Cluster, if the harness runs one.
    pub fn cluster(&mut self) -> Option<&mut RedisCluster> {
        match self {
            Self::Single(_) => None,
            Self::Cluster(c) => Some(c),
        }
    }
}

/// Redis + nodes + gateways, as separate processes.
pub struct Cluster {
    /// The directory's Redis (restart a single server empty with `redis.restart_empty()`).
    pub redis: TestRedis,
    /// Node processes, in start order.
    pub nodes: Vec<Proc>,
    /// The (first) gateway process, `gw`.
    pub gateway: Proc,
    /// Further gateways (`gw2`, `gw3`, …) when [`ClusterOpts::gateways`] > 1.
    pub more_gateways: Vec<Proc>,
    /// A directory client of the test itself.
    pub directory: SharedDirectory,
    /// Where logs go.
    pub dir: PathBuf,
    opts: ClusterOpts,
    /// Last, so it is given back after every process above is killed.
    _slot: tokio::sync::SemaphorePermit<'static>,
}

impl Cluster {
    /// Starts Redis, `opts.nodes` nodes and `opts.gateways` gateways, and waits until every
    /// node is registered and every gateway is ready.
    pub async fn start(opts: ClusterOpts) -> anyhow::Result<Self> {
        let cluster = opts.redis_cluster;
        let redis = tokio::task::spawn_blocking(move || TestRedis::start(cluster))
            .await?
            .map_err(anyhow::Error::msg)?;
        Self::start_on(opts, redis, RedisOptions::default()).await
    }

    /// [`Cluster::start`] on a Redis the caller started (e.g. [`RedisServer::start_tls`], or a
    /// [`TestRedis`]); the test's own directory client connects with `dir_opts` (e.g. its TLS
    /// CA). The processes reach it at `redis.url()`; settings they need for it
    /// (`directory.redis_ca`) go in `opts.env`.
    pub async fn start_on(
        opts: ClusterOpts,
        redis: impl Into<TestRedis>,
        dir_opts: RedisOptions,
    ) -> anyhow::Result<Self> {
        let redis: TestRedis = redis.into();
        let slot = cluster_slot(opts.alone).await?;
        let bin = plaza_bin().map_err(anyhow::Error::msg)?;
        let dir = std::env::temp_dir().join(format!(
            "plaza-cluster-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir)?;
        let directory: SharedDirectory =
            Arc::new(RedisDirectory::connect_with(&redis.url(), now_ms(), dir_opts).await?);
        let gateway = spawn_ready(&bin, &opts, &redis.url(), &dir, "gw", Role::Gateway).await?;
        let mut more_gateways = Vec::new();
        for i in 2..=opts.gateways {
            let name = format!("gw{i}");
            more_gateways
                .push(spawn_ready(&bin, &opts, &redis.url(), &dir, &name, Role::Gateway).await?);
        }
        let mut c = Self {
            redis,
            nodes: Vec::new(),
            gateway,
            more_gateways,
            directory,
            dir,
            opts,
            _slot: slot,
        };
        for _ in 0..c.opts.nodes {
            c.start_node().await?;
        }
        for g in std::iter::once(&c.gateway).chain(&c.more_gateways) {
            wait_ready(g).await?;
        }
        Ok(c)
    }

    /// Every gateway, the first one first.
    pub fn gateways(&self) -> impl Iterator<Item = &Proc> {
        std::iter::once(&self.gateway).chain(&self.more_gateways)
    }

    /// Every gateway's WebSocket URL, the first one first.
    pub fn ws_urls(&self) -> Vec<String> {
        self.gateways()
            .map(|g| {
                format!(
                    "ws://{}/v1/ws",
                    g.ws.expect("a gateway has a client address")
                )
            })
            .collect()
    }

    /// Starts one more node; returns its index in [`Cluster::nodes`].
    pub async fn start_node(&mut self) -> anyhow::Result<usize> {
        let url = self.redis.url();
        self.start_node_via(&url).await
    }

    /// Starts one more node that reaches Redis at `redis_url` (e.g. through a
    /// [`crate::blackhole::Blackhole`]); returns its index in [`Cluster::nodes`].
    pub async fn start_node_via(&mut self, redis_url: &str) -> anyhow::Result<usize> {
        self.start_node_with(NodeSpawn {
            redis_url: Some(redis_url.to_owned()),
            ..NodeSpawn::default()
        })
        .await
    }

    /// Starts one more node as `how` says (its Redis URL, a fixed gRPC listen address and an
    /// advertised one, extra environment, a wrapper command such as `faketime`); returns its
    /// index in [`Cluster::nodes`].
    pub async fn start_node_with(&mut self, how: NodeSpawn) -> anyhow::Result<usize> {
        let bin = plaza_bin().map_err(anyhow::Error::msg)?;
        let name = format!("n{}", self.nodes.len() + 1);
        let redis_url = how.redis_url.clone().unwrap_or_else(|| self.redis.url());
        let mut opts = self.opts.clone();
        opts.env.extend(how.env.iter().cloned());
        let p =
            spawn_ready_with(&bin, &opts, &redis_url, &self.dir, &name, Role::Node, &how).await?;
        let prefix = format!("{name}.");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let live = self.directory.live_nodes().await.unwrap_or_default();
            if live.iter().any(|n| n.id.starts_with(&prefix)) {
                break;
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "node {name} never registered:\n{}",
                p.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.nodes.push(p);
        Ok(self.nodes.len() - 1)
    }

    /// Starts one more gateway named `name` with `env` on top of the cluster's settings (e.g.
    /// another TLS setting), waits until it is ready and returns it; it is not one of
    /// [`Cluster::gateways`] (the caller owns it: dropping it kills it).
    pub async fn spawn_gateway(
        &self,
        name: &str,
        env: Vec<(String, String)>,
    ) -> anyhow::Result<Proc> {
        let bin = plaza_bin().map_err(anyhow::Error::msg)?;
        let mut opts = self.opts.clone();
        opts.env.extend(env);
        let p = spawn_ready(
            &bin,
            &opts,
            &self.redis.url(),
            &self.dir,
            name,
            Role::Gateway,
        )
        .await?;
        wait_ready(&p).await?;
        Ok(p)
    }

    /// The gateway's WebSocket URL.
    pub fn ws_url(&self) -> String {
        format!(
            "ws://{}/v1/ws",
            self.gateway.ws.expect("the gateway has a client address")
        )
    }

    /// The timing knobs.
    pub fn opts(&self) -> &ClusterOpts {
        &self.opts
    }

    /// Every node's event log.
    pub fn event_logs(&self) -> Vec<PathBuf> {
        self.nodes
            .iter()
            .filter_map(|n| n.event_log.clone())
            .collect()
    }

    /// The index in [`Cluster::nodes`] of the process that registered as `node_id`.
    pub fn node_index(&self, node_id: &str) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| node_id.starts_with(&format!("{}.", n.name)))
    }

    /// Room → registered node id, for the rooms that have a live placement.
    pub async fn placements(&self, rooms: &[String]) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for r in rooms {
            // A few tries: the first command after a Redis restart fails on the old connection.
            for _ in 0..3 {
                match self.directory.resolve(r).await {
                    Ok(Some(p)) => {
                        out.insert(r.clone(), p.node);
                        break;
                    }
                    Ok(None) => break,
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        }
        out
    }

    /// A load run against the gateway: `bots` bots over rooms `<prefix>0..rooms-1` for `secs`.
    /// Sizes can be raised with `PLAZA_CLUSTER_BOTS`, `PLAZA_CLUSTER_ROOMS` and
    /// `PLAZA_CLUSTER_SECS` (`scripts/cluster-soak.sh` runs the 300 bots / 6 rooms).
    pub fn load_config(&self, bots: usize, rooms: usize, prefix: &str, secs: u64) -> LoadConfig {
        let env = |k: &str, d: u64| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d)
        };
        let mut urls = self.ws_urls().into_iter();
        let mut cfg = LoadConfig::new(
            urls.next().expect("the first gateway"),
            env("PLAZA_CLUSTER_BOTS", bots as u64) as usize,
        );
        // Bots spread over every gateway and come back through the next one.
        cfg.more_gateways = urls.collect();
        cfg.rooms = env("PLAZA_CLUSTER_ROOMS", rooms as u64) as usize;
        cfg.room_prefix = prefix.to_owned();
        cfg.duration = Duration::from_secs(env("PLAZA_CLUSTER_SECS", secs));
        cfg.ramp = Some(Duration::from_secs(2));
        cfg
    }

    /// Presence entries per registered node id (from the directory).
    pub async fn presence_by_node(&self) -> anyhow::Result<BTreeMap<String, usize>> {
        let mut out = BTreeMap::new();
        for e in self.directory.peers(None).await? {
            *out.entry(e.node).or_insert(0) += 1;
        }
        Ok(out)
    }

    /// Waits (at most 30 s) until the gateway's `GET /v1/peers` lists `bots` users; panics
    /// with the count reached otherwise.
    pub async fn wait_all_online(&self, bots: usize) {
        let online = wait_until(Duration::from_secs(30), || async {
            self.peers_count().await.unwrap_or(0) == bots
        })
        .await;
        assert!(
            online.is_some(),
            "bots never all online: {} of {bots}",
            self.peers_count().await.unwrap_or(0)
        );
    }

    /// A client joined to a room that node `idx` hosts: joins `{prefix}probe-0`, `-1`, … (at
    /// most 40) until one is placed there; returns the client, the room and its entity.
    pub async fn probe_on_node(&self, idx: usize, prefix: &str) -> (crate::Client, String, u32) {
        let victim_prefix = format!("{}.", self.nodes[idx].name);
        let url = self.ws_url();
        for i in 0..40 {
            let room = format!("{prefix}probe-{i}");
            let mut probe = crate::Client::connect(&url).await.expect("connect");
            let entity = probe.join(&room).await.expect("join");
            let placed = self.placements(std::slice::from_ref(&room)).await;
            if placed
                .get(&room)
                .is_some_and(|n| n.starts_with(&victim_prefix))
            {
                return (probe, room, entity);
            }
            probe.close().await;
        }
        panic!("no room of 40 landed on node {}", self.nodes[idx].name);
    }

    /// Asserts that presence empties (`/v1/peers` lists no one) within `within` (a lease TTL
    /// plus a sweep interval once every client left); returns how long it took.
    pub async fn assert_presence_empties(&self, within: Duration) -> Duration {
        let empty = wait_until(within, || async {
            self.peers_count().await.ok() == Some(0)
        })
        .await;
        match empty {
            Some(d) => d,
            None => panic!(
                "/v1/peers not empty after {within:?}: {} left",
                self.peers_count().await.unwrap_or(usize::MAX)
            ),
        }
    }

    /// Online users as the gateway's `GET /v1/peers` lists them (the number of entries).
    pub async fn peers_count(&self) -> anyhow::Result<usize> {
        let (status, body) = http_get(self.gateway.admin, "/v1/peers").await?;
        anyhow::ensure!(status == 200, "/v1/peers answered {status}: {body}");
        Ok(body.matches("\"address\":").count())
    }
}

/// Sends one inline command (`FLUSHALL`, `INFO server`, …) to the Redis server on loopback
/// `port` on a fresh connection and returns its reply as text (bounded: 5 s).
pub async fn redis_command(port: u16, command: &str) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let io = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        s.write_all(format!("{command}\r\n").as_bytes()).await?;
        let mut buf = vec![0u8; 16 * 1024];
        let n = s.read(&mut buf).await?;
        anyhow::Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(5), io)
        .await
        .map_err(|_| anyhow::anyhow!("redis {command:?}: no answer within 5 s"))?
}

/// The process id of the Redis server on loopback `port` (from `INFO server`), for
/// SIGSTOP / SIGCONT.
pub async fn redis_pid(port: u16) -> anyhow::Result<u32> {
    let info = redis_command(port, "INFO server").await?;
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no process_id in INFO server: {info:?}"))
}

/// Sends signal `sig` (`STOP`, `CONT`, …) to process `pid` with `kill -SIG`.
pub fn signal_pid(pid: u32, sig: &str) -> Result<(), String> {
    signal_target(&pid.to_string(), sig)
}

/// `kill -SIG -- target` (a pid, or `-pgid` for a process group).
fn signal_target(target: &str, sig: &str) -> Result<(), String> {
    let st = Command::new("kill")
        .args([&format!("-{sig}"), "--", target])
        .status()
        .map_err(|e| format!("kill -{sig}: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("kill -{sig} {target} exited with {st}"))
    }
}

/// Waits (at most 30 s) until `p` answers `GET /readyz` with 200.
async fn wait_ready(p: &Proc) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok((200, _)) = http_get(p.admin, "/readyz").await {
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "{} never became ready:\n{}",
            p.name,
            p.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// [`spawn`], retried (3 tries, fresh ports) when the process exits at once — e.g. a port
/// [`free_port`] handed out was taken by a concurrent test before the process bound it. A
/// node is waited for until ready; a gateway only until it is running (it is ready once a node
/// is registered).
async fn spawn_ready(
    bin: &Path,
    opts: &ClusterOpts,
    redis: &str,
    dir: &Path,
    name: &str,
    role: Role,
) -> anyhow::Result<Proc> {
    spawn_ready_with(bin, opts, redis, dir, name, role, &NodeSpawn::default()).await
}

/// [`spawn_ready`] with the extras of `how`.
async fn spawn_ready_with(
    bin: &Path,
    opts: &ClusterOpts,
    redis: &str,
    dir: &Path,
    name: &str,
    role: Role,
    how: &NodeSpawn,
) -> anyhow::Result<Proc> {
    let mut last = None;
    for _ in 0..3 {
        let mut p = spawn_with(bin, opts, redis, dir, name, role, how)?;
        let ready = match role {
            Role::Node => wait_ready(&p).await,
            Role::Gateway => match p.wait_exit(Duration::from_millis(500)).await {
                None => Ok(()),
                Some(st) => Err(anyhow::anyhow!(
                    "{name} exited with {st}:\n{}",
                    p.log_tail(30)
                )),
            },
        };
        match ready {
            Ok(()) => return Ok(p),
            Err(e) if p.wait_exit(Duration::from_millis(1)).await.is_some() => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("{name} did not start")))
}

/// The role of a process started with [`spawn`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `plaza node --listen 127.0.0.1:0 --node-id NAME --event-log DIR/NAME.events`.
    Node,
    /// `plaza gateway --listen 127.0.0.1:FREE`.
    Gateway,
}

/// Starts one `plaza` process of `role` against `redis` (a URL; nothing needs to listen there
/// yet) with its admin on a free port and its output in `dir/NAME.log`; does not wait for it.
/// Only the knobs of `opts` that differ from the shipped defaults are set.
pub fn spawn(
    bin: &Path,
    opts: &ClusterOpts,
    redis: &str,
    dir: &Path,
    name: &str,
    role: Role,
) -> anyhow::Result<Proc> {
    spawn_with(bin, opts, redis, dir, name, role, &NodeSpawn::default())
}

/// How [`Cluster::start_node_with`] starts a node, beyond the cluster's [`ClusterOpts`].
#[derive(Clone, Debug, Default)]
pub struct NodeSpawn {
    /// Redis URL (default: the cluster's Redis).
    pub redis_url: Option<String>,
    /// The node's gRPC listen address (default `127.0.0.1:0`).
    pub listen: Option<SocketAddr>,
    /// The gRPC address the node registers for gateways to dial (`node.advertise`; default:
    /// the bound listen address), e.g. a proxy in front of it.
    pub advertise: Option<String>,
    /// More environment variables of this node only.
    pub env: Vec<(String, String)>,
    /// A command the node runs under, e.g. `["faketime", "-f", "+2s"]`.
    pub wrapper: Vec<String>,
}

/// [`spawn`] with the extras of `how` (nodes only; a gateway ignores them).
fn spawn_with(
    bin: &Path,
    opts: &ClusterOpts,
    redis: &str,
    dir: &Path,
    name: &str,
    role: Role,
    how: &NodeSpawn,
) -> anyhow::Result<Proc> {
    let admin: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let log = dir.join(format!("{name}.log"));
    let out = std::fs::File::create(&log)?;
    let err = out.try_clone()?;
    let group = role == Role::Node && !how.wrapper.is_empty();
    let mut cmd = match (role, how.wrapper.split_first()) {
        (Role::Node, Some((first, rest))) => {
            let mut c = Command::new(first);
            c.args(rest).arg(bin);
            std::os::unix::process::CommandExt::process_group(&mut c, 0);
            c
        }
        _ => Command::new(bin),
    };
    let (ws, event_log) = match role {
        Role::Node => {
            let ev = dir.join(format!("{name}.events"));
            let listen = how
                .listen
                .map_or_else(|| "127.0.0.1:0".to_owned(), |a| a.to_string());
            if let Some(adv) = &how.advertise {
                cmd.env("PLAZA__NODE__ADVERTISE", adv);
            }
            cmd.args(["node", "--listen", &listen, "--node-id", name])
                .arg("--event-log")
                .arg(&ev);
            (None, Some(ev))
        }
        Role::Gateway => {
            let ws: SocketAddr = ([127, 0, 0, 1], free_port()).into();
            cmd.args(["gateway", "--listen", &ws.to_string()]);
            (Some(ws), None)
        }
    };
    cmd.args(["--redis", redis, "--admin-listen", &admin.to_string()]);
    // Only what differs from the shipped defaults is overridden.
    let overrides = [
        (
            "PLAZA__NODE__LEASE_TTL_MS",
            opts.lease_ttl_ms,
            SHIPPED.lease_ttl_ms,
        ),
        (
            "PLAZA__NODE__HEARTBEAT_TTL_MS",
            opts.lease_ttl_ms,
            SHIPPED.lease_ttl_ms,
        ),
        (
            "PLAZA__ROOM__PRESENCE_TTL_MS",
            opts.presence_ttl_ms,
            SHIPPED.presence_ttl_ms,
        ),
        (
            "PLAZA__DIRECTORY__SWEEP_INTERVAL_MS",
            opts.sweep_interval_ms,
            SHIPPED.sweep_interval_ms,
        ),
        (
            "PLAZA__ROOM__EMPTY_GRACE_MS",
            opts.empty_grace_ms,
            SHIPPED.empty_grace_ms,
        ),
    ];
    for (key, value, shipped) in overrides {
        if value != shipped {
            cmd.env(key, value.to_string());
        }
    }
    // Every bot of a test runs on this one host (127.0.0.1): the gateway's per-address edge
    // caps (pre-auth sockets, join rate), which stand for one client host each in production,
    // would refuse most of a 60-bot ramp. They are raised here; `tests/tests/system/edge_limits.rs`
    // tests them at their shipped values.
    if role == Role::Gateway {
        for (key, value) in [
            ("PLAZA__GATEWAY__MAX_PREAUTH_PER_IP", "100000"),
            ("PLAZA__GATEWAY__MAX_SESSIONS_PER_IP", "100000"),
            ("PLAZA__GATEWAY__JOINS_PER_IP_PER_S", "100000"),
            ("PLAZA__GATEWAY__JOINS_PER_IP_BURST", "100000"),
            // Bots are guests; a `plaza gateway` accepts none by default (`opts.env` may set
            // another mode).
            ("PLAZA__AUTH__MODE", "guest"),
        ] {
            cmd.env(key, value);
        }
    }
    for (key, value) in &opts.env {
        cmd.env(key, value);
    }
    cmd.env("PLAZA__LOG__LEVEL", &opts.log)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    let child = cmd.spawn()?;
    Ok(Proc {
        child,
        name: name.to_owned(),
        admin,
        ws,
        log,
        event_log,
        group,
    })
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Polls the async condition `f` every 50 ms until it holds or `timeout` passes; returns how
/// long it took, or `None` on timeout.
pub async fn wait_until<F, Fut>(timeout: Duration, mut f: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = tokio::time::Instant::now();
    loop {
        if f().await {
            return Some(start.elapsed());
        }
        if start.elapsed() >= timeout {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
