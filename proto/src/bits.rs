//! Bit-level writer and reader (LSB-first) with Exp-Golomb codes, for the snapshot frame.
//!
//! Bits are packed from the least significant bit of each byte upwards; a field of `n` bits is
//! written low bit first. The reader never panics: running out of input is
//! [`crate::frame::FrameError::Truncated`], an overlong code is `Malformed`.
//! This module knows nothing about entities or poses.

use crate::frame::FrameError;

/// Longest Exp-Golomb prefix the reader accepts (codes of values below `2^48 << k`).
pub const MAX_EG_ZEROS: u32 = 47;

/// Where bits go: the real [`BitWriter`] or the size-only [`BitCounter`].
pub trait BitSink {
    /// Appends the low `n` bits of `v` (`n <= 32`).
    fn put(&mut self, v: u64, n: u32);

    /// Appends the low `n` bits of `v` (`n <= 64`).
    fn put_wide(&mut self, v: u64, n: u32) {
        if n > 32 {
            self.put(v, 32);
            self.put(v >> 32, n - 32);
        } else {
            self.put(v, n);
        }
    }

    /// Appends one bit.
    #[inline]
    fn bit(&mut self, b: bool) {
        self.put(u64::from(b), 1);
    }

    /// Appends `v` as an Exp-Golomb code of order `k`: `len - 1` zero bits, a one bit, then the
    /// `len - 1` low bits of `(v >> k) + 1` (whose bit length is `len`), then the `k` low bits of
    /// `v`. `v >> k` must be below `2^48 - 1`.
    #[inline(always)]
    fn eg(&mut self, v: u64, k: u32) {
        let x = (v >> k) + 1;
        let len = 64 - x.leading_zeros();
        let total = 2 * len - 1 + k;
        if total <= 32 {
            // One field: the prefix, the rest of x above it, the k low bits of v above that.
            let rest = x & ((1u64 << (len - 1)) - 1);
            let low = v & ((1u64 << k) - 1);
            self.put(
                (1u64 << (len - 1)) | (rest << len) | (low << (2 * len - 1)),
                total,
            );
            return;
        }
        self.put_wide(1u64 << (len - 1), len);
        self.put_wide(x, len - 1);
        self.put_wide(v, k);
    }

    /// Appends a signed value as a zigzag Exp-Golomb code of order `k`.
    #[inline(always)]
    fn seg(&mut self, v: i64, k: u32) {
        self.eg(zigzag(v), k);
    }
}

/// Maps a signed value to unsigned: 0, -1, 1, -2, … → 0, 1, 2, 3, …
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The inverse of [`zigzag`].
pub fn unzigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

/// Counts bits without storing them.
#[derive(Clone, Copy, Debug, Default)]
pub struct BitCounter {
    /// Bits counted so far.
    pub bits: u64,
}

impl BitSink for BitCounter {
    fn put(&mut self, _v: u64, n: u32) {
        self.bits += u64::from(n);
    }

    fn eg(&mut self, v: u64, k: u32) {
        let x = (v >> k) + 1;
        let len = u64::from(64 - x.leading_zeros());
        self.bits += 2 * len - 1 + u64::from(k);
    }
}

/// Appends bits to a byte vector.
#[derive(Debug)]
pub struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    start: usize,
    acc: u64,
    n: u32,
}

impl<'a> BitWriter<'a> {
    /// Starts writing at the end of `out` (byte aligned).
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        let start = out.len();
        Self {
            out,
            start,
            acc: 0,
            n: 0,
        }
    }

    /// Bits written so far by this writer.
    pub fn bit_len(&self) -> u64 {
        (self.out.len() - self.start) as u64 * 8 + u64::from(self.n)
    }

    /// Pads the last byte with zero bits and flushes it.
    pub fn finish(mut self) {
        while self.n > 0 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n = self.n.saturating_sub(8);
        }
    }
}

impl BitSink for BitWriter<'_> {
    #[inline]
    fn put(&mut self, v: u64, n: u32) {
        debug_assert!(n <= 32);
        self.acc |= (v & ((1u64 << n) - 1)) << self.n;
        self.n += n;
        if self.n >= 32 {
            self.out.extend_from_slice(&(self.acc as u32).to_le_bytes());
            self.acc >>= 32;
            self.n -= 32;
        }
    }
}

