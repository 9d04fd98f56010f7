//! The heap's shape as a run goes: live and mapped bytes and the slab
//! breakdown every N operations, so a figure can show fragmentation as it
//! develops rather than only its peak (`RunReport::series`).
//!
//! The series is bounded: when it reaches [`MAX_POINTS`] points every other
//! one is dropped and N doubles, so a run of any length keeps between
//! `MAX_POINTS / 2` and `MAX_POINTS` evenly spaced points (unless N is fixed).

use crate::alloc::{Footprint, SlabUtilization};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Points kept before the series thins itself out.
pub const MAX_POINTS: usize = 256;

/// One sample of the heap.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ShapePoint {
    /// Allocator operations done when the sample was taken.
    pub ops: u64,
    #[serde(flatten)]
    pub footprint: Footprint,
    /// Slabs by fullness, for allocators with slabs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slabs: Option<SlabUtilization>,
    /// The workload phase that ended here (Fragbench's `alloc`, `free`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
}

/// The series of a run, filled by the workload driver's samples.
pub struct Series {
    /// Operations between points.
    every: AtomicU64,
    /// Fixed by the user: never thinned out.
    fixed: bool,
    /// The operation count at which the next point is due.
    next_at: AtomicU64,
    points: Mutex<Vec<ShapePoint>>,
}

/// Sampling interval of the series, as a run asks for it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Every {
    /// Start at the driver's sampling grain and double as the run grows.
    #[default]
    Auto,
    /// A point every N operations (at the driver's sampling grain at best).
    Ops(u64),
}

impl Series {
    /// A series starting at `grain` operations between points when `every` is
    /// [`Every::Auto`].
    pub fn new(every: Every, grain: u64) -> Series {
        let (n, fixed) = match every {
            Every::Auto => (grain, false),
            Every::Ops(n) => (n.max(1), true),
        };
        Series { every: AtomicU64::new(n), fixed, next_at: AtomicU64::new(0), points: Mutex::new(Vec::new()) }
    }

    /// Whether a point is due at `ops` operations (cheap: one load).
    #[inline]
    pub fn due(&self, ops: u64) -> bool {
        ops >= self.next_at.load(Ordering::Relaxed)
    }

    /// Adds a point (if still due, or always for a phase end).
    pub fn record(&self, ops: u64, footprint: Footprint, slabs: Option<SlabUtilization>, phase: Option<&str>) {
        let mut points = self.points.lock().unwrap();
        if phase.is_none() && !self.due(ops) {
            return; // another thread took this one
        }
        points.push(ShapePoint { ops, footprint, slabs, phase: phase.map(str::to_string) });
        let mut every = self.every.load(Ordering::Relaxed);
        if !self.fixed && points.len() >= MAX_POINTS {
            // Keep the phase ends and every other sample.
            let mut i = 0;
            points.retain(|p| {
                i += 1;
                p.phase.is_some() || i % 2 == 1
            });
            every *= 2;
            self.every.store(every, Ordering::Relaxed);
        }
        self.next_at.store(ops + every, Ordering::Relaxed);
    }

    /// The points, in the order they were taken.
    pub fn take(&self) -> Vec<ShapePoint> {
        std::mem::take(&mut self.points.lock().unwrap())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(live: u64) -> Footprint {
        Footprint { live_bytes: live, mapped_bytes: 2 * live }
    }

    #[test]
    fn auto_series_stays_bounded_and_even() {
        let s = Series::new(Every::Auto, 10);
        for ops in (0..1_000_000).step_by(10) {
            if s.due(ops) {
                s.record(ops, fp(ops), None, None);
            }
        }
        s.record(1_000_000, fp(0), None, Some("free"));
        let p = s.take();
        assert!(p.len() > MAX_POINTS / 2 && p.len() <= MAX_POINTS, "{}", p.len());
        let gaps: Vec<u64> = p.windows(2).take(p.len() - 2).map(|w| w[1].ops - w[0].ops).collect();
        let (lo, hi) = (gaps.iter().min().unwrap(), gaps.iter().max().unwrap());
        assert!(*hi * 2 <= *lo * 3, "about evenly spaced over the whole run: {gaps:?}");
        assert_eq!(p.last().unwrap().phase.as_deref(), Some("free"));
    }

    #[test]
    fn fixed_series_keeps_every_point() {
        let s = Series::new(Every::Ops(1000), 10);
        for ops in (0..1_000_000).step_by(10) {
            if s.due(ops) {
                s.record(ops, fp(ops), None, None);
            }
        }
        assert_eq!(s.take().len(), 1000);
    }
}
