//! The replay engine: one pass over the events in global order, each sent
//! through the reflush-distance tracker, the cache, the DIMMs and the latency
//! model, with every figure charged to the event's thread, region and innermost
//! open operation. Read [`Simulator::step`] top to bottom for what happens to
//! each kind of event.
//!
//! Memory is bounded by the trace's distinct lines, threads, regions and
//! operation types, never by its length, and no event allocates (vectors grow
//! only when a new thread, region, operation type or nesting depth appears).

use crate::access_map::{AccessMap, AccessPoint};
use crate::cache::{line_span, lines, CacheCounters, CpuCache};
use crate::config::{Config, ConfigError, Scope};
use crate::distance::{bucket_of, DistanceTracker, FIRST};
use crate::fastmap::U64Map;
use crate::optane::{DimmCounters, Optane};
use crate::sites::SiteCounters;
use crate::stats::*;
use pmsim_traces::{
    Category, Event, EventSink, FenceKind, FlushKind, OpKind, Record, RegionMap, Site, SiteTable, TraceError,
    TraceHeader, TraceReader, TraceTotals, Visit,
};
use std::collections::HashMap;
use std::io::{self, Read};

/// No line pending in a thread's write-combining buffer.
const NO_LINE: u64 = u64::MAX;

/// The latency constants in integer picoseconds, so sums are exact and cheap.
#[derive(Clone, Debug)]
struct Costs {
    reflush: Vec<u64>,
    regular: u64,
    xpb_hit: u64,
    xpb_miss: u64,
    media_write: u64,
    clean: u64,
    fence: u64,
}

impl Costs {
    fn new(c: &Config) -> Costs {
        let ps = |ns: f64| (ns * 1000.0).round() as u64;
        let l = &c.latency;
        Costs {
            reflush: l.reflush_ns.iter().map(|&v| ps(v)).collect(),
            regular: ps(l.regular_flush_ns),
            xpb_hit: ps(l.xpbuffer_hit_ns),
            xpb_miss: ps(l.xpbuffer_miss_ns),
            media_write: ps(l.media_write_ns),
            clean: ps(l.clean_flush_ns),
            fence: ps(l.fence_ns),
        }
    }

    /// A 64 B write into the XPBuffer that is not a reflush.
    #[inline(always)]
    fn regular_write(&self, hit: bool, evicted: bool) -> u64 {
        self.regular + if hit { self.xpb_hit } else { self.xpb_miss } + if evicted { self.media_write } else { 0 }
    }
}

/// No context yet for this (thread, operation) pair.
const NO_CTX: u32 = u32::MAX;
/// No event seen yet (thread ids are at most 65535).
const NO_THREAD: u32 = u32::MAX;

/// Per-thread state between events.
#[derive(Clone, Debug)]
struct ThreadState {
    /// The counters this thread's events go to: those of (this thread, its
    /// innermost open operation). Changes only at operation boundaries.
    ctx: u32,
    /// Open operations, innermost last (operation rows).
    ops: Vec<u32>,
    /// Operation row → context of (this thread, that operation), or `NO_CTX`.
    ctx_of_op: Vec<u32>,
    /// Category slot and region of the latest flush since the last fence: the
    /// next fence's cost goes there.
    pending: Option<(u8, u32)>,
    /// The line a run of non-temporal stores is filling (the CPU's
    /// write-combining buffer, one per thread here): written to PM when the run
    /// moves to another line, at a fence or at the thread's end.
    nt_line: u64,
}

impl Default for ThreadState {
    fn default() -> Self {
        ThreadState { ctx: NO_CTX, ops: Vec::new(), ctx_of_op: Vec::new(), pending: None, nt_line: NO_LINE }
    }
}

/// Entries of the region cache (one per 4 KB page, direct-mapped).
const REGION_CACHE: usize = 256;

/// The region-cache entry of `addr`'s 4 KB page: a multiplicative hash of the
/// page number, as heaps put regions at power-of-two strides that would
/// collide on the low bits.
#[inline(always)]
fn region_cache_index(addr: u64) -> usize {
    ((addr >> 12).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - REGION_CACHE.trailing_zeros())) as usize
}

/// A region recently found for an address of some page: accesses to that page
/// hit it and skip the binary search of [`RegionMap::lookup`] and the id → row
/// lookup.
#[derive(Clone, Copy, Debug, Default)]
struct HotRegion {
    base: u64,
    /// 0 when invalid.
    len: u64,
    slot: u32,
    cat: u8,
}

/// The models a replay runs, fixed for the whole replay: the per-event code is
/// compiled once per mode (a const generic), so it carries no branches on it
/// and the reflush-only mode has no trace of the cache, DIMM or latency code.
const REFLUSH_ONLY: u8 = 0;
/// Full model under eADR: flushes do not reach the cache or PM.
const EADR: u8 = 1;
/// Full model under ADR.
const ADR: u8 = 2;

