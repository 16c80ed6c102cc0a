/**
 * Why a snapshot frame was not applied (the Rust `FrameError`). On any of these the client sends
 * `Resync` and the server answers with a keyframe; the decoder's state is unchanged.
 */
export type FrameErrorKind = "truncated" | "chain_break" | "check_mismatch" | "malformed" | "too_large";

/** A frame the decoder refused. `kind` is stable; `message` is for people. */
export class FrameError extends Error {
  readonly kind: FrameErrorKind;
  /** For `chain_break`: the last sequence applied (0 when none); for `check_mismatch`: the check carried. */
  readonly expected?: number;
  /** For `chain_break`: the base the frame named; for `check_mismatch`: the hash of what would be held. */
  readonly got?: number;

  constructor(kind: FrameErrorKind, message: string, expected?: number, got?: number) {
    super(message);
    this.name = "FrameError";
    this.kind = kind;
    this.expected = expected;
    this.got = got;
  }

  static truncated(): FrameError {
    return new FrameError("truncated", "truncated frame");
  }

  static malformed(what: string): FrameError {
    return new FrameError("malformed", `malformed frame: ${what}`);
  }

  static tooLarge(): FrameError {
    return new FrameError("too_large", "frame too large");
  }

  static chainBreak(expected: number, got: number): FrameError {
    return new FrameError("chain_break", `chain break: expected base ${expected}, got ${got}`, expected, got);
  }

  static checkMismatch(expected: number, got: number): FrameError {
    const hex = (v: number) => "0x" + v.toString(16).padStart(8, "0");
    return new FrameError("check_mismatch", `check mismatch: expected ${hex(expected)}, got ${hex(got)}`, expected, got);
  }
}
