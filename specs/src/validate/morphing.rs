//! The mapping of an NVAlloc trace to `SlabMorphing`'s actions
//! (`slab-morphing/SlabMorphingTrace.tla` is its other half).
//!
//! The spec is the life of one slab through one morph, so the mapping
//! follows every slab the trace creates (from the `nvalloc slab` marker its
//! `init_header` announces to the `nvalloc slab freed` marker of its return
//! to the large allocator, or the end of the trace), and cuts its life at
//! each morph after the first into *segments*, each a life the spec models:
//! the slab's class when the segment begins is the spec's "A", the one its
//! morph makes it "B", and the constants are the code's geometry of both in
//! bytes (`nvalloc::slab_geometry` of the configuration in the trace's
//! header) and the morph's table. Only segments with a morph are checked
//! unless `all` is asked for (the others are mallocs and frees of one
//! class: bitmap writes, each persisted).
//!
//! The mapper keeps each slab's bytes (every store with its value) and cuts
//! the stores the slab's header line, bitmap lines and index-table lines
//! receive at the fences of the thread issuing them:
//!
//! | events up to a fence | steps |
//! |---|---|
//! | stores to the header / bitmap / table lines, flushes of them, the fence | `Write` (each written line's new value: header `[cls, ocls, flag, ilen]`, bitmap as the blocks whose bits it sets and clears, table as its entries; the written lines flushed), then `Fence` |
//!
//! The trace specification decides which action a step is (`Malloc`, `Free`,
//! `FreeOld`, `FinishMorph`, a morph step, a fence or nothing), so a wrong
//! value, a missing flush or a step out of order leaves the spec right there.
//! Where the table lies is read from the header at the fence (step 2 stores
//! the entries before the header naming them). Locked RMWs are not fences
//! (their stores are the bitmap CASes; the flush and fence follow).
//!
//! # Windows
//!
//! A segment is checked in windows of about `window` steps, each from the
//! state the trace gives the slab at the window's start. Slabs share no
//! persistent line (header, bitmap and table lie inside the slab's 64 KiB)
//! and the spec's volatile state (the vslab's taken blocks, `cnt_slab`,
//! `cnt_block`, the blocks the user holds) is the slab's own, so one slab's
//! behaviour says nothing about another's: each segment is a behaviour of
//! its own. Inside a segment, a window is cut only where the slab is
//! *quiet*: every line written since the segment began was flushed by its
//! last write (the spec's queues are empty, so the lines' values are both
//! the volatile and the durable image), no morph is under way (the header's
//! flag is 0) and no `finish_morph` is due (a slab_in whose table still has
//! a live entry). There the spec's whole state is a function of the image,
//! the one its recovery rebuilds (`Rebuild`): the taken blocks are the
//! bitmap's and those the live old blocks and the table hold back, the
//! counters are `Morph::build`'s of the live entries, the user holds what
//! the image has allocated, and the phase is the header's. The trace
//! specification's `TraceInit` starts there from `StartImg` (the header,
//! bitmap and table as the steps before the window left them); a window
//! that starts where an earlier window would have left the spec is skipped,
//! so the answer is the first step outside the spec in the trace's order.

use super::{tla_str, Cutter, Mapped, Step, Window};
use pmsim_model::mech::stripe::StripeMap;
use pmsim_model::nvalloc::layout::SLAB;
use pmsim_model::nvalloc::slab::{SlabGeom, BITMAP_OFF, INDEX_LIVE, SLAB_FREED_MARKER, SLAB_MARKER};
use pmsim_model::nvalloc::{slab_geometry, NvAllocConfig};
use pmsim_traces::{line_of, Event, FenceKind, OpKind, TraceReader};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The slab header fields the spec models (`slab.rs` SlabHeader offsets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Hdr {
    class: u16,
    old_class: u16,
    flag: u64,
    index_len: u32,
    index_off: u32,
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

impl Hdr {
    fn read(img: &[u8]) -> Hdr {
        Hdr {
            class: u16_at(img, 4),
            old_class: u16_at(img, 6),
            flag: u64_at(img, 16),
            index_len: u32_at(img, 32),
            index_off: u32_at(img, 36),
        }
    }
}

/// The modelled lines of the slab.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Line {
    Hdr,
    Bm,
    Tbl,
}

impl Line {
    fn name(self) -> &'static str {
        match self {
            Line::Hdr => "hdr",
            Line::Bm => "bm",
            Line::Tbl => "tbl",
        }
    }
}

