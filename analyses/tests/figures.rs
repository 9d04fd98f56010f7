//! The golden figure test: every figure drawn from a fixed small result set
//! built here (rows of the shape sweeps write), as SVG and PNG; the files
//! must exist, be well-formed (the PNG's chunks and checksums, the SVG's
//! envelope) and carry the axis labels.

use pmsim_analyses::figures::{by_id, FIGURES};
use pmsim_analyses::plot::{render, Kind};
use pmsim_analyses::Row;
use serde_json::{json, Value};
use std::fs;

struct Spec<'a> {
    alloc: &'a str,
    alloc_params: Value,
    workload: &'a str,
    threads: u32,
    sim_keys: Value,
}

fn sim(flushes: f64, reflush: f64, ops: f64, eadr: bool, scale: f64) -> Value {
    let total = if eadr { 10.0 * ops } else { flushes * (100.0 + 500.0 * reflush) * scale };
    json!({
        "eadr": eadr,
        "overall": {
            "flushes": flushes, "reflushes": (flushes * reflush).round(), "reflush_ratio": reflush,
            "pm_writes": if eadr { ops * 0.05 } else { flushes }, "evictions": ops * 0.05, "ops": ops,
            "persist_ns": { "meta": total * 0.5, "wal": total * 0.2, "log": total * 0.1, "data": 0.0,
                            "unmapped": 0.0, "fence": total * 0.2, "total": total },
            "persist_ns_per_op": total / ops
        },
        "pm": { "write_amplification": 1.0 + reflush }
    })
}

/// The contention model's part of a simulator report: `ops` in `makespan_ns`.
fn contention(ops: f64, makespan_ns: f64) -> Value {
    json!({ "ops": ops, "makespan_ns": makespan_ns, "ops_per_s": ops / (makespan_ns * 1e-9), "forced": 0 })
}

/// The contention model's estimate with the CPU's work: `ops_per_s`, its
/// time split evenly over the parts.
fn estimate(ops_per_s: f64) -> Value {
    let parts =
        ["meta", "wal", "log", "data", "unmapped", "fence", "alloc_cpu", "other_cpu", "stores", "wait", "lock_wait"];
    let makespan = 2e4 / ops_per_s * 1e9;
    let parts: serde_json::Map<String, Value> = parts.iter().map(|p| (p.to_string(), json!(makespan / 10.0))).collect();
    json!({ "ops_per_s": ops_per_s, "makespan_ns": makespan, "ops": 2e4, "parts_ns": parts })
}

fn native(peak_mib: f64, slabs: Option<(u64, u64, u64)>) -> Value {
    json!({
        "ops": 1000, "peak": { "live_bytes": peak_mib * 0.6 * 1048576.0, "mapped_bytes": peak_mib * 1048576.0 },
        "params": { "live_cap": 8 << 20 },
        "snapshot": { "slabs": slabs.map(|(low, mid, high)| json!({"low": low, "mid": mid, "high": high})) },
        "series": (0..20u64).map(|i| json!({
            "ops": 50 * i, "live_bytes": (i % 10) << 20,
            "mapped_bytes": (peak_mib * 1048576.0 * (i.min(10) as f64) / 10.0) as u64,
        })).collect::<Vec<_>>()
    })
}

fn row(index: usize, s: Spec, sim: Option<Value>, native: Option<Value>, ops_per_s: Option<f64>) -> Row {
    let mode = match (sim.is_some(), native.is_some()) {
        (true, true) => "both",
        (true, false) => "sim",
        _ => "native",
    };
    let point = json!({
        "mode": mode, "scale": "tiny", "workload": s.workload, "workload_params": {}, "threads": s.threads,
        "alloc": s.alloc, "alloc_params": s.alloc_params, "sim": s.sim_keys, "seed": 42
    });
    let timing = match ops_per_s {
        Some(x) => json!({ "ops_per_s": x, "elapsed_s": 1000.0 / x, "ops_per_cpu_s": 1.2 * x }),
        None => json!({}),
    };
    // Simulated points carry the CPU profile of their run.
    let cpu = sim
        .as_ref()
        .map(|_| json!({ "malloc_ns": 60.0, "free_ns": 40.0, "alloc_ns": 50.0, "outside_ns": 20.0, "total_ns": 70.0 }));
    serde_json::from_value(json!({
        "index": index, "id": format!("{index:016x}"), "point": point,
        "result": { "allocator": null, "sim": sim, "sim_skipped": null, "native": native },
        "env": { "host": "h", "pmsim_version": "0", "started_unix": 0.0, "wall_s": 1.0,
                 "native_timing": timing, "flush_insn": null, "sim_dimms": null, "cpu": cpu }
    }))
    .unwrap()
}

