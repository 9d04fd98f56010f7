//! Line → time of its latest flush: the table behind the reflush-distance
//! tracker, looked up on every flush.
//!
//! A hash table of lines spreads neighbouring lines over the whole table, so
//! once it outgrows the L1 cache nearly every flush waits for a miss, and each
//! lookup hashes and probes. Allocators flush lines in clusters (a slab header
//! and its bitmap, WAL entries side by side, consecutive objects), so this
//! table is kept by chunk of 64 lines (4 KB of address space, 256 B of times):
//! a line's time is one load from its chunk, and the chunk is found in a small
//! direct-mapped cache of chunks (a hash lookup only when the cache misses,
//! which an allocator's few hot areas rarely make it do). Chunks are small so
//! that lines spread thinly (one slab header per 64 KB) cost little memory and
//! little to renumber.

use crate::fastmap::U64Map;

/// Lines per chunk (a power of two).
const CHUNK_LINES: usize = 64;
/// Entries of the chunk cache (a power of two).
const CACHE: usize = 256;

/// The time of a line never flushed.
pub const NEVER: u32 = u32::MAX;

#[derive(Clone, Debug)]
pub struct LineTimes {
    /// Chunk number (line number / CHUNK_LINES) → position in `chunks`.
    index: U64Map,
    chunks: Vec<[u32; CHUNK_LINES]>,
    /// Recently used chunks by chunk number modulo CACHE: (chunk number,
    /// position); `u64::MAX` marks an empty entry.
    cache: [(u64, u32); CACHE],
}

impl Default for LineTimes {
    fn default() -> Self {
        Self::new()
    }
}

impl LineTimes {
    /// An empty table; allocates nothing until the first lookup.
    pub fn new() -> Self {
        LineTimes { index: U64Map::new(), chunks: Vec::new(), cache: [(u64::MAX, 0); CACHE] }
    }

    /// The time of line number `line` (an address / 64), [`NEVER`] if it was
    /// never set.
    #[inline(always)]
    pub fn slot(&mut self, line: u64) -> &mut u32 {
        let chunk = line / CHUNK_LINES as u64;
        let (tag, pos) = self.cache[(chunk % CACHE as u64) as usize];
        let pos = if tag == chunk { pos } else { self.find(chunk) };
        &mut self.chunks[pos as usize][(line % CHUNK_LINES as u64) as usize]
    }

    /// The position of `chunk`, adding it the first time; it enters the cache.
    #[inline(never)]
    fn find(&mut self, chunk: u64) -> u32 {
        let next = self.chunks.len() as u32;
        let (pos, new) = self.index.get_or_insert(chunk, next);
        if new {
            self.chunks.push([NEVER; CHUNK_LINES]);
        }
        self.cache[(chunk % CACHE as u64) as usize] = (chunk, pos);
        pos
    }

    /// Replaces every time set by `f` of it (in no particular order).
    pub fn renumber(&mut self, mut f: impl FnMut(u32) -> u32) {
        for chunk in &mut self.chunks {
            for t in chunk.iter_mut() {
                if *t != NEVER {
                    *t = f(*t);
                }
            }
        }
    }

    /// Lines the table has room for (64 per chunk): what walking
    /// [`LineTimes::renumber`] costs.
    pub fn slots(&self) -> usize {
        self.chunks.len() * CHUNK_LINES
    }

    /// Bytes held, for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        self.index.heap_bytes() + self.chunks.len() * CHUNK_LINES * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn behaves_like_a_map_of_lines() {
        let mut t = LineTimes::new();
        let mut r: HashMap<u64, u32> = HashMap::new();
        let mut x = 99u64;
        for i in 0..50_000u32 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            // Clustered lines, far-apart lines and the largest line numbers.
            let line = match i % 3 {
                0 => (x >> 50) % 3000,
                1 => (x >> 40) % 200_000,
                _ => (u64::MAX >> 6) - (x >> 60),
            };
            let s = t.slot(line);
            assert_eq!(*s, *r.get(&line).unwrap_or(&NEVER));
            *s = i;
            r.insert(line, i);
        }
        let mut got = Vec::new();
        t.renumber(|v| {
            got.push(v);
            v
        });
        let mut want: Vec<u32> = r.values().copied().collect();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want);
    }
}
