//! Loading a trace for crash exploration: every event the persistency model
//! and the checks need, in a compact in-memory form, with store values in one
//! byte arena; stores are split at cache-line boundaries (the unit that
//! persists in order), and addresses become heap offsets.

use crate::error::CrashError;
use pmsim_model::pm::HEAP_IMAGE_KEY;
use pmsim_traces::{is_lock_marker, Event, OpKind, Record, SiteTable, TraceHeader, TraceReader, Visit, LINE};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The part of one store that falls in one cache line.
#[derive(Clone, Copy, Debug)]
pub struct Piece {
    /// Heap offset and length (within one line).
    pub off: u64,
    pub len: u32,
    /// Where its bytes start in [`CrashTrace::values`].
    pub val: u32,
    /// The store's global event index in the trace.
    pub index: u64,
    /// The region it falls in ([`CrashTrace::region_names`]).
    pub region: u32,
}

/// An event, as the explorer sees it.
#[derive(Clone, Copy, Debug)]
pub enum Ev {
    /// A (piece of a) store; `nt` for a non-temporal store.
    Store {
        piece: u32,
        tid: u32,
        nt: bool,
    },
    /// A flush of `line` (heap offset); `ordered` for clflush, which is
    /// durable without a fence; issued at code `site` ([`CrashTrace::sites`]).
    Flush {
        tid: u32,
        line: u64,
        ordered: bool,
        site: u32,
    },
    Fence {
        tid: u32,
        site: u32,
    },
    OpBegin {
        tid: u32,
        op: OpKind,
        arg: u64,
    },
    OpEnd {
        tid: u32,
        op: OpKind,
        result: u64,
    },
    Marker {
        tid: u32,
        label: u32,
    },
}

/// A trace loaded for crash exploration, with its base heap image.
pub struct CrashTrace {
    pub path: PathBuf,
    pub header: TraceHeader,
    pub events: Vec<Ev>,
    /// The global trace index of every event in `events`.
    pub index: Vec<u64>,
    pub pieces: Vec<Piece>,
    pub values: Vec<u8>,
    /// Marker labels, by the `label` of [`Ev::Marker`].
    pub labels: Vec<String>,
    /// Positions in `events` of the fences (the default crash points).
    pub fences: Vec<u32>,
    /// The heap image at trace start.
    pub image: PathBuf,
    pub heap_size: u64,
    /// The code sites flushes and fences name.
    pub sites: SiteTable,
    /// The names of the regions stores fall in, by [`Piece::region`]
    /// (0: outside every region the allocator announced).
    pub region_names: Vec<String>,
}

impl CrashTrace {
    /// The label of `e` if it is a marker whose label starts with `prefix`
    /// (an allocator's steps outside its heap, [`CrashTarget::outside_markers`]).
    ///
    /// [`CrashTarget::outside_markers`]: pmsim_model::family::CrashTarget::outside_markers
    pub fn marker_with(&self, e: &Ev, prefix: &str) -> Option<&str> {
        match *e {
            Ev::Marker { label, .. } => Some(self.labels[label as usize].as_str()).filter(|l| l.starts_with(prefix)),
            _ => None,
        }
    }

    /// Loads `path` and checks `image` (default: the file the trace header
    /// names, next to the trace) against it.
    pub fn load(path: &Path, image: Option<&Path>) -> Result<CrashTrace, CrashError> {
        let err = |m: String| CrashError(format!("{}: {m}", path.display()));
        let mut rd = TraceReader::open(path).map_err(|e| CrashError(e.to_string()))?;
        let header = rd.header().clone();
        if !rd.values() {
            return Err(err(format!(
                "the trace has no store values; record it with `pmsim run … --trace {} --values`",
                path.display()
            )));
        }
        let recorded = header.extra.get(HEAP_IMAGE_KEY).cloned();
        let image = match image {
            Some(p) => p.to_path_buf(),
            None => {
                let name = recorded.as_ref().and_then(|v| v["file"].as_str()).ok_or_else(|| {
                    err("the trace names no heap image (record it with `pmsim run … --values`, or pass --heap-image)"
                        .into())
                })?;
                path.parent().unwrap_or(Path::new(".")).join(name)
            }
        };
        check_image(&image, &header, recorded.as_ref())?;
        let (base, size) = (header.heap.base, header.heap.size);
        let t = CrashTrace::new(path, header, image, size);
        let mut ld = Loader { t, base, site: 0, regions: BTreeMap::new(), bad: None };
        while let Some(block) = rd.next_block().map_err(|e| CrashError(e.to_string()))? {
            block.visit(&mut ld).map_err(|e| CrashError(e.to_string()))?;
        }
        if let Some(m) = ld.bad {
            return Err(err(m));
        }
        let mut t = ld.t;
        t.sites = rd.sites().clone();
        Ok(t)
    }

