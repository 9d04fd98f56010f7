//! PMDK's libpmemobj as a peer allocator, through FFI: the persistent
//! allocator the NVAlloc paper compares against (Fig. 1, 9, 12–15), run
//! unmodified, behind the same [`Allocator`] / [`AllocThread`] seam as
//! pmsim's own allocators, so every workload runs on it unchanged.
//!
//! * One pool file (`pmemobj_create`), layout name [`LAYOUT`]. Heap offsets
//!   are `PMEMoid.off` (offsets from the pool's base), so 0 is null.
//! * `malloc` / `free` are `pmemobj_alloc` / `pmemobj_free` on a `PMEMoid`
//!   in DRAM; `malloc_to` / `free_from` are the same calls on a `PMEMoid`
//!   *in the pool*, which PMDK's atomic API sets and clears through its redo
//!   log — its crash-consistent publication. A `PMEMoid` is 16 bytes
//!   (`pool_uuid_lo`, then `off`), so the destination word `dest` the trait
//!   speaks of is the `off` field and **the 8 bytes before `dest` belong to
//!   the slot too**. `params()["dest_bytes"] = 16` says so; the workloads
//!   lay their slots out with that stride.
//! * Roots: a root object of [`ROOT_SLOTS`] words (`pmemobj_root`).
//! * Footprint: live bytes are the usable sizes of live allocations
//!   (`pmemobj_alloc_usable_size`, counted here per thread); mapped bytes
//!   are what PMDK's statistics say the heap has handed out — huge
//!   allocations (`stats.heap.curr_allocated − stats.heap.run_allocated`)
//!   plus every run (slab) in use, allocated or free
//!   (`stats.heap.run_active`). PMDK's fixed metadata (pool header, lanes,
//!   zone and chunk headers) is not included. Statistics are switched on at
//!   creation ([`PmdkOptions::stats`]); they cost PMDK a shared atomic
//!   counter update per operation.
//!
//! # Persistence and the flush instruction
//!
//! PMDK decides how it persists, not pmsim: at library load it picks `clwb`,
//! else `clflushopt`, else `clflush` (or none with `PMEM_NO_FLUSH=1`;
//! `PMEM_NO_CLWB=1`, `PMEM_NO_CLFLUSHOPT=1` rule instructions out), and for a
//! pool that is not on real PM (not DAX-mapped, e.g. `/dev/shm`) it calls
//! `msync` instead of flushing — unless `PMEM_IS_PMEM_FORCE=1`. Since these
//! are read from the environment, a process that wants another choice must
//! set them before it starts (`pmsim run` re-executes itself to do so);
//! [`Pmdk::params`] reports what PMDK actually does (`is_pmem`, `flush`).
//!
//! PMDK's own stores and flushes happen inside the library, where pmsim's
//! built-in tracer cannot see them: trace PMDK with the DBI tracers instead.

use crate::alloc::{AllocThread, Allocator, CrashRules, Footprint, Params};
use crate::config::AllocConfig;
use crate::error::AllocError;
use crate::heap::Heap;
use crate::live::LiveBytes;
use crate::pm::Pm;
use crate::pm::{CpuFeatures, FlushInsn};
use crate::target::{CrashTarget, Recovered};
use pmsim_traces::OpKind;
use serde::{Deserialize, Serialize};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

mod recovery;
pub use recovery::serve_if_asked as serve_recovery_if_asked;

/// The layout name of pmsim's pools (PMDK refuses to open a pool under another).
pub const LAYOUT: &str = "pmsim";
/// Words in the root object.
pub const ROOT_SLOTS: usize = 64;
/// PMDK's smallest pool (`PMEMOBJ_MIN_POOL`).
pub const MIN_POOL: u64 = 8 << 20;
/// The PMDK version pmsim was built against (from pkg-config; "unknown" without it).
pub const VERSION: &str = env!("PMSIM_PMDK_VERSION");

/// `PMEMoid`: a persistent pointer — the pool's id, then the offset.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PmemOid {
    pub pool_uuid_lo: u64,
    pub off: u64,
}

/// The opaque `PMEMobjpool`.
#[repr(C)]
pub struct PmemObjPool {
    _private: [u8; 0],
}

type Constructor = Option<unsafe extern "C" fn(*mut PmemObjPool, *mut c_void, *mut c_void) -> c_int>;

/// `enum pobj_stats_enabled`: both persistent and transient statistics
/// (`curr_allocated` is persistent, `run_allocated`/`run_active` transient).
const POBJ_STATS_ENABLED_BOTH: c_int = 1;

// The libraries are linked by build.rs (`cargo:rustc-link-lib`).
extern "C" {
    fn pmemobj_create(
        path: *const c_char,
        layout: *const c_char,
        poolsize: usize,
        mode: libc::mode_t,
    ) -> *mut PmemObjPool;
    fn pmemobj_open(path: *const c_char, layout: *const c_char) -> *mut PmemObjPool;
    fn pmemobj_close(pop: *mut PmemObjPool);
    fn pmemobj_alloc(
        pop: *mut PmemObjPool,
        oidp: *mut PmemOid,
        size: usize,
        type_num: u64,
        constructor: Constructor,
        arg: *mut c_void,
    ) -> c_int;
    fn pmemobj_free(oidp: *mut PmemOid);
    fn pmemobj_alloc_usable_size(oid: PmemOid) -> usize;
    fn pmemobj_direct(oid: PmemOid) -> *mut c_void;
    fn pmemobj_root(pop: *mut PmemObjPool, size: usize) -> PmemOid;
    fn pmemobj_persist(pop: *mut PmemObjPool, addr: *const c_void, len: usize);
    fn pmemobj_errormsg() -> *const c_char;
    fn pmemobj_ctl_get(pop: *mut PmemObjPool, name: *const c_char, arg: *mut c_void) -> c_int;
    fn pmemobj_ctl_set(pop: *mut PmemObjPool, name: *const c_char, arg: *mut c_void) -> c_int;
    fn pmemobj_ctl_exec(pop: *mut PmemObjPool, name: *const c_char, arg: *mut c_void) -> c_int;
    fn pmem_is_pmem(addr: *const c_void, len: usize) -> c_int;
    fn pmemobj_first(pop: *mut PmemObjPool) -> PmemOid;
    fn pmemobj_next(oid: PmemOid) -> PmemOid;
    fn pmemobj_root_size(pop: *mut PmemObjPool) -> usize;
    fn pmemobj_check(path: *const c_char, layout: *const c_char) -> c_int;
}

/// `struct pmempool_check_args` (libpmempool.h, the non-Windows `U` form).
#[repr(C)]
struct PmempoolCheckArgs {
    path: *const c_char,
    backup_path: *const c_char,
    pool_type: c_int,
    flags: u32,
}

