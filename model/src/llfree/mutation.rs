//! LLFree's broken variants (`mutation=…`, see
//! [`Allocator::MUTANTS`](crate::alloc::Allocator::MUTANTS)): each removes
//! one flush of LLFree's code, swaps two of its steps, or skips a step of
//! its recovery, so the crash checkers can prove they catch it.

use serde::{Deserialize, Serialize};

/// One removed flush, swapped order or skipped step (or none, the default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mutation {
    /// The real code.
    #[default]
    None,
    /// The flush of the child entry's line after a base allocation
    /// decrements its counter ([`super::lower::Lower::get_base`]): the bit
    /// may be set before the decrement is durable.
    LlCounterFlush,
    /// The base free increments the child counter *before* it clears the
    /// frame's bit (the two CASes swapped, each still flushed): the counter
    /// promises a free frame the bit field does not have yet, which a crash
    /// in between makes durable (TLC's `inc_before_clear`).
    LlIncBeforeClear,
    /// `free_from` frees the block *before* it clears and persists `*dest`
    /// (the two steps swapped): a crash in between leaves the destination
    /// naming a free frame.
    FreeBeforeUnpublish,
    /// Recovery after a crash trusts the child counters instead of
    /// rebuilding them from the bit fields: a counter a crash left off by one
    /// survives, which only the metadata check (counters against bit fields) sees.
    LlTrustCounters,
}
