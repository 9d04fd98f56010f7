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
//! # The artifact protocol
//!
//! NVAlloc's public code keeps a different WAL (its "minilog"), which a WAL
//! built with [`Wal::artifact`] reproduces: an entry is written and persisted
//! once, at [`WalCursor::begin`], and never cleared ([`WalCursor::end`] is not
//! called) — it is overwritten when the ring comes round. Since no entry is
//! ever invalidated, recovery cannot tell a finished operation from one in
//! progress by the entry alone; it can tell which entry of a ring is the
//! *newest*, because word 0 also carries a 16-bit sequence number
//! ([`Wal::newest`]). The newest entry of a thread is the only one that can
//! belong to an operation in progress (a thread does one at a time).
//!
//! Ring geometry. The artifact has one ring of `NBANKS × 2 × 64 B / 8 B` =
//! 96 entries of 8 B (6 banks, two halves on two DIMMs): count `k` goes to
//! half `k mod 2`, and within the half to bank (line) `(k / 2) mod 6`, so a
//! line comes back only after 12 entries. pmsim follows it in the number of
//! lines and the order they are dealt, with two differences, both because an
//! artifact entry holds only the destination address, which is not enough to
//! recover from: an entry is 16 B (block | op | sequence, destination), so a
//! line holds 4 entries and a ring 48; and each thread has its own ring (the
//! artifact shares one ring among all threads through an atomic counter),
//! so "the newest entry of a thread" is defined. The halves are adjacent
//! lines here (pmsim's heap is one file). The paper (§5.1, Table 2) says only
//! that the WAL is interleaved; it gives no geometry.
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

use crate::pm::PmThread;

/// Bytes per entry.
pub const ENTRY_BYTES: u64 = 16;
/// Entries per 64 B line.
pub const ENTRIES_PER_LINE: u64 = 64 / ENTRY_BYTES;
/// Low bits of word 0 that hold the op code.
const OP_MASK: u64 = 63;
/// Word 0 of an artifact entry carries its sequence number from this bit up
/// (targets are heap offsets below 2^48).
const SEQ_SHIFT: u32 = 48;
/// The target bits of word 0.
const TARGET_MASK: u64 = ((1 << SEQ_SHIFT) - 1) & !OP_MASK;
/// Halves of an artifact ring (the artifact's two DIMMs).
pub const ARTIFACT_HALVES: u32 = 2;

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
    /// The artifact protocol (entries never cleared, sequence-numbered,
    /// dealt over two halves of `lines / 2` banks).
    artifact: bool,
    /// Whether a new entry is flushed (false only in a broken variant of
    /// the allocator, for the crash checkers to catch).
    entry_flush: bool,
}

impl Wal {
    /// # Panics
    /// If `base` is not line aligned or `lines` is 0.
    pub fn new(base: u64, lines: u32, threads: u32, interleaved: bool) -> Wal {
        assert!(base & 63 == 0, "WAL at {base:#x} is not cache-line aligned");
        assert!(lines > 0, "a WAL area needs at least one line");
        Wal { base, lines, threads, interleaved, artifact: false, entry_flush: true }
    }

    /// A WAL with the artifact's protocol and geometry (see the module
    /// documentation): per thread, two halves of `banks` lines.
    ///
    /// # Panics
    /// If `base` is not line aligned or `banks` is 0.
    pub fn artifact(base: u64, banks: u32, threads: u32, interleaved: bool) -> Wal {
        Wal { artifact: true, ..Wal::new(base, banks * ARTIFACT_HALVES, threads, interleaved) }
    }

    /// Whether entries are left in place after their operation (the artifact protocol).
    pub fn is_artifact(&self) -> bool {
        self.artifact
    }

    /// The same WAL, whose new entries are flushed only with `entry_flush`
    /// (the fence stays): a broken variant for the crash checkers.
    pub fn with_entry_flush(mut self, entry_flush: bool) -> Wal {
        self.entry_flush = entry_flush;
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
        self.cursor_at(tid, 0)
    }

    /// The cursor of thread `tid`, whose next entry is its `next`-th (a
    /// thread handle taking over from an earlier one of the same id continues
    /// its ring, so that sequence numbers keep increasing).
    ///
    /// # Panics
    /// If `tid` has no area.
    pub fn cursor_at(&self, tid: u32, next: u64) -> WalCursor {
        assert!(tid < self.threads, "thread id {tid} has no WAL area (the heap has {} areas)", self.threads);
        WalCursor {
            area: self.area(tid),
            slots: self.lines as u64 * ENTRIES_PER_LINE,
            lines: self.lines as u64,
            interleaved: self.interleaved,
            artifact: self.artifact,
            entry_flush: self.entry_flush,
            next,
        }
    }

    fn area(&self, tid: u32) -> u64 {
        self.base + tid as u64 * self.lines as u64 * 64
    }

