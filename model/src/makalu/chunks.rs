//! The chunk free lists (Makalu §5.6, transient) and the two operations that
//! change core metadata: taking blocks for a new small block or a large
//! object (§6.2–6.4), and giving blocks back with coalescing (§7.2, Fig. 5).
//! Both run under the global lock and inside one undo-logged section each.
//!
//! A free chunk is a run of free blocks whose first header says `FREE` with
//! the chunk's bytes in `hb_sz`; the headers of its other blocks are unused.

use super::layout::{flag, Layout, BLOCK, H_BLOCK, H_FLAG, H_SZ};
use crate::pm::PmThread;
use std::collections::{BTreeMap, BTreeSet};

/// The free chunks, by start block and by size (smallest fit first), and
/// the bump pointer (blocks ever carved, `rgn_curr`).
#[derive(Debug, Default)]
pub struct Chunks {
    by_start: BTreeMap<u64, u64>,
    by_size: BTreeSet<(u64, u64)>,
    top: u64,
}

impl Chunks {
    /// The chunk lists of a heap whose bump pointer is `top`.
    pub fn new(top: u64) -> Chunks {
        Chunks { top, ..Chunks::default() }
    }

    /// Adds a free chunk found in the headers (restart, recovery).
    pub fn adopt(&mut self, b: u64, n: u64) {
        self.by_start.insert(b, n);
        self.by_size.insert((n, b));
    }

    fn remove(&mut self, b: u64) -> u64 {
        let n = self.by_start.remove(&b).expect("free chunk");
        self.by_size.remove(&(n, b));
        n
    }

    pub fn top(&self) -> u64 {
        self.top
    }

    /// The free chunks `(first block, blocks)`, by first block.
    pub fn free_chunks(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.by_start.iter().map(|(&b, &n)| (b, n))
    }

    /// Free blocks in chunks (for reports).
    pub fn free_blocks_total(&self) -> u64 {
        self.by_start.values().sum()
    }

    /// Takes `n` blocks for a small block or large object (`f`, `sz`): the
    /// smallest chunk that fits, split if larger, else new blocks from the
    /// bump pointer. `None` when the heap is full.
    pub fn alloc_blocks(&mut self, t: &mut PmThread, lay: &Layout, n: u64, f: u64, sz: u64) -> Option<u64> {
        let log = lay.log();
        let fit = self.by_size.range((n, 0)..).next().copied();
        if fit.is_none() && self.top + n > lay.nblocks {
            return None;
        }
        let mut s = log.begin(t);
        let b = match fit {
            Some((have, b)) => {
                self.remove(b);
                if have > n {
                    // The rest stays a free chunk with a header of its own.
                    let r = b + n;
                    let h = lay.hdr(r);
                    s.store_u64(t, h + H_BLOCK, lay.block_off(r));
                    s.store_u64(t, h + H_SZ, (have - n) * BLOCK);
                    s.store_u64(t, h + H_FLAG, flag::FREE);
                    self.adopt(r, have - n);
                }
                b
            }
            None => {
                let b = self.top;
                self.top += n;
                s.store_u64(t, lay.rgn_curr_off(), self.top);
                b
            }
        };
        let h = lay.hdr(b);
        s.store_u64(t, h + H_BLOCK, lay.block_off(b));
        s.store_u64(t, h + H_SZ, sz);
        s.store_u64(t, h + H_FLAG, f);
        s.commit(t);
        Some(b)
    }

    /// Gives blocks `[b, b + n)` back, coalescing with a free chunk right
    /// after and one right before.
    pub fn free_blocks(&mut self, t: &mut PmThread, lay: &Layout, b: u64, mut n: u64) {
        let mut s = lay.log().begin(t);
        if self.by_start.contains_key(&(b + n)) {
            let next = b + n;
            n += self.remove(next);
            let h = lay.hdr(next);
            s.store_u64(t, h + H_SZ, 0);
            s.store_u64(t, h + H_BLOCK, 0);
            s.store_u64(t, h + H_FLAG, flag::UNUSED);
        }
        let prev = self.by_start.range(..b).next_back().map(|(&p, &pn)| (p, pn)).filter(|&(p, pn)| p + pn == b);
        let h = lay.hdr(b);
        match prev {
            Some((p, pn)) => {
                self.remove(p);
                s.store_u64(t, h + H_SZ, 0);
                s.store_u64(t, h + H_BLOCK, 0);
                s.store_u64(t, h + H_FLAG, flag::UNUSED);
                s.store_u64(t, lay.hdr(p) + H_SZ, (pn + n) * BLOCK);
                self.adopt(p, pn + n);
            }
            None => {
                s.store_u64(t, h + H_SZ, n * BLOCK);
                s.store_u64(t, h + H_FLAG, flag::FREE);
                self.adopt(b, n);
            }
        }
        s.commit(t);
    }
}
