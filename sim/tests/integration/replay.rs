//! The simulator on hand-built traces, each small enough to check by hand.

use pmsim_sim::{Config, Report, Scope, Simulator};
use pmsim_traces::{
    Category, FenceKind, FlushKind, OpKind, OwnedEvent, Region, TraceHeader, TraceReader, TraceWriter, WriterOptions,
};

const BASE: u64 = 0x7f00_0000_0000;

fn store(addr: u64) -> OwnedEvent {
    OwnedEvent::Store { addr, size: 8, value: None }
}
fn clwb(line: u64) -> OwnedEvent {
    OwnedEvent::Flush { kind: FlushKind::Clwb, line }
}
fn sfence() -> OwnedEvent {
    OwnedEvent::Fence { kind: FenceKind::Sfence }
}
/// Store, clwb and sfence of one line: a persist.
fn persist(addr: u64) -> Vec<OwnedEvent> {
    vec![store(addr), clwb(addr & !63), sfence()]
}

fn header() -> TraceHeader {
    TraceHeader {
        threads: 2,
        regions: vec![
            Region { id: 1, name: "slab headers".into(), category: Category::Meta, base: BASE, len: 1 << 20 },
            Region { id: 2, name: "wal".into(), category: Category::Wal, base: BASE + (1 << 20), len: 1 << 20 },
        ],
        ..TraceHeader::default()
    }
}

fn run_with(cfg: Config, events: &[(u32, OwnedEvent)]) -> (Report, Simulator) {
    let mut sim = Simulator::new(cfg, &header()).unwrap();
    for (t, e) in events {
        sim.step(*t, &e.as_event());
    }
    (sim.report(), sim)
}

fn run(events: &[(u32, OwnedEvent)]) -> Report {
    run_with(Config::default(), events).0
}

fn on(t: u32, evs: Vec<OwnedEvent>) -> Vec<(u32, OwnedEvent)> {
    evs.into_iter().map(|e| (t, e)).collect()
}

#[test]
fn abcda_has_distance_three() {
    let evs = on(0, [0, 1, 2, 3, 0].iter().flat_map(|i| persist(BASE + i * 64)).collect());
    let r = run(&evs);
    assert_eq!(r.overall.flushes, 5);
    assert_eq!(r.overall.first_flushes, 4);
    assert_eq!(r.overall.bucket("3"), 1);
    assert_eq!(r.overall.reflushes, 1, "3 < threshold 4");
    assert_eq!(r.overall.reflush_ratio, 0.2);
    // With threshold 3 the same flush is regular.
    let mut cfg = Config::default();
    cfg.reflush.threshold = 3;
    assert_eq!(run_with(cfg, &evs).0.overall.reflushes, 0);
}

#[test]
fn a_line_flushed_twice_in_a_row_has_distance_zero_and_costs_the_reflush_latency() {
    let evs = on(0, [persist(BASE), persist(BASE + 8)].concat());
    let r = run(&evs);
    assert_eq!(r.overall.bucket("0"), 1);
    assert_eq!(r.overall.reflushes, 1);
    assert_eq!(r.overall.dirty_flushes, 2);
    // First flush: regular, XPBuffer miss without eviction (93 + 14 ns); second:
    // reflush at distance 0 (800 ns); two fences (10 ns each), all metadata.
    assert_eq!(r.overall.persist_ns.meta, 93.0 + 14.0 + 800.0 + 20.0);
    assert_eq!(r.overall.persist_ns.total, r.overall.persist_ns.meta);
}

#[test]
fn a_clean_line_flushed_again_moves_no_data() {
    let evs = on(0, vec![store(BASE), clwb(BASE), clwb(BASE), sfence()]);
    let r = run(&evs);
    assert_eq!(r.overall.reflushes, 1, "still a reflush by distance");
    assert_eq!(r.overall.dirty_flushes, 1);
    assert_eq!(r.overall.pm_writes, 1);
    assert_eq!(r.overall.persist_ns.meta, 93.0 + 14.0 + 20.0 + 10.0);
}

#[test]
fn four_adjacent_flushes_combine_into_one_xpline_write() {
    let evs = on(0, (0..4).flat_map(|i| persist(BASE + 0x4000 + i * 64)).collect());
    let r = run(&evs);
    assert_eq!(r.overall.pm_writes, 4);
    assert_eq!(r.overall.xpbuffer_hits, 3);
    assert_eq!(r.overall.sequential_writes, 3);
    assert_eq!(r.pm.media_write_bytes, 256);
    assert_eq!(r.pm.rmw_read_bytes, 0, "a fully written XPLine needs no read-modify-write");
    assert_eq!(r.pm.media_read_bytes, 256, "the first store's fill; the others find the XPLine buffered");
    assert_eq!(r.pm.write_amplification, 1.0);
    assert_eq!(r.dimms.iter().map(|d| d.media_writes).sum::<u64>(), 1);
}

