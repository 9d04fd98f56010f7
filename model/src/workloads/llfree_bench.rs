//! LLFree's synthetic benchmarks (Wrenger et al., ATC '23, §5.1), over any
//! allocator: objects are frames (`size` 4 KiB for order 0, 2 MiB for
//! order 9), but every allocator runs the same sequence.
//!
//! * `llfree-bulk` — all threads allocate their share of `objects` at once,
//!   then free them all again; repeated `iterations` times.
//! * `llfree-random` — all threads allocate their share, then the objects are
//!   freed in one random order over all threads (most frees are of another
//!   thread's objects: LLFree's hardest case); repeated.
//! * `llfree-repeat` — each thread allocates and frees a single object,
//!   `iterations` times, as fast as it can.
//!
//! The paper measures the time of all allocations (frees) of a phase and
//! divides by their number; the report's `alloc_ns` and `free_ns` are that:
//! the wall time of the phases divided by the operations one thread did in
//! them. Paper scale is its 128 GiB zone: bulk allocates half of it, random
//! all of it. The paper's benchmarks call the frame allocator directly, so
//! `publish` is off by default (`malloc`/`free`, offsets kept in DRAM).

use super::driver::{thread_anchor, Shared, Slots, GLOBAL_ANCHORS};
use super::rng::Rng;
use super::{Scale, WorkloadError};
use crate::alloc::Allocator;
use serde::{Deserialize, Serialize};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Which of the three benchmarks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bench {
    Bulk,
    Random,
    Repeat,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    pub bench: Bench,
    /// Objects allocated in one round, divided among the threads (bulk, random).
    pub objects: u64,
    /// Bytes per object: 4096 = a base frame, 2097152 = a huge frame.
    pub size: u64,
    /// Rounds (bulk, random) or allocate–free pairs per thread (repeat).
    pub iterations: u64,
    /// `malloc_to` / `free_from` through persistent slots instead of `malloc` / `free`.
    pub publish: bool,
}

impl Params {
    pub fn preset(bench: Bench, scale: Scale) -> Params {
        let (objects, iterations) = match bench {
            Bench::Bulk => scale.pick((4_096, 4), (262_144, 10), (1 << 24, 10)),
            Bench::Random => scale.pick((4_096, 4), (262_144, 10), (1 << 25, 10)),
            Bench::Repeat => scale.pick((1, 20_000), (1, 5_000_000), (1, 100_000_000)),
        };
        Params { bench, objects, size: 4096, iterations, publish: false }
    }

    fn per_thread(&self, threads: u32) -> u64 {
        match self.bench {
            Bench::Repeat => 1,
            _ => self.objects / threads as u64,
        }
    }

    pub fn validate(&self, threads: u32) -> Result<(), String> {
        if self.size < 24 {
            return Err(format!("size = {} (objects carry a 24-byte checksum: at least 24)", self.size));
        }
        if self.per_thread(threads) == 0 {
            return Err(format!("objects = {} leaves no object per thread", self.objects));
        }
        if self.iterations == 0 {
            return Err("iterations = 0".into());
        }
        Ok(())
    }

    pub fn peak_live(&self, threads: u32) -> u64 {
        (threads as u64).saturating_mul(self.per_thread(threads)).saturating_mul(self.size.saturating_add(16))
    }

    /// Live objects at the peak.
    pub fn peak_objects(&self, threads: u32) -> u64 {
        threads as u64 * self.per_thread(threads)
    }
}

fn id(round: u64, i: u64) -> u64 {
    round << 40 | i
}

/// Phase timing: the barrier leader closes one phase and opens the next.
struct Clock {
    since: Instant,
    alloc: Duration,
    free: Duration,
}

impl Clock {
    fn new() -> Mutex<Clock> {
        Mutex::new(Clock { since: Instant::now(), alloc: Duration::ZERO, free: Duration::ZERO })
    }
}

/// Ends the phase at a barrier: the last thread to arrive adds its length to
/// `alloc` or `free` and starts the next.
fn lap<A: Allocator>(
    w: &mut super::Worker<'_, '_, A>,
    clock: &Mutex<Clock>,
    alloc: Option<bool>,
) -> Result<(), WorkloadError> {
    if w.barrier()? {
        let mut c = clock.lock().unwrap();
        let d = c.since.elapsed();
        match alloc {
            Some(true) => c.alloc += d,
            Some(false) => c.free += d,
            None => {}
        }
        c.since = Instant::now();
    }
    Ok(())
}

