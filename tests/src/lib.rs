//! Harness for Plaza's whole-system tests: start Plaza in-process on ephemeral ports, and a
//! WebSocket test client ([`Client`]) that is a thin shell over `plaza_client::Connection` (the
//! repo's one client implementation, also under `plaza-load`'s bots): it speaks the real
//! protocol and decodes every frame.
//!
//! Waits are bounded polls on conditions, never fixed sleeps.

pub mod blackhole;
pub mod cluster;
pub mod otlp;
pub mod up;

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use plaza_client::{Connection, ConnectionConfig, Event, State};
use plaza_ops::config::PlazaConfig;
use plaza_ops::{Plaza, Roles};
use plaza_proto::frame::FrameDecoder;
use plaza_proto::pb::{self, client_envelope, server_envelope};
use prost::Message as _;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode as WsCloseCode;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// A config for tests: every listener on an ephemeral loopback port, short grace periods.
pub fn test_config() -> PlazaConfig {
    let mut cfg = PlazaConfig::defaults();
    cfg.gateway.listen = "127.0.0.1:0".parse().expect("literal address");
    cfg.admin.listen = "127.0.0.1:0".parse().expect("literal address");
    cfg.node.listen = "127.0.0.1:0".parse().expect("literal address");
    cfg.room.empty_grace_ms = 2_000;
    // Every test client comes from one address: the per-address join bucket (burst 40, 10/s)
    // would refuse a test's 41st join within a second. `edge_limits` runs the shipped values.
    cfg.gateway.joins_per_ip_burst = 100_000;
    cfg.gateway.joins_per_ip_per_s = 100_000;
    cfg.log.level = "warn".into();
    // Test clients are guests, in every role (the default gives guests to `plaza up` only).
    cfg.auth.mode = "guest".into();
    cfg
}

/// Starts every role in this process.
pub async fn start_plaza(cfg: &PlazaConfig) -> Plaza {
    Plaza::start(cfg, Roles::All).await.expect("plaza starts")
}

/// The WebSocket URL of a running Plaza.
pub fn ws_url(p: &Plaza) -> String {
    format!("ws://{}/v1/ws", p.ws_addr().expect("plaza runs a gateway"))
}

/// Polls `f` every 20 ms until it returns true or `timeout` passes.
pub async fn eventually<F: FnMut() -> bool>(timeout: Duration, mut f: F) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The WebSocket type of the test client.
pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How a connection ended, as the client saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct Closed {
    /// The close code, if a close frame came.
    pub code: Option<u16>,
    /// Errors the server sent before closing.
    pub errors: Vec<pb::Error>,
}

/// The server refused a request with this error (see [`Client::wait_joined`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Refused(pub pb::Error);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let code = pb::ErrorCode::try_from(self.0.code)
            .map_or_else(|_| self.0.code.to_string(), |c| c.as_str_name().to_owned());
        write!(f, "refused {code}: {}", self.0.message)
    }
}

impl std::error::Error for Refused {}

/// A frame the connection applied (what tests check about the chain).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameInfo {
    /// This frame's sequence number.
    pub seq: u32,
    /// The sequence number of the frame it applied onto.
    pub base_seq: u32,
    /// The room tick it describes.
    pub tick: u32,
    /// Whether it was a keyframe.
    pub keyframe: bool,
}

