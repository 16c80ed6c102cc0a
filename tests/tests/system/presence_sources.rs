//! Presence by source, for real (issue 12 item 6): another service holds a wallet's presence
//! beside the room — over the admin port (`POST`/`DELETE /v1/presence/{wallet}/sources/{source}`)
//! and over gRPC (`RoomHost/PresenceSource`) — on both directory backends (the embedded one and
//! a real `redis-server`), with the shipped presence TTL and sweep.
//!
//! A voice source keeps the wallet in the online-users lookup after its room session left (for
//! longer than the presence TTL plus a sweep: it is renewed, not lingering), while the avatar
//! follows the room source (gone from the room); releasing the last source removes the wallet
//! at once.

use std::time::Duration;

use plaza_directory::test_util::RedisServer;
use plaza_node_proto::PresenceSourceRequest;
use plaza_node_proto::room_host_client::RoomHostClient;
use plaza_ops::config::PlazaConfig;
use plaza_proto::pb;
use plaza_tests::cluster::wait_until;
use plaza_tests::{Client, http_call, start_plaza, test_config, ws_url};
use serde_json::Value;

fn listed(peers: &Value, wallet: &str) -> bool {
    peers["peers"]
        .as_array()
        .is_some_and(|a| a.iter().any(|p| p["address"] == wallet))
}

/// The `position` `/v1/peers` gives `wallet` (`Value::Null` when it has none).
fn position_of(peers: &Value, wallet: &str) -> Value {
    peers["peers"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["address"] == wallet))
        .map_or(Value::Null, |p| p["position"].clone())
}

