//! Random frame streams of the Rust [`FrameEncoder`], with what the Rust [`FrameDecoder`] made of
//! every frame, as JSON: the input of the TypeScript decoder's cross-check
//! (`sdk/typescript/test/random.test.ts`). Shared by the `random_frames` example (a fresh seed,
//! run by CI before the TypeScript tests) and the `random_frames` test (the committed
//! `fixtures/frames/random.json` is what seed 1 makes).
//!
//! Each stream moves a few dozen entities (avatars and props, random walks with starts and stops,
//! joins, leaves, generation changes, tier changes, head IK and point-at on and off) and an own
//! state of arbitrary f32 bit patterns, under random budgets and check periods, with keyframe
//! requests; after some frames a copy of the frame with one bit flipped is decoded by a copy of
//! the decoder, and its verdict (accepted with a check, or the error's kind) is recorded too.

use std::fmt::Write as _;

use plaza_proto::frame::{
    EncoderConfig, EntityRecord, FrameDecoder, FrameEncoder, FrameError, OwnState, Visible,
};
use plaza_proto::quant::{Pose, QuantPose};

/// xorshift64*: deterministic, dependency-free.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True with probability `p` percent.
    pub(crate) fn pct(&mut self, p: u64) -> bool {
        self.below(100) < p
    }

    /// Uniform in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }
}

struct Mover {
    rec: EntityRecord,
    tier: u8,
    /// Velocity in mm per tick.
    vel_mm: [i32; 3],
}

fn random_pose(rng: &mut Rng) -> QuantPose {
    QuantPose {
        position_mm: [
            rng.range(-200_000, 200_000) as i32,
            rng.range(0, 5_000) as i32,
            rng.range(-200_000, 200_000) as i32,
        ],
        velocity: [0; 3],
        yaw: rng.below(512) as u16,
        movement_kind: rng.below(4) as u8,
        anim_flags: if rng.pct(50) {
            1
        } else {
            rng.below(1024) as u16
        },
        head: rng
            .pct(30)
            .then(|| [rng.range(-90, 90) as i16, rng.range(-60, 60) as i16]),
        point_at_mm: rng.pct(20).then(|| {
            [
                rng.range(-300_000, 300_000) as i32,
                rng.range(-1_000, 9_000) as i32,
                rng.range(-300_000, 300_000) as i32,
            ]
        }),
    }
}

fn random_f32(rng: &mut Rng, old: f32) -> f32 {
    match rng.below(10) {
        0..=3 => old,
        4..=7 => old + (rng.range(-2000, 2000) as f32) * 0.001,
        8 => f32::from_bits(rng.next() as u32),
        _ => 0.0,
    }
}

fn step_own(rng: &mut Rng, own: &mut OwnState) {
    let p = &mut own.pose;
    for v in p.position.iter_mut().chain(p.velocity.iter_mut()) {
        *v = random_f32(rng, *v);
    }
    p.yaw_deg = random_f32(rng, p.yaw_deg);
    if rng.pct(10) {
        p.movement_kind = rng.below(4) as u8;
    }
    if rng.pct(10) {
        p.anim_flags = rng.below(1 << 16) as u16;
    }
    if rng.pct(10) {
        p.head = if p.head.is_some() {
            None
        } else {
            Some([random_f32(rng, 1.0), random_f32(rng, -1.0)])
        };
    } else if let Some(h) = &mut p.head {
        h[0] = random_f32(rng, h[0]);
    }
    if rng.pct(10) {
        p.point_at = if p.point_at.is_some() {
            None
        } else {
            Some([random_f32(rng, 2.0), 1.0, random_f32(rng, -2.0)])
        };
    }
    if rng.pct(70) {
        own.last_input_seq = own.last_input_seq.wrapping_add(rng.below(3) as u32);
    }
    if rng.pct(3) {
        own.entity = rng.below(4096) as u32;
    }
}

