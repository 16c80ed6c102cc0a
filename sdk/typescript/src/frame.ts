/**
 * The snapshot-frame decoder (docs/PROTOCOL.md §2), a port of `plaza_proto::frame::FrameDecoder`
 * pinned to the same golden fixtures and to random frames of the Rust encoder.
 *
 * A client holds exactly what the server says it should: every frame applies onto the state the
 * previous one left (an ordered, reliable stream), a keyframe starts over, and a periodic FNV-1a
 * check proves the held state. On any error the decoder keeps its state and throws a
 * {@link FrameError}; the client then sends `Resync` (see `client.ts`).
 *
 * Not here: the encoder (the server's), smoothing (`smoothing.ts`), transport.
 */
import { BitReader } from "./bits.js";
import { FrameError } from "./errors.js";
import { FNV_OFFSET, atRest, cloneQuantPose, fnvByte, fnvLe, hashPose, YAW_STEPS, type Pose, type QuantPose, type Vec3 } from "./quant.js";

/** Frame format version, the high nibble of the first byte. */
export const FRAME_VERSION = 1;
export const FLAG_KEYFRAME = 0x01;
export const FLAG_CHECK = 0x02;
export const FLAG_OWN = 0x04;
export const FLAG_OWN_CLEAR = 0x08;
/** Largest frame the decoder accepts. */
export const MAX_FRAME_BYTES = 1 << 20;
/** Most entities a client may hold. */
export const MAX_ENTITIES = 1 << 16;
/** Record kind of an avatar. */
export const KIND_AVATAR = 0;
/** Record kind of a prop. */
export const KIND_PROP = 1;
/** A prop's entity id is `PROP_ENTITY_BASE + prop_id`. */
export const PROP_ENTITY_BASE = 1048576;

const G_MOTION = 0x01;
const G_STATE = 0x02;
const G_HEAD = 0x04;
const G_POINT = 0x08;
const G_TIER = 0x10;

const K_POS = 1;
const K_VEL = 0;
const K_YAW = 0;
const K_TICK = 1;
const K_SEL_GAP = 2;

const I32_MIN = -2147483648;
const I32_MAX = 2147483647;

/** One entity as a client holds it. */
export interface EntityRecord {
  id: number;
  generation: number;
  /** 0 avatar, 1 prop. */
  kind: number;
  pose: QuantPose;
}

/**
 * The client's own avatar at full precision (bit-exact f32, kept as bit patterns so that every
 * float, NaN payloads included, hashes as the server's).
 */
export interface OwnState {
  entity: number;
  lastInputSeq: number;
  /** f32 bit patterns: position 3, velocity 3, yaw, head 2 (0 when absent), point 3 (0 when absent). */
  bits: Uint32Array;
  movementKind: number;
  animFlags: number;
  hasHead: boolean;
  hasPoint: boolean;
}

/** What a frame told the client. */
export interface DecodedFrame {
  seq: number;
  baseSeq: number;
  tick: number;
  keyframe: boolean;
  /** Ids whose record changed or arrived, ascending. */
  changed: number[];
  /** Ids removed (a new generation is removed and in `changed`), ascending. */
  removed: number[];
  /** Whether the frame carried a check (and it matched). */
  checked: boolean;
}

interface Held {
  tier: number;
  rec: EntityRecord;
  prevPos: Vec3;
  poseTick: number;
  prevTick: number;
}

const F32 = new Float32Array(1);
const U32 = new Uint32Array(F32.buffer);

/** The f32 value of a bit pattern. */
export function f32FromBits(bits: number): number {
  U32[0] = bits;
  return F32[0]!;
}

/** The bit pattern of an f32 value. */
export function f32ToBits(v: number): number {
  F32[0] = v;
  return U32[0]!;
}

/** The float pose of an own state. */
export function ownPose(o: OwnState): Pose {
  const f = (i: number) => f32FromBits(o.bits[i]!);
  return {
    position: [f(0), f(1), f(2)],
    velocity: [f(3), f(4), f(5)],
    yawDeg: f(6),
    movementKind: o.movementKind,
    animFlags: o.animFlags,
    head: o.hasHead ? [f(7), f(8)] : null,
    pointAt: o.hasPoint ? [f(9), f(10), f(11)] : null,
  };
}

