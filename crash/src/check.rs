//! The checks of one recovered crash image (the crate documentation lists
//! them), one function per expectation: live allocations disjoint and inside
//! the heap; a completed `malloc_to` live with its destination; an
//! interrupted operation atomic; a completed `free` free; a live block's
//! contents kept; no leak beyond the bound (under a reachability-based
//! recovery, what the checks' own mark reaches is retained); new allocations
//! overlapping nothing.

use crate::expect::{Expect, Obj, Op};
use crate::layout::Layout;
use crate::options::Options;
use crate::target::{CrashTarget, Recovered};
use pmsim_model::family::{CrashPoint, Recovery};
use pmsim_model::heap::Heap;
use pmsim_model::intmap::IntMap;
use pmsim_model::mech::mark;
use pmsim_model::watch::AccessWatch;
use std::collections::BTreeSet;

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

/// What an image's checks need to know of the exploration.
#[derive(Clone, Copy)]
pub(crate) struct Context<'a> {
    pub(crate) target: &'a dyn CrashTarget,
    pub(crate) layout: &'a Layout,
    pub(crate) ops: &'a [Op],
    pub(crate) opts: &'a Options,
}

/// The bytes of an image before its recovery, for the check that recovery
/// kept the contents of live blocks.
pub(crate) trait Before {
    /// Before recovery runs: what it needs of the objects `wanted` (indices
    /// into `objs`).
    fn capture(&mut self, heap: &Heap, objs: &[Obj], wanted: &[usize]);

    /// After recovery: per wanted object, its bytes before recovery, or
    /// `None` where recovery cannot have changed them.
    fn changed(&mut self, heap: &Heap, objs: &[Obj], wanted: &[usize]) -> Vec<Option<Vec<u8>>>;
}

/// The wanted objects' bytes copied before recovery (every one compared after).
#[derive(Default)]
pub(crate) struct Snapshot(Vec<Vec<u8>>);

impl Before for Snapshot {
    fn capture(&mut self, heap: &Heap, objs: &[Obj], wanted: &[usize]) {
        let img = Bytes { base: heap.base() as *const u8, size: heap.size(), watch: None };
        self.0 = wanted.iter().map(|&i| img.raw(objs[i].off, objs[i].size)).collect();
    }

    fn changed(&mut self, _: &Heap, _: &[Obj], _: &[usize]) -> Vec<Option<Vec<u8>>> {
        std::mem::take(&mut self.0).into_iter().map(Some).collect()
    }
}

/// Recovers one image and checks it (see the crate documentation); the
/// live blocks its recovery kept by design. Reads of the recovered image go
/// to `watch` (so they count for the image's recovery-visible state);
/// `before` gives the bytes of live blocks before recovery.
pub(crate) fn check_image(
    heap: &Heap,
    watch: Option<&AccessWatch>,
    cx: &Context,
    at: &CrashPoint,
    objs: &[Obj],
    before: &mut dyn Before,
) -> Result<Kept, String> {
    let img = Bytes { base: heap.base() as *const u8, size: heap.size(), watch };
    let wanted: Vec<usize> = (0..objs.len())
        .filter(|&i| objs[i].expect == Expect::Live { required: true } && img.holds(cx.layout, &objs[i]))
        .collect();
    before.capture(heap, objs, &wanted);
    let Some(mut rec) = recover(heap, cx.target, at)? else {
        // Refused as the allocator's design requires: a correct outcome,
        // and no check applies to a store nobody may open.
        return Ok(Kept { refused: 1, ..Kept::default() });
    };
    rec.check().map_err(|e| format!("recovered metadata inconsistent: {e}"))?;
    let list = rec.live_allocations();
    rec.check().map_err(|e| format!("the allocator's metadata check failed after recovery: {e}"))?;
    disjoint(&list, cx.layout.first, img.size)?;
    let c = Checks { img, cx, live: Live::new(list), reachable: None };
    let c = Checks { reachable: c.reachable_expected(objs, rec.as_mut()), ..c };
    let mut kept = Kept::default();
    let mut prior: Vec<Option<Vec<u8>>> = vec![None; objs.len()];
    for (&i, b) in wanted.iter().zip(before.changed(heap, objs, &wanted)) {
        prior[i] = b;
    }
    // Live blocks no operation keeps live: a leak, unless (under a
    // reachability-based recovery) the mark from the roots reaches them.
    let mut unaccounted: Vec<(u64, String)> = Vec::new();
    for (o, before) in objs.iter().zip(&prior) {
        match o.expect {
            Expect::Live { required } => c.completed_malloc(o, required)?,
            Expect::InFlight => c.interrupted(o, &mut kept, &mut unaccounted)?,
            Expect::Freed => c.completed_free(o, &mut unaccounted),
        }
        if let Some(b) = before {
            c.contents_kept(o, b)?;
        }
    }
    c.accounted_for(objs, &mut unaccounted);
    kept.retained = c.leaks(&mut unaccounted, rec.as_mut())?;
    probe(rec.as_mut(), objs, c.live.list)?;
    Ok(kept)
}

