//! `pmsim run`: run a workload of the NVAlloc paper on an allocator — natively,
//! recording a `.pmt` trace, or streaming the events straight into the
//! simulator — and print throughput, operations, peak footprint and the slab
//! utilization breakdown (Fig. 15b). Several allocators, workloads or thread
//! counts run one after the other and end with a summary table (and, for
//! Fragbench, the peak-memory table of Fig. 1b / 15a).

use super::CmdResult;
use clap::Args;
use pmsim_model::fault_in::FaultIn;
use pmsim_model::runner::{self, AllocInfo, AllocSpec, HeapSpec, Outcome, RunError, RunSpec};
use pmsim_model::scratch::ScratchHeap;
use pmsim_model::workloads::series::Every;
use pmsim_model::workloads::{print, Progress, RunOptions, RunReport, Scale, Workload};
use pmsim_model::{FlushInsn, TraceConfig};
use pmsim_sim::{Config as SimConfig, Simulator};
use pmsim_traces::output::{Pending, Policy};
use pmsim_traces::{TraceFile, WriterOptions};
use serde::Serialize;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct RunArgs {
    // The list of allocators comes from the registry, so a registered allocator is listed.
    #[arg(long, value_delimiter = ',', required = true, help = pmsim_model::registry::help())]
    alloc: Vec<String>,
    /// Workload(s): threadtest, prodcon, shbench, larson-small, larson-large, dbmstest,
    /// fragbench-w1 … fragbench-w4, fptree, llfree-bulk, llfree-random, llfree-repeat; `fragbench` (W1–W4),
    /// `larson` (both), `llfree` (LLFree's three), `all`. A comma list runs each.
    #[arg(long, value_delimiter = ',', required = true)]
    workload: Vec<String>,
    /// Worker threads (a comma list runs each count).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    threads: Vec<u32>,
    /// tiny (seconds, CI), small (about a minute) or paper (the paper's parameters).
    #[arg(long, default_value = "tiny")]
    scale: String,
    /// Workload parameter override KEY=VALUE (repeatable), e.g. --param iterations=50.
    #[arg(long = "param", value_name = "KEY=VALUE")]
    params: Vec<String>,
    /// Allocator parameter override KEY=VALUE (repeatable), e.g. --set tcache_max=64; it reaches each
    /// listed allocator that has the parameter (an override none of them has is an error).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// NVAlloc: bit stripes of slab bitmaps (Fig. 16a).
    #[arg(long)]
    stripes: Option<u32>,
    /// NVAlloc: slab-morphing space-utilization threshold (Fig. 16b).
    #[arg(long)]
    su: Option<f64>,
    /// The heap (or PMDK pool) file, kept after the run [default: a fresh file under /dev/shm, removed after].
    #[arg(long)]
    heap: Option<PathBuf>,
    /// Heap size, e.g. 512M, 4G [default: enough for the workload at its scale].
    #[arg(long, value_parser = parse_size)]
    heap_size: Option<u64>,
    /// Replace an existing --heap, --trace (and its .img, .img.files) file (regular files only; never an input).
    #[arg(long = "force", alias = "overwrite")]
    overwrite: bool,
    /// Flush instruction: clwb, clflushopt, clflush or none (eADR) [default: the best this CPU has].
    #[arg(long)]
    flush_insn: Option<String>,
    /// Seed of the workload's random streams.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Record the run's events into this .pmt file.
    #[arg(long, value_name = "OUT.pmt")]
    trace: Option<PathBuf>,
    /// With --trace: record the bytes every store writes, and save the heap image at trace start
    /// next to the trace (TRACE.img): the input of `pmsim crash`. An allocator that keeps files
    /// outside its heap (Metall's management data) saves what it wrote in TRACE.img.files/.
    #[arg(long, requires = "trace")]
    values: bool,
    /// With --trace: compress the trace with zstd (level 3).
    #[arg(long, requires = "trace")]
    zstd: bool,
    /// Stream the events into the simulator (no file) and print its report; optionally its CONFIG.toml.
    #[arg(long, num_args = 0..=1, value_name = "CONFIG.toml", conflicts_with = "trace")]
    sim: Option<Option<PathBuf>>,
    /// PMDK: persist a pool that is not on real PM with msync (PMDK's own default) instead of
    /// cache-line flushes. Without it pmsim sets PMEM_IS_PMEM_FORCE=1, as the paper's DAX pools behave.
    /// An error with no PMDK allocator in --alloc.
    #[arg(long)]
    pmdk_msync: bool,
    /// Sample the heap's shape (live, mapped, slabs by fullness) every N operations for the run's
    /// `series` (in --json) [default: adaptive, 128–256 evenly spaced points and every phase end].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    series_every: Option<u64>,
    /// Measure what the run's work costs the CPU per operation (inside malloc and free, and between
    /// them), from each thread's CPU time; use it with --flush-insn none to measure the CPU alone, as
    /// sweeps do for their estimates.
    #[arg(long)]
    cpu_profile: bool,
    /// With --cpu-profile: fault in only the heap's first BYTES (e.g. 64M), or the byte ranges
    /// START-END,START-END,… before the run [default: all of it]. Enough for what the run touches
    /// (its JSON's heap_data, from a run with --prefault 0) measures the same and spares the kernel
    /// allocating the rest.
    #[arg(long, value_name = "BYTES|RANGES", value_parser = parse_fault_in, requires = "cpu_profile")]
    prefault: Option<FaultIn>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// `--prefault`: a size ([`parse_size`]) for a prefix, else byte ranges.
fn parse_fault_in(s: &str) -> Result<FaultIn, String> {
    if s.contains(['-', ',']) {
        s.parse()
    } else {
        parse_size(s).map(FaultIn::prefix)
    }
}

/// Parses `123`, `64K`, `512M`, `4G`, `1T` (binary units; `KiB`, `MB`… also accepted).
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("'{s}' is not a size (e.g. 512M, 4G)"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        u => return Err(format!("'{s}': unknown unit '{u}' (use K, M, G or T)")),
    };
    n.checked_mul(1 << shift).ok_or_else(|| format!("'{s}' is too large"))
}

