//! What the trace promises about the heap at a crash point: the user-visible
//! operations (`malloc`, `free`) with their offsets, sizes and, for
//! `malloc_to` / `free_from`, their destination word.
//!
//! The trace brackets each operation with `OpBegin`/`OpEnd` but does not
//! record the destination, so it is recognised by what the operation does:
//! a `malloc_to` stores its result, as an aligned 8-byte word, into the root
//! table or into a live allocation (the allocator's own WAL and logs are no
//! allocation); a `free_from` stores 0 into the destination its object was
//! published at. When a destination word is overwritten while its block is
//! live (the program moves the pointer, or publishes another block there),
//! the block keeps its liveness expectation but no longer has a destination
//! to check.

use crate::layout::Layout;
use crate::load::{CrashTrace, Ev, Piece};
use pmsim_traces::OpKind;
use std::collections::{BTreeMap, HashMap};

/// One user-visible operation of the trace.
#[derive(Clone, Copy, Debug)]
pub struct Op {
    pub malloc: bool,
    /// Positions in the event list of its begin and end (`u32::MAX`: never ended).
    pub begin: u32,
    pub end: u32,
    /// The block: the result of a malloc, the argument of a free.
    pub off: u64,
    /// Requested bytes (malloc) or the object's (free).
    pub size: u64,
    /// The destination word (`malloc_to`, `free_from`).
    pub dest: Option<u64>,
    /// Position from which `dest` no longer names the object: the program
    /// itself stored over it (e.g. moved the pointer elsewhere, as FPTree's
    /// leaf split does). `u32::MAX`: never.
    pub dest_until: u32,
    /// Global trace index of the end event (for reports).
    pub end_index: u64,
}

/// Every malloc and free of the trace, in begin order.
pub fn operations(tr: &CrashTrace, layout: &Layout) -> Vec<Op> {
    let mut b = Builder {
        tr,
        layout,
        ops: Vec::new(),
        open: HashMap::new(),
        live: BTreeMap::new(),
        dests: BTreeMap::new(),
        last_owner: HashMap::new(),
    };
    for (i, e) in tr.events.iter().enumerate() {
        match *e {
            Ev::OpBegin { tid, op: op @ (OpKind::Malloc | OpKind::Free), arg } => b.begin(i, tid, op, arg),
            Ev::Store { piece, tid, .. } => b.store(i, tid, &tr.pieces[piece as usize]),
            Ev::OpEnd { tid, op: OpKind::Malloc | OpKind::Free, result } => b.end(i, tid, result),
            _ => {}
        }
    }
    b.ops
}

/// A thread's open user op: its index in the operations, its aligned
/// 8-byte stores (offset, value) and the depth of ops nested in it.
type Open = (usize, Vec<(u64, u64)>, u32);

/// The operations of a trace as they are read, with what is needed to
/// recognise destinations.
struct Builder<'a> {
    tr: &'a CrashTrace,
    layout: &'a Layout,
    ops: Vec<Op>,
    /// Per thread: the open user op.
    open: HashMap<u32, Open>,
    /// Live blocks: offset → (size, the op that allocated it).
    live: BTreeMap<u64, (u64, usize)>,
    /// Destination words of live published blocks → their malloc.
    dests: BTreeMap<u64, usize>,
    /// The last malloc_to that published into each word.
    last_owner: HashMap<u64, usize>,
}

