//! Helpers shared by the trace tests: event generators and a write-then-read loop.

#![allow(dead_code)]

use pmsim_traces::*;
use proptest::prelude::*;

/// Writes `events` with `opts` and returns the bytes.
pub fn write_all(events: &[(u32, OwnedEvent)], opts: &WriterOptions) -> Vec<u8> {
    let header = TraceHeader { threads: 4, ..TraceHeader::default() };
    let mut w = TraceWriter::new(Vec::new(), &header, opts).unwrap();
    for (tid, ev) in events {
        w.write(*tid, &ev.as_event()).unwrap();
    }
    w.finish().unwrap().0
}

/// Reads every event back.
pub fn read_all(bytes: &[u8]) -> Result<Vec<(u64, u32, OwnedEvent)>, TraceError> {
    let mut r = TraceReader::new(bytes, "mem.pmt")?;
    let mut out = Vec::new();
    r.for_each(|rec| out.push((rec.index, rec.tid, rec.event.to_owned())))?;
    Ok(out)
}

fn label() -> impl Strategy<Value = String> {
    "[a-z ]{0,12}"
}

/// Any event, with store values present iff `values`.
pub fn event(values: bool) -> impl Strategy<Value = OwnedEvent> {
    let addr = prop_oneof![0u64..4096, any::<u64>(), (0u64..1 << 20).prop_map(|a| 0x7f00_0000_0000 + a)];
    let size = prop_oneof![Just(1u32), Just(8), Just(64), 1u32..300];
    let access = (addr.clone(), size).prop_flat_map(move |(a, s)| {
        let v = if values {
            proptest::collection::vec(any::<u8>(), s as usize).prop_map(Some).boxed()
        } else {
            Just(None).boxed()
        };
        (Just(a), Just(s), v)
    });
    let op = prop_oneof![
        Just(OpKind::Malloc),
        Just(OpKind::Free),
        Just(OpKind::Morph),
        Just(OpKind::LogGc),
        Just(OpKind::Recovery),
        (16u64..1 << 40).prop_map(OpKind::Other)
    ];
    let cat = prop_oneof![Just(Category::Meta), Just(Category::Wal), Just(Category::Log), Just(Category::Data)];
    prop_oneof![
        4 => access.clone().prop_map(|(addr, size, value)| OwnedEvent::Store { addr, size, value }),
        1 => access.prop_map(|(addr, size, value)| OwnedEvent::NtStore { addr, size, value }),
        1 => (addr.clone(), 1u32..100).prop_map(|(addr, size)| OwnedEvent::Load { addr, size }),
        3 => (addr.clone(), 0u8..3).prop_map(|(a, k)| OwnedEvent::Flush {
            kind: [FlushKind::Clwb, FlushKind::Clflushopt, FlushKind::Clflush][k as usize],
            line: a & !63
        }),
        2 => (0u8..3).prop_map(|k| OwnedEvent::Fence { kind: [FenceKind::Sfence, FenceKind::Mfence, FenceKind::LockedRmw][k as usize] }),
        1 => Just(OwnedEvent::ThreadStart),
        1 => Just(OwnedEvent::ThreadEnd),
        1 => (any::<u64>(), cat, addr.clone(), any::<u64>(), label())
            .prop_map(|(id, category, base, len, name)| OwnedEvent::RegionAdd { id, category, base, len, name }),
        1 => any::<u64>().prop_map(|id| OwnedEvent::RegionRemove { id }),
        1 => (op.clone(), any::<u64>()).prop_map(|(op, arg)| OwnedEvent::OpBegin { op, arg }),
        1 => (op, any::<u64>()).prop_map(|(op, result)| OwnedEvent::OpEnd { op, result }),
        1 => (any::<u64>(), label()).prop_map(|(id, label)| OwnedEvent::Marker { id, label }),
    ]
}

/// A thread id: mostly small (inline in the tag), sometimes large.
pub fn tid() -> impl Strategy<Value = u32> {
    prop_oneof![8 => 0u32..4, 1 => 0u32..=65535]
}
