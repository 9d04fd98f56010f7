//! A thread's handle on a Ralloc-style heap: its caches of free blocks,
//! one per size class (`TCacheBin`), and `RP_malloc` / `RP_free`.
//!
//! A cache is a singly linked list through the blocks themselves: the link
//! is the block's first word. Taking a block from a cache stores nothing;
//! putting one back stores its link (8 B, never flushed). A cache holds up
//! to a superblock's worth of blocks (`cache_block_num`: 1,024 of 64 B);
//! a free into a full cache first gives the whole cache back.

use super::layout::{Layout, CLASSES, D_HEAP, SB};
use super::Ralloc;
use crate::alloc::AllocThread;
use crate::pm::PmThread;
use pmsim_traces::OpKind;
use std::sync::Arc;

/// One size class's cache (`TCacheBin`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Bin {
    pub head: u64,
    pub count: u64,
}

impl Bin {
    /// Takes `n` blocks already linked from `block` (the cache must be empty).
    pub fn push_list(&mut self, block: u64, n: u64) {
        debug_assert_eq!(self.count, 0);
        self.head = block;
        self.count = n;
    }

    /// Drops the first `n` blocks; `next` is the block after them.
    pub fn pop_list(&mut self, next: u64, n: u64) {
        self.head = next;
        self.count -= n;
    }

    fn push_block(&mut self, t: &mut PmThread, block: u64) {
        t.store_u64(block, self.head);
        self.head = block;
        self.count += 1;
    }

    fn pop_block(&mut self, t: &PmThread) -> u64 {
        let b = self.head;
        self.head = t.load_u64(b);
        self.count -= 1;
        b
    }
}

/// One thread's handle (see [`crate::PmAllocator::thread`]).
pub struct RallocThread {
    ra: Arc<Ralloc>,
    t: PmThread,
    caches: [Bin; CLASSES],
}

impl RallocThread {
    pub(super) fn new(ra: Arc<Ralloc>, tid: u32) -> RallocThread {
        let t = ra.pm.thread(tid);
        RallocThread { ra, t, caches: [Bin::default(); CLASSES] }
    }

    /// The thread's persistence handle.
    pub fn pm(&mut self) -> &mut PmThread {
        &mut self.t
    }

    fn alloc(&mut self, size: u64) -> Option<(u64, u64)> {
        let ra = &*self.ra;
        let Some(sc) = ra.sc_of(size) else {
            let bytes = size.next_multiple_of(SB);
            return ra.alloc_large(&mut self.t, bytes).map(|o| (o, bytes));
        };
        let cache = &mut self.caches[sc];
        if cache.count == 0 && !ra.fill_cache(&mut self.t, sc, cache) {
            return None;
        }
        Some((cache.pop_block(&self.t), ra.class(sc).0))
    }

    fn dealloc(&mut self, off: u64) -> u64 {
        let ra = &*self.ra;
        let d = ra.lay.sb_of(off).unwrap_or_else(|| panic!("free of {off:#x}: not in the superblock region"));
        let heap = self.t.load_u64(ra.lay.desc(d) + D_HEAP);
        let sc = Layout::sc_of_heap(heap).unwrap_or_else(|| panic!("free of {off:#x}: superblock {d} is not in use"));
        if sc == 0 {
            let bytes = self.t.load_u64(ra.lay.desc(d) + super::layout::D_BLOCK_SIZE);
            ra.free_large(&mut self.t, d);
            return bytes;
        }
        let (bs, maxcount) = ra.class(sc);
        let cache = &mut self.caches[sc];
        if cache.count >= maxcount {
            ra.flush_cache(&mut self.t, sc, cache);
        }
        cache.push_block(&mut self.t, off);
        bs
    }
}

impl AllocThread for RallocThread {
    fn malloc(&mut self, size: u64) -> Option<u64> {
        self.t.op_begin(OpKind::Malloc, size);
        let r = self.alloc(size);
        if let Some((_, usable)) = r {
            self.ra.live.add(self.t.tid(), usable as i64);
        }
        self.t.op_end(OpKind::Malloc, r.map_or(0, |r| r.0));
        r.map(|r| r.0)
    }

    fn free(&mut self, off: u64) {
        if off == 0 {
            return;
        }
        self.t.op_begin(OpKind::Free, off);
        let usable = self.dealloc(off);
        self.ra.live.add(self.t.tid(), -(usable as i64));
        self.t.op_end(OpKind::Free, 0);
    }

    /// Ralloc has no such call: the program stores the offset and persists
    /// it (`FLUSH`, `FLUSHFENCE`); the GC decides after a crash.
    fn malloc_to(&mut self, size: u64, dest: u64) -> Option<u64> {
        self.t.op_begin(OpKind::Malloc, size);
        let r = self.alloc(size);
        if let Some((o, usable)) = r {
            self.ra.live.add(self.t.tid(), usable as i64);
            self.t.store_u64(dest, o);
            self.t.persist(dest, 8);
        }
        self.t.op_end(OpKind::Malloc, r.map_or(0, |r| r.0));
        r.map(|r| r.0)
    }

    fn free_from(&mut self, dest: u64) {
        let off = self.t.load_u64(dest);
        if off == 0 {
            return;
        }
        self.t.op_begin(OpKind::Free, off);
        self.t.store_u64(dest, 0);
        self.t.persist(dest, 8);
        let usable = self.dealloc(off);
        self.ra.live.add(self.t.tid(), -(usable as i64));
        self.t.op_end(OpKind::Free, 0);
    }

    crate::pm_thread_access!(t);
}

impl Drop for RallocThread {
    /// A thread's caches go back to their superblocks when it ends
    /// (`~TCaches`, `public_flush_cache`).
    fn drop(&mut self) {
        let ra = self.ra.clone();
        for sc in 1..CLASSES {
            if self.caches[sc].count > 0 {
                ra.flush_cache(&mut self.t, sc, &mut self.caches[sc]);
            }
        }
    }
}
