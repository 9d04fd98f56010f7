//! Record decoding: the bytes of one block payload back to events.

use crate::event::{Category, Event, FenceKind, FlushKind, OpKind, Record};
use crate::format::*;
use crate::varint::{from_word, get, unzigzag, VarintError};

/// A consumer of decoded events. The decoder calls the method of the record
/// kind it just read, so a consumer that branches on the kind anyway (the
/// simulator) implements the hot kinds' methods and saves a second dispatch
/// on every event; each method's default builds the [`Record`] and calls
/// [`Visit::event`], which receives every other kind.
pub trait Visit<'a> {
    /// Whether the careful decoder (rare and malformed records, block ends)
    /// calls [`Visit::store`], [`Visit::flush`] and [`Visit::fence`]: only for a
    /// visitor that overrides them. Otherwise each of its records goes through
    /// its one call of [`Visit::event`], which the compiler then inlines once
    /// instead of four times. (The fast path calls the methods always; their
    /// defaults build the record.)
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

    /// The records that follow, up to the next call, are thread `tid`'s
    /// (each still names its thread): called as a visit starts and at every
    /// thread switch, so that a visitor keeping per-thread state can look it
    /// up once per run of a thread's records rather than once per record.
    #[inline(always)]
    fn thread(&mut self, tid: u32) {
        let _ = tid;
    }

    /// The flushes and fences that follow, up to the next call of this or of
    /// [`Visit::thread`], were issued at code site `site` (an id of the trace's
    /// site table, [`crate::TraceReader::sites`]); a flush or fence that
    /// names its site calls this just before itself. After every `thread`
    /// call the site is 0 (unknown) until this is called.
    #[inline(always)]
    fn site(&mut self, site: u32) {
        let _ = site;
    }

    /// A named operation (code 0-7, [`OpKind::NAMED`]) begins (`begin`, with
    /// its argument `n`) or ends (with its result `n`). Other operations come
    /// as events.
    #[inline(always)]
    fn named_op(&mut self, index: u64, tid: u32, code: u8, begin: bool, n: u64) {
        let op = OpKind::NAMED[code as usize & 7];
        let event = if begin { Event::OpBegin { op, arg: n } } else { Event::OpEnd { op, result: n } };
        self.event(&Record { index, tid, event });
    }
}

/// The bytes [`BlockDecoder::fast_run`] looks at: a tag and a varint of up
/// to eight bytes.
const FAST_WINDOW: usize = 9;

/// What [`BlockDecoder::fast_run`] does with a tag byte: one of the hot record
/// shapes, whose fields it can decode without further checks, or `Other` for
/// every tag it leaves to the careful decoder (rare kinds, stores whose size
/// or value bytes follow, reserved flush, fence and operation codes).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Hot {
    StoreSame,
    Store,
    FlushSame,
    Flush,
    Fence,
    /// The same three, naming their code site after the tag ([`X_SITE`]).
    SitedFlushSame,
    SitedFlush,
    SitedFence,
    Thread,
    Op,
    Site,
    Other,
}

/// The class of every tag byte when stores carry no value bytes, and when
/// they do (then stores are left to the careful decoder).
static HOT: [Hot; 256] = hot_classes(false);
static HOT_WITH_VALUES: [Hot; 256] = hot_classes(true);

const fn hot_classes(values: bool) -> [Hot; 256] {
    let mut t = [Hot::Other; 256];
    let mut tag = 0;
    while tag < 256 {
        let (kind, x) = ((tag & 15) as u8, (tag >> 4) as u8);
        let same = x & X_SAME != 0;
        t[tag] = match kind {
            K_STORE if !values && x & 7 != SIZE_VARINT => {
                if same {
                    Hot::StoreSame
                } else {
                    Hot::Store
                }
            }
            K_FLUSH if ((x & X_KIND) as usize) < FlushKind::ALL.len() => match (x & X_SITE != 0, same) {
                (false, true) => Hot::FlushSame,
                (false, false) => Hot::Flush,
                (true, true) => Hot::SitedFlushSame,
                (true, false) => Hot::SitedFlush,
            },
            K_FENCE if ((x & !X_SITE) as usize) < FenceKind::ALL.len() => {
                if x & X_SITE != 0 {
                    Hot::SitedFence
                } else {
                    Hot::Fence
                }
            }
            K_THREAD if x < 15 => Hot::Thread,
            K_OP_BEGIN | K_OP_END if (x as usize) < OpKind::NAMED.len() => Hot::Op,
            K_SITE => Hot::Site,
            _ => Hot::Other,
        };
        tag += 1;
    }
    t
}

