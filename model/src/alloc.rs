//! The seam between an allocator and the rest of pmsim, in one file: what
//! an allocator provides ([`Allocator`]: required items first, then what it
//! may provide, in groups) and what each of its threads does
//! ([`AllocThread`], what workloads are written against). NVAlloc and its
//! ablations, LLFree, the Makalu- and Metall-style allocators and PMDK's
//! libpmemobj all implement these two traits and nothing else; pmsim builds
//! the registry's entry and the crash explorer's view from them
//! ([`crate::family`], [`crate::target`]). ARCHITECTURE.md walks through
//! adding one.
//!
//! Allocations are named by heap offsets (never pointers), so a heap can be
//! mapped elsewhere after a restart. All access to allocated memory goes through
//! the thread handle, so a traced run records the workload's own stores too
//! (as stores to user data) and the crash explorer can check their contents.

use crate::config::AllocConfig;
use crate::error::AllocError;
use crate::heap::Heap;
use crate::params::as_map;
use crate::pm::{FlushInsn, Pm};
use crate::target::CrashTarget;
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;

/// How much persistent memory an allocator holds, for footprint figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Footprint {
    /// Bytes handed out to the user and not yet freed (requested sizes).
    pub live_bytes: u64,
    /// Bytes of the heap the allocator has taken for slabs, extents and its own
    /// metadata (what a heap file must be at least, the paper's "memory usage").
    pub mapped_bytes: u64,
}

/// Slabs by how full they are: 0–30 %, 30–70 %, 70–100 % of their blocks in use
/// (the breakdown of the NVAlloc paper's Fig. 15b).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SlabUtilization {
    pub low: u64,
    pub mid: u64,
    pub high: u64,
}

/// A configuration as callers outside the allocator hold it: every parameter by name.
pub type Params = serde_json::Map<String, serde_json::Value>;

