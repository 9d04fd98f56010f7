//! The streaming trace writer: events in, blocks out, memory bounded by one block.

use crate::encode::Encoder;
use crate::event::Event;
use crate::format::*;
use crate::header::TraceHeader;
use crate::output::{Output, Staged};
use crate::sink::EventSink;
use crate::sites::{encode_site, Site};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// How to write a trace.
#[derive(Clone, Debug)]
pub struct WriterOptions {
    /// Record the value bytes of every store (needed for crash states).
    pub values: bool,
    /// Compress blocks with zstd at this level.
    pub zstd_level: Option<i32>,
    /// Raw payload bytes at which a block is cut.
    pub block_size: usize,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions { values: false, zstd_level: None, block_size: DEFAULT_BLOCK_SIZE }
    }
}

/// Counts of what a writer wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteStats {
    pub events: u64,
    pub blocks: u64,
    /// Bytes written, preamble and end block included.
    pub bytes: u64,
}

impl WriteStats {
    pub fn bytes_per_event(&self) -> f64 {
        if self.events == 0 {
            0.0
        } else {
            self.bytes as f64 / self.events as f64
        }
    }
}

/// Writes a trace to any `Write`. Call [`TraceWriter::finish`] at the end: a
/// trace without its end block reads as truncated.
pub struct TraceWriter<W: Write> {
    out: W,
    enc: Encoder,
    buf: Vec<u8>,
    zbuf: Vec<u8>,
    compressor: Option<zstd::bulk::Compressor<'static>>,
    block_events: u32,
    block_size: usize,
    stats: WriteStats,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the preamble. `header.values` is set from `opts.values`.
    pub fn new(mut out: W, header: &TraceHeader, opts: &WriterOptions) -> io::Result<Self> {
        let mut header = header.clone();
        header.values = opts.values;
        let json = serde_json::to_vec(&header).map_err(io::Error::other)?;
        if json.len() > MAX_LEN {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "trace header exceeds 16 MiB"));
        }
        let mut pre = Vec::with_capacity(20 + json.len());
        pre.extend_from_slice(&MAGIC);
        pre.extend_from_slice(&VERSION.to_le_bytes());
        pre.extend_from_slice(&(if opts.values { FLAG_VALUES } else { 0 }).to_le_bytes());
        pre.extend_from_slice(&(json.len() as u32).to_le_bytes());
        pre.extend_from_slice(&json);
        let crc = crc32fast::hash(&pre);
        pre.extend_from_slice(&crc.to_le_bytes());
        out.write_all(&pre)?;
        let compressor = match opts.zstd_level {
            Some(level) => Some(zstd::bulk::Compressor::new(level)?),
            None => None,
        };
        let block_size = opts.block_size.clamp(64, MAX_LEN / 2);
        Ok(TraceWriter {
            out,
            enc: Encoder::new(opts.values),
            buf: Vec::with_capacity(block_size + 256),
            zbuf: Vec::new(),
            compressor,
            block_events: 0,
            block_size,
            stats: WriteStats { bytes: pre.len() as u64, ..WriteStats::default() },
        })
    }

    /// Appends one event of thread `tid` (a flush or fence at the unknown site 0).
    #[inline]
    pub fn write(&mut self, tid: u32, ev: &Event<'_>) -> io::Result<()> {
        self.write_at(tid, 0, ev)
    }

    /// Appends one event of thread `tid`; a flush or fence is attributed to
    /// code site `site` (defined with [`TraceWriter::define_site`], 0 for
    /// unknown), other events ignore it.
    #[inline]
    pub fn write_at(&mut self, tid: u32, site: u32, ev: &Event<'_>) -> io::Result<()> {
        let mark = self.buf.len();
        if let Err(e) = self.enc.encode(&mut self.buf, tid, site, ev) {
            self.buf.truncate(mark);
            return Err(io::Error::new(io::ErrorKind::InvalidInput, e));
        }
        if self.buf.len() > MAX_LEN {
            // A block the reader would refuse: end the block before this event (the
            // encoder restarts with the new one), and refuse an event no block holds.
            self.buf.truncate(mark);
            if mark == 0 {
                self.enc.reset();
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "event larger than a block (16 MiB)"));
            }
            self.cut_block()?;
            return self.write_at(tid, site, ev);
        }
        self.block_events += 1;
        if self.buf.len() >= self.block_size || self.block_events == u32::MAX {
            self.cut_block()?;
        }
        Ok(())
    }

    /// Defines code site `site.id` (at least 1): written at once as a
    /// site-table block, so it precedes the data block being filled, the first
    /// that can name it.
    pub fn define_site(&mut self, site: &Site) -> io::Result<()> {
        if site.id == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "site id 0 is reserved for unknown sites"));
        }
        let mut payload = Vec::with_capacity(16 + site.file.len() + site.function.len());
        encode_site(&mut payload, site);
        if payload.len() > MAX_LEN {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "site definition larger than a block (16 MiB)"));
        }
        write_block(&mut self.out, CODEC_SITES, 0, payload.len(), &payload)?;
        self.stats.bytes += (BLOCK_HEADER_LEN + payload.len()) as u64;
        Ok(())
    }

    /// Counts so far (the current block's events included).
    pub fn stats(&self) -> WriteStats {
        WriteStats { events: self.stats.events + self.block_events as u64, ..self.stats }
    }

    fn cut_block(&mut self) -> io::Result<()> {
        if self.block_events == 0 {
            return Ok(());
        }
        let (codec, stored): (u8, &[u8]) = match &mut self.compressor {
            Some(c) => {
                self.zbuf.clear();
                self.zbuf.reserve(zstd::zstd_safe::compress_bound(self.buf.len()));
                c.compress_to_buffer(&self.buf, &mut self.zbuf)?;
                if self.zbuf.len() < self.buf.len() {
                    (CODEC_ZSTD, &self.zbuf)
                } else {
                    (CODEC_RAW, &self.buf)
                }
            }
            None => (CODEC_RAW, &self.buf),
        };
        write_block(&mut self.out, codec, self.block_events, self.buf.len(), stored)?;
        self.stats.bytes += (BLOCK_HEADER_LEN + stored.len()) as u64;
        self.stats.events += self.block_events as u64;
        self.stats.blocks += 1;
        self.block_events = 0;
        self.buf.clear();
        self.enc.reset();
        Ok(())
    }

    /// Writes the last block and the end block; returns the output and the counts.
    pub fn finish(mut self) -> io::Result<(W, WriteStats)> {
        self.cut_block()?;
        let mut end = [0u8; 16];
        end[..8].copy_from_slice(&self.stats.events.to_le_bytes());
        end[8..].copy_from_slice(&self.stats.blocks.to_le_bytes());
        write_block(&mut self.out, CODEC_END, 0, 16, &end)?;
        self.stats.bytes += (BLOCK_HEADER_LEN + 16) as u64;
        self.out.flush()?;
        Ok((self.out, self.stats))
    }
}

