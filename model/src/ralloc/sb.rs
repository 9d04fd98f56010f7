//! Superblocks and descriptors (`BaseMeta.cpp`, LRMalloc's algorithm):
//! filling a thread cache from a partial superblock or a new one, giving a
//! cache's blocks back, retiring empty superblocks, large blocks, and the
//! superblock region's growth.
//!
//! What is persisted, exactly as the code persists it: a new superblock's
//! descriptor (its `superblock`, `heap`, `block_size`, `maxcount`) is
//! flushed and fenced when the superblock is taken (`malloc_from_newsb`);
//! constructing a descriptor (`new (desc) Descriptor()`: retiring a
//! superblock, organising new ones into the free list) zeroes it, flushes
//! and fences it; growing the region flushes its bump pointer before and
//! after the CAS. Everything else here — anchors, the free and partial
//! lists, the blocks' free-list links — is stored (list heads and anchors
//! by CAS, a locked instruction) and never flushed: recovery rebuilds it.
//! A large block's descriptor is flushed through `FLUSH(&desc)`, the
//! address of the local pointer, so only the fence reaches memory.

use super::layout::{
    head, head_counter, head_desc, sb_state, Anchor, Layout, AVAIL_SB, DESC, D_ANCHOR, D_BLOCK_SIZE, D_HEAP,
    D_MAXCOUNT, D_NEXT_FREE, D_NEXT_PARTIAL, D_SB, SB, SB_IDX,
};
use super::thread::Bin;
use super::Mutation;
use super::Ralloc;
use crate::pm::PmThread;

impl Ralloc {
    /// Stores `v` in `off` as a sequentially consistent atomic store does
    /// on x86 (an `xchg`: a locked instruction).
    fn seq_cst_store(t: &mut PmThread, off: u64, v: u64) {
        let mut cur = t.load_u64(off);
        while let Err(now) = t.cas_u64(off, cur, v) {
            cur = now;
        }
    }

    /// `new (desc) Descriptor()`: zeroed, flushed, fenced.
    pub(super) fn construct_desc(&self, t: &mut PmThread, d: u64) {
        let off = self.lay.desc(d);
        t.store_bytes(off, &[0; DESC as usize]);
        t.flush(off);
        t.fence();
    }

    /// Pushes descriptors `first..=last` (linked through `next_free`) onto `avail_sb`.
    fn push_avail(&self, t: &mut PmThread, first: u64, last: u64) {
        let _g = self.lists.lock().unwrap();
        let old = t.load_u64(AVAIL_SB);
        t.store_u64(self.lay.desc(last) + D_NEXT_FREE, head(head_desc(old), 0));
        t.cas_u64(AVAIL_SB, old, head(Some(first), head_counter(old) + 1)).expect("the list lock serialises avail_sb");
    }

    /// Puts superblocks `first..first + n` on the free list, each
    /// descriptor constructed (`organize_sb_list`).
    pub(super) fn organize(&self, t: &mut PmThread, first: u64, n: u64) {
        if n == 0 {
            return;
        }
        self.construct_desc(t, first);
        for d in first + 1..first + n {
            t.store_u64(self.lay.desc(d - 1) + D_NEXT_FREE, head(Some(d), 0));
            self.construct_desc(t, d);
        }
        self.push_avail(t, first, first + n - 1);
    }

    /// Grows the superblock region by `bytes` (`__nvm_region_allocator`):
    /// the first new superblock, or `None` when the heap has no room.
    pub(super) fn expand(&self, t: &mut PmThread, bytes: u64) -> Option<u64> {
        let _g = self.region.lock().unwrap();
        let curr = Layout::region(SB_IDX);
        let at = t.load_u64(curr);
        let end = self.lay.sb(self.lay.nsb);
        if at + bytes > end {
            return None;
        }
        t.flush(curr);
        t.fence();
        t.cas_u64(curr, at, at + bytes).expect("the region lock serialises expansions");
        t.flush(curr);
        t.fence();
        Some(self.lay.sb_of(at).expect("the region's end is a superblock"))
    }

