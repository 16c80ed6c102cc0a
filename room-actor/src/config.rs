//! How a node runs ([`NodeConfig`]), its gRPC TLS files ([`NodeTls`]), and why it may fail
//! to start ([`NodeError`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::room::RoomActorConfig;
use crate::supervisor;

/// How a node runs.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This node's id (unique in the cluster).
    pub node_id: String,
    /// Where the gRPC service listens (`127.0.0.1:0` for an ephemeral port).
    pub listen: SocketAddr,
    /// The address gateways dial, if different from the bound one (e.g. a pod DNS name).
    pub advertise: Option<String>,
    /// How rooms run.
    pub room: RoomActorConfig,
    /// Placement lease TTL.
    pub lease_ttl: Duration,
    /// Node heartbeat TTL in the directory (renewed at a third of it).
    pub heartbeat_ttl: Duration,
    /// Capacity of each session's outbound channel, frames.
    pub session_queue: usize,
    /// Register as `<node_id>.<random boot id>` so a restarted process never renews (and
    /// commits under) a lease its previous incarnation still holds.
    pub unique_id: bool,
    /// Append activations and directory commits to this file (see [`EventLog`](crate::EventLog)).
    pub event_log: Option<PathBuf>,
    /// Every gRPC call must carry `authorization: Bearer <token>` (gateways send it); calls
    /// without it are refused `UNAUTHENTICATED`. `None` = any caller.
    pub grpc_token: Option<String>,
    /// Serve gRPC over TLS (and, with a client CA, require gateways' client certificates).
    /// `None` = plain HTTP/2.
    pub tls: Option<NodeTls>,
}

/// The node's gRPC TLS files (PEM): its certificate chain and key, and optionally the CA that
/// gateways' client certificates must chain to (mTLS).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeTls {
    /// Certificate chain, leaf first. Its SANs must cover the address the node advertises
    /// (an IP SAN for an IP, a DNS SAN for a name): gateways check it.
    pub cert: PathBuf,
    /// Private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// With a client CA, a connection without a client certificate signed by it is refused
    /// in the TLS handshake, before any call.
    pub client_ca: Option<PathBuf>,
}

impl NodeTls {
    /// Reads the files and builds tonic's server TLS configuration.
    pub fn server_config(&self) -> Result<tonic::transport::ServerTlsConfig, NodeError> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|source| NodeError::TlsFile {
                path: path.to_path_buf(),
                source,
            })
        };
        let identity = tonic::transport::Identity::from_pem(read(&self.cert)?, read(&self.key)?);
        let mut cfg = tonic::transport::ServerTlsConfig::new().identity(identity);
        if let Some(ca) = &self.client_ca {
            cfg = cfg.client_ca_root(tonic::transport::Certificate::from_pem(read(ca)?));
        }
        Ok(cfg)
    }
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            node_id: "node-1".into(),
            listen: ([127, 0, 0, 1], 0).into(),
            advertise: None,
            room: RoomActorConfig::default(),
            lease_ttl: Duration::from_secs(10),
            heartbeat_ttl: Duration::from_secs(10),
            session_queue: 64,
            unique_id: true,
            event_log: None,
            grpc_token: None,
            tls: None,
        }
    }
}

/// Errors starting a node.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The listener could not be bound.
    #[error("bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The supervisor could not start.
    #[error(transparent)]
    Rooms(#[from] supervisor::RoomsError),
    /// Registration in the directory failed.
    #[error("directory: {0}")]
    Directory(#[from] plaza_directory::DirectoryError),
    /// A TLS file could not be read.
    #[error("node TLS file {path}: {source}")]
    TlsFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The TLS certificate, key or client CA is not usable.
    #[error("node TLS: {0}")]
    Tls(String),
    /// The event log could not be opened.
    #[error("event log {path}: {source}")]
    EventLog {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The id the node registers under: `node_id`, with a random boot suffix when `unique_id` is
/// set (see [`NodeConfig::unique_id`]).
pub(crate) fn registered_id(cfg: &NodeConfig) -> String {
    if cfg.unique_id {
        format!("{}.{:08x}", cfg.node_id, rand_u32())
    } else {
        cfg.node_id.clone()
    }
}

/// A random `u32` from the std hasher's per-process random keys (no extra dependency).
fn rand_u32() -> u32 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unique_id_is_the_node_id_with_a_boot_suffix() {
        let cfg = NodeConfig {
            node_id: "n".into(),
            ..NodeConfig::default()
        };
        let id = registered_id(&cfg);
        let (base, suffix) = id.split_once('.').expect("a boot suffix");
        assert_eq!(base, "n");
        assert_eq!(suffix.len(), 8);
        assert!(suffix.bytes().all(|b| b.is_ascii_hexdigit()));
        let plain = NodeConfig {
            unique_id: false,
            ..cfg
        };
        assert_eq!(registered_id(&plain), "n");
    }

    #[test]
    fn a_missing_tls_file_is_named_in_the_error() {
        let tls = NodeTls {
            cert: PathBuf::from("/nonexistent/plaza-cert.pem"),
            key: PathBuf::from("/nonexistent/plaza-key.pem"),
            client_ca: None,
        };
        match tls.server_config() {
            Err(NodeError::TlsFile { path, .. }) => assert_eq!(path, tls.cert),
            other => panic!("expected a TlsFile error, got {:?}", other.map(|_| ())),
        }
    }
}
