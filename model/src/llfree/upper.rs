//! LLFree's upper level (paper §3.2.2): allocation strategies, all in DRAM.
//!
//! * **Trees**: 32 children (64 MiB) each. A tree entry holds the global free
//!   counter `c_U` and the reserved flag `r`, in one atomic word.
//! * **Per-CPU data** ([`Local`]): the reserved tree, the local free counter
//!   `c_P` (on reservation `c_U` moves to `c_P` and becomes 0, so the owner's
//!   operations touch only its own line), the in-tree reservation flag `t`
//!   and the last allocated child (a last-fit hint), packed in one 64-bit word.
//!   pmsim's threads play the CPUs: thread `tid` uses local `tid % n`, where
//!   `n` is `cpus`, or the number of whole trees if there are fewer (at
//!   least one): as LLFree's code does (llfree-rs, `Array::init`), CPUs share
//!   locals when the memory holds less than a tree per CPU, so that a small
//!   zone is not split into reservations that each CPU then has to steal.
//! * **Reservation** ([`Upper::reserve`], in [`super::reserve`]): the free / partial / allocated
//!   heuristic — the neighbourhood of the current tree first (partial or
//!   free), then the whole array for a partial tree, then a free one, then an
//!   allocated one with enough frames; as a last resort other CPUs' trees are
//!   drained ([`Upper::drain`]) and stolen.
//! * **Reserve-on-free**: after `F` consecutive frees into the same foreign,
//!   partial tree, the freeing CPU reserves it (in [`super::thread`]).
//!
//! The names (reserve, sync, drain, unreserve) are the paper's and those of the
//! actions of the TLA+ spec `specs/LLFreeSingleCAS`.

use super::lower::TREE_CHILDREN;
use super::zone::CHILD_FRAMES;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub(super) const RESERVED: u32 = 1 << 31;
/// Frames of a full tree.
pub const TREE_FRAMES: u32 = TREE_CHILDREN as u32 * CHILD_FRAMES;

/// Trees per neighbourhood: the paper's tree entries on one cache line.
pub(super) const NEIGHBOURHOOD: usize = 32;

/// How a tree's free count classifies it (paper §3.2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Fewer than `allocated` of its frames free (thresholds: [`super::LlFreeConfig`]).
    Allocated,
    Partial,
    /// More than `free` of its frames free.
    Free,
}

/// The packed per-CPU word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalState(u64);

impl LocalState {
    const FREE_BITS: u64 = 20;
    const VALID: u64 = 1 << 62;
    const RESERVING: u64 = 1 << 63;
    pub const NONE: LocalState = LocalState(0);

    pub fn new(child: u64, free: u32) -> LocalState {
        LocalState(Self::VALID | child << Self::FREE_BITS | free as u64)
    }
    pub fn valid(self) -> bool {
        self.0 & Self::VALID != 0
    }
    pub fn reserving(self) -> bool {
        self.0 & Self::RESERVING != 0
    }
    pub fn free(self) -> u32 {
        (self.0 & ((1 << Self::FREE_BITS) - 1)) as u32
    }
    /// The last allocated child (start of the next search).
    pub fn child(self) -> u64 {
        (self.0 & !(Self::VALID | Self::RESERVING)) >> Self::FREE_BITS
    }
    pub fn tree(self) -> u64 {
        self.child() / TREE_CHILDREN
    }
    fn with_free(self, free: u32) -> LocalState {
        LocalState(self.0 & !((1 << Self::FREE_BITS) - 1) | free as u64)
    }
    fn with_child(self, child: u64) -> LocalState {
        LocalState(self.0 & (Self::VALID | Self::RESERVING | ((1 << Self::FREE_BITS) - 1)) | child << Self::FREE_BITS)
    }
    pub(super) fn with_reserving(self, on: bool) -> LocalState {
        LocalState(if on { self.0 | Self::RESERVING } else { self.0 & !Self::RESERVING })
    }
}

/// One CPU's data, on its own cache line.
#[repr(align(64))]
#[derive(Default)]
pub struct Local(AtomicU64);

/// The upper level of one zone.
pub struct Upper {
    pub(super) trees: Box<[AtomicU32]>,
    /// Frames of each tree (the last may be partial).
    capacity: Box<[u32]>,
    pub locals: Box<[Local]>,
    /// Below this many free frames a tree is *allocated*.
    allocated_below: Box<[u32]>,
    /// Above this many free frames a tree is *free*.
    free_above: Box<[u32]>,
}

