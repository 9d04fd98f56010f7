//! The streaming trace reader: one block in memory at a time, every problem
//! reported as file + byte offset + what is wrong.

use crate::decode::{BlockDecoder, DecodeError, Visit};
use crate::error::{ErrorKind, TraceError};
use crate::event::Record;
use crate::format::*;
use crate::header::TraceHeader;
use crate::sites::{decode_sites, SiteTable};
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// Reads a trace block by block.
pub struct TraceReader<R: Read> {
    src: R,
    path: String,
    /// File offset of the next unread byte.
    offset: u64,
    header: TraceHeader,
    values: bool,
    stored: Vec<u8>,
    raw: Vec<u8>,
    zstd: Option<zstd::bulk::Decompressor<'static>>,
    next_index: u64,
    blocks: u64,
    done: bool,
    /// Offset of the first byte after the preamble.
    data_start: u64,
    /// The code sites defined so far.
    sites: SiteTable,
}

/// One decoded block: its payload and where it sits in the file.
#[derive(Clone)]
pub struct Block<'a> {
    pub payload: &'a [u8],
    /// Global index of the block's first event.
    pub first_index: u64,
    /// Number of events the block header announces.
    pub events: u32,
    /// File offset of the block header.
    pub offset: u64,
    compressed: bool,
    values: bool,
    path: &'a str,
}

impl<'a> Block<'a> {
    /// The block's events in order. A decoding problem ends the iteration with
    /// an error carrying the file offset; so does an event count that differs
    /// from the block header's.
    pub fn records(&self) -> BlockRecords<'a> {
        BlockRecords {
            dec: BlockDecoder::new(self.payload, self.values, self.first_index),
            block: self.clone(),
            done: false,
        }
    }

    /// Calls `f` on every event of the block: faster than [`Block::records`].
    #[inline(always)]
    pub fn for_each(&self, f: impl FnMut(&Record<'a>)) -> Result<(), TraceError> {
        let mut dec = BlockDecoder::new(self.payload, self.values, self.first_index);
        dec.decode_all(f).map_err(|e| self.decode_error(e))?;
        self.check_count(dec.next_index())
    }

    /// Hands every event of the block to `v` (see [`Visit`]).
    #[inline(always)]
    pub fn visit<V: Visit<'a>>(&self, v: &mut V) -> Result<(), TraceError> {
        let mut dec = BlockDecoder::new(self.payload, self.values, self.first_index);
        dec.visit_all(v).map_err(|e| self.decode_error(e))?;
        self.check_count(dec.next_index())
    }

    #[cold]
    fn decode_error(&self, e: DecodeError) -> TraceError {
        let (offset, loc) = if self.compressed {
            (self.offset, format!(" (byte {} of the decompressed payload of the block at {})", e.pos, self.offset))
        } else {
            (
                self.offset + (BLOCK_HEADER_LEN + e.pos) as u64,
                format!(" (payload byte {} of the block at {})", e.pos, self.offset),
            )
        };
        TraceError::new(ErrorKind::Corrupt, self.path, offset, format!("corrupt record: {}{loc}", e.problem))
    }

    /// The payload must hold exactly the events its header announces.
    fn check_count(&self, next_index: u64) -> Result<(), TraceError> {
        let got = next_index - self.first_index;
        if got != self.events as u64 {
            return Err(TraceError::new(
                ErrorKind::Corrupt,
                self.path,
                self.offset + 8,
                format!("block announces {} events but holds {got}", self.events),
            ));
        }
        Ok(())
    }
}

/// Iterator over the events of one block.
pub struct BlockRecords<'a> {
    dec: BlockDecoder<'a>,
    block: Block<'a>,
    done: bool,
}

impl<'a> Iterator for BlockRecords<'a> {
    type Item = Result<Record<'a>, TraceError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.dec.next() {
            Some(Ok(r)) => Some(Ok(r)),
            Some(Err(e)) => {
                self.done = true;
                Some(Err(self.block.decode_error(e)))
            }
            None => {
                self.done = true;
                self.block.check_count(self.dec.next_index()).err().map(Err)
            }
        }
    }
}

