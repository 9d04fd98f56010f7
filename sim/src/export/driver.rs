//! The export driver: which events of a trace reach memory, when, and at
//! which exported address. Read [`Exporter::record`] top to bottom for what
//! happens to each kind of event; the rules are those of the simulator
//! (`crate::Simulator`), with the same cache model, so that a persist-mode
//! export holds exactly the PM writes `pmsim sim` counts.

use super::{ExportError, Mode, Options, Packet, PacketWriter, Source, Summary};
use crate::cache::{lines, CpuCache};
use pmsim_traces::{Category, Event, FlushKind, Record, RegionMap, TraceHeader, TraceReader};
use std::io::Read;

/// No line pending in a thread's write-combining buffer.
const NO_LINE: u64 = u64::MAX;

/// Per-thread state between events.
#[derive(Clone, Copy, Debug)]
struct ThreadState {
    /// Tick of the thread's latest flush or non-temporal packet since its
    /// previous fence: the next fence waits for it to complete.
    outstanding: Option<u64>,
    /// The line the thread's run of non-temporal stores is filling (the CPU's
    /// write-combining buffer, as in the simulator): written when the run
    /// moves to another line, at a fence or at the thread's end.
    nt_line: u64,
    /// Index of the non-temporal store that started filling `nt_line`.
    nt_index: u64,
}

impl Default for ThreadState {
    fn default() -> Self {
        ThreadState { outstanding: None, nt_line: NO_LINE, nt_index: 0 }
    }
}

/// Turns the events of one trace into packets for a [`PacketWriter`]. Memory
/// is bounded by the cache model and the thread and region tables, never by
/// the trace's length.
pub struct Exporter<W> {
    opts: Options,
    /// The trace's name, for error messages.
    trace: String,
    cache: CpuCache,
    regions: RegionMap,
    /// Categories of the regions the trace declared so far.
    declared: [bool; 4],
    /// Categories whose packets are kept (all when there is no filter).
    keep: [bool; 4],
    filter: bool,
    heap_base: u64,
    heap_size: u64,
    threads: Vec<ThreadState>,
    /// Whether the thread asked for with `--thread` appeared.
    thread_seen: bool,
    /// Earliest tick of the next packet.
    next_tick: u64,
    out: W,
    events: u64,
    writes: u64,
    reads: u64,
    by_source: [u64; 6],
    last_tick: u64,
    max_end: u64,
}

impl<W: PacketWriter> Exporter<W> {
    /// An exporter for a trace with this header; `trace` names it in errors.
    pub fn new(opts: Options, header: &TraceHeader, trace: &str, out: W) -> Self {
        let mut keep = [true; 4];
        if let Some(cats) = &opts.categories {
            keep = [false; 4];
            for &c in cats {
                keep[c as usize] = true;
            }
        }
        let mut ex = Exporter {
            trace: trace.to_string(),
            cache: CpuCache::new(&opts.cache),
            regions: RegionMap::new(&[]),
            declared: [false; 4],
            keep,
            filter: opts.categories.is_some(),
            heap_base: header.heap.base,
            heap_size: header.heap.size,
            threads: Vec::new(),
            thread_seen: false,
            next_tick: 0,
            out,
            events: 0,
            writes: 0,
            reads: 0,
            by_source: [0; 6],
            last_tick: 0,
            max_end: 0,
            opts,
        };
        for r in &header.regions {
            ex.regions.add(r.clone());
            ex.declared[r.category as usize] = true;
        }
        ex
    }

    /// Exports every event of `reader`; `progress` gets the trace bytes read
    /// after each block.
    pub fn run<R: Read>(
        &mut self,
        reader: &mut TraceReader<R>,
        mut progress: impl FnMut(u64),
    ) -> Result<(), ExportError> {
        while let Some(block) = reader.next_block()? {
            let mut failed = None;
            block.for_each(|rec| {
                if failed.is_none() {
                    if let Err(e) = self.record(rec) {
                        failed = Some(e);
                    }
                }
            })?;
            if let Some(e) = failed {
                return Err(e);
            }
            progress(reader.totals().bytes);
        }
        Ok(())
    }

