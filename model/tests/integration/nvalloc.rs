//! NVAlloc on real heap files: every preset under a 4-thread mixed-size
//! stress, publish/clear through `malloc_to`/`free_from`, restarts, unclean
//! shutdowns, and recovery after SIGKILL at random points (the test binary
//! re-runs itself as the victim).
//!
//! Objects written by the tests carry their length, a seed and a checksum of
//! their payload, so any corruption or overlap shows up as a bad checksum.

use crate::common;

use common::{
    assert_disjoint, check_obj, conservatively_reachable, mixed_size, open_heap, pending, retry_locked, slot, tmpdir,
    words_naming, write_obj, Rng, Victim, CHILD_THREADS, OBJ_HEADER, SLOTS, TABLE_BYTES,
};
use pmsim_model::heap::Heap as H;
use pmsim_model::mech::wal::WalEntry;
use pmsim_model::nvalloc::thread::op;
use pmsim_model::nvalloc::{Consistency, NvAlloc, NvAllocConfig, NvAllocThread, WalMode};
use pmsim_model::AllocConfig;
use pmsim_model::AllocError;
use pmsim_model::{AllocThread, Allocator, FlushInsn, Heap, HeapOptions, Pm};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// Every preset.
const PRESETS: [&str; 5] = ["base", "+interleaved", "+log", "nvalloc-log", "nvalloc-gc"];
/// The presets of the `log` consistency model with the strict WAL protocol
/// (every `malloc_to` / `free_from` atomic through the WAL).
const STRICT_PRESETS: [&str; 4] =
    ["base:wal=strict", "+interleaved:wal=strict", "+log:wal=strict", "nvalloc-log:wal=strict"];
/// The presets whose `free_from` clears its destination and whose
/// recovery makes every `malloc_to` / `free_from` atomic (the SIGKILL test's
/// workload relies on both).
const ATOMIC_PRESETS: [&str; 5] =
    ["base:wal=strict", "+interleaved:wal=strict", "+log:wal=strict", "nvalloc-log:wal=strict", "nvalloc-gc"];

// ----- helpers -----------------------------------------------------------------

/// `preset[:key=value,…]`, with four arenas whatever the machine, so that
/// threads share and cross arenas.
fn cfg(spec: &str) -> NvAllocConfig {
    let (preset, kvs) = spec.split_once(':').unwrap_or((spec, ""));
    NvAllocConfig::preset(preset)
        .unwrap()
        .with_overrides(["arenas=4"])
        .unwrap()
        .with_overrides(kvs.split(',').filter(|kv| !kv.is_empty()))
        .unwrap()
}

/// For the crash tests: a log GC check after every few frees (under the
/// default rule, the artifact's usage thresholds), so that kills also land
/// inside GCs.
fn crash_cfg(preset: &str) -> NvAllocConfig {
    cfg(preset).with_overrides(["gc_interval=4"]).unwrap()
}

fn create_with(path: &Path, size: u64, c: NvAllocConfig) -> (Heap, Arc<NvAlloc>) {
    let opts = HeapOptions { overwrite: true, ..Default::default() };
    let heap = retry_locked(|| Heap::create_with(path, size, &opts));
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let nv = NvAlloc::create(&heap, pm, c).unwrap();
    (heap, nv)
}

fn create(path: &Path, size: u64, preset: &str) -> (Heap, Arc<NvAlloc>) {
    create_with(path, size, cfg(preset))
}

fn open_with(path: &Path, c: NvAllocConfig) -> (Heap, Arc<NvAlloc>) {
    let heap = open_heap(path);
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let nv = NvAlloc::open(&heap, pm, c).unwrap_or_else(|e| panic!("open failed: {e}"));
    (heap, nv)
}

fn open(path: &Path, preset: &str) -> (Heap, Arc<NvAlloc>) {
    open_with(path, cfg(preset))
}

fn close(heap: Heap, nv: Arc<NvAlloc>) {
    let pm = nv.close().unwrap();
    drop(pm);
    heap.close().unwrap();
}

// ----- basic behaviour -------------------------------------------------------------

