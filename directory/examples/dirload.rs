//! Directory load harness: simulates the directory traffic of many nodes, rooms and members
//! against a real Redis (no clients, no rooms simulated), at the shipped defaults, and reports
//! what Redis counted (`INFO commandstats`, `INFO stats`, `INFO cpu`, `INFO memory`).
//!
//! ```text
//! cargo run -p plaza-directory --example dirload -- URL NODES ROOMS MEMBERS SECS [SPEEDUP] [GATEWAYS]
//! ```
//!
//! Every simulated node heartbeats every 10/3 s and sweeps every 5 s; every room renews its
//! lease and presence (`renew_room`, lease 10 s, presence 15 s) every 10/3 s; every gateway
//! renews its held resume entries every 10 s. `SPEEDUP` divides every period (SPEEDUP 100 =
//! a hundred times the rate: the way to find one shard's ceiling on one machine). Output:
//! commands per second, per 1,000 users and per room, network bytes in and out, Redis CPU.

use std::sync::Arc;
use std::time::{Duration, Instant};

use plaza_directory::{
    Directory, NodeInfo, PresenceEntry, RedisDirectory, RedisOptions, RoomLease, Sources,
};

fn arg<T: std::str::FromStr>(args: &[String], i: usize, d: T) -> T {
    args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d)
}

async fn info(url: &str, section: &str) -> String {
    let client = redis::Client::open(url).expect("a single-server URL for INFO");
    let mut con = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect for INFO");
    redis::cmd("INFO")
        .arg(section)
        .query_async(&mut con)
        .await
        .expect("INFO")
}

