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

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use plaza_directory::{
    Directory, DirectoryError, NodeInfo, PresenceEntry, RedisDirectory, RedisOptions, Renewal,
    RoomLease, Sources,
};
use tokio::sync::Semaphore;
use tokio::time::MissedTickBehavior;

const USAGE: &str = "usage: dirload URL NODES ROOMS MEMBERS SECS [SPEEDUP] [GATEWAYS] \
                     (URL: one redis:// or rediss:// server)";

/// Rooms set up at once: bounds the setup burst so already-set-up rooms keep renewing on time.
const SETUP_CONCURRENCY: usize = 16;

fn arg<T: std::str::FromStr>(args: &[String], i: usize, name: &str, d: T) -> Result<T, String> {
    match args.get(i) {
        None => Ok(d),
        Some(s) => s
            .parse()
            .map_err(|_| format!("{name} must be a number, got {s:?}; {USAGE}")),
    }
}

async fn info(url: &str, section: &str) -> Result<String, String> {
    let client = redis::Client::open(url).map_err(|e| format!("redis url {url:?}: {e}"))?;
    let mut con = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| format!("connect to {url} for INFO: {e}"))?;
    redis::cmd("INFO")
        .arg(section)
        .query_async(&mut con)
        .await
        .map_err(|e| format!("INFO {section}: {e}"))
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

/// What one room's renewal loop saw inside the measured window.
#[derive(Debug, Default)]
struct RoomStats {
    renewals: u64,
    /// Latency of every renewal in the window, microseconds.
    latencies_us: Vec<u32>,
    /// Renewals that failed without losing the lease (timeouts, connection errors).
    failures: u64,
    /// Leases that lapsed and were claimed again (the shard did not keep up).
    lost: u64,
}

/// The shared clock of the run: `measuring` from the reset of Redis's counters, `stop` at the end.
#[derive(Debug, Default)]
struct Window {
    measuring: AtomicBool,
    stop: AtomicBool,
    ready: AtomicUsize,
}

fn node_info(n: usize) -> NodeInfo {
    NodeInfo {
        id: format!("n{n}"),
        addr: format!("10.0.0.{n}:7000"),
        load: 0,
        draining: false,
        heartbeat_until_ms: 0,
    }
}

async fn register_members(
    dir: &RedisDirectory,
    r: usize,
    members: usize,
    lease: &RoomLease,
) -> Result<(), DirectoryError> {
    let p = lease.placement();
    for m in 0..members {
        let e = PresenceEntry {
            wallet: format!("0x{r:06x}{m:06x}"),
            entity: m as u32 + 1,
            room: p.room.clone(),
            sources: Sources::ROOM,
            node: p.node.clone(),
            profile_version: 0,
            lease_until_ms: 0,
        };
        dir.presence_register(e, lease.epoch(), 15_000).await?;
    }
    Ok(())
}

/// One room: claim, register its members (under the setup permit), then renew its lease and
/// presence every renewal period until the run stops, as a node's room actor does.
async fn room(
    dir: Arc<RedisDirectory>,
    setup: Arc<Semaphore>,
    w: Arc<Window>,
    (r, nodes, members): (usize, usize, usize),
    every: Duration,
) -> Result<RoomStats, String> {
    let (lease_ttl, presence_ttl) = (Duration::from_secs(10), Duration::from_secs(15));
    let (room, node) = (format!("room-{r}"), format!("n{}", r % nodes));
    let mut lease = {
        let _permit = setup.acquire().await.map_err(|e| e.to_string())?;
        let mut lease = RoomLease::claim(&*dir, &room, &node, lease_ttl, Duration::from_secs(1))
            .await
            .map_err(|e| format!("claim {room}: {e}"))?;
        lease.set_presence_ttl(Some(presence_ttl));
        register_members(&dir, r, members, &lease)
            .await
            .map_err(|e| format!("register the members of {room}: {e}"))?;
        // The first renewal chains the members (once per activation).
        lease
            .renew(&*dir)
            .await
            .map_err(|e| format!("first renewal of {room}: {e}"))?;
        lease
    };
    w.ready.fetch_add(1, Ordering::SeqCst);
    let mut st = RoomStats::default();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tick.tick().await;
    while !w.stop.load(Ordering::SeqCst) {
        tick.tick().await;
        let measuring = w.measuring.load(Ordering::SeqCst);
        let sent = Instant::now();
        match lease.renew_or_reclaim(&*dir).await {
            Ok(Renewal::Renewed) if measuring => {
                st.renewals += 1;
                let us = u32::try_from(sent.elapsed().as_micros()).unwrap_or(u32::MAX);
                st.latencies_us.push(us);
            }
            Ok(Renewal::Renewed) => {}
            Ok(Renewal::Reclaimed { .. }) => {
                // The lease lapsed: a real node reactivates the room and re-registers its
                // members under the new epoch; so does the harness, and counts it.
                st.lost += 1;
                if let Err(e) = register_members(&dir, r, members, &lease).await {
                    st.failures += u64::from(measuring);
                    eprintln!("dirload: re-register the members of {room}: {e}");
                }
            }
            Err(_) => st.failures += u64::from(measuring),
        }
    }
    Ok(st)
}

