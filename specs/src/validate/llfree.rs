//! The mapping of an LLFree trace to `LLFreeSingleCAS`'s actions
//! (`llfree-single-cas/LLFreeSingleCASTrace.tla` is its other half).
//!
//! LLFree announces its persistent words as regions (`llfree children`: the
//! child entries, four 16-bit lanes per word, 32 children per line;
//! `llfree bit fields`: one 64 B line per child; `llfree frames`), and
//! every transition is one CAS of one word, recorded as a store with its
//! value. The mapper keeps the words' values, so a store says which lane or
//! bit changed and how:
//!
//! | event | action |
//! |---|---|
//! | `op_begin malloc` | `AllocBegin` (base up to 4 KiB, huge up to 2 MiB) |
//! | child counter − 1 | `LowerBase`, or `DecAfterSet` after the bit (the spec decides which) |
//! | bit set | `SetBit` |
//! | child 512 free → huge | `LowerHuge` |
//! | `op_begin free` | `FreeBegin` (of the allocation holding the frame) |
//! | bit cleared | `ClearBit` |
//! | child counter + 1 | `IncCounter` |
//! | child huge → 512 free | `FreeHuge` |
//! | flush of a modelled line, then a fence | `Commit` (one per line) |
//! | `op_end` | `Return`, or `Failed` for an allocation that returned nothing |
//!
//! Anything else that changes a modelled word becomes a step no action
//! matches, so validation stops there. Events of the zone's creation (the
//! `init` operation) only set the words' starting values, which must be the
//! spec's initial state (every child free, every bit clear).

use super::{tla_set, tla_str, Cutter, Mapped, Step, Window};
use pmsim_traces::{line_of, Event, FenceKind, OpKind, TraceReader};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;

/// Base frames per child (a huge frame), 4 KiB each.
const CHILD_FRAMES: u64 = 512;
const FRAME: u64 = 4096;
/// Children per tree: one 64 B line of child entries (`lower.rs` TREE_CHILDREN).
const TREE_CHILDREN: u64 = 32;
/// Child entry lane: counter bits 0-9, huge flag bit 15 (`lower.rs` Child).
const COUNT_MASK: u64 = 0x3ff;
const HUGE_FLAG: u64 = 0x8000;

/// The spec's invariants checked along the trace.
const INVARIANTS: [&str; 4] = ["TypeOK", "NoFrameAllocatedTwice", "CountersInBounds", "NoAllocationStuck"];

/// The zone's shape: trees of [`TREE_CHILDREN`] children, the last one
/// holding what is left (a zone of 95 children: 32, 32, 31).
#[derive(Clone, Copy, Debug)]
struct Shape {
    children: u32,
}

impl Shape {
    fn trees(&self) -> u32 {
        self.children.div_ceil(TREE_CHILDREN as u32)
    }

    /// Children before tree `t` (1-based).
    fn before(&self, t: u32) -> u32 {
        (t - 1) * TREE_CHILDREN as u32
    }

    fn size(&self, t: u32) -> u32 {
        (self.children - self.before(t)).min(TREE_CHILDREN as u32)
    }

    fn sizes(&self) -> impl Iterator<Item = u32> + '_ {
        (1..=self.trees()).map(|t| self.size(t))
    }

    /// The tree of child `c` (1-based), if the zone has that child.
    fn tree_of(&self, c: u32) -> Option<u32> {
        (c >= 1 && c <= self.children).then(|| (c - 1) / TREE_CHILDREN as u32 + 1)
    }
}

/// An allocation as the spec names it: `<<"base", c, b>>` or `<<"huge", c>>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Alloc {
    c: u32,
    b: u16,
    huge: bool,
}

impl Alloc {
    /// As TLA+, with child numbers less `base`.
    fn tla(&self, base: u32) -> String {
        if self.huge {
            format!("<<\"huge\", {}>>", self.c - base)
        } else {
            format!("<<\"base\", {}, {}>>", self.c - base, self.b)
        }
    }
}

/// How a CAS changed a child entry.
#[derive(Clone, Copy, Debug)]
enum Change {
    Dec,
    Inc,
    LowerHuge,
    FreeHuge,
}

/// A modelled line: a tree's child entries, or a child's bit field.
#[derive(Clone, Copy, Debug)]
enum Line {
    Children(u32),
    Bits(u32),
}

