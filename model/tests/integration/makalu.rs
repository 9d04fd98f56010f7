//! The Makalu-style allocator on real heap files: every workload at tiny
//! scale through the runner, restarts after a graceful shutdown, the
//! offline GC after an unclean one (leaked objects reclaimed, exactly the
//! reachable ones kept), and recovery after SIGKILL at random points (the
//! test binary re-runs itself as the victim).

use crate::common;

use common::{
    assert_disjoint, check_obj, conservatively_reachable, mixed_size, pending, slot, tmpdir, write_obj, Rng, Victim,
    CHILD_THREADS, SLOTS, TABLE_BYTES,
};
use pmsim_model::heap::{Heap as H, ROOT_SLOTS};
use pmsim_model::makalu::{Makalu, MakaluConfig};
use pmsim_model::runner::AllocSpec;
use pmsim_model::{AllocThread, Allocator, FlushInsn, Heap, Pm};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

fn create(path: &Path, size: u64) -> (Heap, Arc<Makalu>) {
    let heap = Heap::create(path, size).unwrap();
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let mk = Makalu::create(&heap, pm, MakaluConfig::default()).unwrap();
    (heap, mk)
}

/// Opens the heap; a SIGKILLed victim's lock may linger for a moment.
fn open(path: &Path) -> (Heap, Arc<Makalu>) {
    let start = Instant::now();
    let heap = loop {
        match Heap::open(path) {
            Ok(h) => break h,
            Err(e) if e.kind == pmsim_model::HeapErrorKind::Locked && start.elapsed().as_secs() < 10 => {
                std::thread::sleep(std::time::Duration::from_millis(5))
            }
            Err(e) => panic!("{e}"),
        }
    };
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let mk = Makalu::open(&heap, pm, MakaluConfig::default()).unwrap_or_else(|e| panic!("{e}"));
    (heap, mk)
}

fn close(heap: Heap, mk: Arc<Makalu>) {
    drop(mk.close().unwrap());
    heap.close().unwrap();
}

#[test]
fn parameters_are_checked() {
    let spec = AllocSpec::parse("makalu:small_max=256:freelist_bytes=4096:shipped=true", []).unwrap();
    assert_eq!((&spec.params()["small_max"], &spec.params()["freelist_bytes"]), (&256.into(), &4096.into()));
    assert_eq!(spec.params()["shipped"], true);
    let e = AllocSpec::parse("makalu:stripes=4", []).unwrap_err().to_string();
    assert!(e.contains("unknown Makalu parameter 'stripes'"), "{e}");
    let e = AllocSpec::parse("makalu:small_max=4096", []).unwrap_err().to_string();
    assert!(e.contains("small_max = 4096"), "{e}");
}

/// A table of `n` slots at root 0 with objects of mixed sizes linked into it.
fn fill(t: &mut impl AllocThread, n: u64, seed: u64) -> (u64, Vec<(u64, u64)>) {
    let table = t.malloc_to(8 * n, H::root_offset(0)).unwrap();
    t.write(table, &vec![0u8; 8 * n as usize]);
    t.persist(table, 8 * n);
    let mut r = Rng::new(seed);
    let mut objs = Vec::new();
    for i in 0..n {
        let len = mixed_size(&mut r, false);
        let o = t.malloc_to(len, table + 8 * i).unwrap();
        write_obj(t, o, len, seed + i);
        objs.push((o, len));
    }
    (table, objs)
}

