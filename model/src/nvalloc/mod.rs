//! NVAlloc (Dang et al., ASPLOS '22) on a pmsim heap: the allocator every
//! later measurement is about, with each of its techniques behind its own
//! switch ([`NvAllocConfig`]).
//!
//! * Small requests (< 16 KiB) are rounded to a size class ([`crate::mech::sizeclass`])
//!   and served from 64 KiB slabs ([`slab`]) through a per-thread LIFO
//!   tcache ([`tcache`]) refilled from the thread's arena ([`arena`]). Slab
//!   bitmaps may be interleaved over bit stripes, tcaches split into
//!   sub-tcaches per stripe, and WAL entries spread over lines (§5.1).
//! * Large requests and slabs come from the large allocator ([`large`]):
//!   VEHs in DRAM, persistent records in the bookkeeping log (§5.3) or in
//!   in-place extent headers (the baseline).
//! * Crash consistency (`log` model): under `wal=strict`, `malloc_to`/`free_from`
//!   bracket their metadata and `*dest` updates with a WAL entry ([`thread`]);
//!   under `wal=artifact` (the default), only a `malloc_to` writes one, as
//!   NVAlloc's public code does, and it is never cleared. Opening the heap
//!   rebuilds everything and, after a crash, replays the WAL ([`recovery`]).
//!
//! * Crash consistency (`gc` model, NVAlloc-GC): small operations flush no
//!   metadata; after a crash recovery marks the blocks reachable from the
//!   persistent roots (conservatively, as Makalu does) and rebuilds the bitmaps.
//!
//! * Slab morphing (§5.2, switch `morphing`): a refill that finds no slab
//!   of its class morphs a little-used slab of another class ([`arena`],
//!   header steps in [`slab`], undo after a crash in [`recovery`]).
//!
//! # Use
//!
//! ```no_run
//! # use pmsim_model::{Heap, Pm, FlushInsn, Allocator, AllocThread};
//! # use pmsim_model::nvalloc::{NvAlloc, NvAllocConfig};
//! let heap = Heap::create("/dev/shm/x.heap", 256 << 20)?;
//! let pm = Pm::native(&heap, FlushInsn::best())?;
//! let nv = NvAlloc::create(&heap, pm, NvAllocConfig::preset("nvalloc-log")?)?;
//! let mut t = nv.thread(0);
//! let obj = t.malloc_to(100, pmsim_model::heap::Heap::root_offset(0)).unwrap();
//! t.write(obj, b"hello");
//! drop(t);
//! let _pm = nv.close()?;
//! heap.close()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Internal work at create, open and close runs on thread id 0: no thread
//! handle with id 0 may be alive then.

pub mod arena;
pub mod config;
pub mod decay;
pub mod large;
pub mod layout;
pub mod mutation;
pub mod recovery;
pub mod slab;
pub mod tcache;
pub mod thread;

pub use config::{Consistency, LogGc, Mutation, NvAllocConfig, WalMode};
pub use recovery::RecoveryReport;
pub use thread::NvAllocThread;

use crate::alloc::{Allocator, CrashRules, Footprint, Params, SlabUtilization};
use crate::config::AllocConfig;
use crate::error::AllocError;
use crate::heap::Heap;
use crate::live::LiveBytes;
use crate::mech::bklog::BkLog;
use crate::mech::exthdr::ExtentHeaders;
use crate::mech::sizeclass::SizeClasses;
use crate::mech::stripe::StripeMap;
use crate::mech::wal::Wal;
use crate::params::as_map;
use crate::pm::{Pm, PmThread};
use arena::Arena;
use large::{Bookkeeping, LargeAlloc, LargeParams, LargeStats};
use layout::{ArenaState, Layout, CHUNK, SLAB};
use pmsim_traces::OpKind;
use slab::{SlabGeom, SlabTable};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The allocator's name in messages and the registry's `--help`.
pub const NAME: &str = "NVAlloc";

/// Small requests are those below this (the paper's 16 KB boundary).
pub const SMALL_LIMIT: u32 = 16 << 10;
/// The size-class quantum: requests are rounded up to a cache line first.
pub const QUANTUM: u32 = 64;

