//! Keeps the trace's region table in step with a heap layout that changes at
//! run time (a slab carved out of a chunk of user data, an extent header area
//! swallowed by a huge extent).
//!
//! The trace's region map does not nest: a region added over another replaces
//! it. So an allocator that wants "this chunk is user data, except the slab
//! headers inside it" must register non-overlapping pieces, split them when a
//! slab appears and merge them when it goes. `RegionTiler` does that
//! bookkeeping: the caller *paints* a range with a kind and the tiler removes,
//! trims and re-adds registered regions so that the table always tiles the
//! painted ranges exactly, with adjacent pieces of one kind merged (which keeps
//! the table short: a heap of user data with N slabs has about 2N + 1 pieces).

use crate::pm::PmThread;
use pmsim_traces::Category;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// A region kind: the name and category every piece of that kind registers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionKind {
    pub name: &'static str,
    pub category: Category,
}

#[derive(Clone, Copy, Debug)]
struct Piece {
    end: u64,
    kind: usize,
    /// Region id once registered.
    id: Option<u64>,
}

/// Non-overlapping painted ranges, registered with the thread's `Pm`.
#[derive(Debug)]
pub struct RegionTiler {
    kinds: Vec<RegionKind>,
    pieces: BTreeMap<u64, Piece>,
    /// Whether changes are registered as they happen (else at [`RegionTiler::publish`]).
    live: bool,
}

impl RegionTiler {
    /// A tiler for `kinds`; `paint` takes kinds by index into this list.
    /// Nothing is registered until [`RegionTiler::publish`], so a layout
    /// rebuilt piece by piece (recovery) costs one registration per final piece.
    pub fn new(kinds: &[RegionKind]) -> RegionTiler {
        RegionTiler { kinds: kinds.to_vec(), pieces: BTreeMap::new(), live: false }
    }

    /// Stops registering changes as they happen until the next
    /// [`RegionTiler::publish`] (for a burst of paints, e.g. rebuilding a layout).
    pub fn defer(&mut self) {
        self.live = false;
    }

    /// Registers every piece, and from now on every change as it happens.
    pub fn publish(&mut self, t: &mut PmThread) {
        self.live = true;
        for (&start, p) in self.pieces.iter_mut() {
            if p.id.is_none() {
                let k = self.kinds[p.kind];
                p.id = Some(t.add_region(k.name, k.category, start, p.end - start));
            }
        }
    }

    fn remove(&mut self, t: &mut PmThread, start: u64) -> Piece {
        let p = self.pieces.remove(&start).expect("piece");
        if let Some(id) = p.id {
            t.remove_region(id);
        }
        p
    }

    fn insert(&mut self, t: &mut PmThread, start: u64, end: u64, kind: usize) {
        let id = self.live.then(|| {
            let k = self.kinds[kind];
            t.add_region(k.name, k.category, start, end - start)
        });
        self.pieces.insert(start, Piece { end, kind, id });
    }

    /// Makes `[start, end)` one piece of `kind` (merged with same-kind neighbours).
    pub fn paint(&mut self, t: &mut PmThread, start: u64, end: u64, kind: usize) {
        assert!(start < end && kind < self.kinds.len(), "bad paint [{start:#x}, {end:#x}) kind {kind}");
        // Already so (repainting a rebuilt layout): nothing to do.
        if let Some((_, p)) = self.pieces.range(..=start).next_back() {
            if p.kind == kind && p.end >= end {
                return;
            }
        }
        let (mut lo, mut hi) = (start, end);
        // Pieces that overlap or touch the range (pieces are disjoint and
        // sorted, so walk down from `end` until one ends before `start`).
        let touched: Vec<u64> =
            self.pieces.range(..=end).rev().take_while(|(_, p)| p.end >= start).map(|(&s, _)| s).collect();
        let mut rest = Vec::new();
        for s in touched {
            let p = self.pieces[&s];
            let overlaps = s < end && p.end > start;
            if p.kind == kind {
                // Same kind: absorb (overlapping or adjacent).
                self.remove(t, s);
                lo = lo.min(s);
                hi = hi.max(p.end);
            } else if overlaps {
                self.remove(t, s);
                if s < start {
                    rest.push((s, start, p.kind));
                }
                if p.end > end {
                    rest.push((end, p.end, p.kind));
                }
            }
        }
        for (s, e, k) in rest {
            self.insert(t, s, e, k);
        }
        self.insert(t, lo, hi, kind);
    }

