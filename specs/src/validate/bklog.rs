//! The mapping of an NVAlloc trace to `BookkeepingLogGC`'s actions
//! (`bookkeeping-log-gc/BookkeepingLogGCTrace.tla` is its other half).
//!
//! NVAlloc-LOG keeps its bookkeeping log in one area whose place follows
//! from the configuration in the trace's header (`Layout::plan`) and whose
//! parts from `mech/bklog.rs` (`geometry`, the header and chunk-table
//! offsets). The mapper keeps the area's bytes (every store with its value)
//! from the heap's creation on and cuts the stores to it at the fences of the
//! thread issuing them:
//!
//! | events up to a fence | steps |
//! |---|---|
//! | stores to the log header line | `Write` of `hdr`: `[heads, alt]` |
//! | stores to a chunk's 16 B header (four share a line of the chunk table) or to its 1 KiB of records | `Write` of that chunk: `[id, next, active]` and the slots whose word changed, decoded with `mech/record.rs` (an extent by its first page, a tombstone by the (chunk id, slot) it names) |
//! | … the fence | the `Write` (a line counts as flushed when every cache line its stores hit was), then `Fence` |
//! | an append outside GC (`op_begin log_gc` brackets GC) | `BeginAlloc` / `BeginFree` of the extent, placed before the append's first `Write` once its record shows which |
//!
//! Chunk index i is the spec's chunk i + 1. Which action a step is (a new
//! chunk, its link, the record itself, a fast GC unlink, a slow GC's build
//! and flip, a fence) the trace specification decides from the values.

use super::{tla_str, Cutter, Mapped, Step, Window};
use pmsim_model::mech::bklog::{
    geometry, LogPos, CHUNK_BYTES, CHUNK_HEADER_BYTES, CHUNK_LINES, CHUNK_RECORDS, OFF_ALT, OFF_HEADS, TABLE_OFF,
};
use pmsim_model::mech::record::{Record, PAGE};
use pmsim_model::nvalloc::layout::Layout;
use pmsim_model::nvalloc::NvAllocConfig;
use pmsim_traces::{line_of, Event, FenceKind, OpKind, TraceReader};
use std::collections::{BTreeSet, HashMap};

/// A modelled line: the log header, or chunk index i.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Line {
    Hdr,
    Chunk(u32),
}

#[derive(Default)]
struct Group {
    /// Stores into the log area (relative offset, size) since the last fence.
    stores: Vec<(u64, u64)>,
    /// Relative cache lines flushed since the last fence.
    flushed: BTreeSet<u64>,
}

