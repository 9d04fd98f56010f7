//! What is particular to a workload or an allocator beyond the conformance
//! suite's first stage (crash/tests/conformance.rs), which runs every
//! workload at `tiny` scale on every registered allocator and preset with 1
//! and 2 threads and checks each report (`runner::check_report`): LLFree's
//! own consistency after every workload, PMDK's statistics, FPTree's splits,
//! LLFree's huge frames, the variants without publication, parameter checks.
//!
//! Also: a one-thread traced run is reproducible event for event, and the
//! self-checks do fail on a deliberately broken allocator.

use pmsim_model::error::ErrorKind;
use pmsim_model::llfree::{LlFree, LlFreeConfig};
use pmsim_model::nvalloc::{NvAlloc, NvAllocConfig};
use pmsim_model::pmdk::{Pmdk, PmdkOptions};
use pmsim_model::runner::{self, AllocSpec};
use pmsim_model::workloads::{self, Progress, RunOptions, RunReport, Scale, Workload, WorkloadError};
use pmsim_model::AllocConfig;
use pmsim_model::{AllocThread, Allocator, FlushInsn, Footprint, Heap, HeapOptions, Pm, TraceConfig};
use pmsim_traces::{OwnedEvent, VecSink};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn tmpdir() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

fn workload(name: &str) -> Workload {
    Workload::preset(name, Scale::Tiny).unwrap()
}

fn nv_config(preset: &str) -> NvAllocConfig {
    NvAllocConfig::preset(preset).unwrap().with_overrides(["arenas=2"]).unwrap()
}

/// Runs `wl` on a fresh NVAlloc heap; `Ok(None)` if NVAlloc does not
/// implement the preset yet.
fn run_nvalloc(preset: &str, wl: &Workload, threads: u32) -> Result<Option<RunReport>, String> {
    let dir = tmpdir();
    let path = dir.path().join("nv.heap");
    let heap = Heap::create_with(&path, wl.heap_size_hint(threads), &HeapOptions::default()).unwrap();
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let nv = match NvAlloc::create(&heap, pm, nv_config(preset)) {
        Ok(nv) => nv,
        Err(e) if e.kind == ErrorKind::NotYet => {
            eprintln!("skipping NVAlloc preset {preset}: {e}");
            return Ok(None);
        }
        Err(e) => return Err(format!("{preset}: {e}")),
    };
    let r = workloads::run(&nv, wl, &RunOptions { threads, seed: 7, ..Default::default() }, &Progress::default());
    let pm = nv.close().map_err(|e| e.to_string())?;
    drop(pm);
    heap.close().unwrap();
    r.map(Some).map_err(|e| format!("{preset}: {e}"))
}

fn run_pmdk(wl: &Workload, threads: u32) -> Result<RunReport, String> {
    let dir = tmpdir();
    let path = dir.path().join("pmdk.pool");
    let pool = Pmdk::create(&path, wl.heap_size_hint(threads), &PmdkOptions::default()).map_err(|e| e.to_string())?;
    let r = workloads::run(&pool, wl, &RunOptions { threads, seed: 7, ..Default::default() }, &Progress::default());
    pool.close().map_err(|e| e.to_string())?;
    r.map_err(|e| format!("pmdk: {e}"))
}

/// Runs `wl` on a fresh LLFree heap sized as the runner sizes it, and
/// checks afterwards that every child counter agrees with its bit field.
fn run_llfree(wl: &Workload, threads: u32) -> Result<RunReport, String> {
    let dir = tmpdir();
    let path = dir.path().join("ll.heap");
    let size = AllocSpec::parse("llfree", []).unwrap().heap_size(wl, threads);
    let heap = Heap::create_with(&path, size, &HeapOptions::default()).unwrap();
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let ll = LlFree::create(&heap, pm, LlFreeConfig::default()).map_err(|e| e.to_string())?;
    let r = workloads::run(&ll, wl, &RunOptions { threads, seed: 7, ..Default::default() }, &Progress::default());
    let mut t = ll.thread(0);
    ll.check(t.pm()).map_err(|e| format!("llfree after {}: {e}", wl.name()))?;
    if wl.keeps_data() {
        // The list ends as a crash leaves it: its nodes stay allocated.
        assert!(!t.allocations().is_empty(), "llfree: {} kept nothing", wl.name());
        assert!(ll.free_frames() < ll.zone().frames(), "llfree: the upper level counts every frame free");
    } else {
        assert!(t.allocations().is_empty(), "llfree: frames left allocated after {}", wl.name());
        assert_eq!(ll.free_frames(), ll.zone().frames(), "llfree: the upper level lost count of frames");
    }
    drop(t);
    let pm = ll.close().map_err(|e| e.to_string())?;
    drop(pm);
    heap.close().unwrap();
    r.map_err(|e| format!("llfree: {e}"))
}

