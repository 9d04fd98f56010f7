//! Exporters: the memory traffic of a `.pmt` trace as input for cycle-level
//! memory simulators — gem5 packet traces ([`gem5`]), DRAMsim3 ([`dramsim3`])
//! and Ramulator 2 ([`ramulator`]) text traces — for users who want pmsim's
//! persist stream on a memory model they already trust.
//!
//! One driver ([`Exporter`]) decides which events reach memory, with the
//! simulator's own cache model ([`crate::cache::CpuCache`]) for dirtiness and
//! evictions and the trace's region map for `--region`; it times the packets
//! (one issue stream, fences wait for the fencing thread's writes) and hands
//! each [`Packet`] to a [`PacketWriter`], one per target format. The rules, and
//! each target's file format, are in `FORMAT.md` beside this file.

pub mod dramsim3;
mod driver;
pub mod gem5;
pub mod ramulator;

pub use driver::Exporter;

use crate::config::CacheConfig;
use pmsim_traces::{Category, TraceError, TraceReader};
use serde::Serialize;
use std::fmt;
use std::io::{self, BufWriter, Read, Write};
use std::path::Path;
use std::str::FromStr;

/// The target simulator's file format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// gem5's packet trace (protobuf, `src/proto/packet.proto`), read by its TrafficGen.
    Gem5,
    /// DRAMsim3's trace: `0x<addr> READ|WRITE <cycle>` per line.
    Dramsim3,
    /// Ramulator 2's LoadStoreTrace: `LD|ST 0x<addr>` per line.
    Ramulator,
}

impl Format {
    pub const ALL: [Format; 3] = [Format::Gem5, Format::Dramsim3, Format::Ramulator];

    pub fn name(self) -> &'static str {
        match self {
            Format::Gem5 => "gem5",
            Format::Dramsim3 => "dramsim3",
            Format::Ramulator => "ramulator",
        }
    }
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Format, String> {
        Format::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| format!("unknown export format {s:?} (expected gem5, dramsim3 or ramulator)"))
    }
}

/// Which events become packets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// What reaches PM: write-backs of dirty lines by flushes, evictions of
    /// dirty lines, lines of non-temporal stores.
    #[default]
    Persist,
    /// The persist stream plus every store (write) and load (read), for users
    /// who model the caches themselves.
    All,
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "persist" => Ok(Mode::Persist),
            "all" => Ok(Mode::All),
            _ => Err(format!("unknown export mode {s:?} (expected persist or all)")),
        }
    }
}

/// Why a packet exists; it travels in gem5's `pkt_id` (see [`Packet::pkt_id`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Source {
    /// A flush found its line dirty and wrote it back.
    Flush = 1,
    /// A store or load evicted a dirty line.
    Eviction = 2,
    /// A line of non-temporal stores left the write-combining buffer.
    NtStore = 3,
    /// A store (`--mode all`).
    Store = 4,
    /// A load (`--mode all`).
    Load = 5,
}

impl Source {
    pub const ALL: [Source; 5] = [Source::Flush, Source::Eviction, Source::NtStore, Source::Store, Source::Load];

    pub fn name(self) -> &'static str {
        match self {
            Source::Flush => "flush",
            Source::Eviction => "eviction",
            Source::NtStore => "ntstore",
            Source::Store => "store",
            Source::Load => "load",
        }
    }

    pub fn from_code(c: u8) -> Option<Source> {
        Source::ALL.into_iter().find(|s| *s as u8 == c)
    }

    /// Whether the thread's next fence waits for this packet: flushes and
    /// non-temporal stores are what a fence orders; evictions happen behind the
    /// program's back, and stores and loads end in the cache.
    pub fn fenced(self) -> bool {
        matches!(self, Source::Flush | Source::NtStore)
    }
}

/// Bits of [`Packet::pkt_id`] holding the trace event index.
pub const PKT_ID_INDEX_BITS: u32 = 40;

