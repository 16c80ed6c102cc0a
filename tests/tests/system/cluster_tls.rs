//! The whole cluster with encrypted, authenticated internal traffic, on certificates made by
//! the test (`rcgen`): Redis serving TLS only (`--port 0 --tls-port P`, client certificates
//! required), 2 nodes serving gRPC over TLS that require a gateway client certificate (mTLS),
//! 1 gateway dialling them over `https` with its client certificate and reaching Redis over
//! `rediss://` with a private CA, and an admin token.
//!
//! * Bots join and get frames through the gateway (load run: every bot connected, no failure).
//! * A raw gRPC client without a client certificate, or with one from another CA, is refused
//!   by a node's attach; with the gateway's certificate the call is taken.
//! * The admin API answers 401 without the token, 200 with it.
//! * Redis has no plain port; a client without TLS, or TLS without a client certificate, gets
//!   no answer.
//! * A gateway that trusts another CA cannot attach to the nodes: the join fails, and the
//!   gateway counts `plaza_gateway_node_tls_failures_total`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use plaza_directory::test_util::RedisServer;
use plaza_directory::{RedisOptions, RedisTls};
use plaza_node_proto::NodeInbound;
use plaza_node_proto::room_host_client::RoomHostClient;
use plaza_proto::pb::{self, client_envelope, server_envelope};
use plaza_tests::cluster::{Cluster, ClusterOpts, free_port};
use plaza_tests::{Client, scrape_metrics};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const ADMIN_TOKEN: &str = "adm1n-t0ken-for-the-test";

/// A certificate authority of the test.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
    pem: PathBuf,
}

fn ca(dir: &Path, name: &str) -> Ca {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name
        .push(DnType::CommonName, format!("plaza test {name}"));
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let issuer = CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap();
    let pem = dir.join(format!("{name}.pem"));
    std::fs::write(&pem, issuer.pem()).unwrap();
    Ca { issuer, pem }
}

/// A leaf certificate signed by `ca` with these SANs (IP strings become IP SANs) and usages,
/// written as `NAME.pem` / `NAME.key`.
fn leaf(
    dir: &Path,
    ca: &Ca,
    name: &str,
    sans: &[&str],
    usages: &[ExtendedKeyUsagePurpose],
) -> (PathBuf, PathBuf) {
    let mut p =
        CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    p.distinguished_name.push(DnType::CommonName, name);
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = usages.to_vec();
    let key = KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, &ca.issuer).unwrap();
    let (c, k) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (c, k)
}

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_owned()
}

/// `redis-cli` over TLS with `args` (bounded); its stdout, or `None` if it failed.
fn redis_cli(port: u16, tls: &[String], args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("timeout")
        .arg("10")
        .arg("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "--tls"])
        .args(tls)
        .args(args)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.success() && !text.contains("ERR") && !text.is_empty()).then_some(text)
}

