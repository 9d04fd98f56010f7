//! Arenas: bins of runs for small objects and free page runs for large
//! ones, carved from the arena's chunks (`arena.c`). What an arena keeps in
//! DRAM — bins, the runs' copies of their bitmaps, the tree of free page
//! runs by size — nvm_malloc calls its volatile headers; every open
//! rebuilds them from the persistent headers.
//!
//! * `reserve` of a small object takes the first clear bit of the bin's
//!   current run in DRAM only; a new run is the last page of the smallest
//!   free page run that fits (its header persisted, then the shrunk free
//!   page run's), or the whole of a one-page free run.
//! * `reserve` of a large object cuts its pages from the end of the
//!   smallest free page run that fits (both headers persisted) or takes it
//!   whole. Freed page runs are not coalesced (nor are they in the code).
//! * An arena without a free page run large enough takes a new chunk: its
//!   header and object table persisted whole, then its free page run's
//!   header, then its state.

use super::layout::{
    misc, run_objects, state, usage, Layout, BINS, BLOCK, B_ARENA, CHUNK, CHUNK_BLOCKS, C_SIGNATURE, HDR, H_ON, H_SIZE,
    H_STATE, R_MISC, SMALL_MIN,
};
use super::NvmMalloc;
use crate::pm::PmThread;
use std::collections::{BTreeSet, HashMap};

/// A run's volatile header (`arena_run_t`).
#[derive(Clone, Debug)]
pub(super) struct Run {
    pub size: u64,
    /// The bits of reserved objects (a superset of the persistent bitmap).
    pub bitmap: u64,
    pub n_free: u64,
    pub n_max: u64,
}

/// A size class's runs (`arena_bin_t`).
#[derive(Clone, Debug, Default)]
pub(super) struct Bin {
    pub current: Option<u64>,
    /// Runs that became non-full, newest first (`runs`, a stack).
    pub runs: Vec<u64>,
    pub n_free: u64,
}

/// An arena's volatile state (`arena_t`).
#[derive(Debug, Default)]
pub(super) struct Arena {
    pub id: u64,
    /// Whether it has a chunk yet (pmsim takes an arena's first chunk when
    /// a thread first uses it; the code formats all 20 at start).
    pub started: bool,
    pub bins: Vec<Bin>,
    /// Runs by header offset.
    pub runs: HashMap<u64, Run>,
    /// Free page runs `(pages, header offset)`.
    pub free: BTreeSet<(u64, u64)>,
}

impl Arena {
    pub fn new(id: u64) -> Arena {
        Arena { id, bins: vec![Bin::default(); BINS], ..Default::default() }
    }

    /// The smallest free page run of at least `pages` (`tree_upper_bound`), taken out.
    fn take_fit(&mut self, pages: u64) -> Option<(u64, u64)> {
        let fit = self.free.range((pages, 0)..).next().copied()?;
        self.free.remove(&fit);
        Some(fit)
    }
}

impl NvmMalloc {
    /// Reserves a small object of `size` bytes (rounded to 64) in `a`
    /// (`arena_allocate`); its offset, or `None` when the heap is full.
    pub(super) fn reserve_small(&self, t: &mut PmThread, a: &mut Arena, size: u64) -> Option<u64> {
        let n = size.max(1).next_multiple_of(SMALL_MIN);
        let b = (n / SMALL_MIN - 1) as usize;
        let hdr = if a.bins[b].n_free == 0 {
            let hdr = self.create_run(t, a, n)?;
            let bin = &mut a.bins[b];
            bin.current = Some(hdr);
            bin.n_free += run_objects(n);
            hdr
        } else {
            let cur = a.bins[b].current.filter(|c| a.runs[c].n_free > 0);
            match cur {
                Some(c) => c,
                None => {
                    let r = a.bins[b].runs.pop().expect("a bin with free objects has a non-full run");
                    a.bins[b].current = Some(r);
                    r
                }
            }
        };
        let run = a.runs.get_mut(&hdr).expect("a bin's run");
        let i = (!run.bitmap).trailing_zeros() as u64;
        debug_assert!(i < run.n_max);
        run.bitmap |= 1 << i;
        run.n_free -= 1;
        a.bins[b].n_free -= 1;
        Some(hdr + HDR + i * n)
    }

    /// Gives a small object back in DRAM after its free persisted.
    pub(super) fn unreserve_small(&self, a: &mut Arena, hdr: u64, i: u64) {
        let run = a.runs.get_mut(&hdr).expect("a freed object's run");
        run.bitmap &= !(1 << i);
        run.n_free += 1;
        let b = (run.size / SMALL_MIN - 1) as usize;
        let (n_free, bin) = (run.n_free, &mut a.bins[b]);
        bin.n_free += 1;
        if bin.current != Some(hdr) && n_free == 1 {
            bin.runs.push(hdr);
        }
    }