fn u32_at(b: &[u8], o: u64) -> u32 {
    u32::from_le_bytes(b[o as usize..o as usize + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], o: u64) -> u64 {
    u64::from_le_bytes(b[o as usize..o as usize + 8].try_into().expect("8 bytes"))
}

struct Mapper {
    /// The log area (absolute) and its bytes now and as of the last fence
    /// that wrote them.
    base: u64,
    img: Vec<u8>,
    seen: Vec<u8>,
    nchunks: u32,
    chunks_start: u64,
    started: bool,
    groups: HashMap<u32, Group>,
    /// Per thread: depth of `log_gc` operations, and where its append began.
    in_gc: HashMap<u32, u32>,
    begin_at: HashMap<u32, (usize, u64)>,
    /// (chunk id, slot) -> the extent whose record is there.
    at: HashMap<(u64, u32), u64>,
    extents: BTreeSet<u64>,
    max_id: u64,
    steps: Vec<Step>,
    /// Lines whose last write was not flushed.
    dirty: BTreeSet<Line>,
    /// The windows: the one being filled, the steps fed to it so far (those
    /// before the last quiet point, final), the state the next one starts
    /// from, and those done.
    cutter: Cutter,
    fed: usize,
    next_start: Option<String>,
    windows: Vec<Window>,
}

impl Mapper {
    fn header_off(&self, idx: u32) -> u64 {
        TABLE_OFF + idx as u64 * CHUNK_HEADER_BYTES
    }

    fn slot_off(&self, idx: u32, slot: u32) -> u64 {
        self.chunks_start + idx as u64 * CHUNK_BYTES + slot as u64 * 8
    }

    /// The modelled line the relative offset `o` lies on.
    fn line(&self, o: u64) -> Option<Line> {
        let n = self.nchunks as u64;
        if o < 64 {
            Some(Line::Hdr)
        } else if o >= TABLE_OFF && o < TABLE_OFF + n * CHUNK_HEADER_BYTES {
            Some(Line::Chunk(((o - TABLE_OFF) / CHUNK_HEADER_BYTES) as u32))
        } else if o >= self.chunks_start && o < self.chunks_start + n * CHUNK_BYTES {
            Some(Line::Chunk(((o - self.chunks_start) / CHUNK_BYTES) as u32))
        } else {
            None
        }
    }

    fn line_tla(l: Line) -> String {
        match l {
            Line::Hdr => "<<\"hdr\", 0>>".into(),
            Line::Chunk(i) => format!("<<\"chunk\", {}>>", i + 1),
        }
    }

    /// A record word as the spec's record, with a description.
    fn rec_tla(w: u64) -> (String, String) {
        match Record::decode(w) {
            Ok(None) => ("[t |-> \"none\"]".into(), "empty".into()),
            Ok(Some(Record::Extent { addr, .. })) => {
                (format!("[t |-> \"ext\", e |-> {}]", addr / PAGE), format!("extent {}", addr / PAGE))
            }
            Ok(Some(Record::Tombstone { target })) => {
                let p = LogPos::from_raw(target);
                let g = format!("<<{}, {}>>", p.id(), p.slot());
                (format!("[t |-> \"tomb\", tgt |-> {g}, g |-> {g}]"), format!("tombstone of {g}"))
            }
            Err(e) => (format!("[t |-> {}]", tla_str(&e)), e),
        }
    }

    fn store(&mut self, tid: u32, addr: u64, size: u32, value: Option<&[u8]>) -> Result<(), String> {
        let end = self.base + self.img.len() as u64;
        if addr + size as u64 <= self.base || addr >= end {
            return Ok(());
        }
        let Some(v) = value else {
            return Err(
                "the trace was recorded without values (pmsim run --values): the mapping needs what each store wrote"
                    .into(),
            );
        };
        for (k, byte) in v.iter().enumerate() {
            let at = addr + k as u64;
            if at >= self.base && at < end {
                self.img[(at - self.base) as usize] = *byte;
            }
        }
        if self.started {
            self.groups.entry(tid).or_default().stores.push((addr.saturating_sub(self.base), size as u64));
        }
        Ok(())
    }

    fn fence(&mut self, ev: u64, tid: u32) {
        let g = std::mem::take(self.groups.entry(tid).or_default());
        let written = super::lines_written(&g.stores, |x| self.line(x));
        if written.is_empty() {
            return;
        }
        let mut w = Vec::new();
        let mut f = Vec::new();
        let mut what = Vec::new();
        let mut appended = None;
        for (&l, lines) in &written {
            let flushed = lines.is_subset(&g.flushed);
            if flushed {
                f.push(Mapper::line_tla(l));
                self.dirty.remove(&l);
            } else {
                self.dirty.insert(l);
            }
            let (tla, desc) = match l {
                Line::Hdr => {
                    let (h0, h1, alt) =
                        (u64_at(&self.img, OFF_HEADS), u64_at(&self.img, OFF_HEADS + 8), u64_at(&self.img, OFF_ALT));
                    (
                        format!("[heads |-> <<{h0}, {h1}>>, alt |-> {alt}]"),
                        format!("log header heads {h0} {h1}, alt {alt}"),
                    )
                }
                Line::Chunk(idx) => {
                    let h = self.header_off(idx);
                    let (id, next, active) =
                        (u64_at(&self.img, h), u32_at(&self.img, h + 8), u32_at(&self.img, h + 12));
                    self.max_id = self.max_id.max(id);
                    let mut recs = Vec::new();
                    let mut descs = Vec::new();
                    for slot in 0..CHUNK_RECORDS {
                        let o = self.slot_off(idx, slot);
                        let (now, was) = (u64_at(&self.img, o), u64_at(&self.seen, o));
                        if now == was {
                            continue;
                        }
                        let (r, d) = Mapper::rec_tla(now);
                        recs.push(format!("<<{slot}, {r}>>"));
                        descs.push(format!("slot {slot} {d}"));
                        match Record::decode(now) {
                            Ok(Some(Record::Extent { addr, .. })) => {
                                self.at.insert((id, slot), addr / PAGE);
                                self.extents.insert(addr / PAGE);
                                appended = Some(("BeginAlloc", addr / PAGE));
                            }
                            Ok(Some(Record::Tombstone { target })) => {
                                let p = LogPos::from_raw(target);
                                if let Some(&e) = self.at.get(&(p.id(), p.slot())) {
                                    appended = Some(("BeginFree", e));
                                }
                            }
                            _ => {}
                        }
                    }
                    if descs.len() > 4 {
                        let n = descs.len();
                        descs.truncate(3);
                        descs.push(format!("... ({n} slots)"));
                    }
                    (
                        format!(
                            "[id |-> {id}, next |-> {next}, active |-> {active}, recs |-> {{{}}}]",
                            recs.join(", ")
                        ),
                        format!("chunk {} {{id {id}, next {next}, active {active}}} {}", idx + 1, descs.join(", ")),
                    )
                }
            };
            w.push(format!("({} :> {tla})", Mapper::line_tla(l)));
            what.push(format!("{desc}{}", if flushed { "" } else { " (not flushed)" }));
        }
        // What this fence made the mapper's picture of the written bytes.
        for &(o, n) in &g.stores {
            let (s, e) = (o as usize, (o + n).min(self.img.len() as u64) as usize);
            self.seen[s..e].copy_from_slice(&self.img[s..e]);
        }
        let gc = self.in_gc.get(&tid).copied().unwrap_or(0) > 0;
        if !gc {
            let (at, first_ev) = *self.begin_at.entry(tid).or_insert((self.steps.len(), ev));
            // One slot written outside GC: the append's record or tombstone.
            if let Some((a, e)) = appended {
                self.begin_at.remove(&tid);
                self.steps.insert(
                    at,
                    Step {
                        event: first_ev,
                        tid,
                        action: format!("{a}(extent {e})"),
                        tla: format!("[a |-> \"{a}\", p |-> {tid}, e |-> {e}]"),
                    },
                );
            }
        }
        super::push_write_fence(&mut self.steps, ev, tid, &what, &w, &f);
        if self.quiet() {
            self.feed();
            if let Some(w) = self.cutter.cut(true) {
                self.windows.push(w);
                self.next_start = Some(self.start_tla());
            }
        }
    }

    /// No append or GC in flight and every line written flushed: the spec's
    /// state follows from the image (see `map`).
    fn quiet(&self) -> bool {
        self.dirty.is_empty() && self.begin_at.is_empty() && self.in_gc.values().all(|&d| d == 0)
    }

    /// Hands the steps since the last quiet point (final now: an append's
    /// begin step is placed before its writes) to the window being filled.
    fn feed(&mut self) {
        for k in self.fed..self.steps.len() {
            let tla = std::mem::take(&mut self.steps[k].tla);
            let start = &mut self.next_start;
            self.cutter.push(k, tla, || start.take().unwrap_or_default());
        }
        self.fed = self.steps.len();
    }

    /// The definitions of `TraceData` that give a window's first state: the
    /// log's lines as the steps so far left them, and the next chunk id.
    fn start_tla(&self) -> String {
        let (h0, h1, alt) =
            (u64_at(&self.seen, OFF_HEADS), u64_at(&self.seen, OFF_HEADS + 8), u64_at(&self.seen, OFF_ALT));
        let mut s = format!(
            "StartHdr == [heads |-> <<{h0}, {h1}>>, alt |-> {alt}]\nStartNoRecs == [s \\in 0..{} |-> [t |-> \"none\"]]\nStartChunks == <<",
            CHUNK_RECORDS - 1
        );
        for idx in 0..self.nchunks {
            let h = self.header_off(idx);
            let (id, next, active) = (u64_at(&self.seen, h), u32_at(&self.seen, h + 8), u32_at(&self.seen, h + 12));
            let recs: Vec<String> = (0..CHUNK_RECORDS)
                .filter_map(|slot| {
                    let w = u64_at(&self.seen, self.slot_off(idx, slot));
                    (w != 0).then(|| format!("({slot} :> {})", Mapper::rec_tla(w).0))
                })
                .collect();
            let rec =
                if recs.is_empty() { "StartNoRecs".into() } else { format!("{} @@ StartNoRecs", recs.join(" @@ ")) };
            let sep = if idx > 0 { ",\n  " } else { "" };
            s.push_str(&format!("{sep}[id |-> {id}, next |-> {next}, active |-> {active}, rec |-> {rec}]"));
        }
        s.push_str(&format!(">>\nStartNextId == {}\n", self.max_id + 1));
        s
    }

    /// After the heap's creation: the log must be the spec's initial state.
    fn start(&mut self, ev: u64) -> Result<(), String> {
        let (h0, h1, alt) =
            (u64_at(&self.img, OFF_HEADS), u64_at(&self.img, OFF_HEADS + 8), u64_at(&self.img, OFF_ALT));
        if (h0, h1, alt) != (0, 0, 0) || self.img[TABLE_OFF as usize..].iter().any(|&b| b != 0) {
            return Err(format!("event {ev}: after the heap's creation the bookkeeping log is not empty"));
        }
        self.seen.copy_from_slice(&self.img);
        self.groups.clear();
        self.started = true;
        self.next_start = Some(self.start_tla());
        Ok(())
    }

    fn event(&mut self, ev: u64, tid: u32, e: &Event<'_>) -> Result<(), String> {
        match *e {
            Event::Store { addr, size, value } | Event::NtStore { addr, size, value } => {
                self.store(tid, addr, size, value)?
            }
            Event::Flush { line, .. }
                if self.started && line >= self.base && line < self.base + self.img.len() as u64 =>
            {
                self.groups.entry(tid).or_default().flushed.insert(line_of(line) - self.base);
            }
            Event::Fence { kind } if kind != FenceKind::LockedRmw && self.started => self.fence(ev, tid),
            Event::OpEnd { op: OpKind::Init, .. } if !self.started => self.start(ev)?,
            Event::OpBegin { op: OpKind::Recovery, .. } => {
                return Err(format!(
                    "event {ev}: a recovery; the mapping starts from a new heap and follows runs without crashes"
                ));
            }
            Event::OpBegin { op: OpKind::LogGc, .. } => *self.in_gc.entry(tid).or_default() += 1,
            Event::OpEnd { op: OpKind::LogGc, .. } => {
                let d = self.in_gc.entry(tid).or_default();
                *d = d.saturating_sub(1);
            }
            _ => {}
        }
        Ok(())
    }
}

/// Maps the NVAlloc trace at `path` (recorded with values, from a new heap)
/// to `BookkeepingLogGC`, in windows of about `window` steps.
///
/// The log is one part (a GC moves records between chunks and every append
/// goes to the tail), so windows follow one another: a window is cut where
/// the log is quiet, at the end of an append or a GC with every line it
/// wrote flushed. There the spec's state follows from the image: nothing
/// is queued (the lines are durable as written), no append or GC is in
/// flight, and the volatile log (the list in id order, each chunk's fill,
/// live records and the tombstones that cancel records of other chunks, the
/// free chunks, each extent's record) is exactly what the spec's recovery
/// rebuilds from that image (`RecoveredLog`), but for the next chunk id,
/// which the mapper counts (the largest id any step wrote, plus one). A
/// window starts there (`InitFrom` of the trace specification); the first
/// step outside the spec in the trace's order is the answer.
pub fn map(path: &str, window: usize) -> Result<Mapped, String> {
    let rd = TraceReader::open(path).map_err(|e| e.to_string())?;
    let h = rd.header().clone();
    let cfg: NvAllocConfig = serde_json::from_value(serde_json::Value::Object(h.allocator.params.clone()))
        .map_err(|e| format!("{path}: the trace header's NVAlloc configuration: {e}"))?;
    if !cfg.bookkeeping_log {
        return Err(format!(
            "{path}: this NVAlloc keeps extent headers, not a bookkeeping log (bookkeeping_log = false)"
        ));
    }
    let layout = Layout::plan(h.heap.size, &cfg).map_err(|e| format!("{path}: {e}"))?;
    let (nchunks, chunks_start) = geometry(layout.log_bytes);
    let mut m = Mapper {
        base: h.heap.base + layout.log_off,
        img: vec![0; layout.log_bytes as usize],
        seen: vec![0; layout.log_bytes as usize],
        nchunks,
        chunks_start,
        started: false,
        groups: HashMap::new(),
        in_gc: HashMap::new(),
        begin_at: HashMap::new(),
        at: HashMap::new(),
        extents: BTreeSet::new(),
        max_id: 0,
        steps: Vec::new(),
        dirty: BTreeSet::new(),
        cutter: Cutter::new(window),
        fed: 0,
        next_start: None,
        windows: Vec::new(),
    };
    super::feed(rd, path, |r| m.event(r.index, r.tid, &r.event))?;
    if !m.started {
        return Err(format!("{path}: the trace never creates an NVAlloc heap"));
    }
    m.feed();
    let mut windows = m.windows;
    windows.extend(m.cutter.take());
    let extents: Vec<String> = m.extents.iter().map(|e| e.to_string()).collect();
    let constants = [
        ("NChunks", nchunks.to_string()),
        ("K", CHUNK_RECORDS.to_string()),
        ("Interleave", if cfg.interleaved_log { CHUNK_LINES } else { 0 }.to_string()),
        ("Extents", format!("{{{}}}", extents.join(", "))),
        ("MaxId", m.max_id.max(1).to_string()),
        ("Variant", "\"ok\"".to_string()),
    ];
    let constants: Vec<(String, String)> = constants.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    for w in &mut windows {
        w.constants = constants.clone();
        w.label = format!("the log from step {}, {} steps", w.steps[0] + 1, w.steps.len());
    }
    Ok(Mapped {
        spec: "BookkeepingLogGC".into(),
        dir: "bookkeeping-log-gc".into(),
        module: "BookkeepingLogGCTrace".into(),
        constants,
        invariants: ["TypeOK", "DurableIsReplayOfAltList", "NoReuseOfReachableChunk", "NoStaleTombstoneCancels"]
            .map(String::from)
            .to_vec(),
        steps: m.steps,
        windows,
    })
}
