//! The configuration of an NVAlloc instance: every technique of the paper as
//! its own switch, and the presets of the paper's ablation (Fig. 11).
//!
//! One serde struct, so the exact configuration goes into trace headers and
//! result rows ([`crate::Allocator::params`]) and can be read back. Presets
//! are starting points; any field can be overridden by name
//! ([`NvAllocConfig::set`]), e.g. `stripes=4` for the stripe sweep of Fig. 16a.
//!
//! | preset | stripes | int. tcache | int. WAL | bookkeeping log | int. log | morphing |
//! |---|---|---|---|---|---|---|
//! | `base` | 1 | – | – | – | – | – |
//! | `+interleaved` | 1 | ✓ | – | – | – | – |
//! | `+log` | 1 | – | – | ✓ | – | – |
//! | `nvalloc-log` | 6 | ✓ | ✓ | ✓ | ✓ | ✓ |
//! | `nvalloc-gc` | 6 | ✓ | ✓ | ✓ | ✓ (consistency `gc`) | ✓ |
//!
//! The presets follow the paper: `+interleaved` is "only the interleaved
//! tcache layout", `+log` "only log-structured bookkeeping" (with sequential
//! records: the paper credits the interleaving of log records to the full
//! NVAlloc-LOG). Slab morphing (`su` 0.20) is on in the two full variants,
//! as in the paper's Table 2, and off in the ablation steps. It follows the
//! paper, not the artifact's extra conditions (idle > 1000 ticks, LRU searched
//! only when candidates exceed 10 %).

pub use super::mutation::Mutation;
use crate::config::AllocConfig;
use crate::error::AllocError;
use serde::{Deserialize, Serialize};

/// How small-allocation metadata is kept consistent across crashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Consistency {
    /// Every small-metadata update goes through the WAL; recovery replays it.
    Log,
    /// No flushes for small allocations; recovery marks from the persistent
    /// roots conservatively (as Makalu does).
    Gc,
}

/// Arenas at most: the superblock holds one state flag per arena (see
/// `layout`), so the layout is sized by this bound.
pub const MAX_ARENAS: usize = 64;

/// Which WAL protocol small (and large) `malloc_to` / `free_from` follow
/// under the `log` model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WalMode {
    /// What NVAlloc's public code persists: a small `malloc_to` persists one
    /// ring entry, its bitmap line and `*dest` (3 flushes); a small
    /// `free_from` only its bitmap line (no entry, `*dest` left as is); an
    /// entry is never cleared. A large `malloc_to` persists its entry, then
    /// `*dest`, then its record; a large `free_from` clears `*dest`, then
    /// deletes the record. Recovery: see [`super::recovery`].
    Artifact,
    /// Every `malloc_to` / `free_from` is bracketed by an entry that is
    /// persisted first and cleared last (8 flushes per small pair); recovery
    /// redoes every valid entry, so each operation is atomic.
    Strict,
}

/// Trace headers written before the switch existed recorded strict runs.
fn wal_before_the_switch() -> WalMode {
    WalMode::Strict
}

/// When the bookkeeping log is collected (checked every `gc_interval`
/// tombstones; see `large::Inner::maybe_gc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogGc {
    /// What NVAlloc's public code does (`add_log` in its `log.c`): at a check,
    /// a slow GC when the log's usage (live extent records over the slots of
    /// its active chunks; `large::artifact_gc` says how the code counts
    /// them) is at most 10 % (the code's `chunks * 126 / items >= 10`), else
    /// a fast GC when it is at most 50 % (`>= 2`), else nothing. The code
    /// has no `Usage_pmem`.
    Artifact,
    /// The paper's rule (§5.3): a fast GC at every check, and a slow GC when
    /// the log's active chunks exceed `usage_pmem` of the heap while at least
    /// half of their records are dead.
    Paper,
    /// No GC at the checks (Fig. 17's baseline "without GC"); only a full log
    /// is still collected, so that an append finds room.
    Off,
}

