//! A loopback TCP proxy whose link can be cut the way `iptables -j DROP` cuts one: while cut,
//! no byte moves in either direction and nothing is refused or reset — connections stay open
//! and stall, new ones are accepted but not forwarded — until the link is healed and everything
//! queued flows on. Stands in for a network partition between one process and a server (e.g.
//! a room node and Redis) on a machine without network namespaces.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The proxy; it stops (and drops its connections) when dropped.
#[derive(Debug)]
pub struct Blackhole {
    addr: SocketAddr,
    cut: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Blackhole {
    /// Listens on an ephemeral loopback port and forwards each connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (cut, rx) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let rx = rx.clone();
                conns.spawn(async move {
                    let _ = forward(client, upstream, rx).await;
                });
            }
        });
        Ok(Self { addr, cut, task })
    }

    /// Where to connect instead of the upstream.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cuts the link (bytes stop both ways).
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Heals the link.
    pub fn heal(&self) {
        self.cut.send_replace(false);
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn open(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|cut| !*cut).await;
}

async fn forward(
    client: TcpStream,
    upstream: SocketAddr,
    mut rx: watch::Receiver<bool>,
) -> std::io::Result<()> {
    open(&mut rx).await;
    let server = TcpStream::connect(upstream).await?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = pump(cr, sw, rx.clone());
    let down = pump(sr, cw, rx);
    let _ = tokio::try_join!(up, down);
    Ok(())
}

/// Copies `from` to `to`, reading and writing only while the link is open.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut rx: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        open(&mut rx).await;
        let n = tokio::select! {
            n = from.read(&mut buf) => n?,
            // Cut while waiting: stop reading until healed.
            _ = rx.wait_for(|cut| *cut) => continue,
        };
        if n == 0 {
            to.shutdown().await?;
            return Ok(());
        }
        open(&mut rx).await;
        to.write_all(&buf[..n]).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn bytes_stall_while_cut_and_flow_after_heal() {
        let echo = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let upstream = echo.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        let bh = Blackhole::start(upstream).await.unwrap();
        let mut c = TcpStream::connect(bh.addr()).await.unwrap();
        let mut got = [0u8; 4];
        c.write_all(b"ping").await.unwrap();
        c.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");

        bh.cut();
        c.write_all(b"lost").await.unwrap();
        let stalled =
            tokio::time::timeout(Duration::from_millis(300), c.read_exact(&mut got)).await;
        assert!(stalled.is_err(), "nothing comes back while cut");

        bh.heal();
        tokio::time::timeout(Duration::from_secs(5), c.read_exact(&mut got))
            .await
            .expect("queued bytes flow after the heal")
            .unwrap();
        assert_eq!(&got, b"lost");
    }
}