#[test]
fn objects_survive_close_and_reopen() {
    let d = tmpdir();
    let path = d.path().join("h");
    for preset in PRESETS {
        let (heap, nv) = create(&path, 64 << 20, preset);
        let mut t = nv.thread(0);
        let mut objs = Vec::new();
        for (i, size) in
            [24u64, 64, 65, 1000, 4096, 14336, 14337, 16384, 100_000, 2 << 20, (3 << 20) + 5].iter().enumerate()
        {
            let off = t.malloc(*size).unwrap();
            assert!(t.usable_size(off).unwrap() >= *size, "{preset}: usable size of a {size}-byte request");
            write_obj(&mut t, off, (*size).max(OBJ_HEADER), i as u64);
            objs.push((off, (*size).max(OBJ_HEADER), i as u64));
        }
        assert_eq!(nv.footprint().live_bytes, t.live_allocations().iter().map(|a| a.1).sum::<u64>());
        drop(t);
        close(heap, nv);

        let (heap, nv) = open(&path, preset);
        assert!(!nv.recovery().crashed, "{preset}: a clean close is not a crash");
        let mut t = nv.thread(0);
        let allocs = t.live_allocations();
        assert_eq!(allocs.len(), objs.len(), "{preset}: allocations after reopen");
        for &(off, len, _) in &objs {
            assert_eq!(check_obj(&t, off, t.usable_size(off).unwrap()), Ok(len), "{preset}");
        }
        for &(off, _, _) in &objs {
            t.free(off);
        }
        assert!(t.live_allocations().is_empty(), "{preset}: everything freed");
        assert_eq!(nv.footprint().live_bytes, 0);
        drop(t);
        close(heap, nv);
    }
}

#[test]
fn malloc_to_publishes_and_free_from_clears() {
    let d = tmpdir();
    let path = d.path().join("h");
    for preset in PRESETS {
        let (heap, nv) = create(&path, 64 << 20, preset);
        let mut t = nv.thread(3);
        // dest in the root table, and dest inside another allocation.
        let root = H::root_offset(5);
        let table = t.malloc_to(4096, root).unwrap();
        assert_eq!(t.root(5), table);
        for (i, size) in [64u64, 3000, 40_000, 3 << 20].into_iter().enumerate() {
            let dest = table + 8 * i as u64;
            t.write_u64(dest, 0);
            let off = t.malloc_to(size, dest).unwrap();
            assert_eq!(t.read_u64(dest), off, "{preset}: malloc_to publishes");
            assert_eq!(t.usable_size(off).map(|u| u >= size), Some(true));
            t.free_from(dest);
            // NVAlloc's public code leaves a small block's destination as it is.
            let left =
                nv.config().wal == WalMode::Artifact && nv.config().consistency == Consistency::Log && size < 16 << 10;
            assert_eq!(t.read_u64(dest), if left { off } else { 0 }, "{preset}: free_from's destination");
            assert_eq!(t.usable_size(off), None, "{preset}: freed");
            t.write_u64(dest, 0);
            t.free_from(dest); // a cleared dest is a no-op
        }
        t.free_from(root);
        let left = nv.config().wal == WalMode::Artifact && nv.config().consistency == Consistency::Log;
        assert_eq!(t.root(5), if left { table } else { 0 }, "{preset}");
        assert!(t.live_allocations().is_empty());
        drop(t);
        close(heap, nv);
    }
}

/// Slab headers, the lines every malloc and free flushes, do not all fall
/// on one DIMM: the DIMMs interleave by 4 KiB, and consecutive slabs start
/// a page apart modulo 64 KiB (`SLAB_EXTENT`). With slabs packed at a 64 KiB
/// stride every header was on the first DIMM of any interleave set of two.
#[test]
fn slab_headers_spread_over_the_dimms() {
    let d = tmpdir();
    let (heap, nv) = create(&d.path().join("h"), 64 << 20, "nvalloc-log");
    let mut t = nv.thread(0);
    let blocks: Vec<u64> = (0..8000).map(|_| t.malloc(64).unwrap()).collect();
    let slabs: std::collections::BTreeSet<u64> = blocks.iter().map(|&b| nv.slab_of(b).unwrap()).collect();
    assert!(slabs.len() >= 6, "{} slabs", slabs.len());
    let on_dimm = |n: u64| slabs.iter().filter(|&&s| (s / 4096) % 2 == n).count();
    let (d0, d1) = (on_dimm(0), on_dimm(1));
    assert!(d0.abs_diff(d1) <= 1, "slab headers on two DIMMs: {d0} and {d1} of {}", slabs.len());
    drop(t);
    close(heap, nv);
}

#[test]
fn freed_memory_is_reused() {
    let d = tmpdir();
    let (heap, nv) = create(&d.path().join("h"), 64 << 20, "nvalloc-log");
    let mut t = nv.thread(0);
    let a: Vec<u64> = (0..5000).map(|_| t.malloc(64).unwrap()).collect();
    let top = nv.footprint().mapped_bytes;
    for &o in &a {
        t.free(o);
    }
    let b: HashSet<u64> = (0..5000).map(|_| t.malloc(64).unwrap()).collect();
    assert_eq!(nv.footprint().mapped_bytes, top, "no new chunk for reused blocks");
    // Empty slabs go back to the large allocator and may be cut again at
    // other addresses of the freed space, so not every block comes back.
    let again = a.iter().filter(|o| b.contains(o)).count();
    assert!(again > 2500, "only {again} of 5000 freed blocks came back");
    let l: Vec<u64> = (0..50).map(|_| t.malloc(100_000).unwrap()).collect();
    let top = nv.footprint().mapped_bytes;
    for &o in &l {
        t.free(o);
    }
    for _ in 0..50 {
        let o = t.malloc(100_000).unwrap();
        assert!(l.contains(&o), "large extent {o:#x} is reused");
    }
    assert_eq!(nv.footprint().mapped_bytes, top);
    drop(t);
    close(heap, nv);
}

