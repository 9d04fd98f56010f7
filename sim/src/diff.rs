//! Two reports side by side (`pmsim diff`): the figures of a baseline `a` and
//! a candidate `b`, their change, and thresholds (`--fail-if`) that turn a
//! regression into a failing exit status, so a CI job can refuse a change that
//! makes an allocator flush more.
//!
//! Reports are compared as JSON values (what `pmsim sim --json` prints), so a
//! report saved by an earlier run and one computed now from a trace compare
//! alike, and any figure of the report can be named by its path.

use serde::Serialize;
use serde_json::Value;
use std::fmt;
use std::io::{self, Write};

/// A figure with a name of its own: the headline figures a CI threshold is
/// usually about.
pub struct Metric {
    pub name: &'static str,
    pub doc: &'static str,
    /// JSON pointer of the figure in a report.
    pointer: &'static str,
    /// Divided by the operations of the run (`/overall/ops`).
    per_op: bool,
}

/// The named figures, in the order the comparison prints them.
pub const METRICS: &[Metric] = &[
    Metric { name: "events", doc: "events replayed", pointer: "/events", per_op: false },
    Metric { name: "ops", doc: "operations begun", pointer: "/overall/ops", per_op: false },
    Metric { name: "flushes", doc: "flush instructions", pointer: "/overall/flushes", per_op: false },
    Metric { name: "flushes_per_op", doc: "flushes per operation", pointer: "/overall/flushes", per_op: true },
    Metric {
        name: "reflushes",
        doc: "flushes below the reflush threshold",
        pointer: "/overall/reflushes",
        per_op: false,
    },
    Metric { name: "reflush_ratio", doc: "reflushes / flushes", pointer: "/overall/reflush_ratio", per_op: false },
    Metric { name: "fences", doc: "fences", pointer: "/overall/fences", per_op: false },
    Metric { name: "fences_per_op", doc: "fences per operation", pointer: "/overall/fences", per_op: true },
    Metric { name: "stores", doc: "cached stores", pointer: "/overall/stores", per_op: false },
    Metric { name: "pm_writes", doc: "64 B writes reaching PM", pointer: "/overall/pm_writes", per_op: false },
    Metric { name: "pm_writes_per_op", doc: "PM writes per operation", pointer: "/overall/pm_writes", per_op: true },
    Metric {
        name: "write_amplification",
        doc: "media bytes / bytes written to the DIMMs",
        pointer: "/pm/write_amplification",
        per_op: false,
    },
    Metric { name: "persist_ns", doc: "estimated persist time", pointer: "/overall/persist_ns/total", per_op: false },
    Metric {
        name: "persist_ns_per_op",
        doc: "estimated persist time per operation",
        pointer: "/overall/persist_ns/total",
        per_op: true,
    },
];

/// Checks that a saved report's figures are what `pmsim sim --json` writes:
/// every figure compared (the overall ones, those of each region and
/// operation type) a finite number, none negative, ratios at most 1. A
/// report edited by hand or of another tool is refused naming the figure,
/// rather than compared as if it were pmsim's.
pub fn check_report(report: &Value) -> Result<(), String> {
    let figure = |path: &str, v: &Value| -> Result<(), String> {
        let n = v.as_f64().ok_or_else(|| format!("{path} is {v}, not a number"))?;
        if !n.is_finite() || n < 0.0 {
            return Err(format!("{path} is {v}: a figure is a number of at least 0"));
        }
        if path.ends_with("ratio") && n > 1.0 {
            return Err(format!("{path} is {v}: a ratio is at most 1"));
        }
        Ok(())
    };
    for required in ["/events", "/overall/ops", "/overall/flushes"] {
        let v = report.pointer(required).ok_or_else(|| format!("no figure {required}"))?;
        figure(required, v)?;
    }
    for m in METRICS {
        if let Some(v) = report.pointer(m.pointer) {
            figure(m.pointer, v)?;
        }
    }
    for (array, key) in [("regions", "name"), ("ops", "op")] {
        let Some(items) = report.get(array) else { continue };
        let items = items.as_array().ok_or_else(|| format!("/{array} is not a list"))?;
        for (i, item) in items.iter().enumerate() {
            let label = item.get(key).map_or(i.to_string(), |n| n.to_string());
            for f in ROW_FIELDS {
                if let Some(v) = item.pointer(&format!("/{f}")) {
                    figure(&format!("/{array}/{label}/{f}"), v)?;
                }
            }
        }
    }
    Ok(())
}

