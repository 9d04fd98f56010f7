//! The figures of the NVAlloc paper that pmsim reproduces, plus the
//! allocator comparison: each a function from result rows to a [`Figure`]
//! (`None` when the rows hold nothing it can draw). They read rows only, so
//! any result set — a merged Slurm sweep, an edited experiment — can be drawn.

use crate::estimate;
use crate::fields::{self, *};
use crate::plot::{Figure, Kind, Panel, Series};
use crate::point::value_text;
use crate::row::Row;
use crate::table::{num, Table};
use serde_json::Value;

mod recovery;
mod space;
mod throughput;
pub use recovery::fig18;
pub use space::{fig13a, fig13b, fig1b, peaks};
pub use throughput::{fig10, fig12, fig14, fig15cd, fig17, fig20, fig21, fig9};

/// A figure function.
pub type FigureFn = fn(&[Row]) -> Option<Figure>;

/// Every figure, by id, with what it shows.
pub const FIGURES: &[(&str, &str, FigureFn)] = &[
    ("fig1a", "reflushes vs regular flushes per allocator (Fig. 1a)", fig1a),
    ("fig1b", "the peers' peak memory on Fragbench (Fig. 1b)", fig1b),
    ("fig2", "access map of the first metadata flushes (Fig. 2)", fig2),
    ("fig9", "small allocations, strongly consistent allocators: throughput against threads (Fig. 9)", fig9),
    ("fig10", "small allocations, weakly consistent allocators: throughput against threads (Fig. 10)", fig10),
    ("fig11", "time breakdown of the NVAlloc ablations (Fig. 11)", fig11),
    ("fig12", "large allocations: throughput against threads (Fig. 12)", fig12),
    ("fig13a", "space consumption on Threadtest (Fig. 13a)", fig13a),
    ("fig13b", "space consumption on DBMStest (Fig. 13b)", fig13b),
    ("fig14", "FPTree throughput against threads (Fig. 14)", fig14),
    ("fig15a", "Fragbench peak memory (Fig. 15a)", fig15a),
    ("fig15b", "Fragbench slab-utilization breakdown (Fig. 15b)", fig15b),
    ("fig15cd", "Fragbench throughput with and without slab morphing (Fig. 15c/d)", fig15cd),
    ("heapshape", "Fragbench memory over the run (mapped and live, every N operations)", heapshape),
    ("fig16a", "estimated time and reflush ratio vs bit stripes (Fig. 16a)", fig16a),
    ("fig16b", "memory and time vs the SU threshold (Fig. 16b)", fig16b),
    ("fig17", "the bookkeeping log's GC overhead (Fig. 17)", fig17),
    ("fig18", "recovery time of a linked list after a crash (Fig. 18)", fig18),
    ("fig19", "bit stripes under eADR (Fig. 19)", fig19),
    ("fig20", "small allocations under eADR (Fig. 20)", fig20),
    ("fig21", "large allocations under eADR (Fig. 21)", fig21),
    ("compare", "every allocator compared", compare),
    ("sites", "the costliest code sites of every allocator", sites),
];

/// The figure function of an id.
pub fn by_id(id: &str) -> Option<FigureFn> {
    FIGURES.iter().find(|f| f.0 == id).map(|f| f.2)
}

/// Distinct values in first-seen order.
pub(crate) fn distinct<T: PartialEq + Clone>(it: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut v = Vec::new();
    for x in it {
        if !v.contains(&x) {
            v.push(x);
        }
    }
    v
}

/// The allocator as a label: its spec and any swept allocator parameter
/// that is not the figure's own axis.
pub(crate) fn alloc_label(r: &Row, skip: &[&str]) -> String {
    let mut s = r.point.alloc.clone();
    for (k, v) in &r.point.alloc_params {
        if !skip.contains(&k.as_str()) {
            s.push_str(&format!(" {k}={}", value_text(v)));
        }
    }
    s
}

/// " on WORKLOAD" when `rs` mixes workloads, else nothing: a figure that
/// names its lines by allocator would otherwise draw two workloads of one
/// allocator as one line under one legend entry.
fn workload_suffix(rs: &[&Row]) -> impl Fn(&Row) -> String {
    let mixed = distinct(rs.iter().map(|r| r.point.workload.as_str())).len() > 1;
    move |r: &Row| if mixed { format!(" on {}", r.point.workload) } else { String::new() }
}

pub(crate) fn mib(b: f64) -> f64 {
    b / (1u64 << 20) as f64
}

pub(crate) fn sim_rows(rows: &[Row]) -> Vec<&Row> {
    rows.iter().filter(|r| r.result.sim.is_some()).collect()
}

pub(crate) fn param_f64(r: &Row, key: &str) -> Option<f64> {
    r.alloc_param(key).and_then(|v| v.as_f64())
}

