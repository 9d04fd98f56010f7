//! Reflush distance (NVAlloc §3.1): for a flush of line L, the number
//! of *distinct* lines flushed since the previous flush of L; in A B C D A the
//! second A has distance 3, and the first flush of a line has infinite distance.
//!
//! This is the LRU stack distance of the flush stream, computed the classic way
//! (Bennett & Kruskal 1975): give every flush a time and mark the time of each
//! line's *latest* flush; the distance of a flush whose line was last flushed at
//! time p is the number of marks after p. The marks are a bit set over time,
//! counted by a Fenwick tree over leaves of eight 64-bit words: O(log(n / 512))
//! per flush instead of a scan of the history, and small enough to stay in
//! L1/L2 (about 1.1 bytes per line, besides the table of line times,
//! [`LineTimes`]: 4 bytes per line of a 4 KB chunk touched). Marks close to the
//! present (the reflushes that matter most) are counted by popcount without the
//! tree at all, and a mark moving within its leaf leaves the tree alone.
//!
//! Bounded memory: times grow with the number of flushes, lines only with the
//! number of distinct lines. When the time counter reaches the bit set's
//! capacity, the live times (one per line) are renumbered 0..live in order
//! (each line's new time is the rank of its old one) and the capacity becomes
//! eight times the number of lines (at least the line table's room); so memory
//! is O(distinct lines) on billions of events, and each compaction,
//! O(chunks × 64 + capacity / 64), is paid for by the flushes since the
//! previous one (at least 7 × lines, and at least chunks × 64 − lines).

use crate::line_times::{LineTimes, NEVER};

/// Histogram buckets: 0, 1, 2, 3, then powers of two [4, 8), [8, 16), …,
/// [2^31, 2^32), then "first flush". Distances are below 2^32 because they count
/// distinct lines, and the tracker holds fewer than 2^32.
pub const HIST_BUCKETS: usize = 35;
/// The bucket of first flushes (infinite distance).
pub const FIRST_BUCKET: usize = HIST_BUCKETS - 1;

/// The distance [`DistanceTracker::distance`] gives a first flush (infinite):
/// the time of a line never flushed.
pub const FIRST: u32 = NEVER;

/// The histogram bucket of a distance (`None` = first flush).
#[inline(always)]
pub fn bucket(d: Option<u64>) -> usize {
    bucket_of(d.map_or(FIRST, |d| d.min(FIRST as u64 - 1) as u32))
}

/// [`bucket`] of a distance from [`DistanceTracker::distance`], [`FIRST`]
/// for a first flush.
#[inline(always)]
pub fn bucket_of(d: u32) -> usize {
    let log = (31 - (d | 1).leading_zeros()) as usize;
    if d < 4 {
        d as usize
    } else {
        (2 + log + (d == FIRST) as usize).min(FIRST_BUCKET)
    }
}

/// The label of a bucket: `0`, `1`, `2`, `3`, `4-7`, `8-15`, …, `first`.
pub fn bucket_label(b: usize) -> String {
    match b {
        0..=3 => b.to_string(),
        FIRST_BUCKET => "first".to_string(),
        b => {
            let lo = 1u64 << (b - 2);
            format!("{}-{}", lo, 2 * lo - 1)
        }
    }
}

/// Reflush distances of one flush stream (one thread, one DIMM or everything,
/// depending on the scope the simulator is asked for).
#[derive(Clone, Debug)]
pub struct DistanceTracker {
    /// Line number → time of that line's latest flush.
    last: LineTimes,
    /// Bit t is set iff time t is some line's latest flush; then
    /// `NEAR_WORDS` spare words that stay zero.
    bits: Vec<u64>,
    /// Fenwick tree over the leaves of `bits` (LEAF_WORDS words each),
    /// 1-based: `tree[l + 1]` covers leaf l. (Walks of a fixed number of steps without data-dependent
    /// branches were tried: fewer mispredictions, but as many more
    /// instructions, and no faster.)
    tree: Vec<u32>,
    /// The time the next flush gets; below `capacity`.
    now: u32,
    /// Times available before the next compaction.
    capacity: u32,
    /// Number of distinct lines (= number of set bits).
    live: u32,
    /// Smallest capacity after a compaction; tests set it tiny to compact often.
    min_capacity: u32,
    compactions: u64,
}

impl Default for DistanceTracker {
    fn default() -> Self {
        Self::new()
    }
}

/// Below this many words between a line's previous flush and now, the marks
/// are counted by popcount directly (cheaper than the tree's walk).
const NEAR_WORDS: usize = 4;

/// Words per leaf of the tree. A reflush moves its line's mark from its
/// previous time to now; within a leaf that costs the tree nothing, so the
/// wider the leaf, the rarer the tree's walks (on a Threadtest trace, 23 % of
/// the reflushes cross a word and 5.9 % a leaf; on Shbench, 47 % and 13 %); a
/// far count pays for it with up to LEAF_WORDS - 1 more popcounts.
const LEAF_WORDS: usize = 8;

