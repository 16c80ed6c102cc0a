//! plaza-proto's integration tests, one test binary (`cargo test --workspace --test proto`; one
//! module: `cargo test --workspace --test proto golden_frames::`). `support` is the random
//! frame stream generator shared with the `random_frames` example (`tests/support/`, outside
//! this directory, so the example's `#[path]` stays).

#[allow(dead_code)]
#[path = "../support/random_frames.rs"]
mod support;

mod frame_basic;
mod frame_props;
mod frame_scenarios;
mod golden;
mod golden_frames;
mod random_frames;
