//! The persistent bookkeeping log (NVAlloc §5.3, Fig. 7–8): extent records
//! appended sequentially instead of updated in place in headers scattered over
//! the heap, so a large allocation or free costs one flush of a line near the
//! previous one rather than a random small write.
//!
//! # Layout (from the log area's base)
//!
//! | offset | content |
//! |---|---|
//! | 0 | log header (one line): magic, `heads[0]`, `heads[1]`, `alt` |
//! | 64 | chunk header table: per chunk 16 B = `id` u64, `next` u32 (index + 1, 0 = end), `active` u32 |
//! | ⌈64 + 16n⌉₁ₖ | `n` chunks of 1 KiB = 128 records of 8 B ([`super::record`]) |
//!
//! The active chunks form a singly linked list starting at `heads[alt]`; the
//! other head is used only while a slow GC builds the next list. Chunk ids
//! increase along the list (new chunks are appended at the tail), so the
//! volatile side keeps the list as a `BTreeMap` by id: the paper's red-black
//! tree of *vchunks*. Chunk headers live in a table beside the chunks so that
//! a chunk holds exactly 128 records.
//!
//! Within a chunk, the k-th record goes to slot k (sequential) or to line
//! k mod 16, word k / 16 (interleaved: consecutive appends on different lines,
//! so appending never reflushes the line just flushed).
//!
//! # Deletion, tombstones and GC
//!
//! Freeing an extent appends a *tombstone* naming the log position (chunk id,
//! slot) of its record, and clears that record's bit in its vchunk. A
//! tombstone must survive as long as the chunk holding its target is in the
//! list — else recovery would resurrect the target — so a tombstone has a live
//! bit of its own until the target's chunk is unlinked (a tombstone in the
//! same chunk as its target needs none). Positions carry the chunk *id*, which
//! is new every time a chunk is (re)used, so a stale tombstone can never hit a
//! record of a later incarnation of the chunk.
//!
//! * **Fast GC** unlinks chunks whose vchunk bitmap is empty (one pointer
//!   write each; no record is read).
//! * **Slow GC** copies the live records to a fresh list, then flips `alt`
//!   durably, then recycles the old chunks. A crash before the flip leaves the
//!   old list in charge; the half-built new one is just free chunks.
//!
//! When to run which is the allocator's policy; this module only offers them.

use super::record::Record;
use crate::pm::PmThread;
use std::collections::BTreeMap;

/// Bytes per chunk.
pub const CHUNK_BYTES: u64 = 1024;
/// Records per chunk.
pub const CHUNK_RECORDS: u32 = 128;
/// Lines per chunk: interleaved, the k-th record goes to line k mod 16.
pub const CHUNK_LINES: u32 = 16;
const RECORDS_PER_LINE: u32 = 8;
/// The layout of the module documentation, public for readers of traces
/// (`pmsim specs validate` decodes the log's stores with it).
pub const CHUNK_HEADER_BYTES: u64 = 16;
pub const TABLE_OFF: u64 = 64;
const MAGIC: u64 = u64::from_le_bytes(*b"NVBKLOG1");
pub const OFF_HEADS: u64 = 8;
pub const OFF_ALT: u64 = 24;
/// Bits of a position that name the slot.
const SLOT_BITS: u32 = 7;

/// Where a record sits: chunk id and physical slot. Stable until a slow GC
/// moves the record (which reports the new position).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogPos(u64);

impl LogPos {
    fn new(id: u64, slot: u32) -> LogPos {
        LogPos(id << SLOT_BITS | slot as u64)
    }

    pub fn id(self) -> u64 {
        self.0 >> SLOT_BITS
    }

    pub fn slot(self) -> u32 {
        (self.0 & ((1 << SLOT_BITS) - 1)) as u32
    }

    /// The raw value a tombstone stores.
    pub fn raw(self) -> u64 {
        self.0
    }

    /// The position a tombstone's raw value names.
    pub fn from_raw(raw: u64) -> LogPos {
        LogPos(raw)
    }
}

/// No free chunk is left for an append; run GC and retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogFull;

/// What the log has done, for reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LogStats {
    pub appends: u64,
    pub tombstones: u64,
    pub fast_gc_runs: u64,
    pub fast_gc_freed: u64,
    pub slow_gc_runs: u64,
    pub slow_gc_moved: u64,
}

