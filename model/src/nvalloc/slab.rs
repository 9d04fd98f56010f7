//! Slabs: the persistent slab header, the geometry of a slab of a size class,
//! the volatile header (*vslab*) and the table that finds a block's slab.
//!
//! A slab is 64 KiB, page aligned, cut from a chunk by the large allocator
//! as the start of an extent of [`SLAB_EXTENT`](super::layout::SLAB_EXTENT).
//! Its persistent header sits at its start, its blocks from `data_offset` on. The header carries everything slab morphing (§5.2)
//! needs, so morphing can arrive without a layout change:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `SLB1` |
//! | 4 | 2 | `size_class` |
//! | 6 | 2 | `old_size_class` (slab_in: the class before morphing) |
//! | 8 | 4 | `data_offset` (of the blocks, from the slab start) |
//! | 12 | 4 | `old_data_offset` |
//! | 16 | 8 | `flag`: morph step (see below); 0 when no morph is in progress |
//! | 24 | 4 | `arena` that owns the slab |
//! | 28 | 4 | `nblocks` |
//! | 32 | 4 | `index_len`: entries of the index table (slab_in only) |
//! | 36 | 4 | `index_off`: offset of the index table from the slab start |
//! | 40 | 24 | reserved |
//! | 64 | … | bitmap: `stripes` × 64 B per 512·stripes blocks ([`StripeMap`]) |
//! | data_offset | … | blocks |
//! | `index_off` | 2·index_len | index table of a slab_in, at the slab's tail |
//!
//! A regular slab's `data_offset` is the header rounded up to a line, so a
//! slab of 64 B blocks with 6 stripes keeps 1017 of its 1024 lines for data.
//! The persistent bitmap records blocks handed to the user; the vslab's
//! volatile bitmap also counts blocks sitting in tcaches, so it is a superset.
//!
//! # Slab morphing (§5.2): header states and the morph step flag
//!
//! A slab's header is in exactly one of these states, told apart by `flag`
//! and `index_len` alone:
//!
//! | flag | index_len | state | class / offset / bitmap describe |
//! |---|---|---|---|
//! | 0 | 0 | regular (slab_before or slab_after) | the slab (`old_*` = current) |
//! | 1 | – | morph step 1 done: `old_*` hold the old geometry | still the old slab |
//! | 2 | n | step 2 done: the index table holds the n live old blocks | old or (partly) new |
//! | 0 | n > 0 | slab_in: morph complete | the new class; old blocks in the table |
//!
//! Steps (each persisted before the next): 1. `old_size_class`,
//! `old_data_offset` = the current ones, then `flag` = 1; 2. the index table
//! (one 2-byte entry per live old block: its old block index in bits 0..15,
//! [`INDEX_LIVE`] set) and `index_off`/`index_len`, then `flag` = 2; 3.
//! `size_class`, `data_offset`, `nblocks` and a zeroed bitmap of the new
//! class, then `flag` = 0. Step 3 may be torn, but only while `flag` = 2,
//! and everything it overwrites can be rebuilt from `old_*` and the index
//! table, so recovery undoes a morph found at flag 1 or 2 ([`undo_morph`]).
//!
//! The index table sits at the slab's tail rather than between bitmap and
//! blocks, so every class keeps its regular `data_offset` (and the hot path
//! its per-class geometry); while the slab is a slab_in, new blocks that
//! overlap the table are held back like those overlapping live old blocks.
//! When the last old block is freed, `index_len` is set to 0 and the slab is
//! a regular slab (slab_after) again.

use super::layout::SLAB;
use crate::heap::{PmOff, Pod};
use crate::mech::pbitmap::PBitmap;
use crate::mech::record::PAGE;
use crate::mech::stripe::StripeMap;
use crate::pm::PmThread;
use std::sync::atomic::{AtomicU64, Ordering};

/// Morph step flag values (see the module documentation).
pub const FLAG_STEP1: u64 = 1;
pub const FLAG_STEP2: u64 = 2;
/// Index-table entry bit: the old block is still allocated.
pub const INDEX_LIVE: u16 = 0x8000;
/// Trace markers (id: the slab's heap offset) announcing a slab's life:
/// [`init_header`] starts it, `LargeAlloc::free_slab` ends it. Trace
/// validation (`pmsim specs validate`) follows one slab between the two.
pub const SLAB_MARKER: &str = "nvalloc slab";
pub const SLAB_FREED_MARKER: &str = "nvalloc slab freed";

