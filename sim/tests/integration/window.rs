//! Windows: the figures from a marker or an operation on, beside the whole
//! run's, with the models warmed by what came before.

use pmsim_sim::{Config, Report, Simulator, WindowAt};
use pmsim_traces::{Event, FenceKind, FlushKind, OpKind, TraceHeader};

/// One operation that persists `lines` distinct lines, then flushes the first again.
fn op(sim: &mut Simulator, lines: &[u64]) {
    sim.step(0, &Event::OpBegin { op: OpKind::Malloc, arg: 64 });
    for &l in lines.iter().chain(&lines[..1]) {
        sim.step(0, &Event::Store { addr: l, size: 8, value: None });
        sim.step(0, &Event::Flush { kind: FlushKind::Clwb, line: l });
        sim.step(0, &Event::Fence { kind: FenceKind::Sfence });
    }
    sim.step(0, &Event::OpEnd { op: OpKind::Malloc, result: 0 });
}

/// A setup of 100 distinct first flushes, a marker, then 10 operations that
/// each flush 2 lines and reflush the first.
fn run(at: WindowAt) -> Report {
    let mut sim = Simulator::new(Config::default(), &TraceHeader::default()).unwrap();
    sim.set_window(at);
    for i in 0..100u64 {
        sim.step(0, &Event::Store { addr: 4096 + 64 * i, size: 8, value: None });
        sim.step(0, &Event::Flush { kind: FlushKind::Clwb, line: 4096 + 64 * i });
    }
    sim.step(0, &Event::Fence { kind: FenceKind::Sfence });
    sim.step(0, &Event::Marker { id: 0, label: "window:pmemobj_alloc" });
    for _ in 0..10 {
        op(&mut sim, &[0, 64]);
    }
    sim.report()
}

#[test]
fn a_marker_window_counts_only_what_follows_it() {
    let r = run(WindowAt::Marker("window".into()));
    let w = &r.window.as_ref().expect("the window began").report;
    assert_eq!(r.window.as_ref().unwrap().from, "marker window:pmemobj_alloc");
    assert_eq!(r.window.as_ref().unwrap().events_before, 202);
    assert_eq!(r.overall.flushes, 100 + 30);
    assert_eq!(w.overall.flushes, 30);
    assert_eq!(w.overall.ops, 10);
    // Warm: the first operation's lines 0 and 64 are first flushes in the window too,
    // every later flush of them is a reflush (distance below 4).
    assert_eq!(w.overall.first_flushes, 2);
    assert_eq!(w.overall.reflushes, 28);
    assert_eq!(r.overall.reflushes, 28, "the setup has no reflushes");
    assert!(w.overall.reflush_ratio > r.overall.reflush_ratio);
    assert_eq!(w.events + r.window.as_ref().unwrap().events_before, r.events);
    let (ww, rw) = (w.region("(none)").unwrap(), r.region("(none)").unwrap());
    assert_eq!((ww.flushes, rw.flushes), (30, 130));
    assert!(w.overall.persist_ns.total < r.overall.persist_ns.total);
    assert!(w.window.is_none(), "a window has no window of its own");
    // An exact label, or LABEL:…, and nothing else.
    assert!(run(WindowAt::Marker("window:pmemobj_alloc".into())).window.is_some());
    assert!(run(WindowAt::Marker("win".into())).window.is_none());
    assert!(run(WindowAt::None).window.is_none());
}

#[test]
fn an_operation_window_skips_the_first_n() {
    let r = run(WindowAt::Ops(4));
    let w = r.window.as_ref().expect("6 operations remain");
    assert_eq!(w.from, "operation 5");
    assert_eq!((w.report.overall.ops, w.report.overall.flushes), (6, 18));
    assert_eq!(w.report.overall.reflushes, 18, "warm: the lines were flushed just before");
    assert!(run(WindowAt::Ops(10)).window.is_none(), "no 11th operation");
    let all = run(WindowAt::Ops(0)).window.unwrap();
    assert_eq!(all.report.overall.flushes, 30, "from the first operation: the setup is left out");
}
