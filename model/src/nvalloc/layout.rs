//! The persistent layout of an NVAlloc heap: where the superblock, the WAL,
//! the bookkeeping log and the chunks are, and the superblock's fields.
//!
//! ```text
//! 0x0000  heap header page (pmsim's: magic, clean flag, root table)
//! 0x1000  superblock (one page)
//!           line 0   magic "NVALLOC1", layout version, heap size, WAL offset
//!                    and bytes, log offset and bytes, chunk base
//!           line 1   growth pointer: the end of the chunks carved so far
//!           2..9     arena state flags, 64 × u64 (running / shutdown / recovery)
//!           +640     length of the configuration JSON
//!           +1024    the configuration the heap was created with (JSON)
//! 0x2000  WAL: max_threads areas of wal_lines lines
//!         bookkeeping log (when enabled): max(256 KiB, heap / 256) by default
//!         chunks of 4 MiB from the next 64 KiB boundary to the end of the heap
//! ```
//!
//! Chunks are carved in address order by advancing the growth pointer (the
//! paper's `mmap` of a new 4 MB extent); slabs and large extents are cut from
//! them. Every offset the allocator needs later is stored in the superblock,
//! so changing a default never reinterprets an existing heap.

use super::config::NvAllocConfig;
pub use super::config::MAX_ARENAS;
use super::NAME;
use crate::error::AllocError;
use crate::heap::HEADER_SIZE;
use crate::mech::record::PAGE;
use crate::mech::wal::Wal;
use crate::pm::PmThread;

/// The superblock's offset.
pub const SUPERBLOCK: u64 = HEADER_SIZE;
const SUPERBLOCK_BYTES: u64 = 4096;
/// The unit carved from the heap for slabs and large extents.
pub const CHUNK: u64 = 4 << 20;
/// Size of a slab: its header and blocks.
pub const SLAB: u64 = 64 << 10;
/// The extent a slab is cut from: the slab and one page of padding after it,
/// page aligned. Why the page: the DIMMs interleave every 4 KiB, so slabs
/// packed at a 64 KiB stride would put every slab header, the hottest lines
/// of the heap (bitmaps flushed on every malloc and free), on one DIMM, and
/// with many arenas their lines outgrow that DIMM's XPBuffer while the other
/// DIMMs idle. At a 68 KiB stride (17 pages) consecutive headers fall on
/// consecutive DIMMs of any interleave set. NVAlloc's public code spreads
/// them too, differently: a slab takes an 80 KiB extent and its header sits
/// 0 or 4 KiB into it, at random; pmsim pays one page per slab for the same
/// spread, not four.
pub const SLAB_EXTENT: u64 = SLAB + PAGE;
const MAGIC: u64 = u64::from_le_bytes(*b"NVALLOC1");
/// The layout this code writes and reads.
pub const LAYOUT_VERSION: u32 = 2;

const OFF_VERSION: u64 = 8;
const OFF_SIZE: u64 = 16;
const OFF_WAL: u64 = 24;
const OFF_WAL_BYTES: u64 = 32;
const OFF_LOG: u64 = 40;
const OFF_LOG_BYTES: u64 = 48;
const OFF_CHUNKS: u64 = 56;
const OFF_TOP: u64 = 64;
const OFF_FLAGS: u64 = 128;
const OFF_CONFIG_LEN: u64 = 640;
const OFF_CONFIG: u64 = 1024;
const CONFIG_MAX: u64 = SUPERBLOCK_BYTES - OFF_CONFIG;

/// An arena's persistent state (NVAlloc §4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum ArenaState {
    /// Never used.
    Unused = 0,
    /// Open: seeing this after a restart means a crash.
    Running = 1,
    /// Closed cleanly by [`super::NvAlloc::close`].
    Shutdown = 2,
    /// Recovery in progress: seeing this means a crash during recovery.
    Recovery = 3,
}

/// Where everything is, for one heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub heap_size: u64,
    pub wal_off: u64,
    pub wal_bytes: u64,
    /// 0 when the heap keeps in-place extent headers instead.
    pub log_off: u64,
    pub log_bytes: u64,
    pub chunk_base: u64,
    pub nchunks: u64,
}

impl Layout {
    /// Plans the layout of a new heap of `heap_size` bytes.
    pub fn plan(heap_size: u64, cfg: &NvAllocConfig) -> Result<Layout, AllocError> {
        let wal_off = SUPERBLOCK + SUPERBLOCK_BYTES;
        let wal_bytes = Wal::area_bytes(cfg.wal_area_lines(), cfg.max_threads).next_multiple_of(4096);
        let log_off = wal_off + wal_bytes;
        let log_bytes = match (cfg.bookkeeping_log, cfg.log_bytes) {
            (false, _) => 0,
            (true, 0) => (heap_size / 256).max(256 << 10).next_multiple_of(4096),
            (true, n) => n.next_multiple_of(4096),
        };
        let chunk_base = (log_off + log_bytes).next_multiple_of(SLAB);
        let nchunks = heap_size.saturating_sub(chunk_base) / CHUNK;
        if nchunks == 0 {
            return Err(AllocError::too_small(NAME, format!(
                "a heap of {heap_size} bytes is too small for NVAlloc with this configuration (needs at least {} bytes)",
                chunk_base + CHUNK
            )));
        }
        Ok(Layout {
            heap_size,
            wal_off,
            wal_bytes,
            log_off: if log_bytes > 0 { log_off } else { 0 },
            log_bytes,
            chunk_base,
            nchunks,
        })
    }