/// Fig. 1a: the share of reflushes among all flushes, per allocator, one panel per workload.
pub fn fig1a(rows: &[Row]) -> Option<Figure> {
    let rs = sim_rows(rows);
    if rs.is_empty() {
        return None;
    }
    let mut table = Table::new(&[
        "workload",
        "allocator",
        "threads",
        "flushes",
        "reflushes",
        "regular flushes",
        "reflush % (whole run)",
        "reflush % (malloc, free)",
    ]);
    let mut panels = Vec::new();
    for wl in distinct(rs.iter().map(|r| r.point.workload.clone())) {
        let of: Vec<&&Row> = rs.iter().filter(|r| r.point.workload == wl).collect();
        let mut cats = Vec::new();
        let (mut re, mut reg) = (Vec::new(), Vec::new());
        for r in &of {
            let f = r.num(FLUSHES).unwrap_or(0.0);
            let rf = r.num(REFLUSHES).unwrap_or(0.0);
            let whole = 100.0 * r.num(REFLUSH_RATIO).unwrap_or(0.0);
            let pct = 100.0 * r.steady_reflush_ratio().unwrap_or(0.0);
            cats.push(alloc_label(r, &[]));
            re.push(pct);
            reg.push(if f > 0.0 { 100.0 - pct } else { 0.0 });
            table.push(vec![
                wl.clone(),
                alloc_label(r, &[]),
                r.point.threads.to_string(),
                num(Some(f)),
                num(Some(rf)),
                num(Some(f - rf)),
                format!("{whole:.1}"),
                format!("{pct:.1}"),
            ]);
        }
        panels.push(Panel {
            title: wl.clone(),
            x_label: "allocator".into(),
            y_label: "share of flushes (%)".into(),
            kind: Kind::Bars {
                categories: cats,
                series: vec![("reflushes (distance < 4)".into(), re), ("regular flushes".into(), reg)],
                stacked: true,
            },
        });
    }
    Some(Figure {
        id: "fig1a".into(),
        title: "Reflushes vs regular flushes (NVAlloc Fig. 1a)".into(),
        caption: "Share of the allocator-induced cache-line flushes (those inside malloc and free, with the morphing \
                  and log GC they start) that are reflushes (the same line flushed again within fewer than 4 distinct \
                  lines by the same thread) per allocator, each run streamed through pmsim's simulator. The heap's \
                  creation is left out of the bars (a run does it once; the table has the whole run's share too): at \
                  the main job's scale it would weigh far more than among the paper's millions of operations."
            .into(),
        panels,
        table,
        paper: None,
    })
}

/// The heap offsets of the metadata flushes in a row's access map, in order.
fn meta_offsets(r: &Row) -> Vec<u64> {
    r.result
        .access_map
        .iter()
        .filter(|p| p.get(AP_CATEGORY).and_then(Value::as_str) == Some("meta"))
        .filter_map(|p| fields::read(p, AP_HEAP_OFFSET))
        .map(|o| o as u64)
        .collect()
}

/// The share (%) of a row's metadata flushes that land neither on the
/// previous one's XPLine nor on a neighbouring one: small random writes.
pub fn far_share(r: &Row) -> Option<f64> {
    let offs = meta_offsets(r);
    (offs.len() > 1).then(|| {
        let far = offs.windows(2).filter(|w| (w[1] / 256).abs_diff(w[0] / 256) > 1).count();
        100.0 * far as f64 / (offs.len() - 1) as f64
    })
}

/// Fig. 2: where the first metadata flushes land in the heap.
pub fn fig2(rows: &[Row]) -> Option<Figure> {
    let rs: Vec<&Row> = rows.iter().filter(|r| !r.result.access_map.is_empty()).collect();
    if rs.is_empty() {
        return None;
    }
    let mut table = Table::new(&[
        "allocator",
        "workload",
        "meta flushes shown",
        "distinct XPLines",
        "distinct 4 KiB pages",
        "span (MiB)",
        "same/next XPLine as previous (%)",
    ]);
    let mut panels = Vec::new();
    for r in rs {
        let pts: Vec<(f64, f64)> = r
            .result
            .access_map
            .iter()
            .filter(|p| p.get(AP_CATEGORY).and_then(Value::as_str) == Some("meta"))
            .filter_map(|p| Some((fields::read(p, AP_NTH)?, fields::read(p, AP_HEAP_OFFSET)?)))
            .collect();
        let offs: Vec<u64> = pts.iter().map(|p| p.1 as u64).collect();
        let xplines = distinct(offs.iter().map(|o| o / 256)).len();
        let pages = distinct(offs.iter().map(|o| o / 4096)).len();
        let (lo, hi) = (offs.iter().min().copied().unwrap_or(0), offs.iter().max().copied().unwrap_or(0));
        let near = offs.windows(2).filter(|w| (w[1] / 256).abs_diff(w[0] / 256) <= 1).count();
        let near_pct = if offs.len() > 1 { 100.0 * near as f64 / (offs.len() - 1) as f64 } else { 0.0 };
        table.push(vec![
            alloc_label(r, &[]),
            r.point.workload.clone(),
            pts.len().to_string(),
            xplines.to_string(),
            pages.to_string(),
            format!("{:.2}", mib((hi - lo) as f64)),
            format!("{near_pct:.1}"),
        ]);
        panels.push(Panel {
            title: format!("{} on {}", alloc_label(r, &[]), r.point.workload),
            x_label: "n-th metadata flush".into(),
            y_label: "heap offset (MiB)".into(),
            kind: Kind::Scatter {
                series: vec![("metadata flush".into(), pts.iter().map(|&(x, y)| (x, mib(y))).collect())],
            },
        });
    }
    Some(Figure {
        id: "fig2".into(),
        title: "Access map of metadata flushes (NVAlloc Fig. 2)".into(),
        caption: "Heap offset of each of the first metadata flushes (regions of category meta) in trace order. \
                  Scattered points are small random writes to PM; runs of nearby offsets combine in the XPBuffer."
            .into(),
        panels,
        table,
        paper: None,
    })
}

