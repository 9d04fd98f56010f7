//! The persistence primitives: store, flush, fence, persist, non-temporal store
//! and compare-and-swap on the heap, run natively or traced.
//!
//! A run makes one [`Pm`] for its heap and gives every thread its own
//! [`PmThread`] (`pm.thread(tid)`). The primitives are methods of the
//! `PmThread`, which carries everything the hot path needs — the heap base and
//! size, the backend, the thread id, the thread's trace buffer — so an operation
//! never looks up thread-local storage or takes a lock.
//!
//! # Backends
//!
//! The backend is chosen at run time and stored in the handle as one small
//! enum (`Mode`); every primitive pays exactly one `match` on it, which the
//! branch predictor learns at once because it never changes.
//!
//! * **Native** ([`Pm::native`]): `clwb`, `clflushopt` or `clflush` for a flush
//!   and `sfence` for a fence, or no flush at all ([`FlushInsn::None`], for
//!   eADR machines where caches are persistent). The instruction must exist on
//!   this CPU (checked with CPUID when the `Pm` is made: a wrong choice is an
//!   error, never a SIGILL).
//! * **Traced** ([`Pm::traced`]): every primitive still does the real memory
//!   operation — stores land in the file, flushes are executed — and also
//!   appends its event to the thread's buffer, from which the collector of
//!   [`crate::tracing`] feeds an [`EventSink`](pmsim_traces::EventSink) in
//!   global order.
//!
//! # Addresses
//!
//! The primitives take heap offsets (as `u64`, or typed as [`PmOff`]); the
//! trace records absolute addresses in this run's mapping, like the DBI tracers
//! do, and its header carries the heap base, so consumers can go back to offsets.
//! Every primitive checks its range against the heap, in release builds too,
//! since a stray offset would otherwise write outside the mapping: the check is
//! one compare against a value in the handle.

use crate::arch;
pub use crate::flush::{CpuFeatures, FlushInsn, PmError};
use crate::heap::{bytes_of, Heap, HeapError, Mapping, PmOff, Pod, HEADER_SIZE};
use crate::tracing::Finished;
use crate::tracing::{ThreadTrace, TraceCollector, TraceConfig, TraceShared};
use crate::watch::AccessWatch;
use pmsim_traces::output::{Output, OutputDir, Pending};
use pmsim_traces::EventSink;
use pmsim_traces::{line_of, Category, FenceKind, HeapInfo, OpKind, Region, TraceHeader, Tracer};
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::io;
use std::os::unix::fs::FileExt;
use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The trace header's record of a heap image: file name, size and CRC-32.
pub const HEAP_IMAGE_KEY: &str = "heap_image";

/// Where the files an allocator keeps outside its heap file (Metall's
/// management data) are saved with a trace's heap image `image`
/// ([`Pm::save_with_image`]): the directory `IMAGE.files`.
pub fn image_files_dir(image: &std::path::Path) -> std::path::PathBuf {
    let mut s = image.as_os_str().to_os_string();
    s.push(".files");
    std::path::PathBuf::from(s)
}

/// The page an `msync` writes back as a unit (x86-64's base page).
const PAGE: u64 = 4096;

/// The shortest [`PmThread::store_bytes`] copied in one `memcpy` where no
/// tracer or watch sees its stores: a cache line. Shorter ones stay single
/// machine stores, which other threads may read or CAS word by word.
pub const BULK_STORE: usize = 64;

/// Writes the heap's bytes beside `path` (no traced event has happened yet,
/// so this is the state every event of the trace applies to) and returns
/// what the trace header records about it, with the image not yet in place:
/// [`TraceCollector::finish`] hands it to the caller, who renames it with
/// the trace once the run succeeded, so a run that fails (a full disk, a
/// workload out of heap) leaves an earlier image as it was.
fn save_heap_image(heap: &Heap, path: &std::path::Path) -> io::Result<(serde_json::Value, Output)> {
    // SAFETY: the heap maps `size` bytes at `base`, and no thread writes to
    // it while tracing has not started.
    let bytes = unsafe { std::slice::from_raw_parts(heap.base() as *const u8, heap.size() as usize) };
    // Beside its destination, then renamed: whether the destination may be
    // replaced was the command's decision (`output::Policy`).
    let named =
        |e: io::Error| io::Error::new(e.kind(), format!("{}: cannot write the heap image: {e}", path.display()));
    let mut out = Output::create(path, true).map_err(named)?;
    // Only the heap's data is read and written, its holes left holes
    // ([`crate::sparse`]): reading them would allocate every page of a heap
    // that a run touches a sliver of. The checksum covers them as zeros.
    let mut crc = crc32fast::Hasher::new();
    let zeros = [0u8; 1 << 16];
    let hash_zeros = |crc: &mut crc32fast::Hasher, mut n: u64| {
        while n > 0 {
            let k = n.min(zeros.len() as u64);
            crc.update(&zeros[..k as usize]);
            n -= k;
        }
    };
    let mut at = 0;
    for r in heap.data_ranges() {
        hash_zeros(&mut crc, r.start - at);
        let data = &bytes[r.start as usize..r.end as usize];
        out.file().write_all_at(data, r.start).map_err(named)?;
        crc.update(data);
        at = r.end;
    }
    hash_zeros(&mut crc, heap.size() - at);
    out.file().set_len(heap.size()).map_err(named)?;
    let info = serde_json::json!({
        "file": path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        "size": heap.size(),
        "crc32": crc.finalize(),
    });
    Ok((info, out))
}

