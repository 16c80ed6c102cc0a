//! Options, the URL forms of `directory.redis_url`, and the connection of a
//! [`RedisDirectory`]: one server, a Redis Cluster (connected on first use) or the primary a
//! set of Sentinels reports (resolved again after an error).

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::keys::glob_escape;
use super::reply::unavailable;
use super::{LUA_MAX_INT, RedisDirectory, Scripts};
use crate::era::EraFloor;
use crate::error::DirectoryError;

/// Options of the Redis backend.
#[derive(Clone, Debug)]
pub struct RedisOptions {
    /// Prefix of every key (default `plaza:`); distinct prefixes isolate tenants and tests.
    pub prefix: String,
    /// Timeout of one command (default 2 s); a timed-out call is [`DirectoryError::Unavailable`].
    pub response_timeout: Duration,
    /// Timeout of one connection attempt (default 1 s).
    pub connection_timeout: Duration,
    /// Private CA and client certificate for `rediss://` (default: the system's roots, no
    /// client certificate).
    pub tls: Option<RedisTls>,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            prefix: "plaza:".into(),
            response_timeout: Duration::from_secs(2),
            connection_timeout: Duration::from_secs(1),
            tls: None,
        }
    }
}

/// TLS material of a `rediss://` connection, PEM bytes.
#[derive(Clone, Default)]
pub struct RedisTls {
    /// The CA the server's certificate must chain to, instead of the system's roots.
    pub ca: Option<Vec<u8>>,
    /// A client certificate chain and its key, for a server with `tls-auth-clients yes`.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTls")
            .field("ca", &self.ca.is_some())
            .field("client", &self.client.is_some())
            .finish()
    }
}

impl RedisTls {
    fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.ca.clone(),
        }
    }
}

/// What `directory.redis_url` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedisTarget {
    /// One server (`redis://`, `rediss://`, `unix://`).
    Single(String),
    /// A Redis Cluster given by seed node URLs (`redis+cluster://h1:p1,h2:p2`).
    Cluster(Vec<String>),
    /// Sentinels (URLs) and the service name (`redis+sentinel://s1:p1,s2:p2/SERVICE`).
    Sentinel {
        /// The Sentinels.
        sentinels: Vec<String>,
        /// The monitored service (master group) name.
        service: String,
        /// The `redis://` or `rediss://` scheme to reach the primary with, and its userinfo.
        template: String,
    },
}

impl RedisTarget {
    /// Parses a `directory.redis_url`.
    pub fn parse(url: &str) -> Result<Self, DirectoryError> {
        let bad = |why: &str| DirectoryError::Invalid(format!("redis url: {why}"));
        let url = url.trim();
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(bad("no scheme"));
        };
        let hosts = |rest: &str, plain: &str| -> Result<(Vec<String>, String), DirectoryError> {
            let (auth, hosts) = match rest.rsplit_once('@') {
                Some((a, h)) => (format!("{a}@"), h),
                None => (String::new(), rest),
            };
            let (hosts, path) = match hosts.split_once('/') {
                Some((h, p)) => (h, p.to_string()),
                None => (hosts, String::new()),
            };
            let list: Vec<String> = hosts
                .split(',')
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .map(|h| format!("{plain}://{auth}{h}"))
                .collect();
            if list.is_empty() {
                return Err(bad("no host"));
            }
            Ok((list, path))
        };
        match scheme {
            "redis" | "rediss" | "unix" | "redis+unix" => Ok(Self::Single(url.to_string())),
            "redis+cluster" | "rediss+cluster" => {
                let plain = scheme.trim_end_matches("+cluster");
                let (list, _) = hosts(rest, plain)?;
                Ok(Self::Cluster(list))
            }
            "redis+sentinel" => {
                let plain = "redis";
                let (auth, _) = rest.rsplit_once('@').unwrap_or(("", rest));
                let (list, service) = hosts(rest, "redis")?;
                let service = service.trim_matches('/').to_string();
                if service.is_empty() {
                    return Err(bad("sentinel URL needs /SERVICE"));
                }
                let auth = if auth.is_empty() {
                    String::new()
                } else {
                    format!("{auth}@")
                };
                Ok(Self::Sentinel {
                    sentinels: list,
                    service,
                    template: format!("{plain}://{auth}"),
                })
            }
            _ => Err(bad(
                "scheme must be redis, rediss, unix, redis+cluster or redis+sentinel",
            )),
        }
    }
}