fn field(info: &str, name: &str) -> f64 {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

fn total_calls(info: &str) -> (u64, Vec<(String, u64)>) {
    let mut v: Vec<(String, u64)> = info
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .filter(|(n, _)| n != "info" && n != "config")
        .collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.1));
    (v.iter().map(|(_, n)| n).sum(), v)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let url = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "redis://127.0.0.1:6379/".into());
    let nodes: usize = arg(&args, 2, 3);
    let rooms: usize = arg(&args, 3, 6);
    let members: usize = arg(&args, 4, 50);
    let secs: u64 = arg(&args, 5, 20);
    let speedup: f64 = arg(&args, 6, 1.0);
    let gateways: usize = arg(&args, 7, 1);
    let period = |ms: u64| Duration::from_secs_f64(ms as f64 / 1000.0 / speedup);
    let (lease_ttl, presence_ttl) = (Duration::from_secs(10), Duration::from_secs(15));
    let prefix = format!("dirload:{}:", std::process::id());
    let opts = RedisOptions {
        prefix,
        ..RedisOptions::default()
    };
    let dir: Arc<RedisDirectory> = Arc::new(
        RedisDirectory::connect_with(&url, 0, opts)
            .await
            .expect("connect"),
    );
    // Set up: nodes, rooms (round-robin over nodes), members.
    let mut leases = Vec::new();
    for n in 0..nodes {
        let info = NodeInfo {
            id: format!("n{n}"),
            addr: format!("10.0.0.{n}:7000"),
            load: 0,
            draining: false,
            heartbeat_until_ms: 0,
        };
        dir.register_node(info, 10_000).await.expect("register");
    }
    for r in 0..rooms {
        let node = format!("n{}", r % nodes.max(1));
        let room = format!("room-{r}");
        let mut lease =
            RoomLease::claim(&*dir, &room, &node, lease_ttl, Duration::from_millis(1000))
                .await
                .expect("claim");
        lease.set_presence_ttl(Some(presence_ttl));
        for m in 0..members {
            let e = PresenceEntry {
                wallet: format!("0x{r:06x}{m:06x}"),
                entity: m as u32 + 1,
                room: room.clone(),
                sources: Sources::ROOM,
                node: node.clone(),
                profile_version: 0,
                lease_until_ms: 0,
            };
            dir.presence_register(e, lease.epoch(), 15_000)
                .await
                .expect("register member");
        }
        leases.push(lease);
    }
    for g in 0..gateways {
        for m in 0..(rooms * members / gateways.max(1)).min(10_000) {
            dir.put_resume_held(&format!("g{g}"), &format!("t{m}"), vec![0; 48], 30_000)
                .await
                .expect("held entry");
        }
    }
    // Warm up: every room's first renewal chains its members (once per activation).
    for l in &mut leases {
        l.renew(&*dir).await.expect("first renewal");
    }
    let users = rooms * members;
    eprintln!(
        "{nodes} nodes, {rooms} rooms x {members} members = {users} users, {gateways} gateways, \
         speedup {speedup}, {secs} s"
    );
    // Steady state, measured.
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(
            &mut redis::Client::open(url.as_str())
                .expect("url")
                .get_multiplexed_async_connection()
                .await
                .expect("connect"),
        )
        .await
        .expect("CONFIG RESETSTAT");
    let cpu0 = info(&url, "cpu").await;
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    let start = tokio::time::Instant::now();
    for (i, mut lease) in leases.into_iter().enumerate() {
        let dir = dir.clone();
        let every = period(3_333);
        tasks.push(tokio::spawn(async move {
            // Spread the rooms' renewals over the period.
            let offset = every.mul_f64(i as f64 / rooms.max(1) as f64);
            let mut tick = tokio::time::interval_at(start + offset, every);
            let mut renewals = 0u64;
            while Instant::now() < end {
                tick.tick().await;
                if lease.renew(&*dir).await.is_ok() {
                    renewals += 1;
                }
            }
            renewals
        }));
    }
    for n in 0..nodes {
        let dir = dir.clone();
        let (hb, sw) = (period(3_333), period(5_000));
        tasks.push(tokio::spawn(async move {
            let mut h = tokio::time::interval(hb);
            let mut s = tokio::time::interval(sw);
            let mut ops = 0u64;
            while Instant::now() < end {
                tokio::select! {
                    _ = h.tick() => {
                        let info = NodeInfo {
                            id: format!("n{n}"),
                            addr: format!("10.0.0.{n}:7000"),
                            load: 0,
                            draining: false,
                            heartbeat_until_ms: 0,
                        };
                        let _ = dir.register_node(info, 10_000).await;
                    }
                    _ = s.tick() => { let _ = dir.sweep().await; }
                }
                ops += 1;
            }
            ops
        }));
    }
    for g in 0..gateways {
        let dir = dir.clone();
        let every = period(10_000);
        tasks.push(tokio::spawn(async move {
            let mut t = tokio::time::interval(every);
            while Instant::now() < end {
                t.tick().await;
                let _ = dir.renew_resume_holder(&format!("g{g}"), 30_000).await;
            }
            0
        }));
    }
    let mut renewals = 0u64;
    for (i, t) in tasks.into_iter().enumerate() {
        let n = t.await.unwrap_or(0);
        if i < rooms {
            renewals += n;
        }
    }
    let el = t0.elapsed().as_secs_f64();
    let (stats, cmds, cpu1, mem) = (
        info(&url, "stats").await,
        info(&url, "commandstats").await,
        info(&url, "cpu").await,
        info(&url, "memory").await,
    );
    let (total, by) = total_calls(&cmds);
    let cpu = (field(&cpu1, "used_cpu_sys") + field(&cpu1, "used_cpu_user"))
        - (field(&cpu0, "used_cpu_sys") + field(&cpu0, "used_cpu_user"));
    let per_s = total as f64 / el;
    println!(
        "users {users} rooms {rooms} nodes {nodes} speedup {speedup}: {el:.1} s, {total} commands \
         = {per_s:.1}/s = {:.2} per 1,000 users per s = {:.2} per room per s; room renewals \
         {:.1}/s; net in {:.0} B/s out {:.0} B/s ({:.1} B per user per s); redis cpu {:.1} % of \
         one core; used_memory {:.1} MB ({:.0} B per user)",
        per_s * 1000.0 / users.max(1) as f64,
        per_s / rooms.max(1) as f64,
        renewals as f64 / el,
        field(&stats, "total_net_input_bytes") / el,
        field(&stats, "total_net_output_bytes") / el,
        (field(&stats, "total_net_input_bytes") + field(&stats, "total_net_output_bytes"))
            / el
            / users.max(1) as f64,
        cpu / el * 100.0,
        field(&mem, "used_memory") / 1e6,
        field(&mem, "used_memory") / users.max(1) as f64,
    );
    for (name, n) in by.iter().take(12) {
        println!("  {name:<16} {n:>9}  {:>9.1}/s", *n as f64 / el);
    }
    let _ = dir.delete_all_keys().await;
}
