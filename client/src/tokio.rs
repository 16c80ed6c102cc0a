//! A tokio driver for [`Connection`] (feature `tokio`): a WebSocket (tokio-tungstenite), the
//! clock, and reconnects with exponential backoff and jitter, the resume token and a resync.
//!
//! [`Client::next`] drives everything: it writes what the connection wants sent, reads one
//! message (or waits until the connection's next timer or the caller's deadline) and returns the
//! next [`Event`]. When the transport is lost and the close is retryable ([`CloseKind`]), the
//! client reports [`Event::Closed`] and reconnects on its own: after `backoff_min_s`, doubling
//! up to `backoff_max_s`, plus up to half of that again at random, or after the delay a gateway
//! that goes away advised; the connection presents its resume token, so the session comes back
//! with the same entity and the gateway sends `Joined` and a keyframe. A terminal close ends the
//! client ([`Polled::Ended`]).

use std::time::{Duration, Instant};

use futures_util::{SinkExt as _, StreamExt as _};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::connection::{CloseKind, Connection, ConnectionConfig, Event, State};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Settings of a [`Client`].
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Gateway WebSocket URL (`ws://host:port/v1/ws`).
    pub url: String,
    /// The connection's settings (room, auth, pings).
    pub connection: ConnectionConfig,
    /// First reconnect delay, seconds.
    pub backoff_min_s: f64,
    /// Longest reconnect delay (before jitter), seconds.
    pub backoff_max_s: f64,
    /// Reconnect attempts in a row before giving up (0: never give up).
    pub max_attempts: u32,
    /// Seed of the jitter (0: from the clock).
    pub jitter_seed: u64,
}

impl ClientOptions {
    /// Defaults for `url`: backoff 0.1 s doubling to 5 s, 20 attempts.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            connection: ConnectionConfig::default(),
            backoff_min_s: 0.1,
            backoff_max_s: 5.0,
            max_attempts: 20,
            jitter_seed: 0,
        }
    }

    /// Joins `room` after negotiating.
    pub fn room(mut self, room: impl Into<String>) -> Self {
        self.connection.room = Some(room.into());
        self
    }
}

/// What [`Client::next`] returned (an event is handed over once: not worth a box).
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Polled {
    /// An event.
    Event(Event),
    /// The deadline passed with nothing to report.
    Deadline,
    /// The client ended (a terminal close, or reconnects gave up).
    Ended,
}

/// Why connecting failed for good.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The WebSocket could not be opened.
    #[error("websocket: {0}")]
    Ws(#[from] tokio_tungstenite::tungstenite::Error),
}

/// A Plaza client over a WebSocket.
pub struct Client {
    opts: ClientOptions,
    conn: Connection,
    ws: Option<Ws>,
    epoch: Instant,
    attempts: u32,
    retry_at: Option<Instant>,
    advised: Option<f64>,
    ended: bool,
    rng: u64,
    /// Transports opened.
    pub connects: u64,
    /// Failed connection attempts.
    pub connect_failures: u64,
}

impl Client {
    /// Opens the WebSocket and queues `Negotiate` (and the join). Events follow from
    /// [`Client::next`].
    pub async fn connect(opts: ClientOptions) -> Result<Self, ClientError> {
        let (ws, _) = tokio_tungstenite::connect_async_with_config(
            opts.url.as_str(),
            Some(ws_config()),
            false,
        )
        .await?;
        let epoch = Instant::now();
        let seed = if opts.jitter_seed != 0 {
            opts.jitter_seed
        } else {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        };
        let mut conn = Connection::new(opts.connection.clone());
        conn.connected(0.0);
        Ok(Self {
            opts,
            conn,
            ws: Some(ws),
            epoch,
            attempts: 0,
            retry_at: None,
            advised: None,
            ended: false,
            rng: seed,
            connects: 1,
            connect_failures: 0,
        })
    }

    /// Seconds since the client started (the clock the connection and smoothers are fed).
    pub fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    /// The instant of local time `t` (seconds on [`Client::now`]'s clock).
    pub fn instant_at(&self, t: f64) -> Instant {
        self.epoch + Duration::from_secs_f64(t.max(0.0))
    }

