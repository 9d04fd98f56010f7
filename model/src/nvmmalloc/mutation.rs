//! nvm_malloc's broken variant (`mutation=…`, see
//! [`Allocator::MUTANTS`](crate::alloc::Allocator::MUTANTS)): one removed
//! flush, so the crash checkers can prove they catch it.

use serde::{Deserialize, Serialize};

/// One removed flush (or none, the default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mutation {
    /// The real code.
    #[default]
    None,
    /// The persist of the link slot when an operation publishes through it
    /// (the fences stay): a completed `malloc_to` can lose its destination.
    DestFlush,
}
