//! Real identity end to end (issue 15): a JWKS served over HTTP by the test, JWTs signed with
//! keys made here, wallet sign-in with a real secp256k1 signature. A valid token joins; each bad
//! case is a terminal 4003 whose error message starts with its reason; resume tokens are bound
//! to their identity; the load tool does not retry a terminal refusal; a wallet signature
//! replayed to a second gateway of a Redis cluster is refused.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use plaza_directory::{MemoryDirectory, SharedDirectory};
use plaza_gateway::auth::test_keys::{Signer, jwks_json, wallet, wallet_token};
use plaza_ops::config::PlazaConfig;
use plaza_ops::{Plaza, Roles};
use plaza_proto::pb::{self, client_envelope, server_envelope};
use plaza_tests::cluster::{Cluster, ClusterOpts};
use plaza_tests::{Client, Closed, start_plaza, test_config, ws_url};
use serde_json::{Value, json};

const ISSUER: &str = "https://id.test/";
const AUDIENCE: &str = "plaza";

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn claims(sub: &str) -> Value {
    json!({"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "exp": now_s() + 600, "iat": now_s()})
}

fn with(mut c: Value, k: &str, v: Value) -> Value {
    c[k] = v;
    c
}

/// A JWKS endpoint whose document the test can replace (key rotation).
async fn serve_jwks(doc: String) -> (SocketAddr, Arc<Mutex<String>>) {
    let doc = Arc::new(Mutex::new(doc));
    let served = doc.clone();
    let app = axum::Router::new().route(
        "/jwks.json",
        axum::routing::get(move || {
            let d = served.lock().unwrap().clone();
            async move { ([("content-type", "application/json")], d) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, doc)
}

fn jwt_config(jwks: SocketAddr) -> PlazaConfig {
    let mut cfg = test_config();
    cfg.auth.mode = "jwt+wallet".into();
    cfg.auth.jwks_url = format!("http://{jwks}/jwks.json");
    cfg.auth.issuer = ISSUER.into();
    cfg.auth.audience = AUDIENCE.into();
    cfg.auth.banned = "mallory".into();
    cfg
}

/// Connects and negotiates with `auth_token` (and `resume_token`): the negotiated client, or
/// how the connection was closed.
async fn sign_in(url: &str, auth_token: &str, resume_token: &str) -> Result<Client, Closed> {
    let mut c = Client::connect_raw(url).await.unwrap();
    c.send(client_envelope::Body::Negotiate(pb::Negotiate {
        versions: vec![pb::ProtocolVersion { major: 1, minor: 0 }],
        auth_token: auth_token.to_owned(),
        resume_token: resume_token.to_owned(),
        client_name: "auth-test".into(),
    }))
    .await
    .unwrap();
    loop {
        match c.recv_or_close().await.unwrap() {
            Ok(server_envelope::Body::Negotiated(n)) => {
                c.session_id = n.session_id;
                c.wallet = n.wallet;
                c.resume_token = n.resume_token;
                return Ok(c);
            }
            Ok(_) => {}
            Err(closed) => return Err(closed),
        }
    }
}

/// Asserts a terminal authentication refusal with `reason`.
#[track_caller]
fn assert_refused(what: &str, r: Result<Client, Closed>, reason: &str) {
    let closed = match r {
        Ok(c) => panic!("{what}: signed in as {}", c.wallet),
        Err(closed) => closed,
    };
    assert_eq!(closed.code, Some(4003), "{what}: {closed:?}");
    let e = closed
        .errors
        .last()
        .unwrap_or_else(|| panic!("{what}: no error"));
    assert_eq!(e.code, pb::ErrorCode::Auth as i32, "{what}: {e:?}");
    assert!(!e.retryable, "{what}: {e:?}");
    assert!(
        e.message.starts_with(&format!("{reason}: ")),
        "{what}: expected {reason}, got {:?}",
        e.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_and_wallet_sign_in_and_every_bad_token_is_a_typed_4003() {
    let k1 = Signer::ed25519("k1", 5);
    let (jwks, doc) = serve_jwks(jwks_json(&[&k1])).await;
    let plaza = start_plaza(&jwt_config(jwks)).await;
    let url = ws_url(&plaza);

    // A valid JWT joins, as its `sub`.
    let mut alice = sign_in(&url, &k1.sign(&claims("alice")), "").await.unwrap();
    assert_eq!(alice.wallet, "alice");
    alice.join("auth-lobby").await.unwrap();

    // Key rotation: a token of a key published after start is accepted (its unknown kid
    // reloads the key set once).
    let k2 = Signer::es256("k2", 6);
    *doc.lock().unwrap() = jwks_json(&[&k1, &k2]);
    let mut bo = sign_in(&url, &k2.sign(&claims("bo")), "").await.unwrap();
    bo.join("auth-lobby").await.unwrap();

    let t = now_s();
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "expired",
            k1.sign(&with(claims("u"), "exp", json!(t - 120))),
            "auth_expired",
        ),
        (
            "not yet valid",
            k1.sign(&with(claims("u"), "nbf", json!(t + 600))),
            "auth_not_yet_valid",
        ),
        (
            "bad signature",
            Signer::ed25519("k1", 99).sign(&claims("u")),
            "auth_bad_signature",
        ),
        (
            "wrong issuer",
            k1.sign(&with(claims("u"), "iss", json!("https://evil.test/"))),
            "auth_wrong_issuer",
        ),
        (
            "wrong audience",
            k2.sign(&with(claims("u"), "aud", json!("elsewhere"))),
            "auth_wrong_audience",
        ),
        (
            "unknown key",
            Signer::ed25519("k9", 7).sign(&claims("u")),
            "auth_unknown_key",
        ),
        ("banned", k1.sign(&claims("mallory")), "auth_banned"),
        ("guest", "guest:ann".into(), "auth_required"),
        ("no token", String::new(), "auth_required"),
        ("garbage", "not-a-token".into(), "auth"),
    ];
    for (what, token, reason) in cases {
        assert_refused(what, sign_in(&url, &token, "").await, reason);
    }

    // Wallet sign-in: a real personal_sign signature joins as the lowercase address, once.
    let (key, addr) = wallet(1);
    let signed = wallet_token(&key, "plaza", now_ms());
    let mut w = sign_in(&url, &signed, "").await.unwrap();
    assert_eq!(w.wallet, addr);
    w.join("auth-lobby").await.unwrap();
    assert_refused(
        "replayed",
        sign_in(&url, &signed, "").await,
        "auth_replayed",
    );
    assert_refused(
        "stale wallet message",
        sign_in(&url, &wallet_token(&key, "plaza", now_ms() - 120_000), "").await,
        "auth_expired",
    );
    assert_refused(
        "signed for another domain",
        sign_in(&url, &wallet_token(&key, "evil.example", now_ms()), "").await,
        "auth_bad_signature",
    );

    // The members are still in their room.
    alice.pump_for(Duration::from_millis(100)).await.unwrap();
    assert!(alice.decoder().get(bo.entity).is_some());
    plaza.shutdown().await;
}

/// Guests by default in `plaza up` only: with the shipped `auth.mode` (empty), the all-in-one
/// process gives guests their identity while a cluster gateway refuses a client with no token
/// (or a guest token) with the terminal `auth_required`, and starts anyway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guests_are_on_by_default_in_plaza_up_only() {
    let mut cfg = PlazaConfig::defaults();
    assert_eq!(
        cfg.auth.mode, "",
        "the shipped default is the role's default"
    );
    cfg.gateway.listen = "127.0.0.1:0".parse().unwrap();
    cfg.admin.listen = "127.0.0.1:0".parse().unwrap();
    cfg.node.listen = "127.0.0.1:0".parse().unwrap();
    let up = start_plaza(&cfg).await;
    let mut guest = sign_in(&ws_url(&up), "guest:ann", "").await.unwrap();
    assert_eq!(guest.wallet, "guest-ann");
    guest.join("guest-lobby").await.unwrap();
    let fresh = sign_in(&ws_url(&up), "", "").await.unwrap();
    assert!(fresh.wallet.starts_with("guest-"), "{}", fresh.wallet);
    up.shutdown().await;

    let dir: SharedDirectory = Arc::new(MemoryDirectory::new());
    let node = Plaza::start_with_directory(&cfg, Roles::Node, dir.clone())
        .await
        .unwrap();
    let gw = Plaza::start_with_directory(&cfg, Roles::Gateway, dir.clone())
        .await
        .unwrap();
    let url = format!("ws://{}/v1/ws", gw.ws_addr().unwrap());
    assert_refused("no token", sign_in(&url, "", "").await, "auth_required");
    assert_refused(
        "guest",
        sign_in(&url, "guest:ann", "").await,
        "auth_required",
    );
    // Set explicitly, a gateway takes guests too (a development cluster).
    let mut dev = cfg.clone();
    dev.auth.mode = "guest".into();
    let gw_dev = Plaza::start_with_directory(&dev, Roles::Gateway, dir.clone())
        .await
        .unwrap();
    let url_dev = format!("ws://{}/v1/ws", gw_dev.ws_addr().unwrap());
    let mut g = sign_in(&url_dev, "guest:bo", "").await.unwrap();
    g.join("guest-lobby").await.unwrap();
    gw_dev.shutdown().await;
    gw.shutdown().await;
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_token_is_bound_to_its_identity_and_used_once() {
    let k = Signer::ed25519("k", 3);
    let (jwks, _doc) = serve_jwks(jwks_json(&[&k])).await;
    let cfg = jwt_config(jwks);
    let dir: SharedDirectory = Arc::new(MemoryDirectory::new());
    let node = Plaza::start_with_directory(&cfg, Roles::Node, dir.clone())
        .await
        .unwrap();
    let gw_a = Plaza::start_with_directory(&cfg, Roles::Gateway, dir.clone())
        .await
        .unwrap();
    let gw_b = Plaza::start_with_directory(&cfg, Roles::Gateway, dir.clone())
        .await
        .unwrap();
    let url_a = format!("ws://{}/v1/ws", gw_a.ws_addr().unwrap());
    let url_b = format!("ws://{}/v1/ws", gw_b.ws_addr().unwrap());

    let mut victim = sign_in(&url_a, &k.sign(&claims("victim")), "")
        .await
        .unwrap();
    let entity = victim.join("bound").await.unwrap();
    let mut owner = sign_in(&url_a, &k.sign(&claims("owner")), "")
        .await
        .unwrap();
    let owner_entity = owner.join("bound").await.unwrap();
    let mut third = sign_in(&url_a, &k.sign(&claims("third")), "")
        .await
        .unwrap();
    third.join("bound").await.unwrap();
    let (victim_token, owner_token, third_token) = (
        victim.resume_token.clone(),
        owner.resume_token.clone(),
        third.resume_token.clone(),
    );
    let owner_session = owner.session_id;
    let readers =
        [victim, owner, third].map(|mut c| tokio::spawn(async move { c.until_closed().await }));
    gw_a.shutdown().await;
    for r in readers {
        assert_eq!(r.await.unwrap().unwrap().code, Some(1001));
    }

    // The victim's token with the attacker's own valid JWT: refused, and used up.
    let attacker = k.sign(&claims("attacker"));
    assert_refused(
        "another identity",
        sign_in(&url_b, &attacker, &victim_token).await,
        "auth_resume_mismatch",
    );
    let fresh = sign_in(&url_b, &attacker, &victim_token).await.unwrap();
    assert_eq!(fresh.wallet, "attacker", "the used token gives nothing");
    // Without credentials, a JWT identity's token is refused too.
    assert_refused(
        "no credentials",
        sign_in(&url_b, "", &third_token).await,
        "auth_resume_mismatch",
    );
    let mut owner2 = sign_in(&url_b, &k.sign(&claims("owner")), &owner_token)
        .await
        .unwrap();
    assert_eq!(
        (owner2.session_id, owner2.wallet.as_str()),
        (owner_session, "owner"),
        "the owner resumes with its own token and identity"
    );
    owner2.wait_joined().await.unwrap();
    // A leaked old token is worthless once the owner resumed.
    let again = sign_in(&url_b, &k.sign(&claims("owner")), &owner_token)
        .await
        .unwrap();
    assert_ne!(again.session_id, owner_session);
    assert_eq!(owner2.entity, owner_entity, "the entity is kept");
    let _ = entity;
    gw_b.shutdown().await;
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_tool_does_not_retry_a_terminal_refusal() {
    let k = Signer::ed25519("k", 4);
    let (jwks, _doc) = serve_jwks(jwks_json(&[&k])).await;
    let plaza = start_plaza(&jwt_config(jwks)).await;
    let mut cfg = plaza_load::LoadConfig::new(ws_url(&plaza), 4);
    cfg.duration = Duration::from_secs(3);
    cfg.ramp = Some(Duration::from_millis(200));
    cfg.auth_token = k.sign(&with(claims("late"), "exp", json!(now_s() - 3600)));
    let report = plaza_load::run(cfg).await.unwrap();
    assert_eq!(report.bots_connected, 0);
    assert_eq!(report.bots_failed, 4);
    // One attempt per bot (connect_attempts is 3): no reconnect loop against 4003.
    assert_eq!(report.connect_failures, 4, "{:?}", report.connect_errors);
    assert_eq!(report.connect_errors.0.get("auth"), Some(&4));
    plaza.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wallet_signature_replayed_to_a_second_gateway_is_refused() {
    let opts = ClusterOpts {
        nodes: 1,
        gateways: 2,
        env: vec![("PLAZA__AUTH__MODE".into(), "wallet".into())],
        ..ClusterOpts::default()
    };
    let cluster = Cluster::start(opts).await.unwrap();
    let urls = cluster.ws_urls();
    let (key, addr) = wallet(9);
    let signed = wallet_token(&key, "plaza", now_ms());
    let mut c = sign_in(&urls[0], &signed, "").await.unwrap();
    assert_eq!(c.wallet, addr);
    c.join("wallet-room").await.unwrap();
    // The same signature at the other gateway: the replay cache is the shared directory.
    assert_refused(
        "replayed at gateway 2",
        sign_in(&urls[1], &signed, "").await,
        "auth_replayed",
    );
    // A fresh signature of the same wallet is fine there.
    let mut c2 = sign_in(&urls[1], &wallet_token(&key, "plaza", now_ms() + 1), "")
        .await
        .unwrap();
    assert_eq!(c2.wallet, addr);
    c2.pump_for(Duration::from_millis(50)).await.unwrap();
    c.pump_for(Duration::from_millis(50)).await.unwrap();
}
