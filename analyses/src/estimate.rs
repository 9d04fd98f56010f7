//! A point's estimated time on Optane: the CPU's work (measured natively
//! with flushes off, [`crate::cpu`]) plus persistence (the simulator), and
//! the two apart, so that a figure can show where the time goes and nothing
//! comes out faster than the CPU alone allows.
//!
//! Two estimates, as the simulator has two persistence models:
//!
//! - **single thread, summed**: CPU time per operation plus the simulator's
//!   persist time per operation (its latency model: the reflush penalty by
//!   distance, XPBuffer hits and misses, fences);
//! - **contending**: the contention model's virtual-time replay with each
//!   thread's clock advanced by its CPU work as well (points simulated with
//!   `sim.contention = true`): the threads share the DIMMs.
//!
//! Where a point has the contending estimate it is the one used; a
//! multi-threaded point without it has no estimate (the sum assumes one
//! thread). The paper's Fig. 11 names the parts of a run's time Search,
//! FlushMeta, FlushWAL and Other ([`Breakdown`]).

use crate::fields::*;
use crate::row::Row;

/// Operations per second from nanoseconds per operation.
fn per_s(ns_per_op: f64) -> Option<f64> {
    (ns_per_op > 0.0).then(|| 1e9 / ns_per_op)
}

/// CPU time per operation (ns), measured natively with flushes off.
pub fn cpu_ns(r: &Row) -> Option<f64> {
    r.num(CPU_TOTAL)
}

/// The simulator's persist time per operation (ns), one thread, no
/// contention: of the run without its setup (heap creation and close, which
/// a benchmark does not time; a short run's one-time costs would otherwise
/// outweigh its operations), or of the whole run in rows that predate it.
pub fn persist_ns(r: &Row) -> Option<f64> {
    r.num(STEADY_PER_OP).or_else(|| r.num(PERSIST_PER_OP))
}

/// The operations [`persist_ns`] is per.
fn persist_ops(r: &Row) -> Option<f64> {
    r.num(STEADY_OPS).or_else(|| r.num(SIM_OPS))
}

/// Estimated time per operation (ns) of a one-thread point: CPU + persist.
pub fn summed_ns(r: &Row) -> Option<f64> {
    Some(cpu_ns(r)? + persist_ns(r)?)
}

/// Estimated operations per second, CPU work and persistence together: the
/// contending estimate where the point has one, else (one thread) the sum.
pub fn ops_per_s(r: &Row) -> Option<f64> {
    if let Some(x) = r.num(EST_CPU_OPS_PER_S) {
        return Some(x);
    }
    (r.point.threads == 1).then(|| per_s(summed_ns(r)?)).flatten()
}

/// Estimated run time (ns): the contending estimate's makespan, else (one
/// thread) the sum over the simulated operations.
pub fn run_ns(r: &Row) -> Option<f64> {
    if let Some(x) = r.num(EST_CPU_MAKESPAN) {
        return Some(x);
    }
    (r.point.threads == 1).then(|| Some(summed_ns(r)? * persist_ops(r)?)).flatten()
}

/// Operations per second on the CPU alone: every thread busy with its
/// measured work per operation, nothing persisted.
pub fn cpu_only_ops_per_s(r: &Row) -> Option<f64> {
    Some(per_s(cpu_ns(r)?)? * r.point.threads as f64)
}

/// Operations per second of persistence alone (no CPU work): the contention
/// model without CPU costs where simulated with it, else (one thread) the
/// simulator's persist time.
pub fn persist_only_ops_per_s(r: &Row) -> Option<f64> {
    if let Some(x) = r.num(EST_OPS_PER_S) {
        return Some(x);
    }
    (r.point.threads == 1).then(|| per_s(persist_ns(r)?)).flatten()
}

/// The parts of a run's time as the paper's Fig. 11 names them, per
/// operation and thread (ns).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Breakdown {
    /// The allocator's CPU work (the paper: object searching, splitting and
    /// coalescing; pmsim: all of the allocator's CPU time in its operations).
    pub search: f64,
    /// Flushes of metadata and the bookkeeping log, with the waits for them.
    pub flush_meta: f64,
    /// Flushes of write-ahead-log entries, with the waits for them.
    pub flush_wal: f64,
    /// Everything else: the workload's own CPU work, user-data flushes (a
    /// `malloc_to`'s destination), fences that ordered no flush, and time a
    /// blocked thread waited.
    pub other: f64,
}

impl Breakdown {
    /// The part-by-part mean of `each` (runs of one point under several
    /// seeds); all zero for none.
    pub fn mean(each: &[Breakdown]) -> Breakdown {
        let n = each.len().max(1) as f64;
        let sum = |f: fn(&Breakdown) -> f64| each.iter().map(f).sum::<f64>() / n;
        Breakdown {
            search: sum(|b| b.search),
            flush_meta: sum(|b| b.flush_meta),
            flush_wal: sum(|b| b.flush_wal),
            other: sum(|b| b.other),
        }
    }

    pub fn total(&self) -> f64 {
        self.search + self.flush_meta + self.flush_wal + self.other
    }

    /// FlushMeta + FlushWAL.
    pub fn flush(&self) -> f64 {
        self.flush_meta + self.flush_wal
    }

    /// The parts in the paper's order, with its names.
    pub fn parts(&self) -> [(&'static str, f64); 4] {
        [("Search", self.search), ("FlushMeta", self.flush_meta), ("FlushWAL", self.flush_wal), ("Other", self.other)]
    }
}

/// The breakdown of a point: from the contending estimate's parts (the
/// threads' time summed, over the operations), else (one thread) from the
/// CPU profile and the simulator's persist time by category
/// ([`breakdown_summed`]).
pub fn breakdown(r: &Row) -> Option<Breakdown> {
    if let Some(ops) = r.num(EST_CPU_OPS).filter(|&o| o > 0.0) {
        let p = |f| r.num(f).unwrap_or(0.0) / ops;
        return Some(Breakdown {
            search: p(PART_ALLOC_CPU),
            flush_meta: p(PART_META) + p(PART_LOG),
            flush_wal: p(PART_WAL),
            other: p(PART_OTHER_CPU)
                + p(PART_DATA)
                + p(PART_UNMAPPED)
                + p(PART_FENCE)
                + p(PART_STORES)
                + p(PART_WAIT)
                + p(PART_LOCK_WAIT),
        });
    }
    (r.point.threads == 1).then(|| breakdown_summed(r)).flatten()
}

/// The one-thread breakdown without contention: the CPU profile (Search:
/// inside the allocator; Other: between operations) and the simulator's
/// persist time per operation by category.
pub fn breakdown_summed(r: &Row) -> Option<Breakdown> {
    let ops = r.num(SIM_OPS).filter(|&o| o > 0.0)?;
    let p = |f| r.num(f).unwrap_or(0.0) / ops;
    Some(Breakdown {
        search: r.num(CPU_ALLOC)?,
        flush_meta: p(PERSIST_META) + p(PERSIST_LOG),
        flush_wal: p(PERSIST_WAL),
        other: r.num(CPU_OUTSIDE)? + p(PERSIST_DATA) + p(PERSIST_UNMAPPED) + p(PERSIST_FENCE),
    })
}
