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

/// `pmsim run` of a short Threadtest (tiny scale, 2 threads × 2 iterations ×
/// 300 objects) on `alloc`, with `extra` arguments.
fn short_threadtest(alloc: &str, extra: &[&str]) -> Output {
    let args = ["run", "--alloc", alloc, "--workload", "threadtest", "--threads", "2", "--scale", "tiny"];
    pmsim(&[&args[..], &["--param", "iterations=2", "--param", "objects=300"], extra].concat())
}

/// The flush count of a simulator report's `overall` (or per-thread)
/// object, checked to be the sum of reflushes and regular flushes.
fn flushes_adding_up(o: &serde_json::Value) -> u64 {
    let flushes = o["flushes"].as_u64().unwrap();
    assert_eq!(o["reflushes"].as_u64().unwrap() + o["regular_flushes"].as_u64().unwrap(), flushes, "{o}");
    flushes
}

#[test]
fn a_traced_run_reads_back_and_simulates() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.pmt");
    let heap = dir.path().join("h.heap");
    let t = trace.to_str().unwrap();
    let o = short_threadtest("nvalloc-log", &["--heap", heap.to_str().unwrap(), "--trace", t]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(Path::new(t).exists());
    let o = pmsim(&["sim", t, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
    let o = &v["overall"];
    let flushes = flushes_adding_up(o);
    assert!(flushes > 0, "a traced NVAlloc run issued no flushes");
    let hist: u64 = o["histogram"].as_array().unwrap().iter().map(|b| b["count"].as_u64().unwrap()).sum();
    assert_eq!(hist, flushes, "the distance histogram must count every flush");
    // The run must not clobber a file the user already has.
    let o = pmsim(&["run", "--alloc", "nvalloc-log", "--workload", "threadtest", "--scale", "tiny", "--trace", t]);
    assert!(!o.status.success(), "an existing trace was overwritten without --force");
}

fn pmsim_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pmsim"));
    c.args(args).env_remove("GEM5");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("pmsim runs")
}

/// One line on stderr containing every needle, and a failure.
fn fails_with(o: &Output, needles: &[&str]) {
    assert!(!o.status.success(), "accepted: {}", stdout(o));
    let err = stderr(o);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    for n in needles {
        assert!(err.contains(n), "missing {n:?} in {err}");
    }
}

#[test]
fn export_writes_every_pm_write_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.gem5");
    let script = dir.path().join("replay.py");
    let o = pmsim(&[
        "export",
        SAMPLE,
        "--format",
        "gem5",
        "--out",
        out.to_str().unwrap(),
        "--gem5-config",
        script.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
    let sim: serde_json::Value = serde_json::from_slice(&pmsim(&["sim", SAMPLE, "--json"]).stdout).unwrap();
    assert_eq!(v["summary"]["packets"], sim["overall"]["pm_writes"]);
    assert_eq!(v["summary"]["out_bytes"].as_u64().unwrap(), std::fs::metadata(&out).unwrap().len());
    let py = std::fs::read_to_string(&script).unwrap();
    assert!(py.contains(&format!("TRACE = \"{}\"", out.display())) && py.contains("NVM_2400_1x64"), "{py}");
    let o = pmsim(&["export", SAMPLE, "--format", "ramulator", "--out", out.to_str().unwrap(), "--region", "wal"]);
    fails_with(&o, &["t.gem5", "already exists (--force replaces it)"]);
    let o = pmsim(&[
        "export",
        SAMPLE,
        "--format",
        "ramulator",
        "--out",
        out.to_str().unwrap(),
        "--region",
        "wal",
        "--force",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("packets") && stdout(&o).contains("ramulator format"), "{}", stdout(&o));
}

#[test]
fn export_bad_input_is_one_error_line() {
    use pmsim_traces::{Category, Event, FlushKind, Region, TraceHeader, TraceWriter, WriterOptions};
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.out");
    let out_s = out.to_str().unwrap();
    fails_with(&pmsim(&["export", SAMPLE, "--format", "nvsim", "--out", out_s]), &["unknown export format \"nvsim\""]);
    let bad = "/nonexistent-dir/x.gem5";
    fails_with(&pmsim(&["export", SAMPLE, "--format", "gem5", "--out", bad]), &[bad, "cannot create"]);
    fails_with(&pmsim(&["export", SAMPLE, "--format", "gem5", "--out", out_s, "--region", "slab"]), &["\"slab\""]);
    fails_with(&pmsim(&["export", SAMPLE, "--format", "dramsim3", "--out", out_s, "--gzip"]), &["--format gem5"]);
    fails_with(&pmsim(&["export", SAMPLE, "--format", "gem5", "--out", out_s, "--run-gem5"]), &["GEM5"]);

    // A trace whose only region is metadata, asked for its WAL traffic.
    let t = dir.path().join("meta-only.pmt");
    let header = TraceHeader {
        regions: vec![Region { id: 0, name: "bitmap".into(), category: Category::Meta, base: 0, len: 4096 }],
        ..TraceHeader::default()
    };
    let mut w = TraceWriter::new(std::fs::File::create(&t).unwrap(), &header, &WriterOptions::default()).unwrap();
    w.write(0, &Event::Store { addr: 64, size: 8, value: None }).unwrap();
    w.write(0, &Event::Flush { kind: FlushKind::Clwb, line: 64 }).unwrap();
    w.finish().unwrap();
    let ts = t.to_str().unwrap();
    fails_with(
        &pmsim(&["export", ts, "--format", "dramsim3", "--out", out_s, "--region", "wal,meta"]),
        &["meta-only.pmt", "no region of category wal (it has meta)"],
    );
    assert!(!out.exists(), "a failed export left its output");
    let o = pmsim(&["export", ts, "--format", "dramsim3", "--out", out_s, "--region", "meta"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "0x40 WRITE 0\n");
}

/// `--run-gem5` with a stand-in for gem5 that checks how it is called and
/// writes a stats.txt: the command line, the script and the statistics
/// printer are exercised; gem5 itself is not here.
#[test]
fn run_gem5_calls_gem5_and_reads_its_stats() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("gem5.opt");
    std::fs::write(
        &fake,
        "#!/bin/sh\n[ \"$1\" = -d ] || exit 3\ngrep -q 'TrafficGen(config_file=cfg)' \"$3\" || exit 4\nmkdir -p \"$2\"\n\
         printf -- '---------- Begin Simulation Statistics ----------\\nsimTicks 20000000 # t\\n\
         system.mem_ctrl.writeReqs 16228 # w\\nsystem.tgen.avgWriteLatency 123.5 # l\\n' > \"$2/stats.txt\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = dir.path().join("t.gem5");
    let o = pmsim_env(
        &["export", SAMPLE, "--format", "gem5", "--out", out.to_str().unwrap(), "--run-gem5"],
        &[("GEM5", fake.to_str().unwrap())],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let s = stdout(&o);
    for needle in [
        "system.mem_ctrl.writeReqs",
        "16228",
        "system.tgen.avgWriteLatency",
        "gem5 simulated time",
        "pmsim persist-time estimate",
    ] {
        assert!(s.contains(needle), "missing {needle:?} in\n{s}");
    }
    assert!(dir.path().join("t.gem5.py").exists() && dir.path().join("t.gem5.m5out/gem5.log").exists());
    // A gem5 that fails is reported with its log's last lines, and leaves
    // the earlier run's output directory as it was, with nothing beside it.
    let stats = std::fs::read(dir.path().join("t.gem5.m5out/stats.txt")).unwrap();
    std::fs::write(&fake, "#!/bin/sh\necho boom\nexit 1\n").unwrap();
    let o = pmsim_env(
        &["export", SAMPLE, "--format", "gem5", "--out", out.to_str().unwrap(), "--run-gem5", "--force"],
        &[("GEM5", fake.to_str().unwrap())],
    );
    fails_with(&o, &["gem5 failed", "gem5.log: boom"]);
    assert_eq!(std::fs::read(dir.path().join("t.gem5.m5out/stats.txt")).unwrap(), stats);
    let mut names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    assert_eq!(names, ["gem5.opt", "t.gem5", "t.gem5.m5out", "t.gem5.py"], "nothing else is left");
}

/// `pmsim run --alloc llfree … --sim`: LLFree's flushes reach the simulator,
/// broken down by its regions; under eADR its lower level flushes nothing.
#[test]
fn llfree_runs_into_the_simulator() {
    let run = |alloc: &str| {
        let o = short_threadtest(alloc, &["--sim", "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
        v["runs"][0].clone()
    };
    let region_flushes = |r: &serde_json::Value, name: &str| {
        let regions = r["sim"]["regions"].as_array().unwrap();
        regions.iter().find(|x| x["name"] == name).map_or(0, |x| x["flushes"].as_u64().unwrap())
    };
    let adr = run("llfree");
    assert_eq!(adr["allocator"]["name"], "llfree");
    assert_eq!(adr["allocator"]["params"]["eadr"], false);
    // 2 threads × 2 iterations × 300 objects, each allocated and freed: two
    // flushed CASes (child, bit field) per operation.
    let ops = 2 * 2 * 300 * 2;
    assert!(region_flushes(&adr, "llfree children") >= ops, "{}", adr["sim"]["regions"]);
    assert!(region_flushes(&adr, "llfree bit fields") >= ops, "{}", adr["sim"]["regions"]);
    let eadr = run("llfree:eadr=true");
    assert_eq!(eadr["allocator"]["params"]["eadr"], true);
    assert_eq!(region_flushes(&eadr, "llfree bit fields"), 0, "eADR: the bit fields are never flushed by operations");
    let o = pmsim(&["run", "--alloc", "llfree:nonsense=1", "--workload", "threadtest"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("unknown LLFree parameter 'nonsense'"), "{}", stderr(&o));
}

#[test]
fn makalu_and_metall_stream_into_the_simulator() {
    for alloc in ["makalu", "metall"] {
        let o = short_threadtest(alloc, &["--sim", "--json"]);
        assert!(o.status.success(), "{alloc}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
        let run = &v["runs"][0];
        assert_eq!(run["allocator"]["name"], alloc);
        let s = &run["sim"]["overall"];
        let flushes = flushes_adding_up(s);
        assert!(s["stores"].as_u64().unwrap() > 0, "{alloc}: the workload's stores were not traced");
        let regions: Vec<String> =
            run["sim"]["regions"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap().to_string()).collect();
        assert!(regions.iter().any(|r| r.starts_with(alloc)), "{alloc}: its regions are missing: {regions:?}");
        if alloc == "makalu" {
            // Core metadata goes through the undo log: flushes of the log and the headers.
            assert!(flushes > 0, "a traced Makalu run issued no flushes");
        }
    }
}

/// nvm_malloc's and PAllocator's headers lie inside their chunks and
/// segments (a chunk's first page and the first 64 B of every run; a small
/// page's header line and block entries): their flushes count as metadata,
/// the objects around them as user data.
#[test]
fn headers_inside_the_data_areas_count_as_metadata() {
    for (alloc, headers, data) in [
        ("nvm-malloc", "nvm_malloc headers", "nvm_malloc chunks"),
        ("pallocator", "pallocator headers", "pallocator segments"),
    ] {
        let o = short_threadtest(alloc, &["--sim", "--json"]);
        assert!(o.status.success(), "{alloc}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
        let regions = v["runs"][0]["sim"]["regions"].as_array().unwrap();
        let of =
            |name: &str| regions.iter().find(|r| r["name"] == name).unwrap_or_else(|| panic!("no {name}: {regions:?}"));
        let (h, d) = (of(headers), of(data));
        assert_eq!((h["category"].as_str(), d["category"].as_str()), (Some("meta"), Some("data")), "{alloc}");
        // Every malloc and free of a small object changes its header (a
        // run's state and bitmap, a page's block entry) and persists it.
        let ops = 2 * 2 * 2 * 300;
        assert!(h["flushes"].as_u64().unwrap() >= ops, "{alloc}: {h}");
    }
}

/// `pmsim lint` names the shipped Makalu code's defect: the state word
/// persisted on every free-list probe and every block freed shows up as
/// redundant flushes at exactly those two sites, which the intended
/// protocol (the default) does not flush at all.
#[test]
fn lint_names_the_shipped_makalu_defect_sites() {
    let dir = tempfile::tempdir().unwrap();
    let redundant_sites = |alloc: &str| -> (u64, Vec<(String, u64)>) {
        let t = dir.path().join(format!("{}.pmt", alloc.replace([':', '='], "_")));
        let ts = t.to_str().unwrap();
        let o = pmsim(&[
            "run",
            "--alloc",
            alloc,
            "--workload",
            "threadtest",
            "--param",
            "iterations=3",
            "--param",
            "objects=1000",
            "--param",
            "publish=false",
            "--trace",
            ts,
        ]);
        assert!(o.status.success(), "{alloc}: {}", stderr(&o));
        let o = pmsim(&["lint", ts, "--json"]);
        assert!(o.status.success(), "{alloc}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
        let f = v["findings"].as_array().unwrap().iter().find(|f| f["kind"] == "redundant-flush").unwrap().clone();
        let sites = f["top_sites"].as_array().unwrap();
        let sites = sites.iter().map(|s| (s["name"].as_str().unwrap().to_string(), s["count"].as_u64().unwrap()));
        (f["count"].as_u64().unwrap(), sites.collect())
    };
    let (total, shipped) = redundant_sites("makalu:shipped=true");
    let defect: Vec<&(String, u64)> = shipped.iter().take(2).collect();
    assert!(defect.iter().all(|(n, _)| n.starts_with("model/src/makalu/blocks.rs:")), "{shipped:?}");
    let at_defect: u64 = defect.iter().map(|d| d.1).sum();
    assert!(
        at_defect * 10 >= total * 9,
        "{at_defect} of {total} redundant flushes at the two defect sites: {shipped:?}"
    );
    let (_, fixed) = redundant_sites("makalu");
    for (site, _) in defect {
        assert!(fixed.iter().all(|(n, _)| n != site), "the intended protocol flushes at {site}: {fixed:?}");
    }
}

#[test]
fn crash_explores_a_traced_run_and_reports_a_removed_flush() {
    let dir = tempfile::tempdir().unwrap();
    let record = |name: &str, alloc: &str, values: bool| {
        let t = dir.path().join(name);
        let ts = t.to_str().unwrap().to_string();
        let mut args = vec!["run", "--alloc", alloc, "--workload", "threadtest", "--param", "objects=50"];
        args.extend(["--param", "iterations=1", "--heap-size", "8M", "--trace", &ts]);
        if values {
            args.push("--values");
        }
        let o = pmsim(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        ts
    };
    // Each allocator with crash recovery: the real code passes, its
    // mutation (a removed flush or swapped order) is caught and replays.
    let cases = [
        ("nvalloc-log", "dest-flush"),
        ("nvalloc-gc", "dest-flush"),
        ("llfree", "free-before-unpublish"),
        ("makalu", "undo-entry-flush"),
    ];
    for (alloc, mutation) in cases {
        let good = record(&format!("{alloc}.pmt"), alloc, true);
        assert!(Path::new(&format!("{good}.img")).is_file(), "--values saves the heap image next to the trace");
        let o = pmsim(&["crash", &good, "--every", "50", "--bound", "16", "--json"]);
        assert!(o.status.success(), "{alloc}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
        assert!(v["images"].as_u64().unwrap() > 0 && v["violation"].is_null(), "{v}");

        let bad = record(&format!("{alloc}-bad.pmt"), &format!("{alloc}:mutation={mutation}"), true);
        let o = pmsim(&["crash", &bad, "--bound", "16"]);
        assert!(!o.status.success());
        let out = stdout(&o);
        assert!(out.contains("VIOLATION") && out.contains("not persisted"), "{alloc}:{mutation}: {out}");
        let replay = out.lines().find_map(|l| l.strip_prefix("replay       pmsim ")).expect("a replay command");
        let o = pmsim(&replay.split(' ').collect::<Vec<_>>());
        let problem = out.lines().find(|l| l.starts_with("problem ")).expect("a problem line");
        assert!(!o.status.success() && stdout(&o).contains(problem), "{}", stdout(&o));
    }

    let plain = record("plain.pmt", "nvalloc-log", false);
    let o = pmsim(&["crash", &plain]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("plain.pmt") && e.contains("has no store values") && e.trim().lines().count() == 1, "{e}");
}

/// The Metall-style allocator: a store closed with data in it
/// (`keep=true`); every crash before the properly-closed mark is refused as
/// unclean (counted, human and JSON), the end of the trace reopens with
/// every object, and the mark written before the heap is synced is caught
/// with a replay command that fails the same way.
#[test]
fn crash_refuses_unclean_metall_stores_and_catches_the_mark_before_the_sync() {
    let dir = tempfile::tempdir().unwrap();
    let record = |name: &str, alloc: &str| {
        let t = dir.path().join(name).to_str().unwrap().to_string();
        let mut args = vec!["run", "--alloc", alloc, "--workload", "threadtest", "--param", "objects=100"];
        args.extend([
            "--param",
            "iterations=2",
            "--param",
            "keep=true",
            "--heap-size",
            "8M",
            "--trace",
            &t,
            "--values",
        ]);
        let o = pmsim(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(Path::new(&format!("{t}.img.files/chunk_directory")).is_file(), "the management files are saved");
        t
    };
    let good = record("mt.pmt", "metall");
    let o = pmsim(&["crash", &good, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
    let (images, refused) = (v["images"].as_u64().unwrap(), v["refused"].as_u64().unwrap());
    assert!(v["violation"].is_null() && v["end_point"] == true && refused == images - 1, "{v}");
    assert_eq!(v["distinct_states"], v["points"], "one recovery-visible state per point");
    let o = pmsim(&["crash", &good]);
    let out = stdout(&o);
    assert!(out.contains("and the trace's end") && out.contains(&format!("refused      {refused} image(s)")), "{out}");

    let bad = record("mt-bad.pmt", "metall:mutation=mark-before-sync");
    let o = pmsim(&["crash", &bad, "--bound", "64"]);
    assert!(!o.status.success());
    let out = stdout(&o);
    assert!(out.contains("VIOLATION") && out.contains("not persisted"), "{out}");
    let replay = out.lines().find_map(|l| l.strip_prefix("replay       pmsim ")).expect("a replay command");
    let o = pmsim(&replay.split(' ').collect::<Vec<_>>());
    let problem = out.lines().find(|l| l.starts_with("problem ")).expect("a problem line");
    assert!(problem.contains("holds 0x0"), "{problem}");
    assert!(!o.status.success() && stdout(&o).contains(problem), "{}", stdout(&o));
}

#[test]
fn specs_check_prints_the_table_and_json() {
    // The LLFree recovery-skip question: refuted under the paper's flush per
    // operation, passes under the code's flush per CAS and under eADR.
    let o = pmsim(&["specs", "check", "--filter", "skip_all_free", "--workers", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for needle in [
        "LLFreeSingleCAS/skip_all_free ",
        "REFUTED (expected): CountersMatchBitFields violated",
        "LLFreeSingleCAS/skip_all_free_cas",
        "LLFreeSingleCAS/skip_all_free_eadr",
        "PASS",
        "3 models: 2 PASS, 1 REFUTED (expected), 0 UNEXPECTED",
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

/// A sweep whose allocator parameter is out of range fails while it is
/// planned: one line naming the parameter and its range, no output directory.
#[test]
fn sweep_refuses_a_bad_allocator_parameter_before_running() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("d");
    let o = pmsim(&["sweep", "--set", "alloc=nvalloc-log", "--set", "stripes=100", "--out", out.to_str().unwrap()]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    assert!(e.contains("stripes = 100 (must be 1..=64)"), "{e}");
    assert!(!out.exists(), "the sweep made {}", out.display());
}

/// `--help` lists every registered allocator (from the registry, not a hand-written list).
#[test]
fn run_help_lists_every_registered_allocator() {
    let o = pmsim(&["run", "--help"]);
    let help = stdout(&o);
    for name in pmsim_model::registry::names() {
        assert!(help.contains(name), "--help does not list {name}:\n{help}");
    }
}

#[test]
fn calibrate_prints_every_published_point_with_its_error() {
    let o = pmsim(&["calibrate", "--quick", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(rows.len() >= 50, "{} rows", rows.len());
    for r in &rows {
        assert!(
            r["model"].as_f64().unwrap() > 0.0 && r["published"].as_f64().is_some() && r["unit"].is_string(),
            "{r}"
        );
    }
    // The working-set write-amplification figure and the six-DIMM bandwidth
    // against threads are fitted, every point within 15 %.
    let fitted: Vec<_> = rows.iter().filter(|r| r["fitted"].as_bool().unwrap()).collect();
    let family = |f: &str| fitted.iter().filter(|r| r["point"].as_str().unwrap().starts_with(f)).count();
    assert!(family("family=wa") >= 8 && family("family=bandwidth") >= 16, "{fitted:?}");
    for r in fitted {
        assert!(r["error"].as_f64().unwrap() <= 0.15, "{r}");
    }
    // One point, published or not; the error check can fail.
    let o = pmsim(&["calibrate", "--quick", "--point", "family=bandwidth,op=clwb,threads=12,dimms=1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("family=bandwidth,op=clwb,pattern=random,access=256,threads=12,dimms=1"));
    let o = pmsim(&["calibrate", "--quick", "--max-fitted-error", "0.001"]);
    fails_with(&o, &["fitted point", "from its published value"]);
    let o = pmsim(&["calibrate", "--point", "family=bandwidth,threads=0"]);
    fails_with(&o, &["threads"]);
    let o = pmsim(&["calibrate", "--point", "op=clwb"]);
    fails_with(&o, &["family= is required"]);
}

/// `pmsim diff` fails a CI job exactly when the candidate crosses a bound, and
/// `pmsim lint --deny` exactly when the denied finding is present.
#[test]
fn diff_and_lint_fail_ci_only_when_a_bound_is_crossed() {
    let dir = tempfile::tempdir().unwrap();
    let path = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let (base, nv, saved) = (path("base.pmt"), path("nv.pmt"), path("nv.json"));
    for (alloc, t) in [("base", &base), ("nvalloc-log", &nv)] {
        let o = short_threadtest(alloc, &["--trace", t]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    // nvalloc-log reflushes far less than base (its slab headers are striped).
    let o = pmsim(&["diff", &base, &nv, "--fail-if", "reflush_ratio>+5%"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("ok    reflush_ratio>+5%"), "{}", stdout(&o));
    fails_with(
        &pmsim(&["diff", &nv, &base, "--fail-if", "reflush_ratio>+5%"]),
        &["regresses from", "reflush_ratio>+5%"],
    );
    fails_with(&pmsim(&["diff", &base, &nv, "--fail-if", "reflush_ratio<-20%"]), &["reflush_ratio<-20%"]);
    // A saved report compares with the trace it came from: nothing changed.
    let o = pmsim(&["sim", &nv, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(&saved, &o.stdout).unwrap();
    let o = pmsim(&[
        "diff",
        &saved,
        &nv,
        "--json",
        "--fail-if",
        "flushes_per_op>+0%",
        "--fail-if",
        "regions/wal/flushes>+0",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // Equal up to the last bit of a ratio: serde_json's default float parser
    // does not always read back the nearest double of what it wrote.
    let same = |r: &serde_json::Value| r["delta"].as_f64().unwrap().abs() <= 1e-12 * r["a"].as_f64().unwrap().abs();
    assert!(v["overall"].as_array().unwrap().iter().all(same), "{v}");
    assert_eq!(v["verdicts"].as_array().unwrap().len(), 2);
    // Bad bounds and bad reports are refused before any replay.
    fails_with(&pmsim(&["diff", &base, &nv, "--fail-if", "flushes=3"]), &["--fail-if flushes=3"]);
    fails_with(&pmsim(&["diff", &base, &nv, "--fail-if", "regions/nowhere/flushes>1"]), &["has no figure"]);
    std::fs::write(path("bad.json"), "{\"overall\": ").unwrap();
    fails_with(&pmsim(&["diff", &path("bad.json"), &nv]), &["bad.json", "line 1"]);

    // lint: deny a finding the trace has, then one it lacks.
    let o = pmsim(&["lint", &base, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let count = |kind: &str| {
        let f = v["findings"].as_array().unwrap().iter().find(|f| f["kind"] == kind).unwrap();
        f["count"].as_u64().unwrap()
    };
    assert!(count("reflush-distance-0") > 0, "base flushes its slab header twice in a row: {v}");
    assert_eq!(count("redundant-flush"), 0, "{v}");
    fails_with(
        &pmsim(&["lint", &base, "--deny", "reflush-distance-0"]),
        &["denied findings present: reflush-distance-0"],
    );
    let o = pmsim(&["lint", &base, "--deny", "redundant-flush"]);
    assert!(o.status.success(), "{}", stderr(&o));
    fails_with(&pmsim(&["lint", &base, "--deny", "nonsense"]), &["unknown finding"]);
}

/// `pmsim diff` on two sweep directories: points pair up by their
/// parameters, those of one sweep only are named, and a threshold fails the
/// comparison exactly when one point crosses it.
#[test]
fn diff_compares_sweeps_point_by_point() {
    use pmsim_analyses::store::{decode_line, encode_line};
    let dir = tempfile::tempdir().unwrap();
    let path = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let (a, b) = (path("a"), path("b"));
    for (allocs, out) in [("base", &a), ("base,nvalloc-log", &b)] {
        let set = ["alloc=", allocs].concat();
        let o = pmsim(&[
            "sweep",
            "--set",
            &set,
            "--set",
            "workload=threadtest",
            "--set",
            "mode=both",
            "--set",
            "param.iterations=2",
            "--set",
            "param.objects=300",
            "--out",
            out,
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    // The base point is the same in both (one thread: the same figures).
    let o = pmsim(&["diff", &a, &b, "--fail-if", "reflush_ratio>+0.02", "--fail-if", "peak_mapped_bytes>+0%"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for needle in [
        "1 points in both: 0 changed",
        "1 points only in b:",
        "nvalloc-log threadtest",
        "ok    reflush_ratio>+0.02  (1 points)",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in\n{out}");
    }
    // A bound on the value itself is crossed by the same figures.
    fails_with(
        &pmsim(&["diff", &a, &b, "--fail-if", "flushes>1"]),
        &["regresses from", "flushes>1 at base threadtest"],
    );

    // B's base point now reflushes more, as a build that regressed would.
    let shard = Path::new(&b).join("shards").join("0.jsonl");
    let text = std::fs::read_to_string(&shard).unwrap();
    let mut lines = Vec::new();
    for line in text.lines() {
        let mut row = decode_line(line.as_bytes()).unwrap();
        if row.point.alloc == "base" {
            let r = &mut row.result.sim.as_mut().unwrap()["overall"]["reflush_ratio"];
            *r = serde_json::json!(r.as_f64().unwrap() + 0.05);
        }
        lines.push(encode_line(&row));
    }
    std::fs::write(&shard, lines.concat()).unwrap();
    fails_with(
        &pmsim(&["diff", &a, &b, "--fail-if", "reflush_ratio>+0.02"]),
        &["regresses from", "reflush_ratio>+0.02 at base threadtest ×1"],
    );
    let o = pmsim(&["diff", &a, &b, "--fail-if", "reflush_ratio>+0.1", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let figures = v["points"][0]["figures"].as_array().unwrap();
    let ratio = figures.iter().find(|f| f["metric"] == "reflush_ratio").unwrap();
    assert!((ratio["delta"].as_f64().unwrap() - 0.05).abs() < 1e-9, "{ratio}");
    assert_eq!(v["only_in_b"].as_array().unwrap().len(), 1);
    assert_eq!(v["verdicts"][0]["crossed"], false);

    // Bad input: one line each.
    fails_with(&pmsim(&["diff", &a, SAMPLE]), &["is a directory and", "is not"]);
    std::fs::create_dir(path("empty")).unwrap();
    fails_with(&pmsim(&["diff", &a, &path("empty")]), &["empty: no experiment.json: not a sweep directory"]);
    fails_with(&pmsim(&["diff", &a, &b, "--fail-if", "regions/nowhere/flushes>1"]), &["no point of both sweeps"]);
    fails_with(&pmsim(&["diff", &a, &b, "--window"]), &["--window"]);
}

/// Every number the figures read is in a real `pmsim sim --json` report
/// (the report a `--traced` row is made of); the other documents (native
/// report, timings, access map) are checked against the rows of a real
/// `pmsim reproduce` in tests/reproduce.rs.
#[test]
fn sim_json_holds_every_number_the_figures_read() {
    use pmsim_analyses::fields::{check, Need, Source, ALL};
    let o = pmsim(&["sim", SAMPLE, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    check(&v, Source::Sim).unwrap_or_else(|e| panic!("{e}"));
    for f in ALL.iter().filter(|f| f.source == Source::Sim) {
        // The contention model's figures are in the rows of points simulated
        // with it (checked in tests/reproduce.rs), not in a plain report.
        let Some(got) = v.pointer(f.path) else {
            assert!(f.need == Need::Some && f.path.starts_with("/contention/"), "{} missing", f.path);
            continue;
        };
        assert!(got.is_number() || f.need != Need::Always, "{}: {got}", f.path);
    }
}

/// A row whose statistic was renamed (as an older or newer pmsim would
/// write it) makes `sweep merge` fail with one line naming the shard file
/// and the JSON path, instead of drawing zeros.
#[test]
fn a_renamed_statistic_fails_the_merge_naming_file_and_path() {
    use pmsim_analyses::store::{decode_line, encode_line};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("d");
    let o = pmsim(&[
        "sweep",
        "--set",
        "alloc=base",
        "--set",
        "workload=threadtest",
        "--set",
        "mode=sim",
        "--out",
        d.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let shard = d.join("shards").join("0.jsonl");
    let text = std::fs::read(&shard).unwrap();
    let mut row = decode_line(text.strip_suffix(b"\n").unwrap()).unwrap();
    let overall = row.result.sim.as_mut().unwrap()["overall"].as_object_mut().unwrap();
    let v = overall.remove("reflush_ratio").unwrap();
    overall.insert("reflush_share".into(), v);
    std::fs::write(&shard, encode_line(&row)).unwrap();
    let csv = dir.path().join("x.csv");
    let o = pmsim(&["sweep", "merge", d.to_str().unwrap(), "--csv", csv.to_str().unwrap()]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    assert!(e.contains(shard.to_str().unwrap()) && e.contains("/overall/reflush_ratio"), "{e}");
    assert!(!csv.exists(), "a CSV of zeros was written");
}

/// A `memory` point runs natively for its footprint and keeps no timing:
/// its row has the peak a `native` point of the same run has, and no
/// native throughput (it ran beside other points).
#[test]
fn a_memory_point_keeps_its_peak_and_no_timing() {
    use pmsim_analyses::store::decode_line;
    let dir = tempfile::tempdir().unwrap();
    let rows = |mode: &str| {
        let d = dir.path().join(mode);
        let o = pmsim(&[
            "sweep",
            "--set",
            "alloc=nvalloc-log",
            "--set",
            "workload=fragbench-w1",
            "--set",
            &format!("mode={mode}"),
            "--out",
            d.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let text = std::fs::read(d.join("shards").join("0.jsonl")).unwrap();
        decode_line(text.strip_suffix(b"\n").unwrap()).unwrap()
    };
    let (memory, native) = (rows("memory"), rows("native"));
    let peak =
        |r: &pmsim_analyses::row::Row| r.result.native.as_ref().unwrap()["peak"]["mapped_bytes"].as_u64().unwrap();
    assert_eq!(peak(&memory), peak(&native));
    assert!(memory.env.native_timing.is_empty(), "{:?}", memory.env.native_timing);
    assert!(native.env.native_timing.contains_key("ops_per_s"), "{:?}", native.env.native_timing);
}

/// `trace info` shows the header's strings escaped: a crafted trace's names
/// with line breaks or terminal escapes neither add lines nor reach the
/// terminal as control sequences.
#[test]
fn trace_info_escapes_the_headers_strings() {
    use pmsim_traces::{Category, Component, Event, Region, TraceHeader, TraceWriter, WriterOptions};
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("crafted.pmt");
    let mut header = TraceHeader {
        allocator: Component { name: "evil\x1b[2J".into(), variant: "v\nforged line".into(), ..Component::default() },
        regions: vec![Region { id: 0, name: "meta\r\x07".into(), category: Category::Meta, base: 0, len: 4096 }],
        ..TraceHeader::default()
    };
    header.heap.path = "/dev/shm/h\x1b]0;title\x07".into();
    header.flush_insn = "clwb\x08".into();
    let mut w = TraceWriter::new(std::fs::File::create(&t).unwrap(), &header, &WriterOptions::default()).unwrap();
    w.write(0, &Event::Store { addr: 64, size: 8, value: None }).unwrap();
    w.finish().unwrap();
    let o = pmsim(&["trace", "info", t.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(!out.chars().any(|c| c.is_control() && c != '\n'), "control characters in: {out:?}");
    assert!(!out.lines().any(|l| l.starts_with("forged line")), "{out}");
    assert!(out.contains("evil\\u{1b}[2J (v\\nforged line)"), "{out}");
}
