// Own-avatar prediction and Rapier prop pickup prediction: unit cases, and the recorded exchange
// of a real `plaza up` (fixtures/prediction/pickup.json, written by the live test with
// PLAZA_RECORD_PICKUP set) replayed frame by frame: the visible misprediction lasts at most one
// frame (seed 004).
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";

import { CorrectionSchema, PropEventSchema } from "../src/gen/plaza/v1/client_pb.js";
import { DEFAULT_HOLD_OFFSET, OwnPredictor, PropPredictor } from "../src/prediction.js";
import { zeroPose, type Pose, type Vec3 } from "../src/quant.js";
import type { OwnState } from "../src/frame.js";
import { replay, type RecordedExchange } from "./pickup.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

function pose(x: number, z = 0): Pose {
  return { ...zeroPose(), position: [x, 0, z] };
}

function f32bits(x: number): number {
  const b = new DataView(new ArrayBuffer(4));
  b.setFloat32(0, x, true);
  return b.getUint32(0, true);
}

function own(seq: number, p: Vec3): OwnState {
  const bits = new Uint32Array(12);
  for (let i = 0; i < 3; i++) bits[i] = f32bits(p[i]!);
  return { entity: 1, lastInputSeq: seq, bits, movementKind: 0, animFlags: 0, hasHead: false, hasPoint: false };
}

describe("OwnPredictor", () => {
  it("shows a local move at once and keeps it when the server agrees", () => {
    const p = new OwnPredictor();
    p.local(1, pose(1));
    p.local(2, pose(2));
    expect(p.pose()!.position).toEqual([1 + 1, 0, 0]);
    expect(p.serverOwn(own(1, [1.0005, 0, 0]))).toBeLessThan(0.01);
    expect(p.pose()!.position).toEqual([2, 0, 0]);
    expect(p.rebases).toBe(0);
    expect(p.pendingCount()).toBe(1);
  });

  it("rebases the shown pose by the server's difference, keeping later inputs' motion", () => {
    const p = new OwnPredictor();
    p.local(1, pose(1));
    p.local(2, pose(2));
    p.local(3, pose(3));
    // The server stopped input 1 at a wall 0.5 m short.
    const d = p.serverOwn(own(1, [0.5, 0, 0]));
    expect(d).toBeCloseTo(0.5, 5);
    expect(p.pose()!.position[0]).toBeCloseTo(2.5, 5);
    expect(p.rebases).toBe(1);
    // Input 3's prediction was rebased too: the server agreeing with it is no new rebase.
    p.serverOwn(own(3, [2.5, 0, 0]));
    expect(p.rebases).toBe(1);
    expect(p.pendingCount()).toBe(0);
  });

  it("snaps on a correction and drops the inputs predicted after it", () => {
    const p = new OwnPredictor();
    for (let i = 1; i <= 5; i++) p.local(i, pose(i * 10));
    const back = p.correction(create(CorrectionSchema, { position: { x: 1, y: 0, z: 2 }, lastInputSequence: 2 }));
    expect(back.position).toEqual([1, 0, 2]);
    expect(p.pose()!.position).toEqual([1, 0, 2]);
    expect(p.pendingCount()).toBe(0);
    expect(p.snaps).toBe(1);
  });

  it("handles sequence wrap and ignores non-finite input", () => {
    const p = new OwnPredictor();
    p.local(0xffff_fffe, pose(1));
    p.local(1, pose(2));
    p.local(2, { ...pose(3), position: [NaN, 0, 0] });
    expect(p.pose()!.position).toEqual([2, 0, 0]);
    p.serverOwn(own(1, [2, 0, 0]));
    expect(p.pendingCount()).toBe(0);
  });
});

