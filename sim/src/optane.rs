//! The Optane DIMMs behind the memory controller (Yang et al., "An Empirical
//! Guide to the Behavior and Use of Scalable Persistent Memory", FAST '20):
//!
//! - the physical address space is interleaved over the DIMMs in 4 KB chunks;
//! - a DIMM reads and writes its media in 256 B **XPLines**;
//! - each DIMM has a small write-combining **XPBuffer** of XPLines
//!   ([`crate::xpbuffer`]): 64 B writes to a buffered XPLine combine, a
//!   completed XPLine is written back to the media, and an evicted partly
//!   written XPLine costs a read-modify-write, which is the write amplification
//!   of small random writes.
//!
//! Every 64 B write that reaches a DIMM (a flush of a dirty line, the eviction of
//! a dirty line, a non-temporal store) goes through [`Optane::write`].

use crate::config::OptaneConfig;
use crate::xpbuffer::XpBuffer;

const EMPTY: u64 = u64::MAX;

/// What a 64 B write did at its DIMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteOutcome {
    pub dimm: u32,
    /// Its XPLine was in the XPBuffer: the write combined.
    pub hit: bool,
    /// Same or next XPLine (in the DIMM's own address space) as the previous
    /// write to that DIMM.
    pub sequential: bool,
    /// A partly written XPLine had to be written to the media (a
    /// read-modify-write) to make room.
    pub evicted: bool,
    /// The write completed its XPLine, written back to the media now.
    pub completed: bool,
    /// The buffer entry now holding the XPLine.
    pub entry: u32,
}

/// Counters of one DIMM.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DimmCounters {
    /// 64 B writes that reached the DIMM.
    pub writes: u64,
    pub xpbuffer_hits: u64,
    pub sequential_writes: u64,
    /// Cache fills (64 B reads) from this DIMM.
    pub reads: u64,
    /// XPLines written to the media (evicted from the XPBuffer).
    pub media_writes: u64,
    /// XPLines read from the media: read-modify-writes of partially written
    /// XPLines and fills that the XPBuffer could not serve.
    pub media_reads: u64,
    /// The read-modify-write part of `media_reads`: write amplification's reads.
    pub rmw_reads: u64,
}

impl DimmCounters {
    /// What was counted since `earlier` (a window's figures).
    pub fn since(&self, earlier: &DimmCounters) -> DimmCounters {
        DimmCounters {
            writes: self.writes - earlier.writes,
            xpbuffer_hits: self.xpbuffer_hits - earlier.xpbuffer_hits,
            sequential_writes: self.sequential_writes - earlier.sequential_writes,
            reads: self.reads - earlier.reads,
            media_writes: self.media_writes - earlier.media_writes,
            media_reads: self.media_reads - earlier.media_reads,
            rmw_reads: self.rmw_reads - earlier.rmw_reads,
        }
    }
}

/// One DIMM: its write buffer and counters.
#[derive(Clone, Debug)]
struct Dimm {
    buf: XpBuffer,
    last_xpline: u64,
    counters: DimmCounters,
}

#[derive(Clone, Debug)]
pub struct Optane {
    dimms: Vec<Dimm>,
    n: u64,
    /// `log2(n)` when `n` is a power of two, else `magic` divides.
    n_shift: Option<u32>,
    magic: u64,
    interleave_shift: u32,
    xpline_shift: u32,
    /// The interleave chunk located last (`u64::MAX`: none), its DIMM and its
    /// base in that DIMM's address space: consecutive PM accesses mostly fall
    /// in one chunk, and the DIMM of a chunk costs a division otherwise.
    memo_chunk: u64,
    memo_dimm: usize,
    memo_base: u64,
    /// Where the DIMMs' interleaving starts ([`Optane::set_origin`]).
    origin: u64,
}

impl Optane {
    pub fn new(cfg: &OptaneConfig) -> Self {
        let parts = (cfg.xpline_bytes / 64) as u32;
        let entries = cfg.xpbuffer_entries as usize;
        Optane {
            dimms: (0..cfg.dimms as u64)
                .map(|d| Dimm {
                    buf: XpBuffer::new(entries, parts, cfg.xpbuffer_policy, cfg.xpbuffer_seed.wrapping_add(d)),
                    last_xpline: EMPTY,
                    counters: DimmCounters::default(),
                })
                .collect(),
            n: cfg.dimms as u64,
            n_shift: cfg.dimms.is_power_of_two().then(|| cfg.dimms.trailing_zeros()),
            magic: if cfg.dimms.is_power_of_two() { 0 } else { u64::MAX / cfg.dimms as u64 + 1 },
            interleave_shift: cfg.interleave_bytes.trailing_zeros(),
            xpline_shift: cfg.xpline_bytes.trailing_zeros(),
            memo_chunk: u64::MAX,
            memo_dimm: 0,
            memo_base: 0,
            origin: 0,
        }
    }