    /// One event of the trace, in global order.
    pub fn record(&mut self, rec: &Record<'_>) -> Result<(), ExportError> {
        let (t, index) = (rec.tid as usize, rec.index);
        self.events += 1;
        if t >= self.threads.len() {
            self.threads.resize_with(t + 1, ThreadState::default);
        }
        self.thread_seen |= self.opts.thread == Some(rec.tid);
        match rec.event {
            // A store dirties its lines in the cache; a miss may evict a dirty
            // line, which is written to PM.
            Event::Store { addr, size, .. } => {
                self.touch(t, index, addr, size, true)?;
                if self.opts.mode == Mode::All {
                    self.pieces(t, index, addr, size, true, Source::Store)?;
                }
            }
            Event::Load { addr, size } => {
                self.touch(t, index, addr, size, false)?;
                if self.opts.mode == Mode::All {
                    self.pieces(t, index, addr, size, false, Source::Load)?;
                }
            }
            // A flush writes its line only if the cache holds it dirty; under
            // eADR flushes move nothing (the cache is persistent).
            Event::Flush { kind, line } => {
                let line = line & !63;
                if !self.opts.eadr && self.cache.flush(line, kind != FlushKind::Clwb) {
                    self.emit(t, index, line, 64, true, Source::Flush)?;
                }
            }
            // A non-temporal store bypasses the cache (a cached copy is
            // invalidated, its dirty bytes merge into the write) and fills the
            // thread's write-combining buffer, written a line at a time.
            Event::NtStore { addr, size, .. } => {
                for line in lines(addr, size) {
                    self.cache.flush(line, true);
                    let ts = &mut self.threads[t];
                    let prev = std::mem::replace(&mut ts.nt_line, line);
                    if prev != line {
                        let prev_index = std::mem::replace(&mut ts.nt_index, index);
                        if prev != NO_LINE {
                            self.emit(t, prev_index, prev, 64, true, Source::NtStore)?;
                        }
                    }
                }
            }
            // A fence drains the write-combining buffer, then waits for the
            // thread's writes: the next packet is issued no earlier than
            // `fence_ps` after the latest of them.
            Event::Fence { .. } => {
                self.drain_nt(t)?;
                if let Some(last) = self.threads[t].outstanding.take() {
                    self.next_tick = self.next_tick.max(last.saturating_add(self.opts.timing.fence_ps));
                }
            }
            Event::ThreadEnd => self.drain_nt(t)?,
            Event::RegionAdd { category, .. } => {
                self.regions.apply(&rec.event);
                self.declared[category as usize] = true;
            }
            Event::RegionRemove { .. } => {
                self.regions.apply(&rec.event);
            }
            Event::ThreadStart | Event::OpBegin { .. } | Event::OpEnd { .. } | Event::Marker { .. } => {}
        }
        Ok(())
    }

    /// Ends the export: the write-combining buffers are written (the end of
    /// the trace ends their runs), the filters are checked against what the
    /// trace held, and the writer is finished.
    pub fn finish(mut self) -> Result<(Summary, W), ExportError> {
        for t in 0..self.threads.len() {
            self.drain_nt(t)?;
        }
        if let Some(cats) = &self.opts.categories {
            let missing: Vec<&str> = cats.iter().filter(|c| !self.declared[**c as usize]).map(|c| c.name()).collect();
            if !missing.is_empty() {
                let have: Vec<&str> =
                    Category::ALL.iter().filter(|c| self.declared[**c as usize]).map(|c| c.name()).collect();
                let have = if have.is_empty() { "no regions at all".to_string() } else { have.join(", ") };
                return Err(ExportError::Input(format!(
                    "{}: the trace has no region of category {} (it has {have})",
                    self.trace,
                    missing.join(", ")
                )));
            }
        }
        if let (Some(t), false) = (self.opts.thread, self.thread_seen) {
            return Err(ExportError::Input(format!(
                "{}: the trace has no events of thread {t} (threads 0 to {})",
                self.trace,
                self.threads.len().saturating_sub(1)
            )));
        }
        self.out.finish()?;
        let summary = Summary {
            events: self.events,
            packets: self.writes + self.reads,
            writes: self.writes,
            reads: self.reads,
            by_source: Source::ALL.iter().map(|s| (s.name().to_string(), self.by_source[*s as usize])).collect(),
            last_tick: self.last_tick,
            max_end: self.max_end,
            dirty_lines_left: self.cache.dirty_lines(),
            out_bytes: 0,
        };
        Ok((summary, self.out))
    }

