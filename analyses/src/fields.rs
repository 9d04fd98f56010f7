//! Every number the figures and tables read from a result row, declared
//! once with its JSON path.
//!
//! A row holds the reports of other commands as JSON (the simulator's
//! `pmsim sim --json` report, the native run's report, its timings, the
//! access map). The figures read them only through the [`Field`]s declared
//! here, and [`Row::check_fields`](crate::row::Row::check_fields) checks
//! every field against each row when rows are loaded (merging a sweep,
//! reading a `--traced` report): a statistic renamed in the simulator or the
//! runner is then an error naming the JSON path and the file, not a figure
//! of zeros. `tests/reproduce.rs` checks every field against the rows of a
//! real `pmsim reproduce` and `tests/cli.rs` against a real `pmsim sim
//! --json` report.

use serde_json::Value;

/// Which JSON document of a row a field lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The simulator's report (`Results::sim`, as `pmsim sim --json` prints it).
    Sim,
    /// The native run's report without its timings (`Results::native`).
    Native,
    /// The native run's timings (`Env::native_timing`).
    Timing,
    /// Each point of the access map (`Results::access_map`).
    AccessPoint,
    /// Each point of the heap's shape over the native run (`/series` of the
    /// native report).
    ShapePoint,
    /// Each code site of the simulator report (`/sites`, `pmsim sim --by
    /// site`), in traces whose tracer names sites.
    Site,
    /// Each kind of operation of the simulator report (`/ops`: the events
    /// inside each thread's innermost open operation, by its kind).
    Op,
    /// Each region of the simulator report (`/regions`: the flushes to the
    /// lines of one region of the trace's region table, by its name).
    Region,
    /// The report of a simulated point's traced run, without its timings
    /// (`Results::traced`: footprints, operations).
    Traced,
    /// The CPU profile of a simulated point (`Env::cpu`).
    Cpu,
    /// The contention model's estimate with the CPU's work (`Env::estimate`).
    Estimate,
}

impl Source {
    fn name(self) -> &'static str {
        match self {
            Source::Sim => "the simulator report",
            Source::Native => "the native report",
            Source::Timing => "the native timings",
            Source::AccessPoint => "an access-map point",
            Source::ShapePoint => "a heap-shape point",
            Source::Site => "a code site of the simulator report",
            Source::Op => "an operation kind of the simulator report",
            Source::Region => "a region of the simulator report",
            Source::Traced => "the traced run's report",
            Source::Cpu => "the CPU profile",
            Source::Estimate => "the estimate with CPU work",
        }
    }
}

/// When a field must be there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// In every document of its source, a number.
    Always,
    /// In every document of its source, a number or `null` (a figure that
    /// has no value, e.g. persist time per operation without operations).
    OrNull,
    /// Only in the runs that measure it (one workload's parameter, the
    /// slabs of allocators that have slabs); the figures show `-` or leave
    /// the row out without it. Where present it must be a number.
    Some,
}

/// A number a figure reads: where it lives and whether it must be there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub source: Source,
    /// A JSON pointer into the source document (`/overall/flushes`).
    pub path: &'static str,
    pub need: Need,
}

