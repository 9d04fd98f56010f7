//! LLFree on real heap files: base and huge frames, reuse, a full heap,
//! clean and unclean restarts (counters rebuilt from the bit fields), clear
//! errors, the flush-and-fence after every lower-level CAS (and none under
//! eADR), and recovery after SIGKILL at random points with at most one lost
//! frame per thread (the test binary re-runs itself as the victim).

use crate::common;

use common::{open_heap, pending, retry_locked, slot, tmpdir, Rng, Victim, CHILD_THREADS, SLOTS, TABLE_BYTES};
use pmsim_model::error::ErrorKind;
use pmsim_model::heap::Heap as H;
use pmsim_model::llfree::{LlFree, LlFreeConfig};
use pmsim_model::AllocConfig;
use pmsim_model::{AllocThread, Allocator, FlushInsn, Heap, HeapOptions, OpKind, Pm, TraceConfig};
use pmsim_traces::{FenceKind, OwnedEvent, VecSink};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

const KIB4: u64 = 4096;
const MIB2: u64 = 2 << 20;

fn create_with(path: &Path, size: u64, cfg: LlFreeConfig) -> (Heap, Arc<LlFree>) {
    let opts = HeapOptions { overwrite: true, ..Default::default() };
    let heap = retry_locked(|| Heap::create_with(path, size, &opts));
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let ll = LlFree::create(&heap, pm, cfg).unwrap();
    (heap, ll)
}

fn create(path: &Path, size: u64) -> (Heap, Arc<LlFree>) {
    create_with(path, size, LlFreeConfig::default())
}

fn open(path: &Path) -> (Heap, Arc<LlFree>) {
    let heap = open_heap(path);
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let ll = LlFree::open(&heap, pm, LlFreeConfig::default()).unwrap_or_else(|e| panic!("open failed: {e}"));
    (heap, ll)
}

fn close(heap: Heap, ll: Arc<LlFree>) {
    drop(ll.close().unwrap());
    heap.close().unwrap();
}

/// A crash: the allocator and heap go away without `close`.
fn crash(heap: Heap, ll: Arc<LlFree>) {
    drop(ll);
    drop(heap);
}

#[test]
fn base_and_huge_frames_are_distinct_aligned_and_reused() {
    let d = tmpdir();
    let (heap, ll) = create(&d.path().join("h"), 160 << 20);
    let mut t = ll.thread(0);
    let z = ll.zone();
    assert_eq!(z.frames_off % MIB2, 0);
    let mut seen = BTreeSet::new();
    let base: Vec<u64> = (0..1500).map(|i| t.malloc(if i % 2 == 0 { 1 } else { KIB4 }).unwrap()).collect();
    let huge: Vec<u64> = (0..10).map(|_| t.malloc(MIB2).unwrap()).collect();
    for &o in &base {
        assert_eq!((o - z.frames_off) % KIB4, 0);
        assert!(seen.insert(o), "{o:#x} handed out twice");
    }
    for &o in &huge {
        assert_eq!((o - z.frames_off) % MIB2, 0, "huge frame {o:#x} not 2 MiB aligned");
        assert!(base.iter().all(|&b| b < o || b >= o + MIB2), "huge frame {o:#x} overlaps a base frame");
    }
    assert_eq!(t.malloc(MIB2 + 1), None, "more than 2 MiB must be refused");
    assert_eq!(ll.footprint().live_bytes, 1500 * KIB4 + 10 * MIB2);
    assert_eq!(t.allocations().len(), 1510);
    ll.check(t.pm()).unwrap();
    for &o in base.iter().chain(&huge) {
        t.free(o);
    }
    assert_eq!(ll.footprint().live_bytes, 0);
    assert!(t.allocations().is_empty());
    // Freed frames come back: the same count fits again.
    let again: Vec<u64> = (0..1500).map(|_| t.malloc(KIB4).unwrap()).collect();
    let before = |o: u64| seen.contains(&o) || huge.iter().any(|&h| o >= h && o < h + MIB2);
    // Last fit: the search resumes at the last child allocated from.
    assert!(again.iter().any(|&o| before(o)), "no freed frame reused");
    for o in again {
        t.free(o);
    }
    drop(t);
    assert_eq!(ll.free_frames(), z.frames());
    close(heap, ll);
}

