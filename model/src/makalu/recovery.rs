//! Restart and offline recovery (Makalu §9; `MAK_recover_metadata`,
//! `MAK_rebuild_metadata_from_headers`, `MAK_restart_block_freelists`).
//!
//! Every open first rolls back an undo-logged section a crash interrupted
//! (§8), so the core header fields are consistent, then walks header
//! space up to its bump pointer: a header with `hb_sz` 0 is free, every
//! other one describes the chunk, block or large object at its `hb_block`.
//! Together they must tile the blocks. The header index, the block free
//! lists and the header free list are rebuilt from them (they are lazily
//! flushed, so after a crash they may be stale).
//!
//! * After a graceful shutdown the mark bits are durable and exact (every
//!   free list was given back): blocks at most 7/8 full form the reclaim
//!   lists.
//! * After a crash the mark bits are not to be trusted (lazily flushed;
//!   objects in lost free lists still marked). The offline GC marks
//!   conservatively from the persistent roots ([`crate::mech::mark`]),
//!   rewrites every block's mark bits durably, and frees blocks left with
//!   no object and large objects not reached (§9.2).

use super::blocks::Blocks;
use super::layout::{
    blocks_of, fl_index, nearly_full, objs_per_block, state, valid_marks, Layout, BLOCK, FREE_BLK, GRANULE, HDR,
    HDR_FREE_LIST, HDR_FREE_PTR, HEAP_BLOCKS, H_BLOCK, H_FLAGS, H_MARKS, H_NEXT, H_NMARKS, H_PREV, H_SZ,
    LARGE_FREE_BYTES, MARK_WORDS, MAX_JUMP, MEDIUM_MAX, N_HBLK_FLS, STATE,
};
use super::Mutation;
use super::NAME;
use crate::error::AllocError;
use crate::mech::dirty::DirtyLines;
use crate::mech::mark;
use crate::pm::PmThread;
use serde::Serialize;
use std::collections::BTreeSet;

/// What opening a heap found and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RecoveryReport {
    /// The previous run did not shut down gracefully.
    pub crashed: bool,
    /// Undo-log entries rolled back.
    pub undone: u64,
    /// Objects (small, medium and large) the GC reached from the roots.
    pub gc_marked: u64,
    /// Objects whose durable mark bit said allocated but that the GC did not
    /// reach: leaked by the crash (lost free lists, unpublished allocations)
    /// or by the program, now free. (Mark bits set just before the crash and
    /// never flushed are not counted.)
    pub gc_freed: u64,
    /// Blocks freed because no object in them was reached.
    pub gc_freed_blocks: u64,
    /// Bytes of live objects after opening (usable sizes).
    pub live_bytes: u64,
}

pub(super) struct Recovered {
    /// Blocks at most 7/8 full: `(block, object size)`.
    pub reclaim: Vec<(u64, u64)>,
    pub report: RecoveryReport,
}

/// What a used block holds.
#[derive(Clone, Copy, Debug)]
pub(super) enum Kind {
    /// Objects of this many bytes.
    Small(u64),
    /// One large object of this many bytes (whole blocks).
    Large(u64),
}

/// The blocks, walked.
#[derive(Default)]
pub(super) struct Walk {
    /// Free chunks `(first block, blocks)`, by first block.
    pub free: Vec<(u64, u64)>,
    /// Used blocks (small blocks, first blocks of large objects), by block.
    pub used: Vec<(u64, Kind)>,
}

fn corrupt(m: String) -> AllocError {
    AllocError::corrupt(NAME, m)
}

/// What header `h` says starts at its block: `Err` if it is impossible.
fn describe(t: &PmThread, lay: &Layout, h: u64) -> Result<(u64, u64, Option<Kind>), String> {
    let (sz, f, at) = (t.load_u64(h + H_SZ), t.load_u64(h + H_FLAGS), t.load_u64(h + H_BLOCK));
    let b =
        lay.block_of(at).filter(|&b| lay.block_off(b) == at).ok_or_else(|| format!("hb_block {at:#x} is no block"))?;
    if f & FREE_BLK != 0 {
        if !sz.is_multiple_of(BLOCK) || sz == 0 {
            return Err(format!("free chunk of {sz} bytes"));
        }
        return Ok((b, sz / BLOCK, None));
    }
    if sz == 0 || !sz.is_multiple_of(GRANULE) {
        return Err(format!("object size {sz}"));
    }
    if sz > MEDIUM_MAX {
        Ok((b, blocks_of(sz), Some(Kind::Large(sz))))
    } else {
        Ok((b, 1, Some(Kind::Small(sz))))
    }
}

/// Adds what starts at block `b` (`n` blocks, `k`) to `w`, checking that
/// the walk tiles: `*next` is where the previous piece ended.
fn tile(w: &mut Walk, next: &mut u64, b: u64, n: u64, k: Option<Kind>, heap: u64) -> Result<(), AllocError> {
    if b != *next || b + n > heap {
        return Err(corrupt(format!("blocks {b}..{} do not follow block {next} in the heap's tiling", b + n)));
    }
    match k {
        None => w.free.push((b, n)),
        Some(k) => w.used.push((b, k)),
    }
    *next = b + n;
    Ok(())
}

