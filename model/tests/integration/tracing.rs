//! The tracing backend: exact event streams, a valid global order across
//! threads, values, trace files that the trace reader reads back, sink errors.

use pmsim_model::heap::HEADER_SIZE;
use pmsim_model::{Category, FlushInsn, Heap, OpKind, Pm, TraceCollector, TraceConfig};
use pmsim_traces::{
    Event, EventSink, FenceKind, FlushKind, OwnedEvent, TraceFile, TraceReader, Tracer, VecSink, WriterOptions,
};
use std::io;
use std::sync::Barrier;

const SIZE: u64 = 4 << 20;

fn heap(d: &tempfile::TempDir) -> Heap {
    Heap::create(d.path().join("t.heap"), SIZE).unwrap()
}

fn traced(heap: &Heap, insn: FlushInsn, cfg: &TraceConfig) -> (Pm, TraceCollector<VecSink>) {
    Pm::traced(heap, insn, cfg, |_| Ok(VecSink::default())).unwrap()
}

/// The events a traced run recorded, without their sites.
fn events(pm: Pm, collector: TraceCollector<VecSink>) -> Vec<OwnedEvent> {
    collector.finish(pm).unwrap().sink.0.into_iter().map(|(_, e)| e).collect()
}

fn store(addr: u64, size: u32, value: Option<Vec<u8>>) -> OwnedEvent {
    OwnedEvent::Store { addr, size, value }
}

fn flush(line: u64) -> OwnedEvent {
    OwnedEvent::Flush { kind: FlushKind::Clflush, line }
}

fn fence(kind: FenceKind) -> OwnedEvent {
    OwnedEvent::Fence { kind }
}

#[test]
fn one_thread_sequence_reaches_the_sink_exactly() {
    let d = tempfile::tempdir().unwrap();
    let heap = heap(&d);
    let b = heap.base() as u64;
    let (pm, collector) = traced(&heap, FlushInsn::Clflush, &TraceConfig::default());
    assert!(pm.is_traced());
    let mut t = pm.thread(0);
    assert!(t.is_traced());
    t.store_u64(4096, 7);
    t.flush(4096);
    t.fence();
    t.persist(4096 + 60, 8); // touches two lines
    t.op_begin(OpKind::Malloc, 64);
    t.op_end(OpKind::Malloc, 8192);
    t.marker(9, "phase 1");
    let region = t.add_region("slab headers", Category::Meta, 8192, 4096);
    assert_eq!(pm.regions().len(), 2, "heap header + slab headers");
    assert!(t.remove_region(region));
    assert!(!t.remove_region(region), "already gone: nothing recorded");
    assert_eq!(t.cas_u64(4096, 7, 8), Ok(7));
    assert_eq!(t.cas_u64(4096, 7, 9), Err(8));
    t.ntstore_u64(4104, 1);
    t.op_begin(OpKind::Other(99), 1);
    drop(t);
    let done = collector.finish(pm).unwrap();

    let expected = vec![
        OwnedEvent::ThreadStart,
        store(b + 4096, 8, None),
        flush(b + 4096),
        fence(FenceKind::Sfence),
        flush(b + 4096),
        flush(b + 4160),
        fence(FenceKind::Sfence),
        OwnedEvent::OpBegin { op: OpKind::Malloc, arg: 64 },
        OwnedEvent::OpEnd { op: OpKind::Malloc, result: 8192 },
        OwnedEvent::Marker { id: 9, label: "phase 1".into() },
        OwnedEvent::RegionAdd {
            id: region,
            category: Category::Meta,
            base: b + 8192,
            len: 4096,
            name: "slab headers".into(),
        },
        OwnedEvent::RegionRemove { id: region },
        fence(FenceKind::LockedRmw),
        store(b + 4096, 8, None),
        fence(FenceKind::LockedRmw), // the failed CAS: a fence, no store
        OwnedEvent::NtStore { addr: b + 4104, size: 8, value: None },
        OwnedEvent::OpBegin { op: OpKind::Other(99), arg: 1 },
        OwnedEvent::ThreadEnd,
    ];
    let got: Vec<OwnedEvent> = done.sink.0.iter().map(|(tid, e)| (assert_eq!(*tid, 0), e.clone()).1).collect();
    assert_eq!(got, expected);
    assert_eq!(done.stats.events, expected.len() as u64);
}

