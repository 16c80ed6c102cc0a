/**
 * Bit reader (LSB-first) with Exp-Golomb codes, for the snapshot frame (docs/PROTOCOL.md §2.1).
 *
 * Bits are packed from the least significant bit of each byte upwards; a field of `n` bits is read
 * low bit first. The reader never throws anything but {@link FrameError}: running out of input is
 * `truncated`, an overlong code is `malformed`. Values are JavaScript numbers: every field the
 * format allows fits in 2^53; a larger (malformed) code yields an inexact huge number that the
 * caller's range checks refuse, as the Rust reader's `try_from`s do.
 */
import { FrameError } from "./errors.js";

/** Longest Exp-Golomb prefix the reader accepts (codes of values below `2^48 << k`). */
export const MAX_EG_ZEROS = 47;

const POW2: number[] = Array.from({ length: 64 }, (_, i) => 2 ** i);

/** Reads bits written by the Rust `BitWriter`. */
export class BitReader {
  private readonly data: Uint8Array;
  private pos: number;
  private readonly end: number;
  /** The bits of the current byte not read yet, in its low `avail` bits. */
  private cur = 0;
  private avail = 0;

  constructor(data: Uint8Array, start = 0, end = data.length) {
    this.data = data;
    this.pos = start;
    this.end = end;
  }

  /** Reads `n` bits (`n <= 32`) as an unsigned number. */
  get(n: number): number {
    let out = 0;
    let shift = 0;
    while (n > 0) {
      if (this.avail === 0) {
        if (this.pos >= this.end) throw FrameError.truncated();
        this.cur = this.data[this.pos++]!;
        this.avail = 8;
      }
      const take = n < this.avail ? n : this.avail;
      const bits = this.cur & ((1 << take) - 1);
      out += bits * POW2[shift]!;
      this.cur >>>= take;
      this.avail -= take;
      shift += take;
      n -= take;
    }
    return out;
  }

  /** Reads one bit. */
  bit(): boolean {
    if (this.avail === 0) {
      if (this.pos >= this.end) throw FrameError.truncated();
      this.cur = this.data[this.pos++]!;
      this.avail = 8;
    }
    const b = this.cur & 1;
    this.cur >>>= 1;
    this.avail -= 1;
    return b === 1;
  }

  /** Reads an Exp-Golomb code of order `k`. */
  eg(k: number): number {
    let zeros = 0;
    for (;;) {
      if (this.avail === 0) {
        if (this.pos >= this.end) throw FrameError.truncated();
        this.cur = this.data[this.pos++]!;
        this.avail = 8;
      }
      if (this.cur === 0) {
        zeros += this.avail;
        this.avail = 0;
        if (zeros > MAX_EG_ZEROS) throw FrameError.malformed("overlong code");
        continue;
      }
      const tz = 31 - Math.clz32(this.cur & -this.cur);
      zeros += tz;
      if (zeros > MAX_EG_ZEROS) throw FrameError.malformed("overlong code");
      this.cur >>>= tz + 1;
      this.avail -= tz + 1;
      break;
    }
    let rest: number;
    if (zeros > 32) {
      const lo = this.get(32);
      rest = lo + this.get(zeros - 32) * POW2[32]!;
    } else {
      rest = this.get(zeros);
    }
    const hi = POW2[zeros]! + rest - 1;
    return hi * POW2[k]! + this.get(k);
  }

  /** Reads a zigzag Exp-Golomb code of order `k`. */
  seg(k: number): number {
    return unzigzag(this.eg(k));
  }

  /** Succeeds when only zero padding bits of the last byte remain. */
  finish(): void {
    if (this.pos < this.end || this.cur !== 0) throw FrameError.malformed("trailing bytes");
  }
}

/** The inverse of zigzag: 0, 1, 2, 3, … → 0, −1, 1, −2, … */
export function unzigzag(u: number): number {
  // `u % 2` is exact for every number; halving a huge odd number is inexact but only feeds range
  // checks that refuse it.
  return u % 2 === 0 ? u / 2 : -(u + 1) / 2;
}

/** Zigzag of a signed integer (|v| < 2^52). */
export function zigzag(v: number): number {
  return v >= 0 ? v * 2 : -v * 2 - 1;
}
