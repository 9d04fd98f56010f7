//! The O(log n) reflush-distance method equals the definition, computed naively,
//! on random traces — including with a time array so small that it is
//! renumbered every few flushes.

use pmsim_sim::distance::bucket;
use pmsim_sim::{Config, DistanceTracker, Scope, Simulator};
use pmsim_traces::{Event, FlushKind, TraceHeader};
use proptest::prelude::*;
use std::collections::HashSet;

/// The definition: distinct lines flushed since the previous flush of the same
/// line, by scanning back.
fn naive(lines: &[u64]) -> Vec<Option<u64>> {
    (0..lines.len())
        .map(|i| {
            let prev = (0..i).rev().find(|&j| lines[j] == lines[i])?;
            Some(lines[prev + 1..i].iter().collect::<HashSet<_>>().len() as u64)
        })
        .collect()
}

/// The same by an LRU stack (move-to-front list): the distance is the depth of
/// the line in the stack. O(n × lines), fast enough for long sequences.
fn naive_stack(lines: &[u64]) -> Vec<Option<u64>> {
    let mut stack: Vec<u64> = Vec::new();
    lines
        .iter()
        .map(|l| {
            let d = stack.iter().rposition(|x| x == l).map(|i| {
                stack.remove(i);
                (stack.len() - i) as u64
            });
            stack.push(*l);
            d
        })
        .collect()
}

/// Line sequences with much reuse (few distinct lines) or little.
fn lines() -> impl Strategy<Value = Vec<u64>> {
    prop_oneof![
        proptest::collection::vec(0u64..6, 0..300),
        proptest::collection::vec(0u64..40, 0..400),
        proptest::collection::vec(any::<u64>().prop_map(|x| x % 1000 + (x >> 40 << 20)), 0..300),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn tracker_equals_naive(seq in lines(), min_cap in 2u32..12) {
        let expect = naive(&seq);
        let mut small = DistanceTracker::with_min_capacity(min_cap);
        let mut big = DistanceTracker::new();
        for (i, &l) in seq.iter().enumerate() {
            prop_assert_eq!(small.flush(l * 64), expect[i], "flush {} of {:?}", i, seq);
            prop_assert_eq!(big.flush(l * 64 + 63), expect[i]);
        }
        prop_assert_eq!(small.lines() as usize, seq.iter().collect::<HashSet<_>>().len());
    }

    /// Long sequences, so that previous flushes lie many words back and the
    /// Fenwick tree (not only the popcount of nearby words) is used.
    #[test]
    fn tracker_equals_naive_on_long_sequences(
        seq in proptest::collection::vec(0u64..400, 500..4000),
        min_cap in prop_oneof![2u32..100, 1000u32..5000],
    ) {
        let expect = naive_stack(&seq);
        let mut t = DistanceTracker::with_min_capacity(min_cap);
        for (i, &l) in seq.iter().enumerate() {
            prop_assert_eq!(t.flush(l * 64), expect[i], "flush {}", i);
        }
    }

    #[test]
    fn the_two_naive_methods_agree(seq in lines()) {
        prop_assert_eq!(naive(&seq), naive_stack(&seq));
    }

    #[test]
    fn simulator_histograms_equal_naive_per_scope(
        flushes in proptest::collection::vec((0u32..3, 0u64..30), 0..300),
        scope in prop_oneof![Just(Scope::Thread), Just(Scope::Dimm), Just(Scope::Global)],
        threshold in 0u64..8,
    ) {
        let mut cfg = Config::default();
        cfg.reflush.scope = scope;
        cfg.reflush.threshold = threshold;
        cfg.optane.interleave_bytes = 256; // spread 30 lines over the DIMMs
        let dimms = cfg.optane.dimms as u64;
        let mut sim = Simulator::new(cfg, &TraceHeader::default()).unwrap();
        sim.set_tracker_min_capacity(2);
        for &(t, l) in &flushes {
            sim.step(t, &Event::Flush { kind: FlushKind::Clwb, line: l * 64 });
        }
        let r = sim.report();
        // The naive answer, stream by stream.
        let key = |&(t, l): &(u32, u64)| match scope {
            Scope::Thread => t as u64,
            Scope::Dimm => (l * 64 / 256) % dimms,
            Scope::Global => 0,
        };
        let mut hist = vec![0u64; pmsim_sim::distance::HIST_BUCKETS];
        let mut reflushes = 0;
        let keys: HashSet<u64> = flushes.iter().map(key).collect();
        for k in keys {
            let stream: Vec<u64> = flushes.iter().filter(|f| key(f) == k).map(|f| f.1).collect();
            for d in naive(&stream) {
                hist[bucket(d)] += 1;
                reflushes += matches!(d, Some(d) if d < threshold) as u64;
            }
        }
        for (b, &n) in hist.iter().enumerate() {
            prop_assert_eq!(r.overall.bucket(&pmsim_sim::distance::bucket_label(b)), n);
        }
        prop_assert_eq!(r.overall.reflushes, reflushes);
        prop_assert_eq!(r.overall.flushes, flushes.len() as u64);
    }
}

#[test]
fn memory_is_bounded_by_distinct_lines_not_flushes() {
    let mut t = DistanceTracker::new();
    for i in 0..2_000_000u64 {
        t.flush((i * 7919 % 10_000) * 64);
    }
    let after_2m = t.heap_bytes();
    for i in 0..8_000_000u64 {
        t.flush((i * 7919 % 10_000) * 64);
    }
    assert_eq!(t.heap_bytes(), after_2m, "10 M flushes of 10 000 lines use what 2 M did");
    assert!(after_2m < 10_000 * 100, "{after_2m} bytes for 10 000 lines");
    assert!(t.compactions() > 100);
}
