//! `pmsim run`: run a workload of the NVAlloc paper on an allocator — natively,
//! recording a `.pmt` trace, or streaming the events straight into the
//! simulator — and print throughput, operations, peak footprint and the slab
//! utilization breakdown (Fig. 15b). Several allocators, workloads or thread
//! counts run one after the other and end with a summary table (and, for
//! Fragbench, the peak-memory table of Fig. 1b / 15a).

use super::CmdResult;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use pmsim_model::nvalloc::{NvAlloc, NvConfig};
use pmsim_model::pmdk::{Pmdk, PmdkOptions};
use pmsim_model::workloads::{self, Progress, RunOptions, RunReport, Scale, Workload};
use pmsim_model::{FlushInsn, Heap, HeapOptions, Pm, PmAllocator, TraceConfig};
use pmsim_sim::{Config as SimConfig, Simulator};
use pmsim_traces::{Component, TraceFile, TraceHeader, WriterOptions};
use serde::Serialize;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct RunArgs {
    /// Allocator(s): nvalloc-log, nvalloc-gc, base, +interleaved, +log (NVAlloc presets) or pmdk.
    /// `PRESET:key=value:…` overrides NVAlloc parameters for that one allocator; a comma list runs each.
    #[arg(long, value_delimiter = ',', required = true)]
    alloc: Vec<String>,
    /// Workload(s): threadtest, prodcon, shbench, larson-small, larson-large, dbmstest,
    /// fragbench-w1 … fragbench-w4, fptree; `fragbench` (W1–W4), `larson` (both), `all`. A comma list runs each.
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
    /// NVAlloc parameter override KEY=VALUE (repeatable), e.g. --set tcache_max=64.
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
    /// Replace an existing --heap or --trace file.
    #[arg(long)]
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
    /// With --trace: record the bytes every store writes (for crash states).
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
    #[arg(long)]
    pmdk_msync: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
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

/// One allocator to run.
#[derive(Clone)]
enum AllocSpec {
    Nv { label: String, cfg: NvConfig },
    Pmdk,
}

impl AllocSpec {
    fn label(&self) -> &str {
        match self {
            AllocSpec::Nv { label, .. } => label,
            AllocSpec::Pmdk => "pmdk",
        }
    }
}

fn alloc_specs(a: &RunArgs) -> Result<Vec<AllocSpec>, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    for spec in &a.alloc {
        let mut parts = spec.split(':');
        let name = parts.next().unwrap_or("").trim();
        if name == "pmdk" {
            if parts.next().is_some() {
                return Err(format!("--alloc {spec}: pmdk takes no parameters").into());
            }
            out.push(AllocSpec::Pmdk);
            continue;
        }
        if !NvConfig::PRESETS.contains(&name) {
            return Err(format!(
                "--alloc {spec}: unknown allocator '{name}' (expected pmdk or an NVAlloc preset: {})",
                NvConfig::PRESETS.join(", ")
            )
            .into());
        }
        let mut cfg = NvConfig::preset(name)?.with_overrides(a.set.iter().map(String::as_str))?;
        if let Some(s) = a.stripes {
            cfg.stripes = s;
        }
        if let Some(su) = a.su {
            cfg.su = su;
        }
        let cfg = cfg.with_overrides(parts)?;
        out.push(AllocSpec::Nv { label: spec.clone(), cfg });
    }
    Ok(out)
}

/// The PMDK environment variables this run needs (`None`: unset).
fn pmdk_env(a: &RunArgs, flush: Option<FlushInsn>) -> Vec<(&'static str, Option<&'static str>)> {
    let mut env = vec![("PMEM_IS_PMEM_FORCE", if a.pmdk_msync { None } else { Some("1") })];
    let (no_clwb, no_opt, no_flush) = match flush {
        None => return env,
        Some(FlushInsn::Clwb) => (None, None, None),
        Some(FlushInsn::Clflushopt) => (Some("1"), None, None),
        Some(FlushInsn::Clflush) => (Some("1"), Some("1"), None),
        Some(FlushInsn::None) => (None, None, Some("1")),
    };
    env.extend([("PMEM_NO_CLWB", no_clwb), ("PMEM_NO_CLFLUSHOPT", no_opt), ("PMEM_NO_FLUSH", no_flush)]);
    env
}

