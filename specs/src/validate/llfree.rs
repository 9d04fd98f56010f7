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

use super::{tla_str, Mapped, Step};
use pmsim_traces::{line_of, Event, FenceKind, OpKind, TraceReader};
use std::collections::{BTreeSet, HashMap};

/// Base frames per child (a huge frame), 4 KiB each.
const CHILD_FRAMES: u64 = 512;
const FRAME: u64 = 4096;
/// Children per tree: one 64 B line of child entries (`lower.rs` TREE_CHILDREN).
const TREE_CHILDREN: u64 = 32;
/// Child entry lane: counter bits 0-9, huge flag bit 15 (`lower.rs` Child).
const COUNT_MASK: u64 = 0x3ff;
const HUGE_FLAG: u64 = 0x8000;

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
    steps: Vec<Step>,
    cpus: BTreeSet<u32>,
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
    fn step(&mut self, event: u64, tid: u32, action: String, tla: String) {
        self.cpus.insert(tid);
        self.steps.push(Step { event, tid, action, tla });
    }

    fn unknown(&mut self, event: u64, tid: u32, what: String) {
        let tla = format!("[a |-> \"Unknown\", p |-> {tid}, what |-> {}]", tla_str(&what));
        self.step(event, tid, format!("no action: {what}"), tla);
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
                let (name, a) = if !oh && !nh && nf + 1 == of {
                    ("LowerBase or DecAfterSet", "DecCounter")
                } else if !oh && !nh && nf == of + 1 {
                    ("IncCounter", "IncCounter")
                } else if !oh && of == CHILD_FRAMES && nh && nf == 0 {
                    ("LowerHuge", "LowerHuge")
                } else if oh && of == 0 && !nh && nf == CHILD_FRAMES {
                    ("FreeHuge", "FreeHuge")
                } else {
                    self.unknown(ev, tid, format!("child {c}: entry {} -> {}", entry(o), entry(n)));
                    continue;
                };
                self.step(
                    ev,
                    tid,
                    format!("{name}(child {c}: {} -> {})", entry(o), entry(n)),
                    format!("[a |-> \"{a}\", p |-> {tid}, c |-> {c}]"),
                );
            }
        } else {
            let rel = addr - self.bits.base;
            let c = rel / 64 + 1;
            let first = rel % 64 / 8 * 64;
            for (changed, name) in [(v & !old, "SetBit"), (old & !v, "ClearBit")] {
                let mut m = changed;
                while m != 0 {
                    let b = first + m.trailing_zeros() as u64;
                    m &= m - 1;
                    self.step(
                        ev,
                        tid,
                        format!("{name}(child {c}, bit {b})"),
                        format!("[a |-> \"{name}\", p |-> {tid}, c |-> {c}, b |-> {b}]"),
                    );
                }
            }
        }
        Ok(())
    }

    fn line_tla(&self, line: u64) -> String {
        if self.children.holds(line) {
            format!("<<\"children\", {}>>", (line - self.children.base) / 64 + 1)
        } else {
            format!("<<\"bits\", {}>>", (line - self.bits.base) / 64 + 1)
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
                    let lt = self.line_tla(l);
                    self.step(
                        ev,
                        tid,
                        format!("Commit(line {lt})"),
                        format!("[a |-> \"Commit\", p |-> {tid}, line |-> {lt}]"),
                    );
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
                    Some((size, OpKind::Malloc)) => self.step(
                        ev,
                        tid,
                        format!("AllocBegin({size})"),
                        format!("[a |-> \"AllocBegin\", p |-> {tid}, o |-> \"{size}\"]"),
                    ),
                    Some(_) => match self.frame_of(arg) {
                        Some((c, b)) => self.step(
                            ev,
                            tid,
                            format!("FreeBegin(child {c}, frame {b})"),
                            format!("[a |-> \"FreeBegin\", p |-> {tid}, c |-> {c}, b |-> {b}]"),
                        ),
                        None => self.unknown(ev, tid, format!("free of offset {arg:#x}, not a frame")),
                    },
                    None => {}
                }
            }
            Event::OpEnd { result, .. } if self.started => {
                let Some(op) = self.threads.entry(tid).or_default().op.take() else { return Ok(()) };
                if op == OpKind::Free {
                    self.step(ev, tid, "Return(free)".into(), format!("[a |-> \"Return\", p |-> {tid}, r |-> <<>>]"));
                } else if result == 0 {
                    self.step(ev, tid, "Failed (no frame)".into(), format!("[a |-> \"Failed\", p |-> {tid}]"));
                } else {
                    match self.frame_of(result) {
                        Some((c, b)) => {
                            let huge = self
                                .words
                                .get(&(self.children.base + (c - 1) / 4 * 8))
                                .map(|w| lane(*w, (c - 1) % 4) & HUGE_FLAG != 0);
                            let r = if huge == Some(true) && b == 0 {
                                format!("<<\"huge\", {c}>>")
                            } else {
                                format!("<<\"base\", {c}, {b}>>")
                            };
                            self.step(
                                ev,
                                tid,
                                format!("Return({r})"),
                                format!("[a |-> \"Return\", p |-> {tid}, r |-> {r}]"),
                            );
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
pub fn map(path: &str) -> Result<Mapped, String> {
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
        cpus: BTreeSet::new(),
    };
    super::feed(rd, path, |r| m.event(r.index, r.tid, &r.event))?;
    if !m.started {
        return Err(format!("{path}: the trace never creates an LLFree zone"));
    }
    let nhuge = m.bits.len / 64;
    let (trees, n) = if nhuge <= TREE_CHILDREN {
        (1, nhuge)
    } else if nhuge.is_multiple_of(TREE_CHILDREN) {
        (nhuge / TREE_CHILDREN, TREE_CHILDREN)
    } else {
        return Err(format!(
            "{path}: a zone of {nhuge} children; the spec's trees all have N children, so the zone must fill whole trees of {TREE_CHILDREN} (or be one tree)"
        ));
    };
    let cpus: Vec<String> = m.cpus.iter().map(|c| c.to_string()).collect();
    let constants = [
        ("CPUs", format!("{{{}}}", cpus.join(", "))),
        ("Trees", trees.to_string()),
        ("N", n.to_string()),
        ("F", CHILD_FRAMES.to_string()),
        ("EADR", if eadr { "TRUE" } else { "FALSE" }.to_string()),
        ("FlushEach", "\"cas\"".to_string()),
        ("Variant", "\"ok\"".to_string()),
    ];
    Ok(Mapped {
        spec: "LLFreeSingleCAS".into(),
        dir: "llfree-single-cas".into(),
        module: "LLFreeSingleCASTrace".into(),
        constants: constants.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        invariants: ["TypeOK", "NoFrameAllocatedTwice", "CountersInBounds", "NoAllocationStuck"]
            .map(String::from)
            .to_vec(),
        steps: m.steps,
    })
}
