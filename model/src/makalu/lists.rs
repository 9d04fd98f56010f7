//! Object free lists and reclaim lists (`makalu_malloc.c`,
//! `makalu_reclaim.c`, `makalu_local_heap.c`): transient lists of objects
//! whose mark bits are set, refilled from a block and cut back into blocks.
//!
//! * A free list is a ring of at most `max` objects (8 KiB of them:
//!   `LOCAL_FL_MAX_SIZE`, `FL_MAX_SIZE`): `malloc` takes the newest, `free`
//!   appends, and a list that reaches `max` gives its oldest back to their
//!   blocks until `keep` remain (4 KiB: `*_OPTIMAL_SIZE`).
//! * Refilling ([`Makalu::refill`], `MAK_generic_malloc_many`) sweeps the
//!   first block of the size's reclaim list (every object whose mark bit is
//!   clear is zeroed and listed, its bit set), else copies from the size's
//!   global list, else takes a new block, zeroes it and lists every object.
//! * Cutting back ([`Makalu::truncate`], `MAK_truncate_fast_fl`) gathers the
//!   objects by block in a table of 16 blocks and gives each block its
//!   objects at once (`remove_trun_tb_entry`): mark bits cleared, the count
//!   lowered; an emptied block goes back to the block free lists, a block
//!   at most 7/8 full goes on its reclaim list.
//! * Mark bits and their count live in the second line of the block's
//!   header and are never flushed one by one: their line goes into a table
//!   of 8 lazily flushed lines (the thread's `aflush_tb`, or the global
//!   `MAK_fl_aflush_table` for the global lists).
//!
//! Makalu cuts its *global* lists back object by object
//! (`MAK_truncate_freelist`); pmsim uses the block-batched way of the
//! thread lists for both. The global lists hold only objects above the
//! thread lists' 384 B.

use super::layout::{
    nearly_full, objs_per_block, reclaim, valid_marks, BLOCK, H_MARKS, H_NEXT, H_NMARKS, H_PREV, H_RECLAIM, H_SZ,
    MARK_WORDS,
};
use super::Makalu;
use crate::mech::dirty::DirtyLines;
use crate::pm::PmThread;

/// A ring of free objects (`fl_hdr`: `fl`, `start_idx`, `count`).
#[derive(Clone, Debug, Default)]
pub struct FreeList {
    ring: Vec<u64>,
    start: usize,
    count: usize,
}

impl FreeList {
    /// An empty list of at most `max` objects.
    pub fn new(max: usize) -> FreeList {
        FreeList { ring: vec![0; max.max(1)], start: 0, count: 0 }
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn max(&self) -> usize {
        self.ring.len()
    }

    /// Takes the newest object.
    pub fn pop(&mut self) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        self.count -= 1;
        Some(self.ring[(self.start + self.count) % self.ring.len()])
    }

    /// Appends an object; whether the list is now full.
    pub fn push(&mut self, o: u64) -> bool {
        let n = self.ring.len();
        self.ring[(self.start + self.count) % n] = o;
        self.count += 1;
        self.count >= n
    }

    /// Replaces the contents with `objs` (a refill: the list was empty).
    fn fill(&mut self, objs: impl IntoIterator<Item = u64>) {
        self.start = 0;
        self.count = 0;
        for o in objs {
            self.ring[self.count] = o;
            self.count += 1;
        }
    }

    /// Removes the oldest objects until `keep` remain, oldest first.
    fn drain_oldest(&mut self, keep: usize) -> Vec<u64> {
        let n = self.count.saturating_sub(keep);
        let len = self.ring.len();
        let out = (0..n).map(|i| self.ring[(self.start + i) % len]).collect();
        self.start = (self.start + n) % len;
        self.count -= n;
        out
    }

    /// Every object, oldest first.
    pub fn objects(&self) -> Vec<u64> {
        (0..self.count).map(|i| self.ring[(self.start + i) % self.ring.len()]).collect()
    }
}

