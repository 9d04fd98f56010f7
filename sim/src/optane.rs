//! The Optane DIMMs behind the memory controller (Yang et al., "An Empirical
//! Guide to the Behavior and Use of Scalable Persistent Memory", FAST '20):
//!
//! - the physical address space is interleaved over the DIMMs in 4 KB chunks;
//! - a DIMM reads and writes its media in 256 B **XPLines**;
//! - each DIMM has a small write-combining **XPBuffer** of XPLines (about 16 KB):
//!   64 B writes to an XPLine already buffered combine into one media write;
//!   a partially written XPLine must be read from the media before it is written
//!   back (read-modify-write), which is the write amplification of small random
//!   writes.
//!
//! Every 64 B write that reaches a DIMM (a flush of a dirty line, the eviction of
//! a dirty line, a non-temporal store) goes through [`Optane::write`]. The
//! replacement policy of the real XPBuffer is not documented; LRU is assumed.

use crate::config::OptaneConfig;

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
    /// An XPLine had to be written to the media to make room.
    pub evicted: bool,
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

/// No entry (end of the recency list).
const NIL: u16 = u16::MAX;

/// One DIMM and its XPBuffer. Entries are found through a small hash index
/// (open addressing at a load of at most 1/4, so a lookup is one or two probes)
/// and kept in an intrusive doubly linked recency list, so a hit, a miss and an
/// eviction are all O(1): no scan of the 64 entries, no time stamps to search
/// for the oldest.
#[derive(Clone, Debug)]
struct Dimm {
    /// Buffered XPLine (DIMM-local XPLine number) of each entry.
    tags: Vec<u64>,
    /// The 64 B parts of each buffered XPLine written so far (one bit each).
    written: Vec<u8>,
    /// Recency list: `prev` towards the most recent, `next` towards the least.
    prev: Vec<u16>,
    next: Vec<u16>,
    /// Most and least recently used entries.
    head: u16,
    tail: u16,
    /// Entries in use (entries `0..used`; they fill in order and never empty).
    used: usize,
    /// Hash index: entry numbers by `slot(tag)`, linear probing, `NIL` empty.
    index: Vec<u16>,
    last_xpline: u64,
    counters: DimmCounters,
}

impl Dimm {
    fn new(entries: usize) -> Dimm {
        Dimm {
            tags: vec![EMPTY; entries],
            written: vec![0; entries],
            prev: vec![NIL; entries],
            next: vec![NIL; entries],
            head: NIL,
            tail: NIL,
            used: 0,
            index: vec![NIL; (entries * 4).next_power_of_two()],
            last_xpline: EMPTY,
            counters: DimmCounters::default(),
        }
    }

    /// Home slot of an XPLine in `index` (Fibonacci hashing).
    #[inline(always)]
    fn slot(&self, xpl: u64) -> usize {
        (xpl.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & (self.index.len() - 1)
    }

    /// The entry holding `xpl`; the most recent one is checked first, as
    /// sequential writes hit it again and again.
    #[inline(always)]
    fn find(&self, xpl: u64) -> Option<usize> {
        if self.head != NIL && self.tags[self.head as usize] == xpl {
            return Some(self.head as usize);
        }
        let mask = self.index.len() - 1;
        let mut i = self.slot(xpl);
        loop {
            let e = self.index[i];
            if e == NIL {
                return None;
            }
            if self.tags[e as usize] == xpl {
                return Some(e as usize);
            }
            i = (i + 1) & mask;
        }
    }

    fn index_insert(&mut self, e: usize) {
        let mask = self.index.len() - 1;
        let mut i = self.slot(self.tags[e]);
        while self.index[i] != NIL {
            i = (i + 1) & mask;
        }
        self.index[i] = e as u16;
    }

    /// Removes entry `e` from the index, shifting later members of its probe
    /// run back so that lookups never stop early at the hole (no tombstones).
    fn index_remove(&mut self, e: usize) {
        let mask = self.index.len() - 1;
        let mut hole = self.slot(self.tags[e]);
        while self.index[hole] != e as u16 {
            hole = (hole + 1) & mask;
        }
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let f = self.index[j];
            if f == NIL {
                break;
            }
            // `f` may fill the hole unless its home lies cyclically in (hole, j].
            let home = self.slot(self.tags[f as usize]);
            let stays = if hole <= j { hole < home && home <= j } else { hole < home || home <= j };
            if !stays {
                self.index[hole] = f;
                hole = j;
            }
        }
        self.index[hole] = NIL;
    }

