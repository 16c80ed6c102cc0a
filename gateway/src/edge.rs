//! The edge: every accepted socket, from `accept(2)` until its session ends.
//!
//! A socket is admitted ([`Edge::admit`]) before anything is read from it:
//! * it takes one of the `max_connections` slots (every accepted socket counts: raw TCP, TLS,
//!   HTTP, WebSocket), capped further by the process's file-descriptor limit minus
//!   `fd_reserve`, so the gateway can never use the descriptors the admin port, Redis and the
//!   node links need;
//! * it is *pre-auth* until its session negotiated: pre-auth sockets are capped in total
//!   (`max_preauth`) and per client address (`max_preauth_per_ip`; IPv6 by /64), and each must
//!   complete the TLS handshake, the WebSocket upgrade and a valid `negotiate` within
//!   `handshake_deadline` of its accept — the deadline is fixed at accept, so a header trickled
//!   a byte at a time does not extend it;
//! * once negotiated it holds a per-address session slot (`max_sessions_per_ip`), and its joins
//!   draw from a per-address token bucket (`joins_per_ip_per_s`, `joins_per_ip_burst`).
//!
//! A refused socket gets a one-line HTTP 503/429 written without waiting and is closed. The
//! accept loop survives descriptor exhaustion (`EMFILE`/`ENFILE`): it counts the error, gives
//! back a reserved descriptor to accept-and-close the pending connection (so the backlog
//! drains instead of spinning), and backs off. The admin port uses the same loop shape
//! ([`serve_http`]) and serves the connection it accepts with its reserve, so `/healthz` and
//! `/metrics` keep answering.
//!
//! TLS ([`ServerTls`]): rustls with the `ring` provider; the certificate and key files are
//! re-read when their modification time changes (checked every `reload_every`).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use parking_lot::{Mutex, RwLock};
use prometheus_client::metrics::counter::Counter;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use crate::limits::{TokenBucket, Verdict};
use crate::metrics::GatewayMetrics;

/// Limits on sockets and per-address usage, enforced before and around sessions.
#[derive(Clone, Debug)]
pub struct EdgeLimits {
    /// Most sockets open at once (every accepted socket counts).
    pub max_connections: usize,
    /// Most sockets that have not negotiated yet, in total.
    pub max_preauth: usize,
    /// Most sockets that have not negotiated yet, per client address (IPv6: per /64).
    pub max_preauth_per_ip: usize,
    /// Most negotiated sessions per client address.
    pub max_sessions_per_ip: usize,
    /// Joins per second per client address (token bucket rate).
    pub joins_per_ip_per_s: u32,
    /// Burst of the per-address join bucket.
    pub joins_per_ip_burst: u32,
    /// File descriptors kept free for everything but client sockets: the gateway accepts at
    /// most `RLIMIT_NOFILE - fd_reserve` sockets. 0 turns the clamp off.
    pub fd_reserve: usize,
}

impl Default for EdgeLimits {
    fn default() -> Self {
        Self {
            max_connections: 20_000,
            max_preauth: 512,
            max_preauth_per_ip: 32,
            max_sessions_per_ip: 256,
            joins_per_ip_per_s: 10,
            joins_per_ip_burst: 40,
            fd_reserve: 64,
        }
    }
}

/// Why a socket or a session was refused at the edge (metric label values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EdgeRefusal {
    /// Every connection slot is taken.
    MaxConnections,
    /// Too many sockets have not negotiated yet.
    PreauthTotal,
    /// Too many sockets from this address have not negotiated yet.
    PreauthIp,
    /// Too many sessions from this address.
    SessionsIp,
    /// Joins from this address over its rate.
    JoinsIp,
    /// No upgrade and negotiate within the handshake deadline (closed before the upgrade).
    Deadline,
    /// The TLS handshake failed.
    Tls,
}

impl EdgeRefusal {
    /// Every refusal, pre-created in the metrics.
    pub const ALL: [Self; 7] = [
        Self::MaxConnections,
        Self::PreauthTotal,
        Self::PreauthIp,
        Self::SessionsIp,
        Self::JoinsIp,
        Self::Deadline,
        Self::Tls,
    ];

