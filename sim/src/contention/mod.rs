//! Virtual-time replay: the threads of a trace run as if on their own cores
//! and contend for the DIMMs, however many cores recorded the trace.
//!
//! Each thread has a clock that its events advance by their modelled cost;
//! the next event replayed is always the one of the thread with the lowest
//! clock (each thread's own order is kept), so writes reach the shared
//! machine in the order their times say, not in the order the tracer happened
//! to record them. Shared per DIMM:
//!
//! - the memory controller's **write-pending queue** (WPQ): a write is
//!   persistent (ADR) once accepted; a full queue makes the writer wait until
//!   its oldest entry has drained into the DIMM;
//! - the **XPBuffer** ([`crate::xpbuffer`], through [`Optane`]): the DIMM takes
//!   one 64 B write from the queue at a time, slower when its XPLine is not
//!   the previous write's (or the next one); a write whose XPLine (or whose
//!   victim) is still being written to the media waits for it, and evicting a
//!   partly written XPLine waits for the media to do a read-modify-write;
//! - the **media**: one XPLine write (or read) at a time, so completed
//!   XPLines queue behind each other.
//!
//! Shared per memory controller (`timing.imc_dimms` DIMMs each): the
//! **writers**, the threads with writes pending at its DIMMs, whether in a
//! WPQ or still waiting for an entry of a full one (a thread blocked on a
//! full queue writes to the DIMM all the same: counting only the queue's
//! entries capped the writers at `wpq_entries` / writes per thread, and the
//! bandwidth of one DIMM stopped falling once many threads filled its
//! queue). Each other writer at the controller when a write arrives adds
//! `timing.writer_ns` to that write's drain. FAST '20 (§5.3) measured that per-DIMM write bandwidth falls
//! as more threads write to the DIMMs while write amplification stays near 1,
//! and attributes it to head-of-line blocking in the controller's queues;
//! this term is that fall, with its one constant fitted to Fig. 4.
//!
//! A **reflush** (a flush of a dirty line that the same thread flushed fewer
//! than `reflush.threshold` distinct lines ago) waits for the line's previous
//! write, still on its way through the DIMM: it is persistent no sooner than
//! `latency.reflush_ns[0]` after that write's issue (`reflush.timed`, the
//! default), so time spent in between (other flushes, the CPU's work) is
//! taken off the wait. NVAlloc (ASPLOS '22, §3.1) measured 800 ns at
//! distance 0 falling to 500 ns at distance 3 with flushes back to back;
//! the fall is what the time between them gives (`pmsim calibrate`'s
//! `reflush` points). With `reflush.timed = false` (a switch) the wait is
//! `latency.reflush_ns` by distance from the reflush's own issue, as long
//! after an operation's CPU work as after none.
//!
//! Reflush distances are counted in `reflush.scope` (per thread, per DIMM or
//! over all threads), as the simulator counts them.
//!
//! **The cache** (`cache`, the simulator's [`CpuCache`]): stores and loads
//! go through it, a flush writes its line only if the cache holds it dirty,
//! and with `timing.writebacks` a dirty line it evicts to make room is
//! written to its DIMM like a flushed one — nobody's fence waits for it, but
//! it takes one of the evicting thread's write buffers (below) until its
//! DIMM accepts it, and the DIMMs' time. So a thread that fills many lines
//! it never flushes (zeroing large blocks, say) runs at the speed the DIMMs
//! take them, not at the CPU's, as on a machine whose memory is Optane.
//!
//! Under **eADR** (`eadr = true`) the caches are in the persistence domain:
//! flushes cost nothing and write nothing, as the simulator treats them and
//! as NVAlloc §6.7 emulates eADR (by removing the clwbs); non-temporal
//! stores and the cache's evictions still go to the DIMMs.
//!
//! Per thread, the core's **write buffers** (`timing.write_buffers`): a
//! write (a flush of a dirty line, a non-temporal line) holds one from its
//! issue until a WPQ accepts it, and a thread with all of them held waits
//! for the first to be freed. Without fences this bounds a thread's writes in
//! flight, so one thread streaming writes is bound by their latency, as the
//! fence-free bandwidth kernels of FAST '20 measured.
//!
//! A fence waits until every write its thread issued before it was accepted.
//! So one thread is bound by latency, a few fill the DIMMs, and many slow
//! them down: their writes queue behind each other's at the controller, and
//! interleave at each DIMM, so fewer follow a write to the same XPLine, and
//! XPLines evicted half written cost the media twice.
//!
//! The trace is a stream in recorded order. The scheduler holds back the
//! events of threads that are ahead in virtual time, at most
//! `timing.reorder_events` of them; when that bound is reached (a thread that
//! is behind has no event for a long stretch: it was blocked, e.g. in a join)
//! the lowest-clock thread that has events goes on and the blocked threads'
//! clocks move up to it (counted as `forced`). Memory stays bounded by that
//! bound, the threads and the distinct lines, never by the trace's length.
//!
//! **CPU work** ([`CpuCosts`], [`Contention::set_cpu`]): the trace holds the
//! persistent accesses only, so without more a thread's clock advances by
//! `timing.store_ns` per store or load and nothing for the allocator's other
//! work, and an allocator that persists little comes out faster than it
//! runs on DRAM. Given the CPU time of each kind of operation and of the work
//! between operations, measured natively with flushes off (a sweep measures
//! them in the same point), each outermost operation advances its thread's
//! clock by them when it begins, and stores and loads cost nothing more
//! (their CPU time is in the measurement).
//!
//! **Locks** (`timing.locks`): a thread that takes a lock of the program
//! (the trace's `lock:acquire` marker) while another holds it in the replay
//! waits until that one lets it go (its `lock:release`), and is held back
//! meanwhile as at a join; of the threads waiting, the one whose clock is
//! lowest takes it next. The order is the replay's time, not the trace's:
//! a trace recorded with more threads than cores holds each thread's
//! takings in runs of its time slices, which no machine with a core per
//! thread would see. Inside, its clock advances by what the
//! trace holds there and by the CPU work the native run did while holding
//! it (`CpuCosts::lock_ns`, taken out of the operation's own CPU time, which
//! is charged as the operation begins): so an allocator that serialises its
//! threads on one lock runs one thread at a time through it, as it did.
//!
//! Where each thread's time went ([`Parts`]): every advance of a clock is
//! charged to one part, so the parts of a thread add up to its run time:
//! flushes and the waits for them by the category of the flushed line's
//! region (the trace's regions, as the simulator reads them), a fence's wait
//! to the category of the flush it orders (as the simulator charges it), the
//! CPU work inside and between operations, stores, and the time a blocked
//! thread was moved on (see below).
//!
//! Costs are integer picoseconds, and nothing depends on the host (no hash
//! seeds, no wall clock): the same trace and CPU costs give the same figures.

use crate::cache::{lines, CpuCache};
use crate::config::{Config, Scope};
use crate::distance::DistanceTracker;
use crate::fastmap::U64Map;
use crate::optane::Optane;
use crate::stats::{BARE_FENCE, PERSIST_SLOTS, UNMAPPED};
use pmsim_traces::{
    Event, EventSink, FlushKind, Record, RegionMap, TraceError, TraceHeader, TraceReader, TraceTotals, Visit,
    JOIN_MARKER, LOCK_ACQUIRE_MARKER, LOCK_RELEASE_MARKER, SPAWN_MARKER,
};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io::{self, Read};

mod threads;

/// No line pending in a thread's write-combining buffer.
const NO_LINE: u64 = u64::MAX;
/// A trace thread id that names no replayed thread yet.
const NO_SLOT: u32 = u32::MAX;

/// Writes a DIMM keeps pending, per WPQ entry: a bound on memory, not a
/// constant of the machine. Only a thread that streams writes without a
/// fence outruns the DIMM for long; past the bound the oldest waiting
/// writes stop counting their threads as writers (their acceptance times
/// are already fixed). The calibration benchmarks stay below 2 per entry.
const PENDING_PER_ENTRY: usize = 64;

/// What a run's work costs the CPU, per operation, nanoseconds: measured
/// natively with flushes off (see the module doc).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuCosts {
    /// CPU time inside one outermost operation, by the trace's operation code
    /// (0 `malloc`, 1 `free`, …; codes past the end cost nothing).
    pub op_ns: Vec<f64>,
    /// CPU time between operations (the workload's own work), charged to
    /// each outermost operation as it begins.
    pub outside_ns: f64,
    /// Of `op_ns`, the time the operation held traced locks, by operation
    /// code: charged inside the locks, shared evenly among those it takes.
    #[serde(default)]
    pub lock_ns: Vec<f64>,
    /// Traced locks an operation takes, by operation code.
    #[serde(default)]
    pub locks: Vec<f64>,
}

/// The parts of a thread's time (see the module doc): indices into
/// [`Thread::parts`], the first [`PERSIST_SLOTS`] the simulator's persist
/// slots (meta, wal, log, data, unmapped, fence).
const ALLOC_CPU: usize = PERSIST_SLOTS;
const OTHER_CPU: usize = PERSIST_SLOTS + 1;
const STORES: usize = PERSIST_SLOTS + 2;
const WAIT: usize = PERSIST_SLOTS + 3;
const LOCK_WAIT: usize = PERSIST_SLOTS + 4;
const PARTS: usize = PERSIST_SLOTS + 5;
/// An event whose time [`Contention::exec_in`] charged part by part itself.
const CHARGED: usize = PARTS;

/// Where the threads' time went, summed over the threads, nanoseconds: the
/// parts add up to the sum of the threads' run times.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Parts {
    /// Flushes of metadata, and the waits for them (their fences' too).
    pub meta: f64,
    /// … of write-ahead-log lines.
    pub wal: f64,
    /// … of bookkeeping-log lines.
    pub log: f64,
    /// … of user data.
    pub data: f64,
    /// … of lines outside every region.
    pub unmapped: f64,
    /// Fences that ordered no flush.
    pub fence: f64,
    /// CPU work inside the allocator's operations ([`CpuCosts::op_ns`]).
    pub alloc_cpu: f64,
    /// CPU work between operations ([`CpuCosts::outside_ns`]).
    pub other_cpu: f64,
    /// Stores and loads at `timing.store_ns` (nothing when CPU costs are given).
    pub stores: f64,
    /// Time a thread with no events yet was moved on to the others' clock.
    pub wait: f64,
    /// Time threads waited to take a lock another held.
    pub lock_wait: f64,
}

