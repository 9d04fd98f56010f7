//! A thread's handle on an nvm_malloc-style heap: pmsim's calls as
//! reserve + activate and free, with or without a link pointer.

use super::NvmMalloc;
use crate::alloc::AllocThread;
use crate::pm::PmThread;
use pmsim_traces::OpKind;
use std::sync::Arc;

/// One thread's handle (see [`crate::PmAllocator::thread`]).
pub struct NvmThread {
    nvm: Arc<NvmMalloc>,
    t: PmThread,
}

impl NvmThread {
    pub(super) fn new(nvm: Arc<NvmMalloc>, tid: u32) -> NvmThread {
        let t = nvm.pm.thread(tid);
        NvmThread { nvm, t }
    }

    /// The thread's persistence handle.
    pub fn pm(&mut self) -> &mut PmThread {
        &mut self.t
    }

    /// The usable size of the object at `off` (see [`NvmMalloc::usable_size`]).
    pub fn usable_size(&self, off: u64) -> Option<u64> {
        self.nvm.usable_size(&self.t, off)
    }

    fn malloc_impl(&mut self, size: u64, dest: Option<u64>) -> Option<u64> {
        let nvm = &*self.nvm;
        let ptr = nvm.reserve(&mut self.t, size)?;
        nvm.activate(&mut self.t, ptr, dest.map(|d| (d, ptr)));
        let usable = nvm.usable_size(&self.t, ptr).expect("an activated object");
        nvm.live.add(self.t.tid(), usable as i64);
        Some(ptr)
    }

    fn free_impl(&mut self, off: u64, dest: Option<u64>) {
        let nvm = &*self.nvm;
        let usable = nvm.usable_size(&self.t, off).unwrap_or_else(|| panic!("free of {off:#x}: not an allocation"));
        nvm.release(&mut self.t, off, dest.map(|d| (d, 0)));
        nvm.live.add(self.t.tid(), -(usable as i64));
    }
}

impl AllocThread for NvmThread {
    fn malloc(&mut self, size: u64) -> Option<u64> {
        self.t.op_begin(OpKind::Malloc, size);
        let r = self.malloc_impl(size, None);
        self.t.op_end(OpKind::Malloc, r.unwrap_or(0));
        r
    }

    fn free(&mut self, off: u64) {
        if off == 0 {
            return;
        }
        self.t.op_begin(OpKind::Free, off);
        self.free_impl(off, None);
        self.t.op_end(OpKind::Free, 0);
    }

    /// Reserve, then activate with `dest` as the link slot.
    fn malloc_to(&mut self, size: u64, dest: u64) -> Option<u64> {
        self.t.op_begin(OpKind::Malloc, size);
        let r = self.malloc_impl(size, Some(dest));
        self.t.op_end(OpKind::Malloc, r.unwrap_or(0));
        r
    }

    /// Free with `dest` as the link slot, cleared failure-atomically.
    fn free_from(&mut self, dest: u64) {
        let off = self.t.load_u64(dest);
        if off == 0 {
            return;
        }
        self.t.op_begin(OpKind::Free, off);
        self.free_impl(off, Some(dest));
        self.t.op_end(OpKind::Free, 0);
    }

    crate::pm_thread_access!(t);
}
