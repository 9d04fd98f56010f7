//! Interleaved mapping of blocks to bitmap bits (NVAlloc §5.1, Fig. 4).
//!
//! A bitmap that maps block `b` to bit `b` puts the bits of consecutive
//! blocks on the same 64 B line, so a run of allocations from one slab
//! flushes that line again and again (a *reflush*, which Optane serves several
//! times slower than a first flush). The interleaved mapping cuts the bitmap
//! into *bit stripes* of one cache line (512 bits) each and deals consecutive
//! blocks round-robin to `S` stripes: blocks 0, 1, …, S−1 land on S different
//! lines, block S on the first line again, next to block 0. With `S = 1` it is
//! the sequential mapping.
//!
//! Beyond `512·S` blocks the pattern repeats on the next group of `S` lines.
//! This is the formula of the NVAlloc artifact:
//! `bit(b) = (b / 512S)·512S + (b mod S)·512 + (b mod 512S) / S`,
//! and the bitmap area is rounded up to whole groups of `S` lines.

/// Bits in one 64 B line: the size of a bit stripe.
pub const BITS_PER_LINE: u32 = 512;

/// The block ↔ bit mapping of one bitmap with `stripes` stripes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StripeMap {
    stripes: u32,
}

impl StripeMap {
    /// # Panics
    /// If `stripes` is 0.
    pub const fn new(stripes: u32) -> StripeMap {
        assert!(stripes > 0, "a bitmap needs at least one stripe");
        StripeMap { stripes }
    }

    pub const fn stripes(self) -> u32 {
        self.stripes
    }

    /// Bits in one group of `stripes` lines.
    #[inline(always)]
    const fn group(self) -> u32 {
        BITS_PER_LINE * self.stripes
    }

    /// The bit that records block `b`.
    #[inline(always)]
    pub const fn bit_of(self, b: u32) -> u32 {
        let g = self.group();
        (b / g) * g + (b % self.stripes) * BITS_PER_LINE + (b % g) / self.stripes
    }

    /// The block that bit `bit` records (the inverse of [`StripeMap::bit_of`]).
    #[inline(always)]
    pub const fn block_of(self, bit: u32) -> u32 {
        let g = self.group();
        let within = bit % g;
        (bit / g) * g + (within % BITS_PER_LINE) * self.stripes + within / BITS_PER_LINE
    }

    /// The bitmap line (0-based, from the start of the bitmap) holding block `b`'s bit.
    #[inline(always)]
    pub const fn line_of(self, b: u32) -> u32 {
        self.bit_of(b) / BITS_PER_LINE
    }

    /// Bytes of bitmap for `nblocks` blocks: whole groups of `stripes` lines.
    pub const fn area_bytes(self, nblocks: u32) -> u32 {
        nblocks.div_ceil(self.group()) * self.stripes * 64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_mapping_is_the_identity() {
        let m = StripeMap::new(1);
        for b in 0..3000 {
            assert_eq!(m.bit_of(b), b);
            assert_eq!(m.block_of(b), b);
        }
        assert_eq!(m.area_bytes(1024), 128);
        assert_eq!(m.area_bytes(1), 64);
    }

    #[test]
    fn interleaved_mapping_spreads_consecutive_blocks_over_lines() {
        for s in [2u32, 3, 4, 6, 8, 32] {
            let m = StripeMap::new(s);
            let n = 4 * BITS_PER_LINE * s + 17;
            let mut seen = vec![false; (m.area_bytes(n) * 8) as usize];
            for b in 0..n {
                let bit = m.bit_of(b);
                assert!(!seen[bit as usize], "S={s}: bit {bit} mapped twice");
                seen[bit as usize] = true;
                assert_eq!(m.block_of(bit), b, "S={s}: inverse of block {b}");
                // Any S consecutive blocks lie on S distinct lines.
                let lines: std::collections::HashSet<u32> = (b..b + s).map(|x| m.line_of(x)).collect();
                assert_eq!(lines.len(), s as usize);
            }
        }
        // The artifact's example: S = 6, block b -> bit formula.
        let m = StripeMap::new(6);
        assert_eq!(m.bit_of(0), 0);
        assert_eq!(m.bit_of(1), 512);
        assert_eq!(m.bit_of(5), 5 * 512);
        assert_eq!(m.bit_of(6), 1);
        assert_eq!(m.bit_of(3072), 3072);
        assert_eq!(m.area_bytes(1017), 6 * 64);
    }
}
