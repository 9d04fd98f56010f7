//! Sweeps on a Slurm cluster: one job array whose task `i` runs shard `i/N`
//! of the sweep directory, then a merge job that runs once every task has
//! succeeded (`--dependency=afterok`).
//!
//! Slurm is driven through its own commands only (`sbatch`, `scontrol`,
//! `scancel`), so a sweep runs unchanged on any cluster that runs Slurm; the
//! directory must be on a file system every node sees. A task runs `pmsim
//! sweep --resume DIR --shard i/N`: it reads the resolved experiment from
//! DIR, runs only the points of its shard that have no row yet, and appends
//! each row atomically (see [`crate::store`]). So a cancelled or failed task
//! loses at most the point it was running, and submitting the same
//! directory again (`pmsim sweep --resume DIR --slurm`) runs exactly the
//! missing points; the merge then equals an uninterrupted run. The merge job
//! also draws the sweep's report into `DIR/report/`.
//!
//! Progress comes from `scontrol show job` (this works without Slurm's
//! accounting database, which small clusters often lack) and from the rows
//! already in the shard files.

use crate::store::SweepDir;
use pmsim_traces::children;
use pmsim_traces::output::Policy;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How to submit.
#[derive(Clone, Debug, Default)]
pub struct SlurmOptions {
    /// Array tasks (shards); each runs its points one after another.
    pub tasks: usize,
    pub partition: Option<String>,
    /// `--time` of each task (Slurm's format, e.g. `1:00:00`).
    pub time: Option<String>,
    /// Further `sbatch` arguments, passed to both jobs as written.
    pub sbatch_args: Vec<String>,
}

/// The scripts and commands of one submission, written into `DIR/slurm/`.
#[derive(Clone, Debug)]
pub struct Plan {
    pub array_script: PathBuf,
    pub merge_script: PathBuf,
    /// `sbatch` arguments of the array job (the script last).
    pub array_args: Vec<String>,
    /// `sbatch` arguments of the merge job, without the dependency.
    pub merge_args: Vec<String>,
    pub tasks: usize,
}

impl Plan {
    /// The two commands as a shell would take them (the merge job's
    /// dependency shown as `$ARRAY_JOB`).
    pub fn commands(&self) -> String {
        let q = |args: &[String]| args.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" ");
        format!(
            "ARRAY_JOB=$(sbatch {})\nsbatch --dependency=afterok:$ARRAY_JOB {}\n",
            q(&self.array_args),
            q(&self.merge_args)
        )
    }
}

/// Job ids of a submission.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Submitted {
    pub array_job: String,
    pub merge_job: String,
    pub tasks: usize,
}

/// Array tasks by state, and the merge job's state.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Status {
    pub pending: usize,
    pub running: usize,
    pub done: usize,
    pub failed: usize,
    /// `PENDING`, `RUNNING`, `COMPLETED`, `FAILED`, … (empty: not known to Slurm any more).
    pub merge: String,
}

impl Status {
    /// The sweep is over: merged, or no task left that could still succeed.
    pub fn finished(&self) -> bool {
        matches!(self.merge.as_str(), "COMPLETED" | "FAILED" | "CANCELLED" | "TIMEOUT")
            || (self.failed > 0 && self.pending == 0 && self.running == 0)
    }
}

/// Quotes a word for `sh` when it needs it.
fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=,%@+".contains(c)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Fails with one line when Slurm's client commands are not on `PATH`.
pub fn check_available() -> Result<(), String> {
    for cmd in ["sbatch", "scontrol", "scancel"] {
        if which(cmd).is_none() {
            return Err(format!(
                "--slurm: '{cmd}' is not on PATH (run on a Slurm login node; scripts/slurm-local.sh start makes a \
                 one-node cluster on this machine and prints the SLURM_CONF to export)"
            ));
        }
    }
    Ok(())
}

fn which(cmd: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(cmd)).find(|p| p.is_file())
}

/// The most array tasks pmsim submits (Slurm's default MaxArraySize is 1001).
pub const MAX_TASKS: usize = 1000;