/** An own state from a float pose (for tests and the prediction code). */
export function ownFromPose(entity: number, lastInputSeq: number, p: Pose): OwnState {
  const bits = new Uint32Array(12);
  const put = (i: number, v: number) => (bits[i] = f32ToBits(v));
  p.position.forEach((v, i) => put(i, v));
  p.velocity.forEach((v, i) => put(3 + i, v));
  put(6, p.yawDeg);
  if (p.head) p.head.forEach((v, i) => put(7 + i, v));
  if (p.pointAt) p.pointAt.forEach((v, i) => put(9 + i, v));
  return { entity, lastInputSeq, bits, movementKind: p.movementKind, animFlags: p.animFlags, hasHead: p.head !== null, hasPoint: p.pointAt !== null };
}

const OWN_ZERO: OwnState = {
  entity: 0,
  lastInputSeq: 0,
  bits: new Uint32Array(12),
  movementKind: 0,
  animFlags: 0,
  hasHead: false,
  hasPoint: false,
};

function newHeld(rec: EntityRecord, tier: number, tick: number): Held {
  return { tier, rec, prevPos: [rec.pose.positionMm[0], rec.pose.positionMm[1], rec.pose.positionMm[2]], poseTick: tick, prevTick: tick };
}

function cloneHeld(h: Held): Held {
  return {
    tier: h.tier,
    rec: { id: h.rec.id, generation: h.rec.generation, kind: h.rec.kind, pose: cloneQuantPose(h.rec.pose) },
    prevPos: [h.prevPos[0], h.prevPos[1], h.prevPos[2]],
    poseTick: h.poseTick,
    prevTick: h.prevTick,
  };
}

/** Rounds `a / b` to nearest, halves away from zero (`b > 0`), as integer division does in Rust. */
function divRound(a: number, b: number): number {
  const half = Math.trunc(b / 2);
  return a >= 0 ? Math.trunc((a + half) / b) : -Math.trunc((-a + half) / b);
}

/** Linear extrapolation of the last two motion updates (§2.7). */
function predict(h: Held, tick: number): Vec3 {
  const p1 = h.rec.pose.positionMm;
  if (atRest(h.rec.pose)) return [p1[0], p1[1], p1[2]];
  const dt1 = (h.poseTick - h.prevTick) >>> 0;
  const dt = (tick - h.poseTick) >>> 0;
  if (dt1 === 0 || dt1 > 65536 || dt > 65536) return [p1[0], p1[1], p1[2]];
  const out: Vec3 = [0, 0, 0];
  for (let i = 0; i < 3; i++) {
    const d = p1[i]! - h.prevPos[i]!;
    // |d * dt| < 2^33 · 2^16: exact in a double.
    const step = dt === dt1 ? d : divRound(d * dt, dt1);
    out[i] = Math.min(Math.max(p1[i]! + step, I32_MIN), I32_MAX);
  }
  return out;
}

function addI32(base: number, d: number, what: string): number {
  const v = base + d;
  if (!Number.isSafeInteger(v) || v < I32_MIN || v > I32_MAX) throw FrameError.malformed(what);
  return v;
}

function addI16(base: number, d: number, what: string): number {
  const v = base + d;
  if (!Number.isSafeInteger(v) || v < -32768 || v > 32767) throw FrameError.malformed(what);
  return v;
}

function readXorF32(r: BitReader, old: number): number {
  if (!r.bit()) return old;
  const trail = r.get(5);
  const len = r.get(5) + 1;
  if (trail + len > 32) throw FrameError.malformed("float field");
  const x = (r.get(len) * 2 ** trail) >>> 0;
  return (old ^ x) >>> 0;
}

function readOwn(r: BitReader, base: OwnState): OwnState {
  const entity = r.bit() ? r.get(32) : base.entity;
  const d = r.seg(2);
  if (!Number.isSafeInteger(d) || d < I32_MIN || d > I32_MAX) throw FrameError.malformed("input seq");
  const lastInputSeq = (base.lastInputSeq + d) >>> 0;
  const bits = new Uint32Array(12);
  for (let i = 0; i < 7; i++) bits[i] = readXorF32(r, base.bits[i]!);
  const movementKind = r.get(2);
  const animFlags = r.bit() ? r.get(16) : base.animFlags;
  const hasHead = r.bit();
  if (hasHead) {
    // Against the held head, or 0.0 when none is held.
    for (let i = 7; i < 9; i++) bits[i] = readXorF32(r, base.hasHead ? base.bits[i]! : 0);
  }
  const hasPoint = r.bit();
  if (hasPoint) {
    for (let i = 9; i < 12; i++) bits[i] = readXorF32(r, base.hasPoint ? base.bits[i]! : 0);
  }
  return { entity, lastInputSeq, bits, movementKind, animFlags, hasHead, hasPoint };
}

