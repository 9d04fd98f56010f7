//! Trace validation (`pmsim specs validate`): a recorded run of a real
//! allocator, mapped to a specification's actions, checked by TLC as a
//! behaviour of that specification.
//!
//! Each specification that can be validated has a *trace specification*
//! beside it (`specs/<spec>/<Module>Trace.tla`, built on
//! `shared/TraceValidation.tla`) and a *mapping* here, one module per
//! specification, which turns the trace's events (operations, stores to the
//! words the allocator announced as regions or markers, flushes, fences)
//! into the spec's actions. The mapped events become the definition `Trace`
//! of a generated module (`TraceData`) the trace specification extends; TLC
//! then explores only the states consistent with the trace and either
//! reaches its end (the success: the deepest index printed is its length)
//! or stops short, and the runner reports the first event no state at the
//! deepest index reached could take, with the action(s) the specification
//! expected there.

pub mod bklog;
mod consts;
pub mod llfree;
pub mod morphing;

pub use consts::parse_consts;

use crate::tlc::{self, Tlc, Verdict};
use crate::SHARED_DIR;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// One trace event as the specification sees it.
#[derive(Clone, Debug, Serialize)]
pub struct Step {
    /// The event's index in the trace (global order).
    pub event: u64,
    /// The thread that issued it.
    pub tid: u32,
    /// The spec action it must be, with its parameters, for people.
    pub action: String,
    /// The same as a TLA+ record (`[a |-> "SetBit", p |-> 1, ...]`).
    #[serde(skip)]
    pub tla: String,
}

/// A trace mapped to one specification.
#[derive(Clone, Debug)]
pub struct Mapped {
    /// The spec's name (as in models.toml) and folder.
    pub spec: String,
    pub dir: String,
    /// The trace specification module (`<Module>Trace`).
    pub module: String,
    /// Its constants, `NAME = value` in TLC's config syntax.
    pub constants: Vec<(String, String)>,
    /// The spec's invariants checked along the trace.
    pub invariants: Vec<String>,
    pub steps: Vec<Step>,
    /// The parts TLC checks one by one (every step is in one at least; none
    /// when the trace has no step).
    pub windows: Vec<Window>,
}

/// A part of a mapped trace TLC checks as a behaviour of its own, from the
/// state the trace gives at its start (`start`: further definitions of the
/// generated module, which the trace specification's initial state reads).
#[derive(Clone, Debug)]
pub struct Window {
    /// What it covers, for people.
    pub label: String,
    /// Its steps: indices into [`Mapped::steps`], ascending.
    pub steps: Vec<usize>,
    /// Its steps as TLA+ records, in the window's own numbering.
    pub tla: Vec<String>,
    pub constants: Vec<(String, String)>,
    pub start: String,
}

/// Steps per window by default: long enough that TLC's start (about 2 s of
/// JVM and parsing) is small beside the check, short enough that a window
/// of a full LLFree tree stays well inside the memory TLC is given.
pub const WINDOW_STEPS: usize = 20_000;

/// Cuts the steps of one part of a trace (an LLFree tree, an NVAlloc slab)
/// into windows. A window opens at the part's next step with the state the
/// steps before it left the part in (its `start`), and closes at the first
/// point after `limit` steps where the part is *quiet*: nothing of it in
/// flight, so that state is one the trace specification can start from.
/// Each mapping says what quiet means for its spec and why its parts are
/// independent; the windows sort by their first step ([`sort_windows`]).
pub(super) struct Cutter {
    limit: usize,
    cur: Option<Window>,
}

impl Cutter {
    pub(super) fn new(limit: usize) -> Cutter {
        Cutter { limit: limit.max(1), cur: None }
    }

    /// The window being filled, if it has its `limit` steps and the part
    /// is `quiet` here (the caller gives it its constants and label).
    pub(super) fn cut(&mut self, quiet: bool) -> Option<Window> {
        if quiet && self.cur.as_ref().is_some_and(|w| w.steps.len() >= self.limit) {
            self.cur.take()
        } else {
            None
        }
    }

    /// The window being filled, whatever its length (the part ends here).
    pub(super) fn take(&mut self) -> Option<Window> {
        self.cur.take()
    }

    /// Adds step `i` of [`Mapped::steps`] (`tla` in the window's numbering)
    /// to the window being filled, opening one from the state `start`
    /// gives (further definitions of the generated module) if none is open.
    pub(super) fn push(&mut self, i: usize, tla: String, start: impl FnOnce() -> String) {
        let w = self.cur.get_or_insert_with(|| Window {
            label: String::new(),
            steps: Vec::new(),
            tla: Vec::new(),
            constants: Vec::new(),
            start: start(),
        });
        w.steps.push(i);
        w.tla.push(tla);
    }

