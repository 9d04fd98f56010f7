//! The one printer of a [`Report`] for people: a summary, then tables whose
//! columns come from [`COLUMNS`] (declared with the statistics), the
//! reflush-distance histograms, the persist-time breakdown (NVAlloc Fig. 11)
//! and the DIMMs. `--json` output is the report serialized as is.

use crate::distance::{bucket_label, HIST_BUCKETS};
use crate::stats::{Report, Stats, COLUMNS, PERSIST_SLOT_NAMES};
use std::io::{self, Write};

/// A column of a table: its header and how to show a row's statistics.
struct Col<'a> {
    header: String,
    cell: Box<dyn Fn(&Stats) -> String + 'a>,
}

impl<'a> Col<'a> {
    fn new(header: impl Into<String>, cell: impl Fn(&Stats) -> String + 'a) -> Col<'a> {
        Col { header: header.into(), cell: Box::new(cell) }
    }
}

/// Prints a table: one row per `(label, extra cells, stats)`, then `cols`.
/// Text columns (the label and the extras) are left-aligned, numbers right.
fn table(
    out: &mut dyn Write,
    title: &str,
    label: &str,
    extra: &[&str],
    rows: &[Row<'_>],
    cols: &[Col<'_>],
) -> io::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut grid: Vec<Vec<String>> = Vec::with_capacity(rows.len() + 1);
    let mut head = vec![label.to_string()];
    head.extend(extra.iter().map(|s| s.to_string()));
    head.extend(cols.iter().map(|c| c.header.clone()));
    grid.push(head);
    for (name, cells, s) in rows {
        let mut row = vec![name.clone()];
        row.extend(cells.iter().cloned());
        row.extend(cols.iter().map(|c| (c.cell)(s)));
        grid.push(row);
    }
    let width: Vec<usize> =
        (0..grid[0].len()).map(|c| grid.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    writeln!(out, "\n{title}")?;
    for row in &grid {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c <= extra.len() {
                line += &format!("{cell:<w$}  ", w = width[c]);
            } else {
                line += &format!("{cell:>w$}  ", w = width[c]);
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

type Row<'a> = (String, Vec<String>, &'a Stats);

/// Writes the report as text tables.
pub fn write_text(r: &Report, out: &mut dyn Write) -> io::Result<()> {
    let o = &r.overall;
    let mode = match (r.reflush_only, r.eadr) {
        (true, _) => "reflush statistics only",
        (false, true) => "eADR (flushes cost nothing; evictions and non-temporal stores reach PM)",
        (false, false) => "ADR (flushed lines reach PM)",
    };
    if !r.trace.is_empty() {
        writeln!(out, "trace        {}", r.trace)?;
    }
    writeln!(out, "events       {}", r.events)?;
    writeln!(out, "model        {mode}")?;
    let whose = match r.scope {
        crate::Scope::Thread => "by the same thread",
        crate::Scope::Dimm => "to the same DIMM",
        crate::Scope::Global => "by any thread",
    };
    writeln!(
        out,
        "reflush      distance < {} (distinct lines flushed {whose} since the line's previous flush)",
        r.threshold
    )?;
    if !r.reflush_only {
        writeln!(
            out,
            "cache        {} sets x {} ways x 64 B, LRU; optane {} DIMMs, {} B interleave, {} x {} B XPBuffer",
            r.cache.sets,
            r.cache.ways,
            r.config.optane.dimms,
            r.config.optane.interleave_bytes,
            r.config.optane.xpbuffer_entries,
            r.config.optane.xpline_bytes
        )?;
    }
    writeln!(out, "\noverall")?;
    for c in COLUMNS {
        writeln!(out, "  {:<11} {:>16}   {}", c.header, (c.cell)(o), c.doc)?;
    }
    if !r.reflush_only {
        writeln!(
            out,
            "  {:<11} {:>16}   media bytes written / bytes written to PM ({} flushed, {} evicted, {} non-temporal)",
            "write_amp",
            format!("{:.3}", r.pm.write_amplification),
            r.pm.flushed_bytes,
            r.pm.evicted_bytes,
            r.pm.nt_bytes
        )?;
        writeln!(
            out,
            "  {:<11} {:>16}   dirty lines left in the cache at the end (never reached PM)",
            "dirty_end", r.cache.dirty_lines_at_end
        )?;
    }

    let threads: Vec<Row> =
        r.threads.iter().map(|t| (t.tid.to_string(), vec![t.events.to_string()], &t.stats)).collect();
    let regions: Vec<Row> = r
        .regions
        .iter()
        .map(|g| (g.name.clone(), vec![g.category.map_or("-", |c| c.name()).to_string()], &g.stats))
        .collect();
    let ops: Vec<Row> = r.ops.iter().map(|p| (p.op.clone(), vec![], &p.stats)).collect();
    let cols: Vec<Col> = COLUMNS.iter().map(|c| Col::new(c.header, c.cell)).collect();
    table(out, "per thread", "thread", &["events"], &threads, &cols)?;
    table(out, "per region", "region", &["category"], &regions, &cols)?;
    table(out, "per operation (innermost open operation of the thread)", "op", &[], &ops, &cols)?;

    // Histogram: the buckets any row uses, overall first.
    let mut all: Vec<Row> = vec![("overall".into(), vec![], o)];
    for (p, rows) in [("thread", &threads), ("region", &regions), ("op", &ops)] {
        all.extend(rows.iter().map(|(n, _, s)| (format!("{p} {n}"), vec![], *s)));
    }
    let hist: Vec<Col> = (0..HIST_BUCKETS)
        .map(bucket_label)
        .filter(|l| all.iter().any(|(_, _, s)| s.bucket(l) > 0))
        .map(|l| Col::new(l.clone(), move |s: &Stats| s.bucket(&l).to_string()))
        .collect();
    if o.flushes > 0 {
        table(out, "reflush-distance histogram (flushes per distance)", "", &[], &all, &hist)?;
    }

    if !r.reflush_only && o.persist_ns.total > 0.0 {
        let mut rows: Vec<Row> = vec![("overall".into(), vec![], o)];
        rows.extend(r.ops.iter().map(|p| (p.op.clone(), vec![], &p.stats)));
        let mut cols: Vec<Col> = PERSIST_SLOT_NAMES
            .iter()
            .enumerate()
            .map(|(i, n)| Col::new(*n, move |s: &Stats| format!("{:.1}", s.persist_slots()[i] / 1e3)))
            .collect();
        cols.push(Col::new("total", |s: &Stats| format!("{:.1}", s.persist_ns.total / 1e3)));
        cols.push(Col::new("ns/op", |s: &Stats| s.persist_ns_per_op.map_or("-".into(), |v| format!("{v:.1}"))));
        table(out, "estimated persist time by what was persisted, us (NVAlloc Fig. 11)", "op", &[], &rows, &cols)?;
    }

    if !r.dimms.is_empty() && r.dimms.iter().any(|d| d.writes + d.reads > 0) {
        writeln!(out, "\nDIMMs")?;
        writeln!(
            out,
            "{:>4} {:>12} {:>9} {:>9} {:>12} {:>12} {:>12} {:>9}",
            "dimm", "writes", "xpb_hit%", "seq%", "reads", "media_rd", "media_wr", "write_amp"
        )?;
        let p = |a: u64, b: u64| if b == 0 { "-".to_string() } else { format!("{:.1}", 100.0 * a as f64 / b as f64) };
        for d in &r.dimms {
            writeln!(
                out,
                "{:>4} {:>12} {:>9} {:>9} {:>12} {:>12} {:>12} {:>9.3}",
                d.dimm,
                d.writes,
                p(d.xpbuffer_hits, d.writes),
                p(d.sequential_writes, d.writes),
                d.reads,
                d.media_reads,
                d.media_writes,
                d.write_amplification
            )?;
        }
    }
    Ok(())
}
