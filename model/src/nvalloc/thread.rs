//! A thread's handle on NVAlloc: its persistence primitives, its tcache, its
//! arena and its WAL cursor — and the malloc / free paths that use them.
//!
//! Small `malloc_to` under the `log` model (NVAlloc-LOG):
//!
//! 1. pop a block from the tcache (refilled from the arena when empty);
//! 2. WAL entry `{malloc, block, dest}`, persisted;
//! 3. set the block's bit in the slab's persistent bitmap, persisted;
//! 4. `*dest = block`, persisted;
//! 5. clear the WAL entry (store + flush; the next fence orders it).
//!
//! `free_from` is the mirror image, and the block goes to the tcache (or, if
//! its sub-tcache is full, straight back to its slab). Plain `malloc`/`free`
//! skip the WAL: with no `dest` there is nothing to make atomic, and the
//! caller publishes the block itself. Large requests go to the large
//! allocator with the same WAL bracket around the record and `*dest`.
//!
//! That is `wal=strict`. Under `wal=artifact` (the default; see
//! [`super::config::WalMode`]) the paths are those of NVAlloc's public code
//! (`nvalloc_malloc_to`, `nvalloc_free_from`, `tcache_alloc_large`): step 5
//! is left out, a small `free_from` persists its bitmap line and nothing
//! else (no entry, `*dest` left as is), a large `malloc_to` persists entry,
//! `*dest`, then its record, and a large `free_from` persists `*dest = 0`
//! and then deletes its record, with no entry.
//!
//! Under the `gc` model (NVAlloc-GC) small operations flush nothing but
//! `*dest`: the bitmap bit is updated in the cache only and there is no WAL
//! entry; recovery after a crash rebuilds the bitmaps by marking from the
//! persistent roots. Large operations are the same in both models.

use super::config::{Consistency, Mutation, WalMode};
use super::NvAlloc;
use crate::alloc::AllocThread;
use crate::mech::record::PAGE;
use crate::mech::wal::{WalCursor, WalEntry};
use crate::pm::PmThread;
use pmsim_traces::OpKind;
use std::sync::Arc;

/// WAL op codes of NVAlloc.
pub mod op {
    pub const MALLOC_SMALL: u8 = 1;
    pub const FREE_SMALL: u8 = 2;
    pub const MALLOC_LARGE: u8 = 3;
    pub const FREE_LARGE: u8 = 4;
}

/// One thread's handle (see [`crate::Allocator::thread`]).
pub struct NvAllocThread {
    nv: Arc<NvAlloc>,
    t: PmThread,
    tcache: super::tcache::Tcache,
    arena: usize,
    wal: WalCursor,
}

impl NvAllocThread {
    pub(super) fn new(nv: Arc<NvAlloc>, tid: u32) -> NvAllocThread {
        assert!(
            tid < nv.cfg.max_threads,
            "thread id {tid}: this NVAlloc heap has WAL areas for thread ids below {}",
            nv.cfg.max_threads
        );
        let t = nv.pm.thread(tid);
        let arena = nv.bind_arena();
        let tcache = super::tcache::Tcache::new(&nv.tcache_caps, nv.cfg.tcache_stripes() as usize);
        let wal = nv.wal.cursor_at(tid, nv.wal_next[tid as usize].load(std::sync::atomic::Ordering::Relaxed));
        NvAllocThread { nv, t, tcache, arena, wal }
    }

    /// The allocator this handle belongs to.
    pub fn allocator(&self) -> &Arc<NvAlloc> {
        &self.nv
    }

    /// Every live allocation (see [`NvAlloc::live_allocations`]).
    pub fn live_allocations(&self) -> Vec<(u64, u64)> {
        self.nv.live_allocations(&self.t)
    }

    /// The usable size of the live allocation at `off` (see [`NvAlloc::usable_size`]).
    pub fn usable_size(&self, off: u64) -> Option<u64> {
        self.nv.usable_size(&self.t, off)
    }

    /// The thread id (also the WAL area).
    pub fn tid(&self) -> u32 {
        self.t.tid()
    }

    /// The arena this thread is bound to.
    pub fn arena(&self) -> usize {
        self.arena
    }

    /// The thread's persistence handle (for workloads that need more than
    /// [`AllocThread`] offers, e.g. markers).
    pub fn pm(&mut self) -> &mut PmThread {
        &mut self.t
    }

    fn malloc_impl(&mut self, size: u64, dest: Option<u64>) -> Option<u64> {
        self.t.op_begin(OpKind::Malloc, size);
        let r = match self.nv.classes.class_of(size) {
            Some(class) => self.malloc_small(class, dest),
            None => self.malloc_large(size, dest),
        };
        self.t.op_end(OpKind::Malloc, r.unwrap_or(0));
        r
    }

