//! Arenas (NVAlloc §4.2): the slabs of small allocations, one arena per core,
//! each behind its own lock, with a list of partially free slabs per size class
//! (`freelist_slab`). A thread is bound to the arena with the fewest threads
//! and refills its tcache from it; a block goes back to the arena of its slab.
//!
//! The lock is taken only on a tcache refill (once per bin's worth of
//! allocations), when a freed block finds its sub-tcache full, and when a
//! thread exits — never on the malloc/free fast path.
//!
//! Slab morphing (§5.2): the arena keeps its slabs on an LRU list (least
//! recently refilled from or returned to at the head). When a refill finds no
//! partial slab of its class, [`Arena::refill`] first scans the list from the
//! head for a regular slab of another class with fewer than `su` of its blocks
//! allocated and none cached in any tcache, whose new header and index table
//! miss every live old block, and morphs it (see [`super::slab`] for the
//! steps). A morph must not race a free of one of the slab's blocks on
//! another thread (that thread reads the slab's class without the arena
//! lock): frees take `morph_guard` shared, a morph takes it exclusively.

use super::config::{Consistency, Mutation};
use super::layout::SLAB;
use super::slab::{self, LruLinks, Morph, SlabHeader, SlabInfo, Take, VSlab, INDEX_LIVE, NIL};
use super::tcache::Tcache;
use super::thread::op;
use super::NvAlloc;
use crate::heap::PmOff;
use crate::intmap::IntMap;
use crate::mech::stripe::BITS_PER_LINE;
use crate::mech::wal::{WalCursor, WalEntry};
use crate::pm::PmThread;
use pmsim_traces::OpKind;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};

/// What an arena's lock protects.
pub struct ArenaInner {
    /// The vslabs of the arena's slabs, by slab offset.
    pub slabs: IntMap<u64, VSlab>,
    /// Per size class: slabs with free blocks, by address (lowest first, for locality).
    pub partial: Vec<BTreeSet<u64>>,
    /// The LRU list of regular slabs, linked through their vslabs
    /// ([`LruLinks`]): a use moves a slab to the tail in constant time, as
    /// the modelled code's intrusive list does, where an ordered map by stamp
    /// cost a removal and an insertion on every block returned.
    lru: LruEnds,
    clock: u64,
}

/// The ends of an arena's LRU list ([`NIL`]: empty).
#[derive(Clone, Copy)]
struct LruEnds {
    head: u64,
    tail: u64,
}

impl ArenaInner {
    /// Moves `slab` to the LRU tail (most recently used), if it is regular;
    /// each use is a tick of the arena's clock.
    fn touch(&mut self, slab: u64) {
        let Some(v) = self.slabs.get_mut(&slab) else { return };
        if v.morph.is_some() {
            return;
        }
        self.clock += 1;
        v.stamp = self.clock;
        if self.lru.tail == slab {
            return;
        }
        self.forget(slab);
        let tail = self.lru.tail;
        let v = self.slabs.get_mut(&slab).expect("checked above");
        v.lru = LruLinks { prev: tail, next: NIL, linked: true };
        match tail {
            NIL => self.lru.head = slab,
            t => self.slabs.get_mut(&t).expect("LRU tail has a vslab").lru.next = slab,
        }
        self.lru.tail = slab;
    }

    /// Takes `slab` off the LRU list, if it is on it.
    fn forget(&mut self, slab: u64) {
        let Some(v) = self.slabs.get_mut(&slab).filter(|v| v.lru.linked) else { return };
        let LruLinks { prev, next, .. } = std::mem::take(&mut v.lru);
        match prev {
            NIL => self.lru.head = next,
            p => self.slabs.get_mut(&p).expect("LRU neighbour has a vslab").lru.next = next,
        }
        match next {
            NIL => self.lru.tail = prev,
            n => self.slabs.get_mut(&n).expect("LRU neighbour has a vslab").lru.prev = prev,
        }
    }

    /// The LRU list from its head (least recently used): (stamp, slab).
    fn lru_order(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut at = self.lru.head;
        std::iter::from_fn(move || {
            (at != NIL).then(|| {
                let v = &self.slabs[&at];
                let here = (v.stamp, at);
                at = v.lru.next;
                here
            })
        })
    }
}

