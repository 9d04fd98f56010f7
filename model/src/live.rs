//! Live-byte accounting shared by the allocators: per-thread counters, each
//! on its own cache line so that threads counting their allocations do not
//! contend, summed when a footprint is asked for.

use std::sync::atomic::{AtomicI64, Ordering};

/// A value on its own cache line (64 B: no false sharing with a neighbour).
#[repr(align(64))]
#[derive(Debug, Default)]
pub struct Padded<T>(pub T);

/// Bytes live: what the heap held when opened plus per-thread deltas since.
#[derive(Debug)]
pub struct LiveBytes {
    base: u64,
    slots: Box<[Padded<AtomicI64>]>,
}

impl LiveBytes {
    /// `slots` counters (threads share them by `tid % slots`) over `base`
    /// bytes live at open.
    pub fn new(base: u64, slots: usize) -> LiveBytes {
        LiveBytes { base, slots: (0..slots.max(1)).map(|_| Padded::default()).collect() }
    }

    /// Thread `tid` allocated (`delta` > 0) or freed (< 0) bytes.
    pub fn add(&self, tid: u32, delta: i64) {
        self.slots[tid as usize % self.slots.len()].0.fetch_add(delta, Ordering::Relaxed);
    }

    /// Bytes live now (never below zero).
    pub fn get(&self) -> u64 {
        let d: i64 = self.slots.iter().map(|p| p.0.load(Ordering::Relaxed)).sum();
        (self.base as i64 + d).max(0) as u64
    }
}