/// `struct pmempool_check_status`: a message of the check.
#[repr(C)]
struct PmempoolCheckStatus {
    kind: c_int,
    msg: *const c_char,
    answer: *const c_char,
}

/// `PMEMPOOL_POOL_TYPE_OBJ`, `PMEMPOOL_CHECK_FORMAT_STR` (messages as
/// strings), `PMEMPOOL_CHECK_RESULT_CONSISTENT` and
/// `PMEMPOOL_CHECK_MSG_TYPE_ERROR`, from libpmempool.h.
const PMEMPOOL_POOL_TYPE_OBJ: c_int = 3;
const PMEMPOOL_CHECK_FORMAT_STR: u32 = 1 << 5;
const PMEMPOOL_CHECK_RESULT_CONSISTENT: c_int = 0;
const PMEMPOOL_CHECK_MSG_TYPE_ERROR: c_int = 1;

extern "C" {
    fn pmempool_check_init(args: *mut PmempoolCheckArgs, args_size: usize) -> *mut c_void;
    fn pmempool_check(ppc: *mut c_void) -> *mut PmempoolCheckStatus;
    fn pmempool_check_end(ppc: *mut c_void) -> c_int;
    fn pmempool_errormsg() -> *const c_char;
}

/// PMDK's message for the last failure of this thread (plus errno's).
fn last_error() -> String {
    let errno = std::io::Error::last_os_error();
    // SAFETY: pmemobj_errormsg returns a thread-local NUL-terminated string
    // (possibly empty), valid until the next PMDK call on this thread.
    let msg = unsafe { CStr::from_ptr(pmemobj_errormsg()) }.to_string_lossy().into_owned();
    if msg.is_empty() {
        errno.to_string()
    } else {
        msg
    }
}

/// A PMDK failure, one line naming the pool file.
#[derive(Debug)]
pub struct PmdkError {
    pub path: PathBuf,
    pub problem: String,
}

impl fmt::Display for PmdkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.problem)
    }
}

impl std::error::Error for PmdkError {}

impl PmdkError {
    /// As the allocators' error type (the message names the pool file already).
    fn into_alloc(self) -> AllocError {
        AllocError::store("PMDK", self.to_string())
    }
}

/// The PMDK environment variables a run needs (`None`: unset): the pool
/// treated as PM unless `msync` is asked for (as the paper's DAX pools are),
/// and the flush instruction narrowed to `flush` when one is asked for.
pub fn required_env(msync: bool, flush: Option<FlushInsn>) -> Vec<(&'static str, Option<&'static str>)> {
    let mut env = vec![("PMEM_IS_PMEM_FORCE", if msync { None } else { Some("1") })];
    let (no_clwb, no_opt, no_flush) = match flush {
        None => return env,
        Some(FlushInsn::Clwb) => (None, None, None),
        Some(FlushInsn::Clflushopt) => (Some("1"), None, None),
        Some(FlushInsn::Clflush) => (Some("1"), Some("1"), None),
        Some(FlushInsn::None) => (None, None, Some("1")),
    };
    env.extend([("PMEM_NO_CLWB", no_clwb), ("PMEM_NO_CLFLUSHOPT", no_opt), ("PMEM_NO_FLUSH", no_flush)]);
    env
}

/// PMDK reads its persistence settings from the environment when the library
/// loads, before `main`: if this process's environment is not `want`,
/// executes the current program again with it (once) and does not return.
/// Returns `Ok` when the environment already is right.
pub fn ensure_env(want: &[(&'static str, Option<&'static str>)]) -> Result<(), String> {
    let differs = want.iter().any(|(k, v)| std::env::var(k).ok().as_deref() != *v);
    if !differs {
        return Ok(());
    }
    const GUARD: &str = "PMSIM_PMDK_REEXEC";
    if std::env::var_os(GUARD).is_some() {
        return Err("cannot set PMDK's environment (PMEM_*): it differs even after re-executing pmsim".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find pmsim's executable: {e}"))?;
    let mut cmd = std::process::Command::new(&exe);
    cmd.args(std::env::args_os().skip(1)).env(GUARD, "1");
    for (k, v) in want {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    use std::os::unix::process::CommandExt;
    let e = cmd.exec();
    Err(format!("cannot re-execute {} to set PMDK's environment: {e}", exe.display()))
}

/// How to create a pool.
#[derive(Clone, Debug)]
pub struct PmdkOptions {
    /// Replace an existing file (else an existing file is an error).
    pub overwrite: bool,
    /// Switch PMDK's heap statistics on (needed for `footprint().mapped_bytes`).
    pub stats: bool,
    /// Automatic arenas at least (see [`PmdkConfig::arenas`]; 0: PMDK's own
    /// count, the processors of the machine that runs).
    pub arenas: u32,
}

impl Default for PmdkOptions {
    fn default() -> Self {
        PmdkOptions { overwrite: false, stats: true, arenas: PmdkConfig::default().arenas }
    }
}

/// Live-byte counters: threads add to `tid % COUNTERS`.
const COUNTERS: usize = 64;

/// An open libpmemobj pool.
pub struct Pmdk {
    pop: *mut PmemObjPool,
    base: *mut u8,
    size: u64,
    uuid_lo: u64,
    root_off: u64,
    path: PathBuf,
    stats: bool,
    /// Automatic arenas asked for ([`PmdkConfig::arenas`]).
    arenas: u32,
    is_pmem: bool,
    live: LiveBytes,
    /// The pool's regions as told to pmsim's Valgrind tool (only under it).
    regions: std::sync::Mutex<Regions>,
}

/// The pool's regions for pmsim's Valgrind tool ([`crate::pmtrace`]): the
/// pool is PMDK's metadata (its headers, lanes and redo logs, run bitmaps,
/// chunk headers, and the objects it hands out, whose contents PMDK does
/// not flush), except the root object and the objects a workload allocates
/// with plain `malloc` — its anchor directory and its arrays of
/// destination slots — which are user data, as in `pmdk_threadtest.c`. A
/// region added over others replaces them in the trace's region map, so a
/// data object is cut out of the metadata piece around it by adding the
/// pieces left and right of it with the object, and put back by adding a
/// metadata piece over it.
#[derive(Debug, Default)]
struct Regions {
    next_id: u64,
    /// The metadata pieces: start offset → end offset.
    meta: std::collections::BTreeMap<u64, u64>,
}

impl Regions {
    fn add(&mut self, base: *const u8, cat: crate::Category, lo: u64, hi: u64) {
        if hi <= lo {
            return;
        }
        self.next_id += 1;
        let name = if cat == crate::Category::Data { "user data" } else { "pmdk pool" };
        crate::pmtrace::region_add(self.next_id, cat, base.wrapping_add(lo as usize), hi - lo, name);
        if cat == crate::Category::Meta {
            self.meta.insert(lo, hi);
        }
    }

    /// `[off, off + len)` becomes user data.
    fn carve(&mut self, base: *const u8, off: u64, len: u64) {
        let Some((&lo, &hi)) = self.meta.range(..=off).next_back() else { return };
        if off + len > hi {
            return;
        }
        self.meta.remove(&lo);
        self.add(base, crate::Category::Meta, lo, off);
        self.add(base, crate::Category::Data, off, off + len);
        self.add(base, crate::Category::Meta, off + len, hi);
    }
}

// SAFETY: libpmemobj's pool handle and its allocation, free, persist and ctl
// calls are thread-safe (documented in libpmemobj(7)); `base` points into the
// pool's mapping, which lives until `pmemobj_close` in `Drop`.
unsafe impl Send for Pmdk {}
// SAFETY: see Send; shared access only makes those thread-safe calls and
// raw-pointer copies into the mapping.
unsafe impl Sync for Pmdk {}

impl fmt::Debug for Pmdk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pmdk").field("path", &self.path).field("size", &self.size).finish()
    }
}

fn cpath(path: &Path) -> Result<CString, PmdkError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| PmdkError { path: path.to_path_buf(), problem: "path contains a NUL byte".into() })
}