const SLAB_MAGIC: u32 = u32::from_le_bytes(*b"SLB1");
/// Offset of the bitmap in the header.
pub const BITMAP_OFF: u64 = 64;
/// Most blocks a slab can have (64 KiB of 64 B blocks).
pub const MAX_BLOCKS: u32 = (SLAB / 64) as u32;
const VBITS_WORDS: usize = MAX_BLOCKS as usize / 64;

/// The fixed part of the persistent slab header (its first line).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct SlabHeader {
    pub magic: u32,
    pub size_class: u16,
    pub old_size_class: u16,
    pub data_offset: u32,
    pub old_data_offset: u32,
    pub flag: u64,
    pub arena: u32,
    pub nblocks: u32,
    pub index_len: u32,
    pub index_off: u32,
    pub reserved: [u8; 24],
}

const _: () = assert!(std::mem::size_of::<SlabHeader>() == 64);
// SAFETY: repr(C) of integers and a byte array laid out without padding (the
// size assertion above checks 64 = the sum of the field sizes); every bit
// pattern is a valid value; no pointers.
unsafe impl Pod for SlabHeader {}

/// Where a regular slab of one size class keeps its blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlabGeom {
    pub size: u32,
    pub data_offset: u32,
    pub nblocks: u32,
}

impl SlabGeom {
    /// The geometry of a regular slab of `size`-byte blocks with bitmap mapping `map`.
    pub fn regular(size: u32, map: StripeMap) -> SlabGeom {
        let max_blocks = ((SLAB - BITMAP_OFF) / size as u64) as u32;
        let data_offset = (BITMAP_OFF as u32 + map.area_bytes(max_blocks)).next_multiple_of(64);
        SlabGeom { size, data_offset, nblocks: (SLAB as u32 - data_offset) / size }
    }

    /// The offset of block `b` of the slab at `slab`.
    #[inline(always)]
    pub fn block_off(&self, slab: u64, b: u32) -> u64 {
        slab + self.data_offset as u64 + b as u64 * self.size as u64
    }

    /// The index of the block at `off` in the slab at `slab`, if `off` is the
    /// start of one.
    #[inline(always)]
    pub fn block_index(&self, slab: u64, off: u64) -> Option<u32> {
        let rel = off.checked_sub(slab + self.data_offset as u64)?;
        let b = rel / self.size as u64;
        (rel % self.size as u64 == 0 && b < self.nblocks as u64).then_some(b as u32)
    }
}

/// The persistent bitmap of the slab at `slab`.
#[inline(always)]
pub fn bitmap(slab: u64, map: StripeMap) -> PBitmap {
    PBitmap::new(slab + BITMAP_OFF, map)
}

/// Writes the header of a new regular slab (fixed part and a zeroed bitmap)
/// and makes it durable; the caller records the slab afterwards.
pub fn init_header(t: &mut PmThread, slab: u64, class: usize, geom: &SlabGeom, arena: usize, map: StripeMap) {
    t.marker(slab, SLAB_MARKER);
    let h = SlabHeader {
        magic: SLAB_MAGIC,
        size_class: class as u16,
        old_size_class: class as u16,
        data_offset: geom.data_offset,
        old_data_offset: geom.data_offset,
        flag: 0,
        arena: arena as u32,
        nblocks: geom.nblocks,
        index_len: 0,
        index_off: 0,
        reserved: [0; 24],
    };
    t.write(PmOff::<SlabHeader>::new(slab), h);
    bitmap(slab, map).zero(t, geom.nblocks);
    t.persist(slab, geom.data_offset as u64);
}

