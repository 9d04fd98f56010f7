//! A Metall-style allocator (Iwabuchi et al., ParCo '21) on a pmsim heap:
//! persistence by snapshot, not by flushes.
//!
//! * The application data segment is divided into chunks (2 MiB by
//!   default). A chunk holds small objects of one bin (internal allocation
//!   size, jemalloc-style classes from 8 B to half a chunk), or is part of a
//!   large object of whole chunks.
//! * Management data lives in DRAM while the store is open: the chunk
//!   directory ([`chunk_dir`]), the bin directory of non-full chunks per bin
//!   ([`bin_dir`]) and a multi-layer bitset per small chunk ([`crate::mech::bitset`]).
//!   Allocation touches no persistent metadata at all.
//! * Closing writes the management data to files and marks the datastore
//!   properly closed ([`store`]); opening a datastore without that mark is
//!   refused. [`Metall::snapshot`] copies the heap (reflink where the
//!   filesystem can) and the management data into a new, properly closed
//!   datastore.
//!
//! Not modelled: Metall's release of file space for emptied chunks
//! (`MADV_REMOVE` / hole punching) and its batch-synchronised mmap; an
//! emptied chunk simply returns to the chunk directory.
//!
//! # Publishing (`malloc_to` / `free_from`)
//!
//! Metall's consistency is the snapshot's: a crash loses the whole run (the
//! store is refused), a close or snapshot keeps all of it. So publishing is
//! a plain store of `*dest` — no flush, no log — made durable with
//! everything else by the `msync` of close or snapshot; a crash cannot
//! separate it from the allocation because nothing of the run survives one.
//!
//! # Persistence, as a trace shows it
//!
//! Within a run nothing is flushed by Metall. Close's `msync` of the heap
//! is [`PmThread::msync`]: traced, the flush of every line of every page
//! written since the store was opened and one fence, as the kernel does on
//! a DAX file system. The file operations (directory created, mark removed,
//! management files written, mark written) are trace markers
//! ([`crash::MARKER_PREFIX`]), and the management files a traced close
//! writes are saved with the trace's heap image, so `pmsim crash` can lay
//! out, at each crash point, the datastore a crash leaves there ([`crash`]).

pub mod bin_dir;
pub mod chunk_dir;
pub mod crash;
pub mod mutation;
pub mod store;

use crate::alloc::{AllocThread, Allocator, CrashRules, Footprint, Params};
use crate::config::AllocConfig;
use crate::error::AllocError;
use crate::heap::{Heap, HEADER_SIZE};
use crate::live::LiveBytes;
use crate::mech::sizeclass::SizeClasses;
use crate::params::as_map;
use crate::pm::{Pm, PmThread};
use crate::target::CrashTarget;
use bin_dir::Bin;
use chunk_dir::{ChunkDirectory, ChunkKind};
use pmsim_traces::{Category, OpKind};
use serde::{Deserialize, Serialize};

use std::path::{Path, PathBuf};

pub use mutation::Mutation;
use std::sync::{Arc, Mutex};
pub use store::CopyKind;

/// The allocator's name in messages and the registry's `--help`.
pub const NAME: &str = "Metall";

/// The smallest internal allocation size (Metall: 8 B).
pub const MIN_SIZE: u32 = 8;
/// Where chunk 0 starts: right after the heap header page.
pub const SEGMENT: u64 = HEADER_SIZE;

/// The parameters of a Metall-style store (`metall:key=value`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetallConfig {
    /// Chunk size in bytes: a power of two from 64 KiB to 2 MiB (at most
    /// 2^18 slots of 8 B, what three bitset layers cover).
    pub chunk_size: u64,
    /// A removed step or swapped order, for checkers to catch (see [`Mutation`]).
    pub mutation: Mutation,
}

impl Default for MetallConfig {
    fn default() -> Self {
        MetallConfig { chunk_size: 2 << 20, mutation: Mutation::None }
    }
}

impl AllocConfig for MetallConfig {
    const ALLOC: &'static str = NAME;

    fn validate(&self) -> Result<(), AllocError> {
        let c = self.chunk_size;
        if !c.is_power_of_two() || !(64 << 10..=2 << 20).contains(&c) {
            return Err(AllocError::config(NAME, format!("chunk_size = {c} (a power of two from 65536 to 2097152)")));
        }
        Ok(())
    }
}

