#!/usr/bin/env bash
# Issue 16's table in one sitting: for each SPEC a fresh `plaza up` (embedded directory, all
# roles in one process) and `plaza-load` for the ramp (200 connects per s) plus 40 s; the
# report's `steady` window (10 s after every bot joined to the end) carries CPU, RSS and bytes.
#
# Usage: scripts/sitting.sh OUT_DIR SPEC...    SPEC = BOTS:ROOMS:WALK[:pin]
#   e.g. scripts/sitting.sh /tmp/sit 500:10:waypoint 400:1:jitter 6000:120:waypoint:pin
# WALK is `waypoint` (the default room) or `jitter` (the open 200 m room, load/rooms/open-200.toml);
# `pin` puts the server on core 0 and the bots on core 1 (taskset). Then
# `python3 scripts/sitting_table.py OUT_DIR` prints the Markdown table. Binaries: target/release
# (cargo build --release --bin plaza --bin plaza-load), or BIN_DIR=... . Only what must differ
# for one client host differs from the defaults: the per-address edge caps (every bot is
# 127.0.0.1). Run it on a quiet machine: the figures are wall-clock CPU shares.
set -u
cd "$(dirname "$0")/.."
out="$1"; shift; mkdir -p "$out"
bin="${BIN_DIR:-target/release}"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
export PLAZA__GATEWAY__MAX_PREAUTH_PER_IP=100000 PLAZA__GATEWAY__MAX_SESSIONS_PER_IP=100000 \
  PLAZA__GATEWAY__JOINS_PER_IP_PER_S=100000 PLAZA__GATEWAY__JOINS_PER_IP_BURST=100000
for spec in "$@"; do
  IFS=: read -r bots rooms walk pin <<<"$spec"
  name="${bots}x${rooms}-${walk}${pin:+-pin}"
  srvpin=(); ldpin=()
  if [ -n "${pin:-}" ]; then srvpin=(taskset -c 0); ldpin=(taskset -c 1); fi
  if [ "$walk" = jitter ]; then
    export PLAZA__ROOM__DEFINITION="$PWD/load/rooms/open-200.toml"
  else
    unset PLAZA__ROOM__DEFINITION
  fi
  "${srvpin[@]}" "$bin/plaza" up > "$out/$name.server.log" 2>&1 &
  spid=$!
  for _ in $(seq 100); do curl -sf http://127.0.0.1:9100/metrics > /dev/null && break; sleep 0.2; done
  sleep 2
  curl -s http://127.0.0.1:9100/metrics | awk '/^process_resident_memory_bytes/{print $2}' > "$out/$name.idle_rss"
  dur=$(( bots / 200 + 40 ))
  echo "$(date -u +%T) $name load=$(cut -d' ' -f1 /proc/loadavg) idle_rss=$(cat "$out/$name.idle_rss") ${dur}s"
  "${ldpin[@]}" "$bin/plaza-load" --gateway ws://127.0.0.1:7777/v1/ws \
    --metrics-url http://127.0.0.1:9100/metrics --report "$out/$name.json" --quiet \
    --bots "$bots" --rooms "$rooms" --walk "$walk" --duration "${dur}s" > "$out/$name.load.log" 2>&1
  kill -TERM "$spid" 2>/dev/null
  for _ in $(seq 60); do kill -0 "$spid" 2>/dev/null || break; sleep 0.5; done
  kill -KILL "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
  sleep 3
done
echo "$(date -u +%T) sitting done"
