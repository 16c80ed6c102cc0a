//! Every refusal of the gateway's table (`plaza_gateway::refusal`), driven through the pair from
//! its real input: the client's bytes, the timers, the authenticator's verdict, the edge's
//! per-address slot, the node's answer to an attach, or what the room does. [`case`] is a
//! `match` with no wildcard, so a new `Refusal` does not compile without its case; the test
//! runs every case and checks what the client read.

use std::net::SocketAddr;

use plaza_gateway::edge::{Edge, EdgeLimits};
use plaza_gateway::metrics::GatewayMetrics;

use super::*;
use crate::room::admin::{CLOSED_MESSAGE, KICKED_MESSAGE};

fn fresh() -> Pair {
    Pair::new(Sim::new(RoomActorConfig::default()))
}

fn joined() -> Pair {
    let mut p = fresh();
    p.join();
    p
}

/// The authenticator refuses the negotiate with `e`; the client reads its reason and detail.
fn refused_by_auth(e: AuthError) -> (Pair, Option<String>) {
    let mut p = Pair::open(Sim::new(RoomActorConfig::default()));
    let detail = e.client_message();
    p.verdict = Some(e);
    p.negotiate(version::SUPPORTED.to_vec());
    (p, Some(detail))
}

/// The session's room stream breaks (its node died) while the session is attached.
fn stream_breaks(p: &mut Pair) {
    let fx = p.core.on_node(NodeEvent::Ended { broken: true }, p.now());
    p.apply(fx);
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// The pair after the input that makes the gateway refuse `r`, and the message the client must
/// read when it is not the table's (the authenticator's or the node's detail).
fn case(r: Refusal) -> (Pair, Option<String>) {
    let limits = Limits::default();
    let ping = || client_envelope::Body::Ping(pb::Ping { client_time_ms: 1 });
    match r {
        Refusal::UnsupportedVersion => {
            let mut p = Pair::open(Sim::new(RoomActorConfig::default()));
            p.negotiate(vec![pb::ProtocolVersion {
                major: 999,
                minor: 0,
            }]);
            (p, None)
        }
        Refusal::NotNegotiated => {
            let mut p = Pair::open(Sim::new(RoomActorConfig::default()));
            p.client_env(pb::ClientEnvelope {
                body: Some(ping()),
                ..Default::default()
            });
            (p, None)
        }
        Refusal::AlreadyNegotiated => {
            let mut p = fresh();
            p.client_sends(client_envelope::Body::Negotiate(pb::Negotiate {
                versions: version::SUPPORTED.to_vec(),
                ..Default::default()
            }));
            (p, None)
        }
        Refusal::WrongSession => {
            let mut p = fresh();
            p.client_env(pb::ClientEnvelope {
                session_id: SID + 1,
                sequence: 1,
                sent_at_ms: 0,
                body: Some(ping()),
            });
            (p, None)
        }
        Refusal::BadFrame => {
            let mut p = fresh();
            // A tag whose varint never ends.
            p.client_bytes(&[0xff, 0xff, 0xff]);
            (p, None)
        }
        Refusal::TooLarge => {
            let mut p = fresh();
            p.client_bytes(&vec![0; limits.max_frame_bytes + 1]);
            (p, None)
        }
        Refusal::HandshakeTimeout => {
            let mut p = Pair::open(Sim::new(RoomActorConfig::default()));
            p.wait(ms(limits.handshake_deadline) + 10);
            (p, None)
        }
        Refusal::IdleTimeout => {
            let mut p = fresh();
            p.wait(ms(limits.unjoined_idle) + 10);
            (p, None)
        }
        Refusal::TooManySessions => {
            // Another session from the same address holds the address's only slot.
            let edge = Edge::new(
                EdgeLimits {
                    max_sessions_per_ip: 1,
                    ..EdgeLimits::default()
                },
                GatewayMetrics::default(),
            );
            let peer = |port| SocketAddr::from(([10, 0, 0, 1], port));
            let mut p = Pair::open(Sim::new(RoomActorConfig::default()));
            let other = edge.admit(peer(1), p.now()).expect("admitted");
            other.negotiated().expect("the address's first session");
            p.conn = Some(edge.admit(peer(2), p.now()).expect("admitted"));
            p.negotiate(version::SUPPORTED.to_vec());
            (p, None)
        }
        Refusal::Auth => refused_by_auth(AuthError::invalid("not a token")),
        Refusal::AuthRequired => refused_by_auth(AuthError::Required("guests are not accepted")),
        Refusal::AuthExpired => refused_by_auth(AuthError::Expired),
        Refusal::AuthNotYetValid => refused_by_auth(AuthError::NotYetValid),
        Refusal::AuthBadSignature => refused_by_auth(AuthError::BadSignature),
        Refusal::AuthWrongIssuer => refused_by_auth(AuthError::WrongIssuer),
        Refusal::AuthWrongAudience => refused_by_auth(AuthError::WrongAudience),
        Refusal::AuthUnknownKey => refused_by_auth(AuthError::UnknownKey),
        Refusal::AuthReplayed => refused_by_auth(AuthError::Replayed),
        Refusal::AuthBanned => refused_by_auth(AuthError::Banned),
        Refusal::AuthResumeMismatch => refused_by_auth(AuthError::ResumeMismatch),
        Refusal::AuthUnavailable => {
            refused_by_auth(AuthError::Unavailable("the key set did not load".into()))
        }
        Refusal::RateLimited => {
            // Pings far over the events rate, all at one instant.
            let mut p = fresh();
            for _ in 0..100 {
                if p.core.is_closed() {
                    break;
                }
                p.client_sends(ping());
            }
            (p, None)
        }
        Refusal::AlreadyJoined => {
            let mut p = joined();
            p.client_sends(client_envelope::Body::Join(pb::Join {
                room_id: "r".into(),
            }));
            (p, None)
        }
        Refusal::InvalidRoomId => {
            let mut p = fresh();
            p.client_sends(client_envelope::Body::Join(pb::Join {
                room_id: "no spaces".into(),
            }));
            (p, None)
        }
        Refusal::InvalidInput => {
            let mut p = fresh();
            let why = "invalid room id";
            p.node = NodeAnswer::RefusesArguments(why.into());
            p.client_sends(client_envelope::Body::Join(pb::Join {
                room_id: "r".into(),
            }));
            (p, Some(why.into()))
        }
        Refusal::NotJoined => {
            let mut p = fresh();
            p.client_sends(client_envelope::Body::Leave(pb::Leave {}));
            (p, None)
        }
        Refusal::RoomMoving => {
            // The re-attach is sent but its answer not read yet: an emote in between is refused
            // (the answer is read after it, and the room is back).
            let mut p = joined();
            stream_breaks(&mut p);
            p.client_sends(client_envelope::Body::Emote(pb::Emote {
                emote_id: "wave".into(),
                timestamp_ms: 1,
                ..Default::default()
            }));
            assert_eq!(
                p.statuses,
                vec![sc::RoomStatus::Moving, sc::RoomStatus::Back]
            );
            (p, None)
        }
        Refusal::RoomFull => {
            let p = join_a_full_room();
            assert!(p.sim.host.links.is_empty());
            (p, Some("room is full".into()))
        }
        Refusal::Rejected => {
            // The session's own operator identity closes the room: every member is detached
            // `REJECTED`, this one too.
            let mut p = Pair::open(Sim::new(RoomActorConfig::default()));
            p.operator = true;
            p.negotiate(version::SUPPORTED.to_vec());
            p.join();
            p.client_sends(client_envelope::Body::Operator(pb::OperatorAction {
                op: pb::OperatorOp::CloseRoom as i32,
                target_wallet: String::new(),
            }));
            assert_eq!(p.sim.host.take_stop(), Some("closed by an operator"));
            (p, Some(CLOSED_MESSAGE.into()))
        }
        Refusal::RoomUnavailable => {
            // The node dies and no node answers the re-attach.
            let mut p = joined();
            p.node = NodeAnswer::Down;
            stream_breaks(&mut p);
            (p, None)
        }
        Refusal::SlowConsumer => {
            let mut p = joined();
            p.reading = false;
            for _ in 0..300 {
                if p.closed.is_some() {
                    break;
                }
                p.run(100);
            }
            (p, None)
        }
        Refusal::GoingAway => {
            let mut p = joined();
            let fx = p.core.on_shutdown(Duration::from_secs(2));
            p.apply(fx);
            (p, None)
        }
        Refusal::Kicked => {
            // Another session, attached with the operator role, kicks this one.
            let mut p = joined();
            let op_q = Queue::new(4096);
            p.sim.host.on_attach(Attach {
                session: 7,
                wallet: "0xop".into(),
                tx: Box::new(op_q.clone()),
                entity: 0,
                link_id: 1,
                operator: true,
            });
            p.run(100);
            p.sim.host.on_envelope(
                7,
                pb::ClientEnvelope {
                    sequence: 1,
                    body: Some(client_envelope::Body::Operator(pb::OperatorAction {
                        op: pb::OperatorOp::Kick as i32,
                        target_wallet: WALLET.into(),
                    })),
                    ..Default::default()
                },
            );
            p.pump();
            (p, Some(KICKED_MESSAGE.into()))
        }
    }
}

#[test]
fn every_refusal_reaches_the_client_with_its_close_code_error_code_and_retryable() {
    for r in Refusal::ALL {
        let (mut p, detail) = case(r);
        p.read_client();
        let e = p
            .last_error()
            .unwrap_or_else(|| panic!("{r:?}: the client read no error"))
            .clone();
        assert_eq!(pb::ErrorCode::try_from(e.code), Ok(r.code()), "{r:?}");
        assert_eq!(e.retryable, r.retryable(), "{r:?}");
        assert_eq!(e.message, detail.as_deref().unwrap_or(r.message()), "{r:?}");
        if r.code() == pb::ErrorCode::Auth {
            assert!(e.message.starts_with(&format!("{}: ", r.name())), "{r:?}");
        }
        if r == Refusal::UnsupportedVersion {
            assert_eq!(e.supported_versions, version::SUPPORTED);
        }
        assert_eq!(p.closed, r.close(), "{r:?}: the close code");
        assert_eq!(p.core.is_closed(), r.close().is_some(), "{r:?}");
        if r.close().is_none() {
            // The session goes on: a ping is answered.
            p.client_sends(client_envelope::Body::Ping(pb::Ping { client_time_ms: 77 }));
            p.read_client();
            assert!(
                matches!(
                    p.client.last().and_then(|e| e.body.as_ref()),
                    Some(server_envelope::Body::Pong(pb::Pong {
                        client_time_ms: 77,
                        ..
                    }))
                ),
                "{r:?}: {:?}",
                p.client.last()
            );
        }
    }
}
