//! The operator API (docs/ADMIN-API.md) against a real `plaza up` in this process: real
//! WebSocket clients in a room, HTTP calls on the admin listener, one test per action, and the
//! bearer token when one is configured.

use std::net::SocketAddr;
use std::time::Duration;

use plaza_proto::pb::{self, client_envelope};
use plaza_tests::cluster::wait_until;
use plaza_tests::{Client, http_call as call, start_plaza, test_config, ws_url};
use serde_json::Value;

async fn get(addr: SocketAddr, path: &str) -> (u16, Value) {
    call(addr, "GET", path, None, None).await
}

async fn post(addr: SocketAddr, path: &str, body: Option<&str>) -> (u16, Value) {
    call(addr, "POST", path, None, body).await
}

/// Two clients in `room`, moved once so the room has their poses.
async fn two_in(url: &str, room: &str) -> (Client, Client) {
    let mut a = Client::connect(url).await.unwrap();
    a.join(room).await.unwrap();
    let mut b = Client::connect(url).await.unwrap();
    b.join(room).await.unwrap();
    (a, b)
}

fn member<'a>(room: &'a Value, wallet: &str) -> &'a Value {
    room["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["wallet"] == wallet)
        .unwrap_or_else(|| panic!("{wallet} not in {room}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_rooms_and_sessions_are_listed() {
    let plaza = start_plaza(&test_config()).await;
    let admin = plaza.admin_addr();
    let (mut a, mut b) = two_in(&ws_url(&plaza), "ops-view").await;
    a.send(client_envelope::Body::Profile(pb::ProfileAnnouncement {
        version: 1,
        display_name: "Alice\u{7}".into(),
    }))
    .await
    .unwrap();
    a.pump_for(Duration::from_millis(300)).await.unwrap();
    b.pump_for(Duration::from_millis(100)).await.unwrap();

    let (st, node) = get(admin, "/v1/node").await;
    assert_eq!(st, 200, "{node}");
    let n = &node["node"];
    assert_eq!(n["roles"], serde_json::json!(["gateway", "node"]));
    assert_eq!(n["id"].as_str(), plaza.node().map(|n| n.node_id()));
    assert_eq!(n["rooms"], 1);
    assert_eq!(n["gateway_sessions"], 2);
    assert_eq!(n["ready"], true);
    assert!(n["process"]["resident_bytes"].as_u64().unwrap() > 0, "{n}");
    assert!(n["process"]["cpu_seconds"].as_f64().unwrap() > 0.0, "{n}");
    assert!(n["uptime_s"].as_f64().unwrap() > 0.0);

    let (st, nodes) = get(admin, "/v1/nodes").await;
    assert_eq!(st, 200);
    assert_eq!(nodes["nodes"][0]["id"], n["id"]);

    let (st, rooms) = get(admin, "/v1/rooms").await;
    assert_eq!(st, 200);
    assert_eq!(rooms["total"], 1);
    let r = &rooms["rooms"][0];
    assert_eq!(
        (r["id"].as_str(), r["members"].as_u64()),
        (Some("ops-view"), Some(2))
    );
    // Ticks ran and frames went out: both counters are measured, not placeholders.
    assert!(r["tick_p99_ms"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["bytes_per_client_per_s"].as_f64().unwrap() > 0.0, "{r}");

    let (st, room) = get(admin, "/v1/rooms/ops-view").await;
    assert_eq!(st, 200, "{room}");
    let room = &room["room"];
    assert!(room["epoch"].as_str().unwrap().contains('.'), "{room}");
    for c in [&a, &b] {
        let m = member(room, &c.wallet);
        assert_eq!(m["entity"], c.entity);
        assert_eq!(m["session"], c.session_id.to_string());
        assert_eq!(m["muted"], false);
        assert_eq!(m["position"].as_array().unwrap().len(), 3);
    }
    assert_eq!(room["open_consents"], serde_json::json!([]));
    // The display name is the announced one, cleaned; none until announced.
    assert_eq!(member(room, &a.wallet)["display_name"], "Alice");
    assert!(member(room, &b.wallet)["display_name"].is_null());

    let (st, sessions) = get(admin, "/v1/sessions").await;
    assert_eq!(st, 200);
    assert_eq!(sessions["total"], 2);
    for c in [&a, &b] {
        let id = c.session_id.to_string();
        let s = sessions["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .expect("listed");
        assert_eq!(s["wallet"], c.wallet);
        assert_eq!(s["room"], "ops-view");
        assert_eq!(s["node"], n["id"]);
    }
    let (st, limited) = get(admin, "/v1/sessions?limit=1").await;
    assert_eq!(
        (st, limited["sessions"].as_array().unwrap().len()),
        (200, 1)
    );
    assert_eq!(limited["total"], 2);

    // Typed errors.
    let (st, e) = get(admin, "/v1/rooms/nowhere").await;
    assert_eq!(
        (st, e["ok"].clone(), e["error"].clone()),
        (404, false.into(), "room_not_found".into())
    );
    assert!(e["message"].as_str().unwrap().contains("nowhere"));
    let (st, e) = get(admin, "/v1/sessions?limit=x").await;
    assert_eq!((st, e["error"].as_str()), (400, Some("bad_query")));
    let (st, e) = get(admin, "/v1/no-such-call").await;
    assert_eq!((st, e["error"].as_str()), (404, Some("not_found")));
    plaza.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kick_closes_that_session_with_4010() {
    let plaza = start_plaza(&test_config()).await;
    let admin = plaza.admin_addr();
    let (mut a, mut b) = two_in(&ws_url(&plaza), "ops-kick").await;
    let (st, j) = post(admin, &format!("/v1/sessions/{}/kick", a.session_id), None).await;
    assert_eq!(st, 200, "{j}");
    assert_eq!(
        (j["close_code"].as_u64(), j["close_reason"].as_str()),
        (Some(4010), Some("kicked"))
    );
    let closed = a.until_closed().await.unwrap();
    assert_eq!(closed.code, Some(4010), "{closed:?}");
    assert!(
        closed
            .errors
            .iter()
            .any(|e| e.code == pb::ErrorCode::Rejected as i32
                && e.message == "kicked by an operator"),
        "{closed:?}"
    );
    // The other member stays; the kicked one leaves the room and the session list.
    b.pump_for(Duration::from_millis(200)).await.unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || async {
            let (_, s) = get(admin, "/v1/sessions").await;
            let (_, r) = get(admin, "/v1/rooms/ops-kick").await;
            s["total"] == 1
                && r["room"]["members"]
                    .as_array()
                    .is_some_and(|m| m.len() == 1)
        })
        .await
        .is_some()
    );
    let (st, e) = post(admin, &format!("/v1/sessions/{}/kick", a.session_id), None).await;
    assert_eq!((st, e["error"].as_str()), (404, Some("session_not_found")));
    let (st, e) = post(admin, "/v1/sessions/not-a-number/kick", None).await;
    assert_eq!((st, e["error"].as_str()), (400, Some("bad_session_id")));
    let (st, _) = get(admin, &format!("/v1/sessions/{}/kick", b.session_id)).await;
    assert_eq!(st, 405, "kick is a POST");
    plaza.shutdown().await;
}

fn emote(id: &str, t: u64) -> client_envelope::Body {
    client_envelope::Body::Emote(pb::Emote {
        emote_id: id.into(),
        timestamp_ms: t,
        stop: false,
    })
}

fn emotes_of(c: &Client, entity: u32) -> Vec<String> {
    c.events
        .iter()
        .filter_map(|e| match &e.kind {
            Some(pb::event::Kind::Emote(x)) if x.entity_id == entity => Some(x.emote_id.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mute_drops_the_members_emotes_until_unmuted() {
    let plaza = start_plaza(&test_config()).await;
    let admin = plaza.admin_addr();
    let (mut a, mut b) = two_in(&ws_url(&plaza), "ops-mute").await;
    a.pump_for(Duration::from_millis(300)).await.unwrap();
    b.pump_for(Duration::from_millis(300)).await.unwrap();
    // Unmuted, b sees a's emote: the check below can fail.
    a.send(emote("wave", 1_000)).await.unwrap();
    b.pump_for(Duration::from_millis(600)).await.unwrap();
    assert_eq!(emotes_of(&b, a.entity), ["wave"], "{:?}", b.events);

    let path = format!("/v1/rooms/ops-mute/members/{}/mute", a.wallet);
    let (st, j) = post(admin, &path, None).await;
    assert_eq!((st, j["muted"].clone()), (200, true.into()), "{j}");
    let (_, r) = get(admin, "/v1/rooms/ops-mute").await;
    assert_eq!(member(&r["room"], &a.wallet)["muted"], true);
    assert_eq!(member(&r["room"], &b.wallet)["muted"], false);
    a.send(emote("dance", 2_000)).await.unwrap();
    b.pump_for(Duration::from_millis(600)).await.unwrap();
    assert_eq!(
        emotes_of(&b, a.entity),
        ["wave"],
        "a muted member's emote is not relayed"
    );
    let (_, r) = get(admin, "/v1/rooms/ops-mute").await;
    assert!(r["room"]["muted_dropped"].as_u64().unwrap() >= 1, "{r}");

    let (st, j) = post(
        admin,
        &format!("/v1/rooms/ops-mute/members/{}/unmute", a.wallet),
        None,
    )
    .await;
    assert_eq!((st, j["muted"].clone()), (200, false.into()), "{j}");
    a.send(emote("clap", 3_000)).await.unwrap();
    b.pump_for(Duration::from_millis(600)).await.unwrap();
    assert_eq!(emotes_of(&b, a.entity), ["wave", "clap"]);

    let (st, e) = post(admin, "/v1/rooms/ops-mute/members/nobody/mute", None).await;
    assert_eq!((st, e["error"].as_str()), (404, Some("not_member")));
    let (st, e) = post(admin, "/v1/rooms/nowhere/members/nobody/mute", None).await;
    assert_eq!((st, e["error"].as_str()), (404, Some("room_not_found")));
    plaza.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_tells_every_member_and_releases_presence() {
    let plaza = start_plaza(&test_config()).await;
    let admin = plaza.admin_addr();
    let (mut a, mut b) = two_in(&ws_url(&plaza), "ops-close").await;
    let ids = format!("/v1/peers?ids={},{}", a.wallet, b.wallet);
    assert!(
        wait_until(Duration::from_secs(5), || async {
            get(admin, &ids).await.1["peers"]
                .as_array()
                .is_some_and(|p| p.len() == 2)
        })
        .await
        .is_some(),
        "both online first"
    );
    let (st, j) = post(admin, "/v1/rooms/ops-close/close", None).await;
    assert_eq!((st, j["detached"].as_u64()), (200, Some(2)), "{j}");
    for c in [&mut a, &mut b] {
        c.pump_for(Duration::from_millis(500)).await.unwrap();
        assert!(
            c.errors
                .iter()
                .any(|e| e.code == pb::ErrorCode::Rejected as i32
                    && e.message == "room closed by an operator"),
            "{:?}",
            c.errors
        );
    }
    // Presence released, the room gone; the sessions stay connected, in no room.
    assert!(
        wait_until(Duration::from_secs(5), || async {
            let (_, p) = get(admin, &ids).await;
            let (_, r) = get(admin, "/v1/rooms").await;
            p["peers"].as_array().is_some_and(Vec::is_empty) && r["total"] == 0
        })
        .await
        .is_some(),
        "presence released and room stopped"
    );
    let (_, s) = get(admin, "/v1/sessions").await;
    assert_eq!(s["total"], 2);
    assert!(
        s["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["room"].is_null()),
        "{s}"
    );
    let (st, e) = post(admin, "/v1/rooms/ops-close/close", None).await;
    assert_eq!((st, e["error"].as_str()), (404, Some("room_not_found")));
    plaza.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_empties_the_node_and_the_process_stays_up() {
    let plaza = start_plaza(&test_config()).await;
    let admin = plaza.admin_addr();
    let (_a, _b) = two_in(&ws_url(&plaza), "ops-drain").await;
    let (st, j) = post(admin, "/v1/node/drain", None).await;
    assert_eq!((st, j["started"].clone()), (202, true.into()), "{j}");
    assert!(
        wait_until(Duration::from_secs(10), || async {
            let (_, n) = get(admin, "/v1/node").await;
            n["node"]["draining"] == true && n["node"]["rooms"] == 0
        })
        .await
        .is_some(),
        "the node drains its rooms"
    );
    let (st, body) = plaza_tests::http_get(admin, "/readyz").await.unwrap();
    assert_eq!((st, body.trim()), (503, "draining"));
    let (st, _) = plaza_tests::http_get(admin, "/healthz").await.unwrap();
    assert_eq!(st, 200, "the process stays up");
    let (st, j) = post(admin, "/v1/node/drain", None).await;
    assert_eq!(
        (st, j["started"].clone()),
        (200, false.into()),
        "a second drain is a no-op"
    );
    plaza.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teleport_moves_the_member_to_a_spawn_point_or_a_checked_position() {
    let plaza = start_plaza(&test_config()).await;
    let admin = plaza.admin_addr();
    let (mut a, mut b) = two_in(&ws_url(&plaza), "ops-tp").await;
    // b must have seen a in a broadcast to be told.
    b.pump_for(Duration::from_millis(300)).await.unwrap();
    let a_entity = a.entity;
    let path = format!("/v1/rooms/ops-tp/members/{}/teleport", a.wallet);
    let (st, j) = post(admin, &path, Some(r#"{"spawn":"stage"}"#)).await;
    assert_eq!(st, 200, "{j}");
    let to: Vec<f32> = serde_json::from_value(j["position"].clone()).unwrap();
    assert!(
        (to[2] - 20.0).abs() < 1.0 && to[0].abs() < 1.0,
        "at (or next to) the stage spawn point of rooms/plaza.toml: {to:?}"
    );
    // The mover and the member who sees it are told (cause OPERATOR), at the landing point.
    for c in [&mut a, &mut b] {
        let k = plaza_tests::wait_event("teleported", c, |k| {
            matches!(k, pb::event::Kind::Teleported(_))
        })
        .await;
        let pb::event::Kind::Teleported(t) = k else {
            unreachable!()
        };
        assert_eq!(t.cause, pb::TeleportCause::Operator as i32);
        assert_eq!(t.entity_id, a_entity);
        let p = t.position.unwrap();
        assert_eq!([p.x, p.y, p.z], [to[0], to[1], to[2]]);
    }
    let (_, r) = get(admin, "/v1/rooms/ops-tp").await;
    let pos: Vec<f32> =
        serde_json::from_value(member(&r["room"], &a.wallet)["position"].clone()).unwrap();
    assert_eq!(pos, to, "the room view agrees");

    let (st, j) = post(admin, &path, Some(r#"{"position":[2.0,0.0,-6.0]}"#)).await;
    assert_eq!(st, 200, "{j}");
    for (body, status, code) in [
        (r#"{"position":[0,0,9999]}"#, 400, "out_of_bounds"),
        (r#"{"spawn":"nowhere"}"#, 400, "unknown_spawn"),
        (r#"{"spawn":"stage","position":[0,0,0]}"#, 400, "bad_body"),
        ("{", 400, "bad_body"),
    ] {
        let (st, e) = post(admin, &path, Some(body)).await;
        assert_eq!(
            (st, e["error"].as_str()),
            (status, Some(code)),
            "{body}: {e}"
        );
    }
    let (st, e) = post(
        admin,
        "/v1/rooms/ops-tp/members/nobody/teleport",
        Some(r#"{"spawn":"stage"}"#),
    )
    .await;
    assert_eq!((st, e["error"].as_str()), (404, Some("not_member")));
    plaza.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_calls_need_the_token_when_one_is_configured() {
    let mut cfg = test_config();
    cfg.admin.token = "s3cret-token".into();
    let plaza = start_plaza(&cfg).await;
    let admin = plaza.admin_addr();
    let c = {
        let mut c = Client::connect(&ws_url(&plaza)).await.unwrap();
        c.join("ops-auth").await.unwrap();
        c
    };
    let kick = format!("/v1/sessions/{}/kick", c.session_id);
    for (method, path) in [
        ("GET", "/v1/node"),
        ("GET", "/v1/rooms"),
        ("GET", "/v1/rooms/ops-auth"),
        ("GET", "/v1/sessions"),
        ("POST", kick.as_str()),
        ("POST", "/v1/rooms/ops-auth/close"),
        ("POST", "/v1/node/drain"),
        ("GET", "/v1/unknown"),
    ] {
        for token in [None, Some("wrong")] {
            let (st, e) = call(admin, method, path, token, None).await;
            assert_eq!(
                (st, e["error"].as_str()),
                (401, Some("unauthorized")),
                "{method} {path} {token:?}"
            );
            assert!(e["message"].is_string(), "{e}");
        }
    }
    let (st, _) = call(admin, "GET", "/v1/node", Some("s3cret-token"), None).await;
    assert_eq!(st, 200);
    // Nothing happened to the room or the session while refused.
    let (st, r) = call(
        admin,
        "GET",
        "/v1/rooms/ops-auth",
        Some("s3cret-token"),
        None,
    )
    .await;
    assert_eq!(
        (st, r["room"]["member_count"].as_u64()),
        (200, Some(1)),
        "{r}"
    );
    let (st, _) = call(admin, "POST", &kick, Some("s3cret-token"), None).await;
    assert_eq!(st, 200);
    // The console page holds no data: it loads without the token (its calls need it).
    let (st, page) = plaza_tests::http_get(admin, "/console").await.unwrap();
    assert_eq!(st, 200);
    assert!(page.contains("Plaza operator console") && page.contains("sessionStorage"));
    plaza.shutdown().await;
}
