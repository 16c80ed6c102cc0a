// The shared golden fixtures (fixtures/golden/golden.json), the same file proto/tests/proto/golden.rs
// asserts: the TypeScript decoder must accept exactly these bytes, and the TypeScript encoders of
// the envelopes and the compressed movement message must produce them.
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";

import { FrameDecoder, compress, decompress, ownFromPose, ownPose, propEulerDeg, propRotation, quantize, TimestampDecoder, type Pose, zeroPose } from "../src/index.js";
import { ClientEnvelopeSchema, MovementCompressedSchema, ServerEnvelopeSchema, SnapshotFrameSchema } from "../src/gen/plaza/v1/client_pb.js";
import { fixture, hex, unhex } from "./fixtures.js";
import { checkStream, type Stream } from "./streams.js";

interface Golden {
  keyframe_hex: string;
  delta_hex: string;
  server_envelope_hex: string;
  client_envelope_hex: string;
  prop_keyframe_hex: string;
}
const golden = fixture<Golden>("golden/golden.json");

const pose = (p: Partial<Pose>): Pose => ({ ...zeroPose(), ...p });
const walker = pose({ position: [1, 0, 2], velocity: [1.4, 0, 0], yawDeg: 90, movementKind: 1, animFlags: 1 });
const prop = pose({ position: [-3.5, 0.75, 4.25] });
const looker = pose({ position: [0.5, 0, -1], animFlags: 1, head: [10, -5] });
const ownA = ownFromPose(9, 41, pose({ position: [0.25, 0, 0.5], animFlags: 1 }));
const ownB = ownFromPose(9, 42, pose({ position: [0.3, 0, 0.5], animFlags: 1 }));

describe("golden frames", () => {
  it("decodes the keyframe and the delta to the documented state", () => {
    const dec = new FrameDecoder();
    const k = dec.apply(unhex(golden.keyframe_hex));
    expect([k.seq, k.tick, k.keyframe, k.checked]).toEqual([1, 100, true, true]);
    expect(k.changed).toEqual([1, 2, 5]);
    expect(dec.entities()).toEqual([
      { id: 1, generation: 0, kind: 0, pose: quantize(walker) },
      { id: 2, generation: 0, kind: 1, pose: quantize(prop) },
      { id: 5, generation: 0, kind: 0, pose: quantize(looker) },
    ]);
    expect(dec.own()).toEqual(ownA);

    const d = dec.apply(unhex(golden.delta_hex));
    expect([d.seq, d.baseSeq, d.tick, d.keyframe]).toEqual([2, 1, 101, false]);
    expect(d.changed).toEqual([1, 7]);
    expect(d.removed).toEqual([2]);
    expect(dec.entities()).toEqual([
      { id: 1, generation: 0, kind: 0, pose: quantize({ ...walker, position: [1.07, 0, 2] }) },
      { id: 5, generation: 0, kind: 0, pose: quantize(looker) },
      { id: 7, generation: 0, kind: 0, pose: quantize(pose({ position: [2, 0, 2], animFlags: 1 })) },
    ]);
    expect(dec.own()).toEqual(ownB);
    expect(ownPose(dec.own()!).position).toEqual([Math.fround(0.3), 0, 0.5]);
    // The walker's held position is exact millimetres.
    expect(dec.get(1)!.pose.positionMm).toEqual([1070, 0, 2000]);
  });

  it("decodes a tilted prop's orientation (the head slot of a prop record)", () => {
    const dec = new FrameDecoder();
    dec.apply(unhex(golden.prop_keyframe_hex));
    const r = dec.get(1_048_577)!;
    expect([r.kind, r.pose.yaw, r.pose.head, r.pose.positionMm]).toEqual([1, 43, [14, -28], [1000, 250, 2000]]);
    const [y, p, rl] = propEulerDeg(r.pose);
    expect(y).toBeCloseTo(30.234375, 4);
    expect(p).toBeCloseTo(9.84375, 4);
    expect(rl).toBeCloseTo(-19.6875, 4);
    // Within a step of Ry(30°) · Rx(10°) · Rz(-20°).
    const half = (d: number): [number, number] => [Math.sin((d * Math.PI) / 360), Math.cos((d * Math.PI) / 360)];
    const [[sy, cy], [sp, cp], [sr, cr]] = [half(30), half(10), half(-20)];
    const want = [cy * sp * cr + sy * cp * sr, sy * cp * cr - cy * sp * sr, cy * cp * sr - sy * sp * cr, cy * cp * cr + sy * sp * sr];
    const q = propRotation(r.pose);
    const dot = Math.abs(q.reduce((a, v, i) => a + v * want[i]!, 0));
    expect((2 * Math.acos(Math.min(1, dot)) * 180) / Math.PI).toBeLessThan(0.7);
    // An upright prop has no tilt: the canonical keyframe's prop is unchanged.
    const k = new FrameDecoder();
    k.apply(unhex(golden.keyframe_hex));
    expect(propEulerDeg(k.get(2)!.pose)).toEqual([0, 0, 0]);
  });

  it("refuses the delta without its base, and keeps its state", () => {
    const dec = new FrameDecoder();
    expect(() => dec.apply(unhex(golden.delta_hex))).toThrowError(expect.objectContaining({ kind: "chain_break" }));
    expect(dec.size).toBe(0);
    dec.apply(unhex(golden.keyframe_hex));
    const check = dec.check();
    const bad = unhex(golden.delta_hex);
    bad[bad.length - 1] = 0xff;
    expect(() => dec.apply(bad)).toThrowError(expect.objectContaining({ name: "FrameError" }));
    expect(dec.check()).toBe(check);
    expect(dec.lastSeq()).toBe(1);
  });

  it("every truncation of the keyframe is a typed error", () => {
    const key = unhex(golden.keyframe_hex);
    for (let n = 0; n < key.length; n++) {
      const dec = new FrameDecoder();
      let err: unknown;
      try {
        dec.apply(key.subarray(0, n));
      } catch (e) {
        err = e;
      }
      expect(err, `prefix ${n}`).toMatchObject({ name: "FrameError" });
    }
  });
});

