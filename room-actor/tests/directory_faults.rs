//! A room under directory faults: a release that fails while the room keeps running is retried
//! after the next lease renewal, so the room's presence renewal (which renews every entry the
//! node registered in the room) cannot keep a ghost alive; a room that cannot renew its lease
//! sends nothing once the lease's safe window has passed and gives the room up after a TTL.

use std::sync::Arc;
use std::time::Duration;

use plaza_directory::test_util::FaultyDirectory;
use plaza_directory::{MemoryDirectory, SharedDirectory};
use plaza_node_proto::{NodeOutbound, node_outbound};
use plaza_proto::pb;
use plaza_room_actor::EventLog;
use plaza_room_actor::metrics::{EventLabel, NodeMetrics};
use plaza_room_actor::room::{RoomActorConfig, RoomMsg};
use plaza_room_actor::supervisor::{Rooms, RoomsArgs};
use prost::Message as _;
use ractor::ActorRef;
use tokio::sync::mpsc;

async fn attach(room: &ActorRef<RoomMsg>, session: u64) -> mpsc::Receiver<NodeOutbound> {
    let (tx, mut rx) = mpsc::channel(1024);
    room.cast(RoomMsg::Join {
        session,
        wallet: format!("0x{session}"),
        tx,
        entity: 0,
        link_id: 1,
        operator: false,
    })
    .unwrap();
    loop {
        let m = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("attach acknowledged in time")
            .expect("stream open");
        if let Some(node_outbound::Body::Ack(_)) = m.body {
            return rx;
        }
    }
}

/// Polls `f` every 20 ms for up to `timeout`.
async fn eventually<F: AsyncFnMut() -> bool>(timeout: Duration, mut f: F) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < deadline {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_release_is_retried_and_leaves_no_ghost() {
    let faulty = Arc::new(FaultyDirectory::new(Arc::new(MemoryDirectory::new())));
    let dir: SharedDirectory = faulty.clone();
    let cfg = RoomActorConfig {
        presence_ttl: Duration::from_millis(900),
        ..Default::default()
    };
    let (rooms, _) = Rooms::start(RoomsArgs {
        node_id: "node-a".into(),
        room_cfg: cfg,
        metrics: NodeMetrics::default(),
        directory: dir.clone(),
        lease_ttl: Duration::from_millis(1_200),
        events: EventLog::disabled(),
    })
    .await
    .unwrap();
    let room = rooms.get_or_spawn("hall").await.unwrap();
    let _a = attach(&room, 1).await;
    let _b = attach(&room, 2).await;
    assert!(
        eventually(Duration::from_secs(5), async || {
            dir.presence_get("0x2").await.unwrap().is_some()
        })
        .await,
        "b is present"
    );

    // b's stream ends while releases fail.
    faulty.fail("presence_release", true);
    room.cast(RoomMsg::Detach {
        session: 2,
        link_id: 1,
    })
    .unwrap();
    assert!(
        eventually(Duration::from_secs(5), async || faulty.failed() >= 1).await,
        "the release was attempted and failed"
    );
    // Healed: the retry after the next renewal removes b; a stays.
    faulty.fail("presence_release", false);
    assert!(
        eventually(Duration::from_secs(3), async || {
            dir.presence_get("0x2").await.unwrap().is_none()
        })
        .await,
        "b's release was retried"
    );
    assert!(dir.presence_get("0x1").await.unwrap().is_some(), "a stays");
    rooms.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_that_cannot_renew_goes_quiet_before_its_lease_lapses_then_gives_up() {
    let faulty = Arc::new(FaultyDirectory::new(Arc::new(MemoryDirectory::new())));
    let dir: SharedDirectory = faulty.clone();
    let metrics = NodeMetrics::default();
    let lease_ttl = Duration::from_millis(1_000);
    let (rooms, _) = Rooms::start(RoomsArgs {
        node_id: "node-a".into(),
        room_cfg: RoomActorConfig::default(),
        metrics: metrics.clone(),
        directory: dir.clone(),
        lease_ttl,
        events: EventLog::disabled(),
    })
    .await
    .unwrap();
    let room = rooms.get_or_spawn("hall").await.unwrap();
    let mut rx = attach(&room, 1).await;
    // Frames flow.
    let mut frames = 0;
    while frames < 3 {
        let m = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap()
            .unwrap();
        frames += u32::from(m.droppable);
    }

    // The directory refuses renewals from now on: the store's lease lapses at the latest one
    // TTL after the last renewal was sent, which is before now.
    faulty.fail("renew", true);
    let lapse_ms = plaza_room_actor::room::unix_ms() + lease_ttl.as_millis() as u64;
    let mut last_sent_ms = 0;
    // A room with a session attached waits frozen for 6 TTLs before it gives up (a Redis
    // outage for everyone must not cost the room its state): bounded here by 6 s + a TTL.
    let ended = tokio::time::timeout(Duration::from_secs(15), async {
        while let Some(m) = rx.recv().await {
            if let Some(node_outbound::Body::ServerEnvelope(bytes)) = m.body {
                let env = pb::ServerEnvelope::decode(bytes).unwrap();
                last_sent_ms = last_sent_ms.max(env.sent_at_ms);
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the room gave up and its stream ended");
    assert!(
        last_sent_ms < lapse_ms,
        "nothing was sent after the lease could have lapsed: last {last_sent_ms}, lapse {lapse_ms}"
    );
    let lapsed = metrics
        .placement_events
        .get_or_create(&EventLabel {
            event: "lease_lapsed".into(),
        })
        .get();
    assert_eq!(lapsed, 1);
    rooms.stop();
}