fn env_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| v == "1")
}

impl Pmdk {
    /// Creates a pool of `size` bytes at `path`.
    pub fn create(path: impl AsRef<Path>, size: u64, opts: &PmdkOptions) -> Result<Arc<Pmdk>, PmdkError> {
        let path = path.as_ref();
        let err = |problem: String| PmdkError { path: path.to_path_buf(), problem };
        if size < MIN_POOL {
            return Err(err(format!("pool size {size} is below PMDK's minimum of {MIN_POOL} bytes")));
        }
        if path.exists() {
            if !opts.overwrite {
                return Err(err("already exists (ask to overwrite it to replace it)".into()));
            }
            std::fs::remove_file(path).map_err(|e| err(format!("cannot remove the old file: {e}")))?;
        }
        let c = cpath(path)?;
        let layout = CString::new(LAYOUT).expect("no NUL");
        // The pool's creation is an operation of its own for pmsim's
        // Valgrind tool (its flushes are not the workload's).
        crate::pmtrace::op_begin(OpKind::Init, 0);
        // SAFETY: valid NUL-terminated strings; PMDK creates and maps the file.
        let pop = unsafe { pmemobj_create(c.as_ptr(), layout.as_ptr(), size as usize, 0o600) };
        let r = if pop.is_null() {
            Err(err(format!("pmemobj_create: {}", last_error())))
        } else {
            Pmdk::init(pop, path, opts)
        };
        crate::pmtrace::op_end(OpKind::Init, 0);
        r
    }

    /// Opens an existing pmsim pool (PMDK recovers it if it was not closed).
    pub fn open(path: impl AsRef<Path>, opts: &PmdkOptions) -> Result<Arc<Pmdk>, PmdkError> {
        let path = path.as_ref();
        let c = cpath(path)?;
        let layout = CString::new(LAYOUT).expect("no NUL");
        // SAFETY: valid NUL-terminated strings.
        let pop = unsafe { pmemobj_open(c.as_ptr(), layout.as_ptr()) };
        if pop.is_null() {
            return Err(PmdkError { path: path.to_path_buf(), problem: format!("pmemobj_open: {}", last_error()) });
        }
        Pmdk::init(pop, path, opts)
    }

    fn init(pop: *mut PmemObjPool, path: &Path, opts: &PmdkOptions) -> Result<Arc<Pmdk>, PmdkError> {
        let err = |problem: String| {
            // SAFETY: `pop` is open and nothing else uses it yet.
            unsafe { pmemobj_close(pop) };
            PmdkError { path: path.to_path_buf(), problem }
        };
        if let Err(e) = add_arenas(pop, opts.arenas) {
            return Err(err(e));
        }
        let mut both: c_int = POBJ_STATS_ENABLED_BOTH;
        // SAFETY: `stats.enabled` takes a pointer to an enum (int).
        if opts.stats && !unsafe { ctl(pop, Ctl::Set, "stats.enabled", &mut both) } {
            return Err(err(format!("cannot enable statistics: {}", last_error())));
        }
        // SAFETY: `pop` is open; the root object is allocated (zeroed) on first use.
        let root = unsafe { pmemobj_root(pop, ROOT_SLOTS * 8) };
        if root.off == 0 {
            return Err(err(format!("pmemobj_root: {}", last_error())));
        }
        let size = std::fs::metadata(path).map_err(|e| err(format!("cannot stat: {e}")))?.len();
        // SAFETY: `root` is a valid object of this pool, so pmemobj_direct
        // returns its address; the pool base is that address minus its offset.
        let base = unsafe { (pmemobj_direct(root) as *mut u8).sub(root.off as usize) };
        debug_assert_eq!(base as usize, pop as usize, "pool base is the pool handle");
        // SAFETY: [base, base + size) is the pool's mapping.
        let is_pmem = unsafe { pmem_is_pmem(base as *const c_void, size as usize) } != 0;
        Ok(Arc::new(Pmdk {
            pop,
            base,
            size,
            uuid_lo: root.pool_uuid_lo,
            root_off: root.off,
            path: path.to_path_buf(),
            stats: opts.stats,
            arenas: opts.arenas,
            is_pmem,
            live: LiveBytes::new(0, COUNTERS),
            regions: std::sync::Mutex::new(Regions::default()),
        }))
        .inspect(|p| p.tell_regions())
    }

    /// Under pmsim's Valgrind tool, the pool's regions (see [`Regions`]).
    fn tell_regions(&self) {
        if !crate::pmtrace::running() {
            return;
        }
        let mut r = self.regions.lock().unwrap();
        r.add(self.base, crate::Category::Meta, 0, self.size);
        r.carve(self.base, self.root_off, ROOT_SLOTS as u64 * 8);
    }

