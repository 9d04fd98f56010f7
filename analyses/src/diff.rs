//! Two sweeps compared point by point (`pmsim diff DIR_A DIR_B`): a sweep of
//! a baseline build and one of a candidate, each written by `pmsim sweep
//! --out`, and for every point both ran the change of its flushes, reflush
//! ratio, persist time and memory. Points are matched by their id, the hash
//! of every parameter ([`crate::Point::id`]), so the same experiment swept by
//! two builds pairs up point for point, and a point one sweep lacks (an
//! allocator added, a range widened) is named, not guessed at.
//!
//! The figures, the thresholds (`--fail-if`) and the change are those of
//! `pmsim diff` on two reports ([`pmsim_sim::diff`]); here a threshold holds
//! for every point, and one point crossing it fails the comparison.

use crate::fields::{Field, PEAK_LIVE, PEAK_MAPPED};
use crate::row::Row;
use crate::store::{merge, SweepDir};
use pmsim_sim::diff::{self as report_diff, cell, write_rows, DiffError, Row as Delta, Threshold};
use serde::Serialize;
use std::collections::HashMap;
use std::io::{self, Write};
use std::path::Path;

/// The native run's memory, by the name a threshold gives it: what the
/// simulator's report cannot say (peak bytes mapped by the allocator, and of
/// live data, `pmsim run`'s `peak`).
const MEMORY: [(&str, Field); 2] = [("peak_mapped_bytes", PEAK_MAPPED), ("peak_live_bytes", PEAK_LIVE)];

/// The figures compared per point, in the order printed: the simulator's
/// (named as in [`report_diff::METRICS`]) then the memory ones.
pub const POINT_FIGURES: [&str; 8] = [
    "flushes",
    "flushes_per_op",
    "reflush_ratio",
    "persist_ns",
    "persist_ns_per_op",
    "write_amplification",
    "peak_mapped_bytes",
    "peak_live_bytes",
];

/// The value of `name` in a point's row: a memory figure of its native run,
/// or a figure or path of its simulator report as [`report_diff::lookup`]
/// reads it (`reflush_ratio`, `regions/wal/flushes`, `sites/NAME/flushes`).
/// `None` where the row has no such figure (a point run natively only has
/// no simulator report; one simulated only, no memory).
pub fn lookup(row: &Row, name: &str) -> Option<f64> {
    match MEMORY.iter().find(|(n, _)| *n == name) {
        Some((_, f)) => row.num(*f),
        None => report_diff::lookup(row.result.sim.as_ref()?, name),
    }
}

/// A point of one sweep only.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Unmatched {
    pub id: String,
    pub label: String,
}

/// One point both sweeps ran, and its figures.
#[derive(Clone, Debug, Serialize)]
pub struct PointDiff {
    pub id: String,
    pub label: String,
    /// [`POINT_FIGURES`], each with its change (`-` where a side lacks it).
    pub figures: Vec<Delta>,
}

impl PointDiff {
    /// Whether some figure differs (or one side lacks it).
    pub fn changed(&self) -> bool {
        self.figures.iter().any(|r| r.delta != Some(0.0) && (r.a.is_some() || r.b.is_some()))
    }
}

/// A threshold's verdict on one point.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PointVerdict {
    pub threshold: Threshold,
    pub id: String,
    pub label: String,
    pub a: f64,
    pub b: f64,
    pub crossed: bool,
}

/// Everything `pmsim diff DIR_A DIR_B` prints.
#[derive(Clone, Debug, Serialize)]
pub struct SweepComparison {
    pub a: String,
    pub b: String,
    /// The experiments' names (the sweeps may come from different ones).
    pub experiment_a: String,
    pub experiment_b: String,
    /// The points both ran, in `a`'s order.
    pub points: Vec<PointDiff>,
    pub only_in_a: Vec<Unmatched>,
    pub only_in_b: Vec<Unmatched>,
    /// Every threshold on every point both have its figure for.
    pub verdicts: Vec<PointVerdict>,
}

