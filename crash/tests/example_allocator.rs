//! The example of ARCHITECTURE.md, "Adding an allocator": a small allocator
//! written against pmsim's seam and registered only here, in its test. It
//! touches no other file of pmsim, yet runs every workload through the
//! runner, recovers from SIGKILL, passes the crash explorer, and its broken
//! variant (`mutation=true`: the undo record is not persisted before the
//! change it guards) is caught — all from the one `conformance_tests!` line.
//!
//! The allocator: blocks of power-of-two sizes, each behind a one-line
//! header (`size | allocated`), cut from the heap by a persistent bump
//! pointer and reused through DRAM free lists. Every operation runs under
//! one lock and is made atomic by an undo log of up to three words: the old
//! values are persisted first, then the changes, then the log is cleared.
//! Recovery rolls back an uncommitted log and rebuilds the free lists by
//! walking the headers.

use pmsim_model::family::{recovery_target, Allocator, CrashTarget, Family, Native, Recoverable};
use pmsim_model::heap::HEADER_SIZE;
use pmsim_model::live::LiveBytes;
use pmsim_model::params::as_map;
use pmsim_model::{AllocConfig, AllocError, AllocThread, Category, Footprint, Heap, OpKind, Pm, PmAllocator, PmThread};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const NAME: &str = "Bump";
/// The superblock line: magic, bump pointer.
const SB: u64 = HEADER_SIZE;
const TOP: u64 = SB + 8;
/// The undo-log line: entry count, then up to three (address, old value) pairs.
const LOG: u64 = SB + 64;
/// The first block.
const BASE: u64 = SB + 4096;
/// A block's header line before its data.
const HDR: u64 = 64;
const MAGIC: u64 = u64::from_le_bytes(*b"BUMPUNDO");

/// The parameters (`bump:min_block=128`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BumpConfig {
    /// The smallest block (data bytes).
    pub min_block: u64,
    /// The broken variant for the crash explorer: the undo record is not
    /// persisted before the words it guards change.
    pub mutation: bool,
}

impl Default for BumpConfig {
    fn default() -> Self {
        BumpConfig { min_block: 64, mutation: false }
    }
}

impl AllocConfig for BumpConfig {
    const ALLOC: &'static str = NAME;

    fn validate(&self) -> Result<(), AllocError> {
        if !self.min_block.is_power_of_two() || !(64..=4096).contains(&self.min_block) {
            let m = format!("min_block = {} (must be a power of two in 64..=4096)", self.min_block);
            return Err(AllocError::config(NAME, m));
        }
        Ok(())
    }
}

pub struct Bump {
    cfg: BumpConfig,
    pm: Pm,
    size: u64,
    /// Free block headers by block size.
    free: Mutex<HashMap<u64, Vec<u64>>>,
    /// The bump pointer as last written (for footprints).
    top: AtomicU64,
    live: LiveBytes,
}

/// Undo logging: remembers the old values of `addrs`, durably (unless mutated).
fn log(t: &mut PmThread, cfg: &BumpConfig, addrs: &[u64]) {
    for (i, &a) in addrs.iter().enumerate() {
        let old = t.load_u64(a);
        t.store_u64(LOG + 8 + 16 * i as u64, a);
        t.store_u64(LOG + 16 + 16 * i as u64, old);
    }
    t.store_u64(LOG, addrs.len() as u64);
    if !cfg.mutation {
        t.persist(LOG, 64);
    }
}

fn commit(t: &mut PmThread) {
    t.store_u64(LOG, 0);
    t.persist(LOG, 8);
}

impl Bump {
    /// Rolls back an uncommitted operation and rebuilds the free lists.
    fn open_heap(heap: &Heap, pm: Pm, cfg: BumpConfig) -> Result<Arc<Bump>, AllocError> {
        let mut t = pm.thread(0);
        if t.load_u64(SB) != MAGIC {
            return Err(AllocError::corrupt(NAME, "no bump heap here (bad magic)").in_file(heap));
        }
        t.op_begin(OpKind::Recovery, 0);
        let n = t.load_u64(LOG);
        if n > 3 {
            return Err(AllocError::corrupt(NAME, format!("undo log of {n} entries (at most 3)")).in_file(heap));
        }
        for i in (0..n).rev() {
            let (a, old) = (t.load_u64(LOG + 8 + 16 * i), t.load_u64(LOG + 16 + 16 * i));
            t.store_u64(a, old);
            t.persist(a, 8);
        }
        commit(&mut t);
        t.op_end(OpKind::Recovery, 0);
        let mut free: HashMap<u64, Vec<u64>> = HashMap::new();
        let mut live = 0;
        for (h, size, used) in walk(&t, heap.size()).map_err(|m| AllocError::corrupt(NAME, m).in_file(heap))? {
            if used {
                live += size;
            } else {
                free.entry(size).or_default().push(h);
            }
        }
        let top = AtomicU64::new(t.load_u64(TOP));
        drop(t);
        let (size, free, live) = (heap.size(), Mutex::new(free), LiveBytes::new(live, 64));
        Ok(Arc::new(Bump { cfg, pm, size, free, top, live }))
    }

