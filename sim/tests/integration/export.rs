//! The exporters: a golden 5-event trace to exact bytes; real NVAlloc traces
//! decoded by a protobuf reader written here (independent of the encoder) and
//! checked packet by packet against the trace; packet counts against the
//! simulator's own PM-write counts; filters and bad input.

use pmsim_sim::config::CacheConfig;
use pmsim_sim::export::{self, gem5, Exporter, FileOptions, Format, Mode, Options, Source, Summary, Timing};
use pmsim_sim::{Config, Simulator};
use pmsim_traces::{
    Category, Event, FenceKind, FlushKind, HeapInfo, Region, TraceHeader, TraceReader, TraceWriter, WriterOptions,
};
use std::collections::{HashMap, HashSet};
use std::io::{Cursor, Read};
use std::path::Path;

const SAMPLES: [&str; 2] = [
    concat!(env!("CARGO_MANIFEST_DIR"), "/../traces/samples/threadtest-nvalloc-log.pmt"),
    concat!(env!("CARGO_MANIFEST_DIR"), "/../traces/samples/threadtest-base.pmt"),
];

// ---- an independent reader of gem5's packet trace -------------------------

fn varint(b: &[u8], pos: &mut usize) -> u64 {
    let (mut v, mut shift) = (0u64, 0);
    loop {
        let x = b[*pos];
        *pos += 1;
        v |= ((x & 0x7f) as u64) << shift;
        if x & 0x80 == 0 {
            return v;
        }
        shift += 7;
        assert!(shift < 64, "varint too long");
    }
}

#[derive(Debug, PartialEq)]
enum Value {
    Int(u64),
    Bytes(Vec<u8>),
}

/// The (field, value) pairs of one protobuf message (wire types 0 and 2 only).
fn fields(msg: &[u8]) -> Vec<(u64, Value)> {
    let mut pos = 0;
    let mut out = Vec::new();
    while pos < msg.len() {
        let key = varint(msg, &mut pos);
        let v = match key & 7 {
            0 => Value::Int(varint(msg, &mut pos)),
            2 => {
                let n = varint(msg, &mut pos) as usize;
                pos += n;
                Value::Bytes(msg[pos - n..pos].to_vec())
            }
            w => panic!("unexpected wire type {w}"),
        };
        out.push((key >> 3, v));
    }
    assert_eq!(pos, msg.len(), "message overruns its length");
    out
}

