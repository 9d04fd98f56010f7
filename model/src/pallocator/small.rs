//! The small allocators (`SmallPAllocator`, VLDB '17 §4.2): one per
//! thread, segregated fit over pages of one size class each, carved from
//! the thread's small segments. A block's state is its 2-byte entry in
//! its page's header; every operation is bracketed by the thread's
//! micro-log ([`super::PAllocator::logged`]).
//!
//! Per `malloc_to`: the micro-log entry persisted; the block's entry set
//! and its line persisted; the destination written and persisted; the
//! micro-log entry cleared (flushed, ordered by the next fence). A free is
//! the same with the entry cleared and the destination zeroed. Entries of
//! neighbouring blocks share a line (32 to a line), micro-log entries of
//! consecutive operations share the thread's log line, and a program's
//! destinations of consecutive objects share lines too: nearly every flush
//! is a reflush (NVAlloc's Fig. 1a: 98.8 %).

use super::layout::{page_geometry, seg, P_COUNT, P_ENTRIES, P_OWNER, P_SIZE};
use super::PAllocator;
use crate::mech::bitset::MultiLayerBitset;
use crate::pm::PmThread;
use std::collections::HashMap;

/// A page's volatile header.
#[derive(Clone, Debug)]
pub(super) struct Page {
    pub size: u64,
    /// Bytes of header before the first block.
    pub hdr: u64,
    /// One bit per block: in use.
    used: MultiLayerBitset,
    pub n_free: u64,
}

impl Page {
    /// A page of `n` blocks, those `allocated` says in use.
    pub fn new(size: u64, n: u64, hdr: u64, allocated: impl Fn(u64) -> bool) -> Page {
        let mut used = MultiLayerBitset::new(n);
        let mut n_free = n;
        for i in (0..n).filter(|&i| allocated(i)) {
            used.set(i);
            n_free -= 1;
        }
        Page { size, hdr, used, n_free }
    }

    /// The first free block, taken.
    fn take(&mut self) -> Option<u64> {
        let i = self.used.find_and_set()?;
        self.n_free -= 1;
        Some(i)
    }

    fn give(&mut self, i: u64) {
        assert!(self.used.clear(i), "block {i} of a page freed twice");
        self.n_free += 1;
    }

    pub fn is_free(&self, i: u64) -> bool {
        !self.used.test(i)
    }

    pub fn block(&self, page: u64, i: u64) -> u64 {
        page + self.hdr + i * self.size
    }
}

/// One thread's small allocator: its pages.
#[derive(Debug, Default)]
pub(super) struct Small {
    /// Pages in use by offset.
    pub pages: HashMap<u64, Page>,
    /// Per size class: pages with a free block, the one in use last.
    pub avail: Vec<Vec<u64>>,
    /// Pages of the thread's segments not in use.
    pub spare: Vec<u64>,
}

impl PAllocator {
    /// A free block of size class `c` for thread `tid`, its page made ready
    /// (not yet marked): `(page, index, block)`, or `None` when the heap is full.
    pub(super) fn small_pick(&self, t: &mut PmThread, s: &mut Small, tid: u32, c: usize) -> Option<(u64, u64, u64)> {
        let size = self.classes.size(c) as u64;
        let page = loop {
            match s.avail[c].last().copied() {
                Some(p) if s.pages[&p].n_free > 0 => break p,
                Some(_) => {
                    s.avail[c].pop();
                }
                None => {
                    let p = match s.spare.pop() {
                        Some(p) => p,
                        None => {
                            let i = self.take_segments(t, 1, seg::SMALL | (tid as u64) << 8)?;
                            let first = self.lay.seg_off(i);
                            s.spare.extend((0..self.lay.pages_per_seg()).rev().map(|k| first + k * self.lay.page));
                            s.spare.pop().expect("a segment has pages")
                        }
                    };
                    self.init_page(t, s, p, size, tid);
                    s.avail[c].push(p);
                }
            }
        };
        let pg = s.pages.get_mut(&page).expect("an available page");
        let i = pg.take().expect("a page with free blocks");
        Some((page, i, pg.block(page, i)))
    }

    /// Makes `page` a page of `size`-byte blocks for `tid`: its header
    /// written, every entry free, and persisted.
    fn init_page(&self, t: &mut PmThread, s: &mut Small, page: u64, size: u64, tid: u32) {
        let (n, hdr) = page_geometry(self.lay.page, size);
        self.regions.paint_header(t, page, hdr, page + self.lay.page);
        t.store_bytes(page + P_ENTRIES, &vec![0; (hdr - P_ENTRIES) as usize]);
        t.store_u64(page + P_COUNT, n);
        t.store_u64(page + P_OWNER, tid as u64);
        t.store_u64(page + P_SIZE, size);
        t.persist(page, hdr);
        s.pages.insert(page, Page::new(size, n, hdr, |_| false));
    }

    /// Sets block `i`'s entry of `page` to `v` and persists its line.
    pub(super) fn set_entry(&self, t: &mut PmThread, page: u64, i: u64, v: u16) {
        let e = page + P_ENTRIES + 2 * i;
        t.store::<u16>(e, v);
        t.persist(e, 2);
    }

    /// Gives block `i` of `page` back to its owner's DRAM state.
    pub(super) fn small_give(&self, s: &mut Small, page: u64, i: u64) {
        let pg = s.pages.get_mut(&page).expect("a freed block's page");
        pg.give(i);
        let c = self.classes.class_of(pg.size).expect("a page's class");
        if pg.n_free == 1 {
            s.avail[c].insert(0, page);
        }
    }
}