fn write_block(out: &mut impl Write, codec: u8, events: u32, raw_len: usize, stored: &[u8]) -> io::Result<()> {
    let mut h = [0u8; BLOCK_HEADER_LEN];
    h[..4].copy_from_slice(&BLOCK_MARKER);
    h[4] = codec;
    h[8..12].copy_from_slice(&events.to_le_bytes());
    h[12..16].copy_from_slice(&(raw_len as u32).to_le_bytes());
    h[16..20].copy_from_slice(&(stored.len() as u32).to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&h[..20]);
    crc.update(stored);
    h[20..24].copy_from_slice(&crc.finalize().to_le_bytes());
    out.write_all(&h)?;
    out.write_all(stored)
}

impl<W: Write + Send> EventSink for TraceWriter<W> {
    #[inline]
    fn event(&mut self, tid: u32, ev: &Event<'_>) -> io::Result<()> {
        self.write(tid, ev)
    }

    #[inline]
    fn event_at(&mut self, tid: u32, site: u32, ev: &Event<'_>) -> io::Result<()> {
        self.write_at(tid, site, ev)
    }

    fn define_site(&mut self, site: &Site) -> io::Result<()> {
        TraceWriter::define_site(self, site)
    }
}

/// A trace being written to a file. It is written beside its destination and
/// renamed into place by [`TraceFile::finish`] (an [`Output`]), so an existing
/// file of that name is never clobbered by a half-written trace, and a trace
/// dropped unfinished leaves nothing. Whether the destination may be replaced
/// is the command's decision ([`crate::output::Policy`]), taken before.
pub struct TraceFile {
    writer: Option<TraceWriter<BufWriter<File>>>,
    out: Option<Output>,
}

