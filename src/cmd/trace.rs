//! `pmsim trace info|dump`: what a trace holds.

use super::CmdResult;
use clap::{Args, Subcommand};
use pmsim_traces::{Event, TraceReader, TraceStats};
use std::io::{BufWriter, Write};
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum TraceCmd {
    /// Print the header of a trace and its events counted by kind, thread and region, with bytes per event.
    Info(InfoArgs),
    /// Print the events of a trace, one per line, in global order.
    Dump(DumpArgs),
}

#[derive(Args)]
pub struct InfoArgs {
    /// The .pmt file.
    file: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct DumpArgs {
    /// The .pmt file.
    file: PathBuf,
    /// Stop after this many events (after the thread filter; at least 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    limit: Option<u64>,
    /// Only events of this thread.
    #[arg(long)]
    thread: Option<u32>,
    /// One JSON object per line instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: TraceCmd) -> CmdResult {
    match cmd {
        TraceCmd::Info(a) => info(a),
        TraceCmd::Dump(a) => dump(a),
    }
}

fn info(a: InfoArgs) -> CmdResult {
    let mut reader = TraceReader::open(&a.file)?;
    let header = reader.header().clone();
    let stats = TraceStats::scan(&mut reader)?;
    let mut out = BufWriter::new(std::io::stdout().lock());
    if a.json {
        let v = serde_json::json!({ "file": a.file, "header": header, "stats": stats });
        serde_json::to_writer_pretty(&mut out, &v)?;
        writeln!(out)?;
        return Ok(out.flush()?);
    }
    // The header's strings are the trace writer's: a damaged or crafted
    // trace may hold line breaks or terminal escapes, shown escaped.
    let esc = pmsim_traces::input::one_line;
    let comp = |c: &pmsim_traces::Component| {
        let mut s = esc(&c.name);
        if !c.variant.is_empty() {
            s += &format!(" ({})", esc(&c.variant));
        }
        if !c.params.is_empty() {
            s += &format!(" {}", serde_json::Value::Object(c.params.clone()));
        }
        if s.is_empty() {
            "-".to_string()
        } else {
            s
        }
    };
    writeln!(out, "trace       {}", a.file.display())?;
    writeln!(out, "written by  pmsim {} ({:?} tracer)", header.pmsim_version, header.tracer)?;
    writeln!(out, "allocator   {}", comp(&header.allocator))?;
    writeln!(out, "workload    {}", comp(&header.workload))?;
    writeln!(out, "threads     {}", header.threads)?;
    writeln!(out, "flush insn  {}", if header.flush_insn.is_empty() { "-".into() } else { esc(&header.flush_insn) })?;
    writeln!(out, "heap        {} base {:#x} size {}", esc(&header.heap.path), header.heap.base, header.heap.size)?;
    writeln!(out, "values      {}", if header.values { "recorded" } else { "not recorded" })?;
    writeln!(out, "regions     {} in the header", header.regions.len())?;
    writeln!(out)?;
    writeln!(
        out,
        "{} events in {} blocks, {} bytes: {:.3} bytes/event",
        stats.events, stats.blocks, stats.file_bytes, stats.bytes_per_event
    )?;
    writeln!(out, "\n{:<16} {:>14}", "kind", "events")?;
    for (k, n) in &stats.by_kind {
        writeln!(out, "{k:<16} {n:>14}")?;
    }
    writeln!(out, "\n{:<16} {:>14}", "thread", "events")?;
    for (t, n) in &stats.by_thread {
        writeln!(out, "{t:<16} {n:>14}")?;
    }
    if !stats.by_region.is_empty() {
        writeln!(out, "\n{:<28} {:<8} {:>12} {:>14} {:>12}", "region", "category", "stores", "store bytes", "flushes")?;
        for (name, c) in &stats.by_region {
            let (name, cat) = (esc(name), esc(&c.category));
            writeln!(out, "{name:<28} {cat:<8} {:>12} {:>14} {:>12}", c.stores, c.store_bytes, c.flushes)?;
        }
    }
    Ok(out.flush()?)
}

fn dump(a: DumpArgs) -> CmdResult {
    let mut reader = TraceReader::open(&a.file)?;
    let mut out = BufWriter::new(std::io::stdout().lock());
    let limit = a.limit.unwrap_or(u64::MAX);
    let mut shown = 0u64;
    let mut io_err: Option<std::io::Error> = None;
    // The threads met, to say which there are when --thread names none of them.
    let mut tids = std::collections::BTreeSet::new();
    'blocks: while let Some(block) = reader.next_block()? {
        for rec in block.records() {
            let rec = rec?;
            if a.thread.is_some_and(|t| t != rec.tid) {
                tids.insert(rec.tid);
                continue;
            }
            if shown >= limit {
                break 'blocks;
            }
            shown += 1;
            let r = if a.json { writeln!(out, "{}", json_line(&rec)) } else { writeln!(out, "{}", text_line(&rec)) };
            if let Err(e) = r {
                io_err = Some(e);
                break 'blocks;
            }
        }
    }
    match io_err.map_or_else(|| out.flush(), Err) {
        // A closed pipe (`pmsim trace dump … | head`) ends as every
        // command's does: a quiet exit with status 141 (see main).
        Err(e) => Err(e.into()),
        Ok(()) => match a.thread {
            Some(t) if shown == 0 => {
                let list: Vec<String> = tids.iter().map(u32::to_string).collect();
                Err(format!(
                    "{}: no event of thread {t} (its threads: {})",
                    a.file.display(),
                    if list.is_empty() { "none".to_string() } else { list.join(", ") }
                )
                .into())
            }
            _ => Ok(()),
        },
    }
}