/// One arena.
pub struct Arena {
    pub id: usize,
    /// Thread handles bound to it.
    pub threads: AtomicUsize,
    /// Not a traced lock ([`crate::mech::lock`]): NVAlloc's code keeps
    /// 4 × CPUs arenas, so on the machine the contention replay models (a
    /// core per thread) no two threads share one; pmsim's fewer arenas
    /// (`arenas`, the CPUs of the machine that ran) are its simplification.
    pub inner: Mutex<ArenaInner>,
    /// Held shared by frees of blocks of this arena's slabs, exclusively by a morph.
    pub morph_guard: RwLock<()>,
    /// Slabs morphed, and slab_ins that became regular again.
    pub morphs: AtomicU64,
    pub unmorphs: AtomicU64,
}

impl Arena {
    pub fn new(id: usize, classes: usize) -> Arena {
        Arena {
            id,
            threads: AtomicUsize::new(0),
            inner: Mutex::new(ArenaInner {
                slabs: IntMap::default(),
                partial: vec![BTreeSet::new(); classes],
                lru: LruEnds { head: NIL, tail: NIL },
                clock: 0,
            }),
            morph_guard: RwLock::new(()),
            morphs: AtomicU64::new(0),
            unmorphs: AtomicU64::new(0),
        }
    }

    /// Adds a recovered slab with its vslab.
    pub fn adopt(&self, slab: u64, v: VSlab) {
        let mut g = self.inner.lock().unwrap();
        if !v.is_full() {
            g.partial[v.class].insert(slab);
        }
        let regular = v.morph.is_none();
        g.slabs.insert(slab, v);
        if regular {
            g.touch(slab);
        }
    }

    /// Fills the (empty) bin of `class` in `tc` from the arena's partial slabs,
    /// making a new slab if there is none. Stops when the bin is full or the
    /// current slab's remaining blocks belong to full sub-tcaches (with
    /// `fill_all_subs`, goes on to the next partial slabs, up to one per
    /// sub-tcache). Returns whether any block was cached (false: the heap is
    /// full).
    pub fn refill(&self, nv: &NvAlloc, t: &mut PmThread, class: usize, tc: &mut Tcache) -> bool {
        let g = nv.geoms[class];
        let mut inner = self.inner.lock().unwrap();
        let mut got = 0usize;
        // The partial slab visited last (slabs are visited in address
        // order), and how many were: `fill_all_subs` visits one per
        // sub-tcache at most.
        let every_sub = nv.cfg.fill_all_subs;
        let (mut after, mut visited) = (None, 0);
        while !tc.is_full(class) {
            let next = match after {
                None => inner.partial[class].first().copied(),
                Some(a) => inner.partial[class].range(a + 1..).next().copied(),
            };
            let slab = match next.filter(|_| !every_sub || visited < tc.nsub()) {
                Some(s) => s,
                None if got > 0 => break,
                // Slab morphing (§5.2): before a new slab, a slab of another
                // class below the `su` threshold from the LRU list.
                None if nv.cfg.morphing && self.morph(nv, t, &mut inner, class, tc).is_some() => continue,
                None => {
                    let map = nv.map;
                    let made = nv.large.alloc_slab(t, |t, s| {
                        slab::init_header(t, s, class, &g, self.id, map);
                        g.data_offset as u64
                    });
                    let Some(s) = made else { break };
                    inner.slabs.insert(s, VSlab::new(class, g.nblocks));
                    inner.partial[class].insert(s);
                    inner.touch(s);
                    nv.slabs.insert(s, SlabInfo { class, arena: self.id, morph_in: false });
                    s
                }
            };
            let v = inner.slabs.get_mut(&slab).expect("partial slab has a vslab");
            v.take_free(|b| {
                if tc.is_full(class) {
                    return Take::Stop;
                }
                let sub = nv.sub_tcache(slab, b, tc.nsub());
                if !tc.has_room(class, sub) {
                    // Over a sequential bitmap a line's blocks are
                    // consecutive, and all go to this full sub-tcache.
                    return match nv.map.stripes() {
                        1 => Take::From((b / BITS_PER_LINE + 1) * BITS_PER_LINE),
                        _ => Take::Skip,
                    };
                }
                tc.push(class, sub, g.block_off(slab, b));
                got += 1;
                Take::Yes
            });
            let full = v.is_full();
            inner.touch(slab);
            if full {
                inner.partial[class].remove(&slab);
            } else if !every_sub {
                break;
            }
            after = Some(slab);
            visited += 1;
        }
        got > 0
    }

