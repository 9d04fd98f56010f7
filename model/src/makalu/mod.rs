//! A Makalu-style allocator (Bhandari, Chakrabarti and Boehm, OOPSLA '16)
//! on a pmsim heap, persisted as its public code persists (HP's Atlas
//! repository, `makalu_alloc/`): a big bag of 4 KiB blocks with persistent
//! headers, allocation from transient free lists, and a recovery-time
//! conservative garbage collector instead of per-allocation persistence.
//!
//! * Requests are rounded to 16 B granules. Objects up to 384 B
//!   (`TINY_FREELISTS`) come from the thread's own free lists, larger ones
//!   up to half a block from global lists per size ([`lists`]), larger
//!   ones take whole blocks ([`blocks`]).
//! * `malloc` and `free` of a small object touch only the thread's list
//!   in DRAM: nothing is flushed; `free` zeroes the object (a normal
//!   object is cleared, `ok_init`), an unflushed store.
//! * Core header fields change only inside undo-logged sections, when a
//!   block is taken or given back; mark bits and their count are auxiliary,
//!   made durable lazily through tables of lines ([`crate::mech::dirty`]).
//! * After a crash, opening the heap rolls back an unfinished section and
//!   runs the offline mark-sweep ([`recovery`]).
//!
//! # What pmsim follows and where it simplifies
//!
//! Followed step by step from the code (see [`blocks`], [`lists`] and
//! [`crate::mech::undo`]): the 64 B log entries on lines of their own, each
//! persisted synchronously (mfence, flush, mfence) before its word
//! changes; the section's table of 8 target lines flushed once at commit
//! between two fences, then the log version bumped and persisted
//! synchronously; `MAK_large_free_bytes` logged in every section; the
//! header bump pointer or the recycled header's size logged when a chunk
//! is split; 128 B headers (core fields in the first line; mark bits,
//! count and list links in the second); the block free lists and the
//! header index in persistent memory, links stored but never flushed;
//! thread free lists of 8 KiB cut back to 4 KiB; the truncation table of
//! 16 blocks; reclaim lists of blocks at most 7/8 full; the tables of 8
//! (thread) and 32 (global) lazily flushed lines; freed objects and fresh
//! blocks zeroed, never flushed. The flush instruction is the run's
//! (`--flush-insn clflush` reproduces the code's hard-coded one); the
//! fences of the code's `MFENCE` are mfences.
//!
//! Simplified: pmsim's heap is one file laid out once (Makalu maps its
//! header and log spaces apart and expands its heap by mapping more; pmsim
//! grows the heap into the next blocks of the file, [`layout`]); mark bits are
//! numbered by object, not granule; the global lists (objects of 385 B to
//! 2 KiB) are cut back block by block like the thread lists; medium sizes
//! are rounded to granules, not through `MAK_size_map`; a graceful
//! shutdown gives the global lists back to their blocks (Makalu keeps
//! them in DRAM, so a restart would find their objects marked).
//!
//! # The shipped code's defect
//!
//! `makalu:shipped=true` persists the state word on every probe of a block
//! free list and every block freed, as the code's unbraced macro does
//! ([`blocks`]); the default is the protocol the code intends (the macro
//! braced). NVAlloc's evaluation measured the shipped code.
//!
//! # Publishing (`malloc_to` / `free_from`)
//!
//! Makalu has no such call: the program stores the offset and persists it
//! (store, flush, mfence), and after a crash reachability *is* the
//! allocation state: the GC keeps what the roots reach.
//!
//! Internal work at create, open and close runs on thread id 0.

pub mod blocks;
pub mod layout;
pub mod lists;
pub mod mutation;
pub mod recovery;
pub mod thread;

pub use mutation::Mutation;
pub use recovery::RecoveryReport;
pub use thread::MakaluThread;

use crate::alloc::{Allocator, CrashRules, Footprint, Params};
use crate::config::AllocConfig;
use crate::error::AllocError;
use crate::heap::Heap;
use crate::live::LiveBytes;
use crate::mech::dirty::DirtyLines;
use crate::mech::lock::TracedMutex;
use crate::params::as_map;
use crate::pm::{Pm, PmThread};
use blocks::Blocks;
use layout::{
    blocks_of, objs_per_block, valid_marks, Layout, BLOCK, FREE_BLK, GRANULE, H_BLOCK, H_FLAGS, H_MARKS, H_NMARKS,
    H_SZ, MARK_WORDS, MEDIUM_MAX,
};
use lists::{FreeList, Gran};
use pmsim_traces::{Category, OpKind};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};