/// The backend of a handle: which flush instruction runs natively, or tracing.
/// One flat enum so that a primitive decides everything with one `match`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Clwb,
    Clflushopt,
    Clflush,
    NoFlush,
    Traced,
}

/// What every handle of one `Pm` shares.
struct Shared {
    /// Keeps the mapping alive (and the heap marked open) while handles exist.
    map: Arc<Mapping>,
    flush: FlushInsn,
    trace: Option<Arc<TraceShared>>,
    /// The live regions (absolute addresses, as in the trace), by id: an
    /// allocator that paints its headers as it makes them
    /// ([`crate::mech::regions`]) adds and removes regions on its allocation
    /// path, so a removal must not scan them all.
    regions: Mutex<BTreeMap<u64, Region>>,
    next_region: AtomicU64,
    /// Thread ids with a live `PmThread`: two handles with one id would mix
    /// their program orders in the trace.
    live: Mutex<HashSet<u32>>,
    /// The heap's access watch, if any (crash exploration).
    watch: Option<Arc<AccessWatch>>,
    /// Traced runs only: one bit per 4 KiB page of the heap, set by a store
    /// to it and cleared by [`PmThread::msync`], which writes those pages
    /// back (the page table's dirty bits, as the kernel's `msync` reads them).
    dirty: Option<Box<[AtomicU64]>>,
    /// Traced runs with a heap image: files saved with it ([`Pm::save_with_image`]).
    image_files: Mutex<Option<ImageFiles>>,
}

/// The directory of files saved with a trace's heap image, made when the
/// first one is saved and renamed into place when the trace ends.
struct ImageFiles {
    path: std::path::PathBuf,
    out: Option<OutputDir>,
}

/// The persistence context of one heap: backend, region table, trace. Make it
/// once per run, hand a [`PmThread`] to each thread.
pub struct Pm {
    shared: Arc<Shared>,
}

impl fmt::Debug for Pm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pm").field("flush", &self.shared.flush).field("traced", &self.is_traced()).finish()
    }
}

/// The largest thread id the trace format carries.
pub const MAX_TID: u32 = 65535;

/// The region every heap has: its header page (flag and roots), id 0.
fn header_region(heap: &Heap) -> Region {
    Region { id: 0, name: "heap header".into(), category: Category::Meta, base: heap.base() as u64, len: HEADER_SIZE }
}

impl Pm {
    /// Native persistence with `flush` (see [`FlushInsn::best`] for the default).
    pub fn native(heap: &Heap, flush: FlushInsn) -> Result<Pm, PmError> {
        flush.check(&CpuFeatures::detect())?;
        Ok(Pm::with_backend(heap, flush, None))
    }

    /// Traced persistence: the primitives run natively with `flush` and every
    /// event also goes, in global order, to the sink that `make_sink` returns.
    ///
    /// `make_sink` receives the trace header filled with what the `Pm` knows —
    /// tracer, flush instruction, heap path/base/size, the initial region table,
    /// `values` — for the caller to complete (allocator, workload, threads) and
    /// hand to [`TraceFile::create`](pmsim_traces::TraceFile::create). When
    /// `cfg.values` is set, the sink must record values too (for a `TraceFile`:
    /// `WriterOptions { values: true, .. }`).
    ///
    /// Returns the `Pm` and the collector; [`TraceCollector::finish`] ends the
    /// trace and gives the sink back.
    pub fn traced<S, F>(
        heap: &Heap,
        flush: FlushInsn,
        cfg: &TraceConfig,
        make_sink: F,
    ) -> Result<(Pm, TraceCollector<S>), PmError>
    where
        S: pmsim_traces::EventSink + 'static,
        F: FnOnce(TraceHeader) -> io::Result<S>,
    {
        flush.check(&CpuFeatures::detect())?;
        let mut header = TraceHeader {
            tracer: Tracer::Builtin,
            flush_insn: flush.name().to_string(),
            heap: HeapInfo { path: heap.path().display().to_string(), base: heap.base() as u64, size: heap.size() },
            regions: vec![header_region(heap)],
            values: cfg.values,
            ..TraceHeader::default()
        };
        let mut image = None;
        if let Some(path) = &cfg.heap_image {
            let (info, out) = save_heap_image(heap, path).map_err(PmError::Trace)?;
            header.extra.insert(HEAP_IMAGE_KEY.into(), info);
            image = Some(out);
        }
        let sink = make_sink(header).map_err(PmError::Trace)?;
        let (trace, mut collector) = crate::tracing::start(sink, cfg).map_err(PmError::Trace)?;
        collector.heap_image = image;
        let pm = Pm::with_backend(heap, flush, Some(trace));
        let files = cfg.heap_image.as_ref().map(|p| ImageFiles { path: image_files_dir(p), out: None });
        *pm.shared.image_files.lock().unwrap() = files;
        Ok((pm, collector))
    }

