//! The PM heap: one file mapped shared, with a header page and offset pointers.
//!
//! A heap is a plain file — on tmpfs (`/dev/shm/x.heap`) to emulate PM in DRAM,
//! or on a DAX mount to use real PM — mapped with `MAP_SHARED`, so stores to the
//! mapping *are* stores to the file and survive the process. The first 4 KiB page
//! belongs to pmsim:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `89 50 4D 48 0D 0A 1A 0A` (`\x89PMH\r\n\x1a\n`) |
//! | 8 | 4 | layout version ([`LAYOUT_VERSION`]) |
//! | 12 | 4 | header size (4096) |
//! | 16 | 8 | heap size in bytes (= file length) |
//! | 24 | 4 | clean-shutdown flag: 1 after [`Heap::close`], 0 while in use |
//! | 28 | 4 | CRC-32 of bytes 0..28 (0 in heaps written before the checksum) |
//! | 32 | 32 | reserved (0) |
//! | 64 | 512 | root table: [`ROOT_SLOTS`] `u64` heap offsets, 0 = empty |
//! | 576 | 3520 | reserved (0) |
//!
//! The flag and the checksum share one 8-byte word, written by one store, so
//! the header is never seen with a flag its checksum does not cover. `open`
//! (and [`check_header`], which the crash explorer applies to the user's heap
//! image) refuses a header with any field out of range: a checksum that does
//! not match, a flag that is neither 0 nor 1, a root outside the heap, a
//! reserved byte that is not 0.
//!
//! Everything after the header page ([`Heap::user_range`]) belongs to the
//! allocator. Pointers stored in the heap are heap offsets ([`PmOff`]), never
//! addresses, because the next run may map the file elsewhere.

use crate::fault_in::FaultIn;
use crate::flush::FlushInsn;
use memmap2::{MmapMut, MmapOptions};
use std::fmt;
use std::fs::{File, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io;
use std::marker::PhantomData;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Size of the header page at offset 0; the allocator's space starts here.
pub const HEADER_SIZE: u64 = 4096;
/// The heap layout this pmsim writes and the newest it opens.
pub const LAYOUT_VERSION: u32 = 1;
/// Number of slots in the persistent root table.
pub const ROOT_SLOTS: usize = 64;
/// The smallest heap: the header page plus one page for the allocator.
pub const MIN_SIZE: u64 = 2 * HEADER_SIZE;

/// `\x89PMH\r\n\x1a\n`: the high byte and line endings catch text-mode mangling,
/// like the trace magic (`PMT`) it mirrors.
const MAGIC: [u8; 8] = [0x89, b'P', b'M', b'H', b'\r', b'\n', 0x1a, b'\n'];
const OFF_VERSION: u64 = 8;
const OFF_HEADER_SIZE: u64 = 12;
const OFF_SIZE: u64 = 16;
const OFF_CLEAN: u64 = 24;
const OFF_ROOTS: u64 = 64;
/// The bytes of the header that `open` must see before it maps the file.
const FIXED_LEN: usize = 32;
const CLEAN: u64 = 1;

/// A heap offset of a `T`: how the heap refers to its own contents.
///
/// Offsets, not addresses, because a heap file is mapped at a different address
/// in every run; 0 is null (it is the heap header, which no allocator hands
/// out). `PmOff<T>` is exactly a `u64` (`repr(transparent)`), so it can be a
/// field of a persistent structure. It carries the pointee type only to catch
/// mix-ups at compile time; the heap converts it to a pointer with
/// [`Heap::ptr`].
#[repr(transparent)]
pub struct PmOff<T> {
    off: u64,
    // `fn() -> T`: covariant, and Send/Sync whatever T is (it is only a number).
    _type: PhantomData<fn() -> T>,
}

impl<T> PmOff<T> {
    /// The null offset.
    pub const NULL: PmOff<T> = PmOff::new(0);

    /// An offset from its raw value.
    #[inline(always)]
    pub const fn new(off: u64) -> Self {
        PmOff { off, _type: PhantomData }
    }

    /// The raw heap offset.
    #[inline(always)]
    pub const fn get(self) -> u64 {
        self.off
    }

    #[inline(always)]
    pub const fn is_null(self) -> bool {
        self.off == 0
    }

    /// The same offset seen as another type (like a pointer cast).
    #[inline(always)]
    pub const fn cast<U>(self) -> PmOff<U> {
        PmOff::new(self.off)
    }

    /// The offset of the `n`-th `T` after this one (like `pointer::add`).
    #[inline(always)]
    pub const fn add(self, n: u64) -> Self {
        PmOff::new(self.off + n * std::mem::size_of::<T>() as u64)
    }

    /// The offset `bytes` further on, same type (for fields: `off.byte_add(offset_of!(S, f))`).
    #[inline(always)]
    pub const fn byte_add(self, bytes: u64) -> Self {
        PmOff::new(self.off + bytes)
    }
}

// Manual impls: derives would demand `T: Clone` etc., but an offset is a number
// whatever it points to.
impl<T> Clone for PmOff<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for PmOff<T> {}
impl<T> PartialEq for PmOff<T> {
    fn eq(&self, other: &Self) -> bool {
        self.off == other.off
    }
}
impl<T> Eq for PmOff<T> {}
impl<T> PartialOrd for PmOff<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for PmOff<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.off.cmp(&other.off)
    }
}
impl<T> Hash for PmOff<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.off.hash(state)
    }
}
impl<T> Default for PmOff<T> {
    fn default() -> Self {
        Self::NULL
    }
}
impl<T> fmt::Debug for PmOff<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PmOff({:#x})", self.off)
    }
}
impl<T> From<PmOff<T>> for u64 {
    fn from(p: PmOff<T>) -> u64 {
        p.off
    }
}