impl Parts {
    /// All of them: the threads' run times, summed.
    pub fn total(&self) -> f64 {
        self.meta
            + self.wal
            + self.log
            + self.data
            + self.unmapped
            + self.fence
            + self.alloc_cpu
            + self.other_cpu
            + self.stores
            + self.wait
            + self.lock_wait
    }

    fn of(ps: &[u64; PARTS]) -> Parts {
        let ns = |i: usize| ps[i] as f64 / 1000.0;
        Parts {
            meta: ns(0),
            wal: ns(1),
            log: ns(2),
            data: ns(3),
            unmapped: ns(UNMAPPED as usize),
            fence: ns(BARE_FENCE as usize),
            alloc_cpu: ns(ALLOC_CPU),
            other_cpu: ns(OTHER_CPU),
            stores: ns(STORES),
            wait: ns(WAIT),
            lock_wait: ns(LOCK_WAIT),
        }
    }
}

/// The timing constants in integer picoseconds.
#[derive(Clone, Copy, Debug)]
struct Costs {
    store: u64,
    /// CPU time of an outermost operation by code (0-7) outside its locks,
    /// and between operations.
    cpu_op: [u64; 8],
    /// CPU time inside each lock an operation of that code takes.
    cpu_lock: [u64; 8],
    /// `timing.locks`.
    locks: bool,
    cpu_outside: u64,
    flush_issue: u64,
    flush_to_wpq: u64,
    nt_to_wpq: u64,
    fence: u64,
    dimm_write: u64,
    dimm_switch: u64,
    writer: u64,
    media_write: u64,
    media_read: u64,
    /// A reflush's time until its write is persistent, by reflush distance
    /// (`latency.reflush_ns`); distances from `reflush.threshold` on are not
    /// reflushes.
    reflush: [u64; 8],
    reflush_len: usize,
    threshold: u64,
    /// `reflush.timed` (the default): a reflush waits `reflush[0]` from its
    /// line's previous write, not `reflush[distance]` from its own issue.
    timed: bool,
    /// `timing.write_buffers` (0: unbounded).
    buffers: usize,
}

/// The lines of a tracker's latest writes and when they were issued (a
/// ring of [`RecentWrites::LEN`]): a reflush under `reflush.timed` finds its
/// line's previous write here; one further back waits by distance.
#[derive(Clone, Copy, Debug, Default)]
struct RecentWrites {
    lines: [(u64, u64); RecentWrites::LEN],
    next: usize,
    len: usize,
}

impl RecentWrites {
    const LEN: usize = 8;

    /// When the latest write of `line` held here was issued.
    fn issued(&self, line: u64) -> Option<u64> {
        (1..=self.len).map(|k| self.lines[(self.next + Self::LEN - k) % Self::LEN]).find(|w| w.0 == line).map(|w| w.1)
    }

    fn push(&mut self, line: u64, issue: u64) {
        self.lines[self.next] = (line, issue);
        self.next = (self.next + 1) % Self::LEN;
        self.len = (self.len + 1).min(Self::LEN);
    }
}

/// One reflush-distance tracker and, beside it, the issue times of its
/// latest writes (read under `reflush.timed`).
#[derive(Default)]
struct Tracker {
    distance: DistanceTracker,
    recent: RecentWrites,
}

/// An event as the scheduler holds it back (what the timing needs of it).
#[derive(Clone, Copy, Debug)]
enum Ev {
    Store {
        addr: u64,
        size: u32,
    },
    Load {
        addr: u64,
        size: u32,
    },
    Flush {
        line: u64,
        kind: FlushKind,
        /// The persist slot of the line's region.
        cat: u8,
    },
    Fence,
    Nt {
        addr: u64,
        size: u32,
        cat: u8,
    },
    OpBegin {
        code: u8,
        setup: bool,
    },
    OpEnd,
    End,
    /// The thread spawns replayed thread `child` (a spawn marker): the
    /// child starts at this thread's clock.
    Spawn {
        child: u32,
    },
    /// The thread waited for replayed thread `thread` to end (a join
    /// marker): it goes on from that end, or from its own clock if later.
    Join {
        thread: u32,
    },
    /// The thread takes lock `lock` (an index into [`Contention::locks`]).
    Acquire {
        lock: u32,
    },
    /// The thread lets lock `lock` go.
    Release {
        lock: u32,
    },
    /// Counted, costs nothing (regions, markers, thread starts).
    Other,
}

impl Ev {
    /// The event, with the category of the region its line lies in (as the
    /// regions stand when it is recorded).
    fn of(ev: &Event<'_>, regions: &RegionMap) -> Ev {
        let cat = |addr: u64| category(regions, addr);
        match *ev {
            Event::Store { addr, size, .. } => Ev::Store { addr, size },
            Event::Load { addr, size } => Ev::Load { addr, size },
            Event::Flush { kind, line } => Ev::Flush { line: line & !63, kind, cat: cat(line) },
            Event::Fence { .. } => Ev::Fence,
            Event::NtStore { addr, size, .. } => Ev::Nt { addr, size, cat: cat(addr) },
            Event::OpBegin { op, .. } => Ev::OpBegin { code: op.code().min(255) as u8, setup: op.is_setup() },
            Event::OpEnd { .. } => Ev::OpEnd,
            Event::ThreadEnd => Ev::End,
            _ => Ev::Other,
        }
    }
}

#[derive(Clone, Debug)]
struct Thread {
    /// The trace's id of the thread.
    tid: u32,
    started_at: u64,
    /// Inside a setup operation ([`pmsim_traces::OpKind::is_setup`]), and
    /// the time spent in them: not part of the run's operations.
    in_setup: bool,
    setup: u64,
    clock: u64,
    /// When every write issued since the last fence is accepted.
    persisted_at: u64,
    fence_wait: u64,
    /// Dirty lines the cache evicted for its accesses (written to the DIMMs).
    writebacks: u64,
    depth: u32,
    /// The code of its outermost operation (what its locks' CPU time is).
    op: u8,
    ops: u64,
    events: u64,
    nt_line: u64,
    reflushes: u64,
    /// When each of its writes in flight (issued, not yet accepted by a
    /// WPQ) will be accepted: at most `timing.write_buffers` of them.
    inflight: Vec<u64>,
    /// The persist slot of its latest write since its last fence (the
    /// fence's wait is charged there), or [`BARE_FENCE`].
    pending_cat: u8,
    /// Where its time went (see [`Parts`]).
    parts: [u64; PARTS],
    started: bool,
    live: bool,
    /// Not live, and not ended ([`Thread::ended`]): it waits for its spawn
    /// to be replayed, or for the end of a thread it joins
    /// ([`Contention::joins`]).
    held: bool,
    queue: VecDeque<Ev>,
}

impl Thread {
    /// Its end is replayed (and nothing of a successor with its id is
    /// queued): a started thread stops being started only there.
    fn ended(&self) -> bool {
        !self.started && self.events > 0
    }
}

impl Default for Thread {
    fn default() -> Thread {
        Thread {
            tid: 0,
            started_at: 0,
            in_setup: false,
            setup: 0,
            clock: 0,
            persisted_at: 0,
            fence_wait: 0,
            writebacks: 0,
            depth: 0,
            op: 0,
            ops: 0,
            events: 0,
            nt_line: 0,
            reflushes: 0,
            inflight: Vec::new(),
            pending_cat: BARE_FENCE,
            parts: [0; PARTS],
            started: false,
            live: false,
            held: false,
            queue: VecDeque::new(),
        }
    }
}

/// One DIMM's shared state in time.
#[derive(Clone, Debug)]
struct DimmTime {
    /// The writes not yet drained into the DIMM, oldest first: their
    /// drain-done times (ascending: the DIMM drains one at a time) and
    /// threads. The oldest `cap` hold the WPQ's entries; the others wait
    /// for one, and their threads are writers at the controller all the
    /// same. At most [`PENDING_PER_ENTRY`] × `cap` are kept.
    pending: VecDeque<(u64, u32)>,
    /// WPQ entries (`timing.wpq_entries`).
    cap: usize,
    /// When the DIMM can take the next write from the queue.
    drain_free: u64,
    /// When the media is free.
    media_free: u64,
    /// Per XPBuffer entry: when its XPLine's latest write-back ends.
    wb_end: Vec<u64>,
    busy: u64,
    wpq_wait: u64,
    media_wait: u64,
}

impl DimmTime {
    /// The oldest write has drained: it leaves, and its memory controller's count.
    #[inline(always)]
    fn pop(&mut self, imc: &mut Imc) {
        let (_, t) = self.pending.pop_front().expect("a pending write");
        imc.leave(t as usize);
    }
}

/// Who has writes pending at one memory controller (over its DIMMs: in a WPQ or waiting for an entry).
#[derive(Clone, Debug, Default)]
struct Imc {
    /// Writes pending per thread id.
    queued: Vec<u32>,
    /// Threads with any.
    writers: u32,
}

impl Imc {
    /// The threads other than `t` with writes pending.
    #[inline(always)]
    fn others(&mut self, t: usize) -> u32 {
        if t >= self.queued.len() {
            self.queued.resize(t + 1, 0);
        }
        self.writers - (self.queued[t] > 0) as u32
    }

    #[inline(always)]
    fn enter(&mut self, t: usize) {
        self.writers += (self.queued[t] == 0) as u32;
        self.queued[t] += 1;
    }

    #[inline(always)]
    fn leave(&mut self, t: usize) {
        self.queued[t] -= 1;
        self.writers -= (self.queued[t] == 0) as u32;
    }
}

