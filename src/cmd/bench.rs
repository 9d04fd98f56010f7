//! `pmsim bench`: throughput of the trace writer and reader and of the simulator,
//! measured now on this machine, as a table (medians of several runs, wall-clock
//! and on-CPU: on a shared machine the second is what one dedicated core does).

use super::CmdResult;
use clap::Args;
use pmsim_sim::{Config, Contention, Simulator};
use pmsim_traces::synth::metadata_stream;
use pmsim_traces::{Event, Record, TraceHeader, TraceReader, TraceWriter, Visit, WriterOptions};
use serde::Serialize;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Args)]
pub struct BenchArgs {
    /// Events in the synthetic stream (1 to 100,000,000: it is held in memory).
    #[arg(long, default_value_t = 4_000_000, value_parser = pmsim_traces::input::count_in(1, 100_000_000))]
    events: usize,
    /// Runs per figure; the median is printed (1 to 1000).
    #[arg(long, default_value_t = 5, value_parser = pmsim_traces::input::count_in(1, 1000))]
    runs: usize,
    /// Also time reading this trace file (a real trace, from disk or page cache),
    /// writing its events, and replaying it through the simulator (full model
    /// and reflush statistics alone, and the contention model's pass), file
    /// decoding included. A trace that names code sites is also copied twice
    /// into the temporary directory, with its sites and without, and both
    /// copies replayed in alternation: what the per-site tables cost.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Skip the synthetic-stream rows (time the --trace or --crash files only).
    #[arg(long)]
    no_synthetic: bool,
    /// Also run the crash explorer with its default flags on this trace
    /// (recorded with --values; repeatable), once each, and print its points,
    /// code paths, images, wall and CPU seconds and images per second.
    #[arg(long, value_name = "TRACE")]
    crash: Vec<PathBuf>,
    /// Also run `pmsim specs validate` with its default flags on this trace
    /// (recorded with --values; repeatable) against every specification it
    /// can be validated against, once each, and print its steps, windows,
    /// wall seconds, pmsim's and TLC's CPU seconds and TLC's memory.
    #[arg(long, value_name = "TRACE")]
    validate: Vec<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Row {
    what: String,
    events: u64,
    bytes_per_event: f64,
    /// Median over the runs, millions of events per second (wall clock).
    mevents_per_s: f64,
    /// The same from this thread's CPU time (equal to the wall-clock figure
    /// where the kernel does not report it).
    cpu_mevents_per_s: f64,
    /// What the project asks of this path, M events/s (issues 2 and 5).
    target: Option<f64>,
    /// On the copy with code sites: its on-CPU speed relative to the copy
    /// without, in percent (issue 24 asks for no more than 10 % lost).
    #[serde(skip_serializing_if = "Option::is_none")]
    vs_no_sites_pct: Option<f64>,
}

impl Row {
    fn new(what: String, events: u64, bytes: u64, t: Times, target: Option<f64>) -> Row {
        Row {
            what,
            events,
            bytes_per_event: bytes as f64 / events.max(1) as f64,
            mevents_per_s: events as f64 / t.wall / 1e6,
            cpu_mevents_per_s: events as f64 / t.cpu / 1e6,
            target,
            vs_no_sites_pct: None,
        }
    }
}

/// CPU time of this thread in nanoseconds (Linux schedstat), if available.
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat").ok()?.split_whitespace().next()?.parse().ok()
}

/// Median wall-clock and on-CPU seconds of several runs.
#[derive(Clone, Copy)]
struct Times {
    wall: f64,
    cpu: f64,
}

/// Wall-clock and on-CPU seconds of one call.
fn time_once(f: &mut dyn FnMut()) -> (f64, f64) {
    let (s, c) = (Instant::now(), thread_cpu_ns());
    f();
    let w = s.elapsed().as_secs_f64();
    (w, c.zip(thread_cpu_ns()).map_or(w, |(a, b)| (b - a) as f64 / 1e9))
}

fn median_of(samples: Vec<(f64, f64)>) -> Times {
    let (mut wall, mut cpu): (Vec<f64>, Vec<f64>) = samples.into_iter().unzip();
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Times { wall: median(&mut wall), cpu: median(&mut cpu) }
}