    /// Closes the pool (also done on drop); fails while thread handles exist.
    pub fn close(self: Arc<Self>) -> Result<(), PmdkError> {
        let p = Arc::try_unwrap(self).map_err(|a| PmdkError {
            path: a.path.clone(),
            problem: format!("cannot close: {} thread handle(s) still use the pool", Arc::strong_count(&a) - 1),
        })?;
        drop(p);
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Pool size in bytes (the file's length).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Whether PMDK treats the pool as PM (flushes) rather than a file (msync).
    pub fn is_pmem(&self) -> bool {
        self.is_pmem
    }

    /// How PMDK persists: `msync` for a non-PM pool, else the flush
    /// instruction libpmem picks from the CPU and the environment.
    pub fn flush(&self) -> &'static str {
        if !self.is_pmem {
            return "msync";
        }
        let cpu = CpuFeatures::detect();
        if env_set("PMEM_NO_FLUSH") {
            "none"
        } else if cpu.clwb && !env_set("PMEM_NO_CLWB") {
            "clwb"
        } else if cpu.clflushopt && !env_set("PMEM_NO_CLFLUSHOPT") {
            "clflushopt"
        } else {
            "clflush"
        }
    }

    /// A `u64` statistic of the pool's CTL namespace.
    fn ctl_u64(&self, name: &str) -> Option<u64> {
        let mut v: u64 = 0;
        // SAFETY: the statistics read are `uint64_t`.
        unsafe { ctl(self.pop, Ctl::Get, name, &mut v) }.then_some(v)
    }

    /// The address of `[off, off + len)`, which must lie in the pool.
    #[inline]
    fn at(&self, off: u64, len: u64) -> *mut u8 {
        if off > self.size || len > self.size - off {
            out_of_pool(off, len, self.size);
        }
        self.base.wrapping_add(off as usize)
    }

    /// The destination `PMEMoid` whose `off` field is at `dest`.
    #[inline]
    fn oidp(&self, dest: u64) -> *mut PmemOid {
        if dest < 8 || dest & 7 != 0 {
            panic!("PMDK destination {dest:#x}: must be 8-aligned and preceded by the PMEMoid's pool-id word");
        }
        self.at(dest - 8, 16) as *mut PmemOid
    }

    #[inline]
    fn account(&self, tid: u32, delta: i64) {
        self.live.add(tid, delta);
    }

    fn usable(&self, off: u64) -> u64 {
        // SAFETY: `off` names a live allocation of this pool (the caller's contract).
        unsafe { pmemobj_alloc_usable_size(PmemOid { pool_uuid_lo: self.uuid_lo, off }) as u64 }
    }
}

#[cold]
#[inline(never)]
fn out_of_pool(off: u64, len: u64, size: u64) -> ! {
    panic!("PMDK access at pool offset {off:#x} (+{len} bytes) is outside the pool of {size} bytes")
}

impl Drop for Pmdk {
    fn drop(&mut self) {
        // SAFETY: the pool is open and, with the last reference gone, unused.
        unsafe { pmemobj_close(self.pop) };
    }
}

impl Allocator for Pmdk {
    type Config = PmdkConfig;
    type Thread = PmdkThread;
    const FAMILY: &'static str = "pmdk";
    const ABOUT: &'static str =
        "PMDK's libpmemobj through FFI (native runs; trace it with the Valgrind tool in pintools/)";

    /// Its pool, which libpmemobj creates, maps and flushes; its writes
    /// happen inside the library, out of sight of pmsim's built-in tracer.
    const OWN_FILE: bool = true;

    fn process_env(flush: Option<FlushInsn>, msync: bool) -> Vec<(&'static str, Option<&'static str>)> {
        required_env(msync, flush)
    }

    fn serve_helper_if_asked() {
        serve_recovery_if_asked()
    }

    fn create_own_file(path: &Path, size: u64, overwrite: bool, cfg: PmdkConfig) -> Result<Arc<Self>, AllocError> {
        cfg.validate()?;
        let opts = PmdkOptions { overwrite, arenas: cfg.arenas, ..PmdkOptions::default() };
        Pmdk::create(path, size, &opts).map_err(PmdkError::into_alloc)
    }

    fn prefault(&self, f: &crate::fault_in::FaultIn) -> Result<(), AllocError> {
        // SAFETY: the pool's writable mapping of `size` bytes.
        unsafe { f.apply(self.base, self.size) }
            .map_err(|e| AllocError::store("PMDK", format!("{}: cannot fault in the pool: {e}", self.path.display())))
    }

    /// `pmemobj_open`: libpmemobj recovers the pool's lanes (their redo and
    /// undo logs) as it opens it; the heap's run metadata it rebuilds
    /// lazily, as allocations reach each bucket.
    fn open_own_file(path: &Path, cfg: PmdkConfig) -> Result<Arc<Self>, AllocError> {
        cfg.validate()?;
        Pmdk::open(path, &PmdkOptions { arenas: cfg.arenas, ..PmdkOptions::default() }).map_err(PmdkError::into_alloc)
    }

    fn create(_heap: &Heap, _pm: Pm, _cfg: PmdkConfig) -> Result<Arc<Self>, AllocError> {
        Err(not_on_a_pmsim_heap())
    }

    fn open(_heap: &Heap, _pm: Pm, _cfg: PmdkConfig) -> Result<Arc<Self>, AllocError> {
        Err(not_on_a_pmsim_heap())
    }

    fn close(self: Arc<Self>, _heap: &Heap) -> Result<Pm, AllocError> {
        Err(not_on_a_pmsim_heap())
    }

    fn params(&self) -> Params {
        let mut m = serde_json::Map::new();
        m.insert("library".into(), "libpmemobj".into());
        m.insert("version".into(), VERSION.into());
        m.insert("api".into(), "atomic (pmemobj_alloc / pmemobj_free)".into());
        m.insert("pool_size".into(), self.size.into());
        m.insert("arenas".into(), self.arenas.into());
        m.insert("dest_bytes".into(), 16.into());
        m.insert("is_pmem".into(), self.is_pmem.into());
        m.insert("flush".into(), self.flush().into());
        m.insert("stats".into(), self.stats.into());
        for var in ["PMEM_IS_PMEM_FORCE", "PMEM_NO_CLWB", "PMEM_NO_CLFLUSHOPT", "PMEM_NO_FLUSH"] {
            if let Some(v) = std::env::var_os(var) {
                m.insert(var.into(), v.to_string_lossy().into_owned().into());
            }
        }
        m
    }

    fn thread(self: &Arc<Self>, tid: u32) -> PmdkThread {
        PmdkThread { p: self.clone(), tid }
    }

    fn footprint(&self) -> Footprint {
        let mapped = if self.stats {
            let curr = self.ctl_u64("stats.heap.curr_allocated").unwrap_or(0);
            let run_alloc = self.ctl_u64("stats.heap.run_allocated").unwrap_or(0);
            let run_active = self.ctl_u64("stats.heap.run_active").unwrap_or(0);
            curr.saturating_sub(run_alloc) + run_active
        } else {
            0
        };
        Footprint { live_bytes: self.live.get(), mapped_bytes: mapped }
    }

    /// Every object but the root, as libpmemobj walks them.
    fn live_blocks(&self, _t: &mut PmdkThread) -> Vec<(u64, u64)> {
        objects(self.pop, Some(self.root_off))
    }

    /// An object `pmemobj_alloc` returned is allocated durably, published or not.
    fn crash_rules(_cfg: &PmdkConfig) -> Result<CrashRules, String> {
        Ok(CrashRules { plain_mallocs_durable: true, ..CrashRules::default() })
    }