#[test]
fn heap_full_returns_none_and_recovers_after_frees() {
    let d = tmpdir();
    let (heap, nv) = create(&d.path().join("h"), 16 << 20, "nvalloc-log");
    let mut t = nv.thread(0);
    let mut got = Vec::new();
    while let Some(o) = t.malloc(200_000) {
        got.push(o);
    }
    assert!(!got.is_empty());
    assert!(t.malloc(5 << 20).is_none());
    while let Some(o) = t.malloc(3000) {
        got.push(o);
    }
    assert_disjoint(&t.live_allocations());
    for o in got.drain(..) {
        t.free(o);
    }
    assert!(t.malloc(200_000).is_some());
    drop(t);
    drop(nv);
    drop(heap);
}

#[test]
fn errors_are_one_clear_line() {
    let d = tmpdir();
    let path = d.path().join("h");
    let err = |r: Result<Arc<NvAlloc>, AllocError>| r.err().expect("must fail").to_string();

    let heap = Heap::create(&path, 16 << 20).unwrap();
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let e = err(NvAlloc::open(&heap, pm, cfg("nvalloc-log")));
    assert!(e.contains("not an NVAlloc heap") && e.contains(path.to_str().unwrap()), "{e}");
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let mut c = cfg("nvalloc-log");
    c.su = 1.5;
    assert!(err(NvAlloc::create(&heap, pm, c)).contains("su = 1.5"));
    drop(heap);

    let heap = Heap::create_with(&path, 4 << 20, &HeapOptions { overwrite: true, ..Default::default() }).unwrap();
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let e = err(NvAlloc::create(&heap, pm, cfg("nvalloc-log")));
    assert!(e.contains("too small"), "{e}");
    drop(heap);

    let (heap, nv) = create(&path, 16 << 20, "nvalloc-log");
    close(heap, nv);
    let heap = open_heap(&path);
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let e = err(NvAlloc::open(&heap, pm, cfg("base")));
    assert!(e.contains("created with stripes = 6"), "{e}");
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let e = err(NvAlloc::open(&heap, pm, cfg("nvalloc-gc")));
    assert!(e.contains("created with consistency = Log"), "{e}");
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let e = err(NvAlloc::open(&heap, pm, cfg("nvalloc-log:wal=strict")));
    assert!(e.contains("created with wal = artifact, the configuration says strict"), "{e}");
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let e = err(NvAlloc::create(&heap, pm, cfg("nvalloc-log")));
    assert!(e.contains("already holds an NVAlloc heap"), "{e}");
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let nv = NvAlloc::open(&heap, pm, cfg("nvalloc-log")).unwrap();
    let t = nv.thread(1);
    let nv2 = nv.clone();
    let e = nv.close().err().unwrap().to_string();
    assert!(e.contains("thread handle"), "{e}");
    drop(t);
    drop(nv2);
}

/// A crash inside operations leaves valid WAL entries: recovery redoes the
/// small ones and the large ones whose record is durable, and drops a large
/// malloc whose record never was.
#[test]
fn wal_entries_left_by_a_crash_are_replayed() {
    let d = tmpdir();
    let path = d.path().join("h");
    for preset in STRICT_PRESETS {
        let (heap, nv) = create(&path, 64 << 20, preset);
        let mut t = nv.thread(0);
        let keep = t.malloc(64).unwrap();
        let blk = t.malloc(64).unwrap();
        let held = t.malloc_to(64, H::root_offset(2)).unwrap();
        t.free(blk);
        let ext = t.malloc_to(100_000, H::root_offset(3)).unwrap();
        let never = ext + (1 << 20);
        // Thread 7 "crashed" inside four operations.
        let mut w = nv.wal().cursor(7);
        for (op, target, root) in [
            (op::MALLOC_SMALL, blk, 1),
            (op::FREE_SMALL, held, 2),
            (op::FREE_LARGE, ext, 3),
            (op::MALLOC_LARGE, never, 4),
        ] {
            w.begin(t.pm(), WalEntry { op, target, dest: H::root_offset(root) });
        }
        drop(t);
        drop(nv);
        drop(heap);

        let (heap, nv) = open(&path, preset);
        let rep = nv.recovery();
        assert!(rep.crashed);
        assert_eq!((rep.wal_redone, rep.wal_dropped), (3, 1), "{preset}");
        let t = nv.thread(0);
        assert_eq!((t.root(1), t.usable_size(blk)), (blk, Some(64)), "{preset}: malloc redone");
        assert_eq!((t.root(2), t.usable_size(held)), (0, None), "{preset}: small free redone");
        assert_eq!((t.root(3), t.usable_size(ext)), (0, None), "{preset}: large free redone");
        assert_eq!(t.root(4), 0, "{preset}: unrecorded large malloc dropped");
        let mut expected = vec![(keep, 64), (blk, 64)];
        expected.sort();
        assert_eq!(t.live_allocations(), expected, "{preset}");
        drop(t);
        close(heap, nv);
        let (heap, nv) = open(&path, preset);
        assert_eq!(nv.recovery().wal_redone, 0, "{preset}: replayed entries were cleared");
        close(heap, nv);
    }
}

