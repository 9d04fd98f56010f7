//! Where a Ralloc-style heap keeps what (`pm_config.hpp`, `BaseMeta.hpp`,
//! `RegionManager.hpp`): Ralloc's three region files — descriptors,
//! superblocks, base metadata — laid out in one pmsim heap.
//!
//! | where | what |
//! |---|---|
//! | `REGIONS` | the region managers' headers, a line each: the region's bump pointer (`curr_addr`), heap start, size |
//! | `META` | `BaseMeta`: line 0 `avail_sb` and the dirty mutex (the clean-shutdown state), lines 1–40 the 40 `ProcHeap`s (partial list, size class), then 1,024 root slots; 10,816 B |
//! | `descs` | one 64 B descriptor per superblock (descriptor `i` describes superblock `i`) |
//! | `sbs` | superblocks of 64 KiB (`SBSIZE`), 64 KiB aligned; superblock 0 is never used (`CrossPtr` offsets start above 0) |
//!
//! A descriptor (`struct Descriptor`, one line):
//!
//! | offset | field | kind |
//! |---|---|---|
//! | 0 | `next_free`: the next free superblock's descriptor | transient |
//! | 8 | `next_partial`: the next partial superblock's descriptor | transient |
//! | 16 | `anchor`: first free block (31 bits), free blocks (31), state (2) | transient |
//! | 24 | `superblock` | persistent |
//! | 32 | `heap`: its size class's `ProcHeap` (0: none) | persistent |
//! | 40 | `block_size` | persistent |
//! | 48 | `maxcount` | persistent |
//!
//! List heads (`avail_sb`, each `partial_list`) hold a descriptor's index
//! plus one in their low 32 bits and a counter above (Ralloc's 34-bit ABA
//! counter over a 30-bit offset).

use super::NAME;
use crate::error::AllocError;
use crate::heap::HEADER_SIZE;
use crate::pm::PmThread;

/// Superblock size (`SBSIZE`).
pub const SB: u64 = 64 << 10;
/// Descriptor size (`DESCSIZE`).
pub const DESC: u64 = 64;
/// The superblock region's warm-up expansion (`SB_REGION_EXPAND_SIZE`,
/// also `MIN_SB_REGION_SIZE`): 1 GiB, or what the heap holds.
pub const EXPAND: u64 = 1 << 30;
/// Size classes, index 0 reserved for large blocks (`MAX_SZ_IDX`).
pub const CLASSES: usize = 40;
/// The largest small block (`MAX_SZ`: 14 KiB).
pub const MAX_SZ: u32 = (1 << 13) + (1 << 11) * 3;
/// Root slots (`MAX_ROOTS`).
pub const ROOTS: u64 = 1024;

/// The region managers' header page.
pub const REGIONS: u64 = HEADER_SIZE;
/// Region indices (`RegionIndex`).
pub const DESC_IDX: u64 = 0;
pub const SB_IDX: u64 = 1;
pub const META_IDX: u64 = 2;
/// `BaseMeta`.
pub const META: u64 = REGIONS + 4096;
/// Bytes of `BaseMeta` (`sizeof(BaseMeta)`).
pub const META_BYTES: u64 = 64 + 64 * CLASSES as u64 + 8 * ROOTS;
/// `avail_sb`: the free superblocks' list head.
pub const AVAIL_SB: u64 = META;
/// `dirty_attr` (the robust mutex's attributes).
pub const DIRTY_ATTR: u64 = META + 8;
/// `dirty_mtx`: 1 while a run has the heap open (a crash leaves it so).
pub const DIRTY: u64 = META + 16;
/// `heaps[i]`: partial list head, then the size class.
pub const HEAPS: u64 = META + 64;
/// `roots[0]`.
pub const ROOT0: u64 = HEAPS + 64 * CLASSES as u64;
const MAGIC: u64 = u64::from_le_bytes(*b"PMSIM-RA");
const VERSION: u64 = 1;
/// pmsim's identity words, after `BaseMeta` in its page-rounded region.
const M_MAGIC: u64 = META + META_BYTES.next_multiple_of(64) + 64;
const M_VERSION: u64 = M_MAGIC + 8;
const M_NSB: u64 = M_MAGIC + 16;

/// Descriptor fields.
pub const D_NEXT_FREE: u64 = 0;
pub const D_NEXT_PARTIAL: u64 = 8;
pub const D_ANCHOR: u64 = 16;
pub const D_SB: u64 = 24;
pub const D_HEAP: u64 = 32;
pub const D_BLOCK_SIZE: u64 = 40;
pub const D_MAXCOUNT: u64 = 48;

