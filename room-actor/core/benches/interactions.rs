//! Cost of one room step with interaction traffic: every member moves each tick, and each tick
//! a few members grab, place or throw props, ask for and answer consent, emote and send scene
//! actions; plus the cost of one broadcast (props included in every frame).
//!
//! The room runs the production schedule: the shell's wakes (every 20 ms step and every 50 ms
//! broadcast, each on its own grid) through `Room::advance_with`; a step is timed up to its
//! `on_step` call, a broadcast from there to the end of the wake.
//!
//! Run: `cargo bench -p plaza-room-core --bench interactions`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use plaza_proto::quant::Pose;
use plaza_room_core::consent::ConsentOp;
use plaza_room_core::emotes::EmoteRequest;
use plaza_room_core::interactions::{InteractionKind, InteractionRequest};
use plaza_room_core::scene::SceneOp;
use plaza_room_core::{Due, Input, MoveInput, Outbound, Room, RoomConfig};

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
    room.advance(Duration::from_millis(20), &mut out);
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
    room.advance(Duration::from_millis(40), &mut out);
    (room, spawn, 2)
}

/// Where the shell's wakes stand: steps and broadcasts run.
struct Wakes {
    steps: u64,
    broadcasts: u64,
}

impl Wakes {
    /// The next wake, this step's traffic first when a step is due; the time of the step and of
    /// the broadcast it ran, if any.
    fn next(
        &mut self,
        room: &mut Room,
        spawn: &[[f32; 3]],
        n: u64,
        out: &mut Vec<Outbound>,
    ) -> (Option<Duration>, Option<Duration>) {
        let (next_step, next_bcast) = ((self.steps + 1) * 20, (self.broadcasts + 1) * 50);
        let now = next_step.min(next_bcast);
        if next_step == now {
            traffic(room, spawn, n, self.steps + 1);
        }
        out.clear();
        let t0 = Instant::now();
        let mut stepped = None;
        let r = room.advance_with(Duration::from_millis(now), Due::Scheduled, out, |_, _| {
            stepped = Some(Instant::now())
        });
        let end = Instant::now();
        black_box(out.len());
        self.steps += r.steps;
        self.broadcasts += u64::from(r.broadcast);
        let step = stepped.map(|t| t - t0);
        let bcast = r.broadcast.then(|| end - stepped.unwrap_or(t0));
        (step, bcast)
    }
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
        let (mut room, spawn, steps) = busy_room(n);
        let mut wakes = Wakes {
            steps,
            broadcasts: 0,
        };
        let mut out = Vec::new();
        // Each measures its own part of the wakes it runs until `iters` of them are timed.
        let mut timed = |iters: u64, broadcast: bool| {
            let (mut total, mut k) = (Duration::ZERO, 0);
            while k < iters {
                let (step, bcast) = wakes.next(&mut room, &spawn, n, &mut out);
                if let Some(d) = if broadcast { bcast } else { step } {
                    total += d;
                    k += 1;
                }
            }
            total
        };
        c.bench_function(&format!("simulate_with_interactions_{n}_members"), |b| {
            b.iter_custom(|iters| timed(iters, false))
        });
        c.bench_function(&format!("broadcast_with_props_{n}_members"), |b| {
            b.iter_custom(|iters| timed(iters, true))
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
