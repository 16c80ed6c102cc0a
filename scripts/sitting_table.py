#!/usr/bin/env python3
"""sitting_table.py DIR: one Markdown row per plaza-load report of scripts/sitting.sh."""
import json, sys, glob, os
d = sys.argv[1]
rows = []
print("| run | connected / lost / decode err. / check fail. | server CPU ms/bot/s | load CPU ms/bot/s | server RSS idle → end (per client) | load RSS end | down / up B per client per s | snapshot interval p50 / p99 ms | move-to-seen p99 ms |")
print("|---|---|---|---|---|---|---|---|---|")
def key(p):
    b = os.path.basename(p).split('x')[0]
    return (('pin' in p), ('jitter' in p), int(b) if b.isdigit() else 0)
for p in sorted(glob.glob(os.path.join(d, "*.json")), key=key):
    r = json.load(open(p)); s = r.get("steady") or {}
    name = os.path.basename(p)[:-5]
    idle = float(open(p[:-5] + ".idle_rss").read().strip() or 0) / 2**20
    n = r["bots_connected"]
    srv_end = s.get("server_rss_end_mib") or 0
    per = (srv_end - idle) * 1024 / n if n else 0
    f = lambda x: "—" if x is None else f"{x:.3f}"
    print(f"| {name} | {n} / {r['bots_lost']} / {r['decode_errors']} / {r['check_failures']} | "
          f"{f(s.get('server_cpu_ms_per_bot_s'))} | {f(s.get('load_cpu_ms_per_bot_s'))} | "
          f"{idle:.1f} → {srv_end:.1f} MiB ({per:.1f} KiB) | {s.get('load_rss_end_mib', 0):.1f} MiB | "
          f"{s.get('down_bytes_per_client_s', 0):,.0f} / {s.get('up_bytes_per_client_s', 0):,.0f} | "
          f"{r['snapshot_interval_ms']['p50']:.1f} / {r['snapshot_interval_ms']['p99']:.1f} | "
          f"{r['move_to_seen_ms']['p99']:.1f} |")
