//! The committed `fixtures/frames/random.json` (read by the TypeScript decoder's tests) is what
//! the Rust encoder and decoder make of seed 1. Regenerate it after a deliberate format change
//! with `cargo run -p plaza-proto --example random_frames -- 1 ../fixtures/frames/random.json`.

use crate::support;

/// The committed fixture's seed and size.
const SEED: u64 = 1;
const STREAMS: usize = 6;
const FRAMES: usize = 50;

#[test]
fn committed_random_frames_are_what_the_encoder_makes() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/frames/random.json"
    );
    let committed = std::fs::read_to_string(path).expect("fixtures/frames/random.json");
    let fresh = support::generate(SEED, STREAMS, FRAMES);
    assert!(
        committed == fresh,
        "fixtures/frames/random.json is stale: regenerate it (see this file's doc)"
    );
}

#[test]
fn other_seeds_decode_too() {
    for seed in 2..6 {
        // `generate` asserts that the Rust decoder tracks the encoder frame by frame.
        let json = support::generate(seed, 2, 40);
        assert!(json.starts_with(&format!("{{\"seed\":{seed},")));
    }
}