    fn malloc_small(&mut self, class: usize, dest: Option<u64>) -> Option<u64> {
        let nv = &*self.nv;
        let blk = match self.tcache.pop(class) {
            Some(b) => b,
            None => {
                nv.arenas[self.arena].refill(nv, &mut self.t, class, &mut self.tcache);
                self.tcache.pop(class)?
            }
        };
        let (slab, _info) = nv.slabs.lookup(blk).expect("cached block lies in a slab");
        debug_assert_eq!(_info.class, class, "cached block {blk:#x} of a slab that changed class");
        let b = nv.geoms[class].block_index(slab, blk).expect("cached block is a block start");
        let bitmap = super::slab::bitmap(slab, nv.map);
        if nv.cfg.consistency == Consistency::Gc {
            // NVAlloc-GC: the bit is set but not flushed, and no WAL; after a
            // crash the bitmap is rebuilt by marking from the roots, so only
            // the user's pointer must be durable.
            let was = bitmap.set(&mut self.t, b);
            assert!(!was, "block {blk:#x} was handed out while allocated");
            if let Some(d) = dest {
                self.t.store_u64(d, blk);
                persist_dest(&mut self.t, nv.cfg.mutation, d);
            }
            nv.account(self.t.tid(), nv.geoms[class].size as i64);
            return Some(blk);
        }
        let slot = dest.map(|d| self.wal.begin(&mut self.t, WalEntry { op: op::MALLOC_SMALL, target: blk, dest: d }));
        let was = bitmap.set(&mut self.t, b);
        assert!(!was, "block {blk:#x} was handed out while allocated");
        if nv.cfg.mutation == Mutation::BitmapFlush {
            self.t.fence();
        } else {
            bitmap.persist(&mut self.t, b);
        }
        if let (Some(d), Some(s)) = (dest, slot) {
            self.t.store_u64(d, blk);
            persist_dest(&mut self.t, nv.cfg.mutation, d);
            if nv.cfg.wal == WalMode::Strict {
                self.wal.end(&mut self.t, s);
            }
        }
        nv.account(self.t.tid(), nv.geoms[class].size as i64);
        Some(blk)
    }

    fn malloc_large(&mut self, size: u64, dest: Option<u64>) -> Option<u64> {
        let nv = &*self.nv;
        let size = size.checked_next_multiple_of(PAGE)?;
        let wal = &mut self.wal;
        let mut slot = None;
        let artifact = nv.cfg.wal == WalMode::Artifact;
        let off = nv.large.alloc(&mut self.t, size, |t, start| {
            if let Some(d) = dest {
                slot = Some(wal.begin(t, WalEntry { op: op::MALLOC_LARGE, target: start, dest: d }));
                if artifact {
                    // The artifact publishes before it records the extent.
                    t.store_u64(d, start);
                    t.persist(d, 8);
                }
            }
        })?;
        if artifact {
            slot = None;
        }
        if let (Some(d), Some(s)) = (dest, slot) {
            self.t.store_u64(d, off);
            self.t.persist(d, 8);
            self.wal.end(&mut self.t, s);
        }
        nv.account(self.t.tid(), size as i64);
        Some(off)
    }

    fn free_impl(&mut self, off: u64, dest: Option<u64>) {
        self.t.op_begin(OpKind::Free, off);
        if self.nv.cfg.morphing {
            self.free_morphing(off, dest);
        } else {
            match self.nv.slabs.lookup(off) {
                Some((slab, info)) => {
                    let NvAllocThread { nv, t, tcache, wal, .. } = self;
                    NvAllocThread::free_small(nv, t, tcache, wal, off, slab, info, dest, None)
                }
                None => self.free_large(off, dest),
            }
        }
        self.t.op_end(OpKind::Free, 0);
    }

    /// `free` with slab morphing on: an old block of a slab_in goes straight
    /// back to it; any other small block is freed holding its arena's morph
    /// guard shared, so that its slab cannot morph between reading its class
    /// and the block reaching the tcache (a cached block keeps its slab from
    /// being a morph candidate). The guard is never held while taking the
    /// arena lock (a morph takes them the other way round).
    fn free_morphing(&mut self, off: u64, dest: Option<u64>) {
        // (A live block's slab stays a slab: only large frees leave here.)
        if self.nv.slabs.lookup(off).is_none() {
            return self.free_large(off, dest);
        }
        let NvAllocThread { nv, t, tcache, wal, .. } = self;
        let nv: &NvAlloc = nv;
        loop {
            let (slab, info) = nv.slabs.lookup(off).expect("a slab stays a slab while it has blocks");
            if info.morph_in {
                if let Some(size) = nv.arenas[info.arena].free_old(nv, t, wal, slab, off, dest) {
                    nv.account(t.tid(), -(size as i64));
                    return;
                }
            }
            let guard = nv.arenas[info.arena].morph_guard.read().unwrap();
            let (slab, now) = nv.slabs.lookup(off).expect("a slab stays a slab while it has blocks");
            if now.morph_in && !info.morph_in {
                // Morphed in between: `off` may be an old block now.
                continue;
            }
            return NvAllocThread::free_small(nv, t, tcache, wal, off, slab, now, dest, Some(guard));
        }
    }

