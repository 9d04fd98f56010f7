//! The human report of an exploration (`pmsim crash` without `--json`): what
//! was explored, by code path, what the images showed, and the first
//! violation with the stores its image kept and dropped and the one command
//! that replays it.

use crate::options::Options;
use crate::report::{StoreInfo, Summary, Violation};
use std::fmt::Write as _;
use std::path::Path;

/// Paths listed one by one at most (the most frequent first).
const PATHS_SHOWN: usize = 8;

/// The report of `s`, an exploration of the trace at `trace` (with the heap
/// image `heap_image` if one was named) under `opts`.
pub fn summary(s: &Summary, trace: &Path, heap_image: Option<&Path>, opts: &Options) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "trace        {} ({})", trace.display(), s.allocator);
    points(&mut o, s);
    let (e, m) = (s.possible_images_log10.floor(), 10f64.powf(s.possible_images_log10.fract()));
    let _ = writeln!(
        o,
        "images       {} checked in {:.2} s on {} worker(s): {:.0} images/s",
        s.images, s.seconds, s.jobs, s.images_per_second
    );
    let _ = writeln!(
        o,
        "state space  {m:.3}e{e} images allowed at the explored points (at most {} lines with pending stores at one)",
        s.max_pending_lines
    );
    coverage(&mut o, s);
    paths(&mut o, s);
    tallies(&mut o, s, opts);
    match &s.violation {
        None => o.push_str("result       no violation\n"),
        Some(v) => violation(&mut o, s, v, trace, heap_image, opts),
    }
    o
}

/// The points selected and explored.
fn points(o: &mut String, s: &Summary) {
    let _ = writeln!(
        o,
        "crash points {} of {} fences and clflushes{}, on {} code path(s)",
        s.selected_points,
        s.fences,
        if s.end_point { " and the trace's end" } else { "" },
        s.paths
    );
    let how = if s.mode == "paths" {
        format!(
            "up to {} per path; {} more covered by path (--all-points explores every one)",
            s.per_path, s.covered_by_path
        )
    } else {
        "every selected point".to_string()
    };
    let _ = writeln!(
        o,
        "explored     {} point(s), {how} ({} exhaustive, {} sampled; at most {} images at one point)",
        s.points, s.exhaustive_points, s.sampled_points, s.max_images_at_point
    );
}

/// Distinct recovery-visible states, in total and per point.
fn coverage(o: &mut String, s: &Summary) {
    let _ = writeln!(
        o,
        "coverage     {} distinct recovery-visible states in {} images; {} of {} points complete (every such state explored)",
        s.distinct_states, s.images, s.complete_points, s.points
    );
    if s.coverage.len() <= 12 {
        for c in &s.coverage {
            let _ = writeln!(
                o,
                "    point {:>8}: {:>5} images, {:>5} distinct{}, {} of {} pending lines read",
                c.point,
                c.images,
                c.distinct,
                if c.complete { " (complete)" } else { "" },
                c.read_lines,
                c.pending_lines
            );
        }
    } else {
        let mut d: Vec<u64> = s.coverage.iter().map(|c| c.distinct).collect();
        d.sort_unstable();
        let _ = writeln!(
            o,
            "    per point: distinct states min {} / median {} / max {} (--json lists every point)",
            d[0],
            d[d.len() / 2],
            d[d.len() - 1]
        );
    }
}

/// The code paths covered, and the most frequent ones.
fn paths(o: &mut String, s: &Summary) {
    let complete = s.path_coverage.iter().filter(|p| p.complete).count();
    let _ = writeln!(
        o,
        "paths        {} of {} covered ({complete} with every explored point complete){}",
        s.paths_covered,
        s.paths,
        if s.path_coverage.len() > PATHS_SHOWN { "; the most frequent (--json lists every path):" } else { ":" }
    );
    let mut by_points: Vec<_> = s.path_coverage.iter().collect();
    by_points.sort_by_key(|p| std::cmp::Reverse(p.info.points));
    for p in by_points.into_iter().take(PATHS_SHOWN) {
        let _ = writeln!(
            o,
            "    path {:>4}: {:>8} point(s), {} explored, {} images{}: {}",
            p.path,
            p.info.points,
            p.explored,
            p.images,
            if p.complete { "" } else { " (incomplete)" },
            p.info.at
        );
    }
}

