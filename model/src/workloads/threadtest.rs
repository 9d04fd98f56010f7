//! Threadtest (Hoard; NVAlloc §6.2): in each of `iterations` rounds, every
//! thread allocates `objects` objects of `size` bytes, then frees them all.
//!
//! Paper: 10^4 iterations, 10^5 objects of 64 B per thread. The artifact's
//! scripts (Ralloc's `threadtest T 10000 100000 0 8`) split the 10^5 objects
//! across the threads instead; `split = true` does that.
//!
//! With `publish` (the default) every object is allocated with `malloc_to`
//! into a persistent array of destination slots (anchored from the root) and
//! freed with `free_from` — the crash-consistent API NVAlloc-LOG's WAL and
//! PMDK's redo log exist for, and the one the NVAlloc artifact's own test
//! calls (`nvalloc_malloc_to`, though into an array of pointers in DRAM, so
//! its destinations' flushes write no PM; Ralloc's benchmarks, which the
//! paper's most likely were, keep their pointers in DRAM too). Without it
//! the offsets stay in DRAM and `malloc`/`free` are used, as Ralloc's
//! threadtest does; NVAlloc then skips its WAL, which the artifact's code
//! writes for every `malloc_to` wherever its destination is. A destination
//! in DRAM that the WAL still records is a mode pmsim does not have.
//!
//! With `keep` the last batch stays allocated and published when the run
//! ends (a program that builds a persistent data set and closes the store to
//! reopen it later, the use Metall is made for): the crash explorer then has
//! a store closed with data in it to check.

use super::driver::{thread_anchor, Shared, Slots};
use super::{Scale, WorkloadError};
use crate::alloc::Allocator;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    pub iterations: u64,
    /// Objects per thread per iteration (in total, if `split`).
    pub objects: u64,
    pub size: u64,
    /// Divide `objects` among the threads (the artifact's scripts).
    pub split: bool,
    /// `malloc_to` / `free_from` through a persistent slot array.
    pub publish: bool,
    /// Leave the last batch allocated and published at the end (with `publish`).
    #[serde(default)]
    pub keep: bool,
}

impl Params {
    pub fn preset(scale: Scale) -> Params {
        let (iterations, objects) = scale.pick((20, 5_000), (100, 100_000), (10_000, 100_000));
        Params { iterations, objects, size: 64, split: false, publish: true, keep: false }
    }

    fn per_thread(&self, threads: u32) -> u64 {
        if self.split {
            self.objects / threads as u64
        } else {
            self.objects
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
            return Err("iterations = 0 (must be at least 1: nothing would be measured)".into());
        }
        if self.keep && !self.publish {
            return Err("keep = true needs publish = true (kept objects are found through their slots)".into());
        }
        Ok(())
    }

    pub fn peak_live(&self, threads: u32) -> u64 {
        (threads as u64).saturating_mul(self.per_thread(threads)).saturating_mul(self.size.saturating_add(16))
    }
}

fn id(tid: u32, it: u64, i: u64) -> u64 {
    (tid as u64) << 48 | (it & 0xffff) << 32 | i
}

pub fn run<A: Allocator>(sh: &Shared<'_, A>, p: &Params) -> Result<(), WorkloadError> {
    let n = p.per_thread(sh.threads);
    sh.set_expected_ops(sh.threads as u64 * (p.iterations * n * 2 - if p.keep { n } else { 0 }));
    sh.phase("running");
    sh.parallel(|tid| {
        let mut w = sh.worker(tid);
        let slots = Slots::new(&mut w, n as usize, p.publish, thread_anchor(tid, 0))?;
        for it in 0..p.iterations {
            for i in 0..n {
                let off = slots.alloc(&mut w, i as usize, p.size)?;
                w.stamp(off, p.size, id(tid, it, i));
            }
            if it + 1 == p.iterations {
                // The working set: every thread holds its last batch.
                if w.barrier()? {
                    sh.snapshot("last iteration, all objects allocated");
                }
                w.barrier()?;
            }
            let kept = p.keep && it + 1 == p.iterations;
            for i in 0..n {
                let off = slots.get(&w, i as usize);
                w.verify(off, p.size, id(tid, it, i))?;
                if !kept {
                    slots.free(&mut w, i as usize)?;
                }
            }
        }
        if p.keep {
            return Ok(());
        }
        slots.destroy(&mut w)
    })
}
