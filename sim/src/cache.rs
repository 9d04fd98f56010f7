//! The CPU cache, as far as persistence cares: which PM lines are cached and
//! dirty. A flush writes a line to PM only if it is dirty (a flush of a clean or
//! absent line moves no data), and a dirty line evicted by capacity reaches PM
//! without any flush — under eADR the only way data gets there.
//!
//! One set-associative level with 64 B lines and true LRU, standing for the
//! last-level cache. Each set is kept in recency order (most recent first), so a
//! hit on the line just used costs one compare and LRU needs no time stamps.
//! Its valid lines form a prefix of the set (invalidation closes the gap, a
//! fill shifts the prefix), so lookups and shifts stop at the first empty way:
//! their cost is the number of lines the set holds, not its associativity.
//! Instruction effects (Intel SDM): `clwb` writes a dirty line back and leaves it
//! cached clean; `clflush`/`clflushopt` write it back and invalidate it; a
//! non-temporal store bypasses the cache and invalidates a cached copy.

use crate::config::CacheConfig;

/// An empty way. Entries are `line_number << 1 | dirty`; line numbers are below
/// 2^58, so no entry equals this.
const EMPTY: u64 = u64::MAX;

/// What a cached access did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    pub hit: bool,
    /// The address of a dirty line evicted to make room: it is written to PM.
    pub writeback: Option<u64>,
    /// Whether a clean line was evicted (for the eviction count).
    pub evicted: bool,
}

/// Counters of the cache itself (not attributable to threads or regions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheCounters {
    pub accesses: u64,
    pub hits: u64,
    /// Lines brought in from PM (store or load misses).
    pub fills: u64,
    pub evictions: u64,
    pub dirty_evictions: u64,
}

impl CacheCounters {
    /// What was counted since `earlier` (a window's figures).
    pub fn since(&self, earlier: &CacheCounters) -> CacheCounters {
        CacheCounters {
            accesses: self.accesses - earlier.accesses,
            hits: self.hits - earlier.hits,
            fills: self.fills - earlier.fills,
            evictions: self.evictions - earlier.evictions,
            dirty_evictions: self.dirty_evictions - earlier.dirty_evictions,
        }
    }
}

#[derive(Clone, Debug)]
pub struct CpuCache {
    ways: usize,
    sets: u64,
    /// When `sets` is a power of two the set is the low bits of the line number
    /// (as in L1/L2); otherwise a hash of it (as in the sliced LLC of Intel
    /// server parts, whose hash is not public), and this is `None`.
    mask: Option<u64>,
    tags: Vec<u64>,
    pub counters: CacheCounters,
}

impl CpuCache {
    pub fn new(cfg: &CacheConfig) -> Self {
        let sets = cfg.sets as u64;
        let ways = cfg.ways as usize;
        CpuCache {
            ways,
            sets,
            mask: sets.is_power_of_two().then_some(sets - 1),
            tags: vec![EMPTY; sets as usize * ways],
            counters: CacheCounters::default(),
        }
    }

    #[inline(always)]
    fn set(&mut self, line: u64) -> &mut [u64] {
        let s = if let Some(mask) = self.mask {
            line & mask
        } else {
            // Multiplicative hash, then map the 64-bit hash onto 0..sets
            // without a division (Lemire's multiply-shift range reduction).
            let h = line.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            ((h as u128 * self.sets as u128) >> 64) as u64
        };
        let w = self.ways;
        let at = s as usize * w;
        &mut self.tags[at..at + w]
    }