    /// Steps in the window being filled.
    pub(super) fn len(&self) -> usize {
        self.cur.as_ref().map_or(0, |w| w.steps.len())
    }
}

/// Windows in the order of their first steps (the order TLC takes them, so
/// a failure early in the trace skips the windows after it).
pub(super) fn sort_windows(windows: &mut [Window]) {
    windows.sort_by_key(|w| w.steps[0]);
}

/// A set of numbers as TLA+, runs written as ranges (`(0..127) \cup {130}`):
/// a window's start names whole bit fields and bitmaps.
pub(super) fn tla_set(sorted: impl IntoIterator<Item = u64>) -> String {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for x in sorted {
        match runs.last_mut() {
            Some((_, hi)) if *hi + 1 == x => *hi = x,
            _ => runs.push((x, x)),
        }
    }
    if runs.is_empty() {
        return "{}".into();
    }
    let parts: Vec<String> =
        runs.iter().map(|&(lo, hi)| if lo == hi { format!("{{{lo}}}") } else { format!("({lo}..{hi})") }).collect();
    parts.join(" \\cup ")
}

/// What TLC said about one mapped trace.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    pub spec: String,
    /// Every step matched.
    pub allowed: bool,
    pub steps: usize,
    /// Steps matched (the deepest index reached).
    pub matched: usize,
    /// The first step not matched, and what the spec expected instead.
    pub failed_at: Option<Step>,
    pub expected: Vec<String>,
    /// A spec invariant violated along the trace (a finding of its own).
    pub violated: Option<String>,
    pub states: Option<u64>,
    pub distinct: Option<u64>,
    /// TLC's time, summed over the windows.
    pub seconds: f64,
    /// The windows checked, and those skipped because they start after a
    /// step an earlier one found outside the spec.
    pub windows: usize,
    pub skipped: usize,
}

/// The specifications a trace can be validated against, by folder name.
pub const SPECS: [&str; 3] = ["llfree-single-cas", "slab-morphing", "bookkeeping-log-gc"];

/// Hands every record `rd` reads to `event` until one fails; the error
/// names the trace at `path`.
fn feed<R: std::io::Read>(
    mut rd: pmsim_traces::TraceReader<R>,
    path: &str,
    mut event: impl FnMut(&pmsim_traces::Record<'_>) -> Result<(), String>,
) -> Result<(), String> {
    let mut err = None;
    rd.for_each(|r| {
        if err.is_none() {
            err = event(r).err();
        }
    })
    .map_err(|e| e.to_string())?;
    err.map_or(Ok(()), |e| Err(format!("{path}: {e}")))
}

/// The modelled lines `stores` (offset, length) wrote, as `line` names them,
/// each with the cache lines its stores hit (it counts as flushed when all
/// of those were).
fn lines_written<L: Ord>(
    stores: &[(u64, u64)],
    line: impl Fn(u64) -> Option<L>,
) -> std::collections::BTreeMap<L, std::collections::BTreeSet<u64>> {
    let mut written: std::collections::BTreeMap<L, std::collections::BTreeSet<u64>> = Default::default();
    for &(o, n) in stores {
        for x in [o, o + n - 1] {
            if let Some(l) = line(x) {
                written.entry(l).or_default().insert(x & !63);
            }
        }
    }
    written
}

/// The two steps of stores made durable by one fence: `Write` (`what` for
/// people, `w` the written words and `f` the flushed lines as TLA+) and `Fence`.
fn push_write_fence(steps: &mut Vec<Step>, event: u64, tid: u32, what: &[String], w: &[String], f: &[String]) {
    steps.push(Step {
        event,
        tid,
        action: format!("Write({})", what.join("; ")),
        tla: format!("[a |-> \"Write\", p |-> {tid}, w |-> {}, f |-> {{{}}}]", w.join(" @@ "), f.join(", ")),
    });
    steps.push(Step { event, tid, action: "Fence".into(), tla: format!("[a |-> \"Fence\", p |-> {tid}]") });
}

/// Maps the trace at `path` to the specification `spec` (a folder of
/// [`SPECS`]), or by default to the one its allocator has: LLFree's, and for
/// NVAlloc slab morphing if the trace morphs a slab, else the bookkeeping log.
///
/// Traces are cut into windows of about `window` steps: of one LLFree tree
/// each, of one NVAlloc slab each, or of the bookkeeping log between
/// appends and GCs.
/// Every specification a trace at `path` can be validated against: LLFree's
/// single CAS for an LLFree trace; for NVAlloc the bookkeeping log's GC, and
/// slab morphing first when a slab of the trace morphs.
pub fn specs_of(path: &str) -> Result<Vec<&'static str>, String> {
    let rd = pmsim_traces::TraceReader::open(path).map_err(|e| e.to_string())?;
    let name = rd.header().allocator.name.clone();
    drop(rd);
    Ok(match name.as_str() {
        "llfree" => vec!["llfree-single-cas"],
        n if morphing::is_nvalloc(n) && morphing::morphs(path)? => vec!["slab-morphing", "bookkeeping-log-gc"],
        n if morphing::is_nvalloc(n) => vec!["bookkeeping-log-gc"],
        _ => vec![],
    })
}

