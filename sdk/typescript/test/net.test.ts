import { describe, expect, it } from "vitest";

import { Backoff, classifyClose, LinkConditioner } from "../src/index.js";

describe("close codes", () => {
  it("splits retryable from terminal", () => {
    for (const c of [1001, 1006, 4005, 4006, 4008, 4009]) expect(classifyClose(c).retryable, String(c)).toBe(true);
    for (const c of [1000, 1009, 4001, 4002, 4003, 4004, 4010, 4777]) expect(classifyClose(c).retryable, String(c)).toBe(false);
    expect(classifyClose(4003).name).toBe("auth");
    expect(classifyClose(4010).name).toBe("kicked");
  });
});

describe("backoff", () => {
  it("doubles up to the cap with jitter in [d/2, d]", () => {
    let r = 0;
    const rs = [0, 1, 0.5];
    const b = new Backoff(100, 1000, () => rs[r++ % 3]!);
    const delays = Array.from({ length: 8 }, () => b.next());
    expect(delays.slice(0, 3)).toEqual([50, 200, 300]);
    for (const [i, d] of delays.entries()) {
      const cap = Math.min(1000, 100 * 2 ** i);
      expect(d).toBeGreaterThanOrEqual(cap / 2);
      expect(d).toBeLessThanOrEqual(cap);
    }
    b.reset();
    expect(b.attempts).toBe(0);
  });
});

describe("link conditioner", () => {
  it("delays by latency plus jitter and keeps order", async () => {
    const got: [number, number][] = [];
    const t0 = performance.now();
    let k = 0;
    const link = new LinkConditioner<number>({ latencyMs: 40, jitterMs: 30 }, (m) => got.push([m, performance.now() - t0]), () => performance.now(), () => [0.9, 0.1, 0.5, 0.0][k++ % 4]!);
    for (let i = 0; i < 8; i++) link.push(i);
    const end = Date.now() + 5000;
    while (got.length < 8 && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
    expect(got.map((g) => g[0])).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    for (const [, at] of got) expect(at).toBeGreaterThanOrEqual(39);
  });
});
