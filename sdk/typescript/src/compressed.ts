/**
 * The 160-bit compressed movement message (`plaza.v1.MovementCompressed`, docs/PROTOCOL.md §3),
 * a port of `plaza_proto::compressed` computed in f32 exactly as the Rust one (every step goes
 * through `Math.fround`), so both produce the same four integers for the same pose.
 */
import { AnimFlag, roundHalfAway, type Pose, type Vec3 } from "./quant.js";

export const TIMESTAMP_BITS = 15;
export const TIMESTAMP_QUANTUM_S = 0.02;
export const TIMESTAMP_BUFFER_S = 2 ** TIMESTAMP_BITS * TIMESTAMP_QUANTUM_S;
export const PARCEL_BITS = 17;
export const CELL_SIZE_M = 16;
export const ROTATION_BITS = 6;
export const HEAD_ROTATION_BITS = 6;
export const HEAD_YAW_MAX_DEG = 180;
export const HEAD_PITCH_MAX_DEG = 90;
export const POINT_AT_AXIS_BITS = 10;
export const POINT_AT_MAX_M = 64;
export const Y_MIN_M = 0;
export const Y_MAX_M = 500;
const SAFE_ZONE = Math.fround(0.05);

/** One velocity tier's bit budget. */
export interface VelocityTier {
  xzBits: number;
  yBits: number;
  velocityBits: number;
  velocityRange: number;
}

export const VELOCITY_TIERS: readonly VelocityTier[] = [
  { xzBits: 10, yBits: 13, velocityBits: 4, velocityRange: 2 },
  { xzBits: 9, yBits: 13, velocityBits: 5, velocityRange: 4 },
  { xzBits: 9, yBits: 12, velocityBits: 5, velocityRange: 8 },
  { xzBits: 8, yBits: 12, velocityBits: 6, velocityRange: 20 },
];

/** The smallest tier whose velocity range holds `speed` (m/s). */
export function velocityTierFromSpeed(speed: number): number {
  const i = VELOCITY_TIERS.findIndex((t) => Math.fround(speed) <= t.velocityRange);
  return i < 0 ? 3 : i;
}

/** Why a compressed message could not be read. */
export class CompressedError extends Error {
  readonly kind = "cell_out_of_range";
  constructor() {
    super("cell index out of range");
    this.name = "CompressedError";
  }
}

const f = Math.fround;

/** `FloatQuantizer::compress` in f32. */
export function quantizeFloat(value: number, min: number, max: number, bits: number): number {
  const maxStep = f(2 ** bits - 1);
  let n = f(f(f(value) - f(min)) / f(f(max) - f(min)));
  if (Number.isNaN(n)) n = 0;
  n = Math.min(Math.max(n, 0), 1);
  return roundHalfAway(f(n * maxStep));
}

/** `FloatQuantizer::decompress` in f32. */
export function dequantizeFloat(q: number, min: number, max: number, bits: number): number {
  const maxStep = f(2 ** bits - 1);
  return f(f(min) + f(f(f(q) / maxStep) * f(f(max) - f(min))));
}

/** The room's grid of 16 m cells (default ±2,048 m). */
export class ParcelEncoder {
  readonly minX: number;
  readonly minZ: number;
  readonly width: number;
  readonly height: number;

  constructor(halfExtentM = 2048) {
    const cells = Math.min(Math.max(Math.ceil(f(f(halfExtentM) / CELL_SIZE_M)), 1), 180);
    this.minX = -cells;
    this.minZ = -cells;
    this.width = 2 * cells;
    this.height = 2 * cells;
  }

  cellOf(x: number, z: number): [number, number] {
    const c = (v: number, min: number, n: number) => {
      let q = Math.floor(f(f(v) / CELL_SIZE_M));
      if (Number.isNaN(q)) q = 0;
      return Math.min(Math.max(q, min), min + n - 1);
    };
    return [c(x, this.minX, this.width), c(z, this.minZ, this.height)];
  }

  encode(cell: [number, number]): number {
    return cell[0] - this.minX + (cell[1] - this.minZ) * this.width;
  }

  decode(index: number): [number, number] {
    if (index >= this.width * this.height) throw new CompressedError();
    return [(index % this.width) + this.minX, Math.floor(index / this.width) + this.minZ];
  }
}

/** Circular timestamp (15 bits at 0.02 s). */
export function compressTimestamp(timestampS: number): number {
  const q = roundHalfAway(Math.max(timestampS, 0) / TIMESTAMP_QUANTUM_S);
  return Number.isFinite(q) ? q % 2 ** TIMESTAMP_BITS : 0;
}

