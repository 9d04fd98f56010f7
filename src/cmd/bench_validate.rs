//! `pmsim bench --validate TRACE`: `pmsim specs validate` with its default
//! flags against every specification the trace can be validated against,
//! timed (wall clock; CPU of pmsim and of its TLC processes; the largest TLC's
//! resident memory): what a user's validation costs on this machine.

use super::bench_crash::{children_usage, process_cpu_s};
use pmsim_specs::validate;
use pmsim_specs::Tlc;
use serde::Serialize;
use std::path::Path;
use std::sync::atomic::AtomicUsize;
use std::time::Instant;

/// One trace validated against one specification.
#[derive(Serialize)]
pub struct ValidateRow {
    pub trace: String,
    pub spec: String,
    pub steps: usize,
    pub windows: usize,
    /// TLC runs at once.
    pub jobs: usize,
    /// Mapping the trace and checking every window, seconds.
    pub wall_s: f64,
    /// CPU seconds of pmsim over the same span (the mapping, mostly).
    pub pmsim_cpu_s: f64,
    /// CPU seconds of the TLC processes it ran.
    pub tlc_cpu_s: f64,
    /// The largest resident set of one TLC process this command ran so far
    /// (getrusage keeps only the maximum over them), MB.
    pub tlc_max_rss_mb: f64,
    pub steps_per_s: f64,
    pub allowed: bool,
}

/// Validates `path` against each of its specifications with the defaults of
/// `pmsim specs validate`.
pub fn validate_rows(path: &Path) -> Result<Vec<ValidateRow>, Box<dyn std::error::Error>> {
    let p = path.to_string_lossy().into_owned();
    let specs = validate::specs_of(&p)?;
    if specs.is_empty() {
        return Err(
            format!("{p}: no specification validates traces of this allocator (LLFree and NVAlloc have some)").into()
        );
    }
    let root = pmsim_specs::default_dir();
    let tlc = Tlc::locate()?;
    let jobs = pmsim_specs::default_workers();
    let mut rows = Vec::new();
    for spec in specs {
        let (t0, c0, k0) = (Instant::now(), process_cpu_s(), children_usage());
        let m = validate::map(&p, Some(spec), validate::WINDOW_STEPS)?;
        let o = validate::check(&tlc, &root, &m, &[], jobs, &AtomicUsize::new(0))?;
        let wall_s = t0.elapsed().as_secs_f64();
        let k1 = children_usage();
        rows.push(ValidateRow {
            trace: p.clone(),
            spec: o.spec.clone(),
            steps: o.steps,
            windows: m.windows.len(),
            jobs: jobs.min(m.windows.len().max(1)),
            wall_s,
            pmsim_cpu_s: process_cpu_s() - c0,
            tlc_cpu_s: k1.cpu_s - k0.cpu_s,
            tlc_max_rss_mb: k1.max_rss_mb,
            steps_per_s: o.steps as f64 / wall_s,
            allowed: o.allowed,
        });
    }
    Ok(rows)
}

/// The rows as a table.
pub fn print(rows: &[ValidateRow]) {
    println!(
        "{:<32} {:<20} {:>8} {:>7} {:>7} {:>8} {:>8} {:>9} {:>10} {:>8}",
        "pmsim specs validate",
        "spec",
        "steps",
        "windows",
        "wall s",
        "pmsim s",
        "TLC s",
        "TLC MB",
        "steps/s",
        "allowed"
    );
    for r in rows {
        println!(
            "{:<32} {:<20} {:>8} {:>7} {:>7.1} {:>8.1} {:>8.1} {:>9.0} {:>10.0} {:>8}",
            r.trace,
            r.spec,
            r.steps,
            r.windows,
            r.wall_s,
            r.pmsim_cpu_s,
            r.tlc_cpu_s,
            r.tlc_max_rss_mb,
            r.steps_per_s,
            if r.allowed { "yes" } else { "no" }
        );
    }
}