/// Runs the target's recovery on `heap` after a crash at `at`; `None` when
/// the allocator refused it as its design requires there.
fn recover(heap: &Heap, target: &dyn CrashTarget, at: &CrashPoint) -> Result<Option<Box<dyn Recovered>>, String> {
    // The image is a scratch copy: its path means nothing to the reader (and
    // differs between runs, so a replay would not repeat the message).
    let scratch = heap.path().display().to_string();
    let named = |e: String| e.replace(&scratch, "the crash image");
    match target.recover_at(heap, at).map_err(|e| format!("recovery failed: {}", named(e)))? {
        Recovery::Recovered(r) => Ok(Some(r)),
        Recovery::Refused(_) => Ok(None),
    }
}

/// The live allocations are disjoint and inside the heap past `first`.
fn disjoint(live: &[(u64, u64)], first: u64, size: u64) -> Result<(), String> {
    let mut prev_end = first;
    for &(o, s) in live {
        if o < prev_end {
            return Err(format!("live allocations overlap: {o:#x} (+{s:#x}) starts before {prev_end:#x}"));
        }
        prev_end = o
            .checked_add(s)
            .filter(|&e| e <= size)
            .ok_or_else(|| format!("live allocation {o:#x} (+{s:#x}) leaves the heap"))?;
    }
    Ok(())
}

/// New allocations after recovery overlap nothing live.
fn probe(rec: &mut dyn Recovered, objs: &[Obj], live: Vec<(u64, u64)>) -> Result<(), String> {
    let mut sizes: Vec<u64> =
        objs.iter().map(|o| o.size).filter(|&s| s > 0).collect::<BTreeSet<_>>().into_iter().take(3).collect();
    sizes.push(256 << 10);
    let mut taken = live;
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

/// The recovered image's bytes: read raw, or read for the checks (which
/// counts for the image's recovery-visible state).
struct Bytes<'a> {
    base: *const u8,
    size: u64,
    watch: Option<&'a AccessWatch>,
}

impl Bytes<'_> {
    /// Whether `o` lies inside the heap, past its header.
    fn holds(&self, layout: &Layout, o: &Obj) -> bool {
        o.off >= layout.first && o.off.checked_add(o.size).is_some_and(|e| e <= self.size)
    }

    fn raw(&self, off: u64, len: u64) -> Vec<u8> {
        // SAFETY: callers pass ranges inside the heap (checked against its size).
        unsafe { std::slice::from_raw_parts(self.base.add(off as usize), len as usize) }.to_vec()
    }

    fn read(&self, off: u64, buf: &mut [u8]) {
        if let Some(w) = self.watch {
            w.read(off, buf.len() as u64);
        }
        // SAFETY: as in `raw`.
        buf.copy_from_slice(unsafe { std::slice::from_raw_parts(self.base.add(off as usize), buf.len()) });
    }

    fn word(&self, off: u64) -> u64 {
        let mut b = [0u8; 8];
        self.read(off, &mut b);
        u64::from_le_bytes(b)
    }
}

