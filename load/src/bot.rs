//! One bot avatar: connect, negotiate, join, then walk, ping, decode every frame, until the run's
//! deadline; reconnect with the resume token when the server goes away.
//!
//! The bot is a client with a behaviour, not a second implementation of the protocol: its
//! session is a [`plaza_client::Connection`] (negotiate, join, sequences, frames through
//! `plaza_proto::frame::FrameDecoder`, resync, resume token, close codes), and the bot owns only
//! the transport (a small-buffer WebSocket, TLS, the run's gateway rotation), the behaviour
//! (walk, churn, interact, expressions, pings) and the measurements. One tokio task per bot,
//! driven by one `select!` over the WebSocket and a 100 ms client frame timer (movement is decided
//! per client frame by [`crate::rate::SendRate`]; pings go every `ping_interval`; samples are
//! flushed into the shared [`crate::stats::Stats`] once per second). Every frame the connection
//! could not apply is counted (chain breaks and check mismatches as check failures, anything
//! else as a decode error) and the connection answers it with one `Resync` until the keyframe:
//! nothing is ignored.
//!
//! Not here: spawning bots, the time series and the report (see `lib.rs` and `report.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::{SinkExt, StreamExt};
use plaza_client::{
    CloseKind, Connection, ConnectionConfig, Event, FrameErrorKind, FrameFailure, RoomInfo,
    ServerError,
};
use plaza_proto::pb::{
    self, ConsentAction, ConsentOp, Emote, ErrorCode, Interaction, InteractionKind, Join, Movement,
    MovementKind, RejectReason, Vec3, client_envelope::Body as CBody,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Bytes, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::Shared;
use crate::rate::SendRate;
use crate::scenario::{BotKind, BotMix};
use crate::seen::{IdMap, OwnMoves, RoomMoves};
use crate::stats::{Counters, LocalSamples, Metric};
use crate::walk::{Pose, Walker};

/// Snapshot record kind of props (room-core `PROP_KIND`).
const PROP_KIND: u8 = 1;
/// Entity ids of props start above this (room-core `PROP_ENTITY_BASE`).
const PROP_ENTITY_BASE: u32 = 1 << 20;
/// Horizontal distance at which an interactor tries a pickup (the room's reach is 2.5 m from
/// the avatar's centre).
const PICKUP_RANGE_M: f32 = 1.8;

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Client frame period: the bot's "render frame", at which movement sends are decided; shorter
/// when the send rate's `move_interval` is (`--input-hz 20`: 50 ms), never under 10 ms.
const CLIENT_FRAME: Duration = Duration::from_millis(100);
/// WebSocket read buffer per bot, bytes (see `connect_and_join`).
const READ_BUFFER: usize = 1024;
/// Samples are flushed every this many client frames.
const FLUSH_EVERY: u32 = 10;
/// A second `Resync` is sent only if no keyframe came within this time, seconds.
const RESYNC_RETRY_S: f64 = 2.0;

/// What a bot is and where it goes.
pub(crate) struct BotSpec {
    pub(crate) index: usize,
    pub(crate) room: String,
    pub(crate) mix: BotMix,
    pub(crate) start_at: Instant,
    pub(crate) seed: u64,
}

/// Why the handshake (connect, negotiate, join) failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    /// TCP / WebSocket failure.
    #[error("websocket: {0}")]
    Ws(#[from] tungstenite::Error),
    /// No answer within the connect timeout.
    #[error("handshake timed out")]
    Timeout,
    /// The server answered with an `Error`.
    #[error("refused: {code}")]
    Refused {
        /// The error code's short name.
        code: String,
        /// The server's retryable flag.
        retryable: bool,
    },
    /// The server closed the connection.
    #[error("closed with code {0:?}")]
    Closed(Option<u16>),
    /// The server sent bytes that are not a `ServerEnvelope`.
    #[error("bad server envelope: {0}")]
    Decode(String),
}

impl ConnectError {
    /// Short label for the report's `connect_errors` map.
    fn label(&self) -> String {
        match self {
            // rustls reports a refused certificate or handshake as an I/O error around it.
            Self::Ws(tungstenite::Error::Io(e))
                if e.get_ref()
                    .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()) =>
            {
                "tls".into()
            }
            Self::Ws(tungstenite::Error::Io(e)) => format!("io_{:?}", e.kind()).to_lowercase(),
            Self::Ws(tungstenite::Error::Tls(_)) => "tls".into(),
            Self::Ws(_) => "websocket".into(),
            Self::Timeout => "timeout".into(),
            Self::Refused { code, .. } => code.clone(),
            Self::Closed(c) => format!("closed_{}", c.map_or("none".into(), |c| c.to_string())),
            Self::Decode(_) => "decode".into(),
        }
    }

    /// Whether trying again may succeed (a close as [`CloseKind`] takes it: 4005 room full is
    /// "retry later").
    fn retryable(&self) -> bool {
        match self {
            Self::Ws(_) | Self::Timeout => true,
            Self::Refused { retryable, .. } => *retryable,
            Self::Closed(c) => CloseKind::of(*c).retryable(),
            Self::Decode(_) => false,
        }
    }
}

/// How a connected session ended.
#[derive(Debug)]
enum SessionEnd {
    /// The run's deadline: the bot closed normally.
    Deadline,
    /// The server closed the connection with this code (None: no close frame).
    Closed(Option<u16>),
    /// The connection failed without a close frame.
    Abrupt,
}

/// Where a joined bot is in its room life.
#[derive(Clone, Copy, Debug)]
enum Phase {
    Joined,
    Leaving { since: Instant },
    Away { until: Instant },
    Joining { since: Instant },
}

/// Interactor bookkeeping.
#[derive(Debug, Default)]
struct Interact {
    next_action: Option<Instant>,
    held_prop: Option<u32>,
    emoting: bool,
    /// Consent ids this bot requested and that became active (to release later).
    active: Vec<u64>,
    /// Whether the bot joined the room's lockstep scene.
    in_scene: bool,
}

