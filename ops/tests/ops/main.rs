//! plaza-ops's integration tests, one test binary (`cargo test --workspace --test ops`; one
//! module: `cargo test --workspace --test ops config_doc::`). `CARGO_BIN_EXE_plaza` is set for
//! it, so building it (`cargo test --workspace --no-run --test ops`) builds the `plaza` binary
//! too: the whole-system harness does that (`plaza_tests::cluster::plaza_bin`).

mod chart_readme;
mod cli;
mod config_doc;
mod config_drift;
mod dashboard_metrics;
mod image_recipe;
mod metrics_lint;
mod operator_cli;