    /// Returns `blocks` (all of slabs of this arena, no longer in any tcache)
    /// to their slabs; a slab left empty goes back to the large allocator
    /// unless it is its class's only slab with free blocks.
    pub fn return_blocks(&self, nv: &NvAlloc, t: &mut PmThread, blocks: &[u64]) {
        let mut inner = self.inner.lock().unwrap();
        self.return_locked(nv, t, &mut inner, blocks);
    }

    fn return_locked(&self, nv: &NvAlloc, t: &mut PmThread, inner: &mut ArenaInner, blocks: &[u64]) {
        for &blk in blocks {
            let (slab, info) = nv.slabs.lookup(blk).expect("returned block lies in a slab");
            debug_assert_eq!(info.arena, self.id);
            let b = nv.geoms[info.class].block_index(slab, blk).expect("returned block is a block start");
            let v = inner.slabs.get_mut(&slab).expect("slab of the arena");
            let was_full = v.is_full();
            assert!(v.release(b), "block {blk:#x} returned to its slab twice");
            // A slab_in is never given back while old blocks live: they may
            // lie where no new block is (the slack after the last one), so
            // its new blocks can all be free.
            let empty = v.is_empty() && v.morph.is_none();
            if was_full {
                inner.partial[info.class].insert(slab);
            }
            inner.touch(slab);
            if empty && inner.partial[info.class].len() > 1 {
                inner.partial[info.class].remove(&slab);
                inner.forget(slab);
                inner.slabs.remove(&slab);
                nv.slabs.remove(slab);
                nv.large.free_slab(t, slab);
            }
        }
    }

    /// Morphs a slab of this arena into one of `class` (see the module
    /// documentation); returns it, now on the partial list of `class`.
    fn morph(
        &self,
        nv: &NvAlloc,
        t: &mut PmThread,
        inner: &mut ArenaInner,
        class: usize,
        tc: &mut Tcache,
    ) -> Option<u64> {
        let _excl = self.morph_guard.write().unwrap();
        let g = nv.geoms[class];
        let mut found = None;
        // A slab with blocks in a tcache cannot morph: give back this
        // thread's cached blocks of other classes in this arena's slabs
        // (rare: only when a class has no slab left), so that its own
        // frees do not keep every candidate away.
        let cached = tc.drain_other(class, |b| nv.slabs.lookup(b).is_some_and(|(_, i)| i.arena == self.id));
        if !cached.is_empty() {
            // Their WAL entries may be cleared without a fence yet.
            t.fence();
            self.return_locked(nv, t, inner, &cached);
        }
        let cfg = &nv.cfg;
        let under_su = |v: &VSlab| v.morph.is_none() && (v.used as f64) < cfg.su * v.nblocks as f64;
        if cfg.morph_candidates > 0.0 {
            // The artifact's rule: search only when candidates are plentiful.
            let (n, len) =
                inner.lru_order().fold((0, 0), |(n, len), (_, s)| (n + under_su(&inner.slabs[&s]) as usize, len + 1));
            if n as f64 <= cfg.morph_candidates * len as f64 {
                return None;
            }
        }
        for (stamp, s) in inner.lru_order() {
            let v = &inner.slabs[&s];
            let busy = cfg.morph_idle > 0 && inner.clock - stamp <= cfg.morph_idle;
            if v.class == class || !under_su(v) || busy {
                continue;
            }
            let og = nv.geoms[v.class];
            let mut live = Vec::new();
            slab::bitmap(s, nv.map).for_each_set(t, og.nblocks, |b| live.push(b));
            // A taken block that is not allocated sits in some tcache.
            if live.len() as u32 != v.used {
                continue;
            }
            let index_off = SLAB as u32 - slab::table_bytes(live.len() as u32);
            let clear = live.iter().all(|&b| {
                let start = og.data_offset + b * og.size;
                start >= g.data_offset && start + og.size <= index_off
            });
            if clear {
                found = Some((s, live, index_off));
                break;
            }
        }
        let (s, live, index_off) = found?;
        let old_class = inner.slabs[&s].class;
        let og = nv.geoms[old_class];
        t.op_begin(OpKind::Morph, s);
        let crash_after = nv.morph_crash_after.load(Ordering::Relaxed);
        let mut h: SlabHeader = t.read(PmOff::new(s));
        // Step 1: the old geometry.
        h.old_size_class = old_class as u16;
        h.old_data_offset = og.data_offset;
        slab::write_header(t, s, &h);
        h.flag = slab::FLAG_STEP1;
        slab::write_header(t, s, &h);
        if crash_after == 1 {
            return self.crashed(nv, inner, s, old_class);
        }
        // Step 2: the index table of the live old blocks.
        let table: Vec<u16> = live.iter().map(|&b| b as u16 | INDEX_LIVE).collect();
        nv.large.paint_slab_part(t, s + index_off as u64, s + SLAB, true);
        for (i, e) in table.iter().enumerate() {
            t.store::<u16>(s + index_off as u64 + 2 * i as u64, *e);
        }
        t.flush_range(s + index_off as u64, slab::table_bytes(live.len() as u32) as u64);
        h.index_off = index_off;
        h.index_len = live.len() as u32;
        slab::write_header(t, s, &h);
        h.flag = slab::FLAG_STEP2;
        if nv.cfg.mutation == Mutation::MorphFlagFlush {
            t.write(PmOff::<SlabHeader>::new(s), h);
            t.fence();
        } else {
            slab::write_header(t, s, &h);
        }
        if crash_after == 2 {
            return self.crashed(nv, inner, s, old_class);
        }
        // Step 3: the new class, offset and (empty) bitmap.
        let bm = slab::bitmap(s, nv.map);
        let area = bm.area_bytes(og.nblocks).max(bm.area_bytes(g.nblocks));
        for w in (0..area).step_by(8) {
            t.store_u64(bm.base() + w, 0);
        }
        h.size_class = class as u16;
        h.data_offset = g.data_offset;
        h.nblocks = g.nblocks;
        t.write(PmOff::<SlabHeader>::new(s), h);
        t.persist(s, slab::BITMAP_OFF + area);
        if crash_after == 3 {
            return self.crashed(nv, inner, s, old_class);
        }
        h.flag = 0;
        if live.is_empty() {
            h.old_size_class = class as u16;
            h.old_data_offset = g.data_offset;
            h.index_off = 0;
        }
        slab::write_header(t, s, &h);
        t.op_end(OpKind::Morph, s);

        let mut v = VSlab::new(class, g.nblocks);
        let morph_in = !live.is_empty();
        if morph_in {
            v.morph = Some(Box::new(Morph::build(old_class, og, &g, index_off, &table, &mut v)));
        }
        inner.forget(s);
        inner.partial[old_class].remove(&s);
        let full = v.is_full();
        inner.slabs.insert(s, v);
        if !morph_in {
            inner.touch(s);
        }
        if !full {
            inner.partial[class].insert(s);
        }
        nv.slabs.insert(s, SlabInfo { class, arena: self.id, morph_in });
        self.morphs.fetch_add(1, Ordering::Relaxed);
        (!full).then_some(s)
    }