/// PMDK reads its persistence settings from the environment when the library
/// loads, before `main`: if this process's environment is not the one the
/// run needs, execute pmsim again with it (once).
fn ensure_pmdk_env(want: &[(&'static str, Option<&'static str>)]) -> CmdResult {
    let differs = want.iter().any(|(k, v)| std::env::var(k).ok().as_deref() != *v);
    if !differs {
        return Ok(());
    }
    const GUARD: &str = "PMSIM_PMDK_REEXEC";
    if std::env::var_os(GUARD).is_some() {
        return Err("cannot set PMDK's environment (PMEM_*): it differs even after re-executing pmsim".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find pmsim's executable: {e}"))?;
    let mut cmd = std::process::Command::new(&exe);
    cmd.args(std::env::args_os().skip(1)).env(GUARD, "1");
    for (k, v) in want {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    use std::os::unix::process::CommandExt;
    let e = cmd.exec();
    Err(format!("cannot re-execute {} to set PMDK's environment: {e}", exe.display()).into())
}

/// Where a run's events go.
enum Mode {
    Native,
    Trace { path: PathBuf, opts: WriterOptions },
    Sim(SimConfig),
}

/// A heap file made for one run and removed after it (also on errors).
struct Scratch(Option<PathBuf>);

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
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

#[derive(Serialize)]
struct AllocOut {
    spec: String,
    name: String,
    params: serde_json::Map<String, serde_json::Value>,
}

/// Everything one run printed.
#[derive(Serialize)]
struct RunOut {
    allocator: AllocOut,
    heap: HeapOut,
    flush_insn: String,
    run: RunReport,
    trace: Option<TraceOut>,
    sim: Option<pmsim_sim::Report>,
}

/// Runs the workload with a progress bar on stderr once it has taken a
/// couple of seconds (indicatif draws nothing when stderr is not a terminal).
fn drive<A: PmAllocator>(
    alloc: &Arc<A>,
    wl: &Workload,
    opts: &RunOptions,
    label: &str,
) -> Result<RunReport, workloads::WorkloadError> {
    let progress = Progress::default();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let start = Instant::now();
            let mut bar: Option<ProgressBar> = None;
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                if bar.is_none() && start.elapsed() > Duration::from_secs(2) {
                    let b = ProgressBar::with_draw_target(Some(progress.total()), ProgressDrawTarget::stderr());
                    let style = ProgressStyle::with_template(
                        "{msg:30} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} ops ({per_sec}, {eta})",
                    )
                    .expect("valid template");
                    b.set_style(style);
                    bar = Some(b);
                }
                if let Some(b) = &bar {
                    b.set_length(progress.total().max(progress.done()));
                    b.set_position(progress.done());
                    b.set_message(format!("{label}: {}", progress.phase()));
                }
            }
            if let Some(b) = bar {
                b.finish_and_clear();
            }
        });
        // Stops the bar however the run ends (a panic would otherwise leave
        // the scope waiting for it forever).
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = Stop(&done);
        workloads::run(alloc, wl, opts, &progress)
    })
}

/// The trace header's components: the allocator and the workload with every parameter.
fn fill_header(
    h: &mut TraceHeader,
    alloc: (&str, &str, serde_json::Map<String, serde_json::Value>),
    wl: &Workload,
    opts: &RunOptions,
) {
    h.allocator = Component { name: alloc.0.into(), variant: alloc.1.into(), params: alloc.2 };
    let mut params = wl.params_json();
    params.insert("threads".into(), opts.threads.into());
    params.insert("seed".into(), opts.seed.into());
    params.insert("scale".into(), wl.scale().name().into());
    h.workload = Component { name: wl.name().into(), variant: wl.scale().name().into(), params };
    h.threads = opts.threads;
    let argv: Vec<String> = std::env::args().collect();
    h.extra.insert("command".into(), argv.join(" ").into());
}

/// The configuration NVAlloc reports as its parameters (its `params()`,
/// computed before the instance exists, for the trace header).
fn nv_params(cfg: &NvConfig) -> serde_json::Map<String, serde_json::Value> {
    let mut c = cfg.clone();
    c.arenas = c.arena_count() as u32;
    match serde_json::to_value(c).expect("config serializes") {
        serde_json::Value::Object(m) => m,
        _ => unreachable!("config is an object"),
    }
}

