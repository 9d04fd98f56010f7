//! `pmsim trace-exec` end to end with the real Valgrind: the tool is built
//! (once, into a cache under target/), a C program with known PM events is
//! traced exactly, bad inputs get one error line, NVAlloc traced by Valgrind
//! matches NVAlloc traced by pmsim's own tracer, and PMDK is traced and
//! simulated.

use pmsim_traces::{Event, FenceKind, FlushKind, OpKind, OwnedEvent, TraceHeader, TraceReader};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// One cache for every test of this binary (and of later runs): the tool is
/// built once.
fn cache() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pmsim-cache")
}

fn pmsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pmsim")).args(args).env("PMSIM_CACHE_DIR", cache()).output().expect("pmsim runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The error output is exactly one `pmsim: error:` line, returned.
fn one_error_line(o: &Output) -> String {
    assert!(!o.status.success(), "expected a failure; stdout:\n{}", String::from_utf8_lossy(&o.stdout));
    let err = stderr(o);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("pmsim: ")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].starts_with("pmsim: error: "), "{err}");
    lines[0].to_string()
}

/// Builds pintools/tests/c/pm_ops.c into `dir`.
fn build_pm_ops(dir: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = dir.join("pm_ops");
    let o = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-O2", "-Wall", "-o"])
        .arg(&exe)
        .arg(root.join("pintools/tests/c/pm_ops.c"))
        .arg("-I")
        .arg(root.join("pintools/include"))
        .arg("-I")
        .arg(root.join("traces/c"))
        .output()
        .expect("cc runs");
    assert!(o.status.success(), "{}", stderr(&o));
    exe
}

/// The events of a trace with their thread ids, and its header.
fn read(path: &Path) -> (TraceHeader, Vec<(u32, OwnedEvent)>) {
    let mut r = TraceReader::open(path).unwrap();
    let h = r.header().clone();
    let mut evs = Vec::new();
    r.for_each(|rec| evs.push((rec.tid, rec.event.to_owned()))).unwrap();
    (h, evs)
}

/// A trace's events without its lock markers: the C library takes mutexes of
/// its own (at exit, say), which the tool's preload library reports like the
/// program's (their own test checks them).
fn pm_events(evs: Vec<(u32, OwnedEvent)>) -> Vec<OwnedEvent> {
    evs.into_iter()
        .map(|(_, e)| e)
        .filter(|e| !matches!(e, OwnedEvent::Marker { label, .. } if pmsim_traces::is_lock_marker(label)))
        .collect()
}

/// What pm_ops.c does with PM, relative to the mapped file (`h`) and to the
/// announced static (`s`), in order; `crash` stops where the crash is.
fn pm_ops_events(h: u64, s: u64, crash: bool) -> Vec<OwnedEvent> {
    use OwnedEvent as E;
    let st = |addr, size| E::Store { addr, size, value: None };
    let nt = |addr, size| E::NtStore { addr, size, value: None };
    let fl = |line| E::Flush { kind: FlushKind::Clflush, line };
    let fe = |kind| E::Fence { kind };
    let mut v = vec![
        E::ThreadStart,
        E::RegionAdd { id: 1, category: pmsim_traces::Category::Meta, base: h, len: 4096, name: "header".into() },
        E::OpBegin { op: OpKind::Malloc, arg: 64 },
        st(h, 8),
        st(h + 64, 4),
        fl(h),
        fe(FenceKind::Sfence),
        nt(h + 128, 8),
        fe(FenceKind::Mfence),
        E::OpEnd { op: OpKind::Malloc, result: 4096 },
        fe(FenceKind::LockedRmw),
        st(h + 192, 8),
        fe(FenceKind::LockedRmw), // the failed CAS: no store
        fl(h + 192),
    ];
    if !crash {
        v.extend([
            fe(FenceKind::LockedRmw),
            st(h + 256, 8),
            nt(h + 320, 16),
            st(h + 400, 16),
            fe(FenceKind::Sfence),
            E::Marker { id: 7, label: "phase 2".into() },
            st(s + 300, 1),
            fl(s + 256), // RIP-relative: decoded from the instruction bytes
            fl(s + 192),
            fe(FenceKind::Sfence),
        ]);
    }
    v.push(E::ThreadEnd);
    v
}

/// The base of the `i`-th PM mapping the tool saw (0: the heap).
fn mapping_base(h: &TraceHeader, i: usize) -> u64 {
    h.extra["pm_mappings"][i]["base"].as_u64().unwrap()
}

