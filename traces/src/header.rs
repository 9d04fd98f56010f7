//! The JSON header at the start of a trace: which run produced it.

use crate::event::Category;
use serde::{Deserialize, Serialize};

/// Who wrote the trace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tracer {
    /// pmsim's own tracing backend around its allocators.
    #[default]
    Builtin,
    /// The Valgrind tool in `pintools/`.
    Valgrind,
    /// The Intel Pin tool in `pintools/`.
    Pin,
}

impl Tracer {
    /// Whether the traced program ran one thread at a time under this
    /// tracer, so that the trace's recorded order is the order in time of
    /// every event, across threads: Valgrind serializes a program's threads
    /// (one holds its big lock at a time); pmsim's own tracer and Pin let
    /// them run at once.
    pub fn one_thread_at_a_time(self) -> bool {
        self == Tracer::Valgrind
    }
}

/// A named component (allocator or workload) and every parameter it ran with.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Component {
    pub name: String,
    /// A variant of the component, e.g. `log` or `gc` for NVAlloc.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub variant: String,
    pub params: serde_json::Map<String, serde_json::Value>,
}

/// Where the PM heap was mapped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HeapInfo {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub path: String,
    pub base: u64,
    pub size: u64,
}

/// A named address range with a category; statistics are broken down by it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    pub id: u64,
    pub name: String,
    pub category: Category,
    pub base: u64,
    pub len: u64,
}

/// The header of a trace. Every field has a default so that writers in other
/// languages need only write what they know.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TraceHeader {
    pub pmsim_version: String,
    pub tracer: Tracer,
    pub allocator: Component,
    pub workload: Component,
    pub threads: u32,
    /// `clwb`, `clflushopt`, `clflush` or `none` (eADR); empty if unknown.
    pub flush_insn: String,
    pub heap: HeapInfo,
    pub regions: Vec<Region>,
    /// Whether stores carry their value bytes (mirrors the preamble flag).
    pub values: bool,
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Default for TraceHeader {
    fn default() -> Self {
        TraceHeader {
            pmsim_version: env!("CARGO_PKG_VERSION").to_string(),
            tracer: Tracer::Builtin,
            allocator: Component::default(),
            workload: Component::default(),
            threads: 0,
            flush_insn: String::new(),
            heap: HeapInfo::default(),
            regions: Vec::new(),
            values: false,
            extra: serde_json::Map::new(),
        }
    }
}
