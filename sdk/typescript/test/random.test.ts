// Random frame streams of the Rust encoder (fixtures/frames/random.json, what seed 1 makes; CI
// also writes a fresh seed's streams and points PLAZA_RANDOM_FRAMES at them): the TypeScript
// decoder must make of every frame exactly what the Rust decoder made — the same changed and
// removed ids, the same check of everything held, the same final records and own state — and
// reach the same verdict on every frame with a flipped bit.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

import { FrameDecoder, FrameError } from "../src/index.js";
import { fixture, unhex } from "./fixtures.js";

interface Frame {
  hex: string;
  seq: number;
  base_seq: number;
  tick: number;
  keyframe: boolean;
  changed: number[];
  removed: number[];
  checked: boolean;
  held: number;
  check: number;
  probe?: { hex: string; verdict: string };
}
interface Stream {
  budget_bytes_per_s: number;
  check_every: number;
  frames: Frame[];
  final: {
    entities: [number, number, number, number, number, number[], number[], number, number, number, number[] | null, number[] | null][];
    own: null | { entity: number; last_input_seq: number; bits: number[]; movement_kind: number; anim_flags: number; head: boolean; point: boolean };
  };
}
interface RandomFrames {
  seed: number;
  streams: Stream[];
}

const sources: [string, RandomFrames][] = [["committed seed 1", fixture<RandomFrames>("frames/random.json")]];
const fresh = process.env.PLAZA_RANDOM_FRAMES;
if (fresh) sources.push([`fresh (${fresh})`, JSON.parse(readFileSync(fresh, "utf8")) as RandomFrames]);

function verdict(dec: FrameDecoder, bytes: Uint8Array): string {
  try {
    dec.apply(bytes);
    return "ok";
  } catch (e) {
    if (e instanceof FrameError) return e.kind;
    throw e;
  }
}

describe.each(sources)("Rust-encoded random frames: %s", (_name, data) => {
  it("has streams with frames, probes and entities", () => {
    const frames = data.streams.flatMap((s) => s.frames);
    expect(frames.length).toBeGreaterThan(50);
    expect(frames.filter((f) => f.probe).length).toBeGreaterThan(10);
    expect(frames.filter((f) => f.checked).length).toBeGreaterThan(5);
    expect(Math.max(...frames.map((f) => f.held))).toBeGreaterThan(10);
  });

  it.each(data.streams.map((s, i) => [i, s] as const))("stream %i decodes as in Rust", (_i, stream) => {
    const dec = new FrameDecoder();
    for (const [n, f] of stream.frames.entries()) {
      if (f.probe) {
        expect(verdict(dec.clone(), unhex(f.probe.hex)), `probe before frame ${n}`).toBe(f.probe.verdict);
      }
      const d = dec.apply(unhex(f.hex));
      expect({ seq: d.seq, base_seq: d.baseSeq, tick: d.tick, keyframe: d.keyframe, changed: d.changed, removed: d.removed, checked: d.checked }, `frame ${n}`).toEqual({
        seq: f.seq,
        base_seq: f.base_seq,
        tick: f.tick,
        keyframe: f.keyframe,
        changed: f.changed,
        removed: f.removed,
        checked: f.checked,
      });
      expect([dec.size, dec.check()], `frame ${n}`).toEqual([f.held, f.check]);
    }
    const entities = dec.entities().map((e) => {
      const p = e.pose;
      return [e.id, e.generation, e.kind, dec.tier(e.id), dec.poseTick(e.id), p.positionMm, p.velocity, p.yaw, p.movementKind, p.animFlags, p.head, p.pointAtMm];
    });
    expect(entities).toEqual(stream.final.entities);
    const own = dec.own();
    expect(
      own && { entity: own.entity, last_input_seq: own.lastInputSeq, bits: Array.from(own.bits), movement_kind: own.movementKind, anim_flags: own.animFlags, head: own.hasHead, point: own.hasPoint },
    ).toEqual(stream.final.own);
  });
});
