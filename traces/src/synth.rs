//! A synthetic event stream shaped like allocator metadata traffic, for
//! benchmarking the codec without running an allocator. Figures measured on it
//! are labelled as such wherever they are printed.

use crate::event::{Category, Event, FenceKind, FlushKind};
use crate::header::{Component, Region, TraceHeader};

/// `n` events of `threads` threads: bursts of 8 B stores into a few hot metadata
/// lines, each followed by flushes of the touched lines and a fence, with a thread
/// switch every burst (the shape of small-allocation bitmap + WAL updates).
/// Deterministic in `seed`.
pub fn metadata_stream(n: usize, threads: u32, seed: u64) -> Vec<(u32, Event<'static>)> {
    let mut x = seed | 1;
    let mut rnd = move || {
        // xorshift64*: fast, deterministic, good enough for addresses.
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let base = BASE;
    let mut out = Vec::with_capacity(n + 16);
    while out.len() < n {
        let tid = (rnd() % threads.max(1) as u64) as u32;
        let region = base + (rnd() % 4) * (1 << 20) + tid as u64 * (64 << 10);
        let line = region + (rnd() % 512) * 64;
        let stores = 1 + rnd() % 4;
        for i in 0..stores {
            out.push((tid, Event::Store { addr: line + i * 8, size: 8, value: None }));
        }
        out.push((tid, Event::Flush { kind: FlushKind::Clwb, line }));
        if rnd() % 4 == 0 {
            let other = line + 64 * (1 + rnd() % 8);
            out.push((tid, Event::Store { addr: other, size: 8, value: None }));
            out.push((tid, Event::Flush { kind: FlushKind::Clwb, line: other }));
        }
        out.push((tid, Event::Fence { kind: FenceKind::Sfence }));
    }
    out.truncate(n);
    out
}

/// Where [`metadata_stream`] puts its four regions (1 MiB each, in this order).
const BASE: u64 = 0x7f3a_0000_0000;

/// A header for [`metadata_stream`]: four threads and its four regions, one per
/// category, so per-region figures on the synthetic stream mean something.
pub fn metadata_header() -> TraceHeader {
    let cats =
        [("slab headers", Category::Meta), ("wal", Category::Wal), ("log", Category::Log), ("data", Category::Data)];
    TraceHeader {
        workload: Component { name: "synthetic metadata_stream (not an allocator)".into(), ..Component::default() },
        threads: 4,
        regions: cats
            .iter()
            .enumerate()
            .map(|(i, &(name, category))| Region {
                id: i as u64,
                name: name.into(),
                category,
                base: BASE + ((i as u64) << 20),
                len: 1 << 20,
            })
            .collect(),
        ..TraceHeader::default()
    }
}
