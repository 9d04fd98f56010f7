//! The big allocator (`BigPAllocator`, VLDB '17 §4.3) and huge blocks
//! (`HugePAllocator`, §4.4). Big blocks live in big segments, each behind
//! a 64 B header word (size and an allocated bit); a request takes the
//! best-fitting free block, split with the rest's header persisted first;
//! a freed block is merged with free neighbours, one header word at a
//! time, each persisted. A huge block is whole segments, marked in the
//! segment table. Each operation is bracketed by the calling thread's
//! micro-log ([`super::PAllocator::logged`]) and runs under one lock.
//!
//! PAllocator keeps its big free blocks in persistent FPTrees (leaves in
//! SCM, inner nodes in DRAM) and its huge blocks in files of their own;
//! pmsim keeps the free blocks in DRAM, rebuilt from the headers by every
//! open, and carves huge blocks from the segment table.

use super::layout::{seg, ALLOCATED, HDR};
use super::PAllocator;
use crate::pm::PmThread;
use std::collections::{BTreeMap, BTreeSet};

/// The big allocator's DRAM view of its blocks.
#[derive(Debug, Default)]
pub(super) struct Big {
    /// Every block `(offset → (size, allocated))`, by offset.
    pub blocks: BTreeMap<u64, (u64, bool)>,
    /// Free blocks `(size, offset)`.
    pub free: BTreeSet<(u64, u64)>,
}

impl Big {
    pub fn add(&mut self, off: u64, size: u64, allocated: bool) {
        self.blocks.insert(off, (size, allocated));
        if !allocated {
            self.free.insert((size, off));
        }
    }

    pub fn remove(&mut self, off: u64) -> (u64, bool) {
        let (size, a) = self.blocks.remove(&off).expect("a known block");
        if !a {
            self.free.remove(&(size, off));
        }
        (size, a)
    }
}

impl PAllocator {
    /// The best-fitting free block for `bytes` (header included, a multiple
    /// of 64), taken out of the free set; a new big segment when none fits
    /// (its header persisted). `(its size, its offset)`, or `None`.
    pub(super) fn big_pick(&self, t: &mut PmThread, b: &mut Big, bytes: u64) -> Option<(u64, u64)> {
        let fit = match b.free.range((bytes, 0)..).next().copied() {
            Some(f) => f,
            None => {
                let i = self.take_segments(t, 1, seg::BIG)?;
                let at = self.lay.seg_off(i);
                self.regions.paint_header(t, at, HDR, at + self.lay.seg);
                t.store_u64(at, self.lay.seg);
                t.persist(at, 8);
                b.add(at, self.lay.seg, false);
                (self.lay.seg, at)
            }
        };
        b.remove(fit.1);
        Some(fit)
    }

    /// Allocates `bytes` of the free block `(have, at)`: the rest's header
    /// first, then the block's, each persisted.
    pub(super) fn big_commit(&self, t: &mut PmThread, b: &mut Big, have: u64, at: u64, bytes: u64) {
        if have > bytes {
            let rest = at + bytes;
            self.regions.paint_header(t, rest, HDR, at + have);
            t.store_u64(rest, have - bytes);
            t.persist(rest, 8);
            b.add(rest, have - bytes, false);
        }
        // Behind the header, the headers of blocks merged into this one: user data now.
        self.regions.paint_header(t, at, HDR, at + bytes);
        t.store_u64(at, bytes | ALLOCATED);
        t.persist(at, 8);
        b.add(at, bytes, true);
    }

    /// Frees big block `at`, merging it with free neighbours, one header
    /// word at a time, each persisted.
    pub(super) fn big_free(&self, t: &mut PmThread, b: &mut Big, at: u64) {
        let (size, a) = b.remove(at);
        assert!(a, "big block {at:#x} freed twice");
        t.store_u64(at, size);
        t.persist(at, 8);
        let (mut first, mut total) = (at, size);
        let same_seg = |o: u64| self.lay.seg_of(o) == self.lay.seg_of(at);
        if let Some(&(ns, false)) = b.blocks.get(&(at + size)).filter(|_| same_seg(at + size)) {
            b.remove(at + size);
            total += ns;
            t.store_u64(at, total);
            t.persist(at, 8);
        }
        let prev = b.blocks.range(..at).next_back().map(|(&o, &(s, a))| (o, s, a));
        if let Some((p, ps, false)) = prev.filter(|&(p, ps, _)| p + ps == at && same_seg(p)) {
            b.remove(p);
            total += ps;
            first = p;
            t.store_u64(p, total);
            t.persist(p, 8);
        }
        b.add(first, total, false);
    }

    /// The header of the big block whose object starts at `off`.
    pub(super) fn big_header(off: u64) -> u64 {
        off - HDR
    }
}