/// The volatile shadow of an active chunk.
#[derive(Clone, Debug)]
struct VChunk {
    idx: u32,
    /// Live records and live tombstones, by physical slot.
    live: [u64; 2],
    /// Records written so far (logical order).
    fill: u32,
    /// Tombstones elsewhere whose target is in this chunk: they die with it.
    tombs_into: Vec<LogPos>,
}

impl VChunk {
    fn new(idx: u32) -> VChunk {
        VChunk { idx, live: [0; 2], fill: 0, tombs_into: Vec::new() }
    }

    fn set(&mut self, slot: u32) {
        self.live[(slot / 64) as usize] |= 1 << (slot % 64);
    }

    fn clear(&mut self, slot: u32) -> bool {
        let (w, m) = ((slot / 64) as usize, 1u64 << (slot % 64));
        let was = self.live[w] & m != 0;
        self.live[w] &= !m;
        was
    }

    fn test(&self, slot: u32) -> bool {
        self.live[(slot / 64) as usize] >> (slot % 64) & 1 == 1
    }

    fn is_dead(&self) -> bool {
        self.live == [0; 2]
    }
}

/// A bookkeeping log in the area `[base, base + bytes)`.
#[derive(Debug)]
pub struct BkLog {
    base: u64,
    nchunks: u32,
    chunks_off: u64,
    interleaved: bool,
    /// Whether a slow GC flushes the `alt` bit it flips (false only in a
    /// broken variant of the allocator, for the crash checkers to catch).
    alt_flush: bool,
    alt: u64,
    list: BTreeMap<u64, VChunk>,
    free: Vec<u32>,
    next_id: u64,
    live_records: u64,
    stats: LogStats,
}

/// Number of chunks an area of `bytes` holds, and where the first one starts
/// (from the area's base).
pub fn geometry(bytes: u64) -> (u32, u64) {
    let mut n = bytes / (CHUNK_BYTES + CHUNK_HEADER_BYTES);
    while n > 0 && chunks_start(n) + n * CHUNK_BYTES > bytes {
        n -= 1;
    }
    (n.min(u32::MAX as u64) as u32, chunks_start(n))
}

fn chunks_start(n: u64) -> u64 {
    (TABLE_OFF + n * CHUNK_HEADER_BYTES).next_multiple_of(CHUNK_BYTES)
}

impl BkLog {
    /// Whether a slow GC flushes the `alt` bit it flips (the fence stays):
    /// `false` is a broken variant for the crash checkers.
    pub fn set_alt_flush(&mut self, alt_flush: bool) {
        self.alt_flush = alt_flush;
    }

    /// The fewest chunks a usable log has.
    pub const MIN_CHUNKS: u32 = 4;

    /// Formats an empty log in `[base, base + bytes)` (64 B aligned).
    pub fn format(t: &mut PmThread, base: u64, bytes: u64, interleaved: bool) -> Result<BkLog, String> {
        let log = BkLog::empty(base, bytes, interleaved)?;
        t.store_u64(base + OFF_HEADS, 0);
        t.store_u64(base + OFF_HEADS + 8, 0);
        t.store_u64(base + OFF_ALT, 0);
        t.persist(base, 64);
        t.store_u64(base, MAGIC);
        t.persist(base, 8);
        Ok(log)
    }

    fn empty(base: u64, bytes: u64, interleaved: bool) -> Result<BkLog, String> {
        assert!(base & 63 == 0, "log area at {base:#x} is not cache-line aligned");
        let (nchunks, start) = geometry(bytes);
        if nchunks < BkLog::MIN_CHUNKS {
            return Err(format!("a bookkeeping log of {bytes} bytes holds fewer than {} chunks", BkLog::MIN_CHUNKS));
        }
        Ok(BkLog {
            base,
            nchunks,
            chunks_off: base + start,
            interleaved,
            alt_flush: true,
            alt: 0,
            list: BTreeMap::new(),
            free: (0..nchunks).rev().collect(),
            next_id: 1,
            live_records: 0,
            stats: LogStats::default(),
        })
    }

    fn header_off(&self, idx: u32) -> u64 {
        self.base + TABLE_OFF + idx as u64 * CHUNK_HEADER_BYTES
    }