/// The heap file of one run.
struct HeapSpec {
    path: PathBuf,
    size: u64,
    overwrite: bool,
}

/// What one allocator run produced.
struct Done {
    run: RunReport,
    alloc: AllocOut,
    trace: Option<TraceOut>,
    sim: Option<pmsim_sim::Report>,
}

type RunResult = Result<Done, Box<dyn std::error::Error>>;

fn run_nvalloc(
    label: &str,
    cfg: &NvConfig,
    wl: &Workload,
    opts: &RunOptions,
    mode: &Mode,
    hs: &HeapSpec,
    flush: FlushInsn,
) -> RunResult {
    let mut cfg = cfg.clone();
    cfg.max_threads = cfg.max_threads.max(opts.threads);
    let heap =
        Heap::create_with(&hs.path, hs.size, &HeapOptions { overwrite: hs.overwrite, ..HeapOptions::default() })?;
    let header_alloc = || ("nvalloc", cfg.preset.clone(), nv_params(&cfg));
    let out = |nv: &Arc<NvAlloc>| AllocOut { spec: label.into(), name: nv.name(), params: nv.params() };
    let tcfg =
        TraceConfig { values: matches!(mode, Mode::Trace { opts, .. } if opts.values), ..TraceConfig::default() };
    match mode {
        Mode::Native => {
            let pm = Pm::native(&heap, flush)?;
            let nv = NvAlloc::create(&heap, pm, cfg.clone())?;
            let r = drive(&nv, wl, opts, label);
            let a = out(&nv);
            drop(nv.close()?);
            heap.close()?;
            Ok(Done { run: r?, alloc: a, trace: None, sim: None })
        }
        Mode::Trace { path, opts: wopts } => {
            let (pm, collector) = Pm::traced(&heap, flush, &tcfg, |mut h| {
                let (n, v, p) = header_alloc();
                fill_header(&mut h, (n, &v, p), wl, opts);
                TraceFile::create(path, &h, wopts)
            })?;
            let nv = NvAlloc::create(&heap, pm, cfg.clone())?;
            let r = drive(&nv, wl, opts, label);
            let a = out(&nv);
            let pm = nv.close()?;
            let finished = collector.finish(pm)?;
            let report = r?;
            let stats = finished.sink.finish().map_err(|e| format!("{}: {e}", path.display()))?;
            heap.close()?;
            let trace = Some(TraceOut { path: path.clone(), events: stats.events, bytes: stats.bytes });
            Ok(Done { run: report, alloc: a, trace, sim: None })
        }
        Mode::Sim(sim_cfg) => {
            let (pm, collector) = Pm::traced(&heap, flush, &tcfg, |mut h| {
                let (n, v, p) = header_alloc();
                fill_header(&mut h, (n, &v, p), wl, opts);
                Simulator::new(sim_cfg.clone(), &h).map_err(std::io::Error::other)
            })?;
            let nv = NvAlloc::create(&heap, pm, cfg.clone())?;
            let r = drive(&nv, wl, opts, label);
            let a = out(&nv);
            let pm = nv.close()?;
            let mut finished = collector.finish(pm)?;
            let report = r?;
            heap.close()?;
            Ok(Done { run: report, alloc: a, trace: None, sim: Some(finished.sink.report()) })
        }
    }
}