/// CPUs share locals when the zone holds less than a tree per CPU, as
/// LLFree's code does: on a zone below one tree two threads could each
/// reserve it in turn and find it drained by the other (a 2-thread run of
/// 2 MiB frames on 16 MiB ran out of memory in 1 of 60 runs, on 32 MiB in 5).
#[test]
fn cpus_share_locals_when_the_zone_holds_fewer_trees() {
    let d = tmpdir();
    for (size, locals) in [(16u64 << 20, 1), (256 << 20, 3)] {
        let (heap, ll) = create(&d.path().join(format!("h{size}")), size);
        let cpus: BTreeSet<usize> = (0..8).map(|tid| ll.thread(tid).cpu()).collect();
        assert_eq!(cpus.len(), locals, "{size} B: locals {cpus:?}");
        close(heap, ll);
    }
}

#[test]
fn a_full_zone_returns_none_and_recovers_after_frees() {
    let d = tmpdir();
    let (heap, ll) = create(&d.path().join("h"), 16 << 20);
    let mut t = ll.thread(0);
    let frames = ll.zone().frames();
    let all: Vec<u64> = std::iter::from_fn(|| t.malloc(KIB4)).collect();
    assert_eq!(all.len() as u64, frames, "every frame, then None");
    assert_eq!(t.malloc(MIB2), None);
    t.free(all[700]);
    assert_eq!(t.malloc(KIB4), Some(all[700]));
    // A whole child free again serves a huge frame.
    for &o in &all[512..1024] {
        t.free(o);
    }
    assert_eq!(t.malloc(MIB2), Some(all[512]));
    drop(t);
    crash(heap, ll);
}

#[test]
fn clean_restart_trusts_counters_and_keeps_frames() {
    let d = tmpdir();
    let path = d.path().join("h");
    let (heap, ll) = create(&path, 160 << 20);
    let mut t = ll.thread(0);
    let a = t.malloc_to(KIB4, H::root_offset(1)).unwrap();
    let b = t.malloc_to(MIB2, H::root_offset(2)).unwrap();
    t.write(a, b"base");
    drop(t);
    close(heap, ll);
    let (heap, ll) = open(&path);
    let rep = ll.recovery();
    assert!(!rep.crashed && rep.children_fixed == 0, "{rep:?}");
    assert_eq!((rep.frames_allocated, rep.huge_allocated), (513, 1));
    let mut t = ll.thread(0);
    assert_eq!((t.root(1), t.root(2)), (a, b));
    let mut buf = [0u8; 4];
    t.read(a, &mut buf);
    assert_eq!(&buf, b"base");
    assert_eq!(t.allocations(), vec![(a, KIB4), (b, MIB2)]);
    t.free_from(H::root_offset(2));
    t.free_from(H::root_offset(1));
    assert_eq!((t.root(1), t.root(2)), (0, 0));
    assert!(t.allocations().is_empty());
    drop(t);
    close(heap, ll);
}

/// The heap offset of the 16-bit child entry `c`.
fn child_off(ll: &LlFree, c: u64) -> u64 {
    ll.zone().children_off + 2 * c
}