impl SweepComparison {
    /// Compares the rows of `b` against those of `a` point by point and
    /// evaluates every threshold on every common point that has its figure
    /// on both sides. Errors: no point in common (two different
    /// experiments), or a threshold whose figure no common point has.
    pub fn new(
        (a_name, exp_a, a): (&str, &str, &[Row]),
        (b_name, exp_b, b): (&str, &str, &[Row]),
        thresholds: &[Threshold],
    ) -> Result<SweepComparison, DiffError> {
        let by_id: HashMap<&str, &Row> = b.iter().map(|r| (r.id.as_str(), r)).collect();
        let in_a: HashMap<&str, &Row> = a.iter().map(|r| (r.id.as_str(), r)).collect();
        let unmatched = |r: &Row| Unmatched { id: r.id.clone(), label: r.point.label() };
        let only_in_a = a.iter().filter(|r| !by_id.contains_key(r.id.as_str())).map(unmatched).collect();
        let only_in_b: Vec<Unmatched> = b.iter().filter(|r| !in_a.contains_key(r.id.as_str())).map(unmatched).collect();
        let pairs: Vec<(&Row, &Row)> = a.iter().filter_map(|ra| Some((ra, *by_id.get(ra.id.as_str())?))).collect();
        if pairs.is_empty() {
            return Err(DiffError(format!(
                "{a_name} ({} points of '{exp_a}') and {b_name} ({} points of '{exp_b}') have no point in common: \
                 points pair up by their parameters (allocator, workload, threads, scale, seed, mode, sim keys)",
                a.len(),
                b.len()
            )));
        }
        let points = pairs
            .iter()
            .map(|(ra, rb)| PointDiff {
                id: ra.id.clone(),
                label: ra.point.label(),
                figures: POINT_FIGURES
                    .iter()
                    .map(|f| Delta::new(f.to_string(), lookup(ra, f), lookup(rb, f)))
                    .collect(),
            })
            .collect();
        let mut verdicts = Vec::new();
        for t in thresholds {
            let before = verdicts.len();
            for (ra, rb) in &pairs {
                if let (Some(va), Some(vb)) = (lookup(ra, &t.metric), lookup(rb, &t.metric)) {
                    verdicts.push(PointVerdict {
                        threshold: t.clone(),
                        id: ra.id.clone(),
                        label: ra.point.label(),
                        a: va,
                        b: vb,
                        crossed: t.crossed(va, vb),
                    });
                }
            }
            if verdicts.len() == before {
                return Err(DiffError(format!(
                    "--fail-if {}: no point of both sweeps has the figure {:?} (a figure of `pmsim diff` on \
                     reports, a path into a point's simulator report, or {})",
                    t.text,
                    t.metric,
                    MEMORY.map(|m| m.0).join(", ")
                )));
            }
        }
        Ok(SweepComparison {
            a: a_name.to_string(),
            b: b_name.to_string(),
            experiment_a: exp_a.to_string(),
            experiment_b: exp_b.to_string(),
            points,
            only_in_a,
            only_in_b,
            verdicts,
        })
    }

    /// The thresholds crossed, a verdict per point.
    pub fn failures(&self) -> impl Iterator<Item = &PointVerdict> {
        self.verdicts.iter().filter(|v| v.crossed)
    }
}

/// The rows of a complete sweep directory and its experiment's name (what
/// `pmsim sweep merge` checks: every point has one row with every number the
/// figures read), and warnings about torn last lines skipped.
pub fn load(dir: &Path) -> Result<(String, Vec<Row>, Vec<String>), DiffError> {
    let (resolved, rows, warnings) = merge(&SweepDir::new(dir)).map_err(DiffError)?;
    Ok((resolved.experiment.meta.name, rows, warnings))
}

