//! An nvm_malloc-style allocator (Schwalb, Berning, Faust, Dreseler,
//! Plattner, ADMS '15; public code IMCG/nvm-malloc) on a pmsim heap,
//! persisted as its code persists.
//!
//! Allocation takes two steps: `nvm_reserve(size)` finds space in DRAM
//! only ([`arena`]); `nvm_activate(ptr, link…)` makes it durable and, when
//! given a *link pointer* (a persistent slot of the caller, with the value
//! to put there), publishes it failure-atomically. `nvm_free(ptr, link…)`
//! is the reverse. pmsim's `malloc` is reserve + activate without a link,
//! `malloc_to(size, dest)` reserve + activate with `dest` as the link
//! slot, `free_from(dest)` a free that clears `dest` through the link.
//! Threads map to 20 arenas (`INITIAL_ARENAS`) round robin; objects up to
//! 1,984 B live in 4 KiB runs of 64 B steps, up to 2 MiB in page runs, the
//! rest in whole chunks.
//!
//! # The persist sequence (the code's, `nvm_malloc.c`, `arena.c`)
//!
//! `PERSIST(p)` is mfence, clflush, mfence (the code's build without
//! clwb/clflushopt; `persist_sync`). Activating a small object:
//!
//! 1. the object's offset goes into the next of 127 slots of the
//!    activation log in the meta page (8 to a line) and is persisted;
//! 2. a locked CAS moves the run header from *initialized* to
//!    *pre-activate* (one operation per run at a time); the bit index is
//!    stored;
//! 3. with a link: the link slot and its value go into the header (`on`),
//!    sfence, state *activating*, sfence, the slot is written and persisted;
//! 4. sfence, the bitmap bit set, sfence, state *initialized*, sfence, the
//!    bit index and `on` cleared, and the header line persisted.
//!
//! Freeing is the same without step 1 (no log entry): CAS to *pre-free*,
//! with a link *freeing* and the slot written and persisted, the bit
//! cleared, the header persisted. Large and huge objects follow it without
//! the CAS and the bitmap. A malloc + free pair of a small object without
//! links: 3 flushes (the log slot, the header twice) and 14 fences (6
//! mfences of the 3 persists, 6 sfences, 2 locked CASes); a link adds to
//! each operation 1 flush and 4 fences (two sfences around the state
//! change, the slot's persist).
//!
//! # The shipped code, and the intended protocol
//!
//! The shipped flush helper takes its pointer argument as the memory
//! operand (`asm("clflush %0" : "+m"(ptr))`), so it flushes the stack slot
//! holding the pointer, never persistent memory, while every fence still
//! runs; and `PERSIST(*link_ptr)` passes the slot's value instead of the
//! slot. `nvm-malloc:shipped=true` reproduces the former (no persistent
//! line is ever flushed; the fences stay); the default is the intended
//! protocol, both fixed.
//!
//! The intended protocol still has a window under ADR: the header's
//! *activating* / *freeing* state and its `on` words are ordered before the
//! link slot's persist by sfences only, so a crash after the slot is
//! durable can find the header as it was and the slot naming a block the
//! bitmap says is free (an interrupted free leaves the block allocated and
//! unnamed). `pmsim crash` finds it; `strict=true` persists the header
//! line in place of that sfence, which closes it.
//!
//! # Where pmsim simplifies
//!
//! nvm_malloc's two files (meta page, backing file) are one pmsim heap
//! ([`layout`]); an arena's first chunk is taken when the arena is first
//! used (the code formats all 20 at start, 80 MiB); a large object's pages
//! include its header (the code rounds the object alone and overruns its
//! last page by 64 B); named allocations (the object table) are not
//! offered; recovery repairs every run it finds mid-operation, not only
//! those an activation-log slot names ([`recovery`]); a freed huge object's
//! chunks are found again by the chunk walk. The code's open replays the
//! activation log and returns, and a thread of its own walks the chunks
//! meanwhile (and a free of an object in a run it has not reached yet
//! rebuilds that run's volatile header itself); pmsim walks them inside
//! the open and times the walk apart, so an open's recovery time is the
//! code's, without the walk, unless `background_walk=false`.
//!
//! Internal work at create, open and close runs on thread id 0.

pub mod arena;
pub mod layout;
pub mod mutation;
pub mod recovery;
pub mod thread;

pub use mutation::Mutation;
pub use recovery::RecoveryReport;
pub use thread::NvmThread;

