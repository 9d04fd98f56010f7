//! The crash explorer on real traced runs of NVAlloc: the real code passes
//! with over 10,000 images each for NVAlloc-LOG and NVAlloc-GC, every
//! mutation (one removed flush) is caught, a reported image replays alone,
//! and bad inputs get one clear error.

use pmsim_crash::{explore, target_for, CrashTrace, Options, Progress, Summary};
use pmsim_model::runner::AllocSpec;
use pmsim_traces::OpKind;
use std::path::{Path, PathBuf};

/// Records `alloc` with the conformance kit's recorder.
fn record(dir: &Path, name: &str, alloc: &str, workload: &str, params: &[&str], values: bool) -> PathBuf {
    pmsim_crash::conformance::record(dir, name, &AllocSpec::parse(alloc, []).unwrap(), workload, params, values)
}

/// The explorer at every selected point (not only some of each code path),
/// as the tests that count images over a run ask for.
fn every_point() -> Options {
    Options { all_points: true, ..Options::default() }
}

fn run(trace: &Path, opts: &Options) -> Summary {
    let tr = CrashTrace::load(trace, None).unwrap();
    let target = target_for(&tr.header).unwrap();
    explore(&tr, target.as_ref(), opts, &Progress::default()).unwrap()
}

const THREADTEST: &[&str] = &["objects=100", "iterations=2"];
/// A longer Threadtest for the ≥ 10,000-image runs (most points are covered
/// completely in a few images, so it takes more points).
const THREADTEST_LONG: &[&str] = &["objects=200", "iterations=4"];

fn assert_passes(s: &Summary, min_images: u64) {
    if let Some(v) = &s.violation {
        panic!("violation at point {} image {}: {}", v.point, v.image, v.problem);
    }
    assert!(s.images >= min_images, "only {} images checked", s.images);
    eprintln!(
        "{}: {} points, {} images ({} exhaustive / {} sampled points), {:.0} images/s",
        s.allocator, s.points, s.images, s.exhaustive_points, s.sampled_points, s.images_per_second
    );
}

#[test]
fn nvalloc_log_strict_passes_over_10k_images() {
    let dir = tempfile::tempdir().unwrap();
    let t = record(dir.path(), "log", "nvalloc-log:wal=strict", "threadtest", THREADTEST_LONG, true);
    let s = run(&t, &Options { bound: 32, every: 1, ..every_point() });
    assert_passes(&s, 10_000);
    assert!(s.exhaustive_points > 0 && s.sampled_points > 0, "both enumeration modes are exercised");
}

/// `wal=artifact` (NVAlloc's public protocol, the default) with pmsim's
/// recovery of it, on Threadtest, Larson-small and FPTree, over 10,000 images
/// each. Its guarantee, exactly: every check passes (no block handed out
/// twice, no completed malloc lost or unpublished, no completed free undone,
/// no leak) except one: an interrupted `malloc_to` may find its destination
/// already naming the very block it is handed, left there by an earlier
/// `free_from` of it (the artifact never clears a destination durably), and
/// the crash leaves that pointer to a free block. On Larson-small the
/// explorer finds it (default options report it); counting those images
/// instead, nothing else fails. Strict runs never get this tolerance.
#[test]
fn nvalloc_log_artifact_guarantee_over_10k_images() {
    let dir = tempfile::tempdir().unwrap();
    let mut stale = 0;
    for (workload, params, bound, every) in [
        ("threadtest", THREADTEST_LONG, 32, 1),
        ("larson-small", &["chunks=16", "rounds=400"][..], 32, 2),
        ("fptree", &[][..], 8, 30),
    ] {
        let t = record(dir.path(), workload, "nvalloc-log", workload, params, true);
        let opts = Options { bound, every, ..every_point() };
        if workload == "larson-small" {
            let v = run(&t, &opts).violation.expect("the artifact's stale destination is found");
            assert!(
                v.problem.contains("interrupted malloc_to") && v.problem.contains("is not atomic: block free"),
                "{}",
                v.problem
            );
        }
        let s = run(&t, &Options { allow_stale_dest: true, ..opts });
        eprintln!("{workload}: {} stale destination(s)", s.stale_dests);
        assert_passes(&s, 10_000);
        stale += s.stale_dests;
    }
    assert!(stale > 0, "no image showed the stale destination");
}

