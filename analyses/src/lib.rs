//! pmsim's analyses: experiments (TOML files or command-line ranges) and
//! their points ([`experiment`], [`point`]), sweeps that run them in parallel
//! and in deterministic shards into durable result files ([`sweep`],
//! [`store`], [`row`]), the figures and reports drawn from those files
//! alone, and two sweeps compared point by point ([`diff`]).

pub mod calibration;
pub mod claims;
pub mod cpu;
pub mod diff;
pub mod estimate;
pub mod experiment;
pub mod fields;
pub mod figures;
pub mod peers;
pub mod plot;
pub mod point;
pub mod reproduce;
pub mod row;
pub mod slurm;
pub mod store;
pub mod sweep;
pub mod table;

pub use experiment::Experiment;
pub use point::{Mode, Point};
pub use row::Row;
pub use store::{merge, SweepDir};
pub use sweep::{Options as SweepOptions, Shard};
