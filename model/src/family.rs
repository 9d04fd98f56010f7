//! An allocator as pmsim's callers see it, built from the seam an allocator
//! implements ([`Allocator`], `model/src/alloc.rs`): the registry's entry
//! ([`Family`], what `pmsim run`, sweeps and `--help` hold) and the crash
//! explorer's view ([`CrashTarget`], and [`Recovered`] for one recovered
//! image). Configurations travel as JSON objects (what trace headers and
//! result rows hold anyway) and are read back into the allocator's own type
//! here, so nothing outside the allocator's module names its types. An
//! allocator implements none of these traits, except a [`CrashTarget`] of
//! its own when its images or its state outside the heap need one
//! ([`Allocator::crash_target`]: PMDK's pool, Metall's management files).

use crate::alloc::AllocThread;
pub use crate::alloc::{Allocator, CrashRules, Params};
use crate::config::AllocConfig;
use crate::error::AllocError;
use crate::heap::Heap;
use crate::params::as_map;
use crate::pm::{FlushInsn, Pm};
pub use crate::target::{CrashPoint, CrashTarget, ImageFormat, Recovered, Recovery};
use crate::workloads::{self, Progress, RunOptions, RunReport, Workload, WorkloadError};
use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// pmsim's [`CrashTarget`] of an allocator with configuration `cfg`: its
/// recovery is [`Allocator::open`] on the image, its rules
/// [`Allocator::crash_rules`] (none where it has no crash recovery).
pub fn recovery_target<A: Allocator>(cfg: A::Config) -> Box<dyn CrashTarget> {
    let rules = A::crash_rules(&cfg).unwrap_or_default();
    Box::new(RecoveryTarget::<A> { cfg, rules, _a: PhantomData })
}

struct RecoveryTarget<A: Allocator> {
    cfg: A::Config,
    rules: CrashRules,
    _a: PhantomData<fn() -> A>,
}

impl<A: Allocator> CrashTarget for RecoveryTarget<A> {
    fn name(&self) -> String {
        match A::variant(&self.cfg) {
            v if v.is_empty() => A::FAMILY.to_string(),
            v => format!("{} ({v})", A::FAMILY),
        }
    }

    fn plain_mallocs_durable(&self) -> bool {
        self.rules.plain_mallocs_durable
    }

    fn reachability_recovery(&self) -> bool {
        self.rules.reachability_recovery
    }

    fn interrupted_may_lose(&self) -> bool {
        self.rules.interrupted_may_lose
    }

    fn free_from_leaves_dest(&self) -> bool {
        self.rules.free_from_leaves_dest
    }

    fn recover(&self, heap: &Heap) -> Result<Box<dyn Recovered>, String> {
        // The image is a private copy: flushes are pointless, fences stay.
        let pm = Pm::native(heap, FlushInsn::None).map_err(|e| e.to_string())?;
        let a = A::open(heap, pm, self.cfg.clone()).map_err(|e| e.to_string())?;
        let t = a.thread(0);
        Ok(Box::new(Live::<A> { a, t }))
    }
}

struct Live<A: Allocator> {
    a: Arc<A>,
    t: A::Thread,
}

impl<A: Allocator> Recovered for Live<A> {
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
    /// Where to copy the heap (or the allocator's own file) once the
    /// workload succeeded, before the allocator is closed: the file as a
    /// crash at that moment leaves it (a killed process's stores are all in
    /// the file; nothing the close would write is), for
    /// [`Family::time_recovery`].
    pub crash_copy: Option<&'a Path>,
}

/// Copies `from` to `d.crash_copy` (if asked and the workload succeeded).
fn crash_copy(d: &Drive, driven: &Driven, from: &Path, alloc: &'static str) -> Result<(), AllocError> {
    match d.crash_copy {
        Some(to) if driven.run.is_ok() => std::fs::copy(from, to).map(drop).map_err(|e| {
            AllocError::config(
                alloc,
                format!("cannot copy {} to {} as a crash leaves it: {e}", from.display(), to.display()),
            )
        }),
        _ => Ok(()),
    }
}

/// What [`Family::time_recovery`] measured.
#[derive(Clone, Copy, Debug)]
pub struct TimedRecovery {
    /// Wall time of the allocator's recovery alone (its `open` of the crashed
    /// heap, on one thread), seconds, less what its system does after its
    /// open has returned (`deferred_s`).
    pub seconds: f64,
    /// Of the open's wall time, the seconds its system spends on a thread of
    /// its own after the open has returned
    /// ([`Allocator::deferred_recovery_s`]).
    pub deferred_s: f64,
    /// What the check of the recovered heap counted (the list's nodes).
    pub checked: u64,
}

/// Checks a recovered heap through a thread of the recovered allocator,
/// given its parameters and its live allocations; a count, or one line.
pub type RecoveryCheck<'a> = dyn FnMut(&dyn AllocThread, &Params, &[(u64, u64)]) -> Result<u64, String> + 'a;

