/**
 * Connection helpers: close-code classification, reconnect backoff with jitter, net stats and
 * the development link conditioner.
 */

/** What a close code means for the client (docs/PROTOCOL.md §5). */
export interface CloseInfo {
  code: number;
  name: string;
  /** Whether reconnecting (with the resume token) may succeed. */
  retryable: boolean;
}

const CLOSE_CODES: Record<number, [string, boolean]> = {
  1000: ["normal", false],
  1001: ["going_away", true],
  // The socket dropped without a close frame (network, process death).
  1006: ["abnormal", true],
  1009: ["too_large", false],
  1011: ["server_error", true],
  1012: ["service_restart", true],
  4000: ["handshake_timeout", true],
  4001: ["unsupported_version", false],
  4002: ["bad_frame", false],
  4003: ["auth", false],
  4004: ["rate_limited", false],
  4005: ["room_full", true],
  4006: ["slow_consumer", true],
  4008: ["room_unavailable", true],
  4009: ["internal", true],
  // An operator kicked the session (admin API `POST /v1/sessions/{id}/kick`): do not reconnect.
  4010: ["kicked", false],
};

/** Classifies a WebSocket close code: retryable (reconnect with backoff) or terminal. */
export function classifyClose(code: number): CloseInfo {
  const known = CLOSE_CODES[code];
  if (known) return { code, name: known[0], retryable: known[1] };
  // Unknown 4xxx codes are Plaza refusals we do not know: do not hammer the server.
  return { code, name: `code_${code}`, retryable: code < 4000 };
}

/** Exponential backoff with jitter: attempt n waits a random time in [d/2, d], d = min(max, base·2^n). */
export class Backoff {
  private attempt = 0;

  constructor(
    readonly baseMs = 250,
    readonly maxMs = 10_000,
    private readonly random: () => number = Math.random,
  ) {}

  /** The delay before the next attempt (and counts it). */
  next(): number {
    const d = Math.min(this.maxMs, this.baseMs * 2 ** this.attempt);
    this.attempt = Math.min(this.attempt + 1, 30);
    return d / 2 + (d / 2) * this.random();
  }

  /** Attempts since the last reset. */
  get attempts(): number {
    return this.attempt;
  }

  reset(): void {
    this.attempt = 0;
  }
}

/** Net statistics over the last second (rates) and since the start (counters). */
export interface NetStats {
  bytesDownPerS: number;
  bytesUpPerS: number;
  framesPerS: number;
  /** Resyncs the client asked for since it started. */
  resyncs: number;
  decodeErrors: number;
  /** Round-trip time of the last ping, ms (NaN before the first pong). */
  rttMs: number;
  /** Mean SDK decode time per snapshot frame over the last second, ms. */
  decodeMsPerFrame: number;
  reconnects: number;
  /** Bytes received and sent since the start. */
  bytesDownTotal: number;
  bytesUpTotal: number;
  /** Snapshot frames decoded since the start. */
  framesTotal: number;
  /** SDK decode time of all of them, ms. */
  decodeMsTotal: number;
  /** The slowest decode of one frame, ms. */
  decodeMsMax: number;
  /** Frames whose check hash (§2.6) matched the held state. */
  checksPassed: number;
  /** Frames whose check hash did not match (each asks for a resync). */
  checkFailures: number;
}

/** Counts traffic in one-second buckets. */
export class StatsMeter {
  private readonly window: { t: number; down: number; up: number; frames: number; decodeMs: number }[] = [];
  resyncs = 0;
  decodeErrors = 0;
  reconnects = 0;
  rttMs = Number.NaN;
  bytesDownTotal = 0;
  bytesUpTotal = 0;
  framesTotal = 0;
  decodeMsTotal = 0;
  decodeMsMax = 0;
  checksPassed = 0;
  checkFailures = 0;

  constructor(private readonly now: () => number) {}

  private bucket() {
    const t = Math.floor(this.now() / 250);
    let b = this.window[this.window.length - 1];
    if (!b || b.t !== t) {
      b = { t, down: 0, up: 0, frames: 0, decodeMs: 0 };
      this.window.push(b);
      while (this.window.length > 0 && this.window[0]!.t <= t - 4) this.window.shift();
    }
    return b;
  }

  down(bytes: number): void {
    this.bucket().down += bytes;
    this.bytesDownTotal += bytes;
  }

  up(bytes: number): void {
    this.bucket().up += bytes;
    this.bytesUpTotal += bytes;
  }

  frame(decodeMs: number): void {
    const b = this.bucket();
    b.frames += 1;
    b.decodeMs += decodeMs;
    this.framesTotal += 1;
    this.decodeMsTotal += decodeMs;
    this.decodeMsMax = Math.max(this.decodeMsMax, decodeMs);
  }

  snapshot(): NetStats {
    const t = Math.floor(this.now() / 250);
    const live = this.window.filter((b) => b.t > t - 4);
    const sum = (f: (b: (typeof live)[number]) => number) => live.reduce((a, b) => a + f(b), 0);
    const frames = sum((b) => b.frames);
    return {
      bytesDownPerS: sum((b) => b.down),
      bytesUpPerS: sum((b) => b.up),
      framesPerS: frames,
      resyncs: this.resyncs,
      decodeErrors: this.decodeErrors,
      rttMs: this.rttMs,
      decodeMsPerFrame: frames > 0 ? sum((b) => b.decodeMs) / frames : 0,
      reconnects: this.reconnects,
      bytesDownTotal: this.bytesDownTotal,
      bytesUpTotal: this.bytesUpTotal,
      framesTotal: this.framesTotal,
      decodeMsTotal: this.decodeMsTotal,
      decodeMsMax: this.decodeMsMax,
      checksPassed: this.checksPassed,
      checkFailures: this.checkFailures,
    };
  }
}

/** Added delay for development: every message waits `latencyMs` plus up to `jitterMs`, in order. */
export interface LinkConditionerOptions {
  latencyMs: number;
  jitterMs?: number;
}

/**
 * Delays messages one way, keeping their order (a reliable ordered link: a late message holds
 * back the ones behind it, as TCP does).
 */
export class LinkConditioner<T> {
  private lastRelease = 0;

  constructor(
    private readonly opts: LinkConditionerOptions,
    private readonly deliver: (msg: T) => void,
    private readonly now: () => number,
    private readonly random: () => number = Math.random,
  ) {}

  push(msg: T): void {
    const jitter = (this.opts.jitterMs ?? 0) * this.random();
    const at = Math.max(this.lastRelease, this.now() + this.opts.latencyMs + jitter);
    this.lastRelease = at;
    setTimeout(() => this.deliver(msg), Math.max(0, at - this.now()));
  }
}
