//! Record encoding: events to the bytes of a block payload (FORMAT.md, "Records").

use crate::event::{Event, OpKind};
use crate::format::*;
use crate::varint::{put, zigzag};

/// Encoder state; reset at every block start, exactly as the decoder's.
#[derive(Default)]
pub(crate) struct Encoder {
    tid: u32,
    /// The current thread's cursor; `cursors` holds the others'.
    cur: u64,
    cursors: Vec<u64>,
    /// The site the decoder attributes the next flush or fence to: 0 at every
    /// block start and thread switch, then what the last flush or fence that
    /// named one set.
    site: u32,
    /// Whether stores carry value bytes (the preamble flag).
    values: bool,
}

/// Why an event cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncodeError {
    TidTooLarge(u32),
    /// A store without its value in a trace with values, or with a value of the wrong length.
    ValueMismatch {
        size: u32,
        got: Option<usize>,
    },
    UnalignedFlush(u64),
    /// Operation codes 8–15 are reserved; `Other` codes must be ≥ 16.
    ReservedOpCode(u64),
}

impl std::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EncodeError::TidTooLarge(t) => write!(f, "thread id {t} exceeds {MAX_TID}"),
            EncodeError::ValueMismatch { size, got } => {
                write!(f, "store of {size} bytes with value {got:?} in a trace that records values")
            }
            EncodeError::UnalignedFlush(l) => write!(f, "flush of unaligned line {l:#x}"),
            EncodeError::ReservedOpCode(c) => write!(f, "operation code {c} is reserved"),
        }
    }
}

impl std::error::Error for EncodeError {}

impl Encoder {
    pub(crate) fn new(values: bool) -> Self {
        Encoder { tid: 0, cur: 0, cursors: vec![0], site: 0, values }
    }

    pub(crate) fn reset(&mut self) {
        self.tid = 0;
        self.cur = 0;
        self.cursors.clear();
        self.cursors.push(0);
        self.site = 0;
    }

    /// Appends the records for `ev` of thread `tid` to `out`; a flush or fence
    /// is attributed to code site `site` (0: unknown), other events ignore it.
    /// On error the state is unchanged (the caller drops what was appended),
    /// so that a refused event of a new thread does not leave the encoder on a
    /// thread whose THREAD record was dropped.
    #[inline]
    pub(crate) fn encode(&mut self, out: &mut Vec<u8>, tid: u32, site: u32, ev: &Event<'_>) -> Result<(), EncodeError> {
        let (prev, prev_site) = (self.tid, self.site);
        let r = self.encode_in(out, tid, site, ev);
        if r.is_err() {
            if self.tid != prev {
                self.cursors[self.tid as usize] = self.cur;
                self.tid = prev;
                self.cur = self.cursors[prev as usize];
            }
            self.site = prev_site;
        }
        r
    }

