//! A redo write-ahead log of small fixed entries, one area per thread, with
//! the entries of consecutive operations on the same or on different lines.
//!
//! An allocator that must change two persistent words atomically (a bitmap
//! bit and the user's pointer that publishes the block) writes its intention
//! here first: `{op, target, dest}`. The protocol of one operation is
//!
//! 1. [`WalCursor::begin`]: write the entry and make it durable (flush + fence);
//! 2. the caller updates and persists its metadata and `*dest`;
//! 3. [`WalCursor::end`]: clear the entry with a store and a flush, *without*
//!    a fence — the fence of the thread's next persist orders it before that
//!    thread's next operation becomes durable.
//!
//! Redo is idempotent only while nobody else can have reused the target: a
//! freed block or extent must not become available to *other* threads before
//! its entry is durably cleared (the caller fences first), or recovery would
//! redo the free on the other thread's new allocation.
//!
//! Recovery ([`Wal::scan`]) hands back every valid entry; the caller redoes
//! each one idempotently (or rolls it back where it cannot be redone).
//!
//! # Layout
//!
//! An entry is 16 B: word 0 = `target | op` (targets are 64 B aligned, so the
//! low six bits carry the op; 0 = empty), word 1 = `dest`. `dest` is written
//! before word 0 and both lie on one line, so a durable word 0 implies a
//! durable `dest` (same-line stores persist in program order). Four entries
//! share a line; a thread owns `lines` lines.
//!
//! With the *sequential* layout the k-th entry of a thread is slot k of the
//! area (cyclically): consecutive operations write the same line, and every
//! begin reflushes the line the previous end just flushed. The *interleaved*
//! layout (NVAlloc §5.1 applied to the WAL) deals consecutive entries to
//! consecutive lines, so a line comes back only after `lines` operations.

use super::mutation::Mutation;
use crate::pm::PmThread;

/// Bytes per entry.
pub const ENTRY_BYTES: u64 = 16;
/// Entries per 64 B line.
pub const ENTRIES_PER_LINE: u64 = 64 / ENTRY_BYTES;
/// Low bits of word 0 that hold the op code.
const OP_MASK: u64 = 63;

/// One logged intention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalEntry {
    /// Allocator-defined operation code, 1..=63.
    pub op: u8,
    /// The block or extent (64 B aligned).
    pub target: u64,
    /// The persistent word that publishes it (or 0).
    pub dest: u64,
}

/// The WAL areas of all threads: `threads` areas of `lines` lines from `base`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wal {
    base: u64,
    lines: u32,
    threads: u32,
    interleaved: bool,
    mutation: Mutation,
}

impl Wal {
    /// # Panics
    /// If `base` is not line aligned or `lines` is 0.
    pub fn new(base: u64, lines: u32, threads: u32, interleaved: bool) -> Wal {
        assert!(base & 63 == 0, "WAL at {base:#x} is not cache-line aligned");
        assert!(lines > 0, "a WAL area needs at least one line");
        Wal { base, lines, threads, interleaved, mutation: Mutation::None }
    }

    /// The same WAL with a flush removed (see [`Mutation`]; only
    /// [`Mutation::WalEntryFlush`] concerns it).
    pub fn with_mutation(mut self, mutation: Mutation) -> Wal {
        self.mutation = mutation;
        self
    }

    /// Bytes of all areas.
    pub fn area_bytes(lines: u32, threads: u32) -> u64 {
        lines as u64 * 64 * threads as u64
    }

    pub fn base(&self) -> u64 {
        self.base
    }

    pub fn bytes(&self) -> u64 {
        Wal::area_bytes(self.lines, self.threads)
    }

    pub fn threads(&self) -> u32 {
        self.threads
    }

    /// The cursor of thread `tid`, starting at its first slot.
    ///
    /// # Panics
    /// If `tid` has no area.
    pub fn cursor(&self, tid: u32) -> WalCursor {
        assert!(tid < self.threads, "thread id {tid} has no WAL area (the heap has {} areas)", self.threads);
        WalCursor {
            area: self.base + tid as u64 * self.lines as u64 * 64,
            slots: self.lines as u64 * ENTRIES_PER_LINE,
            lines: self.lines as u64,
            interleaved: self.interleaved,
            mutation: self.mutation,
            next: 0,
        }
    }

    /// Every valid entry of every area, with the offset of its slot.
    pub fn scan(&self, t: &PmThread) -> Vec<(u64, WalEntry)> {
        let mut out = Vec::new();
        for slot in (self.base..self.base + self.bytes()).step_by(ENTRY_BYTES as usize) {
            let w0 = t.load_u64(slot);
            if w0 & OP_MASK != 0 {
                let e = WalEntry { op: (w0 & OP_MASK) as u8, target: w0 & !OP_MASK, dest: t.load_u64(slot + 8) };
                out.push((slot, e));
            }
        }
        out
    }

    /// Invalidates the entries at `slots` durably (after recovery redid them).
    pub fn clear(&self, t: &mut PmThread, slots: &[u64]) {
        for &s in slots {
            t.store_u64(s, 0);
            t.flush(s);
        }
        t.fence();
    }
}

/// One thread's position in its WAL area.
#[derive(Clone, Debug)]
pub struct WalCursor {
    area: u64,
    slots: u64,
    lines: u64,
    interleaved: bool,
    mutation: Mutation,
    next: u64,
}

impl WalCursor {
    /// The heap offset of the slot of the `k`-th entry.
    #[inline(always)]
    fn slot(&self, k: u64) -> u64 {
        let k = k % self.slots;
        let (line, within) = if self.interleaved {
            (k % self.lines, k / self.lines)
        } else {
            (k / ENTRIES_PER_LINE, k % ENTRIES_PER_LINE)
        };
        self.area + line * 64 + within * ENTRY_BYTES
    }

    /// Writes `e` to the next slot and makes it durable; returns the slot for [`WalCursor::end`].
    ///
    /// # Panics
    /// If the op is not in 1..=63 or the target is not 64 B aligned.
    #[inline]
    pub fn begin(&mut self, t: &mut PmThread, e: WalEntry) -> u64 {
        assert!(e.op != 0 && e.op as u64 <= OP_MASK, "WAL op {} out of range", e.op);
        assert!(e.target & OP_MASK == 0, "WAL target {:#x} is not 64 B aligned", e.target);
        let slot = self.slot(self.next);
        self.next += 1;
        t.store_u64(slot + 8, e.dest);
        t.store_u64(slot, e.target | e.op as u64);
        if self.mutation != Mutation::WalEntryFlush {
            t.flush(slot);
        }
        t.fence();
        slot
    }

    /// Invalidates the entry at `slot`: store and flush, ordered by the
    /// thread's next fence.
    #[inline]
    pub fn end(&mut self, t: &mut PmThread, slot: u64) {
        t.store_u64(slot, 0);
        t.flush(slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_orders() {
        let w = Wal::new(4096, 6, 2, true);
        let c = w.cursor(1);
        let slots: Vec<u64> = (0..8).map(|k| c.slot(k)).collect();
        let a = 4096 + 6 * 64;
        assert_eq!(slots[..7], [a, a + 64, a + 128, a + 192, a + 256, a + 320, a + 16]);
        let w = Wal::new(4096, 6, 2, false);
        let c = w.cursor(0);
        let slots: Vec<u64> = (0..6).map(|k| c.slot(k)).collect();
        assert_eq!(slots, [4096, 4112, 4128, 4144, 4160, 4176]);
        assert_eq!(c.slot(24), 4096, "wraps after 24 entries");
    }
}
