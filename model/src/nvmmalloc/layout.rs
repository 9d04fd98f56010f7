//! Where an nvm_malloc-style heap keeps what (`types.h`,
//! `nvm_malloc.c`, `chunk.c`): nvm_malloc's two files — the meta page and
//! the backing file of 4 MiB chunks — laid out in one pmsim heap.
//!
//! | where | what |
//! |---|---|
//! | `META` | the meta page: the version word, then the activation log's 127 slots of 8 B (8 to a line; slot `i` at byte `8 + 8i`) |
//! | `META + 1024` | pmsim's identity line: magic, layout version, chunk capacity, chunks in use (the backing file's length) |
//! | `chunks` | chunk `c` at `chunks + c · 4 MiB` |
//!
//! A chunk used by an arena starts with a 4 KiB chunk header (state,
//! signature, the object table nvm_malloc keeps for named allocations)
//! followed by 1,023 blocks of 4 KiB. A run of small objects is one block:
//! a 64 B run header, then `(4096 − 64) / size` objects (63 of 64 B). A
//! large object is a page run: its 64 B block header, then the object. A
//! huge object takes whole chunks behind a 64 B huge header.
//!
//! Every header is one line (`nvm_run_header_t`, `nvm_block_header_t`,
//! `nvm_huge_header_t`; pmsim packs the fields in 8 B words):
//!
//! | offset | run header | block header | huge header |
//! |---|---|---|---|
//! | 0 | state | state | state |
//! | 8 | object size | pages | chunks |
//! | 16–40 | `on[2]`: link slot, value | `on[2]` | `on[2]` |
//! | 48 | bitmap (63 objects) | arena | — |
//! | 56 | bit index (16 bits), arena (16), version (32) | — | — |

use super::NAME;
use crate::error::AllocError;
use crate::heap::HEADER_SIZE;
use crate::pm::PmThread;

/// Block (page) size (`BLOCK_SIZE`).
pub const BLOCK: u64 = 4096;
/// Chunk size (`CHUNK_SIZE`).
pub const CHUNK: u64 = 4 << 20;
/// Blocks per chunk.
pub const CHUNK_BLOCKS: u64 = CHUNK / BLOCK;
/// Bytes of every run, block and huge header.
pub const HDR: u64 = 64;
/// The smallest object: a cache line (`SCLASS_SMALL_MIN`).
pub const SMALL_MIN: u64 = 64;
/// The largest object a run holds (`SCLASS_SMALL_MAX`: half a block less a header).
pub const SMALL_MAX: u64 = BLOCK / 2 - HDR;
/// The largest object a page run holds (`SCLASS_LARGE_MAX`: half a chunk less a header).
pub const LARGE_MAX: u64 = CHUNK / 2 - HDR;
/// Small size classes: 64, 128, …, 1984 (`NUM_ARENA_BINS`).
pub const BINS: usize = 31;
/// Slots of the activation log (`max_log_entries`).
pub const LOG_SLOTS: u64 = 127;

/// The meta page.
pub const META: u64 = HEADER_SIZE;
/// The version word (`*(uint64_t*) meta_info`): bumped by every recovery.
pub const VERSION_WORD: u64 = META;
const MAGIC: u64 = u64::from_le_bytes(*b"PMSIM-NV");
const LAYOUT_VERSION: u64 = 1;
const M_MAGIC: u64 = META + 1024;
const M_LAYOUT: u64 = META + 1032;
const M_CAPACITY: u64 = META + 1040;
/// Chunks in use (the backing file's length in chunks).
pub const CHUNKS_USED: u64 = META + 1048;

/// Header fields.
pub const H_STATE: u64 = 0;
pub const H_SIZE: u64 = 8;
pub const H_ON_PTR: u64 = 16;
pub const H_ON_VALUE: u64 = 24;
pub const H_ON: u64 = 16;
pub const R_BITMAP: u64 = 48;
pub const R_MISC: u64 = 56;
pub const B_ARENA: u64 = 48;
/// The chunk header's signature word.
pub const C_SIGNATURE: u64 = 8;
const SIGNATURE: u64 = u64::from_le_bytes(*b"NVM-CHNK");

