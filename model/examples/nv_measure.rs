//! Quick measurements of NVAlloc presets on a Threadtest-like loop: native
//! throughput, and flushes (and reflushes) per operation from a traced run.
//!
//! ```text
//! cargo run --release -p pmsim-model --example nv_measure -- [DIR] [ITERS] [OBJECTS]
//! ```
//!
//! Each thread repeats ITERS times: `malloc_to` OBJECTS 64-byte objects into
//! its table, then `free_from` them all. Every number printed is measured by
//! this run. (A stand-in until the workloads module drives allocators.)

use pmsim_model::heap::Heap as H;
use pmsim_model::nvalloc::{NvAlloc, NvAllocConfig, NvAllocThread};
use pmsim_model::{AllocThread, Allocator, FlushInsn, Heap, HeapOptions, Pm};
use pmsim_traces::{OpKind, OwnedEvent, Region, RegionMap, VecSink};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::Instant;

const PRESETS: [&str; 5] = ["base", "+interleaved", "+log", "nvalloc-log", "nvalloc-gc"];

fn threadtest(t: &mut NvAllocThread, iters: u64, objects: u64) {
    let root = H::root_offset(t.tid() as usize);
    let table = t.malloc_to(8 * objects, root).unwrap();
    for _ in 0..iters {
        for i in 0..objects {
            t.malloc_to(64, table + 8 * i).unwrap();
        }
        for i in 0..objects {
            t.free_from(table + 8 * i);
        }
    }
    t.free_from(root);
}

fn heap(dir: &Path, name: &str) -> Heap {
    let opts = HeapOptions { overwrite: true, ..Default::default() };
    Heap::create_with(dir.join(name), 256 << 20, &opts).unwrap()
}

/// Malloc+free pairs per second with `threads` threads.
fn native(dir: &Path, preset: &str, threads: u32, iters: u64, objects: u64) -> f64 {
    let h = heap(dir, "native.heap");
    let pm = Pm::native(&h, FlushInsn::best()).unwrap();
    let nv = NvAlloc::create(&h, pm, NvAllocConfig::preset(preset).unwrap()).unwrap();
    let barrier = Arc::new(Barrier::new(threads as usize + 1));
    let handles: Vec<_> = (1..=threads)
        .map(|tid| {
            let mut t = nv.thread(tid);
            let b = barrier.clone();
            std::thread::spawn(move || {
                b.wait();
                threadtest(&mut t, iters, objects);
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for h in handles {
        h.join().unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    drop(nv.close().unwrap());
    h.close().unwrap();
    (threads as u64 * iters * objects) as f64 / secs
}

/// Per malloc/free operation: flushes by region category, and how many of
/// them were reflushes (distance < 4).
fn traced(dir: &Path, preset: &str, iters: u64, objects: u64) -> (u64, BTreeMap<String, (u64, u64)>) {
    let h = heap(dir, "traced.heap");
    let mut initial: Vec<Region> = Vec::new();
    let (pm, collector) = Pm::traced(&h, FlushInsn::best(), &Default::default(), |hd| {
        initial = hd.regions.clone();
        Ok(VecSink::default())
    })
    .unwrap();
    let nv = NvAlloc::create(&h, pm, NvAllocConfig::preset(preset).unwrap()).unwrap();
    let mut t = nv.thread(1);
    threadtest(&mut t, iters, objects);
    drop(t);
    let pm = nv.close().unwrap();
    let events = collector.finish(pm).unwrap().sink.0;
    drop(h);
    let mut regions = RegionMap::new(&initial);
    let (mut ops, mut depth) = (0, 0);
    let mut recent: Vec<u64> = Vec::new();
    let mut by: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (_, ev) in &events {
        regions.apply(&ev.as_event());
        match ev {
            OwnedEvent::OpBegin { op: OpKind::Malloc | OpKind::Free, .. } => {
                depth += 1;
                ops += 1;
            }
            OwnedEvent::OpEnd { op: OpKind::Malloc | OpKind::Free, .. } => depth -= 1,
            OwnedEvent::Flush { line, .. } => {
                let d = recent.iter().position(|l| l == line);
                if let Some(i) = d {
                    recent.remove(i);
                }
                recent.insert(0, *line);
                recent.truncate(64);
                if depth > 0 {
                    let name = regions.lookup(*line).map_or("(none)".to_string(), |r| r.name.clone());
                    let e = by.entry(name).or_default();
                    e.0 += 1;
                    e.1 += d.is_some_and(|i| i < 4) as u64;
                }
            }
            _ => {}
        }
    }
    (ops, by)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = args.get(1).map_or("/dev/shm", |s| s.as_str()).to_string();
    let iters: u64 = args.get(2).map_or(20, |s| s.parse().unwrap());
    let objects: u64 = args.get(3).map_or(10_000, |s| s.parse().unwrap());
    let dir = tempfile::tempdir_in(dir).unwrap();
    println!(
        "threadtest-like: {iters} iterations x {objects} objects of 64 B per thread, flush = {}",
        FlushInsn::best()
    );
    println!("{:<14} {:>14} {:>14}", "preset", "1 thread op/s", "2 threads op/s");
    for p in PRESETS {
        let one = native(dir.path(), p, 1, iters, objects);
        let two = native(dir.path(), p, 2, iters, objects);
        println!("{p:<14} {one:>14.0} {two:>14.0}");
    }
    println!("\nflushes per malloc/free op (traced, 1 thread, 2 iterations), reflushes (distance < 4) in ()");
    for p in PRESETS {
        let (ops, by) = traced(dir.path(), p, 2, objects);
        let cells: Vec<String> = by
            .iter()
            .map(|(name, (f, r))| format!("{name}: {:.3} ({:.3})", *f as f64 / ops as f64, *r as f64 / ops as f64))
            .collect();
        println!("{p:<14} {}", cells.join(", "));
    }
}