    #[inline(always)]
    fn encode_in(&mut self, out: &mut Vec<u8>, tid: u32, site: u32, ev: &Event<'_>) -> Result<(), EncodeError> {
        if tid != self.tid {
            self.switch(out, tid)?;
        }
        let cursor = &mut self.cur;
        match *ev {
            Event::Store { addr, size, value } => {
                if self.values && value.map(<[u8]>::len) != Some(size as usize) {
                    return Err(EncodeError::ValueMismatch { size, got: value.map(<[u8]>::len) });
                }
                access(out, cursor, K_STORE, addr, size);
                if self.values {
                    out.extend_from_slice(value.unwrap_or_default());
                }
            }
            Event::NtStore { addr, size, value } => {
                if self.values && value.map(<[u8]>::len) != Some(size as usize) {
                    return Err(EncodeError::ValueMismatch { size, got: value.map(<[u8]>::len) });
                }
                access(out, cursor, K_NTSTORE, addr, size);
                if self.values {
                    out.extend_from_slice(value.unwrap_or_default());
                }
            }
            Event::Load { addr, size } => access(out, cursor, K_LOAD, addr, size),
            Event::Flush { kind, line } => {
                if line & 63 != 0 {
                    return Err(EncodeError::UnalignedFlush(line));
                }
                // Relative to the line of the last byte accessed: "store, then flush its
                // line" is one byte, and the cursor stays put so a run of stores goes on.
                let d = ((line >> 6).wrapping_sub(cursor.wrapping_sub(1) >> 6)) as i64;
                let same = if d == 0 { X_SAME } else { 0 };
                sited(out, &mut self.site, site, K_FLUSH, kind as u8 | same);
                if d != 0 {
                    put(out, zigzag(d));
                    *cursor = line.wrapping_add(LINE_BYTES);
                }
            }
            Event::Fence { kind } => sited(out, &mut self.site, site, K_FENCE, kind as u8),
            Event::ThreadStart => out.push(K_THREAD_START),
            Event::ThreadEnd => out.push(K_THREAD_END),
            Event::RegionAdd { id, category, base, len, name } => {
                out.push(K_REGION_ADD | ((category as u8) << 4));
                put(out, id);
                put(out, base);
                put(out, len);
                put(out, name.len() as u64);
                out.extend_from_slice(name.as_bytes());
            }
            Event::RegionRemove { id } => {
                out.push(K_REGION_REMOVE);
                put(out, id);
            }
            Event::OpBegin { op, arg } => {
                op_tag(out, K_OP_BEGIN, op)?;
                put(out, arg);
            }
            Event::OpEnd { op, result } => {
                op_tag(out, K_OP_END, op)?;
                put(out, result);
            }
            Event::Marker { id, label } => {
                out.push(K_MARKER);
                put(out, id);
                put(out, label.len() as u64);
                out.extend_from_slice(label.as_bytes());
            }
        }
        Ok(())
    }

    #[cold]
    fn switch(&mut self, out: &mut Vec<u8>, tid: u32) -> Result<(), EncodeError> {
        if tid > MAX_TID {
            return Err(EncodeError::TidTooLarge(tid));
        }
        if tid < 15 {
            out.push(K_THREAD | ((tid as u8) << 4));
        } else {
            out.push(K_THREAD | 0xf0);
            put(out, tid as u64);
        }
        self.cursors[self.tid as usize] = self.cur;
        self.tid = tid;
        if self.cursors.len() <= tid as usize {
            self.cursors.resize(tid as usize + 1, 0);
        }
        self.cur = self.cursors[tid as usize];
        self.site = 0;
        Ok(())
    }
}

/// The tag of a flush or fence with field `x`, and, if its site differs
/// from the decoder's `current` one, the site flag and the site after the
/// tag (which the record then sets): a run of flushes and fences from one
/// place names it once.
#[inline(always)]
fn sited(out: &mut Vec<u8>, current: &mut u32, site: u32, kind: u8, x: u8) {
    if site == *current {
        out.push(kind | (x << 4));
    } else {
        out.push(kind | ((x | X_SITE) << 4));
        put(out, site as u64);
        *current = site;
    }
}

#[inline(always)]
fn access(out: &mut Vec<u8>, cursor: &mut u64, kind: u8, addr: u64, size: u32) {
    let code = if size.is_power_of_two() && size <= 64 { size.trailing_zeros() as u8 } else { SIZE_VARINT };
    let same = addr == *cursor;
    out.push(kind | ((code | if same { X_SAME } else { 0 }) << 4));
    if !same {
        put(out, zigzag(addr.wrapping_sub(*cursor) as i64));
    }
    if code == SIZE_VARINT {
        put(out, size as u64);
    }
    *cursor = addr.wrapping_add(size as u64);
}

fn op_tag(out: &mut Vec<u8>, kind: u8, op: OpKind) -> Result<(), EncodeError> {
    let code = op.code();
    match op {
        OpKind::Other(c) if c < 16 => Err(EncodeError::ReservedOpCode(c)),
        OpKind::Other(c) => {
            out.push(kind | 0xf0);
            put(out, c);
            Ok(())
        }
        _ => {
            out.push(kind | ((code as u8) << 4));
            Ok(())
        }
    }
}