    /// Interleaves the DIMMs from `base` (the traced heap's base, rounded
    /// down to the interleave unit) rather than from address 0. Why: a trace
    /// holds virtual addresses, and where the kernel maps the heap file
    /// changes from run to run; counted from address 0, the DIMM of every
    /// line, and so every figure of the run, would change with the mapping's
    /// page parity. A DAX heap file starts on an interleave boundary.
    pub fn set_origin(&mut self, base: u64) {
        self.origin = base >> self.interleave_shift << self.interleave_shift;
        self.memo_chunk = u64::MAX;
    }

    pub fn dimms(&self) -> usize {
        self.dimms.len()
    }

    /// The DIMM holding `addr`.
    #[inline(always)]
    pub fn dimm_of(&self, addr: u64) -> usize {
        self.divmod(addr.wrapping_sub(self.origin) >> self.interleave_shift).1 as usize
    }

    /// `(x / dimms, x % dimms)` without a division instruction (tens of
    /// cycles, on every PM write): multiply by a precomputed reciprocal. With
    /// `magic = ⌊2^64 / n⌋ + 1` the quotient `⌊x · magic / 2^64⌋` is exact while
    /// `x · (magic · n − 2^64) < 2^64` (Granlund & Montgomery, PLDI '94), which
    /// holds for `x < 2^52` since `n ≤ 4096`; larger `x` divide.
    #[inline(always)]
    fn divmod(&self, x: u64) -> (u64, u64) {
        if let Some(shift) = self.n_shift {
            return (x >> shift, x & (self.n - 1));
        }
        if x < 1 << 52 {
            let q = ((x as u128 * self.magic as u128) >> 64) as u64;
            return (q, x - q * self.n);
        }
        (x / self.n, x % self.n)
    }

    /// The DIMM of `addr`, the XPLine in that DIMM's own address space (so the
    /// chunks a DIMM holds are contiguous for it), and the 64 B part of it:
    /// the reference for [`Optane::locate_memo`], which the models use.
    #[cfg(test)]
    fn locate(&self, addr: u64) -> (usize, u64, u32) {
        let addr = addr.wrapping_sub(self.origin);
        let (q, dimm) = self.divmod(addr >> self.interleave_shift);
        let local = q << self.interleave_shift | (addr & ((1u64 << self.interleave_shift) - 1));
        (dimm as usize, local >> self.xpline_shift, ((local >> 6) & ((1 << (self.xpline_shift - 6)) - 1)) as u32)
    }

    /// [`Optane::locate`], remembering the last chunk.
    #[inline(always)]
    pub(crate) fn locate_memo(&mut self, addr: u64) -> (usize, u64, u32) {
        let addr = addr.wrapping_sub(self.origin);
        let chunk = addr >> self.interleave_shift;
        if chunk != self.memo_chunk {
            let (q, dimm) = self.divmod(chunk);
            (self.memo_chunk, self.memo_dimm, self.memo_base) = (chunk, dimm as usize, q << self.interleave_shift);
        }
        let local = self.memo_base | (addr & ((1u64 << self.interleave_shift) - 1));
        (self.memo_dimm, local >> self.xpline_shift, ((local >> 6) & ((1 << (self.xpline_shift - 6)) - 1)) as u32)
    }

    /// A 64 B write of the line holding `addr`.
    #[inline]
    pub fn write(&mut self, addr: u64) -> WriteOutcome {
        let (di, xpl, part) = self.locate_memo(addr);
        let d = &mut self.dimms[di];
        d.counters.writes += 1;
        let sequential = d.last_xpline != EMPTY && (xpl == d.last_xpline || xpl == d.last_xpline.wrapping_add(1));
        d.counters.sequential_writes += sequential as u64;
        d.last_xpline = xpl;
        let w = d.buf.write(xpl, part);
        let rmw = w.victim_partial as u64;
        d.counters.xpbuffer_hits += w.hit as u64;
        d.counters.media_writes += rmw + w.completed as u64;
        d.counters.media_reads += rmw;
        d.counters.rmw_reads += rmw;
        WriteOutcome {
            dimm: di as u32,
            hit: w.hit,
            sequential,
            evicted: w.victim_partial,
            completed: w.completed,
            entry: w.entry as u32,
        }
    }

    /// A cache fill of the line holding `addr`: served by the XPBuffer if its
    /// XPLine is there, else read from the media (not kept: the buffer is
    /// modelled as a write buffer).
    #[inline]
    pub fn read(&mut self, addr: u64) {
        let (di, xpl, _) = self.locate_memo(addr);
        let d = &mut self.dimms[di];
        d.counters.reads += 1;
        if !d.buf.contains(xpl) {
            d.counters.media_reads += 1;
        }
    }