    fn with_backend(heap: &Heap, flush: FlushInsn, trace: Option<Arc<TraceShared>>) -> Pm {
        let pages = heap.size().div_ceil(PAGE).div_ceil(64) as usize;
        let dirty = trace.is_some().then(|| (0..pages).map(|_| AtomicU64::new(0)).collect());
        Pm {
            shared: Arc::new(Shared {
                map: heap.mapping().clone(),
                flush,
                trace,
                regions: Mutex::new(BTreeMap::from([(0, header_region(heap))])),
                next_region: AtomicU64::new(1),
                live: Mutex::new(HashSet::new()),
                watch: heap.watch().cloned(),
                dirty,
                image_files: Mutex::new(None),
            }),
        }
    }

    /// Saves `bytes` as the file `name` with the trace's heap image, in
    /// [`image_files_dir`]: what an allocator keeps outside its heap file
    /// (Metall's management data), for the crash explorer, which rebuilds
    /// from it what a crash leaves beside the heap. The directory is made
    /// under a temporary name and renamed into place with the image when the
    /// trace ends (whether it may replace one was the command's decision, as
    /// for the image). `Ok(false)`: this run saves no heap image.
    pub fn save_with_image(&self, name: &str, bytes: &[u8]) -> io::Result<bool> {
        pmsim_traces::output::plain_name("saved file", name).map_err(io::Error::other)?;
        let mut g = self.shared.image_files.lock().unwrap();
        let Some(files) = g.as_mut() else { return Ok(false) };
        let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", files.path.join(name).display()));
        if files.out.is_none() {
            files.out = Some(OutputDir::create(&files.path, true).map_err(named)?);
        }
        let dir = files.out.as_ref().expect("made above").tmp_path().join(name);
        std::fs::write(dir, bytes).map_err(named)?;
        Ok(true)
    }

    /// The files saved with the heap image, to be renamed into place with it.
    fn take_image_files(&self) -> Option<OutputDir> {
        self.shared.image_files.lock().unwrap().as_mut().and_then(|f| f.out.take())
    }

    /// The handle thread `tid` does its persistence through. In a traced run
    /// this records the thread's `ThreadStart`; dropping the handle records its
    /// `ThreadEnd` and hands its buffered events to the collector.
    ///
    /// # Panics
    /// If `tid > MAX_TID` (the trace format's limit) or another live handle has
    /// the same id — both are bugs in the caller.
    pub fn thread(&self, tid: u32) -> PmThread {
        assert!(tid <= MAX_TID, "thread id {tid} exceeds the trace format's limit {MAX_TID}");
        let fresh = self.shared.live.lock().unwrap().insert(tid);
        assert!(fresh, "thread id {tid} already has a live PmThread");
        let sh = &self.shared;
        let (mode, trace) = match &sh.trace {
            Some(t) => (Mode::Traced, Some(ThreadTrace::new(t.clone(), tid))),
            None => (
                match sh.flush {
                    FlushInsn::Clwb => Mode::Clwb,
                    FlushInsn::Clflushopt => Mode::Clflushopt,
                    FlushInsn::Clflush => Mode::Clflush,
                    FlushInsn::None => Mode::NoFlush,
                },
                None,
            ),
        };
        let watch = sh.watch.clone();
        let bulk = watch.is_none() && !matches!(mode, Mode::Traced) && !crate::pmtrace::running();
        let mut t = PmThread {
            mode,
            bulk,
            base: sh.map.base,
            size: sh.map.size,
            flush: sh.flush,
            tid,
            trace,
            watch,
            shared: sh.clone(),
        };
        if let Some(tr) = &mut t.trace {
            tr.thread_start();
        }
        t
    }

    pub fn flush_insn(&self) -> FlushInsn {
        self.shared.flush
    }

    pub fn is_traced(&self) -> bool {
        self.shared.trace.is_some()
    }

    /// True once the trace sink has failed (the error itself comes from
    /// [`TraceCollector::finish`]); a long run may check it to stop early.
    pub fn trace_failed(&self) -> bool {
        self.shared.trace.as_ref().is_some_and(|t| t.failed())
    }