/// A test client: a real WebSocket and a [`plaza_client::Connection`] (the one client
/// implementation of the repo: sequences, negotiate, join, frames, resync), plus the raw server
/// bodies the tests look at.
///
/// The public fields are kept in step with the connection after every envelope; writing them
/// changes nothing on the wire.
pub struct Client {
    ws: Ws,
    conn: Connection,
    epoch: std::time::Instant,
    /// Session id from Negotiated.
    pub session_id: u64,
    /// Wallet from Negotiated.
    pub wallet: String,
    /// Resume token from Negotiated.
    pub resume_token: String,
    /// Own entity from Joined.
    pub entity: u32,
    /// Spawn position from Joined.
    pub spawn: [f32; 3],
    /// Frames applied.
    pub frames: Vec<FrameInfo>,
    /// Errors received.
    pub errors: Vec<pb::Error>,
    /// Corrections received.
    pub corrections: Vec<pb::Correction>,
    /// Frame decode failures (chain break, check mismatch, malformed).
    pub frame_errors: u32,
    /// Resync requests the connection sent after frame failures.
    pub resyncs: u32,
    /// Every event received, in order.
    pub events: Vec<pb::Event>,
    /// `Joined` envelopes received: more than one means the gateway resumed the session into
    /// a new room activation inside the same connection.
    pub joins: u32,
    /// `RoomStatus` envelopes received (the gateway's "room moving" / "room back").
    pub room_statuses: Vec<pb::RoomStatus>,
    /// The last `Joined` received (the room's description).
    pub joined: Option<pb::Joined>,
    /// Bytes of the delta frames (not keyframes) applied.
    pub delta_frame_bytes: u64,
    /// Bytes of the delta frame in the envelope being handled (counted once applied).
    pending_delta: u64,
}

impl Client {
    /// Connects without negotiating.
    pub async fn connect_raw(url: &str) -> anyhow::Result<Self> {
        let (ws, _) = tokio_tungstenite::connect_async(url).await?;
        Ok(Self::from_stream(ws))
    }

    /// The raw WebSocket (tests that read frames themselves).
    pub fn ws_mut(&mut self) -> &mut Ws {
        &mut self.ws
    }

    /// A client over an already connected WebSocket.
    pub fn from_stream(ws: Ws) -> Self {
        Self {
            ws,
            conn: Connection::new(ConnectionConfig {
                client_name: "plaza-tests".into(),
                // Tests send their own pings.
                ping_interval_s: 0.0,
                ..ConnectionConfig::default()
            }),
            epoch: std::time::Instant::now(),
            session_id: 0,
            wallet: String::new(),
            resume_token: String::new(),
            entity: 0,
            spawn: [0.0; 3],
            frames: Vec::new(),
            errors: Vec::new(),
            corrections: Vec::new(),
            frame_errors: 0,
            resyncs: 0,
            events: Vec::new(),
            joins: 0,
            room_statuses: Vec::new(),
            joined: None,
            delta_frame_bytes: 0,
            pending_delta: 0,
        }
    }

