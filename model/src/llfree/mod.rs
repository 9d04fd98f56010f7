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
//! # As an [`Allocator`]
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
pub mod mutation;
pub mod recovery;
pub mod reserve;
pub mod thread;
pub mod upper;
pub mod zone;

pub use mutation::Mutation;
pub use recovery::RecoveryReport;
pub use thread::LlFreeThread;

use crate::alloc::{Allocator, CrashRules, Footprint, HeapNeed, Params};
use crate::config::AllocConfig;
use crate::error::AllocError;
use crate::heap::Heap;
use crate::live::LiveBytes;
use crate::params::as_map;
use crate::pm::{Pm, PmThread};
use lower::{Lower, TREE_CHILDREN};
use pmsim_traces::{Category, OpKind};
use serde::{Deserialize, Serialize};

use std::sync::Arc;
use upper::Upper;
use zone::{Marker, Zone, CHILD_FRAMES, FRAME};

/// The allocator's name in messages and the registry's `--help`.
pub const NAME: &str = "LLFree";

/// Every parameter of an LLFree instance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LlFreeConfig {
    /// eADR: no flush or fence after the lower level's CASes (the caches
    /// are persistent).
    pub eadr: bool,
    /// Per-CPU data slots; thread `tid` uses slot `tid % cpus` (fewer slots,
    /// one per whole tree, on a zone of fewer trees: see [`upper`]).
    pub cpus: u32,
    /// Reserve-on-free threshold `F` (0 = off). The paper found 4 best.
    pub reserve_on_free: u32,
    /// A tree with fewer free frames than this fraction is *allocated*.
    pub allocated: f64,
    /// A tree with more free frames than this fraction is *free*.
    pub free: f64,
    /// A removed flush or swapped order, for checkers to catch (see [`Mutation`]).
    pub mutation: Mutation,
}

impl Default for LlFreeConfig {
    fn default() -> Self {
        LlFreeConfig {
            eadr: false,
            cpus: 64,
            reserve_on_free: 4,
            allocated: 0.125,
            free: 0.875,
            mutation: Mutation::None,
        }
    }
}

impl AllocConfig for LlFreeConfig {
    const ALLOC: &'static str = NAME;

    fn validate(&self) -> Result<(), AllocError> {
        if self.cpus == 0 || self.cpus > 4096 {
            return Err(AllocError::config(NAME, format!("cpus = {} (must be 1..=4096)", self.cpus)));
        }
        if !(0.0..=1.0).contains(&self.allocated) || !(self.allocated..=1.0).contains(&self.free) {
            return Err(AllocError::config(
                NAME,
                format!(
                    "thresholds allocated = {}, free = {} (need 0 <= allocated <= free <= 1)",
                    self.allocated, self.free
                ),
            ));
        }
        Ok(())
    }
}

impl LlFreeConfig {
    /// Whether the lower level flushes and fences its CASes.
    pub fn persist(&self) -> bool {
        !self.eadr
    }
}