/// Fig. 11: the estimated time per operation of each NVAlloc ablation,
/// split into the parts the paper names (Search, FlushMeta, FlushWAL,
/// Other: [`estimate::Breakdown`]), one panel per workload.
pub fn fig11(rows: &[Row]) -> Option<Figure> {
    let rs: Vec<&Row> = sim_rows(rows).into_iter().filter(|r| estimate::breakdown(r).is_some()).collect();
    if rs.is_empty() {
        return None;
    }
    let mut table = Table::new(&[
        "allocator",
        "workload",
        "threads",
        "Search ns/op",
        "FlushMeta ns/op",
        "FlushWAL ns/op",
        "Other ns/op",
        "total ns/op",
        "FlushMeta + FlushWAL %",
        "CPU ns/op (native, flushes off)",
        "persist ns/op (one thread, no contention)",
        "est. run time (ms)",
        "seeds",
    ]);
    let mut panels = Vec::new();
    for wl in distinct(rs.iter().map(|r| r.point.workload.clone())) {
        let mut cats = Vec::new();
        let mut vals = vec![Vec::new(); 4];
        // One bar per point: the mean over the seeds the experiment ran it
        // with (see `claims::fig11`).
        let mut points: Vec<Vec<&Row>> = Vec::new();
        for r in rs.iter().copied().filter(|r| r.point.workload == wl) {
            match points.iter_mut().find(|p| p[0].point.same_but_seed(&r.point)) {
                Some(p) => p.push(r),
                None => points.push(vec![r]),
            }
        }
        for runs in points {
            let (label, threads) = (alloc_label(runs[0], &[]), runs[0].point.threads);
            let each: Vec<_> = runs.iter().map(|r| estimate::breakdown(r).expect("filtered")).collect();
            let b = estimate::Breakdown::mean(&each);
            let mean = |f: fn(&Row) -> Option<f64>| {
                let v: Option<Vec<f64>> = runs.iter().map(|r| f(r)).collect();
                v.map(|v| v.iter().sum::<f64>() / v.len() as f64)
            };
            cats.push(label.clone());
            for (k, (_, v)) in b.parts().iter().enumerate() {
                vals[k].push(*v);
            }
            let share = if b.total() > 0.0 { 100.0 * b.flush() / b.total() } else { 0.0 };
            table.push(vec![
                label,
                wl.clone(),
                threads.to_string(),
                format!("{:.1}", b.search),
                format!("{:.1}", b.flush_meta),
                format!("{:.1}", b.flush_wal),
                format!("{:.1}", b.other),
                format!("{:.1}", b.total()),
                format!("{share:.1}"),
                num(mean(estimate::cpu_ns)),
                num(mean(estimate::persist_ns)),
                num(mean(estimate::run_ns).map(|ns| ns / 1e6)),
                runs.len().to_string(),
            ]);
        }
        let names = estimate::Breakdown::default().parts().map(|(n, _)| n.to_string());
        let series: Vec<Series<f64>> = names.into_iter().zip(vals).collect();
        let threads = distinct(rs.iter().filter(|r| r.point.workload == wl).map(|r| r.point.threads));
        let mut panel = persist_time_bars(wl, cats, series);
        panel.y_label = "estimated time (ns per operation and thread)".into();
        if let [t] = threads[..] {
            panel.title = format!("{} ({t} thread{})", panel.title, if t == 1 { "" } else { "s" });
        }
        panels.push(panel);
    }
    Some(Figure {
        id: "fig11".into(),
        title: "Performance breakdown (NVAlloc Fig. 11)".into(),
        caption: "Estimated time per operation (per thread) of each NVAlloc ablation, split as the paper's Fig. 11 \
                  splits execution time: Search (the allocator's CPU work, measured natively with flushes off: \
                  the paper's object searching, splitting and coalescing, and pmsim counts all of the \
                  allocator's CPU time there), FlushMeta (flushes of metadata and of the bookkeeping log, with \
                  the waits for them), FlushWAL (write-ahead-log flushes and their waits) and Other (the \
                  workload's own CPU work, user-data flushes such as a malloc_to's destination, fences that \
                  order no flush). Points simulated with the contention model take the parts from its replay \
                  (threads contending for the DIMMs); one-thread points without it add the CPU profile to the \
                  simulator's persist time by category. Each bar is the mean over the seeds the experiment ran \
                  (the table's last column): a run with more threads than the machine has cores records one \
                  of the ways its threads interleave."
            .into(),
        panels,
        table,
        paper: None,
    })
}

/// A panel of one workload's allocators, each bar stacking its estimated
/// persist time per operation by `series` (Fig. 11's regions, the sites
/// figure's costliest sites).
pub(crate) fn persist_time_bars(workload: String, categories: Vec<String>, series: Vec<Series<f64>>) -> Panel {
    Panel {
        title: workload,
        x_label: "allocator".into(),
        y_label: "estimated persist time (ns per operation)".into(),
        kind: Kind::Bars { categories, series, stacked: true },
    }
}

