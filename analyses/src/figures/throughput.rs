//! The throughput figures: estimated operations per second against threads
//! (Figs. 9, 10, 12, 14, 20, 21: CPU work plus persistence, threads
//! contending for the DIMMs, on a log10 axis as the paper draws them), and
//! the bars of Fragbench (Fig. 15c/d) and of the log's GC (Fig. 17).

use super::{alloc_label, distinct, eadr};
use crate::estimate;
use crate::fields::*;
use crate::peers::{self, Class};
use crate::plot::{Figure, Kind, Panel, Series};
use crate::row::Row;
use crate::table::{num, Table};

/// The ablations of Fig. 11 (not drawn in the throughput figures).
fn ablation(r: &Row) -> bool {
    matches!(r.point.alloc.split(':').next(), Some("base" | "+interleaved" | "+log"))
        || r.point.alloc.contains("wal=strict")
}

/// One panel per workload, one line per allocator: estimated Mops/s against
/// threads, log10. `keep` picks the rows; `None` when it keeps none with an
/// estimate.
fn lines(rows: &[Row], keep: impl Fn(&Row) -> bool, id: &str, title: &str, caption: &str) -> Option<Figure> {
    let rs: Vec<&Row> = rows.iter().filter(|r| keep(r) && estimate::ops_per_s(r).is_some()).collect();
    if rs.is_empty() {
        return None;
    }
    let mops = |r: &Row| estimate::ops_per_s(r).map(|x| x / 1e6);
    let nvalloc = |r: &Row| {
        let ours = if peers::class(&r.point.alloc) == Class::Weak { "nvalloc-gc" } else { "nvalloc-log" };
        rs.iter()
            .find(|q| {
                q.point.alloc.split(':').next() == Some(ours)
                    && q.point.workload == r.point.workload
                    && q.point.threads == r.point.threads
            })
            .and_then(|q| mops(q))
    };
    let mut table = Table::new(&[
        "workload",
        "allocator",
        "threads",
        "est. Mops/s (CPU + persist)",
        "NVAlloc / this",
        "x vs 1 thread",
        "CPU-only Mops/s",
        "persist-only Mops/s",
        "CPU ns/op",
        "persist ns/op (no contention)",
        "events replayed past a blocked thread",
    ]);
    let mut panels = Vec::new();
    for wl in distinct(rs.iter().map(|r| r.point.workload.clone())) {
        let of: Vec<&Row> = rs.iter().copied().filter(|r| r.point.workload == wl).collect();
        let mut series: Vec<Series<(f64, f64)>> = Vec::new();
        for a in distinct(of.iter().map(|r| alloc_label(r, &[]))) {
            let line: Vec<&Row> = of.iter().copied().filter(|r| alloc_label(r, &[]) == a).collect();
            let one = line.iter().find(|r| r.point.threads == 1).and_then(|r| mops(r));
            let mut pts = Vec::new();
            for r in &line {
                let m = mops(r);
                if let Some(m) = m {
                    pts.push((r.point.threads as f64, m));
                }
                let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
                    (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
                    _ => "-".into(),
                };
                table.push(vec![
                    wl.clone(),
                    a.clone(),
                    r.point.threads.to_string(),
                    num(m),
                    ratio(nvalloc(r), m),
                    ratio(m, one),
                    num(estimate::cpu_only_ops_per_s(r).map(|x| x / 1e6)),
                    num(estimate::persist_only_ops_per_s(r).map(|x| x / 1e6)),
                    num(estimate::cpu_ns(r)),
                    num(estimate::persist_ns(r)),
                    num(r.num(EST_FORCED)),
                ]);
            }
            pts.sort_by(|x, y| x.0.total_cmp(&y.0));
            series.push((a, pts));
        }
        panels.push(Panel {
            title: wl,
            x_label: "threads".into(),
            y_label: "estimated Mops/s".into(),
            kind: Kind::Lines { series, log2_x: true, log10_y: true },
        });
    }
    Some(Figure { id: id.into(), title: title.into(), caption: caption.into(), panels, table, paper: None })
}

/// What every throughput caption says about the estimate.
const ESTIMATE: &str = "Estimated operations per second (log10, as the paper draws it): each run replayed through the \
     contention model with every thread's clock advanced by its CPU work (measured natively with flushes off, per \
     operation kind) and by its persistence, the threads on cores of their own sharing the DIMMs' write queues, \
     XPBuffers and media (timing fitted to FAST '20 Fig. 4). The schedule is virtual, so 16 threads are estimated on \
     any machine; the table holds the CPU alone and persistence alone beside it. PMDK is traced by the Valgrind tool, \
     which runs one thread at a time: its multi-threaded runs have events replayed past blocked threads (the \
     table's last column), and their estimates are less faithful.";