    /// The end of the heap's chunk area.
    pub fn chunk_end(&self) -> u64 {
        self.chunk_base + self.nchunks * CHUNK
    }

    /// The superblock word holding the growth pointer.
    pub const fn top_off() -> u64 {
        SUPERBLOCK + OFF_TOP
    }

    fn flag_off(arena: usize) -> u64 {
        assert!(arena < MAX_ARENAS);
        SUPERBLOCK + OFF_FLAGS + 8 * arena as u64
    }

    /// Writes a new superblock durably, the magic last (a crash before it
    /// leaves a heap that `open` refuses rather than half-initialized).
    pub fn write(&self, t: &mut PmThread, cfg: &NvAllocConfig) -> Result<(), AllocError> {
        let json = serde_json::to_vec(cfg).expect("config serializes");
        if json.len() as u64 > CONFIG_MAX {
            return Err(AllocError::config(
                NAME,
                format!("configuration JSON of {} bytes exceeds {CONFIG_MAX}", json.len()),
            ));
        }
        let s = SUPERBLOCK;
        t.store_u64(s + OFF_VERSION, LAYOUT_VERSION as u64);
        t.store_u64(s + OFF_SIZE, self.heap_size);
        t.store_u64(s + OFF_WAL, self.wal_off);
        t.store_u64(s + OFF_WAL_BYTES, self.wal_bytes);
        t.store_u64(s + OFF_LOG, self.log_off);
        t.store_u64(s + OFF_LOG_BYTES, self.log_bytes);
        t.store_u64(s + OFF_CHUNKS, self.chunk_base);
        t.store_u64(s + OFF_TOP, self.chunk_base);
        t.store_u64(s + OFF_CONFIG_LEN, json.len() as u64);
        t.store_bytes(s + OFF_CONFIG, &json);
        t.persist(s, SUPERBLOCK_BYTES);
        t.store_u64(s, MAGIC);
        t.persist(s, 8);
        Ok(())
    }

    /// Reads and checks the superblock of an existing heap; returns the layout
    /// and the configuration the heap was created with.
    pub fn read(t: &PmThread) -> Result<(Layout, NvAllocConfig), AllocError> {
        let s = SUPERBLOCK;
        let corrupt = |m: String| AllocError::corrupt(NAME, format!("superblock: {m}"));
        if t.heap_size() < SUPERBLOCK + SUPERBLOCK_BYTES || t.load_u64(s) != MAGIC {
            return Err(AllocError::corrupt(NAME, "not an NVAlloc heap (no NVAlloc superblock)"));
        }
        let version = t.load_u64(s + OFF_VERSION);
        if version != LAYOUT_VERSION as u64 {
            return Err(corrupt(format!("layout version {version}, this pmsim reads {LAYOUT_VERSION}")));
        }
        let l = Layout {
            heap_size: t.load_u64(s + OFF_SIZE),
            wal_off: t.load_u64(s + OFF_WAL),
            wal_bytes: t.load_u64(s + OFF_WAL_BYTES),
            log_off: t.load_u64(s + OFF_LOG),
            log_bytes: t.load_u64(s + OFF_LOG_BYTES),
            chunk_base: t.load_u64(s + OFF_CHUNKS),
            nchunks: 0,
        };
        if l.heap_size != t.heap_size() {
            return Err(corrupt(format!("heap size {} but the file has {}", l.heap_size, t.heap_size())));
        }
        if l.chunk_base & (SLAB - 1) != 0 || l.chunk_base > l.heap_size || l.wal_off + l.wal_bytes > l.chunk_base {
            return Err(corrupt(format!("impossible areas {l:?}")));
        }
        let l = Layout { nchunks: (l.heap_size - l.chunk_base) / CHUNK, ..l };
        let len = t.load_u64(s + OFF_CONFIG_LEN);
        if len > CONFIG_MAX {
            return Err(corrupt(format!("configuration length {len}")));
        }
        let mut json = vec![0u8; len as usize];
        t.load_bytes(s + OFF_CONFIG, &mut json);
        let cfg: NvAllocConfig =
            serde_json::from_slice(&json).map_err(|e| corrupt(format!("stored configuration unreadable: {e}")))?;
        let top = l.top(t);
        if top < l.chunk_base || top > l.chunk_end() || (top - l.chunk_base) & (CHUNK - 1) != 0 {
            return Err(corrupt(format!("growth pointer {top:#x} outside the chunk area")));
        }
        Ok((l, cfg))
    }

    /// The growth pointer: chunks below it have been carved.
    pub fn top(&self, t: &PmThread) -> u64 {
        t.load_u64(Layout::top_off())
    }

    pub fn arena_state(&self, t: &PmThread, arena: usize) -> u64 {
        t.load_u64(Layout::flag_off(arena))
    }

    /// Sets every arena flag in `0..arenas` to `state` durably (one fence),
    /// and clears the flags of arenas beyond (a smaller arena count now).
    pub fn set_arena_states(&self, t: &mut PmThread, arenas: usize, state: ArenaState) {
        for a in 0..MAX_ARENAS {
            let v = if a < arenas { state as u64 } else { ArenaState::Unused as u64 };
            t.store_u64(Layout::flag_off(a), v);
        }
        t.persist(SUPERBLOCK + OFF_FLAGS, 8 * MAX_ARENAS as u64);
    }

    /// Whether any arena flag says the last run did not shut down cleanly.
    pub fn any_arena_unclean(&self, t: &PmThread) -> bool {
        (0..MAX_ARENAS).any(|a| {
            let s = self.arena_state(t, a);
            s == ArenaState::Running as u64 || s == ArenaState::Recovery as u64
        })
    }
}