/// Reads and checks the header of a recorded slab against the geometry its
/// class (and, while morphing, its old class) must have. Accepts every state
/// of the module documentation's table.
pub fn read_header(t: &PmThread, slab: u64, geoms: &[SlabGeom]) -> Result<SlabHeader, String> {
    let h: SlabHeader = t.read(PmOff::new(slab));
    if h.magic != SLAB_MAGIC {
        return Err(format!("slab {slab:#x}: bad header magic {:#x}", h.magic));
    }
    let (Some(g), Some(og)) = (geoms.get(h.size_class as usize), geoms.get(h.old_size_class as usize)) else {
        return Err(format!("slab {slab:#x}: size class {} / old {} does not exist", h.size_class, h.old_size_class));
    };
    if h.flag > FLAG_STEP2 {
        return Err(format!("slab {slab:#x}: morph step flag {}", h.flag));
    }
    if h.index_len > 0 || h.flag == FLAG_STEP2 {
        let tb = table_bytes(h.index_len) as u64;
        if h.index_len > og.nblocks || h.index_off as u64 != SLAB - tb {
            return Err(format!("slab {slab:#x}: index table {} entries at {}", h.index_len, h.index_off));
        }
    }
    if h.flag != 0 {
        // Mid-morph: only the old geometry is trustworthy (step 3 may be torn).
        if h.old_data_offset != og.data_offset {
            return Err(format!(
                "slab {slab:#x}: old data offset {} for class {}",
                h.old_data_offset, h.old_size_class
            ));
        }
        return Ok(h);
    }
    if h.data_offset != g.data_offset || h.nblocks != g.nblocks {
        return Err(format!(
            "slab {slab:#x}: data offset {} / {} blocks, class {} needs {} / {} (heap made with other stripes?)",
            h.data_offset, h.nblocks, h.size_class, g.data_offset, g.nblocks
        ));
    }
    if h.index_len > 0 && h.old_data_offset != og.data_offset {
        return Err(format!("slab {slab:#x}: old data offset {} for class {}", h.old_data_offset, h.old_size_class));
    }
    Ok(h)
}

/// Bytes (whole lines) of an index table of `n` entries.
pub fn table_bytes(n: u32) -> u32 {
    (2 * n).next_multiple_of(64)
}

/// The index table entries of the slab at `slab` with header `h`.
pub fn read_table(t: &PmThread, slab: u64, h: &SlabHeader) -> Vec<u16> {
    (0..h.index_len as u64).map(|i| t.load::<u16>(slab + h.index_off as u64 + 2 * i)).collect()
}

/// Writes `h` (one line) and makes it durable.
pub fn write_header(t: &mut PmThread, slab: u64, h: &SlabHeader) {
    t.write(PmOff::<SlabHeader>::new(slab), *h);
    t.persist(slab, 64);
}

/// Undoes an interrupted morph (flag 1 or 2) of the slab at `slab`: back to
/// the regular slab_before with the old class and offset and a bitmap rebuilt
/// from the index table (at flag 1 the bitmap was never touched). Idempotent:
/// `flag` and `index_len` are cleared last, so a crash during the undo
/// leaves a state the next recovery undoes again. Returns the restored header.
pub fn undo_morph(t: &mut PmThread, slab: u64, geoms: &[SlabGeom], map: StripeMap) -> SlabHeader {
    let mut h: SlabHeader = t.read(PmOff::new(slab));
    debug_assert!(h.flag == FLAG_STEP1 || h.flag == FLAG_STEP2);
    let og = geoms[h.old_size_class as usize];
    if h.flag == FLAG_STEP2 {
        let table = read_table(t, slab, &h);
        let bm = bitmap(slab, map);
        let area = bm.area_bytes(og.nblocks).max(bm.area_bytes(h.nblocks.min(MAX_BLOCKS)));
        for w in (0..area).step_by(8) {
            t.store_u64(bm.base() + w, 0);
        }
        for e in table.into_iter().filter(|e| e & INDEX_LIVE != 0) {
            bm.set(t, (e & !INDEX_LIVE) as u32);
        }
        t.flush_range(bm.base(), area);
    }
    h.size_class = h.old_size_class;
    h.data_offset = og.data_offset;
    h.nblocks = og.nblocks;
    write_header(t, slab, &h);
    h.flag = 0;
    h.index_len = 0;
    h.index_off = 0;
    write_header(t, slab, &h);
    h
}

/// Back to a regular slab (slab_after) once no old block is live: the index
/// table is dropped by one durable header write.
pub fn finish_morph(t: &mut PmThread, slab: u64) {
    let mut h: SlabHeader = t.read(PmOff::new(slab));
    h.old_size_class = h.size_class;
    h.old_data_offset = h.data_offset;
    h.index_len = 0;
    h.index_off = 0;
    write_header(t, slab, &h);
}

