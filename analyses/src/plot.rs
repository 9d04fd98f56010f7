//! Drawing figures with plotters, as SVG and PNG from one description. A
//! [`Figure`] is data only (panels of bars, lines or points, with axis
//! labels); [`render`] draws it. Text needs a font in PNGs: pmsim loads one
//! font file explicitly (DejaVu Sans from Debian's `fonts-dejavu-core`, or
//! `PMSIM_FONT`) rather than asking the system, so figures look the same on
//! every machine.

use crate::table::Table;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor;
use pmsim_traces::output::Staged;
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
    /// Bars as [`Kind::Bars`] (side by side) on a log10 y axis, for values
    /// that span decades (non-positive values get no bar).
    LogBars { categories: Vec<String>, series: Vec<Series<f64>> },
    /// Lines through (x, y) points; with `log2_x` x is drawn on a log2
    /// scale, with `log10_y` y on a log10 scale (non-positive values are
    /// left out there).
    Lines { series: Vec<Series<(f64, f64)>>, log2_x: bool, log10_y: bool },
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

/// Colours of series that are not allocators (a figure's metrics, regions,
/// thread counts), by their position.
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

/// The shape drawn at a line's points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    Circle,
    Square,
    Triangle,
    Diamond,
    Cross,
    Star,
}

/// How a series is drawn: its colour, marker and whether the marker is filled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Style {
    pub color: RGBColor,
    pub marker: Marker,
    pub filled: bool,
}

/// The names an allocator may be registered under, its colour and its marker.
type AllocatorStyle = (&'static [&'static str], (u8, u8, u8), Marker);

/// Every allocator's colour and marker, the same in every figure: the
/// allocators the NVAlloc paper compares (pmsim's model of each, under its
/// registry name; the names a peer may be registered under are listed),
/// NVAlloc's ablations and pmsim's other allocators.
const ALLOCATOR_STYLES: &[AllocatorStyle] = &[
    (&["nvalloc-log"], (214, 39, 40), Marker::Circle),
    (&["nvalloc-gc"], (255, 127, 14), Marker::Square),
    (&["base"], (127, 127, 127), Marker::Triangle),
    (&["+interleaved"], (148, 103, 189), Marker::Diamond),
    (&["+log"], (140, 86, 75), Marker::Cross),
    (&["pmdk"], (31, 119, 180), Marker::Square),
    (&["makalu"], (44, 160, 44), Marker::Triangle),
    (&["ralloc"], (0, 90, 50), Marker::Diamond),
    (&["nvm-malloc", "nvm_malloc", "nvmmalloc"], (23, 190, 207), Marker::Circle),
    (&["pallocator"], (57, 59, 121), Marker::Star),
    (&["metall"], (227, 119, 194), Marker::Diamond),
    (&["llfree"], (188, 189, 34), Marker::Star),
];

/// Colours for allocators the table does not know, picked by name.
const MORE: [(u8, u8, u8); 6] =
    [(99, 121, 57), (132, 60, 57), (107, 110, 207), (189, 158, 57), (173, 73, 74), (82, 84, 163)];

/// FNV-1a of a name, for picks that must not depend on the order of series.
fn name_hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// The style of allocator `label` (a spec as written: `nvalloc-log`,
/// `nvalloc-log:morphing=false`, `makalu:shipped=true`), or `None` when it
/// names no allocator pmsim knows. A variant (`NAME:key=value`) keeps its
/// allocator's colour, lightened, with a hollow marker.
pub fn allocator_style(label: &str) -> Option<Style> {
    let (name, variant) = match label.split_once(':') {
        Some((n, v)) => (n, Some(v)),
        None => (label, None),
    };
    let known = ALLOCATOR_STYLES.iter().find(|(names, _, _)| names.contains(&name));
    let (rgb, marker) = match known {
        Some(&(_, rgb, m)) => (rgb, m),
        None if pmsim_model::runner::AllocSpec::names().contains(&name) => {
            let h = name_hash(name);
            let markers = [Marker::Circle, Marker::Square, Marker::Triangle, Marker::Diamond, Marker::Cross];
            (MORE[h as usize % MORE.len()], markers[(h >> 8) as usize % markers.len()])
        }
        None => return None,
    };
    let color = match variant {
        // Lighter by an amount the variant picks, so two variants differ.
        Some(v) => {
            let f = 0.35 + 0.1 * (name_hash(v) % 3) as f64;
            let mix = |c: u8| (c as f64 + (255.0 - c as f64) * f).round() as u8;
            RGBColor(mix(rgb.0), mix(rgb.1), mix(rgb.2))
        }
        None => RGBColor(rgb.0, rgb.1, rgb.2),
    };
    Some(Style { color, marker, filled: variant.is_none() })
}

