//! A versioned undo log for small failure-atomic updates of core metadata:
//! Makalu's `start_nvm_atomic`, `MAK_LOG_NVM_*`, `MAK_STORE_NVM_*`,
//! `MAK_NO_LOG_STORE_NVM` and `end_nvm_atomic` (`makalu_persistent.{c,h}`).
//!
//! One section at a time (the caller serialises them with a lock). A
//! section writes its entries from slot 0 on. Logging a word writes an
//! entry `{addr, old value, version}` — 64 B, a cache line of its own — and
//! persists it *synchronously* (fence, flush, fence: `CLFLUSH_SYNC`) before
//! the word may change. The stores of the section are not flushed one by
//! one: the lines they dirty go into the section's table of 8 lines
//! (`MAK_sflush_table`, [`DirtyLines`]; a collision flushes the displaced
//! line), and committing flushes the table between two fences, then bumps
//! the log version word and persists it synchronously — which retires
//! every entry of the section at once (an entry counts only while its
//! version stamp equals the version word).
//!
//! Recovery ([`UndoLog::recover`]): the entries stamped with the current
//! version belong to a section that did not commit; their old values are
//! restored in reverse order, made durable, and the version is bumped.
//!
//! # Layout
//!
//! The version word has a line of its own; entry `i` is line `i` of the
//! log space: `addr`, `old`, `version`, then padding (Makalu pads its
//! `log_e` to a line). `addr` and `old` are stored before `version` on the
//! same line, so a durable version implies durable `addr` and `old` (stores
//! to one line persist in program order); an entry is durable before the
//! next is written, so the valid entries of an unfinished section are a
//! prefix.

use crate::mech::dirty::DirtyLines;
use crate::pm::PmThread;

/// Bytes per entry: one cache line (Makalu's `log_e`, padded).
pub const ENTRY_BYTES: u64 = 64;
/// Lines in a section's table of target lines (Makalu's `SFLUSH_TABLE_SZ`).
pub const SECTION_LINES: usize = 8;

/// The log: a version word and `slots` entries from `entries`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UndoLog {
    version_off: u64,
    entries: u64,
    slots: u64,
    /// Whether each entry is flushed (false only in a broken variant of the
    /// allocator, for the crash checkers to catch).
    entry_flush: bool,
}

/// What recovery found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct UndoReport {
    /// Entries of an unfinished section that were rolled back.
    pub undone: u64,
}

impl UndoLog {
    /// A log whose version word is at `version_off` (64 B aligned, a line of
    /// its own) and whose `slots` entries start at `entries` (64 B aligned).
    pub fn new(version_off: u64, entries: u64, slots: u64) -> UndoLog {
        assert!(version_off.is_multiple_of(64) && entries.is_multiple_of(64) && slots > 0, "misaligned undo log");
        UndoLog { version_off, entries, slots, entry_flush: true }
    }

    /// The same log, whose entries are flushed only with `entry_flush` (the
    /// fence stays): a broken variant for the crash checkers.
    pub fn with_entry_flush(self, entry_flush: bool) -> UndoLog {
        UndoLog { entry_flush, ..self }
    }

    /// Bytes the entries take.
    pub fn area_bytes(slots: u64) -> u64 {
        slots * ENTRY_BYTES
    }

    /// Formats a fresh log: version 1, every entry zero (version 0 never matches).
    pub fn format(&self, t: &mut PmThread) {
        t.store_bytes(self.entries, &vec![0u8; Self::area_bytes(self.slots) as usize]);
        t.flush_range(self.entries, Self::area_bytes(self.slots));
        t.store_u64(self.version_off, 1);
        t.persist(self.version_off, 8);
    }

    /// Starts a failure-atomic section (`start_nvm_atomic`).
    pub fn begin(&self, t: &PmThread) -> Section {
        Section { log: *self, next: 0, version: t.load_u64(self.version_off), lines: DirtyLines::new(SECTION_LINES) }
    }

    /// The first entry stamped with the current version (an open section), if any.
    pub fn open_entry(&self, t: &PmThread) -> Option<u64> {
        let version = t.load_u64(self.version_off);
        (0..self.slots).find(|&i| t.load_u64(self.entries + i * ENTRY_BYTES + 16) == version)
    }

