//! The `pmsim` binary end to end: sample traces, bad input, a small run.

use std::path::Path;
use std::process::{Command, Output};

fn pmsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pmsim")).args(args).output().expect("pmsim runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/traces/samples/threadtest-nvalloc-log.pmt");

#[test]
fn trace_info_prints_header_and_counts() {
    let o = pmsim(&["trace", "info", SAMPLE]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for needle in
        ["allocator   nvalloc (nvalloc-log)", "workload    threadtest", "bytes/event", "flush", "fence", "WAL"]
    {
        assert!(out.contains(needle), "missing {needle:?} in\n{out}");
    }
    let o = pmsim(&["trace", "info", SAMPLE, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
    let events = v["stats"]["events"].as_u64().unwrap();
    let by_kind: u64 = v["stats"]["by_kind"].as_object().unwrap().values().map(|n| n.as_u64().unwrap()).sum();
    assert_eq!(events, by_kind);
    assert!(v["stats"]["bytes_per_event"].as_f64().unwrap() <= 4.0);
}

#[test]
fn trace_dump_filters_and_limits() {
    let o = pmsim(&["trace", "dump", SAMPLE, "--thread", "1", "--limit", "5", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<serde_json::Value> = stdout(&o).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 5);
    assert!(lines.iter().all(|l| l["tid"] == 1));
}

#[test]
fn damaged_trace_is_one_error_line_and_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(SAMPLE).unwrap();
    let cut = dir.path().join("cut.pmt");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    for args in [vec!["trace", "info"], vec!["trace", "dump"], vec!["sim"]] {
        let mut a = args.clone();
        a.push(cut.to_str().unwrap());
        let o = pmsim(&a);
        assert!(!o.status.success(), "{args:?} accepted a truncated trace");
        let err = stderr(&o);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains("cut.pmt: byte ") && err.contains("truncated"), "{err}");
    }
    let o = pmsim(&["trace", "info", "/nonexistent.pmt"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("/nonexistent.pmt"), "{}", stderr(&o));
}

#[test]
fn a_traced_run_reads_back_and_simulates() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.pmt");
    let heap = dir.path().join("h.heap");
    let t = trace.to_str().unwrap();
    let o = pmsim(&[
        "run",
        "--alloc",
        "nvalloc-log",
        "--workload",
        "threadtest",
        "--threads",
        "2",
        "--scale",
        "tiny",
        "--param",
        "iterations=2",
        "--param",
        "objects=300",
        "--heap",
        heap.to_str().unwrap(),
        "--trace",
        t,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(Path::new(t).exists());
    let o = pmsim(&["sim", t, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
    let o = &v["overall"];
    let flushes = o["flushes"].as_u64().unwrap();
    assert!(flushes > 0, "a traced NVAlloc run issued no flushes");
    assert_eq!(o["reflushes"].as_u64().unwrap() + o["regular_flushes"].as_u64().unwrap(), flushes);
    let hist: u64 = o["histogram"].as_array().unwrap().iter().map(|b| b["count"].as_u64().unwrap()).sum();
    assert_eq!(hist, flushes, "the distance histogram must count every flush");
    // The run must not clobber a file the user already has.
    let o = pmsim(&["run", "--alloc", "nvalloc-log", "--workload", "threadtest", "--scale", "tiny", "--trace", t]);
    assert!(!o.status.success(), "an existing trace was overwritten without --overwrite");
}

#[test]
fn specs_check_prints_the_table_and_json() {
    // The LLFree recovery-skip question: refuted without eADR, passes with it.
    let o = pmsim(&["specs", "check", "--filter", "skip_all_free", "--workers", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for needle in [
        "LLFreeSingleCAS/skip_all_free ",
        "REFUTED (expected): CountersMatchBitFields violated",
        "LLFreeSingleCAS/skip_all_free_eadr",
        "PASS",
        "2 models: 1 PASS, 1 REFUTED (expected), 0 UNEXPECTED",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in\n{out}");
    }
    let o = pmsim(&["specs", "check", "--filter", "skip_all_free_eadr", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
    let m = &v["models"][0];
    assert_eq!(m["status"], "PASS");
    assert!(m["distinct"].as_u64().unwrap() > 0 && m["states"].as_u64().unwrap() >= m["distinct"].as_u64().unwrap());

    let o = pmsim(&["specs", "check", "--filter", "no-such-model"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no model matches"), "{}", stderr(&o));
}
