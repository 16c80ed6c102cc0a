//! The shared suite against [`RedisDirectory`] on a 3-master Redis Cluster started on loopback
//! (`redis-server --cluster-enabled yes` × 3, `redis-cli --cluster create`): every script
//! touches one hash slot and the cross-slot operations work on a real cluster. Plus a master
//! killed with SIGKILL mid-run on a cluster with one replica per master: the replica is
//! promoted, the directory follows, and no epoch is issued twice.

use crate::{run_all_suite_cases, suite};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use plaza_directory::test_util::RedisCluster;
use plaza_directory::{Directory, DirectoryError, RedisDirectory, RedisOptions, SharedDirectory};

struct ClusterEnv {
    dir: Arc<RedisDirectory>,
}

static N: AtomicU64 = AtomicU64::new(0);

#[async_trait::async_trait]
impl suite::Env for ClusterEnv {
    fn dir(&self) -> &dyn Directory {
        &*self.dir
    }
    fn shared(&self) -> SharedDirectory {
        self.dir.clone()
    }
    async fn elapse(&self, ms: u64) {
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

async fn connect(url: &str, prefix: &str) -> RedisDirectory {
    let opts = RedisOptions {
        prefix: prefix.to_owned(),
        ..RedisOptions::default()
    };
    RedisDirectory::connect_with(url, 0, opts)
        .await
        .expect("connect to the cluster")
}

/// A fresh key prefix on the shared cluster.
fn prefix() -> String {
    format!(
        "plaza-ct:{}:{}:",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_suite_on_a_three_master_cluster() {
    let cluster =
        tokio::task::block_in_place(|| RedisCluster::start(3, 0)).unwrap_or_else(|e| panic!("{e}"));
    let url = cluster.url();
    let make = || async {
        let d = connect(&url, &prefix()).await;
        assert!(d.is_cluster());
        ClusterEnv { dir: Arc::new(d) }
    };
    let n = run_all_suite_cases!(make());
    assert_eq!(n, 22);
}

/// Retries `f` while it fails with a retryable error (the cluster client refreshes its slot
/// map after the failover), bounded.
async fn until_available<T, F, Fut>(mut f: F) -> Result<T, DirectoryError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, DirectoryError>>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
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
async fn master_killed_replica_promoted_no_epoch_reused() {
    let mut cluster =
        tokio::task::block_in_place(|| RedisCluster::start(3, 1)).unwrap_or_else(|e| panic!("{e}"));
    let url = cluster.url();
    let pre = prefix();
    let d = connect(&url, &pre).await;
    // Rooms on every shard, with members; then the master of the epoch source dies.
    let rooms: Vec<String> = (0..12).map(|i| format!("room-{i}")).collect();
    let mut before = Vec::new();
    for (i, r) in rooms.iter().enumerate() {
        let p = d.claim(r, "a", 60_000).await.unwrap();
        d.presence_register(
            suite::entry(&format!("w{i}"), r, 1, "a", plaza_directory::Sources::ROOM),
            p.epoch,
            60_000,
        )
        .await
        .unwrap();
        before.push(p);
    }
    let epoch_key = format!("{pre}{{e}}epoch");
    let victim = cluster
        .master_of(&epoch_key)
        .expect("a master owns the epoch slot");
    cluster.kill(victim);
    let took =
        tokio::task::block_in_place(|| cluster.wait_failover(victim, Duration::from_secs(30)))
            .unwrap();
    eprintln!("replica of {victim} promoted after {took:?}");
    // A client that saw nothing claims a new room: a new era, above every epoch issued before
    // (the promoted replica may lack the last increments; its era starts over).
    let fresh = connect(&url, &pre).await;
    let q = until_available(|| fresh.claim("after", "b", 60_000))
        .await
        .unwrap();
    let max_before = before.iter().map(|p| p.epoch).max().unwrap();
    assert!(q.epoch > max_before, "{:?} vs {max_before:?}", q.epoch);
    assert!(q.epoch.era > max_before.era, "a failover starts a new era");
    // Every room is still fenced by its epoch (or, on the promoted shard, reclaimable under a
    // greater one); the old client keeps working through the new map.
    for (i, p) in before.iter().enumerate() {
        match until_available(|| d.check_epoch(&p.room, p.epoch)).await {
            Ok(()) => {
                let w = format!("w{i}");
                assert_eq!(
                    until_available(|| d.presence_get(&w))
                        .await
                        .unwrap()
                        .map(|e| e.room),
                    Some(p.room.clone())
                );
            }
            Err(DirectoryError::StaleEpoch { .. }) => {
                let again = until_available(|| d.claim(&p.room, "a", 60_000))
                    .await
                    .unwrap();
                assert!(again.epoch > p.epoch);
            }
            Err(e) => panic!("{}: {e}", p.room),
        }
    }
}
