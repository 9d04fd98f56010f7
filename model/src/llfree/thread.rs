//! A thread's handle on LLFree: the paper's allocation and free algorithms
//! (Fig. 14) over the upper and lower level, behind [`AllocThread`].
//!
//! `get` of order `o` (`n = 2^o` frames):
//! 1. take `n` from the CPU's local counter `c_P`; if it is short, `sync`
//!    with the tree's global `c_U`, else `reserve` a new tree;
//! 2. search the reserved tree's children from the last-fit hint for one
//!    that serves the order (lower-level `get`); if none does (the tree is
//!    fragmented for this order), give `n` back and reserve another tree.
//!
//! `put`: the lower-level `put`, then `n` back to the local counter if the
//! frame is from the CPU's tree, else to that tree's global counter — and
//! after `F` consecutive frees into one foreign *partial* tree the CPU
//! reserves it (reserve-on-free).
//!
//! # `malloc_to` / `free_from`
//!
//! LLFree has no such API; pmsim's is the simple, crash-safe one:
//! `malloc_to` allocates (its bit or child CAS flushed and fenced), then
//! stores and persists `*dest`; `free_from` stores and persists `*dest = 0`,
//! then frees. A crash between the two steps leaves a frame allocated but
//! unreachable from `dest` — one of the paper's *lost frames*, at most one
//! per thread — but never a `dest` naming a free frame.

use super::upper::Class;
use super::zone::{CHILD_FRAMES, FRAME, HUGE};
use super::LlFree;
use super::Mutation;
use crate::alloc::AllocThread;
use crate::pm::PmThread;
use pmsim_traces::OpKind;
use std::sync::Arc;

/// The orders LLFree serves here: base and huge frames.
pub const ORDERS: [u32; 2] = [0, 9];

/// The smallest supported order whose frame holds `size` bytes, if any.
pub fn order_of(size: u64) -> Option<u32> {
    match size {
        0..=FRAME => Some(0),
        s if s <= HUGE => Some(9),
        _ => None,
    }
}

/// One thread's handle (see [`crate::Allocator::thread`]).
pub struct LlFreeThread {
    ll: Arc<LlFree>,
    t: PmThread,
    /// The CPU whose local data this thread uses.
    cpu: usize,
    /// Reserve-on-free: the foreign tree the last frees went to, and how many in a row.
    free_tree: u64,
    free_run: u32,
}

impl LlFreeThread {
    pub(super) fn new(ll: Arc<LlFree>, tid: u32) -> LlFreeThread {
        let t = ll.pm.thread(tid);
        let cpu = tid as usize % ll.upper.locals.len();
        LlFreeThread { ll, t, cpu, free_tree: u64::MAX, free_run: 0 }
    }

    /// The allocator this handle belongs to.
    pub fn allocator(&self) -> &Arc<LlFree> {
        &self.ll
    }

    /// The thread's persistence handle.
    pub fn pm(&mut self) -> &mut PmThread {
        &mut self.t
    }

    /// The CPU (local data slot) of this thread.
    pub fn cpu(&self) -> usize {
        self.cpu
    }

    /// Every allocated block `(offset, bytes)` (see [`LlFree::allocations`]).
    pub fn allocations(&self) -> Vec<(u64, u64)> {
        self.ll.allocations(&self.t)
    }

    /// Allocates a frame of `order` (0 or 9); its frame number.
    pub fn get(&mut self, order: u32) -> Option<u64> {
        debug_assert!(ORDERS.contains(&order));
        let LlFreeThread { ll, t, cpu, .. } = self;
        let (ll, up, cpu) = (&**ll, &ll.upper, *cpu);
        let n = 1u32 << order;
        // Every round either allocates, or takes frames from sync, or moves
        // to another tree: bounded by the trees (twice, for races).
        for _ in 0..2 * up.ntrees() + 8 {
            if let Some(s) = up.take_local(cpu, n) {
                let tree = s.tree();
                if let Some(pfn) = get_in_tree(ll, t, tree, s.child(), order) {
                    up.set_hint(cpu, pfn / CHILD_FRAMES as u64);
                    return Some(pfn);
                }
                // Fragmented for this order: give the frames back, move on.
                up.put_frames(cpu, tree, n);
            } else if up.sync(cpu) > 0 {
                continue;
            }
            if !up.reserve(cpu, n, None) {
                return None;
            }
        }
        None
    }

