//! `pmsim crash`: explore the crash states of a trace recorded with
//! `--values` (logic in the `pmsim-crash` crate).

use super::CmdResult;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use pmsim_crash::{explore, target_for, CrashTrace, Options, Progress, Summary};
use pmsim_traces::OpKind;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

pub const LONG_ABOUT: &str = "Crash states of a traced run, recovered with the allocator's own code and checked.

Input: a trace recorded with values and its heap image at trace start:
  pmsim run --alloc nvalloc-log --workload threadtest --param objects=200 --heap-size 8M \\
            --trace t.pmt --values        (writes t.pmt and t.pmt.img)
  pmsim crash t.pmt

Crash points are the moments just before a fence (every fence by default; --every N keeps every N-th,
--during OP only those inside an operation: malloc, free, morph, log_gc; --marker LABEL only those after
a marker). Persistency model (x86, ADR): a store is durable once its line was flushed and the flushing
thread fenced (clflush: at once); until then it may or may not be in PM, and the stores to one line
persist in program order. So an image keeps, for every line, a prefix of its pending stores.

Images per point: all of them while there are at most --bound (default 1024); beyond that --bound
images chosen by a generator seeded with (--seed, point, image): image 0 persists every pending store,
1 none, then in turn random per-line prefixes, accumulative (stores in trace order up to a random cut),
reverse (only the lines whose last pending store follows a random cut, entirely), and all-or-nothing
per line.

Each image is recovered by the allocator's own recovery on a private copy-on-write mapping, then
checked: live allocations disjoint; every completed malloc_to live with its size, destination and
contents; interrupted malloc_to/free_from atomic; completed frees free, no unaccounted live
allocation beyond --leak-bound; new allocations overlap nothing. The first failing image is reported
with the stores it kept and dropped and the command that replays exactly it. Exit status 1 on a
violation.";

#[derive(Args)]
pub struct CrashArgs {
    /// The trace (recorded with `pmsim run … --trace T --values`).
    trace: PathBuf,
    /// The heap image at trace start [default: the file the trace header names, next to the trace].
    #[arg(long)]
    heap_image: Option<PathBuf>,
    /// Images per crash point: exhaustive up to this many, else this many sampled.
    #[arg(long, default_value_t = 1024)]
    bound: u64,
    /// Seed of the image sampler.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Keep every N-th selected crash point.
    #[arg(long, default_value_t = 1)]
    every: u64,
    /// Only crash points inside an operation: malloc, free, morph, log_gc, recovery, init, close.
    #[arg(long, value_parser = parse_op)]
    during: Option<OpKind>,
    /// Only crash points after a marker with this label (until that thread's next marker).
    #[arg(long)]
    marker: Option<String>,
    /// Only this crash point (fence number).
    #[arg(long)]
    point: Option<u64>,
    /// Only this image of the point(s) (with --point: replays one image).
    #[arg(long)]
    image: Option<u64>,
    /// Live allocations that no operation accounts for which recovery may leave
    /// [default: the allocator's: 0 for NVAlloc-LOG, 16 for NVAlloc-GC's conservative mark].
    #[arg(long)]
    leak_bound: Option<u64>,
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

pub fn run(a: CrashArgs) -> CmdResult {
    let tr = CrashTrace::load(&a.trace, a.heap_image.as_deref())?;
    let target = target_for(&tr.header)?;
    let opts = Options {
        bound: a.bound.max(1),
        seed: a.seed,
        every: a.every,
        during: a.during,
        marker: a.marker.clone(),
        point: a.point,
        image: a.image,
        leak_bound: a.leak_bound,
    };
    let npoints = pmsim_crash::explore::select_points(&tr, &opts).len() as u64;
    let progress = Progress::default();
    let bar = ProgressBar::with_draw_target(Some(npoints), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} points {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let done = std::sync::atomic::AtomicBool::new(false);
    let s = std::thread::scope(|sc| {
        let ticker = sc.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                bar.set_position(progress.points.load(Ordering::Relaxed));
                bar.set_message(format!("{} images", progress.images.load(Ordering::Relaxed)));
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let r = explore(&tr, target.as_ref(), &opts, &progress);
        done.store(true, Ordering::Relaxed);
        ticker.join().expect("progress thread");
        r
    })?;
    bar.finish_and_clear();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print_summary(&a, &s);
    }
    match &s.violation {
        Some(v) => Err(format!("crash point {} image {}: {}", v.point, v.image, v.problem).into()),
        None => Ok(()),
    }
}

fn print_summary(a: &CrashArgs, s: &Summary) {
    println!("trace        {} ({})", a.trace.display(), s.allocator);
    println!(
        "crash points {} of {} fences ({} exhaustive, {} sampled; at most {} images at one point)",
        s.points, s.fences, s.exhaustive_points, s.sampled_points, s.max_images_at_point
    );
    println!("images       {} checked in {:.2} s: {:.0} images/s", s.images, s.seconds, s.images_per_second);
    println!(
        "state space  {:.3e} images allowed at these points (at most {} lines with pending stores at one point)",
        s.possible_images, s.max_pending_lines
    );
    let Some(v) = &s.violation else {
        println!("result       no violation");
        return;
    };
    println!(
        "VIOLATION    crash point {} (before the fence at event {}), image {} of {} ({})",
        v.point,
        v.event,
        v.image,
        v.images_at_point,
        if v.exhaustive { "exhaustive" } else { "sampled" }
    );
    println!("problem      {}", v.problem);
    let show = |name: &str, list: &[pmsim_crash::explore::StoreInfo]| {
        println!("{name} {} pending store(s):", list.len());
        for st in list.iter().take(24) {
            println!("    event {:>10}  offset {:#010x} +{:<2} = {}", st.event, st.offset, st.len, st.value);
        }
        if list.len() > 24 {
            println!("    … {} more (--json lists all)", list.len() - 24);
        }
    };
    show("persisted   ", &v.persisted);
    show("not persisted", &v.lost);
    let mut cmd =
        format!("pmsim crash {} --point {} --image {} --seed {}", a.trace.display(), v.point, v.image, a.seed);
    if a.bound != 1024 {
        cmd += &format!(" --bound {}", a.bound);
    }
    if let Some(h) = &a.heap_image {
        cmd += &format!(" --heap-image {}", h.display());
    }
    if let Some(b) = a.leak_bound {
        cmd += &format!(" --leak-bound {b}");
    }
    println!("replay       {cmd}");
}
