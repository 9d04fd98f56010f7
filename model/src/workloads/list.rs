//! The persistent linked list of NVAlloc's recovery test (§6.6, Fig. 18):
//! every thread builds a singly linked list of `nodes` nodes whose sizes are
//! uniform in `min_size..=max_size` (the paper: 10 M nodes of 64–128 B, one
//! thread), each node published with `malloc_to` into the previous node's
//! next slot (the first into a one-slot array anchored from the root), so
//! the list is reachable from the heap's root as a real program's is — what
//! a recovery that marks from the roots (Makalu, Ralloc, NVAlloc-GC) follows.
//!
//! With `crash` (the default) the list stays allocated and published when the
//! run ends, and a native run leaves the heap as a crash at that moment
//! leaves it and times the allocator's own recovery of it
//! (`runner::run_native`); [`check_recovered`] then walks every list of the
//! recovered heap and requires each node to be allocated and intact, so the
//! time is that of a real, correct recovery. Without it the list is checked
//! and freed, tail first, as every other workload frees what it made.
//!
//! A node: the object checksum's 16 bytes ([`Worker::stamp`]), the next
//! slot (one destination slot: 8 bytes, or 16 for PMDK's `PMEMoid`), the
//! node's size, and the checksum's last 8 bytes at its end. The slot and the
//! size are persisted before the next node is linked.

use super::driver::{dest_stride, dir_len, stamp_words, thread_anchor, Shared, Slots};
use super::{Scale, WorkloadError};
use crate::alloc::{AllocThread, Allocator, Params as AllocParams};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Nodes per thread.
    pub nodes: u64,
    pub min_size: u64,
    pub max_size: u64,
    /// End the run with the list allocated, as a crash leaves it, and time
    /// the allocator's recovery (native runs).
    pub crash: bool,
}

/// The checksum's head (id and hash) before the next slot.
const NEXT_AT: u64 = 16;

impl Params {
    /// Paper: 10^7 nodes on one thread; `small` is a fifth of that. `tiny`
    /// (2,000 nodes) is for the tests, which run every workload on every
    /// allocator; the main job's recovery experiment sizes its list itself.
    pub fn preset(scale: Scale) -> Params {
        let nodes = scale.pick(2_000, 2_000_000, 10_000_000);
        Params { nodes, min_size: 64, max_size: 128, crash: true }
    }

    /// The smallest node: checksum head, a 16-byte slot, the size word and
    /// the checksum's tail.
    pub const MIN_NODE: u64 = NEXT_AT + 16 + 8 + 8;

    pub fn validate(&self) -> Result<(), String> {
        if self.min_size < Self::MIN_NODE || self.min_size > self.max_size {
            return Err(format!(
                "sizes {}..={} (need {} <= min_size <= max_size: a node holds its checksum, next slot and size)",
                self.min_size,
                self.max_size,
                Self::MIN_NODE
            ));
        }
        if self.nodes == 0 {
            return Err("nodes = 0 (must be at least 1)".into());
        }
        Ok(())
    }

    pub fn peak_live(&self, threads: u32) -> u64 {
        (threads as u64).saturating_mul(self.nodes).saturating_mul(self.max_size.saturating_add(16))
    }
}

/// The id of node `i` of thread `tid`'s list (its checksum).
fn id(tid: u32, i: u64) -> u64 {
    (tid as u64) << 48 | i
}

/// Where a node keeps its next slot's destination word and its size, for
/// destination slots of `stride` bytes.
#[derive(Clone, Copy)]
struct Node {
    stride: u64,
}

impl Node {
    fn next(self, node: u64) -> u64 {
        node + NEXT_AT + self.stride - 8
    }

    fn size_word(self, node: u64) -> u64 {
        node + NEXT_AT + self.stride
    }
}

