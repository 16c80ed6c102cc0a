//! The load report against the real server: `plaza-load`'s per-room breakdown adds up to its
//! totals, every room has its snapshot p99, the server's tick p99 and (from the node's admin
//! `GET /v1/rooms`) its own tick p99, and the server's CPU and RSS come from the live
//! `/metrics` process metrics.

use std::time::Duration;

use plaza_tests::{start_plaza, test_config, ws_url};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_breaks_the_run_down_by_room_with_the_server_process() {
    let plaza = start_plaza(&test_config()).await;
    let metrics = format!("http://{}/metrics", plaza.admin_addr());
    let mut cfg = plaza_load::LoadConfig::new(ws_url(&plaza), 12);
    cfg.rooms = 3;
    cfg.duration = Duration::from_secs(4);
    cfg.ramp = Some(Duration::from_millis(300));
    cfg.progress = false;
    cfg.metrics_url = Some(metrics.clone());
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let sampler = tokio::spawn(plaza_load::server::sample(metrics.clone(), stop_rx));
    let admin = format!("http://{}", plaza.admin_addr());
    let views = tokio::spawn(async move {
        // While the bots are in their rooms (the run lasts 4 s): the first answer in which all
        // three rooms have ticked and sent frames, else the last one.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(4);
        loop {
            let v = plaza_load::server::room_views(&admin).await;
            let whole = v.as_ref().is_ok_and(|m| {
                m.len() == 3
                    && m.values().all(|r| {
                        r.tick_p99_ms.is_some_and(|t| t > 0.0)
                            && r.bytes_per_client_per_s.is_some_and(|b| b > 0.0)
                    })
            });
            if whole || tokio::time::Instant::now() >= deadline {
                break v;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut report = plaza_load::run(cfg).await.unwrap();
    stop.send(true).unwrap();
    let views = views.await.unwrap().expect("GET /v1/rooms");
    report.apply_room_views(&views);
    let server = sampler
        .await
        .unwrap()
        .expect("process metrics were scraped");
    report.servers.push(server.clone());

    assert_eq!(report.bots_connected, 12, "{}", report.summary());
    let rooms: Vec<(&str, u64, u64)> = report
        .per_room
        .iter()
        .map(|r| (r.room.as_str(), r.bots, r.connected))
        .collect();
    assert_eq!(
        rooms,
        [("load-0", 4, 4), ("load-1", 4, 4), ("load-2", 4, 4)]
    );
    assert_eq!(
        report.per_room.iter().map(|r| r.frames).sum::<u64>(),
        report.frames_received
    );
    for r in &report.per_room {
        assert!(r.snapshot_interval_ms.count > 0, "{r:?}");
        // 20 Hz broadcast: the p99 interval is around 50 ms, not seconds.
        assert!(r.snapshot_interval_ms.p99 < 1_000.0, "{r:?}");
        assert!(r.down_bytes_per_bot_per_s > 0.0, "{r:?}");
        assert!(r.server_tick_p99_ms.is_some_and(|t| t > 0.0), "{r:?}");
        // The room's own view from the node's admin API.
        assert!(r.room_tick_p99_ms.is_some_and(|t| t > 0.0), "{r:?}");
        assert!(r.node.is_some(), "{r:?}");
        assert!(
            r.room_bytes_per_client_per_s.is_some_and(|b| b > 0.0),
            "{r:?}"
        );
    }
    // The server is this test process: it used CPU and has resident memory.
    assert!(server.samples >= 3, "{server:?}");
    assert!(
        server.cpu_seconds > 0.0 && server.cpu_cores_avg > 0.0,
        "{server:?}"
    );
    assert!(server.rss_peak_mib > 1.0, "{server:?}");
    let md = report.to_markdown(&[]);
    assert!(md.contains("| load-2 | 4 | 4 / 0 / 0 |"), "{md}");
    assert!(md.contains(&format!("| {metrics} | ")), "{md}");
    plaza.shutdown().await;
}
