//! A walker: a `plaza-client` session that walks the standard random walk.
//!
//! Every 100 ms of input the heading drifts by up to ±0.3 rad and the speed by up to
//! ±0.5 m/s (0 to `max_speed`, at most 6 m/s and below the room's limit); now and then it stops
//! (1–3 s) and starts again (1–4 m/s), and every 8–15 s it asks the room for a teleport to one
//! of its requestable spawn points. Moves go at 20 Hz (the gateway's default
//! `max_movement_hz`). The position is integrated piecewise over the velocity in effect (an
//! input changes the velocity from its own instant on, between two moves), so each move reports
//! where the avatar is and the velocity it moves with from there — what a game client that
//! integrates every frame sends. Near the room's bounds it turns towards the centre; a
//! correction (geometry) is adopted and turns it around.

use std::time::{Duration, Instant};

use plaza_client::Event;
use plaza_client::tokio::{Client, ClientOptions, Polled};
use plaza_proto::pb::{self, client_envelope::Body as CBody};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// What a walker did.
#[derive(Debug, Default, Clone)]
pub(crate) struct WalkerReport {
    /// Entity.
    pub(crate) entity: u32,
    /// Moves sent.
    pub(crate) moves: u64,
    /// Corrections received.
    pub(crate) corrections: u64,
    /// Teleports requested.
    pub(crate) teleport_requests: u64,
    /// Teleported events for this walker.
    pub(crate) teleported: u64,
}