    /// The live regions, with absolute addresses as in the trace (for trace
    /// headers of later runs, or an in-process consumer).
    pub fn regions(&self) -> Vec<Region> {
        self.shared.regions.lock().unwrap().values().cloned().collect()
    }

    /// Number of live `PmThread` handles.
    pub fn live_threads(&self) -> usize {
        Arc::strong_count(&self.shared) - 1
    }

    /// Gives up the `Pm` so the trace can end: checks that it belongs to the
    /// collector's trace and that no thread handle is left.
    pub(crate) fn release_trace(self, trace: &Arc<TraceShared>) {
        let live = self.live_threads();
        assert!(live == 0, "finishing a trace while {live} PmThread handle(s) are alive: drop them first");
        let ours = self.shared.trace.as_ref().is_some_and(|t| Arc::ptr_eq(t, trace));
        assert!(ours, "this Pm does not belong to this trace collector");
    }
}

/// One thread's persistence handle: the primitives are its methods.
///
/// It is `Send` (make it anywhere, move it into the thread) but used by one
/// thread at a time (`&mut self`): the trace buffer is the thread's own. An
/// allocator keeps it in its per-thread context.
pub struct PmThread {
    mode: Mode,
    /// Whether a long copy may be one `memcpy` ([`BULK_STORE`]): nothing
    /// records this thread's machine stores, neither pmsim's tracer, nor a
    /// watch, nor the Valgrind tool (whose trace must agree with the
    /// built-in tracer's store for store). The Pin tool answers no client
    /// request, so under it such a copy is libc's `memcpy` and its trace
    /// holds libc's stores.
    bulk: bool,
    base: *mut u8,
    size: u64,
    flush: FlushInsn,
    tid: u32,
    trace: Option<ThreadTrace>,
    /// Reported every load and store (crash exploration; usually `None`).
    watch: Option<Arc<AccessWatch>>,
    shared: Arc<Shared>,
}

// SAFETY: `base` points into the mapping that `shared` keeps alive, whichever
// thread holds the handle; the mapping itself is Send + Sync (see Mapping).
unsafe impl Send for PmThread {}

impl fmt::Debug for PmThread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PmThread").field("tid", &self.tid).field("mode", &self.mode).finish()
    }
}

#[cold]
#[inline(never)]
fn out_of_bounds(off: u64, len: u64, size: u64) -> ! {
    panic!("PM access at heap offset {off:#x} (+{len} bytes) is outside the heap of {size} bytes")
}

#[cold]
#[inline(never)]
fn misaligned(off: u64) -> ! {
    panic!("8-byte PM access at heap offset {off:#x} is not 8-byte aligned")
}

impl PmThread {
    /// The address of `[off, off + len)`, which must lie in the heap.
    #[inline(always)]
    fn at(&self, off: u64, len: u64) -> *mut u8 {
        if off > self.size || len > self.size - off {
            out_of_bounds(off, len, self.size);
        }
        self.base.wrapping_add(off as usize)
    }

    /// The address of the aligned word at `off`.
    #[inline(always)]
    fn word(&self, off: u64) -> *mut u64 {
        // size >= MIN_SIZE, so `size - 8` cannot underflow.
        if off > self.size - 8 {
            out_of_bounds(off, 8, self.size);
        }
        if off & 7 != 0 {
            misaligned(off);
        }
        self.base.wrapping_add(off as usize) as *mut u64
    }

    /// The word at `off` as an atomic.
    #[inline(always)]
    fn atomic(&self, off: u64) -> &AtomicU64 {
        // SAFETY: `word` checked bounds and alignment; the mapping lives as long
        // as `self.shared`, and the reference borrows self.
        unsafe { AtomicU64::from_ptr(self.word(off)) }
    }

    /// Reports a load to the watch, if any.
    #[inline(always)]
    fn watch_read(&self, off: u64, len: u64) {
        if let Some(w) = &self.watch {
            w.read(off, len);
        }
    }

    fn tracer(&mut self) -> &mut ThreadTrace {
        self.trace.as_mut().expect("traced mode without a trace buffer")
    }

    /// Marks the pages of `[off, off + len)` (at most 8 bytes) dirty for
    /// [`PmThread::msync`] (traced runs keep the bits).
    #[inline(always)]
    fn mark_dirty(&self, off: u64, len: u64) {
        if let Some(d) = &self.shared.dirty {
            for pg in [off / PAGE, (off + len - 1) / PAGE] {
                let (w, bit) = (&d[(pg / 64) as usize], 1u64 << (pg % 64));
                if w.load(Ordering::Relaxed) & bit == 0 {
                    w.fetch_or(bit, Ordering::Relaxed);
                }
            }
        }
    }

