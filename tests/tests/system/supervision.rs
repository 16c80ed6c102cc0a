//! A room that panics is removed by its supervisor; other rooms keep ticking; the failed
//! room's clients are resumed by the gateway into a fresh activation.

use std::time::Duration;

use plaza_proto::pb::server_envelope;
use plaza_room_actor::room::RoomMsg;
use plaza_tests::{Client, eventually, scrape_metrics, start_plaza, test_config, ws_url};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_room_does_not_take_others_down() {
    let plaza = start_plaza(&test_config()).await;
    let url = ws_url(&plaza);
    let mut a = Client::connect(&url).await.unwrap();
    a.join("doomed").await.unwrap();
    let mut b = Client::connect(&url).await.unwrap();
    b.join("steady").await.unwrap();
    let mut b2 = Client::connect(&url).await.unwrap();
    let b2_entity = b2.join("steady").await.unwrap();
    b.pump_for(Duration::from_millis(200)).await.unwrap();
    let frames_before = b.frames.len();

    let node = plaza.node().expect("plaza up runs a node");
    let doomed = node.rooms().get_or_spawn("doomed").await.unwrap();
    doomed.cast(RoomMsg::Panic).unwrap();

    // The other room keeps ticking with an unbroken chain.
    let steady = tokio::spawn(async move {
        b.pump_for(Duration::from_millis(1500)).await.unwrap();
        b
    });
    // The failed room's client is resumed: Joined again, then a keyframe.
    let mut rejoined = false;
    let mut keyframe_after = false;
    for _ in 0..200 {
        match a.recv().await.unwrap() {
            Some(server_envelope::Body::Joined(_)) => rejoined = true,
            Some(server_envelope::Body::SnapshotFrame(_)) if rejoined => {
                keyframe_after = a.frames.last().is_some_and(|f| f.keyframe);
                break;
            }
            Some(_) => {}
            None => panic!("client of the failed room was disconnected"),
        }
    }
    assert!(
        rejoined && keyframe_after,
        "resumed into a new activation with a keyframe"
    );
    assert_eq!(a.frame_errors, 0);

    let b = steady.await.unwrap();
    assert_eq!(b.frame_errors, 0);
    assert!(
        b.frames.len() >= frames_before + 20,
        "steady room kept ticking"
    );
    for pair in b.frames.windows(2) {
        assert_eq!(pair[1].seq, pair[0].seq.wrapping_add(1));
    }
    assert!(b.decoder().get(b2_entity).is_some());

    let admin = plaza.admin_addr();
    let mut metrics = String::new();
    assert!(
        eventually(Duration::from_secs(2), || {
            metrics = futures_now(scrape_metrics(admin));
            metrics.contains("plaza_placement_events_total{event=\"failed\"} 1")
        })
        .await,
        "failure counted:\n{metrics}"
    );
    drop(b2);
    plaza.shutdown().await;
}

/// Runs a future to completion from a sync closure (the closure is polled on a runtime thread).
fn futures_now<F: Future<Output = anyhow::Result<String>>>(f: F) -> String {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
        .unwrap_or_default()
}

/// A room is created on first join and stops after it has been empty for its grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_room_stops_after_its_grace_period() {
    let mut cfg = test_config();
    cfg.room.empty_grace_ms = 300;
    let plaza = start_plaza(&cfg).await;
    let rooms = plaza.node().unwrap().rooms().clone();
    assert!(rooms.list().await.is_empty());
    let mut c = Client::connect(&ws_url(&plaza)).await.unwrap();
    c.join("brief").await.unwrap();
    assert_eq!(rooms.list().await, vec!["brief".to_owned()]);
    c.send(plaza_proto::pb::client_envelope::Body::Leave(
        plaza_proto::pb::Leave {},
    ))
    .await
    .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !rooms.list().await.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the empty room never stopped"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Joining again creates it afresh.
    c.join("brief").await.unwrap();
    assert_eq!(rooms.list().await, vec!["brief".to_owned()]);
    plaza.shutdown().await;
}
