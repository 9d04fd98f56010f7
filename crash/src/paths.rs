//! Coverage by code path. A steady-state run repeats a few code paths: the
//! millionth `malloc` of Threadtest persists through exactly the sites of
//! its first. Each crash point gets a *signature* from what the trace holds
//! there:
//!
//! * the crashing thread's operations in flight and the code site of the
//!   fence (or clflush) it crashes before;
//! * every other thread with an operation in flight: its operations and the
//!   site of its last fence;
//! * the classes of the pending stores: each store's region, the code site
//!   of the flush that eventually covers it (none if nothing ever does) and
//!   whether that flush has happened yet (the store awaits a fence) — as a
//!   set, so a thousand pending user-data lines count as one class. A store
//!   whose thread ends its operation before any flush covers it (a lazily
//!   persisted line: Makalu's mark bits and header links, flushed when a
//!   later operation evicts them from a table of dirty lines) is of one
//!   class per region, "flushed by a later operation": which later
//!   operation's flush that is depends on what the program does next, not
//!   on the code path that made the store, and naming it split Makalu's
//!   Threadtest into a thousand paths that differed only there.
//!
//! Points with one signature are one *path*. A removed flush changes the
//! signature of every point of its operation its store is pending at (the
//! store's class becomes "flushed by a later operation" or "never flushed"
//! instead of its flush's site, and it never awaits a fence there), so a
//! mutated run has paths the real one has not. [`plan`] explores the first point of
//! every path and `per_path - 1` more of its points, picked by a seeded hash
//! so they spread over the run (all points with [`Options::all_points`]).

use crate::load::{CrashTrace, Ev};
use crate::options::Options;
use crate::persist::{PState, Persisted};
use pmsim_model::intmap::IntMap;
use pmsim_traces::OpKind;
use serde::Serialize;
use std::collections::hash_map::DefaultHasher;
use std::collections::hash_map::Entry;
use std::collections::BinaryHeap;
use std::hash::{Hash, Hasher};

/// No flush ever covers the store.
const NEVER: u32 = u32::MAX;
/// A non-temporal store (covered as it is made).
const NON_TEMPORAL: u32 = u32::MAX - 1;
/// A store its own operation leaves pending: the flush that covers it runs
/// in a later operation (a lazily persisted line), so which one it is
/// follows from whatever the program does next, not from the code path
/// that made the store.
const LATER: u32 = u32::MAX - 2;

/// One crash point to explore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Planned {
    /// Its number among the fences and clflushes, and its event position.
    pub point: u64,
    pub pos: u32,
    /// Its path ([`Plan::paths`]).
    pub path: u32,
}

/// One code path: what its signature says, for people.
#[derive(Clone, Debug, Serialize)]
pub struct PathInfo {
    /// The crashing thread's operations and the code site it crashes before.
    pub at: String,
    /// The other threads with an operation in flight (operations, last fence site).
    pub others: Vec<String>,
    /// The classes of the pending stores: region, flush site, state.
    pub pending: Vec<String>,
    /// Selected points on this path, and the first of them.
    pub points: u64,
    pub first: u64,
}

/// The crash points an exploration visits, and the paths of all selected points.
#[derive(Debug, Default)]
pub struct Plan {
    /// Points the options select.
    pub selected: u64,
    /// The points to explore, in trace order.
    pub explore: Vec<Planned>,
    /// Every path of the selected points, numbered in order of first occurrence.
    pub paths: Vec<PathInfo>,
}

/// The signatures of the `selected` points (number, position) of `tr`, and
/// which of them to explore under `opts`.
pub fn plan(tr: &CrashTrace, opts: &Options, selected: &[(u64, u32)]) -> Plan {
    let cover = cover_sites(tr);
    let mut sig = Signatures { cover: &cover, classes: IntMap::default(), present: 0 };
    let mut ps = PState::default();
    let mut threads: IntMap<u32, ThreadState> = IntMap::default();
    let mut ids: IntMap<u64, u32> = IntMap::default();
    let mut paths: Vec<PathInfo> = Vec::new();
    let mut all: Vec<Planned> = Vec::with_capacity(selected.len());
    let mut cur = 0usize;
    for &(point, pos) in selected {
        for e in &tr.events[cur..pos as usize] {
            ps.apply(tr, e, &mut sig);
            track(&mut threads, e);
        }
        cur = pos as usize;
        let here = tr.events.get(pos as usize);
        let h = sig.hash(&threads, here);
        let path = *ids.entry(h).or_insert_with(|| {
            paths.push(sig.describe(tr, &threads, here, point));
            paths.len() as u32 - 1
        });
        paths[path as usize].points += 1;
        all.push(Planned { point, pos, path });
    }
    let explore = if opts.all_points || opts.point.is_some() { all } else { sample(&all, opts) };
    Plan { selected: selected.len() as u64, explore, paths }
}

