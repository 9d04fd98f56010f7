//! A Makalu-style allocator (Bhandari, Chakrabarti and Boehm, OOPSLA '16) on
//! a pmsim heap: a big bag of 4 KiB blocks with persistent block headers,
//! allocation from transient free lists, and a recovery-time conservative
//! garbage collector instead of per-allocation persistence.
//!
//! * Requests are rounded to 16 B granules ([`layout::GRANULE`]). Small ones
//!   (≤ `small_max`, 400 B in the paper) come from the thread's own free
//!   lists, medium ones (≤ half a block) from global per-size lists, large
//!   ones (whole blocks) straight from the chunk free lists ([`chunks`]).
//! * An empty free list is refilled by an *incremental sweep* of a block
//!   from the size's reclaim list — every object whose mark bit is clear is
//!   taken and its bit set — or else from a new block ([`thread`]).
//! * Core header fields (`hb_block`, `hb_sz`, `hb_flag`) and the bump
//!   pointer change only inside undo-logged sections ([`crate::mech::undo`]);
//!   mark bits are auxiliary and made visible lazily ([`crate::mech::dirty`]).
//! * Freeing pushes onto a free list and touches no persistent memory;
//!   a list that grows too long gives half its objects back to their blocks
//!   (clearing mark bits), an emptied block goes back to the chunk lists.
//! * After a crash, opening the heap rolls back an unfinished section and
//!   runs the offline mark-sweep ([`recovery`]): marks from the persistent
//!   roots, rewrites every block's mark bits, frees empty blocks and
//!   unreached large objects. Objects lost in transient free lists and
//!   objects allocated but never published are reclaimed this way.
//!
//! # Publishing (`malloc_to` / `free_from`)
//!
//! No log: `malloc_to` takes an object (its mark bit is already set) and
//! stores and persists `*dest`; `free_from` clears and persists `*dest`,
//! then frees. Reachability *is* the allocation state after a crash: if
//! `*dest` was not durable, the object is unreachable and the GC reclaims it;
//! if it was, the GC keeps it. Either way the heap agrees with the roots.
//!
//! Internal work at create, open and close runs on thread id 0.

pub mod chunks;
pub mod layout;
pub mod recovery;
pub mod thread;

pub use recovery::RecoveryReport;
pub use thread::MakaluThread;

use crate::alloc::{Footprint, PmAllocator};
use crate::config::AllocConfig;
use crate::error::AllocError;
use crate::family::{recovery_target, Allocator, CrashTarget, Recoverable};
use crate::heap::Heap;
use crate::live::LiveBytes;
use crate::mech::dirty::DirtyLines;
use crate::mech::mutation::Mutation;
use crate::params::as_map;
use crate::pm::{Pm, PmThread};
use chunks::Chunks;
use layout::{flag, objs_per_block, state, Layout, BLOCK, GRANULE, H_FLAG, H_MARKS, H_NMARKS, H_SZ, MEDIUM_MAX};
use pmsim_traces::{Category, OpKind};
use serde::{Deserialize, Serialize};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The allocator's name in messages and the registry's `--help`.
pub const NAME: &str = "Makalu";

/// The parameters of a Makalu-style heap (`makalu:key=value`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MakaluConfig {
    /// Objects up to this size use thread-local free lists; larger ones up
    /// to half a block use global lists (paper: 400 B).
    pub small_max: u64,
    /// A free list longer than this gives half its objects back to their blocks.
    pub freelist_max: u32,
    /// A block goes back on its reclaim list once this many of its objects are free
    /// (or all of them, for blocks of fewer objects).
    pub reclaim_min: u32,
    /// Lines in each thread's table of lazily flushed mark-bit lines.
    pub dirty_lines: u32,
    /// A removed flush or step, for checkers to catch (`undo-entry-flush`,
    /// `mark-count-stale` concern Makalu; see [`Mutation`]).
    pub mutation: Mutation,
}

