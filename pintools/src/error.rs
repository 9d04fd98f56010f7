//! What can go wrong when tracing a program: each displays as one line that
//! names the program or file and the problem.

use pmsim_traces::TraceError;
use std::fmt;
use std::io;
use std::path::PathBuf;

#[derive(Debug)]
pub enum PintoolsError {
    /// The program to trace does not exist or is not executable.
    ProgramNotFound(String),
    /// Valgrind, its tool kit or a build tool is missing.
    Missing(String),
    /// Building the tool or an example failed; `log` holds the compiler's last lines.
    Build { what: String, dir: PathBuf, log: String },
    /// An operating-system error, with what was being done.
    Io { what: String, err: io::Error },
    /// A bad option value (e.g. a PM directory that is not a directory).
    BadInput(String),
    /// The program ran but mapped no file under the PM directory and announced
    /// no PM range, so there was nothing to trace.
    /// `failed`: how the program ended when it did not succeed (a program
    /// that refused its arguments maps nothing either, and that is the news).
    NoPmMapping { program: String, pm_dir: PathBuf, failed: Option<String> },
    /// The program was killed (by a signal, or Valgrind itself died): the trace
    /// holds what happened until then and is marked partial in its header (or,
    /// if Valgrind could not finish it, reads as truncated).
    Killed { program: String, signal: Option<i32>, out: PathBuf, events: Option<u64>, hint: &'static str, kept: bool },
    /// The program exited with a non-zero status; its trace is complete.
    Exited { program: String, status: i32, out: PathBuf, events: u64, kept: bool },
    /// Valgrind failed before or around the program (bad tool, bad option).
    Valgrind { status: String, log: String },
    /// The trace written cannot be read back.
    Trace(TraceError),
}

impl PintoolsError {
    pub(crate) fn io(what: impl Into<String>, err: io::Error) -> PintoolsError {
        PintoolsError::Io { what: what.into(), err }
    }
}

/// A conventional name for the signals a traced program usually dies of.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => "signal",
    }
}

impl fmt::Display for PintoolsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PintoolsError::ProgramNotFound(p) => write!(f, "{p}: program not found (or not executable)"),
            PintoolsError::Missing(m) => f.write_str(m),
            PintoolsError::Build { what, dir, log } => {
                write!(f, "building {what} in {} failed: {}", dir.display(), log.trim().replace('\n', " | "))
            }
            PintoolsError::Io { what, err } => write!(f, "{what}: {err}"),
            PintoolsError::BadInput(m) => f.write_str(m),
            PintoolsError::NoPmMapping { program, pm_dir, failed: Some(how) } => write!(
                f,
                "{program} {how} before mapping any PM (no file under {}, no PM range announced): no trace was written",
                pm_dir.display()
            ),
            PintoolsError::NoPmMapping { program, pm_dir, failed: None } => write!(
                f,
                "{program}: no PM mapping seen: it mapped no file under {} and announced no PM range, so no trace was \
                 written (is --pm-dir right?)",
                pm_dir.display()
            ),
            PintoolsError::Killed { program, signal, out, events, hint, kept } => {
                match signal {
                    Some(s) => write!(f, "{program} was killed by signal {s} ({})", signal_name(*s))?,
                    None => write!(f, "{program} did not exit")?,
                }
                if !kept {
                    write!(f, ": its partial trace was not written over the existing {}", out.display())?;
                    return f.write_str(hint);
                }
                match events {
                    Some(n) => write!(
                        f,
                        ": the trace {} is partial ({n} events, marked partial in its header)",
                        out.display()
                    )?,
                    None => {
                        write!(f, ": the trace {} is partial (truncated: Valgrind could not finish it)", out.display())?
                    }
                }
                f.write_str(hint)
            }
            PintoolsError::Exited { program, status, out, events, kept: true } => write!(
                f,
                "{program} exited with status {status} (its trace {} is complete: {events} events)",
                out.display()
            ),
            PintoolsError::Exited { program, status, out, events, kept: false } => write!(
                f,
                "{program} exited with status {status} (its trace of {events} events was not written over the \
                 existing {})",
                out.display()
            ),
            PintoolsError::Valgrind { status, log } => {
                write!(f, "valgrind failed ({status}): {}", log.trim().replace('\n', " | "))
            }
            PintoolsError::Trace(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PintoolsError {}

impl From<TraceError> for PintoolsError {
    fn from(e: TraceError) -> Self {
        PintoolsError::Trace(e)
    }
}
