//! The simulator's configuration: every hardware constant in one TOML file with
//! its source (the documented default is `sim/optane.toml`, which must parse to
//! exactly [`Config::default`]; a test checks it). Unknown keys are errors, so a
//! misspelt constant cannot silently keep its default.

pub use crate::xpbuffer::Policy;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::Path;
use std::str::FromStr;

/// The documented default configuration, shipped with the crate.
pub const DEFAULT_TOML: &str = include_str!("../optane.toml");

/// Which flushes share one reflush-distance stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Distance counts the lines flushed by the same thread (pmsim's
    /// definition: what one thread's own flushes do to its next flush).
    #[default]
    Thread,
    /// Distance counts the lines flushed to the same DIMM by any thread (what
    /// one DIMM sees).
    Dimm,
    /// Distance counts every flush of the trace.
    Global,
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::Thread => "thread",
            Scope::Dimm => "dimm",
            Scope::Global => "global",
        }
    }
}

impl FromStr for Scope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "thread" => Ok(Scope::Thread),
            "dimm" => Ok(Scope::Dimm),
            "global" => Ok(Scope::Global),
            _ => Err(format!("unknown reflush scope {s:?} (expected thread, dimm or global)")),
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReflushConfig {
    /// A flush whose distance is below this is a reflush (NVAlloc §3.1: 4).
    pub threshold: u64,
    pub scope: Scope,
    /// Contention model: a reflush's latency (`latency.reflush_ns[0]`) runs
    /// from the *previous* flush of its line rather than from its own issue,
    /// so the time that passed since (other flushes, the CPU's work between
    /// operations) is taken off the wait. On by default, because the wait is
    /// for that previous write, which does not take longer when the CPU does
    /// other work first; NVAlloc §3.1's fall from 800 ns at distance 0 to
    /// 500 ns at distance 3, measured with flushes back to back, is then a
    /// prediction (`pmsim calibrate`'s `reflush` points). Off (a switch):
    /// `latency.reflush_ns` by distance, from the reflush's issue, however
    /// long ago the line was last written.
    pub timed: bool,
}

impl Default for ReflushConfig {
    fn default() -> Self {
        ReflushConfig { threshold: 4, scope: Scope::Thread, timed: true }
    }
}

/// The CPU cache model: one level, 64 B lines (the trace's unit), LRU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    pub sets: u32,
    pub ways: u32,
}

impl Default for CacheConfig {
    /// The L3 of the NVAlloc paper's Xeon Gold 5218R: 27.5 MB, 11 ways.
    fn default() -> Self {
        CacheConfig { sets: 40960, ways: 11 }
    }
}

/// The Optane DIMMs (Yang et al., FAST '20).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OptaneConfig {
    /// DIMMs interleaved: 2 by default, the NVAlloc paper's machine (§6.1);
    /// `pmsim calibrate` sets the count of each FAST '20 measurement.
    pub dimms: u32,
    pub interleave_bytes: u64,
    pub xpline_bytes: u64,
    pub xpbuffer_entries: u32,
    /// Which XPLine a full XPBuffer evicts.
    pub xpbuffer_policy: Policy,
    /// Seed of the random policy (each DIMM adds its number).
    pub xpbuffer_seed: u64,
}

impl Default for OptaneConfig {
    fn default() -> Self {
        OptaneConfig {
            dimms: 2,
            interleave_bytes: 4096,
            xpline_bytes: 256,
            xpbuffer_entries: 64,
            xpbuffer_policy: Policy::Random,
            xpbuffer_seed: 1,
        }
    }
}