/// Plain data that may be copied to and from the heap byte for byte.
///
/// The persistence primitives store a `T` by copying its bytes (and, when
/// tracing values, recording them), and load one by reading whatever bytes the
/// heap holds — possibly written by an older run or torn by a crash.
///
/// # Safety
/// Implement only for types that have no padding bytes (their bytes are always
/// initialized), for which every bit pattern is a valid value, and that hold no
/// references or pointers (which would dangle in the next run; use [`PmOff`]).
/// `#[repr(C)]` structs of such fields without padding qualify.
pub unsafe trait Pod: Copy + 'static {}

macro_rules! pod {
    ($($t:ty),*) => { $(
        // SAFETY: primitive integers have no padding and no invalid bit patterns.
        unsafe impl Pod for $t {}
    )* };
}
pod!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize);
// SAFETY: an array of Pod has no padding between elements and is valid for any bits.
unsafe impl<T: Pod, const N: usize> Pod for [T; N] {}
// SAFETY: repr(transparent) over u64.
unsafe impl<T: 'static> Pod for PmOff<T> {}

/// The bytes of a `Pod` value (for recording store values).
#[inline(always)]
pub(crate) fn bytes_of<T: Pod>(v: &T) -> &[u8] {
    // SAFETY: `Pod` guarantees every byte of a T is initialized (no padding), and
    // the slice borrows `v`, so it covers live memory of exactly size_of::<T>().
    unsafe { std::slice::from_raw_parts(v as *const T as *const u8, std::mem::size_of::<T>()) }
}

/// What went wrong with a heap file; tools and tests match on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeapErrorKind {
    /// The operating system refused (missing file, permissions, no space, I/O).
    Io,
    /// `create` found a file there and was not asked to overwrite it.
    Exists,
    /// Another open heap (in this or another process) holds the file.
    Locked,
    /// Not a pmsim heap.
    BadMagic,
    /// Written by a newer pmsim.
    NewerVersion,
    /// The file is shorter than the header page.
    Truncated,
    /// The file length differs from the size in the header (truncated or grown).
    SizeMismatch,
    /// A header field holds an impossible value.
    Corrupt,
    /// `create` was asked for an impossible size.
    BadSize,
    /// `close` while persistence handles still use the mapping.
    InUse,
}

/// An error about a heap file. Displays as one line: `FILE: PROBLEM`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeapError {
    pub kind: HeapErrorKind,
    pub path: PathBuf,
    pub problem: String,
}

impl HeapError {
    fn new(kind: HeapErrorKind, path: &Path, problem: impl Into<String>) -> Self {
        HeapError { kind, path: path.to_path_buf(), problem: problem.into() }
    }

    fn io(path: &Path, what: &str, e: io::Error) -> Self {
        HeapError::new(HeapErrorKind::Io, path, format!("{what}: {e}"))
    }
}

impl fmt::Display for HeapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.problem)
    }
}

impl std::error::Error for HeapError {}

/// How to create or open a heap.
#[derive(Clone, Debug, Default)]
pub struct HeapOptions {
    /// `create`: replace an existing file. Off by default so that a typo in a
    /// path never destroys a heap someone wanted to keep.
    pub overwrite: bool,
    /// `create`: leave the file sparse without checking the space for it.
    /// By default a lack of space is a clear error at creation, because a
    /// sparse file on a full tmpfs or DAX mount turns a later store into
    /// SIGBUS (see [`Heap::create_with`] for how the space is made sure of).
    pub sparse: bool,
    /// Pre-fault the whole mapping (`MAP_POPULATE`), so that page faults do not
    /// disturb measurements of the first touches.
    pub populate: bool,
}

