//! `pmsim sweep`: run every point of an experiment (a TOML file and/or
//! `--set key=v1,v2,…` ranges) into a result directory, in parallel, in
//! deterministic shards, resumably; `pmsim sweep merge` combines the shards.

use super::CmdResult;
use clap::{Args, Subcommand};
use pmsim_analyses::slurm;
use pmsim_analyses::store::{self, SweepDir};
use pmsim_analyses::sweep::{self, Options, Shard};
use pmsim_analyses::{table, Experiment};
use pmsim_traces::output::{Pending, Policy};
use std::io::Write;
use std::path::PathBuf;

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct SweepArgs {
    #[command(subcommand)]
    sub: Option<SweepSub>,
    /// The experiment file (TOML: [experiment] name/title/mode, [sweep] parameter = value or [values]).
    /// Without it the sweep is built from --set alone, or read back from DIR with --resume.
    experiment: Option<PathBuf>,
    /// A sweep axis KEY=V1,V2,… (repeatable; replaces the file's): alloc, workload, threads, scale, seed,
    /// mode (sim|native|both|memory), param.KEY (workload parameter), sim.PATH (simulator key, e.g. sim.eadr),
    /// any other KEY an allocator parameter (stripes, su, …).
    #[arg(long = "set", value_name = "KEY=V1,V2,…")]
    set: Vec<String>,
    /// The result directory: experiment.json and shards/<i>.jsonl.
    #[arg(long, value_name = "DIR", required_unless_present = "resume")]
    out: Option<PathBuf>,
    /// Run only shard i of n (points whose index is i mod n), into DIR/shards/<i>.jsonl.
    #[arg(long, value_name = "i/n", default_value = "0/1")]
    shard: Shard,
    /// Run only the points of DIR that have no row yet (DIR may follow, in place of --out).
    #[arg(long, value_name = "DIR", num_args = 0..=1)]
    resume: Option<Option<PathBuf>>,
    /// Points run at once [default: one per CPU]; native points always run alone.
    #[arg(long, default_value_t = 0)]
    jobs: usize,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    slurm: SlurmArgs,
}

/// Running the sweep as a Slurm job array.
#[derive(Args)]
struct SlurmArgs {
    /// Submit the sweep to Slurm instead of running it here: a job array whose task i runs shard i/N,
    /// then a merge job once all tasks succeeded (DIR must be on a file system the nodes share).
    #[arg(long, conflicts_with = "shard")]
    slurm: bool,
    /// With --slurm: array tasks (shards) [default: one per point, at most 64].
    #[arg(long, requires = "slurm")]
    tasks: Option<usize>,
    /// With --slurm: the partition to submit to.
    #[arg(long, requires = "slurm")]
    partition: Option<String>,
    /// With --slurm: time limit of each task (Slurm's format, e.g. 2:00:00).
    #[arg(long, requires = "slurm")]
    time: Option<String>,
    /// With --slurm: a further sbatch argument (repeatable), e.g. --sbatch-arg=--account=lab.
    #[arg(long = "sbatch-arg", value_name = "ARG", requires = "slurm", allow_hyphen_values = true)]
    sbatch_args: Vec<String>,
    /// With --slurm: wait for the array and the merge, printing progress (tasks pending / running / done / failed).
    #[arg(long, requires = "slurm")]
    wait: bool,
    /// With --slurm: write the job scripts into DIR/slurm and print them with the sbatch commands; submit nothing.
    #[arg(long, requires = "slurm")]
    dry_run: bool,
}

#[derive(Subcommand)]
enum SweepSub {
    /// Check every shard file of DIR and combine them into one result set, ordered by point.
    Merge(MergeArgs),
}

#[derive(Args)]
struct MergeArgs {
    /// The sweep directory.
    dir: PathBuf,
    /// Write the rows as CSV (one column per parameter and headline result).
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Write the rows as one JSON document.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Also draw the experiment's figures and write a report (index.html, README.md) into OUT
    /// (a new or empty directory, or with --force one to write over).
    #[arg(long, value_name = "OUT")]
    report: Option<PathBuf>,
    /// Replace existing --csv and --json files and a report in a directory that is not empty.
    #[arg(long)]
    force: bool,
}

