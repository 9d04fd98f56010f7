//! A PAllocator-style allocator (Oukid, Booss, Lespinasse, Lehner,
//! Willhalm, Gomes: "Memory management techniques for large-scale
//! persistent-main-memory systems", VLDB '17). PAllocator has no public
//! code: NVAlloc's authors reimplemented it from the paper (§6.1), and so
//! does pmsim — from the paper's description and NVAlloc's account of it,
//! not from any code; every choice the paper leaves open is named below.
//!
//! * Three allocators by size (§4): small blocks (up to 14 KiB here; the
//!   paper: under 16 KB) from per-thread small allocators, segregated fit
//!   over pages of one size class each ([`small`]); big blocks (up to a
//!   segment) best fit with splitting and merging ([`big`]); huge blocks in
//!   whole segments.
//! * Every operation is failure-atomic through a *micro-log*: the thread's
//!   log entry (operation, block, the caller's persistent pointer) is
//!   persisted first, the block's metadata and the caller's pointer are
//!   written and persisted, then the entry is cleared — the paper's
//!   `allocate(PPtr &p, size)` / `deallocate(PPtr &p)`, which always
//!   publish through the caller's pointer (pmsim's `malloc` / `free` pass
//!   none). The micro-logs are pmsim's redo WAL ([`crate::mech::wal`]) with
//!   one line per thread, four entries to the line.
//! * Recovery (§4.5) redoes every valid micro-log entry — an allocation
//!   whose block is marked is published again, one whose block is not was
//!   never visible; a free is completed — then rebuilds every DRAM
//!   structure from the segment table, the page headers and the big blocks'
//!   headers ([`recovery`]).
//!
//! # The persist sequence, and what it costs
//!
//! A small `malloc` + `free` pair without a caller's pointer: per
//! operation the micro-log entry (flush, fence), the block's 2-byte entry
//! (flush, fence), the entry cleared (flush, ordered by the next fence) —
//! 6 flushes and 4 fences per pair. The log line and the page header's
//! entry line come back on every operation, so nearly every flush is a
//! reflush: on the one-thread Threadtest (10 rounds of 1,000 × 64 B,
//! rounds 2–10) pmsim measures 98.9 % (NVAlloc's Fig. 1a: 98.8 % for its
//! reimplementation, over its benchmarks). A caller's pointer adds a
//! flush and a fence to each operation.
//!
//! # Where the paper leaves it open (pmsim's choices)
//!
//! Segments of 2 MiB and pages of 64 KiB (`segment_mib`, `page_kib`); size
//! classes jemalloc's with a 64 B quantum ([`crate::mech::sizeclass`]); a
//! block's state a 2-byte entry in its page's header (NVAlloc §7: "2-B
//! block metadata in page headers"); a micro-log line per thread; big
//! free blocks in a DRAM tree (the paper: persistent FPTrees) and huge
//! blocks carved from the segment table (the paper: a file each); a freed
//! block from another thread's page goes back to that thread's allocator
//! after a fence, and so does a freed big or huge block to the shared
//! allocator (its log entry cleared durably before another thread can
//! reuse it, whose allocation a redo of the free would otherwise undo).
//!
//! Internal work at create, open and close runs on thread id 0.

pub mod big;
pub mod layout;
pub mod mutation;
pub mod recovery;
pub mod small;
pub mod thread;

pub use mutation::Mutation;
pub use recovery::RecoveryReport;
pub use thread::PThread;

use crate::alloc::{Allocator, CrashRules, Footprint, HeapNeed, Params};
use crate::config::AllocConfig;
use crate::error::AllocError;
use crate::heap::Heap;
use crate::live::LiveBytes;
use crate::mech::lock::TracedMutex;
use crate::mech::regions::HeadedArea;
use crate::mech::sizeclass::SizeClasses;
use crate::mech::wal::{Wal, WalCursor, WalEntry};
use crate::params::as_map;
use crate::pm::{Pm, PmThread};
use big::Big;
use layout::{seg, Layout, HDR};
use pmsim_traces::{Category, OpKind};
use serde::{Deserialize, Serialize};
use small::Small;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The allocator's name in messages and the registry's `--help`.
pub const NAME: &str = "PAllocator";

