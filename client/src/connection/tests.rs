use super::*;
use plaza_proto::frame::{EncoderConfig, EntityRecord, FrameEncoder, Visible};
use plaza_proto::quant::{Pose, quantize};

fn env(body: SBody) -> Vec<u8> {
    pb::ServerEnvelope {
        sequence: 1,
        sent_at_ms: 0,
        body: Some(body),
    }
    .encode_to_vec()
}

fn sent(c: &mut Connection) -> Vec<ClientEnvelope> {
    std::iter::from_fn(|| c.poll_transmit())
        .map(|b| ClientEnvelope::decode(b.as_slice()).unwrap())
        .collect()
}

fn events(c: &mut Connection) -> Vec<Event> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

fn negotiated(sid: u64, token: &str) -> Vec<u8> {
    env(SBody::Negotiated(pb::Negotiated {
        session_id: sid,
        wallet: "guest:a".into(),
        resume_token: token.into(),
        ..Default::default()
    }))
}

fn joined(entity: u32) -> Vec<u8> {
    env(SBody::Joined(pb::Joined {
        room_id: "r".into(),
        entity_id: entity,
        tick_hz: 50,
        broadcast_hz: 20,
        ..Default::default()
    }))
}

fn rec(id: u32, x: f32) -> EntityRecord {
    EntityRecord {
        id,
        generation: 0,
        kind: 0,
        pose: quantize(&Pose {
            position: [x, 0.0, 0.0],
            ..Pose::default()
        }),
    }
}

fn frame(enc: &mut FrameEncoder, tick: u32, recs: &[EntityRecord]) -> Vec<u8> {
    let vis: Vec<Visible<'_>> = recs
        .iter()
        .map(|r| Visible { record: r, tier: 0 })
        .collect();
    let mut out = Vec::new();
    enc.encode(tick, None, &vis, &mut out);
    env(SBody::SnapshotFrame(pb::SnapshotFrame {
        frame: out.into(),
    }))
}

#[test]
fn negotiate_join_frames_and_u64_session() {
    let mut c = Connection::new(ConnectionConfig {
        room: Some("r".into()),
        ..ConnectionConfig::default()
    });
    c.connected(0.0);
    let s = sent(&mut c);
    assert!(matches!(s[0].body, Some(CBody::Negotiate(_))));
    assert_eq!(s[0].session_id, 0);
    let big = (1u64 << 60) + 7;
    c.handle_input(&negotiated(big, "t1"), 0.1).unwrap();
    let s = sent(&mut c);
    assert_eq!(s[0].session_id, big);
    assert!(matches!(s[0].body, Some(CBody::Join(_))));
    c.handle_input(&joined(9), 0.2).unwrap();
    assert_eq!(c.state(), State::Joined);
    let mut enc = FrameEncoder::new(EncoderConfig {
        budget_bytes_per_s: 0,
        ..EncoderConfig::default()
    });
    c.handle_input(&frame(&mut enc, 10, &[rec(1, 1.0), rec(2, 2.0)]), 0.3)
        .unwrap();
    c.handle_input(&frame(&mut enc, 12, &[rec(1, 1.5)]), 0.35)
        .unwrap();
    let ev = events(&mut c);
    let entered: Vec<u32> = ev
        .iter()
        .filter_map(|e| match e {
            Event::EntityEntered(c) => Some(c.entity()),
            _ => None,
        })
        .collect();
    assert_eq!(entered, [1, 2]);
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::EntityUpdated(c) if c.entity() == 1))
    );
    assert!(ev.contains(&Event::EntityLeft { entity: 2 }));
    assert_eq!(c.session_id(), big);
}

#[test]
fn chain_break_sends_one_resync_and_drops_deltas_until_keyframe() {
    let mut c = Connection::new(ConnectionConfig {
        room: Some("r".into()),
        ..ConnectionConfig::default()
    });
    c.connected(0.0);
    c.handle_input(&negotiated(5, "t"), 0.0).unwrap();
    c.handle_input(&joined(9), 0.0).unwrap();
    sent(&mut c);
    let mut enc = FrameEncoder::new(EncoderConfig::default());
    c.handle_input(&frame(&mut enc, 1, &[rec(1, 1.0)]), 0.0)
        .unwrap();
    let _lost = frame(&mut enc, 2, &[rec(1, 1.1)]);
    c.handle_input(&frame(&mut enc, 3, &[rec(1, 1.2)]), 0.1)
        .unwrap();
    c.handle_input(&frame(&mut enc, 4, &[rec(1, 1.3)]), 0.15)
        .unwrap();
    let s = sent(&mut c);
    assert_eq!(s.len(), 1);
    assert!(matches!(s[0].body, Some(CBody::Resync(_))));
    assert_eq!(c.stats().chain_breaks, 1);
    assert_eq!(c.stats().dropped_awaiting_keyframe, 1);
    // No keyframe within the retry: one more.
    c.handle_timeout(2.2);
    assert_eq!(sent(&mut c).len(), 1);
    enc.request_keyframe();
    c.handle_input(&frame(&mut enc, 5, &[rec(1, 1.4)]), 2.3)
        .unwrap();
    assert!(!c.awaiting_keyframe());
    c.handle_timeout(4.5);
    assert!(
        sent(&mut c)
            .iter()
            .all(|e| !matches!(e.body, Some(CBody::Resync(_))))
    );
}

