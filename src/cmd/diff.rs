//! `pmsim diff A B`: the figures of two runs side by side (traces replayed
//! now, or reports saved by `pmsim sim --json`), or of two sweep directories
//! point by point, and `--fail-if` thresholds that make the exit status 1
//! when the candidate B regresses from the baseline A, for CI.

use super::sim::{replay, ModelArgs};
use super::CmdResult;
use clap::Args;
use pmsim_analyses::diff::{self as sweep_diff, SweepComparison};
use pmsim_sim::diff::{cell, write_text, Comparison, Threshold};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

#[derive(Args)]
#[command(after_help = "Examples:\n  \
pmsim diff base.pmt nvalloc.pmt\n  \
pmsim diff before.json after.pmt --fail-if 'flushes_per_op>+2%' --fail-if 'regions/wal/reflush_ratio>0.3'\n  \
pmsim diff sweep-main/ sweep-branch/ --fail-if 'reflush_ratio>+0.02' --fail-if 'peak_mapped_bytes>+5%'\n\n\
Two sweep directories (`pmsim sweep --out DIR`, every point run) are compared point by point: points pair up \
by their parameters (their id), those of one sweep only are listed, and every threshold holds for every point \
that has its figure on both sides (peak_mapped_bytes and peak_live_bytes from a point's native run, the others \
from its simulator report).\n\n\
Thresholds: NAME>+5% (B rose more than 5 % above A), NAME>+0.1 (rose by more than 0.1), NAME>1500 (B above \
1500), and the same with < and - for figures that must not fall. NAME is a figure of the table (flushes_per_op, \
reflush_ratio, persist_ns_per_op, write_amplification, …) or a path into the report: regions/NAME/FIELD, \
ops/OP/FIELD, threads/TID/FIELD, sites/NAME/FIELD, pm/FIELD.")]
pub struct DiffArgs {
    /// The baseline: a .pmt trace, a report saved by `pmsim sim --json`, or a sweep directory.
    a: PathBuf,
    /// The candidate, compared against A.
    b: PathBuf,
    /// Exit with status 1 if B crosses this bound (repeatable; see below).
    #[arg(long, value_name = "BOUND")]
    fail_if: Vec<String>,
    /// Code sites listed (those whose persist time changed most).
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Compare the windows of the two runs (`--from-marker`, `--skip-ops` or a recorded `window`
    /// marker), not the whole runs (traces and reports only).
    #[arg(long)]
    window: bool,
    /// Print the comparison as JSON.
    #[arg(long)]
    json: bool,
    /// How traces are replayed (saved reports keep the options they were made with).
    #[command(flatten)]
    model: ModelArgs,
}

pub fn run(a: DiffArgs) -> CmdResult {
    // Bad thresholds are refused before any replay.
    let thresholds = Threshold::parse_all(&a.fail_if)?;
    match (a.a.is_dir(), a.b.is_dir()) {
        (true, true) => return sweeps(&a, &thresholds),
        (false, false) => {}
        (a_dir, _) => {
            let (dir, file) = if a_dir { (&a.a, &a.b) } else { (&a.b, &a.a) };
            return Err(format!(
                "{} is a directory and {} is not: compare two sweep directories, or two traces or reports",
                dir.display(),
                file.display()
            )
            .into());
        }
    }
    let cfg = a.model.config()?;
    let pick = |path: &Path, r: Value| -> Result<Value, Box<dyn std::error::Error>> {
        if !a.window {
            return Ok(r);
        }
        r.pointer("/window/report").cloned().ok_or_else(|| {
            format!("{}: --window: the run has no window (no `window` marker; `pmsim sim --from-marker` or --skip-ops makes one)", path.display()).into()
        })
    };
    let ra = pick(&a.a, load(&a.a, &cfg)?)?;
    let rb = pick(&a.b, load(&a.b, &cfg)?)?;
    let (na, nb) = (a.a.display().to_string(), a.b.display().to_string());
    let c = Comparison::new((&na, &ra), (&nb, &rb), &thresholds, a.top)?;
    let failed =
        c.failures().map(|v| format!("{} (a {}, b {})", v.threshold.text, cell(Some(v.a)), cell(Some(v.b)))).collect();
    emit(a.json, &c, write_text, (&na, &nb), failed)
}

/// Prints a comparison (JSON or text), then fails naming every crossed
/// threshold, so the exit status is 1 exactly when one was crossed.
fn emit<C: serde::Serialize>(
    json: bool,
    c: &C,
    text: fn(&C, &mut dyn Write) -> std::io::Result<()>,
    (na, nb): (&str, &str),
    failed: Vec<String>,
) -> CmdResult {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, c)?;
        writeln!(out)?;
    } else {
        text(c, &mut out)?;
    }
    out.flush()?;
    if !failed.is_empty() {
        return Err(format!("{nb} regresses from {na}: {}", failed.join("; ")).into());
    }
    Ok(())
}

/// Two sweep directories, point by point.
fn sweeps(a: &DiffArgs, thresholds: &[Threshold]) -> CmdResult {
    if a.window {
        return Err("--window: sweep rows hold whole runs; it applies to traces and reports".into());
    }
    let (na, nb) = (a.a.display().to_string(), a.b.display().to_string());
    let (exp_a, rows_a, warn_a) = sweep_diff::load(&a.a)?;
    let (exp_b, rows_b, warn_b) = sweep_diff::load(&a.b)?;
    for w in warn_a.iter().chain(&warn_b) {
        eprintln!("pmsim: warning: {w}");
    }
    let c = SweepComparison::new((&na, &exp_a, &rows_a), (&nb, &exp_b, &rows_b), thresholds)?;
    let failed = c
        .failures()
        .map(|v| format!("{} at {} (a {}, b {})", v.threshold.text, v.label, cell(Some(v.a)), cell(Some(v.b))))
        .collect();
    emit(a.json, &c, sweep_diff::write_text, (&na, &nb), failed)
}

/// The report of `path`: a saved JSON report as it is (the `report` of a
/// `--contention` output), or a trace replayed with `cfg`.
fn load(path: &Path, cfg: &pmsim_sim::Config) -> Result<Value, Box<dyn std::error::Error>> {
    let mut first = [0u8; 1];
    let n = pmsim_traces::input::open(path, "trace or report")?
        .read(&mut first)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    let looks_json = n == 1 && (first[0] == b'{' || first[0].is_ascii_whitespace());
    if !looks_json {
        let (_, report) = replay(path, cfg.clone())?;
        return Ok(serde_json::to_value(report)?);
    }
    let text = pmsim_traces::input::read_text(path, "report")?;
    let v: Value = serde_json::from_str(&text).map_err(|e| {
        format!("{}: line {}, column {}: not a pmsim report: {e}", path.display(), e.line(), e.column())
    })?;
    let v = match v.get("report") {
        Some(r) if v.get("contention").is_some() => r.clone(),
        _ => v,
    };
    if v.get("overall").is_none() {
        return Err(format!(
            "{}: offset 0: a JSON file without an `overall` field is not a `pmsim sim --json` report",
            path.display()
        )
        .into());
    }
    pmsim_sim::diff::check_report(&v)
        .map_err(|e| format!("{}: not a `pmsim sim --json` report: {e}", path.display()))?;
    Ok(v)
}
