//! A thread's handle on a Makalu-style heap: its small-object free lists
//! (Makalu §5.7, transient), its table of lazily flushed mark-bit lines, and
//! the malloc / free paths (§6, §7).

use super::layout::{flag, BLOCK, GRANULE, H_FLAG, H_SZ, MEDIUM_MAX};
use super::Makalu;
use crate::alloc::AllocThread;
use crate::mech::dirty::DirtyLines;
use crate::pm::PmThread;
use pmsim_traces::OpKind;
use std::sync::Arc;

/// One thread's handle (see [`crate::PmAllocator::thread`]).
pub struct MakaluThread {
    mk: Arc<Makalu>,
    t: PmThread,
    /// Per granule class: the thread's free list of small objects (LIFO).
    free: Vec<Vec<u64>>,
    dirty: DirtyLines,
}

impl MakaluThread {
    pub(super) fn new(mk: Arc<Makalu>, tid: u32) -> MakaluThread {
        let t = mk.pm.thread(tid);
        let dirty = DirtyLines::new(mk.cfg.dirty_lines as usize);
        let small = (mk.cfg.small_max / GRANULE) as usize + 1;
        MakaluThread { mk, t, free: vec![Vec::new(); small], dirty }
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
        if size > MEDIUM_MAX {
            let n = size.div_ceil(BLOCK);
            let b = mk.chunks.lock().unwrap().alloc_blocks(&mut self.t, &mk.lay, n, flag::LARGE, n * BLOCK)?;
            mk.add_live(self.t.tid(), (n * BLOCK) as i64);
            return Some(mk.lay.block_off(b));
        }
        let sz = size.max(1).next_multiple_of(GRANULE);
        let g = (sz / GRANULE) as usize;
        let o = if sz <= mk.cfg.small_max {
            if self.free[g].is_empty() && !mk.refill(&mut self.t, &mut self.dirty, sz, &mut self.free[g]) {
                return None;
            }
            self.free[g].pop()
        } else {
            let mut list = mk.medium[g].lock().unwrap();
            if list.is_empty() && !mk.refill(&mut self.t, &mut self.dirty, sz, &mut list) {
                return None;
            }
            list.pop()
        };
        mk.add_live(self.t.tid(), sz as i64);
        o
    }

    fn dealloc(&mut self, off: u64) {
        let mk = &*self.mk;
        let b = mk.lay.block_of(off).unwrap_or_else(|| panic!("free of {off:#x}: not in the Makalu data area"));
        let h = mk.lay.hdr(b);
        let sz = self.t.load_u64(h + H_SZ);
        match self.t.load_u64(h + H_FLAG) {
            flag::LARGE => {
                assert_eq!(off, mk.lay.block_off(b), "free of {off:#x}: inside a large object");
                mk.chunks.lock().unwrap().free_blocks(&mut self.t, &mk.lay, b, sz / BLOCK);
            }
            flag::SMALL => {
                let g = (sz / GRANULE) as usize;
                let cap = mk.cfg.freelist_max as usize;
                if sz <= mk.cfg.small_max {
                    self.free[g].push(off);
                    if self.free[g].len() > cap {
                        let give: Vec<u64> = self.free[g].drain(..cap / 2).collect();
                        for o in give {
                            mk.release(&mut self.t, &mut self.dirty, o);
                        }
                    }
                } else {
                    let give = {
                        let mut list = mk.medium[g].lock().unwrap();
                        list.push(off);
                        if list.len() > cap {
                            list.drain(..cap / 2).collect()
                        } else {
                            Vec::new()
                        }
                    };
                    for o in give {
                        mk.release(&mut self.t, &mut self.dirty, o);
                    }
                }
            }
            f => panic!("free of {off:#x}: block {b} holds no objects (header flag {f})"),
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

    /// Publishing is a persisted store: the GC decides after a crash (see the module docs).
    fn malloc_to(&mut self, size: u64, dest: u64) -> Option<u64> {
        self.t.op_begin(OpKind::Malloc, size);
        let r = self.alloc(size);
        if let Some(o) = r {
            self.t.store_u64(dest, o);
            self.t.persist(dest, 8);
        }
        self.t.op_end(OpKind::Malloc, r.unwrap_or(0));
        r
    }

    fn free_from(&mut self, dest: u64) {
        let off = self.t.load_u64(dest);
        self.t.op_begin(OpKind::Free, off);
        self.t.store_u64(dest, 0);
        self.t.persist(dest, 8);
        self.dealloc(off);
        self.t.op_end(OpKind::Free, 0);
    }

    crate::alloc::pm_thread_access!(t);
}

impl Drop for MakaluThread {
    /// A gracefully terminating thread gives its free lists back to their
    /// blocks (§6.1) and makes its mark-bit updates durable.
    fn drop(&mut self) {
        let lists = std::mem::take(&mut self.free);
        for o in lists.into_iter().flatten() {
            self.mk.release(&mut self.t, &mut self.dirty, o);
        }
        self.dirty.drain(&mut self.t);
    }
}