describe("PropPredictor (Rapier)", () => {
  const feet: Vec3 = [1, 0, 1];
  const hand: Vec3 = [feet[0] + DEFAULT_HOLD_OFFSET[0], feet[1] + DEFAULT_HOLD_OFFSET[1], feet[2] + DEFAULT_HOLD_OFFSET[2]];

  it("puts a grabbed prop in hand at once; the answer before the next snapshot frame closes the mismatch", async () => {
    const pp = await PropPredictor.create();
    pp.setOwnEntity(7);
    pp.serverPose(3, [2, 0.15, 1]);
    for (let f = 0; f < 8; f++) pp.step(feet);
    pp.serverFrame();
    expect(pp.view(3)!.heldByMe).toBe(false);
    // The local grab: in hand in the very next render frame.
    expect(pp.grab(3, 42)).toBe(true);
    const v8 = pp.step(feet).find((v) => v.propId === 3)!;
    expect(v8.heldByMe).toBe(true);
    expect(v8.mispredicted).toBe(true);
    for (let i = 0; i < 3; i++) expect(v8.position[i]).toBeCloseTo(hand[i]!, 3);
    // A snapshot frame already on its way when the grab left: one frame of misprediction.
    pp.serverFrame();
    expect(pp.maxVisibleMispredictionFrames).toBe(1);
    // The server's PropEvent names us, ahead of the next frame.
    pp.serverEvent(create(PropEventSchema, { propId: 3, holderEntity: 7, revision: 1n, kind: 1 }));
    pp.serverFrame();
    const v9 = pp.step(feet).find((v) => v.propId === 3)!;
    expect(v9.mispredicted).toBe(false);
    expect(v9.heldByMe).toBe(true);
    expect(pp.maxVisibleMispredictionFrames).toBe(1);
    // The prop follows the hand.
    const moved: Vec3 = [3, 0, 1];
    pp.step(moved);
    const v = pp.step(moved).find((x) => x.propId === 3)!;
    expect(v.position[0]).toBeCloseTo(moved[0] + DEFAULT_HOLD_OFFSET[0], 3);
    pp.free();
  });

  it("counts a late answer as more than one frame", async () => {
    const pp = await PropPredictor.create();
    pp.setOwnEntity(7);
    pp.grab(5, 1);
    pp.step(feet);
    pp.serverFrame();
    pp.serverFrame();
    pp.serverFrame();
    expect(pp.maxVisibleMispredictionFrames).toBe(3);
    pp.free();
  });

  it("undoes a refused grab: the prop goes back to the server's pose", async () => {
    const pp = await PropPredictor.create();
    pp.setOwnEntity(7);
    pp.serverPose(3, [2, 0.15, 1]);
    pp.step(feet);
    pp.grab(3, 43);
    pp.step(feet);
    pp.serverFrame();
    pp.refused(43);
    pp.serverFrame();
    const v = pp.step(feet).find((x) => x.propId === 3)!;
    expect(v.heldByMe).toBe(false);
    expect(v.mispredicted).toBe(false);
    expect(v.position[0]).toBeCloseTo(2, 3);
    expect(pp.undone).toBe(1);
    expect(pp.maxVisibleMispredictionFrames).toBe(1);
    pp.free();
  });

  it("does not predict a grab of a prop the server says someone else holds", async () => {
    const pp = await PropPredictor.create();
    pp.setOwnEntity(7);
    pp.serverEvent(create(PropEventSchema, { propId: 3, holderEntity: 9, revision: 1n, kind: 1 }));
    expect(pp.grab(3, 44)).toBe(false);
    expect(pp.step(feet).find((x) => x.propId === 3)!.heldByMe).toBe(false);
    pp.free();
  });
});

describe("the recorded exchange of a real plaza up (fixtures/prediction/pickup.json)", () => {
  const recorded = JSON.parse(readFileSync(join(ROOT, "fixtures", "prediction", "pickup.json"), "utf8")) as { exchanges: RecordedExchange[] };

  it("holds an accepted and a refused grab", () => {
    expect(recorded.exchanges.map((x) => x.outcome).sort()).toEqual(["accepted", "refused"]);
  });

  for (const x of recorded.exchanges) {
    it(`${x.outcome}: the visible misprediction lasts at most one snapshot frame`, async () => {
      const { predictor, frames } = await replay(x);
      expect(frames.length).toBeGreaterThan(2);
      expect(predictor.maxVisibleMispredictionFrames).toBeLessThanOrEqual(1);
      const last = frames[frames.length - 1]!;
      expect(last.mispredicted).toBe(false);
      expect(last.heldByMe).toBe(x.outcome === "accepted");
      expect(predictor.undone).toBe(x.outcome === "refused" ? 1 : 0);
      predictor.free();
    });
  }
});
