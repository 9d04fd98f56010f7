//! FPTree (Oukid et al., SIGMOD '16; NVAlloc §6.3, Fig. 14): a persistent
//! B+-tree with its leaves in PM and its inner nodes in DRAM, as a real
//! application on top of the allocator.
//!
//! * **Leaves** (PM, allocated through the allocator with `malloc_to`):
//!   a validity bitmap, the next-leaf offset, one-byte fingerprints, 8-byte
//!   keys and, per entry, a destination slot holding the offset of the
//!   entry's key-value object. `fanout` (64) entries per leaf.
//! * **Key-value objects** (PM, `kv_size` = 128 B): allocated with
//!   `malloc_to` straight into the leaf's slot, filled (the key is the
//!   object's checksum id) and persisted before the entry's bit is set;
//!   deleted by clearing the bit, then `free_from` on the slot.
//! * **Inner nodes** (DRAM, rebuilt after a restart in the real FPTree): a
//!   B+-tree of separators with `fanout` children per node.
//! * **Splits** go through a persistent split log (FPTree's micro-log): the
//!   new leaf is allocated with `malloc_to` into the log's slot, filled with
//!   the upper half of the full leaf and persisted, linked, then the moved
//!   bits are cleared in the old leaf and the log is reset. Empty leaves are
//!   kept (no merges).
//!
//! Concurrency: a reader-writer lock over the inner nodes (read for inserts
//! and deletes, write for splits) and a mutex per leaf, so threads allocate
//! and free concurrently as in FPTree (which uses HTM and leaf locks).
//!
//! Workload (paper): 5·10^7 warm-up inserts, then 5·10^7 operations, 50 %
//! inserts of new random keys and 50 % deletes of random live keys. Each
//! thread owns its keys (distinct hashes of its id and a counter) and keeps
//! them in DRAM, so every delete first checks that the tree *finds* the key,
//! and at the end every live key is looked up, its object verified, and the
//! leaves must hold exactly the live keys.

use super::driver::{Shared, Worker};
use super::rng::mix;
use super::{Scale, WorkloadError};
use crate::alloc::{AllocThread, Allocator};
use serde::{Deserialize, Serialize};
use std::sync::{Mutex, RwLock};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Keys inserted before the measured operations (all threads together).
    pub warmup: u64,
    /// Measured operations (all threads together).
    pub ops: u64,
    /// Fraction of the measured operations that are inserts (the rest delete).
    pub insert_ratio: f64,
    /// Bytes of a key-value object.
    pub kv_size: u64,
    /// Entries per leaf and children per inner node.
    pub fanout: u64,
}

impl Params {
    pub fn preset(scale: Scale) -> Params {
        let (warmup, ops) = scale.pick((4_000, 4_000), (2_000_000, 4_000_000), (50_000_000, 50_000_000));
        Params { warmup, ops, insert_ratio: 0.5, kv_size: 128, fanout: 64 }
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(4..=64).contains(&self.fanout) {
            return Err(format!("fanout = {} (must be 4..=64: the leaf bitmap is one word)", self.fanout));
        }
        if self.kv_size < 24 {
            return Err(format!("kv_size = {} (objects carry a 24-byte checksum: at least 24)", self.kv_size));
        }
        if !(0.0..=1.0).contains(&self.insert_ratio) {
            return Err(format!("insert_ratio = {} (must be in [0, 1])", self.insert_ratio));
        }
        if self.ops == 0 {
            return Err("ops = 0 (must be at least 1: nothing would be measured)".into());
        }
        Ok(())
    }

    pub fn peak_live(&self, _threads: u32) -> u64 {
        // Keys at most warm-up plus all inserts; a leaf per ~fanout/2 keys.
        let keys = self.warmup.saturating_add((self.ops as f64 * self.insert_ratio) as u64);
        let leaves = keys / (self.fanout / 2).max(1);
        keys.saturating_mul(self.kv_size.saturating_add(16))
            .saturating_add(leaves.saturating_mul(self.fanout.saturating_mul(26).saturating_add(64)))
    }
}