#[test]
fn nvalloc_gc_passes_over_10k_images() {
    let dir = tempfile::tempdir().unwrap();
    let t = record(dir.path(), "gc", "nvalloc-gc", "threadtest", THREADTEST, true);
    let s = run(&t, &Options { bound: 32, every: 2, ..every_point() });
    assert_passes(&s, 10_000);
}

/// A workload and crash-point selection that reach the mutated flush's code.
struct Case {
    mutation: &'static str,
    workload: &'static str,
    params: &'static [&'static str],
    alloc_extra: &'static str,
    /// The operation the mutated flush is in, where it is not malloc or free.
    during: Option<OpKind>,
}

const FRAG: &[&str] = &["alloc_bytes=200000", "live_cap=60000"];
const LARSON: &[&str] = &["chunks=4", "rounds=300", "max_size=65536"];
const LOG_GC: &str = ":gc_interval=16";

impl Case {
    /// A mutation of the plain per-operation path, caught on Threadtest at every crash point.
    const fn on_threadtest(mutation: &'static str) -> Case {
        Case { mutation, workload: "threadtest", params: THREADTEST, alloc_extra: "", during: None }
    }
}

const CASES: [Case; 5] = [
    Case::on_threadtest("wal-entry-flush"),
    Case::on_threadtest("bitmap-flush"),
    Case::on_threadtest("dest-flush"),
    Case {
        mutation: "morph-flag-flush",
        workload: "fragbench-w1",
        params: FRAG,
        alloc_extra: "",
        during: Some(OpKind::Morph),
    },
    Case {
        mutation: "log-alt-flush",
        workload: "larson-large",
        params: LARSON,
        alloc_extra: LOG_GC,
        during: Some(OpKind::LogGc),
    },
];

#[test]
fn every_mutation_is_caught_and_its_image_replays_alone() {
    let dir = tempfile::tempdir().unwrap();
    let mut caught = Vec::new();
    for c in &CASES {
        let alloc = format!("nvalloc-log:mutation={}{}", c.mutation, c.alloc_extra);
        let t = record(dir.path(), c.mutation, &alloc, c.workload, c.params, true);
        // Coverage by code path with every default: a removed flush is caught.
        let opts = Options::default();
        let s = run(&t, &opts);
        let Some(v) = s.violation else { panic!("mutation {} not caught ({} images)", c.mutation, s.images) };
        eprintln!("{}: caught after {} images: {}", c.mutation, s.images, v.problem);
        // The reported image fails the same way when replayed (alone at an
        // exhaustive point, else after the images of its point before it).
        let one = run(&t, &Options { point: Some(v.point), image: Some(v.image), ..opts.clone() });
        assert!(one.images == 1 || !v.exhaustive && one.images <= v.image + 1, "{} images", one.images);
        assert_eq!(one.violation.map(|w| w.problem), Some(v.problem), "{}: replay", c.mutation);
        caught.push(c.mutation);
    }
    assert!(caught.len() >= 3);
}

#[test]
fn the_real_code_passes_where_the_mutations_fail() {
    let dir = tempfile::tempdir().unwrap();
    for c in CASES.iter().filter(|c| c.during.is_some()) {
        let alloc = format!("nvalloc-log{}", c.alloc_extra);
        let t = record(dir.path(), c.workload, &alloc, c.workload, c.params, true);
        // The code paths inside the operation the mutated flush is in.
        let s = run(&t, &Options { during: c.during, ..Options::default() });
        assert!(
            s.path_coverage.iter().any(|p| p.info.at.contains(c.during.unwrap().name().as_str())),
            "{}: a path reaches the mutated code",
            c.workload
        );
        assert_passes(&s, 1);
        assert_eq!(s.paths_covered, s.paths, "{}: every path covered", c.workload);
    }
}

