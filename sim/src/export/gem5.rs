//! gem5: the packet trace its TrafficGen replays (`src/proto/packet.proto`,
//! framed as by `src/proto/protoio.cc`), a replay script for a `NULL` build,
//! and a runner that reads back gem5's `stats.txt`.
//!
//! The encoder is written here (a varint, a tag per field) rather than
//! generated: the two messages have seven scalar fields between them, and
//! gem5's own Python helpers are not a dependency pmsim can have.

use super::{ExportError, Packet, PacketWriter, Source};
use pmsim_traces::output::OutputDir;
use pmsim_traces::varint;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The file's first 4 bytes: gem5's magic number `0x356d6567` little-endian, "gem5".
pub const MAGIC: [u8; 4] = *b"gem5";
/// Ticks per second gem5 requires of a packet trace (1 tick = 1 ps).
pub const TICK_FREQ: u64 = 1_000_000_000_000;
/// gem5's `MemCmd` values stable across versions.
pub const CMD_READ_REQ: u32 = 1;
pub const CMD_WRITE_REQ: u32 = 4;

const WIRE_VARINT: u64 = 0;
const WIRE_LEN: u64 = 2;

fn put_tag(buf: &mut Vec<u8>, field: u64, wire: u64) {
    varint::put(buf, field << 3 | wire);
}

fn put_uint(buf: &mut Vec<u8>, field: u64, v: u64) {
    put_tag(buf, field, WIRE_VARINT);
    varint::put(buf, v);
}

fn put_bytes(buf: &mut Vec<u8>, field: u64, b: &[u8]) {
    put_tag(buf, field, WIRE_LEN);
    varint::put(buf, b.len() as u64);
    buf.extend_from_slice(b);
}

/// Encodes a `PacketHeader`: `obj_id` (1), `tick_freq` (3) and one
/// `id_strings` entry (4) per [`Source`], naming the source codes of `pkt_id`.
pub fn encode_header(obj_id: &str) -> Vec<u8> {
    let mut m = Vec::new();
    put_bytes(&mut m, 1, obj_id.as_bytes());
    put_uint(&mut m, 3, TICK_FREQ);
    let mut entry = Vec::new();
    for s in Source::ALL {
        entry.clear();
        put_uint(&mut entry, 1, s as u64);
        put_bytes(&mut entry, 2, s.name().as_bytes());
        put_bytes(&mut m, 4, &entry);
    }
    m
}

/// Encodes a `Packet`: `tick` (1), `cmd` (2), `addr` (3), `size` (4), `pkt_id` (6).
#[inline]
pub fn encode_packet(buf: &mut Vec<u8>, p: &Packet) {
    put_uint(buf, 1, p.tick);
    put_uint(buf, 2, if p.write { CMD_WRITE_REQ } else { CMD_READ_REQ } as u64);
    put_uint(buf, 3, p.addr);
    put_uint(buf, 4, p.size as u64);
    put_uint(buf, 6, p.pkt_id());
}

/// Writes a gem5 packet trace: magic, then each message preceded by its
/// length as a varint.
pub struct PacketTraceWriter<W: Write> {
    out: W,
    buf: Vec<u8>,
}