pub fn run(a: SweepArgs) -> CmdResult {
    if let Some(SweepSub::Merge(m)) = a.sub {
        return merge(m);
    }
    let out = match (&a.resume, &a.out) {
        (Some(Some(d)), Some(o)) if d != o => {
            return Err(format!("--resume {} and --out {} name different directories", d.display(), o.display()).into())
        }
        (Some(Some(d)), _) => d.clone(),
        (_, Some(o)) => o.clone(),
        (_, None) => return Err("--out DIR (or --resume DIR) is required".into()),
    };
    let dir = SweepDir::new(&out);
    // A new sweep directory is never made inside another run's bookkeeping
    // (a sweep's shards, a report's sweeps).
    if std::fs::symlink_metadata(&out).is_err() {
        if let Some((d, kind)) = pmsim_traces::output::inside_own_dir(&out) {
            return Err(format!(
                "{}: inside the pmsim {kind} directory {}: a new sweep goes elsewhere",
                out.display(),
                d.display()
            )
            .into());
        }
    }
    let resolved = match (&a.experiment, a.set.is_empty(), a.resume.is_some()) {
        (None, true, true) => dir
            .load()?
            .ok_or_else(|| format!("{}: no experiment.json to resume (give the experiment file)", out.display()))?,
        _ => {
            let mut exp = match &a.experiment {
                Some(p) => Experiment::from_file(p)?,
                None if a.set.is_empty() => {
                    return Err("nothing to sweep: give an experiment file or --set KEY=V1,V2,…".into())
                }
                None => Experiment::empty("cli"),
            };
            exp.set_axes(&a.set)?;
            let points = exp.points().map_err(|e| format!("--set: {e}"))?;
            store::Resolved::new(exp, &points)
        }
    };
    if let Some(t) = a.slurm.tasks {
        slurm::check_tasks(t)?;
    }
    slurm::check_options(&slurm::SlurmOptions {
        tasks: a.slurm.tasks.unwrap_or(1),
        partition: a.slurm.partition.clone(),
        time: a.slurm.time.clone(),
        sbatch_args: a.slurm.sbatch_args.clone(),
    })?;
    // From here the directory may be made: a refusal before any point runs
    // (another writer, Slurm missing, a full disk) removes it again.
    let mut made = MadeHere::new(&dir);
    if a.slurm.slurm {
        if !a.slurm.dry_run {
            slurm::check_available()?;
        }
        let tasks = a.slurm.tasks.or(dir.scheme()).unwrap_or(resolved.points.len().clamp(1, 64));
        dir.claim(tasks)?;
        let _one_writer = dir.lock_submit()?;
        return submit(&a, &dir, &resolved, &mut made);
    }
    let points: Vec<_> = resolved.points.iter().map(|l| l.point.clone()).collect();
    sweep::check_jobs(a.jobs, &points)?;
    sweep::ensure_native_env(&points)?;
    let opts = Options { shard: a.shard, resume: a.resume.is_some(), jobs: a.jobs, tally: Default::default() };
    let s = crate::progress::points(&opts.tally, || sweep::run_resolved(&dir, &resolved, &opts))?;
    // Points ran (or failed, to be retried with --resume): the directory stays.
    made.keep();
    let mut w = std::io::stdout().lock();
    if a.json {
        serde_json::to_writer_pretty(&mut w, &s)?;
        writeln!(w)?;
    } else {
        writeln!(
            w,
            "sweep {} ({} points, fingerprint {}), shard {}/{}: {} points, {} done before, {} run, {} failed in {:.1} s",
            s.experiment,
            s.points,
            s.fingerprint,
            a.shard.index,
            a.shard.count,
            s.in_shard,
            s.already_done,
            s.ran,
            s.failed.len(),
            s.wall_s
        )?;
        writeln!(w, "rows in {}", s.shard_file)?;
        for (label, e) in &s.failed {
            writeln!(w, "failed: {label}: {e}")?;
        }
    }
    if !s.failed.is_empty() {
        return Err(format!("{} point(s) failed (they have no row; --resume retries them)", s.failed.len()).into());
    }
    Ok(())
}

/// A sweep directory this command made, removed when the command fails
/// before it ran a point or submitted a job, if it holds no row and no other
/// sweep is writing it: a refused sweep leaves no directory behind.
struct MadeHere<'a> {
    dir: &'a SweepDir,
    armed: bool,
}

impl<'a> MadeHere<'a> {
    fn new(dir: &'a SweepDir) -> MadeHere<'a> {
        MadeHere { dir, armed: std::fs::symlink_metadata(&dir.root).is_err() }
    }

    /// The directory holds what the user asked for: keep it.
    fn keep(&mut self) {
        self.armed = false;
    }
}

impl Drop for MadeHere<'_> {
    fn drop(&mut self) {
        if !self.armed || !self.dir.root.is_dir() {
            return;
        }
        // Another sweep that found the directory meanwhile holds a lock.
        let (Ok(_shard0), Ok(_submit)) = (self.dir.lock_shard(0), self.dir.lock_submit()) else { return };
        if self.dir.read_rows().is_ok_and(|(rows, torn)| rows.is_empty() && torn.is_empty()) {
            let _ = std::fs::remove_dir_all(&self.dir.root);
        }
    }
}