/// Replays events through the models. Feed it events (it is an [`EventSink`],
/// or call [`Simulator::replay`] on a trace), then ask for [`Simulator::report`].
pub struct Simulator {
    cfg: Config,
    costs: Costs,
    threshold: u64,
    scope: Scope,
    /// Run the cache, Optane and latency models (not `reflush_only`).
    full: bool,
    /// Flushes reach the cache and PM (full model, not eADR).
    adr: bool,
    trace_name: String,
    heap_base: u64,

    regions: RegionMap,
    /// Region id → row in `region_ctr`.
    region_slot_of_id: U64Map,
    region_slot_by_key: HashMap<(String, Category), u32>,
    /// Name and category per region row; row 0 is `(none)`.
    region_rows: Vec<(String, Option<Category>)>,
    hot: Box<[HotRegion; REGION_CACHE]>,

    threads: Vec<ThreadState>,
    /// Counters per context, a (thread, innermost operation) pair that
    /// occurred: each event bumps its context's and its region's counters, and
    /// the per-thread, per-operation and overall figures are sums of contexts.
    ctx_ctr: Vec<Counters>,
    /// (thread, operation row) of each context.
    ctx_key: Vec<(u32, u32)>,
    region_ctr: Vec<Counters>,
    /// Operation per row; row 0 (`None`) is "outside any operation".
    op_kinds: Vec<Option<OpKind>>,
    /// Row of each named operation (codes 0-7) in `op_kinds`, 0 if none yet.
    op_row_of_code: [u32; 8],

    trackers: Vec<DistanceTracker>,
    tracker_min_capacity: u32,
    cache: CpuCache,
    optane: Optane,
    access: AccessMap,

    /// The global index the next event given to [`Simulator::step`] gets.
    next_index: u64,
    /// The thread of the latest event and its context: events come in runs
    /// of one thread, so the thread's state is looked up once per run.
    cur_tid: u32,
    cur_ctx: u32,

    /// Flush and fence figures per code site, the site of the current
    /// thread's next flush or fence, and the trace's site names.
    sites: SiteCounters,
    cur_site: u32,
    site_table: SiteTable,

    /// Where the window begins, and the counters when it began.
    window_at: WindowAt,
    /// Operations still to begin before an operation window opens (0: none).
    ops_to_window: u64,
    window: Option<Box<WindowStart>>,
}

/// Where the window of a replay begins: the figures are then reported for the
/// whole run and, separately, from that point on (a steady state without the
/// setup, e.g. PMDK's pool creation).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum WindowAt {
    /// No window.
    #[default]
    None,
    /// At the first marker labelled exactly so, or `LABEL:…` (the Valgrind
    /// tool's `--window-at FUNC` records `window:FUNC`).
    Marker(String),
    /// After this many operations have begun.
    Ops(u64),
}

impl WindowAt {
    fn matches(&self, label: &str) -> bool {
        match self {
            WindowAt::Marker(m) => label.strip_prefix(m.as_str()).is_some_and(|r| r.is_empty() || r.starts_with(':')),
            _ => false,
        }
    }
}

/// Every counter as it stood when the window began.
struct WindowStart {
    from: String,
    events: u64,
    ctx: Vec<Counters>,
    regions: Vec<Counters>,
    sites: SiteCounters,
    dimms: Vec<DimmCounters>,
    cache: CacheCounters,
}

/// `now` minus `then` element by element; elements made since count in full.
fn since_each(now: &[Counters], then: &[Counters]) -> Vec<Counters> {
    now.iter().enumerate().map(|(i, c)| then.get(i).map_or_else(|| c.clone(), |e| c.since(e))).collect()
}