fn run_pmdk(wl: &Workload, opts: &RunOptions, hs: &HeapSpec) -> RunResult {
    let pool = Pmdk::create(&hs.path, hs.size, &PmdkOptions { overwrite: hs.overwrite, ..PmdkOptions::default() })?;
    let r = drive(&pool, wl, opts, "pmdk");
    let a = AllocOut { spec: "pmdk".into(), name: pool.name(), params: pool.params() };
    pool.close()?;
    Ok(Done { run: r?, alloc: a, trace: None, sim: None })
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
    let allocs = alloc_specs(&a)?;
    let mut wls = Vec::new();
    for w in &a.workload {
        for name in Workload::expand(w)? {
            wls.push(Workload::preset(name, scale)?.with_overrides(a.params.iter().map(String::as_str))?);
        }
    }
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
    if allocs.iter().any(|s| matches!(s, AllocSpec::Pmdk)) {
        if a.trace.is_some() || a.sim.is_some() {
            return Err("--alloc pmdk cannot be traced by pmsim's built-in tracer: PMDK's stores and flushes happen \
                        inside libpmemobj (trace it with the Valgrind tool in pintools/)"
                .into());
        }
        if let Some(f) = flush {
            f.check(&pmsim_model::CpuFeatures::detect())?;
        }
        ensure_pmdk_env(&pmdk_env(&a, flush))?;
    }
    let flush = flush.unwrap_or_else(FlushInsn::best);
    if let Some(t) = &a.trace {
        if t.exists() && !a.overwrite {
            return Err(format!("{}: already exists (--overwrite replaces it)", t.display()).into());
        }
    }
    let mode = match (&a.trace, &a.sim) {
        (Some(path), _) => Mode::Trace {
            path: path.clone(),
            opts: WriterOptions { values: a.values, zstd_level: a.zstd.then_some(3), ..WriterOptions::default() },
        },
        (None, Some(cfg)) => Mode::Sim(match cfg {
            Some(p) => SimConfig::from_file(p)?,
            None => SimConfig::default(),
        }),
        (None, None) => Mode::Native,
    };

    let scratch_dir = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    let mut outs = Vec::new();
    let stdout = std::io::stdout();
    for (k, job) in jobs.iter().enumerate() {
        let opts = RunOptions { threads: job.threads, seed: a.seed };
        let size = a.heap_size.unwrap_or_else(|| job.wl.heap_size_hint(job.threads));
        let (path, _scratch) = match &a.heap {
            Some(p) => (p.clone(), Scratch(None)),
            None => {
                let p = scratch_dir.join(format!("pmsim-run-{}-{k}.heap", std::process::id()));
                (p.clone(), Scratch(Some(p)))
            }
        };
        let ctx = |e: Box<dyn std::error::Error>| -> Box<dyn std::error::Error> {
            format!("{} on {}, {} thread(s): {e}", job.wl.name(), job.alloc.label(), job.threads).into()
        };
        let hs = HeapSpec { path, size, overwrite: a.overwrite };
        let (done, flush_name) = match &job.alloc {
            AllocSpec::Nv { label, cfg } => {
                (run_nvalloc(label, cfg, &job.wl, &opts, &mode, &hs, flush).map_err(ctx)?, flush.name().to_string())
            }
            AllocSpec::Pmdk => {
                let d = run_pmdk(&job.wl, &opts, &hs).map_err(ctx)?;
                let f = d.alloc.params.get("flush").and_then(|v| v.as_str()).unwrap_or("?").to_string();
                (d, f)
            }
        };
        let out = RunOut {
            allocator: done.alloc,
            heap: HeapOut { path: hs.path, size, kept: a.heap.is_some() },
            flush_insn: flush_name,
            run: done.run,
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
        print_summary(&outs, &mut w)?;
        print_fragbench(&outs, &mut w)?;
    }
    match w.flush() {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

fn rate(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} k", x / 1e3)
    } else {
        format!("{x:.0} ")
    }
}

fn print_run(o: &RunOut, w: &mut dyn Write) -> std::io::Result<()> {
    let r = &o.run;
    writeln!(
        w,
        "run          {} ({}) on {} [{}], {} thread(s), seed {}",
        r.workload, r.scale, o.allocator.spec, o.allocator.name, r.threads, r.seed
    )?;
    writeln!(
        w,
        "heap         {} ({}, {}), persistence: {}",
        o.heap.path.display(),
        mib(o.heap.size),
        if o.heap.kept { "kept" } else { "removed after the run" },
        o.flush_insn
    )?;
    writeln!(w, "operations   {} allocator operations in {:.3} s", r.ops, r.elapsed_s)?;
    writeln!(
        w,
        "throughput   {}ops/s ({} operations in {:.3} s measured)",
        rate(r.ops_per_s),
        r.measured_ops,
        r.measured_s
    )?;
    writeln!(w, "peak         live {}, mapped {}", mib(r.peak.live_bytes), mib(r.peak.mapped_bytes))?;
    writeln!(w, "end          live {}, mapped {}", mib(r.end.live_bytes), mib(r.end.mapped_bytes))?;
    match &r.snapshot {
        Some(s) => {
            write!(
                w,
                "at {:<9} live {}, mapped {}",
                "snapshot",
                mib(s.footprint.live_bytes),
                mib(s.footprint.mapped_bytes)
            )?;
            writeln!(w, " ({})", s.at)?;
            match s.slabs {
                Some(u) => writeln!(
                    w,
                    "slabs        {} (0–30 %: {}, 30–70 %: {}, 70–100 %: {})",
                    u.low + u.mid + u.high,
                    u.low,
                    u.mid,
                    u.high
                )?,
                None => writeln!(w, "slabs        (this allocator reports no slab breakdown)")?,
            }
        }
        None => writeln!(w, "slabs        (this workload has no working-set point)")?,
    }
    for (k, v) in &r.extra {
        writeln!(w, "{:<12} {v}", k)?;
    }
    if let Some(t) = &o.trace {
        writeln!(w, "trace        {} ({} events, {} bytes)", t.path.display(), t.events, t.bytes)?;
    }
    if let Some(s) = &o.sim {
        writeln!(w)?;
        pmsim_sim::write_text(s, w)?;
    }
    Ok(())
}

fn print_summary(outs: &[RunOut], w: &mut dyn Write) -> std::io::Result<()> {
    let aw = outs.iter().map(|o| o.allocator.spec.chars().count()).max().unwrap_or(0).max(9);
    writeln!(
        w,
        "{:<14} {:<aw$} {:>3} {:>12} {:>12} {:>12} {:>16}",
        "workload", "allocator", "thr", "ops/s", "peak live", "peak mapped", "slabs lo/mid/hi"
    )?;
    for o in outs {
        let r = &o.run;
        let slabs = match r.snapshot.as_ref().and_then(|s| s.slabs) {
            Some(u) => format!("{}/{}/{}", u.low, u.mid, u.high),
            None => "-".into(),
        };
        writeln!(
            w,
            "{:<14} {:<aw$} {:>3} {:>12.0} {:>12} {:>12} {:>16}",
            r.workload,
            o.allocator.spec,
            r.threads,
            r.ops_per_s,
            mib(r.peak.live_bytes),
            mib(r.peak.mapped_bytes),
            slabs
        )?;
    }
    Ok(())
}

/// Fragbench's figure: peak mapped memory per workload (rows) and allocator (columns).
fn print_fragbench(outs: &[RunOut], w: &mut dyn Write) -> std::io::Result<()> {
    let frag: Vec<&RunOut> = outs.iter().filter(|o| o.run.workload.starts_with("fragbench-")).collect();
    if frag.is_empty() {
        return Ok(());
    }
    let mut cols: Vec<String> = Vec::new();
    let mut rows: Vec<String> = Vec::new();
    let col = |o: &RunOut| format!("{} ×{}", o.allocator.spec, o.run.threads);
    for o in &frag {
        if !cols.contains(&col(o)) {
            cols.push(col(o));
        }
        if !rows.contains(&o.run.workload) {
            rows.push(o.run.workload.clone());
        }
    }
    writeln!(w)?;
    writeln!(
        w,
        "Fragbench peak memory (MiB mapped by the allocator; live-data cap and peak live in the last columns)"
    )?;
    let cw = cols.iter().map(|c| c.chars().count()).max().unwrap_or(0).max(10);
    write!(w, "{:<14}", "workload")?;
    for c in &cols {
        write!(w, " {c:>cw$}")?;
    }
    writeln!(w, " {:>10} {:>10}", "live cap", "peak live")?;
    for row in &rows {
        write!(w, "{row:<14}")?;
        let mut cap = 0;
        let mut live = 0;
        for c in &cols {
            match frag.iter().find(|o| &o.run.workload == row && &col(o) == c) {
                Some(o) => {
                    write!(w, " {:>cw$.1}", o.run.peak.mapped_bytes as f64 / (1 << 20) as f64)?;
                    cap = o.run.params.get("live_cap").and_then(|v| v.as_u64()).unwrap_or(0);
                    live = live.max(o.run.peak.live_bytes);
                }
                None => write!(w, " {:>cw$}", "-")?,
            }
        }
        writeln!(w, " {:>10.1} {:>10.1}", cap as f64 / (1 << 20) as f64, live as f64 / (1 << 20) as f64)?;
    }
    Ok(())
}