/// The live allocations recovery left, by offset (checked disjoint, so
/// sorted).
struct Live {
    list: Vec<(u64, u64)>,
}

/// The index of the block starting at `o` in `blocks` (sorted by offset).
fn find(blocks: &[(u64, u64)], o: u64) -> Option<usize> {
    blocks.binary_search_by_key(&o, |b| b.0).ok()
}

/// The starts of `blocks` hashed to their index, for the checks' own
/// conservative marks: they look up every aligned word of every reached
/// block, most of them no block's start, and a binary search over tens of
/// thousands of blocks per word was most of an image's check (NVAlloc-GC
/// on FPTree).
fn starts(blocks: &[(u64, u64)]) -> IntMap<u64, usize> {
    blocks.iter().enumerate().map(|(i, b)| (b.0, i)).collect()
}

impl Live {
    fn new(list: Vec<(u64, u64)>) -> Live {
        Live { list }
    }

    fn is_live(&self, o: u64) -> bool {
        find(&self.list, o).is_some()
    }

    /// The size of the live block starting at `o`.
    fn size_at(&self, o: u64) -> Option<u64> {
        find(&self.list, o).map(|i| self.list[i].1)
    }

    /// Whether the word at `d` lies in a root or in a live block.
    fn holds_word(&self, layout: &Layout, d: u64) -> bool {
        layout.in_roots(d) || {
            let i = self.list.partition_point(|&(o, _)| o <= d);
            i > 0 && d < self.list[i - 1].0 + self.list[i - 1].1
        }
    }
}

/// One image's checks after its recovery.
struct Checks<'a> {
    img: Bytes<'a>,
    cx: &'a Context<'a>,
    live: Live,
    /// Under a reachability-based recovery: the expected blocks the program
    /// can still reach, by offset.
    reachable: Option<Vec<u64>>,
}

