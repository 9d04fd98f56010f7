//! The large allocator (NVAlloc §4.3): extents of 16 KiB – 2 MiB and slabs,
//! cut from 4 MiB chunks, described by virtual extent headers (VEHs) in DRAM.
//!
//! * Every extent of the carved chunks has a VEH in the *address index* (a
//!   `BTreeMap` by start address: the paper's R-tree), which finds a freed
//!   extent's VEH and its neighbours for coalescing.
//! * A VEH is on one of three lists: *activated* (allocated), *reclaimed*
//!   (recently freed) or *retained* (freed long ago). Allocation takes the
//!   best fit from the reclaimed list, then from the retained list, else
//!   carves a new chunk by advancing the persistent growth pointer.
//! * **Decay** ([`super::decay`]): jemalloc's smootherstep decay, which the
//!   paper uses, with time counted in large-allocator operations (window
//!   `decay_ops`) so traced runs stay reproducible: freed bytes stay on the
//!   reclaimed list in a share that falls along the smootherstep curve with
//!   their age, and the oldest reclaimed extents beyond that share move to
//!   the retained list, so recently freed (cache-warm) memory is reused
//!   first. Retained extents stay in the heap file: the heap is one
//!   preallocated file, with no OS allocator underneath to hand them to.
//! * Free extents never span chunk boundaries. A request above 2 MiB gets a
//!   run of fresh chunks of its own (the paper `mmap`s it); when freed, it
//!   falls apart into per-chunk free extents.
//!
//! What the heap keeps for recovery is one 8-byte record per allocated
//! extent ([`Record`]): appended to the bookkeeping log (a tombstone on free),
//! or written in place into the extent-header area at the start of the
//! extent's chunk when the log is switched off (the baseline).

use super::config::LogGc;
use super::decay::Decay;
use super::layout::{Layout, CHUNK, SLAB_EXTENT};
use crate::mech::bklog::{BkLog, LogPos, LogStats, CHUNK_BYTES, CHUNK_RECORDS};
use crate::mech::exthdr::ExtentHeaders;
use crate::mech::record::{ExtentKind, Record, PAGE};
use crate::mech::regions::{RegionKind, RegionTiler};
use crate::pm::PmThread;
use pmsim_traces::{Category, OpKind};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Mutex;

/// The largest extent served from the free lists; larger ones get their own chunks.
pub const LARGE_MAX: u64 = 2 << 20;

/// The kinds of regions NVAlloc registers, by index into [`REGION_KINDS`].
pub mod region {
    pub const SUPERBLOCK: usize = 0;
    pub const WAL: usize = 1;
    pub const LOG: usize = 2;
    pub const EXTENT_HEADERS: usize = 3;
    pub const USER_DATA: usize = 4;
    pub const SLAB_HEADER: usize = 5;
}

/// Names and categories of NVAlloc's regions (what Fig. 11's breakdown sums).
pub const REGION_KINDS: [RegionKind; 6] = [
    RegionKind { name: "nvalloc superblock", category: Category::Meta },
    RegionKind { name: "WAL", category: Category::Wal },
    RegionKind { name: "bookkeeping log", category: Category::Log },
    RegionKind { name: "extent headers", category: Category::Meta },
    RegionKind { name: "user data", category: Category::Data },
    RegionKind { name: "slab header", category: Category::Meta },
];

/// Where an extent's record is kept: the bookkeeping log, or in-place headers.
#[derive(Debug)]
pub enum Bookkeeping {
    Log(BkLog),
    Headers(ExtentHeaders),
}

/// Which free list a free extent is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FreeList {
    Reclaimed,
    Retained,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum VehState {
    /// Allocated; `pos` is its record's log position (log bookkeeping only).
    Active {
        kind: ExtentKind,
        pos: Option<LogPos>,
    },
    /// Free since large-allocator tick `since`.
    Reclaimed {
        since: u64,
    },
    Retained,
    /// Record deleted, space not reusable yet: the freeing thread's WAL entry
    /// may still be valid (see [`LargeAlloc::unrecord`]).
    Freeing,
}

impl VehState {
    fn is_free(self) -> bool {
        matches!(self, VehState::Reclaimed { .. } | VehState::Retained)
    }
}

