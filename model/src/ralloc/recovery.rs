//! Restart (`BaseMeta::restart`) and the recovery-time garbage collection
//! (`GarbageCollection::operator()`).
//!
//! A heap whose dirty mark is set was not closed: the GC resets every
//! transient list, marks conservatively from the roots
//! ([`crate::mech::mark`]; Ralloc's filter functions default to the same
//! conservative scan), then sweeps the superblock region: a superblock in
//! use with marked blocks gets a free list of its unmarked blocks (links
//! stored in the blocks) and an anchor, full or partial (partial ones go
//! on their class's partial list); a large block that is marked stays;
//! every other superblock's descriptor is constructed again (zeroed,
//! flushed, fenced) and put on the free list. Either way the open ends
//! with a fence and the dirty mark set again (stored, not flushed, as the
//! code does).

use super::layout::{
    head, head_desc, sb_state, Anchor, Layout, AVAIL_SB, CLASSES, DIRTY, D_ANCHOR, D_BLOCK_SIZE, D_HEAP, D_MAXCOUNT,
    D_NEXT_FREE, D_NEXT_PARTIAL, D_SB, SB,
};
use super::{Ralloc, NAME};
use crate::error::AllocError;
use crate::mech::mark;
use crate::pm::PmThread;
use serde::Serialize;
use std::collections::{BTreeSet, HashSet};

/// What opening a heap found and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RecoveryReport {
    /// The dirty mark was set: the previous run did not close the heap.
    pub crashed: bool,
    /// Blocks the GC reached from the roots.
    pub gc_marked: u64,
    /// Superblocks the GC found unused and put on the free list.
    pub gc_free_superblocks: u64,
    /// Bytes of live blocks after opening (usable sizes).
    pub live_bytes: u64,
}

/// What superblock `i`'s descriptor says it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Use {
    /// Free (or inside a large block: see [`pieces`]).
    Free,
    /// Blocks of `bs` bytes, `max` of them.
    Small { sc: usize, bs: u64, max: u64 },
    /// One large block of `bytes`.
    Large { bytes: u64 },
}

fn use_of(ra: &Ralloc, t: &PmThread, i: u64) -> Use {
    let d = ra.lay.desc(i);
    let Some(sc) = Layout::sc_of_heap(t.load_u64(d + D_HEAP)) else { return Use::Free };
    if t.load_u64(d + D_SB) != ra.lay.sb(i) {
        return Use::Free;
    }
    let bs = t.load_u64(d + D_BLOCK_SIZE);
    if sc == 0 {
        return Use::Large { bytes: bs };
    }
    Use::Small { sc, bs, max: t.load_u64(d + D_MAXCOUNT) }
}

/// The superblocks below the region's end, each with its use, skipping the
/// superblocks a large block spans; superblock 0 is never used.
fn pieces(ra: &Ralloc, t: &PmThread) -> Result<Vec<(u64, Use)>, String> {
    let end = ra.region_end(t);
    let last = ra.lay.sb_of(end.saturating_sub(1)).map_or(0, |i| i + 1);
    if end > ra.lay.sb(ra.lay.nsb) || !(end - ra.lay.sbs).is_multiple_of(SB) {
        return Err(format!("superblock region ends at {end:#x}, outside the heap or inside a superblock"));
    }
    let mut v = Vec::new();
    let mut i = 1;
    while i < last {
        let u = use_of(ra, t, i);
        match u {
            Use::Large { bytes } => {
                if bytes == 0 || !bytes.is_multiple_of(SB) || i + bytes / SB > last {
                    return Err(format!("large block at superblock {i}: {bytes} bytes"));
                }
                v.push((i, u));
                i += bytes / SB;
            }
            Use::Small { bs, max, .. } if bs == 0 || max != SB / bs => {
                return Err(format!("superblock {i}: {max} blocks of {bs} bytes"));
            }
            _ => {
                v.push((i, u));
                i += 1;
            }
        }
    }
    Ok(v)
}