fn check_report(r: &RunReport, who: &str) {
    runner::check_report(r).unwrap_or_else(|e| panic!("{who}: {e}"));
}

/// LLFree after every workload: each child counter agrees with its bit
/// field, no frame is left allocated, and the upper level counts every frame
/// free (but after a workload that keeps its data, as the list ends as a
/// crash leaves it: then frames stay allocated and counted so).
#[test]
fn llfree_is_consistent_after_every_workload() {
    for name in Workload::expand("all").unwrap() {
        for threads in [1, 2] {
            let r = run_llfree(&workload(name), threads).unwrap_or_else(|e| panic!("{name}, {threads} thread(s): {e}"));
            check_report(&r, &format!("{name} on llfree"));
            assert!(r.peak.mapped_bytes > r.peak.live_bytes, "{name} on llfree: mapped <= live");
        }
    }
}

#[test]
fn pmdk_statistics_give_mapped_bytes() {
    let r = run_pmdk(&workload("threadtest"), 1).unwrap();
    assert!(r.peak.mapped_bytes > 0, "PMDK's statistics gave no mapped bytes");
}

#[test]
fn fptree_splits_leaves_and_grows_inner_nodes() {
    // Enough keys to split leaves and grow inner nodes (tiny fanout).
    let wl = workload("fptree").with_overrides(["fanout=8", "warmup=3000", "ops=3000"]).unwrap();
    let r = run_pmdk(&wl, 2).unwrap();
    assert!(r.extra["inner_height"].as_u64().unwrap() >= 3, "{:?}", r.extra);
    let r = run_nvalloc("nvalloc-log", &wl, 2).unwrap().unwrap();
    assert!(r.extra["leaves"].as_u64().unwrap() > 100, "{:?}", r.extra);
}

#[test]
fn llfree_repeat_with_huge_frames() {
    // The paper's huge-frame variant, published through slots.
    let wl = workload("llfree-repeat").with_overrides(["size=2097152", "publish=true", "iterations=500"]).unwrap();
    let r = run_llfree(&wl, 2).unwrap();
    assert_eq!(r.ops, 2 * (2 * 500 + 2) + 2, "directory, slot arrays and 500 pairs per thread: {r:?}");
    assert!(r.extra["alloc_ns"].as_f64().unwrap() > 0.0, "{:?}", r.extra);
}

#[test]
fn variants_without_publication_and_split() {
    for (name, kv) in [
        ("threadtest", vec!["publish=false", "split=true"]),
        ("prodcon", vec!["publish=false"]),
        ("shbench", vec!["publish=false"]),
        ("larson-small", vec!["publish=false"]),
        ("dbmstest", vec!["publish=false"]),
    ] {
        let wl = workload(name).with_overrides(kv).unwrap();
        check_report(&run_pmdk(&wl, 2).unwrap(), name);
        check_report(&run_nvalloc("nvalloc-log", &wl, 2).unwrap().unwrap(), name);
    }
}

/// A CPU profile measures the work alone: its workers share one core, so
/// on a machine with several they neither run side by side nor spin at each
/// other's locks (see `workloads::cpu`). Without the binding, four workers
/// of Larson spread over the cores of any machine with more than one.
#[test]
fn a_profile_s_workers_share_one_core() {
    let dir = tmpdir();
    let wl = workload("larson-small");
    let heap = Heap::create_with(dir.path().join("nv.heap"), wl.heap_size_hint(4), &HeapOptions::default()).unwrap();
    let nv = NvAlloc::create(&heap, Pm::native(&heap, FlushInsn::None).unwrap(), nv_config("nvalloc-log")).unwrap();
    let opts = RunOptions { threads: 4, seed: 7, cpu_profile: true, ..Default::default() };
    let p = workloads::run(&nv, &wl, &opts, &Progress::default()).unwrap().cpu.expect("a profile");
    assert_eq!(p.cores, 1, "{p:?}");
    assert!(p.ops() > 0 && p.total_ns > 0.0, "{p:?}");
    drop(nv.close().unwrap());
    heap.close().unwrap();
}

