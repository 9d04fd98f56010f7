//! NVAlloc (Dang et al., ASPLOS '22) on a pmsim heap: the allocator every
//! later measurement is about, with each of its techniques behind its own
//! switch ([`NvConfig`]).
//!
//! * Small requests (< 16 KiB) are rounded to a size class ([`crate::mech::sizeclass`])
//!   and served from 64 KiB slabs ([`slab`]) through a per-thread LIFO
//!   tcache ([`tcache`]) refilled from the thread's arena ([`arena`]). Slab
//!   bitmaps may be interleaved over bit stripes, tcaches split into
//!   sub-tcaches per stripe, and WAL entries spread over lines (§5.1).
//! * Large requests and slabs come from the large allocator ([`large`]):
//!   VEHs in DRAM, persistent records in the bookkeeping log (§5.3) or in
//!   in-place extent headers (the baseline).
//! * Crash consistency (`log` model): `malloc_to`/`free_from` bracket their
//!   metadata and `*dest` updates with a WAL entry ([`thread`]); opening the
//!   heap rebuilds everything and, after a crash, replays the WAL ([`recovery`]).
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
//! # use pmsim_model::{Heap, Pm, FlushInsn, PmAllocator, AllocThread};
//! # use pmsim_model::nvalloc::{NvAlloc, NvConfig};
//! let heap = Heap::create("/dev/shm/x.heap", 256 << 20)?;
//! let pm = Pm::native(&heap, FlushInsn::best())?;
//! let nv = NvAlloc::create(&heap, pm, NvConfig::preset("nvalloc-log")?)?;
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
pub mod recovery;
pub mod slab;
pub mod tcache;
pub mod thread;

pub use config::{Consistency, Mutation, NvConfig};
pub use recovery::RecoveryReport;
pub use thread::NvThread;

use crate::alloc::{Footprint, PmAllocator, SlabUtilization};
use crate::heap::{Heap, HeapError};
use crate::mech::bklog::BkLog;
use crate::mech::exthdr::ExtentHeaders;
use crate::mech::sizeclass::SizeClasses;
use crate::mech::stripe::StripeMap;
use crate::mech::wal::Wal;
use crate::pm::{Pm, PmThread};
use arena::Arena;
use large::{Bookkeeping, LargeAlloc, LargeParams, LargeStats};
use layout::{ArenaState, Layout, CHUNK, SLAB};
use pmsim_traces::OpKind;
use slab::{SlabGeom, SlabTable};
use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// Small requests are those below this (the paper's 16 KB boundary).
pub const SMALL_LIMIT: u32 = 16 << 10;
/// The size-class quantum: requests are rounded up to a cache line first.
pub const QUANTUM: u32 = 64;

/// Why an NVAlloc heap could not be created, opened or closed. Displays as one line.
#[derive(Debug)]
pub enum NvError {
    /// An impossible configuration, or one that does not match the heap.
    Config(String),
    /// A feature that is configured but not implemented yet.
    NotYet(String),
    /// The heap is too small for the layout.
    TooSmall(String),
    /// The heap's persistent state is inconsistent.
    Corrupt(String),
    /// `create` on a heap that already holds an NVAlloc heap.
    Exists(String),
    /// `close` while thread handles are alive.
    InUse(String),
    Heap(HeapError),
}

