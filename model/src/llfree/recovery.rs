//! Persistence and recovery (paper §3.2.3).
//!
//! Only the lower level and the zone page are persistent. Opening a zone
//! whose marker still says *running* means the last run crashed: every child
//! counter is recomputed from its bit field ([`Lower::rebuild`]). After a
//! clean shutdown the counters are trusted. Either way the upper level (tree
//! counters, no reservations) is rebuilt in DRAM from the children.
//!
//! A crash inside an operation can lose a frame — its bit set but the frame
//! not yet with the caller, or a free begun but its bit not yet cleared — at
//! most one per thread in flight (the paper's *lost frames*). LLFree cannot
//! tell such a frame from a live one; for `malloc_to`/`free_from` the caller
//! can, by what its persistent roots reach (see [`super::thread`]). This is
//! the bound the crash explorer holds it to: a live frame no completed
//! operation accounts for must be the block of an operation the crash
//! interrupted (`CrashRules::interrupted_may_lose`).
//!
//! Recovery is idempotent: it rewrites each counter from its bit field
//! (never the bits), and the *running* marker it writes last only says what
//! a crash already said.

use super::lower::{Lower, TREE_CHILDREN};
use super::zone::{Marker, Zone};
use super::NAME;
use crate::error::AllocError;
use crate::pm::PmThread;
use serde::Serialize;

/// What opening a zone found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RecoveryReport {
    /// The marker said *running*: the last run did not close the zone.
    pub crashed: bool,
    /// Child counters that disagreed with their bit fields and were rewritten.
    pub children_fixed: u64,
    /// Base frames allocated (huge frames count 512).
    pub frames_allocated: u64,
    /// Huge frames allocated.
    pub huge_allocated: u64,
}

/// Recovers the lower level if the zone was not shut down cleanly, marks it
/// running, and returns the free frames per tree (for the upper level).
pub fn recover(t: &mut PmThread, lower: &Lower) -> Result<(RecoveryReport, Vec<u32>), AllocError> {
    recover_as(t, lower, false)
}

/// [`recover`]; with `trust_counters` (the [`Mutation::LlTrustCounters`]
/// mutation) the counters are kept even after a crash.
///
/// [`Mutation::LlTrustCounters`]: super::Mutation::LlTrustCounters
pub fn recover_as(
    t: &mut PmThread,
    lower: &Lower,
    trust_counters: bool,
) -> Result<(RecoveryReport, Vec<u32>), AllocError> {
    let zone: Zone = lower.zone;
    let marker = Zone::marker(t);
    let crashed = match marker {
        m if m == Marker::Shutdown as u64 => false,
        m if m == Marker::Running as u64 => true,
        m => return Err(AllocError::corrupt(NAME, format!("zone page: unknown startup/shutdown marker {m}"))),
    };
    let mut rep = RecoveryReport { crashed, ..Default::default() };
    if crashed && !trust_counters {
        rep.children_fixed = lower.rebuild(t)?;
    }
    let ntrees = zone.nhuge.div_ceil(TREE_CHILDREN) as usize;
    let mut free = vec![0u32; ntrees];
    for c in 0..zone.nhuge {
        let e = lower.child(t, c);
        free[(c / TREE_CHILDREN) as usize] += e.free();
        if e.huge() {
            rep.huge_allocated += 1;
        }
        rep.frames_allocated += (super::zone::CHILD_FRAMES - e.free()) as u64;
    }
    Zone::set_marker(t, Marker::Running);
    Ok((rep, free))
}