/// One memory request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet {
    /// Issue time in ticks of 1 ps (see [`Timing`]).
    pub tick: u64,
    pub write: bool,
    /// Address as exported: heap-relative plus [`Options::base`].
    pub addr: u64,
    pub size: u32,
    pub tid: u32,
    pub source: Source,
    /// Global index of the trace event that caused the packet.
    pub index: u64,
}

impl Packet {
    /// `tid << 48 | source << 40 | index mod 2^40`: enough to find the event
    /// in the trace again (`pmsim trace dump`).
    pub fn pkt_id(&self) -> u64 {
        (self.tid as u64) << 48
            | (self.source as u64) << PKT_ID_INDEX_BITS
            | (self.index & ((1 << PKT_ID_INDEX_BITS) - 1))
    }
}

/// How packets are spaced in time. The trace has no clock; its global order
/// is the issue order, one packet every `packet_ps`; a fence makes the next
/// packet wait until `fence_ps` after the fencing thread's latest flush or
/// non-temporal write (the time a write is assumed to take to complete).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Timing {
    pub packet_ps: u64,
    pub fence_ps: u64,
}

impl Default for Timing {
    /// 1 ns between packets (a flush every 2–3 cycles of a 2–3 GHz core);
    /// 100 ns for a fence to see its writes complete (estimate: a write's trip
    /// to the memory controller's write queue).
    fn default() -> Self {
        Timing { packet_ps: 1_000, fence_ps: 100_000 }
    }
}

/// What to export and how.
#[derive(Clone, Debug)]
pub struct Options {
    pub mode: Mode,
    /// Keep only packets to regions of these categories (`None`: every packet).
    pub categories: Option<Vec<Category>>,
    /// Keep only packets of this thread (the cache still sees every thread).
    pub thread: Option<u32>,
    /// The simulator's cache model (`sim/optane.toml`).
    pub cache: CacheConfig,
    /// eADR: flushes move nothing; only evictions and non-temporal stores reach PM.
    pub eadr: bool,
    pub timing: Timing,
    /// Exported address of the heap's first byte.
    pub base: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            mode: Mode::Persist,
            categories: None,
            thread: None,
            cache: CacheConfig::default(),
            eadr: false,
            timing: Timing::default(),
            base: 0,
        }
    }
}

/// Receives the packets in issue order; one implementation per format.
pub trait PacketWriter {
    fn packet(&mut self, p: &Packet) -> io::Result<()>;
    /// Ends the file (flushes buffers); called once after the last packet.
    fn finish(&mut self) -> io::Result<()>;
}

/// What an export did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Trace events read.
    pub events: u64,
    pub packets: u64,
    pub writes: u64,
    pub reads: u64,
    /// Packets per [`Source`], by name.
    pub by_source: Vec<(String, u64)>,
    /// Tick of the last packet (0 if none).
    pub last_tick: u64,
    /// One past the highest exported byte address (0 if no packet).
    pub max_end: u64,
    /// Lines still dirty in the cache at the end: they never reached memory
    /// within the trace, so no packet carries them.
    pub dirty_lines_left: u64,
    /// Bytes of the output file.
    pub out_bytes: u64,
}

/// Why an export failed; displays as one line for the user.
#[derive(Debug)]
pub enum ExportError {
    /// The trace cannot be read, or does not hold what was asked for (the
    /// message names the trace file and the event or region concerned).
    Input(String),
    /// The output cannot be written.
    Write(io::Error),
}

impl fmt::Display for ExportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExportError::Input(s) => f.write_str(s),
            ExportError::Write(e) => write!(f, "cannot write the export: {e}"),
        }
    }
}

impl std::error::Error for ExportError {}

impl From<TraceError> for ExportError {
    fn from(e: TraceError) -> Self {
        ExportError::Input(e.to_string())
    }
}

impl From<io::Error> for ExportError {
    fn from(e: io::Error) -> Self {
        ExportError::Write(e)
    }
}

/// Counts the bytes that pass, for the summary.
struct Counting<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Output choices that depend on the format.
#[derive(Clone, Debug, Default)]
pub struct FileOptions {
    /// gem5 only: gzip the packet trace (gem5 recognises `1f 8b`).
    pub gzip: bool,
    /// DRAMsim3 only: the memory clock period in ps that turns ticks into cycles.
    pub tck_ps: Option<u64>,
    /// gem5 only: the header's `obj_id`.
    pub obj_id: String,
}

