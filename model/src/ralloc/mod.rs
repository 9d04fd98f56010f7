//! A Ralloc-style allocator (Cai, Wen, Beadle, Kjellqvist, Hedayati, Scott,
//! ISMM '20; public code urcs-sync/ralloc) on a pmsim heap, persisted as
//! its code persists: LRMalloc's lock-free design made recoverable by
//! persisting almost nothing and rebuilding the rest with a conservative
//! garbage collection after a crash.
//!
//! * Superblocks of 64 KiB, one size class each (39 classes of 8 B to
//!   14 KiB, jemalloc's spacing), described by 64 B descriptors; larger
//!   requests take whole superblocks at the region's end ([`sb`]).
//! * Each thread caches up to a superblock's worth of blocks per class
//!   (1,024 of 64 B) in a list threaded through the blocks ([`thread`]).
//!   `malloc` pops, `free` pushes: nothing is flushed, and besides the
//!   free list's link nothing in persistent memory is stored.
//! * A descriptor is flushed and fenced when its superblock is taken and
//!   when it is (re)constructed; at start every descriptor of the warm-up
//!   region is constructed that way and the 1,024 root slots are flushed
//!   one by one; a clean exit writes back the whole used superblock
//!   region, the descriptors and the base metadata line by line.
//! * A run that did not exit cleanly leaves its dirty mark: the next open
//!   runs the GC from the roots ([`recovery`]), rebuilding every anchor,
//!   free list and partial list.
//!
//! # The shipped code's defect
//!
//! `BaseMeta::writeback` steps its address before flushing, so it skips
//! the base metadata's first line (`avail_sb` and the dirty mutex: the
//! clean-shutdown state) and flushes one line past the end.
//! `ralloc:shipped=true` does that; the default flushes the lines the loop
//! means to. (The clean mark itself is stored after the write-back in
//! both.)
//!
//! # Where pmsim simplifies
//!
//! The three region files are one heap ([`layout`]); the code requires a
//! superblock region of at least 1 GiB and warms up 1 GiB at start, pmsim
//! warms up 1 GiB or half the heap's superblocks if that is less (large
//! blocks are always cut from the region's end, so a heap all warmed up
//! would have none); the lock-free free and
//! partial lists are updated under a lock (their CASes, recorded, succeed
//! at once); the dirty mutex is a word (1 while open). pmsim's programs
//! keep their roots in the heap's root table, from which the GC marks
//! (Ralloc's own root array is laid out and flushed at start as the code
//! does). Large blocks are never reused for large requests (the code's
//! behaviour; the NVAlloc paper leaves Ralloc out of its large-object
//! figures for it): the heap must hold every large block a run allocates.
//!
//! Internal work at create, open and close runs on thread id 0.

pub mod layout;
pub mod mutation;
pub mod recovery;
pub mod sb;
pub mod thread;

pub use mutation::Mutation;
pub use recovery::RecoveryReport;
pub use thread::RallocThread;

use crate::alloc::{Allocator, CrashRules, Footprint, HeapNeed, Params};
use crate::config::AllocConfig;
use crate::error::AllocError;
use crate::heap::Heap;
use crate::live::LiveBytes;
use crate::mech::sizeclass::SizeClasses;
use crate::params::as_map;
use crate::pm::{Pm, PmThread};
use layout::{
    Layout, CLASSES, DESC, DESC_IDX, DIRTY, DIRTY_ATTR, EXPAND, MAX_SZ, META, META_BYTES, META_IDX, ROOT0, ROOTS, SB,
    SB_IDX,
};
use pmsim_traces::{Category, OpKind};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The allocator's name in messages and the registry's `--help`.
pub const NAME: &str = "Ralloc";

/// The parameters of a Ralloc-style heap (`ralloc:key=value`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RallocConfig {
    /// Reproduce the shipped write-back loop (skips the base metadata's
    /// first line, flushes one past its end).
    pub shipped: bool,
    /// A removed flush, for checkers to catch (`desc-flush`: a new
    /// superblock's descriptor).
    pub mutation: Mutation,
}

impl AllocConfig for RallocConfig {
    const ALLOC: &'static str = NAME;

    /// Nothing to bound: a switch and a mutation.
    fn validate(&self) -> Result<(), AllocError> {
        Ok(())
    }
}

/// Per-thread live-byte counters (by thread id modulo).
const LIVE_SLOTS: usize = 64;

/// A Ralloc-style heap, shared by all threads of a run.
pub struct Ralloc {
    cfg: RallocConfig,
    pm: Pm,
    lay: Layout,
    classes: SizeClasses,
    /// Serialises `avail_sb` and the partial lists (lock-free in the code).
    lists: Mutex<()>,
    /// Serialises the superblock region's growth.
    region: Mutex<()>,
    /// The highest superblock taken so far (footprints).
    top_sb: AtomicU64,
    live: LiveBytes,
    report: RecoveryReport,
}

