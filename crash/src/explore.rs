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
use pmsim_model::heap::{Heap, HEADER_SIZE};
use pmsim_model::runner::ScratchHeap;
use pmsim_traces::OpKind;
use rayon::prelude::*;
use serde::Serialize;
use std::collections::{BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// Only this crash point (a fence number).
    pub point: Option<u64>,
    /// Only this image of each point.
    pub image: Option<u64>,
    /// Live allocations nothing accounts for that recovery may leave
    /// (`None`: the target's own allowance).
    pub leak_bound: Option<u64>,
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
            leak_bound: None,
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

/// The first failing image.
#[derive(Clone, Debug, Serialize)]
pub struct Violation {
    /// The crash point (fence number) and image number.
    pub point: u64,
    pub image: u64,
    /// The global event index of the fence the crash happens before.
    pub event: u64,
    pub problem: String,
    /// Pending stores this image kept, and those it dropped.
    pub persisted: Vec<StoreInfo>,
    pub lost: Vec<StoreInfo>,
    pub images_at_point: u64,
    pub exhaustive: bool,
}

/// What a run of the explorer did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub allocator: String,
    pub fences: u64,
    pub points: u64,
    pub images: u64,
    pub exhaustive_points: u64,
    pub sampled_points: u64,
    pub max_images_at_point: u64,
    /// Images the persistency model allows at the selected points (the
    /// exhaustive count; sampled points contribute their full product).
    pub possible_images: f64,
    /// Most lines with pending stores at one point.
    pub max_pending_lines: u64,
    pub seconds: f64,
    pub images_per_second: f64,
    pub violation: Option<Violation>,
}

/// Counters a caller may poll (progress bars).
#[derive(Default)]
pub struct Progress {
    pub points: AtomicU64,
    pub images: AtomicU64,
}

/// The crash points `opts` selects: (fence number, event position).
pub fn select_points(tr: &CrashTrace, opts: &Options) -> Vec<(u64, u32)> {
    let mut open: HashMap<OpKind, u64> = HashMap::new();
    let mut marked: HashMap<u32, bool> = HashMap::new();
    let mut marked_threads = 0u64;
    let mut out = Vec::new();
    let mut n = 0u64;
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
            Ev::Fence { .. } => {
                // Inside the allocator's creation the heap is not formatted
                // yet: nothing to recover (unless asked for explicitly).
                let creating = open.get(&OpKind::Init).copied().unwrap_or(0) > 0;
                let during = match opts.during {
                    Some(k) => open.get(&k).copied().unwrap_or(0) > 0,
                    None => !creating,
                };
                let mark = opts.marker.is_none() || marked_threads > 0;
                if during && mark && opts.point.is_none_or(|p| p == n) {
                    out.push((n, i as u32));
                }
                n += 1;
            }
            _ => {}
        }
    }
    let every = opts.every.max(1) as usize;
    out.into_iter().step_by(every).collect()
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
    let points = select_points(tr, opts);
    if points.is_empty() {
        return Err(CrashError(format!("{}: no crash point matches the selection", tr.path.display())));
    }
    let ops = expect::operations(tr);
    let threads = rayon::current_num_threads().max(1);
    let nchunks = points.len().min(threads * 4);
    let per = points.len().div_ceil(nchunks);
    let stop = AtomicU64::new(u64::MAX);
    let found: Mutex<Option<Violation>> = Mutex::new(None);
    let totals: Mutex<Summary> = Mutex::new(Summary::default());
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = points.par_chunks(per).enumerate().try_for_each(|(c, chunk)| {
        let w = Worker { tr, target, opts, ops: &ops, progress, stop: &stop };
        let (sum, v) = w.run(c, chunk)?;
        let mut t = totals.lock().unwrap();
        t.points += sum.points;
        t.images += sum.images;
        t.exhaustive_points += sum.exhaustive_points;
        t.sampled_points += sum.sampled_points;
        t.max_images_at_point = t.max_images_at_point.max(sum.max_images_at_point);
        t.possible_images += sum.possible_images;
        t.max_pending_lines = t.max_pending_lines.max(sum.max_pending_lines);
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
    s.allocator = target.name();
    s.fences = tr.fences.len() as u64;
    s.violation = found.into_inner().unwrap();
    s.seconds = start.elapsed().as_secs_f64();
    s.images_per_second = s.images as f64 / s.seconds.max(1e-9);
    Ok(s)
}

struct Worker<'a> {
    tr: &'a CrashTrace,
    target: &'a dyn CrashTarget,
    opts: &'a Options,
    ops: &'a [Op],
    progress: &'a Progress,
    stop: &'a AtomicU64,
}

