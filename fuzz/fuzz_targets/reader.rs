//! Any byte string fed to the trace reader gives events or one error, never a
//! panic, a hang or a huge allocation. Run: `cargo +nightly fuzz run reader`
//! from `fuzz/` (seeds: `traces/samples/`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pmsim_traces::{BlockDecoder, TraceReader};

fuzz_target!(|data: &[u8]| {
    // The record decoder on its own: block checksums would otherwise keep the
    // fuzzer from reaching it with anything but valid payloads. Its fast path
    // (decode_all) and its careful path (the iterator) must agree: the same
    // events, the same error at the same byte.
    for values in [false, true] {
        let mut fast = Vec::new();
        let fast_err = BlockDecoder::new(data, values, 0).decode_all(|rec| fast.push(rec.event.to_owned())).err();
        let mut careful = Vec::new();
        let mut careful_err = None;
        for rec in BlockDecoder::new(data, values, 0) {
            match rec {
                Ok(rec) => careful.push(rec.event.to_owned()),
                Err(e) => careful_err = Some(e),
            }
        }
        assert_eq!(fast, careful);
        assert_eq!(fast_err, careful_err);
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
