//! What the NVAlloc paper (ASPLOS '22) reports, beside what pmsim measures
//! from the same rows: each figure that has a published number gets a
//! small table — the claim, where the paper makes it, the paper's value,
//! pmsim's and the difference — so a reader sees at a glance where pmsim
//! agrees and where it does not. pmsim's value is `-` when the rows lack
//! what the claim needs (another experiment, an allocator not run). Where
//! the paper states only a direction (Fig. 16a's reflushes, Fig. 16b's
//! memory), the table says so and whether pmsim's change agrees.

use crate::fields::*;
use crate::row::Row;
use crate::table::Table;

/// What the paper published, and so how pmsim's value is compared with it.
#[derive(Clone, Copy)]
enum Published {
    /// A percentage: the difference in percentage points.
    Percent(f64),
    /// A factor (×): the difference as pmsim / paper.
    Factor(f64),
    /// A stripe count: the difference in stripes.
    Stripes(u32),
    /// Only a direction (the text says the quantity falls, with no number):
    /// pmsim's change in percent, which agrees when it is negative.
    Falls,
}

/// One published number and how pmsim's rows give the same quantity.
struct Claim {
    /// The figures whose tables show it (ids of [`crate::figures::FIGURES`]).
    figures: &'static [&'static str],
    what: &'static str,
    /// The paper's figure and section.
    source: &'static str,
    paper: Published,
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

/// Percent change from `x` to `y`.
fn pct(x: f64, y: f64) -> Option<f64> {
    (x > 0.0).then(|| 100.0 * (y / x - 1.0))
}

fn is_eadr(r: &Row) -> bool {
    r.point.sim.get("eadr").and_then(serde_json::Value::as_bool) == Some(true)
}

/// Rows of `alloc` on `workload` that sweep allocator parameter `key` (and
/// no other), with the value, ordered by it.
fn over<'a>(rs: &'a [Row], alloc: &str, workload: &str, key: &str) -> Vec<(f64, &'a Row)> {
    let mut v: Vec<(f64, &Row)> = rs
        .iter()
        .filter(|r| r.point.alloc == alloc && r.point.workload == workload)
        .filter(|r| r.point.alloc_params.len() == 1)
        .filter_map(|r| Some((r.point.alloc_params.get(key)?.as_f64()?, r)))
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
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

/// Fig. 16a's choice: at each thread count, the stripe count with nvalloc-log's
/// lowest estimated run time (ADR); the one that wins at most thread counts
/// (the smaller on a tie).
fn best_stripes(rs: &[Row]) -> Option<f64> {
    let pts: Vec<(f64, &Row)> =
        over(rs, "nvalloc-log", "threadtest", "stripes").into_iter().filter(|(_, r)| !is_eadr(r)).collect();
    let mut wins: Vec<(f64, usize)> = Vec::new();
    let mut threads: Vec<u32> = pts.iter().map(|(_, r)| r.point.threads).collect();
    threads.sort_unstable();
    threads.dedup();
    for t in threads {
        let best = pts
            .iter()
            .filter(|(_, r)| r.point.threads == t)
            .filter_map(|(s, r)| Some((*s, r.num(EST_MAKESPAN)?)))
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.total_cmp(&b.0)))?;
        match wins.iter_mut().find(|w| w.0 == best.0) {
            Some(w) => w.1 += 1,
            None => wins.push((best.0, 1)),
        }
    }
    wins.into_iter().max_by(|a, b| a.1.cmp(&b.1).then(b.0.total_cmp(&a.0))).map(|w| w.0)
}

/// Change of `f` from the first to the last point of `pts`, in percent.
fn first_to_last(pts: &[(f64, &Row)], f: Field) -> Option<f64> {
    pct(pts.first()?.1.num(f)?, pts.last()?.1.num(f)?)
}