/// Reads bits written by [`BitWriter`].
#[derive(Debug)]
pub struct BitReader<'a> {
    data: &'a [u8],
    pos: usize,
    acc: u64,
    n: u32,
}

impl<'a> BitReader<'a> {
    /// Reads from the start of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Self {
            data,
            pos: 0,
            acc: 0,
            n: 0,
        }
    }

    #[inline]
    fn refill(&mut self) {
        if let Some(chunk) = self.data.get(self.pos..self.pos + 8) {
            // Whole bytes that fit above the bits already held.
            let take = (64 - self.n) / 8;
            if take == 0 {
                return;
            }
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            let w = u64::from_le_bytes(word);
            let bits = take * 8;
            let add = if bits == 64 {
                w
            } else {
                w & ((1u64 << bits) - 1)
            };
            self.acc |= add << self.n;
            self.n += bits;
            self.pos += take as usize;
            return;
        }
        while self.n <= 56 {
            let Some(&b) = self.data.get(self.pos) else {
                break;
            };
            self.acc |= u64::from(b) << self.n;
            self.n += 8;
            self.pos += 1;
        }
    }

    /// Reads `n` bits (`n <= 56`).
    #[inline]
    pub fn get(&mut self, n: u32) -> Result<u64, FrameError> {
        if n == 0 {
            return Ok(0);
        }
        if self.n < n {
            self.refill();
            if self.n < n {
                return Err(FrameError::Truncated);
            }
        }
        let v = self.acc & (u64::MAX >> (64 - n));
        self.acc >>= n;
        self.n -= n;
        Ok(v)
    }

    /// Reads one bit.
    #[inline]
    pub fn bit(&mut self) -> Result<bool, FrameError> {
        Ok(self.get(1)? == 1)
    }

    /// Reads an Exp-Golomb code of order `k` (see [`BitSink::eg`]).
    #[inline]
    pub fn eg(&mut self, k: u32) -> Result<u64, FrameError> {
        if self.n <= MAX_EG_ZEROS {
            self.refill();
        }
        let zeros = if self.acc == 0 {
            if self.n > MAX_EG_ZEROS || self.pos < self.data.len() {
                return Err(FrameError::Malformed("overlong code"));
            }
            return Err(FrameError::Truncated);
        } else {
            self.acc.trailing_zeros()
        };
        if zeros > MAX_EG_ZEROS {
            return Err(FrameError::Malformed("overlong code"));
        }
        if zeros >= self.n {
            return Err(FrameError::Truncated);
        }
        let len = 2 * zeros + 1 + k;
        if len < 64 && len <= self.n {
            // The whole code is in the accumulator.
            let rest = (self.acc >> (zeros + 1)) & ((1u64 << zeros) - 1);
            let low = (self.acc >> (2 * zeros + 1)) & ((1u64 << k) - 1);
            self.acc >>= len;
            self.n -= len;
            return Ok((((1u64 << zeros) | rest) - 1) << k | low);
        }
        self.get(zeros + 1)?;
        let rest = if zeros > 32 {
            let lo = self.get(32)?;
            lo | (self.get(zeros - 32)? << 32)
        } else {
            self.get(zeros)?
        };
        let x = (1u64 << zeros) | rest;
        let hi = x - 1;
        Ok((hi << k) | self.get(k)?)
    }

    /// Reads a zigzag Exp-Golomb code of order `k`.
    #[inline]
    pub fn seg(&mut self, k: u32) -> Result<i64, FrameError> {
        Ok(unzigzag(self.eg(k)?))
    }

    /// Succeeds when only zero padding bits of the last byte remain.
    pub fn finish(mut self) -> Result<(), FrameError> {
        self.refill();
        if self.pos < self.data.len() || self.n >= 8 || self.acc != 0 {
            return Err(FrameError::Malformed("trailing bytes"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_fields_and_codes() {
        let mut buf = Vec::new();
        let mut w = BitWriter::new(&mut buf);
        let vals: [u64; 9] = [
            0,
            1,
            2,
            3,
            100,
            65_535,
            1 << 31,
            u64::from(u32::MAX),
            (1 << 40) + 7,
        ];
        for (i, &v) in vals.iter().enumerate() {
            w.put(v & 0x1f, 5);
            w.put_wide(v, 64);
            w.eg(v, (i % 4) as u32);
            w.seg(-(v as i64), 2);
            w.bit(i % 2 == 0);
        }
        w.finish();
        let mut c = BitCounter::default();
        for (i, &v) in vals.iter().enumerate() {
            c.put(v & 0x1f, 5);
            c.put_wide(v, 64);
            c.eg(v, (i % 4) as u32);
            c.seg(-(v as i64), 2);
            c.bit(i % 2 == 0);
        }
        assert_eq!(c.bits.div_ceil(8), buf.len() as u64);
        for n in 0..70u32 {
            let mut b = Vec::new();
            let mut w = BitWriter::new(&mut b);
            for _ in 0..n {
                w.bit(true);
            }
            w.finish();
            assert_eq!(b.len() as u32, n.div_ceil(8));
            let mut r = BitReader::new(&b);
            for _ in 0..n {
                assert!(r.bit().unwrap());
            }
            r.finish().unwrap();
        }
        let mut r = BitReader::new(&buf);
        for (i, &v) in vals.iter().enumerate() {
            assert_eq!(r.get(5).unwrap(), v & 0x1f);
            assert_eq!(r.get(32).unwrap() | (r.get(32).unwrap() << 32), v);
            assert_eq!(r.eg((i % 4) as u32).unwrap(), v);
            assert_eq!(r.seg(2).unwrap(), -(v as i64));
            assert_eq!(r.bit().unwrap(), i % 2 == 0);
        }
        r.finish().unwrap();
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_code_sequences_round_trip(
            ops in proptest::collection::vec((0u8..4, proptest::num::u64::ANY, 0u32..13), 0..200)
        ) {
            let value = |kind: u8, v: u64, k: u32| match kind {
                0 => v & 1,
                1 => v & 0xffff_ffff,
                2 => v >> (17 + k),
                _ => v >> (19 + k),
            };
            let mut buf = Vec::new();
            let mut w = BitWriter::new(&mut buf);
            let mut c = BitCounter::default();
            for &(kind, v, k) in &ops {
                let v = value(kind, v, k);
                match kind {
                    0 => { w.bit(v == 1); c.bit(v == 1); }
                    1 => { w.put(v, 32); c.put(v, 32); }
                    2 => { w.eg(v, k); c.eg(v, k); }
                    _ => { w.seg(v as i64 - (1 << 40), k); c.seg(v as i64 - (1 << 40), k); }
                }
            }
            w.finish();
            proptest::prop_assert_eq!(c.bits.div_ceil(8), buf.len() as u64);
            let mut r = BitReader::new(&buf);
            for &(kind, v, k) in &ops {
                let v = value(kind, v, k);
                match kind {
                    0 => proptest::prop_assert_eq!(r.bit().unwrap(), v == 1),
                    1 => proptest::prop_assert_eq!(r.get(32).unwrap(), v),
                    2 => proptest::prop_assert_eq!(r.eg(k).unwrap(), v),
                    _ => proptest::prop_assert_eq!(r.seg(k).unwrap(), v as i64 - (1 << 40)),
                }
            }
            proptest::prop_assert!(r.finish().is_ok());
        }
    }

    #[test]
    fn eg_costs_match_the_spec() {
        let cost = |v: u64, k: u32| {
            let mut c = BitCounter::default();
            c.eg(v, k);
            c.bits
        };
        assert_eq!(cost(0, 0), 1);
        assert_eq!(cost(1, 0), 3);
        assert_eq!(cost(2, 0), 3);
        assert_eq!(cost(3, 0), 5);
        assert_eq!(cost(0, 2), 3);
        assert_eq!(zigzag(-1), 1);
        assert_eq!(unzigzag(zigzag(i64::MIN / 4)), i64::MIN / 4);
    }

    #[test]
    fn truncated_and_overlong_are_errors() {
        let mut r = BitReader::new(&[0x00]);
        assert_eq!(r.eg(0), Err(FrameError::Truncated));
        let zeros = [0u8; 16];
        let mut r = BitReader::new(&zeros);
        assert_eq!(r.eg(0), Err(FrameError::Malformed("overlong code")));
        let mut r = BitReader::new(&[0xff]);
        assert_eq!(r.get(8).unwrap(), 0xff);
        assert_eq!(r.get(1), Err(FrameError::Truncated));
        let r = BitReader::new(&[0x00, 0x01]);
        assert!(r.finish().is_err());
    }
}