/// Where the fields of a leaf lie (the slots' stride depends on the allocator).
#[derive(Clone, Copy, Debug)]
struct LeafLayout {
    fanout: u64,
    stride: u64,
}

impl LeafLayout {
    const BITMAP: u64 = 0;
    const NEXT: u64 = 8;
    const FPS: u64 = 16;

    fn keys(&self) -> u64 {
        (Self::FPS + self.fanout).next_multiple_of(8)
    }

    fn slots(&self) -> u64 {
        (self.keys() + 8 * self.fanout).next_multiple_of(self.stride)
    }

    /// The destination word of entry `i`'s key-value slot.
    fn kv_dest(&self, leaf: u64, i: u64) -> u64 {
        leaf + self.slots() + i * self.stride + self.stride - 8
    }

    fn bytes(&self) -> u64 {
        self.slots() + self.fanout * self.stride
    }

    fn full(&self) -> u64 {
        if self.fanout == 64 {
            u64::MAX
        } else {
            (1 << self.fanout) - 1
        }
    }
}

fn fingerprint(key: u64) -> u8 {
    (mix(key ^ 0xF1) >> 56) as u8
}

/// An inner-node B+-tree over leaf numbers (DRAM).
enum Node {
    Inner { keys: Vec<u64>, kids: Vec<Node> },
    Leaf(usize),
}

struct Index {
    root: Node,
    fanout: usize,
}

impl Index {
    /// The leaf whose key range holds `key`.
    fn find(&self, key: u64) -> usize {
        let mut n = &self.root;
        loop {
            match n {
                Node::Leaf(i) => return *i,
                Node::Inner { keys, kids } => n = &kids[keys.partition_point(|&k| k <= key)],
            }
        }
    }

    /// After a leaf split at `sep`, the new leaf `leaf` holds `sep..` of the
    /// old one's range.
    fn insert(&mut self, sep: u64, leaf: usize) {
        if let Some((up, right)) = Index::insert_rec(&mut self.root, sep, leaf, self.fanout) {
            let left = std::mem::replace(&mut self.root, Node::Leaf(usize::MAX));
            self.root = Node::Inner { keys: vec![up], kids: vec![left, right] };
        }
    }

    /// Inserts below `n`; returns a separator and right sibling to insert in
    /// the parent when `n` was split (or is the old leaf).
    fn insert_rec(n: &mut Node, sep: u64, leaf: usize, fanout: usize) -> Option<(u64, Node)> {
        match n {
            Node::Leaf(_) => Some((sep, Node::Leaf(leaf))),
            Node::Inner { keys, kids } => {
                let c = keys.partition_point(|&k| k <= sep);
                let (k, right) = Index::insert_rec(&mut kids[c], sep, leaf, fanout)?;
                keys.insert(c, k);
                kids.insert(c + 1, right);
                if kids.len() <= fanout {
                    return None;
                }
                let mid = keys.len() / 2;
                let rkeys = keys.split_off(mid + 1);
                let up = keys.pop().expect("mid key");
                let rkids = kids.split_off(mid + 1);
                Some((up, Node::Inner { keys: rkeys, kids: rkids }))
            }
        }
    }

    fn height(&self) -> u32 {
        let mut h = 1;
        let mut n = &self.root;
        while let Node::Inner { kids, .. } = n {
            h += 1;
            n = &kids[0];
        }
        h
    }
}

/// A leaf's DRAM side: its offset and its lock.
struct LeafRef {
    off: u64,
    lock: Mutex<()>,
}

struct Tree {
    index: Index,
    leaves: Vec<LeafRef>,
}

/// The persistent tree descriptor: the split log's slot and the head leaf's
/// slot (each one stride), anchored at global anchor 0.
struct Meta {
    off: u64,
    stride: u64,
}

impl Meta {
    fn split_dest(&self) -> u64 {
        self.off + self.stride - 8
    }