/// The styles of a panel's series, by name: a series named after an
/// allocator (`nvalloc-log`, `pmdk ×4 threads`, `nvalloc-log log_gc=off`)
/// takes that allocator's colour and marker; several series of one
/// allocator in a panel (thread counts, parameter values) take lighter
/// shades of it in their order, the first the allocator's own. Other
/// series take the palette's colours in order.
pub fn series_styles(names: &[&str]) -> Vec<Style> {
    let first = |n: &str| n.split_whitespace().next().unwrap_or("").to_string();
    names
        .iter()
        .enumerate()
        .map(|(k, n)| {
            let Some(st) = allocator_style(&first(n)) else {
                return Style { color: COLORS[k % COLORS.len()], marker: Marker::Circle, filled: true };
            };
            let nth = names[..k].iter().filter(|m| first(m) == first(n)).count();
            if nth == 0 {
                return st;
            }
            let f = (0.22 * nth as f64).min(0.75);
            let c = st.color;
            let mix = |x: u8| (x as f64 + (255.0 - x as f64) * f).round() as u8;
            Style { color: RGBColor(mix(c.0), mix(c.1), mix(c.2)), marker: st.marker, filled: nth % 2 == 0 }
        })
        .collect()
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
    // Drawn under temporary names and renamed into place (a link of that
    // name is replaced, never written through).
    let stage = |p: &Path| Staged::new(p, true).map_err(|e| err(p, format!("cannot create: {e}")));
    let (s, b) = (stage(&svg)?, stage(&png)?);
    draw(SVGBackend::new(&s.tmp_path(), size).into_drawing_area(), fig, (rows, cols)).map_err(|e| err(&svg, e))?;
    let mut rgb = vec![0u8; size.0 as usize * size.1 as usize * 3];
    draw(BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area(), fig, (rows, cols))
        .map_err(|e| err(&png, e))?;
    write_png(&b.tmp_path(), size, &rgb).map_err(|e| err(&png, e))?;
    for (st, p) in [(s, &svg), (b, &png)] {
        st.commit().map_err(|e| err(p, format!("cannot write: {e}")))?;
    }
    Ok(vec![svg, png])
}

/// An 8-bit RGB image of `size` pixels (`rgb`, row by row) as a PNG file.
fn write_png(path: &Path, size: (u32, u32), rgb: &[u8]) -> Result<(), String> {
    let file = std::fs::File::create(path).map_err(|x| format!("cannot create: {x}"))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), size.0, size.1);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    // Each row filtered the way that compresses it best: half the bytes of
    // one filter for all, on figures of lines and text.
    enc.set_adaptive_filter(png::AdaptiveFilterType::Adaptive);
    let mut w = enc.write_header().map_err(e)?;
    w.write_image_data(rgb).map_err(e)?;
    w.finish().map_err(e)
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

/// Width of the strip right of a panel's plot where its legend goes (the
/// legend never covers data).
const LEGEND_W: u32 = 190;

/// `0..max` with a little headroom (a range that fits the data).
fn y_range(max: f64) -> std::ops::Range<f64> {
    let m = if max.is_finite() && max > 0.0 { max } else { 1.0 };
    0.0..m * 1.05
}

