//! Where a Makalu-style heap keeps what, after pmsim's heap header page
//! (whose root table is Makalu's persistent root space). The pieces are
//! Makalu's (`makalu_base_md.h`, `makalu_hdr.h`, `makalu_config.h`); pmsim
//! lays them out in one file instead of Makalu's separately mapped spaces.
//!
//! | where | what |
//! |---|---|
//! | `BASE` | base metadata page (below) |
//! | `BASE + 4 KiB` | log space: 64 undo-log entries of 64 B ([`crate::mech::undo`]) |
//! | `index` | the header index: one 8 B word per block (Makalu's bottom indices) |
//! | `hdrs` | header space: 128 B headers, bump-allocated, recycled through a free list |
//! | `data` | the blocks, 4 KiB each (`HBLKSIZE`) |
//!
//! The heap is the blocks below `MAK_heapsize`; it starts at 16 blocks
//! (`MINHINCR`) and grows as Makalu's does ([`super::blocks`]), the next
//! blocks of the file standing for the region manager's next mapping.
//!
//! The base metadata page keeps each word the code keeps apart on a line
//! of its own, and shares a line where the code's struct does:
//!
//! | line | words |
//! |---|---|
//! | 0 | magic, layout version, blocks, header slots |
//! | 1 | `MAK_hdr_free_ptr` (the header space's bump pointer) |
//! | 2 | `MAK_persistent_log_version`, `MAK_hdr_free_list` (one line in `_MAK_base_md`) |
//! | 3 | `MAK_persistent_state`, `MAK_last_heap_size` (one line in `_MAK_base_md`) |
//! | 4 | `MAK_heapsize` (in blocks), `MAK_large_free_bytes`, `MAK_prev_heap_addr`, `MAK_last_heap_addr` |
//! | 5–12 | `MAK_hblkfreelist[0..=60]`: heads of the block free lists |
//! | 13–20 | `MAK_free_bytes[0..=60]` |
//!
//! A header index word is 0 (no header: inside a free chunk), a header's
//! heap offset (the first block of a chunk, block or large object), or a
//! count `1..=4095` of blocks back to the first block of the large object
//! the block lies in (Makalu's forwarding counts).
//!
//! A header (`struct hblkhdr`) is two lines:
//!
//! | offset | field | line |
//! |---|---|---|
//! | 0 | `hb_sz`: object size of a small block, bytes of a free chunk or large object | core |
//! | 8 | `hb_descr` | core |
//! | 16 | `hb_block`: heap offset of the block | core |
//! | 24 | `hb_map` | core |
//! | 32 | `hb_flags`: `FREE_BLK` | core |
//! | 40 | `page_reclaim_state`: on the reclaim list, or floating | core |
//! | 64 | `hb_n_marks`: mark bits set | marks |
//! | 72 | `hb_marks`: one bit per object (4 words used of Makalu's 5) | marks |
//! | 112 | `hb_next`: block free-list or reclaim-list link | marks |
//! | 120 | `hb_prev` | marks |
//!
//! Makalu indexes mark bits by granule (`MARK_BIT_NO`), so a block of
//! 64 B objects uses every fourth bit; pmsim numbers them by object. Both
//! keep every bit of a block in its header's second line, which is what
//! decides the flushes.

use super::Mutation;
use super::NAME;
use crate::error::AllocError;
use crate::heap::HEADER_SIZE;
use crate::mech::undo::UndoLog;
use crate::pm::PmThread;

/// Block size (`HBLKSIZE`).
pub const BLOCK: u64 = 4096;
/// The allocation unit (`GRANULE_BYTES`): requests are rounded up to it.
pub const GRANULE: u64 = 16;
/// The largest small object (`MAXOBJBYTES`, half a block): larger ones take whole blocks.
pub const MEDIUM_MAX: u64 = BLOCK / 2;
/// Bytes of a block header (`sizeof(hdr)`).
pub const HDR: u64 = 128;
/// Undo-log entries: one block of 64 B entries (`MAX_LOG_SZ`).
pub const LOG_SLOTS: u64 = 64;
/// Block counts up to this have a free list each (`UNIQUE_THRESHOLD`).
pub const UNIQUE_THRESHOLD: u64 = 32;
/// Between the two thresholds, this many counts share a list (`FL_COMPRESSION`).
pub const FL_COMPRESSION: u64 = 8;
/// Chunks of at least this many blocks share the last list (`HUGE_THRESHOLD`).
pub const HUGE_THRESHOLD: u64 = 256;
/// The last block free list (`N_HBLK_FLS`).
pub const N_HBLK_FLS: u64 = (HUGE_THRESHOLD - UNIQUE_THRESHOLD) / FL_COMPRESSION + UNIQUE_THRESHOLD;
/// Largest forwarding count in the header index (`MAX_JUMP`).
pub const MAX_JUMP: u64 = BLOCK - 1;
/// The smallest expansion of the heap, in blocks, and its first size (`MINHINCR`).
pub const MINHINCR: u64 = 16;
/// The largest expansion but for one request's needs (`MAXHINCR`).
pub const MAXHINCR: u64 = 2048;
/// An expansion adds at least a third of the heap (`MAK_FREE_SPACE_DIVISOR`).
pub const FREE_SPACE_DIVISOR: u64 = 3;

