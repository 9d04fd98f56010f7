//! Drawing figures with plotters, as SVG and PNG from one description. A
//! [`Figure`] is data only (panels of bars, lines or points, with axis
//! labels); [`render`] draws it. Text needs a font in PNGs: pmsim loads one
//! font file explicitly (DejaVu Sans from Debian's `fonts-dejavu-core`, or
//! `PMSIM_FONT`) rather than asking the system, so figures look the same on
//! every machine.

use crate::table::Table;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The font pmsim draws with.
pub const DEFAULT_FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
const FAMILY: &str = "sans-serif";

/// One figure: panels side by side (two per row), the table behind it and a caption.
#[derive(Clone, Debug)]
pub struct Figure {
    /// File stem: `fig16a` → `fig16a.svg`, `fig16a.png`.
    pub id: String,
    pub title: String,
    /// What the figure shows and how it was measured (under the image in reports).
    pub caption: String,
    pub panels: Vec<Panel>,
    /// The numbers drawn.
    pub table: Table,
    /// What the paper reports beside pmsim's values ([`crate::paper`]),
    /// filled in from the experiment's rows when the report is written.
    pub paper: Option<Table>,
}

#[derive(Clone, Debug)]
pub struct Panel {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub kind: Kind,
}

/// A named series of values.
pub type Series<T> = (String, Vec<T>);

#[derive(Clone, Debug)]
pub enum Kind {
    /// One group of bars per category, one bar per series (or one stacked bar).
    Bars { categories: Vec<String>, series: Vec<Series<f64>>, stacked: bool },
    /// Lines through (x, y) points; with `log2_x` x is drawn on a log2 scale.
    Lines { series: Vec<Series<(f64, f64)>>, log2_x: bool },
    /// Points only.
    Scatter { series: Vec<Series<(f64, f64)>> },
}

static FONT: OnceLock<Result<(), String>> = OnceLock::new();

/// Loads the font once (it must live as long as the process: plotters keeps it).
pub fn load_font() -> Result<(), String> {
    FONT.get_or_init(|| {
        let path = std::env::var("PMSIM_FONT").unwrap_or_else(|_| DEFAULT_FONT.to_string());
        let bytes = std::fs::read(&path).map_err(|e| {
            format!("font {path}: {e} (install Debian's fonts-dejavu-core with scripts/setup.sh, or set PMSIM_FONT)")
        })?;
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font(FAMILY, FontStyle::Normal, bytes)
            .map_err(|_| format!("font {path}: not a TrueType/OpenType font"))
    })
    .clone()
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

/// A compact number for axis ticks (`1.5M`, `250k`, `0.25`, `0.0025`).
pub fn tick(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        // Enough decimals for two significant digits.
        let d = (-a.log10()).ceil().max(1.0) as usize + 1;
        let s = format!("{v:.d$}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Writes `DIR/<id>.svg` and `DIR/<id>.png`; returns both paths.
pub fn render(fig: &Figure, dir: &Path) -> Result<Vec<PathBuf>, String> {
    load_font()?;
    let cols = fig.panels.len().clamp(1, 2);
    let rows = fig.panels.len().div_ceil(cols).max(1);
    let size = (if cols == 1 { 900 } else { 1400 }, 60 + 440 * rows as u32);
    let svg = dir.join(format!("{}.svg", fig.id));
    let png = dir.join(format!("{}.png", fig.id));
    let err = |p: &Path, e: String| format!("{}: {e}", p.display());
    draw(SVGBackend::new(&svg, size).into_drawing_area(), fig, (rows, cols)).map_err(|e| err(&svg, e))?;
    draw(BitMapBackend::new(&png, size).into_drawing_area(), fig, (rows, cols)).map_err(|e| err(&png, e))?;
    Ok(vec![svg, png])
}

fn e<E: std::fmt::Debug>(x: E) -> String {
    format!("{x:?}")
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, fig: &Figure, grid: (usize, usize)) -> Result<(), String> {
    root.fill(&WHITE).map_err(e)?;
    let body = root.titled(&fig.title, (FAMILY, 24)).map_err(e)?;
    let areas = body.split_evenly(grid);
    for (area, panel) in areas.iter().zip(&fig.panels) {
        draw_panel(area, panel)?;
    }
    root.present().map_err(e)
}

/// y range with headroom for the legend.
fn y_range(max: f64) -> std::ops::Range<f64> {
    let m = if max.is_finite() && max > 0.0 { max } else { 1.0 };
    0.0..m * 1.4
}

fn draw_panel<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, p: &Panel) -> Result<(), String> {
    let mut b = ChartBuilder::on(area);
    b.caption(&p.title, (FAMILY, 17)).margin(12).x_label_area_size(55).y_label_area_size(75);
    match &p.kind {
        Kind::Bars { categories, series, stacked } => {
            let n = categories.len().max(1);
            let max = (0..n)
                .map(|i| {
                    let vals = series.iter().map(|(_, v)| v.get(i).copied().unwrap_or(0.0));
                    if *stacked {
                        vals.sum::<f64>()
                    } else {
                        vals.fold(0.0, f64::max)
                    }
                })
                .fold(0.0, f64::max);
            let mut chart = b.build_cartesian_2d(-0.5..(n as f64 - 0.5), y_range(max)).map_err(e)?;
            let cats = categories.clone();
            let fmt = move |x: &f64| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    cats.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            };
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(n)
                .x_label_formatter(&fmt)
                .y_label_formatter(&|y| tick(*y))
                .x_desc(&p.x_label)
                .y_desc(&p.y_label)
                .label_style((FAMILY, 13))
                .axis_desc_style((FAMILY, 15))
                .draw()
                .map_err(e)?;
            let s = series.len().max(1) as f64;
            let mut base = vec![0.0; n];
            for (k, (name, vals)) in series.iter().enumerate() {
                let c = color(k);
                let rects: Vec<Rectangle<(f64, f64)>> = (0..n)
                    .map(|i| {
                        let v = vals.get(i).copied().unwrap_or(0.0);
                        let (x0, x1, y0) = if *stacked {
                            (i as f64 - 0.35, i as f64 + 0.35, base[i])
                        } else {
                            let w = 0.8 / s;
                            let x0 = i as f64 - 0.4 + k as f64 * w;
                            (x0, x0 + w * 0.92, 0.0)
                        };
                        if *stacked {
                            base[i] += v;
                        }
                        Rectangle::new([(x0, y0), (x1, y0 + v)], c.filled())
                    })
                    .collect();
                chart
                    .draw_series(rects)
                    .map_err(e)?
                    .label(name.clone())
                    .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], c.filled()));
            }
            legend(&mut chart)
        }
        Kind::Lines { series, log2_x } => draw_xy(b, p, series, *log2_x, true),
        Kind::Scatter { series } => draw_xy(b, p, series, false, false),
    }
}