/** Unwraps one sender's circular timestamps: keep one per sender. */
export class TimestampDecoder {
  private last: number | null = null;
  private offset = 0;

  decompress(q: number): number {
    let t = (q % 2 ** TIMESTAMP_BITS) * TIMESTAMP_QUANTUM_S + this.offset;
    if (this.last !== null && t < this.last - 0.75 * TIMESTAMP_BUFFER_S) {
      this.offset += TIMESTAMP_BUFFER_S;
      t += TIMESTAMP_BUFFER_S;
    }
    this.last = t;
    return t;
  }
}

/** The four packed integers (the protobuf message's fields). */
export interface Compressed {
  temporalData: number;
  movementData: bigint;
  headSyncData: number;
  pointAtData: number;
}

/** A decompressed message. */
export interface Decompressed {
  pose: Pose;
  timestampS: number;
  tier: number;
  /** Head IK enables per axis, `[yaw, pitch]` (bits 13 and 12 of `headSyncData`). */
  headEnabled: [boolean, boolean];
  /** `Movement.is_instant` (bit {@link INSTANT_BIT} of `headSyncData`). */
  isInstant: boolean;
}

/** Bit of `headSyncData` that carries `Movement.is_instant` (Plaza's addition, as in Rust). */
export const INSTANT_BIT = 29;

/** Per-message options of {@link MovementCodec.compress}. */
export interface CompressOptions {
  /** A placement, not a walk (`is_instant`). */
  instant?: boolean;
  /** Head IK enables `[yaw, pitch]` (default: both, when the pose has a head). */
  headEnabled?: [boolean, boolean];
}

/**
 * The speed (m/s) a sender picks its tier by (seed 000, as `plaza_proto::compressed::tier_speed`):
 * the distance from its last sent message's position over the time since, never below the
 * message's own largest velocity component; the first message, an instant one and a
 * non-increasing timestamp use that velocity alone.
 */
export function tierSpeed(lastSent: { position: Vec3; timestampS: number } | null, position: Vec3, velocity: Vec3, timestampS: number, instant: boolean): number {
  const own = Math.max(Math.abs(f(velocity[0])), Math.abs(f(velocity[1])), Math.abs(f(velocity[2])));
  let travelled = 0;
  if (lastSent && !instant && timestampS > lastSent.timestampS) {
    const d = Math.hypot(f(position[0]) - f(lastSent.position[0]), f(position[1]) - f(lastSent.position[1]), f(position[2]) - f(lastSent.position[2]));
    travelled = d / (timestampS - lastSent.timestampS);
  }
  const s = Math.max(travelled, own);
  return Number.isFinite(s) ? s : VELOCITY_TIERS[3]!.velocityRange;
}

function signedCompress(v: number, range: number, bits: number): number {
  const q = quantizeFloat(Math.abs(f(v)), 0, range, bits - 1);
  return q * 2 + (f(v) < 0 && q !== 0 ? 1 : 0);
}

function signedDecompress(q: number, range: number, bits: number): number {
  const m = dequantizeFloat(q >>> 1, 0, range, bits - 1);
  return q & 1 ? -m : m;
}

function sqrtCompress(v: number): number {
  let mag = f(Math.sqrt(Math.min(Math.max(f(Math.abs(f(v)) / POINT_AT_MAX_M), 0), 1)));
  if (Number.isNaN(mag)) mag = 0;
  const q = quantizeFloat(mag, 0, 1, POINT_AT_AXIS_BITS - 1);
  return q * 2 + (f(v) < 0 && q !== 0 ? 1 : 0);
}

function sqrtDecompress(q: number): number {
  const m = dequantizeFloat(q >>> 1, 0, 1, POINT_AT_AXIS_BITS - 1);
  const v = f(f(m * m) * POINT_AT_MAX_M);
  return q & 1 ? -v : v;
}

/** Compresses and decompresses movement for one room's cell grid. */
export class MovementCodec {
  constructor(readonly parcels: ParcelEncoder = new ParcelEncoder()) {}