    /// Rolls back the section a crash interrupted, if any; then commits, so
    /// the rolled-back entries are retired (`MAK_recover_metadata`).
    pub fn recover(&self, t: &mut PmThread) -> UndoReport {
        let version = t.load_u64(self.version_off);
        let mut valid = 0;
        while valid < self.slots && t.load_u64(self.entries + valid * ENTRY_BYTES + 16) == version {
            valid += 1;
        }
        let mut lines = DirtyLines::new(SECTION_LINES);
        for i in (0..valid).rev() {
            let e = self.entries + i * ENTRY_BYTES;
            let (addr, old) = (t.load_u64(e), t.load_u64(e + 8));
            t.store_u64(addr, old);
            lines.note(t, addr);
        }
        lines.drain(t);
        t.store_u64(self.version_off, version + 1);
        t.persist_sync(self.version_off);
        UndoReport { undone: valid }
    }
}

/// An open failure-atomic section (see the module documentation).
#[must_use = "a section must be committed"]
pub struct Section {
    log: UndoLog,
    next: u64,
    version: u64,
    /// The lines the section's stores dirtied, flushed at commit.
    lines: DirtyLines,
}

impl Section {
    /// Logs the current value of the word at `addr` (`MAK_LOG_NVM_*`): the
    /// entry is durable before the word may change.
    ///
    /// # Panics
    /// If the section has used every slot (a caller's static bound is wrong).
    #[track_caller]
    pub fn log(&mut self, t: &mut PmThread, addr: u64) {
        assert!(self.next < self.log.slots, "undo log section exceeds {} entries", self.log.slots);
        let e = self.log.entries + self.next * ENTRY_BYTES;
        t.store_u64(e, addr);
        t.store_u64(e + 8, t.load_u64(addr));
        t.store_u64(e + 16, self.version);
        if !self.log.entry_flush {
            t.mfence(); // the broken variant: the fences stay, the flush goes
            t.mfence();
        } else {
            t.persist_sync(e);
        }
        self.next += 1;
    }

    /// Logs the word at `addr`, stores `val` there and notes its line
    /// (`MAK_STORE_NVM_*`).
    #[track_caller]
    pub fn store_u64(&mut self, t: &mut PmThread, addr: u64, val: u64) {
        self.log(t, addr);
        self.store_unlogged(t, addr, val);
    }

    /// Stores `val` at `addr` without an entry and notes its line
    /// (`MAK_NO_LOG_STORE_NVM`): for words whose old value no rollback
    /// needs (a field of a header the section's logged words leave
    /// unallocated, or one whose word was logged before).
    #[track_caller]
    pub fn store_unlogged(&mut self, t: &mut PmThread, addr: u64, val: u64) {
        t.store_u64(addr, val);
        self.lines.note(t, addr);
    }

    /// Notes the line of `addr`, stored to by the caller (`MAK_NO_LOG_NVM_RANGE`).
    #[track_caller]
    pub fn note(&mut self, t: &mut PmThread, addr: u64) {
        self.lines.note(t, addr);
    }

    /// Entries written so far.
    pub fn len(&self) -> u64 {
        self.next
    }

    pub fn is_empty(&self) -> bool {
        self.next == 0
    }

    /// Commits (`end_nvm_atomic`): the noted lines are flushed between two
    /// fences, then the version bump, persisted synchronously, retires the
    /// entries.
    #[track_caller]
    pub fn commit(mut self, t: &mut PmThread) {
        self.lines.drain(t);
        t.store_u64(self.log.version_off, self.version + 1);
        t.persist_sync(self.log.version_off);
    }

    /// Leaves the section uncommitted, as a crash at this point would (tests).
    #[doc(hidden)]
    pub fn abandon(self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FlushInsn, Heap, Pm};

    #[test]
    fn committed_sections_stay_and_an_unfinished_one_is_rolled_back() {
        let d = tempfile::tempdir().unwrap();
        let heap = Heap::create(d.path().join("h"), 1 << 16).unwrap();
        let pm = Pm::native(&heap, FlushInsn::None).unwrap();
        let mut t = pm.thread(0);
        let log = UndoLog::new(4096, 4096 + 64, 8);
        log.format(&mut t);
        let (a, b) = (16384u64, 16384 + 640);
        let mut s = log.begin(&t);
        s.store_u64(&mut t, a, 1);
        s.store_u64(&mut t, b, 2);
        s.commit(&mut t);
        let mut s = log.begin(&t);
        s.store_u64(&mut t, a, 10);
        s.log(&mut t, b);
        s.store_unlogged(&mut t, b, 20);
        s.store_unlogged(&mut t, a, 11);
        assert_eq!((t.load_u64(a), t.load_u64(b)), (11, 20));
        s.abandon();
        assert_eq!(log.recover(&mut t), UndoReport { undone: 2 });
        assert_eq!((t.load_u64(a), t.load_u64(b)), (1, 2), "rolled back to the last commit");
        assert_eq!(log.recover(&mut t), UndoReport { undone: 0 }, "nothing twice");
        assert_eq!((t.load_u64(a), t.load_u64(b)), (1, 2));
    }
}