fn draw_xy<DB: DrawingBackend>(
    mut b: ChartBuilder<'_, '_, DB>,
    p: &Panel,
    series: &[Series<(f64, f64)>],
    log2: bool,
    lines: bool,
) -> Result<(), String> {
    let tx = |x: f64| if log2 { x.max(f64::MIN_POSITIVE).log2() } else { x };
    let pts = series.iter().flat_map(|(_, v)| v.iter().map(|&(x, y)| (tx(x), y)));
    let (mut x0, mut x1, mut ymax) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for (x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        ymax = ymax.max(y);
    }
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    let pad = if log2 {
        0.25
    } else if x1 > x0 {
        (x1 - x0) * 0.08
    } else {
        x0.abs().max(1.0) * 0.1
    };
    let mut chart = b.build_cartesian_2d((x0 - pad)..(x1 + pad), y_range(ymax)).map_err(e)?;
    let xfmt = move |x: &f64| {
        if log2 {
            if (x - x.round()).abs() < 1e-6 {
                tick(2f64.powf(x.round()))
            } else {
                String::new()
            }
        } else {
            tick(*x)
        }
    };
    let mut mesh = chart.configure_mesh();
    if log2 {
        mesh.x_labels(((x1 - x0).round() as usize + 1).max(2));
    }
    mesh.x_label_formatter(&xfmt)
        .y_label_formatter(&|y| tick(*y))
        .x_desc(&p.x_label)
        .y_desc(&p.y_label)
        .label_style((FAMILY, 13))
        .axis_desc_style((FAMILY, 15))
        .draw()
        .map_err(e)?;
    for (k, (name, vals)) in series.iter().enumerate() {
        let c = color(k);
        let v: Vec<(f64, f64)> = vals.iter().map(|&(x, y)| (tx(x), y)).collect();
        let anno = if lines {
            chart.draw_series(LineSeries::new(v.clone(), c.stroke_width(2))).map_err(e)?;
            chart.draw_series(v.iter().map(|&q| Circle::new(q, 4, c.filled()))).map_err(e)?
        } else {
            chart.draw_series(v.iter().map(|&q| Circle::new(q, 2, c.filled()))).map_err(e)?
        };
        anno.label(name.clone()).legend(move |(x, y)| Circle::new((x + 7, y), 5, c.filled()));
    }
    legend(&mut chart)
}

type Coords = Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>;

fn legend<'a, DB: DrawingBackend + 'a>(chart: &mut ChartContext<'a, DB, Coords>) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FAMILY, 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(e)
}