impl fmt::Display for NvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NvError::Config(m) => write!(f, "NVAlloc configuration: {m}"),
            NvError::NotYet(m) => write!(f, "not implemented yet in pmsim's NVAlloc: {m}"),
            NvError::TooSmall(m) | NvError::Exists(m) | NvError::InUse(m) => f.write_str(m),
            NvError::Corrupt(m) => write!(f, "corrupt NVAlloc heap: {m}"),
            NvError::Heap(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for NvError {}

impl From<HeapError> for NvError {
    fn from(e: HeapError) -> Self {
        NvError::Heap(e)
    }
}

impl NvError {
    /// The same error with the heap file named in front.
    fn in_file(self, heap: &Heap) -> NvError {
        let p = heap.path().display();
        match self {
            NvError::Config(m) => NvError::Config(format!("{p}: {m}")),
            NvError::TooSmall(m) => NvError::TooSmall(format!("{p}: {m}")),
            NvError::Corrupt(m) => NvError::Corrupt(format!("{p}: {m}")),
            NvError::Exists(m) => NvError::Exists(format!("{p}: {m}")),
            e => e,
        }
    }
}

/// A per-thread counter on its own cache line.
#[repr(align(64))]
#[derive(Default)]
struct Padded(AtomicI64);

/// An NVAlloc instance on one heap, shared by all threads of a run.
pub struct NvAlloc {
    cfg: NvConfig,
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
    /// Usable bytes allocated minus freed, per thread id.
    live: Box<[Padded]>,
    /// Usable bytes live when the heap was opened.
    live_base: u64,
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
    fn new(cfg: &NvConfig) -> Statics {
        let classes = SizeClasses::jemalloc(QUANTUM, SMALL_LIMIT);
        let map = StripeMap::new(cfg.stripes);
        let geoms: Vec<SlabGeom> = classes.sizes().iter().map(|&s| SlabGeom::regular(s, map)).collect();
        let tcache_caps = geoms.iter().map(|g| (g.nblocks as usize).clamp(4, cfg.tcache_max as usize)).collect();
        Statics { classes, geoms, tcache_caps, map }
    }
}

fn large_params(cfg: &NvConfig, heap_size: u64) -> LargeParams {
    LargeParams {
        gc_interval: cfg.gc_interval,
        slow_gc_bytes: (cfg.usage_pmem * heap_size as f64) as u64,
        decay_ops: cfg.decay_ops,
    }
}

impl NvAlloc {
    /// Formats a new NVAlloc heap on `heap` (which must not hold one yet) and
    /// returns the allocator, which does all persistence through `pm`.
    pub fn create(heap: &Heap, pm: Pm, cfg: NvConfig) -> Result<Arc<NvAlloc>, NvError> {
        cfg.validate()?;
        let st = Statics::new(&cfg);
        let mut t = pm.thread(0);
        if Layout::read(&t).is_ok() {
            return Err(NvError::Exists("already holds an NVAlloc heap (open it instead)".into()).in_file(heap));
        }
        t.op_begin(OpKind::Init, 0);
        let layout = Layout::plan(heap.size(), &cfg).map_err(|e| e.in_file(heap))?;
        let tiler = large::static_regions(&mut t, &layout);
        layout.write(&mut t, &cfg)?;
        let book = if cfg.bookkeeping_log {
            let mut log = BkLog::format(&mut t, layout.log_off, layout.log_bytes, cfg.interleaved_log)
                .map_err(|m| NvError::TooSmall(m).in_file(heap))?;
            log.set_mutation(cfg.mutation);
            Bookkeeping::Log(log)
        } else {
            Bookkeeping::Headers(ExtentHeaders::new(CHUNK))
        };
        let params = large_params(&cfg, heap.size());
        let large = LargeAlloc::new(&mut t, layout, layout.chunk_base, book, &[], &[], params, tiler)
            .map_err(NvError::Corrupt)?;
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
    pub fn open(heap: &Heap, pm: Pm, cfg: NvConfig) -> Result<Arc<NvAlloc>, NvError> {
        cfg.validate()?;
        let st = Statics::new(&cfg);
        let mut t = pm.thread(0);
        let (layout, stored) = Layout::read(&t).map_err(|e| e.in_file(heap))?;
        if let Some(m) = cfg.layout_mismatch(&stored) {
            return Err(NvError::Config(m).in_file(heap));
        }
        t.op_begin(OpKind::Recovery, 0);
        let tiler = large::static_regions(&mut t, &layout);
        let crashed = !heap.was_clean() || layout.any_arena_unclean(&t);
        let narenas = cfg.arena_count();
        layout.set_arena_states(&mut t, narenas, ArenaState::Recovery);
        let wal =
            Wal::new(layout.wal_off, cfg.wal_lines, cfg.max_threads, cfg.interleaved_wal).with_mutation(cfg.mutation);
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
        cfg: NvConfig,
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
        let wal =
            Wal::new(layout.wal_off, cfg.wal_lines, cfg.max_threads, cfg.interleaved_wal).with_mutation(cfg.mutation);
        let live = (0..cfg.max_threads).map(|_| Padded::default()).collect();
        Arc::new(NvAlloc {
            live_base: report.live_bytes,
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
            live,
            report,
            morph_crash_after: Default::default(),
        })
    }

    /// Shuts down cleanly: marks every arena *normal shutdown* durably and
    /// gives the `Pm` back (to finish a trace; then close the heap).
    pub fn close(self: Arc<Self>) -> Result<Pm, NvError> {
        let nv = Arc::try_unwrap(self).map_err(|a| {
            NvError::InUse(format!(
                "cannot close NVAlloc: {} thread handle(s) still use it (drop them first)",
                Arc::strong_count(&a) - 1
            ))
        })?;
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

    pub fn config(&self) -> &NvConfig {
        &self.cfg
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
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
        self.live[tid as usize].0.fetch_add(delta, Ordering::Relaxed);
    }
}

impl PmAllocator for NvAlloc {
    type Thread = NvThread;

    fn name(&self) -> String {
        self.cfg.preset.clone()
    }

    fn params(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut cfg = self.cfg.clone();
        cfg.arenas = self.arenas.len() as u32;
        crate::params::as_map(&cfg)
    }

    /// # Panics
    /// If `tid >= max_threads` or a handle with this id is alive.
    fn thread(self: &Arc<Self>, tid: u32) -> NvThread {
        NvThread::new(self.clone(), tid)
    }

    fn footprint(&self) -> Footprint {
        let delta: i64 = self.live.iter().map(|c| c.0.load(Ordering::Relaxed)).sum();
        Footprint { live_bytes: (self.live_base as i64 + delta).max(0) as u64, mapped_bytes: self.large.top() }
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
}

const _: () = assert!(SLAB.is_power_of_two() && CHUNK & (SLAB - 1) == 0);
