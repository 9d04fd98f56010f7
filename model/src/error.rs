//! The one error type of pmsim's allocators: why a heap could not be
//! created, opened, closed or configured. It carries the allocator's name
//! and, once known, the heap file, so every allocator's errors read the same
//! way on one line: `FILE: corrupt NVAlloc heap: PROBLEM`.

use crate::heap::{Heap, HeapError};
use std::fmt;
use std::path::PathBuf;

/// What went wrong, for callers that react to it (tests, the crash explorer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// An impossible configuration, or one that does not match the heap.
    Config,
    /// A feature that is configured but not implemented yet.
    NotYet,
    /// The heap is too small for the layout.
    TooSmall,
    /// The heap's persistent state is inconsistent.
    Corrupt,
    /// `create` on a heap that already holds this allocator's heap.
    Exists,
    /// `close` while thread handles are alive.
    InUse,
    /// The heap was not closed properly where the allocator needs that (Metall).
    NotClosed,
    /// A file beside the heap could not be read or written (it names itself).
    Store,
    /// The heap file itself (mapping, header): the message names the file.
    Heap,
}

/// Why an allocator's heap could not be created, opened, closed or configured.
/// Displays as one line.
#[derive(Debug)]
pub struct AllocError {
    /// The allocator, as people write it (`NVAlloc`, `LLFree`); empty for an
    /// error of the heap file underneath.
    pub alloc: &'static str,
    pub kind: ErrorKind,
    pub msg: String,
    /// The heap file, once the error has left the allocator's entry points.
    pub file: Option<PathBuf>,
}

impl AllocError {
    pub fn new(alloc: &'static str, kind: ErrorKind, msg: impl Into<String>) -> AllocError {
        AllocError { alloc, kind, msg: msg.into(), file: None }
    }

    pub fn config(alloc: &'static str, msg: impl Into<String>) -> AllocError {
        AllocError::new(alloc, ErrorKind::Config, msg)
    }

    pub fn not_yet(alloc: &'static str, msg: impl Into<String>) -> AllocError {
        AllocError::new(alloc, ErrorKind::NotYet, msg)
    }

    pub fn too_small(alloc: &'static str, msg: impl Into<String>) -> AllocError {
        AllocError::new(alloc, ErrorKind::TooSmall, msg)
    }

    pub fn corrupt(alloc: &'static str, msg: impl Into<String>) -> AllocError {
        AllocError::new(alloc, ErrorKind::Corrupt, msg)
    }

    pub fn exists(alloc: &'static str, msg: impl Into<String>) -> AllocError {
        AllocError::new(alloc, ErrorKind::Exists, msg)
    }

    pub fn in_use(alloc: &'static str, msg: impl Into<String>) -> AllocError {
        AllocError::new(alloc, ErrorKind::InUse, msg)
    }

    pub fn not_closed(alloc: &'static str, msg: impl Into<String>) -> AllocError {
        AllocError::new(alloc, ErrorKind::NotClosed, msg)
    }

    pub fn store(alloc: &'static str, msg: impl Into<String>) -> AllocError {
        AllocError::new(alloc, ErrorKind::Store, msg)
    }

    /// The instance out of its `Arc`, for closing it; an error while thread
    /// handles (which hold clones) are alive.
    pub fn sole_owner<T>(a: std::sync::Arc<T>, alloc: &'static str) -> Result<T, AllocError> {
        std::sync::Arc::try_unwrap(a).map_err(|a| {
            let n = std::sync::Arc::strong_count(&a) - 1;
            AllocError::in_use(
                alloc,
                format!("cannot close {alloc}: {n} thread handle(s) still use it (drop them first)"),
            )
        })
    }

    /// The same error with the heap file named (errors of the heap itself
    /// and of files beside it name their file already).
    pub fn in_file(mut self, heap: &Heap) -> AllocError {
        if self.file.is_none() && !matches!(self.kind, ErrorKind::Heap | ErrorKind::Store) {
            self.file = Some(heap.path().to_path_buf());
        }
        self
    }
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(p) = &self.file {
            write!(f, "{}: ", p.display())?;
        }
        let a = self.alloc;
        match self.kind {
            ErrorKind::Config => write!(f, "{a} configuration: {}", self.msg),
            ErrorKind::NotYet => write!(f, "not implemented yet in pmsim's {a}: {}", self.msg),
            ErrorKind::Corrupt => write!(f, "corrupt {a} heap: {}", self.msg),
            _ => f.write_str(&self.msg),
        }
    }
}

impl std::error::Error for AllocError {}

impl From<HeapError> for AllocError {
    fn from(e: HeapError) -> Self {
        AllocError { alloc: "", kind: ErrorKind::Heap, msg: e.to_string(), file: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_with_the_file_first() {
        let e = AllocError::corrupt("NVAlloc", "bad magic");
        assert_eq!(e.to_string(), "corrupt NVAlloc heap: bad magic");
        let e =
            AllocError { file: Some("/x.heap".into()), ..AllocError::config("LLFree", "cpus = 0 (must be 1..=4096)") };
        assert_eq!(e.to_string(), "/x.heap: LLFree configuration: cpus = 0 (must be 1..=4096)");
        assert_eq!(AllocError::store("Metall", "/d/f: gone").to_string(), "/d/f: gone");
    }
}