/// States (low 4 bits of a state word) and usages (the next 4).
pub mod state {
    pub const INITIALIZING: u64 = 1;
    pub const INITIALIZED: u64 = 2;
    pub const FREEING: u64 = 3;
    pub const ACTIVATING: u64 = 4;
    pub const PREACTIVATE: u64 = 5;
    pub const PREFREE: u64 = 6;
    pub const MASK: u64 = 15;
}
pub mod usage {
    pub const FREE: u64 = 1 << 4;
    pub const ARENA: u64 = 2 << 4;
    pub const BLOCK: u64 = 3 << 4;
    pub const RUN: u64 = 4 << 4;
    pub const HUGE: u64 = 5 << 4;
    pub const MASK: u64 = 15 << 4;
}

/// The run header's packed word: bit index (16 bits, `0xffff` for −1),
/// arena (16), version (32).
#[inline]
pub fn misc(bit_idx: Option<u64>, arena: u64, version: u64) -> u64 {
    bit_idx.unwrap_or(0xffff) | arena << 16 | version << 32
}

/// The bit index of a run header's packed word.
#[inline]
pub fn misc_bit(w: u64) -> Option<u64> {
    let b = w & 0xffff;
    (b != 0xffff).then_some(b)
}

/// The arena of a run header's packed word.
#[inline]
pub fn misc_arena(w: u64) -> u64 {
    w >> 16 & 0xffff
}

/// The version of a run header's packed word.
#[inline]
pub fn misc_version(w: u64) -> u64 {
    w >> 32
}

/// Objects of `size` bytes a run holds.
#[inline]
pub fn run_objects(size: u64) -> u64 {
    (BLOCK - HDR) / size
}

/// The heap's fixed geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub chunks: u64,
    pub capacity: u64,
}

impl Layout {
    /// The most chunks a heap of `size` bytes holds.
    pub fn plan(size: u64) -> Result<Layout, AllocError> {
        let chunks = (META + BLOCK).next_multiple_of(BLOCK);
        let capacity = size.saturating_sub(chunks) / CHUNK;
        if capacity < 1 {
            return Err(AllocError::too_small(NAME, format!("heap of {size} bytes holds no 4 MiB chunk")));
        }
        Ok(Layout { chunks, capacity })
    }

    /// Writes the meta page of a new heap (the magic last, made durable last).
    pub fn format(&self, t: &mut PmThread) {
        t.store_bytes(META, &[0; 1024]);
        t.store_u64(VERSION_WORD, 1);
        t.flush_range(META, 1024);
        t.store_u64(M_LAYOUT, LAYOUT_VERSION);
        t.store_u64(M_CAPACITY, self.capacity);
        t.store_u64(CHUNKS_USED, 0);
        t.persist(M_LAYOUT, 24);
        t.store_u64(M_MAGIC, MAGIC);
        t.persist(M_MAGIC, 8);
    }

    /// Reads the layout of an existing heap of `size` bytes.
    pub fn read(t: &PmThread, size: u64) -> Result<Layout, AllocError> {
        if t.load_u64(M_MAGIC) != MAGIC {
            return Err(AllocError::corrupt(NAME, "no nvm_malloc heap here (bad magic in the meta page)"));
        }
        let v = t.load_u64(M_LAYOUT);
        if v != LAYOUT_VERSION {
            return Err(AllocError::corrupt(NAME, format!("layout version {v}, expected {LAYOUT_VERSION}")));
        }
        let l = Layout::plan(size)?;
        let (cap, used) = (t.load_u64(M_CAPACITY), t.load_u64(CHUNKS_USED));
        if cap != l.capacity || used > cap {
            return Err(AllocError::corrupt(
                NAME,
                format!("{used} of {cap} chunks recorded, but a heap of {size} bytes has {}", l.capacity),
            ));
        }
        Ok(l)
    }

    /// Whether a heap holds an nvm_malloc heap (its magic).
    pub fn present(t: &PmThread) -> bool {
        t.load_u64(M_MAGIC) == MAGIC
    }

    /// Activation-log slot `i`.
    #[inline]
    pub fn slot(&self, i: u64) -> u64 {
        META + 8 + 8 * i
    }

    /// The heap offset of chunk `c`.
    #[inline]
    pub fn chunk_off(&self, c: u64) -> u64 {
        self.chunks + c * CHUNK
    }

    /// The chunk holding heap offset `off`.
    #[inline]
    pub fn chunk_of(&self, off: u64) -> Option<u64> {
        let c = off.checked_sub(self.chunks)? / CHUNK;
        (c < self.capacity).then_some(c)
    }

    /// The signature word a chunk header carries.
    pub fn signature() -> u64 {
        SIGNATURE
    }
}
