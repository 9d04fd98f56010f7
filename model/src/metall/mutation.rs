//! Metall's broken variants (`mutation=…`, see
//! [`Allocator::MUTANTS`](crate::alloc::Allocator::MUTANTS)): each removes
//! one step of its code or swaps two, so the checkers can prove they catch it.

use serde::{Deserialize, Serialize};

/// One removed step or swapped order (or none, the default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mutation {
    /// The real code.
    #[default]
    None,
    /// A free of a slot in a full chunk does not put the chunk back on its
    /// bin's non-full list: its free slots are never found again, and the
    /// management data saved at close no longer loads. The metadata check
    /// (non-full lists against the bitsets) sees it while open.
    NonfullLost,
    /// Close writes the properly-closed mark *before* it syncs the heap
    /// (instead of after): a crash in between leaves a store with the mark
    /// whose heap lost the run's unsynced stores, which the next open
    /// accepts (`pmsim crash` on a store closed with data in it).
    MarkBeforeSync,
}
