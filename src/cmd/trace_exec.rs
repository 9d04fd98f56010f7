//! `pmsim trace-exec`: trace an unmodified program under the Valgrind tool
//! `pmtrace` into a .pmt file (logic in the `pmsim-pintools` crate).

use super::CmdResult;
use clap::Args;
use pmsim_pintools::{cache_dir, trace_exec, Example, TraceExec, Traced};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

#[derive(Args)]
#[command(after_help = "Valgrind 3.19 cannot decode clwb or clflushopt (the program dies of SIGILL) and hides them \
from CPUID: PMDK then falls back to clflush by itself; give pmsim's own allocators --flush-insn clflush. \
The tool is built on first use into $PMSIM_CACHE_DIR, else $XDG_CACHE_HOME/pmsim, else ~/.cache/pmsim.\n\n\
Examples:\n  pmsim trace-exec -o t.pmt -- target/release/pmsim run --alloc nvalloc-log --workload threadtest \
--flush-insn clflush\n  pmsim trace-exec -o pmdk.pmt --example pmdk-threadtest -- 20 5000 64 1")]
pub struct TraceExecArgs {
    /// The trace to write.
    #[arg(short, long, value_name = "OUT.pmt", default_value = "trace.pmt")]
    out: PathBuf,
    /// Files mapped from under this directory are persistent memory (tmpfs or a DAX mount).
    #[arg(long, default_value = "/dev/shm")]
    pm_dir: PathBuf,
    /// Record the bytes every PM store writes, and the heap's bytes when tracing starts into OUT.img
    /// (for crash states: `pmsim crash OUT`).
    #[arg(long)]
    values: bool,
    /// Replace an existing trace file.
    #[arg(long)]
    force: bool,
    /// Allocator name for the trace header.
    #[arg(long, default_value = "")]
    allocator: String,
    /// Workload name for the trace header.
    #[arg(long, default_value = "")]
    workload: String,
    /// Start a window at the first call of this function (e.g. pmemobj_alloc): the trace records the
    /// marker window:FUNCTION there, and `pmsim sim` reports the figures from it on beside the whole run.
    #[arg(long, value_name = "FUNCTION")]
    window_at: Option<String>,
    /// Trace an example program pmsim ships (built on first use); the arguments after -- are its own,
    /// after the PM directory it takes first. pmdk-threadtest: [ITERATIONS [OBJECTS [SIZE [THREADS [API]]]]],
    /// API one of atomic (pmemobj_alloc/free, the default), tx (a transaction that logs the slot) or
    /// tx-unlogged (the same without pmemobj_tx_add_range: a mutation pmsim crash catches).
    #[arg(long, value_parser = ["pmdk-threadtest"])]
    example: Option<String>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    /// The program and its arguments (after --).
    #[arg(last = true, value_name = "PROG ARGS")]
    command: Vec<OsString>,
}

pub fn run(a: TraceExecArgs) -> CmdResult {
    let mut t = match a.example.as_deref().and_then(Example::from_name) {
        Some(ex) => ex.trace_exec(&cache_dir(), &a.pm_dir, a.command.clone(), &a.out)?,
        None => {
            let Some((prog, args)) = a.command.split_first() else {
                return Err("give the program to trace after --, e.g. pmsim trace-exec -o t.pmt -- ./prog args".into());
            };
            let mut t = TraceExec::new(prog.clone(), args.to_vec(), &a.out);
            t.pm_dir = a.pm_dir.clone();
            t
        }
    };
    t.values = a.values;
    t.force = a.force;
    if !a.allocator.is_empty() {
        t.allocator = a.allocator.clone();
    }
    if !a.workload.is_empty() {
        t.workload = a.workload.clone();
    }
    if let Some(f) = &a.window_at {
        if f.is_empty() || f.len() > 200 || f.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("--window-at {f:?}: expected a function name").into());
        }
        t.window_at = f.clone();
    }
    let traced = trace_exec(&t)?;
    print_summary(&traced, a.json)
}

fn print_summary(t: &Traced, json: bool) -> CmdResult {
    for w in &t.warnings {
        eprintln!("pmsim: warning: {w}");
    }
    let kind = |k: &str| t.stats.by_kind.get(k).copied().unwrap_or(0);
    let mut out = std::io::stdout().lock();
    if json {
        let v = serde_json::json!({
            "trace": t.out,
            "header": t.header,
            "stats": t.stats,
            "seconds": t.elapsed.as_secs_f64(),
            "warnings": t.warnings,
        });
        serde_json::to_writer_pretty(&mut out, &v)?;
        writeln!(out)?;
        return Ok(());
    }
    let h = &t.header;
    writeln!(out, "trace        {} ({} events, {} bytes)", t.out.display(), t.stats.events, t.stats.file_bytes)?;
    writeln!(out, "heap         {} base {:#x} size {}", h.heap.path, h.heap.base, h.heap.size)?;
    writeln!(
        out,
        "events       {} stores, {} non-temporal stores, {} flushes, {} fences, {} threads",
        kind("store"),
        kind("ntstore"),
        kind("flush"),
        kind("fence"),
        h.threads
    )?;
    if let Some(n) = h.extra.get("imprecise_flushes").and_then(|v| v.as_u64()).filter(|&n| n > 0) {
        writeln!(out, "warning      {n} clflushes known only to their 256 B block")?;
    }
    writeln!(out, "time         {:.2} s under Valgrind", t.elapsed.as_secs_f64())?;
    Ok(())
}