/// Totals of a whole trace, from its end block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceTotals {
    pub events: u64,
    pub blocks: u64,
    /// File size in bytes.
    pub bytes: u64,
}

impl TraceReader<File> {
    /// Opens a trace file and reads its preamble.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TraceError> {
        let path = path.as_ref();
        let name = crate::input::shown(path);
        let file =
            crate::input::open_unnamed(path, "trace").map_err(|e| TraceError::new(ErrorKind::Io, &name, 0, e))?;
        // Unbuffered on purpose: payloads are read straight into the block buffer
        // (one copy from the page cache, not two); block headers cost one small
        // read per block of tens of thousands of events.
        TraceReader::new(file, &name)
    }
}

impl<R: Read> TraceReader<R> {
    /// Reads the preamble from `src`; `name` is used in error messages.
    pub fn new(src: R, name: &str) -> Result<Self, TraceError> {
        let mut r = TraceReader {
            src,
            path: name.to_string(),
            offset: 0,
            header: TraceHeader::default(),
            values: false,
            stored: Vec::new(),
            raw: Vec::new(),
            zstd: None,
            next_index: 0,
            blocks: 0,
            done: false,
            data_start: 0,
            sites: SiteTable::default(),
        };
        r.read_preamble()?;
        Ok(r)
    }

    pub fn header(&self) -> &TraceHeader {
        &self.header
    }

    /// The code sites the trace defined in what has been read so far (every
    /// site a block's records name is defined before that block is returned).
    pub fn sites(&self) -> &SiteTable {
        &self.sites
    }

    /// The name used in error messages.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Whether stores carry value bytes.
    pub fn values(&self) -> bool {
        self.values
    }

    /// Bytes of the preamble (magic, version, header, checksum).
    pub fn preamble_len(&self) -> u64 {
        self.data_start
    }

    fn err(&self, kind: ErrorKind, offset: u64, problem: impl Into<String>) -> TraceError {
        TraceError::new(kind, &self.path, offset, problem)
    }

