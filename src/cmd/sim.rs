//! `pmsim sim`: replay a trace through the reflush-distance, cache, XPBuffer
//! and latency models and print the report (tables, or JSON).

use super::CmdResult;
use clap::Args;
use pmsim_sim::{Config, Contention, Report, Scope, Simulator, WindowAt};
use pmsim_traces::output::{Output, Policy};
use pmsim_traces::TraceReader;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct SimArgs {
    /// The .pmt file.
    file: PathBuf,
    #[command(flatten)]
    model: ModelArgs,
    /// Write the first flushes of each region category (NVAlloc Fig. 2) to this .csv or .json file.
    #[arg(long, value_name = "OUT")]
    access_map: Option<PathBuf>,
    /// Replace an existing --access-map file.
    #[arg(long)]
    force: bool,
    /// With --access-map: how many flushes per category the access map keeps, 1 to 10,000,000 [default: 1000].
    #[arg(long, value_parser = pmsim_traces::input::count_in(1, 10_000_000))]
    access_map_n: Option<usize>,
    /// Also replay the trace in virtual time, its threads contending for the DIMMs (a second pass):
    /// makespan, estimated operations/s, per-DIMM media busy time and waits. With --json the output
    /// becomes `{"report": …, "contention": …}`.
    #[arg(long)]
    contention: bool,
    /// Also report the figures from the first marker with this label on (or `LABEL:…`), e.g. one a
    /// program recorded with pmtrace_marker, or `window` from `pmsim trace-exec --window-at FUNC`
    /// (traces with a `window` marker get that window without asking).
    #[arg(long, value_name = "LABEL", conflicts_with = "skip_ops")]
    from_marker: Option<String>,
    /// Also report the figures from the (N+1)-th operation on: the steady state after N operations.
    #[arg(long, value_name = "N")]
    skip_ops: Option<u64>,
    /// Print the report as JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// `site`: instead of the tables, flushes, reflushes, reflush ratio, fences
    /// and persist time per code site (the source line or function that issued
    /// them), costliest first. Traces name sites from format version 2 on (the
    /// built-in tracer and `pmsim trace-exec`). With --json the report's
    /// `sites` array holds every site.
    #[arg(long, value_parser = ["site"])]
    by: Option<String>,
    /// With --by site: rows of the table (the rest are summed in one line) [default: 20].
    #[arg(long)]
    top: Option<usize>,
}

/// The model options `pmsim sim` and `pmsim diff` share.
#[derive(Args)]
pub struct ModelArgs {
    /// Machine model in TOML (defaults and the source of every constant: sim/optane.toml).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// A flush at a reflush distance below this is a reflush [config default: 4].
    #[arg(long)]
    threshold: Option<u64>,
    /// Whose flushes count towards a reflush distance [config default: thread].
    #[arg(long, value_parser = ["thread", "dimm", "global"])]
    scope: Option<String>,
    /// eADR: caches are persistent, flushes cost nothing, only evictions reach PM.
    #[arg(long)]
    eadr: bool,
    /// Compute the reflush statistics only (no cache, Optane or latency model; faster).
    #[arg(long)]
    reflush_only: bool,
}

impl ModelArgs {
    /// The configuration: the file's (or the defaults) with the options applied.
    pub fn config(&self) -> Result<Config, Box<dyn std::error::Error>> {
        let mut cfg = match &self.config {
            Some(p) => Config::from_file(p)?,
            None => Config::default(),
        };
        if let Some(t) = self.threshold {
            cfg.reflush.threshold = t;
        }
        if let Some(s) = &self.scope {
            cfg.reflush.scope = s.parse::<Scope>()?;
        }
        cfg.eadr |= self.eadr;
        cfg.reflush_only |= self.reflush_only;
        Ok(cfg)
    }
}

/// Replays a trace file through the models of `cfg`, with the window of a
/// `window` marker if the trace has one.
pub fn replay(file: &Path, cfg: Config) -> Result<(Simulator, Report), Box<dyn std::error::Error>> {
    replay_window(file, cfg, WindowAt::Marker("window".into()))
}

/// Replays a trace file, reporting a window from `at` on besides the whole run.
fn replay_window(file: &Path, cfg: Config, at: WindowAt) -> Result<(Simulator, Report), Box<dyn std::error::Error>> {
    let mut reader = TraceReader::open(file)?;
    let mut sim = Simulator::new(cfg, reader.header())?;
    sim.set_window(at);
    sim.replay(&mut reader)?;
    let report = sim.report();
    Ok((sim, report))
}

enum MapFormat {
    Csv,
    Json,
}

