//! `pmsim specs validate` end to end: traces of the real allocators, recorded
//! here, checked by TLC against their specifications; and the two ways it
//! must fail: a trace of mutated code, and a spec variant that forbids what
//! the code does. Needs Java and tla2tools.jar (scripts/setup.sh).

use std::process::{Command, Output};

fn pmsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pmsim")).args(args).output().expect("pmsim runs")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Records a run of `alloc` with `args` (workload, threads, parameters) into
/// `out`, with values; the heap image beside it is not needed.
fn record_run(alloc: &str, args: &[&str], out: &std::path::Path) {
    let mut a = vec!["run", "--alloc", alloc, "--values", "--overwrite", "--trace", out.to_str().unwrap()];
    a.extend_from_slice(args);
    let o = pmsim(&a);
    assert!(o.status.success(), "{}", text(&o));
    let _ = std::fs::remove_file(out.with_extension("pmt.img"));
}

/// Records a two-thread LLFree run of frames of `size` bytes into `out`.
fn record(alloc: &str, size: &str, heap: &str, out: &std::path::Path) {
    let size = format!("size={size}");
    let args = ["--workload", "llfree-random", "--threads", "2", "--param", "objects=4", "--param", "iterations=1"];
    record_run(alloc, &[&args[..], &["--param", &size, "--heap-size", heap]].concat(), out);
}

/// A one-thread Fragbench W1 run small enough to validate in seconds whose
/// slab morphs: the objects of Before share the 192-byte class with the
/// driver's root object; after Delete, the first 256-byte allocation finds
/// no slab of its class and morphs the 192-byte slab with its five live
/// blocks, which After then frees one by one (the last makes it regular).
const FRAGBENCH_MORPHS: [&str; 18] = [
    "--workload",
    "fragbench-w1",
    "--threads",
    "1",
    "--param",
    "before_min=192",
    "--param",
    "before_max=192",
    "--param",
    "after_min=256",
    "--param",
    "after_max=256",
    "--param",
    "alloc_bytes=12000",
    "--param",
    "live_cap=6000",
    "--heap-size",
    "16M",
];

#[test]
fn llfree_runs_are_behaviours_of_the_spec_and_mutations_are_not() {
    let dir = tempfile::tempdir().unwrap();
    // Order 9 (the driver's root object is an order-0 frame: both orders), and order 0.
    for (size, heap) in [("2097152", "16M"), ("4096", "16M")] {
        let t = dir.path().join(format!("llfree-{size}.pmt"));
        record("llfree", size, heap, &t);
        let o = pmsim(&["specs", "validate", t.to_str().unwrap()]);
        assert!(o.status.success(), "{}", text(&o));
        assert!(text(&o).contains("ALLOWED"), "{}", text(&o));
    }

    // The spec with the paper's protocol (one flush per operation) forbids
    // the code's per-CAS commits: it leaves the spec at the first one.
    let t = dir.path().join("llfree-4096.pmt");
    let o = pmsim(&["specs", "validate", t.to_str().unwrap(), "--const", "FlushEach=\"op\""]);
    assert!(!o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("LEAVES THE SPEC at step 3 ") && out.contains("Commit(line <<\"children\", 1>>)"), "{out}");
    assert!(out.contains("expected SetBit"), "{out}");

    // The code without the flush after a base allocation's decrement.
    let t = dir.path().join("llfree-mutated.pmt");
    record("llfree:mutation=ll-counter-flush", "4096", "8M", &t);
    let o = pmsim(&["specs", "validate", t.to_str().unwrap()]);
    assert!(!o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("LEAVES THE SPEC") && out.contains("SetBit(child 1, bit 0)"), "{out}");
    assert!(out.contains("expected Commit"), "{out}");

    // The code with a free's two CASes swapped: the counter first.
    let t = dir.path().join("llfree-swapped.pmt");
    record("llfree:mutation=ll-inc-before-clear", "4096", "8M", &t);
    let o = pmsim(&["specs", "validate", t.to_str().unwrap()]);
    assert!(!o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("LEAVES THE SPEC") && out.contains(": IncCounter(child 1: "), "{out}");
    assert!(out.contains("expected ClearBit"), "{out}");

    // Cut into windows of a few steps, each checked from the state the
    // trace gives at its start, it leaves the spec at the same step.
    let at = out.split("LEAVES THE SPEC at step ").nth(1).and_then(|r| r.split(' ').next()).unwrap().to_string();
    let o = pmsim(&["specs", "validate", t.to_str().unwrap(), "--window", "8", "--jobs", "1"]);
    assert!(!o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains(&format!("LEAVES THE SPEC at step {at} ")) && out.contains("expected ClearBit"), "{out}");
    assert!(out.contains("skipped: after the failure"), "{out}");
}