/// `--slurm`: writes the job scripts, submits them and (with `--wait`)
/// follows the jobs to the merged result.
fn submit(a: &SweepArgs, dir: &SweepDir, resolved: &store::Resolved, made: &mut MadeHere) -> CmdResult {
    let o = &a.slurm;
    let tasks = o.tasks.or(dir.scheme()).unwrap_or(resolved.points.len().clamp(1, 64));
    dir.claim(tasks)?;
    dir.init(resolved)?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find pmsim's executable: {e}"))?;
    let opts = slurm::SlurmOptions {
        tasks,
        partition: o.partition.clone(),
        time: o.time.clone(),
        sbatch_args: o.sbatch_args.clone(),
    };
    let plan = slurm::plan(dir, &resolved.experiment.meta.name, &exe, &opts)?;
    let mut w = std::io::stdout().lock();
    if o.dry_run {
        for p in [&plan.array_script, &plan.merge_script] {
            writeln!(w, "# {}", p.display())?;
            w.write_all(&std::fs::read(p)?)?;
            writeln!(w)?;
        }
        write!(w, "{}", plan.commands())?;
        made.keep();
        return Ok(());
    }
    let sub = slurm::submit(&plan)?;
    made.keep();
    if a.json && !o.wait {
        serde_json::to_writer_pretty(&mut w, &sub)?;
        writeln!(w)?;
        return Ok(());
    }
    writeln!(
        w,
        "submitted job array {} ({} tasks over {} points) and merge job {} (after all tasks succeed); rows in {}",
        sub.array_job,
        sub.tasks,
        resolved.points.len(),
        sub.merge_job,
        dir.shards_dir().display()
    )?;
    if !o.wait {
        return Ok(());
    }
    drop(w);
    let total = resolved.points.len();
    let start = std::time::Instant::now();
    let done = slurm::wait(&sub, dir, |s| {
        let rows = dir.read_rows().map(|(r, _)| r.len()).unwrap_or(0);
        eprintln!(
            "[{:>6.1} s] tasks: {} pending, {} running, {} done, {} failed; merge: {}; rows {rows}/{total}",
            start.elapsed().as_secs_f64(),
            s.pending,
            s.running,
            s.done,
            s.failed,
            if s.merge.is_empty() { "-" } else { &s.merge }
        );
    })?;
    let mut w = std::io::stdout().lock();
    if a.json {
        serde_json::to_writer_pretty(&mut w, &serde_json::json!({ "submitted": sub, "status": done }))?;
        writeln!(w)?;
    } else {
        writeln!(
            w,
            "merged in {:.1} s: {} and {}; report {}",
            start.elapsed().as_secs_f64(),
            dir.root.join("results.json").display(),
            dir.root.join("results.csv").display(),
            dir.root.join("report/index.html").display()
        )?;
    }
    Ok(())
}

fn merge(m: MergeArgs) -> CmdResult {
    let dir = SweepDir::new(&m.dir);
    if m.force && m.json.is_none() && m.csv.is_none() && m.report.is_none() {
        return Err("--force replaces the --csv, --json and --report outputs: none is given".into());
    }
    // Every output checked before the merge: none may be a file of the sweep.
    let mut policy = Policy::new(m.force);
    dir.protect(&mut policy);
    for p in m.json.iter().chain(&m.csv) {
        policy.check(p)?;
    }
    // The merge first: a sweep that does not merge makes no report directory.
    let (r, rows, warnings) = store::merge(&dir)?;
    let made = match &m.report {
        Some(out) => {
            let existed = std::fs::symlink_metadata(out).is_ok();
            pmsim_analyses::reproduce::claim_report_dir(out, &dir, m.force)?;
            !existed
        }
        None => false,
    };
    // The files are renamed into place together once the report is drawn.
    let written = (|| -> CmdResult {
        let mut pending = Pending::default();
        if let Some(p) = &m.json {
            let doc = serde_json::json!({ "experiment": r.experiment, "fingerprint": r.fingerprint, "rows": rows });
            pending.push(policy.stage_bytes(p, (serde_json::to_string_pretty(&doc)? + "\n").as_bytes())?);
        }
        if let Some(p) = &m.csv {
            let mut text = Vec::new();
            table::write_csv(&rows, &mut text).map_err(|e| format!("{}: {e}", p.display()))?;
            pending.push(policy.stage_bytes(p, &text)?);
        }
        if let Some(out) = &m.report {
            let command = std::env::args().collect::<Vec<_>>().join(" ");
            pmsim_analyses::reproduce::report_sweep(&dir, out, &command)?;
        }
        Ok(pending.commit()?)
    })();
    if let (Err(_), true, Some(out)) = (&written, made, &m.report) {
        // A half-written report is removed if this run made its directory.
        let _ = std::fs::remove_dir_all(out);
    }
    written?;
    for w in &warnings {
        eprintln!("pmsim: warning: {w}");
    }
    let mut w = std::io::stdout().lock();
    writeln!(w, "merged {} rows of '{}' (fingerprint {})", rows.len(), r.experiment.meta.name, r.fingerprint)?;
    table::write_text(&rows, &mut w)?;
    Ok(())
}