#[test]
fn parameters_are_checked() {
    let e = Workload::preset("threadtest", Scale::Tiny).unwrap().with_overrides(["iters=3"]).unwrap_err();
    assert!(e.to_string().contains("unknown parameter 'iters'"), "{e}");
    let e = Workload::preset("nope", Scale::Tiny).unwrap_err();
    assert!(e.to_string().contains("unknown workload 'nope'"), "{e}");
    let wl = workload("prodcon");
    assert!(wl.validate(3).unwrap_err().to_string().contains("pairs"));
    let wl = workload("threadtest").with_overrides(["size=8"]).unwrap();
    assert!(wl.validate(1).unwrap_err().to_string().contains("size = 8"));
    assert_eq!(Workload::expand("fragbench").unwrap().len(), 4);
    let wl = workload("threadtest").with_overrides(["iterations=3"]).unwrap();
    assert_eq!(wl.params_json()["iterations"], 3);
    for name in Workload::NAMES {
        for scale in Scale::ALL {
            let wl = Workload::preset(name, scale).unwrap();
            wl.validate(if name == "prodcon" { 2 } else { 1 }).unwrap();
            assert_eq!(wl.heap_size_hint(1) % (2 << 20), 0);
        }
    }
}

// ----- determinism ---------------------------------------------------------------

/// A traced one-thread NVAlloc run of `wl`: the events, with every address
/// made relative to the heap's base, and the heap size.
///
/// Addresses are absolute (the mapping moves between runs), so the stream is
/// compared in heap offsets: the base is page aligned, so cache-line
/// boundaries (flush lines) are the same in both frames, and every address
/// an event carries is checked to lie in the heap, so subtracting the base
/// loses nothing. Values (with `values = true`) are heap contents, which hold
/// offsets, never addresses.
fn traced_events(wl: &Workload, seed: u64) -> Vec<(u32, OwnedEvent)> {
    traced_events_on(wl, seed, 1)
}

fn traced_events_on(wl: &Workload, seed: u64, threads: u32) -> Vec<(u32, OwnedEvent)> {
    let dir = tmpdir();
    let path = dir.path().join("det.heap");
    let heap = Heap::create_with(&path, wl.heap_size_hint(threads), &HeapOptions::default()).unwrap();
    let base = heap.base() as u64;
    let size = heap.size();
    let cfg = TraceConfig { values: true, ..TraceConfig::default() };
    let (pm, collector) = Pm::traced(&heap, FlushInsn::best(), &cfg, |h| {
        assert_eq!(h.heap.base, base);
        Ok(VecSink::default())
    })
    .unwrap();
    let nv = NvAlloc::create(&heap, pm, nv_config("nvalloc-log")).unwrap();
    workloads::run(&nv, wl, &RunOptions { threads, seed, ..Default::default() }, &Progress::default()).unwrap();
    let pm = nv.close().unwrap();
    let events = collector.finish(pm).unwrap().sink.0;
    heap.close().unwrap();
    let rel = |a: u64| {
        assert!(a >= base && a < base + size, "address {a:#x} outside the heap");
        a - base
    };
    events
        .into_iter()
        .map(|(tid, e)| {
            let e = match e {
                OwnedEvent::Store { addr, size, value } => OwnedEvent::Store { addr: rel(addr), size, value },
                OwnedEvent::NtStore { addr, size, value } => OwnedEvent::NtStore { addr: rel(addr), size, value },
                OwnedEvent::Load { addr, size } => OwnedEvent::Load { addr: rel(addr), size },
                OwnedEvent::Flush { kind, line } => OwnedEvent::Flush { kind, line: rel(line) },
                OwnedEvent::RegionAdd { id, category, base, len, name } => {
                    OwnedEvent::RegionAdd { id, category, base: rel(base), len, name }
                }
                e => e,
            };
            (tid, e)
        })
        .collect()
}