fn step_mover(rng: &mut Rng, m: &mut Mover, tick_step: u32) {
    let p = &mut m.rec.pose;
    match rng.below(20) {
        0 => m.vel_mm = [0; 3],
        1 | 2 => {
            m.vel_mm = [
                rng.range(-300, 300) as i32,
                rng.range(-20, 20) as i32,
                rng.range(-300, 300) as i32,
            ]
        }
        _ => {}
    }
    for i in 0..3 {
        let jitter = if rng.pct(30) {
            rng.range(-3, 3) as i32
        } else {
            0
        };
        p.position_mm[i] = p.position_mm[i]
            .saturating_add(m.vel_mm[i].saturating_mul(tick_step as i32))
            .saturating_add(jitter);
        // mm per tick at 50 Hz is mm·50 per s: in 0.05 m/s steps, the same number.
        p.velocity[i] = i64::from(m.vel_mm[i]).clamp(-32767, 32767) as i16;
    }
    if rng.pct(15) {
        p.yaw = ((i32::from(p.yaw) + rng.range(-40, 40) as i32).rem_euclid(512)) as u16;
    }
    if rng.pct(5) {
        p.movement_kind = rng.below(4) as u8;
        p.anim_flags = rng.below(1024) as u16;
    }
    if rng.pct(5) {
        p.head = if p.head.is_some() {
            None
        } else {
            Some([rng.range(-90, 90) as i16, rng.range(-60, 60) as i16])
        };
    } else if let Some(h) = &mut p.head
        && rng.pct(30)
    {
        h[0] = (h[0] + rng.range(-5, 5) as i16).clamp(-180, 180);
    }
    if rng.pct(4) {
        p.point_at_mm = if p.point_at_mm.is_some() {
            None
        } else {
            Some([
                p.position_mm[0].saturating_add(rng.range(-5_000, 5_000) as i32),
                1_200,
                p.position_mm[2].saturating_add(rng.range(-5_000, 5_000) as i32),
            ])
        };
    }
    if rng.pct(3) {
        m.tier = rng.below(4) as u8;
    }
}