/// The figures compared per region and per operation type.
const ROW_FIELDS: [&str; 4] = ["flushes", "reflush_ratio", "fences", "persist_ns/total"];

/// The fields that name the elements of a report's arrays (regions and
/// sites by name, operation types by op, threads by tid, DIMMs by dimm), so a
/// path can say `regions/wal/flushes` rather than an index.
const KEYS: [&str; 4] = ["name", "op", "tid", "dimm"];

/// Why a comparison could not be made.
#[derive(Debug)]
pub struct DiffError(pub String);

impl fmt::Display for DiffError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DiffError {}

/// The value of `name` in `report`: a named metric ([`METRICS`]) or a path
/// through the report's fields, `/`-separated, where an element of
/// `regions`, `ops`, `threads`, `dimms` or `sites` is named by its name, op,
/// tid, dimm or name (`regions/wal/reflush_ratio`, `ops/malloc/flushes`).
/// `None` if the report has no such figure (or it is not a number).
pub fn lookup(report: &Value, name: &str) -> Option<f64> {
    if let Some(m) = METRICS.iter().find(|m| m.name == name) {
        let v = report.pointer(m.pointer)?.as_f64()?;
        return if m.per_op {
            let ops = report.pointer("/overall/ops")?.as_f64()?;
            (ops > 0.0).then(|| v / ops)
        } else {
            Some(v)
        };
    }
    let mut at = report;
    let mut parts = name.trim_start_matches('/').split('/').peekable();
    while let Some(p) = parts.next() {
        at = match at {
            Value::Object(o) => o.get(p)?,
            Value::Array(items) => items.iter().find(|e| element_named(e, p))?,
            _ => return None,
        };
        if parts.peek().is_none() {
            return at.as_f64();
        }
    }
    None
}

/// Whether an element of a keyed array is the one `name` names (ignoring
/// case: regions are called `WAL` or `user data`).
fn element_named(e: &Value, name: &str) -> bool {
    KEYS.iter().any(|key| match e.get(*key) {
        Some(Value::String(s)) => s.eq_ignore_ascii_case(name),
        Some(Value::Number(n)) => n.to_string() == name,
        _ => false,
    })
}

/// One compared figure.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// The figure's name, as `--fail-if` takes it.
    pub metric: String,
    pub a: Option<f64>,
    pub b: Option<f64>,
    /// b − a.
    pub delta: Option<f64>,
    /// (b − a) / |a|; `None` when a is 0 or either is missing.
    pub relative: Option<f64>,
}

/// (b − a) / |a|: the change relative to `a`; a change from 0 is infinite
/// (0 when nothing changed).
fn relative_change(a: f64, b: f64) -> f64 {
    if a != 0.0 {
        (b - a) / a.abs()
    } else {
        match b.partial_cmp(&a) {
            Some(std::cmp::Ordering::Greater) => f64::INFINITY,
            Some(std::cmp::Ordering::Less) => f64::NEG_INFINITY,
            _ => 0.0,
        }
    }
}

impl Row {
    /// The comparison of one figure, `None` where a side lacks it.
    pub fn new(metric: String, a: Option<f64>, b: Option<f64>) -> Row {
        let delta = a.zip(b).map(|(a, b)| b - a);
        let relative = a.zip(b).filter(|(a, _)| *a != 0.0).map(|(a, b)| relative_change(a, b));
        Row { metric, a, b, delta, relative }
    }
}

/// Which way a threshold looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Fails when the figure rises above the bound.
    Above,
    /// Fails when the figure falls below the bound.
    Below,
}

/// What a threshold's number is measured against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Bound {
    /// `+5%`: the change relative to `a`.
    Relative,
    /// `+0.1`: the change b − a.
    Delta,
    /// `1500`: `b` itself.
    Value,
}

/// `--fail-if METRIC>+5%` and its kin: fail when the candidate's figure
/// crosses a bound.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Threshold {
    pub metric: String,
    pub direction: Direction,
    pub bound: Bound,
    /// The number as written (percent for [`Bound::Relative`]).
    pub amount: f64,
    /// The text the user gave.
    pub text: String,
}