/// An NVAlloc instance on one heap, shared by all threads of a run.
pub struct NvAlloc {
    cfg: NvAllocConfig,
    pm: Pm,
    layout: Layout,
    classes: SizeClasses,
    geoms: Vec<SlabGeom>,
    tcache_caps: Vec<usize>,
    map: StripeMap,
    slabs: SlabTable,
    arenas: Vec<Arena>,
    large: LargeAlloc,
    wal: Wal,
    /// Per thread id: the count of WAL entries written by its earlier
    /// handles, where the next handle's cursor continues.
    wal_next: Box<[AtomicU64]>,
    /// Usable bytes live: those at open plus a counter per thread id.
    live: LiveBytes,
    report: RecoveryReport,
    /// Test hook: a morph stops after this step (1..=3; 0 = never), as if
    /// the process died there.
    morph_crash_after: std::sync::atomic::AtomicU64,
}

/// Slab-morphing counters of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MorphStats {
    /// Slabs morphed into another class.
    pub morphs: u64,
    /// Slab_ins that became regular slabs again (last old block freed).
    pub unmorphs: u64,
    /// Slab_ins now.
    pub slabs_in: u64,
    /// Live old blocks in them now.
    pub old_blocks: u64,
}

/// The parts of an instance that depend only on the configuration.
struct Statics {
    classes: SizeClasses,
    geoms: Vec<SlabGeom>,
    tcache_caps: Vec<usize>,
    map: StripeMap,
}

impl Statics {
    fn new(cfg: &NvAllocConfig) -> Statics {
        let classes = SizeClasses::jemalloc(QUANTUM, SMALL_LIMIT);
        let map = StripeMap::new(cfg.stripes);
        let geoms: Vec<SlabGeom> = classes.sizes().iter().map(|&s| SlabGeom::regular(s, map)).collect();
        let tcache_caps = geoms.iter().map(|g| (g.nblocks as usize).clamp(4, cfg.tcache_max as usize)).collect();
        Statics { classes, geoms, tcache_caps, map }
    }
}

/// The slab geometry of every size class and the bitmaps' block-to-bit
/// mapping under `cfg`: what a reader of a trace needs to decode slabs.
pub fn slab_geometry(cfg: &NvAllocConfig) -> (Vec<SlabGeom>, StripeMap) {
    let s = Statics::new(cfg);
    (s.geoms, s.map)
}

fn large_params(cfg: &NvAllocConfig, heap_size: u64) -> LargeParams {
    LargeParams {
        gc_interval: cfg.gc_interval,
        gc: cfg.log_gc,
        slow_gc_bytes: (cfg.usage_pmem * heap_size as f64) as u64,
        decay_ops: cfg.decay_ops,
    }
}

impl NvAlloc {
    /// Formats a new NVAlloc heap on `heap` (which must not hold one yet) and
    /// returns the allocator, which does all persistence through `pm`.
    pub fn create(heap: &Heap, pm: Pm, cfg: NvAllocConfig) -> Result<Arc<NvAlloc>, AllocError> {
        cfg.validate()?;
        let st = Statics::new(&cfg);
        let mut t = pm.thread(0);
        if Layout::read(&t).is_ok() {
            return Err(AllocError::exists(NAME, "already holds an NVAlloc heap (open it instead)").in_file(heap));
        }
        t.op_begin(OpKind::Init, 0);
        let layout = Layout::plan(heap.size(), &cfg).map_err(|e| e.in_file(heap))?;
        let tiler = large::static_regions(&mut t, &layout);
        layout.write(&mut t, &cfg)?;
        let book = if cfg.bookkeeping_log {
            let mut log = BkLog::format(&mut t, layout.log_off, layout.log_bytes, cfg.interleaved_log)
                .map_err(|m| AllocError::too_small(NAME, m).in_file(heap))?;
            log.set_alt_flush(cfg.mutation != Mutation::LogAltFlush);
            Bookkeeping::Log(log)
        } else {
            Bookkeeping::Headers(ExtentHeaders::new(CHUNK))
        };
        let params = large_params(&cfg, heap.size());
        let large = LargeAlloc::new(&mut t, layout, layout.chunk_base, book, &[], &[], params, tiler)
            .map_err(|m| AllocError::corrupt(NAME, m))?;
        let narenas = cfg.arena_count();
        layout.set_arena_states(&mut t, narenas, ArenaState::Running);
        t.op_end(OpKind::Init, 0);
        drop(t);
        let report = RecoveryReport::default();
        Ok(NvAlloc::assemble(cfg, pm, layout, st, large, Vec::new(), report))
    }