/// The one integer of a required field.
fn int(f: &[(u64, Value)], n: u64) -> u64 {
    let vals: Vec<&Value> = f.iter().filter(|(k, _)| *k == n).map(|(_, v)| v).collect();
    assert_eq!(vals.len(), 1, "field {n} must occur once in {f:?}");
    match vals[0] {
        Value::Int(v) => *v,
        v => panic!("field {n} is {v:?}"),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pkt {
    tick: u64,
    cmd: u64,
    addr: u64,
    size: u64,
    pkt_id: u64,
}

/// Checks the magic and the header; returns the header's obj_id, its
/// id_strings and the packets.
fn decode_gem5(file: &[u8]) -> (String, Vec<(u64, String)>, Vec<Pkt>) {
    assert_eq!(&file[..4], &[0x67, 0x65, 0x6d, 0x35], "magic");
    let mut pos = 4;
    let mut msgs = Vec::new();
    while pos < file.len() {
        let n = varint(file, &mut pos) as usize;
        msgs.push(&file[pos..pos + n]);
        pos += n;
    }
    assert_eq!(pos, file.len());
    let h = fields(msgs[0]);
    let obj_id = match &h.iter().find(|(k, _)| *k == 1).expect("obj_id").1 {
        Value::Bytes(b) => String::from_utf8(b.clone()).unwrap(),
        v => panic!("obj_id is {v:?}"),
    };
    assert_eq!(int(&h, 3), 1_000_000_000_000, "tick_freq");
    let ids = h
        .iter()
        .filter(|(k, _)| *k == 4)
        .map(|(_, v)| match v {
            Value::Bytes(b) => {
                let e = fields(b);
                let name = match &e.iter().find(|(k, _)| *k == 2).unwrap().1 {
                    Value::Bytes(s) => String::from_utf8(s.clone()).unwrap(),
                    v => panic!("{v:?}"),
                };
                (int(&e, 1), name)
            }
            v => panic!("id_strings is {v:?}"),
        })
        .collect();
    let pkts = msgs[1..]
        .iter()
        .map(|m| {
            let f = fields(m);
            for (k, _) in &f {
                assert!([1, 2, 3, 4, 5, 6, 7].contains(k), "unknown packet field {k}");
            }
            Pkt { tick: int(&f, 1), cmd: int(&f, 2), addr: int(&f, 3), size: int(&f, 4), pkt_id: int(&f, 6) }
        })
        .collect();
    (obj_id, ids, pkts)
}

// ---- helpers ----------------------------------------------------------------

fn trace_bytes(header: &TraceHeader, events: &[(u32, Event<'_>)]) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), header, &WriterOptions::default()).unwrap();
    for (t, e) in events {
        w.write(*t, e).unwrap();
    }
    w.finish().unwrap().0
}

fn export_mem<W: export::PacketWriter>(bytes: &[u8], opts: Options, w: W) -> Result<(Summary, W), export::ExportError> {
    let mut r = TraceReader::new(Cursor::new(bytes), "t.pmt").unwrap();
    let mut ex = Exporter::new(opts, &r.header().clone(), "t.pmt", w);
    ex.run(&mut r, |_| {})?;
    ex.finish()
}

fn export_sample(path: &str, opts: &Options, format: Format, gzip: bool, dir: &Path) -> (Summary, Vec<u8>) {
    let out = dir.join(format!("out.{}", format.name()));
    let mut r = TraceReader::open(path).unwrap();
    let fo = FileOptions { gzip, tck_ps: None, obj_id: "sample".into() };
    let s = export::export_file(&mut r, opts, format, &fo, &out, |_| {}).unwrap();
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(s.out_bytes, bytes.len() as u64);
    (s, bytes)
}

fn simulate(path: &str, cfg: Config) -> pmsim_sim::Report {
    let mut r = TraceReader::open(path).unwrap();
    let mut sim = Simulator::new(cfg, r.header()).unwrap();
    sim.replay(&mut r).unwrap();
    sim.report()
}

fn count(s: &Summary, src: Source) -> u64 {
    s.by_source.iter().find(|(n, _)| n == src.name()).unwrap().1
}

fn heap_header() -> TraceHeader {
    TraceHeader {
        heap: HeapInfo { path: String::new(), base: 0x10000, size: 0x10000 },
        regions: vec![Region {
            id: 1,
            name: "slab header".into(),
            category: Category::Meta,
            base: 0x10000,
            len: 0x100,
        }],
        ..TraceHeader::default()
    }
}

// ---- golden -----------------------------------------------------------------

/// Store, flush, fence by thread 0; store, flush by thread 1: two packets,
/// the second one a fence later.
fn five_events() -> Vec<(u32, Event<'static>)> {
    vec![
        (0, Event::Store { addr: 0x10040, size: 8, value: None }),
        (0, Event::Flush { kind: FlushKind::Clwb, line: 0x10040 }),
        (0, Event::Fence { kind: FenceKind::Sfence }),
        (1, Event::Store { addr: 0x10080, size: 8, value: None }),
        (1, Event::Flush { kind: FlushKind::Clflushopt, line: 0x10080 }),
    ]
}

#[test]
fn golden_five_event_trace_exports_to_exact_bytes() {
    let bytes = trace_bytes(&heap_header(), &five_events());
    let opts = Options { base: 0x1000, ..Options::default() };
    let (s, w) = export_mem(&bytes, opts.clone(), gem5::PacketTraceWriter::new(Vec::new(), "t").unwrap()).unwrap();
    assert_eq!((s.events, s.packets, s.writes), (5, 2, 2));
    #[rustfmt::skip]
    let expected: Vec<u8> = [
        &[0x67, 0x65, 0x6d, 0x35][..],                  // "gem5"
        &[0x45],                                        // header: 69 bytes
        &[0x0a, 0x01, 0x74],                            //   obj_id "t"
        &[0x18, 0x80, 0xa0, 0x94, 0xa5, 0x8d, 0x1d],    //   tick_freq 10^12
        &[0x22, 0x09, 0x08, 0x01, 0x12, 0x05, b'f', b'l', b'u', b's', b'h'],             // id_strings {1, "flush"}
        &[0x22, 0x0c, 0x08, 0x02, 0x12, 0x08, b'e', b'v', b'i', b'c', b't', b'i', b'o', b'n'],
        &[0x22, 0x0b, 0x08, 0x03, 0x12, 0x07, b'n', b't', b's', b't', b'o', b'r', b'e'],
        &[0x22, 0x09, 0x08, 0x04, 0x12, 0x05, b's', b't', b'o', b'r', b'e'],
        &[0x22, 0x08, 0x08, 0x05, 0x12, 0x04, b'l', b'o', b'a', b'd'],
        &[0x10],                                        // packet: 16 bytes
        &[0x08, 0x00],                                  //   tick 0
        &[0x10, 0x04],                                  //   cmd WriteReq
        &[0x18, 0xc0, 0x20],                            //   addr 0x1040 (0x10040 - heap base + 0x1000)
        &[0x20, 0x40],                                  //   size 64
        &[0x30, 0x81, 0x80, 0x80, 0x80, 0x80, 0x20],    //   pkt_id: thread 0, flush (1 << 40), event 1
        &[0x13],                                        // packet: 19 bytes
        &[0x08, 0xa0, 0x8d, 0x06],                      //   tick 100000: the fence waited 100 ns after tick 0
        &[0x10, 0x04],
        &[0x18, 0x80, 0x21],                            //   addr 0x1080
        &[0x20, 0x40],
        &[0x30, 0x84, 0x80, 0x80, 0x80, 0x80, 0xa0, 0x40], // pkt_id: thread 1 (1 << 48), flush, event 4
    ]
    .concat();
    assert_eq!(w.into_inner(), expected);

    let (_, w) = export_mem(&bytes, opts.clone(), export::dramsim3::Writer::new(Vec::new(), 833)).unwrap();
    assert_eq!(String::from_utf8(w.into_inner()).unwrap(), "0x1040 WRITE 0\n0x1080 WRITE 120\n");
    let (_, w) = export_mem(&bytes, opts, export::ramulator::Writer::new(Vec::new())).unwrap();
    assert_eq!(String::from_utf8(w.into_inner()).unwrap(), "ST 0x1040\nST 0x1080\n");
}

// ---- real traces against the source trace ----------------------------------

/// What the persist stream must be when the cache never evicts: a flush
/// writes its line iff a store dirtied it since the line's last flush. Ticks
/// follow FORMAT.md's rule. Returns (tick, tid, event index, line) per packet.
fn reference(path: &str, t: Timing) -> Vec<(u64, u32, u64, u64)> {
    let mut r = TraceReader::open(path).unwrap();
    let mut dirty = HashSet::new();
    let mut outstanding: HashMap<u32, u64> = HashMap::new();
    let (mut next, mut out) = (0u64, Vec::new());
    r.for_each(|rec| match rec.event {
        Event::Store { addr, size, .. } => {
            for l in (addr >> 6)..=((addr + size as u64 - 1) >> 6) {
                dirty.insert(l << 6);
            }
        }
        Event::Flush { line, .. } if dirty.remove(&line) => {
            out.push((next, rec.tid, rec.index, line));
            outstanding.insert(rec.tid, next);
            next += t.packet_ps;
        }
        Event::Fence { .. } => {
            if let Some(last) = outstanding.remove(&rec.tid) {
                next = next.max(last + t.fence_ps);
            }
        }
        Event::NtStore { .. } | Event::Load { .. } => panic!("the samples have none"),
        _ => {}
    })
    .unwrap();
    out
}

#[test]
fn gem5_packets_match_the_source_trace() {
    let dir = tempfile::tempdir().unwrap();
    for path in SAMPLES {
        let header = TraceReader::open(path).unwrap().header().clone();
        let base = 0x4000_0000;
        let opts = Options { base, ..Options::default() };
        let expected = reference(path, opts.timing);
        for gzip in [false, true] {
            let (s, bytes) = export_sample(path, &opts, Format::Gem5, gzip, dir.path());
            let bytes = if gzip {
                assert_eq!(&bytes[..2], &[0x1f, 0x8b], "gzip magic");
                let mut plain = Vec::new();
                flate2::read::GzDecoder::new(&bytes[..]).read_to_end(&mut plain).unwrap();
                plain
            } else {
                bytes
            };
            let (obj_id, ids, pkts) = decode_gem5(&bytes);
            assert_eq!(obj_id, "sample");
            assert_eq!(ids.len(), 5);
            assert!(ids.contains(&(1, "flush".to_string())) && ids.contains(&(2, "eviction".to_string())));
            assert_eq!(count(&s, Source::Eviction), 0, "the default cache holds these small heaps");
            assert_eq!(pkts.len(), expected.len(), "{path}: packet count");
            assert_eq!(s.packets, pkts.len() as u64);
            for (p, &(tick, tid, index, line)) in pkts.iter().zip(&expected) {
                assert_eq!(p.cmd, 4, "WriteReq");
                assert_eq!(p.size, 64);
                assert_eq!(p.addr, line - header.heap.base + base, "{p:?}");
                assert_eq!(p.tick, tick, "{p:?}");
                assert_eq!(p.pkt_id >> 48, tid as u64);
                assert_eq!(p.pkt_id >> 40 & 0xff, Source::Flush as u64);
                assert_eq!(p.pkt_id & ((1 << 40) - 1), index);
            }
        }
        // The text formats carry the same requests in the same order.
        let (_, d) = export_sample(path, &opts, Format::Dramsim3, false, dir.path());
        let (_, r) = export_sample(path, &opts, Format::Ramulator, false, dir.path());
        let (d, r) = (String::from_utf8(d).unwrap(), String::from_utf8(r).unwrap());
        assert_eq!(d.lines().count(), expected.len());
        assert_eq!(r.lines().count(), expected.len());
        for ((dl, rl), &(tick, _, _, line)) in d.lines().zip(r.lines()).zip(&expected) {
            let a = line - header.heap.base + base;
            assert_eq!(dl, format!("{a:#x} WRITE {}", tick / export::dramsim3::DEFAULT_TCK_PS));
            assert_eq!(rl, format!("ST {a:#x}"));
        }
    }
}

/// A small cache: evictions appear, and the export holds exactly the PM
/// writes the simulator counts (ADR and eADR), per region category too.
#[test]
fn packet_counts_match_the_simulator() {
    let small = CacheConfig { sets: 16, ways: 2 };
    let dir = tempfile::tempdir().unwrap();
    for path in SAMPLES {
        for eadr in [false, true] {
            let cfg = Config { cache: small.clone(), eadr, ..Config::default() };
            let report = simulate(path, cfg);
            let opts = Options { cache: small.clone(), eadr, ..Options::default() };
            let (s, _) = export_sample(path, &opts, Format::Ramulator, false, dir.path());
            assert!(report.overall.evictions > 0);
            assert_eq!(count(&s, Source::Flush), report.overall.dirty_flushes, "{path} eadr={eadr}");
            assert_eq!(count(&s, Source::Eviction), report.overall.evictions, "{path} eadr={eadr}");
            assert_eq!(s.packets, report.overall.pm_writes);
            assert_eq!(s.dirty_lines_left, report.cache.dirty_lines_at_end);
            for cat in [Category::Wal, Category::Meta] {
                let opts = Options { categories: Some(vec![cat]), ..opts.clone() };
                let (s, _) = export_sample(path, &opts, Format::Ramulator, false, dir.path());
                let want: u64 =
                    report.regions.iter().filter(|r| r.category == Some(cat)).map(|r| r.stats.pm_writes).sum();
                assert_eq!(s.packets, want, "{path} {cat:?} eadr={eadr}");
            }
        }
    }
}

#[test]
fn mode_all_adds_every_store_and_thread_filter_keeps_one_thread() {
    let dir = tempfile::tempdir().unwrap();
    let path = SAMPLES[0];
    let mut pieces = 0u64;
    let mut per_thread = [0u64; 2];
    TraceReader::open(path)
        .unwrap()
        .for_each(|rec| {
            if let Event::Store { addr, size, .. } = rec.event {
                pieces += (addr + size as u64 - 1) / 64 - addr / 64 + 1;
            }
        })
        .unwrap();
    let (persist, _) = export_sample(path, &Options::default(), Format::Gem5, false, dir.path());
    let all = Options { mode: Mode::All, ..Options::default() };
    let (s, bytes) = export_sample(path, &all, Format::Gem5, false, dir.path());
    assert_eq!(count(&s, Source::Store), pieces);
    assert_eq!(s.packets, persist.packets + pieces);
    let (_, _, pkts) = decode_gem5(&bytes);
    assert!(pkts.windows(2).all(|w| w[0].tick < w[1].tick), "ticks increase");
    assert!(pkts.iter().all(|p| p.size >= 1 && p.size <= 64 && p.addr % 64 + p.size <= 64));
    for t in 0..2u32 {
        let opts = Options { thread: Some(t), ..Options::default() };
        let (s, bytes) = export_sample(path, &opts, Format::Gem5, false, dir.path());
        let (_, _, pkts) = decode_gem5(&bytes);
        assert!(pkts.iter().all(|p| p.pkt_id >> 48 == t as u64));
        per_thread[t as usize] = s.packets;
    }
    assert_eq!(per_thread[0] + per_thread[1], persist.packets);
}

#[test]
fn non_temporal_stores_combine_per_line_and_drain_at_fences() {
    let ev = vec![
        (0, Event::NtStore { addr: 0x10000, size: 8, value: None }),
        (0, Event::NtStore { addr: 0x10008, size: 8, value: None }),
        (0, Event::NtStore { addr: 0x10040, size: 8, value: None }), // leaves line 0x10000
        (0, Event::Fence { kind: FenceKind::Sfence }),               // drains line 0x10040
        (0, Event::NtStore { addr: 0x10080, size: 8, value: None }), // drained at the end
    ];
    let bytes = trace_bytes(&heap_header(), &ev);
    let (s, w) =
        export_mem(&bytes, Options::default(), gem5::PacketTraceWriter::new(Vec::new(), "t").unwrap()).unwrap();
    let (_, _, pkts) = decode_gem5(&w.into_inner());
    assert_eq!(count(&s, Source::NtStore), 3);
    let got: Vec<(u64, u64, u64)> = pkts.iter().map(|p| (p.tick, p.addr, p.pkt_id & 0xff_ffff)).collect();
    // Each line is charged to the store that started it; after the fence the
    // next packet waits 100 ns after the latest one (tick 1000).
    assert_eq!(got, vec![(0, 0x0, 0), (1000, 0x40, 2), (101_000, 0x80, 4)]);
}

#[test]
fn bad_input_is_one_clear_error() {
    let bytes = trace_bytes(&heap_header(), &five_events());
    let w = || export::ramulator::Writer::new(Vec::new());
    let e = export_mem(&bytes, Options { categories: Some(vec![Category::Wal]), ..Options::default() }, w())
        .err()
        .unwrap()
        .to_string();
    assert_eq!(e, "t.pmt: the trace has no region of category wal (it has meta)");
    let e = export_mem(&bytes, Options { thread: Some(7), ..Options::default() }, w()).err().unwrap().to_string();
    assert_eq!(e, "t.pmt: the trace has no events of thread 7 (threads 0 to 1)");
    let outside = trace_bytes(
        &heap_header(),
        &[
            (0, Event::Store { addr: 0x20000, size: 8, value: None }),
            (0, Event::Flush { kind: FlushKind::Clwb, line: 0x20000 }),
        ],
    );
    let e = export_mem(&outside, Options::default(), w()).err().unwrap().to_string();
    assert!(e.starts_with("t.pmt: event 1 (thread 0): address 0x20000 is outside the heap [0x10000, 0x20000)"), "{e}");

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("no/such/dir/x.trc");
    let mut r = TraceReader::new(Cursor::new(&bytes[..]), "t.pmt").unwrap();
    let e = export::export_file(&mut r, &Options::default(), Format::Gem5, &FileOptions::default(), &out, |_| {})
        .err()
        .unwrap()
        .to_string();
    assert!(e.starts_with(&format!("{}: cannot create:", out.display())), "{e}");
    // A failed export leaves no file behind.
    let out = dir.path().join("x.trc");
    let mut r = TraceReader::new(Cursor::new(&bytes[..]), "t.pmt").unwrap();
    let opts = Options { thread: Some(9), ..Options::default() };
    assert!(export::export_file(&mut r, &opts, Format::Gem5, &FileOptions::default(), &out, |_| {}).is_err());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn the_replay_script_names_the_trace_and_the_memory() {
    let s =
        gem5::Script { trace: "/tmp/a b/t.gem5".into(), duration: 123_456, memory: gem5::Memory::Nvm, size: 1 << 27 }
            .render();
    for needle in [
        "TRACE = \"/tmp/a b/t.gem5\"",
        "DURATION = 123456",
        "MEM_SIZE = 134217728",
        "os.symlink(TRACE, link)",
        "STATE 0 %d TRACE pmsim-trace 0\\n\" % DURATION",
        "STATE 1 0 EXIT",
        "INIT 0",
        "TRANSITION 0 1 1",
        "TRANSITION 1 1 1",
        "MemCtrl(dram=NVM_2400_1x64(",
        "mem_mode=\"timing\"",
        "TrafficGen(config_file=cfg)",
    ] {
        assert!(s.contains(needle), "missing {needle:?} in\n{s}");
    }
}
