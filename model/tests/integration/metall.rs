//! The Metall-style allocator on real heap files: every workload at tiny
//! scale through the runner, a properly closed store reopened with every
//! object intact, an unclean store (its process SIGKILLed, or dropped
//! without close) refused with one clear line, snapshots, damaged
//! management files refused by name, and the metadata check (bins against
//! bitsets and the chunk directory) catching a lost non-full chunk.

use crate::common;

use common::{assert_disjoint, check_obj, mixed_size, tmpdir, write_obj, Rng, Victim};
use pmsim_model::config::AllocConfig;
use pmsim_model::heap::Heap as H;
use pmsim_model::metall::{store, CopyKind, Metall, MetallConfig};
use pmsim_model::runner::AllocSpec;
use pmsim_model::AllocError;
use pmsim_model::{AllocThread, Allocator, FlushInsn, Heap, Pm};
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn create(path: &Path, size: u64) -> (Heap, Arc<Metall>) {
    let heap = Heap::create(path, size).unwrap();
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    (Metall::create(&heap, pm, MetallConfig::default()).unwrap(), heap).swap()
}

trait Swap<A, B> {
    fn swap(self) -> (B, A);
}
impl<A, B> Swap<A, B> for (A, B) {
    fn swap(self) -> (B, A) {
        (self.1, self.0)
    }
}

/// Opens the heap file (a SIGKILLed process's lock may linger for a moment)
/// and then the store on it.
fn try_open(path: &Path) -> (Heap, Result<Arc<Metall>, AllocError>) {
    let start = Instant::now();
    let heap = loop {
        match Heap::open(path) {
            Ok(h) => break h,
            Err(e) if e.kind == pmsim_model::HeapErrorKind::Locked && start.elapsed().as_secs() < 10 => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => panic!("{e}"),
        }
    };
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let r = Metall::open(&heap, pm, MetallConfig::default());
    (heap, r)
}

fn open(path: &Path) -> (Heap, Arc<Metall>) {
    let (heap, r) = try_open(path);
    (heap, r.unwrap_or_else(|e| panic!("{e}")))
}

fn close(heap: Heap, mt: Arc<Metall>) {
    drop(mt.close(&heap).unwrap());
    heap.close().unwrap();
}

#[test]
fn parameters_are_checked() {
    let spec = AllocSpec::parse("metall:chunk_size=1048576", []).unwrap();
    assert_eq!(spec.params()["chunk_size"], 1 << 20);
    let e = AllocSpec::parse("metall:chunk_size=3000", []).unwrap_err().to_string();
    assert!(e.contains("chunk_size = 3000"), "{e}");
}

/// Objects of mixed sizes (some of several chunks) linked into a table at root 0.
fn fill(t: &mut impl AllocThread, n: u64, seed: u64) -> (u64, Vec<(u64, u64)>) {
    let table = t.malloc_to(8 * n, H::root_offset(0)).unwrap();
    t.write(table, &vec![0u8; 8 * n as usize]);
    t.set_root(0, table);
    let mut r = Rng::new(seed);
    let mut objs = Vec::new();
    for i in 0..n {
        let len = mixed_size(&mut r, true);
        let o = t.malloc_to(len, table + 8 * i).unwrap();
        write_obj(t, o, len, seed + i);
        objs.push((o, len));
    }
    (table, objs)
}

/// Checks that `objs` (but the freed ones) are intact and are exactly the live objects with the table.
fn check(mt: &Arc<Metall>, table: u64, objs: &[(u64, u64)], freed: &HashSet<u64>) {
    let t = mt.thread(0);
    assert_eq!(t.root(0), table);
    let mut want = HashSet::from([table]);
    for (i, &(o, len)) in objs.iter().enumerate() {
        if freed.contains(&o) {
            assert_eq!(t.read_u64(table + 8 * i as u64), 0);
            continue;
        }
        assert_eq!(t.read_u64(table + 8 * i as u64), o);
        assert_eq!(check_obj(&t, o, mt.usable_size(o).unwrap()), Ok(len));
        want.insert(o);
    }
    mt.check().unwrap_or_else(|e| panic!("metadata: {e}"));
    let live = mt.live_objects();
    assert_disjoint(&live);
    assert_eq!(live.iter().map(|a| a.0).collect::<HashSet<u64>>(), want);
    assert_eq!(mt.footprint().live_bytes, live.iter().map(|a| a.1).sum::<u64>());
}

#[test]
fn a_properly_closed_store_reopens_with_every_object() {
    let d = tmpdir();
    let path = d.path().join("h");
    let (heap, mt) = create(&path, 256 << 20);
    let mut t = mt.thread(0);
    let (table, objs) = fill(&mut t, 300, 1);
    let mut freed = HashSet::new();
    for i in (0..300).step_by(4) {
        freed.insert(objs[i].0);
        t.free_from(table + 8 * i as u64);
    }
    drop(t);
    close(heap, mt);
    assert!(store::store_dir(&path).join("properly_closed_mark").exists());

    let (heap, mt) = open(&path);
    assert!(!store::store_dir(&path).join("properly_closed_mark").exists(), "open removes the mark");
    check(&mt, table, &objs, &freed);
    // Allocation continues from the reloaded directories without overlap.
    let live: HashSet<u64> = mt.live_objects().iter().map(|a| a.0).collect();
    let mut t = mt.thread(1);
    for size in [8, 64, 1000, 100_000, 3 << 20] {
        let o = t.malloc(size).unwrap();
        assert!(!live.contains(&o));
        t.free(o);
    }
    drop(t);
    close(heap, mt);
    let (heap, mt) = open(&path);
    check(&mt, table, &objs, &freed);
    close(heap, mt);
}

