//! Running one allocator on one workload: the one place that turns an
//! allocator spec (`nvalloc-log:stripes=4`, `pmdk`, …) into an allocator on a
//! fresh heap, attaches a trace sink when asked, runs the workload and closes
//! everything again. `pmsim run`, sweeps and the crash explorer all go
//! through it, so a point of a sweep is exactly the run `pmsim run` makes.
//!
//! The sink is the caller's: a `.pmt` [`TraceFile`](pmsim_traces::TraceFile),
//! the simulator, or anything else implementing [`EventSink`]. This module
//! fills the trace header with the allocator, the workload and every
//! parameter, so that a trace describes its run completely.

use crate::alloc::PmAllocator;
use crate::heap::{Heap, HeapOptions};
use crate::llfree::{LlConfig, LlFree};
use crate::makalu::{Makalu, MakaluConfig};
use crate::metall::{Metall, MetallConfig};
use crate::nvalloc::{NvAlloc, NvConfig};
use crate::params::{as_map, split_override};
use crate::pm::{FlushInsn, Pm};
use crate::pmdk::{Pmdk, PmdkOptions};
use crate::tracing::{Finished, TraceConfig};
use crate::workloads::{self, Progress, RunOptions, RunReport, Workload};
use pmsim_traces::{Component, EventSink, TraceHeader};
use serde::Serialize;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The error of a run: one line for the user, sendable across the threads of a sweep.
pub type RunError = Box<dyn std::error::Error + Send + Sync>;

/// One allocator to run, with every parameter settled.
#[derive(Clone, Debug)]
pub enum AllocSpec {
    /// An NVAlloc preset with its overrides; `label` is the spec as written.
    NvAlloc { label: String, cfg: NvConfig },
    /// PMDK's libpmemobj through FFI (not traceable by the built-in tracer).
    Pmdk,
    /// LLFree in persistent mode (`llfree[:eadr=true:…]`).
    LlFree { label: String, cfg: LlConfig },
    /// The Makalu-style allocator with its parameters; `label` is the spec as written.
    Makalu { label: String, cfg: MakaluConfig },
    /// The Metall-style allocator with its parameters; `label` is the spec as written.
    Metall { label: String, cfg: MetallConfig },
}