impl Simulator {
    /// A simulator for a trace with this header (its region table, allocator
    /// and workload names, heap base); the configuration is validated first.
    pub fn new(cfg: Config, header: &TraceHeader) -> Result<Simulator, ConfigError> {
        cfg.validate().map_err(|problem| ConfigError { source_name: "simulator configuration".into(), problem })?;
        let full = !cfg.reflush_only;
        // The reflush-only run never touches the cache: do not allocate one.
        let cache_cfg = if full { cfg.cache.clone() } else { crate::config::CacheConfig { sets: 1, ways: 1 } };
        let mut optane = Optane::new(&cfg.optane);
        optane.set_origin(header.heap.base);
        let scope = cfg.reflush.scope;
        let trackers = match scope {
            Scope::Thread => 0,
            Scope::Dimm => optane.dimms(),
            Scope::Global => 1,
        };
        let mut trace_name = String::new();
        for c in [&header.allocator, &header.workload] {
            if !c.name.is_empty() {
                if !trace_name.is_empty() {
                    trace_name += " / ";
                }
                trace_name += &c.name;
                if !c.variant.is_empty() {
                    trace_name += &format!(" ({})", c.variant);
                }
            }
        }
        let mut sim = Simulator {
            costs: Costs::new(&cfg),
            threshold: cfg.reflush.threshold,
            scope,
            full,
            adr: full && !cfg.eadr,
            trace_name,
            heap_base: header.heap.base,
            regions: RegionMap::new(&[]),
            region_slot_of_id: U64Map::new(),
            region_slot_by_key: HashMap::new(),
            region_rows: vec![("(none)".to_string(), None)],
            hot: Box::new([HotRegion::default(); REGION_CACHE]),
            threads: Vec::new(),
            ctx_ctr: Vec::new(),
            ctx_key: Vec::new(),
            region_ctr: vec![Counters::default()],
            op_kinds: vec![None],
            op_row_of_code: [0; 8],
            trackers: (0..trackers).map(|_| DistanceTracker::new()).collect(),
            tracker_min_capacity: DistanceTracker::DEFAULT_MIN_CAPACITY,
            cache: CpuCache::new(&cache_cfg),
            optane,
            access: AccessMap::new(cfg.access_map.per_category),
            next_index: 0,
            cur_tid: NO_THREAD,
            cur_ctx: NO_CTX,
            sites: SiteCounters::default(),
            cur_site: 0,
            site_table: SiteTable::default(),
            window_at: WindowAt::None,
            ops_to_window: 0,
            window: None,
            cfg,
        };
        for r in &header.regions {
            sim.add_region(r.id, r.category, r.base, r.len, &r.name);
        }
        Ok(sim)
    }

    /// Sets the smallest time-array capacity of the reflush-distance trackers
    /// (tests make it tiny so that renumbering happens all the time). Call
    /// before the first event.
    pub fn set_tracker_min_capacity(&mut self, min: u32) {
        self.tracker_min_capacity = min;
        for t in &mut self.trackers {
            *t = DistanceTracker::with_min_capacity(min);
        }
    }

    /// The mode of [`REFLUSH_ONLY`], [`EADR`] and [`ADR`] this simulator runs.
    #[inline(always)]
    fn mode(&self) -> u8 {
        match (self.full, self.adr) {
            (false, _) => REFLUSH_ONLY,
            (true, false) => EADR,
            (true, true) => ADR,
        }
    }

    /// Reports a window besides the whole run (see [`WindowAt`]); call before
    /// the replay.
    pub fn set_window(&mut self, at: WindowAt) {
        self.ops_to_window = match at {
            WindowAt::Ops(n) => n + 1,
            _ => 0,
        };
        self.window_at = at;
    }

    /// Whether the window began (its marker was seen, or enough operations).
    pub fn window_started(&self) -> bool {
        self.window.is_some()
    }

    /// Copies every counter: the window begins here.
    #[cold]
    #[inline(never)]
    fn open_window(&mut self, from: String) {
        if self.window.is_some() {
            return;
        }
        self.window = Some(Box::new(WindowStart {
            from,
            events: self.ctx_ctr.iter().map(Counters::events).sum(),
            ctx: self.ctx_ctr.clone(),
            regions: self.region_ctr.clone(),
            sites: self.sites.clone(),
            dimms: self.optane.counters(),
            cache: self.cache.counters,
        }));
    }

    /// Replays a whole trace (its header must be the one given to `new`).
    pub fn replay<R: Read>(&mut self, reader: &mut TraceReader<R>) -> Result<TraceTotals, TraceError> {
        match self.mode() {
            REFLUSH_ONLY => self.replay_in::<REFLUSH_ONLY, R>(reader),
            EADR => self.replay_in::<EADR, R>(reader),
            _ => self.replay_in::<ADR, R>(reader),
        }
    }

    #[inline(always)]
    fn replay_in<const M: u8, R: Read>(&mut self, reader: &mut TraceReader<R>) -> Result<TraceTotals, TraceError> {
        while let Some(block) = reader.next_block()? {
            block.visit(&mut Replay::<M>(self))?;
            self.next_index = block.first_index + block.events as u64;
        }
        self.site_table = reader.sites().clone();
        Ok(reader.totals())
    }

    /// One event read from a trace, with its own global index.
    #[inline]
    pub fn record(&mut self, rec: &Record<'_>) {
        self.next_index = rec.index;
        self.step(rec.tid, &rec.event);
    }

    /// One event of thread `tid`, the next in global order.
    #[inline]
    pub fn step(&mut self, tid: u32, ev: &Event<'_>) {
        let index = self.next_index;
        self.next_index += 1;
        match self.mode() {
            REFLUSH_ONLY => self.step_in::<REFLUSH_ONLY>(index, tid, ev),
            EADR => self.step_in::<EADR>(index, tid, ev),
            _ => self.step_in::<ADR>(index, tid, ev),
        }
    }

