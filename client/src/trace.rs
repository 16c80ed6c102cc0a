//! The shared smoothing trace: what a remote avatar's smoother is fed and what it must render.
//!
//! [`generate`] builds it from a scripted walker (stand, walk a curve, jump, run, a teleport
//! while walking, head IK and pointing, a stop) as the room would send it (20 Hz broadcasts of a
//! 50 Hz room, poses quantized by [`plaza_proto::quant::quantize`]) over a link with delay and
//! jitter, two stalls (a burst that needs catch-up; one right after the teleport), 0.4 s of frames
//! lost mid-fall, and reordered and duplicated deliveries. [`replay`] runs one case through a [`Smoother`] rendering at 60 Hz.
//! `cargo run -p plaza-client --example smoothing_trace` writes `fixtures/smoothing/trace.json`;
//! the Rust test and the TypeScript SDK's vitest both replay the committed file and compare.

use plaza_proto::quant::{Pose, QuantPose, quantize};
use serde::{Deserialize, Serialize};

use crate::smoothing::{
    Extrapolation, Phase, Sample, Smoother, SmoothingConfig, SmoothingStats, Spline,
};

/// The committed trace's path, relative to the repository root.
pub const TRACE_PATH: &str = "fixtures/smoothing/trace.json";

/// The whole file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    /// What the file is.
    pub about: String,
    /// The room's tick rate: a sample's server time is `pose_tick / tick_hz`.
    pub tick_hz: u32,
    /// Render times: `render_start_s + i * render_step_s` for `i in 0..render_count`.
    pub render_start_s: f64,
    /// Render step, seconds.
    pub render_step_s: f64,
    /// Number of render times.
    pub render_count: u32,
    /// Deliveries in arrival order (ties in file order).
    pub inputs: Vec<Input>,
    /// The same inputs through different settings.
    pub cases: Vec<Case>,
}

/// One delivery of a frame record's pose.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Input {
    /// Local arrival time, seconds.
    pub arrival_s: f64,
    /// The tick the pose was measured at.
    pub pose_tick: u32,
    /// The record's pose as the decoder holds it.
    pub pose: WirePose,
    /// The record came with a `Teleported` event (the server placed the avatar).
    pub teleport: bool,
}

/// [`QuantPose`] with JSON field names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WirePose {
    /// Millimetres.
    pub position_mm: [i32; 3],
    /// Steps of 0.05 m/s.
    pub velocity: [i16; 3],
    /// Steps of 360/512°.
    pub yaw: u16,
    /// 0 idle, 1 walk, 2 jog, 3 run.
    pub movement_kind: u8,
    /// AnimFlag bits.
    pub anim_flags: u16,
    /// Head IK yaw, pitch in whole degrees.
    pub head: Option<[i16; 2]>,
    /// Point-at world point, millimetres.
    pub point_at_mm: Option<[i32; 3]>,
}

impl From<QuantPose> for WirePose {
    fn from(q: QuantPose) -> Self {
        Self {
            position_mm: q.position_mm,
            velocity: q.velocity,
            yaw: q.yaw,
            movement_kind: q.movement_kind,
            anim_flags: q.anim_flags,
            head: q.head,
            point_at_mm: q.point_at_mm,
        }
    }
}

impl From<WirePose> for QuantPose {
    fn from(w: WirePose) -> Self {
        Self {
            position_mm: w.position_mm,
            velocity: w.velocity,
            yaw: w.yaw,
            movement_kind: w.movement_kind,
            anim_flags: w.anim_flags,
            head: w.head,
            point_at_mm: w.point_at_mm,
        }
    }
}

/// One setting and what it renders.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Case {
    /// Short name.
    pub name: String,
    /// The smoother's parameters.
    pub config: SmoothingConfig,
    /// The rendered pose at each render time.
    pub outputs: Vec<Output>,
    /// The smoother's counters after the last render time.
    pub stats: SmoothingStats,
}

