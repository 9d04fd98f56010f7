//! `pmsim`: a workbench for persistent-memory allocator designers. This binary is
//! a thin layer over the workspace crates: it parses arguments, calls one
//! library function per subcommand and prints its result (for people, or as JSON).

mod cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "pmsim", version, about, long_about = LONG_ABOUT)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

const LONG_ABOUT: &str = "pmsim runs persistent-memory allocators on a mapped heap file, records every \
persistent store, cache-line flush and fence they issue into .pmt traces, and replays those traces \
through cache and Optane XPBuffer models.";

#[derive(Subcommand)]
enum Command {
    /// Inspect .pmt trace files.
    #[command(subcommand)]
    Trace(cmd::trace::TraceCmd),
    /// Measure the speed of pmsim's own hot paths (trace writer and reader) and print a table.
    Bench(cmd::bench::BenchArgs),
    /// Replay a trace through the reflush-distance, cache, XPBuffer and latency models.
    Sim(cmd::sim::SimArgs),
    /// Run a workload of the NVAlloc paper on an allocator: natively, into a trace, or into the simulator.
    Run(cmd::run::RunArgs),
    /// Model-check the TLA+ specifications (slab morphing, log GC, LLFree) with TLC.
    #[command(subcommand)]
    Specs(cmd::specs::SpecsCmd),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Trace(c) => cmd::trace::run(c),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Sim(a) => cmd::sim::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Specs(c) => cmd::specs::run(c),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pmsim: error: {e}");
            ExitCode::FAILURE
        }
    }
}