#[test]
fn recovery_rebuilds_counters_from_the_bit_fields() {
    let d = tmpdir();
    let path = d.path().join("h");
    let (heap, ll) = create(&path, 160 << 20);
    let mut t = ll.thread(0);
    let frames: Vec<u64> = (0..2000).map(|_| t.malloc(KIB4).unwrap()).collect();
    let huge = t.malloc(MIB2).unwrap();
    for &o in frames.iter().step_by(3) {
        t.free(o);
    }
    let before = t.allocations();
    // What a crash between the two CASes of a base operation leaves: a
    // counter off by one (decremented, bit not yet set; or bit cleared,
    // counter not yet incremented), here in three children.
    for (c, delta) in [(0u64, -1i32), (2, 1), (3, -5)] {
        let off = child_off(&ll, c);
        let v: u16 = t.pm().load(off);
        t.pm().store(off, (v as i32 + delta) as u16);
    }
    let err = ll.check(t.pm()).unwrap_err();
    assert!(err.starts_with("child 0: entry"), "{err}");
    drop(t);
    crash(heap, ll);

    let (heap, ll) = open(&path);
    let rep = ll.recovery();
    assert!(rep.crashed, "{rep:?}");
    assert_eq!(rep.children_fixed, 3, "{rep:?}");
    let mut t = ll.thread(0);
    ll.check(t.pm()).expect("counters equal the bit fields after recovery");
    assert_eq!(t.allocations(), before, "recovery must not change what is allocated");
    assert_eq!(rep.frames_allocated, before.iter().map(|a| a.1 / KIB4).sum::<u64>());
    assert_eq!(ll.free_frames(), ll.zone().frames() - rep.frames_allocated);
    assert!(before.contains(&(huge, MIB2)));
    for (o, _) in before {
        t.free(o);
    }
    assert!(t.allocations().is_empty());
    drop(t);
    close(heap, ll);
}

#[test]
fn errors_are_one_clear_line() {
    let d = tmpdir();
    // Too small for one huge frame after the metadata.
    let heap = Heap::create(d.path().join("small"), 2 << 20).unwrap();
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let e = LlFree::create(&heap, pm, LlFreeConfig::default()).err().unwrap().to_string();
    assert!(e.contains("small") && e.contains("holds no 2 MiB frame"), "{e}");
    // Not an LLFree heap.
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let e = LlFree::open(&heap, pm, LlFreeConfig::default()).err().unwrap().to_string();
    assert!(e.contains("not an LLFree heap"), "{e}");
    drop(heap);
    // Already one; bad configuration; a huge child with bits set.
    let path = d.path().join("h");
    let (heap, ll) = create(&path, 64 << 20);
    let mut t = ll.thread(0);
    let h = t.malloc(MIB2).unwrap();
    let pfn = (h - ll.zone().frames_off) / KIB4;
    let bits = ll.zone().bitfields_off + pfn / 8;
    t.pm().store(bits, 1u8);
    drop(t);
    crash(heap, ll);
    let heap = open_heap(&path);
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    assert!(matches!(LlFree::create(&heap, pm, LlFreeConfig::default()), Err(e) if e.kind == ErrorKind::Exists));
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let e = LlFree::open(&heap, pm, LlFreeConfig::default()).err().unwrap().to_string();
    assert!(e.contains("corrupt LLFree heap") && e.contains("allocated huge frame but its bit field"), "{e}");
    assert!(!e.contains('\n'));
    let e = LlFreeConfig::default().with_overrides(["cpus=0"]).unwrap_err().to_string();
    assert!(e.contains("cpus = 0"), "{e}");
    let e = LlFreeConfig::default().with_overrides(["stripes=4"]).unwrap_err().to_string();
    assert!(e.contains("unknown LLFree parameter 'stripes'"), "{e}");
}

/// Runs `body` traced on a fresh zone and returns thread 1's events.
fn traced(cfg: LlFreeConfig, body: impl FnOnce(&mut pmsim_model::llfree::LlFreeThread)) -> (Vec<OwnedEvent>, [u64; 2]) {
    let d = tmpdir();
    let heap = Heap::create(d.path().join("t"), 160 << 20).unwrap();
    let base = heap.base() as u64;
    let (pm, collector) =
        Pm::traced(&heap, FlushInsn::best(), &TraceConfig::default(), |_| Ok(VecSink::default())).unwrap();
    let ll = LlFree::create(&heap, pm, cfg).unwrap();
    let z = ll.zone();
    let meta = [base + z.children_off, base + z.frames_off];
    let mut t = ll.thread(1);
    body(&mut t);
    drop(t);
    let pm = ll.close().unwrap();
    let events = collector.finish(pm).unwrap().sink.0;
    heap.close().unwrap();
    (events.into_iter().filter(|(tid, _)| *tid == 1).map(|(_, e)| e).collect(), meta)
}