/// A virtual extent header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Veh {
    size: u64,
    state: VehState,
}

/// A freed extent whose space is not reusable yet (see [`LargeAlloc::unrecord`]).
#[must_use = "the space of an unrecorded extent is lost until it is reclaimed"]
#[derive(Debug)]
pub struct Unrecorded {
    start: u64,
    size: u64,
}

impl Unrecorded {
    pub fn size(&self) -> u64 {
        self.size
    }
}

/// An allocated extent found by recovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveExtent {
    pub start: u64,
    pub size: u64,
    pub kind: ExtentKind,
    pub pos: Option<LogPos>,
}

/// Counters of the large allocator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LargeStats {
    pub active_extents: u64,
    pub active_bytes: u64,
    pub slabs: u64,
    pub reclaimed_bytes: u64,
    pub retained_bytes: u64,
    pub chunks_carved: u64,
    pub log: Option<LogStats>,
}

struct Inner {
    layout: Layout,
    /// Growth pointer (volatile copy of the superblock's).
    top: u64,
    index: BTreeMap<u64, Veh>,
    reclaimed: BTreeSet<(u64, u64)>,
    retained: BTreeSet<(u64, u64)>,
    /// Reclaimed extents in the order they were freed: `(tick, start)`
    /// (entries of extents since reused or coalesced are skipped when met).
    decay: VecDeque<(u64, u64)>,
    decay_curve: Decay,
    /// Bytes on the reclaimed list.
    reclaimed_bytes: u64,
    tick: u64,
    book: Bookkeeping,
    tiler: RegionTiler,
    stats: LargeStats,
    tombstones_since_gc: u32,
    gc_interval: u32,
    gc: LogGc,
    /// Under [`LogGc::Paper`], slow GC when the log's active chunks exceed
    /// this many bytes.
    slow_gc_bytes: u64,
}

/// The large allocator: one lock around the VEHs and the bookkeeping.
///
/// Not a traced lock ([`crate::mech::lock`]): NVAlloc's code manages
/// extents per arena (jemalloc's, 4 × CPUs arenas), so its threads do not
/// wait for each other here; pmsim keeps one extent allocator for the heap,
/// a simplification that the contention replay must not count as waits.
pub struct LargeAlloc {
    inner: Mutex<Inner>,
}

/// Parameters of the large allocator taken from the configuration.
#[derive(Clone, Copy, Debug)]
pub struct LargeParams {
    pub gc_interval: u32,
    pub gc: LogGc,
    pub slow_gc_bytes: u64,
    pub decay_ops: u64,
}

/// A region tiler with the areas that never move registered (superblock,
/// WAL, log): made first, so that every persistent write is in a region.
pub fn static_regions(t: &mut PmThread, layout: &Layout) -> RegionTiler {
    let mut tiler = RegionTiler::new(&REGION_KINDS);
    tiler.paint(t, super::layout::SUPERBLOCK, layout.wal_off, region::SUPERBLOCK);
    tiler.paint(t, layout.wal_off, layout.wal_off + layout.wal_bytes, region::WAL);
    if layout.log_bytes > 0 {
        tiler.paint(t, layout.log_off, layout.log_off + layout.log_bytes, region::LOG);
    }
    tiler.publish(t);
    tiler
}

/// Paints the chunk at `c`: its extent-header area (if any) and user data.
fn paint_chunk(tiler: &mut RegionTiler, t: &mut PmThread, c: u64, header_bytes: u64) {
    if header_bytes > 0 {
        tiler.paint(t, c, c + header_bytes, region::EXTENT_HEADERS);
    }
    tiler.paint(t, c + header_bytes, c + CHUNK, region::USER_DATA);
}

/// Paints the carved chunks below `top`, the extents that span chunks (whose
/// trailing header areas hold user data) and the slab headers `(slab, bytes)`.
pub fn paint_heap(
    tiler: &mut RegionTiler,
    t: &mut PmThread,
    layout: &Layout,
    top: u64,
    header_bytes: u64,
    live: &[LiveExtent],
    slab_headers: &[(u64, u64)],
) {
    let mut c = layout.chunk_base;
    while c < top {
        paint_chunk(tiler, t, c, header_bytes);
        c += CHUNK;
    }
    for e in live {
        let chunk_end = layout.chunk_base + (e.start - layout.chunk_base) / CHUNK * CHUNK + CHUNK;
        if e.start + e.size > chunk_end {
            tiler.paint(t, e.start, e.start + e.size, region::USER_DATA);
        }
    }
    for &(slab, header) in slab_headers {
        tiler.paint(t, slab, slab + header, region::SLAB_HEADER);
    }
}

