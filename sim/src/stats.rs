//! Every statistic the simulator reports, declared here once: the raw counters
//! kept per thread, per region and per operation type ([`Counters`]), what the
//! report shows for each ([`Stats`], derived from counters), the columns the
//! text printer shows ([`COLUMNS`]), and the report itself ([`Report`]).
//!
//! Every derived figure (ratios, misses, byte totals, per-operation times)
//! is computed here, in the constructor of the report row beside the
//! counters it is derived from, and nowhere else: the simulator only counts
//! and sums, and the figures read the report's JSON, so a statistic has one
//! definition and one name.

use crate::cache::CacheCounters;
use crate::config::{CacheConfig, Config, Scope};
use crate::distance::{bucket_label, FIRST_BUCKET, HIST_BUCKETS};
use crate::optane::DimmCounters;
use pmsim_traces::Category;
use serde::Serialize;

/// Slots of the persist-time breakdown: the four region categories, flushes
/// outside every region, and fences that ordered no flush (NVAlloc Fig. 11
/// splits flush time into FlushMeta, FlushWAL, …).
pub const PERSIST_SLOTS: usize = 6;
/// Slot of writes to addresses outside every registered region.
pub const UNMAPPED: u8 = 4;
/// Slot of fences with no flush pending since the thread's previous fence.
pub const BARE_FENCE: u8 = 5;
/// Names of the persist slots, in order.
pub const PERSIST_SLOT_NAMES: [&str; PERSIST_SLOTS] = ["meta", "wal", "log", "data", "unmapped", "fence"];

/// The persist-time slot of a category.
#[inline(always)]
pub fn slot_of(c: Category) -> u8 {
    c as u8
}

