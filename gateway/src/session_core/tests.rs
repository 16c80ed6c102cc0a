//! Unit tests of [`SessionCore`], on simulated time.

use super::*;

const SID: u64 = 42;

fn limits() -> Limits {
    Limits::default()
}

/// A test session: the core, its clock, and the next client sequence.
struct T {
    core: SessionCore,
    now: Instant,
    seq: u32,
}

impl T {
    /// A negotiated session.
    fn open() -> Self {
        let now = Instant::now();
        let mut t = Self {
            core: SessionCore::new(limits(), now),
            now,
            seq: 0,
        };
        let fx = t.core.on_client(negotiate(), now);
        assert!(matches!(fx[..], [Effect::Authenticate(_)]), "{fx:?}");
        let fx = t.core.on_identity(Ok(ident(None)), now);
        assert!(
            matches!(
                &fx[..],
                [Effect::Send(server_envelope::Body::Negotiated(n))] if n.session_id == SID
            ),
            "{fx:?}"
        );
        t
    }

    /// Negotiated and attached to room `r` as entity 7 on node `n1`.
    fn attached() -> Self {
        let mut t = Self::open();
        let fx = t.client(join("r"));
        assert_eq!(
            fx,
            [Effect::Attach {
                room: "r".into(),
                cause: AttachCause::Join,
                entity: 0,
                avoid: None
            }]
        );
        let fx = t.attach_ok(7, "n1");
        assert!(fx.is_empty(), "{fx:?}");
        t
    }

    fn advance(&mut self, d: Duration) {
        self.now += d;
    }

    fn client(&mut self, body: client_envelope::Body) -> Vec<Effect> {
        self.seq += 1;
        let env = pb::ClientEnvelope {
            session_id: SID,
            sequence: self.seq,
            sent_at_ms: 0,
            body: Some(body),
        };
        self.core.on_client(env, self.now)
    }

    fn node(&mut self, ev: NodeEvent) -> Vec<Effect> {
        self.core.on_node(ev, self.now)
    }

    fn attach_ok(&mut self, entity: u32, node: &str) -> Vec<Effect> {
        self.core.on_attach_result(
            AttachResult::Attached {
                entity,
                node: node.into(),
            },
            self.now,
        )
    }

    fn timer(&mut self) -> Vec<Effect> {
        self.core.on_timer(self.now)
    }
}

fn negotiate() -> pb::ClientEnvelope {
    pb::ClientEnvelope {
        body: Some(client_envelope::Body::Negotiate(pb::Negotiate {
            versions: version::SUPPORTED.to_vec(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn ident(room: Option<(String, u32)>) -> Identity {
    Identity {
        session_id: SID,
        wallet: "0xabc".into(),
        operator: false,
        resume_token: "tok".into(),
        room,
    }
}

fn join(room: &str) -> client_envelope::Body {
    client_envelope::Body::Join(pb::Join {
        room_id: room.into(),
    })
}

fn movement(x: f32) -> client_envelope::Body {
    client_envelope::Body::Movement(pb::Movement {
        position: Some(pb::Vec3 { x, y: 0.0, z: 0.0 }),
        ..Default::default()
    })
}

fn ping(t: u64) -> client_envelope::Body {
    client_envelope::Body::Ping(pb::Ping { client_time_ms: t })
}

fn emote() -> client_envelope::Body {
    client_envelope::Body::Emote(pb::Emote::default())
}

fn frame() -> NodeEvent {
    NodeEvent::Frame {
        bytes: Bytes::from_static(b"f"),
        kind: FrameKind::Delta,
    }
}

/// The error codes of every `Send(Error)` among `fx`.
fn errors(fx: &[Effect]) -> Vec<pb::ErrorCode> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Send(server_envelope::Body::Error(e)) => {
                Some(pb::ErrorCode::try_from(e.code).unwrap())
            }
            _ => None,
        })
        .collect()
}

fn closes(fx: &[Effect]) -> Vec<CloseCode> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Close(c) => Some(*c),
            _ => None,
        })
        .collect()
}