/// What the images' recoveries kept or refused by design.
fn tallies(o: &mut String, s: &Summary, opts: &Options) {
    if s.retained > 0 || s.max_retained > 0 {
        let _ = writeln!(
            o,
            "retained     {} live block(s) no operation accounts for, reached by the mark from the roots (at most {} in one image)",
            s.retained, s.max_retained
        );
    }
    if opts.allow_stale_dest {
        let _ = writeln!(
            o,
            "stale dests  {} image(s) with an interrupted malloc_to whose destination still named its free block",
            s.stale_dests
        );
    }
    if s.lost > 0 || s.max_lost > 0 {
        let _ = writeln!(
            o,
            "lost         {} block(s) of interrupted operations allocated but not published, as the allocator allows (at most {} in one image)",
            s.lost, s.max_lost
        );
    }
    if s.refused > 0 {
        let _ = writeln!(
            o,
            "refused      {} image(s) refused by the allocator as unclean stores, as its design requires there \
             (no check applies; a refusal reads nothing of the heap: one recovery-visible state per point)",
            s.refused
        );
    }
    if s.recovery_crashed_images > 0 {
        let _ = writeln!(
            o,
            "recovery     {} image(s) crashed inside recovery at {} fences: {} images recovered again",
            s.recovery_crashed_images, s.recovery_fences, s.recovery_crash_images
        );
    }
}

/// The first violation, and the command that replays its image.
fn violation(o: &mut String, s: &Summary, v: &Violation, trace: &Path, heap_image: Option<&Path>, opts: &Options) {
    let at = if s.end_point && v.point == s.fences {
        "at the end of the trace".to_string()
    } else {
        format!("before the fence at event {}", v.event)
    };
    let _ = writeln!(
        o,
        "VIOLATION    crash point {} ({at}), image {} of {} ({})",
        v.point,
        v.image,
        v.images_at_point,
        if v.exhaustive { "exhaustive" } else { "sampled" }
    );
    if let Some(rc) = &v.recovery_crash {
        let _ = writeln!(
            o,
            "             crashed inside its recovery before the recovery's fence {}, image {} of {}",
            rc.fence, rc.image, rc.images_at_fence
        );
    }
    let _ = writeln!(o, "problem      {}", v.problem);
    stores(o, "persisted   ", &v.persisted);
    stores(o, "not persisted", &v.lost);
    let mut cmd =
        format!("pmsim crash {} --point {} --image {} --seed {}", trace.display(), v.point, v.image, opts.seed);
    if opts.bound != Options::default().bound {
        cmd += &format!(" --bound {}", opts.bound);
    }
    if opts.samples != Options::default().samples {
        cmd += &format!(" --samples {}", opts.samples);
    }
    if let Some(h) = heap_image {
        cmd += &format!(" --heap-image {}", h.display());
    }
    if opts.leak_bound > 0 {
        cmd += &format!(" --leak-bound {}", opts.leak_bound);
    }
    if opts.allow_stale_dest {
        cmd += " --allow-stale-dest";
    }
    if opts.full_sample {
        cmd += " --full-sample";
    }
    if v.recovery_crash.is_some() {
        cmd += &format!(" --recovery-crashes 1 --recovery-bound {}", opts.recovery_bound.max(1));
    }
    let _ = writeln!(o, "replay       {cmd}");
}

/// A list of pending stores (the first 24).
fn stores(o: &mut String, name: &str, list: &[StoreInfo]) {
    let _ = writeln!(o, "{name} {} pending store(s):", list.len());
    for st in list.iter().take(24) {
        let _ = writeln!(o, "    event {:>10}  offset {:#010x} +{:<2} = {}", st.event, st.offset, st.len, st.value);
    }
    if list.len() > 24 {
        let _ = writeln!(o, "    … {} more (--json lists all)", list.len() - 24);
    }
}
