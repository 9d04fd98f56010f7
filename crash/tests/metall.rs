//! The Metall-style allocator as a crash target, on a traced Threadtest
//! that closes its store with the last batch in it (`keep=true`): every
//! crash before the properly-closed mark is written is refused by Metall's
//! own open (counted, with one recovery-visible state per point), the end
//! of the trace reopens with every object, and over 10,000 images pass.

use pmsim_crash::{explore, target_for, CrashTrace, Options, Progress, Summary};
use pmsim_model::runner::AllocSpec;
use std::path::{Path, PathBuf};

/// A Threadtest whose store is closed with its last batch of 100 objects.
const KEEP: &[&str] = &["objects=100", "iterations=2", "keep=true"];

fn record(dir: &Path, name: &str, alloc: &str) -> PathBuf {
    pmsim_crash::conformance::record(dir, name, &AllocSpec::parse(alloc, []).unwrap(), "threadtest", KEEP, true)
}

fn run(trace: &Path, opts: &Options) -> Summary {
    let tr = CrashTrace::load(trace, None).unwrap();
    let target = target_for(&tr.header).unwrap();
    explore(&tr, target.as_ref(), opts, &Progress::default()).unwrap()
}

#[test]
fn metall_passes_over_10k_images_refusing_unclean_stores() {
    let dir = tempfile::tempdir().unwrap();
    let t = record(dir.path(), "mt", "metall");
    // By coverage alone: a refused store reads nothing of the heap, so each
    // point is complete after its first image (or its exhaustive set).
    let all = Options { all_points: true, ..Options::default() };
    let s = run(&t, &all);
    assert!(s.violation.is_none(), "{:?}", s.violation);
    assert!(s.end_point && s.points == s.fences + 1, "every fence and the trace's end: {} points", s.points);
    assert_eq!(s.distinct_states, s.points, "one recovery-visible state per point");
    assert_eq!(s.complete_points, s.points);
    // Every image but the end's is refused; the end's store opens with its objects.
    assert_eq!(s.refused, s.images - 1);
    let end = s.coverage.last().unwrap();
    assert_eq!((end.point, end.images, end.refused, end.pending_lines), (s.fences, 1, 0, 0), "{end:?}");

    let s = run(&t, &Options { bound: 5000, samples: 5000, full_sample: true, ..all });
    if let Some(v) = &s.violation {
        panic!("violation at point {} image {}: {}", v.point, v.image, v.problem);
    }
    assert!(s.images >= 10_000, "only {} images", s.images);
    assert_eq!(s.refused, s.images - 1, "every image before the mark is refused");
    assert_eq!(s.distinct_states, s.points, "sampling finds no state the coverage reduction missed");
    assert_eq!(s.complete_points, s.points);
    eprintln!(
        "metall: {} points, {} images ({} refused), {} distinct states, {:.0} images/s",
        s.points, s.images, s.refused, s.distinct_states, s.images_per_second
    );
}

/// The mark written before the heap is synced (`mark-before-sync`): a crash
/// before close's fence leaves a store with the mark and a heap that lost
/// the run's stores, which Metall opens; the explorer catches it, and the
/// image replays alone.
#[test]
fn metall_mark_before_sync_is_caught_and_replays() {
    let dir = tempfile::tempdir().unwrap();
    let t = record(dir.path(), "mtbad", "metall:mutation=mark-before-sync");
    // Coverage by code path with every default.
    let opts = Options::default();
    let s = run(&t, &opts);
    let v = s.violation.expect("the swapped order is caught");
    assert!(v.problem.contains("the completed malloc_to") && v.problem.contains("holds 0x0"), "{}", v.problem);
    assert_eq!(v.point, s.fences - 1, "at the point before close's fence");
    eprintln!("mark-before-sync caught after {} images: {}", s.images, v.problem);
    let one = run(&t, &Options { point: Some(v.point), image: Some(v.image), ..opts });
    assert_eq!(one.violation.map(|w| w.problem), Some(v.problem), "replay");
}

/// Management files that are missing, or not the ones the trace's close
/// wrote, are refused with one line naming them.
#[test]
fn metall_management_files_are_checked_against_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    let t = record(dir.path(), "mtf", "metall");
    let files = dir.path().join("mtf.pmt.img.files");
    let err = || {
        let tr = CrashTrace::load(&t, None).unwrap();
        let target = target_for(&tr.header).unwrap();
        explore(&tr, target.as_ref(), &Options::default(), &Progress::default()).expect_err("refused").to_string()
    };
    let cd = files.join("chunk_directory");
    let mut bytes = std::fs::read(&cd).unwrap();
    bytes[40] ^= 1;
    std::fs::write(&cd, &bytes).unwrap();
    let e = err();
    assert!(e.contains("mtf.pmt.img.files") && e.contains("do not match the trace"), "{e}");
    std::fs::remove_file(&cd).unwrap();
    let e = err();
    assert!(e.contains("chunk_directory") && e.contains("cannot read"), "{e}");
    assert!(!e.contains('\n'), "{e}");
}