    /// Event number `index` (global order) of thread `tid`.
    #[inline(always)]
    fn step_in<const M: u8>(&mut self, index: u64, tid: u32, ev: &Event<'_>) {
        let (t, x) = self.begin_event(tid);
        match *ev {
            Event::Store { addr, size, .. } => self.store::<M>(x, addr, size),
            Event::Flush { kind, line } => self.flush::<M>(t, x, index, kind, line),
            Event::Fence { .. } => self.fence::<M>(t, x),
            Event::NtStore { addr, size, .. } => self.nt_store::<M>(t, x, addr, size),
            Event::Load { addr, size } => self.load::<M>(x, addr, size),
            Event::OpBegin { op, .. } => {
                let row = self.op_row_to_begin(op);
                self.op_begin(t, row);
            }
            Event::OpEnd { op, .. } => self.op_end(t, x, self.op_row(op)),
            _ => self.rare(t, x, ev),
        }
    }

    /// Thread starts and ends, region changes and markers: counted as other
    /// events of their context.
    #[cold]
    #[inline(never)]
    fn rare(&mut self, t: usize, x: u32, ev: &Event<'_>) {
        self.ctx_ctr[x as usize].other_events += 1;
        match *ev {
            Event::ThreadEnd => self.drain_nt(t),
            Event::RegionAdd { id, category, base, len, name } => self.add_region(id, category, base, len, name),
            Event::RegionRemove { id } => {
                self.regions.remove(id);
                self.hot.fill(HotRegion::default());
            }
            Event::Marker { label, .. } if self.window_at.matches(label) => self.open_window(format!("marker {label}")),
            _ => {}
        }
    }

    /// What every event does first: returns its thread and the thread's
    /// current context (setting the thread up the first time). Events are
    /// counted by kind in their context's counters, nowhere else.
    #[inline(always)]
    fn begin_event(&mut self, tid: u32) -> (usize, u32) {
        if tid != self.cur_tid {
            self.switch_thread(tid);
        }
        (tid as usize, self.cur_ctx)
    }

    /// The current thread and its context, for an event of thread `tid` that
    /// the decoder announced with [`Visit::thread`] (so it is current).
    #[inline(always)]
    fn current(&self, tid: u32) -> (usize, u32) {
        debug_assert_eq!(tid, self.cur_tid, "the decoder announces every thread switch");
        (self.cur_tid as usize, self.cur_ctx)
    }

    /// Makes `tid` the current thread.
    #[inline(always)]
    fn switch_thread(&mut self, tid: u32) {
        match self.threads.get(tid as usize) {
            Some(ts) if ts.ctx != NO_CTX => (self.cur_tid, self.cur_ctx) = (tid, ts.ctx),
            _ => self.first_event_of(tid),
        }
    }

    /// Sets thread `tid` up at its first event and makes it current.
    #[cold]
    #[inline(never)]
    fn first_event_of(&mut self, tid: u32) {
        self.start_thread(tid as usize);
        (self.cur_tid, self.cur_ctx) = (tid, self.threads[tid as usize].ctx);
    }

    // ---- events -------------------------------------------------------------

    /// A cached store: counted, and each line it touches becomes dirty in the
    /// cache (a miss fills the line from PM and may evict a dirty one to PM).
    #[inline(always)]
    fn store<const M: u8>(&mut self, x: u32, addr: u64, size: u32) {
        let (r, _) = self.region_of(addr);
        self.bump(x, r, |c| {
            c.stores += 1;
            c.store_bytes += size as u64;
        });
        if M != REFLUSH_ONLY {
            self.touch_lines(x, addr, size, true);
        }
    }

    #[inline(always)]
    fn load<const M: u8>(&mut self, x: u32, addr: u64, size: u32) {
        let (r, _) = self.region_of(addr);
        self.bump(x, r, |c| c.loads += 1);
        if M != REFLUSH_ONLY {
            self.touch_lines(x, addr, size, false);
        }
    }

