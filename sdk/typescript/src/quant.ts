/**
 * Quantized poses (docs/PROTOCOL.md §1): what a client holds of every entity, in integers, and
 * the conversions back to world units. Mirrors `plaza_proto::quant`.
 */

/** Position resolution: millimetres per metre. */
export const POSITION_UNITS_PER_M = 1000;
/** Positions are meaningful for |coordinate| ≤ 4,000 m; beyond it they clamp. */
export const POSITION_RANGE_M = 4000;
/** Max per-axis error of a quantized position (0.5 mm rounding plus f32 rounding). */
export const POSITION_ERROR_M = 0.001;
/** Velocity step in m/s (each axis is an i16 count of this step). */
export const VELOCITY_STEP_M_S = Math.fround(0.05);
/** Number of yaw steps in a full turn (one step ≈ 0.70°). */
export const YAW_STEPS = 512;
/** Largest movement kind (0 idle, 1 walk, 2 jog, 3 run). */
export const MOVEMENT_KIND_MAX = 3;

/** `plaza.v1.AnimFlag` bits; the jump count is in bits 8..9. */
export const AnimFlag = {
  GROUNDED: 1,
  FALLING: 2,
  LONG_JUMP: 4,
  LONG_FALL: 8,
  STUNNED: 16,
  SLIDING: 32,
  EMOTING: 64,
  JUMP_SHIFT: 8,
} as const;

export type Vec3 = [number, number, number];

/** A pose in integers: what travels and what a client holds. */
export interface QuantPose {
  /** Millimetres from the room origin (i32 each). */
  positionMm: Vec3;
  /** Steps of 0.05 m/s (i16 each). */
  velocity: Vec3;
  /** Steps of 360/512°, 0..512. */
  yaw: number;
  /** 0 idle, 1 walk, 2 jog, 3 run. */
  movementKind: number;
  /** AnimFlag bits. */
  animFlags: number;
  /** Head IK yaw, pitch in whole degrees. */
  head: [number, number] | null;
  /** Point-at world point in millimetres. */
  pointAtMm: Vec3 | null;
}

/** A float pose in world units (metres, m/s, degrees). */
export interface Pose {
  position: Vec3;
  velocity: Vec3;
  yawDeg: number;
  movementKind: number;
  animFlags: number;
  head: [number, number] | null;
  pointAt: Vec3 | null;
}

/** The all-zero pose. */
export function zeroPose(): Pose {
  return { position: [0, 0, 0], velocity: [0, 0, 0], yawDeg: 0, movementKind: 0, animFlags: 0, head: null, pointAt: null };
}

/** Rust's `f64::round`: to nearest, halves away from zero. */
export function roundHalfAway(x: number): number {
  return x < 0 ? -Math.round(-x) : Math.round(x);
}

function mm(v: number): number {
  const c = Math.min(Math.max(Math.fround(v), -POSITION_RANGE_M), POSITION_RANGE_M);
  if (Number.isNaN(c)) return 0;
  return roundHalfAway(c * POSITION_UNITS_PER_M);
}

/** Millimetres to metres, as the Rust client computes it (`(mm as f64 / 1000) as f32`). */
export function fromMm(v: number): number {
  return Math.fround(v / POSITION_UNITS_PER_M);
}

function clampI16(v: number): number {
  if (Number.isNaN(v)) return 0;
  return Math.min(Math.max(v, -32767), 32767);
}

/** Quantizes a float pose (what the server does once per entity per tick). */
export function quantize(p: Pose): QuantPose {
  let yaw = 0;
  const y = Math.fround(p.yawDeg);
  if (Number.isFinite(y)) {
    let r = y % 360;
    if (r < 0) r += 360;
    yaw = roundHalfAway((r / 360) * YAW_STEPS) % YAW_STEPS;
  }
  const step = VELOCITY_STEP_M_S;
  return {
    positionMm: [mm(p.position[0]), mm(p.position[1]), mm(p.position[2])],
    velocity: p.velocity.map((v) => clampI16(roundHalfAway(Math.fround(v) / step))) as Vec3,
    yaw,
    movementKind: Math.min(p.movementKind, MOVEMENT_KIND_MAX),
    animFlags: p.animFlags & 0xffff,
    head: p.head ? [clampI16(roundHalfAway(Math.fround(p.head[0]))), clampI16(roundHalfAway(Math.fround(p.head[1])))] : null,
    pointAtMm: p.pointAt ? [mm(p.pointAt[0]), mm(p.pointAt[1]), mm(p.pointAt[2])] : null,
  };
}

/** Position in metres. */
export function positionM(q: QuantPose): Vec3 {
  return [fromMm(q.positionMm[0]), fromMm(q.positionMm[1]), fromMm(q.positionMm[2])];
}

