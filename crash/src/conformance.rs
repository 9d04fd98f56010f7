//! The conformance suite: what every registered allocator must pass. It
//! walks a registry, so registering an allocator (one line in
//! `pmsim_model::registry::ALLOCATORS`) is what puts it under the suite;
//! `crash/tests/conformance.rs` is one line:
//!
//! ```ignore
//! pmsim_crash::conformance_suite!(pmsim_model::registry::ALLOCATORS);
//! ```
//!
//! Each [`Stage`] is one test over every preset of every allocator that it
//! concerns ([`plan`]):
//!
//! * every workload at tiny scale on 1 and 2 threads through the runner
//!   (what `pmsim run` and sweeps do), for every allocator;
//! * for an allocator with crash recovery ([`Allocator::crash_rules`]) on a
//!   pmsim heap: recovery of a heap whose process was SIGKILLed
//!   mid-workload (or its refusal, where the design requires one), the
//!   crash explorer on a traced run (no violation; every write of the run
//!   inside a region the allocator registered), and each of its broken
//!   variants ([`Allocator::MUTANTS`]), which the explorer must catch.
//!
//! [`Allocator::crash_rules`]: pmsim_model::Allocator::crash_rules
//! [`Allocator::MUTANTS`]: pmsim_model::Allocator::MUTANTS

use crate::{explore, target_among, CrashTrace, Options, Progress, Summary};
use pmsim_model::family::Family;
use pmsim_model::runner::{self, AllocSpec, HeapSpec, RunSpec};
use pmsim_model::workloads::{Progress as RunProgress, RunOptions, Scale, Workload};
use pmsim_model::{FlushInsn, Heap, TraceConfig};
use pmsim_traces::{Event, TraceFile, WriterOptions};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Expands to the conformance suite over `$registry` (a
/// `&[&'static dyn Family]`): one test per [`Stage`].
#[macro_export]
macro_rules! conformance_suite {
    ($registry:expr) => {
        #[test]
        fn conformance_every_workload() {
            $crate::conformance::run_stage($registry, $crate::conformance::Stage::EveryWorkload, "");
        }

        #[test]
        fn conformance_sigkill_recovery() {
            let name = $crate::conformance::test_name(module_path!(), "conformance_sigkill_recovery");
            $crate::conformance::run_stage($registry, $crate::conformance::Stage::SigkillRecovery, &name);
        }

        #[test]
        fn conformance_crash_explorer_passes() {
            $crate::conformance::run_stage($registry, $crate::conformance::Stage::CrashExplorerPasses, "");
        }

        #[test]
        fn conformance_mutants_are_caught() {
            $crate::conformance::run_stage($registry, $crate::conformance::Stage::MutantsCaught, "");
        }
    };
}

/// One part of the suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Every workload at tiny scale, 1 and 2 threads, natively.
    EveryWorkload,
    /// Recovery after SIGKILL mid-workload (or its refusal).
    SigkillRecovery,
    /// The crash explorer on a traced run finds no violation.
    CrashExplorerPasses,
    /// The crash explorer catches each broken variant.
    MutantsCaught,
}

impl Stage {
    pub const ALL: [Stage; 4] =
        [Stage::EveryWorkload, Stage::SigkillRecovery, Stage::CrashExplorerPasses, Stage::MutantsCaught];
}

/// One check of the suite: a stage on one allocator spec.
#[derive(Clone)]
pub struct Check {
    pub family: &'static dyn Family,
    /// The spec checked (`nvalloc-log`, `llfree:mutation=ll-counter-flush`).
    pub spec: String,
    pub stage: Stage,
}