#[test]
fn one_thread_traced_runs_are_identical() {
    for name in ["threadtest", "larson-small", "fragbench-w4", "fptree"] {
        let wl = workload(name);
        let a = traced_events(&wl, 11);
        let b = traced_events(&wl, 11);
        assert!(a.len() > 1000, "{name}: only {} events", a.len());
        let stores = a.iter().filter(|(_, e)| matches!(e, OwnedEvent::Store { .. })).count();
        assert!(stores > 100, "{name}: user-data stores missing");
        if let Some(i) = a.iter().zip(&b).position(|(x, y)| x != y) {
            panic!("{name}: event {i} differs: {:?} vs {:?}", a[i], b[i]);
        }
        assert_eq!(a.len(), b.len(), "{name}: streams differ in length");
        // Another seed is another allocation sequence (threadtest draws no
        // random numbers: fixed size, fixed order).
        if name != "threadtest" {
            let c = traced_events(&wl, 12);
            assert!(a != c, "{name}: the seed changes nothing");
        }
    }
}

/// The workers of a parallel phase start in the trace where the program
/// spawns them, all before any of them works, however late the OS runs one:
/// the contention replay starts a thread where its start arrives.
#[test]
fn workers_start_in_the_trace_where_they_are_spawned() {
    let events = traced_events_on(&workload("threadtest"), 11, 4);
    let first = |f: &dyn Fn(&(u32, OwnedEvent)) -> bool| events.iter().position(f).unwrap();
    let first_op = first(&|(t, e)| *t > 0 && matches!(e, OwnedEvent::OpBegin { .. }));
    for tid in 1..4 {
        let start = first(&|(t, e)| *t == tid && matches!(e, OwnedEvent::ThreadStart));
        assert!(
            start < first_op,
            "thread {tid} starts at event {start}, after a worker's first operation ({first_op})"
        );
    }
}

// ----- the checks can fail --------------------------------------------------------

/// What the toy allocator gets wrong.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Bug {
    None,
    /// Hands the 100th block out again while it is still live.
    DoubleHandOut,
    /// `free_from` frees but leaves the destination as it was.
    KeepsDest,
    /// Forgets to count frees of more than 128 bytes.
    Leaks,
    /// Returns no memory after 500 allocations.
    RunsDry,
}

/// The toy's bookkeeping: bump pointer, free lists by size, live blocks'
/// sizes, and allocations so far.
type ToyState = (u64, HashMap<u64, Vec<u64>>, HashMap<u64, u64>, u64);

/// A DRAM "heap" with a mutex-protected bump allocator and free lists.
struct Toy {
    mem: Box<[AtomicU64]>,
    state: Mutex<ToyState>,
    live: AtomicI64,
    bug: Bug,
    /// Thread ids whose allocations each take 100 µs more.
    slow: Vec<u32>,
    /// Each ended OS thread that called the toy: when its last call
    /// returned and when it ended ([`ThreadEnd`]).
    ends: Mutex<Vec<(Instant, Instant)>>,
}

impl Toy {
    fn new(bytes: u64, bug: Bug) -> Arc<Toy> {
        Toy::with_slow(bytes, bug, Vec::new())
    }

    fn with_slow(bytes: u64, bug: Bug, slow: Vec<u32>) -> Arc<Toy> {
        Arc::new(Toy {
            mem: (0..bytes / 8).map(|_| AtomicU64::new(0)).collect(),
            state: Mutex::new((64, HashMap::new(), HashMap::new(), 0)),
            live: AtomicI64::new(0),
            bug,
            slow,
            ends: Mutex::new(Vec::new()),
        })
    }

    /// Notes the end of a call, and of the calling OS thread once it comes.
    fn called(self: &Arc<Self>) {
        THREAD_END
            .with(|e| e.borrow_mut().get_or_insert_with(|| ThreadEnd(self.clone(), Instant::now())).1 = Instant::now());
    }
}

/// Records when its OS thread ends, as a thread-local destructor does (PMDK
/// gives a thread's arena back that way), beside the thread's last call.
struct ThreadEnd(Arc<Toy>, Instant);

impl Drop for ThreadEnd {
    fn drop(&mut self) {
        self.0.ends.lock().unwrap().push((self.1, Instant::now()));
    }
}

thread_local! {
    static THREAD_END: std::cell::RefCell<Option<ThreadEnd>> = const { std::cell::RefCell::new(None) };
}

/// The toy and the thread id the handle was made for.
struct ToyThread(Arc<Toy>, u32);

#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct ToyConfig {}

impl pmsim_model::AllocConfig for ToyConfig {
    const ALLOC: &'static str = "Toy";
    fn validate(&self) -> Result<(), pmsim_model::AllocError> {
        Ok(())
    }
}

