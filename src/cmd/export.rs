//! `pmsim export`: a trace's memory traffic as a gem5 packet trace, a
//! DRAMsim3 or a Ramulator 2 trace (logic in `pmsim_sim::export`); for gem5
//! also the replay script, and a run of it when `GEM5` names a gem5 binary.

use super::CmdResult;
use clap::Args;
use pmsim_sim::export::{self, gem5, FileOptions, Format, Mode, Options, Summary, Timing};
use pmsim_sim::{Config, Simulator};
use pmsim_traces::output::{Pending, Policy};
use pmsim_traces::{Category, TraceReader};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct ExportArgs {
    /// The .pmt file.
    file: PathBuf,
    /// Target: gem5 (packet trace for its TrafficGen), dramsim3 or ramulator (Ramulator 2 LoadStoreTrace).
    #[arg(long)]
    format: String,
    /// The file to write.
    #[arg(long)]
    out: PathBuf,
    /// persist: what reaches PM (dirty lines written back by flushes, evictions of
    /// dirty lines, non-temporal lines); all: that plus every store and load.
    #[arg(long, default_value = "persist")]
    mode: String,
    /// Keep only packets to regions of these categories, comma-separated (meta,wal,log,data).
    #[arg(long)]
    region: Option<String>,
    /// Keep only the packets of this thread (the cache model still sees every thread).
    #[arg(long)]
    thread: Option<u32>,
    /// eADR: flushes move nothing; only evictions and non-temporal stores reach PM.
    #[arg(long)]
    eadr: bool,
    /// Machine model in TOML, for the cache (defaults: sim/optane.toml).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Picoseconds between two packets.
    #[arg(long, default_value_t = Timing::default().packet_ps)]
    packet_ps: u64,
    /// Picoseconds a fence waits after its thread's latest flush or non-temporal packet.
    #[arg(long, default_value_t = Timing::default().fence_ps)]
    fence_ps: u64,
    /// Exported address of the heap's first byte (decimal or 0x hex).
    #[arg(long, default_value = "0")]
    base: String,
    /// gem5: gzip the packet trace (gem5 reads either).
    #[arg(long)]
    gzip: bool,
    /// dramsim3: memory clock period in ps, turning ticks into cycles [default: 833, DDR4-2400].
    #[arg(long)]
    tck_ps: Option<u64>,
    /// gem5: also write a replay script for build/NULL/gem5.opt to this file.
    #[arg(long, value_name = "OUT.py")]
    gem5_config: Option<PathBuf>,
    /// gem5 script: memory behind the controller: nvm (NVM_2400_1x64) or dram (DDR4_2400_8x8) [default: nvm].
    #[arg(long)]
    gem5_mem: Option<String>,
    /// gem5 script: ticks the replay runs past the last packet, for queued writes to finish [default: 10000000].
    #[arg(long)]
    gem5_drain_ps: Option<u64>,
    /// gem5: run the script with the gem5 binary named by the GEM5 environment variable
    /// and print its statistics next to pmsim's own latency estimate.
    #[arg(long)]
    run_gem5: bool,
    /// Replace existing --out and --gem5-config files.
    #[arg(long)]
    force: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: ExportArgs) -> CmdResult {
    // Everything that can be refused is refused before the (possibly long) export.
    let format: Format = a.format.parse()?;
    let mode: Mode = a.mode.parse()?;
    let categories = a.region.as_deref().map(parse_categories).transpose()?;
    let base = parse_u64(&a.base).ok_or_else(|| format!("--base {:?}: not a number", a.base))?;
    let memory: gem5::Memory = a.gem5_mem.as_deref().unwrap_or("nvm").parse()?;
    if (a.gem5_mem.is_some() || a.gem5_drain_ps.is_some()) && a.gem5_config.is_none() && !a.run_gem5 {
        return Err("--gem5-mem and --gem5-drain-ps shape the gem5 script: give --gem5-config or --run-gem5".into());
    }
    let drain_ps = a.gem5_drain_ps.unwrap_or(10_000_000);
    if format != Format::Gem5 && (a.gzip || a.gem5_config.is_some() || a.run_gem5) {
        return Err("--gzip, --gem5-config and --run-gem5 need --format gem5".into());
    }
    if format != Format::Dramsim3 && a.tck_ps.is_some() {
        return Err("--tck-ps needs --format dramsim3".into());
    }
    if a.packet_ps == 0 {
        return Err("--packet-ps must be at least 1".into());
    }
    let gem5_bin = match (a.run_gem5, std::env::var_os("GEM5")) {
        (false, _) => None,
        (true, Some(g)) if !g.is_empty() => Some(PathBuf::from(g)),
        (true, _) => {
            return Err("--run-gem5 needs the GEM5 environment variable set to a gem5 binary \
                        (e.g. GEM5=/path/to/gem5/build/NULL/gem5.opt); gem5 is not part of pmsim"
                .into())
        }
    };
    let cfg = match &a.config {
        Some(p) => Config::from_file(p)?,
        None => Config::default(),
    };
    let script_path = match (&a.gem5_config, &gem5_bin) {
        (Some(p), _) => Some(p.clone()),
        (None, Some(_)) => Some(with_suffix(&a.out, ".py")),
        (None, None) => None,
    };
    // The files written, checked before the export starts; the trace and
    // the configuration are inputs, never written over.
    let mut policy = Policy::new(a.force);
    policy.input(&a.file);
    if let Some(c) = &a.config {
        policy.input(c);
    }
    policy.check(&a.out)?;
    if let Some(p) = &script_path {
        policy.check(p)?;
    }
    // gem5's output directory: made under a temporary name, in place only
    // when gem5 succeeded.
    let m5out = gem5_bin.as_ref().map(|_| with_suffix(&a.out, ".m5out"));
    if let Some(d) = &m5out {
        policy.check_dir(d)?;
    }
    let opts = Options {
        mode,
        categories,
        thread: a.thread,
        cache: cfg.cache.clone(),
        eadr: a.eadr || cfg.eadr,
        timing: Timing { packet_ps: a.packet_ps, fence_ps: a.fence_ps },
        base,
    };

    let mut reader = TraceReader::open(&a.file)?;
    let header = reader.header().clone();
    let trace_name = a.file.file_name().map_or_else(|| a.file.display().to_string(), |n| n.to_string_lossy().into());
    let file_opts = FileOptions { gzip: a.gzip, tck_ps: a.tck_ps, obj_id: format!("pmsim export of {trace_name}") };
    let len = std::fs::metadata(&a.file).map(|m| m.len()).unwrap_or(0);
    let template = "export [{elapsed_precise}] {wide_bar} {binary_bytes}/{binary_total_bytes} ({eta})";
    let bar = crate::progress::bar(Some(len), template);
    let started = std::time::Instant::now();
    let result = export::export_staged(&mut reader, &opts, format, &file_opts, &a.out, |b| bar.set_position(b));
    bar.finish_and_clear();
    let (summary, staged) = result?;
    let secs = started.elapsed().as_secs_f64();

    // Every output is written under a temporary name and renamed into place
    // together at the end: a gem5 that fails, a script that cannot be
    // written, leave every earlier file as it was.
    let mut pending = Pending::default();
    let mut gem5_run = None;
    if let Some(p) = &script_path {
        let trace = std::path::absolute(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
        let end = base.saturating_add(header.heap.size).max(summary.max_end);
        let script = gem5::Script {
            trace: trace.clone(),
            duration: summary.last_tick.saturating_add(drain_ps),
            memory,
            size: gem5::Script::range_size(end),
        };
        pending.push(policy.stage_bytes(p, script.render().as_bytes())?);
        if let (Some(bin), Some(d)) = (&gem5_bin, &m5out) {
            // gem5 replays the trace under its temporary name, through a
            // copy of the script that names it so.
            let run_script = pmsim_traces::owned::scratch_path(pmsim_traces::owned::Place::Temp, "gem5-replay.py")?;
            let tmp_trace = std::path::absolute(staged.tmp_path())?;
            std::fs::write(&run_script, gem5::Script { trace: tmp_trace, ..script }.render())
                .map_err(|e| format!("{}: {e}", run_script.display()))?;
            let (r, dir) = gem5::run_staged(bin, &run_script, policy.create_dir(d)?, Some(&trace))?;
            gem5_run = Some(r);
            pending.push(dir);
        }
    }
    // The export first, so that the script and gem5's directory never name
    // a trace that is not there.
    let mut all = Pending::default();
    all.push(staged);
    all.append(pending);
    all.commit()?;
    // pmsim's own estimate of the same trace, for comparison with gem5's.
    let estimate_ns = match &gem5_run {
        Some(_) => {
            let mut reader = TraceReader::open(&a.file)?;
            let mut sim_cfg = cfg.clone();
            sim_cfg.eadr = opts.eadr;
            let mut sim = Simulator::new(sim_cfg, reader.header())?;
            sim.replay(&mut reader)?;
            Some(sim.report().overall.persist_ns.total)
        }
        None => None,
    };

    let mut out = std::io::stdout().lock();
    if a.json {
        let v = serde_json::json!({
            "file": a.file,
            "out": a.out,
            "format": format,
            "mode": mode,
            "timing": opts.timing,
            "summary": summary,
            "seconds": secs,
            "events_per_second": summary.events as f64 / secs.max(1e-9),
            "gem5_config": script_path,
            "gem5": gem5_run.as_ref().map(|r| serde_json::json!({
                "out_dir": r.out_dir,
                "stats": r.stats.iter().map(|(n, v)| (n.clone(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
                "incomplete": r.incomplete,
            })),
            "pmsim_persist_ns": estimate_ns,
        });
        serde_json::to_writer_pretty(&mut out, &v)?;
        writeln!(out)?;
        return Ok(out.flush()?);
    }
    writeln!(out, "{}", summary_line(&a.out, format, &summary, secs))?;
    if let Some(p) = &script_path {
        writeln!(out, "gem5 replay script: {} (run: build/NULL/gem5.opt {})", p.display(), p.display())?;
    }
    if let (Some(r), Some(est)) = (&gem5_run, estimate_ns) {
        writeln!(out, "gem5 statistics ({}/stats.txt):", r.out_dir.display())?;
        for key in gem5::KEY_STATS {
            if let Some((_, v)) = r.stats.iter().find(|(n, _)| n == key) {
                writeln!(out, "  {key:<40} {v}")?;
            }
        }
        if let Some(t) = r.sim_ticks {
            writeln!(
                out,
                "gem5 simulated time         {:.3} us (trace span {:.3} us + drain {:.3} us)",
                t / 1e6,
                summary.last_tick as f64 / 1e6,
                drain_ps as f64 / 1e6
            )?;
        }
        writeln!(out, "pmsim persist-time estimate {:.3} us (pmsim sim, same trace and cache)", est / 1e3)?;
        if r.incomplete {
            writeln!(out, "warning: gem5 could not replay the whole trace in time; raise --gem5-drain-ps")?;
        }
    }
    Ok(out.flush()?)
}

/// One line: what was written, how big, how fast.
fn summary_line(out: &Path, format: Format, s: &Summary, secs: f64) -> String {
    let sources: Vec<String> =
        s.by_source.iter().filter(|(_, n)| *n > 0).map(|(name, n)| format!("{n} {name}")).collect();
    format!(
        "{}: {} packets ({} writes, {} reads{}{}), {} bytes, {} format, from {} events in {:.2} s ({:.1} M events/s)",
        out.display(),
        s.packets,
        s.writes,
        s.reads,
        if sources.is_empty() { String::new() } else { format!(": {}", sources.join(", ")) },
        if s.dirty_lines_left > 0 {
            format!("; {} lines left dirty in the cache", s.dirty_lines_left)
        } else {
            String::new()
        },
        s.out_bytes,
        format.name(),
        s.events,
        secs,
        s.events as f64 / secs.max(1e-9) / 1e6,
    )
}

fn parse_categories(s: &str) -> Result<Vec<Category>, String> {
    s.split(',')
        .map(|name| {
            let name = name.trim();
            Category::ALL
                .into_iter()
                .find(|c| c.name() == name)
                .ok_or_else(|| format!("--region: unknown region category {name:?} (expected meta, wal, log or data)"))
        })
        .collect()
}

fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}