use crate::alloc::{Allocator, CrashRules, Footprint, HeapNeed, Params};
use crate::config::AllocConfig;
use crate::error::AllocError;
use crate::heap::Heap;
use crate::live::LiveBytes;
use crate::mech::lock::TracedMutex;
use crate::mech::regions::HeadedArea;
use crate::params::as_map;
use crate::pm::{Pm, PmThread};
use arena::Arena;
use layout::{
    state, usage, Layout, BLOCK, CHUNK, CHUNKS_USED, HDR, H_ON, H_ON_PTR, H_ON_VALUE, H_SIZE, H_STATE, LARGE_MAX,
    LOG_SLOTS, R_BITMAP, R_MISC, SMALL_MAX,
};
use pmsim_traces::{Category, OpKind};
use recovery::Kind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The allocator's name in messages and the registry's `--help`.
pub const NAME: &str = "nvm_malloc";

/// The parameters of an nvm_malloc-style heap (`nvm-malloc:key=value`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NvmConfig {
    /// Arenas threads map to round robin (`INITIAL_ARENAS`).
    pub arenas: u32,
    /// Reproduce the shipped code: its flushes hit a stack slot, never
    /// persistent memory (every fence still runs).
    pub shipped: bool,
    /// Persist the header's activating / freeing state before the link
    /// slot changes (closes the intended protocol's ADR window).
    pub strict: bool,
    /// A removed flush, for checkers to catch (`dest-flush`: the link
    /// slot's persist).
    pub mutation: Mutation,
    /// Count the chunk walk of an open as the code runs it: on a thread of
    /// its own after the open has returned (`nvm_recovery_thread`), so not
    /// in the open's recovery time ([`crate::Allocator::deferred_recovery_s`]).
    /// `false`: the program waits for the walk too.
    pub background_walk: bool,
}

impl Default for NvmConfig {
    fn default() -> Self {
        NvmConfig { arenas: 20, shipped: false, strict: false, mutation: Mutation::None, background_walk: true }
    }
}

impl AllocConfig for NvmConfig {
    const ALLOC: &'static str = NAME;

    fn validate(&self) -> Result<(), AllocError> {
        let bad = |m: String| Err(AllocError::config(NAME, m));
        if !(1..=256).contains(&self.arenas) {
            return bad(format!("arenas = {} (must be 1..=256)", self.arenas));
        }
        Ok(())
    }
}

/// Per-thread live-byte counters (by thread id modulo).
const LIVE_SLOTS: usize = 64;

/// An nvm_malloc-style heap, shared by all threads of a run.
pub struct NvmMalloc {
    cfg: NvmConfig,
    pm: Pm,
    lay: Layout,
    /// The arenas, each under its lock (`arena->mtx`); the locks here are
    /// the code's, traced so the replay makes threads wait at them.
    arenas: Box<[TracedMutex<Arena>]>,
    /// Free huge chunk runs `(chunks, header)` (`free_chunks`, under `chunk_mtx`).
    huge: TracedMutex<BTreeSet<(u64, u64)>>,
    /// Serialises chunk activation (`chunk_mtx`).
    chunk_lock: TracedMutex<()>,
    /// The next activation-log slot (`next_log_entry`).
    next_log: AtomicU64,
    /// Chunks in use (a copy of the persistent count, for footprints).
    chunks_used: AtomicU64,
    /// `current_version`: runs stamped older were made before the last open.
    version: u64,
    live: LiveBytes,
    report: RecoveryReport,
    /// Seconds the last open spent walking the chunks, which the code does
    /// after its open has returned (zero after a create).
    walk_s: f64,
    /// The chunks' regions: user data, except the headers inside them.
    regions: HeadedArea,
}

impl NvmMalloc {
    /// Formats a new heap on `heap` (`nvm_initialize_empty`).
    pub fn create(heap: &Heap, pm: Pm, cfg: NvmConfig) -> Result<Arc<NvmMalloc>, AllocError> {
        cfg.validate()?;
        let mut t = pm.thread(0);
        if Layout::present(&t) {
            return Err(AllocError::exists(NAME, "already holds an nvm_malloc heap (open it instead)").in_file(heap));
        }
        t.op_begin(OpKind::Init, 0);
        let lay = Layout::plan(heap.size()).map_err(|e| e.in_file(heap))?;
        let regions = register_regions(&mut t, &lay);
        lay.format(&mut t);
        t.op_end(OpKind::Init, 0);
        drop(t);
        let rec = recovery::Recovered::empty(cfg.arenas);
        Ok(Arc::new(NvmMalloc::assemble(cfg, pm, lay, rec, regions)))
    }

