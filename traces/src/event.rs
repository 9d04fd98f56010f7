//! The events of a trace: what a program did to persistent memory, in the terms of
//! ARCHITECTURE.md (store, flush, fence, region, operation, thread, marker).

use serde::{Deserialize, Serialize};

/// Which cache-line write-back instruction a flush used. Their costs and their
/// effect on the cache differ (clflush and clflushopt invalidate the line, clwb
/// keeps it), so the simulator needs to know.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlushKind {
    Clwb = 0,
    Clflushopt = 1,
    Clflush = 2,
}

impl FlushKind {
    /// The kind with this code (its discriminant, as the trace's FLUSH tag
    /// carries it); `None` for codes no flush has.
    #[inline(always)]
    pub fn from_code(c: u8) -> Option<FlushKind> {
        FlushKind::ALL.get(c as usize).copied()
    }

    /// Every kind, by code.
    pub const ALL: [FlushKind; 3] = [FlushKind::Clwb, FlushKind::Clflushopt, FlushKind::Clflush];
}

/// An ordering point. `LockedRmw` is a locked read-modify-write (`lock cmpxchg`,
/// `xchg`, …), which orders earlier flushes on x86 like `mfence`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FenceKind {
    Sfence = 0,
    Mfence = 1,
    LockedRmw = 2,
}

impl FenceKind {
    /// The kind with this code (its discriminant, as the trace's FENCE tag
    /// carries it); `None` for codes no fence has.
    #[inline(always)]
    pub fn from_code(c: u8) -> Option<FenceKind> {
        FenceKind::ALL.get(c as usize).copied()
    }

    /// Every kind, by code.
    pub const ALL: [FenceKind; 3] = [FenceKind::Sfence, FenceKind::Mfence, FenceKind::LockedRmw];
}

/// What a region of the heap holds; every statistic can be broken down by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Category {
    /// Allocator metadata: slab headers, bitmaps, extent headers, root tables.
    Meta = 0,
    /// Write-ahead log entries.
    Wal = 1,
    /// Bookkeeping logs (e.g. NVAlloc's large-allocation log).
    Log = 2,
    /// User data handed out by the allocator.
    Data = 3,
}

impl Category {
    pub const ALL: [Category; 4] = [Category::Meta, Category::Wal, Category::Log, Category::Data];

    pub fn name(self) -> &'static str {
        match self {
            Category::Meta => "meta",
            Category::Wal => "wal",
            Category::Log => "log",
            Category::Data => "data",
        }
    }
}

/// The operation an `OpBegin`/`OpEnd` pair brackets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    Malloc,
    Free,
    Realloc,
    /// NVAlloc's slab morphing.
    Morph,
    /// Garbage collection of a bookkeeping log.
    LogGc,
    /// Recovery after a restart or crash.
    Recovery,
    /// Creating or opening a heap.
    Init,
    /// Closing a heap cleanly.
    Close,
    /// A tool- or user-defined operation; codes are ≥ 16.
    Other(u64),
}

impl OpKind {
    /// Whether it sets a heap up or takes it down (creation, close,
    /// recovery) rather than serving the program: once per run, outside
    /// what a benchmark times.
    pub fn is_setup(self) -> bool {
        matches!(self, OpKind::Init | OpKind::Close | OpKind::Recovery)
    }

    /// The operation's code (FORMAT.md): 0–7 for the named operations, ≥ 16 for `Other`.
    pub fn code(self) -> u64 {
        match self {
            OpKind::Malloc => 0,
            OpKind::Free => 1,
            OpKind::Realloc => 2,
            OpKind::Morph => 3,
            OpKind::LogGc => 4,
            OpKind::Recovery => 5,
            OpKind::Init => 6,
            OpKind::Close => 7,
            OpKind::Other(c) => c,
        }
    }

    /// The named operations by code (0-7).
    pub const NAMED: [OpKind; 8] = [
        OpKind::Malloc,
        OpKind::Free,
        OpKind::Realloc,
        OpKind::Morph,
        OpKind::LogGc,
        OpKind::Recovery,
        OpKind::Init,
        OpKind::Close,
    ];

    /// Decodes an operation code; `None` for codes 8–15 that are reserved.
    pub fn from_code(c: u64) -> Option<OpKind> {
        match c {
            0..=7 => Some(OpKind::NAMED[c as usize]),
            8..=15 => None,
            c => Some(OpKind::Other(c)),
        }
    }

