/**
 * The seed's adaptive movement send rate: 10 Hz while moving, decaying ×2 per idle send to 1 Hz,
 * never more than 10 messages a second, and at once (within the cap) on a start, a stop, or a
 * change of the grounded flag or the jump count.
 */
import { AnimFlag, type Pose } from "./quant.js";

export interface PacerOptions {
  /** Interval while moving, seconds (0.1). */
  movingS?: number;
  /** Longest idle interval, seconds (1.0). */
  idleMaxS?: number;
  /** Below this speed (m/s) the avatar is idle (0.05). */
  idleSpeed?: number;
}

export class MovementPacer {
  private readonly movingS: number;
  private readonly idleMaxS: number;
  private readonly idleSpeed: number;
  private lastSentAt = -Infinity;
  private interval: number;
  private lastMoving = false;
  private lastFlags = -1;

  constructor(opts: PacerOptions = {}) {
    this.movingS = opts.movingS ?? 0.1;
    this.idleMaxS = opts.idleMaxS ?? 1.0;
    this.idleSpeed = opts.idleSpeed ?? 0.05;
    this.interval = this.movingS;
  }

  /** Whether to send `pose` now (seconds); when true, the send is counted. */
  due(nowS: number, pose: Pose): boolean {
    const moving = Math.hypot(pose.velocity[0], pose.velocity[1], pose.velocity[2]) > this.idleSpeed;
    const flags = pose.animFlags & (AnimFlag.GROUNDED | (3 << AnimFlag.JUMP_SHIFT));
    const edge = moving !== this.lastMoving || flags !== this.lastFlags;
    const since = nowS - this.lastSentAt;
    // The hard cap: 10 messages a second.
    if (since < this.movingS - 1e-9) return false;
    if (!edge && since < this.interval - 1e-9) return false;
    this.lastSentAt = nowS;
    this.interval = moving || edge ? this.movingS : Math.min(this.interval * 2, this.idleMaxS);
    this.lastMoving = moving;
    this.lastFlags = flags;
    return true;
  }

  /** Forget the history (after a join or a teleport: the next pose goes at once). */
  reset(): void {
    this.lastSentAt = -Infinity;
    this.interval = this.movingS;
    this.lastFlags = -1;
  }
}
