//! The explorer: selects the crash points, spreads them in chunks over the
//! workers (each chunk replays the trace on its own durable image) and
//! merges what they found into one [`Summary`], whose violation is the
//! first one (lowest point, then image).

use crate::check::Context;
use crate::error::CrashError;
use crate::expect;
use crate::layout::Layout;
use crate::load::{CrashTrace, Ev};
use crate::options::Options;
use crate::points::select_points;
use crate::report::{Progress, Summary, Violation};
use crate::target::CrashTarget;
use crate::worker::Worker;
use pmsim_model::family::ImageFormat;
use rayon::prelude::*;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
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
    let points = select_points(tr, opts, outside.is_some());
    if points.is_empty() {
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
    let ops = expect::operations(tr, &layout);
    let threads = rayon::current_num_threads().max(1);
    let nchunks = points.len().min(threads * 4);
    let per = points.len().div_ceil(nchunks);
    let stop = AtomicU64::new(u64::MAX);
    let found: Mutex<Option<Violation>> = Mutex::new(None);
    let totals: Mutex<Summary> = Mutex::new(Summary::empty());
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let cx = Context { target, layout: &layout, ops: &ops, opts };
    let result = points.par_chunks(per).enumerate().try_for_each(|(c, chunk)| {
        let w = Worker { tr, cx, progress, stop: &stop };
        let (sum, v) = w.run(c, chunk)?;
        totals.lock().unwrap().add(sum);
        if let Some(v) = v {
            let mut f = found.lock().unwrap();
            if f.as_ref().is_none_or(|o| (v.point, v.image) < (o.point, o.image)) {
                *f = Some(v);
            }
        }
        Ok::<(), CrashError>(())
    });
    std::panic::set_hook(hook);
    result?;
    let mut s = totals.into_inner().unwrap();
    s.coverage.sort_by_key(|c| c.point);
    s.allocator = target.name();
    s.fences =
        tr.events.iter().filter(|e| matches!(e, Ev::Fence { .. } | Ev::Flush { ordered: true, .. })).count() as u64;
    s.end_point = outside.is_some();
    s.violation = found.into_inner().unwrap();
    s.seconds = start.elapsed().as_secs_f64();
    s.images_per_second = s.images as f64 / s.seconds.max(1e-9);
    Ok(s)
}
