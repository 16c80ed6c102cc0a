//! The client protocol's operator role (issue 15): a real `plaza up` process verifies JWTs signed
//! here (a JWKS file made by the test); the session whose token carries `role: "operator"` may
//! kick, mute and close the room with `OperatorAction`s, a member without the role is refused
//! `not_operator` (and nothing happens), and every action, done or refused, is written to the
//! `plaza::audit` log.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use plaza_gateway::auth::test_keys::{Signer, jwks_json};
use plaza_proto::pb::{self, client_envelope, server_envelope};
use plaza_tests::cluster::wait_until;
use plaza_tests::up::PlazaUp;
use plaza_tests::{Client, http_get};
use serde_json::{Value, json};

fn token(k: &Signer, sub: &str, role: Option<&str>) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut c = json!({"sub": sub, "exp": now + 600, "iat": now});
    if let Some(r) = role {
        c["role"] = json!(r);
    }
    k.sign(&c)
}

async fn sign_in(url: &str, auth_token: &str) -> Client {
    let mut c = Client::connect_raw(url).await.unwrap();
    c.send(client_envelope::Body::Negotiate(pb::Negotiate {
        versions: vec![pb::ProtocolVersion { major: 1, minor: 0 }],
        auth_token: auth_token.to_owned(),
        ..Default::default()
    }))
    .await
    .unwrap();
    loop {
        match c.recv().await.unwrap() {
            Some(server_envelope::Body::Negotiated(n)) => {
                c.session_id = n.session_id;
                c.wallet = n.wallet;
                return c;
            }
            Some(_) => {}
            None => panic!("closed during negotiate: {:?}", c.errors),
        }
    }
}

/// Sends an `OperatorAction` and waits for its `OperatorResult`.
async fn act(c: &mut Client, op: pb::OperatorOp, target: &str) -> pb::OperatorResult {
    c.send(client_envelope::Body::Operator(pb::OperatorAction {
        op: op as i32,
        target_wallet: target.to_owned(),
    }))
    .await
    .unwrap();
    loop {
        match c.recv().await.unwrap() {
            Some(server_envelope::Body::OperatorResult(r)) => return r,
            Some(_) => {}
            None => panic!("closed before the operator result: {:?}", c.errors),
        }
    }
}

#[track_caller]
fn assert_result(r: &pb::OperatorResult, op: pb::OperatorOp, ok: bool, reason: &str) {
    assert_eq!(
        (r.op, r.ok, r.reason.as_str()),
        (op as i32, ok, reason),
        "{r:?}"
    );
}