/// The human-readable comparison: the points that changed with every figure,
/// a count of those that did not, the points of one side only, and the
/// verdicts (each threshold once if no point crossed it, else each point
/// that did).
pub fn write_text(c: &SweepComparison, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "a  {} (experiment '{}')", c.a, c.experiment_a)?;
    writeln!(out, "b  {} (experiment '{}')", c.b, c.experiment_b)?;
    let changed: Vec<&PointDiff> = c.points.iter().filter(|p| p.changed()).collect();
    let w = POINT_FIGURES.iter().map(|f| f.len()).max().unwrap_or(0);
    for p in &changed {
        writeln!(out, "\n{}  [{}]", p.label, p.id)?;
        writeln!(out, "{:<w$}  {:>14}  {:>14}  {:>9}", "figure", "a", "b", "change")?;
        write_rows(&p.figures, out)?;
    }
    writeln!(
        out,
        "\n{} points in both: {} changed, {} with every figure equal",
        c.points.len(),
        changed.len(),
        c.points.len() - changed.len()
    )?;
    for (side, only) in [("a", &c.only_in_a), ("b", &c.only_in_b)] {
        if !only.is_empty() {
            writeln!(out, "{} points only in {side}:", only.len())?;
            for u in only {
                writeln!(out, "  {}  [{}]", u.label, u.id)?;
            }
        }
    }
    let mut texts: Vec<&str> = Vec::new();
    for v in &c.verdicts {
        if !texts.contains(&v.threshold.text.as_str()) {
            texts.push(&v.threshold.text);
        }
    }
    if !texts.is_empty() {
        writeln!(out)?;
    }
    for t in texts {
        let of: Vec<&PointVerdict> = c.verdicts.iter().filter(|v| v.threshold.text == t).collect();
        let crossed: Vec<&&PointVerdict> = of.iter().filter(|v| v.crossed).collect();
        if crossed.is_empty() {
            writeln!(out, "ok    {t}  ({} points)", of.len())?;
        }
        for v in crossed {
            writeln!(out, "FAIL  {t}  {}  (a {}, b {})", v.label, cell(Some(v.a)), cell(Some(v.b)))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::point::{Mode, Point};
    use crate::row::{Env, Results};
    use serde_json::json;
    use std::collections::BTreeMap;

    /// A row of `alloc` on Threadtest with these simulated and native figures
    /// (`None`: the point ran natively only).
    fn row(alloc: &str, sim: Option<(u64, f64)>, mapped: u64) -> Row {
        let point = Point {
            mode: if sim.is_some() { Mode::Both } else { Mode::Native },
            scale: "tiny".into(),
            workload: "threadtest".into(),
            workload_params: BTreeMap::new(),
            threads: 1,
            alloc: alloc.into(),
            alloc_params: BTreeMap::new(),
            sim: BTreeMap::new(),
            seed: 42,
        };
        let sim = sim.map(|(flushes, ratio)| {
            json!({"overall": {"flushes": flushes, "reflush_ratio": ratio, "ops": 100,
                               "persist_ns": {"total": 2.0 * flushes as f64}},
                   "regions": [{"name": "wal", "flushes": flushes / 2}]})
        });
        let native = json!({"peak": {"mapped_bytes": mapped, "live_bytes": 1000}, "ops": 100});
        Row {
            index: 0,
            id: point.id(),
            point,
            result: Results { sim, native: Some(native), ..Results::default() },
            env: Env::default(),
        }
    }

    fn compare(a: &[Row], b: &[Row], ts: &[&str]) -> Result<SweepComparison, DiffError> {
        let ts: Vec<Threshold> = ts.iter().map(|t| Threshold::parse(t).unwrap()).collect();
        SweepComparison::new(("A", "x", a), ("B", "x", b), &ts)
    }

    #[test]
    fn points_pair_by_id_and_unmatched_ones_are_named() {
        let a = [row("base", Some((400, 0.5)), 4096), row("nvalloc-log", Some((300, 0.1)), 8192)];
        let b = [row("nvalloc-log", Some((330, 0.1)), 8192), row("makalu", None, 1)];
        let c = compare(&a, &b, &[]).unwrap();
        assert_eq!(c.points.len(), 1);
        let p = &c.points[0];
        assert_eq!(p.label, "nvalloc-log threadtest ×1");
        let fl = p.figures.iter().find(|r| r.metric == "flushes").unwrap();
        assert_eq!((fl.a, fl.b, fl.delta), (Some(300.0), Some(330.0), Some(30.0)));
        assert!((fl.relative.unwrap() - 0.1).abs() < 1e-12);
        let fpo = p.figures.iter().find(|r| r.metric == "flushes_per_op").unwrap();
        assert_eq!((fpo.a, fpo.b), (Some(3.0), Some(3.3)));
        let mapped = p.figures.iter().find(|r| r.metric == "peak_mapped_bytes").unwrap();
        assert_eq!(mapped.delta, Some(0.0));
        assert_eq!(c.only_in_a, [Unmatched { id: a[0].id.clone(), label: "base threadtest ×1".into() }]);
        assert_eq!(c.only_in_b.len(), 1);
        assert!(c.points[0].changed());
        let mut text = Vec::new();
        write_text(&c, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("+10.0%") && text.contains("1 points only in a:") && text.contains("makalu"), "{text}");
    }

    #[test]
    fn a_threshold_holds_per_point_and_fails_on_the_one_crossing_it() {
        let a = [row("base", Some((400, 0.50)), 4096), row("nvalloc-log", Some((300, 0.10)), 8192)];
        let b = [row("base", Some((400, 0.51)), 4096), row("nvalloc-log", Some((300, 0.13)), 9000)];
        let c = compare(&a, &b, &["reflush_ratio>+0.02"]).unwrap();
        assert_eq!(c.verdicts.len(), 2);
        let failed: Vec<&str> = c.failures().map(|v| v.label.as_str()).collect();
        assert_eq!(failed, ["nvalloc-log threadtest ×1"]);
        // Not crossed: a looser bound, or the same sweep on both sides.
        assert_eq!(compare(&a, &b, &["reflush_ratio>+0.05"]).unwrap().failures().count(), 0);
        assert_eq!(compare(&a, &a, &["reflush_ratio>+0%", "flushes>+0"]).unwrap().failures().count(), 0);
        // Memory and report paths take thresholds too.
        let c = compare(&a, &b, &["peak_mapped_bytes>+5%", "regions/wal/flushes>+0"]).unwrap();
        let failed: Vec<&str> = c.failures().map(|v| v.threshold.text.as_str()).collect();
        assert_eq!(failed, ["peak_mapped_bytes>+5%"]);
        let mut text = Vec::new();
        write_text(&c, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("FAIL  peak_mapped_bytes>+5%  nvalloc-log threadtest ×1  (a 8192, b 9000)"), "{text}");
        assert!(text.contains("ok    regions/wal/flushes>+0  (2 points)"), "{text}");
    }

    #[test]
    fn points_without_a_figure_are_skipped_and_a_figure_no_point_has_is_an_error() {
        let a = [row("base", None, 4096), row("nvalloc-log", Some((300, 0.1)), 8192)];
        let b = [row("base", None, 4096), row("nvalloc-log", Some((300, 0.1)), 8192)];
        let c = compare(&a, &b, &["reflush_ratio>+0.02"]).unwrap();
        assert_eq!(c.verdicts.len(), 1, "the native-only point has no reflush ratio");
        let e = compare(&a, &b, &["regions/log/flushes>+0"]).unwrap_err().0;
        assert!(e.contains("no point of both sweeps has the figure \"regions/log/flushes\""), "{e}");
        let e = compare(&a[..1], &b[1..], &[]).unwrap_err().0;
        assert!(e.contains("no point in common"), "{e}");
    }
}