    /// The end of the superblock region in use (its bump pointer).
    pub(super) fn region_end(&self, t: &PmThread) -> u64 {
        t.load_u64(Layout::region(SB_IDX))
    }

    /// A free superblock (`small_sb_alloc`): from `avail_sb`, else the
    /// region grown by its warm-up size (or what remains).
    fn small_sb_alloc(&self, t: &mut PmThread) -> Option<u64> {
        {
            let _g = self.lists.lock().unwrap();
            let old = t.load_u64(AVAIL_SB);
            if let Some(d) = head_desc(old) {
                let next = head_desc(t.load_u64(self.lay.desc(d) + D_NEXT_FREE));
                t.cas_u64(AVAIL_SB, old, head(next, head_counter(old))).expect("the list lock serialises avail_sb");
                return Some(d);
            }
        }
        let remaining = self.lay.sb(self.lay.nsb) - self.region_end(t);
        let bytes = super::layout::EXPAND.min(remaining) / SB * SB;
        if bytes == 0 {
            return None;
        }
        let first = self.expand(t, bytes)?;
        self.organize(t, first + 1, bytes / SB - 1);
        self.construct_desc(t, first);
        Some(first)
    }

    /// A superblock's descriptor back on the free list, constructed (`small_sb_retire`).
    fn small_sb_retire(&self, t: &mut PmThread, d: u64) {
        self.construct_desc(t, d);
        self.push_avail(t, d, d);
    }

    fn push_partial(&self, t: &mut PmThread, sc: usize, d: u64) {
        let _g = self.lists.lock().unwrap();
        let list = Layout::heap(sc);
        let old = t.load_u64(list);
        t.store_u64(self.lay.desc(d) + D_NEXT_PARTIAL, head(head_desc(old), 0));
        t.cas_u64(list, old, head(Some(d), head_counter(old) + 1)).expect("the list lock serialises partial lists");
    }

    fn pop_partial(&self, t: &mut PmThread, sc: usize) -> Option<u64> {
        let _g = self.lists.lock().unwrap();
        let list = Layout::heap(sc);
        let old = t.load_u64(list);
        let d = head_desc(old)?;
        let next = head_desc(t.load_u64(self.lay.desc(d) + D_NEXT_PARTIAL));
        t.cas_u64(list, old, head(next, head_counter(old))).expect("the list lock serialises partial lists");
        Some(d)
    }

    /// Fills an empty cache of size class `sc` (`fill_cache`): false when the heap is full.
    pub(super) fn fill_cache(&self, t: &mut PmThread, sc: usize, cache: &mut Bin) -> bool {
        self.malloc_from_partial(t, sc, cache) || self.malloc_from_newsb(t, sc, cache)
    }

    /// Every free block of one partial superblock (`malloc_malloc_from_partial`).
    fn malloc_from_partial(&self, t: &mut PmThread, sc: usize, cache: &mut Bin) -> bool {
        loop {
            let Some(d) = self.pop_partial(t, sc) else { return false };
            let desc = self.lay.desc(d);
            let maxcount = t.load_u64(desc + D_MAXCOUNT);
            let anchor = desc + D_ANCHOR;
            let mut old = t.load_u64(anchor);
            let taken = loop {
                let a = Anchor::unpack(old);
                if a.state == sb_state::EMPTY {
                    break None;
                }
                let new = Anchor { avail: maxcount, count: 0, state: sb_state::FULL }.pack();
                match t.cas_u64(anchor, old, new) {
                    Ok(_) => break Some(a),
                    Err(now) => old = now,
                }
            };
            let Some(a) = taken else {
                self.small_sb_retire(t, d);
                continue;
            };
            let sb = t.load_u64(desc + D_SB);
            let bs = t.load_u64(desc + D_BLOCK_SIZE);
            cache.push_list(sb + a.avail * bs, a.count);
            return true;
        }
    }

