//! Reliability row L2, the join burst: Redis + 3 `plaza node` processes + 1 `plaza gateway` on
//! loopback with the shipped defaults ([`ClusterOpts::default`]), and 200 `plaza-load` bots that
//! all join one room within 1 s. The room must be activated exactly once (one `activate` line
//! and one epoch on the nodes' event logs, single activation holding), every bot must be in the
//! room within 5 s of the burst's start, and the gateway's pre-auth pool
//! (`plaza_gateway_edge_preauth_connections`, sampled every 10 ms through the burst) must never
//! exceed its budget (`gateway.max_preauth`, shipped 512) and must drain back to 0.
//!
//! `PLAZA_CLUSTER_BOTS` raises the bot count (the burst stays 1 s).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use plaza_load::prom::parse_sample;
use plaza_ops::config::PlazaConfig;
use plaza_tests::cluster::{Cluster, ClusterOpts, assert_fault_held, wait_until};
use plaza_tests::scrape_metrics;

const PREAUTH: &str = "plaza_gateway_edge_preauth_connections";
const REFUSALS: &str = "plaza_gateway_edge_refusals_total";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_200_joins_into_one_room_activates_it_once() {
    // Alone: its bound is a latency under load (every bot in the room within 5 s).
    let c = Cluster::start(ClusterOpts {
        alone: true,
        ..ClusterOpts::default()
    })
    .await
    .unwrap();
    let budget = PlazaConfig::defaults().gateway.max_preauth as f64;
    let mut cfg = c.load_config(200, 1, "burst-", 10);
    cfg.ramp = Some(Duration::from_secs(1));
    let bots = cfg.bots;
    let refusals_before = parse_sample(&scrape_metrics(c.gateway.admin).await.unwrap(), REFUSALS);

    // The pre-auth gauge, sampled through the burst: its highest value and how many samples.
    let stop = Arc::new(AtomicBool::new(false));
    let (peak, samples) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let sampler = {
        let (stop, peak, samples) = (stop.clone(), peak.clone(), samples.clone());
        let admin = c.gateway.admin;
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(text) = scrape_metrics(admin).await
                    && let Some(v) = parse_sample(&text, PREAUTH)
                {
                    peak.fetch_max(v as u64, Ordering::Relaxed);
                    samples.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };

    let load = tokio::spawn(plaza_load::run(cfg));
    let all_in = wait_until(Duration::from_secs(15), || async {
        c.peers_count().await.unwrap_or(0) >= bots
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    sampler.await.unwrap();
    let (peak, samples) = (
        peak.load(Ordering::Relaxed),
        samples.load(Ordering::Relaxed),
    );
    eprintln!(
        "join burst: {bots} bots in 1 s, all in the room after {all_in:?}; pre-auth peak {peak} \
         of {budget} over {samples} samples"
    );
    assert!(
        all_in.is_some_and(|d| d <= Duration::from_secs(5)),
        "not every bot joined within 5 s of the burst ({all_in:?}): {} of {bots}\ngateway \
         log:\n{}",
        c.peers_count().await.unwrap_or(0),
        c.gateway.log_tail(20)
    );
    assert!(
        samples >= 20,
        "the pre-auth gauge was sampled {samples} times"
    );
    assert!(
        peak as f64 <= budget,
        "pre-auth pool over budget: {peak} > {budget}"
    );

    let report = load.await.unwrap().unwrap();
    eprintln!(
        "connect_ms p50 {:.0} p99 {:.0} max {:.0}; connect failures {}",
        report.connect_ms.p50,
        report.connect_ms.p99,
        report.connect_ms.max,
        report.connect_failures
    );
    // Every bot's own connect + negotiate + join took under 5 s too, at the first attempt.
    assert!(
        report.connect_ms.max <= 5_000.0,
        "a join took {:.0} ms",
        report.connect_ms.max
    );
    assert_eq!(report.connect_failures, 0, "{:?}", report.connect_errors);
    assert_eq!(report.decode_errors, 0);
    let sum = assert_fault_held("join burst", &report, &c.event_logs());
    assert_eq!(
        (sum.rooms, sum.epochs, sum.activations),
        (1, 1, 1),
        "exactly one activation of the one room: {sum:?}"
    );

    // No socket was refused at the edge, and the pre-auth pool is empty again (nothing leaked).
    // (Bounded wait: the last bots' sockets may still be closing.)
    let drained = wait_until(Duration::from_secs(5), || async {
        let text = scrape_metrics(c.gateway.admin).await.unwrap_or_default();
        parse_sample(&text, PREAUTH) == Some(0.0)
    })
    .await;
    let text = scrape_metrics(c.gateway.admin).await.unwrap();
    assert_eq!(
        parse_sample(&text, REFUSALS),
        refusals_before,
        "edge refusals"
    );
    assert!(
        drained.is_some(),
        "pre-auth sockets left after the run: {:?}",
        parse_sample(&text, PREAUTH)
    );
}
