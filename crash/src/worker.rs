//! A worker explores crash points in trace order, taking chunks of the
//! planned points from a counter the workers share (so it only ever replays
//! forward). It keeps the trace's state with every store persisted in a
//! scratch file (the *base*), the durable bytes of every line with pending
//! stores, and one private copy-on-write view of the base on which it builds,
//! recovers and checks each image of a point in the order of [`Sequence`],
//! watching which pending bytes recovery and the checks read, and reverting
//! the copy page by page after each.

use crate::check::{Context, Kept};
use crate::error::CrashError;
use crate::expect::{Obj, Tracker};
use crate::image::{heap_bytes, recover_and_check, Overlay, PageMap, Prefixes};
use crate::images::{self, Keep, Lines};
use crate::load::CrashTrace;
use crate::paths::Planned;
use crate::persist::{write_piece, PState, Persisted};
use crate::recrash;
use crate::report::{log10_sum, PointCoverage, Progress, RecoveryCrash, StoreInfo, Summary, Violation};
use crate::sequence::Sequence;
use memmap2::MmapMut;
use pmsim_model::family::CrashPoint;
use pmsim_model::heap::Heap;
use pmsim_model::intmap::{IntMap, IntSet};
use pmsim_model::scratch::ScratchHeap;
use pmsim_model::watch::AccessWatch;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// What the workers of one exploration share.
pub(crate) struct Shared<'a> {
    pub(crate) tr: &'a CrashTrace,
    pub(crate) cx: Context<'a>,
    /// The points to explore, in chunks taken in order.
    pub(crate) chunks: Vec<&'a [Planned]>,
    pub(crate) next_chunk: AtomicUsize,
    pub(crate) progress: &'a Progress,
    /// The lowest point a violation was found at so far (workers skip the
    /// points after it).
    pub(crate) stop: AtomicU64,
}

/// What exploring one point found: its counts (one coverage entry) and its
/// violation, if an image failed.
pub(crate) struct PointResult {
    pub(crate) sum: Summary,
    pub(crate) violation: Option<Violation>,
}

/// The base of a worker's images: every store persisted (written as it is
/// replayed), and the durable bytes of each line with pending stores.
struct Base {
    map: MmapMut,
    durable: IntMap<u64, [u8; 64]>,
}

impl Persisted for Base {
    fn stored(&mut self, tr: &CrashTrace, p: u32, first: bool) {
        if first {
            let line = (tr.pieces[p as usize].off & !63) as usize;
            self.durable.insert(line as u64, self.map[line..line + 64].try_into().expect("a line"));
        }
        write_piece(tr, p, &mut self.map);
    }

    fn durable(&mut self, tr: &CrashTrace, p: u32, last: bool) {
        let pc = &tr.pieces[p as usize];
        let line = pc.off & !63;
        if last {
            self.durable.remove(&line);
        } else if let Some(b) = self.durable.get_mut(&line) {
            let at = (pc.off - line) as usize;
            b[at..at + pc.len as usize].copy_from_slice(tr.value(pc));
        }
    }
}

/// One image recovered and checked.
struct ImageRun {
    problem: Option<(String, Option<RecoveryCrash>)>,
    /// Names its recovery-visible state (see [`pmsim_model::watch`]).
    fingerprint: u64,
    /// The pending lines the recovery or the checks read.
    read: Vec<usize>,
    kept: Kept,
    /// Crashes inside its recovery: fences and images explored.
    recovery_fences: u64,
    recovery_images: u64,
}

/// One crash point as a worker explores it.
struct Point<'p> {
    planned: Planned,
    at: CrashPoint<'p>,
    lines: Lines,
    prefixes: Prefixes,
    objs: Vec<Obj>,
}

/// A worker: its replay of the trace and its copy of the base.
pub(crate) struct Worker<'a> {
    sh: &'a Shared<'a>,
    ps: PState,
    base: Base,
    work: Heap,
    tracker: Tracker<'a>,
    /// Events replayed so far, and the pending stores there.
    cur: usize,
    lines: Lines,
    last_marker: Option<&'a str>,
    pages: PageMap,
    _scratch: ScratchHeap,
}