fn report<A: Allocator>(sh: &Shared<'_, A>, clock: &Mutex<Clock>, per_thread_ops: u64) {
    let c = clock.lock().unwrap();
    let ns = |d: Duration| (d.as_nanos() as f64 / per_thread_ops.max(1) as f64 * 10.0).round() / 10.0;
    sh.extra("alloc_ns", ns(c.alloc));
    sh.extra("free_ns", ns(c.free));
}

pub fn run<A: Allocator>(sh: &Shared<'_, A>, p: &Params) -> Result<(), WorkloadError> {
    match p.bench {
        Bench::Bulk => bulk(sh, p),
        Bench::Random => random(sh, p),
        Bench::Repeat => repeat(sh, p),
    }
}

fn bulk<A: Allocator>(sh: &Shared<'_, A>, p: &Params) -> Result<(), WorkloadError> {
    let n = p.per_thread(sh.threads);
    sh.set_expected_ops(sh.threads as u64 * p.iterations * n * 2);
    sh.phase("running");
    let clock = Clock::new();
    sh.parallel(|tid| {
        let mut w = sh.worker(tid);
        let slots = Slots::new(&mut w, n as usize, p.publish, thread_anchor(tid, 0))?;
        lap(&mut w, &clock, None)?;
        for it in 0..p.iterations {
            for i in 0..n {
                let off = slots.alloc(&mut w, i as usize, p.size)?;
                w.stamp(off, p.size, id(it, i));
            }
            lap(&mut w, &clock, Some(true))?;
            for i in 0..n {
                w.verify(slots.get(&w, i as usize), p.size, id(it, i))?;
                slots.free(&mut w, i as usize)?;
            }
            lap(&mut w, &clock, Some(false))?;
        }
        slots.destroy(&mut w)
    })?;
    report(sh, &clock, p.iterations * n);
    Ok(())
}

fn random<A: Allocator>(sh: &Shared<'_, A>, p: &Params) -> Result<(), WorkloadError> {
    let n = p.per_thread(sh.threads);
    let total = n * sh.threads as u64;
    sh.set_expected_ops(total * p.iterations * 2);
    // One slot array for all threads: a thread frees what others allocated.
    let slots = sh.single(0, |w| Slots::new(w, total as usize, p.publish, GLOBAL_ANCHORS - 1))?;
    let clock = Clock::new();
    for it in 0..p.iterations {
        let mut order: Vec<u64> = (0..total).collect();
        Rng::new(sh.seed ^ 0x5eed, it).shuffle(&mut order);
        sh.phase(&format!("round {it}"));
        sh.parallel(|tid| {
            let mut w = sh.worker(tid);
            lap(&mut w, &clock, None)?;
            for i in tid as u64 * n..(tid as u64 + 1) * n {
                let off = slots.alloc(&mut w, i as usize, p.size)?;
                w.stamp(off, p.size, id(it, i));
            }
            lap(&mut w, &clock, Some(true))?;
            for &i in &order[(tid as u64 * n) as usize..((tid as u64 + 1) * n) as usize] {
                w.verify(slots.get(&w, i as usize), p.size, id(it, i))?;
                slots.free(&mut w, i as usize)?;
            }
            lap(&mut w, &clock, Some(false))
        })?;
    }
    sh.single(0, |w| slots.destroy(w))?;
    report(sh, &clock, p.iterations * n);
    Ok(())
}

fn repeat<A: Allocator>(sh: &Shared<'_, A>, p: &Params) -> Result<(), WorkloadError> {
    sh.set_expected_ops(sh.threads as u64 * p.iterations * 2);
    sh.phase("running");
    let clock = Clock::new();
    sh.parallel(|tid| {
        let mut w = sh.worker(tid);
        let slots = Slots::new(&mut w, 1, p.publish, thread_anchor(tid, 0))?;
        lap(&mut w, &clock, None)?;
        for it in 0..p.iterations {
            let off = slots.alloc(&mut w, 0, p.size)?;
            w.stamp(off, p.size, id(it, 0));
            w.verify(off, p.size, id(it, 0))?;
            slots.free(&mut w, 0)?;
        }
        // Allocation and free alternate: the phase counts as both.
        lap(&mut w, &clock, Some(true))?;
        slots.destroy(&mut w)
    })?;
    let mut c = clock.lock().unwrap();
    c.free = c.alloc;
    drop(c);
    report(sh, &clock, 2 * p.iterations);
    Ok(())
}
