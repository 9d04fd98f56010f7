//! The tracing backend: per-thread event buffers, one global sequence, and a
//! collector thread that merges the buffers back into that sequence and feeds
//! an [`EventSink`].
//!
//! # Ordering
//!
//! A trace is one stream in global order, so every event is stamped with a
//! number from one shared counter (`fetch_add`, acquire-release) *before* its
//! memory operation is performed. The numbers are dense — every number taken
//! becomes exactly one record — and the collector emits events strictly in
//! number order, so the sink sees:
//!
//! * each thread's events in program order (a thread's numbers increase);
//! * an order consistent with the program's synchronization: if an operation
//!   happens-before another thread's operation through synchronization that
//!   precedes the latter (a lock, a release/acquire pair, a CAS that read the
//!   first thread's write before retrying), the first is numbered lower. So
//!   conflicting stores of a data-race-free allocator appear in the order they
//!   reached memory, which is what crash states are built from.
//!
//! # Buffers and memory
//!
//! A thread appends to its own buffer (no lock, one atomic add per event) and
//! hands the buffer to the collector through a bounded queue when it holds
//! [`TraceConfig::buffer_events`] events or [`TraceConfig::buffer_bytes`] value
//! bytes, when [`TraceConfig::window`] numbers have been taken (by all threads)
//! since its first event, on [`PmThread::flush_thread`](crate::pm::PmThread::flush_thread),
//! and when the thread's handle is dropped. The collector keeps the buffers it
//! cannot emit yet in a reorder buffer (a min-heap of the buffers' next numbers):
//! it emits as soon as the next expected number is at the head of a buffer.
//!
//! The reorder buffer holds at most the events numbered after the oldest event
//! still sitting in some thread's buffer. The window bounds that: a thread that
//! keeps recording hands its buffer over at its first event `window` numbers
//! after its buffer's first one, so the backlog is about `window` events plus
//! whatever other threads record while one thread is between two of its events.
//! That last part is bounded only if threads do not sit on buffered events
//! while they block — hence: **call `flush_thread` before blocking for long**
//! (barriers, joins, waiting for input). The queue is bounded too
//! ([`TraceConfig::queue_buffers`]): if the sink is slower than the threads,
//! the threads wait for it rather than memory growing.
//!
//! Each buffered event takes 32 bytes, plus its value bytes in values mode.
//!
//! # Code sites
//!
//! Flushes and fences carry the source location that issued them (the
//! `#[track_caller]` location of [`PmThread`](crate::pm::PmThread)'s flush and
//! fence methods). Locations are interned into dense ids shared by all threads
//! ([`SiteInterner`]); a thread remembers the ids of the locations it used in a
//! small direct-mapped cache, so a flush takes the lock only the first time a
//! thread uses its location. The collector defines every id up to the largest
//! one it is about to emit before emitting it, so a sink always learns a site
//! before the first event naming it, whichever thread interned it.

use pmsim_traces::{Event, EventSink, FenceKind, FlushKind, OpKind, Region, Site};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::collections::HashMap;
use std::io;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// How the tracing backend buffers events.
#[derive(Clone, Debug)]
pub struct TraceConfig {
    /// Record the bytes every store writes (needed to build crash states).
    pub values: bool,
    /// Events per thread buffer before it is handed to the collector.
    pub buffer_events: usize,
    /// Value, label and name bytes per thread buffer before it is handed over.
    pub buffer_bytes: usize,
    /// Sequence numbers after a buffer's first event at which it is handed
    /// over even if not full (bounds the collector's reorder buffer).
    pub window: u64,
    /// Full buffers that may wait for the collector before threads block.
    pub queue_buffers: usize,
    /// Save the heap file's bytes here when tracing starts: the base image
    /// that the crash explorer replays the trace's stores onto. The trace
    /// header then names the file and its CRC-32 (`extra.heap_image`), so a
    /// mismatched image is refused.
    pub heap_image: Option<std::path::PathBuf>,
}

impl Default for TraceConfig {
    fn default() -> Self {
        TraceConfig {
            values: false,
            buffer_events: 16 << 10,
            buffer_bytes: 1 << 20,
            window: 1 << 20,
            queue_buffers: 64,
            heap_image: None,
        }
    }
}

