//! The simulated pair: the gateway's `SessionCore` (with its client queue) ↔ [`RoomHost`] ↔
//! `Room`, on simulated time, with no socket and no tokio runtime (quinn's `Pair`).
//!
//! The harness executes each side's effects the way its shell does: the session core's
//! `Attach` links the session to the host with a fresh in-memory outlet, `Forward` and
//! `KeyframeNeeded` go to the host, `DropLink` detaches the link; the host's messages on the
//! current outlet are read back into the core (the first `Ack` after an attach completes it, a
//! `Detach` during an attach refuses it), and `Deliver` goes through the gateway's own bounded
//! client queue (`OutQueue`), whose overflows the core counts.
//!
//! What the client sends goes in as the bytes of a WebSocket message
//! (`SessionCore::on_client_bytes`, as the shell reads them); the authenticator's verdict, the
//! edge's per-address session slot (the gateway's real `Edge`) and the node's answer to an
//! attach are the pair's to set, so every refusal of the gateway's table is driven from its
//! real input (`refusals`).

mod refusals;

use plaza_gateway::auth::AuthError;
use plaza_gateway::close::CloseCode;
use plaza_gateway::edge::Conn;
use plaza_gateway::limits::Limits;
use plaza_gateway::queue::{OutItem, OutQueue, Pushed};
use plaza_gateway::refusal::Refusal;
use plaza_gateway::session_core::{
    self as sc, AttachCause, AttachResult, Effect, Identity, NodeEvent, SessionCore,
};
use plaza_proto::pb::{self, client_envelope, server_envelope};
use plaza_proto::version;
use prost::Message as _;
use tokio::time::Instant;

use super::tests::{Queue, Sim};
use super::*;

const SID: u64 = 42;
const WALLET: &str = "0xabc";

/// One client session through a gateway core to a room host.
struct Pair {
    sim: Sim,
    core: SessionCore,
    /// The gateway's time base (the core takes `Instant`s; the host a `Duration`).
    t0: Instant,
    /// The gateway's queue towards the client.
    client_q: OutQueue,
    /// What the client read: envelopes, in order.
    client: Vec<pb::ServerEnvelope>,
    /// The client reads its queue after every tick (`false`: a client that stopped reading).
    reading: bool,
    /// The current link's outlet and id.
    node_q: Queue,
    link_id: u64,
    /// An attach is in flight (its first `Ack` completes it).
    attaching: bool,
    closed: Option<CloseCode>,
    /// What the client was told about its room.
    statuses: Vec<sc::RoomStatus>,
    seq: u32,
    /// The authenticator's verdict on the negotiate (`None`: accepted).
    verdict: Option<AuthError>,
    /// Whether the identity has the operator role.
    operator: bool,
    /// The connection's slot at the gateway's edge (`None`: no per-address limit in play).
    conn: Option<Conn>,
    /// How the node answers an attach.
    node: NodeAnswer,
}

/// How the node answers the pair's attaches.
#[derive(Clone, Debug, PartialEq)]
enum NodeAnswer {
    /// The room host takes it.
    Host,
    /// The node refuses the request's arguments (gRPC `InvalidArgument`) with this message.
    RefusesArguments(String),
    /// No node answers: the shell's retries give up.
    Down,
}

impl Pair {
    /// Negotiated (protocol and identity) and in no room.
    fn new(sim: Sim) -> Self {
        let mut p = Self::open(sim);
        p.negotiate(version::SUPPORTED.to_vec());
        p
    }

    /// A connection that has sent nothing yet.
    fn open(sim: Sim) -> Self {
        let t0 = Instant::now();
        let limits = Limits::default();
        let client_q = OutQueue::new(limits.outbound_queue);
        Self {
            sim,
            core: SessionCore::new(limits, t0),
            t0,
            client_q,
            client: Vec::new(),
            reading: true,
            node_q: Queue::new(1024),
            link_id: 0,
            attaching: false,
            closed: None,
            statuses: Vec::new(),
            seq: 0,
            verdict: None,
            operator: false,
            conn: None,
            node: NodeAnswer::Host,
        }
    }

