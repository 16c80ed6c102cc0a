//! The directory's write load at the shipped defaults, counted by Redis itself: Redis + 3
//! `plaza node` processes + 1 `plaza gateway` on loopback, bots in 6 rooms; once every bot is
//! online, `CONFIG RESETSTAT`, 20 s of steady state, then `INFO commandstats`. Every command
//! counts, those run inside the Lua scripts included (`EVALSHA` itself and each `HSET`/`TIME`
//! it calls).
//!
//! The directory's periodic work is per room and per process (one renewal script per room per
//! period, one holder renewal per gateway, one heartbeat per node, one index read per sweep),
//! never per member: the test holds the total below 0.1 command per bot per second of the
//! issue's 300-bot run (30 commands/s) at any bot count, and at 300 bots
//! (`PLAZA_CLUSTER_BOTS=300`, docs/BENCHMARKS.md) that is ≤ 0.1 command per bot per second.
//!
//! Default size: 60 bots / 6 rooms with the shipped lease, presence TTL and sweep.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use plaza_tests::cluster::{Cluster, ClusterOpts, redis_command};

/// Redis's `cmdstat_<name>:calls=<n>,…` lines.
fn command_calls(info: &str) -> BTreeMap<String, u64> {
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_commands_scale_with_rooms_not_members() {
    let c = Cluster::start(ClusterOpts::default()).await.unwrap();
    let window = Duration::from_secs(20);
    let cfg = c.load_config(60, 6, "rc-", 75);
    let (bots, rooms) = (cfg.bots, cfg.rooms);
    let load = tokio::spawn(plaza_load::run(cfg));
    c.wait_all_online(bots).await;
    // Let the joins' one-off writes settle (registrations, first renewals).
    tokio::time::sleep(Duration::from_secs(4)).await;

    let port = c.redis.port();
    let reset = redis_command(port, "CONFIG RESETSTAT").await.unwrap();
    assert!(reset.starts_with("+OK"), "{reset}");
    let start = Instant::now();
    tokio::time::sleep(window).await;
    let info = redis_command(port, "INFO commandstats").await.unwrap();
    let secs = start.elapsed().as_secs_f64();
    let calls = command_calls(&info);
    // The INFO and CONFIG calls of the test itself are not the directory's.
    let total: u64 = calls
        .iter()
        .filter(|(n, _)| !matches!(n.split('|').next(), Some("info" | "config")))
        .map(|(_, n)| n)
        .sum();
    let per_s = total as f64 / secs;
    let per_bot_s = per_s / bots as f64;
    eprintln!(
        "{bots} bots / {rooms} rooms / 3 nodes, {secs:.1} s: {total} commands = {per_s:.1}/s = \
         {per_bot_s:.4} per bot per s"
    );
    for (name, n) in &calls {
        eprintln!("  {name:<16} {n:>7}  {:>7.2}/s", *n as f64 / secs);
    }
    assert!(
        calls.contains_key("evalsha"),
        "the directory's scripts ran: {calls:?}"
    );
    assert!(
        per_s <= 30.0,
        "{per_s:.1} commands/s: above 0.1 per bot per second of a 300-bot run ({calls:?})"
    );
    if bots >= 300 {
        assert!(
            per_bot_s <= 0.1,
            "{per_bot_s:.4} commands per bot per second"
        );
    }

    let report = load.await.unwrap().unwrap();
    assert_eq!(report.bots_failed, 0, "{report:?}");
    assert_eq!(report.bots_lost, 0, "no bot ends the run disconnected");
}
