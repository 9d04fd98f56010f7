//! The contention model on synthetic traces: the behaviours FAST '20 measured
//! that the model must show (the published figures themselves are compared by
//! `pmsim calibrate`).

use pmsim_sim::calibrate::{evaluate, reflush_point, Family, Op, Pattern, Point, Size};
use pmsim_sim::{Config, Contention};
use pmsim_traces::{Event, FenceKind, FlushKind};

fn point(family: Family, op: Op, access: u64, threads: u32, dimms: u32) -> Point {
    let pattern = if family == Family::Wa { Pattern::Seq } else { Pattern::Random };
    Point { family, op, pattern, access, threads, dimms, ..Point::default() }
}

fn eval(p: Point) -> f64 {
    evaluate(&Config::default(), &p, Size::Quick).unwrap()
}

#[test]
fn a_calibration_point_runs_on_its_own_dimm_count_whatever_the_default() {
    // The default machine is the NVAlloc paper's (2 DIMMs); FAST '20's
    // points were measured on 6 or 1, and the fit holds only if each is
    // replayed on its own count.
    assert_eq!(Config::default().optane.dimms, 2);
    let p = point(Family::Bandwidth, Op::Clwb, 256, 8, 6);
    let mut six = Config::default();
    six.optane.dimms = 6;
    let on = |cfg: &Config| evaluate(cfg, &p, Size::Quick).unwrap();
    assert_eq!(on(&Config::default()), on(&six));
    // And the count matters: the same point on 2 DIMMs is another value.
    assert_ne!(on(&six), eval(point(Family::Bandwidth, Op::Clwb, 256, 8, 2)));
}

#[test]
fn write_amplification_is_one_while_the_working_set_fits_and_two_beyond() {
    for ws in [1024, 4096, 16384] {
        let wa = eval(point(Family::Wa, Op::Clwb, ws, 1, 1));
        assert!((wa - 1.0).abs() < 0.05, "{ws} B: {wa}");
    }
    for ws in [49152, 65536, 1 << 20] {
        let wa = eval(point(Family::Wa, Op::Clwb, ws, 1, 1));
        assert!((1.85..=2.05).contains(&wa), "{ws} B: {wa}");
    }
    // Between, it rises gradually (random replacement), not at once.
    let mid = eval(point(Family::Wa, Op::Clwb, 24576, 1, 1));
    assert!(mid > 1.1 && mid < 1.8, "24 KB: {mid}");
}

#[test]
fn bandwidth_rises_peaks_and_falls_with_threads() {
    // FAST '20 Fig. 4, store + clwb, random 256 B, six DIMMs: 1.4 GB/s at 1
    // thread, a peak of 10.0 at 8, 7.5 at 24.
    let threads = [1, 2, 4, 6, 8, 12, 16, 24];
    let bw: Vec<f64> = threads.iter().map(|&t| eval(point(Family::Bandwidth, Op::Clwb, 256, t, 6))).collect();
    let peak = (0..bw.len()).max_by(|&a, &b| bw[a].total_cmp(&bw[b])).unwrap();
    // One thread is bound by its own latency: two do about twice as much.
    assert!(bw[1] > 1.8 * bw[0] && bw[2] > 1.8 * bw[1], "{bw:?}");
    assert!((4..=8).contains(&threads[peak]), "peak at {} threads: {bw:?}", threads[peak]);
    // Past the peak, more threads lose bandwidth: a fall, not a plateau.
    assert!(bw[7] < 0.85 * bw[peak], "{bw:?}");
    assert!(bw.windows(2).skip(peak).all(|w| w[1] < w[0] * 1.02), "falls steadily past the peak: {bw:?}");
    // Most of the fall is the writers' head-of-line blocking: without it the
    // same model keeps most of its peak (the rest is what the interleaved
    // writes lose in the XPBuffer and in locality).
    let mut cfg = Config::default();
    cfg.timing.writer_ns = 0.0;
    let flat = |t| evaluate(&cfg, &point(Family::Bandwidth, Op::Clwb, 256, t, 6), Size::Quick).unwrap();
    assert!(flat(24) > 0.85 * flat(8) && flat(24) > 1.15 * bw[7], "{} {} {bw:?}", flat(24), flat(8));
    // One DIMM peaks at fewer threads and falls too.
    let one: Vec<f64> = [1, 2, 4, 16].iter().map(|&t| eval(point(Family::Bandwidth, Op::Ntstore, 256, t, 1))).collect();
    assert!(one[3] < 0.9 * one[1], "{one:?}");
    // 24 threads' writes overflow one DIMM's write-pending queue (16 threads'
    // fill it); the threads waiting for an entry write to the DIMM too, so
    // the fall goes on (FAST '20 Fig. 4, one DIMM: 0.94 GB/s at 16, 0.80 at 24).
    let (t16, t24) = (
        eval(point(Family::Bandwidth, Op::Ntstore, 256, 16, 1)),
        eval(point(Family::Bandwidth, Op::Ntstore, 256, 24, 1)),
    );
    assert!(t24 < 0.9 * t16, "16 threads {t16} GB/s, 24 threads {t24}");
}

