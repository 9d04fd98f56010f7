//! How run reports read as text: one run's lines, the summary table of
//! several runs, and Fragbench's peak-memory table. The command line prints
//! through these (beside what only it knows: where the heap and the trace
//! went), as the simulator's report prints through `pmsim_sim::print`.

use super::RunReport;
use crate::runner::AllocInfo;
use std::io::{self, Write};

/// Bytes as MiB, one decimal.
pub fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

/// A rate with a k/M prefix (and the space before the unit).
pub fn rate(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} k", x / 1e3)
    } else {
        format!("{x:.0} ")
    }
}

/// The first line of a run: workload, scale, allocator, threads, seed.
pub fn write_head(w: &mut dyn Write, alloc: &AllocInfo, r: &RunReport) -> io::Result<()> {
    writeln!(
        w,
        "run          {} ({}) on {} [{}], {} thread(s), seed {}",
        r.workload, r.scale, alloc.spec, alloc.name, r.threads, r.seed
    )
}

/// What a run measured: operations, throughput, footprints, the heap's
/// samples, the working-set snapshot, the workload's own figures and the
/// CPU profile.
pub fn write_body(w: &mut dyn Write, r: &RunReport) -> io::Result<()> {
    writeln!(w, "operations   {} allocator operations in {:.3} s", r.ops, r.elapsed_s)?;
    writeln!(
        w,
        "throughput   {}ops/s ({} operations in {:.3} s measured)",
        rate(r.ops_per_s),
        r.measured_ops,
        r.measured_s
    )?;
    writeln!(w, "peak         live {}, mapped {}", mib(r.peak.live_bytes), mib(r.peak.mapped_bytes))?;
    writeln!(w, "end          live {}, mapped {}", mib(r.end.live_bytes), mib(r.end.mapped_bytes))?;
    if let (Some(first), Some(last)) = (r.series.first(), r.series.last()) {
        let most = r.series.iter().map(|p| p.footprint.mapped_bytes).max().unwrap_or(0);
        writeln!(
            w,
            "series       {} heap samples from operation {} to {} (mapped up to {}; the points are in --json)",
            r.series.len(),
            first.ops,
            last.ops,
            mib(most)
        )?;
    }
    match &r.snapshot {
        Some(s) => {
            write!(
                w,
                "at {:<9} live {}, mapped {}",
                "snapshot",
                mib(s.footprint.live_bytes),
                mib(s.footprint.mapped_bytes)
            )?;
            writeln!(w, " ({})", s.at)?;
            match s.slabs {
                Some(u) => writeln!(
                    w,
                    "slabs        {} (0–30 %: {}, 30–70 %: {}, 70–100 %: {})",
                    u.low + u.mid + u.high,
                    u.low,
                    u.mid,
                    u.high
                )?,
                None => writeln!(w, "slabs        (this allocator reports no slab breakdown)")?,
            }
        }
        None => writeln!(w, "slabs        (this workload has no working-set point)")?,
    }
    for (k, v) in &r.extra {
        writeln!(w, "{:<12} {v}", k)?;
    }
    if let Some(c) = &r.cpu {
        writeln!(
            w,
            "cpu          {:.1} ns per operation: malloc {:.1}, free {:.1}, between operations {:.1} \
             ({:.3} s on CPU of {:.3} s{}{})",
            c.total_ns,
            c.malloc_ns,
            c.free_ns,
            c.outside_ns,
            c.cpu_s,
            c.wall_s,
            match c.cores {
                0 => String::new(),
                1 => ", the workers on one core".into(),
                n => format!(", the workers on {n} cores"),
            },
            match c.disturbed_ops {
                0 => String::new(),
                n => format!("; {n} operations descheduled, counted at their kind's mean"),
            }
        )?;
    }
    Ok(())
}