/// Trace headers written before the switch existed recorded the paper's rule.
fn log_gc_before_the_switch() -> LogGc {
    LogGc::Paper
}

/// The stripe count of NVAlloc (the artifact's `NBANKS`, the paper's choice in §6.5).
pub const DEFAULT_STRIPES: u32 = 6;

/// Every parameter of an NVAlloc instance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NvAllocConfig {
    /// The preset this configuration started from (the allocator's name).
    pub preset: String,
    pub consistency: Consistency,
    /// Bit stripes of slab bitmaps (1 = sequential mapping). Part of the heap
    /// layout: a heap must be reopened with the value it was created with.
    pub stripes: u32,
    /// Split each tcache bin into sub-tcaches by the bitmap line of the
    /// block's bit and allocate from them round-robin: `tcache_banks` of
    /// them.
    pub interleaved_tcache: bool,
    /// Sub-tcaches per bin of an interleaved tcache; 0 = as many as
    /// `stripes`, as the public code has them (its `NBANKS` sets both), so
    /// that one stripe is a plain bin. The `+interleaved` ablation sets
    /// [`DEFAULT_STRIPES`] over its sequential bitmaps.
    #[serde(default)]
    pub tcache_banks: u32,
    /// A refill of an interleaved tcache goes on to further partial slabs,
    /// up to one per sub-tcache, while the blocks of those before fit only
    /// full sub-tcaches. Off in every preset (pmsim's reading of the paper's
    /// +Interleaved): a refill stops at the first partial slab that still
    /// has free blocks. Over sequential bitmaps a slab of small blocks
    /// covers one or two bitmap lines (1,024 blocks of 64 B: two), so off
    /// fills one or two sub-tcaches and consecutive allocations alternate
    /// between those lines; with bit stripes one slab fills them all either
    /// way. The paper does not say which its ablation did: the
    /// switch-presets experiment reads +Interleaved both ways.
    #[serde(default)]
    pub fill_all_subs: bool,
    /// The WAL protocol (`artifact`, the default of the NVAlloc-LOG presets,
    /// or `strict`). Part of the heap layout (the rings differ in shape).
    #[serde(default = "wal_before_the_switch")]
    pub wal: WalMode,
    /// Consecutive WAL entries of a thread on different lines.
    pub interleaved_wal: bool,
    /// Extent records in the bookkeeping log; off = in-place extent headers
    /// in each chunk. Part of the heap layout.
    pub bookkeeping_log: bool,
    /// Consecutive bookkeeping-log records on different lines.
    pub interleaved_log: bool,
    /// Slab morphing (§5.2): a refill with no slab of its class morphs a
    /// little-used slab of another class before asking for a new slab.
    pub morphing: bool,
    /// Slab-morphing space-utilization threshold: a slab with fewer than this
    /// fraction of its blocks in use may morph.
    pub su: f64,
    /// Slab morphing: a candidate must have gone unused for more than this
    /// many ticks of its arena's LRU clock (one tick per slab use). 0 = the
    /// paper's rule (no idle time); the artifact waits 1000 ticks.
    pub morph_idle: u64,
    /// Slab morphing: the LRU list is searched only when the slabs under the
    /// SU threshold exceed this fraction of it. 0 = the paper's rule (always
    /// search); the artifact uses 0.1.
    pub morph_candidates: f64,
    /// Arenas for small allocations; 0 = one per core of the machine pmsim
    /// runs on (the paper's rule, "each CPU core owns an arena", applied
    /// there). A run with more threads than that shares arenas, so its
    /// layout, and its figures at those thread counts, depend on the
    /// machine: set `arenas` to compare runs made on different machines.
    /// The paper's machine had 80 hardware threads, an arena for each of up
    /// to 64 threads here. With that, NVAlloc-LOG's hot bitmap and WAL lines
    /// outgrow the XPBuffers: Larson-small at 8 threads makes 16.1 M
    /// operations per second with 64 arenas against 19.1 M with 2, and 19.1 M
    /// against 20.7 M with an XPBuffer of 4,096 entries (`pmsim sweep` of
    /// `nvalloc-log` and `nvalloc-log:arenas=64` with `sim.contention =
    /// true` and `sim.optane.xpbuffer_entries = [64, 4096]`). Before slabs
    /// took a page of padding ([`super::layout::SLAB_EXTENT`]) every slab
    /// header lay on one DIMM, and it was 10.6 M against 13.3 M.
    pub arenas: u32,
    /// Thread ids (0..max_threads) that may allocate: each owns a WAL area.
    /// Part of the heap layout.
    pub max_threads: u32,
    /// Most blocks one tcache bin holds (spread over its sub-tcaches).
    pub tcache_max: u32,
    /// WAL lines per thread under `wal=strict`; banks per half of a thread's
    /// ring under `wal=artifact` (the artifact's `NBANKS`, 6: two halves of
    /// 6 lines). Part of the heap layout.
    pub wal_lines: u32,
    /// When the bookkeeping log is collected: `artifact` (the public code's
    /// usage thresholds, the default), `paper` (the `Usage_pmem` rule) or
    /// `off` (Fig. 17's baseline).
    #[serde(default = "log_gc_before_the_switch")]
    pub log_gc: LogGc,
    /// Slow-GC threshold of the bookkeeping log under `log_gc = paper`: the
    /// log's active chunks may occupy this fraction of the heap before a slow
    /// GC compacts them (the paper's `Usage_pmem`, 0.2 % in Fig. 17).
    pub usage_pmem: f64,
    /// Tombstones between two log GC checks (the artifact's `gc_timer`: every
    /// 10,000 free records).
    pub gc_interval: u32,
    /// The decay window in large-allocator operations: freed extents leave
    /// the reclaimed list for the retained list along a smootherstep curve
    /// over this many operations (jemalloc's decay; see `nvalloc::decay`).
    pub decay_ops: u64,
    /// Bytes of the bookkeeping log area; 0 = max(256 KiB, heap / 256).
    /// Part of the heap layout.
    pub log_bytes: u64,
    /// A deliberately removed flush, for testing crash checkers (see
    /// [`Mutation`]); `none` in every real run.
    pub mutation: Mutation,
}

