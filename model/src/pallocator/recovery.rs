//! Opening a heap (VLDB '17 §4.5): every valid micro-log entry is redone —
//! an allocation whose block is marked is published again (one whose
//! block is not was never visible), a free is completed (block marked free,
//! the caller's pointer cleared if it still names it) — and the entries
//! are cleared; then the segment table, the pages' headers and the big
//! blocks' headers are walked to rebuild every DRAM structure (neighbouring
//! free big blocks merged, a huge block's stray later segments freed).

use super::big::Big;
use super::layout::{page_geometry, seg, Layout, ALLOCATED, HDR, P_ENTRIES, P_OWNER, P_SIZE};
use super::small::{Page, Small};
use super::{PAllocator, NAME, OP_FREE, OP_MALLOC};
use crate::error::AllocError;
use crate::mech::sizeclass::SizeClasses;
use crate::pm::PmThread;
use serde::Serialize;

/// What opening a heap found and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RecoveryReport {
    /// The previous run did not close the heap.
    pub crashed: bool,
    /// Micro-log entries redone.
    pub redone: u64,
    /// Bytes of live blocks after opening (usable sizes).
    pub live_bytes: u64,
}

pub(super) struct Recovered {
    pub smalls: Vec<Small>,
    pub big: Big,
    pub segs: Vec<u64>,
    pub report: RecoveryReport,
}

impl Recovered {
    /// The headers inside the segments, `(start, length)`: every small
    /// page's and every big block's, in heap order.
    pub fn headers(&self) -> Vec<(u64, u64)> {
        let pages = self.smalls.iter().flat_map(|s| s.pages.iter().map(|(&at, p)| (at, p.hdr)));
        let mut v: Vec<_> = pages.chain(self.big.blocks.keys().map(|&at| (at, HDR))).collect();
        // In heap order, so that a trace registers them the same way each time.
        v.sort_unstable();
        v
    }

    /// A new heap's: nothing in use.
    pub fn empty(lay: &Layout) -> Recovered {
        Recovered {
            smalls: Vec::new(),
            big: Big::default(),
            segs: vec![seg::FREE; lay.nseg as usize],
            report: RecoveryReport::default(),
        }
    }
}

/// A piece of the heap, as the walk finds it.
enum Piece {
    /// A page in use: offset, block size, owner, entries (1: allocated).
    Page { at: u64, size: u64, owner: u64, allocated: Vec<bool> },
    /// A page of a small segment not in use, and its segment's owner.
    SparePage { at: u64, owner: u64 },
    /// A big block: header offset, size, allocated.
    Big { at: u64, size: u64, allocated: bool },
    /// A huge block: first segment, segments.
    Huge { first: u64, n: u64 },
}

/// Walks the segments, calling `visit` on each piece; `words` gets the
/// table word of every segment as the walk reads it (stray huge bodies: free).
fn walk(
    t: &PmThread,
    lay: &Layout,
    classes: &SizeClasses,
    words: &mut Vec<u64>,
    mut visit: impl FnMut(Piece),
) -> Result<(), String> {
    words.clear();
    let mut i = 0;
    while i < lay.nseg {
        let w = t.load_u64(lay.segword(i));
        match w & seg::KIND {
            seg::FREE | seg::BODY => {
                words.push(seg::FREE);
                i += 1;
            }
            seg::SMALL => {
                let owner = w >> 8;
                for k in 0..lay.pages_per_seg() {
                    let at = lay.seg_off(i) + k * lay.page;
                    let size = t.load_u64(at + P_SIZE);
                    if size == 0 {
                        visit(Piece::SparePage { at, owner });
                        continue;
                    }
                    if classes.class_of(size).map(|c| classes.size(c) as u64) != Some(size) {
                        return Err(format!("page at {at:#x}: block size {size}"));
                    }
                    let (n, _) = page_geometry(lay.page, size);
                    let mut allocated = Vec::with_capacity(n as usize);
                    for b in 0..n {
                        match t.load::<u16>(at + P_ENTRIES + 2 * b) {
                            0 => allocated.push(false),
                            1 => allocated.push(true),
                            e => return Err(format!("page at {at:#x}: block {b}'s entry is {e}")),
                        }
                    }
                    visit(Piece::Page { at, size, owner: t.load_u64(at + P_OWNER), allocated });
                }
                words.push(w);
                i += 1;
            }
            seg::BIG => {
                let (start, end) = (lay.seg_off(i), lay.seg_off(i + 1));
                let mut at = start;
                while at < end {
                    let h = t.load_u64(at);
                    let size = h & !ALLOCATED;
                    if size < HDR || !size.is_multiple_of(64) || at + size > end {
                        return Err(format!("big block at {at:#x}: header {h:#x}"));
                    }
                    visit(Piece::Big { at, size, allocated: h & ALLOCATED != 0 });
                    at += size;
                }
                words.push(w);
                i += 1;
            }
            seg::HUGE => {
                let n = w >> 8;
                if n == 0 || i + n > lay.nseg {
                    return Err(format!("huge block at segment {i}: {n} segments"));
                }
                visit(Piece::Huge { first: i, n });
                words.push(w);
                words.extend(std::iter::repeat_n(seg::BODY, (n - 1) as usize));
                i += n;
            }
            k => return Err(format!("segment {i}: kind {k}")),
        }
    }
    Ok(())
}