#[test]
fn a_store_dropped_without_close_is_refused() {
    let d = tmpdir();
    let path = d.path().join("h");
    let (heap, mt) = create(&path, 16 << 20);
    drop(mt);
    drop(heap);
    let (_heap, r) = try_open(&path);
    let e = r.err().expect("refused").to_string();
    assert!(e.starts_with(&format!("{}: Metall datastore was not closed properly", path.display())), "{e}");
    assert!(!e.contains('\n'), "one line: {e}");
}

const CHILD_ENV: &str = "PMSIM_METALL_CRASH_CHILD";
const READY: &str = "metall-victim-ready";

/// The victim: opens the store and allocates until killed.
#[test]
fn crash_child_role() {
    let Ok(path) = std::env::var(CHILD_ENV) else { return };
    let (_heap, mt) = open(Path::new(&path));
    println!("{READY}");
    let mut t = mt.thread(0);
    let mut r = Rng::new(5);
    let mut held = Vec::new();
    loop {
        if held.len() > 200 {
            t.free(held.swap_remove(r.below(held.len() as u64) as usize));
        }
        let len = mixed_size(&mut r, false);
        let o = t.malloc(len).unwrap();
        write_obj(&mut t, o, len, len);
        held.push(o);
    }
}

#[test]
fn a_killed_store_is_refused_and_its_snapshot_restores_every_object() {
    let d = tmpdir();
    let path = d.path().join("h");
    let snap = d.path().join("snap");
    let (heap, mt) = create(&path, 256 << 20);
    let mut t = mt.thread(0);
    let (table, objs) = fill(&mut t, 100, 2);
    drop(t);
    let kind = mt.snapshot(&heap, &snap).unwrap();
    // tmpfs cannot reflink: the fallback copies.
    assert!(matches!(kind, CopyKind::Reflink | CopyKind::Copy));
    // The source goes on changing after the snapshot.
    let mut t = mt.thread(0);
    t.free_from(table);
    drop(t);
    close(heap, mt);

    let victim = Victim { test: "metall::crash_child_role", env: CHILD_ENV, ready: READY };
    victim.kill_when_ready(path.to_str().unwrap());
    let (heap, r) = try_open(&path);
    let e = r.err().expect("a killed store is refused").to_string();
    assert!(e.contains("was not closed properly") && e.contains("properly_closed_mark"), "{e}");
    assert!(e.contains(path.to_str().unwrap()) && !e.contains('\n'), "{e}");
    drop(heap);

    let (heap, mt) = open(&snap);
    check(&mt, table, &objs, &HashSet::new());
    close(heap, mt);
}

#[test]
fn damaged_management_files_are_refused_by_name() {
    let d = tmpdir();
    let path = d.path().join("h");
    let (heap, mt) = create(&path, 256 << 20);
    let mut t = mt.thread(0);
    fill(&mut t, 20, 3);
    drop(t);
    close(heap, mt);
    let f = store::store_dir(&path).join("chunk_directory");
    let mut b = std::fs::read(&f).unwrap();
    b[40] ^= 1;
    std::fs::write(&f, b).unwrap();
    let (_heap, r) = try_open(&path);
    let e = r.err().expect("refused").to_string();
    assert!(e.contains("chunk_directory") && e.contains("checksum"), "{e}");
}

/// A free from a full chunk that does not put the chunk back on its bin's
/// non-full list (`mutation=nonfull-lost`) is seen by the metadata check at
/// once; unseen, the store it closes would not load again.
#[test]
fn the_metadata_check_catches_a_lost_non_full_chunk() {
    let d = tmpdir();
    for (name, mutation) in [("good", "none"), ("bad", "nonfull-lost")] {
        let path = d.path().join(name);
        let heap = Heap::create(&path, 8 << 20).unwrap();
        let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
        let cfg = MetallConfig::default().with_overrides([format!("mutation={mutation}").as_str()]).unwrap();
        let mt = Metall::create(&heap, pm, cfg).unwrap();
        let mut t = mt.thread(0);
        // 64 KiB objects: a 2 MiB chunk of 32 slots, filled, then one freed.
        let objs: Vec<u64> = (0..32).map(|_| t.malloc(64 << 10).unwrap()).collect();
        mt.check().unwrap_or_else(|e| panic!("{name}: a full chunk: {e}"));
        t.free(objs[7]);
        drop(t);
        let r = mt.check();
        if mutation == "none" {
            r.unwrap_or_else(|e| panic!("the real code: {e}"));
            close(heap, mt);
            continue;
        }
        let e = r.expect_err("the lost non-full chunk is caught");
        assert!(e.contains("31 of 32 slots in use but listed 0 time(s) as non-full"), "{e}");
        drop(mt.close(&heap).unwrap());
        heap.close().unwrap();
        let (_heap, r) = try_open(&path);
        let e = r.err().expect("the saved directories do not load").to_string();
        assert!(e.contains("non-full chunks"), "{e}");
    }
}
