//! Prod-con (NVAlloc §6.2, after Hoard and Ralloc): threads in pairs; the
//! producer of a pair allocates objects and hands them to its consumer,
//! which frees them — every free is a remote free.
//!
//! Paper: `n = 2·10^7 / t` objects of 64 B per pair (`objects` is the
//! numerator). Threads 2k (producer) and 2k+1 (consumer) form pair k; with
//! one thread, that thread alternates: it fills the queue, then drains it.
//!
//! The hand-over queue is a ring of `ring` slots: with `publish` (default) a
//! persistent array of destination slots (`malloc_to` by the producer,
//! `free_from` by the consumer, as a persistent queue would), else DRAM.
//! A thread that finds the queue full or empty spins briefly, then calls
//! [`AllocThread::idle`](crate::AllocThread::idle) and sleeps on a condition
//! variable until its peer moves.

use super::driver::{thread_anchor, Shared, Slots, Worker};
use super::{Scale, WorkloadError};
use crate::alloc::{AllocThread, Allocator};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Objects per pair are `objects / threads` (the paper's 2·10^7 / t).
    pub objects: u64,
    pub size: u64,
    /// Slots in a pair's hand-over queue.
    pub ring: u64,
    /// The queue is a persistent slot array (`malloc_to` / `free_from`).
    pub publish: bool,
}

impl Params {
    pub fn preset(scale: Scale) -> Params {
        let objects = scale.pick(40_000, 10_000_000, 20_000_000);
        Params { objects, size: 64, ring: 1024, publish: true }
    }

    fn per_pair(&self, threads: u32) -> u64 {
        self.objects / threads as u64
    }

    pub fn validate(&self, threads: u32) -> Result<(), String> {
        if threads > 1 && threads % 2 == 1 {
            return Err(format!(
                "threads = {threads}: producers and consumers come in pairs (use an even number, or 1)"
            ));
        }
        if self.size < 24 {
            return Err(format!("size = {} (objects carry a 24-byte checksum: at least 24)", self.size));
        }
        if self.ring == 0 || self.per_pair(threads) == 0 {
            return Err("ring and objects per pair must be positive".into());
        }
        Ok(())
    }

    pub fn peak_live(&self, threads: u32) -> u64 {
        (threads as u64).div_ceil(2).saturating_mul(self.ring).saturating_mul(self.size.saturating_add(16))
    }
}

/// One pair's queue: `tail` objects produced, `head` consumed.
struct Queue {
    slots: Slots,
    ring: u64,
    head: AtomicU64,
    tail: AtomicU64,
    waiting: AtomicBool,
    lock: Mutex<()>,
    cv: Condvar,
}

impl Queue {
    /// Wakes the peer if it sleeps. The fence orders the caller's counter
    /// store before the load of `waiting` (the peer fences the other way), so
    /// a sleeper is never missed; the wait's timeout is only a safety net.
    fn wake(&self) {
        fence(Ordering::SeqCst);
        if self.waiting.load(Ordering::Relaxed) {
            let _g = self.lock.lock().unwrap();
            self.cv.notify_all();
        }
    }

    /// Waits until `ready()`; idles the thread before it sleeps.
    fn wait<A: Allocator>(&self, w: &mut Worker<'_, '_, A>, ready: impl Fn() -> bool) -> Result<(), WorkloadError> {
        if ready() {
            return Ok(());
        }
        // Waiting for the peer is not CPU work of the workload's.
        w.pause_cpu();
        let r = self.wait_paused(w, ready);
        w.resume_cpu();
        r
    }

    fn wait_paused<A: Allocator>(
        &self,
        w: &mut Worker<'_, '_, A>,
        ready: impl Fn() -> bool,
    ) -> Result<(), WorkloadError> {
        for _ in 0..256 {
            if ready() {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        w.flush_ops()?;
        w.t.idle();
        while !ready() {
            if w.shared().aborted() {
                return Err(WorkloadError::Aborted);
            }
            let g = self.lock.lock().unwrap();
            self.waiting.store(true, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            if !ready() {
                // The timeout covers a wake-up that raced with `waiting`.
                let _ = self.cv.wait_timeout(g, Duration::from_millis(2)).unwrap();
            }
            self.waiting.store(false, Ordering::Relaxed);
        }
        Ok(())
    }
}

fn id(pair: u32, k: u64) -> u64 {
    (pair as u64) << 48 | k
}

fn produce<A: Allocator>(
    w: &mut Worker<'_, '_, A>,
    q: &Queue,
    pair: u32,
    k: u64,
    size: u64,
) -> Result<(), WorkloadError> {
    let off = q.slots.alloc(w, (k % q.ring) as usize, size)?;
    w.stamp(off, size, id(pair, k));
    q.tail.store(k + 1, Ordering::Release);
    Ok(())
}

fn consume<A: Allocator>(
    w: &mut Worker<'_, '_, A>,
    q: &Queue,
    pair: u32,
    k: u64,
    size: u64,
) -> Result<(), WorkloadError> {
    let i = (k % q.ring) as usize;
    let off = q.slots.get(w, i);
    w.verify(off, size, id(pair, k))?;
    q.slots.free(w, i)?;
    q.head.store(k + 1, Ordering::Release);
    Ok(())
}

pub fn run<A: Allocator>(sh: &Shared<'_, A>, p: &Params) -> Result<(), WorkloadError> {
    let pairs = sh.threads.div_ceil(2);
    let n = p.per_pair(sh.threads);
    sh.set_expected_ops(pairs as u64 * n * 2);
    // The queues are made (and later freed) by each pair's producer's id.
    let queues: Vec<Queue> = (0..pairs)
        .map(|k| {
            sh.single(2 * k, |w| {
                Ok(Queue {
                    slots: Slots::new(w, p.ring as usize, p.publish, thread_anchor(2 * k, 0))?,
                    ring: p.ring,
                    head: AtomicU64::new(0),
                    tail: AtomicU64::new(0),
                    waiting: AtomicBool::new(false),
                    lock: Mutex::new(()),
                    cv: Condvar::new(),
                })
            })
        })
        .collect::<Result<_, _>>()?;
    sh.phase("running");
    sh.parallel(|tid| {
        let pair = tid / 2;
        let q = &queues[pair as usize];
        let mut w = sh.worker(tid);
        if sh.threads == 1 {
            let mut k = 0;
            while k < n {
                let batch = (n - k).min(p.ring);
                for j in k..k + batch {
                    produce(&mut w, q, pair, j, p.size)?;
                }
                for j in k..k + batch {
                    consume(&mut w, q, pair, j, p.size)?;
                }
                k += batch;
            }
        } else if tid % 2 == 0 {
            for k in 0..n {
                q.wait(&mut w, || k - q.head.load(Ordering::Acquire) < q.ring)?;
                produce(&mut w, q, pair, k, p.size)?;
                q.wake();
            }
        } else {
            for k in 0..n {
                q.wait(&mut w, || q.tail.load(Ordering::Acquire) > k)?;
                consume(&mut w, q, pair, k, p.size)?;
                q.wake();
            }
        }
        Ok(())
    })?;
    for (k, q) in queues.into_iter().enumerate() {
        sh.single(2 * k as u32, |w| q.slots.destroy(w))?;
    }
    Ok(())
}
