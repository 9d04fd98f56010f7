//! Opening an existing NVAlloc heap (NVAlloc §4.4).
//!
//! Every open rebuilds the volatile state from the persistent one:
//!
//! 1. the live extents, from the bookkeeping log (the list named by its `alt`
//!    bit, tombstones applied — so a slow GC interrupted by a crash falls back
//!    to the old list) or from the extent headers of the carved chunks;
//! 2. after a crash only (heap not closed, or an arena flag still *running*
//!    or *recovery*): the WAL is replayed. A small-block entry is redone —
//!    bitmap bit, then `*dest` — which is idempotent. A large-extent entry is
//!    redone if its record made it into the bookkeeping (`*dest` set, or the
//!    extent freed), and dropped otherwise: the record is written after the
//!    WAL entry and before `*dest`, so without a record nothing else changed;
//! 3. a slow GC of the log (the paper does it on every open, to drop tombstones);
//! 4. the VEHs: live extents on the activated list, the gaps between them on
//!    the reclaimed list;
//! 5. the vslabs: each slab's header is checked and its volatile bitmap
//!    copied from the persistent one (no block is in any tcache yet).
//!
//! Under the `gc` model, a crash leaves the slab bitmaps unreliable (they are
//! never flushed while running), so step 5 is preceded by a mark: starting
//! from the heap's root slots and from every live large extent (large
//! allocations are kept by the log, as in NVAlloc-LOG), every aligned word of
//! every reached object that equals the start of a block of a live slab marks
//! that block, which is scanned in turn (conservative, like Makalu: any word
//! that looks like a block offset keeps the block; interior offsets do not).
//! The bitmaps are then rewritten to exactly the marked blocks.
//!
//! Slab morphing (§5.2, §4.4): before the WAL is replayed, every slab whose
//! morph step flag is 1 or 2 (a crash during a morph) is *undone* back to the
//! slab_before: old class and data offset restored, bitmap rebuilt from the
//! live entries of the index table (at flag 1 it was never touched), then
//! flag and index table cleared ([`slab::undo_morph`]; the public NVAlloc code
//! has no undo, this is pmsim's). A complete slab_in (flag 0, index table
//! non-empty) gets its `cnt_slab` and `cnt_block` rebuilt from the table, or
//! becomes a regular slab if no old block is live any more. A WAL entry
//! freeing a live old block clears its index-table entry instead of a bit;
//! one allocating a live old block (the malloc set its bit just before the
//! slab morphed) only redoes `*dest`.
//!
//! Recovery writes only idempotent updates, so a crash during recovery is
//! recovered from by running it again (the arena flags say *recovery*).
//!
//! # Under `wal=artifact`
//!
//! NVAlloc's public code has no recovery; this is the strongest its
//! persistent state allows. Its WAL entries are never cleared, so step 2
//! cannot tell finished operations from interrupted ones. What it can tell
//! is each thread's newest entry (by sequence number), the only one that can
//! belong to an operation in progress, since frees are not logged and a
//! thread does one operation at a time. For that entry `{block, dest}`:
//!
//! * small `malloc_to`, block allocated (bit set, or a live old block of a
//!   slab_in) and `*dest ≠ block`: the malloc got past its bitmap and may not
//!   have published it: `*dest = block` (redone). This is the one inference
//!   the state cannot check: had the malloc finished and the program since
//!   stored something else over `*dest` (without a `malloc_to` on that
//!   thread in between, and without freeing the block), recovery would put
//!   the block back there.
//! * small `malloc_to`, block free and `*dest = block`: either the malloc
//!   stopped before its bitmap with a stale `*dest` (a `free_from` leaves
//!   `*dest` as it is, and the LIFO tcache hands the same block out again),
//!   or it finished and the block was freed since: `*dest = 0` (dropped), so
//!   that no pointer to a free block survives the crash there.
//! * large `malloc_to`, extent not recorded and `*dest = extent`: the crash
//!   hit between publishing and recording: `*dest = 0` (dropped; the extent
//!   is free space).
//!
//! Then every entry of every ring is cleared (also after a clean shutdown),
//! so the sequence numbers of the next run start afresh: the older entries
//! first, the newest last, so a crash inside recovery leaves a thread either
//! its newest entry or none, and recovery run again settles the same entries. What this cannot
//! recover: a large `free_from` interrupted between `*dest = 0` and deleting
//! the record leaks its extent (at most one per thread), and a `free_from`
//! leaves its `*dest` pointing at the freed block until the next crash's
//! recovery or the program overwrites it.