const LIVE_SLOTS: usize = 64;

/// A Metall-style store open on one heap, shared by all threads of a run.
pub struct Metall {
    cfg: MetallConfig,
    pm: Pm,
    heap_path: PathBuf,
    dir: PathBuf,
    classes: SizeClasses,
    /// The chunk directory; its mutex serialises taking and returning chunks.
    chunks: ChunkDirectory,
    dir_lock: Mutex<()>,
    bins: Box<[Mutex<Bin>]>,
    live: LiveBytes,
}

fn classes(cfg: &MetallConfig) -> SizeClasses {
    SizeClasses::jemalloc(MIN_SIZE, (cfg.chunk_size / 2) as u32 + 1)
}

fn chunk_count(heap: &Heap, cfg: &MetallConfig) -> Result<u64, AllocError> {
    let n = (heap.size() - SEGMENT) / cfg.chunk_size;
    if n == 0 {
        return Err(AllocError::too_small(
            NAME,
            format!(
                "{}: heap of {} bytes holds no chunk of {} bytes",
                heap.path().display(),
                heap.size(),
                cfg.chunk_size
            ),
        ));
    }
    Ok(n)
}

impl Metall {
    /// Creates a new datastore: the heap `heap` as its data segment and a
    /// fresh management directory beside it (see [`store`]).
    pub fn create(heap: &Heap, pm: Pm, cfg: MetallConfig) -> Result<Arc<Metall>, AllocError> {
        cfg.validate()?;
        let n = chunk_count(heap, &cfg)?;
        let dir = store::store_dir(heap.path());
        store::create_dir(&dir)?;
        let cls = classes(&cfg);
        let bins = (0..cls.len()).map(|_| Bin::default()).collect();
        Ok(Metall::assemble(cfg, pm, heap, dir, cls, ChunkDirectory::new(n), bins, crash::CREATED))
    }

    /// Opens a properly closed datastore (refused otherwise, with one line
    /// saying so) and removes its mark until the next close.
    pub fn open(heap: &Heap, pm: Pm, cfg: MetallConfig) -> Result<Arc<Metall>, AllocError> {
        cfg.validate()?;
        let dir = store::store_dir(heap.path());
        store::check_properly_closed(heap.path(), &dir)?;
        let n = chunk_count(heap, &cfg)?;
        let cls = classes(&cfg);
        let slots = |b: usize| cfg.chunk_size / cls.size(b) as u64;
        let (cd, bins) = store::load(&dir, cfg.chunk_size, n, cls.len(), slots)?;
        store::remove_mark(&dir)?;
        Ok(Metall::assemble(cfg, pm, heap, dir, cls, cd, bins, crash::MARK_REMOVED))
    }

    /// The store on its management data; `marker` records in a trace what
    /// opening did to the datastore's files.
    #[allow(clippy::too_many_arguments)]
    fn assemble(
        cfg: MetallConfig,
        pm: Pm,
        heap: &Heap,
        dir: PathBuf,
        classes: SizeClasses,
        chunks: ChunkDirectory,
        bins: Vec<Bin>,
        marker: &str,
    ) -> Arc<Metall> {
        let mut live_base = 0;
        for c in 0..chunks.len() {
            if let ChunkKind::LargeHead { span } = chunks.get(c) {
                live_base += span as u64 * cfg.chunk_size;
            }
        }
        for (b, bin) in bins.iter().enumerate() {
            live_base += bin.chunks.values().map(|sc| sc.used).sum::<u64>() * classes.size(b) as u64;
        }
        let mut t = pm.thread(0);
        t.op_begin(OpKind::Init, 0);
        t.marker(0, marker);
        t.add_region("metall data segment", Category::Data, SEGMENT, chunks.len() * cfg.chunk_size);
        t.op_end(OpKind::Init, 0);
        drop(t);
        Arc::new(Metall {
            cfg,
            pm,
            heap_path: heap.path().to_path_buf(),
            dir,
            classes,
            chunks,
            dir_lock: Mutex::new(()),
            bins: bins.into_iter().map(Mutex::new).collect(),
            live: LiveBytes::new(live_base, LIVE_SLOTS),
        })
    }