/// Declares the scalar counters once, so that adding one cannot forget the sum.
macro_rules! counters {
    ($($(#[doc = $doc:literal])+ $name:ident,)+) => {
        /// Raw counts of one thread, one region or one operation type.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct Counters {
            $($(#[doc = $doc])+ pub $name: u64,)+
            /// Flushes per reflush-distance bucket (see [`crate::distance::bucket`]):
            /// their sum is the flushes, the last bucket the first flushes.
            pub hist: [u64; HIST_BUCKETS],
            /// Estimated persist time in picoseconds per [`PERSIST_SLOT_NAMES`] slot.
            pub persist_ps: [u64; PERSIST_SLOTS],
        }

        impl Default for Counters {
            fn default() -> Self {
                Counters { $($name: 0,)+ hist: [0; HIST_BUCKETS], persist_ps: [0; PERSIST_SLOTS] }
            }
        }

        impl Counters {
            /// Adds `o` into `self` (the overall figures are sums of threads').
            pub fn add(&mut self, o: &Counters) {
                $(self.$name += o.$name;)+
                for (a, b) in self.hist.iter_mut().zip(&o.hist) {
                    *a += b;
                }
                for (a, b) in self.persist_ps.iter_mut().zip(&o.persist_ps) {
                    *a += b;
                }
            }

            /// What was counted since `earlier`, an earlier copy of the same
            /// counters (they only grow): the figures of a window.
            pub fn since(&self, earlier: &Counters) -> Counters {
                let mut d = self.clone();
                $(d.$name -= earlier.$name;)+
                for (a, b) in d.hist.iter_mut().zip(&earlier.hist) {
                    *a -= b;
                }
                for (a, b) in d.persist_ps.iter_mut().zip(&earlier.persist_ps) {
                    *a -= b;
                }
                d
            }

            /// Whether anything at all was counted.
            pub fn is_empty(&self) -> bool {
                true $(&& self.$name == 0)+
                    && self.hist.iter().all(|&h| h == 0)
                    && self.persist_ps.iter().all(|&p| p == 0)
            }
        }
    };
}

counters! {
    /// Stores (cached).
    stores,
    /// Bytes stored by cached stores.
    store_bytes,
    /// Non-temporal stores.
    nt_stores,
    /// Loads (only some tracers record them).
    loads,
    /// Flushes at a distance below the threshold.
    reflushes,
    /// Flushes that found their line dirty and wrote it to PM.
    dirty_flushes,
    /// Fences; per region, the fences that ordered a flush to it.
    fences,
    /// Dirty lines evicted from the cache and so written to PM.
    evictions,
    /// 64 B lines written to PM by non-temporal stores.
    nt_lines,
    /// PM writes (flushed, evicted or non-temporal) that combined in the XPBuffer.
    xpbuffer_hits,
    /// PM writes to the same or next XPLine as the DIMM's previous write.
    sequential_writes,
    /// Operations begun (OpBegin).
    ops,
    /// Operations ended (OpEnd).
    op_ends,
    /// Events of the other kinds: thread starts and ends, region changes,
    /// markers.
    other_events,
}

impl Counters {
    /// Flush instructions: each is counted once, in its distance's bucket.
    pub fn flushes(&self) -> u64 {
        self.hist.iter().sum()
    }

    /// Flushes of a line never flushed before in the scope (infinite distance).
    pub fn first_flushes(&self) -> u64 {
        self.hist[FIRST_BUCKET]
    }

    /// Events counted: every event is counted once, by its kind, so a
    /// thread's events are the sum over its contexts.
    pub fn events(&self) -> u64 {
        self.stores
            + self.nt_stores
            + self.loads
            + self.flushes()
            + self.fences
            + self.ops
            + self.op_ends
            + self.other_events
    }

    /// 64 B writes that reached PM.
    pub fn pm_writes(&self) -> u64 {
        self.dirty_flushes + self.evictions + self.nt_lines
    }
}

/// One bucket of the reflush-distance histogram.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Bucket {
    /// `0`, `1`, `2`, `3`, `4-7`, `8-15`, … or `first`.
    pub distance: String,
    pub count: u64,
}

/// Estimated persist time in nanoseconds, by what was persisted.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PersistTime {
    /// Flushes (and the fences ordering them) of allocator metadata.
    pub meta: f64,
    /// … of write-ahead logs.
    pub wal: f64,
    /// … of bookkeeping logs.
    pub log: f64,
    /// … of user data.
    pub data: f64,
    /// … of addresses outside every registered region.
    pub unmapped: f64,
    /// Fences that ordered no flush.
    pub fence: f64,
    pub total: f64,
}

/// The statistics of one thread, region, operation type or the whole run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stats {
    pub flushes: u64,
    /// Flushes at a distance below the threshold.
    pub reflushes: u64,
    /// The rest (first flushes included: their distance is infinite).
    pub regular_flushes: u64,
    /// reflushes / flushes (0 without flushes).
    pub reflush_ratio: f64,
    pub first_flushes: u64,
    /// The exact reflush-distance histogram; empty buckets are left out.
    pub histogram: Vec<Bucket>,
    /// Flushes that wrote a dirty line to PM; the others moved no data.
    pub dirty_flushes: u64,
    pub fences: u64,
    pub stores: u64,
    pub store_bytes: u64,
    pub nt_stores: u64,
    pub loads: u64,
    /// 64 B writes that reached PM: dirty flushes + evictions + non-temporal lines.
    pub pm_writes: u64,
    /// Dirty lines evicted from the cache (the only PM writes under eADR besides
    /// non-temporal stores).
    pub evictions: u64,
    pub nt_lines: u64,
    pub xpbuffer_hits: u64,
    pub xpbuffer_misses: u64,
    pub sequential_writes: u64,
    pub random_writes: u64,
    /// Operations begun.
    pub ops: u64,
    pub persist_ns: PersistTime,
    /// Estimated persist time per operation (operation rows only).
    pub persist_ns_per_op: Option<f64>,
}

/// `a / b`, 0 when `b` is 0 (a run without flushes or PM writes has no
/// ratio to show, and JSON has no NaN).
fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

impl Stats {
    pub fn from_counters(c: &Counters) -> Stats {
        let ns = |s: usize| c.persist_ps[s] as f64 / 1000.0;
        let total = c.persist_ps.iter().sum::<u64>() as f64 / 1000.0;
        let pm = c.pm_writes();
        let flushes = c.flushes();
        Stats {
            flushes,
            reflushes: c.reflushes,
            regular_flushes: flushes - c.reflushes,
            reflush_ratio: ratio(c.reflushes, flushes),
            first_flushes: c.first_flushes(),
            histogram: (0..HIST_BUCKETS)
                .filter(|&b| c.hist[b] > 0)
                .map(|b| Bucket { distance: bucket_label(b), count: c.hist[b] })
                .collect(),
            dirty_flushes: c.dirty_flushes,
            fences: c.fences,
            stores: c.stores,
            store_bytes: c.store_bytes,
            nt_stores: c.nt_stores,
            loads: c.loads,
            pm_writes: pm,
            evictions: c.evictions,
            nt_lines: c.nt_lines,
            xpbuffer_hits: c.xpbuffer_hits,
            xpbuffer_misses: pm - c.xpbuffer_hits,
            sequential_writes: c.sequential_writes,
            random_writes: pm - c.sequential_writes,
            ops: c.ops,
            persist_ns: PersistTime {
                meta: ns(0),
                wal: ns(1),
                log: ns(2),
                data: ns(3),
                unmapped: ns(UNMAPPED as usize),
                fence: ns(BARE_FENCE as usize),
                total,
            },
            persist_ns_per_op: (c.ops > 0).then(|| total / c.ops as f64),
        }
    }

