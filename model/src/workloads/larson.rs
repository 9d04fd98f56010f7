//! Larson (Larson & Krishnan; NVAlloc §6.2, Fig. 9–12): a server whose
//! threads replace random objects and hand their objects over to new threads.
//!
//! Every thread owns `chunks` slots, filled before the run by thread 0 (as
//! Larson's main thread does, so the first frees are remote frees). A
//! generation of a thread does `rounds` times: pick a random slot, verify and
//! free its object, allocate a new one of a random size in
//! `min_size..=max_size`. Then it ends and a *new OS thread* (with a new
//! allocator handle, hence a new tcache) takes over its slots — objects
//! allocated by one thread are freed by another.
//!
//! Paper: Larson-small 64–256 B, Larson-large 32–512 KB, for 30 seconds; the
//! artifact's scripts use 1000 chunks per thread and 10^4 rounds. The
//! `paper` preset is therefore time-bounded (`seconds = 30`, then the
//! generation in progress stops at its next round); `tiny` and `small` run a
//! fixed number of `generations`, so that they are repeatable.
//!
//! Throughput counts the rounds only: the initial fill and the final
//! teardown are outside the measured phase.

use super::driver::{joined, reported, thread_anchor, Shared, Slots};
use super::rng::Rng;
use super::{Scale, WorkloadError};
use crate::alloc::Allocator;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    pub min_size: u64,
    pub max_size: u64,
    /// Slots per thread.
    pub chunks: u64,
    /// Replacements per generation.
    pub rounds: u64,
    /// Generations per thread (0 = until `seconds`).
    pub generations: u64,
    /// Stop after this many seconds (0 = after `generations`).
    pub seconds: f64,
    /// Objects live in persistent slot arrays (`malloc_to` / `free_from`).
    pub publish: bool,
}

impl Params {
    /// Larson-small: 64–256 B.
    pub fn small(scale: Scale) -> Params {
        let (chunks, rounds, generations, seconds) =
            scale.pick((256, 2_000, 4, 0.0), (1000, 10_000, 300, 0.0), (1000, 10_000, 0, 30.0));
        Params { min_size: 64, max_size: 256, chunks, rounds, generations, seconds, publish: true }
    }

    /// Larson-large: 32–512 KB.
    pub fn large(scale: Scale) -> Params {
        let (chunks, rounds, generations, seconds) =
            scale.pick((32, 200, 3, 0.0), (1000, 10_000, 300, 0.0), (1000, 10_000, 0, 30.0));
        Params { min_size: 32 << 10, max_size: 512 << 10, chunks, rounds, generations, seconds, publish: true }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.min_size < 24 || self.min_size > self.max_size {
            return Err(format!("sizes {}..={} (need 24 <= min_size <= max_size)", self.min_size, self.max_size));
        }
        if self.chunks == 0 || self.rounds == 0 {
            return Err("chunks and rounds must be positive".into());
        }
        if self.generations == 0 && self.seconds <= 0.0 {
            return Err("give generations or seconds (both are 0: the run would never end)".into());
        }
        Ok(())
    }

    pub fn peak_live(&self, threads: u32) -> u64 {
        (threads as u64).saturating_mul(self.chunks).saturating_mul(self.max_size.saturating_add(16))
    }
}

/// A thread's objects, handed from generation to generation.
struct Owned {
    slots: Slots,
    /// (id, size) per slot.
    meta: Vec<(u64, u64)>,
    next_id: u64,
    rng: Rng,
}

pub fn run<A: Allocator>(sh: &Shared<'_, A>, p: &Params) -> Result<(), WorkloadError> {
    let threads = sh.threads;
    if p.generations > 0 {
        sh.set_expected_ops(threads as u64 * (p.chunks * 2 + p.generations * p.rounds * 2));
    }
    sh.phase("filling");
    // Larson's main thread allocates every thread's first objects.
    let owned: Vec<std::sync::Mutex<Owned>> = sh.single(0, |w| {
        (0..threads)
            .map(|tid| {
                let slots = Slots::new(w, p.chunks as usize, p.publish, thread_anchor(tid, 0))?;
                let mut rng = Rng::new(sh.seed, 1000 + tid as u64);
                let mut meta = Vec::with_capacity(p.chunks as usize);
                let mut next_id = (tid as u64) << 48;
                for i in 0..p.chunks as usize {
                    let size = rng.range(p.min_size, p.max_size);
                    let off = slots.alloc(w, i, size)?;
                    next_id += 1;
                    w.stamp(off, size, next_id);
                    meta.push((next_id, size));
                }
                Ok(std::sync::Mutex::new(Owned { slots, meta, next_id, rng }))
            })
            .collect()
    })?;
    sh.phase("rounds");
    sh.begin_measure();
    let start = Instant::now();
    let limit = (p.seconds > 0.0).then(|| Duration::from_secs_f64(p.seconds));
    let over = || limit.is_some_and(|l| start.elapsed() >= l);
    // One generation of thread `tid`: `rounds` replacements among its
    // objects, on the OS thread the generation runs on.
    let generation = |tid: u32| -> Result<(), WorkloadError> {
        let mut o = owned[tid as usize].lock().unwrap();
        let o = &mut *o;
        let mut w = sh.worker(tid);
        std::mem::swap(&mut w.rng, &mut o.rng);
        let r = (|| {
            for r in 0..p.rounds {
                if r % 1024 == 1023 && over() {
                    break;
                }
                let i = w.rng.below(p.chunks) as usize;
                let (id, size) = o.meta[i];
                let off = o.slots.get(&w, i);
                w.verify(off, size, id)?;
                o.slots.free(&mut w, i)?;
                let size = w.rng.range(p.min_size, p.max_size);
                let off = o.slots.alloc(&mut w, i, size)?;
                o.next_id += 1;
                w.stamp(off, size, o.next_id);
                o.meta[i] = (o.next_id, size);
            }
            Ok(())
        })();
        std::mem::swap(&mut w.rng, &mut o.rng);
        r
    };
    sh.parallel(|tid| {
        let mut gen = 0;
        while (p.generations == 0 || gen < p.generations) && !over() {
            // Each generation is a new OS thread with a new allocator handle,
            // made here as it is spawned; this thread only waits for it.
            sh.prepare(tid);
            std::thread::scope(|s| joined(s.spawn(|| reported(|| sh.guard(tid, || generation(tid)))).join()));
            if sh.aborted() {
                return Err(WorkloadError::Aborted);
            }
            gen += 1;
        }
        Ok(())
    })?;
    sh.end_measure();
    sh.snapshot("end of the last generation");
    sh.extra("rounds_s", start.elapsed().as_secs_f64());
    sh.phase("teardown");
    sh.single(0, |w| {
        for o in owned {
            let o = o.into_inner().unwrap();
            for (i, &(id, size)) in o.meta.iter().enumerate() {
                let off = o.slots.get(w, i);
                w.verify(off, size, id)?;
                o.slots.free(w, i)?;
            }
            o.slots.destroy(w)?;
        }
        Ok(())
    })
}