impl TraceFile {
    pub fn create(path: impl AsRef<Path>, header: &TraceHeader, opts: &WriterOptions) -> io::Result<Self> {
        let path = path.as_ref();
        let mut out = Output::create(path, true)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: cannot create: {e}", path.display())))?;
        let file = out.take_file();
        let writer = TraceWriter::new(BufWriter::with_capacity(1 << 20, file), header, opts)?;
        Ok(TraceFile { writer: Some(writer), out: Some(out) })
    }

    #[inline]
    pub fn write(&mut self, tid: u32, ev: &Event<'_>) -> io::Result<()> {
        self.write_at(tid, 0, ev)
    }

    /// See [`TraceWriter::write_at`].
    #[inline]
    pub fn write_at(&mut self, tid: u32, site: u32, ev: &Event<'_>) -> io::Result<()> {
        self.writer.as_mut().expect("trace file already finished").write_at(tid, site, ev)
    }

    /// See [`TraceWriter::define_site`].
    pub fn define_site(&mut self, site: &Site) -> io::Result<()> {
        self.writer.as_mut().expect("trace file already finished").define_site(site)
    }

    pub fn stats(&self) -> WriteStats {
        self.writer.as_ref().map(TraceWriter::stats).unwrap_or_default()
    }

    /// Ends the trace, syncs it and moves it to its destination.
    pub fn finish(self) -> io::Result<WriteStats> {
        let (stats, staged) = self.finish_staged()?;
        let path = staged.path().display().to_string();
        staged.commit().map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
        Ok(stats)
    }

    /// Ends the trace and syncs it, not yet in place: the caller commits it
    /// with the command's other outputs once everything succeeded.
    pub fn finish_staged(mut self) -> io::Result<(WriteStats, Staged)> {
        let w = self.writer.take().expect("trace file already finished");
        let out = self.out.take().expect("trace file already finished");
        let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", out.path().display()));
        let (buf, stats) = w.finish().map_err(named)?;
        let file = buf.into_inner().map_err(|e| named(e.into_error()))?;
        let path = out.path().display().to_string();
        let staged = out.finish_file(file, true).map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
        Ok((stats, staged))
    }
}

impl TraceFile {
    /// `e` naming the trace file (a full disk says which file it stopped).
    #[cold]
    fn named(&self, e: io::Error) -> io::Error {
        match &self.out {
            Some(o) => io::Error::new(e.kind(), format!("{}: {e}", o.path().display())),
            None => e,
        }
    }
}

impl EventSink for TraceFile {
    #[inline]
    fn event(&mut self, tid: u32, ev: &Event<'_>) -> io::Result<()> {
        self.event_at(tid, 0, ev)
    }

    #[inline]
    fn event_at(&mut self, tid: u32, site: u32, ev: &Event<'_>) -> io::Result<()> {
        match self.write_at(tid, site, ev) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.named(e)),
        }
    }

    fn define_site(&mut self, site: &Site) -> io::Result<()> {
        TraceFile::define_site(self, site).map_err(|e| self.named(e))
    }
}
