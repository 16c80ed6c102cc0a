/**
 * Remote-avatar smoothing: the pipeline of `plaza_client::smoothing` (seeds 000 and 003), ported
 * line for line with the same parameters and held to the same shared trace
 * (`fixtures/smoothing/trace.json`, within 1 mm).
 *
 * A {@link Smoother} per remote avatar takes authoritative {@link Sample}s as they arrive
 * ({@link Smoother.push}, with the local arrival time in seconds) and renders a pose for any
 * local time ({@link Smoother.advance}). It reads no clock.
 *
 * 1. Inbox ordered by server time, capped at 10; stale samples dropped.
 * 2. First sighting snaps, then a cooldown of two send intervals.
 * 3. A render clock trailing the newest data by one sample interval (the longest recent gap between
 *    moving samples, clamped 0.05–0.20 s; 0.12 s until the first gap is measured, which replaces
 *    it) behind a link-delay envelope (the largest arrival minus
 *    server time); both decay with the avatar's arrivals, not while it stands; ±10 % drift
 *    correction, catch-up (×1.5 at most) above 3 queued samples, a jump when more than 0.5 s off.
 *    A record whose tier rose raises the interval at once to the tier's gap (`expectGap`); the
 *    clock slows (×0.5 at most) to trail by it in time.
 * 4. Hermite (or projective velocity blending) between moving samples, linear at rest or when
 *    the grounded flag or the jump count changes.
 * 5. Damped (0.33 s linear, stopped by 0.66 s) or capped (0.10 s) extrapolation when the inbox
 *    runs dry, never from a sample that placed the avatar (first sighting or a snap: seed 000's
 *    `WasTeleported` / `isInstant`), never through the floor (`y = 0`).
 * 6. Convex blends when new data moves the model away from what was shown; into a linear
 *    segment that ends standing, the blend ends with the segment on the render clock.
 * 7. Snaps on a teleport flag, a jump over 5 m, or a gap over 0.20 s while moving.
 * 8. Head IK and point-at ease on their own.
 */
export type V3 = [number, number, number];

const JUMP_MASK = 0x0300;
const GROUNDED = 1;
const BLEND_EPSILON_M = 1e-4;
/** The room's lead: a frame carries an avatar's last move forward along its velocity for at most this long. */
const MAX_LEAD_S = 0.1;
/** Quantization allowance of the unlead rule (1 mm positions, 0.05 m/s velocities: about 6 mm over a 0.1 s lead). */
const LEAD_EPSILON_M = 0.01;
/** The slowest the render clock runs while it falls back to a raised interval (`expectGap`): half speed (catch-up, the other way, runs at most 1.5×). */
export const REGAP_MIN_RATE = 0.5;

/** One authoritative sample of a remote avatar, in world units. */
export interface Sample {
  /** Server time of the pose in seconds (the frame's pose tick over the tick rate). */
  t: number;
  position: V3;
  velocity: V3;
  yawDeg: number;
  movementKind: number;
  animFlags: number;
  head: [number, number] | null;
  pointAt: V3 | null;
  /** The server placed the avatar here (a teleport): snap, never blend. */
  teleport: boolean;
}

export type Extrapolation = { kind: "capped"; maxS: number } | { kind: "damped"; linearS: number; stopS: number };
export type Spline = "linear" | "hermite" | "velocity_blending";

export const EXTRAPOLATION_CAPPED: Extrapolation = { kind: "capped", maxS: 0.1 };
export const EXTRAPOLATION_DAMPED: Extrapolation = { kind: "damped", linearS: 0.33, stopS: 0.66 };

/** Smoothing parameters; the defaults are the documented pipeline (the Rust defaults). */
export interface SmoothingConfig {
  sendIntervalS: number;
  minIntervalS: number;
  maxIntervalS: number;
  defaultIntervalS: number;
  inboxCap: number;
  extrapolation: Extrapolation;
  spline: Spline;
  catchUpMin: number;
  catchUpMaxRate: number;
  maxDrift: number;
  driftGain: number;
  resyncS: number;
  envelopeDecay: number;
  snapDistanceM: number;
  restSpeed: number;
  blendS: number;
  maxBlendSpeed: number;
  headRate: number;
  pointAtRate: number;
}

