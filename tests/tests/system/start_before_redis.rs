//! A gateway and a node started before Redis (a Helm install where the pods win the race)
//! come up once Redis does, with the shipped retry settings: `/healthz` answers meanwhile,
//! `/readyz` is 503 with the reason, and both turn ready within the documented bound
//! (`docs/OPERATIONS.md`, "Start-up and readiness": the longest backoff,
//! `directory.connect_backoff_max_ms` = 5 s, plus the start of the roles) after Redis starts;
//! then a client joins a room through the gateway.

use std::time::{Duration, Instant};

use plaza_directory::test_util::RedisServer;
use plaza_tests::cluster::{ClusterOpts, Proc, Role, plaza_bin, spawn, wait_until};
use plaza_tests::{Client, http_get};

/// `directory.connect_backoff_max_ms`, shipped.
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// What the documented bound allows on top of the backoff for connecting and starting the
/// roles (a node also registers); loaded 2-core CI included.
const START_MARGIN: Duration = Duration::from_secs(5);

async fn readyz(p: &Proc) -> (u16, String) {
    http_get(p.admin, "/readyz")
        .await
        .unwrap_or((0, String::new()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_and_node_started_before_redis_come_up_when_it_does() {
    let bin = plaza_bin().unwrap();
    // A free port with nothing listening on it: start a server to own a port and a data dir,
    // then stop it; `start_again` brings it up on the same port later.
    let mut redis = RedisServer::start().unwrap();
    redis.kill();
    let url = redis.url();
    let dir = std::env::temp_dir().join(format!("plaza-before-redis-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Shipped settings: nothing overridden but the log level.
    let opts = ClusterOpts::default();
    let gw = spawn(&bin, &opts, &url, &dir, "gw", Role::Gateway).unwrap();
    let node = spawn(&bin, &opts, &url, &dir, "n1", Role::Node).unwrap();

    for p in [&gw, &node] {
        let alive = wait_until(Duration::from_secs(20), || async {
            matches!(http_get(p.admin, "/healthz").await, Ok((200, _)))
        })
        .await;
        assert!(
            alive.is_some(),
            "{}: /healthz never answered:\n{}",
            p.name,
            p.log_tail(30)
        );
    }
    // Long enough for the backoff to reach its maximum, so the bound below is the worst case.
    tokio::time::sleep(Duration::from_secs(7)).await;
    for p in [&gw, &node] {
        let (status, body) = readyz(p).await;
        assert_eq!(status, 503, "{}: /readyz without Redis: {body}", p.name);
        assert!(
            body.contains("waiting for the directory") && body.contains("attempt"),
            "{}: /readyz gives no reason: {body:?}",
            p.name
        );
        assert!(
            body.contains(&format!("127.0.0.1:{}", redis.port())),
            "{}: /readyz does not name the directory: {body:?}",
            p.name
        );
        let (status, body) = http_get(p.admin, "/healthz").await.unwrap();
        assert_eq!(status, 200, "{}: /healthz: {body}", p.name);
    }

    redis.start_again().unwrap();
    let redis_up = Instant::now();
    let bound = BACKOFF_MAX + START_MARGIN;
    for p in [&gw, &node] {
        let took = wait_until(bound, || async { readyz(p).await.0 == 200 }).await;
        assert!(
            took.is_some(),
            "{} not ready {} ms after Redis started: {:?}\n{}",
            p.name,
            bound.as_millis(),
            readyz(p).await,
            p.log_tail(30)
        );
    }
    let ready_after = redis_up.elapsed();
    eprintln!(
        "both ready {} ms after Redis started (bound {} ms)",
        ready_after.as_millis(),
        bound.as_millis()
    );

    // A client joins through the gateway; the node registered, so the room is placed on it.
    let ws = format!("ws://{}/v1/ws", gw.ws.unwrap());
    let mut client = Client::connect(&ws).await.unwrap();
    let entity = tokio::time::timeout(Duration::from_secs(10), client.join("after-redis"))
        .await
        .expect("join answered")
        .unwrap_or_else(|e| {
            panic!(
                "join failed: {e}\n{}\n{}",
                gw.log_tail(20),
                node.log_tail(20)
            )
        });
    client.pump_for(Duration::from_millis(300)).await.unwrap();
    assert!(
        !client.frames.is_empty(),
        "joined as {entity} but no snapshot frame arrived"
    );
    client.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}
