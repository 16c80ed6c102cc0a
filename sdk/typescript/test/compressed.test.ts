// The compressed movement sender (docs/PROTOCOL.md §3), the same rules as plaza_proto::compressed
// (its unit tests use the same cases): the instant bit, per-axis head enables, the tier picked
// from distance over time since the last sent message.
import { describe, expect, it } from "vitest";

import { CompressedSender, INSTANT_BIT, TimestampDecoder, compress, decompress, tierSpeed, zeroPose, type Pose, type Vec3 } from "../src/index.js";

const pose = (position: Vec3, velocity: Vec3): Pose => ({ ...zeroPose(), position, velocity, yawDeg: 90, movementKind: 1, animFlags: 1 });

describe("compressed movement sender", () => {
  it("carries the instant bit and the head enables per axis", () => {
    for (const yawOn of [true, false]) {
      for (const pitchOn of [true, false]) {
        for (const instant of [true, false]) {
          const p = { ...pose([3, 0, 4], [1, 0, 0]), head: [40, -30] as [number, number] };
          const c = compress(p, 7.5, 0, { instant, headEnabled: [yawOn, pitchOn] });
          const d = decompress(c, new TimestampDecoder());
          expect(d.headEnabled).toEqual([yawOn, pitchOn]);
          expect(d.isInstant).toBe(instant);
          expect(((c.headSyncData >>> INSTANT_BIT) & 1) === 1).toBe(instant);
          if (!yawOn) expect(c.headSyncData & (0x3f << 6)).toBe(0);
          if (!pitchOn) expect(c.headSyncData & 0x3f).toBe(0);
          if (!yawOn && !pitchOn && !instant) expect(c.headSyncData).toBe(0);
        }
      }
    }
    // Without options: as before (both axes when there is a head, no instant).
    const d = decompress(compress({ ...pose([0, 0, 0], [0, 0, 0]), head: [10, 5] }, 1, 0), new TimestampDecoder());
    expect([d.headEnabled, d.isInstant]).toEqual([[true, true], false]);
  });

  it("picks the tier from distance over time since the last sent message", () => {
    const s = new CompressedSender();
    const tier = (p: Vec3, v: Vec3, t: number, instant = false) => s.encode(pose(p, v), t, { instant }).tier;
    expect(tier([0, 0, 0], [1.4, 0, 0], 1.0, true)).toBe(0);
    expect(tier([0.14, 0, 0], [1.4, 0, 0], 1.1)).toBe(0);
    expect(tier([0.49, 0, 0], [3.5, 0, 0], 1.2)).toBe(1);
    // Carried: no velocity, 0.7 m in 0.1 s.
    expect(tier([1.19, 0, 0], [0, 0, 0], 1.3)).toBe(2);
    expect(tier([31.19, 0, 0], [0, 0, 0], 3.3)).toBe(3);
    // Never below its own velocity.
    expect(tier([31.2, 0, 0], [3.9, 0, 0], 4.3)).toBe(1);
    // A placement far away and a non-increasing timestamp are not speeds.
    expect(tier([500, 0, 0], [0, 0, 0], 4.4, true)).toBe(0);
    expect(tier([510, 0, 0], [0, 0, 0], 4.4)).toBe(0);
    s.reset();
    expect(tier([0, 0, 0], [0, 0, 0], 9.0)).toBe(0);
    expect(tierSpeed({ position: [0, 0, 0], timestampS: 0 }, [3, 4, 0], [0, 0, 0], 1, false)).toBe(5);
  });
});
