//! Whole blocks: the block free lists, taking a block or a large object
//! (`MAK_allochblk`, `makalu_block.c`) and giving one back with coalescing
//! (`MAK_freehblk`), block headers and the header index (`makalu_hdr.c`).
//! All of it runs under the global lock (`MAK_LOCK`), each change of core
//! metadata inside one undo-logged section.
//!
//! # The persist sequence (the code's, followed step by step)
//!
//! * Taking a block probes the free lists from the exact size up
//!   ([`Blocks::alloc`]); in the chosen list it takes the first chunk that
//!   fits (skipping one when the next is a closer fit), opens a section,
//!   logs the header bump pointer, the chunk's `hb_sz` and `hb_flags`,
//!   splits off the rest under a new header (logging the recycled header's
//!   `hb_sz`), sets the block's header up with unlogged stores and logs
//!   `MAK_large_free_bytes` — five entries for a split — then commits.
//! * Giving a block back logs its `hb_sz` and `hb_flags`, coalesces with a
//!   free chunk before and after it (two entries each, headers of the
//!   swallowed chunks freed), logs `MAK_large_free_bytes` and commits.
//! * List links (`hb_next`, `hb_prev`), list heads and the free-byte
//!   counters are plain stores, never flushed: every open rebuilds them.
//!   Header-index words and the header free list's links go through a
//!   global table of 32 lazily flushed lines (`MAK_aflush_table`).
//! * When no list has a chunk large enough, the heap grows
//!   (`MAK_try_expand_hp`) by a third of its size plus the request, at
//!   least 16 blocks: the expansion's size and space are persisted
//!   synchronously, then one section adds the space as a free chunk
//!   (coalescing with a free chunk that ends where it begins) and logs the
//!   heap size and the expansion's addresses.
//! * Before any of it, the persistent state word says the heap is no
//!   longer consistent (`MAK_persistent_state`): stored and persisted
//!   synchronously, once, while it still says so. The shipped code writes
//!   `if (state == NONE) MAK_STORE_NVM_SYNC(state, INCONSISTENT)` with a
//!   two-statement macro, so only the store is conditional and the sync
//!   persist runs on *every* expansion, every probe of a free list and
//!   every block freed (`makalu_block.c` lines 61, 410, 542);
//!   [`Blocks::shipped`] does that.

use super::layout::{
    blocks_of, fl_index, reclaim, state, Layout, BLOCK, FREE_BLK, FREE_SPACE_DIVISOR, HDR, HDR_FREE_LIST, HDR_FREE_PTR,
    HEAP_BLOCKS, H_BLOCK, H_DESCR, H_FLAGS, H_MAP, H_MARKS, H_NEXT, H_NMARKS, H_PREV, H_RECLAIM, H_SZ,
    LARGE_FREE_BYTES, LAST_HEAP_ADDR, LAST_HEAP_SIZE, MARK_WORDS, MAXHINCR, MAX_JUMP, MINHINCR, N_HBLK_FLS,
    PREV_HEAP_ADDR, STATE, UNIQUE_THRESHOLD,
};
use crate::mech::dirty::DirtyLines;
use crate::mech::undo::Section;
use crate::pm::PmThread;
use std::collections::BTreeMap;

/// Lines of the global table of lazily flushed lines (`AFLUSH_TABLE_SZ`).
pub const AFLUSH_LINES: usize = 32;

/// The block allocator's state besides the persistent headers and lists.
pub struct Blocks {
    /// The free chunks `first block → blocks`: a copy of what the
    /// persistent lists hold, to find a freed block's neighbours (Makalu
    /// walks the header index for that; the answer is the same).
    free: BTreeMap<u64, u64>,
    /// `MAK_aflush_table`.
    pub aflush: DirtyLines,
    /// Blocks in the heap (`MAK_heapsize`).
    heap: u64,
    /// Reproduce the shipped code's unconditional state persists.
    pub shipped: bool,
}

impl Blocks {
    pub fn new(shipped: bool) -> Blocks {
        Blocks { free: BTreeMap::new(), aflush: DirtyLines::new(AFLUSH_LINES), heap: 0, shipped }
    }

    /// Blocks in the heap so far.
    pub fn heap_blocks(&self) -> u64 {
        self.heap
    }

    /// The free chunks `(first block, blocks)` by first block.
    pub fn free_chunks(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.free.iter().map(|(&b, &n)| (b, n))
    }

