//! Flush hygiene (`pmsim lint`): flushes and fences that do nothing, and
//! stores that never become durable, each counted and charged to the code
//! site that issued it.
//!
//! A line's state: whether it holds stores not yet flushed (dirty), whether
//! it was ever written, and which thread's fence it waits for after a flush.
//! A store is durable once its line was flushed and the flushing thread
//! fenced (or, for a non-temporal store, once its thread fenced).

use pmsim_traces::{line_of, Event, FenceKind, Record, SiteTable, Visit};
use serde::Serialize;
use std::collections::HashMap;

/// The kinds of finding, by their `--deny` names (JSON prints the same
/// names, [`Finding::name`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Finding {
    /// A flush of a line with no store to it since its previous flush.
    RedundantFlush,
    /// A flush of a line no store ever wrote.
    UnwrittenFlush,
    /// A fence with no flush or non-temporal store of its thread since the
    /// thread's previous fence.
    EmptyFence,
    /// A line stored to but not durable when the trace ends.
    NotDurable,
    /// A flush of the line the same thread flushed last (reflush distance 0).
    ReflushDistance0,
}

impl Serialize for Finding {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl Finding {
    pub const ALL: [Finding; 5] = [
        Finding::RedundantFlush,
        Finding::UnwrittenFlush,
        Finding::EmptyFence,
        Finding::NotDurable,
        Finding::ReflushDistance0,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Finding::RedundantFlush => "redundant-flush",
            Finding::UnwrittenFlush => "unwritten-flush",
            Finding::EmptyFence => "empty-fence",
            Finding::NotDurable => "not-durable",
            Finding::ReflushDistance0 => "reflush-distance-0",
        }
    }

    pub fn doc(self) -> &'static str {
        match self {
            Finding::RedundantFlush => "flush of a line with no store since its previous flush",
            Finding::UnwrittenFlush => "flush of a line never written",
            Finding::EmptyFence => "sfence/mfence with no flush or non-temporal store pending in its thread",
            Finding::NotDurable => "line stored to but not durable at the end of the trace (lines)",
            Finding::ReflushDistance0 => "flush of the line its thread flushed last (distance 0)",
        }
    }

    pub fn from_name(s: &str) -> Option<Finding> {
        Finding::ALL.into_iter().find(|f| f.name() == s)
    }
}

/// Line state bits.
const DIRTY: u64 = 1;
const WRITTEN: u64 = 2;
/// Flushed (or written non-temporally); durable at its thread's next fence.
const PENDING: u64 = 4;

#[derive(Default)]
struct ThreadState {
    /// Lines flushed or written non-temporally since the last fence.
    pending: Vec<u64>,
    last_flush: Option<u64>,
}

/// Replays a trace's events and collects the findings.
#[derive(Default)]
pub struct Linter {
    /// Line → state bits (bits 3.. hold the pending thread + 1).
    lines: HashMap<u64, u64>,
    threads: Vec<ThreadState>,
    site: u32,
    counts: HashMap<(Finding, u32), u64>,
}

impl Linter {
    fn thread(&mut self, tid: u32) -> &mut ThreadState {
        let t = tid as usize;
        if self.threads.len() <= t {
            self.threads.resize_with(t + 1, ThreadState::default);
        }
        &mut self.threads[t]
    }

    fn found(&mut self, f: Finding) {
        *self.counts.entry((f, self.site)).or_insert(0) += 1;
    }

    fn state(&self, line: u64) -> u64 {
        self.lines.get(&line).copied().unwrap_or(0)
    }

    fn set(&mut self, line: u64, s: u64) {
        self.lines.insert(line, s);
    }

    fn store(&mut self, addr: u64, size: u32, tid: u32, nt: bool) {
        let end = addr.saturating_add(size.max(1) as u64);
        let mut line = line_of(addr);
        while line < end {
            let s = (self.state(line) & WRITTEN) | WRITTEN;
            if nt {
                self.set(line, s | PENDING | ((tid as u64 + 1) << 3));
                self.thread(tid).pending.push(line);
            } else {
                self.set(line, s | DIRTY);
            }
            line += 64;
        }
    }