    /// Writes the management data, syncs the heap, then marks the datastore
    /// properly closed; gives the `Pm` back (then close the heap). Traced,
    /// the sync is the write-back of every page written since open and a
    /// fence ([`PmThread::msync`]), each file step is a marker, and the
    /// management files are saved with the trace's heap image.
    pub fn close(self: Arc<Self>, heap: &Heap) -> Result<Pm, AllocError> {
        let _ = heap; // the Pm's mapping is the heap's: msync goes through it
        let mt = AllocError::sole_owner(self, NAME)?;
        let bins: Vec<Bin> = mt.bins.into_vec().into_iter().map(|m| m.into_inner().unwrap()).collect();
        let mut t = mt.pm.thread(0);
        t.op_begin(OpKind::Close, 0);
        let files = store::save(&mt.dir, mt.cfg.chunk_size, &mt.chunks, &bins)?;
        let crc = store::files_crc(&files);
        for (name, bytes) in &files {
            mt.pm.save_with_image(name, bytes).map_err(|e| AllocError::store(NAME, e.to_string()))?;
        }
        t.marker(0, &crash::written(crc));
        let mark = |t: &mut PmThread| -> Result<(), AllocError> {
            store::write_mark(&mt.dir)?;
            t.marker(0, &crash::marked(crc));
            Ok(())
        };
        if mt.cfg.mutation == Mutation::MarkBeforeSync {
            mark(&mut t)?;
        }
        t.msync()?;
        if mt.cfg.mutation != Mutation::MarkBeforeSync {
            mark(&mut t)?;
        }
        t.op_end(OpKind::Close, 0);
        drop(t);
        Ok(mt.pm)
    }

    /// Snapshots the datastore to a new one whose heap file is `dst`: syncs
    /// the heap, copies it (reflink where the filesystem supports it, else a
    /// full copy), writes the management data beside the copy and marks the
    /// copy properly closed. Call it while no thread is allocating or writing
    /// (allocation is blocked meanwhile; user stores are not).
    pub fn snapshot(&self, heap: &Heap, dst: &Path) -> Result<CopyKind, AllocError> {
        // Bins before the directory: the order allocation takes them in.
        let guards: Vec<_> = self.bins.iter().map(|b| b.lock().unwrap()).collect();
        let _dir = self.dir_lock.lock().unwrap();
        heap.sync()?;
        let kind = store::clone_file(&self.heap_path, dst)?;
        let ddir = store::store_dir(dst);
        store::create_dir(&ddir)?;
        let bins: Vec<Bin> =
            guards.iter().map(|g| Bin { nonfull: g.nonfull.clone(), chunks: g.chunks.clone() }).collect();
        store::save(&ddir, self.cfg.chunk_size, &self.chunks, &bins)?;
        store::write_mark(&ddir)?;
        Ok(kind)
    }

    pub fn config(&self) -> &MetallConfig {
        &self.cfg
    }

    /// The management directory of this datastore.
    pub fn store_dir(&self) -> &Path {
        &self.dir
    }

    fn chunk_off(&self, c: u64) -> u64 {
        SEGMENT + c * self.cfg.chunk_size
    }

    /// The chunk holding `off`.
    fn chunk_of(&self, off: u64) -> Option<u64> {
        let c = off.checked_sub(SEGMENT)? / self.cfg.chunk_size;
        (c < self.chunks.len()).then_some(c)
    }

    /// The usable size of the live object at `off`, if there is one.
    pub fn usable_size(&self, off: u64) -> Option<u64> {
        let c = self.chunk_of(off)?;
        let rel = off - self.chunk_off(c);
        match self.chunks.get(c) {
            ChunkKind::LargeHead { span } if rel == 0 => Some(span as u64 * self.cfg.chunk_size),
            ChunkKind::Small { bin } => {
                let sz = self.classes.size(bin as usize) as u64;
                let g = self.bins[bin as usize].lock().unwrap();
                let sc = g.chunks.get(&c)?;
                (rel.is_multiple_of(sz) && rel / sz < sc.bits.len() && sc.bits.test(rel / sz)).then_some(sz)
            }
            _ => None,
        }
    }

