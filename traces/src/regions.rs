//! Address → region lookup: which named range (slab headers, WAL, user data, …)
//! an address falls in, so every statistic can be broken down by region.

use crate::event::{Category, Event};
use crate::header::Region;

/// The regions known at a point of a trace: the header's table plus the
/// `RegionAdd`/`RegionRemove` events seen so far.
#[derive(Clone, Debug, Default)]
pub struct RegionMap {
    /// Sorted by `base`; regions do not overlap (a later add replaces overlapped ones).
    sorted: Vec<Region>,
}

impl RegionMap {
    pub fn new(initial: &[Region]) -> Self {
        let mut m = RegionMap::default();
        for r in initial {
            m.add(r.clone());
        }
        m
    }

    /// Adds a region; a region it overlaps, or one with the same id, is dropped.
    pub fn add(&mut self, r: Region) {
        let end = r.base.saturating_add(r.len);
        self.sorted.retain(|o| o.id != r.id && (o.base.saturating_add(o.len) <= r.base || o.base >= end));
        let at = self.sorted.partition_point(|o| o.base < r.base);
        self.sorted.insert(at, r);
    }

    pub fn remove(&mut self, id: u64) {
        self.sorted.retain(|o| o.id != id);
    }

    /// Applies a region event; other events are ignored. Returns whether it was one.
    pub fn apply(&mut self, ev: &Event<'_>) -> bool {
        match *ev {
            Event::RegionAdd { id, category, base, len, name } => {
                self.add(Region { id, name: name.to_string(), category, base, len });
                true
            }
            Event::RegionRemove { id } => {
                self.remove(id);
                true
            }
            _ => false,
        }
    }

    /// The region holding `addr`, if any.
    #[inline]
    pub fn lookup(&self, addr: u64) -> Option<&Region> {
        let i = self.sorted.partition_point(|o| o.base <= addr);
        let r = self.sorted.get(i.checked_sub(1)?)?;
        (addr - r.base < r.len).then_some(r)
    }

    /// The category of `addr`; addresses outside every region count as `Data`
    /// only if the caller says so, hence the option.
    #[inline]
    pub fn category(&self, addr: u64) -> Option<Category> {
        self.lookup(addr).map(|r| r.category)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Region> {
        self.sorted.iter()
    }

    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(id: u64, base: u64, len: u64) -> Region {
        Region { id, name: format!("r{id}"), category: Category::Meta, base, len }
    }

    #[test]
    fn lookup_finds_the_holder() {
        let m = RegionMap::new(&[r(1, 100, 50), r(2, 0, 10), r(3, 200, 1)]);
        assert_eq!(m.lookup(0).unwrap().id, 2);
        assert_eq!(m.lookup(9).unwrap().id, 2);
        assert!(m.lookup(10).is_none());
        assert_eq!(m.lookup(149).unwrap().id, 1);
        assert!(m.lookup(150).is_none());
        assert_eq!(m.lookup(200).unwrap().id, 3);
        assert!(m.lookup(201).is_none());
    }

    #[test]
    fn add_replaces_overlaps_and_same_id() {
        let mut m = RegionMap::new(&[r(1, 100, 50)]);
        m.add(r(2, 120, 100));
        assert_eq!(m.len(), 1);
        m.add(r(2, 0, 8));
        assert_eq!(m.lookup(0).unwrap().id, 2);
        assert!(m.lookup(120).is_none());
        m.remove(2);
        assert!(m.is_empty());
    }
}
