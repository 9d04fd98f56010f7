//! The explorer: crash points, images, recovery and checks, in parallel over
//! chunks of crash points (each chunk replays the trace incrementally on its
//! own durable image, so a point costs only the events since the last one).

use crate::expect::{self, Expect, Obj, Op};
use crate::images;
use crate::load::{CrashTrace, Ev};
use crate::persist::{write_piece, PState};
use crate::target::{CrashTarget, Recovered};
use crate::CrashError;
use memmap2::MmapMut;
use pmsim_model::family::{CrashPoint, ImageFormat, Recovery};
use pmsim_model::heap::{Heap, HEADER_SIZE};
use pmsim_model::mech::mark;
use pmsim_model::scratch::ScratchHeap;
use pmsim_model::watch::AccessWatch;
use pmsim_traces::OpKind;
use rayon::prelude::*;
use serde::Serialize;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Instant;

/// What to explore.
#[derive(Clone, Debug)]
pub struct Options {
    /// Images per crash point: exhaustive up to this many, else sampled.
    pub bound: u64,
    /// Seed of the sampler.
    pub seed: u64,
    /// Keep every N-th selected crash point.
    pub every: u64,
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
    /// At a point with more images than `bound`, check `bound` sampled
    /// images even once the images checked cover every recovery-visible
    /// state of the point (which otherwise ends the point): the reduction is
    /// then verified rather than trusted (a sampled image in a state not seen
    /// before makes the point incomplete).
    pub full_sample: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            bound: 1024,
            seed: 1,
            every: 1,
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

/// What a run of the explorer did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub allocator: String,
    /// Moments a crash point may be at: fences and clflushes.
    pub fences: u64,
    /// Whether the end of the trace is a crash point too (for an allocator
    /// with state outside its heap, [`CrashTarget::outside_markers`]); its
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
    /// its free block (counted under [`Options::allow_stale_dest`]).
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
    /// Per crash point, in point order.
    pub coverage: Vec<PointCoverage>,
    pub violation: Option<Violation>,
}

/// `log10(10^a + 10^b)` without leaving the logarithms (−∞ is no image).
fn log10_sum(a: f64, b: f64) -> f64 {
    let (hi, lo) = if a > b { (a, b) } else { (b, a) };
    if hi == f64::NEG_INFINITY {
        return hi;
    }
    hi + (1.0 + 10f64.powf(lo - hi)).log10()
}

/// A summary to add points to (no images yet).
fn empty_summary() -> Summary {
    Summary { possible_images_log10: f64::NEG_INFINITY, ..Summary::default() }
}

/// What the explorer needs to know of the images' format.
#[derive(Clone, Debug)]
pub struct Layout {
    pub format: ImageFormat,
    /// Bytes before the first one an allocation may hold (a pmsim heap's
    /// header page; 0 in an allocator's own format, whose recovery says
    /// where its objects are).
    pub first: u64,
    /// Word ranges `(offset, bytes)` a program publishes allocations in
    /// besides other live blocks ([`CrashTarget::publication_roots`]).
    pub roots: Vec<(u64, u64)>,
}

impl Layout {
    /// A pmsim heap's: the header page, its root slots.
    pub fn pmsim_heap() -> Layout {
        let roots = vec![(Heap::root_offset(0), 8 * pmsim_model::heap::ROOT_SLOTS as u64)];
        Layout { format: ImageFormat::PmsimHeap, first: HEADER_SIZE, roots }
    }

    /// Whether `off` lies in a publication root.
    pub fn in_roots(&self, off: u64) -> bool {
        self.roots.iter().any(|&(o, n)| off >= o && off - o < n)
    }

    /// The layout of `tr`'s images under `target`. A pmsim heap's header is
    /// checked here, as `Heap::open` would, naming the user's image file;
    /// an allocator's own format gives its roots from the trace's last state
    /// (every store persisted), which a scratch file holds meanwhile.
    pub fn of(tr: &CrashTrace, target: &dyn CrashTarget) -> Result<Layout, CrashError> {
        let named = |m: String| CrashError(format!("{}: {m}", tr.image.display()));
        match target.image_format() {
            ImageFormat::PmsimHeap => {
                let mut page = vec![0u8; HEADER_SIZE.min(tr.heap_size) as usize];
                let f =
                    std::fs::File::open(&tr.image).map_err(|e| named(format!("cannot read the heap image: {e}")))?;
                std::os::unix::fs::FileExt::read_exact_at(&f, &mut page, 0)
                    .map_err(|e| named(format!("cannot read the heap image: {e}")))?;
                pmsim_model::heap::check_header(&page, tr.heap_size).map_err(named)?;
                let heap = Heap::open_copy(&tr.image).map_err(|e| CrashError(e.to_string()))?;
                let roots = target.publication_roots(&heap).map_err(named)?;
                Ok(Layout { roots, ..Layout::pmsim_heap() })
            }
            ImageFormat::Own => {
                let mut bytes =
                    std::fs::read(&tr.image).map_err(|e| named(format!("cannot read the heap image: {e}")))?;
                for e in &tr.events {
                    if let Ev::Store { piece, .. } = *e {
                        write_piece(tr, piece, &mut bytes);
                    }
                }
                static NEXT: AtomicU64 = AtomicU64::new(0);
                let scratch =
                    ScratchHeap::new(&format!("last-{}", NEXT.fetch_add(1, Ordering::Relaxed))).map_err(CrashError)?;
                std::fs::write(scratch.path(), &bytes)
                    .map_err(|e| CrashError(format!("{}: {e}", scratch.path().display())))?;
                drop(bytes);
                let heap = Heap::open_raw_copy(scratch.path()).map_err(|e| CrashError(e.to_string()))?;
                let roots =
                    target.publication_roots(&heap).map_err(|e| CrashError(format!("{}: {e}", tr.path.display())))?;
                Ok(Layout { format: ImageFormat::Own, first: 0, roots })
            }
        }
    }

