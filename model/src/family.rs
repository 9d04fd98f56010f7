//! The seam between an allocator and the rest of pmsim. An allocator
//! implements [`Allocator`] (how to create, open and close it on a heap, and
//! its [`AllocConfig`]) and, when it has crash recovery, [`Recoverable`];
//! one line in [`crate::registry`] then makes it known to `pmsim run`, sweeps,
//! `--help` and the crash explorer. Those callers see every allocator as a
//! [`Family`]: configurations travel as JSON objects (what trace headers and
//! result rows hold anyway) and are read back into the allocator's own type
//! here, so nothing outside the allocator's module names its types.

use crate::alloc::{AllocThread, PmAllocator};
use crate::config::AllocConfig;
use crate::error::AllocError;
use crate::heap::Heap;
use crate::params::as_map;
use crate::pm::{FlushInsn, Pm};
use crate::workloads::{self, Progress, RunOptions, RunReport, Workload, WorkloadError};
use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;

/// A configuration as callers outside the allocator hold it: every parameter by name.
pub type Params = serde_json::Map<String, serde_json::Value>;

/// An allocator pmsim builds on its own heap file (`Heap` + `Pm`).
pub trait Allocator: PmAllocator {
    type Config: AllocConfig;

    /// Its name in trace headers and the registry (`nvalloc`, `llfree`).
    const FAMILY: &'static str;
    /// The names `--alloc` accepts for it: its presets, or just [`Self::FAMILY`].
    const PRESETS: &'static [&'static str];
    /// One line for `--help`.
    const ABOUT: &'static str;

    /// The configuration of preset `name` (one of [`Self::PRESETS`]).
    fn preset(name: &str) -> Result<Self::Config, AllocError> {
        let _ = name;
        Ok(Self::Config::default())
    }

    /// Lays out a fresh heap.
    fn create(heap: &Heap, pm: Pm, cfg: Self::Config) -> Result<Arc<Self>, AllocError>;

    /// Opens an existing heap, running recovery if it was not closed cleanly.
    fn open(heap: &Heap, pm: Pm, cfg: Self::Config) -> Result<Arc<Self>, AllocError>;

    /// Closes cleanly (no thread handle may be alive) and gives the `Pm` back.
    fn close(self: Arc<Self>, heap: &Heap) -> Result<Pm, AllocError>;

    /// The configuration for a run of `threads` threads (NVAlloc sizes its WAL by it).
    fn for_run(cfg: &Self::Config, threads: u32) -> Self::Config {
        let _ = threads;
        cfg.clone()
    }

    /// The trace header's variant (a preset, `eadr`), empty when there is none.
    fn variant(cfg: &Self::Config) -> String {
        let _ = cfg;
        String::new()
    }

    /// The parameters a trace header records for a run with `cfg` (already
    /// [`Self::for_run`]); read back by [`Family::crash_target`].
    fn header_params(cfg: &Self::Config) -> Params {
        as_map(cfg)
    }

    /// The heap size (bytes, a multiple of 2 MiB) `wl` needs with `threads` threads.
    fn heap_size(cfg: &Self::Config, wl: &Workload, threads: u32) -> u64 {
        let _ = cfg;
        wl.heap_size_hint(threads)
    }

    /// The crash explorer's view of this allocator: `Err` (why) without
    /// crash recovery for `cfg`; allocators with it return
    /// `Ok(recovery_target::<Self>(cfg))`.
    fn crash_target(cfg: Self::Config) -> Result<Box<dyn CrashTarget>, String> {
        let _ = cfg;
        Err(format!(
            "no crash recovery for allocator '{}' yet (implement pmsim_model::family::Recoverable for it)",
            Self::FAMILY
        ))
    }
}

/// What the crash explorer needs of an allocator with crash recovery
/// (recovery itself is [`Allocator::open`] on a crash image).
pub trait Recoverable: Allocator {
    /// Whether an allocation made by plain `malloc` (no destination) must
    /// survive a crash once the call returned (true where allocation state is
    /// made durable in the call; false where recovery keeps only what is
    /// reachable from the roots).
    fn plain_mallocs_durable(cfg: &Self::Config) -> bool;

    /// Whether recovery keeps what a conservative mark reaches from the roots
    /// (NVAlloc-GC, Makalu) rather than what was durably recorded: a live
    /// block no operation accounts for is then *retained* when the crash
    /// checks' own mark of the recovered image reaches it, and a leak otherwise.
    fn reachability_recovery(cfg: &Self::Config) -> bool {
        let _ = cfg;
        false
    }