/// The free blocks of small superblock `i` (its anchor's chain).
fn free_chain(ra: &Ralloc, t: &PmThread, i: u64, bs: u64, max: u64) -> Result<BTreeSet<u64>, String> {
    let a = Anchor::unpack(t.load_u64(ra.lay.desc(i) + D_ANCHOR));
    let sb = ra.lay.sb(i);
    let mut free = BTreeSet::new();
    match a.state {
        sb_state::FULL => {}
        sb_state::PARTIAL if a.count >= 1 && a.count < max && a.avail < max => {
            let mut b = sb + a.avail * bs;
            for k in 0..a.count {
                if !free.insert(b) {
                    return Err(format!("superblock {i}: its free list repeats block {b:#x}"));
                }
                if k + 1 < a.count {
                    b = t.load_u64(b);
                    if b < sb || b >= sb + max * bs || !(b - sb).is_multiple_of(bs) {
                        return Err(format!("superblock {i}: its free list leaves it ({b:#x})"));
                    }
                }
            }
        }
        sb_state::EMPTY => free.extend((0..max).map(|k| sb + k * bs)),
        s => return Err(format!("superblock {i}: anchor state {s}, {} free of {max}", a.count)),
    }
    Ok(free)
}

/// Every live block `(offset, usable size)`, by offset: what no superblock
/// free list holds (right after open, when no cache holds blocks).
pub(super) fn live(ra: &Ralloc, t: &PmThread) -> Result<Vec<(u64, u64)>, String> {
    let mut v = Vec::new();
    for (i, u) in pieces(ra, t)? {
        match u {
            Use::Free => {}
            Use::Large { bytes } => v.push((ra.lay.sb(i), bytes)),
            Use::Small { bs, max, .. } => {
                let free = free_chain(ra, t, i, bs, max)?;
                let sb = ra.lay.sb(i);
                v.extend((0..max).map(|k| sb + k * bs).filter(|b| !free.contains(b)).map(|b| (b, bs)));
            }
        }
    }
    Ok(v)
}

pub(super) fn restart(ra: &Ralloc, t: &mut PmThread) -> Result<(RecoveryReport, u64), AllocError> {
    let bad = |m: String| AllocError::corrupt(NAME, m);
    let mut rep = RecoveryReport { crashed: t.load_u64(DIRTY) != 0, ..Default::default() };
    if rep.crashed {
        gc(ra, t, &mut rep).map_err(bad)?;
    }
    t.fence();
    t.store_u64(DIRTY, 1);
    let live = live(ra, t).map_err(bad)?;
    rep.live_bytes = live.iter().map(|l| l.1).sum();
    let top = pieces(ra, t).map_err(bad)?.iter().filter(|p| p.1 != Use::Free).map(|p| p.0).max().unwrap_or(0);
    Ok((rep, top))
}