/// Micro-log operation codes.
pub(super) const OP_MALLOC: u8 = 1;
pub(super) const OP_FREE: u8 = 2;

/// The parameters of a PAllocator-style heap (`pallocator:key=value`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PAllocatorConfig {
    /// Bytes of a small page, in KiB (one size class, one thread).
    pub page_kib: u64,
    /// Bytes of a segment, in MiB (small pages, big blocks, or part of a huge block).
    pub segment_mib: u64,
    /// Micro-logs (at least the run's threads).
    pub threads: u32,
    /// A removed flush, for checkers to catch (`micro-log-flush`).
    pub mutation: Mutation,
}

impl Default for PAllocatorConfig {
    fn default() -> Self {
        PAllocatorConfig { page_kib: 64, segment_mib: 2, threads: 64, mutation: Mutation::None }
    }
}

impl AllocConfig for PAllocatorConfig {
    const ALLOC: &'static str = NAME;

    fn validate(&self) -> Result<(), AllocError> {
        let bad = |m: String| Err(AllocError::config(NAME, m));
        if !self.page_kib.is_power_of_two() || !(16..=1024).contains(&self.page_kib) {
            return bad(format!("page_kib = {} (a power of two, 16..=1024)", self.page_kib));
        }
        if !self.segment_mib.is_power_of_two() || !(1..=64).contains(&self.segment_mib) {
            return bad(format!("segment_mib = {} (a power of two, 1..=64)", self.segment_mib));
        }
        if self.segment_mib << 10 < 2 * self.page_kib {
            return bad(format!(
                "segment_mib = {} holds fewer than 2 pages of {} KiB",
                self.segment_mib, self.page_kib
            ));
        }
        if !(1..=1024).contains(&self.threads) {
            return bad(format!("threads = {} (must be 1..=1024)", self.threads));
        }
        Ok(())
    }
}

/// Per-thread live-byte counters (by thread id modulo).
const LIVE_SLOTS: usize = 64;

/// A PAllocator-style heap, shared by all threads of a run.
pub struct PAllocator {
    cfg: PAllocatorConfig,
    pm: Pm,
    lay: Layout,
    classes: SizeClasses,
    /// Per micro-log (thread id modulo): its small allocator. Its lock and
    /// the big allocator's are traced, so the replay makes threads wait at
    /// them (a free from another thread's page takes that thread's).
    smalls: Box<[TracedMutex<Small>]>,
    /// The big allocator, shared by the threads.
    big: TracedMutex<Big>,
    /// A copy of the segment table (DRAM lookups; not traced).
    segs: Mutex<Vec<u64>>,
    /// Segments in use, highest (footprints).
    top_seg: AtomicU64,
    live: LiveBytes,
    report: RecoveryReport,
    /// The segments' regions: user data, except the headers inside them.
    regions: HeadedArea,
}

impl PAllocator {
    fn wal(&self) -> Wal {
        self.lay.wal().with_entry_flush(self.cfg.mutation != Mutation::MicroLogFlush)
    }

    fn assemble(
        cfg: PAllocatorConfig,
        pm: Pm,
        lay: Layout,
        rec: recovery::Recovered,
        regions: HeadedArea,
    ) -> PAllocator {
        let classes = SizeClasses::jemalloc(64, 14337);
        let mut smalls = rec.smalls;
        smalls.resize_with(lay.threads as usize, Small::default);
        for s in smalls.iter_mut() {
            s.avail.resize_with(classes.len(), Vec::new);
        }
        let top = rec.segs.iter().rposition(|&w| w & seg::KIND != seg::FREE).map_or(0, |i| i as u64 + 1);
        PAllocator {
            cfg,
            pm,
            lay,
            classes,
            smalls: smalls.into_iter().map(TracedMutex::new).collect(),
            big: TracedMutex::new(rec.big),
            segs: Mutex::new(rec.segs),
            top_seg: AtomicU64::new(top),
            live: LiveBytes::new(rec.report.live_bytes, LIVE_SLOTS),
            report: rec.report,
            regions,
        }
    }