#[test]
fn scattered_flushes_amplify_writes_four_times() {
    let evs = on(0, (0..4).flat_map(|i| persist(BASE + i * 4096 * 6)).collect());
    let r = run(&evs);
    let busy: Vec<_> = r.dimms.iter().filter(|d| d.writes > 0).collect();
    assert_eq!((busy.len(), busy[0].writes), (1, 4), "6 DIMMs x 4 KB: every 24 KB lands on the same DIMM");
    assert_eq!(r.overall.random_writes, 4);
    assert_eq!(r.pm.write_amplification, 4.0);
    assert_eq!(r.pm.rmw_read_bytes, 4 * 256, "partial XPLines are read-modify-written");
    assert_eq!(r.pm.media_read_bytes, 8 * 256, "and each store's fill read its XPLine");
}

#[test]
fn eadr_gives_no_flush_cost() {
    let evs = on(0, [0, 1, 2, 3, 0, 0].iter().flat_map(|i| persist(BASE + i * 64)).collect());
    let cfg = Config { eadr: true, ..Config::default() };
    let r = run_with(cfg, &evs).0;
    assert_eq!(r.overall.reflushes, 2, "distances are still a property of the trace");
    assert_eq!(r.overall.pm_writes, 0);
    assert_eq!(r.overall.dirty_flushes, 0);
    let p = &r.overall.persist_ns;
    assert_eq!([p.meta, p.wal, p.log, p.data, p.unmapped], [0.0; 5]);
    assert_eq!(p.fence, 6.0 * 10.0, "only the fences cost");
    assert_eq!(r.cache.dirty_lines_at_end, 4, "the flushes did not clean the cache");
}

#[test]
fn under_eadr_only_evictions_reach_pm() {
    let mut cfg = Config { eadr: true, ..Config::default() };
    cfg.cache.sets = 1;
    cfg.cache.ways = 2;
    let evs = on(0, (0..5).flat_map(|i| persist(BASE + i * 64)).collect());
    let r = run_with(cfg, &evs).0;
    assert_eq!(r.overall.evictions, 3);
    assert_eq!(r.overall.pm_writes, 3);
    assert_eq!(r.pm.evicted_bytes, 3 * 64);
    assert_eq!(r.cache.dirty_lines_at_end, 2);
}

#[test]
fn clflush_invalidates_and_clwb_keeps() {
    let evs = on(
        0,
        vec![
            store(BASE),
            OwnedEvent::Flush { kind: FlushKind::Clflushopt, line: BASE },
            store(BASE + 64),
            clwb(BASE + 64),
            store(BASE),
            store(BASE + 64),
        ],
    );
    let (r, _) = run_with(Config::default(), &evs);
    assert_eq!(r.cache.fills, 3, "BASE twice (invalidated), BASE+64 once");
    assert_eq!(r.cache.hits, 1);
}

#[test]
fn threads_have_their_own_distance_unless_the_scope_is_global() {
    // t0: A B A, t1 flushes C D E in between.
    let mut evs = Vec::new();
    evs.extend(on(0, persist(BASE)));
    evs.extend(on(0, persist(BASE + 64)));
    for i in 2..5 {
        evs.extend(on(1, persist(BASE + i * 64)));
    }
    evs.extend(on(0, persist(BASE)));
    let r = run(&evs);
    assert_eq!(r.thread(0).unwrap().bucket("1"), 1);
    assert_eq!(r.thread(1).unwrap().first_flushes, 3);
    let mut cfg = Config::default();
    cfg.reflush.scope = Scope::Global;
    let r = run_with(cfg, &evs).0;
    assert_eq!(r.overall.bucket("4-7"), 1, "B C D E since the first A");
    assert_eq!(r.overall.reflushes, 0);
    let mut cfg = Config::default();
    cfg.reflush.scope = Scope::Dimm;
    assert_eq!(run_with(cfg, &evs).0.overall.bucket("4-7"), 1, "all on DIMM 0");
}