#[test]
fn bad_inputs_get_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = |t: &Path, img: Option<&Path>| CrashTrace::load(t, img).err().expect("refused").to_string();

    let plain = record(dir.path(), "plain", "nvalloc-log", "threadtest", &["objects=10", "iterations=1"], false);
    let e = err(&plain, None);
    assert!(e.contains("plain.pmt") && e.contains("has no store values"), "{e}");

    let t = record(dir.path(), "ok", "nvalloc-log", "threadtest", &["objects=10", "iterations=1"], true);
    let img = dir.path().join("ok.pmt.img");
    let bytes = std::fs::read(&img).unwrap();

    let short = dir.path().join("short.img");
    std::fs::write(&short, &bytes[..bytes.len() / 2]).unwrap();
    let e = err(&t, Some(&short));
    assert!(e.contains("short.img") && e.contains("does not match the trace") && e.contains("bytes"), "{e}");

    let mut other = bytes.clone();
    other[5000] ^= 1;
    let changed = dir.path().join("changed.img");
    std::fs::write(&changed, &other).unwrap();
    let e = err(&t, Some(&changed));
    assert!(e.contains("changed.img") && e.contains("CRC-32"), "{e}");

    let e = err(&t, Some(&dir.path().join("missing.img")));
    assert!(e.contains("missing.img") && e.contains("cannot read the heap image"), "{e}");
    for e in [err(&plain, None), err(&t, Some(&short))] {
        assert!(!e.contains('\n'), "one line: {e}");
    }

    // And the intact pair loads.
    assert!(CrashTrace::load(&t, None).is_ok());
}

/// FPTree moves published pointers (leaf splits copy them, slots are reused
/// by new `malloc_to`s): a destination word stops naming its block once it
/// is overwritten or handed to a new operation, and the real code passes.
#[test]
fn fptree_moved_pointers_pass_under_nvalloc_log() {
    let dir = tempfile::tempdir().unwrap();
    let t = record(dir.path(), "fptree", "nvalloc-log", "fptree", &[], true);
    let s = run(&t, &Options { bound: 4, every: 800, ..every_point() });
    assert_passes(&s, 50);
}

/// NVAlloc-GC on FPTree (leaf splits leave stale copies of pointers): the
/// blocks a stale word keeps live are retained, reached by the checks' own
/// mark from the roots, and the run passes with no leak bound.
#[test]
fn nvalloc_gc_on_fptree_retains_what_the_mark_reaches() {
    let dir = tempfile::tempdir().unwrap();
    let t = record(dir.path(), "fpgc", "nvalloc-gc", "fptree", &[], true);
    let s = run(&t, &Options { bound: 8, every: 64, ..every_point() });
    assert_passes(&s, 100);
    eprintln!("retained {} (at most {} in one image)", s.retained, s.max_retained);
}

/// Coverage: distinct recovery-visible states are counted beside images; a
/// point whose images exceed the bound is explored completely when the lines
/// recovery and checks read fit it.
#[test]
fn coverage_counts_distinct_states_and_completes_points_beyond_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let t = record(dir.path(), "cov", "nvalloc-log", "threadtest", THREADTEST, true);
    let s = run(&t, &Options { bound: 8, every: 8, ..every_point() });
    assert_passes(&s, 100);
    assert!(s.distinct_states > 0 && s.distinct_states <= s.images);
    assert_eq!(s.coverage.len() as u64, s.points);
    assert_eq!(s.coverage.iter().map(|c| c.distinct).sum::<u64>(), s.distinct_states);
    let beyond = s.coverage.iter().filter(|c| c.complete).count() as u64 - s.exhaustive_points;
    assert!(beyond > 0, "no point beyond the bound was explored completely");
    assert!(s.coverage.iter().all(|c| c.read_lines <= c.pending_lines && c.distinct <= c.images));
    eprintln!(
        "{} distinct states in {} images; {} of {} points complete ({} beyond the bound)",
        s.distinct_states, s.images, s.complete_points, s.points, beyond
    );
}