function readHead(r: BitReader, old: [number, number] | null): [number, number] | null {
  if (!r.bit()) return null;
  const [base, k] = old ? [old, 1] : [[0, 0] as [number, number], 4];
  const a = addI16(base[0], r.seg(k), "head");
  const b = addI16(base[1], r.seg(k), "head");
  return [a, b];
}

function readPoint(r: BitReader, old: Vec3 | null, pos: Vec3): Vec3 | null {
  if (!r.bit()) return null;
  const [base, k] = old ? [old, 4] : [pos, 8];
  const out: Vec3 = [0, 0, 0];
  for (let i = 0; i < 3; i++) out[i] = addI32(base[i]!, r.seg(k), "point-at");
  return out;
}

/** Reads a change record and applies it to `h` (a private copy). */
function readChange(r: BitReader, h: Held, tick: number): void {
  const mask = r.bit() ? G_MOTION : r.get(5);
  if (mask === 0) throw FrameError.malformed("empty change");
  const old = h.rec.pose;
  const p = cloneQuantPose(old);
  if (mask & G_MOTION) {
    const pred = predict(h, tick);
    for (let i = 0; i < 3; i++) p.positionMm[i] = addI32(pred[i]!, r.seg(K_POS), "position");
    if (r.bit()) {
      for (let i = 0; i < 3; i++) p.velocity[i] = addI16(old.velocity[i]!, r.seg(K_VEL), "velocity");
    }
    if (r.bit()) {
      const d = r.seg(K_YAW);
      if (Math.abs(d) >= YAW_STEPS) throw FrameError.malformed("yaw");
      p.yaw = (((old.yaw + d) % YAW_STEPS) + YAW_STEPS) % YAW_STEPS;
    }
  }
  if (mask & G_STATE) {
    p.movementKind = r.get(2);
    p.animFlags = r.get(16);
  }
  if (mask & G_HEAD) p.head = readHead(r, old.head);
  if (mask & G_POINT) p.pointAtMm = readPoint(r, old.pointAtMm, p.positionMm);
  const tier = mask & G_TIER ? r.get(2) : h.tier;
  // Apply the groups the mask names.
  const pose = h.rec.pose;
  if (mask & G_MOTION) {
    h.prevPos = [pose.positionMm[0], pose.positionMm[1], pose.positionMm[2]];
    h.prevTick = h.poseTick;
    h.poseTick = tick;
    pose.positionMm = p.positionMm;
    pose.velocity = p.velocity;
    pose.yaw = p.yaw;
  }
  if (mask & G_STATE) {
    pose.movementKind = p.movementKind;
    pose.animFlags = p.animFlags;
  }
  if (mask & G_HEAD) pose.head = p.head;
  if (mask & G_POINT) pose.pointAtMm = p.pointAtMm;
  if (mask & G_TIER) h.tier = tier;
}

function readNew(r: BitReader, prev: { id: number; pos: Vec3 } | null): [EntityRecord, number] {
  const gap = r.eg(2);
  const refPos: Vec3 = prev ? prev.pos : [0, 0, 0];
  const id = prev ? prev.id + 1 + gap : gap;
  if (!Number.isSafeInteger(id) || id > 0xffffffff) throw FrameError.malformed("entity id");
  const generation = r.eg(0);
  if (generation > 0xffff) throw FrameError.malformed("generation");
  const kind = r.eg(0);
  if (kind > 0xff) throw FrameError.malformed("kind");
  const tier = r.get(2);
  const positionMm: Vec3 = [0, 0, 0];
  for (let i = 0; i < 3; i++) positionMm[i] = addI32(refPos[i]!, r.seg(i === 1 ? 6 : 12), "position");
  const velocity: Vec3 = [0, 0, 0];
  for (let i = 0; i < 3; i++) velocity[i] = addI16(0, r.seg(2), "velocity");
  const yaw = r.get(9);
  if (yaw >= YAW_STEPS) throw FrameError.malformed("yaw");
  const movementKind = r.get(2);
  const animFlags = r.bit() ? r.get(16) : 0;
  const head = readHead(r, null);
  const pointAtMm = readPoint(r, null, positionMm);
  return [{ id, generation, kind, pose: { positionMm, velocity, yaw, movementKind, animFlags, head, pointAtMm } }, tier];
}

