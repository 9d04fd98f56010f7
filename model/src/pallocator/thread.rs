//! A thread's handle on a PAllocator-style heap: its micro-log cursor and
//! pmsim's calls as `allocate` / `deallocate` through the caller's pointer
//! (or none).

use super::PAllocator;
use crate::alloc::AllocThread;
use crate::mech::wal::WalCursor;
use crate::pm::PmThread;
use pmsim_traces::OpKind;
use std::sync::Arc;

/// One thread's handle (see [`crate::Allocator::thread`]).
pub struct PThread {
    pa: Arc<PAllocator>,
    t: PmThread,
    log: WalCursor,
}

impl PThread {
    pub(super) fn new(pa: Arc<PAllocator>, tid: u32) -> PThread {
        let t = pa.pm.thread(tid);
        let log = pa.wal().cursor(tid);
        PThread { pa, t, log }
    }

    /// The thread's persistence handle.
    pub fn pm(&mut self) -> &mut PmThread {
        &mut self.t
    }

    fn malloc_impl(&mut self, size: u64, dest: Option<u64>) -> Option<u64> {
        self.t.op_begin(OpKind::Malloc, size);
        let r = self.pa.alloc(&mut self.t, &mut self.log, size, dest);
        if let Some((_, usable)) = r {
            self.pa.live.add(self.t.tid(), usable as i64);
        }
        self.t.op_end(OpKind::Malloc, r.map_or(0, |r| r.0));
        r.map(|r| r.0)
    }

    fn free_impl(&mut self, off: u64, dest: Option<u64>) {
        self.t.op_begin(OpKind::Free, off);
        let usable = self.pa.release(&mut self.t, &mut self.log, off, dest);
        self.pa.live.add(self.t.tid(), -(usable as i64));
        self.t.op_end(OpKind::Free, 0);
    }
}

impl AllocThread for PThread {
    crate::dest_forwarding_ops!(t);
    crate::pm_thread_access!(t);
}
