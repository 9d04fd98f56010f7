//! The NVAlloc paper's workloads (§3.2, §6.2–6.4), written once against
//! [`Allocator`] / [`AllocThread`], so that every
//! allocator pmsim measures runs exactly the same allocation sequence.
//!
//! | name | paper | what it stresses |
//! |---|---|---|
//! | `threadtest` | §6.2, Fig. 1a, 9–11, 16a | per-thread batches of 64 B allocations, then frees |
//! | `prodcon` | §6.2 | objects allocated by one thread, freed by another |
//! | `shbench` | §6.2 | mixed sizes 64–1000 B, small ones more often |
//! | `larson-small`, `larson-large` | §6.2, Fig. 12 | random replacement, threads handed over to new threads |
//! | `dbmstest` | §3.3, §6.2, Fig. 2, 11c | Poisson-sized large objects, 90 % deleted per iteration |
//! | `fragbench-w1` … `-w4` | §3.2, §6.4, Table 1, Fig. 1b, 15 | size distribution changes under a live-data cap |
//! | `fptree` | §6.3, Fig. 14 | a persistent B+-tree: leaves and 128 B key-value objects in PM |
//! | `llfree-bulk`, `llfree-random`, `llfree-repeat` | LLFree §5.1 | frames allocated in bulk and freed in order, in random order across threads, or one at a time |
//! | `list` | §6.6, Fig. 18 | a persistent linked list of 64–128 B nodes, left as a crash leaves it; the allocator's recovery timed |
//!
//! Every workload has three presets ([`Scale`]): `paper` (the paper's
//! parameters, hours on real hardware), `small` (about a minute natively) and
//! `tiny` (well under a second: tests and CI). Any parameter can be changed by
//! name ([`Workload::set`]). Randomness comes from a per-thread xorshift
//! stream of the run seed ([`rng`]): the same seed and thread count give the
//! same allocation sequence, so a one-thread traced run is reproducible event
//! for event.
//!
//! Every workload checks itself: objects carry a checksum written at
//! allocation and verified before they are freed, `malloc_to`/`free_from`
//! must leave their destination holding the offset / zero, FPTree's lookups
//! must find every live key, and at the end everything is freed and the
//! allocator must report no live bytes. A failed check is a
//! [`WorkloadError`] naming the workload, the thread and what was wrong.

pub mod cpu;
pub mod dbmstest;
pub mod driver;
pub mod fptree;
pub mod fragbench;
pub mod larson;
pub mod list;
pub mod llfree_bench;
pub mod print;
pub mod prodcon;
pub mod rng;
pub mod series;
pub mod shbench;
pub mod threadtest;

pub use driver::{Progress, Shared, Slots, Snapshot, Worker};

use crate::alloc::{AllocThread, Allocator, Footprint, HeapNeed};
use crate::fault_in::FaultIn;
use crate::params::{set_field, split_overrides};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Instant;

/// How big a run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// Well under a second per workload natively: tests and CI.
    Tiny,
    /// About a minute for a workload natively.
    Small,
    /// The paper's parameters (§6.2–6.4).
    Paper,
}

impl Scale {
    pub const ALL: [Scale; 3] = [Scale::Tiny, Scale::Small, Scale::Paper];

    pub fn name(self) -> &'static str {
        match self {
            Scale::Tiny => "tiny",
            Scale::Small => "small",
            Scale::Paper => "paper",
        }
    }

    /// Picks the value for this scale.
    pub fn pick<T>(self, tiny: T, small: T, paper: T) -> T {
        match self {
            Scale::Tiny => tiny,
            Scale::Small => small,
            Scale::Paper => paper,
        }
    }
}

impl fmt::Display for Scale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scale {
    type Err = WorkloadError;

    fn from_str(s: &str) -> Result<Scale, WorkloadError> {
        Scale::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| WorkloadError::Config(format!("unknown scale '{s}' (expected tiny, small or paper)")))
    }
}