#[test]
fn the_first_message_must_be_negotiate() {
    let now = Instant::now();
    let mut core = SessionCore::new(limits(), now);
    let fx = core.on_client(
        pb::ClientEnvelope {
            body: Some(join("r")),
            ..Default::default()
        },
        now,
    );
    assert_eq!(errors(&fx), [pb::ErrorCode::BadFrame]);
    assert_eq!(closes(&fx), [CloseCode::BadFrame]);
    assert!(core.is_closed());
    assert!(
        core.on_client(negotiate(), now).is_empty(),
        "closed: ignored"
    );
}

#[test]
fn no_negotiate_before_the_deadline_closes() {
    let now = Instant::now();
    let mut core = SessionCore::new(limits(), now);
    let deadline = core.poll_timeout().unwrap();
    assert_eq!(deadline, now + limits().handshake_deadline);
    assert!(
        core.on_timer(deadline - Duration::from_millis(1))
            .is_empty()
    );
    let fx = core.on_timer(deadline);
    assert_eq!(closes(&fx), [CloseCode::HandshakeTimeout]);
}

#[test]
fn a_session_in_no_room_is_closed_after_the_idle_deadline() {
    let idle = limits().unjoined_idle;
    // Never joined: closed at negotiate + idle, not before.
    let mut t = T::open();
    let opened = t.now;
    assert_eq!(t.core.poll_timeout(), Some(opened + idle));
    t.advance(idle / 2);
    let fx = t.client(ping(1));
    assert_eq!(fx, [Effect::Pong { client_time_ms: 1 }]);
    assert_eq!(
        t.core.poll_timeout(),
        Some(opened + idle),
        "pings do not extend it"
    );
    assert!(
        t.core
            .on_timer(opened + idle - Duration::from_millis(1))
            .is_empty()
    );
    let fx = t.core.on_timer(opened + idle);
    assert_eq!(errors(&fx), [pb::ErrorCode::HandshakeTimeout]);
    assert_eq!(closes(&fx), [CloseCode::HandshakeTimeout]);

    // In a room: no idle deadline (only the node-silence check); after a leave it starts again.
    let mut t = T::attached();
    assert_eq!(t.core.poll_timeout(), Some(t.now + limits().node_silence));
    t.advance(idle * 2);
    let _ = t.client(client_envelope::Body::Leave(pb::Leave {}));
    let _ = t.node(NodeEvent::Ended { broken: false });
    let left = t.now;
    assert_eq!(t.core.poll_timeout(), Some(left + idle));
    let fx = t.core.on_timer(left + idle);
    assert_eq!(closes(&fx), [CloseCode::HandshakeTimeout]);
}

#[test]
fn no_common_version_is_refused_with_the_server_list() {
    let now = Instant::now();
    let mut core = SessionCore::new(limits(), now);
    let fx = core.on_client(
        pb::ClientEnvelope {
            body: Some(client_envelope::Body::Negotiate(pb::Negotiate {
                versions: vec![pb::ProtocolVersion {
                    major: 99,
                    minor: 0,
                }],
                ..Default::default()
            })),
            ..Default::default()
        },
        now,
    );
    let Some(Effect::Send(server_envelope::Body::Error(e))) = fx.first() else {
        panic!("{fx:?}");
    };
    assert!(!e.supported_versions.is_empty());
    assert_eq!(closes(&fx), [CloseCode::UnsupportedVersion]);
}

#[test]
fn a_failed_authentication_closes_with_its_detail() {
    let now = Instant::now();
    let mut core = SessionCore::new(limits(), now);
    core.on_client(negotiate(), now);
    let fx = core.on_identity(Err((Refusal::Auth, "expired".into())), now);
    let Some(Effect::Send(server_envelope::Body::Error(e))) = fx.first() else {
        panic!("{fx:?}");
    };
    assert_eq!(e.message, "expired");
    assert_eq!(closes(&fx), [CloseCode::Auth]);
}

