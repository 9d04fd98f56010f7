//! The conformance suite an allocator gets with one line in its tests:
//!
//! ```ignore
//! pmsim_crash::conformance_tests!(&MY_FAMILY, "my-alloc");
//! pmsim_crash::conformance_tests!(&MY_FAMILY, "my-alloc", recovery, mutated: "my-alloc:mutation=true");
//! ```
//!
//! The first form checks every workload at tiny scale on 1 and 2 threads
//! through the runner (what `pmsim run` and sweeps do). The second, for an
//! allocator with crash recovery, adds recovery of a heap whose process was
//! SIGKILLed mid-workload, the crash explorer on a traced run (no violation),
//! and the same on the `mutated` variant, which must be caught. `MY_FAMILY`
//! is a `&'static dyn Family`: a registered allocator's
//! (`registry::find("nvalloc-log", &[])`) or one the test defines itself.

use crate::{explore, target_among, CrashTrace, Options, Progress, Summary};
use pmsim_model::family::Family;
use pmsim_model::runner::{self, AllocSpec, HeapSpec, RunSpec};
use pmsim_model::workloads::{Progress as RunProgress, RunOptions, Scale, Workload};
use pmsim_model::{FlushInsn, Heap, TraceConfig};
use pmsim_traces::{TraceFile, WriterOptions};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Expands to the conformance tests of an allocator (see the module docs).
#[macro_export]
macro_rules! conformance_tests {
    ($family:expr, $spec:expr) => {
        #[test]
        fn conformance_every_workload() {
            $crate::conformance::every_workload($family, $spec);
        }
    };
    ($family:expr, $spec:expr, recovery, mutated: $mutated:expr) => {
        $crate::conformance_tests!($family, $spec);

        #[test]
        fn conformance_sigkill_recovery() {
            let name = $crate::conformance::test_name(module_path!(), "conformance_sigkill_recovery");
            $crate::conformance::sigkill_recovery($family, $spec, &name);
        }

        #[test]
        fn conformance_crash_explorer_passes() {
            $crate::conformance::crash_explorer_passes($family, $spec);
        }

        #[test]
        fn conformance_mutation_is_caught() {
            $crate::conformance::mutation_is_caught($family, $mutated);
        }
    };
}

/// A scratch directory under `/dev/shm` (memory, as a DAX mount) when there
/// is one, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        // Unique within the process too: suites of several allocators run in parallel.
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

/// The environment variable that makes [`sigkill_recovery`]'s test the victim.
const VICTIM: &str = "PMSIM_CONFORMANCE_VICTIM";
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
/// metadata check, and allocate again.
pub fn sigkill_recovery(family: &'static dyn Family, spec: &str, test: &str) {
    let alloc = spec_of(family, spec);
    let wl = victim_workload();
    if let Some(path) = std::env::var_os(VICTIM) {
        return victim(&alloc, &wl, Path::new(&path));
    }
    let dir = Scratch::new("sigkill");
    let path = dir.0.join("heap");
    let (_, params) = family.header(alloc.params(), VICTIM_THREADS).unwrap();
    let target = family.crash_target(&params).unwrap_or_else(|e| panic!("{spec}: {e}"));
    for round in 0..3u64 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env(VICTIM, &path)
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
        let heap = Heap::open(&path).unwrap_or_else(|e| panic!("{spec}, round {round}: {e}"));
        assert!(!heap.was_clean(), "{spec}: the heap was closed cleanly although the process was killed");
        let mut rec = target.recover(&heap).unwrap_or_else(|e| panic!("{spec}, round {round}: recovery failed: {e}"));
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
    let hs = HeapSpec { path: path.to_path_buf(), size: alloc.heap_size(wl, VICTIM_THREADS), overwrite: true };
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
/// the kit and for any test that explores a traced run.
pub fn record(dir: &Path, name: &str, alloc: &AllocSpec, workload: &str, params: &[&str], values: bool) -> PathBuf {
    let trace = dir.join(format!("{name}.pmt"));
    let wl = Workload::preset(workload, Scale::Tiny).unwrap().with_overrides(params.iter().copied()).unwrap();
    let heap = HeapSpec { path: dir.join(format!("{name}.heap")), size: 8 << 20, overwrite: true };
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
    trace
}

/// Records a small traced Threadtest of `spec` (values and the heap image
/// included) and explores its crash states.
fn explore_spec(family: &'static dyn Family, spec: &str) -> Summary {
    let dir = Scratch::new("explore");
    let trace = record(&dir.0, "t", &spec_of(family, spec), "threadtest", &["objects=100", "iterations=2"], true);
    let tr = CrashTrace::load(&trace, None).unwrap();
    let target = target_among(&tr.header, &[family]).unwrap_or_else(|e| panic!("{spec}: {e}"));
    explore(&tr, target.as_ref(), &Options { bound: 32, every: 2, ..Options::default() }, &Progress::default())
        .unwrap_or_else(|e| panic!("{spec}: {e}"))
}

/// The crash explorer finds no violation on a traced run of `spec`.
pub fn crash_explorer_passes(family: &'static dyn Family, spec: &str) {
    let s = explore_spec(family, spec);
    if let Some(v) = &s.violation {
        panic!("{spec}: violation at point {} image {}: {}", v.point, v.image, v.problem);
    }
    assert!(s.images >= 100, "{spec}: only {} crash images checked", s.images);
}

/// The crash explorer catches the deliberately broken variant `mutated`.
pub fn mutation_is_caught(family: &'static dyn Family, mutated: &str) {
    let s = explore_spec(family, mutated);
    let v = s.violation.unwrap_or_else(|| panic!("{mutated}: not caught in {} crash images", s.images));
    eprintln!("{mutated}: caught after {} images: {}", s.images, v.problem);
}