impl<'a> Worker<'a> {
    /// A worker with its own base (scratch number `no`) at the trace's start.
    pub(crate) fn new(sh: &'a Shared<'a>, no: usize) -> Result<Worker<'a>, CrashError> {
        let tr = sh.tr;
        // Unique within the process: explorations may run concurrently.
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let scratch =
            ScratchHeap::new(&format!("crash{no}-{}", NEXT.fetch_add(1, Ordering::Relaxed))).map_err(CrashError)?;
        let path = scratch.path();
        let io = |e: std::io::Error| CrashError(format!("{}: {e}", path.display()));
        // Its holes kept: a byte-for-byte copy would fill every page of the heap.
        pmsim_model::sparse::copy(&tr.image, path).map_err(io)?;
        let file = std::fs::OpenOptions::new().read(true).write(true).open(path).map_err(io)?;
        // SAFETY: a scratch file of this worker's alone; nothing else maps it writable.
        let map = unsafe { MmapMut::map_mut(&file) }.map_err(io)?;
        let work = sh.cx.layout.open(path).map_err(|e| CrashError(e.to_string()))?;
        let tracker = Tracker::new(sh.cx.ops, sh.cx.target.plain_mallocs_durable());
        let base = Base { map, durable: IntMap::default() };
        let pages = PageMap::open();
        Ok(Worker {
            sh,
            ps: PState::default(),
            lines: Lines::default(),
            base,
            work,
            tracker,
            cur: 0,
            last_marker: None,
            pages,
            _scratch: scratch,
        })
    }

    /// Explores chunks of points until none is left or a violation stops
    /// the points after it; the result of every point explored.
    pub(crate) fn run(mut self) -> Result<Vec<PointResult>, CrashError> {
        let mut out = Vec::new();
        loop {
            let c = self.sh.next_chunk.fetch_add(1, Ordering::Relaxed);
            let Some(chunk) = self.sh.chunks.get(c) else { break };
            for &p in chunk.iter() {
                if self.sh.stop.load(Ordering::Relaxed) < p.point {
                    return Ok(out);
                }
                let point = self.advance(p);
                let r = self.point(&point);
                self.lines = point.lines;
                let r = r?;
                self.sh.progress.points.fetch_add(1, Ordering::Relaxed);
                out.push(r);
            }
        }
        Ok(out)
    }

    /// Replays the trace up to planned point `p`.
    fn advance(&mut self, p: Planned) -> Point<'a> {
        let tr = self.sh.tr;
        let outside = self.sh.cx.target.outside_markers();
        for e in &tr.events[self.cur..p.pos as usize] {
            self.ps.apply(tr, e, &mut self.base);
            if let Some(l) = outside.and_then(|prefix| tr.marker_with(e, prefix)) {
                self.last_marker = Some(l);
            }
        }
        self.cur = p.pos as usize;
        let changed = self.ps.take_changed();
        let lines = self.lines.updated(&changed, |l| self.ps.pending_of(l));
        let prefixes = Prefixes::new(lines.len());
        let objs = self.tracker.at(p.pos);
        Point { planned: p, at: CrashPoint { image: &tr.image, marker: self.last_marker }, lines, prefixes, objs }
    }

    /// Explores the images of point `p`.
    fn point(&mut self, p: &Point) -> Result<PointResult, CrashError> {
        let opts = self.sh.cx.opts;
        let n = p.planned.point;
        let lens = p.lines.lens();
        let plan = match images::plan(&lens, opts.bound) {
            p if p.exhaustive => p,
            p => images::Plan { images: opts.sampled(), ..p },
        };
        if let Some(k) = opts.image.filter(|&k| plan.exhaustive && k >= plan.images) {
            return Err(CrashError(format!("crash point {n} has {} images; there is no image {k}", plan.images)));
        }
        let mut sum = Summary::empty();
        count_point(&mut sum, plan, &lens);
        let mut seq = Sequence::new(&p.lines, plan, opts, n);
        // A replayed image of an exhaustive point is rebuilt alone;
        // otherwise the images before it are explored again (they decide
        // which lines it varies).
        if let Some(k) = opts.image.filter(|_| plan.exhaustive) {
            seq.start_at(k);
        }
        let watch = Arc::new(AccessWatch::new(p.lines.offsets.iter().copied()));
        let mut seen: IntSet<u64> = IntSet::default();
        let mut read_lines = vec![false; p.lines.len()];
        let mut cov =
            PointCoverage { point: n, path: p.planned.path, pending_lines: p.lines.len() as u64, ..Default::default() };
        // With full sampling: whether a sampled image found a state the
        // complete enumeration had not.
        let mut grew = false;
        loop {
            let (k, keep) = match seq.next() {
                Ok(x) => x,
                Err(complete) => {
                    cov.complete = complete && !grew && opts.image.is_none();
                    break;
                }
            };
            if opts.image.is_some_and(|want| k > want) {
                break;
            }
            let nested = opts.recovery_crashes > 0
                && images::Rng::new(opts.seed ^ 0x5EED, n, k).below(opts.recovery_crashes) == 0;
            let r = self.image(p, &watch, &keep, nested)?;
            self.sh.progress.images.fetch_add(1, Ordering::Relaxed);
            cov.images += 1;
            cov.refused += r.kept.refused;
            grew |= seen.insert(r.fingerprint) && seq.enumerated_at.is_some_and(|e| k >= e);
            seq.saw(&r.read);
            for &i in &r.read {
                read_lines[i] = true;
            }
            count_image(&mut sum, &r, nested);
            if let Some((problem, recovery_crash)) = r.problem {
                self.sh.stop.fetch_min(n, Ordering::Relaxed);
                let violation = Some(self.violation(p, k, &keep, plan, problem, recovery_crash));
                cov.distinct = seen.len() as u64;
                sum.coverage.push(cov);
                return Ok(PointResult { sum, violation });
            }
        }
        cov.distinct = seen.len() as u64;
        cov.read_lines = read_lines.iter().filter(|&&r| r).count() as u64;
        sum.distinct_states += cov.distinct;
        sum.complete_points += cov.complete as u64;
        sum.coverage.push(cov);
        Ok(PointResult { sum, violation: None })
    }

    /// Builds the image of point `p` that leaves out `keep` on the worker's
    /// copy of the base (reverted first), recovers and checks it watching
    /// what is read; with `nested`, then crashes its recovery at every fence.
    fn image(
        &mut self,
        p: &Point,
        watch: &Arc<AccessWatch>,
        keep: &Keep,
        nested: bool,
    ) -> Result<ImageRun, CrashError> {
        let sh = self.sh;
        let revert = |h: &mut Heap| h.revert_copy().map_err(|e| CrashError(e.to_string()));
        let mut ov = Overlay {
            tr: sh.tr,
            base: &self.base.map,
            lines: &p.lines,
            durable: &self.base.durable,
            prefixes: &p.prefixes,
            keep,
            pages: &self.pages,
        };
        // The copy goes back to the base first: it may hold the last
        // image's recovery, or pages (the header) copied before the base
        // moved on to this point.
        revert(&mut self.work)?;
        ov.build(heap_bytes(&mut self.work));
        watch.reset();
        self.work.set_watch(watch.clone());
        let r = recover_and_check(&self.work, Some(watch), &sh.cx, &p.at, &p.objs, &mut ov);
        let (fingerprint, read) = fingerprint(watch, &ov);
        let mut run = ImageRun {
            problem: None,
            fingerprint,
            read,
            kept: Kept::default(),
            recovery_fences: 0,
            recovery_images: 0,
        };
        match r {
            Err(problem) => run.problem = Some((problem, None)),
            Ok(kept) if nested => {
                run.kept = kept;
                revert(&mut self.work)?;
                ov.build(heap_bytes(&mut self.work));
                let rc = recrash::crash_recovery(sh.tr, &sh.cx, heap_bytes(&mut self.work), &p.at, &p.objs)?;
                run.recovery_fences = rc.fences;
                run.recovery_images = rc.images;
                run.problem = rc.problem.map(|(m, at)| (m, Some(at)));
            }
            Ok(kept) => run.kept = kept,
        }
        Ok(run)
    }

    /// The report of image `k` of point `p`, which leaves out `keep` and
    /// failed with `problem`.
    fn violation(
        &self,
        p: &Point,
        k: u64,
        keep: &Keep,
        plan: images::Plan,
        problem: String,
        recovery_crash: Option<RecoveryCrash>,
    ) -> Violation {
        let tr = self.sh.tr;
        let info = |q: u32| {
            let pc = &tr.pieces[q as usize];
            let value = tr.value(pc).iter().map(|b| format!("{b:02x}")).collect();
            StoreInfo { event: pc.index, offset: pc.off, len: pc.len, value }
        };
        let mut persisted = Vec::new();
        let mut lost = Vec::new();
        for i in 0..p.lines.len() {
            let pcs = p.lines.pieces(i);
            let d = keep.binary_search_by_key(&i, |x| x.0).map_or(pcs.len(), |j| keep[j].1);
            persisted.extend(pcs[..d].iter().map(|&q| info(q)));
            lost.extend(pcs[d..].iter().map(|&q| info(q)));
        }
        let pos = p.planned.pos as usize;
        Violation {
            point: p.planned.point,
            image: k,
            event: tr.index.get(pos).copied().unwrap_or_else(|| tr.index.last().map_or(0, |i| i + 1)),
            problem,
            recovery_crash,
            persisted,
            lost,
            images_at_point: plan.images,
            exhaustive: plan.exhaustive,
        }
    }
}