    /// Whether an interrupted `malloc_to` / `free_from` may leave its block
    /// allocated but not named by its destination (LLFree's *lost frames*:
    /// the allocation is durable before the publication, and a free's
    /// unpublication before the free). Such a block is counted as lost,
    /// not a violation; a live block of any other operation, or of none,
    /// stays a leak. At most one per thread with an operation in flight.
    fn interrupted_may_lose(cfg: &Self::Config) -> bool {
        let _ = cfg;
        false
    }

    /// Whether `free_from` may leave its destination as it is
    /// ([`crate::AllocThread::free_from_leaves_dest`]) with `cfg`.
    fn free_from_leaves_dest(cfg: &Self::Config) -> bool {
        let _ = cfg;
        false
    }

    /// Live allocations recovery keeps whether reached or not: what a
    /// reachability-based recovery marks from besides the heap's root slots
    /// (NVAlloc-GC's logged large extents).
    fn mark_roots(&self, t: &mut Self::Thread) -> Vec<u64> {
        let _ = t;
        Vec::new()
    }

    /// Every live allocation `(offset, usable size)`, by offset.
    fn live_blocks(&self, t: &mut Self::Thread) -> Vec<(u64, u64)>;

    /// Checks the recovered metadata for internal consistency (counters
    /// against bitmaps, lists against headers); one line on failure.
    fn check_metadata(&self, t: &mut Self::Thread) -> Result<(), String> {
        let _ = t;
        Ok(())
    }
}

/// What a target's crash images are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageFormat {
    /// A pmsim heap ([`Heap`]: a header page with the root slots). Recovery
    /// is pmsim code whose every access goes through its `PmThread`, so the
    /// explorer sees what it reads (coverage) and can crash it at its fences.
    PmsimHeap,
    /// The allocator's own file format (PMDK's pool), opened as plain bytes
    /// ([`Heap::open_raw_copy`]). Recovery runs inside a library whose
    /// accesses pmsim does not see: every pending byte of an image counts as
    /// read, and the recovery cannot be crashed in turn.
    Own,
}

/// A crash point as a target whose allocator keeps state outside its heap
/// file sees it ([`CrashTarget::outside_markers`]).
#[derive(Clone, Copy, Debug)]
pub struct CrashPoint<'a> {
    /// The heap image the trace started from; files the traced run saved
    /// with it are in [`crate::pm::image_files_dir`] of it.
    pub image: &'a Path,
    /// The label of the last marker before the point that starts with the
    /// target's [`CrashTarget::outside_markers`] prefix (`None`: none yet).
    pub marker: Option<&'a str>,
}

/// What recovery made of a crash image.
pub enum Recovery {
    /// Recovered: the checks apply.
    Recovered(Box<dyn Recovered>),
    /// Refused, as the allocator's design requires at this point (Metall
    /// refuses a store without its properly-closed mark): a correct outcome,
    /// counted; no check applies to a store nobody may open. The allocator's
    /// message.
    Refused(String),
}

/// An allocator whose crash images can be recovered, as the crash explorer uses it.
pub trait CrashTarget: Send + Sync {
    /// What its images are; a pmsim heap unless it says otherwise.
    fn image_format(&self) -> ImageFormat {
        ImageFormat::PmsimHeap
    }

    /// Where a program publishes its allocations besides inside other live
    /// blocks, as `(offset, bytes)` ranges of words: the heap's root slots;
    /// for an [`ImageFormat::Own`] target, what `image` (the trace's last
    /// state, every store persisted) says, e.g. PMDK's root object. A
    /// `malloc_to` is recognised by storing its result in such a word.
    fn publication_roots(&self, image: &Heap) -> Result<Vec<(u64, u64)>, String> {
        let _ = image;
        Ok(vec![(Heap::root_offset(0), 8 * crate::heap::ROOT_SLOTS as u64)])
    }

    /// A name for reports (the allocator and its variant).
    fn name(&self) -> String;

    /// See [`Recoverable::plain_mallocs_durable`].
    fn plain_mallocs_durable(&self) -> bool;

    /// See [`Recoverable::reachability_recovery`].
    fn reachability_recovery(&self) -> bool;

    /// See [`Recoverable::interrupted_may_lose`].
    fn interrupted_may_lose(&self) -> bool {
        false
    }

    /// See [`Recoverable::free_from_leaves_dest`].
    fn free_from_leaves_dest(&self) -> bool {
        false
    }

    /// Runs the allocator's own recovery on `heap` (a crash image), as the
    /// next run after a real crash would.
    fn recover(&self, heap: &Heap) -> Result<Box<dyn Recovered>, String>;