    /// The count in a histogram bucket (by label).
    pub fn bucket(&self, label: &str) -> u64 {
        self.histogram.iter().find(|b| b.distance == label).map_or(0, |b| b.count)
    }

    /// The persist-time slots in [`PERSIST_SLOT_NAMES`] order.
    pub fn persist_slots(&self) -> [f64; PERSIST_SLOTS] {
        let p = &self.persist_ns;
        [p.meta, p.wal, p.log, p.data, p.unmapped, p.fence]
    }
}

/// A column of the text tables: header, what it means, and how to show it.
pub struct Column {
    pub header: &'static str,
    pub doc: &'static str,
    pub cell: fn(&Stats) -> String,
}

fn pct(a: u64, b: u64) -> String {
    if b == 0 {
        "-".into()
    } else {
        format!("{:.1}", 100.0 * a as f64 / b as f64)
    }
}

/// The columns of every per-thread, per-region and per-operation table, and the
/// lines of the overall summary.
pub const COLUMNS: &[Column] = &[
    Column { header: "flushes", doc: "flush instructions", cell: |s| s.flushes.to_string() },
    Column { header: "reflush%", doc: "reflushes / flushes", cell: |s| pct(s.reflushes, s.flushes) },
    Column { header: "first", doc: "first flushes of a line", cell: |s| s.first_flushes.to_string() },
    Column { header: "dirty", doc: "flushes that wrote a dirty line to PM", cell: |s| s.dirty_flushes.to_string() },
    Column { header: "fences", doc: "fences", cell: |s| s.fences.to_string() },
    Column { header: "stores", doc: "cached stores", cell: |s| s.stores.to_string() },
    Column { header: "nt", doc: "non-temporal stores", cell: |s| s.nt_stores.to_string() },
    Column {
        header: "pm_writes",
        doc: "64 B writes reaching PM (flushed + evicted + non-temporal)",
        cell: |s| s.pm_writes.to_string(),
    },
    Column { header: "evicted", doc: "dirty lines evicted to PM", cell: |s| s.evictions.to_string() },
    Column {
        header: "seq%",
        doc: "PM writes to the same/next XPLine",
        cell: |s| pct(s.sequential_writes, s.pm_writes),
    },
    Column {
        header: "xpb_hit%",
        doc: "PM writes combined in the XPBuffer",
        cell: |s| pct(s.xpbuffer_hits, s.pm_writes),
    },
    Column { header: "ops", doc: "operations begun", cell: |s| s.ops.to_string() },
    Column {
        header: "persist_us",
        doc: "estimated persist time",
        cell: |s| format!("{:.1}", s.persist_ns.total / 1e3),
    },
    Column {
        header: "ns/op",
        doc: "estimated persist time per operation",
        cell: |s| s.persist_ns_per_op.map_or("-".into(), |v| format!("{v:.1}")),
    },
];

/// One thread's figures.
#[derive(Clone, Debug, Serialize)]
pub struct ThreadReport {
    pub tid: u32,
    pub events: u64,
    #[serde(flatten)]
    pub stats: Stats,
}

/// One region's figures. Regions are keyed by name and category (a region
/// registered, removed and registered again is one row); accesses outside
/// every region are the row `(none)` without category.
#[derive(Clone, Debug, Serialize)]
pub struct RegionReport {
    pub name: String,
    pub category: Option<Category>,
    #[serde(flatten)]
    pub stats: Stats,
}

/// One operation type's figures; `none` is everything outside any operation.
/// Costs go to the innermost operation open on the thread.
#[derive(Clone, Debug, Serialize)]
pub struct OpReport {
    pub op: String,
    #[serde(flatten)]
    pub stats: Stats,
}

