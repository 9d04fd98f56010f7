//! Running a program under the Valgrind tool into a `.pmt` trace.

use crate::error::PintoolsError;
use crate::tool::{cache_dir, is_executable, which, ValgrindTool};
use pmsim_traces::output::{Pending, Policy};
use pmsim_traces::{ErrorKind, TraceError, TraceHeader, TraceReader, TraceStats};
use std::ffi::OsString;
use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// What to trace and how.
#[derive(Clone, Debug)]
pub struct TraceExec {
    /// The program: a path, or a name looked up on `$PATH`.
    pub program: OsString,
    pub args: Vec<OsString>,
    /// The trace to write.
    pub out: PathBuf,
    /// Files mapped from under this directory are PM (e.g. `/dev/shm`, a DAX mount).
    pub pm_dir: PathBuf,
    /// Record the bytes of every PM store (needed for crash states), and the
    /// heap's bytes when tracing starts into `OUT.img` (the image the crash
    /// explorer applies the stores to), named with its CRC-32 in the header.
    pub values: bool,
    /// Replace an existing trace file.
    pub force: bool,
    /// Names for the trace header (empty: left out).
    pub allocator: String,
    pub workload: String,
    /// Record the marker `window:FUNCTION` at the first call of this function
    /// (empty: none), so that `pmsim sim` reports the figures from there on.
    pub window_at: String,
    /// Extra environment for the program.
    pub env: Vec<(OsString, OsString)>,
    /// Where the tool is built and cached ([`cache_dir`] by default).
    pub cache: Option<PathBuf>,
    /// Discard the program's standard output (its standard error, where
    /// programs say what went wrong, still passes through).
    pub quiet: bool,
    /// Write the program's standard output into this file instead (e.g. a
    /// `pmsim run --json` report of the traced run itself).
    pub stdout: Option<PathBuf>,
}

impl TraceExec {
    /// Tracing `program args…` into `out`, PM under `/dev/shm`.
    pub fn new(program: impl Into<OsString>, args: Vec<OsString>, out: impl Into<PathBuf>) -> TraceExec {
        TraceExec {
            program: program.into(),
            args,
            out: out.into(),
            pm_dir: PathBuf::from("/dev/shm"),
            values: false,
            force: false,
            allocator: String::new(),
            workload: String::new(),
            window_at: String::new(),
            env: Vec::new(),
            cache: None,
            quiet: false,
            stdout: None,
        }
    }
}

/// A finished trace.
#[derive(Clone, Debug)]
pub struct Traced {
    pub out: PathBuf,
    pub header: TraceHeader,
    /// Counts of the trace, read back with pmsim's reader.
    pub stats: TraceStats,
    /// Wall time of the traced run (Valgrind included, the tool build not).
    pub elapsed: Duration,
    /// The tool's warnings (e.g. a `--window-at` function never called), one
    /// line each, without the `pmtrace: warning: ` prefix.
    pub warnings: Vec<String>,
}

/// The program to run: an existing executable path, or a name on `$PATH`.
fn resolve(program: &OsString) -> Result<PathBuf, PintoolsError> {
    let p = Path::new(program);
    let found = if p.components().count() > 1 || p.is_absolute() {
        is_executable(p).then(|| p.to_path_buf())
    } else {
        which(program)
    };
    found.ok_or_else(|| PintoolsError::ProgramNotFound(p.display().to_string()))
}

