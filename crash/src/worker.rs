//! A worker explores a chunk of crash points in trace order: it replays the
//! trace incrementally on a durable image of its own (so a point costs only
//! the events since the last one), then recovers and checks the point's
//! images in the order of [`Sequence`], each on a private copy-on-write
//! mapping of that durable image, watching which pending bytes recovery and
//! the checks read.

use crate::check::{Context, Kept};
use crate::error::CrashError;
use crate::expect::{self, Obj};
use crate::image::{apply_kept, heap_bytes, recover_and_check};
use crate::images;
use crate::load::CrashTrace;
use crate::persist::PState;
use crate::recrash;
use crate::report::{log10_sum, PointCoverage, Progress, RecoveryCrash, StoreInfo, Summary, Violation};
use crate::sequence::Sequence;
use memmap2::MmapMut;
use pmsim_model::family::CrashPoint;
use pmsim_model::scratch::ScratchHeap;
use pmsim_model::watch::AccessWatch;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What the workers of one exploration share.
pub(crate) struct Worker<'a> {
    pub(crate) tr: &'a CrashTrace,
    pub(crate) cx: Context<'a>,
    pub(crate) progress: &'a Progress,
    /// The lowest point a violation was found at so far (workers skip the
    /// points after it).
    pub(crate) stop: &'a AtomicU64,
}

/// One image recovered and checked.
struct ImageRun {
    problem: Option<(String, Option<RecoveryCrash>)>,
    /// Names its recovery-visible state (see [`pmsim_model::watch`]).
    fingerprint: u64,
    /// Per pending line of the point: whether the recovery or the checks read it.
    read: Vec<bool>,
    kept: Kept,
    /// Crashes inside its recovery: fences and images explored.
    recovery_fences: u64,
    recovery_images: u64,
}

/// One crash point as a worker explores it.
struct Point<'p> {
    n: u64,
    /// Its position in the event list.
    pos: u32,
    at: CrashPoint<'p>,
    pending: Vec<(u64, Vec<u32>)>,
    objs: Vec<Obj>,
}