    /// Lays out a new heap of 16 blocks (`MINHINCR`, `MAK_start`) in one free chunk.
    pub fn format(&mut self, t: &mut PmThread, lay: &Layout) {
        let n = MINHINCR.min(lay.nblocks);
        let h = lay.hdr_slot(0);
        t.store_u64(HDR_FREE_PTR, h + HDR);
        t.store_u64(h + H_BLOCK, lay.block_off(0));
        t.store_u64(h + H_SZ, n * BLOCK);
        t.store_u64(h + H_FLAGS, FREE_BLK);
        t.flush(h);
        t.store_u64(lay.index_of(0), h);
        t.flush(lay.index_of(0));
        t.store_u64(HEAP_BLOCKS, n);
        t.store_u64(LARGE_FREE_BYTES, n * BLOCK);
        t.flush(LARGE_FREE_BYTES);
        t.flush(HDR_FREE_PTR);
        t.store_u64(STATE, state::NONE);
        t.flush(STATE);
        self.heap = n;
        self.add_to_fl_plain(t, lay, 0, h);
        t.fence();
    }

    /// Rebuilds the lists from a header walk's free chunks (every open) of
    /// a heap of `heap` blocks.
    pub fn adopt(&mut self, t: &mut PmThread, lay: &Layout, free: &[(u64, u64)], heap: u64) {
        for i in 0..=N_HBLK_FLS {
            t.store_u64(lay.fl_head(i), 0);
            t.store_u64(lay.fl_bytes(i), 0);
        }
        self.free.clear();
        for &(b, _) in free.iter().rev() {
            let h = lay.header_of(t, b).expect("a walked free chunk has a header");
            self.add_to_fl_plain(t, lay, b, h);
        }
        self.heap = heap;
    }

    /// Grows the heap for a request of `needed` blocks (`MAK_try_expand_hp`):
    /// false when the file has no room left for it.
    fn expand(&mut self, t: &mut PmThread, lay: &Layout, needed: u64) -> bool {
        let mut want = self.heap / FREE_SPACE_DIVISOR + needed;
        if want > MAXHINCR {
            let slop = (2 * MINHINCR).min(needed);
            want = if needed + slop > MAXHINCR { needed + slop } else { MAXHINCR };
        }
        let room = lay.nblocks - self.heap;
        // `MAK_expand_hp_inner` of the wish, else of the need; pmsim's file
        // may then still hold fewer than 16 blocks, all of which it takes.
        let Some(n) = [want, needed]
            .into_iter()
            .map(|n| n.max(MINHINCR))
            .find(|&n| n <= room)
            .or_else(|| (room >= needed && room > 0).then_some(room))
        else {
            return false;
        };
        self.note_inconsistent(t);
        t.store_u64(LAST_HEAP_SIZE, n * BLOCK);
        t.persist_sync(LAST_HEAP_SIZE);
        // The region manager hands out the space and publishes it failure-atomically.
        t.store_u64(LAST_HEAP_ADDR, lay.block_off(self.heap));
        t.persist_sync(LAST_HEAP_ADDR);
        self.finish_expand(t, lay);
        true
    }

    /// Adds an expansion's space to the heap (`MAK_finish_expand_hp_inner`):
    /// after [`Blocks::expand`], and at open when a crash interrupted one.
    pub fn finish_expand(&mut self, t: &mut PmThread, lay: &Layout) {
        let at = t.load_u64(LAST_HEAP_ADDR);
        if at == 0 {
            return;
        }
        let b = self.heap;
        let n = (t.load_u64(LAST_HEAP_SIZE) / BLOCK).min(lay.nblocks - b);
        assert_eq!(lay.block_off(b), at, "an expansion starts at the end of the heap");
        let mut s = lay.log().begin(t);
        self.new_free_chunk(t, lay, &mut s, b, n);
        s.store_u64(t, HEAP_BLOCKS, b + n);
        s.store_u64(t, PREV_HEAP_ADDR, at);
        s.store_u64(t, LAST_HEAP_ADDR, 0);
        s.commit(t);
        self.heap = b + n;
    }

