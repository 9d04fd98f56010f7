//! Tree reservation (paper §3.2.2): how a CPU gets a tree of its own and
//! gives it back.
//!
//! A reservation is one CAS of a tree entry from `(c_U, r=0)` to `(0, r=1)`;
//! the frames move to the CPU's local counter. The search follows the
//! paper's heuristic, which keeps almost-free trees free (fewer fragmented
//! huge frames) and avoids almost-allocated ones (allocations would soon fail
//! there again):
//!
//! 1. the neighbourhood of the current tree (the 32 entries of its group):
//!    a *partial* or *free* tree;
//! 2. the whole array, first fit from the current tree: a *partial* tree;
//! 3. then a *free* tree, then an *allocated* one with enough frames;
//! 4. last resort: drain the other CPUs' trees and search again.
//!
//! Named as in the paper and in the TLA+ spec `specs/LLFreeSingleCAS`
//! (reserve, unreserve, drain).

use super::lower::TREE_CHILDREN;
use super::upper::{Class, LocalState, Upper, NEIGHBOURHOOD, RESERVED};
use std::sync::atomic::Ordering;

impl Upper {
    /// Tries to reserve tree `i` if `ok(class, free)`: one CAS from
    /// `(c_U, r=0)` to `(0, r=1)`. Returns the free frames taken.
    fn try_reserve(&self, i: usize, ok: impl Fn(Class, u32) -> bool) -> Option<u32> {
        let e = self.trees[i].load(Ordering::Acquire);
        if e & RESERVED != 0 || !ok(self.class(i, e), e) {
            return None;
        }
        self.trees[i].compare_exchange(e, RESERVED, Ordering::AcqRel, Ordering::Acquire).ok().map(|_| e)
    }

    /// `unreserve`: returns a tree with `free` frames of a local counter.
    pub fn unreserve(&self, i: u64, free: u32) {
        let t = &self.trees[i as usize];
        let mut cur = t.load(Ordering::Acquire);
        loop {
            debug_assert!(cur & RESERVED != 0, "unreserving tree {i}, which is not reserved");
            match t.compare_exchange(cur, (cur & !RESERVED) + free, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(now) => cur = now,
            }
        }
    }

    /// The reservation search for a tree with at least `n` free frames,
    /// starting near tree `near`: returns the tree and the frames taken.
    fn search(&self, near: usize, n: u32) -> Option<(usize, u32)> {
        let nt = self.trees.len();
        let enough = move |f: u32| f >= n;
        // 1. The neighbourhood: partial or free.
        let base = near / NEIGHBOURHOOD * NEIGHBOURHOOD;
        for k in 0..NEIGHBOURHOOD.min(nt - base) {
            let i = base + (near - base + k) % NEIGHBOURHOOD.min(nt - base);
            if let Some(f) = self.try_reserve(i, |c, f| c != Class::Allocated && enough(f)) {
                return Some((i, f));
            }
        }
        // 2.–3. The whole array: partial, then free, then allocated with enough.
        for want in [Class::Partial, Class::Free, Class::Allocated] {
            for k in 0..nt {
                let i = (near + k) % nt;
                if let Some(f) = self.try_reserve(i, |c, f| c == want && enough(f)) {
                    return Some((i, f));
                }
            }
        }
        None
    }

    /// `reserve`: gives `cpu` a new tree with at least `n` free frames (or a
    /// specific `tree`, for reserve-on-free) and returns the old one to the
    /// trees array. The current tree is never picked again (it is reserved),
    /// so a caller whose tree is too fragmented for the request moves on.
    /// False when no tree qualifies (after draining the others' trees).
    pub fn reserve(&self, cpu: usize, n: u32, tree: Option<usize>) -> bool {
        // The in-tree reservation flag keeps CPUs sharing this local (and
        // drains) out while the search runs.
        let mut cur = self.local(cpu);
        loop {
            if cur.reserving() {
                // Another thread of this local is reserving: let it finish.
                std::thread::yield_now();
                cur = self.local(cpu);
                if cur.valid() && cur.free() >= n && tree.is_none() {
                    return true;
                }
                continue;
            }
            match self.cas_local(cpu, cur, cur.with_reserving(true)) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        let near = if cur.valid() { cur.tree() as usize } else { cpu * self.trees.len() / self.locals.len() };
        let found = match tree {
            Some(i) => self.try_reserve(i, |c, _| c == Class::Partial).map(|f| (i, f)),
            None => self.search(near, n).or_else(|| {
                self.drain_others(cpu);
                self.search(near, n)
            }),
        };
        // Install the new tree (or just clear the flag), then give the old
        // one back with whatever its local counter holds by then.
        let mut cur = self.local(cpu);
        loop {
            let new = match found {
                Some((i, f)) => LocalState::new(i as u64 * TREE_CHILDREN, f),
                None => cur.with_reserving(false),
            };
            match self.cas_local(cpu, cur, new) {
                Ok(old) => {
                    if found.is_some() && old.valid() {
                        self.unreserve(old.tree(), old.free());
                    }
                    return found.is_some();
                }
                Err(now) => cur = now,
            }
        }
    }

    /// `drain`: takes `cpu`'s tree away (unless it is reserving) and returns
    /// it to the trees array with its local counter.
    pub fn drain(&self, cpu: usize) {
        let cur = self.local(cpu);
        if !cur.valid() || cur.reserving() {
            return;
        }
        if self.cas_local(cpu, cur, LocalState::NONE).is_ok() {
            self.unreserve(cur.tree(), cur.free());
        }
    }

    fn drain_others(&self, cpu: usize) {
        for other in (0..self.locals.len()).filter(|&o| o != cpu) {
            self.drain(other);
        }
    }
}