export const DEFAULT_SMOOTHING: SmoothingConfig = Object.freeze({
  sendIntervalS: 0.05,
  minIntervalS: 0.05,
  maxIntervalS: 0.2,
  defaultIntervalS: 0.12,
  inboxCap: 10,
  extrapolation: EXTRAPOLATION_DAMPED,
  spline: "hermite",
  catchUpMin: 3,
  catchUpMaxRate: 1.5,
  maxDrift: 0.1,
  driftGain: 1.0,
  resyncS: 0.5,
  envelopeDecay: 0.02,
  snapDistanceM: 5.0,
  restSpeed: 0.1,
  blendS: 0.1,
  maxBlendSpeed: 5.0,
  headRate: 10.0,
  pointAtRate: 10.0,
}) as SmoothingConfig;

export type SnapReason = "teleport" | "distance" | "gap" | "blend";
const SNAP_INDEX: Record<SnapReason, number> = { teleport: 0, distance: 1, gap: 2, blend: 3 };
export type Phase = "empty" | "cooldown" | "interpolating" | "extrapolating" | "holding";

/** The pose to show. */
export interface Rendered {
  position: V3;
  yawDeg: number;
  head: [number, number] | null;
  pointAt: V3 | null;
  renderT: number;
  phase: Phase;
  /** Whether this advance placed the avatar (first sighting or a snap). */
  placed: boolean;
}

export interface SmoothingStats {
  samples: number;
  stale: number;
  overflow: number;
  /** teleport, distance, gap, blend */
  snaps: [number, number, number, number];
  blends: number;
  clockJumps: number;
  extrapolating: number;
  /** Queued poses moved back to a stop they had been led past. */
  unled: number;
}

/** From one sample on (extrapolating unless `hold`), or between two. */
type Branch = { kind: "from"; s: Sample; hold: boolean } | { kind: "segment"; a: Sample; b: Sample; linear: boolean };

function travelS(ex: Extrapolation, x: number): number {
  x = Math.max(x, 0);
  if (ex.kind === "capped") return Math.min(x, Math.max(ex.maxS, 0));
  const l = Math.max(ex.linearS, 0);
  const s = Math.max(ex.stopS, l);
  if (x <= l) return x;
  if (x < s) {
    const y = x - l;
    return l + y - (y * y) / (2 * (s - l));
  }
  return l + (s - l) / 2;
}

function maxTravelS(ex: Extrapolation): number {
  return travelS(ex, Number.MAX_VALUE / 4);
}

function finite(s: Sample): boolean {
  return (
    Number.isFinite(s.t) &&
    s.position.every(Number.isFinite) &&
    s.velocity.every(Number.isFinite) &&
    Number.isFinite(s.yawDeg) &&
    (s.head === null || s.head.every(Number.isFinite)) &&
    (s.pointAt === null || s.pointAt.every(Number.isFinite))
  );
}

function speed(s: Sample): number {
  return len(s.velocity);
}

function sameSample(a: Sample, b: Sample): boolean {
  return (
    a.t === b.t &&
    a.position.every((v, i) => v === b.position[i]) &&
    a.velocity.every((v, i) => v === b.velocity[i]) &&
    a.yawDeg === b.yawDeg &&
    a.movementKind === b.movementKind &&
    a.animFlags === b.animFlags &&
    (a.head === b.head || (a.head !== null && b.head !== null && a.head[0] === b.head[0] && a.head[1] === b.head[1])) &&
    (a.pointAt === b.pointAt || (a.pointAt !== null && b.pointAt !== null && a.pointAt.every((v, i) => v === b.pointAt![i]))) &&
    a.teleport === b.teleport
  );
}

function sameBranch(x: Branch, y: Branch): boolean {
  if (x.kind === "from" && y.kind === "from") return x.hold === y.hold && sameSample(x.s, y.s);
  if (x.kind === "segment" && y.kind === "segment") return x.linear === y.linear && sameSample(x.a, y.a) && sameSample(x.b, y.b);
  return false;
}

function branchStart(b: Branch): number {
  return b.kind === "from" ? b.s.t : b.a.t;
}

/** Whether `next` continues `old` without a jump: the same branch, or the next segment of a chain. */
function continues(old: Branch, next: Branch): boolean {
  return sameBranch(old, next) || (old.kind === "segment" && old.b.t === branchStart(next));
}