/// Lives in DRAM: the workloads drive it directly, never on a heap.
impl Allocator for Toy {
    type Config = ToyConfig;
    type Thread = ToyThread;
    const FAMILY: &'static str = "toy";
    const ABOUT: &'static str = "a DRAM allocator whose bugs the workloads' checks must catch";
    fn create(_: &Heap, _: Pm, _: ToyConfig) -> Result<Arc<Self>, pmsim_model::AllocError> {
        unreachable!("the toy lives in DRAM")
    }
    fn open(_: &Heap, _: Pm, _: ToyConfig) -> Result<Arc<Self>, pmsim_model::AllocError> {
        unreachable!("the toy lives in DRAM")
    }
    fn close(self: Arc<Self>, _: &Heap) -> Result<Pm, pmsim_model::AllocError> {
        unreachable!("the toy lives in DRAM")
    }
    fn live_blocks(&self, _: &mut ToyThread) -> Vec<(u64, u64)> {
        self.state.lock().unwrap().2.iter().map(|(&o, &s)| (o, s)).collect()
    }
    fn params(&self) -> serde_json::Map<String, serde_json::Value> {
        serde_json::Map::new()
    }
    fn thread(self: &Arc<Self>, tid: u32) -> ToyThread {
        ToyThread(self.clone(), tid)
    }
    fn footprint(&self) -> Footprint {
        Footprint { live_bytes: self.live.load(Ordering::Relaxed).max(0) as u64, mapped_bytes: 1 }
    }
}

impl AllocThread for ToyThread {
    fn malloc(&mut self, size: u64) -> Option<u64> {
        if self.0.slow.contains(&self.1) {
            std::thread::sleep(Duration::from_micros(100));
        }
        let t = &*self.0;
        let size = size.next_multiple_of(64);
        let mut g = t.state.lock().unwrap();
        let (top, free, sizes, count) = &mut *g;
        *count += 1;
        if t.bug == Bug::RunsDry && *count > 500 {
            return None;
        }
        let off = if t.bug == Bug::DoubleHandOut && *count == 100 {
            *sizes.keys().max().unwrap()
        } else if let Some(off) = free.get_mut(&size).and_then(|v| v.pop()) {
            off
        } else {
            let off = *top;
            *top += size;
            assert!(*top <= 8 * t.mem.len() as u64, "toy heap full");
            off
        };
        sizes.insert(off, size);
        t.live.fetch_add(size as i64, Ordering::Relaxed);
        drop(g);
        self.0.called();
        Some(off)
    }
    fn free(&mut self, off: u64) {
        let t = &*self.0;
        let mut g = t.state.lock().unwrap();
        let size = g.2.remove(&off).expect("free of a block not handed out");
        g.1.entry(size).or_default().push(off);
        if !(t.bug == Bug::Leaks && size > 128) {
            t.live.fetch_sub(size as i64, Ordering::Relaxed);
        }
        drop(g);
        self.0.called();
    }
    fn malloc_to(&mut self, size: u64, dest: u64) -> Option<u64> {
        let off = self.malloc(size)?;
        self.write_u64(dest, off);
        Some(off)
    }
    fn free_from(&mut self, dest: u64) {
        let off = self.read_u64(dest);
        self.free(off);
        if self.0.bug != Bug::KeepsDest {
            self.write_u64(dest, 0);
        }
    }
    fn write(&mut self, off: u64, data: &[u8]) {
        for (i, b) in data.iter().enumerate() {
            let a = off + i as u64;
            let w = &self.0.mem[(a / 8) as usize];
            let shift = (a % 8) * 8;
            let old = w.load(Ordering::Relaxed);
            w.store(old & !(0xff << shift) | (*b as u64) << shift, Ordering::Relaxed);
        }
    }
    fn read(&self, off: u64, buf: &mut [u8]) {
        for (i, b) in buf.iter_mut().enumerate() {
            let a = off + i as u64;
            *b = (self.0.mem[(a / 8) as usize].load(Ordering::Relaxed) >> ((a % 8) * 8)) as u8;
        }
    }
    fn persist(&mut self, _off: u64, _len: u64) {}
    fn set_root(&mut self, _slot: usize, _off: u64) {}
    fn root(&self, _slot: usize) -> u64 {
        0
    }
}

fn run_toy(bug: Bug, name: &str) -> Result<RunReport, WorkloadError> {
    let toy = Toy::new(64 << 20, bug);
    workloads::run(
        &toy,
        &workload(name),
        &RunOptions { threads: 1, seed: 3, ..Default::default() },
        &Progress::default(),
    )
}