    /// A private copy-on-write view of the image file at `path`.
    pub(crate) fn open(&self, path: &Path) -> Result<Heap, pmsim_model::HeapError> {
        match self.format {
            ImageFormat::PmsimHeap => Heap::open_copy(path),
            ImageFormat::Own => Heap::open_raw_copy(path),
        }
    }
}

/// Counters a caller may poll (progress bars).
#[derive(Default)]
pub struct Progress {
    pub points: AtomicU64,
    pub images: AtomicU64,
}

/// The crash points `opts` selects: (fence number, event position); with
/// `end`, the end of the trace too (number: the count of fences and
/// clflushes, position: past the last event), selected by the same rules.
pub fn select_points(tr: &CrashTrace, opts: &Options, end: bool) -> Vec<(u64, u32)> {
    let mut open: HashMap<OpKind, u64> = HashMap::new();
    let mut marked: HashMap<u32, bool> = HashMap::new();
    let mut marked_threads = 0u64;
    let mut out = Vec::new();
    let mut n = 0u64;
    let selected = |open: &HashMap<OpKind, u64>, marked_threads: u64, n: u64| {
        // Inside the allocator's creation the heap is not formatted yet:
        // nothing to recover (unless asked for explicitly).
        let creating = open.get(&OpKind::Init).copied().unwrap_or(0) > 0;
        let during = match opts.during {
            Some(k) => open.get(&k).copied().unwrap_or(0) > 0,
            None => !creating,
        };
        let mark = opts.marker.is_none() || marked_threads > 0;
        during && mark && opts.point.is_none_or(|p| p == n)
    };
    for (i, e) in tr.events.iter().enumerate() {
        match *e {
            Ev::OpBegin { op, .. } => *open.entry(op).or_default() += 1,
            Ev::OpEnd { op, .. } => {
                let c = open.entry(op).or_default();
                *c = c.saturating_sub(1);
            }
            Ev::Marker { tid, label } => {
                let on = opts.marker.as_deref() == Some(tr.labels[label as usize].as_str());
                let was = marked.insert(tid, on).unwrap_or(false);
                marked_threads = marked_threads + on as u64 - was as u64;
            }
            // Before a fence, and before a clflush, which makes its line
            // durable at once (no fence follows it in a clflush-only trace,
            // such as the Valgrind tool's).
            Ev::Fence { .. } | Ev::Flush { ordered: true, .. } => {
                if selected(&open, marked_threads, n) {
                    out.push((n, i as u32));
                }
                n += 1;
            }
            _ => {}
        }
    }
    let every = opts.every.max(1) as usize;
    let mut out: Vec<(u64, u32)> = out.into_iter().step_by(every).collect();
    if end && selected(&open, marked_threads, n) {
        out.push((n, tr.events.len() as u32));
    }
    out
}