/// The persist slot of the region `addr` lies in ([`UNMAPPED`]: none).
fn category(regions: &RegionMap, addr: u64) -> u8 {
    regions.lookup(addr).map_or(UNMAPPED, |r| r.category as u8)
}

/// One lock of the program in time: the replayed thread holding it
/// ([`NO_SLOT`]: none) and when it was last let go.
#[derive(Clone, Copy, Debug)]
struct LockTime {
    holder: u32,
    free_at: u64,
}

/// Per-thread figures of a contention replay.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThreadTime {
    pub tid: u32,
    pub events: u64,
    /// Completed outermost operations.
    pub ops: u64,
    /// The clock it started at (its creator's, see [`Contention::push`]).
    pub start_ns: f64,
    /// The thread's clock at its last event.
    pub end_ns: f64,
    /// Time its fences waited for its writes to be accepted.
    pub fence_wait_ns: f64,
    /// Flushes of a dirty line at a reflush distance below the threshold.
    pub reflushes: u64,
    /// Dirty lines the cache evicted for its accesses, written to the DIMMs.
    pub writebacks: u64,
}

/// Per-DIMM figures of a contention replay.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DimmTimeReport {
    pub dimm: u32,
    /// 64 B writes from the memory controller.
    pub writes: u64,
    pub media_writes: u64,
    /// Read-modify-writes (partly written XPLines evicted).
    pub rmw: u64,
    /// Time the media was writing or reading.
    pub media_busy_ns: f64,
    /// Time writers waited for a free write-pending-queue entry.
    pub wpq_wait_ns: f64,
    /// Time writes waited in the DIMM for the media.
    pub media_wait_ns: f64,
}

/// What a contention replay measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ContentionReport {
    pub events: u64,
    pub threads: Vec<ThreadTime>,
    /// The latest thread clock: the estimated run time.
    pub makespan_ns: f64,
    /// Time the threads spent in setup operations (heap creation, close,
    /// recovery: [`pmsim_traces::OpKind::is_setup`]). They run before the
    /// other threads start and after they end, so the run's operations take
    /// the makespan less this.
    pub setup_ns: f64,
    /// Completed outermost operations, all threads, but the setup ones.
    pub ops: u64,
    /// `ops` over the makespan without the setup: what a benchmark that
    /// times its operations measures.
    pub ops_per_s: f64,
    /// Bytes the memory controller wrote to the DIMMs.
    pub write_bytes: u64,
    pub write_gb_per_s: f64,
    pub media_write_bytes: u64,
    /// Media bytes written / bytes the memory controller wrote (FAST '20).
    pub write_amplification: f64,
    /// Events replayed past a thread that had none yet (see the module doc).
    pub forced: u64,
    /// Where the threads' time went, summed over them ([`Parts`]).
    pub parts_ns: Parts,
    /// The CPU costs the clocks were advanced by (`None`: the trace's
    /// stores and loads at `timing.store_ns` only).
    pub cpu: Option<CpuCosts>,
    pub dimms: Vec<DimmTimeReport>,
}

/// The virtual-time replay. Feed it events in recorded order ([`Contention::push`],
/// or as an [`EventSink`], or [`Contention::replay`] a trace), then ask for
/// [`Contention::report`].
pub struct Contention {
    c: Costs,
    xpline: u64,
    reorder: usize,
    optane: Optane,
    dimms: Vec<DimmTime>,
    /// The memory controllers; DIMM `d` is on controller `d / imc_dimms`.
    imcs: Vec<Imc>,
    imc_dimms: usize,
    threads: Vec<Thread>,
    /// Ids of the threads that started and have not ended.
    live: Vec<u32>,
    /// The CPU cache: which lines are cached, and dirty.
    cache: CpuCache,
    /// `timing.writebacks`: the dirty lines it evicts are written.
    writebacks: bool,
    /// Reflush distances: one tracker per thread, per DIMM or in all, by `scope`.
    scope: Scope,
    trackers: Vec<Tracker>,
    /// Flushes write nothing (the caches are persistent).
    eadr: bool,
    buffered: usize,
    forced: u64,
    /// The clock of the latest event replayed: where a new thread starts
    /// when the trace names no thread that started it.
    now: u64,
    /// The trace's tracer ran one thread at a time ([`Contention::set_header`]).
    serialized: bool,
    /// The thread of the latest event pushed other than a thread's start or
    /// end, kept in a serialized trace only: there, the thread that started
    /// the next one to start (see [`Contention::push`]).
    last: Option<usize>,
    /// The threads held at a join, each with the thread it waits for.
    joins: Vec<(usize, usize)>,
    /// The program's locks ([`Ev::Acquire`]), and each lock's index by id.
    locks: Vec<LockTime>,
    lock_ids: U64Map,
    /// The threads held at a lock: (thread, lock).
    lock_waits: Vec<(usize, u32)>,
    /// Per trace thread id, the replayed thread it names now ([`NO_SLOT`]:
    /// none yet): a new one for each thread a spawn marker names, as the
    /// replay may still hold the id's previous thread (see
    /// [`Contention::push`]).
    slots: Vec<u32>,
    /// Per trace thread id, the replayed thread it named at its latest end
    /// ([`NO_SLOT`]: none): what a join marker naming the id waits for,
    /// unless the joiner spawned a thread of that id ([`Contention::spawns`]).
    ended: Vec<u32>,
    /// Threads spawned and not joined yet: (creator, trace id, thread).
    /// A join names the latest its joiner spawned with that id: the id may
    /// have passed to a thread another one spawned, and ended too, before
    /// the join was recorded.
    spawns: Vec<(usize, u32, u32)>,
    /// The trace's regions as recorded so far (for the parts' categories).
    regions: RegionMap,
    cpu: Option<CpuCosts>,
}

impl Contention {
    /// A contention model with the DIMMs of `cfg.optane` and the costs of
    /// `cfg.timing` (validated first).
    pub fn new(cfg: &Config) -> Result<Contention, String> {
        cfg.validate()?;
        let t = &cfg.timing;
        let ps = |ns: f64| (ns * 1000.0).round() as u64;
        let q = t.wpq_entries as usize;
        let entries = cfg.optane.xpbuffer_entries as usize;
        let mut reflush = [0u64; 8];
        let reflush_len = cfg.latency.reflush_ns.len().min(8);
        for (r, &ns) in reflush.iter_mut().zip(&cfg.latency.reflush_ns) {
            *r = ps(ns);
        }
        let dimm = DimmTime {
            pending: VecDeque::new(),
            cap: q,
            drain_free: 0,
            media_free: 0,
            wb_end: vec![0; entries],
            busy: 0,
            wpq_wait: 0,
            media_wait: 0,
        };
        Ok(Contention {
            c: Costs {
                store: ps(t.store_ns),
                cpu_op: [0; 8],
                cpu_lock: [0; 8],
                locks: t.locks,
                cpu_outside: 0,
                flush_issue: ps(t.flush_issue_ns),
                flush_to_wpq: ps(t.flush_to_wpq_ns),
                nt_to_wpq: ps(t.nt_to_wpq_ns),
                fence: ps(t.fence_ns),
                dimm_write: ps(t.dimm_write_ns),
                dimm_switch: ps(t.dimm_switch_ns),
                writer: ps(t.writer_ns),
                media_write: ps(t.media_write_ns),
                media_read: ps(t.media_read_ns),
                reflush,
                reflush_len,
                threshold: cfg.reflush.threshold,
                timed: cfg.reflush.timed,
                buffers: t.write_buffers as usize,
            },
            xpline: cfg.optane.xpline_bytes,
            reorder: t.reorder_events as usize,
            optane: Optane::new(&cfg.optane),
            dimms: vec![dimm; cfg.optane.dimms as usize],
            imcs: vec![Imc::default(); cfg.optane.dimms.div_ceil(t.imc_dimms) as usize],
            imc_dimms: t.imc_dimms as usize,
            threads: Vec::new(),
            live: Vec::new(),
            cache: CpuCache::new(&cfg.cache),
            writebacks: t.writebacks,
            scope: cfg.reflush.scope,
            trackers: match cfg.reflush.scope {
                Scope::Thread => Vec::new(),
                Scope::Dimm => (0..cfg.optane.dimms).map(|_| Tracker::default()).collect(),
                Scope::Global => vec![Tracker::default()],
            },
            eadr: cfg.eadr,
            buffered: 0,
            forced: 0,
            now: 0,
            serialized: false,
            last: None,
            joins: Vec::new(),
            locks: Vec::new(),
            lock_ids: U64Map::new(),
            lock_waits: Vec::new(),
            slots: Vec::new(),
            ended: Vec::new(),
            spawns: Vec::new(),
            regions: RegionMap::default(),
            cpu: None,
        })
    }

    /// Takes what the replay needs of a trace's header (a replayed trace's
    /// is taken by [`Contention::replay`]): its regions (later region events
    /// are followed as they come), whether its tracer ran one thread at a
    /// time ([`Tracer::one_thread_at_a_time`]), so that its recorded order
    /// tells which thread started which, and its heap's base, from which the
    /// DIMMs interleave ([`Optane::set_origin`]).
    pub fn set_header(&mut self, header: &TraceHeader) {
        self.regions = RegionMap::new(&header.regions);
        self.serialized = header.tracer.one_thread_at_a_time();
        self.optane.set_origin(header.heap.base);
    }

    /// Advances each thread's clock by the CPU's work too (see the module
    /// doc): `cpu.op_ns` per outermost operation by kind and
    /// `cpu.outside_ns` per operation; stores and loads cost nothing more.
    /// Call before the first event.
    pub fn set_cpu(&mut self, cpu: &CpuCosts) {
        let ps = |ns: f64| (ns.max(0.0) * 1000.0).round() as u64;
        let at = |v: &[f64], k: usize| v.get(k).copied().unwrap_or(0.0);
        for k in 0..self.c.cpu_op.len() {
            let (op, n) = (at(&cpu.op_ns, k), at(&cpu.locks, k));
            // Held time counts only with locks taken to charge it in.
            let held = if n > 0.0 { at(&cpu.lock_ns, k).clamp(0.0, op.max(0.0)) } else { 0.0 };
            self.c.cpu_op[k] = ps(op - held);
            self.c.cpu_lock[k] = if n > 0.0 { ps(held / n) } else { 0 };
        }
        self.c.cpu_outside = ps(cpu.outside_ns);
        self.c.store = 0;
        self.cpu = Some(cpu.clone());
    }

