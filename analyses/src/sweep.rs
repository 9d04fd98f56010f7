//! Running a sweep: the points of one shard that have no row yet, in
//! parallel on a rayon pool, each streamed into the simulator and/or run
//! natively, each row appended durably as soon as its point is done.
//!
//! Native points measure time, so they never share the machine with other
//! points: every point holds a shared lock while it simulates and an
//! exclusive one while it runs natively (std's `RwLock` lets a waiting writer
//! in before new readers), so a native run starts once the simulations in
//! flight finish and nothing else starts until it is done. A `memory`
//! point's native run keeps no timing and holds the shared lock. A simulated
//! point's CPU profile ([`crate::cpu`]) is a native run too, but it is read
//! from the threads' CPU time, which other work does not inflate: it runs
//! under the shared lock.

use crate::cpu;
use crate::experiment::Experiment;
use crate::point::Point;
use crate::row::{is_timing_key, Env, Results, Row};
use crate::store::{Resolved, ShardWriter, SweepDir};
use pmsim_model::registry;
use pmsim_model::runner::{self, AllocSpec, HeapSpec, RunSpec};
use pmsim_model::scratch::ScratchHeap;
use pmsim_model::workloads::{Progress, RunOptions, Workload};
use pmsim_model::{FlushInsn, TraceConfig};
use pmsim_pintools::{trace_exec, PintoolsError, TraceExec};
use pmsim_sim::{Contention, ContentionReport, CpuCosts, Simulator, Timed};
use pmsim_traces::owned::{self, Place};
use pmsim_traces::TraceReader;
use rayon::prelude::*;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// `--shard i/n`: the points whose index is `i` modulo `n` (round robin, so
/// every shard gets a similar mix of cheap and expensive points).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Default for Shard {
    fn default() -> Self {
        Shard { index: 0, count: 1 }
    }
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Shard, String> {
        let bad = || format!("--shard '{s}': expected i/n with 0 ≤ i < n ≤ {MAX_SHARDS}, e.g. 0/4");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let index: usize = i.trim().parse().map_err(|_| bad())?;
        let count: usize = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count || count > MAX_SHARDS {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

/// The most shards a sweep is split into.
pub const MAX_SHARDS: usize = 100_000;

impl Shard {
    pub fn contains(&self, point_index: usize) -> bool {
        point_index % self.count == self.index
    }
}

/// How to run a sweep.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub shard: Shard,
    /// Run only the points that have no row yet (else a shard file that
    /// already has rows is refused).
    pub resume: bool,
    /// Worker threads (0: one per CPU).
    pub jobs: usize,
    /// Counts the points as they end, for a progress display.
    pub tally: Arc<Tally>,
}

/// How far a sweep is, for a progress display polled from another thread
/// (the command line draws it): the experiment, its points to run now and
/// those done, and the last point done.
#[derive(Debug, Default)]
pub struct Tally {
    done: AtomicU64,
    total: AtomicU64,
    now: Mutex<(String, String)>,
}

impl Tally {
    /// Points of the current experiment done so far.
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Points of the current experiment to run now.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// The current experiment and the label of its last point done.
    pub fn now(&self) -> (String, String) {
        self.now.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn start(&self, experiment: &str, total: u64) {
        self.done.store(0, Ordering::Relaxed);
        self.total.store(total, Ordering::Relaxed);
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) = (experiment.to_string(), String::new());
    }

    fn point_done(&self, label: String) {
        self.now.lock().unwrap_or_else(|e| e.into_inner()).1 = label;
        self.done.fetch_add(1, Ordering::Relaxed);
    }
}

/// What a sweep did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Summary {
    pub experiment: String,
    pub fingerprint: String,
    pub points: usize,
    pub in_shard: usize,
    pub already_done: usize,
    pub ran: usize,
    /// Points that failed, with why (they have no row: `--resume` retries them).
    pub failed: Vec<(String, String)>,
    pub wall_s: f64,
    pub shard_file: String,
}

static MACHINE: RwLock<()> = RwLock::new(());

/// A traced PMDK run: its trace, and its own `pmsim run --json` report as
/// a row keeps it ([`traced_value`]; none if it printed none).
type DbiTrace = (std::path::PathBuf, Option<Value>);

/// The Valgrind tool's traces of this process's runs of PMDK, by the run's
/// arguments (in this process's scratch directory, removed with it); a
/// point that wants a trace another is making waits for it.
static DBI_TRACES: Mutex<BTreeMap<String, Arc<Mutex<Option<DbiTrace>>>>> = Mutex::new(BTreeMap::new());