impl Default for MakaluConfig {
    fn default() -> Self {
        MakaluConfig { small_max: 400, freelist_max: 512, reclaim_min: 8, dirty_lines: 64, mutation: Mutation::None }
    }
}

impl AllocConfig for MakaluConfig {
    const ALLOC: &'static str = NAME;

    fn validate(&self) -> Result<(), AllocError> {
        let bad = |m: String| Err(AllocError::config(NAME, m));
        if self.small_max > MEDIUM_MAX {
            return bad(format!("small_max = {} (at most {MEDIUM_MAX})", self.small_max));
        }
        if self.freelist_max < 2 {
            return bad(format!("freelist_max = {} (at least 2)", self.freelist_max));
        }
        if self.reclaim_min == 0 {
            return bad("reclaim_min = 0 (at least 1)".into());
        }
        if !self.dirty_lines.is_power_of_two() {
            return bad(format!("dirty_lines = {} (a power of two)", self.dirty_lines));
        }
        self.mutation.check("Makalu", &[Mutation::UndoEntryFlush, Mutation::MarkCountStale]).or_else(bad)
    }
}

/// Number of granule size classes (class g serves g granules).
const CLASSES: usize = (MEDIUM_MAX / GRANULE) as usize + 1;
/// Block-header locks (mark bits of the blocks `b` with `b % STRIPES == i`).
const STRIPES: usize = 256;
/// Per-thread live-byte counters (by thread id modulo).
const LIVE_SLOTS: usize = 64;