/// Where a run's events go.
enum Mode {
    Native,
    Trace { path: PathBuf, opts: WriterOptions },
    Sim(Box<SimConfig>),
}

#[derive(Serialize)]
struct HeapOut {
    path: PathBuf,
    size: u64,
    kept: bool,
}

#[derive(Serialize)]
struct TraceOut {
    path: PathBuf,
    events: u64,
    bytes: u64,
}

/// Everything one run printed.
#[derive(Serialize)]
struct RunOut {
    allocator: AllocInfo,
    heap: HeapOut,
    flush_insn: String,
    run: RunReport,
    trace: Option<TraceOut>,
    sim: Option<pmsim_sim::Report>,
}

/// Runs `f` with a progress bar on stderr once it has taken a couple of
/// seconds (indicatif draws nothing when stderr is not a terminal).
fn with_bar<T>(label: &str, f: impl FnOnce(&Progress) -> T) -> T {
    let progress = Progress::default();
    let start = Instant::now();
    crate::progress::with_bar(
        Duration::from_millis(50),
        || {
            let template = "{msg:30} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} ops ({per_sec}, {eta})";
            (start.elapsed() > Duration::from_secs(2)).then(|| crate::progress::bar(Some(progress.total()), template))
        },
        |b| {
            b.set_length(progress.total().max(progress.done()));
            b.set_position(progress.done());
            b.set_message(format!("{label}: {}", progress.phase()));
        },
        || f(&progress),
    )
}

/// What one allocator run produced.
struct Done {
    outcome: Outcome,
    trace: Option<TraceOut>,
    sim: Option<pmsim_sim::Report>,
    /// The files it wrote, to be renamed into place once it all succeeded.
    outputs: Pending,
}

/// Runs one job in `mode`.
fn run_one(job: &Job, opts: &RunOptions, hs: &HeapSpec, flush: FlushInsn, mode: &Mode) -> Result<Done, RunError> {
    with_bar(job.alloc.label(), |progress| {
        let spec = RunSpec { alloc: &job.alloc, workload: &job.wl, opts, heap: hs, flush, progress };
        match mode {
            Mode::Native => {
                Ok(Done { outcome: runner::run_native(&spec)?, trace: None, sim: None, outputs: Pending::default() })
            }
            Mode::Trace { path, opts: wopts } => {
                // With values, the heap image at trace start goes next to the
                // trace: together they are the input of `pmsim crash`.
                let heap_image = wopts.values.then(|| heap_image_path(path));
                let tcfg = TraceConfig { values: wopts.values, heap_image, ..TraceConfig::default() };
                let (outcome, finished) = runner::run_traced(&spec, &tcfg, |h| TraceFile::create(path, &h, wopts))?;
                let (stats, staged) = finished.sink.finish_staged()?;
                let mut outputs = finished.outputs;
                // The trace last: it appears with its image beside it.
                outputs.push(staged);
                let trace = Some(TraceOut { path: path.clone(), events: stats.events, bytes: stats.bytes });
                Ok(Done { outcome, trace, sim: None, outputs })
            }
            Mode::Sim(cfg) => {
                let (outcome, mut finished) = runner::run_traced(&spec, &TraceConfig::default(), |h| {
                    Simulator::new((**cfg).clone(), &h).map_err(std::io::Error::other)
                })?;
                Ok(Done { outcome, trace: None, sim: Some(finished.sink.report()), outputs: Pending::default() })
            }
        }
    })
}