    fn head_dest(&self) -> u64 {
        self.off + 2 * self.stride - 8
    }
}

struct Ctx<'p> {
    p: &'p Params,
    l: LeafLayout,
    meta: Meta,
    tree: RwLock<Tree>,
}

impl Ctx<'_> {
    /// The entry of `key` in the leaf at `leaf`, by fingerprint then key.
    fn find_in_leaf<T: AllocThread>(&self, t: &T, leaf: u64, key: u64) -> Option<u64> {
        let bm = t.read_u64(leaf + LeafLayout::BITMAP);
        let mut fps = [0u8; 64];
        t.read(leaf + LeafLayout::FPS, &mut fps[..self.l.fanout as usize]);
        let fp = fingerprint(key);
        let mut bits = bm;
        while bits != 0 {
            let i = bits.trailing_zeros() as u64;
            bits &= bits - 1;
            if fps[i as usize] == fp && t.read_u64(leaf + self.l.keys() + 8 * i) == key {
                return Some(i);
            }
        }
        None
    }

    fn insert<A: Allocator>(&self, w: &mut Worker<'_, '_, A>, key: u64) -> Result<(), WorkloadError> {
        loop {
            {
                let tree = self.tree.read().unwrap();
                let leaf = &tree.leaves[tree.index.find(key)];
                let _g = leaf.lock.lock().unwrap();
                let off = leaf.off;
                let bm = w.t.read_u64(off + LeafLayout::BITMAP);
                if bm != self.l.full() {
                    let i = bm.trailing_ones() as u64;
                    let kv = w.malloc_to(self.p.kv_size, self.l.kv_dest(off, i))?;
                    w.stamp(kv, self.p.kv_size, key);
                    w.t.persist(kv, self.p.kv_size);
                    w.t.write_u64(off + self.l.keys() + 8 * i, key);
                    w.t.write(off + LeafLayout::FPS + i, &[fingerprint(key)]);
                    w.t.persist(off + self.l.keys() + 8 * i, 8);
                    w.t.persist(off + LeafLayout::FPS + i, 1);
                    w.t.write_u64(off + LeafLayout::BITMAP, bm | 1 << i);
                    w.t.persist(off + LeafLayout::BITMAP, 8);
                    return Ok(());
                }
            }
            let mut tree = self.tree.write().unwrap();
            let li = tree.index.find(key);
            if w.t.read_u64(tree.leaves[li].off + LeafLayout::BITMAP) == self.l.full() {
                self.split(w, &mut tree, li)?;
            }
        }
    }

    /// Splits full leaf `li` (the caller holds the tree's write lock).
    fn split<A: Allocator>(&self, w: &mut Worker<'_, '_, A>, tree: &mut Tree, li: usize) -> Result<(), WorkloadError> {
        let (l, stride) = (self.l, self.meta.stride);
        let old = tree.leaves[li].off;
        let mut entries: Vec<(u64, u64)> = (0..l.fanout).map(|i| (w.t.read_u64(old + l.keys() + 8 * i), i)).collect();
        entries.sort_unstable();
        let moved = &entries[entries.len() / 2..];
        let sep = moved[0].0;
        // The micro-log: the new leaf hangs from the log until it is linked.
        let new = w.malloc_to(l.bytes(), self.meta.split_dest())?;
        let mut slot = vec![0u8; stride as usize];
        let mut fps = Vec::with_capacity(moved.len());
        for (j, &(key, i)) in moved.iter().enumerate() {
            let j = j as u64;
            w.t.write_u64(new + l.keys() + 8 * j, key);
            fps.push(fingerprint(key));
            // The whole slot: PMDK's PMEMoid carries the pool id before the offset.
            w.t.read(old + l.slots() + i * stride, &mut slot);
            w.t.write(new + l.slots() + j * stride, &slot);
        }
        w.t.write(new + LeafLayout::FPS, &fps);
        let next = w.t.read_u64(old + LeafLayout::NEXT);
        w.t.write_u64(new + LeafLayout::NEXT, next);
        let bits = if moved.len() == 64 { u64::MAX } else { (1u64 << moved.len()) - 1 };
        w.t.write_u64(new + LeafLayout::BITMAP, bits);
        w.t.persist(new, l.bytes());
        w.t.write_u64(old + LeafLayout::NEXT, new);
        w.t.persist(old + LeafLayout::NEXT, 8);
        let mut bm = l.full();
        for &(_, i) in moved {
            bm &= !(1 << i);
        }
        w.t.write_u64(old + LeafLayout::BITMAP, bm);
        w.t.persist(old + LeafLayout::BITMAP, 8);
        // Reset the log (the leaf is reachable through `next` now).
        w.t.write(self.meta.split_dest() + 8 - stride, &vec![0u8; stride as usize]);
        w.t.persist(self.meta.split_dest() + 8 - stride, stride);
        tree.leaves.push(LeafRef { off: new, lock: Mutex::new(()) });
        let n = tree.leaves.len() - 1;
        tree.index.insert(sep, n);
        Ok(())
    }

    /// Deletes `key`, which must be in the tree.
    fn delete<A: Allocator>(&self, w: &mut Worker<'_, '_, A>, key: u64) -> Result<(), WorkloadError> {
        let tree = self.tree.read().unwrap();
        let leaf = &tree.leaves[tree.index.find(key)];
        let _g = leaf.lock.lock().unwrap();
        let off = leaf.off;
        let Some(i) = self.find_in_leaf(&w.t, off, key) else {
            return Err(w.check_failed(format!("live key {key:#x} not found by a lookup before its delete")));
        };
        let dest = self.l.kv_dest(off, i);
        let kv = w.t.read_u64(dest);
        w.verify(kv, self.p.kv_size, key)?;
        let bm = w.t.read_u64(off + LeafLayout::BITMAP);
        w.t.write_u64(off + LeafLayout::BITMAP, bm & !(1 << i));
        w.t.persist(off + LeafLayout::BITMAP, 8);
        w.free_from(dest)
    }

    /// Looks `key` up and verifies its object.
    fn lookup<A: Allocator>(&self, w: &Worker<'_, '_, A>, key: u64) -> Result<(), WorkloadError> {
        let tree = self.tree.read().unwrap();
        let leaf = &tree.leaves[tree.index.find(key)];
        let _g = leaf.lock.lock().unwrap();
        match self.find_in_leaf(&w.t, leaf.off, key) {
            Some(i) => w.verify(w.t.read_u64(self.l.kv_dest(leaf.off, i)), self.p.kv_size, key),
            None => Err(w.check_failed(format!("live key {key:#x} not found by a lookup"))),
        }
    }
}

