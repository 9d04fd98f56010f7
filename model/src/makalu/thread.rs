//! A thread's handle on a Makalu-style heap: its free lists of objects up
//! to 384 B and its table of lazily flushed mark-bit lines
//! (`thread_local_freelists`, `makalu_local_heap.c`), and the malloc / free
//! paths (`MAK_malloc`, `MAK_free`).

use super::layout::{FREE_BLK, GRANULE, H_BLOCK, H_FLAGS, H_SZ, MEDIUM_MAX};
use super::lists::{FreeList, Gran, ZEROS};
use super::Makalu;
use crate::alloc::AllocThread;
use crate::mech::dirty::DirtyLines;
use crate::pm::PmThread;
use pmsim_traces::OpKind;
use std::sync::Arc;

/// One thread's handle (see [`crate::Allocator::thread`]).
pub struct MakaluThread {
    mk: Arc<Makalu>,
    t: PmThread,
    /// Per granule count: the thread's free list (index 0 unused).
    lists: Vec<FreeList>,
    /// The thread's table of lazily flushed lines (`aflush_tb`).
    aflush: DirtyLines,
}

impl MakaluThread {
    pub(super) fn new(mk: Arc<Makalu>, tid: u32) -> MakaluThread {
        let t = mk.pm.thread(tid);
        let aflush = DirtyLines::new(mk.cfg.dirty_lines as usize);
        let lists =
            (0..=mk.cfg.small_max / GRANULE).map(|g| FreeList::new(mk.cfg.list_bounds(g.max(1) * GRANULE).0)).collect();
        MakaluThread { mk, t, lists, aflush }
    }

    pub fn allocator(&self) -> &Arc<Makalu> {
        &self.mk
    }

    /// The thread's persistence handle.
    pub fn pm(&mut self) -> &mut PmThread {
        &mut self.t
    }

    /// The usable size of the object at `off` (see [`Makalu::usable_size`]).
    pub fn usable_size(&self, off: u64) -> Option<u64> {
        self.mk.usable_size(&self.t, off)
    }

    /// Objects with their mark bit set (see [`Makalu::marked_objects`]).
    pub fn marked_objects(&self) -> Vec<(u64, u64)> {
        self.mk.marked_objects(&self.t)
    }

    fn alloc(&mut self, size: u64) -> Option<u64> {
        let mk = &*self.mk;
        let sz = size.max(1).next_multiple_of(GRANULE);
        let o = if sz > MEDIUM_MAX {
            mk.alloc_large(&mut self.t, sz)?
        } else if sz <= mk.cfg.small_max {
            let g = (sz / GRANULE) as usize;
            if self.lists[g].is_empty() {
                let (aflush, lists) = (&mut self.aflush, &mut self.lists[g]);
                let filled = mk.grans[g].with(&mut self.t, |gran, t| {
                    let Gran { reclaim, list } = gran;
                    mk.refill(t, aflush, sz, reclaim, Some(list), lists)
                });
                if !filled {
                    return None;
                }
            }
            self.lists[g].pop()?
        } else {
            mk.alloc_global(&mut self.t, sz)?
        };
        mk.add_live(self.t.tid(), sz as i64);
        Some(o)
    }

    fn dealloc(&mut self, off: u64) {
        let mk = &*self.mk;
        let lay = &mk.lay;
        let b = lay.block_of(off).unwrap_or_else(|| panic!("free of {off:#x}: not in the Makalu data area"));
        let h = lay.header_of(&self.t, b).unwrap_or_else(|| panic!("free of {off:#x}: block {b} has no header"));
        let (sz, flags) = (self.t.load_u64(h + H_SZ), self.t.load_u64(h + H_FLAGS));
        assert!(flags & FREE_BLK == 0, "free of {off:#x}: block {b} is free");
        if sz > MEDIUM_MAX {
            assert_eq!(off, self.t.load_u64(h + H_BLOCK), "free of {off:#x}: inside a large object");
            mk.blocks.with(&mut self.t, |bl, t| bl.free(t, lay, b));
            mk.add_live(self.t.tid(), -(sz as i64));
            return;
        }
        // A normal object is cleared when freed (`ok_init`): stores, never flushed.
        self.t.store_bytes(off, &ZEROS[..sz as usize]);
        if sz <= mk.cfg.small_max {
            let g = (sz / GRANULE) as usize;
            if self.lists[g].push(off) {
                let keep = mk.cfg.list_bounds(sz).1;
                let (aflush, list) = (&mut self.aflush, &mut self.lists[g]);
                mk.grans[g].with(&mut self.t, |gran, t| mk.truncate(t, aflush, sz, &mut gran.reclaim, list, keep));
            }
        } else {
            mk.free_global(&mut self.t, sz, off);
        }
        mk.add_live(self.t.tid(), -(sz as i64));
    }
}

impl AllocThread for MakaluThread {
    fn malloc(&mut self, size: u64) -> Option<u64> {
        self.t.op_begin(OpKind::Malloc, size);
        let r = self.alloc(size);
        self.t.op_end(OpKind::Malloc, r.unwrap_or(0));
        r
    }

    fn free(&mut self, off: u64) {
        self.t.op_begin(OpKind::Free, off);
        self.dealloc(off);
        self.t.op_end(OpKind::Free, 0);
    }

    /// Publishing is the program's persisted store (store, flush, mfence):
    /// the GC decides after a crash (see the module docs).
    fn malloc_to(&mut self, size: u64, dest: u64) -> Option<u64> {
        self.t.op_begin(OpKind::Malloc, size);
        let r = self.alloc(size);
        if let Some(o) = r {
            self.t.store_u64(dest, o);
            self.t.flush(dest);
            self.t.mfence();
        }
        self.t.op_end(OpKind::Malloc, r.unwrap_or(0));
        r
    }

    fn free_from(&mut self, dest: u64) {
        let off = self.t.load_u64(dest);
        self.t.op_begin(OpKind::Free, off);
        self.t.store_u64(dest, 0);
        self.t.flush(dest);
        self.t.mfence();
        self.dealloc(off);
        self.t.op_end(OpKind::Free, 0);
    }

    crate::pm_thread_access!(t);
}

impl Drop for MakaluThread {
    /// A terminating thread gives its free lists back to their blocks and
    /// makes its mark-bit lines durable (`MAK_teardown_thread_local`).
    fn drop(&mut self) {
        let mk = self.mk.clone();
        for g in 1..self.lists.len() {
            if self.lists[g].is_empty() {
                continue;
            }
            let (aflush, list) = (&mut self.aflush, &mut self.lists[g]);
            mk.grans[g]
                .with(&mut self.t, |gran, t| mk.truncate(t, aflush, g as u64 * GRANULE, &mut gran.reclaim, list, 0));
        }
        self.aflush.drain(&mut self.t);
    }
}