/// `wal=artifact` after a crash: only each thread's newest entry is settled
/// (found by sequence number, also across the 16-bit wrap): a small malloc
/// whose block is allocated is published, a destination naming a free block
/// or an unrecorded extent is cleared, older entries are left alone; then
/// every entry is cleared.
#[test]
fn artifact_recovery_settles_each_threads_newest_entry() {
    let d = tmpdir();
    let path = d.path().join("h");
    for preset in ["base", "nvalloc-log"] {
        let (heap, nv) = create(&path, 64 << 20, preset);
        assert_eq!(nv.config().wal, WalMode::Artifact);
        let mut t = nv.thread(0);
        let held = t.malloc(64).unwrap();
        let gone = t.malloc(64).unwrap();
        t.free(gone);
        let ext = t.malloc_to(100_000, H::root_offset(9)).unwrap();
        let never = ext + (1 << 20);
        for (root, v) in [(2, gone), (3, 0), (5, never), (7, gone)] {
            t.write_u64(H::root_offset(root), v);
            t.persist(H::root_offset(root), 8);
        }
        let e = |op, target, root| WalEntry { op, target, dest: H::root_offset(root) };
        // Thread 7 stopped after setting its bit; thread 8 before it, with a stale destination.
        nv.wal().cursor(7).begin(t.pm(), e(op::MALLOC_SMALL, held, 1));
        nv.wal().cursor(8).begin(t.pm(), e(op::MALLOC_SMALL, gone, 2));
        // Thread 9: an older entry (would publish) behind a newer, finished one.
        let mut w = nv.wal().cursor(9);
        w.begin(t.pm(), e(op::MALLOC_SMALL, held, 3));
        w.begin(t.pm(), e(op::MALLOC_LARGE, ext, 9));
        // Thread 10: published a large extent, never recorded it.
        nv.wal().cursor(10).begin(t.pm(), e(op::MALLOC_LARGE, never, 5));
        // Thread 11: sequence numbers wrap; the newest publishes `held` at root 6,
        // the older ones would clear root 7.
        let mut w = nv.wal().cursor_at(11, 65_530);
        for _ in 0..9 {
            w.begin(t.pm(), e(op::MALLOC_SMALL, gone, 7));
        }
        w.begin(t.pm(), e(op::MALLOC_SMALL, held, 6));
        drop(t);
        drop(nv);
        drop(heap);

        let (heap, nv) = open(&path, preset);
        let rep = nv.recovery();
        assert!(rep.crashed);
        assert_eq!((rep.wal_redone, rep.wal_dropped), (2, 2), "{preset}: {rep:?}");
        let t = nv.thread(0);
        let roots: Vec<u64> = (1..=7).map(|r| t.root(r)).collect();
        assert_eq!(roots, [held, 0, 0, 0, 0, held, gone], "{preset}: roots 1..=7");
        assert_eq!((t.usable_size(held), t.usable_size(gone)), (Some(64), None), "{preset}");
        drop(t);
        close(heap, nv);
        let (heap, nv) = open(&path, preset);
        let mut t = nv.thread(1);
        assert_eq!(nv.wal().scan(t.pm()), [], "{preset}: every entry cleared");
        drop(t);
        close(heap, nv);
    }
}

/// `wal=artifact`: a large `free_from` clears `*dest` durably and only then
/// deletes the extent's record, with no WAL entry; a crash in between leaks
/// the extent (recovery cannot find it: nothing names it). The guarantee
/// stated in the README: at most that one extent per thread.
#[test]
fn artifact_large_free_interrupted_after_its_dest_leaks_one_extent() {
    let d = tmpdir();
    let path = d.path().join("h");
    let (heap, nv) = create(&path, 64 << 20, "nvalloc-log");
    let mut t = nv.thread(0);
    let ext = t.malloc_to(100_000, H::root_offset(1)).unwrap();
    let keep = t.malloc_to(200_000, H::root_offset(2)).unwrap();
    // The first half of free_from(root 1): *dest = 0, persisted; then the crash.
    t.write_u64(H::root_offset(1), 0);
    t.persist(H::root_offset(1), 8);
    drop(t);
    drop(nv);
    drop(heap);
    let (heap, nv) = open(&path, "nvalloc-log");
    let t = nv.thread(0);
    assert_eq!((t.root(1), t.root(2)), (0, keep));
    let live: Vec<u64> = t.live_allocations().iter().map(|a| a.0).collect();
    assert_eq!(live, [ext, keep], "the half-freed extent is leaked, nothing else");
    drop(t);
    close(heap, nv);
}

