//! Maps keyed by integers (heap offsets, line offsets, thread ids, piece
//! numbers): hashed by a multiply and a fold instead of SipHash, whose
//! resistance to chosen keys buys nothing here and costs most of a lookup.
//! The crash explorer looks lines up on every event and every crash point;
//! NVAlloc's arenas look a slab's vslab up on every block they hand out or
//! take back, where the modelled code reaches it through a pointer.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A multiplicative hasher for integer keys.
#[derive(Clone, Copy, Default)]
pub struct IntHasher(u64);

impl Hasher for IntHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(26) ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    /// The product's high bits folded down: offsets are multiples of 64,
    /// and a table indexes by the low bits.
    #[inline]
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 32)
    }
}

/// A `HashMap` keyed by integers.
pub type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;
/// A `HashSet` of integers.
pub type IntSet<K> = HashSet<K, BuildHasherDefault<IntHasher>>;