/// The panel's plot area and its legend strip.
fn split_legend<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>) -> (DrawingArea<DB, Shift>, DrawingArea<DB, Shift>) {
    let w = area.dim_in_pixel().0;
    area.split_horizontally(w.saturating_sub(LEGEND_W).max(w / 2))
}

/// Draws a marker of `style` centred at pixel `(x, y)`.
fn marker<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    (x, y): (i32, i32),
    st: Style,
    r: i32,
) -> Result<(), String> {
    let c = st.color;
    let shape = if st.filled { c.filled() } else { c.stroke_width(2) };
    match st.marker {
        Marker::Circle => area.draw(&Circle::new((x, y), r, shape)),
        Marker::Square => area.draw(&Rectangle::new([(x - r, y - r), (x + r, y + r)], shape)),
        Marker::Triangle => {
            area.draw(&Polygon::new(vec![(x, y - r - 1), (x - r - 1, y + r), (x + r + 1, y + r)], shape))
        }
        Marker::Diamond => {
            area.draw(&Polygon::new(vec![(x, y - r - 1), (x + r + 1, y), (x, y + r + 1), (x - r - 1, y)], shape))
        }
        Marker::Cross => {
            area.draw(&PathElement::new(vec![(x - r, y - r), (x + r, y + r)], c.stroke_width(2))).map_err(e)?;
            area.draw(&PathElement::new(vec![(x - r, y + r), (x + r, y - r)], c.stroke_width(2)))
        }
        Marker::Star => {
            let pts: Vec<(i32, i32)> = (0..10)
                .map(|i| {
                    let a = std::f64::consts::PI * (i as f64 / 5.0 - 0.5);
                    let rr = if i % 2 == 0 { r as f64 + 1.5 } else { r as f64 * 0.5 };
                    (x + (rr * a.cos()).round() as i32, y + (rr * a.sin()).round() as i32)
                })
                .collect();
            area.draw(&Polygon::new(pts, shape))
        }
    }
    .map_err(e)
}

/// The legend in the strip: one entry per series, its marker (or a filled
/// box for bars) and its name.
fn draw_legend<DB: DrawingBackend>(
    strip: &DrawingArea<DB, Shift>,
    entries: &[(String, Style)],
    boxes: bool,
) -> Result<(), String> {
    let style = TextStyle::from((FAMILY, 12).into_font()).color(&BLACK);
    let top = 40;
    for (i, (name, st)) in entries.iter().enumerate() {
        let y = top + 18 * i as i32;
        if boxes {
            strip.draw(&Rectangle::new([(4, y - 6), (18, y + 6)], st.color.filled())).map_err(e)?;
        } else {
            strip.draw(&PathElement::new(vec![(2, y), (20, y)], st.color.stroke_width(2))).map_err(e)?;
            marker(strip, (11, y), *st, 4)?;
        }
        // Long names are cut to fit the strip.
        let text: String = if name.chars().count() > 26 {
            name.chars().take(25).chain(std::iter::once('…')).collect()
        } else {
            name.clone()
        };
        strip.draw(&Text::new(text, (26, y - 7), style.clone())).map_err(e)?;
    }
    Ok(())
}

fn draw_panel<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, p: &Panel) -> Result<(), String> {
    let (plot_area, strip) = split_legend(area);
    let mut b = ChartBuilder::on(&plot_area);
    b.caption(&p.title, (FAMILY, 17)).margin(12).x_label_area_size(55).y_label_area_size(75);
    match &p.kind {
        Kind::LogBars { categories, series } => {
            let logs: Vec<Series<f64>> = series
                .iter()
                .map(|(k, v)| (k.clone(), v.iter().map(|&x| if x > 0.0 { x.log10() } else { f64::NAN }).collect()))
                .collect();
            let all = || logs.iter().flat_map(|(_, v)| v.iter().copied()).filter(|x| x.is_finite());
            let yr = decades(all().fold(f64::INFINITY, f64::min), all().fold(f64::NEG_INFINITY, f64::max));
            draw_bars(b, &strip, p, categories, &logs, false, Some(yr))
        }
        Kind::Bars { categories, series, stacked } => draw_bars(b, &strip, p, categories, series, *stacked, None),
        Kind::Lines { series, log2_x, log10_y } => draw_xy(b, &strip, p, series, (*log2_x, *log10_y), true),
        Kind::Scatter { series } => draw_xy(b, &strip, p, series, (false, false), false),
    }
}