impl LargeAlloc {
    /// The large allocator of a heap whose chunks end at `top` and whose live
    /// extents are `live` (none for a new heap). `tiler` comes from
    /// [`static_regions`]; the chunks and slab headers are painted into it.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        t: &mut PmThread,
        layout: Layout,
        top: u64,
        book: Bookkeeping,
        live: &[LiveExtent],
        slab_headers: &[(u64, u64)],
        p: LargeParams,
        tiler: RegionTiler,
    ) -> Result<LargeAlloc, String> {
        let mut inner = Inner {
            layout,
            top,
            index: BTreeMap::new(),
            reclaimed: BTreeSet::new(),
            retained: BTreeSet::new(),
            decay: VecDeque::new(),
            decay_curve: Decay::new(p.decay_ops),
            reclaimed_bytes: 0,
            tick: 0,
            book,
            tiler,
            stats: LargeStats::default(),
            tombstones_since_gc: 0,
            gc_interval: p.gc_interval,
            gc: p.gc,
            slow_gc_bytes: p.slow_gc_bytes,
        };
        inner.rebuild(live)?;
        let hb = inner.header_bytes();
        paint_heap(&mut inner.tiler, t, &layout, top, hb, live, slab_headers);
        Ok(LargeAlloc { inner: Mutex::new(inner) })
    }

    /// Allocates an extent of `size` bytes (a multiple of 4 KiB) for the user.
    /// `before_record` runs once the extent is chosen and before its record is
    /// written (the caller's WAL entry goes there). `None`: the heap is full.
    pub fn alloc(&self, t: &mut PmThread, size: u64, before_record: impl FnOnce(&mut PmThread, u64)) -> Option<u64> {
        debug_assert!(size & (PAGE - 1) == 0 && size > 0);
        let mut g = self.inner.lock().unwrap();
        g.tick();
        if !g.ensure_log_room(t) {
            return None;
        }
        let start = if size > LARGE_MAX { g.alloc_huge(t, size)? } else { g.alloc_fit(t, size, PAGE)? };
        before_record(t, start);
        g.commit(t, start, size, ExtentKind::Normal);
        Some(start)
    }

    /// Allocates a slab: an extent of [`SLAB_EXTENT`], page aligned, whose
    /// first 64 KiB are the slab. `init` writes its header durably (before
    /// the slab is recorded) and returns the header's length, which is
    /// registered as a slab-header region.
    pub fn alloc_slab(&self, t: &mut PmThread, init: impl FnOnce(&mut PmThread, u64) -> u64) -> Option<u64> {
        let mut g = self.inner.lock().unwrap();
        g.tick();
        if !g.ensure_log_room(t) {
            return None;
        }
        let start = g.alloc_fit(t, SLAB_EXTENT, PAGE)?;
        let header = init(t, start);
        g.commit(t, start, SLAB_EXTENT, ExtentKind::Slab);
        g.tiler.paint(t, start, start + header, region::SLAB_HEADER);
        Some(start)
    }

    /// Frees the user extent at `start`, first step: deletes its record
    /// (`before_record` runs just before, with the size: the caller's WAL
    /// entry goes there), but keeps its space out of the free lists until
    /// [`LargeAlloc::reclaim`].
    ///
    /// Why two steps: recovery redoes a valid `free` WAL entry when the
    /// extent is still recorded. If another thread could reallocate (and
    /// record) the space before the freeing thread's WAL entry is durably
    /// cleared, recovery would free that thread's new allocation. So the
    /// caller clears its entry, fences, and only then reclaims.
    ///
    /// # Panics
    /// If no user extent starts at `start`.
    pub fn unrecord(&self, t: &mut PmThread, start: u64, before_record: impl FnOnce(&mut PmThread, u64)) -> Unrecorded {
        let mut g = self.inner.lock().unwrap();
        g.tick();
        let size = match g.index.get(&start) {
            Some(Veh { size, state: VehState::Active { kind: ExtentKind::Normal, .. } }) => *size,
            _ => panic!("free of heap offset {start:#x}: not a live allocation"),
        };
        before_record(t, size);
        g.unrecord(t, start);
        Unrecorded { start, size }
    }

    /// Frees the user extent at `start` in one step (no WAL entry to wait for).
    pub fn free(&self, t: &mut PmThread, start: u64) -> u64 {
        let u = self.unrecord(t, start, |_, _| {});
        let size = u.size;
        self.reclaim(t, u);
        size
    }

    /// Second step of a free: the space becomes reusable.
    pub fn reclaim(&self, t: &mut PmThread, u: Unrecorded) {
        let mut g = self.inner.lock().unwrap();
        g.reclaim(t, u.start);
    }

    /// Frees the (empty) slab at `slab`.
    pub fn free_slab(&self, t: &mut PmThread, slab: u64) {
        let mut g = self.inner.lock().unwrap();
        g.tick();
        assert!(
            matches!(g.index.get(&slab), Some(Veh { state: VehState::Active { kind: ExtentKind::Slab, .. }, .. })),
            "free of slab {slab:#x}, which is not a live slab"
        );
        t.marker(slab, super::slab::SLAB_FREED_MARKER);
        g.unrecord(t, slab);
        g.reclaim(t, slab);
    }

    /// Paints `[start, end)`, inside a live slab, as slab-header metadata
    /// (`meta`) or back as user data: the index table of a slab_in (§5.2),
    /// which lives at the slab's tail, outside the header at its start.
    pub fn paint_slab_part(&self, t: &mut PmThread, start: u64, end: u64, meta: bool) {
        if start < end {
            let kind = if meta { region::SLAB_HEADER } else { region::USER_DATA };
            self.inner.lock().unwrap().tiler.paint(t, start, end, kind);
        }
    }

    /// The size of the user extent at `start`, if one is allocated there.
    pub fn size_of(&self, start: u64) -> Option<u64> {
        let g = self.inner.lock().unwrap();
        match g.index.get(&start) {
            Some(Veh { size, state: VehState::Active { kind: ExtentKind::Normal, .. } }) => Some(*size),
            _ => None,
        }
    }

    /// Every allocated user extent (not slabs), by address.
    pub fn user_extents(&self) -> Vec<(u64, u64)> {
        let g = self.inner.lock().unwrap();
        g.index
            .iter()
            .filter(|(_, v)| matches!(v.state, VehState::Active { kind: ExtentKind::Normal, .. }))
            .map(|(&s, v)| (s, v.size))
            .collect()
    }

    /// The growth pointer: the heap is used up to here.
    pub fn top(&self) -> u64 {
        self.inner.lock().unwrap().top
    }

    pub fn stats(&self) -> LargeStats {
        let g = self.inner.lock().unwrap();
        let mut s = g.stats;
        s.reclaimed_bytes = g.reclaimed.iter().map(|&(size, _)| size).sum();
        s.retained_bytes = g.retained.iter().map(|&(size, _)| size).sum();
        if let Bookkeeping::Log(log) = &g.book {
            s.log = Some(log.stats());
        }
        s
    }

    /// Writes the bookkeeping log compactly (a slow GC), e.g. before a clean
    /// shutdown; no-op with extent headers.
    pub fn compact_log(&self, t: &mut PmThread) {
        let mut g = self.inner.lock().unwrap();
        t.op_begin(OpKind::LogGc, 0);
        g.slow_gc(t);
        t.op_end(OpKind::LogGc, 0);
    }
}