    /// For an allocator that keeps state outside its heap file (Metall's
    /// management files and properly-closed mark): the prefix of the trace
    /// markers by which its runs record each change of that state. The
    /// explorer then passes every crash point's last such marker to
    /// [`CrashTarget::recover_at`], and also crashes at the end of the
    /// trace, since that state may change after the last fence (Metall
    /// writes its mark last). `None` (the default): the heap is everything.
    fn outside_markers(&self) -> Option<&'static str> {
        None
    }

    /// Reads, once per exploration, what recovery needs besides the image
    /// (Metall: the management files saved with it), given the labels of
    /// every marker with the [`CrashTarget::outside_markers`] prefix; an
    /// error is one line for the user (a missing or mismatched file).
    fn load_outside(&self, image: &Path, markers: &[&str]) -> Result<(), String> {
        let _ = (image, markers);
        Ok(())
    }

    /// Recovery of `heap` after a crash at `at`: for an allocator with
    /// outside state, that state is first laid out beside `heap`'s file as a
    /// crash at `at` leaves it. By default [`CrashTarget::recover`].
    fn recover_at(&self, heap: &Heap, at: &CrashPoint) -> Result<Recovery, String> {
        let _ = at;
        self.recover(heap).map(Recovery::Recovered)
    }
}

/// An allocator after recovery, for the checks.
pub trait Recovered {
    /// Every live allocation `(offset, usable size)`, by offset.
    fn live_allocations(&mut self) -> Vec<(u64, u64)>;

    /// The allocator's own metadata check ([`Recoverable::check_metadata`]).
    fn check(&mut self) -> Result<(), String>;

    /// Allocates `size` bytes (the checks' probe of the recovered state).
    fn malloc(&mut self, size: u64) -> Option<u64>;

    /// See [`Recoverable::mark_roots`].
    fn mark_roots(&mut self) -> Vec<u64> {
        Vec::new()
    }
}

/// The [`CrashTarget`] of a [`Recoverable`] allocator with configuration `cfg`.
pub fn recovery_target<A: Recoverable>(cfg: A::Config) -> Box<dyn CrashTarget> {
    Box::new(RecoveryTarget::<A> { cfg, _a: PhantomData })
}

struct RecoveryTarget<A: Recoverable> {
    cfg: A::Config,
    _a: PhantomData<fn() -> A>,
}

impl<A: Recoverable> CrashTarget for RecoveryTarget<A> {
    fn name(&self) -> String {
        match A::variant(&self.cfg) {
            v if v.is_empty() => A::FAMILY.to_string(),
            v => format!("{} ({v})", A::FAMILY),
        }
    }

    fn plain_mallocs_durable(&self) -> bool {
        A::plain_mallocs_durable(&self.cfg)
    }

    fn reachability_recovery(&self) -> bool {
        A::reachability_recovery(&self.cfg)
    }

    fn interrupted_may_lose(&self) -> bool {
        A::interrupted_may_lose(&self.cfg)
    }

    fn free_from_leaves_dest(&self) -> bool {
        A::free_from_leaves_dest(&self.cfg)
    }

    fn recover(&self, heap: &Heap) -> Result<Box<dyn Recovered>, String> {
        // The image is a private copy: flushes are pointless, fences stay.
        let pm = Pm::native(heap, FlushInsn::None).map_err(|e| e.to_string())?;
        let a = A::open(heap, pm, self.cfg.clone()).map_err(|e| e.to_string())?;
        let t = a.thread(0);
        Ok(Box::new(Live::<A> { a, t }))
    }
}

struct Live<A: Recoverable> {
    a: Arc<A>,
    t: A::Thread,
}

impl<A: Recoverable> Recovered for Live<A> {
    fn live_allocations(&mut self) -> Vec<(u64, u64)> {
        self.a.live_blocks(&mut self.t)
    }

    fn check(&mut self) -> Result<(), String> {
        self.a.check_metadata(&mut self.t)
    }

    fn malloc(&mut self, size: u64) -> Option<u64> {
        self.t.malloc(size)
    }

    fn mark_roots(&mut self) -> Vec<u64> {
        self.a.mark_roots(&mut self.t)
    }
}

/// A workload to drive on an allocator.
pub struct Drive<'a> {
    pub workload: &'a Workload,
    pub opts: &'a RunOptions,
    /// Polled by progress bars meanwhile.
    pub progress: &'a Progress,
}

/// What driving a workload produced: the workload's result (its error comes
/// back here, after the allocator is closed, so a trace still ends cleanly)
/// and who the allocator was.
pub struct Driven {
    pub run: Result<RunReport, WorkloadError>,
    /// The instance's name ([`PmAllocator::name`]).
    pub name: String,
    /// Every parameter the instance ran with.
    pub params: Params,
}