/// A Makalu-style heap, shared by all threads of a run.
pub struct Makalu {
    cfg: MakaluConfig,
    pm: Pm,
    lay: Layout,
    /// The global lock (`gml`) over the chunk free lists and the undo log.
    chunks: Mutex<Chunks>,
    /// Locks over block headers' mark bits.
    stripes: Box<[Mutex<()>]>,
    /// Per block: whether it is on its reclaim list (entries of blocks that
    /// left the list since are skipped when popped).
    on_reclaim: Box<[AtomicBool]>,
    /// Per size class: blocks with free objects, to sweep.
    reclaim: Box<[Mutex<Vec<u64>>]>,
    /// Per medium size class: the global free list.
    medium: Box<[Mutex<Vec<u64>>]>,
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
        lay.format(&mut t);
        t.op_end(OpKind::Init, 0);
        drop(t);
        Ok(Makalu::assemble(cfg, pm, lay, Chunks::default(), Vec::new(), RecoveryReport::default()))
    }

    /// Opens the Makalu heap on `heap`: restarts from the persistent headers
    /// after a graceful shutdown, or recovers offline (undo + GC) after a crash.
    pub fn open(heap: &Heap, pm: Pm, cfg: MakaluConfig) -> Result<Arc<Makalu>, AllocError> {
        cfg.validate()?;
        let mut t = pm.thread(0);
        let lay = Layout::read(&t, heap.size()).map_err(|e| e.in_file(heap))?.with_mutation(cfg.mutation);
        t.op_begin(OpKind::Recovery, 0);
        register_regions(&mut t, &lay);
        let crashed = !heap.was_clean() || lay.state(&t) != state::SHUTDOWN;
        lay.set_state(&mut t, state::RUNNING);
        let rec = recovery::recover(&mut t, &lay, crashed).map_err(|e| e.in_file(heap))?;
        t.op_end(OpKind::Recovery, 0);
        drop(t);
        Ok(Makalu::assemble(cfg, pm, lay, rec.chunks, rec.reclaim, rec.report))
    }

    fn assemble(
        cfg: MakaluConfig,
        pm: Pm,
        lay: Layout,
        chunks: Chunks,
        reclaim: Vec<(u64, u64)>,
        report: RecoveryReport,
    ) -> Arc<Makalu> {
        let on_reclaim: Box<[AtomicBool]> = (0..lay.nblocks).map(|_| AtomicBool::new(false)).collect();
        let lists: Box<[Mutex<Vec<u64>>]> = (0..CLASSES).map(|_| Mutex::new(Vec::new())).collect();
        for (b, sz) in reclaim {
            on_reclaim[b as usize].store(true, Ordering::Relaxed);
            lists[(sz / GRANULE) as usize].lock().unwrap().push(b);
        }
        Arc::new(Makalu {
            cfg,
            pm,
            lay,
            chunks: Mutex::new(chunks),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            on_reclaim,
            reclaim: lists,
            medium: (0..CLASSES).map(|_| Mutex::new(Vec::new())).collect(),
            live: LiveBytes::new(report.live_bytes, LIVE_SLOTS),
            report,
        })
    }

    /// Shuts down gracefully: gives the global free lists back to their
    /// blocks, makes every mark bit durable, marks the heap shut down, and
    /// gives the `Pm` back.
    pub fn close(self: Arc<Self>) -> Result<Pm, AllocError> {
        let mk = AllocError::sole_owner(self, NAME)?;
        let mut t = mk.pm.thread(0);
        t.op_begin(OpKind::Close, 0);
        let mut dirty = DirtyLines::new(mk.cfg.dirty_lines as usize);
        for list in mk.medium.iter() {
            let objs = std::mem::take(&mut *list.lock().unwrap());
            for o in objs {
                mk.release(&mut t, &mut dirty, o);
            }
        }
        dirty.drain(&mut t);
        mk.lay.set_state(&mut t, state::SHUTDOWN);
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

    /// The usable size of the object starting at `off`, if `off` starts one
    /// whose mark bit is set (allocated, or waiting in a free list).
    pub fn usable_size(&self, t: &PmThread, off: u64) -> Option<u64> {
        let b = self.lay.block_of(off)?;
        let h = self.lay.hdr(b);
        let rel = off - self.lay.block_off(b);
        match t.load_u64(h + H_FLAG) {
            flag::LARGE if rel == 0 => Some(t.load_u64(h + H_SZ)),
            flag::SMALL => {
                let sz = t.load_u64(h + H_SZ);
                let i = rel / sz;
                (rel.is_multiple_of(sz) && i < objs_per_block(sz) && mark_bit(t, h, i)).then_some(sz)
            }
            _ => None,
        }
    }

    /// Every object with its mark bit set, `(offset, usable size)` by address:
    /// the live objects when no free list holds any (right after open, or
    /// with no thread handle alive).
    pub fn marked_objects(&self, t: &PmThread) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        let top = t.load_u64(self.lay.rgn_curr_off());
        let mut b = 0;
        while b < top {
            let h = self.lay.hdr(b);
            let sz = t.load_u64(h + H_SZ);
            match t.load_u64(h + H_FLAG) {
                flag::SMALL => {
                    for i in (0..objs_per_block(sz)).filter(|&i| mark_bit(t, h, i)) {
                        v.push((self.lay.block_off(b) + i * sz, sz));
                    }
                    b += 1;
                }
                flag::LARGE => {
                    v.push((self.lay.block_off(b), sz));
                    b += sz / BLOCK;
                }
                _ => b += (sz / BLOCK).max(1),
            }
        }
        v
    }

    /// Checks the persistent metadata against itself and the chunk lists,
    /// as it must be when no thread holds objects in a free list (right
    /// after open): the headers tile the blocks below the bump pointer;
    /// every small block's count of marked objects is the number of its
    /// mark bits set, and no bit past its last object is set; the free
    /// chunks the headers describe are exactly the chunk lists; and no
    /// undo-log entry is open. The first disagreement, in one line.
    pub fn check(&self, t: &PmThread) -> Result<(), String> {
        let chunks = self.chunks.lock().unwrap();
        let top = t.load_u64(self.lay.rgn_curr_off());
        if top != chunks.top() {
            return Err(format!("bump pointer at block {top}, the chunk lists at {}", chunks.top()));
        }
        let walked = recovery::walk(t, &self.lay, top).map_err(|e| e.to_string())?;
        for &(b, k) in &walked.used {
            let recovery::Kind::Small(sz) = k else { continue };
            let h = self.lay.hdr(b);
            let n = objs_per_block(sz);
            let mut set = 0;
            for wi in 0..4u64 {
                let m = t.load_u64(h + H_MARKS + 8 * wi);
                let valid = layout::valid_marks(n, wi);
                if m & !valid != 0 {
                    return Err(format!("block {b}: mark bits set past its {n} objects of {sz} bytes"));
                }
                set += m.count_ones() as u64;
            }
            let count = t.load_u64(h + H_NMARKS);
            if count != set {
                return Err(format!("block {b}: hb_n_marks = {count} but {set} mark bits set"));
            }
        }
        let listed: Vec<(u64, u64)> = chunks.free_chunks().collect();
        if walked.free != listed {
            let first = walked.free.iter().zip(&listed).find(|(a, b)| a != b);
            return Err(format!(
                "{} free chunks in the headers, {} in the chunk lists (first difference: {:?})",
                walked.free.len(),
                listed.len(),
                first
            ));
        }
        if let Some(e) = self.lay.log().open_entry(t) {
            return Err(format!("undo-log entry {e} is open (stamped with the current version)"));
        }
        Ok(())
    }

    fn add_live(&self, tid: u32, bytes: i64) {
        self.live.add(tid, bytes);
    }

    fn stripe(&self, b: u64) -> std::sync::MutexGuard<'_, ()> {
        self.stripes[b as usize % STRIPES].lock().unwrap()
    }

    /// Gives object `o` back to its block: clears its mark bit (lazily
    /// visible); an emptied block returns to the chunk lists, a block with
    /// enough free objects to its reclaim list.
    fn release(&self, t: &mut PmThread, dirty: &mut DirtyLines, o: u64) {
        let b = self.lay.block_of(o).expect("object in the data area");
        let h = self.lay.hdr(b);
        let sz = t.load_u64(h + H_SZ);
        let i = (o - self.lay.block_off(b)) / sz;
        let n = objs_per_block(sz);
        let guard = self.stripe(b);
        let w = h + H_MARKS + 8 * (i / 64);
        t.store_u64(w, t.load_u64(w) & !(1 << (i % 64)));
        let marks = t.load_u64(h + H_NMARKS) - 1;
        t.store_u64(h + H_NMARKS, marks);
        dirty.note(t, h);
        if marks == 0 {
            self.on_reclaim[b as usize].store(false, Ordering::Relaxed);
            drop(guard);
            self.chunks.lock().unwrap().free_blocks(t, &self.lay, b, 1);
        } else if n - marks >= (self.cfg.reclaim_min as u64).min(n)
            && !self.on_reclaim[b as usize].load(Ordering::Relaxed)
        {
            self.on_reclaim[b as usize].store(true, Ordering::Relaxed);
            drop(guard);
            self.reclaim[(sz / GRANULE) as usize].lock().unwrap().push(b);
        }
    }

    /// Refills `list` with objects of `sz` bytes: sweeps a block from the
    /// reclaim list, else takes a new block. False when the heap is full.
    fn refill(&self, t: &mut PmThread, dirty: &mut DirtyLines, sz: u64, list: &mut Vec<u64>) -> bool {
        let g = (sz / GRANULE) as usize;
        let n = objs_per_block(sz);
        loop {
            let Some(b) = self.reclaim[g].lock().unwrap().pop() else { break };
            let _guard = self.stripe(b);
            let h = self.lay.hdr(b);
            if !self.on_reclaim[b as usize].load(Ordering::Relaxed)
                || t.load_u64(h + H_FLAG) != flag::SMALL
                || t.load_u64(h + H_SZ) != sz
            {
                continue; // left the list since (emptied, or now another size)
            }
            self.on_reclaim[b as usize].store(false, Ordering::Relaxed);
            let base = self.lay.block_off(b);
            for wi in 0..n.div_ceil(64) {
                let w = h + H_MARKS + 8 * wi;
                let old = t.load_u64(w);
                let free = !old & layout::valid_marks(n, wi);
                if free == 0 {
                    continue;
                }
                for bit in (0..64).rev().filter(|&bit| free >> bit & 1 == 1) {
                    list.push(base + (wi * 64 + bit) * sz);
                }
                t.store_u64(w, old | free);
            }
            t.store_u64(h + H_NMARKS, n);
            dirty.note(t, h);
            return true;
        }
        let Some(b) = self.chunks.lock().unwrap().alloc_blocks(t, &self.lay, 1, flag::SMALL, sz) else {
            return false;
        };
        let _guard = self.stripe(b);
        let h = self.lay.hdr(b);
        for wi in 0..4 {
            t.store_u64(h + H_MARKS + 8 * wi, layout::valid_marks(n, wi));
        }
        t.store_u64(h + H_NMARKS, n);
        dirty.note(t, h);
        let base = self.lay.block_off(b);
        list.extend((0..n).rev().map(|i| base + i * sz));
        true
    }
}

