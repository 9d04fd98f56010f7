//! Size classes for slab allocation: requests are rounded up to a quantum
//! (64 B, one cache line) and then to the next jemalloc-style class.
//!
//! jemalloc spaces classes geometrically with four classes per doubling, so
//! internal fragmentation stays under 25 % while the number of classes (and
//! of partially full slabs, one set per class) stays small. The first four
//! classes are 1–4 quanta; after that every power-of-two interval
//! `(2^k, 2^(k+1)]` holds four evenly spaced classes. With a 64 B quantum and
//! a 16 KiB limit that is 64, 128, …, 512 (step 64), 640 … 1024 (step 128), …,
//! 10240, 12288, 14336: 27 classes. The quantum is a cache line so that no
//! two blocks share a line (a flush of one block never writes back another's
//! bytes) and block offsets keep six low zero bits (see the WAL encoding).

/// A table of size classes with O(1) lookup from a request size.
#[derive(Clone, Debug)]
pub struct SizeClasses {
    quantum: u32,
    sizes: Vec<u32>,
    /// `lookup[(size - 1) / quantum]` is the class of `size`.
    lookup: Vec<u8>,
}

impl SizeClasses {
    /// jemalloc-style classes: multiples of `quantum` (a power of two), four per
    /// doubling, every class strictly below `limit`.
    ///
    /// # Panics
    /// If `quantum` is not a power of two or there would be more than 255 classes.
    pub fn jemalloc(quantum: u32, limit: u32) -> SizeClasses {
        assert!(quantum.is_power_of_two(), "size-class quantum {quantum} is not a power of two");
        let mut sizes = Vec::new();
        let mut size = quantum;
        while size < limit && size <= 4 * quantum {
            sizes.push(size);
            size += quantum;
        }
        let mut base = 4 * quantum;
        'groups: loop {
            let step = base / 4;
            for i in 1..=4 {
                let s = base + i * step;
                if s >= limit {
                    break 'groups;
                }
                sizes.push(s);
            }
            base *= 2;
        }
        assert!(sizes.len() < 256, "too many size classes");
        let max = sizes.last().copied().unwrap_or(0);
        let mut lookup = Vec::with_capacity((max / quantum) as usize);
        let mut class = 0u8;
        for q in 1..=max / quantum {
            while sizes[class as usize] < q * quantum {
                class += 1;
            }
            lookup.push(class);
        }
        SizeClasses { quantum, sizes, lookup }
    }

    /// The class serving `size` bytes, or `None` if it is larger than the
    /// largest class (a large allocation) or zero-sized requests are rounded up.
    #[inline]
    pub fn class_of(&self, size: u64) -> Option<usize> {
        let q = (size.max(1) - 1) / self.quantum as u64;
        self.lookup.get(q as usize).map(|&c| c as usize)
    }

    /// The block size of `class`.
    #[inline]
    pub fn size(&self, class: usize) -> u32 {
        self.sizes[class]
    }

    /// The largest size served by a class.
    pub fn max_size(&self) -> u32 {
        self.sizes.last().copied().unwrap_or(0)
    }

    pub fn len(&self) -> usize {
        self.sizes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sizes.is_empty()
    }

    pub fn quantum(&self) -> u32 {
        self.quantum
    }

    /// All block sizes, smallest first.
    pub fn sizes(&self) -> &[u32] {
        &self.sizes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jemalloc_classes_with_a_cache_line_quantum() {
        let sc = SizeClasses::jemalloc(64, 16 << 10);
        let expected = [
            64, 128, 192, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096,
            5120, 6144, 7168, 8192, 10240, 12288, 14336,
        ];
        assert_eq!(sc.sizes(), &expected);
        assert_eq!(sc.class_of(0), Some(0));
        assert_eq!(sc.class_of(1), Some(0));
        assert_eq!(sc.class_of(64), Some(0));
        assert_eq!(sc.class_of(65), Some(1));
        assert_eq!(sc.class_of(513), Some(8));
        assert_eq!(sc.size(sc.class_of(1000).unwrap()), 1024);
        assert_eq!(sc.class_of(14336), Some(26));
        assert_eq!(sc.class_of(14337), None);
        for size in 1..=14336u64 {
            let c = sc.class_of(size).unwrap();
            assert!(sc.size(c) as u64 >= size);
            assert!(c == 0 || (sc.size(c - 1) as u64) < size, "class of {size} is not the smallest fit");
        }
    }
}