/// The mapping shared by a [`Heap`] and the persistence handles made from it.
///
/// It owns the file, whose `flock` marks the heap as in use until the last
/// handle is gone, and the mapping, which is unmapped only then. All accesses
/// go through `base` as raw pointers; no Rust reference to the mapped bytes is
/// ever created, because other threads (and the hardware) write them concurrently.
pub(crate) struct Mapping {
    pub(crate) base: *mut u8,
    pub(crate) size: u64,
    mmap: MmapMut,
    path: PathBuf,
    _file: File,
    kind: MapKind,
}

/// How a heap's file is mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MapKind {
    /// Shared: the heap itself.
    Shared,
    /// A private copy-on-write view of a pmsim heap ([`Heap::open_copy`]).
    Copy,
    /// A private copy-on-write view of any file ([`Heap::open_raw_copy`]).
    RawCopy,
}

impl Mapping {
    /// Writes the whole mapping back to its file (`msync`).
    pub(crate) fn sync(&self) -> Result<(), HeapError> {
        self.mmap.flush().map_err(|e| HeapError::io(&self.path, "msync", e))
    }
}

// SAFETY: `base` points into `mmap`, which lives as long as the Mapping and is
// never moved or remapped. The mapping is ordinary shared memory: any thread may
// access it; coordinating concurrent access to the same bytes is the job of the
// allocator built on top (as with any shared memory), and pmsim's own accesses
// to shared words (flag, roots) are atomic.
unsafe impl Send for Mapping {}
// SAFETY: see Send; `&Mapping` only hands out the raw base and the size.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// The word at `off` as an atomic (header fields, roots).
    /// Sets the clean-shutdown flag with the header's checksum (one store).
    fn set_clean(&self, clean: bool) {
        let mut head = [0u8; OFF_CLEAN as usize];
        head[..8].copy_from_slice(&MAGIC);
        for off in (8..OFF_CLEAN).step_by(8) {
            head[off as usize..off as usize + 8].copy_from_slice(&self.word(off).load(Ordering::Relaxed).to_le_bytes());
        }
        self.word(OFF_CLEAN).store(clean_word(&head, clean), Ordering::Release);
    }

    fn word(&self, off: u64) -> &AtomicU64 {
        assert!(off & 7 == 0 && off + 8 <= self.size);
        // SAFETY: in bounds and 8-byte aligned (the base is page aligned); the
        // mapping outlives the returned reference, which borrows self.
        unsafe { AtomicU64::from_ptr(self.base.add(off as usize) as *mut u64) }
    }

    /// Makes `[off, off + len)` durable with the best flush the CPU has.
    fn persist(&self, off: u64, len: u64) {
        let insn = FlushInsn::best();
        let mut line = off & !63;
        while line < off + len {
            // SAFETY: `best()` is supported by this CPU, and the line is inside
            // the mapping (off + len <= size, checked by the callers' offsets,
            // which are all in the header page).
            unsafe { insn.flush_line(self.base.add(line as usize)) };
            line += 64;
        }
        crate::arch::sfence();
    }

    /// Writes the header page back to the file, for heaps on block devices
    /// (where flushes reach only the page cache). A no-op cost on tmpfs and DAX.
    fn sync_header(&self) -> Result<(), HeapError> {
        self.mmap.flush_range(0, HEADER_SIZE as usize).map_err(|e| HeapError::io(&self.path, "msync", e))
    }
}

/// An open PM heap.
///
/// Dropping it without [`Heap::close`] leaves the clean-shutdown flag cleared,
/// exactly as a crash would: the next [`Heap::open`] reports
/// [`Heap::was_clean`] `== false` and the allocator runs its recovery.
pub struct Heap {
    map: Arc<Mapping>,
    was_clean: bool,
    /// Reported every access of the handles made from this heap (crash exploration).
    watch: Option<Arc<crate::watch::AccessWatch>>,
}

impl fmt::Debug for Heap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Heap")
            .field("path", &self.map.path)
            .field("base", &self.map.base)
            .field("size", &self.map.size)
            .field("was_clean", &self.was_clean)
            .finish()
    }
}