/// The volatile state of a slab_in: the old geometry, the index table and
/// the counters of §5.2.
#[derive(Clone, Debug)]
pub struct Morph {
    pub old_class: usize,
    pub old: SlabGeom,
    pub index_off: u32,
    /// Old block index → (index-table entry, still allocated).
    pub entries: std::collections::HashMap<u32, (u32, bool)>,
    /// Live old blocks (`cnt_slab`).
    pub cnt_slab: u32,
    /// Per new block: live old blocks overlapping it, plus one if it overlaps
    /// the index table (`cnt_block`); a block with a count is held back.
    pub cnt_block: Vec<u16>,
}

impl Morph {
    /// The morph state of a slab_in of class geometry `g` whose index table
    /// at `index_off` lists `table`; the blocks it holds back are marked taken in `v`.
    pub fn build(old_class: usize, old: SlabGeom, g: &SlabGeom, index_off: u32, table: &[u16], v: &mut VSlab) -> Morph {
        let mut m = Morph {
            old_class,
            old,
            index_off,
            entries: Default::default(),
            cnt_slab: 0,
            cnt_block: vec![0; g.nblocks as usize],
        };
        for (i, &e) in table.iter().enumerate() {
            let live = e & INDEX_LIVE != 0;
            let ob = (e & !INDEX_LIVE) as u32;
            m.entries.insert(ob, (i as u32, live));
            if live {
                m.cnt_slab += 1;
                let s = old.data_offset + ob * old.size;
                m.pin(g, s, s + old.size, v);
            }
        }
        if m.cnt_slab > 0 {
            m.pin(g, index_off, SLAB as u32, v);
        }
        m
    }

    /// The new blocks overlapping the slab-relative range `[s, e)`.
    fn overlapping(g: &SlabGeom, s: u32, e: u32) -> std::ops::Range<u32> {
        let lo = s.saturating_sub(g.data_offset) / g.size;
        let hi = (e.saturating_sub(g.data_offset)).div_ceil(g.size).min(g.nblocks);
        lo..hi.max(lo)
    }

    fn pin(&mut self, g: &SlabGeom, s: u32, e: u32, v: &mut VSlab) {
        for nb in Morph::overlapping(g, s, e) {
            if self.cnt_block[nb as usize] == 0 && !v.is_taken(nb) {
                v.mark(nb);
            }
            self.cnt_block[nb as usize] += 1;
        }
    }

    /// Drops one occupant of the new blocks overlapping `[s, e)`; returns the
    /// blocks now free to hand out.
    pub fn unpin(&mut self, g: &SlabGeom, s: u32, e: u32) -> Vec<u32> {
        let mut out = Vec::new();
        for nb in Morph::overlapping(g, s, e) {
            let c = &mut self.cnt_block[nb as usize];
            *c -= 1;
            if *c == 0 {
                out.push(nb);
            }
        }
        out
    }

    /// The old block starting at slab-relative `rel`, if it is a live one.
    pub fn live_old(&self, rel: u64) -> Option<(u32, u32)> {
        let r = rel.checked_sub(self.old.data_offset as u64)?;
        if r % self.old.size as u64 != 0 {
            return None;
        }
        let ob = (r / self.old.size as u64) as u32;
        match self.entries.get(&ob) {
            Some(&(i, true)) => Some((ob, i)),
            _ => None,
        }
    }

    /// Whether new block `nb` is held back.
    pub fn pinned(&self, nb: u32) -> bool {
        self.cnt_block.get(nb as usize).is_some_and(|&c| c > 0)
    }
}

/// What the hot path needs to know about the slab holding an offset, packed
/// in one word so that finding a block's slab is a single atomic load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlabInfo {
    pub class: usize,
    pub arena: usize,
    /// A slab_in: some offsets may be live old blocks of another class.
    pub morph_in: bool,
}

impl SlabInfo {
    fn pack(self) -> u64 {
        1 | (self.class as u64) << 1 | (self.arena as u64) << 9 | (self.morph_in as u64) << 25
    }

    fn unpack(w: u64) -> Option<SlabInfo> {
        (w & 1 == 1).then_some(SlabInfo {
            class: (w >> 1 & 0xff) as usize,
            arena: (w >> 9 & 0xffff) as usize,
            morph_in: w >> 25 & 1 == 1,
        })
    }
}

/// Heap page → [`SlabInfo`] and the slab's start, for the whole chunk area
/// (the paper finds a block's size class through its R-tree; a flat table
/// with a slot per page does it in one load). Slabs start on any page
/// ([`SLAB_EXTENT`](super::layout::SLAB_EXTENT)), so each of a slab's pages
/// holds its info and how many pages into the slab it is.
pub struct SlabTable {
    base: u64,
    slots: Box<[AtomicU64]>,
}