/// The allocator's name in messages and the registry's `--help`.
pub const NAME: &str = "Makalu";

/// The parameters of a Makalu-style heap (`makalu:key=value`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MakaluConfig {
    /// Objects up to this size use thread-local free lists; larger ones up
    /// to half a block global ones (the code: 24 granules, `TINY_FREELISTS`).
    pub small_max: u64,
    /// Bytes of objects a free list holds before it is cut back to half
    /// (`LOCAL_FL_MAX_SIZE`, `FL_MAX_SIZE`: two blocks).
    pub freelist_bytes: u64,
    /// Lines in each thread's table of lazily flushed mark-bit lines
    /// (`LOCAL_AFLUSH_TABLE_SZ`).
    pub dirty_lines: u32,
    /// Reproduce the shipped code's defect: the state word persisted on
    /// every block free-list probe and every block freed.
    pub shipped: bool,
    /// A removed flush or step, for checkers to catch (see [`Mutation`]).
    pub mutation: Mutation,
}

impl Default for MakaluConfig {
    fn default() -> Self {
        MakaluConfig {
            small_max: 384,
            freelist_bytes: 2 * BLOCK,
            dirty_lines: 8,
            shipped: false,
            mutation: Mutation::None,
        }
    }
}

impl AllocConfig for MakaluConfig {
    const ALLOC: &'static str = NAME;

    fn validate(&self) -> Result<(), AllocError> {
        let bad = |m: String| Err(AllocError::config(NAME, m));
        if self.small_max > MEDIUM_MAX {
            return bad(format!("small_max = {} (at most {MEDIUM_MAX})", self.small_max));
        }
        if !(2 * GRANULE..=1 << 20).contains(&self.freelist_bytes) {
            return bad(format!("freelist_bytes = {} (must be 32..=1048576)", self.freelist_bytes));
        }
        if !self.dirty_lines.is_power_of_two() || self.dirty_lines > 4096 {
            return bad(format!("dirty_lines = {} (a power of two up to 4096)", self.dirty_lines));
        }
        Ok(())
    }
}

impl MakaluConfig {
    /// The most objects of `sz` bytes a free list holds, and how many it keeps when cut back.
    fn list_bounds(&self, sz: u64) -> (usize, usize) {
        let max = (self.freelist_bytes / sz).max(2);
        (max as usize, (self.freelist_bytes / 2 / sz).max(1) as usize)
    }
}

/// Size classes: granule counts up to half a block.
const CLASSES: usize = (MEDIUM_MAX / GRANULE) as usize + 1;
/// Lines of the global lists' table of lazily flushed lines (`FL_AFLUSH_TABLE_SZ`).
const FL_AFLUSH_LINES: usize = 8;
/// Per-thread live-byte counters (by thread id modulo).
const LIVE_SLOTS: usize = 64;

/// A Makalu-style heap, shared by all threads of a run.
pub struct Makalu {
    cfg: MakaluConfig,
    pm: Pm,
    lay: Layout,
    /// The global lock (`MAK_LOCK`) and what it guards: traced, as are the
    /// sizes' locks, so the replay makes threads wait at them as they do.
    blocks: TracedMutex<Blocks>,
    /// Per size: its reclaim list and global free list (`MAK_LOCK_GRAN`).
    grans: Box<[TracedMutex<Gran>]>,
    /// `MAK_fl_aflush_table`: mark-bit lines of the global lists. Taken
    /// after a size's lock and before the global lock.
    fl_aflush: Mutex<DirtyLines>,
    live: LiveBytes,
    report: RecoveryReport,
}

impl Makalu {
    /// Formats a new Makalu heap on `heap`.
    pub fn create(heap: &Heap, pm: Pm, cfg: MakaluConfig) -> Result<Arc<Makalu>, AllocError> {
        cfg.validate()?;
        let mut t = pm.thread(0);
        if Layout::present(&t) {
            return Err(AllocError::exists(NAME, "already holds a Makalu heap (open it instead)").in_file(heap));
        }
        t.op_begin(OpKind::Init, 0);
        let lay = Layout::plan(heap.size()).map_err(|e| e.in_file(heap))?.with_mutation(cfg.mutation);
        register_regions(&mut t, &lay);
        let mut blocks = Blocks::new(cfg.shipped);
        lay.format(&mut t);
        blocks.format(&mut t, &lay);
        t.op_end(OpKind::Init, 0);
        drop(t);
        Ok(Makalu::assemble(cfg, pm, lay, blocks, Vec::new(), RecoveryReport::default()))
    }

