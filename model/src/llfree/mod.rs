//! LLFree (Wrenger et al., USENIX ATC '23) in persistent mode on a pmsim
//! heap: a lock- and log-free page-frame allocator whose every de/allocation
//! is one CAS on one cache line. The module split follows the paper's:
//!
//! * [`lower`] — the lower level (§3.2.1): 512-frame bit fields and 16-bit
//!   child entries (free counter `c_L`, huge flag `a`); persistent.
//! * [`upper`] — the upper level (§3.2.2): trees of 32 children with global
//!   counters, per-CPU reserved trees with local counters; DRAM only.
//! * [`reserve`] — tree reservation: the free / partial / allocated search
//!   heuristic, draining and stealing.
//! * [`zone`] and [`recovery`] — persistence (§3.2.3): the zone page with
//!   magic, size and startup/shutdown marker; counters rebuilt from the bit
//!   fields after a crash.
//! * [`thread`] — allocation and free (Fig. 14) and pmsim's
//!   [`AllocThread`](crate::AllocThread), including reserve-on-free.
//!
//! The protocol is also specified in TLA+ (`specs/LLFreeSingleCAS`); the
//! actions there carry the paper's names used here (`get`, `put`,
//! `reserve`, `unreserve`, `sync`, `drain`, recovery).
//!
//! # As a [`PmAllocator`]
//!
//! LLFree hands out 4 KiB frames: `malloc(size)` takes the smallest order
//! that holds `size` — order 0 (4 KiB) or order 9 (2 MiB) — and returns
//! `None` for more than 2 MiB (a page-frame allocator has no larger natural
//! size here). Orders 1–8 are not implemented: `free(off)` carries no order,
//! and the order of a multi-frame block in the middle of a bit field cannot
//! be told after a restart without a per-frame record, which the paper's
//! persistent design does not have (Linux keeps it in `struct page`).
//! Requests of 4 KiB–2 MiB therefore take a huge frame.
//!
//! Every CAS of the lower level is followed by a flush of its line and a
//! fence, as ADR platforms need; with `eadr=true` they are left out (the
//! paper's measurements assume eADR, §5.1). The footprint's `live_bytes`
//! counts whole frames handed out; `mapped_bytes` adds the metadata (zone
//! page, children, bit fields) to them.

pub mod lower;
pub mod recovery;
pub mod reserve;
pub mod thread;
pub mod upper;
pub mod zone;

pub use recovery::RecoveryReport;
pub use thread::LlThread;

use crate::alloc::{Footprint, PmAllocator};
use crate::heap::{Heap, HeapError};
use crate::mech::mutation::Mutation;
use crate::params::{set_field, split_override};
use crate::pm::{Pm, PmThread};
use lower::{Lower, TREE_CHILDREN};
use pmsim_traces::{Category, OpKind};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use upper::Upper;
use zone::{Marker, Zone, CHILD_FRAMES, FRAME};

/// Every parameter of an LLFree instance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LlConfig {
    /// eADR: no flush or fence after the lower level's CASes (the caches
    /// are persistent).
    pub eadr: bool,
    /// Per-CPU data slots; thread `tid` uses slot `tid % cpus`.
    pub cpus: u32,
    /// Reserve-on-free threshold `F` (0 = off). The paper found 4 best.
    pub reserve_on_free: u32,
    /// A tree with fewer free frames than this fraction is *allocated*.
    pub allocated: f64,
    /// A tree with more free frames than this fraction is *free*.
    pub free: f64,
    /// A removed flush, for checkers to catch (only `ll-counter-flush`
    /// concerns LLFree; see [`Mutation`]).
    pub mutation: Mutation,
}

impl Default for LlConfig {
    fn default() -> Self {
        LlConfig { eadr: false, cpus: 64, reserve_on_free: 4, allocated: 0.125, free: 0.875, mutation: Mutation::None }
    }
}

