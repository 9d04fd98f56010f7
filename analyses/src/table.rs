//! Tables of rows: one [`Table`] type that CSV, text and the HTML report all
//! print, and the headline table of a result set (every parameter that
//! varies, then the headline results).

use crate::estimate;
use crate::fields::*;
use crate::point::value_text;
use crate::row::Row;
use std::collections::BTreeSet;
use std::io::{self, Write};

/// A table of text cells.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(columns: &[&str]) -> Table {
        Table { columns: columns.iter().map(|s| s.to_string()).collect(), rows: Vec::new() }
    }

    pub fn push(&mut self, row: Vec<String>) {
        debug_assert_eq!(row.len(), self.columns.len());
        self.rows.push(row);
    }

    pub fn write_csv(&self, w: &mut dyn Write) -> io::Result<()> {
        let line = |cells: &[String]| cells.iter().map(|c| csv_cell(c)).collect::<Vec<_>>().join(",");
        writeln!(w, "{}", line(&self.columns))?;
        for r in &self.rows {
            writeln!(w, "{}", line(r))?;
        }
        Ok(())
    }

    /// Aligned columns for a terminal.
    pub fn write_text(&self, w: &mut dyn Write) -> io::Result<()> {
        let mut width: Vec<usize> = self.columns.iter().map(|c| c.chars().count()).collect();
        for r in &self.rows {
            for (k, c) in r.iter().enumerate() {
                width[k] = width[k].max(c.chars().count());
            }
        }
        let line = |cells: &[String], w: &mut dyn Write| -> io::Result<()> {
            let s: Vec<String> = cells.iter().zip(&width).map(|(c, &n)| format!("{c:<n$}")).collect();
            writeln!(w, "{}", s.join("  ").trim_end())
        };
        line(&self.columns, w)?;
        for r in &self.rows {
            line(r, w)?;
        }
        Ok(())
    }

    /// An HTML `<table>` (cells escaped).
    pub fn to_html(&self) -> String {
        let mut s = String::from("<table>\n<thead><tr>");
        for c in &self.columns {
            s.push_str(&format!("<th>{}</th>", html_escape(c)));
        }
        s.push_str("</tr></thead>\n<tbody>\n");
        for r in &self.rows {
            s.push_str("<tr>");
            for c in r {
                s.push_str(&format!("<td>{}</td>", html_escape(c)));
            }
            s.push_str("</tr>\n");
        }
        s.push_str("</tbody>\n</table>\n");
        s
    }

    /// A Markdown table.
    pub fn to_markdown(&self) -> String {
        let mut s = format!("| {} |\n", self.columns.join(" | "));
        s.push_str(&format!("|{}\n", "---|".repeat(self.columns.len())));
        for r in &self.rows {
            s.push_str(&format!("| {} |\n", r.join(" | ")));
        }
        s
    }
}

pub fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn csv_cell(c: &str) -> String {
    if c.contains([',', '"', '\n']) {
        format!("\"{}\"", c.replace('"', "\"\""))
    } else {
        c.to_string()
    }
}

/// A number for a table: up to 4 significant decimals, `-` when absent.
pub fn num(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(x) if x == x.trunc() && x.abs() < 1e15 => format!("{x:.0}"),
        Some(x) if x.abs() >= 100.0 => format!("{x:.1}"),
        Some(x) if x.abs() >= 0.01 => format!("{x:.4}"),
        // Three significant digits for small values (write amplification).
        Some(x) => format!("{x:.3e}"),
    }
}

/// The headline table: point index and id, every parameter, and the
/// headline results (simulated, native, and the native timing last).
pub fn headline(rows: &[Row]) -> Table {
    let keys = |f: fn(&Row) -> Vec<String>| -> Vec<String> {
        rows.iter().flat_map(f).collect::<BTreeSet<_>>().into_iter().collect()
    };
    let alloc_keys = keys(|r| r.point.alloc_params.keys().cloned().collect());
    let wl_keys = keys(|r| r.point.workload_params.keys().cloned().collect());
    let sim_keys = keys(|r| r.point.sim.keys().cloned().collect());
    let mut cols: Vec<String> =
        ["index", "id", "mode", "scale", "workload", "threads", "alloc"].iter().map(|s| s.to_string()).collect();
    cols.extend(alloc_keys.iter().cloned());
    cols.extend(wl_keys.iter().map(|k| format!("param.{k}")));
    cols.extend(sim_keys.iter().map(|k| format!("sim.{k}")));
    cols.push("seed".into());
    const RESULTS: [&str; 18] = [
        "flushes",
        "reflushes",
        "reflush_ratio",
        "pm_writes",
        "write_amplification",
        "persist_ns",
        "persist_ns_per_op",
        "cpu_ns_per_op",
        "est_ops_per_s",
        "cpu_only_ops_per_s",
        "persist_only_ops_per_s",
        "ops",
        "peak_live_bytes",
        "peak_mapped_bytes",
        "slabs_low/mid/high",
        "ops_per_s",
        "ops_per_cpu_s",
        "recovery_s",
    ];
    cols.extend(RESULTS.iter().map(|s| s.to_string()));
    let mut t = Table { columns: cols, rows: Vec::new() };
    for r in rows {
        let p = &r.point;
        let mut c = vec![
            r.index.to_string(),
            r.id.clone(),
            format!("{:?}", p.mode).to_lowercase(),
            p.scale.clone(),
            p.workload.clone(),
            p.threads.to_string(),
            p.alloc.clone(),
        ];
        let get = |m: &std::collections::BTreeMap<String, serde_json::Value>, k: &str| {
            m.get(k).map(value_text).unwrap_or_default()
        };
        c.extend(alloc_keys.iter().map(|k| get(&p.alloc_params, k)));
        c.extend(wl_keys.iter().map(|k| get(&p.workload_params, k)));
        c.extend(sim_keys.iter().map(|k| get(&p.sim, k)));
        c.push(p.seed.to_string());
        let slabs = match (r.num(SLABS_LOW), r.num(SLABS_MID), r.num(SLABS_HIGH)) {
            (Some(lo), Some(mid), Some(hi)) => Some(format!("{lo}/{mid}/{hi}")),
            _ => None,
        };
        c.extend([
            num(r.num(FLUSHES)),
            num(r.num(REFLUSHES)),
            num(r.num(REFLUSH_RATIO)),
            num(r.num(PM_WRITES)),
            num(r.num(WRITE_AMPLIFICATION)),
            num(r.num(PERSIST_TOTAL)),
            num(crate::estimate::persist_ns(r)),
            num(estimate::cpu_ns(r)),
            num(estimate::ops_per_s(r)),
            num(estimate::cpu_only_ops_per_s(r)),
            num(estimate::persist_only_ops_per_s(r)),
            num(r.num(NATIVE_OPS).or_else(|| r.num(SIM_OPS))),
            num(r.num(PEAK_LIVE)),
            num(r.num(PEAK_MAPPED)),
            slabs.unwrap_or_else(|| "-".into()),
            num(r.num(OPS_PER_S)),
            num(r.num(OPS_PER_CPU_S)),
            num(r.num(RECOVERY_S)),
        ]);
        t.push(c);
    }
    t
}

pub fn write_csv(rows: &[Row], w: &mut dyn Write) -> io::Result<()> {
    headline(rows).write_csv(w)
}

pub fn write_text(rows: &[Row], w: &mut dyn Write) -> io::Result<()> {
    headline(rows).write_text(w)
}
