//! Whatever is written is read back exactly: every event kind, thread switches,
//! block cuts, values, zstd.

use crate::common;

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

/// Every event of a trace with the code site the decoder attributes it to
/// (that of a flush or fence; 0 for other events), through the visiting decoder.
fn read_with_sites(bytes: &[u8]) -> (Vec<(u32, OwnedEvent, u32)>, SiteTable) {
    struct V<'o> {
        site: u32,
        out: &'o mut Vec<(u32, OwnedEvent, u32)>,
    }
    impl<'a> Visit<'a> for V<'_> {
        const SPLIT: bool = true;
        fn event(&mut self, rec: &Record<'a>) {
            let site = if matches!(rec.event, Event::Flush { .. } | Event::Fence { .. }) { self.site } else { 0 };
            self.out.push((rec.tid, rec.event.to_owned(), site));
        }
        fn thread(&mut self, _tid: u32) {
            self.site = 0;
        }
        fn site(&mut self, site: u32) {
            self.site = site;
        }
    }
    let mut r = TraceReader::new(bytes, "mem.pmt").unwrap();
    let mut out = Vec::new();
    while let Some(b) = r.next_block().unwrap() {
        b.visit(&mut V { site: 0, out: &mut out }).unwrap();
    }
    (out, r.sites().clone())
}

fn site(id: u32) -> Site {
    Site { id, addr: id as u64 * 16, function: format!("f{id}"), file: "src/x.rs".into(), line: id, column: 1 }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 100, ..ProptestConfig::default() })]

    /// Sites survive thread switches and block cuts (both reset the decoder's
    /// site), ids in the tag and after it, and are defined before their use.
    #[test]
    fn sites_round_trip(events in proptest::collection::vec((tid(), event(false), 0u32..40), 0..400), bs in 64usize..1024) {
        let opts = WriterOptions { block_size: bs, ..WriterOptions::default() };
        let mut w = TraceWriter::new(Vec::new(), &TraceHeader::default(), &opts).unwrap();
        let mut defined = std::collections::BTreeSet::new();
        let mut expect = Vec::new();
        for (tid, ev, s) in &events {
            if *s != 0 && defined.insert(*s) {
                w.define_site(&site(*s)).unwrap();
            }
            w.write_at(*tid, *s, &ev.as_event()).unwrap();
            let s = if matches!(ev, OwnedEvent::Flush { .. } | OwnedEvent::Fence { .. }) { *s } else { 0 };
            expect.push((*tid, ev.clone(), s));
        }
        let bytes = w.finish().unwrap().0;
        let (back, sites) = read_with_sites(&bytes);
        prop_assert_eq!(back, expect);
        prop_assert_eq!(sites.len(), defined.len());
        for s in defined {
            prop_assert_eq!(sites.get(s), Some(&site(s)));
        }
        // The iterating reader skips the sites of flushes and fences and site-table blocks.
        prop_assert_eq!(read_all(&bytes).unwrap().len(), events.len());
    }
}

#[test]
fn version_1_traces_still_read_with_unknown_sites() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/samples/threadtest-base.pmt");
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 1, "the sample is a version-1 trace");
    let (events, sites) = read_with_sites(&bytes);
    assert!(events.iter().any(|(_, e, _)| matches!(e, OwnedEvent::Flush { .. })));
    assert!(events.iter().all(|(_, _, s)| *s == 0));
    assert!(sites.is_empty());
}

#[test]
fn site_id_zero_and_bad_site_tables_are_refused() {
    let mut w = TraceWriter::new(Vec::new(), &TraceHeader::default(), &WriterOptions::default()).unwrap();
    assert!(w.define_site(&Site::default()).is_err());
    w.define_site(&site(3)).unwrap();
    w.write_at(0, 3, &Event::Fence { kind: FenceKind::Sfence }).unwrap();
    let mut bytes = w.finish().unwrap().0;
    // Break the site table's UTF-8 (and fix its checksum): one clear error.
    let at = bytes.windows(4).position(|b| b == b"PMTB").unwrap();
    assert_eq!(bytes[at + 4], 2, "the first block is the site table");
    let len = u32::from_le_bytes(bytes[at + 16..at + 20].try_into().unwrap()) as usize;
    let payload = at + 24;
    let f = payload + bytes[payload..payload + len].iter().position(|&b| b == b'f').unwrap();
    bytes[f] = 0xff;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&bytes[at..at + 20]);
    crc.update(&bytes[payload..payload + len]);
    bytes[at + 20..at + 24].copy_from_slice(&crc.finalize().to_le_bytes());
    let mut r = TraceReader::new(&bytes[..], "mem.pmt").unwrap();
    let e = r.next_block().err().expect("a corrupt site table is an error");
    assert!(e.to_string().contains("corrupt site table: site function is not UTF-8"), "{e}");
}
