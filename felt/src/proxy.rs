//! An in-process TCP proxy that emulates a link: one-way delay, jitter (order kept, as TCP
//! keeps it) and loss as TCP shows it (a head-of-line stall of one retransmission timeout).
//!
//! This kernel has no `netem` qdisc, so the link is emulated here. Every chunk read from one
//! side is written to the other at `max(previous release, read time + rtt/2 + jitter)`, where
//! jitter is uniform in `[-jitter/2, +jitter/2]`; with probability `loss` a chunk is "lost" and
//! its release (and so everything behind it) waits one more RTO (`max(200 ms, rtt + 4 × jitter)`,
//! Linux's floor and RFC 6298's formula with the jitter as the RTT variance). [`Proxy::cut`]
//! drops every connection at once (a lost connection: no close frame).
//!
//! Shared: `plaza-felt` puts it in front of its observers, and the whole-system tests
//! (`tests/tests/system/client_links.rs`, reliability row F10) in front of a gateway's clients.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// The emulated link.
#[derive(Clone, Copy, Debug)]
pub struct Link {
    /// Round trip added, ms.
    pub rtt_ms: f64,
    /// Jitter (width of the uniform spread per direction), ms.
    pub jitter_ms: f64,
    /// Chunks stalled by one RTO, percent.
    pub loss_pct: f64,
}

impl Link {
    /// The stall of one lost segment, ms.
    pub fn rto_ms(&self) -> f64 {
        (self.rtt_ms + 4.0 * self.jitter_ms).max(200.0)
    }
}

/// Counters.
#[derive(Debug, Default)]
pub struct ProxyStats {
    /// Chunks forwarded.
    pub chunks: AtomicU64,
    /// Chunks stalled (lost once).
    pub stalls: AtomicU64,
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Cuts made.
    pub cuts: AtomicU64,
}

/// A running proxy.
#[derive(Debug)]
pub struct Proxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    cut: watch::Sender<u64>,
    /// Counters.
    pub stats: Arc<ProxyStats>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream` over `link`.
    pub async fn start(upstream: SocketAddr, link: Link, seed: u64) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (cut, cut_rx) = watch::channel(0u64);
        let stats = Arc::new(ProxyStats::default());
        let st = stats.clone();
        tokio::spawn(async move {
            let mut n = 0u64;
            while let Ok((down, _)) = listener.accept().await {
                n += 1;
                st.connections.fetch_add(1, Ordering::Relaxed);
                let Ok(up) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let _ = down.set_nodelay(true);
                let _ = up.set_nodelay(true);
                let (dr, dw) = down.into_split();
                let (ur, uw) = up.into_split();
                let s = seed.wrapping_mul(1_000_003).wrapping_add(n);
                tokio::spawn(pump(dr, uw, link, s, st.clone(), cut_rx.clone()));
                tokio::spawn(pump(ur, dw, link, s ^ 0x5555, st.clone(), cut_rx.clone()));
            }
        });
        Ok(Self { addr, cut, stats })
    }

    /// Drops every open connection (both directions, no close frame).
    pub fn cut(&self) {
        self.stats.cuts.fetch_add(1, Ordering::Relaxed);
        self.cut.send_modify(|c| *c += 1);
    }
}

async fn pump(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    link: Link,
    seed: u64,
    stats: Arc<ProxyStats>,
    mut cut: watch::Receiver<u64>,
) {
    cut.borrow_and_update();
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let mut wcut = cut.clone();
    let writer = tokio::spawn(async move {
        loop {
            tokio::select! {
                m = rx.recv() => {
                    let Some((at, bytes)) = m else { break };
                    tokio::time::sleep_until(at).await;
                    if w.write_all(&bytes).await.is_err() {
                        break;
                    }
                }
                _ = wcut.changed() => break,
            }
        }
    });
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut last = Instant::now();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            r = r.read(&mut buf) => match r {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            _ = cut.changed() => break,
        };
        let mut d = link.rtt_ms / 2.0;
        if link.jitter_ms > 0.0 {
            d += rng.random_range(-link.jitter_ms / 2.0..=link.jitter_ms / 2.0);
        }
        if link.loss_pct > 0.0 && rng.random_bool((link.loss_pct / 100.0).clamp(0.0, 1.0)) {
            d += link.rto_ms();
            stats.stalls.fetch_add(1, Ordering::Relaxed);
        }
        let at = (Instant::now() + Duration::from_secs_f64(d.max(0.0) / 1000.0)).max(last);
        last = at;
        stats.chunks.fetch_add(1, Ordering::Relaxed);
        if tx.send((at, buf[..n].to_vec())).is_err() {
            break;
        }
    }
    drop(tx);
    // On a cut the writer stops at once (dropping the socket); on EOF it drains what is queued.
    let _ = writer.await;
}