/// The lists of one size (granule count), under one lock (`MAK_LOCK_GRAN`).
#[derive(Default)]
pub struct Gran {
    /// Heap offset of the first block of the reclaim list (0: empty); the
    /// links are the headers' `hb_next` / `hb_prev`.
    pub reclaim: u64,
    /// The global free list (objects above the thread lists' sizes).
    pub list: FreeList,
}

/// Slots of the truncation table (`trun_tb_sz`).
const TRUNC_SLOTS: usize = 16;

/// One block's share of a cut-back list (`struct trun_tb_e`).
#[derive(Clone, Copy, Default)]
struct TruncEntry {
    /// The block + 1 (0: empty).
    block: u64,
    marks: [u64; MARK_WORDS as usize],
    count: u64,
}

impl Makalu {
    /// Refills the empty list `list` of `sz`-byte objects (see the module
    /// docs); `gran` is the size's lists, locked by the caller, whose
    /// global list `global` (for a thread list) may be copied from. Lines
    /// of mark bits go into `aflush`. False when the heap is full.
    pub(super) fn refill(
        &self,
        t: &mut PmThread,
        aflush: &mut DirtyLines,
        sz: u64,
        reclaim_head: &mut u64,
        global: Option<&mut FreeList>,
        list: &mut FreeList,
    ) -> bool {
        let lay = &self.lay;
        let n = objs_per_block(sz);
        if *reclaim_head != 0 {
            let b = lay.block_of(*reclaim_head).expect("a reclaim list names blocks");
            let h = self.header(t, b);
            let next = t.load_u64(h + H_NEXT);
            *reclaim_head = next;
            if next != 0 {
                let nh = self.header(t, lay.block_of(next).expect("a reclaim list names blocks"));
                t.store_u64(nh + H_PREV, 0);
            }
            t.store_u64(h + H_NMARKS, n);
            let mut old = [0u64; MARK_WORDS as usize];
            for (wi, o) in old.iter_mut().enumerate() {
                let w = h + H_MARKS + 8 * wi as u64;
                *o = t.load_u64(w);
                t.store_u64(w, valid_marks(n, wi as u64));
            }
            t.store_u64(h + H_RECLAIM, reclaim::FLOATING);
            t.store_u64(h + H_NEXT, 0);
            aflush.note(t, h + H_MARKS);
            let base = lay.block_off(b);
            let free: Vec<u64> =
                (0..n).filter(|&i| old[(i / 64) as usize] >> (i % 64) & 1 == 0).map(|i| base + i * sz).collect();
            for &o in &free {
                t.store_bytes(o, &ZEROS[..sz as usize]);
            }
            list.fill(free);
            return true;
        }
        if let Some(g) = global.filter(|g| !g.is_empty()) {
            let take = (BLOCK / sz) as usize;
            let objs: Vec<u64> = std::iter::from_fn(|| g.pop()).take(take).collect();
            list.fill(objs.into_iter().rev());
            return true;
        }
        let Some(b) = self.blocks.with(t, |bl, t| bl.alloc(t, lay, sz)) else { return false };
        let h = self.header(t, b);
        let base = lay.block_off(b);
        t.store_bytes(base, &ZEROS);
        for wi in 0..MARK_WORDS {
            t.store_u64(h + H_MARKS + 8 * wi, valid_marks(n, wi));
        }
        t.store_u64(h + H_NMARKS, n);
        t.store_u64(h + H_RECLAIM, reclaim::FLOATING);
        aflush.note(t, h + H_MARKS);
        list.fill((0..n).map(|i| base + i * sz));
        true
    }

