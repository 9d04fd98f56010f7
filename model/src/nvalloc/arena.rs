//! Arenas (NVAlloc §4.2): the slabs of small allocations, one arena per core,
//! each behind its own lock, with a list of partially free slabs per size class
//! (`freelist_slab`). A thread is bound to the arena with the fewest threads
//! and refills its tcache from it; a block goes back to the arena of its slab.
//!
//! The lock is taken only on a tcache refill (once per bin's worth of
//! allocations), when a freed block finds its sub-tcache full, and when a
//! thread exits — never on the malloc/free fast path.

use super::slab::{self, SlabInfo, VSlab};
use super::tcache::Tcache;
use super::NvAlloc;
use crate::pm::PmThread;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// What an arena's lock protects.
pub struct ArenaInner {
    /// The vslabs of the arena's slabs, by slab offset.
    pub slabs: HashMap<u64, VSlab>,
    /// Per size class: slabs with free blocks, by address (lowest first, for locality).
    pub partial: Vec<BTreeSet<u64>>,
}

/// One arena.
pub struct Arena {
    pub id: usize,
    /// Thread handles bound to it.
    pub threads: AtomicUsize,
    pub inner: Mutex<ArenaInner>,
}

impl Arena {
    pub fn new(id: usize, classes: usize) -> Arena {
        Arena {
            id,
            threads: AtomicUsize::new(0),
            inner: Mutex::new(ArenaInner { slabs: HashMap::new(), partial: vec![BTreeSet::new(); classes] }),
        }
    }

    /// Adds a recovered slab with its vslab.
    pub fn adopt(&self, slab: u64, v: VSlab) {
        let mut g = self.inner.lock().unwrap();
        if !v.is_full() {
            g.partial[v.class].insert(slab);
        }
        g.slabs.insert(slab, v);
    }

    /// Fills the (empty) bin of `class` in `tc` from the arena's partial slabs,
    /// making a new slab if there is none. Stops when the bin is full or the
    /// current slab's remaining blocks belong to full sub-tcaches. Returns
    /// whether any block was cached (false: the heap is full).
    pub fn refill(&self, nv: &NvAlloc, t: &mut PmThread, class: usize, tc: &mut Tcache) -> bool {
        let g = nv.geoms[class];
        let mut inner = self.inner.lock().unwrap();
        let mut got = 0usize;
        while !tc.is_full(class) {
            let slab = match inner.partial[class].first() {
                Some(&s) => s,
                None if got > 0 => break,
                // Slab morphing (§5.2) goes here: before a new slab, look for a
                // slab of another class below the `su` threshold on the LRU
                // list and morph it (header fields are in place, see `slab`).
                None => {
                    let map = nv.map;
                    let made = nv.large.alloc_slab(t, |t, s| {
                        slab::init_header(t, s, class, &g, self.id, map);
                        g.data_offset as u64
                    });
                    let Some(s) = made else { break };
                    inner.slabs.insert(s, VSlab::new(class, g.nblocks));
                    inner.partial[class].insert(s);
                    nv.slabs.insert(s, SlabInfo { class, arena: self.id });
                    s
                }
            };
            let v = inner.slabs.get_mut(&slab).expect("partial slab has a vslab");
            v.take_free(|b| {
                if tc.is_full(class) {
                    return None;
                }
                let sub = nv.sub_tcache(slab, b, tc.nsub());
                if !tc.has_room(class, sub) {
                    return Some(false);
                }
                tc.push(class, sub, g.block_off(slab, b));
                got += 1;
                Some(true)
            });
            if !v.is_full() {
                break;
            }
            inner.partial[class].remove(&slab);
        }
        got > 0
    }

    /// Returns `blocks` (all of slabs of this arena, no longer in any tcache)
    /// to their slabs; a slab left empty goes back to the large allocator
    /// unless it is its class's only slab with free blocks.
    pub fn return_blocks(&self, nv: &NvAlloc, t: &mut PmThread, blocks: &[u64]) {
        let mut inner = self.inner.lock().unwrap();
        let inner = &mut *inner;
        for &blk in blocks {
            let (slab, info) = nv.slabs.lookup(blk).expect("returned block lies in a slab");
            debug_assert_eq!(info.arena, self.id);
            let b = nv.geoms[info.class].block_index(slab, blk).expect("returned block is a block start");
            let v = inner.slabs.get_mut(&slab).expect("slab of the arena");
            let was_full = v.is_full();
            assert!(v.release(b), "block {blk:#x} returned to its slab twice");
            if was_full {
                inner.partial[info.class].insert(slab);
            }
            if v.is_empty() && inner.partial[info.class].len() > 1 {
                inner.partial[info.class].remove(&slab);
                inner.slabs.remove(&slab);
                nv.slabs.remove(slab);
                nv.large.free_slab(t, slab);
            }
        }
    }

    /// Binds one more thread.
    pub fn bind(&self) {
        self.threads.fetch_add(1, Ordering::Relaxed);
    }

    pub fn unbind(&self) {
        self.threads.fetch_sub(1, Ordering::Relaxed);
    }
}
