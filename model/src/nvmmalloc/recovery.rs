//! Opening a heap (`nvm_initialize_recovered`, `nvm_recovery_thread`):
//! the version word is bumped and persisted; every activation-log slot that
//! names an object has that object's header repaired — an operation whose
//! header says *activating* or *freeing* is replayed (the link slot
//! written and persisted, the bitmap bit set or cleared), one that says
//! *pre-activate* or *pre-free* is dropped — and the header reset and
//! persisted; then the chunks are walked (the code's open has returned by
//! then: its `nvm_recovery_thread` walks them, and pmsim times the walk
//! apart, [`Recovered::walk_s`]): free page runs, runs (each
//! stamped with the current version and persisted, as the code's recovery
//! thread does), page runs in use, huge objects and free huge chunks.
//!
//! The code's recovery repairs only runs a log slot names, so a free
//! interrupted on a run no slot names would leave the run *freeing* and
//! the next CAS on it spinning; pmsim's walk repairs every run, page run
//! and huge object it finds mid-operation the same way.

use super::arena::{Arena, Run};
use super::layout::{
    misc, misc_arena, misc_bit, misc_version, run_objects, state, usage, Layout, BLOCK, B_ARENA, CHUNK, CHUNKS_USED,
    CHUNK_BLOCKS, HDR, H_ON, H_ON_PTR, H_ON_VALUE, H_SIZE, H_STATE, LOG_SLOTS, R_BITMAP, R_MISC, SMALL_MAX, SMALL_MIN,
    VERSION_WORD,
};
use super::{NvmConfig, NvmMalloc, NAME};
use crate::error::AllocError;
use crate::pm::PmThread;
use serde::Serialize;
use std::collections::BTreeSet;
use std::time::Instant;

/// What opening a heap found and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RecoveryReport {
    /// The previous run did not close the heap.
    pub crashed: bool,
    /// Interrupted operations completed (header *activating* / *freeing*).
    pub replayed: u64,
    /// Interrupted operations dropped (header *pre-activate* / *pre-free*).
    pub rolled_back: u64,
    /// Runs stamped with the new version.
    pub restamped: u64,
    /// Chunks in use.
    pub chunks: u64,
    /// Bytes of live objects after opening (usable sizes).
    pub live_bytes: u64,
}

pub(super) struct Recovered {
    pub arenas: Vec<Arena>,
    pub huge: BTreeSet<(u64, u64)>,
    pub version: u64,
    pub report: RecoveryReport,
    /// Every header of the chunks in use, `(start, length)`, for the trace's
    /// region table.
    pub headers: Vec<(u64, u64)>,
    /// Seconds spent walking the chunks (after the log's replay): what the
    /// code does on a thread of its own, after its open has returned.
    pub walk_s: f64,
}

impl Recovered {
    /// A new heap's: empty arenas, nothing huge, nothing repaired.
    pub fn empty(arenas: u32) -> Recovered {
        Recovered {
            arenas: (0..u64::from(arenas)).map(Arena::new).collect(),
            huge: BTreeSet::new(),
            version: 0,
            report: RecoveryReport::default(),
            headers: Vec::new(),
            walk_s: 0.0,
        }
    }
}

/// What an object is, by where it lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Run,
    Block,
    Huge,
}

/// The kind of object at `ptr` and its header.
pub(super) fn classify(t: &PmThread, lay: &Layout, ptr: u64) -> (Kind, u64) {
    if (ptr - lay.chunks) % CHUNK == HDR {
        return (Kind::Huge, ptr - HDR);
    }
    let h = ptr & !(BLOCK - 1);
    match t.load_u64(h + H_STATE) & usage::MASK {
        usage::RUN => (Kind::Run, h),
        _ => (Kind::Block, h),
    }
}

/// A piece of the heap, as a walk finds it.
#[derive(Clone, Copy, Debug)]
enum Piece {
    /// A run: header, object size, persistent bitmap, packed word, state word.
    Run { h: u64, size: u64, bitmap: u64, misc: u64, st: u64 },
    /// A page run, in use or mid-operation: header, pages, state word.
    Block { h: u64, pages: u64, st: u64 },
    /// A free page run: header, pages, arena.
    FreePages { h: u64, pages: u64, arena: u64 },
    /// A huge object, or chunks reserved for one: header, chunks, state word.
    Huge { h: u64, n: u64, st: u64 },
    /// Free huge chunks: header, chunks.
    HugeFree { h: u64, n: u64 },
    /// A chunk taken but never initialised (or an arena chunk whose
    /// initialisation a crash cut short).
    Raw { c: u64 },
}

