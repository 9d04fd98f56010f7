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

use crate::alloc::AllocThread;
use crate::family::{Drive, Driven, Family, Params, TimedRecovery};
use crate::heap::{Heap, HeapOptions};
use crate::params::split_override;
use crate::pm::{FlushInsn, Pm};
use crate::registry;
use crate::scratch::ScratchHeap;
use crate::tracing::{Finished, TraceConfig};
use crate::workloads::{list, Params as WorkloadParams, Progress, RunOptions, RunReport, Workload};
use pmsim_traces::{Component, EventSink, TraceHeader};
use serde::Serialize;
use std::io;
use std::path::{Path, PathBuf};

/// The error of a run: one line for the user, sendable across the threads of a sweep.
pub type RunError = Box<dyn std::error::Error + Send + Sync>;

/// One allocator to run, with every parameter settled and validated.
#[derive(Clone)]
pub struct AllocSpec {
    /// The spec as written (`nvalloc-log:stripes=4`): the row label of tables.
    label: String,
    family: &'static dyn Family,
    /// Every parameter, as the allocator's configuration serializes.
    params: Params,
}

impl std::fmt::Debug for AllocSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AllocSpec").field("label", &self.label).field("params", &self.params).finish()
    }
}

impl AllocSpec {
    /// Every allocator name a spec may start with (the registry's).
    pub fn names() -> Vec<&'static str> {
        registry::names()
    }

    /// Parses `NAME[:key=value:…]`. `overrides` (`key=value`, e.g. from a
    /// command line's `--set`) apply first, then the spec's own; the spec's
    /// label stays as written. Every override must name a parameter of this
    /// allocator; [`AllocSpec::parse_all`] spreads shared overrides instead.
    pub fn parse<'a>(spec: &str, overrides: impl IntoIterator<Item = &'a str>) -> Result<AllocSpec, RunError> {
        Self::parse_among(spec, overrides, &[])
    }

    /// [`AllocSpec::parse`] among the registered allocators and `extra` ones
    /// (a test registers an allocator of its own this way).
    pub fn parse_among<'a>(
        spec: &str,
        overrides: impl IntoIterator<Item = &'a str>,
        extra: &[&'static dyn Family],
    ) -> Result<AllocSpec, RunError> {
        let mut parts = spec.split(':');
        let name = parts.next().unwrap_or("").trim();
        let family = registry::find(name, extra).filter(|f| f.presets().contains(&name)).ok_or_else(|| {
            format!("unknown allocator '{name}' in '{spec}' (expected one of: {})", Self::names().join(", "))
        })?;
        // A key given twice among the shared overrides, or twice in the spec,
        // is an error; the spec's own `key=value` wins over a shared one.
        let shared: Vec<&str> = overrides.into_iter().collect();
        let own: Vec<&str> = parts.collect();
        let own_keys = crate::params::split_overrides(own.iter().copied()).map_err(|e| format!("'{spec}': {e}"))?;
        crate::params::split_overrides(shared.iter().copied())?;
        let mut all: Vec<&str> = shared
            .into_iter()
            .filter(|kv| !own_keys.iter().any(|(k, _)| kv.split_once('=').is_some_and(|(s, _)| s.trim() == *k)))
            .collect();
        all.extend(own);
        let params = family.configure(name, &all)?;
        Ok(AllocSpec { label: spec.to_string(), family, params })
    }

    /// Parses several specs that share `overrides` (a command line's
    /// `--set`, `--stripes`, …): each override reaches only the allocators
    /// that have its parameter, so `--alloc llfree,nvalloc-log --stripes 4`
    /// sets NVAlloc's stripes and leaves LLFree alone. An override that no
    /// listed allocator has is an error rather than silently dropped.
    /// An override that every allocator having its parameter sets in its own
    /// spec (`nvalloc-log:stripes=2 --stripes 8`) would do nothing: it is
    /// a key given twice, and an error naming both.
    pub fn parse_all(specs: &[String], overrides: &[String]) -> Result<Vec<AllocSpec>, RunError> {
        let mut used = vec![false; overrides.len()];
        // The spec that set each override's key itself, while none took it.
        let mut shadowed: Vec<Option<&str>> = vec![None; overrides.len()];
        let mut out = Vec::with_capacity(specs.len());
        for spec in specs {
            let name = spec.split(':').next().unwrap_or("");
            let keys = AllocSpec::parse(name, [])?.params;
            let own: Vec<&str> = spec.split(':').skip(1).filter_map(|kv| Some(kv.split_once('=')?.0.trim())).collect();
            let mut mine = Vec::new();
            for (i, kv) in overrides.iter().enumerate() {
                let key = split_override(kv)?.0;
                if !keys.contains_key(key) {
                    continue;
                }
                if own.contains(&key) {
                    shadowed[i].get_or_insert(spec);
                } else {
                    used[i] = true;
                }
                mine.push(kv.as_str());
            }
            out.push(AllocSpec::parse(spec, mine)?);
        }
        if let Some(i) = used.iter().position(|u| !u) {
            let kv = overrides[i].trim();
            let key = split_override(kv)?.0;
            return Err(match shadowed[i] {
                Some(spec) => {
                    format!("'{key}' is given twice ({kv} and {spec}), so {kv} changes nothing: give it once")
                }
                None => format!("no allocator in {} has a parameter '{key}'", specs.join(",")),
            }
            .into());
        }
        Ok(out)
    }

    /// Every parameter of the spec with its value (PMDK has none).
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// The spec as the user wrote it (the row label of tables).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The allocator's registry entry.
    pub fn family(&self) -> &'static dyn Family {
        self.family
    }

    /// Whether pmsim's built-in tracer sees this allocator's persistent
    /// writes (PMDK's happen inside libpmemobj: trace it with the DBI tool).
    pub fn traceable(&self) -> bool {
        self.family.traceable()
    }

    /// Applies `key=value` overrides (a sweep point's allocator parameters)
    /// and validates the result; a key the allocator lacks is an error.
    pub fn with_overrides(&mut self, kvs: &[String]) -> Result<(), RunError> {
        let name = self.label.split(':').next().unwrap_or("");
        // The overrides replace the parameters they name (each named once).
        let new = crate::params::split_overrides(kvs.iter().map(String::as_str))?;
        let mut all: Vec<String> = self
            .params
            .iter()
            .filter(|(k, _)| !new.iter().any(|(n, _)| n == k))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        all.extend(kvs.iter().cloned());
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        self.params = self.family.configure(name, &refs)?;
        Ok(())
    }

    /// Sets one parameter of the allocator (`stripes`, `su`, …), validated.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), RunError> {
        self.with_overrides(&[format!("{key}={value}")])
    }

    /// The heap size (bytes, a multiple of 2 MiB) this allocator needs for
    /// `wl` with `threads` threads.
    pub fn heap_size(&self, wl: &Workload, threads: u32) -> u64 {
        self.family.heap_size(&self.params, wl, threads)
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
    /// The path the user knows the heap by, when `path` is a temporary name
    /// for it (a kept heap is renamed into place once its run succeeded):
    /// the trace header records this one.
    pub shown: Option<PathBuf>,
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

/// Runs every workload at tiny scale on 1 and 2 threads natively, as
/// `pmsim run` does, with the heap at `dir/heap`: each workload checks its
/// own results, and each run's report must hold up ([`check_report`]).
/// The allocator conformance check every allocator's tests run (the model's
/// own and the crash crate's kit), kept here once.
pub fn check_every_workload(alloc: &AllocSpec, dir: &Path) -> Result<(), String> {
    for name in Workload::expand("all").map_err(|e| e.to_string())? {
        let wl = Workload::preset(name, crate::workloads::Scale::Tiny).map_err(|e| e.to_string())?;
        for threads in [1, 2] {
            let run = format!("{name} on {}, {threads} thread(s)", alloc.label);
            // A heap file per run: a fresh inode is never locked by a copy of
            // an earlier run's descriptor (see `heap::lock`).
            let path = dir.join(format!("heap-{name}-{threads}"));
            let hs = HeapSpec { path, size: alloc.heap_size(&wl, threads), overwrite: true, shown: None };
            let opts = RunOptions { threads, seed: 7, ..Default::default() };
            let progress = Progress::default();
            let rs =
                RunSpec { alloc, workload: &wl, opts: &opts, heap: &hs, flush: FlushInsn::best(), progress: &progress };
            let o = run_native(&rs).map_err(|e| format!("{run}: {e}"))?;
            check_report(&o.run).map_err(|e| format!("{run}: {e}"))?;
            let _ = std::fs::remove_file(&hs.path);
        }
    }
    Ok(())
}

/// What every run's report must hold: operations counted and measured, a
/// throughput, a peak that was sampled and that the mapped memory covers,
/// nothing live at the end (unless the workload keeps its data), and the
/// heap's shape sampled in operation order, within the peak, ending with
/// the end of the run (Fragbench's phases named in order).
pub fn check_report(r: &RunReport) -> Result<(), String> {
    let fail = |m: String| Err(m);
    if r.ops == 0 {
        return fail("no operation counted".into());
    }
    if r.measured_ops == 0 || r.measured_ops > r.ops {
        return fail(format!("measured {} of {} operations", r.measured_ops, r.ops));
    }
    if r.ops_per_s <= 0.0 {
        return fail("no throughput".into());
    }
    if r.peak.live_bytes == 0 {
        return fail("peak live never sampled".into());
    }
    if r.peak.mapped_bytes < r.peak.live_bytes {
        return fail(format!("peak mapped {} below peak live {}", r.peak.mapped_bytes, r.peak.live_bytes));
    }
    let keeps = ["keep", "crash"].iter().any(|k| r.params.get(*k).and_then(|k| k.as_bool()).unwrap_or(false));
    if r.end.live_bytes != 0 && !keeps {
        return fail(format!("{} bytes left live", r.end.live_bytes));
    }
    let s = &r.series;
    if !s.windows(2).all(|w| w[0].ops <= w[1].ops) {
        return fail("heap samples out of operation order".into());
    }
    if let Some(p) = s.iter().find(|p| p.footprint.live_bytes > r.peak.live_bytes) {
        return fail(format!("a heap sample at {} operations above the peak", p.ops));
    }
    let last = s.last().ok_or("no heap samples")?;
    if (last.phase.as_deref(), last.ops) != (Some("end"), r.ops) || (!keeps && last.footprint.live_bytes != 0) {
        return fail(format!("the last heap sample is not the end of the run: {last:?}"));
    }
    if r.workload.starts_with("fragbench") {
        let phases: Vec<&str> = s.iter().filter_map(|p| p.phase.as_deref()).collect();
        if phases != ["before", "delete", "after", "end"] {
            return fail(format!("Fragbench phases {phases:?}"));
        }
    }
    Ok(())
}

/// The key of a CPU-profile run's report ([`RunReport::extra`]) that says
/// which parts of its heap (PMDK's pool) file held data after the run, as
/// `[start, end)` byte ranges: the whole heap after a whole prefault, else
/// what the run itself touched.
pub const HEAP_DATA: &str = "heap_data";

/// Runs natively: real flush instructions, no tracing. A workload that
/// [crashes](Workload::crashes) (Fig. 18's list) leaves a copy of the heap
/// as a crash at its end leaves it, and the allocator's own recovery of
/// that copy is timed ([`time_recovery`]).
pub fn run_native(spec: &RunSpec) -> Result<Outcome, RunError> {
    let hs = spec.heap;
    let family = spec.alloc.family;
    let threads = spec.opts.threads;
    // A CPU profile (flushes off) measures the workload, not the recovery.
    let crashes = spec.workload.crashes() && !spec.opts.cpu_profile;
    let skip = crashes.then(|| family.no_recovery(&spec.alloc.params, threads)).flatten();
    // The copies live in this process's scratch directory, never beside the
    // user's heap, where a file of that name could be theirs.
    let image = (crashes && skip.is_none()).then(|| ScratchHeap::new("crashed")).transpose()?;
    let image = image.as_ref().map(ScratchHeap::path);
    let d = Drive { workload: spec.workload, opts: spec.opts, progress: spec.progress, crash_copy: image };
    let mut out = if let Some(r) = family.run_on_pool(&spec.alloc.params, &hs.path, hs.size, hs.overwrite, &d) {
        let (driven, flush_insn) = r?;
        let alloc = info(spec.alloc, &driven);
        Outcome { run: driven.run?, alloc, flush_insn }
    } else {
        let heap = create_heap(spec.heap)?;
        if let Some(f) = spec.opts.prefault() {
            heap.prefault(&f)?;
        }
        let pm = Pm::native(&heap, spec.flush)?;
        let (driven, pm) = family.run_on_pm(&spec.alloc.params, &heap, pm, &d)?;
        drop(pm);
        heap.close()?;
        let alloc = info(spec.alloc, &driven);
        Outcome { run: driven.run?, alloc, flush_insn: spec.flush.name().into() }
    };
    if let Some(why) = skip {
        out.run.extra.insert("recovery_skipped".into(), why.into());
    }
    if spec.opts.cpu_profile {
        // Where in the heap the run reached: what a CPU profile of the same
        // run need fault in ([`RunOptions::fault_in`]).
        if let Ok(data) = crate::sparse::data(&hs.path) {
            let data = crate::fault_in::FaultIn::from_ranges(data);
            out.run.extra.insert(HEAP_DATA.into(), serde_json::to_value(data).expect("serializes"));
        }
    }
    if let Some(image) = image {
        let r = time_recovery(spec, image)?;
        out.run.extra.insert("recovery_s".into(), r.seconds.into());
        out.run.extra.insert("recovery_deferred_s".into(), r.deferred_s.into());
        out.run.extra.insert("recovered_nodes".into(), r.checked.into());
    }
    Ok(out)
}

/// How many times [`time_recovery`] recovers the crashed heap, each time
/// from a fresh copy of it (recovery writes): the least time is kept, as
/// other work on the machine only ever adds time.
pub const RECOVERY_REPEATS: usize = 3;

/// Times the allocator's recovery of the crashed heap `image` of the run
/// `spec` made ([`Family::time_recovery`]) [`RECOVERY_REPEATS`] times, each
/// on its own copy, and checks every recovered heap: every node of the
/// list must be allocated and intact ([`list::check_recovered`]).
pub fn time_recovery(spec: &RunSpec, image: &Path) -> Result<TimedRecovery, RunError> {
    let WorkloadParams::List(p) = spec.workload.params() else {
        return Err(format!("{}: only the list workload is recovered after its run", spec.workload.name()).into());
    };
    let threads = spec.opts.threads;
    let mut check =
        |t: &dyn AllocThread, params: &Params, live: &[(u64, u64)]| list::check_recovered(t, params, live, p, threads);
    let mut best: Option<TimedRecovery> = None;
    for _ in 0..RECOVERY_REPEATS {
        let scratch = ScratchHeap::new("recovered")?;
        let copy = scratch.path();
        std::fs::copy(image, copy).map_err(|e| format!("cannot copy the crashed heap {}: {e}", image.display()))?;
        let r = spec
            .alloc
            .family
            .time_recovery(&spec.alloc.params, threads, copy, spec.flush, &mut check)
            .map_err(|e| format!("{}: recovery after the crash: {e}", spec.alloc.label))?;
        if best.is_none_or(|b| r.seconds < b.seconds) {
            best = Some(r);
        }
    }
    Ok(best.expect("at least one recovery"))
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
    let family = spec.alloc.family;
    let (variant, params) = family.header(&spec.alloc.params, spec.opts.threads)?;
    let (pm, collector) = Pm::traced(&heap, spec.flush, tcfg, |mut h| {
        fill_header(&mut h, (family.family(), &variant, params), spec.workload, spec.opts);
        if let Some(shown) = &spec.heap.shown {
            h.heap.path = shown.display().to_string();
        }
        make_sink(h)
    })?;
    let d = Drive { workload: spec.workload, opts: spec.opts, progress: spec.progress, crash_copy: None };
    let (driven, pm) = family.run_on_pm(&spec.alloc.params, &heap, pm, &d)?;
    let finished = collector.finish(pm)?;
    let alloc = info(spec.alloc, &driven);
    let run = driven.run?;
    heap.close()?;
    Ok((Outcome { run, alloc, flush_insn: spec.flush.name().into() }, finished))
}

fn create_heap(hs: &HeapSpec) -> Result<Heap, RunError> {
    Ok(Heap::create_with(&hs.path, hs.size, &HeapOptions { overwrite: hs.overwrite, ..HeapOptions::default() })?)
}

fn info(spec: &AllocSpec, d: &Driven) -> AllocInfo {
    AllocInfo { spec: spec.label.clone(), name: d.name.clone(), params: d.params.clone() }
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
        let all = AllocSpec::parse_all(
            &specs(&["llfree", "nvalloc-log:su=0.3", "nvalloc-gc", "pmdk"]),
            &specs(&["stripes=4", "su=0.5"]),
        )
        .unwrap();
        assert!(all[0].params().get("stripes").is_none());
        assert_eq!(all[1].params()["stripes"], 4);
        // The spec's own key=value wins over the shared override.
        assert_eq!(all[1].params()["su"], 0.3);
        assert_eq!(all[2].params()["su"], 0.5);
        assert_eq!(all[3].label(), "pmdk");
        // A shared override every allocator sets itself changes nothing: given twice.
        let e = AllocSpec::parse_all(&specs(&["llfree", "nvalloc-log:stripes=2"]), &specs(&["stripes=8"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("given twice (stripes=8 and nvalloc-log:stripes=2)"), "{e}");
        let e = AllocSpec::parse_all(&specs(&["llfree", "pmdk"]), &specs(&["stripes=4"])).unwrap_err().to_string();
        assert!(e.contains("no allocator in llfree,pmdk has a parameter 'stripes'"), "{e}");
        let e = AllocSpec::parse_all(&specs(&["nvalloc-log"]), &specs(&["stripes"])).unwrap_err().to_string();
        assert!(e.contains("key=value"), "{e}");
    }
}
