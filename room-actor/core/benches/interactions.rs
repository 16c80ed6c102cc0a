//! Cost of one room step with interaction traffic: every member moves each tick, and each tick
//! a few members grab, place or throw props, ask for and answer consent, emote and send scene
//! actions; plus the cost of one broadcast (props included in every frame).
//!
//! Run: `cargo bench -p plaza-room-core --bench interactions`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use plaza_proto::quant::Pose;
use plaza_room_core::consent::ConsentOp;
use plaza_room_core::emotes::EmoteRequest;
use plaza_room_core::interactions::{InteractionKind, InteractionRequest};
use plaza_room_core::scene::SceneOp;
use plaza_room_core::{Input, MoveInput, Outbound, Room, RoomConfig};

/// A room with `n` members near the plaza's crates, each placed.
fn busy_room(n: u64) -> (Room, Vec<[f32; 3]>, u64) {
    let mut cfg = RoomConfig::default();
    cfg.definition.spawn = [5.5, 0.0, 3.0];
    cfg.reach_m = 4.0;
    let mut room = Room::new("bench", cfg);
    for s in 1..=n {
        room.join(s);
    }
    let mut out = Vec::new();
    room.step(20, &mut out);
    let mut spawn = vec![[0.0; 3]; n as usize + 1];
    for o in &out {
        if let Outbound::Joined {
            session, spawn: p, ..
        } = o
        {
            spawn[*session as usize] = *p;
        }
    }
    for s in 1..=n {
        room.input(
            s,
            Input::Scene {
                seq: 1,
                scene: "game".into(),
                op: SceneOp::Join,
            },
        );
    }
    out.clear();
    room.step(40, &mut out);
    (room, spawn, 2)
}

fn traffic(room: &mut Room, spawn: &[[f32; 3]], n: u64, t: u64) {
    for s in 1..=n {
        let p = spawn[s as usize];
        let dx = if t.is_multiple_of(2) { 0.0 } else { 0.08 };
        room.input(
            s,
            Input::Move(MoveInput {
                seq: t as u32,
                pose: Pose {
                    position: [p[0] + dx, p[1], p[2]],
                    velocity: [1.0, 0.0, 0.0],
                    movement_kind: 1,
                    ..Pose::default()
                },
                timestamp_s: t as f64 * 0.02,
                is_instant: false,
                timestamp_period_s: None,
            }),
        );
    }
    let s = t % n + 1;
    let other = (t + 1) % n + 1;
    let kind = match t % 3 {
        0 => InteractionKind::Pickup,
        1 => InteractionKind::Place,
        _ => InteractionKind::Throw,
    };
    room.input(
        s,
        Input::Interact {
            seq: t as u32,
            request: InteractionRequest {
                kind,
                prop_id: (t % 2 + 1) as u32,
                room: None,
                position: [5.5, 0.6, 4.6],
                velocity: [1.0, 2.0, 0.0],
            },
        },
    );
    room.input(
        s,
        Input::Consent {
            seq: t as u32,
            op: Some(ConsentOp::Request),
            kind: "follow".into(),
            target_entity: other as u32,
            consent_id: 0,
        },
    );
    room.input(
        other,
        Input::Consent {
            seq: t as u32,
            op: Some(ConsentOp::Consent),
            kind: String::new(),
            target_entity: 0,
            consent_id: t / 2,
        },
    );
    room.input(
        other,
        Input::Emote {
            seq: t as u32,
            request: EmoteRequest {
                emote_id: "wave".into(),
                timestamp_ms: t,
                stop: t.is_multiple_of(2),
            },
        },
    );
    room.input(
        s,
        Input::Scene {
            seq: t as u32,
            scene: "game".into(),
            op: SceneOp::Action(vec![t as u8; 16]),
        },
    );
}

fn bench(c: &mut Criterion) {
    for n in [30u64, 256] {
        let (mut room, spawn, mut t) = busy_room(n);
        let mut out = Vec::new();
        c.bench_function(&format!("simulate_with_interactions_{n}_members"), |b| {
            b.iter(|| {
                t += 1;
                traffic(&mut room, &spawn, n, t);
                out.clear();
                room.simulate(t * 20, &mut out);
                black_box(out.len())
            })
        });
        c.bench_function(&format!("broadcast_with_props_{n}_members"), |b| {
            b.iter(|| {
                out.clear();
                room.broadcast(&mut out);
                black_box(out.len())
            })
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