/// Why a workload could not run, or what its self-check found. One line.
#[derive(Debug)]
pub enum WorkloadError {
    /// Unknown workload, bad parameter or impossible combination.
    Config(String),
    /// The allocator returned no memory.
    OutOfMemory { workload: String, tid: u32, size: u64 },
    /// An object's checksum did not match: a block handed out twice, an
    /// overlap, or memory changed underneath the workload.
    Corrupt { workload: String, tid: u32, off: u64, size: u64, what: String },
    /// Another self-check failed (a destination not published or not
    /// cleared, a key not found, bytes left live at the end).
    Check { workload: String, tid: u32, what: String },
    /// A thread panicked (in the workload or the allocator).
    Panic { workload: String, tid: u32, msg: String },
    /// Stopped because another thread failed (never the error a run returns
    /// when the cause is known).
    Aborted,
}

impl fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkloadError::Config(m) => f.write_str(m),
            WorkloadError::OutOfMemory { workload, tid, size } => write!(
                f,
                "{workload}: thread {tid}: the allocator has no memory for {size} bytes (a bigger heap may help: --heap-size)"
            ),
            WorkloadError::Corrupt { workload, tid, off, size, what } => {
                write!(f, "{workload}: thread {tid}: corrupt object at heap offset {off:#x} ({size} bytes): {what}")
            }
            WorkloadError::Check { workload, tid, what } => write!(f, "{workload}: thread {tid}: check failed: {what}"),
            WorkloadError::Panic { workload, tid, msg } => write!(f, "{workload}: thread {tid} panicked: {msg}"),
            WorkloadError::Aborted => f.write_str("stopped because another thread failed"),
        }
    }
}

impl std::error::Error for WorkloadError {}

/// A workload's parameters: one struct per workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Params {
    Threadtest(threadtest::Params),
    ProdCon(prodcon::Params),
    Shbench(shbench::Params),
    Larson(larson::Params),
    Dbmstest(dbmstest::Params),
    Fragbench(fragbench::Params),
    Fptree(fptree::Params),
    LlfreeBench(llfree_bench::Params),
    List(list::Params),
}

/// The most live data a workload may need (1 TiB: past any heap a run maps).
const MAX_LIVE: u64 = 1 << 40;

/// The most worker threads a run starts, whatever the machine: the
/// allocators keep per-thread state for at most a few thousand threads, and
/// the paper's largest runs use 64.
pub const MAX_THREADS: u32 = 4096;

/// The most worker threads one run may start here: [`MAX_THREADS`], or a
/// quarter of what the kernel lets this user (`RLIMIT_NPROC`) and the system
/// (`threads-max`) run, so that a thread count the machine cannot start is
/// refused before anything runs instead of failing half way.
pub fn max_threads() -> u32 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit fills the struct it is given.
    let nproc =
        if unsafe { libc::getrlimit(libc::RLIMIT_NPROC, &mut lim) } == 0 { lim.rlim_cur } else { libc::RLIM_INFINITY };
    let sys = std::fs::read_to_string("/proc/sys/kernel/threads-max")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(u64::MAX);
    let room = (nproc as u64).min(sys) / 4;
    room.clamp(1, MAX_THREADS as u64) as u32
}

/// A workload with its parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    name: String,
    scale: Scale,
    params: Params,
}

impl Workload {
    /// Every workload name [`Workload::preset`] knows.
    pub const NAMES: [&'static str; 15] = [
        "threadtest",
        "prodcon",
        "shbench",
        "larson-small",
        "larson-large",
        "dbmstest",
        "fragbench-w1",
        "fragbench-w2",
        "fragbench-w3",
        "fragbench-w4",
        "fptree",
        "llfree-bulk",
        "llfree-random",
        "llfree-repeat",
        "list",
    ];

