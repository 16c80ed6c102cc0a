//! Bad input gets a typed close code, and a well-behaved client in the same room sees no gap in
//! its frames while it happens (REQUIREMENTS.md invariant 5, REQUIREMENTS.md G5 / B1–B4, B9).

use std::time::Duration;

use plaza_proto::pb::{self, client_envelope};
use plaza_tests::{Client, start_plaza, test_config, ws_url};
use prost::Message as _;

/// A witness in the room: its frames must form one unbroken chain throughout.
async fn witness(url: &str, room: &str) -> Client {
    let mut w = Client::connect(url).await.unwrap();
    w.join(room).await.unwrap();
    w
}

fn assert_no_gap(w: &Client) {
    assert_eq!(w.frame_errors, 0, "witness frames all applied");
    assert!(
        w.frames.len() >= 5,
        "witness kept receiving frames ({})",
        w.frames.len()
    );
    for pair in w.frames.windows(2) {
        if !pair[1].keyframe {
            assert_eq!(pair[1].base_seq, pair[0].seq, "delta chain unbroken");
        }
        assert_eq!(pair[1].seq, pair[0].seq.wrapping_add(1), "no frame missing");
    }
}

/// Runs `attack` against the room while a witness listens; returns how the attacker was closed.
async fn attack_with_witness<F, Fut>(room: &str, attack: F) -> (Option<u16>, Vec<pb::Error>)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = plaza_tests::Closed>,
{
    let plaza = start_plaza(&test_config()).await;
    let url = ws_url(&plaza);
    let mut w = witness(&url, room).await;
    let witness_task = tokio::spawn(async move {
        w.pump_for(Duration::from_millis(1500)).await.unwrap();
        w
    });
    let closed = attack(url).await;
    let w = witness_task.await.unwrap();
    assert_no_gap(&w);
    plaza.shutdown().await;
    (closed.code, closed.errors)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_bytes_close_with_bad_frame() {
    let (code, _) = attack_with_witness("bad-garbage", |url| async move {
        let mut c = Client::connect(&url).await.unwrap();
        c.join("bad-garbage").await.unwrap();
        c.send_raw(vec![0xff, 0xfe, 0xfd, 0x00, 0x13, 0x37, 0xff, 0xff, 0xff])
            .await
            .unwrap();
        c.until_closed().await.unwrap()
    })
    .await;
    assert_eq!(code, Some(4002));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_envelope_closes_with_bad_frame() {
    let (code, _) = attack_with_witness("bad-trunc", |url| async move {
        let mut c = Client::connect(&url).await.unwrap();
        c.join("bad-trunc").await.unwrap();
        let env = pb::ClientEnvelope {
            session_id: c.session_id,
            sequence: 99,
            sent_at_ms: 1,
            body: Some(client_envelope::Body::Movement(pb::Movement {
                position: Some(pb::Vec3 {
                    x: 1.0,
                    y: 2.0,
                    z: 3.0,
                }),
                ..Default::default()
            })),
        };
        let mut bytes = env.encode_to_vec();
        bytes.truncate(bytes.len() - 3);
        c.send_raw(bytes).await.unwrap();
        c.until_closed().await.unwrap()
    })
    .await;
    assert_eq!(code, Some(4002));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_frame_closes_with_too_large() {
    // Just over the 16 KiB cap (refused by the session) ...
    let (code, _) = attack_with_witness("bad-big", |url| async move {
        let mut c = Client::connect(&url).await.unwrap();
        c.join("bad-big").await.unwrap();
        c.send_raw(vec![0u8; 16 * 1024 + 1]).await.unwrap();
        c.until_closed().await.unwrap()
    })
    .await;
    assert_eq!(code, Some(1009));
    // ... and far over it (refused by the WebSocket layer before it is read whole).
    let (code, _) = attack_with_witness("bad-huge", |url| async move {
        let mut c = Client::connect(&url).await.unwrap();
        let _ = c.send_raw(vec![0u8; 1024 * 1024]).await;
        c.until_closed().await.unwrap()
    })
    .await;
    assert_eq!(code, Some(1009));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_version_gets_unsupported_version_with_the_servers_list() {
    let (code, errors) = attack_with_witness("bad-version", |url| async move {
        let mut c = Client::connect_raw(&url).await.unwrap();
        c.send(client_envelope::Body::Negotiate(pb::Negotiate {
            versions: vec![pb::ProtocolVersion { major: 9, minor: 0 }],
            ..Default::default()
        }))
        .await
        .unwrap();
        c.until_closed().await.unwrap()
    })
    .await;
    assert_eq!(code, Some(4001));
    let e = errors.first().expect("an error before the close");
    assert_eq!(e.code, pb::ErrorCode::UnsupportedVersion as i32);
    assert_eq!(
        e.supported_versions,
        vec![pb::ProtocolVersion { major: 1, minor: 0 }]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_movement_flood_closes_with_rate_limited() {
    let (code, errors) = attack_with_witness("bad-flood", |url| async move {
        let mut c = Client::connect(&url).await.unwrap();
        c.join("bad-flood").await.unwrap();
        for i in 0..400 {
            if c.move_to([0.0, 0.0, 0.0], 1.0 + f64::from(i) * 0.001)
                .await
                .is_err()
            {
                break;
            }
        }
        c.until_closed().await.unwrap()
    })
    .await;
    assert_eq!(code, Some(4004));
    assert!(
        errors
            .iter()
            .any(|e| e.code == pb::ErrorCode::RateLimited as i32)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_client_is_closed_at_the_handshake_deadline() {
    let mut cfg = test_config();
    cfg.gateway.handshake_timeout_ms = 300;
    let plaza = start_plaza(&cfg).await;
    let mut c = Client::connect_raw(&ws_url(&plaza)).await.unwrap();
    assert_eq!(c.until_closed().await.unwrap().code, Some(4000));
    plaza.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_token_closes_with_auth() {
    let plaza = start_plaza(&test_config()).await;
    let mut c = Client::connect_raw(&ws_url(&plaza)).await.unwrap();
    c.send(client_envelope::Body::Negotiate(pb::Negotiate {
        versions: vec![pb::ProtocolVersion { major: 1, minor: 0 }],
        auth_token: "not-a-valid-token".into(),
        ..Default::default()
    }))
    .await
    .unwrap();
    assert_eq!(c.until_closed().await.unwrap().code, Some(4003));
    plaza.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_room_closes_with_room_full() {
    let mut cfg = test_config();
    cfg.room.max_members = 2;
    let plaza = start_plaza(&cfg).await;
    let url = ws_url(&plaza);
    let mut a = Client::connect(&url).await.unwrap();
    a.join("tiny").await.unwrap();
    let mut b = Client::connect(&url).await.unwrap();
    b.join("tiny").await.unwrap();
    let mut c = Client::connect(&url).await.unwrap();
    c.send(client_envelope::Body::Join(pb::Join {
        room_id: "tiny".into(),
    }))
    .await
    .unwrap();
    let closed = c.until_closed().await.unwrap();
    assert_eq!(closed.code, Some(4005));
    assert!(
        closed
            .errors
            .iter()
            .any(|e| e.code == pb::ErrorCode::RoomFull as i32)
    );
    a.pump_for(Duration::from_millis(100)).await.unwrap();
    plaza.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_out_of_place_are_refused_without_closing() {
    let plaza = start_plaza(&test_config()).await;
    let mut c = Client::connect(&ws_url(&plaza)).await.unwrap();
    // Leave before joining: a typed error, the connection stays.
    c.send(client_envelope::Body::Leave(pb::Leave {}))
        .await
        .unwrap();
    c.join("ok-room").await.unwrap();
    assert!(
        c.errors
            .iter()
            .any(|e| e.code == pb::ErrorCode::NotJoined as i32)
    );
    // A second join: already joined.
    c.send(client_envelope::Body::Join(pb::Join {
        room_id: "other".into(),
    }))
    .await
    .unwrap();
    c.pump_for(Duration::from_millis(200)).await.unwrap();
    assert!(
        c.errors
            .iter()
            .any(|e| e.code == pb::ErrorCode::AlreadyJoined as i32)
    );
    plaza.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_sessions_with_going_away() {
    let plaza = start_plaza(&test_config()).await;
    let mut c = Client::connect(&ws_url(&plaza)).await.unwrap();
    c.join("bye").await.unwrap();
    let reader = tokio::spawn(async move { c.until_closed().await.unwrap() });
    plaza.shutdown().await;
    let closed = reader.await.unwrap();
    assert_eq!(closed.code, Some(1001));
}
