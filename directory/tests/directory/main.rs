//! The directory's integration tests, one test binary (`cargo test --workspace --test
//! directory`; one module: `cargo test --workspace --test directory turmoil_sweep::`). `suite`
//! is the backend-neutral case list that `memory`, `redis` and `redis_cluster` run; `sim` is the
//! turmoil harness of `turmoil_sweep`. `tests/loom.rs` stays its own binary: it compiles only
//! under `--cfg loom` (`scripts/loom.sh`), with loom's primitives swapped into the crate.

mod sim;
mod suite;

mod differential;
mod memory;
mod presence_model;
mod redis;
mod redis_cluster;
mod single_activation;
mod turmoil_sweep;