/// Refuses an array of no tasks, or of more than Slurm takes (checked
/// before the sweep directory is made).
pub fn check_tasks(tasks: usize) -> Result<(), String> {
    if tasks == 0 {
        return Err("--tasks must be at least 1".into());
    }
    if tasks > MAX_TASKS {
        return Err(format!("--tasks {tasks}: more than {MAX_TASKS} (Slurm's default MaxArraySize is 1001)"));
    }
    Ok(())
}

/// Checks the options sbatch would otherwise refuse only after the scripts
/// are written: `--time` in one of Slurm's formats (`MINUTES`, `MM:SS`,
/// `HH:MM:SS`, `DAYS-HH`, `DAYS-HH:MM`, `DAYS-HH:MM:SS`, or `infinite`), a
/// `--partition` that is a name (or a comma list of names), and
/// `--sbatch-arg`s that are options.
pub fn check_options(o: &SlurmOptions) -> Result<(), String> {
    check_tasks(o.tasks.max(1))?;
    if let Some(t) = &o.time {
        check_time(t).map_err(|why| {
            format!(
                "--time {t:?}: {why} (Slurm's formats: MINUTES, MM:SS, HH:MM:SS, DAYS-HH, DAYS-HH:MM, \
                 DAYS-HH:MM:SS)"
            )
        })?;
    }
    if let Some(p) = &o.partition {
        let name_ok = |n: &str| {
            !n.is_empty() && n.len() <= 64 && n.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        };
        if !p.split(',').all(name_ok) {
            return Err(format!(
                "--partition {p:?}: not a partition name (letters, digits, '-', '_', '.'; several joined by ',')"
            ));
        }
    }
    for a in &o.sbatch_args {
        if !a.starts_with('-') || a.chars().any(char::is_control) {
            return Err(format!("--sbatch-arg {a:?}: not an sbatch option (e.g. --sbatch-arg=--account=lab)"));
        }
    }
    Ok(())
}

/// Checks a Slurm time limit.
fn check_time(t: &str) -> Result<(), String> {
    if matches!(t, "infinite" | "UNLIMITED" | "unlimited") {
        return Ok(());
    }
    let num = |s: &str, max: u64, what: &str| -> Result<u64, String> {
        if s.is_empty() || !s.chars().all(|c| c.is_ascii_digit()) || s.len() > 9 {
            return Err(format!("{s:?} is not a number of {what}"));
        }
        let n: u64 = s.parse().map_err(|_| format!("{s:?} is not a number of {what}"))?;
        if n > max {
            return Err(format!("{n} {what}: at most {max}"));
        }
        Ok(n)
    };
    let (days, rest) = match t.split_once('-') {
        Some((d, r)) => (Some(num(d, 365_000, "days")?), r),
        None => (None, t),
    };
    let parts: Vec<&str> = rest.split(':').collect();
    // (A limit of zero is Slurm's "no limit".)
    match (days, parts.as_slice()) {
        (None, [m]) => num(m, u64::from(u32::MAX), "minutes").map(drop),
        (None, [m, s]) => num(m, u64::from(u32::MAX), "minutes").and(num(s, 59, "seconds")).map(drop),
        (None, [h, m, s]) => {
            num(h, u64::from(u32::MAX), "hours").and(num(m, 59, "minutes")).and(num(s, 59, "seconds")).map(drop)
        }
        (Some(_), [h]) => num(h, 23, "hours").map(drop),
        (Some(_), [h, m]) => num(h, 23, "hours").and(num(m, 59, "minutes")).map(drop),
        (Some(_), [h, m, s]) => num(h, 23, "hours").and(num(m, 59, "minutes")).and(num(s, 59, "seconds")).map(drop),
        _ => Err("not a time limit".into()),
    }
}