impl Inner {
    fn chunk_of(&self, off: u64) -> u64 {
        self.layout.chunk_base + (off - self.layout.chunk_base) / CHUNK * CHUNK
    }

    /// Bytes of the extent-header area at the start of each chunk (0 with the log).
    fn header_bytes(&self) -> u64 {
        match &self.book {
            Bookkeeping::Headers(h) => h.area_bytes(),
            Bookkeeping::Log(_) => 0,
        }
    }

    /// Where a chunk's data starts: after its header area, if it has one.
    fn data_start(&self, chunk: u64) -> u64 {
        chunk + self.header_bytes()
    }

    fn tick(&mut self) {
        self.tick += 1;
        if self.tick & 63 == 0 {
            self.run_decay();
        }
    }

    fn list(&mut self, which: FreeList) -> &mut BTreeSet<(u64, u64)> {
        match which {
            FreeList::Reclaimed => &mut self.reclaimed,
            FreeList::Retained => &mut self.retained,
        }
    }

    fn paint_chunk(&mut self, t: &mut PmThread, c: u64) {
        let hb = self.header_bytes();
        paint_chunk(&mut self.tiler, t, c, hb);
    }

    /// Builds the VEHs of a restarted heap: the live extents, and the gaps
    /// between them as reclaimed free extents.
    fn rebuild(&mut self, live: &[LiveExtent]) -> Result<(), String> {
        let mut sorted = live.to_vec();
        sorted.sort_by_key(|e| e.start);
        let mut i = 0;
        let mut c = self.layout.chunk_base;
        while c < self.top {
            let mut cursor = self.data_start(c);
            let mut end = c + CHUNK;
            while i < sorted.len() && sorted[i].start < end {
                let e = sorted[i];
                let e_end = e.start + e.size;
                if e.start < cursor || e_end > self.top || (e_end > end && e.size <= LARGE_MAX) {
                    return Err(format!("extent {:#x}+{:#x} overlaps another or leaves its chunk", e.start, e.size));
                }
                if e.start > cursor {
                    self.insert_free(cursor, e.start - cursor, FreeList::Reclaimed);
                }
                self.index.insert(e.start, Veh { size: e.size, state: VehState::Active { kind: e.kind, pos: e.pos } });
                self.stats.active_extents += 1;
                self.stats.active_bytes += e.size;
                if e.kind == ExtentKind::Slab {
                    self.stats.slabs += 1;
                }
                cursor = e_end;
                i += 1;
                if cursor > end {
                    // A huge extent: go on in the chunk where it ends.
                    end = self.chunk_of(cursor - 1) + CHUNK;
                }
            }
            if cursor < end {
                self.insert_free(cursor, end - cursor, FreeList::Reclaimed);
            }
            c = end;
        }
        if i < sorted.len() {
            return Err(format!("extent {:#x} lies beyond the growth pointer {:#x}", sorted[i].start, self.top));
        }
        Ok(())
    }