/// `ops` operations per thread (a random 256 B write: four lines stored and
/// written back, then a fence), all threads writing to one DIMM; the makespan
/// per operation of a thread.
fn ns_per_op(threads: u32, ops: u64) -> f64 {
    let mut cfg = Config::default();
    cfg.optane.dimms = 1;
    let mut c = Contention::new(&cfg).unwrap();
    for t in 0..threads {
        c.push(t, &Event::ThreadStart);
    }
    for i in 0..ops {
        for t in 0..threads {
            let base = ((t as u64 + 1) << 30) + (i * 0x9E37_79B9 % (1 << 20)) * 256;
            c.push(t, &Event::OpBegin { op: pmsim_traces::OpKind::Malloc, arg: 0 });
            for line in (0..4).map(|l| base + l * 64) {
                c.push(t, &Event::Store { addr: line, size: 8, value: None });
                c.push(t, &Event::Flush { kind: FlushKind::Clwb, line });
            }
            c.push(t, &Event::Fence { kind: FenceKind::Sfence });
            c.push(t, &Event::OpEnd { op: pmsim_traces::OpKind::Malloc, result: 0 });
        }
    }
    let r = c.report();
    assert_eq!(r.ops, threads as u64 * ops);
    r.makespan_ns / ops as f64
}

#[test]
fn threads_sharing_dimms_cost_more_per_operation() {
    // Two threads on one DIMM wait for each other; many wait longer.
    let one = ns_per_op(1, 2000);
    let two = ns_per_op(2, 2000);
    assert!(two > one, "1 thread {one} ns/op, 2 threads {two} ns/op");
    let many = ns_per_op(16, 500);
    assert!(many > 4.0 * one, "16 threads {many} ns/op vs {one}");
}

#[test]
fn the_same_trace_gives_the_same_figures() {
    let run = || {
        let mut cfg = Config::default();
        cfg.optane.dimms = 2;
        let mut c = Contention::new(&cfg).unwrap();
        for i in 0..20_000u64 {
            let t = (i * 7 % 5) as u32;
            let line = (i * 0x9E37_79B9_7F4A) % (1 << 22) * 64;
            c.push(t, &Event::Store { addr: line, size: 64, value: None });
            c.push(t, &Event::Flush { kind: FlushKind::Clwb, line });
            if i % 3 == 0 {
                c.push(t, &Event::Fence { kind: FenceKind::Sfence });
            }
        }
        c.report()
    };
    let (a, b) = (run(), run());
    assert_eq!(a, b);
    assert!(a.write_amplification > 1.0 && a.makespan_ns > 0.0);
}

/// NVAlloc §3.1's reflush experiment: the wait falls with the lines flushed
/// in between, because each of them takes time off what is left of the
/// previous write (`reflush.timed`); past the threshold it is a regular
/// write. By distance (`reflush.timed = false`) it is the latency table.
#[test]
fn a_reflush_waits_less_the_more_lines_are_flushed_between() {
    let at = |cfg: &Config, distance| evaluate(cfg, &Point { distance, ..reflush_point() }, Size::Quick).unwrap();
    let timed = Config::default();
    assert!(timed.reflush.timed);
    let lat: Vec<f64> = (0..=4).map(|d| at(&timed, d)).collect();
    assert!(lat.windows(2).take(3).all(|w| w[0] - w[1] > 30.0), "{lat:?}");
    assert!((lat[0] - timed.latency.reflush_ns[0]).abs() < 100.0, "{lat:?}");
    let regular = eval(point(Family::Latency, Op::Clwb, 64, 1, 2));
    assert!((lat[4] - regular).abs() < 10.0, "{lat:?} vs {regular}");
    let mut by_distance = Config::default();
    by_distance.reflush.timed = false;
    let table = &by_distance.latency.reflush_ns;
    let fall = at(&by_distance, 0) - at(&by_distance, 3);
    assert!((fall - (table[0] - table[3])).abs() < 10.0, "{fall}");
}
