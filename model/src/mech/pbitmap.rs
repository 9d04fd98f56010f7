//! A persistent bitmap in the heap, addressed by block number through a
//! [`StripeMap`].
//!
//! Several threads update bits of the same word at once (a block is freed by
//! whichever thread holds it, not the one whose slab it came from), so bits
//! are set and cleared with a compare-and-swap loop rather than a plain store:
//! a store of a whole word would undo another thread's concurrent update. The
//! CAS is also what a real allocator on x86 issues (`lock cmpxchg`), so the
//! traced run records the same ordering point.
//!
//! Updates do not flush: the caller decides when a bit must be durable
//! ([`PBitmap::persist`]) and, under a GC consistency model, that it need not be.

use super::stripe::StripeMap;
use crate::pm::PmThread;

/// A bitmap at a 64 B-aligned heap offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PBitmap {
    base: u64,
    map: StripeMap,
}

impl PBitmap {
    /// # Panics
    /// If `base` is not 64 B aligned (stripes must be whole lines).
    pub fn new(base: u64, map: StripeMap) -> PBitmap {
        assert!(base & 63 == 0, "bitmap at {base:#x} is not cache-line aligned");
        PBitmap { base, map }
    }

    pub fn base(&self) -> u64 {
        self.base
    }

    pub fn map(&self) -> StripeMap {
        self.map
    }

    /// The heap offset of the word holding block `b`'s bit, and the bit's mask.
    #[inline(always)]
    pub fn word_of(&self, b: u32) -> (u64, u64) {
        let bit = self.map.bit_of(b);
        (self.base + (bit / 64) as u64 * 8, 1u64 << (bit % 64))
    }

    /// The heap offset of the 64 B line holding block `b`'s bit.
    #[inline(always)]
    pub fn line_of(&self, b: u32) -> u64 {
        self.base + self.map.line_of(b) as u64 * 64
    }

    /// Sets block `b`'s bit (not durable yet); returns whether it was already set.
    #[inline]
    pub fn set(&self, t: &mut PmThread, b: u32) -> bool {
        let (off, mask) = self.word_of(b);
        let mut old = t.load_u64(off);
        loop {
            if old & mask != 0 {
                return true;
            }
            match t.cas_u64(off, old, old | mask) {
                Ok(_) => return false,
                Err(now) => old = now,
            }
        }
    }

    /// Clears block `b`'s bit (not durable yet); returns whether it was set.
    #[inline]
    pub fn clear(&self, t: &mut PmThread, b: u32) -> bool {
        let (off, mask) = self.word_of(b);
        let mut old = t.load_u64(off);
        loop {
            if old & mask == 0 {
                return false;
            }
            match t.cas_u64(off, old, old & !mask) {
                Ok(_) => return true,
                Err(now) => old = now,
            }
        }
    }

    /// Whether block `b`'s bit is set (in the cache: durable or not).
    #[inline]
    pub fn test(&self, t: &PmThread, b: u32) -> bool {
        let (off, mask) = self.word_of(b);
        t.load_u64(off) & mask != 0
    }

    /// Makes block `b`'s bit durable: flushes its line and fences.
    #[inline]
    pub fn persist(&self, t: &mut PmThread, b: u32) {
        t.flush(self.line_of(b));
        t.fence();
    }

    /// Zeroes the bitmap area for `nblocks` blocks with plain stores (for a
    /// bitmap nobody else can see yet); the caller flushes it.
    pub fn zero(&self, t: &mut PmThread, nblocks: u32) {
        let bytes = self.map.area_bytes(nblocks) as u64;
        for w in (0..bytes).step_by(8) {
            t.store_u64(self.base + w, 0);
        }
    }

    /// Bytes the bitmap occupies for `nblocks` blocks.
    pub fn area_bytes(&self, nblocks: u32) -> u64 {
        self.map.area_bytes(nblocks) as u64
    }

    /// Calls `f` for every block in `0..nblocks` whose bit is set, by reading
    /// the bitmap word by word (recovery, statistics).
    pub fn for_each_set(&self, t: &PmThread, nblocks: u32, mut f: impl FnMut(u32)) {
        let words = self.map.area_bytes(nblocks) as u64 / 8;
        for w in 0..words {
            let mut v = t.load_u64(self.base + w * 8);
            while v != 0 {
                let bit = w as u32 * 64 + v.trailing_zeros();
                v &= v - 1;
                let b = self.map.block_of(bit);
                if b < nblocks {
                    f(b);
                }
            }
        }
    }

    /// Number of blocks in `0..nblocks` whose bit is set.
    pub fn count(&self, t: &PmThread, nblocks: u32) -> u32 {
        let mut n = 0;
        self.for_each_set(t, nblocks, |_| n += 1);
        n
    }
}