fn percentile(sorted: &[u32], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    f64::from(sorted[i.min(sorted.len() - 1)]) / 1000.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dirload: error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let url = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "redis://127.0.0.1:6379/".into());
    if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
        return Err(format!(
            "{url:?} is not one server: the harness measures one shard and reads its \
             INFO; {USAGE}"
        ));
    }
    let nodes: usize = arg(&args, 2, "NODES", 3)?;
    let rooms: usize = arg(&args, 3, "ROOMS", 6)?;
    let members: usize = arg(&args, 4, "MEMBERS", 50)?;
    let secs: u64 = arg(&args, 5, "SECS", 20)?;
    let speedup: f64 = arg(&args, 6, "SPEEDUP", 1.0)?;
    let gateways: usize = arg(&args, 7, "GATEWAYS", 1)?;
    if nodes == 0 || rooms == 0 || secs == 0 || !(speedup.is_finite() && speedup > 0.0) {
        return Err(format!(
            "NODES, ROOMS and SECS must be at least 1, SPEEDUP above 0; {USAGE}"
        ));
    }
    if members > 0xff_ffff || rooms > 0xff_ffff {
        return Err("at most 16,777,215 rooms and members per room".into());
    }
    let period = |ms: u64| Duration::from_secs_f64(ms as f64 / 1000.0 / speedup);
    let opts = RedisOptions {
        prefix: format!("dirload:{}:", std::process::id()),
        ..RedisOptions::default()
    };
    let dir = Arc::new(
        RedisDirectory::connect_with(&url, 0, opts)
            .await
            .map_err(|e| format!("connect to {url}: {e}"))?,
    );
    let result = measure(
        &dir,
        &url,
        (nodes, rooms, members, secs, speedup, gateways),
        period,
    )
    .await;
    // Clean up whatever happened, then report.
    if let Err(e) = dir.delete_all_keys().await {
        eprintln!("dirload: could not delete the run's keys: {e}");
    }
    result
}

type Shape = (usize, usize, usize, u64, f64, usize);