pub fn map(path: &str, spec: Option<&str>, window: usize) -> Result<Mapped, String> {
    let rd = pmsim_traces::TraceReader::open(path).map_err(|e| e.to_string())?;
    let name = rd.header().allocator.name.clone();
    drop(rd);
    let nvalloc = morphing::is_nvalloc(&name);
    let spec = match spec {
        Some(s) => s,
        None => match specs_of(path)?.first() {
            Some(s) => s,
            None => {
                return Err(format!(
                "{path}: a trace of {name:?}; validation maps LLFree traces (llfree) and NVAlloc traces (nvalloc-log, ...)"
            ))
            }
        },
    };
    let m = match spec {
        "llfree-single-cas" => llfree::map(path, window)?,
        "slab-morphing" if nvalloc => morphing::map(path, window, false)?,
        "bookkeeping-log-gc" if nvalloc => bklog::map(path, window)?,
        "slab-morphing" | "bookkeeping-log-gc" => {
            return Err(format!("{path}: a trace of {name:?}; {spec} is a specification of NVAlloc"))
        }
        other => {
            return Err(format!("no specification {other:?} to validate against (there are {})", SPECS.join(", ")))
        }
    };
    Ok(m)
}

/// The module the mapped trace becomes (`Trace == << ... >>`), which every
/// trace specification extends.
pub const TRACE_MODULE: &str = "TraceData";