use super::config::{Consistency, NvAllocConfig};
use super::large::{paint_heap, Bookkeeping, LargeAlloc, LargeParams, LiveExtent};
use super::layout::{Layout, CHUNK, SLAB, SLAB_EXTENT};
use super::slab::{self, Morph, SlabGeom, SlabHeader, VSlab, INDEX_LIVE};
use super::thread::op;
use super::NAME;
use crate::error::AllocError;
use crate::mech::bklog::BkLog;
use crate::mech::exthdr::ExtentHeaders;
use crate::mech::mark;
use crate::mech::record::{ExtentKind, Record, PAGE};
use crate::mech::regions::RegionTiler;
use crate::mech::stripe::StripeMap;
use crate::mech::wal::{Wal, WalEntry};
use crate::pm::PmThread;
use std::collections::{BTreeMap, HashSet};

/// What an open found and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RecoveryReport {
    /// The previous run did not shut down cleanly.
    pub crashed: bool,
    /// WAL entries redone.
    pub wal_redone: u64,
    /// WAL entries of large allocations dropped (their record never became
    /// durable); under `wal=artifact`, destinations cleared because they
    /// named a free block or an unrecorded extent.
    pub wal_dropped: u64,
    /// Live user extents and slabs.
    pub extents: u64,
    pub slabs: u64,
    /// Allocated small blocks.
    pub blocks: u64,
    /// Bytes of live allocations (usable sizes).
    pub live_bytes: u64,
    /// NVAlloc-GC: blocks found reachable by the mark, and blocks whose bit
    /// was set but that nothing reaches (freed by the rebuild).
    pub gc_marked: u64,
    pub gc_freed: u64,
    /// Slabs found mid-morph and undone, and complete slab_ins.
    pub morphs_undone: u64,
    pub slabs_in: u64,
}

/// A recovered slab, for its arena.
pub struct RecoveredSlab {
    pub slab: u64,
    pub arena: usize,
    pub vslab: VSlab,
}

/// Everything `open` needs to assemble the allocator.
pub struct Recovered {
    pub large: LargeAlloc,
    pub slabs: Vec<RecoveredSlab>,
    pub report: RecoveryReport,
}

/// The live extents by start: size, kind and log position.
type Extents = BTreeMap<u64, LiveExtent>;

fn corrupt(m: impl Into<String>) -> AllocError {
    AllocError::corrupt(NAME, m.into())
}