/// One connection of any kind (cheap clones).
#[derive(Clone)]
pub(super) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }
    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(cmd, offset, count),
            Self::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }
    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

/// How connections are made: once (one server), lazily (a cluster, connected on first use),
/// or through Sentinel (resolved again after an error).
pub(super) enum Backend {
    Single(ConnectionManager),
    Cluster {
        client: ClusterClient,
        con: tokio::sync::Mutex<Option<ClusterConnection>>,
    },
    Sentinel {
        sentinel: tokio::sync::Mutex<redis::sentinel::SentinelClient>,
        cfg: ConnectionManagerConfig,
        con: tokio::sync::Mutex<Option<ConnectionManager>>,
    },
}

impl RedisDirectory {
    /// Connects with default options. `boot_era` is the node's own era floor (e.g. its boot
    /// time in unix ms, or a persisted counter); must be below 2^53.
    pub async fn connect(url: &str, boot_era: u64) -> Result<Self, DirectoryError> {
        Self::connect_with(url, boot_era, RedisOptions::default()).await
    }

    /// Connects with `opts`. Fails with [`DirectoryError::Unavailable`] if Redis is unreachable.
    pub async fn connect_with(
        url: &str,
        boot_era: u64,
        opts: RedisOptions,
    ) -> Result<Self, DirectoryError> {
        let d = Self::connect_lazy(url, boot_era, opts)?;
        // One round trip proves the connection (and, for a cluster, its slot map).
        d.server_time_ms().await?;
        Ok(d)
    }