/// An LLFree instance on one heap, shared by all threads of a run.
pub struct LlFree {
    cfg: LlFreeConfig,
    pm: Pm,
    lower: Lower,
    upper: Upper,
    /// Frame bytes allocated, counted per thread slot over those allocated at open.
    live: LiveBytes,
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
    pub fn create(heap: &Heap, pm: Pm, cfg: LlFreeConfig) -> Result<Arc<LlFree>, AllocError> {
        cfg.validate()?;
        let mut t = pm.thread(0);
        if Zone::read(&t).is_ok() {
            return Err(AllocError::exists(NAME, "already holds an LLFree zone (open it instead)").in_file(heap));
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
    pub fn open(heap: &Heap, pm: Pm, cfg: LlFreeConfig) -> Result<Arc<LlFree>, AllocError> {
        cfg.validate()?;
        let mut t = pm.thread(0);
        let z = Zone::read(&t).map_err(|e| e.in_file(heap))?;
        t.op_begin(OpKind::Recovery, 0);
        regions(&mut t, &z);
        let lower = Lower::new(z, cfg.persist()).with_mutation(cfg.mutation);
        let trust = cfg.mutation == Mutation::LlTrustCounters;
        let (report, free) = recovery::recover_as(&mut t, &lower, trust).map_err(|e| e.in_file(heap))?;
        t.op_end(OpKind::Recovery, 0);
        drop(t);
        Ok(LlFree::assemble(cfg, pm, lower, &free, report))
    }

    fn assemble(cfg: LlFreeConfig, pm: Pm, lower: Lower, free: &[u32], report: RecoveryReport) -> Arc<LlFree> {
        let upper = Upper::new(lower.zone.nhuge, free, cfg.cpus as usize, cfg.allocated, cfg.free);
        let live = LiveBytes::new(report.frames_allocated * FRAME, cfg.cpus as usize);
        Arc::new(LlFree { cfg, pm, lower, upper, live, report })
    }

    /// Shuts down cleanly: marks the zone *shutdown* durably (the counters
    /// are exact: no thread handle is alive) and gives the `Pm` back.
    pub fn close(self: Arc<Self>) -> Result<Pm, AllocError> {
        let ll = AllocError::sole_owner(self, NAME)?;
        let mut t = ll.pm.thread(0);
        t.op_begin(OpKind::Close, 0);
        // Every CAS was flushed as it happened (or, under eADR, the cache is
        // durable): the marker alone vouches for the counters.
        Zone::set_marker(&mut t, Marker::Shutdown);
        t.op_end(OpKind::Close, 0);
        drop(t);
        Ok(ll.pm)
    }

    pub fn config(&self) -> &LlFreeConfig {
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
        self.live.add(tid, bytes);
    }

    fn live_bytes(&self) -> u64 {
        self.live.get()
    }
}

impl Allocator for LlFree {
    type Config = LlFreeConfig;
    type Thread = LlFreeThread;
    const FAMILY: &'static str = "llfree";
    const PRESETS: &'static [&'static str] = &["llfree"];
    const ABOUT: &'static str = "LLFree, the lock- and log-free page-frame allocator, in persistent mode";

    fn create(heap: &Heap, pm: Pm, cfg: LlFreeConfig) -> Result<Arc<Self>, AllocError> {
        LlFree::create(heap, pm, cfg)
    }

    fn open(heap: &Heap, pm: Pm, cfg: LlFreeConfig) -> Result<Arc<Self>, AllocError> {
        LlFree::open(heap, pm, cfg)
    }

    fn close(self: Arc<Self>, _heap: &Heap) -> Result<Pm, AllocError> {
        LlFree::close(self)
    }

    fn variant(cfg: &LlFreeConfig) -> String {
        if cfg.eadr { "eadr" } else { "adr" }.into()
    }

    /// A whole frame per object (4 KiB, or 2 MiB above that) and a tree
    /// (64 MiB) per thread to reserve, not the workload's byte-sized hint.
    fn heap_size(_cfg: &LlFreeConfig, need: &HeapNeed) -> u64 {
        let (threads, frame) = (need.threads, if need.max_object <= 4096 { 4096 } else { 2 << 20 });
        // The workload's objects plus its own arrays, a quarter extra for
        // the trees' fill levels, a tree per thread and one more.
        let frames = need.peak_objects.saturating_add(64).saturating_mul(frame);
        let want = (frames + frames / 4 + (16 << 20)).max((threads as u64 + 1) * (64 << 20));
        want.div_ceil(2 << 20) * (2 << 20)
    }

    /// Under ADR only: the explorer's persistency model is ADR's, while an
    /// eADR run leaves its stores unflushed on purpose. Every CAS of the
    /// lower level is flushed and fenced in the call; `malloc_to`
    /// allocates, then publishes, and `free_from` unpublishes, then frees:
    /// a crash in between loses the frame (see [`recovery`]).
    fn crash_rules(cfg: &LlFreeConfig) -> Result<CrashRules, String> {
        if cfg.eadr {
            return Err("LLFree with eadr=true: its stores are never flushed, and the crash explorer models ADR \
                        (trace it with eadr=false)"
                .into());
        }
        Ok(CrashRules { plain_mallocs_durable: true, interrupted_may_lose: true, ..CrashRules::default() })
    }

    fn live_blocks(&self, t: &mut LlFreeThread) -> Vec<(u64, u64)> {
        self.allocations(t.pm())
    }

    /// Every child counter against its bit field ([`Lower::check`]).
    fn check_metadata(&self, t: &mut LlFreeThread) -> Result<(), String> {
        self.check(t.pm())
    }

    /// `ll-inc-before-clear` leaves a window the suite's Threadtest does
    /// not crash in: TLC refutes its trace (`tests/specs_validate.rs`).
    const MUTANTS: &'static [&'static str] = &[
        "llfree:mutation=ll-counter-flush",
        "llfree:mutation=free-before-unpublish",
        "llfree:mutation=ll-trust-counters",
    ];

    fn name(&self) -> String {
        if self.cfg.eadr { "llfree-eadr" } else { "llfree" }.into()
    }

    fn params(&self) -> Params {
        as_map(&self.cfg)
    }

    fn thread(self: &Arc<Self>, tid: u32) -> LlFreeThread {
        LlFreeThread::new(self.clone(), tid)
    }

    fn footprint(&self) -> Footprint {
        let live = self.live_bytes();
        Footprint { live_bytes: live, mapped_bytes: self.lower.zone.frames_off + live }
    }
}
