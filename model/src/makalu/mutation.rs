//! Makalu's broken variants (`mutation=…`, see
//! [`Allocator::MUTANTS`](crate::alloc::Allocator::MUTANTS)): each removes
//! one flush of its code or one step of its recovery, so the crash checkers
//! can prove they catch it.

use serde::{Deserialize, Serialize};

/// One removed flush or step (or none, the default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mutation {
    /// The real code.
    #[default]
    None,
    /// The flush of a new undo-log entry
    /// ([`crate::mech::undo::Section::store_u64`]): the core header store it
    /// covers may be durable while the entry is not, so recovery cannot roll
    /// an interrupted section back.
    UndoEntryFlush,
    /// The offline GC rewrites a block's mark bits but leaves its count of
    /// marked objects (`hb_n_marks`) as the crash left it, which only the
    /// metadata check (counts against mark bits) sees at once.
    MarkCountStale,
}