/// The checks of `stage` over `registry`: every preset of every allocator
/// and every further configuration it names ([`Allocator::VARIANTS`]), as
/// the stage concerns them (the crash stages: those with crash recovery on
/// a pmsim heap), and for [`Stage::MutantsCaught`] every broken variant of
/// every allocator.
///
/// [`Allocator::VARIANTS`]: pmsim_model::Allocator::VARIANTS
pub fn plan(registry: &[&'static dyn Family], stage: Stage) -> Vec<Check> {
    let mut out = Vec::new();
    for &family in registry {
        let check = |spec: &&str| Check { family, spec: spec.to_string(), stage };
        let recovers = |spec: &&&str| {
            family.traceable()
                && AllocSpec::parse_among(spec, [], &[family]).is_ok_and(|s| family.crash_rules(s.params()).is_ok())
        };
        let specs = family.presets().iter().chain(family.variants());
        match stage {
            Stage::EveryWorkload => out.extend(specs.map(check)),
            Stage::SigkillRecovery | Stage::CrashExplorerPasses => out.extend(specs.filter(recovers).map(check)),
            Stage::MutantsCaught => out.extend(family.mutants().iter().map(check)),
        }
    }
    out
}

/// Runs the checks of `stage` over `registry`, every one even after a
/// failure, as many at a time as there are cores, and fails naming each
/// allocator that failed. `test` is this test's name (for re-running it as
/// the SIGKILL victim).
pub fn run_stage(registry: &[&'static dyn Family], stage: Stage, test: &str) {
    let checks = plan(registry, stage);
    if let Some(path) = std::env::var_os(VICTIM) {
        let spec = std::env::var(VICTIM_SPEC).expect("the victim's spec");
        let c = checks.iter().find(|c| c.spec == spec).expect("the victim's allocator is in the plan");
        return victim(&spec_of(c.family, &c.spec), &victim_workload(), Path::new(&path));
    }
    let next = AtomicUsize::new(0);
    let failed = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(checks.len());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                while let Some(c) = checks.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let start = std::time::Instant::now();
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_check(c, test)));
                    eprintln!("{stage:?} {}: {:.1} s", c.spec, start.elapsed().as_secs_f64());
                    if let Err(e) = r {
                        let why = e
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
                        failed.lock().unwrap().push(format!("{}: {}", c.spec, why.unwrap_or_default()));
                    }
                }
            });
        }
    });
    let failed = failed.into_inner().unwrap();
    assert!(
        failed.is_empty(),
        "{stage:?} failed for {} of {} checks:\n{}",
        failed.len(),
        checks.len(),
        failed.join("\n")
    );
}

/// Runs one check; panics when it fails.
pub fn run_check(c: &Check, test: &str) {
    match c.stage {
        Stage::EveryWorkload => every_workload(c.family, &c.spec),
        Stage::SigkillRecovery => sigkill_recovery(c.family, &c.spec, test),
        Stage::CrashExplorerPasses => crash_explorer_passes(c.family, &c.spec),
        Stage::MutantsCaught => mutation_is_caught(c.family, &c.spec),
    }
}