#[test]
fn every_kind_of_pm_event_is_recorded_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_pm_ops(dir.path());
    let out = dir.path().join("ops.pmt");
    let pm = dir.path().to_str().unwrap();
    let o = pmsim(&["trace-exec", "--pm-dir", pm, "-o", out.to_str().unwrap(), "--", exe.to_str().unwrap(), pm, "ok"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary = String::from_utf8_lossy(&o.stdout);
    assert!(summary.contains("6 stores, 2 non-temporal stores, 4 flushes, 7 fences"), "{summary}");

    let (h, evs) = read(&out);
    assert_eq!(h.tracer, pmsim_traces::Tracer::Valgrind);
    assert_eq!((h.flush_insn.as_str(), h.threads, h.heap.size), ("clflush", 1, 65536));
    assert!(h.heap.path.ends_with("/pm_ops.heap"), "{}", h.heap.path);
    assert_eq!(h.extra["partial"], false);
    assert_eq!(h.extra["exit_status"], 0);
    assert_eq!(h.extra["imprecise_flushes"], 0);
    assert_eq!(mapping_base(&h, 0), h.heap.base);
    assert!(evs.iter().all(|(t, _)| *t == 0));
    let got = pm_events(evs);
    assert_eq!(got, pm_ops_events(h.heap.base, mapping_base(&h, 1), false));

    // With --values, stores carry the bytes they wrote.
    let o = pmsim(&[
        "trace-exec",
        "--values",
        "--pm-dir",
        pm,
        "-o",
        out.to_str().unwrap(),
        "--force",
        "--",
        exe.to_str().unwrap(),
        pm,
        "ok",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (h, evs) = read(&out);
    assert!(h.values);
    let values: Vec<Vec<u8>> = evs
        .into_iter()
        .filter_map(|(_, e)| match e {
            OwnedEvent::Store { value, .. } | OwnedEvent::NtStore { value, .. } => Some(value.unwrap()),
            _ => None,
        })
        .collect();
    assert_eq!(values.len(), 8);
    assert_eq!(values[0], 0x1111u64.to_le_bytes());
    assert_eq!(values[1], 7u32.to_le_bytes());
    assert_eq!(values[2], 5u64.to_le_bytes()); // movnti
    assert_eq!(values[3], 9u64.to_le_bytes()); // the CAS that swapped
    assert_eq!(values[7], [1]);
}

#[test]
fn a_killed_program_leaves_a_partial_trace_and_one_error() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_pm_ops(dir.path());
    let out = dir.path().join("crash.pmt");
    let pm = dir.path().to_str().unwrap();
    let o =
        pmsim(&["trace-exec", "--pm-dir", pm, "-o", out.to_str().unwrap(), "--", exe.to_str().unwrap(), pm, "crash"]);
    let line = one_error_line(&o);
    assert!(line.contains("killed by signal 11 (SIGSEGV)") && line.contains("partial"), "{line}");
    let (h, evs) = read(&out);
    assert_eq!(h.extra["partial"], true, "{:?}", h.extra);
    assert!(h.extra.get("exit_status").is_none());
    let got = pm_events(evs);
    assert_eq!(got, pm_ops_events(h.heap.base, 0, true));
}

#[test]
fn bad_inputs_get_one_clear_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_pm_ops(dir.path());
    let out = dir.path().join("t.pmt");
    let (pm, out_s, exe_s) = (dir.path().to_str().unwrap(), out.to_str().unwrap(), exe.to_str().unwrap());

    let line = one_error_line(&pmsim(&["trace-exec", "-o", out_s, "--", "./no-such-program"]));
    assert!(line.contains("./no-such-program: program not found"), "{line}");
    let line = one_error_line(&pmsim(&["trace-exec", "-o", out_s, "--", "no-such-program-on-path"]));
    assert!(line.contains("no-such-program-on-path: program not found"), "{line}");

    let line = one_error_line(&pmsim(&["trace-exec", "--pm-dir", pm, "-o", out_s, "--", exe_s, pm, "nopm"]));
    assert!(line.contains("no PM mapping seen") && line.contains(pm), "{line}");
    assert!(!out.exists(), "no trace is left when there was no PM");

    let line = one_error_line(&pmsim(&["trace-exec", "--pm-dir", "/no/such/dir", "-o", out_s, "--", exe_s]));
    assert!(line.contains("/no/such/dir: the PM directory is not a directory"), "{line}");

    std::fs::write(&out, b"keep me").unwrap();
    let line = one_error_line(&pmsim(&["trace-exec", "--pm-dir", pm, "-o", out_s, "--", exe_s, pm, "ok"]));
    assert!(line.contains("already exists (--force replaces it)"), "{line}");
    assert_eq!(std::fs::read(&out).unwrap(), b"keep me");
    // With --force the old trace is replaced only by a trace: a run that
    // leaves none (no PM mapped) keeps it, and no temporary file is left.
    let line = one_error_line(&pmsim(&["trace-exec", "--force", "--pm-dir", pm, "-o", out_s, "--", exe_s, pm, "nopm"]));
    assert!(line.contains("no PM mapping seen"), "{line}");
    assert_eq!(std::fs::read(&out).unwrap(), b"keep me", "the old trace was removed before Valgrind ran");
    let hidden: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(hidden.is_empty(), "left behind: {hidden:?}");
    // The program itself is never written over.
    let line = one_error_line(&pmsim(&["trace-exec", "--force", "--pm-dir", pm, "-o", exe_s, "--", exe_s, pm, "ok"]));
    assert!(line.contains("is an input of this command"), "{line}");

    let line = one_error_line(&pmsim(&["trace-exec", "-o", out_s]));
    assert!(line.contains("give the program to trace after --"), "{line}");
}

// ---- NVAlloc: the built-in tracer and the Valgrind tool agree ---------------

/// A trace reduced to what both tracers must agree on: the flushes and
/// fences in order (lines relative to the heap base), and between two of
/// them (an "epoch") the PM stores, relative too.
#[derive(Debug, Default)]
struct Persistence {
    order: Vec<Ord_>,
    /// Per epoch (index into `order` of the next ordering event): (offset, size) of each store.
    stores: BTreeMap<usize, Vec<(u64, u32)>>,
    store_count: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ord_ {
    Flush(u64),
    Fence(FenceKind),
}

fn persistence(path: &Path) -> Persistence {
    let mut r = TraceReader::open(path).unwrap();
    let base = r.header().heap.base;
    let mut p = Persistence::default();
    r.for_each(|rec| match rec.event {
        Event::Flush { line, .. } => p.order.push(Ord_::Flush(line - base)),
        Event::Fence { kind } => p.order.push(Ord_::Fence(kind)),
        Event::Store { addr, size, .. } | Event::NtStore { addr, size, .. } => {
            p.stores.entry(p.order.len()).or_default().push((addr - base, size));
            p.store_count += 1;
        }
        _ => {}
    })
    .unwrap();
    p
}

/// The heap's own header page: the heap file writes and flushes it when it
/// is created and closed, outside the window pmsim's tracer records.
const HEAP_HEADER: u64 = 4096;

/// Checks that `dbi` (Valgrind) and `builtin` (pmsim's tracer) recorded the
/// same run: the same flush and fence sequence, and between every two of them
/// the same stores in the same order (address and size). Returns the number of
/// stores compared, which is every store of `builtin`.
///
/// The one thing that may differ: the DBI also sees the heap file's own writes
/// of its header page, before and after the window pmsim's tracer records.
fn compare(builtin: &Persistence, dbi: &Persistence) -> Result<usize, String> {
    let n = builtin.order.len();
    let k = (0..=dbi.order.len().saturating_sub(n))
        .find(|&k| dbi.order[k..k + n] == builtin.order[..])
        .ok_or("the built-in flush/fence sequence does not occur in the Valgrind trace")?;
    for (i, o) in dbi.order[..k].iter().chain(&dbi.order[k + n..]).enumerate() {
        if let Ord_::Flush(l) = o {
            if *l >= HEAP_HEADER {
                return Err(format!("extra flush of heap offset {l:#x} outside the traced window (#{i})"));
            }
        }
    }
    let mut compared = 0;
    for e in 0..=n {
        let b: Vec<(u64, u32)> = builtin.stores.get(&e).cloned().unwrap_or_default();
        // Before the window and after it, the DBI also sees the heap header's stores.
        let boundary = e == 0 || e == n;
        let d: Vec<(u64, u32)> = if boundary {
            let epochs = if e == 0 { 0..=k } else { k + n..=dbi.order.len() };
            epochs
                .flat_map(|x| dbi.stores.get(&x).cloned().unwrap_or_default())
                .filter(|&(a, _)| a >= HEAP_HEADER)
                .collect()
        } else {
            dbi.stores.get(&(e + k)).cloned().unwrap_or_default()
        };
        if b != d {
            let at = b.iter().zip(&d).position(|(x, y)| x != y).unwrap_or(b.len().min(d.len()));
            return Err(format!(
                "epoch {e}: stores differ at the {at}th of {} built-in and {} machine stores \
                 (built-in {:?}, Valgrind {:?})",
                b.len(),
                d.len(),
                b.get(at),
                d.get(at)
            ));
        }
        compared += b.len();
    }
    Ok(compared)
}

#[test]
fn nvalloc_traced_by_valgrind_matches_the_builtin_tracer() {
    let dir = tempfile::tempdir().unwrap();
    let (builtin, dbi) = (dir.path().join("builtin.pmt"), dir.path().join("valgrind.pmt"));
    let run: Vec<&str> = "run --alloc nvalloc-log --workload threadtest --threads 1 --scale tiny --flush-insn clflush \
                          --param iterations=2 --param objects=300"
        .split_whitespace()
        .collect();
    let o = pmsim(&[&run[..], &["--trace", builtin.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let pmsim_bin = env!("CARGO_BIN_EXE_pmsim");
    let o = pmsim(&[&["trace-exec", "-o", dbi.to_str().unwrap(), "--", pmsim_bin][..], &run[..]].concat());
    assert!(o.status.success(), "{}", stderr(&o));

    let (b, d) = (persistence(&builtin), persistence(&dbi));
    let flushes = b.order.iter().filter(|o| matches!(o, Ord_::Flush(_))).count();
    assert!(flushes > 1000 && b.order.len() > flushes + 1000, "a run too small to compare: {:?}", b.order.len());
    let same = compare(&b, &d).unwrap();
    eprintln!(
        "{} flushes, {} fences and {same} stores identical ({} machine stores in PM with the heap header's)",
        flushes,
        b.order.len() - flushes,
        d.store_count
    );
    // `compare` demanded the same stores, epoch by epoch, so the counts are
    // identical too; what remains to rule out is a comparison of nothing.
    assert!(same > 1000, "a run too small to compare: {same} stores");

    // The comparison can fail: a missing flush, an extra store, a moved fence.
    let mut broken = persistence(&dbi);
    let at = broken.order.iter().rposition(|o| matches!(o, Ord_::Flush(l) if *l >= HEAP_HEADER)).unwrap();
    broken.order.remove(at);
    assert!(compare(&b, &broken).is_err());
    let mut broken = persistence(&dbi);
    broken.stores.entry(broken.order.len() / 2).or_default().push((HEAP_HEADER + 8, 8));
    assert!(compare(&b, &broken).unwrap_err().contains("stores differ"));
    // A store split in two, or two stores swapped, is a difference too.
    let mut broken = persistence(&dbi);
    let v = broken.stores.values_mut().find(|v| v.len() >= 2 && v[0] != v[1] && v[0].0 >= HEAP_HEADER).unwrap();
    v.swap(0, 1);
    assert!(compare(&b, &broken).unwrap_err().contains("stores differ"));
    let mut broken = persistence(&dbi);
    let v = broken.stores.values_mut().find(|v| v.iter().any(|s| s.1 == 8 && s.0 >= HEAP_HEADER)).unwrap();
    let at = v.iter().position(|s| s.1 == 8 && s.0 >= HEAP_HEADER).unwrap();
    let (a, _) = v[at];
    v.splice(at..=at, [(a, 4), (a + 4, 4)]);
    assert!(compare(&b, &broken).unwrap_err().contains("stores differ"));
    let mut broken = persistence(&dbi);
    let f = (broken.order.len() / 2..broken.order.len() - 1)
        .find(|&i| matches!(broken.order[i], Ord_::Fence(FenceKind::Sfence)) && broken.order[i + 1] != broken.order[i])
        .unwrap();
    broken.order.swap(f, f + 1);
    assert!(compare(&b, &broken).is_err());
}

// ---- PMDK ----------------------------------------------------------------------

/// `pmsim trace-exec` of the PMDK Threadtest example (2 iterations × 200
/// objects of 64 B, 1 thread), PM under `pm`, into `out`, with `extra`
/// options; it must succeed.
fn trace_pmdk_threadtest(pm: &Path, out: &Path, extra: &[&str]) -> Output {
    trace_pmdk_threadtest_with(pm, out, extra, &["2", "200", "64", "1"])
}

/// [`trace_pmdk_threadtest`] with the program's own arguments `prog`
/// (ITERATIONS OBJECTS SIZE THREADS [API]).
fn trace_pmdk_threadtest_with(pm: &Path, out: &Path, extra: &[&str], prog: &[&str]) -> Output {
    let (pm, out) = (pm.to_str().unwrap(), out.to_str().unwrap());
    let args = [&["trace-exec", "--example", "pmdk-threadtest", "--pm-dir", pm, "-o", out][..], extra];
    let o = pmsim(&[&args.concat()[..], &["--"], prog].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    o
}

#[test]
fn pmdk_threadtest_is_traced_and_simulated() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("pmdk.pmt");
    let o = trace_pmdk_threadtest(dir.path(), &out, &["--json"]);
    let (h, evs) = read(&out);
    // The program's stdout comes first, then the summary as JSON.
    let stdout = String::from_utf8_lossy(&o.stdout);
    let summary: serde_json::Value = serde_json::from_str(&stdout[stdout.find('{').unwrap()..]).unwrap();
    assert_eq!(summary["stats"]["events"].as_u64(), Some(evs.len() as u64));
    assert_eq!(summary["header"]["tracer"], "valgrind");
    assert_eq!((h.allocator.name.as_str(), h.workload.name.as_str()), ("pmdk", "threadtest"));
    let (lo, hi) = (h.heap.base, h.heap.base + h.heap.size);
    let mallocs = evs.iter().filter(|(_, e)| matches!(e, OwnedEvent::OpBegin { op: OpKind::Malloc, .. })).count();
    assert_eq!(mallocs, 2 * 200);
    let flushes: Vec<u64> = evs
        .iter()
        .filter_map(|(_, e)| match e {
            OwnedEvent::Flush { kind, line } => {
                assert_eq!(*kind, FlushKind::Clflush);
                Some(*line)
            }
            _ => None,
        })
        .collect();
    // PMDK maps its pool header a second time; the tool records that alias at the pool's addresses.
    assert!(h.extra["pm_mappings"].as_array().unwrap().len() >= 2, "{:?}", h.extra);
    assert!(flushes.iter().all(|l| (lo..hi).contains(l)), "a flush outside the pool");
    // PMDK persists every allocation and free: flushes inside the operations.
    let mut in_op = false;
    let mut op_flushes = 0;
    for (_, e) in &evs {
        match e {
            OwnedEvent::OpBegin { .. } => in_op = true,
            OwnedEvent::OpEnd { .. } => in_op = false,
            OwnedEvent::Flush { .. } if in_op => op_flushes += 1,
            _ => {}
        }
    }
    assert!(op_flushes >= 2 * 2 * 200, "only {op_flushes} flushes inside the 800 operations");

    let o = pmsim(&["sim", out.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let text = v.to_string();
    assert!(text.contains("reflush"), "{text}");
    assert_eq!(v["overall"]["flushes"].as_u64(), Some(flushes.len() as u64), "{}", v["overall"]);
    // Every flush and fence names its code site: libpmem issues them, and they
    // are charged to the named libpmemobj functions that called it.
    let sites = v["sites"].as_array().expect("a sites array");
    let at = |f: &dyn Fn(&serde_json::Value) -> bool| -> u64 {
        sites.iter().filter(|s| f(s)).map(|s| s["flushes"].as_u64().unwrap()).sum()
    };
    let named = at(&|s| {
        s["function"].as_str().is_some_and(|f| f.starts_with("pmemobj_"))
            && s["file"].as_str().is_some_and(|f| f.contains("libpmemobj"))
    });
    assert!(
        named * 10 >= flushes.len() as u64 * 9,
        "only {named} of {} flushes at libpmemobj functions",
        flushes.len()
    );
    assert!(at(&|s| s["function"] == "pmemobj_alloc") > 0 && at(&|s| s["function"] == "pmemobj_free") > 0, "{sites:?}");
}

/// The tool runs one thread at a time, so its trace names who spawned each
/// thread (a spawn marker on the creator just before the start) and, where
/// the program says so, who waited for whose end (a join marker after it).
#[test]
fn threads_are_traced_with_their_spawns_and_joins() {
    use pmsim_traces::{JOIN_MARKER, SPAWN_MARKER};
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("pmdk.pmt");
    trace_pmdk_threadtest_with(dir.path(), &out, &[], &["2", "50", "64", "3"]);
    let (_, evs) = read(&out);
    let main = evs[0].0;
    let marker = |i: usize, label: &str| match &evs[i] {
        (t, OwnedEvent::Marker { id, label: l }) if *t == main && l == label => Some(*id as u32),
        _ => None,
    };
    let mut workers = Vec::new();
    for (i, (t, e)) in evs.iter().enumerate() {
        if *t != main && matches!(e, OwnedEvent::ThreadStart) {
            assert_eq!(marker(i - 1, SPAWN_MARKER), Some(*t), "no spawn marker before {:?}", &evs[i - 1..=i]);
            workers.push(*t);
        }
    }
    assert_eq!(workers.len(), 3, "{workers:?}");
    for w in &workers {
        let end = evs.iter().position(|(t, e)| t == w && matches!(e, OwnedEvent::ThreadEnd)).expect("a worker's end");
        assert!(
            (end..evs.len()).any(|i| marker(i, JOIN_MARKER) == Some(*w)),
            "the main thread records no join of worker {w} after its end"
        );
    }
}

/// The tool's preload library reports every pthread mutex PMDK takes: lock
/// markers on the thread that holds it, each acquire followed by the same
/// thread's release before any other thread takes that lock (a lock taken
/// before the trace began shows its release alone).
#[test]
fn pmdk_mutexes_are_traced_as_lock_markers() {
    use pmsim_traces::{LOCK_ACQUIRE_MARKER, LOCK_RELEASE_MARKER};
    use std::collections::{BTreeSet, HashMap, HashSet};
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("pmdk.pmt");
    trace_pmdk_threadtest_with(dir.path(), &out, &[], &["2", "50", "64", "3"]);
    let (_, evs) = read(&out);
    let mut held: HashMap<u64, u32> = HashMap::new();
    let mut seen = HashSet::new();
    let (mut taken, mut threads) = (0, BTreeSet::new());
    for (t, e) in &evs {
        match e {
            OwnedEvent::Marker { id, label } if label == LOCK_ACQUIRE_MARKER => {
                assert!(held.insert(*id, *t).is_none(), "lock {id:#x} taken by thread {t} while held");
                seen.insert(*id);
                taken += 1;
                threads.insert(*t);
            }
            OwnedEvent::Marker { id, label } if label == LOCK_RELEASE_MARKER => {
                let holder = held.remove(id);
                assert!(
                    holder == Some(*t) || (holder.is_none() && seen.insert(*id)),
                    "lock {id:#x} let go by thread {t}, held by {holder:?}"
                );
            }
            _ => {}
        }
    }
    // Three workers allocate and free 100 objects each: the heap's locks
    // are taken on their operations, on the workers' threads. (How many trace
    // threads they are depends on the schedule: the trace numbers a thread
    // by its Valgrind thread id, which Valgrind gives again to a thread that
    // starts after another has ended.)
    assert!(taken >= 300 && threads.iter().any(|&t| t != 0), "{taken} lock takings by threads {threads:?}");
}

/// `--window-at pmemobj_alloc` records one marker at the first allocation, and
/// `pmsim sim` reports the steady state (no pool creation) beside the whole run.
#[test]
fn pmdk_window_at_the_first_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let trace = |name: &str, func: &str| {
        let out = dir.path().join(name);
        let o = trace_pmdk_threadtest(dir.path(), &out, &["--window-at", func]);
        (out, o)
    };
    let (out, _) = trace("w.pmt", "pmemobj_alloc");
    let (_, evs) = read(&out);
    let markers: Vec<usize> = evs
        .iter()
        .enumerate()
        .filter(|(_, (_, e))| matches!(e, OwnedEvent::Marker { label, .. } if label == "window:pmemobj_alloc"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(markers.len(), 1, "one window marker");
    let first_malloc =
        evs.iter().position(|(_, e)| matches!(e, OwnedEvent::OpBegin { op: OpKind::Malloc, .. })).unwrap();
    assert!(markers[0] > first_malloc, "the marker is inside the first allocation");
    let flushes_before = evs[..markers[0]].iter().filter(|(_, e)| matches!(e, OwnedEvent::Flush { .. })).count();
    assert!(flushes_before > 0, "pool creation flushes before the window");

    let o = pmsim(&["sim", out.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let w = &v["window"];
    assert_eq!(w["from"], "marker window:pmemobj_alloc");
    let (whole, win) = (&v["overall"], &w["report"]["overall"]);
    assert_eq!(
        whole["flushes"].as_u64().unwrap() - win["flushes"].as_u64().unwrap(),
        flushes_before as u64,
        "the window counts every flush after the marker"
    );
    assert!(
        win["reflush_ratio"].as_f64().unwrap() > whole["reflush_ratio"].as_f64().unwrap(),
        "the steady state reflushes more than the diluted whole run: {win} vs {whole}"
    );
    let o = pmsim(&["sim", out.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("window: from marker window:pmemobj_alloc") && text.contains("whole run"), "{text}");

    // A function never called: a warning, no window, and asking for it is an error.
    let (out, o) = trace("n.pmt", "no_such_function");
    assert!(stderr(&o).contains("never called"), "{}", stderr(&o));
    let e = one_error_line(&pmsim(&["sim", out.to_str().unwrap(), "--from-marker", "window"]));
    assert!(e.contains("the window never began"), "{e}");
}

// ---- PMDK crash states -----------------------------------------------------------

/// `pmsim crash TRACE ARGS…` started with its output piped (the tests
/// need its pid: its scratch files and recovery processes are named by it).
fn spawn_crash(trace: &Path, args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_pmsim"))
        .args([&["crash", trace.to_str().unwrap()][..], args].concat())
        .env("PMSIM_CACHE_DIR", cache())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("pmsim runs")
}

/// `pmsim crash … --json` on `trace` with `extra` options: its exit status
/// and summary; it must leave none of its scratch files (`pmsim-PID-…`) and
/// none of its PMDK recovery processes (`PMSIM_PMDK_RECOVERY=PID` in their
/// environment) behind.
fn crash_json(trace: &Path, extra: &[&str]) -> (Output, serde_json::Value) {
    let child = spawn_crash(trace, &[&["--json"][..], extra].concat());
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    let v = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", String::from_utf8_lossy(&o.stdout), stderr(&o)));
    let prefix = format!("pmsim-{pid}-");
    for dir in ["/dev/shm".into(), std::env::temp_dir()] {
        let left: Vec<_> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .map(|e| e.path())
            .collect();
        assert!(left.is_empty(), "scratch files left: {left:?}");
    }
    let left = recovery_processes(pid);
    assert!(left.is_empty(), "recovery processes left: {left:?}");
    (o, v)
}

/// The pids of the PMDK recovery processes serving the pmsim process `pid`
/// (`PMSIM_PMDK_RECOVERY=PID` in their environment).
fn recovery_processes(pid: u32) -> Vec<String> {
    let mark = format!("PMSIM_PMDK_RECOVERY={pid}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("environ"))
                .is_ok_and(|env| env.windows(mark.len()).any(|w| w == mark.as_bytes()))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// PMDK as a crash target: the PMDK Threadtest traced with values (its pool's
/// bytes at the first mapping in `OUT.img`), then every image `pmsim crash`
/// allows at the fences after the pool's creation, each opened by libpmemobj
/// (its own recovery), checked by libpmempool and `pmemobj_check` and by the
/// program's root object: each completed allocation live and published in
/// its slot, each interrupted one atomic, each completed free free.
#[test]
fn pmdk_crash_states_recovered_by_libpmemobj_pass() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.pmt");
    trace_pmdk_threadtest_with(dir.path(), &out, &["--values"], &["1", "24", "64", "1"]);
    let (h, _) = read(&out);
    assert_eq!(h.extra["heap_image"]["file"], "p.pmt.img", "{:?}", h.extra);
    assert_eq!(std::fs::metadata(dir.path().join("p.pmt.img")).unwrap().len(), h.heap.size);
    let (o, v) = crash_json(&out, &["--bound", "4", "--every", "12", "--all-points"]);
    assert!(o.status.success(), "{v}\n{}", stderr(&o));
    assert!(v["violation"].is_null(), "{}", v["violation"]);
    assert!(v["allocator"].as_str().unwrap().starts_with("pmdk"), "{}", v["allocator"]);
    let images = v["images"].as_u64().unwrap();
    assert!(images >= 100, "{images} images");
    assert!(v["distinct_states"].as_u64().unwrap() > 0, "{}", v["distinct_states"]);
}

/// Issue #22's acceptance for PMDK: over 10,000 crash images of a real
/// workload's trace, every one recovered by libpmemobj and put through all
/// of the target's checks, and no violation. The workload is the Threadtest
/// on the transactional API (2 rounds of 32 objects: the second reuses the
/// blocks the first freed), so recovery both rolls transactions back (undo
/// logs) and finishes committed ones (redo logs); every crash point after
/// the pool's creation gets 10 images (`--bound 9` samples, plus the image
/// that persists every pending store). The images are recovered in
/// parallel, in recovery processes, which must all be gone afterwards.
#[test]
fn pmdk_ten_thousand_crash_images_of_a_transactional_threadtest_pass() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tx.pmt");
    trace_pmdk_threadtest_with(dir.path(), &out, &["--values"], &["2", "32", "64", "1", "tx"]);
    let (o, v) = crash_json(&out, &["--bound", "9", "--all-points"]);
    assert!(o.status.success(), "{}\n{}", v["violation"], stderr(&o));
    assert!(v["violation"].is_null(), "{}", v["violation"]);
    let images = v["images"].as_u64().unwrap();
    assert!(images >= 10_000, "{images} images");
    assert!(v["distinct_states"].as_u64().unwrap() * 2 > images, "{} distinct states", v["distinct_states"]);
    assert_eq!(v["points"].as_u64(), Some(v["coverage"].as_array().unwrap().len() as u64));
}

/// The images recover in recovery processes, and one that dies (SIGKILLed
/// here, as libpmemobj crashing on an image would end it) is reported for
/// the image it was recovering, with how it ended: pmsim neither hangs nor
/// takes the image as recovered.
#[test]
fn pmdk_recovery_process_that_dies_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.pmt");
    trace_pmdk_threadtest_with(dir.path(), &out, &["--values"], &["1", "24", "64", "1"]);
    let child = spawn_crash(&out, &["--bound", "64"]);
    let pid = child.id();
    // Kill every recovery process of the run as it appears, until the run
    // ends: one killed between two images is started again, one killed in
    // a recovery fails it.
    let killer = std::thread::spawn(move || {
        let mut killed = 0;
        while Path::new(&format!("/proc/{pid}/environ")).exists() {
            for p in recovery_processes(pid) {
                killed += Command::new("kill").args(["-9", &p]).status().is_ok_and(|s| s.success()) as u32;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        killed
    });
    let o = child.wait_with_output().unwrap();
    assert!(killer.join().unwrap() > 0, "no recovery process ran");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("VIOLATION") && text.contains("the PMDK recovery process") && text.contains("SIGKILL"),
        "{text}"
    );
    assert!(recovery_processes(pid).is_empty());
}

/// The classic PMDK bug, a store inside a transaction that the transaction
/// does not log (`pmemobj_tx_add_range` forgotten), is caught: a crash inside
/// the transaction rolls the allocation back but not the slot, which may
/// already be durable and names a free block. The report prints the command
/// that replays exactly the failing image, and that command fails the same
/// way. The same program with the slot logged passes.
#[test]
fn pmdk_unlogged_transaction_store_is_caught_with_its_replay() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("tx.pmt");
    trace_pmdk_threadtest_with(dir.path(), &good, &["--values"], &["1", "6", "64", "1", "tx"]);
    let (o, v) = crash_json(&good, &["--bound", "4", "--during", "malloc", "--all-points"]);
    assert!(o.status.success() && v["violation"].is_null(), "{}\n{}", v["violation"], stderr(&o));
    assert!(v["images"].as_u64().unwrap() >= 40, "{}", v["images"]);

    let bad = dir.path().join("unlogged.pmt");
    trace_pmdk_threadtest_with(dir.path(), &bad, &["--values"], &["1", "6", "64", "1", "tx-unlogged"]);
    let o = pmsim(&["crash", bad.to_str().unwrap(), "--bound", "4", "--during", "malloc"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    // The transaction rolls the allocation back, but not the unlogged slot:
    // it names a free block.
    assert!(text.contains("VIOLATION") && text.contains("is not atomic: block free, destination"), "{text}");
    let replay = text.lines().find_map(|l| l.strip_prefix("replay       ")).expect("a replay line").to_string();
    let problem = text.lines().find_map(|l| l.strip_prefix("problem      ")).unwrap().to_string();
    let args: Vec<&str> = replay.split_whitespace().collect();
    assert_eq!(args[0], "pmsim");
    let o = pmsim(&args[1..]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let again = String::from_utf8_lossy(&o.stdout);
    assert!(again.contains(&format!("problem      {problem}")), "{again}");
}