    /// Loads or stores the lines of `[addr, addr + size)` in the cache;
    /// evicted dirty lines are written to PM.
    #[inline]
    fn touch(&mut self, t: usize, index: u64, addr: u64, size: u32, write: bool) -> Result<(), ExportError> {
        for line in lines(addr, size) {
            if let Some(victim) = self.cache.access(line, write).writeback {
                self.emit(t, index, victim, 64, true, Source::Eviction)?;
            }
        }
        Ok(())
    }

    /// A store or load as packets, one per line it touches (`--mode all`).
    fn pieces(
        &mut self,
        t: usize,
        index: u64,
        addr: u64,
        size: u32,
        write: bool,
        src: Source,
    ) -> Result<(), ExportError> {
        let end = addr.saturating_add(size as u64);
        let mut a = addr;
        while a < end {
            let next = ((a | 63) + 1).min(end);
            self.emit(t, index, a, (next - a) as u32, write, src)?;
            a = next;
        }
        Ok(())
    }

    fn drain_nt(&mut self, t: usize) -> Result<(), ExportError> {
        let ts = &mut self.threads[t];
        let (line, index) = (std::mem::replace(&mut ts.nt_line, NO_LINE), ts.nt_index);
        if line != NO_LINE {
            self.emit(t, index, line, 64, true, Source::NtStore)?;
        }
        Ok(())
    }

    /// One packet, unless the thread or region filter drops it: timed, its
    /// address made heap-relative plus the base, and written.
    #[inline]
    fn emit(
        &mut self,
        t: usize,
        index: u64,
        addr: u64,
        size: u32,
        write: bool,
        source: Source,
    ) -> Result<(), ExportError> {
        if self.opts.thread.is_some_and(|want| want as usize != t) {
            return Ok(());
        }
        if self.filter && !self.regions.category(addr).is_some_and(|c| self.keep[c as usize]) {
            return Ok(());
        }
        let rel = addr.wrapping_sub(self.heap_base);
        let inside = addr >= self.heap_base && (self.heap_size == 0 || rel < self.heap_size);
        let out = rel.checked_add(self.opts.base).filter(|_| inside).ok_or_else(|| self.outside(t, index, addr))?;
        let tick = self.next_tick;
        self.next_tick = tick.saturating_add(self.opts.timing.packet_ps);
        if source.fenced() {
            self.threads[t].outstanding = Some(tick);
        }
        self.last_tick = tick;
        self.max_end = self.max_end.max(out.saturating_add(size as u64));
        let p = Packet { tick, write, addr: out, size, tid: t as u32, source, index };
        self.out.packet(&p)?;
        self.writes += write as u64;
        self.reads += !write as u64;
        self.by_source[source as usize] += 1;
        Ok(())
    }

    #[cold]
    fn outside(&self, t: usize, index: u64, addr: u64) -> ExportError {
        let problem = if addr < self.heap_base {
            format!("is below the heap base {:#x}", self.heap_base)
        } else if self.heap_size != 0 && addr - self.heap_base >= self.heap_size {
            format!("is outside the heap [{:#x}, {:#x})", self.heap_base, self.heap_base + self.heap_size)
        } else {
            format!("plus the base {:#x} passes 2^64", self.opts.base)
        };
        ExportError::Input(format!(
            "{}: event {index} (thread {t}): address {addr:#x} {problem} (exported addresses are heap-relative)",
            self.trace
        ))
    }
}
