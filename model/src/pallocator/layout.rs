//! Where a PAllocator-style heap keeps what. PAllocator maps segments
//! (files) on demand and names persistent memory by (segment, offset);
//! pmsim lays the same pieces out in one heap.
//!
//! | where | what |
//! |---|---|
//! | `META` | identity: magic, layout version, segments, page and segment size, micro-log areas |
//! | `wal` | the micro-logs: one line per thread ([`crate::mech::wal`], 4 entries of 16 B) |
//! | `segtab` | the segment table: one word per segment (free, small with its owner, big, huge head with its length, huge body) |
//! | `segs` | segments, 2 MiB each by default |
//!
//! A small segment is cut into pages (64 KiB by default). A page in use
//! holds blocks of one size class for one thread; its header is a line
//! (block size, block count, owner) followed by a 2-byte entry per block
//! (0: free, 1: allocated — the "2-B block metadata in page headers" of
//! NVAlloc's account of PAllocator), then the blocks.
//!
//! A big segment holds blocks with a 64 B header each (a word: size, and
//! an allocated bit); free blocks of neighbouring headers are merged. A
//! huge block is whole segments, its object after a 64 B header line.

use super::NAME;
use crate::error::AllocError;
use crate::heap::HEADER_SIZE;
use crate::mech::wal::Wal;
use crate::pm::PmThread;

/// Bytes of a big block's header and of a huge block's.
pub const HDR: u64 = 64;
/// The identity page.
pub const META: u64 = HEADER_SIZE;
const MAGIC: u64 = u64::from_le_bytes(*b"PMSIM-PA");
const VERSION: u64 = 1;
const M_MAGIC: u64 = META;
const M_VERSION: u64 = META + 8;
const M_NSEG: u64 = META + 16;
const M_PAGE: u64 = META + 24;
const M_SEG: u64 = META + 32;
const M_THREADS: u64 = META + 40;

/// Segment table words (kind in the low byte).
pub mod seg {
    pub const FREE: u64 = 0;
    /// Small pages; the owner thread above the kind.
    pub const SMALL: u64 = 1;
    pub const BIG: u64 = 2;
    /// The first segment of a huge block; its segment count above the kind.
    pub const HUGE: u64 = 3;
    /// A later segment of a huge block.
    pub const BODY: u64 = 4;
    pub const KIND: u64 = 0xff;
}

/// A big block header's allocated bit (the size is a multiple of 64).
pub const ALLOCATED: u64 = 1;

/// Page header words.
pub const P_SIZE: u64 = 0;
pub const P_COUNT: u64 = 8;
pub const P_OWNER: u64 = 16;
/// The first block entry (2 bytes each).
pub const P_ENTRIES: u64 = 64;

/// The heap's fixed geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub wal: u64,
    pub segtab: u64,
    pub segs: u64,
    pub nseg: u64,
    pub page: u64,
    pub seg: u64,
    pub threads: u32,
}

impl Layout {
    /// The most segments of `seg` bytes a heap of `size` bytes holds, with
    /// micro-logs for `threads` threads.
    pub fn plan(size: u64, page: u64, seg: u64, threads: u32) -> Result<Layout, AllocError> {
        let wal = META + 4096;
        let segtab = wal + Wal::area_bytes(1, threads).next_multiple_of(4096);
        let fits = |n: u64| {
            let segs = (segtab + 8 * n).next_multiple_of(4096);
            (segs + n * seg <= size).then_some(segs)
        };
        let mut n = size.saturating_sub(segtab) / seg;
        while n > 0 && fits(n).is_none() {
            n -= 1;
        }
        if n < 2 {
            return Err(AllocError::too_small(
                NAME,
                format!("heap of {size} bytes holds fewer than 2 segments of {seg}"),
            ));
        }
        Ok(Layout { wal, segtab, segs: fits(n).expect("checked"), nseg: n, page, seg, threads })
    }

    pub fn format(&self, t: &mut PmThread) {
        t.store_u64(M_VERSION, VERSION);
        t.store_u64(M_NSEG, self.nseg);
        t.store_u64(M_PAGE, self.page);
        t.store_u64(M_SEG, self.seg);
        t.store_u64(M_THREADS, self.threads as u64);
        t.store_bytes(self.wal, &vec![0; (self.segtab - self.wal) as usize]);
        t.store_bytes(self.segtab, &vec![0; (8 * self.nseg) as usize]);
        t.flush_range(self.wal, self.segtab - self.wal + 8 * self.nseg);
        t.persist(M_VERSION, 40);
        t.store_u64(M_MAGIC, MAGIC);
        t.persist(M_MAGIC, 8);
    }

    /// The layout an existing heap of `size` bytes records.
    pub fn read(t: &PmThread, size: u64) -> Result<Layout, AllocError> {
        if t.load_u64(M_MAGIC) != MAGIC {
            return Err(AllocError::corrupt(NAME, "no PAllocator heap here (bad magic)"));
        }
        let v = t.load_u64(M_VERSION);
        if v != VERSION {
            return Err(AllocError::corrupt(NAME, format!("layout version {v}, expected {VERSION}")));
        }
        let (page, seg, threads) = (t.load_u64(M_PAGE), t.load_u64(M_SEG), t.load_u64(M_THREADS) as u32);
        let ok = page.is_power_of_two() && seg.is_power_of_two() && seg >= 2 * page && threads >= 1;
        if !ok {
            return Err(AllocError::corrupt(NAME, format!("pages of {page}, segments of {seg}, {threads} logs")));
        }
        let l = Layout::plan(size, page, seg, threads)?;
        let n = t.load_u64(M_NSEG);
        if n != l.nseg {
            return Err(AllocError::corrupt(
                NAME,
                format!("{n} segments recorded, a heap of {size} bytes has {}", l.nseg),
            ));
        }
        Ok(l)
    }

    pub fn present(t: &PmThread) -> bool {
        t.load_u64(M_MAGIC) == MAGIC
    }

    /// The micro-logs, one line per thread.
    pub fn wal(&self) -> Wal {
        Wal::new(self.wal, 1, self.threads, false)
    }

    /// Segment `i`'s table word.
    #[inline]
    pub fn segword(&self, i: u64) -> u64 {
        self.segtab + 8 * i
    }

    /// Segment `i`.
    #[inline]
    pub fn seg_off(&self, i: u64) -> u64 {
        self.segs + i * self.seg
    }

    /// The segment holding heap offset `off`.
    #[inline]
    pub fn seg_of(&self, off: u64) -> Option<u64> {
        let i = off.checked_sub(self.segs)? / self.seg;
        (i < self.nseg).then_some(i)
    }

    /// The page holding heap offset `off` (in a small segment).
    #[inline]
    pub fn page_of(&self, off: u64) -> u64 {
        off - (off - self.segs) % self.page
    }

    /// Pages per segment.
    pub fn pages_per_seg(&self) -> u64 {
        self.seg / self.page
    }
}

/// The block count and the bytes of header of a page of `size`-byte
/// blocks (`page` bytes): as many blocks as fit behind a header line and
/// their 2-byte entries.
pub fn page_geometry(page: u64, size: u64) -> (u64, u64) {
    let mut n = (page - P_ENTRIES) / (size + 2);
    while n > 0 && (P_ENTRIES + 2 * n).next_multiple_of(64) + n * size > page {
        n -= 1;
    }
    (n, (P_ENTRIES + 2 * n).next_multiple_of(64))
}