#[test]
fn join_forward_ping_and_leave() {
    let mut t = T::attached();
    assert_eq!(t.core.room(), Some(("r", 7)));
    let fx = t.client(movement(1.0));
    assert!(matches!(fx[..], [Effect::Forward(_)]), "{fx:?}");
    let fx = t.client(ping(5));
    assert_eq!(fx, [Effect::Pong { client_time_ms: 5 }]);
    let fx = t.node(frame());
    assert!(matches!(fx[..], [Effect::Deliver { .. }]), "{fx:?}");
    // A second join is refused, the session goes on.
    let fx = t.client(join("other"));
    assert_eq!(errors(&fx), [pb::ErrorCode::AlreadyJoined]);
    assert!(closes(&fx).is_empty());
    // Leave: forwarded; the stream's end is expected and does not re-attach.
    let fx = t.client(client_envelope::Body::Leave(pb::Leave {}));
    assert!(matches!(fx[..], [Effect::Forward(_)]), "{fx:?}");
    assert!(t.core.is_leaving());
    let fx = t.node(NodeEvent::Ended { broken: false });
    assert_eq!(fx, [Effect::DropLink]);
    assert_eq!(t.core.room(), None);
    let fx = t.client(emote());
    assert_eq!(errors(&fx), [pb::ErrorCode::NotJoined]);
}

#[test]
fn an_invalid_room_id_is_refused_and_the_session_goes_on() {
    let mut t = T::open();
    let fx = t.client(join("no spaces allowed!"));
    assert_eq!(errors(&fx), [pb::ErrorCode::InvalidInput]);
    assert!(closes(&fx).is_empty());
}

#[test]
fn replayed_sequences_wrong_sessions_and_floods() {
    let mut t = T::attached();
    t.client(movement(1.0));
    let env = pb::ClientEnvelope {
        session_id: SID,
        sequence: t.seq,
        sent_at_ms: 0,
        body: Some(movement(2.0)),
    };
    assert_eq!(
        t.core.on_client(env, t.now),
        [Effect::Dropped("replayed_sequence")]
    );
    let env = pb::ClientEnvelope {
        session_id: SID + 1,
        sequence: 1000,
        sent_at_ms: 0,
        body: Some(movement(2.0)),
    };
    let fx = t.core.on_client(env, t.now);
    assert_eq!(closes(&fx), [CloseCode::BadFrame]);

    // 100 movements within 100 ms: the first burst passes, then drops, then a flood close.
    let mut t = T::attached();
    let mut all = Vec::new();
    for _ in 0..100 {
        t.advance(Duration::from_millis(1));
        all.extend(t.client(movement(1.0)));
        if t.core.is_closed() {
            break;
        }
    }
    assert!(all.contains(&Effect::Dropped("rate_limited")));
    assert_eq!(closes(&all), [CloseCode::RateLimited]);
}

/// Issue 11, first row: the room's node dies, the re-attach takes a lease TTL, and the client
/// keeps sending movement at 10 Hz and pings every 2 s. The session is never closed, every ping
/// is answered while the room moves, only the latest movement is kept, and after the re-attach
/// the client's inputs are judged on their own rate (nothing queued floods the limiter).
#[test]
fn issue_11_a_session_keeps_living_while_its_room_moves() {
    let mut t = T::attached();
    let fx = t.node(NodeEvent::Ended { broken: false });
    assert_eq!(
        fx,
        [
            Effect::Invalidate("r".into()),
            Effect::Attach {
                room: "r".into(),
                cause: AttachCause::StreamEnded,
                entity: 7,
                avoid: None
            },
            Effect::Status {
                room: "r".into(),
                status: RoomStatus::Moving
            },
        ]
    );
    assert!(t.core.is_moving());
    let mut pongs = 0;
    let mut dropped = 0;
    let mut refused = Vec::new();
    // 10 s: the shipped lease TTL.
    for i in 0..100u64 {
        t.advance(Duration::from_millis(100));
        for e in t.client(movement(i as f32)) {
            match e {
                Effect::Dropped("room_moving") => dropped += 1,
                other => panic!("while moving, a movement gave {other:?}"),
            }
        }
        if i % 20 == 0 {
            let fx = t.client(ping(i));
            assert_eq!(fx, [Effect::Pong { client_time_ms: i }]);
            pongs += 1;
        }
        if i == 50 {
            refused = errors(&t.client(emote()));
        }
    }
    assert_eq!(pongs, 5);
    assert_eq!(dropped, 99, "all but the latest movement dropped");
    assert_eq!(refused, [pb::ErrorCode::RoomUnavailable]);
    // Back: the latest movement goes to the room, the client hears about it.
    let fx = t.attach_ok(7, "n2");
    let [
        Effect::Resumed(took),
        Effect::Status {
            status: RoomStatus::Back,
            ..
        },
        Effect::Forward(m),
    ] = &fx[..]
    else {
        panic!("{fx:?}");
    };
    assert_eq!(*took, Duration::from_secs(10));
    let Some(client_envelope::Body::Movement(mv)) = &m.body else {
        panic!("{m:?}");
    };
    assert_eq!(mv.position.unwrap().x, 99.0);
    // And the next inputs at the client's own rate all pass.
    for i in 0..50 {
        t.advance(Duration::from_millis(100));
        let fx = t.client(movement(i as f32));
        assert!(matches!(fx[..], [Effect::Forward(_)]), "{fx:?}");
    }
    assert!(!t.core.is_closed());
}