/** The smoothing state of one remote avatar. */
export class Smoother {
  readonly cfg: SmoothingConfig;
  private inbox: Sample[] = [];
  private passed: Sample | null = null;
  /** Whether `passed` placed the avatar (first sighting or a snap): no extrapolation from it. */
  private hold = false;
  private cooldownUntil = 0;
  private renderT = 0;
  private lastNow: number | null = null;
  private link = 0;
  /** Local arrival time of the newest sample: the envelopes decay on this clock. */
  private lastArrival = 0;
  private interval: number;
  /** Whether `interval` is a measured gap (before: the default, seed 003's "without timing"). */
  private measured = false;
  /** The interval was raised ahead of its gaps (`expectGap`): the render clock slows (to `REGAP_MIN_RATE` at most) until it trails by it. */
  private regap = false;
  private branch: Branch | null = null;
  private blend: V3 = [0, 0, 0];
  private blendW = 0;
  private blendLen: number;
  /** A blend into a linear segment that ends standing runs on the render clock and ends with the segment: `[start, end]` render times (`blendIntoStop`). */
  private blendTo: [number, number] | null = null;
  private out: Rendered = { position: [0, 0, 0], yawDeg: 0, head: null, pointAt: null, renderT: 0, phase: "empty", placed: false };
  private first = false;
  readonly stats: SmoothingStats = { samples: 0, stale: 0, overflow: 0, snaps: [0, 0, 0, 0], blends: 0, clockJumps: 0, extrapolating: 0, unled: 0 };

  constructor(cfg: SmoothingConfig = DEFAULT_SMOOTHING) {
    this.cfg = cfg;
    this.interval = cfg.defaultIntervalS;
    this.blendLen = cfg.blendS;
  }

  /** The pose shown at the last advance. */
  rendered(): Rendered {
    return this.out;
  }

  inboxLen(): number {
    return this.inbox.length;
  }

  /** The newest sample known (queued or passed). */
  newest(): Sample | null {
    return this.inbox[this.inbox.length - 1] ?? this.passed;
  }

  /** The trailing interval in use (clamped), seconds. */
  intervalS(): number {
    return Math.min(Math.max(this.interval, this.cfg.minIntervalS), this.cfg.maxIntervalS);
  }

  /**
   * Announces the gap expected between this avatar's samples from now on: its tier's cadence
   * (the room sends a tier-`t` entity's steady motion every `2^t`-th frame, `PROTOCOL.md` §2.8,
   * so `sendIntervalS × 2^t`). A gap measured only when it is passed adapts one gap late: an
   * avatar moving from tier 0 (gaps 40–60 ms) to tier 1 (100 ms) ran dry on its first tier-1 gap
   * and extrapolated. A gap larger than the trailing interval raises it at once, and the render
   * clock slows just enough to have lost the difference when it reaches the newest sample (0.6
   * for 0.1 s when a 60 ms trail meets a 100 ms gap), at most to `REGAP_MIN_RATE`, until it
   * trails by the new interval. A smaller gap changes nothing: the interval decays as before.
   */
  expectGap(gapS: number): void {
    if (!Number.isFinite(gapS) || gapS <= this.intervalS()) return;
    this.interval = gapS;
    this.measured = true;
    this.regap = true;
  }

  linkS(): number {
    return this.link;
  }

