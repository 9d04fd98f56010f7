//! Where a Makalu-style heap keeps what (Makalu §5, Fig. 4), after pmsim's
//! heap header page (whose root table is Makalu's persistent root space):
//!
//! | where | what |
//! |---|---|
//! | `BASE` | base metadata page: magic, layout version, block count; the state word, the log version (`md_log_version`) and the bump pointer (`rgn_curr`, in blocks) on lines of their own |
//! | `BASE + 4 KiB` | log space: the undo log's entries ([`crate::mech::undo`]) |
//! | `BASE + 8 KiB` | header space: one 64 B header per block |
//! | `data` | the blocks, 4 KiB each |
//!
//! Header slot *i* belongs to block *i*, so the header map of Makalu §5.2 is
//! the identity: looking a header up is an index, and the header free list
//! of §5.1 is not needed (the headers of blocks swallowed by a chunk or a
//! large object are simply unused). A header is one line:
//!
//! | offset | field | kind |
//! |---|---|---|
//! | 0 | `hb_block`: heap offset of the block or chunk | core |
//! | 8 | `hb_sz`: object size of a small block, bytes of a chunk or large object | core |
//! | 16 | `hb_flag`: unused / free chunk / small block / large object | core |
//! | 24 | `hb_n_marks`: mark bits set | auxiliary |
//! | 32 | `hb_marks`: 256 mark bits, one per 16 B granule | auxiliary |
//!
//! Core fields change only inside an undo-logged section; the mark bits and
//! their count are auxiliary: written lazily, rebuilt by the GC after a crash.

use super::NAME;
use crate::error::AllocError;
use crate::heap::HEADER_SIZE;
use crate::mech::mutation::Mutation;
use crate::mech::undo::UndoLog;
use crate::pm::PmThread;

/// Block size (Makalu's `HBLKSIZE`).
pub const BLOCK: u64 = 4096;
/// The allocation unit: requests are rounded up to a multiple of it.
pub const GRANULE: u64 = 16;
/// Objects above half a block are large: whole blocks from the chunk lists.
pub const MEDIUM_MAX: u64 = BLOCK / 2;
/// Bytes of a block header.
pub const HDR: u64 = 64;
/// Undo-log entries: the longest section (a block freed between two free
/// chunks, or a chunk split) logs 9 stores.
pub const LOG_SLOTS: u64 = 32;

/// The base metadata page.
pub const BASE: u64 = HEADER_SIZE;
const MAGIC: u64 = u64::from_le_bytes(*b"PMSIM-MK");
const VERSION: u64 = 1;
const M_MAGIC: u64 = 0;
const M_VERSION: u64 = 8;
const M_NBLOCKS: u64 = 16;
const M_STATE: u64 = 64;
const M_LOG_VERSION: u64 = 128;
const M_RGN_CURR: u64 = 192;

/// Header fields.
pub const H_BLOCK: u64 = 0;
pub const H_SZ: u64 = 8;
pub const H_FLAG: u64 = 16;
pub const H_NMARKS: u64 = 24;
pub const H_MARKS: u64 = 32;

/// `hb_flag` values.
pub mod flag {
    /// Inside a chunk or large object (no block starts here), or never used.
    pub const UNUSED: u64 = 0;
    /// First block of a free chunk; `hb_sz` = its bytes.
    pub const FREE: u64 = 1;
    /// A block of small or medium objects of `hb_sz` bytes.
    pub const SMALL: u64 = 2;
    /// First block of a large object of `hb_sz` bytes (whole blocks).
    pub const LARGE: u64 = 3;
}

/// The state word: whether the last run shut down gracefully.
pub mod state {
    pub const RUNNING: u64 = 1;
    pub const SHUTDOWN: u64 = 2;
}

/// The heap's fixed geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub log: u64,
    pub hdrs: u64,
    pub data: u64,
    pub nblocks: u64,
    /// A removed flush or step for checkers to catch (see [`Mutation`]).
    pub mutation: Mutation,
}

impl Layout {
    /// The largest layout that fits a heap of `size` bytes.
    pub fn plan(size: u64) -> Result<Layout, AllocError> {
        let log = BASE + 4096;
        let hdrs = log + 4096;
        let mut n = size.saturating_sub(hdrs) / (BLOCK + HDR);
        while n > 0 && hdrs + (n * HDR).next_multiple_of(4096) + n * BLOCK > size {
            n -= 1;
        }
        if n < 4 {
            return Err(AllocError::too_small(NAME, format!("heap of {size} bytes holds fewer than 4 Makalu blocks")));
        }
        let data = hdrs + (n * HDR).next_multiple_of(4096);
        Ok(Layout { log, hdrs, data, nblocks: n, mutation: Mutation::None })
    }

    /// Writes the base metadata of a new heap (the magic last, made durable last).
    pub fn format(&self, t: &mut PmThread) {
        t.store_u64(BASE + M_VERSION, VERSION);
        t.store_u64(BASE + M_NBLOCKS, self.nblocks);
        t.store_u64(BASE + M_STATE, state::RUNNING);
        t.store_u64(BASE + M_RGN_CURR, 0);
        t.flush_range(BASE, 256);
        self.log().format(t);
        t.store_u64(BASE + M_MAGIC, MAGIC);
        t.persist(BASE, 8);
    }

    /// Reads the layout of an existing heap of `size` bytes.
    pub fn read(t: &PmThread, size: u64) -> Result<Layout, AllocError> {
        if t.load_u64(BASE + M_MAGIC) != MAGIC {
            return Err(AllocError::corrupt(NAME, "no Makalu heap here (bad magic in the base metadata)"));
        }
        let v = t.load_u64(BASE + M_VERSION);
        if v != VERSION {
            return Err(AllocError::corrupt(NAME, format!("Makalu layout version {v}, expected {VERSION}")));
        }
        let l = Layout::plan(size)?;
        let n = t.load_u64(BASE + M_NBLOCKS);
        if n != l.nblocks {
            return Err(AllocError::corrupt(
                NAME,
                format!("{n} blocks recorded, but a heap of {size} bytes has {}", l.nblocks),
            ));
        }
        Ok(l)
    }

    /// Whether a heap holds a Makalu heap (its magic).
    pub fn present(t: &PmThread) -> bool {
        t.load_u64(BASE + M_MAGIC) == MAGIC
    }

    /// The same geometry with a mutation (for checkers to catch).
    pub fn with_mutation(self, mutation: Mutation) -> Layout {
        Layout { mutation, ..self }
    }

    pub fn log(&self) -> UndoLog {
        UndoLog::new(BASE + M_LOG_VERSION, self.log, LOG_SLOTS).with_mutation(self.mutation)
    }

    pub fn state(&self, t: &PmThread) -> u64 {
        t.load_u64(BASE + M_STATE)
    }

    pub fn set_state(&self, t: &mut PmThread, s: u64) {
        t.store_u64(BASE + M_STATE, s);
        t.persist(BASE + M_STATE, 8);
    }

    /// The offset of the bump pointer (`rgn_curr`, blocks in use by chunks).
    pub fn rgn_curr_off(&self) -> u64 {
        BASE + M_RGN_CURR
    }

    /// The header of block `b`.
    #[inline]
    pub fn hdr(&self, b: u64) -> u64 {
        self.hdrs + b * HDR
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

/// Objects of `sz` bytes a block holds.
#[inline]
pub fn objs_per_block(sz: u64) -> u64 {
    BLOCK / sz
}
