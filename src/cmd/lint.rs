//! `pmsim lint`: flush-hygiene findings of a trace, with counts and the code
//! sites that cause them; `--deny KIND` turns findings into a failing exit
//! status, for CI.

use super::CmdResult;
use clap::Args;
use pmsim_sim::lint::{Finding, Linter};
use pmsim_traces::TraceReader;
use std::io::Write;
use std::path::PathBuf;

#[derive(Args)]
pub struct LintArgs {
    /// The .pmt file.
    file: PathBuf,
    /// Exit with status 1 if the trace has findings of this kind (repeatable):
    /// redundant-flush, unwritten-flush, empty-fence, not-durable,
    /// reflush-distance-0, or `all`.
    #[arg(long, value_name = "KIND")]
    deny: Vec<String>,
    /// Sites listed per finding.
    #[arg(long, default_value_t = 5)]
    top: usize,
    /// Print the findings as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: LintArgs) -> CmdResult {
    let mut deny = Vec::new();
    for d in &a.deny {
        match d.as_str() {
            "all" => deny.extend(Finding::ALL),
            s => deny.push(Finding::from_name(s).ok_or_else(|| {
                let kinds: Vec<&str> = Finding::ALL.iter().map(|f| f.name()).collect();
                format!("--deny {s}: unknown finding (kinds: {}, all)", kinds.join(", "))
            })?),
        }
    }
    let mut reader = TraceReader::open(&a.file)?;
    let mut lint = Linter::default();
    while let Some(block) = reader.next_block()? {
        block.visit(&mut lint)?;
    }
    let report = lint.report(reader.sites(), a.top);
    let mut out = std::io::stdout().lock();
    if a.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        writeln!(out, "file  {}", a.file.display())?;
        for f in &report.findings {
            writeln!(out, "\n{:<20} {:>10}   {}", f.kind.name(), f.count, f.doc)?;
            for s in &f.top_sites {
                writeln!(out, "  {:>10}  {}", s.count, s.name)?;
            }
            for l in &f.examples {
                writeln!(out, "  line {l:#x}")?;
            }
        }
    }
    out.flush()?;
    let crossed: Vec<&str> = deny.iter().filter(|f| report.count(**f) > 0).map(|f| f.name()).collect();
    if !crossed.is_empty() {
        let mut c = crossed.clone();
        c.dedup();
        return Err(format!("{}: denied findings present: {}", a.file.display(), c.join(", ")).into());
    }
    Ok(())
}
