//! `pmsim reproduce`: the main job. Runs the experiment set (one TOML file
//! per figure family) and writes OUT/index.html and OUT/README.md with every
//! figure, the table behind it, the exact parameters and the pmsim version.

use super::CmdResult;
use clap::Args;
use pmsim_analyses::reproduce::{self, Options, Traced};
use std::io::Write;
use std::path::PathBuf;

#[derive(Args)]
pub struct ReproduceArgs {
    /// tiny (minutes on 2 cores, CI), small, or paper (the paper's parameters: hours to days; use a cluster).
    #[arg(long, default_value = "tiny")]
    scale: String,
    /// The report directory [default: results/reproduce-SCALE]. Rerunning into it resumes.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Points run at once [default: one per CPU]; native points always run alone.
    #[arg(long, default_value_t = 0)]
    jobs: usize,
    /// Read the experiment files (*.toml) from DIR instead of the built-in set (analyses/experiments/).
    #[arg(long, value_name = "DIR")]
    experiments: Option<PathBuf>,
    /// Run only these experiments (by name; comma list).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Add a simulator report of a trace made outside pmsim's tracer (e.g. PMDK traced by the Valgrind tool,
    /// replayed with `pmsim sim TRACE --json > REPORT.json`) to the allocator comparison. Repeatable.
    #[arg(long, value_name = "ALLOC@WORKLOAD=REPORT.json")]
    traced: Vec<Traced>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: ReproduceArgs) -> CmdResult {
    let opts = Options {
        out: a.out.clone().unwrap_or_else(|| PathBuf::from(format!("results/reproduce-{}", a.scale))),
        scale: a.scale,
        jobs: a.jobs,
        experiments: a.experiments,
        only: a.only,
        traced: a.traced,
        tally: Default::default(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    let loaded = reproduce::load(&opts)?;
    for (file, _, e) in &loaded.exps {
        pmsim_analyses::sweep::check_jobs(a.jobs, &e.points()?).map_err(|er| format!("{file}: {er}"))?;
    }
    // Only into a directory of pmsim's, one reproduce at a time (each sweep
    // in it is locked too).
    reproduce::claim_out(&opts.out)?;
    let _one_writer = pmsim_traces::output::Lock::dir(&opts.out)?;
    reproduce::ensure_native_env(&loaded.exps)?;
    let s = crate::progress::points(&opts.tally, || reproduce::run(&opts, loaded))?;
    let mut w = std::io::stdout().lock();
    if a.json {
        serde_json::to_writer_pretty(&mut w, &s)?;
        writeln!(w)?;
    } else {
        for sec in &s.sections {
            writeln!(
                w,
                "{:<12} {:>4} points {:>7.1} s  figures: {}",
                sec.name,
                sec.points,
                sec.wall_s,
                sec.figures.join(", ")
            )?;
        }
        writeln!(w, "report: {}/index.html ({:.1} s)", s.out, s.wall_s)?;
    }
    Ok(())
}