    /// A store (`write`) or load of the line holding `addr`: a miss fills the
    /// line (write-allocate) and may evict the least recently used one.
    #[inline]
    pub fn access(&mut self, addr: u64, write: bool) -> Access {
        let line = addr >> 6;
        let dirty = write as u64;
        self.counters.accesses += 1;
        let set = self.set(line);
        if set[0] >> 1 == line {
            set[0] |= dirty;
            self.counters.hits += 1;
            return Access { hit: true, writeback: None, evicted: false };
        }
        // Find the line, or the end of the valid prefix (the first empty way).
        let n = set.len();
        let mut i = 1;
        while i < n && set[i] >> 1 != line && set[i] != EMPTY {
            i += 1;
        }
        if i < n && set[i] != EMPTY {
            // A hit: move to the front by hand (`copy_within` calls memmove,
            // which costs more than shifting a few words).
            let e = set[i] | dirty;
            for k in (1..=i).rev() {
                set[k] = set[k - 1];
            }
            set[0] = e;
            self.counters.hits += 1;
            return Access { hit: true, writeback: None, evicted: false };
        }
        // A miss: the new line goes to the front, the prefix shifts by one into
        // the empty way `i`, or the least recent line (the last) is evicted.
        let victim = if i < n { EMPTY } else { set[n - 1] };
        for k in (1..i.min(n - 1) + 1).rev() {
            set[k] = set[k - 1];
        }
        set[0] = line << 1 | dirty;
        self.counters.fills += 1;
        let evicted = victim != EMPTY;
        let writeback = (evicted && victim & 1 == 1).then_some((victim >> 1) << 6);
        self.counters.evictions += evicted as u64;
        self.counters.dirty_evictions += writeback.is_some() as u64;
        Access { hit: false, writeback, evicted }
    }

    /// `clwb` (`invalidate = false`) or `clflush`/`clflushopt` (`true`) of the
    /// line holding `addr`. Returns whether a dirty line was written back.
    #[inline]
    pub fn flush(&mut self, addr: u64, invalidate: bool) -> bool {
        let line = addr >> 6;
        let set = self.set(line);
        let n = set.len();
        let mut i = 0;
        while i < n && set[i] >> 1 != line {
            if set[i] == EMPTY {
                return false;
            }
            i += 1;
        }
        if i == n {
            return false;
        }
        let dirty = set[i] & 1 == 1;
        if invalidate {
            // Close the gap: the valid lines after it move up by one.
            while i + 1 < n && set[i + 1] != EMPTY {
                set[i] = set[i + 1];
                i += 1;
            }
            set[i] = EMPTY;
        } else {
            // clwb keeps the line; it does not count as a use for LRU.
            set[i] &= !1;
        }
        dirty
    }

    /// Lines still dirty: data that has not reached PM when the trace ends.
    pub fn dirty_lines(&self) -> u64 {
        self.tags.iter().filter(|&&e| e != EMPTY && e & 1 == 1).count() as u64
    }
}

/// The first and last 64 B line numbers `[addr, addr + size)` touches (one
/// line for size 0); the span stops at the top of the address space instead of
/// wrapping.
#[inline(always)]
pub fn line_span(addr: u64, size: u32) -> (u64, u64) {
    (addr >> 6, addr.saturating_add((size as u64).max(1) - 1) >> 6)
}

/// The addresses of the 64 B lines of [`line_span`].
#[inline(always)]
pub fn lines(addr: u64, size: u32) -> impl Iterator<Item = u64> {
    let (first, last) = line_span(addr, size);
    (first..=last).map(|l| l << 6)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(sets: u32, ways: u32) -> CpuCache {
        CpuCache::new(&CacheConfig { sets, ways })
    }

    #[test]
    fn lru_evicts_the_oldest_and_writes_back_dirty() {
        let mut c = cache(1, 2);
        assert!(!c.access(0, true).hit);
        assert!(!c.access(64, false).hit);
        assert!(c.access(0, false).hit); // 0 is now most recent
        let a = c.access(128, false); // evicts 64 (clean)
        assert_eq!(a, Access { hit: false, writeback: None, evicted: true });
        let a = c.access(192, false); // evicts 0 (dirty)
        assert_eq!(a.writeback, Some(0));
        assert_eq!(c.counters.dirty_evictions, 1);
    }

    #[test]
    fn clwb_cleans_and_keeps_clflush_invalidates() {
        let mut c = cache(4, 2);
        c.access(0x1000, true);
        assert!(c.flush(0x1000, false));
        assert!(!c.flush(0x1000, false), "clean after clwb");
        assert!(c.access(0x1000, true).hit, "clwb keeps the line");
        assert!(c.flush(0x1000, true));
        assert!(!c.access(0x1000, false).hit, "clflush invalidates");
        assert_eq!(c.dirty_lines(), 0);
        c.access(0x2000, true);
        assert_eq!(c.dirty_lines(), 1);
    }

    #[test]
    fn hashed_sets_cover_all_sets() {
        let mut c = cache(3, 1);
        for l in 0..300u64 {
            c.access(l * 64, false);
        }
        assert_eq!(c.tags.iter().filter(|&&e| e != EMPTY).count(), 3);
    }
}
