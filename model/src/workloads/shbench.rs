//! Shbench (MicroQuill's SmartHeap stress test; NVAlloc §6.2): every thread
//! allocates and frees objects of 64–1000 B, "the smaller objects … allocated
//! and freed more frequently", for 10^5 iterations.
//!
//! The paper gives no more detail, so pmsim renders it thus (parameters
//! below): each thread keeps `batch` slots. In every iteration it frees
//! each live object with probability `min_size / size` — the smallest objects
//! die every iteration, 1000 B ones live about 16 — and refills the empty
//! slots with new objects whose size is drawn log-uniformly from
//! `min_size..=max_size` (density ∝ 1/size). So small objects dominate both
//! allocations and frees, while larger ones dominate the live data.

use super::driver::{thread_anchor, Shared, Slots};
use super::rng::Rng;
use super::{Scale, WorkloadError};
use crate::alloc::Allocator;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    pub iterations: u64,
    /// Object slots per thread.
    pub batch: u64,
    pub min_size: u64,
    pub max_size: u64,
    /// Objects live in a persistent slot array (`malloc_to` / `free_from`).
    pub publish: bool,
}

impl Params {
    pub fn preset(scale: Scale) -> Params {
        let iterations = scale.pick(200, 100_000, 100_000);
        Params { iterations, batch: 100, min_size: 64, max_size: 1000, publish: true }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.min_size < 24 || self.min_size > self.max_size {
            return Err(format!("sizes {}..={} (need 24 <= min_size <= max_size)", self.min_size, self.max_size));
        }
        if self.batch == 0 {
            return Err("batch = 0 (must be at least 1)".into());
        }
        if self.iterations == 0 {
            return Err("iterations = 0 (must be at least 1: nothing would be measured)".into());
        }
        Ok(())
    }

    pub fn peak_live(&self, threads: u32) -> u64 {
        (threads as u64).saturating_mul(self.batch).saturating_mul(self.max_size.saturating_add(16))
    }

    /// A size drawn log-uniformly from `min_size..=max_size`.
    fn size(&self, rng: &mut Rng) -> u64 {
        let (lo, hi) = (self.min_size as f64, (self.max_size + 1) as f64);
        ((lo * (hi / lo).powf(rng.unit())) as u64).clamp(self.min_size, self.max_size)
    }
}

pub fn run<A: Allocator>(sh: &Shared<'_, A>, p: &Params) -> Result<(), WorkloadError> {
    // Expected: about 2 × batch × E[min/size] per iteration; a rough figure.
    let churn = (p.min_size as f64 / ((p.min_size * p.max_size) as f64).sqrt()).min(1.0);
    sh.set_expected_ops((sh.threads as f64 * p.iterations as f64 * p.batch as f64 * 2.0 * churn) as u64);
    sh.phase("running");
    sh.parallel(|tid| {
        let mut w = sh.worker(tid);
        let n = p.batch as usize;
        let slots = Slots::new(&mut w, n, p.publish, thread_anchor(tid, 0))?;
        // (id, size) of each slot; size 0 = empty.
        let mut meta = vec![(0u64, 0u64); n];
        let mut next_id = (tid as u64) << 48;
        for _ in 0..p.iterations {
            for (i, m) in meta.iter_mut().enumerate() {
                if m.1 != 0 && w.rng.below(m.1) < p.min_size {
                    let off = slots.get(&w, i);
                    w.verify(off, m.1, m.0)?;
                    slots.free(&mut w, i)?;
                    m.1 = 0;
                }
            }
            for (i, m) in meta.iter_mut().enumerate() {
                if m.1 == 0 {
                    let size = p.size(&mut w.rng);
                    let off = slots.alloc(&mut w, i, size)?;
                    next_id += 1;
                    w.stamp(off, size, next_id);
                    *m = (next_id, size);
                }
            }
        }
        if w.barrier()? {
            sh.snapshot("end of the last iteration");
            sh.end_measure();
        }
        w.barrier()?;
        for (i, m) in meta.iter().enumerate() {
            let off = slots.get(&w, i);
            w.verify(off, m.1, m.0)?;
            slots.free(&mut w, i)?;
        }
        slots.destroy(&mut w)
    })
}