    /// The metric label.
    pub const fn name(self) -> &'static str {
        match self {
            Self::MaxConnections => "max_connections",
            Self::PreauthTotal => "preauth_total",
            Self::PreauthIp => "preauth_per_ip",
            Self::SessionsIp => "sessions_per_ip",
            Self::JoinsIp => "joins_per_ip",
            Self::Deadline => "handshake_deadline",
            Self::Tls => "tls_handshake",
        }
    }

    /// What a refused socket is told (written without waiting, then closed).
    fn http_reply(self) -> &'static [u8] {
        match self {
            Self::PreauthIp | Self::SessionsIp | Self::JoinsIp => {
                b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 34\r\nConnection: close\r\n\r\ntoo many connections from address\n"
            }
            _ => {
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 21\r\nConnection: close\r\n\r\ntoo many connections\n"
            }
        }
    }
}

/// The client address a limit is counted by: the IP, IPv6 by its /64 (one host's addresses).
fn ip_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

#[derive(Debug)]
struct IpEntry {
    preauth: usize,
    sessions: usize,
    joins: TokenBucket,
}

#[derive(Debug, Default)]
struct EdgeState {
    preauth: usize,
    /// One entry per address with an open socket (removed with its last socket): bounded by
    /// the connection cap.
    ips: HashMap<IpAddr, IpEntry>,
}

/// The admission state every socket of a gateway shares.
#[derive(Debug)]
pub struct Edge {
    limits: EdgeLimits,
    budget: usize,
    conns: Arc<Semaphore>,
    state: Mutex<EdgeState>,
    metrics: GatewayMetrics,
}

impl Edge {
    /// An edge enforcing `limits`; the connection cap is clamped to the descriptor limit.
    pub fn new(limits: EdgeLimits, metrics: GatewayMetrics) -> Arc<Self> {
        let budget = connection_budget(limits.max_connections, limits.fd_reserve);
        if budget < limits.max_connections {
            tracing::warn!(
                max_connections = limits.max_connections,
                effective = budget,
                fd_reserve = limits.fd_reserve,
                "gateway.max_connections clamped by RLIMIT_NOFILE minus gateway.fd_reserve \
                 (raise the descriptor limit, e.g. `ulimit -n`, to accept more)"
            );
        }
        Arc::new(Self {
            limits,
            budget,
            conns: Arc::new(Semaphore::new(budget)),
            state: Mutex::new(EdgeState::default()),
            metrics,
        })
    }

    /// The effective connection cap (`max_connections` clamped by the descriptor limit).
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Sockets open now.
    pub fn open(&self) -> usize {
        self.budget - self.conns.available_permits()
    }

    /// Sockets open now that have not negotiated.
    pub fn preauth(&self) -> usize {
        self.state.lock().preauth
    }

    fn refused(&self, why: EdgeRefusal) {
        self.metrics.edge_refused(why.name());
    }

    /// Admits a socket accepted from `peer` at `now`, or says why not.
    pub fn admit(self: &Arc<Self>, peer: SocketAddr, now: Instant) -> Result<Conn, EdgeRefusal> {
        let Ok(permit) = self.conns.clone().try_acquire_owned() else {
            return Err(EdgeRefusal::MaxConnections);
        };
        let ip = ip_key(peer.ip());
        let mut st = self.state.lock();
        if st.preauth >= self.limits.max_preauth {
            return Err(EdgeRefusal::PreauthTotal);
        }
        let limits = &self.limits;
        let e = st.ips.entry(ip).or_insert_with(|| IpEntry {
            preauth: 0,
            sessions: 0,
            joins: TokenBucket::new(limits.joins_per_ip_per_s, limits.joins_per_ip_burst, now),
        });
        if e.preauth >= limits.max_preauth_per_ip {
            if e.sessions == 0 && e.preauth == 0 {
                st.ips.remove(&ip);
            }
            return Err(EdgeRefusal::PreauthIp);
        }
        e.preauth += 1;
        st.preauth += 1;
        drop(st);
        self.metrics.edge_preauth.inc();
        self.metrics.edge_connections.inc();
        Ok(Conn {
            edge: self.clone(),
            ip,
            peer,
            accepted: now,
            phase: Mutex::new(ConnPhase::PreAuth),
            _permit: permit,
        })
    }