#[test]
fn objects_survive_a_graceful_shutdown_and_restart() {
    let d = tmpdir();
    let path = d.path().join("h");
    let (heap, mk) = create(&path, 64 << 20);
    let mut t = mk.thread(0);
    let (table, objs) = fill(&mut t, 200, 1);
    // Free every third one, keep the rest.
    for i in (0..200).step_by(3) {
        t.free_from(table + 8 * i);
    }
    drop(t);
    close(heap, mk);

    let (heap, mk) = open(&path);
    assert!(!mk.recovery().crashed);
    let mut t = mk.thread(0);
    let mut live: HashSet<u64> = HashSet::from([table]);
    for (i, &(o, len)) in objs.iter().enumerate() {
        if i % 3 == 0 {
            assert_eq!(t.read_u64(table + 8 * i as u64), 0);
            continue;
        }
        assert_eq!(check_obj(&t, o, t.usable_size(o).unwrap()), Ok(len));
        live.insert(o);
    }
    let marked: HashSet<u64> = t.marked_objects().iter().map(|a| a.0).collect();
    assert_eq!(marked, live, "after a graceful shutdown the mark bits are exactly the live objects");
    assert_disjoint(&t.marked_objects());
    assert_eq!(mk.footprint().live_bytes, t.marked_objects().iter().map(|a| a.1).sum::<u64>());
    // The freed space is reused and nothing live is handed out again.
    for _ in 0..500 {
        let o = t.malloc(64).unwrap();
        assert!(!live.contains(&o));
    }
    drop(t);
    close(heap, mk);
}

#[test]
fn the_gc_reclaims_exactly_the_unreachable_objects_after_an_unclean_shutdown() {
    let d = tmpdir();
    let path = d.path().join("h");
    let (heap, mk) = create(&path, 64 << 20);
    let mut t = mk.thread(0);
    let (table, objs) = fill(&mut t, 100, 2);
    // Leaks: allocated and never published (small, medium, large).
    let mut leaked = HashSet::new();
    for size in [16, 48, 400, 1000, 2000, 5000, 100_000] {
        for _ in 0..3 {
            leaked.insert(t.malloc(size).unwrap());
        }
    }
    // A list reachable only through another object.
    let inner = t.malloc(64).unwrap();
    t.write_u64(inner, 0);
    let outer = t.malloc(32).unwrap();
    t.write_u64(outer, inner);
    t.write_u64(table, outer);
    t.persist(table, 8);
    // The first slot's object is now unreachable too.
    leaked.insert(objs[0].0);
    drop(t);
    // Marked now: the allocated objects and those in the global medium
    // free lists, which the crash below loses.
    let before = mk.thread(1).marked_objects().len() as u64;
    drop(mk); // no close: the state word still says running
    drop(heap);

    let (heap, mk) = open(&path);
    let rep = mk.recovery();
    assert!(rep.crashed);
    let t = mk.thread(0);
    let marked: HashSet<u64> = t.marked_objects().iter().map(|a| a.0).collect();
    assert_eq!(rep.gc_freed, before - marked.len() as u64, "{rep:?}: every object marked before and not reached");
    assert!(rep.gc_freed > leaked.len() as u64, "objects of the lost medium free lists are reclaimed too");
    let mut want: HashSet<u64> = objs[1..].iter().map(|a| a.0).collect();
    want.extend([table, outer, inner]);
    assert_eq!(marked, want);
    for &(o, len) in &objs[1..] {
        assert_eq!(check_obj(&t, o, t.usable_size(o).unwrap()), Ok(len));
    }
    assert!(leaked.iter().all(|&o| t.usable_size(o).is_none()));
    drop(t);
    close(heap, mk);
}

// ----- SIGKILL at random points --------------------------------------------------------

const CHILD_ENV: &str = "PMSIM_MAKALU_CRASH_CHILD";
const READY: &str = "makalu-victim-ready";