/// The lockstep scene interactors share (seed 001).
const SCENE_ID: &str = "bots";

/// One bot's state.
pub(crate) struct Bot {
    shared: Arc<Shared>,
    spec: BotSpec,
    rng: SmallRng,
    /// The clock the connection is fed (seconds since this instant).
    epoch: Instant,
    /// The session: it outlives transports (its resume token brings the session back).
    conn: Connection,
    walker: Walker,
    last_sent: Pose,
    first_move: bool,
    rate: SendRate,
    own_entity: Option<u32>,
    room_moves: Arc<RoomMoves>,
    own_moves: Option<OwnMoves>,
    seen_last: IdMap<u64>,
    last_frame_at: Option<Instant>,
    /// A `Resync` went and its keyframe has not come yet.
    resync_pending: bool,
    /// The next frame is the join's keyframe (not a server-initiated one).
    expect_keyframe: bool,
    /// The connection's `resyncs` and `dropped_awaiting_keyframe` already counted.
    counted_resyncs: u64,
    counted_dropped: u64,
    samples: LocalSamples,
    phase: Phase,
    leave_at: Option<Instant>,
    frame_no: u32,
    /// Expression accumulator (`expression_hz` per client frame; one sent per 10).
    expression_acc: u32,
    /// Expressions sent so far (varies the next one).
    expression_no: u32,
    interact: Interact,
    /// Flips to true when the run is stopped early (Ctrl-C).
    stop: watch::Receiver<bool>,
    /// The gateway going away asked for a reconnect after this delay (a roll's spread).
    reconnect_after: Option<Duration>,
    /// Which of the run's gateway URLs the next connect uses (see `LoadConfig::gateway_url`).
    gateway_idx: usize,
}
impl Bot {
    pub(crate) fn new(shared: Arc<Shared>, spec: BotSpec) -> Self {
        let mut rng = SmallRng::seed_from_u64(spec.seed);
        let now = Instant::now();
        let walker = Walker::new(
            &spec.mix,
            shared.cfg.scenario.room.half_extent_m,
            now,
            &mut rng,
        );
        let room_moves = shared.board.room(&spec.room);
        let room_stats = shared.stats.room(&spec.room);
        let frame_no = rng.random_range(0..1000);
        let stop = shared.stop.clone();
        let gateway_idx = spec.index;
        let conn = Connection::new(ConnectionConfig {
            auth_token: shared.cfg.auth_token.clone(),
            client_name: format!("plaza-load-{}", spec.index),
            room: Some(spec.room.clone()),
            resync_retry_s: RESYNC_RETRY_S,
            // The bot pings on its own cadence (spread over client frames, see below).
            ping_interval_s: 0.0,
            // Bots count roster events; who each avatar is would cost every bot memory.
            keep_roster: false,
            // The bot reads each frame's changed ids itself (`on_frame`): no event per entity.
            entity_events: false,
            ..ConnectionConfig::default()
        });
        Self {
            rate: SendRate::new(shared.cfg.send_rate),
            last_sent: walker.pose(),
            walker,
            shared,
            spec,
            rng,
            epoch: now,
            conn,
            first_move: true,
            own_entity: None,
            room_moves,
            own_moves: None,
            seen_last: IdMap::default(),
            last_frame_at: None,
            resync_pending: false,
            expect_keyframe: true,
            counted_resyncs: 0,
            counted_dropped: 0,
            samples: LocalSamples {
                room: Some(room_stats),
                ..LocalSamples::default()
            },
            phase: Phase::Joined,
            leave_at: None,
            frame_no,
            // Bots start at different phases, so 10 Hz of them do not all send at once.
            expression_acc: frame_no % 10,
            expression_no: frame_no,
            interact: Interact::default(),
            stop,
            reconnect_after: None,
            gateway_idx,
        }
    }