/// The heap's size in blocks (`MAK_heapsize`), checked.
fn heap_blocks(t: &PmThread, lay: &Layout) -> Result<u64, AllocError> {
    let heap = t.load_u64(HEAP_BLOCKS);
    if heap == 0 || heap > lay.nblocks {
        return Err(corrupt(format!("heap of {heap} blocks in a file of {}", lay.nblocks)));
    }
    Ok(heap)
}

/// Walks the blocks through the header index, as it is while the heap is
/// open: each piece's first block must name a header describing it.
pub(super) fn walk_index(t: &PmThread, lay: &Layout) -> Result<Walk, AllocError> {
    let mut w = Walk::default();
    let heap = heap_blocks(t, lay)?;
    let mut b = 0;
    while b < heap {
        let h = t.load_u64(lay.index_of(b));
        if !lay.is_hdr(h) {
            return Err(corrupt(format!("block {b} starts no piece (header index word {h:#x})")));
        }
        let (hb, n, k) = describe(t, lay, h).map_err(|m| corrupt(format!("header of block {b}: {m}")))?;
        let mut at = b;
        tile(&mut w, &mut at, hb, n, k, heap)?;
        for i in 1..n {
            let want = if k.is_some() { i.min(MAX_JUMP) } else { 0 };
            let got = t.load_u64(lay.index_of(b + i));
            if got != want {
                return Err(corrupt(format!("header index of block {}: {got:#x}, expected {want}", b + i)));
            }
        }
        b = at;
    }
    Ok(w)
}

/// Checks the persistent block free lists: each chunk on the list of its
/// size, the back links consistent, exactly the chunks `free` holds.
pub(super) fn check_lists(t: &PmThread, lay: &Layout, free: &[(u64, u64)]) -> Result<(), String> {
    let mut seen = BTreeSet::new();
    for i in 0..=N_HBLK_FLS {
        let (mut at, mut prev) = (t.load_u64(lay.fl_head(i)), 0);
        while at != 0 {
            let b = lay.block_of(at).ok_or_else(|| format!("free list {i} names {at:#x}, no block"))?;
            let h = lay.header_of(t, b).ok_or_else(|| format!("free list {i}: block {b} has no header"))?;
            let n = t.load_u64(h + H_SZ) / BLOCK;
            if fl_index(n) != i || t.load_u64(h + H_FLAGS) & FREE_BLK == 0 {
                return Err(format!("free list {i} holds block {b} ({n} blocks, flags {})", t.load_u64(h + H_FLAGS)));
            }
            if t.load_u64(h + H_PREV) != prev {
                return Err(format!("free list {i}: block {b}'s back link is wrong"));
            }
            if !seen.insert((b, n)) || seen.len() > free.len() {
                return Err(format!("free list {i} holds block {b} twice, or more chunks than are free"));
            }
            (prev, at) = (at, t.load_u64(h + H_NEXT));
        }
    }
    if seen.into_iter().ne(free.iter().copied()) {
        return Err("the block free lists do not hold exactly the free chunks".into());
    }
    Ok(())
}