    /// A new superblock of size class `sc`, every block into the cache (`malloc_from_newsb`).
    fn malloc_from_newsb(&self, t: &mut PmThread, sc: usize, cache: &mut Bin) -> bool {
        let Some(d) = self.small_sb_alloc(t) else { return false };
        let (bs, maxcount) = self.class(sc);
        let desc = self.lay.desc(d);
        let sb = self.lay.sb(d);
        t.store_u64(desc + D_HEAP, Layout::heap(sc));
        t.store_u64(desc + D_BLOCK_SIZE, bs);
        t.store_u64(desc + D_MAXCOUNT, maxcount);
        t.store_u64(desc + D_SB, sb);
        for i in 0..maxcount - 1 {
            t.store_u64(sb + i * bs, sb + (i + 1) * bs);
        }
        cache.push_list(sb, maxcount);
        Ralloc::seq_cst_store(t, desc + D_ANCHOR, Anchor { avail: maxcount, count: 0, state: sb_state::FULL }.pack());
        if self.cfg.mutation == Mutation::DescFlush {
            t.fence(); // the mutation: the fence stays, the flush goes
        } else {
            t.flush(desc);
            t.fence();
        }
        self.note_sb(d);
        true
    }

    /// Gives every block of `cache` back to its superblock (`flush_cache`).
    pub(super) fn flush_cache(&self, t: &mut PmThread, sc: usize, cache: &mut Bin) {
        while cache.count > 0 {
            let head_blk = cache.head;
            let d = self.lay.sb_of(head_blk).expect("a cached block lies in a superblock");
            let desc = self.lay.desc(d);
            let sb = self.lay.sb(d);
            let (bs, maxcount) = (t.load_u64(desc + D_BLOCK_SIZE), t.load_u64(desc + D_MAXCOUNT));
            // The cache's run of blocks from this superblock.
            let (mut tail, mut n) = (head_blk, 1);
            while cache.count > n {
                let next = t.load_u64(tail);
                if next < sb || next >= sb + SB {
                    break;
                }
                n += 1;
                tail = next;
            }
            cache.pop_list(t.load_u64(tail), n);
            let idx = (head_blk - sb) / bs;
            let anchor = desc + D_ANCHOR;
            let mut old = t.load_u64(anchor);
            let (a, new) = loop {
                let a = Anchor::unpack(old);
                t.store_u64(tail, sb + a.avail * bs);
                let mut new = Anchor { avail: idx, ..a };
                if a.state == sb_state::FULL {
                    new.state = sb_state::PARTIAL;
                }
                if a.count + n == maxcount {
                    new.count = maxcount - 1;
                    new.state = sb_state::EMPTY;
                } else {
                    new.count += n;
                }
                match t.cas_u64(anchor, old, new.pack()) {
                    Ok(_) => break (a, new),
                    Err(now) => old = now,
                }
            };
            if a.state == sb_state::FULL {
                if new.state == sb_state::EMPTY {
                    self.small_sb_retire(t, d);
                } else {
                    self.push_partial(t, sc, d);
                }
            }
        }
    }

    /// A large block of `bytes` (a multiple of a superblock) at the end of
    /// the region (`large_sb_alloc`, `do_malloc`): its offset.
    pub(super) fn alloc_large(&self, t: &mut PmThread, bytes: u64) -> Option<u64> {
        let d = self.expand(t, bytes)?;
        self.construct_desc(t, d);
        let desc = self.lay.desc(d);
        let sb = self.lay.sb(d);
        t.store_u64(desc + D_HEAP, Layout::heap(0));
        t.store_u64(desc + D_BLOCK_SIZE, bytes);
        t.store_u64(desc + D_MAXCOUNT, 1);
        t.store_u64(desc + D_SB, sb);
        Ralloc::seq_cst_store(t, desc + D_ANCHOR, Anchor { avail: 0, count: 0, state: sb_state::FULL }.pack());
        t.fence(); // FLUSH(&desc) flushes the local variable, not the descriptor
        self.note_sb(d + bytes / SB - 1);
        Some(sb)
    }

    /// Frees a large block (`large_sb_retire`): its superblocks become free
    /// small superblocks.
    pub(super) fn free_large(&self, t: &mut PmThread, d: u64) {
        let bytes = t.load_u64(self.lay.desc(d) + D_BLOCK_SIZE);
        self.organize(t, d, bytes / SB);
    }
}