/// What the small-object captions say about where the objects are published.
const PUBLISH: &str = "Every object is published into a slot of a persistent array with malloc_to and freed with \
     free_from (the workloads' default); the paper's harness most likely kept its pointers in DRAM (Ralloc's \
     benchmarks do, and the NVAlloc artifact's test hands nvalloc_malloc_to a DRAM array), so the slot's flush on \
     each malloc and free is a cost its runs did not have. For the weakly consistent allocators, whose malloc and \
     free persist little else, it is most of the persistence shown (--param publish=false keeps the slots in DRAM).";

/// Fig. 9: small allocations, strongly consistent allocators.
pub fn fig9(rows: &[Row]) -> Option<Figure> {
    let of = |r: &Row| peers::class(&r.point.alloc) == Class::Strong && !ablation(r) && !eadr(r);
    lines(
        rows,
        of,
        "fig9",
        "Small allocations, strongly consistent allocators (NVAlloc Fig. 9)",
        &format!(
            "NVAlloc-LOG against the strongly consistent allocators of the sweep ({}; PMDK is the real libpmemobj) \
             on Threadtest (objects split over the threads, as the artifact's scripts run it), Prod-con, Shbench \
             and Larson-small. {PUBLISH} {ESTIMATE}",
            allocators(rows, of)
        ),
    )
}

/// The allocators of `rows` that `of` keeps, for a caption.
fn allocators(rows: &[Row], of: impl Fn(&Row) -> bool) -> String {
    distinct(rows.iter().filter(|r| of(r)).map(|r| alloc_label(r, &[]))).join(", ")
}

/// Fig. 10: small allocations, weakly consistent allocators (and pmsim's others).
pub fn fig10(rows: &[Row]) -> Option<Figure> {
    let of = |r: &Row| peers::class(&r.point.alloc) != Class::Strong && !eadr(r);
    lines(
        rows,
        of,
        "fig10",
        "Small allocations, weakly consistent allocators (NVAlloc Fig. 10)",
        &format!(
            "NVAlloc-GC against the weakly consistent allocators of the sweep and pmsim's others that are not in \
             the paper ({}; Makalu-style as shipped and as fixed where both ran), on the four small-object \
             benchmarks. {PUBLISH} {ESTIMATE}",
            allocators(rows, of)
        ),
    )
}

/// Fig. 12: large allocations.
pub fn fig12(rows: &[Row]) -> Option<Figure> {
    lines(
        rows,
        |r| !ablation(r) && r.point.alloc.split(':').next() != Some("nvalloc-gc") && !eadr(r),
        "fig12",
        "Large allocations (NVAlloc Fig. 12)",
        &format!(
            "NVAlloc-LOG against every other allocator pmsim has on Larson-large and DBMStest (objects of 32–512 KB); \
             NVAlloc-GC takes NVAlloc-LOG's path for large allocations and is left out, as in the paper. {ESTIMATE}"
        ),
    )
}

/// Fig. 14: FPTree.
pub fn fig14(rows: &[Row]) -> Option<Figure> {
    lines(
        rows,
        |r| !ablation(r) && r.point.workload == "fptree" && !eadr(r),
        "fig14",
        "FPTree (NVAlloc Fig. 14)",
        &format!(
            "A persistent FPTree (leaves and 128 B key-value objects in PM, inner nodes in DRAM; 50 % inserts, 50 % \
             deletes after a warm-up) on every allocator. {ESTIMATE}"
        ),
    )
}

/// What the eADR captions say.
const EADR: &str = "Emulated eADR, as the paper emulates it: the caches are in the persistence domain, so flushes \
     cost nothing and write nothing (sim.eadr = true); NVAlloc-LOG runs with interleaving off (one bit stripe, no \
     interleaved tcache or WAL), as the paper runs it there, and only the strongly consistent allocators are drawn.";

fn eadr_lines(rows: &[Row], workloads: &[&str], id: &str, title: &str) -> Option<Figure> {
    lines(
        rows,
        |r| eadr(r) && peers::class(&r.point.alloc) == Class::Strong && workloads.contains(&r.point.workload.as_str()),
        id,
        title,
        &format!("{EADR} {ESTIMATE}"),
    )
}

/// Fig. 20: small allocations under eADR.
pub fn fig20(rows: &[Row]) -> Option<Figure> {
    eadr_lines(
        rows,
        &["threadtest", "prodcon", "shbench", "larson-small"],
        "fig20",
        "Small allocations under eADR (NVAlloc Fig. 20)",
    )
}