/// A scratch directory under `/dev/shm` (memory, as a DAX mount) when there
/// is one, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        // Unique within the process too: stages run in parallel.
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let p = base.join(format!("pmsim-conformance-{}-{tag}-{n}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn spec_of(family: &'static dyn Family, spec: &str) -> AllocSpec {
    AllocSpec::parse_among(spec, [], &[family]).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

/// Every workload at tiny scale, 1 and 2 threads, natively through the
/// runner ([`runner::check_every_workload`]).
pub fn every_workload(family: &'static dyn Family, spec: &str) {
    let dir = Scratch::new("workloads");
    runner::check_every_workload(&spec_of(family, spec), &dir.0).unwrap_or_else(|e| panic!("{e}"));
}

/// The name the test harness gives test `f` of module `module` (its path
/// without the crate's name), for re-running just it.
pub fn test_name(module: &str, f: &str) -> String {
    match module.split_once("::") {
        Some((_, inner)) => format!("{inner}::{f}"),
        None => f.to_string(),
    }
}

/// The environment variables that make [`sigkill_recovery`]'s test the
/// victim: its heap file, and the spec it runs.
const VICTIM: &str = "PMSIM_CONFORMANCE_VICTIM";
const VICTIM_SPEC: &str = "PMSIM_CONFORMANCE_SPEC";
const VICTIM_THREADS: u32 = 2;

fn victim_workload() -> Workload {
    Workload::preset("threadtest", Scale::Tiny)
        .unwrap()
        .with_overrides(["iterations=1000000", "objects=64", "publish=true"])
        .unwrap()
}

/// Runs a long Threadtest in a child process (this test binary, re-run as
/// `test` with [`VICTIM`] set), SIGKILLs it mid-run three times, and after
/// each kill runs the allocator's recovery on the heap: it must succeed,
/// leave disjoint live allocations inside the heap, pass the allocator's
/// metadata check, and allocate again. An allocator whose design refuses
/// a heap its last run did not close ([`CrashRules::refuses_unclean`]:
/// Metall) must refuse it instead.
///
/// [`CrashRules::refuses_unclean`]: pmsim_model::CrashRules::refuses_unclean
pub fn sigkill_recovery(family: &'static dyn Family, spec: &str, test: &str) {
    let alloc = spec_of(family, spec);
    let dir = Scratch::new("sigkill");
    let path = dir.0.join("heap");
    let (_, params) = family.header(alloc.params(), VICTIM_THREADS).unwrap();
    let rules = family.crash_rules(&params).unwrap_or_else(|e| panic!("{spec}: {e}"));
    let target = family.crash_target(&params).unwrap_or_else(|e| panic!("{spec}: {e}"));
    for round in 0..3u64 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env(VICTIM, &path)
            .env(VICTIM_SPEC, spec)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the victim starts");
        let out = child.stdout.take().unwrap();
        let ready = BufReader::new(out).lines().map_while(Result::ok).any(|l| l.contains("victim ready"));
        assert!(ready, "{spec}: the victim ended before it was ready: {:?}", child.wait());
        std::thread::sleep(Duration::from_millis(20 + 37 * round));
        child.kill().expect("SIGKILL");
        child.wait().unwrap();
        // The victim's scratch directory is left as a killed pmsim's is;
        // removed as the next pmsim command would remove it.
        pmsim_traces::owned::remove_stale_scratch();
        let heap = Heap::open(&path).unwrap_or_else(|e| panic!("{spec}, round {round}: {e}"));
        assert!(!heap.was_clean(), "{spec}: the heap was closed cleanly although the process was killed");
        let recovered = target.recover(&heap);
        if rules.refuses_unclean {
            let e = recovered.err().unwrap_or_else(|| panic!("{spec}, round {round}: an unclean heap was opened"));
            assert!(!e.contains('\n'), "{spec}: the refusal is one line: {e}");
            eprintln!("{spec}, round {round}: refused: {e}");
            continue;
        }
        let mut rec = recovered.unwrap_or_else(|e| panic!("{spec}, round {round}: recovery failed: {e}"));
        rec.check().unwrap_or_else(|e| panic!("{spec}, round {round}: metadata after recovery: {e}"));
        let live = rec.live_allocations();
        let mut end = pmsim_model::heap::HEADER_SIZE;
        for &(o, s) in &live {
            assert!(o >= end, "{spec}, round {round}: live allocations overlap at {o:#x}");
            end = o + s;
        }
        assert!(end <= heap.size(), "{spec}, round {round}: a live allocation ends past the heap");
        assert!(rec.malloc(64).is_some(), "{spec}, round {round}: no allocation after recovery");
        eprintln!("{spec}, round {round}: recovered with {} live allocations", live.len());
    }
}

/// The victim: the workload on a fresh heap at `path`; says "victim ready"
/// once operations are under way, and exits with an error if it finishes.
fn victim(alloc: &AllocSpec, wl: &Workload, path: &Path) {
    let hs =
        HeapSpec { path: path.to_path_buf(), size: alloc.heap_size(wl, VICTIM_THREADS), overwrite: true, shown: None };
    let opts = RunOptions { threads: VICTIM_THREADS, seed: 11, ..Default::default() };
    let progress = RunProgress::default();
    std::thread::scope(|s| {
        s.spawn(|| {
            while progress.done() == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            println!("victim ready");
        });
        let rs = RunSpec { alloc, workload: wl, opts: &opts, heap: &hs, flush: FlushInsn::best(), progress: &progress };
        let r = runner::run_native(&rs);
        eprintln!("the victim finished before it was killed: {:?}", r.map(|o| o.run.ops));
        std::process::exit(3);
    });
}

/// Records `alloc` on `workload` (with `params` overrides, tiny scale) into
/// `dir/NAME.pmt` on an 8 MiB heap; with `values`, the stored bytes and the
/// heap image `dir/NAME.pmt.img` too: the input of the crash explorer, for
/// the suite and for any test that explores a traced run.
pub fn record(dir: &Path, name: &str, alloc: &AllocSpec, workload: &str, params: &[&str], values: bool) -> PathBuf {
    let trace = dir.join(format!("{name}.pmt"));
    let wl = Workload::preset(workload, Scale::Tiny).unwrap().with_overrides(params.iter().copied()).unwrap();
    let heap = HeapSpec { path: dir.join(format!("{name}.heap")), size: 8 << 20, overwrite: true, shown: None };
    let progress = RunProgress::default();
    let rs = RunSpec {
        alloc,
        workload: &wl,
        opts: &RunOptions::default(),
        heap: &heap,
        flush: FlushInsn::best(),
        progress: &progress,
    };
    let image = values.then(|| dir.join(format!("{name}.pmt.img")));
    let tcfg = TraceConfig { values, heap_image: image, ..TraceConfig::default() };
    let wopts = WriterOptions { values, ..WriterOptions::default() };
    let (_, finished) = runner::run_traced(&rs, &tcfg, |h| TraceFile::create(&trace, &h, &wopts))
        .unwrap_or_else(|e| panic!("{}: traced run: {e}", alloc.label()));
    finished.sink.finish().unwrap();
    finished.outputs.commit().unwrap();
    trace
}

/// The suite's traced run: a small Threadtest whose store keeps its last
/// batch of objects at the end (`keep=true`), so a crash after the last
/// operation still has data to lose.
pub const SUITE_THREADTEST: &[&str] = &["objects=100", "iterations=2", "keep=true"];

/// Records the suite's traced Threadtest of `spec` (values and the heap
/// image included) and explores its crash states. Where the allocator's
/// rules let `free_from` leave its destination (NVAlloc's public protocol,
/// [`CrashRules::free_from_leaves_dest`]), the stale destination that
/// leaves is counted, not reported: the guarantee the design makes.
///
/// [`CrashRules::free_from_leaves_dest`]: pmsim_model::CrashRules::free_from_leaves_dest
fn explore_spec(family: &'static dyn Family, spec: &str) -> Summary {
    let dir = Scratch::new("explore");
    let alloc = spec_of(family, spec);
    let trace = record(&dir.0, "t", &alloc, "threadtest", SUITE_THREADTEST, true);
    if let Some(w) = first_unmapped_write(&trace) {
        panic!(
            "{spec}: a write outside every region the allocator registered (its persist time counts as unmapped): {w}"
        );
    }
    let tr = CrashTrace::load(&trace, None).unwrap();
    let target = target_among(&tr.header, &[family]).unwrap_or_else(|e| panic!("{spec}: {e}"));
    let allow_stale_dest = target.free_from_leaves_dest();
    let opts = Options { bound: 32, every: 2, allow_stale_dest, ..Options::default() };
    explore(&tr, target.as_ref(), &opts, &Progress::default()).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

/// The first store or flush of `trace` outside every region (the heap's
/// header included), if any: a region the allocator forgot to register.
pub fn first_unmapped_write(trace: &Path) -> Option<String> {
    let mut reader = pmsim_traces::TraceReader::open(trace).unwrap_or_else(|e| panic!("{e}"));
    let mut regions = pmsim_traces::RegionMap::new(&reader.header().regions);
    let mut first = None;
    reader
        .for_each(|r| {
            regions.apply(&r.event);
            let addr = match r.event {
                Event::Store { addr, .. } | Event::NtStore { addr, .. } => addr,
                Event::Flush { line, .. } => line,
                _ => return,
            };
            if first.is_none() && regions.lookup(addr).is_none() {
                first = Some(format!("{addr:#x} at event {}", r.index));
            }
        })
        .unwrap_or_else(|e| panic!("{e}"));
    first
}

/// The crash explorer finds no violation on a traced run of `spec`, and
/// checks 100 images or more, or every crash point completely (an
/// allocator with few persistence points, or whose refusals read nothing);
/// for a configuration whose published protocol has a violation by design
/// ([`CrashRules::expected_violation`]), it finds that one.
///
/// [`CrashRules::expected_violation`]: pmsim_model::CrashRules::expected_violation
pub fn crash_explorer_passes(family: &'static dyn Family, spec: &str) {
    let s = explore_spec(family, spec);
    let rules = family.crash_rules(spec_of(family, spec).params()).unwrap_or_else(|e| panic!("{spec}: {e}"));
    if let Some(want) = rules.expected_violation {
        // The published protocol's own flaw: the explorer must find it.
        let v = s.violation.unwrap_or_else(|| {
            panic!("{spec}: the violation its protocol has by design ({want}) not found in {} images", s.images)
        });
        assert!(v.problem.contains(want), "{spec}: expected a violation saying '{want}', found: {}", v.problem);
        eprintln!("{spec}: its protocol's violation found after {} images: {}", s.images, v.problem);
        return;
    }
    if let Some(v) = &s.violation {
        panic!("{spec}: violation at point {} image {}: {}", v.point, v.image, v.problem);
    }
    assert!(
        s.images >= 100 || s.complete_points == s.points,
        "{spec}: only {} crash images checked, {} of {} points completely",
        s.images,
        s.complete_points,
        s.points
    );
    eprintln!(
        "{spec}: {} points ({} complete), {} images ({} refused, {} stale destinations), no violation",
        s.points, s.complete_points, s.images, s.refused, s.stale_dests
    );
}

/// The crash explorer catches the deliberately broken variant `mutated`.
pub fn mutation_is_caught(family: &'static dyn Family, mutated: &str) {
    let s = explore_spec(family, mutated);
    let v = s.violation.unwrap_or_else(|| panic!("{mutated}: not caught in {} crash images", s.images));
    eprintln!("{mutated}: caught after {} images: {}", s.images, v.problem);
}

#[cfg(test)]
mod tests {
    use super::first_unmapped_write;
    use pmsim_traces::{Category, Event, FenceKind, FlushKind, Region, TraceFile, TraceHeader, WriterOptions};

    /// The region check can fail: a store to a line no region covers is
    /// named, and one inside a region registered before it is not.
    #[test]
    fn a_write_outside_every_region_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.pmt");
        let mut h = TraceHeader::default();
        h.regions.push(Region { id: 0, name: "heap header".into(), category: Category::Meta, base: 0, len: 4096 });
        let mut f = TraceFile::create(&path, &h, &WriterOptions::default()).unwrap();
        let add = Event::RegionAdd { id: 1, category: Category::Data, base: 8192, len: 4096, name: "data" };
        for ev in [
            Event::Store { addr: 64, size: 8, value: None },
            add,
            Event::Store { addr: 8200, size: 8, value: None },
            Event::Flush { kind: FlushKind::Clwb, line: 8192 },
            Event::Fence { kind: FenceKind::Sfence },
            Event::Store { addr: 4160, size: 8, value: None },
        ] {
            f.write(0, &ev).unwrap();
        }
        f.finish().unwrap();
        assert_eq!(first_unmapped_write(&path).as_deref(), Some("0x1040 at event 5"));
    }
}