    /// The small-block free on a thread's parts (so that a caller may hold
    /// `guard`, borrowed from the allocator, meanwhile).
    #[allow(clippy::too_many_arguments)]
    fn free_small(
        nv: &NvAlloc,
        t: &mut PmThread,
        tcache: &mut super::tcache::Tcache,
        wal: &mut WalCursor,
        off: u64,
        slab: u64,
        info: super::slab::SlabInfo,
        dest: Option<u64>,
        guard: Option<std::sync::RwLockReadGuard<'_, ()>>,
    ) {
        let g = nv.geoms[info.class];
        let b = g.block_index(slab, off).unwrap_or_else(|| panic!("free of heap offset {off:#x}: not a block start"));
        let bitmap = super::slab::bitmap(slab, nv.map);
        assert!(bitmap.test(t, b), "free of heap offset {off:#x}: block is not allocated (double free?)");
        let mut slot = None;
        if nv.cfg.consistency == Consistency::Gc {
            // Unlink durably before the block can be reused: after a crash,
            // a block still reachable would be marked live again.
            if let Some(d) = dest {
                t.store_u64(d, 0);
                t.persist(d, 8);
            }
            bitmap.clear(t, b);
        } else if nv.cfg.wal == WalMode::Artifact {
            bitmap.clear(t, b);
            bitmap.persist(t, b);
        } else {
            slot = dest.map(|d| wal.begin(t, WalEntry { op: op::FREE_SMALL, target: off, dest: d }));
            bitmap.clear(t, b);
            bitmap.persist(t, b);
            if let (Some(d), Some(s)) = (dest, slot) {
                t.store_u64(d, 0);
                t.persist(d, 8);
                wal.end(t, s);
            }
        }
        nv.account(t.tid(), -(g.size as i64));
        let sub = nv.sub_tcache(slab, b, tcache.nsub());
        if !tcache.push(info.class, sub, off) {
            // Other threads may take the block from its slab: the WAL entry
            // must be durably invalid first (the thread's own reuse of a
            // cached block is ordered by the fence of its next WAL entry).
            if slot.is_some() {
                t.fence();
            }
            drop(guard);
            nv.arenas[info.arena].return_blocks(nv, t, &[off]);
        }
    }

    fn free_large(&mut self, off: u64, dest: Option<u64>) {
        let nv = &*self.nv;
        let size = match dest {
            None => nv.large.free(&mut self.t, off),
            Some(d) if nv.cfg.wal == WalMode::Artifact => {
                self.t.store_u64(d, 0);
                self.t.persist(d, 8);
                nv.large.free(&mut self.t, off)
            }
            Some(d) => {
                let wal = &mut self.wal;
                let mut slot = 0;
                let u = nv.large.unrecord(&mut self.t, off, |t, _| {
                    slot = wal.begin(t, WalEntry { op: op::FREE_LARGE, target: off, dest: d });
                });
                self.t.store_u64(d, 0);
                self.t.persist(d, 8);
                self.wal.end(&mut self.t, slot);
                // The entry must be durably invalid before anyone can reuse
                // the space (see `LargeAlloc::unrecord`).
                self.t.fence();
                let size = u.size();
                nv.large.reclaim(&mut self.t, u);
                size
            }
        };
        nv.account(self.t.tid(), -(size as i64));
    }
}

impl AllocThread for NvAllocThread {
    crate::dest_forwarding_ops!(t);

    fn free_from_leaves_dest(&self) -> bool {
        self.nv.cfg.wal == WalMode::Artifact && self.nv.cfg.consistency == Consistency::Log
    }

    crate::pm_thread_access!(t);
}

impl Drop for NvAllocThread {
    /// Gives the cached blocks back to their slabs (else they would stay taken
    /// in their vslabs for the rest of the run) and unbinds the arena.
    fn drop(&mut self) {
        let nv = &*self.nv;
        nv.wal_next[self.t.tid() as usize].store(self.wal.position(), std::sync::atomic::Ordering::Relaxed);
        // Cached blocks may have WAL entries cleared without a fence yet.
        self.t.fence();
        let mut blocks = self.tcache.drain();
        blocks.sort_by_key(|&b| nv.slabs.lookup(b).map_or(0, |(_, i)| i.arena));
        for group in blocks
            .chunk_by(|a, b| nv.slabs.lookup(*a).map(|(_, i)| i.arena) == nv.slabs.lookup(*b).map(|(_, i)| i.arena))
        {
            let (_, info) = nv.slabs.lookup(group[0]).expect("cached block lies in a slab");
            nv.arenas[info.arena].return_blocks(nv, &mut self.t, group);
        }
        nv.arenas[self.arena].unbind();
    }
}

/// Makes the `*dest` a small malloc just published durable (unless the
/// [`Mutation::DestFlush`] mutation removes its flush).
fn persist_dest(t: &mut PmThread, mutation: Mutation, d: u64) {
    if mutation != Mutation::DestFlush {
        t.flush(d);
    }
    t.fence();
}