    /// Test-only crash in the middle of a morph: the slab is dropped from the
    /// volatile state (as the dying process would lose it) and the caller
    /// carries on as if no slab had been found.
    fn crashed(&self, nv: &NvAlloc, inner: &mut ArenaInner, s: u64, old_class: usize) -> Option<u64> {
        inner.forget(s);
        inner.partial[old_class].remove(&s);
        inner.slabs.remove(&s);
        nv.slabs.remove(s);
        None
    }

    /// Frees `off` if it is a live old block of the slab_in at `slab`
    /// (bypassing the tcache): its index-table entry is cleared durably,
    /// bracketed by a WAL entry when `dest` is given (log model), and the new
    /// blocks it held back are released; the last one makes the slab a
    /// regular slab (slab_after) again. Returns the old block's size, or
    /// `None` if `off` is not a live old block (then it is a new block).
    pub fn free_old(
        &self,
        nv: &NvAlloc,
        t: &mut PmThread,
        wal: &mut WalCursor,
        slab: u64,
        off: u64,
        dest: Option<u64>,
    ) -> Option<u32> {
        let mut inner = self.inner.lock().unwrap();
        let inner = &mut *inner;
        let v = inner.slabs.get_mut(&slab)?;
        let m = v.morph.as_mut()?;
        let (ob, i) = m.live_old(off - slab)?;
        let h: SlabHeader = t.read(PmOff::new(slab));
        let entry = slab + h.index_off as u64 + 2 * i as u64;
        let gc = nv.cfg.consistency == Consistency::Gc;
        let mut slot = None;
        let artifact = nv.cfg.wal == super::config::WalMode::Artifact;
        if let Some(d) = dest {
            if gc {
                t.store_u64(d, 0);
                t.persist(d, 8);
            } else if !artifact {
                slot = Some(wal.begin(t, WalEntry { op: op::FREE_SMALL, target: off, dest: d }));
            }
        }
        t.store::<u16>(entry, ob as u16);
        t.persist(entry, 2);
        if let (Some(d), Some(s)) = (dest, slot) {
            t.store_u64(d, 0);
            t.persist(d, 8);
            wal.end(t, s);
            // Before anyone can take the released blocks.
            t.fence();
        }
        m.entries.insert(ob, (i, false));
        m.cnt_slab -= 1;
        let g = nv.geoms[v.class];
        let s0 = m.old.data_offset + ob * m.old.size;
        let size = m.old.size;
        let mut freed = m.unpin(&g, s0, s0 + size);
        let done = m.cnt_slab == 0;
        if done {
            freed.extend(m.unpin(&g, m.index_off, SLAB as u32));
            slab::finish_morph(t, slab);
            nv.large.paint_slab_part(t, slab + m.index_off as u64, slab + SLAB, false);
            v.morph = None;
        }
        let was_full = v.is_full();
        for nb in freed {
            v.release(nb);
        }
        let class = v.class;
        if was_full && !v.is_full() {
            inner.partial[class].insert(slab);
        }
        if done {
            inner.touch(slab);
            nv.slabs.insert(slab, SlabInfo { class, arena: self.id, morph_in: false });
            self.unmorphs.fetch_add(1, Ordering::Relaxed);
        }
        Some(size)
    }