async fn measure(
    dir: &Arc<RedisDirectory>,
    url: &str,
    (nodes, rooms, members, secs, speedup, gateways): Shape,
    period: impl Fn(u64) -> Duration,
) -> Result<(), String> {
    for n in 0..nodes {
        dir.register_node(node_info(n), 10_000)
            .await
            .map_err(|e| format!("register node n{n}: {e}"))?;
    }
    let w = Arc::new(Window::default());
    let setup = Arc::new(Semaphore::new(SETUP_CONCURRENCY));
    let t_setup = Instant::now();
    let room_tasks: Vec<_> = (0..rooms)
        .map(|r| {
            tokio::spawn(room(
                dir.clone(),
                setup.clone(),
                w.clone(),
                (r, nodes, members),
                period(3_333),
            ))
        })
        .collect();
    let mut other = Vec::new();
    for n in 0..nodes {
        let (dir, w) = (dir.clone(), w.clone());
        let (hb, sw) = (period(3_333), period(5_000));
        other.push(tokio::spawn(async move {
            let mut h = tokio::time::interval(hb);
            let mut s = tokio::time::interval(sw);
            h.set_missed_tick_behavior(MissedTickBehavior::Delay);
            s.set_missed_tick_behavior(MissedTickBehavior::Delay);
            while !w.stop.load(Ordering::SeqCst) {
                tokio::select! {
                    _ = h.tick() => { let _ = dir.register_node(node_info(n), 10_000).await; }
                    _ = s.tick() => { let _ = dir.sweep().await; }
                }
            }
        }));
    }
    // Wait for every room to be set up (a failed setup ends the run with its error).
    while w.ready.load(Ordering::SeqCst) < rooms {
        if let Some(t) = room_tasks.iter().find(|t| t.is_finished()) {
            let _ = t;
            w.stop.store(true, Ordering::SeqCst);
            for t in room_tasks {
                match t.await {
                    Ok(Err(e)) => return Err(format!("setup failed: {e}")),
                    Err(e) => return Err(format!("setup task failed: {e}")),
                    Ok(Ok(_)) => {}
                }
            }
            return Err("setup ended early".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for g in 0..gateways {
        for m in 0..(rooms * members / gateways.max(1)).min(10_000) {
            dir.put_resume_held(&format!("g{g}"), &format!("t{m}"), vec![0; 48], 30_000)
                .await
                .map_err(|e| format!("held resume entry of gateway g{g}: {e}"))?;
        }
        let (dir, w, every) = (dir.clone(), w.clone(), period(10_000));
        other.push(tokio::spawn(async move {
            let mut t = tokio::time::interval(every);
            t.set_missed_tick_behavior(MissedTickBehavior::Delay);
            while !w.stop.load(Ordering::SeqCst) {
                t.tick().await;
                let _ = dir.renew_resume_holder(&format!("g{g}"), 30_000).await;
            }
        }));
    }
    let users = rooms * members;
    eprintln!(
        "{nodes} nodes, {rooms} rooms x {members} members = {users} users, {gateways} gateways, \
         speedup {speedup}, {secs} s (set up in {:.1} s)",
        t_setup.elapsed().as_secs_f64()
    );
    // Warm up one renewal period, then measure the steady state.
    tokio::time::sleep(period(3_333)).await;
    let mut con = redis::Client::open(url)
        .map_err(|e| format!("redis url: {e}"))?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| format!("connect to {url}: {e}"))?;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut con)
        .await
        .map_err(|e| format!("CONFIG RESETSTAT: {e}"))?;
    let cpu0 = info(url, "cpu").await?;
    let t0 = Instant::now();
    w.measuring.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(secs)).await;
    w.measuring.store(false, Ordering::SeqCst);
    let el = t0.elapsed().as_secs_f64();
    let (stats, cmds, cpu1, mem) = (
        info(url, "stats").await?,
        info(url, "commandstats").await?,
        info(url, "cpu").await?,
        info(url, "memory").await?,
    );
    w.stop.store(true, Ordering::SeqCst);
    let mut all = RoomStats::default();
    for t in room_tasks {
        let st = t
            .await
            .map_err(|e| format!("room task failed: {e}"))?
            .map_err(|e| format!("room: {e}"))?;
        all.renewals += st.renewals;
        all.failures += st.failures;
        all.lost += st.lost;
        all.latencies_us.extend(st.latencies_us);
    }
    for t in other {
        t.await
            .map_err(|e| format!("node or gateway task failed: {e}"))?;
    }
    all.latencies_us.sort_unstable();
    let (total, by) = total_calls(&cmds);
    let cpu = (field(&cpu1, "used_cpu_sys") + field(&cpu1, "used_cpu_user"))
        - (field(&cpu0, "used_cpu_sys") + field(&cpu0, "used_cpu_user"));
    let per_s = total as f64 / el;
    let target = rooms as f64 / period(3_333).as_secs_f64();
    println!(
        "users {users} rooms {rooms} nodes {nodes} speedup {speedup}: {el:.1} s, {total} commands \
         = {per_s:.1}/s = {:.2} per 1,000 users per s = {:.2} per room per s; room renewals \
         {:.1}/s of {target:.1}/s due, latency p50 {:.2} ms p99 {:.2} ms max {:.2} ms, {} failed, \
         {} leases lost; net in {:.0} B/s out {:.0} B/s ({:.1} B per user per s); redis cpu \
         {:.1} % of one core; used_memory {:.1} MB ({:.0} B per user)",
        per_s * 1000.0 / users.max(1) as f64,
        per_s / rooms as f64,
        all.renewals as f64 / el,
        percentile(&all.latencies_us, 0.5),
        percentile(&all.latencies_us, 0.99),
        percentile(&all.latencies_us, 1.0),
        all.failures,
        all.lost,
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
    Ok(())
}
