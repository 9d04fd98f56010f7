//! Metall's chunk directory (Metall §4.3.1): the status of every chunk of
//! the application data segment — empty, holding small objects of one bin
//! (with its multi-layer bitset, kept by the bin), or part of a large
//! object. Empty chunks are found by probing the array in order.

use std::sync::atomic::{AtomicU32, Ordering};

/// What a chunk holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkKind {
    Empty,
    /// Small objects of bin `bin`.
    Small {
        bin: u8,
    },
    /// The first chunk of a large object of `span` chunks.
    LargeHead {
        span: u32,
    },
    /// A later chunk of a large object.
    LargeBody,
}

impl ChunkKind {
    /// Packed into one word (the lock-free mirror and the datastore file).
    pub fn pack(self) -> u32 {
        match self {
            ChunkKind::Empty => 0,
            ChunkKind::Small { bin } => 1 | (bin as u32) << 8,
            ChunkKind::LargeHead { span } => {
                assert!(span < 1 << 24, "large object of {span} chunks");
                2 | span << 8
            }
            ChunkKind::LargeBody => 3,
        }
    }

    pub fn unpack(w: u32) -> Option<ChunkKind> {
        match w & 0xff {
            0 if w == 0 => Some(ChunkKind::Empty),
            1 if w >> 16 == 0 => Some(ChunkKind::Small { bin: (w >> 8) as u8 }),
            2 if w >> 8 > 0 => Some(ChunkKind::LargeHead { span: w >> 8 }),
            3 if w == 3 => Some(ChunkKind::LargeBody),
            _ => None,
        }
    }
}

/// The chunk directory. Changes happen under the directory's mutex; each
/// entry is an atomic so that `free` can look its chunk up without it.
#[derive(Debug)]
pub struct ChunkDirectory {
    entries: Box<[AtomicU32]>,
}

impl ChunkDirectory {
    /// `n` empty chunks.
    pub fn new(n: u64) -> ChunkDirectory {
        ChunkDirectory { entries: (0..n).map(|_| AtomicU32::new(0)).collect() }
    }

    pub fn len(&self) -> u64 {
        self.entries.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    #[inline]
    pub fn get(&self, c: u64) -> ChunkKind {
        ChunkKind::unpack(self.entries[c as usize].load(Ordering::Acquire)).expect("valid entry")
    }

    pub fn set(&self, c: u64, k: ChunkKind) {
        self.entries[c as usize].store(k.pack(), Ordering::Release);
    }

    /// Chunks below the highest one in use (what the datastore records).
    pub fn high_water(&self) -> u64 {
        (0..self.len()).rev().find(|&c| self.get(c) != ChunkKind::Empty).map_or(0, |c| c + 1)
    }

    /// Takes the first run of `n` empty chunks (sequential probe); the caller holds the directory lock.
    pub fn take(&self, n: u64, kind: ChunkKind) -> Option<u64> {
        let mut run = 0;
        for c in 0..self.len() {
            if self.get(c) == ChunkKind::Empty {
                run += 1;
                if run == n {
                    let first = c + 1 - n;
                    self.set(first, kind);
                    for b in first + 1..=c {
                        self.set(b, ChunkKind::LargeBody);
                    }
                    return Some(first);
                }
            } else {
                run = 0;
            }
        }
        None
    }

    /// Empties `n` chunks from `c`; the caller holds the directory lock.
    pub fn release(&self, c: u64, n: u64) {
        for b in c..c + n {
            self.set(b, ChunkKind::Empty);
        }
    }
}