    /// Opens the heap on `heap`, repairing what a crash interrupted
    /// (`nvm_initialize_recovered`).
    pub fn open(heap: &Heap, pm: Pm, cfg: NvmConfig) -> Result<Arc<NvmMalloc>, AllocError> {
        cfg.validate()?;
        let mut t = pm.thread(0);
        let lay = Layout::read(&t, heap.size()).map_err(|e| e.in_file(heap))?;
        t.op_begin(OpKind::Recovery, 0);
        let regions = register_regions(&mut t, &lay);
        let rec = recovery::recover(&mut t, &lay, &cfg, !heap.was_clean()).map_err(|e| e.in_file(heap))?;
        regions.paint_headers(&mut t, &rec.headers);
        t.op_end(OpKind::Recovery, 0);
        drop(t);
        Ok(Arc::new(NvmMalloc::assemble(cfg, pm, lay, rec, regions)))
    }

    fn assemble(cfg: NvmConfig, pm: Pm, lay: Layout, rec: recovery::Recovered, regions: HeadedArea) -> NvmMalloc {
        let report = rec.report;
        NvmMalloc {
            walk_s: rec.walk_s,
            cfg,
            pm,
            lay,
            arenas: rec.arenas.into_iter().map(TracedMutex::new).collect(),
            huge: TracedMutex::new(rec.huge),
            chunk_lock: TracedMutex::new(()),
            next_log: AtomicU64::new(0),
            chunks_used: AtomicU64::new(report.chunks),
            version: rec.version,
            live: LiveBytes::new(report.live_bytes, LIVE_SLOTS),
            report,
            regions,
        }
    }

    /// Closes the heap (`nvm_teardown`: it only unmaps).
    pub fn close(self: Arc<Self>) -> Result<Pm, AllocError> {
        let nvm = AllocError::sole_owner(self, NAME)?;
        Ok(nvm.pm)
    }

    pub fn config(&self) -> &NvmConfig {
        &self.cfg
    }

    pub fn layout(&self) -> &Layout {
        &self.lay
    }

    /// What the open that made this instance found.
    pub fn recovery(&self) -> RecoveryReport {
        self.report
    }

    fn current_version(&self) -> u64 {
        self.version
    }

    /// The arena thread `tid` uses.
    fn arena(&self, tid: u32) -> &TracedMutex<Arena> {
        &self.arenas[tid as usize % self.arenas.len()]
    }

    /// `PERSIST(p)`: mfence, flush, mfence — the shipped code's flush hits
    /// a stack slot, so only the fences reach the trace.
    #[track_caller]
    fn persist(&self, t: &mut PmThread, off: u64) {
        if self.cfg.shipped {
            t.mfence();
            t.mfence();
        } else {
            t.persist_sync(off);
        }
    }

    /// `PERSIST_RANGE(p, len)`.
    #[track_caller]
    fn persist_range(&self, t: &mut PmThread, off: u64, len: u64) {
        t.mfence();
        if !self.cfg.shipped {
            t.flush_range(off, len);
        }
        t.mfence();
    }

    /// Takes `n` new chunks from the backing file (`activate_more_chunks`):
    /// the first, or `None` when the heap has no room.
    fn activate_chunks(&self, t: &mut PmThread, n: u64) -> Option<u64> {
        self.chunk_lock.with(t, |_, t| {
            let used = t.load_u64(CHUNKS_USED);
            if used + n > self.lay.capacity {
                return None;
            }
            // The file grows (posix_fallocate): durable file-system metadata.
            t.store_u64(CHUNKS_USED, used + n);
            t.persist(CHUNKS_USED, 8);
            self.chunks_used.store(used + n, Ordering::Relaxed);
            Some(used)
        })
    }

    /// Reserves `size` bytes (`nvm_reserve`): an offset nothing persistent names yet.
    fn reserve(&self, t: &mut PmThread, size: u64) -> Option<u64> {
        if size <= SMALL_MAX {
            self.arena(t.tid()).with(t, |a, t| self.reserve_small(t, a, size))
        } else if size <= LARGE_MAX {
            self.arena(t.tid()).with(t, |a, t| self.reserve_large(t, a, size))
        } else {
            self.reserve_huge(t, size)
        }
    }