#[test]
fn a_silent_stream_is_left_before_breaking_and_kept_if_it_speaks_again() {
    let mut t = T::attached();
    let silence = limits().node_silence;
    assert_eq!(t.core.poll_timeout(), Some(t.now + silence));
    t.advance(silence / 2);
    t.node(frame());
    t.advance(silence / 2);
    assert!(t.timer().is_empty(), "heard half a silence ago");
    t.advance(silence / 2);
    let fx = t.timer();
    assert_eq!(
        fx,
        [
            Effect::Invalidate("r".into()),
            Effect::Attach {
                room: "r".into(),
                cause: AttachCause::Stalled,
                entity: 7,
                avoid: Some("n1".into())
            },
            Effect::Status {
                room: "r".into(),
                status: RoomStatus::Moving
            },
        ]
    );
    assert_eq!(t.core.poll_timeout(), None, "one stall attach at a time");
    // Inputs still reach the (slow) node meanwhile.
    assert!(matches!(t.client(movement(1.0))[..], [Effect::Forward(_)]));
    // The old stream speaks again: the attach is cancelled.
    let fx = t.node(frame());
    assert!(matches!(
        fx[..],
        [
            Effect::CancelAttach,
            Effect::Status {
                status: RoomStatus::Back,
                ..
            },
            Effect::Deliver { .. }
        ]
    ));
    // Silent again; this time the attach completes on another node.
    t.advance(silence);
    assert_eq!(t.timer().len(), 3);
    t.advance(Duration::from_secs(8));
    let fx = t.attach_ok(7, "n2");
    // Timed from the last frame heard.
    assert_eq!(fx[0], Effect::Resumed(silence + Duration::from_secs(8)));
    assert!(!t.core.is_moving());
    assert_eq!(t.core.poll_timeout(), Some(t.now + silence));
}

#[test]
fn a_stalled_stream_that_ends_leaves_the_attach_in_flight() {
    let mut t = T::attached();
    t.advance(limits().node_silence);
    assert_eq!(t.timer().len(), 3);
    assert!(
        t.node(NodeEvent::Ended { broken: false }).is_empty(),
        "no second attach"
    );
    assert!(t.core.is_moving());
    t.advance(Duration::from_secs(2));
    let fx = t.attach_ok(7, "n2");
    assert_eq!(fx[0], Effect::Resumed(Duration::from_secs(5)));
}

#[test]
fn a_draining_node_moves_the_session_without_a_close() {
    let mut t = T::attached();
    let fx = t.node(NodeEvent::Detach {
        reason: DetachReason::Draining,
        message: String::new(),
    });
    assert_eq!(fx[0], Effect::DropLink);
    assert_eq!(fx[1], Effect::Invalidate("r".into()));
    assert!(matches!(
        fx[2],
        Effect::Attach {
            cause: AttachCause::Draining,
            entity: 7,
            ..
        }
    ));
    assert!(closes(&fx).is_empty());
    let fx = t.attach_ok(7, "n2");
    assert!(matches!(fx[0], Effect::Resumed(_)));
}