impl Default for NvAllocConfig {
    fn default() -> Self {
        NvAllocConfig {
            preset: "nvalloc-log".into(),
            consistency: Consistency::Log,
            wal: WalMode::Artifact,
            stripes: DEFAULT_STRIPES,
            interleaved_tcache: true,
            tcache_banks: 0,
            fill_all_subs: false,
            interleaved_wal: true,
            bookkeeping_log: true,
            interleaved_log: true,
            morphing: true,
            su: 0.20,
            morph_idle: 0,
            morph_candidates: 0.0,
            arenas: 0,
            max_threads: 128,
            tcache_max: 192,
            wal_lines: 6,
            log_gc: LogGc::Artifact,
            usage_pmem: 0.002,
            gc_interval: 10_000,
            decay_ops: 4096,
            log_bytes: 0,
            mutation: Mutation::None,
        }
    }
}

impl NvAllocConfig {
    /// Names of the presets.
    pub const PRESETS: [&'static str; 5] = ["base", "+interleaved", "+log", "nvalloc-log", "nvalloc-gc"];

    /// The configuration of a preset.
    pub fn preset(name: &str) -> Result<NvAllocConfig, AllocError> {
        let full = NvAllocConfig { preset: name.to_string(), ..NvAllocConfig::default() };
        let base = NvAllocConfig {
            stripes: 1,
            interleaved_tcache: false,
            interleaved_wal: false,
            bookkeeping_log: false,
            interleaved_log: false,
            morphing: false,
            ..full.clone()
        };
        Ok(match name {
            "base" => base,
            "+interleaved" => NvAllocConfig { interleaved_tcache: true, tcache_banks: DEFAULT_STRIPES, ..base },
            "+log" => NvAllocConfig { bookkeeping_log: true, ..base },
            "nvalloc-log" => full,
            // NVAlloc-GC logs only large operations; they keep the strict
            // protocol its crash checks were established with.
            "nvalloc-gc" => NvAllocConfig { consistency: Consistency::Gc, wal: WalMode::Strict, ..full },
            _ => {
                return Err(AllocError::config(
                    super::NAME,
                    format!("unknown NVAlloc preset '{name}' (expected one of: {})", NvAllocConfig::PRESETS.join(", ")),
                ))
            }
        })
    }

    /// The lines of one thread's WAL area.
    pub fn wal_area_lines(&self) -> u32 {
        match self.wal {
            WalMode::Strict => self.wal_lines,
            WalMode::Artifact => self.wal_lines * crate::mech::wal::ARTIFACT_HALVES,
        }
    }

    /// The WAL of a heap with this configuration whose WAL starts at `base`.
    pub fn wal_at(&self, base: u64) -> crate::mech::wal::Wal {
        use crate::mech::wal::Wal;
        let w = match self.wal {
            WalMode::Strict => Wal::new(base, self.wal_lines, self.max_threads, self.interleaved_wal),
            WalMode::Artifact => Wal::artifact(base, self.wal_lines, self.max_threads, self.interleaved_wal),
        };
        w.with_entry_flush(self.mutation != Mutation::WalEntryFlush)
    }

    /// Sub-tcaches per tcache bin (1 = a plain LIFO bin).
    pub fn tcache_stripes(&self) -> u32 {
        match (self.interleaved_tcache, self.tcache_banks) {
            (false, _) => 1,
            (true, 0) => self.stripes,
            (true, b) => b,
        }
    }

    /// Arenas to run with: `arenas`, or one per core of this machine.
    pub fn arena_count(&self) -> usize {
        let n = match self.arenas {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n as usize,
        };
        n.clamp(1, MAX_ARENAS)
    }

    /// The fields that shape the persistent layout and so must match the
    /// heap's: the first difference, described, or `None`.
    pub fn layout_mismatch(&self, heap: &NvAllocConfig) -> Option<String> {
        let diff = |name: &str, mine: String, theirs: String| {
            (mine != theirs)
                .then(|| format!("the heap was created with {name} = {theirs}, the configuration says {mine}"))
        };
        diff("stripes", self.stripes.to_string(), heap.stripes.to_string())
            .or_else(|| diff("bookkeeping_log", self.bookkeeping_log.to_string(), heap.bookkeeping_log.to_string()))
            .or_else(|| diff("max_threads", self.max_threads.to_string(), heap.max_threads.to_string()))
            .or_else(|| diff("wal_lines", self.wal_lines.to_string(), heap.wal_lines.to_string()))
            .or_else(|| diff("consistency", format!("{:?}", self.consistency), format!("{:?}", heap.consistency)))
            .or_else(|| diff("wal", format!("{:?}", self.wal).to_lowercase(), format!("{:?}", heap.wal).to_lowercase()))
    }
}

impl AllocConfig for NvAllocConfig {
    const ALLOC: &'static str = super::NAME;