/// The victim: churns objects through `malloc_to` / `free_from` and leaks
/// one allocation in eight (never published), until killed.
#[test]
fn crash_child_role() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let (path, seed) = spec.split_once('|').unwrap();
    let seed: u64 = seed.parse().unwrap();
    let (heap, mk) = open(Path::new(path));
    println!("{READY}");
    let handles: Vec<_> = (0..CHILD_THREADS)
        .map(|th| {
            let mut t = mk.thread(th as u32);
            std::thread::spawn(move || {
                let table = t.root(0);
                let mut r = Rng::new(seed * 31 + th);
                for i in 0.. {
                    if r.below(8) == 0 {
                        let _leak = t.malloc(mixed_size(&mut r, false));
                        continue;
                    }
                    let s = slot(table, th, r.below(SLOTS));
                    if t.read_u64(s) != 0 {
                        t.free_from(s);
                        continue;
                    }
                    let size = mixed_size(&mut r, false);
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
    drop(heap);
}

/// After a kill: recovery (undo + GC), then every linked object must be
/// intact and the allocated set must be exactly what is reachable from the
/// roots. Returns the GC's report.
fn check_after_crash(path: &Path) -> pmsim_model::makalu::RecoveryReport {
    let (heap, mk) = open(path);
    let rep = mk.recovery();
    let mut t = mk.thread(0);
    let table = t.root(0);
    let allocs = t.marked_objects();
    assert_disjoint(&allocs);
    let kept = conservatively_reachable(&t, &allocs, (0..ROOT_SLOTS).map(|s| t.root(s)));
    let marked: HashSet<u64> = allocs.iter().map(|a| a.0).collect();
    let kept: HashSet<u64> = kept.into_iter().filter(|o| marked.contains(o)).collect();
    assert_eq!(marked, kept, "allocated after the GC must equal reachable from the roots ({rep:?})");
    let mut linked = BTreeMap::new();
    for th in 0..CHILD_THREADS {
        for i in 0..SLOTS {
            let o = t.read_u64(slot(table, th, i));
            if o != 0 {
                let usable = t.usable_size(o).unwrap_or_else(|| panic!("linked {o:#x} is not allocated"));
                let len = check_obj(&t, o, usable).unwrap_or_else(|e| panic!("{e}"));
                assert!(linked.insert(o, len).is_none(), "{o:#x} linked twice");
            }
        }
        // The pending object: the protocol drops it unless it was linked.
        let p = pending(table, th);
        let o = t.read_u64(p);
        if o != 0 && !linked.contains_key(&o) {
            t.free_from(p);
        } else if o != 0 {
            t.write_u64(p, 0);
            t.persist(p, 8);
        }
    }
    drop(t);
    close(heap, mk);
    rep
}

/// Kills the victim 30 times at random points (`PMSIM_MAKALU_KILLS=N` for
/// more) and checks the heap after each; over all kills the GC must have
/// reclaimed leaked objects.
#[test]
fn sigkill_at_random_points_is_recovered_by_the_gc() {
    let d = tmpdir();
    let path = d.path().join("crash");
    let (heap, mk) = create(&path, 64 << 20);
    let mut t = mk.thread(0);
    let table = t.malloc_to(TABLE_BYTES, H::root_offset(0)).unwrap();
    t.write(table, &vec![0u8; TABLE_BYTES as usize]);
    t.persist(table, TABLE_BYTES);
    drop(t);
    close(heap, mk);
    let kills: u64 = std::env::var("PMSIM_MAKALU_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(30);
    let mut r = Rng::new(0x3A4A);
    let (mut freed, mut undone, mut crashed) = (0, 0, 0);
    let start = Instant::now();
    let victim = Victim { test: "makalu::crash_child_role", env: CHILD_ENV, ready: READY };
    for round in 0..kills {
        victim.kill_at_random_point(&format!("{}|{}", path.display(), round + 1), round, &mut r);
        let rep = check_after_crash(&path);
        freed += rep.gc_freed;
        undone += rep.undone;
        crashed += rep.crashed as u64;
    }
    eprintln!(
        "{kills} kills in {:.1} s: {crashed} crash recoveries, {freed} leaked objects reclaimed, {undone} undo entries rolled back",
        start.elapsed().as_secs_f64()
    );
    assert!(crashed > kills / 2, "most kills must land after the victim opened the heap");
    assert!(freed > 0, "the GC reclaimed nothing: leaked objects survived");
}
