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

/// Records a two-thread LLFree run of frames of `size` bytes into `out`.
fn record(alloc: &str, size: &str, heap: &str, out: &std::path::Path) {
    let o = pmsim(&[
        "run",
        "--alloc",
        alloc,
        "--workload",
        "llfree-random",
        "--threads",
        "2",
        "--param",
        "objects=4",
        "--param",
        "iterations=1",
        "--param",
        &format!("size={size}"),
        "--heap-size",
        heap,
        "--values",
        "--overwrite",
        "--trace",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn llfree_runs_are_behaviours_of_the_spec_and_mutations_are_not() {
    let dir = tempfile::tempdir().unwrap();
    // Order 9 (the driver's root object is an order-0 frame: both orders), and order 0.
    for (size, heap) in [("2097152", "16M"), ("4096", "8M")] {
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
}