pub fn run<A: Allocator>(sh: &Shared<'_, A>, p: &Params) -> Result<(), WorkloadError> {
    let ops = sh.threads as u64 * (p.nodes + 1) * if p.crash { 1 } else { 2 };
    sh.set_expected_ops(ops);
    sh.phase("building");
    let node = Node { stride: sh.stride };
    sh.parallel(|tid| {
        let mut w = sh.worker(tid);
        let head = Slots::new(&mut w, 1, true, thread_anchor(tid, 0))?;
        let mut offs = Vec::with_capacity(p.nodes as usize);
        let mut dest = head.dest(0);
        for i in 0..p.nodes {
            let size = w.rng.range(p.min_size, p.max_size);
            let off = w.malloc_to(size, dest)?;
            w.stamp(off, size, id(tid, i));
            w.zero(off + NEXT_AT, node.stride);
            w.t.write_u64(node.size_word(off), size);
            w.t.persist(off + NEXT_AT, node.stride + 8);
            offs.push(off);
            dest = node.next(off);
        }
        if w.barrier()? {
            sh.snapshot("every list built");
        }
        w.barrier()?;
        let walked = walk(&w.t, head.dest(0), node, tid, p.nodes, |_, _| Ok(()))
            .map_err(|e| w.check_failed(format!("the list as built: {e}")))?;
        debug_assert_eq!(walked, offs);
        if p.crash {
            return Ok(());
        }
        for i in (0..offs.len()).rev() {
            let from = if i == 0 { head.dest(0) } else { node.next(offs[i - 1]) };
            w.free_from(from)?;
        }
        head.destroy(&mut w)
    })?;
    if p.crash {
        sh.extra("list_nodes", sh.threads as u64 * p.nodes);
    }
    Ok(())
}

/// Walks the list whose first node is published at `dest`: every node's
/// checksum must be that of its place in thread `tid`'s list, and the list
/// `nodes` long; `each(offset, size)` may refuse a node. The nodes' offsets.
fn walk(
    t: &dyn AllocThread,
    mut dest: u64,
    node: Node,
    tid: u32,
    nodes: u64,
    mut each: impl FnMut(u64, u64) -> Result<(), String>,
) -> Result<Vec<u64>, String> {
    let mut offs = Vec::with_capacity(nodes as usize);
    loop {
        let off = t.read_u64(dest);
        if off == 0 {
            break;
        }
        let i = offs.len() as u64;
        if i == nodes {
            return Err(format!("more than {nodes} nodes (node {i} at {off:#x})"));
        }
        let size = t.read_u64(node.size_word(off));
        if !(Params::MIN_NODE..=1 << 20).contains(&size) {
            return Err(format!("node {i} at {off:#x} says its size is {size}"));
        }
        each(off, size).map_err(|e| format!("node {i} at {off:#x} ({size} bytes): {e}"))?;
        let (head, tail) = stamp_words(size, id(tid, i));
        // The tail is where the size puts it (unaligned in general).
        let mut tb = [0u8; 8];
        t.read(off + size - 8, &mut tb);
        let got = (t.read_u64(off), t.read_u64(off + 8), u64::from_le_bytes(tb));
        if got != (id(tid, i), head, tail) {
            return Err(format!("node {i} at {off:#x} ({size} bytes) is not node {i}: its checksum is {got:x?}"));
        }
        offs.push(off);
        dest = node.next(off);
    }
    if offs.len() as u64 != nodes {
        return Err(format!("{} nodes, expected {nodes}", offs.len()));
    }
    Ok(offs)
}