impl LlConfig {
    /// Sets parameter `key` from its text (`eadr=true`, `cpus=8`, …).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), LlError> {
        set_field(self, "LLFree parameter", key, value).map_err(LlError::Config)
    }

    /// Applies `key=value` overrides in order.
    pub fn with_overrides<'a>(mut self, kvs: impl IntoIterator<Item = &'a str>) -> Result<LlConfig, LlError> {
        for kv in kvs {
            let (k, v) = split_override(kv).map_err(LlError::Config)?;
            self.set(k, v)?;
        }
        Ok(self)
    }

    pub fn validate(&self) -> Result<(), LlError> {
        if self.cpus == 0 || self.cpus > 4096 {
            return Err(LlError::Config(format!("cpus = {} (must be 1..=4096)", self.cpus)));
        }
        if !(0.0..=1.0).contains(&self.allocated) || !(self.allocated..=1.0).contains(&self.free) {
            return Err(LlError::Config(format!(
                "thresholds allocated = {}, free = {} (need 0 <= allocated <= free <= 1)",
                self.allocated, self.free
            )));
        }
        if !matches!(self.mutation, Mutation::None | Mutation::LlCounterFlush) {
            return Err(LlError::Config(format!(
                "mutation = {} does not concern LLFree (it has ll-counter-flush)",
                self.mutation.name()
            )));
        }
        Ok(())
    }

    /// Whether the lower level flushes and fences its CASes.
    pub fn persist(&self) -> bool {
        !self.eadr
    }
}

/// Why an LLFree heap could not be created, opened or closed. One line.
#[derive(Debug)]
pub enum LlError {
    Config(String),
    TooSmall(String),
    Corrupt(String),
    Exists(String),
    InUse(String),
    Heap(HeapError),
}

