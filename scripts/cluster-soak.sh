#!/usr/bin/env bash
# The issue's full-size cluster scenario: Redis + 3 `plaza node` processes + 1 `plaza gateway`
# process on loopback, 300 bots in 6 rooms from plaza-load, with a node killed (kill -9), a node
# drained (SIGTERM), Redis restarted empty and a node cut from Redis mid-run (one test each, run
# one after another).
#
# Usage: scripts/cluster-soak.sh [BOTS] [ROOMS] [SECONDS]   (defaults 300 6 30)
# Needs `redis-server` on PATH. The default CI path runs the same tests with 60 bots.
set -euo pipefail
cd "$(dirname "$0")/.."
export PLAZA_CLUSTER_BOTS="${1:-300}"
export PLAZA_CLUSTER_ROOMS="${2:-6}"
export PLAZA_CLUSTER_SECS="${3:-30}"
# Release: 300 bots decoding every frame plus three nodes need optimized code on small machines.
cargo build --release -p plaza-ops --bin plaza
status=0
for t in cluster_failover cluster_drain cluster_redis cluster_partition cluster_pause; do
  echo "=== $t: ${PLAZA_CLUSTER_BOTS} bots, ${PLAZA_CLUSTER_ROOMS} rooms, ${PLAZA_CLUSTER_SECS} s"
  cargo test --release -p plaza-tests --test "$t" -- --nocapture || status=1
done
exit $status