    /// Every live object `(offset, usable size)` by address.
    pub fn live_objects(&self) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        for c in 0..self.chunks.len() {
            match self.chunks.get(c) {
                ChunkKind::LargeHead { span } => v.push((self.chunk_off(c), span as u64 * self.cfg.chunk_size)),
                ChunkKind::Small { bin } => {
                    let sz = self.classes.size(bin as usize) as u64;
                    let g = self.bins[bin as usize].lock().unwrap();
                    let sc = &g.chunks[&c];
                    v.extend((0..sc.bits.len()).filter(|&i| sc.bits.test(i)).map(|i| (self.chunk_off(c) + i * sz, sz)));
                }
                _ => {}
            }
        }
        v
    }

    /// Checks the management data against itself (call it while no thread
    /// allocates or frees): every bin's chunks and non-full list
    /// ([`Bin::check`]); each small chunk of the directory is its bin's and
    /// each bin's chunk is in the directory; a large object's body follows
    /// its head. The first disagreement, in one line.
    pub fn check(&self) -> Result<(), String> {
        let bins: Vec<_> = self.bins.iter().map(|b| b.lock().unwrap()).collect();
        let _d = self.dir_lock.lock().unwrap();
        for (b, bin) in bins.iter().enumerate() {
            bin.check(b)?;
            if let Some(c) = bin.chunks.keys().find(|&&c| self.chunks.get(c) != (ChunkKind::Small { bin: b as u8 })) {
                return Err(format!(
                    "bin {b} holds chunk {c}, which the chunk directory records as {:?}",
                    self.chunks.get(*c)
                ));
            }
        }
        let mut c = 0;
        while c < self.chunks.len() {
            match self.chunks.get(c) {
                ChunkKind::Small { bin } if !bins.get(bin as usize).is_some_and(|g| g.chunks.contains_key(&c)) => {
                    return Err(format!("chunk {c} holds objects of bin {bin}, which does not know it"));
                }
                ChunkKind::LargeHead { span } => {
                    if let Some(b) = (c + 1..c + span as u64)
                        .find(|&b| b >= self.chunks.len() || self.chunks.get(b) != ChunkKind::LargeBody)
                    {
                        return Err(format!("chunk {b}: not the body of the large object at chunk {c}"));
                    }
                    c += span as u64 - 1;
                }
                ChunkKind::LargeBody => return Err(format!("chunk {c}: the body of no large object")),
                _ => {}
            }
            c += 1;
        }
        Ok(())
    }

    fn add_live(&self, tid: u32, bytes: i64) {
        self.live.add(tid, bytes);
    }

    fn alloc(&self, size: u64) -> Option<(u64, u64)> {
        match self.classes.class_of(size) {
            Some(b) => {
                let sz = self.classes.size(b) as u64;
                let mut bin = self.bins[b].lock().unwrap();
                if bin.nonfull.is_empty() {
                    let c = {
                        let _d = self.dir_lock.lock().unwrap();
                        self.chunks.take(1, ChunkKind::Small { bin: b as u8 })?
                    };
                    bin.adopt(c, self.cfg.chunk_size / sz);
                }
                let (c, slot) = bin.take().expect("a non-full chunk");
                Some((self.chunk_off(c) + slot * sz, sz))
            }
            None => {
                let span = size.div_ceil(self.cfg.chunk_size);
                let _d = self.dir_lock.lock().unwrap();
                let c = self.chunks.take(span, ChunkKind::LargeHead { span: span as u32 })?;
                Some((self.chunk_off(c), span * self.cfg.chunk_size))
            }
        }
    }

    fn dealloc(&self, off: u64) -> u64 {
        let c = self.chunk_of(off).unwrap_or_else(|| panic!("free of {off:#x}: not in the Metall data segment"));
        let rel = off - self.chunk_off(c);
        match self.chunks.get(c) {
            ChunkKind::LargeHead { span } => {
                assert_eq!(rel, 0, "free of {off:#x}: inside a large object");
                let _d = self.dir_lock.lock().unwrap();
                self.chunks.release(c, span as u64);
                span as u64 * self.cfg.chunk_size
            }
            ChunkKind::Small { bin } => {
                let sz = self.classes.size(bin as usize) as u64;
                assert_eq!(rel % sz, 0, "free of {off:#x}: not the start of an object");
                let mut g = self.bins[bin as usize].lock().unwrap();
                if g.free(c, rel / sz, self.cfg.mutation != Mutation::NonfullLost) {
                    let _d = self.dir_lock.lock().unwrap();
                    self.chunks.release(c, 1);
                }
                sz
            }
            k => panic!("free of {off:#x}: chunk {c} is {k:?}"),
        }
    }
}