/// The rendered pose at one render time.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Output {
    /// Local time, seconds.
    pub now_s: f64,
    /// What the pose is doing.
    pub phase: Phase,
    /// Whether this render placed the avatar.
    pub placed: bool,
    /// Position, metres.
    pub position: [f64; 3],
    /// Yaw, degrees.
    pub yaw_deg: f64,
    /// Head IK yaw, pitch in degrees.
    pub head: Option<[f64; 2]>,
    /// Point-at world point, metres.
    pub point_at: Option<[f64; 3]>,
    /// The render clock, seconds.
    pub render_t: f64,
}

/// The render times of a trace.
pub fn render_times(tr: &Trace) -> impl Iterator<Item = f64> + '_ {
    (0..tr.render_count).map(|i| tr.render_start_s + f64::from(i) * tr.render_step_s)
}

/// Runs the trace's inputs through a smoother with `config`, rendering at the trace's times:
/// before each render every input that arrived at or before it is pushed, in file order.
pub fn replay(tr: &Trace, config: SmoothingConfig) -> (Vec<Output>, SmoothingStats) {
    let mut s = Smoother::new(config);
    let mut next = 0;
    let mut out = Vec::with_capacity(tr.render_count as usize);
    for now in render_times(tr) {
        while let Some(i) = tr.inputs.get(next).filter(|i| i.arrival_s <= now) {
            let q = QuantPose::from(i.pose);
            s.push(
                Sample::from_quant(&q, i.pose_tick, tr.tick_hz, i.teleport),
                i.arrival_s,
            );
            next += 1;
        }
        let r = match s.advance(now) {
            Some(r) => *r,
            None => *s.rendered(),
        };
        out.push(Output {
            now_s: now,
            phase: r.phase,
            placed: r.placed,
            position: r.position,
            yaw_deg: r.yaw_deg,
            head: r.head,
            point_at: r.point_at,
            render_t: r.render_t,
        });
    }
    (out, *s.stats())
}

/// The cases of the trace: the defaults, seed 003's capped extrapolation with projective
/// velocity blending, and straight lines.
pub fn cases() -> Vec<(&'static str, SmoothingConfig)> {
    let d = SmoothingConfig::default();
    vec![
        ("default", d),
        (
            "capped_velocity_blending",
            SmoothingConfig {
                extrapolation: Extrapolation::CAPPED,
                spline: Spline::VelocityBlending,
                ..d
            },
        ),
        (
            "linear",
            SmoothingConfig {
                spline: Spline::Linear,
                ..d
            },
        ),
    ]
}

/// xorshift64*: a fixed, dependency-free sequence for the link's jitter.
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

const TICK_HZ: u32 = 50;
const TELEPORT_T: f64 = 5.5;