/// Writes the array and merge scripts for sweep directory `dir` (which must
/// hold its `experiment.json` already) into `DIR/slurm/`. `pmsim` is the
/// binary the tasks run: an absolute path every node can execute.
pub fn plan(dir: &SweepDir, name: &str, pmsim: &Path, o: &SlurmOptions) -> Result<Plan, String> {
    check_tasks(o.tasks)?;
    check_options(o)?;
    let root = std::path::absolute(&dir.root).map_err(|e| format!("{}: {e}", dir.root.display()))?;
    let sdir = root.join("slurm");
    let logs = sdir.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: cannot create: {e}", logs.display()))?;
    let exe = shell_quote(&pmsim.display().to_string());
    let d = shell_quote(&root.display().to_string());
    let job = format!("pmsim-{}", name.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').collect::<String>());

    let mut array = String::new();
    let _ = writeln!(array, "#!/bin/bash");
    let _ = writeln!(array, "# Task i of the job array runs shard i/{} of the sweep in {}.", o.tasks, root.display());
    let _ = writeln!(array, "# Written by pmsim sweep --slurm; resubmitting runs only the points without a row.");
    let _ = writeln!(array, "set -euo pipefail");
    let _ = writeln!(
        array,
        "exec {exe} sweep --resume {d} --shard \"$SLURM_ARRAY_TASK_ID/{}\" --jobs \"${{SLURM_CPUS_PER_TASK:-1}}\"",
        o.tasks
    );
    let mut merge = String::new();
    let _ = writeln!(merge, "#!/bin/bash");
    let _ = writeln!(
        merge,
        "# Runs after every task of the array succeeded: checks and merges the shard files, draws the report."
    );
    let _ = writeln!(merge, "set -euo pipefail");
    let _ = writeln!(
        merge,
        "exec {exe} sweep merge {d} --force --json {} --csv {} --report {}",
        shell_quote(&root.join("results.json").display().to_string()),
        shell_quote(&root.join("results.csv").display().to_string()),
        shell_quote(&root.join("report").display().to_string())
    );
    let array_script = sdir.join("array.sh");
    let merge_script = sdir.join("merge.sh");
    // The scripts are the sweep directory's own, made again by every
    // submission (and `--dry-run`): each replaced through a temporary file,
    // never written over anything that is not a regular file.
    let mut policy = Policy::new(true);
    for (p, text) in [(&array_script, &array), (&merge_script, &merge)] {
        policy.write(p, text.as_bytes())?;
    }

    let mut common = vec!["--parsable".to_string()];
    if let Some(p) = &o.partition {
        common.push(format!("--partition={p}"));
    }
    if let Some(t) = &o.time {
        common.push(format!("--time={t}"));
    }
    common.extend(o.sbatch_args.iter().cloned());
    let mut array_args = common.clone();
    array_args.extend([
        format!("--job-name={job}"),
        format!("--array=0-{}", o.tasks - 1),
        "--cpus-per-task=1".into(),
        format!("--output={}", logs.join("task-%a.out").display()),
        array_script.display().to_string(),
    ]);
    let mut merge_args = common;
    merge_args.extend([
        format!("--job-name={job}-merge"),
        format!("--output={}", logs.join("merge.out").display()),
        merge_script.display().to_string(),
    ]);
    Ok(Plan { array_script, merge_script, array_args, merge_args, tasks: o.tasks })
}

fn sbatch(args: &[String]) -> Result<String, String> {
    let out = children::output(Command::new("sbatch").args(args)).map_err(|e| format!("cannot run sbatch: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("sbatch {}: {}", args.join(" "), err.trim()));
    }
    // --parsable prints "jobid[;cluster]".
    let text = String::from_utf8_lossy(&out.stdout);
    let id = text.trim().split(';').next().unwrap_or("").to_string();
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!("sbatch printed no job id: '{}'", text.trim()));
    }
    Ok(id)
}

/// Submits the array, then the merge job depending on it.
pub fn submit(plan: &Plan) -> Result<Submitted, String> {
    let array_job = sbatch(&plan.array_args)?;
    let mut margs = vec![format!("--dependency=afterok:{array_job}")];
    margs.extend(plan.merge_args.iter().cloned());
    let merge_job = match sbatch(&margs) {
        Ok(id) => id,
        Err(e) => {
            let _ = children::status(Command::new("scancel").arg(&array_job));
            return Err(format!("{e} (the array job {array_job} was cancelled)"));
        }
    };
    Ok(Submitted { array_job, merge_job, tasks: plan.tasks })
}

/// The `Key=Value` fields of one `scontrol -o` record.
fn field<'a>(record: &'a str, key: &str) -> Option<&'a str> {
    record.split_whitespace().find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// How many array tasks a record stands for: `3`, `0-3`, `0,2-3%2`.