#[test]
fn close_codes_and_resume() {
    assert_eq!(CloseKind::of(Some(1001)), CloseKind::Resume);
    assert_eq!(CloseKind::of(None), CloseKind::Resume);
    assert_eq!(CloseKind::of(Some(4010)), CloseKind::Terminal);
    assert_eq!(CloseKind::of(Some(4005)), CloseKind::RetryLater);
    assert!(!CloseKind::of(Some(4002)).retryable());
    let mut c = Connection::new(ConnectionConfig {
        room: Some("r".into()),
        ..ConnectionConfig::default()
    });
    c.connected(0.0);
    c.handle_input(&negotiated(77, "tok"), 0.0).unwrap();
    c.handle_input(&joined(9), 0.0).unwrap();
    c.handle_close(None);
    let ev = events(&mut c);
    assert!(matches!(
        ev.last(),
        Some(Event::Closed {
            kind: CloseKind::Resume,
            ..
        })
    ));
    c.connected(1.0);
    let s = sent(&mut c);
    match &s[0].body {
        Some(CBody::Negotiate(n)) => assert_eq!(n.resume_token, "tok"),
        b => panic!("{b:?}"),
    }
    c.handle_input(&negotiated(77, "tok2"), 1.0).unwrap();
    assert!(matches!(
        events(&mut c).first(),
        Some(Event::Negotiated { resumed: true, .. })
    ));
    // Resumed into the room: the gateway sends Joined, no second Join.
    assert!(sent(&mut c).is_empty());
    assert_eq!(c.resume_token(), "tok2");
    // A stale token refused with 4003 makes the next connect a new session.
    c.handle_close(Some(4003));
    assert_eq!(c.resume_token(), "");
}

/// Entered / updated / left of every frame, as (kind, entity): 'e', 'u', 'l'.
fn entity_events(c: &mut Connection) -> Vec<(char, u32)> {
    events(c)
        .iter()
        .filter_map(|e| match e {
            Event::EntityEntered(c) => Some(('e', c.entity())),
            Event::EntityUpdated(c) => Some(('u', c.entity())),
            Event::EntityLeft { entity } => Some(('l', *entity)),
            _ => None,
        })
        .collect()
}

#[test]
fn delta_entries_generations_and_keyframes_diff_against_what_was_reported() {
    let joined_conn = |entity_events| {
        let mut c = Connection::new(ConnectionConfig {
            room: Some("r".into()),
            entity_events,
            ..ConnectionConfig::default()
        });
        c.connected(0.0);
        c.handle_input(&negotiated(5, "t"), 0.0).unwrap();
        c.handle_input(&joined(9), 0.0).unwrap();
        events(&mut c);
        c
    };
    let mut c = joined_conn(true);
    let mut enc = FrameEncoder::new(EncoderConfig {
        budget_bytes_per_s: 0,
        ..EncoderConfig::default()
    });
    let mut frames = Vec::new();
    frames.push(frame(&mut enc, 1, &[rec(1, 1.0), rec(2, 2.0)]));
    // 3 enters in a delta; 1 moves.
    frames.push(frame(&mut enc, 2, &[rec(1, 1.5), rec(2, 2.0), rec(3, 3.0)]));
    // Only moves (the path without a lookup in the reported index).
    frames.push(frame(&mut enc, 3, &[rec(1, 1.7), rec(2, 2.2), rec(3, 3.0)]));
    // 2 comes back under a new generation: left, then entered.
    let mut two = rec(2, 2.2);
    two.generation = 1;
    frames.push(frame(&mut enc, 4, &[rec(1, 1.7), two, rec(3, 3.0)]));
    // 1 leaves.
    frames.push(frame(&mut enc, 5, &[two, rec(3, 3.1)]));
    enc.request_keyframe();
    // A keyframe: 2 and 3 as reported (updated), 4 new.
    frames.push(frame(&mut enc, 6, &[two, rec(3, 3.1), rec(4, 4.0)]));
    let want: [&[(char, u32)]; 6] = [
        &[('e', 1), ('e', 2)],
        &[('u', 1), ('e', 3)],
        &[('u', 1), ('u', 2)],
        &[('l', 2), ('e', 2)],
        &[('l', 1), ('u', 3)],
        &[('u', 2), ('u', 3), ('e', 4)],
    ];
    let mut quiet = joined_conn(false);
    for (f, want) in frames.iter().zip(want) {
        c.handle_input(f, 0.1).unwrap();
        assert_eq!(entity_events(&mut c), want);
        // Without entity events: only the frame's own lists, the same frame applied.
        quiet.handle_input(f, 0.1).unwrap();
        let ev = events(&mut quiet);
        assert!(ev.iter().all(|e| !matches!(
            e,
            Event::EntityEntered(_) | Event::EntityUpdated(_) | Event::EntityLeft { .. }
        )));
        assert!(ev.iter().any(|e| matches!(e, Event::Frame { .. })));
        assert_eq!(quiet.last_frame(), c.last_frame());
        assert_eq!(quiet.decoder().check(), c.decoder().check());
    }
    let last = quiet.last_frame().unwrap();
    assert!(last.keyframe);
    assert_eq!(last.changed, [2, 3, 4]);
    // Leaving the room reports every entity left, and forgets the frame.
    c.handle_input(
        &env(SBody::Left(pb::Left {
            room_id: "r".into(),
        })),
        0.2,
    )
    .unwrap();
    assert_eq!(entity_events(&mut c), [('l', 2), ('l', 3), ('l', 4)]);
    assert!(c.last_frame().is_none());
}