    /// A flush: its reflush distance in the configured scope, then (ADR only)
    /// whether the cache held the line dirty, the XPBuffer's response to the
    /// write-back and the estimated cost.
    #[inline(always)]
    fn flush<const M: u8>(&mut self, t: usize, x: u32, index: u64, kind: FlushKind, line: u64) {
        let line = line & !63;
        let (r, cat) = self.region_of(line);
        let d = self.tracker(t, line).distance(line);
        let b = bucket_of(d);
        let reflush = d != FIRST && (d as u64) < self.threshold;
        let (mut dirty, mut hit, mut seq, mut cost) = (false, false, false, 0);
        if M == ADR {
            dirty = self.cache.flush(line, kind != FlushKind::Clwb);
            if dirty {
                let w = self.optane.write(line);
                (hit, seq) = (w.hit, w.sequential);
                cost = if reflush {
                    self.costs.reflush[(d as usize).min(self.costs.reflush.len() - 1)]
                } else {
                    self.costs.regular_write(w.hit, w.evicted)
                };
            } else {
                cost = self.costs.clean;
            }
            self.threads[t].pending = Some((cat, r));
        }
        self.bump(x, r, |c| {
            c.reflushes += reflush as u64;
            c.hist[b] += 1;
            if M == ADR {
                c.dirty_flushes += dirty as u64;
                c.xpbuffer_hits += hit as u64;
                c.sequential_writes += seq as u64;
                c.persist_ps[cat as usize] += cost;
            }
        });
        let s = self.sites.row(self.cur_site);
        s.flushes += 1;
        s.reflushes += reflush as u64;
        if M == ADR {
            s.dirty_flushes += dirty as u64;
            s.persist_ps += cost;
        }
        self.access.offer(cat, index, line, r);
    }

    /// A fence: drains the thread's non-temporal write-combining buffer; its
    /// cost goes to the category and region of the flush it orders (the
    /// thread's latest since its previous fence), or to "fence" if none.
    #[inline(always)]
    fn fence<const M: u8>(&mut self, t: usize, x: u32) {
        if M == REFLUSH_ONLY {
            // No flush or non-temporal write leaves a persist cost pending.
            self.ctx_ctr[x as usize].fences += 1;
            self.sites.row(self.cur_site).fences += 1;
            return;
        }
        self.drain_nt(t);
        let cost = self.costs.fence;
        let s = self.sites.row(self.cur_site);
        s.fences += 1;
        s.persist_ps += cost;
        match self.threads[t].pending.take() {
            Some((cat, r)) => self.bump(x, r, |c| {
                c.fences += 1;
                c.persist_ps[cat as usize] += cost;
            }),
            None => {
                let c = &mut self.ctx_ctr[x as usize];
                c.fences += 1;
                c.persist_ps[BARE_FENCE as usize] += cost;
            }
        }
    }

    /// A non-temporal store: bypasses the cache (a cached copy is invalidated;
    /// its dirty bytes merge into the write) and fills the thread's
    /// write-combining buffer, which goes to PM a line at a time.
    #[inline(always)]
    fn nt_store<const M: u8>(&mut self, t: usize, x: u32, addr: u64, size: u32) {
        let (r, _) = self.region_of(addr);
        self.bump(x, r, |c| c.nt_stores += 1);
        if M == REFLUSH_ONLY {
            return;
        }
        for line in lines(addr, size) {
            self.cache.flush(line, true);
            let prev = std::mem::replace(&mut self.threads[t].nt_line, line);
            if prev != line && prev != NO_LINE {
                self.nt_write(t, prev);
            }
        }
    }

    /// Operation row `row` begins in thread `t`: its context becomes current.
    #[inline(always)]
    fn op_begin(&mut self, t: usize, row: u32) {
        if self.ops_to_window != 0 {
            self.count_op_to_window();
        }
        self.threads[t].ops.push(row);
        let x = self.enter_ctx(t, row);
        self.ctx_ctr[x as usize].ops += 1;
    }

    #[cold]
    #[inline(never)]
    fn count_op_to_window(&mut self) {
        self.ops_to_window -= 1;
        if self.ops_to_window == 0 {
            let skipped: u64 = self.ctx_ctr.iter().map(|c| c.ops).sum();
            self.open_window(format!("operation {}", skipped + 1));
        }
    }

    /// Closes the innermost open operation of row `row` in thread `t` (and
    /// any left open inside it); an end without a begin (or of row 0, an
    /// operation that never began anywhere) is only counted.
    #[inline(always)]
    fn op_end(&mut self, t: usize, x: u32, row: u32) {
        self.ctx_ctr[x as usize].op_ends += 1;
        let stack = &mut self.threads[t].ops;
        // Usually the innermost operation ends.
        if stack.last() == Some(&row) {
            stack.pop();
        } else if let Some(i) = stack.iter().rposition(|&s| s == row) {
            stack.truncate(i);
        } else {
            return;
        }
        let o = stack.last().copied().unwrap_or(0);
        self.enter_ctx(t, o);
    }

    /// The row of `op`, or 0 if it has none yet: named operations by table,
    /// others by a search of the (few) rows.
    #[inline(always)]
    fn op_row(&self, op: OpKind) -> u32 {
        match op {
            OpKind::Other(_) => self.op_kinds.iter().position(|&k| k == Some(op)).map_or(0, |s| s as u32),
            _ => self.op_row_of_code[op.code() as usize & 7],
        }
    }

    /// The row of `op`, made at its first begin.
    #[inline(always)]
    fn op_row_to_begin(&mut self, op: OpKind) -> u32 {
        match self.op_row(op) {
            0 => self.new_op_row(op),
            s => s,
        }
    }

