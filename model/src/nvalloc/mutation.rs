//! NVAlloc's broken variants (`mutation=…`, see
//! [`Allocator::MUTANTS`](crate::alloc::Allocator::MUTANTS)): each removes
//! one flush of NVAlloc's code or swaps two of its steps, so the crash
//! checkers can prove they catch it. Where a flush goes, the fence after it
//! stays.

use serde::{Deserialize, Serialize};

/// One removed flush or swapped order (or none, the default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mutation {
    /// The real code.
    #[default]
    None,
    /// The flush of a new WAL entry ([`crate::mech::wal::WalCursor::begin`]):
    /// the entry may not be durable when the metadata it covers is.
    WalEntryFlush,
    /// The flush of the bitmap bit a small malloc sets (NVAlloc-LOG).
    BitmapFlush,
    /// The flush of `*dest` after a small `malloc_to` publishes its block.
    DestFlush,
    /// The flush of slab morphing's step flag when it becomes 2 (index
    /// table complete), before step 3 rewrites the bitmap.
    MorphFlagFlush,
    /// The flush of the bookkeeping log's `alt` bit when a slow GC flips it
    /// ([`crate::mech::bklog::BkLog::slow_gc`]).
    LogAltFlush,
    /// Recovery clears the WAL *before* it redoes the entries (instead of
    /// after): correct unless the recovery itself crashes in between, which
    /// only crashes inside recovery (`pmsim crash --recovery-crashes`) explore.
    WalClearFirst,
}
