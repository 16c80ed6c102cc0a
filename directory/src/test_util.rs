//! Test helpers (feature `test-util`): [`RedisServer`], a throwaway `redis-server` process on a
//! free loopback port in its own temp dir, with no persistence; [`FaultyDirectory`], a
//! directory that fails chosen operations. Not for production use.
//!
//! `redis-server` must be on `PATH` (`apt-get install -y redis-server` on Debian/Ubuntu);
//! [`RedisServer::start`] fails with a message saying so otherwise.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A `redis-server` child process; killed and its directory removed on drop.
///
/// ```no_run
/// # fn main() -> Result<(), String> {
/// let mut redis = plaza_directory::test_util::RedisServer::start()?;
/// let url = redis.url(); // hand to RedisDirectory::connect
/// redis.restart_empty()?; // Redis restart that lost all data
/// redis.kill(); // outage; `start_again()` to come back
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
    /// More `redis-server` arguments (cluster mode).
    extra: Vec<String>,
    /// TLS only: `--port 0 --tls-port PORT` (the `--tls-*` file arguments are in `extra`).
    tls: bool,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

impl RedisServer {
    /// Starts a server on a free port and waits (bounded) until it answers `PING`. Retries
    /// with another port if the chosen one was taken in the meantime.
    pub fn start() -> Result<Self, String> {
        Self::start_with(&[])
    }

