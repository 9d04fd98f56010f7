//! Costs per code site: which line of the traced program issued the flushes
//! and fences, how many of its flushes were reflushes, and the persist time
//! they cost. The trace names the site of each flush and fence (FORMAT.md,
//! "Site tables"); the simulator charges each one's figures to its site's row
//! here as well as to its thread, region and operation.

use pmsim_traces::{Site, SiteTable};
use serde::Serialize;
use std::io::{self, Write};

/// The raw counts of one site: a few words, so a flush adds little to the
/// replay's work (the full [`crate::stats::Counters`] of threads and regions
/// would add a histogram per site).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteRow {
    pub flushes: u64,
    pub reflushes: u64,
    pub dirty_flushes: u64,
    pub fences: u64,
    /// Persist time in picoseconds: the site's flushes and the fences it issued.
    pub persist_ps: u64,
}

/// Rows by site id (0: flushes and fences of no known site).
#[derive(Clone, Debug)]
pub struct SiteCounters {
    rows: Vec<SiteRow>,
}

impl Default for SiteCounters {
    fn default() -> Self {
        SiteCounters { rows: vec![SiteRow::default(); 64] }
    }
}

impl SiteCounters {
    /// The row of `site`, made on first use.
    #[inline(always)]
    pub fn row(&mut self, site: u32) -> &mut SiteRow {
        let i = site as usize;
        if i >= self.rows.len() {
            self.grow(i);
        }
        &mut self.rows[i]
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self, i: usize) {
        self.rows.resize((i + 1).next_power_of_two(), SiteRow::default());
    }

    /// What was counted since `earlier`, an earlier copy (a window's rows).
    pub fn since(&self, earlier: &SiteCounters) -> SiteCounters {
        let mut rows = self.rows.clone();
        for (r, e) in rows.iter_mut().zip(&earlier.rows) {
            r.flushes -= e.flushes;
            r.reflushes -= e.reflushes;
            r.dirty_flushes -= e.dirty_flushes;
            r.fences -= e.fences;
            r.persist_ps -= e.persist_ps;
        }
        SiteCounters { rows }
    }

    /// The rows that counted something, named from `table`, costliest first
    /// (persist time, then flushes, then fences; then by id).
    pub fn report(&self, table: &SiteTable) -> Vec<SiteReport> {
        let mut out: Vec<SiteReport> = self
            .rows
            .iter()
            .enumerate()
            .filter(|(_, r)| r.flushes + r.fences > 0)
            .map(|(id, r)| SiteReport::new(id as u32, table.get(id as u32), r))
            .collect();
        out.sort_by(|a, b| {
            b.persist_ns
                .total_cmp(&a.persist_ns)
                .then(b.flushes.cmp(&a.flushes))
                .then(b.fences.cmp(&a.fences))
                .then(a.site.cmp(&b.site))
        });
        out
    }
}

/// One site's figures, as `pmsim sim --json` prints them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SiteReport {
    /// The site id in the trace (0: unknown).
    pub site: u32,
    /// `function (file:line)` or what of it is known.
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub function: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub file: String,
    pub line: u32,
    /// The instruction address (DBI traces), 0 if none.
    pub addr: u64,
    pub flushes: u64,
    pub reflushes: u64,
    /// reflushes / flushes (0 without flushes).
    pub reflush_ratio: f64,
    pub dirty_flushes: u64,
    pub fences: u64,
    /// Estimated persist time of the site's flushes and fences.
    pub persist_ns: f64,
}

impl SiteReport {
    fn new(id: u32, site: Option<&Site>, r: &SiteRow) -> SiteReport {
        let unknown = Site { id, ..Site::default() };
        let s = site.unwrap_or(&unknown);
        let name = match site {
            Some(s) => s.label(),
            None if id == 0 => "(unknown)".to_string(),
            None => format!("site {id} (undefined in the trace)"),
        };
        SiteReport {
            site: id,
            name,
            function: s.function.clone(),
            file: s.file.clone(),
            line: s.line,
            addr: s.addr,
            flushes: r.flushes,
            reflushes: r.reflushes,
            reflush_ratio: if r.flushes == 0 { 0.0 } else { r.reflushes as f64 / r.flushes as f64 },
            dirty_flushes: r.dirty_flushes,
            fences: r.fences,
            persist_ns: r.persist_ps as f64 / 1000.0,
        }
    }
}

/// Prints the per-site table (`pmsim sim --by site`): at most `limit` rows,
/// then a line summing the rest.
pub fn write_sites(sites: &[SiteReport], limit: usize, out: &mut dyn Write) -> io::Result<()> {
    let total_flushes: u64 = sites.iter().map(|s| s.flushes).sum();
    writeln!(
        out,
        "{:>10} {:>6} {:>10} {:>8} {:>9} {:>12}  site",
        "flushes", "share%", "reflushes", "reflush%", "fences", "persist_us"
    )?;
    let pct = |a: u64, b: u64| if b == 0 { "-".to_string() } else { format!("{:.1}", 100.0 * a as f64 / b as f64) };
    for s in sites.iter().take(limit) {
        writeln!(
            out,
            "{:>10} {:>6} {:>10} {:>8} {:>9} {:>12.1}  {}",
            s.flushes,
            pct(s.flushes, total_flushes),
            s.reflushes,
            pct(s.reflushes, s.flushes),
            s.fences,
            s.persist_ns / 1e3,
            s.name
        )?;
    }
    if sites.len() > limit {
        let rest = &sites[limit..];
        let (f, r): (u64, u64) = rest.iter().fold((0, 0), |(f, r), s| (f + s.flushes, r + s.reflushes));
        let fences: u64 = rest.iter().map(|s| s.fences).sum();
        let ns: f64 = rest.iter().map(|s| s.persist_ns).sum();
        writeln!(
            out,
            "{:>10} {:>6} {:>10} {:>8} {:>9} {:>12.1}  ({} more sites)",
            f,
            pct(f, total_flushes),
            r,
            pct(r, f),
            fences,
            ns / 1e3,
            rest.len()
        )?;
    }
    Ok(())
}