/// The virtual-time contention model ([`crate::contention`]): what a thread
/// spends on each event and what the memory controller and the DIMMs take to
/// serve its writes. Nanoseconds unless the name says otherwise.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimingConfig {
    /// A thread's time for a cached store or a load (one trace event).
    pub store_ns: f64,
    /// A thread's time to issue a clwb or clflushopt (it does not wait for it).
    pub flush_issue_ns: f64,
    /// From a flush's issue to its arrival in the memory controller's
    /// write-pending queue (the cache writes the line back).
    pub flush_to_wpq_ns: f64,
    /// From a non-temporal line leaving the write-combining buffer to its
    /// arrival in the write-pending queue.
    pub nt_to_wpq_ns: f64,
    /// A fence's own time, besides waiting for the thread's writes to be
    /// accepted by the write-pending queues (ADR: accepted is persistent).
    pub fence_ns: f64,
    /// Entries of one DIMM's write-pending queue in the memory controller.
    pub wpq_entries: u32,
    /// Writes a thread may have in flight (issued, not yet accepted by a
    /// write-pending queue): the core's buffers that hold a line on its way
    /// to the memory controller. 0: unbounded.
    pub write_buffers: u32,
    /// The DIMM's time to take one 64 B write from the queue into its XPBuffer.
    pub dimm_write_ns: f64,
    /// Added when that write's XPLine is neither the DIMM's previous write's
    /// nor the next one: the locality the interleaved writes of many threads
    /// lose.
    pub dimm_switch_ns: f64,
    /// Added to a write's drain for each other thread with writes pending
    /// ahead of it at the same memory controller (in a write-pending queue
    /// or waiting for an entry of a full one): the head-of-line blocking
    /// of many writers sharing slow DIMMs, which lowers their bandwidth while
    /// write amplification stays near 1.
    pub writer_ns: f64,
    /// DIMMs per memory controller (DIMM `d` is on controller `d / imc_dimms`).
    pub imc_dimms: u32,
    /// The media's time to write one XPLine.
    pub media_write_ns: f64,
    /// The media time a read-modify-write adds to its XPLine's write (the
    /// read of a partly written XPLine; it overlaps other XPLines' writes,
    /// so it is far below a read's latency).
    pub media_read_ns: f64,
    /// Events the scheduler may hold back (all threads together) while it
    /// waits for the lowest-clock thread's next event; past it the
    /// lowest-clock thread that has events goes on (counted as `forced`).
    pub reorder_events: u32,
    /// Threads wait at the program's locks (the trace's `lock:acquire` and
    /// `lock:release` markers) for the previous holder's release. False (a
    /// switch): every lock is free whenever it is taken, which shows how
    /// much of a run's time its locks explain.
    pub locks: bool,
    /// The dirty lines the cache (`cache`) evicts are written to the DIMMs,
    /// taking a write buffer of the thread whose access evicted them. False
    /// (a switch): evicted lines vanish, as if the memory were as fast as
    /// the DRAM the CPU costs were measured on.
    pub writebacks: bool,
}

impl Default for TimingConfig {
    fn default() -> Self {
        TimingConfig {
            store_ns: 2.0,
            flush_issue_ns: 45.1,
            flush_to_wpq_ns: 20.2,
            nt_to_wpq_ns: 88.4,
            fence_ns: 10.0,
            wpq_entries: 64,
            write_buffers: 6,
            dimm_write_ns: 13.3,
            dimm_switch_ns: 9.6,
            writer_ns: 1.0,
            imc_dimms: 3,
            media_write_ns: 104.4,
            media_read_ns: 15.3,
            reorder_events: 1 << 22,
            locks: true,
            writebacks: true,
        }
    }
}

/// Costs, in nanoseconds, that the persist-time estimate adds up.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LatencyConfig {
    /// Cost of a flush of a dirty line at reflush distance 0, 1, 2, …; a
    /// reflush farther than the table uses its last entry.
    pub reflush_ns: Vec<f64>,
    /// A regular flush of a dirty line whose XPLine write combines in the
    /// XPBuffer (a sequential write).
    pub regular_flush_ns: f64,
    /// Added to a regular flush that hits the XPBuffer.
    pub xpbuffer_hit_ns: f64,
    /// Added to a regular flush that misses the XPBuffer.
    pub xpbuffer_miss_ns: f64,
    /// Added when that miss must first write an XPLine back to the media.
    pub media_write_ns: f64,
    /// A flush of a line that is not dirty in the cache: no data moves.
    pub clean_flush_ns: f64,
    /// A fence (the wait for the flushes it orders is in their costs).
    pub fence_ns: f64,
}

