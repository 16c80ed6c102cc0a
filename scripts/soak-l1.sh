#!/usr/bin/env bash
# Reliability row L1, the soak: one `plaza up` (release, shipped defaults) and `plaza-load` with
# 4 rooms x 64 bots sending movement at 20 Hz for DURATION (default 30m). Reports the room tick
# work p99 (the whole run; and, from the per-second series, the median per-second p99 of the
# first vs the last tenth of the run, and the worst second) and the RSS slope of the plaza process (a least-squares line through
# `process_resident_memory_bytes` sampled from /metrics every 10 s, the first tenth of the
# run skipped as warm-up), in MiB per hour. Pass criteria (REQUIREMENTS.md L1): tick p99 < 25 ms
# and flat, RSS slope ~ 0; the script prints them and exits 1 if the tick bound or a lost bot
# fails (the slope is reported, for a human to judge against the run's length).
#
# Usage: scripts/soak-l1.sh [DURATION] [OUT_DIR]     e.g. scripts/soak-l1.sh 3m /tmp/soak
# Only what must differ for one client host differs from the defaults: the per-address edge
# caps (every bot is 127.0.0.1), as in the test harness.
set -euo pipefail
cd "$(dirname "$0")/.."
duration="${1:-30m}"
out="${2:-$(mktemp -d /tmp/plaza-soak-l1.XXXXXX)}"
mkdir -p "$out"
# `plaza` and `plaza-load` as the release test builds make them (their packages' own `ops` and
# `exit_status` tests need them), with `--workspace` features: the same binaries
# scripts/cluster-soak.sh uses, not a second feature resolution of the whole graph.
nice -n 5 cargo test -q --workspace --release --no-run --test ops --test exit_status
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ws=$(port); admin=$(port)
PLAZA__GATEWAY__MAX_PREAUTH_PER_IP=100000 PLAZA__GATEWAY__MAX_SESSIONS_PER_IP=100000 \
PLAZA__GATEWAY__JOINS_PER_IP_PER_S=100000 PLAZA__GATEWAY__JOINS_PER_IP_BURST=100000 \
  target/release/plaza up --listen "127.0.0.1:$ws" --admin-listen "127.0.0.1:$admin" \
  >"$out/plaza.log" 2>&1 &
plaza=$!
sampler=
cleanup() { [ -n "$sampler" ] && kill "$sampler" 2>/dev/null; kill "$plaza" 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$admin/readyz" >/dev/null && break
  sleep 0.1
done
# RSS every 10 s: "unix_seconds rss_bytes".
(
  while true; do
    rss=$(curl -sf "http://127.0.0.1:$admin/metrics" | awk '$1 == "process_resident_memory_bytes" { print $2 }')
    [ -n "$rss" ] && echo "$(date +%s.%N) $rss" >>"$out/rss.txt"
    sleep 10
  done
) &
sampler=$!
echo "soak L1: 4 rooms x 64 bots, 20 Hz input, $duration; output in $out"
status=0
target/release/plaza-load --gateway "ws://127.0.0.1:$ws/v1/ws" --bots 256 --rooms 4 \
  --input-hz 20 --duration "$duration" --ramp 10s --quiet \
  --metrics-url "http://127.0.0.1:$admin/metrics" --report "$out/report.json" \
  >"$out/load.txt" 2>&1 || status=$?
kill "$sampler" 2>/dev/null || true
sampler=
python3 - "$out" "$status" <<'EOF'
import json, sys
out, load_status = sys.argv[1], int(sys.argv[2])
r = json.load(open(f"{out}/report.json"))
series = [p["server_tick_p99_ms"] for p in r["series"] if p.get("server_tick_p99_ms") is not None]
tenth = max(1, len(series) // 10)
first, last = series[:tenth], series[-tenth:]
def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else float("nan")
rss = [tuple(map(float, l.split())) for l in open(f"{out}/rss.txt") if l.strip()]
rss = rss[len(rss) // 10:]
slope = float("nan")
if len(rss) >= 3:
    t0 = rss[0][0]
    xs = [t - t0 for t, _ in rss]; ys = [b / 2**20 for _, b in rss]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx * 3600 if sxx else float("nan")
tick = r.get("server_tick_p99_ms")
print(f"bots connected {r['bots_connected']} failed {r['bots_failed']} lost {r['bots_lost']}; "
      f"movements sent {r['movements_sent']} ({r['movements_sent'] / max(1, r['bots_connected']) / r['elapsed_s']:.1f}/bot/s); "
      f"decode errors {r['decode_errors']}; close codes {r['close_codes']}")
print(f"tick work p99: whole run {tick:.2f} ms; per-second p99s: median of the first tenth "
      f"{median(first):.2f} ms, of the last tenth {median(last):.2f} ms, worst second "
      f"{max(series, default=float('nan')):.2f} ms ({len(series)} seconds)")
if rss:
    print(f"RSS: {rss[0][1] / 2**20:.1f} -> {rss[-1][1] / 2**20:.1f} MiB over {rss[-1][0] - rss[0][0]:.0f} s "
          f"after warm-up; slope {slope:+.1f} MiB/h ({len(rss)} samples)")
ok = load_status == 0 and tick is not None and tick < 25 and r["bots_lost"] == 0 and r["bots_failed"] == 0
print("L1", "PASS" if ok else "FAIL", "(tick p99 < 25 ms, no bot lost or failed)")
sys.exit(0 if ok else 1)
EOF
