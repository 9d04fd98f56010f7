//! The model side of pmsim: a persistent-memory heap on a mapped file, the
//! persistence primitives allocators are written against, and the tracing
//! backend that records what those primitives do.
//!
//! * [`heap`] — the heap file: header page (magic, version, size, clean-shutdown
//!   flag, root table), mapping, offset pointers ([`PmOff`]).
//! * [`pm`] — store / flush / fence / persist / CAS through a per-thread handle
//!   ([`PmThread`]), run natively (real `clwb`/`clflushopt`/`clflush` + `sfence`)
//!   or traced.
//! * [`tracing`] — per-thread event buffers merged into one globally ordered
//!   stream for a [`pmsim_traces::EventSink`] (a `.pmt` file or an in-process
//!   consumer).
//!
//! Allocators are built on these: they keep offsets, not pointers, in the heap,
//! do every persistent write through a `PmThread`, and run their recovery when
//! [`Heap::was_clean`] says the last run did not close the heap.

pub mod alloc;
mod arch;
pub mod config;
pub mod error;
pub mod family;
pub mod fault_in;
pub mod flush;
pub mod heap;
pub mod intmap;
pub mod live;
pub mod llfree;
pub mod makalu;
pub mod mech;
pub mod metall;
pub mod nvalloc;
pub mod nvmmalloc;
pub mod pallocator;
pub mod params;
pub mod pm;
pub mod pmdk;
pub mod pmtrace;
pub mod ralloc;
pub mod registry;
pub mod runner;
pub mod scratch;
pub mod sparse;
pub mod target;
pub mod tracing;
pub mod watch;
pub mod workloads;

pub use alloc::{AllocThread, Allocator, CrashRules, Footprint, HeapNeed, Params, SlabUtilization};
pub use config::AllocConfig;
pub use error::{AllocError, ErrorKind};
pub use heap::{Heap, HeapError, HeapErrorKind, HeapOptions, PmOff, Pod};
pub use pm::{CpuFeatures, FlushInsn, Pm, PmError, PmThread};
pub use pmsim_traces::{Category, OpKind};
pub use tracing::{CollectorStats, Finished, TraceCollector, TraceConfig};