/// NVAlloc-GC after a crash: blocks reachable from the roots (directly, or
/// through other blocks and large extents) stay allocated, the rest are freed.
#[test]
fn gc_recovery_keeps_exactly_the_reachable_blocks() {
    let d = tmpdir();
    let path = d.path().join("h");
    let (heap, nv) = create(&path, 64 << 20, "nvalloc-gc");
    let mut t = nv.thread(0);
    let table = t.malloc_to(8 * 100, H::root_offset(0)).unwrap();
    let big = t.malloc_to(50_000, H::root_offset(1)).unwrap();
    t.write(table, &[0u8; 800]);
    t.write(big, &[0u8; 64]);
    for i in 0..100u64 {
        let o = t.malloc_to(64 + i * 8, table + 8 * i).unwrap();
        write_obj(&mut t, o, 64 + i * 8, i);
    }
    // A chain big -> c1 -> c2, reachable only through the large extent.
    let c1 = t.malloc_to(128, big).unwrap();
    let c2 = t.malloc_to(128, c1).unwrap();
    t.write_u64(c2, 0);
    let lost: Vec<u64> = (0..50).map(|_| t.malloc(200).unwrap()).collect();
    for i in (0..100).step_by(2) {
        t.free_from(table + 8 * i);
    }
    drop(t);
    drop(nv);
    drop(heap);

    let (heap, nv) = open(&path, "nvalloc-gc");
    let rep = nv.recovery();
    assert!(rep.crashed);
    assert_eq!(rep.gc_freed, lost.len() as u64, "the unreachable blocks are freed");
    let t = nv.thread(0);
    let small: Vec<u64> = t.live_allocations().into_iter().filter(|&(o, _)| o != big).map(|(o, _)| o).collect();
    let mut expected: Vec<u64> = vec![table, c1, c2];
    expected.extend((1..100).step_by(2).map(|i| t.read_u64(table + 8 * i)));
    expected.sort();
    assert_eq!(small, expected);
    for i in (1..100).step_by(2) {
        check_obj(&t, t.read_u64(table + 8 * i), u64::MAX).unwrap();
    }
    drop(t);
    close(heap, nv);
}

// ----- traced runs ---------------------------------------------------------------------

/// Flushes inside malloc/free operations, by region category, and how many
/// were reflushes (the same thread flushed the line fewer than 4 distinct
/// lines ago, the paper's definition).
#[derive(Debug, Default)]
struct FlushCounts {
    ops: u64,
    flushes: BTreeMap<&'static str, (u64, u64)>,
}

/// Runs `body` on one traced thread of a fresh heap and counts its flushes;
/// also checks that every store and flush lands in a registered region.
fn traced_run(preset: &str, body: impl FnOnce(&mut NvAllocThread)) -> FlushCounts {
    use pmsim_traces::{Category, OpKind, OwnedEvent, Region, RegionMap, VecSink};
    let d = tmpdir();
    let heap = Heap::create(d.path().join("t.heap"), 64 << 20).unwrap();
    let mut initial: Vec<Region> = Vec::new();
    let (pm, collector) = Pm::traced(&heap, FlushInsn::best(), &Default::default(), |h| {
        initial = h.regions.clone();
        Ok(VecSink::default())
    })
    .unwrap();
    let nv = NvAlloc::create(&heap, pm, cfg(preset)).unwrap();
    let mut t = nv.thread(1);
    body(&mut t);
    drop(t);
    let pm = nv.close().unwrap();
    let events = collector.finish(pm).unwrap().sink.0;

    let mut regions = RegionMap::new(&initial);
    let mut counts = FlushCounts::default();
    let mut in_op = 0;
    let mut recent: Vec<u64> = Vec::new();
    for (_, ev) in &events {
        regions.apply(&ev.as_event());
        match ev {
            OwnedEvent::Store { addr, .. } => {
                assert!(regions.lookup(*addr).is_some(), "{preset}: store to {addr:#x} outside every region");
            }
            OwnedEvent::OpBegin { op: OpKind::Malloc | OpKind::Free, .. } => {
                in_op += 1;
                counts.ops += 1;
            }
            OwnedEvent::OpEnd { op: OpKind::Malloc | OpKind::Free, .. } => in_op -= 1,
            OwnedEvent::Flush { line, .. } => {
                let cat =
                    regions.category(*line).unwrap_or_else(|| panic!("{preset}: flush of {line:#x} outside regions"));
                let dist = recent.iter().position(|l| l == line);
                if let Some(i) = dist {
                    recent.remove(i);
                }
                recent.insert(0, *line);
                recent.truncate(64);
                if in_op > 0 && cat != Category::Data {
                    let e = counts.flushes.entry(cat.name()).or_default();
                    e.0 += 1;
                    e.1 += dist.is_some_and(|i| i < 4) as u64;
                }
            }
            _ => {}
        }
    }
    counts
}