pub(crate) fn fragbench(rows: &[Row]) -> Vec<&Row> {
    rows.iter().filter(|r| r.point.workload.starts_with("fragbench-") && r.result.native.is_some()).collect()
}

/// The peak mapped memory (MiB) of Fragbench rows `rs` as bar data: the
/// workloads, the allocators, and one series per allocator with its peak
/// on each workload (Figs. 1b and 15a).
pub(crate) fn fragbench_peaks(rs: &[&Row]) -> (Vec<String>, Vec<String>, Vec<Series<f64>>) {
    let wls = distinct(rs.iter().map(|r| r.point.workload.clone()));
    let allocs = distinct(rs.iter().map(|r| alloc_label(r, &[])));
    let mut series: Vec<Series<f64>> = allocs.iter().map(|a| (a.clone(), vec![0.0; wls.len()])).collect();
    for r in rs {
        let w = wls.iter().position(|x| *x == r.point.workload).expect("listed");
        let a = allocs.iter().position(|x| *x == alloc_label(r, &[])).expect("listed");
        series[a].1[w] = mib(r.num(PEAK_MAPPED).unwrap_or(0.0));
    }
    (wls, allocs, series)
}

/// How Fragbench was sized in rows `rs`, for a caption ("100 MiB allocated
/// per phase under a 20 MiB live cap"), read from the runs' parameters;
/// empty when the rows do not say.
pub(crate) fn fragbench_sizing(rs: &[&Row]) -> String {
    let param = |k: &str| {
        let mut v = distinct(rs.iter().filter_map(|r| {
            let report = r.result.native.as_ref().or(r.result.traced.as_ref())?;
            report.pointer(&format!("/params/{k}"))?.as_f64().map(|b| format!("{:.0} MiB", mib(b)))
        }));
        v.sort();
        v.join(" or ")
    };
    match (param("alloc_bytes"), param("live_cap")) {
        (a, c) if !a.is_empty() && !c.is_empty() => format!("{a} allocated per phase under a {c} live cap"),
        _ => String::new(),
    }
}

/// The peak-memory bars of Fragbench W1–W4 (Figs. 1b and 15a): one bar
/// group per workload, one series per allocator (and the live-data line).
pub(crate) fn fragbench_peak_panel(wls: &[String], series: Vec<Series<f64>>) -> Panel {
    Panel {
        title: "peak memory".into(),
        x_label: "workload".into(),
        y_label: "MiB".into(),
        kind: Kind::Bars {
            categories: wls.iter().map(|w| w.replace("fragbench-", "").to_uppercase()).collect(),
            series,
            stacked: false,
        },
    }
}

/// Fig. 15a: peak mapped memory per Fragbench workload and allocator.
pub fn fig15a(rows: &[Row]) -> Option<Figure> {
    let rs = fragbench(rows);
    if rs.is_empty() {
        return None;
    }
    let (wls, _, mut series) = fragbench_peaks(&rs);
    let mut table = Table::new(&["workload", "allocator", "peak mapped (MiB)", "peak live (MiB)", "live cap (MiB)"]);
    let mut live = vec![0.0f64; wls.len()];
    for r in &rs {
        let w = wls.iter().position(|x| *x == r.point.workload).expect("listed");
        let mapped = mib(r.num(PEAK_MAPPED).unwrap_or(0.0));
        let l = mib(r.num(PEAK_LIVE).unwrap_or(0.0));
        live[w] = live[w].max(l);
        let cap = r.num(LIVE_CAP).map(mib);
        table.push(vec![
            r.point.workload.clone(),
            alloc_label(r, &[]),
            format!("{mapped:.2}"),
            format!("{l:.2}"),
            cap.map_or("-".into(), |c| format!("{c:.2}")),
        ]);
    }
    series.push(("peak live data".into(), live));
    Some(Figure {
        id: "fig15a".into(),
        title: "Fragbench peak memory (NVAlloc Fig. 15a)".into(),
        caption: "Peak memory mapped by each allocator on Fragbench W1–W4 (native runs), beside the peak of live \
                  data: the gap is fragmentation and metadata. Slab morphing (nvalloc-log) reclaims sparse slabs."
            .into(),
        panels: vec![fragbench_peak_panel(&wls, series)],
        table,
        paper: None,
    })
}