    /// Connects and negotiates version 1.0.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let mut c = Self::connect_raw(url).await?;
        c.negotiate(vec![pb::ProtocolVersion { major: 1, minor: 0 }], "")
            .await?;
        Ok(c)
    }

    /// The connection (state, stats, roster).
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// The decoder holding this client's view of the room.
    pub fn decoder(&self) -> &FrameDecoder {
        self.conn.decoder()
    }

    /// The decoder, mutable (a test that corrupts the view on purpose).
    pub fn decoder_mut(&mut self) -> &mut FrameDecoder {
        self.conn.decoder_mut()
    }

    /// Sends a negotiate and waits for Negotiated.
    pub async fn negotiate(
        &mut self,
        versions: Vec<pb::ProtocolVersion>,
        resume_token: &str,
    ) -> anyhow::Result<()> {
        self.send(client_envelope::Body::Negotiate(pb::Negotiate {
            versions,
            resume_token: resume_token.to_owned(),
            ..Default::default()
        }))
        .await?;
        loop {
            match self.recv().await? {
                Some(server_envelope::Body::Negotiated(_)) => return Ok(()),
                Some(_) => {}
                None => anyhow::bail!("closed during negotiate: {:?}", self.errors),
            }
        }
    }

    /// Sends a join and waits for Joined.
    pub async fn join(&mut self, room: &str) -> anyhow::Result<u32> {
        self.send(client_envelope::Body::Join(pb::Join {
            room_id: room.to_owned(),
        }))
        .await?;
        let seq = self.conn.last_sequence();
        self.wait_joined_after(seq).await
    }

    /// Waits for Joined. An `Error` from the server before it is the refusal: returned as a
    /// [`Refused`] (`err.downcast_ref::<Refused>()`), not waited out.
    pub async fn wait_joined(&mut self) -> anyhow::Result<u32> {
        self.wait_joined_after(0).await
    }

    /// [`Client::wait_joined`] for a join sent as client sequence `seq`: an `Error` that answers
    /// an earlier request (its `in_reply_to` names a sequence before `seq`) is not the join's
    /// refusal; it stays in `errors` and the wait goes on.
    async fn wait_joined_after(&mut self, seq: u32) -> anyhow::Result<u32> {
        loop {
            match self.recv().await? {
                Some(server_envelope::Body::Joined(j)) => return Ok(j.entity_id),
                Some(server_envelope::Body::Error(e))
                    if e.in_reply_to == 0 || e.in_reply_to >= seq =>
                {
                    return Err(Refused(e).into());
                }
                Some(_) => {}
                None => anyhow::bail!("closed during join: {:?}", self.errors),
            }
        }
    }

    /// Sends a movement to `position` with client time `t` seconds.
    pub async fn move_to(&mut self, position: [f32; 3], t: f64) -> anyhow::Result<()> {
        self.send(client_envelope::Body::Movement(pb::Movement {
            position: Some(pb::Vec3 {
                x: position[0],
                y: position[1],
                z: position[2],
            }),
            velocity: Some(pb::Vec3::default()),
            movement_kind: pb::MovementKind::Walk as i32,
            timestamp: t,
            ..Default::default()
        }))
        .await
    }

    /// Sends one request through the connection (the next sequence number, the session id).
    ///
    /// A `Negotiate` opens the connection's session: its versions, auth token, name and resume
    /// token become the connection's, and the connection sends it. A `Join` or `Leave` goes
    /// through [`Connection::join`] / [`Connection::leave`] when the state allows it. Anything
    /// else before `Negotiated` is refused with an error: a test that means to send it uses
    /// [`Client::send_unchecked`].
    pub async fn send(&mut self, body: client_envelope::Body) -> anyhow::Result<()> {
        match body {
            client_envelope::Body::Negotiate(n) => {
                let cfg = self.conn.config_mut();
                cfg.versions = n.versions;
                cfg.auth_token = n.auth_token;
                if !n.client_name.is_empty() {
                    cfg.client_name = n.client_name;
                }
                self.conn.set_resume_token(n.resume_token);
                let now = self.now();
                self.conn.connected(now);
            }
            client_envelope::Body::Join(j) if self.conn.state() == State::Ready => {
                self.conn.join(&j.room_id);
            }
            client_envelope::Body::Leave(_)
                if matches!(self.conn.state(), State::Joined | State::Moving) =>
            {
                self.conn.leave();
            }
            body => {
                if self.conn.send(body).is_none() {
                    anyhow::bail!(
                        "not negotiated ({:?}): use send_unchecked to send it anyway",
                        self.conn.state()
                    );
                }
            }
        }
        self.flush().await
    }

    /// Sends one envelope whatever the connection's state (a second `Negotiate`, a request
    /// before `Negotiated`): for tests that send what a well-behaved client never would.
    pub async fn send_unchecked(&mut self, body: client_envelope::Body) -> anyhow::Result<()> {
        self.conn.send_unchecked(body);
        self.flush().await
    }

    /// Sends raw bytes as one binary frame.
    pub async fn send_raw(&mut self, bytes: Vec<u8>) -> anyhow::Result<()> {
        self.ws.send(Message::Binary(bytes.into())).await?;
        Ok(())
    }

    /// Writes what the connection queued.
    async fn flush(&mut self) -> anyhow::Result<()> {
        while let Some(bytes) = self.conn.poll_transmit() {
            self.ws.send(Message::Binary(bytes.into())).await?;
        }
        Ok(())
    }

    fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    /// Receives one server envelope body (frames are applied by the connection on the way), or
    /// `None` when the connection closed.
    pub async fn recv(&mut self) -> anyhow::Result<Option<server_envelope::Body>> {
        match self.recv_or_close().await? {
            Ok(b) => Ok(Some(b)),
            Err(_) => Ok(None),
        }
    }

    /// Receives one body or the close.
    pub async fn recv_or_close(&mut self) -> anyhow::Result<Result<server_envelope::Body, Closed>> {
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(10), self.ws.next())
                .await
                .map_err(|_| anyhow::anyhow!("no message for 10 s"))?;
            let msg = match msg {
                None | Some(Err(_)) => return Ok(Err(self.closed(None))),
                Some(Ok(m)) => m,
            };
            match msg {
                Message::Binary(b) => {
                    let env = pb::ServerEnvelope::decode(b)?;
                    let Some(body) = env.body.clone() else {
                        continue;
                    };
                    self.take(&body);
                    if self.conn.state() != State::Disconnected {
                        let now = self.now();
                        self.conn.handle_envelope(env, now)?;
                        self.conn.handle_timeout(now);
                        self.drain();
                        // Resyncs the connection decided on.
                        self.flush().await?;
                    }
                    return Ok(Ok(body));
                }
                Message::Close(f) => {
                    let code = f.map(|f| u16::from(f.code));
                    return Ok(Err(self.closed(code)));
                }
                _ => {}
            }
        }
    }

    /// Keeps the raw bodies tests look at.
    fn take(&mut self, body: &server_envelope::Body) {
        match body {
            server_envelope::Body::Error(e) => self.errors.push(e.clone()),
            server_envelope::Body::Event(e) => self.events.push(e.clone()),
            server_envelope::Body::Correction(c) => self.corrections.push(*c),
            server_envelope::Body::Joined(j) => {
                self.joins += 1;
                self.entity = j.entity_id;
                if let Some(p) = j.position {
                    self.spawn = [p.x, p.y, p.z];
                }
                self.joined = Some(j.clone());
            }
            server_envelope::Body::RoomStatus(st) => self.room_statuses.push(st.clone()),
            server_envelope::Body::SnapshotFrame(f) => {
                let keyframe = f
                    .frame
                    .first()
                    .is_some_and(|b| b & plaza_proto::frame::FLAG_KEYFRAME != 0);
                if !keyframe {
                    // Counted as applied below if the connection applies it.
                    self.pending_delta = f.frame.len() as u64;
                }
            }
            _ => {}
        }
    }

    /// Folds the connection's events into the fields.
    fn drain(&mut self) {
        let pending = std::mem::take(&mut self.pending_delta);
        while let Some(ev) = self.conn.poll_event() {
            match ev {
                Event::Frame {
                    seq,
                    base_seq,
                    tick,
                    keyframe,
                } => {
                    if !keyframe {
                        self.delta_frame_bytes += pending;
                    }
                    self.frames.push(FrameInfo {
                        seq,
                        base_seq,
                        tick,
                        keyframe,
                    });
                }
                Event::FrameFailed(_) => self.frame_errors += 1,
                Event::Negotiated {
                    session_id, wallet, ..
                } => {
                    self.session_id = session_id;
                    self.wallet = wallet;
                }
                _ => {}
            }
        }
        self.resume_token = self.conn.resume_token().to_owned();
        self.resyncs = u32::try_from(self.conn.stats().resyncs).unwrap_or(u32::MAX);
    }

    fn closed(&mut self, code: Option<u16>) -> Closed {
        self.conn.handle_close(code);
        while self.conn.poll_event().is_some() {}
        Closed {
            code,
            errors: self.errors.clone(),
        }
    }

    /// Reads until the connection closes; returns how.
    pub async fn until_closed(&mut self) -> anyhow::Result<Closed> {
        loop {
            if let Err(c) = self.recv_or_close().await? {
                return Ok(c);
            }
        }
    }

    /// Reads for `d`, applying frames; errors if the connection closes.
    pub async fn pump_for(&mut self, d: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + d;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            match tokio::time::timeout(left, self.recv_or_close()).await {
                Err(_) => return Ok(()),
                Ok(r) => {
                    if let Err(c) = r? {
                        anyhow::bail!("connection closed: {c:?}");
                    }
                }
            }
        }
    }

    /// Closes the connection normally.
    pub async fn close(mut self) {
        let _ = self
            .ws
            .close(Some(tokio_tungstenite::tungstenite::protocol::CloseFrame {
                code: WsCloseCode::Normal,
                reason: "".into(),
            }))
            .await;
    }
}