    /// Runs the bot until `deadline`: the connect / session / resume loop.
    pub(crate) async fn run(mut self, deadline: Instant) {
        let shared = self.shared.clone();
        tokio::select! {
            _ = tokio::time::sleep_until(self.spec.start_at.into()) => {}
            _ = stopped(&mut self.stop) => {
                Counters::add(&shared.stats.counters.not_started, 1);
                return;
            }
        }
        let stats = &shared.stats;
        let cfg = &shared.cfg;
        let room = stats.room(&self.spec.room);
        Counters::add(&room.bots, 1);
        let mut ever_joined = false;
        let mut attempts = 0u32;
        let mut down_since: Option<Instant> = None;
        let mut lost = false;
        let mut backoff = Duration::from_millis(100);
        while Instant::now() < deadline && !*self.stop.borrow() {
            let started = Instant::now();
            let resuming = down_since.is_some() && !self.conn.resume_token().is_empty();
            match self.connect_and_join(resuming, deadline).await {
                Ok(mut ws) => {
                    let now = Instant::now();
                    if ever_joined {
                        if let Some(t) = down_since.take() {
                            Counters::add(&stats.counters.resumes, 1);
                            stats.record(Metric::Resume, micros(now - t));
                            stats.keyed.lock().reconnect_times_unix_ms.push(unix_ms());
                        }
                    } else {
                        ever_joined = true;
                        Counters::add(&stats.counters.ever_joined, 1);
                        Counters::add(&room.joined, 1);
                        stats.record(Metric::Connect, micros(now - started));
                    }
                    backoff = Duration::from_millis(100);
                    Counters::add(&stats.counters.connected, 1);
                    let end = self.session(&mut ws, deadline).await;
                    stats
                        .counters
                        .connected
                        .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                    Counters::add(&stats.counters.joined_micros, micros(now.elapsed()));
                    Counters::add(&room.joined_micros, micros(now.elapsed()));
                    self.leave_room_state();
                    stats.flush(&mut self.samples);
                    match end {
                        SessionEnd::Deadline => break,
                        SessionEnd::Closed(code) if !CloseKind::of(code).retryable() => {
                            lost = true;
                            break;
                        }
                        SessionEnd::Closed(_) | SessionEnd::Abrupt => {
                            down_since.get_or_insert_with(Instant::now);
                            // Its gateway went away: come back through the next one.
                            self.gateway_idx += 1;
                        }
                    }
                }
                Err(e) => {
                    Counters::add(&stats.counters.connect_failures, 1);
                    stats.keyed.lock().connect_errors.bump(e.label());
                    tracing::debug!(bot = self.spec.index, error = %e, "connect failed");
                    if resuming
                        && matches!(&e, ConnectError::Refused { code, .. } if code == "auth")
                    {
                        // The token is gone (e.g. expired): come back as a new session.
                        self.conn.forget_session();
                    }
                    attempts += 1;
                    self.gateway_idx += 1;
                    let give_up = if ever_joined {
                        !e.retryable() && !resuming
                    } else {
                        !e.retryable() || attempts >= cfg.connect_attempts
                    };
                    if give_up {
                        lost = ever_joined;
                        break;
                    }
                }
            }
            let jitter = self.rng.random_range(0..=backoff.as_millis() as u64 / 2);
            // A gateway that went away said when to come back (spread over its roll window).
            let hint = self.reconnect_after.take().unwrap_or_default();
            let wake = Instant::now() + hint.max(backoff) + Duration::from_millis(jitter);
            if wake >= deadline {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(wake.into()) => {}
                _ = stopped(&mut self.stop) => break,
            }
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
        if ever_joined && (lost || down_since.is_some()) {
            Counters::add(&stats.counters.bots_lost, 1);
            Counters::add(&room.lost, 1);
        }
        self.shared.stats.flush(&mut self.samples);
    }

    // === Handshake ===

    async fn connect_and_join(
        &mut self,
        resuming: bool,
        deadline: Instant,
    ) -> Result<Ws, ConnectError> {
        let cfg = &self.shared.cfg;
        let hs_deadline =
            (Instant::now() + cfg.connect_timeout).min(deadline + Duration::from_secs(1));
        // Small buffers: thousands of bots share one process (the default read buffer alone is
        // 128 KiB per connection); every send is written out at once (no Nagle, no batching).
        // Tungstenite zero-fills the free part of the read buffer before every read: at 8 KiB
        // that fill was the largest single cost of a received frame (docs/BENCHMARKS.md,
        // "plaza-load CPU per bot-frame"); frames are a few hundred bytes, and a larger message
        // is still read whole (the buffer grows to its length).
        let ws_cfg = WebSocketConfig::default()
            .read_buffer_size(READ_BUFFER)
            .write_buffer_size(0)
            .max_write_buffer_size(1 << 20);
        let connector = self
            .shared
            .tls
            .clone()
            .map(tokio_tungstenite::Connector::Rustls);
        let connect = tokio_tungstenite::connect_async_tls_with_config(
            cfg.gateway_url(self.gateway_idx),
            Some(ws_cfg),
            true,
            connector,
        );
        let (mut ws, _resp) = tokio::time::timeout_at(hs_deadline.into(), connect)
            .await
            .map_err(|_| ConnectError::Timeout)??;
        if !resuming {
            self.conn.forget_session();
        }
        let now = Instant::now();
        self.conn.set_wall_clock_ms(unix_ms());
        self.conn.connected(self.secs(now));
        match self.handshake(&mut ws, hs_deadline).await {
            Ok(()) => Ok(ws),
            Err(e) => {
                if !matches!(e, ConnectError::Closed(_)) {
                    // The bot drops this transport; the connection keeps its resume token.
                    self.transport_closed(None);
                }
                Err(e)
            }
        }
    }

    /// Reads until the connection reports `Joined` (negotiated, and joined or resumed into the
    /// room), before `until`.
    async fn handshake(&mut self, ws: &mut Ws, until: Instant) -> Result<(), ConnectError> {
        self.flush(ws).await?;
        loop {
            let msg = tokio::time::timeout_at(until.into(), ws.next())
                .await
                .map_err(|_| ConnectError::Timeout)?;
            let b = match msg {
                None => {
                    self.transport_closed(None);
                    return Err(ConnectError::Closed(None));
                }
                Some(Err(e)) => return Err(e.into()),
                Some(Ok(Message::Binary(b))) => b,
                Some(Ok(Message::Close(frame))) => {
                    let code = frame.map(|f| u16::from(f.code));
                    self.count_close(code);
                    self.transport_closed(code);
                    return Err(ConnectError::Closed(code));
                }
                Some(Ok(Message::Text(_))) => {
                    self.count_decode_error("text_message");
                    continue;
                }
                Some(Ok(_)) => continue,
            };
            let now = Instant::now();
            let len = b.len();
            if let Err(e) = self.input(b, now) {
                return Err(ConnectError::Decode(e.to_string()));
            }
            let mut joined = false;
            while let Some(ev) = self.conn.poll_event() {
                match ev {
                    Event::Joined(info) => {
                        self.on_joined(&info, now);
                        joined = true;
                    }
                    // A resumed session that the gateway already put back in its room.
                    Event::Error(e) if e.code == ErrorCode::AlreadyJoined => {
                        self.phase = Phase::Joined;
                        joined = true;
                    }
                    Event::Error(e) => return Err(refused(&e)),
                    Event::Negotiated { .. } => {
                        // A resumed session out of any room (it had left): join again.
                        if self.conn.state() == plaza_client::State::Ready {
                            self.conn.join(&self.spec.room);
                        }
                    }
                    other => self.on_event(other, now, len),
                }
            }
            self.flush(ws).await?;
            if joined {
                return Ok(());
            }
        }
    }

    // === Session ===

    async fn session(&mut self, ws: &mut Ws, deadline: Instant) -> SessionEnd {
        let mut tick = tokio::time::interval(self.client_frame());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let stop = tokio::time::sleep_until(deadline.into());
        tokio::pin!(stop);
        // One wait on the run's stop flag for the whole session: a fresh `wait_for` per loop
        // turn registered and removed a waiter in the watch channel that every bot shares (a
        // contended lock per received frame).
        let mut stop_rx = self.stop.clone();
        let stopped_early = async move { stopped(&mut stop_rx).await };
        tokio::pin!(stopped_early);
        loop {
            let step = tokio::select! {
                msg = ws.next() => self.on_ws(msg),
                _ = tick.tick() => {
                    self.on_client_frame();
                    Ok(())
                }
                _ = &mut stop => Err(SessionEnd::Deadline),
                _ = &mut stopped_early => Err(SessionEnd::Deadline),
            };
            let step = match step {
                Ok(()) => self.flush(ws).await.map_err(|_| SessionEnd::Abrupt),
                Err(e) => Err(e),
            };
            match step {
                Ok(()) => {}
                Err(SessionEnd::Deadline) => {
                    self.close_normally(ws).await;
                    return SessionEnd::Deadline;
                }
                Err(SessionEnd::Abrupt) => {
                    self.transport_closed(None);
                    return SessionEnd::Abrupt;
                }
                Err(end) => return end,
            }
        }
    }

    async fn close_normally(&mut self, ws: &mut Ws) {
        self.transport_closed(Some(1000));
        let frame = CloseFrame {
            code: CloseCode::Normal,
            reason: "run over".into(),
        };
        if ws.send(Message::Close(Some(frame))).await.is_err() {
            return;
        }
        // Drain until the server's close answer (frames still in flight are not counted).
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            while let Some(Ok(_)) = ws.next().await {}
        })
        .await;
    }

    fn on_ws(
        &mut self,
        msg: Option<Result<Message, tungstenite::Error>>,
    ) -> Result<(), SessionEnd> {
        match msg {
            None => {
                self.count_close(None);
                Err(SessionEnd::Abrupt)
            }
            Some(Err(e)) => {
                tracing::debug!(bot = self.spec.index, error = %e, "connection failed");
                self.count_close(None);
                Err(SessionEnd::Abrupt)
            }
            Some(Ok(Message::Binary(b))) => {
                let now = Instant::now();
                let len = b.len();
                // A message that is not an envelope is counted (and skipped) by `input`.
                let _ = self.input(b, now);
                while let Some(ev) = self.conn.poll_event() {
                    self.on_session_event(ev, now, len);
                }
                Ok(())
            }
            Some(Ok(Message::Close(frame))) => {
                let code = frame.map(|f| u16::from(f.code));
                self.count_close(code);
                self.transport_closed(code);
                Err(SessionEnd::Closed(code))
            }
            Some(Ok(Message::Text(_))) => {
                // The protocol is binary only.
                self.count_decode_error("text_message");
                Ok(())
            }
            Some(Ok(_)) => Ok(()),
        }
    }

    /// Hands one binary message to the connection and counts what it did (bytes, frames and
    /// their intervals, resyncs, frames dropped while a keyframe was awaited).
    fn input(&mut self, b: Bytes, now: Instant) -> Result<(), plaza_client::InputError> {
        self.samples.down_bytes += b.len() as u64;
        let frames_before = self.conn.stats().frames_received;
        let r = self.conn.handle_input_bytes(b, self.secs(now));
        if let Err(plaza_client::InputError::Decode(_)) = &r {
            self.count_decode_error("envelope");
        }
        if self.conn.stats().frames_received != frames_before {
            self.samples.frames += 1;
            if let Some(prev) = self.last_frame_at {
                self.samples.snapshot_interval.push(micros(now - prev));
            }
            self.last_frame_at = Some(now);
        }
        self.count_connection_stats();
        r
    }

    /// Folds the connection's resync and awaiting-keyframe counters into the run's.
    fn count_connection_stats(&mut self) {
        let s = self.conn.stats();
        let (resyncs, dropped) = (s.resyncs, s.dropped_awaiting_keyframe);
        let counters = &self.shared.stats.counters;
        if resyncs != self.counted_resyncs {
            Counters::add(
                &counters.keyframes_requested,
                resyncs.saturating_sub(self.counted_resyncs),
            );
            self.counted_resyncs = resyncs;
            self.resync_pending = true;
        }
        if dropped != self.counted_dropped {
            // Deltas that were in flight behind the broken one: expected until the keyframe.
            Counters::add(
                &counters.frames_awaiting_keyframe,
                dropped.saturating_sub(self.counted_dropped),
            );
            self.counted_dropped = dropped;
        }
    }

    /// Tells the connection its transport is gone (it keeps or forgets its resume token by the
    /// close code) and drops what that reports.
    fn transport_closed(&mut self, code: Option<u16>) {
        self.conn.handle_close(code);
        while self.conn.poll_event().is_some() {}
    }

    /// Writes what the connection queued, one WebSocket message per envelope.
    async fn flush(&mut self, ws: &mut Ws) -> Result<(), tungstenite::Error> {
        while let Some(bytes) = self.conn.poll_transmit() {
            self.samples.up_bytes += bytes.len() as u64;
            ws.send(Message::Binary(bytes.into())).await?;
        }
        Ok(())
    }

    /// Events in a joined session (a `Joined` here is a rejoin or an in-session resume).
    fn on_session_event(&mut self, ev: Event, now: Instant, len: usize) {
        match ev {
            Event::Joined(info) => {
                let stats = &self.shared.stats;
                match self.phase {
                    Phase::Joining { .. } => Counters::add(&stats.counters.rejoins, 1),
                    Phase::Joined if self.own_entity.is_some() => {
                        // The gateway moved us to another room activation (node loss) without
                        // a reconnect: an in-session resume, measured from the last frame.
                        Counters::add(&stats.counters.resumes, 1);
                        Counters::add(&stats.counters.resumes_in_session, 1);
                        let since = self.last_frame_at.unwrap_or(now);
                        stats.record(Metric::Resume, micros(now - since));
                    }
                    _ => {}
                }
                self.on_joined(&info, now);
            }
            Event::Error(e) => {
                let code = error_name(e.code as i32);
                self.shared.stats.keyed.lock().error_codes.bump(code);
            }
            other => self.on_event(other, now, len),
        }
    }

    /// Events that mean the same in the handshake and in the session. `len`: bytes of the
    /// message that carried them.
    fn on_event(&mut self, ev: Event, now: Instant, len: usize) {
        match ev {
            Event::Frame { keyframe, .. } => self.on_frame(keyframe, now),
            Event::FrameFailed(f) => self.on_frame_failed(&f),
            Event::Pong { rtt_s } => self.samples.rtt.push((rtt_s.max(0.0) * 1e6) as u64),
            Event::Correction(c) => {
                let reason = RejectReason::try_from(c.reason).map_or_else(
                    |_| format!("unknown_{}", c.reason),
                    |r| short(r.as_str_name(), "REJECT_REASON_"),
                );
                self.shared
                    .stats
                    .keyed
                    .lock()
                    .corrections_by_reason
                    .bump(reason);
                if let Some(p) = c.position {
                    self.walker.teleport([p.x, p.y, p.z]);
                }
            }
            Event::Error(e) => {
                let code = error_name(e.code as i32);
                self.shared.stats.keyed.lock().error_codes.bump(code);
            }
            Event::Joined(info) => self.on_joined(&info, now),
            Event::Left { .. } => self.enter_away(now),
            // Moving / back need nothing while the session stays open; a gateway going away
            // says when to reconnect.
            Event::ReconnectAdvised { after_s } => {
                self.reconnect_after = Some(secs(after_s));
            }
            Event::Expressions(x) => {
                let c = &self.shared.stats.counters;
                Counters::add(&c.expression_frames, 1);
                Counters::add(&c.expression_states, x.states.len() as u64);
                Counters::add(&c.expression_down_bytes, len as u64);
            }
            Event::Prop(p) => {
                self.count_event("prop");
                self.shared
                    .props
                    .observe(&self.spec.room, &p, &self.shared.stats);
                if self.own_entity.is_some_and(|o| o == p.holder_entity) {
                    self.interact.held_prop = Some(p.prop_id);
                } else if self.interact.held_prop == Some(p.prop_id) {
                    self.interact.held_prop = None;
                }
            }
            Event::Rejected(r) => {
                self.count_event("rejected");
                let reason = if r.reason.is_empty() {
                    "unspecified".into()
                } else {
                    r.reason
                };
                self.shared
                    .stats
                    .keyed
                    .lock()
                    .rejections_by_reason
                    .bump(reason);
            }
            Event::Consent(c) => {
                self.count_event("consent");
                if self.spec.mix.kind == BotKind::Interactor {
                    self.on_consent(&c);
                }
            }
            Event::SceneSync(s) => {
                self.count_event("scene_sync");
                // A late joiner got the scene's state and the ticks since: it has run them.
                if self.spec.mix.kind == BotKind::Interactor {
                    self.send(CBody::SceneControl(pb::SceneControl {
                        scene_id: s.scene_id,
                        op: pb::SceneControlOp::CaughtUp as i32,
                        ..Default::default()
                    }));
                }
            }
            Event::SceneClient(e) => {
                self.count_event("scene_client");
                // The room asks the scene's master for its game state (bots keep none: an
                // empty state at the asked tick).
                if self.spec.mix.kind == BotKind::Interactor
                    && e.kind == pb::SceneClientEventKind::StateRequested as i32
                {
                    self.send(CBody::SceneControl(pb::SceneControl {
                        scene_id: e.scene_id,
                        op: pb::SceneControlOp::State as i32,
                        tick: e.tick,
                        game_state: Default::default(),
                    }));
                }
            }
            Event::Emote(_) => self.count_event("emote"),
            Event::SceneTick(_) => self.count_event("scene_tick"),
            Event::Roster(_) => self.count_event("roster"),
            Event::Teleported(_) => self.count_event("teleported"),
            Event::Block(_) => self.count_event("block"),
            // Entity events are off (`entity_events: false`): `on_frame` reads the frame.
            Event::EntityEntered(_)
            | Event::EntityUpdated(_)
            | Event::EntityLeft { .. }
            | Event::Negotiated { .. }
            | Event::Own(_)
            | Event::RoomMoving { .. }
            | Event::RoomBack { .. }
            | Event::Closed { .. }
            // Bots send no operator actions.
            | Event::OperatorResult(_) => {}
        }
    }

    fn count_event(&self, name: &'static str) {
        self.shared.stats.keyed.lock().events_by_kind.bump(name);
    }

    fn on_consent(&mut self, c: &pb::ConsentEvent) {
        let accept = self.rng.random_bool(0.8);
        match consent_reaction(c, self.own_entity, accept) {
            Some(ConsentReaction::Answer(op)) => {
                Counters::add(&self.shared.stats.counters.consent_sent, 1);
                self.send(CBody::Consent(ConsentAction {
                    op: op as i32,
                    consent_id: c.consent_id,
                    ..ConsentAction::default()
                }));
            }
            Some(ConsentReaction::ReleaseLater) => self.interact.active.push(c.consent_id),
            None => {}
        }
    }

    fn on_joined(&mut self, info: &RoomInfo, now: Instant) {
        self.own_entity = Some(info.entity);
        self.own_moves = Some(self.room_moves.register(info.entity));
        self.walker.teleport(info.spawn);
        self.resync_pending = false;
        self.expect_keyframe = true;
        self.last_frame_at = None;
        self.seen_last.clear();
        self.first_move = true;
        self.rate = SendRate::new(self.shared.cfg.send_rate);
        self.phase = Phase::Joined;
        self.leave_at = (self.spec.mix.kind == BotKind::Churner)
            .then(|| now + secs(self.spec.mix.stay_s.sample(&mut self.rng)));
        if self.spec.mix.kind == BotKind::Interactor {
            self.interact = Interact {
                next_action: Some(now + secs(self.spec.mix.action_every_s.sample(&mut self.rng))),
                ..Interact::default()
            };
        }
    }

    fn enter_away(&mut self, now: Instant) {
        self.leave_room_state();
        self.phase = Phase::Away {
            until: now + secs(self.spec.mix.away_s.sample(&mut self.rng)),
        };
    }

    /// Forgets the room (own entity registration, frame timing); the connection forgets its
    /// held frames itself.
    fn leave_room_state(&mut self) {
        self.own_moves = None;
        self.own_entity = None;
        self.last_frame_at = None;
    }

    // === Frames ===

    /// A frame was applied: what it removed is forgotten, and the positions of the other
    /// avatars it changed are matched against the room's moves (move-to-seen).
    fn on_frame(&mut self, keyframe: bool, now: Instant) {
        let counters = &self.shared.stats.counters;
        if keyframe {
            if !self.resync_pending && !self.expect_keyframe {
                Counters::add(&counters.keyframes_unrequested, 1);
            }
            self.resync_pending = false;
            // Everything arrives anew: first sightings, not moves.
            self.seen_last.clear();
            Counters::add(&counters.keyframes, 1);
        }
        self.expect_keyframe = false;
        let Some(frame) = self.conn.last_frame() else {
            return;
        };
        for id in &frame.removed {
            self.seen_last.remove(id);
        }
        if frame.changed.is_empty() {
            return;
        }
        let own = self.own_entity;
        let decoder = self.conn.decoder();
        let samples = &mut self.samples.move_to_seen;
        let moves = frame
            .changed
            .iter()
            .filter(|&&id| Some(id) != own)
            .filter_map(|&id| decoder.get(id))
            .filter(|r| r.kind == 0)
            .map(|r| (r.id, r.pose.position_m()));
        self.room_moves.observe(
            now,
            moves,
            self.shared.cfg.seen_tolerance_m,
            &mut self.seen_last,
            |us| samples.push(us),
        );
    }

    /// A frame did not apply: counted by kind (the connection sent the `Resync`).
    fn on_frame_failed(&mut self, f: &FrameFailure) {
        let counters = &self.shared.stats.counters;
        if f.kind.is_check_failure() {
            Counters::add(&counters.check_failures, 1);
        } else {
            Counters::add(&counters.decode_errors, 1);
        }
        let kind = match f.kind {
            FrameErrorKind::ChainBreak => "chain_break".to_owned(),
            FrameErrorKind::CheckMismatch => "check_mismatch".to_owned(),
            FrameErrorKind::Truncated => "truncated".to_owned(),
            FrameErrorKind::TooLarge => "too_large".to_owned(),
            FrameErrorKind::Malformed(what) => format!("malformed_{}", what.replace(' ', "_")),
        };
        self.shared.stats.keyed.lock().frame_errors.bump(kind);
        tracing::debug!(bot = self.spec.index, error = %f.error, "frame not applied");
    }

    // === Client frame: movement, churn, interactions, pings ===

    fn on_client_frame(&mut self) {
        let now = Instant::now();
        self.frame_no = self.frame_no.wrapping_add(1);
        self.conn.set_wall_clock_ms(unix_ms());
        // A resync whose keyframe did not come goes again.
        self.conn.handle_timeout(self.secs(now));
        match self.phase {
            Phase::Joined => {
                self.walker.step(&self.spec.mix, now, &mut self.rng);
                let changed = self.walker.changed_since(&self.last_sent);
                if self.rate.poll(now, changed, self.first_move).should_send() {
                    self.send_movement(now);
                }
                self.send_expressions();
                if self.leave_at.is_some_and(|t| now >= t) {
                    self.leave_at = None;
                    if self.conn.leave().is_none() {
                        self.send(CBody::Leave(pb::Leave {}));
                    }
                    self.phase = Phase::Leaving { since: now };
                } else if self.interact.next_action.is_some_and(|t| now >= t) {
                    self.interact_once(now);
                }
            }
            Phase::Leaving { since } => {
                if now - since > Duration::from_secs(5) {
                    // No Left came: assume we are out.
                    self.enter_away(now);
                }
            }
            Phase::Away { until } => {
                if now >= until {
                    if self.conn.join(&self.spec.room).is_none() {
                        let room_id = self.spec.room.clone();
                        self.send(CBody::Join(Join { room_id }));
                    }
                    self.phase = Phase::Joining { since: now };
                }
            }
            Phase::Joining { since } => {
                if now - since > self.shared.cfg.connect_timeout {
                    // Rejoin unanswered: try again.
                    self.phase = Phase::Away { until: now };
                }
            }
        }
        let ping_frames =
            (self.shared.cfg.ping_interval.as_millis() / self.client_frame().as_millis()).max(1);
        if u128::from(self.frame_no) % ping_frames == 0 && self.conn.ping(self.secs(now)).is_some()
        {
            self.samples.pings += 1;
        }
        self.count_connection_stats();
        if self.frame_no.is_multiple_of(FLUSH_EVERY) {
            self.shared.stats.flush(&mut self.samples);
        }
    }

    /// The client frame period in effect ([`CLIENT_FRAME`], shortened to the send rate's
    /// `move_interval`).
    fn client_frame(&self) -> Duration {
        CLIENT_FRAME
            .min(self.shared.cfg.send_rate.move_interval)
            .max(Duration::from_millis(10))
    }

    /// `expression_hz` expressions per second, spread over the client frames (an accumulator:
    /// 10 Hz is one per 100 ms frame); each a new id and intensity.
    fn send_expressions(&mut self) {
        let hz = self.shared.cfg.expression_hz;
        if hz == 0 {
            return;
        }
        let per_s = (1000 / self.client_frame().as_millis()) as u32;
        self.expression_acc += hz;
        while self.expression_acc >= per_s {
            self.expression_acc -= per_s;
            self.expression_no = self.expression_no.wrapping_add(1);
            let n = self.expression_no;
            let e = pb::Expression {
                expression_id: 1 + n % 7,
                intensity_bp: (n * 1_300) % 10_001,
            };
            self.send(CBody::Expression(e));
            Counters::add(&self.shared.stats.counters.expressions_sent, 1);
        }
    }

    fn send_movement(&mut self, now: Instant) {
        let pose = self.walker.pose();
        let speed = (pose.velocity[0].powi(2) + pose.velocity[2].powi(2)).sqrt();
        let kind = if !self.walker.is_walking() || speed < 0.01 {
            MovementKind::Idle
        } else if speed < 2.0 {
            MovementKind::Walk
        } else {
            MovementKind::Jog
        };
        let m = Movement {
            position: Some(vec3(pose.position)),
            velocity: Some(vec3(pose.velocity)),
            rotation_y: pose.yaw_deg,
            movement_kind: kind as i32,
            anim_flags: pb::AnimFlag::Grounded as u32,
            is_instant: self.first_move,
            timestamp: now.duration_since(self.epoch).as_secs_f64(),
            ..Movement::default()
        };
        // What the room will hold: the float pose, or the compressed message's quantized one.
        let sent_at = if self.shared.cfg.movement.compressed(self.spec.index) {
            match self.conn.send_movement_compressed(&m) {
                Some((_, d)) => d.pose.position,
                None => return,
            }
        } else if self.conn.send_movement(m).is_some() {
            pose.position
        } else {
            // Not in a room at the connection's word (a join or resume is under way).
            return;
        };
        if let Some(own) = &mut self.own_moves {
            own.sent(now, sent_at);
        }
        self.samples.movements += 1;
        self.last_sent = pose;
        self.first_move = false;
    }

    /// One interactor action: place a held prop, pick one up, request consent, or emote.
    fn interact_once(&mut self, now: Instant) {
        let mix = &self.spec.mix;
        self.interact.next_action = Some(now + secs(mix.action_every_s.sample(&mut self.rng)));
        let pos = self.walker.pose().position;
        let counters = &self.shared.stats.counters;
        if let Some(consent_id) = self.interact.active.pop() {
            Counters::add(&counters.consent_sent, 1);
            let c = ConsentAction {
                op: ConsentOp::Release as i32,
                consent_id,
                ..ConsentAction::default()
            };
            self.send(CBody::Consent(c));
            return;
        }
        let roll: f64 = self.rng.random();
        if let Some(prop) = self.interact.held_prop.filter(|_| roll < 0.5) {
            Counters::add(&counters.interactions_sent, 1);
            let i = Interaction {
                kind: InteractionKind::Place as i32,
                prop_id: prop,
                position: Some(vec3([pos[0] + 0.5, pos[1] + 0.5, pos[2]])),
                velocity: Some(vec3([0.0; 3])),
                room_id: String::new(),
            };
            self.send(CBody::Interaction(i));
            return;
        }
        if roll < 0.6 && self.interact.held_prop.is_none() {
            // Go for the nearest prop the bot sees (props are snapshot entities of kind 1,
            // entity id = PROP_ENTITY_BASE + prop id); pick it up once within reach.
            let nearest = self
                .conn
                .decoder()
                .entities()
                .filter(|r| r.kind == PROP_KIND && r.id > PROP_ENTITY_BASE)
                .map(|r| {
                    let p = r.pose.position_m();
                    let d2 = (p[0] - pos[0]).powi(2) + (p[2] - pos[2]).powi(2);
                    (d2, r.id - PROP_ENTITY_BASE, p)
                })
                .min_by(|a, b| a.0.total_cmp(&b.0));
            let prop_id = match nearest {
                Some((d2, id, _)) if d2 <= PICKUP_RANGE_M * PICKUP_RANGE_M => id,
                Some((_, _, p)) => {
                    self.walker.head_to([p[0], p[2]]);
                    // Try anyway now and then: the room's refusal (out of reach) is counted.
                    if self.rng.random::<f64>() >= 0.2 {
                        return;
                    }
                    self.rng.random_range(1..=mix.props)
                }
                None => self.rng.random_range(1..=mix.props),
            };
            Counters::add(&counters.interactions_sent, 1);
            let i = Interaction {
                kind: InteractionKind::Pickup as i32,
                prop_id,
                position: Some(vec3(pos)),
                velocity: None,
                room_id: String::new(),
            };
            self.send(CBody::Interaction(i));
            return;
        }
        if roll < 0.85 {
            let own = self.own_entity;
            let others: Vec<u32> = self
                .conn
                .decoder()
                .entities()
                .filter(|r| r.kind == 0 && Some(r.id) != own)
                .map(|r| r.id)
                .collect();
            if !others.is_empty() {
                let target = others[self.rng.random_range(0..others.len())];
                let kind = ["hand_hold", "follow", "adjust"][self.rng.random_range(0..3)];
                Counters::add(&counters.consent_sent, 1);
                let c = ConsentAction {
                    op: ConsentOp::Request as i32,
                    kind: kind.into(),
                    target_entity: target,
                    consent_id: 0,
                };
                self.send(CBody::Consent(c));
                return;
            }
        }
        if roll < 0.92 {
            // Lockstep scene actions: join the scene once, then submit small input actions.
            let body = if self.interact.in_scene {
                let payload: [u8; 8] = self.rng.random();
                CBody::SceneAction(pb::SceneAction {
                    scene_id: SCENE_ID.into(),
                    payload: payload.to_vec().into(),
                })
            } else {
                self.interact.in_scene = true;
                CBody::SceneControl(pb::SceneControl {
                    scene_id: SCENE_ID.into(),
                    op: pb::SceneControlOp::Join as i32,
                    ..Default::default()
                })
            };
            Counters::add(&counters.interactions_sent, 1);
            self.send(body);
            return;
        }
        Counters::add(&counters.emotes_sent, 1);
        self.interact.emoting = !self.interact.emoting;
        let e = Emote {
            emote_id: if self.interact.emoting {
                "wave".into()
            } else {
                String::new()
            },
            timestamp_ms: unix_ms(),
            stop: !self.interact.emoting,
        };
        self.send(CBody::Emote(e));
    }

    // === Helpers ===

    /// Queues a request (written out by the next flush).
    fn send(&mut self, body: CBody) {
        // Not negotiated: nothing to send it on (the session is being re-established).
        let _ = self.conn.send(body);
    }

    /// Seconds on the connection's clock.
    fn secs(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.epoch).as_secs_f64()
    }

    /// Counts an envelope-level decode error (`kind` goes to `frame_errors`).
    fn count_decode_error(&self, kind: &str) {
        Counters::add(&self.shared.stats.counters.decode_errors, 1);
        self.shared.stats.keyed.lock().frame_errors.bump(kind);
    }

    fn count_close(&self, code: Option<u16>) {
        // 1006: closed without a close frame (RFC 6455's "abnormal closure").
        let key = code.unwrap_or(1006).to_string();
        self.shared.stats.keyed.lock().close_codes.bump(key);
    }
}