    /// Replays a whole trace.
    pub fn replay<R: Read>(&mut self, reader: &mut TraceReader<R>) -> Result<TraceTotals, TraceError> {
        self.set_header(reader.header());
        while let Some(block) = reader.next_block()? {
            block.visit(&mut Feed(self))?;
        }
        Ok(reader.totals())
    }

    /// The next event of the trace (recorded order), of thread `tid`.
    ///
    /// A thread that a spawn marker ([`SPAWN_MARKER`]) names starts when the
    /// marker is replayed, at its creator's clock, and a thread that a join
    /// marker ([`JOIN_MARKER`]) says waited for another goes on from that
    /// thread's end: until then neither holds the other threads back. Both
    /// come from a tracer that runs one thread at a time (Valgrind's: PMDK's
    /// traces), whose order says neither.
    ///
    /// Any other thread starts at the clock of the latest event replayed,
    /// or, in a trace of one thread at a time, at the clock of its guessed
    /// creator: the thread of the latest event recorded before the start
    /// (other than a start or an end), which is often a thread that ran
    /// between the creator's last event and the spawn. In such a trace the
    /// latest event replayed can lie far behind: a thread idle from start to
    /// end (a timer thread of the program's) holds back every other one, so
    /// a Larson thread would run beside the thread that spawned it at its
    /// end, not after it, and the workers beside the main thread's set-up.
    /// pmsim's own tracer records threads that run at once in no such order,
    /// and reuses a thread's id for its successor.
    ///
    /// A thread id names one thread at a time, but a replayed thread may end
    /// after its id's next thread started (Valgrind reuses the id of a thread
    /// that ended): each spawned thread is a replayed thread of its own
    /// ([`Contention::slots`]).
    #[inline]
    pub fn push(&mut self, tid: u32, ev: &Event<'_>) {
        let t = self.slot(tid);
        if !self.threads[t].started {
            self.start(t, self.last);
        }
        let ev = match *ev {
            Event::Marker { id, label } if label == SPAWN_MARKER => Ev::Spawn { child: self.spawned(t, id as u32) },
            Event::Marker { id, label } if label == JOIN_MARKER => match self.joined(t, id as u32) {
                Some(x) => Ev::Join { thread: x },
                None => Ev::Other,
            },
            Event::Marker { id, label } if label == LOCK_ACQUIRE_MARKER => self.acquired(id),
            Event::Marker { id, label } if label == LOCK_RELEASE_MARKER => self.released(id),
            _ => {
                if let Event::ThreadEnd = ev {
                    self.set_ended(tid, t);
                }
                if self.serialized && !matches!(ev, Event::ThreadStart | Event::ThreadEnd) {
                    self.last = Some(t);
                }
                if self.regions.apply(ev) {
                    Ev::Other
                } else {
                    Ev::of(ev, &self.regions)
                }
            }
        };
        self.push_ev(t, ev)
    }

    #[inline]
    fn push_ev(&mut self, t: usize, ev: Ev) {
        let th = &self.threads[t];
        if th.queue.is_empty() && !th.held && self.is_lowest(t) && !self.blocks(t, ev) {
            self.exec(t, ev);
            if self.buffered > 0 {
                self.run(false);
            }
        } else {
            self.threads[t].queue.push_back(ev);
            self.buffered += 1;
            self.run(false);
        }
    }

    /// Whether `t`'s clock is the lowest of the live threads.
    #[inline(always)]
    fn is_lowest(&self, t: usize) -> bool {
        let c = self.threads[t].clock;
        self.live.iter().all(|&o| self.threads[o as usize].clock >= c)
    }

    /// Replays held-back events while the lowest-clock live thread has one
    /// (or, with `force` or past the bound, while any thread has one).
    fn run(&mut self, force: bool) {
        while self.buffered > 0 && self.step(force) {}
    }

    /// Replays held-back events, forced where need be, until thread `t`
    /// has none.
    fn settle(&mut self, t: usize) {
        while !self.threads[t].queue.is_empty() && self.step(true) {}
    }

    /// Replays one held-back event: the lowest-clock live thread's, or (with
    /// `force` or past the bound) the lowest-clock one of the threads that
    /// have any, moving the threads without events up to its clock. False
    /// when none may go.
    fn step(&mut self, force: bool) -> bool {
        let m = self.lowest(|_| true);
        if let Some(m) = m.filter(|&m| !self.threads[m].queue.is_empty()) {
            self.pop_exec(m);
            return true;
        }
        if !(force || self.buffered > self.reorder) {
            return false;
        }
        let Some(k) = self.lowest(|th| !th.queue.is_empty()) else {
            return self.release_all();
        };
        let ck = self.threads[k].clock;
        for &o in &self.live {
            let th = &mut self.threads[o as usize];
            if th.queue.is_empty() && th.clock < ck {
                th.parts[WAIT] += ck - th.clock;
                th.clock = ck;
            }
        }
        self.forced += 1;
        self.pop_exec(k);
        true
    }

    /// The live thread with the lowest clock among those `f` accepts (ties:
    /// the first started).
    fn lowest(&self, f: impl Fn(&Thread) -> bool) -> Option<usize> {
        let mut best: Option<(u64, usize)> = None;
        for &o in &self.live {
            let th = &self.threads[o as usize];
            if f(th) && best.is_none_or(|(c, _)| th.clock < c) {
                best = Some((th.clock, o as usize));
            }
        }
        // Ended threads never hold events back, but a thread may end and
        // have events queued after its end (a reused id): still replay them.
        best.map(|b| b.1).or_else(|| self.threads.iter().position(|th| f(th) && !th.held && !th.queue.is_empty()))
    }

    fn pop_exec(&mut self, t: usize) {
        let next = *self.threads[t].queue.front().expect("a thread with events");
        if self.blocks(t, next) {
            return;
        }
        let ev = self.threads[t].queue.pop_front().expect("a thread with events");
        self.buffered -= 1;
        self.exec(t, ev);
    }

    /// Event `ev` of thread `t`, at the thread's clock; the time it took is
    /// charged to its part.
    #[inline(always)]
    fn exec(&mut self, t: usize, ev: Ev) {
        let before = self.threads[t].clock;
        let part = self.exec_in(t, ev);
        let th = &mut self.threads[t];
        if part < PARTS {
            th.parts[part] += th.clock - before;
        }
        if th.in_setup {
            th.setup += th.clock - before;
        }
    }

    /// [`Contention::exec`]'s work: returns the part the time goes to.
    #[inline(always)]
    fn exec_in(&mut self, t: usize, ev: Ev) -> usize {
        let c = self.c;
        self.now = self.threads[t].clock;
        self.threads[t].events += 1;
        match ev {
            Ev::Store { addr, size } => self.access(t, addr, size, true),
            Ev::Load { addr, size } => self.access(t, addr, size, false),
            Ev::Flush { line, kind, cat } => {
                // Under eADR the flush is not there: NVAlloc §6.7 emulates
                // eADR by removing the clwbs, so they cost not even their issue.
                if self.eadr {
                    return cat as usize;
                }
                let issue = self.threads[t].clock + c.flush_issue;
                self.threads[t].clock = issue;
                let key = match self.scope {
                    Scope::Thread => t,
                    Scope::Dimm => self.optane.dimm_of(line),
                    Scope::Global => 0,
                };
                let distance = self.trackers[key].distance.flush(line);
                if self.cache.flush(line, kind != FlushKind::Clwb) {
                    let issue = self.acquire(t).max(issue);
                    let mut accepted = self.write(t, line, issue + c.flush_to_wpq);
                    self.release(t, accepted);
                    // A reflush: the line's previous write is still on its
                    // way through the DIMM, and the new one waits for it
                    // (NVAlloc §3.1 measured the latency).
                    if let Some(dist) = distance.filter(|&x| x < c.threshold && c.reflush_len > 0) {
                        let by_distance = issue + c.reflush[(dist as usize).min(c.reflush_len - 1)];
                        let ready = match c.timed.then(|| self.trackers[key].recent.issued(line)).flatten() {
                            Some(prev) => prev + c.reflush[0],
                            None => by_distance,
                        };
                        accepted = accepted.max(ready);
                        self.threads[t].reflushes += 1;
                    }
                    if c.timed {
                        self.trackers[key].recent.push(line, issue);
                    }
                    let th = &mut self.threads[t];
                    th.persisted_at = th.persisted_at.max(accepted);
                    th.pending_cat = cat;
                    if kind == FlushKind::Clflush {
                        // clflush is ordered: the thread waits for it.
                        th.clock = th.clock.max(accepted);
                    }
                }
                cat as usize
            }
            Ev::Fence => {
                self.drain_nt(t);
                let th = &mut self.threads[t];
                let own = th.clock + c.fence;
                th.fence_wait += th.persisted_at.saturating_sub(own);
                th.clock = own.max(th.persisted_at);
                std::mem::replace(&mut th.pending_cat, BARE_FENCE) as usize
            }
            Ev::Nt { addr, size, cat } => {
                self.threads[t].clock += c.store;
                for line in lines(addr, size) {
                    // It bypasses the cache and drops a cached copy.
                    self.cache.flush(line, true);
                    let prev = std::mem::replace(&mut self.threads[t].nt_line, line);
                    if prev != line && prev != NO_LINE {
                        self.nt_write(t, prev);
                    }
                }
                self.threads[t].pending_cat = cat;
                cat as usize
            }
            Ev::OpBegin { code, setup } => {
                let th = &mut self.threads[t];
                if th.depth == 0 {
                    th.in_setup = setup;
                }
                if th.depth == 0 && self.cpu.is_some() {
                    // The CPU's work: inside this operation, and the
                    // workload's own before it.
                    let op = c.cpu_op.get(code as usize).copied().unwrap_or(0);
                    th.clock += op + c.cpu_outside;
                    th.parts[ALLOC_CPU] += op;
                    th.parts[OTHER_CPU] += c.cpu_outside;
                    th.op = code.min(7);
                    th.depth += 1;
                    // Charged above, part by part.
                    return CHARGED;
                }
                th.depth += 1;
                STORES
            }
            Ev::OpEnd => {
                let th = &mut self.threads[t];
                if th.depth > 0 {
                    th.depth -= 1;
                    if th.depth == 0 {
                        th.ops += !th.in_setup as u64;
                        th.in_setup = false;
                    }
                }
                STORES
            }
            Ev::End => {
                self.drain_nt(t);
                let th = &mut self.threads[t];
                let part = std::mem::replace(&mut th.pending_cat, BARE_FENCE) as usize;
                if th.queue.is_empty() {
                    th.live = false;
                    th.started = false;
                    self.live.retain(|&o| o as usize != t);
                    if !self.joins.is_empty() {
                        self.wake_joiners(t);
                    }
                } else {
                    // Events of a successor with this id came in before this
                    // end was replayed (pmsim's tracer reuses an id: Larson's
                    // generations). It begins where this one ended, and stays
                    // live: a thread that is not live is replayed only when
                    // no live thread can go, so its events waited for the
                    // end of the trace, behind every other thread's.
                    th.persisted_at = th.clock;
                }
                part
            }
            Ev::Spawn { child } => {
                let clock = self.threads[t].clock;
                self.begin(child as usize, clock);
                STORES
            }
            Ev::Join { thread } => {
                let end = self.threads[thread as usize].clock;
                let th = &mut self.threads[t];
                th.clock = th.clock.max(end);
                WAIT
            }
            Ev::Acquire { lock } => {
                let th = &mut self.threads[t];
                // Without `timing.locks` the lock is free whenever taken
                // (its CPU work is still charged inside it).
                if c.locks {
                    let l = &mut self.locks[lock as usize];
                    l.holder = t as u32;
                    if th.clock < l.free_at {
                        th.parts[LOCK_WAIT] += l.free_at - th.clock;
                        th.clock = l.free_at;
                    }
                }
                if th.depth > 0 && self.cpu.is_some() {
                    let held = c.cpu_lock[th.op as usize];
                    th.clock += held;
                    th.parts[ALLOC_CPU] += held;
                }
                CHARGED
            }
            Ev::Release { lock } => {
                let clock = self.threads[t].clock;
                let l = &mut self.locks[lock as usize];
                l.holder = NO_SLOT;
                l.free_at = clock;
                if !self.lock_waits.is_empty() {
                    self.wake_taker(lock);
                }
                STORES
            }
            Ev::Other => STORES,
        }
    }

