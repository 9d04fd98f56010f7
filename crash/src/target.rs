//! The allocator side of crash checking. An allocator with crash recovery
//! says so on its seam (`pmsim_model::Allocator::crash_rules`) and is found
//! here through the registry by the name its traces record; nothing in this
//! crate names an allocator.

use crate::error::CrashError;
use pmsim_model::family::Family;
pub use pmsim_model::family::{CrashTarget, Recovered};
use pmsim_model::registry;
use pmsim_traces::TraceHeader;

/// The target for the allocator a trace header names, among the registered
/// allocators (and `extra` ones, as a test registers its own).
pub fn target_for(h: &TraceHeader) -> Result<Box<dyn CrashTarget>, CrashError> {
    target_among(h, &[])
}

/// [`target_for`], also looking among `extra` allocators.
pub fn target_among(h: &TraceHeader, extra: &[&'static dyn Family]) -> Result<Box<dyn CrashTarget>, CrashError> {
    let name = h.allocator.name.as_str();
    let family = registry::find(name, extra)
        .ok_or_else(|| CrashError(format!("the trace's allocator '{name}' is not a registered allocator")))?;
    family.crash_target(&h.allocator.params).map_err(CrashError)
}