/// The heap over time: mapped memory of each allocator and the live data, as
/// Fragbench runs (fragmentation as it develops, not only its peak).
pub fn heapshape(rows: &[Row]) -> Option<Figure> {
    let rs: Vec<&Row> = fragbench(rows).into_iter().filter(|r| !r.shape_points().is_empty()).collect();
    if rs.is_empty() {
        return None;
    }
    let wls = distinct(rs.iter().map(|r| r.point.workload.clone()));
    let mut table = Table::new(&[
        "workload",
        "allocator",
        "samples",
        "mapped at start (MiB)",
        "peak mapped (MiB)",
        "mapped at end (MiB)",
    ]);
    let panels = wls
        .iter()
        .map(|w| {
            let mut series: Vec<Series<(f64, f64)>> = Vec::new();
            for r in rs.iter().filter(|r| &r.point.workload == w) {
                let pts = r.shape_points();
                let xy = |f: Field| -> Vec<(f64, f64)> {
                    pts.iter().filter_map(|p| Some((fields::read(p, SHAPE_OPS)?, mib(fields::read(p, f)?)))).collect()
                };
                let mapped = xy(SHAPE_MAPPED);
                let peak = mapped.iter().map(|p| p.1).fold(0.0, f64::max);
                table.push(vec![
                    w.clone(),
                    alloc_label(r, &[]),
                    mapped.len().to_string(),
                    mapped.first().map_or("-".into(), |p| format!("{:.2}", p.1)),
                    format!("{peak:.2}"),
                    mapped.last().map_or("-".into(), |p| format!("{:.2}", p.1)),
                ]);
                if series.is_empty() {
                    series.push(("live data".into(), xy(SHAPE_LIVE)));
                }
                series.push((alloc_label(r, &[]), mapped));
            }
            Panel {
                title: w.replace("fragbench-", "").to_uppercase(),
                x_label: "allocator operations".into(),
                y_label: "MiB".into(),
                kind: Kind::Lines { series, log2_x: false, log10_y: false },
            }
        })
        .collect();
    Some(Figure {
        id: "heapshape".into(),
        title: "Fragbench memory over the run".into(),
        caption: "Memory mapped by each allocator as Fragbench W1–W4 run (native runs, sampled every N operations \
                  and at each phase end), beside the live data: fragmentation as it develops. Where the mapped \
                  line stays up after the delete phase, sparse slabs were kept; slab morphing lets them go."
            .into(),
        panels,
        table,
        paper: None,
    })
}

/// Fig. 15b: slabs by space utilization at the working-set point.
pub fn fig15b(rows: &[Row]) -> Option<Figure> {
    let rs: Vec<&Row> = fragbench(rows).into_iter().filter(|r| r.num(SLABS_LOW).is_some()).collect();
    if rs.is_empty() {
        return None;
    }
    let mut table = Table::new(&["workload", "allocator", "slabs 0–30 %", "slabs 30–70 %", "slabs 70–100 %"]);
    let mut panels = Vec::new();
    for alloc in distinct(rs.iter().map(|r| alloc_label(r, &[]))) {
        let mut cats = Vec::new();
        let mut v: [Vec<f64>; 3] = Default::default();
        for r in rs.iter().filter(|r| alloc_label(r, &[]) == alloc) {
            let get = |f| r.num(f).unwrap_or(0.0);
            let (lo, mid, hi) = (get(SLABS_LOW), get(SLABS_MID), get(SLABS_HIGH));
            cats.push(r.point.workload.replace("fragbench-", "").to_uppercase());
            v[0].push(lo);
            v[1].push(mid);
            v[2].push(hi);
            table.push(vec![r.point.workload.clone(), alloc.clone(), num(Some(lo)), num(Some(mid)), num(Some(hi))]);
        }
        let [lo, mid, hi] = v;
        panels.push(Panel {
            title: alloc,
            x_label: "workload".into(),
            y_label: "slabs".into(),
            kind: Kind::Bars {
                categories: cats,
                series: vec![("0–30 % used".into(), lo), ("30–70 %".into(), mid), ("70–100 %".into(), hi)],
                stacked: true,
            },
        });
    }
    Some(Figure {
        id: "fig15b".into(),
        title: "Fragbench slab utilization (NVAlloc Fig. 15b)".into(),
        caption: "Slabs by the share of their blocks in use, at each Fragbench workload's working-set point \
                  (native runs). Morphing turns low-utilization slabs back into useful space."
            .into(),
        panels,
        table,
        paper: None,
    })
}

/// Rows with a numeric allocator parameter `key`, simulated.
fn swept<'a>(rows: &'a [Row], key: &str) -> Vec<&'a Row> {
    rows.iter().filter(|r| r.point.alloc_params.contains_key(key) && r.result.sim.is_some()).collect()
}

/// Lines of `y(r)` over allocator parameter `key`, one per `series_of(r)`.
fn lines_over(
    rs: &[&Row],
    key: &str,
    series_of: impl Fn(&Row) -> String,
    y: impl Fn(&Row) -> Option<f64>,
) -> Vec<Series<(f64, f64)>> {
    let names = distinct(rs.iter().map(|r| series_of(r)));
    names
        .into_iter()
        .map(|n| {
            let pts =
                rs.iter().filter(|r| series_of(r) == n).filter_map(|r| Some((param_f64(r, key)?, y(r)?))).collect();
            (n, pts)
        })
        .collect()
}