fn task_count(spec: &str) -> usize {
    let spec = spec.split('%').next().unwrap_or("");
    spec.split(',')
        .map(|part| match part.split_once('-') {
            Some((a, b)) => match (a.parse::<usize>(), b.parse::<usize>()) {
                (Ok(a), Ok(b)) if b >= a => b - a + 1,
                _ => 1,
            },
            None => 1,
        })
        .sum()
}

/// The records of `scontrol -o show job ID` (empty once Slurm forgot the job).
fn show_job(id: &str) -> Result<Vec<String>, String> {
    let out = children::output(Command::new("scontrol").args(["-o", "show", "job", id]))
        .map_err(|e| format!("cannot run scontrol: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("Invalid job id") {
            return Ok(Vec::new());
        }
        return Err(format!("scontrol show job {id}: {}", err.trim()));
    }
    Ok(text.lines().filter(|l| !l.trim().is_empty()).map(str::to_string).collect())
}

/// The state of a submission now.
pub fn status(sub: &Submitted) -> Result<Status, String> {
    let mut s = Status::default();
    let records = show_job(&sub.array_job)?;
    let mut seen = 0;
    for r in &records {
        let n = field(r, "ArrayTaskId").map(task_count).unwrap_or(1);
        seen += n;
        match field(r, "JobState").unwrap_or("") {
            "PENDING" | "REQUEUED" | "CONFIGURING" | "RESIZING" | "SUSPENDED" => s.pending += n,
            "RUNNING" | "COMPLETING" => s.running += n,
            "COMPLETED" => s.done += n,
            _ => s.failed += n,
        }
    }
    if records.is_empty() {
        // Forgotten by Slurm: it finished long ago; count it by the merge job.
        seen = sub.tasks;
    }
    s.pending += sub.tasks.saturating_sub(seen);
    s.merge = show_job(&sub.merge_job)?.first().and_then(|r| field(r, "JobState")).unwrap_or("").to_string();
    Ok(s)
}

/// Cancels a job (the merge job left waiting on a failed array, a task in a test).
pub fn cancel(job: &str) -> Result<(), String> {
    let st = children::status(Command::new("scancel").arg(job)).map_err(|e| format!("cannot run scancel: {e}"))?;
    if !st.success() {
        return Err(format!("scancel {job} failed ({st})"));
    }
    Ok(())
}

/// Waits until the sweep is merged or cannot finish, calling `progress`
/// with each new status. A merge job that can never run (a task failed or
/// was cancelled) is cancelled, and the error says how to resume.
pub fn wait(sub: &Submitted, dir: &SweepDir, mut progress: impl FnMut(&Status)) -> Result<Status, String> {
    let mut last: Option<Status> = None;
    let mut poll = Duration::from_millis(250);
    let start = Instant::now();
    loop {
        let s = status(sub)?;
        if last.as_ref() != Some(&s) {
            progress(&s);
            last = Some(s.clone());
        }
        if s.finished() {
            if s.merge == "COMPLETED" {
                return Ok(s);
            }
            if matches!(s.merge.as_str(), "PENDING" | "") {
                let _ = cancel(&sub.merge_job);
            }
            return Err(format!(
                "{} of {} array task(s) of job {} did not complete and the merge job {} did not run (logs in {}); \
                 the rows written so far are kept: `pmsim sweep --resume {} --slurm` runs the missing points",
                s.failed,
                sub.tasks,
                sub.array_job,
                sub.merge_job,
                dir.root.join("slurm/logs").display(),
                dir.root.display()
            ));
        }
        std::thread::sleep(poll);
        if start.elapsed() > Duration::from_secs(10) {
            poll = Duration::from_secs(2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_task_specs_count() {
        assert_eq!(task_count("3"), 1);
        assert_eq!(task_count("0-3"), 4);
        assert_eq!(task_count("0,2-3%2"), 3);
    }

    #[test]
    fn scontrol_fields() {
        let r = "JobId=7 ArrayJobId=5 ArrayTaskId=2 JobName=x JobState=RUNNING Reason=None";
        assert_eq!(field(r, "JobState"), Some("RUNNING"));
        assert_eq!(field(r, "ArrayTaskId"), Some("2"));
        assert_eq!(field(r, "JobId"), Some("7"));
        assert_eq!(field(r, "Nope"), None);
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("/a/b-c_1.x"), "/a/b-c_1.x");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