/// Pages per slab.
const SLAB_PAGES: u64 = SLAB / PAGE;

impl SlabTable {
    pub fn new(base: u64, end: u64) -> SlabTable {
        let n = (end - base) / PAGE;
        SlabTable { base, slots: (0..n).map(|_| AtomicU64::new(0)).collect() }
    }

    /// The slab containing `off` and its info, if `off` lies in a slab.
    #[inline(always)]
    pub fn lookup(&self, off: u64) -> Option<(u64, SlabInfo)> {
        let i = off.checked_sub(self.base)? / PAGE;
        let w = self.slots.get(i as usize)?.load(Ordering::Acquire);
        let info = SlabInfo::unpack(w)?;
        Some(((off & !(PAGE - 1)) - (w >> PAGE_SHIFT) * PAGE, info))
    }

    /// Publishes the slab at `slab` (before any of its blocks is handed out).
    pub fn insert(&self, slab: u64, info: SlabInfo) {
        let w = info.pack();
        for (k, s) in self.pages(slab).iter().enumerate() {
            s.store(w | (k as u64) << PAGE_SHIFT, Ordering::Release);
        }
    }

    pub fn remove(&self, slab: u64) {
        for s in self.pages(slab) {
            s.store(0, Ordering::Release);
        }
    }

    fn pages(&self, slab: u64) -> &[AtomicU64] {
        debug_assert_eq!(slab % PAGE, 0, "slabs start on a page");
        let i = ((slab - self.base) / PAGE) as usize;
        &self.slots[i..i + SLAB_PAGES as usize]
    }
}

/// Where a slot of [`SlabTable`] keeps its page's index in the slab (above
/// [`SlabInfo::pack`]'s 26 bits).
const PAGE_SHIFT: u32 = 32;

/// The volatile header of a slab: which blocks are taken (allocated or
/// cached in some tcache), kept under its arena's lock.
#[derive(Clone, Debug)]
pub struct VSlab {
    pub class: usize,
    pub nblocks: u32,
    /// Blocks taken.
    pub used: u32,
    vbits: [u64; VBITS_WORDS],
    /// Set while the slab is a slab_in.
    pub morph: Option<Box<Morph>>,
    /// The arena clock's tick at the slab's last use (larger = used more
    /// recently): how long it has been idle, for slab morphing.
    pub stamp: u64,
    /// Its links in its arena's LRU list.
    pub lru: LruLinks,
}

/// No slab: the end of an LRU list.
pub const NIL: u64 = u64::MAX;

/// A vslab's neighbours in its arena's LRU list (offsets of their slabs, or
/// [`NIL`]), and whether it is on the list at all.
#[derive(Clone, Copy, Debug)]
pub struct LruLinks {
    pub prev: u64,
    pub next: u64,
    pub linked: bool,
}

impl Default for LruLinks {
    fn default() -> Self {
        LruLinks { prev: NIL, next: NIL, linked: false }
    }
}

impl VSlab {
    pub fn new(class: usize, nblocks: u32) -> VSlab {
        assert!(nblocks <= MAX_BLOCKS);
        VSlab { class, nblocks, used: 0, vbits: [0; VBITS_WORDS], morph: None, stamp: 0, lru: LruLinks::default() }
    }

    pub fn is_full(&self) -> bool {
        self.used == self.nblocks
    }

    pub fn is_empty(&self) -> bool {
        self.used == 0
    }

    /// Whether block `b` is taken.
    pub fn is_taken(&self, b: u32) -> bool {
        self.vbits[(b / 64) as usize] >> (b % 64) & 1 == 1
    }

    /// Marks block `b` taken (recovery: allocated in the persistent bitmap).
    pub fn mark(&mut self, b: u32) {
        let (w, m) = ((b / 64) as usize, 1u64 << (b % 64));
        debug_assert!(self.vbits[w] & m == 0);
        self.vbits[w] |= m;
        self.used += 1;
    }

    /// Marks block `b` free again; returns whether it was taken.
    pub fn release(&mut self, b: u32) -> bool {
        let (w, m) = ((b / 64) as usize, 1u64 << (b % 64));
        if self.vbits[w] & m == 0 {
            return false;
        }
        self.vbits[w] &= !m;
        self.used -= 1;
        true
    }