/// The seam: everything pmsim needs of an allocator, in one trait. An
/// allocator implements it and [`AllocThread`] (its thread handle), and one
/// line in [`crate::registry`] (`&Native::<MyAlloc>::ENTRY`) makes it known
/// to `pmsim run`, sweeps, `--help`, the crash explorer and the conformance
/// suite. Callers never name it: they see a registry entry
/// ([`crate::family::Family`]) and a crash target ([`CrashTarget`]), both
/// built from this trait by pmsim.
///
/// The items without a default are what every allocator provides; the rest
/// it may provide, in groups: names and presets, run sizing, statistics,
/// crash recovery, broken variants for the checkers, a file of its own
/// format instead of a pmsim heap.
pub trait Allocator: Send + Sync + Sized + 'static {
    // ----- What every allocator provides -----

    /// Its parameters: a serde struct ([`AllocConfig`]).
    type Config: AllocConfig;
    /// A thread's handle: its caches and its persistence primitives.
    type Thread: AllocThread;

    /// Its name in trace headers and the registry (`nvalloc`, `llfree`).
    const FAMILY: &'static str;
    /// One line for `--help`.
    const ABOUT: &'static str;

    /// Lays out a fresh heap. Every persistent write goes through a
    /// [`crate::PmThread`] of `pm` (so traced runs see it), and the heap's
    /// areas are registered as regions ([`crate::PmThread::add_region`]):
    /// statistics break persist time down by region, and what no region
    /// covers counts as "unmapped".
    fn create(heap: &Heap, pm: Pm, cfg: Self::Config) -> Result<Arc<Self>, AllocError>;

    /// Opens an existing heap, running recovery if it was not closed cleanly.
    fn open(heap: &Heap, pm: Pm, cfg: Self::Config) -> Result<Arc<Self>, AllocError>;

    /// Closes cleanly (no thread handle may be alive) and gives the `Pm` back.
    fn close(self: Arc<Self>, heap: &Heap) -> Result<Pm, AllocError>;

    /// A handle for thread `tid` (ids are small and dense: 0, 1, 2, …).
    fn thread(self: &Arc<Self>, tid: u32) -> Self::Thread;

    /// Every parameter this instance runs with, for result rows.
    fn params(&self) -> Params;

    /// Live and mapped bytes, for footprint figures (count live bytes with
    /// [`crate::live::LiveBytes`]).
    fn footprint(&self) -> Footprint;

    /// Every live allocation `(offset, usable size)`, by offset: what the
    /// crash checks compare with the operations a trace completed.
    fn live_blocks(&self, t: &mut Self::Thread) -> Vec<(u64, u64)>;

    // ----- Names and presets (may provide) -----

    /// The names `--alloc` accepts for it: its presets, or just [`Self::FAMILY`].
    const PRESETS: &'static [&'static str] = &[Self::FAMILY];

    /// Configurations beyond its presets that change what it persists
    /// (Makalu's `makalu:shipped=true`): the conformance suite checks each
    /// as it checks a preset.
    const VARIANTS: &'static [&'static str] = &[];

    /// The configuration of preset `name` (one of [`Self::PRESETS`]).
    fn preset(name: &str) -> Result<Self::Config, AllocError> {
        let _ = name;
        Ok(Self::Config::default())
    }

    /// The instance's name in result rows (its preset or variant); [`Self::FAMILY`] by default.
    fn name(&self) -> String {
        Self::FAMILY.to_string()
    }

    /// The trace header's variant (a preset, `eadr`), empty when there is none.
    fn variant(cfg: &Self::Config) -> String {
        let _ = cfg;
        String::new()
    }

    /// The parameters a trace header records for a run with `cfg` (already
    /// [`Self::for_run`]); read back by [`Self::crash_target`].
    fn header_params(cfg: &Self::Config) -> Params {
        as_map(cfg)
    }

    // ----- Run sizing and statistics (may provide) -----

    /// The configuration for a run of `threads` threads (NVAlloc sizes its WAL by it).
    fn for_run(cfg: &Self::Config, threads: u32) -> Self::Config {
        let _ = threads;
        cfg.clone()
    }

    /// The heap size (bytes, a multiple of 2 MiB) a run with `need` needs;
    /// by default the workload's own estimate.
    fn heap_size(cfg: &Self::Config, need: &HeapNeed) -> u64 {
        let _ = cfg;
        need.hint
    }

    /// What it keeps beside its heap file `heap` (Metall's management
    /// directory): outputs too of a run whose heap is kept.
    fn beside_heap(heap: &std::path::Path) -> Vec<std::path::PathBuf> {
        let _ = heap;
        Vec::new()
    }

    /// Slab utilization, for allocators that have slabs.
    fn slab_utilization(&self) -> Option<SlabUtilization> {
        None
    }

    // ----- Crash recovery (may provide) -----

    /// What a crash may do to its operations, for the crash checks
    /// ([`CrashRules`]); `Err` (why not) when it has no crash recovery for
    /// `cfg`, the default. Recovery itself is [`Self::open`] on a crash image.
    fn crash_rules(cfg: &Self::Config) -> Result<CrashRules, String> {
        let _ = cfg;
        Err(format!("no crash recovery for allocator '{}' yet (implement Allocator::crash_rules for it)", Self::FAMILY))
    }

    /// Of the wall time of the [`Self::open`] that made this instance, the
    /// seconds its published system spends on a thread of its own after
    /// its open has returned (nvm_malloc walks its chunks so): pmsim does
    /// that work inside `open`, and Fig. 18's recovery time leaves it out,
    /// as the program the paper timed did not wait for it. Zero (the
    /// default) for a system whose open does all of its recovery.
    fn deferred_recovery_s(&self) -> f64 {
        0.0
    }

    /// Checks the recovered metadata for internal consistency (counters
    /// against bitmaps, lists against headers); one line on failure.
    fn check_metadata(&self, t: &mut Self::Thread) -> Result<(), String> {
        let _ = t;
        Ok(())
    }

    /// Live allocations recovery keeps whether reached or not: what a
    /// reachability-based recovery marks from besides the heap's root slots
    /// (NVAlloc-GC's logged large extents).
    fn mark_roots(&self, t: &mut Self::Thread) -> Vec<u64> {
        let _ = t;
        Vec::new()
    }

    /// Its deliberately broken variants, each a spec of one of its presets
    /// with the override that removes one flush or swaps two steps
    /// (`nvalloc-log:mutation=dest-flush`; its `Mutation` enum lives in its
    /// own module): the conformance suite records each on a small
    /// Threadtest, and the crash explorer must catch it. Declared with the
    /// allocator, so registering it puts them under the suite; a variant
    /// that only another workload or crashes inside recovery show is
    /// tested beside the allocator instead.
    const MUTANTS: &'static [&'static str] = &[];

    /// A crash target of its own with configuration `cfg`, for an
    /// allocator whose images are not a pmsim heap (PMDK's pool) or that
    /// keeps state in files beside its heap (Metall); `None` (the default):
    /// pmsim's, from [`Self::crash_rules`] and the methods above. Asked only
    /// when `crash_rules` is `Ok`.
    fn crash_target(cfg: &Self::Config) -> Option<Box<dyn CrashTarget>> {
        let _ = cfg;
        None
    }

    // ----- A file of its own format (may provide; PMDK) -----

    /// Whether it runs on a file of its own format that it creates, maps
    /// and persists itself (PMDK's libpmemobj pool) rather than on a pmsim
    /// heap: runs then go through [`Self::create_own_file`] (never
    /// `create`/`open`/`close`), and pmsim's built-in tracer does not see
    /// its stores.
    const OWN_FILE: bool = false;

    /// Creates its own file of `size` bytes at `path` ([`Self::OWN_FILE`]);
    /// it is closed when the last handle is dropped.
    fn create_own_file(path: &Path, size: u64, overwrite: bool, cfg: Self::Config) -> Result<Arc<Self>, AllocError> {
        let _ = (path, size, overwrite, cfg);
        Err(AllocError::config(Self::Config::ALLOC, "runs on a pmsim heap, not on a file of its own"))
    }

    /// Opens its own file at `path` ([`Self::OWN_FILE`]), recovering it as
    /// its library does after a crash; closed when the last handle is dropped.
    fn open_own_file(path: &Path, cfg: Self::Config) -> Result<Arc<Self>, AllocError> {
        let _ = (path, cfg);
        Err(AllocError::config(Self::Config::ALLOC, "runs on a pmsim heap, not on a file of its own"))
    }

    /// Faults in the parts `f` names of its own file's mapping
    /// ([`Self::OWN_FILE`]; [`crate::fault_in::FaultIn`]) before a CPU
    /// profile, as pmsim heaps are.
    fn prefault(&self, f: &crate::fault_in::FaultIn) -> Result<(), AllocError> {
        let _ = f;
        Ok(())
    }

    // ----- The process it runs in (may provide; PMDK) -----

    /// The environment variables (`None`: unset) a process that runs it
    /// natively must have before its library loads (PMDK reads its PMEM_*
    /// settings then), for flush instruction `flush` (`None`: the
    /// library's own pick) and, with `msync`, a file not on PM persisted by
    /// msync. Empty (the default): any environment will do.
    fn process_env(flush: Option<FlushInsn>, msync: bool) -> Vec<(&'static str, Option<&'static str>)> {
        let _ = (flush, msync);
        Vec::new()
    }

    /// If this process was started as a helper of the allocator's (PMDK's
    /// recovery processes), serves as one and does not return; pmsim asks
    /// every registered allocator first thing.
    fn serve_helper_if_asked() {}
}