fn churn(t: &mut pmsim_model::llfree::LlFreeThread) {
    let mut v: Vec<u64> = (0..600).map(|_| t.malloc(KIB4).unwrap()).collect();
    v.push(t.malloc(MIB2).unwrap());
    for o in v {
        t.free(o);
    }
}

#[test]
fn every_lower_level_cas_is_flushed_and_fenced_unless_eadr() {
    let (events, [meta, end]) = traced(LlFreeConfig::default(), churn);
    let in_meta = |a: u64| a >= meta && a < end;
    let (mut cases, mut in_op) = (0, false);
    for (i, e) in events.iter().enumerate() {
        match e {
            OwnedEvent::OpBegin { op: OpKind::Malloc | OpKind::Free, .. } => in_op = true,
            OwnedEvent::OpEnd { .. } => in_op = false,
            OwnedEvent::Store { addr, .. } if in_op && in_meta(*addr) => {
                cases += 1;
                assert!(
                    matches!(events[i - 1], OwnedEvent::Fence { kind: FenceKind::LockedRmw }),
                    "store {i} to lower-level metadata is not a CAS"
                );
                assert!(
                    matches!(events[i + 1], OwnedEvent::Flush { line, .. } if line == addr & !63),
                    "CAS {i} at {addr:#x} not followed by a flush of its line: {:?}",
                    events.get(i + 1)
                );
                assert!(matches!(events[i + 2], OwnedEvent::Fence { kind: FenceKind::Sfence }), "CAS {i}: no fence");
            }
            _ => {}
        }
    }
    // 600 base frames: two CASes each way; the huge frame one each way.
    assert_eq!(cases, 600 * 4 + 2, "lower-level CASes");
    // Under eADR the same operations flush nothing.
    let (events, _) = traced(LlFreeConfig { eadr: true, ..LlFreeConfig::default() }, churn);
    let cas = events.iter().filter(|e| matches!(e, OwnedEvent::Fence { kind: FenceKind::LockedRmw })).count();
    assert!(cas >= 600 * 4, "eADR: {cas} CASes");
    assert!(events.iter().all(|e| !matches!(e, OwnedEvent::Flush { .. })), "eADR: flushes during operations");
}

// ----- SIGKILL at random points ------------------------------------------------------------

const CHILD_ENV: &str = "PMSIM_LLFREE_CRASH_CHILD";
const READY: &str = "llfree-victim-ready";
const CRASH_HEAP: u64 = 320 << 20;