/// The base metadata page.
pub const BASE: u64 = HEADER_SIZE;
const MAGIC: u64 = u64::from_le_bytes(*b"PMSIM-MK");
const VERSION: u64 = 2;
const M_MAGIC: u64 = BASE;
const M_VERSION: u64 = BASE + 8;
const M_NBLOCKS: u64 = BASE + 16;
const M_HDR_SLOTS: u64 = BASE + 24;
/// `MAK_hdr_free_ptr`.
pub const HDR_FREE_PTR: u64 = BASE + 64;
/// `MAK_persistent_log_version`.
pub const LOG_VERSION: u64 = BASE + 128;
/// `MAK_hdr_free_list`: the head of the free headers (rebuilt by every open).
pub const HDR_FREE_LIST: u64 = BASE + 136;
/// `MAK_persistent_state`.
pub const STATE: u64 = BASE + 192;
/// `MAK_last_heap_size`: bytes of an expansion in progress.
pub const LAST_HEAP_SIZE: u64 = BASE + 200;
/// `MAK_heapsize`, in blocks: the heap is blocks `0..` it.
pub const HEAP_BLOCKS: u64 = BASE + 256;
/// `MAK_large_free_bytes`.
pub const LARGE_FREE_BYTES: u64 = BASE + 264;
/// `MAK_prev_heap_addr`: where the last expansion began.
pub const PREV_HEAP_ADDR: u64 = BASE + 272;
/// `MAK_last_heap_addr`: the space of an expansion in progress (0: none).
pub const LAST_HEAP_ADDR: u64 = BASE + 280;
const M_HBLKFREELIST: u64 = BASE + 320;
const M_FREE_BYTES: u64 = M_HBLKFREELIST + 8 * 64;

/// Header fields.
pub const H_SZ: u64 = 0;
pub const H_DESCR: u64 = 8;
pub const H_BLOCK: u64 = 16;
pub const H_MAP: u64 = 24;
pub const H_FLAGS: u64 = 32;
pub const H_RECLAIM: u64 = 40;
pub const H_NMARKS: u64 = 64;
pub const H_MARKS: u64 = 72;
pub const H_NEXT: u64 = 112;
pub const H_PREV: u64 = 120;
/// Mark words used (one bit per object, at most 256 objects per block).
pub const MARK_WORDS: u64 = 4;

/// `hb_flags`: the chunk is free (`FREE_BLK`).
pub const FREE_BLK: u64 = 4;

/// `page_reclaim_state`.
pub mod reclaim {
    /// On its size's reclaim list (`IN_RECLAIMLIST`).
    pub const LISTED: u64 = 0;
    /// In use by free lists or full (`IN_FLOATING`).
    pub const FLOATING: u64 = 1;
}

/// `MAK_persistent_state`.
pub mod state {
    /// Consistent: no block operation since the last graceful shutdown (`PERSISTENT_STATE_NONE`).
    pub const NONE: u64 = 0;
    /// A block operation happened since (`PERSISTENT_STATE_INCONSISTENT`).
    pub const INCONSISTENT: u64 = 2;
}

/// The heap's fixed geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub log: u64,
    pub index: u64,
    pub hdrs: u64,
    pub data: u64,
    pub nblocks: u64,
    /// A removed flush or step for checkers to catch (see [`Mutation`]).
    pub mutation: Mutation,
}

impl Layout {
    /// The largest layout that fits a heap of `size` bytes (one header slot per block).
    pub fn plan(size: u64) -> Result<Layout, AllocError> {
        let log = BASE + 4096;
        let index = log + UndoLog::area_bytes(LOG_SLOTS);
        let fits = |n: u64| {
            let hdrs = index + (8 * n).next_multiple_of(4096);
            let data = hdrs + (HDR * n).next_multiple_of(4096);
            (data + n * BLOCK <= size).then_some((hdrs, data))
        };
        let mut n = size.saturating_sub(index) / (BLOCK + HDR + 8);
        while n > 0 && fits(n).is_none() {
            n -= 1;
        }
        if n < 4 {
            return Err(AllocError::too_small(NAME, format!("heap of {size} bytes holds fewer than 4 Makalu blocks")));
        }
        let (hdrs, data) = fits(n).expect("checked");
        Ok(Layout { log, index, hdrs, data, nblocks: n, mutation: Mutation::None })
    }

    /// Writes the identity of a new heap (the magic last, made durable last).
    pub fn format(&self, t: &mut PmThread) {
        t.store_u64(M_VERSION, VERSION);
        t.store_u64(M_NBLOCKS, self.nblocks);
        t.store_u64(M_HDR_SLOTS, self.nblocks);
        t.flush(M_VERSION);
        self.log().format(t);
        t.store_u64(M_MAGIC, MAGIC);
        t.persist(M_MAGIC, 8);
    }

