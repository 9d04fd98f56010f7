//! Fragbench (Rumble et al.'s fragmentation benchmark; NVAlloc §3.2, §6.4,
//! Table 1, Fig. 1b, 15): what static slab segregation costs when the size
//! distribution changes.
//!
//! Three phases, in order:
//! * **Before** — allocate `alloc_bytes` of objects from the Before
//!   distribution, deleting random live objects whenever the next allocation
//!   would push the live data over `live_cap`;
//! * **Delete** — delete `delete_ratio` of the live objects at random;
//! * **After** — as Before, with the After distribution.
//!
//! | | Before | Delete | After |
//! |---|---|---|---|
//! | W1 | fixed 100 B | 90 % | fixed 130 B |
//! | W2 | uniform 100–150 B | 0 % | uniform 200–250 B |
//! | W3 | uniform 100–150 B | 90 % | uniform 200–250 B |
//! | W4 | uniform 100–200 B | 50 % | uniform 1000–2000 B |
//!
//! Paper: 5 GB allocated per phase, live data capped at 1 GB; `small` and
//! `tiny` keep the 5 : 1 ratio at 500 MB / 100 MB and 5 MB / 1 MB. With `t`
//! threads, each thread does `1/t` of both.
//!
//! The figure of merit is the peak footprint (the allocator's mapped bytes);
//! the report's `extra` also has the footprint and slab breakdown at the end
//! of each phase. The live objects' offsets are kept in DRAM (`malloc` /
//! `free`): a persistent pointer table of millions of entries would add its
//! own bytes to the footprint being measured.

use super::driver::Shared;
use super::rng::Rng;
use super::{Scale, WorkloadError};
use crate::alloc::Allocator;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Table 1's row (1–4), for the record.
    pub w: u32,
    pub before_min: u64,
    pub before_max: u64,
    pub delete_ratio: f64,
    pub after_min: u64,
    pub after_max: u64,
    /// Bytes allocated in each of Before and After (all threads together).
    pub alloc_bytes: u64,
    /// Cap on the live data (all threads together).
    pub live_cap: u64,
}

impl Params {
    /// Workload `w` (1–4) of Table 1.
    pub fn preset(w: u32, scale: Scale) -> Params {
        let ((before_min, before_max), delete_ratio, (after_min, after_max)) = match w {
            1 => ((100, 100), 0.9, (130, 130)),
            2 => ((100, 150), 0.0, (200, 250)),
            3 => ((100, 150), 0.9, (200, 250)),
            4 => ((100, 200), 0.5, (1000, 2000)),
            _ => panic!("Fragbench has workloads W1–W4, not W{w}"),
        };
        let (alloc_bytes, live_cap) = scale.pick((5 << 20, 1 << 20), (500 << 20, 100 << 20), (5 << 30, 1 << 30));
        Params { w, before_min, before_max, delete_ratio, after_min, after_max, alloc_bytes, live_cap }
    }

    pub fn validate(&self) -> Result<(), String> {
        for (name, lo, hi) in [("before", self.before_min, self.before_max), ("after", self.after_min, self.after_max)]
        {
            if lo < 24 || lo > hi {
                return Err(format!("{name} sizes {lo}..={hi} (need 24 <= min <= max)"));
            }
        }
        if !(0.0..=1.0).contains(&self.delete_ratio) {
            return Err(format!("delete_ratio = {} (must be in [0, 1])", self.delete_ratio));
        }
        if self.live_cap < self.before_max.max(self.after_max) {
            return Err("live_cap is smaller than one object".into());
        }
        if self.alloc_bytes == 0 {
            return Err("alloc_bytes = 0 (must be at least 1: nothing would be allocated)".into());
        }
        Ok(())
    }

    pub fn peak_live(&self, _threads: u32) -> u64 {
        self.live_cap
    }
}

/// One thread's live objects: (offset, size, id).
struct Live {
    objs: Vec<(u64, u64, u64)>,
    bytes: u64,
    next_id: u64,
}

impl Live {
    fn delete_random<A: Allocator>(&mut self, w: &mut super::Worker<'_, '_, A>) -> Result<(), WorkloadError> {
        let j = w.rng.below(self.objs.len() as u64) as usize;
        let (off, size, id) = self.objs.swap_remove(j);
        w.verify(off, size, id)?;
        w.free(off)?;
        self.bytes -= size;
        Ok(())
    }
}

fn draw(rng: &mut Rng, lo: u64, hi: u64) -> u64 {
    if lo == hi {
        lo
    } else {
        rng.range(lo, hi)
    }
}

/// Records the footprint and slab breakdown at a phase's end.
fn phase_end<A: Allocator>(sh: &Shared<'_, A>, phase: &str) {
    sh.sample();
    sh.mark_phase(phase);
    let f = sh.alloc.footprint();
    sh.extra(&format!("{phase}_live_bytes"), f.live_bytes);
    sh.extra(&format!("{phase}_mapped_bytes"), f.mapped_bytes);
    if let Some(s) = sh.alloc.slab_utilization() {
        sh.extra(&format!("{phase}_slabs"), serde_json::to_value(s).expect("serializes"));
    }
}

pub fn run<A: Allocator>(sh: &Shared<'_, A>, p: &Params) -> Result<(), WorkloadError> {
    let t = sh.threads as u64;
    let (share, cap) = (p.alloc_bytes / t, p.live_cap / t);
    let mean_before = (p.before_min + p.before_max) / 2;
    let mean_after = (p.after_min + p.after_max) / 2;
    sh.set_expected_ops(2 * (p.alloc_bytes / mean_before + p.alloc_bytes / mean_after));
    sh.phase("before");
    sh.parallel(|tid| {
        let mut w = sh.worker(tid);
        let mut live = Live { objs: Vec::new(), bytes: 0, next_id: (tid as u64) << 48 };
        let fill = |w: &mut super::Worker<'_, '_, A>, live: &mut Live, lo: u64, hi: u64| {
            let mut done = 0;
            while done < share {
                let size = draw(&mut w.rng, lo, hi);
                while live.bytes + size > cap && !live.objs.is_empty() {
                    live.delete_random(w)?;
                }
                let off = w.malloc(size)?;
                live.next_id += 1;
                w.stamp(off, size, live.next_id);
                live.objs.push((off, size, live.next_id));
                live.bytes += size;
                done += size;
            }
            Ok::<(), WorkloadError>(())
        };
        fill(&mut w, &mut live, p.before_min, p.before_max)?;
        if w.barrier()? {
            phase_end(sh, "before");
            sh.phase("delete");
        }
        w.barrier()?;
        let deletes = (live.objs.len() as f64 * p.delete_ratio) as usize;
        for _ in 0..deletes {
            live.delete_random(&mut w)?;
        }
        if w.barrier()? {
            phase_end(sh, "delete");
            sh.phase("after");
        }
        w.barrier()?;
        fill(&mut w, &mut live, p.after_min, p.after_max)?;
        if w.barrier()? {
            phase_end(sh, "after");
            sh.end_measure();
            sh.snapshot("end of the After phase");
            sh.phase("teardown");
        }
        w.barrier()?;
        while let Some((off, size, id)) = live.objs.pop() {
            w.verify(off, size, id)?;
            w.free(off)?;
        }
        Ok(())
    })
}
