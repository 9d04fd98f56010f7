//! `pmsim calibrate`: the published Optane microbenchmarks, synthesized as
//! traces and replayed through the contention model, beside the published
//! figures (the fitted ones and the validation ones, each with its error).

use super::CmdResult;
use clap::Args;
use pmsim_sim::calibrate::{self, Point, Row, Size};
use pmsim_sim::Config;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

#[derive(Args)]
pub struct CalibrateArgs {
    /// Machine model in TOML (defaults and the source of every constant: sim/optane.toml).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Evaluate one point instead of the published ones, e.g.
    /// `family=bandwidth,op=clwb,pattern=random,access=256,threads=12,dimms=1`.
    /// Families: bandwidth (GB/s; access = bytes per write, one fence at the end),
    /// fence (GB/s; sequential 64 B writes, a fence every `access` bytes),
    /// wa (write amplification; working set of `access` bytes written as 128 B halves),
    /// latency (ns per 64 B write + fence), reflush (ns for a line written back
    /// again after `distance` other lines, each write fenced: NVAlloc §3.1's
    /// experiment). Defaults: op=clwb, pattern=random, access=256, threads=1,
    /// dimms=6, distance=0.
    #[arg(long)]
    point: Option<String>,
    /// A quarter of the work per benchmark (what CI runs).
    #[arg(long)]
    quick: bool,
    /// Exit non-zero if a fitted point is farther than this from its published value (e.g. 0.15).
    #[arg(long, value_name = "FRACTION")]
    max_fitted_error: Option<f64>,
    /// Print `{point, model, published, unit, …}` per point as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: CalibrateArgs) -> CmdResult {
    if let Some(m) = a.max_fitted_error {
        if !(m.is_finite() && m > 0.0) {
            return Err(format!("--max-fitted-error {m}: a fraction above 0 (e.g. 0.15)").into());
        }
    }
    let cfg = match &a.config {
        Some(p) => Config::from_file(p)?,
        None => Config::default(),
    };
    let size = if a.quick { Size::Quick } else { Size::Full };
    let rows = match &a.point {
        Some(p) => vec![calibrate::run_point(&cfg, &p.parse::<Point>()?, size)?],
        None => calibrate::run_all(&cfg, size)?,
    };
    let mut out = BufWriter::new(std::io::stdout().lock());
    if a.json {
        serde_json::to_writer_pretty(&mut out, &rows)?;
        writeln!(out)?;
    } else {
        write_table(&mut out, &rows)?;
    }
    out.flush()?;
    if let Some(max) = a.max_fitted_error {
        let worst = rows.iter().filter(|r| r.fitted).filter_map(|r| r.error.map(|e| (e, &r.point))).fold(
            None,
            |w: Option<(f64, &String)>, (e, p)| match w {
                Some((we, _)) if we >= e => w,
                _ => Some((e, p)),
            },
        );
        if let Some((e, p)) = worst.filter(|(e, _)| *e > max) {
            return Err(format!(
                "fitted point {p} is {:.1} % from its published value (allowed {:.1} %)",
                e * 100.0,
                max * 100.0
            )
            .into());
        }
    }
    Ok(())
}

fn write_table(out: &mut impl Write, rows: &[Row]) -> std::io::Result<()> {
    writeln!(out, "{:<70} {:>9} {:>9} {:>6} {:>7}  role", "point", "model", "published", "unit", "error")?;
    let mut family = "";
    for r in rows {
        let f = r.point.split(',').next().unwrap_or("");
        if f != family && !family.is_empty() {
            writeln!(out)?;
        }
        family = f;
        let (p, e) = match (r.published, r.error) {
            (Some(p), Some(e)) => (format!("{p:.3}"), format!("{:.1} %", e * 100.0)),
            _ => ("-".into(), "-".into()),
        };
        let role = match (r.published.is_some(), r.fitted) {
            (false, _) => "unpublished",
            (true, true) => "fitted",
            (true, false) => "validation",
        };
        writeln!(out, "{:<70} {:>9.3} {:>9} {:>6} {:>7}  {role}", r.point, r.model, p, r.unit, e)?;
    }
    let fitted: Vec<f64> = rows.iter().filter(|r| r.fitted).filter_map(|r| r.error).collect();
    let valid: Vec<f64> = rows.iter().filter(|r| !r.fitted).filter_map(|r| r.error).collect();
    let stat = |v: &[f64]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            format!(
                "{} points, mean error {:.1} %, worst {:.1} %",
                v.len(),
                100.0 * v.iter().sum::<f64>() / v.len() as f64,
                100.0 * v.iter().cloned().fold(0.0, f64::max)
            )
        }
    };
    writeln!(out)?;
    writeln!(out, "fitted      {}", stat(&fitted))?;
    writeln!(out, "validation  {}", stat(&valid))
}