/// What driving a workload produced: the workload's result (its error comes
/// back here, after the allocator is closed, so a trace still ends cleanly)
/// and who the allocator was.
pub struct Driven {
    pub run: Result<RunReport, WorkloadError>,
    /// The instance's name ([`Allocator::name`]).
    pub name: String,
    /// Every parameter the instance ran with.
    pub params: Params,
}

/// Drives `d` on `a` and describes `a`.
pub fn drive<A: Allocator>(a: &Arc<A>, d: &Drive) -> Driven {
    let run = workloads::run(a, d.workload, d.opts, d.progress);
    Driven { run, name: a.name(), params: a.params() }
}

/// An allocator as the registry's callers see it, whatever its types: the
/// registry's entry, [`Native`] of an [`Allocator`].
pub trait Family: Sync {
    /// Its name in trace headers (`nvalloc`).
    fn family(&self) -> &'static str;

    /// The names `--alloc` accepts for it.
    fn presets(&self) -> &'static [&'static str];

    /// One line for `--help`.
    fn about(&self) -> &'static str;

    /// Preset `name` with `overrides` (`key=value`) applied, validated.
    fn configure(&self, name: &str, overrides: &[&str]) -> Result<Params, AllocError>;

    /// Whether pmsim's built-in tracer sees its persistent writes (not on a
    /// file of its own, [`Allocator::OWN_FILE`]).
    fn traceable(&self) -> bool;

    /// See [`Allocator::heap_size`].
    fn heap_size(&self, params: &Params, wl: &Workload, threads: u32) -> u64;

    /// The trace header's variant and parameters for a run of `threads` threads.
    fn header(&self, params: &Params, threads: u32) -> Result<(String, Params), AllocError>;

    /// Creates the allocator on `heap`, drives the workload, closes it and
    /// gives the `Pm` back (a traced one goes to its collector next).
    fn run_on_pm(&self, params: &Params, heap: &Heap, pm: Pm, d: &Drive) -> Result<(Driven, Pm), AllocError>;

    /// For an allocator on a file of its own (PMDK's pool): creates it at
    /// `path`, drives the workload, closes it; the flush it used. `None` for
    /// allocators on a pmsim heap (they go through [`Family::run_on_pm`]).
    fn run_on_pool(
        &self,
        params: &Params,
        path: &Path,
        size: u64,
        overwrite: bool,
        d: &Drive,
    ) -> Option<Result<(Driven, String), AllocError>>;

    /// See [`Allocator::crash_rules`], with the configuration `params`.
    fn crash_rules(&self, params: &Params) -> Result<CrashRules, String>;

    /// See [`Allocator::beside_heap`].
    fn beside_heap(&self, heap: &Path) -> Vec<std::path::PathBuf>;

    /// The crash explorer's view of it, with the configuration a trace
    /// header recorded; an error when it has no crash recovery.
    fn crash_target(&self, params: &Params) -> Result<Box<dyn CrashTarget>, String>;

    /// Its broken variants ([`Allocator::MUTANTS`]).
    fn mutants(&self) -> &'static [&'static str];

    /// See [`Allocator::process_env`].
    fn process_env(&self, flush: Option<FlushInsn>, msync: bool) -> Vec<(&'static str, Option<&'static str>)>;

    /// See [`Allocator::serve_helper_if_asked`].
    fn serve_helper_if_asked(&self);

    /// What the conformance suite checks besides its presets ([`Allocator::VARIANTS`]).
    fn variants(&self) -> &'static [&'static str];

    /// Why a crashed heap of a run of `threads` threads with `params` would
    /// not be recovered (no crash recovery, or a design that refuses such a
    /// heap, Metall's), or `None` when [`Family::time_recovery`] applies.
    fn no_recovery(&self, params: &Params, threads: u32) -> Option<String>;

    /// Runs the allocator's own recovery on the crashed heap (or own file)
    /// `image` natively with flush instruction `flush`, timing only that
    /// (its [`Allocator::open`], one thread), then `check`s the recovered
    /// heap and closes it.
    fn time_recovery(
        &self,
        params: &Params,
        threads: u32,
        image: &Path,
        flush: FlushInsn,
        check: &mut RecoveryCheck,
    ) -> Result<TimedRecovery, String>;
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

    fn traceable(&self) -> bool {
        !A::OWN_FILE
    }

    fn heap_size(&self, params: &Params, wl: &Workload, threads: u32) -> u64 {
        match typed::<A>(params) {
            Ok(cfg) => A::heap_size(&cfg, &wl.heap_need(threads)),
            Err(_) => wl.heap_size_hint(threads),
        }
    }

    fn header(&self, params: &Params, threads: u32) -> Result<(String, Params), AllocError> {
        let cfg = A::for_run(&typed::<A>(params)?, threads);
        Ok((A::variant(&cfg), A::header_params(&cfg)))
    }

    fn run_on_pm(&self, params: &Params, heap: &Heap, pm: Pm, d: &Drive) -> Result<(Driven, Pm), AllocError> {
        if A::OWN_FILE {
            let m = format!("{} runs on a file of its own, not on a pmsim heap", A::FAMILY);
            return Err(AllocError::config(A::Config::ALLOC, m));
        }
        let cfg = A::for_run(&typed::<A>(params)?, d.opts.threads);
        let a = A::create(heap, pm, cfg)?;
        let driven = drive(&a, d);
        crash_copy(d, &driven, heap.path(), A::Config::ALLOC)?;
        Ok((driven, a.close(heap)?))
    }

    fn run_on_pool(
        &self,
        params: &Params,
        path: &Path,
        size: u64,
        overwrite: bool,
        d: &Drive,
    ) -> Option<Result<(Driven, String), AllocError>> {
        if !A::OWN_FILE {
            return None;
        }
        Some((|| {
            let cfg = A::for_run(&typed::<A>(params)?, d.opts.threads);
            let a = A::create_own_file(path, size, overwrite, cfg)?;
            if let Some(f) = d.opts.prefault() {
                a.prefault(&f)?;
            }
            let driven = drive(&a, d);
            crash_copy(d, &driven, path, A::Config::ALLOC)?;
            let flush = driven.params.get("flush").and_then(|v| v.as_str()).unwrap_or("own").to_string();
            drop(AllocError::sole_owner(a, A::Config::ALLOC)?);
            Ok((driven, flush))
        })())
    }

    fn crash_rules(&self, params: &Params) -> Result<CrashRules, String> {
        let cfg = typed::<A>(params).map_err(|e| format!("the allocator's parameters: {e}"))?;
        A::crash_rules(&cfg)
    }

    fn beside_heap(&self, heap: &Path) -> Vec<std::path::PathBuf> {
        A::beside_heap(heap)
    }

    fn crash_target(&self, params: &Params) -> Result<Box<dyn CrashTarget>, String> {
        let cfg = typed::<A>(params).map_err(|e| format!("the trace's allocator parameters: {e}"))?;
        A::crash_rules(&cfg)?;
        Ok(A::crash_target(&cfg).unwrap_or_else(|| recovery_target::<A>(cfg)))
    }

    fn mutants(&self) -> &'static [&'static str] {
        A::MUTANTS
    }

    fn process_env(&self, flush: Option<FlushInsn>, msync: bool) -> Vec<(&'static str, Option<&'static str>)> {
        A::process_env(flush, msync)
    }

    fn serve_helper_if_asked(&self) {
        A::serve_helper_if_asked()
    }

    fn variants(&self) -> &'static [&'static str] {
        A::VARIANTS
    }

    fn no_recovery(&self, params: &Params, threads: u32) -> Option<String> {
        let cfg = match typed::<A>(params) {
            Ok(c) => A::for_run(&c, threads),
            Err(e) => return Some(e.to_string()),
        };
        match A::crash_rules(&cfg) {
            Err(e) => Some(e),
            Ok(r) if r.refuses_unclean => {
                Some(format!("{} refuses a heap its last run did not close (its design)", A::FAMILY))
            }
            Ok(_) => None,
        }
    }

    fn time_recovery(
        &self,
        params: &Params,
        threads: u32,
        image: &Path,
        flush: FlushInsn,
        check: &mut RecoveryCheck,
    ) -> Result<TimedRecovery, String> {
        let cfg = A::for_run(&typed::<A>(params).map_err(|e| e.to_string())?, threads);
        let checked = |a: &Arc<A>, check: &mut RecoveryCheck| {
            let mut t = a.thread(0);
            let live = a.live_blocks(&mut t);
            check(&t, &a.params(), &live)
        };
        if A::OWN_FILE {
            let t0 = Instant::now();
            let a = A::open_own_file(image, cfg).map_err(|e| e.to_string())?;
            let (seconds, deferred_s) = foreground(t0, &*a);
            let n = checked(&a, check);
            drop(AllocError::sole_owner(a, A::Config::ALLOC).map_err(|e| e.to_string())?);
            return Ok(TimedRecovery { seconds, deferred_s, checked: n? });
        }
        let heap = Heap::open(image).map_err(|e| e.to_string())?;
        if heap.was_clean() {
            return Err(format!("{}: the crashed heap says it was closed cleanly", image.display()));
        }
        let pm = Pm::native(&heap, flush).map_err(|e| e.to_string())?;
        let t0 = Instant::now();
        let a = A::open(&heap, pm, cfg).map_err(|e| e.to_string())?;
        let (seconds, deferred_s) = foreground(t0, &*a);
        let n = checked(&a, check);
        drop(a.close(&heap).map_err(|e| e.to_string())?);
        heap.close().map_err(|e| e.to_string())?;
        Ok(TimedRecovery { seconds, deferred_s, checked: n? })
    }
}

/// The wall time since `t0` of an open that made `a`, split into what the
/// program waits for and what `a`'s system defers to a thread of its own
/// ([`Allocator::deferred_recovery_s`]), seconds.
fn foreground<A: Allocator>(t0: Instant, a: &A) -> (f64, f64) {
    let all = t0.elapsed().as_secs_f64();
    let deferred = a.deferred_recovery_s().clamp(0.0, all);
    (all - deferred, deferred)
}