/// What a run needs of the heap, for sizing it ([`Allocator::heap_size`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapNeed {
    /// The workload's own estimate (bytes, a multiple of 2 MiB), for an
    /// allocator that packs objects about as tightly as `malloc`.
    pub hint: u64,
    /// The largest object it allocates (bytes).
    pub max_object: u64,
    /// The most objects it holds at once, over all threads.
    pub peak_objects: u64,
    /// Its threads.
    pub threads: u32,
}

/// What a crash may do to an allocator's operations: the rules the crash
/// checks hold a recovered image to. Every rule is off by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrashRules {
    /// An allocation made by plain `malloc` (no destination) must survive a
    /// crash once the call returned (true where allocation state is made
    /// durable in the call; false where recovery keeps only what is
    /// reachable from the roots).
    pub plain_mallocs_durable: bool,
    /// Recovery keeps what a conservative mark reaches from the roots
    /// (NVAlloc-GC, Makalu) rather than what was durably recorded: a live
    /// block no operation accounts for is then *retained* when the crash
    /// checks' own mark of the recovered image reaches it, and a leak otherwise.
    pub reachability_recovery: bool,
    /// An interrupted `malloc_to` / `free_from` may leave its block
    /// allocated but not named by its destination (LLFree's *lost frames*:
    /// the allocation is durable before the publication, and a free's
    /// unpublication before the free). Such a block is counted as lost,
    /// not a violation; a live block of any other operation, or of none,
    /// stays a leak. At most one per thread with an operation in flight.
    pub interrupted_may_lose: bool,
    /// `free_from` may leave its destination as it is
    /// ([`AllocThread::free_from_leaves_dest`]).
    pub free_from_leaves_dest: bool,
    /// Recovery refuses a heap that its last run did not close (Metall: a
    /// store is consistent only as its last close left it): after a crash
    /// that refusal is the correct outcome, and opening is a violation.
    pub refuses_unclean: bool,
    /// A violation the published protocol has by design, as words of the
    /// explorer's report (nvm_malloc's intended protocol: `"not atomic"`,
    /// its ADR window): `pmsim crash` reports it as any violation, and the
    /// conformance suite requires the explorer to find it rather than pass
    /// (`""`: any violation, for code that persists nothing it should).
    pub expected_violation: Option<&'static str>,
}