/// Explores the crash points `opts` selects; stops at the first violation
/// (the one with the lowest point, then image).
pub fn explore(
    tr: &CrashTrace,
    target: &dyn CrashTarget,
    opts: &Options,
    progress: &Progress,
) -> Result<Summary, CrashError> {
    let start = Instant::now();
    let outside = target.outside_markers();
    let points = select_points(tr, opts, outside.is_some());
    if points.is_empty() {
        return Err(CrashError(format!("{}: no crash point matches the selection", tr.path.display())));
    }
    let layout = Layout::of(tr, target)?;
    if let Some(prefix) = outside {
        let labels: Vec<&str> = tr.events.iter().filter_map(|e| tr.marker_with(e, prefix)).collect();
        target.load_outside(&tr.image, &labels).map_err(|e| CrashError(format!("{}: {e}", tr.path.display())))?;
    }
    if opts.recovery_crashes > 0 && layout.format == ImageFormat::Own {
        return Err(CrashError(format!(
            "{}: {} recovers inside its own library, where pmsim cannot crash it (drop --recovery-crashes)",
            tr.path.display(),
            target.name()
        )));
    }
    let ops = expect::operations(tr, &layout);
    let threads = rayon::current_num_threads().max(1);
    let nchunks = points.len().min(threads * 4);
    let per = points.len().div_ceil(nchunks);
    let stop = AtomicU64::new(u64::MAX);
    let found: Mutex<Option<Violation>> = Mutex::new(None);
    let totals: Mutex<Summary> = Mutex::new(empty_summary());
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = points.par_chunks(per).enumerate().try_for_each(|(c, chunk)| {
        let w = Worker { tr, target, opts, ops: &ops, layout: &layout, progress, stop: &stop };
        let (sum, v) = w.run(c, chunk)?;
        let mut t = totals.lock().unwrap();
        t.points += sum.points;
        t.images += sum.images;
        t.exhaustive_points += sum.exhaustive_points;
        t.sampled_points += sum.sampled_points;
        t.max_images_at_point = t.max_images_at_point.max(sum.max_images_at_point);
        t.possible_images_log10 = log10_sum(t.possible_images_log10, sum.possible_images_log10);
        t.max_pending_lines = t.max_pending_lines.max(sum.max_pending_lines);
        t.distinct_states += sum.distinct_states;
        t.complete_points += sum.complete_points;
        t.retained += sum.retained;
        t.max_retained = t.max_retained.max(sum.max_retained);
        t.lost += sum.lost;
        t.max_lost = t.max_lost.max(sum.max_lost);
        t.stale_dests += sum.stale_dests;
        t.refused += sum.refused;
        t.recovery_crashed_images += sum.recovery_crashed_images;
        t.recovery_fences += sum.recovery_fences;
        t.recovery_crash_images += sum.recovery_crash_images;
        t.coverage.extend(sum.coverage);
        if let Some(v) = v {
            let mut f = found.lock().unwrap();
            if f.as_ref().is_none_or(|o| (v.point, v.image) < (o.point, o.image)) {
                *f = Some(v);
            }
        }
        Ok::<(), CrashError>(())
    });
    std::panic::set_hook(hook);
    result?;
    let mut s = totals.into_inner().unwrap();
    s.coverage.sort_by_key(|c| c.point);
    s.allocator = target.name();
    s.fences =
        tr.events.iter().filter(|e| matches!(e, Ev::Fence { .. } | Ev::Flush { ordered: true, .. })).count() as u64;
    s.end_point = outside.is_some();
    s.violation = found.into_inner().unwrap();
    s.seconds = start.elapsed().as_secs_f64();
    s.images_per_second = s.images as f64 / s.seconds.max(1e-9);
    Ok(s)
}

pub(crate) struct Worker<'a> {
    pub(crate) tr: &'a CrashTrace,
    pub(crate) target: &'a dyn CrashTarget,
    pub(crate) opts: &'a Options,
    pub(crate) ops: &'a [Op],
    pub(crate) layout: &'a Layout,
    progress: &'a Progress,
    stop: &'a AtomicU64,
}

/// One image recovered and checked.
pub(crate) struct ImageRun {
    pub(crate) problem: Option<(String, Option<RecoveryCrash>)>,
    /// Names its recovery-visible state (see [`pmsim_model::watch`]).
    fingerprint: u64,
    /// Per pending line of the point: whether the recovery or the checks read it.
    read: Vec<bool>,
    kept: Kept,
    /// Crashes inside its recovery: fences and images explored.
    pub(crate) recovery_fences: u64,
    pub(crate) recovery_images: u64,
}

/// The pending stores of a point, by line (offset, pieces oldest first).
pub(crate) type Pending = [(u64, Vec<u32>)];

/// Writes the first `keep[i]` pending stores of each line `i` into `bytes`.
pub(crate) fn apply_kept(tr: &CrashTrace, pending: &Pending, keep: &[usize], bytes: &mut [u8]) {
    for ((_, pcs), &d) in pending.iter().zip(keep) {
        for &p in &pcs[..d] {
            write_piece(tr, p, bytes);
        }
    }
}

/// The heap's bytes, writable (a private mapping of the caller's alone).
pub(crate) fn heap_bytes(heap: &mut Heap) -> &mut [u8] {
    // SAFETY: a private copy-on-write mapping that only this caller uses
    // while the slice (which borrows the heap mutably) lives.
    unsafe { std::slice::from_raw_parts_mut(heap.base(), heap.size() as usize) }
}

/// The message of a caught panic.
pub(crate) fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    let m = p
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into());
    format!("recovery or check panicked: {m}")
}

/// The images of one point in the order they are explored: all of them
/// while they fit the bound; else every combination of prefixes of the
/// lines that some explored image's recovery or checks read (the other
/// lines fully persisted; a line read for the first time widens the set)
/// while those fit the bound; else the sampler's images.
struct Sequence<'a> {
    order: &'a [Vec<u64>],
    lens: Vec<usize>,
    raw: images::Plan,
    bound: u64,
    seed: u64,
    point: u64,
    /// Lines that matter, in the order found.
    relevant: Vec<usize>,
    /// Next combination over `relevant` to try.
    cursor: u64,
    tried: HashSet<Vec<usize>>,
    /// Image number at which sampling began.
    sampled_from: Option<u64>,
    next: u64,
    /// [`Options::full_sample`]: sample after a complete enumeration too.
    full_sample: bool,
    /// Image number at which the enumeration over the read lines completed
    /// (with `full_sample`, sampling follows).
    enumerated_at: Option<u64>,
}