/// Runs the points of `opts.shard` of `exp` into `dir`.
pub fn run(dir: &SweepDir, exp: Experiment, opts: &Options) -> Result<Summary, String> {
    let points = exp.points()?;
    let resolved = Resolved::new(exp, &points);
    run_resolved(dir, &resolved, opts)
}

/// Runs the points of an experiment already resolved (`--resume DIR` with
/// no experiment file reads it from the directory).
pub fn run_resolved(dir: &SweepDir, r: &Resolved, opts: &Options) -> Result<Summary, String> {
    let start = Instant::now();
    let points: Vec<Point> = r.points.iter().map(|l| l.point.clone()).collect();
    check_jobs(opts.jobs, &points)?;
    dir.claim(opts.shard.count)?;
    let _one_writer = dir.lock_shard(opts.shard.index)?;
    dir.init(r)?;
    let (rows, _torn) = dir.read_rows()?;
    // Rows of another sweep, or copied twice, are refused here as the merge
    // would refuse them, not counted as done.
    crate::store::place_rows(dir, r, rows.clone())?;
    let shard_path = dir.shard_path(opts.shard.index);
    let own_rows = rows.iter().filter(|(f, _)| *f == shard_path).count();
    if own_rows > 0 && !opts.resume {
        return Err(format!(
            "{}: already has {own_rows} row(s): pass --resume to run only the missing points, or use a new --out",
            shard_path.display()
        ));
    }
    let done: HashSet<&str> = rows.iter().map(|(_, r)| r.id.as_str()).collect();
    let mine: Vec<_> = r.points.iter().filter(|l| opts.shard.contains(l.index)).collect();
    let todo: Vec<_> = mine.iter().filter(|l| !done.contains(l.id.as_str())).collect();
    let writer = ShardWriter::open(&shard_path)?;
    opts.tally.start(&r.experiment.meta.name, todo.len() as u64);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.jobs)
        .build()
        .map_err(|e| format!("cannot start worker threads: {e}"))?;
    let failed: Vec<(String, String)> = pool.install(|| {
        todo.par_iter()
            .filter_map(|l| {
                let res = run_point(&l.point, l.index, &l.id).and_then(|row| writer.append(&row));
                opts.tally.point_done(l.point.label());
                res.err().map(|e| (l.point.label(), e))
            })
            .collect()
    });
    Ok(Summary {
        experiment: r.experiment.meta.name.clone(),
        fingerprint: r.fingerprint.clone(),
        points: r.points.len(),
        in_shard: mine.len(),
        already_done: mine.len() - todo.len(),
        ran: todo.len() - failed.len(),
        failed,
        wall_s: start.elapsed().as_secs_f64(),
        shard_file: shard_path.display().to_string(),
    })
}

/// Refuses a `--jobs` the machine cannot run: points run at once times the
/// threads of the largest point must fit in what one process may start
/// ([`pmsim_model::workloads::max_threads`]).
pub fn check_jobs(jobs: usize, points: &[Point]) -> Result<(), String> {
    let max = pmsim_model::workloads::max_threads() as usize;
    let per_point = points.iter().map(|p| p.threads as usize).max().unwrap_or(1).max(1);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let jobs_eff = if jobs == 0 { cpus } else { jobs };
    if jobs_eff.saturating_mul(per_point) > max {
        return Err(format!(
            "--jobs {jobs}: {jobs_eff} points at once × {per_point} threads is more than this machine lets one process \
             start ({max})"
        ));
    }
    Ok(())
}

/// Gives this process the environment the allocators that `points` run
/// natively need before their libraries load (PMDK's), executing pmsim
/// again with it if it differs ([`registry::ensure_process_env`]).
pub fn ensure_native_env(points: &[Point]) -> Result<(), String> {
    let native = points.iter().filter(|p| p.mode.native());
    let families = native.filter_map(|p| registry::find(p.alloc.split(':').next()?, &[]));
    registry::ensure_process_env(families, None, false)
}

/// This machine's name (for rows and reports).
pub fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// What became of the simulated part of a point whose allocator pmsim's
/// tracer cannot see.
enum DbiSim {
    /// The simulator's report (without `dimms`), the access map, the
    /// `dimms`, the contention estimate with the CPU's work, the traced
    /// run's own report (its peak memory: Fig. 13).
    Done(Value, Vec<Value>, Option<Value>, Option<Value>, Option<Value>),
    /// Why there is none (no program runs this workload on the allocator, or
    /// Valgrind's tool kit is not installed).
    Skipped(String),
}