pub fn run(a: SimArgs) -> CmdResult {
    // Options that do nothing without another are refused, not ignored.
    for (given, name, needs) in [
        (a.force, "--force", "--access-map"),
        (a.access_map_n.is_some(), "--access-map-n", "--access-map"),
        (a.top.is_some(), "--top", "--by site"),
    ] {
        let has = if needs == "--by site" { a.by.is_some() } else { a.access_map.is_some() };
        if given && !has {
            return Err(format!("{name} applies to {needs}, which is not given").into());
        }
    }
    let mut cfg = a.model.config()?;
    // Refuse a bad output name before the (possibly long) replay, not after.
    let map = match &a.access_map {
        None => None,
        Some(p) => {
            let fmt = match p.extension().and_then(|e| e.to_str()) {
                Some("csv") => MapFormat::Csv,
                Some("json") => MapFormat::Json,
                _ => return Err(format!("{}: the access map must be a .csv or .json file", p.display()).into()),
            };
            cfg.access_map.per_category = a.access_map_n.unwrap_or(1000);
            let mut policy = Policy::new(a.force);
            policy.input(&a.file);
            if let Some(c) = &a.model.config {
                policy.input(c);
            }
            let out = policy.create(p)?;
            Some((p.as_path(), fmt, out))
        }
    };

    let contention = if a.contention {
        let mut model = Contention::new(&cfg).map_err(|e| format!("simulator configuration: {e}"))?;
        model.replay(&mut TraceReader::open(&a.file)?)?;
        Some(model.report())
    } else {
        None
    };
    let asked = match (&a.from_marker, a.skip_ops) {
        (Some(m), _) => Some(WindowAt::Marker(m.clone())),
        (None, Some(n)) => Some(WindowAt::Ops(n)),
        (None, None) => None,
    };
    let (sim, report) = replay_window(&a.file, cfg, asked.clone().unwrap_or(WindowAt::Marker("window".into())))?;
    if let (Some(at), None) = (&asked, &report.window) {
        let why = match at {
            WindowAt::Marker(m) => format!("no marker labelled {m:?} (or {m}:…)"),
            _ => format!("{} operation(s), none after the first {}", report.overall.ops, a.skip_ops.unwrap_or(0)),
        };
        return Err(format!("{}: the window never began: the trace has {why}", a.file.display()).into());
    }
    if a.by.is_some() && report.sites.is_empty() {
        return Err(format!(
            "{}: the trace names no code sites (it predates format version 2, or its tracer records none)",
            a.file.display()
        )
        .into());
    }

    if let Some((path, fmt, file)) = map {
        write_map(path, fmt, file, &sim)?;
    }
    let mut out = BufWriter::new(std::io::stdout().lock());
    match (a.json, &contention) {
        (true, None) => serde_json::to_writer_pretty(&mut out, &report)?,
        (true, Some(c)) => {
            serde_json::to_writer_pretty(&mut out, &serde_json::json!({ "report": report, "contention": c }))?
        }
        (false, _) if a.by.is_some() => {
            writeln!(out, "file         {}", a.file.display())?;
            writeln!(out, "events       {}", report.events)?;
            writeln!(out, "sites        {} issued flushes or fences\n", report.sites.len())?;
            pmsim_sim::write_sites(&report.sites, a.top.unwrap_or(20), &mut out)?;
        }
        (false, _) => {
            writeln!(out, "file         {}", a.file.display())?;
            pmsim_sim::write_text(&report, &mut out)?;
        }
    }
    if let (false, Some(w)) = (a.json, &report.window) {
        writeln!(out, "\nwindow: from {} ({} events before it)\n", w.from, w.events_before)?;
        pmsim_sim::diff::write_side_by_side(&report, ("whole run", "window"), &w.report, &mut out)?;
    }
    if let (false, Some(c)) = (a.json, &contention) {
        pmsim_sim::write_contention_text(c, &mut out)?;
    }
    if a.json {
        writeln!(out)?;
    }
    // A closed pipe (`pmsim sim … | head`) ends as every command's does: a
    // quiet exit with status 141 (see main).
    out.flush()?;
    Ok(())
}

fn write_map(path: &Path, fmt: MapFormat, mut out: Output, sim: &Simulator) -> CmdResult {
    let points = sim.access_map();
    let mut w = BufWriter::new(out.take_file());
    let r = match fmt {
        MapFormat::Csv => pmsim_sim::write_access_map_csv(&points, &mut w),
        MapFormat::Json => pmsim_sim::write_access_map_json(&points, &mut w),
    };
    let named = |e: std::io::Error| format!("{}: cannot write: {e}", path.display());
    r.map_err(named)?;
    let file = w.into_inner().map_err(|e| named(e.into_error()))?;
    out.commit_file(file).map_err(named)?;
    Ok(())
}