/// One DIMM.
#[derive(Clone, Debug, Serialize)]
pub struct DimmReport {
    pub dimm: u32,
    /// 64 B writes received.
    pub writes: u64,
    pub xpbuffer_hits: u64,
    pub xpbuffer_misses: u64,
    pub sequential_writes: u64,
    pub random_writes: u64,
    /// Cache fills (64 B reads).
    pub reads: u64,
    /// XPLines read from the media (read-modify-writes and unbuffered fills).
    pub media_reads: u64,
    /// Of which read-modify-writes of partially written XPLines.
    pub rmw_reads: u64,
    /// XPLines written to the media, the ones still buffered at the end included.
    pub media_writes: u64,
    /// Media bytes written / bytes written to the DIMM.
    pub write_amplification: f64,
}

impl DimmReport {
    /// DIMM `dimm`'s row from its counters; `xpline` is the media's write
    /// unit in bytes (a write to the DIMM is one 64 B line).
    pub fn new(dimm: u32, c: &DimmCounters, xpline: u64) -> DimmReport {
        DimmReport {
            dimm,
            writes: c.writes,
            xpbuffer_hits: c.xpbuffer_hits,
            xpbuffer_misses: c.writes - c.xpbuffer_hits,
            sequential_writes: c.sequential_writes,
            random_writes: c.writes - c.sequential_writes,
            reads: c.reads,
            media_reads: c.media_reads,
            rmw_reads: c.rmw_reads,
            media_writes: c.media_writes,
            write_amplification: ratio(c.media_writes * xpline, c.writes * 64),
        }
    }
}

/// What reached PM, over all DIMMs.
#[derive(Clone, Debug, Serialize)]
pub struct PmReport {
    /// Bytes written to the DIMMs (64 per write).
    pub write_bytes: u64,
    pub flushed_bytes: u64,
    pub evicted_bytes: u64,
    pub nt_bytes: u64,
    pub media_write_bytes: u64,
    /// Media bytes read: cache fills the XPBuffer could not serve, and
    /// read-modify-writes.
    pub media_read_bytes: u64,
    /// Of which read-modify-writes of partially written XPLines.
    pub rmw_read_bytes: u64,
    /// Media bytes written / bytes written to the DIMMs (flushed, evicted or
    /// non-temporal).
    pub write_amplification: f64,
    pub sequential_writes: u64,
    pub random_writes: u64,
}

impl PmReport {
    /// What reached PM: the bytes the caches wrote (`overall`, summed over
    /// every thread) and what the DIMMs made of them (`dimms`, empty when
    /// only reflushes are counted); `xpline` is the media's write unit.
    pub fn new(overall: &Counters, dimms: &[DimmCounters], xpline: u64) -> PmReport {
        let media_writes: u64 = dimms.iter().map(|c| c.media_writes).sum();
        let media_reads: u64 = dimms.iter().map(|c| c.media_reads).sum();
        let rmw_reads: u64 = dimms.iter().map(|c| c.rmw_reads).sum();
        let pm_writes = overall.pm_writes();
        PmReport {
            write_bytes: 64 * pm_writes,
            flushed_bytes: 64 * overall.dirty_flushes,
            evicted_bytes: 64 * overall.evictions,
            nt_bytes: 64 * overall.nt_lines,
            media_write_bytes: media_writes * xpline,
            media_read_bytes: media_reads * xpline,
            rmw_read_bytes: rmw_reads * xpline,
            write_amplification: ratio(media_writes * xpline, 64 * pm_writes),
            sequential_writes: overall.sequential_writes,
            random_writes: pm_writes - overall.sequential_writes,
        }
    }
}

/// The cache model's own counters.
#[derive(Clone, Debug, Serialize)]
pub struct CacheReport {
    pub sets: u32,
    pub ways: u32,
    pub accesses: u64,
    pub hits: u64,
    /// Lines read from PM on a miss.
    pub fills: u64,
    pub evictions: u64,
    pub dirty_evictions: u64,
    /// Dirty lines still cached when the trace ends (never reached PM).
    pub dirty_lines_at_end: u64,
}

impl CacheReport {
    /// The cache's geometry and counters; `dirty_lines_at_end` is counted
    /// by the caller, who knows whether the cache was modelled at all.
    pub fn new(cfg: &CacheConfig, c: &CacheCounters, dirty_lines_at_end: u64) -> CacheReport {
        CacheReport {
            sets: cfg.sets,
            ways: cfg.ways,
            accesses: c.accesses,
            hits: c.hits,
            fills: c.fills,
            evictions: c.evictions,
            dirty_evictions: c.dirty_evictions,
            dirty_lines_at_end,
        }
    }
}

