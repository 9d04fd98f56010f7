//! A lock of the modelled system, visible to the replay.
//!
//! The contention replay runs a trace's threads in time of its own
//! (`sim/src/contention`): without more, a thread that waited for another at
//! a lock in the program runs beside it in the replay, and an allocator that
//! serialises its threads on one lock comes out as scaling like one that
//! does not. A [`TracedMutex`] records a `lock:acquire` marker on the thread
//! just after it took the lock and a `lock:release` marker just before it
//! lets it go (`traces/FORMAT.md`), so the replay makes a thread that takes
//! it while another thread holds it wait for that one's release.
//!
//! The replay's time inside a lock is what the trace holds there (its
//! persists) plus the CPU work done there, which a native run measures: the
//! time between taking and letting go of every traced lock is counted per
//! thread ([`held`]) while the thread's operations are timed ([`time_held`],
//! a CPU profile; other runs read no clock here), and the CPU profile charges
//! it to the operation it falls in (`workloads::cpu`).
//!
//! Only locks that the modelled system has are traced: a lock that exists
//! only because pmsim simplifies a structure (one where the system keeps one
//! per arena, say) stays a plain mutex, and says so where it is declared.

use crate::arch::ticks;
use crate::pm::PmThread;
use pmsim_traces::{LOCK_ACQUIRE_MARKER, LOCK_RELEASE_MARKER};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Ids of the locks: unique in a process, so in every trace it records.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// Whether this thread counts the time it holds traced locks.
    static TIMED: Cell<bool> = const { Cell::new(false) };
    /// Ticks this thread has held traced locks, and how many it took, while
    /// counting.
    static HELD: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// The calling thread counts the time it holds traced locks (`on`), or not.
pub fn time_held(on: bool) {
    TIMED.with(|t| t.set(on));
}

/// The time-stamp ticks the calling thread has held traced locks while
/// counting ([`time_held`]), and the number of times it took one.
pub fn held() -> (u64, u64) {
    HELD.with(Cell::get)
}

/// A mutex whose taking and letting go the trace records (see the module doc).
#[derive(Debug)]
pub struct TracedMutex<T> {
    id: u64,
    inner: Mutex<T>,
}

/// A held [`TracedMutex`]: let it go with [`Locked::unlock`], which records
/// the release (dropping it lets the lock go unrecorded, which a debug build
/// reports).
#[derive(Debug)]
pub struct Locked<'a, T> {
    guard: Option<MutexGuard<'a, T>>,
    id: u64,
    /// When it was taken, if the thread counts ([`time_held`]).
    since: Option<u64>,
}

impl<T> TracedMutex<T> {
    pub fn new(value: T) -> TracedMutex<T> {
        TracedMutex { id: NEXT_ID.fetch_add(1, Ordering::Relaxed), inner: Mutex::new(value) }
    }

    /// Takes the lock on behalf of `pm`'s thread, recording it.
    pub fn lock(&self, pm: &mut PmThread) -> Locked<'_, T> {
        let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        pm.marker(self.id, LOCK_ACQUIRE_MARKER);
        Locked { guard: Some(guard), id: self.id, since: TIMED.with(Cell::get).then(ticks) }
    }

    /// Runs `f` holding the lock, recorded on `pm`'s thread.
    pub fn with<R>(&self, pm: &mut PmThread, f: impl FnOnce(&mut T, &mut PmThread) -> R) -> R {
        let mut held = self.lock(pm);
        let r = f(&mut held, pm);
        held.unlock(pm);
        r
    }

    /// Takes the lock without recording it: for work no trace times
    /// (recovery's checks, statistics, tests).
    pub fn untraced(&self) -> MutexGuard<'_, T> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T> Locked<'_, T> {
    /// Lets the lock go, recording it on `pm`'s thread.
    pub fn unlock(mut self, pm: &mut PmThread) {
        if let Some(since) = self.since {
            let held = ticks().wrapping_sub(since);
            HELD.with(|h| {
                let (t, n) = h.get();
                h.set((t + held, n + 1));
            });
        }
        pm.marker(self.id, LOCK_RELEASE_MARKER);
        drop(self.guard.take());
    }
}

impl<T> std::ops::Deref for Locked<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.guard.as_ref().expect("a held lock")
    }
}

impl<T> std::ops::DerefMut for Locked<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.guard.as_mut().expect("a held lock")
    }
}

impl<T> Drop for Locked<'_, T> {
    fn drop(&mut self) {
        debug_assert!(
            self.guard.is_none() || std::thread::panicking(),
            "traced lock {} let go without Locked::unlock: its release is missing from the trace",
            self.id
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FlushInsn, Heap, Pm};

    /// The time a lock is held counts only while the thread counts, and
    /// every taking does then; the value is the lock's either way.
    #[test]
    fn held_time_counts_while_the_thread_counts() {
        let d = tempfile::tempdir().unwrap();
        let heap = Heap::create(d.path().join("h"), 1 << 16).unwrap();
        let pm = Pm::native(&heap, FlushInsn::None).unwrap();
        let mut t = pm.thread(0);
        let m = TracedMutex::new(0u64);
        let spin = |pm: &mut PmThread| {
            m.with(pm, |v, _| {
                let t0 = ticks();
                while ticks().wrapping_sub(t0) < 100_000 {
                    std::hint::spin_loop();
                }
                *v += 1;
            })
        };
        let before = held();
        spin(&mut t);
        assert_eq!(held(), before, "counted while not asked to");
        time_held(true);
        spin(&mut t);
        spin(&mut t);
        time_held(false);
        let (ticks_held, taken) = held();
        assert_eq!(taken - before.1, 2);
        assert!(ticks_held - before.0 >= 200_000, "{} ticks", ticks_held - before.0);
        assert_eq!(*m.untraced(), 3);
    }
}
