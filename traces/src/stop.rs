//! Whether this process is being stopped by a signal. One flag, read by
//! everything that must not start after it is set: committing an output
//! ([`crate::output`]), making a scratch directory ([`crate::owned`]),
//! starting a child ([`crate::children`], which reads and sets it under its
//! list's lock so that a child is either forwarded the signal or refused).
//! It sits below those modules and the handler ([`crate::interrupt`]) so
//! that none of them has to import another to ask.

use std::sync::atomic::{AtomicBool, Ordering};

static STOPPING: AtomicBool = AtomicBool::new(false);

/// Whether a signal is stopping this process: nothing may be committed or
/// started any more.
pub fn stopping() -> bool {
    STOPPING.load(Ordering::SeqCst)
}

/// Marks the process as stopping; only [`crate::children::close`] calls it,
/// under the children's lock.
pub(crate) fn set() {
    STOPPING.store(true, Ordering::SeqCst);
}
