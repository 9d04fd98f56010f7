//! What a run of the explorer reports: the counts of points and images, the
//! coverage of each point, and the first violation with the stores its image
//! kept and dropped. Workers fill a [`Summary`] each; [`Summary::add`] merges
//! them.

use crate::paths::PathInfo;
use serde::Serialize;
use std::sync::atomic::AtomicU64;

/// Counters a caller may poll (progress bars). The plan's figures are set
/// once the points are planned (`planned` last, so a caller that sees it
/// non-zero sees the others).
#[derive(Default)]
pub struct Progress {
    /// Points explored and images checked so far.
    pub points: AtomicU64,
    pub images: AtomicU64,
    /// The plan: points selected, code paths among them, points to explore.
    pub selected: AtomicU64,
    pub paths: AtomicU64,
    pub planned: AtomicU64,
}

/// A store of a failing image, for the report.
#[derive(Clone, Debug, Serialize)]
pub struct StoreInfo {
    /// Its global event index in the trace.
    pub event: u64,
    pub offset: u64,
    pub len: u32,
    /// The bytes, hex.
    pub value: String,
}

/// Where a crash inside recovery happened: before fence `fence` of the
/// recovery run (counted from 0), image `image` of that fence's images.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RecoveryCrash {
    pub fence: u64,
    pub image: u64,
    pub images_at_fence: u64,
}

/// The first failing image.
#[derive(Clone, Debug, Serialize)]
pub struct Violation {
    /// The crash point (fence number) and image number.
    pub point: u64,
    pub image: u64,
    /// The global event index of the fence the crash happens before.
    pub event: u64,
    pub problem: String,
    /// Set when the image recovered correctly but a crash inside its
    /// recovery, recovered again, did not.
    pub recovery_crash: Option<RecoveryCrash>,
    /// Pending stores this image kept, and those it dropped.
    pub persisted: Vec<StoreInfo>,
    pub lost: Vec<StoreInfo>,
    pub images_at_point: u64,
    pub exhaustive: bool,
}

/// The coverage of one crash point.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PointCoverage {
    /// The crash point (fence number).
    pub point: u64,
    /// Its code path ([`Summary::paths`]).
    pub path: u32,
    /// Images recovered and checked.
    pub images: u64,
    /// Distinct recovery-visible states among them (images that differ in
    /// a byte the recovery or the checks read).
    pub distinct: u64,
    /// Whether every recovery-visible state of the point was explored
    /// (all images, or all prefixes of the pending lines anything reads).
    pub complete: bool,
    /// Lines with pending stores, and those of them any image's recovery or
    /// checks read.
    pub pending_lines: u64,
    pub read_lines: u64,
    /// Images the allocator refused, as its design requires here.
    pub refused: u64,
}

/// The coverage of one code path ([`crate::paths`]).
#[derive(Clone, Debug, Serialize)]
pub struct PathCoverage {
    /// Its number (in order of first occurrence) and what its signature says.
    pub path: u32,
    #[serde(flatten)]
    pub info: PathInfo,
    /// Its points explored, the images checked at them and their distinct
    /// recovery-visible states; whether every explored point was complete.
    pub explored: u64,
    pub images: u64,
    pub distinct: u64,
    pub complete: bool,
}