fn error_kind(e: &FrameError) -> &'static str {
    match e {
        FrameError::Truncated => "truncated",
        FrameError::ChainBreak { .. } => "chain_break",
        FrameError::CheckMismatch { .. } => "check_mismatch",
        FrameError::Malformed(_) => "malformed",
        FrameError::TooLarge => "too_large",
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn ids(v: &[u32]) -> String {
    let parts: Vec<String> = v.iter().map(u32::to_string).collect();
    format!("[{}]", parts.join(","))
}

fn opt_arr<T: ToString, const N: usize>(v: Option<[T; N]>) -> String {
    match v {
        Some(a) => {
            let parts: Vec<String> = a.iter().map(T::to_string).collect();
            format!("[{}]", parts.join(","))
        }
        None => "null".into(),
    }
}

fn arr<T: ToString, const N: usize>(a: [T; N]) -> String {
    opt_arr(Some(a))
}

fn own_json(o: Option<&OwnState>) -> String {
    let Some(o) = o else {
        return "null".into();
    };
    let p = &o.pose;
    let head = p.head.unwrap_or_default();
    let pt = p.point_at.unwrap_or_default();
    let bits = [
        p.position[0],
        p.position[1],
        p.position[2],
        p.velocity[0],
        p.velocity[1],
        p.velocity[2],
        p.yaw_deg,
        head[0],
        head[1],
        pt[0],
        pt[1],
        pt[2],
    ]
    .map(f32::to_bits);
    format!(
        "{{\"entity\":{},\"last_input_seq\":{},\"bits\":{},\"movement_kind\":{},\"anim_flags\":{},\"head\":{},\"point\":{}}}",
        o.entity,
        o.last_input_seq,
        arr(bits),
        p.movement_kind,
        p.anim_flags,
        p.head.is_some(),
        p.point_at.is_some()
    )
}

/// Applies `frame` to `dec` (asserting it tracks `enc`) and appends the frame's JSON object:
/// its bytes and what the decoder made of it. `extra` is appended inside the object.
pub(crate) fn frame_json(
    out: &mut String,
    dec: &mut FrameDecoder,
    enc: &FrameEncoder,
    frame: &[u8],
    extra: &str,
) {
    let d = dec
        .apply(frame)
        .expect("the decoder accepts every frame of the encoder");
    assert_eq!(dec.check(), enc.held_check(), "decoder tracks the encoder");
    let _ = write!(
        out,
        "{{\"hex\":\"{}\",\"seq\":{},\"base_seq\":{},\"tick\":{},\"keyframe\":{},\"changed\":{},\"removed\":{},\"checked\":{},\"held\":{},\"check\":{}{extra}}}",
        hex(frame),
        d.seq,
        d.base_seq,
        d.tick,
        d.keyframe,
        ids(&d.changed),
        ids(&d.removed),
        d.checked,
        dec.len(),
        dec.check()
    );
}

/// Appends `,"final":{...}`: every record the decoder holds and its own state.
pub(crate) fn final_json(out: &mut String, dec: &FrameDecoder) {
    let entities: Vec<String> = dec
        .entities()
        .map(|e| {
            let p = &e.pose;
            format!(
                "[{},{},{},{},{},{},{},{},{},{},{},{}]",
                e.id,
                e.generation,
                e.kind,
                dec.tier(e.id).unwrap_or(0),
                dec.pose_tick(e.id).unwrap_or(0),
                arr(p.position_mm),
                arr(p.velocity),
                p.yaw,
                p.movement_kind,
                p.anim_flags,
                opt_arr(p.head),
                opt_arr(p.point_at_mm)
            )
        })
        .collect();
    let _ = write!(
        out,
        ",\"final\":{{\"entities\":[{}],\"own\":{}}}",
        entities.join(","),
        own_json(dec.own())
    );
}

/// `streams` frame streams of `frames` frames each, from `seed`, as JSON.
pub(crate) fn generate(seed: u64, streams: usize, frames: usize) -> String {
    let mut rng = Rng::new(seed);
    let mut out = String::new();
    let _ = write!(out, "{{\"seed\":{seed},\"streams\":[");
    for s in 0..streams {
        let cfg = EncoderConfig {
            budget_bytes_per_s: [0, 0, 4_000, 32_000, 800][rng.below(5) as usize],
            broadcast_hz: 20,
            check_every: [0, 1, 5, 20][rng.below(4) as usize],
        };
        let _ = write!(
            out,
            "{}{{\"budget_bytes_per_s\":{},\"check_every\":{},\"frames\":[",
            if s > 0 { "," } else { "" },
            cfg.budget_bytes_per_s,
            cfg.check_every
        );
        let mut enc = FrameEncoder::new(cfg);
        let mut dec = FrameDecoder::new();
        let mut movers: Vec<Mover> = Vec::new();
        let mut next_gen = 0u16;
        let mut own = OwnState {
            entity: rng.below(4096) as u32,
            pose: Pose::default(),
            last_input_seq: rng.below(1 << 32) as u32,
        };
        let mut own_on = true;
        let mut tick = rng.below(1 << 20) as u32;
        let population = rng.range(0, 60) as usize;
        for f in 0..frames {
            let tick_step = if rng.pct(90) {
                1
            } else {
                rng.range(2, 40) as u32
            };
            tick = tick.wrapping_add(tick_step);
            // Leaves, joins, generation changes.
            movers.retain(|_| !rng.pct(2));
            let joins = if movers.len() < population {
                rng.below(4)
            } else {
                u64::from(rng.pct(5))
            };
            for _ in 0..joins {
                let prop = rng.pct(20);
                let id = if prop {
                    1_048_576 + rng.below(64) as u32
                } else {
                    rng.range(1, 3_000) as u32
                };
                if movers.iter().any(|m| m.rec.id == id) {
                    continue;
                }
                next_gen = next_gen.wrapping_add(1);
                movers.push(Mover {
                    rec: EntityRecord {
                        id,
                        generation: next_gen % 7,
                        kind: u8::from(prop),
                        pose: random_pose(&mut rng),
                    },
                    tier: rng.below(4) as u8,
                    vel_mm: [0; 3],
                });
            }
            if let Some(m) = movers.first_mut()
                && rng.pct(2)
            {
                m.rec.generation = m.rec.generation.wrapping_add(1);
            }
            for m in &mut movers {
                step_mover(&mut rng, m, tick_step);
            }
            movers.sort_by_key(|m| m.rec.id);
            step_own(&mut rng, &mut own);
            if rng.pct(3) {
                own_on = !own_on;
            }
            if rng.pct(3) {
                enc.request_keyframe();
            }
            let visible: Vec<Visible<'_>> = movers
                .iter()
                .map(|m| Visible {
                    record: &m.rec,
                    tier: m.tier,
                })
                .collect();
            let mut frame = Vec::new();
            enc.encode(tick, own_on.then_some(&own), &visible, &mut frame);

            // A copy of the frame with one bit flipped, decoded by a copy of the decoder.
            let probe = if rng.pct(25) && !frame.is_empty() {
                let mut bad = frame.clone();
                let bit = rng.below(bad.len() as u64 * 8);
                bad[(bit / 8) as usize] ^= 1 << (bit % 8);
                let verdict = match dec.clone().apply(&bad) {
                    Ok(_) => "\"ok\"".to_string(),
                    Err(e) => format!("\"{}\"", error_kind(&e)),
                };
                format!(
                    ",\"probe\":{{\"hex\":\"{}\",\"verdict\":{verdict}}}",
                    hex(&bad)
                )
            } else {
                String::new()
            };
            if f > 0 {
                out.push(',');
            }
            frame_json(&mut out, &mut dec, &enc, &frame, &probe);
        }
        out.push(']');
        final_json(&mut out, &dec);
        out.push('}');
    }
    out.push_str("]}\n");
    out
}