/// What the collector did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CollectorStats {
    /// Events delivered to the sink.
    pub events: u64,
    /// Thread buffers received.
    pub buffers: u64,
    /// Most events held in the reorder buffer at once (the backlog the window
    /// bounds; see the module doc).
    pub peak_pending: u64,
}

/// The sink, given back by [`TraceCollector::finish`], and the counts.
#[derive(Debug)]
pub struct Finished<S> {
    pub sink: S,
    pub stats: CollectorStats,
    /// The heap image and the files saved with it ([`TraceConfig::heap_image`]),
    /// written and synced, not yet in place: the caller commits them with
    /// the trace once the run succeeded (dropped, they are removed).
    pub outputs: pmsim_traces::output::Pending,
}

/// One buffered event; `value` and `label` index the buffer's byte arena.
/// Operation kinds are kept as numbers so that a slot stays 32 bytes.
#[derive(Clone, Copy, Debug)]
enum Rec {
    Store {
        addr: u64,
        size: u32,
        value: u32,
    },
    NtStore {
        addr: u64,
        size: u32,
        value: u32,
    },
    Flush {
        kind: FlushKind,
        site: u32,
        line: u64,
    },
    Fence {
        kind: FenceKind,
        site: u32,
    },
    ThreadStart,
    ThreadEnd,
    RegionAdd {
        index: u32,
    },
    RegionRemove {
        id: u64,
    },
    OpBegin {
        op: u64,
        arg: u64,
    },
    OpEnd {
        op: u64,
        result: u64,
    },
    Marker {
        id: u64,
        label: u32,
        len: u32,
    },
    /// A sequence number that produced no event (the store of a failed CAS):
    /// numbers must stay dense for the collector to make progress.
    Nop,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    seq: u64,
    rec: Rec,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 32);

/// The 64-bit code of an operation in a buffer slot (the trace format's code).
#[inline]
fn op_code(op: OpKind) -> u64 {
    debug_assert!(!matches!(op, OpKind::Other(c) if c < 16), "OpKind::Other codes are >= 16");
    op.code()
}

fn op_kind(code: u64) -> OpKind {
    OpKind::from_code(code).unwrap_or(OpKind::Other(code))
}

/// A run of one thread's events, numbered in increasing order.
struct Buffer {
    tid: u32,
    slots: Vec<Slot>,
    arena: Vec<u8>,
    regions: Vec<Region>,
}

impl Buffer {
    fn new(tid: u32, cfg: &TraceConfig) -> Buffer {
        Buffer { tid, slots: Vec::with_capacity(cfg.buffer_events), arena: Vec::new(), regions: Vec::new() }
    }

    fn clear(&mut self) {
        self.slots.clear();
        self.arena.clear();
        self.regions.clear();
    }

    /// The event of `rec` and the code site of a flush or fence (0 for others).
    fn event(&self, rec: &Rec, values: bool) -> Option<(Event<'_>, u32)> {
        let bytes = |at: u32, len: u32| &self.arena[at as usize..at as usize + len as usize];
        let site = match *rec {
            Rec::Flush { site, .. } | Rec::Fence { site, .. } => site,
            _ => 0,
        };
        let ev = match *rec {
            Rec::Store { addr, size, value } => Event::Store { addr, size, value: values.then(|| bytes(value, size)) },
            Rec::NtStore { addr, size, value } => {
                Event::NtStore { addr, size, value: values.then(|| bytes(value, size)) }
            }
            Rec::Flush { kind, line, .. } => Event::Flush { kind, line },
            Rec::Fence { kind, .. } => Event::Fence { kind },
            Rec::ThreadStart => Event::ThreadStart,
            Rec::ThreadEnd => Event::ThreadEnd,
            Rec::RegionAdd { index } => {
                let r = &self.regions[index as usize];
                Event::RegionAdd { id: r.id, category: r.category, base: r.base, len: r.len, name: &r.name }
            }
            Rec::RegionRemove { id } => Event::RegionRemove { id },
            Rec::OpBegin { op, arg } => Event::OpBegin { op: op_kind(op), arg },
            Rec::OpEnd { op, result } => Event::OpEnd { op: op_kind(op), result },
            Rec::Marker { id, label, len } => {
                // The bytes were copied from a &str by `ThreadTrace::marker`.
                let label = std::str::from_utf8(bytes(label, len)).unwrap_or("");
                Event::Marker { id, label }
            }
            Rec::Nop => return None,
        };
        Some((ev, site))
    }
}