    /// The row of the named operation with code `code` (0-7), made at its
    /// first begin: a table lookup, without turning the code into an
    /// [`OpKind`] and back.
    #[inline(always)]
    fn named_op_row(&mut self, code: u8, begin: bool) -> u32 {
        match self.op_row_of_code[code as usize & 7] {
            0 if begin => self.new_op_row(OpKind::NAMED[code as usize & 7]),
            s => s,
        }
    }

    #[cold]
    #[inline(never)]
    fn new_op_row(&mut self, op: OpKind) -> u32 {
        self.op_kinds.push(Some(op));
        let s = self.op_kinds.len() as u32 - 1;
        if let Some(e) = self.op_row_of_code.get_mut(op.code() as usize) {
            *e = s;
        }
        s
    }

    /// Points thread `t` at the context of operation row `o` (its innermost
    /// open one, 0 if none), creating the context the first time; it becomes
    /// the current context (`t` is the current thread, or about to become
    /// it), which is returned.
    #[inline(always)]
    fn enter_ctx(&mut self, t: usize, o: u32) -> u32 {
        let ts = &mut self.threads[t];
        let x = match ts.ctx_of_op.get(o as usize) {
            Some(&x) if x != NO_CTX => {
                ts.ctx = x;
                x
            }
            _ => self.new_ctx(t, o),
        };
        self.cur_ctx = x;
        x
    }

    #[cold]
    #[inline(never)]
    fn new_ctx(&mut self, t: usize, o: u32) -> u32 {
        let ts = &mut self.threads[t];
        if ts.ctx_of_op.len() <= o as usize {
            ts.ctx_of_op.resize(o as usize + 1, NO_CTX);
        }
        let x = self.ctx_ctr.len() as u32;
        ts.ctx_of_op[o as usize] = x;
        ts.ctx = x;
        self.ctx_ctr.push(Counters::default());
        self.ctx_key.push((t as u32, o));
        x
    }

    fn add_region(&mut self, id: u64, category: Category, base: u64, len: u64, name: &str) {
        self.regions.add(pmsim_traces::Region { id, name: name.to_string(), category, base, len });
        let key = (name.to_string(), category);
        let slot = match self.region_slot_by_key.get(&key) {
            Some(&s) => s,
            None => {
                let s = self.region_rows.len() as u32;
                self.region_rows.push((name.to_string(), Some(category)));
                self.region_ctr.push(Counters::default());
                self.region_slot_by_key.insert(key, s);
                s
            }
        };
        self.region_slot_of_id.insert(id, slot);
        self.hot.fill(HotRegion::default());
    }

    // ---- helpers ------------------------------------------------------------

    /// Adds to the counters of context `x` and region row `r`.
    #[inline(always)]
    fn bump(&mut self, x: u32, r: u32, f: impl Fn(&mut Counters)) {
        f(&mut self.ctx_ctr[x as usize]);
        f(&mut self.region_ctr[r as usize]);
    }

    /// The region row and persist slot of `addr`.
    #[inline(always)]
    fn region_of(&mut self, addr: u64) -> (u32, u8) {
        let h = &self.hot[region_cache_index(addr)];
        if addr.wrapping_sub(h.base) < h.len {
            return (h.slot, h.cat);
        }
        if self.regions.is_empty() {
            return (0, UNMAPPED);
        }
        self.region_of_slow(addr)
    }

    #[inline(never)]
    fn region_of_slow(&mut self, addr: u64) -> (u32, u8) {
        match self.regions.lookup(addr) {
            Some(reg) => {
                let slot = self.region_slot_of_id.get(reg.id).unwrap_or(0);
                let cat = slot_of(reg.category);
                self.hot[region_cache_index(addr)] = HotRegion { base: reg.base, len: reg.len, slot, cat };
                (slot, cat)
            }
            None => (0, UNMAPPED),
        }
    }

    /// The distance tracker of this flush's scope.
    #[inline(always)]
    fn tracker(&mut self, t: usize, line: u64) -> &mut DistanceTracker {
        let key = match self.scope {
            Scope::Thread => t,
            Scope::Dimm => self.optane.dimm_of(line),
            Scope::Global => 0,
        };
        &mut self.trackers[key]
    }

    /// Makes room for thread `t` (thread ids are dense in practice, but any
    /// id up to 65535 is valid) and gives it its first context. Threads are
    /// set up at their first event, so ids never used cost one empty state.
    #[cold]
    fn start_thread(&mut self, t: usize) {
        if self.threads.len() <= t {
            self.threads.resize_with(t + 1, ThreadState::default);
            if self.scope == Scope::Thread {
                let min = self.tracker_min_capacity;
                self.trackers.resize_with(t + 1, || DistanceTracker::with_min_capacity(min));
            }
        }
        self.enter_ctx(t, 0);
    }

