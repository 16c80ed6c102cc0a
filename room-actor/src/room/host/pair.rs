//! The simulated pair: the gateway's `SessionCore` (with its client queue) ↔ [`RoomHost`] ↔
//! `Room`, on simulated time, with no socket and no tokio runtime (quinn's `Pair`).
//!
//! The harness executes each side's effects the way its shell does: the session core's
//! `Attach` links the session to the host with a fresh in-memory outlet, `Forward` and
//! `KeyframeNeeded` go to the host, `DropLink` detaches the link; the host's messages on the
//! current outlet are read back into the core (the first `Ack` after an attach completes it, a
//! `Detach` during an attach refuses it), and `Deliver` goes through the gateway's own bounded
//! client queue (`OutQueue`), whose overflows the core counts.

use plaza_gateway::close::CloseCode;
use plaza_gateway::limits::Limits;
use plaza_gateway::queue::{OutItem, OutQueue, Pushed};
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
}

impl Pair {
    fn new(sim: Sim) -> Self {
        let t0 = Instant::now();
        let limits = Limits::default();
        let client_q = OutQueue::new(limits.outbound_queue);
        let mut p = Self {
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
        };
        let fx = p.core.on_client(
            pb::ClientEnvelope {
                body: Some(client_envelope::Body::Negotiate(pb::Negotiate {
                    versions: version::SUPPORTED.to_vec(),
                    ..Default::default()
                })),
                ..Default::default()
            },
            t0,
        );
        p.apply(fx);
        p
    }

    fn now(&self) -> Instant {
        self.t0 + self.sim.clock.now()
    }

    fn client_sends(&mut self, body: client_envelope::Body) {
        self.seq += 1;
        let env = pb::ClientEnvelope {
            session_id: SID,
            sequence: self.seq,
            sent_at_ms: 0,
            body: Some(body),
        };
        let fx = self.core.on_client(env, self.now());
        self.apply(fx);
        self.pump();
    }

    /// Executes the session core's effects as its shell does.
    fn apply(&mut self, fx: Vec<Effect>) {
        for e in fx {
            let now = self.now();
            match e {
                Effect::Authenticate(_) => {
                    let ident = Identity {
                        session_id: SID,
                        wallet: WALLET.into(),
                        operator: false,
                        resume_token: "tok".into(),
                        room: None,
                    };
                    let fx = self.core.on_identity(Ok(ident), now);
                    self.apply(fx);
                }
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
                    self.link_id += 1;
                    self.node_q = Queue::new(1024);
                    self.attaching = true;
                    self.sim.host.on_attach(Attach {
                        session: SID,
                        wallet: WALLET.into(),
                        tx: Box::new(self.node_q.clone()),
                        entity,
                        link_id: self.link_id,
                        operator: false,
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
                        let reason = detach_reason(d.reason);
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

fn detach_reason(code: i32) -> sc::DetachReason {
    match node::DetachReason::try_from(code).unwrap_or(node::DetachReason::Unspecified) {
        node::DetachReason::RoomFull => sc::DetachReason::RoomFull,
        node::DetachReason::RoomStopped => sc::DetachReason::RoomStopped,
        node::DetachReason::Draining => sc::DetachReason::Draining,
        node::DetachReason::Rejected => sc::DetachReason::Rejected,
        node::DetachReason::Kicked => sc::DetachReason::Kicked,
        node::DetachReason::Unspecified | node::DetachReason::Internal => sc::DetachReason::Other,
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

#[test]
fn a_full_room_refuses_the_join_and_the_gateway_closes_room_full() {
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