impl<W: Write> PacketTraceWriter<W> {
    /// Writes the magic and the header.
    pub fn new(mut out: W, obj_id: &str) -> io::Result<Self> {
        out.write_all(&MAGIC)?;
        let h = encode_header(obj_id);
        let mut buf = Vec::with_capacity(h.len() + 10);
        varint::put(&mut buf, h.len() as u64);
        buf.extend_from_slice(&h);
        out.write_all(&buf)?;
        Ok(PacketTraceWriter { out, buf })
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

/// A `Packet` message is at most 41 bytes (five one-byte tags; `tick`, `addr`
/// and `pkt_id` at most 10 bytes each, `cmd` 1, `size` 5), so its length
/// always fits the one-byte varint written in front of it.
const MAX_PACKET_MSG: usize = 127;

impl<W: Write> PacketWriter for PacketTraceWriter<W> {
    #[inline]
    fn packet(&mut self, p: &Packet) -> io::Result<()> {
        self.buf.clear();
        self.buf.push(0);
        encode_packet(&mut self.buf, p);
        let len = self.buf.len() - 1;
        debug_assert!(len <= MAX_PACKET_MSG);
        self.buf[0] = len as u8;
        self.out.write_all(&self.buf)
    }

    fn finish(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// The memory behind gem5's controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    /// `NVM_2400_1x64`, gem5's NVM interface (the point of the export).
    Nvm,
    /// `DDR4_2400_8x8`, for comparison.
    Dram,
}

impl std::str::FromStr for Memory {
    type Err = String;
    fn from_str(s: &str) -> Result<Memory, String> {
        match s {
            "nvm" => Ok(Memory::Nvm),
            "dram" => Ok(Memory::Dram),
            _ => Err(format!("unknown gem5 memory {s:?} (expected nvm or dram)")),
        }
    }
}

/// What the replay script needs to know.
#[derive(Clone, Debug)]
pub struct Script {
    /// The packet trace, absolute (the script links to it from gem5's output
    /// directory, where it writes the TrafficGen config).
    pub trace: PathBuf,
    /// Length of the TRACE state in ticks: the last packet's tick plus a drain margin.
    pub duration: u64,
    pub memory: Memory,
    /// The memory range `[0, size)`; exported addresses fall inside it.
    pub size: u64,
}

impl Script {
    /// A range that holds every exported address: the next power of two at
    /// or above `end` (the heap's end or the highest address written), at
    /// least 1 MiB.
    pub fn range_size(end: u64) -> u64 {
        end.max(1 << 20).checked_next_power_of_two().unwrap_or(1 << 63)
    }

    /// The Python script for `build/NULL/gem5.opt SCRIPT`: a TrafficGen whose
    /// config file plays the trace in state 0 and exits in state 1, on a
    /// system bus to one `MemCtrl`, in timing mode.
    pub fn render(&self) -> String {
        let (iface, what) = match self.memory {
            Memory::Nvm => ("NVM_2400_1x64", "gem5's NVM interface"),
            Memory::Dram => ("DDR4_2400_8x8", "DDR4 DRAM, for comparison"),
        };
        let trace = py_str(&self.trace.to_string_lossy());
        format!(
            r#"# gem5 replay of a pmsim export: a TrafficGen plays the packet trace into one
# memory controller ({what}).
# Written by `pmsim export` for gem5 v24 (m5.objects, a NULL build); it has not
# been run against a real gem5 where it was made.
#
#     build/NULL/gem5.opt [-d OUTDIR] THIS_SCRIPT
#
# Ticks are picoseconds. The TRACE state lasts until the last packet's tick plus
# a drain margin; then the EXIT state ends the simulation and gem5 writes
# OUTDIR/stats.txt (system.mem_ctrl.* for the controller and its interface,
# system.tgen.* for the generator's view of latency).
import os

import m5
from m5.objects import *

TRACE = {trace}
DURATION = {duration}
MEM_SIZE = {size}

# The TrafficGen config names the trace by a whitespace-free link beside it
# (gem5 reads the config word by word and resolves names against its folder).
cfg = os.path.join(m5.options.outdir, "pmsim-tgen.cfg")
link = os.path.join(m5.options.outdir, "pmsim-trace")
if os.path.lexists(link):
    os.remove(link)
os.symlink(TRACE, link)
with open(cfg, "w") as f:
    f.write("STATE 0 %d TRACE pmsim-trace 0\n" % DURATION)
    f.write("STATE 1 0 EXIT\n")
    f.write("INIT 0\n")
    f.write("TRANSITION 0 1 1\n")
    f.write("TRANSITION 1 1 1\n")

system = System(mem_mode="timing", mem_ranges=[AddrRange(start=0, size=MEM_SIZE)])
system.clk_domain = SrcClockDomain(clock="2GHz", voltage_domain=VoltageDomain())
system.membus = SystemXBar()
system.system_port = system.membus.cpu_side_ports
system.tgen = TrafficGen(config_file=cfg)
system.tgen.port = system.membus.cpu_side_ports
system.mem_ctrl = MemCtrl(dram={iface}(range=system.mem_ranges[0]))
system.mem_ctrl.port = system.membus.mem_side_ports

root = Root(full_system=False, system=system)
m5.instantiate()
event = m5.simulate()
print(f"pmsim-replay: exit at tick {{m5.curTick()}}: {{event.getCause()}}")
"#,
            duration = self.duration,
            size = self.size,
        )
    }
}

/// A Python string literal of `s`.
fn py_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The statistics of the last dump in a gem5 `stats.txt` whose value is a
/// plain number (vectors' `::` entries and distributions are skipped).
pub fn parse_stats(text: &str) -> Vec<(String, f64)> {
    let last = text.rsplit("Begin Simulation Statistics").next().unwrap_or("");
    last.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let name = it.next()?;
            let value: f64 = it.next()?.parse().ok().filter(|v: &f64| v.is_finite())?;
            (!name.contains("::")).then(|| (name.to_string(), value))
        })
        .collect()
}

/// The statistics `pmsim export --run-gem5` prints, in order (what a run
/// produced of them: names move between gem5 versions).
pub const KEY_STATS: [&str; 14] = [
    "simTicks",
    "system.tgen.numPackets",
    "system.tgen.avgWriteLatency",
    "system.tgen.avgReadLatency",
    "system.tgen.retryTicks",
    "system.mem_ctrl.writeReqs",
    "system.mem_ctrl.readReqs",
    "system.mem_ctrl.mergedWrBursts",
    "system.mem_ctrl.avgWrQLen",
    "system.mem_ctrl.numWrRetry",
    "system.mem_ctrl.dram.bytesWritten",
    "system.mem_ctrl.dram.avgWrBW",
    "system.mem_ctrl.dram.busUtilWrite",
    "system.mem_ctrl.dram.avgMemAccLat",
];

/// What a gem5 run left.
#[derive(Clone, Debug)]
pub struct Gem5Run {
    pub out_dir: PathBuf,
    /// `simTicks` of the last dump.
    pub sim_ticks: Option<f64>,
    /// Every numeric statistic under `system.` of the last dump, plus `simTicks`.
    pub stats: Vec<(String, f64)>,
    /// gem5 said it could not replay the whole trace within the state's duration.
    pub incomplete: bool,
}

/// Runs `gem5 -d OUT_DIR SCRIPT` with `out` as OUT_DIR (gem5's output going
/// to its `gem5.log`), reads its `stats.txt`, and renames the directory into
/// place. A gem5 that fails leaves nothing: its log's last lines go into the
/// error, and an earlier OUT_DIR stays as it was.
pub fn run(gem5: &Path, script: &Path, out: OutputDir) -> Result<Gem5Run, ExportError> {
    let (r, staged) = run_staged(gem5, script, out, None)?;
    let out_dir = r.out_dir.clone();
    staged.commit().map_err(|e| ExportError::Input(format!("{}: cannot rename into place: {e}", out_dir.display())))?;
    Ok(r)
}

/// [`run`] with the output directory left under its temporary name, to be
/// committed with the command's other outputs. `trace`: where the packet
/// trace will be once committed (gem5 ran on a script that names it under
/// its temporary name): the directory's link to the trace is made to point
/// there.
pub fn run_staged(
    gem5: &Path,
    script: &Path,
    out: OutputDir,
    trace: Option<&Path>,
) -> Result<(Gem5Run, pmsim_traces::output::Staged), ExportError> {
    let fail = |what: String| ExportError::Input(what);
    let dir = out.tmp_path().to_path_buf();
    let log_path = dir.join("gem5.log");
    let log =
        std::fs::File::create(&log_path).map_err(|e| fail(format!("{}: cannot create: {e}", log_path.display())))?;
    let log2 = log.try_clone().map_err(|e| fail(format!("{}: {e}", log_path.display())))?;
    let status = pmsim_traces::children::status(
        Command::new(gem5).arg("-d").arg(&dir).arg(script).stdin(std::process::Stdio::null()).stdout(log).stderr(log2),
    )
    .map_err(|e| fail(format!("GEM5={}: cannot run: {e}", gem5.display())))?;
    let log_text = std::fs::read_to_string(&log_path).unwrap_or_default();
    if !status.success() {
        let tail: Vec<&str> = log_text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        return Err(fail(format!(
            "GEM5={}: gem5 failed ({status}); the last lines of its gem5.log: {}",
            gem5.display(),
            tail[tail.len().saturating_sub(3)..].join(" | ")
        )));
    }
    let stats_path = dir.join("stats.txt");
    let text = std::fs::read_to_string(&stats_path)
        .map_err(|e| fail(format!("gem5 wrote no statistics ({}: {e})", out.path().join("stats.txt").display())))?;
    let stats: Vec<(String, f64)> =
        parse_stats(&text).into_iter().filter(|(n, _)| n == "simTicks" || n.starts_with("system.")).collect();
    if stats.is_empty() {
        return Err(fail(format!("{}: no statistics in gem5's stats.txt", out.path().display())));
    }
    let incomplete = log_text.contains("unable to replay the entire trace");
    let out_dir = out.path().to_path_buf();
    if let Some(t) = trace {
        let link = dir.join("pmsim-trace");
        if std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()) {
            std::fs::remove_file(&link)
                .and_then(|_| std::os::unix::fs::symlink(t, &link))
                .map_err(|e| fail(format!("{}: {e}", out_dir.join("pmsim-trace").display())))?;
        }
    }
    let sim_ticks = stats.iter().find(|(n, _)| n == "simTicks").map(|s| s.1);
    Ok((Gem5Run { out_dir, sim_ticks, stats, incomplete }, out.into_staged()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_of_the_last_dump_only_scalars() {
        let text = "---------- Begin Simulation Statistics ----------\nsimTicks 5 # t\n\
                    ---------- Begin Simulation Statistics ----------\nsimTicks 7 # t (Tick)\n\
                    system.mem_ctrl.dram.bytesWritten 640 # b\nsystem.x::total 3 # v\nsystem.y nan # n\n\
                    ---------- End Simulation Statistics   ----------\n";
        let s = parse_stats(text);
        assert_eq!(s[0], ("simTicks".to_string(), 7.0));
        assert_eq!(s[1], ("system.mem_ctrl.dram.bytesWritten".to_string(), 640.0));
        assert!(s.iter().all(|(n, _)| !n.contains("::")));
    }

    #[test]
    fn python_strings_are_escaped() {
        assert_eq!(py_str(r#"/a "b"\c"#), r#""/a \"b\"\\c""#);
    }

    #[test]
    fn range_covers_the_end() {
        assert_eq!(Script::range_size(0), 1 << 20);
        assert_eq!(Script::range_size(69206016), 1 << 27);
        assert_eq!(Script::range_size(1 << 27), 1 << 27);
    }
}