#[derive(Default)]
struct Group {
    /// Stores to followed slabs (address, size) since the last fence.
    stores: Vec<(u64, u64)>,
    /// Cache lines of followed slabs flushed since the last fence.
    flushed: BTreeSet<u64>,
}

/// The code's slab geometry of every class.
struct Geo {
    geoms: Vec<SlabGeom>,
    map: StripeMap,
}

impl Geo {
    /// Bitmap bytes of a class's blocks.
    fn area(&self, c: u16) -> u64 {
        self.geoms.get(c as usize).map_or(0, |g| self.map.area_bytes(g.nblocks) as u64)
    }
}

/// A part of a slab's life the spec models: its classes and its morph.
#[derive(Default)]
struct Segment {
    a: Option<u16>,
    b: Option<u16>,
    /// Its morph has begun.
    morphed: bool,
    /// Live old blocks and table offset of its morph (for the constants).
    morph_live: Option<(u32, u32)>,
    /// Its windows, which take their constants at its end.
    windows: Vec<Window>,
}

/// A slab followed from its creation.
struct Slab {
    /// Absolute address and bytes.
    base: u64,
    img: Vec<u8>,
    /// Its init_header has not reached a fence yet.
    init: bool,
    seg: Segment,
    /// The index table once a morph has written one: offset and entries.
    table: Option<(u32, u32)>,
    /// The modelled values as of its last step: where a window starts.
    hdr_seen: Hdr,
    bm_seen: BTreeSet<u32>,
    /// The bitmap's bytes as of its last step (the area of the classes seen).
    bm_img: Vec<u8>,
    tbl_seen: String,
    /// Live entries of `tbl_seen`.
    live_seen: usize,
    /// Lines whose last write was not flushed.
    dirty: BTreeSet<Line>,
    cut: Cutter,
}

impl Slab {
    fn new(base: u64, window: usize) -> Slab {
        let zero = Hdr { class: 0, old_class: 0, flag: 0, index_len: 0, index_off: 0 };
        Slab {
            base,
            img: vec![0; SLAB as usize],
            init: true,
            seg: Segment::default(),
            table: None,
            hdr_seen: zero,
            bm_seen: BTreeSet::new(),
            bm_img: Vec::new(),
            tbl_seen: "<<>>".into(),
            live_seen: 0,
            dirty: BTreeSet::new(),
            cut: Cutter::new(window),
        }
    }

    fn class_name(&self, c: u16) -> String {
        if Some(c) == self.seg.a {
            "\"A\"".into()
        } else if Some(c) == self.seg.b {
            "\"B\"".into()
        } else {
            format!("\"class {c}\"")
        }
    }

    fn hdr_tla(&self, h: &Hdr) -> String {
        format!(
            "[cls |-> {}, ocls |-> {}, flag |-> {}, ilen |-> {}]",
            self.class_name(h.class),
            self.class_name(h.old_class),
            h.flag,
            h.index_len
        )
    }

    /// The bitmap lines: the area of the larger of the two classes seen.
    fn bm_bytes(&self, g: &Geo) -> u64 {
        [self.seg.a, self.seg.b].into_iter().flatten().map(|c| g.area(c)).max().unwrap_or(0)
    }

    fn bm_set(&self, g: &Geo) -> BTreeSet<u32> {
        let mut out = BTreeSet::new();
        for w in (0..self.bm_bytes(g)).step_by(8) {
            let mut v = u64_at(&self.img, (BITMAP_OFF + w) as usize);
            while v != 0 {
                let bit = (w * 8) as u32 + v.trailing_zeros();
                v &= v - 1;
                out.insert(g.map.block_of(bit));
            }
        }
        out
    }