/// What a run of the explorer did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub allocator: String,
    /// How points were chosen: "paths" (some points of every code path) or
    /// "all points" ([`crate::Options::all_points`]).
    pub mode: String,
    /// Points the selection options chose, the code paths among them, and
    /// the points per path explored ("paths" mode).
    pub selected_points: u64,
    pub paths: u64,
    pub per_path: u64,
    /// Paths with an explored point, and the selected points not explored
    /// whose path was (covered by path).
    pub paths_covered: u64,
    pub covered_by_path: u64,
    /// Workers that explored at once.
    pub jobs: u64,
    /// Moments a crash point may be at: fences and clflushes.
    pub fences: u64,
    /// Whether the end of the trace is a crash point too (for an allocator
    /// with state outside its heap, [`crate::CrashTarget::outside_markers`]); its
    /// number is `fences`.
    pub end_point: bool,
    pub points: u64,
    pub images: u64,
    pub exhaustive_points: u64,
    pub sampled_points: u64,
    pub max_images_at_point: u64,
    /// Images the persistency model allows at the selected points (the
    /// exhaustive count; sampled points contribute their full product), as
    /// its decimal logarithm: the count itself can pass what an `f64` holds
    /// (hundreds of pending lines at one point). 0 for no point.
    pub possible_images_log10: f64,
    /// Most lines with pending stores at one point.
    pub max_pending_lines: u64,
    /// Distinct recovery-visible states explored (summed over points), and
    /// the points whose every such state was explored.
    pub distinct_states: u64,
    pub complete_points: u64,
    /// Live blocks no operation accounts for that the conservative mark of
    /// a reachability-based recovery reached (kept by a stale word): summed
    /// over images, and the most in one image.
    pub retained: u64,
    pub max_retained: u64,
    /// Blocks of interrupted operations left allocated but unpublished
    /// where the allocator allows it (LLFree's lost frames): summed over
    /// images, and the most in one image.
    pub lost: u64,
    pub max_lost: u64,
    /// Images with an interrupted `malloc_to` whose destination still named
    /// its free block (counted under [`crate::Options::allow_stale_dest`]).
    pub stale_dests: u64,
    /// Images the allocator refused to open, as its design requires at
    /// their point (Metall: a store a crash leaves without its
    /// properly-closed mark): correct outcomes, to which no check applies.
    /// Such an image reads nothing of the heap, so a point whose images are
    /// all refused has one recovery-visible state.
    pub refused: u64,
    /// Images whose recovery was crashed at each of its fences, the
    /// recovery fences crashed at, and the images recovered after such a crash.
    pub recovery_crashed_images: u64,
    pub recovery_fences: u64,
    pub recovery_crash_images: u64,
    pub seconds: f64,
    pub images_per_second: f64,
    /// Per crash point explored, in point order.
    pub coverage: Vec<PointCoverage>,
    /// Per code path, in order of first occurrence.
    pub path_coverage: Vec<PathCoverage>,
    pub violation: Option<Violation>,
}

/// `log10(10^a + 10^b)` without leaving the logarithms (−∞ is no image).
pub(crate) fn log10_sum(a: f64, b: f64) -> f64 {
    let (hi, lo) = if a > b { (a, b) } else { (b, a) };
    if hi == f64::NEG_INFINITY {
        return hi;
    }
    hi + (1.0 + 10f64.powf(lo - hi)).log10()
}

impl Summary {
    /// A summary to add points to (no images yet).
    pub(crate) fn empty() -> Summary {
        Summary { possible_images_log10: f64::NEG_INFINITY, ..Summary::default() }
    }

    /// Adds what another worker counted (its coverage after this one's).
    pub(crate) fn add(&mut self, o: Summary) {
        self.points += o.points;
        self.images += o.images;
        self.exhaustive_points += o.exhaustive_points;
        self.sampled_points += o.sampled_points;
        self.max_images_at_point = self.max_images_at_point.max(o.max_images_at_point);
        self.possible_images_log10 = log10_sum(self.possible_images_log10, o.possible_images_log10);
        self.max_pending_lines = self.max_pending_lines.max(o.max_pending_lines);
        self.distinct_states += o.distinct_states;
        self.complete_points += o.complete_points;
        self.retained += o.retained;
        self.max_retained = self.max_retained.max(o.max_retained);
        self.lost += o.lost;
        self.max_lost = self.max_lost.max(o.max_lost);
        self.stale_dests += o.stale_dests;
        self.refused += o.refused;
        self.recovery_crashed_images += o.recovery_crashed_images;
        self.recovery_fences += o.recovery_fences;
        self.recovery_crash_images += o.recovery_crash_images;
        self.coverage.extend(o.coverage);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_counts_add_up_in_logarithms_past_what_an_f64_holds() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(log10_sum(f64::NEG_INFINITY, 2.0), 2.0));
        assert!(close(log10_sum(0.0, 0.0), 2f64.log10()), "two points of one image each");
        assert!(close(log10_sum(2.0, 1.0), 110f64.log10()));
        assert!(close(log10_sum(400.0, 400.0), 400.0 + 2f64.log10()), "beyond 1.8e308");
    }
}