/// A log10 axis's range: the whole decades around log10 values `lo..=hi`
/// (0..1 when there are none, one decade at least).
fn decades(lo: f64, hi: f64) -> std::ops::Range<f64> {
    let (lo, hi) = if lo.is_finite() { (lo.floor(), hi.ceil()) } else { (0.0, 1.0) };
    lo..if hi > lo { hi } else { lo + 1.0 }
}

/// Bars of `series` over `categories`; with `log10` (the y range in
/// decades) the values are already log10s, drawn up from the range's floor.
fn draw_bars<DB: DrawingBackend>(
    mut b: ChartBuilder<'_, '_, DB>,
    strip: &DrawingArea<DB, Shift>,
    p: &Panel,
    categories: &[String],
    series: &[Series<f64>],
    stacked: bool,
    log10: Option<std::ops::Range<f64>>,
) -> Result<(), String> {
    let n = categories.len().max(1);
    let max = (0..n)
        .map(|i| {
            let vals = series.iter().map(|(_, v)| v.get(i).copied().unwrap_or(0.0));
            if stacked {
                vals.sum::<f64>()
            } else {
                vals.fold(0.0, f64::max)
            }
        })
        .fold(0.0, f64::max);
    let yr = log10.clone().unwrap_or_else(|| y_range(max));
    let floor = yr.start;
    let mut chart = b.build_cartesian_2d(-0.5..(n as f64 - 0.5), yr.clone()).map_err(e)?;
    let cats = categories.to_vec();
    let fmt = move |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            cats.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    let log = log10.is_some();
    let yfmt = move |y: &f64| if log { log10_tick(*y) } else { tick(*y) };
    let y_desc = if log { format!("{} (log10)", p.y_label) } else { p.y_label.clone() };
    let mut mesh = chart.configure_mesh();
    if log {
        mesh.y_labels(((yr.end - yr.start).round() as usize + 1).max(2));
    }
    mesh.disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&fmt)
        .y_label_formatter(&yfmt)
        .x_desc(&p.x_label)
        .y_desc(&y_desc)
        .label_style((FAMILY, 13))
        .axis_desc_style((FAMILY, 15))
        .draw()
        .map_err(e)?;
    let s = series.len().max(1) as f64;
    let mut base = vec![0.0; n];
    let mut entries = Vec::new();
    let styles = series_styles(&series.iter().map(|x| x.0.as_str()).collect::<Vec<_>>());
    for (k, (name, vals)) in series.iter().enumerate() {
        let st = styles[k];
        let rects: Vec<Rectangle<(f64, f64)>> = (0..n)
            .filter(|&i| vals.get(i).is_none_or(|v| v.is_finite()))
            .map(|i| {
                let v = vals.get(i).copied().unwrap_or(floor);
                let (x0, x1, y0) = if stacked {
                    (i as f64 - 0.35, i as f64 + 0.35, base[i])
                } else {
                    let w = 0.8 / s;
                    let x0 = i as f64 - 0.4 + k as f64 * w;
                    (x0, x0 + w * 0.92, floor)
                };
                if stacked {
                    base[i] += v;
                }
                let top = if log10.is_some() { v } else { y0 + v };
                Rectangle::new([(x0, y0), (x1, top)], st.color.filled())
            })
            .collect();
        chart.draw_series(rects).map_err(e)?;
        entries.push((name.clone(), st));
    }
    draw_legend(strip, &entries, true)
}