    /// The pieces as `(start, end, kind)`, for tests and reports.
    pub fn pieces(&self) -> Vec<(u64, u64, usize)> {
        self.pieces.iter().map(|(&s, p)| (s, p.end, p.kind)).collect()
    }
}

/// An area of user data with headers inside it, each at the front of its
/// block (nvm_malloc's runs and page runs in its chunks, PAllocator's pages
/// and big blocks in its segments): its regions, painted as headers are
/// made, so that their flushes count as metadata. Shared by the threads.
///
/// Only a traced run keeps them: regions exist for the trace, a native run's
/// table has no reader, and repainting on every block split is a hot-path
/// cost (it took 43 % of PAllocator-style's native throughput on
/// Larson-large, which the CPU profile then charged to PAllocator).
#[derive(Debug)]
pub struct HeadedArea(Option<Mutex<RegionTiler>>);

const BODY: usize = 0;
const HEADER: usize = 1;

impl HeadedArea {
    /// Registers `[start, end)` as user data named `data`, whose headers
    /// will be metadata named `headers`.
    pub fn register(t: &mut PmThread, data: &'static str, headers: &'static str, start: u64, end: u64) -> HeadedArea {
        if !t.is_traced() {
            return HeadedArea(None);
        }
        let mut r = RegionTiler::new(&[
            RegionKind { name: data, category: Category::Data },
            RegionKind { name: headers, category: Category::Meta },
        ]);
        r.paint(t, start, end, BODY);
        r.publish(t);
        HeadedArea(Some(Mutex::new(r)))
    }

