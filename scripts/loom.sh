#!/usr/bin/env bash
# D2 of docs/TESTING.md: loom models of the directory's concurrency kernels (lease table,
# presence refcounts, era floor), every interleaving explored. Builds with `--cfg loom` in its
# own target dir (target/loom) so the normal build stays cached; the first run rebuilds every
# dependency (~1 min on 2 cores), later runs take seconds.
#
#   scripts/loom.sh                 # all models
#   scripts/loom.sh era_floor       # models whose name contains "era_floor"
#   LOOM_MAX_PREEMPTIONS=3 scripts/loom.sh   # bound the search (loom's own knob)
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="${RUSTFLAGS:-} --cfg loom"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR_LOOM:-target/loom}"
exec cargo test --release -p plaza-directory --test loom -- "$@"