/// What an interactor does about a consent event.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
enum ConsentReaction {
    /// Send this op for the event's consent id.
    Answer(ConsentOp),
    /// Our request is active: release it at the next action.
    ReleaseLater,
}

/// The interactor's consent policy. The target answers a request (consent when `accept`, else
/// decline); the requester activates a granted request and releases an active one later.
/// State names are matched loosely (`request`/`pending`, `consent`/`accept`/`grant`, `activ`)
/// because the room's names are not fixed yet.
fn consent_reaction(
    c: &pb::ConsentEvent,
    own: Option<u32>,
    accept: bool,
) -> Option<ConsentReaction> {
    let own = own?;
    let state = c.state.to_ascii_lowercase();
    if own == c.target_entity && (state.contains("request") || state.contains("pending")) {
        let op = if accept {
            ConsentOp::Consent
        } else {
            ConsentOp::Decline
        };
        return Some(ConsentReaction::Answer(op));
    }
    if own != c.requester_entity {
        return None;
    }
    if state.contains("activ") {
        Some(ConsentReaction::ReleaseLater)
    } else if state.contains("consent") || state.contains("accept") || state.contains("grant") {
        Some(ConsentReaction::Answer(ConsentOp::Activate))
    } else {
        None
    }
}

/// Resolves once the run is stopped early (or the run is over and the sender is gone).
async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