/// How long [`lock`] waits for a lock held only for a moment.
///
/// A handle closed by this process can stay locked briefly: a child that
/// another thread is spawning at that instant holds a copy of every descriptor
/// (and so the lock) from fork until its exec closes them. A heap that is
/// really open elsewhere stays locked past this grace, and is refused.
const LOCK_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// Takes the exclusive advisory lock that says "this heap is open".
fn lock(file: &File, path: &Path) -> Result<(), HeapError> {
    let start = std::time::Instant::now();
    loop {
        // SAFETY: flock on a file descriptor we own; no memory is passed.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::WouldBlock {
            return Err(HeapError::io(path, "cannot lock", e));
        }
        if start.elapsed() >= LOCK_GRACE {
            return Err(HeapError::new(
                HeapErrorKind::Locked,
                path,
                "heap is already open (locked by another handle or process)",
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn map(file: &File, path: &Path, size: u64, populate: bool) -> Result<MmapMut, HeapError> {
    let mut opts = MmapOptions::new();
    opts.len(size as usize);
    if populate {
        opts.populate();
    }
    // SAFETY: memmap2 maps are unsafe because another process may change the
    // file underneath. That is the nature of a shared PM heap; the flock keeps
    // other pmsim processes out, and every access goes through raw pointers
    // (never through `&[u8]` views that assume immutability).
    unsafe { opts.map_mut(file) }.map_err(|e| HeapError::io(path, "cannot map", e))
}

/// A private (copy-on-write) mapping of `file`: see [`Heap::open_copy`].
fn map_copy(file: &File, path: &Path, size: u64) -> Result<MmapMut, HeapError> {
    // SAFETY: as in `map`; writes go to private pages, never to the file.
    unsafe { MmapOptions::new().len(size as usize).map_copy(file) }.map_err(|e| HeapError::io(path, "cannot map", e))
}

fn read_u32(b: &[u8], at: u64) -> u32 {
    u32::from_le_bytes(b[at as usize..at as usize + 4].try_into().unwrap())
}

fn read_u64(b: &[u8], at: u64) -> u64 {
    u64::from_le_bytes(b[at as usize..at as usize + 8].try_into().unwrap())
}

/// The word at [`OFF_CLEAN`]: the flag, and the CRC-32 of the fixed fields
/// (`head`: bytes 0..24 as they are or will be) with the flag.
fn clean_word(head: &[u8], clean: bool) -> u64 {
    let flag = clean as u32;
    let mut h = crc32fast::Hasher::new();
    h.update(&head[..OFF_CLEAN as usize]);
    h.update(&flag.to_le_bytes());
    flag as u64 | (h.finalize() as u64) << 32
}

/// Whether `bytes` begin with a pmsim heap's magic (whatever else they hold).
pub fn has_magic(bytes: &[u8]) -> bool {
    bytes.len() >= MAGIC.len() && bytes[..MAGIC.len()] == MAGIC
}

/// Checks the fields of a heap header page beyond what `open` reads first
/// (magic, version, sizes): checksum, clean flag, roots, reserved bytes.
/// `page` is the first [`HEADER_SIZE`] bytes of a heap of `size` bytes;
/// the error is the problem, without the file's name.
pub fn check_header(page: &[u8], size: u64) -> Result<(), String> {
    if page.len() < HEADER_SIZE as usize {
        return Err(format!("truncated: {} bytes, shorter than the {HEADER_SIZE}-byte heap header", page.len()));
    }
    if page[..8] != MAGIC {
        return Err("not a pmsim heap (bad magic)".into());
    }
    let version = read_u32(page, OFF_VERSION);
    if version == 0 || version > LAYOUT_VERSION {
        return Err(format!("corrupt header: layout version {version} (this pmsim reads 1..={LAYOUT_VERSION})"));
    }
    let (hsize, hsz) = (read_u32(page, OFF_HEADER_SIZE) as u64, read_u64(page, OFF_SIZE));
    if hsize != HEADER_SIZE || hsz != size {
        return Err(format!("corrupt header: header size {hsize}, heap size {hsz} (expected {HEADER_SIZE}, {size})"));
    }
    let word = read_u64(page, OFF_CLEAN);
    let flag = word as u32;
    if flag > 1 {
        return Err(format!("corrupt header: clean-shutdown flag {flag:#x} (0 or 1)"));
    }
    let crc = (word >> 32) as u32;
    // 0: a heap written before the checksum; its other fields are still checked.
    if crc != 0 && word != clean_word(page, flag == 1) {
        return Err(format!("corrupt header: checksum {crc:#010x} does not match its fields"));
    }
    if let Some(i) = page[32..OFF_ROOTS as usize].iter().position(|&b| b != 0) {
        return Err(format!("corrupt header: reserved byte {} is {:#04x}, not 0", 32 + i, page[32 + i]));
    }
    for slot in 0..ROOT_SLOTS {
        let r = read_u64(page, OFF_ROOTS + 8 * slot as u64);
        if r != 0 && (r < HEADER_SIZE || r >= size) {
            return Err(format!("corrupt header: root {slot} is {r:#x}, outside the heap (0x1000..{size:#x})"));
        }
    }
    let end_roots = (OFF_ROOTS as usize) + 8 * ROOT_SLOTS;
    if let Some(i) = page[end_roots..HEADER_SIZE as usize].iter().position(|&b| b != 0) {
        return Err(format!("corrupt header: reserved byte {} is {:#04x}, not 0", end_roots + i, page[end_roots + i]));
    }
    Ok(())
}

/// Makes sure the file system holding `file` (just truncated to 0) has room
/// for `size` bytes (see [`Heap::create_with`]): on tmpfs by its free space,
/// elsewhere by reserving the blocks.
fn make_room(file: &File, path: &Path, size: u64) -> Result<(), HeapError> {
    let no_room = |e: io::Error| HeapError::io(path, &format!("cannot reserve {size} bytes"), e);
    // SAFETY: `statfs` is plain integers, for which all zeroes are valid.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs fills the struct we pass; the descriptor is ours.
    let statted = unsafe { libc::fstatfs(file.as_raw_fd(), &mut fs) } == 0;
    if statted && fs.f_type == libc::TMPFS_MAGIC {
        // A tmpfs mounted without a size limit reports no blocks at all.
        let free = (fs.f_bavail as u64).saturating_mul(fs.f_bsize as u64);
        if fs.f_blocks != 0 && free < size {
            return Err(HeapError::new(
                HeapErrorKind::Io,
                path,
                format!("cannot reserve {size} bytes: No space left on device ({free} bytes free on its file system)"),
            ));
        }
        return Ok(());
    }
    // SAFETY: posix_fallocate on a descriptor we own; no memory is passed.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, size as libc::off_t) };
    if rc != 0 && rc != libc::EOPNOTSUPP && rc != libc::EINVAL {
        return Err(no_room(io::Error::from_raw_os_error(rc)));
    }
    Ok(())
}

impl Heap {
    /// Creates a heap of `size` bytes at `path`; refuses if the file exists.
    pub fn create(path: impl AsRef<Path>, size: u64) -> Result<Heap, HeapError> {
        Heap::create_with(path, size, &HeapOptions::default())
    }

    /// Creates a heap with options (e.g. `overwrite`).
    ///
    /// `size` must be a multiple of 4096 and at least [`MIN_SIZE`]. The new heap
    /// is zero-filled past its header, and [`Heap::was_clean`] is true (there is
    /// nothing to recover).
    ///
    /// Unless `opts.sparse`, the space for the whole heap is made sure of
    /// here, so that a full file system is one error line now rather than a
    /// SIGBUS at some later store: on tmpfs (`/dev/shm`, PM emulated in
    /// DRAM) by checking that the file system has `size` bytes free and
    /// leaving the file sparse, elsewhere (a DAX mount) by reserving every
    /// block with `posix_fallocate`. Reserving on tmpfs would allocate a
    /// memory page for every 4 KiB of the heap and free them all again at
    /// deletion, while runs touch a sliver of their heap (a tiny-scale
    /// Larson run: 3.2 MiB of 242 MiB): that made most of the kernel time of
    /// `pmsim reproduce`. On a block file system reserving is cheap and keeps
    /// block allocation out of a measured run's page faults.
    pub fn create_with(path: impl AsRef<Path>, size: u64, opts: &HeapOptions) -> Result<Heap, HeapError> {
        let path = path.as_ref();
        if size < MIN_SIZE || size & (HEADER_SIZE - 1) != 0 || size > isize::MAX as u64 {
            return Err(HeapError::new(
                HeapErrorKind::BadSize,
                path,
                format!("heap size {size} must be a multiple of 4096 and at least {MIN_SIZE}"),
            ));
        }
        let mut oo = OpenOptions::new();
        oo.read(true).write(true);
        if opts.overwrite {
            oo.create(true);
        } else {
            oo.create_new(true);
        }
        let file = oo.open(path).map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                HeapError::new(HeapErrorKind::Exists, path, "already exists (ask to overwrite it to replace it)")
            } else {
                HeapError::io(path, "cannot create", e)
            }
        })?;
        let result = Heap::init_file(file, path, size, opts);
        if result.is_err() && !opts.overwrite {
            // We made this file; do not leave a half-made heap behind.
            let _ = std::fs::remove_file(path);
        }
        result
    }

    fn init_file(file: File, path: &Path, size: u64, opts: &HeapOptions) -> Result<Heap, HeapError> {
        lock(&file, path)?;
        // Drop whatever an overwritten file held, so the new heap starts zeroed.
        file.set_len(0).map_err(|e| HeapError::io(path, "cannot truncate", e))?;
        if !opts.sparse {
            make_room(&file, path, size)?;
        }
        file.set_len(size).map_err(|e| HeapError::io(path, "cannot size", e))?;
        let mut mmap = map(&file, path, size, opts.populate)?;
        let base = mmap.as_mut_ptr();
        let m = Mapping { base, size, mmap, path: path.to_path_buf(), _file: file, kind: MapKind::Shared };

        // Every field but the magic first, made durable, then the magic: a crash
        // in between leaves a file that `open` rejects as "not a pmsim heap"
        // rather than one that looks valid with a half-written header.
        m.word(OFF_VERSION).store(LAYOUT_VERSION as u64 | HEADER_SIZE << 32, Ordering::Relaxed);
        m.word(OFF_SIZE).store(size, Ordering::Relaxed);
        m.set_clean(false);
        m.persist(0, HEADER_SIZE);
        m.word(0).store(u64::from_le_bytes(MAGIC), Ordering::Relaxed);
        m.persist(0, 8);
        m.sync_header()?;
        Ok(Heap { map: Arc::new(m), was_clean: true, watch: None })
    }

    /// Opens an existing heap.
    pub fn open(path: impl AsRef<Path>) -> Result<Heap, HeapError> {
        Heap::open_with(path, &HeapOptions::default())
    }

    /// Opens an existing heap with options (only `populate` applies).
    ///
    /// Checks the header before mapping anything, and reports the first problem
    /// as one line naming the file. On success, remembers whether the previous
    /// user closed the heap cleanly ([`Heap::was_clean`]) and clears the flag —
    /// durably — so that a crash from now on is seen as one.
    pub fn open_with(path: impl AsRef<Path>, opts: &HeapOptions) -> Result<Heap, HeapError> {
        Heap::open_file(path.as_ref(), opts, false)
    }

    /// Opens a private copy-on-write view of the heap file at `path`: the
    /// heap reads the file's bytes, and every write (an allocator's recovery,
    /// the clean flag) stays in this process's memory, copying only the pages
    /// it touches. The file is neither changed nor locked. The crash explorer
    /// opens every crash image this way, so that recovering one costs what
    /// recovery touches rather than a copy of the whole heap.
    pub fn open_copy(path: impl AsRef<Path>) -> Result<Heap, HeapError> {
        Heap::open_file(path.as_ref(), &HeapOptions::default(), true)
    }

    /// A private copy-on-write view of any file, read as it is: no header is
    /// checked or written. For crash images in an allocator's own format
    /// (PMDK's pool), which the crash explorer handles as bytes; the header
    /// accessors ([`Heap::root`], [`Heap::was_clean`]) mean nothing on it.
    pub fn open_raw_copy(path: impl AsRef<Path>) -> Result<Heap, HeapError> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| HeapError::io(path, "cannot open", e))?;
        let size = file.metadata().map_err(|e| HeapError::io(path, "cannot stat", e))?.len();
        if size == 0 || size > isize::MAX as u64 {
            return Err(HeapError::new(HeapErrorKind::Corrupt, path, format!("cannot map a file of {size} bytes")));
        }
        let mut mmap = map_copy(&file, path, size)?;
        let base = mmap.as_mut_ptr();
        let m = Mapping { base, size, mmap, path: path.to_path_buf(), _file: file, kind: MapKind::RawCopy };
        Ok(Heap { map: Arc::new(m), was_clean: false, watch: None })
    }

    /// Undoes every write made to a private copy ([`Heap::open_copy`],
    /// [`Heap::open_raw_copy`]): each page it copied goes back to the file's
    /// bytes as they are now (the kernel drops the private pages), and a
    /// pmsim heap's header is read again as `open_copy` reads it. Costs what
    /// the copy touched, not the heap's size: the crash explorer recovers
    /// every image of a point on one copy this way instead of mapping the
    /// heap again. Fails while a persistence handle made from it is alive,
    /// and on a shared heap.
    pub fn revert_copy(&mut self) -> Result<(), HeapError> {
        let m = &self.map;
        if m.kind == MapKind::Shared || Arc::strong_count(m) > 1 {
            return Err(HeapError::new(
                HeapErrorKind::InUse,
                &m.path,
                "cannot revert: not a private copy, or a persistence handle still uses it",
            ));
        }
        // SAFETY: the whole private mapping of this heap, which nothing else
        // uses (no handle alive); dropping its pages is what is asked for.
        let rc = unsafe { libc::madvise(m.base as *mut libc::c_void, m.size as usize, libc::MADV_DONTNEED) };
        if rc != 0 {
            return Err(HeapError::io(&m.path, "cannot revert the copy", io::Error::last_os_error()));
        }
        self.watch = None;
        if m.kind == MapKind::Copy {
            self.was_clean = m.word(OFF_CLEAN).load(Ordering::Acquire) as u32 == CLEAN as u32;
            m.set_clean(false);
        }
        Ok(())
    }

    fn open_file(path: &Path, opts: &HeapOptions, private: bool) -> Result<Heap, HeapError> {
        use HeapErrorKind::*;
        let file = OpenOptions::new().read(true).write(!private).open(path).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                HeapError::new(Io, path, "no such heap file")
            } else {
                HeapError::io(path, "cannot open", e)
            }
        })?;
        if !private {
            lock(&file, path)?;
        }
        let len = file.metadata().map_err(|e| HeapError::io(path, "cannot stat", e))?.len();
        let mut fixed = [0u8; FIXED_LEN];
        let have = (len as usize).min(FIXED_LEN);
        file.read_exact_at(&mut fixed[..have], 0).map_err(|e| HeapError::io(path, "cannot read the header", e))?;
        if have < MAGIC.len() {
            return Err(HeapError::new(BadMagic, path, format!("not a pmsim heap (file is only {len} bytes)")));
        }
        if fixed[..8] != MAGIC {
            return Err(HeapError::new(BadMagic, path, "not a pmsim heap (bad magic)"));
        }
        if len < HEADER_SIZE {
            return Err(HeapError::new(
                Truncated,
                path,
                format!("truncated: file is {len} bytes, shorter than the {HEADER_SIZE}-byte heap header"),
            ));
        }
        let version = read_u32(&fixed, OFF_VERSION);
        if version > LAYOUT_VERSION {
            return Err(HeapError::new(
                NewerVersion,
                path,
                format!("heap layout version {version} is newer than this pmsim supports ({LAYOUT_VERSION})"),
            ));
        }
        if version == 0 {
            return Err(HeapError::new(Corrupt, path, "corrupt header: layout version 0"));
        }
        let header_size = read_u32(&fixed, OFF_HEADER_SIZE) as u64;
        if header_size != HEADER_SIZE {
            return Err(HeapError::new(
                Corrupt,
                path,
                format!("corrupt header: header size {header_size}, expected {HEADER_SIZE}"),
            ));
        }
        let size = read_u64(&fixed, OFF_SIZE);
        if size != len {
            return Err(HeapError::new(SizeMismatch, path, format!("file is {len} bytes but the header says {size}")));
        }
        if size < MIN_SIZE || size & (HEADER_SIZE - 1) != 0 || size > isize::MAX as u64 {
            return Err(HeapError::new(Corrupt, path, format!("corrupt header: impossible heap size {size}")));
        }
        let mut mmap = if private { map_copy(&file, path, size)? } else { map(&file, path, size, opts.populate)? };
        let base = mmap.as_mut_ptr();
        let kind = if private { MapKind::Copy } else { MapKind::Shared };
        let m = Mapping { base, size, mmap, path: path.to_path_buf(), _file: file, kind };
        // SAFETY: the mapping holds at least the header page (size ≥ MIN_SIZE).
        let page = unsafe { std::slice::from_raw_parts(m.base as *const u8, HEADER_SIZE as usize) };
        check_header(page, size).map_err(|e| HeapError::new(Corrupt, path, e))?;
        let was_clean = m.word(OFF_CLEAN).load(Ordering::Acquire) as u32 == CLEAN as u32;
        m.set_clean(false);
        if !private {
            m.persist(OFF_CLEAN, 8);
            m.sync_header()?;
        }
        Ok(Heap { map: Arc::new(m), was_clean, watch: None })
    }

    /// Closes the heap cleanly: writes everything back, then sets the
    /// clean-shutdown flag durably, so the next open skips recovery.
    ///
    /// Fails with [`HeapErrorKind::InUse`] while a [`crate::pm::Pm`] or
    /// [`crate::pm::PmThread`] made from this heap is alive: they could still
    /// write after the flag says the heap is quiescent. The heap then stays
    /// marked unclean.
    pub fn close(self) -> Result<(), HeapError> {
        let users = Arc::strong_count(&self.map) - 1;
        if users > 0 {
            return Err(HeapError::new(
                HeapErrorKind::InUse,
                &self.map.path,
                format!(
                    "cannot close: {users} persistence handle(s) still use the heap (drop every Pm and PmThread first)"
                ),
            ));
        }
        let m = &self.map;
        // Data first (it matters for heaps on block devices), then the flag.
        m.mmap.flush().map_err(|e| HeapError::io(&m.path, "msync", e))?;
        m.set_clean(true);
        m.persist(OFF_CLEAN, 8);
        m.sync_header()
    }

    /// Whether the previous user of the heap closed it cleanly (true for a new
    /// heap). When false, the allocator must run its recovery.
    pub fn was_clean(&self) -> bool {
        self.was_clean
    }

    pub fn path(&self) -> &Path {
        &self.map.path
    }

    /// Faults in the parts `f` names of the mapping ([`FaultIn::apply`]).
    pub fn prefault(&self, f: &FaultIn) -> Result<(), HeapError> {
        // SAFETY: the heap's own writable mapping of `size` bytes.
        unsafe { f.apply(self.map.base, self.map.size) }
            .map_err(|e| HeapError::io(&self.map.path, "cannot fault in", e))
    }

    /// The ranges of the heap that may hold data; the rest are holes of its
    /// file, zeros never written ([`crate::sparse::data_ranges`]). A private
    /// copy's writes are not in its file: all of it, for a copy.
    pub fn data_ranges(&self) -> Vec<Range<u64>> {
        match self.map.kind {
            MapKind::Shared => crate::sparse::data_ranges(&self.map._file, self.map.size),
            MapKind::Copy | MapKind::RawCopy => std::iter::once(0..self.map.size).collect(),
        }
    }

    /// Where the heap is mapped in this run (different in every run).
    pub fn base(&self) -> *mut u8 {
        self.map.base
    }

    /// Heap size in bytes, header included (= file length).
    pub fn size(&self) -> u64 {
        self.map.size
    }

    /// The offsets an allocator may manage: everything after the header page.
    pub fn user_range(&self) -> Range<u64> {
        HEADER_SIZE..self.map.size
    }

    /// Whether `[off, off + len)` lies inside the heap.
    pub fn contains(&self, off: u64, len: u64) -> bool {
        off.checked_add(len).is_some_and(|end| end <= self.map.size)
    }

    /// The address of `off` in this run's mapping. Bounds are checked in debug
    /// builds; dereferencing the pointer is the caller's (unsafe) business.
    #[inline]
    pub fn ptr<T>(&self, off: PmOff<T>) -> *mut T {
        debug_assert!(
            self.contains(off.get(), std::mem::size_of::<T>() as u64),
            "heap offset {:#x} (+{} bytes) outside the heap of {} bytes",
            off.get(),
            std::mem::size_of::<T>(),
            self.map.size
        );
        self.map.base.wrapping_add(off.get() as usize) as *mut T
    }

    /// The heap offset of an address inside the mapping. Bounds are checked in
    /// debug builds.
    #[inline]
    pub fn off<T>(&self, p: *const T) -> PmOff<T> {
        let off = (p as usize).wrapping_sub(self.map.base as usize) as u64;
        debug_assert!(
            self.contains(off, std::mem::size_of::<T>() as u64),
            "address {p:p} is outside the heap mapped at {:p}",
            self.map.base
        );
        PmOff::new(off)
    }

    /// The heap offset of root slot `slot`, for writing it with the persistence
    /// primitives (see [`crate::pm::PmThread::set_root`]).
    ///
    /// # Panics
    /// If `slot >= ROOT_SLOTS`.
    pub const fn root_offset(slot: usize) -> u64 {
        assert!(slot < ROOT_SLOTS, "root slot out of range");
        OFF_ROOTS + 8 * slot as u64
    }

    /// The value of root slot `slot` (a heap offset; 0 = empty).
    pub fn root(&self, slot: usize) -> u64 {
        self.map.word(Heap::root_offset(slot)).load(Ordering::Acquire)
    }

    /// Writes the whole mapping back to the file (`msync`). Needed only for
    /// heaps on block devices, where CPU flushes reach the page cache, not the
    /// disk; on tmpfs and DAX it costs a page-table walk.
    pub fn sync(&self) -> Result<(), HeapError> {
        self.map.sync()
    }

    /// Has every persistence handle made from this heap from now on report
    /// its loads and stores to `w` (see [`crate::watch`]).
    pub fn set_watch(&mut self, w: Arc<crate::watch::AccessWatch>) {
        self.watch = Some(w);
    }

    pub fn watch(&self) -> Option<&Arc<crate::watch::AccessWatch>> {
        self.watch.as_ref()
    }

    pub(crate) fn mapping(&self) -> &Arc<Mapping> {
        &self.map
    }
}