    fn release(&self, ip: IpAddr, phase: ConnPhase) {
        self.metrics.edge_connections.dec();
        let mut st = self.state.lock();
        if phase == ConnPhase::PreAuth {
            st.preauth -= 1;
            self.metrics.edge_preauth.dec();
        }
        if let Some(e) = st.ips.get_mut(&ip) {
            match phase {
                ConnPhase::PreAuth => e.preauth -= 1,
                ConnPhase::Session => e.sessions -= 1,
                ConnPhase::Released => {}
            }
            if e.preauth == 0 && e.sessions == 0 {
                st.ips.remove(&ip);
            }
        }
    }
}

/// Sockets the gateway may hold: `max_connections`, at most `RLIMIT_NOFILE - fd_reserve`.
fn connection_budget(max_connections: usize, fd_reserve: usize) -> usize {
    if fd_reserve == 0 {
        return max_connections.max(1);
    }
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    let fds = usize::try_from(soft).unwrap_or(usize::MAX);
    max_connections.min(fds.saturating_sub(fd_reserve)).max(1)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ConnPhase {
    PreAuth,
    Session,
    Released,
}

/// One admitted socket: its slot, its address's counts, and when it was accepted. Dropping it
/// gives everything back.
#[derive(Debug)]
pub struct Conn {
    edge: Arc<Edge>,
    ip: IpAddr,
    peer: SocketAddr,
    accepted: Instant,
    phase: Mutex<ConnPhase>,
    _permit: OwnedSemaphorePermit,
}

impl Conn {
    /// When the socket was accepted (the handshake deadline counts from here).
    pub fn accepted(&self) -> Instant {
        self.accepted
    }

    /// The client's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Whether the socket has not negotiated yet.
    pub fn is_preauth(&self) -> bool {
        *self.phase.lock() == ConnPhase::PreAuth
    }

    /// The session negotiated: leaves the pre-auth counts for a per-address session slot, or
    /// refuses (the address holds `max_sessions_per_ip` sessions already).
    pub fn negotiated(&self) -> Result<(), EdgeRefusal> {
        let mut phase = self.phase.lock();
        if *phase != ConnPhase::PreAuth {
            return Ok(());
        }
        let edge = &self.edge;
        let mut st = edge.state.lock();
        let Some(e) = st.ips.get_mut(&self.ip) else {
            return Ok(());
        };
        if e.sessions >= edge.limits.max_sessions_per_ip {
            drop(st);
            edge.refused(EdgeRefusal::SessionsIp);
            return Err(EdgeRefusal::SessionsIp);
        }
        e.sessions += 1;
        e.preauth -= 1;
        st.preauth -= 1;
        drop(st);
        edge.metrics.edge_preauth.dec();
        *phase = ConnPhase::Session;
        Ok(())
    }

    /// Takes a join from the address's join bucket; false = over its rate.
    pub fn allow_join(&self, now: Instant) -> bool {
        let mut st = self.edge.state.lock();
        let ok = st
            .ips
            .get_mut(&self.ip)
            .is_none_or(|e| e.joins.check(now) == Verdict::Allow);
        drop(st);
        if !ok {
            self.edge.refused(EdgeRefusal::JoinsIp);
        }
        ok
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let phase = std::mem::replace(&mut *self.phase.lock(), ConnPhase::Released);
        self.edge.release(self.ip, phase);
    }
}

// === descriptor exhaustion ===

/// Whether an accept error is descriptor exhaustion (per process or system-wide).
fn is_fd_exhausted(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(c) if c == rustix::io::Errno::MFILE.raw_os_error()
            || c == rustix::io::Errno::NFILE.raw_os_error()
    )
}

/// Errors of one connection, not of the listener (the next accept may succeed at once).
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        e.kind(),
        K::ConnectionRefused | K::ConnectionAborted | K::ConnectionReset | K::Interrupted
    )
}

/// One descriptor held back to be given up when the process runs out, so the accept loop can
/// still take a pending connection off the backlog.
#[derive(Debug)]
struct FdReserve(Option<std::fs::File>);

impl FdReserve {
    fn new() -> Self {
        Self(std::fs::File::open("/dev/null").ok())
    }