/// Tick label of a log10 axis at `y` (the exponent): the power of ten, or
/// nothing between powers.
fn log10_tick(y: f64) -> String {
    if (y - y.round()).abs() < 1e-6 {
        tick(10f64.powf(y.round()))
    } else {
        String::new()
    }
}

fn draw_xy<DB: DrawingBackend>(
    mut b: ChartBuilder<'_, '_, DB>,
    strip: &DrawingArea<DB, Shift>,
    p: &Panel,
    series: &[Series<(f64, f64)>],
    (log2, log10): (bool, bool),
    lines: bool,
) -> Result<(), String> {
    let tx = |x: f64| if log2 { x.max(f64::MIN_POSITIVE).log2() } else { x };
    // On a log10 axis a value that is not positive has no place: left out.
    let pts_of = |v: &[(f64, f64)]| -> Vec<(f64, f64)> {
        v.iter()
            .filter(|&&(_, y)| !log10 || y > 0.0)
            .map(|&(x, y)| (tx(x), if log10 { y.log10() } else { y }))
            .collect()
    };
    let (mut x0, mut x1, mut y0, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, f64::INFINITY, f64::NEG_INFINITY);
    for (_, v) in series {
        for (x, y) in pts_of(v) {
            (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
        }
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
    let yr = if log10 { decades(y0, y1) } else { y_range(y1.max(0.0)) };
    let mut chart = b.build_cartesian_2d((x0 - pad)..(x1 + pad), yr.clone()).map_err(e)?;
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
    let yfmt = move |y: &f64| if log10 { log10_tick(*y) } else { tick(*y) };
    let mut mesh = chart.configure_mesh();
    if log2 {
        mesh.x_labels(((x1 - x0).round() as usize + 1).max(2));
    }
    if log10 {
        mesh.y_labels(((yr.end - yr.start).round() as usize + 1).max(2));
    }
    let y_desc = if log10 { format!("{} (log10)", p.y_label) } else { p.y_label.clone() };
    mesh.x_label_formatter(&xfmt)
        .y_label_formatter(&yfmt)
        .x_desc(&p.x_label)
        .y_desc(&y_desc)
        .label_style((FAMILY, 13))
        .axis_desc_style((FAMILY, 15))
        .draw()
        .map_err(e)?;
    if log2 {
        // The mesh labels the powers of two only: an x of the data between
        // them (Fig. 16a's 6 bit stripes, the paper's best) gets its own
        // label, level with theirs.
        let mut odd: Vec<f64> = series.iter().flat_map(|s| s.1.iter().map(|p| p.0)).filter(|&x| x > 0.0).collect();
        odd.retain(|x| (x.log2() - x.log2().round()).abs() > 1e-6);
        odd.sort_by(f64::total_cmp);
        odd.dedup();
        let style =
            TextStyle::from((FAMILY, 13)).pos(text_anchor::Pos::new(text_anchor::HPos::Center, text_anchor::VPos::Top));
        chart
            .draw_series(
                odd.iter()
                    .map(|&x| EmptyElement::at((x.log2(), yr.start)) + Text::new(tick(x), (0, 11), style.clone())),
            )
            .map_err(e)?;
    }
    let mut entries = Vec::new();
    let styles = series_styles(&series.iter().map(|x| x.0.as_str()).collect::<Vec<_>>());
    for (k, (name, vals)) in series.iter().enumerate() {
        let st = styles[k];
        let v = pts_of(vals);
        if lines {
            chart.draw_series(LineSeries::new(v.clone(), st.color.stroke_width(2))).map_err(e)?;
        }
        let r = if lines { 4 } else { 2 };
        let area = chart.plotting_area().strip_coord_spec();
        for &q in &v {
            let px = chart.backend_coord(&q);
            let at = area.get_base_pixel();
            marker(&area, (px.0 - at.0, px.1 - at.1), st, r)?;
        }
        entries.push((name.clone(), st));
    }
    draw_legend(strip, &entries, false)
}
