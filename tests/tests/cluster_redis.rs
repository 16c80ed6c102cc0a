//! Multi-process: Redis restarted empty mid-run (all directory data lost). Rooms keep running;
//! their directory writers find no placement, reclaim it under a new, greater epoch and register
//! every member again; nodes re-register at their next heartbeat. No room is activated twice
//! (checked on the event logs) and presence is whole again within lease TTL + one sweep.

use std::time::Duration;

use plaza_tests::cluster::{Cluster, ClusterOpts, check_single_activation, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_is_rebuilt_after_redis_lost_its_data() {
    let mut c = Cluster::start(ClusterOpts::fast()).await.unwrap();
    let ttl = Duration::from_millis(c.opts().lease_ttl_ms);
    let sweep = Duration::from_millis(c.opts().sweep_interval_ms);
    let cfg = c.load_config(60, 6, "rr-", 12);
    let (bots, rooms) = (cfg.bots, cfg.rooms);
    let room_ids: Vec<String> = (0..rooms).map(|i| format!("rr-{i}")).collect();
    let load = tokio::spawn(plaza_load::run(cfg));
    c.wait_all_online(bots).await;
    let before = c.placements(&room_ids).await;

    c.redis.restart_empty().unwrap();
    let rebuilt = wait_until(ttl + sweep, || async {
        c.peers_count().await.ok() == Some(bots)
    })
    .await;
    assert!(
        rebuilt.is_some(),
        "presence not rebuilt within lease TTL + sweep: {:?}",
        c.peers_count().await
    );
    // Every room is held by the node that ran it before (reclaimed, not moved).
    let after = c.placements(&room_ids).await;
    assert_eq!(before, after, "rooms stayed where they ran");

    let report = load.await.unwrap().unwrap();
    eprintln!(
        "rebuilt in {rebuilt:?}; load: lost {} resumes {} failed {}",
        report.bots_lost, report.resumes, report.bots_failed
    );
    assert_eq!(report.bots_lost, 0);
    assert_eq!(report.bots_failed, 0);
    let sum = check_single_activation(&c.event_logs()).unwrap();
    eprintln!("event logs: {sum:?}");
    assert!(
        sum.rooms_with_several_epochs >= rooms,
        "every room reclaimed: {sum:?}"
    );
}
