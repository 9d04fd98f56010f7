//! A versioned undo log for small failure-atomic updates of core metadata
//! (Makalu's `start_nvm_atomic` / `store_nvm_*` / `end_nvm_atomic`).
//!
//! One section at a time (the caller serialises them with a lock). Every
//! logged store first writes an entry `{addr, old value, version}` into the
//! next slot of the log space and makes it durable, then stores the new value
//! and flushes it. The entry is *published* by its version stamp: it counts
//! only while it equals the log version word. Committing a section is one
//! increment of that word, made durable — which retires every entry of the
//! section at once.
//!
//! Recovery ([`UndoLog::recover`]): the entries stamped with the current
//! version belong to a section that did not commit; their old values are
//! restored in reverse order, made durable, and the version is bumped.
//!
//! # Layout
//!
//! The version word has a line of its own. An entry is 32 B (two per line):
//! `addr`, `old`, `version`, 0. `addr` and `old` are stored before `version`
//! on the same line, so a durable version implies durable `addr` and `old`
//! (stores to one line persist in program order). A section writes its
//! entries from slot 0 on, and an entry is durable before the next one is
//! written, so the valid entries of an unfinished section are a prefix.

use crate::mech::mutation::Mutation;
use crate::pm::PmThread;

/// Bytes per entry.
pub const ENTRY_BYTES: u64 = 32;

/// The log: a version word and `slots` entries from `entries`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UndoLog {
    version_off: u64,
    entries: u64,
    slots: u64,
    /// [`Mutation::UndoEntryFlush`] removes the flush of each entry.
    mutation: Mutation,
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
        UndoLog { version_off, entries, slots, mutation: Mutation::None }
    }

    /// The same log with a flush removed (only [`Mutation::UndoEntryFlush`] concerns it).
    pub fn with_mutation(self, mutation: Mutation) -> UndoLog {
        UndoLog { mutation, ..self }
    }

    /// Bytes the entries take.
    pub fn area_bytes(slots: u64) -> u64 {
        (slots * ENTRY_BYTES).next_multiple_of(64)
    }

    /// Formats a fresh log: version 1, every entry zero (version 0 never matches).
    pub fn format(&self, t: &mut PmThread) {
        t.store_bytes(self.entries, &vec![0u8; Self::area_bytes(self.slots) as usize]);
        t.flush_range(self.entries, Self::area_bytes(self.slots));
        t.store_u64(self.version_off, 1);
        t.persist(self.version_off, 8);
    }

    /// Starts a failure-atomic section.
    pub fn begin(&self, t: &PmThread) -> Section {
        Section { log: *self, next: 0, version: t.load_u64(self.version_off) }
    }

    /// The first entry stamped with the current version (an open section), if any.
    pub fn open_entry(&self, t: &PmThread) -> Option<u64> {
        let version = t.load_u64(self.version_off);
        (0..self.slots).find(|&i| t.load_u64(self.entries + i * ENTRY_BYTES + 16) == version)
    }

    /// Rolls back the section a crash interrupted, if any; then commits, so
    /// the rolled-back entries are retired.
    pub fn recover(&self, t: &mut PmThread) -> UndoReport {
        let version = t.load_u64(self.version_off);
        let mut valid = 0;
        while valid < self.slots && t.load_u64(self.entries + valid * ENTRY_BYTES + 16) == version {
            valid += 1;
        }
        for i in (0..valid).rev() {
            let e = self.entries + i * ENTRY_BYTES;
            let (addr, old) = (t.load_u64(e), t.load_u64(e + 8));
            t.store_u64(addr, old);
            t.flush(addr);
        }
        t.fence();
        t.store_u64(self.version_off, version + 1);
        t.persist(self.version_off, 8);
        UndoReport { undone: valid }
    }
}

/// An open failure-atomic section (see the module documentation).
#[must_use = "a section must be committed"]
pub struct Section {
    log: UndoLog,
    next: u64,
    version: u64,
}

impl Section {
    /// Logs the old value of the word at `addr`, then stores `val` there and flushes it.
    ///
    /// # Panics
    /// If the section has used every slot (a caller's static bound is wrong).
    pub fn store_u64(&mut self, t: &mut PmThread, addr: u64, val: u64) {
        assert!(self.next < self.log.slots, "undo log section exceeds {} entries", self.log.slots);
        let e = self.log.entries + self.next * ENTRY_BYTES;
        t.store_u64(e, addr);
        t.store_u64(e + 8, t.load_u64(addr));
        t.store_u64(e + 16, self.version);
        if self.log.mutation == Mutation::UndoEntryFlush {
            t.fence(); // the mutation: the fence stays, the flush goes
        } else {
            t.persist(e, ENTRY_BYTES);
        }
        self.next += 1;
        t.store_u64(addr, val);
        t.flush(addr);
    }

    /// Entries written so far.
    pub fn len(&self) -> u64 {
        self.next
    }

    pub fn is_empty(&self) -> bool {
        self.next == 0
    }

    /// Commits: the stores are made durable, then the version bump retires the entries.
    pub fn commit(self, t: &mut PmThread) {
        t.fence();
        t.store_u64(self.log.version_off, self.version + 1);
        t.persist(self.log.version_off, 8);
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
        let (a, b) = (8192u64, 8192 + 640);
        let mut s = log.begin(&t);
        s.store_u64(&mut t, a, 1);
        s.store_u64(&mut t, b, 2);
        s.commit(&mut t);
        let mut s = log.begin(&t);
        s.store_u64(&mut t, a, 10);
        s.store_u64(&mut t, a, 11);
        s.store_u64(&mut t, b, 20);
        assert_eq!((t.load_u64(a), t.load_u64(b)), (11, 20));
        s.abandon();
        assert_eq!(log.recover(&mut t), UndoReport { undone: 3 });
        assert_eq!((t.load_u64(a), t.load_u64(b)), (1, 2), "rolled back to the last commit");
        assert_eq!(log.recover(&mut t), UndoReport { undone: 0 }, "nothing twice");
        assert_eq!((t.load_u64(a), t.load_u64(b)), (1, 2));
    }
}