/// The members of `room` as the admin API shows them (wallet → muted).
async fn muted(admin: SocketAddr, room: &str) -> Vec<(String, bool)> {
    let (status, body) = http_get(admin, &format!("/v1/rooms/{room}")).await.unwrap();
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let mut m: Vec<(String, bool)> = v["room"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["wallet"].as_str().unwrap().to_owned(),
                m["muted"].as_bool().unwrap(),
            )
        })
        .collect();
    m.sort();
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_operator_session_kicks_mutes_and_closes_and_every_action_is_audited() {
    let k = Signer::ed25519("k1", 21);
    let dir = std::env::temp_dir().join(format!("plaza-operator-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let jwks = dir.join("jwks.json");
    std::fs::write(&jwks, jwks_json(&[&k])).unwrap();
    let up = PlazaUp::start(
        dir.join("up.log"),
        &[
            ("PLAZA__AUTH__MODE", "jwt".into()),
            ("PLAZA__AUTH__JWKS_FILE", jwks.display().to_string()),
            ("PLAZA__LOG__LEVEL", "info".into()),
        ],
    );
    up.wait_ready().await;
    let admin = up.admin;
    let url = up.url();
    use pb::OperatorOp as Op;

    let mut moderator = sign_in(&url, &token(&k, "mod", Some("operator"))).await;
    // In no room yet: refused at the gateway.
    let r = act(&mut moderator, Op::CloseRoom, "").await;
    assert_result(&r, Op::CloseRoom, false, "not_joined");
    moderator.join("op-room").await.unwrap();
    let mut ann = sign_in(&url, &token(&k, "ann", None)).await;
    ann.join("op-room").await.unwrap();
    let mut bo = sign_in(&url, &token(&k, "bo", Some("member"))).await;
    bo.join("op-room").await.unwrap();

    // A member without the operator role: refused, and nothing happens.
    for (op, target) in [(Op::Kick, "bo"), (Op::Mute, "bo"), (Op::CloseRoom, "")] {
        let r = act(&mut ann, op, target).await;
        assert_result(&r, op, false, "not_operator");
    }
    let r = act(&mut bo, Op::Kick, "mod").await;
    assert_result(&r, Op::Kick, false, "not_operator");
    bo.pump_for(Duration::from_millis(200)).await.unwrap();
    assert_eq!(
        muted(admin, "op-room").await,
        vec![
            ("ann".into(), false),
            ("bo".into(), false),
            ("mod".into(), false)
        ]
    );

    // The operator mutes ann (and can unmute), kicks bo, is told about unknown members.
    let r = act(&mut moderator, Op::Mute, "ann").await;
    assert_result(&r, Op::Mute, true, "");
    assert_eq!(r.target_wallet, "ann");
    assert!(
        muted(admin, "op-room")
            .await
            .contains(&("ann".into(), true))
    );
    let r = act(&mut moderator, Op::Unmute, "ann").await;
    assert_result(&r, Op::Unmute, true, "");
    assert!(
        muted(admin, "op-room")
            .await
            .contains(&("ann".into(), false))
    );
    let r = act(&mut moderator, Op::Mute, "ann").await;
    assert_result(&r, Op::Mute, true, "");
    let r = act(&mut moderator, Op::Kick, "nobody").await;
    assert_result(&r, Op::Kick, false, "not_member");
    let r = act(&mut moderator, Op::Unspecified, "ann").await;
    assert_result(&r, Op::Unspecified, false, "unknown_op");

    let r = act(&mut moderator, Op::Kick, "bo").await;
    assert_result(&r, Op::Kick, true, "");
    let closed = bo.until_closed().await.unwrap();
    assert_eq!(closed.code, Some(4010), "{closed:?}");
    let e = closed.errors.last().expect("the kicked member is told");
    assert!(!e.retryable, "{e:?}");
    let want: Vec<(String, bool)> = vec![("ann".into(), true), ("mod".into(), false)];
    let gone = wait_until(Duration::from_secs(2), || async {
        muted(admin, "op-room").await == want
    })
    .await;
    assert!(
        gone.is_some(),
        "bo leaves the room within a tick: {:?}",
        muted(admin, "op-room").await
    );

    // Closing the room detaches everyone (REJECTED); the sessions stay open.
    let r = act(&mut moderator, Op::CloseRoom, "").await;
    assert_result(&r, Op::CloseRoom, true, "");
    let mut told = false;
    for _ in 0..50 {
        ann.pump_for(Duration::from_millis(100)).await.unwrap();
        told = ann
            .errors
            .iter()
            .any(|e| e.message.contains("room closed by an operator"));
        if told {
            break;
        }
    }
    assert!(told, "ann's errors: {:?}", ann.errors);

    // Every action is in the audit log: 5 refused by the gateway, 7 done or refused by the room.
    let audited = wait_until(Duration::from_secs(5), || async {
        up.log()
            .lines()
            .filter(|l| l.contains("plaza::audit") && l.contains("operator action"))
            .count()
            >= 12
    })
    .await;
    let log = up.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("plaza::audit") && l.contains("operator action"))
        .collect();
    assert!(audited.is_some(), "audit lines: {lines:#?}");
    let has = |op: &str, outcome: &str, extra: &str| {
        lines
            .iter()
            .any(|l| l.contains(op) && l.contains(outcome) && l.contains(extra))
    };
    assert!(
        has("OPERATOR_OP_CLOSE_ROOM", "refused", "not_joined"),
        "{lines:#?}"
    );
    assert!(
        has("OPERATOR_OP_KICK", "refused", "not_operator"),
        "{lines:#?}"
    );
    assert!(has("OPERATOR_OP_MUTE", "done", "ann"), "{lines:#?}");
    assert!(has("OPERATOR_OP_UNMUTE", "done", "ann"), "{lines:#?}");
    assert!(
        has("OPERATOR_OP_KICK", "refused", "not_member"),
        "{lines:#?}"
    );
    assert!(has("OPERATOR_OP_KICK", "done", "bo"), "{lines:#?}");
    assert!(
        has("OPERATOR_OP_CLOSE_ROOM", "done", "op-room"),
        "{lines:#?}"
    );
    moderator.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}