impl Worker<'_> {
    fn run(&self, chunk_no: usize, chunk: &[(u64, u32)]) -> Result<(Summary, Option<Violation>), CrashError> {
        let tr = self.tr;
        // Unique within the process: explorations may run concurrently.
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let scratch = ScratchHeap::new(&format!("crash{chunk_no}-{}", NEXT.fetch_add(1, Ordering::Relaxed)));
        let path = scratch.path();
        let io = |e: std::io::Error| CrashError(format!("{}: {e}", path.display()));
        std::fs::copy(&tr.image, path).map_err(io)?;
        let file = std::fs::OpenOptions::new().read(true).write(true).open(path).map_err(io)?;
        // SAFETY: a scratch file of this worker's alone; nothing else maps it writable.
        let mut img = unsafe { MmapMut::map_mut(&file) }.map_err(io)?;
        let mut ps = PState::default();
        let mut cur = 0usize;
        let mut sum = Summary::default();
        for &(n, pos) in chunk {
            if self.stop.load(Ordering::Relaxed) < n {
                break;
            }
            for e in &tr.events[cur..pos as usize] {
                ps.apply(tr, e, &mut img);
            }
            cur = pos as usize;
            let pending = ps.pending();
            let order: Vec<Vec<u64>> = pending.iter().map(|(_, p)| p.iter().map(|&x| x as u64).collect()).collect();
            let lens: Vec<usize> = order.iter().map(Vec::len).collect();
            let plan = images::plan(&lens, self.opts.bound);
            let objs = expect::at_point(self.ops, pos, self.target.plain_mallocs_durable());
            let ks = match self.opts.image {
                Some(k) if k >= plan.images => {
                    return Err(CrashError(format!(
                        "crash point {n} has {} images; there is no image {k}",
                        plan.images
                    )))
                }
                Some(k) => k..k + 1,
                None => 0..plan.images,
            };
            sum.points += 1;
            if plan.exhaustive {
                sum.exhaustive_points += 1;
            } else {
                sum.sampled_points += 1;
            }
            sum.max_images_at_point = sum.max_images_at_point.max(plan.images);
            sum.possible_images += lens.iter().map(|&n| n as f64 + 1.0).product::<f64>();
            sum.max_pending_lines = sum.max_pending_lines.max(lens.len() as u64);
            for k in ks {
                let keep = images::choose(&order, plan, self.opts.seed, n, k);
                let heap = Heap::open_copy(path).map_err(|e| CrashError(e.to_string()))?;
                {
                    // SAFETY: the private mapping is this function's alone.
                    let bytes = unsafe { std::slice::from_raw_parts_mut(heap.base(), heap.size() as usize) };
                    for ((_, pcs), &d) in pending.iter().zip(&keep) {
                        for &p in &pcs[..d] {
                            write_piece(tr, p, bytes);
                        }
                    }
                }
                let r = catch_unwind(AssertUnwindSafe(|| check_image(&heap, self.target, &objs, self.ops, self.opts)))
                    .unwrap_or_else(|p| {
                        let m = p
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_else(|| "unknown panic".into());
                        Err(format!("recovery or check panicked: {m}"))
                    });
                drop(heap);
                sum.images += 1;
                self.progress.images.fetch_add(1, Ordering::Relaxed);
                if let Err(problem) = r {
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
                        event: tr.index[pos as usize],
                        problem,
                        persisted,
                        lost,
                        images_at_point: plan.images,
                        exhaustive: plan.exhaustive,
                    };
                    return Ok((sum, Some(v)));
                }
            }
            self.progress.points.fetch_add(1, Ordering::Relaxed);
        }
        Ok((sum, None))
    }
}

/// Recovers one image and checks it (see the crate documentation).
fn check_image(heap: &Heap, target: &dyn CrashTarget, objs: &[Obj], ops: &[Op], opts: &Options) -> Result<(), String> {
    let base = heap.base() as *const u8;
    let read = |off: u64, len: u64| -> Vec<u8> {
        // SAFETY: callers pass ranges inside the heap (checked against its size).
        unsafe { std::slice::from_raw_parts(base.add(off as usize), len as usize) }.to_vec()
    };
    let word = |off: u64| u64::from_le_bytes(read(off, 8).try_into().expect("8 bytes"));
    let size = heap.size();
    let in_heap = |o: &Obj| o.off >= HEADER_SIZE && o.off.checked_add(o.size).is_some_and(|e| e <= size);
    let before: Vec<Option<Vec<u8>>> = objs
        .iter()
        .map(|o| {
            matches!(o.expect, Expect::Live { required: true })
                .then(|| in_heap(o).then(|| read(o.off, o.size)))
                .flatten()
        })
        .collect();

    let mut rec: Box<dyn Recovered> = target.recover(heap).map_err(|e| format!("recovery failed: {e}"))?;
    rec.check().map_err(|e| format!("recovered metadata inconsistent: {e}"))?;
    let live = rec.live_allocations();
    let mut prev_end = HEADER_SIZE;
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
        d < HEADER_SIZE || {
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
    let mut leaks = 0u64;
    let mut leak_what = String::new();
    for (o, before) in objs.iter().zip(&before) {
        match o.expect {
            Expect::Live { required } => {
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
                    if live && v != o.off && !target.plain_mallocs_durable() {
                        // Recovery keeps what a conservative mark reaches, and
                        // some other word named the block (a stale copy of a
                        // pointer, say): the block is retained, the program
                        // never sees it. A leak, not a torn operation.
                        leaks += 1;
                        leak_what = format!("the interrupted {} left its block live, not published", desc(o));
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
                    leaks += 1;
                    leak_what = format!("the completed {} left its block live", desc(o));
                }
            }
        }
        if let Some(b) = before {
            let now = read(o.off, o.size);
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
            leaks += 1;
            leak_what =
                format!("the allocation at {o:#x} (+{s:#x}) is live but no operation of the trace accounts for it");
        }
    }
    let bound = opts.leak_bound.unwrap_or_else(|| target.leak_allowance());
    if leaks > bound {
        return Err(format!("{leaks} leaked allocation(s) (bound {bound}): {leak_what}"));
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
    Ok(())
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
        let pts = |o: Options| select_points(&tr, &o).iter().map(|p| p.0).collect::<Vec<_>>();
        assert_eq!(pts(Options::default()), [1, 2, 3, 4, 5], "every fence but those inside init");
        assert_eq!(pts(Options { during: Some(OpKind::Init), ..Options::default() }), [0]);
        assert_eq!(pts(Options { during: Some(OpKind::Morph), ..Options::default() }), [3]);
        assert_eq!(pts(Options { marker: Some("a".into()), ..Options::default() }), [2, 3]);
        assert_eq!(pts(Options { every: 2, ..Options::default() }), [1, 3, 5]);
        assert_eq!(pts(Options { point: Some(4), ..Options::default() }), [4]);
    }
}
