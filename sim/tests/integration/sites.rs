//! Per-site figures: each flush and fence is charged to the site the trace
//! names for it, and the rows come costliest first.

use pmsim_sim::{Config, Simulator};
use pmsim_traces::{Event, FenceKind, FlushKind, Site, TraceHeader, TraceReader, TraceWriter, WriterOptions};

fn site(id: u32, line: u32) -> Site {
    Site { id, file: "src/a.rs".into(), line, ..Site::default() }
}

#[test]
fn flushes_and_fences_are_charged_to_their_sites() {
    let mut w = TraceWriter::new(Vec::new(), &TraceHeader::default(), &WriterOptions::default()).unwrap();
    w.define_site(&site(1, 10)).unwrap();
    w.define_site(&site(20, 30)).unwrap();
    let store = |line: u64| Event::Store { addr: line, size: 8, value: None };
    let flush = |line: u64| Event::Flush { kind: FlushKind::Clwb, line };
    let fence = Event::Fence { kind: FenceKind::Sfence };
    // Site 1 flushes line 0 three times (two reflushes at distance 0), site
    // 20 flushes four distinct lines once each and fences twice; thread 1's
    // flush names no site.
    for _ in 0..3 {
        w.write(0, &store(0)).unwrap();
        w.write_at(0, 1, &flush(0)).unwrap();
    }
    for l in 1..=4 {
        w.write(0, &store(l * 64)).unwrap();
        w.write_at(0, 20, &flush(l * 64)).unwrap();
    }
    w.write_at(0, 20, &fence).unwrap();
    w.write_at(0, 20, &fence).unwrap();
    w.write_at(1, 0, &flush(4096)).unwrap();
    let bytes = w.finish().unwrap().0;
    let mut r = TraceReader::new(&bytes[..], "mem.pmt").unwrap();
    let mut sim = Simulator::new(Config::default(), r.header()).unwrap();
    sim.replay(&mut r).unwrap();
    let rep = sim.report();
    let row = |id: u32| rep.sites.iter().find(|s| s.site == id).unwrap_or_else(|| panic!("no row {id}"));
    assert_eq!((row(1).flushes, row(1).reflushes, row(1).fences), (3, 2, 0));
    assert_eq!((row(20).flushes, row(20).reflushes, row(20).fences), (4, 0, 2));
    assert_eq!((row(0).flushes, row(0).name.as_str()), (1, "(unknown)"));
    assert_eq!(row(20).name, "src/a.rs:30");
    assert!(rep.sites.windows(2).all(|p| p[0].persist_ns >= p[1].persist_ns), "costliest first");
    assert!(row(20).persist_ns > 0.0);
    let total: f64 = rep.sites.iter().map(|s| s.persist_ns).sum();
    assert!((total - rep.overall.persist_ns.total).abs() < 1e-6, "sites split the whole persist time");
}