/// Renders a TLA+ string literal.
pub fn tla_str(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The heap all TLC runs at once may take together (`-Xmx` of each is its
/// share): a window's states are few (TLC keeps only those consistent with
/// the trace) but each holds whole bit fields; a default LLFree window peaks
/// at about 750 MB resident, and the JVMs' own overhead stays inside 4 GB.
/// A trace of one window has it all.
const TLC_HEAP_TOTAL_MB: usize = 2400;
/// The least heap a run is given, however many run at once.
const TLC_HEAP_MIN_MB: usize = 256;

/// What TLC said about one window.
#[derive(Clone, Debug)]
struct WindowOutcome {
    /// The global index of the first step the window could not take (or
    /// after which an invariant failed), if any.
    failed: Option<usize>,
    expected: Vec<String>,
    violated: Option<String>,
    states: Option<u64>,
    distinct: Option<u64>,
    seconds: f64,
}

/// What [`check`] needs before TLC starts, checked at once (a command
/// calls it before it prints its plan): the specification of `m` readable
/// under `root`, and every constant of `overrides` one it has, of the kind
/// it has, a `Variant` one the specification names.
pub fn preflight(root: &Path, m: &Mapped, overrides: &[(String, String)]) -> Result<(), String> {
    let spec_path = root.join(&m.dir).join(format!("{}.tla", m.spec));
    let spec_text = pmsim_traces::input::read_text(&spec_path, "specification")?;
    for (k, v) in overrides {
        match m.constants.iter().find(|(n, _)| n == k) {
            Some(c) => consts::same_kind(k, &c.1, v)?,
            None => {
                return Err(format!("--const {k}: {} has no constant {k} (it has {})", m.spec, names(&m.constants)))
            }
        }
    }
    // A variant the specification does not know would end in a TLC exception.
    if let Some((_, v)) = overrides.iter().find(|(k, _)| k == "Variant") {
        if !spec_text.contains(v.as_str()) {
            return Err(format!("--const Variant={v}: {} names no such variant", m.spec));
        }
    }
    Ok(())
}

/// Runs TLC on every window of `m` with the specs of `root`, `jobs` at a
/// time (one TLC worker each); `overrides` replace constants
/// (`FlushEach="op"`, to check a variant of the spec against the same
/// trace). `done` counts the steps of the windows finished, for a progress bar. Windows
/// that start after a step an earlier one found outside the spec are
/// skipped: the first such step in the trace's order is the answer.
pub fn check(
    tlc: &Tlc,
    root: &Path,
    m: &Mapped,
    overrides: &[(String, String)],
    jobs: usize,
    done: &AtomicUsize,
) -> Result<Outcome, String> {
    preflight(root, m, overrides)?;
    let jobs = jobs.clamp(1, m.windows.len().max(1));
    let heap_mb = (TLC_HEAP_TOTAL_MB / jobs).max(TLC_HEAP_MIN_MB);
    let next = AtomicUsize::new(0);
    let first_fail = AtomicUsize::new(usize::MAX);
    let results: Mutex<Vec<Option<WindowOutcome>>> = Mutex::new(vec![None; m.windows.len()]);
    let error: Mutex<Option<String>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::SeqCst);
                let Some(w) = m.windows.get(k) else { break };
                if error.lock().expect("no panic").is_some() || pmsim_traces::stop::stopping() {
                    break;
                }
                if w.steps[0] > first_fail.load(Ordering::SeqCst) {
                    done.fetch_add(w.steps.len(), Ordering::SeqCst);
                } else {
                    match check_window(tlc, root, m, w, overrides, heap_mb, done) {
                        Ok(o) => {
                            if let Some(g) = o.failed {
                                first_fail.fetch_min(g, Ordering::SeqCst);
                            }
                            results.lock().expect("no panic")[k] = Some(o);
                        }
                        Err(e) => {
                            error.lock().expect("no panic").get_or_insert(e);
                            break;
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = error.into_inner().expect("no panic") {
        return Err(e);
    }
    if pmsim_traces::stop::stopping() {
        return Err("interrupted".into());
    }
    let results = results.into_inner().expect("no panic");
    let ran: Vec<&WindowOutcome> = results.iter().flatten().collect();
    let sum = |f: fn(&WindowOutcome) -> Option<u64>| ran.iter().map(|o| f(o)).sum::<Option<u64>>();
    let mut o = Outcome {
        spec: m.spec.clone(),
        allowed: false,
        steps: m.steps.len(),
        matched: m.steps.len(),
        failed_at: None,
        expected: Vec::new(),
        violated: None,
        states: sum(|o| o.states),
        distinct: sum(|o| o.distinct),
        seconds: ran.iter().map(|o| o.seconds).sum(),
        windows: ran.len(),
        skipped: m.windows.len() - ran.len(),
    };
    match ran.iter().filter(|w| w.failed.is_some()).min_by_key(|w| w.failed) {
        None => o.allowed = true,
        Some(w) => {
            let g = w.failed.expect("a failure");
            o.matched = g;
            o.violated = w.violated.clone();
            if w.violated.is_none() {
                o.failed_at = m.steps.get(g).cloned();
                o.expected = w.expected.clone();
            }
        }
    }
    Ok(o)
}

/// Runs TLC on one window, adding its steps to `done` as TLC reaches them
/// (all of them by its end).
fn check_window(
    tlc: &Tlc,
    root: &Path,
    m: &Mapped,
    w: &Window,
    overrides: &[(String, String)],
    heap_mb: usize,
    done: &AtomicUsize,
) -> Result<WindowOutcome, String> {
    let mut consts = w.constants.clone();
    for (k, v) in overrides {
        if let Some(c) = consts.iter_mut().find(|(n, _)| n == k) {
            c.1 = v.clone()
        }
    }
    let work = tempfile::Builder::new()
        .prefix("validate-")
        .tempdir_in(crate::scratch_dir()?)
        .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    for dir in [root.join(&m.dir), root.join(SHARED_DIR)] {
        crate::copy_modules(&dir, work.path())?;
    }
    // The trace as a definition of its own module, which the trace
    // specification extends: TLC evaluates it once. (As a constant
    // substituted in the configuration, `Trace <- TraceSeq`, it is evaluated
    // again at every use, which made a trace of 1,600 steps take minutes.)
    let mut tla = format!("---- MODULE {TRACE_MODULE} ----\nEXTENDS Naturals, TLC\nTrace == <<\n");
    for (k, s) in w.tla.iter().enumerate() {
        let sep = if k + 1 < w.tla.len() { "," } else { "" };
        let _ = writeln!(tla, "  {s}{sep}");
    }
    tla.push_str(">>\n");
    tla.push_str(&w.start);
    tla.push_str("====\n");
    let data = format!("{TRACE_MODULE}.tla");
    std::fs::write(work.path().join(&data), tla).map_err(|e| format!("{data}: {e}"))?;
    let mut cfg = String::from("INIT TraceInit\nNEXT TraceNext\nCONSTANTS\n");
    for (k, v) in &consts {
        let _ = writeln!(cfg, "    {k} = {v}");
    }
    let _ = writeln!(cfg, "INVARIANTS");
    for inv in &m.invariants {
        let _ = writeln!(cfg, "    {inv}");
    }
    std::fs::write(work.path().join("MC.cfg"), cfg).map_err(|e| format!("MC.cfg: {e}"))?;
    let start = Instant::now();
    // One worker: the deepest index is kept in a TLC register, which is per worker.
    let job = crate::tlc::Job {
        dir: work.path(),
        module: &m.module,
        cfg: "MC.cfg",
        workers: 1,
        options: &["-deadlock"],
        short: false,
        heap_mb: Some(heap_mb),
    };
    // Each new deepest index is a step checked: the progress bar moves within a window.
    let mut counted = 0;
    let out = tlc.run_watched(&job, &mut |line| {
        if let Some((n, _)) = reached_line(line) {
            if n > counted && n <= w.steps.len() {
                done.fetch_add(n - counted, Ordering::Relaxed);
                counted = n;
            }
        }
    });
    done.fetch_add(w.steps.len() - counted, Ordering::Relaxed);
    let out = out?;
    let seconds = start.elapsed().as_secs_f64();
    if std::env::var_os("PMSIM_TLC_OUTPUT").is_some() {
        eprintln!("{out}");
    }
    let report = tlc::parse(&out);
    let (deepest, expected) = reached(&out);
    let mut o = WindowOutcome {
        failed: None,
        expected: Vec::new(),
        violated: None,
        states: report.states,
        distinct: report.distinct,
        seconds,
    };
    match report.verdict {
        Verdict::Violated { invariant, .. } => {
            o.violated = Some(invariant);
            // The state that violates it is the one after the deepest step taken.
            o.failed = Some(deepest.checked_sub(1).map_or(w.steps[0], |d| w.steps[d] + 1));
        }
        Verdict::NoError if deepest == w.steps.len() => {}
        Verdict::NoError => {
            o.failed = Some(w.steps[deepest]);
            o.expected = expected;
        }
        Verdict::Deadlock => return Err("TLC reported a deadlock although deadlock checking is off".into()),
        Verdict::Failed(msg) => {
            let hint = if msg.contains("out of memory") {
                format!(" [TLC had {heap_mb} MB of heap: fewer --jobs give each run more, and a smaller --window (LLFree) needs less]")
            } else {
                String::new()
            };
            return Err(format!("TLC failed on the trace specification {} ({}): {msg}{hint}", m.module, w.label));
        }
    }
    Ok(o)
}

fn names(consts: &[(String, String)]) -> String {
    consts.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
}

/// The index and expectation of a `pmsim-reached` line.
fn reached_line(line: &str) -> Option<(usize, String)> {
    let rest = line.trim().strip_prefix("<<\"pmsim-reached\", ")?;
    let (n, what) = rest.split_once(", ")?;
    Some((n.parse().ok()?, what.trim_end_matches(">>").trim().trim_matches('"').to_string()))
}

/// The deepest index the `pmsim-reached` lines name, and the distinct
/// expectations printed for it.
fn reached(out: &str) -> (usize, Vec<String>) {
    let mut best = 0;
    let mut expected: Vec<String> = Vec::new();
    for line in out.lines() {
        let Some((n, what)) = reached_line(line) else { continue };
        if n > best {
            best = n;
            expected.clear();
        }
        if n == best && !expected.contains(&what) {
            expected.push(what);
        }
    }
    (best, expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deepest_index_and_its_expectations_are_read() {
        let out = "<<\"pmsim-reached\", 0, \"AllocBegin or FreeBegin\">>\n<<\"pmsim-reached\", 2, \"Commit\">>\n\
                   <<\"pmsim-reached\", 2, \"Return\">>\n<<\"pmsim-reached\", 2, \"Commit\">>\n<<\"pmsim-reached\", 1, \"x\">>\n";
        assert_eq!(reached(out), (2, vec!["Commit".to_string(), "Return".to_string()]));
        assert_eq!(reached("nothing"), (0, vec![]));
    }
}