/// Scrapes `/metrics` of a running Plaza.
pub async fn scrape_metrics(admin: SocketAddr) -> anyhow::Result<String> {
    http_get(admin, "/metrics").await.map(|(_, body)| body)
}

/// One HTTP/1.1 call to an admin listener, with an optional bearer token and JSON body: (status,
/// JSON body or `null`). Panics when the call fails (a test helper).
pub async fn http_call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (u16, serde_json::Value) {
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let body = body.unwrap_or("");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{auth}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let (status, body) = http_exchange(addr, &req, Duration::from_secs(10))
        .await
        .expect("an HTTP answer in time");
    (
        status,
        serde_json::from_str(&body).unwrap_or(serde_json::Value::Null),
    )
}

/// A minimal HTTP/1.1 GET (status, body) for admin endpoints.
pub async fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    http_exchange(addr, &req, Duration::from_secs(5)).await
}

/// Writes one HTTP/1.1 request (`Connection: close`) on a fresh connection and reads the whole
/// answer (bounded by `timeout`): (status, body).
async fn http_exchange(
    addr: SocketAddr,
    request: &str,
    timeout: Duration,
) -> anyhow::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = TcpStream::connect(addr).await?;
    s.write_all(request.as_bytes()).await?;
    let mut buf = Vec::new();
    tokio::time::timeout(timeout, s.read_to_end(&mut buf)).await??;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status: u16 = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("bad http response"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|x| x.1.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// Reads until an event matching `f` arrives (bounded: 400 envelopes).
pub async fn wait_event<F: FnMut(&pb::event::Kind) -> bool>(
    what: &str,
    c: &mut Client,
    mut f: F,
) -> pb::event::Kind {
    let mut seen = Vec::new();
    for _ in 0..400 {
        if let Some(server_envelope::Body::Event(e)) = c.recv().await.unwrap()
            && let Some(k) = e.kind
        {
            if f(&k) {
                return k;
            }
            seen.push(k);
        }
    }
    panic!(
        "{what}: event never arrived; other events {seen:?}; errors {:?}; corrections {:?}",
        c.errors, c.corrections
    );
}

/// Sends a consent op.
pub async fn consent(c: &mut Client, op: pb::ConsentOp, kind: &str, target: u32, id: u64) {
    c.send(client_envelope::Body::Consent(pb::ConsentAction {
        op: op as i32,
        kind: kind.into(),
        target_entity: target,
        consent_id: id,
    }))
    .await
    .unwrap();
}

/// The consent id and state of a consent event.
pub fn consent_state(k: &pb::event::Kind) -> Option<(u64, String)> {
    match k {
        pb::event::Kind::Consent(c) => Some((c.consent_id, c.state.clone())),
        _ => None,
    }
}

/// An interaction with prop `prop_id` (`room` empty: the session's room).
pub fn interaction(
    kind: pb::InteractionKind,
    prop_id: u32,
    pos: [f32; 3],
    room: &str,
) -> client_envelope::Body {
    client_envelope::Body::Interaction(pb::Interaction {
        kind: kind as i32,
        prop_id,
        position: Some(pb::Vec3 {
            x: pos[0],
            y: pos[1],
            z: pos[2],
        }),
        velocity: None,
        room_id: room.into(),
    })
}

/// Walks `c` (whose entity is `entity`) from its spawn to crate 1 of the default room and picks
/// it up; asserts the room gave it to `c` and returns the pickup's prop event.
pub async fn pick_up_crate_1(c: &mut Client, entity: u32, t: &mut f64) -> pb::PropEvent {
    walk(c, [5.0, 0.0, -8.0], t).await;
    walk_from(c, [5.0, 0.0, -8.0], [5.0, 0.0, 3.6], t).await;
    c.send(interaction(pb::InteractionKind::Pickup, 1, [0.0; 3], ""))
        .await
        .unwrap();
    let k = wait_event("pickup", c, |k| matches!(k, pb::event::Kind::Prop(_))).await;
    let pb::event::Kind::Prop(p) = k else {
        unreachable!()
    };
    assert_eq!((p.prop_id, p.holder_entity), (1, entity));
    p
}

/// `a` asks `b` (entity `b_entity`) to hold hands, `b` consents, `a` activates; waits for each
/// step's event and returns the consent's id (the hold is active).
pub async fn hold_hands(a: &mut Client, b: &mut Client, b_entity: u32) -> u64 {
    consent(a, pb::ConsentOp::Request, "hand_hold", b_entity, 0).await;
    let k = wait_event("requested", b, |k| {
        consent_state(k).is_some_and(|s| s.1 == "requested")
    })
    .await;
    let (hold, _) = consent_state(&k).expect("a consent event");
    consent(b, pb::ConsentOp::Consent, "", 0, hold).await;
    wait_event("consented", a, |k| {
        consent_state(k).is_some_and(|s| s == (hold, "consented".into()))
    })
    .await;
    consent(a, pb::ConsentOp::Activate, "", 0, hold).await;
    wait_event("active", b, |k| {
        consent_state(k).is_some_and(|s| s == (hold, "active".into()))
    })
    .await;
    hold
}

/// Asks for crate 1 as `c` and asserts the room refuses it `already_held` (someone else still
/// holds it `after` a fault: the room's state came through).
pub async fn assert_crate_1_still_held(c: &mut Client, after: &str) {
    c.send(interaction(pb::InteractionKind::Pickup, 1, [0.0; 3], ""))
        .await
        .unwrap();
    let k = wait_event("refused", c, |k| matches!(k, pb::event::Kind::Rejected(_))).await;
    assert!(
        matches!(&k, pb::event::Kind::Rejected(r) if r.reason == "already_held"),
        "the crate is still held after {after}: {k:?}"
    );
}

/// Pumps both clients (they must stay connected) until `done` holds or `timeout` passes.
pub async fn pump_both_until(
    a: &mut Client,
    b: &mut Client,
    timeout: Duration,
    mut done: impl FnMut(&Client, &Client) -> bool,
) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < deadline {
        a.pump_for(Duration::from_millis(50))
            .await
            .expect("client a stays connected");
        b.pump_for(Duration::from_millis(50))
            .await
            .expect("client b stays connected");
        if done(a, b) {
            return true;
        }
    }
    false
}

/// Places `c` at its spawn and walks it to `to` in plausible steps (≤ 0.8 m per 0.1 s).
pub async fn walk(c: &mut Client, to: [f32; 3], t: &mut f64) {
    let from = c.spawn;
    c.move_to(from, *t).await.unwrap();
    walk_from(c, from, to, t).await;
}

/// Walks `c` from `from` to `to` in plausible steps; asserts no move was corrected.
pub async fn walk_from(c: &mut Client, from: [f32; 3], to: [f32; 3], t: &mut f64) {
    let mut p = from;
    loop {
        let d = [to[0] - p[0], to[2] - p[2]];
        let len = (d[0] * d[0] + d[1] * d[1]).sqrt();
        if len < 0.01 {
            break;
        }
        let step = len.min(0.8);
        p = [p[0] + d[0] / len * step, p[1], p[2] + d[1] / len * step];
        *t += 0.1;
        c.move_to(p, *t).await.unwrap();
        c.pump_for(Duration::from_millis(60)).await.unwrap();
    }
    c.pump_for(Duration::from_millis(100)).await.unwrap();
    assert!(
        c.corrections.is_empty(),
        "walk was valid: {:?}",
        c.corrections
    );
}
