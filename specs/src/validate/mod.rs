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
    /// Wall time of the TLC run.
    pub seconds: f64,
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
pub fn map(path: &str, spec: Option<&str>) -> Result<Mapped, String> {
    let rd = pmsim_traces::TraceReader::open(path).map_err(|e| e.to_string())?;
    let name = rd.header().allocator.name.clone();
    drop(rd);
    let nvalloc = morphing::is_nvalloc(&name);
    let spec = match spec {
        Some(s) => s,
        None if name == "llfree" => "llfree-single-cas",
        None if nvalloc && morphing::morphs(path)? => "slab-morphing",
        None if nvalloc => "bookkeeping-log-gc",
        None => {
            return Err(format!(
            "{path}: a trace of {name:?}; validation maps LLFree traces (llfree) and NVAlloc traces (nvalloc-log, ...)"
        ))
        }
    };
    match spec {
        "llfree-single-cas" => llfree::map(path),
        "slab-morphing" if nvalloc => morphing::map(path),
        "bookkeeping-log-gc" if nvalloc => bklog::map(path),
        "slab-morphing" | "bookkeeping-log-gc" => {
            Err(format!("{path}: a trace of {name:?}; {spec} is a specification of NVAlloc"))
        }
        other => Err(format!("no specification {other:?} to validate against (there are {})", SPECS.join(", "))),
    }
}

/// The module the mapped trace becomes (`Trace == << ... >>`), which every
/// trace specification extends.
pub const TRACE_MODULE: &str = "TraceData";

/// Renders a TLA+ string literal.
pub fn tla_str(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Runs TLC on `m` with the specs of `root`; `overrides` replace constants
/// (`FlushEach="op"`, to check a variant of the spec against the same trace).
pub fn check(tlc: &Tlc, root: &Path, m: &Mapped, overrides: &[(String, String)]) -> Result<Outcome, String> {
    let mut consts = m.constants.clone();
    for (k, v) in overrides {
        match consts.iter_mut().find(|(n, _)| n == k) {
            Some(c) => {
                consts::same_kind(k, &c.1, v)?;
                c.1 = v.clone()
            }
            None => return Err(format!("--const {k}: {} has no constant {k} (it has {})", m.spec, names(&consts))),
        }
    }
    // A variant the specification does not know would end in a TLC exception.
    if let Some((_, v)) = overrides.iter().find(|(k, _)| k == "Variant") {
        let spec_text = std::fs::read_to_string(root.join(&m.dir).join(format!("{}.tla", m.spec))).unwrap_or_default();
        if !spec_text.contains(v.as_str()) {
            return Err(format!("--const Variant={v}: {} names no such variant", m.spec));
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
    let mut tla = format!("---- MODULE {TRACE_MODULE} ----\nEXTENDS TLC\nTrace == <<\n");
    for (k, s) in m.steps.iter().enumerate() {
        let sep = if k + 1 < m.steps.len() { "," } else { "" };
        let _ = writeln!(tla, "  {}{sep}", s.tla);
    }
    tla.push_str(">>\n====\n");
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
    let out = tlc.run(&crate::tlc::Job {
        dir: work.path(),
        module: &m.module,
        cfg: "MC.cfg",
        workers: 1,
        options: &["-deadlock"],
        short: false,
    })?;
    let seconds = start.elapsed().as_secs_f64();
    if std::env::var_os("PMSIM_TLC_OUTPUT").is_some() {
        eprintln!("{out}");
    }
    let report = tlc::parse(&out);
    let (deepest, expected) = reached(&out);
    let mut o = Outcome {
        spec: m.spec.clone(),
        allowed: false,
        steps: m.steps.len(),
        matched: deepest,
        failed_at: None,
        expected: Vec::new(),
        violated: None,
        states: report.states,
        distinct: report.distinct,
        seconds,
    };
    match report.verdict {
        Verdict::Violated { invariant, .. } => o.violated = Some(invariant),
        Verdict::NoError if deepest == m.steps.len() => o.allowed = true,
        Verdict::NoError => {
            o.failed_at = m.steps.get(deepest).cloned();
            o.expected = expected;
        }
        Verdict::Deadlock => return Err("TLC reported a deadlock although deadlock checking is off".into()),
        Verdict::Failed(msg) => return Err(format!("TLC failed on the trace specification {}: {msg}", m.module)),
    }
    Ok(o)
}

fn names(consts: &[(String, String)]) -> String {
    consts.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
}

/// The deepest index the `pmsim-reached` lines name, and the distinct
/// expectations printed for it.
fn reached(out: &str) -> (usize, Vec<String>) {
    let mut best = 0;
    let mut expected: Vec<String> = Vec::new();
    for line in out.lines() {
        let Some(rest) = line.trim().strip_prefix("<<\"pmsim-reached\", ") else { continue };
        let Some((n, what)) = rest.split_once(", ") else { continue };
        let Ok(n) = n.parse::<usize>() else { continue };
        let what = what.trim_end_matches(">>").trim().trim_matches('"').to_string();
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
