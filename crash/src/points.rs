//! Which moments of a trace are crash points: before every fence and every
//! clflush, narrowed by the options (every N-th, inside an operation of one
//! kind, after a marker, one point), never inside the allocator's creation
//! unless asked for; and the end of the trace for an allocator with state
//! outside its heap.

use crate::load::{CrashTrace, Ev};
use crate::options::Options;
use pmsim_traces::OpKind;
use std::collections::HashMap;

/// The crash points `opts` selects: (fence number, event position); with
/// `end`, the end of the trace too (number: the count of fences and
/// clflushes, position: past the last event), selected by the same rules.
pub fn select_points(tr: &CrashTrace, opts: &Options, end: bool) -> Vec<(u64, u32)> {
    let mut open: HashMap<OpKind, u64> = HashMap::new();
    let mut marked: HashMap<u32, bool> = HashMap::new();
    let mut marked_threads = 0u64;
    let mut out = Vec::new();
    let mut n = 0u64;
    let selected = |open: &HashMap<OpKind, u64>, marked_threads: u64, n: u64| {
        // Inside the allocator's creation the heap is not formatted yet:
        // nothing to recover (unless asked for explicitly).
        let creating = open.get(&OpKind::Init).copied().unwrap_or(0) > 0;
        let during = match opts.during {
            Some(k) => open.get(&k).copied().unwrap_or(0) > 0,
            None => !creating,
        };
        let mark = opts.marker.is_none() || marked_threads > 0;
        during && mark && opts.point.is_none_or(|p| p == n)
    };
    for (i, e) in tr.events.iter().enumerate() {
        match *e {
            Ev::OpBegin { op, .. } => *open.entry(op).or_default() += 1,
            Ev::OpEnd { op, .. } => {
                let c = open.entry(op).or_default();
                *c = c.saturating_sub(1);
            }
            // The tracer's markers of thread spawns and joins leave a
            // thread's marked stretch as it is (a lock's are not loaded).
            Ev::Marker { label, .. } if pmsim_traces::is_thread_marker(&tr.labels[label as usize]) => {}
            Ev::Marker { tid, label } => {
                let on = opts.marker.as_deref() == Some(tr.labels[label as usize].as_str());
                let was = marked.insert(tid, on).unwrap_or(false);
                marked_threads = marked_threads + on as u64 - was as u64;
            }
            // Before a fence, and before a clflush, which makes its line
            // durable at once (no fence follows it in a clflush-only trace,
            // such as the Valgrind tool's).
            Ev::Fence { .. } | Ev::Flush { ordered: true, .. } => {
                if selected(&open, marked_threads, n) {
                    out.push((n, i as u32));
                }
                n += 1;
            }
            _ => {}
        }
    }
    let every = opts.every.max(1) as usize;
    let mut out: Vec<(u64, u32)> = out.into_iter().step_by(every).collect();
    if end && selected(&open, marked_threads, n) {
        out.push((n, tr.events.len() as u32));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmsim_traces::TraceHeader;

    /// A trace of `events` alone (no stores).
    fn trace(events: Vec<Ev>) -> CrashTrace {
        let mut t = CrashTrace::new("t.pmt".as_ref(), TraceHeader::default(), "t.pmt.img".into(), 1 << 20);
        for (i, e) in events.into_iter().enumerate() {
            t.push(i as u64, e);
        }
        t.labels = vec!["a".into(), "b".into(), pmsim_traces::SPAWN_MARKER.into()];
        t
    }

    #[test]
    fn crash_points_by_fence_operation_marker_and_stride() {
        let f = Ev::Fence { tid: 0, site: 0 };
        let tr = trace(vec![
            Ev::OpBegin { tid: 0, op: OpKind::Init, arg: 0 },
            f,
            Ev::OpEnd { tid: 0, op: OpKind::Init, result: 0 },
            f,
            Ev::Marker { tid: 0, label: 0 },
            f,
            // The tracer's spawn marker does not end the marked stretch.
            Ev::Marker { tid: 0, label: 2 },
            Ev::OpBegin { tid: 1, op: OpKind::Morph, arg: 0 },
            f,
            Ev::OpEnd { tid: 1, op: OpKind::Morph, result: 0 },
            Ev::Marker { tid: 0, label: 1 },
            f,
            f,
        ]);
        let pts = |o: Options| select_points(&tr, &o, false).iter().map(|p| p.0).collect::<Vec<_>>();
        assert_eq!(pts(Options::default()), [1, 2, 3, 4, 5], "every fence but those inside init");
        assert_eq!(pts(Options { during: Some(OpKind::Init), ..Options::default() }), [0]);
        assert_eq!(pts(Options { during: Some(OpKind::Morph), ..Options::default() }), [3]);
        assert_eq!(pts(Options { marker: Some("a".into()), ..Options::default() }), [2, 3]);
        assert_eq!(pts(Options { every: 2, ..Options::default() }), [1, 3, 5]);
        assert_eq!(pts(Options { point: Some(4), ..Options::default() }), [4]);
        let end = select_points(&tr, &Options::default(), true);
        assert_eq!(end.last(), Some(&(6, 13)), "the end of the trace, numbered after the last fence");
        assert_eq!(select_points(&tr, &Options { point: Some(6), ..Options::default() }, true), [(6, 13)]);
    }
}