/// Fig. 21: large allocations under eADR.
pub fn fig21(rows: &[Row]) -> Option<Figure> {
    eadr_lines(rows, &["larson-large", "dbmstest"], "fig21", "Large allocations under eADR (NVAlloc Fig. 21)")
}

/// Bars of estimated Mops/s: one group per workload, one bar per allocator.
fn bars(rs: &[&Row], title: &str) -> (Panel, Table) {
    let wls = distinct(rs.iter().map(|r| r.point.workload.clone()));
    let allocs = distinct(rs.iter().map(|r| alloc_label(r, &[])));
    let mut table = Table::new(&[
        "workload",
        "allocator",
        "threads",
        "est. Mops/s (CPU + persist)",
        "CPU ns/op",
        "persist ns/op",
        "reflush ratio",
    ]);
    let mut series: Vec<Series<f64>> = allocs.iter().map(|a| (a.clone(), vec![0.0; wls.len()])).collect();
    for r in rs {
        let w = wls.iter().position(|x| *x == r.point.workload).expect("listed");
        let a = allocs.iter().position(|x| *x == alloc_label(r, &[])).expect("listed");
        let m = estimate::ops_per_s(r).map(|x| x / 1e6);
        series[a].1[w] = m.unwrap_or(0.0);
        table.push(vec![
            r.point.workload.clone(),
            alloc_label(r, &[]),
            r.point.threads.to_string(),
            num(m),
            num(estimate::cpu_ns(r)),
            num(estimate::persist_ns(r)),
            num(r.num(REFLUSH_RATIO)),
        ]);
    }
    let categories = wls.iter().map(|w| w.replace("fragbench-", "").to_uppercase()).collect();
    let panel = Panel {
        title: title.into(),
        x_label: "workload".into(),
        y_label: "estimated Mops/s".into(),
        kind: Kind::Bars { categories, series, stacked: false },
    };
    (panel, table)
}

/// Fig. 15c/d: Fragbench throughput, NVAlloc-LOG with and without slab
/// morphing beside the peers.
pub fn fig15cd(rows: &[Row]) -> Option<Figure> {
    let rs: Vec<&Row> = rows
        .iter()
        .filter(|r| r.point.workload.starts_with("fragbench-") && estimate::ops_per_s(r).is_some())
        .collect();
    if rs.is_empty() {
        return None;
    }
    let (panel, table) = bars(&rs, "estimated throughput");
    Some(Figure {
        id: "fig15cd".into(),
        title: "Fragbench throughput (NVAlloc Fig. 15c/d)".into(),
        caption: format!(
            "Estimated throughput (CPU work plus persistence, one thread) of NVAlloc-LOG with and without slab \
             morphing and of the peers on Fragbench W1–W4, sized so that slabs morph ({}). Morphing costs the \
             flushes of its slab-header steps.",
            super::fragbench_sizing(&rs)
        ),
        panels: vec![panel],
        table,
        paper: None,
    })
}

/// Fig. 17: NVAlloc-LOG's throughput with the bookkeeping log's GC under
/// each rule (`log_gc`: the public code's, the paper's) and without it.
pub fn fig17(rows: &[Row]) -> Option<Figure> {
    let rs: Vec<&Row> = rows
        .iter()
        .filter(|r| r.point.alloc_params.contains_key("log_gc") && estimate::ops_per_s(r).is_some())
        .collect();
    if rs.is_empty() {
        return None;
    }
    let (panel, mut table) = bars(&rs, "estimated throughput");
    table.columns.push("log_gc".into());
    for (row, r) in table.rows.iter_mut().zip(&rs) {
        row.push(r.alloc_param("log_gc").map(|v| crate::point::value_text(&v)).unwrap_or_default());
    }
    Some(Figure {
        id: "fig17".into(),
        title: "GC of the bookkeeping log (NVAlloc Fig. 17)".into(),
        caption: "Estimated throughput of NVAlloc-LOG on Larson-large and DBMStest with the bookkeeping log's GC as \
                  NVAlloc's public code decides it (log_gc=artifact: every 10,000 tombstones, a slow GC when at most \
                  10 % of the log's slots hold live records, else a fast GC when at most 50 %), as the paper \
                  describes it (log_gc=paper: a fast GC at every check, a slow GC once the log exceeds Usage_pmem = \
                  0.2 % of the heap) and without GC (log_gc=off). At tiny scale the workloads keep the paper's live sets (Larson: 1000 objects; \
                  DBMStest: 10^4 per iteration) and run fewer generations and iterations than the paper's."
            .into(),
        panels: vec![panel],
        table,
        paper: None,
    })
}