    pub fn name(self) -> String {
        match self {
            OpKind::Malloc => "malloc".into(),
            OpKind::Free => "free".into(),
            OpKind::Realloc => "realloc".into(),
            OpKind::Morph => "morph".into(),
            OpKind::LogGc => "log_gc".into(),
            OpKind::Recovery => "recovery".into(),
            OpKind::Init => "init".into(),
            OpKind::Close => "close".into(),
            OpKind::Other(c) => format!("op{c}"),
        }
    }
}

/// One event. Borrowed data (store values, names) points into the reader's block
/// buffer or the writer's caller, so decoding allocates nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// A store of `size` bytes at `addr`; `value` is present when the trace records values.
    Store {
        addr: u64,
        size: u32,
        value: Option<&'a [u8]>,
    },
    /// A non-temporal store (bypasses the cache; durable after the next fence).
    NtStore {
        addr: u64,
        size: u32,
        value: Option<&'a [u8]>,
    },
    /// A load; recorded only by tracers asked to (for exporting full memory traces).
    Load {
        addr: u64,
        size: u32,
    },
    /// A write-back of the 64 B line at `line` (64 B aligned).
    Flush {
        kind: FlushKind,
        line: u64,
    },
    Fence {
        kind: FenceKind,
    },
    ThreadStart,
    ThreadEnd,
    RegionAdd {
        id: u64,
        category: Category,
        base: u64,
        len: u64,
        name: &'a str,
    },
    RegionRemove {
        id: u64,
    },
    /// Start of an operation; `arg` is the requested size (malloc) or the offset freed (free).
    OpBegin {
        op: OpKind,
        arg: u64,
    },
    /// End of an operation; `result` is the offset handed out (malloc), 0 for failure.
    OpEnd {
        op: OpKind,
        result: u64,
    },
    Marker {
        id: u64,
        label: &'a str,
    },
}

/// The label of the marker a tracer that runs one thread at a time records
/// on a thread as it creates another (the marker's id is the new thread's
/// id), just before the new thread's start: in such a trace the thread of the
/// latest event is not always the creator (`traces/FORMAT.md`).
pub const SPAWN_MARKER: &str = "thread:spawn";

/// The label of the marker recorded on a thread that waited for another to
/// end (the marker's id is the other thread's id), by a tracer that runs one
/// thread at a time, where the program says so: a thread waiting in a join
/// records nothing, so the trace alone cannot show the wait
/// (`traces/FORMAT.md`).
pub const JOIN_MARKER: &str = "thread:join";

/// The label of the marker recorded on a thread just after it took a lock
/// (the marker's id names the lock): with [`LOCK_RELEASE_MARKER`], what lets
/// a replay that keeps time of its own make threads wait for each other at
/// the program's locks (`traces/FORMAT.md`).
pub const LOCK_ACQUIRE_MARKER: &str = "lock:acquire";

/// The label of the marker recorded on a thread just before it lets a lock
/// go (the marker's id names the lock).
pub const LOCK_RELEASE_MARKER: &str = "lock:release";

/// Whether a marker's label is one of the tracer's own about threads
/// ([`SPAWN_MARKER`], [`JOIN_MARKER`]) rather than one the program set.
pub fn is_thread_marker(label: &str) -> bool {
    label == SPAWN_MARKER || label == JOIN_MARKER
}

/// Whether a marker's label is one of a lock's ([`LOCK_ACQUIRE_MARKER`],
/// [`LOCK_RELEASE_MARKER`]).
pub fn is_lock_marker(label: &str) -> bool {
    label == LOCK_ACQUIRE_MARKER || label == LOCK_RELEASE_MARKER
}

/// The number of distinct event kinds, for per-kind counters.
pub const EVENT_KINDS: usize = 12;