    /// Formats a new heap on `heap`.
    pub fn create(heap: &Heap, pm: Pm, cfg: PAllocatorConfig) -> Result<Arc<PAllocator>, AllocError> {
        cfg.validate()?;
        let mut t = pm.thread(0);
        if Layout::present(&t) {
            return Err(AllocError::exists(NAME, "already holds a PAllocator heap (open it instead)").in_file(heap));
        }
        t.op_begin(OpKind::Init, 0);
        let lay = Layout::plan(heap.size(), cfg.page_kib << 10, cfg.segment_mib << 20, cfg.threads)
            .map_err(|e| e.in_file(heap))?;
        let regions = register_regions(&mut t, &lay);
        lay.format(&mut t);
        t.op_end(OpKind::Init, 0);
        drop(t);
        let rec = recovery::Recovered::empty(&lay);
        Ok(Arc::new(PAllocator::assemble(cfg, pm, lay, rec, regions)))
    }

    /// Opens the heap on `heap`, redoing what the micro-logs hold.
    pub fn open(heap: &Heap, pm: Pm, cfg: PAllocatorConfig) -> Result<Arc<PAllocator>, AllocError> {
        cfg.validate()?;
        let mut t = pm.thread(0);
        let lay = Layout::read(&t, heap.size()).map_err(|e| e.in_file(heap))?;
        t.op_begin(OpKind::Recovery, 0);
        let regions = register_regions(&mut t, &lay);
        let classes = SizeClasses::jemalloc(64, 14337);
        let rec = recovery::recover(&mut t, &lay, &classes, !heap.was_clean()).map_err(|e| e.in_file(heap))?;
        regions.paint_headers(&mut t, &rec.headers());
        t.op_end(OpKind::Recovery, 0);
        drop(t);
        Ok(Arc::new(PAllocator::assemble(cfg, pm, lay, rec, regions)))
    }

    /// Closes the heap: everything is durable already.
    pub fn close(self: Arc<Self>) -> Result<Pm, AllocError> {
        let pa = AllocError::sole_owner(self, NAME)?;
        Ok(pa.pm)
    }

    /// What the open that made this instance found.
    pub fn recovery(&self) -> RecoveryReport {
        self.report
    }

    pub fn layout(&self) -> &Layout {
        &self.lay
    }

    /// Reserves `n` contiguous free segments in the DRAM copy of the
    /// table, set to `word` (a huge block's later segments: body): the first.
    fn reserve_segments(&self, n: u64, word: u64) -> Option<u64> {
        let mut segs = self.segs.lock().unwrap();
        let mut run = 0;
        let first = segs.iter().enumerate().find_map(|(i, &w)| {
            run = if w & seg::KIND == seg::FREE { run + 1 } else { 0 };
            (run == n).then(|| i as u64 + 1 - n)
        })?;
        for i in first + 1..first + n {
            segs[i as usize] = seg::BODY;
        }
        segs[first as usize] = word;
        self.top_seg.fetch_max(first + n, Ordering::Relaxed);
        Some(first)
    }

    /// Writes the table words of segments `first..first + n` as reserved,
    /// the later ones first, and persists them.
    fn write_segments(&self, t: &mut PmThread, first: u64, n: u64) {
        let segs = self.segs.lock().unwrap();
        for i in (first..first + n).rev() {
            t.store_u64(self.lay.segword(i), segs[i as usize]);
        }
        t.persist(self.lay.segword(first), 8 * n);
    }

    /// Takes `n` contiguous free segments for `word`, durably: the first.
    fn take_segments(&self, t: &mut PmThread, n: u64, word: u64) -> Option<u64> {
        let first = self.reserve_segments(n, word)?;
        self.write_segments(t, first, n);
        Some(first)
    }

    /// Frees the huge block of `n` segments at segment `first` durably: its
    /// table words cleared and persisted. The DRAM copy still holds them
    /// ([`PAllocator::forget_segments`] gives them back).
    fn release_segments(&self, t: &mut PmThread, first: u64, n: u64) {
        for i in first..first + n {
            t.store_u64(self.lay.segword(i), seg::FREE);
        }
        t.persist(self.lay.segword(first), 8 * n);
    }