    /// Flushes one line natively in a non-traced mode.
    #[inline(always)]
    fn flush_native(mode: Mode, p: *const u8) {
        // SAFETY: the callers pass a `p` inside the mapping (bounds-checked), and
        // the instruction of `mode` was checked against CPUID when the Pm was made.
        unsafe {
            match mode {
                Mode::Clwb => arch::clwb(p),
                Mode::Clflushopt => arch::clflushopt(p),
                Mode::Clflush => arch::clflush(p),
                Mode::NoFlush | Mode::Traced => {}
            }
        }
    }

    // ----- stores -------------------------------------------------------------

    /// Stores `v` at heap offset `off` (any alignment), as the machine stores
    /// of [`PmThread::store_bytes`]: one for a `T` of 1, 2, 4 or 8 bytes.
    #[inline]
    pub fn store<T: Pod>(&mut self, off: u64, v: T) {
        self.store_bytes(off, bytes_of(&v));
    }

    /// Stores `v` at the typed offset `p`.
    #[inline]
    pub fn write<T: Pod>(&mut self, p: PmOff<T>, v: T) {
        self.store(p.get(), v)
    }

    /// Stores an aligned `u64`, atomically (release), so it can share a word
    /// with [`PmThread::cas_u64`] and publish data to other threads.
    ///
    /// # Panics
    /// If `off` is not 8-byte aligned (or out of the heap).
    #[inline]
    pub fn store_u64(&mut self, off: u64, v: u64) {
        if let Some(w) = &self.watch {
            w.write(off, 8);
            w.store(off, &v.to_le_bytes(), false);
        }
        if let Mode::Traced = self.mode {
            let addr = self.word(off) as u64;
            self.mark_dirty(off, 8);
            self.tracer().store(false, addr, &v.to_le_bytes());
        }
        self.atomic(off).store(v, Ordering::Release);
    }