    /// The connection.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// The connection, to send requests ([`Connection::send_movement`], [`Connection::send`]);
    /// what they queue goes out at the next [`Client::next`] or [`Client::flush`].
    pub fn connection_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }

    /// Whether a transport is open.
    pub fn is_connected(&self) -> bool {
        self.ws.is_some()
    }

    /// Drops the transport without a close frame, as a lost connection (for tests; the client
    /// reconnects with its resume token).
    pub fn drop_transport(&mut self) {
        if self.ws.take().is_some() {
            self.conn.handle_close(None);
            self.schedule_retry(CloseKind::Resume);
        }
    }

    /// Writes everything queued.
    pub async fn flush(&mut self) {
        let Some(ws) = self.ws.as_mut() else {
            while self.conn.poll_transmit().is_some() {}
            return;
        };
        let mut failed = false;
        while let Some(bytes) = self.conn.poll_transmit() {
            if ws.feed(Message::Binary(bytes.into())).await.is_err() {
                failed = true;
                break;
            }
        }
        if !failed && ws.flush().await.is_err() {
            failed = true;
        }
        if failed {
            self.lost(None);
        }
    }

    /// Closes normally (1000).
    pub async fn close(mut self) {
        if let Some(mut ws) = self.ws.take() {
            let _ = ws.close(None).await;
        }
    }

    fn lost(&mut self, code: Option<u16>) {
        self.ws = None;
        self.conn.handle_close(code);
        let kind = CloseKind::of(code);
        if self.conn.resume_token().is_empty() && kind == CloseKind::Resume {
            // Nothing to resume (closed before Negotiated): come back as a new session.
            self.schedule_retry(CloseKind::RetryLater);
        } else {
            self.schedule_retry(kind);
        }
    }

    fn schedule_retry(&mut self, kind: CloseKind) {
        if !kind.retryable()
            || (self.opts.max_attempts > 0 && self.attempts >= self.opts.max_attempts)
        {
            self.ended = true;
            return;
        }
        let base = (self.opts.backoff_min_s * 2f64.powi(self.attempts.min(30) as i32))
            .min(self.opts.backoff_max_s);
        let base = if kind == CloseKind::RetryLater {
            base.max(1.0)
        } else {
            base
        };
        let delay = match self.advised.take() {
            Some(a) => a.max(base),
            None => base,
        } + base * 0.5 * self.random();
        self.attempts += 1;
        self.retry_at = Some(Instant::now() + Duration::from_secs_f64(delay));
    }

    fn random(&mut self) -> f64 {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }

    async fn reconnect(&mut self) {
        self.retry_at = None;
        match tokio_tungstenite::connect_async_with_config(
            self.opts.url.as_str(),
            Some(ws_config()),
            false,
        )
        .await
        {
            Ok((ws, _)) => {
                self.ws = Some(ws);
                self.connects += 1;
                let now = self.now();
                self.conn.connected(now);
            }
            Err(_) => {
                self.connect_failures += 1;
                self.schedule_retry(CloseKind::Resume);
            }
        }
    }

    /// The next event, driving the transport until `deadline` (None: no deadline).
    pub async fn next(&mut self, deadline: Option<Instant>) -> Polled {
        loop {
            if let Some(e) = self.conn.poll_event() {
                match &e {
                    Event::ReconnectAdvised { after_s } => self.advised = Some(*after_s),
                    Event::Joined(_) => self.attempts = 0,
                    _ => {}
                }
                return Polled::Event(e);
            }
            if self.ended {
                return Polled::Ended;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Polled::Deadline;
            }
            if self.ws.is_none() {
                let at = self.retry_at.unwrap_or_else(Instant::now);
                if let Some(d) = deadline
                    && d < at
                {
                    tokio::time::sleep_until(d.into()).await;
                    return Polled::Deadline;
                }
                tokio::time::sleep_until(at.into()).await;
                self.reconnect().await;
                continue;
            }
            self.flush().await;
            let epoch = self.epoch;
            let timer = self
                .conn
                .poll_timeout()
                .map(|t| epoch + Duration::from_secs_f64(t.max(0.0)));
            let Some(ws) = self.ws.as_mut() else {
                continue;
            };
            let wake = match (timer, deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let msg = match wake {
                Some(w) => match tokio::time::timeout_at(w.into(), ws.next()).await {
                    Ok(m) => m,
                    Err(_) => {
                        let now = self.now();
                        self.conn.handle_timeout(now);
                        continue;
                    }
                },
                None => ws.next().await,
            };
            let now = self.now();
            match msg {
                Some(Ok(Message::Binary(b))) => {
                    // A message that is not an envelope is counted by the connection.
                    let _ = self.conn.handle_input_bytes(b, now);
                    self.conn.handle_timeout(now);
                }
                Some(Ok(Message::Close(f))) => {
                    let code = f.map(|f| u16::from(f.code));
                    self.lost(code);
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => self.lost(None),
            }
            if self.conn.state() == State::Disconnected && self.ws.is_some() {
                self.ws = None;
            }
        }
    }
}

/// The WebSocket settings of the driver: a small read buffer. Tungstenite zero-fills the free
/// part of its read buffer (up to `read_buffer_size`) before every read, and its default
/// (128 KiB) made that fill the largest cost of receiving a frame of a few hundred bytes; a
/// larger message is still read whole (the buffer grows to the message's length).
pub fn ws_config() -> tokio_tungstenite::tungstenite::protocol::WebSocketConfig {
    tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
}

/// Bytes read per `read` call at most ([`ws_config`]).
pub const READ_BUFFER: usize = 2 * 1024;
