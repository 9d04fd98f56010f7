//! The example of ARCHITECTURE.md, "Adding an allocator": a small allocator
//! written against pmsim's seam (`model/src/alloc.rs`) and registered only
//! here, in its test, with the one line the guide puts in the registry. It
//! touches no other file of pmsim, yet runs every workload through the
//! runner, recovers from SIGKILL, passes the crash explorer, and its broken
//! variant (`mutation=true`: the undo record is not persisted before the
//! change it guards) is caught — all from the registration.
//!
//! The allocator: blocks of power-of-two sizes, each behind a one-line
//! header (`size | allocated`), cut from the heap by a persistent bump
//! pointer and reused through DRAM free lists. Every operation runs under
//! one lock and is made atomic by an undo log of up to three words: the old
//! values are persisted first, then the changes, then the log is cleared.
//! Recovery rolls back an uncommitted log and rebuilds the free lists by
//! walking the headers.
//!
//! Below it, tests that follow the guide's steps: the guide names what the
//! example does, the example's regions cover every byte it writes, and one
//! line added to a copy of pmsim's registry puts it under the suite.

use pmsim_crash::conformance::{plan, Stage};
use pmsim_model::family::{Family, Native};
use pmsim_model::heap::HEADER_SIZE;
use pmsim_model::live::LiveBytes;
use pmsim_model::params::as_map;
use pmsim_model::{
    AllocConfig, AllocError, AllocThread, Allocator, Category, CrashRules, Footprint, Heap, HeapNeed, OpKind, Params,
    Pm, PmThread,
};
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

/// Registers every area of the heap as a region, before anything is
/// written there (else its persist time counts as "unmapped"). The block
/// headers sit inside the blocks' region (an allocator that wants them
/// apart paints them with `mech::regions::RegionTiler`).
fn regions(t: &mut PmThread, heap: &Heap) {
    t.add_region("bump superblock", Category::Meta, SB, 64);
    t.add_region("bump undo log", Category::Wal, LOG, 64);
    t.add_region("bump blocks", Category::Data, BASE, heap.size() - BASE);
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

impl BumpThread {
    fn malloc_impl(&mut self, size: u64, dest: Option<u64>) -> Option<u64> {
        self.t.op_begin(OpKind::Malloc, size);
        let r = self.a.alloc(&mut self.t, size, dest);
        self.t.op_end(OpKind::Malloc, r.unwrap_or(0));
        r
    }

    fn free_impl(&mut self, off: u64, dest: Option<u64>) {
        self.t.op_begin(OpKind::Free, off);
        self.a.dealloc(&mut self.t, off, dest);
        self.t.op_end(OpKind::Free, 0);
    }
}

/// What a thread does: the forwarding macros write the eight methods that
/// every allocator's thread handle has alike.
impl AllocThread for BumpThread {
    pmsim_model::dest_forwarding_ops!(t);
    pmsim_model::pm_thread_access!(t);
}

/// The seam: what every allocator provides, then what this one may.
impl Allocator for Bump {
    type Config = BumpConfig;
    type Thread = BumpThread;
    const FAMILY: &'static str = "bump";
    const ABOUT: &'static str = "a bump allocator with an undo log (the example of ARCHITECTURE.md)";

    fn create(heap: &Heap, pm: Pm, cfg: BumpConfig) -> Result<Arc<Self>, AllocError> {
        if heap.size() < BASE + HDR + cfg.min_block {
            return Err(AllocError::too_small(NAME, format!("{} bytes is too small a heap", heap.size())).in_file(heap));
        }
        let mut t = pm.thread(0);
        if t.load_u64(SB) == MAGIC {
            return Err(AllocError::exists(NAME, "already holds a bump heap").in_file(heap));
        }
        regions(&mut t, heap);
        t.op_begin(OpKind::Init, 0);
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
        regions(&mut pm.thread(0), heap);
        Bump::open_heap(heap, pm, cfg)
    }

    fn close(self: Arc<Self>, heap: &Heap) -> Result<Pm, AllocError> {
        Ok(AllocError::sole_owner(self, NAME).map_err(|e| e.in_file(heap))?.pm)
    }

    fn thread(self: &Arc<Self>, tid: u32) -> BumpThread {
        BumpThread { a: self.clone(), t: self.pm.thread(tid) }
    }

    fn params(&self) -> Params {
        as_map(&self.cfg)
    }

    fn footprint(&self) -> Footprint {
        Footprint { live_bytes: self.live.get(), mapped_bytes: self.top.load(Ordering::Relaxed) }
    }

    fn live_blocks(&self, t: &mut BumpThread) -> Vec<(u64, u64)> {
        let blocks = walk(&t.t, self.size).expect("walked at open");
        blocks.into_iter().filter(|b| b.2).map(|(h, s, _)| (h + HDR, s)).collect()
    }

    /// Blocks round up to powers of two behind a line of header.
    fn heap_size(_cfg: &BumpConfig, need: &HeapNeed) -> u64 {
        (4 * need.hint).next_multiple_of(2 << 20)
    }

    /// Every operation is durable when it returns (its undo log is cleared last).
    fn crash_rules(_cfg: &BumpConfig) -> Result<CrashRules, String> {
        Ok(CrashRules { plain_mallocs_durable: true, ..CrashRules::default() })
    }

    fn check_metadata(&self, t: &mut BumpThread) -> Result<(), String> {
        let free: usize = self.free.lock().unwrap().values().map(Vec::len).sum();
        let walked = walk(&t.t, self.size)?.iter().filter(|b| !b.2).count();
        if free != walked {
            return Err(format!("{free} blocks on the free lists, {walked} free headers"));
        }
        Ok(())
    }

    const MUTANTS: &'static [&'static str] = &["bump:mutation=true"];
}