/// Redoes one micro-log entry.
fn redo(t: &mut PmThread, lay: &Layout, op: u8, target: u64, dest: u64) -> Result<(), String> {
    let i = lay.seg_of(target).ok_or_else(|| format!("micro-log names {target:#x}, outside the segments"))?;
    let w = t.load_u64(lay.segword(i));
    let publish = |t: &mut PmThread, v: u64| {
        if dest != 0 {
            t.store_u64(dest, v);
            t.persist(dest, 8);
        }
    };
    let unpublish = |t: &mut PmThread, was: u64| {
        if dest != 0 && t.load_u64(dest) == was {
            t.store_u64(dest, 0);
            t.persist(dest, 8);
        }
    };
    match (w & seg::KIND, op) {
        (seg::SMALL, _) => {
            let page = lay.page_of(target);
            let size = t.load_u64(page + P_SIZE);
            let (n, hdr) = page_geometry(lay.page, size.max(64));
            let rel = target - page;
            let b = rel.checked_sub(hdr).map(|r| r / size.max(1)).filter(|&b| size > 0 && b < n);
            let b = b.ok_or_else(|| format!("micro-log names {target:#x}, no block of its page"))?;
            let e = page + P_ENTRIES + 2 * b;
            if op == OP_MALLOC {
                t.store::<u16>(e, 1);
                t.persist(e, 2);
                publish(t, target);
            } else {
                unpublish(t, target);
                t.store::<u16>(e, 0);
                t.persist(e, 2);
            }
        }
        (seg::BIG, _) => {
            let h = t.load_u64(target);
            if op == OP_MALLOC && h & ALLOCATED != 0 {
                publish(t, target + HDR);
            } else if op == OP_FREE {
                unpublish(t, target + HDR);
                if h & ALLOCATED != 0 {
                    t.store_u64(target, h & !ALLOCATED);
                    t.persist(target, 8);
                }
            }
        }
        (seg::HUGE, OP_MALLOC) => publish(t, target + HDR),
        (seg::HUGE, _) => {
            unpublish(t, target + HDR);
            let n = w >> 8;
            for k in i..i + n {
                t.store_u64(lay.segword(k), seg::FREE);
            }
            t.persist(lay.segword(i), 8 * n);
        }
        (_, OP_FREE) => unpublish(t, target + HDR),
        // An allocation whose block was never marked: never visible.
        _ => {}
    }
    Ok(())
}