/// The published numbers pmsim's figures can be held against.
const CLAIMS: &[Claim] = &[
    Claim {
        figures: &["fig1a", "compare"],
        what: "PMDK's reflush share on Threadtest (of all flushes, %)",
        source: "Fig. 1a, §3.1",
        paper: Published::Percent(99.7),
        measure: |rs| get(rs, "pmdk", "threadtest", REFLUSH_RATIO).map(|x| 100.0 * x),
    },
    Claim {
        figures: &["fig11"],
        what: "+interleaved vs base, metadata flush time on Threadtest (%)",
        source: "Fig. 11a, §6.2",
        paper: Published::Percent(-51.0),
        measure: |rs| change(rs, "base", "+interleaved", "threadtest", meta),
    },
    Claim {
        figures: &["fig11"],
        what: "+interleaved vs base, total on Threadtest (%)",
        source: "Fig. 11a, §6.2",
        paper: Published::Percent(-35.0),
        measure: |rs| change(rs, "base", "+interleaved", "threadtest", total),
    },
    Claim {
        figures: &["fig11"],
        what: "nvalloc-log vs +interleaved, metadata + WAL flush time on Threadtest (%)",
        source: "Fig. 11a, §6.2",
        paper: Published::Percent(-48.0),
        measure: |rs| change(rs, "+interleaved", "nvalloc-log", "threadtest", flush_time),
    },
    Claim {
        figures: &["fig11"],
        what: "+interleaved vs base, metadata flush time on Larson-small (%)",
        source: "Fig. 11b, §6.2",
        paper: Published::Percent(-14.0),
        measure: |rs| change(rs, "base", "+interleaved", "larson-small", meta),
    },
    Claim {
        figures: &["fig11"],
        what: "nvalloc-log vs base, total on Larson-small (%)",
        source: "Fig. 11b, §6.2",
        paper: Published::Percent(-31.0),
        measure: |rs| change(rs, "base", "nvalloc-log", "larson-small", total),
    },
    Claim {
        figures: &["fig15a"],
        what: "slab morphing, peak memory at most (%, best Fragbench workload)",
        source: "Fig. 15a, §6.4",
        paper: Published::Percent(-41.9),
        measure: |rs| {
            ["fragbench-w1", "fragbench-w2", "fragbench-w3", "fragbench-w4"]
                .iter()
                .filter_map(|w| change(rs, "nvalloc-log:morphing=false", "nvalloc-log", w, |r| r.num(PEAK_MAPPED)))
                .reduce(f64::min)
        },
    },
    Claim {
        figures: &["fig16a"],
        what: "nvalloc-log's best stripe count (lowest estimated run time at most thread counts)",
        source: "Fig. 16a, §6.5 (Threadtest; the paper picks 6)",
        paper: Published::Stripes(6),
        measure: best_stripes,
    },
    Claim {
        figures: &["fig16a"],
        what: "nvalloc-log's reflush ratio from 1 to 6 stripes, one thread (%)",
        source: "Fig. 16a, §6.5 (text: more stripes, fewer reflushes)",
        paper: Published::Falls,
        measure: |rs| {
            let one: Vec<(f64, &Row)> = over(rs, "nvalloc-log", "threadtest", "stripes")
                .into_iter()
                .filter(|(s, r)| r.point.threads == 1 && !is_eadr(r) && (*s == 1.0 || *s == 6.0))
                .collect();
            (one.len() == 2).then(|| first_to_last(&one, REFLUSH_RATIO)).flatten()
        },
    },
    Claim {
        figures: &["fig16b"],
        what: "W4 peak memory from the lowest to the highest SU (%)",
        source: "Fig. 16b, §6.5 (text: a larger SU decreases memory consumption)",
        paper: Published::Falls,
        measure: |rs| first_to_last(&over(rs, "nvalloc-log", "fragbench-w4", "su"), PEAK_MAPPED),
    },
    Claim {
        figures: &["fig19"],
        what: "spread of nvalloc-log's persist time over 1-32 stripes under eADR (max / min - 1, %)",
        source: "Fig. 19, §6.7 (text: 'no impact'; Threadtest, 4 threads)",
        paper: Published::Percent(0.0),
        measure: |rs| {
            let t: Vec<f64> = over(rs, "nvalloc-log", "threadtest", "stripes")
                .into_iter()
                .filter(|(_, r)| is_eadr(r))
                .filter_map(|(_, r)| r.num(PERSIST_TOTAL))
                .collect();
            let lo = t.iter().copied().reduce(f64::min)?;
            pct(lo, t.iter().copied().fold(lo, f64::max))
        },
    },
    Claim {
        figures: &["compare"],
        what: "nvalloc-log faster than PMDK on Threadtest (×, pmsim: estimated persist time per op)",
        source: "Fig. 9, §6.2 (up to, 4 benchmarks)",
        paper: Published::Factor(6.4),
        measure: |rs| {
            let (p, n) =
                (get(rs, "pmdk", "threadtest", PERSIST_PER_OP)?, get(rs, "nvalloc-log", "threadtest", PERSIST_PER_OP)?);
            (n > 0.0).then(|| p / n)
        },
    },
    Claim {
        figures: &["compare"],
        what: "nvalloc-log faster than PMDK on Threadtest (×, pmsim: native ops/s)",
        source: "Fig. 9, §6.2 (up to, 4 benchmarks)",
        paper: Published::Factor(6.4),
        measure: |rs| {
            let (p, n) = (get(rs, "pmdk", "threadtest", OPS_PER_S)?, get(rs, "nvalloc-log", "threadtest", OPS_PER_S)?);
            (p > 0.0).then(|| n / p)
        },
    },
    Claim {
        figures: &["scaling-threadtest"],
        what: "nvalloc-log faster than PMDK on Threadtest, at most over the thread counts (×, estimated ops/s)",
        source: "Fig. 9, §6.2 (up to, 4 benchmarks)",
        paper: Published::Factor(6.4),
        measure: |rs| {
            let at = |a: &str, t: u32| {
                rs.iter()
                    .find(|r| r.point.alloc == a && r.point.workload == "threadtest" && r.point.threads == t)
                    .and_then(|r| r.num(EST_OPS_PER_S))
            };
            rs.iter()
                .filter(|r| r.point.alloc == "nvalloc-log" && r.point.workload == "threadtest")
                .filter_map(|r| Some(r.num(EST_OPS_PER_S)? / at("pmdk", r.point.threads).filter(|&p| p > 0.0)?))
                .reduce(f64::max)
        },
    },
];

