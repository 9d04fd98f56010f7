//! Simulator throughput on the synthetic metadata stream (not an allocator
//! trace), per model, as wall-clock and on-CPU rates: on a shared machine the
//! second is what one dedicated core would do. The criterion bench
//! (`cargo bench -p pmsim-benches --bench sim`) measures the same loops with statistics.
//!
//! `cargo run --release -p pmsim-sim --example sim_speed -- [EVENTS [PASSES [MODEL]]]`
//! (MODEL: full, eadr or reflush_only; the environment variable WINDOW sets
//! how many distinct synthetic events are replayed in a loop, 65536 by default).

use pmsim_sim::{Config, Simulator};
use pmsim_traces::synth::metadata_stream;
use pmsim_traces::{Category, Region, TraceHeader};
use std::time::Instant;

/// CPU time of this thread in nanoseconds (Linux schedstat), if available.
fn cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat").ok()?.split_whitespace().next()?.parse().ok()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: u64| args.get(i).map_or(d, |a| a.parse().expect("EVENTS and PASSES are numbers"));
    let n = num(0, 1 << 22) as usize;
    let passes = num(1, 5);
    let only = args.get(2);
    let base = 0x7f3a_0000_0000u64;
    let cats = [Category::Meta, Category::Wal, Category::Log, Category::Data];
    let header = TraceHeader {
        threads: 4,
        regions: (0..4)
            .map(|i| Region {
                id: i,
                name: cats[i as usize].name().into(),
                category: cats[i as usize],
                base: base + (i << 20),
                len: 1 << 20,
            })
            .collect(),
        ..TraceHeader::default()
    };
    // A window of events replayed in a loop, as `pmsim bench` and the codec
    // bench do: a file replay also reuses one small block buffer, whereas
    // streaming a multi-gigabyte vector would measure memory bandwidth.
    let window = std::env::var("WINDOW").map_or(1 << 16, |w| w.parse().expect("WINDOW is a number"));
    let events = metadata_stream(n.min(window), 4, 42);
    println!("{:<14} {:>10} {:>14} {:>14}", "model", "events", "wall M ev/s", "on-CPU M ev/s");
    for (name, cfg) in [
        ("full", Config::default()),
        ("eadr", Config { eadr: true, ..Config::default() }),
        ("reflush_only", Config { reflush_only: true, ..Config::default() }),
    ] {
        if only.is_some_and(|m| m != name) {
            continue;
        }
        let mut best = (f64::MAX, f64::MAX);
        for _ in 0..passes {
            let (w, c) = (Instant::now(), cpu_ns());
            let mut sim = Simulator::new(cfg.clone(), &header).unwrap();
            for (t, e) in events.iter().cycle().take(n) {
                sim.step(*t, e);
            }
            std::hint::black_box(sim.report());
            let wall = w.elapsed().as_secs_f64();
            let cpu = c.zip(cpu_ns()).map_or(wall, |(a, b)| (b - a) as f64 / 1e9);
            best = (best.0.min(wall), best.1.min(cpu));
        }
        println!("{:<14} {:>10} {:>14.1} {:>14.1}", name, n, n as f64 / best.0 / 1e6, n as f64 / best.1 / 1e6);
    }
    println!("(synthetic metadata_stream, 4 threads; best of {passes} passes, one thread)");
}
