//! Smootherstep decay of freed extents (jemalloc's scheme, which the NVAlloc
//! paper inherits for its reclaimed → retained lists, §4.3).
//!
//! Time is counted in large-allocator operations ("ticks"), not
//! milliseconds, so that a traced run is reproducible event for event. The
//! decay window of `decay_ops` ticks is cut into [`STEPS`] epochs; each epoch
//! remembers how many bytes were freed in it (its *backlog*). Bytes freed
//! `k` epochs ago may still sit on the reclaimed list in proportion
//! `1 − smootherstep(k / STEPS)`: all of the newest, none of those older than
//! the window, and in between a curve that is flat at both ends, so that a
//! burst of frees is handed over to the retained list gradually instead of
//! all at once when a hard cut-off passes it.

use std::collections::VecDeque;

/// Epochs per decay window (jemalloc's `SMOOTHSTEP_NSTEPS`).
pub const STEPS: usize = 200;

/// `6x⁵ − 15x⁴ + 10x³`: 0 at 0, 1 at 1, with zero first and second
/// derivatives at both ends.
pub fn smootherstep(x: f64) -> f64 {
    let x = x.clamp(0.0, 1.0);
    x * x * x * (x * (6.0 * x - 15.0) + 10.0)
}

/// The decay state of one large allocator.
#[derive(Debug)]
pub struct Decay {
    /// Ticks per epoch; 0 means no decay window (everything decays at once).
    epoch_ticks: u64,
    /// The tick at which the current epoch began.
    epoch_start: u64,
    /// Bytes freed per epoch, oldest first; the last is the current epoch.
    backlog: VecDeque<u64>,
    /// `weight[i]`: the share of `backlog[i]` that may stay reclaimed.
    weight: Vec<f64>,
}

impl Decay {
    pub fn new(decay_ops: u64) -> Decay {
        let weight = (0..STEPS).map(|i| 1.0 - smootherstep((STEPS - 1 - i) as f64 / STEPS as f64)).collect();
        Decay {
            epoch_ticks: decay_ops.div_ceil(STEPS as u64),
            epoch_start: 0,
            backlog: std::iter::repeat_n(0, STEPS).collect(),
            weight,
        }
    }

    /// Records `bytes` freed at `tick`.
    pub fn freed(&mut self, tick: u64, bytes: u64) {
        self.advance(tick);
        *self.backlog.back_mut().expect("STEPS > 0") += bytes;
    }

    /// How many bytes may stay on the reclaimed list at `tick`; the rest,
    /// oldest first, moves to the retained list.
    pub fn limit(&mut self, tick: u64) -> u64 {
        if self.epoch_ticks == 0 {
            return 0;
        }
        self.advance(tick);
        self.backlog.iter().zip(&self.weight).map(|(&b, &w)| (b as f64 * w) as u64).sum()
    }

    /// Starts the epochs that have begun by `tick`.
    fn advance(&mut self, tick: u64) {
        if self.epoch_ticks == 0 {
            return;
        }
        let passed = (tick.saturating_sub(self.epoch_start) / self.epoch_ticks).min(STEPS as u64);
        for _ in 0..passed {
            self.backlog.pop_front();
            self.backlog.push_back(0);
        }
        self.epoch_start = tick - (tick - self.epoch_start) % self.epoch_ticks;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curve_ends() {
        assert_eq!(smootherstep(0.0), 0.0);
        assert_eq!(smootherstep(1.0), 1.0);
        assert!((smootherstep(0.5) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn freed_bytes_decay_gradually_then_fully() {
        let mut d = Decay::new(STEPS as u64 * 10);
        d.freed(0, 1 << 20);
        assert_eq!(d.limit(0), 1 << 20, "the newest epoch keeps everything");
        let quarter = d.limit(STEPS as u64 * 10 / 4);
        let half = d.limit(STEPS as u64 * 10 / 2);
        let late = d.limit(STEPS as u64 * 10 * 9 / 10);
        assert!(quarter > half && half > late && late > 0, "{quarter} {half} {late}");
        assert!(quarter < 1 << 20);
        assert_eq!(d.limit(STEPS as u64 * 10 + 10), 0, "nothing is kept past the window");
    }

    #[test]
    fn no_window_keeps_nothing() {
        let mut d = Decay::new(0);
        d.freed(5, 4096);
        assert_eq!(d.limit(5), 0);
    }
}