/// A step of the trace in the spec's terms, with the zone's (global) numbers.
#[derive(Clone, Debug)]
enum Kind {
    AllocBegin { huge: bool },
    Entry { change: Change, c: u32, old: u16, new: u16 },
    Bit { set: bool, c: u32, b: u16 },
    Commit(Line),
    FreeBegin { c: u32, b: u16 },
    ReturnFree,
    Return(Alloc),
    Failed,
    Unknown(Box<str>),
}

struct LStep {
    event: u64,
    tid: u32,
    kind: Kind,
}

impl Kind {
    /// The step for people, in the zone's numbers.
    fn action(&self) -> String {
        match self {
            Kind::AllocBegin { huge } => format!("AllocBegin({})", if *huge { "huge" } else { "base" }),
            Kind::Entry { change, c, old, new } => {
                let name = match change {
                    Change::Dec => "LowerBase or DecAfterSet",
                    Change::Inc => "IncCounter",
                    Change::LowerHuge => "LowerHuge",
                    Change::FreeHuge => "FreeHuge",
                };
                format!("{name}(child {c}: {} -> {})", entry(*old as u64), entry(*new as u64))
            }
            Kind::Bit { set, c, b } => format!("{}(child {c}, bit {b})", if *set { "SetBit" } else { "ClearBit" }),
            Kind::Commit(l) => format!("Commit(line {})", line_tla(*l, 0, 0)),
            Kind::FreeBegin { c, b } => format!("FreeBegin(child {c}, frame {b})"),
            Kind::ReturnFree => "Return(free)".into(),
            Kind::Return(a) => format!("Return({})", a.tla(0)),
            Kind::Failed => "Failed (no frame)".into(),
            Kind::Unknown(what) => format!("no action: {what}"),
        }
    }

    /// The step as a TLA+ record of CPU `p`, in the numbers of a window
    /// whose tree has `base` children before it and `trees` trees.
    fn tla(&self, p: u32, base: u32, trees: u32) -> String {
        match self {
            Kind::AllocBegin { huge } => {
                format!("[a |-> \"AllocBegin\", p |-> {p}, o |-> \"{}\"]", if *huge { "huge" } else { "base" })
            }
            Kind::Entry { change, c, .. } => {
                let a = match change {
                    Change::Dec => "DecCounter",
                    Change::Inc => "IncCounter",
                    Change::LowerHuge => "LowerHuge",
                    Change::FreeHuge => "FreeHuge",
                };
                format!("[a |-> \"{a}\", p |-> {p}, c |-> {}]", c - base)
            }
            Kind::Bit { set, c, b } => {
                let a = if *set { "SetBit" } else { "ClearBit" };
                format!("[a |-> \"{a}\", p |-> {p}, c |-> {}, b |-> {b}]", c - base)
            }
            Kind::Commit(l) => format!("[a |-> \"Commit\", p |-> {p}, line |-> {}]", line_tla(*l, base, trees)),
            Kind::FreeBegin { c, b } => format!("[a |-> \"FreeBegin\", p |-> {p}, c |-> {}, b |-> {b}]", c - base),
            Kind::ReturnFree => format!("[a |-> \"Return\", p |-> {p}, r |-> <<>>]"),
            Kind::Return(a) => format!("[a |-> \"Return\", p |-> {p}, r |-> {}]", a.tla(base)),
            Kind::Failed => format!("[a |-> \"Failed\", p |-> {p}]"),
            Kind::Unknown(what) => format!("[a |-> \"Unknown\", p |-> {p}, what |-> {}]", tla_str(what)),
        }
    }

    /// The tree the step concerns, if it names a child or a line.
    fn tree(&self, shape: &Shape) -> Option<u32> {
        match *self {
            Kind::Entry { c, .. } | Kind::Bit { c, .. } | Kind::FreeBegin { c, .. } => shape.tree_of(c),
            Kind::Commit(Line::Bits(c)) => shape.tree_of(c),
            Kind::Commit(Line::Children(t)) => (t >= 1 && t <= shape.trees()).then_some(t),
            Kind::Return(a) => shape.tree_of(a.c),
            _ => None,
        }
    }

    fn begins(&self) -> bool {
        matches!(self, Kind::AllocBegin { .. } | Kind::FreeBegin { .. })
    }

    fn ends(&self) -> bool {
        matches!(self, Kind::ReturnFree | Kind::Return(_) | Kind::Failed)
    }
}