impl Default for LatencyConfig {
    fn default() -> Self {
        LatencyConfig {
            reflush_ns: vec![800.0, 700.0, 600.0, 500.0],
            regular_flush_ns: 93.0,
            xpbuffer_hit_ns: 0.0,
            xpbuffer_miss_ns: 14.0,
            media_write_ns: 110.0,
            clean_flush_ns: 20.0,
            fence_ns: 10.0,
        }
    }
}

/// Access-map output (NVAlloc Fig. 2).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AccessMapConfig {
    /// Keep the first this many flushes of each region category (0: none).
    pub per_category: usize,
}

/// Everything the simulator can be told.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Caches are in the persistence domain: flushes cost nothing and do not
    /// touch the cache (as the NVAlloc paper emulates eADR by removing them);
    /// only evictions and non-temporal stores reach PM.
    pub eadr: bool,
    /// Compute the reflush statistics only (no cache, Optane or latency model).
    pub reflush_only: bool,
    /// Also replay the events through the virtual-time contention model
    /// ([`crate::contention`], timing constants in `timing`) where a sweep
    /// point streams its run into the simulator ([`crate::Timed`]): estimated
    /// makespan and operations per second with the threads contending.
    pub contention: bool,
    pub reflush: ReflushConfig,
    pub cache: CacheConfig,
    pub optane: OptaneConfig,
    pub latency: LatencyConfig,
    pub timing: TimingConfig,
    pub access_map: AccessMapConfig,
}

/// A configuration that cannot be used, with where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub source_name: String,
    pub problem: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.source_name, self.problem)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Parses and validates TOML; `name` (a file name) prefixes every error.
    pub fn from_toml(text: &str, name: &str) -> Result<Config, ConfigError> {
        let err = |problem: String| ConfigError { source_name: name.to_string(), problem };
        let c: Config = toml::from_str(text).map_err(|e| err(e.message().to_string() + &span_note(text, e.span())))?;
        c.validate().map_err(err)?;
        Ok(c)
    }

    /// Reads, parses and validates a TOML file (a regular file of text, see
    /// [`pmsim_traces::input`]).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let name = pmsim_traces::input::shown(path);
        let text = pmsim_traces::input::read_text(path, "configuration")
            .map_err(|e| ConfigError { source_name: name.clone(), problem: strip_name(&e, &name) })?;
        Self::from_toml(&text, &name)
    }

    /// Checks the constants describe a machine that can exist.
    pub fn validate(&self) -> Result<(), String> {
        let c = &self.cache;
        if c.sets == 0 || c.ways == 0 {
            return Err(format!("cache.sets and cache.ways must be at least 1 (got {} and {})", c.sets, c.ways));
        }
        if c.sets as u64 * c.ways as u64 > 1 << 28 {
            return Err(format!("a cache of {} sets × {} ways is larger than 16 GiB", c.sets, c.ways));
        }
        let o = &self.optane;
        if o.dimms == 0 || o.dimms > 4096 {
            return Err(format!("optane.dimms must be between 1 and 4096 (got {})", o.dimms));
        }
        if !o.xpline_bytes.is_power_of_two() || !(64..=512).contains(&o.xpline_bytes) {
            return Err(format!("optane.xpline_bytes must be 64, 128, 256 or 512 (got {})", o.xpline_bytes));
        }
        if !o.interleave_bytes.is_power_of_two() || o.interleave_bytes < o.xpline_bytes || o.interleave_bytes > 1 << 40
        {
            return Err(format!(
                "optane.interleave_bytes must be a power of two of at least optane.xpline_bytes (got {})",
                o.interleave_bytes
            ));
        }
        if o.xpbuffer_entries == 0 || o.xpbuffer_entries > 1 << 15 {
            return Err(format!("optane.xpbuffer_entries must be between 1 and 32768 (got {})", o.xpbuffer_entries));
        }
        let t = &self.timing;
        if t.wpq_entries == 0 || t.wpq_entries > 1 << 16 {
            return Err(format!("timing.wpq_entries must be between 1 and 65536 (got {})", t.wpq_entries));
        }
        if t.write_buffers > 1 << 16 {
            return Err(format!("timing.write_buffers must be between 0 and 65536 (got {})", t.write_buffers));
        }
        if t.imc_dimms == 0 {
            return Err("timing.imc_dimms must be at least 1".into());
        }
        if t.reorder_events == 0 {
            return Err("timing.reorder_events must be at least 1".into());
        }
        let timed = [
            ("store_ns", t.store_ns),
            ("flush_issue_ns", t.flush_issue_ns),
            ("flush_to_wpq_ns", t.flush_to_wpq_ns),
            ("nt_to_wpq_ns", t.nt_to_wpq_ns),
            ("fence_ns", t.fence_ns),
            ("dimm_write_ns", t.dimm_write_ns),
            ("dimm_switch_ns", t.dimm_switch_ns),
            ("writer_ns", t.writer_ns),
            ("media_write_ns", t.media_write_ns),
            ("media_read_ns", t.media_read_ns),
        ];
        for (name, v) in timed {
            if !(v.is_finite() && (0.0..1e9).contains(&v)) {
                return Err(format!("timing.{name} must be a number of nanoseconds between 0 and 1e9 (got {v})"));
            }
        }
        let l = &self.latency;
        if l.reflush_ns.is_empty() {
            return Err("latency.reflush_ns needs at least one entry (the cost at distance 0)".into());
        }
        let named = [
            ("regular_flush_ns", l.regular_flush_ns),
            ("xpbuffer_hit_ns", l.xpbuffer_hit_ns),
            ("xpbuffer_miss_ns", l.xpbuffer_miss_ns),
            ("media_write_ns", l.media_write_ns),
            ("clean_flush_ns", l.clean_flush_ns),
            ("fence_ns", l.fence_ns),
        ];
        for (name, v) in l.reflush_ns.iter().map(|&v| ("reflush_ns", v)).chain(named) {
            if !(v.is_finite() && (0.0..1e9).contains(&v)) {
                return Err(format!("latency.{name} must be a number of nanoseconds between 0 and 1e9 (got {v})"));
            }
        }
        Ok(())
    }
}

