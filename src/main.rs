//! `pmsim`: a workbench for persistent-memory allocator designers. This binary is
//! a thin layer over the workspace crates: it parses arguments, calls one
//! library function per subcommand and prints its result (for people, or as JSON).

mod cmd;
mod progress;

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
    /// Flush-hygiene findings of a trace (redundant and unwritten flushes, empty fences, stores never
    /// made durable, reflushes at distance 0) with their code sites; --deny KIND fails on them.
    Lint(cmd::lint::LintArgs),
    /// Two runs side by side (traces or saved `sim --json` reports): every figure, per region and
    /// operation, the code sites that changed most; or two sweep directories point by point;
    /// --fail-if BOUND exits 1 on a regression, for CI.
    Diff(cmd::diff::DiffArgs),
    /// Replay the published Optane microbenchmarks (FAST '20, and NVAlloc's reflush latency) through the
    /// contention model and print model beside published value with the relative error (fitted points
    /// and validation points).
    Calibrate(cmd::calibrate::CalibrateArgs),
    /// Run a workload of the NVAlloc paper on an allocator: natively, into a trace, or into the simulator.
    Run(cmd::run::RunArgs),
    /// Trace an unmodified program (PMDK, any binary that maps PM) under pmsim's Valgrind tool into a .pmt file.
    TraceExec(cmd::trace_exec::TraceExecArgs),
    /// Write a trace's memory traffic for gem5 (packet trace + replay script), DRAMsim3 or Ramulator 2.
    Export(cmd::export::ExportArgs),
    /// Run every point of an experiment (TOML file and/or --set ranges) in parallel, sharded and resumable;
    /// `pmsim sweep merge DIR` combines the shards.
    Sweep(cmd::sweep::SweepArgs),
    /// The main job: run the experiment set and write a report (index.html, README.md) with every figure.
    Reproduce(cmd::reproduce::ReproduceArgs),
    /// Crash states of a traced run: every image the persistency model allows at each crash point,
    /// recovered with the allocator's own code and checked.
    #[command(long_about = cmd::crash::LONG_ABOUT)]
    Crash(cmd::crash::CrashArgs),
    /// Model-check the TLA+ specifications (slab morphing, log GC, LLFree) with TLC.
    #[command(subcommand)]
    Specs(cmd::specs::SpecsCmd),
}

fn main() -> ExitCode {
    pmsim_model::registry::serve_helper_if_asked();
    pmsim_traces::interrupt::clean_after_if_asked();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return usage_error(e),
    };
    pmsim_traces::interrupt::install();
    // Output piped into a reader that stops early (`pmsim crash … | head`):
    // Rust ignores SIGPIPE, so `println!` panics on the closed pipe. That
    // panic is not a bug of pmsim: it unwinds silently (every scratch file's
    // guard still runs) and pmsim exits as a program killed by SIGPIPE would
    // be seen by a shell, without a message.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !is_broken_pipe(info.payload()) {
            hook(info)
        }
    }));
    let result = std::panic::catch_unwind(move || dispatch(cli.command));
    if pmsim_traces::interrupt::interrupted() {
        // The signal handler's thread is cleaning up and ends the process by
        // the signal: nothing more to say or do here.
        loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }
    // The scratch directories live as long as the process; they go now.
    pmsim_traces::owned::remove_own_scratch();
    match result {
        Ok(code) => code,
        Err(p) if is_broken_pipe(&*p) => ExitCode::from(141),
        Err(p) => std::panic::resume_unwind(p),
    }
}

/// A command line clap refuses: one error line (what is wrong, without the
/// usage text) and exit status 1, as every other bad input; `--help` and
/// `--version` print as usual.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => e.exit(),
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let args: Vec<String> = std::env::args().skip(1).collect();
            eprintln!(
                "pmsim: error: 'pmsim {}' needs a subcommand (pmsim {} --help lists them)",
                args.join(" "),
                args.join(" ")
            );
            ExitCode::FAILURE
        }
        _ => {
            let text = e.render().to_string();
            let what = text.split("\n\nUsage:").next().unwrap_or("");
            let what = what.split("\n\nFor more information").next().unwrap_or("");
            let line = what.split_whitespace().collect::<Vec<_>>().join(" ");
            let line = line.strip_prefix("error: ").unwrap_or(&line);
            eprintln!("pmsim: error: {} (see --help)", pmsim_traces::input::one_line(line));
            ExitCode::FAILURE
        }
    }
}

/// Whether a panic is `println!`'s on a closed stdout.
fn is_broken_pipe(payload: &(dyn std::any::Any + Send)) -> bool {
    let msg = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("");
    msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe")
}

fn dispatch(command: Command) -> ExitCode {
    let result = match command {
        Command::Trace(c) => cmd::trace::run(c),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Sim(a) => cmd::sim::run(a),
        Command::Lint(a) => cmd::lint::run(a),
        Command::Diff(a) => cmd::diff::run(a),
        Command::Calibrate(a) => cmd::calibrate::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::TraceExec(a) => cmd::trace_exec::run(a),
        Command::Export(a) => cmd::export::run(a),
        Command::Sweep(a) => cmd::sweep::run(a),
        Command::Reproduce(a) => cmd::reproduce::run(a),
        Command::Crash(a) => cmd::crash::run(a),
        Command::Specs(c) => cmd::specs::run(c),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) if pmsim_traces::interrupt::interrupted() => ExitCode::FAILURE,
        // Output piped into a reader that stopped early, seen by a command
        // that writes with `?`: the quiet exit of a closed stdout, as above.
        Err(e) if e.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) => {
            ExitCode::from(141)
        }
        Err(e) => {
            // One line whatever the error quotes (a name or a damaged file's bytes).
            eprintln!("pmsim: error: {}", pmsim_traces::input::one_line(&e.to_string()));
            ExitCode::FAILURE
        }
    }
}
