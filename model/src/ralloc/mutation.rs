//! Ralloc's broken variant (`mutation=…`, see
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
    /// The flush of a new superblock's descriptor when it is taken
    /// (`malloc_from_newsb`; the fence stays): after a crash the GC finds
    /// the superblock free and hands out blocks published objects still use.
    DescFlush,
}