    /// Whole chunks for `size` bytes (`nvm_reserve`'s huge path, `nvm_reserve_huge`).
    fn reserve_huge(&self, t: &mut PmThread, size: u64) -> Option<u64> {
        let n = (size + HDR + CHUNK) / CHUNK;
        let fit = self.huge.with(t, |huge, _| {
            let fit = huge.range((n, 0)..).next().copied();
            if let Some(f) = fit {
                huge.remove(&f);
            }
            fit
        });
        let hdr = match fit {
            Some((have, h)) if have > n => {
                let hdr = h + (have - n) * CHUNK;
                self.regions.paint_header(t, hdr, HDR, hdr + n * CHUNK);
                t.store_u64(hdr + H_STATE, usage::FREE | state::INITIALIZED);
                t.store_u64(hdr + H_SIZE, n);
                self.persist(t, hdr);
                t.store_u64(h + H_SIZE, have - n);
                self.huge.with(t, |huge, _| huge.insert((have - n, h)));
                hdr
            }
            Some((_, h)) => {
                self.regions.paint_header(t, h, HDR, h + n * CHUNK);
                h
            }
            None => {
                let c = self.activate_chunks(t, n)?;
                let hdr = self.lay.chunk_off(c);
                self.regions.paint_header(t, hdr, HDR, hdr + n * CHUNK);
                t.store_u64(hdr + H_STATE, usage::HUGE | state::INITIALIZING);
                t.store_u64(hdr + H_SIZE, n);
                t.store_bytes(hdr + H_ON, &[0; 32]);
                self.persist(t, hdr);
                hdr
            }
        };
        Some(hdr + HDR)
    }

    /// Records `ptr` in the next activation-log slot (`log_activate`).
    #[track_caller]
    fn log_activate(&self, t: &mut PmThread, ptr: u64) {
        let i = self.next_log.fetch_add(1, Ordering::Relaxed) % LOG_SLOTS;
        let slot = self.lay.slot(i);
        t.store_u64(slot, ptr);
        self.persist(t, slot);
    }

    /// What kind of object `ptr` is and the header it has.
    fn classify(&self, t: &PmThread, ptr: u64) -> (Kind, u64) {
        recovery::classify(t, &self.lay, ptr)
    }

    /// Steps 3's first half: the header says what is under way and where
    /// the link goes; then the link slot is written and persisted.
    #[track_caller]
    fn publish(&self, t: &mut PmThread, hdr: u64, under_way: u64, link: (u64, u64)) {
        let (slot, value) = link;
        t.store_u64(hdr + H_ON_PTR, slot);
        t.store_u64(hdr + H_ON_VALUE, value);
        t.fence();
        t.store_u64(hdr + H_STATE, under_way);
        if self.cfg.strict {
            self.persist(t, hdr);
        } else {
            t.fence();
        }
        t.store_u64(slot, value);
        if self.cfg.mutation == Mutation::DestFlush {
            t.mfence(); // the mutation: the fences stay, the flush goes
            t.mfence();
        } else {
            self.persist(t, slot);
        }
    }

    /// `nvm_activate(ptr, link)`: makes a reserved object durable and, with
    /// a link `(slot, value)`, publishes it failure-atomically.
    pub fn activate(&self, t: &mut PmThread, ptr: u64, link: Option<(u64, u64)>) {
        self.log_activate(t, ptr);
        let (kind, hdr) = self.classify(t, ptr);
        match kind {
            Kind::Huge | Kind::Block => {
                let u = if kind == Kind::Huge { usage::HUGE } else { usage::BLOCK };
                if let Some(l) = link {
                    self.publish(t, hdr, u | state::ACTIVATING, l);
                    t.fence();
                }
                t.store_u64(hdr + H_STATE, u | state::INITIALIZED);
                t.fence();
                t.store_bytes(hdr + H_ON, &[0; 32]);
                self.persist(t, hdr);
            }
            Kind::Run => {
                let size = t.load_u64(hdr + H_SIZE);
                let i = (ptr - hdr - HDR) / size;
                self.cas_state(t, hdr, state::PREACTIVATE);
                let m = t.load_u64(hdr + R_MISC);
                t.store_u64(hdr + R_MISC, layout::misc(Some(i), layout::misc_arena(m), layout::misc_version(m)));
                if let Some(l) = link {
                    self.publish(t, hdr, usage::RUN | state::ACTIVATING, l);
                }
                t.fence();
                t.store_u64(hdr + R_BITMAP, t.load_u64(hdr + R_BITMAP) | 1 << i);
                t.fence();
                self.finish_run(t, hdr);
            }
        }
    }