    /// Gives segments `first..first + n` back to the DRAM copy of the table.
    fn forget_segments(&self, first: u64, n: u64) {
        let mut segs = self.segs.lock().unwrap();
        segs[first as usize..(first + n) as usize].fill(seg::FREE);
    }

    /// One failure-atomic operation: the micro-log entry `(op, target,
    /// dest)` persisted, `body` (which marks the block and writes `dest`),
    /// the entry cleared.
    fn logged(
        &self,
        t: &mut PmThread,
        log: &mut WalCursor,
        op: u8,
        target: u64,
        dest: Option<u64>,
        body: impl FnOnce(&mut PmThread),
    ) {
        let slot = log.begin(t, WalEntry { op, target, dest: dest.unwrap_or(0) });
        body(t);
        log.end(t, slot);
    }

    /// Writes `v` into the caller's pointer `dest` and persists it.
    fn publish(t: &mut PmThread, dest: Option<u64>, v: u64) {
        if let Some(d) = dest {
            t.store_u64(d, v);
            t.persist(d, 8);
        }
    }

    /// `allocate`: `(offset, usable size)`.
    fn alloc(&self, t: &mut PmThread, log: &mut WalCursor, size: u64, dest: Option<u64>) -> Option<(u64, u64)> {
        let tid = t.tid();
        if let Some(c) = self.classes.class_of(size) {
            return self.smalls[tid as usize % self.smalls.len()].with(t, |s, t| {
                let (page, i, block) = self.small_pick(t, s, tid, c)?;
                self.logged(t, log, OP_MALLOC, block, dest, |t| {
                    self.set_entry(t, page, i, 1);
                    PAllocator::publish(t, dest, block);
                });
                Some((block, self.classes.size(c) as u64))
            });
        }
        let bytes = (size + HDR).next_multiple_of(64);
        if bytes <= self.lay.seg {
            return self.big.with(t, |b, t| {
                let (have, at) = self.big_pick(t, b, bytes)?;
                self.logged(t, log, OP_MALLOC, at, dest, |t| {
                    self.big_commit(t, b, have, at, bytes);
                    PAllocator::publish(t, dest, at + HDR);
                });
                Some((at + HDR, bytes - HDR))
            });
        }
        let n = bytes.div_ceil(self.lay.seg);
        let first = self.reserve_segments(n, seg::HUGE | n << 8)?;
        let at = self.lay.seg_off(first);
        self.logged(t, log, OP_MALLOC, at, dest, |t| {
            self.write_segments(t, first, n);
            PAllocator::publish(t, dest, at + HDR);
        });
        Some((at + HDR, n * self.lay.seg - HDR))
    }

    /// `deallocate`: the usable size freed.
    fn release(&self, t: &mut PmThread, log: &mut WalCursor, off: u64, dest: Option<u64>) -> u64 {
        let i = self.lay.seg_of(off).unwrap_or_else(|| panic!("free of {off:#x}: not in a segment"));
        let w = self.segs.lock().unwrap()[i as usize];
        match w & seg::KIND {
            seg::SMALL => {
                let page = self.lay.page_of(off);
                let (size, hdr) = (
                    t.load_u64(page + layout::P_SIZE),
                    layout::page_geometry(self.lay.page, t.load_u64(page + layout::P_SIZE)).1,
                );
                let k = (off - page - hdr) / size;
                self.logged(t, log, OP_FREE, off, dest, |t| {
                    PAllocator::publish(t, dest, 0);
                    self.set_entry(t, page, k, 0);
                });
                let owner = t.load_u64(page + layout::P_OWNER) as usize % self.smalls.len();
                if owner != t.tid() as usize % self.smalls.len() {
                    t.fence(); // the entry's clearing durable before another thread reuses the block
                }
                self.smalls[owner].with(t, |s, _| self.small_give(s, page, k));
                size
            }
            seg::BIG => {
                let at = PAllocator::big_header(off);
                self.big.with(t, |b, t| {
                    let bytes = b.blocks[&at].0;
                    self.logged(t, log, OP_FREE, at, dest, |t| {
                        PAllocator::publish(t, dest, 0);
                        self.big_free(t, b, at);
                    });
                    // The entry's clearing durable before the lock lets another
                    // thread take the block (its redo would free that allocation).
                    t.fence();
                    bytes - HDR
                })
            }
            seg::HUGE => {
                let n = w >> 8;
                self.logged(t, log, OP_FREE, self.lay.seg_off(i), dest, |t| {
                    PAllocator::publish(t, dest, 0);
                    self.release_segments(t, i, n);
                });
                // As for a big block: durably cleared before anyone can take them.
                t.fence();
                self.forget_segments(i, n);
                n * self.lay.seg - HDR
            }
            k => panic!("free of {off:#x}: segment {i} is of kind {k}"),
        }
    }
}

