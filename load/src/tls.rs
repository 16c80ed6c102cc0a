//! `wss://` for the bots: rustls (the `ring` provider) trusting the webpki root certificates
//! plus the certificates of any `--ca-cert` PEM file (a private CA or a self-signed gateway
//! certificate). Built once per run; every bot shares it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject as _;

/// A refused TLS setting.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A `--ca-cert` file could not be read or holds no PEM certificate.
    #[error("--ca-cert {path}: {why}")]
    CaFile {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// rustls refused the configuration.
    #[error("tls: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The client configuration of a run: webpki roots plus every certificate in `ca_certs`.
pub fn client_config(ca_certs: &[PathBuf]) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for path in ca_certs {
        for cert in read_certs(path)? {
            roots.add(cert).map_err(|e| TlsError::CaFile {
                path: path.clone(),
                why: format!("not a usable CA certificate: {e}"),
            })?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bad = |why: String| TlsError::CaFile {
        path: path.to_owned(),
        why,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("no PEM certificate in the file".into()));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_empty_ca_file_is_an_error_naming_it() {
        assert!(client_config(&[]).is_ok());
        let missing = PathBuf::from("/nonexistent/ca.pem");
        let err = client_config(std::slice::from_ref(&missing))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--ca-cert /nonexistent/ca.pem:"), "{err}");
        let empty =
            std::env::temp_dir().join(format!("plaza-load-empty-{}.pem", std::process::id()));
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let err = client_config(std::slice::from_ref(&empty))
            .unwrap_err()
            .to_string();
        assert!(err.contains("no PEM certificate"), "{err}");
        let _ = std::fs::remove_file(&empty);
    }
}