/// The code sites of a trace: source locations interned into dense ids from 1.
#[derive(Default)]
pub(crate) struct SiteInterner {
    ids: HashMap<(&'static str, u32, u32), u32>,
    /// Location of id `i + 1`.
    locations: Vec<&'static Location<'static>>,
}

impl SiteInterner {
    fn intern(&mut self, loc: &'static Location<'static>) -> u32 {
        let n = self.locations.len() as u32;
        *self.ids.entry((loc.file(), loc.line(), loc.column())).or_insert_with(|| {
            self.locations.push(loc);
            n + 1
        })
    }

    /// The definition of site `id` (1..=interned).
    fn site(&self, id: u32) -> Site {
        let loc = self.locations[id as usize - 1];
        Site { id, file: loc.file().to_string(), line: loc.line(), column: loc.column(), ..Site::default() }
    }
}

/// Entries of a thread's site cache (direct-mapped by location address).
const SITE_CACHE: usize = 64;

/// What the threads and the collector both reach: spare buffers and the
/// failure flag. Kept apart from [`TraceShared`] because the collector must not
/// hold the queue's sender (it would never see the queue close).
struct Common {
    sites: Mutex<SiteInterner>,
    pool: Mutex<Vec<Buffer>>,
    pool_limit: usize,
    failed: AtomicBool,
    cfg: TraceConfig,
}

impl Common {
    fn take(&self, tid: u32) -> Buffer {
        match self.pool.lock().unwrap().pop() {
            Some(mut b) => {
                b.tid = tid;
                b
            }
            None => Buffer::new(tid, &self.cfg),
        }
    }

    fn give_back(&self, mut b: Buffer) {
        b.clear();
        let mut pool = self.pool.lock().unwrap();
        if pool.len() < self.pool_limit {
            pool.push(b);
        }
    }
}

/// The counter on its own cache line: every traced event of every thread
/// increments it, so nothing else should share its line.
#[repr(align(64))]
struct SeqCounter(AtomicU64);

/// What all thread handles of a traced `Pm` share.
pub(crate) struct TraceShared {
    seq: SeqCounter,
    tx: SyncSender<Buffer>,
    common: Arc<Common>,
}

impl TraceShared {
    pub(crate) fn failed(&self) -> bool {
        self.common.failed.load(Ordering::Relaxed)
    }
}

/// One thread's side of the tracer: its current buffer.
pub(crate) struct ThreadTrace {
    shared: Arc<TraceShared>,
    buf: Buffer,
    /// Sequence number of the buffer's first event.
    first: u64,
    values: bool,
    max_events: usize,
    max_bytes: usize,
    window: u64,
    /// Location address → site id of the locations this thread used.
    site_cache: Box<[(usize, u32); SITE_CACHE]>,
}

impl ThreadTrace {
    pub(crate) fn new(shared: Arc<TraceShared>, tid: u32) -> ThreadTrace {
        let cfg = &shared.common.cfg;
        let (values, max_events, max_bytes, window) = (cfg.values, cfg.buffer_events, cfg.buffer_bytes, cfg.window);
        let buf = shared.common.take(tid);
        let site_cache = Box::new([(0, 0); SITE_CACHE]);
        ThreadTrace { shared, buf, first: 0, values, max_events, max_bytes, window, site_cache }
    }

    /// Takes the next sequence number and appends the record.
    #[inline(always)]
    fn record(&mut self, rec: Rec) {
        let seq = self.shared.seq.0.fetch_add(1, Ordering::AcqRel);
        self.push(seq, rec);
    }

    #[inline(always)]
    fn push(&mut self, seq: u64, rec: Rec) {
        if self.buf.slots.is_empty() {
            self.first = seq;
        }
        self.buf.slots.push(Slot { seq, rec });
        if self.buf.slots.len() >= self.max_events
            || seq - self.first >= self.window
            || self.buf.arena.len() >= self.max_bytes
        {
            self.hand_off();
        }
    }

    /// Copies bytes to the arena; returns their offset.
    #[inline(always)]
    fn keep(&mut self, bytes: &[u8]) -> u32 {
        let at = self.buf.arena.len() as u32;
        self.buf.arena.extend_from_slice(bytes);
        at
    }

