//! The `.pmt` trace format of pmsim (specified in `FORMAT.md`): the events a
//! program issues to persistent memory, a streaming writer and a streaming
//! reader. Every other part of pmsim — the tracing backend, the C writer of the
//! DBI tracers, the simulator, the crash explorer, the exporters — speaks it.

pub mod children;
pub mod decode;
mod encode;
pub mod error;
pub mod event;
pub mod format;
pub mod header;
pub mod input;
pub mod interrupt;
pub mod output;
pub mod owned;
pub mod reader;
pub mod regions;
pub mod sink;
pub mod sites;
pub mod stats;
pub mod stop;
pub mod synth;
pub mod varint;
pub mod writer;

pub use decode::{BlockDecoder, Visit};
pub use encode::EncodeError;
pub use error::{ErrorKind, TraceError};
pub use event::{
    is_lock_marker, is_thread_marker, line_of, Category, Event, FenceKind, FlushKind, OpKind, OwnedEvent, Record,
    JOIN_MARKER, LINE, LOCK_ACQUIRE_MARKER, LOCK_RELEASE_MARKER, SPAWN_MARKER,
};
pub use header::{Component, HeapInfo, Region, TraceHeader, Tracer};
pub use reader::{Block, TraceReader, TraceTotals};
pub use regions::RegionMap;
pub use sink::{EventSink, VecSink};
pub use sites::{Site, SiteTable};
pub use stats::{RegionCounts, TraceStats};
pub use writer::{TraceFile, TraceWriter, WriteStats, WriterOptions};