/// Runs recovery on the heap `t` maps (see the module documentation).
#[allow(clippy::too_many_arguments)]
pub fn recover(
    t: &mut PmThread,
    layout: Layout,
    cfg: &NvAllocConfig,
    crashed: bool,
    geoms: &[SlabGeom],
    map: StripeMap,
    wal: &Wal,
    params: LargeParams,
    mut tiler: RegionTiler,
) -> Result<Recovered, AllocError> {
    let mut report = RecoveryReport { crashed, ..Default::default() };
    let top = layout.top(t);
    let (mut book, mut extents) = if layout.log_bytes > 0 {
        let (mut log, records) =
            BkLog::recover(t, layout.log_off, layout.log_bytes, cfg.interleaved_log).map_err(corrupt)?;
        log.set_alt_flush(cfg.mutation != super::Mutation::LogAltFlush);
        let mut ex = Extents::new();
        for (r, pos) in records {
            let Record::Extent { kind, addr, size } = r else { unreachable!("recover returns extent records") };
            if ex.insert(addr, LiveExtent { start: addr, size, kind, pos: Some(pos) }).is_some() {
                return Err(corrupt(format!("bookkeeping log records the extent at {addr:#x} twice")));
            }
        }
        (Bookkeeping::Log(log), ex)
    } else {
        let h = ExtentHeaders::new(CHUNK);
        let ex = scan_headers(t, &h, &layout, top)?;
        (Bookkeeping::Headers(h), ex)
    };
    for e in extents.values() {
        if e.start < layout.chunk_base || e.start + e.size > top {
            return Err(corrupt(format!("extent {:#x}+{:#x} lies outside the carved chunks", e.start, e.size)));
        }
        if e.kind == ExtentKind::Slab && (e.size != SLAB_EXTENT || e.start % PAGE != 0) {
            return Err(corrupt(format!(
                "slab record {:#x}+{:#x} is no page-aligned slab extent of {} KiB",
                e.start,
                e.size,
                SLAB_EXTENT >> 10
            )));
        }
    }

    // Register the chunks and slab headers before recovery writes to them.
    let header_bytes = match &book {
        Bookkeeping::Headers(h) => h.area_bytes(),
        Bookkeeping::Log(_) => 0,
    };
    let live: Vec<LiveExtent> = extents.values().copied().collect();
    let slab_headers: Vec<(u64, u64)> = live
        .iter()
        .filter(|e| e.kind == ExtentKind::Slab)
        .filter_map(|e| slab::read_header(t, e.start, geoms).ok().map(|h| (e.start, header_bytes_of(&h))))
        .collect();
    tiler.defer();
    paint_heap(&mut tiler, t, &layout, top, header_bytes, &live, &slab_headers);
    tiler.publish(t);

    for e in extents.values().filter(|e| e.kind == ExtentKind::Slab) {
        let h = slab::read_header(t, e.start, geoms).map_err(corrupt)?;
        if h.flag != 0 {
            slab::undo_morph(t, e.start, geoms, map);
            report.morphs_undone += 1;
        }
    }

    let clear_first = cfg.mutation == super::Mutation::WalClearFirst;
    if wal.is_artifact() {
        settle_artifact(t, &layout, wal, &extents, geoms, map, &mut report, crashed, clear_first)?;
    } else if crashed {
        replay_wal(t, &layout, wal, &mut book, &mut extents, geoms, map, &mut report, clear_first)?;
    }

    if let Bookkeeping::Log(log) = &mut book {
        match log.slow_gc(t) {
            Ok(moved) => {
                for (r, pos) in moved {
                    let Record::Extent { addr, .. } = r else { continue };
                    extents.get_mut(&addr).expect("live record of a live extent").pos = Some(pos);
                }
            }
            Err(_) => {
                log.fast_gc(t);
            }
        }
    }

    if crashed && cfg.consistency == Consistency::Gc {
        mark_from_roots(t, &extents, geoms, map, &mut report)?;
    }

    let mut slabs = Vec::new();
    let mut slab_headers = Vec::new();
    for e in extents.values() {
        match e.kind {
            ExtentKind::Normal => {
                report.extents += 1;
                report.live_bytes += e.size;
            }
            ExtentKind::Slab => {
                let mut h = slab::read_header(t, e.start, geoms).map_err(corrupt)?;
                let class = h.size_class as usize;
                let mut v = VSlab::new(class, h.nblocks);
                slab::bitmap(e.start, map).for_each_set(t, h.nblocks, |b| v.mark(b));
                report.slabs += 1;
                report.blocks += v.used as u64;
                report.live_bytes += v.used as u64 * geoms[class].size as u64;
                if h.index_len > 0 {
                    let table = slab::read_table(t, e.start, &h);
                    let oc = h.old_size_class as usize;
                    let m = Morph::build(oc, geoms[oc], &geoms[class], h.index_off, &table, &mut v);
                    if m.cnt_slab == 0 {
                        slab::finish_morph(t, e.start);
                        h = slab::read_header(t, e.start, geoms).map_err(corrupt)?;
                        v = VSlab::new(class, h.nblocks);
                        slab::bitmap(e.start, map).for_each_set(t, h.nblocks, |b| v.mark(b));
                    } else {
                        report.slabs_in += 1;
                        report.blocks += m.cnt_slab as u64;
                        report.live_bytes += m.cnt_slab as u64 * geoms[oc].size as u64;
                        v.morph = Some(Box::new(m));
                    }
                }
                slab_headers.push((e.start, h.data_offset as u64));
                slabs.push(RecoveredSlab { slab: e.start, arena: h.arena as usize, vslab: v });
            }
        }
    }
    let live: Vec<LiveExtent> = extents.into_values().collect();
    let large = LargeAlloc::new(t, layout, top, book, &live, &slab_headers, params, tiler).map_err(corrupt)?;
    for s in &slabs {
        if let Some(m) = &s.vslab.morph {
            large.paint_slab_part(t, s.slab + m.index_off as u64, s.slab + SLAB, true);
        }
    }
    Ok(Recovered { large, slabs, report })
}

