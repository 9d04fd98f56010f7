//! Tracers for unmodified native binaries (PMDK, other allocators, any program
//! that maps PM): they write the same `.pmt` traces as pmsim's own tracer,
//! through the one C trace writer `traces/c/pmt_writer.h`.
//!
//! * [`tool`]: the Valgrind tool `pmtrace` (`pintools/valgrind/pmtrace.c`),
//!   built out of Valgrind's tree against the distribution's tool kit, on
//!   first use, into a cache directory. The crate carries the tool's sources,
//!   so a `pmsim` binary can build it wherever it runs.
//! * [`exec`]: running a program under it into a trace, with one clear error
//!   for each way that can go wrong (`pmsim trace-exec` is a thin layer over
//!   [`trace_exec`]).
//! * [`examples`]: programs worth tracing that pmsim ships as C sources, such
//!   as a Threadtest on PMDK's libpmemobj ([`examples::trace_pmdk_threadtest`]).
//!
//! The Intel Pin tool (`pintools/pin/`) is thin glue over the same writer; Pin
//! cannot be fetched here, so nothing in this crate builds it (see the README).

pub mod error;
pub mod examples;
pub mod exec;
pub mod tool;

pub use error::PintoolsError;
pub use examples::{trace_pmdk_threadtest, Example, PmdkThreadtest};
pub use exec::{trace_exec, TraceExec, Traced};
pub use tool::{cache_dir, ValgrindKit, ValgrindTool};