/// The [`AllocThread`] methods that touch memory, for a thread handle whose
/// [`PmThread`](crate::PmThread) is its field `$t`: they go straight to the
/// persistence primitives (so a traced run records the workload's stores).
/// Expand inside `impl AllocThread for …`: `pmsim_model::pm_thread_access!(t);`.
#[macro_export]
macro_rules! pm_thread_access {
    ($t:ident) => {
        fn write(&mut self, off: u64, data: &[u8]) {
            self.$t.store_bytes(off, data);
        }

        fn read(&self, off: u64, buf: &mut [u8]) {
            self.$t.load_bytes(off, buf);
        }

        fn persist(&mut self, off: u64, len: u64) {
            self.$t.persist(off, len);
        }

        fn write_u64(&mut self, off: u64, v: u64) {
            self.$t.store_u64(off, v);
        }

        fn read_u64(&self, off: u64) -> u64 {
            self.$t.load_u64(off)
        }

        fn set_root(&mut self, slot: usize, off: u64) {
            self.$t.set_root(slot, off);
        }

        fn root(&self, slot: usize) -> u64 {
            self.$t.root(slot)
        }

        fn idle(&mut self) {
            self.$t.flush_thread();
        }
    };
}

/// The four allocation methods of [`AllocThread`] for a thread handle whose
/// allocator does the same work with and without a destination word
/// (`malloc_impl(size, Option<dest>)`, `free_impl(off, Option<dest>)`):
/// a `free_from` reads the offset from `*dest` through the thread's
/// primitives (field `$t`), and freeing offset 0 is a no-op, as `free(NULL)`.
/// Expand inside `impl AllocThread for …`: `pmsim_model::dest_forwarding_ops!(t);`.
#[macro_export]
macro_rules! dest_forwarding_ops {
    ($t:ident) => {
        fn malloc(&mut self, size: u64) -> Option<u64> {
            self.malloc_impl(size, None)
        }

        fn free(&mut self, off: u64) {
            if off != 0 {
                self.free_impl(off, None);
            }
        }

        fn malloc_to(&mut self, size: u64, dest: u64) -> Option<u64> {
            self.malloc_impl(size, Some(dest))
        }

        fn free_from(&mut self, dest: u64) {
            let off = self.$t.load_u64(dest);
            if off != 0 {
                self.free_impl(off, Some(dest));
            }
        }
    };
}

/// What one thread can do with the allocator and the memory it hands out.
pub trait AllocThread: Send {
    /// Allocates `size` bytes; the offset of the block, or `None` when the heap is full.
    fn malloc(&mut self, size: u64) -> Option<u64>;

    /// Frees the allocation at `off`.
    fn free(&mut self, off: u64);

    /// Allocates `size` bytes and atomically (with respect to crashes) publishes
    /// the offset into the persistent 8-byte location `dest`.
    fn malloc_to(&mut self, size: u64, dest: u64) -> Option<u64>;

    /// Frees the allocation whose offset is stored at `dest` and atomically
    /// clears `dest` (unless [`AllocThread::free_from_leaves_dest`]).
    fn free_from(&mut self, dest: u64);

    /// Whether `free_from` may leave `dest` as it is (NVAlloc's public code
    /// does for small blocks, `wal=artifact`): the program clears its pointer
    /// itself, with no flush, and a crash may leave it naming the freed block.
    fn free_from_leaves_dest(&self) -> bool {
        false
    }

    /// Writes workload data at heap offset `off` (inside an allocation).
    fn write(&mut self, off: u64, data: &[u8]);

    /// Reads heap memory at `off`.
    fn read(&self, off: u64, buf: &mut [u8]);

    /// Makes `[off, off + len)` durable (flushes and a fence, or nothing under eADR).
    fn persist(&mut self, off: u64, len: u64);

    /// Stores an 8-byte word (e.g. an offset into another allocation).
    fn write_u64(&mut self, off: u64, v: u64) {
        self.write(off, &v.to_le_bytes());
    }

    fn read_u64(&self, off: u64) -> u64 {
        let mut b = [0u8; 8];
        self.read(off, &mut b);
        u64::from_le_bytes(b)
    }

    /// Sets persistent root `slot` to `off` (durably).
    fn set_root(&mut self, slot: usize, off: u64);

    fn root(&self, slot: usize) -> u64;

    /// Called before the thread blocks for long (a barrier, a condition
    /// variable): lets a traced run hand over its buffered events.
    fn idle(&mut self) {}
}