impl Threshold {
    /// Parses `NAME>+5%` (rise of more than 5 %), `NAME>+0.1` (rise of more
    /// than 0.1), `NAME>1500` (above 1500), and the same with `<` and `-`.
    pub fn parse(text: &str) -> Result<Threshold, DiffError> {
        let bad = |why: &str| {
            DiffError(format!(
                "--fail-if {text}: {why} (forms: NAME>+5%, NAME>+0.1, NAME>1500, NAME<-5%; NAME is one of {} or a report path such as regions/wal/flushes)",
                METRICS.iter().map(|m| m.name).collect::<Vec<_>>().join(", ")
            ))
        };
        let (at, direction) = match (text.find('>'), text.find('<')) {
            (Some(i), None) => (i, Direction::Above),
            (None, Some(i)) => (i, Direction::Below),
            _ => return Err(bad("expected exactly one of > or <")),
        };
        let metric = text[..at].trim();
        if metric.is_empty() {
            return Err(bad("no figure named"));
        }
        let mut num = text[at + 1..].trim();
        let relative = num.ends_with('%');
        if relative {
            num = num[..num.len() - 1].trim_end();
        }
        let signed = num.starts_with('+') || num.starts_with('-');
        let amount: f64 = num.parse().map_err(|_| bad(&format!("{num:?} is not a number")))?;
        if !amount.is_finite() {
            return Err(bad("the bound must be finite"));
        }
        let bound = match (relative, signed) {
            (true, _) => Bound::Relative,
            (false, true) => Bound::Delta,
            (false, false) => Bound::Value,
        };
        Ok(Threshold { metric: metric.to_string(), direction, bound, amount, text: text.to_string() })
    }

    /// Parses every `--fail-if`; two that bound one figure the same way
    /// (`flushes>+5%` and `flushes>+10%`) are a bound given twice, of which
    /// one would never decide anything: refused, naming both.
    pub fn parse_all(texts: &[String]) -> Result<Vec<Threshold>, DiffError> {
        let mut out: Vec<Threshold> = Vec::with_capacity(texts.len());
        for text in texts {
            let t = Threshold::parse(text)?;
            if let Some(o) =
                out.iter().find(|o| o.metric == t.metric && o.direction == t.direction && o.bound == t.bound)
            {
                return Err(DiffError(format!(
                    "--fail-if {} and --fail-if {}: the same figure bounded the same way twice: give one",
                    o.text, t.text
                )));
            }
            out.push(t);
        }
        Ok(out)
    }

    /// Whether the change from `a` to `b` crosses the bound. A rise from 0 is
    /// an infinite relative rise.
    pub fn crossed(&self, a: f64, b: f64) -> bool {
        let x = match self.bound {
            Bound::Value => b,
            Bound::Delta => b - a,
            Bound::Relative => 100.0 * relative_change(a, b),
        };
        match self.direction {
            Direction::Above => x > self.amount,
            Direction::Below => x < self.amount,
        }
    }
}

/// A threshold's verdict.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    pub threshold: Threshold,
    pub a: f64,
    pub b: f64,
    pub crossed: bool,
}

/// Everything `pmsim diff` prints.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub a: String,
    pub b: String,
    /// The named figures.
    pub overall: Vec<Row>,
    /// Per region and per operation type (`regions/NAME/FIELD`, `ops/OP/FIELD`).
    pub rows: Vec<Row>,
    /// Code sites whose persist time changed most (`sites/NAME/persist_ns`),
    /// when both reports name sites.
    pub sites: Vec<Row>,
    pub verdicts: Vec<Verdict>,
}

impl Comparison {
    /// Compares `b` against `a` (labelled for the output) and evaluates the
    /// thresholds; a threshold naming a figure either report lacks is an
    /// error. `top_sites` bounds the site rows.
    pub fn new(
        (a_name, a): (&str, &Value),
        (b_name, b): (&str, &Value),
        thresholds: &[Threshold],
        top_sites: usize,
    ) -> Result<Comparison, DiffError> {
        let overall =
            METRICS.iter().map(|m| Row::new(m.name.to_string(), lookup(a, m.name), lookup(b, m.name))).collect();
        let mut rows = Vec::new();
        for (array, key) in [("regions", "name"), ("ops", "op")] {
            for name in names(a, b, array, key) {
                for f in ROW_FIELDS {
                    let path = format!("{array}/{name}/{f}");
                    rows.push(Row::new(path.clone(), lookup(a, &path), lookup(b, &path)));
                }
            }
        }
        let mut sites: Vec<Row> = names(a, b, "sites", "name")
            .into_iter()
            .map(|n| {
                let path = format!("sites/{n}/persist_ns");
                // A site one build lacks cost nothing there.
                Row::new(path.clone(), Some(lookup(a, &path).unwrap_or(0.0)), Some(lookup(b, &path).unwrap_or(0.0)))
            })
            .filter(|r| r.delta != Some(0.0))
            .collect();
        sites.sort_by(|x, y| y.delta.unwrap_or(0.0).abs().total_cmp(&x.delta.unwrap_or(0.0).abs()));
        sites.truncate(top_sites);
        let mut verdicts = Vec::new();
        for t in thresholds {
            let get = |r: &Value, which: &str| {
                lookup(r, &t.metric)
                    .ok_or_else(|| DiffError(format!("--fail-if {}: {which} has no figure {:?}", t.text, t.metric)))
            };
            let (va, vb) = (get(a, a_name)?, get(b, b_name)?);
            verdicts.push(Verdict { threshold: t.clone(), a: va, b: vb, crossed: t.crossed(va, vb) });
        }
        Ok(Comparison { a: a_name.to_string(), b: b_name.to_string(), overall, rows, sites, verdicts })
    }

