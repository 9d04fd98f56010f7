//! Record decoding: the bytes of one block payload back to events.

use crate::event::{Category, Event, FenceKind, FlushKind, OpKind, Record};
use crate::format::*;
use crate::varint::{get, unzigzag, VarintError};

/// A consumer of decoded events. The decoder calls the method of the record
/// kind it just read, so a consumer that branches on the kind anyway (the
/// simulator) implements the hot kinds' methods and saves a second dispatch
/// on every event; each method's default builds the [`Record`] and calls
/// [`Visit::event`], which receives every other kind.
pub trait Visit<'a> {
    /// Whether the decoder should call [`Visit::store`], [`Visit::flush`] and
    /// [`Visit::fence`]: only for a visitor that overrides them. Otherwise
    /// every record goes through the one call of [`Visit::event`], which the
    /// compiler then inlines once instead of four times.
    const SPLIT: bool = false;

    fn event(&mut self, rec: &Record<'a>);

    #[inline(always)]
    fn store(&mut self, index: u64, tid: u32, addr: u64, size: u32, value: Option<&'a [u8]>) {
        self.event(&Record { index, tid, event: Event::Store { addr, size, value } });
    }

    #[inline(always)]
    fn flush(&mut self, index: u64, tid: u32, kind: FlushKind, line: u64) {
        self.event(&Record { index, tid, event: Event::Flush { kind, line } });
    }

    #[inline(always)]
    fn fence(&mut self, index: u64, tid: u32, kind: FenceKind) {
        self.event(&Record { index, tid, event: Event::Fence { kind } });
    }
}

/// Thread ids that fit in a thread-switch tag (0–14); their cursors always
/// exist, so the usual switch needs no growth check.
const TAG_TIDS: usize = 15;

/// A problem inside a payload, at byte `pos` of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    pub pos: usize,
    pub problem: String,
}

/// Decodes the records of one block payload. Yields events in order; framing
/// records only change the state.
pub struct BlockDecoder<'a> {
    buf: &'a [u8],
    pos: usize,
    tid: u32,
    /// The current thread's cursor; `cursors` holds the others'.
    cur: u64,
    cursors: Vec<u64>,
    values: bool,
    next_index: u64,
    failed: bool,
}

impl<'a> BlockDecoder<'a> {
    /// `first_index` is the global index of the block's first event.
    pub fn new(buf: &'a [u8], values: bool, first_index: u64) -> Self {
        let cursors = vec![0; TAG_TIDS];
        BlockDecoder { buf, pos: 0, tid: 0, cur: 0, cursors, values, next_index: first_index, failed: false }
    }

    /// Re-targets this decoder at a new payload, keeping its allocation.
    pub fn reset(&mut self, buf: &'a [u8], first_index: u64) {
        self.buf = buf;
        self.pos = 0;
        self.tid = 0;
        self.cur = 0;
        self.cursors.clear();
        self.cursors.resize(TAG_TIDS, 0);
        self.next_index = first_index;
        self.failed = false;
    }

    /// The global index the next event will get.
    pub fn next_index(&self) -> u64 {
        self.next_index
    }

    #[inline(always)]
    fn varint(&mut self, what: &str) -> Result<u64, DecodeError> {
        let start = self.pos;
        get(self.buf, &mut self.pos).map_err(|e| DecodeError {
            pos: start,
            problem: match e {
                VarintError::Truncated => format!("{what} runs past the end of the block"),
                VarintError::Overlong => format!("{what} is an overlong varint"),
            },
        })
    }

