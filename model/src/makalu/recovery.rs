//! Restart and offline recovery (Makalu §9).
//!
//! Every open first rolls back an undo-logged section a crash interrupted
//! (§8), so the core header fields are consistent, then walks the headers
//! from block 0 to the bump pointer: free chunks go to the chunk lists,
//! blocks and large objects are noted.
//!
//! * After a graceful shutdown the mark bits are durable and exact (every
//!   free list was given back): blocks with free objects form the reclaim
//!   lists.
//! * After a crash the mark bits are not to be trusted (lazily flushed;
//!   objects in lost free lists still marked). The offline GC marks
//!   conservatively from the persistent roots ([`crate::mech::mark`]),
//!   rewrites every block's mark bits durably, and frees blocks left with
//!   no object and large objects not reached (§9.2).

use super::chunks::Chunks;
use super::layout::{
    flag, objs_per_block, valid_marks, Layout, BLOCK, GRANULE, H_BLOCK, H_FLAG, H_MARKS, H_NMARKS, H_SZ, MEDIUM_MAX,
};
use super::NAME;
use crate::error::AllocError;
use crate::mech::mark;
use crate::mech::mutation::Mutation;
use crate::pm::PmThread;
use serde::Serialize;

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
    pub chunks: Chunks,
    /// Blocks with free objects: `(block, object size)`.
    pub reclaim: Vec<(u64, u64)>,
    pub report: RecoveryReport,
}

/// What a used block holds.
#[derive(Clone, Copy, Debug)]
pub(super) enum Kind {
    /// Objects of this many bytes.
    Small(u64),
    /// The first of this many blocks of one large object.
    Large(u64),
}

/// The headers walked from block 0 to the bump pointer.
pub(super) struct Walk {
    /// Free chunks `(first block, blocks)`, by first block.
    pub free: Vec<(u64, u64)>,
    /// Used blocks (small blocks, first blocks of large objects), by block.
    pub used: Vec<(u64, Kind)>,
}

/// Walks the headers of blocks `0..top`: each must start a free chunk, a
/// small block or a large object that ends by `top`, and name its block.
pub(super) fn walk(t: &PmThread, lay: &Layout, top: u64) -> Result<Walk, AllocError> {
    let mut w = Walk { free: Vec::new(), used: Vec::new() };
    let mut b = 0;
    while b < top {
        let h = lay.hdr(b);
        let (f, sz) = (t.load_u64(h + H_FLAG), t.load_u64(h + H_SZ));
        let bad = |what: &str| corrupt(format!("header of block {b}: {what} (flag {f}, size {sz})"));
        if f != flag::UNUSED && t.load_u64(h + H_BLOCK) != lay.block_off(b) {
            return Err(bad("hb_block does not name its block"));
        }
        let blocks = |sz: u64| {
            let n = sz / BLOCK;
            (sz.is_multiple_of(BLOCK) && n >= 1 && b + n <= top).then_some(n).ok_or_else(|| bad("impossible size"))
        };
        match f {
            flag::FREE => {
                let n = blocks(sz)?;
                w.free.push((b, n));
                b += n;
            }
            flag::SMALL => {
                if sz == 0 || sz % GRANULE != 0 || sz > MEDIUM_MAX {
                    return Err(bad("impossible object size"));
                }
                w.used.push((b, Kind::Small(sz)));
                b += 1;
            }
            flag::LARGE => {
                let n = blocks(sz)?;
                w.used.push((b, Kind::Large(n)));
                b += n;
            }
            _ => return Err(bad("no block or chunk starts here")),
        }
    }
    Ok(w)
}

fn corrupt(m: String) -> AllocError {
    AllocError::corrupt(NAME, m)
}

pub(super) fn recover(t: &mut PmThread, lay: &Layout, crashed: bool) -> Result<Recovered, AllocError> {
    let mut report = RecoveryReport { crashed, ..Default::default() };
    report.undone = lay.log().recover(t).undone;
    let top = t.load_u64(lay.rgn_curr_off());
    if top > lay.nblocks {
        return Err(corrupt(format!("bump pointer at block {top} beyond the {} blocks", lay.nblocks)));
    }
    let mut chunks = Chunks::new(top);
    let Walk { free, used } = walk(t, lay, top)?;
    for (b, n) in free {
        chunks.adopt(b, n);
    }
    let mut reclaim = Vec::new();
    if !crashed {
        for &(b, k) in &used {
            let h = lay.hdr(b);
            match k {
                Kind::Small(sz) => {
                    let marks = t.load_u64(h + H_NMARKS);
                    report.live_bytes += marks * sz;
                    if marks < objs_per_block(sz) {
                        reclaim.push((b, sz));
                    }
                }
                Kind::Large(n) => report.live_bytes += n * BLOCK,
            }
        }
        return Ok(Recovered { chunks, reclaim, report });
    }
    collect(t, lay, &used, &mut chunks, &mut reclaim, &mut report);
    Ok(Recovered { chunks, reclaim, report })
}

/// The offline mark-sweep after a crash.
fn collect(
    t: &mut PmThread,
    lay: &Layout,
    used: &[(u64, Kind)],
    chunks: &mut Chunks,
    reclaim: &mut Vec<(u64, u64)>,
    report: &mut RecoveryReport,
) {
    // Block → index into `used`, and fresh (cleared) mark bits per object.
    let mut at: Vec<u32> = vec![u32::MAX; chunks.top() as usize];
    for (i, &(b, _)) in used.iter().enumerate() {
        at[b as usize] = i as u32;
    }
    let mut marks: Vec<[u64; 4]> = vec![[0; 4]; used.len()];
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
            Kind::Large(n) if rel == 0 => (n * BLOCK, 0),
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
        let h = lay.hdr(b);
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
                t.flush(h);
                if live == 0 {
                    report.gc_freed_blocks += 1;
                    t.fence();
                    chunks.free_blocks(t, lay, b, 1);
                } else {
                    report.live_bytes += live * sz;
                    if live < n {
                        reclaim.push((b, sz));
                    }
                }
            }
            Kind::Large(n) => {
                if new[0] & 1 == 0 {
                    report.gc_freed += 1;
                    report.gc_freed_blocks += n;
                    chunks.free_blocks(t, lay, b, n);
                } else {
                    report.live_bytes += n * BLOCK;
                }
            }
        }
    }
    t.fence();
}