    /// A trace with no events yet.
    pub fn new(path: &Path, header: TraceHeader, image: PathBuf, heap_size: u64) -> CrashTrace {
        CrashTrace {
            path: path.to_path_buf(),
            header,
            events: Vec::new(),
            index: Vec::new(),
            pieces: Vec::new(),
            values: Vec::new(),
            labels: Vec::new(),
            fences: Vec::new(),
            image,
            heap_size,
            sites: SiteTable::default(),
            region_names: vec!["(no region)".into()],
        }
    }

    /// Appends event `e`, whose global index in the trace is `index`.
    pub fn push(&mut self, index: u64, e: Ev) {
        if let Ev::Fence { .. } = e {
            self.fences.push(self.events.len() as u32);
        }
        self.events.push(e);
        self.index.push(index);
    }

    /// Appends a store of `bytes` at heap offset `off`, split at cache lines,
    /// in no region.
    pub fn push_store(&mut self, off: u64, bytes: &[u8], tid: u32, nt: bool, index: u64) {
        self.push_store_in(off, bytes, tid, nt, index, 0);
    }

    /// [`CrashTrace::push_store`] in region `region` ([`CrashTrace::region_names`]).
    fn push_store_in(&mut self, off: u64, bytes: &[u8], tid: u32, nt: bool, index: u64, region: u32) {
        let mut o = off;
        let end_all = off + bytes.len() as u64;
        while o < end_all {
            let end = ((o | (LINE - 1)) + 1).min(end_all);
            let val = self.values.len() as u32;
            self.values.extend_from_slice(&bytes[(o - off) as usize..(end - off) as usize]);
            self.pieces.push(Piece { off: o, len: (end - o) as u32, val, index, region });
            let piece = self.pieces.len() as u32 - 1;
            self.push(index, Ev::Store { piece, tid, nt });
            o = end;
        }
    }

    /// The bytes of a store piece.
    pub fn value(&self, p: &Piece) -> &[u8] {
        &self.values[p.val as usize..p.val as usize + p.len as usize]
    }
}

/// The trace as it is read: events become [`Ev`]s of the trace `t`.
struct Loader {
    t: CrashTrace,
    /// The heap's base address in the traced run.
    base: u64,
    /// The code site of the current thread's next flush or fence.
    site: u32,
    /// The regions announced so far: start offset → (end offset, name index).
    regions: BTreeMap<u64, (u64, u32)>,
    /// The first event that cannot be read.
    bad: Option<String>,
}

impl Loader {
    /// The heap offset of `[addr, addr + len)`, if it lies in the heap.
    fn at(&self, addr: u64, len: u64) -> Option<u64> {
        let size = self.t.heap_size;
        let off = addr.wrapping_sub(self.base);
        (off < size && len <= size - off).then_some(off)
    }

    /// The region holding heap offset `off` (0: none).
    fn region(&self, off: u64) -> u32 {
        match self.regions.range(..=off).next_back() {
            Some((_, &(end, name))) if off < end => name,
            _ => 0,
        }
    }

    /// A region announced at `base` (an address) of `len` bytes named `name`.
    fn add_region(&mut self, base: u64, len: u64, name: &str) {
        let Some(off) = self.at(base, len.max(1)) else { return };
        let t = &mut self.t;
        let n = match t.region_names.iter().position(|x| x == name) {
            Some(n) => n,
            None => {
                t.region_names.push(name.to_string());
                t.region_names.len() - 1
            }
        };
        self.regions.insert(off, (off + len, n as u32));
    }