/// Fig. 16a: estimated persist time and reflush ratio vs bit stripes, per thread count.
pub fn fig16a(rows: &[Row]) -> Option<Figure> {
    let rs: Vec<&Row> = swept(rows, "stripes").into_iter().filter(|r| !eadr(r)).collect();
    if rs.is_empty() {
        return None;
    }
    let on = workload_suffix(&rs);
    let name = |r: &Row| format!("{}{} ×{} threads", alloc_label(r, &["stripes"]), on(r), r.point.threads);
    let mut table =
        Table::new(&["allocator", "threads", "stripes", "flushes", "reflush %", "persist ns/op", "est. run time (ms)"]);
    for r in &rs {
        table.push(vec![
            format!("{}{}", alloc_label(r, &["stripes"]), on(r)),
            r.point.threads.to_string(),
            num(param_f64(r, "stripes")),
            num(r.num(FLUSHES)),
            format!("{:.2}", 100.0 * r.num(REFLUSH_RATIO).unwrap_or(0.0)),
            format!("{:.1}", estimate::persist_ns(r).unwrap_or(0.0)),
            num(r.num(EST_MAKESPAN).map(|ns| ns / 1e6)),
        ]);
    }
    let mut panels = Vec::new();
    if rs.iter().any(|r| r.num(EST_MAKESPAN).is_some()) {
        panels.push(Panel {
            title: "estimated run time, threads contending".into(),
            x_label: "bit stripes".into(),
            y_label: "ms".into(),
            kind: Kind::Lines {
                series: lines_over(&rs, "stripes", name, |r| r.num(EST_MAKESPAN).map(|ns| ns / 1e6)),
                log2_x: true,
                log10_y: false,
            },
        });
    }
    panels.push(stripes_time_panel(&rs, name));
    panels.push(Panel {
        title: "reflush ratio".into(),
        x_label: "bit stripes".into(),
        y_label: "reflushes / flushes (%)".into(),
        kind: Kind::Lines {
            series: lines_over(&rs, "stripes", name, |r| r.num(REFLUSH_RATIO).map(|x| 100.0 * x)),
            log2_x: true,
            log10_y: false,
        },
    });
    Some(Figure {
        id: "fig16a".into(),
        title: "Bit stripes: estimated time and reflush ratio (NVAlloc Fig. 16a)".into(),
        caption: "Estimated run time (the contention model: each thread's clock advanced by its events' costs, \
                  the threads sharing the DIMMs' queues, XPBuffers and media) where simulated with it, estimated \
                  persist time per operation (the sum of per-flush costs, threads not contending) and reflush \
                  ratio as the slab bitmaps' stripe count grows from 1 to 32, for several thread counts \
                  (Threadtest, simulated)."
            .into(),
        panels,
        table,
        paper: None,
    })
}

/// Estimated persist time per operation over bit stripes (Fig. 16a, 19).
fn stripes_time_panel(rs: &[&Row], name: impl Fn(&Row) -> String) -> Panel {
    Panel {
        title: "estimated persist time".into(),
        x_label: "bit stripes".into(),
        y_label: "ns per operation".into(),
        kind: Kind::Lines {
            series: lines_over(rs, "stripes", name, estimate::persist_ns),
            log2_x: true,
            log10_y: false,
        },
    }
}

pub(crate) fn eadr(r: &Row) -> bool {
    r.result.sim.as_ref().and_then(|s| s.get("eadr")).and_then(Value::as_bool) == Some(true)
}

/// Fig. 16b: peak memory and time vs the SU threshold of slab morphing.
pub fn fig16b(rows: &[Row]) -> Option<Figure> {
    let rs: Vec<&Row> = rows.iter().filter(|r| r.point.alloc_params.contains_key("su")).collect();
    if rs.is_empty() {
        return None;
    }
    let name = |r: &Row| r.point.workload.clone();
    let mut table =
        Table::new(&["workload", "allocator", "su", "peak mapped (MiB)", "native run (ms)", "est. persist (ms)"]);
    for r in &rs {
        table.push(vec![
            r.point.workload.clone(),
            alloc_label(r, &["su"]),
            num(param_f64(r, "su")),
            num(r.num(PEAK_MAPPED).map(mib)),
            num(r.num(ELAPSED_S).map(|s| s * 1e3)),
            num(r.num(PERSIST_TOTAL).map(|n| n / 1e6)),
        ]);
    }
    let mut time = lines_over(&rs, "su", |r| format!("{} native run", name(r)), |r| r.num(ELAPSED_S).map(|s| s * 1e3));
    time.extend(lines_over(
        &rs,
        "su",
        |r| format!("{} est. persist", name(r)),
        |r| r.num(PERSIST_TOTAL).map(|n| n / 1e6),
    ));
    time.retain(|s| !s.1.is_empty());
    Some(Figure {
        id: "fig16b".into(),
        title: "Slab morphing: memory and time vs SU (NVAlloc Fig. 16b)".into(),
        caption: "Peak mapped memory (native run) and time — native wall time of the run and the simulator's \
                  estimated persist time — as the space-utilization threshold below which slabs morph moves \
                  from 5 % to 50 %. W4 is the paper's workload for it. W3's memory can rise again past SU 30 %: \
                  its Before phase fills two size classes (128 B and 192 B) at once, and a threshold that high \
                  lets each morph partly used slabs of the other; a morphed slab keeps its live blocks (they pin \
                  the new class's blocks over them) and cannot morph again while one lives, so the Before phase \
                  ends with more slabs and the After phase finds fewer to morph (README, Fig. 16b)."
            .into(),
        panels: vec![
            Panel {
                title: "peak memory".into(),
                x_label: "SU threshold".into(),
                y_label: "peak mapped (MiB)".into(),
                kind: Kind::Lines {
                    series: lines_over(&rs, "su", name, |r| r.num(PEAK_MAPPED).map(mib)),
                    log2_x: false,
                    log10_y: false,
                },
            },
            Panel {
                title: "time".into(),
                x_label: "SU threshold".into(),
                y_label: "ms".into(),
                kind: Kind::Lines { series: time, log2_x: false, log10_y: false },
            },
        ],
        table,
        paper: None,
    })
}