/// Exports the trace read by `reader` to the file `out` in `format`: written
/// beside `out` and renamed into place only when complete, so a failed export
/// leaves no partial file. `progress` is called after each block with the
/// trace bytes read so far.
pub fn export_file<R: Read>(
    reader: &mut TraceReader<R>,
    opts: &Options,
    format: Format,
    file_opts: &FileOptions,
    out: &Path,
    progress: impl FnMut(u64),
) -> Result<Summary, ExportError> {
    let (summary, staged) = export_staged(reader, opts, format, file_opts, out, progress)?;
    staged.commit().map_err(|e| ExportError::Input(format!("{}: cannot write: {e}", out.display())))?;
    Ok(summary)
}

/// [`export_file`] with the file written under a temporary name, not yet in
/// place: the caller commits it with its other outputs once they are all
/// written.
pub fn export_staged<R: Read>(
    reader: &mut TraceReader<R>,
    opts: &Options,
    format: Format,
    file_opts: &FileOptions,
    out: &Path,
    progress: impl FnMut(u64),
) -> Result<(Summary, pmsim_traces::output::Staged), ExportError> {
    let named = |e: io::Error| ExportError::Input(format!("{}: cannot write: {e}", out.display()));
    let tck = file_opts.tck_ps.unwrap_or(dramsim3::DEFAULT_TCK_PS);
    if format == Format::Dramsim3 && tck == 0 {
        return Err(ExportError::Input("the memory clock period (--tck-ps) must be at least 1 ps".into()));
    }
    // Whether `out` may be replaced was the command's decision (output::Policy).
    let mut output = pmsim_traces::output::Output::create(out, true)
        .map_err(|e| ExportError::Input(format!("{}: cannot create: {e}", out.display())))?;
    let file = output.take_file();
    let sink = Counting { inner: BufWriter::with_capacity(1 << 20, file), bytes: 0 };
    let result = match format {
        Format::Gem5 if file_opts.gzip => {
            let gz = flate2::write::GzEncoder::new(sink, flate2::Compression::default());
            let w = gem5::PacketTraceWriter::new(gz, &file_opts.obj_id).map_err(named)?;
            run(reader, opts, w, progress).and_then(|(s, w)| Ok((s, w.into_inner().finish()?)))
        }
        Format::Gem5 => {
            let w = gem5::PacketTraceWriter::new(sink, &file_opts.obj_id).map_err(named)?;
            run(reader, opts, w, progress).map(|(s, w)| (s, w.into_inner()))
        }
        Format::Dramsim3 => {
            run(reader, opts, dramsim3::Writer::new(sink, tck), progress).map(|(s, w)| (s, w.into_inner()))
        }
        Format::Ramulator => {
            run(reader, opts, ramulator::Writer::new(sink), progress).map(|(s, w)| (s, w.into_inner()))
        }
    };
    let (mut summary, mut sink) = result.map_err(|e| match e {
        ExportError::Write(e) => named(e),
        e => e,
    })?;
    sink.flush().map_err(named)?;
    summary.out_bytes = sink.bytes;
    // Not synced: an export is derived data, made again from the trace if a
    // crash loses it, and a sync of gigabytes would double the export's time.
    let file = sink.inner.into_inner().map_err(|e| named(e.into_error()))?;
    let staged = output.finish_file(file, false).map_err(named)?;
    Ok((summary, staged))
}

/// Runs the exporter over the whole trace; returns its summary and the writer.
fn run<R: Read, W: PacketWriter>(
    reader: &mut TraceReader<R>,
    opts: &Options,
    w: W,
    progress: impl FnMut(u64),
) -> Result<(Summary, W), ExportError> {
    let mut ex = Exporter::new(opts.clone(), reader.header(), reader.path(), w);
    ex.run(reader, progress)?;
    ex.finish()
}