/// Crashes inside NVAlloc-LOG's recovery, under both WAL protocols: the
/// real recovery is idempotent; one that clears its WAL before redoing it
/// (strict) or before settling each thread's newest entry (artifact) is
/// caught only there.
#[test]
fn crashes_inside_nvalloc_log_recovery() {
    let dir = tempfile::tempdir().unwrap();
    for wal in ["strict", "artifact"] {
        let alloc = format!("nvalloc-log:wal={wal}");
        let t = record(dir.path(), &format!("rc-{wal}"), &alloc, "threadtest", THREADTEST, true);
        let opts = Options { bound: 4, every: 8, recovery_crashes: 16, ..every_point() };
        let s = run(&t, &opts);
        assert_passes(&s, 100);
        assert!(s.recovery_crashed_images > 0 && s.recovery_crash_images > s.recovery_crashed_images);
        eprintln!(
            "wal={wal}: {} recoveries crashed at {} fences, {} images recovered again",
            s.recovery_crashed_images, s.recovery_fences, s.recovery_crash_images
        );

        let bad = format!("{alloc}:mutation=wal-clear-first");
        let t = record(dir.path(), &format!("rcbad-{wal}"), &bad, "threadtest", THREADTEST, true);
        let plain = run(&t, &Options { recovery_crashes: 0, during: Some(OpKind::Malloc), ..opts.clone() });
        assert!(plain.violation.is_none(), "wal={wal}: without crashes inside recovery the swapped order goes unseen");
        let o = Options { recovery_crashes: 1, during: Some(OpKind::Malloc), every: 1, ..opts };
        let s = run(&t, &o);
        let v = s.violation.expect("the swapped order is caught by a crash inside recovery");
        assert!(v.recovery_crash.is_some() && v.problem.contains("crash inside recovery"), "{}", v.problem);
        eprintln!("wal={wal}: wal-clear-first caught: {}", v.problem);
        let one = run(&t, &Options { point: Some(v.point), image: Some(v.image), ..o });
        assert_eq!(one.violation.map(|w| w.problem), Some(v.problem), "wal={wal}: replay");
    }
}

/// LLFree: the real code passes over 10,000 images of a traced Threadtest;
/// a crash between allocating a frame and publishing it (or unpublishing and
/// freeing it) loses the frame, which is counted, not a violation.
#[test]
fn llfree_passes_over_10k_images_with_lost_frames_counted() {
    let dir = tempfile::tempdir().unwrap();
    let t = record(dir.path(), "ll", "llfree", "threadtest", THREADTEST_LONG, true);
    let s = run(&t, &Options { bound: 32, every: 1, ..every_point() });
    assert_passes(&s, 10_000);
    assert!(s.lost > 0 && s.max_lost == 1, "lost frames: {} (at most {} in one image)", s.lost, s.max_lost);
    eprintln!("lost {} frame(s) over all images, at most {} in one", s.lost, s.max_lost);
}

/// LLFree's recovery trusting its counters after a crash leaves a child
/// counter off by one: only the metadata check (counters against bit
/// fields) sees it, and the image replays alone.
#[test]
fn llfree_metadata_check_catches_counters_recovery_did_not_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let t = record(dir.path(), "lltrust", "llfree:mutation=ll-trust-counters", "threadtest", THREADTEST, true);
    let opts = Options::default();
    let s = run(&t, &opts);
    let v = s.violation.expect("the stale counter is caught");
    assert!(
        v.problem.contains("metadata inconsistent") && v.problem.contains("bits set in its bit field"),
        "{}",
        v.problem
    );
    eprintln!("ll-trust-counters caught after {} images: {}", s.images, v.problem);
    let one = run(&t, &Options { point: Some(v.point), image: Some(v.image), ..opts });
    assert_eq!(one.violation.map(|w| w.problem), Some(v.problem), "replay");
}