    /// Counters per DIMM as they stand (the start of a window).
    pub fn counters(&self) -> Vec<DimmCounters> {
        self.dimms.iter().map(|d| d.counters).collect()
    }

    /// Counters per DIMM, with the partly written XPLines still buffered
    /// counted as written back (they are in the persistence domain and reach
    /// the media eventually, by a read-modify-write).
    pub fn drained_counters(&self) -> Vec<DimmCounters> {
        self.dimms
            .iter()
            .map(|d| {
                let mut c = d.counters;
                let partial = d.buf.partial_entries();
                c.media_writes += partial;
                c.media_reads += partial;
                c.rmw_reads += partial;
                c
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xpbuffer::Policy;

    fn optane(dimms: u32, entries: u32, policy: Policy) -> Optane {
        Optane::new(&OptaneConfig {
            dimms,
            xpbuffer_entries: entries,
            xpbuffer_policy: policy,
            ..OptaneConfig::default()
        })
    }

    #[test]
    fn four_lines_combine_into_one_media_write() {
        let mut o = optane(6, 64, Policy::Lru);
        let w: Vec<_> = (0..4).map(|i| o.write(0x10000 + i * 64)).collect();
        assert!(!w[0].hit && w[1..].iter().all(|w| w.hit && w.sequential));
        let c = o.drained_counters();
        assert_eq!(c.iter().map(|c| c.media_writes).sum::<u64>(), 1);
        assert_eq!(c.iter().map(|c| c.media_reads).sum::<u64>(), 0, "a full XPLine needs no read");
    }

    #[test]
    fn reciprocal_division_is_exact() {
        let mut x = 0x1234_5678_9abc_def1u64;
        for n in (1..=70).chain([96, 1000, 4093, 4096]) {
            let o = optane(n, 1, Policy::Lru);
            for k in 0..2000u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let v = match k % 4 {
                    0 => x >> 12,
                    1 => (1 << 52) - 1 - (x % 1000),
                    2 => x,
                    _ => k,
                };
                assert_eq!(o.divmod(v), (v / n as u64, v % n as u64), "{v} / {n}");
            }
        }
    }

    #[test]
    fn interleave_and_local_addresses() {
        let mut o = optane(6, 64, Policy::Lru);
        assert_eq!(o.locate(0), (0, 0, 0));
        assert_eq!(o.locate(4096), (1, 0, 0));
        assert_eq!(o.locate(6 * 4096 + 64), (0, 16, 1), "the DIMM's second chunk follows its first");
        // The remembered chunk gives the same answers, in any order.
        for a in [0u64, 64, 4096, 4096 + 4032, 6 * 4096 + 64, 7 * 4096, 0x7f3a_0000_1240, 0x7f3a_0000_1280, 5] {
            assert_eq!(o.locate_memo(a), o.locate(a), "{a:#x}");
        }
    }

    #[test]
    fn the_dimms_interleave_from_the_heap_s_base_wherever_it_is_mapped() {
        // The same heap mapped one page further: every line keeps its DIMM
        // and its XPLine, so the figures do not change with the mapping.
        let (mut a, mut b) = (optane(2, 64, Policy::Lru), optane(2, 64, Policy::Lru));
        let (base_a, base_b) = (0x7f00_0000_0000u64, 0x7f00_0000_1000u64);
        a.set_origin(base_a);
        b.set_origin(base_b);
        for off in [0u64, 64, 4096, 4096 + 192, 3 * 4096, 5 * 4096 + 256, 1 << 20] {
            assert_eq!(a.locate_memo(base_a + off), b.locate_memo(base_b + off), "{off:#x}");
            assert_eq!(a.dimm_of(base_a + off), b.dimm_of(base_b + off), "{off:#x}");
        }
        // Counted from address 0 the page parity would move every line.
        let c = optane(2, 64, Policy::Lru);
        assert_ne!(c.dimm_of(base_a), c.dimm_of(base_b));
    }

    #[test]
    fn partial_victims_read_the_media_and_complete_lines_do_not() {
        let mut o = optane(1, 2, Policy::Lru);
        o.write(0);
        o.write(256);
        o.write(0); // 0 most recent
        let w = o.write(512); // evicts 256, partly written
        assert!(w.evicted && !w.hit && !w.sequential);
        assert!(o.write(0).hit);
        assert!(!o.write(256).hit);
        let c = o.drained_counters()[0];
        assert_eq!((c.media_writes, c.media_reads, c.rmw_reads), (4, 4, 4));
        // A whole XPLine written twice: two media writes, no read.
        let mut o = optane(1, 2, Policy::Lru);
        for _ in 0..2 {
            for l in 0..4 {
                o.write(l * 64);
            }
        }
        let c = o.drained_counters()[0];
        assert_eq!((c.writes, c.media_writes, c.media_reads), (8, 2, 0));
    }
}