    /// Names that stand for several workloads (`fragbench` = W1–W4, `all`).
    pub fn expand(name: &str) -> Result<Vec<&'static str>, WorkloadError> {
        match name {
            "fragbench" => Ok(Workload::NAMES.iter().copied().filter(|n| n.starts_with("fragbench-")).collect()),
            "larson" => Ok(vec!["larson-small", "larson-large"]),
            "llfree" => Ok(Workload::NAMES.iter().copied().filter(|n| n.starts_with("llfree-")).collect()),
            "all" => Ok(Workload::NAMES.to_vec()),
            n => Workload::NAMES.iter().copied().find(|&x| x == n).map(|x| vec![x]).ok_or_else(|| {
                WorkloadError::Config(format!(
                    "unknown workload '{n}' (expected one of: {}, or fragbench, larson, llfree, all)",
                    Workload::NAMES.join(", ")
                ))
            }),
        }
    }

    /// The preset of workload `name` at `scale`.
    pub fn preset(name: &str, scale: Scale) -> Result<Workload, WorkloadError> {
        let params = match name {
            "threadtest" => Params::Threadtest(threadtest::Params::preset(scale)),
            "prodcon" => Params::ProdCon(prodcon::Params::preset(scale)),
            "shbench" => Params::Shbench(shbench::Params::preset(scale)),
            "larson-small" => Params::Larson(larson::Params::small(scale)),
            "larson-large" => Params::Larson(larson::Params::large(scale)),
            "dbmstest" => Params::Dbmstest(dbmstest::Params::preset(scale)),
            "fptree" => Params::Fptree(fptree::Params::preset(scale)),
            "llfree-bulk" => Params::LlfreeBench(llfree_bench::Params::preset(llfree_bench::Bench::Bulk, scale)),
            "llfree-random" => Params::LlfreeBench(llfree_bench::Params::preset(llfree_bench::Bench::Random, scale)),
            "llfree-repeat" => Params::LlfreeBench(llfree_bench::Params::preset(llfree_bench::Bench::Repeat, scale)),
            "list" => Params::List(list::Params::preset(scale)),
            n => match n.strip_prefix("fragbench-w").and_then(|w| w.parse::<u32>().ok()) {
                Some(w @ 1..=4) => Params::Fragbench(fragbench::Params::preset(w, scale)),
                _ => {
                    return Err(WorkloadError::Config(format!(
                        "unknown workload '{n}' (expected one of: {})",
                        Workload::NAMES.join(", ")
                    )))
                }
            },
        };
        Ok(Workload { name: name.to_string(), scale, params })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn scale(&self) -> Scale {
        self.scale
    }

    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Every parameter, for trace headers and result rows.
    pub fn params_json(&self) -> serde_json::Map<String, serde_json::Value> {
        match serde_json::to_value(&self.params).expect("parameters serialize") {
            serde_json::Value::Object(m) => m,
            _ => unreachable!("parameters are a struct"),
        }
    }

    /// Overrides parameter `key` with `value` (JSON, or a bare string), e.g.
    /// `set("iterations", "50")`.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), WorkloadError> {
        let what = "parameter";
        // Counts and sizes far past any run: refused here, before they can
        // overflow the arithmetic that sizes the run.
        if value.parse::<u64>().is_ok_and(|n| n > Self::MAX_PARAM) {
            return Err(WorkloadError::Config(format!(
                "{}: {key} = {value}: too large (at most {})",
                self.name,
                Self::MAX_PARAM
            )));
        }
        match &mut self.params {
            Params::Threadtest(p) => set_field(p, what, key, value),
            Params::ProdCon(p) => set_field(p, what, key, value),
            Params::Shbench(p) => set_field(p, what, key, value),
            Params::Larson(p) => set_field(p, what, key, value),
            Params::Dbmstest(p) => set_field(p, what, key, value),
            Params::Fragbench(p) => set_field(p, what, key, value),
            Params::Fptree(p) => set_field(p, what, key, value),
            Params::LlfreeBench(p) => set_field(p, what, key, value),
            Params::List(p) => set_field(p, what, key, value),
        }
        .map_err(|e| WorkloadError::Config(format!("{}: {e}", self.name)))
    }

    /// Applies `key=value` overrides in order.
    pub fn with_overrides<'a>(mut self, kvs: impl IntoIterator<Item = &'a str>) -> Result<Workload, WorkloadError> {
        for (k, v) in split_overrides(kvs).map_err(WorkloadError::Config)? {
            self.set(k, v)?;
        }
        Ok(self)
    }

    /// Whether the run ends with its data still allocated and published
    /// (Threadtest's `keep`, the list's `crash`): the directory at root 0
    /// stays, and live bytes at the end are expected.
    pub fn keeps_data(&self) -> bool {
        matches!(&self.params, Params::Threadtest(p) if p.keep) || self.crashes()
    }

    /// Whether the run anchors persistent structures, and so needs the
    /// directory at root 0. A Threadtest without `publish` keeps its
    /// objects' offsets in DRAM and anchors nothing: it allocates no
    /// directory, so the allocator's heap holds only the objects, as in the
    /// Threadtest programs the peers' code was measured with (a 192 B
    /// directory takes one of Makalu's first 16 blocks, and the heap it
    /// grows into instead changes how far each block search probes).
    pub fn anchors(&self) -> bool {
        !matches!(&self.params, Params::Threadtest(p) if !p.publish)
    }

    /// Whether a native run ends as a crash leaves the heap and times the
    /// allocator's recovery of it (the list's `crash`, Fig. 18).
    pub fn crashes(&self) -> bool {
        matches!(&self.params, Params::List(p) if p.crash)
    }

    /// The largest value of a numeric parameter (2^48: any count or size of
    /// a real run is far below it).
    pub const MAX_PARAM: u64 = 1 << 48;

    /// Refuses parameters the workload cannot run with, naming the field.
    pub fn validate(&self, threads: u32) -> Result<(), WorkloadError> {
        if threads == 0 {
            return Err(WorkloadError::Config("threads must be at least 1".into()));
        }
        let max = max_threads();
        if threads > max {
            return Err(WorkloadError::Config(format!(
                "{threads} threads: more than one run may start on this machine ({max}: a quarter of the \
                 process limit, at most {MAX_THREADS})"
            )));
        }
        let r = match &self.params {
            Params::Threadtest(p) => p.validate(threads),
            Params::ProdCon(p) => p.validate(threads),
            Params::Shbench(p) => p.validate(),
            Params::Larson(p) => p.validate(),
            Params::Dbmstest(p) => p.validate(threads),
            Params::Fragbench(p) => p.validate(),
            Params::Fptree(p) => p.validate(),
            Params::LlfreeBench(p) => p.validate(threads),
            Params::List(p) => p.validate(),
        };
        r.map_err(|m| WorkloadError::Config(format!("{}: {m}", self.name)))?;
        let live = self.peak_live(threads);
        if live > MAX_LIVE {
            return Err(WorkloadError::Config(format!(
                "{}: its objects need {live} bytes live at once with {threads} thread(s): more than pmsim runs a \
                 workload with (at most {MAX_LIVE}, 1 TiB)",
                self.name
            )));
        }
        Ok(())
    }

    /// A heap size (bytes, a multiple of 2 MiB) that holds this workload's
    /// peak with room for the fragmentation the paper reports (up to 2.8×
    /// the live data) and the allocators' metadata.
    pub fn heap_size_hint(&self, threads: u32) -> u64 {
        let live = self.peak_live(threads);
        // 3× the live data plus 64 MiB for metadata and the smallest pools.
        let mut want = live.saturating_mul(3).saturating_add(64 << 20);
        if self.large_objects() {
            // PMDK serves 32–512 KB from runs of per-class allocation units,
            // several chunks each, per arena (≈ per thread): measured, 32 live
            // objects of that range keep over 100 MiB of runs active.
            want = want.saturating_add(threads as u64 * (128 << 20));
        }
        want.div_ceil(2 << 20) * (2 << 20)
    }
}