  /**
   * Packs a pose (the sender's clock `timestampS`, velocity `tier` 0..3); `opts.instant` sets
   * the instant bit, `opts.headEnabled` the head axes (a disabled axis packs 0).
   */
  compress(p: Pose, timestampS: number, tier: number, opts: CompressOptions = {}): Compressed {
    tier = Math.min(tier, 3);
    const cfg = VELOCITY_TIERS[tier]!;
    let yr = f(p.yawDeg) % 360;
    if (yr < 0) yr += 360;
    const yaw = quantizeFloat(f(yr), 0, 360, ROTATION_BITS) % (1 << ROTATION_BITS);
    const fl = p.animFlags;
    const bit = (flag: number) => ((fl & flag) !== 0 ? 1 : 0);
    const jumps = (fl >> AnimFlag.JUMP_SHIFT) & 3;
    let t = tier;
    t = (t << ROTATION_BITS) | yaw;
    t = (t << 1) | bit(AnimFlag.LONG_FALL);
    t = (t << 1) | bit(AnimFlag.FALLING);
    t = (t << 1) | bit(AnimFlag.LONG_JUMP);
    t = (t << 2) | jumps;
    t = (t << 1) | bit(AnimFlag.GROUNDED);
    t = (t << 1) | bit(AnimFlag.SLIDING);
    t = (t << 2) | Math.min(p.movementKind, 3);
    t = ((t << TIMESTAMP_BITS) | compressTimestamp(timestampS)) >>> 0;

    const [x, y, z] = p.position.map(f) as Vec3;
    const cell = this.parcels.cellOf(x, z);
    const origin = [cell[0] * CELL_SIZE_M, cell[1] * CELL_SIZE_M];
    const vs = p.velocity.map(f) as Vec3;
    const sq = f(f(f(vs[0] * vs[0]) + f(vs[1] * vs[1])) + f(vs[2] * vs[2]));
    const v: Vec3 = sq < SAFE_ZONE ? [0, 0, 0] : vs;
    const vb = BigInt(cfg.velocityBits);
    let m = BigInt(signedCompress(v[2], cfg.velocityRange, cfg.velocityBits));
    m = (m << vb) | BigInt(signedCompress(v[1], cfg.velocityRange, cfg.velocityBits));
    m = (m << vb) | BigInt(signedCompress(v[0], cfg.velocityRange, cfg.velocityBits));
    m = (m << BigInt(cfg.yBits)) | BigInt(quantizeFloat(y, Y_MIN_M, Y_MAX_M, cfg.yBits));
    const rel = (a: number, o: number) => quantizeFloat(f(a - o), 0, CELL_SIZE_M, cfg.xzBits);
    m = (m << BigInt(cfg.xzBits)) | BigInt(rel(z, origin[1]!));
    m = (m << BigInt(cfg.xzBits)) | BigInt(rel(x, origin[0]!));
    m = (m << BigInt(PARCEL_BITS)) | BigInt(this.parcels.encode(cell));

    let head = 0;
    if (p.head) {
      const hy = quantizeFloat(p.head[0], -HEAD_YAW_MAX_DEG, HEAD_YAW_MAX_DEG, HEAD_ROTATION_BITS);
      const hp = quantizeFloat(p.head[1], -HEAD_PITCH_MAX_DEG, HEAD_PITCH_MAX_DEG, HEAD_ROTATION_BITS);
      const [yawOn, pitchOn] = opts.headEnabled ?? [true, true];
      head = (yawOn ? (1 << 13) | (hy << HEAD_ROTATION_BITS) : 0) | (pitchOn ? (1 << 12) | hp : 0);
    }
    if (opts.instant) head |= 1 << INSTANT_BIT;
    head = (head | (bit(AnimFlag.STUNNED) << 30) | (bit(AnimFlag.EMOTING) << 31)) >>> 0;

    let point = 0;
    if (p.pointAt) {
      const a = p.pointAt;
      const axis = (i: number) => sqrtCompress(f(f(a[i]!) - f(p.position[i]!)));
      point = ((1 << 30) | (axis(2) << (2 * POINT_AT_AXIS_BITS)) | (axis(1) << POINT_AT_AXIS_BITS) | axis(0)) >>> 0;
    }
    return { temporalData: t, movementData: BigInt.asUintN(64, m), headSyncData: head, pointAtData: point };
  }