    /// Thread `t` stores to (`write`) or loads `[addr, addr + size)`: the
    /// access's own cost goes to the stores' part, a write-back it causes
    /// to that line's ([`Contention::touch`]).
    #[inline(always)]
    fn access(&mut self, t: usize, addr: u64, size: u32, write: bool) -> usize {
        let store = self.c.store;
        let th = &mut self.threads[t];
        th.clock += store;
        th.parts[STORES] += store;
        for line in lines(addr, size) {
            self.touch(t, line, write);
        }
        CHARGED
    }

    /// Thread `t` stores to (`write`) or loads line `line`: a dirty line
    /// the cache evicts for it is written to its DIMM (see the module doc);
    /// the thread's wait for a write buffer goes to the line's part.
    #[inline(always)]
    fn touch(&mut self, t: usize, line: u64, write: bool) {
        let a = self.cache.access(line, write);
        if let Some(victim) = a.writeback.filter(|_| self.writebacks) {
            self.write_back(t, victim);
        }
    }

    #[cold]
    fn write_back(&mut self, t: usize, line: u64) {
        let before = self.threads[t].clock;
        let issue = self.acquire(t);
        let accepted = self.write(t, line, issue + self.c.flush_to_wpq);
        self.release(t, accepted);
        let cat = category(&self.regions, line) as usize;
        let th = &mut self.threads[t];
        th.parts[cat] += th.clock - before;
        th.writebacks += 1;
    }

    fn drain_nt(&mut self, t: usize) {
        let line = std::mem::replace(&mut self.threads[t].nt_line, NO_LINE);
        if line != NO_LINE {
            self.nt_write(t, line);
        }
    }

    /// A buffer of the core for thread `t`'s next write: with all of them
    /// holding writes not yet accepted, the thread waits for the first
    /// accepted. Returns the thread's clock then.
    fn acquire(&mut self, t: usize) -> u64 {
        let k = self.c.buffers;
        let th = &mut self.threads[t];
        if k > 0 {
            let now = th.clock;
            th.inflight.retain(|&a| a > now);
            if th.inflight.len() >= k {
                let (i, m) = th.inflight.iter().copied().enumerate().min_by_key(|x| x.1).unwrap();
                th.clock = th.clock.max(m);
                th.inflight.swap_remove(i);
            }
        }
        th.clock
    }

    /// Thread `t`'s write holds its buffer until `accepted`.
    fn release(&mut self, t: usize, accepted: u64) {
        if self.c.buffers > 0 {
            self.threads[t].inflight.push(accepted);
        }
    }

    fn nt_write(&mut self, t: usize, line: u64) {
        self.acquire(t);
        let accepted = self.write(t, line, self.threads[t].clock + self.c.nt_to_wpq);
        self.release(t, accepted);
        let th = &mut self.threads[t];
        th.persisted_at = th.persisted_at.max(accepted);
    }

    /// A 64 B write of thread `t` arriving at its DIMM's WPQ at `arrive`:
    /// returns when the queue accepted it (it is persistent from then on).
    #[inline]
    fn write(&mut self, t: usize, line: u64, arrive: u64) -> u64 {
        let w = self.optane.write(line);
        let c = self.c;
        let d = &mut self.dimms[w.dimm as usize];
        let imc = &mut self.imcs[w.dimm as usize / self.imc_dimms];
        // Writes drained by the time this one arrives have left.
        while d.pending.front().is_some_and(|&(done, _)| done <= arrive) {
            d.pop(imc);
        }
        // A full queue: wait until enough of the writes ahead have drained.
        let mut accepted = arrive;
        if d.pending.len() >= d.cap {
            accepted = d.pending[d.pending.len() - d.cap].0;
            d.wpq_wait += accepted - arrive;
        }
        // The other threads with writes pending ahead of this one at its
        // memory controller (accepted or waiting for an entry).
        let others = imc.others(t);
        let mut start = accepted.max(d.drain_free);
        let e = w.entry as usize;
        // The XPLine (on a hit) or the victim (on a miss) may still be on its
        // way to the media.
        if d.wb_end[e] > start {
            d.media_wait += d.wb_end[e] - start;
            start = d.wb_end[e];
        }
        if w.evicted {
            // A partly written victim: read-modify-write before the entry is free.
            let m = start.max(d.media_free);
            d.media_wait += m - start;
            start = m;
            d.media_free = m + c.media_read + c.media_write;
            d.busy += c.media_read + c.media_write;
        }
        if !w.hit {
            d.wb_end[e] = 0;
        }
        let done = start + c.dimm_write + if w.sequential { 0 } else { c.dimm_switch } + c.writer * others as u64;
        d.drain_free = done;
        if w.completed {
            let m = done.max(d.media_free);
            d.media_free = m + c.media_write;
            d.busy += c.media_write;
            d.wb_end[e] = d.media_free;
        }
        if d.pending.len() == PENDING_PER_ENTRY * d.cap {
            d.pop(imc);
        }
        d.pending.push_back((done, t as u32));
        imc.enter(t);
        accepted
    }

    /// Replays every held-back event and returns the figures.
    pub fn report(&mut self) -> ContentionReport {
        self.run(true);
        for t in 0..self.threads.len() {
            self.drain_nt(t);
        }
        let ns = |ps: u64| ps as f64 / 1000.0;
        let makespan = self.threads.iter().map(|t| t.clock).max().unwrap_or(0);
        let counters = self.optane.drained_counters();
        let threads: Vec<ThreadTime> = (0..self.threads.len())
            .filter(|&t| self.threads[t].events > 0)
            .map(|t| {
                let th = &self.threads[t];
                ThreadTime {
                    tid: th.tid,
                    events: th.events,
                    ops: th.ops,
                    start_ns: ns(th.started_at),
                    end_ns: ns(th.clock),
                    fence_wait_ns: ns(th.fence_wait),
                    reflushes: th.reflushes,
                    writebacks: th.writebacks,
                }
            })
            .collect();
        let dimms: Vec<DimmTimeReport> = self
            .dimms
            .iter()
            .zip(&counters)
            .enumerate()
            .map(|(i, (d, k))| DimmTimeReport {
                dimm: i as u32,
                writes: k.writes,
                media_writes: k.media_writes,
                rmw: k.rmw_reads,
                media_busy_ns: ns(d.busy),
                wpq_wait_ns: ns(d.wpq_wait),
                media_wait_ns: ns(d.media_wait),
            })
            .collect();
        let ops: u64 = threads.iter().map(|t| t.ops).sum();
        let mut parts = [0u64; PARTS];
        for th in &self.threads {
            for (p, x) in parts.iter_mut().zip(&th.parts) {
                *p += x;
            }
        }
        let write_bytes = 64 * counters.iter().map(|k| k.writes).sum::<u64>();
        let media_write_bytes = self.xpline * counters.iter().map(|k| k.media_writes).sum::<u64>();
        let per_s = |x: u64| if makespan == 0 { 0.0 } else { x as f64 / (makespan as f64 * 1e-12) };
        let setup = self.threads.iter().map(|t| t.setup).sum::<u64>().min(makespan);
        let steady = makespan - setup;
        ContentionReport {
            events: threads.iter().map(|t| t.events).sum(),
            makespan_ns: ns(makespan),
            setup_ns: ns(setup),
            ops,
            ops_per_s: if steady == 0 { 0.0 } else { ops as f64 / (steady as f64 * 1e-12) },
            write_bytes,
            write_gb_per_s: per_s(write_bytes) / 1e9,
            media_write_bytes,
            write_amplification: if write_bytes == 0 { 0.0 } else { media_write_bytes as f64 / write_bytes as f64 },
            forced: self.forced,
            parts_ns: Parts::of(&parts),
            cpu: self.cpu.clone(),
            threads,
            dimms,
        }
    }
}