    fn slot_off(&self, idx: u32, slot: u32) -> u64 {
        self.chunks_off + idx as u64 * CHUNK_BYTES + slot as u64 * 8
    }

    /// The physical slot of the k-th record of a chunk.
    #[inline]
    fn slot_of(&self, k: u32) -> u32 {
        if self.interleaved {
            (k % CHUNK_LINES) * RECORDS_PER_LINE + k / CHUNK_LINES
        } else {
            k
        }
    }

    /// Writes a fresh, empty chunk header and zeroed records; not yet linked,
    /// so one fence covers it with whatever links it.
    fn init_chunk(&mut self, t: &mut PmThread, idx: u32, id: u64, next: u32, records: &[u64; 128]) {
        let mut bytes = [0u8; CHUNK_BYTES as usize];
        for (i, r) in records.iter().enumerate() {
            bytes[i * 8..i * 8 + 8].copy_from_slice(&r.to_le_bytes());
        }
        let at = self.slot_off(idx, 0);
        t.store_bytes(at, &bytes);
        t.flush_range(at, CHUNK_BYTES);
        let h = self.header_off(idx);
        t.store_u64(h, id);
        t.store(h + 8, next);
        t.store(h + 12, 1u32);
        t.flush(h);
    }

    /// Appends `w` at the tail of the active list, making a new tail chunk if
    /// needed; durable on return.
    fn append_word(&mut self, t: &mut PmThread, w: u64) -> Result<LogPos, LogFull> {
        let tail_full = match self.list.last_key_value() {
            Some((_, c)) => c.fill == CHUNK_RECORDS,
            None => true,
        };
        if tail_full {
            let idx = self.free.pop().ok_or(LogFull)?;
            let id = self.next_id;
            self.next_id += 1;
            self.init_chunk(t, idx, id, 0, &[0; 128]);
            t.fence();
            match self.list.last_key_value() {
                Some((_, prev)) => {
                    let h = self.header_off(prev.idx) + 8;
                    t.store(h, idx + 1);
                    t.persist(h, 4);
                }
                None => {
                    let h = self.base + OFF_HEADS + 8 * self.alt;
                    t.store_u64(h, idx as u64 + 1);
                    t.persist(h, 8);
                }
            }
            self.list.insert(id, VChunk::new(idx));
        }
        let (id, idx, k) = self.list.last_key_value().map(|(&id, c)| (id, c.idx, c.fill)).expect("a tail chunk");
        let slot = self.slot_of(k);
        let at = self.slot_off(idx, slot);
        t.store_u64(at, w);
        t.persist(at, 8);
        self.list.get_mut(&id).expect("tail").fill += 1;
        Ok(LogPos::new(id, slot))
    }

    /// Appends an extent record durably; its position names it for [`BkLog::delete`].
    pub fn append(&mut self, t: &mut PmThread, r: Record) -> Result<LogPos, LogFull> {
        debug_assert!(matches!(r, Record::Extent { .. }), "append takes extent records");
        let pos = self.append_word(t, r.encode())?;
        self.list.get_mut(&pos.id()).expect("tail").set(pos.slot());
        self.live_records += 1;
        self.stats.appends += 1;
        Ok(pos)
    }

    /// Deletes the record at `target` by appending a tombstone (durable on return).
    ///
    /// # Panics
    /// If `target` is not a live record of the active list.
    pub fn delete(&mut self, t: &mut PmThread, target: LogPos) -> Result<(), LogFull> {
        assert!(self.is_live(target), "bookkeeping log: delete of {target:?}, which is not a live record");
        let tomb = self.append_word(t, Record::Tombstone { target: target.raw() }.encode())?;
        self.list.get_mut(&target.id()).expect("target chunk").clear(target.slot());
        if tomb.id() != target.id() {
            self.list.get_mut(&tomb.id()).expect("tail").set(tomb.slot());
            self.list.get_mut(&target.id()).expect("target chunk").tombs_into.push(tomb);
        }
        self.live_records -= 1;
        self.stats.tombstones += 1;
        Ok(())
    }