    /// Adds blocks `[b, b + n)`, new to the heap, as a free chunk,
    /// coalescing with a free chunk that ends at `b` (`MAK_newfreehblk`).
    fn new_free_chunk(&mut self, t: &mut PmThread, lay: &Layout, s: &mut Section, b: u64, n: u64) {
        let prev = self.free.range(..b).next_back().map(|(&p, &pn)| (p, pn)).filter(|&(p, pn)| p + pn == b);
        let (first, h) = match prev {
            Some((p, pn)) => {
                let ph = lay.header_of(t, p).expect("a free chunk has a header");
                self.remove_from_fl(t, lay, s, p, ph, None);
                s.store_unlogged(t, ph + H_SZ, (pn + n) * BLOCK);
                s.log(t, HDR_FREE_PTR);
                (p, ph)
            }
            None => {
                s.log(t, HDR_FREE_PTR);
                let h = self.install_header(t, lay, s, b);
                s.store_unlogged(t, h + H_SZ, n * BLOCK);
                s.store_unlogged(t, h + H_FLAGS, 0);
                (b, h)
            }
        };
        let lfb = t.load_u64(LARGE_FREE_BYTES);
        s.store_u64(t, LARGE_FREE_BYTES, lfb + n * BLOCK);
        self.add_to_fl(t, lay, s, first, h);
    }

    /// Says, durably, that the heap is no longer consistent (see the
    /// module docs; the shipped code persists on every call).
    #[track_caller]
    fn note_inconsistent(&self, t: &mut PmThread) {
        let none = t.load_u64(STATE) == state::NONE;
        if none {
            t.store_u64(STATE, state::INCONSISTENT);
        }
        if none || self.shipped {
            t.persist_sync(STATE);
        }
    }

    /// Takes blocks for an object of `sz` bytes (`MAK_allochblk`): a small
    /// block's objects (`sz` ≤ half a block) or one large object. The
    /// first block, or `None` when no free chunk is large enough.
    pub fn alloc(&mut self, t: &mut PmThread, lay: &Layout, sz: u64) -> Option<u64> {
        loop {
            if let Some(b) = self.alloc_lists(t, lay, sz) {
                return Some(b);
            }
            if !self.expand(t, lay, blocks_of(sz)) {
                return None;
            }
        }
    }

    /// One search of the block free lists (`MAK_allochblk`).
    fn alloc_lists(&mut self, t: &mut PmThread, lay: &Layout, sz: u64) -> Option<u64> {
        let start = fl_index(blocks_of(sz));
        if let Some(b) = self.alloc_nth(t, lay, sz, start, false) {
            return Some(b);
        }
        // No reason to try an exact list again: all its chunks are exact fits.
        let from = if start < UNIQUE_THRESHOLD { start + 1 } else { start };
        (from..=N_HBLK_FLS).find_map(|i| self.alloc_nth(t, lay, sz, i, true))
    }

    /// Searches block free list `n` (`MAK_allochblk_nth`).
    fn alloc_nth(&mut self, t: &mut PmThread, lay: &Layout, sz: u64, n: u64, may_split: bool) -> Option<u64> {
        let needed = blocks_of(sz) * BLOCK;
        self.note_inconsistent(t);
        let mut hbp = t.load_u64(lay.fl_head(n));
        let (b, h, mut s) = loop {
            if hbp == 0 {
                return None;
            }
            let b = lay.block_of(hbp).expect("a free-list link names a block");
            let h = lay.header_of(t, b).expect("a free chunk has a header");
            let avail = t.load_u64(h + H_SZ);
            let next = t.load_u64(h + H_NEXT);
            if avail < needed {
                hbp = next;
                continue;
            }
            if avail != needed {
                if !may_split {
                    hbp = next;
                    continue;
                }
                // If the next chunk is obviously better, go on (do not cut a
                // large chunk into small blocks when a closer fit follows).
                if next != 0 {
                    let nb = lay.block_of(next).expect("a free-list link names a block");
                    let nh = lay.header_of(t, nb).expect("a free chunk has a header");
                    let nsz = t.load_u64(nh + H_SZ);
                    if nsz < avail && nsz >= needed {
                        hbp = next;
                        continue;
                    }
                }
            }
            let mut s = lay.log().begin(t);
            s.log(t, HDR_FREE_PTR);
            self.first_part(t, lay, &mut s, b, h, needed, n);
            break (b, h, s);
        };
        // Set the header up.
        s.store_unlogged(t, h + H_SZ, sz);
        s.store_unlogged(t, h + H_FLAGS, 0);
        s.store_unlogged(t, h + H_BLOCK, lay.block_off(b));
        s.store_unlogged(t, h + H_DESCR, sz);
        s.store_unlogged(t, h + H_MAP, 0);
        t.store_u64(h + H_NMARKS, 0);
        for w in 0..MARK_WORDS {
            t.store_u64(h + H_MARKS + 8 * w, 0);
        }
        t.store_u64(h + H_RECLAIM, reclaim::FLOATING);
        let lfb = t.load_u64(LARGE_FREE_BYTES);
        s.store_u64(t, LARGE_FREE_BYTES, lfb - needed);
        s.commit(t);
        self.install_counts(t, lay, b, needed / BLOCK);
        Some(b)
    }

