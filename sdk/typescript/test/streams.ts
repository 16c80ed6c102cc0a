// One frame stream of the Rust encoder, as proto/tests/support/random_frames.rs writes it (the
// random streams of fixtures/frames/random.json and the golden scenario stream of
// fixtures/golden/frames.json), and the check that the TypeScript decoder makes of every frame
// exactly what the Rust decoder made.
import { expect } from "vitest";

import { FrameDecoder, FrameError } from "../src/index.js";
import { unhex } from "./fixtures.js";

export interface Frame {
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
export interface Stream {
  budget_bytes_per_s: number;
  check_every: number;
  frames: Frame[];
  final: {
    entities: [number, number, number, number, number, number[], number[], number, number, number, number[] | null, number[] | null][];
    own: null | { entity: number; last_input_seq: number; bits: number[]; movement_kind: number; anim_flags: number; head: boolean; point: boolean };
  };
}
export interface RandomFrames {
  seed: number;
  streams: Stream[];
}

export function verdict(dec: FrameDecoder, bytes: Uint8Array): string {
  try {
    dec.apply(bytes);
    return "ok";
  } catch (e) {
    if (e instanceof FrameError) return e.kind;
    throw e;
  }
}

/** Decodes `stream` frame by frame and compares every result with what the Rust decoder recorded. */
export function checkStream(stream: Stream): void {
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
}
