//! The interface every allocator pmsim measures offers to workloads: NVAlloc and
//! its ablations, LLFree, the Makalu- and Metall-style allocators, and PMDK's
//! libpmemobj through FFI. Workloads are written once against it.
//!
//! Allocations are named by heap offsets (never pointers), so a heap can be
//! mapped elsewhere after a restart. All access to allocated memory goes through
//! the thread handle, so a traced run records the workload's own stores too
//! (as stores to user data) and the crash explorer can check their contents.

use serde::Serialize;
use std::sync::Arc;

/// How much persistent memory an allocator holds, for footprint figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Footprint {
    /// Bytes handed out to the user and not yet freed (requested sizes).
    pub live_bytes: u64,
    /// Bytes of the heap the allocator has taken for slabs, extents and its own
    /// metadata (what a heap file must be at least, the paper's "memory usage").
    pub mapped_bytes: u64,
}

/// Slabs by how full they are: 0–30 %, 30–70 %, 70–100 % of their blocks in use
/// (the breakdown of the NVAlloc paper's Fig. 15b).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SlabUtilization {
    pub low: u64,
    pub mid: u64,
    pub high: u64,
}

/// An allocator on a persistent heap, shared by all threads of a run.
pub trait PmAllocator: Send + Sync + Sized + 'static {
    /// A thread's handle: its caches and its persistence primitives.
    type Thread: AllocThread;

    /// The preset or variant name, e.g. `nvalloc-log`.
    fn name(&self) -> String;

    /// Every parameter this instance runs with, for trace headers and result rows.
    fn params(&self) -> serde_json::Map<String, serde_json::Value>;

    /// A handle for thread `tid` (ids are small and dense: 0, 1, 2, …).
    fn thread(self: &Arc<Self>, tid: u32) -> Self::Thread;

    fn footprint(&self) -> Footprint;

    /// Slab utilization, for allocators that have slabs.
    fn slab_utilization(&self) -> Option<SlabUtilization> {
        None
    }
}

/// The [`AllocThread`] methods that touch memory, for a thread handle whose
/// [`PmThread`](crate::PmThread) is its field `$t`: they go straight to the
/// persistence primitives (so a traced run records the workload's stores).
/// Expand inside `impl AllocThread for …`.
macro_rules! pm_thread_access {
    ($t:ident) => {
        fn write(&mut self, off: u64, data: &[u8]) {
            self.$t.store_bytes(off, data);
        }

        fn read(&self, off: u64, buf: &mut [u8]) {
            self.$t.load_bytes(off, buf);
        }

        fn persist(&mut self, off: u64, len: u64) {
            self.$t.persist(off, len);
        }

        fn write_u64(&mut self, off: u64, v: u64) {
            self.$t.store_u64(off, v);
        }

        fn read_u64(&self, off: u64) -> u64 {
            self.$t.load_u64(off)
        }

        fn set_root(&mut self, slot: usize, off: u64) {
            self.$t.set_root(slot, off);
        }

        fn root(&self, slot: usize) -> u64 {
            self.$t.root(slot)
        }

        fn idle(&mut self) {
            self.$t.flush_thread();
        }
    };
}
pub(crate) use pm_thread_access;

/// The four allocation methods of [`AllocThread`] for a thread handle whose
/// allocator does the same work with and without a destination word
/// (`malloc_impl(size, Option<dest>)`, `free_impl(off, Option<dest>)`):
/// a `free_from` reads the offset from `*dest` through the thread's
/// primitives (field `$t`), and freeing offset 0 is a no-op, as `free(NULL)`.
/// Expand inside `impl AllocThread for …`.
macro_rules! dest_forwarding_ops {
    ($t:ident) => {
        fn malloc(&mut self, size: u64) -> Option<u64> {
            self.malloc_impl(size, None)
        }

        fn free(&mut self, off: u64) {
            if off != 0 {
                self.free_impl(off, None);
            }
        }

        fn malloc_to(&mut self, size: u64, dest: u64) -> Option<u64> {
            self.malloc_impl(size, Some(dest))
        }

        fn free_from(&mut self, dest: u64) {
            let off = self.$t.load_u64(dest);
            if off != 0 {
                self.free_impl(off, Some(dest));
            }
        }
    };
}
pub(crate) use dest_forwarding_ops;

/// What one thread can do with the allocator and the memory it hands out.
pub trait AllocThread: Send {
    /// Allocates `size` bytes; the offset of the block, or `None` when the heap is full.
    fn malloc(&mut self, size: u64) -> Option<u64>;

    /// Frees the allocation at `off`.
    fn free(&mut self, off: u64);

    /// Allocates `size` bytes and atomically (with respect to crashes) publishes
    /// the offset into the persistent 8-byte location `dest`.
    fn malloc_to(&mut self, size: u64, dest: u64) -> Option<u64>;

    /// Frees the allocation whose offset is stored at `dest` and atomically
    /// clears `dest` (unless [`AllocThread::free_from_leaves_dest`]).
    fn free_from(&mut self, dest: u64);

    /// Whether `free_from` may leave `dest` as it is (NVAlloc's public code
    /// does for small blocks, `wal=artifact`): the program clears its pointer
    /// itself, with no flush, and a crash may leave it naming the freed block.
    fn free_from_leaves_dest(&self) -> bool {
        false
    }

    /// Writes workload data at heap offset `off` (inside an allocation).
    fn write(&mut self, off: u64, data: &[u8]);

    /// Reads heap memory at `off`.
    fn read(&self, off: u64, buf: &mut [u8]);

    /// Makes `[off, off + len)` durable (flushes and a fence, or nothing under eADR).
    fn persist(&mut self, off: u64, len: u64);

    /// Stores an 8-byte word (e.g. an offset into another allocation).
    fn write_u64(&mut self, off: u64, v: u64) {
        self.write(off, &v.to_le_bytes());
    }

    fn read_u64(&self, off: u64) -> u64 {
        let mut b = [0u8; 8];
        self.read(off, &mut b);
        u64::from_le_bytes(b)
    }

    /// Sets persistent root `slot` to `off` (durably).
    fn set_root(&mut self, slot: usize, off: u64);

    fn root(&self, slot: usize) -> u64;

    /// Called before the thread blocks for long (a barrier, a condition
    /// variable): lets a traced run hand over its buffered events.
    fn idle(&mut self) {}
}