    /// The thresholds crossed.
    pub fn failures(&self) -> impl Iterator<Item = &Verdict> {
        self.verdicts.iter().filter(|v| v.crossed)
    }
}

/// The element names of `array` in either report, in `a`'s order then `b`'s.
fn names(a: &Value, b: &Value, array: &str, key: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in [a, b] {
        for e in r.get(array).and_then(Value::as_array).into_iter().flatten() {
            let n = match e.get(key) {
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => continue,
            };
            if !out.contains(&n) {
                out.push(n);
            }
        }
    }
    out
}

/// The change column: relative where `a` is not 0, else the delta.
pub fn change(r: &Row) -> String {
    match (r.relative, r.delta) {
        (Some(p), _) => format!("{:+.1}%", 100.0 * p),
        (None, Some(0.0)) => "=".to_string(),
        (None, Some(d)) => format!("{}{}", if d > 0.0 { "+" } else { "" }, cell(Some(d))),
        _ => "-".to_string(),
    }
}

/// The rows of a table: figure, a, b, change.
pub fn write_rows(rows: &[Row], out: &mut dyn Write) -> io::Result<()> {
    let w = rows.iter().map(|r| r.metric.len()).max().unwrap_or(0).max(6);
    for r in rows {
        writeln!(out, "{:<w$}  {:>14}  {:>14}  {:>9}", r.metric, cell(r.a), cell(r.b), change(r))?;
    }
    Ok(())
}

/// A figure as the tables show it.
pub fn cell(v: Option<f64>) -> String {
    match v {
        None => "-".to_string(),
        Some(x) if x.fract() == 0.0 && x.abs() < 1e15 => format!("{x:.0}"),
        Some(x) if x.abs() >= 100.0 => format!("{x:.1}"),
        Some(x) => format!("{x:.4}"),
    }
}

/// The named figures of two reports of one run (the whole run and a window),
/// without a change column: they measure different spans.
pub fn write_side_by_side(
    a: &crate::Report,
    (la, lb): (&str, &str),
    b: &crate::Report,
    out: &mut dyn Write,
) -> io::Result<()> {
    let (va, vb) =
        (serde_json::to_value(a).map_err(io::Error::other)?, serde_json::to_value(b).map_err(io::Error::other)?);
    let w = METRICS.iter().map(|m| m.name.len()).max().unwrap_or(0);
    writeln!(out, "{:<w$}  {:>14}  {:>14}", "figure", la, lb)?;
    for m in METRICS {
        writeln!(out, "{:<w$}  {:>14}  {:>14}", m.name, cell(lookup(&va, m.name)), cell(lookup(&vb, m.name)))?;
    }
    Ok(())
}