    /// Binds one more thread.
    pub fn bind(&self) {
        self.threads.fetch_add(1, Ordering::Relaxed);
    }

    pub fn unbind(&self) {
        self.threads.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(inner: &ArenaInner) -> Vec<u64> {
        inner.lru_order().map(|(_, s)| s).collect()
    }

    /// The list keeps the order of last use, a use of the tail still ticks
    /// the clock, a forgotten or morphing slab is off the list, and the
    /// links agree both ways with the length.
    #[test]
    fn the_lru_list_orders_slabs_by_last_use() {
        let arena = Arena::new(0, 1);
        let mut inner = arena.inner.lock().unwrap();
        for s in [0x10000, 0x20000, 0x30000, 0x40000] {
            inner.slabs.insert(s, VSlab::new(0, 64));
            inner.touch(s);
        }
        assert_eq!(order(&inner), [0x10000, 0x20000, 0x30000, 0x40000]);
        inner.touch(0x20000);
        inner.touch(0x10000);
        assert_eq!(order(&inner), [0x30000, 0x40000, 0x20000, 0x10000]);
        let before = inner.clock;
        inner.touch(0x10000);
        assert_eq!(inner.clock, before + 1, "a use of the tail is a tick too");
        assert_eq!(inner.slabs[&0x10000].stamp, inner.clock);
        inner.forget(0x40000);
        inner.forget(0x40000);
        assert_eq!(order(&inner), [0x30000, 0x20000, 0x10000]);
        let g = slab::SlabGeom { size: 1024, data_offset: 1024, nblocks: 63 };
        let v = inner.slabs.get_mut(&0x30000).unwrap();
        v.morph = Some(Box::new(Morph::build(0, g, &g, 0, &[], v)));
        inner.forget(0x30000);
        inner.touch(0x30000);
        assert_eq!(order(&inner), [0x20000, 0x10000], "a morphing slab stays off the list");
        inner.touch(0x40000);
        assert_eq!(order(&inner), [0x20000, 0x10000, 0x40000]);
        assert_eq!(inner.lru_order().count(), 3);
        let stamps: Vec<u64> = inner.lru_order().map(|(t, _)| t).collect();
        assert!(stamps.windows(2).all(|w| w[0] < w[1]), "stamps rise along the list: {stamps:?}");
        let back: Vec<u64> =
            std::iter::successors(Some(inner.lru.tail), |&s| Some(inner.slabs[&s].lru.prev).filter(|&p| p != NIL))
                .collect();
        assert_eq!(back, [0x40000, 0x10000, 0x20000]);
        inner.forget(0x40000);
        inner.touch(0x20000);
        assert_eq!(order(&inner), [0x10000, 0x20000], "the tail forgotten, the list ends before it");
        assert_eq!((inner.lru.head, inner.lru.tail, inner.lru_order().count()), (0x10000, 0x20000, 2));
    }
}
