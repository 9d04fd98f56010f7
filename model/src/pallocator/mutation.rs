//! PAllocator's broken variant (`mutation=…`, see
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
    /// The flush of a new micro-log entry (the fence stays): an operation
    /// interrupted after its block's entry is durable may leave no log
    /// to complete it.
    MicroLogFlush,
}
