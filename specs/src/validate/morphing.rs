//! The mapping of an NVAlloc trace to `SlabMorphing`'s actions
//! (`slab-morphing/SlabMorphingTrace.tla` is its other half).
//!
//! The spec is the life of one slab, so the mapping follows one: the first
//! slab the trace morphs (`op_begin morph` names it), from the `nvalloc slab`
//! marker its `init_header` announces to the end of the trace, the `nvalloc
//! slab freed` marker of its return to the large allocator, or its next morph
//! (the spec has one). Its class before the morph is the spec's "A", the one
//! after it "B"; the constants are the code's geometry of both in bytes
//! (`nvalloc::slab_geometry` of the configuration in the trace's header).
//!
//! The mapper keeps the slab's bytes (every store with its value) and cuts
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

use super::{tla_str, Mapped, Step};
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
    /// Stores to the slab (slab-relative offset, size) since the last fence.
    stores: Vec<(u64, u64)>,
    /// Slab-relative lines flushed since the last fence.
    flushed: BTreeSet<u64>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Before,
    Init,
    Follow,
    Done,
}

struct Mapper {
    heap_base: u64,
    geoms: Vec<SlabGeom>,
    map: StripeMap,
    /// The slab followed (absolute address) and its bytes.
    base: u64,
    img: Vec<u8>,
    /// Event index of the marker of its last creation before it morphs.
    start: u64,
    phase: Phase,
    groups: HashMap<u32, Group>,
    a: Option<u16>,
    b: Option<u16>,
    /// The index table once a morph has written one: offset and entries.
    table: Option<(u32, u32)>,
    /// Live old blocks and table offset of the morph (for the constants).
    morph_live: Option<(u32, u32)>,
    morphs: u32,
    steps: Vec<Step>,
    /// Modelled values as of the last fence (for the descriptions).
    bm_seen: BTreeSet<u32>,
}