    /// The client's first message: `negotiate` offering `versions`.
    fn negotiate(&mut self, versions: Vec<pb::ProtocolVersion>) {
        self.client_env(pb::ClientEnvelope {
            body: Some(client_envelope::Body::Negotiate(pb::Negotiate {
                versions,
                ..Default::default()
            })),
            ..Default::default()
        });
    }

    fn now(&self) -> Instant {
        self.t0 + self.sim.clock.now()
    }

    /// The negotiated client sends `body` (its session id, its next sequence number).
    fn client_sends(&mut self, body: client_envelope::Body) {
        self.seq += 1;
        self.client_env(pb::ClientEnvelope {
            session_id: SID,
            sequence: self.seq,
            sent_at_ms: 0,
            body: Some(body),
        });
    }

    /// The client sends `env`, encoded as its binary WebSocket message.
    fn client_env(&mut self, env: pb::ClientEnvelope) {
        self.client_bytes(&env.encode_to_vec());
    }

    /// A binary WebSocket message from the client, read as the gateway's shell reads it.
    fn client_bytes(&mut self, bytes: &[u8]) {
        let fx = self.core.on_client_bytes(bytes, self.now());
        self.apply(fx);
        self.pump();
    }

    /// Executes the session core's effects as its shell does.
    fn apply(&mut self, fx: Vec<Effect>) {
        for e in fx {
            let now = self.now();
            match e {
                Effect::Authenticate(_) => {
                    // As the shell: the authenticator's verdict, then the edge's session slot.
                    let ident = match self.verdict.take() {
                        Some(e) => Err(e.verdict()),
                        None => match self.conn.as_ref().map_or(Ok(()), Conn::negotiated) {
                            Ok(()) => Ok(Identity {
                                session_id: SID,
                                wallet: WALLET.into(),
                                operator: self.operator,
                                resume_token: "tok".into(),
                                room: None,
                            }),
                            Err(_) => Err((Refusal::TooManySessions, String::new())),
                        },
                    };
                    let fx = self.core.on_identity(ident, now);
                    self.apply(fx);
                }
                Effect::Pong { client_time_ms } => self.queue_to_client(
                    pb::ServerEnvelope {
                        body: Some(server_envelope::Body::Pong(pb::Pong {
                            client_time_ms,
                            server_time_ms: 0,
                        })),
                        ..Default::default()
                    }
                    .encode_to_vec()
                    .into(),
                    FrameKind::Control,
                ),
                Effect::Send(body) => self.queue_to_client(
                    pb::ServerEnvelope {
                        body: Some(body),
                        ..Default::default()
                    }
                    .encode_to_vec()
                    .into(),
                    FrameKind::Control,
                ),
                Effect::Deliver { bytes, kind } => self.queue_to_client(bytes, kind),
                Effect::Forward(env) => {
                    self.sim.host.on_envelope(SID, env);
                    self.sim.writes.extend(self.sim.host.take_writes());
                }
                Effect::KeyframeNeeded => self.sim.host.on_keyframe_needed(SID),
                Effect::Attach { entity, .. } => {
                    let refused = match &self.node {
                        NodeAnswer::Host => None,
                        NodeAnswer::RefusesArguments(m) => Some(AttachResult::Invalid(m.clone())),
                        NodeAnswer::Down => Some(AttachResult::GaveUp),
                    };
                    if let Some(result) = refused {
                        let fx = self.core.on_attach_result(result, now);
                        self.apply(fx);
                        continue;
                    }
                    self.link_id += 1;
                    self.node_q = Queue::new(1024);
                    self.attaching = true;
                    self.sim.host.on_attach(Attach {
                        session: SID,
                        wallet: WALLET.into(),
                        tx: Box::new(self.node_q.clone()),
                        entity,
                        link_id: self.link_id,
                        operator: self.core.is_operator(),
                    });
                    self.sim.writes.extend(self.sim.host.take_writes());
                }
                Effect::CancelAttach => self.attaching = false,
                Effect::Status { status, .. } => self.statuses.push(status),
                Effect::DropLink => self.sim.host.on_detach(SID, self.link_id),
                Effect::Close(code) => {
                    self.closed.get_or_insert(code);
                }
                _ => {}
            }
        }
    }