fn gc(ra: &Ralloc, t: &mut PmThread, rep: &mut RecoveryReport) -> Result<(), String> {
    // Step 0: every transient list, reset.
    t.store_u64(AVAIL_SB, 0);
    for sc in 0..CLASSES {
        t.store_u64(Layout::heap(sc), 0);
    }
    // Step 1: mark from the roots.
    let used = pieces(ra, t)?;
    let mut info = vec![Use::Free; ra.lay.nsb as usize];
    for &(i, u) in &used {
        info[i as usize] = u;
    }
    let mut marked: HashSet<u64> = HashSet::new();
    let lay = ra.lay;
    rep.gc_marked = mark::mark_from(t, mark::root_words(t), |w| {
        let i = lay.sb_of(w).filter(|&i| i > 0)?;
        let rel = w - lay.sb(i);
        let len = match info[i as usize] {
            Use::Small { bs, max, .. } if rel.is_multiple_of(bs) && rel / bs < max => bs,
            Use::Large { bytes } if rel == 0 => bytes,
            _ => return None,
        };
        marked.insert(w).then_some(len)
    });
    // Step 2: sweep.
    let mut avail: Option<u64> = None;
    let mut free_sb = |t: &mut PmThread, i: u64, avail: &mut Option<u64>| {
        ra.construct_desc(t, i);
        t.store_u64(ra.lay.desc(i) + D_NEXT_FREE, head(*avail, 0));
        *avail = Some(i);
        rep.gc_free_superblocks += 1;
    };
    for (i, u) in used {
        let d = ra.lay.desc(i);
        let sb = ra.lay.sb(i);
        match u {
            Use::Free => free_sb(t, i, &mut avail),
            Use::Large { .. } if marked.contains(&sb) => {
                t.store_u64(d + D_NEXT_FREE, 0);
                t.store_u64(d + D_NEXT_PARTIAL, 0);
                t.store_u64(d + D_ANCHOR, Anchor { avail: 0, count: 0, state: sb_state::FULL }.pack());
            }
            Use::Large { bytes } => {
                for k in 0..bytes / SB {
                    free_sb(t, i + k, &mut avail);
                }
            }
            Use::Small { sc, bs, max } => {
                let blocks: Vec<u64> = (0..max).map(|k| sb + k * bs).collect();
                if !blocks.iter().any(|b| marked.contains(b)) {
                    free_sb(t, i, &mut avail);
                    continue;
                }
                let mut head_blk = None;
                let mut count = 0;
                for &b in blocks.iter().filter(|b| !marked.contains(b)) {
                    t.store_u64(b, head_blk.unwrap_or(0));
                    head_blk = Some(b);
                    count += 1;
                }
                t.store_u64(d + D_NEXT_FREE, 0);
                match head_blk {
                    None => {
                        t.store_u64(d + D_NEXT_PARTIAL, 0);
                        t.store_u64(d + D_ANCHOR, Anchor { avail: max, count: 0, state: sb_state::FULL }.pack());
                    }
                    Some(h) => {
                        let list = Layout::heap(sc);
                        let old = t.load_u64(list);
                        t.store_u64(d + D_NEXT_PARTIAL, head(head_desc(old), 0));
                        t.cas_u64(list, old, head(Some(i), super::layout::head_counter(old) + 1))
                            .expect("recovery runs alone");
                        let a = Anchor { avail: (h - sb) / bs, count, state: sb_state::PARTIAL };
                        t.store_u64(d + D_ANCHOR, a.pack());
                    }
                }
            }
        }
    }
    t.store_u64(AVAIL_SB, head(avail, 0));
    Ok(())
}

/// The metadata check after open: every superblock below the region's end
/// is in use (its anchor and free list consistent) or on the free list,
/// and nothing else is there; every partial superblock is on its class's
/// partial list, which holds only superblocks of its class.
pub(super) fn check(ra: &Ralloc, t: &PmThread) -> Result<(), String> {
    let used = pieces(ra, t)?;
    let mut free_descs = BTreeSet::new();
    let mut partial = BTreeSet::new();
    for &(i, u) in &used {
        match u {
            Use::Free => _ = free_descs.insert(i),
            Use::Large { .. } => {}
            Use::Small { sc, bs, max } => {
                free_chain(ra, t, i, bs, max)?;
                let a = Anchor::unpack(t.load_u64(ra.lay.desc(i) + D_ANCHOR));
                if a.state == sb_state::PARTIAL {
                    partial.insert((sc, i));
                }
            }
        }
    }
    let mut seen = BTreeSet::new();
    let mut at = head_desc(t.load_u64(AVAIL_SB));
    while let Some(i) = at {
        if !free_descs.contains(&i) || !seen.insert(i) {
            return Err(format!("the free superblock list holds superblock {i}, in use or twice"));
        }
        at = head_desc(t.load_u64(ra.lay.desc(i) + D_NEXT_FREE));
    }
    if seen != free_descs {
        let lost = free_descs.difference(&seen).next().copied();
        return Err(format!("free superblock {lost:?} is on no list"));
    }
    for sc in 1..CLASSES {
        let mut at = head_desc(t.load_u64(Layout::heap(sc)));
        let mut n = 0;
        while let Some(i) = at {
            n += 1;
            if n > ra.lay.nsb {
                return Err(format!("the partial list of class {sc} has a cycle"));
            }
            match use_of(ra, t, i) {
                Use::Small { sc: s, .. } if s == sc => {}
                u => return Err(format!("the partial list of class {sc} holds superblock {i} ({u:?})")),
            }
            partial.remove(&(sc, i));
            at = head_desc(t.load_u64(ra.lay.desc(i) + D_NEXT_PARTIAL));
        }
    }
    if let Some((sc, i)) = partial.first() {
        return Err(format!("partial superblock {i} of class {sc} is on no partial list"));
    }
    Ok(())
}