    /// Reads exactly `n` bytes into `self.stored` (replacing it); a short read is a
    /// truncation reported at the offset where the data stops.
    fn fill(&mut self, n: usize, what: &str) -> Result<(), TraceError> {
        let buf = &mut self.stored;
        // Only bytes past the old length are zeroed (the buffer keeps its size
        // from block to block); every byte is overwritten by the read anyway.
        buf.resize(n, 0);
        let mut got = 0;
        while got < n {
            match self.src.read(&mut buf[got..]) {
                Ok(0) => {
                    let at = self.offset + got as u64;
                    return Err(self.err(ErrorKind::Truncated, at, format!("truncated: the file ends inside {what}")));
                }
                Ok(k) => got += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let at = self.offset + got as u64;
                    return Err(self.err(ErrorKind::Io, at, format!("read error: {e}")));
                }
            }
        }
        self.offset += n as u64;
        Ok(())
    }

    fn read_preamble(&mut self) -> Result<(), TraceError> {
        // Read the magic alone first so that a short non-trace file is called what it is.
        match self.fill(8, "the magic number") {
            Err(e) if e.kind == ErrorKind::Truncated => {
                return Err(self.err(ErrorKind::BadMagic, 0, "not a pmsim trace (file shorter than the magic number)"));
            }
            r => r?,
        }
        if self.stored[..8] != MAGIC {
            return Err(self.err(ErrorKind::BadMagic, 0, "not a pmsim trace (bad magic)"));
        }
        let mut pre = self.stored.clone();
        self.fill(8, "the preamble")?;
        pre.extend_from_slice(&self.stored);
        let version = u16::from_le_bytes([pre[8], pre[9]]);
        if version > VERSION {
            return Err(self.err(
                ErrorKind::NewerVersion,
                8,
                format!("format version {version} is newer than this pmsim reads ({VERSION}); use a newer pmsim"),
            ));
        }
        if version == 0 {
            return Err(self.err(ErrorKind::Corrupt, 8, "format version 0 does not exist"));
        }
        let flags = u16::from_le_bytes([pre[10], pre[11]]);
        if flags & !FLAG_VALUES != 0 {
            return Err(self.err(ErrorKind::Corrupt, 10, format!("unknown flags {flags:#06x}")));
        }
        let hlen = u32::from_le_bytes([pre[12], pre[13], pre[14], pre[15]]) as usize;
        if hlen > MAX_LEN {
            return Err(self.err(ErrorKind::Corrupt, 12, format!("header length {hlen} exceeds 16 MiB")));
        }
        self.fill(hlen, "the JSON header")?;
        pre.extend_from_slice(&self.stored);
        self.fill(4, "the header checksum")?;
        let stored_crc = u32::from_le_bytes(self.stored[..4].try_into().unwrap());
        let crc = crc32fast::hash(&pre);
        if crc != stored_crc {
            return Err(self.err(
                ErrorKind::Corrupt,
                16 + hlen as u64,
                format!("header checksum mismatch (stored {stored_crc:#010x}, computed {crc:#010x})"),
            ));
        }
        self.header = serde_json::from_slice(&pre[16..]).map_err(|e| {
            self.err(ErrorKind::Corrupt, 16 + e.column().saturating_sub(1) as u64, format!("invalid JSON header: {e}"))
        })?;
        self.values = flags & FLAG_VALUES != 0;
        self.header.values = self.values;
        self.data_start = self.offset;
        Ok(())
    }

    /// The next block of events, or `None` after the end block. Site-table
    /// blocks on the way are read into [`TraceReader::sites`].
    pub fn next_block(&mut self) -> Result<Option<Block<'_>>, TraceError> {
        loop {
            match self.read_block()? {
                None => return Ok(None),
                Some((at, CODEC_SITES, _)) => {
                    if let Err((pos, problem)) = decode_sites(&self.stored, &mut self.sites) {
                        let offset = at + (BLOCK_HEADER_LEN + pos) as u64;
                        return Err(self.err(
                            ErrorKind::Corrupt,
                            offset,
                            format!("corrupt site table: {problem} (payload byte {pos} of the block at {at})"),
                        ));
                    }
                }
                Some((at, codec, events)) => {
                    let first_index = self.next_index;
                    self.next_index += events as u64;
                    self.blocks += 1;
                    let payload: &[u8] = if codec == CODEC_ZSTD { &self.raw } else { &self.stored };
                    return Ok(Some(Block {
                        payload,
                        first_index,
                        events,
                        offset: at,
                        compressed: codec == CODEC_ZSTD,
                        values: self.values,
                        path: &self.path,
                    }));
                }
            }
        }
    }

    /// Reads and checks the next block, decompressing a zstd payload into
    /// `raw`; returns its offset, codec and event count, or `None` after the
    /// end block.
    fn read_block(&mut self) -> Result<Option<(u64, u8, u32)>, TraceError> {
        if self.done {
            return Ok(None);
        }
        let at = self.offset;
        // A clean EOF exactly here means the writer never finished.
        let mut h = [0u8; BLOCK_HEADER_LEN];
        let mut got = 0;
        while got < h.len() {
            match self.src.read(&mut h[got..]) {
                Ok(0) => {
                    let problem = if got == 0 {
                        "truncated: the file ends without an end-of-trace block (the writer did not finish)"
                    } else {
                        "truncated: the file ends inside a block header"
                    };
                    return Err(self.err(ErrorKind::Truncated, at + got as u64, problem));
                }
                Ok(k) => got += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.err(ErrorKind::Io, at + got as u64, format!("read error: {e}"))),
            }
        }
        self.offset += BLOCK_HEADER_LEN as u64;
        if h[..4] != BLOCK_MARKER {
            return Err(self.err(ErrorKind::Corrupt, at, "corrupt: expected a block marker 'PMTB'"));
        }
        let codec = h[4];
        let events = u32::from_le_bytes(h[8..12].try_into().unwrap());
        let raw_len = u32::from_le_bytes(h[12..16].try_into().unwrap()) as usize;
        let stored_len = u32::from_le_bytes(h[16..20].try_into().unwrap()) as usize;
        let stored_crc = u32::from_le_bytes(h[20..24].try_into().unwrap());
        if h[5..8] != [0, 0, 0] {
            return Err(self.err(ErrorKind::Corrupt, at + 5, "corrupt block header: reserved bytes are not zero"));
        }
        if raw_len > MAX_LEN || stored_len > MAX_LEN {
            return Err(self.err(
                ErrorKind::Corrupt,
                at + 12,
                format!("corrupt block header: length {} exceeds 16 MiB", raw_len.max(stored_len)),
            ));
        }
        match codec {
            CODEC_RAW if raw_len != stored_len => {
                return Err(self.err(
                    ErrorKind::Corrupt,
                    at + 12,
                    "corrupt block header: raw block with differing lengths",
                ));
            }
            CODEC_RAW | CODEC_ZSTD => {}
            CODEC_SITES if raw_len == stored_len && events == 0 => {}
            CODEC_SITES => return Err(self.err(ErrorKind::Corrupt, at + 8, "corrupt site-table block header")),
            CODEC_END if raw_len == 16 && stored_len == 16 && events == 0 => {}
            CODEC_END => return Err(self.err(ErrorKind::Corrupt, at + 4, "corrupt end block header")),
            c => return Err(self.err(ErrorKind::Corrupt, at + 4, format!("unknown block codec {c}"))),
        }
        self.fill(stored_len, "a block payload")?;
        let mut crc = crc32fast::Hasher::new();
        crc.update(&h[..20]);
        crc.update(&self.stored);
        let crc = crc.finalize();
        if crc != stored_crc {
            return Err(self.err(
                ErrorKind::Corrupt,
                at,
                format!("block checksum mismatch (stored {stored_crc:#010x}, computed {crc:#010x})"),
            ));
        }
        if codec == CODEC_END {
            let total = u64::from_le_bytes(self.stored[..8].try_into().unwrap());
            let blocks = u64::from_le_bytes(self.stored[8..16].try_into().unwrap());
            if total != self.next_index || blocks != self.blocks {
                return Err(self.err(
                    ErrorKind::Corrupt,
                    at,
                    format!(
                        "end block counts {total} events in {blocks} blocks, but the file holds {} in {}",
                        self.next_index, self.blocks
                    ),
                ));
            }
            let mut probe = [0u8; 1];
            loop {
                match self.src.read(&mut probe) {
                    Ok(0) => break,
                    Ok(_) => {
                        return Err(self.err(ErrorKind::Corrupt, self.offset, "data after the end-of-trace block"))
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(self.err(ErrorKind::Io, self.offset, format!("read error: {e}"))),
                }
            }
            self.done = true;
            return Ok(None);
        }
        if codec == CODEC_ZSTD {
            let z = match &mut self.zstd {
                Some(z) => z,
                None => self.zstd.insert(
                    zstd::bulk::Decompressor::new()
                        .map_err(|e| TraceError::new(ErrorKind::Io, &self.path, at, e.to_string()))?,
                ),
            };
            self.raw.clear();
            self.raw.reserve(raw_len);
            match z.decompress_to_buffer(&self.stored, &mut self.raw) {
                Ok(n) if n == raw_len => {}
                Ok(n) => {
                    return Err(self.err(
                        ErrorKind::Corrupt,
                        at,
                        format!("zstd block decodes to {n} bytes, header says {raw_len}"),
                    ))
                }
                Err(e) => return Err(self.err(ErrorKind::Corrupt, at, format!("zstd block does not decode: {e}"))),
            }
        }
        Ok(Some((at, codec, events)))
    }

    /// Calls `f` on every event of the trace, in global order.
    pub fn for_each(&mut self, mut f: impl FnMut(&Record<'_>)) -> Result<TraceTotals, TraceError> {
        while let Some(block) = self.next_block()? {
            block.for_each(&mut f)?;
        }
        Ok(self.totals())
    }

    /// Totals so far (complete once `next_block` returned `None`).
    pub fn totals(&self) -> TraceTotals {
        TraceTotals { events: self.next_index, blocks: self.blocks, bytes: self.offset }
    }
}