#[test]
fn costs_go_to_the_innermost_open_operation_and_by_category() {
    let wal = BASE + (1 << 20);
    let mut evs = vec![OwnedEvent::OpBegin { op: OpKind::Malloc, arg: 64 }];
    evs.extend(persist(wal)); // malloc: WAL entry
    evs.push(OwnedEvent::OpBegin { op: OpKind::Morph, arg: 0 });
    evs.extend(persist(BASE)); // morph, nested: slab header
    evs.push(OwnedEvent::OpEnd { op: OpKind::Morph, result: 0 });
    evs.extend(persist(BASE + 128)); // malloc again: bitmap
    evs.push(OwnedEvent::OpEnd { op: OpKind::Malloc, result: 64 });
    evs.extend(persist(0x1000)); // outside any op and any region
    let r = run(&on(0, evs));
    let regular = 93.0 + 14.0 + 10.0;
    let malloc = r.op("malloc").unwrap();
    assert_eq!((malloc.ops, malloc.flushes), (1, 2));
    assert_eq!(malloc.persist_ns.wal, regular);
    assert_eq!(malloc.persist_ns.meta, 93.0 + 10.0, "BASE + 128 combines with BASE's XPLine");
    assert_eq!(malloc.persist_ns_per_op, Some(malloc.persist_ns.total));
    let morph = r.op("morph").unwrap();
    assert_eq!((morph.ops, morph.flushes, morph.persist_ns.meta), (1, 1, regular));
    let none = r.op("none").unwrap();
    assert_eq!((none.flushes, none.persist_ns.unmapped), (1, regular));
    assert_eq!(r.region("wal").unwrap().flushes, 1);
    assert_eq!(r.region("slab headers").unwrap().flushes, 2);
    assert_eq!(r.region("(none)").unwrap().flushes, 1);
    assert_eq!(r.overall.persist_ns.total, 3.0 * regular + 93.0 + 10.0);
}

/// The heap's creation and close are not the program's operations: the
/// steady figures leave them out, so that a short run's one-time costs do
/// not count as its operations' (an exit-time write-back of a whole region).
#[test]
fn the_steady_figures_leave_out_the_heaps_setup_and_close() {
    let mut evs = vec![OwnedEvent::OpBegin { op: OpKind::Init, arg: 0 }];
    for i in 0..10 {
        evs.extend(persist(BASE + i * 4096));
    }
    evs.push(OwnedEvent::OpEnd { op: OpKind::Init, result: 0 });
    evs.push(OwnedEvent::OpBegin { op: OpKind::Malloc, arg: 64 });
    evs.extend(persist(BASE + 64 * 4096));
    evs.push(OwnedEvent::OpEnd { op: OpKind::Malloc, result: 64 });
    evs.push(OwnedEvent::OpBegin { op: OpKind::Close, arg: 0 });
    evs.extend(persist(BASE + 65 * 4096));
    evs.push(OwnedEvent::OpEnd { op: OpKind::Close, result: 0 });
    let r = run(&on(0, evs));
    let malloc = r.op("malloc").unwrap();
    assert_eq!((r.overall.ops, r.steady.ops), (3, 1));
    assert_eq!(r.steady.flushes, 1);
    assert_eq!(r.steady.persist_ns.total, malloc.persist_ns.total);
    assert_eq!(r.steady.persist_ns_per_op, Some(malloc.persist_ns.total));
    assert!(r.overall.persist_ns.total > 10.0 * r.steady.persist_ns.total, "{:?}", r.overall);
}

#[test]
fn regions_added_and_removed_during_the_trace() {
    let log = 0x5000_0000u64;
    let mut evs =
        vec![OwnedEvent::RegionAdd { id: 9, category: Category::Log, base: log, len: 4096, name: "log".into() }];
    evs.extend(persist(log));
    evs.push(OwnedEvent::RegionRemove { id: 9 });
    evs.extend(persist(log + 64));
    let r = run(&on(0, evs));
    assert_eq!(r.region("log").unwrap().flushes, 1);
    assert_eq!(r.region("(none)").unwrap().flushes, 1);
    assert!(r.overall.persist_ns.log > 0.0 && r.overall.persist_ns.unmapped > 0.0);
}

#[test]
fn non_temporal_stores_combine_per_line_and_reach_pm() {
    let mut evs: Vec<OwnedEvent> =
        (0..16).map(|i| OwnedEvent::NtStore { addr: BASE + i * 8, size: 8, value: None }).collect();
    evs.push(sfence());
    let r = run(&on(0, evs));
    assert_eq!(r.overall.nt_stores, 16);
    assert_eq!(r.overall.nt_lines, 2);
    assert_eq!(r.overall.pm_writes, 2);
    assert_eq!(r.pm.media_write_bytes, 256);
}