#[test]
fn detach_reasons_map_to_their_refusals() {
    let cases = [
        (DetachReason::RoomFull, Some(CloseCode::RoomFull)),
        (DetachReason::Rejected, None),
        (DetachReason::RoomStopped, Some(CloseCode::RoomUnavailable)),
        (DetachReason::Other, Some(CloseCode::RoomUnavailable)),
    ];
    for (reason, close) in cases {
        // Refused on the stream...
        let mut t = T::attached();
        let fx = t.node(NodeEvent::Detach {
            reason,
            message: "why".into(),
        });
        assert_eq!(
            closes(&fx),
            close.into_iter().collect::<Vec<_>>(),
            "{reason:?}"
        );
        // ...or in answer to the attach.
        let mut t = T::open();
        t.client(join("r"));
        let fx = t.core.on_attach_result(
            AttachResult::Detached {
                reason,
                message: "why".into(),
            },
            t.now,
        );
        assert_eq!(
            closes(&fx),
            close.into_iter().collect::<Vec<_>>(),
            "{reason:?}"
        );
        assert_eq!(t.core.room(), None);
    }
}

#[test]
fn a_resume_that_gives_up_closes_room_unavailable() {
    let mut t = T::attached();
    t.node(NodeEvent::Ended { broken: false });
    let fx = t.core.on_attach_result(AttachResult::GaveUp, t.now);
    assert!(fx.contains(&Effect::ResumeFailed));
    assert_eq!(closes(&fx), [CloseCode::RoomUnavailable]);
}

#[test]
fn a_reconnect_with_a_room_re_attaches_at_once() {
    let now = Instant::now();
    let mut core = SessionCore::new(limits(), now);
    core.on_client(negotiate(), now);
    let fx = core.on_identity(Ok(ident(Some(("r".into(), 9)))), now);
    assert!(matches!(
        &fx[1],
        Effect::Attach {
            cause: AttachCause::Reconnect,
            entity: 9,
            ..
        }
    ));
    assert_eq!(core.room(), Some(("r", 9)));
}

#[test]
fn leaving_while_moving_cancels_the_attach() {
    let mut t = T::attached();
    t.node(NodeEvent::Ended { broken: false });
    let fx = t.client(client_envelope::Body::Leave(pb::Leave {}));
    assert_eq!(fx, [Effect::CancelAttach, Effect::DropLink]);
    assert_eq!(t.core.room(), None);
    // A late attach answer changes nothing.
    assert!(t.attach_ok(7, "n2").is_empty());
}

#[test]
fn a_slow_consumer_is_closed_on_its_third_overflow_in_the_window() {
    let mut t = T::attached();
    assert_eq!(t.core.on_overflow(t.now), [Effect::KeyframeNeeded]);
    t.advance(Duration::from_secs(11));
    assert_eq!(t.core.on_overflow(t.now), [Effect::KeyframeNeeded]);
    t.advance(Duration::from_secs(1));
    assert_eq!(t.core.on_overflow(t.now), [Effect::KeyframeNeeded]);
    t.advance(Duration::from_secs(1));
    let fx = t.core.on_overflow(t.now);
    assert_eq!(closes(&fx), [CloseCode::SlowConsumer]);
}

#[test]
fn shutdown_says_going_away_and_keeps_the_room_for_a_resume() {
    let mut t = T::attached();
    let fx = t.core.on_shutdown(Duration::from_millis(1234));
    assert_eq!(
        fx[0],
        Effect::Status {
            room: "r".into(),
            status: RoomStatus::Reconnect { after_ms: 1234 }
        }
    );
    assert_eq!(errors(&fx), [pb::ErrorCode::GoingAway]);
    assert_eq!(closes(&fx), [CloseCode::GoingAway]);
    assert_eq!(t.core.room(), Some(("r", 7)));
}