fn median_secs(runs: usize, mut f: impl FnMut()) -> Times {
    median_of((0..runs.max(1)).map(|_| time_once(&mut f)).collect())
}

/// The medians of two things timed in alternation (a, b, a, b, …), so that a
/// change in the machine's load reaches both alike.
fn median_secs_pair(runs: usize, mut a: impl FnMut(), mut b: impl FnMut()) -> (Times, Times) {
    let (ta, tb): (Vec<_>, Vec<_>) = (0..runs.max(1)).map(|_| (time_once(&mut a), time_once(&mut b))).unzip();
    (median_of(ta), median_of(tb))
}

fn encode(events: &[(u32, Event<'_>)], n: usize, opts: &WriterOptions) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::with_capacity(n * 3), &TraceHeader::default(), opts)
        .expect("writing to memory cannot fail");
    for (t, e) in events.iter().cycle().take(n) {
        w.write(*t, e).expect("synthetic events are valid");
    }
    w.finish().expect("writing to memory cannot fail").0
}

fn read_count(bytes: &[u8]) -> u64 {
    let mut r = TraceReader::new(bytes, "bench").expect("just written");
    let mut n = 0u64;
    r.for_each(|rec| n = n.wrapping_add(rec.index)).expect("just written");
    std::hint::black_box(n)
}

/// A byte sink that only counts: the writer's output, measured but not kept.
struct Counting(u64);

impl std::io::Write for Counting {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0 += b.len() as u64;
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Reads a trace file and writes its events again as they come (memory flat
/// in the trace's length); returns the bytes the writer produced.
fn rewrite(path: &std::path::Path) -> Result<u64, Box<dyn std::error::Error>> {
    let mut r = TraceReader::open(path)?;
    let mut w = TraceWriter::new(Counting(0), r.header(), &WriterOptions::default())?;
    let mut err = None;
    r.for_each(|rec| {
        if err.is_none() {
            err = w.write(rec.tid, &rec.event).err();
        }
    })?;
    if let Some(e) = err {
        return Err(e.into());
    }
    Ok(w.finish()?.0 .0)
}

/// A trace in the temporary directory, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Copies events into a writer with the code site of each flush and fence
/// (as the decoder announces it), or all at the unknown site 0.
struct SiteCopy<'w, W: Write> {
    w: &'w mut TraceWriter<W>,
    keep: bool,
    site: u32,
    err: Option<std::io::Error>,
}

impl<'a, W: Write> Visit<'a> for SiteCopy<'_, W> {
    fn event(&mut self, rec: &Record<'a>) {
        let site = if self.keep { self.site } else { 0 };
        if let Err(e) = self.w.write_at(rec.tid, site, &rec.event) {
            self.err.get_or_insert(e);
        }
    }

    fn thread(&mut self, _tid: u32) {
        self.site = 0;
    }

    fn site(&mut self, site: u32) {
        self.site = site;
    }
}

/// Two raw copies of a trace that names code sites, written by the same
/// writer: one with its sites, one without (every flush and fence at the
/// unknown site 0, as a tracer without sites writes them). They differ only
/// in the sites, so replaying both measures what the per-site tables cost.
/// `None` for a trace without sites.
fn site_copies(path: &Path) -> Result<Option<(Scratch, Scratch)>, Box<dyn std::error::Error>> {
    let sites = {
        let mut r = TraceReader::open(path)?;
        r.for_each(|_| {})?;
        r.sites().clone()
    };
    if sites.is_empty() {
        return Ok(None);
    }
    let copy = |keep: bool| -> Result<Scratch, Box<dyn std::error::Error>> {
        let which = if keep { "sites" } else { "no-sites" };
        let out = Scratch(pmsim_traces::owned::scratch_path(
            pmsim_traces::owned::Place::Temp,
            &format!("bench-{which}.pmt"),
        )?);
        let mut r = TraceReader::open(path)?;
        let opts = WriterOptions { values: r.values(), ..WriterOptions::default() };
        let file = std::fs::File::create(&out.0).map_err(|e| format!("{}: cannot create: {e}", out.0.display()))?;
        let mut w = TraceWriter::new(BufWriter::new(file), r.header(), &opts)?;
        if keep {
            for s in sites.iter() {
                w.define_site(s)?;
            }
        }
        let mut c = SiteCopy { w: &mut w, keep, site: 0, err: None };
        while let Some(block) = r.next_block()? {
            block.visit(&mut c)?;
        }
        if let Some(e) = c.err {
            return Err(format!("{}: {e}", out.0.display()).into());
        }
        w.finish()?.0.flush()?;
        Ok(out)
    };
    Ok(Some((copy(true)?, copy(false)?)))
}

/// Replays a trace file through the simulator; returns the events replayed.
fn simulate(path: &std::path::Path, cfg: &Config) -> Result<u64, Box<dyn std::error::Error>> {
    let mut r = TraceReader::open(path)?;
    let mut sim = Simulator::new(cfg.clone(), r.header())?;
    sim.replay(&mut r)?;
    Ok(std::hint::black_box(sim.report()).events)
}

/// Replays a trace file through the contention model (`pmsim sim
/// --contention`'s pass); returns the events replayed.
fn contend(path: &std::path::Path) -> Result<u64, Box<dyn std::error::Error>> {
    let mut c = Contention::new(&Config::default())?;
    c.replay(&mut TraceReader::open(path)?)?;
    Ok(std::hint::black_box(c.report()).events)
}

pub fn run(a: BenchArgs) -> CmdResult {
    if a.no_synthetic && a.trace.is_none() && a.crash.is_empty() && a.validate.is_empty() {
        return Err("--no-synthetic leaves nothing to time: give --trace, --crash or --validate".into());
    }
    // The trace is looked at before the synthetic rows take their seconds.
    if let Some(path) = &a.trace {
        drop(TraceReader::open(path)?);
    }
    let mut rows = Vec::new();
    if !a.no_synthetic {
        synthetic(&a, &mut rows);
    }
    if let Some(path) = &a.trace {
        // Everything streams from the file (a trace can be far larger than
        // memory): read once untimed to report a real error if there is one.
        let totals = TraceReader::open(path)?.for_each(|_| {})?;
        let t_read = median_secs(a.runs, || {
            let mut x = 0u64;
            if let Ok(mut r) = TraceReader::open(path) {
                let _ = r.for_each(|rec| x = x.wrapping_add(rec.index));
            }
            std::hint::black_box(x);
        });
        rows.push(Row::new(
            format!("read {} (file)", path.display()),
            totals.events,
            totals.bytes,
            t_read,
            Some(100.0),
        ));
        // The writer re-encodes the events as they are read, into a sink that
        // only counts bytes; the read time is subtracted to leave the writer's.
        let written = rewrite(path)?;
        let t_both = median_secs(a.runs, || {
            let _ = std::hint::black_box(rewrite(path));
        });
        let t = Times { wall: (t_both.wall - t_read.wall).max(1e-9), cpu: (t_both.cpu - t_read.cpu).max(1e-9) };
        rows.push(Row::new(
            format!("write {} (streamed, read time subtracted)", path.display()),
            totals.events,
            written,
            t,
            Some(50.0),
        ));
        for (name, cfg, target) in [
            ("sim full", Config::default(), 50.0),
            ("sim reflush-only", Config { reflush_only: true, ..Config::default() }, 150.0),
        ] {
            simulate(path, &cfg)?;
            let t = median_secs(a.runs, || {
                let _ = simulate(path, &cfg);
            });
            rows.push(Row::new(
                format!("{name} {} (file)", path.display()),
                totals.events,
                totals.bytes,
                t,
                Some(target),
            ));
        }
        contend(path)?;
        let t = median_secs(a.runs, || {
            let _ = contend(path);
        });
        rows.push(Row::new(
            format!("sim --contention {} (file)", path.display()),
            totals.events,
            totals.bytes,
            t,
            None,
        ));
        if let Some((with, without)) = site_copies(path)? {
            site_cost(&a, (&with.0, &without.0), &mut rows)?;
        }
    }
    let crash_rows = a.crash.iter().map(|p| super::bench_crash::crash_row(p)).collect::<Result<Vec<_>, _>>()?;
    let mut validate_rows = Vec::new();
    for p in &a.validate {
        validate_rows.extend(super::bench_validate::validate_rows(p)?);
    }
    let site_costs: Vec<String> = rows
        .iter()
        .filter_map(|r| Some(format!("{} {:+.1} %", r.what.split(" (").next()?, r.vs_no_sites_pct?)))
        .collect();
    if a.json && !(crash_rows.is_empty() && validate_rows.is_empty()) {
        println!("{}", serde_json::json!({ "rows": rows, "crash": crash_rows, "validate": validate_rows }));
    } else if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        if !crash_rows.is_empty() {
            super::bench_crash::print(&crash_rows);
        }
        if !validate_rows.is_empty() {
            super::bench_validate::print(&validate_rows);
        }
        if !rows.is_empty() {
            println!(
                "{:<48} {:>10} {:>11} {:>12} {:>12} {:>7}",
                "benchmark", "events", "bytes/event", "M events/s", "on-CPU M/s", "target"
            );
            for r in &rows {
                let target = r.target.map_or("-".into(), |t| format!(">= {t}"));
                println!(
                    "{:<48} {:>10} {:>11.3} {:>12.1} {:>12.1} {:>7}",
                    r.what, r.events, r.bytes_per_event, r.mevents_per_s, r.cpu_mevents_per_s, target
                );
            }
            println!("(median of {} runs, one thread; file rows include decoding)", a.runs);
        }
        if !site_costs.is_empty() {
            println!("code sites, on-CPU speed with vs without: {}", site_costs.join(", "));
        }
    }
    Ok(())
}

/// What code sites cost the simulator: the two copies of [`site_copies`]
/// replayed in alternation, full model and reflush statistics alone.
fn site_cost(a: &BenchArgs, (with, without): (&Path, &Path), rows: &mut Vec<Row>) -> CmdResult {
    let totals = |p: &Path| TraceReader::open(p)?.for_each(|_| {});
    let (tw, tn) = (totals(with)?, totals(without)?);
    for (name, cfg) in
        [("sim full", Config::default()), ("sim reflush-only", Config { reflush_only: true, ..Config::default() })]
    {
        simulate(with, &cfg)?;
        simulate(without, &cfg)?;
        let (t_with, t_without) = median_secs_pair(
            a.runs,
            || {
                let _ = simulate(with, &cfg);
            },
            || {
                let _ = simulate(without, &cfg);
            },
        );
        let mut r = Row::new(format!("{name} (copy with sites)"), tw.events, tw.bytes, t_with, None);
        let n = Row::new(format!("{name} (copy without sites)"), tn.events, tn.bytes, t_without, None);
        r.vs_no_sites_pct = Some(100.0 * (r.cpu_mevents_per_s / n.cpu_mevents_per_s - 1.0));
        rows.extend([r, n]);
    }
    Ok(())
}

/// The writer and reader on a synthetic stream held in memory.
fn synthetic(a: &BenchArgs, rows: &mut Vec<Row>) {
    // A cache-resident window of events, replayed: the writer sees events the way the
    // tracing backend hands them over (from small per-thread buffers).
    let events = metadata_stream(a.events.min(1 << 16), 4, 42);
    let n = a.events as u64;
    for (name, opts) in [
        ("raw", WriterOptions::default()),
        ("zstd-1", WriterOptions { zstd_level: Some(1), ..WriterOptions::default() }),
    ] {
        let bytes = encode(&events, n as usize, &opts);
        let t = median_secs(a.runs, || {
            std::hint::black_box(encode(&events, n as usize, &opts));
        });
        rows.push(Row::new(format!("write {name} (synthetic, memory)"), n, bytes.len() as u64, t, Some(50.0)));
        let t = median_secs(a.runs, || {
            read_count(&bytes);
        });
        rows.push(Row::new(format!("read {name} (synthetic, memory)"), n, bytes.len() as u64, t, Some(100.0)));
    }
}