fn hex(v: &[u8]) -> String {
    v.iter().map(|b| format!("{b:02x}")).collect()
}

fn text_line(r: &pmsim_traces::Record<'_>) -> String {
    let head = format!("{:>10} t{:<3}", r.index, r.tid);
    let body = match r.event {
        Event::Store { addr, size, value } | Event::NtStore { addr, size, value } => {
            let name = if matches!(r.event, Event::Store { .. }) { "store" } else { "ntstore" };
            match value {
                Some(v) => format!("{name:<12} {addr:#x} {size} = {}", hex(v)),
                None => format!("{name:<12} {addr:#x} {size}"),
            }
        }
        Event::Load { addr, size } => format!("{:<12} {addr:#x} {size}", "load"),
        Event::Flush { kind, line } => format!("{:<12} {line:#x}", format!("{kind:?}").to_lowercase()),
        Event::Fence { kind } => format!("{:<12}", format!("{kind:?}").to_lowercase()),
        Event::ThreadStart => "thread_start".into(),
        Event::ThreadEnd => "thread_end".into(),
        Event::RegionAdd { id, category, base, len, name } => {
            format!("{:<12} #{id} {} {base:#x}+{len} {name:?}", "region_add", category.name())
        }
        Event::RegionRemove { id } => format!("{:<12} #{id}", "region_remove"),
        Event::OpBegin { op, arg } => format!("{:<12} {} {arg}", "op_begin", op.name()),
        Event::OpEnd { op, result } => format!("{:<12} {} {result:#x}", "op_end", op.name()),
        Event::Marker { id, label } => format!("{:<12} #{id} {label:?}", "marker"),
    };
    format!("{head} {body}")
}

fn json_line(r: &pmsim_traces::Record<'_>) -> serde_json::Value {
    use serde_json::json;
    let kind = Event::KIND_NAMES[r.event.kind_index()];
    let mut v = json!({ "index": r.index, "tid": r.tid, "kind": kind });
    let o = v.as_object_mut().expect("object");
    let mut put = |k: &str, x: serde_json::Value| {
        o.insert(k.to_string(), x);
    };
    match r.event {
        Event::Store { addr, size, value } | Event::NtStore { addr, size, value } => {
            put("addr", addr.into());
            put("size", size.into());
            if let Some(v) = value {
                put("value", hex(v).into());
            }
        }
        Event::Load { addr, size } => {
            put("addr", addr.into());
            put("size", size.into());
        }
        Event::Flush { kind, line } => {
            put("insn", json!(kind));
            put("line", line.into());
        }
        Event::Fence { kind } => put("insn", json!(kind)),
        Event::ThreadStart | Event::ThreadEnd => {}
        Event::RegionAdd { id, category, base, len, name } => {
            put("id", id.into());
            put("category", json!(category));
            put("base", base.into());
            put("len", len.into());
            put("name", name.into());
        }
        Event::RegionRemove { id } => put("id", id.into()),
        Event::OpBegin { op, arg } => {
            put("op", op.name().into());
            put("arg", arg.into());
        }
        Event::OpEnd { op, result } => {
            put("op", op.name().into());
            put("result", result.into());
        }
        Event::Marker { id, label } => {
            put("id", id.into());
            put("label", label.into());
        }
    }
    v
}