pub(super) fn recover(
    t: &mut PmThread,
    lay: &Layout,
    classes: &SizeClasses,
    crashed: bool,
) -> Result<Recovered, AllocError> {
    let bad = |m: String| AllocError::corrupt(NAME, m);
    let mut rep = RecoveryReport { crashed, ..Default::default() };
    let wal = lay.wal();
    let entries = wal.scan(t);
    for &(_, e) in &entries {
        redo(t, lay, e.op, e.target, e.dest).map_err(bad)?;
        rep.redone += 1;
    }
    let slots: Vec<u64> = entries.iter().map(|e| e.0).collect();
    if !slots.is_empty() {
        wal.clear(t, &slots);
    }
    let mut words = Vec::new();
    let mut pieces = Vec::new();
    walk(t, lay, classes, &mut words, |p| pieces.push(p)).map_err(bad)?;
    // Stray huge bodies, freed durably; neighbouring free big blocks, merged.
    for i in 0..lay.nseg {
        let w = t.load_u64(lay.segword(i));
        if w & seg::KIND == seg::BODY && words[i as usize] == seg::FREE {
            t.store_u64(lay.segword(i), seg::FREE);
            t.persist(lay.segword(i), 8);
        }
    }
    let mut out = Recovered::empty(lay);
    out.segs = words;
    out.smalls.resize_with(lay.threads as usize, Small::default);
    for s in out.smalls.iter_mut() {
        s.avail.resize_with(classes.len(), Vec::new);
    }
    let k = lay.threads as u64;
    let mut prev_free: Option<(u64, u64)> = None;
    for p in pieces {
        match p {
            Piece::Page { at, size, owner, allocated } => {
                let (n, hdr) = page_geometry(lay.page, size);
                let page = Page::new(size, n, hdr, |b| allocated[b as usize]);
                rep.live_bytes += (n - page.n_free) * size;
                let s = &mut out.smalls[(owner % k) as usize];
                if page.n_free > 0 {
                    s.avail[classes.class_of(size).expect("a checked size")].push(at);
                }
                s.pages.insert(at, page);
            }
            Piece::SparePage { at, owner } => out.smalls[(owner % k) as usize].spare.push(at),
            Piece::Big { at, size, allocated } => {
                let merge = prev_free.filter(|&(p, ps)| p + ps == at && lay.seg_of(p) == lay.seg_of(at));
                match (allocated, merge) {
                    (true, _) => {
                        rep.live_bytes += size - HDR;
                        out.big.add(at, size, true);
                        prev_free = None;
                    }
                    (false, Some((p, ps))) => {
                        out.big.remove(p);
                        t.store_u64(p, ps + size);
                        t.persist(p, 8);
                        out.big.add(p, ps + size, false);
                        prev_free = Some((p, ps + size));
                    }
                    (false, None) => {
                        out.big.add(at, size, false);
                        prev_free = Some((at, size));
                    }
                }
            }
            Piece::Huge { n, .. } => rep.live_bytes += n * lay.seg - HDR,
        }
    }
    out.report = rep;
    Ok(out)
}

/// Every live block `(offset, usable size)`, by offset.
pub(super) fn live(t: &PmThread, lay: &Layout) -> Result<Vec<(u64, u64)>, String> {
    let classes = SizeClasses::jemalloc(64, 14337);
    let mut v = Vec::new();
    walk(t, lay, &classes, &mut Vec::new(), |p| match p {
        Piece::Page { at, size, allocated, .. } => {
            let (_, hdr) = page_geometry(lay.page, size);
            v.extend(allocated.iter().enumerate().filter(|(_, &a)| a).map(|(b, _)| (at + hdr + b as u64 * size, size)));
        }
        Piece::Big { at, size, allocated: true } => v.push((at + HDR, size - HDR)),
        Piece::Huge { first, n } => v.push((lay.seg_off(first) + HDR, n * lay.seg - HDR)),
        _ => {}
    })?;
    v.sort_unstable();
    Ok(v)
}

/// The metadata check after open: no micro-log entry valid; the segment
/// table, the pages and the big blocks as the DRAM structures hold them.
pub(super) fn check(t: &PmThread, pa: &PAllocator) -> Result<(), String> {
    let lay = &pa.lay;
    if let Some((slot, e)) = lay.wal().scan(t).first() {
        return Err(format!("micro-log entry at {slot:#x} still valid: {e:?}"));
    }
    let mut words = Vec::new();
    let (mut pages, mut bigs) = (Vec::new(), Vec::new());
    walk(t, lay, &pa.classes, &mut words, |p| match p {
        Piece::Page { at, allocated, .. } => pages.push((at, allocated)),
        Piece::Big { at, size, allocated } => bigs.push((at, (size, allocated))),
        _ => {}
    })?;
    if *pa.segs.lock().unwrap() != words {
        return Err("the segment table differs from its DRAM copy".into());
    }
    let mut held = 0;
    for s in pa.smalls.iter() {
        let s = s.untraced();
        for (at, alloc) in &pages {
            if let Some(pg) = s.pages.get(at) {
                held += 1;
                if alloc.iter().enumerate().any(|(b, &a)| a == pg.is_free(b as u64)) {
                    return Err(format!("page at {at:#x}: its entries differ from its free bits"));
                }
            }
        }
    }
    if held != pages.len() {
        return Err(format!("{} pages in use, {held} in the small allocators", pages.len()));
    }
    let big = pa.big.untraced();
    if bigs.len() != big.blocks.len() || bigs.iter().any(|(at, v)| big.blocks.get(at) != Some(v)) {
        return Err("the big blocks' headers differ from the big allocator's view".into());
    }
    Ok(())
}