    /// A store (`nt`: non-temporal) of `bytes` at absolute address `addr`.
    #[inline]
    pub(crate) fn store(&mut self, nt: bool, addr: u64, bytes: &[u8]) {
        let size = bytes.len() as u32;
        let value = if self.values { self.keep(bytes) } else { 0 };
        self.record(if nt { Rec::NtStore { addr, size, value } } else { Rec::Store { addr, size, value } });
    }

    /// The site id of source location `loc`.
    #[inline]
    pub(crate) fn site(&mut self, loc: &'static Location<'static>) -> u32 {
        let key = loc as *const Location<'static> as usize;
        let slot = &mut self.site_cache[(key >> 3) % SITE_CACHE];
        if slot.0 == key {
            return slot.1;
        }
        let id = self.shared.common.sites.lock().unwrap().intern(loc);
        *slot = (key, id);
        id
    }

    #[inline]
    pub(crate) fn flush(&mut self, kind: FlushKind, line: u64, site: u32) {
        self.record(Rec::Flush { kind, site, line });
    }

    #[inline]
    pub(crate) fn fence(&mut self, kind: FenceKind, site: u32) {
        self.record(Rec::Fence { kind, site });
    }

    /// Reserves the two numbers of a locked read-modify-write and records its
    /// fence at `site`; [`ThreadTrace::rmw_end`] fills the second once the
    /// outcome is known.
    #[inline]
    pub(crate) fn rmw_begin(&mut self, site: u32) -> u64 {
        let seq = self.shared.seq.0.fetch_add(2, Ordering::AcqRel);
        self.push(seq, Rec::Fence { kind: FenceKind::LockedRmw, site });
        seq
    }

    /// Records the store of a successful RMW (`stored`), or a no-op.
    #[inline]
    pub(crate) fn rmw_end(&mut self, seq: u64, addr: u64, stored: Option<u64>) {
        let rec = match stored {
            Some(v) => {
                let value = if self.values { self.keep(&v.to_le_bytes()) } else { 0 };
                Rec::Store { addr, size: 8, value }
            }
            None => Rec::Nop,
        };
        self.push(seq + 1, rec);
    }

    pub(crate) fn thread_start(&mut self) {
        self.record(Rec::ThreadStart);
    }

    pub(crate) fn thread_end(&mut self) {
        self.record(Rec::ThreadEnd);
    }

    pub(crate) fn op_begin(&mut self, op: OpKind, arg: u64) {
        self.record(Rec::OpBegin { op: op_code(op), arg });
    }

    pub(crate) fn op_end(&mut self, op: OpKind, result: u64) {
        self.record(Rec::OpEnd { op: op_code(op), result });
    }

    pub(crate) fn marker(&mut self, id: u64, label: &str) {
        let at = self.keep(label.as_bytes());
        self.record(Rec::Marker { id, label: at, len: label.len() as u32 });
    }

    pub(crate) fn region_add(&mut self, region: Region) {
        let index = self.buf.regions.len() as u32;
        self.buf.regions.push(region);
        self.record(Rec::RegionAdd { index });
    }

    pub(crate) fn region_remove(&mut self, id: u64) {
        self.record(Rec::RegionRemove { id });
    }

    /// Sends the buffer to the collector (if it holds anything) and starts a new one.
    pub(crate) fn hand_off(&mut self) {
        if self.buf.slots.is_empty() {
            return;
        }
        let fresh = self.shared.common.take(self.buf.tid);
        let full = std::mem::replace(&mut self.buf, fresh);
        if self.shared.tx.send(full).is_err() {
            // The collector is gone (it panicked): `finish` reports it.
            self.shared.common.failed.store(true, Ordering::Relaxed);
        }
    }
}

/// Starts the collector thread that feeds `sink`.
pub(crate) fn start<S: EventSink + 'static>(
    sink: S,
    cfg: &TraceConfig,
) -> io::Result<(Arc<TraceShared>, TraceCollector<S>)> {
    let mut cfg = cfg.clone();
    cfg.buffer_events = cfg.buffer_events.max(1);
    cfg.queue_buffers = cfg.queue_buffers.max(1);
    cfg.window = cfg.window.max(1);
    // Arena offsets are u32: keep a buffer's bytes well below 4 GiB.
    cfg.buffer_bytes = cfg.buffer_bytes.clamp(1, 1 << 30);
    let common = Arc::new(Common {
        sites: Mutex::new(SiteInterner::default()),
        pool: Mutex::new(Vec::new()),
        pool_limit: cfg.queue_buffers + 16,
        failed: AtomicBool::new(false),
        cfg: cfg.clone(),
    });
    let (tx, rx) = mpsc::sync_channel(cfg.queue_buffers);
    let c = common.clone();
    let handle = std::thread::Builder::new().name("pmsim-trace".into()).spawn(move || collect(sink, rx, &c))?;
    let shared = Arc::new(TraceShared { seq: SeqCounter(AtomicU64::new(0)), tx, common });
    Ok((shared.clone(), TraceCollector { handle, shared, heap_image: None }))
}

