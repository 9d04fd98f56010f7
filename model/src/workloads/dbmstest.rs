//! DBMStest (NVAlloc §3.3 and §6.2, Fig. 2, 11c, 12, 13b): the large
//! allocations of a database running TPC-DS. In each iteration every thread
//! allocates `n = objects / t` objects whose sizes follow a Poisson
//! distribution between 32 KB and 512 KB, then deletes 90 % of its live
//! objects at random. Paper: `objects = 10^4`, 50 warm-up iterations, then
//! 50 measured ones.
//!
//! The paper does not give the distribution's parameters; pmsim draws
//! `size = min_size + step · min(Poisson(lambda), (max_size − min_size) / step)`
//! with 16 KB steps and `lambda = 15`, i.e. a mean of 272 KB, the middle of
//! the range, clamped to it. "Deletes 90 %" is read as 90 % of everything the
//! thread holds (survivors of earlier iterations included), which keeps the
//! live set bounded at about `n / 9` objects between iterations.
//!
//! `small` keeps the live set near 600 MB (2000 objects per iteration, the
//! paper's 10^4 need about 3 GB) and runs 1000 iterations instead.
//!
//! With `publish` (default) objects are allocated with `malloc_to` into a
//! persistent slot array and freed with `free_from`.

use super::driver::{thread_anchor, Shared, Slots};
use super::{Scale, WorkloadError};
use crate::alloc::Allocator;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Objects per iteration, divided among the threads.
    pub objects: u64,
    pub warmup_iterations: u64,
    pub iterations: u64,
    pub min_size: u64,
    pub max_size: u64,
    /// Size granularity.
    pub step: u64,
    /// Mean of the Poisson variate, in steps.
    pub lambda: f64,
    /// Fraction of the live objects deleted after each iteration's allocations.
    pub delete_ratio: f64,
    pub publish: bool,
}

impl Params {
    pub fn preset(scale: Scale) -> Params {
        let (objects, warmup_iterations, iterations) = scale.pick((128, 2, 3), (2_000, 20, 1_000), (10_000, 50, 50));
        Params {
            objects,
            warmup_iterations,
            iterations,
            min_size: 32 << 10,
            max_size: 512 << 10,
            step: 16 << 10,
            lambda: 15.0,
            delete_ratio: 0.9,
            publish: true,
        }
    }

    fn per_thread(&self, threads: u32) -> u64 {
        self.objects / threads as u64
    }

    pub fn validate(&self, threads: u32) -> Result<(), String> {
        if self.min_size < 24 || self.min_size > self.max_size || self.step == 0 {
            return Err(format!(
                "sizes {}..={} step {} (need 24 <= min_size <= max_size, step > 0)",
                self.min_size, self.max_size, self.step
            ));
        }
        if self.per_thread(threads) == 0 {
            return Err(format!("objects = {} gives no objects per thread", self.objects));
        }
        if self.iterations == 0 {
            return Err("iterations = 0 (must be at least 1: nothing would be measured)".into());
        }
        if !(0.0..1.0).contains(&self.delete_ratio) || !(f64::MIN_POSITIVE..500.0).contains(&self.lambda) {
            return Err("delete_ratio must be in [0, 1) and lambda in (0, 500)".into());
        }
        Ok(())
    }

    /// Live objects a thread may hold at once: survivors plus one iteration.
    fn capacity(&self, threads: u32) -> u64 {
        let n = self.per_thread(threads);
        let keep = 1.0 - self.delete_ratio;
        ((n as f64 / (1.0 - keep) * keep).ceil() as u64).saturating_add(n).saturating_add(2)
    }

    pub fn peak_live(&self, threads: u32) -> u64 {
        let mean = self.min_size.saturating_add(self.step.saturating_mul(self.lambda as u64));
        (threads as u64).saturating_mul(self.capacity(threads)).saturating_mul(mean.min(self.max_size))
    }
}

pub fn run<A: Allocator>(sh: &Shared<'_, A>, p: &Params) -> Result<(), WorkloadError> {
    let n = p.per_thread(sh.threads);
    let iters = p.warmup_iterations + p.iterations;
    sh.set_expected_ops(sh.threads as u64 * iters * n * 2);
    let max_steps = (p.max_size - p.min_size) / p.step;
    sh.phase("warm-up");
    sh.parallel(|tid| {
        let mut w = sh.worker(tid);
        let cap = p.capacity(sh.threads) as usize;
        let slots = Slots::new(&mut w, cap, p.publish, thread_anchor(tid, 0))?;
        let mut free: Vec<usize> = (0..cap).rev().collect();
        // (slot, id, size) of the live objects.
        let mut live: Vec<(usize, u64, u64)> = Vec::with_capacity(cap);
        let mut next_id = (tid as u64) << 48;
        for it in 0..iters {
            if it == p.warmup_iterations && w.barrier()? {
                sh.begin_measure();
                sh.phase("measured iterations");
            }
            for _ in 0..n {
                let i = free.pop().expect("capacity covers survivors plus one iteration");
                let size = p.min_size + p.step * w.rng.poisson(p.lambda).min(max_steps);
                let off = slots.alloc(&mut w, i, size)?;
                next_id += 1;
                w.stamp(off, size, next_id);
                live.push((i, next_id, size));
            }
            let deletes = (live.len() as f64 * p.delete_ratio) as usize;
            for _ in 0..deletes {
                let j = w.rng.below(live.len() as u64) as usize;
                let (i, id, size) = live.swap_remove(j);
                let off = slots.get(&w, i);
                w.verify(off, size, id)?;
                slots.free(&mut w, i)?;
                free.push(i);
            }
        }
        if w.barrier()? {
            sh.end_measure();
            sh.snapshot("end of the last iteration");
        }
        w.barrier()?;
        for (i, id, size) in live {
            let off = slots.get(&w, i);
            w.verify(off, size, id)?;
            slots.free(&mut w, i)?;
        }
        slots.destroy(&mut w)
    })
}