impl Piece {
    /// Where its 64 B header lies (a raw chunk has none yet).
    fn header(&self) -> Option<u64> {
        match *self {
            Piece::Run { h, .. }
            | Piece::Block { h, .. }
            | Piece::FreePages { h, .. }
            | Piece::Huge { h, .. }
            | Piece::HugeFree { h, .. } => Some(h),
            Piece::Raw { .. } => None,
        }
    }
}

/// Walks chunks `0..used`, calling `visit` on each piece.
fn walk(t: &PmThread, lay: &Layout, mut visit: impl FnMut(Piece)) -> Result<(), String> {
    let used = t.load_u64(CHUNKS_USED);
    if used > lay.capacity {
        return Err(format!("{used} chunks in use, the heap holds {}", lay.capacity));
    }
    let mut c = 0;
    while c < used {
        let ch = lay.chunk_off(c);
        let st = t.load_u64(ch + H_STATE);
        let n = t.load_u64(ch + H_SIZE);
        let chunks_ok = |n: u64| (1..=used - c).contains(&n);
        match st & usage::MASK {
            usage::ARENA if st & state::MASK == state::INITIALIZED => {
                let mut j = 1;
                while j < CHUNK_BLOCKS {
                    let h = ch + j * BLOCK;
                    let (st, n) = (t.load_u64(h + H_STATE), t.load_u64(h + H_SIZE));
                    let pages_ok = |n: u64| (1..=CHUNK_BLOCKS - j).contains(&n);
                    match st & usage::MASK {
                        usage::FREE if pages_ok(n) => {
                            visit(Piece::FreePages { h, pages: n, arena: t.load_u64(h + B_ARENA) });
                            j += n;
                        }
                        usage::RUN if (SMALL_MIN..=SMALL_MAX).contains(&n) && n % SMALL_MIN == 0 => {
                            let (bitmap, m) = (t.load_u64(h + R_BITMAP), t.load_u64(h + R_MISC));
                            if bitmap >> run_objects(n) != 0 {
                                return Err(format!("run at {h:#x}: bitmap bits past its objects"));
                            }
                            visit(Piece::Run { h, size: n, bitmap, misc: m, st });
                            j += 1;
                        }
                        usage::BLOCK if pages_ok(n) => {
                            visit(Piece::Block { h, pages: n, st });
                            j += n;
                        }
                        _ => return Err(format!("page header at {h:#x}: state {st:#x}, size {n}")),
                    }
                }
                c += 1;
            }
            usage::ARENA => {
                visit(Piece::Raw { c });
                c += 1;
            }
            usage::HUGE if chunks_ok(n) => {
                visit(Piece::Huge { h: ch, n, st });
                c += n;
            }
            usage::FREE if chunks_ok(n) => {
                visit(Piece::HugeFree { h: ch, n });
                c += n;
            }
            0 => {
                visit(Piece::Raw { c });
                c += 1;
            }
            _ => return Err(format!("chunk {c} header: state {st:#x}, size {n}")),
        }
    }
    Ok(())
}

/// `PERSIST(p)` as the configuration persists.
fn persist(t: &mut PmThread, cfg: &NvmConfig, off: u64) {
    if cfg.shipped {
        t.mfence();
        t.mfence();
    } else {
        t.persist_sync(off);
    }
}

/// Repairs header `h` of an object of `kind` if it is mid-operation;
/// whether it was.
fn repair(t: &mut PmThread, cfg: &NvmConfig, kind: Kind, h: u64, version: u64, rep: &mut RecoveryReport) -> bool {
    let st = t.load_u64(h + H_STATE);
    let (u, s) = (st & usage::MASK, st & state::MASK);
    let replay_link = |t: &mut PmThread| {
        let slot = t.load_u64(h + H_ON_PTR);
        if slot != 0 {
            t.store_u64(slot, t.load_u64(h + H_ON_VALUE));
            persist(t, cfg, slot);
        }
    };
    match kind {
        Kind::Run => {
            if u != usage::RUN || s == state::INITIALIZED {
                return false;
            }
            let m = t.load_u64(h + R_MISC);
            match (s, misc_bit(m)) {
                (state::PREACTIVATE | state::PREFREE, _) => rep.rolled_back += 1,
                (state::ACTIVATING, Some(i)) => {
                    replay_link(t);
                    t.store_u64(h + R_BITMAP, t.load_u64(h + R_BITMAP) | 1 << i);
                    rep.replayed += 1;
                }
                (state::FREEING, Some(i)) => {
                    replay_link(t);
                    t.store_u64(h + R_BITMAP, t.load_u64(h + R_BITMAP) & !(1 << i));
                    rep.replayed += 1;
                }
                _ => return false,
            }
            t.store_bytes(h + H_ON, &[0; 32]);
            t.store_u64(h + R_MISC, misc(None, misc_arena(m), version));
            t.store_u64(h + H_STATE, usage::RUN | state::INITIALIZED);
            persist(t, cfg, h);
            true
        }
        Kind::Block | Kind::Huge => {
            let used = if kind == Kind::Huge { usage::HUGE } else { usage::BLOCK };
            let to = match (u, s) {
                (x, state::ACTIVATING) if x == used => used | state::INITIALIZED,
                (x, state::FREEING) if x == used => usage::FREE | state::INITIALIZED,
                _ => return false,
            };
            replay_link(t);
            t.store_bytes(h + H_ON, &[0; 32]);
            t.store_u64(h + H_STATE, to);
            persist(t, cfg, h);
            rep.replayed += 1;
            true
        }
    }
}