    fn record(&mut self, r: &Record<'_>) -> Result<(), String> {
        let (tid, i) = (r.tid, r.index);
        match r.event {
            Event::Store { addr, size: n, value } | Event::NtStore { addr, size: n, value } => {
                let nt = matches!(r.event, Event::NtStore { .. });
                let (Some(off), Some(v)) = (self.at(addr, n as u64), value) else {
                    return Err(format!("event {i}: store at {addr:#x} (+{n}) outside the heap or without value"));
                };
                let region = self.region(off);
                self.t.push_store_in(off, v, tid, nt, i, region);
            }
            Event::Flush { kind, line } => {
                let off = self.at(line, 1).ok_or_else(|| format!("event {i}: flush of {line:#x} outside the heap"))?;
                let ordered = kind == pmsim_traces::FlushKind::Clflush;
                let site = self.site;
                self.t.push(i, Ev::Flush { tid, line: off & !(LINE - 1), ordered, site });
            }
            Event::Fence { .. } => {
                let site = self.site;
                self.t.push(i, Ev::Fence { tid, site });
            }
            Event::OpBegin { op, arg } => self.t.push(i, Ev::OpBegin { tid, op, arg }),
            Event::OpEnd { op, result } => self.t.push(i, Ev::OpEnd { tid, op, result }),
            // A lock's markers say nothing about crash states, and a run
            // takes locks on most operations: not kept.
            Event::Marker { label, .. } if is_lock_marker(label) => {}
            Event::Marker { label, .. } => {
                let t = &mut self.t;
                t.labels.push(label.to_string());
                let label = t.labels.len() as u32 - 1;
                t.push(i, Ev::Marker { tid, label });
            }
            Event::RegionAdd { base, len, name, .. } => self.add_region(base, len, name),
            _ => {}
        }
        Ok(())
    }
}

impl<'a> Visit<'a> for Loader {
    fn event(&mut self, r: &Record<'a>) {
        if self.bad.is_none() {
            self.bad = self.record(r).err();
        }
    }

    fn thread(&mut self, _tid: u32) {
        self.site = 0;
    }

    fn site(&mut self, site: u32) {
        self.site = site;
    }
}

/// Refuses an image that is not the heap this trace started from.
fn check_image(image: &Path, header: &TraceHeader, recorded: Option<&serde_json::Value>) -> Result<(), CrashError> {
    let err = |m: String| CrashError(format!("{}: {m}", image.display()));
    // Looked at before it is read: a device (/dev/zero) or a pipe would be
    // read without end, a huge file into memory.
    let meta = std::fs::metadata(image).map_err(|e| err(format!("cannot read the heap image: {e}")))?;
    if !meta.is_file() {
        return Err(err("the heap image is not a regular file".into()));
    }
    if meta.len() != header.heap.size {
        return Err(err(format!(
            "heap image does not match the trace: {} bytes, the trace's heap has {}",
            meta.len(),
            header.heap.size
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    std::io::Read::read_to_end(
        &mut std::io::Read::take(pmsim_traces::input::open_unnamed(image, "heap image").map_err(err)?, meta.len() + 1),
        &mut bytes,
    )
    .map_err(|e| err(format!("cannot read the heap image: {e}")))?;
    // Its format (a pmsim heap's header) is checked by the explorer, which
    // knows the allocator's (`Layout::of`).
    if bytes.len() as u64 != header.heap.size {
        return Err(err(format!(
            "heap image does not match the trace: {} bytes, the trace's heap has {}",
            bytes.len(),
            header.heap.size
        )));
    }
    // A pmsim heap whose header is damaged is refused for what is wrong with
    // it (the explorer checks it again with the allocator's layout), which a
    // CRC mismatch alone would not say.
    if pmsim_model::heap::has_magic(&bytes) {
        pmsim_model::heap::check_header(&bytes, header.heap.size).map_err(err)?;
    }
    if let Some(crc) = recorded.and_then(|v| v["crc32"].as_u64()) {
        let have = crc32fast::hash(&bytes) as u64;
        if have != crc {
            return Err(err(format!(
                "heap image does not match the trace: CRC-32 {have:#010x}, the trace recorded {crc:#010x}"
            )));
        }
    }
    Ok(())
}