fn mark_bit(t: &PmThread, h: u64, i: u64) -> bool {
    t.load_u64(h + H_MARKS + 8 * (i / 64)) >> (i % 64) & 1 == 1
}

fn register_regions(t: &mut PmThread, lay: &Layout) {
    t.add_region("makalu base metadata", Category::Meta, layout::BASE, 4096);
    t.add_region("makalu undo log", Category::Wal, lay.log, 4096);
    t.add_region("makalu block headers", Category::Meta, lay.hdrs, lay.data - lay.hdrs);
    t.add_region("makalu blocks", Category::Data, lay.data, lay.nblocks * BLOCK);
}

impl Allocator for Makalu {
    type Config = MakaluConfig;
    const FAMILY: &'static str = "makalu";
    const PRESETS: &'static [&'static str] = &["makalu"];
    const ABOUT: &'static str = "Makalu-style allocator (lazy persistence, recovery by conservative mark)";

    fn create(heap: &Heap, pm: Pm, cfg: MakaluConfig) -> Result<Arc<Self>, AllocError> {
        Makalu::create(heap, pm, cfg)
    }

    fn open(heap: &Heap, pm: Pm, cfg: MakaluConfig) -> Result<Arc<Self>, AllocError> {
        Makalu::open(heap, pm, cfg)
    }

    fn close(self: Arc<Self>, _heap: &Heap) -> Result<Pm, AllocError> {
        Makalu::close(self)
    }

    fn crash_target(cfg: MakaluConfig) -> Result<Box<dyn CrashTarget>, String> {
        Ok(recovery_target::<Self>(cfg))
    }
}

