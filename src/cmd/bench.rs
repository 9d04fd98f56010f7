//! `pmsim bench`: throughput of the trace writer and reader, measured now on this
//! machine, as a table (medians of several runs).

use super::CmdResult;
use clap::Args;
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
    /// Also time reading this trace file (a real trace, from disk or page cache).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Row {
    what: String,
    events: u64,
    bytes_per_event: f64,
    /// Median over the runs, millions of events per second.
    mevents_per_s: f64,
}

fn median_secs(runs: usize, mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..runs.max(1))
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
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

pub fn run(a: BenchArgs) -> CmdResult {
    // A cache-resident window of events, replayed: the writer sees events the way the
    // tracing backend hands them over (from small per-thread buffers).
    let events = metadata_stream(a.events.min(1 << 16), 4, 42);
    let n = a.events as u64;
    let mut rows = Vec::new();
    for (name, opts) in [
        ("raw", WriterOptions::default()),
        ("zstd-1", WriterOptions { zstd_level: Some(1), ..WriterOptions::default() }),
    ] {
        let bytes = encode(&events, n as usize, &opts);
        let bpe = bytes.len() as f64 / n as f64;
        let w = median_secs(a.runs, || {
            std::hint::black_box(encode(&events, n as usize, &opts));
        });
        rows.push(Row {
            what: format!("write {name} (synthetic, memory)"),
            events: n,
            bytes_per_event: bpe,
            mevents_per_s: n as f64 / w / 1e6,
        });
        let r = median_secs(a.runs, || {
            read_count(&bytes);
        });
        rows.push(Row {
            what: format!("read {name} (synthetic, memory)"),
            events: n,
            bytes_per_event: bpe,
            mevents_per_s: n as f64 / r / 1e6,
        });
    }
    if let Some(path) = &a.trace {
        let mut total = 0u64;
        let mut bytes = 0u64;
        let secs = median_secs(a.runs, || {
            let mut r = match TraceReader::open(path) {
                Ok(r) => r,
                Err(_) => return,
            };
            let mut x = 0u64;
            if let Ok(t) = r.for_each(|rec| x = x.wrapping_add(rec.index)) {
                total = t.events;
                bytes = t.bytes;
            }
            std::hint::black_box(x);
        });
        // Re-read once outside the timing to report a real error if there is one,
        // keeping the events to time the writer on them.
        let mut real: Vec<(u32, pmsim_traces::OwnedEvent)> = Vec::new();
        TraceReader::open(path)?.for_each(|rec| real.push((rec.tid, rec.event.to_owned())))?;
        let borrowed: Vec<(u32, Event<'_>)> = real.iter().map(|(t, e)| (*t, e.as_event())).collect();
        let opts = WriterOptions::default();
        let written = encode(&borrowed, borrowed.len(), &opts);
        let w = median_secs(a.runs, || {
            std::hint::black_box(encode(&borrowed, borrowed.len(), &opts));
        });
        rows.push(Row {
            what: format!("write {} (events in memory)", path.display()),
            events: borrowed.len() as u64,
            bytes_per_event: written.len() as f64 / borrowed.len().max(1) as f64,
            mevents_per_s: borrowed.len() as f64 / w / 1e6,
        });
        rows.push(Row {
            what: format!("read {} (file)", path.display()),
            events: total,
            bytes_per_event: bytes as f64 / total.max(1) as f64,
            mevents_per_s: total as f64 / secs / 1e6,
        });
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!("{:<44} {:>12} {:>11} {:>12}", "benchmark", "events", "bytes/event", "M events/s");
        for r in &rows {
            println!("{:<44} {:>12} {:>11.3} {:>12.1}", r.what, r.events, r.bytes_per_event, r.mevents_per_s);
        }
        println!("(median of {} runs, one thread)", a.runs);
    }
    Ok(())
}