fn refused(e: &ServerError) -> ConnectError {
    ConnectError::Refused {
        code: error_name(e.code as i32),
        retryable: e.retryable,
    }
}

/// `ERROR_CODE_ROOM_FULL` → `room_full`.
fn error_name(code: i32) -> String {
    ErrorCode::try_from(code).map_or_else(
        |_| format!("unknown_{code}"),
        |c| short(c.as_str_name(), "ERROR_CODE_"),
    )
}

fn short(name: &str, prefix: &str) -> String {
    name.strip_prefix(prefix)
        .unwrap_or(name)
        .to_ascii_lowercase()
}

fn vec3(v: [f32; 3]) -> Vec3 {
    Vec3 {
        x: v[0],
        y: v[1],
        z: v[2],
    }
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consent_policy() {
        let ev = |state: &str| pb::ConsentEvent {
            consent_id: 9,
            kind: "hand_hold".into(),
            requester_entity: 1,
            target_entity: 2,
            state: state.into(),
        };
        let answer = |op| Some(ConsentReaction::Answer(op));
        assert_eq!(
            consent_reaction(&ev("REQUESTED"), Some(2), true),
            answer(ConsentOp::Consent)
        );
        assert_eq!(
            consent_reaction(&ev("requested"), Some(2), false),
            answer(ConsentOp::Decline)
        );
        // The requester does not answer its own request; bystanders never act.
        assert_eq!(consent_reaction(&ev("requested"), Some(1), true), None);
        assert_eq!(consent_reaction(&ev("requested"), Some(3), true), None);
        assert_eq!(
            consent_reaction(&ev("consented"), Some(1), true),
            answer(ConsentOp::Activate)
        );
        assert_eq!(
            consent_reaction(&ev("active"), Some(1), true),
            Some(ConsentReaction::ReleaseLater)
        );
        assert_eq!(consent_reaction(&ev("active"), Some(2), true), None);
        assert_eq!(consent_reaction(&ev("released"), Some(1), true), None);
        assert_eq!(consent_reaction(&ev("requested"), None, true), None);
    }

    #[test]
    fn names_and_close_policy() {
        assert_eq!(error_name(ErrorCode::RoomFull as i32), "room_full");
        assert_eq!(error_name(999), "unknown_999");
        // Close codes as plaza-client takes them: resume, retry later (room full), give up.
        assert!(ConnectError::Closed(Some(1001)).retryable());
        assert!(ConnectError::Closed(Some(4008)).retryable());
        assert!(ConnectError::Closed(Some(4005)).retryable());
        assert!(!ConnectError::Closed(Some(1000)).retryable());
        assert!(!ConnectError::Closed(Some(4004)).retryable());
        assert!(ConnectError::Closed(None).retryable());
        assert!(!ConnectError::Closed(Some(4001)).retryable());
        assert_eq!(ConnectError::Closed(Some(4005)).label(), "closed_4005");
    }
}