    /// Closes the reserved descriptor; false if it is already given up.
    fn release(&mut self) -> bool {
        self.0.take().is_some()
    }

    fn restore(&mut self) {
        if self.0.is_none() {
            self.0 = std::fs::File::open("/dev/null").ok();
        }
    }
}

/// How long one admin connection may stay open (keep-alive included).
const ADMIN_CONNECTION_MAX: Duration = Duration::from_secs(300);

const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_millis(500);

/// What the accept loop got.
enum Accepted {
    /// A socket.
    Socket(TcpStream, SocketAddr),
    /// A socket accepted with the reserved descriptor (descriptors are exhausted).
    Reserve(TcpStream, SocketAddr),
    /// Nothing this time (an error was counted; the loop backed off).
    Nothing,
}

/// Accepts the next socket, surviving descriptor exhaustion: on `EMFILE`/`ENFILE` it counts
/// the error, gives up the reserve to take one pending socket (returned as
/// [`Accepted::Reserve`]; the caller restores the reserve once it is closed), and backs off.
async fn accept(
    listener: &TcpListener,
    reserve: &mut FdReserve,
    backoff: &mut Duration,
    emfile: &Counter,
    name: &'static str,
) -> Accepted {
    // A reserve lost to a race (between giving it back and the accept, another listener's
    // accept took the descriptor, so it could not be reopened) is taken again as soon as a
    // descriptor is free: without it the admin port starved until the squatters' deadline.
    reserve.restore();
    match listener.accept().await {
        Ok((tcp, peer)) => {
            *backoff = BACKOFF_MIN;
            Accepted::Socket(tcp, peer)
        }
        Err(e) if is_connection_error(&e) => Accepted::Nothing,
        Err(e) if is_fd_exhausted(&e) => {
            if emfile.inc() == 0 || *backoff >= BACKOFF_MAX {
                tracing::warn!(listener = name, error = %e, "out of file descriptors; shedding");
            }
            let wait = *backoff;
            *backoff = (*backoff * 2).min(BACKOFF_MAX);
            if reserve.release() {
                if let Ok(Ok((tcp, peer))) =
                    tokio::time::timeout(Duration::from_millis(5), listener.accept()).await
                {
                    return Accepted::Reserve(tcp, peer);
                }
                reserve.restore();
            }
            tokio::time::sleep(wait).await;
            Accepted::Nothing
        }
        Err(e) => {
            tracing::warn!(listener = name, error = %e, "accept failed");
            let wait = *backoff;
            *backoff = (*backoff * 2).min(BACKOFF_MAX);
            tokio::time::sleep(wait).await;
            Accepted::Nothing
        }
    }
}

// === serving ===

/// How the client listener runs.
pub(crate) struct GatewayListener {
    pub(crate) listener: TcpListener,
    pub(crate) app: axum::Router,
    pub(crate) edge: Arc<Edge>,
    pub(crate) tls: Option<Arc<ServerTls>>,
    pub(crate) handshake_deadline: Duration,
    pub(crate) send_buffer: Option<usize>,
    pub(crate) metrics: GatewayMetrics,
}

/// The client accept loop: admits each socket and serves it (TLS, HTTP, the upgrade) within its
/// handshake deadline; stops when `stop` turns true.
pub(crate) async fn serve_gateway(l: GatewayListener, mut stop: watch::Receiver<bool>) {
    let mut reserve = FdReserve::new();
    let mut backoff = BACKOFF_MIN;
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    tokio::pin!(stopped);
    let (stop_tx, stop_rx) = watch::channel(false);
    loop {
        let got = tokio::select! {
            () = &mut stopped => break,
            a = accept(&l.listener, &mut reserve, &mut backoff, &l.metrics.accept_emfile, "gateway") => a,
        };
        let (tcp, peer) = match got {
            Accepted::Socket(tcp, peer) => (tcp, peer),
            Accepted::Reserve(tcp, _) => {
                // Out of descriptors: this one only drains the backlog.
                l.edge.refused(EdgeRefusal::MaxConnections);
                let _ = tcp.try_write(EdgeRefusal::MaxConnections.http_reply());
                drop(tcp);
                reserve.restore();
                continue;
            }
            Accepted::Nothing => continue,
        };
        let now = Instant::now();
        let conn = match l.edge.admit(peer, now) {
            Ok(c) => Arc::new(c),
            Err(why) => {
                l.edge.refused(why);
                let _ = tcp.try_write(why.http_reply());
                continue;
            }
        };
        // TCP_NODELAY: frames are small and latency-bound.
        let _ = tcp.set_nodelay(true);
        if let Some(n) = l.send_buffer {
            let _ = socket2::SockRef::from(&tcp).set_send_buffer_size(n);
        }
        let deadline = now + l.handshake_deadline;
        let app = l.app.clone();
        let tls = l.tls.clone();
        let edge = l.edge.clone();
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let work = serve_conn(
                tcp,
                peer,
                app,
                tls.as_deref(),
                Some(conn),
                None,
                Some(&edge),
            );
            tokio::select! {
                () = work => {}
                () = tokio::time::sleep_until(deadline) => edge.refused(EdgeRefusal::Deadline),
                _ = stop.wait_for(|s| *s) => {}
            }
        });
    }
    // Sockets still before their upgrade are closed; upgraded sessions see the gateway's own
    // shutdown signal.
    let _ = stop_tx.send(true);
}