/// Threadtest-like: one thread allocates `n` 64 B objects into a table with
/// `malloc_to`, then frees them all with `free_from`.
fn threadtest_body(n: u64) -> impl FnOnce(&mut NvAllocThread) {
    move |t: &mut NvAllocThread| {
        let table = t.malloc_to(8 * n, H::root_offset(0)).unwrap();
        for round in 0..2 {
            for i in 0..n {
                t.malloc_to(64, table + 8 * i).unwrap();
            }
            for i in 0..n {
                t.free_from(table + 8 * i);
            }
            let _ = round;
        }
        t.free_from(H::root_offset(0));
    }
}

#[test]
fn traced_runs_tag_every_write_and_interleaving_removes_reflushes() {
    let base = traced_run("base", threadtest_body(2000));
    let inter = traced_run("+interleaved", threadtest_body(2000));
    let full = traced_run("nvalloc-log", threadtest_body(2000));
    let gc = traced_run("nvalloc-gc", threadtest_body(2000));
    let get = |c: &FlushCounts, cat: &str| c.flushes.get(cat).copied().unwrap_or_default();
    // NVAlloc-GC flushes no metadata and no WAL for small operations (the
    // table itself is one large malloc_to and free_from: a few flushes).
    assert!(get(&gc, "meta").0 + get(&gc, "wal").0 < 10, "nvalloc-gc: {gc:?}");
    // Under wal=artifact a small malloc_to persists one WAL entry (never
    // cleared) and a free_from none: base and NVAlloc-LOG flush as often...
    let (bw, fw) = (get(&base, "wal"), get(&full, "wal"));
    let (bm, fm) = (get(&base, "meta"), get(&full, "meta"));
    assert!(bw.0 == fw.0 && (4000..4010).contains(&bw.0), "WAL flushes: base {bw:?}, nvalloc-log {fw:?}");
    // ...and under wal=strict every malloc_to and free_from writes and clears one.
    let sw = get(&traced_run("nvalloc-log:wal=strict", threadtest_body(2000)), "wal");
    assert!(sw.0 >= 2 * 8000, "WAL flushes: nvalloc-log:wal=strict {sw:?}");
    // ...but interleaved bitmaps and WAL entries turn reflushes into regular flushes.
    assert!(fm.1 * 4 < bm.1, "bitmap reflushes: base {bm:?}, nvalloc-log {fm:?}");
    assert!(fw.1 < bw.1, "WAL reflushes: base {bw:?}, nvalloc-log {fw:?}");
    let im = get(&inter, "meta");
    assert!(im.1 <= bm.1, "the interleaved tcache alone: {im:?} vs base {bm:?}");
    // Over sequential bitmaps a slab of 64 B blocks covers two bitmap lines:
    // a refill that goes on to further partial slabs fills more sub-tcaches,
    // so consecutive allocations rotate over more lines and fewer reflush.
    let all = get(&traced_run("+interleaved:fill_all_subs=true", threadtest_body(2000)), "meta");
    assert!(all.1 * 10 < im.1 * 9, "every sub-tcache filled: {all:?} vs one slab per refill {im:?}");
}

// ----- multi-threaded stress ---------------------------------------------------------

/// One thread's run: random mallocs and frees of mixed sizes, every object
/// checked when freed. Returns the live objects and the offsets it freed.
fn stress_thread(mut t: NvAllocThread, seed: u64, ops: usize) -> (Vec<(u64, u64, u64)>, Vec<u64>) {
    let mut r = Rng::new(seed);
    let mut live: Vec<(u64, u64, u64)> = Vec::new();
    let mut freed = Vec::new();
    for i in 0..ops {
        if live.len() < 20 || (live.len() < 400 && r.below(100) < 55) {
            let size = mixed_size(&mut r, true);
            let obj_seed = seed << 32 | i as u64;
            let Some(off) = t.malloc(size) else { continue };
            write_obj(&mut t, off, size, obj_seed);
            live.push((off, size, obj_seed));
        } else {
            let (off, size, _) = live.swap_remove(r.below(live.len() as u64) as usize);
            assert_eq!(check_obj(&t, off, u64::MAX), Ok(size), "object corrupted while live");
            if r.below(2) == 0 {
                t.free(off);
            } else {
                // Through a persistent dest: the object's own first word.
                t.write_u64(off, off);
                t.free_from(off);
            }
            freed.push(off);
        }
    }
    (live, freed)
}

