//! The expression channel through the room: rate, interest, blocks, keyframes, budget.

use std::collections::BTreeMap;

use plaza_proto::frame::FrameDecoder;

use crate::expressions::Expression;
use crate::people::BlockOp;
use crate::{Input, Outbound, Room, RoomConfig, SessionId};

/// What each client holds: frames, and expressions folded from its expression messages.
#[derive(Default)]
struct Clients {
    frames: BTreeMap<SessionId, FrameDecoder>,
    held: BTreeMap<SessionId, BTreeMap<u32, Expression>>,
    messages: BTreeMap<SessionId, u32>,
}

impl Clients {
    fn feed(&mut self, out: &[Outbound]) {
        for o in out {
            match o {
                Outbound::Frame { session, bytes, .. } => {
                    let d = self.frames.entry(*session).or_default();
                    d.apply(bytes).expect("frame applies");
                    // An avatar that leaves the frames leaves its expression too.
                    let ids: Vec<u32> = d.entities().map(|r| r.id).collect();
                    self.held
                        .entry(*session)
                        .or_default()
                        .retain(|e, _| ids.contains(e));
                }
                Outbound::Expressions {
                    session,
                    full,
                    states,
                    ..
                } => {
                    *self.messages.entry(*session).or_default() += 1;
                    let held = self.held.entry(*session).or_default();
                    if *full {
                        held.clear();
                    }
                    for (e, x) in states {
                        if x.is_neutral() {
                            held.remove(e);
                        } else {
                            held.insert(*e, *x);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    fn held(&self, s: SessionId) -> BTreeMap<u32, Expression> {
        self.held.get(&s).cloned().unwrap_or_default()
    }
}

fn steps(room: &mut Room, now: &mut u64, n: usize, clients: &mut Clients) -> Vec<Outbound> {
    let mut all = Vec::new();
    for _ in 0..n {
        let mut out = Vec::new();
        *now += 20;
        room.advance(crate::test_support::ms(*now), &mut out);
        clients.feed(&out);
        all.extend(out);
    }
    all
}

fn room_of(n: u64, cfg: RoomConfig) -> (Room, u64, Clients) {
    let mut room = Room::new("r", cfg);
    for s in 1..=n {
        room.join_member(s, format!("0x{s}"), 0);
    }
    let mut clients = Clients::default();
    let mut now = 0;
    steps(&mut room, &mut now, 5, &mut clients);
    (room, now, clients)
}

fn expr(id: u32, bp: u32) -> Input {
    Input::Expression {
        expression_id: id,
        intensity_bp: bp,
    }
}

fn x(id: u32, bp: u16) -> Expression {
    Expression {
        id,
        intensity_bp: bp,
    }
}

#[test]
fn the_others_get_a_members_quantized_expression_and_its_return_to_neutral() {
    let (mut room, mut now, mut clients) = room_of(3, RoomConfig::default());
    let a = room.entity_of(1).unwrap();
    room.input(1, expr(7, 7349));
    steps(&mut room, &mut now, 2, &mut clients);
    assert_eq!(room.expression_of(1), Some(x(7, 7300)));
    for s in [2, 3] {
        assert_eq!(clients.held(s).get(&a), Some(&x(7, 7300)), "viewer {s}");
    }
    assert!(
        clients.held(1).is_empty(),
        "nobody is told its own expression"
    );
    // Nothing changes: no more messages.
    let before = clients.messages.clone();
    steps(&mut room, &mut now, 10, &mut clients);
    assert_eq!(clients.messages, before);
    room.input(1, expr(0, 0));
    steps(&mut room, &mut now, 2, &mut clients);
    for s in [2, 3] {
        assert!(clients.held(s).is_empty(), "viewer {s}: back to neutral");
    }
}

#[test]
fn messages_follow_the_rooms_expression_rate() {
    let cfg = RoomConfig {
        expression_hz: 10,
        ..RoomConfig::default()
    };
    let (mut room, mut now, mut clients) = room_of(2, cfg);
    let before = clients.messages.get(&2).copied().unwrap_or(0);
    // 1 s of a new expression every tick: at most 10 messages.
    for i in 0..50 {
        room.input(1, expr(1, 100 + 100 * (i % 50)));
        steps(&mut room, &mut now, 1, &mut clients);
    }
    let n = clients.messages[&2] - before;
    assert!((9..=10).contains(&n), "{n} messages in 1 s at 10 Hz");
    let off = RoomConfig {
        expression_hz: 0,
        ..RoomConfig::default()
    };
    let (mut room, mut now, mut clients) = room_of(2, off);
    room.input(1, expr(1, 5000));
    steps(&mut room, &mut now, 20, &mut clients);
    assert!(
        clients.messages.is_empty(),
        "expression_hz 0: the channel is off"
    );
}

#[test]
fn only_viewers_who_see_the_avatar_hear_and_blocks_apply_at_once() {
    // Interest cap 1: member 3 (spawned farther from 1) sees 2, not 1.
    let cfg = RoomConfig {
        interest_cap: 1,
        ..RoomConfig::default()
    };
    let (mut room, mut now, mut clients) = room_of(3, cfg);
    let a = room.entity_of(1).unwrap();
    room.input(1, expr(4, 2000));
    steps(&mut room, &mut now, 3, &mut clients);
    for s in [2, 3] {
        let sees = clients.frames[&s].get(a).is_some();
        assert_eq!(
            clients.held(s).contains_key(&a),
            sees,
            "viewer {s} hears 1's expression exactly when it sees 1"
        );
    }
    // A block: the blocked pair hear nothing of each other from the next pass on.
    let (mut room, mut now, mut clients) = room_of(2, RoomConfig::default());
    let a = room.entity_of(1).unwrap();
    room.input(
        2,
        Input::Block {
            seq: 1,
            op: Some(BlockOp::Block),
            target_entity: a,
            target_wallet: String::new(),
        },
    );
    steps(&mut room, &mut now, 1, &mut clients);
    room.input(1, expr(4, 2000));
    let out = steps(&mut room, &mut now, 10, &mut clients);
    assert!(
        !out.iter()
            .any(|o| matches!(o, Outbound::Expressions { session: 2, .. })),
        "{out:?}"
    );
}

#[test]
fn a_keyframe_brings_a_full_message_with_everything() {
    let (mut room, mut now, mut clients) = room_of(3, RoomConfig::default());
    room.input(1, expr(2, 500));
    room.input(3, expr(9, 10_000));
    steps(&mut room, &mut now, 3, &mut clients);
    let held = clients.held(2);
    assert_eq!(held.len(), 2);
    room.request_keyframe(2);
    let out = steps(&mut room, &mut now, 5, &mut clients);
    let key_at = out
        .iter()
        .position(|o| {
            matches!(
                o,
                Outbound::Frame {
                    session: 2,
                    keyframe: true,
                    ..
                }
            )
        })
        .expect("a keyframe");
    let full_at = out
        .iter()
        .position(|o| {
            matches!(o, Outbound::Expressions { session: 2, full: true, states, .. } if states.len() == 2)
        })
        .expect("a full message with both states");
    assert!(key_at < full_at);
    assert_eq!(clients.held(2), held);
}

#[test]
fn a_tight_expression_budget_delays_but_loses_nothing() {
    let cfg = RoomConfig {
        expression_budget_bytes_per_s: 1_200, // 24 B per message at 50 Hz
        ..RoomConfig::default()
    };
    let (mut room, mut now, mut clients) = room_of(12, cfg);
    for s in 2..=12 {
        room.input(s, expr(s as u32, 100 * s as u32));
    }
    steps(&mut room, &mut now, 1, &mut clients);
    assert!(
        clients.held(1).len() < 11,
        "not everything fits one message"
    );
    steps(&mut room, &mut now, 20, &mut clients);
    let held = clients.held(1);
    assert_eq!(held.len(), 11);
    for s in 2..=12u64 {
        let e = room.entity_of(s).unwrap();
        assert_eq!(held[&e], x(s as u32, 100 * s as u16));
    }
}