    /// Adds a free extent to a list and the index, without coalescing.
    fn insert_free(&mut self, start: u64, size: u64, which: FreeList) {
        let state = match which {
            FreeList::Reclaimed => {
                self.decay.push_back((self.tick, start));
                self.reclaimed_bytes += size;
                VehState::Reclaimed { since: self.tick }
            }
            FreeList::Retained => VehState::Retained,
        };
        self.index.insert(start, Veh { size, state });
        self.list(which).insert((size, start));
    }

    /// Removes the free extent at `start`; returns its size and list.
    fn remove_free(&mut self, start: u64) -> (u64, FreeList) {
        let v = self.index.remove(&start).expect("free extent");
        let which = match v.state {
            VehState::Reclaimed { .. } => {
                self.reclaimed_bytes -= v.size;
                FreeList::Reclaimed
            }
            VehState::Retained => FreeList::Retained,
            VehState::Active { .. } | VehState::Freeing => panic!("extent {start:#x} is not free"),
        };
        self.list(which).remove(&(v.size, start));
        (v.size, which)
    }

    /// Frees `[start, start + size)` (within one chunk) onto the reclaimed
    /// list, coalescing with free neighbours in the same chunk.
    fn add_free(&mut self, mut start: u64, mut size: u64) {
        let chunk = self.chunk_of(start);
        if let Some((&p, v)) = self.index.range(..start).next_back() {
            if v.state.is_free() && p + v.size == start && self.chunk_of(p) == chunk {
                let (psize, _) = self.remove_free(p);
                start = p;
                size += psize;
            }
        }
        let end = start + size;
        if let Some(v) = self.index.get(&end) {
            if v.state.is_free() && self.chunk_of(end) == chunk {
                let (nsize, _) = self.remove_free(end);
                size += nsize;
            }
        }
        self.insert_free(start, size, FreeList::Reclaimed);
    }