/// The report as text, after the simulator's.
pub fn write_text(r: &ContentionReport, out: &mut impl io::Write) -> io::Result<()> {
    writeln!(out)?;
    writeln!(out, "contention   virtual-time replay: threads on their own cores, sharing the DIMMs")?;
    writeln!(
        out,
        "  makespan    {:>14.0} ns   ({} events, {} replayed past a blocked thread)",
        r.makespan_ns, r.events, r.forced
    )?;
    writeln!(
        out,
        "  operations  {:>14}      {:.3} M ops/s estimated (without {:.0} ns of heap setup and close)",
        r.ops,
        r.ops_per_s / 1e6,
        r.setup_ns
    )?;
    writeln!(
        out,
        "  writes      {:>14} B    {:.2} GB/s; media {} B, write amplification {:.3}",
        r.write_bytes, r.write_gb_per_s, r.media_write_bytes, r.write_amplification
    )?;
    writeln!(
        out,
        "  {:>4} {:>12} {:>12} {:>10} {:>14} {:>14} {:>14}",
        "dimm", "writes", "media_wr", "rmw", "busy_ns", "wpq_wait_ns", "media_wait_ns"
    )?;
    for d in &r.dimms {
        writeln!(
            out,
            "  {:>4} {:>12} {:>12} {:>10} {:>14.0} {:>14.0} {:>14.0}",
            d.dimm, d.writes, d.media_writes, d.rmw, d.media_busy_ns, d.wpq_wait_ns, d.media_wait_ns
        )?;
    }
    writeln!(
        out,
        "  {:>4} {:>12} {:>10} {:>14} {:>14} {:>10} {:>10}",
        "tid", "events", "ops", "end_ns", "fence_wait_ns", "reflushes", "writebacks"
    )?;
    for t in &r.threads {
        writeln!(
            out,
            "  {:>4} {:>12} {:>10} {:>14.0} {:>14.0} {:>10} {:>10}",
            t.tid, t.events, t.ops, t.end_ns, t.fence_wait_ns, t.reflushes, t.writebacks
        )?;
    }
    Ok(())
}

/// A trace's records into [`Contention::push`].
struct Feed<'c>(&'c mut Contention);

impl<'a> Visit<'a> for Feed<'_> {
    #[inline(always)]
    fn event(&mut self, rec: &Record<'a>) {
        self.0.push(rec.tid, &rec.event);
    }
}