impl Ralloc {
    fn assemble(cfg: RallocConfig, pm: Pm, lay: Layout, report: RecoveryReport, top: u64) -> Ralloc {
        Ralloc {
            cfg,
            pm,
            lay,
            classes: SizeClasses::jemalloc(8, MAX_SZ + 1),
            lists: Mutex::new(()),
            region: Mutex::new(()),
            top_sb: AtomicU64::new(top),
            live: LiveBytes::new(report.live_bytes, LIVE_SLOTS),
            report,
        }
    }

    /// Sets up a region manager's header (`__map_persistent_region`) and,
    /// for regions expanded at once, takes `bytes` (`__nvm_region_allocator`).
    fn map_region(t: &mut PmThread, i: u64, start: u64, size: u64, bytes: u64) {
        let r = Layout::region(i);
        t.store_u64(r, start);
        t.store_u64(r + 16, size);
        t.flush(r);
        t.flush(r + 16);
        t.fence();
        if bytes > 0 {
            t.flush(r);
            t.fence();
            t.cas_u64(r, start, start + bytes).expect("a new region");
            t.flush(r);
            t.fence();
        }
        t.store_u64(r + 8, start);
        t.flush(r + 8);
        t.fence();
    }

    /// Formats a new heap on `heap` (`RP_init` on new files, the
    /// `BaseMeta` constructor).
    pub fn create(heap: &Heap, pm: Pm, cfg: RallocConfig) -> Result<Arc<Ralloc>, AllocError> {
        cfg.validate()?;
        let mut t = pm.thread(0);
        if Layout::present(&t) {
            return Err(AllocError::exists(NAME, "already holds a Ralloc heap (open it instead)").in_file(heap));
        }
        t.op_begin(OpKind::Init, 0);
        let lay = Layout::plan(heap.size()).map_err(|e| e.in_file(heap))?;
        register_regions(&mut t, &lay);
        Ralloc::map_region(&mut t, DESC_IDX, lay.descs, lay.nsb * DESC, lay.nsb * DESC);
        Ralloc::map_region(&mut t, SB_IDX, lay.sbs, lay.nsb * SB, 0);
        Ralloc::map_region(&mut t, META_IDX, META, META_BYTES, META_BYTES);
        // BaseMeta(): the dirty mutex, the heaps, the roots, one by one.
        t.store_u64(DIRTY_ATTR, 1);
        t.store_u64(DIRTY, 1);
        t.flush(DIRTY_ATTR);
        t.flush(DIRTY);
        for sc in 0..CLASSES {
            t.store_u64(Layout::heap(sc), 0);
            t.store_u64(Layout::heap(sc) + 8, sc as u64);
            t.flush(Layout::heap(sc));
        }
        for i in 0..ROOTS {
            t.store_u64(ROOT0 + 8 * i, 0);
            t.flush(ROOT0 + 8 * i);
        }
        let ra = Ralloc::assemble(cfg, pm, lay, RecoveryReport::default(), 0);
        // Warm-up: the superblock region grows by 1 GiB (or half the heap's
        // superblocks, leaving room for large blocks at the region's end);
        // its first superblock is skipped, the others go on the free list.
        let bytes = EXPAND.min(lay.nsb / 2 * SB).max(2 * SB);
        let first = ra.expand(&mut t, bytes).expect("a new region has room");
        ra.organize(&mut t, first + 1, bytes / SB - 1);
        t.fence();
        lay.write_identity(&mut t);
        t.op_end(OpKind::Init, 0);
        drop(t);
        Ok(Arc::new(ra))
    }

    /// Opens the heap on `heap` (`RP_init` on existing files, `RP_recover`):
    /// a dirty heap is garbage-collected, then marked dirty again.
    pub fn open(heap: &Heap, pm: Pm, cfg: RallocConfig) -> Result<Arc<Ralloc>, AllocError> {
        cfg.validate()?;
        let mut t = pm.thread(0);
        let lay = Layout::read(&t, heap.size()).map_err(|e| e.in_file(heap))?;
        t.op_begin(OpKind::Recovery, 0);
        register_regions(&mut t, &lay);
        let ra = Ralloc::assemble(cfg, pm, lay, RecoveryReport::default(), 0);
        let (report, top) = recovery::restart(&ra, &mut t).map_err(|e| e.in_file(heap))?;
        t.op_end(OpKind::Recovery, 0);
        drop(t);
        let mut ra = ra;
        ra.live = LiveBytes::new(report.live_bytes, LIVE_SLOTS);
        ra.report = report;
        ra.top_sb = AtomicU64::new(top);
        Ok(Arc::new(ra))
    }