    /// Copies `src` to heap offset `off` (a memcpy into PM) as 8-byte machine
    /// stores in address order, then one store each of 4, 2 and 1 bytes for
    /// what is left. Traced, each machine store is one event, so the trace
    /// holds exactly the stores the CPU issues: what a DBI tracer records of
    /// the same code run natively (a libc memcpy would issue vector stores,
    /// and overlapping ones for short copies), and what the crash explorer
    /// needs (x86 makes aligned stores of up to 8 bytes atomic, not copies).
    ///
    /// Where nothing records the machine stores (not traced, not watched, not
    /// under the Valgrind tool), a copy of [`BULK_STORE`] bytes or more is one
    /// `memcpy`, as the modelled C code's `memset` or `memcpy` of a block is:
    /// the loop of 8-byte stores made Makalu's zeroing of a large block take
    /// twice the library's time.
    #[inline]
    pub fn store_bytes(&mut self, off: u64, src: &[u8]) {
        if src.is_empty() {
            return;
        }
        let p = self.at(off, src.len() as u64);
        if self.bulk && src.len() >= BULK_STORE {
            // SAFETY: `at` checked that the whole destination lies in the
            // mapping, and `src` cannot lie in it (see `machine_store`).
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) };
            return;
        }
        if let Some(w) = &self.watch {
            w.write(off, src.len() as u64);
        }
        let mut i = 0;
        while src.len() - i >= 8 {
            self.machine_store::<8>(p, i, src);
            i += 8;
        }
        for n in [4, 2, 1] {
            if src.len() - i >= n {
                match n {
                    4 => self.machine_store::<4>(p, i, src),
                    2 => self.machine_store::<2>(p, i, src),
                    _ => self.machine_store::<1>(p, i, src),
                }
                i += n;
            }
        }
    }

    /// The machine store of `src[i..i + N]` at `p + i`, traced first.
    #[inline(always)]
    fn machine_store<const N: usize>(&mut self, p: *mut u8, i: usize, src: &[u8]) {
        let bytes = &src[i..i + N];
        if let Some(w) = &self.watch {
            w.store(p as u64 - self.base as u64 + i as u64, bytes, false);
        }
        if let Mode::Traced = self.mode {
            self.mark_dirty(p as u64 - self.base as u64 + i as u64, N as u64);
            self.tracer().store(false, p as u64 + i as u64, bytes);
        }
        let mut word = [0u8; 8];
        word[..N].copy_from_slice(bytes);
        // SAFETY: `at` checked that the whole destination lies in the mapping.
        // (`src` cannot lie in it: no safe API lends a slice of the mapping, so
        // the stores never overwrite bytes still to be read.)
        unsafe { arch::store::<N>(p.add(i), u64::from_le_bytes(word)) };
    }

    /// A non-temporal store of an aligned `u64` (`movnti`): it bypasses the
    /// cache and is durable after the next fence, with no flush.
    ///
    /// # Panics
    /// If `off` is not 8-byte aligned (or out of the heap).
    #[inline]
    pub fn ntstore_u64(&mut self, off: u64, v: u64) {
        let p = self.word(off);
        if let Some(w) = &self.watch {
            w.write(off, 8);
            w.store(off, &v.to_le_bytes(), true);
        }
        if let Mode::Traced = self.mode {
            self.mark_dirty(off, 8);
            self.tracer().store(true, p as u64, &v.to_le_bytes());
        }
        // SAFETY: `word` checked bounds and alignment.
        unsafe { arch::movnti(p, v) };
    }

    /// Compare-and-swap of an aligned `u64` (`lock cmpxchg`, acquire-release):
    /// `Ok(current)` if the word held `current` and now holds `new`, else
    /// `Err(actual)`.
    ///
    /// Traced as a `LockedRmw` fence (a locked instruction orders like a fence
    /// and completes earlier flushes before its write is visible), followed by
    /// the store of `new` if the swap happened. Both events take their sequence
    /// numbers before the swap, so when this CAS replaces a value that another
    /// thread's CAS or store wrote (and this thread read before, as it must to
    /// know `current`), the trace orders that write first.
    ///
    /// # Panics
    /// If `off` is not 8-byte aligned (or out of the heap).
    #[inline]
    #[track_caller]
    pub fn cas_u64(&mut self, off: u64, current: u64, new: u64) -> Result<u64, u64> {
        let a = self.word(off);
        // SAFETY: `word` checked bounds and alignment; the mapping outlives this call.
        let atomic = unsafe { AtomicU64::from_ptr(a) };
        if let Some(w) = &self.watch {
            // A locked instruction orders like a fence; its store is recorded if it happens.
            w.read(off, 8);
            w.fence();
            let r = atomic.compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire);
            if r.is_ok() {
                w.write(off, 8);
                w.store(off, &new.to_le_bytes(), false);
            }
            return r;
        }
        match self.mode {
            Mode::Traced => {
                let t = self.tracer();
                let site = t.site(Location::caller());
                let seq = t.rmw_begin(site);
                let r = atomic.compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire);
                t.rmw_end(seq, a as u64, r.is_ok().then_some(new));
                if r.is_ok() {
                    self.mark_dirty(off, 8);
                }
                r
            }
            _ => atomic.compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire),
        }
    }

    // ----- loads (not traced) -------------------------------------------------

    /// Reads a `T` at heap offset `off` (any alignment).
    #[inline]
    pub fn load<T: Pod>(&self, off: u64) -> T {
        let p = self.at(off, std::mem::size_of::<T>() as u64);
        self.watch_read(off, std::mem::size_of::<T>() as u64);
        // SAFETY: in bounds; Pod makes any bytes a valid T; unaligned reads are allowed.
        unsafe { (p as *const T).read_unaligned() }
    }

    /// Reads the `T` at the typed offset `p`.
    #[inline]
    pub fn read<T: Pod>(&self, p: PmOff<T>) -> T {
        self.load(p.get())
    }

    /// Reads an aligned `u64` atomically (acquire): the counterpart of
    /// [`PmThread::store_u64`] and [`PmThread::cas_u64`].
    #[inline]
    pub fn load_u64(&self, off: u64) -> u64 {
        self.watch_read(off, 8);
        self.atomic(off).load(Ordering::Acquire)
    }

    /// Copies heap bytes at `off` into `dst`.
    #[inline]
    pub fn load_bytes(&self, off: u64, dst: &mut [u8]) {
        let p = self.at(off, dst.len() as u64);
        self.watch_read(off, dst.len() as u64);
        // SAFETY: the source range is in bounds; `ptr::copy` tolerates overlap.
        unsafe { std::ptr::copy(p, dst.as_mut_ptr(), dst.len()) };
    }

    // ----- flushes and fences -------------------------------------------------

    /// Writes back the 64 B line holding heap offset `off` with the run's
    /// flush instruction (nothing under eADR).
    ///
    /// Flushes and fences are `#[track_caller]`: a trace attributes each to
    /// the source line that asked for it (through every `#[track_caller]`
    /// helper in between), so costs can be charged to code.
    #[inline]
    #[track_caller]
    pub fn flush(&mut self, off: u64) {
        let p = self.at(off, 1);
        if let Some(w) = &self.watch {
            w.flush(off);
        }
        match self.mode {
            Mode::Traced => {
                let site = self.tracer().site(Location::caller());
                self.flush_traced(p, site)
            }
            mode => PmThread::flush_native(mode, p),
        }
    }

    #[inline(never)]
    fn flush_traced(&mut self, p: *const u8, site: u32) {
        let insn = self.flush;
        if let Some(kind) = insn.kind() {
            self.tracer().flush(kind, line_of(p as u64), site);
            // SAFETY: `p` was bounds-checked by the caller; `insn` was checked
            // against CPUID when the Pm was made.
            unsafe { insn.flush_line(p) };
        }
    }

    /// Writes back every line that `[off, off + len)` touches (no fence).
    #[inline]
    #[track_caller]
    pub fn flush_range(&mut self, off: u64, len: u64) {
        if len == 0 {
            return;
        }
        let p = self.at(off, len) as u64;
        if let Some(w) = &self.watch {
            let mut l = off & !63;
            while l < off + len {
                w.flush(l);
                l += 64;
            }
        }
        // The base is page aligned, so lines of addresses are lines of offsets.
        let (first, end) = (line_of(p), p + len);
        let mode = self.mode;
        let site = match mode {
            Mode::Traced => self.tracer().site(Location::caller()),
            _ => 0,
        };
        let mut line = first;
        while line < end {
            match mode {
                Mode::Traced => self.flush_traced(line as *const u8, site),
                mode => PmThread::flush_native(mode, line as *const u8),
            }
            line += 64;
        }
    }

    /// `sfence`: earlier flushes are complete (durable) and earlier stores
    /// ordered before anything after it.
    #[inline]
    #[track_caller]
    pub fn fence(&mut self) {
        if let Some(w) = &self.watch {
            w.fence();
        }
        if let Mode::Traced = self.mode {
            let t = self.tracer();
            let site = t.site(Location::caller());
            t.fence(FenceKind::Sfence, site);
        }
        arch::sfence();
    }

    /// `mfence`: like [`PmThread::fence`] for persistence (earlier flushes
    /// are complete), and it also orders loads. Allocators whose code
    /// hard-codes it (Makalu, nvm_malloc) issue it, so their traces say so.
    #[inline]
    #[track_caller]
    pub fn mfence(&mut self) {
        if let Some(w) = &self.watch {
            w.fence();
        }
        if let Mode::Traced = self.mode {
            let t = self.tracer();
            let site = t.site(Location::caller());
            t.fence(FenceKind::Mfence, site);
        }
        arch::mfence();
    }

    /// A *synchronous* persist of the line holding `off`: mfence, flush,
    /// mfence — Makalu's `CLFLUSH_SYNC` and nvm_malloc's `PERSIST` (with
    /// `clflush`). Unlike [`PmThread::persist`] it also fences *before* the
    /// flush, so the line's earlier stores are ordered before it by the
    /// fence, not only by the flush.
    #[inline]
    #[track_caller]
    pub fn persist_sync(&mut self, off: u64) {
        self.mfence();
        self.flush(off);
        self.mfence();
    }

    /// The heap's `msync(MS_SYNC)` as persistent memory sees it. On a DAX
    /// file system (Metall's Optane setup: ext4-DAX) the kernel writes back
    /// every cache line of every page written since the last sync and then
    /// fences (Linux's `dax_writeback_mapping_range` cleans whole pages).
    /// Traced, exactly those flushes (with the run's flush instruction, on
    /// the pages this `Pm`'s handles stored to) and the fence are recorded
    /// as this thread's; natively the kernel does it. Either way the mapping
    /// is then written back to its file.
    #[track_caller]
    pub fn msync(&mut self) -> Result<(), HeapError> {
        if let Mode::Traced = self.mode {
            let site = self.tracer().site(Location::caller());
            let shared = self.shared.clone();
            for (i, w) in shared.dirty.iter().flat_map(|d| d.iter()).enumerate() {
                let mut bits = w.swap(0, Ordering::Relaxed);
                while bits != 0 {
                    let page = (i as u64 * 64 + bits.trailing_zeros() as u64) * PAGE;
                    bits &= bits - 1;
                    for line in (page..(page + PAGE).min(self.size)).step_by(64) {
                        self.flush_traced(self.at(line, 1), site);
                    }
                }
            }
            let t = self.tracer();
            t.fence(FenceKind::Sfence, site);
            arch::sfence();
        }
        self.shared.map.sync()
    }

    /// Makes `[off, off + len)` durable: flushes every line it touches, then fences.
    #[inline]
    #[track_caller]
    pub fn persist(&mut self, off: u64, len: u64) {
        self.flush_range(off, len);
        self.fence();
    }

    // ----- roots ---------------------------------------------------------------

    /// Sets root slot `slot` to `off` durably (store, flush, fence).
    ///
    /// # Panics
    /// If `slot >= ROOT_SLOTS`.
    #[track_caller]
    pub fn set_root(&mut self, slot: usize, off: u64) {
        let at = Heap::root_offset(slot);
        self.store_u64(at, off);
        self.persist(at, 8);
    }

    /// The value of root slot `slot`.
    pub fn root(&self, slot: usize) -> u64 {
        self.load_u64(Heap::root_offset(slot))
    }

    // ----- framing: operations, markers, regions ------------------------------

    /// Marks the start of an allocator operation (`arg`: requested size for
    /// malloc, offset for free). Operations nest. Nothing happens natively.
    #[inline]
    pub fn op_begin(&mut self, op: OpKind, arg: u64) {
        if let Mode::Traced = self.mode {
            self.tracer().op_begin(op, arg);
        }
    }

    /// Marks the end of an operation (`result`: offset handed out by malloc, 0
    /// for failure).
    #[inline]
    pub fn op_end(&mut self, op: OpKind, result: u64) {
        if let Mode::Traced = self.mode {
            self.tracer().op_end(op, result);
        }
    }

    /// A user marker (e.g. a workload phase) in the trace.
    pub fn marker(&mut self, id: u64, label: &str) {
        if let Mode::Traced = self.mode {
            self.tracer().marker(id, label);
        }
    }

    /// Registers `[off, off + len)` as a named region of `category` so
    /// statistics can be broken down by it; returns its id. Recorded in the
    /// trace (with the absolute base) and kept in the region table.
    ///
    /// # Panics
    /// If the range is not inside the heap.
    pub fn add_region(&mut self, name: &str, category: Category, off: u64, len: u64) -> u64 {
        let base = self.at(off, len) as u64;
        let id = self.shared.next_region.fetch_add(1, Ordering::Relaxed);
        let region = Region { id, name: name.to_string(), category, base, len };
        if let Mode::Traced = self.mode {
            self.tracer().region_add(region.clone());
        }
        self.shared.regions.lock().unwrap().insert(id, region);
        id
    }

    /// Unregisters a region; returns whether it was registered.
    pub fn remove_region(&mut self, id: u64) -> bool {
        let removed = self.shared.regions.lock().unwrap().remove(&id).is_some();
        if removed && self.mode == Mode::Traced {
            self.tracer().region_remove(id);
        }
        removed
    }

    // ----- the handle -----------------------------------------------------------

    /// Hands the events buffered so far to the collector. Call it before the
    /// thread blocks for long (a barrier, a join, a sleep): until then its
    /// oldest event holds back every other thread's events in the collector's
    /// reorder buffer (see [`crate::tracing`]). Nothing happens natively.
    pub fn flush_thread(&mut self) {
        if let Some(t) = &mut self.trace {
            t.hand_off();
        }
    }

    pub fn tid(&self) -> u32 {
        self.tid
    }

    pub fn is_traced(&self) -> bool {
        self.mode == Mode::Traced
    }

    pub fn flush_insn(&self) -> FlushInsn {
        self.flush
    }

    /// Heap size in bytes.
    pub fn heap_size(&self) -> u64 {
        self.size
    }

    /// The address of `off` in this run's mapping, for allocators that read
    /// persistent structures in place. Bounds are checked in debug builds.
    #[inline]
    pub fn ptr<T>(&self, off: PmOff<T>) -> *mut T {
        debug_assert!(off.get() <= self.size && std::mem::size_of::<T>() as u64 <= self.size - off.get());
        self.base.wrapping_add(off.get() as usize) as *mut T
    }
}