    /// A new run of `n`-byte objects (`arena_create_run`).
    fn create_run(&self, t: &mut PmThread, a: &mut Arena, n: u64) -> Option<u64> {
        let (pages, fb) = match a.take_fit(1) {
            Some(f) => f,
            None => self.add_chunk(t, a)?,
        };
        let version = self.current_version();
        let hdr = if pages > 1 {
            // The run is the free page run's last page.
            let hdr = fb + (pages - 1) * BLOCK;
            self.regions.paint_header(t, hdr, HDR, hdr + BLOCK);
            t.store_bytes(hdr, &[0; HDR as usize]);
            t.store_u64(hdr + H_STATE, usage::RUN | state::INITIALIZED);
            t.store_u64(hdr + H_SIZE, n);
            t.store_u64(hdr + R_MISC, misc(None, a.id, version));
            self.persist(t, hdr);
            t.store_u64(fb + H_SIZE, pages - 1);
            self.persist(t, fb);
            a.free.insert((pages - 1, fb));
            hdr
        } else {
            // Exactly one page: the free page run becomes the run.
            t.store_bytes(fb, &[0; HDR as usize]);
            t.store_u64(fb + R_MISC, misc(None, a.id, version));
            t.fence();
            t.store_u64(fb + H_STATE, usage::RUN | state::INITIALIZED);
            t.store_u64(fb + H_SIZE, n);
            self.persist(t, fb);
            fb
        };
        let n_max = run_objects(n);
        a.runs.insert(hdr, Run { size: n, bitmap: 0, n_free: n_max, n_max });
        Some(hdr)
    }

    /// Reserves a page run for a large object of `size` bytes
    /// (`arena_create_block`): the object's offset, or `None`.
    pub(super) fn reserve_large(&self, t: &mut PmThread, a: &mut Arena, size: u64) -> Option<u64> {
        // The header shares the first page (the code rounds the object alone
        // and overruns its last page by the header; pmsim counts it in).
        let pages = (size + HDR).div_ceil(BLOCK);
        if pages > CHUNK_BLOCKS - 1 {
            return None;
        }
        let (have, fb) = match a.take_fit(pages) {
            Some(f) => f,
            None => self.add_chunk(t, a)?,
        };
        let blk = if have > pages {
            let blk = fb + (have - pages) * BLOCK;
            self.regions.paint_header(t, blk, HDR, blk + pages * BLOCK);
            t.store_u64(blk + H_STATE, usage::FREE | state::INITIALIZED);
            t.store_u64(blk + H_SIZE, pages);
            t.store_u64(blk + B_ARENA, a.id);
            self.persist(t, blk);
            t.store_u64(fb + H_SIZE, have - pages);
            self.persist(t, fb);
            a.free.insert((have - pages, fb));
            blk
        } else {
            // The pages behind the header may hold the headers of page
            // runs merged into this one: user data now.
            self.regions.paint_header(t, fb, HDR, fb + pages * BLOCK);
            fb
        };
        Some(blk + HDR)
    }

    /// A new chunk for arena `a` (`arena_add_chunk`, and the initial chunk
    /// of `nvm_initialize_empty`): its free page run `(pages, header)`, for
    /// the caller to use or enter in the arena's tree.
    pub(super) fn add_chunk(&self, t: &mut PmThread, a: &mut Arena) -> Option<(u64, u64)> {
        let c = self.activate_chunks(t, 1)?;
        let chunk = self.lay.chunk_off(c);
        // The chunk header, and the free page run's header behind it.
        self.regions.paint_header(t, chunk, BLOCK + HDR, chunk + CHUNK);
        t.store_bytes(chunk, &[0; BLOCK as usize]);
        t.store_u64(chunk + H_STATE, usage::ARENA | state::INITIALIZING);
        t.store_u64(chunk + C_SIGNATURE, Layout::signature());
        self.persist_range(t, chunk, BLOCK);
        let fb = chunk + BLOCK;
        t.store_bytes(fb + H_ON, &[0; 32]);
        t.store_u64(fb + H_STATE, usage::FREE | state::INITIALIZED);
        t.store_u64(fb + H_SIZE, CHUNK_BLOCKS - 1);
        t.store_u64(fb + B_ARENA, a.id);
        self.persist(t, fb);
        t.store_u64(chunk + H_STATE, usage::ARENA | state::INITIALIZED);
        self.persist(t, chunk);
        a.started = true;
        Some((CHUNK_BLOCKS - 1, fb))
    }
}