/** Yaw in degrees, [0, 360). */
export function yawDeg(q: QuantPose): number {
  return Math.fround((q.yaw * 360) / YAW_STEPS);
}

/** Velocity in m/s. */
export function velocityM(q: QuantPose): Vec3 {
  return [Math.fround(q.velocity[0] * VELOCITY_STEP_M_S), Math.fround(q.velocity[1] * VELOCITY_STEP_M_S), Math.fround(q.velocity[2] * VELOCITY_STEP_M_S)];
}

/** Back to world units (the inverse of {@link quantize} up to its resolution). */
export function toPose(q: QuantPose): Pose {
  return {
    position: positionM(q),
    velocity: velocityM(q),
    yawDeg: yawDeg(q),
    movementKind: q.movementKind,
    animFlags: q.animFlags,
    head: q.head ? [q.head[0], q.head[1]] : null,
    pointAt: q.pointAtMm ? [fromMm(q.pointAtMm[0]), fromMm(q.pointAtMm[1]), fromMm(q.pointAtMm[2])] : null,
  };
}

/**
 * A prop record's orientation (docs/PROTOCOL.md §2.11): `[yaw, pitch, roll]` in degrees, from
 * the yaw field and the head slot (pitch, roll in steps of `360 / YAW_STEPS`; absent: upright).
 * Meaningless for an avatar record.
 */
export function propEulerDeg(q: QuantPose): Vec3 {
  const step = 360 / YAW_STEPS;
  const [pitch, roll] = q.head ?? [0, 0];
  return [yawDeg(q), Math.fround(pitch * step), Math.fround(roll * step)];
}

/**
 * A prop record's orientation as a unit quaternion `[x, y, z, w]`:
 * `Ry(yaw) · Rx(pitch) · Rz(roll)` of {@link propEulerDeg} (yaw about +y, 0° facing +z).
 */
export function propRotation(q: QuantPose): [number, number, number, number] {
  const half = (d: number): number => (d * Math.PI) / 360;
  const [yd, pd, rd] = propEulerDeg(q);
  const [y, p, r] = [half(yd), half(pd), half(rd)];
  const [sy, cy, sp, cp, sr, cr] = [Math.sin(y), Math.cos(y), Math.sin(p), Math.cos(p), Math.sin(r), Math.cos(r)];
  return [cy * sp * cr + sy * cp * sr, sy * cp * cr - cy * sp * sr, cy * cp * sr - sy * sp * cr, cy * cp * cr + sy * sp * sr];
}

/** Whether the quantized velocity is zero. */
export function atRest(q: QuantPose): boolean {
  return q.velocity[0] === 0 && q.velocity[1] === 0 && q.velocity[2] === 0;
}

export function cloneQuantPose(q: QuantPose): QuantPose {
  return {
    positionMm: [q.positionMm[0], q.positionMm[1], q.positionMm[2]],
    velocity: [q.velocity[0], q.velocity[1], q.velocity[2]],
    yaw: q.yaw,
    movementKind: q.movementKind,
    animFlags: q.animFlags,
    head: q.head ? [q.head[0], q.head[1]] : null,
    pointAtMm: q.pointAtMm ? [q.pointAtMm[0], q.pointAtMm[1], q.pointAtMm[2]] : null,
  };
}

// === FNV-1a 32 ===

export const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;

/** Feeds one byte into an FNV-1a 32 state. */
export function fnvByte(h: number, b: number): number {
  return Math.imul(h ^ (b & 0xff), FNV_PRIME) >>> 0;
}

/** Feeds the `n` low bytes of `v`, little endian. */
export function fnvLe(h: number, v: number, n: number): number {
  for (let i = 0; i < n; i++) {
    h = fnvByte(h, v & 0xff);
    v >>>= 8;
  }
  return h;
}

/** FNV-1a 32 of `bytes`. */
export function fnv1a32(bytes: Uint8Array): number {
  let h = FNV_OFFSET;
  for (const b of bytes) h = fnvByte(h, b);
  return h;
}

/** Feeds the canonical bytes of a pose (the frame check's order, §2.6). */
export function hashPose(h: number, q: QuantPose): number {
  for (const v of q.positionMm) h = fnvLe(h, v, 4);
  for (const v of q.velocity) h = fnvLe(h, v, 2);
  h = fnvLe(h, q.yaw, 2);
  h = fnvByte(h, q.movementKind);
  h = fnvLe(h, q.animFlags, 2);
  if (q.head) {
    h = fnvByte(h, 1);
    h = fnvLe(h, q.head[0], 2);
    h = fnvLe(h, q.head[1], 2);
  } else {
    h = fnvByte(h, 0);
  }
  if (q.pointAtMm) {
    h = fnvByte(h, 1);
    for (const v of q.pointAtMm) h = fnvLe(h, v, 4);
  } else {
    h = fnvByte(h, 0);
  }
  return h;
}
