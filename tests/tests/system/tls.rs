//! TLS with certificates made by the test (`rcgen`): `plaza up --tls-cert C --tls-key K` serves
//! `wss://` (bots join through it and decode frames; a client that does not trust the
//! certificate fails), the admin port serves `https` with its bearer token, and a replaced
//! certificate is served without a restart (the files are re-read on change).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use plaza_tests::cluster::{free_port, plaza_bin};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

/// A self-signed certificate for `localhost` written as `NAME.pem` / `NAME.key` in `dir`;
/// returns the certificate (DER) to trust.
fn make_cert(dir: &Path, name: &str) -> (PathBuf, PathBuf, CertificateDer<'static>) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert = dir.join(format!("{name}.pem"));
    let key = dir.join(format!("{name}.key"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    (cert, key, CertificateDer::from(ck.cert.der().to_vec()))
}

/// `GET path` over https trusting `ca`; (status, body).
async fn https_get(
    addr: SocketAddr,
    ca: &CertificateDer<'static>,
    path: &str,
    token: Option<&str>,
) -> anyhow::Result<(u16, String)> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone())?;
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = TcpStream::connect(addr).await?;
    let mut tls = TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost")?, tcp)
        .await?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    tls.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n")
            .as_bytes(),
    )
    .await?;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut buf)).await?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("bad http response: {text:?}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|x| x.1.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

fn load(port: u16, ca: Option<&Path>, bots: usize) -> plaza_load::LoadConfig {
    let mut cfg = plaza_load::LoadConfig::new(format!("wss://localhost:{port}/v1/ws"), bots);
    cfg.rooms = 1;
    cfg.duration = Duration::from_secs(2);
    cfg.ramp = Some(Duration::from_millis(200));
    cfg.progress = false;
    cfg.connect_attempts = 1;
    cfg.ca_certs = ca.map(|p| vec![p.to_owned()]).unwrap_or_default();
    cfg
}

/// Kills the child when the test ends, however it ends.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaza_up_serves_wss_and_https_and_reloads_its_certificate() {
    let dir = std::env::temp_dir().join(format!("plaza-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key, der) = make_cert(&dir, "gw");
    let (admin_cert, admin_key, admin_der) = make_cert(&dir, "admin");
    let ws_port = free_port();
    let admin: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let mut cmd = std::process::Command::new(plaza_bin().unwrap());
    cmd.args(["up", "--listen", &format!("127.0.0.1:{ws_port}")])
        .args(["--admin-listen", &admin.to_string()])
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .env("PLAZA__ADMIN__TLS_CERT", &admin_cert)
        .env("PLAZA__ADMIN__TLS_KEY", &admin_key)
        .env("PLAZA__ADMIN__TOKEN", "s3cret-token")
        .env("PLAZA__LOG__LEVEL", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _p = Running(cmd.spawn().unwrap());

    // https on the admin port: ready, and the operator API wants its token.
    let mut ready = false;
    for _ in 0..200 {
        if let Ok((200, _)) = https_get(admin, &admin_der, "/readyz", None).await {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ready, "admin https never answered /readyz");
    let (st, _) = https_get(admin, &admin_der, "/v1/peers", None)
        .await
        .unwrap();
    assert_eq!(st, 401);
    let (st, body) = https_get(admin, &admin_der, "/v1/peers", Some("s3cret-token"))
        .await
        .unwrap();
    assert_eq!(st, 200, "{body}");
    // Plain http to the https port gets nothing useful.
    assert!(!matches!(
        plaza_tests::http_get(admin, "/healthz").await,
        Ok((200, _))
    ));
    // The admin certificate is not the gateway's.
    assert!(https_get(admin, &der, "/healthz", None).await.is_err());

    // wss: bots trusting the certificate join and decode frames; others fail on TLS.
    let r = plaza_load::run(load(ws_port, Some(&cert), 4))
        .await
        .unwrap();
    assert_eq!(r.bots_connected, 4, "{}", r.summary());
    assert_eq!((r.bots_failed, r.decode_errors), (0, 0), "{}", r.summary());
    assert!(r.frames_received > 0);
    let r = plaza_load::run(load(ws_port, None, 2)).await.unwrap();
    assert_eq!(r.bots_failed, 2, "{}", r.summary());
    assert!(
        r.connect_errors.0.get("tls").copied().unwrap_or(0) >= 2,
        "{:?}",
        r.connect_errors
    );

    // A new certificate in place of the old: served within the reload period (10 s shipped).
    let (new_cert, new_key, _) = make_cert(&dir, "gw2");
    std::fs::copy(&new_key, &key).unwrap();
    std::fs::copy(&new_cert, &cert).unwrap();
    let t0 = std::time::Instant::now();
    let mut switched = false;
    while t0.elapsed() < Duration::from_secs(20) {
        let r = plaza_load::run(load(ws_port, Some(&new_cert), 1))
            .await
            .unwrap();
        if r.bots_connected == 1 {
            switched = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!(
        "new certificate served {:?} after the files changed",
        t0.elapsed()
    );
    assert!(switched, "the replaced certificate was never served");
    let _ = std::fs::remove_dir_all(&dir);
}
