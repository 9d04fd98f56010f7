//! One module per subcommand.

pub mod bench;
pub mod run;
pub mod sim;
pub mod specs;
pub mod trace;

/// The error every subcommand returns: one line for the user.
pub type CmdResult = Result<(), Box<dyn std::error::Error>>;
