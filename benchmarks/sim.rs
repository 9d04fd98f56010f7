//! Simulator throughput, one thread, on the synthetic metadata-shaped stream of
//! `pmsim_traces::synth` (not an allocator trace; a real NVAlloc trace will
//! replace it). Targets: full model ≥ 50 M events/s, reflush statistics alone
//! ≥ 150 M events/s. The `file` rows add decoding a raw in-memory trace.

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use pmsim_sim::{Config, Simulator};
use pmsim_traces::synth::{metadata_header, metadata_stream};
use pmsim_traces::{Event, TraceHeader, TraceReader, TraceWriter, WriterOptions};

const N: usize = 1 << 20;

/// The synthetic stream's four 1 MB areas, registered as one region per category.
fn header() -> TraceHeader {
    metadata_header()
}

fn feed(cfg: &Config, h: &TraceHeader, events: &[(u32, Event<'static>)]) -> u64 {
    let mut sim = Simulator::new(cfg.clone(), h).unwrap();
    for (t, e) in events {
        sim.step(*t, e);
    }
    sim.report().overall.reflushes
}

fn bench(c: &mut Criterion) {
    let h = header();
    let events = metadata_stream(N, 4, 42);
    let mut trace = TraceWriter::new(Vec::new(), &h, &WriterOptions::default()).unwrap();
    for (t, e) in &events {
        trace.write(*t, e).unwrap();
    }
    let trace = trace.finish().unwrap().0;
    let full = Config::default();
    let reflush = Config { reflush_only: true, ..Config::default() };
    let eadr = Config { eadr: true, ..Config::default() };

    let mut g = c.benchmark_group("sim (synthetic metadata stream)");
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(20);
    for (name, cfg) in [("full", &full), ("reflush_only", &reflush), ("eadr", &eadr)] {
        g.bench_function(format!("stream/{name}"), |b| b.iter(|| black_box(feed(cfg, &h, &events))));
    }
    for (name, cfg) in [("full", &full), ("reflush_only", &reflush)] {
        g.bench_function(format!("file/{name}"), |b| {
            b.iter_batched(
                || TraceReader::new(&trace[..], "bench.pmt").unwrap(),
                |mut r| {
                    let mut sim = Simulator::new(cfg.clone(), r.header()).unwrap();
                    sim.replay(&mut r).unwrap();
                    black_box(sim.report().overall.reflushes)
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