/// " (line L, column C)" for a parse error, when TOML says where.
fn span_note(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    let Some(span) = span else { return String::new() };
    let before = &text[..span.start.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    format!(" (line {line}, column {col})")
}

/// An input error without the file name it starts with (a [`ConfigError`]
/// names its file itself).
fn strip_name(e: &str, name: &str) -> String {
    e.strip_prefix(name).and_then(|r| r.strip_prefix(": ")).unwrap_or(e).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_file_is_the_default() {
        let c = Config::from_toml(DEFAULT_TOML, "optane.toml").unwrap();
        assert_eq!(c, Config::default());
    }

    #[test]
    fn errors_name_the_file_and_problem() {
        let e = Config::from_toml("[cache]\nsetz = 3\n", "x.toml").unwrap_err();
        assert!(e.to_string().starts_with("x.toml: unknown field `setz`"), "{e}");
        assert!(e.to_string().contains("line 2"), "{e}");
        let e = Config::from_toml("[optane]\ndimms = 0\n", "y.toml").unwrap_err();
        assert_eq!(e.to_string(), "y.toml: optane.dimms must be between 1 and 4096 (got 0)");
        let e = Config::from_toml("[latency]\nfence_ns = -1.0\n", "z.toml").unwrap_err();
        assert!(e.to_string().contains("latency.fence_ns"), "{e}");
        let e = Config::from_toml("[reflush]\nscope = \"core\"\n", "s.toml").unwrap_err();
        assert!(e.to_string().contains("unknown variant `core`"), "{e}");
    }

    #[test]
    fn partial_files_keep_defaults() {
        let c = Config::from_toml("eadr = true\n[reflush]\nthreshold = 8\n", "p.toml").unwrap();
        assert!(c.eadr);
        assert_eq!(c.reflush.threshold, 8);
        assert_eq!(c.cache, CacheConfig::default());
    }
}
