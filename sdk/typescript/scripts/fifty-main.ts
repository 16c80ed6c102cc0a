/**
 * `npm run fifty -- [--clients 50] [--duration 20] [--url ws://…/v1/ws] [--stadium]`
 *
 * Without `--url` it starts `plaza up` itself (PLAZA_BIN, else target/debug/plaza) on free
 * loopback ports with the shipped defaults; `--stadium` sets `PLAZA__ROOM__TIER=stadium` (256
 * visible avatars, 256 kbit/s) so that 50 clients all see each other. Prints the figures as JSON
 * and a verdict line; exits 1 when the run fails issue 14's bar.
 */
import { runFifty, verdict } from "./fifty.js";
import { startPlaza, type Plaza } from "../test/plaza.js";

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

const clients = Number(arg("clients") ?? 50);
const durationS = Number(arg("duration") ?? 20);
const stadium = process.argv.includes("--stadium");
let plaza: Plaza | undefined;
let url = arg("url");
if (!url) {
  plaza = await startPlaza([], stadium ? { PLAZA__ROOM__TIER: "stadium" } : {});
  url = plaza.wsUrl;
}
let code = 0;
try {
  const r = await runFifty({ wsUrl: url, clients, durationS, log: (l) => console.error(l) });
  console.log(JSON.stringify(r, null, 2));
  const bad = verdict(r);
  console.log(bad.length === 0 ? `PASS: ${clients} clients, ${r.pairs} pairs within quantization, 0 decode errors, 0 check failures` : `FAIL: ${bad.join("; ")}`);
  code = bad.length === 0 ? 0 : 1;
} finally {
  await plaza?.stop();
}
process.exit(code);