    /// Opens the Makalu heap on `heap`: restarts from the persistent headers
    /// after a graceful shutdown, or recovers offline (undo + GC) after a crash.
    pub fn open(heap: &Heap, pm: Pm, cfg: MakaluConfig) -> Result<Arc<Makalu>, AllocError> {
        cfg.validate()?;
        let mut t = pm.thread(0);
        let lay = Layout::read(&t, heap.size()).map_err(|e| e.in_file(heap))?.with_mutation(cfg.mutation);
        t.op_begin(OpKind::Recovery, 0);
        register_regions(&mut t, &lay);
        let crashed = !heap.was_clean() || t.load_u64(layout::STATE) != layout::state::NONE;
        let mut blocks = Blocks::new(cfg.shipped);
        let rec = recovery::recover(&mut t, &lay, crashed, &mut blocks).map_err(|e| e.in_file(heap))?;
        t.op_end(OpKind::Recovery, 0);
        drop(t);
        Ok(Makalu::assemble(cfg, pm, lay, blocks, rec.reclaim, rec.report))
    }

    fn assemble(
        cfg: MakaluConfig,
        pm: Pm,
        lay: Layout,
        blocks: Blocks,
        reclaim: Vec<(u64, u64)>,
        report: RecoveryReport,
    ) -> Arc<Makalu> {
        let grans: Box<[TracedMutex<Gran>]> = (0..CLASSES)
            .map(|g| {
                let sz = (g as u64).max(1) * GRANULE;
                TracedMutex::new(Gran { reclaim: 0, list: FreeList::new(cfg.list_bounds(sz).0) })
            })
            .collect();
        let mk = Makalu {
            cfg,
            pm,
            lay,
            blocks: TracedMutex::new(blocks),
            grans,
            fl_aflush: Mutex::new(DirtyLines::new(FL_AFLUSH_LINES)),
            live: LiveBytes::new(report.live_bytes, LIVE_SLOTS),
            report,
        };
        if !reclaim.is_empty() {
            let mut t = mk.pm.thread(0);
            for (b, sz) in reclaim {
                let h = mk.header(&t, b);
                let mut g = mk.grans[(sz / GRANULE) as usize].untraced();
                mk.push_reclaim(&mut t, &mut g.reclaim, b, h);
            }
        }
        Arc::new(mk)
    }

    /// Shuts down gracefully: gives the global free lists back to their
    /// blocks, makes every lazily flushed line durable, and says the heap
    /// is consistent (`MAK_close`: `MAK_sync_gc_metadata`,
    /// `MAK_sync_alloc_metadata`); gives the `Pm` back.
    pub fn close(self: Arc<Self>) -> Result<Pm, AllocError> {
        let mk = AllocError::sole_owner(self, NAME)?;
        let mut t = mk.pm.thread(0);
        t.op_begin(OpKind::Close, 0);
        {
            let mut fl = mk.fl_aflush.lock().unwrap();
            for (g, gran) in mk.grans.iter().enumerate() {
                let mut gran = gran.untraced();
                let Gran { reclaim, list } = &mut *gran;
                if !list.is_empty() {
                    mk.truncate(&mut t, &mut fl, g as u64 * GRANULE, reclaim, list, 0);
                }
            }
            fl.drain(&mut t);
        }
        mk.blocks.untraced().sync(&mut t);
        t.op_end(OpKind::Close, 0);
        drop(t);
        Ok(mk.pm)
    }

    pub fn config(&self) -> &MakaluConfig {
        &self.cfg
    }

    pub fn layout(&self) -> &Layout {
        &self.lay
    }

    /// What the open that made this instance found.
    pub fn recovery(&self) -> RecoveryReport {
        self.report
    }

    /// The header of block `b`, which starts a chunk, block or large object.
    fn header(&self, t: &PmThread, b: u64) -> u64 {
        self.lay.header_of(t, b).unwrap_or_else(|| panic!("block {b} has no header"))
    }