fn spec<'a>(alloc: &'a str, workload: &'a str, threads: u32, ap: Value, sk: Value) -> Spec<'a> {
    Spec { alloc, alloc_params: ap, workload, threads, sim_keys: sk }
}

/// The rows each figure is drawn from.
fn data(id: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    let allocs = ["base", "+interleaved", "+log", "nvalloc-log", "pmdk"];
    match id {
        "fig1a" | "fig11" | "compare" => {
            for wl in ["threadtest", "larson-small"] {
                for (k, a) in allocs.iter().enumerate() {
                    let sim = (*a != "pmdk").then(|| sim(1e5, 0.8 - 0.15 * k as f64, 2e4, false, 1.0));
                    let i = rows.len();
                    rows.push(row(
                        i,
                        spec(a, wl, 1, json!({}), json!({})),
                        sim,
                        Some(native(20.0, None)),
                        Some(1e6 * (k + 1) as f64),
                    ));
                }
            }
        }
        "fig2" => {
            for (k, a) in ["base", "nvalloc-log"].iter().enumerate() {
                let mut r = row(
                    k,
                    spec(a, "threadtest", 1, json!({}), json!({"access_map.per_category": 1000})),
                    Some(sim(1e5, 0.5, 2e4, false, 1.0)),
                    None,
                    None,
                );
                r.result.access_map = (0..1000u64)
                    .map(|n| json!({"category": "meta", "nth": n, "index": n * 7, "addr": 0, "heap_offset": (n * 7919 * (k as u64 + 1)) % (64 << 20), "region": "slab"}))
                    .collect();
                rows.push(r);
            }
        }
        "fig15a" | "fig15b" | "heapshape" => {
            for w in 1..=4 {
                for (k, a) in ["nvalloc-log", "nvalloc-log:morphing=false", "pmdk"].iter().enumerate() {
                    let slabs = (*a != "pmdk").then_some((10 * k as u64 + w, 20, 30 - w));
                    let i = rows.len();
                    rows.push(row(
                        i,
                        spec(
                            a,
                            ["fragbench-w1", "fragbench-w2", "fragbench-w3", "fragbench-w4"][w as usize - 1],
                            1,
                            json!({}),
                            json!({}),
                        ),
                        None,
                        Some(native(10.0 + (w as f64) * (k as f64 + 1.0), slabs)),
                        Some(1e6),
                    ));
                }
            }
        }
        "fig16a" | "fig19" => {
            let eadrs: &[bool] = if id == "fig19" { &[false, true] } else { &[false] };
            for &e in eadrs {
                for t in [1, 2] {
                    for s in [1, 2, 4, 8, 16, 32] {
                        let i = rows.len();
                        let sk = if id == "fig19" { json!({"eadr": e}) } else { json!({}) };
                        let r = 0.6 / (s as f64).sqrt();
                        let mut sim = sim(1e5 * t as f64, r, 2e4 * t as f64, e, 1.0);
                        if id == "fig16a" {
                            sim["contention"] = contention(2e4 * t as f64, 1e7 * (1.0 + r) / t as f64);
                        }
                        rows.push(row(
                            i,
                            spec("nvalloc-log", "threadtest", t, json!({"stripes": s}), sk),
                            Some(sim),
                            None,
                            None,
                        ));
                    }
                }
            }
        }
        "fig16b" => {
            for wl in ["fragbench-w1", "fragbench-w3"] {
                for su in [0.05, 0.1, 0.2, 0.3, 0.4, 0.5] {
                    let i = rows.len();
                    rows.push(row(
                        i,
                        spec("nvalloc-log", wl, 1, json!({"su": su}), json!({})),
                        Some(sim(1e5, 0.3, 2e4, false, 1.0 + su)),
                        Some(native(40.0 - 30.0 * su, None)),
                        Some(1e6 / (1.0 + su)),
                    ));
                }
            }
        }
        "fig9" | "fig10" | "fig12" | "fig13a" | "fig13b" | "fig14" | "fig20" | "fig21" => {
            let (workloads, allocs): (&[&str], &[&str]) = match id {
                "fig10" => (&["threadtest", "prodcon"], &["nvalloc-gc", "makalu", "llfree"]),
                "fig12" | "fig21" => (&["larson-large", "dbmstest"], &["nvalloc-log", "pmdk"]),
                "fig13b" => (&["dbmstest"], &["nvalloc-log", "pmdk"]),
                "fig14" => (&["fptree"], &["nvalloc-log", "pmdk", "makalu"]),
                _ => (&["threadtest", "prodcon"], &["nvalloc-log", "pmdk"]),
            };
            let e = matches!(id, "fig20" | "fig21");
            for wl in workloads {
                for (k, a) in allocs.iter().enumerate() {
                    for t in [1, 2, 4, 8, 16] {
                        let mut sim = sim(1e5, 0.5, 2e4, e, 1.0);
                        sim["contention"] = contention(2e4, 1e7 * (k + 1) as f64 / (t as f64).sqrt());
                        let i = rows.len();
                        let mut r = row(
                            i,
                            spec(a, wl, t, json!({}), json!({"contention": true, "eadr": e})),
                            Some(sim),
                            None,
                            None,
                        );
                        r.env.estimate = Some(estimate(2e6 * t as f64 / (k + 1) as f64));
                        r.result.traced = Some(json!({"peak": {"mapped_bytes": (8 + 2 * k + t as usize) << 20,
                            "live_bytes": 6u64 << 20}}));
                        rows.push(r);
                    }
                }
            }
        }
        "fig1b" | "fig15cd" | "fig17" => {
            const GC_RULES: [&str; 3] = ["artifact", "paper", "off"];
            let allocs: &[&str] = match id {
                "fig1b" => &["pmdk", "makalu"],
                _ => &["nvalloc-log", "nvalloc-log:morphing=false", "pmdk"],
            };
            let workloads: &[&str] =
                if id == "fig17" { &["larson-large", "dbmstest"] } else { &["fragbench-w1", "fragbench-w2"] };
            for wl in workloads {
                for (k, a) in allocs.iter().enumerate() {
                    let ap = if id == "fig17" { json!({ "log_gc": GC_RULES[k % 3] }) } else { json!({}) };
                    let i = rows.len();
                    rows.push(row(
                        i,
                        spec(a, wl, 1, ap, json!({})),
                        Some(sim(1e5, 0.3, 2e4, false, 1.0 + k as f64)),
                        Some(native(10.0 + 5.0 * k as f64, None)),
                        Some(1e6),
                    ));
                }
            }
        }
        "fig18" => {
            // Recovery times over two decades, as the allocators' differ.
            for (k, a) in ["nvalloc-log", "pmdk", "nvalloc-gc", "makalu"].iter().enumerate() {
                let mut nat = native(10.0, None);
                nat["extra"] = json!({"list_nodes": 1000, "recovered_nodes": 1000});
                let mut r = row(k, spec(a, "list", 1, json!({}), json!({})), None, Some(nat), Some(1e6));
                r.env.native_timing.insert("recovery_s".into(), json!(2e-3 * 7f64.powi(k as i32)));
                rows.push(r);
            }
        }
        "sites" => {
            for wl in ["threadtest", "larson-small"] {
                for (k, a) in allocs.iter().enumerate() {
                    let mut sim = sim(1e5, 0.8 - 0.15 * k as f64, 2e4, false, 1.0);
                    // Eight sites, the costliest first (as the simulator
                    // orders them), the later ones cheaper.
                    sim["sites"] = (0..8u64)
                        .map(|s| {
                            json!({"site": s + 1, "name": format!("model/src/{a}.rs:{}", 10 * s + 1),
                                        "flushes": 1000 * (8 - s), "reflushes": 100 * (8 - s) * k as u64,
                                        "reflush_ratio": 0.1 * k as f64, "fences": 10,
                                        "persist_ns": 1e4 * (8 - s) as f64})
                        })
                        .collect::<Value>();
                    let i = rows.len();
                    rows.push(row(i, spec(a, wl, 1, json!({}), json!({})), Some(sim), None, None));
                }
            }
        }
        other => panic!("no data for figure {other}: add it here"),
    }
    rows
}

