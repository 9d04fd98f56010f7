//! The persistency model (ARCHITECTURE.md, "The persistency model"):
//! x86 with ADR. A store is durable once its line was flushed after it and
//! the flushing thread then fenced (a `clflush` needs no fence). Until then it
//! may or may not have reached PM; stores to one line reach it in program
//! order. [`PState`] replays a trace incrementally: durable stores go into
//! the durable image, the others wait in per-line queues.

use crate::load::{CrashTrace, Ev};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// The not-yet-durable stores of one line, oldest first.
#[derive(Default)]
struct LineQ {
    /// Stores of this line ever made durable (so flush marks stay valid).
    done: u64,
    pieces: VecDeque<u32>,
}

/// Replay state: pending stores per line, and flushes awaiting a fence.
#[derive(Default)]
pub struct PState {
    lines: HashMap<u64, LineQ>,
    /// Lines with pending stores, by offset (the order images number them in).
    pending: BTreeMap<u64, ()>,
    /// Per thread: (line, stores of the line covered) of flushes not fenced yet.
    flushed: HashMap<u32, Vec<(u64, u64)>>,
}

impl PState {
    /// Applies event `e`; stores that become durable are written to `img`.
    #[inline]
    pub fn apply(&mut self, tr: &CrashTrace, e: &Ev, img: &mut [u8]) {
        match *e {
            Ev::Store { piece, tid, nt } => {
                let line = tr.pieces[piece as usize].off & !63;
                let q = self.lines.entry(line).or_default();
                q.pieces.push_back(piece);
                let upto = q.done + q.pieces.len() as u64;
                self.pending.insert(line, ());
                if nt {
                    self.flushed.entry(tid).or_default().push((line, upto));
                }
            }
            Ev::Flush { tid, line, ordered } => {
                let Some(q) = self.lines.get(&line) else { return };
                let upto = q.done + q.pieces.len() as u64;
                if ordered {
                    self.persist(tr, line, upto, img);
                } else {
                    self.flushed.entry(tid).or_default().push((line, upto));
                }
            }
            Ev::Fence { tid } => {
                if let Some(list) = self.flushed.get_mut(&tid) {
                    let list = std::mem::take(list);
                    for &(line, upto) in &list {
                        self.persist(tr, line, upto, img);
                    }
                    let mut list = list;
                    list.clear();
                    *self.flushed.get_mut(&tid).unwrap() = list;
                }
            }
            _ => {}
        }
    }

    /// Makes the stores of `line` up to number `upto` durable.
    fn persist(&mut self, tr: &CrashTrace, line: u64, upto: u64, img: &mut [u8]) {
        let q = self.lines.get_mut(&line).expect("line has a queue");
        while q.done < upto {
            let Some(p) = q.pieces.pop_front() else { break };
            write_piece(tr, p, img);
            q.done += 1;
        }
        if q.pieces.is_empty() {
            self.pending.remove(&line);
        }
    }

    /// Every line with pending stores and those stores, oldest first, by line offset.
    pub fn pending(&self) -> Vec<(u64, Vec<u32>)> {
        self.pending.keys().map(|l| (*l, self.lines[l].pieces.iter().copied().collect())).collect()
    }
}

/// Writes a store piece's bytes into `img`.
#[inline]
pub fn write_piece(tr: &CrashTrace, piece: u32, img: &mut [u8]) {
    let p = &tr.pieces[piece as usize];
    img[p.off as usize..p.off as usize + p.len as usize].copy_from_slice(tr.value(p));
}