    fn class(&self, size: u64) -> u64 {
        size.max(self.cfg.min_block).next_power_of_two()
    }

    fn alloc(&self, t: &mut PmThread, size: u64, dest: Option<u64>) -> Option<u64> {
        let class = self.class(size);
        let mut free = self.free.lock().unwrap();
        let (h, bumped) = match free.get_mut(&class).and_then(Vec::pop) {
            Some(h) => (h, false),
            None => {
                let top = t.load_u64(TOP);
                if top + HDR + class > self.size {
                    return None;
                }
                (top, true)
            }
        };
        let words: Vec<u64> = [Some(h), bumped.then_some(TOP), dest].into_iter().flatten().collect();
        log(t, &self.cfg, &words);
        t.store_u64(h, class | 1);
        t.persist(h, 8);
        if bumped {
            t.store_u64(TOP, h + HDR + class);
            t.persist(TOP, 8);
            self.top.store(h + HDR + class, Ordering::Relaxed);
        }
        if let Some(d) = dest {
            t.store_u64(d, h + HDR);
            t.persist(d, 8);
        }
        commit(t);
        self.live.add(t.tid(), class as i64);
        Some(h + HDR)
    }

    fn dealloc(&self, t: &mut PmThread, off: u64, dest: Option<u64>) {
        let h = off - HDR;
        let word = t.load_u64(h);
        assert!(word & 1 == 1, "free of {off:#x}: not an allocated block");
        let class = word & !1;
        let mut free = self.free.lock().unwrap();
        let words: Vec<u64> = [Some(h), dest].into_iter().flatten().collect();
        log(t, &self.cfg, &words);
        t.store_u64(h, class);
        t.persist(h, 8);
        if let Some(d) = dest {
            t.store_u64(d, 0);
            t.persist(d, 8);
        }
        commit(t);
        free.entry(class).or_default().push(h);
        self.live.add(t.tid(), -(class as i64));
    }
}

/// Every block `(header, size, allocated)` from the base to the bump pointer.
fn walk(t: &PmThread, heap_size: u64) -> Result<Vec<(u64, u64, bool)>, String> {
    let top = t.load_u64(TOP);
    if !(BASE..=heap_size).contains(&top) {
        return Err(format!("bump pointer {top:#x} outside the heap"));
    }
    let mut out = Vec::new();
    let mut h = BASE;
    while h < top {
        let w = t.load_u64(h);
        let size = w & !1;
        if !size.is_power_of_two() || size < 64 || h + HDR + size > top {
            return Err(format!("block header at {h:#x} holds {w:#x}"));
        }
        out.push((h, size, w & 1 == 1));
        h += HDR + size;
    }
    Ok(out)
}

pub struct BumpThread {
    a: Arc<Bump>,
    t: PmThread,
}

impl PmAllocator for Bump {
    type Thread = BumpThread;

    fn name(&self) -> String {
        "bump".into()
    }

    fn params(&self) -> serde_json::Map<String, serde_json::Value> {
        as_map(&self.cfg)
    }

    fn thread(self: &Arc<Self>, tid: u32) -> BumpThread {
        BumpThread { a: self.clone(), t: self.pm.thread(tid) }
    }

    fn footprint(&self) -> Footprint {
        Footprint { live_bytes: self.live.get(), mapped_bytes: self.top.load(Ordering::Relaxed) }
    }
}

impl AllocThread for BumpThread {
    fn malloc(&mut self, size: u64) -> Option<u64> {
        self.t.op_begin(OpKind::Malloc, size);
        let r = self.a.alloc(&mut self.t, size, None);
        self.t.op_end(OpKind::Malloc, r.unwrap_or(0));
        r
    }

    fn free(&mut self, off: u64) {
        self.t.op_begin(OpKind::Free, off);
        self.a.dealloc(&mut self.t, off, None);
        self.t.op_end(OpKind::Free, 0);
    }

    fn malloc_to(&mut self, size: u64, dest: u64) -> Option<u64> {
        self.t.op_begin(OpKind::Malloc, size);
        let r = self.a.alloc(&mut self.t, size, Some(dest));
        self.t.op_end(OpKind::Malloc, r.unwrap_or(0));
        r
    }