/// Drives `d` on `a` and describes `a`.
pub fn drive<A: PmAllocator>(a: &Arc<A>, d: &Drive) -> Driven {
    let run = workloads::run(a, d.workload, d.opts, d.progress);
    Driven { run, name: a.name(), params: a.params() }
}

/// An allocator as the registry's callers see it, whatever its types.
pub trait Family: Sync {
    /// Its name in trace headers (`nvalloc`).
    fn family(&self) -> &'static str;

    /// The names `--alloc` accepts for it.
    fn presets(&self) -> &'static [&'static str];

    /// One line for `--help`.
    fn about(&self) -> &'static str;

    /// Preset `name` with `overrides` (`key=value`) applied, validated.
    fn configure(&self, name: &str, overrides: &[&str]) -> Result<Params, AllocError>;

    /// Whether pmsim's built-in tracer sees its persistent writes.
    fn traceable(&self) -> bool {
        true
    }

    /// See [`Allocator::heap_size`].
    fn heap_size(&self, params: &Params, wl: &Workload, threads: u32) -> u64;

    /// The trace header's variant and parameters for a run of `threads` threads.
    fn header(&self, params: &Params, threads: u32) -> Result<(String, Params), AllocError>;

    /// Creates the allocator on `heap`, drives the workload, closes it and
    /// gives the `Pm` back (a traced one goes to its collector next).
    fn run_on_pm(&self, params: &Params, heap: &Heap, pm: Pm, d: &Drive) -> Result<(Driven, Pm), AllocError>;

    /// For an allocator on a pool of its own (PMDK): creates the pool at
    /// `path`, drives the workload, closes it; the flush it used. `None` for
    /// allocators on a pmsim heap (they go through [`Family::run_on_pm`]).
    fn run_on_pool(
        &self,
        path: &Path,
        size: u64,
        overwrite: bool,
        d: &Drive,
    ) -> Option<Result<(Driven, String), Box<dyn std::error::Error + Send + Sync>>> {
        let _ = (path, size, overwrite, d);
        None
    }

    /// The crash explorer's view of it, with the configuration a trace
    /// header recorded; an error when it has no crash recovery.
    fn crash_target(&self, params: &Params) -> Result<Box<dyn CrashTarget>, String>;
}

/// The [`Family`] of an [`Allocator`]: what its line in the registry holds.
pub struct Native<A>(PhantomData<fn() -> A>);

impl<A> Native<A> {
    pub const ENTRY: Native<A> = Native(PhantomData);
}

/// The allocator's configuration read back from `params`.
fn typed<A: Allocator>(params: &Params) -> Result<A::Config, AllocError> {
    let c: A::Config = serde_json::from_value(serde_json::Value::Object(params.clone()))
        .map_err(|e| AllocError::config(A::Config::ALLOC, format!("unreadable parameters: {e}")))?;
    c.validate()?;
    Ok(c)
}

impl<A: Allocator> Family for Native<A> {
    fn family(&self) -> &'static str {
        A::FAMILY
    }

    fn presets(&self) -> &'static [&'static str] {
        A::PRESETS
    }

    fn about(&self) -> &'static str {
        A::ABOUT
    }

    fn configure(&self, name: &str, overrides: &[&str]) -> Result<Params, AllocError> {
        let cfg = A::preset(name)?.with_overrides(overrides.iter().copied())?;
        Ok(as_map(&cfg))
    }

    fn heap_size(&self, params: &Params, wl: &Workload, threads: u32) -> u64 {
        match typed::<A>(params) {
            Ok(cfg) => A::heap_size(&cfg, wl, threads),
            Err(_) => wl.heap_size_hint(threads),
        }
    }

    fn header(&self, params: &Params, threads: u32) -> Result<(String, Params), AllocError> {
        let cfg = A::for_run(&typed::<A>(params)?, threads);
        Ok((A::variant(&cfg), A::header_params(&cfg)))
    }

    fn run_on_pm(&self, params: &Params, heap: &Heap, pm: Pm, d: &Drive) -> Result<(Driven, Pm), AllocError> {
        let cfg = A::for_run(&typed::<A>(params)?, d.opts.threads);
        let a = A::create(heap, pm, cfg)?;
        let driven = drive(&a, d);
        Ok((driven, a.close(heap)?))
    }

    fn crash_target(&self, params: &Params) -> Result<Box<dyn CrashTarget>, String> {
        let cfg = typed::<A>(params).map_err(|e| format!("the trace's allocator parameters: {e}"))?;
        A::crash_target(cfg)
    }
}