#[test]
fn four_threads_stress_every_preset() {
    let d = tmpdir();
    for preset in PRESETS {
        let path = d.path().join(preset);
        let (heap, nv) = create(&path, 256 << 20, preset);
        let handles: Vec<_> = (0..4u32)
            .map(|tid| {
                let t = nv.thread(tid);
                std::thread::spawn(move || stress_thread(t, 1 + tid as u64, 3000))
            })
            .collect();
        let mut objs = BTreeMap::new();
        let mut freed = HashSet::new();
        for h in handles {
            let (live, f) = h.join().unwrap();
            objs.extend(live.into_iter().map(|(o, s, seed)| (o, (s, seed))));
            freed.extend(f);
        }
        let t = nv.thread(0);
        let allocs = t.live_allocations();
        assert_disjoint(&allocs);
        assert_eq!(allocs.len(), objs.len(), "{preset}: exactly the live objects are allocated");
        for &(off, usable) in &allocs {
            let (size, _) = objs.get(&off).unwrap_or_else(|| panic!("{preset}: {off:#x} allocated but not live"));
            assert!(usable >= *size);
        }
        let reused = objs.keys().filter(|o| freed.contains(o)).count();
        assert!(reused > 0, "{preset}: no freed block or extent was handed out again");
        let util = nv.slab_utilization().unwrap();
        assert!(util.low + util.mid + util.high > 0);
        drop(t);
        close(heap, nv);

        let (heap, nv) = open(&path, preset);
        let mut t = nv.thread(0);
        assert_eq!(t.live_allocations(), allocs, "{preset}: same allocations after reopen");
        for (&off, &(size, _)) in &objs {
            assert_eq!(check_obj(&t, off, u64::MAX), Ok(size), "{preset}: contents after reopen");
        }
        for &off in objs.keys() {
            t.free(off);
        }
        assert!(t.live_allocations().is_empty());
        drop(t);
        close(heap, nv);
    }
}

#[test]
fn drop_without_close_is_recovered_as_a_crash() {
    let d = tmpdir();
    let path = d.path().join("h");
    for preset in PRESETS {
        let (heap, nv) = create(&path, 64 << 20, preset);
        let mut t = nv.thread(0);
        let table = t.malloc_to(8 * 64, H::root_offset(0)).unwrap();
        let mut r = Rng::new(7);
        for i in 0..64 {
            let dest = table + 8 * i;
            t.write_u64(dest, 0);
            let size = mixed_size(&mut r, false);
            let off = t.malloc_to(size, dest).unwrap();
            write_obj(&mut t, off, size, i);
        }
        for i in (0..64).step_by(3) {
            t.free_from(table + 8 * i);
            // (wal=artifact leaves a small block's destination as it is.)
            t.write_u64(table + 8 * i, 0);
        }
        let expected = t.live_allocations();
        drop(t);
        drop(nv);
        drop(heap);

        let (heap, nv) = open(&path, preset);
        assert!(nv.recovery().crashed, "{preset}: dropping without close is a crash");
        let t = nv.thread(0);
        assert_eq!(t.live_allocations(), expected, "{preset}");
        for i in 0..64 {
            let o = t.read_u64(table + 8 * i);
            assert_eq!(o == 0, i % 3 == 0);
            if o != 0 {
                check_obj(&t, o, u64::MAX).unwrap();
            }
        }
        drop(t);
        close(heap, nv);
    }
}

// ----- SIGKILL at random points --------------------------------------------------------

const CHILD_ENV: &str = "PMSIM_NVALLOC_CRASH_CHILD";
/// What the victim prints once the heap is open (libtest may put other text
/// on the same line).
const READY: &str = "nvalloc-victim-ready";