/// The scripted walker's true pose at server time `t`: stand, walk a curve, jump, run, teleport
/// while walking, stop.
fn walker(t: f64) -> Pose {
    let grounded = 1u16;
    let mut p = Pose {
        anim_flags: grounded,
        ..Pose::default()
    };
    let set = |p: &mut Pose, pos: [f64; 3], vel: [f64; 3], kind: u8| {
        p.position = pos.map(|v| v as f32);
        p.velocity = vel.map(|v| v as f32);
        p.movement_kind = kind;
        if vel[0] != 0.0 || vel[2] != 0.0 {
            p.yaw_deg = vel[0].atan2(vel[2]).to_degrees() as f32;
        }
    };
    if t < 1.0 {
        // Standing at the origin.
        set(&mut p, [0.0; 3], [0.0; 3], 0);
    } else if t < 3.0 {
        // A walk along a quarter circle of radius 4 m at 2 m/s.
        let w = 2.0 / 4.0;
        let a = (t - 1.0) * w;
        let pos = [4.0 * a.sin(), 0.0, 4.0 - 4.0 * a.cos()];
        let vel = [2.0 * a.cos(), 0.0, 2.0 * a.sin()];
        set(&mut p, pos, vel, 1);
    } else {
        let a = 2.0 * 0.5;
        let x0 = [4.0 * f64::sin(a), 0.0, 4.0 - 4.0 * f64::cos(a)];
        let dir = [a.cos(), 0.0, a.sin()];
        if t < 3.4 {
            // A jump: airborne, jump count 1.
            let u = t - 3.0;
            let vy = 4.0 - 20.0 * u;
            let y = 4.0 * u - 10.0 * u * u;
            set(
                &mut p,
                [x0[0] + 2.0 * dir[0] * u, y, x0[2] + 2.0 * dir[2] * u],
                [2.0 * dir[0], vy, 2.0 * dir[2]],
                1,
            );
            p.anim_flags = 0x0100;
        } else if t < TELEPORT_T {
            // Landed; run at 5 m/s.
            let x1 = [x0[0] + 0.8 * dir[0], 0.0, x0[2] + 0.8 * dir[2]];
            let u = t - 3.4;
            set(
                &mut p,
                [x1[0] + 5.0 * dir[0] * u, 0.0, x1[2] + 5.0 * dir[2] * u],
                [5.0 * dir[0], 0.0, 5.0 * dir[2]],
                3,
            );
            p.anim_flags = grounded | 0x0100;
        } else if t < 7.5 {
            // Teleported to (30, 0, 30) walking along -x at 1.5 m/s; from 6 s looking around and
            // pointing ahead.
            let u = t - TELEPORT_T;
            set(&mut p, [30.0 - 1.5 * u, 0.0, 30.0], [-1.5, 0.0, 0.0], 1);
            if t >= 6.0 {
                let u = t - 6.0;
                p.head = Some([(40.0 * (3.0 * u).sin()) as f32, (10.0 * u) as f32]);
                p.point_at = Some([(25.0 - 1.5 * u) as f32, 1.0, 30.0]);
            }
        } else {
            // Stopped at x = 27.12, at 7.42 s, by geometry: the blocked move slid 4 cm aside
            // (z = 30.04). The frame of 7.44 s still carries the walk on along its velocity
            // (the room's lead) to x = 27.09, past the stop and off its line by less than one
            // send interval of travel; the smoother moves it back (`unled`).
            set(&mut p, [27.12, 0.0, 30.04], [0.0; 3], 0);
            p.head = Some([0.0, 15.0]);
        }
    }
    p
}