impl Workload {
    /// What a run of `threads` threads needs of the heap, for the
    /// allocator's [`Allocator::heap_size`](crate::alloc::Allocator::heap_size).
    pub fn heap_need(&self, threads: u32) -> HeapNeed {
        HeapNeed {
            hint: self.heap_size_hint(threads),
            max_object: self.max_object_size(),
            peak_objects: self.peak_objects(threads),
            threads,
        }
    }

    /// The live bytes at the workload's peak (its own estimate, with a
    /// 16-byte allowance per object).
    pub fn peak_live(&self, threads: u32) -> u64 {
        match &self.params {
            Params::Threadtest(p) => p.peak_live(threads),
            Params::ProdCon(p) => p.peak_live(threads),
            Params::Shbench(p) => p.peak_live(threads),
            Params::Larson(p) => p.peak_live(threads),
            Params::Dbmstest(p) => p.peak_live(threads),
            Params::Fragbench(p) => p.peak_live(threads),
            Params::Fptree(p) => p.peak_live(threads),
            Params::LlfreeBench(p) => p.peak_live(threads),
            Params::List(p) => p.peak_live(threads),
        }
    }

    /// The largest object the workload allocates (its own arrays of
    /// destination slots aside), bytes.
    pub fn max_object_size(&self) -> u64 {
        match &self.params {
            Params::Threadtest(p) => p.size,
            Params::ProdCon(p) => p.size,
            Params::Shbench(p) => p.max_size,
            Params::Larson(p) => p.max_size,
            Params::Dbmstest(p) => p.max_size,
            Params::Fragbench(p) => p.before_max.max(p.after_max),
            Params::Fptree(p) => p.kv_size.max(p.fanout * 26 + 64),
            Params::LlfreeBench(p) => p.size,
            Params::List(p) => p.max_size,
        }
    }