    /// Fast GC: unlinks every chunk (but the tail) with no live record or
    /// tombstone; returns how many.
    pub fn fast_gc(&mut self, t: &mut PmThread) -> u32 {
        self.stats.fast_gc_runs += 1;
        let mut freed = 0;
        loop {
            let tail = self.list.last_key_value().map(|(&id, _)| id);
            let dead: Vec<u64> =
                self.list.iter().filter(|(&id, c)| Some(id) != tail && c.is_dead()).map(|(&id, _)| id).collect();
            if dead.is_empty() {
                break;
            }
            for id in dead {
                self.unlink(t, id);
                freed += 1;
            }
        }
        self.stats.fast_gc_freed += freed as u64;
        freed
    }

    fn unlink(&mut self, t: &mut PmThread, id: u64) {
        let next = self.list.range(id + 1..).next().map_or(0, |(_, c)| c.idx + 1);
        match self.list.range(..id).next_back() {
            Some((_, prev)) => {
                let h = self.header_off(prev.idx) + 8;
                t.store(h, next);
                t.persist(h, 4);
            }
            None => {
                let h = self.base + OFF_HEADS + 8 * self.alt;
                t.store_u64(h, next as u64);
                t.persist(h, 8);
            }
        }
        let c = self.list.remove(&id).expect("unlinked chunk");
        self.free.push(c.idx);
        for tomb in c.tombs_into {
            if let Some(holder) = self.list.get_mut(&tomb.id()) {
                holder.clear(tomb.slot());
            }
        }
    }

    /// Slow GC: copies the live records to a new list, flips `alt` durably and
    /// recycles the old chunks. Returns every live record with its new position.
    /// Fails (changing nothing) if there are not enough free chunks.
    pub fn slow_gc(&mut self, t: &mut PmThread) -> Result<Vec<(Record, LogPos)>, LogFull> {
        let mut live = Vec::with_capacity(self.live_records as usize);
        for c in self.list.values() {
            for w in 0..2 {
                let mut bits = c.live[w];
                while bits != 0 {
                    let slot = w as u32 * 64 + bits.trailing_zeros();
                    bits &= bits - 1;
                    let word = t.load_u64(self.slot_off(c.idx, slot));
                    if let Ok(Some(r @ Record::Extent { .. })) = Record::decode(word) {
                        live.push((r, word));
                    }
                }
            }
        }
        let need = live.len().div_ceil(CHUNK_RECORDS as usize);
        if self.free.len() < need {
            return Err(LogFull);
        }
        self.stats.slow_gc_runs += 1;
        self.stats.slow_gc_moved += live.len() as u64;
        let new_alt = 1 - self.alt;
        let idxs: Vec<u32> = (0..need).map(|_| self.free.pop().expect("counted")).collect();
        let mut list = BTreeMap::new();
        let mut moved = Vec::with_capacity(live.len());
        for (i, batch) in live.chunks(CHUNK_RECORDS as usize).enumerate() {
            let (idx, id) = (idxs[i], self.next_id);
            self.next_id += 1;
            let mut records = [0u64; 128];
            let mut vc = VChunk::new(idx);
            for (k, &(r, word)) in batch.iter().enumerate() {
                let slot = self.slot_of(k as u32);
                records[slot as usize] = word;
                vc.set(slot);
                moved.push((r, LogPos::new(id, slot)));
            }
            vc.fill = batch.len() as u32;
            let next = idxs.get(i + 1).map_or(0, |&n| n + 1);
            self.init_chunk(t, idx, id, next, &records);
            list.insert(id, vc);
        }
        let head = self.base + OFF_HEADS + 8 * new_alt;
        t.store_u64(head, idxs.first().map_or(0, |&i| i as u64 + 1));
        t.persist(head, 8);
        t.store_u64(self.base + OFF_ALT, new_alt);
        if !self.alt_flush {
            t.fence();
        } else {
            t.persist(self.base + OFF_ALT, 8);
        }
        let old = std::mem::replace(&mut self.list, list);
        self.free.extend(old.values().map(|c| c.idx));
        self.alt = new_alt;
        Ok(moved)
    }