/// Builds the trace: inputs and every case's outputs.
pub fn generate() -> Trace {
    let mut rng = Rng(0x5eed_0013_0014_cafe);
    let mut sent: Vec<Input> = Vec::new();
    let mut last: Option<QuantPose> = None;
    let mut teleported = false;
    // 20 Hz broadcasts of a 50 Hz room: pose ticks 0, 2, 5, 7, 10, …
    for k in 0..170u32 {
        let tick = k * 5 / 2;
        let t = f64::from(tick) / f64::from(TICK_HZ);
        let q = quantize(&walker(t));
        let teleport = t >= TELEPORT_T && !teleported;
        if teleport {
            teleported = true;
        } else if last == Some(q) {
            // Unchanged records are not in a frame's changed list: no sample.
            continue;
        }
        last = Some(q);
        // 0.4 s of frames lost while falling back from the jump: extrapolation (clamped at the
        // floor), then a gap snap.
        if (3.3..3.7).contains(&t) {
            continue;
        }
        let mut arrival = t + 0.06 + 0.04 * rng.unit();
        // A stall: frames from 2.0 s held back and delivered together from 2.25 s (catch-up).
        if t >= 2.0 && arrival < 2.25 {
            arrival = 2.25 + 0.001 * (t - 2.0);
        }
        // A stall right after the teleport: the render reaches the teleport and holds there (no
        // extrapolation from a placement) until the frames after it arrive at 6.1 s.
        if t > TELEPORT_T && arrival < 6.1 {
            arrival = 6.1 + 0.001 * (t - TELEPORT_T);
        }
        // The stop's frame comes 0.165 s late, while the render clock is between 7.40 and 7.44
        // s: it unleads the segment being shown, and the correction runs into the stop with the
        // segment (`Smoother::blend_into_stop`) instead of carrying the lead past it.
        if tick == 375 {
            arrival = t + 0.165;
        }
        sent.push(Input {
            arrival_s: arrival,
            pose_tick: tick,
            pose: q.into(),
            teleport,
        });
    }
    // Reordering: a few neighbours swap arrival times.
    for i in [12usize, 30, 47, 71] {
        if i + 1 < sent.len() {
            let a = sent[i].arrival_s;
            sent[i].arrival_s = sent[i + 1].arrival_s;
            sent[i + 1].arrival_s = a;
        }
    }
    // Duplicates: every 11th delivery arrives a second time 15 ms later.
    let dups: Vec<Input> = sent
        .iter()
        .step_by(11)
        .map(|i| Input {
            arrival_s: i.arrival_s + 0.015,
            ..i.clone()
        })
        .collect();
    sent.extend(dups);
    // Arrival order; the sort is stable, so ties keep send order.
    sent.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
    let mut tr = Trace {
        about: "Shared remote-avatar smoothing trace: plaza-client (Rust) and @plaza/sdk (TypeScript) \
                replay `inputs` (pushed before each render time whose value is >= arrival_s, in file order; \
                server time = pose_tick / tick_hz, poses as in plaza_proto::quant) through each case's \
                config, rendering at render_start_s + i * render_step_s, and must produce `outputs` \
                (within 1e-4 m). Regenerate: cargo run -p plaza-client --example smoothing_trace."
            .to_string(),
        tick_hz: TICK_HZ,
        render_start_s: 0.0,
        render_step_s: 1.0 / 60.0,
        render_count: 9 * 60,
        inputs: sent,
        cases: Vec::new(),
    };
    for (name, config) in cases() {
        let (outputs, stats) = replay(&tr, config);
        tr.cases.push(Case {
            name: name.to_string(),
            config,
            outputs,
            stats,
        });
    }
    tr
}

fn j<T: Serialize + ?Sized>(v: &T) -> Result<String, serde_json::Error> {
    serde_json::to_string(v)
}

/// The file's text: JSON with one input or output per line.
pub fn to_text(tr: &Trace) -> Result<String, serde_json::Error> {
    use std::fmt::Write as _;
    let mut s = String::new();
    let lines = |items: Vec<String>| items.join(",\n    ");
    let inputs: Result<Vec<_>, _> = tr.inputs.iter().map(j).collect();
    // Writing into a String cannot fail.
    let _ = write!(
        s,
        "{{\n  \"about\": {},\n  \"tick_hz\": {},\n  \"render_start_s\": {},\n  \"render_step_s\": {},\n  \"render_count\": {},\n  \"inputs\": [\n    {}\n  ],\n  \"cases\": [",
        j(&tr.about)?,
        tr.tick_hz,
        j(&tr.render_start_s)?,
        j(&tr.render_step_s)?,
        tr.render_count,
        lines(inputs?),
    );
    for (n, c) in tr.cases.iter().enumerate() {
        let outputs: Result<Vec<_>, _> = c.outputs.iter().map(j).collect();
        let _ = write!(
            s,
            "{}\n   {{\n   \"name\": {},\n   \"config\": {},\n   \"stats\": {},\n   \"outputs\": [\n    {}\n   ]}}",
            if n == 0 { "" } else { "," },
            j(&c.name)?,
            j(&c.config)?,
            j(&c.stats)?,
            lines(outputs?),
        );
    }
    s.push_str("\n  ]\n}\n");
    Ok(s)
}