#[test]
fn eadr_traces_fences_but_no_flushes() {
    let d = tempfile::tempdir().unwrap();
    let heap = heap(&d);
    let (pm, collector) = traced(&heap, FlushInsn::None, &TraceConfig::default());
    let mut t = pm.thread(5);
    t.store_u64(HEADER_SIZE, 1);
    t.persist(HEADER_SIZE, 8);
    drop(t);
    let got = events(pm, collector);
    let b = heap.base() as u64;
    let expected =
        [OwnedEvent::ThreadStart, store(b + HEADER_SIZE, 8, None), fence(FenceKind::Sfence), OwnedEvent::ThreadEnd];
    assert_eq!(got, expected);
}

#[test]
fn values_mode_records_the_bytes_written() {
    let d = tempfile::tempdir().unwrap();
    let heap = heap(&d);
    let b = heap.base() as u64;
    let cfg = TraceConfig { values: true, ..TraceConfig::default() };
    let (pm, collector) = traced(&heap, FlushInsn::Clflush, &cfg);
    let mut t = pm.thread(1);
    t.store_u64(4096, 0x0102030405060708);
    t.store(4200, 0xaabbu16);
    t.store_bytes(4300, b"persist me");
    t.store_bytes(4400, &[]); // nothing written, nothing recorded
    t.store_bytes(4501, b"fifteen bytes!?");
    assert_eq!(t.load::<[u8; 15]>(4501), *b"fifteen bytes!?");
    assert_eq!(t.cas_u64(4096, 0x0102030405060708, 42), Ok(0x0102030405060708));
    t.ntstore_u64(4104, u64::MAX);
    drop(t);
    let got = events(pm, collector);
    let expected = vec![
        OwnedEvent::ThreadStart,
        store(b + 4096, 8, Some(0x0102030405060708u64.to_le_bytes().to_vec())),
        store(b + 4200, 2, Some(vec![0xbb, 0xaa])),
        // A copy is recorded as the machine stores it is made of: 8 bytes, then 2.
        store(b + 4300, 8, Some(b"persist ".to_vec())),
        store(b + 4308, 2, Some(b"me".to_vec())),
        store(b + 4501, 8, Some(b"fifteen ".to_vec())),
        store(b + 4509, 4, Some(b"byte".to_vec())),
        store(b + 4513, 2, Some(b"s!".to_vec())),
        store(b + 4515, 1, Some(b"?".to_vec())),
        fence(FenceKind::LockedRmw),
        store(b + 4096, 8, Some(42u64.to_le_bytes().to_vec())),
        OwnedEvent::NtStore { addr: b + 4104, size: 8, value: Some(vec![0xff; 8]) },
        OwnedEvent::ThreadEnd,
    ];
    assert_eq!(got, expected);
}

/// A copy long enough to be one `memcpy` natively ([`pmsim_model::pm::BULK_STORE`])
/// is still recorded, traced, as the 8-byte machine stores it is made of.
#[test]
fn a_long_copy_is_traced_as_its_machine_stores() {
    let d = tempfile::tempdir().unwrap();
    let heap = heap(&d);
    let b = heap.base() as u64;
    let (pm, collector) = traced(&heap, FlushInsn::Clflush, &TraceConfig::default());
    let mut t = pm.thread(0);
    let n = 3 * pmsim_model::pm::BULK_STORE as u64 + 4;
    t.store_bytes(8192, &vec![5u8; n as usize]);
    assert!((0..n).all(|i| t.load::<u8>(8192 + i) == 5));
    drop(t);
    let got = events(pm, collector);
    let mut expected = vec![OwnedEvent::ThreadStart];
    expected.extend((0..n / 8).map(|k| store(b + 8192 + 8 * k, 8, None)));
    expected.push(store(b + 8192 + n - 4, 4, None));
    expected.push(OwnedEvent::ThreadEnd);
    assert_eq!(got, expected);
}

/// What one worker did, in its program order, as the trace should show it.
struct Work {
    tid: u32,
    events: Vec<OwnedEvent>,
}