/// Walks until `until`.
pub(crate) async fn walk(
    url: String,
    room: String,
    seed: u64,
    until: Instant,
) -> anyhow::Result<WalkerReport> {
    let mut opts = ClientOptions::new(url).room(room);
    opts.connection.client_name = format!("plaza-felt-walker-{seed}");
    let mut c = Client::connect(opts).await?;
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut rep = WalkerReport::default();
    // Wait for Joined.
    let info = loop {
        match c.next(Some(Instant::now() + Duration::from_secs(10))).await {
            Polled::Event(Event::Joined(j)) => break j,
            Polled::Event(_) => {}
            Polled::Deadline | Polled::Ended => anyhow::bail!("walker {seed}: no Joined"),
        }
    };
    rep.entity = info.entity;
    let desc = info.description.clone().unwrap_or_default();
    let limit = desc
        .limits
        .as_ref()
        .map_or(12.0, |l| f64::from(l.max_speed_mps));
    let max_speed = 6.0f64.min(limit * 0.9);
    let (bmin, bmax) = match (desc.bounds_min, desc.bounds_max) {
        (Some(a), Some(b)) => (
            [f64::from(a.x), f64::from(a.z)],
            [f64::from(b.x), f64::from(b.z)],
        ),
        _ => ([-30.0, -30.0], [30.0, 30.0]),
    };
    let dests: Vec<String> = desc
        .destinations
        .iter()
        .filter(|d| d.requestable)
        // On the floor: a walker on the stage would walk off its edge.
        .filter(|d| d.position.as_ref().is_none_or(|p| p.y.abs() < 0.01))
        .map(|d| d.name.clone())
        .collect();
    let mut pos = [
        f64::from(info.spawn[0]),
        f64::from(info.spawn[1]),
        f64::from(info.spawn[2]),
    ];
    let mut heading: f64 = rng.random_range(0.0..std::f64::consts::TAU);
    let mut speed: f64 = rng.random_range(1.0..4.0f64).min(max_speed);
    let mut stopped_until: Option<Instant> = None;
    let mut next_teleport = Instant::now() + Duration::from_secs_f64(rng.random_range(8.0..15.0));
    let start = Instant::now();
    let mut next_move = Instant::now();
    let mut next_input = Instant::now() + Duration::from_millis(100);
    // Local time up to which `pos` is integrated.
    let mut integrated_t = c.now();
    let mut first = true;
    let velocity = |speed: f64, heading: f64, stopped: bool| {
        let v = if stopped { 0.0 } else { speed };
        [v * heading.sin(), 0.0, v * heading.cos()]
    };
    while Instant::now() < until {
        let wake = next_move.min(next_input).min(until);
        match c.next(Some(wake)).await {
            Polled::Event(Event::Correction(k)) => {
                rep.corrections += 1;
                if let Some(p) = k.position {
                    pos = [f64::from(p.x), f64::from(p.y), f64::from(p.z)];
                }
                integrated_t = c.now();
                // Blocked by geometry: stop, turn round, start again (a stop and a start).
                heading += std::f64::consts::PI + rng.random_range(-0.5..0.5);
                stopped_until = Some(Instant::now() + Duration::from_millis(600));
                continue;
            }
            Polled::Event(Event::Teleported(t)) if t.entity_id == rep.entity => {
                rep.teleported += 1;
                if let Some(p) = t.position {
                    pos = [f64::from(p.x), f64::from(p.y), f64::from(p.z)];
                }
                integrated_t = c.now();
                continue;
            }
            Polled::Event(Event::Joined(j)) => {
                rep.entity = j.entity;
                continue;
            }
            Polled::Event(_) => continue,
            Polled::Ended => anyhow::bail!("walker {seed}: connection ended"),
            Polled::Deadline => {}
        }
        let now = Instant::now();
        if now >= next_input {
            next_input += Duration::from_millis(100);
            // Up to this instant the avatar moved with the velocity before the input.
            if !first {
                let t = c.now();
                let vel = velocity(speed, heading, stopped_until.is_some());
                let dt = (t - integrated_t).clamp(0.0, 0.2);
                pos[0] += vel[0] * dt;
                pos[2] += vel[2] * dt;
                integrated_t = t;
            }
            // The standard random walk, per 100 ms input.
            match stopped_until {
                Some(t) if now < t => {}
                Some(_) => {
                    stopped_until = None;
                    speed = rng.random_range(1.0..4.0f64).min(max_speed);
                }
                None => {
                    heading += rng.random_range(-0.3..=0.3);
                    speed = (speed + rng.random_range(-0.5..=0.5)).clamp(0.0, max_speed);
                    if rng.random_bool(0.015) {
                        stopped_until =
                            Some(now + Duration::from_secs_f64(rng.random_range(1.0..3.0)));
                        speed = 0.0;
                    }
                }
            }
            // Stay inside: near the walls, steer towards the centre at the walk's own rate
            // (at most 0.3 rad per input), never an instant turn.
            let margin = 8.0;
            if pos[0] < bmin[0] + margin
                || pos[0] > bmax[0] - margin
                || pos[2] < bmin[1] + margin
                || pos[2] > bmax[1] - margin
            {
                let cx = (bmin[0] + bmax[0]) / 2.0 - pos[0];
                let cz = (bmin[1] + bmax[1]) / 2.0 - pos[2];
                let want = cx.atan2(cz);
                let mut d = (want - heading).rem_euclid(std::f64::consts::TAU);
                if d > std::f64::consts::PI {
                    d -= std::f64::consts::TAU;
                }
                heading += d.clamp(-0.3, 0.3);
            }
            if now >= next_teleport
                && !dests.is_empty()
                && now.duration_since(start).as_secs_f64() > 3.0
            {
                next_teleport = now + Duration::from_secs_f64(rng.random_range(8.0..15.0));
                let d = dests[rng.random_range(0..dests.len())].clone();
                rep.teleport_requests += 1;
                c.connection_mut()
                    .send(CBody::Teleport(pb::TeleportRequest { destination: d }));
            }
        }
        if now >= next_move {
            next_move += Duration::from_millis(50);
            if next_move < now {
                next_move = now + Duration::from_millis(50);
            }
            let t = c.now();
            let dt = (t - integrated_t).clamp(0.0, 0.2);
            integrated_t = t;
            let stopped = stopped_until.is_some();
            let v = if stopped { 0.0 } else { speed };
            let vel = velocity(speed, heading, stopped);
            if !first {
                pos[0] += vel[0] * dt;
                pos[2] += vel[2] * dt;
            }
            let m = pb::Movement {
                position: Some(pb::Vec3 {
                    x: pos[0] as f32,
                    y: pos[1] as f32,
                    z: pos[2] as f32,
                }),
                velocity: Some(pb::Vec3 {
                    x: vel[0] as f32,
                    y: vel[1] as f32,
                    z: vel[2] as f32,
                }),
                rotation_y: heading.to_degrees() as f32,
                movement_kind: if v > 0.1 {
                    pb::MovementKind::Walk as i32
                } else {
                    pb::MovementKind::Idle as i32
                },
                anim_flags: pb::AnimFlag::Grounded as u32,
                is_instant: first,
                timestamp: t,
                ..Default::default()
            };
            first = false;
            if c.connection_mut().send_movement(m).is_some() {
                rep.moves += 1;
            }
        }
    }
    c.close().await;
    Ok(rep)
}