/// Everything a run measured; `--json` prints it as is.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// What the trace says it is (allocator, workload), for the reader of the report.
    pub trace: String,
    pub events: u64,
    pub threshold: u64,
    pub scope: Scope,
    pub eadr: bool,
    pub reflush_only: bool,
    pub overall: Stats,
    /// The run without its setup operations (heap creation, close,
    /// recovery: [`pmsim_traces::OpKind::is_setup`]): what a benchmark
    /// times, and what throughput estimates divide by. A one-time cost (an
    /// exit-time write-back of a whole region) outweighs a short run's
    /// operations, which the paper's runs have millions of.
    pub steady: Stats,
    pub threads: Vec<ThreadReport>,
    pub regions: Vec<RegionReport>,
    pub ops: Vec<OpReport>,
    pub dimms: Vec<DimmReport>,
    pub pm: PmReport,
    pub cache: CacheReport,
    /// Flushes, reflushes, fences and persist time per code site, costliest
    /// first (only for traces that name the sites of their flushes).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sites: Vec<crate::sites::SiteReport>,
    /// The same figures from the start of a window on (`--from-marker`,
    /// `--skip-ops`, or a `window` marker the tracer recorded): the models ran
    /// over the whole trace, so the window starts warm, but only what happened
    /// inside it is counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<Box<WindowReport>>,
    /// The configuration the figures were computed with.
    pub config: Config,
}

/// A window's figures and where it began.
#[derive(Clone, Debug, Serialize)]
pub struct WindowReport {
    /// What started it: `marker window:pmemobj_alloc`, `operation 1001`.
    pub from: String,
    /// Events replayed before the window began.
    pub events_before: u64,
    pub report: Report,
}

impl Report {
    /// The row of an operation type by name (`malloc`, `free`, …, `none`).
    pub fn op(&self, name: &str) -> Option<&Stats> {
        self.ops.iter().find(|o| o.op == name).map(|o| &o.stats)
    }

    /// The row of a region by name.
    pub fn region(&self, name: &str) -> Option<&Stats> {
        self.regions.iter().find(|r| r.name == name).map(|r| &r.stats)
    }

    /// The row of a thread.
    pub fn thread(&self, tid: u32) -> Option<&Stats> {
        self.threads.iter().find(|t| t.tid == tid).map(|t| &t.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_figures() {
        let mut c = Counters { reflushes: 1, dirty_flushes: 3, evictions: 1, xpbuffer_hits: 2, ..Default::default() };
        c.hist[0] = 1;
        c.hist[FIRST_BUCKET] = 3;
        c.persist_ps[0] = 1500;
        c.ops = 2;
        let s = Stats::from_counters(&c);
        assert_eq!((s.flushes, s.first_flushes), (4, 3));
        assert_eq!(s.regular_flushes, 3);
        assert_eq!(s.reflush_ratio, 0.25);
        assert_eq!(s.pm_writes, 4);
        assert_eq!(s.xpbuffer_misses, 2);
        assert_eq!(s.bucket("first"), 3);
        assert_eq!(s.persist_ns.total, 1.5);
        assert_eq!(s.persist_ns_per_op, Some(0.75));
        let mut d = Counters::default();
        assert!(d.is_empty());
        d.hist[2] = 1;
        assert!(!d.is_empty(), "a flush alone is something");
        d.hist[2] = 0;
        d.add(&c);
        assert_eq!(d, c);
    }

    #[test]
    fn pm_and_dimm_rows() {
        let c = Counters { dirty_flushes: 6, evictions: 1, nt_lines: 1, sequential_writes: 3, ..Default::default() };
        let d = DimmCounters {
            writes: 8,
            xpbuffer_hits: 5,
            sequential_writes: 3,
            reads: 2,
            media_writes: 3,
            media_reads: 2,
            rmw_reads: 1,
        };
        let dimm = DimmReport::new(1, &d, 256);
        assert_eq!((dimm.xpbuffer_misses, dimm.random_writes), (3, 5));
        assert_eq!(dimm.write_amplification, 1.5, "3 XPLines of 256 B for 8 lines of 64 B");
        let pm = PmReport::new(&c, &[d, d], 256);
        assert_eq!((pm.write_bytes, pm.flushed_bytes, pm.evicted_bytes, pm.nt_bytes), (512, 384, 64, 64));
        assert_eq!((pm.media_write_bytes, pm.media_read_bytes, pm.rmw_read_bytes), (1536, 1024, 512));
        assert_eq!(pm.write_amplification, 3.0);
        assert_eq!(pm.random_writes, 5);
        let none = PmReport::new(&Counters::default(), &[], 256);
        assert_eq!(none.write_amplification, 0.0, "no writes, no ratio (and no NaN in the JSON)");
    }
}