/// `x`, or 0 where it prints as zero at one decimal: a reduction of
/// −0.04 % is shown as 0.0 %, not "−0.0 %".
fn no_negative_zero(x: f64) -> f64 {
    if (x * 10.0).round() == 0.0 {
        0.0
    } else {
        x
    }
}

/// The paper's numbers for figure `id` beside pmsim's, if the paper gives any.
pub fn table(id: &str, rows: &[Row]) -> Option<Table> {
    let claims: Vec<&Claim> = CLAIMS.iter().filter(|c| c.figures.contains(&id)).collect();
    if claims.is_empty() {
        return None;
    }
    let mut t = Table::new(&["the paper reports", "where", "paper", "pmsim", "difference"]);
    for c in claims {
        let ours = (c.measure)(rows).map(no_negative_zero);
        let none = || "-".to_string();
        let (paper, pmsim, diff) = match c.paper {
            Published::Percent(p) => (
                format!("{p:.1} %"),
                ours.map_or_else(none, |x| format!("{x:.1} %")),
                ours.map_or_else(none, |x| format!("{:+.1} points", no_negative_zero(x - p))),
            ),
            Published::Factor(p) => (
                format!("{p:.1}×"),
                ours.map_or_else(none, |x| format!("{x:.2}×")),
                ours.map_or_else(none, |x| format!("{:.2} of the paper's", x / p)),
            ),
            Published::Stripes(p) => (
                format!("{p} stripes"),
                ours.map_or_else(none, |x| format!("{x} stripes")),
                ours.map_or_else(none, |x| format!("{:+} stripes", x - p as f64)),
            ),
            Published::Falls => (
                "falls (no number)".to_string(),
                ours.map_or_else(none, |x| format!("{x:+.1} %")),
                ours.map_or_else(none, |x| if x < 0.0 { "agrees: falls" } else { "disagrees: does not fall" }.into()),
            ),
        };
        t.push(vec![c.what.into(), c.source.into(), paper, pmsim, diff]);
    }
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every figure a claim names exists, and every figure the issue lists
    /// as having a published number has a claim.
    #[test]
    fn claims_name_real_figures() {
        for c in CLAIMS {
            for f in c.figures {
                assert!(crate::figures::by_id(f).is_some(), "{}: unknown figure {f}", c.what);
            }
        }
        for f in ["fig1a", "fig11", "fig15a", "fig16a", "fig16b", "fig19", "compare", "scaling-threadtest"] {
            assert!(table(f, &[]).is_some(), "{f}: no published number beside it");
        }
        assert!(table("fig2", &[]).is_none());
        let t = table("fig16b", &[]).unwrap();
        assert_eq!(t.rows[0][3], "-", "no rows, no value");
    }

    #[test]
    fn a_change_that_rounds_to_zero_prints_without_a_sign() {
        assert_eq!(format!("{:.1} %", no_negative_zero(-0.04)), "0.0 %");
        assert_eq!(format!("{:+.1}", no_negative_zero(-0.0)), "+0.0");
        assert_eq!(format!("{:.1} %", no_negative_zero(-0.06)), "-0.1 %");
    }
}
