//! A multi-layer bitset in DRAM (Metall §4.3.1): slots, one bit each (1 =
//! in use), with a layer above every 64 words whose bit says "that word is
//! full". Finding a free slot reads one word per layer — three at most for
//! the 2^18 slots of 8 B objects in a Metall chunk of 2 MiB. Metall keeps a
//! small chunk's slots in it (only the leaf layer is written to the
//! datastore); the PAllocator-style allocator a page's blocks (its
//! persistent state is the page's 2-byte entries).

/// A bitset of `len` slots with full-word summary layers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultiLayerBitset {
    len: u64,
    /// `layers[0]` is the leaf layer; the last layer is a single word.
    layers: Vec<Vec<u64>>,
}

impl MultiLayerBitset {
    /// All `len` slots free.
    pub fn new(len: u64) -> MultiLayerBitset {
        assert!(len > 0, "a bitset of no slots");
        let mut layers = Vec::new();
        let mut entries = len;
        loop {
            let words = entries.div_ceil(64);
            let mut v = vec![0u64; words as usize];
            // Bits past the last entry count as used, so they are never found.
            if !entries.is_multiple_of(64) {
                v[words as usize - 1] = !0 << (entries % 64);
            }
            layers.push(v);
            if words == 1 {
                break;
            }
            entries = words;
        }
        MultiLayerBitset { len, layers }
    }

    /// A bitset with the given leaf words (as [`MultiLayerBitset::leaves`] gave them).
    pub fn from_leaves(len: u64, leaves: &[u64]) -> Option<MultiLayerBitset> {
        let mut b = MultiLayerBitset::new(len);
        if leaves.len() != b.layers[0].len() {
            return None;
        }
        let pad = b.layers[0][leaves.len() - 1];
        if leaves[leaves.len() - 1] & pad != pad {
            return None;
        }
        for (i, &w) in leaves.iter().enumerate() {
            b.layers[0][i] = w;
            if w == !0 {
                b.set_up(1, i as u64);
            }
        }
        Some(b)
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The leaf words (padding bits set).
    pub fn leaves(&self) -> &[u64] {
        &self.layers[0]
    }

    pub fn test(&self, i: u64) -> bool {
        self.layers[0][(i / 64) as usize] >> (i % 64) & 1 == 1
    }

    /// Marks word `word` of layer `l - 1` full in layer `l`, and so on up.
    fn set_up(&mut self, mut l: usize, mut word: u64) {
        while l < self.layers.len() {
            let w = &mut self.layers[l][(word / 64) as usize];
            *w |= 1 << (word % 64);
            if *w != !0 {
                return;
            }
            word /= 64;
            l += 1;
        }
    }

    /// Takes the first free slot, or `None` if all are in use.
    pub fn find_and_set(&mut self) -> Option<u64> {
        let top = self.layers.len() - 1;
        let mut idx = 0u64;
        for l in (0..=top).rev() {
            let w = self.layers[l][idx as usize];
            let bit = (!w).trailing_zeros() as u64;
            if bit == 64 {
                debug_assert_eq!(l, top, "a summary bit said a word had room");
                return None;
            }
            idx = idx * 64 + bit;
        }
        let w = &mut self.layers[0][(idx / 64) as usize];
        *w |= 1 << (idx % 64);
        if *w == !0 {
            self.set_up(1, idx / 64);
        }
        Some(idx)
    }

    /// Marks slot `i` in use; false if it was in use already.
    pub fn set(&mut self, i: u64) -> bool {
        assert!(i < self.len, "slot {i} of a bitset of {}", self.len);
        let w = &mut self.layers[0][(i / 64) as usize];
        if *w >> (i % 64) & 1 == 1 {
            return false;
        }
        *w |= 1 << (i % 64);
        if *w == !0 {
            self.set_up(1, i / 64);
        }
        true
    }

    /// Slots in use (the leaf bits set, padding excluded).
    pub fn count(&self) -> u64 {
        let pad = (self.layers[0].len() as u64 * 64 - self.len) as u32;
        self.layers[0].iter().map(|w| w.count_ones() as u64).sum::<u64>() - pad as u64
    }

    /// Whether every summary bit says exactly whether the word below it is full.
    pub fn summaries_agree(&self) -> bool {
        self.layers
            .windows(2)
            .all(|l| l[0].iter().enumerate().all(|(i, &w)| (l[1][i / 64] >> (i % 64) & 1 == 1) == (w == !0)))
    }

    /// Frees slot `i`; false if it was free.
    pub fn clear(&mut self, i: u64) -> bool {
        assert!(i < self.len, "slot {i} of a bitset of {}", self.len);
        let (mut word, bit) = (i / 64, i % 64);
        let w = &mut self.layers[0][word as usize];
        if *w >> bit & 1 == 0 {
            return false;
        }
        *w &= !(1 << bit);
        for l in 1..self.layers.len() {
            let w = &mut self.layers[l][(word / 64) as usize];
            let m = 1u64 << (word % 64);
            if *w & m == 0 {
                break;
            }
            *w &= !m;
            word /= 64;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_slot_once_then_reuses_freed_ones() {
        for len in [1u64, 63, 64, 65, 4096, 4097, 1 << 18] {
            let mut b = MultiLayerBitset::new(len);
            for i in 0..len {
                assert_eq!(b.find_and_set(), Some(i), "len {len}");
            }
            assert_eq!(b.find_and_set(), None, "len {len}: full");
            let mid = len / 2;
            assert!(b.clear(mid));
            assert!(!b.clear(mid), "double clear refused");
            assert_eq!(b.find_and_set(), Some(mid));
            assert!(b.clear(len - 1));
            let c = MultiLayerBitset::from_leaves(len, b.leaves()).unwrap();
            assert_eq!(c, b, "leaves rebuild the summary layers");
            assert_eq!(b.find_and_set(), Some(len - 1));
        }
        assert_eq!(MultiLayerBitset::new(1 << 18).layers.len(), 3, "64^3 slots in three layers");
    }

    #[test]
    fn set_keeps_the_summaries() {
        let len = 64 * 64 + 5;
        let mut b = MultiLayerBitset::new(len);
        for i in (0..len).filter(|i| i % 7 != 3) {
            assert!(b.set(i));
        }
        assert!(!b.set(0), "a slot in use is refused");
        assert!(b.summaries_agree());
        let free: Vec<u64> = std::iter::from_fn(|| b.find_and_set()).collect();
        assert_eq!(free, (0..len).filter(|i| i % 7 == 3).collect::<Vec<_>>());
        assert_eq!(b.count(), len);
    }
}