impl fmt::Display for LlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LlError::Config(m) => write!(f, "LLFree configuration: {m}"),
            LlError::Corrupt(m) => write!(f, "corrupt LLFree heap: {m}"),
            LlError::TooSmall(m) | LlError::Exists(m) | LlError::InUse(m) => f.write_str(m),
            LlError::Heap(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for LlError {}

impl From<HeapError> for LlError {
    fn from(e: HeapError) -> Self {
        LlError::Heap(e)
    }
}

impl LlError {
    /// The same error with the heap file named in front.
    fn in_file(self, heap: &Heap) -> LlError {
        let p = heap.path().display();
        match self {
            LlError::TooSmall(m) => LlError::TooSmall(format!("{p}: {m}")),
            LlError::Corrupt(m) => LlError::Corrupt(format!("{p}: {m}")),
            LlError::Exists(m) => LlError::Exists(format!("{p}: {m}")),
            e => e,
        }
    }
}

/// A per-thread counter on its own cache line.
#[repr(align(64))]
#[derive(Default)]
struct Padded(AtomicI64);

/// An LLFree instance on one heap, shared by all threads of a run.
pub struct LlFree {
    cfg: LlConfig,
    pm: Pm,
    lower: Lower,
    upper: Upper,
    /// Frame bytes allocated minus freed, per thread slot.
    live: Box<[Padded]>,
    /// Frame bytes allocated when the heap was opened.
    live_base: u64,
    report: RecoveryReport,
}

/// Registers the zone's regions so the simulator breaks flushes down.
fn regions(t: &mut PmThread, z: &Zone) {
    t.add_region("llfree zone page", Category::Meta, zone::ZONE, 4096);
    t.add_region("llfree children", Category::Meta, z.children_off, z.children_bytes());
    t.add_region("llfree bit fields", Category::Meta, z.bitfields_off, 64 * z.nhuge);
    t.add_region("llfree frames", Category::Data, z.frames_off, z.frames() * FRAME);
}

impl LlFree {
    /// Formats a new LLFree zone on `heap` (which must not hold one) and
    /// returns the allocator, which does all persistence through `pm`.
    pub fn create(heap: &Heap, pm: Pm, cfg: LlConfig) -> Result<Arc<LlFree>, LlError> {
        cfg.validate()?;
        let mut t = pm.thread(0);
        if Zone::read(&t).is_ok() {
            return Err(LlError::Exists("already holds an LLFree zone (open it instead)".into()).in_file(heap));
        }
        t.op_begin(OpKind::Init, 0);
        let z = Zone::plan(heap.size()).map_err(|e| e.in_file(heap))?;
        regions(&mut t, &z);
        let lower = Lower::new(z, cfg.persist()).with_mutation(cfg.mutation);
        lower.format(&mut t);
        z.write(&mut t);
        t.op_end(OpKind::Init, 0);
        drop(t);
        let ntrees = z.nhuge.div_ceil(TREE_CHILDREN);
        let free: Vec<u32> =
            (0..ntrees).map(|i| ((z.nhuge - i * TREE_CHILDREN).min(TREE_CHILDREN) as u32) * CHILD_FRAMES).collect();
        Ok(LlFree::assemble(cfg, pm, lower, &free, RecoveryReport::default()))
    }

    /// Opens the LLFree zone on `heap`, recovering the counters if it was
    /// not shut down cleanly (see [`recovery`]).
    pub fn open(heap: &Heap, pm: Pm, cfg: LlConfig) -> Result<Arc<LlFree>, LlError> {
        cfg.validate()?;
        let mut t = pm.thread(0);
        let z = Zone::read(&t).map_err(|e| e.in_file(heap))?;
        t.op_begin(OpKind::Recovery, 0);
        regions(&mut t, &z);
        let lower = Lower::new(z, cfg.persist()).with_mutation(cfg.mutation);
        let (report, free) = recovery::recover(&mut t, &lower).map_err(|e| e.in_file(heap))?;
        t.op_end(OpKind::Recovery, 0);
        drop(t);
        Ok(LlFree::assemble(cfg, pm, lower, &free, report))
    }

    fn assemble(cfg: LlConfig, pm: Pm, lower: Lower, free: &[u32], report: RecoveryReport) -> Arc<LlFree> {
        let upper = Upper::new(lower.zone.nhuge, free, cfg.cpus as usize, cfg.allocated, cfg.free);
        let live = (0..cfg.cpus).map(|_| Padded::default()).collect();
        Arc::new(LlFree { live_base: report.frames_allocated * FRAME, cfg, pm, lower, upper, live, report })
    }

    /// Shuts down cleanly: marks the zone *shutdown* durably (the counters
    /// are exact: no thread handle is alive) and gives the `Pm` back.
    pub fn close(self: Arc<Self>) -> Result<Pm, LlError> {
        let ll = Arc::try_unwrap(self).map_err(|a| {
            LlError::InUse(format!(
                "cannot close LLFree: {} thread handle(s) still use it (drop them first)",
                Arc::strong_count(&a) - 1
            ))
        })?;
        let mut t = ll.pm.thread(0);
        t.op_begin(OpKind::Close, 0);
        // Every CAS was flushed as it happened (or, under eADR, the cache is
        // durable): the marker alone vouches for the counters.
        Zone::set_marker(&mut t, Marker::Shutdown);
        t.op_end(OpKind::Close, 0);
        drop(t);
        Ok(ll.pm)
    }

    pub fn config(&self) -> &LlConfig {
        &self.cfg
    }

    pub fn zone(&self) -> Zone {
        self.lower.zone
    }

    /// What the open that made this instance found (zero after `create`).
    pub fn recovery(&self) -> RecoveryReport {
        self.report
    }

    /// Checks that every child counter agrees with its bit field (exact only
    /// when no operation is in flight).
    pub fn check(&self, t: &PmThread) -> Result<(), String> {
        self.lower.check(t)
    }

    /// Free base frames as the upper level counts them (exact when quiescent).
    pub fn free_frames(&self) -> u64 {
        self.upper.free_frames()
    }

    /// Every allocated block `(offset, bytes)` by address, read from the
    /// lower level: huge frames from their children, base frames from the
    /// bit fields.
    pub fn allocations(&self, t: &PmThread) -> Vec<(u64, u64)> {
        let z = self.lower.zone;
        let mut out = Vec::new();
        for c in 0..z.nhuge {
            let first = c * CHILD_FRAMES as u64;
            if self.lower.child(t, c).huge() {
                out.push((z.frame_off(first), zone::HUGE));
            } else if self.lower.taken(t, c) > 0 {
                for pfn in first..first + CHILD_FRAMES as u64 {
                    if self.lower.is_taken(t, pfn) {
                        out.push((z.frame_off(pfn), FRAME));
                    }
                }
            }
        }
        out
    }

    fn account(&self, tid: u32, bytes: i64) {
        self.live[tid as usize % self.live.len()].0.fetch_add(bytes, Ordering::Relaxed);
    }

    fn live_bytes(&self) -> u64 {
        let d: i64 = self.live.iter().map(|p| p.0.load(Ordering::Relaxed)).sum();
        (self.live_base as i64 + d).max(0) as u64
    }
}

impl PmAllocator for LlFree {
    type Thread = LlThread;

    fn name(&self) -> String {
        if self.cfg.eadr { "llfree-eadr" } else { "llfree" }.into()
    }

    fn params(&self) -> serde_json::Map<String, serde_json::Value> {
        match serde_json::to_value(&self.cfg).expect("config serializes") {
            serde_json::Value::Object(m) => m,
            _ => unreachable!("config is an object"),
        }
    }

    fn thread(self: &Arc<Self>, tid: u32) -> LlThread {
        LlThread::new(self.clone(), tid)
    }

    fn footprint(&self) -> Footprint {
        let live = self.live_bytes();
        Footprint { live_bytes: live, mapped_bytes: self.lower.zone.frames_off + live }
    }
}