    /// Opens the NVAlloc heap on `heap`, recovering after a crash (see
    /// [`recovery`]). `cfg` must agree with the heap's layout fields
    /// (stripes, bookkeeping log, WAL shape); the rest (tcache, GC policy,
    /// arenas, interleaving of new WAL entries and log records) may differ.
    pub fn open(heap: &Heap, pm: Pm, cfg: NvAllocConfig) -> Result<Arc<NvAlloc>, AllocError> {
        cfg.validate()?;
        let st = Statics::new(&cfg);
        let mut t = pm.thread(0);
        let (layout, stored) = Layout::read(&t).map_err(|e| e.in_file(heap))?;
        if let Some(m) = cfg.layout_mismatch(&stored) {
            return Err(AllocError::config(NAME, m).in_file(heap));
        }
        t.op_begin(OpKind::Recovery, 0);
        let tiler = large::static_regions(&mut t, &layout);
        let crashed = !heap.was_clean() || layout.any_arena_unclean(&t);
        let narenas = cfg.arena_count();
        layout.set_arena_states(&mut t, narenas, ArenaState::Recovery);
        let wal = cfg.wal_at(layout.wal_off);
        let params = large_params(&cfg, heap.size());
        let rec = recovery::recover(&mut t, layout, &cfg, crashed, &st.geoms, st.map, &wal, params, tiler)
            .map_err(|e| e.in_file(heap))?;
        layout.set_arena_states(&mut t, narenas, ArenaState::Running);
        t.op_end(OpKind::Recovery, 0);
        drop(t);
        let nv = NvAlloc::assemble(cfg, pm, layout, st, rec.large, rec.slabs, rec.report);
        Ok(nv)
    }

    fn assemble(
        cfg: NvAllocConfig,
        pm: Pm,
        layout: Layout,
        st: Statics,
        large: LargeAlloc,
        slabs: Vec<recovery::RecoveredSlab>,
        report: RecoveryReport,
    ) -> Arc<NvAlloc> {
        let narenas = cfg.arena_count();
        let arenas: Vec<Arena> = (0..narenas).map(|i| Arena::new(i, st.classes.len())).collect();
        let table = SlabTable::new(layout.chunk_base, layout.chunk_end());
        for s in slabs {
            let arena = s.arena % narenas;
            let morph_in = s.vslab.morph.is_some();
            table.insert(s.slab, slab::SlabInfo { class: s.vslab.class, arena, morph_in });
            arenas[arena].adopt(s.slab, s.vslab);
        }
        let wal = cfg.wal_at(layout.wal_off);
        let live = LiveBytes::new(report.live_bytes, cfg.max_threads as usize);
        let wal_next = (0..cfg.max_threads).map(|_| AtomicU64::new(0)).collect();
        Arc::new(NvAlloc {
            cfg,
            pm,
            layout,
            classes: st.classes,
            geoms: st.geoms,
            tcache_caps: st.tcache_caps,
            map: st.map,
            slabs: table,
            arenas,
            large,
            wal,
            wal_next,
            live,
            report,
            morph_crash_after: Default::default(),
        })
    }

    /// Shuts down cleanly: marks every arena *normal shutdown* durably and
    /// gives the `Pm` back (to finish a trace; then close the heap).
    pub fn close(self: Arc<Self>) -> Result<Pm, AllocError> {
        let nv = AllocError::sole_owner(self, NAME)?;
        let mut t = nv.pm.thread(0);
        t.op_begin(OpKind::Close, 0);
        if nv.cfg.consistency == Consistency::Gc {
            // The bitmaps were updated without flushes: make them durable,
            // so that a clean restart can trust them without marking.
            for a in &nv.arenas {
                let g = a.inner.lock().unwrap();
                for (&slab, v) in &g.slabs {
                    let bm = slab::bitmap(slab, nv.map);
                    t.flush_range(bm.base(), bm.area_bytes(v.nblocks));
                }
            }
            t.fence();
        }
        nv.layout.set_arena_states(&mut t, nv.arenas.len(), ArenaState::Shutdown);
        t.op_end(OpKind::Close, 0);
        drop(t);
        Ok(nv.pm)
    }

