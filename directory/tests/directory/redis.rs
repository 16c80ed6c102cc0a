//! The shared suite against [`RedisDirectory`] on a real `redis-server` (started per test on a
//! free port, or `REDIS_URL` with a unique key prefix), plus Redis-only cases: epochs stay
//! monotonic across a restart that lost all data, and an unreachable Redis is a retryable error.

use crate::{all_suite_tests, suite};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use plaza_directory::test_util::RedisServer;
use plaza_directory::{
    Directory, DirectoryError, RedisDirectory, RedisOptions, Renewal, RoomLease, SharedDirectory,
    Sources,
};

struct RedisEnv {
    server: Option<RedisServer>,
    url: String,
    prefix: String,
    dir: Arc<RedisDirectory>,
}

static N: AtomicU64 = AtomicU64::new(0);

impl RedisEnv {
    async fn connect(&self, boot_era: u64) -> RedisDirectory {
        let opts = RedisOptions {
            prefix: self.prefix.clone(),
            ..RedisOptions::default()
        };
        RedisDirectory::connect_with(&self.url, boot_era, opts)
            .await
            .expect("connect to redis")
    }

    /// Loses every key of this test: a real restart of our own server, or deleting the prefix
    /// on a shared `REDIS_URL` server.
    async fn lose_all_data(&mut self) {
        match &mut self.server {
            Some(s) => s.restart_empty().expect("restart redis"),
            None => {
                self.dir.delete_all_keys().await.expect("delete keys");
            }
        }
    }
}