impl Allocator for Metall {
    type Config = MetallConfig;
    type Thread = MetallThread;
    const FAMILY: &'static str = "metall";
    const ABOUT: &'static str = "Metall-style store (DRAM management data written out at close)";

    fn create(heap: &Heap, pm: Pm, cfg: MetallConfig) -> Result<Arc<Self>, AllocError> {
        Metall::create(heap, pm, cfg)
    }

    fn open(heap: &Heap, pm: Pm, cfg: MetallConfig) -> Result<Arc<Self>, AllocError> {
        Metall::open(heap, pm, cfg)
    }

    fn close(self: Arc<Self>, heap: &Heap) -> Result<Pm, AllocError> {
        Metall::close(self, heap)
    }

    fn beside_heap(heap: &std::path::Path) -> Vec<std::path::PathBuf> {
        vec![store::store_dir(heap)]
    }

    /// A properly closed store keeps every object, published or not: the
    /// only store Metall opens after a crash is one closed before it.
    fn crash_rules(_cfg: &MetallConfig) -> Result<CrashRules, String> {
        Ok(CrashRules { plain_mallocs_durable: true, refuses_unclean: true, ..CrashRules::default() })
    }

    fn live_blocks(&self, _t: &mut MetallThread) -> Vec<(u64, u64)> {
        self.live_objects()
    }

    fn check_metadata(&self, _t: &mut MetallThread) -> Result<(), String> {
        self.check()
    }

    /// `nonfull-lost` needs a chunk filled and then freed from, which the
    /// suite's Threadtest does not do: `model/tests/integration/metall.rs` tests it.
    const MUTANTS: &'static [&'static str] = &["metall:mutation=mark-before-sync"];

    /// The datastore a crash leaves, laid out from the trace's markers and
    /// the management files saved with its heap image ([`crash`]).
    fn crash_target(cfg: &MetallConfig) -> Option<Box<dyn CrashTarget>> {
        Some(Box::new(crash::MetallTarget::new(cfg.clone())))
    }

    fn params(&self) -> Params {
        as_map(&self.cfg)
    }

    fn thread(self: &Arc<Self>, tid: u32) -> MetallThread {
        MetallThread { t: self.pm.thread(tid), mt: self.clone() }
    }

    fn footprint(&self) -> Footprint {
        Footprint {
            live_bytes: self.live.get(),
            mapped_bytes: SEGMENT + self.chunks.high_water() * self.cfg.chunk_size,
        }
    }
}

/// One thread's handle: Metall keeps no per-thread state beyond the
/// persistence handle (its bins are shared, one mutex each).
pub struct MetallThread {
    mt: Arc<Metall>,
    t: PmThread,
}

impl MetallThread {
    pub fn allocator(&self) -> &Arc<Metall> {
        &self.mt
    }
}

impl MetallThread {
    /// A malloc, publishing into `dest` inside the operation if given (a
    /// plain store: see the module documentation).
    fn malloc_impl(&mut self, size: u64, dest: Option<u64>) -> Option<u64> {
        self.t.op_begin(OpKind::Malloc, size);
        let r = self.mt.alloc(size);
        if let Some((off, sz)) = r {
            self.mt.add_live(self.t.tid(), sz as i64);
            if let Some(d) = dest {
                self.t.store_u64(d, off);
            }
        }
        let off = r.map(|(o, _)| o);
        self.t.op_end(OpKind::Malloc, off.unwrap_or(0));
        off
    }

    /// A free of `off`, clearing `dest` inside the operation if given.
    fn free_impl(&mut self, off: u64, dest: Option<u64>) {
        self.t.op_begin(OpKind::Free, off);
        if let Some(d) = dest {
            self.t.store_u64(d, 0);
        }
        let sz = self.mt.dealloc(off);
        self.mt.add_live(self.t.tid(), -(sz as i64));
        self.t.op_end(OpKind::Free, 0);
    }
}

impl AllocThread for MetallThread {
    crate::dest_forwarding_ops!(t);

    crate::pm_thread_access!(t);
}
