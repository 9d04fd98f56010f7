//! Whatever is written is read back exactly: every event kind, thread switches,
//! block cuts, values, zstd.

mod common;

use common::*;
use pmsim_traces::*;
use proptest::prelude::*;

fn check(events: &[(u32, OwnedEvent)], opts: &WriterOptions) {
    let bytes = write_all(events, opts);
    let back = read_all(&bytes).unwrap();
    assert_eq!(back.len(), events.len());
    for (i, ((idx, tid, ev), (wtid, wev))) in back.iter().zip(events).enumerate() {
        assert_eq!(*idx, i as u64);
        assert_eq!(tid, wtid, "thread of event {i}");
        assert_eq!(ev, wev, "event {i}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn round_trip_without_values(events in proptest::collection::vec((tid(), event(false)), 0..400), bs in 64usize..2048) {
        check(&events, &WriterOptions { block_size: bs, ..WriterOptions::default() });
    }

    #[test]
    fn round_trip_with_values(events in proptest::collection::vec((tid(), event(true)), 0..200), bs in 64usize..4096) {
        check(&events, &WriterOptions { values: true, block_size: bs, ..WriterOptions::default() });
    }

    #[test]
    fn round_trip_zstd(events in proptest::collection::vec((tid(), event(true)), 0..300)) {
        check(&events, &WriterOptions { values: true, zstd_level: Some(1), block_size: 1024 });
    }
}

#[test]
fn header_survives() {
    let mut header = TraceHeader { threads: 3, flush_insn: "clwb".into(), ..TraceHeader::default() };
    header.allocator.name = "nvalloc".into();
    header.allocator.variant = "log".into();
    header.allocator.params.insert("stripes".into(), 6.into());
    header.regions.push(Region { id: 1, name: "wal".into(), category: Category::Wal, base: 4096, len: 768 });
    let mut w = TraceWriter::new(Vec::new(), &header, &WriterOptions::default()).unwrap();
    w.write(0, &Event::Fence { kind: FenceKind::Sfence }).unwrap();
    let (bytes, stats) = w.finish().unwrap();
    assert_eq!(stats.bytes as usize, bytes.len());
    let r = TraceReader::new(&bytes[..], "h.pmt").unwrap();
    assert_eq!(r.header(), &header);
}

#[test]
fn empty_trace_reads_as_empty() {
    let bytes = write_all(&[], &WriterOptions::default());
    assert!(read_all(&bytes).unwrap().is_empty());
}

#[test]
fn sequential_stores_and_their_flushes_take_one_byte() {
    // 1000 × (store 8 B at the next address, flush its line, fence): the common
    // shape of allocator metadata updates.
    let mut events = Vec::new();
    for i in 0..1000u64 {
        let addr = 0x7f00_0000_0000 + i * 8;
        events.push((0, OwnedEvent::Store { addr, size: 8, value: None }));
        events.push((0, OwnedEvent::Flush { kind: FlushKind::Clwb, line: addr & !63 }));
        events.push((0, OwnedEvent::Fence { kind: FenceKind::Sfence }));
    }
    let bytes = write_all(&events, &WriterOptions::default());
    let header_and_framing = write_all(&[], &WriterOptions::default()).len() + 24 + 10;
    assert!(bytes.len() <= header_and_framing + events.len(), "{} bytes for {} events", bytes.len(), events.len());
    check(&events, &WriterOptions::default());
}

#[test]
fn writer_rejects_bad_events_and_stays_usable() {
    let mut w =
        TraceWriter::new(Vec::new(), &TraceHeader::default(), &WriterOptions { values: true, ..Default::default() })
            .unwrap();
    assert!(w.write(0, &Event::Store { addr: 0, size: 8, value: None }).is_err());
    assert!(w.write(0, &Event::Store { addr: 0, size: 8, value: Some(&[1, 2]) }).is_err());
    assert!(w.write(0, &Event::Flush { kind: FlushKind::Clwb, line: 3 }).is_err());
    assert!(w.write(70000, &Event::ThreadStart).is_err());
    assert!(w.write(0, &Event::OpBegin { op: OpKind::Other(9), arg: 0 }).is_err());
    w.write(1, &Event::Store { addr: 64, size: 2, value: Some(&[7, 9]) }).unwrap();
    let (bytes, stats) = w.finish().unwrap();
    assert_eq!(stats.events, 1);
    let back = read_all(&bytes).unwrap();
    assert_eq!(back, vec![(0, 1, OwnedEvent::Store { addr: 64, size: 2, value: Some(vec![7, 9]) })]);
}

#[test]
fn trace_file_is_renamed_into_place_only_when_finished() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pmt");
    std::fs::write(&path, b"precious").unwrap();
    {
        let mut f = TraceFile::create(&path, &TraceHeader::default(), &WriterOptions::default()).unwrap();
        f.write(0, &Event::ThreadStart).unwrap();
        // dropped without finish: the old file must be untouched and no temp left behind
    }
    assert_eq!(std::fs::read(&path).unwrap(), b"precious");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    let mut f = TraceFile::create(&path, &TraceHeader::default(), &WriterOptions::default()).unwrap();
    f.write(0, &Event::ThreadStart).unwrap();
    let stats = f.finish().unwrap();
    assert_eq!(stats.events, 1);
    let mut r = TraceReader::open(&path).unwrap();
    assert_eq!(r.for_each(|_| {}).unwrap().events, 1);
}