function readLeb(data: Uint8Array, at: { pos: number }): number {
  let v = 0;
  for (let i = 0; i < 5; i++) {
    if (at.pos >= data.length) throw FrameError.truncated();
    const b = data[at.pos++]!;
    v += (b & 0x7f) * 2 ** (7 * i);
    if ((b & 0x80) === 0) {
      if (v > 0xffffffff) throw FrameError.malformed("varint");
      return v;
    }
  }
  throw FrameError.malformed("varint");
}

function readSelection(r: BitReader, n: number): number[] {
  const sel: number[] = [];
  if (n === 0) return sel;
  if (r.bit()) {
    const count = r.eg(0);
    if (count > n) throw FrameError.malformed("selection count");
    let prev = -1;
    for (let c = 0; c < count; c++) {
      const i = prev + 1 + r.eg(K_SEL_GAP);
      if (i >= n) throw FrameError.malformed("selection index");
      sel.push(i);
      prev = i;
    }
  } else {
    for (let i = 0; i < n; i++) if (r.bit()) sel.push(i);
  }
  return sel;
}

function stateHash(held: readonly Held[], own: OwnState | null): number {
  let h = FNV_OFFSET;
  for (const e of held) {
    h = fnvLe(h, e.rec.id, 4);
    h = fnvLe(h, e.rec.generation, 2);
    h = fnvByte(h, e.rec.kind);
    h = hashPose(h, e.rec.pose);
  }
  if (own) {
    h = fnvByte(h, 1);
    h = fnvLe(h, own.entity, 4);
    h = fnvLe(h, own.lastInputSeq, 4);
    for (const b of own.bits) h = fnvLe(h, b, 4);
    h = fnvByte(h, own.movementKind);
    h = fnvLe(h, own.animFlags, 2);
    h = fnvByte(h, own.hasHead ? 1 : 0);
    h = fnvByte(h, own.hasPoint ? 1 : 0);
  } else {
    h = fnvByte(h, 0);
  }
  return h;
}

/** Client-side frame decoder: holds what the server says the client should hold. */
export class FrameDecoder {
  private held: Held[] = [];
  private ownState: OwnState | null = null;
  private lastSeqApplied: number | null = null;
  private lastTick = 0;

