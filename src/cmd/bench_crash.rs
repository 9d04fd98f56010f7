//! `pmsim bench --crash TRACE`: the crash explorer with its default flags on
//! a recorded trace, timed (wall clock and the process's CPU time, every
//! worker included): what a user's `pmsim crash TRACE` costs on this machine.

use pmsim_crash::{explore, target_for, CrashTrace, Options, Progress};
use pmsim_model::workloads::cpu::rusage;
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

/// One explored trace.
#[derive(Serialize)]
pub struct CrashRow {
    pub trace: String,
    pub allocator: String,
    pub points: u64,
    pub paths: u64,
    pub paths_covered: u64,
    pub explored: u64,
    pub images: u64,
    /// Loading the trace and exploring it, seconds.
    pub wall_s: f64,
    /// CPU seconds of the whole process over the same span (every worker).
    pub cpu_s: f64,
    pub images_per_s: f64,
    pub violation: bool,
}

/// User plus system seconds of a usage.
fn cpu_of(u: &libc::rusage) -> f64 {
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(u.ru_utime) + s(u.ru_stime)
}

/// CPU seconds of this process so far, every thread.
pub fn process_cpu_s() -> f64 {
    rusage(libc::RUSAGE_SELF).map_or(0.0, |u| cpu_of(&u))
}

/// The child processes waited for so far (TLC's JVMs, recovery processes).
pub struct Children {
    /// Their CPU seconds, all of them together.
    pub cpu_s: f64,
    /// The largest resident set of one of them, MB.
    pub max_rss_mb: f64,
}

pub fn children_usage() -> Children {
    rusage(libc::RUSAGE_CHILDREN).map_or(Children { cpu_s: 0.0, max_rss_mb: 0.0 }, |u| Children {
        cpu_s: cpu_of(&u),
        max_rss_mb: u.ru_maxrss as f64 / 1024.0,
    })
}

/// Explores `path` once with the default options.
pub fn crash_row(path: &Path) -> Result<CrashRow, Box<dyn std::error::Error>> {
    let (t0, c0) = (Instant::now(), process_cpu_s());
    let tr = CrashTrace::load(path, None)?;
    let target = target_for(&tr.header)?;
    let s = explore(&tr, target.as_ref(), &Options::default(), &Progress::default())?;
    let wall_s = t0.elapsed().as_secs_f64();
    Ok(CrashRow {
        trace: path.display().to_string(),
        allocator: s.allocator.clone(),
        points: s.selected_points,
        paths: s.paths,
        paths_covered: s.paths_covered,
        explored: s.points,
        images: s.images,
        wall_s,
        cpu_s: process_cpu_s() - c0,
        images_per_s: s.images as f64 / wall_s,
        violation: s.violation.is_some(),
    })
}

/// The rows as a table.
pub fn print(rows: &[CrashRow]) {
    println!(
        "{:<40} {:>9} {:>6} {:>9} {:>8} {:>9} {:>8} {:>9} {:>9}",
        "pmsim crash (default flags)",
        "points",
        "paths",
        "explored",
        "images",
        "wall s",
        "CPU s",
        "images/s",
        "violation"
    );
    for r in rows {
        println!(
            "{:<40} {:>9} {:>6} {:>9} {:>8} {:>9.1} {:>8.1} {:>9.0} {:>9}",
            r.trace,
            r.points,
            format!("{}/{}", r.paths_covered, r.paths),
            r.explored,
            r.images,
            r.wall_s,
            r.cpu_s,
            r.images_per_s,
            if r.violation { "yes" } else { "no" }
        );
    }
}