    /// Takes the first `bytes` of chunk `b` (header `h`, on list `n`) off
    /// the lists and returns the rest to them under a new header
    /// (`MAK_get_first_part`).
    #[allow(clippy::too_many_arguments)]
    fn first_part(&mut self, t: &mut PmThread, lay: &Layout, s: &mut Section, b: u64, h: u64, bytes: u64, n: u64) {
        let total = t.load_u64(h + H_SZ);
        self.remove_from_fl(t, lay, s, b, h, Some(n));
        if total == bytes {
            return;
        }
        let rest = b + bytes / BLOCK;
        let rh = self.install_header(t, lay, s, rest);
        s.store_unlogged(t, rh + H_SZ, total - bytes);
        t.store_u64(rh + H_FLAGS, 0);
        self.add_to_fl(t, lay, s, rest, rh);
    }

    /// Unlinks free chunk `b` (header `h`) from its list and logs the
    /// header words that decide it is free (`MAK_remove_from_fl`).
    fn remove_from_fl(&mut self, t: &mut PmThread, lay: &Layout, s: &mut Section, b: u64, h: u64, n: Option<u64>) {
        let sz = t.load_u64(h + H_SZ);
        let index = n.unwrap_or_else(|| fl_index(sz / BLOCK));
        let (next, prev) = (t.load_u64(h + H_NEXT), t.load_u64(h + H_PREV));
        if prev == 0 {
            t.store_u64(lay.fl_head(index), next);
        } else {
            let ph = self.hdr_at(t, lay, prev);
            t.store_u64(ph + H_NEXT, next);
        }
        let fb = t.load_u64(lay.fl_bytes(index));
        t.store_u64(lay.fl_bytes(index), fb.wrapping_sub(sz));
        if next != 0 {
            let nh = self.hdr_at(t, lay, next);
            t.store_u64(nh + H_PREV, prev);
        }
        s.log(t, h + H_SZ);
        s.log(t, h + H_FLAGS);
        self.free.remove(&b);
    }

    /// Pushes free chunk `b` (header `h`) onto its list (`MAK_add_to_fl`).
    fn add_to_fl(&mut self, t: &mut PmThread, lay: &Layout, s: &mut Section, b: u64, h: u64) {
        self.link(t, lay, b, h);
        let f = t.load_u64(h + H_FLAGS);
        s.store_unlogged(t, h + H_FLAGS, f | FREE_BLK);
    }

    /// [`Blocks::add_to_fl`] outside a section (formatting, rebuilding).
    fn add_to_fl_plain(&mut self, t: &mut PmThread, lay: &Layout, b: u64, h: u64) {
        self.link(t, lay, b, h);
    }

    fn link(&mut self, t: &mut PmThread, lay: &Layout, b: u64, h: u64) {
        let sz = t.load_u64(h + H_SZ);
        let index = fl_index(sz / BLOCK);
        let second = t.load_u64(lay.fl_head(index));
        t.store_u64(lay.fl_head(index), lay.block_off(b));
        let fb = t.load_u64(lay.fl_bytes(index));
        t.store_u64(lay.fl_bytes(index), fb.wrapping_add(sz));
        t.store_u64(h + H_NEXT, second);
        t.store_u64(h + H_PREV, 0);
        if second != 0 {
            let sh = self.hdr_at(t, lay, second);
            t.store_u64(sh + H_PREV, lay.block_off(b));
        }
        self.free.insert(b, sz / BLOCK);
    }

    /// The header of the block at heap offset `off`.
    fn hdr_at(&self, t: &PmThread, lay: &Layout, off: u64) -> u64 {
        let b = lay.block_of(off).expect("a link names a block");
        lay.header_of(t, b).expect("a linked chunk has a header")
    }

    /// A header for block `b` (`MAK_install_header`): recycled (its
    /// `hb_sz`, 0, logged) or bumped (the bump pointer stored unlogged; the
    /// section logged it first), its `hb_block` set, the index pointed at it.
    fn install_header(&mut self, t: &mut PmThread, lay: &Layout, s: &mut Section, b: u64) -> u64 {
        let free = t.load_u64(HDR_FREE_LIST);
        let h = if free != 0 {
            t.store_u64(HDR_FREE_LIST, t.load_u64(free + H_NEXT));
            t.store_u64(free + H_PREV, 0);
            t.store_u64(free + H_NEXT, 0);
            s.log(t, free + H_SZ);
            free
        } else {
            let h = t.load_u64(HDR_FREE_PTR);
            assert!(h + HDR <= lay.hdrs_end(), "Makalu header space exhausted");
            s.store_unlogged(t, HDR_FREE_PTR, h + HDR);
            h
        };
        s.store_unlogged(t, h + H_BLOCK, lay.block_off(b));
        self.set_index(t, lay, b, h);
        h
    }