/// After recovery: walks the list of every one of `threads` threads from
/// the heap's root (through `t`, a thread of the recovered allocator, whose
/// parameters `params` give the destination slot's size) and requires each
/// node, the anchor directory and each list's head slot to lie inside a
/// live allocation of `live` (`(offset, usable size)` by offset, as
/// [`Allocator::live_blocks`] gives them) and each node's checksum to be
/// intact. The nodes checked, or one line naming the first that is not.
pub fn check_recovered(
    t: &dyn AllocThread,
    params: &AllocParams,
    live: &[(u64, u64)],
    p: &Params,
    threads: u32,
) -> Result<u64, String> {
    let allocated = |off: u64, len: u64| -> Result<(), String> {
        let i = live.partition_point(|&(o, _)| o <= off);
        match i.checked_sub(1).map(|i| live[i]) {
            Some((o, n)) if off + len <= o + n => Ok(()),
            _ => Err("not allocated after recovery".into()),
        }
    };
    let node = Node { stride: dest_stride(params) };
    let dir = t.root(0);
    if dir == 0 {
        return Err("root 0 (the anchor directory) is empty after recovery".into());
    }
    allocated(dir, 8 * dir_len(threads) as u64).map_err(|e| format!("the anchor directory at {dir:#x}: {e}"))?;
    let mut checked = 0;
    for tid in 0..threads {
        let head = t.read_u64(dir + 8 * thread_anchor(tid, 0) as u64);
        allocated(head, node.stride).map_err(|e| format!("thread {tid}'s list head at {head:#x}: {e}"))?;
        let offs = walk(t, head + node.stride - 8, node, tid, p.nodes, &allocated)
            .map_err(|e| format!("thread {tid}'s list: {e}"))?;
        checked += offs.len() as u64;
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::check_recovered;
    use crate::family::Drive;
    use crate::heap::{Heap, HeapOptions};
    use crate::pm::{FlushInsn, Pm};
    use crate::runner::{run_native, AllocSpec, HeapSpec, Outcome, RunSpec};
    use crate::workloads::{Params, Progress, RunOptions, Scale, Workload};

    /// A native run of `spec` on a list of `nodes` nodes in `dir` (its heap
    /// `dir/heap`), with the list's recovery timed and checked.
    fn native_list(dir: &std::path::Path, spec: &str, nodes: u64) -> (AllocSpec, Workload, HeapSpec, Outcome) {
        let alloc = AllocSpec::parse(spec, []).unwrap();
        let wl =
            Workload::preset("list", Scale::Tiny).unwrap().with_overrides([format!("nodes={nodes}").as_str()]).unwrap();
        let (opts, progress) = (RunOptions::default(), Progress::default());
        let hs = HeapSpec { path: dir.join("heap"), size: alloc.heap_size(&wl, 1), overwrite: true, shown: None };
        let rs = RunSpec {
            alloc: &alloc,
            workload: &wl,
            opts: &opts,
            heap: &hs,
            flush: FlushInsn::None,
            progress: &progress,
        };
        let out = run_native(&rs).unwrap();
        assert_eq!(out.run.extra["recovered_nodes"], nodes);
        (alloc, wl, hs, out)
    }

    /// A native run of the list times a recovery that keeps every node; a
    /// recovery that loses one node (here: its block left out of the live
    /// allocations the recovered allocator reports) fails the check, naming it.
    #[test]
    fn a_recovery_that_loses_a_node_is_caught() {
        let dir = tempfile::tempdir().unwrap();
        let (alloc, wl, hs, out) = native_list(dir.path(), "nvalloc-log", 300);
        assert!(out.run.extra["recovery_s"].as_f64().unwrap() > 0.0);
        let (opts, progress) = (RunOptions::default(), Progress::default());

        // The same list, crashed, recovered, and checked with a node gone.
        let image = dir.path().join("crashed");
        let heap =
            Heap::create_with(&hs.path, hs.size, &HeapOptions { overwrite: true, ..Default::default() }).unwrap();
        let pm = Pm::native(&heap, FlushInsn::None).unwrap();
        let d = Drive { workload: &wl, opts: &opts, progress: &progress, crash_copy: Some(&image) };
        let family = alloc.family();
        let (driven, pm) = family.run_on_pm(alloc.params(), &heap, pm, &d).unwrap();
        driven.run.unwrap();
        drop(pm);
        heap.close().unwrap();
        let Params::List(p) = wl.params() else { unreachable!() };
        let mut lost = None;
        let r = family.time_recovery(alloc.params(), 1, &image, FlushInsn::None, &mut |t, params, live| {
            check_recovered(t, params, live, p, 1)?;
            // 302 blocks: the directory, the head slot, the nodes; drop one node.
            let mut fewer = live.to_vec();
            lost = Some(fewer.remove(live.len() / 2).0);
            check_recovered(t, params, &fewer, p, 1)
        });
        let e = r.unwrap_err();
        let lost = lost.unwrap();
        assert!(e.contains(&format!("at {lost:#x}")) && e.contains("not allocated after recovery"), "{e}");
    }

    /// nvm_malloc's open returns before its chunk walk (the code runs it on
    /// a thread of its own): the walk's time is reported apart and left out
    /// of the recovery time, unless `background_walk=false` counts it.
    #[test]
    fn nvm_mallocs_chunk_walk_is_timed_apart() {
        let dir = tempfile::tempdir().unwrap();
        let run = |spec: &str| {
            let (.., out) = native_list(dir.path(), spec, 20000);
            let s = |k: &str| out.run.extra[k].as_f64().unwrap();
            (s("recovery_s"), s("recovery_deferred_s"))
        };
        let (fore, walk) = run("nvm-malloc");
        assert!(walk > 0.0 && fore > 0.0, "recovery {fore} s, walk {walk} s");
        // The walk visits every run of 20,000 nodes; the open only the log's 127 slots.
        assert!(fore < walk, "recovery {fore} s, walk {walk} s");
        let (all, none) = run("nvm-malloc:background_walk=false");
        assert_eq!(none, 0.0);
        assert!(all > fore, "with the walk {all} s, without {fore} s");
    }
}