impl Event<'_> {
    /// A dense index for per-kind counters (0..EVENT_KINDS).
    pub fn kind_index(&self) -> usize {
        match self {
            Event::Store { .. } => 0,
            Event::NtStore { .. } => 1,
            Event::Load { .. } => 2,
            Event::Flush { .. } => 3,
            Event::Fence { .. } => 4,
            Event::ThreadStart => 5,
            Event::ThreadEnd => 6,
            Event::RegionAdd { .. } => 7,
            Event::RegionRemove { .. } => 8,
            Event::OpBegin { .. } => 9,
            Event::OpEnd { .. } => 10,
            Event::Marker { .. } => 11,
        }
    }

    /// Names of the kinds, indexed by [`Event::kind_index`].
    pub const KIND_NAMES: [&'static str; EVENT_KINDS] = [
        "store",
        "ntstore",
        "load",
        "flush",
        "fence",
        "thread_start",
        "thread_end",
        "region_add",
        "region_remove",
        "op_begin",
        "op_end",
        "marker",
    ];

    /// Copies borrowed data so the event can outlive its buffer.
    pub fn to_owned(&self) -> OwnedEvent {
        match *self {
            Event::Store { addr, size, value } => OwnedEvent::Store { addr, size, value: value.map(<[u8]>::to_vec) },
            Event::NtStore { addr, size, value } => {
                OwnedEvent::NtStore { addr, size, value: value.map(<[u8]>::to_vec) }
            }
            Event::Load { addr, size } => OwnedEvent::Load { addr, size },
            Event::Flush { kind, line } => OwnedEvent::Flush { kind, line },
            Event::Fence { kind } => OwnedEvent::Fence { kind },
            Event::ThreadStart => OwnedEvent::ThreadStart,
            Event::ThreadEnd => OwnedEvent::ThreadEnd,
            Event::RegionAdd { id, category, base, len, name } => {
                OwnedEvent::RegionAdd { id, category, base, len, name: name.to_owned() }
            }
            Event::RegionRemove { id } => OwnedEvent::RegionRemove { id },
            Event::OpBegin { op, arg } => OwnedEvent::OpBegin { op, arg },
            Event::OpEnd { op, result } => OwnedEvent::OpEnd { op, result },
            Event::Marker { id, label } => OwnedEvent::Marker { id, label: label.to_owned() },
        }
    }
}

/// An [`Event`] that owns its data: for tests, tools and in-process channels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnedEvent {
    Store { addr: u64, size: u32, value: Option<Vec<u8>> },
    NtStore { addr: u64, size: u32, value: Option<Vec<u8>> },
    Load { addr: u64, size: u32 },
    Flush { kind: FlushKind, line: u64 },
    Fence { kind: FenceKind },
    ThreadStart,
    ThreadEnd,
    RegionAdd { id: u64, category: Category, base: u64, len: u64, name: String },
    RegionRemove { id: u64 },
    OpBegin { op: OpKind, arg: u64 },
    OpEnd { op: OpKind, result: u64 },
    Marker { id: u64, label: String },
}

impl OwnedEvent {
    /// Borrows this event as an [`Event`].
    pub fn as_event(&self) -> Event<'_> {
        match self {
            OwnedEvent::Store { addr, size, value } => {
                Event::Store { addr: *addr, size: *size, value: value.as_deref() }
            }
            OwnedEvent::NtStore { addr, size, value } => {
                Event::NtStore { addr: *addr, size: *size, value: value.as_deref() }
            }
            OwnedEvent::Load { addr, size } => Event::Load { addr: *addr, size: *size },
            OwnedEvent::Flush { kind, line } => Event::Flush { kind: *kind, line: *line },
            OwnedEvent::Fence { kind } => Event::Fence { kind: *kind },
            OwnedEvent::ThreadStart => Event::ThreadStart,
            OwnedEvent::ThreadEnd => Event::ThreadEnd,
            OwnedEvent::RegionAdd { id, category, base, len, name } => {
                Event::RegionAdd { id: *id, category: *category, base: *base, len: *len, name }
            }
            OwnedEvent::RegionRemove { id } => Event::RegionRemove { id: *id },
            OwnedEvent::OpBegin { op, arg } => Event::OpBegin { op: *op, arg: *arg },
            OwnedEvent::OpEnd { op, result } => Event::OpEnd { op: *op, result: *result },
            OwnedEvent::Marker { id, label } => Event::Marker { id: *id, label },
        }
    }
}

/// An event as read from a trace: its global index, its thread and the event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// Global order: the number of events before this one in the trace.
    pub index: u64,
    pub tid: u32,
    pub event: Event<'a>,
}

/// The line (64 B aligned address) holding `addr`.
#[inline(always)]
pub const fn line_of(addr: u64) -> u64 {
    addr & !63
}

/// Size of a cache line, the unit of flushes.
pub const LINE: u64 = 64;
