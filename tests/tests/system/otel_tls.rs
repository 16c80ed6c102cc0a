//! OTLP over https: `plaza up` with `OTEL_EXPORTER_OTLP_ENDPOINT=https://127.0.0.1:PORT`
//! exports the spans of a join to an OTLP/gRPC collector serving TLS (a real `TraceService`
//! server in this test, with a certificate the test makes with `rcgen`), trusting the test's
//! CA either by `OTEL_EXPORTER_OTLP_CERTIFICATE` or as a system root (`SSL_CERT_FILE`).

use plaza_tests::cluster::free_port;
use plaza_tests::otlp::{Collector, join_and_collect};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use std::path::{Path, PathBuf};

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
    let (c, addr) = Collector::start_tls(&cert, &key).await;
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
    let (c, addr) = Collector::start_tls(&cert, &key).await;
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
