//! Writer and reader throughput on a synthetic metadata-shaped stream
//! (targets: write ≥ 50 M events/s, read ≥ 100 M events/s, one thread).

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use pmsim_traces::synth::metadata_stream;
use pmsim_traces::{TraceHeader, TraceReader, TraceWriter, WriterOptions};

const N: usize = 1 << 20;

fn encode(events: &[(u32, pmsim_traces::Event<'static>)], n: usize, opts: &WriterOptions) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::with_capacity(N * 3), &TraceHeader::default(), opts).unwrap();
    for (t, e) in events.iter().cycle().take(n) {
        w.write(*t, e).unwrap();
    }
    w.finish().unwrap().0
}

fn bench(c: &mut Criterion) {
    let events = metadata_stream(1 << 16, 4, 42);
    let mut g = c.benchmark_group("codec");
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(20);
    for (name, opts) in
        [("raw", WriterOptions::default()), ("zstd", WriterOptions { zstd_level: Some(1), ..WriterOptions::default() })]
    {
        g.bench_function(format!("write/{name}"), |b| b.iter(|| black_box(encode(&events, N, &opts))));
        let bytes = encode(&events, N, &opts);
        g.bench_function(format!("read/{name}"), |b| {
            b.iter(|| {
                let mut r = TraceReader::new(&bytes[..], "bench").unwrap();
                let mut n = 0u64;
                r.for_each(|rec| n += rec.index & 1).unwrap();
                black_box(n)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