    /// Like [`Self::start`] with more `redis-server` arguments.
    pub fn start_with(extra: &[&str]) -> Result<Self, String> {
        let mut last = String::new();
        for _ in 0..3 {
            match Self::start_on(free_port()?, extra) {
                Ok(s) => return Ok(s),
                Err(e) if e.contains("not found on PATH") => return Err(e),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// A server that speaks TLS only (`--port 0 --tls-port PORT`: no plain port at all) with
    /// these `--tls-*` arguments (certificate, key, CA, `--tls-auth-clients`); its
    /// [`Self::url`] is `rediss://`. Ready once the TLS port accepts connections.
    pub fn start_tls(tls_args: &[&str]) -> Result<Self, String> {
        let mut last = String::new();
        for _ in 0..3 {
            match Self::start_on_with(free_port()?, tls_args, true) {
                Ok(s) => return Ok(s),
                Err(e) if e.contains("not found on PATH") => return Err(e),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn start_on(port: u16, extra: &[&str]) -> Result<Self, String> {
        Self::start_on_with(port, extra, false)
    }

    fn start_on_with(port: u16, extra: &[&str], tls: bool) -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!(
            "plaza-redis-{}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed),
            port
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let mut s = Self {
            port,
            dir,
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            tls,
        };
        s.spawn()?;
        Ok(s)
    }

    /// `redis://127.0.0.1:PORT/` (`rediss://` for [`Self::start_tls`]).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}/", self.port)
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// True while the child process runs.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Kills the server (SIGKILL) and starts a fresh, empty one on the same port: a Redis
    /// restart that lost all its data.
    pub fn restart_empty(&mut self) -> Result<(), String> {
        self.kill();
        self.spawn()
    }

    /// Starts the server again after [`Self::kill`] (empty: there is no persistence).
    pub fn start_again(&mut self) -> Result<(), String> {
        if self.is_running() {
            return Ok(());
        }
        self.spawn()
    }

    /// Stops the server gracefully (`SHUTDOWN NOSAVE`), killing it if it does not exit within
    /// 5 s. Idempotent; [`Self::start_again`] brings it back (empty).
    pub fn stop(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        if self.tls {
            // No plain port to send SHUTDOWN to: nothing to persist anyway.
            let _ = c.kill();
            let _ = c.wait();
            return;
        }
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) {
            let _ = s.write_all(b"SHUTDOWN NOSAVE\r\n");
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = c.kill();
        let _ = c.wait();
    }

    /// Kills the server (SIGKILL) and reaps it. Idempotent.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn spawn(&mut self) -> Result<(), String> {
        let mut cmd = Command::new("redis-server");
        if self.tls {
            cmd.args(["--port", "0", "--tls-port"]);
        } else {
            cmd.arg("--port");
        }
        let child = cmd
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    "redis-server not found on PATH: install it (`apt-get install -y \
                     redis-server`) or set REDIS_URL to an existing server"
                        .to_string()
                } else {
                    format!("spawn redis-server: {e}")
                }
            })?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let up = if self.tls {
                TcpStream::connect(("127.0.0.1", self.port)).is_ok()
            } else {
                ping(self.port)
            };
            if up {
                return Ok(());
            }
            if !self.is_running() {
                let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
                return Err(format!("redis-server exited at start:\n{log}"));
            }
            if Instant::now() > deadline {
                self.kill();
                return Err("redis-server did not answer PING within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A throwaway Redis Cluster on loopback: `masters` primaries with `replicas` replicas each
/// ([`RedisServer`]s in cluster mode, joined with `redis-cli --cluster create`), with a short
/// node timeout (1 s) so a killed master's replica is promoted within a few seconds.
#[derive(Debug)]
pub struct RedisCluster {
    /// Every server, primaries first as created.
    pub servers: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts the servers, creates the cluster and waits (bounded) until every node reports
    /// `cluster_state:ok` (and, with replicas, every replica's link to its primary is up).
    pub fn start(masters: usize, replicas: usize) -> Result<Self, String> {
        let args = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "1000",
            "--cluster-replica-validity-factor",
            "0",
        ];
        let mut servers = Vec::new();
        for _ in 0..masters * (1 + replicas) {
            servers.push(RedisServer::start_with(&args)?);
        }
        let mut cmd = Command::new("redis-cli");
        cmd.arg("--cluster").arg("create");
        for s in &servers {
            cmd.arg(format!("127.0.0.1:{}", s.port));
        }
        let out = cmd
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("redis-cli --cluster create: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&out.stdout)
            ));
        }
        let c = Self { servers };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = c.servers.iter().all(|s| {
                command(s.port, "CLUSTER INFO").contains("cluster_state:ok")
                    && (replicas == 0 || {
                        let r = command(s.port, "INFO replication");
                        r.contains("role:master") || r.contains("master_link_status:up")
                    })
            });
            if ok {
                return Ok(c);
            }
            if Instant::now() > deadline {
                return Err("redis cluster not ok within 30 s".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `redis+cluster://127.0.0.1:P1,…` over every server (seeds).
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .servers
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// Ports of the servers that are primaries now (as they report `INFO replication`).
    pub fn master_ports(&mut self) -> Vec<u16> {
        let mut out = Vec::new();
        for s in &mut self.servers {
            if s.is_running() && command(s.port, "INFO replication").contains("role:master") {
                out.push(s.port);
            }
        }
        out
    }

    /// The primary serving `key`'s slot now (`CLUSTER KEYSLOT` and `CLUSTER NODES` of a live
    /// node).
    pub fn master_of(&mut self, key: &str) -> Option<u16> {
        let port = self
            .servers
            .iter_mut()
            .find_map(|s| s.is_running().then_some(s.port))?;
        let slot: u32 = command(port, &format!("CLUSTER KEYSLOT {key}"))
            .trim()
            .trim_start_matches(':')
            .parse()
            .ok()?;
        let nodes = command(port, "CLUSTER NODES");
        nodes.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 9 || !f[2].contains("master") || f[2].contains("fail") {
                return None;
            }
            let owns = f[8..].iter().any(|r| match r.split_once('-') {
                Some((a, b)) => {
                    a.parse::<u32>().is_ok_and(|a| a <= slot)
                        && b.parse::<u32>().is_ok_and(|b| slot <= b)
                }
                None => r.parse::<u32>() == Ok(slot),
            });
            owns.then(|| f[1].split(['@', ':']).nth(1).and_then(|p| p.parse().ok()))
                .flatten()
        })
    }

    /// Kills (SIGKILL) the server on `port`.
    pub fn kill(&mut self, port: u16) {
        if let Some(s) = self.servers.iter_mut().find(|s| s.port == port) {
            s.kill();
        }
    }

    /// Waits (bounded by `timeout`) until every live node reports `cluster_state:ok` and
    /// `port` is no primary any more (its replica took over).
    pub fn wait_failover(&mut self, port: u16, timeout: Duration) -> Result<Duration, String> {
        let start = Instant::now();
        loop {
            let live: Vec<u16> = self
                .servers
                .iter_mut()
                .filter_map(|s| s.is_running().then_some(s.port))
                .collect();
            // Until every live node has flagged `port` FAIL (not merely `fail?`, suspected:
            // the cluster state stays ok then, before any replica is promoted) and the state
            // is ok again, i.e. its slots are served by a promoted replica.
            let ok = live.iter().all(|p| {
                command(*p, "CLUSTER INFO").contains("cluster_state:ok")
                    && !command(*p, "CLUSTER NODES").lines().any(|l| {
                        let f: Vec<&str> = l.split_whitespace().collect();
                        f.len() > 2
                            && f[1].contains(&format!(":{port}@"))
                            && f[2].split(',').any(|x| x == "master")
                            && !f[2].split(',').any(|x| x == "fail")
                    })
            });
            if ok {
                return Ok(start.elapsed());
            }
            if start.elapsed() > timeout {
                return Err(format!("no failover of {port} within {timeout:?}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Sends one inline command to loopback `port` and returns what arrives within a short
/// while (small replies; empty on any error).
pub fn command(port: u16, cmd: &str) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(300)));
    if s.write_all(format!("{cmd}\r\n").as_bytes()).is_err() {
        return String::new();
    }
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    let deadline = Instant::now() + Duration::from_secs(2);
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
        // A bulk reply `$LEN\r\n…\r\n` is complete once LEN bytes arrived.
        if let Some(rest) = out.strip_prefix(b"$") {
            let text = String::from_utf8_lossy(rest);
            if let Some((len, body)) = text.split_once("\r\n")
                && len.parse::<usize>().is_ok_and(|l| body.len() >= l)
            {
                break;
            }
        } else if out.ends_with(b"\r\n") {
            break;
        }
        if Instant::now() > deadline {
            break;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("local_addr: {e}"))
}

fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG"))
}

/// A directory that forwards to another and fails chosen operations with
/// [`crate::DirectoryError::Unavailable`], for tests of what callers do when the store is out
/// of reach for some calls (a lost release, a failed renewal).
///
/// ```
/// # use std::sync::Arc;
/// # use plaza_directory::{MemoryDirectory, test_util::FaultyDirectory};
/// let dir = Arc::new(FaultyDirectory::new(Arc::new(MemoryDirectory::new())));
/// dir.fail("presence_release", true); // every release fails until
/// dir.fail("presence_release", false); // healed
/// ```
pub struct FaultyDirectory {
    inner: crate::SharedDirectory,
    failing: std::sync::Mutex<std::collections::BTreeSet<&'static str>>,
    failed: AtomicU64,
}

impl std::fmt::Debug for FaultyDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyDirectory")
            .field("failing", &self.failing)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl FaultyDirectory {
    /// Forwards every call to `inner` until told to fail some.
    pub fn new(inner: crate::SharedDirectory) -> Self {
        Self {
            inner,
            failing: Default::default(),
            failed: AtomicU64::new(0),
        }
    }

    /// Makes the operation named `op` (a [`crate::Directory`] method name) fail, or heals it.
    pub fn fail(&self, op: &'static str, failing: bool) {
        let mut g = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        if failing {
            g.insert(op);
        } else {
            g.remove(op);
        }
    }

    /// How many calls were failed so far.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    fn check(&self, op: &'static str) -> Result<(), crate::DirectoryError> {
        let g = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        if g.contains(op) {
            self.failed.fetch_add(1, Ordering::Relaxed);
            Err(crate::DirectoryError::Unavailable(format!(
                "{op}: failed by the test"
            )))
        } else {
            Ok(())
        }
    }
}

macro_rules! forward {
    ($( fn $name:ident(&self $(, $arg:ident : $ty:ty)* ) -> $ret:ty; )*) => {
        #[async_trait::async_trait]
        impl crate::Directory for FaultyDirectory {
            $(
                async fn $name(&self $(, $arg: $ty)*) -> Result<$ret, crate::DirectoryError> {
                    self.check(stringify!($name))?;
                    self.inner.$name($($arg),*).await
                }
            )*
        }
    };
}

use crate::types::{
    AnnounceOutcome, AuditRecord, Epoch, NodeInfo, Placement, PresenceEntry, Sources,
};

forward! {
    fn register_node(&self, info: NodeInfo, ttl_ms: u64) -> ();
    fn deregister_node(&self, id: &str) -> ();
    fn live_nodes(&self) -> Vec<NodeInfo>;
    fn resolve(&self, room: &str) -> Option<Placement>;
    fn place(&self, room: &str) -> NodeInfo;
    fn claim(&self, room: &str, node: &str, ttl_ms: u64) -> Placement;
    fn renew(&self, room: &str, node: &str, epoch: Epoch, ttl_ms: u64) -> Placement;
    fn release(&self, room: &str, node: &str, epoch: Epoch) -> ();
    fn check_epoch(&self, room: &str, epoch: Epoch) -> ();
    fn presence_register(&self, entry: PresenceEntry, epoch: Epoch, ttl_ms: u64) -> ();
    fn presence_add_source(&self, wallet: &str, source: Sources, epoch: Epoch) -> ();
    fn presence_release(&self, wallet: &str, source: Sources, epoch: Epoch) -> bool;
    fn presence_renew(&self, node: &str, room: &str, epoch: Epoch, ttl_ms: u64) -> u32;
    fn presence_get(&self, wallet: &str) -> Option<PresenceEntry>;
    fn presence_by_entity(&self, room: &str, entity: u32) -> Option<PresenceEntry>;
    fn peers(&self, filter: Option<&[String]>) -> Vec<PresenceEntry>;
    fn sweep(&self) -> u32;
    fn announce_profile(&self, wallet: &str, version: u64, source: Sources) -> AnnounceOutcome;
    fn audit_append(&self, room: &str, epoch: Epoch, kind: &str, detail: &str, at_ms: u64) -> u64;
    fn audit_read(&self, room: &str, from_seq: u64, limit: usize) -> Vec<AuditRecord>;
    fn put_handoff(&self, room: &str, epoch: Epoch, state: Vec<u8>) -> ();
    fn take_handoff(&self, room: &str) -> Option<(Epoch, Vec<u8>)>;
    fn put_resume(&self, token: &str, entry: Vec<u8>, ttl_ms: u64) -> ();
    fn take_resume(&self, token: &str) -> Option<Vec<u8>>;
    fn claim_once(&self, key: &str, ttl_ms: u64) -> bool;
    fn put_resume_held(&self, holder: &str, token: &str, entry: Vec<u8>, ttl_ms: u64) -> ();
    fn renew_resume_holder(&self, holder: &str, ttl_ms: u64) -> ();
    fn take_resume_held(&self, holder: &str, token: &str) -> Option<Vec<u8>>;
}