#[test]
fn a_kick_tells_the_client_and_closes_with_the_kicked_code() {
    let mut t = T::attached();
    let fx = t.core.on_kick();
    assert_eq!(errors(&fx), [pb::ErrorCode::Rejected]);
    assert_eq!(closes(&fx), [CloseCode::Kicked]);
    assert!(t.core.is_closed());
    // A second kick (the registry raced the close) does nothing.
    assert!(t.core.on_kick().is_empty());
}

fn expression(id: u32) -> client_envelope::Body {
    client_envelope::Body::Expression(pb::Expression {
        expression_id: id,
        intensity_bp: 5000,
    })
}

/// Expressions have their own bucket like movement: 10 Hz of them and 10 Hz of moves for 5 s
/// never touch the event bucket (an emote still passes), and a flood of them is dropped, then
/// closed, like a movement flood.
#[test]
fn expressions_are_limited_on_their_own_bucket() {
    let mut t = T::attached();
    for i in 0..50 {
        t.advance(Duration::from_millis(100));
        let fx = t.client(expression(i));
        assert!(
            matches!(fx[..], [Effect::Forward(_)]),
            "expression {i}: {fx:?}"
        );
        let fx = t.client(movement(i as f32 * 0.1));
        assert!(matches!(fx[..], [Effect::Forward(_)]), "move {i}: {fx:?}");
    }
    for _ in 0..limits().events_burst {
        let fx = t.client(emote());
        assert!(matches!(fx[..], [Effect::Forward(_)]), "{fx:?}");
    }
    let mut all = Vec::new();
    for _ in 0..100 {
        t.advance(Duration::from_millis(1));
        all.extend(t.client(expression(1)));
        if t.core.is_closed() {
            break;
        }
    }
    assert!(all.contains(&Effect::Dropped("rate_limited")));
    assert_eq!(closes(&all), [CloseCode::RateLimited]);
}

fn operator_action(op: pb::OperatorOp, target: &str) -> client_envelope::Body {
    client_envelope::Body::Operator(pb::OperatorAction {
        op: op as i32,
        target_wallet: target.into(),
    })
}

#[test]
fn operator_actions_reach_the_room_only_from_an_operator_in_a_room() {
    let refused = |seq: u32, reason: &'static str| {
        vec![
            Effect::AuditOperator {
                op: pb::OperatorOp::Kick,
                target: "0xb".into(),
                refused: reason,
            },
            Effect::Send(server_envelope::Body::OperatorResult(pb::OperatorResult {
                in_reply_to: seq,
                op: pb::OperatorOp::Kick as i32,
                target_wallet: "0xb".into(),
                ok: false,
                reason: reason.into(),
            })),
        ]
    };
    // A member without the role: refused and audited, never forwarded; the session goes on.
    let mut t = T::attached();
    let fx = t.client(operator_action(pb::OperatorOp::Kick, "0xb"));
    assert_eq!(fx, refused(t.seq, "not_operator"));
    assert!(matches!(&t.client(movement(1.0))[..], [Effect::Forward(_)]));
    // An operator: forwarded to the room (which checks the attach's flag again).
    let mut t = T::attached();
    t.core.identity.as_mut().unwrap().operator = true;
    assert!(t.core.is_operator());
    let fx = t.client(operator_action(pb::OperatorOp::Kick, "0xb"));
    assert!(
        matches!(&fx[..], [Effect::Forward(e)] if matches!(e.body, Some(client_envelope::Body::Operator(_)))),
        "{fx:?}"
    );
    // An operator in no room: refused here.
    let mut t = T::open();
    t.core.identity.as_mut().unwrap().operator = true;
    let fx = t.client(operator_action(pb::OperatorOp::Kick, "0xb"));
    assert_eq!(fx, refused(t.seq, "not_joined"));
}

#[test]
fn a_kick_detach_closes_with_4010_and_no_resume() {
    let mut t = T::attached();
    let fx = t.node(NodeEvent::Detach {
        reason: DetachReason::Kicked,
        message: "kicked by an operator".into(),
    });
    assert!(fx.contains(&Effect::Close(CloseCode::Kicked)), "{fx:?}");
}
