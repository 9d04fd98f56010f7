//! The allocator side of crash checking: a small trait that an allocator
//! implements to have its crash images recovered and checked. NVAlloc
//! implements it here; other allocators add an impl and a line in
//! [`target_for`].

use crate::CrashError;
use pmsim_model::nvalloc::{NvAlloc, NvConfig, NvThread};
use pmsim_model::{AllocThread, FlushInsn, Heap, Pm, PmAllocator};
use pmsim_traces::TraceHeader;
use std::sync::Arc;

/// An allocator whose crash images can be recovered.
pub trait CrashTarget: Send + Sync {
    /// A name for reports (the allocator and its variant).
    fn name(&self) -> String;

    /// Whether an allocation made by plain `malloc` (no destination) must
    /// survive a crash once the call returned. True where allocation state
    /// is made durable in the call (NVAlloc-LOG); false where recovery keeps
    /// only what is reachable from the roots (NVAlloc-GC).
    fn plain_mallocs_durable(&self) -> bool;

    /// Live allocations a correct recovery may leave that no operation
    /// accounts for (the default of `--leak-bound`).
    fn leak_allowance(&self) -> u64;

    /// Runs the allocator's own recovery on `heap` (a crash image), as the
    /// next run after a real crash would.
    fn recover(&self, heap: &Heap) -> Result<Box<dyn Recovered>, String>;
}

/// An allocator after recovery, for the checks.
pub trait Recovered {
    /// Every live allocation `(offset, usable size)`, by offset.
    fn live_allocations(&mut self) -> Vec<(u64, u64)>;

    /// Allocates `size` bytes (the checks' probe of the recovered state).
    fn malloc(&mut self, size: u64) -> Option<u64>;
}

/// The target for the allocator a trace header names.
pub fn target_for(h: &TraceHeader) -> Result<Box<dyn CrashTarget>, CrashError> {
    match h.allocator.name.as_str() {
        "nvalloc" => {
            let cfg: NvConfig = serde_json::from_value(serde_json::Value::Object(h.allocator.params.clone()))
                .map_err(|e| CrashError(format!("the trace's NVAlloc configuration is unreadable: {e}")))?;
            Ok(Box::new(NvTarget { cfg }))
        }
        other => Err(CrashError(format!(
            "no crash recovery for allocator '{other}' yet (implement pmsim_crash::CrashTarget for it)"
        ))),
    }
}

/// Blocks NVAlloc-GC's conservative mark may keep alive after a crash.
pub const NVALLOC_GC_LEAKS: u64 = 16;

/// NVAlloc (every preset), with the configuration the trace recorded.
pub struct NvTarget {
    pub cfg: NvConfig,
}

impl CrashTarget for NvTarget {
    fn name(&self) -> String {
        format!("nvalloc ({})", self.cfg.preset)
    }

    fn plain_mallocs_durable(&self) -> bool {
        self.cfg.consistency == pmsim_model::nvalloc::Consistency::Log
    }

    /// None under NVAlloc-LOG (the WAL makes every operation atomic); under
    /// NVAlloc-GC the conservative mark keeps any block that a stale word
    /// (a deleted slot, uninitialised bytes of a reused block) happens to
    /// point to, so a few such blocks are allowed.
    fn leak_allowance(&self) -> u64 {
        match self.cfg.consistency {
            pmsim_model::nvalloc::Consistency::Log => 0,
            pmsim_model::nvalloc::Consistency::Gc => NVALLOC_GC_LEAKS,
        }
    }

    fn recover(&self, heap: &Heap) -> Result<Box<dyn Recovered>, String> {
        // The image is a private copy: flushes are pointless, fences stay.
        let pm = Pm::native(heap, FlushInsn::None).map_err(|e| e.to_string())?;
        let nv = NvAlloc::open(heap, pm, self.cfg.clone()).map_err(|e| e.to_string())?;
        let t = nv.thread(0);
        Ok(Box::new(NvRecovered { nv, t }))
    }
}

struct NvRecovered {
    nv: Arc<NvAlloc>,
    t: NvThread,
}

impl Recovered for NvRecovered {
    fn live_allocations(&mut self) -> Vec<(u64, u64)> {
        self.nv.live_allocations(self.t.pm())
    }

    fn malloc(&mut self, size: u64) -> Option<u64> {
        self.t.malloc(size)
    }
}