    fn flush(&mut self, tid: u32, line: u64) {
        let s = self.state(line);
        if s & WRITTEN == 0 {
            self.found(Finding::UnwrittenFlush);
        } else if s & DIRTY == 0 {
            self.found(Finding::RedundantFlush);
        }
        if self.thread(tid).last_flush == Some(line) {
            self.found(Finding::ReflushDistance0);
        }
        self.thread(tid).last_flush = Some(line);
        if s & DIRTY != 0 {
            self.set(line, (s & WRITTEN) | PENDING | ((tid as u64 + 1) << 3));
        }
        self.thread(tid).pending.push(line);
    }

    /// A fence of thread `tid`; a locked read-modify-write (`explicit` false)
    /// orders like one but is there for its atomic update, so it is never an
    /// empty fence.
    fn fence(&mut self, tid: u32, explicit: bool) {
        let pending = std::mem::take(&mut self.thread(tid).pending);
        if pending.is_empty() && explicit {
            self.found(Finding::EmptyFence);
        }
        for &line in &pending {
            let s = self.state(line);
            if s & PENDING != 0 && s >> 3 == tid as u64 + 1 {
                self.set(line, s & (WRITTEN | DIRTY));
            }
        }
        let mut pending = pending;
        pending.clear();
        self.thread(tid).pending = pending;
    }

    /// The findings, with the sites named from `sites`.
    pub fn report(&self, sites: &SiteTable, top: usize) -> LintReport {
        let mut lines: Vec<u64> =
            self.lines.iter().filter(|(_, &s)| s & (DIRTY | PENDING) != 0).map(|(&l, _)| l).collect();
        lines.sort_unstable();
        let findings = Finding::ALL
            .into_iter()
            .map(|f| {
                let mut by_site: Vec<(u32, u64)> =
                    self.counts.iter().filter(|((k, _), _)| *k == f).map(|((_, s), &n)| (*s, n)).collect();
                by_site.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                let count =
                    if f == Finding::NotDurable { lines.len() as u64 } else { by_site.iter().map(|x| x.1).sum() };
                FindingReport {
                    kind: f,
                    doc: f.doc(),
                    count,
                    top_sites: by_site
                        .into_iter()
                        .take(top)
                        .map(|(site, count)| SiteCount { site, name: sites.label(site), count })
                        .collect(),
                    examples: if f == Finding::NotDurable { lines.iter().take(top).copied().collect() } else { vec![] },
                }
            })
            .collect();
        LintReport { findings }
    }
}

impl<'a> Visit<'a> for Linter {
    fn event(&mut self, rec: &Record<'a>) {
        match rec.event {
            Event::Store { addr, size, .. } => self.store(addr, size, rec.tid, false),
            Event::NtStore { addr, size, .. } => self.store(addr, size, rec.tid, true),
            Event::Flush { line, .. } => self.flush(rec.tid, line),
            Event::Fence { kind } => self.fence(rec.tid, kind != FenceKind::LockedRmw),
            _ => {}
        }
    }

    fn thread(&mut self, _tid: u32) {
        self.site = 0;
    }

    fn site(&mut self, site: u32) {
        self.site = site;
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct SiteCount {
    pub site: u32,
    pub name: String,
    pub count: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct FindingReport {
    pub kind: Finding,
    pub doc: &'static str,
    pub count: u64,
    /// The sites with the most findings of this kind (not for `not-durable`,
    /// whose stores carry no site).
    pub top_sites: Vec<SiteCount>,
    /// For `not-durable`: the first lines (addresses) not durable.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct LintReport {
    pub findings: Vec<FindingReport>,
}

impl LintReport {
    pub fn count(&self, f: Finding) -> u64 {
        self.findings.iter().find(|r| r.kind == f).map_or(0, |r| r.count)
    }
}