    /// Images of its pool, recovered by libpmemobj.
    fn crash_target(_cfg: &PmdkConfig) -> Option<Box<dyn CrashTarget>> {
        Some(Box::new(PmdkCrash { idle: Arc::default() }))
    }
}

fn not_on_a_pmsim_heap() -> AllocError {
    AllocError::config("PMDK", "PMDK runs on a libpmemobj pool of its own, not on a pmsim heap")
}

/// A thread's handle on a PMDK pool (PMDK keeps its per-thread state —
/// arena binding, lane — itself, keyed by the OS thread).
pub struct PmdkThread {
    p: Arc<Pmdk>,
    tid: u32,
}

impl PmdkThread {
    /// The pool this handle belongs to.
    pub fn pool(&self) -> &Arc<Pmdk> {
        &self.p
    }

    /// `pmemobj_alloc` into `oidp` (DRAM or pool).
    fn alloc_into(&mut self, size: u64, oidp: *mut PmemOid) -> Option<u64> {
        let p = &*self.p;
        // SAFETY: `oidp` points to a PMEMoid in DRAM or inside the pool
        // (bounds-checked by `oidp()`); no constructor.
        let rc = unsafe { pmemobj_alloc(p.pop, oidp, size as usize, 0, None, std::ptr::null_mut()) };
        if rc != 0 {
            return None;
        }
        // SAFETY: PMDK just wrote the new object's oid there.
        let off = unsafe { (*oidp).off };
        p.account(self.tid, p.usable(off) as i64);
        Some(off)
    }
}

/// Operations are bracketed for pmsim's Valgrind tool ([`crate::pmtrace`];
/// nothing outside it), so that a traced `pmsim run --alloc pmdk` counts
/// them and charges their flushes to them.
impl AllocThread for PmdkThread {
    fn malloc(&mut self, size: u64) -> Option<u64> {
        crate::pmtrace::op_begin(OpKind::Malloc, size);
        let mut oid = PmemOid::default();
        let off = self.alloc_into(size, &mut oid);
        crate::pmtrace::op_end(OpKind::Malloc, off.unwrap_or(0));
        if let (Some(off), true) = (off, crate::pmtrace::running()) {
            let p = &*self.p;
            p.regions.lock().unwrap().carve(p.base, off, size);
        }
        off
    }

    fn free(&mut self, off: u64) {
        if off == 0 {
            return;
        }
        let p = &*self.p;
        let usable = p.usable(off);
        p.account(self.tid, -(usable as i64));
        let mut oid = PmemOid { pool_uuid_lo: p.uuid_lo, off };
        crate::pmtrace::op_begin(OpKind::Free, off);
        // SAFETY: `oid` names a live allocation of this pool.
        unsafe { pmemobj_free(&mut oid) };
        crate::pmtrace::op_end(OpKind::Free, 0);
        if crate::pmtrace::running() {
            p.regions.lock().unwrap().add(p.base, crate::Category::Meta, off, off + usable);
        }
    }

    fn malloc_to(&mut self, size: u64, dest: u64) -> Option<u64> {
        let oidp = self.p.oidp(dest);
        crate::pmtrace::op_begin(OpKind::Malloc, size);
        let off = self.alloc_into(size, oidp);
        crate::pmtrace::op_end(OpKind::Malloc, off.unwrap_or(0));
        off
    }

    fn free_from(&mut self, dest: u64) {
        let p = &*self.p;
        let oidp = p.oidp(dest);
        // SAFETY: `oidp` lies in the pool (checked); it holds the PMEMoid
        // that `malloc_to` published, or zeros.
        let oid = unsafe { oidp.read() };
        if oid.off == 0 {
            return;
        }
        p.account(self.tid, -(p.usable(oid.off) as i64));
        crate::pmtrace::op_begin(OpKind::Free, oid.off);
        // SAFETY: as above; PMDK frees the object and clears *oidp atomically.
        unsafe { pmemobj_free(oidp) };
        crate::pmtrace::op_end(OpKind::Free, 0);
    }

    fn write(&mut self, off: u64, data: &[u8]) {
        let dst = self.p.at(off, data.len() as u64);
        // SAFETY: the destination lies in the pool (checked); `ptr::copy`
        // tolerates a source inside the pool.
        unsafe { std::ptr::copy(data.as_ptr(), dst, data.len()) };
    }

    fn read(&self, off: u64, buf: &mut [u8]) {
        let src = self.p.at(off, buf.len() as u64);
        // SAFETY: the source lies in the pool (checked).
        unsafe { std::ptr::copy(src, buf.as_mut_ptr(), buf.len()) };
    }

    fn persist(&mut self, off: u64, len: u64) {
        let p = &*self.p;
        let addr = p.at(off, len);
        // SAFETY: the range lies in the pool.
        unsafe { pmemobj_persist(p.pop, addr as *const c_void, len as usize) };
    }

    /// An atomic (release) store when aligned, like NVAlloc's `store_u64`,
    /// so a word can publish data to another thread.
    fn write_u64(&mut self, off: u64, v: u64) {
        if off & 7 != 0 {
            return self.write(off, &v.to_le_bytes());
        }
        let a = self.p.at(off, 8) as *mut u64;
        // SAFETY: in the pool and aligned; the mapping outlives the call.
        unsafe { AtomicU64::from_ptr(a) }.store(v, Ordering::Release);
    }

    fn read_u64(&self, off: u64) -> u64 {
        if off & 7 != 0 {
            let mut b = [0u8; 8];
            self.read(off, &mut b);
            return u64::from_le_bytes(b);
        }
        let a = self.p.at(off, 8) as *mut u64;
        // SAFETY: in the pool and aligned.
        unsafe { AtomicU64::from_ptr(a) }.load(Ordering::Acquire)
    }

    fn set_root(&mut self, slot: usize, off: u64) {
        assert!(slot < ROOT_SLOTS, "root slot {slot} out of range");
        let at = self.p.root_off + 8 * slot as u64;
        self.write_u64(at, off);
        self.persist(at, 8);
    }

    fn root(&self, slot: usize) -> u64 {
        assert!(slot < ROOT_SLOTS, "root slot {slot} out of range");
        self.read_u64(self.p.root_off + 8 * slot as u64)
    }
}

/// PMDK's parameters. libpmemobj decides its layout itself, and reads its
/// persistence settings from the environment ([`required_env`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PmdkConfig {
    /// Automatic arenas, at least (`heap.arena.create`, then
    /// `heap.arena.N.automatic`): libpmemobj gives a thread the arena with
    /// the fewest threads, and makes as many as the machine has processors
    /// (`heap.narenas.automatic`). The default is what the paper's machine
    /// had (two Xeon Gold 5218R, 80 hyperthreads), so the threads of a run
    /// share arenas, and their locks, as they did there, not as on the
    /// machine that records the trace; 0 keeps that machine's count.
    pub arenas: u32,
}