    fn bytes(&mut self, n: u64, what: &str) -> Result<&'a [u8], DecodeError> {
        let start = self.pos;
        let end = usize::try_from(n).ok().and_then(|n| start.checked_add(n)).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return Err(DecodeError {
                pos: start,
                problem: format!("{what} of {n} bytes runs past the end of the block"),
            });
        };
        self.pos = end;
        Ok(&self.buf[start..end])
    }

    fn text(&mut self, n: u64, what: &str) -> Result<&'a str, DecodeError> {
        let start = self.pos;
        let b = self.bytes(n, what)?;
        std::str::from_utf8(b).map_err(|_| DecodeError { pos: start, problem: format!("{what} is not UTF-8") })
    }

    #[inline(always)]
    fn access(&mut self, x: u8) -> Result<(u64, u32), DecodeError> {
        let addr = if x & X_SAME != 0 {
            self.cur
        } else {
            self.cur.wrapping_add(unzigzag(self.varint("address delta")?) as u64)
        };
        let code = x & 7;
        let size = if code == SIZE_VARINT { self.size()? } else { 1u32 << code };
        self.cur = addr.wrapping_add(size as u64);
        Ok((addr, size))
    }

    #[cold]
    fn size(&mut self) -> Result<u32, DecodeError> {
        let at = self.pos;
        let s = self.varint("store size")?;
        u32::try_from(s).map_err(|_| DecodeError { pos: at, problem: format!("size {s} exceeds 32 bits") })
    }

    #[inline(always)]
    fn value(&mut self, size: u32) -> Result<Option<&'a [u8]>, DecodeError> {
        if self.values {
            Ok(Some(self.bytes(size as u64, "store value")?))
        } else {
            Ok(None)
        }
    }

    #[inline(always)]
    fn op(&mut self, x: u8) -> Result<OpKind, DecodeError> {
        // Codes 0-14 are in the tag; 8-15 are not operations (15: the code follows).
        match OpKind::from_code(x as u64) {
            Some(op) => Ok(op),
            None => self.op_slow(x),
        }
    }

    /// An operation code written after the tag, or a reserved one.
    #[cold]
    fn op_slow(&mut self, x: u8) -> Result<OpKind, DecodeError> {
        let at = self.pos - 1;
        let code = if x == 15 {
            let c = self.varint("operation code")?;
            if c < 16 {
                return Err(DecodeError { pos: at, problem: format!("operation code {c} must be written in the tag") });
            }
            c
        } else {
            x as u64
        };
        // `ok_or_else`: the message is formatted only for a bad code, not for
        // every operation record.
        OpKind::from_code(code)
            .ok_or_else(|| DecodeError { pos: at, problem: format!("reserved operation code {code}") })
    }

    /// Decodes the next event and hands it to `v`; `false` at the end of the
    /// payload. Stores, flushes, fences, operation brackets and thread switches
    /// — nearly all of a trace — are decoded here; the rest in `rare`.
    #[inline(always)]
    fn visit_next<V: Visit<'a>>(&mut self, v: &mut V) -> Result<bool, DecodeError> {
        loop {
            let Some(&tag) = self.buf.get(self.pos) else { return Ok(false) };
            self.pos += 1;
            let (kind, x) = (tag & 15, tag >> 4);
            let index = self.next_index;
            let event = match kind {
                K_STORE => {
                    let (addr, size) = self.access(x)?;
                    let value = self.value(size)?;
                    if !V::SPLIT {
                        Event::Store { addr, size, value }
                    } else {
                        self.next_index += 1;
                        v.store(index, self.tid, addr, size, value);
                        return Ok(true);
                    }
                }
                K_FLUSH => {
                    let kind = match x & 7 {
                        0 => FlushKind::Clwb,
                        1 => FlushKind::Clflushopt,
                        2 => FlushKind::Clflush,
                        k => return Err(self.bad(format!("unknown flush kind {k}"))),
                    };
                    let last = self.cur.wrapping_sub(1) >> 6;
                    let line = if x & X_SAME != 0 {
                        last << 6
                    } else {
                        let d = unzigzag(self.varint("flush line delta")?);
                        let line = last.wrapping_add(d as u64) << 6;
                        self.cur = line.wrapping_add(LINE_BYTES);
                        line
                    };
                    if !V::SPLIT {
                        Event::Flush { kind, line }
                    } else {
                        self.next_index += 1;
                        v.flush(index, self.tid, kind, line);
                        return Ok(true);
                    }
                }
                K_FENCE => {
                    let kind = match x {
                        0 => FenceKind::Sfence,
                        1 => FenceKind::Mfence,
                        2 => FenceKind::LockedRmw,
                        k => return Err(self.bad(format!("unknown fence kind {k}"))),
                    };
                    if !V::SPLIT {
                        Event::Fence { kind }
                    } else {
                        self.next_index += 1;
                        v.fence(index, self.tid, kind);
                        return Ok(true);
                    }
                }
                K_THREAD => {
                    if x < 15 {
                        // Cursors of the ids a tag can carry always exist.
                        self.cursors[self.tid as usize] = self.cur;
                        self.tid = x as u32;
                        self.cur = self.cursors[x as usize];
                    } else {
                        self.switch(x)?;
                    }
                    continue;
                }
                K_OP_BEGIN => {
                    let op = self.op(x)?;
                    Event::OpBegin { op, arg: self.varint("operation argument")? }
                }
                K_OP_END => {
                    let op = self.op(x)?;
                    Event::OpEnd { op, result: self.varint("operation result")? }
                }
                _ => self.rare(kind, x)?,
            };
            self.next_index += 1;
            v.event(&Record { index, tid: self.tid, event });
            return Ok(true);
        }
    }

    /// The next event, or `None` at the end of the payload.
    #[inline(always)]
    fn step(&mut self) -> Result<Option<Record<'a>>, DecodeError> {
        struct Next<'a>(Option<Record<'a>>);
        impl<'a> Visit<'a> for Next<'a> {
            #[inline(always)]
            fn event(&mut self, rec: &Record<'a>) {
                self.0 = Some(*rec);
            }
        }
        let mut next = Next(None);
        self.visit_next(&mut next)?;
        Ok(next.0)
    }

    /// An error about the record whose tag was just read.
    #[cold]
    fn bad(&self, problem: String) -> DecodeError {
        DecodeError { pos: self.pos - 1, problem }
    }

    #[cold]
    fn switch(&mut self, x: u8) -> Result<(), DecodeError> {
        let tid = if x == 15 { self.varint("thread id")? } else { x as u64 };
        if tid > MAX_TID as u64 {
            return Err(self.bad(format!("thread id {tid} exceeds {MAX_TID}")));
        }
        self.cursors[self.tid as usize] = self.cur;
        self.tid = tid as u32;
        if self.cursors.len() <= tid as usize {
            self.cursors.resize(tid as usize + 1, 0);
        }
        self.cur = self.cursors[tid as usize];
        Ok(())
    }

    /// Every record kind but the hot ones of `step`.
    #[inline(never)]
    fn rare(&mut self, kind: u8, x: u8) -> Result<Event<'a>, DecodeError> {
        let at = self.pos - 1;
        let bad = |problem: String| Err(DecodeError { pos: at, problem });
        Ok(match kind {
            K_NTSTORE => {
                let (addr, size) = self.access(x)?;
                Event::NtStore { addr, size, value: self.value(size)? }
            }
            K_LOAD => {
                let (addr, size) = self.access(x)?;
                Event::Load { addr, size }
            }
            K_THREAD_START => Event::ThreadStart,
            K_THREAD_END => Event::ThreadEnd,
            K_REGION_ADD => {
                let category = match x {
                    0 => Category::Meta,
                    1 => Category::Wal,
                    2 => Category::Log,
                    3 => Category::Data,
                    c => return bad(format!("unknown region category {c}")),
                };
                let id = self.varint("region id")?;
                let base = self.varint("region base")?;
                let len = self.varint("region length")?;
                let n = self.varint("region name length")?;
                let name = self.text(n, "region name")?;
                Event::RegionAdd { id, category, base, len, name }
            }
            K_REGION_REMOVE => Event::RegionRemove { id: self.varint("region id")? },
            K_MARKER => {
                let id = self.varint("marker id")?;
                let n = self.varint("marker length")?;
                Event::Marker { id, label: self.text(n, "marker label")? }
            }
            k => return bad(format!("unknown record kind {k}")),
        })
    }

    /// Calls `f` on every event of the payload: the fast way to read a block.
    #[inline(always)]
    pub fn decode_all(&mut self, mut f: impl FnMut(&Record<'a>)) -> Result<(), DecodeError> {
        // Record by record rather than `visit_all` with a visitor calling `f`:
        // the same work, but measurably faster on a real trace (the loop
        // compiles to a tighter shape).
        if self.failed {
            return Ok(());
        }
        while let Some(r) = self.step().inspect_err(|_| self.failed = true)? {
            f(&r);
        }
        Ok(())
    }

    /// Hands every event of the payload to `v`, the store, flush and fence
    /// records through their own methods.
    #[inline(always)]
    pub fn visit_all<V: Visit<'a>>(&mut self, v: &mut V) -> Result<(), DecodeError> {
        if self.failed {
            return Ok(());
        }
        while self.visit_next(v).inspect_err(|_| self.failed = true)? {}
        Ok(())
    }
}

impl<'a> Iterator for BlockDecoder<'a> {
    type Item = Result<Record<'a>, DecodeError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.step() {
            Ok(Some(r)) => Some(Ok(r)),
            Ok(None) => None,
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}