/// The slab-header bytes to register for a slab with header `h` (mid-morph:
/// the larger of the two headers).
fn header_bytes_of(h: &SlabHeader) -> u64 {
    if h.flag != 0 {
        h.data_offset.max(h.old_data_offset) as u64
    } else {
        h.data_offset as u64
    }
}

/// The index-table entry of the old block at `off` of a slab_in: its
/// offset, its old block index and whether it is still live.
fn old_entry(t: &PmThread, slab: u64, h: &SlabHeader, geoms: &[SlabGeom], off: u64) -> Option<(u64, u16, bool)> {
    if h.index_len == 0 || h.flag != 0 {
        return None;
    }
    let og = geoms[h.old_size_class as usize];
    let ob = og.block_index(slab, off)? as u16;
    let table = slab::read_table(t, slab, h);
    let i = table.iter().position(|&e| e & !INDEX_LIVE == ob)?;
    Some((slab + h.index_off as u64 + 2 * i as u64, ob, table[i] & INDEX_LIVE != 0))
}

/// The extents recorded in the header areas of the chunks below `top`.
fn scan_headers(t: &PmThread, h: &ExtentHeaders, layout: &Layout, top: u64) -> Result<Extents, AllocError> {
    let mut ex = Extents::new();
    let mut c = layout.chunk_base;
    while c < top {
        let mut next = c + CHUNK;
        for r in h.scan(t, c).map_err(corrupt)? {
            let Record::Extent { kind, addr, size } = r else { unreachable!("scan returns extent records") };
            ex.insert(addr, LiveExtent { start: addr, size, kind, pos: None });
            // A huge extent covers the next chunks' header areas: skip them.
            next = next.max(layout.chunk_base + (addr + size - layout.chunk_base).next_multiple_of(CHUNK));
        }
        c = next;
    }
    Ok(ex)
}