#[test]
fn events_stay_small() {
    // Thousands of connections in one load tool each queue a keyframe's worth of events.
    assert!(size_of::<Event>() <= 72, "{}", size_of::<Event>());
}

#[test]
fn unchecked_sends_and_frame_kinds() {
    let mut c = Connection::new(ConnectionConfig::default());
    assert_eq!(c.send(CBody::Ping(pb::Ping { client_time_ms: 1 })), None);
    let seq = c.send_unchecked(CBody::Join(pb::Join {
        room_id: "early".into(),
    }));
    let s = sent(&mut c);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].sequence, seq);
    c.set_resume_token("tok");
    c.config_mut().versions = vec![pb::ProtocolVersion { major: 9, minor: 0 }];
    c.connected(0.0);
    match &sent(&mut c)[0].body {
        Some(CBody::Negotiate(n)) => {
            assert_eq!(n.resume_token, "tok");
            assert_eq!(n.versions[0].major, 9);
        }
        b => panic!("{b:?}"),
    }
    c.handle_input(&negotiated(3, "t2"), 0.0).unwrap();
    c.handle_input(&joined(1), 0.0).unwrap();
    let mut enc = FrameEncoder::new(EncoderConfig::default());
    c.handle_input(&frame(&mut enc, 1, &[rec(1, 1.0)]), 0.0)
        .unwrap();
    c.handle_input(&frame(&mut enc, 2, &[rec(1, 1.1)]), 0.0)
        .unwrap();
    let frames: Vec<(u32, u32, bool)> = events(&mut c)
        .iter()
        .filter_map(|e| match e {
            Event::Frame {
                seq,
                base_seq,
                keyframe,
                ..
            } => Some((*seq, *base_seq, *keyframe)),
            _ => None,
        })
        .collect();
    assert_eq!(frames.len(), 2);
    assert!(frames[0].2 && !frames[1].2);
    assert_eq!(frames[1].1, frames[0].0);
    assert_eq!(c.stats().frames_received, 2);
    assert!(c.decoder().get(1).is_some());
    let junk = env(SBody::SnapshotFrame(pb::SnapshotFrame {
        frame: vec![0x17, 0xff, 0xff].into(),
    }));
    c.handle_input(&junk, 0.0).unwrap();
    let failed = events(&mut c);
    match failed.as_slice() {
        [Event::FrameFailed(f)] => {
            assert!(f.resync_sent);
            assert!(!f.kind.is_check_failure());
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(c.stats().frames_received, 3);
}

#[test]
fn garbage_is_a_typed_error() {
    let mut c = Connection::new(ConnectionConfig::default());
    assert_eq!(
        c.handle_input(&[1, 2, 3], 0.0),
        Err(InputError::NotConnected)
    );
    c.connected(0.0);
    assert!(matches!(
        c.handle_input(&[0xff, 0xff, 0xff], 0.0),
        Err(InputError::Decode(_))
    ));
    let junk = env(SBody::SnapshotFrame(pb::SnapshotFrame {
        frame: vec![0x17, 0xff, 0xff].into(),
    }));
    c.handle_input(&negotiated(1, ""), 0.0).unwrap();
    c.handle_input(&joined(1), 0.0).unwrap();
    c.handle_input(&junk, 0.0).unwrap();
    assert_eq!(c.stats().decode_errors, 1);
}