/// Superblock states (`SuperblockState`).
pub mod sb_state {
    pub const ERROR: u64 = 0;
    pub const FULL: u64 = 1;
    pub const PARTIAL: u64 = 2;
    pub const EMPTY: u64 = 3;
}

/// A descriptor's anchor (`struct Anchor`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Anchor {
    pub avail: u64,
    pub count: u64,
    pub state: u64,
}

impl Anchor {
    pub fn pack(self) -> u64 {
        self.avail | self.count << 31 | self.state << 62
    }

    pub fn unpack(w: u64) -> Anchor {
        Anchor { avail: w & ((1 << 31) - 1), count: w >> 31 & ((1 << 31) - 1), state: w >> 62 }
    }
}

/// A list head: descriptor index + 1 (0: empty) and an ABA counter.
#[inline]
pub fn head(desc: Option<u64>, counter: u64) -> u64 {
    desc.map_or(0, |d| d + 1) | counter << 32
}

/// The descriptor of list head `w`.
#[inline]
pub fn head_desc(w: u64) -> Option<u64> {
    let d = w & 0xffff_ffff;
    (d != 0).then(|| d - 1)
}

/// The counter of list head `w`.
#[inline]
pub fn head_counter(w: u64) -> u64 {
    w >> 32
}

/// The heap's fixed geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub descs: u64,
    pub sbs: u64,
    /// Superblocks the region holds.
    pub nsb: u64,
}

impl Layout {
    /// The largest layout that fits a heap of `size` bytes.
    pub fn plan(size: u64) -> Result<Layout, AllocError> {
        let descs = (M_NSB + 8).next_multiple_of(4096);
        let fits = |n: u64| {
            let sbs = (descs + n * DESC).next_multiple_of(SB);
            (sbs + n * SB <= size).then_some(sbs)
        };
        let mut n = size.saturating_sub(descs) / (SB + DESC);
        while n > 0 && fits(n).is_none() {
            n -= 1;
        }
        if n < 3 {
            return Err(AllocError::too_small(NAME, format!("heap of {size} bytes holds fewer than 3 superblocks")));
        }
        Ok(Layout { descs, sbs: fits(n).expect("checked"), nsb: n })
    }

    /// The region manager header of region `i`: bump pointer, start, size.
    pub fn region(i: u64) -> u64 {
        REGIONS + 64 * i
    }

    pub fn write_identity(&self, t: &mut PmThread) {
        t.store_u64(M_VERSION, VERSION);
        t.store_u64(M_NSB, self.nsb);
        t.store_u64(M_MAGIC, MAGIC);
        t.persist(M_MAGIC, 24);
    }

    /// Reads the layout of an existing heap of `size` bytes.
    pub fn read(t: &PmThread, size: u64) -> Result<Layout, AllocError> {
        if t.load_u64(M_MAGIC) != MAGIC {
            return Err(AllocError::corrupt(NAME, "no Ralloc heap here (bad magic after the base metadata)"));
        }
        let v = t.load_u64(M_VERSION);
        if v != VERSION {
            return Err(AllocError::corrupt(NAME, format!("Ralloc layout version {v}, expected {VERSION}")));
        }
        let l = Layout::plan(size)?;
        let n = t.load_u64(M_NSB);
        if n != l.nsb {
            return Err(AllocError::corrupt(
                NAME,
                format!("{n} superblocks recorded, a heap of {size} bytes has {}", l.nsb),
            ));
        }
        Ok(l)
    }

    /// Whether a heap holds a Ralloc heap.
    pub fn present(t: &PmThread) -> bool {
        t.load_u64(M_MAGIC) == MAGIC
    }

    /// Descriptor `i`.
    #[inline]
    pub fn desc(&self, i: u64) -> u64 {
        self.descs + i * DESC
    }

    /// Superblock `i`.
    #[inline]
    pub fn sb(&self, i: u64) -> u64 {
        self.sbs + i * SB
    }

    /// The superblock holding heap offset `off` (`desc_lookup`'s index).
    #[inline]
    pub fn sb_of(&self, off: u64) -> Option<u64> {
        let i = off.checked_sub(self.sbs)? / SB;
        (i < self.nsb).then_some(i)
    }

    /// `ProcHeap` of size class `sc`.
    #[inline]
    pub fn heap(sc: usize) -> u64 {
        HEAPS + 64 * sc as u64
    }

    /// The size class a descriptor's `heap` word names.
    #[inline]
    pub fn sc_of_heap(w: u64) -> Option<usize> {
        let rel = w.checked_sub(HEAPS)?;
        (rel.is_multiple_of(64) && rel / 64 < CLASSES as u64).then_some((rel / 64) as usize)
    }
}