  /**
   * Applies one frame onto what the decoder holds. Fail closed: on any error the held state is
   * unchanged and a {@link FrameError} is thrown.
   */
  apply(frame: Uint8Array): DecodedFrame {
    if (frame.length > MAX_FRAME_BYTES) throw FrameError.tooLarge();
    if (frame.length === 0) throw FrameError.truncated();
    const first = frame[0]!;
    if (first >> 4 !== FRAME_VERSION) throw FrameError.malformed("version");
    const flags = first & 0x0f;
    const keyframe = (flags & FLAG_KEYFRAME) !== 0;
    if (flags & FLAG_OWN && flags & FLAG_OWN_CLEAR) throw FrameError.malformed("own flags");
    const at = { pos: 1 };
    const seq = readLeb(frame, at);
    const back = readLeb(frame, at);
    const baseSeq = (seq - back) >>> 0;
    if (!keyframe && this.lastSeqApplied !== baseSeq) {
      throw FrameError.chainBreak(this.lastSeqApplied ?? 0, baseSeq);
    }
    let check: number | null = null;
    if (flags & FLAG_CHECK) {
      if (at.pos + 4 > frame.length) throw FrameError.truncated();
      check = (frame[at.pos]! | (frame[at.pos + 1]! << 8) | (frame[at.pos + 2]! << 16) | (frame[at.pos + 3]! << 24)) >>> 0;
      at.pos += 4;
    }
    const r = new BitReader(frame, at.pos);
    let tick: number;
    if (keyframe) {
      tick = r.eg(8);
      if (tick > 0xffffffff) throw FrameError.malformed("tick");
    } else {
      const d = r.seg(K_TICK);
      if (d < I32_MIN || d > I32_MAX) throw FrameError.malformed("tick");
      tick = (this.lastTick + d) >>> 0;
    }
    const held: readonly Held[] = keyframe ? [] : this.held;
    const oldOwn = keyframe ? null : this.ownState;
    let own: OwnState | null;
    if (flags & FLAG_OWN) own = readOwn(r, oldOwn ?? OWN_ZERO);
    else if (flags & FLAG_OWN_CLEAR) own = null;
    else own = oldOwn;

    const out: DecodedFrame = { seq, baseSeq, tick, keyframe, changed: [], removed: [], checked: false };
    const nRemoved = r.eg(0);
    if (nRemoved > held.length) throw FrameError.malformed("removed count");
    let prev = -1;
    for (let i = 0; i < nRemoved; i++) {
      const id = prev + 1 + r.eg(2);
      if (id > 0xffffffff) throw FrameError.malformed("removed id");
      out.removed.push(id);
      prev = id;
    }
    // Kept entities, in order; every removed id must be held.
    let next: Held[];
    if (out.removed.length === 0) {
      next = held.slice();
    } else {
      next = [];
      let k = 0;
      for (const h of held) {
        if (k < out.removed.length && out.removed[k] === h.rec.id) k++;
        else next.push(h);
      }
      if (k !== out.removed.length) throw FrameError.malformed("removed id not held");
    }
    const sel = readSelection(r, next.length);
    for (const s of sel) {
      const h = cloneHeld(next[s]!);
      readChange(r, h, tick);
      next[s] = h;
      out.changed.push(h.rec.id);
    }
    const kept = next.length;
    const nNew = r.eg(0);
    if (nNew + kept > MAX_ENTITIES) throw FrameError.tooLarge();
    let prevNew: { id: number; pos: Vec3 } | null = null;
    for (let i = 0; i < nNew; i++) {
      const [rec, tier] = readNew(r, prevNew);
      prevNew = { id: rec.id, pos: rec.pose.positionMm };
      next.push(newHeld(rec, tier, tick));
      out.changed.push(rec.id);
    }
    r.finish();
    if (nNew > 0 && kept > 0) next.sort((a, b) => a.rec.id - b.rec.id);
    for (let i = 1; i < next.length; i++) {
      if (next[i - 1]!.rec.id >= next[i]!.rec.id) throw FrameError.malformed("duplicate id");
    }
    if (check !== null) {
      const got = stateHash(next, own);
      if (got !== check) throw FrameError.checkMismatch(check, got);
      out.checked = true;
    }
    out.changed.sort((a, b) => a - b);
    this.held = next;
    this.ownState = own;
    this.lastSeqApplied = seq;
    this.lastTick = tick;
    return out;
  }

  /** The record held for `id`. */
  get(id: number): EntityRecord | undefined {
    const i = this.find(id);
    return i < 0 ? undefined : this.held[i]!.rec;
  }

  /** The tier of `id` for this client (0 near … 3 far). */
  tier(id: number): number | undefined {
    const i = this.find(id);
    return i < 0 ? undefined : this.held[i]!.tier;
  }

  /** The tick of the frame that last brought `id`'s motion: when its held pose was measured. */
  poseTick(id: number): number | undefined {
    const i = this.find(id);
    return i < 0 ? undefined : this.held[i]!.poseTick;
  }

  /** Every held record, by id. */
  entities(): EntityRecord[] {
    return this.held.map((h) => h.rec);
  }

  /** Number of held entities. */
  get size(): number {
    return this.held.length;
  }

  /** The client's own state, if the server sent one. */
  own(): OwnState | null {
    return this.ownState;
  }

  /** Sequence number of the last frame applied. */
  lastSeq(): number | null {
    return this.lastSeqApplied;
  }

  /** The tick of the last frame applied. */
  tick(): number {
    return this.lastTick;
  }

  /** The FNV-1a check of what the decoder holds. */
  check(): number {
    return stateHash(this.held, this.ownState);
  }

  /** An independent copy (held records are never mutated in place, so they are shared). */
  clone(): FrameDecoder {
    const c = new FrameDecoder();
    c.held = this.held.slice();
    c.ownState = this.ownState;
    c.lastSeqApplied = this.lastSeqApplied;
    c.lastTick = this.lastTick;
    return c;
  }

  /** Forgets everything (before a keyframe). */
  reset(): void {
    this.held = [];
    this.ownState = null;
    this.lastSeqApplied = null;
    this.lastTick = 0;
  }

  private find(id: number): number {
    let lo = 0;
    let hi = this.held.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const v = this.held[mid]!.rec.id;
      if (v === id) return mid;
      if (v < id) lo = mid + 1;
      else hi = mid - 1;
    }
    return -1;
  }
}