    /// `nvm_free(ptr, link)`: frees an activated object and, with a link
    /// `(slot, value)`, writes the slot failure-atomically.
    pub fn release(&self, t: &mut PmThread, ptr: u64, link: Option<(u64, u64)>) {
        let (kind, hdr) = self.classify(t, ptr);
        match kind {
            Kind::Huge | Kind::Block => {
                let u = if kind == Kind::Huge { usage::HUGE } else { usage::BLOCK };
                assert_eq!(t.load_u64(hdr + H_STATE), u | state::INITIALIZED, "free of {ptr:#x}: not allocated");
                if let Some(l) = link {
                    self.publish(t, hdr, u | state::FREEING, l);
                    t.fence();
                }
                t.store_u64(hdr + H_STATE, usage::FREE | state::INITIALIZED);
                t.fence();
                t.store_bytes(hdr + H_ON, &[0; 32]);
                self.persist(t, hdr);
                let n = t.load_u64(hdr + H_SIZE);
                if kind == Kind::Huge {
                    self.huge.with(t, |huge, _| huge.insert((n, hdr)));
                } else {
                    let a = t.load_u64(hdr + layout::B_ARENA) as usize % self.arenas.len();
                    self.arenas[a].with(t, |a, _| a.free.insert((n, hdr)));
                }
            }
            Kind::Run => {
                let size = t.load_u64(hdr + H_SIZE);
                let i = (ptr - hdr - HDR) / size;
                self.cas_state(t, hdr, state::PREFREE);
                let m = t.load_u64(hdr + R_MISC);
                t.store_u64(hdr + R_MISC, layout::misc(Some(i), layout::misc_arena(m), layout::misc_version(m)));
                if let Some(l) = link {
                    self.publish(t, hdr, usage::RUN | state::FREEING, l);
                }
                t.fence();
                let bm = t.load_u64(hdr + R_BITMAP);
                assert!(bm >> i & 1 == 1, "free of {ptr:#x}: not allocated");
                t.store_u64(hdr + R_BITMAP, bm & !(1 << i));
                t.fence();
                self.finish_run(t, hdr);
                let a = layout::misc_arena(m) as usize % self.arenas.len();
                self.arenas[a].with(t, |a, _| self.unreserve_small(a, hdr, i));
            }
        }
    }

    /// The locked CAS that makes an operation the run's only one.
    fn cas_state(&self, t: &mut PmThread, hdr: u64, to: u64) {
        let from = usage::RUN | state::INITIALIZED;
        while t.cas_u64(hdr + H_STATE, from, usage::RUN | to).is_err() {
            std::hint::spin_loop();
        }
    }

    /// Step 4's end: state initialized, bit index and links cleared, the line persisted.
    fn finish_run(&self, t: &mut PmThread, hdr: u64) {
        t.store_u64(hdr + H_STATE, usage::RUN | state::INITIALIZED);
        t.fence();
        let m = t.load_u64(hdr + R_MISC);
        t.store_u64(hdr + R_MISC, layout::misc(None, layout::misc_arena(m), layout::misc_version(m)));
        t.store_bytes(hdr + H_ON, &[0; 32]);
        self.persist(t, hdr);
    }

    /// The usable size of the activated object at `off`, if it is one.
    pub fn usable_size(&self, t: &PmThread, off: u64) -> Option<u64> {
        let c = self.lay.chunk_of(off)?;
        if c >= self.chunks_used.load(Ordering::Relaxed) || off < self.lay.chunk_off(c) + HDR {
            return None;
        }
        let (kind, hdr) = self.classify(t, off);
        let st = t.load_u64(hdr + H_STATE);
        let n = t.load_u64(hdr + H_SIZE);
        match kind {
            Kind::Huge => (st == usage::HUGE | state::INITIALIZED).then(|| n * CHUNK - HDR),
            Kind::Block => (st == usage::BLOCK | state::INITIALIZED && off == hdr + HDR).then(|| n * BLOCK - HDR),
            Kind::Run => {
                let rel = off - hdr - HDR;
                let i = rel / n.max(1);
                let ok = n > 0
                    && rel.is_multiple_of(n)
                    && i < layout::run_objects(n)
                    && t.load_u64(hdr + R_BITMAP) >> i & 1 == 1;
                ok.then_some(n)
            }
        }
    }
}

