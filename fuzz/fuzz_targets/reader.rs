//! Any byte string fed to the trace reader gives events or one error, never a
//! panic, a hang or a huge allocation. Run: `cargo +nightly fuzz run reader`
//! from `fuzz/` (seeds: `traces/samples/`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pmsim_traces::{BlockDecoder, TraceReader};

fuzz_target!(|data: &[u8]| {
    // The record decoder on its own: block checksums would otherwise keep the
    // fuzzer from reaching it with anything but valid payloads.
    for values in [false, true] {
        let mut n = 0u64;
        let _ = BlockDecoder::new(data, values, 0).decode_all(|rec| n = n.wrapping_add(rec.index));
        for rec in BlockDecoder::new(data, values, 0) {
            if rec.is_err() {
                break;
            }
        }
    }
    if let Ok(mut r) = TraceReader::new(data, "fuzz.pmt") {
        let mut n = 0u64;
        let _ = r.for_each(|rec| n = n.wrapping_add(rec.index));
    }
    // The iterator path must agree with for_each on what it accepts.
    if let Ok(mut r) = TraceReader::new(data, "fuzz.pmt") {
        while let Ok(Some(block)) = r.next_block() {
            for rec in block.records() {
                if rec.is_err() {
                    break;
                }
            }
        }
    }
});