impl Default for PmdkConfig {
    fn default() -> Self {
        PmdkConfig { arenas: 80 }
    }
}

impl AllocConfig for PmdkConfig {
    const ALLOC: &'static str = "PMDK";

    fn validate(&self) -> Result<(), AllocError> {
        if self.arenas > 1024 {
            return Err(AllocError::config("PMDK", format!("arenas = {} (must be 0..=1024)", self.arenas)));
        }
        Ok(())
    }
}

/// How an entry of the pool's CTL namespace is used.
#[derive(Clone, Copy)]
enum Ctl {
    Get,
    Set,
    Exec,
}

/// Reads, writes or runs (`how`) the CTL entry `name` of `pop` with `arg`;
/// false if libpmemobj refuses.
///
/// # Safety
/// `pop` is an open pool and `T` is the type the entry takes.
unsafe fn ctl<T>(pop: *mut PmemObjPool, how: Ctl, name: &str, arg: &mut T) -> bool {
    let call = match how {
        Ctl::Get => pmemobj_ctl_get,
        Ctl::Set => pmemobj_ctl_set,
        Ctl::Exec => pmemobj_ctl_exec,
    };
    let Ok(name) = CString::new(name) else { return false };
    // SAFETY: as the caller promises.
    unsafe { call(pop, name.as_ptr(), arg as *mut T as *mut c_void) == 0 }
}

/// The pool's automatic arenas (`heap.narenas.automatic`).
fn automatic_arenas(pop: *mut PmemObjPool) -> Option<u32> {
    let mut have: u32 = 0;
    // SAFETY: the entry reads an unsigned.
    unsafe { ctl(pop, Ctl::Get, "heap.narenas.automatic", &mut have) }.then_some(have)
}

/// Makes the pool's automatic arenas `at_least` (0: as they are).
fn add_arenas(pop: *mut PmemObjPool, at_least: u32) -> Result<(), String> {
    let have = automatic_arenas(pop).ok_or_else(|| format!("cannot read heap.narenas.automatic: {}", last_error()))?;
    for _ in have..at_least {
        let mut id: u32 = 0;
        // SAFETY: `heap.arena.create` writes the new arena's id (unsigned).
        if !unsafe { ctl(pop, Ctl::Exec, "heap.arena.create", &mut id) } {
            return Err(format!("cannot create an arena (heap.arena.create): {}", last_error()));
        }
        let mut on: c_int = 1;
        // SAFETY: the entry takes a pointer to a boolean (int).
        if !unsafe { ctl(pop, Ctl::Set, &format!("heap.arena.{id}.automatic"), &mut on) } {
            return Err(format!("cannot make arena {id} automatic: {}", last_error()));
        }
    }
    Ok(())
}

/// PMDK as a crash target: the images of a libpmemobj pool that a program
/// traced by the Valgrind tool (`pmsim trace-exec --values`) wrote, each
/// recovered by libpmemobj itself and checked by PMDK's own checks.
///
/// An image is written to a scratch pool file; then ([`recover_here`])
/// * libpmempool's consistency check (`pmempool_check`, what `pmempool
///   check` runs) must find the image consistent as the crash left it;
/// * libpmemobj's own check (`pmemobj_check`: its lanes' logs and the heap
///   metadata, recovered in a private copy) must find the image consistent
///   (the metadata check, [`Recovered::check`]);
/// * `pmemobj_open` then runs libpmemobj's recovery (its lanes' redo and
///   undo logs) and must succeed; the pool stays open for the explorer's
///   probe allocations;
/// * the live objects are what `pmemobj_first` / `pmemobj_next` walk (the
///   root object aside: the program's, not an allocation of the trace);
/// * the recovered bytes go back into the image the explorer holds, where
///   its checks read the program's root structure (the slots its completed
///   operations published into) and the objects' contents.
///
/// libpmemobj refuses to open a pool whose UUID is open in the process
/// already, and every image of a trace is the same pool. So in pmsim,
/// which can re-run itself as a recovery process ([`recovery`]), each of
/// the explorer's threads recovers its images in a process of its own,
/// and they run in parallel; elsewhere (a test binary) images are recovered
/// in this process, one at a time ([`RECOVERY`]).
struct PmdkCrash {
    /// The recoverers no recovery holds now.
    idle: Arc<std::sync::Mutex<Vec<Recoverer>>>,
}

/// Held while a crash image's pool is open in this process (see [`PmdkCrash`]).
static RECOVERY: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Where one recovery at a time runs: a scratch pool file, and the recovery
/// process that opens it (`None`: this process does).
struct Recoverer {
    scratch: ScratchPool,
    process: Option<recovery::Process>,
}

/// A crash image recovered in this process: the pool libpmemobj opened
/// (and recovered), its objects, and `pmemobj_check`'s verdict.
struct RecoveredHere {
    pool: OpenPool,
    live: Vec<(u64, u64)>,
    check: Result<(), String>,
}

/// Recovers the crash image in the pool file at `path` in this process (see
/// [`PmdkCrash`]): an `Err` when libpmempool finds it inconsistent or
/// libpmemobj cannot open it. The caller holds [`RECOVERY`] or is a
/// recovery process.
fn recover_here(path: &CStr) -> Result<RecoveredHere, String> {
    pool_check(path).map_err(|e| format!("pmempool check of the crash image: {e}"))?;
    // SAFETY: `path` is NUL-terminated; a null layout accepts the pool's own.
    let check = match unsafe { pmemobj_check(path.as_ptr(), std::ptr::null()) } {
        1 => Ok(()),
        0 => Err(format!("pmemobj_check: the crash image is not consistent: {}", last_error())),
        _ => Err(format!("pmemobj_check: {}", last_error())),
    };
    let pool = OpenPool::open(path)?;
    let live = pool.objects();
    Ok(RecoveredHere { pool, live, check })
}