/// Serves one socket: the TLS handshake (if any), then HTTP/1.1 with upgrades, each request
/// carrying the peer address (and the admitted [`Conn`]).
async fn serve_conn(
    tcp: TcpStream,
    peer: SocketAddr,
    app: axum::Router,
    tls: Option<&ServerTls>,
    conn: Option<Arc<Conn>>,
    header_timeout: Option<Duration>,
    edge: Option<&Edge>,
) {
    match tls {
        Some(t) => match t.acceptor().accept(tcp).await {
            Ok(s) => serve_io(s, peer, app, conn, header_timeout).await,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                if let Some(edge) = edge {
                    edge.refused(EdgeRefusal::Tls);
                }
            }
        },
        None => serve_io(tcp, peer, app, conn, header_timeout).await,
    }
}

async fn serve_io<I>(
    io: I,
    peer: SocketAddr,
    app: axum::Router,
    conn: Option<Arc<Conn>>,
    header_timeout: Option<Duration>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        if let Some(c) = &conn {
            req.extensions_mut().insert(c.clone());
        }
        tower::ServiceExt::oneshot(app.clone(), req)
    });
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(TokioTimer::new());
    b.header_read_timeout(header_timeout);
    let _ = b
        .serve_connection(TokioIo::new(io), svc)
        .with_upgrades()
        .await;
}

/// Serves `app` on `listener` (HTTP/1.1, optionally TLS) until `stop`: the admin port. Each
/// connection has `header_timeout` to send its request head. When descriptors run out, the
/// connection accepted with the reserve descriptor is served (bounded by `header_timeout`)
/// before the reserve is restored, so health checks and scrapes keep answering; `emfile`
/// counts the exhaustions.
pub async fn serve_http(
    listener: TcpListener,
    app: axum::Router,
    tls: Option<Arc<ServerTls>>,
    header_timeout: Duration,
    emfile: Counter,
    mut stop: watch::Receiver<bool>,
) {
    let mut reserve = FdReserve::new();
    let mut backoff = BACKOFF_MIN;
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    tokio::pin!(stopped);
    loop {
        let got = tokio::select! {
            () = &mut stopped => break,
            a = accept(&listener, &mut reserve, &mut backoff, &emfile, "admin") => a,
        };
        match got {
            Accepted::Socket(tcp, peer) => {
                let app = app.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let work = serve_conn(
                        tcp,
                        peer,
                        app,
                        tls.as_deref(),
                        None,
                        Some(header_timeout),
                        None,
                    );
                    // A connection's whole life is bounded: the admin port serves short calls.
                    let _ = tokio::time::timeout(ADMIN_CONNECTION_MAX, work).await;
                });
            }
            Accepted::Reserve(tcp, peer) => {
                let work = serve_conn(tcp, peer, app.clone(), tls.as_deref(), None, None, None);
                let _ = tokio::time::timeout(header_timeout, work).await;
                reserve.restore();
            }
            Accepted::Nothing => {}
        }
    }
}

// === TLS ===

