//! Access-map data (NVAlloc Fig. 2: the addresses of the first 1000 metadata
//! flushes, showing small random writes spread over the heap): the first N
//! flushes of each region category, with their event index, address and region,
//! written as CSV or JSON for a plotter.

use crate::stats::{PERSIST_SLOT_NAMES, UNMAPPED};
use serde::Serialize;
use std::io::{self, Write};

/// Categories tracked: the four region categories and "unmapped".
const CATS: usize = UNMAPPED as usize + 1;

/// The rows being collected (cheap: a bounded vector per category).
#[derive(Clone, Debug, Default)]
pub(crate) struct AccessMap {
    per_category: usize,
    /// Bit c is set while category c still takes flushes: the one test a
    /// flush pays once every category is full (or when no map is wanted).
    open: u8,
    rows: [Vec<(u64, u64, u32)>; CATS],
}

impl AccessMap {
    pub fn new(per_category: usize) -> Self {
        let open = if per_category > 0 { (1u8 << CATS) - 1 } else { 0 };
        AccessMap { per_category, open, rows: Default::default() }
    }

    /// Records a flush of category slot `cat` if that category is not full yet.
    #[inline(always)]
    pub fn offer(&mut self, cat: u8, index: u64, line: u64, region: u32) {
        if self.open & (1 << cat) != 0 {
            self.take(cat, index, line, region);
        }
    }

    #[inline(never)]
    fn take(&mut self, cat: u8, index: u64, line: u64, region: u32) {
        let v = &mut self.rows[cat as usize];
        v.push((index, line, region));
        if v.len() >= self.per_category {
            self.open &= !(1 << cat);
        }
    }

    pub fn points(&self, region_name: impl Fn(u32) -> String, heap_base: u64) -> Vec<AccessPoint> {
        let mut out = Vec::new();
        for (cat, rows) in self.rows.iter().enumerate() {
            for (nth, &(index, addr, region)) in rows.iter().enumerate() {
                out.push(AccessPoint {
                    category: PERSIST_SLOT_NAMES[cat],
                    nth: nth as u64,
                    index,
                    addr,
                    heap_offset: addr.checked_sub(heap_base).unwrap_or(addr),
                    region: region_name(region),
                });
            }
        }
        out
    }
}

/// One flush of the access map.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AccessPoint {
    /// `meta`, `wal`, `log`, `data` or `unmapped`.
    pub category: &'static str,
    /// The how-manieth flush of its category this is (Fig. 2's x axis).
    pub nth: u64,
    /// Its event index in the trace.
    pub index: u64,
    /// The flushed line.
    pub addr: u64,
    /// `addr` relative to the heap base of the trace header (Fig. 2's y axis);
    /// `addr` itself when the header names no heap or the line is below it.
    pub heap_offset: u64,
    /// The region's name, `(none)` outside every region.
    pub region: String,
}

/// Writes the points as CSV with a header line.
pub fn write_csv(points: &[AccessPoint], mut out: impl Write) -> io::Result<()> {
    writeln!(out, "category,nth,index,addr,heap_offset,region")?;
    for p in points {
        let region = if p.region.contains([',', '"', '\n']) {
            format!("\"{}\"", p.region.replace('"', "\"\""))
        } else {
            p.region.clone()
        };
        writeln!(out, "{},{},{},{},{},{}", p.category, p.nth, p.index, p.addr, p.heap_offset, region)?;
    }
    out.flush()
}

/// Writes the points as a JSON array.
pub fn write_json(points: &[AccessPoint], mut out: impl Write) -> io::Result<()> {
    serde_json::to_writer(&mut out, points)?;
    writeln!(out)?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_first_n_per_category_and_quotes_names() {
        let mut m = AccessMap::new(2);
        for i in 0..5 {
            m.offer(0, i, 0x1000 + i * 64, 1);
            m.offer(3, 10 + i, 0x9000, 0);
        }
        let pts = m.points(|r| if r == 1 { "slab \"a\", header".into() } else { "(none)".into() }, 0x1000);
        assert_eq!(pts.len(), 4);
        assert_eq!((pts[1].category, pts[1].nth, pts[1].index, pts[1].heap_offset), ("meta", 1, 1, 64));
        assert_eq!(pts[2].category, "data");
        let mut csv = Vec::new();
        write_csv(&pts, &mut csv).unwrap();
        let csv = String::from_utf8(csv).unwrap();
        assert!(csv.contains("meta,0,0,4096,0,\"slab \"\"a\"\", header\"\n"), "{csv}");
    }
}