    /// Frees the header of chunk `b` (`MAK_remove_header`): its `hb_sz`
    /// zeroed (the caller logged it), pushed on the header free list, its
    /// index word cleared.
    fn remove_header(&mut self, t: &mut PmThread, lay: &Layout, s: &mut Section, b: u64) {
        let h = lay.header_of(t, b).expect("a removed chunk has a header");
        s.store_unlogged(t, h + H_SZ, 0);
        t.store_u64(h + H_NEXT, t.load_u64(HDR_FREE_LIST));
        self.aflush.note(t, h + H_NEXT);
        t.store_u64(HDR_FREE_LIST, h);
        self.set_index(t, lay, b, 0);
    }

    /// Sets block `b`'s index word, lazily flushed (`SET_HDR`).
    fn set_index(&mut self, t: &mut PmThread, lay: &Layout, b: u64, w: u64) {
        t.store_u64(lay.index_of(b), w);
        self.aflush.note(t, lay.index_of(b));
    }

    /// Forwarding counts for the blocks after the first of a large object (`MAK_install_counts`).
    fn install_counts(&mut self, t: &mut PmThread, lay: &Layout, b: u64, n: u64) {
        for i in 1..n {
            self.set_index(t, lay, b + i, i.min(MAX_JUMP));
        }
    }

    /// Gives blocks back in a section of their own (the callers of `MAK_freehblk`).
    pub fn free(&mut self, t: &mut PmThread, lay: &Layout, b: u64) {
        let mut s = lay.log().begin(t);
        self.freehblk(t, lay, &mut s, b);
        s.commit(t);
    }

    /// Frees the small block or large object starting at block `b`,
    /// coalescing with free neighbours (`MAK_freehblk`).
    pub fn freehblk(&mut self, t: &mut PmThread, lay: &Layout, s: &mut Section, b: u64) {
        self.note_inconsistent(t);
        let h = lay.header_of(t, b).expect("a freed block has a header");
        let n = blocks_of(t.load_u64(h + H_SZ));
        let size = n * BLOCK;
        for i in 1..n {
            self.set_index(t, lay, b + i, 0); // MAK_remove_counts
        }
        s.store_u64(t, h + H_SZ, size);
        let f = t.load_u64(h + H_FLAGS);
        assert!(f & FREE_BLK == 0, "block {b} freed twice");
        s.store_u64(t, h + H_FLAGS, f | FREE_BLK);
        let (mut first, mut fh, mut total) = (b, h, size);
        let prev = self.free.range(..b).next_back().map(|(&p, &pn)| (p, pn)).filter(|&(p, pn)| p + pn == b);
        if let Some((p, pn)) = prev {
            let ph = lay.header_of(t, p).expect("a free chunk has a header");
            self.remove_from_fl(t, lay, s, p, ph, None);
            total += pn * BLOCK;
            s.store_unlogged(t, ph + H_SZ, total);
            self.remove_header(t, lay, s, b);
            (first, fh) = (p, ph);
        }
        let next = b + n;
        if let Some(&nn) = self.free.get(&next) {
            let nh = lay.header_of(t, next).expect("a free chunk has a header");
            self.remove_from_fl(t, lay, s, next, nh, None);
            total += nn * BLOCK;
            s.store_unlogged(t, fh + H_SZ, total);
            self.remove_header(t, lay, s, next);
        }
        let lfb = t.load_u64(LARGE_FREE_BYTES);
        s.store_u64(t, LARGE_FREE_BYTES, lfb + size);
        self.add_to_fl(t, lay, s, first, fh);
    }

    /// Makes the lazily flushed lines durable and says the heap is
    /// consistent again (`MAK_sync_alloc_metadata` at a graceful shutdown).
    pub fn sync(&mut self, t: &mut PmThread) {
        self.aflush.note(t, HDR_FREE_PTR);
        self.aflush.note(t, HDR_FREE_LIST);
        self.aflush.drain(t);
        if t.load_u64(STATE) != state::NONE {
            t.store_u64(STATE, state::NONE);
            t.persist_sync(STATE);
        }
    }
}