    /// Closes the heap (`RP_close`): writes back the descriptors, the used
    /// superblock region and the base metadata line by line, marks the heap
    /// clean, and closes the three regions.
    pub fn close(self: Arc<Self>) -> Result<Pm, AllocError> {
        let ra = AllocError::sole_owner(self, NAME)?;
        let mut t = ra.pm.thread(0);
        t.op_begin(OpKind::Close, 0);
        for i in [DESC_IDX, SB_IDX] {
            let r = Layout::region(i);
            let (start, end) = (t.load_u64(r + 8), t.load_u64(r));
            let mut line = start;
            while line < end {
                t.flush(line);
                line += 64;
            }
            t.fence();
        }
        // BaseMeta::writeback: the shipped loop steps before it flushes.
        let lines = META_BYTES.div_ceil(64);
        let first = if ra.cfg.shipped { 1 } else { 0 };
        for i in first..first + lines {
            t.flush(META + 64 * i);
        }
        t.fence();
        t.store_u64(DIRTY, 0);
        for i in [DESC_IDX, SB_IDX, META_IDX] {
            t.fence();
            t.flush(Layout::region(i));
            t.fence();
        }
        t.op_end(OpKind::Close, 0);
        drop(t);
        Ok(ra.pm)
    }

    /// What the open that made this instance found.
    pub fn recovery(&self) -> RecoveryReport {
        self.report
    }

    pub fn layout(&self) -> &Layout {
        &self.lay
    }

    /// Ralloc's size class of `size` bytes (1-based; `None`: a large block).
    fn sc_of(&self, size: u64) -> Option<usize> {
        self.classes.class_of(size).map(|c| c + 1)
    }

    /// Block size and blocks per superblock of size class `sc`.
    fn class(&self, sc: usize) -> (u64, u64) {
        let bs = self.classes.size(sc - 1) as u64;
        (bs, SB / bs)
    }

    fn note_sb(&self, d: u64) {
        self.top_sb.fetch_max(d, Ordering::Relaxed);
    }
}

fn register_regions(t: &mut PmThread, lay: &Layout) {
    t.add_region("ralloc region managers", Category::Meta, layout::REGIONS, 4096);
    t.add_region("ralloc base metadata", Category::Meta, META, lay.descs - META);
    t.add_region("ralloc descriptors", Category::Meta, lay.descs, lay.sbs - lay.descs);
    t.add_region("ralloc superblocks", Category::Data, lay.sbs, lay.nsb * SB);
}

impl Allocator for Ralloc {
    type Config = RallocConfig;
    type Thread = RallocThread;
    const FAMILY: &'static str = "ralloc";
    const ABOUT: &'static str = "Ralloc-style allocator as its code persists (nothing on the fast path, descriptors \
                                 flushed when superblocks change hands, write-back at exit, recovery by conservative GC; \
                                 shipped=true: the shipped write-back loop)";
    /// The shipped write-back flushes other lines: checked too.
    const VARIANTS: &'static [&'static str] = &["ralloc:shipped=true"];
    const MUTANTS: &'static [&'static str] = &["ralloc:mutation=desc-flush"];

    fn create(heap: &Heap, pm: Pm, cfg: RallocConfig) -> Result<Arc<Self>, AllocError> {
        Ralloc::create(heap, pm, cfg)
    }

    fn open(heap: &Heap, pm: Pm, cfg: RallocConfig) -> Result<Arc<Self>, AllocError> {
        Ralloc::open(heap, pm, cfg)
    }

    fn close(self: Arc<Self>, _heap: &Heap) -> Result<Pm, AllocError> {
        Ralloc::close(self)
    }

    fn thread(self: &Arc<Self>, tid: u32) -> RallocThread {
        RallocThread::new(self.clone(), tid)
    }

    fn params(&self) -> Params {
        as_map(&self.cfg)
    }

    fn footprint(&self) -> Footprint {
        let top = self.top_sb.load(Ordering::Relaxed);
        Footprint { live_bytes: self.live.get(), mapped_bytes: self.lay.sb(top + 1) }
    }

    fn live_blocks(&self, t: &mut RallocThread) -> Vec<(u64, u64)> {
        recovery::live(self, t.pm()).unwrap_or_default()
    }

    fn name(&self) -> String {
        if self.cfg.shipped {
            "ralloc:shipped=true".into()
        } else {
            "ralloc".into()
        }
    }

    fn variant(cfg: &RallocConfig) -> String {
        if cfg.shipped {
            "shipped".into()
        } else {
            String::new()
        }
    }

    /// Large blocks are never reused for large requests: a workload with
    /// them needs room for every one it allocates.
    fn heap_size(_cfg: &RallocConfig, need: &HeapNeed) -> u64 {
        let want = if need.max_object > MAX_SZ as u64 { need.hint.saturating_mul(4) } else { need.hint };
        want.div_ceil(2 << 20) * (2 << 20)
    }

    /// An allocation survives a crash only if the GC reaches it from the
    /// roots: recovery keeps what its conservative mark reaches.
    fn crash_rules(_cfg: &RallocConfig) -> Result<CrashRules, String> {
        Ok(CrashRules { reachability_recovery: true, ..CrashRules::default() })
    }

    fn check_metadata(&self, t: &mut RallocThread) -> Result<(), String> {
        recovery::check(self, t.pm())
    }
}
