//! Writes a synthetic trace of N events for measuring `pmsim sim` (throughput
//! and peak memory on traces of growing length) before real allocator traces
//! exist. The events come from `pmsim_traces::synth::metadata_stream`, in
//! chunks with different seeds so the file can be far larger than memory; the
//! header says it is synthetic.
//!
//! `cargo run --release -p pmsim-sim --example synth_trace -- OUT.pmt EVENTS`

use pmsim_traces::synth::{metadata_header, metadata_stream};
use pmsim_traces::{TraceFile, WriterOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, out, n] = &args[..] else {
        return Err("usage: synth_trace OUT.pmt EVENTS".into());
    };
    let n: u64 = n.parse().map_err(|e| format!("EVENTS: {e}"))?;
    let header = metadata_header();
    let mut w = TraceFile::create(out, &header, &WriterOptions::default()).map_err(|e| format!("{out}: {e}"))?;
    let chunk = 1u64 << 20;
    let mut done = 0u64;
    let mut seed = 42;
    while done < n {
        let k = chunk.min(n - done);
        for (t, e) in metadata_stream(k as usize, 4, seed) {
            w.write(t, &e)?;
        }
        done += k;
        seed += 1;
    }
    let s = w.finish()?;
    eprintln!("{out}: {n} synthetic events, {:.3} bytes/event", s.bytes_per_event());
    Ok(())
}