/// Declares the fields and [`ALL`] together, so that a field the figures
/// read cannot be left out of the check.
macro_rules! fields {
    ($($(#[doc = $doc:literal])+ $name:ident = $src:ident $path:literal $need:ident,)+) => {
        $($(#[doc = $doc])+ pub const $name: Field = Field { source: Source::$src, path: $path, need: Need::$need };)+
        /// Every field, in declaration order.
        pub const ALL: &[Field] = &[$($name,)+];
    };
}

fields! {
    /// Flush instructions of the whole run.
    FLUSHES = Sim "/overall/flushes" Always,
    /// Flushes at a distance below the threshold.
    REFLUSHES = Sim "/overall/reflushes" Always,
    /// Reflushes / flushes.
    REFLUSH_RATIO = Sim "/overall/reflush_ratio" Always,
    /// Operations begun.
    SIM_OPS = Sim "/overall/ops" Always,
    /// 64 B writes that reached PM.
    PM_WRITES = Sim "/overall/pm_writes" Always,
    /// Dirty lines evicted to PM.
    EVICTIONS = Sim "/overall/evictions" Always,
    /// Estimated persist time of metadata flushes (ns).
    PERSIST_META = Sim "/overall/persist_ns/meta" Always,
    /// … of write-ahead-log flushes.
    PERSIST_WAL = Sim "/overall/persist_ns/wal" Always,
    /// … of bookkeeping-log flushes.
    PERSIST_LOG = Sim "/overall/persist_ns/log" Always,
    /// … of user-data flushes.
    PERSIST_DATA = Sim "/overall/persist_ns/data" Always,
    /// … of flushes outside every region.
    PERSIST_UNMAPPED = Sim "/overall/persist_ns/unmapped" Always,
    /// … of fences that ordered no flush.
    PERSIST_FENCE = Sim "/overall/persist_ns/fence" Always,
    /// Estimated persist time in all (ns).
    PERSIST_TOTAL = Sim "/overall/persist_ns/total" Always,
    /// Estimated persist time per operation (null without operations).
    PERSIST_PER_OP = Sim "/overall/persist_ns_per_op" OrNull,
    /// … of the run without its setup operations (heap creation, close,
    /// recovery), per operation but those: what throughput estimates use
    /// (absent from the rows of versions before it, null without
    /// operations).
    STEADY_PER_OP = Sim "/steady/persist_ns_per_op" Some,
    /// Operations begun but the setup ones.
    STEADY_OPS = Sim "/steady/ops" Some,
    /// Media bytes / bytes written to the DIMMs.
    WRITE_AMPLIFICATION = Sim "/pm/write_amplification" Always,
    /// Estimated operations per second with the threads contending for the
    /// DIMMs (points simulated with `sim.contention = true`).
    EST_OPS_PER_S = Sim "/contention/ops_per_s" Some,
    /// Estimated run time of those points (ns): the latest thread's clock.
    EST_MAKESPAN = Sim "/contention/makespan_ns" Some,
    /// Events those points replayed past a thread that had none yet (the
    /// reorder bound was reached: the estimate treats it as blocked).
    EST_FORCED = Sim "/contention/forced" Some,
    /// Peak bytes mapped by the allocator.
    PEAK_MAPPED = Native "/peak/mapped_bytes" Always,
    /// Peak bytes of live data.
    PEAK_LIVE = Native "/peak/live_bytes" Always,
    /// Operations of the native run.
    NATIVE_OPS = Native "/ops" Always,
    /// Fragbench's cap on live data (Fragbench only).
    LIVE_CAP = Native "/params/live_cap" Some,
    /// Slabs under 30 % used at the working-set point (allocators with slabs,
    /// workloads with a working-set point).
    SLABS_LOW = Native "/snapshot/slabs/low" Some,
    /// … 30–70 % used.
    SLABS_MID = Native "/snapshot/slabs/mid" Some,
    /// … over 70 % used.
    SLABS_HIGH = Native "/snapshot/slabs/high" Some,
    /// Wall time of the native run (s).
    ELAPSED_S = Timing "/elapsed_s" Always,
    /// Operations per second of the native run's measured part.
    OPS_PER_S = Timing "/ops_per_s" Always,
    /// Operations per CPU second of a thread of the native run (its threads'
    /// CPU time: what it achieves with a core per thread, however loaded
    /// the machine was).
    OPS_PER_CPU_S = Timing "/ops_per_cpu_s" Always,
    /// Wall time of the allocator's own recovery of the heap a crash left
    /// at the end of the run, one thread (s; runs that crash: Fig. 18's list).
    RECOVERY_S = Timing "/recovery_s" Some,
    /// Of the open's wall time, what the allocator's system does on a thread
    /// of its own after its open has returned, left out of `RECOVERY_S`
    /// (nvm_malloc's chunk walk; s).
    RECOVERY_DEFERRED_S = Timing "/recovery_deferred_s" Some,
    /// List nodes found allocated and intact after that recovery.
    RECOVERED_NODES = Native "/extra/recovered_nodes" Some,
    /// List nodes the run built (Fig. 18's list).
    LIST_NODES = Native "/extra/list_nodes" Some,
    /// The n-th flush of its category.
    AP_NTH = AccessPoint "/nth" Always,
    /// The flushed line's offset in the heap.
    AP_HEAP_OFFSET = AccessPoint "/heap_offset" Always,
    /// Operations done when the heap was sampled.
    SHAPE_OPS = ShapePoint "/ops" Always,
    /// Bytes mapped by the allocator then.
    SHAPE_MAPPED = ShapePoint "/mapped_bytes" Always,
    /// Bytes of live data then.
    SHAPE_LIVE = ShapePoint "/live_bytes" Always,
    /// Flushes issued inside operations of one kind.
    OP_FLUSHES = Op "/flushes" Always,
    /// Reflushes among those.
    OP_REFLUSHES = Op "/reflushes" Always,
    /// Flushes to a region's lines.
    REGION_FLUSHES = Region "/flushes" Always,
    /// Reflushes among those.
    REGION_REFLUSHES = Region "/reflushes" Always,
    /// Writes to those lines that combined in an XPBuffer.
    REGION_XPB_HITS = Region "/xpbuffer_hits" Always,
    /// … that missed it.
    REGION_XPB_MISSES = Region "/xpbuffer_misses" Always,
    /// Estimated persist time of the region's flushes (ns).
    REGION_PERSIST = Region "/persist_ns/total" Always,
    /// Flushes issued at a code site.
    SITE_FLUSHES = Site "/flushes" Always,
    /// Reflushes / flushes of those.
    SITE_REFLUSH_RATIO = Site "/reflush_ratio" Always,
    /// Estimated persist time of the site's flushes and fences (ns).
    SITE_PERSIST = Site "/persist_ns" Always,
    /// Peak bytes mapped by the allocator in a simulated point's traced run.
    TRACED_PEAK_MAPPED = Traced "/peak/mapped_bytes" Always,
    /// Peak bytes of live data there.
    TRACED_PEAK_LIVE = Traced "/peak/live_bytes" Always,
    /// CPU time per operation in all, measured natively with flushes off (ns).
    CPU_TOTAL = Cpu "/total_ns" Always,
    /// … of it inside the allocator's operations.
    CPU_ALLOC = Cpu "/alloc_ns" Always,
    /// … of it between operations (the workload's own work).
    CPU_OUTSIDE = Cpu "/outside_ns" Always,
    /// CPU time inside one malloc / malloc_to (ns).
    CPU_MALLOC = Cpu "/malloc_ns" Always,
    /// CPU time inside one free / free_from (ns).
    CPU_FREE = Cpu "/free_ns" Always,
    /// Estimated operations per second, CPU work and persistence together,
    /// the threads contending for the DIMMs.
    EST_CPU_OPS_PER_S = Estimate "/ops_per_s" Always,
    /// Estimated run time of those (ns).
    EST_CPU_MAKESPAN = Estimate "/makespan_ns" Always,
    /// Operations they count.
    EST_CPU_OPS = Estimate "/ops" Always,
    /// The threads' time in metadata flushes and their waits, summed (ns).
    PART_META = Estimate "/parts_ns/meta" Always,
    /// … write-ahead-log flushes.
    PART_WAL = Estimate "/parts_ns/wal" Always,
    /// … bookkeeping-log flushes.
    PART_LOG = Estimate "/parts_ns/log" Always,
    /// … user-data flushes.
    PART_DATA = Estimate "/parts_ns/data" Always,
    /// … flushes outside every region.
    PART_UNMAPPED = Estimate "/parts_ns/unmapped" Always,
    /// … fences that ordered no flush.
    PART_FENCE = Estimate "/parts_ns/fence" Always,
    /// … CPU work inside the allocator.
    PART_ALLOC_CPU = Estimate "/parts_ns/alloc_cpu" Always,
    /// … CPU work between operations.
    PART_OTHER_CPU = Estimate "/parts_ns/other_cpu" Always,
    /// … stores and loads at the model's own cost.
    PART_STORES = Estimate "/parts_ns/stores" Always,
    /// … a blocked thread moved on to the others' clock.
    PART_WAIT = Estimate "/parts_ns/wait" Always,
    /// … waits to take a lock another thread held.
    PART_LOCK_WAIT = Estimate "/parts_ns/lock_wait" Always,
}

/// The persist-time slots of Fig. 11, in the simulator's order, with their names.
pub const PERSIST_SLOTS: [(&str, Field); 6] = [
    ("meta", PERSIST_META),
    ("wal", PERSIST_WAL),
    ("log", PERSIST_LOG),
    ("data", PERSIST_DATA),
    ("unmapped", PERSIST_UNMAPPED),
    ("fence", PERSIST_FENCE),
];

/// The category of an access-map point (a string, so not a [`Field`]; checked
/// with them).
pub const AP_CATEGORY: &str = "category";

/// The name of a code site (`function (file:line)`; a string, checked with
/// the fields).
pub const SITE_NAME: &str = "name";
/// The operation kind's name in an operation kind's document (`malloc`, `init`, …).
pub const OP_NAME: &str = "op";
/// A region's name in a region's document (`slab header`, `WAL`, …).
pub const REGION_NAME: &str = "name";

/// A field's value in `doc` (a document of the field's source): `None` when
/// absent or null. Absence is an error only in [`check`].
pub fn read(doc: &Value, f: Field) -> Option<f64> {
    doc.pointer(f.path)?.as_f64()
}

/// Checks every field of `source` in `doc`: one line naming the first path
/// that is missing or not a number.
pub fn check(doc: &Value, source: Source) -> Result<(), String> {
    for f in ALL.iter().filter(|f| f.source == source) {
        let bad = |what: &str| {
            Err(format!("{} has {what} at {} (a figure reads it: was the statistic renamed?)", source.name(), f.path))
        };
        match (doc.pointer(f.path), f.need) {
            (None, Need::Always | Need::OrNull) => return bad("no number"),
            (None, Need::Some) | (Some(Value::Null), Need::OrNull | Need::Some) | (Some(Value::Number(_)), _) => {}
            (Some(_), _) => return bad("something other than a number"),
        }
    }
    // The string that names each element of a per-element source.
    let label = match source {
        Source::AccessPoint => Some(("category", AP_CATEGORY)),
        Source::Site => Some(("name", SITE_NAME)),
        Source::Op => Some(("name", OP_NAME)),
        Source::Region => Some(("name", REGION_NAME)),
        _ => None,
    };
    match label {
        Some((what, key)) if !doc.get(key).is_some_and(Value::is_string) => {
            Err(format!("{} has no {what} string at /{key}", source.name()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sim_doc() -> Value {
        json!({
            "overall": {
                "flushes": 4, "reflushes": 1, "reflush_ratio": 0.25, "ops": 2, "pm_writes": 3, "evictions": 0,
                "persist_ns": {"meta": 1.0, "wal": 0.0, "log": 0.0, "data": 0.0, "unmapped": 0.0, "fence": 0.0,
                               "total": 1.0},
                "persist_ns_per_op": null
            },
            "pm": {"write_amplification": 1.0}
        })
    }

    #[test]
    fn a_missing_or_renamed_statistic_is_an_error_naming_its_path() {
        let mut v = sim_doc();
        check(&v, Source::Sim).unwrap();
        assert_eq!(read(&v, REFLUSH_RATIO), Some(0.25));
        assert_eq!(read(&v, PERSIST_PER_OP), None, "null reads as nothing");
        let o = v["overall"].as_object_mut().unwrap();
        let r = o.remove("reflush_ratio").unwrap();
        o.insert("reflush_share".into(), r);
        let e = check(&v, Source::Sim).unwrap_err();
        assert!(e.contains("/overall/reflush_ratio") && e.contains("simulator report"), "{e}");
        let mut v = sim_doc();
        v["overall"]["flushes"] = json!("4");
        assert!(check(&v, Source::Sim).unwrap_err().contains("/overall/flushes"));
        let mut v = sim_doc();
        v["overall"]["flushes"] = Value::Null;
        assert!(check(&v, Source::Sim).is_err(), "null where a number must be");
    }

    #[test]
    fn fields_only_some_runs_have_may_be_absent_but_not_wrong() {
        let mut v = json!({"peak": {"mapped_bytes": 1, "live_bytes": 1}, "ops": 3});
        check(&v, Source::Native).unwrap();
        v["snapshot"] = json!({"slabs": null});
        check(&v, Source::Native).unwrap();
        v["params"] = json!({"live_cap": "big"});
        assert!(check(&v, Source::Native).unwrap_err().contains("/params/live_cap"));
        assert!(check(&json!({"nth": 1, "heap_offset": 64}), Source::AccessPoint).unwrap_err().contains("category"));
        let site = json!({"flushes": 3, "reflush_ratio": 0.5, "persist_ns": 1.0});
        assert!(check(&site, Source::Site).unwrap_err().contains("name"));
    }

    #[test]
    fn every_path_is_declared_once() {
        for (i, f) in ALL.iter().enumerate() {
            assert!(f.path.starts_with('/'), "{f:?}");
            assert!(!ALL[..i].iter().any(|g| g.source == f.source && g.path == f.path), "{f:?} twice");
        }
    }
}