/// The attach call of a raw gRPC client over TLS trusting `ca`, with `identity` (cert, key) or
/// none: the status code it was refused with, or `None` when the node took the call.
async fn raw_attach(
    node: SocketAddr,
    ca: &Path,
    identity: Option<(&Path, &Path)>,
) -> Result<(), String> {
    let mut tls = tonic::transport::ClientTlsConfig::new().ca_certificate(
        tonic::transport::Certificate::from_pem(std::fs::read(ca).unwrap()),
    );
    if let Some((c, k)) = identity {
        tls = tls.identity(tonic::transport::Identity::from_pem(
            std::fs::read(c).unwrap(),
            std::fs::read(k).unwrap(),
        ));
    }
    let ep = tonic::transport::Endpoint::from_shared(format!("https://{node}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect_timeout(Duration::from_secs(3));
    let channel = match ep.connect().await {
        Ok(c) => c,
        Err(e) => return Err(format!("connect: {e:?}")),
    };
    let mut client = RoomHostClient::new(channel);
    let req = tonic::Request::new(futures_util::stream::pending::<NodeInbound>());
    match tokio::time::timeout(Duration::from_secs(3), client.attach(req)).await {
        Ok(Err(status)) => Err(format!("{:?}: {status}", status.code())),
        // Taken: the node waits for the attach message (or answered the headers already).
        Ok(Ok(_)) | Err(_) => Ok(()),
    }
}

/// One HTTP/1.1 GET on the admin port with an optional bearer token: the status.
async fn admin_get(addr: SocketAddr, path: &str, token: Option<&str>) -> u16 {
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    sock.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{auth}\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), sock.read_to_end(&mut buf))
        .await
        .expect("the admin port answers")
        .unwrap();
    String::from_utf8_lossy(&buf)
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line")
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && !l.starts_with('#'))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_runs_on_rediss_mtls_and_an_admin_token() {
    let dir = std::env::temp_dir().join(format!(
        "plaza-tls-pki-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let server = [ExtendedKeyUsagePurpose::ServerAuth];
    let client = [ExtendedKeyUsagePurpose::ClientAuth];
    let cluster_ca = ca(&dir, "cluster-ca");
    let other_ca = ca(&dir, "other-ca");
    // Nodes advertise 127.0.0.1:PORT: the gateway checks an IP SAN.
    let (node_cert, node_key) = leaf(&dir, &cluster_ca, "node", &["127.0.0.1"], &server);
    let (gw_cert, gw_key) = leaf(&dir, &cluster_ca, "gateway", &[], &client);
    let (stranger_cert, stranger_key) = leaf(&dir, &other_ca, "stranger", &[], &client);
    let (redis_cert, redis_key) = leaf(&dir, &cluster_ca, "redis", &["127.0.0.1"], &server);
    let (rc_cert, rc_key) = leaf(&dir, &cluster_ca, "redis-client", &[], &client);

    // Redis: TLS only, client certificates required.
    let redis = RedisServer::start_tls(&[
        "--tls-cert-file",
        &s(&redis_cert),
        "--tls-key-file",
        &s(&redis_key),
        "--tls-ca-cert-file",
        &s(&cluster_ca.pem),
        "--tls-auth-clients",
        "yes",
    ])
    .unwrap();
    let redis_port = redis.port();
    assert!(redis.url().starts_with("rediss://"), "{}", redis.url());

    let env: Vec<(String, String)> = [
        ("PLAZA__DIRECTORY__REDIS_CA", s(&cluster_ca.pem)),
        ("PLAZA__DIRECTORY__REDIS_CERT", s(&rc_cert)),
        ("PLAZA__DIRECTORY__REDIS_KEY", s(&rc_key)),
        ("PLAZA__NODE__TLS_CERT", s(&node_cert)),
        ("PLAZA__NODE__TLS_KEY", s(&node_key)),
        ("PLAZA__NODE__TLS_CLIENT_CA", s(&cluster_ca.pem)),
        ("PLAZA__GATEWAY__NODE_TLS_CA", s(&cluster_ca.pem)),
        ("PLAZA__GATEWAY__NODE_TLS_CERT", s(&gw_cert)),
        ("PLAZA__GATEWAY__NODE_TLS_KEY", s(&gw_key)),
        ("PLAZA__ADMIN__TOKEN", ADMIN_TOKEN.to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let dir_tls = RedisTls {
        ca: Some(std::fs::read(&cluster_ca.pem).unwrap()),
        client: Some((
            std::fs::read(&rc_cert).unwrap(),
            std::fs::read(&rc_key).unwrap(),
        )),
    };
    let c = Cluster::start_on(
        ClusterOpts {
            nodes: 2,
            env,
            ..ClusterOpts::default()
        },
        redis,
        RedisOptions {
            tls: Some(dir_tls),
            ..RedisOptions::default()
        },
    )
    .await
    .unwrap();

    // Bots join and get frames through the gateway (over https to the nodes).
    let t0 = std::time::Instant::now();
    eprintln!("cluster up");
    let cfg = c.load_config(8, 2, "tls-", 6);
    let bots = cfg.bots as u64;
    let report = plaza_load::run(cfg).await.unwrap();
    assert_eq!(
        report.bots_connected,
        bots,
        "{report:?}\n{}",
        c.gateway.log_tail(30)
    );
    assert_eq!(report.bots_failed, 0, "{report:?}");
    assert_eq!(report.decode_errors, 0, "{report:?}");
    assert!(report.frames_received > 0, "{report:?}");
    eprintln!("load done after {:?}", t0.elapsed());
    let placed = c
        .placements(&["tls-0".to_owned(), "tls-1".to_owned()])
        .await;
    assert!(!placed.is_empty(), "the bots' rooms ran on the nodes");

    // A node's attach: refused without a client certificate and with one from another CA;
    // taken with the gateway's.
    let node_addr: SocketAddr = c
        .directory
        .live_nodes()
        .await
        .unwrap()
        .first()
        .expect("a node")
        .addr
        .parse()
        .unwrap();
    let none = raw_attach(node_addr, &cluster_ca.pem, None).await;
    assert!(none.is_err(), "no client certificate: {none:?}");
    let stranger = raw_attach(
        node_addr,
        &cluster_ca.pem,
        Some((&stranger_cert, &stranger_key)),
    )
    .await;
    assert!(
        stranger.is_err(),
        "a certificate of another CA: {stranger:?}"
    );
    eprintln!("refused: no client certificate: {none:?}; another CA: {stranger:?}");
    let ours = raw_attach(node_addr, &cluster_ca.pem, Some((&gw_cert, &gw_key))).await;
    assert!(ours.is_ok(), "the cluster's client certificate: {ours:?}");
    // And plain HTTP/2 to the node port gets nowhere.
    let mut plain = RoomHostClient::connect(format!("http://{node_addr}")).await;
    if let Ok(cl) = plain.as_mut() {
        let req = tonic::Request::new(futures_util::stream::pending::<NodeInbound>());
        let r = tokio::time::timeout(Duration::from_secs(3), cl.attach(req)).await;
        assert!(matches!(r, Ok(Err(_))), "plain h2 to a TLS node: {r:?}");
    }

    // The admin API: 401 without the token (or with another), 200 with it.
    let admin = c.gateway.admin;
    assert_eq!(admin_get(admin, "/v1/peers", None).await, 401);
    assert_eq!(admin_get(admin, "/v1/peers", Some("guess")).await, 401);
    assert_eq!(admin_get(admin, "/v1/peers", Some(ADMIN_TOKEN)).await, 200);
    let node_admin = c.nodes[0].admin;
    assert_eq!(admin_get(node_admin, "/v1/node", None).await, 401);
    assert_eq!(
        admin_get(node_admin, "/v1/node", Some(ADMIN_TOKEN)).await,
        200
    );

    // Redis: no plain port (port 0), TLS clients only, and those need a client certificate.
    let with_cert = [
        "--cacert".to_owned(),
        s(&cluster_ca.pem),
        "--cert".to_owned(),
        s(&rc_cert),
        "--key".to_owned(),
        s(&rc_key),
    ];
    let port = redis_cli(redis_port, &with_cert, &["CONFIG", "GET", "port"]).expect("redis-cli");
    assert_eq!(
        port.split_whitespace().collect::<Vec<_>>(),
        ["port", "0"],
        "Redis has a plain port: {port}"
    );
    let clients =
        redis_cli(redis_port, &with_cert, &["CLIENT", "LIST"]).expect("redis-cli CLIENT LIST");
    // The test's own client, 2 nodes, 1 gateway, and this redis-cli: all came in over TLS
    // (there is no other port).
    assert!(clients.lines().count() >= 4, "{clients}");
    let no_cert = ["--cacert".to_owned(), s(&cluster_ca.pem)];
    assert_eq!(
        redis_cli(redis_port, &no_cert, &["PING"]),
        None,
        "Redis answered a TLS client without a client certificate"
    );
    let mut raw = tokio::net::TcpStream::connect(("127.0.0.1", redis_port))
        .await
        .unwrap();
    raw.write_all(b"PING\r\n").await.unwrap();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), raw.read(&mut buf))
        .await
        .map_or(0, |r| r.unwrap_or(0));
    assert!(
        !buf[..n].starts_with(b"+PONG"),
        "Redis answered plain RESP on its TLS port"
    );

    // A gateway that trusts another CA: it cannot attach (the nodes' certificates do not
    // verify), the client's join fails, and the failure is counted.
    let wrong = c
        .spawn_gateway(
            "gw-wrong-ca",
            vec![
                ("PLAZA__GATEWAY__NODE_TLS_CA".to_owned(), s(&other_ca.pem)),
                (
                    "PLAZA__GATEWAY__NODE_TLS_CERT".to_owned(),
                    s(&stranger_cert),
                ),
                ("PLAZA__GATEWAY__NODE_TLS_KEY".to_owned(), s(&stranger_key)),
            ],
        )
        .await
        .unwrap();
    let url = format!("ws://{}/v1/ws", wrong.ws.unwrap());
    let mut probe = Client::connect(&url).await.unwrap();
    probe
        .send(client_envelope::Body::Join(pb::Join {
            room_id: "tls-0".to_owned(),
        }))
        .await
        .unwrap();
    // The gateway retries the attach up to its join deadline (10 s), then refuses the join.
    let refused = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match probe.recv().await {
                Ok(Some(server_envelope::Body::Joined(j))) => return Err(format!("{j:?}")),
                Ok(Some(server_envelope::Body::Error(e))) => return Ok(format!("{e:?}")),
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return Ok("closed".to_owned()),
            }
        }
    })
    .await
    .expect("the join is answered within the gateway's deadline");
    assert!(
        refused.is_ok(),
        "a gateway with the wrong CA served a join: {refused:?}"
    );
    eprintln!("wrong-CA gateway refused the join: {refused:?}");
    let m = scrape_metrics(wrong.admin).await.unwrap();
    assert!(
        metric(&m, "plaza_gateway_node_tls_failures_total") >= 1.0,
        "not counted:\n{}",
        m.lines()
            .filter(|l| l.contains("node_tls"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        wrong
            .log_tail(200)
            .contains("TLS handshake with the room node failed"),
        "{}",
        wrong.log_tail(30)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