/// Registers the meta page, and the chunks as user data: nvm_malloc's
/// headers lie inside its chunks (a chunk's first 4 KiB, and the first 64 B
/// of each run, page run and huge object), and are painted as metadata as
/// they are made ([`HeadedArea::paint_header`]) or found (at open),
/// so that their flushes count as metadata.
fn register_regions(t: &mut PmThread, lay: &Layout) -> HeadedArea {
    t.add_region("nvm_malloc meta page (activation log)", Category::Log, layout::META, BLOCK);
    HeadedArea::register(t, "nvm_malloc chunks", "nvm_malloc headers", lay.chunks, lay.chunks + lay.capacity * CHUNK)
}

impl Allocator for NvmMalloc {
    type Config = NvmConfig;
    type Thread = NvmThread;
    const FAMILY: &'static str = "nvm-malloc";
    const ABOUT: &'static str =
        "nvm_malloc-style allocator as its code persists (reserve/activate with link pointers, \
                                 4 KiB runs, activation log; shipped=true: the shipped code, which flushes no \
                                 persistent memory; strict=true: header persisted before the link)";
    /// The shipped code and the strict protocol persist differently: checked too.
    const VARIANTS: &'static [&'static str] = &["nvm-malloc:shipped=true", "nvm-malloc:strict=true"];
    const MUTANTS: &'static [&'static str] = &["nvm-malloc:strict=true:mutation=dest-flush"];

    fn create(heap: &Heap, pm: Pm, cfg: NvmConfig) -> Result<Arc<Self>, AllocError> {
        NvmMalloc::create(heap, pm, cfg)
    }

    fn open(heap: &Heap, pm: Pm, cfg: NvmConfig) -> Result<Arc<Self>, AllocError> {
        NvmMalloc::open(heap, pm, cfg)
    }

    fn close(self: Arc<Self>, _heap: &Heap) -> Result<Pm, AllocError> {
        NvmMalloc::close(self)
    }

    fn thread(self: &Arc<Self>, tid: u32) -> NvmThread {
        NvmThread::new(self.clone(), tid)
    }

    fn params(&self) -> Params {
        as_map(&self.cfg)
    }

    fn footprint(&self) -> Footprint {
        let used = self.chunks_used.load(Ordering::Relaxed);
        Footprint { live_bytes: self.live.get(), mapped_bytes: self.lay.chunks + used * CHUNK }
    }

    fn live_blocks(&self, t: &mut NvmThread) -> Vec<(u64, u64)> {
        recovery::live(t.pm(), &self.lay).unwrap_or_default()
    }

    fn name(&self) -> String {
        match (self.cfg.shipped, self.cfg.strict) {
            (true, _) => "nvm-malloc:shipped=true".into(),
            (false, true) => "nvm-malloc:strict=true".into(),
            _ => "nvm-malloc".into(),
        }
    }

    fn variant(cfg: &NvmConfig) -> String {
        match (cfg.shipped, cfg.strict) {
            (true, _) => "shipped".into(),
            (false, true) => "strict".into(),
            _ => String::new(),
        }
    }

    /// The workload's own estimate, plus a chunk per arena in use and one
    /// more (chunks are taken whole: 4 MiB each).
    fn heap_size(cfg: &NvmConfig, need: &HeapNeed) -> u64 {
        let arenas = need.threads.min(cfg.arenas) as u64 + 1;
        let want = need.hint.saturating_mul(2).saturating_add(arenas * CHUNK);
        want.div_ceil(2 << 20) * (2 << 20)
    }

    /// Activation persists the bitmap before it returns. Without `strict`
    /// a free through a link can make the cleared slot durable before the
    /// header (the block stays allocated, unnamed), and an activation can
    /// make the slot durable while the header still says nothing happened:
    /// the intended protocol's ADR window, which the explorer reports. The
    /// shipped code flushes nothing: the explorer reports whatever it finds
    /// first.
    fn crash_rules(cfg: &NvmConfig) -> Result<CrashRules, String> {
        let expected = match (cfg.shipped, cfg.strict) {
            (true, _) => Some(""),
            (false, false) => Some("not atomic"),
            (false, true) => None,
        };
        Ok(CrashRules {
            plain_mallocs_durable: true,
            interrupted_may_lose: !cfg.strict,
            expected_violation: expected,
            ..CrashRules::default()
        })
    }

    /// The chunk walk, which the code runs on a thread of its own after
    /// `nvm_initialize` has returned (see [`NvmConfig::background_walk`]).
    fn deferred_recovery_s(&self) -> f64 {
        if self.cfg.background_walk {
            self.walk_s
        } else {
            0.0
        }
    }

    fn check_metadata(&self, t: &mut NvmThread) -> Result<(), String> {
        recovery::check(t.pm(), &self.lay, self)
    }
}