/// Crashes inside LLFree's recovery (its counter rebuild, then the marker):
/// recovering again ends in the same checked heap.
#[test]
fn crashes_inside_llfree_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let t = record(dir.path(), "llrc", "llfree", "threadtest", THREADTEST, true);
    let s = run(&t, &Options { bound: 4, every: 4, recovery_crashes: 4, ..every_point() });
    assert_passes(&s, 100);
    assert!(s.recovery_crashed_images > 0 && s.recovery_crash_images > s.recovery_crashed_images);
    eprintln!(
        "{} recoveries crashed at {} fences, {} images recovered again",
        s.recovery_crashed_images, s.recovery_fences, s.recovery_crash_images
    );
}

/// Makalu: its undo log and offline GC pass over 10,000 images; blocks a
/// stale word keeps are retained, counted by the checks' own mark.
#[test]
fn makalu_passes_over_10k_images() {
    let dir = tempfile::tempdir().unwrap();
    let t = record(dir.path(), "mk", "makalu", "threadtest", THREADTEST_LONG, true);
    let s = run(&t, &Options { bound: 8, every: 1, ..every_point() });
    assert_passes(&s, 10_000);
    eprintln!("retained {} (at most {} in one image)", s.retained, s.max_retained);
}

/// Makalu's GC leaving a block's count of marked objects stale is seen by
/// the metadata check (counts against mark bits) at the first crash.
#[test]
fn makalu_metadata_check_catches_a_stale_mark_count() {
    let dir = tempfile::tempdir().unwrap();
    let t = record(dir.path(), "mkstale", "makalu:mutation=mark-count-stale", "threadtest", THREADTEST, true);
    let opts = Options::default();
    let s = run(&t, &opts);
    let v = s.violation.expect("the stale count is caught");
    assert!(v.problem.contains("metadata inconsistent") && v.problem.contains("hb_n_marks"), "{}", v.problem);
    eprintln!("mark-count-stale caught after {} images: {}", s.images, v.problem);
}

/// Crashes inside Makalu's recovery (its rollback and offline GC).
#[test]
fn crashes_inside_makalu_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let t = record(dir.path(), "mkrc", "makalu", "threadtest", THREADTEST, true);
    let s = run(&t, &Options { bound: 4, every: 8, recovery_crashes: 8, ..every_point() });
    assert_passes(&s, 100);
    assert!(s.recovery_crashed_images > 0 && s.recovery_crash_images > s.recovery_crashed_images);
}

/// Coverage by code path with the default options: every path of a traced
/// Threadtest is explored (its first point and one more), every selected
/// point is explored or covered by its path, and the report accounts for
/// each path's points and images.
#[test]
fn coverage_by_code_path_explores_every_path() {
    let dir = tempfile::tempdir().unwrap();
    let t = record(dir.path(), "paths", "nvalloc-log", "threadtest", THREADTEST, true);
    let s = run(&t, &Options::default());
    assert_passes(&s, 1);
    assert_eq!(s.mode, "paths");
    assert!(s.paths > 5 && s.paths_covered == s.paths, "{} of {} paths", s.paths_covered, s.paths);
    assert!(s.points <= 2 * s.paths && s.points >= s.paths && s.points < s.selected_points / 4);
    assert_eq!(s.points + s.covered_by_path, s.selected_points);
    assert_eq!(s.path_coverage.iter().map(|p| p.info.points).sum::<u64>(), s.selected_points);
    assert_eq!(s.path_coverage.iter().map(|p| p.explored).sum::<u64>(), s.points);
    assert_eq!(s.path_coverage.iter().map(|p| p.images).sum::<u64>(), s.images);
    assert!(s.path_coverage.iter().all(|p| p.explored == p.info.points.min(2)));
    // Each explored point belongs to the path the plan gave it.
    for c in &s.coverage {
        assert!(c.point >= s.path_coverage[c.path as usize].info.first);
    }
}