/// The simulated part of a point on PMDK, whose persistent writes happen
/// inside libpmemobj where pmsim's tracer cannot see them: the point's run
/// itself (`pmsim run --alloc pmdk …`, PMDK through pmsim's FFI wrapper,
/// which brackets each operation and names the pool's regions for the tool)
/// traced by the Valgrind tool into a scratch trace, then replayed. Any
/// workload runs so; it needs the pmsim executable (a test binary cannot
/// start one) and Valgrind's tool kit.
fn dbi_sim(p: &Point, alloc: &AllocSpec, wl: &Workload, id: &str, cpu: Option<&CpuCosts>) -> Result<DbiSim, String> {
    let cfg = p.sim_config()?;
    let not_traced = || {
        format!(
            "{} is not traceable by pmsim's built-in tracer (its persistent writes happen inside the library)",
            p.alloc
        )
    };
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    if exe.file_stem().and_then(|s| s.to_str()) != Some("pmsim") {
        return Ok(DbiSim::Skipped(format!(
            "{}, and only a pmsim process can run it under the Valgrind tool (this is {})",
            not_traced(),
            exe.display()
        )));
    }
    // The pool in memory (where the heaps of pmsim's own points are), the
    // trace, which grows with the scale, on disk.
    let scratch = |place| owned::scratch_dir(place).map_err(|e| format!("cannot make a scratch directory: {e}"));
    let pm_dir = scratch(Place::Memory)?.parent().map(Path::to_path_buf).ok_or("a scratch directory has a parent")?;
    let trace = scratch(Place::Temp)?.join(format!("sweep-{id}-dbi.pmt"));
    let mut args: Vec<std::ffi::OsString> =
        ["run", "--alloc", p.alloc.as_str(), "--workload", wl.name()].iter().map(|s| s.into()).collect();
    for (k, v) in [
        ("--scale", wl.scale().name().to_string()),
        ("--threads", p.threads.to_string()),
        ("--seed", p.seed.to_string()),
        ("--heap-size", alloc.heap_size(wl, p.threads).to_string()),
        // Valgrind cannot decode clwb or clflushopt.
        ("--flush-insn", "clflush".to_string()),
    ] {
        args.extend([k.into(), v.into()]);
    }
    // The run's own report (peak memory) on its standard output.
    args.push("--json".into());
    for kv in cpu::param_args(wl) {
        args.extend(["--param".into(), kv.into()]);
    }
    // One trace per run in this process: the points that differ only in
    // how the trace is replayed (eADR, contention, the access map) share it.
    let key = args.iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ");
    let slot = {
        let mut cache = DBI_TRACES.lock().unwrap_or_else(|e| e.into_inner());
        cache.entry(key).or_default().clone()
    };
    let mut cached = slot.lock().unwrap_or_else(|e| e.into_inner());
    if cached.is_none() {
        let report = trace.with_extension("json");
        let mut t = TraceExec::new(exe, args, &trace);
        t.pm_dir = pm_dir;
        (t.force, t.quiet, t.stdout) = (true, true, Some(report.clone()));
        (t.allocator, t.workload) = (p.alloc.clone(), wl.name().to_string());
        // The environment the allocator's library reads as it loads, as
        // `pmsim run` would set it for clflush, so that the run does not
        // re-execute itself (Valgrind would not follow).
        for (k, v) in alloc.family().process_env(Some(FlushInsn::Clflush), false) {
            if let Some(v) = v {
                t.env.push((k.into(), v.into()));
            }
        }
        match trace_exec(&t) {
            Ok(t) => {
                let run = std::fs::read(&report)
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                    .and_then(|v| v.pointer("/runs/0/run").cloned())
                    .map(traced_value);
                let _ = std::fs::remove_file(&report);
                *cached = Some((t.out, run));
            }
            Err(e @ PintoolsError::Missing(_)) => {
                return Ok(DbiSim::Skipped(format!("{}, and it could not be traced here: {e}", not_traced())))
            }
            Err(e) => {
                let _ = std::fs::remove_file(&trace);
                return Err(e.to_string());
            }
        }
    }
    let (traced_out, traced_run) = cached.clone().expect("traced above");
    drop(cached);
    type Replayed = (Value, Vec<Value>, Option<ContentionReport>, Option<ContentionReport>);
    let replay = || -> Result<Replayed, String> {
        let contention = |cpu: Option<&CpuCosts>| -> Result<ContentionReport, String> {
            let mut c = Contention::new(&cfg)?;
            if let Some(cpu) = cpu {
                c.set_cpu(cpu);
            }
            c.replay(&mut TraceReader::open(&traced_out).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
            Ok(c.report())
        };
        let time = cfg.contention.then(|| contention(None)).transpose()?;
        let time_cpu = cpu.filter(|_| cfg.contention).map(|c| contention(Some(c))).transpose()?;
        let mut r = TraceReader::open(&traced_out).map_err(|e| e.to_string())?;
        let mut sim = Simulator::new(cfg, r.header()).map_err(|e| e.to_string())?;
        sim.replay(&mut r).map_err(|e| e.to_string())?;
        let access = sim.access_map().iter().map(|a| serde_json::to_value(a).expect("serializes")).collect();
        Ok((serde_json::to_value(sim.report()).expect("reports serialize"), access, time, time_cpu))
    };
    let (mut report, access, time, time_cpu) = replay()?;
    with_contention(&mut report, time);
    let obj = report.as_object_mut().expect("a report is an object");
    let dimms = obj.remove("dimms");
    obj.remove("trace");
    obj.insert("tracer".into(), Value::String("valgrind".into()));
    Ok(DbiSim::Done(report, access, dimms, time_cpu.map(contention_value), traced_run))
}

/// A contention report as a row stores it: without the per-DIMM split
/// (which DIMM an address maps to depends on where the heap was mapped).
fn contention_value(t: ContentionReport) -> Value {
    let mut t = serde_json::to_value(t).expect("reports serialize");
    if let Some(o) = t.as_object_mut() {
        o.remove("dimms");
    }
    t
}

/// Adds the contention model's figures to a simulator report as
/// `contention`, without the per-DIMM split (which DIMM an address maps to
/// depends on where the heap was mapped).
fn with_contention(report: &mut Value, time: Option<ContentionReport>) {
    if let (Some(obj), Some(t)) = (report.as_object_mut(), time) {
        obj.insert("contention".into(), contention_value(t));
    }
}

/// A traced run's report as a row keeps it: without what depends on the
/// machine (timings, CPU time) and the heap-shape series.
fn traced_report(run: &pmsim_model::workloads::RunReport) -> Value {
    traced_value(serde_json::to_value(run).expect("serializes"))
}

/// A run report's JSON as a row keeps it (see [`traced_report`]).
fn traced_value(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.retain(|k, _| !is_timing_key(k) && k != "series" && k != "cpu");
        if let Some(Value::Object(extra)) = o.get_mut("extra") {
            extra.retain(|k, _| !is_timing_key(k));
        }
    }
    v
}