    /// Moves the oldest reclaimed extents to the retained list until the
    /// reclaimed bytes are within the decay curve's limit.
    fn run_decay(&mut self) {
        let limit = self.decay_curve.limit(self.tick);
        while self.reclaimed_bytes > limit {
            let Some((since, start)) = self.decay.pop_front() else { break };
            if let Some(v) = self.index.get_mut(&start) {
                if v.state == (VehState::Reclaimed { since }) {
                    v.state = VehState::Retained;
                    let size = v.size;
                    self.reclaimed_bytes -= size;
                    self.reclaimed.remove(&(size, start));
                    self.retained.insert((size, start));
                }
            }
        }
    }

    /// Best fit for `size` bytes at `align` from the reclaimed, then the
    /// retained list, carving a new chunk if neither has one.
    fn alloc_fit(&mut self, t: &mut PmThread, size: u64, align: u64) -> Option<u64> {
        let found =
            self.find_fit(FreeList::Reclaimed, size, align).or_else(|| self.find_fit(FreeList::Retained, size, align));
        let (free, at) = match found {
            Some(f) => f,
            None => {
                let c = self.grow(t, 1)?;
                let d = self.data_start(c);
                self.add_free(d, c + CHUNK - d);
                self.find_fit(FreeList::Reclaimed, size, align)?
            }
        };
        self.carve(free, at, size);
        Some(at)
    }

    /// The smallest free extent on `which` that holds `size` bytes at `align`:
    /// `(its start, the aligned start)`.
    fn find_fit(&mut self, which: FreeList, size: u64, align: u64) -> Option<(u64, u64)> {
        let fits = |&(fsize, fstart): &(u64, u64)| {
            let at = fstart.next_multiple_of(align);
            (at + size <= fstart + fsize).then_some((fstart, at))
        };
        let list = self.list(which);
        // Extents at least `size + align - PAGE` long always fit; below that,
        // alignment decides, so look at only a few before jumping there.
        let sure = size + align - PAGE;
        list.range((size, 0)..(sure, 0)).take(32).find_map(fits).or_else(|| list.range((sure, 0)..).find_map(fits))
    }

    /// Takes `[at, at + size)` out of the free extent at `free`; the pieces
    /// before and after stay on its list.
    fn carve(&mut self, free: u64, at: u64, size: u64) {
        let (fsize, which) = self.remove_free(free);
        if at > free {
            self.insert_free(free, at - free, which);
        }
        if at + size < free + fsize {
            self.insert_free(at + size, free + fsize - at - size, which);
        }
        self.index.insert(at, Veh { size, state: VehState::Active { kind: ExtentKind::Normal, pos: None } });
    }

    /// A run of fresh chunks for an extent above [`LARGE_MAX`].
    fn alloc_huge(&mut self, t: &mut PmThread, size: u64) -> Option<u64> {
        let n = (size + self.header_bytes()).div_ceil(CHUNK);
        let c = self.grow(t, n)?;
        let at = self.data_start(c);
        let end = at + size;
        let last_end = c + n * CHUNK;
        if end < last_end {
            self.add_free(end, last_end - end);
        }
        self.index.insert(at, Veh { size, state: VehState::Active { kind: ExtentKind::Normal, pos: None } });
        // The trailing chunks' header areas are inside the extent: user data.
        self.tiler.paint(t, at, end, region::USER_DATA);
        Some(at)
    }

    /// Advances the growth pointer by `n` chunks, durably; returns the first.
    fn grow(&mut self, t: &mut PmThread, n: u64) -> Option<u64> {
        let c = self.top;
        let end = c.checked_add(n * CHUNK)?;
        if end > self.layout.chunk_end() {
            return None;
        }
        // Header areas of chunks never carved are zero (the heap file starts
        // zeroed and nothing writes above the growth pointer), so the new
        // chunks need no initialization before they are published.
        t.store_u64(Layout::top_off(), end);
        t.persist(Layout::top_off(), 8);
        self.top = end;
        self.stats.chunks_carved += n;
        for i in 0..n {
            self.paint_chunk(t, c + i * CHUNK);
        }
        Some(c)
    }