impl Sequence<'_> {
    /// The next image to explore (its number, and what it keeps), or `None`
    /// with whether every recovery-visible state was explored.
    fn next(&mut self) -> Result<(u64, Vec<usize>), bool> {
        let k = self.next;
        let keep = if self.raw.exhaustive {
            if k >= self.raw.images {
                return Err(true);
            }
            images::choose(self.order, self.raw, self.seed, self.point, k)
        } else {
            loop {
                if let Some(s0) = self.sampled_from {
                    let j = k - s0;
                    if j >= self.bound {
                        return Err(self.enumerated_at.is_some());
                    }
                    let plan = images::Plan { images: self.bound, exhaustive: false };
                    break images::choose(self.order, plan, self.seed, self.point, j);
                }
                let radix: Vec<u64> = self.relevant.iter().map(|&i| self.lens[i] as u64 + 1).collect();
                let product = radix.iter().try_fold(1u64, |a, &r| a.checked_mul(r)).filter(|&p| p <= self.bound);
                let Some(product) = product else {
                    self.sampled_from = Some(k);
                    continue;
                };
                if self.cursor >= product {
                    if !self.full_sample {
                        return Err(true);
                    }
                    self.enumerated_at = Some(k);
                    self.sampled_from = Some(k);
                    continue;
                }
                let mut keep = self.lens.clone();
                let mut rest = self.cursor;
                for (&i, &r) in self.relevant.iter().zip(&radix) {
                    keep[i] = (rest % r) as usize;
                    rest /= r;
                }
                self.cursor += 1;
                if self.tried.insert(keep.clone()) {
                    break keep;
                }
            }
        };
        self.next += 1;
        Ok((k, keep))
    }

    /// What an explored image read: a pending line read for the first time
    /// widens the combinations (which start over, skipping those tried).
    fn saw(&mut self, read: &[bool]) {
        for (i, &r) in read.iter().enumerate() {
            if r && !self.relevant.contains(&i) {
                self.relevant.push(i);
                self.cursor = 0;
            }
        }
    }
}