/// A point with `lens` pending stores per line, explored under `plan`.
fn count_point(sum: &mut Summary, plan: images::Plan, lens: &[usize]) {
    sum.points += 1;
    if plan.exhaustive {
        sum.exhaustive_points += 1;
    } else {
        sum.sampled_points += 1;
    }
    sum.max_images_at_point = sum.max_images_at_point.max(plan.images);
    // Σ log10(n + 1) over the lines, by how many lines hold n stores.
    let mut by_len: IntMap<usize, u64> = IntMap::default();
    for &n in lens {
        *by_len.entry(n).or_default() += 1;
    }
    let here = by_len.iter().map(|(&n, &c)| c as f64 * (n as f64 + 1.0).log10()).sum::<f64>();
    sum.possible_images_log10 = log10_sum(sum.possible_images_log10, here);
    sum.max_pending_lines = sum.max_pending_lines.max(lens.len() as u64);
}

/// An image checked (with its recovery crashed if `nested`).
fn count_image(sum: &mut Summary, r: &ImageRun, nested: bool) {
    sum.images += 1;
    sum.refused += r.kept.refused;
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
}

/// The recovery-visible state of an image (the bytes of its pending lines,
/// as the image held them, that the run read before writing them) and which
/// pending lines it read.
fn fingerprint(watch: &AccessWatch, ov: &Overlay) -> (u64, Vec<usize>) {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut read = Vec::new();
    for (i, line, a) in watch.touched() {
        if a.read == 0 {
            continue;
        }
        read.push(i);
        // The bytes read, the others zero: one write to the hasher per line
        // (a point of a steady-state run can have thousands read).
        let b = ov.image_line(i);
        let seen: [u8; 64] = std::array::from_fn(|j| if a.read >> j & 1 == 1 { b[j] } else { 0 });
        (line, a.read, seen).hash(&mut h);
    }
    (h.finish(), read)
}
