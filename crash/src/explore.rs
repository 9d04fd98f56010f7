//! The explorer: selects the crash points, plans which of them to explore
//! (some of every code path, [`crate::paths`]), spreads those over `jobs`
//! workers in chunks taken in trace order, and merges what they found into
//! one [`Summary`] in point order. The violation reported is the first one
//! (lowest point, then image), and the summary counts the points up to it
//! only, so the output does not depend on how the workers were scheduled.

use crate::check::Context;
use crate::error::CrashError;
use crate::expect;
use crate::layout::Layout;
use crate::load::{CrashTrace, Ev};
use crate::options::Options;
use crate::paths::{self, Plan};
use crate::points::select_points;
use crate::report::{PathCoverage, Progress, Summary};
use crate::target::CrashTarget;
use crate::worker::{PointResult, Shared, Worker};
use pmsim_model::family::ImageFormat;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::Instant;

/// Explores the crash points `opts` selects; stops at the first violation
/// (the one with the lowest point, then image).
pub fn explore(
    tr: &CrashTrace,
    target: &dyn CrashTarget,
    opts: &Options,
    progress: &Progress,
) -> Result<Summary, CrashError> {
    let start = Instant::now();
    let outside = target.outside_markers();
    let selected = select_points(tr, opts, outside.is_some());
    if selected.is_empty() {
        return Err(CrashError(format!("{}: no crash point matches the selection", tr.path.display())));
    }
    let layout = Layout::of(tr, target)?;
    if let Some(prefix) = outside {
        let labels: Vec<&str> = tr.events.iter().filter_map(|e| tr.marker_with(e, prefix)).collect();
        target.load_outside(&tr.image, &labels).map_err(|e| CrashError(format!("{}: {e}", tr.path.display())))?;
    }
    if opts.recovery_crashes > 0 && layout.format == ImageFormat::Own {
        return Err(CrashError(format!(
            "{}: {} recovers inside its own library, where pmsim cannot crash it (drop --recovery-crashes)",
            tr.path.display(),
            target.name()
        )));
    }
    let plan = paths::plan(tr, opts, &selected);
    progress.selected.store(plan.selected, Ordering::Relaxed);
    progress.paths.store(plan.paths.len() as u64, Ordering::Relaxed);
    progress.planned.store(plan.explore.len() as u64, Ordering::Release);
    let ops = expect::operations(tr, &layout);
    let jobs = if opts.jobs == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { opts.jobs };
    let cx = Context { target, layout: &layout, ops: &ops, opts };
    let results = run_workers(tr, cx, &plan, jobs, progress)?;
    let mut s = merge(results, &plan);
    s.allocator = target.name();
    s.mode = if opts.all_points || opts.point.is_some() { "all points" } else { "paths" }.into();
    s.per_path = opts.per_path.max(1);
    s.jobs = jobs as u64;
    s.fences =
        tr.events.iter().filter(|e| matches!(e, Ev::Fence { .. } | Ev::Flush { ordered: true, .. })).count() as u64;
    s.end_point = outside.is_some();
    s.seconds = start.elapsed().as_secs_f64();
    s.images_per_second = s.images as f64 / s.seconds.max(1e-9);
    Ok(s)
}

/// Explores the planned points on `jobs` workers; the result of every point
/// explored, in no particular order.
fn run_workers(
    tr: &CrashTrace,
    cx: Context,
    plan: &Plan,
    jobs: usize,
    progress: &Progress,
) -> Result<Vec<PointResult>, CrashError> {
    // Chunks small enough to balance the workers (a chunk's points can
    // cost very different times) and to keep the progress moving.
    let per = plan.explore.len().div_ceil(jobs * 32).max(1);
    let sh = Shared {
        tr,
        cx,
        chunks: plan.explore.chunks(per).collect(),
        next_chunk: AtomicUsize::new(0),
        progress,
        stop: AtomicU64::new(u64::MAX),
    };
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let workers = jobs.min(sh.chunks.len());
    // A worker's thread outlives its work until every worker is done: a
    // child process it started (PMDK's recovery processes, which any worker
    // may reuse) dies with the thread that started it.
    let done = Barrier::new(workers);
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|no| {
                let (sh, done) = (&sh, &done);
                s.spawn(move || {
                    let r = catch_unwind(AssertUnwindSafe(|| Worker::new(sh, no)?.run()))
                        .unwrap_or_else(|_| Err(CrashError("a crash worker panicked".into())));
                    done.wait();
                    r
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("caught in the thread")).collect::<Vec<_>>()
    });
    std::panic::set_hook(hook);
    let mut out = Vec::new();
    for r in results {
        out.extend(r?);
    }
    Ok(out)
}

/// The workers' results as one summary: in point order, up to the first
/// violation; with the coverage of every path.
fn merge(mut results: Vec<PointResult>, plan: &Plan) -> Summary {
    results.sort_by_key(|r| r.sum.coverage[0].point);
    let mut s = Summary::empty();
    let mut paths: Vec<PathCoverage> = plan
        .paths
        .iter()
        .enumerate()
        .map(|(i, info)| PathCoverage {
            path: i as u32,
            info: info.clone(),
            explored: 0,
            images: 0,
            distinct: 0,
            complete: true,
        })
        .collect();
    for r in results {
        let c = &r.sum.coverage[0];
        let p = &mut paths[c.path as usize];
        p.explored += 1;
        p.images += c.images;
        p.distinct += c.distinct;
        p.complete &= c.complete;
        s.add(r.sum);
        if r.violation.is_some() {
            s.violation = r.violation;
            break;
        }
    }
    let covered: Vec<bool> = paths.iter().map(|p| p.explored > 0).collect();
    s.selected_points = plan.selected;
    s.paths = paths.len() as u64;
    s.paths_covered = covered.iter().filter(|&&c| c).count() as u64;
    let in_covered: u64 = paths.iter().filter(|p| p.explored > 0).map(|p| p.info.points).sum();
    s.covered_by_path = in_covered - s.points;
    for p in &mut paths {
        p.complete &= p.explored > 0;
    }
    s.path_coverage = paths;
    s
}