/// The collector thread of a traced [`Pm`](crate::Pm); [`TraceCollector::finish`] ends
/// the trace. Dropping it without `finish` lets the thread run until the `Pm`
/// and its handles are gone, then drops the sink (a `TraceFile` then removes
/// its unfinished file).
pub struct TraceCollector<S> {
    pub(crate) handle: JoinHandle<(S, io::Result<CollectorStats>)>,
    pub(crate) shared: Arc<TraceShared>,
    /// The heap image at trace start, written but put in place only when
    /// the trace is delivered whole (dropped, it leaves nothing).
    pub(crate) heap_image: Option<pmsim_traces::output::Output>,
}

impl<S> std::fmt::Debug for TraceCollector<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceCollector").finish_non_exhaustive()
    }
}

/// A buffer in the reorder buffer, with the position of its next event.
struct Pending {
    buf: Buffer,
    pos: usize,
}

/// The reorder buffer: merges numbered runs back into one dense sequence.
struct Merger {
    next: u64,
    /// Pending buffers (a slab: `free` lists empty places).
    pending: Vec<Option<Pending>>,
    free: Vec<usize>,
    /// Next sequence number of each pending buffer, smallest first.
    heads: BinaryHeap<Reverse<(u64, usize)>>,
    held: u64,
    stats: CollectorStats,
}

impl Merger {
    fn new() -> Merger {
        Merger {
            next: 0,
            pending: Vec::new(),
            free: Vec::new(),
            heads: BinaryHeap::new(),
            held: 0,
            stats: CollectorStats::default(),
        }
    }

    fn add(&mut self, buf: Buffer) {
        self.stats.buffers += 1;
        let Some(first) = buf.slots.first() else { return };
        let head = first.seq;
        self.held += buf.slots.len() as u64;
        self.stats.peak_pending = self.stats.peak_pending.max(self.held);
        let p = Some(Pending { buf, pos: 0 });
        let i = match self.free.pop() {
            Some(i) => {
                self.pending[i] = p;
                i
            }
            None => {
                self.pending.push(p);
                self.pending.len() - 1
            }
        };
        self.heads.push(Reverse((head, i)));
    }