    #[inline(always)]
    fn unlink(&mut self, i: usize) {
        let (p, n) = (self.prev[i], self.next[i]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
    }

    #[inline(always)]
    fn push_front(&mut self, i: usize) {
        self.prev[i] = NIL;
        self.next[i] = self.head;
        if self.head == NIL {
            self.tail = i as u16;
        } else {
            self.prev[self.head as usize] = i as u16;
        }
        self.head = i as u16;
    }
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
    /// The `written` mask of a fully written XPLine.
    full: u8,
    entries: usize,
    /// The interleave chunk located last (`u64::MAX`: none), its DIMM and its
    /// base in that DIMM's address space: consecutive PM accesses mostly fall
    /// in one chunk, and the DIMM of a chunk costs a division otherwise.
    memo_chunk: u64,
    memo_dimm: usize,
    memo_base: u64,
}

impl Optane {
    pub fn new(cfg: &OptaneConfig) -> Self {
        let sub = cfg.xpline_bytes / 64;
        let entries = cfg.xpbuffer_entries as usize;
        Optane {
            dimms: vec![Dimm::new(entries); cfg.dimms as usize],
            n: cfg.dimms as u64,
            n_shift: cfg.dimms.is_power_of_two().then(|| cfg.dimms.trailing_zeros()),
            magic: if cfg.dimms.is_power_of_two() { 0 } else { u64::MAX / cfg.dimms as u64 + 1 },
            interleave_shift: cfg.interleave_bytes.trailing_zeros(),
            xpline_shift: cfg.xpline_bytes.trailing_zeros(),
            full: if sub >= 8 { u8::MAX } else { (1u8 << sub) - 1 },
            entries,
            memo_chunk: u64::MAX,
            memo_dimm: 0,
            memo_base: 0,
        }
    }

    pub fn dimms(&self) -> usize {
        self.dimms.len()
    }

    /// The DIMM holding `addr`.
    #[inline(always)]
    pub fn dimm_of(&self, addr: u64) -> usize {
        self.divmod(addr >> self.interleave_shift).1 as usize
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
        let (q, dimm) = self.divmod(addr >> self.interleave_shift);
        let local = q << self.interleave_shift | (addr & ((1u64 << self.interleave_shift) - 1));
        (dimm as usize, local >> self.xpline_shift, ((local >> 6) & ((1 << (self.xpline_shift - 6)) - 1)) as u32)
    }

    /// [`Optane::locate`], remembering the last chunk.
    #[inline(always)]
    fn locate_memo(&mut self, addr: u64) -> (usize, u64, u32) {
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
        let (entries, full) = (self.entries, self.full);
        let d = &mut self.dimms[di];
        d.counters.writes += 1;
        let sequential = d.last_xpline != EMPTY && (xpl == d.last_xpline || xpl == d.last_xpline.wrapping_add(1));
        d.counters.sequential_writes += sequential as u64;
        d.last_xpline = xpl;
        let bit = 1u8 << part;
        if let Some(i) = d.find(xpl) {
            d.written[i] |= bit;
            if d.head as usize != i {
                d.unlink(i);
                d.push_front(i);
            }
            d.counters.xpbuffer_hits += 1;
            return WriteOutcome { dimm: di as u32, hit: true, sequential, evicted: false };
        }
        let evicted = d.used == entries;
        let i = if evicted {
            let v = d.tail as usize;
            let partial = (d.written[v] != full) as u64;
            d.counters.media_writes += 1;
            d.counters.media_reads += partial;
            d.counters.rmw_reads += partial;
            d.unlink(v);
            d.index_remove(v);
            v
        } else {
            d.used += 1;
            d.used - 1
        };
        d.tags[i] = xpl;
        d.written[i] = bit;
        d.index_insert(i);
        d.push_front(i);
        WriteOutcome { dimm: di as u32, hit: false, sequential, evicted }
    }