    /// Loads or stores the lines of `[addr, addr + size)` in the cache; fills
    /// read PM and evicted dirty lines are written to it.
    #[inline(always)]
    fn touch_lines(&mut self, x: u32, addr: u64, size: u32, write: bool) {
        let (first, last) = line_span(addr, size);
        self.touch_line(x, first << 6, write);
        if last != first {
            self.touch_more_lines(x, first + 1, last, write);
        }
    }

    /// The lines after the first of an access that crosses lines.
    #[inline(never)]
    fn touch_more_lines(&mut self, x: u32, first: u64, last: u64, write: bool) {
        for line in first..=last {
            self.touch_line(x, line << 6, write);
        }
    }

    #[inline(always)]
    fn touch_line(&mut self, x: u32, line: u64, write: bool) {
        let a = self.cache.access(line, write);
        if !a.hit {
            self.optane.read(line);
        }
        if let Some(victim) = a.writeback {
            self.evict(x, victim);
        }
    }

    /// A dirty line evicted from the cache reaches PM: charged to the region of
    /// the line and to the thread and operation whose access evicted it. No
    /// persist time: nobody waits for it.
    #[cold]
    fn evict(&mut self, x: u32, line: u64) {
        let (r, _) = self.region_of(line);
        let w = self.optane.write(line);
        self.bump(x, r, |c| {
            c.evictions += 1;
            c.xpbuffer_hits += w.hit as u64;
            c.sequential_writes += w.sequential as u64;
        });
    }

    /// Writes a line of non-temporal stores to PM; the thread's next fence
    /// waits for it.
    #[inline(never)]
    fn nt_write(&mut self, t: usize, line: u64) {
        let (r, cat) = self.region_of(line);
        let x = self.threads[t].ctx;
        let w = self.optane.write(line);
        let cost = self.costs.regular_write(w.hit, w.evicted);
        self.threads[t].pending = Some((cat, r));
        self.bump(x, r, |c| {
            c.nt_lines += 1;
            c.xpbuffer_hits += w.hit as u64;
            c.sequential_writes += w.sequential as u64;
            c.persist_ps[cat as usize] += cost;
        });
    }

    #[inline(always)]
    fn drain_nt(&mut self, t: usize) {
        let line = std::mem::replace(&mut self.threads[t].nt_line, NO_LINE);
        if line != NO_LINE {
            self.nt_write(t, line);
        }
    }

    // ---- results ------------------------------------------------------------

    /// Events seen so far.
    pub fn events(&self) -> u64 {
        self.ctx_ctr.iter().map(Counters::events).sum()
    }

    /// Bytes held by the reflush-distance trackers (they are what grows with
    /// the trace's distinct lines).
    pub fn tracker_bytes(&self) -> usize {
        self.trackers.iter().map(DistanceTracker::heap_bytes).sum()
    }

    /// The access-map points collected (empty unless `access_map.per_category`
    /// is set).
    pub fn access_map(&self) -> Vec<AccessPoint> {
        self.access.points(|r| self.region_rows[r as usize].0.clone(), self.heap_base)
    }

    /// The figures so far. Lines still in the threads' write-combining buffers
    /// are written to PM first, as the end of the trace ends those runs.
    pub fn report(&mut self) -> Report {
        for t in 0..self.threads.len() {
            if self.full {
                self.drain_nt(t);
            }
        }
        let dimms = if self.full { self.optane.drained_counters() } else { Vec::new() };
        let dirty_at_end = if self.full { self.cache.dirty_lines() } else { 0 };
        let counts = Counts {
            ctx: &self.ctx_ctr,
            regions: &self.region_ctr,
            sites: &self.sites,
            dimms: &dimms,
            cache: &self.cache.counters,
        };
        let mut report = self.report_of(&counts, dirty_at_end);
        if let Some(w) = &self.window {
            let ctx = since_each(&self.ctx_ctr, &w.ctx);
            let regions = since_each(&self.region_ctr, &w.regions);
            let sites = self.sites.since(&w.sites);
            let dimms: Vec<DimmCounters> = dimms.iter().zip(&w.dimms).map(|(n, e)| n.since(e)).collect();
            let cache = self.cache.counters.since(&w.cache);
            let counts = Counts { ctx: &ctx, regions: &regions, sites: &sites, dimms: &dimms, cache: &cache };
            report.window = Some(Box::new(WindowReport {
                from: w.from.clone(),
                events_before: w.events,
                report: self.report_of(&counts, dirty_at_end),
            }));
        }
        report
    }