    fn free_from(&mut self, dest: u64) {
        let off = self.t.load_u64(dest);
        self.t.op_begin(OpKind::Free, off);
        self.a.dealloc(&mut self.t, off, Some(dest));
        self.t.op_end(OpKind::Free, 0);
    }

    fn write(&mut self, off: u64, data: &[u8]) {
        self.t.store_bytes(off, data);
    }

    fn read(&self, off: u64, buf: &mut [u8]) {
        self.t.load_bytes(off, buf);
    }

    fn persist(&mut self, off: u64, len: u64) {
        self.t.persist(off, len);
    }

    fn set_root(&mut self, slot: usize, off: u64) {
        self.t.set_root(slot, off);
    }

    fn root(&self, slot: usize) -> u64 {
        self.t.root(slot)
    }

    fn idle(&mut self) {
        self.t.flush_thread();
    }
}

impl Allocator for Bump {
    type Config = BumpConfig;
    const FAMILY: &'static str = "bump";
    const PRESETS: &'static [&'static str] = &["bump"];
    const ABOUT: &'static str = "a bump allocator with an undo log (the example of ARCHITECTURE.md)";

    fn create(heap: &Heap, pm: Pm, cfg: BumpConfig) -> Result<Arc<Self>, AllocError> {
        if heap.size() < BASE + HDR + cfg.min_block {
            return Err(AllocError::too_small(NAME, format!("{} bytes is too small a heap", heap.size())).in_file(heap));
        }
        let mut t = pm.thread(0);
        if t.load_u64(SB) == MAGIC {
            return Err(AllocError::exists(NAME, "already holds a bump heap").in_file(heap));
        }
        t.op_begin(OpKind::Init, 0);
        t.add_region("bump superblock", Category::Meta, SB, 64);
        t.add_region("bump undo log", Category::Wal, LOG, 64);
        t.store_u64(TOP, BASE);
        t.store_u64(LOG, 0);
        t.persist(TOP, 8);
        t.persist(LOG, 8);
        t.store_u64(SB, MAGIC);
        t.persist(SB, 8);
        t.op_end(OpKind::Init, 0);
        drop(t);
        Bump::open_heap(heap, pm, cfg)
    }

    fn open(heap: &Heap, pm: Pm, cfg: BumpConfig) -> Result<Arc<Self>, AllocError> {
        Bump::open_heap(heap, pm, cfg)
    }

    fn close(self: Arc<Self>, heap: &Heap) -> Result<Pm, AllocError> {
        Ok(AllocError::sole_owner(self, NAME).map_err(|e| e.in_file(heap))?.pm)
    }

    /// Blocks round up to powers of two behind a line of header.
    fn heap_size(_cfg: &BumpConfig, wl: &pmsim_model::workloads::Workload, threads: u32) -> u64 {
        (4 * wl.heap_size_hint(threads)).next_multiple_of(2 << 20)
    }

    fn crash_target(cfg: BumpConfig) -> Result<Box<dyn CrashTarget>, String> {
        Ok(recovery_target::<Self>(cfg))
    }
}

impl Recoverable for Bump {
    fn plain_mallocs_durable(_cfg: &BumpConfig) -> bool {
        true
    }

    fn live_blocks(&self, t: &mut BumpThread) -> Vec<(u64, u64)> {
        let blocks = walk(&t.t, self.size).expect("walked at open");
        blocks.into_iter().filter(|b| b.2).map(|(h, s, _)| (h + HDR, s)).collect()
    }

    fn check_metadata(&self, t: &mut BumpThread) -> Result<(), String> {
        let free: usize = self.free.lock().unwrap().values().map(Vec::len).sum();
        let walked = walk(&t.t, self.size)?.iter().filter(|b| !b.2).count();
        if free != walked {
            return Err(format!("{free} blocks on the free lists, {walked} free headers"));
        }
        Ok(())
    }
}

/// The registration: in pmsim it is one line in `registry::ALLOCATORS`;
/// this test keeps it to itself.
static BUMP: Native<Bump> = Native::<Bump>::ENTRY;

fn bump() -> &'static dyn Family {
    &BUMP
}

pmsim_crash::conformance_tests!(bump(), "bump", recovery, mutated: "bump:mutation=true");

/// Its parameters are validated like every allocator's.
#[test]
fn bad_parameters_are_one_line_naming_the_range() {
    let e = pmsim_model::runner::AllocSpec::parse_among("bump:min_block=100", [], &[bump()]).unwrap_err().to_string();
    assert_eq!(e, "Bump configuration: min_block = 100 (must be a power of two in 64..=4096)");
}