    fn queue_to_client(&mut self, bytes: bytes::Bytes, kind: FrameKind) {
        if self.client_q.push_frame(bytes, kind) == Pushed::Overflow {
            let fx = self.core.on_overflow(self.now());
            self.apply(fx);
        }
    }

    /// Reads what the host queued on the current link into the session core.
    fn pump(&mut self) {
        loop {
            let msgs = self.node_q.take();
            if msgs.is_empty() {
                break;
            }
            for m in msgs {
                let now = self.now();
                let kind = m.frame_kind();
                let fx = match m.body {
                    Some(node_outbound::Body::Ack(a)) if self.attaching => {
                        self.attaching = false;
                        self.core.on_attach_result(
                            AttachResult::Attached {
                                entity: a.entity_id,
                                node: "node-a".into(),
                            },
                            now,
                        )
                    }
                    Some(node_outbound::Body::Ack(a)) => self.core.on_node(
                        NodeEvent::Ack {
                            entity: a.entity_id,
                        },
                        now,
                    ),
                    Some(node_outbound::Body::Detach(d)) => {
                        let reason = sc::DetachReason::from_wire(d.reason);
                        if std::mem::take(&mut self.attaching) {
                            self.core.on_attach_result(
                                AttachResult::Detached {
                                    reason,
                                    message: d.message,
                                },
                                now,
                            )
                        } else {
                            self.core.on_node(
                                NodeEvent::Detach {
                                    reason,
                                    message: d.message,
                                },
                                now,
                            )
                        }
                    }
                    Some(node_outbound::Body::ServerEnvelope(bytes)) => {
                        self.core.on_node(NodeEvent::Frame { kind, bytes }, now)
                    }
                    None => Vec::new(),
                };
                self.apply(fx);
            }
        }
    }

    /// `ms` of simulated time: the host's wakes, the node stream read after each, the client's
    /// queue read when the client reads.
    fn run(&mut self, ms: u64) -> Option<&'static str> {
        for _ in 0..ms / 10 {
            let stop = self.sim.run(10);
            self.pump();
            let fx = self.core.on_timer(self.now());
            self.apply(fx);
            if self.reading {
                self.read_client();
            }
            if stop.is_some() {
                return stop;
            }
        }
        None
    }

    /// `ms` of simulated time for a session in no room: [`Pair::run`] whether or not the host's
    /// room (empty) asked to stop.
    fn wait(&mut self, ms: u64) {
        for _ in 0..ms / 10 {
            let _ = self.run(10);
        }
    }

    fn read_client(&mut self) {
        if self.client_q.is_empty() {
            return;
        }
        let mut items = Vec::new();
        futures::executor::block_on(self.client_q.drain(&mut items));
        for i in items {
            if let OutItem::Frame { bytes, .. } = i {
                self.client
                    .push(pb::ServerEnvelope::decode(bytes.as_ref()).expect("an envelope"));
            }
        }
    }

    fn frames(&self) -> usize {
        self.client
            .iter()
            .filter(|e| matches!(e.body, Some(server_envelope::Body::SnapshotFrame(_))))
            .count()
    }

    fn joined(&self) -> Vec<u32> {
        self.client
            .iter()
            .filter_map(|e| match &e.body {
                Some(server_envelope::Body::Joined(j)) => Some(j.entity_id),
                _ => None,
            })
            .collect()
    }

    /// The last error the client read.
    fn last_error(&self) -> Option<&pb::Error> {
        self.client.iter().rev().find_map(|e| match &e.body {
            Some(server_envelope::Body::Error(x)) => Some(x),
            _ => None,
        })
    }

    fn errors(&self) -> Vec<i32> {
        self.client
            .iter()
            .filter_map(|e| match &e.body {
                Some(server_envelope::Body::Error(x)) => Some(x.code),
                _ => None,
            })
            .collect()
    }

    /// Negotiated and joined to the host's room; returns the entity.
    fn join(&mut self) -> u32 {
        self.client_sends(client_envelope::Body::Join(pb::Join {
            room_id: "r".into(),
        }));
        self.run(100);
        let e = self.sim.host.room.entity_of(SID).expect("a member");
        assert_eq!(self.joined(), vec![e]);
        e
    }
}

