//! `pmsim crash`: explore the crash states of a trace recorded with
//! `--values` (logic in the `pmsim-crash` crate).

use super::CmdResult;
use clap::Args;
use pmsim_crash::{explore, target_for, CrashTrace, Options, Progress};
use pmsim_traces::OpKind;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

pub const LONG_ABOUT: &str = "Crash states of a traced run, recovered with the allocator's own code and checked.

Input: a trace recorded with values and its heap image at trace start:
  pmsim run --alloc nvalloc-log --workload threadtest --param objects=200 --heap-size 8M \\
            --trace t.pmt --values        (writes t.pmt and t.pmt.img)
  pmsim crash t.pmt
A PMDK program traced by the Valgrind tool with values (its pool's bytes when tracing starts go to
OUT.img the same way), each image opened by libpmemobj itself (its own recovery) and checked by
libpmempool's and libpmemobj's consistency checks and the program's root object:
  pmsim trace-exec -o p.pmt --values --example pmdk-threadtest -- 2 50 64 1
  pmsim crash p.pmt

Crash points are the moments just before a fence or a clflush (every one by default; --every N keeps every N-th,
--during OP only those inside an operation: malloc, free, morph, log_gc; --marker LABEL only those after
a marker).

Coverage by code path: a steady-state run repeats a few code paths, so each selected point gets a
signature from what the trace holds there: the crashing thread's operations, the code site of the fence
it crashes before and of its last fence, the same for every other thread with an operation in flight,
and the classes of the pending stores (region, the code site of the flush that covers each, whether that
flush has happened; a store its operation leaves to a later operation's flush, such as a lazily persisted
line, is of one class per region whichever later flush that is). Points with one signature are one path. Every path is explored: its first point and
--per-path N - 1 more chosen by a seeded hash (default 2 per path); the others are covered by path. A
removed flush changes the signature wherever its store is pending, so a mutated run has paths of its
own. --all-points explores every selected point instead. --jobs N workers explore at once (default: one
per core); the report is the same for any N. The first line on stderr says how many points and paths
there are, then a progress bar estimates the time left.

Persistency model (x86, ADR): a store is durable once its line was flushed and the flushing
thread fenced (clflush: at once); until then it may or may not be in PM, and the stores to one line
persist in program order. So an image keeps, for every line, a prefix of its pending stores.

Images per point: all of them while there are at most --bound (default 1024); beyond that, those
that vary only the pending lines recovery reads while they fit the bound (see Coverage), else
--samples images (default 128, at most --bound) chosen by a generator seeded with (--seed, point, image): image 0 persists every pending store,
1 none, then in turn random per-line prefixes, accumulative (stores in trace order up to a random cut),
reverse (only the lines whose last pending store follows a random cut, entirely), and all-or-nothing
per line.

Each image is recovered by the allocator's own recovery on a private copy-on-write mapping, then
checked: live allocations disjoint; every completed malloc_to live with its size, destination and
contents; interrupted malloc_to/free_from atomic; completed frees free; new allocations overlap
nothing. A live block no operation accounts for is a leak, except under a reachability-based
recovery (NVAlloc-GC), where the checks mark the recovered image from the roots themselves: a
block that mark reaches is retained (kept by a stale word; counted, not a violation), one it does
not reach is a leak. Where an allocator allocates before it publishes (LLFree), an interrupted
malloc_to/free_from may leave its block live but unpublished: counted as lost, not a violation.
The first failing image is reported with the stores it kept and dropped and
the command that replays exactly it. Exit status 1 on a violation.

Coverage: two images of a point are equivalent when they agree on every byte that the recovery and
the checks read of them (the bytes they differ in are those of the pending stores). The summary
gives the distinct recovery-visible states beside the images explored, per point (--json) and in
total. Where all images exceed --bound, the images explored are every combination of prefixes of
the pending lines that recovery reads (the others fully persisted) when those fit the bound: every
recovery-visible state of the point is then covered (a 'complete' point).