    /// Reads the log in `[base, base + bytes)` after a restart: follows the
    /// list named by `alt`, applies tombstones, rebuilds the vchunks. Returns
    /// the log and every live record with its position.
    pub fn recover(
        t: &PmThread,
        base: u64,
        bytes: u64,
        interleaved: bool,
    ) -> Result<(BkLog, Vec<(Record, LogPos)>), String> {
        let mut log = BkLog::empty(base, bytes, interleaved)?;
        if t.load_u64(base) != MAGIC {
            return Err("bookkeeping log: bad magic".into());
        }
        log.alt = t.load_u64(base + OFF_ALT);
        if log.alt > 1 {
            return Err(format!("bookkeeping log: alt bit is {}", log.alt));
        }
        let mut head = t.load_u64(base + OFF_HEADS + 8 * log.alt);
        let mut used = vec![false; log.nchunks as usize];
        let mut records: BTreeMap<LogPos, Record> = BTreeMap::new();
        let mut tombs: Vec<(LogPos, LogPos)> = Vec::new();
        let mut last_id = 0;
        while head != 0 {
            let idx = head - 1;
            if idx >= log.nchunks as u64 || used[idx as usize] {
                return Err(format!("bookkeeping log: chunk list broken at chunk index {idx}"));
            }
            let idx = idx as u32;
            used[idx as usize] = true;
            let h = log.header_off(idx);
            let (id, next, active) = (t.load_u64(h), t.load::<u32>(h + 8), t.load::<u32>(h + 12));
            if active != 1 || id <= last_id || id >= 1 << (64 - 2 - SLOT_BITS) {
                return Err(format!("bookkeeping log: chunk {idx} has id {id}, active {active} (after id {last_id})"));
            }
            last_id = id;
            let mut vc = VChunk::new(idx);
            for slot in 0..CHUNK_RECORDS {
                let w = t.load_u64(log.slot_off(idx, slot));
                let pos = LogPos::new(id, slot);
                match Record::decode(w).map_err(|e| format!("bookkeeping log chunk {idx} slot {slot}: {e}"))? {
                    None => continue,
                    Some(Record::Tombstone { target }) => tombs.push((pos, LogPos(target))),
                    Some(r) => {
                        records.insert(pos, r);
                    }
                }
                vc.fill += 1;
            }
            log.list.insert(id, vc);
            head = next as u64;
        }
        for &(tomb, target) in &tombs {
            if records.remove(&target).is_some() && tomb.id() != target.id() {
                log.list.get_mut(&tomb.id()).expect("listed").set(tomb.slot());
                log.list.get_mut(&target.id()).expect("listed").tombs_into.push(tomb);
            }
        }
        for pos in records.keys() {
            log.list.get_mut(&pos.id()).expect("listed").set(pos.slot());
        }
        log.live_records = records.len() as u64;
        log.next_id = last_id + 1;
        log.free = (0..log.nchunks).rev().filter(|&i| !used[i as usize]).collect();
        Ok((log, records.into_iter().map(|(p, r)| (r, p)).collect()))
    }

    /// Whether one more record fits without GC.
    pub fn has_room(&self) -> bool {
        !self.free.is_empty() || self.list.last_key_value().is_some_and(|(_, c)| c.fill < CHUNK_RECORDS)
    }

    /// Whether `pos` holds a live record or tombstone.
    pub fn is_live(&self, pos: LogPos) -> bool {
        self.list.get(&pos.id()).is_some_and(|c| c.test(pos.slot()))
    }

    /// Bytes of chunks in the active list (the paper's log file size).
    pub fn used_bytes(&self) -> u64 {
        self.list.len() as u64 * CHUNK_BYTES
    }

    /// Bytes of all chunks.
    pub fn capacity_bytes(&self) -> u64 {
        self.nchunks as u64 * CHUNK_BYTES
    }

    pub fn free_chunks(&self) -> usize {
        self.free.len()
    }

    pub fn live_records(&self) -> u64 {
        self.live_records
    }

    pub fn stats(&self) -> LogStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mech::record::{ExtentKind, PAGE};
    use crate::{FlushInsn, Heap, Pm};
    use std::collections::HashMap;

    const BASE: u64 = 8192;

    fn live_set(records: &[(Record, LogPos)]) -> HashMap<u64, LogPos> {
        records
            .iter()
            .map(|&(r, p)| match r {
                Record::Extent { addr, .. } => (addr, p),
                Record::Tombstone { .. } => panic!("tombstone returned as live"),
            })
            .collect()
    }