    /// A cache fill of the line holding `addr`: served by the XPBuffer if its
    /// XPLine is there, else read from the media (not kept: the buffer is
    /// modelled as a write buffer).
    #[inline]
    pub fn read(&mut self, addr: u64) {
        let (di, xpl, _) = self.locate_memo(addr);
        let d = &mut self.dimms[di];
        d.counters.reads += 1;
        if d.find(xpl).is_none() {
            d.counters.media_reads += 1;
        }
    }

    /// Counters per DIMM, with the XPLines still buffered counted as written
    /// back (they are in the persistence domain and reach the media eventually;
    /// counting them makes four combined 64 B writes one media write even on a
    /// trace that ends right after them).
    pub fn drained_counters(&self) -> Vec<DimmCounters> {
        self.dimms
            .iter()
            .map(|d| {
                let mut c = d.counters;
                c.media_writes += d.used as u64;
                let partial = d.written[..d.used].iter().filter(|&&w| w != self.full).count() as u64;
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

    fn optane(dimms: u32, entries: u32) -> Optane {
        Optane::new(&OptaneConfig { dimms, interleave_bytes: 4096, xpline_bytes: 256, xpbuffer_entries: entries })
    }

    #[test]
    fn four_lines_combine_into_one_media_write() {
        let mut o = optane(6, 64);
        let w: Vec<_> = (0..4).map(|i| o.write(0x10000 + i * 64)).collect();
        assert!(!w[0].hit && w[1..].iter().all(|w| w.hit && w.sequential));
        let c = o.drained_counters();
        assert_eq!(c.iter().map(|c| c.media_writes).sum::<u64>(), 1);
        assert_eq!(c.iter().map(|c| c.media_reads).sum::<u64>(), 0, "a full XPLine needs no read");
    }

    #[test]
    fn the_buffer_is_an_lru_of_its_entries() {
        // A reference LRU (a list, most recent first) against the model, on
        // XPLines chosen to collide in the hash index.
        let mut o = optane(1, 8);
        let mut lru: Vec<u64> = Vec::new();
        let mut x = 7u64;
        for _ in 0..20_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let xpl = (x >> 33) % 24;
            let hit = o.write(xpl * 256).hit;
            let pos = lru.iter().position(|&l| l == xpl);
            assert_eq!(hit, pos.is_some());
            if let Some(p) = pos {
                lru.remove(p);
            } else if lru.len() == 8 {
                lru.pop();
            }
            lru.insert(0, xpl);
        }
        let d = &o.dimms[0];
        let mut held: Vec<u64> = d.tags[..d.used].to_vec();
        held.sort();
        lru.sort();
        assert_eq!(held, lru);
    }

    #[test]
    fn reciprocal_division_is_exact() {
        let mut x = 0x1234_5678_9abc_def1u64;
        for n in (1..=70).chain([96, 1000, 4093, 4096]) {
            let o = optane(n, 1);
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
        let mut o = optane(6, 64);
        assert_eq!(o.locate(0), (0, 0, 0));
        assert_eq!(o.locate(4096), (1, 0, 0));
        assert_eq!(o.locate(6 * 4096 + 64), (0, 16, 1), "the DIMM's second chunk follows its first");
        // The remembered chunk gives the same answers, in any order.
        for a in [0u64, 64, 4096, 4096 + 4032, 6 * 4096 + 64, 7 * 4096, 0x7f3a_0000_1240, 0x7f3a_0000_1280, 5] {
            assert_eq!(o.locate_memo(a), o.locate(a), "{a:#x}");
        }
    }

    #[test]
    fn lru_eviction_with_partial_lines_reads_the_media() {
        let mut o = optane(1, 2);
        o.write(0);
        o.write(256);
        o.write(0); // 0 most recent
        let w = o.write(512); // evicts 256
        assert!(w.evicted && !w.hit && !w.sequential);
        assert!(o.write(0).hit);
        assert!(!o.write(256).hit);
        let c = o.drained_counters()[0];
        assert_eq!((c.media_writes, c.media_reads, c.rmw_reads), (4, 4, 4));
    }
}