    /// About how many objects are live at the peak: the peak live bytes over
    /// a typical object (an upper bound where sizes vary), for allocators
    /// that spend a page frame per object.
    pub fn peak_objects(&self, threads: u32) -> u64 {
        let per = match &self.params {
            Params::Threadtest(p) => p.size + 16,
            Params::ProdCon(p) => p.size + 16,
            Params::Shbench(p) => p.max_size + 16,
            Params::Larson(p) => p.max_size + 16,
            Params::Dbmstest(p) => (p.min_size + p.step * p.lambda as u64).min(p.max_size),
            Params::Fragbench(p) => p.before_min.min(p.after_min),
            Params::Fptree(p) => p.kv_size + 16,
            Params::LlfreeBench(p) => return p.peak_objects(threads),
            Params::List(p) => p.min_size + 16,
        };
        self.peak_live(threads).div_ceil(per.max(1))
    }

    /// Whether the workload allocates objects of 16 KB and more.
    fn large_objects(&self) -> bool {
        match &self.params {
            Params::Larson(p) => p.max_size >= 16 << 10,
            Params::Dbmstest(_) => true,
            _ => false,
        }
    }
}

/// How a workload runs.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub threads: u32,
    pub seed: u64,
    /// How often the heap's shape is sampled for [`RunReport::series`].
    pub series: series::Every,
    /// Measure what the run's work costs the CPU ([`RunReport::cpu`]; run
    /// it with flushes off to measure the CPU alone).
    pub cpu_profile: bool,
    /// Which parts of the heap are faulted in before the run
    /// ([`FaultIn`]); `None`: all of it with `cpu_profile`, none without.
    /// A run that touches only those parts pays the same per operation
    /// either way, and the kernel does not allocate and zero the rest.
    pub fault_in: Option<FaultIn>,
}

impl RunOptions {
    /// What of the heap to fault in before the run ([`RunOptions::fault_in`]), if anything.
    pub fn prefault(&self) -> Option<FaultIn> {
        self.fault_in.clone().or_else(|| self.cpu_profile.then(FaultIn::all))
    }
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions { threads: 1, seed: 42, series: series::Every::Auto, cpu_profile: false, fault_in: None }
    }
}

/// What a run measured.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    pub workload: String,
    pub scale: Scale,
    pub threads: u32,
    pub seed: u64,
    pub params: serde_json::Map<String, serde_json::Value>,
    /// Allocator operations of the whole run (every malloc, malloc_to, free
    /// and free_from, setup and teardown included).
    pub ops: u64,
    /// Wall time of the whole run, seconds.
    pub elapsed_s: f64,
    /// Operations in the measured phase (the whole run unless the workload
    /// has a warm-up or a teardown outside the benchmark).
    pub measured_ops: u64,
    pub measured_s: f64,
    /// `measured_ops / measured_s`.
    pub ops_per_s: f64,
    /// The worker threads' CPU time (waits excluded), seconds.
    pub cpu_s: f64,
    /// Operations per CPU second of a thread: `ops × threads / cpu_s`, what
    /// the run achieves with a core per thread however loaded the machine
    /// it ran on was (wall-time throughput falls with the load).
    pub ops_per_cpu_s: f64,
    /// The largest footprint sampled (each field its own maximum); samples
    /// are taken every few thousand operations of each thread and at phase ends.
    pub peak: Footprint,
    /// The footprint once the workload has freed everything.
    pub end: Footprint,
    /// The heap at the workload's working-set point (slab breakdown, Fig. 15b).
    pub snapshot: Option<Snapshot>,
    /// Workload-specific figures (e.g. FPTree's tree operations per second,
    /// Fragbench's footprint after each phase).
    pub extra: serde_json::Map<String, serde_json::Value>,
    /// The heap's shape as the run went (live and mapped bytes, slabs by
    /// fullness), every N operations and at phase ends.
    pub series: Vec<series::ShapePoint>,
    /// What the work cost the CPU, per operation, when the run measured it
    /// ([`RunOptions::cpu_profile`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<cpu::CpuProfile>,
}