  /** Takes a sample that arrived at local time `arrival` (seconds). */
  push(s: Sample, arrival: number): void {
    if (!finite(s) || !Number.isFinite(arrival)) {
      this.stats.stale += 1;
      return;
    }
    const obs = arrival - s.t;
    const passed = this.passed;
    if (passed === null) {
      this.passed = s;
      this.hold = true;
      this.link = obs;
      this.lastArrival = arrival;
      this.renderT = s.t;
      this.cooldownUntil = arrival + 2 * this.cfg.sendIntervalS;
      this.branch = { kind: "from", s, hold: true };
      this.blendW = 0;
      this.out = { position: [...s.position], yawDeg: s.yawDeg, head: s.head, pointAt: s.pointAt, renderT: s.t, phase: "cooldown", placed: true };
      this.first = true;
      this.stats.samples += 1;
      return;
    }
    if (s.t <= passed.t) {
      this.stats.stale += 1;
      return;
    }
    // The envelopes decay with the samples' arrivals, over gaps up to the longest interval: an
    // avatar that stands sends nothing, and its silence says nothing about the link.
    const gap = arrival - this.lastArrival;
    const since = gap >= 0 && gap <= this.cfg.maxIntervalS ? gap : 0;
    this.lastArrival = Math.max(this.lastArrival, arrival);
    this.link = Math.max(this.link - this.cfg.envelopeDecay * since, obs);
    this.interval = Math.max(this.interval - this.cfg.envelopeDecay * since, this.cfg.minIntervalS);
    this.stats.samples += 1;
    // Binary search by t: replace an equal time, else insert in order.
    let lo = 0;
    let hi = this.inbox.length;
    let found = -1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      const t = this.inbox[mid]!.t;
      if (t === s.t) {
        found = mid;
        break;
      }
      if (t < s.t) lo = mid + 1;
      else hi = mid;
    }
    let at = lo;
    if (found >= 0) {
      this.inbox[found] = s;
      at = found;
    } else this.inbox.splice(lo, 0, s);
    this.unleadBeforeStop(at);
    while (this.inbox.length > Math.max(this.cfg.inboxCap, 1)) {
      this.inbox.shift();
      this.stats.overflow += 1;
    }
  }

  /**
   * A stop (the sample at `at` stands) behind the queued moving samples before it, within the
   * room's lead: the room carried those poses forward along the last move's velocity past the
   * point where the avatar stopped. They are moved back to the stop (at rest). Only queued
   * samples change. Along the line the stop lies at most `|v|·MAX_LEAD_S` behind; off it at
   * most one send interval of travel (a move blocked by geometry ends where the capsule's
   * sweep left it, slid along or pushed out of the obstacle), plus quantization.
   */
  private unleadBeforeStop(at: number): void {
    const stop = this.inbox[at]!;
    if (stop.teleport || speed(stop) >= this.cfg.restSpeed) return;
    for (let j = at - 1; j >= 0; j--) {
      const q = this.inbox[j]!;
      const sp = speed(q);
      if (q.teleport || sp < this.cfg.restSpeed) break;
      const past = sub(q.position, stop.position);
      const along = dot(past, q.velocity) / sp;
      const lateral = len(sub(past, scale(q.velocity, along / sp)));
      if (
        along <= LEAD_EPSILON_M ||
        along > sp * MAX_LEAD_S + LEAD_EPSILON_M ||
        lateral > sp * Math.max(this.cfg.sendIntervalS, 0) + LEAD_EPSILON_M
      )
        break;
      this.inbox[j] = { ...q, position: [...stop.position], velocity: [0, 0, 0] };
      this.stats.unled += 1;
    }
  }

  /**
   * Renders the pose for local time `now` (seconds); null before the first sample. A non-finite
   * `now` changes nothing and returns the last pose.
   */
  advance(now: number): Rendered | null {
    const passed = this.passed;
    if (passed === null) return null;
    if (!Number.isFinite(now)) return this.out;
    const cfg = this.cfg;
    const dt = this.lastNow !== null ? Math.min(Math.max(now - this.lastNow, 0), 1) : 0;
    this.lastNow = now;
    this.out.placed = this.first;
    this.first = false;
    const interval = this.intervalS();

    const cooling = now < this.cooldownUntil;
    let jumped = false;
    if (!cooling) {
      const target = now - this.link - interval;
      const err = target - this.renderT;
      if (Math.abs(err) > cfg.resyncS) {
        this.renderT = target;
        this.stats.clockJumps += 1;
        jumped = true;
      } else {
        let rate = 1 + Math.min(Math.max(cfg.driftGain * err, -cfg.maxDrift), cfg.maxDrift);
        if (this.regap) {
          if (err < 0) {
            // Lose the deficit by the time the render clock reaches the newest sample: at rate r
            // it gets there after `left / r` s, falling `left / r - left` further behind, so
            // r = left / (left + deficit), at least REGAP_MIN_RATE.
            const newest = this.inbox.length > 0 ? this.inbox[this.inbox.length - 1]!.t : passed.t;
            const left = Math.max(newest - this.renderT, 0);
            rate = Math.min(rate, Math.max(left / (left - err), REGAP_MIN_RATE));
          } else {
            this.regap = false;
          }
        }
        let ahead = 0;
        for (const s of this.inbox) if (s.t > this.renderT) ahead++;
        if (ahead > cfg.catchUpMin) {
          const up = 1 + 0.25 * (ahead - cfg.catchUpMin);
          rate = Math.max(rate, Math.min(up, cfg.catchUpMaxRate));
        }
        this.renderT += dt * rate;
      }
    }

    let a = passed;
    let snapped: SnapReason | null = null;
    while (this.inbox.length > 0) {
      const b = this.inbox[0]!;
      if (b.t > this.renderT) break;
      this.inbox.shift();
      const reason = this.snapReason(a, b);
      if (reason !== null) {
        snapped = reason;
        this.hold = true;
      } else {
        this.hold = false;
        const gap = b.t - a.t;
        if (gap <= cfg.maxIntervalS && speed(a) >= cfg.restSpeed) {
          // The longest recent gap; the first one measured replaces the default.
          this.interval = this.measured ? Math.max(this.interval, gap) : gap;
          this.measured = true;
        }
      }
      a = b;
    }
    this.passed = a;

    let branch: Branch;
    const nb = this.inbox[0];
    if (nb !== undefined && this.snapReason(a, nb) === null) {
      let start = a;
      if (speed(a) < cfg.restSpeed && nb.t - a.t > interval) start = { ...a, t: nb.t - interval };
      branch = { kind: "segment", a: start, b: nb, linear: this.linear(a, nb) };
    } else {
      branch = { kind: "from", s: a, hold: this.hold };
    }
    const model = this.evalBranch(branch, this.renderT);
    const old = this.branch;
    if (snapped !== null) {
      this.countSnap(snapped);
      this.blendW = 0;
      this.out.placed = true;
    } else if (old !== null && (jumped || !continues(old, branch))) {
      const shownBefore = this.shown(this.evalBranch(old, this.renderT));
      const off = sub(shownBefore, model);
      if (len(off) > cfg.snapDistanceM) {
        this.countSnap("blend");
        this.blendW = 0;
        this.out.placed = true;
      } else if (len(off) > BLEND_EPSILON_M && cfg.blendS > 0) {
        this.blend = off;
        this.blendW = 1;
        this.blendLen = Math.max(cfg.blendS, len(off) / Math.max(cfg.maxBlendSpeed, 1e-3));
        this.blendTo = this.blendIntoStop(branch, len(off));
        this.stats.blends += 1;
      }
    } else if (this.blendTo !== null) {
      const [start, end] = this.blendTo;
      this.blendW = Math.min(Math.max((end - this.renderT) / (end - start), 0), 1);
    } else if (cfg.blendS > 0) {
      this.blendW = Math.max(this.blendW - dt / this.blendLen, 0);
    } else {
      this.blendW = 0;
    }
    if (this.blendW <= 0 || snapped !== null) this.blendTo = null;
    this.branch = branch;

    this.out.position = this.shown(model);
    this.out.renderT = this.renderT;
    if (branch.kind === "segment" && this.renderT > branch.a.t) {
      const u = Math.min(Math.max((this.renderT - branch.a.t) / (branch.b.t - branch.a.t), 0), 1);
      this.out.yawDeg = lerpAngle(branch.a.yawDeg, branch.b.yawDeg, u);
    } else {
      this.out.yawDeg = branch.kind === "segment" ? branch.a.yawDeg : branch.s.yawDeg;
    }
    if (cooling) {
      this.out.phase = "cooldown";
    } else if (branch.kind === "segment") {
      this.out.phase = "interpolating";
    } else {
      const s = branch.s;
      const x = this.renderT - s.t;
      if (!branch.hold && speed(s) >= cfg.restSpeed && travelS(cfg.extrapolation, x) < maxTravelS(cfg.extrapolation) && x > 0) {
        this.stats.extrapolating += 1;
        this.out.phase = "extrapolating";
      } else {
        this.out.phase = "holding";
      }
    }
    if (this.out.placed) {
      this.out.head = a.head;
      this.out.pointAt = a.pointAt;
    } else {
      const kh = 1 - Math.exp(-cfg.headRate * dt);
      const h = this.out.head;
      const th = a.head;
      this.out.head = h !== null && th !== null ? [h[0] + angleDiff(th[0], h[0]) * kh, h[1] + (th[1] - h[1]) * kh] : th;
      const kp = 1 - Math.exp(-cfg.pointAtRate * dt);
      const p = this.out.pointAt;
      const tp = a.pointAt;
      this.out.pointAt = p !== null && tp !== null ? add(p, scale(sub(tp, p), kp)) : tp;
    }
    return this.out;
  }

  /**
   * A correction into a linear segment that ends standing (a stop that unled the queued poses
   * while the render clock was between them) ends when the segment does, on the render clock:
   * the shown pose runs straight to the stop and arrives with the segment, instead of carrying
   * the old curve's lead past it. `null` (the local-time blend) otherwise. Same rule as the
   * Rust `Smoother::blend_into_stop`.
   */
  private blendIntoStop(branch: Branch, offLen: number): [number, number] | null {
    if (branch.kind !== "segment" || !branch.linear) return null;
    const left = branch.b.t - this.renderT;
    return speed(branch.b) < this.cfg.restSpeed && left > 1e-6 && offLen / left <= this.cfg.maxBlendSpeed
      ? [this.renderT, branch.b.t]
      : null;
  }

  private countSnap(r: SnapReason): void {
    const i = SNAP_INDEX[r];
    this.stats.snaps[i] = this.stats.snaps[i]! + 1;
  }

  private shown(model: V3): V3 {
    return add(model, scale(this.blend, this.blendW));
  }

  private snapReason(a: Sample, b: Sample): SnapReason | null {
    if (b.teleport) return "teleport";
    if (len(sub(b.position, a.position)) > this.cfg.snapDistanceM) return "distance";
    if (b.t - a.t > this.cfg.maxIntervalS && speed(a) >= this.cfg.restSpeed) return "gap";
    return null;
  }

  private linear(a: Sample, b: Sample): boolean {
    return (
      this.cfg.spline === "linear" ||
      speed(a) < this.cfg.restSpeed ||
      speed(b) < this.cfg.restSpeed ||
      a.movementKind === 0 ||
      b.movementKind === 0 ||
      (a.animFlags & GROUNDED) !== (b.animFlags & GROUNDED) ||
      (a.animFlags & JUMP_MASK) !== (b.animFlags & JUMP_MASK)
    );
  }

  private evalBranch(branch: Branch, t: number): V3 {
    if (branch.kind === "from") {
      const s = branch.s;
      if (branch.hold || speed(s) < this.cfg.restSpeed) return [...s.position];
      const k = travelS(this.cfg.extrapolation, t - s.t);
      const p = add(s.position, scale(s.velocity, k));
      // Never extrapolate through the floor (seed 000's ground clamp).
      if (s.position[1] >= 0 && p[1] < 0) p[1] = 0;
      return p;
    }
    const { a, b, linear } = branch;
    const d = b.t - a.t;
    if (d <= 0 || t <= a.t) return [...a.position];
    const u = Math.min(Math.max((t - a.t) / d, 0), 1);
    if (linear || this.cfg.spline === "linear") return lerp(a.position, b.position, u);
    if (this.cfg.spline === "hermite") return hermite(a, b, d, u);
    return velocityBlend(a, b, d, u);
  }
}