    /// Gives the oldest objects of `list` (of `sz` bytes) back to their
    /// blocks until `keep` remain (`MAK_truncate_fast_fl`). `reclaim_head`
    /// is the size's reclaim list, locked by the caller.
    pub(super) fn truncate(
        &self,
        t: &mut PmThread,
        aflush: &mut DirtyLines,
        sz: u64,
        reclaim_head: &mut u64,
        list: &mut FreeList,
        keep: usize,
    ) {
        let objs = list.drain_oldest(keep);
        if objs.is_empty() {
            return;
        }
        let mut table = [TruncEntry::default(); TRUNC_SLOTS];
        for o in objs {
            let b = self.lay.block_of(o).expect("a listed object lies in a block");
            let slot = (o / BLOCK) as usize & (TRUNC_SLOTS - 1);
            if table[slot].block != b + 1 {
                if table[slot].block != 0 {
                    self.give_back(t, aflush, sz, reclaim_head, &mut table[slot..=slot]);
                    table[slot] = TruncEntry::default();
                }
                table[slot].block = b + 1;
            }
            let i = (o - self.lay.block_off(b)) / sz;
            table[slot].marks[(i / 64) as usize] |= 1 << (i % 64);
            table[slot].count += 1;
        }
        self.give_back(t, aflush, sz, reclaim_head, &mut table);
    }

    /// Gives each entry's objects back to its block (`remove_trun_tb_entry`).
    fn give_back(
        &self,
        t: &mut PmThread,
        aflush: &mut DirtyLines,
        sz: u64,
        reclaim_head: &mut u64,
        entries: &mut [TruncEntry],
    ) {
        let lay = &self.lay;
        for e in entries.iter_mut().filter(|e| e.block != 0) {
            let b = e.block - 1;
            let h = self.header(t, b);
            debug_assert_eq!(t.load_u64(h + H_SZ), sz);
            let marks = t.load_u64(h + H_NMARKS) - e.count;
            t.store_u64(h + H_NMARKS, marks);
            if marks == 0 {
                if t.load_u64(h + H_RECLAIM) == reclaim::LISTED {
                    self.unlink_reclaim(t, reclaim_head, b, h);
                }
                self.blocks.with(t, |bl, t| bl.free(t, lay, b));
                e.block = 0;
                continue;
            }
            for wi in 0..MARK_WORDS {
                let w = h + H_MARKS + 8 * wi;
                t.store_u64(w, t.load_u64(w) & !e.marks[wi as usize]);
            }
            if t.load_u64(h + H_RECLAIM) == reclaim::FLOATING && marks <= nearly_full(sz) {
                self.push_reclaim(t, reclaim_head, b, h);
            }
        }
        for e in entries.iter().filter(|e| e.block != 0) {
            let h = self.header(t, e.block - 1);
            aflush.note(t, h + H_MARKS);
        }
    }

    /// Puts block `b` (header `h`) at the head of its size's reclaim list.
    pub(super) fn push_reclaim(&self, t: &mut PmThread, reclaim_head: &mut u64, b: u64, h: u64) {
        t.store_u64(h + H_RECLAIM, reclaim::LISTED);
        let top = *reclaim_head;
        t.store_u64(h + H_NEXT, top);
        t.store_u64(h + H_PREV, 0);
        if top != 0 {
            let th = self.header(t, self.lay.block_of(top).expect("a reclaim list names blocks"));
            t.store_u64(th + H_PREV, self.lay.block_off(b));
        }
        *reclaim_head = self.lay.block_off(b);
    }

    fn unlink_reclaim(&self, t: &mut PmThread, reclaim_head: &mut u64, b: u64, h: u64) {
        let (next, prev) = (t.load_u64(h + H_NEXT), t.load_u64(h + H_PREV));
        if next != 0 {
            let nh = self.header(t, self.lay.block_of(next).expect("a reclaim list names blocks"));
            t.store_u64(nh + H_PREV, prev);
            t.store_u64(h + H_NEXT, 0);
        }
        if prev != 0 {
            let ph = self.header(t, self.lay.block_of(prev).expect("a reclaim list names blocks"));
            t.store_u64(ph + H_NEXT, next);
            t.store_u64(h + H_PREV, 0);
        }
        if *reclaim_head == self.lay.block_off(b) {
            *reclaim_head = next;
        }
    }
}

/// A block of zeros: what Makalu's `BZERO` stores.
pub(super) static ZEROS: [u8; BLOCK as usize] = [0; BLOCK as usize];