  /** Unpacks a message; `ts` is the sender's timestamp decoder. Throws {@link CompressedError}. */
  decompress(c: Compressed, ts: TimestampDecoder): Decompressed {
    let t = c.temporalData >>> 0;
    const stamp = t & (2 ** TIMESTAMP_BITS - 1);
    t >>>= TIMESTAMP_BITS;
    const movementKind = t & 3;
    t >>>= 2;
    let flags = 0;
    const take = (flag: number) => {
      if (t & 1) flags |= flag;
      t >>>= 1;
    };
    take(AnimFlag.SLIDING);
    take(AnimFlag.GROUNDED);
    const jumps = t & 3;
    t >>>= 2;
    take(AnimFlag.LONG_JUMP);
    take(AnimFlag.FALLING);
    take(AnimFlag.LONG_FALL);
    flags |= jumps << AnimFlag.JUMP_SHIFT;
    const yawQ = t & ((1 << ROTATION_BITS) - 1);
    t >>>= ROTATION_BITS;
    const tier = t & 3;
    const cfg = VELOCITY_TIERS[tier]!;

    let m = BigInt.asUintN(64, c.movementData);
    const takeBits = (n: number) => {
      const v = Number(m & ((1n << BigInt(n)) - 1n));
      m >>= BigInt(n);
      return v;
    };
    const cell = this.parcels.decode(takeBits(PARCEL_BITS));
    const xRel = takeBits(cfg.xzBits);
    const zRel = takeBits(cfg.xzBits);
    const yQ = takeBits(cfg.yBits);
    const v: Vec3 = [0, 0, 0];
    for (let i = 0; i < 3; i++) v[i] = signedDecompress(takeBits(cfg.velocityBits), cfg.velocityRange, cfg.velocityBits);
    const position: Vec3 = [
      f(cell[0] * CELL_SIZE_M + dequantizeFloat(xRel, 0, CELL_SIZE_M, cfg.xzBits)),
      dequantizeFloat(yQ, Y_MIN_M, Y_MAX_M, cfg.yBits),
      f(cell[1] * CELL_SIZE_M + dequantizeFloat(zRel, 0, CELL_SIZE_M, cfg.xzBits)),
    ];

    const h = c.headSyncData >>> 0;
    if (h & (1 << 30)) flags |= AnimFlag.STUNNED;
    if (h & 0x80000000) flags |= AnimFlag.EMOTING;
    const hm = (1 << HEAD_ROTATION_BITS) - 1;
    let head: [number, number] | null = null;
    if (h & (3 << 12)) {
      const yawOn = (h & (1 << 13)) !== 0;
      const pitchOn = (h & (1 << 12)) !== 0;
      const hy = dequantizeFloat((h >>> HEAD_ROTATION_BITS) & hm, -HEAD_YAW_MAX_DEG, HEAD_YAW_MAX_DEG, HEAD_ROTATION_BITS);
      const hp = dequantizeFloat(h & hm, -HEAD_PITCH_MAX_DEG, HEAD_PITCH_MAX_DEG, HEAD_ROTATION_BITS);
      head = [yawOn ? hy : 0, pitchOn ? hp : 0];
    }
    const pa = c.pointAtData >>> 0;
    let pointAt: Vec3 | null = null;
    if (pa & (1 << 30)) {
      const am = (1 << POINT_AT_AXIS_BITS) - 1;
      const axis = (i: number) => sqrtDecompress((pa >>> (i * POINT_AT_AXIS_BITS)) & am);
      pointAt = [f(position[0] + axis(0)), f(position[1] + axis(1)), f(position[2] + axis(2))];
    }
    return {
      pose: { position, velocity: v, yawDeg: dequantizeFloat(yawQ, 0, 360, ROTATION_BITS), movementKind, animFlags: flags, head, pointAt },
      timestampS: ts.decompress(stamp),
      tier,
      headEnabled: [(h & (1 << 13)) !== 0, (h & (1 << 12)) !== 0],
      isInstant: (h & (1 << INSTANT_BIT)) !== 0,
    };
  }
}

const DEFAULT_CODEC = new MovementCodec();

/**
 * A sender of compressed movement (as `plaza_proto::compressed::CompressedSender`): packs each
 * pose with the tier {@link tierSpeed} picks from the last message it sent. Keep one per session.
 */
export class CompressedSender {
  private last: { position: Vec3; timestampS: number } | null = null;

  constructor(readonly codec: MovementCodec = DEFAULT_CODEC) {}

  /** Packs `p` and remembers it as the last sent message; returns the tier too. */
  encode(p: Pose, timestampS: number, opts: CompressOptions = {}): { compressed: Compressed; tier: number } {
    const tier = velocityTierFromSpeed(tierSpeed(this.last, p.position, p.velocity, timestampS, !!opts.instant));
    const compressed = this.codec.compress(p, timestampS, tier, opts);
    this.last = { position: [p.position[0], p.position[1], p.position[2]], timestampS };
    return { compressed, tier };
  }

  /** Forget the last sent message (the next one picks its tier from its own speed). */
  reset(): void {
    this.last = null;
  }
}

/** {@link MovementCodec.compress} over the default grid (±2,048 m). */
export function compress(p: Pose, timestampS: number, tier: number, opts: CompressOptions = {}): Compressed {
  return DEFAULT_CODEC.compress(p, timestampS, tier, opts);
}

/** {@link MovementCodec.decompress} over the default grid (±2,048 m). */
export function decompress(c: Compressed, ts: TimestampDecoder): Decompressed {
  return DEFAULT_CODEC.decompress(c, ts);
}