impl AllocSpec {
    /// Every allocator name a spec may start with.
    pub fn names() -> Vec<&'static str> {
        let mut v: Vec<&'static str> = NvConfig::PRESETS.to_vec();
        v.push("pmdk");
        v.push("llfree");
        v.push("makalu");
        v.push("metall");
        v
    }

    /// Parses `NAME[:key=value:…]`. `overrides` (`key=value`, e.g. from a
    /// command line's `--set`) apply first, then the spec's own; the spec's
    /// label stays as written. Every override must name a parameter of this
    /// allocator; [`AllocSpec::parse_all`] spreads shared overrides instead.
    pub fn parse<'a>(spec: &str, overrides: impl IntoIterator<Item = &'a str>) -> Result<AllocSpec, RunError> {
        let mut parts = spec.split(':');
        let name = parts.next().unwrap_or("").trim();
        if name == "pmdk" {
            if parts.next().is_some() {
                return Err(format!("allocator '{spec}': pmdk takes no parameters").into());
            }
            return Ok(AllocSpec::Pmdk);
        }
        if name == "llfree" {
            let cfg = LlConfig::default().with_overrides(overrides)?.with_overrides(parts)?;
            cfg.validate()?;
            return Ok(AllocSpec::LlFree { label: spec.to_string(), cfg });
        }
        if name == "makalu" {
            let cfg = MakaluConfig::default().with_overrides(overrides)?.with_overrides(parts)?;
            return Ok(AllocSpec::Makalu { label: spec.to_string(), cfg });
        }
        if name == "metall" {
            let cfg = MetallConfig::default().with_overrides(overrides)?.with_overrides(parts)?;
            return Ok(AllocSpec::Metall { label: spec.to_string(), cfg });
        }
        if !NvConfig::PRESETS.contains(&name) {
            return Err(format!(
                "unknown allocator '{name}' in '{spec}' (expected one of: {})",
                Self::names().join(", ")
            )
            .into());
        }
        let cfg = NvConfig::preset(name)?.with_overrides(overrides)?.with_overrides(parts)?;
        Ok(AllocSpec::NvAlloc { label: spec.to_string(), cfg })
    }

    /// Parses several specs that share `overrides` (a command line's
    /// `--set`, `--stripes`, …): each override reaches only the allocators
    /// that have its parameter, so `--alloc llfree,nvalloc-log --stripes 4`
    /// sets NVAlloc's stripes and leaves LLFree alone. An override that no
    /// listed allocator has is an error rather than silently dropped.
    pub fn parse_all(specs: &[String], overrides: &[String]) -> Result<Vec<AllocSpec>, RunError> {
        let mut used = vec![false; overrides.len()];
        let mut out = Vec::with_capacity(specs.len());
        for spec in specs {
            let name = spec.split(':').next().unwrap_or("");
            let keys = AllocSpec::parse(name, [])?.params();
            let mut mine = Vec::new();
            for (i, kv) in overrides.iter().enumerate() {
                if keys.contains_key(split_override(kv)?.0) {
                    used[i] = true;
                    mine.push(kv.as_str());
                }
            }
            out.push(AllocSpec::parse(spec, mine)?);
        }
        if let Some(i) = used.iter().position(|u| !u) {
            let key = split_override(&overrides[i])?.0;
            return Err(format!("no allocator in {} has a parameter '{key}'", specs.join(",")).into());
        }
        Ok(out)
    }

    /// Every parameter of the spec with its value (PMDK has none).
    pub fn params(&self) -> serde_json::Map<String, serde_json::Value> {
        match self {
            AllocSpec::NvAlloc { cfg, .. } => as_map(cfg),
            AllocSpec::LlFree { cfg, .. } => as_map(cfg),
            AllocSpec::Makalu { cfg, .. } => as_map(cfg),
            AllocSpec::Metall { cfg, .. } => as_map(cfg),
            AllocSpec::Pmdk => serde_json::Map::new(),
        }
    }

    /// The spec as the user wrote it (the row label of tables).
    pub fn label(&self) -> &str {
        match self {
            AllocSpec::NvAlloc { label, .. } | AllocSpec::LlFree { label, .. } => label,
            AllocSpec::Pmdk => "pmdk",
            AllocSpec::Makalu { label, .. } | AllocSpec::Metall { label, .. } => label,
        }
    }

    /// Whether pmsim's built-in tracer sees this allocator's persistent
    /// writes (PMDK's happen inside libpmemobj: trace it with the DBI tool).
    pub fn traceable(&self) -> bool {
        !matches!(self, AllocSpec::Pmdk)
    }

    /// Sets a parameter of the allocator (`stripes`, `su`, …), as a sweep does.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), RunError> {
        match self {
            AllocSpec::NvAlloc { cfg, .. } => Ok(cfg.set(key, value)?),
            AllocSpec::LlFree { cfg, .. } => Ok(cfg.set(key, value)?),
            AllocSpec::Pmdk => Err(format!("pmdk has no parameter '{key}'").into()),
            AllocSpec::Makalu { cfg, .. } => Ok(cfg.set(key, value).and_then(|_| cfg.validate())?),
            AllocSpec::Metall { cfg, .. } => Ok(cfg.set(key, value).and_then(|_| cfg.validate())?),
        }
    }

    /// The heap size (bytes, a multiple of 2 MiB) this allocator needs for
    /// `wl` with `threads` threads: the workload's hint, except for LLFree,
    /// which hands out a whole frame per object (4 KiB, or 2 MiB above that)
    /// and wants a tree (64 MiB) per thread to reserve.
    pub fn heap_size(&self, wl: &Workload, threads: u32) -> u64 {
        match self {
            AllocSpec::LlFree { .. } => {
                let frame = if wl.max_object_size() <= 4096 { 4096 } else { 2 << 20 };
                // The workload's objects plus its own arrays, a quarter
                // extra for the trees' fill levels, a tree per thread and one more.
                let frames = wl.peak_objects(threads).saturating_add(64).saturating_mul(frame);
                let want = (frames + frames / 4 + (16 << 20)).max((threads as u64 + 1) * (64 << 20));
                want.div_ceil(2 << 20) * (2 << 20)
            }
            _ => wl.heap_size_hint(threads),
        }
    }
}

/// Who an allocator was, for result rows: the spec, the instance's name and
/// every parameter it ran with.
#[derive(Clone, Debug, Serialize)]
pub struct AllocInfo {
    pub spec: String,
    pub name: String,
    pub params: serde_json::Map<String, serde_json::Value>,
}

