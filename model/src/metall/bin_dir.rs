//! Metall's bin directory (Metall §4.3.2): per bin (internal allocation
//! size), the non-full chunks of that size, used LIFO, together with the
//! chunks' multi-layer bitsets. One mutex per bin, so different sizes
//! allocate and free concurrently.

use crate::mech::bitset::MultiLayerBitset;
use std::collections::HashMap;

/// A chunk of small objects: its slots and how many are in use.
#[derive(Clone, Debug)]
pub struct SmallChunk {
    pub bits: MultiLayerBitset,
    pub used: u64,
}

/// One bin's state (behind the bin's mutex).
#[derive(Debug, Default)]
pub struct Bin {
    /// Non-full chunks, LIFO.
    pub nonfull: Vec<u64>,
    /// Every chunk of this bin, by chunk number.
    pub chunks: HashMap<u64, SmallChunk>,
}

impl Bin {
    /// Takes a slot from the most recently pushed non-full chunk: `(chunk, slot)`.
    pub fn take(&mut self) -> Option<(u64, u64)> {
        let &c = self.nonfull.last()?;
        let sc = self.chunks.get_mut(&c).expect("a non-full chunk of this bin");
        let slot = sc.bits.find_and_set().expect("a non-full chunk has a free slot");
        sc.used += 1;
        if sc.used == sc.bits.len() {
            self.nonfull.pop();
        }
        Some((c, slot))
    }

    /// Adds a fresh chunk of `slots` slots as the next one to allocate from.
    pub fn adopt(&mut self, c: u64, slots: u64) {
        self.chunks.insert(c, SmallChunk { bits: MultiLayerBitset::new(slots), used: 0 });
        self.nonfull.push(c);
    }

    /// Frees `slot` of chunk `c`; true when the chunk became empty (and left the bin).
    /// A full chunk goes back on the non-full list unless `requeue` is false
    /// (the [`Mutation::NonfullLost`](super::Mutation::NonfullLost) bug).
    ///
    /// # Panics
    /// On a double free or a chunk that is not this bin's.
    pub fn free(&mut self, c: u64, slot: u64, requeue: bool) -> bool {
        let sc = self.chunks.get_mut(&c).unwrap_or_else(|| panic!("chunk {c} holds no objects of this bin"));
        assert!(sc.bits.clear(slot), "double free of slot {slot} in chunk {c}");
        let was_full = sc.used == sc.bits.len();
        sc.used -= 1;
        if sc.used == 0 {
            self.chunks.remove(&c);
            if let Some(i) = self.nonfull.iter().rposition(|&x| x == c) {
                self.nonfull.remove(i);
            }
            return true;
        }
        if was_full && requeue {
            self.nonfull.push(c);
        }
        false
    }

    /// Checks bin `b`'s chunks: each one's count of slots in use is its
    /// bitset's, and its summary layers agree with its leaves; the non-full
    /// list holds each chunk with a free slot exactly once, and no other.
    pub fn check(&self, b: usize) -> Result<(), String> {
        for (&c, sc) in &self.chunks {
            let n = sc.bits.count();
            if n != sc.used || n == 0 {
                return Err(format!("bin {b}, chunk {c}: {} slots counted in use, bitset has {n}", sc.used));
            }
            if !sc.bits.summaries_agree() {
                return Err(format!("bin {b}, chunk {c}: bitset summary layers disagree with its leaves"));
            }
            let listed = self.nonfull.iter().filter(|&&x| x == c).count();
            let want = (sc.used < sc.bits.len()) as usize;
            if listed != want {
                return Err(format!(
                    "bin {b}, chunk {c}: {} of {} slots in use but listed {listed} time(s) as non-full",
                    sc.used,
                    sc.bits.len()
                ));
            }
        }
        if let Some(c) = self.nonfull.iter().find(|c| !self.chunks.contains_key(c)) {
            return Err(format!("bin {b}: non-full list names chunk {c}, which is not the bin's"));
        }
        Ok(())
    }
}
