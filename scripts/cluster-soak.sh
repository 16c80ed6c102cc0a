#!/usr/bin/env bash
# Issue 11's done-when at full size: Redis + 3 `plaza node` processes + `plaza gateway` (two for
# the gateway faults) on loopback, all on the shipped defaults (lease TTL 10 s, presence TTL
# 15 s, sweep 5 s: `ClusterOpts::default()` sets no override), 300 bots in 6 rooms from
# plaza-load for 60 s, release build, one fault per test, the tests one after another:
#
#   cluster_failover     kill -9 of the busiest node (sessions back in session, same entity)
#   cluster_checkpoint   kill -9 of a room's node: held prop and open consents restored from the
#                        checkpoint (2 nodes; the audit log folds in what came after it)
#   cluster_redis_pause  Redis SIGSTOPped 30 s (frames ≤ 5 s after SIGCONT, held prop intact)
#   cluster_pause        the busiest node SIGSTOPped 2 × lease TTL (the woken node commits nothing)
#   cluster_redis        Redis restarted empty; FLUSHALL
#   cluster_gateway      gateway kill -9 (resume through the other ≤ 5 s, same entity);
#                        gateway SIGTERM (reconnects spread over the window)
#
# Each test asserts its fault's bounds and `assert_fault_held` (0 failed, 0 lost, no 4004, ping
# RTT p99 < 1 s, single activation on the event logs). The `_fast` variants (lease 2 s) are
# skipped here: they are CI extras. Each test's full output goes to OUT_DIR/TEST.log; the
# figures for the table (lost, resume_ms p99, ping RTT p99, rooms back, state) are printed at
# the end, one block per test.
#
# Usage: scripts/cluster-soak.sh [BOTS] [ROOMS] [SECONDS] [OUT_DIR]   (defaults 300 6 60)
#   TESTS="cluster_drain cluster_partition" scripts/cluster-soak.sh   # other fault modules
# Needs `redis-server` on PATH. CI runs the same tests with 60 bots in a debug build.
set -euo pipefail
cd "$(dirname "$0")/.."
export PLAZA_CLUSTER_BOTS="${1:-300}"
export PLAZA_CLUSTER_ROOMS="${2:-6}"
export PLAZA_CLUSTER_SECS="${3:-60}"
out="${4:-$(mktemp -d /tmp/plaza-cluster-soak.XXXXXX)}"
mkdir -p "$out"
read -r -a tests <<<"${TESTS:-cluster_failover cluster_checkpoint cluster_redis_pause cluster_pause cluster_redis cluster_gateway}"
# One release build of the whole-system test binary and of `plaza` (the harness builds it
# through plaza-ops's `ops` test: the same command, so it is up to date), with `--workspace` so
# the features are the ones every other `cargo test --workspace` uses.
nice -n 5 cargo test -q --workspace --release --no-run --test ops --test system
# The harness would build `plaza` itself through a nested cargo (tests/src/cluster.rs, plaza_bin);
# inside a test process that nested build sees another environment and rebuilds part of the
# release graph. The binary was just built above: point the harness at it.
export PLAZA_BIN="${PLAZA_BIN:-$PWD/target/release/plaza}"
status=0
for t in "${tests[@]}"; do
  echo "=== $t: ${PLAZA_CLUSTER_BOTS} bots, ${PLAZA_CLUSTER_ROOMS} rooms, ${PLAZA_CLUSTER_SECS} s ($(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg))"
  # One test at a time: two 300-bot clusters at once on a small machine starve each other.
  # Each former test file is a module of the `system` binary: `$t::` selects its tests.
  if cargo test --workspace --release --test system "$t::" -- --nocapture --test-threads=1 \
    --skip _fast >"$out/$t.log" 2>&1; then
    echo "--- $t: ok"
  else
    echo "--- $t: FAILED (see $out/$t.log)"
    status=1
  fi
done
echo
echo "=== figures (full logs in $out)"
for t in "${tests[@]}"; do
  echo "--- $t"
  # The lines the tests print for the table: assert_fault_held's verdict and load counters,
  # what each test timed, what the probes saw, the test's result.
  grep -E '^(test [a-z_]+ \.\.\. |killed |presence |resumed in |probe|frames again |SIGSTOP |SIGCONT |RestartEmpty|FlushAll|kill -9 |SIGTERM |gw exited |reconnect delay |peers empty |event logs: |load: |[a-zA-Z0-9 ×_-]+: lost [0-9]+ |thread .* panicked)' \
    "$out/$t.log" || true
  grep -A3 -E '^thread .* panicked' "$out/$t.log" | grep -vE '^thread|^note:|^--$' | head -6 || true
done
exit $status