    /// Decodes the slot at `slot`, if it holds an entry: the entry and its sequence number.
    fn entry_at(t: &PmThread, slot: u64) -> Option<(WalEntry, u16)> {
        let w0 = t.load_u64(slot);
        (w0 & OP_MASK != 0).then(|| {
            let e = WalEntry { op: (w0 & OP_MASK) as u8, target: w0 & TARGET_MASK, dest: t.load_u64(slot + 8) };
            (e, (w0 >> SEQ_SHIFT) as u16)
        })
    }

    /// Artifact protocol: the newest entry of each thread's ring that holds
    /// one, with its slot. The entries of a ring carry consecutive sequence
    /// numbers (mod 2^16, at most 48 of them), so the newest is the one the
    /// others are all behind.
    pub fn newest(&self, t: &PmThread) -> Vec<(u64, WalEntry)> {
        let per_area = self.lines as u64 * ENTRIES_PER_LINE;
        let mut out = Vec::new();
        for tid in 0..self.threads {
            let area = self.area(tid);
            let mut best: Option<(u64, WalEntry, u16)> = None;
            for slot in (area..area + per_area * ENTRY_BYTES).step_by(ENTRY_BYTES as usize) {
                let Some((e, seq)) = Wal::entry_at(t, slot) else { continue };
                // Ahead of the best so far by less than half the sequence space.
                if best.is_none_or(|(_, _, b)| seq != b && seq.wrapping_sub(b) < 1 << 15) {
                    best = Some((slot, e, seq));
                }
            }
            out.extend(best.map(|(s, e, _)| (s, e)));
        }
        out
    }

    /// Every valid entry of every area, with the offset of its slot.
    pub fn scan(&self, t: &PmThread) -> Vec<(u64, WalEntry)> {
        (self.base..self.base + self.bytes())
            .step_by(ENTRY_BYTES as usize)
            .filter_map(|slot| Wal::entry_at(t, slot).map(|(e, _)| (slot, e)))
            .collect()
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
    artifact: bool,
    entry_flush: bool,
    next: u64,
}

impl WalCursor {
    /// The heap offset of the slot of the `k`-th entry.
    #[inline(always)]
    fn slot(&self, k: u64) -> u64 {
        let k = k % self.slots;
        let (line, within) = match (self.interleaved, self.artifact) {
            (false, _) => (k / ENTRIES_PER_LINE, k % ENTRIES_PER_LINE),
            (true, false) => (k % self.lines, k / self.lines),
            (true, true) => {
                // The artifact's `minilog_count_to_index`: halves alternate,
                // and within a half consecutive entries take consecutive banks.
                let banks = self.lines / ARTIFACT_HALVES as u64;
                let (half, k2) = (k % ARTIFACT_HALVES as u64, k / ARTIFACT_HALVES as u64);
                (half * banks + k2 % banks, k2 / banks)
            }
        };
        self.area + line * 64 + within * ENTRY_BYTES
    }

    /// How many entries this cursor has written (with its starting count).
    pub fn position(&self) -> u64 {
        self.next
    }

    /// Writes `e` to the next slot and makes it durable; returns the slot for [`WalCursor::end`].
    ///
    /// # Panics
    /// If the op is not in 1..=63 or the target is not 64 B aligned.
    #[inline]
    pub fn begin(&mut self, t: &mut PmThread, e: WalEntry) -> u64 {
        assert!(e.op != 0 && e.op as u64 <= OP_MASK, "WAL op {} out of range", e.op);
        assert!(e.target & !TARGET_MASK == 0, "WAL target {:#x} is not a 64 B aligned heap offset", e.target);
        let slot = self.slot(self.next);
        let seq = if self.artifact { (self.next & 0xffff) << SEQ_SHIFT } else { 0 };
        self.next += 1;
        t.store_u64(slot + 8, e.dest);
        t.store_u64(slot, e.target | e.op as u64 | seq);
        if self.entry_flush {
            t.flush(slot);
        }
        t.fence();
        slot
    }

    /// Invalidates the entry at `slot`: store and flush, ordered by the
    /// thread's next fence. (Not used by the artifact protocol.)
    #[inline]
    pub fn end(&mut self, t: &mut PmThread, slot: u64) {
        debug_assert!(!self.artifact, "the artifact protocol never clears an entry");
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

    #[test]
    fn artifact_slot_order_follows_minilog() {
        let w = Wal::artifact(4096, 6, 2, true);
        let c = w.cursor(0);
        let line = |k| (c.slot(k) - 4096) / 64;
        let lines: Vec<u64> = (0..12).map(line).collect();
        assert_eq!(lines, [0, 6, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11], "halves alternate, banks advance");
        assert_eq!(c.slot(12), 4096 + 16, "the second round takes the next entry of each line");
        assert_eq!(c.slot(48), 4096, "a ring of 48 entries");
        assert_eq!(w.cursor(1).slot(0), 4096 + 12 * 64);
    }
}