impl Builder<'_> {
    /// Operation `op` of thread `tid` begins at position `i`.
    fn begin(&mut self, i: usize, tid: u32, op: OpKind, arg: u64) {
        if let Some(o) = self.open.get_mut(&tid) {
            o.2 += 1; // nested (not expected): ignore its framing
            return;
        }
        let (size, dest) = match (op, self.live.remove(&arg)) {
            (OpKind::Free, Some((size, m))) => {
                let d = self.ops[m].dest.filter(|_| self.ops[m].dest_until == u32::MAX);
                if let Some(d) = d {
                    self.dests.remove(&d);
                }
                // Destination words inside the freed block mean nothing any more.
                let inner: Vec<u64> = self.dests.range(arg..arg + size).map(|(&w, _)| w).collect();
                for w in inner {
                    let m = self.dests.remove(&w).expect("listed");
                    self.ops[m].dest_until = i as u32;
                }
                (size, d)
            }
            (OpKind::Free, None) => (0, None),
            _ => (arg, None),
        };
        self.ops.push(Op {
            malloc: op == OpKind::Malloc,
            begin: i as u32,
            end: u32::MAX,
            off: if op == OpKind::Free { arg } else { 0 },
            size,
            dest,
            dest_until: u32::MAX,
            end_index: u64::MAX,
        });
        self.open.insert(tid, (self.ops.len() - 1, Vec::new(), 0));
    }

    /// A store piece `p` of thread `tid` at position `i`.
    fn store(&mut self, i: usize, tid: u32, p: &Piece) {
        let tr = self.tr;
        if let Some((_, stores, _)) = self.open.get_mut(&tid) {
            if p.len == 8 && p.off & 7 == 0 {
                let v = u64::from_le_bytes(tr.value(p).try_into().expect("8 bytes"));
                stores.push((p.off, v));
            }
        }
        if !self.dests.is_empty() {
            // Any store over the destination word of a live published
            // block (the program moving the pointer, or publishing
            // another block there) ends what that word tells of it.
            let mut w = p.off & !7;
            while w < p.off + p.len as u64 {
                if let Some(m) = self.dests.remove(&w) {
                    self.ops[m].dest_until = i as u32;
                }
                w += 8;
            }
        }
    }

    /// The open operation of thread `tid` ends at position `i` with `result`.
    fn end(&mut self, i: usize, tid: u32, result: u64) {
        let Some(o) = self.open.get_mut(&tid) else { return };
        if o.2 > 0 {
            o.2 -= 1;
            return;
        }
        let (k, stores, _) = self.open.remove(&tid).expect("open op");
        let (tr, layout) = (self.tr, self.layout);
        let op = &mut self.ops[k];
        op.end = i as u32;
        op.end_index = tr.index[i];
        if !op.malloc {
            if !op.dest.is_some_and(|d| stores.contains(&(d, 0))) {
                op.dest = None;
            }
            return;
        }
        op.off = result;
        if result == 0 {
            return;
        }
        let live = &self.live;
        let inside = |at: u64| live.range(..=at).next_back().is_some_and(|(&o, &(s, _))| at < o + s);
        op.dest =
            stores.iter().rev().find(|&&(at, v)| v == result && (layout.in_roots(at) || inside(at))).map(|&(at, _)| at);
        self.live.insert(result, (op.size, k));
        if let Some(d) = op.dest {
            self.dests.insert(d, k);
            // From its start, this op owns the word (recovery may redo its
            // publication over the previous block).
            let begin = op.begin;
            if let Some(m) = self.last_owner.insert(d, k) {
                self.ops[m].dest_until = self.ops[m].dest_until.min(begin);
            }
        }
    }
}

/// The state of one block at a crash point, by the last operation on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// A completed malloc: must be live (if published or durable by design).
    Live { required: bool },
    /// An operation in progress: may be live or not.
    InFlight,
    /// A completed free: must not be live (else it is leaked).
    Freed,
}

/// One block's expectation at a crash point.
#[derive(Clone, Copy, Debug)]
pub struct Obj {
    pub off: u64,
    pub size: u64,
    pub dest: Option<u64>,
    pub expect: Expect,
    /// The op that set it (index into the operations).
    pub op: usize,
}

/// The expectations at the crash point before event position `pos`.
pub fn at_point(ops: &[Op], pos: u32, plain_durable: bool) -> Vec<Obj> {
    let mut by_off: BTreeMap<u64, Obj> = BTreeMap::new();
    for (i, o) in ops.iter().enumerate() {
        if o.begin >= pos {
            break;
        }
        if o.malloc && o.off == 0 {
            continue; // failed, or in flight with no result ever
        }
        by_off.insert(o.off, obj(o, i, pos, plain_durable));
    }
    by_off.into_values().collect()
}