    /// The blocks a step's `stores` set and cleared, as a change of the set
    /// as of the last step that wrote the bitmap (what the spec's bitmap
    /// holds if that step matched): the words stored to, against their
    /// bytes as of that step; the whole bitmap when its area has grown (a
    /// second class seen).
    fn bm_change(&mut self, g: &Geo, stores: &[(u64, u64)]) -> (Vec<u32>, Vec<u32>) {
        let bytes = self.bm_bytes(g);
        let area = |img: &[u8]| img[BITMAP_OFF as usize..(BITMAP_OFF + bytes) as usize].to_vec();
        if bytes as usize != self.bm_img.len() {
            let bm = self.bm_set(g);
            let add = bm.difference(&self.bm_seen).copied().collect();
            let del = self.bm_seen.difference(&bm).copied().collect();
            self.bm_seen = bm;
            self.bm_img = area(&self.img);
            return (add, del);
        }
        let (mut add, mut del) = (BTreeSet::new(), BTreeSet::new());
        for &(o, n) in stores {
            let (lo, hi) = (o.max(BITMAP_OFF) - BITMAP_OFF, (o + n).min(BITMAP_OFF + bytes).saturating_sub(BITMAP_OFF));
            let mut w = lo / 8 * 8;
            while w < hi && w + 8 <= bytes {
                let (old, new) = (u64_at(&self.bm_img, w as usize), u64_at(&self.img, (BITMAP_OFF + w) as usize));
                for (mut bits, to) in [(new & !old, &mut add), (old & !new, &mut del)] {
                    while bits != 0 {
                        to.insert(g.map.block_of((w * 8) as u32 + bits.trailing_zeros()));
                        bits &= bits - 1;
                    }
                }
                self.bm_img[w as usize..w as usize + 8].copy_from_slice(&new.to_le_bytes());
                w += 8;
            }
        }
        for b in &add {
            self.bm_seen.insert(*b);
        }
        for b in &del {
            self.bm_seen.remove(b);
        }
        (add.into_iter().collect(), del.into_iter().collect())
    }

    /// The index table as TLA+, and how many of its entries are live.
    fn tbl_tla(&self) -> (String, usize) {
        let Some((off, n)) = self.table else { return ("<<>>".into(), 0) };
        let mut live = 0;
        let entries: Vec<String> = (0..n)
            .map(|k| {
                let e = u16_at(&self.img, off as usize + 2 * k as usize);
                live += usize::from(e & INDEX_LIVE != 0);
                format!("[ob |-> {}, live |-> {}]", e & !INDEX_LIVE, if e & INDEX_LIVE != 0 { "TRUE" } else { "FALSE" })
            })
            .collect();
        (format!("<<{}>>", entries.join(", ")), live)
    }

    /// Which modelled line the slab-relative offset `o` lies on, if any.
    fn line(&self, g: &Geo, o: u64) -> Option<Line> {
        if o < 64 {
            Some(Line::Hdr)
        } else if o >= BITMAP_OFF && o < BITMAP_OFF + self.bm_bytes(g) {
            Some(Line::Bm)
        } else {
            match self.table {
                Some((off, _)) if o >= off as u64 => Some(Line::Tbl),
                _ => None,
            }
        }
    }

    /// Nothing of the slab in flight (see the module doc): a window may start here.
    fn quiet(&self) -> bool {
        self.dirty.is_empty() && self.hdr_seen.flag == 0 && (self.hdr_seen.index_len == 0 || self.live_seen > 0)
    }

    /// The definitions of `TraceData` that give a window's first state.
    fn start_tla(&self) -> String {
        let bm = super::tla_set(self.bm_seen.iter().map(|&b| b as u64));
        format!("StartImg == [hdr |-> {}, bm |-> {bm}, tbl |-> {}]\n", self.hdr_tla(&self.hdr_seen), self.tbl_seen)
    }

