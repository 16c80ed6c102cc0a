//! A repeatable driver for instruction counts (`valgrind --tool=callgrind`): one room of the
//! default plaza with `N` avatars walking a jittery walk (heading ±0.3 rad, speed 0–6 m/s per
//! 100 ms input, each avatar sending at 10 Hz, a fifth of them per 50 Hz step), `T` steps.
//! Prints the final state hash so two builds can be compared for identical behaviour.
//!
//! Run: `cargo run --release -p plaza-physics --example room_ticks -- 50 2500`.

use plaza_physics::{MoveClaim, PhysicsConfig, RoomDefinition, RoomPhysics};

/// A small deterministic generator (xorshift64*), so every run walks the same.
struct Rng(u64);

impl Rng {
    fn next_f32(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (x >> 40) as f32 / (1u64 << 24) as f32
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(50);
    let steps: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2500);
    let def = RoomDefinition::default_plaza();
    let mut room = RoomPhysics::new(&def, PhysicsConfig::default());
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // (position, heading, speed) per avatar.
    let mut walkers = Vec::new();
    for e in 0..n {
        let at = [
            -28.0 + 56.0 * rng.next_f32(),
            0.0,
            -28.0 + 56.0 * rng.next_f32(),
        ];
        let used = room.add_avatar(e, at);
        let claim = MoveClaim {
            position: used,
            velocity: [0.0; 3],
            dt_s: 0.1,
            client_time_ms: 0,
            movement_kind: 1,
            is_instant: true,
        };
        let _ = room.validate_and_move(e, claim, 0);
        walkers.push((used, rng.next_f32() * std::f32::consts::TAU, 3.0f32));
    }
    let (mut accepted, mut refused, mut blocked) = (0u64, 0u64, 0u64);
    for step in 1..=steps {
        let now_ms = step * 20;
        let phase = (step % 5) as usize;
        for (e, w) in walkers.iter_mut().enumerate().skip(phase).step_by(5) {
            w.1 += (rng.next_f32() - 0.5) * 0.6;
            w.2 = (w.2 + (rng.next_f32() - 0.5)).clamp(0.0, 6.0);
            let vel = [w.1.cos() * w.2, 0.0, w.1.sin() * w.2];
            let mut to = [w.0[0] + vel[0] * 0.1, w.0[1], w.0[2] + vel[2] * 0.1];
            // Turn back at the walls of the plaza.
            if to[0].abs() > 30.0 || to[2].abs() > 30.0 {
                w.1 += std::f32::consts::PI;
                to = w.0;
            }
            let claim = MoveClaim {
                position: to,
                velocity: vel,
                dt_s: 0.1,
                client_time_ms: now_ms,
                movement_kind: 1,
                is_instant: false,
            };
            match room.validate_and_move(e as u32, claim, now_ms) {
                Ok(out) => {
                    accepted += 1;
                    blocked += u64::from(out.blocked);
                    w.0 = out.position;
                }
                Err(rej) => {
                    refused += 1;
                    w.0 = rej.authoritative;
                }
            }
        }
        room.step();
    }
    // What the room core observes: avatar positions and every prop's state.
    let mut seen = 0xcbf2_9ce4_8422_2325u64;
    let mut mix = |x: u32| {
        for b in x.to_le_bytes() {
            seen = (seen ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for (id, p) in room.avatars() {
        mix(id);
        p.iter().for_each(|c| mix(c.to_bits()));
    }
    for (id, s) in room.prop_states() {
        if std::env::var_os("ROOM_TICKS_PROPS").is_some() {
            println!(
                "prop {id} {:?} {:?} at_rest {}",
                s.position, s.velocity, s.at_rest
            );
        }
        mix(id);
        let floats = s.position.iter().chain(&s.rotation).chain(&s.velocity);
        floats.for_each(|c| mix(c.to_bits()));
        mix(s.holder.unwrap_or(u32::MAX));
        mix(u32::from(s.at_rest));
    }
    println!(
        "avatars {n} steps {steps} accepted {accepted} blocked {blocked} refused {refused} \
         observed {seen:016x} state_hash {:016x}",
        room.state_hash()
    );
}
