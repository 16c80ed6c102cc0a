//! During a `plaza-load` run, `/metrics` exposes every metric operators rely on, with non-zero
//! values where traffic flowed; no label carries a wallet, session or entity id.

use std::time::Duration;

use plaza_tests::{Client, scrape_metrics, start_plaza, test_config, ws_url};

/// The value of the first sample line that starts with `prefix` (summed over label sets).
fn value(body: &str, prefix: &str) -> f64 {
    body.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_carry_the_traffic_of_a_load_run() {
    let plaza = start_plaza(&test_config()).await;
    let url = ws_url(&plaza);
    let admin = plaza.admin_addr();
    let mut cfg = plaza_load::LoadConfig::new(url.clone(), 40);
    cfg.rooms = 2;
    cfg.duration = Duration::from_secs(4);
    cfg.ramp = Some(Duration::from_millis(500));
    cfg.progress = false;
    cfg.metrics_url = Some(format!("http://{admin}/metrics"));
    let run = tokio::spawn(plaza_load::run(cfg));

    // One client sends a move the room must reject, so the rejection counter has a series.
    let mut bad = Client::connect(&url).await.unwrap();
    bad.join("load-0").await.unwrap();
    bad.move_to([f32::NAN, 0.0, 0.0], 1.0).await.unwrap();
    bad.pump_for(Duration::from_millis(300)).await.unwrap();
    assert!(!bad.corrections.is_empty(), "the NaN move was corrected");

    // Scrape mid-run, once every bot is attached and frames flow (bounded wait).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mid = loop {
        let body = scrape_metrics(admin).await.unwrap();
        if value(&body, "plaza_node_sessions ") >= 40.0
            && value(&body, "plaza_gateway_frames_sent_total") > 0.0
        {
            break body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run never got going:\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let report = run.await.unwrap().unwrap();
    assert_eq!(report.bots_connected, 40);
    assert_eq!(report.decode_errors, 0);

    for (prefix, what) in [
        (
            "plaza_room_tick_duration_seconds_count",
            "room tick histogram",
        ),
        ("plaza_rooms ", "rooms per node"),
        ("plaza_node_sessions ", "sessions per node"),
        ("plaza_gateway_sessions ", "sessions per gateway"),
        ("plaza_gateway_received_bytes_total", "bytes in"),
        ("plaza_gateway_sent_bytes_total", "bytes out"),
        ("plaza_gateway_frames_sent_total", "frames sent to clients"),
        ("plaza_frames_sent_total", "frames produced"),
        (
            "plaza_inputs_rejected_total{reason=\"non_finite\"}",
            "rejected inputs by reason",
        ),
        (
            "plaza_placement_events_total{event=\"activated\"}",
            "placement events",
        ),
    ] {
        assert!(
            value(&mid, prefix) > 0.0,
            "{what}: {prefix} is zero or missing in\n{mid}"
        );
    }
    // Classic text (no Accept header): counters are typed under their _total name.
    for family in [
        "plaza_room_tick_overruns",
        "plaza_bandwidth_deferrals",
        "plaza_gateway_resumes",
        "plaza_directory_errors",
        "plaza_gateway_closes",
    ] {
        assert!(
            mid.contains(&format!("# TYPE {family}_total counter")),
            "{family} exposed"
        );
    }
    // Bounded labels only: no wallet ("guest-..."), no long ids.
    for line in mid.lines().filter(|l| !l.starts_with('#')) {
        assert!(!line.contains("guest-"), "a wallet in a label: {line}");
    }
    let after = scrape_metrics(admin).await.unwrap();
    assert!(
        value(&after, "plaza_gateway_closes_total") > 0.0,
        "closes counted"
    );
    plaza.shutdown().await;
}