/// libpmempool's check of the pool at `path`, without repairing: `Err` with
/// its first error message (or its result) when the pool is not consistent.
fn pool_check(path: &CStr) -> Result<(), String> {
    let mut args = PmempoolCheckArgs {
        path: path.as_ptr(),
        backup_path: std::ptr::null(),
        pool_type: PMEMPOOL_POOL_TYPE_OBJ,
        flags: PMEMPOOL_CHECK_FORMAT_STR,
    };
    // SAFETY: `args` is a valid struct of the size passed; the path outlives the check.
    let ppc = unsafe { pmempool_check_init(&mut args, std::mem::size_of::<PmempoolCheckArgs>()) };
    if ppc.is_null() {
        // SAFETY: a thread-local NUL-terminated string.
        let m = unsafe { CStr::from_ptr(pmempool_errormsg()) }.to_string_lossy().into_owned();
        return Err(format!("pmempool_check_init: {m}"));
    }
    let mut first_error = None;
    loop {
        // SAFETY: `ppc` is a live check context; statuses live until the next call.
        let st = unsafe { pmempool_check(ppc) };
        if st.is_null() {
            break;
        }
        // SAFETY: as above; `msg` is NUL-terminated (FORMAT_STR) or null.
        let (kind, msg) = unsafe { ((*st).kind, (*st).msg) };
        if kind == PMEMPOOL_CHECK_MSG_TYPE_ERROR && first_error.is_none() && !msg.is_null() {
            // SAFETY: checked non-null above.
            first_error = Some(unsafe { CStr::from_ptr(msg) }.to_string_lossy().into_owned());
        }
    }
    // SAFETY: ends the context made above.
    let result = unsafe { pmempool_check_end(ppc) };
    if result == PMEMPOOL_CHECK_RESULT_CONSISTENT {
        return Ok(());
    }
    Err(first_error.unwrap_or_else(|| format!("result {result} (not consistent)")))
}

/// A crash image's pool open in libpmemobj; closed on drop.
struct OpenPool(*mut PmemObjPool);

impl OpenPool {
    fn open(path: &CStr) -> Result<OpenPool, String> {
        // SAFETY: a NUL-terminated path; a null layout accepts the pool's own.
        let pop = unsafe { pmemobj_open(path.as_ptr(), std::ptr::null()) };
        if pop.is_null() {
            return Err(format!("pmemobj_open: {}", last_error()));
        }
        Ok(OpenPool(pop))
    }

    /// The root object (offset, bytes), or `None` when the pool has none.
    fn root(&self) -> Option<(u64, u64)> {
        // SAFETY: an open pool.
        let size = unsafe { pmemobj_root_size(self.0) } as u64;
        // SAFETY: an open pool; a size no larger than the root's returns it as it is.
        let root = unsafe { pmemobj_root(self.0, size as usize) };
        (size > 0 && root.off != 0).then_some((root.off, size))
    }

    /// A new object of `size` bytes (the explorer's probe), or `None`.
    fn malloc(&self, size: u64) -> Option<u64> {
        let mut oid = PmemOid::default();
        // SAFETY: an open pool; `oid` is in DRAM; no constructor.
        let rc = unsafe { pmemobj_alloc(self.0, &mut oid, size as usize, 0, None, std::ptr::null_mut()) };
        (rc == 0).then_some(oid.off)
    }

    /// Every allocated object but the root, `(offset, usable size)` by offset.
    fn objects(&self) -> Vec<(u64, u64)> {
        objects(self.0, self.root().map(|r| r.0))
    }
}

/// Every allocated object of the open pool `pop` but the one at `root`,
/// `(offset, usable size)` by offset.
fn objects(pop: *mut PmemObjPool, root: Option<u64>) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    // SAFETY: an open pool; walking its objects reads its heap.
    let mut oid = unsafe { pmemobj_first(pop) };
    while oid.off != 0 {
        if Some(oid.off) != root {
            // SAFETY: `oid` names an allocated object of this pool.
            v.push((oid.off, unsafe { pmemobj_alloc_usable_size(oid) } as u64));
        }
        // SAFETY: as above.
        oid = unsafe { pmemobj_next(oid) };
    }
    v.sort_unstable();
    v
}

impl Drop for OpenPool {
    fn drop(&mut self) {
        // SAFETY: open, and nothing uses it any more.
        unsafe { pmemobj_close(self.0) };
    }
}

/// The scratch pool file crash images are recovered in, mapped shared: the
/// mapping is coherent with libpmemobj's own shared mapping of the same
/// file, so what recovery wrote is read there with no copy of the file. An
/// image is written over it page by page where the two differ (an image
/// differs from the last recovered one in a few pages, and copying 8 MiB
/// per image would cost more than libpmemobj's recovery). Removed on drop
/// (and by pmsim's interrupt handler, as every scratch heap).
struct ScratchPool {
    scratch: crate::scratch::ScratchHeap,
    path: CString,
    file: std::fs::File,
    /// The file's bytes; `None` until the first image sizes the file.
    map: Option<memmap2::MmapMut>,
}

impl ScratchPool {
    fn new() -> Result<ScratchPool, String> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let scratch = crate::scratch::ScratchHeap::new(&format!("pmdk-{}", NEXT.fetch_add(1, Ordering::Relaxed)))?;
        let io = |e: std::io::Error| format!("{}: {e}", scratch.path().display());
        let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(scratch.path());
        let file = file.map_err(io)?;
        let path = cpath(scratch.path()).map_err(|e| e.to_string())?;
        Ok(ScratchPool { scratch, path, file, map: None })
    }

    /// Makes the file hold `bytes`.
    fn write(&mut self, bytes: &[u8]) -> Result<(), String> {
        let io = |e: std::io::Error| format!("{}: {e}", self.scratch.path().display());
        if self.map.as_ref().is_none_or(|m| m.len() != bytes.len()) {
            self.map = None;
            self.file.set_len(bytes.len() as u64).map_err(io)?;
            // SAFETY: a scratch file of this pool's alone; only libpmemobj,
            // while this pool lends it the file, maps it besides.
            let mut map = unsafe { memmap2::MmapMut::map_mut(&self.file) }.map_err(io)?;
            map.copy_from_slice(bytes);
            self.map = Some(map);
            return Ok(());
        }
        let map = self.map.as_mut().expect("mapped above");
        for (have, want) in map.chunks_mut(PAGE).zip(bytes.chunks(PAGE)) {
            if have != want {
                have.copy_from_slice(want);
            }
        }
        Ok(())
    }

    /// What the file holds now (libpmemobj's changes included).
    fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or_default()
    }
}

/// Pages compared and copied (the kernel's).
const PAGE: usize = 4096;

/// The bytes of `heap`'s mapping.
#[allow(clippy::mut_from_ref)]
fn image_bytes(heap: &Heap) -> &mut [u8] {
    // SAFETY: the crash explorer's private copy-on-write mapping of one
    // image, used by this recovery alone while it runs.
    unsafe { std::slice::from_raw_parts_mut(heap.base(), heap.size() as usize) }
}

impl PmdkCrash {
    /// An idle recoverer, or a new one (with a recovery process of its own
    /// where pmsim can start one).
    fn recoverer(&self) -> Result<Recoverer, String> {
        if let Some(r) = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return Ok(r);
        }
        Ok(Recoverer { scratch: ScratchPool::new()?, process: None })
    }
}