pub(super) fn recover(
    t: &mut PmThread,
    lay: &Layout,
    crashed: bool,
    blocks: &mut Blocks,
) -> Result<Recovered, AllocError> {
    let mut report = RecoveryReport { crashed, ..Default::default() };
    report.undone = lay.log().recover(t).undone;
    // Header space up to its bump pointer.
    let end = t.load_u64(HDR_FREE_PTR);
    if end < lay.hdrs || end > lay.hdrs_end() || !(end - lay.hdrs).is_multiple_of(HDR) {
        return Err(corrupt(format!("header bump pointer {end:#x} outside header space")));
    }
    let mut pieces = Vec::new();
    let mut free_hdrs = Vec::new();
    let mut h = lay.hdrs;
    while h < end {
        if t.load_u64(h + H_SZ) == 0 {
            free_hdrs.push(h);
        } else {
            let (b, n, k) = describe(t, lay, h).map_err(|m| corrupt(format!("header at {h:#x}: {m}")))?;
            pieces.push((b, n, k, h));
        }
        h += HDR;
    }
    pieces.sort_by_key(|p| p.0);
    let heap = heap_blocks(t, lay)?;
    let mut walk = Walk::default();
    let mut next = 0;
    let mut index = DirtyLines::new(super::blocks::AFLUSH_LINES);
    for &(b, n, k, h) in &pieces {
        tile(&mut walk, &mut next, b, n, k, heap)?;
        for i in 0..n {
            let want = match (i, k) {
                (0, _) => h,
                (_, None) => 0,
                (_, Some(_)) => i.min(MAX_JUMP),
            };
            if t.load_u64(lay.index_of(b + i)) != want {
                t.store_u64(lay.index_of(b + i), want);
                index.note(t, lay.index_of(b + i));
            }
        }
    }
    if next != heap {
        return Err(corrupt(format!("the headers tile blocks 0..{next} of the heap's {heap}")));
    }
    // The header free list, rebuilt (a crash may have left it stale).
    let mut head = 0;
    for &fh in free_hdrs.iter().rev() {
        t.store_u64(fh + H_NEXT, head);
        index.note(t, fh + H_NEXT);
        head = fh;
    }
    t.store_u64(HDR_FREE_LIST, head);
    t.flush(HDR_FREE_LIST);
    blocks.adopt(t, lay, &walk.free, heap);
    let free_bytes: u64 = walk.free.iter().map(|&(_, n)| n * BLOCK).sum();
    if t.load_u64(LARGE_FREE_BYTES) != free_bytes {
        t.store_u64(LARGE_FREE_BYTES, free_bytes);
        t.flush(LARGE_FREE_BYTES);
    }
    index.drain(t);
    // An expansion the crash interrupted after its space was published.
    blocks.finish_expand(t, lay);
    let mut reclaim = Vec::new();
    if !crashed {
        for &(b, k) in &walk.used {
            match k {
                Kind::Small(sz) => {
                    let h = lay.header_of(t, b).expect("a walked block has a header");
                    let marks = t.load_u64(h + H_NMARKS);
                    report.live_bytes += marks * sz;
                    if marks <= nearly_full(sz) {
                        reclaim.push((b, sz));
                    }
                }
                Kind::Large(sz) => report.live_bytes += sz,
            }
        }
    } else {
        collect(t, lay, &walk.used, blocks, &mut reclaim, &mut report);
    }
    if t.load_u64(STATE) != state::NONE {
        t.store_u64(STATE, state::NONE);
        t.persist_sync(STATE);
    }
    Ok(Recovered { reclaim, report })
}

/// The offline mark-sweep after a crash.
fn collect(
    t: &mut PmThread,
    lay: &Layout,
    used: &[(u64, Kind)],
    blocks: &mut Blocks,
    reclaim: &mut Vec<(u64, u64)>,
    report: &mut RecoveryReport,
) {
    // Block → index into `used`, and fresh (cleared) mark bits per object.
    let mut at: Vec<u32> = vec![u32::MAX; lay.nblocks as usize];
    for (i, &(b, _)) in used.iter().enumerate() {
        at[b as usize] = i as u32;
    }
    let mut marks: Vec<[u64; MARK_WORDS as usize]> = vec![[0; MARK_WORDS as usize]; used.len()];
    let reach = |w: u64| -> Option<u64> {
        let b = lay.block_of(w)?;
        let i = *at.get(b as usize)?;
        if i == u32::MAX {
            return None;
        }
        let rel = w - lay.block_off(b);
        let m = &mut marks[i as usize];
        let (len, bit) = match used[i as usize].1 {
            Kind::Small(sz) if rel.is_multiple_of(sz) && rel / sz < objs_per_block(sz) => (sz, rel / sz),
            Kind::Large(sz) if rel == 0 => (sz, 0),
            _ => return None,
        };
        let (wi, mask) = ((bit / 64) as usize, 1u64 << (bit % 64));
        if m[wi] & mask != 0 {
            return None;
        }
        m[wi] |= mask;
        Some(len)
    };
    report.gc_marked = mark::mark_from(t, mark::root_words(t), reach);
    for (i, &(b, k)) in used.iter().enumerate() {
        let h = lay.header_of(t, b).expect("a walked block has a header");
        let new = marks[i];
        match k {
            Kind::Small(sz) => {
                let n = objs_per_block(sz);
                let mut was = 0;
                for (wi, &m) in new.iter().enumerate() {
                    let w = h + H_MARKS + 8 * wi as u64;
                    let old = t.load_u64(w);
                    was += (old & valid_marks(n, wi as u64) & !m).count_ones() as u64;
                    t.store_u64(w, m);
                }
                let live: u64 = new.iter().map(|m| m.count_ones() as u64).sum();
                report.gc_freed += was;
                if lay.mutation != Mutation::MarkCountStale {
                    t.store_u64(h + H_NMARKS, live);
                }
                t.flush(h + H_MARKS);
                if live == 0 {
                    report.gc_freed_blocks += 1;
                    t.fence();
                    blocks.free(t, lay, b);
                } else {
                    report.live_bytes += live * sz;
                    if live <= nearly_full(sz) {
                        reclaim.push((b, sz));
                    }
                }
            }
            Kind::Large(sz) => {
                if new[0] & 1 == 0 {
                    report.gc_freed += 1;
                    report.gc_freed_blocks += blocks_of(sz);
                    blocks.free(t, lay, b);
                } else {
                    report.live_bytes += sz;
                }
            }
        }
    }
    blocks.aflush.drain(t);
}
