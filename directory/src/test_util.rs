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
}

static SEQ: AtomicU64 = AtomicU64::new(0);

impl RedisServer {
    /// Starts a server on a free port and waits (bounded) until it answers `PING`. Retries
    /// with another port if the chosen one was taken in the meantime.
    pub fn start() -> Result<Self, String> {
        let mut last = String::new();
        for _ in 0..3 {
            match Self::start_on(free_port()?) {
                Ok(s) => return Ok(s),
                Err(e) if e.contains("not found on PATH") => return Err(e),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn start_on(port: u16) -> Result<Self, String> {
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
        };
        s.spawn()?;
        Ok(s)
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
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
        let child = Command::new("redis-server")
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
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
            if ping(self.port) {
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
}
