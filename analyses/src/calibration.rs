//! The Optane model against the published measurements it was fitted to and
//! checked against (`pmsim calibrate`), as one figure per benchmark family
//! for the report: model and published value side by side, fitted and
//! validation points told apart, every error in the table.

use crate::plot::{Figure, Kind, Panel, Series};
use crate::table::Table;
use pmsim_sim::calibrate::{Family, Op, Point, Row};

/// The rows of `pmsim calibrate` with their points parsed back.
fn parsed(rows: &[Row]) -> Vec<(Point, &Row)> {
    rows.iter().filter_map(|r| Some((r.point.parse::<Point>().ok()?, r))).collect()
}

fn op_name(op: Op) -> &'static str {
    match op {
        Op::Clwb => "store + clwb",
        Op::Ntstore => "ntstore",
    }
}

/// The table behind a family's figure: every row of it.
fn table(of: &[(Point, &Row)]) -> Table {
    let mut t = Table::new(&["point", "model", "published", "unit", "error %", "role"]);
    for (_, r) in of {
        t.push(vec![
            r.point.clone(),
            format!("{:.3}", r.model),
            r.published.map_or("-".into(), |p| format!("{p:.3}")),
            r.unit.into(),
            r.error.map_or("-".into(), |e| format!("{:.1}", 100.0 * e)),
            if r.fitted { "fitted" } else { "validation" }.into(),
        ]);
    }
    t
}

/// Model and published lines over `x` for each op among `of`.
fn lines(of: &[(Point, &Row)], x: impl Fn(&Point) -> f64) -> Vec<Series<(f64, f64)>> {
    let mut series = Vec::new();
    for op in [Op::Clwb, Op::Ntstore] {
        let mine: Vec<&(Point, &Row)> = of.iter().filter(|(p, _)| p.op == op).collect();
        if mine.is_empty() {
            continue;
        }
        let role = if mine.iter().all(|(_, r)| r.fitted) { "fitted" } else { "validation" };
        series.push((format!("{} model", op_name(op)), mine.iter().map(|(p, r)| (x(p), r.model)).collect()));
        series.push((
            format!("{} published ({role})", op_name(op)),
            mine.iter().filter_map(|(p, r)| Some((x(p), r.published?))).collect(),
        ));
    }
    series
}

/// Model and published bars side by side, one pair per point of `of`.
fn bars(of: &[(Point, &Row)], categories: Vec<String>) -> Kind {
    Kind::Bars {
        categories,
        series: vec![
            ("model".into(), of.iter().map(|(_, r)| r.model).collect()),
            ("published".into(), of.iter().map(|(_, r)| r.published.unwrap_or(0.0)).collect()),
        ],
        stacked: false,
    }
}