    /// Emits every event that is next in sequence; returns emptied buffers to `common`.
    fn drain(&mut self, common: &Common, mut emit: impl FnMut(u32, u32, &Event<'_>)) {
        let values = common.cfg.values;
        while let Some(&Reverse((head, i))) = self.heads.peek() {
            if head != self.next {
                debug_assert!(head > self.next, "sequence number {head} delivered twice");
                break;
            }
            self.heads.pop();
            let p = self.pending[i].as_mut().expect("pending slot in use");
            let slots = &p.buf.slots;
            let mut pos = p.pos;
            // Emit the run of consecutive numbers this buffer holds.
            while pos < slots.len() && slots[pos].seq == self.next {
                if let Some((ev, site)) = p.buf.event(&slots[pos].rec, values) {
                    emit(p.buf.tid, site, &ev);
                    self.stats.events += 1;
                }
                pos += 1;
                self.next += 1;
            }
            self.held -= (pos - p.pos) as u64;
            if pos < slots.len() {
                self.heads.push(Reverse((slots[pos].seq, i)));
                p.pos = pos;
            } else {
                let done = self.pending[i].take().expect("pending slot in use");
                self.free.push(i);
                common.give_back(done.buf);
            }
        }
    }
}

/// The collector thread: receive buffers, merge, feed the sink.
fn collect<S: EventSink>(mut sink: S, rx: Receiver<Buffer>, common: &Common) -> (S, io::Result<CollectorStats>) {
    let mut merger = Merger::new();
    let mut error: Option<io::Error> = None;
    // Sites 1..=defined have been defined to the sink.
    let mut defined = 0u32;
    // `recv` fails once every sender is gone: all handles have handed over.
    while let Ok(buf) = rx.recv() {
        merger.add(buf);
        // Take whatever else is queued before emitting: fewer heap operations.
        while let Ok(more) = rx.try_recv() {
            merger.add(more);
        }
        merger.drain(common, |tid, site, ev| {
            if error.is_none() && site > defined {
                // Interned before this event was recorded, so the table has it.
                let sites = common.sites.lock().unwrap();
                while defined < site && error.is_none() {
                    defined += 1;
                    if let Err(e) = sink.define_site(&sites.site(defined)) {
                        error = Some(e);
                        common.failed.store(true, Ordering::Relaxed);
                    }
                }
            }
            if error.is_none() {
                if let Err(e) = sink.event_at(tid, site, ev) {
                    error = Some(e);
                    common.failed.store(true, Ordering::Relaxed);
                }
            }
        });
    }
    let result = match error {
        Some(e) => Err(e),
        None if !merger.heads.is_empty() => Err(io::Error::other(format!(
            "trace incomplete: event {} never arrived ({} later events held back); was a PmThread leaked?",
            merger.next, merger.held
        ))),
        None => Ok(merger.stats),
    };
    (sink, result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmsim_traces::{Category, OwnedEvent, VecSink};

    fn buffer(tid: u32, seqs: &[u64]) -> Buffer {
        let mut b = Buffer::new(tid, &TraceConfig::default());
        for &seq in seqs {
            b.slots.push(Slot { seq, rec: Rec::OpBegin { op: op_code(OpKind::Other(100)), arg: seq } });
        }
        b
    }

    fn common() -> Common {
        Common {
            sites: Mutex::new(SiteInterner::default()),
            pool: Mutex::new(Vec::new()),
            pool_limit: 4,
            failed: AtomicBool::new(false),
            cfg: TraceConfig::default(),
        }
    }

    #[test]
    fn merger_emits_in_sequence_as_soon_as_the_next_number_arrives() {
        let c = common();
        let mut m = Merger::new();
        let mut out = VecSink::default();
        let mut emit = |tid: u32, _site: u32, ev: &Event<'_>| out.event(tid, ev).unwrap();
        m.add(buffer(1, &[1, 2, 5]));
        m.drain(&c, &mut emit);
        m.add(buffer(2, &[3, 4, 6]));
        m.drain(&c, &mut emit);
        m.add(buffer(0, &[0, 7]));
        m.drain(&c, &mut emit);
        let got: Vec<(u32, u64)> = out
            .0
            .iter()
            .map(|(t, e)| match e {
                OwnedEvent::OpBegin { arg, .. } => (*t, *arg),
                e => panic!("unexpected {e:?}"),
            })
            .collect();
        assert_eq!(got, vec![(0, 0), (1, 1), (1, 2), (2, 3), (2, 4), (1, 5), (2, 6), (0, 7)]);
        assert!(m.heads.is_empty());
        assert_eq!(m.held, 0);
        assert_eq!(m.stats.peak_pending, 8);
    }

    #[test]
    fn op_kinds_round_trip() {
        for op in [OpKind::Malloc, OpKind::Free, OpKind::Close, OpKind::Other(16), OpKind::Other(u64::MAX)] {
            assert_eq!(op_kind(op_code(op)), op);
        }
    }

    #[test]
    fn category_is_copied_into_region_events() {
        let mut b = Buffer::new(0, &TraceConfig::default());
        b.regions.push(Region { id: 3, name: "wal".into(), category: Category::Wal, base: 64, len: 128 });
        let (ev, _) = b.event(&Rec::RegionAdd { index: 0 }, false).unwrap();
        assert_eq!(ev, Event::RegionAdd { id: 3, category: Category::Wal, base: 64, len: 128, name: "wal" });
    }
}