/// The heap (or PMDK pool) file of one run.
#[derive(Clone, Debug)]
pub struct HeapSpec {
    pub path: PathBuf,
    pub size: u64,
    /// Replace an existing file.
    pub overwrite: bool,
}

/// A heap file made for one run and removed when dropped (also on errors).
#[derive(Debug)]
pub struct ScratchHeap {
    path: PathBuf,
}

impl ScratchHeap {
    /// A fresh file name under `/dev/shm` (memory, as a DAX mount would be)
    /// or else the temporary directory; `tag` keeps concurrent runs of one
    /// process apart.
    pub fn new(tag: &str) -> ScratchHeap {
        let dir = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        ScratchHeap { path: dir.join(format!("pmsim-{}-{tag}.heap", std::process::id())) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchHeap {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        // A Metall datastore's management directory beside the heap.
        let _ = std::fs::remove_dir_all(crate::metall::store::store_dir(&self.path));
    }
}

/// Everything that defines one run.
pub struct RunSpec<'a> {
    pub alloc: &'a AllocSpec,
    pub workload: &'a Workload,
    pub opts: &'a RunOptions,
    pub heap: &'a HeapSpec,
    /// The flush instruction of pmsim's own allocators (PMDK picks its own).
    pub flush: FlushInsn,
    /// Polled by progress bars meanwhile.
    pub progress: &'a Progress,
}

/// What a run produced.
#[derive(Debug)]
pub struct Outcome {
    pub run: RunReport,
    pub alloc: AllocInfo,
    /// The flush instruction the allocator used (`msync` for a PMDK pool not on PM).
    pub flush_insn: String,
}

/// Runs natively: real flush instructions, no tracing.
pub fn run_native(spec: &RunSpec) -> Result<Outcome, RunError> {
    match spec.alloc {
        AllocSpec::Pmdk => run_pmdk(spec),
        _ => {
            let heap = create_heap(spec.heap)?;
            let pm = Pm::native(&heap, spec.flush)?;
            let (run, alloc, pm) = run_on_pm(spec, &heap, pm)?;
            drop(pm);
            heap.close()?;
            Ok(Outcome { run: run?, alloc, flush_insn: spec.flush.name().into() })
        }
    }
}

/// Runs with every event going, in global order, to the sink `make_sink`
/// builds from the complete trace header. Returns the outcome and the sink
/// (for a `TraceFile`, call its `finish` next).
pub fn run_traced<S, F>(spec: &RunSpec, tcfg: &TraceConfig, make_sink: F) -> Result<(Outcome, Finished<S>), RunError>
where
    S: EventSink + 'static,
    F: FnOnce(TraceHeader) -> io::Result<S>,
{
    if !spec.alloc.traceable() {
        return Err(format!(
            "{} cannot be traced by pmsim's built-in tracer: its stores and flushes happen inside the library \
             (trace the program with the Valgrind tool in pintools/)",
            spec.alloc.label()
        )
        .into());
    }
    let heap = create_heap(spec.heap)?;
    let (alloc_name, variant, params) = header_alloc(spec.alloc, spec.opts);
    let (pm, collector) = Pm::traced(&heap, spec.flush, tcfg, |mut h| {
        fill_header(&mut h, (alloc_name, &variant, params), spec.workload, spec.opts);
        make_sink(h)
    })?;
    let (run, alloc, pm) = run_on_pm(spec, &heap, pm)?;
    let finished = collector.finish(pm)?;
    let run = run?;
    heap.close()?;
    Ok((Outcome { run, alloc, flush_insn: spec.flush.name().into() }, finished))
}

fn create_heap(hs: &HeapSpec) -> Result<Heap, RunError> {
    Ok(Heap::create_with(&hs.path, hs.size, &HeapOptions { overwrite: hs.overwrite, ..HeapOptions::default() })?)
}

/// Builds the allocator on `pm`, runs the workload, closes the allocator and
/// gives the `Pm` back (a traced one must be handed to its collector). The
/// workload's own error comes back inside, after the allocator is closed, so
/// that a trace still ends cleanly.
type OnPm = (Result<RunReport, workloads::WorkloadError>, AllocInfo, Pm);

fn run_on_pm(spec: &RunSpec, heap: &Heap, pm: Pm) -> Result<OnPm, RunError> {
    match spec.alloc {
        AllocSpec::NvAlloc { label, cfg } => {
            let nv = NvAlloc::create(heap, pm, sized_config(cfg, spec.opts))?;
            let (r, info) = drive(&nv, label, spec);
            Ok((r, info, nv.close()?))
        }
        AllocSpec::LlFree { label, cfg } => {
            let ll = LlFree::create(heap, pm, cfg.clone())?;
            let (r, info) = drive(&ll, label, spec);
            Ok((r, info, ll.close()?))
        }
        AllocSpec::Pmdk => unreachable!("PMDK runs on its own pool, not on a pmsim Pm"),
        AllocSpec::Makalu { label, cfg } => {
            let mk = Makalu::create(heap, pm, cfg.clone())?;
            let (r, info) = drive(&mk, label, spec);
            Ok((r, info, mk.close()?))
        }
        AllocSpec::Metall { label, cfg } => {
            let mt = Metall::create(heap, pm, cfg.clone())?;
            let (r, info) = drive(&mt, label, spec);
            Ok((r, info, mt.close(heap)?))
        }
    }
}

fn drive<A: PmAllocator>(
    a: &Arc<A>,
    label: &str,
    spec: &RunSpec,
) -> (Result<RunReport, workloads::WorkloadError>, AllocInfo) {
    let r = workloads::run(a, spec.workload, spec.opts, spec.progress);
    (r, AllocInfo { spec: label.into(), name: a.name(), params: a.params() })
}

fn run_pmdk(spec: &RunSpec) -> Result<Outcome, RunError> {
    let hs = spec.heap;
    let pool = Pmdk::create(&hs.path, hs.size, &PmdkOptions { overwrite: hs.overwrite, ..PmdkOptions::default() })?;
    let (r, alloc) = drive(&pool, "pmdk", spec);
    let flush_insn = pool.flush().to_string();
    pool.close()?;
    Ok(Outcome { run: r?, alloc, flush_insn })
}

/// NVAlloc's configuration for a run of `opts.threads` threads.
fn sized_config(cfg: &NvConfig, opts: &RunOptions) -> NvConfig {
    let mut cfg = cfg.clone();
    cfg.max_threads = cfg.max_threads.max(opts.threads);
    cfg
}

/// The allocator part of a trace header, known before the instance exists.
fn header_alloc(
    a: &AllocSpec,
    opts: &RunOptions,
) -> (&'static str, String, serde_json::Map<String, serde_json::Value>) {
    match a {
        AllocSpec::NvAlloc { cfg, .. } => {
            let mut c = sized_config(cfg, opts);
            c.arenas = c.arena_count() as u32;
            ("nvalloc", cfg.preset.clone(), as_map(&c))
        }
        AllocSpec::LlFree { cfg, .. } => ("llfree", if cfg.eadr { "eadr" } else { "adr" }.into(), as_map(cfg)),
        AllocSpec::Pmdk => ("pmdk", String::new(), serde_json::Map::new()),
        AllocSpec::Makalu { cfg, .. } => ("makalu", String::new(), as_map(cfg)),
        AllocSpec::Metall { cfg, .. } => ("metall", String::new(), as_map(cfg)),
    }
}

/// The trace header's components: the allocator and the workload with every
/// parameter, the thread count and the command that made the trace.
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

#[cfg(test)]
mod tests {
    use super::AllocSpec;

    fn specs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// Shared overrides reach only the allocators that have the parameter;
    /// one that none has is refused, naming the key.
    #[test]
    fn shared_overrides_reach_only_allocators_that_have_the_key() {
        let all =
            AllocSpec::parse_all(&specs(&["llfree", "nvalloc-log:su=0.3", "pmdk"]), &specs(&["stripes=4", "su=0.5"]))
                .unwrap();
        assert!(all[0].params().get("stripes").is_none());
        assert_eq!(all[1].params()["stripes"], 4);
        // The spec's own key=value wins over the shared override.
        assert_eq!(all[1].params()["su"], 0.3);
        assert_eq!(all[2].label(), "pmdk");
        let e = AllocSpec::parse_all(&specs(&["llfree", "pmdk"]), &specs(&["stripes=4"])).unwrap_err().to_string();
        assert!(e.contains("no allocator in llfree,pmdk has a parameter 'stripes'"), "{e}");
        let e = AllocSpec::parse_all(&specs(&["nvalloc-log"]), &specs(&["stripes"])).unwrap_err().to_string();
        assert!(e.contains("key=value"), "{e}");
    }
}
