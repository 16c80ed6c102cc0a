// The shared smoothing trace (fixtures/smoothing/trace.json), the same file client/tests/trace.rs
// asserts: plaza-client's pipeline generated it; this port must render the same poses from the
// same inputs (within 1e-4 m) with the same counters, for every case's settings.
import { describe, expect, it } from "vitest";

import { DEFAULT_SMOOTHING, Smoother, type Extrapolation, type SmoothingConfig, type Spline } from "../src/smoothing.js";
import { positionM, velocityM, yawDeg, type QuantPose, type Vec3 } from "../src/quant.js";
import { fixture } from "./fixtures.js";

interface WirePose {
  position_mm: Vec3;
  velocity: Vec3;
  yaw: number;
  movement_kind: number;
  anim_flags: number;
  head: [number, number] | null;
  point_at_mm: Vec3 | null;
}
interface Input {
  arrival_s: number;
  pose_tick: number;
  pose: WirePose;
  teleport: boolean;
}
interface Output {
  now_s: number;
  phase: string;
  placed: boolean;
  position: Vec3;
  yaw_deg: number;
  head: [number, number] | null;
  point_at: Vec3 | null;
  render_t: number;
}
type RustExtrapolation = { kind: "capped"; max_s: number } | { kind: "damped"; linear_s: number; stop_s: number };
interface Case {
  name: string;
  config: Record<string, number | string | RustExtrapolation>;
  stats: { samples: number; stale: number; overflow: number; snaps: number[]; blends: number; clock_jumps: number; extrapolating: number; unled: number };
  outputs: Output[];
}
interface Trace {
  tick_hz: number;
  render_start_s: number;
  render_step_s: number;
  render_count: number;
  inputs: Input[];
  cases: Case[];
}

const trace = fixture<Trace>("smoothing/trace.json");
const TOL = 1e-4;

function camel(k: string): string {
  return k.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
}

function config(c: Case["config"]): SmoothingConfig {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(c)) {
    if (k === "extrapolation") {
      const e = v as RustExtrapolation;
      out.extrapolation = (e.kind === "capped" ? { kind: "capped", maxS: e.max_s } : { kind: "damped", linearS: e.linear_s, stopS: e.stop_s }) satisfies Extrapolation;
    } else if (k === "spline") {
      out.spline = v as Spline;
    } else {
      out[camel(k)] = v;
    }
  }
  return out as unknown as SmoothingConfig;
}

function quant(w: WirePose): QuantPose {
  return { positionMm: w.position_mm, velocity: w.velocity, yaw: w.yaw, movementKind: w.movement_kind, animFlags: w.anim_flags, head: w.head, pointAtMm: w.point_at_mm };
}

function near(a: number[] | null, b: number[] | null, what: string): void {
  expect(a === null, what).toBe(b === null);
  if (a === null || b === null) return;
  expect(a.length, what).toBe(b.length);
  for (let i = 0; i < a.length; i++) expect(Math.abs(a[i]! - b[i]!), `${what}[${i}]: ${a[i]} vs ${b[i]}`).toBeLessThan(TOL);
}

describe("shared smoothing trace", () => {
  it("its default case is this port's defaults", () => {
    expect(config(trace.cases[0]!.config)).toEqual({ ...DEFAULT_SMOOTHING });
    expect(trace.inputs.length).toBeGreaterThan(100);
  });

  for (const c of trace.cases) {
    it(`renders case ${c.name} as plaza-client does`, () => {
      const cfg = config(c.config);
      expect(Object.keys(cfg).sort()).toEqual(Object.keys(DEFAULT_SMOOTHING).sort());
      const s = new Smoother(cfg);
      let next = 0;
      expect(c.outputs.length).toBe(trace.render_count);
      for (let i = 0; i < trace.render_count; i++) {
        const now = trace.render_start_s + i * trace.render_step_s;
        while (next < trace.inputs.length && trace.inputs[next]!.arrival_s <= now) {
          const inp = trace.inputs[next]!;
          const q = quant(inp.pose);
          s.push(
            {
              t: inp.pose_tick / trace.tick_hz,
              position: positionM(q),
              velocity: velocityM(q),
              yawDeg: yawDeg(q),
              movementKind: q.movementKind,
              animFlags: q.animFlags,
              head: q.head ? [q.head[0], q.head[1]] : null,
              pointAt: q.pointAtMm ? [q.pointAtMm[0] / 1000, q.pointAtMm[1] / 1000, q.pointAtMm[2] / 1000] : null,
              teleport: inp.teleport,
            },
            inp.arrival_s,
          );
          next++;
        }
        const r = s.advance(now) ?? s.rendered();
        const want = c.outputs[i]!;
        const at = `${c.name} at ${now.toFixed(4)} s`;
        expect(Math.abs(now - want.now_s), at).toBeLessThan(1e-12);
        expect(r.phase, at).toBe(want.phase);
        expect(r.placed, at).toBe(want.placed);
        near(r.position, want.position, `${at} position`);
        near([r.yawDeg, r.renderT], [want.yaw_deg, want.render_t], `${at} yaw, renderT`);
        near(r.head, want.head, `${at} head`);
        near(r.pointAt, want.point_at, `${at} pointAt`);
      }
      expect({ ...s.stats, snaps: [...s.stats.snaps] }).toEqual({
        samples: c.stats.samples,
        stale: c.stats.stale,
        overflow: c.stats.overflow,
        snaps: c.stats.snaps,
        blends: c.stats.blends,
        clockJumps: c.stats.clock_jumps,
        extrapolating: c.stats.extrapolating,
        unled: c.stats.unled,
      });
    });
  }
});
