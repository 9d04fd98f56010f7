//! What the NVAlloc paper (ASPLOS '22) reports, beside what pmsim measures
//! from the same rows: each figure that has a published number gets a
//! small table — the claim, where the paper makes it, the paper's value,
//! pmsim's and the difference — so a reader sees at a glance where pmsim
//! agrees and where it does not. pmsim's value is `-` when the rows lack
//! what the claim needs (another experiment, an allocator not run).

use crate::fields::*;
use crate::row::Row;
use crate::table::Table;

/// How a published number and pmsim's compare.
#[derive(Clone, Copy)]
enum Unit {
    /// A percentage: the difference in percentage points.
    Percent,
    /// A factor (×): the difference as pmsim / paper.
    Factor,
}

/// One published number and how pmsim's rows give the same quantity.
struct Claim {
    figure: &'static str,
    what: &'static str,
    /// The paper's figure and section.
    source: &'static str,
    paper: f64,
    unit: Unit,
    measure: fn(&[Row]) -> Option<f64>,
}

/// The row of allocator spec `alloc` (as written in the experiment) on `workload`.
fn row<'a>(rs: &'a [Row], alloc: &str, workload: &str) -> Option<&'a Row> {
    rs.iter().find(|r| r.point.alloc == alloc && r.point.workload == workload && r.point.alloc_params.is_empty())
}

fn get(rs: &[Row], alloc: &str, workload: &str, f: Field) -> Option<f64> {
    row(rs, alloc, workload)?.num(f)
}

/// Change of `f` from allocator `a` to `b` on `workload`, in percent.
fn change(rs: &[Row], a: &str, b: &str, workload: &str, f: fn(&Row) -> Option<f64>) -> Option<f64> {
    let (x, y) = (f(row(rs, a, workload)?)?, f(row(rs, b, workload)?)?);
    (x > 0.0).then(|| 100.0 * (y / x - 1.0))
}

fn meta(r: &Row) -> Option<f64> {
    r.num(PERSIST_META)
}

fn total(r: &Row) -> Option<f64> {
    r.num(PERSIST_TOTAL)
}

fn flush_time(r: &Row) -> Option<f64> {
    Some(r.num(PERSIST_META)? + r.num(PERSIST_WAL)?)
}

/// The published numbers pmsim's figures can be held against.
const CLAIMS: &[Claim] = &[
    Claim {
        figure: "compare",
        what: "PMDK's reflush share on Threadtest (of all flushes, %)",
        source: "Fig. 1a, §3.1",
        paper: 99.7,
        unit: Unit::Percent,
        measure: |rs| get(rs, "pmdk", "threadtest", REFLUSH_RATIO).map(|x| 100.0 * x),
    },
    Claim {
        figure: "fig11",
        what: "+interleaved vs base, metadata flush time on Threadtest (%)",
        source: "Fig. 11a, §6.2",
        paper: -51.0,
        unit: Unit::Percent,
        measure: |rs| change(rs, "base", "+interleaved", "threadtest", meta),
    },
    Claim {
        figure: "fig11",
        what: "+interleaved vs base, total on Threadtest (%)",
        source: "Fig. 11a, §6.2",
        paper: -35.0,
        unit: Unit::Percent,
        measure: |rs| change(rs, "base", "+interleaved", "threadtest", total),
    },
    Claim {
        figure: "fig11",
        what: "nvalloc-log vs +interleaved, metadata + WAL flush time on Threadtest (%)",
        source: "Fig. 11a, §6.2",
        paper: -48.0,
        unit: Unit::Percent,
        measure: |rs| change(rs, "+interleaved", "nvalloc-log", "threadtest", flush_time),
    },
    Claim {
        figure: "fig11",
        what: "+interleaved vs base, metadata flush time on Larson-small (%)",
        source: "Fig. 11b, §6.2",
        paper: -14.0,
        unit: Unit::Percent,
        measure: |rs| change(rs, "base", "+interleaved", "larson-small", meta),
    },
    Claim {
        figure: "fig11",
        what: "nvalloc-log vs base, total on Larson-small (%)",
        source: "Fig. 11b, §6.2",
        paper: -31.0,
        unit: Unit::Percent,
        measure: |rs| change(rs, "base", "nvalloc-log", "larson-small", total),
    },
    Claim {
        figure: "fig15a",
        what: "slab morphing, peak memory at most (%, best Fragbench workload)",
        source: "Fig. 15a, §6.4",
        paper: -41.9,
        unit: Unit::Percent,
        measure: |rs| {
            ["fragbench-w1", "fragbench-w2", "fragbench-w3", "fragbench-w4"]
                .iter()
                .filter_map(|w| change(rs, "nvalloc-log:morphing=false", "nvalloc-log", w, |r| r.num(PEAK_MAPPED)))
                .reduce(f64::min)
        },
    },
    Claim {
        figure: "compare",
        what: "nvalloc-log faster than PMDK on Threadtest (×, pmsim: estimated persist time per op)",
        source: "Fig. 9, §6.2 (up to, 4 benchmarks)",
        paper: 6.4,
        unit: Unit::Factor,
        measure: |rs| {
            let (p, n) =
                (get(rs, "pmdk", "threadtest", PERSIST_PER_OP)?, get(rs, "nvalloc-log", "threadtest", PERSIST_PER_OP)?);
            (n > 0.0).then(|| p / n)
        },
    },
    Claim {
        figure: "compare",
        what: "nvalloc-log faster than PMDK on Threadtest (×, pmsim: native ops/s)",
        source: "Fig. 9, §6.2 (up to, 4 benchmarks)",
        paper: 6.4,
        unit: Unit::Factor,
        measure: |rs| {
            let (p, n) = (get(rs, "pmdk", "threadtest", OPS_PER_S)?, get(rs, "nvalloc-log", "threadtest", OPS_PER_S)?);
            (p > 0.0).then(|| n / p)
        },
    },
];

/// The paper's numbers for figure `id` beside pmsim's, if the paper gives any.
pub fn table(id: &str, rows: &[Row]) -> Option<Table> {
    let claims: Vec<&Claim> = CLAIMS.iter().filter(|c| c.figure == id).collect();
    if claims.is_empty() {
        return None;
    }
    let mut t = Table::new(&["the paper reports", "where", "paper", "pmsim", "difference"]);
    for c in claims {
        let ours = (c.measure)(rows);
        let (paper, pmsim, diff) = match c.unit {
            Unit::Percent => (
                format!("{:.1} %", c.paper),
                ours.map_or("-".into(), |x| format!("{x:.1} %")),
                ours.map_or("-".into(), |x| format!("{:+.1} points", x - c.paper)),
            ),
            Unit::Factor => (
                format!("{:.1}×", c.paper),
                ours.map_or("-".into(), |x| format!("{x:.2}×")),
                ours.map_or("-".into(), |x| format!("{:.2} of the paper's", x / c.paper)),
            ),
        };
        t.push(vec![c.what.into(), c.source.into(), paper, pmsim, diff]);
    }
    Some(t)
}