impl Worker<'_> {
    /// Explores the points of `chunk` (number `chunk_no`) in order; stops at
    /// the first violation.
    pub(crate) fn run(
        &self,
        chunk_no: usize,
        chunk: &[(u64, u32)],
    ) -> Result<(Summary, Option<Violation>), CrashError> {
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
        let mut sum = Summary::empty();
        let outside = self.cx.target.outside_markers();
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
            let objs = expect::at_point(self.cx.ops, pos, self.cx.target.plain_mallocs_durable());
            let at = CrashPoint { image: &tr.image, marker: last_marker };
            let p = Point { n, pos, at, pending: ps.pending(), objs };
            if let Some(v) = self.point(&p, path, &mut sum)? {
                return Ok((sum, Some(v)));
            }
        }
        Ok((sum, None))
    }

    /// Explores the images of point `p`, whose durable state is the file at
    /// `path`, adding to `sum`; the violation of the first failing image.
    fn point(&self, p: &Point, path: &Path, sum: &mut Summary) -> Result<Option<Violation>, CrashError> {
        let opts = self.cx.opts;
        let order: Vec<Vec<u64>> = p.pending.iter().map(|(_, q)| q.iter().map(|&x| x as u64).collect()).collect();
        let lens: Vec<usize> = order.iter().map(Vec::len).collect();
        let plan = images::plan(&lens, opts.bound);
        if let Some(k) = opts.image.filter(|&k| plan.exhaustive && k >= plan.images) {
            return Err(CrashError(format!("crash point {} has {} images; there is no image {k}", p.n, plan.images)));
        }
        count_point(sum, plan, &lens);
        let mut seq = Sequence::new(&order, plan, opts, p.n);
        // A replayed image of an exhaustive point is rebuilt alone;
        // otherwise the images before it are explored again (they decide
        // which lines it varies).
        if let Some(k) = opts.image.filter(|_| plan.exhaustive) {
            seq.start_at(k);
        }
        let mut seen: HashSet<u64> = HashSet::new();
        let mut read_lines = vec![false; p.pending.len()];
        let mut cov = PointCoverage { point: p.n, pending_lines: p.pending.len() as u64, ..PointCoverage::default() };
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
                && images::Rng::new(opts.seed ^ 0x5EED, p.n, k).below(opts.recovery_crashes) == 0;
            let r = self.image(path, p, &keep, nested)?;
            self.progress.images.fetch_add(1, Ordering::Relaxed);
            cov.images += 1;
            cov.refused += r.kept.refused;
            let new = seen.insert(r.fingerprint);
            grew |= new && seq.enumerated_at.is_some_and(|e| k >= e);
            seq.saw(&r.read);
            for (a, &b) in read_lines.iter_mut().zip(&r.read) {
                *a |= b;
            }
            count_image(sum, &r, nested);
            if let Some((problem, recovery_crash)) = r.problem {
                self.stop.fetch_min(p.n, Ordering::Relaxed);
                return Ok(Some(self.violation(p, k, &keep, plan, problem, recovery_crash)));
            }
        }
        cov.distinct = seen.len() as u64;
        cov.read_lines = read_lines.iter().filter(|&&r| r).count() as u64;
        sum.distinct_states += cov.distinct;
        sum.complete_points += cov.complete as u64;
        sum.coverage.push(cov);
        self.progress.points.fetch_add(1, Ordering::Relaxed);
        Ok(None)
    }

    /// Recovers and checks the image of point `p` whose durable state is the
    /// file at `path` that keeps `keep[i]` pending stores of line `i`,
    /// watching what recovery and checks read; with `nested`, then crashes
    /// its recovery at every fence.
    fn image(&self, path: &Path, p: &Point, keep: &[usize], nested: bool) -> Result<ImageRun, CrashError> {
        let mut heap = self.cx.layout.open(path).map_err(|e| CrashError(e.to_string()))?;
        let bytes = heap_bytes(&mut heap);
        apply_kept(self.tr, &p.pending, keep, bytes);
        let before: Vec<[u8; 64]> =
            p.pending.iter().map(|&(l, _)| bytes[l as usize..l as usize + 64].try_into().expect("a line")).collect();
        let watch = Arc::new(AccessWatch::new(p.pending.iter().map(|q| q.0)));
        heap.set_watch(watch.clone());
        let r = recover_and_check(&heap, Some(&watch), &self.cx, &p.at, &p.objs);
        drop(heap);
        let (fingerprint, read) = fingerprint(&watch, &before);
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
            Ok(kept) => {
                run.kept = kept;
                if nested {
                    let rc = recrash::crash_recovery(self.tr, &self.cx, path, &p.at, &p.pending, keep, &p.objs)?;
                    run.recovery_fences = rc.fences;
                    run.recovery_images = rc.images;
                    run.problem = rc.problem.map(|(m, at)| (m, Some(at)));
                }
            }
        }
        Ok(run)
    }

    /// The report of image `k` of point `p`, which keeps `keep[i]` pending
    /// stores of line `i` and failed with `problem`.
    fn violation(
        &self,
        p: &Point,
        k: u64,
        keep: &[usize],
        plan: images::Plan,
        problem: String,
        recovery_crash: Option<RecoveryCrash>,
    ) -> Violation {
        let tr = self.tr;
        let info = |q: u32| {
            let pc = &tr.pieces[q as usize];
            let value = tr.value(pc).iter().map(|b| format!("{b:02x}")).collect();
            StoreInfo { event: pc.index, offset: pc.off, len: pc.len, value }
        };
        let mut persisted = Vec::new();
        let mut lost = Vec::new();
        for ((_, pcs), &d) in p.pending.iter().zip(keep) {
            persisted.extend(pcs[..d].iter().map(|&q| info(q)));
            lost.extend(pcs[d..].iter().map(|&q| info(q)));
        }
        Violation {
            point: p.n,
            image: k,
            event: tr.index.get(p.pos as usize).copied().unwrap_or_else(|| tr.index.last().map_or(0, |i| i + 1)),
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
    let here = lens.iter().map(|&n| (n as f64 + 1.0).log10()).sum::<f64>();
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
/// `before` recovery, that the run read) and which pending lines it read.
fn fingerprint(watch: &AccessWatch, before: &[[u8; 64]]) -> (u64, Vec<bool>) {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut read = Vec::with_capacity(before.len());
    for ((line, a), b) in watch.lines().into_iter().zip(before) {
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
    (h.finish(), read)
}