    /// Makes sure the log can take one more record, running GC if needed,
    /// whatever the [`LogGc`] rule: pmsim's log area is part of the heap's
    /// layout and bounded, where the artifact's 10 GiB log file stops the
    /// process when it fills.
    fn ensure_log_room(&mut self, t: &mut PmThread) -> bool {
        let Bookkeeping::Log(log) = &self.book else { return true };
        if log.has_room() {
            return true;
        }
        t.op_begin(OpKind::LogGc, 1);
        self.fast_gc(t);
        if !self.log().has_room() {
            self.slow_gc(t);
        }
        t.op_end(OpKind::LogGc, 1);
        self.log().has_room()
    }

    fn log(&mut self) -> &mut BkLog {
        match &mut self.book {
            Bookkeeping::Log(l) => l,
            Bookkeeping::Headers(_) => unreachable!("log bookkeeping"),
        }
    }

    fn fast_gc(&mut self, t: &mut PmThread) {
        if let Bookkeeping::Log(log) = &mut self.book {
            log.fast_gc(t);
        }
    }

    /// Slow GC, then the VEHs learn their records' new positions; false if
    /// there were too few free chunks to copy the live records to.
    fn slow_gc(&mut self, t: &mut PmThread) -> bool {
        let Bookkeeping::Log(log) = &mut self.book else { return false };
        let Ok(moved) = log.slow_gc(t) else { return false };
        for (r, pos) in moved {
            let Record::Extent { addr, .. } = r else { continue };
            match self.index.get_mut(&addr) {
                Some(Veh { state: VehState::Active { pos: p, .. }, .. }) => *p = Some(pos),
                _ => panic!("bookkeeping log holds a live record of {addr:#x}, which is not allocated"),
            }
        }
        true
    }

    /// Records the chosen extent at `start` durably.
    fn commit(&mut self, t: &mut PmThread, start: u64, size: u64, kind: ExtentKind) {
        let r = Record::Extent { kind, addr: start, size };
        let pos = match &mut self.book {
            Bookkeeping::Log(log) => Some(log.append(t, r).expect("room was ensured")),
            Bookkeeping::Headers(h) => {
                let chunk = self.layout.chunk_base + (start - self.layout.chunk_base) / CHUNK * CHUNK;
                h.record(t, chunk, r);
                None
            }
        };
        let v = self.index.get_mut(&start).expect("chosen extent");
        v.state = VehState::Active { kind, pos };
        self.stats.active_extents += 1;
        self.stats.active_bytes += size;
        if kind == ExtentKind::Slab {
            self.stats.slabs += 1;
        }
    }

    /// Deletes the record of the active extent at `start`; its VEH stays in
    /// the index as *freeing* until [`Inner::reclaim`].
    fn unrecord(&mut self, t: &mut PmThread, start: u64) {
        let tombstone_room = self.ensure_log_room(t);
        let v = self.index[&start];
        let VehState::Active { kind, pos } = v.state else { unreachable!("checked by the caller") };
        let chunk_base = self.layout.chunk_base;
        match &mut self.book {
            Bookkeeping::Log(log) => {
                assert!(tombstone_room, "bookkeeping log full: no room for a tombstone even after GC");
                log.delete(t, pos.expect("logged extent")).expect("room was ensured");
                self.tombstones_since_gc += 1;
            }
            Bookkeeping::Headers(h) => {
                h.zero_covered(t, chunk_base, start, v.size);
                let chunk = chunk_base + (start - chunk_base) / CHUNK * CHUNK;
                h.clear(t, chunk, start);
            }
        }
        self.index.get_mut(&start).expect("extent").state = VehState::Freeing;
        self.stats.active_extents -= 1;
        self.stats.active_bytes -= v.size;
        if kind == ExtentKind::Slab {
            self.stats.slabs -= 1;
            self.tiler.paint(t, start, start + v.size, region::USER_DATA);
        }
        self.maybe_gc(t);
    }

