//! Multi-process gateway faults (REQUIREMENTS.md F2 and a gateway roll), on the shipped defaults:
//! Redis + 3 nodes + **2 gateways**, the bots spread over both (`plaza-load` with two gateway
//! URLs: a bot whose gateway goes away comes back through the next one with its resume token).
//!
//! * kill -9 of a gateway: its clients' sockets drop with no close frame; they reconnect to the
//!   other gateway with their resume tokens and get their session back (same session id, same
//!   entity: the entry a live session keeps in the directory) within 5 s.
//! * SIGTERM of a gateway: it tells each client `RoomStatus{RECONNECT, reconnect_after_ms}`
//!   with a delay drawn from `gateway.reconnect_window_ms` (10 s shipped), closes 1001 and exits;
//!   the bots honour the hint, so their reconnects spread over the window.
//!
//! Both: no bot lost, no 4004, the bots' ping RTT p99 under 1 s, single activation.

use std::time::Duration;

use plaza_proto::pb;
use plaza_tests::Client;
use plaza_tests::cluster::{Cluster, ClusterOpts, assert_fault_held, wait_until};

/// `gateway.reconnect_window_ms`, shipped default.
const WINDOW: Duration = Duration::from_secs(10);

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_gateway_s_clients_resume_through_the_other_with_their_entity() {
    let mut c = Cluster::start(ClusterOpts {
        gateways: 2,
        ..ClusterOpts::default()
    })
    .await
    .unwrap();
    let cfg = c.load_config(60, 6, "gk-", 20);
    let bots = cfg.bots;
    // Bots 0, 2, 4, … start on the first gateway.
    let on_victim = bots.div_ceil(2);
    let load = tokio::spawn(plaza_load::run(cfg));
    c.wait_all_online(bots).await;
    let urls = c.ws_urls();

    // A probe on the gateway to be killed, in a bot room.
    let mut probe = Client::connect(&urls[0]).await.unwrap();
    let entity = probe.join("gk-0").await.unwrap();
    probe.pump_for(Duration::from_millis(300)).await.unwrap();
    let (session, wallet, token) = (
        probe.session_id,
        probe.wallet.clone(),
        probe.resume_token.clone(),
    );

    c.gateway.kill9();
    let killed = tokio::time::Instant::now();
    eprintln!("kill -9 gw with {on_victim} bots and the probe on it");
    // The probe's socket is gone (no close frame).
    let gone = probe.until_closed().await;
    assert!(
        gone.as_ref().map_or(true, |cl| cl.code.is_none()),
        "{gone:?}"
    );

    // Through the other gateway, with the token: the same session and entity, within 5 s.
    let mut again = None;
    while killed.elapsed() < Duration::from_secs(5) {
        let Ok(mut p) = Client::connect_raw(&urls[1]).await else {
            continue;
        };
        if p.negotiate(vec![pb::ProtocolVersion { major: 1, minor: 0 }], &token)
            .await
            .is_err()
        {
            continue;
        }
        again = Some(p);
        break;
    }
    let mut p = again.expect("the other gateway took the probe back");
    assert_eq!(
        (p.session_id, p.wallet.as_str()),
        (session, wallet.as_str()),
        "same session"
    );
    let e2 = tokio::time::timeout(Duration::from_secs(5), p.wait_joined())
        .await
        .expect("rejoined its room")
        .unwrap();
    let took = killed.elapsed();
    eprintln!("probe back in its room through gw2 after {took:?}");
    assert_eq!(e2, entity, "the entity is kept");
    assert!(took <= Duration::from_secs(5), "probe resumed in {took:?}");
    p.pump_for(Duration::from_millis(300)).await.unwrap();
    assert_eq!(p.frame_errors, 0);

    // Every bot online again (through the live gateway).
    let whole = wait_until(Duration::from_secs(10), || async {
        http_peers(&c).await == Some(bots + 1)
    })
    .await;
    eprintln!("presence whole {whole:?} after the kill");
    p.close().await;

    let report = load.await.unwrap().unwrap();
    assert_fault_held("gateway kill -9", &report, &c.event_logs());
    let reconnects = report.resumes - report.resumes_in_session;
    assert!(
        reconnects as usize >= on_victim,
        "every bot of the killed gateway resumed by reconnect: {reconnects} < {on_victim}"
    );
    assert!(
        report.resume_ms.max <= 5_000.0,
        "bots resumed within 5 s: resume_ms max {:.0}",
        report.resume_ms.max
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_gateway_spreads_its_clients_reconnects_over_the_window() {
    let mut c = Cluster::start(ClusterOpts {
        gateways: 2,
        ..ClusterOpts::default()
    })
    .await
    .unwrap();
    let cfg = c.load_config(60, 6, "gt-", WINDOW.as_secs() + 16);
    let bots = cfg.bots;
    let on_victim = bots.div_ceil(2);
    let load = tokio::spawn(plaza_load::run(cfg));
    c.wait_all_online(bots).await;

    let termed = unix_ms();
    c.gateway.sigterm().unwrap();
    eprintln!("SIGTERM gw with {on_victim} bots on it");
    // It exits once its clients are gone.
    let exit = c.gateway.wait_exit(WINDOW + Duration::from_secs(10)).await;
    eprintln!("gw exited {exit:?} after {} ms", unix_ms() - termed);
    assert!(
        exit.is_some_and(|s| s.success()),
        "the rolled gateway exits cleanly: {exit:?}\n{}",
        c.gateway.log_tail(20)
    );

    let report = load.await.unwrap().unwrap();
    assert_fault_held("gateway SIGTERM", &report, &c.event_logs());
    let delays: Vec<u64> = report
        .reconnect_times_unix_ms
        .iter()
        .map(|t| t.saturating_sub(termed))
        .collect();
    eprintln!("{} reconnects, ms after SIGTERM: {delays:?}", delays.len());
    assert!(
        delays.len() >= on_victim,
        "every bot of the rolled gateway reconnected: {} < {on_victim}",
        delays.len()
    );
    // Spread over the window (uniform draws: the 10th..90th percentile span is ~0.8 × window),
    // and all within the window plus reconnect time.
    let pct = |q: f64| delays[((delays.len() - 1) as f64 * q).round() as usize];
    let (p10, p90, last) = (pct(0.1), pct(0.9), *delays.last().unwrap());
    eprintln!("reconnect delay p10 {p10} ms, p90 {p90} ms, max {last} ms");
    let window_ms = WINDOW.as_millis() as u64;
    assert!(
        p90 - p10 >= window_ms * 2 / 5,
        "reconnects spread over the window: p10 {p10} p90 {p90} ms"
    );
    assert!(
        last <= window_ms + 5_000,
        "every reconnect within the window + 5 s: {last} ms"
    );
}

/// Online users as the live (second) gateway's `GET /v1/peers` lists them.
async fn http_peers(c: &Cluster) -> Option<usize> {
    let (status, body) = plaza_tests::http_get(c.more_gateways[0].admin, "/v1/peers")
        .await
        .ok()?;
    (status == 200).then(|| body.matches("\"address\":").count())
}
