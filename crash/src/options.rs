//! What to explore: the options of one run of the explorer (`pmsim crash`'s
//! flags), read by every room of the crate and written by none.

use pmsim_traces::OpKind;

/// What to explore.
#[derive(Clone, Debug)]
pub struct Options {
    /// Images per crash point: exhaustive up to this many, else sampled.
    pub bound: u64,
    /// Images sampled at a point beyond `bound` whose pending lines that
    /// recovery reads have more combinations than `bound` (at most `bound`).
    /// Such a point has thousands of pending lines (a steady-state run's
    /// lazily persisted lines), so any number of samples is a small part of
    /// its images; its code path is covered through its points
    /// ([`Options::per_path`]) and their in-operation stores, which every
    /// sample varies.
    pub samples: u64,
    /// Seed of the sampler.
    pub seed: u64,
    /// Keep every N-th selected crash point.
    pub every: u64,
    /// Explore every selected point, not only some of each code path
    /// ([`crate::paths`]).
    pub all_points: bool,
    /// Points explored per code path: its first and this many less one
    /// more, picked by a seeded hash ([`crate::paths::plan`]).
    pub per_path: u64,
    /// Workers exploring points at once (0: one per core).
    pub jobs: usize,
    /// Only crash points inside an operation of this kind (any thread).
    pub during: Option<OpKind>,
    /// Only crash points after a marker with this label and before that
    /// thread's next marker.
    pub marker: Option<String>,
    /// Only this crash point (its number among the fences and clflushes).
    pub point: Option<u64>,
    /// Only this image of each point.
    pub image: Option<u64>,
    /// Live allocations that nothing accounts for (and, under a
    /// reachability-based recovery, no mark from the roots reaches) that
    /// recovery may leave: 0 unless the user tolerates some.
    pub leak_bound: u64,
    /// Crash the recovery of every N-th image (chosen by the seeded
    /// generator) at each of its fences and recover again; 0: never.
    pub recovery_crashes: u64,
    /// Images per fence of a crashed recovery (exhaustive up to this many,
    /// else sampled).
    pub recovery_bound: u64,
    /// Count, instead of reporting, an interrupted `malloc_to` that finds its
    /// destination already naming its (free) block, where the allocator's
    /// `free_from` leaves destinations as they are
    /// ([`crate::CrashTarget::free_from_leaves_dest`]): the destination still
    /// holds what an earlier `free_from` of the same block left. The one
    /// tolerance of NVAlloc's `wal=artifact` guarantee.
    pub allow_stale_dest: bool,
    /// At a point with more images than `bound`, check `samples` sampled
    /// images even once the images checked cover every recovery-visible
    /// state of the point (which otherwise ends the point): the reduction is
    /// then verified rather than trusted (a sampled image in a state not seen
    /// before makes the point incomplete).
    pub full_sample: bool,
}

impl Options {
    /// Images sampled at a point beyond the bound.
    pub fn sampled(&self) -> u64 {
        self.samples.min(self.bound).max(1)
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            bound: 1024,
            samples: 128,
            seed: 1,
            every: 1,
            all_points: false,
            per_path: 2,
            jobs: 0,
            during: None,
            marker: None,
            point: None,
            image: None,
            leak_bound: 0,
            recovery_crashes: 0,
            recovery_bound: 4,
            allow_stale_dest: false,
            full_sample: false,
        }
    }
}