    /// The usable size of the object starting at `off`, if `off` starts one
    /// whose mark bit is set (allocated, or waiting in a free list).
    pub fn usable_size(&self, t: &PmThread, off: u64) -> Option<u64> {
        let b = self.lay.block_of(off)?;
        let h = self.lay.header_of(t, b)?;
        if t.load_u64(h + H_FLAGS) & FREE_BLK != 0 {
            return None;
        }
        let start = t.load_u64(h + H_BLOCK);
        let sz = t.load_u64(h + H_SZ);
        if sz > MEDIUM_MAX {
            return (off == start).then_some(sz);
        }
        if start != self.lay.block_off(b) || sz == 0 {
            return None;
        }
        let rel = off - start;
        let i = rel / sz;
        (rel.is_multiple_of(sz) && i < objs_per_block(sz) && mark_bit(t, h, i)).then_some(sz)
    }

    /// Every object with its mark bit set, `(offset, usable size)` by address:
    /// the live objects when no free list holds any (right after open, or
    /// with no thread handle alive and the global lists empty).
    pub fn marked_objects(&self, t: &PmThread) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        let walked = recovery::walk_index(t, &self.lay).unwrap_or_default();
        for (b, k) in walked.used {
            match k {
                recovery::Kind::Small(sz) => {
                    let h = self.header(t, b);
                    let base = self.lay.block_off(b);
                    v.extend((0..objs_per_block(sz)).filter(|&i| mark_bit(t, h, i)).map(|i| (base + i * sz, sz)));
                }
                recovery::Kind::Large(sz) => v.push((self.lay.block_off(b), sz)),
            }
        }
        v
    }

    /// Checks the persistent metadata against itself and the free lists, as
    /// it must be when no list holds objects (right after open): the headers
    /// tile the blocks through the header index; every small block's count
    /// of marked objects is the number of its mark bits set, and no bit
    /// past its last object is set; the free chunks the headers describe are
    /// exactly what the block free lists hold, each on the list of its size,
    /// and `MAK_large_free_bytes` is their size; no undo-log entry is open.
    /// The first disagreement, in one line.
    pub fn check(&self, t: &PmThread) -> Result<(), String> {
        let blocks = self.blocks.untraced();
        let walked = recovery::walk_index(t, &self.lay).map_err(|e| e.to_string())?;
        for &(b, k) in &walked.used {
            let recovery::Kind::Small(sz) = k else { continue };
            let h = self.header(t, b);
            let n = objs_per_block(sz);
            let mut set = 0;
            for wi in 0..MARK_WORDS {
                let m = t.load_u64(h + H_MARKS + 8 * wi);
                if m & !valid_marks(n, wi) != 0 {
                    return Err(format!("block {b}: mark bits set past its {n} objects of {sz} bytes"));
                }
                set += m.count_ones() as u64;
            }
            let count = t.load_u64(h + H_NMARKS);
            if count != set {
                return Err(format!("block {b}: hb_n_marks = {count} but {set} mark bits set"));
            }
        }
        let listed: Vec<(u64, u64)> = blocks.free_chunks().collect();
        if walked.free != listed {
            let first = walked.free.iter().zip(&listed).find(|(a, b)| a != b);
            return Err(format!(
                "{} free chunks in the headers, {} on the free lists (first difference: {:?})",
                walked.free.len(),
                listed.len(),
                first
            ));
        }
        recovery::check_lists(t, &self.lay, &walked.free)?;
        let free_bytes: u64 = walked.free.iter().map(|&(_, n)| n * BLOCK).sum();
        let lfb = t.load_u64(layout::LARGE_FREE_BYTES);
        if lfb != free_bytes {
            return Err(format!("MAK_large_free_bytes = {lfb}, but the free chunks hold {free_bytes}"));
        }
        if let Some(e) = self.lay.log().open_entry(t) {
            return Err(format!("undo-log entry {e} is open (stamped with the current version)"));
        }
        Ok(())
    }

    fn add_live(&self, tid: u32, bytes: i64) {
        self.live.add(tid, bytes);
    }

    /// A large object of `sz` bytes (whole blocks, zeroed).
    fn alloc_large(&self, t: &mut PmThread, sz: u64) -> Option<u64> {
        let b = self.blocks.with(t, |bl, t| bl.alloc(t, &self.lay, sz))?;
        let off = self.lay.block_off(b);
        for i in 0..blocks_of(sz) {
            t.store_bytes(off + i * BLOCK, &lists::ZEROS);
        }
        Some(off)
    }

    /// An object of `sz` bytes from the size's global list.
    fn alloc_global(&self, t: &mut PmThread, sz: u64) -> Option<u64> {
        let g = (sz / GRANULE) as usize;
        self.grans[g].with(t, |gran, t| {
            let Gran { reclaim, list } = gran;
            if list.is_empty() {
                let mut fl = self.fl_aflush.lock().unwrap();
                if !self.refill(t, &mut fl, sz, reclaim, None, list) {
                    return None;
                }
            }
            list.pop()
        })
    }

    /// Puts object `off` of `sz` bytes on the size's global list.
    fn free_global(&self, t: &mut PmThread, sz: u64, off: u64) {
        let g = (sz / GRANULE) as usize;
        self.grans[g].with(t, |gran, t| {
            let Gran { reclaim, list } = gran;
            if list.push(off) {
                let keep = self.cfg.list_bounds(sz).1;
                let mut fl = self.fl_aflush.lock().unwrap();
                self.truncate(t, &mut fl, sz, reclaim, list, keep);
            }
        })
    }
}