/// Fig. 19: bit stripes with caches in the persistence domain (eADR) vs ADR.
pub fn fig19(rows: &[Row]) -> Option<Figure> {
    let rs: Vec<&Row> = swept(rows, "stripes").into_iter().filter(|r| r.point.sim.contains_key("eadr")).collect();
    if rs.is_empty() {
        return None;
    }
    let domain = |r: &Row| if eadr(r) { "eADR" } else { "ADR" };
    let on = workload_suffix(&rs);
    let name =
        |r: &Row| format!("{}{} {} ×{} threads", alloc_label(r, &["stripes"]), on(r), domain(r), r.point.threads);
    let pm_per_op = |r: &Row| {
        let ops = r.num(SIM_OPS).filter(|&o| o > 0.0)?;
        Some(r.num(PM_WRITES)? / ops)
    };
    let mut table =
        Table::new(&["allocator", "persistence", "threads", "stripes", "persist ns/op", "PM writes/op", "evictions"]);
    for r in &rs {
        table.push(vec![
            format!("{}{}", alloc_label(r, &["stripes"]), on(r)),
            domain(r).into(),
            r.point.threads.to_string(),
            num(param_f64(r, "stripes")),
            format!("{:.1}", estimate::persist_ns(r).unwrap_or(0.0)),
            format!("{:.3}", pm_per_op(r).unwrap_or(0.0)),
            num(r.num(EVICTIONS)),
        ]);
    }
    Some(Figure {
        id: "fig19".into(),
        title: "Bit stripes under eADR (NVAlloc Fig. 19)".into(),
        caption: "With eADR the caches are persistent: flushes cost nothing and only evictions reach PM, so \
                  striping bitmaps matters far less than under ADR (estimated persist time and PM writes per \
                  operation, Threadtest, simulated)."
            .into(),
        panels: vec![
            stripes_time_panel(&rs, name),
            Panel {
                title: "writes reaching PM".into(),
                x_label: "bit stripes".into(),
                y_label: "64 B PM writes per operation".into(),
                kind: Kind::Lines { series: lines_over(&rs, "stripes", name, pm_per_op), log2_x: true, log10_y: false },
            },
        ],
        table,
        paper: None,
    })
}

/// Every allocator side by side: reflush ratio, write amplification,
/// estimated persist time and native throughput, one bar per workload.
pub fn compare(rows: &[Row]) -> Option<Figure> {
    if rows.is_empty() {
        return None;
    }
    let allocs = distinct(rows.iter().map(|r| alloc_label(r, &[])));
    let wls = distinct(rows.iter().map(|r| r.point.workload.clone()));
    let mut table = Table::new(&[
        "allocator",
        "workload",
        "threads",
        "reflush ratio",
        "write amplification",
        "persist ns/op",
        "CPU ns/op",
        "est. Mops/s (CPU + persist)",
        "CPU-only Mops/s",
        "persist-only Mops/s",
        "native Mops/s (DRAM, wall time)",
        "native Mops/s (DRAM, per CPU second)",
        "est. / native",
        "note",
    ]);
    let metric = |f: &dyn Fn(&Row) -> Option<f64>| -> Vec<Series<f64>> {
        wls.iter()
            .map(|w| {
                let v = allocs
                    .iter()
                    .map(|a| {
                        rows.iter()
                            .filter(|r| &r.point.workload == w && alloc_label(r, &[]) == *a)
                            .find_map(f)
                            .unwrap_or(0.0)
                    })
                    .collect();
                (w.clone(), v)
            })
            .collect()
    };
    let mops = |x: Option<f64>| x.map(|v| v / 1e6);
    for r in rows {
        let est = estimate::ops_per_s(r);
        let native = r.num(OPS_PER_CPU_S);
        let ratio = match (est, native) {
            (Some(e), Some(n)) if n > 0.0 => format!("{:.2}", e / n),
            _ => "-".into(),
        };
        let note = match (&r.result.sim_skipped, &r.env.cpu_skipped) {
            (Some(_), _) => "not traced by pmsim's tracer".to_string(),
            (None, Some(why)) => format!("no CPU profile: {why}"),
            _ => String::new(),
        };
        table.push(vec![
            alloc_label(r, &[]),
            r.point.workload.clone(),
            r.point.threads.to_string(),
            num(r.num(REFLUSH_RATIO)),
            num(r.num(WRITE_AMPLIFICATION)),
            num(estimate::persist_ns(r)),
            num(estimate::cpu_ns(r)),
            num(mops(est)),
            num(mops(estimate::cpu_only_ops_per_s(r))),
            num(mops(estimate::persist_only_ops_per_s(r))),
            num(mops(r.num(OPS_PER_S))),
            num(mops(native)),
            ratio,
            note,
        ]);
    }
    let bars = |title: &str, y: &str, series| Panel {
        title: title.into(),
        x_label: "allocator".into(),
        y_label: y.into(),
        kind: Kind::Bars { categories: allocs.clone(), series, stacked: false },
    };
    Some(Figure {
        id: "compare".into(),
        title: "Every allocator compared".into(),
        caption: "Reflush ratio, write amplification (media bytes / bytes written to the DIMMs) and estimated \
                  persist time per operation from the simulator; the CPU's work per operation (measured natively \
                  with flushes off); the estimated throughput on Optane, CPU work plus persistence (one thread: \
                  their sum per operation), beside the CPU alone, persistence alone and the native throughput on \
                  DRAM with real flushes, all measured in this run: by wall time, and per CPU second of its \
                  threads (what it achieves with a core of its own, however loaded the machine was; the \
                  estimate is held against this one)."
            .into(),
        panels: vec![
            bars("reflush ratio", "reflushes / flushes", metric(&|r| r.num(REFLUSH_RATIO))),
            bars("write amplification", "media / DIMM bytes", metric(&|r| r.num(WRITE_AMPLIFICATION))),
            bars("estimated persist time", "ns per operation", metric(&estimate::persist_ns)),
            bars("estimated throughput (CPU + persist)", "Mops/s", metric(&|r| mops(estimate::ops_per_s(r)))),
            bars("native throughput (DRAM, per CPU second)", "Mops/s", metric(&|r| mops(r.num(OPS_PER_CPU_S)))),
        ],
        table,
        paper: None,
    })
}