impl Mapper {
    fn class_name(&self, c: u16) -> String {
        if Some(c) == self.a {
            "\"A\"".into()
        } else if Some(c) == self.b {
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

    /// Bitmap bytes of a class's blocks.
    fn area(&self, c: u16) -> u64 {
        self.geoms.get(c as usize).map_or(0, |g| self.map.area_bytes(g.nblocks) as u64)
    }

    /// The bitmap lines: the area of the larger of the two classes seen.
    fn bm_bytes(&self) -> u64 {
        [self.a, self.b].into_iter().flatten().map(|c| self.area(c)).max().unwrap_or(0)
    }

    fn bm_set(&self) -> BTreeSet<u32> {
        let mut out = BTreeSet::new();
        for w in (0..self.bm_bytes()).step_by(8) {
            let mut v = u64_at(&self.img, (BITMAP_OFF + w) as usize);
            while v != 0 {
                let bit = (w * 8) as u32 + v.trailing_zeros();
                v &= v - 1;
                out.insert(self.map.block_of(bit));
            }
        }
        out
    }

    fn tbl_tla(&self) -> String {
        let Some((off, n)) = self.table else { return "<<>>".into() };
        let entries: Vec<String> = (0..n)
            .map(|k| {
                let e = u16_at(&self.img, off as usize + 2 * k as usize);
                format!("[ob |-> {}, live |-> {}]", e & !INDEX_LIVE, if e & INDEX_LIVE != 0 { "TRUE" } else { "FALSE" })
            })
            .collect();
        format!("<<{}>>", entries.join(", "))
    }

    /// Which modelled line the slab-relative offset `o` lies on, if any.
    fn line(&self, o: u64) -> Option<Line> {
        if o < 64 {
            Some(Line::Hdr)
        } else if o >= BITMAP_OFF && o < BITMAP_OFF + self.bm_bytes() {
            Some(Line::Bm)
        } else {
            match self.table {
                Some((off, _)) if o >= off as u64 => Some(Line::Tbl),
                _ => None,
            }
        }
    }

    fn store(&mut self, tid: u32, addr: u64, size: u32, value: Option<&[u8]>) -> Result<(), String> {
        if addr + size as u64 <= self.base || addr >= self.base + SLAB {
            return Ok(());
        }
        let Some(v) = value else {
            return Err(
                "the trace was recorded without values (pmsim run --values): the mapping needs what each store wrote"
                    .into(),
            );
        };
        let o = addr.saturating_sub(self.base);
        for (k, byte) in v.iter().enumerate() {
            let at = addr + k as u64;
            if at >= self.base && at < self.base + SLAB {
                self.img[(at - self.base) as usize] = *byte;
            }
        }
        if matches!(self.phase, Phase::Init | Phase::Follow) {
            self.groups.entry(tid).or_default().stores.push((o, size as u64));
        }
        Ok(())
    }

    fn fence(&mut self, ev: u64, tid: u32) -> Result<(), String> {
        let g = std::mem::take(self.groups.entry(tid).or_default());
        if g.stores.is_empty() {
            return Ok(());
        }
        let h = Hdr::read(&self.img);
        if self.phase == Phase::Init {
            self.a = Some(h.class);
            let bm = self.bm_set();
            if h.old_class != h.class || h.flag != 0 || h.index_len != 0 || !bm.is_empty() {
                return Err(format!(
                    "event {ev}: the slab at {:#x} after init_header is not a regular empty slab ({h:?}, {} bits set)",
                    self.base,
                    bm.len()
                ));
            }
            self.phase = Phase::Follow;
            return Ok(());
        }
        for c in [h.class, h.old_class] {
            if Some(c) != self.a && self.b.is_none() {
                self.b = Some(c);
            }
        }
        if h.flag == 2 || h.index_len > 0 {
            if self.table.is_none() {
                let n = h.index_len;
                self.table = Some((h.index_off, n));
                self.morph_live = Some((n, h.index_off));
            }
        } else if h.flag == 0 && self.table.is_some() && h.index_len == 0 {
            // slab_after (or an undone morph): the table is gone.
            self.table = None;
        }
        let written = super::lines_written(&g.stores, |x| self.line(x));
        if written.is_empty() {
            return Ok(());
        }
        let flushed: BTreeSet<Line> =
            written.iter().filter(|(_, ls)| ls.is_subset(&g.flushed)).map(|(&l, _)| l).collect();
        let mut w = Vec::new();
        let mut what = Vec::new();
        for &l in written.keys() {
            let (tla, desc) = match l {
                Line::Hdr => (
                    self.hdr_tla(&h),
                    format!(
                        "header {{class {}, old {}, flag {}, index_len {}}}",
                        self.class_name(h.class).trim_matches('"'),
                        self.class_name(h.old_class).trim_matches('"'),
                        h.flag,
                        h.index_len
                    ),
                ),
                Line::Bm => {
                    // As a change of the set as of the last step that wrote it
                    // (what the spec's bitmap holds if that step matched).
                    let bm = self.bm_set();
                    let add: Vec<u32> = bm.difference(&self.bm_seen).copied().collect();
                    let del: Vec<u32> = self.bm_seen.difference(&bm).copied().collect();
                    let list = |v: &[u32], sign: &str| v.iter().map(|b| format!("{sign}{b}")).collect::<Vec<_>>();
                    let d = format!("bitmap {}", [list(&add, "+"), list(&del, "-")].concat().join(" "));
                    self.bm_seen = bm;
                    let set = |v: &[u32]| v.iter().map(|b| b.to_string()).collect::<Vec<_>>().join(", ");
                    (format!("[add |-> {{{}}}, del |-> {{{}}}]", set(&add), set(&del)), d.trim_end().to_string())
                }
                Line::Tbl => (self.tbl_tla(), format!("index table {}", self.tbl_tla())),
            };
            w.push(format!("({} :> {tla})", tla_str(l.name())));
            let f = if flushed.contains(&l) { "" } else { " (not flushed)" };
            what.push(format!("{desc}{f}"));
        }
        let f: Vec<String> = flushed.iter().map(|l| tla_str(l.name())).collect();
        super::push_write_fence(&mut self.steps, ev, tid, &what, &w, &f);
        Ok(())
    }

    fn event(&mut self, ev: u64, tid: u32, e: &Event<'_>) -> Result<(), String> {
        match *e {
            Event::Store { addr, size, value } | Event::NtStore { addr, size, value } => {
                self.store(tid, addr, size, value)?
            }
            Event::Flush { line, .. } if line >= self.base && line < self.base + SLAB => {
                if matches!(self.phase, Phase::Init | Phase::Follow) {
                    self.groups.entry(tid).or_default().flushed.insert(line_of(line) - self.base);
                }
            }
            Event::Fence { kind } if kind != FenceKind::LockedRmw => self.fence(ev, tid)?,
            Event::Marker { label, .. } if ev == self.start && label == SLAB_MARKER => self.phase = Phase::Init,
            Event::Marker { id, label }
                if label == SLAB_FREED_MARKER && self.phase == Phase::Follow && self.base_of(id) == self.base =>
            {
                self.phase = Phase::Done;
            }
            Event::OpBegin { op: OpKind::Recovery, .. } if self.phase == Phase::Follow => {
                return Err(format!("event {ev}: a recovery; the mapping follows runs without crashes"));
            }
            Event::OpBegin { op: OpKind::Morph, arg }
                if self.phase == Phase::Follow && self.base_of(arg) == self.base =>
            {
                self.morphs += 1;
                if self.morphs > 1 {
                    // The spec models one morph of the slab.
                    self.phase = Phase::Done;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn base_of(&self, off: u64) -> u64 {
        self.heap_base + off
    }
}

/// Maps the NVAlloc trace at `path` (recorded with values) to `SlabMorphing`.
pub fn map(path: &str) -> Result<Mapped, String> {
    let rd = TraceReader::open(path).map_err(|e| e.to_string())?;
    let h = rd.header().clone();
    drop(rd);
    let cfg: NvAllocConfig = serde_json::from_value(serde_json::Value::Object(h.allocator.params.clone()))
        .map_err(|e| format!("{path}: the trace header's NVAlloc configuration: {e}"))?;
    let (geoms, map) = slab_geometry(&cfg);
    // Pass 1: the first slab that morphs, and the marker of its creation.
    let mut first: Option<u64> = None;
    let mut markers: BTreeMap<u64, u64> = BTreeMap::new();
    TraceReader::open(path)
        .map_err(|e| e.to_string())?
        .for_each(|r| match r.event {
            Event::Marker { id, label } if label == SLAB_MARKER && first.is_none() => {
                markers.insert(id, r.index);
            }
            Event::OpBegin { op: OpKind::Morph, arg } if first.is_none() => first = Some(arg),
            _ => {}
        })
        .map_err(|e| e.to_string())?;
    let Some(slab) = first else {
        return Err(format!("{path}: no slab morphs in this trace (slab morphing validation needs a run that morphs)"));
    };
    let Some(&start) = markers.get(&slab) else {
        return Err(format!(
            "{path}: slab {slab:#x} morphs but its creation is not announced (no {SLAB_MARKER:?} marker: a trace of an older pmsim?)"
        ));
    };
    let mut m = Mapper {
        heap_base: h.heap.base,
        geoms,
        map,
        base: h.heap.base + slab,
        img: vec![0; SLAB as usize],
        start,
        phase: Phase::Before,
        groups: HashMap::new(),
        a: None,
        b: None,
        table: None,
        morph_live: None,
        morphs: 0,
        steps: Vec::new(),
        bm_seen: BTreeSet::new(),
    };
    let rd = TraceReader::open(path).map_err(|e| e.to_string())?;
    super::feed(rd, path, |r| if m.phase == Phase::Done { Ok(()) } else { m.event(r.index, r.tid, &r.event) })?;
    let (Some(a), b) = (m.a, m.b) else {
        return Err(format!("{path}: slab {slab:#x}: its init_header never reached a fence"));
    };
    let (ga, gb) = (m.geoms[a as usize], m.geoms[b.unwrap_or(a) as usize]);
    let (live, index_off) = m.morph_live.unwrap_or((0, SLAB as u32));
    let constants = [
        ("OldSize", ga.size.to_string()),
        ("NewSize", gb.size.to_string()),
        ("OldOffset", ga.data_offset.to_string()),
        ("NewOffset", gb.data_offset.to_string()),
        ("Units", SLAB.to_string()),
        ("TableUnits", (SLAB - index_off as u64).to_string()),
        ("MaxLive", live.to_string()),
        ("Variant", "\"ok\"".to_string()),
    ];
    Ok(Mapped {
        spec: "SlabMorphing".into(),
        dir: "slab-morphing".into(),
        module: "SlabMorphingTrace".into(),
        constants: constants.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        invariants: ["TypeOK", "NoNewBlockOverLiveOld", "CountersMatchTable"].map(String::from).to_vec(),
        steps: m.steps,
        windows: Vec::new(),
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