#[test]
fn an_llfree_zone_whose_last_tree_is_short_is_validated_in_windows() {
    let dir = tempfile::tempdir().unwrap();
    // 72 MiB: a zone of 35 children, trees of 32 and 3.
    let t = dir.path().join("llfree-72m.pmt");
    record("llfree", "4096", "72M", &t);
    let o = pmsim(&["specs", "validate", t.to_str().unwrap(), "--window", "20"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("Trees=2, N=32/3") && out.contains("ALLOWED"), "{out}");
    let windows = out.split("steps of ").nth(1).and_then(|r| r.split(" in ").nth(1)).unwrap_or("");
    assert!(!windows.starts_with("1 window"), "{out}");
}

#[test]
fn an_nvalloc_run_that_morphs_is_a_behaviour_of_slab_morphing_and_mutations_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("fragbench.pmt");
    record_run("nvalloc-log", &FRAGBENCH_MORPHS, &t);
    let o = pmsim(&["specs", "validate", t.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["outcome"]["allowed"], true, "{v}");
    // The morph, the frees of its old blocks and the return to a regular slab are all in it.
    let actions: Vec<&str> = v["steps"].as_array().unwrap().iter().map(|s| s["action"].as_str().unwrap()).collect();
    let has = |p: &dyn Fn(&str) -> bool| actions.iter().any(|a| p(a));
    assert!(has(&|a| a.contains("flag 2, index_len 5}")), "{actions:?}");
    assert!(has(&|a| a.starts_with("Write(index table") && a.contains("live |-> FALSE")), "{actions:?}");
    assert!(has(&|a| a.contains("class B, old B, flag 0, index_len 0}")), "{actions:?}");

    // `pmsim bench --validate` times the same check, and the bookkeeping
    // log's, with the same defaults: one row per specification.
    let steps = v["outcome"]["steps"].as_u64().unwrap();
    let o = pmsim(&["bench", "--no-synthetic", "--validate", t.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let b: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = b["validate"].as_array().unwrap();
    let specs: Vec<&str> = rows.iter().map(|r| r["spec"].as_str().unwrap()).collect();
    assert_eq!(specs, ["SlabMorphing", "BookkeepingLogGC"], "{b}");
    assert_eq!(rows[0]["steps"], steps, "{b}");
    assert!(rows.iter().all(|r| r["allowed"] == true && r["wall_s"].as_f64().unwrap() > 0.0), "{b}");
    assert!(rows[0]["tlc_cpu_s"].as_f64().unwrap() > 0.0 && rows[0]["tlc_max_rss_mb"].as_f64().unwrap() > 10.0, "{b}");

    // The spec variant that drops the index table's flush forbids step 2 as the code does it.
    let o = pmsim(&["specs", "validate", t.to_str().unwrap(), "--const", "Variant=\"flag_before_table\""]);
    assert!(!o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("LEAVES THE SPEC") && out.contains("flag 1, index_len 5}; index table <<"), "{out}");
    assert!(out.contains("expected MorphStep2Table"), "{out}");

    // The code without the flush of the step flag 2.
    let t = dir.path().join("fragbench-mutated.pmt");
    record_run("nvalloc-log:mutation=morph-flag-flush", &FRAGBENCH_MORPHS, &t);
    let o = pmsim(&["specs", "validate", t.to_str().unwrap(), "--spec", "slab-morphing"]);
    assert!(!o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("LEAVES THE SPEC") && out.contains("flag 2, index_len 5} (not flushed)"), "{out}");
    assert!(out.contains("expected MorphStep2Flag"), "{out}");
    let o = pmsim(&["bench", "--no-synthetic", "--validate", t.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let row = text(&o).lines().find(|l| l.contains("SlabMorphing")).unwrap_or_default().to_string();
    assert!(row.trim_end().ends_with(" no"), "the mutated trace is not allowed: {}", text(&o));

    // Cut into windows of about 100 steps, each checked from the state the
    // trace gives the slab at its start, it leaves the spec at the same step,
    // in a later window: the ones before it are behaviours of the spec.
    let at = out.split("LEAVES THE SPEC at step ").nth(1).and_then(|r| r.split(' ').next()).unwrap().to_string();
    assert!(at.parse::<usize>().unwrap() > 200, "{out}");
    let o = pmsim(&["specs", "validate", t.to_str().unwrap(), "--window", "100", "--jobs", "1"]);
    assert!(!o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(
        out.contains(&format!("LEAVES THE SPEC at step {at} ")) && out.contains("expected MorphStep2Flag"),
        "{out}"
    );
    // "TLC ... in N window(s) (M skipped: after the failure)": the windows up to the failing one ran.
    let tlc = out.lines().find(|l| l.starts_with("TLC ")).unwrap_or("");
    let ran = tlc.split(" in ").nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse::<usize>().ok());
    assert!(ran.is_some_and(|n| n >= 3) && tlc.contains("skipped: after the failure"), "{out}");
}

/// A one-thread Larson-large run whose bookkeeping log is collected: a log
/// of 7 chunks checked every 16 tombstones under the default rule (the
/// artifact's: a slow GC when at most 10 % of the log's slots hold live
/// records, a fast GC when at most half do) and collected when full (three
/// slow GCs, each moving the live records to a recycled chunk and flipping
/// alt).
const LARSON_COLLECTS: [&str; 12] = [
    "--workload",
    "larson-large",
    "--threads",
    "1",
    "--param",
    "chunks=8",
    "--param",
    "rounds=40",
    "--param",
    "generations=1",
    "--heap-size",
    "64M",
];
const LOG_ALLOC: &str = "nvalloc-log:log_bytes=8192:gc_interval=16";

#[test]
fn an_nvalloc_run_whose_log_is_collected_is_a_behaviour_of_the_log_gc_spec_and_mutations_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("larson.pmt");
    record_run(LOG_ALLOC, &LARSON_COLLECTS, &t);
    let spec = ["--spec", "bookkeeping-log-gc"];
    let o = pmsim(&[&["specs", "validate", t.to_str().unwrap()][..], &spec].concat());
    assert!(o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("BookkeepingLogGC (NChunks=7, K=128, Interleave=16") && out.contains("ALLOWED"), "{out}");

    // Records named by chunk index, not id: the first tombstone into a reused chunk.
    let o = pmsim(
        &[&["specs", "validate", t.to_str().unwrap()][..], &spec, &["--const", "Variant=\"index_positions\""]].concat(),
    );
    assert!(!o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("LEAVES THE SPEC") && out.contains("tombstone of <<3, "), "{out}");
    assert!(out.contains("expected WriteEntry"), "{out}");

    // The code without the flush of the alt bit a slow GC flips.
    let t = dir.path().join("larson-mutated.pmt");
    record_run(&format!("{LOG_ALLOC}:mutation=log-alt-flush"), &LARSON_COLLECTS, &t);
    let o = pmsim(&[&["specs", "validate", t.to_str().unwrap()][..], &spec].concat());
    assert!(!o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("LEAVES THE SPEC") && out.contains("alt 1 (not flushed)"), "{out}");
    assert!(out.contains("expected SlowGcFlip"), "{out}");

    // Cut into windows of about 30 steps (between appends and GCs, each from
    // the state the trace gives the log there), it leaves the spec at the
    // same step, after the windows before it (fast GCs among them) passed.
    let at = out.split("LEAVES THE SPEC at step ").nth(1).and_then(|r| r.split(' ').next()).unwrap().to_string();
    let o =
        pmsim(&[&["specs", "validate", t.to_str().unwrap()][..], &spec, &["--window", "30", "--jobs", "1"]].concat());
    assert!(!o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains(&format!("LEAVES THE SPEC at step {at} ")) && out.contains("expected SlowGcFlip"), "{out}");
    let tlc = out.lines().find(|l| l.starts_with("TLC ")).unwrap_or("");
    let ran = tlc.split(" in ").nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse::<usize>().ok());
    assert!(ran.is_some_and(|n| n >= 4), "{out}");
}

#[test]
fn a_trace_of_another_allocator_or_without_values_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("novalues.pmt");
    let o = pmsim(&[
        "run",
        "--alloc",
        "llfree",
        "--workload",
        "llfree-random",
        "--param",
        "objects=2",
        "--heap-size",
        "8M",
        "--trace",
        t.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let o = pmsim(&["specs", "validate", t.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(text(&o).contains("without values"), "{}", text(&o));
    let o = pmsim(&["specs", "validate", t.to_str().unwrap(), "--const", "Nope"]);
    assert!(!o.status.success() && text(&o).contains("expected NAME=VALUE"), "{}", text(&o));
    let o = pmsim(&["specs", "validate", t.to_str().unwrap(), "--spec", "slab-morphing"]);
    assert!(!o.status.success() && text(&o).contains("slab-morphing is a specification of NVAlloc"), "{}", text(&o));
    let o = pmsim(&["specs", "validate", t.to_str().unwrap(), "--spec", "nope"]);
    assert!(!o.status.success() && text(&o).contains("no specification \"nope\""), "{}", text(&o));
}
