//! Multi-process process pause (REQUIREMENTS.md F7): a node is frozen with SIGSTOP for twice the
//! lease TTL, then continued with SIGCONT. While it is frozen its leases lapse, and a client
//! joining one of its rooms gets that room activated on a live node under a newer epoch. When the
//! frozen node wakes, its room activations find their lease deadline passed and commit nothing —
//! no presence write, no frame — until their directory writer either finds the lease taken (the
//! room stops; the gateway moves its sessions to the new activation) or reclaims a lease nobody
//! took. The event logs (directory commits and broadcasts) must show no two epochs of a room
//! committing at once, and no bot may be lost.
//!
//! Run on the shipped defaults (lease TTL 10 s: a 20 s freeze), where the frozen node's sessions
//! must be back on live nodes within lease TTL + 5 s while it is still frozen, and as an extra
//! fast variant (lease TTL 2 s).

use std::time::Duration;

use plaza_tests::Client;
use plaza_tests::cluster::{Cluster, ClusterOpts, assert_fault_held, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_node_commits_nothing_after_it_wakes() {
    paused_node(ClusterOpts::default(), "ps-").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_node_commits_nothing_after_it_wakes_fast() {
    paused_node(ClusterOpts::fast(), "pf-").await;
}

async fn paused_node(opts: ClusterOpts, prefix: &str) {
    let c = Cluster::start(opts).await.unwrap();
    let ttl = Duration::from_millis(c.opts().lease_ttl_ms);
    let cfg = c.load_config(60, 6, prefix, 4 * ttl.as_secs() + 10);
    let (bots, rooms) = (cfg.bots, cfg.rooms);
    let room_ids: Vec<String> = (0..rooms).map(|i| format!("{prefix}{i}")).collect();
    let load = tokio::spawn(plaza_load::run(cfg));
    c.wait_all_online(bots).await;

    let placed = c.placements(&room_ids).await;
    let by_node = c.presence_by_node().await.unwrap();
    let (victim, _) = by_node
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(id, n)| (id.clone(), *n))
        .expect("some node hosts sessions");
    let taken = placed
        .iter()
        .find(|(_, n)| **n == victim)
        .map(|(r, _)| r.clone())
        .expect("the victim hosts a room");
    let idx = c.node_index(&victim).expect("victim is one of ours");

    // Freeze the node for twice the lease TTL: the fault's duration, not a wait for a condition.
    c.nodes[idx].signal("STOP").unwrap();
    let stopped = tokio::time::Instant::now();
    eprintln!("SIGSTOP {victim}; {taken} will be taken over");
    // While it is frozen, its sessions come back on live nodes (the gateway sees the node
    // silent, the lease lapses, the rooms are activated elsewhere), within lease TTL + 5 s.
    let back = wait_until(ttl * 2, || async {
        let Ok(m) = c.presence_by_node().await else {
            return false;
        };
        !m.contains_key(&victim) && m.values().sum::<usize>() >= bots
    })
    .await;
    eprintln!(
        "presence whole on live nodes after {back:?} (frozen {:?})",
        ttl * 2
    );
    if ttl * 2 > ttl + Duration::from_secs(5) {
        assert!(
            back.is_some_and(|b| b <= ttl + Duration::from_secs(5)),
            "the frozen node's sessions not back within lease TTL + 5 s ({back:?}): {:?}\ngateway log:\n{}",
            c.presence_by_node().await,
            c.gateway.log_tail(20)
        );
    }
    tokio::time::sleep((ttl * 2).saturating_sub(stopped.elapsed())).await;

    // A newcomer's join activates the room on a live node (the frozen node's lease lapsed).
    let mut probe = Client::connect(&c.ws_url()).await.unwrap();
    probe.join(&taken).await.unwrap();
    let now = c.placements(std::slice::from_ref(&taken)).await;
    assert!(
        now.get(&taken).is_some_and(|n| *n != victim),
        "{taken} activated elsewhere while {victim} is frozen: {now:?}"
    );

    c.nodes[idx].signal("CONT").unwrap();
    // The woken activation of `taken` withholds its ticks, learns the lease is lost and stops;
    // its sessions move to the new activation. Everyone is present again.
    let deadline = tokio::time::Instant::now() + ttl + Duration::from_secs(8);
    loop {
        probe
            .pump_for(Duration::from_millis(100))
            .await
            .expect("the probe stays connected");
        if c.peers_count().await.ok() == Some(bots + 1) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "presence not whole after the wake-up: {:?}\n{}",
            c.presence_by_node().await,
            c.nodes[idx].log_tail(30)
        );
    }
    let log = std::fs::read_to_string(&c.nodes[idx].log).unwrap();
    assert!(
        log.contains("ticks withheld"),
        "the woken node withheld its ticks:\n{}",
        c.nodes[idx].log_tail(40)
    );
    probe.close().await;

    let report = load.await.unwrap().unwrap();
    // No bot lost or failed, no 4004, ping RTT p99 < 1 s (the gateway answers pings
    // throughout), single activation: the woken node committed nothing after the takeover.
    let sum = assert_fault_held("node SIGSTOP 2 x lease TTL", &report, &c.event_logs());
    if ttl * 2 > ttl + Duration::from_secs(5) {
        // From each moved bot's last frame of the frozen node to its `Joined` on the new
        // activation (frames follow): within lease TTL + 5 s.
        assert!(
            report.resume_ms.p99 <= (ttl + Duration::from_secs(5)).as_millis() as f64,
            "resume_ms p99 {:.0} over lease TTL + 5 s",
            report.resume_ms.p99
        );
    }
    assert!(
        sum.rooms_with_several_epochs >= 1,
        "{taken} committed under two epochs, one after the other: {sum:?}"
    );
}