impl Recoverable for Makalu {
    /// An allocation survives a crash only if the GC reaches it from the roots.
    fn plain_mallocs_durable(_cfg: &MakaluConfig) -> bool {
        false
    }

    /// The offline GC keeps what its conservative mark reaches (§9.2).
    fn reachability_recovery(_cfg: &MakaluConfig) -> bool {
        true
    }

    /// Right after open no free list holds an object: the marked ones are live.
    fn live_blocks(&self, t: &mut MakaluThread) -> Vec<(u64, u64)> {
        t.marked_objects()
    }

    /// See [`Makalu::check`].
    fn check_metadata(&self, t: &mut MakaluThread) -> Result<(), String> {
        self.check(t.pm())
    }
}

impl PmAllocator for Makalu {
    type Thread = MakaluThread;

    fn name(&self) -> String {
        "makalu".into()
    }

    fn params(&self) -> serde_json::Map<String, serde_json::Value> {
        as_map(&self.cfg)
    }

    fn thread(self: &Arc<Self>, tid: u32) -> MakaluThread {
        MakaluThread::new(self.clone(), tid)
    }

    fn footprint(&self) -> Footprint {
        let top = self.chunks.lock().unwrap().top();
        Footprint { live_bytes: self.live.get(), mapped_bytes: self.lay.data + top * BLOCK }
    }
}
