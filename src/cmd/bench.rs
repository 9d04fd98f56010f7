//! `pmsim bench`: throughput of the trace writer and reader and of the simulator,
//! measured now on this machine, as a table (medians of several runs, wall-clock
//! and on-CPU: on a shared machine the second is what one dedicated core does).

use super::CmdResult;
use clap::Args;
use pmsim_sim::{Config, Contention, Simulator};
use pmsim_traces::synth::metadata_stream;
use pmsim_traces::{Event, TraceHeader, TraceReader, TraceWriter, WriterOptions};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Args)]
pub struct BenchArgs {
    /// Events in the synthetic stream.
    #[arg(long, default_value_t = 4_000_000)]
    events: usize,
    /// Runs per figure; the median is printed.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Also time reading this trace file (a real trace, from disk or page cache),
    /// writing its events, and replaying it through the simulator (full model
    /// and reflush statistics alone, and the contention model's pass), file
    /// decoding included.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Skip the synthetic-stream rows (time the --trace file only).
    #[arg(long, requires = "trace")]
    no_synthetic: bool,
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

fn median_secs(runs: usize, mut f: impl FnMut()) -> Times {
    let (mut wall, mut cpu): (Vec<f64>, Vec<f64>) = (0..runs.max(1))
        .map(|_| {
            let (s, c) = (Instant::now(), thread_cpu_ns());
            f();
            let w = s.elapsed().as_secs_f64();
            (w, c.zip(thread_cpu_ns()).map_or(w, |(a, b)| (b - a) as f64 / 1e9))
        })
        .unzip();
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Times { wall: median(&mut wall), cpu: median(&mut cpu) }
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
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
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
