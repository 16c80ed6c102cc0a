#!/usr/bin/env bash
# D1 of docs/TESTING.md: the turmoil seed sweep over the directory's lease / placement /
# presence logic, at full size (10,000 seeds by default; `cargo test` runs 200).
#   scripts/turmoil-sweep.sh                      # seeds 0..10000, release build, one shard per core
#   SEEDS=2000 START=50000 scripts/turmoil-sweep.sh
#   SHARDS=1 PROFILE=dev scripts/turmoil-sweep.sh
# A failing seed prints its replay command (PLAZA_TURMOIL_SEED=n cargo test -p plaza-directory
# --test directory turmoil_sweep:: -- --nocapture). Not part of .ci/run (minutes, not seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${SEEDS:-10000}
start=${START:-0}
shards=${SHARDS:-$(nproc)}
profile=${PROFILE:-release}
flag=(--profile "$profile")
cargo test "${flag[@]}" -p plaza-directory --test directory --no-run
per=$(( (seeds + shards - 1) / shards ))
logs=$(mktemp -d)
pids=()
for ((i = 0; i < shards; i++)); do
    s=$(( start + i * per ))
    n=$(( per < start + seeds - s ? per : start + seeds - s ))
    (( n > 0 )) || break
    PLAZA_TURMOIL_SEED_START=$s PLAZA_TURMOIL_SEEDS=$n \
        cargo test "${flag[@]}" -p plaza-directory --test directory \
        lease_placement_presence_seed_sweep -- --nocapture >"$logs/shard$i.log" 2>&1 &
    pids+=($!)
done
fail=0
for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then fail=1; fi
    grep -E "turmoil sweep:|FAILED|replay:" "$logs/shard$i.log" || true
done
if (( fail )); then
    echo "turmoil sweep: FAILED (logs in $logs)"
    exit 1
fi
rm -rf "$logs"
echo "turmoil sweep: seeds $start..$((start + seeds)) passed"
