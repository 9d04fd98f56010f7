//! One module per subcommand.

pub mod bench;
pub mod bench_crash;
pub mod bench_validate;
pub mod calibrate;
pub mod crash;
pub mod diff;
pub mod export;
pub mod lint;
pub mod reproduce;
pub mod run;
pub mod sim;
pub mod specs;
pub mod sweep;
pub mod trace;
pub mod trace_exec;

/// The error every subcommand returns: one line for the user.
pub type CmdResult = Result<(), Box<dyn std::error::Error>>;