describe("golden envelopes", () => {
  it("encodes the server envelope to the golden bytes and back", () => {
    const env = create(ServerEnvelopeSchema, {
      sequence: 7,
      sentAtMs: 1_700_000_000_000n,
      body: { case: "snapshotFrame", value: create(SnapshotFrameSchema, { frame: unhex(golden.delta_hex) }) },
    });
    const bytes = toBinary(ServerEnvelopeSchema, env);
    expect(hex(bytes)).toBe(golden.server_envelope_hex);
    const back = fromBinary(ServerEnvelopeSchema, unhex(golden.server_envelope_hex));
    expect(back.sentAtMs).toBe(1_700_000_000_000n);
    expect(back.body.case).toBe("snapshotFrame");
  });

  it("compresses the movement and encodes the client envelope to the golden bytes", () => {
    const p = pose({ position: [10, 1.5, -20], velocity: [1, 0, -1], yawDeg: 200, movementKind: 1, animFlags: 1 });
    const c = compress(p, 12.5, 1);
    const env = create(ClientEnvelopeSchema, {
      sessionId: 42n,
      sequence: 3,
      sentAtMs: 1_700_000_000_050n,
      body: { case: "movementCompressed", value: create(MovementCompressedSchema, c) },
    });
    expect(hex(toBinary(ClientEnvelopeSchema, env))).toBe(golden.client_envelope_hex);
    const back = fromBinary(ClientEnvelopeSchema, unhex(golden.client_envelope_hex));
    expect(back.sessionId).toBe(42n);
    expect(typeof back.sessionId).toBe("bigint");
    if (back.body.case !== "movementCompressed") throw new Error("wrong body");
    const d = decompress(back.body.value, new TimestampDecoder());
    expect(d.tier).toBe(1);
    expect(d.timestampS).toBeCloseTo(12.5, 9);
    // 200° is step 35 of the 63-step yaw quantizer (35 × 360 / 63 = 200 exactly); a 64-step
    // reading would give 196.875°.
    expect(back.body.value.temporalData >>> 24 & 0x3f).toBe(35);
    expect(d.pose.yawDeg).toBeCloseTo(200, 3);
    expect(Math.abs(d.pose.position[0] - 10)).toBeLessThan(0.02);
    expect(Math.abs(d.pose.position[2] + 20)).toBeLessThan(0.02);
  });
});

// The golden scenario stream (fixtures/golden/frames.json, docs/PROTOCOL.md §4.1): one frame per
// part of the format the canonical pair does not reach (list and bitmap selection, exact and
// scaled prediction, velocity and yaw deltas, a multi-group record, head and point deltas, a
// generation change, OWN_CLEAR, an own state with head and point).
describe("golden scenario frames", () => {
  const scenario = fixture<Stream & { about: string }>("golden/frames.json");
  it("decode frame by frame to what the Rust decoder holds", () => {
    expect(scenario.frames.length).toBe(6);
    checkStream(scenario);
  });
  it("name what each frame shows", () => {
    for (const f of scenario.frames) expect((f as { shows?: string }).shows ?? "").not.toBe("");
  });
});
