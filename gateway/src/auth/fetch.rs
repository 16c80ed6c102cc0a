//! A small bounded HTTP(S) GET for key sets (JWKS): one request per connection, HTTP/1.1,
//! `https` verified against the Mozilla roots (webpki-roots), a deadline and a body cap.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt as _, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Largest body accepted (bytes).
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// Fetches `url` (`http://` or `https://`) within `timeout`; the body must be at most
/// [`MAX_BODY_BYTES`] and the status 200.
pub async fn get(url: &str, timeout: Duration) -> Result<Vec<u8>, String> {
    tokio::time::timeout(timeout, get_inner(url))
        .await
        .map_err(|_| format!("GET {url}: no answer within {timeout:?}"))?
}

async fn get_inner(url: &str) -> Result<Vec<u8>, String> {
    let uri: hyper::Uri = url.parse().map_err(|e| format!("bad url {url}: {e}"))?;
    let tls = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(format!("{url}: only http:// and https:// are supported")),
    };
    let host = uri
        .host()
        .ok_or_else(|| format!("{url}: no host"))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let tcp = TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| format!("connect {host}:{port}: {e}"))?;
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let authority = uri
        .authority()
        .map_or(host.clone(), |a| a.as_str().to_owned());
    let req = hyper::Request::get(path)
        .header(hyper::header::HOST, authority)
        .header(hyper::header::ACCEPT, "application/json")
        .header(hyper::header::USER_AGENT, "plaza-gateway")
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    if tls {
        let name = rustls_pki_types::ServerName::try_from(host.clone())
            .map_err(|e| format!("{host}: {e}"))?;
        let stream = tls_connector()
            .connect(name, tcp)
            .await
            .map_err(|e| format!("tls {host}: {e}"))?;
        send(TokioIo::new(stream), req).await
    } else {
        send(TokioIo::new(tcp), req).await
    }
}

async fn send<S>(io: S, req: hyper::Request<Empty<Bytes>>) -> Result<Vec<u8>, String>
where
    S: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| format!("http handshake: {e}"))?;
    let conn = tokio::spawn(conn);
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| format!("http request: {e}"))?;
    let status = resp.status();
    if status != hyper::StatusCode::OK {
        conn.abort();
        return Err(format!("http status {status}"));
    }
    let body = Limited::new(resp.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
        .map_err(|e| format!("http body: {e}"))?
        .to_bytes();
    conn.abort();
    Ok(body.to_vec())
}

fn tls_connector() -> tokio_rustls::TlsConnector {
    static CONNECTOR: std::sync::OnceLock<tokio_rustls::TlsConnector> = std::sync::OnceLock::new();
    CONNECTOR
        .get_or_init(|| {
            let roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let cfg = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("ring supports the default protocol versions")
                .with_root_certificates(roots)
                .with_no_client_auth();
            tokio_rustls::TlsConnector::from(Arc::new(cfg))
        })
        .clone()
}