/// The victim: opens the heap (recovering) and churns until killed. Each
/// thread allocates into its pending slot, writes and persists the object,
/// links it into one of its slots, clears the pending slot; or frees a slot.
#[test]
fn crash_child_role() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let (path, rest) = spec.split_once('|').unwrap();
    let (preset, seed) = rest.split_once('|').unwrap();
    let seed: u64 = seed.parse().unwrap();
    let heap = Heap::open(path).unwrap();
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let nv = NvAlloc::open(&heap, pm, crash_cfg(preset)).unwrap();
    println!("{READY}");
    let handles: Vec<_> = (0..CHILD_THREADS)
        .map(|th| {
            let mut t = nv.thread(th as u32);
            std::thread::spawn(move || {
                let table = t.root(0);
                let mut r = Rng::new(seed * 31 + th);
                for i in 0.. {
                    let s = slot(table, th, r.below(SLOTS));
                    if t.read_u64(s) != 0 {
                        t.free_from(s);
                        continue;
                    }
                    let size = mixed_size(&mut r, true);
                    let p = pending(table, th);
                    let Some(off) = t.malloc_to(size, p) else { continue };
                    write_obj(&mut t, off, size, seed << 40 | th << 32 | i);
                    t.write_u64(s, off);
                    t.persist(s, 8);
                    t.write_u64(p, 0);
                    t.persist(p, 8);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

/// After a crash: open (recovery), settle pending objects, and check that
/// every linked object is intact, nothing overlaps and nothing leaked.
fn check_after_crash(path: &Path, preset: &str) -> (u64, u64) {
    let (heap, nv) = open_with(path, crash_cfg(preset));
    let rep = nv.recovery();
    let mut t = nv.thread(0);
    let table = t.root(0);
    assert_ne!(table, 0);
    let mut reachable = BTreeMap::new();
    reachable.insert(table, TABLE_BYTES);
    for th in 0..CHILD_THREADS {
        let p = pending(table, th);
        let o = t.read_u64(p);
        if o == 0 {
            continue;
        }
        if (0..SLOTS).any(|i| t.read_u64(slot(table, th, i)) == o) {
            // Linked before the crash; only the pending slot was left.
            t.write_u64(p, 0);
            t.persist(p, 8);
        } else {
            // Allocated, perhaps half written: the workload's protocol drops it.
            t.free_from(p);
        }
    }
    for th in 0..CHILD_THREADS {
        for i in 0..SLOTS {
            let o = t.read_u64(slot(table, th, i));
            if o != 0 {
                let usable = t.usable_size(o).unwrap_or_else(|| panic!("{preset}: linked {o:#x} is not allocated"));
                let len = check_obj(&t, o, usable).unwrap_or_else(|e| panic!("{preset}: {e}"));
                assert!(reachable.insert(o, len).is_none(), "{preset}: {o:#x} linked twice");
            }
        }
    }
    let allocs = t.live_allocations();
    assert_disjoint(&allocs);
    let mut leaked: Vec<(u64, u64)> = allocs.iter().copied().filter(|(o, _)| !reachable.contains_key(o)).collect();
    if preset == "nvalloc-gc" {
        // Conservative marking keeps a block that a stale word of a reached
        // object still names (as Makalu does): such blocks are not leaks of
        // the allocator. Everything else must have been freed.
        let retained = conservatively_reachable(&t, &allocs, reachable.keys().copied());
        leaked.retain(|(o, _)| !retained.contains(o));
    }
    assert!(
        leaked.is_empty(),
        "{preset}: {} allocation(s) leaked: {leaked:x?}; the heap's words that point into them \
         (address, value, allocation holding it): {:x?}; the root table at {table:#x}; recovery: {rep:?}",
        leaked.len(),
        words_naming(&t, heap.size(), &leaked, &allocs)
    );
    assert!(
        reachable.keys().all(|o| allocs.binary_search_by_key(o, |a| a.0).is_ok()),
        "{preset}: reachable not allocated"
    );
    drop(t);
    close(heap, nv);
    (rep.wal_redone, rep.wal_dropped)
}

/// Kills the victim 200 times (40 per preset; `PMSIM_KILLS_PER_PRESET=N` for more) at random points — during its recovery, between
/// operations, inside them — and checks the heap after each kill.
///
/// Leak bound: zero for the `log` presets. Every allocation is published
/// with `malloc_to` (or freed with `free_from`) and the WAL makes that atomic,
/// so after recovery the allocated set equals the set reachable from the root
/// table exactly. For `nvalloc-gc`, zero beyond conservative retention: a
/// block may survive only if a word of a reachable allocation (stale bytes
/// included) names it, which the check verifies.
#[test]
fn sigkill_at_random_points_is_recovered() {
    let d = tmpdir();
    let mut r = Rng::new(0xC0FFEE);
    let start = Instant::now();
    let (mut redone, mut dropped, mut kills) = (0, 0, 0);
    let rounds: u64 = std::env::var("PMSIM_KILLS_PER_PRESET").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    for (pi, preset) in ATOMIC_PRESETS.iter().enumerate() {
        let path: PathBuf = d.path().join(format!("crash{pi}"));
        let (heap, nv) = create_with(&path, 64 << 20, crash_cfg(preset));
        let mut t = nv.thread(0);
        let table = t.malloc_to(TABLE_BYTES, H::root_offset(0)).unwrap();
        t.write(table, &vec![0u8; TABLE_BYTES as usize]);
        t.persist(table, TABLE_BYTES);
        drop(t);
        close(heap, nv);
        for round in 0..rounds {
            let victim = Victim { test: "nvalloc::crash_child_role", env: CHILD_ENV, ready: READY };
            victim.kill_at_random_point(&format!("{}|{preset}|{}", path.display(), round + 1), round, &mut r);
            kills += 1;
            let (a, b) = check_after_crash(&path, preset);
            redone += a;
            dropped += b;
        }
    }
    eprintln!(
        "{kills} kills in {:.1} s: {redone} WAL entries redone, {dropped} dropped",
        start.elapsed().as_secs_f64()
    );
    assert_eq!(kills, rounds * ATOMIC_PRESETS.len() as u64);
    assert!(kills >= 200 || std::env::var("PMSIM_KILLS_PER_PRESET").is_ok());
    assert!(redone + dropped > 0, "no kill landed inside an operation: the test does not test the WAL");
}