/// The human-readable comparison.
pub fn write_text(c: &Comparison, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "a  {}\nb  {}\n", c.a, c.b)?;
    let w = c.overall.iter().map(|r| r.metric.len()).max().unwrap_or(0).max(6);
    writeln!(out, "{:<w$}  {:>14}  {:>14}  {:>9}", "figure", "a", "b", "change")?;
    write_rows(&c.overall, out)?;
    // Per region and operation, only the figures that changed: the JSON
    // output has them all.
    let changed: Vec<Row> = c.rows.iter().filter(|r| r.delta != Some(0.0)).cloned().collect();
    if !changed.is_empty() {
        writeln!(out, "\nper region and operation (changed figures only; {} unchanged)", c.rows.len() - changed.len())?;
        write_rows(&changed, out)?;
    }
    if !c.sites.is_empty() {
        writeln!(out, "\ncode sites whose persist time changed most (ns)")?;
        write_rows(&c.sites, out)?;
    }
    if !c.verdicts.is_empty() {
        writeln!(out)?;
        for v in &c.verdicts {
            let what = if v.crossed { "FAIL" } else { "ok  " };
            writeln!(out, "{what}  {}  (a {}, b {})", v.threshold.text, cell(Some(v.a)), cell(Some(v.b)))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn report(flushes: u64, reflushes: u64, ops: u64, wal: u64) -> Value {
        json!({
            "events": 10 * flushes,
            "overall": {"flushes": flushes, "reflushes": reflushes,
                        "reflush_ratio": reflushes as f64 / flushes as f64, "fences": flushes, "stores": 1,
                        "pm_writes": flushes, "ops": ops, "persist_ns": {"total": 100.0 * flushes as f64}},
            "pm": {"write_amplification": 1.0},
            "regions": [{"name": "wal", "flushes": wal, "reflush_ratio": 0.5, "fences": 0, "persist_ns": {"total": 1.0}}],
            "ops": [{"op": "malloc", "flushes": wal, "reflush_ratio": 0.0, "fences": 0, "persist_ns": {"total": 1.0}}],
            "threads": [{"tid": 3, "flushes": 7}],
        })
    }

    #[test]
    fn lookup_names_and_paths() {
        let r = report(800, 400, 200, 300);
        assert_eq!(lookup(&r, "flushes_per_op"), Some(4.0));
        assert_eq!(lookup(&r, "reflush_ratio"), Some(0.5));
        assert_eq!(lookup(&r, "regions/wal/flushes"), Some(300.0));
        assert_eq!(lookup(&r, "regions/WAL/flushes"), Some(300.0));
        assert_eq!(lookup(&r, "/ops/malloc/flushes"), Some(300.0));
        assert_eq!(lookup(&r, "threads/3/flushes"), Some(7.0));
        assert_eq!(lookup(&r, "regions/log/flushes"), None);
        assert_eq!(lookup(&r, "overall"), None, "an object is not a figure");
        assert_eq!(lookup(&r, "nonsense"), None);
    }

    #[test]
    fn thresholds_parse_and_cross() {
        let t = Threshold::parse("reflush_ratio>+5%").unwrap();
        assert_eq!((t.direction, t.bound, t.amount), (Direction::Above, Bound::Relative, 5.0));
        assert!(t.crossed(0.40, 0.43));
        assert!(!t.crossed(0.40, 0.41));
        assert!(!t.crossed(0.40, 0.30));
        let t = Threshold::parse("flushes_per_op > +0.5").unwrap();
        assert_eq!(t.bound, Bound::Delta);
        assert!(t.crossed(4.0, 4.6) && !t.crossed(4.0, 4.4));
        let t = Threshold::parse("persist_ns_per_op>1500").unwrap();
        assert_eq!(t.bound, Bound::Value);
        assert!(t.crossed(100.0, 1501.0) && !t.crossed(9999.0, 1500.0));
        let t = Threshold::parse("xpbuffer<-10%").unwrap();
        assert!(t.crossed(100.0, 85.0) && !t.crossed(100.0, 95.0));
        assert!(Threshold::parse("flushes>+1%").unwrap().crossed(0.0, 1.0), "a rise from 0 is infinite");
        for bad in ["flushes", ">5", "flushes>abc", "a>1<2", "flushes>inf"] {
            assert!(Threshold::parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn comparison_rows_and_verdicts() {
        let (a, b) = (report(800, 400, 200, 400), report(400, 100, 200, 0));
        let twice = ["flushes>+5%".to_string(), "flushes > +10%".to_string()];
        assert!(Threshold::parse_all(&twice).unwrap_err().0.contains("twice"));
        let ts = [Threshold::parse("flushes_per_op>+1%").unwrap(), Threshold::parse("flushes_per_op<-10%").unwrap()];
        let c = Comparison::new(("a", &a), ("b", &b), &ts, 5).unwrap();
        let fpo = c.overall.iter().find(|r| r.metric == "flushes_per_op").unwrap();
        assert_eq!((fpo.a, fpo.b, fpo.relative), (Some(4.0), Some(2.0), Some(-0.5)));
        assert!(c.rows.iter().any(|r| r.metric == "regions/wal/flushes" && r.delta == Some(-400.0)));
        let crossed: Vec<_> = c.failures().map(|v| v.threshold.text.as_str()).collect();
        assert_eq!(crossed, ["flushes_per_op<-10%"]);
        let missing = Comparison::new(("a", &a), ("b", &b), &[Threshold::parse("regions/log/flushes>1").unwrap()], 5);
        assert!(missing.unwrap_err().0.contains("a has no figure"));
        let mut text = Vec::new();
        write_text(&c, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("-50.0%") && text.contains("FAIL  flushes_per_op<-10%"), "{text}");
    }
}