impl Worker<'_> {
    fn run(&self, chunk_no: usize, chunk: &[(u64, u32)]) -> Result<(Summary, Option<Violation>), CrashError> {
        let tr = self.tr;
        // Unique within the process: explorations may run concurrently.
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let scratch = ScratchHeap::new(&format!("crash{chunk_no}-{}", NEXT.fetch_add(1, Ordering::Relaxed)))
            .map_err(CrashError)?;
        let path = scratch.path();
        let io = |e: std::io::Error| CrashError(format!("{}: {e}", path.display()));
        std::fs::copy(&tr.image, path).map_err(io)?;
        let file = std::fs::OpenOptions::new().read(true).write(true).open(path).map_err(io)?;
        // SAFETY: a scratch file of this worker's alone; nothing else maps it writable.
        let mut img = unsafe { MmapMut::map_mut(&file) }.map_err(io)?;
        let mut ps = PState::default();
        let mut cur = 0usize;
        let mut sum = empty_summary();
        let outside = self.target.outside_markers();
        let mut last_marker: Option<&str> = None;
        for &(n, pos) in chunk {
            if self.stop.load(Ordering::Relaxed) < n {
                break;
            }
            for e in &tr.events[cur..pos as usize] {
                ps.apply(tr, e, &mut img);
                if let Some(l) = outside.and_then(|prefix| tr.marker_with(e, prefix)) {
                    last_marker = Some(l);
                }
            }
            cur = pos as usize;
            let at = CrashPoint { image: &tr.image, marker: last_marker };
            let pending = ps.pending();
            let order: Vec<Vec<u64>> = pending.iter().map(|(_, p)| p.iter().map(|&x| x as u64).collect()).collect();
            let lens: Vec<usize> = order.iter().map(Vec::len).collect();
            let plan = images::plan(&lens, self.opts.bound);
            let objs = expect::at_point(self.ops, pos, self.target.plain_mallocs_durable());
            if let Some(k) = self.opts.image.filter(|&k| plan.exhaustive && k >= plan.images) {
                return Err(CrashError(format!("crash point {n} has {} images; there is no image {k}", plan.images)));
            }
            sum.points += 1;
            if plan.exhaustive {
                sum.exhaustive_points += 1;
            } else {
                sum.sampled_points += 1;
            }
            sum.max_images_at_point = sum.max_images_at_point.max(plan.images);
            let here = lens.iter().map(|&n| (n as f64 + 1.0).log10()).sum::<f64>();
            sum.possible_images_log10 = log10_sum(sum.possible_images_log10, here);
            sum.max_pending_lines = sum.max_pending_lines.max(lens.len() as u64);
            let mut seq = Sequence {
                order: &order,
                lens: lens.clone(),
                raw: plan,
                bound: self.opts.bound,
                seed: self.opts.seed,
                point: n,
                relevant: Vec::new(),
                cursor: 0,
                tried: HashSet::new(),
                sampled_from: None,
                next: 0,
                full_sample: self.opts.full_sample,
                enumerated_at: None,
            };
            // A replayed image of an exhaustive point is rebuilt alone;
            // otherwise the images before it are explored again (they decide
            // which lines it varies).
            if let Some(k) = self.opts.image.filter(|_| plan.exhaustive) {
                seq.next = k;
            }
            let mut seen: HashSet<u64> = HashSet::new();
            let mut read_lines = vec![false; pending.len()];
            let mut cov = PointCoverage { point: n, pending_lines: pending.len() as u64, ..PointCoverage::default() };
            // With full sampling: whether a sampled image found a state the
            // complete enumeration had not.
            let mut grew = false;
            loop {
                let (k, keep) = match seq.next() {
                    Ok(x) => x,
                    Err(complete) => {
                        cov.complete = complete && !grew && self.opts.image.is_none();
                        break;
                    }
                };
                if self.opts.image.is_some_and(|want| k > want) {
                    break;
                }
                let nested = self.opts.recovery_crashes > 0
                    && images::Rng::new(self.opts.seed ^ 0x5EED, n, k).below(self.opts.recovery_crashes) == 0;
                let r = self.image(path, &at, &pending, &keep, &objs, nested)?;
                sum.images += 1;
                self.progress.images.fetch_add(1, Ordering::Relaxed);
                cov.images += 1;
                let new = seen.insert(r.fingerprint);
                grew |= new && seq.enumerated_at.is_some_and(|e| k >= e);
                cov.refused += r.kept.refused;
                sum.refused += r.kept.refused;
                seq.saw(&r.read);
                for (a, &b) in read_lines.iter_mut().zip(&r.read) {
                    *a |= b;
                }
                sum.retained += r.kept.retained;
                sum.max_retained = sum.max_retained.max(r.kept.retained);
                sum.lost += r.kept.lost;
                sum.max_lost = sum.max_lost.max(r.kept.lost);
                sum.stale_dests += r.kept.stale_dests;
                if nested {
                    sum.recovery_crashed_images += 1;
                    sum.recovery_fences += r.recovery_fences;
                    sum.recovery_crash_images += r.recovery_images;
                }
                if let Some((problem, recovery_crash)) = r.problem {
                    self.stop.fetch_min(n, Ordering::Relaxed);
                    let info = |p: u32| {
                        let pc = &tr.pieces[p as usize];
                        let value = tr.value(pc).iter().map(|b| format!("{b:02x}")).collect();
                        StoreInfo { event: pc.index, offset: pc.off, len: pc.len, value }
                    };
                    let mut persisted = Vec::new();
                    let mut lost = Vec::new();
                    for ((_, pcs), &d) in pending.iter().zip(&keep) {
                        persisted.extend(pcs[..d].iter().map(|&p| info(p)));
                        lost.extend(pcs[d..].iter().map(|&p| info(p)));
                    }
                    let v = Violation {
                        point: n,
                        image: k,
                        event: tr
                            .index
                            .get(pos as usize)
                            .copied()
                            .unwrap_or_else(|| tr.index.last().map_or(0, |i| i + 1)),
                        problem,
                        recovery_crash,
                        persisted,
                        lost,
                        images_at_point: plan.images,
                        exhaustive: plan.exhaustive,
                    };
                    return Ok((sum, Some(v)));
                }
            }
            cov.distinct = seen.len() as u64;
            cov.read_lines = read_lines.iter().filter(|&&r| r).count() as u64;
            sum.distinct_states += cov.distinct;
            sum.complete_points += cov.complete as u64;
            sum.coverage.push(cov);
            self.progress.points.fetch_add(1, Ordering::Relaxed);
        }
        Ok((sum, None))
    }

    /// Recovers and checks the image of the point whose durable state is
    /// the file at `path` that keeps `keep[i]` pending stores of line `i`,
    /// watching what recovery and checks read; with `nested`, then crashes
    /// its recovery at every fence.
    fn image(
        &self,
        path: &Path,
        at: &CrashPoint,
        pending: &Pending,
        keep: &[usize],
        objs: &[Obj],
        nested: bool,
    ) -> Result<ImageRun, CrashError> {
        let mut heap = self.layout.open(path).map_err(|e| CrashError(e.to_string()))?;
        let bytes = heap_bytes(&mut heap);
        apply_kept(self.tr, pending, keep, bytes);
        let before: Vec<[u8; 64]> =
            pending.iter().map(|&(l, _)| bytes[l as usize..l as usize + 64].try_into().expect("a line")).collect();
        let watch = Arc::new(AccessWatch::new(pending.iter().map(|p| p.0)));
        heap.set_watch(watch.clone());
        let r = catch_unwind(AssertUnwindSafe(|| {
            check_image(&heap, Some(&watch), self.target, at, self.layout, objs, self.ops, self.opts)
        }))
        .unwrap_or_else(|p| Err(panic_message(p)));
        drop(heap);
        let mut h = std::collections::hash_map::DefaultHasher::new();
        let mut read = Vec::with_capacity(pending.len());
        for ((line, a), b) in watch.lines().into_iter().zip(&before) {
            read.push(a.read != 0);
            if a.read != 0 {
                (line, a.read).hash(&mut h);
                for (i, x) in b.iter().enumerate() {
                    if a.read >> i & 1 == 1 {
                        x.hash(&mut h);
                    }
                }
            }
        }
        let mut run = ImageRun {
            problem: None,
            fingerprint: h.finish(),
            read,
            kept: Kept::default(),
            recovery_fences: 0,
            recovery_images: 0,
        };
        match r {
            Err(p) => run.problem = Some((p, None)),
            Ok(kept) => {
                run.kept = kept;
                if nested {
                    crate::recrash::crash_recovery(self, path, at, pending, keep, objs, &mut run)?;
                }
            }
        }
        Ok(run)
    }
}

/// The offsets of the aligned words of the publication roots.
fn root_words(layout: &Layout) -> impl Iterator<Item = u64> + '_ {
    layout.roots.iter().flat_map(|&(o, n)| ((o + 7) & !7..o + n).step_by(8).filter(move |w| w + 8 <= o + n))
}