    pub fn config(&self) -> &NvAllocConfig {
        &self.cfg
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The heap's WAL (for tests that forge the entries a crash leaves).
    pub fn wal(&self) -> &Wal {
        &self.wal
    }

    /// What the open that made this instance found (all zero after `create`).
    pub fn recovery(&self) -> RecoveryReport {
        self.report
    }

    /// Slab-morphing counters (takes every arena lock in turn).
    pub fn morph_stats(&self) -> MorphStats {
        let mut m = MorphStats::default();
        for a in &self.arenas {
            m.morphs += a.morphs.load(Ordering::Relaxed);
            m.unmorphs += a.unmorphs.load(Ordering::Relaxed);
            let g = a.inner.lock().unwrap();
            for v in g.slabs.values() {
                if let Some(x) = &v.morph {
                    m.slabs_in += 1;
                    m.old_blocks += x.cnt_slab as u64;
                }
            }
        }
        m
    }

    /// Test hook: the next morphs stop after step `step` (1..=3) as if the
    /// process died there (the slab drops out of this instance's volatile
    /// state; drop the heap without closing to simulate the crash). 0 = off.
    #[doc(hidden)]
    pub fn set_morph_crash_after(&self, step: u64) {
        self.morph_crash_after.store(step, Ordering::Relaxed);
    }

    pub fn large_stats(&self) -> LargeStats {
        self.large.stats()
    }

    /// The size class table.
    pub fn classes(&self) -> &SizeClasses {
        &self.classes
    }

    /// The start of the slab holding `off`, if a live slab does.
    pub fn slab_of(&self, off: u64) -> Option<u64> {
        self.slabs.lookup(off).map(|(slab, _)| slab)
    }

    /// The usable size of the live allocation at `off`, if there is one
    /// (reads the persistent bitmap; for checks, not hot paths).
    pub fn usable_size(&self, t: &PmThread, off: u64) -> Option<u64> {
        match self.slabs.lookup(off) {
            Some((slab, info)) => {
                if info.morph_in {
                    let a = self.arenas[info.arena].inner.lock().unwrap();
                    if let Some(m) = a.slabs.get(&slab).and_then(|v| v.morph.as_ref()) {
                        if m.live_old(off - slab).is_some() {
                            return Some(m.old.size as u64);
                        }
                    }
                }
                let g = self.geoms[info.class];
                let b = g.block_index(slab, off)?;
                slab::bitmap(slab, self.map).test(t, b).then_some(g.size as u64)
            }
            None => self.large.size_of(off),
        }
    }

    /// Every live allocation `(offset, usable size)`, by address: blocks whose
    /// persistent bit is set and user extents. For checks and tests: it takes
    /// every arena lock in turn.
    pub fn live_allocations(&self, t: &PmThread) -> Vec<(u64, u64)> {
        let mut out = self.large.user_extents();
        for a in &self.arenas {
            let g = a.inner.lock().unwrap();
            for (&slab, v) in &g.slabs {
                let geom = self.geoms[v.class];
                slab::bitmap(slab, self.map)
                    .for_each_set(t, geom.nblocks, |b| out.push((geom.block_off(slab, b), geom.size as u64)));
                if let Some(m) = &v.morph {
                    for (&ob, _) in m.entries.iter().filter(|(_, &(_, live))| live) {
                        out.push((m.old.block_off(slab, ob), m.old.size as u64));
                    }
                }
            }
        }
        out.sort_unstable();
        out
    }

    /// The live large allocations (user extents) `(offset, size)`, by address:
    /// under NVAlloc-GC the bookkeeping log keeps them whether reached or
    /// not, so the recovery's mark starts from them as from the roots.
    pub fn large_allocations(&self) -> Vec<(u64, u64)> {
        self.large.user_extents()
    }

    /// The sub-tcache of block `b` of the slab at `slab`: the absolute index
    /// of the line its bitmap bit lies on, modulo the number of sub-tcaches.
    #[inline(always)]
    fn sub_tcache(&self, slab: u64, b: u32, nsub: usize) -> usize {
        if nsub == 1 {
            return 0;
        }
        ((slab + slab::BITMAP_OFF) / 64 + self.map.line_of(b) as u64) as usize % nsub
    }

    /// Binds a new thread to the arena with the fewest threads.
    fn bind_arena(&self) -> usize {
        let a = self.arenas.iter().min_by_key(|a| a.threads.load(Ordering::Relaxed)).expect("at least one arena");
        a.bind();
        a.id
    }

    #[inline(always)]
    fn account(&self, tid: u32, delta: i64) {
        self.live.add(tid, delta);
    }
}

impl Allocator for NvAlloc {
    type Config = NvAllocConfig;
    type Thread = NvAllocThread;
    const FAMILY: &'static str = "nvalloc";
    const PRESETS: &'static [&'static str] = &NvAllocConfig::PRESETS;
    const ABOUT: &'static str = "NVAlloc presets: the full LOG and GC variants and the ablation steps of Fig. 11";

