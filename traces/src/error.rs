//! The reader's one error type: file, byte offset, problem.

use std::fmt;

/// What kind of problem a reader met; tests and tools match on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Not a `.pmt` file at all.
    BadMagic,
    /// Written by a newer pmsim.
    NewerVersion,
    /// The file stops early (a killed writer, a partial copy).
    Truncated,
    /// A checksum, length or record is wrong.
    Corrupt,
    /// The operating system refused (missing file, permissions, I/O error).
    Io,
}

/// An error reading a trace. Displays as one line: `FILE: byte OFFSET: PROBLEM`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    pub kind: ErrorKind,
    /// The file (or stream name) being read.
    pub path: String,
    /// Byte offset in the file where the problem is.
    pub offset: u64,
    pub problem: String,
}

impl TraceError {
    pub(crate) fn new(kind: ErrorKind, path: &str, offset: u64, problem: impl Into<String>) -> Self {
        TraceError { kind, path: path.to_string(), offset, problem: problem.into() }
    }
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: byte {}: {}", self.path, self.offset, self.problem)
    }
}

impl std::error::Error for TraceError {}