pub(super) fn recover(t: &mut PmThread, lay: &Layout, cfg: &NvmConfig, crashed: bool) -> Result<Recovered, AllocError> {
    let bad = |m: String| AllocError::corrupt(NAME, m);
    let mut rep = RecoveryReport { crashed, ..Default::default() };
    let version = t.load_u64(VERSION_WORD);
    t.store_u64(VERSION_WORD, version + 1);
    persist(t, cfg, VERSION_WORD);
    let used = t.load_u64(CHUNKS_USED);
    if used > lay.capacity {
        return Err(bad(format!("{used} chunks in use, the heap holds {}", lay.capacity)));
    }
    // The activation log.
    for i in 0..LOG_SLOTS {
        let slot = lay.slot(i);
        let p = t.load_u64(slot);
        if p == 0 {
            continue;
        }
        let in_use = lay.chunk_of(p).is_some_and(|c| c < used) && p >= lay.chunks + HDR;
        if in_use {
            let (kind, h) = classify(t, lay, p);
            repair(t, cfg, kind, h, version, &mut rep);
        }
        t.store_u64(slot, 0);
    }
    // The code's open returns here; its recovery thread walks the chunks.
    let walk_from = Instant::now();
    // Every piece mid-operation (pmsim: not only those the log names), and
    // chunks a crash left uninitialised.
    let mut fix = Vec::new();
    walk(t, lay, |p| fix.push(p)).map_err(bad)?;
    for p in fix {
        match p {
            Piece::Run { h, .. } => _ = repair(t, cfg, Kind::Run, h, version, &mut rep),
            Piece::Block { h, .. } => _ = repair(t, cfg, Kind::Block, h, version, &mut rep),
            Piece::Huge { h, .. } => _ = repair(t, cfg, Kind::Huge, h, version, &mut rep),
            Piece::Raw { c } => {
                // Free huge chunk of one: the chunk holds nothing yet.
                let ch = lay.chunk_off(c);
                t.store_u64(ch + H_SIZE, 1);
                t.store_u64(ch + H_STATE, usage::FREE | state::INITIALIZED);
                persist(t, cfg, ch);
            }
            Piece::FreePages { .. } | Piece::HugeFree { .. } => {}
        }
    }
    // The volatile headers, rebuilt.
    let mut arenas: Vec<Arena> = (0..cfg.arenas as u64).map(Arena::new).collect();
    let k = arenas.len() as u64;
    let mut huge = BTreeSet::new();
    let mut restamp = Vec::new();
    // In heap order, so sorted and unique as they are pushed.
    let mut headers = Vec::new();
    walk(t, lay, |p| {
        if let Some(h) = p.header() {
            // An arena chunk's own header (its first page) comes just
            // before the chunk's first piece, which starts on its second.
            let in_arena = matches!(p, Piece::Run { .. } | Piece::Block { .. } | Piece::FreePages { .. });
            if in_arena && lay.chunk_of(h).is_some_and(|c| h == lay.chunk_off(c) + BLOCK) {
                headers.push((h - BLOCK, BLOCK));
            }
            headers.push((h, HDR));
        }
        match p {
            Piece::FreePages { h, pages, arena } => _ = arenas[(arena % k) as usize].free.insert((pages, h)),
            Piece::Run { h, size, bitmap, misc: m, .. } => {
                let a = &mut arenas[(misc_arena(m) % k) as usize];
                let n_max = run_objects(size);
                let n_free = n_max - bitmap.count_ones() as u64;
                rep.live_bytes += (n_max - n_free) * size;
                a.runs.insert(h, Run { size, bitmap, n_free, n_max });
                if n_free > 0 {
                    let bin = &mut a.bins[(size / SMALL_MIN - 1) as usize];
                    bin.runs.push(h);
                    bin.n_free += n_free;
                }
                if misc_version(m) < version {
                    restamp.push((h, m));
                }
            }
            Piece::Block { pages, st, .. } if st == usage::BLOCK | state::INITIALIZED => {
                rep.live_bytes += pages * BLOCK - HDR
            }
            Piece::Block { .. } => {}
            Piece::Huge { n, st, .. } if st == usage::HUGE | state::INITIALIZED => rep.live_bytes += n * CHUNK - HDR,
            Piece::Huge { h, n, .. } | Piece::HugeFree { h, n } => _ = huge.insert((n, h)),
            Piece::Raw { .. } => unreachable!("repaired above"),
        }
    })
    .map_err(bad)?;
    for (h, m) in restamp {
        t.store_u64(h + R_MISC, misc(misc_bit(m), misc_arena(m), version));
        persist(t, cfg, h);
        rep.restamped += 1;
    }
    rep.chunks = used;
    debug_assert!(headers.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0), "headers out of heap order");
    Ok(Recovered { arenas, huge, version, report: rep, headers, walk_s: walk_from.elapsed().as_secs_f64() })
}