    /// Puts the space of the *freeing* extent at `start` on the reclaimed
    /// list, per chunk; trailing chunks of a huge extent get their header
    /// area back (zeroed by `unrecord`).
    fn reclaim(&mut self, t: &mut PmThread, start: u64) {
        let v = self.index.remove(&start).expect("extent being freed");
        assert_eq!(v.state, VehState::Freeing, "reclaim of {start:#x}, which is not being freed");
        let end = start + v.size;
        let mut s = start;
        while s < end {
            let c = self.chunk_of(s);
            let piece_end = end.min(c + CHUNK);
            let mut from = s;
            if s == c && self.header_bytes() > 0 {
                self.paint_chunk(t, c);
                from = self.data_start(c);
            }
            if piece_end > from {
                self.decay_curve.freed(self.tick, piece_end - from);
                self.add_free(from, piece_end - from);
            }
            s = piece_end;
        }
    }

    /// The GC check, every `gc_interval` tombstones (the artifact's
    /// `gc_timer`), under the configured [`LogGc`] rule.
    fn maybe_gc(&mut self, t: &mut PmThread) {
        if !matches!(self.book, Bookkeeping::Log(_)) || self.tombstones_since_gc < self.gc_interval {
            return;
        }
        self.tombstones_since_gc = 0;
        match self.gc {
            LogGc::Off => {}
            LogGc::Artifact => {
                let Some(slow) = artifact_gc(self.log()) else { return };
                t.op_begin(OpKind::LogGc, 0);
                // A slow GC that finds too few free chunks for the copy
                // changes nothing; the fast GC still frees what it can.
                if !slow || !self.slow_gc(t) {
                    self.fast_gc(t);
                }
                t.op_end(OpKind::LogGc, 0);
            }
            LogGc::Paper => {
                t.op_begin(OpKind::LogGc, 0);
                self.fast_gc(t);
                let threshold = self.slow_gc_bytes;
                let log = self.log();
                if log.used_bytes() > threshold && log.live_records() * 8 * 2 < log.used_bytes() {
                    self.slow_gc(t);
                }
                t.op_end(OpKind::LogGc, 0);
            }
        }
    }
}

/// The artifact's thresholds on the log's usage, the live records' share of
/// the slots of the active chunks (`add_log` in NVAlloc's `log.c`, checked
/// every 10,000 free records): a slow GC when it is at most a tenth
/// (`chunks * 126 / items >= 10`, 126 records per 1 KiB chunk there), a fast
/// GC when at most a half (`>= 2`); as fractions (numerator, denominator).
const ARTIFACT_SLOW_GC_USAGE: (u64, u64) = (1, 10);
const ARTIFACT_FAST_GC_USAGE: (u64, u64) = (1, 2);

/// The GC the artifact's rule runs on `log`: `Some(true)` a slow GC,
/// `Some(false)` a fast one, `None` none.
///
/// The artifact's usage counter (`num_of_items`) adds one per extent record
/// appended and is lowered only by a slow GC (to the records it copies) and by
/// a chunk's worth per chunk a fast GC frees, not by a tombstone; pmsim
/// compares the live extent records, the quantity the thresholds stand for:
/// counting dead records too, a log whose extents are freed and replaced one
/// for one (a record and a tombstone each) stays above 50 % once more than
/// about two chunks' worth of extents are live, and is never collected.
fn artifact_gc(log: &BkLog) -> Option<bool> {
    artifact_gc_at(log.live_records(), log.used_bytes() / CHUNK_BYTES * CHUNK_RECORDS as u64)
}

/// [`artifact_gc`] for `live` records in `slots` slots.
fn artifact_gc_at(live: u64, slots: u64) -> Option<bool> {
    let at_most = |(num, den): (u64, u64)| live * den <= slots * num;
    if slots == 0 {
        None
    } else if at_most(ARTIFACT_SLOW_GC_USAGE) {
        Some(true)
    } else if at_most(ARTIFACT_FAST_GC_USAGE) {
        Some(false)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::artifact_gc_at;

    #[test]
    fn the_artifact_rule_runs_a_slow_gc_at_a_tenth_and_a_fast_one_at_half() {
        assert_eq!(artifact_gc_at(0, 0), None, "an empty log");
        assert_eq!(artifact_gc_at(12, 128), Some(true));
        assert_eq!(artifact_gc_at(13, 128), Some(false), "just above 10 %");
        assert_eq!(artifact_gc_at(64, 128), Some(false));
        assert_eq!(artifact_gc_at(65, 128), None, "just above 50 %");
        assert_eq!(artifact_gc_at(128, 1280), Some(true), "exactly 10 %");
    }
}
