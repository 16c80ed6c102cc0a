//! Writes random frame streams of the Rust encoder as JSON, for the TypeScript decoder's
//! cross-check. `cargo run -p plaza-proto --example random_frames -- SEED OUT [STREAMS FRAMES]`;
//! CI runs it with a fresh seed before `npm test` (which reads `PLAZA_RANDOM_FRAMES`).

#[path = "../tests/support/random_frames.rs"]
mod support;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seed = args.first().and_then(|s| s.parse().ok()).unwrap_or(1);
    let out = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "random-frames.json".into());
    let streams = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(6);
    let frames = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(50);
    std::fs::write(&out, support::generate(seed, streams, frames))?;
    eprintln!("random frames: seed {seed}, {streams} streams × {frames} frames → {out}");
    Ok(())
}
