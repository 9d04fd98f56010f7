//! Cost of the persistence primitives on a tmpfs heap: native (per flush
//! instruction this CPU has) and traced (per event, into a sink that only
//! counts, and into a `.pmt` file on tmpfs; one thread and two).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pmsim_model::heap::HEADER_SIZE;
use pmsim_model::{CpuFeatures, FlushInsn, Heap, HeapOptions, Pm, TraceConfig};
use pmsim_traces::{Event, EventSink, TraceFile, WriterOptions};
use std::io;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Lines the benchmarks cycle through (64 KiB): enough that a flush writes
/// back a line the previous iterations did not just write back.
const LINES: u64 = 1024;
const SIZE: u64 = 16 << 20;

fn heap_dir() -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    }
}

fn file_name(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect()
}

fn new_heap(name: &str) -> (Heap, PathBuf) {
    let path = heap_dir().join(format!("pmsim-bench-{}-{}.heap", std::process::id(), file_name(name)));
    let opts = HeapOptions { overwrite: true, populate: true, ..HeapOptions::default() };
    (Heap::create_with(&path, SIZE, &opts).unwrap(), path)
}

/// Counts events and does nothing else: isolates the tracer's own cost.
struct Count(u64);

impl EventSink for Count {
    fn event(&mut self, _: u32, _: &Event<'_>) -> io::Result<()> {
        self.0 += 1;
        Ok(())
    }
}

fn line(i: u64) -> u64 {
    HEADER_SIZE + (i % LINES) * 64
}

fn native(c: &mut Criterion) {
    let mut g = c.benchmark_group("native");
    g.measurement_time(Duration::from_secs(3));
    let (heap, path) = new_heap("native");
    for insn in CpuFeatures::detect().available() {
        let pm = Pm::native(&heap, insn).unwrap();
        let mut t = pm.thread(0);
        let mut i = 0u64;
        g.bench_function(format!("store+flush+fence/{insn}"), |b| {
            b.iter(|| {
                let off = line(i);
                t.store_u64(off, i);
                t.flush(off);
                t.fence();
                i += 1;
            })
        });
        g.bench_function(format!("flush+fence/{insn}"), |b| {
            b.iter(|| {
                t.flush(line(i));
                t.fence();
                i += 1;
            })
        });
    }
    let pm = Pm::native(&heap, FlushInsn::best()).unwrap();
    let mut t = pm.thread(0);
    let mut i = 0u64;
    g.bench_function("store_u64", |b| {
        b.iter(|| {
            t.store_u64(line(i), i);
            i += 1;
        })
    });
    g.finish();
    drop((t, pm));
    heap.close().unwrap();
    let _ = std::fs::remove_file(path);
}

/// One traced store per iteration, from `threads` threads at once; the time
/// is per iteration, i.e. per `threads` events issued concurrently.
fn traced_stores(c: &mut Criterion, name: &str, threads: u32, to_file: bool) {
    let (heap, path) = new_heap(name);
    let trace_path = heap_dir().join(format!("pmsim-bench-{}-{}.pmt", std::process::id(), file_name(name)));
    let cfg = TraceConfig::default();
    let mut g = c.benchmark_group("traced");
    g.measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(threads as u64));
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            // A fresh trace per sample keeps files small; start-up is outside the timing.
            let run = |pm: &Pm| {
                let start = Instant::now();
                std::thread::scope(|s| {
                    for tid in 0..threads {
                        s.spawn(move || {
                            let mut t = pm.thread(tid);
                            let base = HEADER_SIZE + u64::from(tid) * LINES * 64;
                            for i in 0..iters {
                                t.store_u64(base + (i % LINES) * 64, i);
                            }
                        });
                    }
                });
                start.elapsed()
            };
            if to_file {
                let wopts = WriterOptions::default();
                let (pm, col) =
                    Pm::traced(&heap, FlushInsn::best(), &cfg, |h| TraceFile::create(&trace_path, &h, &wopts)).unwrap();
                let took = run(&pm);
                // Include the drain: the sink must keep up for the figure to mean anything.
                let start = Instant::now();
                let done = col.finish(pm).unwrap();
                let drain = start.elapsed();
                done.sink.finish().unwrap();
                took + drain
            } else {
                let (pm, col) = Pm::traced(&heap, FlushInsn::best(), &cfg, |_| Ok(Count(0))).unwrap();
                let took = run(&pm);
                let start = Instant::now();
                let done = col.finish(pm).unwrap();
                assert_eq!(done.sink.0, iters * threads as u64 + 2 * threads as u64);
                took + start.elapsed()
            }
        })
    });
    g.finish();
    heap.close().unwrap();
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(trace_path);
}

fn traced_persist(c: &mut Criterion) {
    let (heap, path) = new_heap("persist");
    let mut g = c.benchmark_group("traced");
    g.measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(3));
    let (pm, col) = Pm::traced(&heap, FlushInsn::best(), &TraceConfig::default(), |_| Ok(Count(0))).unwrap();
    let mut t = pm.thread(0);
    let mut i = 0u64;
    g.bench_function("store+flush+fence/1 thread/count sink", |b| {
        b.iter(|| {
            let off = line(i);
            t.store_u64(off, i);
            t.flush(off);
            t.fence();
            i += 1;
        })
    });
    g.finish();
    drop(t);
    col.finish(pm).unwrap();
    heap.close().unwrap();
    let _ = std::fs::remove_file(path);
}

fn traced(c: &mut Criterion) {
    traced_stores(c, "store/1 thread/count sink", 1, false);
    traced_stores(c, "store/2 threads/count sink", 2, false);
    traced_stores(c, "store/1 thread/pmt file", 1, true);
    traced_stores(c, "store/2 threads/pmt file", 2, true);
    traced_persist(c);
}

criterion_group!(benches, native, traced);
criterion_main!(benches);
