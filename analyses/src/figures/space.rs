//! The space figures beyond Fragbench's own (Fig. 15a/b): the peers' peak
//! memory on Fragbench (Fig. 1b) and every allocator's peak memory on
//! Threadtest and DBMStest (Fig. 13a/b: Threadtest's from native runs with
//! the paper's live data, DBMStest's from the simulated runs' footprints).

use super::{alloc_label, distinct, fragbench, mib};
use crate::fields::*;
use crate::peers::{self, Class};
use crate::plot::{Figure, Kind, Panel};
use crate::row::Row;
use crate::table::{num, Table};

/// Fig. 1b: the peers' peak memory on Fragbench W1–W4, beside the live cap.
pub fn fig1b(rows: &[Row]) -> Option<Figure> {
    let rs: Vec<&Row> = fragbench(rows)
        .into_iter()
        .filter(|r| !r.point.alloc.starts_with("nvalloc") && peers::class(&r.point.alloc) != Class::Other)
        .collect();
    if rs.is_empty() {
        return None;
    }
    let (wls, allocs, mut series) = super::fragbench_peaks(&rs);
    let mut table = Table::new(&["workload", "allocator", "peak mapped (MiB)", "live cap (MiB)", "peak / live cap"]);
    let mut cap = vec![0.0; wls.len()];
    for r in &rs {
        let w = wls.iter().position(|x| *x == r.point.workload).expect("listed");
        let m = mib(r.num(PEAK_MAPPED).unwrap_or(0.0));
        let c = r.num(LIVE_CAP).map(mib);
        cap[w] = c.unwrap_or(0.0);
        table.push(vec![
            r.point.workload.clone(),
            alloc_label(r, &[]),
            format!("{m:.2}"),
            num(c),
            c.filter(|&c| c > 0.0).map_or("-".into(), |c| format!("{:.2}", m / c)),
        ]);
    }
    series.push(("live-data cap".into(), cap));
    Some(Figure {
        id: "fig1b".into(),
        title: "Peak memory of the existing allocators on Fragbench (NVAlloc Fig. 1b)".into(),
        caption: format!(
            "Peak memory mapped by each of the paper's peers in the sweep ({}) on Fragbench W1–W4 (native runs; \
             {} here, the paper 5 GB under 1 GB), beside the cap: static slab segregation keeps slabs of the old \
             size class when the request sizes change.",
            allocs.join(", "),
            super::fragbench_sizing(&rs)
        ),
        panels: vec![super::fragbench_peak_panel(&wls, series)],
        table,
        paper: None,
    })
}

/// A run's peak mapped and live bytes: the native run's where there is one,
/// else the traced run's.
pub fn peaks(r: &Row) -> (Option<f64>, Option<f64>) {
    match r.num(PEAK_MAPPED) {
        Some(m) => (Some(m), r.num(PEAK_LIVE)),
        None => (r.num(TRACED_PEAK_MAPPED), r.num(TRACED_PEAK_LIVE)),
    }
}

/// Peak memory of every allocator on `workload` against threads, from each
/// run's footprint (native, or traced where the point was only simulated).
fn space(rows: &[Row], workload: &str, id: &str, title: &str) -> Option<Figure> {
    let rs: Vec<&Row> = rows
        .iter()
        .filter(|r| r.point.workload == workload && peaks(r).0.is_some())
        .filter(|r| !matches!(r.point.alloc.split(':').next(), Some("base" | "+interleaved" | "+log" | "nvalloc-gc")))
        .filter(|r| r.point.sim.get("eadr").and_then(|v| v.as_bool()) != Some(true))
        .collect();
    if rs.is_empty() {
        return None;
    }
    let mut table = Table::new(&["allocator", "threads", "peak mapped (MiB)", "peak live (MiB)", "mapped / live"]);
    let mut series = Vec::new();
    for a in distinct(rs.iter().map(|r| alloc_label(r, &[]))) {
        let mut pts = Vec::new();
        for r in rs.iter().filter(|r| alloc_label(r, &[]) == a) {
            let (m, l) = peaks(r);
            let (m, l) = (m.map(mib), l.map(mib));
            if let Some(m) = m {
                pts.push((r.point.threads as f64, m));
            }
            let ratio = match (m, l) {
                (Some(m), Some(l)) if l > 0.0 => format!("{:.2}", m / l),
                _ => "-".into(),
            };
            table.push(vec![a.clone(), r.point.threads.to_string(), num(m), num(l), ratio]);
        }
        pts.sort_by(|x, y| x.0.total_cmp(&y.0));
        series.push((a, pts));
    }
    Some(Figure {
        id: id.into(),
        title: title.into(),
        caption: format!(
            "Peak memory mapped by each allocator on {workload} against threads, from the {} runs (the \
             footprint the allocator reports: slabs, extents and its metadata; PMDK's runs in use and its huge \
             allocations){}. NVAlloc-GC lays out memory as NVAlloc-LOG does and is left out, as in the paper.",
            if rs.iter().all(|r| r.num(PEAK_MAPPED).is_some()) { "native" } else { "simulated" },
            if workload == "threadtest" { threadtest_sizing(&rs) } else { String::new() }
        ),
        panels: vec![Panel {
            title: workload.into(),
            x_label: "threads".into(),
            y_label: "peak mapped (MiB)".into(),
            kind: Kind::Lines { series, log2_x: true, log10_y: false },
        }],
        table,
        paper: None,
    })
}

/// What the runs' Threadtest allocated, for the caption (the live data
/// the space follows: the paper's 100,000 objects of 64 B, fewer rounds).
fn threadtest_sizing(rs: &[&Row]) -> String {
    let p = |k: &str| rs.first().and_then(|r| r.point.workload_params.get(k)).and_then(|v| v.as_u64());
    match (p("objects"), p("iterations")) {
        (Some(o), Some(i)) => {
            format!("; each of {i} rounds holds {o} objects live at once (the paper: 10,000 rounds of 100,000)")
        }
        _ => String::new(),
    }
}

/// Fig. 13a: space on Threadtest.
pub fn fig13a(rows: &[Row]) -> Option<Figure> {
    space(rows, "threadtest", "fig13a", "Space consumption on Threadtest (NVAlloc Fig. 13a)")
}

/// Fig. 13b: space on DBMStest.
pub fn fig13b(rows: &[Row]) -> Option<Figure> {
    space(rows, "dbmstest", "fig13b", "Space consumption on DBMStest (NVAlloc Fig. 13b)")
}