/// A certificate chain and private key, PEM files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain (leaf first).
    pub cert: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// A refused TLS setting.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds nothing usable.
    #[error("{path}: {why}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// rustls refused the configuration.
    #[error("tls: {0}")]
    Rustls(#[from] rustls::Error),
}

fn file_err(path: &Path, why: impl std::fmt::Display) -> TlsError {
    TlsError::File {
        path: path.to_owned(),
        why: why.to_string(),
    }
}

/// Reads every certificate of a PEM file (at least one).
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_err(path, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_err(path, e))?;
    if certs.is_empty() {
        return Err(file_err(path, "no PEM certificate in the file"));
    }
    Ok(certs)
}

/// Reads the private key of a PEM file.
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| file_err(path, e))
}

/// The crypto provider every TLS setting of Plaza uses.
pub fn crypto_provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Installs `ring` as the process's default rustls provider (libraries that build their own
/// rustls configuration, like the Redis client, need one); idempotent.
pub fn install_default_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn load_key(files: &TlsFiles) -> Result<Arc<CertifiedKey>, TlsError> {
    let certs = read_certs(&files.cert)?;
    let key = read_key(&files.key)?;
    let signer = crypto_provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| file_err(&files.key, e))?;
    let ck = CertifiedKey::new(certs, signer);
    ck.keys_match().map_err(|e| file_err(&files.key, e))?;
    Ok(Arc::new(ck))
}

fn mtimes(files: &TlsFiles) -> (Option<SystemTime>, Option<SystemTime>) {
    let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    (m(&files.cert), m(&files.key))
}

#[derive(Debug)]
struct Resolver(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().clone())
    }
}

/// A TLS server setting whose certificate is re-read when its files change.
pub struct ServerTls {
    files: TlsFiles,
    resolver: Arc<Resolver>,
    acceptor: TlsAcceptor,
    stamp: Mutex<(Option<SystemTime>, Option<SystemTime>)>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.files)
            .finish()
    }
}

impl ServerTls {
    /// Loads `files`; fails if they do not hold a matching certificate and key.
    pub fn load(files: &TlsFiles) -> Result<Arc<Self>, TlsError> {
        let stamp = mtimes(files);
        let resolver = Arc::new(Resolver(RwLock::new(load_key(files)?)));
        let mut config = rustls::ServerConfig::builder_with_provider(crypto_provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(Self {
            files: files.clone(),
            resolver,
            acceptor: TlsAcceptor::from(Arc::new(config)),
            stamp: Mutex::new(stamp),
        }))
    }