/// Code sites listed per allocator in [`sites`].
pub const TOP_SITES: usize = 5;

/// The costliest code sites of every allocator beside the comparison: for
/// each simulated point whose trace names sites (pmsim's tracer, the
/// Valgrind tool), its [`TOP_SITES`] sites by estimated persist time with
/// their flushes and reflush ratio, from the simulator's per-site table in
/// the row (`pmsim sim --by site`); the bars stack those sites' persist time
/// per operation, the rest of the sites above them.
pub fn sites(rows: &[Row]) -> Option<Figure> {
    let rs: Vec<&Row> = sim_rows(rows).into_iter().filter(|r| !r.sites().is_empty()).collect();
    if rs.is_empty() {
        return None;
    }
    let mut table = Table::new(&[
        "allocator",
        "workload",
        "threads",
        "rank",
        "site",
        "flushes",
        "reflush ratio",
        "persist ns/op",
        "share of sites' persist time %",
    ]);
    let get = |s: &Value, f| fields::read(s, f).unwrap_or(0.0);
    let mut panels = Vec::new();
    for wl in distinct(rs.iter().map(|r| r.point.workload.clone())) {
        let mut cats = Vec::new();
        let mut vals = vec![Vec::new(); TOP_SITES + 1];
        for r in rs.iter().filter(|r| r.point.workload == wl) {
            let ops = r.num(SIM_OPS).filter(|&o| o > 0.0).unwrap_or(1.0);
            let mut by_cost: Vec<&Value> = r.sites().iter().collect();
            by_cost.sort_by(|a, b| {
                get(b, SITE_PERSIST)
                    .total_cmp(&get(a, SITE_PERSIST))
                    .then(get(b, SITE_FLUSHES).total_cmp(&get(a, SITE_FLUSHES)))
            });
            let total: f64 = by_cost.iter().map(|s| get(s, SITE_PERSIST)).sum();
            cats.push(alloc_label(r, &[]));
            for (k, v) in vals.iter_mut().enumerate().take(TOP_SITES) {
                v.push(by_cost.get(k).map_or(0.0, |s| get(s, SITE_PERSIST) / ops));
            }
            let rest: f64 = by_cost.iter().skip(TOP_SITES).map(|s| get(s, SITE_PERSIST)).sum();
            vals[TOP_SITES].push(rest / ops);
            for (k, s) in by_cost.iter().take(TOP_SITES).enumerate() {
                let share = if total > 0.0 { 100.0 * get(s, SITE_PERSIST) / total } else { 0.0 };
                table.push(vec![
                    alloc_label(r, &[]),
                    wl.clone(),
                    r.point.threads.to_string(),
                    (k + 1).to_string(),
                    s.get(SITE_NAME).and_then(Value::as_str).unwrap_or("").to_string(),
                    num(fields::read(s, SITE_FLUSHES)),
                    num(fields::read(s, SITE_REFLUSH_RATIO)),
                    format!("{:.1}", get(s, SITE_PERSIST) / ops),
                    format!("{share:.1}"),
                ]);
            }
        }
        let names = (1..=TOP_SITES).map(|k| format!("site {k}")).chain(["other sites".to_string()]);
        let series: Vec<Series<f64>> = names.zip(vals).filter(|(_, v)| v.iter().any(|&x| x > 0.0)).collect();
        panels.push(persist_time_bars(wl, cats, series));
    }
    Some(Figure {
        id: "sites".into(),
        title: format!("The {TOP_SITES} costliest code sites of every allocator"),
        caption: format!(
            "Per allocator and workload, the {TOP_SITES} code sites (the source line or function that issued \
             the flushes and fences, as the trace names it) with the most estimated persist time, with their \
             flushes and reflush ratio (the simulator's per-site table, `pmsim sim --by site`); the bars stack \
             their persist time per operation, site 1 lowest, the other sites on top. Points whose trace names \
             no sites are left out."
        ),
        panels,
        table,
        paper: None,
    })
}
