//! A synthetic event stream shaped like allocator metadata traffic, for
//! benchmarking the codec without running an allocator. Figures measured on it
//! are labelled as such wherever they are printed.

use crate::event::{Event, FenceKind, FlushKind};

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
    let base = 0x7f3a_0000_0000u64;
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
