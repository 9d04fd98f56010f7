//! The persistency model (ARCHITECTURE.md, "The persistency model"):
//! x86 with ADR. A store is durable once its line was flushed after it and
//! the flushing thread then fenced (a `clflush` needs no fence). Until then it
//! may or may not have reached PM; stores to one line reach it in program
//! order. [`PState`] replays a trace incrementally: the not-yet-durable
//! stores wait in per-line queues, and what becomes of each store goes to a
//! [`Persisted`] (the durable image, the images' base, the path signature).

use crate::load::{CrashTrace, Ev};
use pmsim_model::intmap::IntMap;
use std::collections::{BTreeSet, VecDeque};

/// What becomes of the stores of a replayed trace.
pub trait Persisted {
    /// Store piece `p` was made (it is pending); `first`: its line had no
    /// pending store before it.
    fn stored(&mut self, tr: &CrashTrace, p: u32, first: bool) {
        let _ = (tr, p, first);
    }

    /// Piece `p`, pending, is covered by a flush for the first time.
    fn flushed(&mut self, tr: &CrashTrace, p: u32) {
        let _ = (tr, p);
    }

    /// Piece `p` became durable; `last`: its line has no pending store left.
    fn durable(&mut self, tr: &CrashTrace, p: u32, last: bool);
}

/// The durable image itself: pieces are written to it as they become durable.
pub struct DurableImage<'a>(pub &'a mut [u8]);

impl Persisted for DurableImage<'_> {
    fn durable(&mut self, tr: &CrashTrace, p: u32, _last: bool) {
        write_piece(tr, p, self.0);
    }
}

/// The not-yet-durable stores of one line, oldest first.
#[derive(Default)]
struct LineQ {
    /// Stores of this line ever made durable (so flush marks stay valid).
    done: u64,
    /// Stores of this line ever covered by a flush (at least `done`).
    flushed: u64,
    pieces: VecDeque<u32>,
}

/// Replay state: pending stores per line, and flushes awaiting a fence.
#[derive(Default)]
pub struct PState {
    lines: IntMap<u64, LineQ>,
    /// Lines with pending stores, by offset (the order images number them in).
    pending: BTreeSet<u64>,
    /// Per thread: (line, stores of the line covered) of flushes not fenced yet.
    flushed: IntMap<u32, Vec<(u64, u64)>>,
    /// Lines whose pending stores changed since [`PState::take_changed`].
    changed: Vec<u64>,
}

impl PState {
    /// Applies event `e`, telling `out` what became of its stores.
    #[inline]
    pub fn apply(&mut self, tr: &CrashTrace, e: &Ev, out: &mut impl Persisted) {
        match *e {
            Ev::Store { piece, tid, nt } => {
                let line = tr.pieces[piece as usize].off & !63;
                let q = self.lines.entry(line).or_default();
                q.pieces.push_back(piece);
                let upto = q.done + q.pieces.len() as u64;
                out.stored(tr, piece, q.pieces.len() == 1);
                self.pending.insert(line);
                self.changed.push(line);
                if nt {
                    self.cover(tr, line, upto, out);
                    self.flushed.entry(tid).or_default().push((line, upto));
                }
            }
            Ev::Flush { tid, line, ordered, .. } => {
                let Some(q) = self.lines.get(&line) else { return };
                let upto = q.done + q.pieces.len() as u64;
                self.cover(tr, line, upto, out);
                if ordered {
                    self.persist(tr, line, upto, out);
                } else {
                    self.flushed.entry(tid).or_default().push((line, upto));
                }
            }
            Ev::Fence { tid, .. } => {
                if let Some(list) = self.flushed.get_mut(&tid) {
                    let mut list = std::mem::take(list);
                    for &(line, upto) in &list {
                        self.persist(tr, line, upto, out);
                    }
                    list.clear();
                    *self.flushed.get_mut(&tid).expect("listed") = list;
                }
            }
            _ => {}
        }
    }

    /// A flush covers the stores of `line` up to number `upto`.
    fn cover(&mut self, tr: &CrashTrace, line: u64, upto: u64, out: &mut impl Persisted) {
        let q = self.lines.get_mut(&line).expect("line has a queue");
        while q.flushed < upto {
            if q.flushed >= q.done {
                out.flushed(tr, q.pieces[(q.flushed - q.done) as usize]);
            }
            q.flushed += 1;
        }
    }

    /// Makes the stores of `line` up to number `upto` durable.
    fn persist(&mut self, tr: &CrashTrace, line: u64, upto: u64, out: &mut impl Persisted) {
        let q = self.lines.get_mut(&line).expect("line has a queue");
        if q.done < upto {
            self.changed.push(line);
        }
        while q.done < upto {
            let Some(p) = q.pieces.pop_front() else { break };
            q.done += 1;
            out.durable(tr, p, q.pieces.is_empty());
        }
        if q.pieces.is_empty() {
            self.pending.remove(&line);
        }
    }

    /// Every line with pending stores and those stores, oldest first, by line offset.
    pub fn pending(&self) -> Vec<(u64, Vec<u32>)> {
        self.pending_lines().map(|(l, q)| (l, q.iter().copied().collect())).collect()
    }

    /// [`PState::pending`] without copying.
    pub fn pending_lines(&self) -> impl Iterator<Item = (u64, &VecDeque<u32>)> + '_ {
        self.pending.iter().map(|l| (*l, &self.lines[l].pieces))
    }

    /// The lines whose pending stores changed since the last call, by offset.
    pub fn take_changed(&mut self) -> Vec<u64> {
        let mut v = std::mem::take(&mut self.changed);
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The pending stores of `line`, oldest first (`None`: it has none).
    pub fn pending_of(&self, line: u64) -> Option<&VecDeque<u32>> {
        self.lines.get(&line).filter(|q| !q.pieces.is_empty()).map(|q| &q.pieces)
    }

    /// How many lines have pending stores.
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }
}

/// Writes a store piece's bytes into `img`.
#[inline]
pub fn write_piece(tr: &CrashTrace, piece: u32, img: &mut [u8]) {
    let p = &tr.pieces[piece as usize];
    img[p.off as usize..p.off as usize + p.len as usize].copy_from_slice(tr.value(p));
}
