//! The whole-system tests, one test binary (`cargo test --workspace --test system`): each module
//! below was its own binary once, and every binary linked the whole workspace. A module's tests
//! are its path: `cargo test --workspace --test system cluster_failover::` (docs/TESTING.md).
//!
//! The tests of all modules share one process and run in parallel (`--test-threads`, the core
//! count by default): [`plaza_tests::cluster::Cluster`] takes a process-wide slot, so the
//! multi-process clusters take turns (`CLUSTERS_AT_ONCE`, 1) while other tests run beside them. Nothing here may rely on per-process state of its own: no environment variables set
//! in-process, no global tracing subscriber (`telemetry.rs`, which installs one, stays its own
//! binary), temporary paths and Redis prefixes unique per module.

mod admin_api;
mod auth_jwt;
mod authority;
mod bad_input;
mod client_lib;
mod client_links;
mod cluster_checkpoint;
mod cluster_clock_skew;
mod cluster_drain;
mod cluster_failover;
mod cluster_gateway;
mod cluster_gateway_partition;
mod cluster_join_burst;
mod cluster_partition;
mod cluster_pause;
mod cluster_redis;
mod cluster_redis_commands;
mod cluster_redis_failover;
mod cluster_redis_pause;
mod cluster_tls;
mod compressed_movement;
mod edge_limits;
mod expressions;
mod load_metrics;
mod load_report;
mod load_wss;
mod node_token;
mod one_process;
mod operator_protocol;
mod otel_env;
mod otel_tls;
mod presence_sources;
mod resume;
mod room_cycles_redis;
mod room_definitions;
mod roster_teleport_block;
mod slow_consumer;
mod snapshots;
mod start_before_redis;
mod supervision;
mod tidy;
mod tls;
