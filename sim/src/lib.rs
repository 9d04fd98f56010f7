//! pmsim's replay engine: a trace (a `.pmt` file or an in-process event stream)
//! goes through models of what the NVAlloc paper (ASPLOS '22, §3 and §6)
//! measures, in bounded memory, and comes out as one [`Report`]:
//!
//! - **reflush distance** ([`distance`]): the exact histogram of distances and
//!   the reflush ratio (Fig. 1a, 16a), per thread, DIMM or globally;
//! - the **CPU cache** ([`cache`]): whether a flushed line is dirty, and which
//!   dirty lines reach PM by eviction (all that reaches PM under eADR, Fig. 19);
//! - the **Optane DIMMs** ([`optane`]): 4 KB interleave, XPBuffer write
//!   combining of 256 B XPLines, media reads and writes, write amplification,
//!   sequential vs random writes;
//! - a **latency** estimate (constants in [`config`], defaults with sources in
//!   `sim/optane.toml`): persist time per operation, split by region category
//!   as in Fig. 11;
//! - **access maps** ([`access_map`]): where the first N flushes of each
//!   category land (Fig. 2);
//! - **exporters** ([`export`]): the same persist stream as gem5, DRAMsim3 or
//!   Ramulator 2 traces, for cycle-level memory simulators.
//!
//! ```
//! use pmsim_sim::{Config, Simulator};
//! use pmsim_traces::{Event, FenceKind, FlushKind, TraceHeader};
//!
//! let mut sim = Simulator::new(Config::default(), &TraceHeader::default()).unwrap();
//! for line in [0u64, 64, 128, 192, 0] {
//!     sim.step(0, &Event::Store { addr: line, size: 8, value: None });
//!     sim.step(0, &Event::Flush { kind: FlushKind::Clwb, line });
//!     sim.step(0, &Event::Fence { kind: FenceKind::Sfence });
//! }
//! let report = sim.report();
//! assert_eq!(report.overall.bucket("3"), 1); // A B C D A
//! assert_eq!(report.overall.reflushes, 1);
//! ```

//! Speed: the per-event work is O(log n) in the distinct lines of a reflush
//! scope, with no allocation and no SipHash (flat tables with multiplicative
//! hashing). Measure it with `cargo bench -p pmsim-benches --bench sim` (criterion) or
//! `cargo run --release -p pmsim-sim --example sim_speed`, which also reports
//! on-CPU rates for shared machines; both run the synthetic stream of
//! `pmsim_traces::synth`, not an allocator trace.

pub mod access_map;
pub mod cache;
pub mod calibrate;
pub mod config;
pub mod contention;
pub mod diff;
pub mod distance;
pub mod export;
pub mod fastmap;
pub mod line_times;
pub mod lint;
pub mod optane;
mod print;
mod simulator;
pub mod sites;
pub mod stats;
pub mod timed;
pub mod xpbuffer;

pub use access_map::{write_csv as write_access_map_csv, write_json as write_access_map_json, AccessPoint};
pub use config::{Config, ConfigError, Policy, Scope, TimingConfig, DEFAULT_TOML};
pub use contention::{write_text as write_contention_text, Contention, ContentionReport, CpuCosts, Parts};
pub use distance::DistanceTracker;
pub use print::write_text;
pub use simulator::{Simulator, WindowAt};
pub use sites::{write_sites, SiteReport};
pub use stats::{Report, Stats, WindowReport};
pub use timed::Timed;