/// The summary of several runs. `vs first` is each run's ops/s over that of
/// the first allocator listed, on the same workload and thread count, so a
/// native comparison (e.g. `--alloc nvalloc-log,base,pmdk`) reads off directly.
pub fn write_summary(w: &mut dyn Write, runs: &[(&AllocInfo, &RunReport)]) -> io::Result<()> {
    let aw = runs.iter().map(|(a, _)| a.spec.chars().count()).max().unwrap_or(0).max(9);
    let first = runs.first().map(|(a, _)| a.spec.as_str()).unwrap_or("");
    let vs = format!("vs {first}");
    let vw = vs.chars().count().max(8);
    writeln!(
        w,
        "{:<14} {:<aw$} {:>3} {:>12} {:>vw$} {:>12} {:>12} {:>16}",
        "workload", "allocator", "thr", "ops/s", vs, "peak live", "peak mapped", "slabs lo/mid/hi"
    )?;
    for (a, r) in runs {
        let slabs = match r.snapshot.as_ref().and_then(|s| s.slabs) {
            Some(u) => format!("{}/{}/{}", u.low, u.mid, u.high),
            None => "-".into(),
        };
        let base = runs
            .iter()
            .find(|(ba, b)| ba.spec == first && b.workload == r.workload && b.threads == r.threads)
            .map(|(_, b)| b.ops_per_s);
        let ratio = match base {
            Some(b) if b > 0.0 => format!("{:.2}×", r.ops_per_s / b),
            _ => "-".into(),
        };
        writeln!(
            w,
            "{:<14} {:<aw$} {:>3} {:>12.0} {:>vw$} {:>12} {:>12} {:>16}",
            r.workload,
            a.spec,
            r.threads,
            r.ops_per_s,
            ratio,
            mib(r.peak.live_bytes),
            mib(r.peak.mapped_bytes),
            slabs
        )?;
    }
    Ok(())
}

/// Fragbench's figure: peak mapped memory per workload (rows) and allocator
/// (columns); nothing when no run is a Fragbench one.
pub fn write_fragbench(w: &mut dyn Write, runs: &[(&AllocInfo, &RunReport)]) -> io::Result<()> {
    let frag: Vec<&(&AllocInfo, &RunReport)> =
        runs.iter().filter(|(_, r)| r.workload.starts_with("fragbench-")).collect();
    if frag.is_empty() {
        return Ok(());
    }
    let mut cols: Vec<String> = Vec::new();
    let mut rows: Vec<String> = Vec::new();
    let col = |(a, r): &(&AllocInfo, &RunReport)| format!("{} ×{}", a.spec, r.threads);
    for o in &frag {
        if !cols.contains(&col(o)) {
            cols.push(col(o));
        }
        if !rows.contains(&o.1.workload) {
            rows.push(o.1.workload.clone());
        }
    }
    writeln!(w)?;
    writeln!(
        w,
        "Fragbench peak memory (MiB mapped by the allocator; live-data cap and peak live in the last columns)"
    )?;
    let cw = cols.iter().map(|c| c.chars().count()).max().unwrap_or(0).max(10);
    write!(w, "{:<14}", "workload")?;
    for c in &cols {
        write!(w, " {c:>cw$}")?;
    }
    writeln!(w, " {:>10} {:>10}", "live cap", "peak live")?;
    for row in &rows {
        write!(w, "{row:<14}")?;
        let mut cap = 0;
        let mut live = 0;
        for c in &cols {
            match frag.iter().find(|o| &o.1.workload == row && &col(o) == c) {
                Some((_, r)) => {
                    write!(w, " {:>cw$.1}", r.peak.mapped_bytes as f64 / (1 << 20) as f64)?;
                    cap = r.params.get("live_cap").and_then(|v| v.as_u64()).unwrap_or(0);
                    live = live.max(r.peak.live_bytes);
                }
                None => write!(w, " {:>cw$}", "-")?,
            }
        }
        writeln!(w, " {:>10.1} {:>10.1}", cap as f64 / (1 << 20) as f64, live as f64 / (1 << 20) as f64)?;
    }
    Ok(())
}