    fn validate(&self) -> Result<(), AllocError> {
        let bad = |m: String| Err(AllocError::config(Self::ALLOC, m));
        if !(1..=64).contains(&self.stripes) {
            return bad(format!("stripes = {} (must be 1..=64)", self.stripes));
        }
        if !(self.su > 0.0 && self.su < 1.0) {
            return bad(format!("su = {} (must be between 0 and 1)", self.su));
        }
        if !(0.0..1.0).contains(&self.morph_candidates) {
            return bad(format!("morph_candidates = {} (must be in [0, 1))", self.morph_candidates));
        }
        if !(1..=4096).contains(&self.max_threads) {
            return bad(format!("max_threads = {} (must be 1..=4096)", self.max_threads));
        }
        if self.arenas as usize > MAX_ARENAS {
            return bad(format!("arenas = {} (at most {})", self.arenas, MAX_ARENAS));
        }
        if self.tcache_banks > 64 {
            return bad(format!("tcache_banks = {} (must be 0..=64)", self.tcache_banks));
        }
        if !(1..=4096).contains(&self.tcache_max) {
            return bad(format!("tcache_max = {} (must be 1..=4096)", self.tcache_max));
        }
        if !(1..=64).contains(&self.wal_lines) {
            return bad(format!("wal_lines = {} (must be 1..=64)", self.wal_lines));
        }
        if !(self.usage_pmem > 0.0 && self.usage_pmem <= 1.0) {
            return bad(format!("usage_pmem = {} (must be in (0, 1])", self.usage_pmem));
        }
        if self.gc_interval == 0 {
            return bad("gc_interval = 0 (must be at least 1)".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_and_overrides() {
        for name in NvAllocConfig::PRESETS {
            let c = NvAllocConfig::preset(name).unwrap();
            assert_eq!(c.preset, name);
            c.validate().unwrap();
        }
        assert!(NvAllocConfig::preset("nope").unwrap_err().to_string().contains("unknown NVAlloc preset 'nope'"));
        let base = NvAllocConfig::preset("base").unwrap();
        assert_eq!((base.stripes, base.tcache_stripes(), base.morphing), (1, 1, false));
        assert!(
            NvAllocConfig::preset("nvalloc-log").unwrap().morphing
                && NvAllocConfig::preset("nvalloc-gc").unwrap().morphing
        );
        let il = NvAllocConfig::preset("+interleaved").unwrap();
        assert_eq!((il.stripes, il.tcache_stripes(), il.bookkeeping_log), (1, 6, false));
        let c = NvAllocConfig::preset("nvalloc-log").unwrap().with_overrides(["stripes=4", "su = 0.3"]).unwrap();
        assert_eq!((c.stripes, c.su, c.tcache_stripes()), (4, 0.3, 4));
        // One stripe is one bank, as the public code's NBANKS sets both.
        let one = NvAllocConfig::preset("nvalloc-log").unwrap().with_overrides(["stripes=1"]).unwrap();
        assert_eq!(one.tcache_stripes(), 1);
        assert_eq!(NvAllocConfig::preset("base").unwrap().wal, WalMode::Artifact);
        assert_eq!(
            NvAllocConfig::preset("nvalloc-log").unwrap().with_overrides(["wal=strict"]).unwrap().wal,
            WalMode::Strict
        );
        assert!(NvAllocConfig::default().set("wal", "lax").unwrap_err().to_string().contains("wal"));
        // Another allocator's mutation would run the real code under its name.
        let m = NvAllocConfig::preset("nvalloc-log").unwrap().with_overrides(["mutation=ll-trust-counters"]);
        assert!(m.unwrap_err().to_string().contains("bad value 'll-trust-counters' for mutation"));
        let m = NvAllocConfig::preset("nvalloc-log").unwrap().with_overrides(["mutation=dest-flush"]);
        assert_eq!(m.unwrap().mutation, Mutation::DestFlush);
        let mut old: serde_json::Value = serde_json::to_value(NvAllocConfig::default()).unwrap();
        old.as_object_mut().unwrap().remove("wal");
        assert_eq!(
            serde_json::from_value::<NvAllocConfig>(old).unwrap().wal,
            WalMode::Strict,
            "headers before the switch"
        );
        let mut c = NvAllocConfig::default();
        c.set("consistency", "gc").unwrap();
        assert_eq!(c.consistency, Consistency::Gc);
        assert!(c.set("stripe", "4").unwrap_err().to_string().contains("unknown NVAlloc parameter 'stripe'"));
        assert!(c.set("stripes", "many").is_err());
        let c = NvAllocConfig { stripes: 0, ..NvAllocConfig::default() };
        assert!(c.validate().unwrap_err().to_string().contains("stripes = 0"));
        let json = serde_json::to_string(&NvAllocConfig::default()).unwrap();
        assert_eq!(serde_json::from_str::<NvAllocConfig>(&json).unwrap(), NvAllocConfig::default());
    }
}