/// The expectations at a crash point that moves forward through the trace:
/// what [`at_point`] computes from scratch, kept up to date from one point
/// to the next in time proportional to the operations in between.
pub struct Tracker<'a> {
    ops: &'a [Op],
    plain_durable: bool,
    /// (position from which an operation's expectation changes, operation), sorted.
    changes: Vec<(u32, u32)>,
    next: usize,
    /// The expectations, by offset.
    objs: Vec<Obj>,
}

impl<'a> Tracker<'a> {
    pub fn new(ops: &'a [Op], plain_durable: bool) -> Tracker<'a> {
        let mut changes: Vec<(u32, u32)> = Vec::with_capacity(3 * ops.len());
        for (i, o) in ops.iter().enumerate() {
            for at in [o.begin, o.end, o.dest_until] {
                if at != u32::MAX {
                    changes.push((at + 1, i as u32));
                }
            }
        }
        changes.sort_unstable();
        Tracker { ops, plain_durable, changes, next: 0, objs: Vec::new() }
    }

    /// The expectations at the crash point before event position `pos`
    /// (at least the last one asked for).
    pub fn at(&mut self, pos: u32) -> Vec<Obj> {
        while let Some(&(at, i)) = self.changes.get(self.next).filter(|c| c.0 <= pos) {
            self.next += 1;
            let o = &self.ops[i as usize];
            if o.malloc && o.off == 0 {
                continue; // failed, or in flight with no result ever
            }
            let now = obj(o, i as usize, pos, self.plain_durable);
            match self.objs.binary_search_by_key(&o.off, |x| x.off) {
                // A later operation on the block replaces the earlier one's.
                Ok(k) if o.begin + 1 == at || self.objs[k].op == i as usize => self.objs[k] = now,
                Ok(_) => {}
                Err(k) => self.objs.insert(k, now),
            }
        }
        self.objs.clone()
    }
}

/// Operation `o` (number `i`) as the expectation of its block at `pos`.
fn obj(o: &Op, i: usize, pos: u32, plain_durable: bool) -> Obj {
    let expect = match (o.malloc, o.end < pos) {
        (true, true) => Expect::Live { required: o.dest.is_some() || plain_durable },
        (false, true) => Expect::Freed,
        _ => Expect::InFlight,
    };
    Obj { off: o.off, size: o.size, dest: o.dest.filter(|_| o.dest_until >= pos), expect, op: i }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tracker_agrees_with_the_expectations_from_scratch() {
        let op = |malloc, begin, end, off, dest: Option<u64>, dest_until| Op {
            malloc,
            begin,
            end,
            off,
            size: 64,
            dest,
            dest_until,
            end_index: end as u64,
        };
        let ops = [
            op(true, 1, 4, 0x100, Some(0x1000), 9),
            op(true, 2, 12, 0x200, None, u32::MAX),
            op(false, 5, 7, 0x100, Some(0x1000), u32::MAX),
            op(true, 8, u32::MAX, 0x100, None, u32::MAX),
            op(true, 10, 11, 0, None, u32::MAX),
            op(false, 13, 15, 0x200, None, u32::MAX),
        ];
        for plain in [false, true] {
            let mut t = Tracker::new(&ops, plain);
            for pos in [0, 1, 2, 3, 5, 6, 8, 9, 10, 11, 12, 14, 15, 16, 40] {
                let a: Vec<_> = t.at(pos).iter().map(|o| (o.off, o.dest, o.expect, o.op)).collect();
                let b: Vec<_> = at_point(&ops, pos, plain).iter().map(|o| (o.off, o.dest, o.expect, o.op)).collect();
                assert_eq!(a, b, "at {pos}");
            }
        }
    }
}