/// Where `pmsim run --trace T --values` saves the heap image: `T.img`.
fn heap_image_path(trace: &std::path::Path) -> PathBuf {
    let mut p = trace.as_os_str().to_owned();
    p.push(".img");
    PathBuf::from(p)
}

/// A value of a comma list reached twice (`--threads 2,2`, `--workload
/// larson,larson-small`) would make the same runs twice: refused, naming
/// both ways it was reached. `items`: each value with what the user wrote.
fn listed_once(what: &str, items: impl Iterator<Item = (String, String)>) -> Result<(), String> {
    let mut seen: Vec<(String, String)> = Vec::new();
    for (v, from) in items {
        if let Some((_, first)) = seen.iter().find(|(s, _)| *s == v) {
            let how = if *first == from && v == from { String::new() } else { format!(" (as {first} and as {from})") };
            return Err(format!("{what}: {v} is listed twice{how}: each run would be made twice"));
        }
        seen.push((v, from));
    }
    Ok(())
}

/// One run of the cross product.
struct Job {
    alloc: AllocSpec,
    wl: Workload,
    threads: u32,
}

pub fn run(a: RunArgs) -> CmdResult {
    let scale: Scale = a.scale.parse()?;
    let flush = a.flush_insn.as_deref().map(str::parse::<FlushInsn>).transpose()?;
    // --set, then --stripes and --su, then each spec's own `:key=value`s.
    let mut overrides = a.set.clone();
    overrides.extend(a.stripes.map(|s| format!("stripes={s}")));
    overrides.extend(a.su.map(|su| format!("su={su}")));
    let allocs = AllocSpec::parse_all(&a.alloc, &overrides).map_err(|e| format!("--alloc: {e}"))?;
    listed_once("--alloc", a.alloc.iter().map(|s| (s.trim().to_string(), s.clone())))?;
    listed_once("--threads", a.threads.iter().map(|t| (t.to_string(), t.to_string())))?;
    let mut wls = Vec::new();
    let mut names = Vec::new();
    for w in &a.workload {
        for name in Workload::expand(w)? {
            names.push((name.to_string(), w.clone()));
            wls.push(Workload::preset(name, scale)?.with_overrides(a.params.iter().map(String::as_str))?);
        }
    }
    listed_once("--workload", names.into_iter())?;
    let mut jobs = Vec::new();
    for wl in &wls {
        for &threads in &a.threads {
            wl.validate(threads)?;
            for alloc in &allocs {
                jobs.push(Job { alloc: alloc.clone(), wl: wl.clone(), threads });
            }
        }
    }
    if jobs.len() > 1 && (a.trace.is_some() || a.sim.is_some() || a.heap.is_some()) {
        return Err(format!(
            "--trace, --sim and --heap take one allocator, one workload and one thread count ({} runs were asked for)",
            jobs.len()
        )
        .into());
    }
    if let Some(s) = allocs.iter().find(|s| !s.traceable()) {
        if a.trace.is_some() || a.sim.is_some() {
            return Err(format!(
                "--alloc {}: cannot be traced by pmsim's built-in tracer: its stores and flushes happen inside \
                 the library (trace it with the Valgrind tool in pintools/)",
                s.label()
            )
            .into());
        }
    }
    if a.overwrite && a.heap.is_none() && a.trace.is_none() {
        return Err("--force replaces the --heap and --trace files: neither is given".into());
    }
    // An allocator whose library reads its settings from the environment as
    // it loads (PMDK) has them set before anything runs.
    let env = |msync| allocs.iter().flat_map(|s| s.family().process_env(flush, msync)).collect::<Vec<_>>();
    if a.pmdk_msync && env(true) == env(false) {
        return Err("--pmdk-msync applies to PMDK pools: --alloc lists no pmdk".into());
    }
    if !env(a.pmdk_msync).is_empty() {
        if let Some(f) = flush {
            f.check(&pmsim_model::CpuFeatures::detect())?;
        }
        pmsim_model::registry::ensure_process_env(allocs.iter().map(|s| s.family()), flush, a.pmdk_msync)?;
    }
    let flush = flush.unwrap_or_else(FlushInsn::best);
    // Every file this run writes, checked and locked before anything runs.
    let mut policy = Policy::new(a.overwrite);
    if let Some(Some(c)) = &a.sim {
        policy.input(c);
    }
    if let Some(h) = &a.heap {
        policy.check(h)?;
        // And what the allocator keeps beside its heap (Metall's management directory).
        for side in allocs.iter().flat_map(|s| s.family().beside_heap(h)) {
            policy.check_dir(&side)?;
        }
    }
    if let Some(t) = &a.trace {
        policy.check(t)?;
    }
    if let (Some(t), true) = (&a.trace, a.values) {
        policy.check(&heap_image_path(t))?;
        // And the files an allocator keeps outside its heap (Metall's
        // management data), saved beside the image when it writes any.
        policy.check_dir(&pmsim_model::pm::image_files_dir(&heap_image_path(t)))?;
    }
    let mode = match (&a.trace, &a.sim) {
        (Some(path), _) => Mode::Trace {
            path: path.clone(),
            opts: WriterOptions { values: a.values, zstd_level: a.zstd.then_some(3), ..WriterOptions::default() },
        },
        (None, Some(cfg)) => Mode::Sim(Box::new(match cfg {
            Some(p) => SimConfig::from_file(p)?,
            None => SimConfig::default(),
        })),
        (None, None) => Mode::Native,
    };

    let mut outs = Vec::new();
    let stdout = std::io::stdout();
    for (k, job) in jobs.iter().enumerate() {
        let series = a.series_every.map_or(Every::Auto, Every::Ops);
        let opts = RunOptions {
            threads: job.threads,
            seed: a.seed,
            series,
            cpu_profile: a.cpu_profile,
            fault_in: a.prefault.clone(),
        };
        let size = a.heap_size.unwrap_or_else(|| job.alloc.heap_size(&job.wl, job.threads));
        // A heap kept (--heap) is made under a temporary name and renamed
        // into place with the run's other outputs once the run succeeded;
        // otherwise it is a scratch heap, removed after the run.
        let scratch = a.heap.is_none().then(|| ScratchHeap::new(&format!("run-{k}"))).transpose()?;
        let kept = a.heap.as_ref().map(|h| policy.stage(h)).transpose()?;
        let path = match (&kept, &scratch) {
            (Some(k), _) => k.tmp_path(),
            (None, s) => s.as_ref().expect("a scratch heap").path().to_path_buf(),
        };
        let hs = HeapSpec { path: path.clone(), size, overwrite: true, shown: a.heap.clone() };
        let done = run_one(job, &opts, &hs, flush, &mode).map_err(|e| {
            let e = match &a.heap {
                Some(h) => e.to_string().replace(&path.display().to_string(), &h.display().to_string()),
                None => e.to_string(),
            };
            format!("{} on {}, {} thread(s): {e}", job.wl.name(), job.alloc.label(), job.threads)
        })?;
        let mut outputs = Pending::default();
        outputs.extend(kept);
        outputs.append(done.outputs);
        outputs.commit()?;
        let out = RunOut {
            allocator: done.outcome.alloc,
            heap: HeapOut { path: a.heap.clone().unwrap_or(path), size, kept: a.heap.is_some() },
            flush_insn: done.outcome.flush_insn,
            run: done.outcome.run,
            trace: done.trace,
            sim: done.sim,
        };
        if !a.json {
            let mut w = BufWriter::new(stdout.lock());
            if k > 0 {
                writeln!(w)?;
            }
            print_run(&out, &mut w)?;
            w.flush()?;
        }
        outs.push(out);
    }
    let mut w = BufWriter::new(stdout.lock());
    if a.json {
        serde_json::to_writer_pretty(&mut w, &serde_json::json!({ "runs": outs }))?;
        writeln!(w)?;
    } else if outs.len() > 1 {
        writeln!(w)?;
        let runs: Vec<(&AllocInfo, &RunReport)> = outs.iter().map(|o| (&o.allocator, &o.run)).collect();
        print::write_summary(&mut w, &runs)?;
        print::write_fragbench(&mut w, &runs)?;
    }
    // A closed pipe (`pmsim run … | head`) ends as every command's does: a
    // quiet exit with status 141 (see main).
    w.flush()?;
    Ok(())
}

fn print_run(o: &RunOut, w: &mut dyn Write) -> std::io::Result<()> {
    print::write_head(w, &o.allocator, &o.run)?;
    writeln!(
        w,
        "heap         {} ({}, {}), persistence: {}",
        o.heap.path.display(),
        print::mib(o.heap.size),
        if o.heap.kept { "kept" } else { "removed after the run" },
        o.flush_insn
    )?;
    print::write_body(w, &o.run)?;
    if let Some(t) = &o.trace {
        writeln!(w, "trace        {} ({} events, {} bytes)", t.path.display(), t.events, t.bytes)?;
    }
    if let Some(s) = &o.sim {
        writeln!(w)?;
        pmsim_sim::write_text(s, w)?;
    }
    Ok(())
}
