//! A flat open-addressing map from `u64` keys to `u32` values.
//!
//! The simulator looks up a cache-line number on every flush (to find when the
//! line was last flushed) and a region id on every region-cache miss. std's
//! `HashMap` hashes with SipHash, which alone would cost more than the rest of
//! the per-flush work; here a key is hashed with one multiplication (Fibonacci
//! hashing: the high bits of `key × 2^64/φ`) and found by linear probing in one
//! array of `(key, value)` pairs, so a hit usually touches one cache line.
//! Nothing is ever removed (lines and regions are never forgotten), which keeps
//! probing simple: no tombstones.

/// Marks an empty slot. Keys are line numbers (`addr >> 6` < 2^58) or region
/// ids; a region id of `u64::MAX` is stored aside (see `max_key`).
const EMPTY: u64 = u64::MAX;

/// `2^64 / φ`, odd: multiplying by it spreads consecutive keys (adjacent cache
/// lines) over the whole table.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

#[derive(Clone, Debug)]
pub struct U64Map {
    slots: Vec<(u64, u32)>,
    /// `64 - log2(slots.len())`: the shift that keeps the hash's top bits.
    shift: u32,
    len: usize,
    /// The value of key `u64::MAX`, which cannot live in `slots`.
    max_key: Option<u32>,
}

impl Default for U64Map {
    fn default() -> Self {
        Self::new()
    }
}

impl U64Map {
    /// An empty map; allocates nothing until the first insert.
    pub fn new() -> Self {
        U64Map { slots: Vec::new(), shift: 64, len: 0, max_key: None }
    }

    pub fn len(&self) -> usize {
        self.len + self.max_key.is_some() as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held by the table, for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<(u64, u32)>()
    }

    #[inline(always)]
    fn home(&self, key: u64) -> usize {
        (key.wrapping_mul(GOLDEN) >> self.shift) as usize
    }

    #[inline]
    pub fn get(&self, key: u64) -> Option<u32> {
        if key == EMPTY {
            return self.max_key;
        }
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            let (k, v) = self.slots[i];
            if k == key {
                return Some(v);
            }
            if k == EMPTY {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    /// Sets `key` to `value`, replacing any previous value.
    pub fn insert(&mut self, key: u64, value: u32) {
        *self.get_or_insert_mut(key, value).0 = value;
    }

    /// The value of `key`, inserting `value` first if the key is absent.
    /// Returns the value and whether it was inserted now.
    #[inline]
    pub fn get_or_insert(&mut self, key: u64, value: u32) -> (u32, bool) {
        let (v, new) = self.get_or_insert_mut(key, value);
        (*v, new)
    }

    /// Like [`U64Map::get_or_insert`], but the value can be changed in place.
    #[inline]
    pub fn get_or_insert_mut(&mut self, key: u64, value: u32) -> (&mut u32, bool) {
        if key == EMPTY {
            let new = self.max_key.is_none();
            return (self.max_key.get_or_insert(value), new);
        }
        match self.probe(key) {
            Ok(i) => (&mut self.slots[i].1, false),
            Err(i) => (self.insert_new(i, key, value), true),
        }
    }

    /// The slot holding `key` (`Ok`), or the empty slot where it would go.
    /// A hit (nearly every lookup) only probes; the load check is on the
    /// insert path.
    #[inline(always)]
    fn probe(&mut self, key: u64) -> Result<usize, usize> {
        if self.slots.is_empty() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            let k = self.slots[i].0;
            if k == key {
                return Ok(i);
            }
            if k == EMPTY {
                return Err(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// Puts a key that is not in the table at empty slot `i`, or, if the
    /// table is then more than half full, into a table twice the size.
    #[cold]
    #[inline(never)]
    fn insert_new(&mut self, mut i: usize, key: u64, value: u32) -> &mut u32 {
        // Grow at a load factor of 1/2: linear probing stays short there.
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
            let mask = self.slots.len() - 1;
            i = self.home(key);
            while self.slots[i].0 != EMPTY {
                i = (i + 1) & mask;
            }
        }
        self.slots[i] = (key, value);
        self.len += 1;
        &mut self.slots[i].1
    }

    /// Every value, mutably (in no particular order).
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut u32> {
        self.slots.iter_mut().filter(|(k, _)| *k != EMPTY).map(|(_, v)| v).chain(self.max_key.as_mut())
    }

    #[cold]
    fn grow(&mut self) {
        let cap = (self.slots.len() * 2).max(16);
        let old = std::mem::replace(&mut self.slots, vec![(EMPTY, 0); cap]);
        self.shift = 64 - cap.trailing_zeros();
        let mask = cap - 1;
        for (k, v) in old.into_iter().filter(|&(k, _)| k != EMPTY) {
            let mut i = self.home(k);
            while self.slots[i].0 != EMPTY {
                i = (i + 1) & mask;
            }
            self.slots[i] = (k, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn behaves_like_a_hashmap() {
        let mut m = U64Map::new();
        let mut r = HashMap::new();
        let mut x = 12345u64;
        for i in 0..20_000u32 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let key = match i % 4 {
                0 => x >> 40,
                1 => i as u64,
                2 => u64::MAX - (i as u64 % 3),
                _ => x,
            };
            if i % 3 == 0 {
                m.insert(key, i);
                r.insert(key, i);
            } else {
                let (v, new) = m.get_or_insert(key, i);
                let e = r.entry(key);
                let existed = matches!(e, std::collections::hash_map::Entry::Occupied(_));
                assert_eq!(new, !existed);
                assert_eq!(v, *e.or_insert(i));
            }
        }
        assert_eq!(m.len(), r.len());
        for (k, v) in &r {
            assert_eq!(m.get(*k), Some(*v));
        }
        assert_eq!(m.get(777_777_777_777), r.get(&777_777_777_777).copied());
    }
}
