//! `pmsim lint`'s findings on hand-built traces: each finding is found where
//! it is, at its site, and not in the clean variant of the same trace.

use pmsim_sim::lint::{Finding, LintReport, Linter};
use pmsim_traces::{Event, FenceKind, FlushKind, Site, TraceHeader, TraceReader, TraceWriter, WriterOptions};

const STORE: fn(u64) -> Event<'static> = |a| Event::Store { addr: a, size: 8, value: None };
const FLUSH: fn(u64) -> Event<'static> = |l| Event::Flush { kind: FlushKind::Clwb, line: l };
const FENCE: Event<'static> = Event::Fence { kind: FenceKind::Sfence };

/// Lints the events (thread, site, event); site 7 is defined.
fn lint(events: &[(u32, u32, Event<'_>)]) -> LintReport {
    let mut w = TraceWriter::new(Vec::new(), &TraceHeader::default(), &WriterOptions::default()).unwrap();
    w.define_site(&Site { id: 7, file: "a.rs".into(), line: 3, ..Site::default() }).unwrap();
    for (t, s, e) in events {
        w.write_at(*t, *s, e).unwrap();
    }
    let bytes = w.finish().unwrap().0;
    let mut r = TraceReader::new(&bytes[..], "mem.pmt").unwrap();
    let mut l = Linter::default();
    while let Some(b) = r.next_block().unwrap() {
        b.visit(&mut l).unwrap();
    }
    l.report(r.sites(), 5)
}

/// Exactly `f` is found `n` times, nothing else.
fn only(r: &LintReport, f: Finding, n: u64) {
    for k in Finding::ALL {
        assert_eq!(r.count(k), if k == f { n } else { 0 }, "{k:?} in {r:?}");
    }
}

/// Store, flush, fence: durable, nothing to say.
fn clean() -> Vec<(u32, u32, Event<'static>)> {
    vec![(0, 0, STORE(0)), (0, 7, FLUSH(0)), (0, 7, FENCE), (1, 0, STORE(128)), (1, 0, FLUSH(128)), (1, 0, FENCE)]
}

#[test]
fn a_clean_trace_has_no_findings() {
    let r = lint(&clean());
    for k in Finding::ALL {
        assert_eq!(r.count(k), 0, "{k:?}");
    }
}

#[test]
fn redundant_flush() {
    let mut e = clean();
    e.extend([(0, 7, FLUSH(128)), (0, 0, FENCE)]); // line 128 stored by thread 1, flushed, not stored again
    let r = lint(&e);
    only(&r, Finding::RedundantFlush, 1);
    assert_eq!(r.findings[0].top_sites[0].name, "a.rs:3");
}

#[test]
fn flush_of_a_line_never_written() {
    let mut e = clean();
    e.extend([(0, 7, FLUSH(4096)), (0, 0, FENCE)]);
    only(&lint(&e), Finding::UnwrittenFlush, 1);
}

#[test]
fn fence_with_nothing_pending() {
    let mut e = clean();
    e.push((1, 7, FENCE));
    only(&lint(&e), Finding::EmptyFence, 1);
    // A locked read-modify-write orders too, but is no empty fence.
    let mut e = clean();
    e.push((1, 7, Event::Fence { kind: FenceKind::LockedRmw }));
    only(&lint(&e), Finding::EmptyFence, 0);
}

#[test]
fn store_not_durable_at_the_end() {
    // Stored and never flushed; and flushed by a thread that never fenced.
    let mut e = clean();
    e.extend([(0, 0, STORE(256)), (1, 0, STORE(512)), (1, 0, FLUSH(512))]);
    let r = lint(&e);
    only(&r, Finding::NotDurable, 2);
    assert_eq!(r.findings.iter().find(|f| f.kind == Finding::NotDurable).unwrap().examples, vec![256, 512]);
    // Another thread's fence does not make thread 1's flush durable.
    let mut e = clean();
    e.extend([(1, 0, STORE(512)), (1, 0, FLUSH(512)), (0, 0, STORE(64)), (0, 0, FLUSH(64)), (0, 0, FENCE)]);
    only(&lint(&e), Finding::NotDurable, 1);
}

#[test]
fn reflush_at_distance_0() {
    let mut e = clean();
    e.extend([(0, 0, STORE(0)), (0, 7, FLUSH(0)), (0, 0, FENCE)]);
    only(&lint(&e), Finding::ReflushDistance0, 1);
    // With another line flushed in between, the distance is 1: no finding.
    let mut e = clean();
    e.extend([(0, 0, STORE(128)), (0, 0, FLUSH(128)), (0, 0, STORE(0)), (0, 7, FLUSH(0)), (0, 0, FENCE)]);
    only(&lint(&e), Finding::ReflushDistance0, 0);
}