#[test]
fn access_map_keeps_the_first_flushes_per_category() {
    let wal = BASE + (1 << 20);
    let evs: Vec<_> = (0..5).flat_map(|i| [persist(BASE + i * 64), persist(wal + i * 64)].concat()).collect();
    let mut cfg = Config::default();
    cfg.access_map.per_category = 3;
    let (_, sim) = run_with(cfg, &on(0, evs));
    let pts = sim.access_map();
    assert_eq!(pts.len(), 6);
    assert_eq!((pts[0].category, pts[0].index, pts[0].addr, pts[0].heap_offset), ("meta", 1, BASE, BASE));
    assert_eq!((pts[3].category, pts[3].index, pts[3].region.as_str()), ("wal", 4, "wal"));
    assert_eq!(pts[5].nth, 2);
}

#[test]
fn reflush_only_matches_the_full_model_on_reflush_figures() {
    let evs: Vec<_> = (0..200u64).flat_map(|i| on((i % 3) as u32, persist(BASE + (i * 7 % 13) * 64))).collect();
    let full = run(&evs);
    let only = run_with(Config { reflush_only: true, ..Config::default() }, &evs).0;
    assert_eq!(full.overall.histogram, only.overall.histogram);
    assert_eq!(full.overall.reflushes, only.overall.reflushes);
    assert_eq!(only.overall.persist_ns.total, 0.0);
    assert_eq!(only.overall.pm_writes, 0);
}

#[test]
fn a_trace_file_replays_like_the_stream() {
    let mut evs: Vec<(u32, OwnedEvent)> = Vec::new();
    for i in 0..3000u64 {
        // Thread 20 cannot be named in a switch tag: its switches take the
        // decoder's careful path.
        let t = [0, 1, 2, 20][(i % 4) as usize];
        if i % 50 == 0 {
            evs.push((t, OwnedEvent::OpBegin { op: OpKind::Free, arg: i }));
        }
        evs.extend(on(t, persist(BASE + (i * 37 % 301) * 64 + (i % 2) * (1 << 20))));
        if i % 50 == 49 {
            evs.push((t, OwnedEvent::OpEnd { op: OpKind::Free, result: 0 }));
        }
    }
    let mut cfg = Config::default();
    cfg.access_map.per_category = 10;
    let (stream, sim) = run_with(cfg.clone(), &evs);
    let mut w = TraceWriter::new(Vec::new(), &header(), &WriterOptions::default()).unwrap();
    for (t, e) in &evs {
        w.write(*t, &e.as_event()).unwrap();
    }
    let bytes = w.finish().unwrap().0;
    let mut reader = TraceReader::new(&bytes[..], "mem.pmt").unwrap();
    let mut fsim = Simulator::new(cfg, reader.header()).unwrap();
    let totals = fsim.replay(&mut reader).unwrap();
    assert_eq!(totals.events, evs.len() as u64);
    let file = fsim.report();
    assert_eq!(serde_json::to_value(&file).unwrap(), serde_json::to_value(&stream).unwrap());
    assert_eq!(fsim.access_map(), sim.access_map());
}

#[test]
fn a_bad_configuration_is_refused() {
    let mut cfg = Config::default();
    cfg.cache.ways = 0;
    let e = Simulator::new(cfg, &TraceHeader::default()).err().unwrap();
    assert!(e.to_string().contains("cache.sets and cache.ways"), "{e}");
}

#[test]
fn the_text_report_prints_every_section() {
    let mut evs = vec![(0, OwnedEvent::OpBegin { op: OpKind::Malloc, arg: 64 })];
    evs.extend(on(0, [persist(BASE), persist(BASE + 64), persist(BASE)].concat()));
    let r = run(&evs);
    let mut out = Vec::new();
    pmsim_sim::write_text(&r, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    for needle in ["reflush%", "per thread", "per region", "slab headers", "malloc", "histogram", "Fig. 11", "DIMMs"] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[test]
fn any_thread_id_up_to_65535_works() {
    let evs: Vec<_> = [on(65535, persist(BASE)), on(7, persist(BASE))].concat();
    let r = run(&evs);
    let tids: Vec<u32> = r.threads.iter().map(|t| t.tid).collect();
    assert_eq!(tids, vec![7, 65535]);
    assert_eq!(r.thread(65535).unwrap().flushes, 1);
    assert_eq!(r.overall.first_flushes, 2, "per-thread scope: each thread's first flush of the line");
}