Allocators with state outside the heap file (Metall-style: its management files and properly-closed
mark in HEAP.metall/): a traced run records each file operation as a marker, `pmsim run --values`
saves the management files its close wrote in TRACE.img.files/, and every crash point lays out, beside
its image, the datastore a crash there leaves; the end of the trace is a crash point too (the mark
is written after the last fence). A store without the mark must be refused by the allocator's own
open: counted as refused, not a violation, and no check applies (Metall's consistency is the
snapshot's). A refusal reads nothing of the heap, so such a point has one recovery-visible state and
is complete after one image; --full-sample checks --samples images there anyway. With the mark the
store must open, pass its metadata check and hold every completed allocation:
  pmsim run --alloc metall --workload threadtest --param objects=100 --param keep=true \\
            --heap-size 8M --trace m.pmt --values
  pmsim crash m.pmt --bound 2000 --full-sample

Crashes inside recovery (--recovery-crashes N): the recovery of every N-th image (seeded choice)
is crashed at each of its fences, with up to --recovery-bound images per fence, and recovered
again; the result must pass the same checks (recovery must be idempotent).";

#[derive(Args)]
pub struct CrashArgs {
    /// The trace (recorded with `pmsim run … --trace T --values`).
    trace: PathBuf,
    /// The heap image at trace start [default: the file the trace header names, next to the trace].
    #[arg(long)]
    heap_image: Option<PathBuf>,
    /// Images per crash point: exhaustive up to this many, else this many sampled (1 to 100,000,000).
    #[arg(long, default_value_t = 1024, value_parser = bound_in(1, MAX_BOUND, "images per crash point"))]
    bound: u64,
    /// Images sampled at a point beyond --bound whose lines that recovery reads do not fit it
    /// either (at most --bound; 1 to 100,000,000).
    #[arg(long, default_value_t = 128, value_parser = bound_in(1, MAX_BOUND, "images sampled per crash point"))]
    samples: u64,
    /// Seed of the image sampler.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Keep every N-th selected crash point.
    #[arg(long, default_value_t = 1, value_parser = bound_in(1, u64::MAX, "every N-th crash point"))]
    every: u64,
    /// Points explored per code path: the first and N - 1 more (seeded); the rest are covered by path.
    #[arg(long, default_value_t = 2, value_parser = bound_in(1, u64::MAX, "points per code path"))]
    per_path: u64,
    /// Explore every selected crash point, not only some of each code path.
    #[arg(long)]
    all_points: bool,
    /// Workers exploring at once, 1 to 1024 [default: one per core].
    #[arg(long, value_parser = bound_in(1, MAX_JOBS, "workers"))]
    jobs: Option<u64>,
    /// Only crash points inside an operation: malloc, free, morph, log_gc, recovery, init, close.
    #[arg(long, value_parser = parse_op)]
    during: Option<OpKind>,
    /// Only crash points after a marker with this label (until that thread's next marker).
    #[arg(long)]
    marker: Option<String>,
    /// Only this crash point (fence number).
    #[arg(long)]
    point: Option<u64>,
    /// With --point: only this image of the point (replays one image; a
    /// violation's report prints the command).
    #[arg(long, requires = "point")]
    image: Option<u64>,
    /// Live allocations that no operation accounts for (and, under a
    /// reachability-based recovery, no mark from the roots reaches) to tolerate.
    #[arg(long, default_value_t = 0)]
    leak_bound: u64,
    /// Crash the recovery of every N-th image at each of its fences and recover again (0: never).
    #[arg(long, default_value_t = 0)]
    recovery_crashes: u64,
    /// With --recovery-crashes: images per fence of a crashed recovery (1 to 100,000,000) [default: 4].
    #[arg(long, value_parser = bound_in(1, MAX_BOUND, "images per fence of a crashed recovery"))]
    recovery_bound: Option<u64>,
    /// Count, instead of reporting, an interrupted malloc_to whose destination
    /// still names its own (free) block because an earlier free_from of it left
    /// the destination as it was (only where the allocator's free_from does:
    /// NVAlloc with wal=artifact). The README states this guarantee.
    #[arg(long)]
    allow_stale_dest: bool,
    /// At a point with more images than --bound, check --samples sampled images even once the
    /// images checked cover every recovery-visible state of the point (verifies the reduction
    /// instead of trusting it: a sampled image in a new state makes the point incomplete).
    #[arg(long)]
    full_sample: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

fn parse_op(s: &str) -> Result<OpKind, String> {
    (0..8)
        .filter_map(OpKind::from_code)
        .find(|k| k.name() == s)
        .ok_or_else(|| format!("unknown operation '{s}' (malloc, free, realloc, morph, log_gc, recovery, init, close)"))
}

/// The most images a crash point may have explored (more would take days
/// at the explorer's rate of thousands of images a second).
const MAX_BOUND: u64 = 100_000_000;

/// The most workers: each holds an image and a recovered heap.
const MAX_JOBS: u64 = 1024;

/// A parser of a count from `min` to `max`, its error naming the option's
/// meaning and range.
fn bound_in(min: u64, max: u64, what: &'static str) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync {
    move |s: &str| match s.trim().parse::<u128>() {
        Ok(n) if (min as u128..=max as u128).contains(&n) => Ok(n as u64),
        Ok(n) => Err(format!("{n} {what}: out of range (from {min} to {max})")),
        Err(_) => Err(format!("{s:?} is not a whole number of {what}")),
    }
}

pub fn run(a: CrashArgs) -> CmdResult {
    // Options first, before the trace is read (counts are checked by their parsers).
    if a.recovery_bound.is_some() && a.recovery_crashes == 0 {
        return Err("--recovery-bound applies to crashed recoveries: give --recovery-crashes N too".into());
    }
    let tr = CrashTrace::load(&a.trace, a.heap_image.as_deref())?;
    let target = target_for(&tr.header)?;
    let opts = Options {
        bound: a.bound,
        samples: a.samples,
        seed: a.seed,
        every: a.every,
        all_points: a.all_points,
        per_path: a.per_path,
        jobs: a.jobs.map_or(0, |j| j as usize),
        during: a.during,
        marker: a.marker.clone(),
        point: a.point,
        image: a.image,
        leak_bound: a.leak_bound,
        recovery_crashes: a.recovery_crashes,
        recovery_bound: a.recovery_bound.unwrap_or(4),
        allow_stale_dest: a.allow_stale_dest,
        full_sample: a.full_sample,
    };
    let progress = Progress::default();
    let s = with_progress(&progress, || explore(&tr, target.as_ref(), &opts, &progress))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print!("{}", pmsim_crash::print::summary(&s, &a.trace, a.heap_image.as_deref(), &opts));
    }
    match &s.violation {
        Some(v) => Err(format!("crash point {} image {}: {}", v.point, v.image, v.problem).into()),
        None => Ok(()),
    }
}

/// Runs `f` (an exploration reporting to `progress`) with a progress bar on
/// stderr: once the points are planned, a line saying how many there are,
/// then the points explored with an estimate of the time left.
fn with_progress<T>(progress: &Progress, f: impl FnOnce() -> T) -> T {
    let mut planned = false;
    crate::progress::with_bar(
        Duration::from_millis(100),
        || {
            Some(crate::progress::bar(
                None,
                "{elapsed_precise} [{bar:30}] {pos}/{len} points, {msg} (about {eta} left)",
            ))
        },
        |bar| {
            let n = progress.planned.load(Ordering::Acquire);
            if n > 0 && !planned {
                planned = true;
                let line = format!(
                    "{} crash points on {} code paths: exploring {n} of them",
                    progress.selected.load(Ordering::Relaxed),
                    progress.paths.load(Ordering::Relaxed)
                );
                // The line is for logs too; the bar only where it is drawn.
                if bar.is_hidden() {
                    eprintln!("{line}");
                } else {
                    bar.println(line);
                }
                bar.set_length(n);
            }
            if planned {
                bar.set_position(progress.points.load(Ordering::Relaxed));
                bar.set_message(format!("{} images", progress.images.load(Ordering::Relaxed)));
            }
        },
        f,
    )
}
