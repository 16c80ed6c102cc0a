// A short run of scripts/fifty.ts (issue 14): 10 SDK clients under Node walk in one room of a
// real `plaza up` for 5 s; every client must then hold every other at the position it last sent
// (within quantization), with 0 decode errors and 0 check failures. The full 50-client run is
// `npm run fifty` (docs/BENCHMARKS.md). Runs in `npm run test:browser`, CI's e2e step.
import { afterAll, beforeAll, expect, it } from "vitest";

import { runFifty, verdict } from "../scripts/fifty.js";
import { startPlaza, type Plaza } from "../test/plaza.js";

let plaza: Plaza;

beforeAll(async () => {
  plaza = await startPlaza();
});

afterAll(async () => {
  await plaza?.stop();
});

it("10 walking SDK clients all see each other within quantization", async () => {
  const r = await runFifty({ wsUrl: plaza.wsUrl, clients: 10, durationS: 5 });
  expect(verdict(r), JSON.stringify(r)).toEqual([]);
  expect(r.pairs).toBe(10 * 9);
  expect(r.minSeen).toBe(9);
  expect(r.maxErrorM).toBeLessThanOrEqual(0.001 + 1e-6);
  expect(r.framesPerClientPerS).toBeGreaterThan(10);
  expect(r.corrections).toBe(0);
  expect(r.movesSent).toBeGreaterThan(10 * 30);
});