impl Checks<'_> {
    /// The operation that set `o`, for messages.
    fn desc(&self, o: &Obj) -> String {
        let op = &self.cx.ops[o.op];
        let what = match (op.malloc, op.dest.is_some()) {
            (true, true) => "malloc_to",
            (true, false) => "malloc",
            (false, true) => "free_from",
            (false, false) => "free",
        };
        format!("{what} of {} bytes at {:#x} (op ending at event {})", o.size, o.off, op.end_index)
    }

    /// The words a mark starts from: the root slots and what recovery keeps regardless.
    fn mark_roots(&self, rec: &mut dyn Recovered) -> Vec<u64> {
        self.cx.layout.root_words().map(|w| self.img.word(w)).chain(rec.mark_roots()).collect()
    }

    /// Under a reachability-based recovery, a completed malloc_to whose
    /// destination no longer names it (the program moved the pointer) must
    /// survive only while the program can still reach it: the mark from the
    /// roots through the blocks expected live reaches it (a program that
    /// frees a block's parent first, as FPTree's teardown frees its head
    /// leaf, drops it).
    fn reachable_expected(&self, objs: &[Obj], rec: &mut dyn Recovered) -> Option<Vec<u64>> {
        if !self.cx.target.reachability_recovery() {
            return None;
        }
        let size = self.img.size;
        // The blocks expected or found live (the live size where both are).
        let mut cand: Vec<(u64, u64)> = objs
            .iter()
            .filter(|o| o.expect != Expect::Freed)
            .map(|o| (o.off, o.size))
            .chain(self.live.list.iter().copied())
            .collect();
        cand.reverse();
        cand.sort_by_key(|b| b.0);
        cand.dedup_by_key(|b| b.0);
        let mut reached = vec![false; cand.len()];
        let roots = self.mark_roots(rec);
        let index = starts(&cand);
        mark::mark_with(
            |off, buf| self.img.read(off, buf),
            roots,
            |w| {
                let i = *index.get(&w)?;
                let n = cand[i].1;
                (w.checked_add(n).is_some_and(|e| e <= size) && !std::mem::replace(&mut reached[i], true)).then_some(n)
            },
        );
        Some(cand.iter().zip(reached).filter(|x| x.1).map(|x| x.0 .0).collect())
    }

    /// A completed malloc is live with at least its size (where it must
    /// survive), and its destination, while in something live, names it.
    fn completed_malloc(&self, o: &Obj, required: bool) -> Result<(), String> {
        let required =
            required && (o.dest.is_some() || self.reachable.as_ref().is_none_or(|r| r.binary_search(&o.off).is_ok()));
        if required && self.live.size_at(o.off).is_none_or(|u| u < o.size) {
            return Err(format!("the completed {} is not live after recovery", self.desc(o)));
        }
        if let Some(d) = o.dest.filter(|&d| self.live.is_live(o.off) && self.live.holds_word(self.cx.layout, d)) {
            let v = self.img.word(d);
            if v != o.off {
                return Err(format!("the completed {}: its destination {d:#x} holds {v:#x}", self.desc(o)));
            }
        }
        Ok(())
    }

    /// An interrupted malloc_to / free_from is atomic: its block is live
    /// exactly when its destination holds it, but for what the allocator's
    /// design allows (a lost block, a stale destination) or a reachability
    /// recovery explains (a block some other word names: retained or leaked).
    fn interrupted(&self, o: &Obj, kept: &mut Kept, unaccounted: &mut Vec<(u64, String)>) -> Result<(), String> {
        let Some(d) = o.dest.filter(|&d| self.live.holds_word(self.cx.layout, d)) else { return Ok(()) };
        let target = self.cx.target;
        let (v, live) = (self.img.word(d), self.live.is_live(o.off));
        if live && v != o.off && target.interrupted_may_lose() {
            // Allocated before it was published, or unpublished before it
            // was freed: a lost block, by design.
            kept.lost += 1;
        } else if live && v != o.off && target.reachability_recovery() {
            // Some other word named the block (a stale copy of a pointer,
            // say): the block is retained or leaked, the operation is not torn.
            unaccounted.push((o.off, format!("the interrupted {} left its block live, not published", self.desc(o))));
        } else if !live && v == o.off && self.cx.opts.allow_stale_dest && target.free_from_leaves_dest() {
            kept.stale_dests += 1;
        } else if live != (v == o.off) {
            return Err(format!(
                "the interrupted {} is not atomic: block {}, destination {d:#x} holds {v:#x}",
                self.desc(o),
                if live { "live" } else { "free" }
            ));
        }
        Ok(())
    }

    /// A completed free left its block free (else it is unaccounted for).
    fn completed_free(&self, o: &Obj, unaccounted: &mut Vec<(u64, String)>) {
        if self.live.is_live(o.off) {
            unaccounted.push((o.off, format!("the completed {} left its block live", self.desc(o))));
        }
    }

    /// Recovery kept the contents of a live block (`before`: its bytes in
    /// the image), but for pointer words it (re)published or cleared.
    fn contents_kept(&self, o: &Obj, before: &[u8]) -> Result<(), String> {
        if let Some(w) = self.img.watch {
            w.compared(o.off, o.size);
        }
        let now = self.img.raw(o.off, o.size);
        for (i, (x, y)) in before.chunks(8).zip(now.chunks(8)).enumerate() {
            if x != y {
                let w = (y.len() == 8).then(|| u64::from_le_bytes(y.try_into().unwrap()));
                if w.is_some_and(|w| w == 0 || self.live.is_live(w)) {
                    continue; // a pointer word recovery (re)published or cleared
                }
                return Err(format!("recovery changed the contents of the live {} at byte {}", self.desc(o), 8 * i));
            }
        }
        Ok(())
    }

    /// Live blocks no operation of the trace accounts for (a freed one left
    /// live was counted by [`Checks::completed_free`]).
    fn accounted_for(&self, objs: &[Obj], unaccounted: &mut Vec<(u64, String)>) {
        // The expectations are by offset.
        for &(o, s) in &self.live.list {
            if objs.binary_search_by_key(&o, |x| x.off).is_err() {
                unaccounted.push((
                    o,
                    format!("the allocation at {o:#x} (+{s:#x}) is live but no operation of the trace accounts for it"),
                ));
            }
        }
    }

    /// The unaccounted live blocks are retained (reached by the checks'
    /// own conservative mark of the recovered image, under a
    /// reachability-based recovery) or leaks, at most the leak bound of
    /// them; returns how many were retained.
    fn leaks(&self, unaccounted: &mut Vec<(u64, String)>, rec: &mut dyn Recovered) -> Result<u64, String> {
        let reachability = self.cx.target.reachability_recovery();
        let mut retained = 0u64;
        if reachability && !unaccounted.is_empty() {
            // From the root slots (and what recovery keeps regardless), every
            // aligned word of a reached block that is the start of a live
            // block reaches it.
            let live = &self.live.list;
            let mut reached = vec![false; live.len()];
            let roots = self.mark_roots(rec);
            let index = starts(live);
            mark::mark_with(
                |off, buf| self.img.read(off, buf),
                roots,
                |w| index.get(&w).copied().filter(|&i| !std::mem::replace(&mut reached[i], true)).map(|i| live[i].1),
            );
            let before = unaccounted.len();
            unaccounted.retain(|&(o, _)| !find(live, o).is_some_and(|i| reached[i]));
            retained = (before - unaccounted.len()) as u64;
        }
        let leaks = unaccounted.len() as u64;
        let bound = self.cx.opts.leak_bound;
        if leaks > bound {
            let why = if reachability { ", not reached from the roots" } else { "" };
            return Err(format!("{leaks} leaked allocation(s){why} (bound {bound}): {}", unaccounted[0].1));
        }
        Ok(retained)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmsim_model::heap::HEADER_SIZE;

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
        let heap = Heap::create(&path, 16 * HEADER_SIZE).unwrap();
        // SAFETY: this test's own heap, written before anything reads it.
        let bytes = unsafe { std::slice::from_raw_parts_mut(heap.base(), heap.size() as usize) };
        // root 3 → 0x2000, whose second word → 0x3000; 0x4000 is named by nothing.
        bytes[Heap::root_offset(3) as usize..][..8].copy_from_slice(&0x2000u64.to_le_bytes());
        bytes[0x2008..0x2010].copy_from_slice(&0x3000u64.to_le_bytes());
        let layout = Layout::pmsim_heap();
        let opts = Options::default();
        let check = |target: &dyn CrashTarget, opts: &Options| {
            let cx = Context { target, layout: &layout, ops: &[], opts };
            check_image(&heap, None, &cx, &at(), &[], &mut Snapshot::default())
        };
        let reached = Fixed(vec![(0x2000, 64), (0x3000, 64)]);
        let two = Kept { retained: 2, ..Kept::default() };
        assert_eq!(check(&reached, &opts), Ok(two), "both retained");
        let leaked = Fixed(vec![(0x2000, 64), (0x3000, 64), (0x4000, 64)]);
        let e = check(&leaked, &opts).unwrap_err();
        assert!(e.contains("1 leaked allocation(s), not reached from the roots") && e.contains("0x4000"), "{e}");
        assert_eq!(check(&leaked, &Options { leak_bound: 1, ..opts.clone() }), Ok(two));
    }
}