    /// The stores (slab-relative offset, size) and flushed lines of one
    /// fence of thread `tid` at event `ev`: a Write and a Fence step.
    fn fence(
        &mut self,
        g: &Geo,
        ev: u64,
        tid: u32,
        stores: &[(u64, u64)],
        flushed_lines: &BTreeSet<u64>,
        steps: &mut Vec<Step>,
    ) -> Result<(), String> {
        let h = Hdr::read(&self.img);
        if self.init {
            self.seg.a = Some(h.class);
            let bm = self.bm_set(g);
            if h.old_class != h.class || h.flag != 0 || h.index_len != 0 || !bm.is_empty() {
                return Err(format!(
                    "event {ev}: the slab at {:#x} after init_header is not a regular empty slab ({h:?}, {} bits set)",
                    self.base,
                    bm.len()
                ));
            }
            self.init = false;
            self.hdr_seen = h;
            return Ok(());
        }
        for c in [h.class, h.old_class] {
            if Some(c) != self.seg.a && self.seg.b.is_none() {
                self.seg.b = Some(c);
            }
        }
        if h.flag == 2 || h.index_len > 0 {
            if self.table.is_none() {
                let n = h.index_len;
                self.table = Some((h.index_off, n));
                self.seg.morph_live.get_or_insert((n, h.index_off));
            }
        } else if h.flag == 0 && self.table.is_some() && h.index_len == 0 {
            // slab_after (or an undone morph): the table is gone.
            self.table = None;
        }
        let written = super::lines_written(stores, |x| self.line(g, x));
        if written.is_empty() {
            return Ok(());
        }
        let flushed: BTreeSet<Line> =
            written.iter().filter(|(_, ls)| ls.is_subset(flushed_lines)).map(|(&l, _)| l).collect();
        if let Some(w) = self.cut.cut(self.quiet()) {
            self.seg.windows.push(w);
        }
        let mut start = (self.cut.len() == 0).then(|| self.start_tla());
        let mut w = Vec::new();
        let mut what = Vec::new();
        for &l in written.keys() {
            let (tla, desc) = match l {
                Line::Hdr => {
                    self.hdr_seen = h;
                    (
                        self.hdr_tla(&h),
                        format!(
                            "header {{class {}, old {}, flag {}, index_len {}}}",
                            self.class_name(h.class).trim_matches('"'),
                            self.class_name(h.old_class).trim_matches('"'),
                            h.flag,
                            h.index_len
                        ),
                    )
                }
                Line::Bm => {
                    let (add, del) = self.bm_change(g, stores);
                    let list = |v: &[u32], sign: &str| v.iter().map(|b| format!("{sign}{b}")).collect::<Vec<_>>();
                    let d = format!("bitmap {}", [list(&add, "+"), list(&del, "-")].concat().join(" "));
                    let set = |v: &[u32]| v.iter().map(|b| b.to_string()).collect::<Vec<_>>().join(", ");
                    (format!("[add |-> {{{}}}, del |-> {{{}}}]", set(&add), set(&del)), d.trim_end().to_string())
                }
                Line::Tbl => {
                    let (t, live) = self.tbl_tla();
                    self.tbl_seen = t.clone();
                    self.live_seen = live;
                    (t.clone(), format!("index table {t}"))
                }
            };
            w.push(format!("({} :> {tla})", tla_str(l.name())));
            if flushed.contains(&l) {
                self.dirty.remove(&l);
                what.push(desc);
            } else {
                self.dirty.insert(l);
                what.push(format!("{desc} (not flushed)"));
            }
        }
        let f: Vec<String> = flushed.iter().map(|l| tla_str(l.name())).collect();
        let first = steps.len();
        super::push_write_fence(steps, ev, tid, &what, &w, &f);
        for (k, s) in steps.iter_mut().enumerate().skip(first) {
            let tla = std::mem::take(&mut s.tla);
            self.cut.push(k, tla, || start.take().unwrap_or_default());
        }
        Ok(())
    }

