//! Eventual visibility of auxiliary metadata (Makalu §8.1): stores go to
//! the cache only, and the line each one dirtied is remembered in a small
//! fixed-size table; a collision flushes the line it evicts, and
//! [`DirtyLines::drain`] flushes the rest (before a graceful shutdown). Many
//! updates to one line thus cost one flush, and every update is durable by
//! the end of the run — without a flush per update.

use crate::pm::PmThread;

/// A direct-mapped table of dirty cache lines (heap offsets of lines).
#[derive(Debug)]
pub struct DirtyLines {
    slots: Box<[u64]>,
}

/// An empty slot (offset 0 is the heap header, never auxiliary metadata here).
const EMPTY: u64 = 0;

impl DirtyLines {
    /// A table of `slots` lines (a power of two).
    pub fn new(slots: usize) -> DirtyLines {
        assert!(slots.is_power_of_two(), "dirty-line table size {slots} is not a power of two");
        DirtyLines { slots: vec![EMPTY; slots].into_boxed_slice() }
    }

    /// Notes that the line holding `off` was stored to; flushes the line it displaces.
    #[inline]
    pub fn note(&mut self, t: &mut PmThread, off: u64) {
        let line = off & !63;
        let i = ((line >> 6).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize & (self.slots.len() - 1);
        let old = std::mem::replace(&mut self.slots[i], line);
        if old != line && old != EMPTY {
            t.flush(old);
        }
    }

    /// Flushes every remembered line and fences: all noted stores are durable.
    pub fn drain(&mut self, t: &mut PmThread) {
        for s in self.slots.iter_mut() {
            if *s != EMPTY {
                t.flush(*s);
                *s = EMPTY;
            }
        }
        t.fence();
    }
}