impl Upper {
    /// The trees of `nhuge` children with their free counts `free[tree]`,
    /// none reserved; `cpus` locals, or one per whole tree if there are fewer
    /// (see the module doc); class thresholds as fractions of a tree.
    pub fn new(nhuge: u64, free: &[u32], cpus: usize, allocated: f64, free_frac: f64) -> Upper {
        let ntrees = nhuge.div_ceil(TREE_CHILDREN) as usize;
        assert_eq!(free.len(), ntrees);
        let capacity: Box<[u32]> = (0..ntrees as u64)
            .map(|i| ((nhuge - i * TREE_CHILDREN).min(TREE_CHILDREN) as u32) * CHILD_FRAMES)
            .collect();
        Upper {
            trees: free.iter().map(|&f| AtomicU32::new(f)).collect(),
            allocated_below: capacity.iter().map(|&c| (c as f64 * allocated) as u32).collect(),
            free_above: capacity.iter().map(|&c| (c as f64 * free_frac) as u32).collect(),
            capacity,
            locals: (0..Upper::locals_for(nhuge, cpus)).map(|_| Local::default()).collect(),
        }
    }

    /// Locals for `cpus` CPUs over `nhuge` children: one per CPU, but no
    /// more than the whole trees, and at least one.
    pub fn locals_for(nhuge: u64, cpus: usize) -> usize {
        cpus.min((nhuge / TREE_CHILDREN) as usize).max(1)
    }

    pub fn ntrees(&self) -> usize {
        self.trees.len()
    }

    /// Children of tree `i`.
    pub fn children(&self, i: u64) -> u64 {
        (self.capacity[i as usize] / CHILD_FRAMES) as u64
    }

    pub fn local(&self, cpu: usize) -> LocalState {
        LocalState(self.locals[cpu].0.load(Ordering::Acquire))
    }

    pub(super) fn cas_local(&self, cpu: usize, cur: LocalState, new: LocalState) -> Result<LocalState, LocalState> {
        self.locals[cpu]
            .0
            .compare_exchange(cur.0, new.0, Ordering::AcqRel, Ordering::Acquire)
            .map(LocalState)
            .map_err(LocalState)
    }

    pub fn class(&self, i: usize, free: u32) -> Class {
        if free < self.allocated_below[i] {
            Class::Allocated
        } else if free > self.free_above[i] {
            Class::Free
        } else {
            Class::Partial
        }
    }

    /// A tree's entry: global free count and reserved flag.
    pub fn tree(&self, i: usize) -> (u32, bool) {
        let e = self.trees[i].load(Ordering::Acquire);
        (e & !RESERVED, e & RESERVED != 0)
    }

    /// Takes `n` frames from the local counter of `cpu` if it holds a tree
    /// with that many: `Some(state before)`.
    #[inline]
    pub fn take_local(&self, cpu: usize, n: u32) -> Option<LocalState> {
        let mut cur = self.local(cpu);
        loop {
            if !cur.valid() || cur.free() < n {
                return None;
            }
            match self.cas_local(cpu, cur, cur.with_free(cur.free() - n)) {
                Ok(s) => return Some(s),
                Err(now) => cur = now,
            }
        }
    }

    /// Gives `n` frames of tree `tree` back: to `cpu`'s local counter if it
    /// still holds that tree, else to the tree's global counter. Returns
    /// whether they went to the local counter.
    #[inline]
    pub fn put_frames(&self, cpu: usize, tree: u64, n: u32) -> bool {
        let mut cur = self.local(cpu);
        while cur.valid() && cur.tree() == tree {
            match self.cas_local(cpu, cur, cur.with_free(cur.free() + n)) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
        self.trees[tree as usize].fetch_add(n, Ordering::AcqRel);
        false
    }

    /// Records the last allocated child of `cpu` (a hint; lost races are harmless).
    #[inline]
    pub fn set_hint(&self, cpu: usize, child: u64) {
        let cur = self.local(cpu);
        if cur.valid() && cur.tree() == child / TREE_CHILDREN && cur.child() != child {
            let _ = self.cas_local(cpu, cur, cur.with_child(child));
        }
    }

    /// `sync`: moves frames freed into `cpu`'s reserved tree by other CPUs
    /// (its global `c_U`) into the local counter. Returns how many.
    pub fn sync(&self, cpu: usize) -> u32 {
        let cur = self.local(cpu);
        if !cur.valid() {
            return 0;
        }
        let tree = cur.tree();
        let got = self.trees[tree as usize].fetch_and(RESERVED, Ordering::AcqRel) & !RESERVED;
        if got > 0 && !self.put_frames(cpu, tree, got) {
            return 0;
        }
        got
    }

    /// Free frames of the whole zone as the upper level counts them (trees'
    /// global counters plus every local counter); exact when quiescent.
    pub fn free_frames(&self) -> u64 {
        let g: u64 = (0..self.trees.len()).map(|i| self.tree(i).0 as u64).sum();
        let l: u64 = (0..self.locals.len()).map(|c| self.local(c)).filter(|s| s.valid()).map(|s| s.free() as u64).sum();
        g + l
    }
}
