//! OTLP over https: `plaza up` with `OTEL_EXPORTER_OTLP_ENDPOINT=https://127.0.0.1:PORT`
//! exports the spans of a join to an OTLP/gRPC collector serving TLS (a real `TraceService`
//! server in this test, with a certificate the test makes with `rcgen`), trusting the test's
//! CA either by `OTEL_EXPORTER_OTLP_CERTIFICATE` or as a system root (`SSL_CERT_FILE`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use plaza_tests::cluster::{free_port, plaza_bin, wait_until};
use plaza_tests::{Client, http_get};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// The names of the spans the collector got.
#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<String>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for rs in req.into_inner().resource_spans {
            for ss in rs.scope_spans {
                spans.extend(ss.spans.into_iter().map(|s| s.name));
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// A CA and a collector certificate for `127.0.0.1` signed by it, in `dir`:
/// (CA file, certificate file, key file).
fn pki(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name
        .push(DnType::CommonName, "plaza test OTLP CA");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap();
    let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().unwrap();
    let cert = leaf.signed_by(&key, &ca).unwrap();
    let files = (
        dir.join("ca.pem"),
        dir.join("collector.pem"),
        dir.join("collector.key"),
    );
    std::fs::write(&files.0, ca.pem()).unwrap();
    std::fs::write(&files.1, cert.pem()).unwrap();
    std::fs::write(&files.2, key.serialize_pem()).unwrap();
    files
}

async fn start_tls_collector(cert: &Path, key: &Path) -> (Collector, SocketAddr) {
    let collector = Collector::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let tls =
        tonic::transport::ServerTlsConfig::new().identity(tonic::transport::Identity::from_pem(
            std::fs::read(cert).unwrap(),
            std::fs::read(key).unwrap(),
        ));
    let svc = TraceServiceServer::new(collector.clone());
    let server = tonic::transport::Server::builder()
        .tls_config(tls)
        .unwrap()
        .add_service(svc);
    tokio::spawn(async move {
        server.serve_with_incoming(incoming).await.unwrap();
    });
    (collector, addr)
}

struct Up {
    child: Child,
    log: PathBuf,
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `plaza up` with a clean environment (no `OTEL_*`, `PLAZA__*`, `SSL_CERT_*`) plus `env`;
/// joins a room through it and waits (bounded) until the collector has the join's spans.
async fn join_and_collect(name: &str, env: &[(&str, String)], c: &Collector) {
    let bin = plaza_bin().unwrap();
    let ws: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let admin: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let log =
        std::env::temp_dir().join(format!("plaza-otel-tls-{}-{name}.log", std::process::id()));
    let out = std::fs::File::create(&log).unwrap();
    let mut cmd = Command::new(bin);
    cmd.args(["up", "--listen", &ws.to_string()])
        .args(["--admin-listen", &admin.to_string()]);
    for (k, _) in std::env::vars() {
        if k.starts_with("OTEL_")
            || k.starts_with("PLAZA__")
            || k.starts_with("SSL_CERT_")
            || k == "RUST_LOG"
        {
            cmd.env_remove(k);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let up = Up {
        child: cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap(),
        log,
    };
    let tail = || std::fs::read_to_string(&up.log).unwrap_or_default();
    let ready = wait_until(Duration::from_secs(30), || async {
        matches!(http_get(admin, "/readyz").await, Ok((200, _)))
    })
    .await;
    assert!(ready.is_some(), "plaza up never ready:\n{}", tail());
    let mut client = Client::connect(&format!("ws://{ws}/v1/ws")).await.unwrap();
    client.join("otel-tls").await.unwrap();
    client.pump_for(Duration::from_millis(300)).await.unwrap();
    client.close().await;
    let want = ["session", "gateway.attach"];
    let got = wait_until(Duration::from_secs(20), || async {
        let spans = c.spans.lock().unwrap();
        want.iter().all(|w| spans.iter().any(|s| s == w))
    })
    .await;
    assert!(
        got.is_some(),
        "{name}: spans {want:?} never exported over https; got {:?}\n{}",
        c.spans.lock().unwrap(),
        tail()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaza_up_exports_traces_to_an_https_collector() {
    let dir = std::env::temp_dir().join(format!(
        "plaza-otel-tls-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let (ca, cert, key) = pki(&dir);

    // The CA named by the OpenTelemetry variable.
    let (c, addr) = start_tls_collector(&cert, &key).await;
    join_and_collect(
        "otlp-certificate",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("https://{addr}")),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", ca.display().to_string()),
        ],
        &c,
    )
    .await;

    // No OTLP certificate variable: the system's roots, here the test CA as SSL_CERT_FILE.
    let (c, addr) = start_tls_collector(&cert, &key).await;
    join_and_collect(
        "system-roots",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("https://{addr}")),
            ("SSL_CERT_FILE", ca.display().to_string()),
        ],
        &c,
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}
