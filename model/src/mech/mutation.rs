//! Mutations: switches that each remove exactly one flush from the allocator
//! code (or swap the order of two of its steps), so that the crash
//! explorer (`pmsim crash`) can prove it catches a missing flush or a wrong
//! order. A mutation is part of the allocator's configuration (and so of the
//! trace header): a trace records which flush its run left out.
//!
//! Where a flush goes, the fence after it stays, so a flush mutation never
//! changes the order of anything else.

use serde::{Deserialize, Serialize};

/// One removed flush (or none, the default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mutation {
    /// The real code.
    #[default]
    None,
    /// The flush of a new WAL entry ([`super::wal::WalCursor::begin`]): the
    /// entry may not be durable when the metadata it covers is.
    WalEntryFlush,
    /// The flush of the bitmap bit a small malloc sets (NVAlloc-LOG).
    BitmapFlush,
    /// The flush of `*dest` after a small `malloc_to` publishes its block
    /// (NVAlloc).
    DestFlush,
    /// The flush of slab morphing's step flag when it becomes 2 (index
    /// table complete), before step 3 rewrites the bitmap.
    MorphFlagFlush,
    /// The flush of the bookkeeping log's `alt` bit when a slow GC flips it
    /// ([`super::bklog::BkLog::slow_gc`]).
    LogAltFlush,
    /// The flush of the child entry's line after an LLFree base allocation
    /// decrements its counter ([`crate::llfree::lower::Lower::get_base`]):
    /// the bit may be set before the decrement is durable.
    LlCounterFlush,
    /// LLFree's base free increments the child counter *before* it clears
    /// the frame's bit (the two CASes swapped, each still flushed): the
    /// counter promises a free frame the bit field does not have yet, which
    /// a crash in between makes durable (TLC's `inc_before_clear`).
    LlIncBeforeClear,
    /// Recovery clears the WAL *before* it redoes the entries (instead of
    /// after): correct unless the recovery itself crashes in between, which
    /// only crashes inside recovery (`pmsim crash --recovery-crashes`) explore.
    WalClearFirst,
    /// `free_from` frees the block *before* it clears and persists `*dest`
    /// (the two steps swapped; LLFree): a crash in between leaves the
    /// destination naming a free frame.
    FreeBeforeUnpublish,
    /// LLFree's recovery after a crash trusts the child counters instead of
    /// rebuilding them from the bit fields: a counter a crash left off by one
    /// survives, which only the metadata check (counters against bit fields) sees.
    LlTrustCounters,
    /// The flush of a new undo-log entry ([`super::undo::Section::store_u64`],
    /// Makalu): the core header store it covers may be durable while the
    /// entry is not, so recovery cannot roll an interrupted section back.
    UndoEntryFlush,
    /// Makalu's offline GC rewrites a block's mark bits but leaves its count
    /// of marked objects (`hb_n_marks`) as the crash left it, which only the
    /// metadata check (counts against mark bits) sees at once.
    MarkCountStale,
    /// Metall's free of a slot in a full chunk does not put the chunk back
    /// on its bin's non-full list: its free slots are never found again,
    /// and the management data saved at close no longer loads. The metadata
    /// check (non-full lists against the bitsets) sees it while open.
    NonfullLost,
    /// Metall's close writes the properly-closed mark *before* it syncs the
    /// heap (instead of after): a crash in between leaves a store with the
    /// mark whose heap lost the run's unsynced stores, which the next open
    /// accepts (`pmsim crash` on a store closed with data in it).
    MarkBeforeSync,
}

impl Mutation {
    /// Every mutation but `None`.
    pub const ALL: [Mutation; 14] = [
        Mutation::WalEntryFlush,
        Mutation::BitmapFlush,
        Mutation::DestFlush,
        Mutation::MorphFlagFlush,
        Mutation::LogAltFlush,
        Mutation::LlCounterFlush,
        Mutation::LlIncBeforeClear,
        Mutation::WalClearFirst,
        Mutation::FreeBeforeUnpublish,
        Mutation::LlTrustCounters,
        Mutation::UndoEntryFlush,
        Mutation::MarkCountStale,
        Mutation::NonfullLost,
        Mutation::MarkBeforeSync,
    ];

    /// `Ok` for `None` and for the mutations in `own` (those allocator `alloc`
    /// implements); otherwise why not. A mutation another allocator
    /// implements would run the real code under a mutated name.
    pub fn check(self, alloc: &str, own: &[Mutation]) -> Result<(), String> {
        if self == Mutation::None || own.contains(&self) {
            return Ok(());
        }
        let names: Vec<&str> = own.iter().map(|m| m.name()).collect();
        Err(format!("mutation = {} does not concern {alloc} (it has {})", self.name(), names.join(", ")))
    }

    /// The configuration spelling (`wal-entry-flush`, …).
    pub fn name(self) -> &'static str {
        match self {
            Mutation::None => "none",
            Mutation::WalEntryFlush => "wal-entry-flush",
            Mutation::BitmapFlush => "bitmap-flush",
            Mutation::DestFlush => "dest-flush",
            Mutation::MorphFlagFlush => "morph-flag-flush",
            Mutation::LogAltFlush => "log-alt-flush",
            Mutation::LlCounterFlush => "ll-counter-flush",
            Mutation::LlIncBeforeClear => "ll-inc-before-clear",
            Mutation::WalClearFirst => "wal-clear-first",
            Mutation::FreeBeforeUnpublish => "free-before-unpublish",
            Mutation::LlTrustCounters => "ll-trust-counters",
            Mutation::UndoEntryFlush => "undo-entry-flush",
            Mutation::MarkCountStale => "mark-count-stale",
            Mutation::NonfullLost => "nonfull-lost",
            Mutation::MarkBeforeSync => "mark-before-sync",
        }
    }
}