    /// Frees frame `pfn` (its order is the child's: huge flag or base).
    pub fn put(&mut self, pfn: u64) -> u32 {
        let ll = &*self.ll;
        let c = pfn / CHILD_FRAMES as u64;
        let order = if ll.lower.child(&self.t, c).huge() {
            assert!(pfn.is_multiple_of(CHILD_FRAMES as u64), "free of frame {pfn}: inside an allocated huge frame");
            ll.lower.put_huge(&mut self.t, c);
            9
        } else {
            ll.lower.put_base(&mut self.t, pfn);
            0
        };
        let tree = c / super::lower::TREE_CHILDREN;
        if !ll.upper.put_frames(self.cpu, tree, 1 << order) {
            self.reserve_on_free(tree);
        }
        order
    }

    /// After `F` consecutive frees into the same foreign partial tree,
    /// reserve it (the paper's reserve-on-free, §3.2.2).
    fn reserve_on_free(&mut self, tree: u64) {
        let f = self.ll.cfg.reserve_on_free;
        if f == 0 {
            return;
        }
        if self.free_tree == tree {
            self.free_run += 1;
        } else {
            (self.free_tree, self.free_run) = (tree, 1);
        }
        if self.free_run >= f {
            self.free_run = 0;
            let up = &self.ll.upper;
            let (free, reserved) = up.tree(tree as usize);
            if !reserved && up.class(tree as usize, free) == Class::Partial {
                up.reserve(self.cpu, 0, Some(tree as usize));
            }
        }
    }

    fn malloc_impl(&mut self, size: u64, dest: Option<u64>) -> Option<u64> {
        self.t.op_begin(OpKind::Malloc, size);
        let r = order_of(size).and_then(|o| self.get(o).map(|pfn| (o, pfn)));
        let off = r.map(|(o, pfn)| {
            let off = self.ll.lower.zone.frame_off(pfn);
            if let Some(d) = dest {
                self.t.store_u64(d, off);
                if self.ll.cfg.persist() {
                    self.t.persist(d, 8);
                }
            }
            self.ll.account(self.t.tid(), (FRAME << o) as i64);
            off
        });
        self.t.op_end(OpKind::Malloc, off.unwrap_or(0));
        off
    }

    fn free_impl(&mut self, off: u64, dest: Option<u64>) {
        self.t.op_begin(OpKind::Free, off);
        let pfn = self.ll.lower.zone.pfn_of(off).unwrap_or_else(|| panic!("free of heap offset {off:#x}: not a frame"));
        // The mutation swaps the two steps (see [`Mutation::FreeBeforeUnpublish`]).
        let swapped = self.ll.cfg.mutation == Mutation::FreeBeforeUnpublish;
        let order = if swapped { Some(self.put(pfn)) } else { None };
        if let Some(d) = dest {
            self.t.store_u64(d, 0);
            if self.ll.cfg.persist() {
                self.t.persist(d, 8);
            }
        }
        let order = order.unwrap_or_else(|| self.put(pfn));
        self.ll.account(self.t.tid(), -((FRAME << order) as i64));
        self.t.op_end(OpKind::Free, 0);
    }
}

impl AllocThread for LlFreeThread {
    crate::dest_forwarding_ops!(t);

    crate::pm_thread_access!(t);
}

/// Lower-level `get` in the children of `tree`, from child `start` on.
fn get_in_tree(ll: &LlFree, t: &mut PmThread, tree: u64, start: u64, order: u32) -> Option<u64> {
    let cnt = ll.upper.children(tree);
    let first = tree * super::lower::TREE_CHILDREN;
    let from = start.saturating_sub(first) % cnt;
    for k in 0..cnt {
        let c = first + (from + k) % cnt;
        if order == 0 {
            if let Some(pfn) = ll.lower.get_base(t, c) {
                return Some(pfn);
            }
        } else if ll.lower.get_huge(t, c) {
            return Some(c * CHILD_FRAMES as u64);
        }
    }
    None
}
