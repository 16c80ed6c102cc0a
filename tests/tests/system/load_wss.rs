//! `plaza-load` over `wss://`: a TLS-terminating proxy (rustls, a certificate generated for
//! `localhost` in the test) in front of the real gateway. With `--ca-cert` trusting that
//! certificate every bot joins and decodes frames through TLS; without it every bot fails with
//! a TLS error (the certificate is not in the webpki roots), which the report counts.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use plaza_tests::{start_plaza, test_config, ws_url};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Terminates TLS on a free port and forwards the plaintext to `upstream`. Returns the port
/// and the PEM file of its certificate.
async fn tls_proxy(upstream: SocketAddr) -> (u16, PathBuf) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let pem = std::env::temp_dir().join(format!("plaza-wss-{}.pem", std::process::id()));
    std::fs::write(&pem, ck.cert.pem()).unwrap();
    let cert = CertificateDer::from(ck.cert.der().to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut up) = TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
            });
        }
    });
    (port, pem)
}

fn config(port: u16, bots: usize) -> plaza_load::LoadConfig {
    let mut cfg = plaza_load::LoadConfig::new(format!("wss://localhost:{port}/v1/ws"), bots);
    cfg.rooms = 2;
    cfg.duration = Duration::from_secs(3);
    cfg.ramp = Some(Duration::from_millis(300));
    cfg.progress = false;
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bots_reach_a_wss_gateway_and_an_untrusted_certificate_fails_them() {
    let plaza = start_plaza(&test_config()).await;
    let ws: SocketAddr = ws_url(&plaza)
        .trim_start_matches("ws://")
        .trim_end_matches("/v1/ws")
        .parse()
        .unwrap();
    let (port, pem) = tls_proxy(ws).await;

    let mut cfg = config(port, 6);
    cfg.ca_certs = vec![pem.clone()];
    let r = plaza_load::run(cfg).await.unwrap();
    assert_eq!(r.bots_connected, 6, "{}", r.summary());
    assert_eq!((r.bots_failed, r.bots_lost, r.decode_errors), (0, 0, 0));
    assert!(r.frames_received > 0 && r.snapshot_interval_ms.count > 0);

    let mut cfg = config(port, 2);
    cfg.connect_attempts = 1;
    let r = plaza_load::run(cfg).await.unwrap();
    assert_eq!(r.bots_failed, 2, "{}", r.summary());
    assert!(
        r.connect_errors.0.get("tls").copied().unwrap_or(0) >= 2,
        "{:?}",
        r.connect_errors
    );
    plaza.shutdown().await;
    let _ = std::fs::remove_file(&pem);
}
