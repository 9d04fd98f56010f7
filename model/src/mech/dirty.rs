//! Eventual visibility of metadata (Makalu §8.1; its `add_to_flush_table`
//! and `flush_all_entry`): stores go to the cache only, and the line each one
//! dirtied is remembered in a small direct-mapped table of lines; a line
//! that maps to a slot held by another line flushes that other line (no
//! fence), and [`DirtyLines::drain`] flushes the rest between two fences.
//! Many updates to one line thus cost one flush, and every noted store is
//! durable once the table is drained — without a flush per update.
//!
//! The slot of a line is its line number modulo the table size, as in
//! Makalu's code (`(line >> 6) & (size - 1)`): lines 64 B apart share no
//! slot, lines a multiple of `size` lines apart do.

use crate::pm::PmThread;

/// A direct-mapped table of dirty cache lines (heap offsets of lines).
#[derive(Debug)]
pub struct DirtyLines {
    slots: Box<[u64]>,
}

/// An empty slot (offset 0 is the heap header, never noted here).
const EMPTY: u64 = 0;

impl DirtyLines {
    /// A table of `slots` lines (a power of two).
    pub fn new(slots: usize) -> DirtyLines {
        assert!(slots.is_power_of_two(), "dirty-line table size {slots} is not a power of two");
        DirtyLines { slots: vec![EMPTY; slots].into_boxed_slice() }
    }

    /// Notes that the line holding `off` was stored to; flushes the line it displaces.
    #[inline]
    #[track_caller]
    pub fn note(&mut self, t: &mut PmThread, off: u64) {
        let line = off & !63;
        let i = (line >> 6) as usize & (self.slots.len() - 1);
        let old = std::mem::replace(&mut self.slots[i], line);
        if old != line && old != EMPTY {
            t.flush(old);
        }
    }

    /// Notes every line of `[off, off + len)`.
    #[track_caller]
    pub fn note_range(&mut self, t: &mut PmThread, off: u64, len: u64) {
        let mut line = off & !63;
        while line < off + len {
            self.note(t, line);
            line += 64;
        }
    }

    /// Whether no line is noted.
    pub fn is_empty(&self) -> bool {
        self.slots.iter().all(|&s| s == EMPTY)
    }

    /// Fences, flushes every remembered line, fences: every noted store is
    /// durable, and ordered after everything before.
    #[track_caller]
    pub fn drain(&mut self, t: &mut PmThread) {
        t.mfence();
        for s in self.slots.iter_mut() {
            if *s != EMPTY {
                t.flush(*s);
                *s = EMPTY;
            }
        }
        t.mfence();
    }

    /// Forgets every noted line without flushing it (a table whose lines a
    /// crash made irrelevant, or that another table already made durable).
    pub fn forget(&mut self) {
        self.slots.fill(EMPTY);
    }
}