/// Checks the PNG signature and every chunk's length and CRC up to IEND; returns (width, height).
fn check_png(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    let mut at = 8;
    let mut size = None;
    loop {
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let kind = &bytes[at + 4..at + 8];
        let data = &bytes[at + 8..at + 8 + len];
        let crc = u32::from_be_bytes(bytes[at + 8 + len..at + 12 + len].try_into().unwrap());
        assert_eq!(crc, crc32fast::hash(&bytes[at + 4..at + 8 + len]), "PNG chunk CRC");
        if kind == b"IHDR" {
            size = Some((
                u32::from_be_bytes(data[..4].try_into().unwrap()),
                u32::from_be_bytes(data[4..8].try_into().unwrap()),
            ));
        }
        at += 12 + len;
        if kind == b"IEND" {
            assert_eq!(at, bytes.len(), "bytes after IEND");
            break;
        }
    }
    size.expect("IHDR")
}

#[test]
fn every_figure_renders_as_svg_and_png_with_labelled_axes() {
    let tmp = tempfile::tempdir().unwrap();
    for (id, _, f) in FIGURES {
        assert!(f(&[]).is_none(), "{id}: drew something from no rows");
        let rows = data(id);
        for r in &rows {
            r.check_fields().unwrap_or_else(|e| panic!("{id}: the test's rows are not of the shape sweeps write: {e}"));
        }
        let fig = by_id(id).unwrap()(&rows).unwrap_or_else(|| panic!("{id}: nothing drawn from its rows"));
        assert_eq!(&fig.id, id);
        assert!(!fig.caption.is_empty() && !fig.table.rows.is_empty(), "{id}: caption and table");
        let files = render(&fig, tmp.path()).unwrap();
        let svg = fs::read_to_string(&files[0]).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{id}: not an SVG document");
        for p in &fig.panels {
            for label in [&p.x_label, &p.y_label] {
                let esc = label.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
                assert!(svg.contains(&esc), "{id}: axis label '{label}' missing from the SVG");
            }
            let drawn = match &p.kind {
                Kind::Bars { series, .. } | Kind::LogBars { series, .. } => {
                    series.iter().map(|s| s.1.len()).sum::<usize>()
                }
                Kind::Lines { series, .. } | Kind::Scatter { series } => series.iter().map(|s| s.1.len()).sum(),
            };
            assert!(drawn > 0, "{id}: panel '{}' has no data", p.title);
        }
        let (w, h) = check_png(&fs::read(&files[1]).unwrap());
        assert!(w >= 800 && h >= 400, "{id}: PNG is {w}×{h}");
    }
}