impl DistanceTracker {
    /// Capacity that a tracker starts with and never shrinks below: large enough
    /// that small traces never compact, small enough (64 words) to cost nothing
    /// per thread.
    pub const DEFAULT_MIN_CAPACITY: u32 = 4096;

    pub fn new() -> Self {
        Self::with_min_capacity(Self::DEFAULT_MIN_CAPACITY)
    }

    /// A tracker whose time axis starts at (and never shrinks below) `min`
    /// times. Allocates nothing until the first flush.
    pub fn with_min_capacity(min: u32) -> Self {
        DistanceTracker {
            last: LineTimes::new(),
            bits: Vec::new(),
            tree: Vec::new(),
            now: 0,
            capacity: 0,
            live: 0,
            min_capacity: min.clamp(1, u32::MAX / 4),
            compactions: 0,
        }
    }

    /// Distinct lines seen.
    pub fn lines(&self) -> u32 {
        self.live
    }

    /// How many times the time axis was renumbered.
    pub fn compactions(&self) -> u64 {
        self.compactions
    }

    /// Bytes held, for the memory-is-bounded check.
    pub fn heap_bytes(&self) -> usize {
        self.last.heap_bytes() + 8 * self.bits.capacity() + 4 * self.tree.capacity()
    }

    /// Records a flush of the line holding `addr` and returns its reflush
    /// distance, `None` for the first flush of the line.
    #[inline(always)]
    pub fn flush(&mut self, addr: u64) -> Option<u64> {
        let d = self.distance(addr);
        (d != FIRST).then_some(d as u64)
    }

    /// [`DistanceTracker::flush`] with [`FIRST`] for a first flush: what the
    /// simulator calls on every flush.
    #[inline(always)]
    pub fn distance(&mut self, addr: u64) -> u32 {
        if self.now == self.capacity {
            self.compact();
        }
        let now = self.now;
        let t = self.last.slot(addr >> 6);
        let p = *t;
        // Flushed again right after its own previous flush: distance 0, and the
        // order of latest flushes does not change: nothing to update.
        if p as u64 + 1 == now as u64 {
            return 0;
        }
        *t = now;
        self.now = now + 1;
        let (wp, wn) = ((p / 64) as usize, (now / 64) as usize);
        let mark = 1u64 << (now % 64);
        debug_assert!(wn + NEAR_WORDS <= self.bits.len() && (p == FIRST || p < now));
        let bits = self.bits.as_mut_ptr();
        // SAFETY: `now` is below the capacity, so its word and the NEAR_WORDS
        // after it are in `bits` (`compact` sizes it so), and a line's time `p`
        // is always before `now`: every word read or written below is one of
        // those. (Bounds checks here cost a sixth of a flush.)
        //
        // The distance is read before this flush changes any word (so it
        // needs no correction for its own mark), and a mark that moves within
        // its word moves in one write.
        unsafe {
            if p == FIRST {
                *bits.add(wn) |= mark;
                self.live += 1;
                self.add(wn, 1);
                return FIRST;
            }
            let d = if wn - wp < NEAR_WORDS {
                // A fixed number of words, without a loop whose length varies
                // from flush to flush: the words after `now`'s hold no marks
                // (the bit set has NEAR_WORDS spare words that stay zero).
                let mut n = ((*bits.add(wp) >> (p % 64)) >> 1).count_ones();
                for k in 1..NEAR_WORDS {
                    n += (*bits.add(wp + k)).count_ones();
                }
                n
            } else {
                self.marks_after(p)
            };
            let old = 1u64 << (p % 64);
            if wp == wn {
                // The usual short reflush.
                *bits.add(wn) = (*bits.add(wn) & !old) | mark;
            } else {
                *bits.add(wp) &= !old;
                *bits.add(wn) |= mark;
                // Moving the mark to another leaf moves its count in the tree.
                if wp / LEAF_WORDS != wn / LEAF_WORDS {
                    self.add(wp, u32::MAX);
                    self.add(wn, 1);
                }
            }
            d
        }
    }

    /// Number of marks at times after `p`, by the tree: the live marks less
    /// those up to `p`.
    #[inline(never)]
    fn marks_after(&self, p: u32) -> u32 {
        let wp = (p / 64) as usize;
        let leaf = wp / LEAF_WORDS;
        // Marks up to p: whole leaves before p's leaf (the tree), p's leaf's
        // words before p's word, then p's word up to p.
        let mut upto = (self.bits[wp] << (63 - p % 64)).count_ones();
        for w in &self.bits[leaf * LEAF_WORDS..wp] {
            upto += w.count_ones();
        }
        let mut i = leaf;
        while i > 0 {
            upto = upto.wrapping_add(self.tree[i]);
            i &= i - 1;
        }
        self.live - upto
    }

    /// Adds `delta` (wrapping: `u32::MAX` is -1) to the count of word `w`'s
    /// leaf.
    #[inline(always)]
    fn add(&mut self, w: usize, delta: u32) {
        let n = self.tree.len();
        let mut i = w / LEAF_WORDS + 1;
        while i < n {
            self.tree[i] = self.tree[i].wrapping_add(delta);
            i += i & i.wrapping_neg();
        }
    }