#[async_trait::async_trait]
impl suite::Env for RedisEnv {
    fn dir(&self) -> &dyn Directory {
        &*self.dir
    }
    fn shared(&self) -> SharedDirectory {
        self.dir.clone()
    }
    async fn elapse(&self, ms: u64) {
        // Bounded polling of the server clock (the clock leases are measured on).
        let start = self.dir.server_time_ms().await.expect("TIME");
        let deadline = Instant::now() + Duration::from_millis(ms) + Duration::from_secs(10);
        while self.dir.server_time_ms().await.expect("TIME") < start + ms {
            assert!(Instant::now() < deadline, "redis clock did not advance");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    fn short_ttl(&self) -> u64 {
        300
    }
}

async fn make() -> RedisEnv {
    let (server, url) = match std::env::var("REDIS_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let s = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
            let url = s.url();
            (Some(s), url)
        }
    };
    let prefix = format!(
        "plaza-test:{}:{}:",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let opts = RedisOptions {
        prefix: prefix.clone(),
        ..RedisOptions::default()
    };
    let dir = RedisDirectory::connect_with(&url, 0, opts)
        .await
        .expect("connect to redis");
    RedisEnv {
        server,
        url,
        prefix,
        dir: Arc::new(dir),
    }
}

all_suite_tests!(make);

/// Retries `f` until it stops failing with `Unavailable` (the connection manager reconnects).
async fn until_available<T, F, Fut>(mut f: F) -> Result<T, DirectoryError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, DirectoryError>>,
{
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match f().await {
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            r => return r,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn epoch_monotonic_across_data_loss() {
    let mut env = make().await;
    let old = env.dir.clone();
    let p1 = old.claim("r", "a", 60_000).await.unwrap();
    old.presence_register(
        suite::entry("w", "r", 1, "a", Sources::ROOM),
        p1.epoch,
        60_000,
    )
    .await
    .unwrap();
    assert_eq!(
        old.audit_append("r", p1.epoch, "k", "{}", 1).await.unwrap(),
        1
    );

    env.lose_all_data().await;

    // Another node that has never seen any epoch claims the room on the empty store.
    let fresh = env.connect(0).await;
    let p2 = until_available(|| fresh.claim("r", "b", 60_000))
        .await
        .unwrap();
    assert!(
        p2.epoch > p1.epoch,
        "{:?} must exceed {:?}",
        p2.epoch,
        p1.epoch
    );
    assert!(p2.epoch.era > p1.epoch.era);

    // The old activation's writes are refused.
    let stale = |r: Result<(), DirectoryError>| match r {
        Err(DirectoryError::StaleEpoch { current, .. }) => assert_eq!(current, Some(p2.epoch)),
        other => panic!("expected stale epoch, got {other:?}"),
    };
    stale(until_available(|| old.check_epoch("r", p1.epoch)).await);
    stale(
        old.audit_append("r", p1.epoch, "k", "{}", 2)
            .await
            .map(|_| ()),
    );
    stale(
        old.presence_register(
            suite::entry("w", "r", 1, "a", Sources::ROOM),
            p1.epoch,
            60_000,
        )
        .await,
    );
    stale(old.renew("r", "a", p1.epoch, 60_000).await.map(|_| ()));
    stale(old.put_handoff("r", p1.epoch, vec![1]).await);
    assert_eq!(
        old.claim("r", "a", 60_000).await.unwrap_err().code(),
        "conflict"
    );

    // The old client itself, claiming another room on the new store, also moves forward.
    let q = old.claim("r2", "a", 60_000).await.unwrap();
    assert!(q.epoch > p1.epoch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_client_era_floor_after_data_loss() {
    // Even if the restarted Redis' clock were behind, a client's boot era / seen eras floor
    // the new era: a client with a boot era far in the future gets an era above it.
    let mut env = make().await;
    env.lose_all_data().await;
    let now = env.connect(0).await;
    let t = until_available(|| now.server_time_ms()).await.unwrap();
    let future = env.connect(t + 10_000_000).await;
    let p = future.claim("r", "a", 60_000).await.unwrap();
    assert!(p.epoch.era > t + 10_000_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_redis_is_retryable_then_recovers() {
    let mut env = make().await;
    let Some(server) = env.server.as_mut() else {
        // With REDIS_URL we cannot stop the server; the data-loss test covers reconnects.
        return;
    };
    let p = env.dir.claim("r", "a", 60_000).await.unwrap();
    server.kill();
    let e = env.dir.check_epoch("r", p.epoch).await.unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
    assert_eq!(e.code(), "unavailable");
    server.start_again().unwrap();
    // Back, but empty: the lease is gone, so the epoch is stale rather than unavailable.
    let r = until_available(|| env.dir.check_epoch("r", p.epoch)).await;
    assert!(
        matches!(r, Err(DirectoryError::StaleEpoch { current: None, .. })),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn room_lease_reclaims_after_data_loss_and_rebuilds_presence() {
    let mut env = make().await;
    let ttl = Duration::from_secs(10);
    let margin = Duration::from_secs(2);
    let mut lease = RoomLease::claim(&*env.dir, "r", "a", ttl, margin)
        .await
        .unwrap();
    let e = suite::entry("w", "r", 1, "a", Sources::ROOM);
    env.dir
        .presence_register(e.clone(), lease.epoch(), 60_000)
        .await
        .unwrap();
    env.lose_all_data().await;
    let old = lease.epoch();
    let r = until_available(|| async {
        // Each attempt works on a copy so a transient failure leaves the lease untouched.
        let mut l = lease.clone();
        l.renew_or_reclaim(&*env.dir).await.map(|r| (r, l))
    })
    .await
    .unwrap();
    assert_eq!(r.0, Renewal::Reclaimed { old });
    lease = r.1;
    assert!(lease.epoch() > old);
    // Presence is rebuilt under the new epoch; the old one is refused.
    assert!(env.dir.presence_get("w").await.unwrap().is_none());
    assert!(
        env.dir
            .presence_register(e.clone(), old, 60_000)
            .await
            .is_err()
    );
    env.dir
        .presence_register(e, lease.epoch(), 60_000)
        .await
        .unwrap();
    assert_eq!(env.dir.peers(None).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_from_older_backup_keeps_epochs_monotonic() {
    let env = make().await;
    let p1 = env.dir.claim("r", "a", 60_000).await.unwrap();
    // Simulate Redis restored from an older snapshot: an older era, no placement, no history.
    let client = redis::Client::open(env.url.as_str()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let pre = &env.prefix;
    let _: () = redis::cmd("HSET")
        .arg(format!("{pre}{{e}}epoch"))
        .arg("era")
        .arg(p1.epoch.era - 1_000)
        .arg("ctr")
        .arg(1)
        .query_async(&mut con)
        .await
        .unwrap();
    for k in ["place", "last"] {
        let _: u64 = redis::cmd("DEL")
            .arg(format!("{pre}{{r:r}}{k}"))
            .query_async(&mut con)
            .await
            .unwrap();
    }
    // The client that saw the newer era moves the store forward.
    let p2 = env.dir.claim("r", "a", 60_000).await.unwrap();
    assert!(p2.epoch > p1.epoch, "{:?} vs {:?}", p2.epoch, p1.epoch);
    // A client that saw nothing now continues in that newer era.
    let other = env.connect(0).await;
    let q = other.claim("r2", "b", 60_000).await.unwrap();
    assert_eq!(q.epoch.era, p2.epoch.era);
}

#[test]
fn harness_stop_and_start_again() {
    // The harness itself is under test here, so this ignores REDIS_URL.
    let mut s = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    assert!(s.is_running());
    let port = s.port();
    assert!(s.url().contains(&port.to_string()));
    s.stop();
    assert!(!s.is_running());
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    s.start_again().unwrap();
    assert!(s.is_running());
    s.kill();
    assert!(!s.is_running());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn epoch_monotonic_across_flushall() {
    let env = make().await;
    let p1 = env.dir.claim("r", "a", 60_000).await.unwrap();
    if env.server.is_some() {
        // Our own server: a real FLUSHALL.
        let client = redis::Client::open(env.url.as_str()).unwrap();
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd("FLUSHALL").query_async(&mut con).await.unwrap();
    } else {
        // A shared REDIS_URL server: flush only this test's keys.
        env.dir.delete_all_keys().await.unwrap();
    }
    let other = env.connect(0).await;
    let p2 = other.claim("r", "b", 60_000).await.unwrap();
    assert!(p2.epoch > p1.epoch, "{:?} vs {:?}", p2.epoch, p1.epoch);
    let r = env.dir.audit_append("r", p1.epoch, "k", "{}", 0).await;
    assert!(
        matches!(r, Err(DirectoryError::StaleEpoch { current: Some(c), .. }) if c == p2.epoch),
        "{r:?}"
    );
}