    fn tiler(&self) -> Option<std::sync::MutexGuard<'_, RegionTiler>> {
        self.0.as_ref().map(|m| m.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// A header `[h, h + len)` and its block's body behind it up to `end`,
    /// over whatever those bytes were (the headers of blocks since merged).
    pub fn paint_header(&self, t: &mut PmThread, h: u64, len: u64, end: u64) {
        let Some(mut r) = self.tiler() else { return };
        r.paint(t, h, h + len, HEADER);
        if h + len < end {
            r.paint(t, h + len, end, BODY);
        }
    }

    /// The headers a recovered layout holds (`(start, length)`), registered
    /// together at the end.
    pub fn paint_headers(&self, t: &mut PmThread, headers: &[(u64, u64)]) {
        let Some(mut r) = self.tiler() else { return };
        r.defer();
        for &(h, len) in headers {
            r.paint(t, h, h + len, HEADER);
        }
        r.publish(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FlushInsn, Heap, Pm, TraceConfig};
    use pmsim_traces::VecSink;

    #[test]
    fn paint_splits_and_merges_and_the_table_follows() {
        let d = tempfile::tempdir().unwrap();
        let heap = Heap::create(d.path().join("h"), 1 << 20).unwrap();
        let pm = Pm::native(&heap, FlushInsn::None).unwrap();
        let mut t = pm.thread(0);
        let kinds = [
            RegionKind { name: "data", category: Category::Data },
            RegionKind { name: "hdr", category: Category::Meta },
        ];
        let mut r = RegionTiler::new(&kinds);
        r.paint(&mut t, 0x10000, 0x50000, 0);
        r.publish(&mut t);
        r.paint(&mut t, 0x20000, 0x20400, 1);
        r.paint(&mut t, 0x30000, 0x30400, 1);
        assert_eq!(
            r.pieces(),
            vec![
                (0x10000, 0x20000, 0),
                (0x20000, 0x20400, 1),
                (0x20400, 0x30000, 0),
                (0x30000, 0x30400, 1),
                (0x30400, 0x50000, 0)
            ]
        );
        let table = |pm: &Pm| {
            let b = heap.base() as u64;
            let mut v: Vec<(u64, u64, String)> =
                pm.regions().into_iter().skip(1).map(|x| (x.base - b, x.base - b + x.len, x.name)).collect();
            v.sort();
            v
        };
        let expect: Vec<(u64, u64, String)> =
            r.pieces().into_iter().map(|(s, e, k)| (s, e, kinds[k].name.to_string())).collect();
        assert_eq!(table(&pm), expect, "the Pm's region table tiles like the tiler");
        r.paint(&mut t, 0x20000, 0x20400, 0);
        r.paint(&mut t, 0x30000, 0x30400, 0);
        assert_eq!(r.pieces(), vec![(0x10000, 0x50000, 0)], "merged back");
        assert_eq!(table(&pm), vec![(0x10000, 0x50000, "data".to_string())]);
        // Painting across several pieces.
        r.paint(&mut t, 0x20000, 0x21000, 1);
        r.paint(&mut t, 0x1f000, 0x40000, 1);
        assert_eq!(r.pieces(), vec![(0x10000, 0x1f000, 0), (0x1f000, 0x40000, 1), (0x40000, 0x50000, 0)]);
    }

    /// A header painted over a block's body, then a larger block over both:
    /// the old header becomes body, the table tiles the area, and headers
    /// found at open are registered too.
    #[test]
    fn a_headed_area_keeps_headers_in_front_of_their_blocks() {
        let d = tempfile::tempdir().unwrap();
        let heap = Heap::create(d.path().join("h"), 1 << 20).unwrap();
        let native = Pm::native(&heap, FlushInsn::None).unwrap();
        let a = HeadedArea::register(&mut native.thread(0), "body", "headers", 0x10000, 0x20000);
        a.paint_header(&mut native.thread(0), 0x11000, 64, 0x12000);
        assert!(a.0.is_none() && native.regions().len() == 1, "a native run keeps no regions");
        drop(native);
        let (pm, collector) =
            Pm::traced(&heap, FlushInsn::None, &TraceConfig::default(), |_| Ok(VecSink::default())).unwrap();
        let mut t = pm.thread(0);
        let a = HeadedArea::register(&mut t, "body", "headers", 0x10000, 0x20000);
        a.paint_header(&mut t, 0x11000, 64, 0x12000);
        let pieces = |a: &HeadedArea| a.tiler().unwrap().pieces();
        assert_eq!(pieces(&a), vec![(0x10000, 0x11000, BODY), (0x11000, 0x11040, HEADER), (0x11040, 0x20000, BODY)]);
        // A page run from 0x10000 over the block at 0x11000: its header is body now.
        a.paint_header(&mut t, 0x10000, 64, 0x13000);
        assert_eq!(pieces(&a), vec![(0x10000, 0x10040, HEADER), (0x10040, 0x20000, BODY)]);
        a.paint_headers(&mut t, &[(0x14000, 4096), (0x15000, 64)]);
        assert_eq!(
            pieces(&a),
            vec![
                (0x10000, 0x10040, HEADER),
                (0x10040, 0x14000, BODY),
                (0x14000, 0x15040, HEADER),
                (0x15040, 0x20000, BODY)
            ]
        );
        let b = heap.base() as u64;
        let meta: Vec<(u64, u64)> = pm
            .regions()
            .into_iter()
            .filter(|x| x.name == "headers")
            .map(|x| (x.base - b, x.base - b + x.len))
            .collect();
        assert_eq!(meta.len(), 2, "{meta:?}");
        drop(t);
        collector.finish(pm).unwrap();
    }
}