/// Registers the identity page, the micro-logs, the segment table, and the
/// segments as user data: the small pages' headers and the big blocks'
/// lie inside the segments, and are painted as metadata as they are made
/// ([`HeadedArea::paint_header`]) or found (at open), so that their flushes
/// count as metadata.
fn register_regions(t: &mut PmThread, lay: &Layout) -> HeadedArea {
    t.add_region("pallocator identity", Category::Meta, layout::META, 4096);
    t.add_region("pallocator micro-logs", Category::Wal, lay.wal, lay.segtab - lay.wal);
    t.add_region("pallocator segment table", Category::Meta, lay.segtab, lay.segs - lay.segtab);
    HeadedArea::register(t, "pallocator segments", "pallocator headers", lay.segs, lay.segs + lay.nseg * lay.seg)
}

impl Allocator for PAllocator {
    type Config = PAllocatorConfig;
    type Thread = PThread;
    const FAMILY: &'static str = "pallocator";
    const ABOUT: &'static str =
        "PAllocator-style allocator, reimplemented from its paper (per-thread small allocators \
                                 over pages with 2-byte block entries, big blocks best fit, huge segments; a micro-log \
                                 per operation)";
    const MUTANTS: &'static [&'static str] = &["pallocator:mutation=micro-log-flush"];

    fn create(heap: &Heap, pm: Pm, cfg: PAllocatorConfig) -> Result<Arc<Self>, AllocError> {
        PAllocator::create(heap, pm, cfg)
    }

    fn open(heap: &Heap, pm: Pm, cfg: PAllocatorConfig) -> Result<Arc<Self>, AllocError> {
        PAllocator::open(heap, pm, cfg)
    }

    fn close(self: Arc<Self>, _heap: &Heap) -> Result<Pm, AllocError> {
        PAllocator::close(self)
    }

    fn thread(self: &Arc<Self>, tid: u32) -> PThread {
        PThread::new(self.clone(), tid)
    }

    fn params(&self) -> Params {
        as_map(&self.cfg)
    }

    fn footprint(&self) -> Footprint {
        let top = self.top_seg.load(Ordering::Relaxed);
        Footprint { live_bytes: self.live.get(), mapped_bytes: self.lay.seg_off(top) }
    }

    fn live_blocks(&self, t: &mut PThread) -> Vec<(u64, u64)> {
        recovery::live(t.pm(), &self.lay).unwrap_or_default()
    }

    /// A micro-log per thread of the run.
    fn for_run(cfg: &PAllocatorConfig, threads: u32) -> PAllocatorConfig {
        PAllocatorConfig { threads: cfg.threads.max(threads), ..cfg.clone() }
    }

    /// The workload's estimate, plus a segment of small pages per thread
    /// and a few for big blocks.
    fn heap_size(cfg: &PAllocatorConfig, need: &HeapNeed) -> u64 {
        let seg = cfg.segment_mib << 20;
        let want = need.hint.saturating_mul(2).saturating_add((need.threads as u64 + 4) * seg);
        want.div_ceil(2 << 20) * (2 << 20)
    }

    /// Every operation is logged, so a completed one is durable and an
    /// interrupted one is completed or never happened.
    fn crash_rules(_cfg: &PAllocatorConfig) -> Result<CrashRules, String> {
        Ok(CrashRules { plain_mallocs_durable: true, ..CrashRules::default() })
    }

    fn check_metadata(&self, t: &mut PThread) -> Result<(), String> {
        recovery::check(t.pm(), self)
    }
}