/// The registration, as the guide writes it in `registry::ALLOCATORS`:
/// `&Native::<Bump>::ENTRY`. This test keeps it in a registry of its own.
static REGISTRY: &[&dyn Family] = &[&Native::<Bump>::ENTRY];

pmsim_crash::conformance_suite!(REGISTRY);

fn bump() -> &'static dyn Family {
    REGISTRY[0]
}

/// Its parameters are validated like every allocator's.
#[test]
fn bad_parameters_are_one_line_naming_the_range() {
    let e = pmsim_model::runner::AllocSpec::parse_among("bump:min_block=100", [], &[bump()]).unwrap_err().to_string();
    assert_eq!(e, "Bump configuration: min_block = 100 (must be a power of two in 64..=4096)");
}

/// The guide's step "register it": pmsim's registry with the one line
/// added puts the allocator under every stage of the suite, its broken
/// variant included, beside every registered allocator; without the line,
/// nothing of it is there.
#[test]
fn one_registry_line_puts_it_under_the_suite() {
    let mut registry = pmsim_model::registry::ALLOCATORS.to_vec();
    let without: Vec<Vec<String>> = Stage::ALL.iter().map(|&s| specs(&plan(&registry, s))).collect();
    registry.push(&Native::<Bump>::ENTRY);
    for (stage, before) in Stage::ALL.into_iter().zip(without) {
        let after = specs(&plan(&registry, stage));
        assert_eq!(after[..before.len()], before[..], "{stage:?}: the registered allocators stay as they were");
        let added = &after[before.len()..];
        let want = if stage == Stage::MutantsCaught { "bump:mutation=true" } else { "bump" };
        assert_eq!(added, [want], "{stage:?}: the new line adds its checks");
        assert!(!before.iter().any(|s| s.starts_with("bump")), "{stage:?}");
    }
}

fn specs(checks: &[pmsim_crash::conformance::Check]) -> Vec<String> {
    checks.iter().map(|c| c.spec.clone()).collect()
}

/// The guide's step "its regions": every store and flush of a traced run
/// falls in a region the allocator registered (or the heap's header), so
/// none of its persist time counts as "unmapped" (the suite checks this
/// on its traced run too; here on a run of its own, with a count).
#[test]
fn every_byte_it_writes_is_in_a_region() {
    let dir = tempfile::tempdir().unwrap();
    let spec = pmsim_model::runner::AllocSpec::parse_among("bump", [], &[bump()]).unwrap();
    let trace = pmsim_crash::conformance::record(dir.path(), "b", &spec, "threadtest", &["objects=50"], false);
    let stats = pmsim_traces::TraceReader::open(&trace).unwrap().for_each(|_| {}).unwrap();
    assert!(stats.events > 1000, "only {} events", stats.events);
    assert_eq!(pmsim_crash::conformance::first_unmapped_write(&trace), None);
}

/// The guide's steps name what the example does, and name every item
/// the seam asks of every allocator: a step that drifts from the seam or
/// from the example fails here.
#[test]
fn the_guide_follows_the_seam_and_the_example() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    let doc = read("ARCHITECTURE.md");
    let start = doc.find("## Adding an allocator").expect("the guide");
    let guide = &doc[start..doc[start + 3..].find("\n## ").map_or(doc.len(), |e| start + 3 + e)];
    let example = read("crash/tests/example_allocator.rs");
    // What each step tells the reader to write, as the example writes it.
    for (step, in_guide, in_example) in [
        (2, "AllocConfig", "impl AllocConfig for"),
        (3, "impl Allocator for", "impl Allocator for"),
        (3, "impl AllocThread for", "impl AllocThread for"),
        (3, "pm_thread_access!", "pmsim_model::pm_thread_access!(t)"),
        (3, "dest_forwarding_ops!", "pmsim_model::dest_forwarding_ops!(t)"),
        (4, "add_region", "t.add_region("),
        (5, "crash_rules", "fn crash_rules("),
        (5, "check_metadata", "fn check_metadata("),
        (5, "MUTANTS", "const MUTANTS"),
        (6, "&Native::<MyAlloc>::ENTRY", "&Native::<Bump>::ENTRY"),
    ] {
        assert!(guide.contains(in_guide), "step {step} of the guide does not name `{in_guide}`");
        assert!(example.contains(in_example), "the example does not do step {step}: `{in_example}`");
    }
    // Every item of the seam without a default is named in the guide.
    let seam = read("model/src/alloc.rs");
    let body = &seam[seam.find("pub trait Allocator").unwrap()..];
    let body = &body[..body.find("\n}\n").unwrap()];
    let mut required = Vec::new();
    for line in body.lines().map(str::trim) {
        let item = |p: &str| line.strip_prefix(p).map(|r| r.split(['(', ':', '<', ';', ' ']).next().unwrap_or(""));
        let name = if line.ends_with(';') { item("fn ").or(item("type ")).or(item("const ")) } else { None };
        if let Some(n) = name.filter(|n| !n.is_empty()) {
            required.push(n.to_string());
        }
    }
    assert!(required.len() >= 10, "the seam's required items: {required:?}");
    for n in &required {
        assert!(guide.contains(&format!("`{n}`")), "the guide does not name the seam's required `{n}`");
    }
}