#[test]
fn join_then_frames_reach_the_client() {
    let mut p = Pair::new(Sim::new(RoomActorConfig::default()));
    let entity = p.join();
    p.run(1_000);
    assert!(p.frames() >= 20, "{}", p.frames());
    assert_eq!(p.closed, None);
    assert_eq!(p.sim.registered(), vec![WALLET.to_owned()]);
    // The first frame is a keyframe the client's decoder applies; so are the rest.
    let mut dec = plaza_proto::frame::FrameDecoder::default();
    for e in &p.client {
        if let Some(server_envelope::Body::SnapshotFrame(f)) = &e.body {
            dec.apply(&f.frame).expect("every frame applies");
        }
    }
    assert_eq!(p.sim.host.room.entity_of(SID), Some(entity));
}

#[test]
fn a_broken_stream_reattaches_and_the_swap_keeps_the_avatar() {
    let mut p = Pair::new(Sim::new(RoomActorConfig::default()));
    let entity = p.join();
    p.run(200);
    let old = p.link_id;
    // The stream breaks on the gateway's side: the core re-attaches; the node sees the old
    // stream's end only after the new attach.
    let fx = p.core.on_node(NodeEvent::Ended { broken: true }, p.now());
    assert!(
        fx.iter().any(|e| matches!(
            e,
            Effect::Attach {
                cause: AttachCause::StreamEnded,
                ..
            }
        )),
        "{fx:?}"
    );
    p.apply(fx);
    p.sim.host.on_detach(SID, old);
    p.pump();
    let frames = p.frames();
    p.run(1_000);
    assert_eq!(
        p.sim.host.room.entity_of(SID),
        Some(entity),
        "the same avatar"
    );
    assert_eq!(
        p.joined(),
        vec![entity, entity],
        "Joined again on the new stream"
    );
    assert!(p.frames() >= frames + 19);
    assert_eq!(
        p.statuses,
        vec![sc::RoomStatus::Moving, sc::RoomStatus::Back]
    );
    assert!(p.sim.released().is_empty(), "presence kept");
    assert_eq!(p.closed, None);
}

#[test]
fn a_drain_hands_the_session_to_the_next_activation() {
    let mut p = Pair::new(Sim::new(RoomActorConfig::default()));
    let entity = p.join();
    p.run(200);
    // Drain: a last step, then the handoff state; the node tells the session.
    let mut batch = p
        .sim
        .host
        .tick(Due::Final, &mut |_, _, _| {})
        .expect("a batch");
    assert!(p.sim.host.deliver_until_audits(&mut batch).is_empty());
    p.sim.host.finish(batch);
    p.sim.host.frozen = true;
    let bytes = p.sim.host.handoff_bytes();
    let h = crate::handoff::decode("r", &bytes).expect("a handoff state");
    let mut room = Room::new("r", plaza_room_core::RoomConfig::default());
    room.restore(h.room.expect("the room's state"));
    let awaited = h
        .members
        .into_iter()
        .map(|m| {
            (
                m.session,
                Awaited {
                    wallet: m.wallet,
                    entity: m.entity,
                    deadline: Duration::from_secs(15),
                },
            )
        })
        .collect();
    let _ = p.node_q.offer(super::super::detach_message(
        node::DetachReason::Draining,
        "draining",
    ));
    // The next activation (its own clock from zero) takes the room.
    let next = Sim::restored(RoomActorConfig::default(), room, awaited);
    let old = std::mem::replace(&mut p.sim, next);
    p.t0 += old.clock.now();
    p.pump();
    p.run(1_000);
    assert_eq!(
        p.sim.host.room.entity_of(SID),
        Some(entity),
        "the same avatar"
    );
    assert_eq!(p.joined(), vec![entity, entity]);
    assert_eq!(p.closed, None, "no disconnect");
    assert!(p.frames() >= 20);
}