impl Drop for PmThread {
    fn drop(&mut self) {
        if let Some(t) = &mut self.trace {
            t.thread_end();
            t.hand_off();
        }
        if let Ok(mut live) = self.shared.live.lock() {
            live.remove(&self.tid);
        }
    }
}

/// Ending a trace is the `Pm`'s last act, so it lives beside the `Pm`
/// (the collector itself knows nothing of `Pm`).
impl<S: EventSink + 'static> TraceCollector<S> {
    /// Ends the trace: consumes the `Pm` (whose thread handles must all be
    /// dropped already: each hands over its last events when dropped), waits
    /// for the collector to deliver every event, and returns the sink — for a
    /// `TraceFile`, call its `finish` next — with the counts.
    ///
    /// A sink error (e.g. a full disk) stops delivery at once and is returned
    /// here, with context; so is a collector that died, or a gap in the
    /// sequence (a leaked `PmThread`).
    ///
    /// # Panics
    /// If a `PmThread` of `pm` is still alive, or `pm` is not this trace's.
    pub fn finish(self, pm: Pm) -> io::Result<Finished<S>> {
        let files = pm.take_image_files();
        pm.release_trace(&self.shared);
        // The collector ends once the last sender (in the shared state) is gone.
        drop(self.shared);
        match self.handle.join() {
            Ok((sink, Ok(stats))) => {
                // The image and the files saved with it are renamed into
                // place by the caller, with its own outputs, once the whole
                // run succeeded (`Finished::outputs`).
                let mut outputs = Pending::default();
                if let Some(img) = self.heap_image {
                    let path = img.path().display().to_string();
                    outputs.push(img.finish().map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?);
                }
                if let Some(dir) = files {
                    outputs.push(dir.into_staged());
                }
                Ok(Finished { sink, stats, outputs })
            }
            Ok((_, Err(e))) => Err(io::Error::new(e.kind(), format!("trace sink: {e}"))),
            Err(_) => Err(io::Error::other("the trace collector thread panicked")),
        }
    }
}