/// A line as TLA+, its number less the `base` children or `tree_base`
/// trees before the window's tree.
fn line_tla(l: Line, base: u32, tree_base: u32) -> String {
    match l {
        Line::Children(t) => format!("<<\"children\", {}>>", t - tree_base),
        Line::Bits(c) => format!("<<\"bits\", {}>>", c - base),
    }
}

/// The persistent state of one tree (and the allocations its callers
/// hold) as the steps so far left it: where a window of that tree starts.
struct TreeState {
    base: u32,
    /// Per child: free frames and the huge flag.
    entries: Vec<(u16, bool)>,
    /// Per child: its bit field.
    bits: Vec<[u64; 8]>,
    owned: BTreeSet<Alloc>,
}

impl TreeState {
    fn new(shape: &Shape, t: u32) -> TreeState {
        let n = shape.size(t) as usize;
        TreeState {
            base: shape.before(t),
            entries: vec![(CHILD_FRAMES as u16, false); n],
            bits: vec![[0; 8]; n],
            owned: BTreeSet::new(),
        }
    }

    fn apply(&mut self, k: &Kind) {
        let local = |c: u32| c.checked_sub(self.base + 1).map(|c| c as usize);
        match *k {
            Kind::Entry { c, new, .. } => {
                if let Some(e) = local(c).and_then(|i| self.entries.get_mut(i)) {
                    *e = ((new as u64 & COUNT_MASK) as u16, new as u64 & HUGE_FLAG != 0);
                }
            }
            Kind::Bit { set, c, b } => {
                if let Some(f) = local(c).and_then(|i| self.bits.get_mut(i)) {
                    let (w, m) = (b as usize / 64, 1u64 << (b % 64));
                    if set {
                        f[w] |= m
                    } else {
                        f[w] &= !m
                    }
                }
            }
            Kind::Return(a) => {
                self.owned.insert(a);
            }
            Kind::FreeBegin { c, b } if !self.owned.remove(&Alloc { c, b, huge: false }) => {
                self.owned.remove(&Alloc { c, b: 0, huge: true });
            }
            _ => {}
        }
    }

    /// The definitions of `TraceData` that give the window's first state.
    fn tla(&self) -> String {
        let mut s = String::from("StartChildren == <<");
        for (i, (free, huge)) in self.entries.iter().enumerate() {
            let sep = if i > 0 { ", " } else { "" };
            let _ = write!(s, "{sep}[free |-> {free}, huge |-> {}]", if *huge { "TRUE" } else { "FALSE" });
        }
        s.push_str(">>\nStartBits == <<");
        for (i, f) in self.bits.iter().enumerate() {
            let sep = if i > 0 { ", " } else { "" };
            let _ = write!(s, "{sep}{}", bit_set(f));
        }
        s.push_str(">>\nStartFree == ");
        let _ = write!(s, "{}", self.entries.iter().map(|e| e.0 as u64).sum::<u64>());
        s.push_str("\nStartOwned == {");
        for (i, a) in self.owned.iter().enumerate() {
            let sep = if i > 0 { ", " } else { "" };
            let _ = write!(s, "{sep}{}", a.tla(self.base));
        }
        s.push_str("}\n");
        s
    }
}

/// A bit field as a TLA+ set.
fn bit_set(f: &[u64; 8]) -> String {
    tla_set((0..512u64).filter(|&b| f[b as usize / 64] >> (b % 64) & 1 == 1))
}

