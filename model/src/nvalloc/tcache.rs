//! The thread-local cache (tcache) of free blocks, one LIFO bin per size
//! class, optionally split into sub-tcaches (NVAlloc §5.1, Fig. 6).
//!
//! A LIFO bin hands out blocks in the reverse order they came in; if those
//! blocks' bitmap bits share a line, consecutive allocations reflush it even
//! when the bitmap itself is interleaved. The interleaved bin keeps one
//! sub-tcache per stripe (a block goes to the sub-tcache of the line its bit
//! lies on) and a cursor that moves to the next non-empty sub-tcache after
//! every allocation, so consecutive allocations touch different lines.
//!
//! Everything here is thread-private and preallocated: push and pop never
//! lock and never allocate.

/// One size class's bin.
struct Bin {
    subs: Box<[Vec<u64>]>,
    cap_sub: usize,
    cursor: usize,
    count: usize,
}

/// A thread's cached free blocks.
pub struct Tcache {
    bins: Box<[Bin]>,
}

impl Tcache {
    /// A tcache with `caps[c]` blocks for class `c`, spread over `nsub` sub-tcaches.
    pub fn new(caps: &[usize], nsub: usize) -> Tcache {
        assert!(nsub > 0);
        let bins = caps
            .iter()
            .map(|&cap| {
                let cap_sub = cap.div_ceil(nsub).max(1);
                Bin { subs: (0..nsub).map(|_| Vec::with_capacity(cap_sub)).collect(), cap_sub, cursor: 0, count: 0 }
            })
            .collect();
        Tcache { bins }
    }

    /// The number of sub-tcaches of every bin.
    pub fn nsub(&self) -> usize {
        self.bins.first().map_or(1, |b| b.subs.len())
    }

    /// The next block of `class`: from the sub-tcache at the cursor, or the
    /// next non-empty one; the cursor moves past it.
    #[inline]
    pub fn pop(&mut self, class: usize) -> Option<u64> {
        let bin = &mut self.bins[class];
        if bin.count == 0 {
            return None;
        }
        let n = bin.subs.len();
        let mut s = bin.cursor;
        loop {
            if let Some(b) = bin.subs[s].pop() {
                bin.cursor = if s + 1 == n { 0 } else { s + 1 };
                bin.count -= 1;
                return Some(b);
            }
            s = if s + 1 == n { 0 } else { s + 1 };
        }
    }

    /// Caches `blk` in sub-tcache `sub` of `class`; false (and nothing cached)
    /// if that sub-tcache is full.
    #[inline]
    pub fn push(&mut self, class: usize, sub: usize, blk: u64) -> bool {
        let bin = &mut self.bins[class];
        let v = &mut bin.subs[sub];
        if v.len() == bin.cap_sub {
            return false;
        }
        v.push(blk);
        bin.count += 1;
        true
    }

    /// Whether sub-tcache `sub` of `class` has room.
    #[inline]
    pub fn has_room(&self, class: usize, sub: usize) -> bool {
        let bin = &self.bins[class];
        bin.subs[sub].len() < bin.cap_sub
    }

    /// Whether every sub-tcache of `class` is full.
    pub fn is_full(&self, class: usize) -> bool {
        let bin = &self.bins[class];
        bin.count == bin.cap_sub * bin.subs.len()
    }

    /// Blocks cached for `class`.
    pub fn count(&self, class: usize) -> usize {
        self.bins[class].count
    }

    /// Takes out the cached blocks of classes other than `keep` for which
    /// `take` holds; returns them.
    pub fn drain_other(&mut self, keep: usize, mut take: impl FnMut(u64) -> bool) -> Vec<u64> {
        let mut out = Vec::new();
        for (c, bin) in self.bins.iter_mut().enumerate() {
            if c == keep || bin.count == 0 {
                continue;
            }
            for s in bin.subs.iter_mut() {
                let before = s.len();
                s.retain(|&b| {
                    let t = take(b);
                    if t {
                        out.push(b);
                    }
                    !t
                });
                bin.count -= before - s.len();
            }
        }
        out
    }

    /// Empties every bin; returns the blocks.
    pub fn drain(&mut self) -> Vec<u64> {
        let mut out = Vec::new();
        for bin in self.bins.iter_mut() {
            for s in bin.subs.iter_mut() {
                out.append(s);
            }
            bin.count = 0;
            bin.cursor = 0;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_bin_is_lifo() {
        let mut t = Tcache::new(&[3], 1);
        assert!(t.push(0, 0, 1) && t.push(0, 0, 2) && t.push(0, 0, 3));
        assert!(!t.push(0, 0, 4), "full");
        assert!(t.is_full(0));
        assert_eq!((t.pop(0), t.pop(0), t.pop(0), t.pop(0)), (Some(3), Some(2), Some(1), None));
    }

    #[test]
    fn interleaved_bin_round_robins_over_sub_tcaches() {
        let mut t = Tcache::new(&[12], 3);
        for b in 0..9u64 {
            assert!(t.push(0, (b % 3) as usize, b));
        }
        let order: Vec<u64> = std::iter::from_fn(|| t.pop(0)).collect();
        assert_eq!(order, vec![6, 7, 8, 3, 4, 5, 0, 1, 2]);
        // Empty sub-tcaches are skipped.
        t.push(0, 2, 10);
        t.push(0, 2, 11);
        t.push(0, 0, 12);
        let order: Vec<u64> = std::iter::from_fn(|| t.pop(0)).collect();
        assert_eq!(order, vec![12, 11, 10]);
        assert_eq!(t.drain(), Vec::<u64>::new());
    }
}
