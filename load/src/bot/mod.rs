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

mod behaviour;
mod events;
mod transport;

use crate::Shared;
use crate::rate::SendRate;
use crate::scenario::{BotKind, BotMix};
use crate::seen::{Matched, OwnMoves, RoomMoves};
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
/// Samples are also flushed when this many move-to-seen samples wait (memory per bot).
const SAMPLE_BATCH: usize = 128;
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
    seen_last: Matched,
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
        let walker = Walker::with_model(
            shared.cfg.walk,
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
            seen_last: Matched::default(),
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
            // Boxed: the connect's state (DNS, TCP, the WebSocket upgrade, the handshake) is
            // the largest of the run's, and inline it sized every bot's task for its whole life.
            match Box::pin(self.connect_and_join(resuming, deadline)).await {
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