    /// Ends the segment: its windows take its constants.
    fn end_segment(&mut self, g: &Geo, heap_base: u64, out: &mut Vec<(Segment, Vec<(String, String)>)>) {
        if let Some(w) = self.cut.take() {
            self.seg.windows.push(w);
        }
        let seg = std::mem::take(&mut self.seg);
        let Some(a) = seg.a else { return };
        let (ga, gb) = (g.geoms[a as usize], g.geoms[seg.b.unwrap_or(a) as usize]);
        let (live, index_off) = seg.morph_live.unwrap_or((0, SLAB as u32));
        let constants = [
            ("OldSize", ga.size.to_string()),
            ("NewSize", gb.size.to_string()),
            ("OldOffset", ga.data_offset.to_string()),
            ("NewOffset", gb.data_offset.to_string()),
            ("Units", SLAB.to_string()),
            ("TableUnits", (SLAB - index_off as u64).to_string()),
            ("MaxLive", live.to_string()),
            ("Variant", "\"ok\"".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect::<Vec<_>>();
        let classes = match seg.b {
            Some(b) if seg.morphed => format!("class {a} -> {b}"),
            _ => format!("class {a}"),
        };
        let mut seg = seg;
        for w in &mut seg.windows {
            w.constants = constants.clone();
            w.label = format!("slab {:#x}, {classes}", self.base - heap_base);
        }
        out.push((seg, constants));
    }
}

struct Mapper {
    heap_base: u64,
    geo: Geo,
    window: usize,
    /// The slabs followed, by absolute address.
    slabs: BTreeMap<u64, Slab>,
    groups: HashMap<u32, Group>,
    steps: Vec<Step>,
    /// Segments ended, with their constants.
    segments: Vec<(Segment, Vec<(String, String)>)>,
}

impl Mapper {
    /// The followed slab holding absolute address `addr`.
    fn slab_of(&self, addr: u64) -> Option<u64> {
        self.slabs.range(..=addr).next_back().filter(|(&b, _)| addr < b + SLAB).map(|(&b, _)| b)
    }

    fn store(&mut self, tid: u32, addr: u64, size: u32, value: Option<&[u8]>) -> Result<(), String> {
        let Some(base) = self.slab_of(addr) else { return Ok(()) };
        let Some(v) = value else {
            return Err(
                "the trace was recorded without values (pmsim run --values): the mapping needs what each store wrote"
                    .into(),
            );
        };
        let slab = self.slabs.get_mut(&base).expect("a followed slab");
        for (k, byte) in v.iter().enumerate() {
            let at = addr + k as u64;
            if at < base + SLAB {
                slab.img[(at - base) as usize] = *byte;
            }
        }
        self.groups.entry(tid).or_default().stores.push((addr, size as u64));
        Ok(())
    }

    fn fence(&mut self, ev: u64, tid: u32) -> Result<(), String> {
        let g = std::mem::take(self.groups.entry(tid).or_default());
        if g.stores.is_empty() {
            return Ok(());
        }
        // Per slab, in address order: its stores and flushed lines, slab-relative.
        let mut per: BTreeMap<u64, Group> = BTreeMap::new();
        for &(a, n) in &g.stores {
            if let Some(base) = self.slab_of(a) {
                per.entry(base).or_default().stores.push((a - base, n));
            }
        }
        for (base, p) in &mut per {
            p.flushed.extend(g.flushed.range(*base..*base + SLAB).map(|l| l - *base));
            let slab = self.slabs.get_mut(base).expect("a followed slab");
            slab.fence(&self.geo, ev, tid, &p.stores, &p.flushed, &mut self.steps)?;
        }
        Ok(())
    }

    /// Stops following the slab at `base`.
    fn end(&mut self, base: u64) {
        if let Some(mut s) = self.slabs.remove(&base) {
            s.end_segment(&self.geo, self.heap_base, &mut self.segments);
        }
    }

    fn event(&mut self, ev: u64, tid: u32, e: &Event<'_>) -> Result<(), String> {
        match *e {
            Event::Store { addr, size, value } | Event::NtStore { addr, size, value } => {
                self.store(tid, addr, size, value)?
            }
            Event::Flush { line, .. } if self.slab_of(line).is_some() => {
                self.groups.entry(tid).or_default().flushed.insert(line_of(line));
            }
            Event::Fence { kind } if kind != FenceKind::LockedRmw => self.fence(ev, tid)?,
            Event::Marker { id, label } if label == SLAB_MARKER => {
                let base = self.heap_base + id;
                self.end(base);
                self.slabs.insert(base, Slab::new(base, self.window));
            }
            Event::Marker { id, label } if label == SLAB_FREED_MARKER => self.end(self.heap_base + id),
            Event::OpBegin { op: OpKind::Recovery, .. } if !self.slabs.is_empty() => {
                return Err(format!("event {ev}: a recovery; the mapping follows runs without crashes"));
            }
            Event::OpBegin { op: OpKind::Morph, arg } => {
                let base = self.heap_base + arg;
                let Some(s) = self.slabs.get_mut(&base) else { return Ok(()) };
                if s.seg.morphed {
                    // The spec models one morph: the next one begins a segment of its own,
                    // from the state the slab is in (if it is quiet, as it is between operations).
                    if !s.quiet() {
                        self.end(base);
                        return Ok(());
                    }
                    s.end_segment(&self.geo, self.heap_base, &mut self.segments);
                    s.seg.a = Some(s.hdr_seen.class);
                    if s.hdr_seen.index_len == 0 {
                        s.table = None;
                    }
                }
                s.seg.morphed = true;
            }
            _ => {}
        }
        Ok(())
    }
}

/// Maps the NVAlloc trace at `path` (recorded with values) to
/// `SlabMorphing`: every slab's segments with a morph (`all`: every
/// segment), in windows of about `window` steps.
pub fn map(path: &str, window: usize, all: bool) -> Result<Mapped, String> {
    let rd = TraceReader::open(path).map_err(|e| e.to_string())?;
    let h = rd.header().clone();
    let cfg: NvAllocConfig = serde_json::from_value(serde_json::Value::Object(h.allocator.params.clone()))
        .map_err(|e| format!("{path}: the trace header's NVAlloc configuration: {e}"))?;
    let (geoms, map) = slab_geometry(&cfg);
    let mut m = Mapper {
        heap_base: h.heap.base,
        geo: Geo { geoms, map },
        window,
        slabs: BTreeMap::new(),
        groups: HashMap::new(),
        steps: Vec::new(),
        segments: Vec::new(),
    };
    super::feed(rd, path, |r| m.event(r.index, r.tid, &r.event))?;
    let bases: Vec<u64> = m.slabs.keys().copied().collect();
    for b in bases {
        m.end(b);
    }
    if !m.segments.iter().any(|(s, _)| s.morphed) {
        return Err(format!("{path}: no slab morphs in this trace (slab morphing validation needs a run that morphs)"));
    }
    // The steps of the segments checked, renumbered in the trace's order.
    let mut windows: Vec<Window> = Vec::new();
    let mut shown: Vec<(String, String)> = Vec::new();
    for (seg, consts) in m.segments {
        if !(seg.morphed || all) {
            continue;
        }
        // For people: each constant's values over the segments, in order.
        for (k, v) in consts {
            match shown.iter_mut().find(|(n, _)| *n == k) {
                Some((_, vs)) if !vs.split('/').any(|x| x == v) => *vs = format!("{vs}/{v}"),
                Some(_) => {}
                None => shown.push((k, v)),
            }
        }
        windows.extend(seg.windows.into_iter().filter(|w| !w.steps.is_empty()));
    }
    let mut keep: Vec<usize> = windows.iter().flat_map(|w| w.steps.iter().copied()).collect();
    keep.sort_unstable();
    let mut renum = vec![usize::MAX; m.steps.len()];
    for (new, &old) in keep.iter().enumerate() {
        renum[old] = new;
    }
    for w in &mut windows {
        for s in &mut w.steps {
            *s = renum[*s];
        }
        w.label = format!("{}, {} steps", w.label, w.steps.len());
    }
    super::sort_windows(&mut windows);
    let mut steps = m.steps;
    let mut k = 0;
    steps.retain(|_| {
        k += 1;
        renum[k - 1] != usize::MAX
    });
    Ok(Mapped {
        spec: "SlabMorphing".into(),
        dir: "slab-morphing".into(),
        module: "SlabMorphingTrace".into(),
        constants: shown,
        invariants: ["TypeOK", "NoNewBlockOverLiveOld", "CountersMatchTable"].map(String::from).to_vec(),
        steps,
        windows,
    })
}

/// Whether a trace's allocator name is one of NVAlloc's presets.
pub fn is_nvalloc(name: &str) -> bool {
    NvAllocConfig::PRESETS.contains(&name) || name.starts_with("nvalloc")
}

/// Whether the trace at `path` morphs a slab.
pub fn morphs(path: &str) -> Result<bool, String> {
    let mut any = false;
    TraceReader::open(path)
        .map_err(|e| e.to_string())?
        .for_each(|r| any |= matches!(r.event, Event::OpBegin { op: OpKind::Morph, .. }))
        .map_err(|e| e.to_string())?;
    Ok(any)
}