/// One figure per family present in `rows`.
pub fn figures(rows: &[Row]) -> Vec<Figure> {
    let all = parsed(rows);
    let family = |f: Family| -> Vec<(Point, &Row)> { all.iter().filter(|(p, _)| p.family == f).cloned().collect() };
    let mut figs = Vec::new();
    let bw = family(Family::Bandwidth);
    if !bw.is_empty() {
        let mut panels = Vec::new();
        for (dimms, access) in [(6, 256), (1, 256), (6, 64)] {
            let of: Vec<(Point, &Row)> =
                bw.iter().filter(|(p, _)| p.dimms == dimms && p.access == access).cloned().collect();
            if of.is_empty() {
                continue;
            }
            panels.push(Panel {
                title: format!("{dimms} DIMM{}, random {access} B", if dimms == 1 { "" } else { "s" }),
                x_label: "threads".into(),
                y_label: "write bandwidth (GB/s)".into(),
                kind: Kind::Lines { series: lines(&of, |p| p.threads as f64), log2_x: true, log10_y: false },
            });
        }
        figs.push(Figure {
            id: "calibration-bandwidth".into(),
            title: "Write bandwidth against threads, model and FAST '20".into(),
            caption: "Each thread writes random 256 B (or 64 B) blocks in its own region, line by line (store + \
                      clwb, or non-temporal stores), and fences after each block; GB/s of all threads from the \
                      contention model's makespan, beside FAST '20's measurement (Fig. 4; 64 B from its raw \
                      data). Six interleaved DIMMs at 256 B are fitted; one DIMM and 64 B are validation."
                .into(),
            panels,
            table: table(&bw),
            paper: None,
        });
    }
    let wa = family(Family::Wa);
    if !wa.is_empty() {
        figs.push(Figure {
            id: "calibration-wa".into(),
            title: "Write amplification against the working set, model and FAST '20".into(),
            caption: "One thread writes a working set as 128 B halves (the first half of every XPLine, then every \
                      second half), pass after pass; media bytes / bytes the memory controller wrote, beside FAST \
                      '20 Fig. 9 (fitted: the XPBuffer's size and replacement)."
                .into(),
            panels: vec![Panel {
                title: "one DIMM".into(),
                x_label: "working set (KiB)".into(),
                y_label: "write amplification".into(),
                kind: Kind::Lines { series: lines(&wa, |p| p.access as f64 / 1024.0), log2_x: true, log10_y: false },
            }],
            table: table(&wa),
            paper: None,
        });
    }
    let fence = family(Family::Fence);
    if !fence.is_empty() {
        figs.push(Figure {
            id: "calibration-fence".into(),
            title: "Bandwidth against the fence interval, model and FAST '20".into(),
            caption: "One thread writes sequentially, 64 B at a time, and fences every N bytes; one DIMM, beside \
                      FAST '20 Fig. 13 (validation: nothing was fitted to it)."
                .into(),
            panels: vec![Panel {
                title: "one DIMM, one thread".into(),
                x_label: "bytes between fences".into(),
                y_label: "write bandwidth (GB/s)".into(),
                kind: Kind::Lines { series: lines(&fence, |p| p.access as f64), log2_x: true, log10_y: false },
            }],
            table: table(&fence),
            paper: None,
        });
    }
    let lat = family(Family::Latency);
    if !lat.is_empty() {
        let cats: Vec<String> = lat.iter().map(|(p, _)| op_name(p.op).to_string()).collect();
        figs.push(Figure {
            id: "calibration-latency".into(),
            title: "Idle write latency, model and FAST '20".into(),
            caption: "One 64 B write (store + clwb, or a non-temporal store) and a fence at a time, to random \
                      lines; ns per write beside FAST '20 Fig. 2 (validation)."
                .into(),
            panels: vec![Panel {
                title: "one thread".into(),
                x_label: "write".into(),
                y_label: "ns per write + fence".into(),
                kind: bars(&lat, cats),
            }],
            table: table(&lat),
            paper: None,
        });
    }
    let reflush = family(Family::Reflush);
    if !reflush.is_empty() {
        figs.push(Figure {
            id: "calibration-reflush".into(),
            title: "Reflush latency by distance, model and NVAlloc §3.1".into(),
            caption: "A line written back and fenced, then `distance` other lines the same way, then the line \
                      again; ns for that last write + fence beside the two ends NVAlloc states (800 ns at distance \
                      0, fitted; 500 ns at 3, validation)."
                .into(),
            panels: vec![Panel {
                title: "one thread".into(),
                x_label: "reflush distance".into(),
                y_label: "ns per reflush + fence".into(),
                kind: bars(&reflush, reflush.iter().map(|(p, _)| p.distance.to_string()).collect()),
            }],
            table: table(&reflush),
            paper: None,
        });
    }
    figs
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmsim_sim::calibrate::{run_all, Size};
    use pmsim_sim::Config;

    #[test]
    fn one_figure_per_family_with_every_point_in_its_table() {
        let rows = run_all(&Config::default(), Size::Quick).unwrap();
        let figs = figures(&rows);
        let ids: Vec<&str> = figs.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "calibration-bandwidth",
                "calibration-wa",
                "calibration-fence",
                "calibration-latency",
                "calibration-reflush"
            ]
        );
        assert_eq!(figs.iter().map(|f| f.table.rows.len()).sum::<usize>(), rows.len());
        // The six-DIMM panel draws model and published lines for both ops.
        let Kind::Lines { series, .. } = &figs[0].panels[0].kind else { panic!("lines") };
        assert_eq!(series.len(), 4);
        assert!(series.iter().all(|s| s.1.len() == 8), "{series:?}");
    }
}