/// Runs `wl` with `opts.threads` threads on `alloc`, checks its results, and
/// reports. `progress` may be polled from another thread meanwhile.
///
/// The workload anchors its persistent structures in a directory at root
/// slot 0 (when it [has any](Workload::anchors)) and frees everything before returning; the allocator must then
/// report zero live bytes (unless the workload [keeps its data](Workload::keeps_data)).
pub fn run<A: Allocator>(
    alloc: &Arc<A>,
    wl: &Workload,
    opts: &RunOptions,
    progress: &Progress,
) -> Result<RunReport, WorkloadError> {
    wl.validate(opts.threads)?;
    let sh = Shared::new(alloc, &wl.name, opts.threads, opts.seed, progress, opts.series, opts.cpu_profile);
    let start = Instant::now();
    let dir_bytes = 8 * Shared::<A>::dir_len(opts.threads) as u64;
    if wl.anchors() {
        sh.single(0, |w| {
            let dir = w.malloc(dir_bytes)?;
            w.zero(dir, dir_bytes);
            w.t.persist(dir, dir_bytes);
            w.t.set_root(0, dir);
            w.shared().set_dir(dir);
            Ok(())
        })?;
    }
    match &wl.params {
        Params::Threadtest(p) => threadtest::run(&sh, p)?,
        Params::ProdCon(p) => prodcon::run(&sh, p)?,
        Params::Shbench(p) => shbench::run(&sh, p)?,
        Params::Larson(p) => larson::run(&sh, p)?,
        Params::Dbmstest(p) => dbmstest::run(&sh, p)?,
        Params::Fragbench(p) => fragbench::run(&sh, p)?,
        Params::Fptree(p) => fptree::run(&sh, p)?,
        Params::LlfreeBench(p) => llfree_bench::run(&sh, p)?,
        Params::List(p) => list::run(&sh, p)?,
    }
    if wl.anchors() && !wl.keeps_data() {
        sh.single(0, |w| {
            w.t.set_root(0, 0);
            w.free(w.shared().dir_off())
        })?;
    }
    let end_time = Instant::now();
    let elapsed = end_time - start;
    sh.sample();
    sh.mark_phase("end");
    let end = alloc.footprint();
    if end.live_bytes != 0 && !wl.keeps_data() {
        return Err(WorkloadError::Check {
            workload: wl.name.clone(),
            tid: 0,
            what: format!("every object was freed, but the allocator reports {} live bytes", end.live_bytes),
        });
    }
    let (m0, m1) = sh.measured();
    let (t0, ops0) = m0.unwrap_or((start, 0));
    let (t1, ops1) = m1.unwrap_or((end_time, sh.ops()));
    let measured_s = (t1 - t0).as_secs_f64();
    let measured_ops = ops1 - ops0;
    Ok(RunReport {
        workload: wl.name.clone(),
        scale: wl.scale,
        threads: opts.threads,
        seed: opts.seed,
        params: wl.params_json(),
        ops: sh.ops(),
        elapsed_s: elapsed.as_secs_f64(),
        measured_ops,
        measured_s,
        ops_per_s: if measured_s > 0.0 { measured_ops as f64 / measured_s } else { 0.0 },
        cpu_s: sh.cpu_s(),
        ops_per_cpu_s: if sh.cpu_s() > 0.0 { sh.ops() as f64 * opts.threads as f64 / sh.cpu_s() } else { 0.0 },
        peak: sh.peak(),
        end,
        snapshot: sh.take_snapshot(),
        extra: sh.take_extra(),
        series: sh.series.take(),
        cpu: sh.cpu_profile(),
    })
}