    fn preset(name: &str) -> Result<NvAllocConfig, AllocError> {
        NvAllocConfig::preset(name)
    }

    fn create(heap: &Heap, pm: Pm, cfg: NvAllocConfig) -> Result<Arc<Self>, AllocError> {
        NvAlloc::create(heap, pm, cfg)
    }

    fn open(heap: &Heap, pm: Pm, cfg: NvAllocConfig) -> Result<Arc<Self>, AllocError> {
        NvAlloc::open(heap, pm, cfg)
    }

    fn close(self: Arc<Self>, _heap: &Heap) -> Result<Pm, AllocError> {
        NvAlloc::close(self)
    }

    /// Every thread id of the run owns a WAL area.
    fn for_run(cfg: &NvAllocConfig, threads: u32) -> NvAllocConfig {
        NvAllocConfig { max_threads: cfg.max_threads.max(threads), ..cfg.clone() }
    }

    fn variant(cfg: &NvAllocConfig) -> String {
        cfg.preset.clone()
    }

    /// With the arena count resolved (0 means one per core of the tracing machine).
    fn header_params(cfg: &NvAllocConfig) -> Params {
        as_map(&NvAllocConfig { arenas: cfg.arena_count() as u32, ..cfg.clone() })
    }

    fn name(&self) -> String {
        self.cfg.preset.clone()
    }

    fn params(&self) -> Params {
        let mut cfg = self.cfg.clone();
        cfg.arenas = self.arenas.len() as u32;
        as_map(&cfg)
    }

    /// # Panics
    /// If `tid >= max_threads` or a handle with this id is alive.
    fn thread(self: &Arc<Self>, tid: u32) -> NvAllocThread {
        NvAllocThread::new(self.clone(), tid)
    }

    fn footprint(&self) -> Footprint {
        Footprint { live_bytes: self.live.get(), mapped_bytes: self.large.top() }
    }

    /// Slabs by the fraction of blocks taken (allocated, or cached in a tcache).
    fn slab_utilization(&self) -> Option<SlabUtilization> {
        let mut u = SlabUtilization::default();
        for a in &self.arenas {
            let g = a.inner.lock().unwrap();
            for v in g.slabs.values() {
                let r = v.used as f64 / v.nblocks as f64;
                match r {
                    r if r < 0.3 => u.low += 1,
                    r if r < 0.7 => u.mid += 1,
                    _ => u.high += 1,
                }
            }
        }
        Some(u)
    }

    /// Under NVAlloc-LOG the WAL makes every operation durable in the call;
    /// NVAlloc-GC's post-crash mark keeps any block that a stale word (a
    /// deleted slot, uninitialised bytes of a reused block) points to; under
    /// `wal=artifact` (NVAlloc's public code) a small block's `free_from`
    /// leaves its destination.
    fn crash_rules(cfg: &NvAllocConfig) -> Result<CrashRules, String> {
        Ok(CrashRules {
            plain_mallocs_durable: cfg.consistency == Consistency::Log,
            reachability_recovery: cfg.consistency == Consistency::Gc,
            free_from_leaves_dest: cfg.wal == WalMode::Artifact && cfg.consistency == Consistency::Log,
            ..CrashRules::default()
        })
    }

    /// Under NVAlloc-GC the bookkeeping log keeps large extents whether
    /// reached or not, so its mark starts from them too.
    fn mark_roots(&self, _t: &mut NvAllocThread) -> Vec<u64> {
        if self.cfg.consistency == Consistency::Gc {
            self.large_allocations().into_iter().map(|(o, _)| o).collect()
        } else {
            Vec::new()
        }
    }

    fn live_blocks(&self, t: &mut NvAllocThread) -> Vec<(u64, u64)> {
        self.live_allocations(t.pm())
    }

    const MUTANTS: &'static [&'static str] = &[
        "nvalloc-log:mutation=wal-entry-flush",
        "nvalloc-log:mutation=bitmap-flush",
        "nvalloc-log:mutation=dest-flush",
    ];
}

const _: () = assert!(SLAB.is_power_of_two() && CHUNK & (SLAB - 1) == 0);