    /// Renumbers the live times 0..live in order, then sizes the time axis for
    /// several times as many new flushes as there are lines (and the minimum).
    #[cold]
    #[inline(never)]
    fn compact(&mut self) {
        if self.capacity > 0 {
            self.compactions += 1;
        }
        // rank[w] = marks in the words before w; a line's new time is the
        // number of marks before its old one.
        let mut rank = Vec::with_capacity(self.bits.len());
        let mut r = 0u32;
        for w in &self.bits {
            rank.push(r);
            r += w.count_ones();
        }
        let bits = &self.bits;
        self.last.renumber(|t| {
            let w = (t / 64) as usize;
            let below = bits[w] & ((1u64 << (t % 64)) - 1);
            rank[w] + below.count_ones()
        });
        let live = self.live as u64;
        // Eight times the lines: the bit set costs a byte per line, and the
        // next compaction is 7 × lines flushes away. At least the line
        // table's room, too: renumbering walks all of it, and lines spread
        // thinly over their chunks would otherwise make that walk longer than
        // the flushes it is spread over.
        let cap = (live * 8 + 1).max(self.last.slots() as u64).max(self.min_capacity as u64);
        assert!(cap <= u32::MAX as u64 / 2, "more than 2^30 distinct lines in one reflush scope");
        let words = cap.div_ceil(64) as usize;
        // Times 0..live are marked.
        self.bits.clear();
        self.bits.reserve_exact(words + NEAR_WORDS);
        self.bits.resize(words + NEAR_WORDS, 0);
        let (full, rest) = (live as usize / 64, live % 64);
        self.bits[..full].fill(u64::MAX);
        if rest > 0 {
            self.bits[full] = (1 << rest) - 1;
        }
        // Fenwick node i covers leaves (i - lowbit(i), i]: sum their counts,
        // from a prefix-count array (O(words)).
        let leaves = words.div_ceil(LEAF_WORDS);
        let mut prefix = Vec::with_capacity(leaves + 1);
        prefix.push(0u32);
        for leaf in self.bits[..words].chunks(LEAF_WORDS) {
            prefix.push(prefix.last().unwrap() + leaf.iter().map(|w| w.count_ones()).sum::<u32>());
        }
        self.tree.clear();
        self.tree.reserve_exact(leaves + 1);
        self.tree.push(0);
        for i in 1..=leaves {
            self.tree.push(prefix[i] - prefix[i - (i & i.wrapping_neg())]);
        }
        self.now = live as u32;
        self.capacity = cap as u32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn distances(t: &mut DistanceTracker, lines: &[u64]) -> Vec<Option<u64>> {
        lines.iter().map(|&l| t.flush(l * 64)).collect()
    }

    #[test]
    fn abcda_is_three() {
        let mut t = DistanceTracker::new();
        assert_eq!(distances(&mut t, &[1, 2, 3, 4, 1]), vec![None, None, None, None, Some(3)]);
    }

    #[test]
    fn twice_in_a_row_is_zero() {
        let mut t = DistanceTracker::new();
        assert_eq!(distances(&mut t, &[7, 7, 7]), vec![None, Some(0), Some(0)]);
    }

    #[test]
    fn repeats_count_once() {
        // A B B C B A: the last A saw B and C only.
        let mut t = DistanceTracker::new();
        assert_eq!(distances(&mut t, &[1, 2, 2, 3, 2, 1]), vec![None, None, Some(0), None, Some(1), Some(2)]);
    }

    #[test]
    fn compaction_keeps_distances() {
        let mut t = DistanceTracker::with_min_capacity(2);
        let seq: Vec<u64> = (0..2000).map(|i| (i * 7 % 5) as u64).collect();
        let d = distances(&mut t, &seq);
        assert!(t.compactions() > 10);
        let mut r = DistanceTracker::with_min_capacity(1 << 16);
        assert_eq!(d, distances(&mut r, &seq));
    }

    #[test]
    fn bucket_edges() {
        assert_eq!(bucket(Some(0)), 0);
        assert_eq!(bucket(Some(3)), 3);
        assert_eq!(bucket(Some(4)), 4);
        assert_eq!(bucket(Some(7)), 4);
        assert_eq!(bucket(Some(8)), 5);
        assert_eq!(bucket(Some(u32::MAX as u64)), FIRST_BUCKET - 1);
        assert_eq!(bucket(Some(u64::MAX)), FIRST_BUCKET - 1);
        assert_eq!(bucket(Some(1 << 31)), FIRST_BUCKET - 1);
        assert_eq!(bucket(Some((1 << 31) - 1)), FIRST_BUCKET - 2);
        assert_eq!(bucket(None), FIRST_BUCKET);
        assert_eq!(bucket_label(4), "4-7");
        assert_eq!(bucket_label(5), "8-15");
        assert_eq!(bucket_label(FIRST_BUCKET - 1), "2147483648-4294967295");
        assert_eq!(bucket_label(FIRST_BUCKET), "first");
    }
}