/// Runs `opts.program` under the Valgrind tool `pmtrace` (building it on
/// first use) and reads the trace back.
///
/// Errors, each one line: the program is not found; the PM directory is not
/// one; the trace exists (without `force`), is not a regular file, is the
/// program, or is being written by another pmsim; Valgrind or its tool kit is
/// missing or the tool does not build; the program maps no PM (no trace is
/// left); the program is killed (the trace is kept, marked partial in its
/// header); the program exits non-zero (the trace is kept, complete).
pub fn trace_exec(opts: &TraceExec) -> Result<Traced, PintoolsError> {
    let program = resolve(&opts.program)?;
    let name = Path::new(&opts.program).display().to_string();
    if !opts.pm_dir.is_dir() {
        return Err(PintoolsError::BadInput(format!("{}: the PM directory is not a directory", opts.pm_dir.display())));
    }
    // Mappings are recognised by the path the kernel reports, which is canonical.
    let pm_dir = fs::canonicalize(&opts.pm_dir)
        .map_err(|e| PintoolsError::io(format!("resolving {}", opts.pm_dir.display()), e))?;
    // The trace goes through pmsim's output policy: checked before anything
    // runs (an existing file only with `force`, never the program itself or
    // anything not a regular file), one writer at a time, written by the
    // tool under a temporary name and renamed into place only when there is
    // a trace to keep, so a failed run leaves an existing file as it was.
    let mut policy = Policy::new(opts.force);
    policy.input(&program);
    policy.check(&opts.out).map_err(PintoolsError::BadInput)?;
    // A failed program's trace is kept only where it replaces nothing.
    let replaces = fs::symlink_metadata(&opts.out).is_ok();
    let out = policy.create(&opts.out).map_err(PintoolsError::BadInput)?;
    let tmp = out.tmp_path();
    // With values, the heap image beside it (`OUT.img`, as `pmsim run
    // --values` names it), under the same policy and committed with it.
    let image = if opts.values {
        let path = image_path(&opts.out);
        Some(policy.create(&path).map_err(PintoolsError::BadInput)?)
    } else {
        None
    };
    let cache = opts.cache.clone().unwrap_or_else(cache_dir);
    let tool = ValgrindTool::ensure(&cache)?;

    // Valgrind's own messages go to a log of their own, so that the program's
    // stdout and stderr pass through untouched.
    let log = pmsim_traces::owned::scratch_path(pmsim_traces::owned::Place::Temp, "trace-exec.log")
        .map_err(|e| PintoolsError::io("making a scratch directory", e))?;
    let mut cmd = Command::new(&tool.kit.valgrind);
    cmd.env("VALGRIND_LIB", &tool.lib_dir)
        .arg("--tool=pmtrace")
        .arg(format!("--log-file={}", log.display()))
        .arg(format!("--pmt-out={}", tmp.display()))
        .arg(format!("--pm-dir={}", pm_dir.display()))
        .arg(format!("--pmt-values={}", if opts.values { "yes" } else { "no" }))
        .arg(format!("--pmt-pmsim-version={}", env!("CARGO_PKG_VERSION")));
    if !opts.allocator.is_empty() {
        cmd.arg(format!("--pmt-allocator={}", opts.allocator));
    }
    if !opts.workload.is_empty() {
        cmd.arg(format!("--pmt-workload={}", opts.workload));
    }
    if !opts.window_at.is_empty() {
        cmd.arg(format!("--pmt-window-at={}", opts.window_at));
    }
    if let Some(img) = &image {
        let name = img.path().file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        cmd.arg(format!("--pmt-image={}", img.tmp_path().display())).arg(format!("--pmt-image-name={name}"));
    }
    cmd.arg("--").arg(&program).args(&opts.args).envs(opts.env.iter().map(|(k, v)| (k, v)));
    if let Some(path) = &opts.stdout {
        let f = fs::File::create(path).map_err(|e| PintoolsError::io(format!("creating {}", path.display()), e))?;
        cmd.stdout(f);
    } else if opts.quiet {
        cmd.stdout(std::process::Stdio::null());
    }
    let start = Instant::now();
    let status = pmsim_traces::children::status(&mut cmd)
        .map_err(|e| PintoolsError::io(format!("running {}", tool.kit.valgrind.display()), e))?;
    let elapsed = start.elapsed();
    let log_text = fs::read_to_string(&log).unwrap_or_default();
    let _ = fs::remove_file(&log);

    if log_text.contains("failed to start tool") || log_text.contains("Bad option") {
        return Err(PintoolsError::Valgrind { status: status.to_string(), log: log_tail(&log_text) });
    }
    // The tool removes its trace when the program mapped no PM.
    if !tmp.exists() {
        if log_text.contains("no PM mapping seen") {
            let failed = match (status.code(), status.signal()) {
                (Some(0), _) => None,
                (Some(c), _) => Some(format!("exited with status {c}")),
                (None, Some(s)) => Some(format!("was killed by signal {s} ({})", crate::error::signal_name(s))),
                (None, None) => Some(format!("ended with {status}")),
            };
            return Err(PintoolsError::NoPmMapping { program: name, pm_dir, failed });
        }
        return Err(PintoolsError::Valgrind { status: status.to_string(), log: log_tail(&log_text) });
    }
    // SIGILL under Valgrind 3.19 is most often a clwb/clflushopt it cannot decode.
    let hint = if status.signal() == Some(4) || log_text.contains("unhandled instruction bytes") {
        " (Valgrind 3.19 cannot decode clwb/clflushopt: make the program use clflush, e.g. PMDK with \
         PMEM_NO_CLWB=1 PMEM_NO_CLFLUSHOPT=1, pmsim with --flush-insn clflush)"
    } else {
        ""
    };
    let mut reader = TraceReader::open(&tmp).map_err(|e| named(e, &tmp, &opts.out))?;
    let header = reader.header().clone();
    let scanned = TraceStats::scan(&mut reader);
    drop(reader);
    // What the run left is kept (a partial or failed program's trace says so
    // in its header) unless it cannot be read at all, or the program failed
    // and it would replace an existing file (nothing the user had is lost).
    let partial = header.extra.get("partial").and_then(|v| v.as_bool()).unwrap_or(false);
    let succeeded = scanned.is_ok() && !partial && status.success();
    let keep = match &scanned {
        Ok(_) => succeeded || !replaces,
        Err(e) => e.kind == ErrorKind::Truncated && !replaces,
    };
    if keep {
        let mut pending = Pending::default();
        if let Some(img) = image.filter(|_| header.extra.contains_key("heap_image")) {
            let path = img.path().to_path_buf();
            pending.push(img.finish().map_err(|e| PintoolsError::io(format!("writing {}", path.display()), e))?);
        }
        pending.push(out.finish().map_err(|e| PintoolsError::io(format!("writing {}", opts.out.display()), e))?);
        pending.commit().map_err(PintoolsError::BadInput)?;
    }
    let stats = match scanned {
        Ok(s) => s,
        Err(e) if e.kind == ErrorKind::Truncated => {
            return Err(PintoolsError::Killed {
                program: name,
                signal: status.signal(),
                out: opts.out.clone(),
                events: None,
                hint,
                kept: keep,
            })
        }
        Err(e) => return Err(named(e, &tmp, &opts.out)),
    };
    if partial || status.signal().is_some() {
        return Err(PintoolsError::Killed {
            program: name,
            signal: status.signal(),
            out: opts.out.clone(),
            events: Some(stats.events),
            hint,
            kept: keep,
        });
    }
    match status.code() {
        Some(0) => {
            let warnings = log_text
                .lines()
                .filter_map(|l| l.split_once("pmtrace: warning: ").map(|(_, w)| w.trim().to_string()))
                .collect();
            Ok(Traced { out: opts.out.clone(), header, stats, elapsed, warnings })
        }
        Some(code) => Err(PintoolsError::Exited {
            program: name,
            status: code,
            out: opts.out.clone(),
            events: stats.events,
            kept: keep,
        }),
        None => Err(PintoolsError::Valgrind { status: status.to_string(), log: log_tail(&log_text) }),
    }
}

/// Where the heap image of the trace `out` goes: `OUT.img`.
pub fn image_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".img");
    out.with_file_name(name)
}

/// A trace error about the temporary file, told of the file the user named.
fn named(e: TraceError, tmp: &Path, out: &Path) -> PintoolsError {
    let text = e.to_string().replace(&tmp.display().to_string(), &out.display().to_string());
    PintoolsError::BadInput(text)
}

/// Valgrind's lines worth showing: its errors, without the banner.
fn log_tail(log: &str) -> String {
    let lines: Vec<&str> = log
        .lines()
        .map(|l| l.trim_start_matches(|c: char| c == '=' || c.is_ascii_digit()).trim())
        .filter(|l| !l.is_empty())
        .collect();
    lines[lines.len().saturating_sub(4)..].join("\n")
}