#[test]
fn a_client_that_stops_reading_is_closed_4006() {
    let mut p = Pair::new(Sim::new(RoomActorConfig::default()));
    p.join();
    p.reading = false;
    p.run(30_000);
    assert_eq!(p.closed, Some(CloseCode::SlowConsumer));
    assert_eq!(CloseCode::SlowConsumer.code(), 4006);
}

#[test]
fn an_unconfirmed_lease_withholds_frames_then_the_room_gives_up() {
    let mut p = Pair::new(Sim::new(RoomActorConfig::default()));
    p.join();
    p.run(200);
    p.sim
        .lease
        .0
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let frames = p.frames();
    assert_eq!(p.run(30_000), None);
    assert_eq!(p.frames(), frames, "no frame while withheld");
    // The gateway sees the room silent and starts moving the session (a stall re-attach).
    assert!(
        p.statuses.contains(&sc::RoomStatus::Moving),
        "{:?}",
        p.statuses
    );
    assert_eq!(p.run(31_000), Some("lease lapsed"));
}

/// A join to a room that admits no one, and the wakes that answer it.
fn join_a_full_room() -> Pair {
    let room = Room::new(
        "r",
        plaza_room_core::RoomConfig {
            max_members: 0,
            ..plaza_room_core::RoomConfig::default()
        },
    );
    let mut p = Pair::new(Sim::restored(
        RoomActorConfig::default(),
        room,
        HashMap::new(),
    ));
    p.client_sends(client_envelope::Body::Join(pb::Join {
        room_id: "r".into(),
    }));
    p.run(100);
    p
}

#[test]
fn a_full_room_refuses_the_join_and_the_gateway_closes_room_full() {
    let p = join_a_full_room();
    assert_eq!(p.errors(), vec![pb::ErrorCode::RoomFull as i32]);
    assert!(p.sim.host.links.is_empty());
    assert_eq!(p.closed, Some(CloseCode::RoomFull));
}

/// An operator's kick (another session, attached with the operator role) reaches the victim's
/// gateway as `KICKED`: it closes 4010; a non-operator's kick is refused and changes nothing.
#[test]
fn an_operator_kick_closes_the_member_4010() {
    let mut p = Pair::new(Sim::new(RoomActorConfig::default()));
    p.join();
    let (op_q, mallory_q) = (Queue::new(4096), Queue::new(4096));
    for (session, wallet, operator, q) in [
        (7, "0xop", true, &op_q),
        (8, "0xmallory", false, &mallory_q),
    ] {
        p.sim.host.on_attach(Attach {
            session,
            wallet: wallet.into(),
            tx: Box::new(q.clone()),
            entity: 0,
            link_id: 1,
            operator,
        });
    }
    p.run(100);
    let kick = |seq| pb::ClientEnvelope {
        sequence: seq,
        body: Some(client_envelope::Body::Operator(pb::OperatorAction {
            op: pb::OperatorOp::Kick as i32,
            target_wallet: WALLET.into(),
        })),
        ..Default::default()
    };
    p.sim.host.on_envelope(8, kick(1));
    p.pump();
    assert_eq!(p.closed, None, "not an operator: refused");
    assert!(p.sim.host.links.contains_key(&SID));
    p.sim.host.on_envelope(7, kick(1));
    p.pump();
    assert_eq!(p.closed, Some(CloseCode::Kicked));
    assert_eq!(CloseCode::Kicked.code(), 4010);
    assert!(!p.sim.host.links.contains_key(&SID));
    p.run(40);
    assert_eq!(p.sim.host.room.entity_of(SID), None, "it left the room");
}