    /// The report of a set of counters (the whole run's, or a window's).
    fn report_of(&self, k: &Counts<'_>, dirty_at_end: u64) -> Report {
        let mut overall = Counters::default();
        let mut steady = Counters::default();
        let mut per_thread = vec![Counters::default(); self.threads.len()];
        let mut per_op = vec![Counters::default(); self.op_kinds.len()];
        for (c, &(t, o)) in k.ctx.iter().zip(&self.ctx_key) {
            overall.add(c);
            if !self.op_kinds[o as usize].is_some_and(OpKind::is_setup) {
                steady.add(c);
            }
            per_thread[t as usize].add(c);
            per_op[o as usize].add(c);
        }
        let threads = (0..self.threads.len())
            .filter(|&t| per_thread[t].events() > 0)
            .map(|t| ThreadReport {
                tid: t as u32,
                events: per_thread[t].events(),
                stats: Stats::from_counters(&per_thread[t]),
            })
            .collect();
        let regions = self
            .region_rows
            .iter()
            .zip(k.regions)
            .filter(|(_, c)| !c.is_empty())
            .map(|((name, category), c)| RegionReport {
                name: name.clone(),
                category: *category,
                stats: Stats::from_counters(c),
            })
            .collect();
        let ops = self
            .op_kinds
            .iter()
            .zip(&per_op)
            .filter(|(_, c)| !c.is_empty())
            .map(|(k, c)| OpReport { op: k.map_or("none".to_string(), OpKind::name), stats: Stats::from_counters(c) })
            .collect();
        let xpline = self.cfg.optane.xpline_bytes;
        let dimms = k.dimms.iter().enumerate().map(|(i, c)| DimmReport::new(i as u32, c, xpline)).collect();
        let pm = PmReport::new(&overall, k.dimms, xpline);
        let cache = CacheReport::new(&self.cfg.cache, k.cache, dirty_at_end);
        let sites = if self.site_table.is_empty() { Vec::new() } else { k.sites.report(&self.site_table) };
        Report {
            trace: self.trace_name.clone(),
            events: overall.events(),
            threshold: self.threshold,
            scope: self.scope,
            eadr: self.cfg.eadr,
            reflush_only: self.cfg.reflush_only,
            overall: Stats::from_counters(&overall),
            steady: Stats::from_counters(&steady),
            threads,
            regions,
            ops,
            dimms,
            pm,
            cache,
            sites,
            window: None,
            config: self.cfg.clone(),
        }
    }
}

/// The counters a report is made of.
struct Counts<'a> {
    ctx: &'a [Counters],
    regions: &'a [Counters],
    sites: &'a SiteCounters,
    dimms: &'a [DimmCounters],
    cache: &'a CacheCounters,
}

/// A trace replay in mode `M`: the decoder hands stores, flushes and fences
/// straight to the models, without building an [`Event`] to match on again.
struct Replay<'s, const M: u8>(&'s mut Simulator);

impl<'a, const M: u8> Visit<'a> for Replay<'_, M> {
    const SPLIT: bool = true;

    #[inline(always)]
    fn event(&mut self, rec: &Record<'a>) {
        self.0.step_in::<M>(rec.index, rec.tid, &rec.event);
    }

    #[inline(always)]
    fn thread(&mut self, tid: u32) {
        self.0.begin_event(tid);
        self.0.cur_site = 0;
    }

    #[inline(always)]
    fn site(&mut self, site: u32) {
        self.0.cur_site = site;
    }

    #[inline(always)]
    fn store(&mut self, _index: u64, tid: u32, addr: u64, size: u32, _value: Option<&'a [u8]>) {
        let (_, x) = self.0.current(tid);
        self.0.store::<M>(x, addr, size);
    }

    #[inline(always)]
    fn flush(&mut self, index: u64, tid: u32, kind: FlushKind, line: u64) {
        let (t, x) = self.0.current(tid);
        self.0.flush::<M>(t, x, index, kind, line);
    }

    #[inline(always)]
    fn fence(&mut self, _index: u64, tid: u32, _kind: FenceKind) {
        let (t, x) = self.0.current(tid);
        self.0.fence::<M>(t, x);
    }

    #[inline(always)]
    fn named_op(&mut self, _index: u64, tid: u32, code: u8, begin: bool, _n: u64) {
        let (t, x) = self.0.current(tid);
        let row = self.0.named_op_row(code, begin);
        if begin {
            self.0.op_begin(t, row);
        } else {
            self.0.op_end(t, x, row);
        }
    }
}

impl EventSink for Simulator {
    fn event(&mut self, tid: u32, ev: &Event<'_>) -> io::Result<()> {
        self.event_at(tid, 0, ev)
    }

    fn event_at(&mut self, tid: u32, site: u32, ev: &Event<'_>) -> io::Result<()> {
        self.cur_site = site;
        self.step(tid, ev);
        Ok(())
    }

    fn define_site(&mut self, site: &Site) -> io::Result<()> {
        self.site_table.insert(site.clone());
        Ok(())
    }
}