/// Redoes (or drops) every valid WAL entry, then clears them (`clear_first`:
/// the [`Mutation::WalClearFirst`](super::Mutation::WalClearFirst) order).
#[allow(clippy::too_many_arguments)]
fn replay_wal(
    t: &mut PmThread,
    layout: &Layout,
    wal: &Wal,
    book: &mut Bookkeeping,
    extents: &mut Extents,
    geoms: &[SlabGeom],
    map: StripeMap,
    report: &mut RecoveryReport,
    clear_first: bool,
) -> Result<(), AllocError> {
    let entries = wal.scan(t);
    let slots: Vec<u64> = entries.iter().map(|&(s, _)| s).collect();
    if clear_first {
        wal.clear(t, &slots);
    }
    for &(_, e) in &entries {
        let bad = |why: &str| corrupt(format!("WAL entry {e:?}: {why}"));
        match e.op {
            op::MALLOC_SMALL | op::FREE_SMALL => {
                let Some(slab) = slab_holding(extents, e.target) else {
                    return Err(bad("its block is in no live slab"));
                };
                let h = slab::read_header(t, slab, geoms).map_err(corrupt)?;
                let new_block = geoms[h.size_class as usize].block_index(slab, e.target);
                let old = old_entry(t, slab, &h, geoms, e.target);
                if e.op == op::MALLOC_SMALL {
                    // A malloc whose bit was set before its slab morphed (a
                    // malloc's WAL window may straddle a morph; a free's may
                    // not): the index table has the block, only *dest may be
                    // missing.
                    if let Some((_, _, live)) = old.filter(|o| o.2 || new_block.is_none()) {
                        if live {
                            t.store_u64(e.dest, e.target);
                            t.persist(e.dest, 8);
                            report.wal_redone += 1;
                        } else {
                            report.wal_dropped += 1;
                        }
                        continue;
                    }
                }
                if e.op == op::FREE_SMALL {
                    // A live old block of a slab_in (no new block at the same
                    // offset is handed out while it is live); a dead one whose
                    // offset is no new block: its free completed but for *dest.
                    if let Some((entry, ob, live)) = old.filter(|o| o.2 || new_block.is_none()) {
                        if live {
                            t.store::<u16>(entry, ob);
                        }
                        t.persist(entry, 2);
                        if t.load_u64(e.dest) == e.target {
                            t.store_u64(e.dest, 0);
                        }
                        t.persist(e.dest, 8);
                        report.wal_redone += 1;
                        continue;
                    }
                }
                let b = new_block.ok_or_else(|| bad("not a block"))?;
                let bitmap = slab::bitmap(slab, map);
                if e.op == op::MALLOC_SMALL {
                    bitmap.set(t, b);
                    bitmap.persist(t, b);
                    t.store_u64(e.dest, e.target);
                } else {
                    bitmap.clear(t, b);
                    bitmap.persist(t, b);
                    if t.load_u64(e.dest) == e.target {
                        t.store_u64(e.dest, 0);
                    }
                }
                t.persist(e.dest, 8);
                report.wal_redone += 1;
            }
            op::MALLOC_LARGE | op::FREE_LARGE => {
                let live = extents.get(&e.target).is_some_and(|x| x.kind == ExtentKind::Normal);
                if !live {
                    // Malloc: the record never became durable, so neither did
                    // *dest. Free: the tombstone is durable; only *dest may remain.
                    if e.op == op::FREE_LARGE && t.load_u64(e.dest) == e.target {
                        t.store_u64(e.dest, 0);
                        t.persist(e.dest, 8);
                        report.wal_redone += 1;
                    } else {
                        report.wal_dropped += 1;
                    }
                    continue;
                }
                if e.op == op::MALLOC_LARGE {
                    t.store_u64(e.dest, e.target);
                } else {
                    let x = extents.remove(&e.target).expect("checked");
                    match book {
                        Bookkeeping::Log(log) => {
                            if !log.has_room() {
                                log.fast_gc(t);
                            }
                            log.delete(t, x.pos.expect("logged")).map_err(|_| bad("bookkeeping log full"))?;
                        }
                        Bookkeeping::Headers(h) => {
                            h.zero_covered(t, layout.chunk_base, x.start, x.size);
                            let chunk = layout.chunk_base + (x.start - layout.chunk_base) / CHUNK * CHUNK;
                            h.clear(t, chunk, x.start);
                        }
                    }
                    if t.load_u64(e.dest) == e.target {
                        t.store_u64(e.dest, 0);
                    }
                }
                t.persist(e.dest, 8);
                report.wal_redone += 1;
            }
            _ => return Err(bad("unknown op")),
        }
    }
    if !clear_first {
        wal.clear(t, &slots);
    }
    Ok(())
}

/// The start of the live slab whose 64 KiB hold `off` (not its extent's
/// padding page).
fn slab_holding(extents: &Extents, off: u64) -> Option<u64> {
    let (&start, e) = extents.range(..=off).next_back()?;
    (e.kind == ExtentKind::Slab && off < start + SLAB).then_some(start)
}

/// Whether the small block at `off` is allocated: its bit, or, in a
/// slab_in, its index-table entry; `None` if `off` is no block of a live slab.
fn small_block_live(t: &PmThread, extents: &Extents, geoms: &[SlabGeom], map: StripeMap, off: u64) -> Option<bool> {
    let slab = slab_holding(extents, off)?;
    let h = slab::read_header(t, slab, geoms).ok()?;
    let new_block = geoms[h.size_class as usize].block_index(slab, off);
    if let Some((_, _, live)) = old_entry(t, slab, &h, geoms, off).filter(|o| o.2 || new_block.is_none()) {
        return Some(live);
    }
    Some(slab::bitmap(slab, map).test(t, new_block?))
}

/// Under `wal=artifact`: after a crash, settles the newest entry of each
/// thread (see the module documentation); then clears every ring, older
/// entries first and the newest last (each step made durable before the
/// next), so that a crash inside recovery leaves each thread's newest entry
/// the newest, or no entry of that thread at all: running recovery again
/// settles the same entries and settling is idempotent. `clear_first` (the
/// [`Mutation::WalClearFirst`](super::Mutation::WalClearFirst) order)
/// clears before settling.
#[allow(clippy::too_many_arguments)]
fn settle_artifact(
    t: &mut PmThread,
    layout: &Layout,
    wal: &Wal,
    extents: &Extents,
    geoms: &[SlabGeom],
    map: StripeMap,
    report: &mut RecoveryReport,
    crashed: bool,
    clear_first: bool,
) -> Result<(), AllocError> {
    let newest = wal.newest(t);
    let clear = |t: &mut PmThread| {
        let last: HashSet<u64> = newest.iter().map(|&(s, _)| s).collect();
        let older: Vec<u64> = wal.scan(t).into_iter().map(|(s, _)| s).filter(|s| !last.contains(s)).collect();
        wal.clear(t, &older);
        wal.clear(t, &newest.iter().map(|&(s, _)| s).collect::<Vec<_>>());
    };
    if clear_first {
        clear(t);
    }
    if crashed {
        settle_newest(t, layout, &newest, extents, geoms, map, report)?;
    }
    if !clear_first {
        clear(t);
    }
    Ok(())
}