/// The first point of every path and up to `per_path - 1` more, those with
/// the smallest seeded hash, in trace order.
fn sample(all: &[Planned], opts: &Options) -> Vec<Planned> {
    let extra = opts.per_path.max(1) as usize - 1;
    let mut first: IntMap<u32, usize> = IntMap::default();
    let mut more: IntMap<u32, BinaryHeap<(u64, usize)>> = IntMap::default();
    for (i, p) in all.iter().enumerate() {
        if let Entry::Vacant(v) = first.entry(p.path) {
            v.insert(i);
        } else if extra > 0 {
            let heap = more.entry(p.path).or_default();
            heap.push((hash_of(&(opts.seed, p.point)), i));
            if heap.len() > extra {
                heap.pop();
            }
        }
    }
    let mut keep: Vec<usize> = first.into_values().chain(more.into_values().flatten().map(|(_, i)| i)).collect();
    keep.sort_unstable();
    keep.into_iter().map(|i| all[i]).collect()
}

/// The site of the flush that first covers each piece of `tr` after it was
/// stored: [`NEVER`] if none, [`NON_TEMPORAL`] for a non-temporal store,
/// [`LATER`] if the storing thread's operation ended before that flush.
fn cover_sites(tr: &CrashTrace) -> Vec<u32> {
    let mut cover = vec![NEVER; tr.pieces.len()];
    // Per line: the pieces not covered yet, each with its thread and the
    // number of operations that thread had ended when it stored it.
    let mut uncovered: IntMap<u64, Vec<(u32, u32, u64)>> = IntMap::default();
    // Per thread: operations open, and operations ended.
    let mut ops: IntMap<u32, (u32, u64)> = IntMap::default();
    for e in &tr.events {
        match *e {
            Ev::Store { piece, nt: true, .. } => cover[piece as usize] = NON_TEMPORAL,
            Ev::Store { piece, tid, .. } => {
                let ended = ops.get(&tid).map_or(0, |o| o.1);
                uncovered.entry(tr.pieces[piece as usize].off & !63).or_default().push((piece, tid, ended));
            }
            Ev::Flush { line, site, .. } => {
                for (p, tid, ended) in uncovered.remove(&line).unwrap_or_default() {
                    let now = ops.get(&tid).map_or(0, |o| o.1);
                    cover[p as usize] = if now == ended { site } else { LATER };
                }
            }
            Ev::OpBegin { tid, .. } => ops.entry(tid).or_default().0 += 1,
            Ev::OpEnd { tid, .. } => {
                let o = ops.entry(tid).or_default();
                o.0 = o.0.saturating_sub(1);
                o.1 += (o.0 == 0) as u64;
            }
            _ => {}
        }
    }
    cover
}

/// A pending store's class: its region, the site of the flush that covers
/// it, and whether that flush has happened.
#[derive(Clone, Copy, Hash, PartialEq, Eq)]
struct Class {
    region: u32,
    cover: u32,
    flushed: bool,
}

/// A thread's operations in flight and its last fence site.
#[derive(Default, Hash)]
struct ThreadState {
    ops: Vec<u64>,
    fence: u32,
}

/// Follows the operations and fences of every thread.
fn track(threads: &mut IntMap<u32, ThreadState>, e: &Ev) {
    match *e {
        Ev::OpBegin { tid, op, .. } => threads.entry(tid).or_default().ops.push(op.code()),
        Ev::OpEnd { tid, op, .. } => {
            let t = threads.entry(tid).or_default();
            if let Some(i) = t.ops.iter().rposition(|&c| c == op.code()) {
                t.ops.remove(i);
            }
            if t.ops.is_empty() {
                t.fence = 0;
            }
        }
        Ev::Fence { tid, site } => threads.entry(tid).or_default().fence = site,
        _ => {}
    }
}

/// The pending classes present, kept as the replay goes.
struct Signatures<'a> {
    cover: &'a [u32],
    /// Per class: pending stores of it.
    classes: IntMap<Class, u64>,
    /// The XOR of the hashes of the classes present.
    present: u64,
}