impl CrashTarget for PmdkCrash {
    fn name(&self) -> String {
        format!("pmdk (libpmemobj {VERSION})")
    }

    /// An object `pmemobj_alloc` returned is allocated durably, published or not.
    fn plain_mallocs_durable(&self) -> bool {
        true
    }

    fn reachability_recovery(&self) -> bool {
        false
    }

    fn image_format(&self) -> crate::target::ImageFormat {
        crate::target::ImageFormat::Own
    }

    /// The root object: where a libpmemobj program's data starts from.
    fn publication_roots(&self, image: &Heap) -> Result<Vec<(u64, u64)>, String> {
        let _guard = RECOVERY.lock().unwrap_or_else(|e| e.into_inner());
        let mut r = self.recoverer()?;
        r.scratch.write(image_bytes(image))?;
        let roots = OpenPool::open(&r.scratch.path).map(|p| p.root().into_iter().collect());
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).push(r);
        roots.map_err(|e| format!("the trace's last state: {e}"))
    }

    fn recover(&self, heap: &Heap) -> Result<Box<dyn Recovered>, String> {
        let bytes = image_bytes(heap);
        if let Some(w) = heap.watch() {
            // libpmemobj's reads are out of sight: all of the image counts.
            w.read(0, bytes.len() as u64);
        }
        let mut r = self.recoverer()?;
        if r.process.is_none() && recovery::available() {
            r.process = Some(recovery::Process::start()?);
        }
        r.scratch.write(bytes)?;
        let mut rec = PmdkRecovered {
            here: None,
            live: Vec::new(),
            check: Ok(()),
            recoverer: None,
            home: self.idle.clone(),
            guard: None,
        };
        match &mut r.process {
            Some(p) => {
                let asked = p.recover(&r.scratch.path);
                if asked.is_err() && !p.alive() {
                    r.process = None; // started again for the next image
                }
                rec.recoverer = Some(r);
                (rec.live, rec.check) = asked?;
            }
            None => {
                rec.guard = Some(RECOVERY.lock().unwrap_or_else(|e| e.into_inner()));
                let path = r.scratch.path.clone();
                rec.recoverer = Some(r);
                let here = recover_here(&path)?;
                rec.live = here.live.clone();
                rec.check = here.check.clone();
                rec.here = Some(here);
            }
        }
        let scratch = &rec.recoverer.as_ref().expect("set above").scratch;
        // The recovered bytes into the image, where the explorer's checks
        // read them; only the pages recovery changed (the others stay shared).
        for (dst, src) in bytes.chunks_mut(PAGE).zip(scratch.bytes().chunks(PAGE)) {
            if dst != src {
                dst.copy_from_slice(src);
            }
        }
        Ok(Box::new(rec))
    }
}

/// A recovered crash image: its objects and checks, and the pool open for
/// the explorer's probe allocations (here, or in the recovery process). On
/// drop the pool is closed, the recoverer goes back to the idle ones, then
/// (here) the next image may open.
struct PmdkRecovered {
    here: Option<RecoveredHere>,
    live: Vec<(u64, u64)>,
    check: Result<(), String>,
    recoverer: Option<Recoverer>,
    home: Arc<std::sync::Mutex<Vec<Recoverer>>>,
    guard: Option<std::sync::MutexGuard<'static, ()>>,
}

impl Recovered for PmdkRecovered {
    fn live_allocations(&mut self) -> Vec<(u64, u64)> {
        self.live.clone()
    }

    fn check(&mut self) -> Result<(), String> {
        self.check.clone()
    }

    fn malloc(&mut self, size: u64) -> Option<u64> {
        if let Some(h) = &self.here {
            return h.pool.malloc(size);
        }
        self.recoverer.as_mut()?.process.as_mut()?.malloc(size)
    }
}

impl Drop for PmdkRecovered {
    fn drop(&mut self) {
        self.here = None;
        self.guard = None;
        if let Some(mut r) = self.recoverer.take() {
            if let Some(p) = &mut r.process {
                if p.close().is_err() {
                    r.process = None; // started again for the next image
                }
            }
            self.home.lock().unwrap_or_else(|e| e.into_inner()).push(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::AllocThread;

    /// A pool has the automatic arenas asked for (the paper's machine's by
    /// default), and with 0 libpmemobj's own count, fewer on this machine.
    #[test]
    fn a_pool_gets_the_arenas_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let arenas = |n: u32, name: &str| {
            let opts = PmdkOptions { arenas: n, ..PmdkOptions::default() };
            let pool = Pmdk::create(dir.path().join(name), MIN_POOL, &opts).unwrap();
            let have = automatic_arenas(pool.pop);
            pool.close().unwrap();
            have.expect("heap.narenas.automatic")
        };
        let own = arenas(0, "own");
        assert!((1..80).contains(&own), "libpmemobj's own count: {own}");
        assert_eq!(arenas(PmdkConfig::default().arenas, "paper"), 80);
    }

    /// A crash image recovered in this process (a test binary never serves
    /// as a recovery process): a pool left open with three objects, one
    /// freed, recovers with the two live, checks clean, allocates again
    /// beside them, and a second recovery of the same pool (same UUID) after
    /// the first is dropped works.
    #[test]
    fn a_pool_image_is_recovered_here_and_probed() {
        assert!(!recovery::available());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pool");
        let pool = Pmdk::create(&path, MIN_POOL, &PmdkOptions::default()).unwrap();
        let mut t = pool.thread(0);
        let objs: Vec<u64> = (0..3).map(|_| t.malloc(64).unwrap()).collect();
        t.free(objs[1]);
        let live: Vec<u64> = pool.live_blocks(&mut t).iter().map(|l| l.0).collect();
        assert_eq!(live, [objs[0], objs[2]], "the objects libpmemobj walks");
        drop(t);
        // The image: the pool's bytes while it is open (not closed cleanly).
        let image = dir.path().join("image");
        std::fs::copy(&path, &image).unwrap();
        pool.close().unwrap();
        let target = Pmdk::crash_target(&PmdkConfig::default()).expect("PMDK's own target");
        let heap = Heap::open_raw_copy(&image).unwrap();
        assert_eq!(target.publication_roots(&heap).unwrap().len(), 1, "the root object");
        for _ in 0..2 {
            let heap = Heap::open_raw_copy(&image).unwrap();
            let mut rec = target.recover(&heap).unwrap();
            assert_eq!(rec.check(), Ok(()));
            let live = rec.live_allocations();
            assert_eq!(live.iter().map(|l| l.0).collect::<Vec<_>>(), [objs[0], objs[2]]);
            let probe = rec.malloc(64).expect("a probe allocation");
            assert!(live.iter().all(|&(o, n)| probe + 64 <= o || o + n <= probe), "{probe:#x} overlaps {live:x?}");
        }
    }
}