    /// Like [`Self::connect_with`] but does not wait for Redis: the first call connects, and
    /// calls fail with [`DirectoryError::Unavailable`] until Redis is up (for processes that
    /// may start before Redis). Must be called inside a tokio runtime.
    pub fn connect_lazy(
        url: &str,
        boot_era: u64,
        opts: RedisOptions,
    ) -> Result<Self, DirectoryError> {
        if boot_era > LUA_MAX_INT {
            return Err(DirectoryError::Invalid(
                "boot_era must be below 2^53".into(),
            ));
        }
        if opts.prefix.contains(['{', '}']) {
            return Err(DirectoryError::Invalid(
                "key prefix must not contain { or }".into(),
            ));
        }
        let cfg = ConnectionManagerConfig::new()
            .set_response_timeout(Some(opts.response_timeout))
            .set_connection_timeout(Some(opts.connection_timeout))
            .set_number_of_retries(3)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_secs(1));
        let bad = |e: redis::RedisError| DirectoryError::Invalid(format!("redis url: {e}"));
        let backend = match RedisTarget::parse(url)? {
            RedisTarget::Single(u) => {
                let client = match &opts.tls {
                    // rustls under the process's default provider (ring, installed at start).
                    Some(tls) if u.starts_with("rediss://") => {
                        redis::Client::build_with_tls(u.as_str(), tls.certificates())
                            .map_err(bad)?
                    }
                    _ => redis::Client::open(u.as_str()).map_err(bad)?,
                };
                Backend::Single(
                    ConnectionManager::new_lazy_with_config(client, cfg).map_err(unavailable)?,
                )
            }
            RedisTarget::Cluster(seeds) => {
                let mut builder = ClusterClient::builder(seeds);
                if let Some(tls) = &opts.tls {
                    builder = builder.certs(tls.certificates());
                }
                let client = builder
                    .connection_timeout(opts.connection_timeout)
                    .response_timeout(opts.response_timeout)
                    .retries(3)
                    .min_retry_wait(50)
                    .max_retry_wait(1000)
                    .build()
                    .map_err(bad)?;
                Backend::Cluster {
                    client,
                    con: tokio::sync::Mutex::new(None),
                }
            }
            RedisTarget::Sentinel {
                sentinels,
                service,
                template,
            } => {
                let info = redis::Client::open(format!("{template}127.0.0.1"))
                    .map_err(bad)?
                    .get_connection_info()
                    .clone();
                let node = redis::sentinel::SentinelNodeConnectionInfo::default()
                    .set_redis_connection_info(info.redis_settings().clone());
                let sentinel = redis::sentinel::SentinelClient::build(
                    sentinels,
                    service.clone(),
                    Some(node),
                    redis::sentinel::SentinelServerType::Master,
                )
                .map_err(bad)?;
                Backend::Sentinel {
                    sentinel: tokio::sync::Mutex::new(sentinel),
                    cfg,
                    con: tokio::sync::Mutex::new(None),
                }
            }
        };
        Ok(Self {
            backend,
            prefix: opts.prefix,
            eras: EraFloor::new(boot_era),
            s: Scripts::new(),
        })
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// True when connected to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.backend, Backend::Cluster { .. })
    }

    pub(super) async fn con(&self) -> Result<Conn, DirectoryError> {
        match &self.backend {
            Backend::Single(c) => Ok(Conn::Single(c.clone())),
            Backend::Cluster { client, con } => {
                let mut g = con.lock().await;
                if let Some(c) = &*g {
                    return Ok(Conn::Cluster(c.clone()));
                }
                let c = client.get_async_connection().await.map_err(unavailable)?;
                *g = Some(c.clone());
                Ok(Conn::Cluster(c))
            }
            Backend::Sentinel { sentinel, cfg, con } => {
                let mut g = con.lock().await;
                if let Some(c) = &*g {
                    return Ok(Conn::Single(c.clone()));
                }
                let client = sentinel
                    .lock()
                    .await
                    .async_get_client()
                    .await
                    .map_err(unavailable)?;
                let c = ConnectionManager::new_with_config(client, cfg.clone())
                    .await
                    .map_err(unavailable)?;
                *g = Some(c.clone());
                Ok(Conn::Single(c))
            }
        }
    }

    /// After a failed call through Sentinel, the next call asks the Sentinels for the primary
    /// again (it may have moved: the old one answers READONLY or not at all).
    pub(super) async fn failed(&self, e: &redis::RedisError) {
        if let Backend::Sentinel { con, .. } = &self.backend
            && (e.is_io_error()
                || e.is_timeout()
                || e.is_connection_dropped()
                || e.to_string().contains("READONLY"))
        {
            *con.lock().await = None;
        }
    }

    pub(super) async fn query<T: redis::FromRedisValue>(
        &self,
        cmd: &Cmd,
    ) -> Result<T, DirectoryError> {
        let mut con = self.con().await?;
        match cmd.query_async(&mut con).await {
            Ok(v) => Ok(v),
            Err(e) => {
                self.failed(&e).await;
                Err(unavailable(e))
            }
        }
    }

    /// Redis server time in unix milliseconds (the clock every lease is measured on).
    pub async fn server_time_ms(&self) -> Result<u64, DirectoryError> {
        let (secs, micros): (u64, u64) = self.query(&redis::cmd("TIME")).await?;
        Ok(secs * 1000 + micros / 1000)
    }

    /// Deletes every key under this directory's prefix (tests; simulates data loss of a
    /// shared Redis). Uses SCAN, not KEYS; one server only.
    pub async fn delete_all_keys(&self) -> Result<u64, DirectoryError> {
        if self.is_cluster() {
            return Err(DirectoryError::Invalid(
                "delete_all_keys needs a single server".into(),
            ));
        }
        let pattern = format!("{}*", glob_escape(&self.prefix));
        let mut cursor: u64 = 0;
        let mut n = 0;
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = self
                .query(
                    redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(&pattern)
                        .arg("COUNT")
                        .arg(500),
                )
                .await?;
            for k in keys {
                // One key per DEL: keys of different slots can not share a command.
                let d: u64 = self.query(redis::cmd("DEL").arg(k)).await?;
                n += d;
            }
            if next == 0 {
                return Ok(n);
            }
            cursor = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            RedisTarget::parse("redis://h:1/0").unwrap(),
            RedisTarget::Single("redis://h:1/0".into())
        );
        assert_eq!(
            RedisTarget::parse("redis+cluster://:pw@a:1,b:2").unwrap(),
            RedisTarget::Cluster(vec!["redis://:pw@a:1".into(), "redis://:pw@b:2".into()])
        );
        assert_eq!(
            RedisTarget::parse("rediss+cluster://a:1/").unwrap(),
            RedisTarget::Cluster(vec!["rediss://a:1".into()])
        );
        assert_eq!(
            RedisTarget::parse("redis+sentinel://s1:26379,s2:26379/mymaster").unwrap(),
            RedisTarget::Sentinel {
                sentinels: vec!["redis://s1:26379".into(), "redis://s2:26379".into()],
                service: "mymaster".into(),
                template: "redis://".into(),
            }
        );
        assert!(RedisTarget::parse("redis+sentinel://s1:26379").is_err());
        assert!(RedisTarget::parse("redis+cluster://").is_err());
        assert!(RedisTarget::parse("http://x").is_err());
    }
}