impl EventSink for Contention {
    fn event(&mut self, tid: u32, ev: &Event<'_>) -> io::Result<()> {
        self.push(tid, ev);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmsim_traces::{FenceKind, TraceHeader};

    fn op(c: &mut Contention, tid: u32, addr: u64) {
        c.push(tid, &Event::Store { addr, size: 64, value: None });
        c.push(tid, &Event::Flush { kind: FlushKind::Clwb, line: addr });
        c.push(tid, &Event::Fence { kind: FenceKind::Sfence });
    }

    /// `n` operations of thread `tid` on lines from `base` (in pages), then
    /// its end.
    fn run(c: &mut Contention, tid: u32, base: u64, n: u64) {
        for i in 0..n {
            op(c, tid, (base + i) * 4096);
        }
        c.push(tid, &Event::ThreadEnd);
    }

    /// The makespan of `n` operations of one thread alone.
    fn alone_ns(n: u64) -> f64 {
        let mut c = Contention::new(&Config::default()).unwrap();
        for i in 0..n {
            op(&mut c, 0, i * 4096);
        }
        c.report().makespan_ns
    }

    /// A replay of a trace whose tracer ran one thread at a time.
    fn valgrind() -> Contention {
        let mut c = Contention::new(&Config::default()).unwrap();
        c.set_header(&TraceHeader { tracer: pmsim_traces::Tracer::Valgrind, ..TraceHeader::default() });
        c
    }

    /// Thread `parent` spawns `child`: the tool's spawn marker, then the
    /// child's start.
    fn spawn(c: &mut Contention, parent: u32, child: u32) {
        c.push(parent, &Event::Marker { id: child.into(), label: SPAWN_MARKER });
        c.push(child, &Event::ThreadStart);
    }

    /// Thread `joiner` joined trace thread `id` (the tool's join marker).
    fn join(c: &mut Contention, joiner: u32, id: u32) {
        c.push(joiner, &Event::Marker { id: id.into(), label: JOIN_MARKER });
    }

    #[test]
    fn a_fence_waits_for_the_flush_to_be_accepted() {
        let cfg = Config::default();
        let mut c = Contention::new(&cfg).unwrap();
        op(&mut c, 0, 0);
        let r = c.report();
        let t = &cfg.timing;
        let expect = t.store_ns + t.flush_issue_ns + t.flush_to_wpq_ns;
        assert!((r.makespan_ns - expect).abs() < 1e-6, "{} vs {expect}", r.makespan_ns);
        assert_eq!(r.write_bytes, 64);
    }

    #[test]
    fn a_thread_without_fences_is_bound_by_its_write_buffers() {
        // 64 non-temporal lines on idle DIMMs, one fence at the end.
        let run = |buffers: u32| {
            let mut cfg = Config::default();
            cfg.timing.write_buffers = buffers;
            let mut c = Contention::new(&cfg).unwrap();
            for i in 0..64u64 {
                c.push(0, &Event::NtStore { addr: i * 4096, size: 64, value: None });
            }
            c.push(0, &Event::Fence { kind: FenceKind::Sfence });
            c.report().makespan_ns
        };
        let t = Config::default().timing;
        // Unbounded, the writes overlap and the fence waits for the last.
        let free = run(0);
        assert!(free <= 64.0 * t.store_ns + t.nt_to_wpq_ns + t.fence_ns + 1e-6, "{free}");
        // One buffer: each write waits until the previous one is accepted.
        let one = run(1);
        assert!(one >= 63.0 * t.nt_to_wpq_ns, "{one}");
        // Four: about a quarter of that.
        let four = run(4);
        assert!(four > 15.0 * t.nt_to_wpq_ns && four < one / 3.0, "{four} vs {one}");
    }

    #[test]
    fn a_reflush_waits_for_the_line_s_previous_write() {
        let cfg = Config::default();
        let run = |lines: [u64; 2]| {
            let mut c = Contention::new(&cfg).unwrap();
            for l in lines {
                op(&mut c, 0, l);
            }
            c.report()
        };
        let (again, other) = (run([0, 0]), run([0, 4096]));
        assert_eq!((again.threads[0].reflushes, other.threads[0].reflushes), (1, 0));
        // The second op of `again` is persistent the reflush latency at
        // distance 0 after the first one's flush (issued a store and a
        // flush issue into the run), not sooner.
        let first = other.makespan_ns / 2.0;
        let t = &cfg.timing;
        let first_issue = t.store_ns + t.flush_issue_ns;
        assert!(again.makespan_ns >= first_issue + cfg.latency.reflush_ns[0], "{}", again.makespan_ns);
        assert!(again.makespan_ns < first + cfg.latency.reflush_ns[0], "{} vs {first}", again.makespan_ns);
        assert!(other.makespan_ns < first * 2.0 + 1.0);
        // Past the threshold a flush of the same line is a regular one.
        let mut c = Contention::new(&cfg).unwrap();
        for l in [0, 64, 128, 192, 256, 0] {
            op(&mut c, 0, l);
        }
        assert_eq!(c.report().threads[0].reflushes, 0);
    }

    #[test]
    fn a_timed_reflush_waits_only_for_what_is_left_of_the_previous_write() {
        // Line 0 flushed, then `gap` stores elsewhere (2 ns each), then line 0
        // again: a reflush at distance 0 either way.
        let run = |timed: bool, gap: u32| {
            let mut cfg = Config::default();
            cfg.reflush.timed = timed;
            let mut c = Contention::new(&cfg).unwrap();
            op(&mut c, 0, 0);
            for _ in 0..gap {
                c.push(0, &Event::Store { addr: 8192, size: 8, value: None });
            }
            op(&mut c, 0, 0);
            let r = c.report();
            assert_eq!(r.threads[0].reflushes, 1);
            r.makespan_ns
        };
        // After 2 µs the previous write is long done: timed, the reflush
        // costs a regular flush; by distance it still waits 800 ns.
        let (by_distance, timed) = (run(false, 1000), run(true, 1000));
        assert!(by_distance - timed > 700.0, "{by_distance} vs {timed}");
        // Back to back, timed waits about as long as by distance.
        let (by_distance, timed) = (run(false, 0), run(true, 0));
        assert!(timed <= by_distance && by_distance - timed < 100.0, "{by_distance} vs {timed}");
    }

    #[test]
    fn under_eadr_a_flush_writes_nothing_and_a_fence_waits_for_nothing() {
        let mut cfg = Config::default();
        let adr = {
            let mut c = Contention::new(&cfg).unwrap();
            op(&mut c, 0, 0);
            op(&mut c, 0, 0);
            c.report()
        };
        cfg.eadr = true;
        let mut c = Contention::new(&cfg).unwrap();
        op(&mut c, 0, 0);
        op(&mut c, 0, 0);
        let eadr = c.report();
        assert_eq!((adr.write_bytes, eadr.write_bytes), (128, 0));
        assert_eq!((adr.threads[0].reflushes, eadr.threads[0].reflushes), (1, 0));
        let t = &cfg.timing;
        let expect = 2.0 * (t.store_ns + t.fence_ns);
        assert!((eadr.makespan_ns - expect).abs() < 1e-6, "{} vs {expect}", eadr.makespan_ns);
        assert!(adr.makespan_ns > cfg.latency.reflush_ns[0] && eadr.makespan_ns < 0.2 * adr.makespan_ns);
    }

    #[test]
    fn reflushes_are_counted_in_the_configured_scope() {
        // Two threads take turns writing one line: no thread flushes it twice
        // in a row by itself, but in all (scope = global) every flush after
        // the first is a reflush at distance 0.
        let reflushes = |scope: Scope| {
            let mut cfg = Config::default();
            cfg.reflush.scope = scope;
            let mut c = Contention::new(&cfg).unwrap();
            c.push(0, &Event::ThreadStart);
            c.push(1, &Event::ThreadStart);
            for _ in 0..4 {
                op(&mut c, 0, 0);
                for l in 1..8 {
                    op(&mut c, 0, l * 4096);
                }
                op(&mut c, 1, 0);
                for l in 1..8 {
                    op(&mut c, 1, (100 + l) * 4096);
                }
            }
            c.report().threads.iter().map(|t| t.reflushes).sum::<u64>()
        };
        assert_eq!(reflushes(Scope::Thread), 0);
        assert!(reflushes(Scope::Global) > 0);
        assert!(reflushes(Scope::Dimm) > 0);
    }

    #[test]
    fn a_clean_flush_writes_nothing() {
        let mut c = Contention::new(&Config::default()).unwrap();
        c.push(0, &Event::Flush { kind: FlushKind::Clwb, line: 0 });
        op(&mut c, 0, 64);
        c.push(0, &Event::Flush { kind: FlushKind::Clwb, line: 64 });
        assert_eq!(c.report().write_bytes, 64);
    }

    #[test]
    fn the_lowest_clock_goes_first_whatever_the_recorded_order() {
        // Thread 0's events all come first in the stream, yet thread 1 (at the
        // same clocks) interleaves with it: both end at about the same time.
        let mut c = Contention::new(&Config::default()).unwrap();
        c.push(0, &Event::ThreadStart);
        c.push(1, &Event::ThreadStart);
        for i in 0..100 {
            op(&mut c, 0, i * 4096);
        }
        for i in 0..100 {
            op(&mut c, 1, (1000 + i) * 4096);
        }
        let r = c.report();
        let (a, b) = (r.threads[0].end_ns, r.threads[1].end_ns);
        assert!((a - b).abs() < 0.05 * a, "{a} {b}");
        assert_eq!(r.forced, 0);
    }

    /// A thread id reused by a successor (pmsim's tracer: Larson's
    /// generations) whose events arrive while the predecessor's end is still
    /// held back: the successor goes on where the predecessor ended, beside
    /// the other thread, not after the whole trace, forced.
    #[test]
    fn a_successor_with_a_reused_id_follows_its_predecessor() {
        let mut c = Contention::new(&Config::default()).unwrap();
        c.push(0, &Event::ThreadStart);
        c.push(1, &Event::ThreadStart);
        // Thread 0 has no event yet: thread 1's are held back.
        for i in 0..50 {
            op(&mut c, 1, i * 4096);
        }
        c.push(1, &Event::ThreadEnd);
        c.push(1, &Event::ThreadStart);
        for i in 0..50 {
            op(&mut c, 1, (1000 + i) * 4096);
        }
        for i in 0..100 {
            op(&mut c, 0, (2000 + i) * 4096);
        }
        c.push(0, &Event::ThreadEnd);
        c.push(1, &Event::ThreadEnd);
        let r = c.report();
        assert_eq!(r.forced, 0, "{r:?}");
        let (a, b) = (r.threads[0].end_ns, r.threads[1].end_ns);
        assert!((a - b).abs() < 0.2 * a, "the two generations of thread 1 take as long as thread 0's 100: {r:?}");
    }

    /// A Valgrind trace of a main thread that sets up, an idle timer thread,
    /// and a worker that spawns its successor at its end (Larson's rounds):
    /// each starts where its creator was, so the set-up, the worker and its
    /// successor run one after the other. In a trace of pmsim's own tracer
    /// the same order says nothing of who started whom.
    fn successors(tracer: pmsim_traces::Tracer) -> ContentionReport {
        let mut c = Contention::new(&Config::default()).unwrap();
        c.set_header(&TraceHeader { tracer, ..TraceHeader::default() });
        c.push(0, &Event::ThreadStart);
        c.push(1, &Event::ThreadStart);
        for i in 0..50 {
            op(&mut c, 0, i * 4096);
        }
        c.push(2, &Event::ThreadStart);
        for i in 0..50 {
            op(&mut c, 2, (1000 + i) * 4096);
        }
        c.push(3, &Event::ThreadStart);
        c.push(2, &Event::ThreadEnd);
        for i in 0..50 {
            op(&mut c, 3, (2000 + i) * 4096);
        }
        c.push(3, &Event::ThreadEnd);
        c.push(1, &Event::ThreadEnd);
        c.push(0, &Event::ThreadEnd);
        c.report()
    }

    #[test]
    fn in_a_serialized_trace_a_thread_starts_where_its_creator_was() {
        use pmsim_traces::Tracer;
        let (serial, builtin) = (successors(Tracer::Valgrind), successors(Tracer::Builtin));
        let end = |r: &ContentionReport, t: usize| r.threads[t].end_ns;
        // The three stretches of 50 operations cost the same as one alone;
        // one after the other they take three times that.
        let one = alone_ns(50);
        assert!((end(&serial, 2) - 2.0 * one).abs() < 0.1 * one, "{serial:?}");
        assert!((serial.makespan_ns - 3.0 * one).abs() < 0.1 * one, "{serial:?}");
        // Without the order's meaning, the idle thread holds every other
        // back, and the threads start at the clock replayed last: together.
        assert!(builtin.makespan_ns < 1.5 * one, "{builtin:?}");
    }

    /// A Valgrind trace: the main thread sets up, then spawns two workers
    /// with spawn markers (or without, `marked` false); the first worker
    /// runs to its end before the second is spawned (Valgrind ran it while
    /// the main thread waited). With `reuse` the second worker gets the
    /// first's id, as Valgrind reuses it.
    fn spawned_workers(marked: bool, reuse: bool) -> ContentionReport {
        let mut c = valgrind();
        c.push(0, &Event::ThreadStart);
        for i in 0..10 {
            op(&mut c, 0, i * 4096);
        }
        let second = if reuse { 1 } else { 2 };
        for (w, base) in [(1u32, 1000u64), (second, 2000)] {
            if marked {
                spawn(&mut c, 0, w);
            } else {
                c.push(w, &Event::ThreadStart);
            }
            run(&mut c, w, base, 50);
        }
        c.push(0, &Event::ThreadEnd);
        c.report()
    }

    #[test]
    fn a_spawned_thread_starts_where_its_creator_was_not_the_thread_that_ran_last() {
        let (set_up, one) = (alone_ns(10), alone_ns(50));
        for reuse in [false, true] {
            // The workers run side by side after the set-up.
            let r = spawned_workers(true, reuse);
            assert!((r.makespan_ns - (set_up + one)).abs() < 0.15 * one, "reuse {reuse}: {r:?}");
            let workers: Vec<u32> = r.threads.iter().filter(|t| t.events > 100).map(|t| t.tid).collect();
            assert_eq!(workers, [1, if reuse { 1 } else { 2 }], "each worker is a thread of its own: {r:?}");
        }
        // Guessed from the latest event's thread, the second worker follows
        // the first.
        let guessed = spawned_workers(false, false);
        assert!(guessed.makespan_ns > set_up + 1.8 * one, "{guessed:?}");
    }

    /// A Valgrind trace of Larson's shape: the main thread spawns two
    /// keepers, and each keeper spawns a generation of 50 operations, waits
    /// for its end, then spawns the next (Valgrind gives it the ended one's
    /// id). With `joins` the keepers record join markers.
    fn generations(joins: bool) -> ContentionReport {
        let mut c = valgrind();
        c.push(0, &Event::ThreadStart);
        spawn(&mut c, 0, 1);
        spawn(&mut c, 0, 2);
        for gen in 0..2u64 {
            for (keeper, child) in [(1u32, 3u32), (2, 4)] {
                spawn(&mut c, keeper, child);
                run(&mut c, child, (child as u64 * 10 + gen) * 100, 50);
                if joins {
                    join(&mut c, keeper, child);
                }
            }
        }
        for keeper in [1, 2] {
            c.push(keeper, &Event::ThreadEnd);
            join(&mut c, 0, keeper);
        }
        c.push(0, &Event::ThreadEnd);
        c.report()
    }

    #[test]
    fn a_thread_that_joins_goes_on_from_the_joined_threads_end() {
        let one = alone_ns(50);
        // The keepers' chains run side by side, each generation after the
        // one before; the main thread ends after both chains.
        let joined = generations(true);
        assert!((joined.makespan_ns - 2.0 * one).abs() < 0.2 * one, "{joined:?}");
        assert!((joined.threads[0].end_ns - joined.makespan_ns).abs() < 1e-6, "{joined:?}");
        assert_eq!(joined.forced, 0, "a keeper waiting at a join holds nothing back: {joined:?}");
        // Without the joins every generation starts with its keeper's start.
        let unjoined = generations(false);
        assert!(unjoined.makespan_ns < 1.4 * one, "{unjoined:?}");
    }

    /// Keeper 1's generation (id 3) ends, keeper 2 spawns one that gets
    /// id 3 too and runs twice as long, and only then is keeper 1's join
    /// recorded: it waits for its own generation, not for the one that
    /// holds the id now.
    #[test]
    fn a_join_waits_for_the_thread_its_joiner_spawned() {
        let mut c = valgrind();
        c.push(0, &Event::ThreadStart);
        spawn(&mut c, 0, 1);
        spawn(&mut c, 0, 2);
        spawn(&mut c, 1, 3);
        run(&mut c, 3, 1000, 50);
        spawn(&mut c, 2, 3);
        run(&mut c, 3, 2000, 100);
        join(&mut c, 1, 3);
        join(&mut c, 2, 3);
        spawn(&mut c, 1, 4);
        run(&mut c, 4, 3000, 50);
        join(&mut c, 1, 4);
        for k in [1, 2] {
            c.push(k, &Event::ThreadEnd);
            join(&mut c, 0, k);
        }
        c.push(0, &Event::ThreadEnd);
        let r = c.report();
        let one = alone_ns(50);
        // Keeper 1: two generations of 50; keeper 2: one of 100.
        assert!((r.makespan_ns - 2.0 * one).abs() < 0.25 * one, "{r:?}");
    }

    #[test]
    fn the_heaps_setup_and_close_are_not_the_runs_operations() {
        use pmsim_traces::OpKind;
        let mut c = Contention::new(&Config::default()).unwrap();
        let setup = |c: &mut Contention, op: OpKind, at: u64| {
            c.push(0, &Event::OpBegin { op, arg: 0 });
            for i in 0..20 {
                self::op(c, 0, (at + i) * 4096);
            }
            c.push(0, &Event::OpEnd { op, result: 0 });
        };
        setup(&mut c, OpKind::Init, 0);
        for i in 0..10 {
            c.push(0, &Event::OpBegin { op: OpKind::Malloc, arg: 64 });
            op(&mut c, 0, (100 + i) * 4096);
            c.push(0, &Event::OpEnd { op: OpKind::Malloc, result: 0 });
        }
        setup(&mut c, OpKind::Close, 200);
        let r = c.report();
        assert_eq!(r.ops, 10, "{r:?}");
        // Two setups of 20 flushes each around 10 operations of one.
        assert!((r.setup_ns / r.makespan_ns - 0.8).abs() < 0.02, "{r:?}");
        let steady = r.makespan_ns - r.setup_ns;
        assert!((r.ops_per_s - 10.0 / (steady * 1e-9)).abs() < 1e-6 * r.ops_per_s, "{r:?}");
    }

    /// Two operations per iteration, each storing, flushing and fencing one
    /// line: a malloc in the metadata region, a free in the WAL region.
    fn ops_in_regions(cpu: Option<&CpuCosts>) -> ContentionReport {
        use pmsim_traces::{Category, OpKind, Region};
        let mut c = Contention::new(&Config::default()).unwrap();
        let region = |id, category, base| Region { id, name: format!("r{id}"), category, base, len: 1 << 20 };
        let header = TraceHeader {
            regions: vec![region(1, Category::Meta, 0), region(2, Category::Wal, 1 << 20)],
            ..TraceHeader::default()
        };
        c.set_header(&header);
        if let Some(cpu) = cpu {
            c.set_cpu(cpu);
        }
        for i in 0..10u64 {
            for (op, base) in [(OpKind::Malloc, 0), (OpKind::Free, 1u64 << 20)] {
                c.push(0, &Event::OpBegin { op, arg: 0 });
                op_at(&mut c, base + i * 4096);
                c.push(0, &Event::OpEnd { op, result: 0 });
            }
        }
        c.report()
    }

    fn op_at(c: &mut Contention, addr: u64) {
        op(c, 0, addr);
    }

    #[test]
    fn cpu_costs_advance_the_clocks_and_every_part_adds_up() {
        let plain = ops_in_regions(None);
        let cpu = CpuCosts { op_ns: vec![100.0, 40.0], outside_ns: 25.0, ..CpuCosts::default() };
        let with = ops_in_regions(Some(&cpu));
        assert_eq!((plain.ops, with.ops), (20, 20));
        // Each operation adds its kind's CPU time and the work between
        // operations; the stores' own cost is in the CPU time instead.
        let t = Config::default().timing;
        let expect = plain.makespan_ns + 10.0 * (100.0 + 40.0) + 20.0 * 25.0 - 20.0 * t.store_ns;
        assert!((with.makespan_ns - expect).abs() < 1e-6, "{} vs {expect}", with.makespan_ns);
        let p = &with.parts_ns;
        assert!((p.alloc_cpu - 1400.0).abs() < 1e-6 && (p.other_cpu - 500.0).abs() < 1e-6, "{p:?}");
        assert!(p.meta > 0.0 && p.wal > 0.0 && p.stores == 0.0 && p.data == 0.0, "{p:?}");
        // The flushes of the metadata and WAL lines cost the same here.
        assert!((p.meta - p.wal).abs() < 1e-6, "{p:?}");
        for r in [&plain, &with] {
            let p = &r.parts_ns;
            let sum = p.total();
            assert!((sum - r.threads[0].end_ns).abs() < 1e-6, "{sum} vs {}", r.threads[0].end_ns);
        }
        assert_eq!(plain.parts_ns.alloc_cpu, 0.0);
        assert!(plain.cpu.is_none() && with.cpu.as_ref() == Some(&cpu));
    }

    /// Threads `0..n` each do `k` operations that hold lock 7 around a
    /// persist, recorded round robin, with CPU costs `cpu`.
    fn locked_ops(cfg: &Config, cpu: &CpuCosts, n: u32, k: u64) -> ContentionReport {
        let mut c = Contention::new(cfg).unwrap();
        c.set_cpu(cpu);
        for i in 0..k {
            for tid in 0..n {
                c.push(tid, &Event::OpBegin { op: pmsim_traces::OpKind::Malloc, arg: 64 });
                c.push(tid, &Event::Marker { id: 7, label: LOCK_ACQUIRE_MARKER });
                op(&mut c, tid, (u64::from(tid) << 24) + i * 4096);
                c.push(tid, &Event::Marker { id: 7, label: LOCK_RELEASE_MARKER });
                c.push(tid, &Event::OpEnd { op: pmsim_traces::OpKind::Malloc, result: 64 });
            }
        }
        for tid in 0..n {
            c.push(tid, &Event::ThreadEnd);
        }
        c.report()
    }

    #[test]
    fn threads_wait_at_a_lock_and_its_cpu_work_is_inside_it() {
        // 1,000 ns of CPU per operation, 900 of them holding the lock.
        let cpu = CpuCosts { op_ns: vec![1000.0], outside_ns: 0.0, lock_ns: vec![900.0], locks: vec![1.0] };
        let cfg = Config::default();
        let mut free = cfg.clone();
        free.timing.locks = false;
        let (one, one_free) = (locked_ops(&cfg, &cpu, 1, 50), locked_ops(&free, &cpu, 1, 50));
        // Alone, a thread never waits: the lock moves no time.
        assert_eq!(one.makespan_ns, one_free.makespan_ns);
        assert!(one.makespan_ns >= 50.0 * 1000.0 && one.parts_ns.lock_wait == 0.0, "{one:?}");
        // Four threads pass the lock one at a time, 900 ns each at least…
        let four = locked_ops(&cfg, &cpu, 4, 50);
        assert!(four.makespan_ns >= 4.0 * 50.0 * 900.0, "{}", four.makespan_ns);
        assert!(four.parts_ns.lock_wait > 0.0);
        // …where without the lock's waits they run side by side.
        let four_free = locked_ops(&free, &cpu, 4, 50);
        assert!(four_free.makespan_ns < 1.5 * one.makespan_ns, "{} vs {}", four_free.makespan_ns, one.makespan_ns);
        assert_eq!(four_free.parts_ns.lock_wait, 0.0);
        // The CPU work is charged in full either way, and the parts add up.
        for r in [&one, &four, &four_free] {
            let p = &r.parts_ns;
            assert!((p.alloc_cpu - r.ops as f64 * 1000.0).abs() < 1e-3, "{p:?}");
            let sum = p.total();
            let ends: f64 = r.threads.iter().map(|t| t.end_ns - t.start_ns).sum();
            assert!((sum - ends).abs() < 1e-3, "{sum} vs {ends}");
        }
    }

    #[test]
    fn dirty_lines_the_cache_evicts_are_written_and_slow_their_thread() {
        // A cache of 4 lines; one thread stores to 64 distinct lines and
        // never flushes, then flushes the last one and an evicted one.
        let mut cfg = Config { cache: crate::config::CacheConfig { sets: 1, ways: 4 }, ..Config::default() };
        let replay = |cfg: &Config| {
            let mut c = Contention::new(cfg).unwrap();
            c.set_cpu(&CpuCosts::default());
            for i in 0..64u64 {
                c.push(0, &Event::Store { addr: i * 4096, size: 8, value: None });
            }
            c.push(0, &Event::Flush { kind: FlushKind::Clwb, line: 63 * 4096 });
            c.push(0, &Event::Flush { kind: FlushKind::Clwb, line: 0 });
            c.push(0, &Event::Fence { kind: FenceKind::Sfence });
            c.report()
        };
        let on = replay(&cfg);
        // 60 lines were evicted dirty; the flush of line 0 found it written
        // already, so only the last line's flush writes.
        assert_eq!(on.threads[0].writebacks, 60);
        assert_eq!(on.write_bytes, 61 * 64);
        cfg.timing.writebacks = false;
        let off = replay(&cfg);
        assert_eq!((off.threads[0].writebacks, off.write_bytes), (0, 64));
        // Sixty writes through six write buffers take the DIMMs' time; the
        // stores alone cost nothing (CPU costs given, all zero).
        assert!(on.makespan_ns > off.makespan_ns + 100.0, "{} vs {}", on.makespan_ns, off.makespan_ns);
        assert!(on.parts_ns.unmapped > 0.0 && off.parts_ns.unmapped < on.parts_ns.unmapped);
    }

    #[test]
    fn the_reorder_bound_is_kept() {
        let mut cfg = Config::default();
        cfg.timing.reorder_events = 10;
        let mut c = Contention::new(&cfg).unwrap();
        c.push(1, &Event::ThreadStart);
        for i in 0..100 {
            op(&mut c, 0, i * 4096);
            assert!(c.buffered <= 11);
        }
        let r = c.report();
        assert!(r.forced > 0);
        assert_eq!(r.events, 301);
    }
}