/// Settles each thread's newest artifact entry (see the module documentation).
fn settle_newest(
    t: &mut PmThread,
    layout: &Layout,
    newest: &[(u64, WalEntry)],
    extents: &Extents,
    geoms: &[SlabGeom],
    map: StripeMap,
    report: &mut RecoveryReport,
) -> Result<(), AllocError> {
    for &(_, e) in newest {
        let bad = |why: &str| corrupt(format!("WAL entry {e:?}: {why}"));
        if e.dest & 7 != 0 || e.dest.checked_add(8).is_none_or(|end| end > layout.heap_size) {
            return Err(bad("its destination is no aligned word of the heap"));
        }
        let (live, op) = match e.op {
            op::MALLOC_SMALL => (small_block_live(t, extents, geoms, map, e.target).unwrap_or(false), e.op),
            op::MALLOC_LARGE => (extents.get(&e.target).is_some_and(|x| x.kind == ExtentKind::Normal), e.op),
            _ => return Err(bad("not an operation the artifact protocol logs")),
        };
        let now = t.load_u64(e.dest);
        if live && now != e.target && op == op::MALLOC_SMALL {
            t.store_u64(e.dest, e.target);
            t.persist(e.dest, 8);
            report.wal_redone += 1;
        } else if !live && now == e.target {
            t.store_u64(e.dest, 0);
            t.persist(e.dest, 8);
            report.wal_dropped += 1;
        }
    }
    Ok(())
}

/// Live old blocks of a slab_in, by old block index: (index-table entry,
/// reached), `None` for an old block not live.
type OldBlocks = Vec<Option<(u64, bool)>>;

/// Blocks of a slab, one bit each.
type SlabBits = [u64; slab::MAX_BLOCKS as usize / 64];

/// A slab as the post-crash mark sees it.
struct MarkedSlab {
    start: u64,
    class: usize,
    /// Blocks reached.
    marks: SlabBits,
    /// New blocks a slab_in's live old blocks hold back (never live).
    pinned: SlabBits,
    /// A slab_in's old geometry and its live old blocks.
    old: Option<(SlabGeom, OldBlocks)>,
}