    /// The acceptor (its certificate is the latest one loaded).
    pub fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }

    /// The leaf certificate served now (DER).
    pub fn current_cert(&self) -> CertificateDer<'static> {
        self.resolver.0.read().cert[0].clone()
    }

    /// Re-reads the files if their modification time changed. `Ok(true)` = a new certificate is
    /// served; an unreadable or mismatched pair is an error and the old one stays.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let now = mtimes(&self.files);
        if *self.stamp.lock() == now {
            return Ok(false);
        }
        let key = load_key(&self.files)?;
        *self.resolver.0.write() = key;
        *self.stamp.lock() = now;
        Ok(true)
    }

    /// Checks the files every `every` until the returned task is aborted or `self` is the last
    /// reference.
    pub fn watch(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(t) = weak.upgrade() else { return };
                match t.reload_if_changed() {
                    Ok(true) => {
                        tracing::info!(cert = %t.files.cert.display(), "TLS certificate reloaded")
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "TLS certificate not reloaded; keeping the old one")
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(limits: EdgeLimits) -> Arc<Edge> {
        Edge::new(limits, GatewayMetrics::default())
    }

    fn peer(last: u8, port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, last], port))
    }

    #[test]
    fn preauth_is_capped_in_total_and_per_address_and_given_back() {
        let e = edge(EdgeLimits {
            max_preauth: 4,
            max_preauth_per_ip: 2,
            ..EdgeLimits::default()
        });
        let now = Instant::now();
        let a1 = e.admit(peer(1, 1), now).unwrap();
        let _a2 = e.admit(peer(1, 2), now).unwrap();
        assert_eq!(
            e.admit(peer(1, 3), now).unwrap_err(),
            EdgeRefusal::PreauthIp
        );
        let _b1 = e.admit(peer(2, 1), now).unwrap();
        let _b2 = e.admit(peer(2, 2), now).unwrap();
        assert_eq!(
            e.admit(peer(3, 1), now).unwrap_err(),
            EdgeRefusal::PreauthTotal
        );
        // A negotiated session leaves the pre-auth counts.
        a1.negotiated().unwrap();
        assert_eq!(e.preauth(), 3);
        assert!(e.admit(peer(1, 4), now).is_ok());
        assert_eq!(e.preauth(), 3, "the admitted socket was dropped again");
        drop(a1);
        assert_eq!(e.open(), 3);
    }

    #[test]
    fn sessions_and_joins_are_capped_per_address() {
        let e = edge(EdgeLimits {
            max_sessions_per_ip: 1,
            joins_per_ip_per_s: 1,
            joins_per_ip_burst: 2,
            ..EdgeLimits::default()
        });
        let now = Instant::now();
        let a = e.admit(peer(1, 1), now).unwrap();
        let b = e.admit(peer(1, 2), now).unwrap();
        a.negotiated().unwrap();
        assert_eq!(b.negotiated().unwrap_err(), EdgeRefusal::SessionsIp);
        assert!(a.allow_join(now) && a.allow_join(now));
        assert!(
            !b.allow_join(now),
            "the bucket is the address's, not the socket's"
        );
        assert!(a.allow_join(now + Duration::from_secs(1)));
        drop(a);
        b.negotiated().unwrap();
    }

    #[test]
    fn every_socket_counts_against_max_connections() {
        let e = edge(EdgeLimits {
            max_connections: 2,
            ..EdgeLimits::default()
        });
        let now = Instant::now();
        let a = e.admit(peer(1, 1), now).unwrap();
        let b = e.admit(peer(2, 1), now).unwrap();
        b.negotiated().unwrap();
        assert_eq!(
            e.admit(peer(3, 1), now).unwrap_err(),
            EdgeRefusal::MaxConnections
        );
        drop(a);
        assert!(e.admit(peer(3, 1), now).is_ok());
    }

    #[test]
    fn ipv6_counts_by_64_and_mapped_v4_as_v4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        assert_eq!(ip_key(a), ip_key(b));
        let m: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(ip_key(m), IpAddr::from([10, 0, 0, 1]));
    }

    #[test]
    fn the_connection_budget_leaves_the_reserve() {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap();
        let soft = usize::try_from(soft).unwrap();
        assert_eq!(connection_budget(usize::MAX, 64), soft - 64);
        assert_eq!(connection_budget(10, 64), 10);
        assert_eq!(connection_budget(usize::MAX, 0), usize::MAX);
    }

    #[test]
    fn a_changed_certificate_is_reloaded_and_a_bad_one_keeps_the_old() {
        let dir = std::env::temp_dir().join(format!("plaza-edge-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = TlsFiles {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        };
        let write = |name: &str| {
            let ck = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
            std::fs::write(&files.cert, ck.cert.pem()).unwrap();
            std::fs::write(&files.key, ck.signing_key.serialize_pem()).unwrap();
            ck.cert.der().to_vec()
        };
        let first = write("one.test");
        let tls = ServerTls::load(&files).unwrap();
        assert_eq!(tls.current_cert().as_ref(), &first[..]);
        assert!(!tls.reload_if_changed().unwrap());
        // Make sure the modification time moves even on a coarse clock.
        std::thread::sleep(Duration::from_millis(20));
        let second = write("two.test");
        let f = std::fs::File::options()
            .write(true)
            .open(&files.cert)
            .unwrap();
        f.set_modified(SystemTime::now() + Duration::from_secs(2))
            .unwrap();
        assert!(tls.reload_if_changed().unwrap());
        assert_eq!(tls.current_cert().as_ref(), &second[..]);
        std::fs::write(&files.key, "not a key").unwrap();
        let f = std::fs::File::options()
            .write(true)
            .open(&files.key)
            .unwrap();
        f.set_modified(SystemTime::now() + Duration::from_secs(4))
            .unwrap();
        assert!(tls.reload_if_changed().is_err());
        assert_eq!(tls.current_cert().as_ref(), &second[..]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