/// The code paths of a run, as the report names them.
fn path_names(s: &Summary) -> std::collections::BTreeSet<String> {
    s.path_coverage.iter().map(|p| format!("{} | {}", p.info.at, p.info.pending.join("; "))).collect()
}

/// The signature is fine enough for a removed flush to change what is
/// explored: each mutation's run has code paths the real run has not (the
/// store the flush left out is pending where the real code's never is).
#[test]
fn a_removed_flush_adds_code_paths() {
    let dir = tempfile::tempdir().unwrap();
    let real = record(dir.path(), "real", "nvalloc-log", "threadtest", THREADTEST, true);
    let real = path_names(&run(&real, &Options { bound: 1, ..Options::default() }));
    for m in ["wal-entry-flush", "bitmap-flush", "dest-flush"] {
        let t = record(dir.path(), m, &format!("nvalloc-log:mutation={m}"), "threadtest", THREADTEST, true);
        let s = run(&t, &Options { bound: 1, ..Options::default() });
        let mine = path_names(&s);
        let new: Vec<&String> = mine.iter().filter(|p| !real.contains(*p)).collect();
        assert!(!new.is_empty(), "{m}: the same paths as the real code");
        eprintln!("{m}: {} path(s) of its own, e.g. {}", new.len(), new[0]);
    }
}

/// Makalu's lazily persisted lines are one class per region whichever later
/// operation flushes them ([`pmsim_crash::paths`]); that keeps its Threadtest
/// to a few hundred paths, and still a removed flush inside one of its
/// undo-logged sections (a log entry's, so a header store may persist
/// before the entry that undoes it) gives the run paths of its own and is
/// found by the explorer with its default options.
#[test]
fn makalu_removed_flush_is_found_on_its_own_path() {
    let dir = tempfile::tempdir().unwrap();
    let real = record(dir.path(), "mkreal", "makalu", "threadtest", THREADTEST, true);
    // Its paths (one image a point is enough to name them).
    let real = run(&real, &Options { bound: 1, ..Options::default() });
    let t = record(dir.path(), "mkundo", "makalu:mutation=undo-entry-flush", "threadtest", THREADTEST, true);
    let s = run(&t, &Options::default());
    let (real_paths, mine) = (path_names(&real), path_names(&s));
    let new: Vec<&String> = mine.iter().filter(|p| !real_paths.contains(*p)).collect();
    assert!(!new.is_empty(), "the same paths as the real code");
    let v = s.violation.expect("the removed undo-log entry flush is caught");
    let path = &s.path_coverage[s.coverage.iter().find(|c| c.point == v.point).unwrap().path as usize];
    assert!(!real_paths.contains(&format!("{} | {}", path.info.at, path.info.pending.join("; "))));
    eprintln!(
        "{} paths ({} of them the real code's {} has not); caught after {} images on one: {}",
        s.paths,
        new.len(),
        real.paths,
        s.images,
        v.problem
    );
}

/// The report does not depend on how many workers explored: one and two
/// workers give the same summary, on a run that passes and on one with a
/// violation (the first one, and the points up to it).
#[test]
fn one_worker_and_two_report_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let good = record(dir.path(), "good", "nvalloc-log", "threadtest", THREADTEST, true);
    let bad = record(dir.path(), "bad", "nvalloc-log:mutation=dest-flush", "threadtest", THREADTEST, true);
    for t in [good, bad] {
        let json = |jobs| {
            let mut v = serde_json::to_value(run(&t, &Options { jobs, ..Options::default() })).unwrap();
            for k in ["seconds", "images_per_second", "jobs"] {
                v.as_object_mut().unwrap().remove(k);
            }
            v
        };
        assert_eq!(json(1), json(2), "{}", t.display());
    }
}