/// Live blocks an image's recovery kept that no completed operation needs,
/// allowed by the allocator's design.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Kept {
    /// Reached by the mark of a reachability-based recovery (stale words).
    pub(crate) retained: u64,
    /// Of interrupted operations, unpublished ([`CrashTarget::interrupted_may_lose`]).
    pub(crate) lost: u64,
    /// Interrupted `malloc_to`s whose destination still named their free
    /// block (tolerated under [`Options::allow_stale_dest`]).
    pub(crate) stale_dests: u64,
    /// The allocator refused the image, as its design requires there.
    pub(crate) refused: u64,
}

/// Recovers one image and checks it (see the crate documentation); the
/// live blocks its recovery kept by design. Reads of the recovered image go
/// to `watch` (so they count for the image's recovery-visible state).
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_image(
    heap: &Heap,
    watch: Option<&AccessWatch>,
    target: &dyn CrashTarget,
    at: &CrashPoint,
    layout: &Layout,
    objs: &[Obj],
    ops: &[Op],
    opts: &Options,
) -> Result<Kept, String> {
    let base = heap.base() as *const u8;
    let raw = |off: u64, len: u64| -> Vec<u8> {
        // SAFETY: callers pass ranges inside the heap (checked against its size).
        unsafe { std::slice::from_raw_parts(base.add(off as usize), len as usize) }.to_vec()
    };
    let read = |off: u64, buf: &mut [u8]| {
        if let Some(w) = watch {
            w.read(off, buf.len() as u64);
        }
        // SAFETY: as in `raw`.
        buf.copy_from_slice(unsafe { std::slice::from_raw_parts(base.add(off as usize), buf.len()) });
    };
    let word = |off: u64| {
        let mut b = [0u8; 8];
        read(off, &mut b);
        u64::from_le_bytes(b)
    };
    let size = heap.size();
    let in_heap = |o: &Obj| o.off >= layout.first && o.off.checked_add(o.size).is_some_and(|e| e <= size);
    let before: Vec<Option<Vec<u8>>> = objs
        .iter()
        .map(|o| {
            matches!(o.expect, Expect::Live { required: true })
                .then(|| in_heap(o).then(|| raw(o.off, o.size)))
                .flatten()
        })
        .collect();

    // The image is a scratch copy: its path means nothing to the reader (and
    // differs between runs, so a replay would not repeat the message).
    let scratch = heap.path().display().to_string();
    let named = |e: String| e.replace(&scratch, "the crash image");
    let mut rec: Box<dyn Recovered> =
        match target.recover_at(heap, at).map_err(|e| format!("recovery failed: {}", named(e)))? {
            Recovery::Recovered(r) => r,
            // Refused as the allocator's design requires: a correct outcome,
            // and no check applies to a store nobody may open.
            Recovery::Refused(_) => return Ok(Kept { refused: 1, ..Kept::default() }),
        };
    rec.check().map_err(|e| format!("recovered metadata inconsistent: {e}"))?;
    let live = rec.live_allocations();
    rec.check().map_err(|e| format!("the allocator's metadata check failed after recovery: {e}"))?;
    let mut prev_end = layout.first;
    for &(o, s) in &live {
        if o < prev_end {
            return Err(format!("live allocations overlap: {o:#x} (+{s:#x}) starts before {prev_end:#x}"));
        }
        prev_end = o
            .checked_add(s)
            .filter(|&e| e <= size)
            .ok_or(format!("live allocation {o:#x} (+{s:#x}) leaves the heap"))?;
    }
    let starts: HashMap<u64, u64> = live.iter().copied().collect();
    let is_live = |o: u64| starts.contains_key(&o);
    let container_live = |d: u64| {
        layout.in_roots(d) || {
            let i = live.partition_point(|&(o, _)| o <= d);
            i > 0 && d < live[i - 1].0 + live[i - 1].1
        }
    };
    let desc = |o: &Obj| {
        let op = &ops[o.op];
        let what = match (op.malloc, op.dest.is_some()) {
            (true, true) => "malloc_to",
            (true, false) => "malloc",
            (false, true) => "free_from",
            (false, false) => "free",
        };
        format!("{what} of {} bytes at {:#x} (op ending at event {})", o.size, o.off, op.end_index)
    };
    let reachability = target.reachability_recovery();
    let may_lose = target.interrupted_may_lose();
    let mut lost = 0u64;
    let mut stale_dests = 0u64;
    // Under a reachability-based recovery, a completed malloc_to whose
    // destination no longer names it (the program moved the pointer) must
    // survive only while the program can still reach it: the mark from the
    // roots through the blocks expected live reaches it (a program that
    // frees a block's parent first, as FPTree's teardown frees its head
    // leaf, drops it).
    let mut reachable_expected: Option<HashSet<u64>> = None;
    if reachability {
        let cand: HashMap<u64, u64> = objs
            .iter()
            .filter(|o| o.expect != Expect::Freed)
            .map(|o| (o.off, o.size))
            .chain(live.iter().copied())
            .collect();
        let mut reached: HashSet<u64> = HashSet::new();
        let roots: Vec<u64> = root_words(layout).map(word).chain(rec.mark_roots()).collect();
        mark::mark_with(read, roots, |w| {
            cand.get(&w).copied().filter(|&n| w.checked_add(n).is_some_and(|e| e <= size) && reached.insert(w))
        });
        reachable_expected = Some(reached);
    }
    // Live blocks no operation keeps live: a leak, unless (under a
    // reachability-based recovery) the mark from the roots reaches them.
    let mut unaccounted: Vec<(u64, String)> = Vec::new();
    for (o, before) in objs.iter().zip(&before) {
        match o.expect {
            Expect::Live { required } => {
                let required =
                    required && (o.dest.is_some() || reachable_expected.as_ref().is_none_or(|r| r.contains(&o.off)));
                if required && starts.get(&o.off).is_none_or(|&u| u < o.size) {
                    return Err(format!("the completed {} is not live after recovery", desc(o)));
                }
                if let Some(d) = o.dest.filter(|&d| is_live(o.off) && container_live(d)) {
                    let v = word(d);
                    if v != o.off {
                        return Err(format!("the completed {}: its destination {d:#x} holds {v:#x}", desc(o)));
                    }
                }
            }
            Expect::InFlight => {
                if let Some(d) = o.dest.filter(|&d| container_live(d)) {
                    let (v, live) = (word(d), is_live(o.off));
                    if live && v != o.off && may_lose {
                        // Allocated before it was published, or unpublished
                        // before it was freed: a lost block, by design.
                        lost += 1;
                    } else if live && v != o.off && reachability {
                        // Some other word named the block (a stale copy of
                        // a pointer, say): the block is retained or leaked,
                        // the operation is not torn.
                        unaccounted
                            .push((o.off, format!("the interrupted {} left its block live, not published", desc(o))));
                    } else if !live && v == o.off && opts.allow_stale_dest && target.free_from_leaves_dest() {
                        stale_dests += 1;
                    } else if live != (v == o.off) {
                        return Err(format!(
                            "the interrupted {} is not atomic: block {}, destination {d:#x} holds {v:#x}",
                            desc(o),
                            if live { "live" } else { "free" }
                        ));
                    }
                }
            }
            Expect::Freed => {
                if is_live(o.off) {
                    unaccounted.push((o.off, format!("the completed {} left its block live", desc(o))));
                }
            }
        }
        if let Some(b) = before {
            if let Some(w) = watch {
                w.compared(o.off, o.size);
            }
            let now = raw(o.off, o.size);
            for (i, (x, y)) in b.chunks(8).zip(now.chunks(8)).enumerate() {
                if x != y {
                    let w = (y.len() == 8).then(|| u64::from_le_bytes(y.try_into().unwrap()));
                    if w.is_some_and(|w| w == 0 || is_live(w)) {
                        continue; // a pointer word recovery (re)published or cleared
                    }
                    return Err(format!("recovery changed the contents of the live {} at byte {}", desc(o), 8 * i));
                }
            }
        }
    }
    // Blocks some operation accounts for (a freed one left live was counted above).
    let known: BTreeSet<u64> = objs.iter().map(|o| o.off).collect();
    for &(o, s) in &live {
        if !known.contains(&o) {
            unaccounted.push((
                o,
                format!("the allocation at {o:#x} (+{s:#x}) is live but no operation of the trace accounts for it"),
            ));
        }
    }
    let mut retained = 0u64;
    if reachability && !unaccounted.is_empty() {
        // The conservative mark, in the recovered image: from the root slots
        // (and what recovery keeps regardless), every aligned word of a
        // reached block that is the start of a live block reaches it.
        let mut reached: HashSet<u64> = HashSet::new();
        let roots: Vec<u64> = root_words(layout).map(word).chain(rec.mark_roots()).collect();
        mark::mark_with(read, roots, |w| starts.get(&w).copied().filter(|_| reached.insert(w)));
        let before = unaccounted.len();
        unaccounted.retain(|(o, _)| !reached.contains(o));
        retained = (before - unaccounted.len()) as u64;
    }
    let leaks = unaccounted.len() as u64;
    if leaks > opts.leak_bound {
        let why = if reachability { ", not reached from the roots" } else { "" };
        return Err(format!("{leaks} leaked allocation(s){why} (bound {}): {}", opts.leak_bound, unaccounted[0].1));
    }
    // Probe: new allocations must not overlap anything live.
    let mut sizes: Vec<u64> =
        objs.iter().map(|o| o.size).filter(|&s| s > 0).collect::<BTreeSet<_>>().into_iter().take(3).collect();
    sizes.push(256 << 10);
    let mut taken = live.clone();
    for s in sizes {
        for _ in 0..2 {
            let Some(o) = rec.malloc(s) else { continue };
            let i = taken.partition_point(|&(x, _)| x <= o);
            let hit = (i > 0 && taken[i - 1].0 + taken[i - 1].1 > o) || (i < taken.len() && taken[i].0 < o + s);
            if hit {
                return Err(format!("after recovery, malloc({s}) returned {o:#x}, which overlaps a live allocation"));
            }
            taken.insert(i, (o, s));
        }
    }
    Ok(Kept { retained, lost, stale_dests, refused: 0 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmsim_traces::TraceHeader;

    fn trace(events: Vec<Ev>) -> CrashTrace {
        let fences = events.iter().enumerate().filter(|(_, e)| matches!(e, Ev::Fence { .. })).map(|(i, _)| i as u32);
        CrashTrace {
            path: "t.pmt".into(),
            header: TraceHeader::default(),
            fences: fences.collect(),
            index: (0..events.len() as u64).collect(),
            events,
            pieces: Vec::new(),
            values: Vec::new(),
            labels: vec!["a".into(), "b".into()],
            image: "t.pmt.img".into(),
            heap_size: 1 << 20,
        }
    }

    #[test]
    fn crash_points_by_fence_operation_marker_and_stride() {
        let f = Ev::Fence { tid: 0 };
        let tr = trace(vec![
            Ev::OpBegin { tid: 0, op: OpKind::Init, arg: 0 },
            f,
            Ev::OpEnd { tid: 0, op: OpKind::Init, result: 0 },
            f,
            Ev::Marker { tid: 0, label: 0 },
            f,
            Ev::OpBegin { tid: 1, op: OpKind::Morph, arg: 0 },
            f,
            Ev::OpEnd { tid: 1, op: OpKind::Morph, result: 0 },
            Ev::Marker { tid: 0, label: 1 },
            f,
            f,
        ]);
        let pts = |o: Options| select_points(&tr, &o, false).iter().map(|p| p.0).collect::<Vec<_>>();
        assert_eq!(pts(Options::default()), [1, 2, 3, 4, 5], "every fence but those inside init");
        assert_eq!(pts(Options { during: Some(OpKind::Init), ..Options::default() }), [0]);
        assert_eq!(pts(Options { during: Some(OpKind::Morph), ..Options::default() }), [3]);
        assert_eq!(pts(Options { marker: Some("a".into()), ..Options::default() }), [2, 3]);
        assert_eq!(pts(Options { every: 2, ..Options::default() }), [1, 3, 5]);
        assert_eq!(pts(Options { point: Some(4), ..Options::default() }), [4]);
        let end = select_points(&tr, &Options::default(), true);
        assert_eq!(end.last(), Some(&(6, 12)), "the end of the trace, numbered after the last fence");
        assert_eq!(select_points(&tr, &Options { point: Some(6), ..Options::default() }, true), [(6, 12)]);
    }

    #[test]
    fn image_counts_add_up_in_logarithms_past_what_an_f64_holds() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(log10_sum(f64::NEG_INFINITY, 2.0), 2.0));
        assert!(close(log10_sum(0.0, 0.0), 2f64.log10()), "two points of one image each");
        assert!(close(log10_sum(2.0, 1.0), 110f64.log10()));
        assert!(close(log10_sum(400.0, 400.0), 400.0 + 2f64.log10()), "beyond 1.8e308");
    }

    /// A crash point of a target without outside state.
    fn at() -> CrashPoint<'static> {
        CrashPoint { image: std::path::Path::new("t.pmt.img"), marker: None }
    }

    /// A reachability-based target whose recovery leaves a fixed live set.
    struct Fixed(Vec<(u64, u64)>);
    struct FixedRec(Vec<(u64, u64)>);
    impl Recovered for FixedRec {
        fn live_allocations(&mut self) -> Vec<(u64, u64)> {
            self.0.clone()
        }
        fn malloc(&mut self, _: u64) -> Option<u64> {
            None
        }
        fn check(&mut self) -> Result<(), String> {
            Ok(())
        }
    }
    impl CrashTarget for Fixed {
        fn name(&self) -> String {
            "fixed".into()
        }
        fn plain_mallocs_durable(&self) -> bool {
            false
        }
        fn reachability_recovery(&self) -> bool {
            true
        }
        fn recover(&self, _: &Heap) -> Result<Box<dyn Recovered>, String> {
            Ok(Box::new(FixedRec(self.0.clone())))
        }
    }

    #[test]
    fn a_live_block_is_retained_when_the_mark_reaches_it_and_a_leak_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h");
        let mut heap = Heap::create(&path, 16 * HEADER_SIZE).unwrap();
        let bytes = heap_bytes(&mut heap);
        // root 3 → 0x2000, whose second word → 0x3000; 0x4000 is named by nothing.
        bytes[Heap::root_offset(3) as usize..][..8].copy_from_slice(&0x2000u64.to_le_bytes());
        bytes[0x2008..0x2010].copy_from_slice(&0x3000u64.to_le_bytes());
        let opts = Options::default();
        let reached = Fixed(vec![(0x2000, 64), (0x3000, 64)]);
        let two = Kept { retained: 2, ..Kept::default() };
        assert_eq!(
            check_image(&heap, None, &reached, &at(), &Layout::pmsim_heap(), &[], &[], &opts),
            Ok(two),
            "both retained"
        );
        let leaked = Fixed(vec![(0x2000, 64), (0x3000, 64), (0x4000, 64)]);
        let e = check_image(&heap, None, &leaked, &at(), &Layout::pmsim_heap(), &[], &[], &opts).unwrap_err();
        assert!(e.contains("1 leaked allocation(s), not reached from the roots") && e.contains("0x4000"), "{e}");
        assert_eq!(
            check_image(
                &heap,
                None,
                &leaked,
                &at(),
                &Layout::pmsim_heap(),
                &[],
                &[],
                &Options { leak_bound: 1, ..opts }
            ),
            Ok(two)
        );
    }
}