async fn voice_keeps_a_wallet_online_after_its_room_session_left(cfg: PlazaConfig) {
    let plaza = start_plaza(&cfg).await;
    let (url, admin) = (ws_url(&plaza), plaza.admin_addr());
    let room = "voice-room";
    let mut a = Client::connect(&url).await.unwrap();
    a.join(room).await.unwrap();
    // B keeps the room (and so the renewal of its entries) alive after A left.
    let mut b = Client::connect(&url).await.unwrap();
    b.join(room).await.unwrap();
    let (wa, wb) = (a.wallet.clone(), b.wallet.clone());
    let src = |w: &str, s: &str| format!("/v1/presence/{w}/sources/{s}");

    // Typed refusals: an unknown source, the room's own source, a wallet that is not online.
    let (st, v) = http_call(admin, "POST", &src(&wa, "telepathy"), None, None).await;
    assert_eq!((st, v["error"].as_str()), (400, Some("invalid")), "{v}");
    let (st, _) = http_call(admin, "POST", &src(&wa, "room"), None, None).await;
    assert_eq!(st, 400, "the room source is the room's alone");
    let (st, v) = http_call(admin, "POST", &src("guest:nobody", "voice"), None, None).await;
    assert_eq!((st, v["error"].as_str()), (404, Some("not_found")), "{v}");

    // A voice SFU holds A over HTTP; a chat holds B over gRPC.
    let (st, v) = http_call(admin, "POST", &src(&wa, "voice"), None, None).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["room"], room);
    assert_eq!(v["sources"], serde_json::json!(["room", "voice"]));
    let node = plaza.node().expect("plaza up runs a node");
    let mut grpc = RoomHostClient::connect(format!("http://{}", node.addr()))
        .await
        .unwrap();
    let reply = grpc
        .presence_source(PresenceSourceRequest {
            wallet: wb.clone(),
            source: "chat".into(),
            hold: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(reply.online && reply.room == room, "{reply:?}");
    assert_eq!(reply.sources, ["room", "chat"]);
    let refused = grpc
        .presence_source(PresenceSourceRequest {
            wallet: wb.clone(),
            source: "room".into(),
            hold: false,
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);

    // The lookup answers the seed's shape: each peer's avatar position, the room's own.
    let both = format!("/v1/peers?id={wa}&id={wb}");
    let (_, peers) = http_call(admin, "GET", &both, None, None).await;
    let (_, r) = http_call(admin, "GET", &format!("/v1/rooms/{room}"), None, None).await;
    for w in [&wa, &wb] {
        let member = r["room"]["members"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["wallet"] == w.as_str()))
            .cloned()
            .unwrap_or_else(|| panic!("{w} not a member: {r}"));
        let pos = position_of(&peers, w);
        assert_eq!(pos.as_array().map(Vec::len), Some(3), "{peers}");
        assert_eq!(pos, member["position"], "{peers} vs {r}");
    }

    // A leaves the room: the avatar goes with the room source, the wallet stays online (voice),
    // past the presence TTL plus a sweep (the room's renewals keep its entry).
    a.send(pb::client_envelope::Body::Leave(pb::Leave {}))
        .await
        .unwrap();
    let room_path = format!("/v1/rooms/{room}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, r) = http_call(admin, "GET", &room_path, None, None).await;
        let members = r["room"]["members"].as_array().cloned().unwrap_or_default();
        if !members.iter().any(|m| m["wallet"] == wa.as_str()) {
            assert!(members.iter().any(|m| m["wallet"] == wb.as_str()), "{r}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "A never left: {r}");
        a.pump_for(Duration::from_millis(50)).await.unwrap();
        b.pump_for(Duration::from_millis(50)).await.unwrap();
    }
    let hold_for =
        Duration::from_millis(cfg.room.presence_ttl_ms + cfg.directory.sweep_interval_ms)
            + Duration::from_secs(1);
    let until = tokio::time::Instant::now() + hold_for;
    while tokio::time::Instant::now() < until {
        let (st, peers) = http_call(admin, "GET", &both, None, None).await;
        assert_eq!(st, 200, "{peers}");
        assert!(
            listed(&peers, &wa),
            "A fell out while voice held it: {peers}"
        );
        // Held by voice alone, A has no avatar, so no position; B still has one.
        assert_eq!(position_of(&peers, &wa), Value::Null, "{peers}");
        assert!(position_of(&peers, &wb).is_array(), "{peers}");
        assert!(listed(&peers, &wb), "{peers}");
        a.pump_for(Duration::from_millis(250)).await.unwrap();
        b.pump_for(Duration::from_millis(250)).await.unwrap();
    }

    // Releasing the last source (voice) takes A offline at once; releasing it again is no-op.
    let (st, v) = http_call(admin, "DELETE", &src(&wa, "voice"), None, None).await;
    assert_eq!((st, v["online"].as_bool()), (200, Some(false)), "{v}");
    let (_, peers) = http_call(admin, "GET", &both, None, None).await;
    assert!(!listed(&peers, &wa), "{peers}");
    let (st, v) = http_call(admin, "DELETE", &src(&wa, "voice"), None, None).await;
    assert_eq!((st, v["online"].as_bool()), (200, Some(false)), "{v}");
    // B's chat goes, B stays: the room still holds it.
    let reply = grpc
        .presence_source(PresenceSourceRequest {
            wallet: wb.clone(),
            source: "chat".into(),
            hold: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(reply.online, "{reply:?}");
    assert_eq!(reply.sources, ["room"]);
    let (_, peers) = http_call(admin, "GET", &both, None, None).await;
    assert!(listed(&peers, &wb), "{peers}");
    a.close().await;
    b.close().await;
    plaza.shutdown().await;
}

/// A wallet held only by voice keeps its room: the room, empty, does not stop past its grace
/// while the entry is held elsewhere (it renews it), and stops once voice releases it.
async fn voice_keeps_its_room_after_the_last_member_left(cfg: PlazaConfig) {
    let plaza = start_plaza(&cfg).await;
    let (url, admin) = (ws_url(&plaza), plaza.admin_addr());
    let room = "voice-only";
    let mut a = Client::connect(&url).await.unwrap();
    a.join(room).await.unwrap();
    let wa = a.wallet.clone();
    let src = format!("/v1/presence/{wa}/sources/voice");
    let peers = format!("/v1/peers?id={wa}");
    // The room registers A's entry on its own writer: wait for it before voice joins it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !listed(&http_call(admin, "GET", &peers, None, None).await.1, &wa) {
        assert!(tokio::time::Instant::now() < deadline, "A never online");
        a.pump_for(Duration::from_millis(50)).await.unwrap();
    }
    let (st, v) = http_call(admin, "POST", &src, None, None).await;
    assert_eq!(st, 200, "{v}");
    a.send(pb::client_envelope::Body::Leave(pb::Leave {}))
        .await
        .unwrap();
    a.pump_for(Duration::from_millis(500)).await.unwrap();
    let room_path = format!("/v1/rooms/{room}");
    // Past the empty grace, the presence TTL and a sweep: still online, the room still there.
    let hold_for = Duration::from_millis(
        cfg.room.empty_grace_ms + cfg.room.presence_ttl_ms + cfg.directory.sweep_interval_ms,
    ) + Duration::from_secs(1);
    let until = tokio::time::Instant::now() + hold_for;
    while tokio::time::Instant::now() < until {
        let (_, p) = http_call(admin, "GET", &peers, None, None).await;
        assert!(listed(&p, &wa), "the voice-only wallet lapsed: {p}");
        assert_eq!(position_of(&p, &wa), Value::Null, "{p}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (st, r) = http_call(admin, "GET", &room_path, None, None).await;
    assert_eq!(st, 200, "the room stopped while voice held a wallet: {r}");
    // Voice lets go: the wallet is gone at once, and the empty room stops.
    let (st, v) = http_call(admin, "DELETE", &src, None, None).await;
    assert_eq!((st, v["online"].as_bool()), (200, Some(false)), "{v}");
    let (_, p) = http_call(admin, "GET", &peers, None, None).await;
    assert!(!listed(&p, &wa), "{p}");
    let stopped = wait_until(Duration::from_secs(15), || {
        let path = &room_path;
        async move { http_call(admin, "GET", path, None, None).await.0 == 404 }
    })
    .await;
    assert!(
        stopped.is_some(),
        "the empty room did not stop after the last source went"
    );
    a.close().await;
    plaza.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voice_only_wallet_keeps_its_room_on_the_embedded_directory() {
    voice_keeps_its_room_after_the_last_member_left(test_config()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voice_only_wallet_keeps_its_room_on_redis() {
    let redis = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap()
        .unwrap();
    let mut cfg = test_config();
    cfg.directory.redis_url = redis.url();
    voice_keeps_its_room_after_the_last_member_left(cfg).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voice_source_outlives_the_room_session_on_the_embedded_directory() {
    voice_keeps_a_wallet_online_after_its_room_session_left(test_config()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voice_source_outlives_the_room_session_on_redis() {
    let redis = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap()
        .unwrap();
    let mut cfg = test_config();
    cfg.directory.redis_url = redis.url();
    voice_keeps_a_wallet_online_after_its_room_session_left(cfg).await;
}