    /// The free blocks of bitmap word `w`, as bits (none past the last block).
    fn free_bits(&self, w: usize) -> u64 {
        let free = !self.vbits[w];
        match self.nblocks % 64 {
            tail if tail != 0 && w == (self.nblocks / 64) as usize => free & ((1u64 << tail) - 1),
            _ => free,
        }
    }

    /// Takes free blocks in block order while `take` accepts them (see
    /// [`Take`]).
    pub fn take_free(&mut self, mut take: impl FnMut(u32) -> Take) {
        let words = self.nblocks.div_ceil(64) as usize;
        let mut w = 0;
        while w < words {
            let mut free = self.free_bits(w);
            while free != 0 {
                let bit = free.trailing_zeros();
                free &= free - 1;
                match take(w as u32 * 64 + bit) {
                    Take::Stop => return,
                    Take::Skip => {}
                    Take::Yes => {
                        self.vbits[w] |= 1 << bit;
                        self.used += 1;
                    }
                    Take::From(next) => {
                        // Skip to block `next`: the rest of this word, and
                        // whole words, unseen.
                        let (nw, nb) = ((next / 64) as usize, next % 64);
                        if nw > w {
                            if nw >= words {
                                return;
                            }
                            w = nw;
                            free = self.free_bits(w) & (u64::MAX << nb);
                        } else if nw == w {
                            free &= u64::MAX.checked_shl(nb).unwrap_or(0);
                        }
                    }
                }
            }
            w += 1;
        }
    }
}

/// What [`VSlab::take_free`] does with a free block it offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    /// Take it.
    Yes,
    /// Leave it, and go on with the next.
    Skip,
    /// Leave it and every block before block `n` (a refill whose
    /// sub-tcache for a bitmap line is full skips the line's other blocks
    /// at once, not one by one).
    From(u32),
    /// Stop.
    Stop,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_leaves_room_for_the_bitmap() {
        let g = SlabGeom::regular(64, StripeMap::new(6));
        assert_eq!((g.data_offset, g.nblocks), (448, 1017));
        let g = SlabGeom::regular(64, StripeMap::new(1));
        assert_eq!((g.data_offset, g.nblocks), (192, 1021));
        let g = SlabGeom::regular(14336, StripeMap::new(6));
        assert_eq!((g.data_offset, g.nblocks), (448, 4));
        assert_eq!(g.block_index(0x10000, 0x10000 + 448 + 14336), Some(1));
        assert_eq!(g.block_index(0x10000, 0x10000 + 448 + 14335), None);
        assert_eq!(g.block_index(0x10000, 0x10000 + 448 + 4 * 14336), None);
    }

    #[test]
    fn vslab_takes_and_releases() {
        let mut v = VSlab::new(0, 70);
        let mut got = Vec::new();
        v.take_free(|b| {
            if got.len() == 66 {
                return Take::Stop;
            }
            got.push(b);
            Take::Yes
        });
        assert_eq!(got.len(), 66);
        assert_eq!(v.used, 66);
        assert!(v.release(3));
        assert!(!v.release(3));
        let mut rest = Vec::new();
        v.take_free(|b| {
            rest.push(b);
            Take::Yes
        });
        assert_eq!(rest, vec![3, 66, 67, 68, 69]);
        assert!(v.is_full());
    }

    #[test]
    fn vslab_skips_to_a_block() {
        let mut v = VSlab::new(0, 300);
        let mut got = Vec::new();
        // Blocks 0..10 of each hundred: every other skip goes past whole words.
        v.take_free(|b| {
            got.push(b);
            if b % 100 < 9 {
                Take::Yes
            } else {
                Take::From((b / 100 + 1) * 100)
            }
        });
        let want: Vec<u32> = (0..3).flat_map(|h| h * 100..h * 100 + 10).collect();
        assert_eq!(got, want);
        assert_eq!(v.used, 27);
        let mut none = 0;
        v.take_free(|_| {
            none += 1;
            Take::From(300)
        });
        assert_eq!(none, 1);
    }

    #[test]
    fn slab_info_packs() {
        let i = SlabInfo { class: 26, arena: 63, morph_in: true };
        assert_eq!(SlabInfo::unpack(i.pack()), Some(i));
        assert_eq!(SlabInfo::unpack(0), None);
    }
}
