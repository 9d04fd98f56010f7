//! What a trace holds, counted: events by kind, thread and region, and how many
//! bytes each event took. Behind `pmsim trace info`.

use crate::event::{Event, EVENT_KINDS};
use crate::reader::TraceReader;
use crate::regions::RegionMap;
use crate::TraceError;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Read;

/// Accesses and flushes that fell in one region.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct RegionCounts {
    pub category: String,
    pub stores: u64,
    pub store_bytes: u64,
    pub flushes: u64,
}

/// Counts of a whole trace.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TraceStats {
    pub events: u64,
    pub blocks: u64,
    pub file_bytes: u64,
    /// File bytes per event, preamble included.
    pub bytes_per_event: f64,
    pub by_kind: BTreeMap<&'static str, u64>,
    pub by_thread: BTreeMap<u32, u64>,
    /// Keyed by region name; accesses outside every region are under `(none)`.
    pub by_region: BTreeMap<String, RegionCounts>,
}

impl TraceStats {
    /// Reads the whole trace and counts it.
    pub fn scan<R: Read>(reader: &mut TraceReader<R>) -> Result<TraceStats, TraceError> {
        let mut by_kind = [0u64; EVENT_KINDS];
        let mut threads: Vec<u64> = Vec::new();
        let mut regions = RegionMap::new(&reader.header().regions);
        let mut by_region: BTreeMap<String, RegionCounts> = BTreeMap::new();
        let mut touch = |regions: &RegionMap, addr: u64, store_bytes: Option<u32>| {
            let (name, cat) = match regions.lookup(addr) {
                Some(r) => (r.name.as_str(), r.category.name()),
                None => ("(none)", "none"),
            };
            let c = match by_region.get_mut(name) {
                Some(c) => c,
                None => by_region
                    .entry(name.to_string())
                    .or_insert_with(|| RegionCounts { category: cat.to_string(), ..Default::default() }),
            };
            match store_bytes {
                Some(n) => {
                    c.stores += 1;
                    c.store_bytes += n as u64;
                }
                None => c.flushes += 1,
            }
        };
        let totals = reader.for_each(|rec| {
            by_kind[rec.event.kind_index()] += 1;
            let t = rec.tid as usize;
            if threads.len() <= t {
                threads.resize(t + 1, 0);
            }
            threads[t] += 1;
            match rec.event {
                Event::Store { addr, size, .. } | Event::NtStore { addr, size, .. } => {
                    touch(&regions, addr, Some(size))
                }
                Event::Flush { line, .. } => touch(&regions, line, None),
                ref ev => {
                    regions.apply(ev);
                }
            }
        })?;
        Ok(TraceStats {
            events: totals.events,
            blocks: totals.blocks,
            file_bytes: totals.bytes,
            bytes_per_event: if totals.events == 0 { 0.0 } else { totals.bytes as f64 / totals.events as f64 },
            by_kind: Event::KIND_NAMES.iter().copied().zip(by_kind).filter(|&(_, n)| n > 0).collect(),
            by_thread: threads.iter().enumerate().filter(|&(_, &n)| n > 0).map(|(t, &n)| (t as u32, n)).collect(),
            by_region,
        })
    }
}