/// Every activated object `(offset, usable size)`, by offset.
pub(super) fn live(t: &PmThread, lay: &Layout) -> Result<Vec<(u64, u64)>, String> {
    let mut v = Vec::new();
    walk(t, lay, |p| match p {
        Piece::Run { h, size, bitmap, .. } => {
            v.extend((0..run_objects(size)).filter(|&i| bitmap >> i & 1 == 1).map(|i| (h + HDR + i * size, size)))
        }
        Piece::Block { h, pages, st } if st == usage::BLOCK | state::INITIALIZED => {
            v.push((h + HDR, pages * BLOCK - HDR))
        }
        Piece::Huge { h, n, st } if st == usage::HUGE | state::INITIALIZED => v.push((h + HDR, n * CHUNK - HDR)),
        _ => {}
    })?;
    v.sort_unstable();
    Ok(v)
}

/// The metadata check after open: the chunks walk; no header mid-operation;
/// every run's bitmap is what its arena holds in DRAM, every free page run
/// and free huge chunk is in its tree, and nothing else is.
pub(super) fn check(t: &PmThread, lay: &Layout, nvm: &NvmMalloc) -> Result<(), String> {
    let mut err = None;
    let (mut free_pages, mut runs, mut huge) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    walk(t, lay, |p| {
        let mid = match p {
            Piece::Run { h, size, bitmap, st, .. } => {
                runs.insert((h, size, bitmap));
                (st != usage::RUN | state::INITIALIZED).then_some(h)
            }
            Piece::Block { h, st, .. } => (st != usage::BLOCK | state::INITIALIZED).then_some(h),
            Piece::FreePages { h, pages, .. } => {
                free_pages.insert((pages, h));
                None
            }
            Piece::Huge { h, n, st } => {
                if st != usage::HUGE | state::INITIALIZED {
                    huge.insert((n, h));
                }
                matches!(st & state::MASK, state::ACTIVATING | state::FREEING).then_some(h)
            }
            Piece::HugeFree { h, n } => {
                huge.insert((n, h));
                None
            }
            Piece::Raw { c } => Some(lay.chunk_off(c)),
        };
        if let (Some(h), None) = (mid, &err) {
            err = Some(format!("header at {h:#x} is mid-operation (state {:#x})", t.load_u64(h + H_STATE)));
        }
    })?;
    if let Some(e) = err {
        return Err(e);
    }
    let (mut have_free, mut have_runs) = (BTreeSet::new(), BTreeSet::new());
    for a in nvm.arenas.iter() {
        let a = a.untraced();
        have_free.extend(a.free.iter().copied());
        have_runs.extend(a.runs.iter().map(|(&h, r)| (h, r.size, r.bitmap)));
        for (b, bin) in a.bins.iter().enumerate() {
            let free: u64 = a.runs.values().filter(|r| r.size == (b as u64 + 1) * SMALL_MIN).map(|r| r.n_free).sum();
            if bin.n_free != free {
                return Err(format!(
                    "arena {}: bin of {} B counts {} free, its runs {free}",
                    a.id,
                    (b + 1) * 64,
                    bin.n_free
                ));
            }
        }
    }
    if have_free != free_pages {
        return Err(format!(
            "{} free page runs in the chunks, {} in the arenas' trees",
            free_pages.len(),
            have_free.len()
        ));
    }
    if have_runs != runs {
        let first = runs.symmetric_difference(&have_runs).next().copied();
        return Err(format!("the runs' bitmaps differ from the arenas' copies (first: {first:?})"));
    }
    let have_huge: BTreeSet<(u64, u64)> = nvm.huge.untraced().iter().copied().collect();
    if have_huge != huge {
        return Err(format!("{} free huge runs in the chunks, {} in the tree", huge.len(), have_huge.len()));
    }
    Ok(())
}
