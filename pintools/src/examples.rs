//! Programs pmsim ships as C sources to trace with the Valgrind tool, built
//! (and cached) on demand like the tool itself.
//!
//! The one here is Threadtest on PMDK's libpmemobj
//! (`pintools/examples/pmdk_threadtest.c`): PMDK is the allocator the NVAlloc
//! paper compares against, and pmsim's own tracer cannot see inside it.

use crate::error::PintoolsError;
use crate::exec::{trace_exec, TraceExec, Traced};
use crate::tool::{cache_dir, publish, run_build, scratch, CLIENT_HEADERS};
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// An example program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Example {
    /// `pmdk_threadtest POOL_DIR [ITERATIONS [OBJECTS [SIZE [THREADS [API]]]]]`,
    /// API `atomic` (default), `tx` or `tx-unlogged` (a mutation: a slot
    /// stored in a transaction that does not log it).
    PmdkThreadtest,
}

impl Example {
    pub const ALL: [Example; 1] = [Example::PmdkThreadtest];

    pub fn name(self) -> &'static str {
        match self {
            Example::PmdkThreadtest => "pmdk-threadtest",
        }
    }

    pub fn from_name(s: &str) -> Option<Example> {
        Example::ALL.into_iter().find(|e| e.name() == s)
    }

    fn source(self) -> (&'static str, &'static str) {
        match self {
            Example::PmdkThreadtest => ("pmdk_threadtest.c", include_str!("../examples/pmdk_threadtest.c")),
        }
    }

    fn libs(self) -> &'static [&'static str] {
        match self {
            Example::PmdkThreadtest => &["-lpmemobj", "-lpthread"],
        }
    }

    /// The allocator and workload names its traces carry in their header.
    pub fn labels(self) -> (&'static str, &'static str) {
        match self {
            Example::PmdkThreadtest => ("pmdk", "threadtest"),
        }
    }

    /// Environment the example needs to behave on a PM directory under
    /// Valgrind: PMDK flushes cache lines only on what it takes for PM (on
    /// /dev/shm it would msync instead), and must pick clflush (Valgrind
    /// hides the others anyway; saying so makes it explicit).
    pub fn env(self) -> Vec<(OsString, OsString)> {
        match self {
            Example::PmdkThreadtest => ["PMEM_IS_PMEM_FORCE", "PMEM_NO_CLWB", "PMEM_NO_CLFLUSHOPT"]
                .into_iter()
                .map(|k| (k.into(), "1".into()))
                .collect(),
        }
    }

    /// Compiles the example into `cache` (once per source version) and
    /// returns the executable. Needs a C compiler and, for PMDK,
    /// `libpmemobj-dev`.
    pub fn build(self, cache: &Path) -> Result<PathBuf, PintoolsError> {
        let (file, text) = self.source();
        let mut h = crc32fast::Hasher::new();
        h.update(text.as_bytes());
        for (_, t) in CLIENT_HEADERS {
            h.update(t.as_bytes());
        }
        let dir = cache.join(format!("{}-{:08x}", self.name(), h.finalize()));
        let exe = dir.join(self.name());
        if exe.is_file() {
            return Ok(exe);
        }
        let tmp = scratch(cache, self.name())?;
        let write = |name: &str, text: &str| {
            fs::write(tmp.join(name), text).map_err(|e| PintoolsError::io(format!("writing {}", tmp.display()), e))
        };
        write(file, text)?;
        for (name, t) in CLIENT_HEADERS {
            write(name, t)?;
        }
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let mut cmd = Command::new(cc);
        cmd.current_dir(&tmp).args(["-O2", "-g", "-Wall", "-I.", file, "-o", self.name()]).args(self.libs());
        if let Err(e) = run_build(&mut cmd, &format!("the example {}", self.name()), &tmp) {
            let _ = fs::remove_dir_all(&tmp);
            return Err(e);
        }
        publish(&tmp, &dir)?;
        Ok(exe)
    }

    /// A [`TraceExec`] that runs the example (built into `cache`) with its
    /// environment and header labels; `args` follow the PM directory, which
    /// the example takes first (it puts its heap or pool there).
    pub fn trace_exec(
        self,
        cache: &Path,
        pm_dir: &Path,
        args: Vec<OsString>,
        out: impl Into<PathBuf>,
    ) -> Result<TraceExec, PintoolsError> {
        let exe = self.build(cache)?;
        // The pool goes into a directory of this process's under the PM
        // directory: an interrupted or killed run's pool is removed with
        // it, and no file of the user's there is touched.
        let pool_dir = pmsim_traces::owned::scratch_dir_in(pm_dir)
            .map_err(|e| PintoolsError::io(format!("making a scratch directory in {}", pm_dir.display()), e))?;
        let mut all = vec![pool_dir.into_os_string()];
        all.extend(args);
        let mut t = TraceExec::new(exe, all, out);
        t.pm_dir = pm_dir.to_path_buf();
        t.env = self.env();
        let (a, w) = self.labels();
        t.allocator = a.into();
        t.workload = w.into();
        t.cache = Some(cache.to_path_buf());
        Ok(t)
    }
}

/// Parameters of a PMDK Threadtest run (the program's arguments).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PmdkThreadtest {
    pub iterations: u64,
    pub objects: u64,
    pub size: u64,
    pub threads: u32,
}

impl Default for PmdkThreadtest {
    /// pmsim's `--scale tiny` Threadtest: 20 iterations of 5000 objects of 64 B.
    fn default() -> Self {
        PmdkThreadtest { iterations: 20, objects: 5000, size: 64, threads: 1 }
    }
}

/// Builds the PMDK Threadtest (and the tool) if needed, runs it under the
/// Valgrind tool with its pool under `pm_dir`, and returns the trace at `out`
/// (replaced if it exists), the program's own output discarded: what a sweep
/// calls to put PMDK beside NVAlloc.
pub fn trace_pmdk_threadtest(p: &PmdkThreadtest, pm_dir: &Path, out: &Path) -> Result<Traced, PintoolsError> {
    let args = [p.iterations, p.objects, p.size, p.threads as u64].iter().map(|v| v.to_string().into()).collect();
    let mut t = Example::PmdkThreadtest.trace_exec(&cache_dir(), pm_dir, args, out)?;
    (t.force, t.quiet) = (true, true);
    trace_exec(&t)
}