    /// Reads the layout of an existing heap of `size` bytes.
    pub fn read(t: &PmThread, size: u64) -> Result<Layout, AllocError> {
        if t.load_u64(M_MAGIC) != MAGIC {
            return Err(AllocError::corrupt(NAME, "no Makalu heap here (bad magic in the base metadata)"));
        }
        let v = t.load_u64(M_VERSION);
        if v != VERSION {
            return Err(AllocError::corrupt(NAME, format!("Makalu layout version {v}, expected {VERSION}")));
        }
        let l = Layout::plan(size)?;
        let n = t.load_u64(M_NBLOCKS);
        if n != l.nblocks || t.load_u64(M_HDR_SLOTS) != l.nblocks {
            return Err(AllocError::corrupt(
                NAME,
                format!("{n} blocks recorded, but a heap of {size} bytes has {}", l.nblocks),
            ));
        }
        Ok(l)
    }

    /// Whether a heap holds a Makalu heap (its magic).
    pub fn present(t: &PmThread) -> bool {
        t.load_u64(M_MAGIC) == MAGIC
    }

    /// The same geometry with a mutation (for checkers to catch).
    pub fn with_mutation(self, mutation: Mutation) -> Layout {
        Layout { mutation, ..self }
    }

    pub fn log(&self) -> UndoLog {
        UndoLog::new(LOG_VERSION, self.log, LOG_SLOTS).with_entry_flush(self.mutation != Mutation::UndoEntryFlush)
    }

    /// The head of block free list `i` (`MAK_hblkfreelist[i]`).
    #[inline]
    pub fn fl_head(&self, i: u64) -> u64 {
        M_HBLKFREELIST + 8 * i
    }

    /// The free bytes of block free list `i` (`MAK_free_bytes[i]`).
    #[inline]
    pub fn fl_bytes(&self, i: u64) -> u64 {
        M_FREE_BYTES + 8 * i
    }

    /// The header index word of block `b`.
    #[inline]
    pub fn index_of(&self, b: u64) -> u64 {
        self.index + 8 * b
    }

    /// Header slot `i`.
    #[inline]
    pub fn hdr_slot(&self, i: u64) -> u64 {
        self.hdrs + i * HDR
    }

    /// The end of header space.
    pub fn hdrs_end(&self) -> u64 {
        self.hdrs + self.nblocks * HDR
    }

    /// Whether `h` is the offset of a header slot.
    #[inline]
    pub fn is_hdr(&self, h: u64) -> bool {
        h >= self.hdrs && h < self.hdrs_end() && (h - self.hdrs).is_multiple_of(HDR)
    }

    /// The heap offset of block `b`.
    #[inline]
    pub fn block_off(&self, b: u64) -> u64 {
        self.data + b * BLOCK
    }

    /// The block holding heap offset `off`, if it is in the data area.
    #[inline]
    pub fn block_of(&self, off: u64) -> Option<u64> {
        let b = off.checked_sub(self.data)? / BLOCK;
        (b < self.nblocks).then_some(b)
    }

    /// The header of the first block of whatever holds block `b` (a small
    /// block, a large object followed through its forwarding counts, or a
    /// free chunk's first block), if `b` starts or lies in one with a header.
    pub fn header_of(&self, t: &PmThread, b: u64) -> Option<u64> {
        let w = t.load_u64(self.index_of(b));
        match w {
            0 => None,
            n if n <= MAX_JUMP => {
                let first = b.checked_sub(n)?;
                let h = t.load_u64(self.index_of(first));
                self.is_hdr(h).then_some(h)
            }
            h => self.is_hdr(h).then_some(h),
        }
    }
}

/// The block free list of a chunk of `blocks` blocks (`MAK_hblk_fl_from_blocks`).
#[inline]
pub fn fl_index(blocks: u64) -> u64 {
    if blocks <= UNIQUE_THRESHOLD {
        blocks
    } else if blocks >= HUGE_THRESHOLD {
        N_HBLK_FLS
    } else {
        (blocks - UNIQUE_THRESHOLD) / FL_COMPRESSION + UNIQUE_THRESHOLD
    }
}

/// The bits of mark word `wi` (64 objects each) that belong to one of a
/// block's `n` objects.
#[inline]
pub fn valid_marks(n: u64, wi: u64) -> u64 {
    if (wi + 1) * 64 <= n {
        u64::MAX
    } else if wi * 64 < n {
        (1u64 << (n % 64)) - 1
    } else {
        0
    }
}

/// Objects of `sz` bytes a block holds (`HBLK_OBJS`).
#[inline]
pub fn objs_per_block(sz: u64) -> u64 {
    BLOCK / sz
}

/// Blocks a chunk or object of `sz` bytes covers (`OBJ_SZ_TO_BLOCKS`).
#[inline]
pub fn blocks_of(sz: u64) -> u64 {
    sz.div_ceil(BLOCK)
}

/// A block of `sz`-byte objects goes on its reclaim list once at most this
/// many are in use (`BLOCK_NEARLY_FULL_THRESHOLD`: 7/8 of its objects).
#[inline]
pub fn nearly_full(sz: u64) -> u64 {
    7 * objs_per_block(sz) / 8
}