/// Cuts the mapped steps into windows, each a behaviour of one tree (the
/// operations whose CASes land in it, and those that touch no tree, such
/// as an allocation that found nothing: every tree's window has them),
/// from the state the trace gives its tree at the window's start, cut
/// between operations (no operation of the tree in flight) once a window
/// has `window` steps. The trees' persistent words are disjoint and each
/// operation's CASes land in one tree; what couples them is the volatile
/// upper level, which the spec lets steal and reserve at will, so each
/// window starts with its tree unreserved and its counter the sum of its
/// children's.
fn cut(steps: &[LStep], shape: &Shape, window: usize, eadr: bool) -> Vec<Window> {
    const NONE: u32 = u32::MAX;
    // The operation of each step (per thread, from its begin to its end) and each operation's tree.
    let mut op_tree: Vec<Option<u32>> = Vec::new();
    let mut step_op = Vec::with_capacity(steps.len());
    let mut open: HashMap<u32, u32> = HashMap::new();
    for s in steps {
        if s.kind.begins() {
            open.insert(s.tid, op_tree.len() as u32);
            op_tree.push(None);
        }
        let op = open.get(&s.tid).copied().unwrap_or(NONE);
        if op != NONE && op_tree[op as usize].is_none() {
            op_tree[op as usize] = s.kind.tree(shape);
        }
        if s.kind.ends() {
            open.remove(&s.tid);
        }
        step_op.push(op);
    }
    let mut windows = Vec::new();
    for t in 1..=shape.trees() {
        let mut state = TreeState::new(shape, t);
        let trees_before = t - 1;
        let mut cutter = Cutter::new(window);
        let mut cpus = BTreeSet::new();
        let mut in_flight: HashSet<u32> = HashSet::new();
        for (i, s) in steps.iter().enumerate() {
            let op = step_op[i];
            let tree = if op != NONE { op_tree[op as usize] } else { s.kind.tree(shape) };
            if tree.is_some_and(|x| x != t) {
                continue;
            }
            if let Some(w) = cutter.cut(in_flight.is_empty()) {
                windows.push(finish(w, &mut cpus, shape, t, eadr));
            }
            let tla = match s.kind.tree(shape) {
                // A CAS of the operation in another tree than its first: no action of the spec does that.
                Some(x) if x != t => Kind::Unknown(
                    format!("{} in tree {x}, after the operation's CASes in tree {t}", s.kind.action()).into(),
                )
                .tla(s.tid, state.base, trees_before),
                _ => s.kind.tla(s.tid, state.base, trees_before),
            };
            cutter.push(i, tla, || state.tla());
            cpus.insert(s.tid);
            if op != NONE {
                if s.kind.ends() {
                    in_flight.remove(&op);
                } else {
                    in_flight.insert(op);
                }
            }
            state.apply(&s.kind);
        }
        if let Some(w) = cutter.take() {
            windows.push(finish(w, &mut cpus, shape, t, eadr));
        }
    }
    super::sort_windows(&mut windows);
    windows
}