impl Signatures<'_> {
    fn class(&self, tr: &CrashTrace, p: u32, flushed: bool) -> Class {
        Class { region: tr.pieces[p as usize].region, cover: self.cover[p as usize], flushed }
    }

    fn add(&mut self, c: Class, n: i64) {
        let count = self.classes.entry(c).or_default();
        let was = *count > 0;
        *count = (*count as i64 + n) as u64;
        if was != (*count > 0) {
            self.present ^= hash_of(&c);
        }
    }

    /// The signature of the point before `here` (`None`: the trace's end).
    fn hash(&self, threads: &IntMap<u32, ThreadState>, here: Option<&Ev>) -> u64 {
        let (tid, kind, site) = crashing(here);
        let mut others: Vec<u64> =
            threads.iter().filter(|(&t, s)| t != tid && !s.ops.is_empty()).map(|(_, s)| hash_of(s)).collect();
        others.sort_unstable();
        let mine = threads.get(&tid).map(|s| (&s.ops[..], s.fence));
        hash_of(&(kind, site, mine, others, self.present))
    }

    /// What the signature of the point numbered `point` says, for people.
    fn describe(&self, tr: &CrashTrace, threads: &IntMap<u32, ThreadState>, here: Option<&Ev>, point: u64) -> PathInfo {
        let (tid, kind, site) = crashing(here);
        let ops = |s: Option<&ThreadState>| match s.map(|s| &s.ops[..]).unwrap_or(&[]) {
            [] => "no operation".to_string(),
            v => v
                .iter()
                .map(|&c| OpKind::from_code(c).map_or(format!("op {c}"), |k| k.name()))
                .collect::<Vec<_>>()
                .join(" > "),
        };
        let mine = threads.get(&tid);
        let at = match kind {
            0 => "the end of the trace".to_string(),
            _ => format!(
                "{} before the {} at {}{}",
                ops(mine),
                ["", "fence", "clflush"][kind as usize],
                tr.sites.label(site),
                match mine.map_or(0, |s| s.fence) {
                    0 => String::new(),
                    f => format!(" (its last fence at {})", tr.sites.label(f)),
                }
            ),
        };
        let mut others: Vec<String> = threads
            .iter()
            .filter(|(&t, s)| t != tid && !s.ops.is_empty())
            .map(|(_, s)| format!("{} after the fence at {}", ops(Some(s)), tr.sites.label(s.fence)))
            .collect();
        others.sort();
        let mut pending: Vec<String> = self
            .classes
            .iter()
            .filter(|(_, &n)| n > 0)
            .map(|(c, _)| {
                let flush = match c.cover {
                    NEVER => "never flushed".to_string(),
                    NON_TEMPORAL => "non-temporal".to_string(),
                    LATER if c.flushed => "flushed by a later operation, awaiting a fence".to_string(),
                    LATER => "to be flushed by a later operation".to_string(),
                    s if c.flushed => format!("flushed at {}, awaiting a fence", tr.sites.label(s)),
                    s => format!("to be flushed at {}", tr.sites.label(s)),
                };
                format!("{}: {flush}", tr.region_names[c.region as usize])
            })
            .collect();
        pending.sort();
        PathInfo { at, others, pending, points: 0, first: point }
    }
}

/// The crashing thread, the kind of event (0 the end, 1 a fence, 2 a
/// clflush) and its site.
fn crashing(here: Option<&Ev>) -> (u32, u8, u32) {
    match here {
        Some(&Ev::Fence { tid, site }) => (tid, 1, site),
        Some(&Ev::Flush { tid, site, .. }) => (tid, 2, site),
        _ => (u32::MAX, 0, 0),
    }
}

fn hash_of(x: &impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    x.hash(&mut h);
    h.finish()
}

impl Persisted for Signatures<'_> {
    fn stored(&mut self, tr: &CrashTrace, p: u32, _first: bool) {
        self.add(self.class(tr, p, false), 1);
    }

    fn flushed(&mut self, tr: &CrashTrace, p: u32) {
        self.add(self.class(tr, p, false), -1);
        self.add(self.class(tr, p, true), 1);
    }

    fn durable(&mut self, tr: &CrashTrace, p: u32, _last: bool) {
        // A store made durable was flushed first (a clflush covers it too).
        self.add(self.class(tr, p, true), -1);
    }
}