// The kinds of hot records. The table admits only the codes these name, so
// the clamps change nothing; they make the lookups total (no panic path), so
// a visitor that ignores a kind pays nothing for it.

/// The kind of a flush whose tag the table classed as hot (codes 0-2).
#[inline(always)]
fn flush_kind(x: u8) -> FlushKind {
    FlushKind::ALL[((x & X_KIND) as usize).min(FlushKind::ALL.len() - 1)]
}

/// The kind of a fence whose tag the table classed as hot (codes 0-2).
#[inline(always)]
fn fence_kind(x: u8) -> FenceKind {
    FenceKind::ALL[((x & X_KIND) as usize).min(FenceKind::ALL.len() - 1)]
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
                    let Some(kind) = FlushKind::from_code(x & X_KIND) else {
                        return Err(self.bad(format!("unknown flush kind {}", x & X_KIND)));
                    };
                    if x & X_SITE != 0 {
                        v.site(self.site_id()?);
                    }
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
                    let Some(kind) = FenceKind::from_code(x & !X_SITE) else {
                        return Err(self.bad(format!("unknown fence kind {}", x & !X_SITE)));
                    };
                    if x & X_SITE != 0 {
                        v.site(self.site_id()?);
                    }
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
                    v.thread(self.tid);
                    continue;
                }
                K_SITE => {
                    let site = if x < 15 { x as u32 } else { self.site_id()? };
                    v.site(site);
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

    /// Decodes records from `pos` on and hands them to `v` for as long as they
    /// are of the hot shapes (see [`Hot`]) and their one varint, if any, is at
    /// most eight bytes and lies inside the payload. It stops, having changed
    /// nothing for it, at the first other record, which
    /// [`BlockDecoder::visit_next`] then decodes with every check and its exact
    /// error.
    ///
    /// Such a record spans at most nine bytes, so one bounds check covers every
    /// read; the tag's class comes from one table lookup (so the shape checks
    /// cost nothing), and the decoder's state stays in registers.
    #[inline(always)]
    fn fast_run<V: Visit<'a>>(&mut self, v: &mut V) {
        let buf = self.buf;
        let (mut pos, mut cur, mut tid, mut index) = (self.pos, self.cur, self.tid, self.next_index);
        let classes = if self.values { &HOT_WITH_VALUES } else { &HOT };
        // The last position at which a whole window fits.
        let end = buf.len().saturating_sub(FAST_WINDOW - 1);
        while pos < end {
            let tag = buf[pos];
            let x = tag >> 4;
            // The varint after the tag: its value and the record's length, or
            // `None` if longer than the window. One- and two-byte varints (most
            // deltas) are read bytewise, longer ones as one word.
            let varint = || -> Option<(u64, usize)> {
                let b = buf[pos + 1];
                if b < 0x80 {
                    return Some((b as u64, 2));
                }
                let word = u64::from_le_bytes(buf[pos + 1..pos + FAST_WINDOW].try_into().unwrap());
                from_word(word).map(|(x, n)| (x, 1 + n))
            };
            // The site after a flush's or fence's tag, and the record's
            // length so far; `None` past 32 bits (the careful decoder's
            // error) or eight bytes. Ids below 128 (a trace's first 127 sites) are
            // one byte.
            let site = || -> Option<(u32, usize)> {
                match varint() {
                    Some((s, n)) if s <= u32::MAX as u64 => Some((s as u32, n)),
                    _ => None,
                }
            };
            match classes[tag as usize] {
                Hot::StoreSame => {
                    let size = 1u32 << (x & 7);
                    let addr = cur;
                    cur = addr.wrapping_add(size as u64);
                    pos += 1;
                    v.store(index, tid, addr, size, None);
                    index += 1;
                }
                Hot::Store => {
                    let Some((d, len)) = varint() else { break };
                    let size = 1u32 << (x & 7);
                    let addr = cur.wrapping_add(unzigzag(d) as u64);
                    cur = addr.wrapping_add(size as u64);
                    pos += len;
                    v.store(index, tid, addr, size, None);
                    index += 1;
                }
                Hot::FlushSame => {
                    let line = (cur.wrapping_sub(1) >> 6) << 6;
                    pos += 1;
                    v.flush(index, tid, flush_kind(x), line);
                    index += 1;
                }
                Hot::Flush => {
                    let Some((d, len)) = varint() else { break };
                    let line = (cur.wrapping_sub(1) >> 6).wrapping_add(unzigzag(d) as u64) << 6;
                    cur = line.wrapping_add(LINE_BYTES);
                    pos += len;
                    v.flush(index, tid, flush_kind(x), line);
                    index += 1;
                }
                Hot::Fence => {
                    pos += 1;
                    v.fence(index, tid, fence_kind(x));
                    index += 1;
                }
                Hot::SitedFlushSame => {
                    let Some((s, len)) = site() else { break };
                    let line = (cur.wrapping_sub(1) >> 6) << 6;
                    pos += len;
                    v.site(s);
                    v.flush(index, tid, flush_kind(x), line);
                    index += 1;
                }
                Hot::SitedFlush => {
                    let Some((s, len)) = site() else { break };
                    // The line delta after the site: its eight-byte window
                    // must lie inside the payload too.
                    let at = pos + len;
                    if at + FAST_WINDOW - 1 > buf.len() {
                        break;
                    }
                    let b = buf[at];
                    let (d, dlen) = if b < 0x80 {
                        (b as u64, 1)
                    } else {
                        let word = u64::from_le_bytes(buf[at..at + FAST_WINDOW - 1].try_into().unwrap());
                        let Some(dn) = from_word(word) else { break };
                        dn
                    };
                    let line = (cur.wrapping_sub(1) >> 6).wrapping_add(unzigzag(d) as u64) << 6;
                    cur = line.wrapping_add(LINE_BYTES);
                    pos = at + dlen;
                    v.site(s);
                    v.flush(index, tid, flush_kind(x), line);
                    index += 1;
                }
                Hot::SitedFence => {
                    let Some((s, len)) = site() else { break };
                    pos += len;
                    v.site(s);
                    v.fence(index, tid, fence_kind(x));
                    index += 1;
                }
                Hot::Thread => {
                    // Cursors of the ids a tag can carry always exist.
                    self.cursors[tid as usize] = cur;
                    tid = x as u32;
                    cur = self.cursors[x as usize];
                    pos += 1;
                    v.thread(tid);
                }
                Hot::Op => {
                    let Some((n, len)) = varint() else { break };
                    pos += len;
                    v.named_op(index, tid, x, tag & 15 == K_OP_BEGIN, n);
                    index += 1;
                }
                Hot::Site => {
                    if x < 15 {
                        pos += 1;
                        v.site(x as u32);
                    } else {
                        // Ids past 32 bits are left to the careful decoder's error.
                        let Some((n, len)) = varint().filter(|&(n, _)| n <= u32::MAX as u64) else { break };
                        pos += len;
                        v.site(n as u32);
                    }
                }
                Hot::Other => break,
            }
        }
        (self.pos, self.cur, self.tid, self.next_index) = (pos, cur, tid, index);
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

    /// A site id written after a tag (a SITE record's, or a flush's or
    /// fence's that sets the site): at most 32 bits.
    #[inline(always)]
    fn site_id(&mut self) -> Result<u32, DecodeError> {
        let site = self.varint("site id")?;
        u32::try_from(site).map_err(|_| self.bad(format!("site id {site} exceeds 32 bits")))
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

    /// Calls `f` on every event of the payload.
    #[inline(always)]
    pub fn decode_all(&mut self, f: impl FnMut(&Record<'a>)) -> Result<(), DecodeError> {
        struct Each<F>(F);
        impl<'a, F: FnMut(&Record<'a>)> Visit<'a> for Each<F> {
            #[inline(always)]
            fn event(&mut self, rec: &Record<'a>) {
                (self.0)(rec)
            }
        }
        self.visit_all(&mut Each(f))
    }

    /// Hands every event of the payload to `v`, the store, flush and fence
    /// records through their own methods.
    #[inline(always)]
    pub fn visit_all<V: Visit<'a>>(&mut self, v: &mut V) -> Result<(), DecodeError> {
        if self.failed {
            return Ok(());
        }
        v.thread(self.tid);
        loop {
            self.fast_run(v);
            if !self.visit_next(v).inspect_err(|_| self.failed = true)? {
                return Ok(());
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::OwnedEvent;
    use proptest::prelude::*;

    /// Every event with the site the decoder attributes it to (flushes and
    /// fences; 0 for the others), and the error if any.
    type Sited = (Vec<(u64, u32, OwnedEvent, u32)>, Option<DecodeError>);

    #[derive(Default)]
    struct Collect {
        site: u32,
        out: Vec<(u64, u32, OwnedEvent, u32)>,
    }

    impl<'a> Visit<'a> for Collect {
        const SPLIT: bool = true;
        fn event(&mut self, rec: &Record<'a>) {
            let site = if matches!(rec.event, Event::Flush { .. } | Event::Fence { .. }) { self.site } else { 0 };
            self.out.push((rec.index, rec.tid, rec.event.to_owned(), site));
        }
        fn thread(&mut self, _tid: u32) {
            self.site = 0;
        }
        fn site(&mut self, site: u32) {
            self.site = site;
        }
    }

    /// The fast path where it applies, the careful one for the rest.
    fn fast(p: &[u8]) -> Sited {
        let mut c = Collect::default();
        let e = BlockDecoder::new(p, false, 3).visit_all(&mut c).err();
        (c.out, e)
    }

    /// The careful path alone.
    fn careful(p: &[u8]) -> Sited {
        let mut c = Collect::default();
        let mut d = BlockDecoder::new(p, false, 3);
        c.thread(0);
        loop {
            match d.visit_next(&mut c) {
                Ok(true) => {}
                Ok(false) => return (c.out, None),
                Err(e) => return (c.out, Some(e)),
            }
        }
    }

    /// Flushes and fences with and without sites (some past 32 bits, some
    /// with reserved kinds), SITE records, stores and thread switches, with
    /// varints of one to ten bytes.
    fn payload() -> impl Strategy<Value = Vec<u8>> {
        let varint = (1usize..11, any::<u64>()).prop_map(|(n, x)| {
            let mut v: Vec<u8> = (0..n).map(|i| (x >> (7 * i)) as u8 | 0x80).collect();
            v[n - 1] &= 0x7f;
            v
        });
        let small = (0u64..300).prop_map(|x| {
            let mut v = Vec::new();
            crate::varint::put(&mut v, x);
            v
        });
        let piece = prop_oneof![
            4 => (0u8..16).prop_map(|x| vec![x << 4 | K_FLUSH]),
            3 => (0u8..16).prop_map(|x| vec![x << 4 | K_FENCE]),
            2 => (0u8..16).prop_map(|x| vec![x << 4 | K_SITE]),
            2 => (0u8..16).prop_map(|x| vec![x << 4 | K_STORE]),
            1 => (0u8..3).prop_map(|x| vec![x << 4 | K_THREAD]),
            4 => small,
            1 => varint,
        ];
        proptest::collection::vec(piece, 0..80).prop_map(|v| v.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

        /// Both paths give the same events at the same sites, and the same error.
        #[test]
        fn fast_and_careful_paths_agree_on_sites(p in payload()) {
            prop_assert_eq!(fast(&p), careful(&p));
        }
    }

    #[test]
    fn a_flush_or_fence_sets_the_site_it_names_and_the_next_keep_it() {
        // clwb with site 3 and line delta +2 (line 64: the cursor's line is
        // -1 at first); fence with site 200 (two bytes); flush of the same
        // line without a site; fence after a thread switch.
        let p = [
            K_FLUSH | X_SITE << 4,
            3,
            4,
            K_FENCE | X_SITE << 4,
            0xc8,
            1,
            K_FLUSH | X_SAME << 4,
            K_THREAD | 1 << 4,
            K_FENCE,
        ];
        let (events, err) = fast(&p);
        assert_eq!(err, None);
        let sites: Vec<u32> = events.iter().map(|e| e.3).collect();
        assert_eq!(sites, [3, 200, 200, 0]);
        assert_eq!(events[0].2, OwnedEvent::Flush { kind: FlushKind::Clwb, line: 64 });
        assert_eq!((events, err), careful(&p));
        // Kind 3 is reserved for flushes and fences, as is bit 3 of a fence.
        for bad in [[K_FLUSH | 3 << 4, 0], [K_FENCE | 3 << 4, 0], [K_FENCE | 8 << 4, 0]] {
            let e = fast(&bad).1.expect("refused");
            assert!(e.problem.contains("unknown"), "{e:?}");
        }
        let e = fast(&[K_FENCE | X_SITE << 4, 0x80, 0x80, 0x80, 0x80, 0x10]).1.expect("refused");
        assert!(e.problem.contains("site id 4294967296 exceeds 32 bits"), "{e:?}");
    }
}