#[test]
fn self_checks_catch_a_broken_allocator() {
    // The toy itself passes.
    for name in ["threadtest", "shbench", "fptree"] {
        run_toy(Bug::None, name).unwrap_or_else(|e| panic!("{name} on a correct toy: {e}"));
    }
    let e = run_toy(Bug::DoubleHandOut, "threadtest").unwrap_err();
    assert!(matches!(e, WorkloadError::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("threadtest: thread 0: corrupt object at heap offset"), "{e}");
    let e = run_toy(Bug::KeepsDest, "threadtest").unwrap_err();
    assert!(e.to_string().contains("free_from(dest") && e.to_string().contains("left"), "{e}");
    let e = run_toy(Bug::Leaks, "shbench").unwrap_err();
    assert!(e.to_string().contains("live bytes"), "{e}");
    let e = run_toy(Bug::RunsDry, "fptree").unwrap_err();
    assert!(matches!(e, WorkloadError::OutOfMemory { .. }), "{e}");
}

#[test]
fn a_failing_thread_stops_the_others() {
    // Two threads at a barrier-heavy workload: one runs dry; the other must
    // not wait forever, and the error is the real one, not "aborted".
    let toy = Toy::new(64 << 20, Bug::RunsDry);
    let e = workloads::run(
        &toy,
        &workload("fragbench-w1"),
        &RunOptions { threads: 2, seed: 1, ..Default::default() },
        &Progress::default(),
    )
    .unwrap_err();
    assert!(matches!(e, WorkloadError::OutOfMemory { .. }), "{e}");
    let toy = Toy::new(64 << 20, Bug::RunsDry);
    let e = workloads::run(
        &toy,
        &workload("prodcon"),
        &RunOptions { threads: 2, seed: 1, ..Default::default() },
        &Progress::default(),
    )
    .unwrap_err();
    assert!(matches!(e, WorkloadError::OutOfMemory { .. }), "{e}");
}

/// No worker's OS thread ends before every worker has made its last call:
/// an allocator may hand on what a thread held when the thread ends (PMDK
/// gives its arena back in a thread-local destructor), and a worker that
/// ran to its end before another's first allocation, as on fewer cores than
/// threads or under the Valgrind tool, handed that one its arena. Here
/// thread 1 of Threadtest takes 100 µs more per allocation; without the
/// wait, thread 0's OS thread ends before thread 1's last call (by 0.45 ms
/// in three runs: the threads meet at the workload's last barrier).
#[test]
fn no_worker_ends_before_the_others_are_done() {
    let toy = Toy::with_slow(64 << 20, Bug::None, vec![1]);
    let wl = workload("threadtest").with_overrides(["split=true", "iterations=1"]).unwrap();
    workloads::run(&toy, &wl, &RunOptions { threads: 2, seed: 1, ..Default::default() }, &Progress::default()).unwrap();
    let ends = toy.ends.lock().unwrap().clone();
    assert_eq!(ends.len(), 2, "both workers' threads ended");
    let last = ends.iter().map(|e| e.0).max().unwrap();
    for (_, end) in ends {
        assert!(end >= last, "a worker's thread ended {:?} before the other's last call", last - end);
    }
}

#[test]
fn pmdk_pool_files_are_not_overwritten() {
    let dir = tmpdir();
    let path: PathBuf = dir.path().join("user.pool");
    std::fs::write(&path, b"precious").unwrap();
    let e = Pmdk::create(&path, 16 << 20, &PmdkOptions::default()).unwrap_err();
    assert!(e.to_string().contains("already exists"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), b"precious");
    let p = Pmdk::create(&path, 16 << 20, &PmdkOptions { overwrite: true, ..Default::default() }).unwrap();
    let mut t = p.thread(0);
    let a = t.malloc(100).unwrap();
    t.write(a, b"hello");
    let mut b = [0u8; 5];
    t.read(a, &mut b);
    assert_eq!(&b, b"hello");
    t.set_root(3, a);
    assert_eq!(t.root(3), a);
    t.free(a);
    drop(t);
    p.close().unwrap();
    let p = Pmdk::open(&path, &PmdkOptions::default()).unwrap();
    assert_eq!(p.thread(0).root(3), a);
    let e = Pmdk::create(&path, 1 << 20, &PmdkOptions { overwrite: true, ..Default::default() }).unwrap_err();
    assert!(e.to_string().contains("minimum"), "{e}");
}
