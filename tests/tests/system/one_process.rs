//! Plaza end to end in one process: real WebSockets through the gateway, the gRPC boundary to
//! the node, room actors, the embedded directory.

use std::time::Duration;

use plaza_proto::quant::POSITION_ERROR_M;
use plaza_tests::{Client, eventually, http_get, start_plaza, test_config, ws_url};

/// 50 clients in one room move; every client's decoded view holds the 49 others at their latest
/// positions within quantization error, within 500 ms of the last move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_clients_see_each_other_at_their_latest_positions() {
    // A class room shows each client its 32 nearest; this room shows everyone.
    let mut cfg = test_config();
    cfg.room.tier = plaza_ops::config::CapacityTier::Stadium;
    let plaza = start_plaza(&cfg).await;
    let url = ws_url(&plaza);
    let mut clients = Vec::new();
    for _ in 0..50 {
        let mut c = Client::connect(&url).await.unwrap();
        c.join("plaza-50").await.unwrap();
        clients.push(c);
    }
    // Everyone is placed at its spawn point, then moves twice (the last move must be seen).
    let spawns: Vec<[f32; 3]> = clients.iter().map(|c| c.spawn).collect();
    let targets: Vec<[f32; 3]> = (0..spawns.len())
        .map(|i| {
            let a = i as f32 * 0.7;
            let s = spawns[i];
            // Away from the fountain at the plaza's centre (the spawn is south of it).
            [s[0] + 0.2 * a.cos() + 0.0123, s[1], s[2] - 0.6 - 0.0456]
        })
        .collect();
    for (i, c) in clients.iter_mut().enumerate() {
        c.move_to(spawns[i], 1.0).await.unwrap();
    }
    for round in 0..2 {
        for (i, c) in clients.iter_mut().enumerate() {
            let mut p = targets[i];
            p[0] -= if round == 0 { 0.3 } else { 0.0 };
            c.move_to(p, 1.2 + round as f64 * 0.2).await.unwrap();
        }
    }
    let last_move = tokio::time::Instant::now();
    let entities: Vec<u32> = clients.iter().map(|c| c.entity).collect();
    // Read every client's frames concurrently until its view is complete.
    let mut tasks = Vec::new();
    for (i, mut c) in clients.into_iter().enumerate() {
        let entities = entities.clone();
        let targets = targets.clone();
        tasks.push(tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
            loop {
                let complete =
                    entities
                        .iter()
                        .enumerate()
                        .filter(|(j, _)| *j != i)
                        .all(|(j, e)| {
                            c.decoder().get(*e).is_some_and(|r| {
                                let p = r.pose.position_m();
                                let t = targets[j];
                                (0..3).all(|k| (p[k] - t[k]).abs() <= POSITION_ERROR_M + 1e-4)
                            })
                        });
                if complete {
                    return (tokio::time::Instant::now(), c);
                }
                if tokio::time::Instant::now() >= deadline {
                    let wrong: Vec<_> = entities
                        .iter()
                        .enumerate()
                        .filter(|(j, _)| *j != i)
                        .map(|(j, e)| {
                            (
                                j,
                                c.decoder().get(*e).map(|r| r.pose.position_m()),
                                targets[j],
                            )
                        })
                        .filter(|(_, seen, t)| {
                            !seen.is_some_and(|p| {
                                (0..3).all(|k| (p[k] - t[k]).abs() <= POSITION_ERROR_M + 1e-4)
                            })
                        })
                        .take(3)
                        .collect();
                    panic!(
                        "client {i} never saw everyone; corrections {:?}; first views {wrong:?}",
                        c.corrections
                    );
                }
                c.recv().await.unwrap().expect("connection open");
            }
        }));
    }
    let mut latest = last_move;
    for t in tasks {
        let (seen_at, c) = t.await.unwrap();
        assert_eq!(c.frame_errors, 0, "every frame applied");
        let avatars = c.decoder().entities().filter(|r| r.kind == 0).count();
        assert_eq!(
            avatars, 49,
            "exactly the 49 other avatars (props are entities too)"
        );
        latest = latest.max(seen_at);
    }
    let took = latest.duration_since(last_move);
    assert!(
        took <= Duration::from_millis(500),
        "views converged after {took:?}"
    );
    plaza.shutdown().await;
}

/// The admin endpoints answer; metrics carry traffic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoints_answer() {
    let plaza = start_plaza(&test_config()).await;
    let admin = plaza.admin_addr();
    assert_eq!(http_get(admin, "/healthz").await.unwrap().0, 200);
    assert_eq!(http_get(admin, "/readyz").await.unwrap().0, 200);
    let mut c = Client::connect(&ws_url(&plaza)).await.unwrap();
    c.join("metrics-room").await.unwrap();
    c.move_to([1.0, 0.0, 1.0], 1.0).await.unwrap();
    c.pump_for(Duration::from_millis(300)).await.unwrap();
    let body = plaza_tests::scrape_metrics(admin).await.unwrap();
    for name in [
        "plaza_room_tick_duration_seconds_bucket",
        "plaza_rooms ",
        "plaza_frames_sent_total",
        "plaza_gateway_sent_bytes_total",
        "plaza_gateway_received_bytes_total",
        "plaza_gateway_sessions",
    ] {
        assert!(body.contains(name), "missing {name} in\n{body}");
    }
    let (status, peers) = http_get(admin, "/v1/peers").await.unwrap();
    assert_eq!(status, 200);
    assert!(peers.contains(&c.wallet), "{peers}");
    plaza.shutdown().await;
}

/// A client that leaves and joins again gets a fresh keyframe and a consistent view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leave_then_join_again() {
    let plaza = start_plaza(&test_config()).await;
    let url = ws_url(&plaza);
    let mut a = Client::connect(&url).await.unwrap();
    let mut b = Client::connect(&url).await.unwrap();
    a.join("lj").await.unwrap();
    let eb = b.join("lj").await.unwrap();
    a.pump_for(Duration::from_millis(200)).await.unwrap();
    assert!(a.decoder().get(eb).is_some());
    b.send(plaza_proto::pb::client_envelope::Body::Leave(
        plaza_proto::pb::Leave {},
    ))
    .await
    .unwrap();
    let mut gone = false;
    for _ in 0..50 {
        a.recv().await.unwrap();
        if a.decoder().get(eb).is_none() {
            gone = true;
            break;
        }
    }
    assert!(gone, "b's entity left a's view");
    let eb2 = b.join("lj").await.unwrap();
    b.pump_for(Duration::from_millis(200)).await.unwrap();
    assert!(b.decoder().get(a.entity).is_some());
    assert_eq!(b.frame_errors, 0);
    let _ = eb2;
    assert!(eventually(Duration::from_secs(1), || true).await);
    plaza.shutdown().await;
}