/// Four threads store, flush, fence and CAS-increment a shared counter; each
/// writes down the events it issued. Small buffers and a small window make the
/// collector merge many partial buffers.
fn run_workers(pm: &Pm, heap: &Heap, iterations: u64, values: bool) -> Vec<Work> {
    const THREADS: u32 = 4;
    let b = heap.base() as u64;
    let counter = HEADER_SIZE; // a PM word all threads CAS
    let barrier = Barrier::new(THREADS as usize);
    let kind = pm.flush_insn().kind().expect("a flushing run");
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|tid| {
                let barrier = &barrier;
                s.spawn(move || {
                    let mut t = pm.thread(tid);
                    let mut ev = vec![OwnedEvent::ThreadStart];
                    let val = |v: u64| values.then(|| v.to_le_bytes().to_vec());
                    let slot = HEADER_SIZE + 4096 * (1 + tid as u64); // own line, own page
                    for i in 0..iterations {
                        t.store_u64(slot, i);
                        t.flush(slot);
                        t.fence();
                        let f = OwnedEvent::Flush { kind, line: b + slot };
                        ev.extend([store(b + slot, 8, val(i)), f, fence(FenceKind::Sfence)]);
                        if i % 8 == 0 {
                            loop {
                                let cur = t.load_u64(counter);
                                ev.push(fence(FenceKind::LockedRmw));
                                if t.cas_u64(counter, cur, cur + 1).is_ok() {
                                    ev.push(store(b + counter, 8, val(cur + 1)));
                                    break;
                                }
                            }
                        }
                        if i == iterations / 2 {
                            t.marker(u64::from(tid), "barrier");
                            ev.push(OwnedEvent::Marker { id: u64::from(tid), label: "barrier".into() });
                            t.flush_thread(); // about to block
                            barrier.wait();
                        }
                    }
                    drop(t);
                    ev.push(OwnedEvent::ThreadEnd);
                    Work { tid, events: ev }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// The stream is a valid total order: each thread's projection is exactly its
/// program order, nothing is lost or added, and the counter's CAS stores — the
/// cross-thread dependency — appear in the order of the values they wrote.
fn check_total_order(stream: &[(u32, OwnedEvent)], work: &[Work], counter_addr: u64, values: bool) {
    let total: usize = work.iter().map(|w| w.events.len()).sum();
    assert_eq!(stream.len(), total, "events lost or added");
    for w in work {
        let mine: Vec<&OwnedEvent> = stream.iter().filter(|(t, _)| *t == w.tid).map(|(_, e)| e).collect();
        assert_eq!(mine.len(), w.events.len(), "thread {}", w.tid);
        for (i, (got, want)) in mine.iter().zip(&w.events).enumerate() {
            assert_eq!(*got, want, "thread {} event {i}", w.tid);
        }
    }
    if values {
        let increments: Vec<u64> = stream
            .iter()
            .filter_map(|(_, e)| match e {
                OwnedEvent::Store { addr, value: Some(v), .. } if *addr == counter_addr => {
                    Some(u64::from_le_bytes(v[..].try_into().unwrap()))
                }
                _ => None,
            })
            .collect();
        let expected: Vec<u64> = (1..=increments.len() as u64).collect();
        assert_eq!(increments, expected, "CAS increments out of order");
    }
}

#[test]
fn four_threads_give_a_valid_total_order() {
    let d = tempfile::tempdir().unwrap();
    let heap = heap(&d);
    let cfg = TraceConfig { values: true, buffer_events: 64, window: 500, queue_buffers: 4, ..TraceConfig::default() };
    let (pm, collector) = traced(&heap, FlushInsn::Clflush, &cfg);
    let work = run_workers(&pm, &heap, 20_000, true);
    let done = collector.finish(pm).unwrap();
    check_total_order(&done.sink.0, &work, heap.base() as u64 + HEADER_SIZE, true);
    assert_eq!(done.stats.events, done.sink.0.len() as u64);
    assert!(done.stats.buffers > 4 * 20_000 * 3 / 64, "buffers were handed over when full");
    // The counter ended where the trace says it did.
    let pm = Pm::native(&heap, FlushInsn::Clflush).unwrap();
    assert_eq!(pm.thread(0).load_u64(HEADER_SIZE), 4 * 20_000 / 8);
}

#[test]
fn the_window_hands_over_buffers_that_are_not_full() {
    let d = tempfile::tempdir().unwrap();
    let heap = heap(&d);
    let cfg = TraceConfig { buffer_events: 1 << 20, window: 10, ..TraceConfig::default() };
    let (pm, collector) = traced(&heap, FlushInsn::Clflush, &cfg);
    let mut t = pm.thread(0);
    for i in 0..1000 {
        t.store_u64(HEADER_SIZE, i);
    }
    drop(t);
    let done = collector.finish(pm).unwrap();
    assert_eq!(done.stats.events, 1002);
    // A buffer goes once its newest event is 10 numbers past its first: 11 events.
    assert_eq!(done.stats.buffers, 1002u64.div_ceil(11));
}

/// Sends every event to two sinks: the file under test and a record of what was sent.
struct Tee(VecSink, TraceFile);

impl EventSink for Tee {
    fn event(&mut self, tid: u32, ev: &Event<'_>) -> io::Result<()> {
        self.0.event(tid, ev)?;
        self.1.event(tid, ev)
    }
}

#[test]
fn a_trace_file_written_through_the_tracer_reads_back() {
    for values in [false, true] {
        let d = tempfile::tempdir().unwrap();
        let heap = heap(&d);
        let path = d.path().join("run.pmt");
        let cfg = TraceConfig { values, buffer_events: 256, ..TraceConfig::default() };
        let wopts = WriterOptions { values, ..WriterOptions::default() };
        let (pm, collector) = Pm::traced(&heap, FlushInsn::best(), &cfg, |mut header| {
            header.threads = 4;
            header.workload.name = "test".into();
            Ok(Tee(VecSink::default(), TraceFile::create(&path, &header, &wopts)?))
        })
        .unwrap();
        let work = run_workers(&pm, &heap, 2_000, values);
        let Tee(sent, file) = collector.finish(pm).unwrap().sink;
        let written = file.finish().unwrap();
        assert_eq!(written.events, sent.0.len() as u64);
        check_total_order(&sent.0, &work, heap.base() as u64 + HEADER_SIZE, values);

        let mut reader = TraceReader::open(&path).unwrap();
        let h = reader.header().clone();
        assert_eq!(h.tracer, Tracer::Builtin);
        assert_eq!(h.flush_insn, FlushInsn::best().name());
        assert_eq!((h.heap.base, h.heap.size), (heap.base() as u64, SIZE));
        assert_eq!(h.heap.path, heap.path().display().to_string());
        assert_eq!(h.threads, 4);
        assert_eq!(h.values, values);
        assert_eq!(h.regions.len(), 1);
        assert_eq!((h.regions[0].name.as_str(), h.regions[0].base), ("heap header", heap.base() as u64));
        let mut read = Vec::new();
        while let Some(block) = reader.next_block().unwrap() {
            for r in block.records() {
                let r = r.unwrap();
                assert_eq!(r.index, read.len() as u64);
                read.push((r.tid, r.event.to_owned()));
            }
        }
        assert_eq!(read, sent.0, "values={values}");
    }
}

/// A sink that fails after `left` events, like a disk filling up.
#[derive(Debug)]
struct Failing {
    left: usize,
}

impl EventSink for Failing {
    fn event(&mut self, _: u32, _: &Event<'_>) -> io::Result<()> {
        if self.left == 0 {
            return Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"));
        }
        self.left -= 1;
        Ok(())
    }
}

#[test]
fn a_failing_sink_is_reported_not_a_panic_or_a_hang() {
    let d = tempfile::tempdir().unwrap();
    let heap = heap(&d);
    let cfg = TraceConfig { buffer_events: 16, ..TraceConfig::default() };
    let (pm, collector) = Pm::traced(&heap, FlushInsn::Clflush, &cfg, |_| Ok(Failing { left: 10 })).unwrap();
    let mut t = pm.thread(0);
    for i in 0..10_000 {
        t.store_u64(HEADER_SIZE, i);
    }
    t.flush_thread();
    // The collector sees the failure on a thread of its own: go on handing
    // it buffers, as a running program would, until it reports it (a
    // bounded wait: on a loaded machine 1,000 more stores were not always
    // enough in a CI run).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !pm.trace_failed() && std::time::Instant::now() < deadline {
        for i in 0..100 {
            t.store_u64(HEADER_SIZE, i);
        }
        t.flush_thread();
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    drop(t);
    assert!(pm.trace_failed());
    let e = collector.finish(pm).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::StorageFull);
    assert_eq!(e.to_string(), "trace sink: disk full");
}

#[test]
fn a_sink_that_cannot_be_made_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    let heap = heap(&d);
    let bad = d.path().join("no/such/dir/run.pmt");
    let e = Pm::traced(&heap, FlushInsn::Clflush, &TraceConfig::default(), |h| {
        TraceFile::create(&bad, &h, &WriterOptions::default())
    })
    .unwrap_err();
    assert!(e.to_string().starts_with("cannot start tracing: "), "{e}");
}

#[test]
#[should_panic(expected = "PmThread handle(s) are alive")]
fn finishing_with_a_live_thread_handle_is_a_bug() {
    let d = tempfile::tempdir().unwrap();
    let heap = heap(&d);
    let (pm, collector) = traced(&heap, FlushInsn::Clflush, &TraceConfig::default());
    let t = pm.thread(0);
    let _ = collector.finish(pm);
    drop(t);
}

/// Every flush and fence names the source line that issued it (through the
/// `#[track_caller]` flush, persist and CAS methods); a site is defined to the
/// sink before its first event, and two threads using one line share its id.
#[test]
fn flushes_and_fences_carry_their_call_sites() {
    let d = tempfile::tempdir().unwrap();
    let heap = heap(&d);
    let (pm, collector) = traced(&heap, FlushInsn::Clflush, &TraceConfig::default());
    let mut lines = Vec::new();
    for tid in 0..2 {
        let mut t = pm.thread(tid);
        t.store_u64(4096, 7);
        t.flush(4096);
        lines.push(line!());
        t.persist(8192, 100); // two flushes and a fence, all at this line
        lines.push(line!());
        let _ = t.cas_u64(4096, 7, 8);
        lines.push(line!());
    }
    let done = collector.finish(pm).unwrap();
    let VecSink(events, sites, table) = done.sink;
    let named: Vec<(String, u32)> = events
        .iter()
        .zip(&sites)
        .filter(|((_, e), _)| matches!(e, OwnedEvent::Flush { .. } | OwnedEvent::Fence { .. }))
        .map(|(_, &s)| {
            let site = table.get(s).unwrap_or_else(|| panic!("site {s} undefined"));
            (site.file.clone(), site.line + 1)
        })
        .collect();
    let file = file!().to_string();
    let one = [(file.clone(), lines[0]), (file.clone(), lines[1]), (file.clone(), lines[1])];
    let one = [&one[..], &[(file.clone(), lines[1]), (file.clone(), lines[2])]].concat();
    assert_eq!(named, [&one[..], &one[..]].concat());
    assert_eq!(table.len(), 3, "three lines, shared by both threads");
    assert!(sites
        .iter()
        .zip(&events)
        .all(|(&s, (_, e))| s == 0 || matches!(e, OwnedEvent::Flush { .. } | OwnedEvent::Fence { .. })));
}

/// `msync` traced: every line of every page stored to since the last one
/// (a store straddling two pages dirties both; a CAS and a non-temporal
/// store count), with the run's flush instruction, then one fence; the next
/// `msync` writes back only what was stored since.
#[test]
fn msync_writes_back_every_line_of_each_page_written_since_the_last() {
    let d = tempfile::tempdir().unwrap();
    let heap = heap(&d);
    let b = heap.base() as u64;
    let (pm, collector) = traced(&heap, FlushInsn::Clflush, &TraceConfig::default());
    let mut t = pm.thread(0);
    t.store_bytes(2 * 4096 - 4, &[1u8; 8]); // pages 1 and 2
    assert_eq!(t.cas_u64(5 * 4096, 0, 1), Ok(0));
    t.ntstore_u64(7 * 4096 + 64, 1);
    t.msync().unwrap();
    t.store_u64(5 * 4096 + 8, 3);
    t.msync().unwrap();
    drop(t);
    let done = collector.finish(pm).unwrap();
    let flushed: Vec<u64> = done
        .sink
        .0
        .iter()
        .filter_map(|e| match e.1 {
            OwnedEvent::Flush { kind: FlushKind::Clflush, line } => Some(line - b),
            OwnedEvent::Fence { kind: FenceKind::Sfence } => Some(u64::MAX),
            _ => None,
        })
        .collect();
    let page = |p: u64| (0..64).map(move |l| p * 4096 + 64 * l);
    let mut want: Vec<u64> = [1, 2, 5, 7].into_iter().flat_map(page).collect();
    want.extend([u64::MAX]);
    want.extend(page(5));
    want.push(u64::MAX);
    assert_eq!(flushed, want);
}