/// Lines are named by allocator; when the rows mix workloads each workload
/// gets its own line (and table label), not one line zig-zagging between them.
#[test]
fn stripes_figures_keep_workloads_apart() {
    for id in ["fig16a", "fig19"] {
        let mut rows = data(id);
        let one = rows.len();
        for r in rows.clone() {
            let mut r = r;
            r.point.workload = "larson-small".into();
            r.index = rows.len();
            rows.push(r);
        }
        let fig = by_id(id).unwrap()(&rows).unwrap();
        let Kind::Lines { series, .. } = &fig.panels[0].kind else { panic!("{id}: lines expected") };
        let names: Vec<&str> = series.iter().map(|s| s.0.as_str()).collect();
        assert_eq!(series.len(), 2 * data(id).len() / 6, "{id}: {names:?}");
        assert!(names.iter().any(|n| n.contains(" on threadtest")), "{id}: {names:?}");
        assert!(names.iter().any(|n| n.contains(" on larson-small")), "{id}: {names:?}");
        assert!(series.iter().all(|s| s.1.len() == 6), "{id}: one point per stripe count and line");
        assert_eq!(fig.table.rows.len(), 2 * one);
        assert!(fig.table.rows.iter().any(|r| r[0].ends_with(" on larson-small")), "{id}");
    }
}

/// The comparison's code sites: the five costliest of each point by persist
/// time whatever order the row lists them in, with their share of the
/// sites' persist time; points whose trace names no sites are left out.
#[test]
fn sites_lists_the_costliest_five_of_each_point() {
    let mut rows = data("sites");
    let fig = by_id("sites").unwrap()(&rows).unwrap();
    assert_eq!(fig.table.rows.len(), 5 * rows.len());
    let cells = |r: &Vec<String>| (r[0].clone(), r[3].clone(), r[4].clone(), r[8].clone());
    // Persist time 8, 7, … 1 (× 10 µs): the first is 8/36 of the sites' total.
    assert_eq!(cells(&fig.table.rows[0]), ("base".into(), "1".into(), "model/src/base.rs:1".into(), "22.2".into()));
    assert_eq!(cells(&fig.table.rows[4]), ("base".into(), "5".into(), "model/src/base.rs:41".into(), "11.1".into()));
    let Kind::Bars { series, .. } = &fig.panels[0].kind else { panic!("bars") };
    let names: Vec<&str> = series.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(names, ["site 1", "site 2", "site 3", "site 4", "site 5", "other sites"]);
    // Listed cheapest first, the same sites come out; without sites, no row.
    rows[0].result.sim.as_mut().unwrap()["sites"].as_array_mut().unwrap().reverse();
    rows[1].result.sim.as_mut().unwrap().as_object_mut().unwrap().remove("sites");
    let again = by_id("sites").unwrap()(&rows).unwrap();
    assert_eq!(again.table.rows[..5], fig.table.rows[..5]);
    assert_eq!(again.table.rows.len(), 5 * (rows.len() - 1));
    assert!(!again.table.rows.iter().any(|r| r[0] == rows[1].point.alloc && r[1] == rows[1].point.workload));
}