/// The victim: opens the zone (recovering) and churns until killed. Each
/// thread allocates a base or (one time in ten) huge frame into its pending
/// slot, writes a stamp, links it into one of its slots and clears the
/// pending slot; or frees a slot's frame with `free_from`.
#[test]
fn crash_child_role() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let (path, seed) = spec.split_once('|').unwrap();
    let seed: u64 = seed.parse().unwrap();
    let heap = Heap::open(path).unwrap();
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let ll = LlFree::open(&heap, pm, LlFreeConfig::default()).unwrap();
    println!("{READY}");
    let handles: Vec<_> = (0..CHILD_THREADS)
        .map(|th| {
            let mut t = ll.thread(th as u32);
            std::thread::spawn(move || {
                let table = t.root(0);
                let mut r = Rng::new(seed * 31 + th);
                loop {
                    let s = slot(table, th, r.below(SLOTS));
                    if t.read_u64(s) != 0 {
                        t.free_from(s);
                        continue;
                    }
                    let size = if r.below(10) == 0 { MIB2 } else { KIB4 };
                    let p = pending(table, th);
                    let Some(off) = t.malloc_to(size, p) else { continue };
                    // A stamp: the offset, its low bits flipped by the seed.
                    t.write_u64(off, off ^ seed);
                    t.persist(off, 8);
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

/// After a kill: open (recovery), check the counters against the bit
/// fields, settle the pending slots, and count the allocated frames nothing
/// reaches (lost frames), which are then freed. `opened`: the victim had
/// opened the zone before the kill. Returns the lost count.
fn check_after_crash(path: &Path, opened: bool) -> u64 {
    let (heap, ll) = open(path);
    let rep = ll.recovery();
    assert!(rep.crashed || !opened, "a killed victim must leave the zone marked running: {rep:?}");
    let mut t = ll.thread(0);
    ll.check(t.pm()).unwrap_or_else(|e| panic!("after recovery: {e}"));
    let table = t.root(0);
    let mut reachable = BTreeSet::from([table]);
    for th in 0..CHILD_THREADS {
        for i in 0..SLOTS {
            let o = t.read_u64(slot(table, th, i));
            if o != 0 {
                assert!(reachable.insert(o), "{o:#x} linked twice");
            }
        }
    }
    for th in 0..CHILD_THREADS {
        let p = pending(table, th);
        let o = t.read_u64(p);
        if o != 0 && reachable.contains(&o) {
            // Linked before the crash; only the pending slot was left.
            t.write_u64(p, 0);
            t.persist(p, 8);
        } else if o != 0 {
            // Allocated but not linked: the workload's protocol drops it.
            t.free_from(p);
        }
    }
    let allocs = t.allocations();
    let allocated: BTreeSet<u64> = allocs.iter().map(|a| a.0).collect();
    for &o in &reachable {
        assert!(allocated.contains(&o), "{o:#x} is reachable but not allocated");
        if o != table {
            assert_eq!(t.read_u64(o) & !0xfff_ffff, o & !0xfff_ffff, "object {o:#x} lost its stamp");
        }
    }
    let lost: Vec<u64> = allocated.difference(&reachable).copied().collect();
    assert!(lost.len() as u64 <= CHILD_THREADS, "{} lost frames (at most one per thread): {lost:x?}", lost.len());
    for &o in &lost {
        t.free(o);
    }
    ll.check(t.pm()).unwrap();
    drop(t);
    close(heap, ll);
    lost.len() as u64
}

/// Kills the victim 200 times (`PMSIM_LLFREE_KILLS=N` for another count) at
/// random points — during its recovery, between operations, inside them —
/// and checks after each kill that recovery rebuilt the counters from the
/// bit fields and that at most one frame per thread was lost (paper §3.2.3,
/// §5.7).
#[test]
fn sigkill_at_random_points_loses_at_most_a_frame_per_thread() {
    let d = tmpdir();
    let path = d.path().join("crash");
    let (heap, ll) = create(&path, CRASH_HEAP);
    let mut t = ll.thread(0);
    let table = t.malloc_to(TABLE_BYTES, H::root_offset(0)).unwrap();
    t.write(table, &vec![0u8; TABLE_BYTES as usize]);
    t.persist(table, TABLE_BYTES);
    drop(t);
    close(heap, ll);
    let kills: u64 = std::env::var("PMSIM_LLFREE_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(200);
    let mut r = Rng::new(0x11F7EE);
    let start = Instant::now();
    let (mut lost, mut rounds_with_loss) = (0, 0);
    for round in 0..kills {
        let victim = Victim { test: "llfree::crash_child_role", env: CHILD_ENV, ready: READY };
        victim.kill_at_random_point(&format!("{}|{}", path.display(), round + 1), round, &mut r);
        // Odd rounds kill after the victim said it opened the zone.
        let l = check_after_crash(&path, round % 2 == 1);
        lost += l;
        rounds_with_loss += (l > 0) as u64;
    }
    eprintln!(
        "{kills} kills in {:.1} s: {lost} lost frames in {rounds_with_loss} of them",
        start.elapsed().as_secs_f64()
    );
    assert!(kills >= 200 || std::env::var("PMSIM_LLFREE_KILLS").is_ok());
}