    /// Random appends and deletes against a model, with fast and slow GCs and
    /// recoveries in between: recovery must always find exactly the model's
    /// live records at the positions the log reported (chunks are reused by
    /// then, so a stale tombstone hitting a new record would show).
    #[test]
    fn appends_deletes_gcs_and_recoveries_agree_with_a_model() {
        let d = tempfile::tempdir().unwrap();
        let heap = Heap::create(d.path().join("h"), 1 << 20).unwrap();
        let pm = Pm::native(&heap, FlushInsn::None).unwrap();
        let mut t = pm.thread(0);
        for interleaved in [false, true] {
            let bytes = 24 * 1024;
            let mut log = BkLog::format(&mut t, BASE, bytes, interleaved).unwrap();
            let mut model: HashMap<u64, LogPos> = HashMap::new();
            let mut rng = 0x1234_5678_9abc_def1u64;
            let mut next = || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            let mut addr = 0u64;
            let mut gcs = 0;
            for step in 0..6000 {
                let r = next() % 100;
                if r < 55 && model.len() < 600 {
                    addr += PAGE;
                    let rec = Record::Extent { kind: ExtentKind::Normal, addr, size: PAGE * (1 + next() % 8) };
                    let pos = match log.append(&mut t, rec) {
                        Ok(p) => p,
                        Err(LogFull) => {
                            log.fast_gc(&mut t);
                            if !log.has_room() {
                                model = live_set(&log.slow_gc(&mut t).unwrap());
                            }
                            log.append(&mut t, rec).unwrap()
                        }
                    };
                    model.insert(addr, pos);
                } else if r < 97 && !model.is_empty() {
                    let k = *model.keys().nth((next() % model.len() as u64) as usize).unwrap();
                    let pos = model.remove(&k).unwrap();
                    if log.delete(&mut t, pos).is_err() {
                        log.fast_gc(&mut t);
                        let moved = live_set(&log.slow_gc(&mut t).unwrap());
                        model = moved.iter().filter(|(a, _)| model.contains_key(a)).map(|(&a, &p)| (a, p)).collect();
                        log.delete(&mut t, moved[&k]).unwrap();
                    }
                } else if r < 99 {
                    log.fast_gc(&mut t);
                } else {
                    model = live_set(&log.slow_gc(&mut t).unwrap());
                }
                assert_eq!(log.live_records(), model.len() as u64);
                if step % 500 == 0 || step == 5999 {
                    let (rec, records) = BkLog::recover(&t, BASE, bytes, interleaved).unwrap();
                    assert_eq!(live_set(&records), model, "step {step}: recovered live records");
                    assert_eq!(rec.used_bytes(), log.used_bytes());
                    assert_eq!(rec.free_chunks(), log.free_chunks());
                    gcs += log.stats().fast_gc_freed + log.stats().slow_gc_runs;
                    log = rec;
                }
            }
            assert!(gcs > 0, "the test exercises GC");
        }
    }

    #[test]
    fn interrupted_slow_gc_falls_back_to_the_old_list() {
        let d = tempfile::tempdir().unwrap();
        let heap = Heap::create(d.path().join("h"), 1 << 20).unwrap();
        let pm = Pm::native(&heap, FlushInsn::None).unwrap();
        let mut t = pm.thread(0);
        let bytes = 16 * 1024;
        let mut log = BkLog::format(&mut t, BASE, bytes, true).unwrap();
        let mut pos = Vec::new();
        for i in 1..=300u64 {
            pos.push(
                log.append(&mut t, Record::Extent { kind: ExtentKind::Slab, addr: i * PAGE, size: PAGE }).unwrap(),
            );
        }
        for p in pos.iter().step_by(2) {
            log.delete(&mut t, *p).unwrap();
        }
        // Simulate a crash after the new list was built but before the alt
        // flip: run a slow GC, then put the old alt bit back.
        let alt = t.load_u64(BASE + OFF_ALT);
        let before = live_set(&BkLog::recover(&t, BASE, bytes, true).unwrap().1);
        log.slow_gc(&mut t).unwrap();
        let after = live_set(&BkLog::recover(&t, BASE, bytes, true).unwrap().1);
        assert_eq!(before.keys().collect::<std::collections::BTreeSet<_>>(), after.keys().collect());
        t.store_u64(BASE + OFF_ALT, alt);
        let (_, old) = BkLog::recover(&t, BASE, bytes, true).unwrap();
        assert_eq!(live_set(&old), before, "the old list is intact");
        assert_eq!(before.len(), 150);
    }
}