/// Thread `tid`'s `k`-th key: distinct for distinct (tid, k), since `mix` is
/// a bijection.
fn key(tid: u32, k: u64) -> u64 {
    mix((tid as u64) << 40 | k)
}

pub fn run<A: Allocator>(sh: &Shared<'_, A>, p: &Params) -> Result<(), WorkloadError> {
    let l = LeafLayout { fanout: p.fanout, stride: sh.stride };
    let t = sh.threads as u64;
    sh.set_expected_ops(p.warmup + p.ops + p.warmup + (p.ops as f64 * (2.0 * p.insert_ratio - 1.0)).max(0.0) as u64);
    let (meta, head) = sh.single(0, |w| {
        let meta = Meta { off: w.malloc(2 * sh.stride)?, stride: sh.stride };
        w.zero(meta.off, 2 * sh.stride);
        w.t.persist(meta.off, 2 * sh.stride);
        w.anchor(0, meta.off);
        let head = w.malloc_to(l.bytes(), meta.head_dest())?;
        w.t.write_u64(head + LeafLayout::BITMAP, 0);
        w.t.write_u64(head + LeafLayout::NEXT, 0);
        w.t.persist(head, 16);
        Ok((meta, head))
    })?;
    let ctx = Ctx {
        p,
        l,
        meta,
        tree: RwLock::new(Tree {
            index: Index { root: Node::Leaf(0), fanout: p.fanout as usize },
            leaves: vec![LeafRef { off: head, lock: Mutex::new(()) }],
        }),
    };
    let live_keys: Vec<Mutex<Vec<u64>>> = (0..t).map(|_| Mutex::new(Vec::new())).collect();
    sh.phase("warm-up");
    sh.parallel(|tid| {
        let mut w = sh.worker(tid);
        let mut live = live_keys[tid as usize].lock().unwrap();
        let mut next = 0u64;
        let warm = p.warmup / t + u64::from((tid as u64) < p.warmup % t);
        for _ in 0..warm {
            let k = key(tid, next);
            next += 1;
            ctx.insert(&mut w, k)?;
            live.push(k);
        }
        if w.barrier()? {
            sh.begin_measure();
            sh.phase("operations");
        }
        let ops = p.ops / t + u64::from((tid as u64) < p.ops % t);
        for _ in 0..ops {
            if live.is_empty() || w.rng.chance(p.insert_ratio) {
                let k = key(tid, next);
                next += 1;
                ctx.insert(&mut w, k)?;
                live.push(k);
            } else {
                let j = w.rng.below(live.len() as u64) as usize;
                let k = live.swap_remove(j);
                ctx.delete(&mut w, k)?;
            }
        }
        if w.barrier()? {
            sh.end_measure();
            sh.snapshot("end of the operations");
            sh.phase("checking");
        }
        w.barrier()?;
        for &k in live.iter() {
            ctx.lookup(&w, k)?;
        }
        Ok(())
    })?;
    let (m0, m1) = sh.measured();
    if let (Some((t0, _)), Some((t1, _))) = (m0, m1) {
        let secs = (t1 - t0).as_secs_f64();
        sh.extra("tree_ops", p.ops);
        sh.extra("tree_ops_per_s", if secs > 0.0 { p.ops as f64 / secs } else { 0.0 });
    }
    {
        let tree = ctx.tree.read().unwrap();
        sh.extra("leaves", tree.leaves.len() as u64);
        sh.extra("inner_height", tree.index.height());
    }
    // The leaves must hold exactly the live keys: walk the persistent list.
    let expected: u64 = live_keys.iter().map(|k| k.lock().unwrap().len() as u64).sum();
    sh.extra("live_keys", expected);
    sh.single(0, |w| {
        let (mut found, mut leaves, mut leaf) = (0u64, 0u64, w.t.read_u64(ctx.meta.head_dest()));
        while leaf != 0 {
            found += w.t.read_u64(leaf + LeafLayout::BITMAP).count_ones() as u64;
            leaves += 1;
            leaf = w.t.read_u64(leaf + LeafLayout::NEXT);
        }
        let in_dram = ctx.tree.read().unwrap().leaves.len() as u64;
        if found != expected || leaves != in_dram {
            return Err(w.check_failed(format!(
                "the persistent leaf list holds {found} entries in {leaves} leaves; expected {expected} live keys in {in_dram} leaves"
            )));
        }
        Ok(())
    })?;
    sh.phase("teardown");
    sh.parallel(|tid| {
        let mut w = sh.worker(tid);
        let live = std::mem::take(&mut *live_keys[tid as usize].lock().unwrap());
        for k in live {
            ctx.delete(&mut w, k)?;
        }
        Ok(())
    })?;
    sh.single(0, |w| {
        let tree = ctx.tree.into_inner().unwrap();
        for (n, leaf) in tree.leaves.iter().enumerate() {
            if n == 0 {
                w.free_from(ctx.meta.head_dest())?;
            } else {
                w.free(leaf.off)?;
            }
        }
        w.anchor(0, 0);
        w.free(ctx.meta.off)
    })
}