/// The spec's constants for CPUs `cpus` and trees of `n` children.
fn constants(cpus: &BTreeSet<u32>, trees: u32, n: &str, eadr: bool) -> Vec<(String, String)> {
    let list: Vec<String> = cpus.iter().map(|c| c.to_string()).collect();
    [
        ("CPUs", format!("{{{}}}", list.join(", "))),
        ("Trees", trees.to_string()),
        ("N", n.to_string()),
        ("F", CHILD_FRAMES.to_string()),
        ("EADR", if eadr { "TRUE" } else { "FALSE" }.to_string()),
        ("FlushEach", "\"cas\"".to_string()),
        ("Variant", "\"ok\"".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// A window's constants and label, once its steps are known.
fn finish(mut w: Window, cpus: &mut BTreeSet<u32>, shape: &Shape, t: u32, eadr: bool) -> Window {
    w.constants = constants(cpus, 1, &shape.size(t).to_string(), eadr);
    cpus.clear();
    w.label = format!("tree {t} of {}, {} steps", shape.trees(), w.steps.len());
    w
}

#[derive(Clone, Copy, Default)]
struct Area {
    base: u64,
    len: u64,
}

impl Area {
    fn holds(&self, addr: u64) -> bool {
        self.len > 0 && addr >= self.base && addr < self.base + self.len
    }
}

#[derive(Default)]
struct Thread {
    /// The operation in flight: malloc (huge?) or free.
    op: Option<OpKind>,
    /// Modelled lines flushed and not yet fenced.
    flushed: Vec<u64>,
}

struct Mapper {
    children: Area,
    bits: Area,
    frames: Area,
    heap_base: u64,
    words: HashMap<u64, u64>,
    threads: HashMap<u32, Thread>,
    in_init: bool,
    started: bool,
    steps: Vec<LStep>,
}

fn lane(w: u64, k: u64) -> u64 {
    (w >> (16 * k)) & 0xffff
}

fn entry(l: u64) -> String {
    if l & HUGE_FLAG != 0 {
        format!("huge, {} free", l & COUNT_MASK)
    } else {
        format!("{} free", l & COUNT_MASK)
    }
}

impl Mapper {
    fn step(&mut self, event: u64, tid: u32, kind: Kind) {
        self.steps.push(LStep { event, tid, kind });
    }

    fn unknown(&mut self, event: u64, tid: u32, what: String) {
        self.step(event, tid, Kind::Unknown(what.into()));
    }

    /// The spec's allocation tuple of heap offset `off` (1-based children).
    fn frame_of(&self, off: u64) -> Option<(u64, u64)> {
        let addr = self.heap_base + off;
        self.frames.holds(addr).then(|| {
            let pfn = (addr - self.frames.base) / FRAME;
            (pfn / CHILD_FRAMES + 1, pfn % CHILD_FRAMES)
        })
    }

    fn store(&mut self, ev: u64, tid: u32, addr: u64, size: u32, value: Option<&[u8]>) -> Result<(), String> {
        if !self.children.holds(addr) && !self.bits.holds(addr) {
            return Ok(());
        }
        let v = match value {
            Some(b) if size == 8 && addr.is_multiple_of(8) => u64::from_le_bytes(b.try_into().expect("8 bytes")),
            Some(_) => {
                if self.started {
                    self.unknown(ev, tid, format!("a {size}-byte store at {addr:#x} inside LLFree's words"));
                }
                return Ok(());
            }
            None => return Err(
                "the trace was recorded without values (pmsim run --values): the mapping needs what each CAS stored"
                    .into(),
            ),
        };
        let old = self.words.insert(addr, v).unwrap_or(0);
        if self.in_init || !self.started {
            return Ok(());
        }
        if self.threads.get(&tid).and_then(|t| t.op).is_none() {
            self.unknown(ev, tid, format!("a store to LLFree's words at {addr:#x} outside any operation"));
            return Ok(());
        }
        if self.children.holds(addr) {
            for k in 0..4 {
                let (o, n) = (lane(old, k), lane(v, k));
                if o == n {
                    continue;
                }
                let c = (addr - self.children.base) / 8 * 4 + k + 1;
                let (of, nf, oh, nh) = (o & COUNT_MASK, n & COUNT_MASK, o & HUGE_FLAG != 0, n & HUGE_FLAG != 0);
                let change = if !oh && !nh && nf + 1 == of {
                    Change::Dec
                } else if !oh && !nh && nf == of + 1 {
                    Change::Inc
                } else if !oh && of == CHILD_FRAMES && nh && nf == 0 {
                    Change::LowerHuge
                } else if oh && of == 0 && !nh && nf == CHILD_FRAMES {
                    Change::FreeHuge
                } else {
                    self.unknown(ev, tid, format!("child {c}: entry {} -> {}", entry(o), entry(n)));
                    continue;
                };
                self.step(ev, tid, Kind::Entry { change, c: c as u32, old: o as u16, new: n as u16 });
            }
        } else {
            let rel = addr - self.bits.base;
            let c = rel / 64 + 1;
            let first = rel % 64 / 8 * 64;
            for (changed, set) in [(v & !old, true), (old & !v, false)] {
                let mut m = changed;
                while m != 0 {
                    let b = first + m.trailing_zeros() as u64;
                    m &= m - 1;
                    self.step(ev, tid, Kind::Bit { set, c: c as u32, b: b as u16 });
                }
            }
        }
        Ok(())
    }

    /// A modelled line: a tree's child entries, or a child's bit field.
    fn line(&self, line: u64) -> Line {
        if self.children.holds(line) {
            Line::Children(((line - self.children.base) / 64 + 1) as u32)
        } else {
            Line::Bits(((line - self.bits.base) / 64 + 1) as u32)
        }
    }

    fn event(&mut self, ev: u64, tid: u32, e: &Event<'_>) -> Result<(), String> {
        match *e {
            Event::RegionAdd { base, len, name, .. } => {
                let a = Area { base, len };
                match name {
                    "llfree children" => self.children = a,
                    "llfree bit fields" => self.bits = a,
                    "llfree frames" => self.frames = a,
                    _ => {}
                }
            }
            Event::Store { addr, size, value } | Event::NtStore { addr, size, value } => {
                self.store(ev, tid, addr, size, value)?
            }
            Event::Flush { line, .. } if self.started && (self.children.holds(line) || self.bits.holds(line)) => {
                let t = self.threads.entry(tid).or_default();
                if !t.flushed.contains(&line_of(line)) {
                    t.flushed.push(line_of(line));
                }
            }
            Event::Fence { kind } if kind != FenceKind::LockedRmw && self.started => {
                let lines = std::mem::take(&mut self.threads.entry(tid).or_default().flushed);
                for l in lines {
                    let line = self.line(l);
                    self.step(ev, tid, Kind::Commit(line));
                }
            }
            Event::OpBegin { op: OpKind::Init, .. } => self.in_init = true,
            Event::OpEnd { op: OpKind::Init, .. } => {
                self.in_init = false;
                self.start(ev)?;
            }
            Event::OpBegin { op: OpKind::Recovery, .. } if !self.started => {
                return Err(format!("event {ev}: the trace opens an existing zone; the mapping starts from a fresh one (pmsim run creates it)"));
            }
            Event::OpBegin { op, arg } if self.started => {
                let o = match op {
                    OpKind::Malloc if arg <= FRAME => Some(("base", OpKind::Malloc)),
                    OpKind::Malloc if arg <= CHILD_FRAMES * FRAME => Some(("huge", OpKind::Malloc)),
                    OpKind::Free => Some(("", OpKind::Free)),
                    OpKind::Malloc | OpKind::Close => None,
                    _ => {
                        self.unknown(ev, tid, format!("operation {op:?}: the mapping covers malloc and free"));
                        None
                    }
                };
                self.threads.entry(tid).or_default().op = o.map(|x| x.1);
                match o {
                    Some((size, OpKind::Malloc)) => self.step(ev, tid, Kind::AllocBegin { huge: size == "huge" }),
                    Some(_) => match self.frame_of(arg) {
                        Some((c, b)) => self.step(ev, tid, Kind::FreeBegin { c: c as u32, b: b as u16 }),
                        None => self.unknown(ev, tid, format!("free of offset {arg:#x}, not a frame")),
                    },
                    None => {}
                }
            }
            Event::OpEnd { result, .. } if self.started => {
                let Some(op) = self.threads.entry(tid).or_default().op.take() else { return Ok(()) };
                if op == OpKind::Free {
                    self.step(ev, tid, Kind::ReturnFree);
                } else if result == 0 {
                    self.step(ev, tid, Kind::Failed);
                } else {
                    match self.frame_of(result) {
                        Some((c, b)) => {
                            let huge = self
                                .words
                                .get(&(self.children.base + (c - 1) / 4 * 8))
                                .map(|w| lane(*w, (c - 1) % 4) & HUGE_FLAG != 0);
                            let huge = huge == Some(true) && b == 0;
                            self.step(ev, tid, Kind::Return(Alloc { c: c as u32, b: b as u16, huge }));
                        }
                        None => self.unknown(ev, tid, format!("malloc returned offset {result:#x}, not a frame")),
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// After the zone's creation: its words must be the spec's initial state.
    fn start(&mut self, ev: u64) -> Result<(), String> {
        if self.children.len == 0 || self.bits.len == 0 || self.frames.len == 0 {
            return Err(format!(
                "event {ev}: the zone was created without announcing its regions (llfree children, bit fields, frames)"
            ));
        }
        let nhuge = self.bits.len / 64;
        for c in 0..nhuge {
            let l = lane(self.words.get(&(self.children.base + c / 4 * 8)).copied().unwrap_or(0), c % 4);
            if l != CHILD_FRAMES {
                return Err(format!("event {ev}: after creation child {c} reads {}, not all free", entry(l)));
            }
        }
        if self.words.iter().any(|(a, v)| self.bits.holds(*a) && *v != 0) {
            return Err(format!("event {ev}: after creation a bit field has bits set"));
        }
        self.started = true;
        Ok(())
    }
}

/// Maps the LLFree trace at `path` (recorded with values) to `LLFreeSingleCAS`.
pub fn map(path: &str, window: usize) -> Result<Mapped, String> {
    let rd = TraceReader::open(path).map_err(|e| e.to_string())?;
    let h = rd.header().clone();
    if h.allocator.name != "llfree" {
        return Err(format!("{path}: a trace of {}, not of LLFree", h.allocator.name));
    }
    let eadr = h.allocator.params.get("eadr").and_then(|v| v.as_bool()).unwrap_or(false);
    let mut m = Mapper {
        children: Area::default(),
        bits: Area::default(),
        frames: Area::default(),
        heap_base: h.heap.base,
        words: HashMap::new(),
        threads: HashMap::new(),
        in_init: false,
        started: false,
        steps: Vec::new(),
    };
    super::feed(rd, path, |r| m.event(r.index, r.tid, &r.event))?;
    if !m.started {
        return Err(format!("{path}: the trace never creates an LLFree zone"));
    }
    let nhuge = m.bits.len / 64;
    if nhuge == 0 || nhuge > u32::MAX as u64 / 2 {
        return Err(format!("{path}: a zone of {nhuge} children"));
    }
    let shape = Shape { children: nhuge as u32 };
    let windows = cut(&m.steps, &shape, window.max(1), eadr);
    let steps: Vec<Step> = m
        .steps
        .iter()
        .map(|s| Step { event: s.event, tid: s.tid, action: s.kind.action(), tla: String::new() })
        .collect();
    let cpus: BTreeSet<u32> = m.steps.iter().map(|s| s.tid).collect();
    let sizes: Vec<String> = shape.sizes().map(|n| n.to_string()).collect();
    Ok(Mapped {
        spec: "LLFreeSingleCAS".into(),
        dir: "llfree-single-cas".into(),
        module: "LLFreeSingleCASTrace".into(),
        // For people: each window is one tree (Trees = 1, N its children).
        constants: constants(&cpus, shape.trees(), &sizes.join("/"), eadr),
        invariants: INVARIANTS.map(String::from).to_vec(),
        steps,
        windows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zone_of_95_children_is_trees_of_32_32_and_31() {
        let s = Shape { children: 95 };
        assert_eq!((s.trees(), s.sizes().collect::<Vec<_>>()), (3, vec![32, 32, 31]));
        assert_eq!(
            (s.tree_of(1), s.tree_of(32), s.tree_of(33), s.tree_of(95), s.tree_of(96)),
            (Some(1), Some(1), Some(2), Some(3), None)
        );
        assert_eq!(Shape { children: 3 }.sizes().collect::<Vec<_>>(), vec![3]);
    }

    #[test]
    fn a_bit_field_is_written_as_runs() {
        let mut f = [0u64; 8];
        assert_eq!(bit_set(&f), "{}");
        f[0] = 0b1011;
        f[7] = 1 << 63;
        assert_eq!(bit_set(&f), "(0..1) \\cup {3} \\cup {511}");
        assert_eq!(bit_set(&[u64::MAX; 8]), "(0..511)");
    }

    #[test]
    fn a_window_starts_from_the_state_the_steps_before_it_leave() {
        let shape = Shape { children: 35 };
        let step = |tid, kind| LStep { event: 0, tid, kind };
        let a = Alloc { c: 34, b: 0, huge: false };
        let steps = vec![
            step(1, Kind::AllocBegin { huge: false }),
            step(1, Kind::Entry { change: Change::Dec, c: 34, old: 512, new: 511 }),
            step(1, Kind::Commit(Line::Children(2))),
            step(1, Kind::Bit { set: true, c: 34, b: 0 }),
            step(1, Kind::Commit(Line::Bits(34))),
            step(1, Kind::Return(a)),
            step(2, Kind::AllocBegin { huge: false }),
            step(2, Kind::Failed),
        ];
        let w = cut(&steps, &shape, 4, false);
        // Tree 2's operation and then the failed allocation; tree 1 has only the failure.
        let labels: Vec<(usize, &str)> = w.iter().map(|w| (w.steps[0], w.label.as_str())).collect();
        assert_eq!(labels, vec![(0, "tree 2 of 2, 6 steps"), (6, "tree 1 of 2, 2 steps"), (6, "tree 2 of 2, 2 steps")]);
        assert_eq!(w[0].tla[1], "[a |-> \"DecCounter\", p |-> 1, c |-> 2]");
        assert_eq!(w[0].tla[2], "[a |-> \"Commit\", p |-> 1, line |-> <<\"children\", 1>>]");
        assert!(w[2]
            .start
            .contains("StartChildren == <<[free |-> 512, huge |-> FALSE], [free |-> 511, huge |-> FALSE]"));
        assert!(w[2].start.contains("StartBits == <<{}, {0}, {}>>") && w[2].start.contains("StartFree == 1535"));
        assert!(w[2].start.contains("StartOwned == {<<\"base\", 2, 0>>}"), "{}", w[2].start);
        assert_eq!(w[2].constants[0], ("CPUs".to_string(), "{2}".to_string()));
    }
}