function hermite(a: Sample, b: Sample, d: number, u: number): V3 {
  const u2 = u * u;
  const u3 = u * u * u;
  const h00 = 2 * u3 - 3 * u2 + 1;
  const h10 = u3 - 2 * u2 + u;
  const h01 = -2 * u3 + 3 * u2;
  const h11 = u3 - u2;
  const f = (i: number) => h00 * a.position[i]! + h10 * d * a.velocity[i]! + h01 * b.position[i]! + h11 * d * b.velocity[i]!;
  return [f(0), f(1), f(2)];
}

function velocityBlend(a: Sample, b: Sample, d: number, u: number): V3 {
  const t = u * d;
  const f = (i: number) => {
    const vb = a.velocity[i]! + (b.velocity[i]! - a.velocity[i]!) * u;
    const local = a.position[i]! + vb * t;
    const remote = b.position[i]! - b.velocity[i]! * (d - t);
    return local + (remote - local) * u;
  };
  return [f(0), f(1), f(2)];
}

function add(a: V3, b: V3): V3 {
  return [a[0] + b[0], a[1] + b[1], a[2] + b[2]];
}

function sub(a: V3, b: V3): V3 {
  return [a[0] - b[0], a[1] - b[1], a[2] - b[2]];
}

function scale(a: V3, k: number): V3 {
  return [a[0] * k, a[1] * k, a[2] * k];
}

function dot(a: V3, b: V3): number {
  return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}

function len(a: V3): number {
  return Math.sqrt(a[0] * a[0] + a[1] * a[1] + a[2] * a[2]);
}

function lerp(a: V3, b: V3, u: number): V3 {
  return add(a, scale(sub(b, a), u));
}

/** `to - from` in degrees, wrapped into [-180, 180). */
export function angleDiff(to: number, from: number): number {
  let r = (to - from + 180) % 360;
  if (r < 0) r += 360;
  return r - 180;
}

function lerpAngle(a: number, b: number, u: number): number {
  return a + angleDiff(b, a) * u;
}