/// Runs one point: the simulated part under the shared lock, the native part
/// under the exclusive one.
pub fn run_point(p: &Point, index: usize, id: &str) -> Result<Row, String> {
    let t0 = Instant::now();
    let started_unix = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
    let alloc = p.alloc_spec()?;
    let wl = p.workload()?;
    let opts = RunOptions { threads: p.threads, seed: p.seed, ..Default::default() };
    // The allocator's own sizing (LLFree needs a frame per object and a tree per thread).
    let size = alloc.heap_size(&wl, p.threads);
    let flush = FlushInsn::best();
    let progress = Progress::default();
    let mut result = Results::default();
    let mut env = Env { host: host(), pmsim_version: env!("CARGO_PKG_VERSION").into(), started_unix, ..Env::default() };
    let fail = |what: &str, e: &dyn std::fmt::Display| format!("{} ({what}): {e}", p.label());
    // How far the CPU profile's runs faulted in the heap (the native run does as much).
    let mut fault_in = None;
    if p.mode.sim() {
        // The CPU's work of the same run, measured natively. It is taken
        // from the threads' CPU time, which other work on the machine does
        // not inflate, so it need not run alone as native points do.
        let cpu = {
            let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
            cpu::profile(&alloc, &wl, &opts, size, id).map_err(|e| fail("CPU profile", &e))?
        };
        let costs = match &cpu {
            cpu::Cpu::Measured(c) => {
                fault_in = c.fault_in.clone();
                env.cpu = Some(serde_json::to_value(c).expect("serializes"));
                Some(cpu::costs(c))
            }
            cpu::Cpu::Skipped(why) => {
                env.cpu_skipped = Some(why.clone());
                None
            }
        };
        if alloc.traceable() {
            let cfg = p.sim_config()?;
            let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
            let scratch = ScratchHeap::new(&format!("sweep-{id}-sim"))?;
            let hs = HeapSpec { path: scratch.path().to_path_buf(), size, overwrite: true, shown: None };
            let spec = RunSpec { alloc: &alloc, workload: &wl, opts: &opts, heap: &hs, flush, progress: &progress };
            let (outcome, mut finished) = runner::run_traced(&spec, &TraceConfig::default(), |h| {
                Timed::with_cpu(cfg.clone(), &h, costs.as_ref()).map_err(std::io::Error::other)
            })
            .map_err(|e| fail("simulated", &e))?;
            let time = finished.sink.time_report();
            env.estimate = finished.sink.cpu_time_report().map(contention_value);
            let mut report = serde_json::to_value(finished.sink.sim.report()).expect("reports serialize");
            if let Some(obj) = report.as_object_mut() {
                env.sim_dimms = obj.remove("dimms");
                // The simulator names the trace by its header; the point already says it all.
                obj.remove("trace");
            }
            with_contention(&mut report, time);
            result.sim = Some(report);
            result.traced = Some(traced_report(&outcome.run));
            result.access_map =
                finished.sink.sim.access_map().iter().map(|a| serde_json::to_value(a).expect("serializes")).collect();
            result.allocator = Some(serde_json::to_value(&outcome.alloc).expect("serializes"));
        } else {
            let _shared = MACHINE.read().unwrap_or_else(|e| e.into_inner());
            match dbi_sim(p, &alloc, &wl, id, costs.as_ref()).map_err(|e| fail("traced by Valgrind", &e))? {
                DbiSim::Done(report, access, dimms, estimate, traced) => {
                    result.sim = Some(report);
                    result.traced = traced;
                    result.access_map = access;
                    env.sim_dimms = dimms;
                    env.estimate = estimate;
                }
                DbiSim::Skipped(why) => result.sim_skipped = Some(why),
            }
        }
    }
    if p.mode.native() {
        // A timed run has the machine to itself; a memory point shares it.
        let (_exclusive, _shared) = if p.mode.timed() {
            (Some(MACHINE.write().unwrap_or_else(|e| e.into_inner())), None)
        } else {
            (None, Some(MACHINE.read().unwrap_or_else(|e| e.into_inner())))
        };
        let scratch = ScratchHeap::new(&format!("sweep-{id}-native"))?;
        let hs = HeapSpec { path: scratch.path().to_path_buf(), size, overwrite: true, shown: None };
        // A point with a CPU profile runs natively on a heap faulted in as
        // far as the profile's runs were: the native throughput and the
        // estimate's CPU work then both leave out the first touches of a
        // fresh heap's pages, which weigh on a tiny run (Metall's Threadtest
        // ran 1.3-1.6x slower natively than its profile without it).
        let opts = RunOptions { fault_in, ..opts.clone() };
        let spec = RunSpec { alloc: &alloc, workload: &wl, opts: &opts, heap: &hs, flush, progress: &progress };
        let outcome = runner::run_native(&spec).map_err(|e| fail("native", &e))?;
        let Value::Object(mut rep) = serde_json::to_value(&outcome.run).expect("serializes") else {
            unreachable!("a run report is an object")
        };
        let mut timing = Map::new();
        for k in rep.keys().filter(|k| is_timing_key(k)).cloned().collect::<Vec<_>>() {
            timing.insert(k.clone(), rep.remove(&k).expect("present"));
        }
        if let Some(Value::Object(extra)) = rep.get_mut("extra") {
            for k in extra.keys().filter(|k| is_timing_key(k)).cloned().collect::<Vec<_>>() {
                timing.insert(k.clone(), extra.remove(&k).expect("present"));
            }
        }
        env.flush_insn = Some(outcome.flush_insn);
        if p.mode.timed() {
            env.native_timing = timing;
        }
        result.native = Some(Value::Object(rep));
        if result.allocator.is_none() {
            result.allocator = Some(serde_json::to_value(&outcome.alloc).expect("serializes"));
        }
    }
    env.wall_s = t0.elapsed().as_secs_f64();
    Ok(Row { index, id: id.to_string(), point: p.clone(), result, env })
}