fn mark_bit(t: &PmThread, h: u64, i: u64) -> bool {
    t.load_u64(h + H_MARKS + 8 * (i / 64)) >> (i % 64) & 1 == 1
}

fn register_regions(t: &mut PmThread, lay: &Layout) {
    t.add_region("makalu base metadata", Category::Meta, layout::BASE, 4096);
    t.add_region("makalu undo log", Category::Wal, lay.log, lay.index - lay.log);
    t.add_region("makalu header index", Category::Meta, lay.index, lay.hdrs - lay.index);
    t.add_region("makalu block headers", Category::Meta, lay.hdrs, lay.data - lay.hdrs);
    t.add_region("makalu blocks", Category::Data, lay.data, lay.nblocks * BLOCK);
}

impl Allocator for Makalu {
    type Config = MakaluConfig;
    type Thread = MakaluThread;
    const FAMILY: &'static str = "makalu";
    const ABOUT: &'static str =
        "Makalu-style allocator as its code persists (lazy persistence, recovery by conservative \
                                 mark; shipped=true: the shipped code's extra state persists)";
    /// The shipped code persists more than its design needs: checked too.
    const VARIANTS: &'static [&'static str] = &["makalu:shipped=true"];

    fn create(heap: &Heap, pm: Pm, cfg: MakaluConfig) -> Result<Arc<Self>, AllocError> {
        Makalu::create(heap, pm, cfg)
    }

    fn open(heap: &Heap, pm: Pm, cfg: MakaluConfig) -> Result<Arc<Self>, AllocError> {
        Makalu::open(heap, pm, cfg)
    }

    fn close(self: Arc<Self>, _heap: &Heap) -> Result<Pm, AllocError> {
        Makalu::close(self)
    }

    fn variant(cfg: &MakaluConfig) -> String {
        if cfg.shipped {
            "shipped".into()
        } else {
            String::new()
        }
    }

    /// An allocation survives a crash only if the GC reaches it from the
    /// roots: the offline GC keeps what its conservative mark reaches (§9.2).
    fn crash_rules(_cfg: &MakaluConfig) -> Result<CrashRules, String> {
        Ok(CrashRules { reachability_recovery: true, ..CrashRules::default() })
    }

    /// Right after open no free list holds an object: the marked ones are live.
    fn live_blocks(&self, t: &mut MakaluThread) -> Vec<(u64, u64)> {
        t.marked_objects()
    }

    /// See [`Makalu::check`].
    fn check_metadata(&self, t: &mut MakaluThread) -> Result<(), String> {
        self.check(t.pm())
    }

    const MUTANTS: &'static [&'static str] = &[
        "makalu:mutation=undo-entry-flush",
        "makalu:mutation=mark-count-stale",
        "makalu:shipped=true:mutation=undo-entry-flush",
    ];

    fn name(&self) -> String {
        if self.cfg.shipped {
            "makalu:shipped=true".into()
        } else {
            "makalu".into()
        }
    }

    fn params(&self) -> Params {
        as_map(&self.cfg)
    }

    fn thread(self: &Arc<Self>, tid: u32) -> MakaluThread {
        MakaluThread::new(self.clone(), tid)
    }

    fn footprint(&self) -> Footprint {
        let heap = self.blocks.untraced().heap_blocks();
        Footprint { live_bytes: self.live.get(), mapped_bytes: self.lay.data + heap * BLOCK }
    }
}