/// NVAlloc-GC's post-crash mark (see the module documentation): rewrites
/// every slab bitmap to the blocks reachable from the roots.
///
/// Every scanned word is asked whether it starts a block: the slab it would
/// lie in is found by indexing an array by its 64 KiB slab number (slabs
/// start on slab boundaries), as Makalu finds a block's mark bit through
/// arrays indexed by block, not by hashing the word.
fn mark_from_roots(
    t: &mut PmThread,
    extents: &Extents,
    geoms: &[SlabGeom],
    map: StripeMap,
    report: &mut RecoveryReport,
) -> Result<(), AllocError> {
    // Every block and extent lies in [lo, hi): most words scanned (zeros,
    // data) are no offset there, and are dismissed before any lookup.
    let lo = extents.values().map(|e| e.start).min().unwrap_or(0) & !(PAGE - 1);
    let hi = extents.values().map(|e| e.start + e.size).max().unwrap_or(0);
    let mut slabs: Vec<MarkedSlab> = Vec::new();
    // Page (from `lo`) → the index in `slabs` of the slab on it, or NONE.
    const NONE: u32 = u32::MAX;
    let mut slab_at = vec![NONE; (hi.saturating_sub(lo)).div_ceil(PAGE) as usize];
    for e in extents.values().filter(|e| e.kind == ExtentKind::Slab) {
        let h = slab::read_header(t, e.start, geoms).map_err(corrupt)?;
        let class = h.size_class as usize;
        let mut pinned = [0u64; slab::MAX_BLOCKS as usize / 64];
        let mut old = None;
        if h.index_len > 0 {
            // A slab_in: its live old blocks are marked like any block (a
            // free may have cleared *dest and died before their entry);
            // new blocks they hold back are never marked (pre-set here,
            // cleared again below).
            let oc = h.old_size_class as usize;
            let mut v = VSlab::new(class, h.nblocks);
            let table = slab::read_table(t, e.start, &h);
            let m = Morph::build(oc, geoms[oc], &geoms[class], h.index_off, &table, &mut v);
            for b in (0..h.nblocks).filter(|&b| m.pinned(b)) {
                pinned[(b / 64) as usize] |= 1 << (b % 64);
            }
            let mut live: OldBlocks = Vec::new();
            for (i, &x) in table.iter().enumerate().filter(|(_, &x)| x & INDEX_LIVE != 0) {
                let ob = (x & !INDEX_LIVE) as usize;
                if live.len() <= ob {
                    live.resize(ob + 1, None);
                }
                live[ob] = Some((e.start + h.index_off as u64 + 2 * i as u64, false));
            }
            old = Some((geoms[oc], live));
        }
        let first = ((e.start - lo) / PAGE) as usize;
        slab_at[first..first + (SLAB / PAGE) as usize].fill(slabs.len() as u32);
        slabs.push(MarkedSlab { start: e.start, class, marks: pinned, pinned, old });
    }
    let mut scanned: HashSet<u64> = HashSet::new();
    // A word that is the start of a live block or extent not reached yet.
    let reach = |w: u64| -> Option<u64> {
        if w & 63 != 0 || w < lo || w >= hi {
            return None;
        }
        let i = slab_at[((w - lo) / PAGE) as usize];
        if i != NONE {
            let s = &mut slabs[i as usize];
            if let Some((og, live)) = &mut s.old {
                // A live old block's start is no start of a new block in use.
                if let Some(x) = og.block_index(s.start, w).and_then(|ob| live.get_mut(ob as usize)?.as_mut()) {
                    if x.1 {
                        return None;
                    }
                    x.1 = true;
                    return Some(og.size as u64);
                }
            }
            let g = geoms[s.class];
            let b = g.block_index(s.start, w)?;
            let (i, m) = ((b / 64) as usize, 1u64 << (b % 64));
            if s.marks[i] & m != 0 {
                return None;
            }
            s.marks[i] |= m;
            Some(g.size as u64)
        } else if extents.get(&w).is_some_and(|e| e.kind == ExtentKind::Normal) && scanned.insert(w) {
            Some(extents[&w].size)
        } else {
            None
        }
    };
    // Large extents are logged: live whether reached or not, so they are roots too.
    let roots = mark::root_words(t)
        .into_iter()
        .chain(extents.values().filter(|e| e.kind == ExtentKind::Normal).map(|e| e.start));
    mark::mark_from(t, roots, reach);
    for (_, live) in slabs.iter().filter_map(|s| s.old.as_ref()) {
        for (ob, &(entry, reached)) in live.iter().enumerate().filter_map(|(ob, x)| Some((ob, x.as_ref()?))) {
            report.gc_marked += reached as u64;
            if !reached {
                report.gc_freed += 1;
                t.store::<u16>(entry, ob as u16);
                t.flush(entry);
            }
        }
    }
    for s in &slabs {
        let g = geoms[s.class];
        let bm = slab::bitmap(s.start, map);
        let mut words = vec![0u64; (bm.area_bytes(g.nblocks) / 8) as usize];
        for b in 0..g.nblocks {
            let was = bm.test(t, b);
            let pin = s.pinned[(b / 64) as usize] >> (b % 64) & 1 == 1;
            let live = !pin && s.marks[(b / 64) as usize] >> (b % 64) & 1 == 1;
            report.gc_marked += live as u64;
            report.gc_freed += (was && !live) as u64;
            if live {
                let bit = map.bit_of(b);
                words[(bit / 64) as usize] |= 1 << (bit % 64);
            }
        }
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        t.store_bytes(bm.base(), &bytes);
        t.flush_range(bm.base(), bytes.len() as u64);
    }
    t.fence();
    Ok(())
}
