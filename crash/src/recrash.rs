//! Crashes inside recovery: a recovery interrupted by a second crash must
//! still end, once run again, in a heap that passes every check.
//!
//! For an image chosen for it, the recovery runs once more under a
//! recording watch ([`pmsim_model::watch`]), which gives its stores, flushes
//! and fences in program order. Each fence of that run is a crash point:
//! the recovery's stores made durable before it are kept, and its pending
//! stores form images as at any crash point ([`crate::images`], at most
//! `recovery_bound` per fence). Each such image is recovered again and
//! checked against the expectations of the original crash point: recovery
//! must be idempotent.

use crate::check::{Context, Snapshot};
use crate::error::CrashError;
use crate::expect::Obj;
use crate::image::{apply_kept, heap_bytes, recover_and_check};
use crate::images::{self, Lines};
use crate::load::{CrashTrace, Ev};
use crate::persist::{DurableImage, PState};
use crate::report::RecoveryCrash;
use memmap2::MmapMut;
use pmsim_model::family::CrashPoint;
use pmsim_model::heap::Heap;
use pmsim_model::scratch::ScratchHeap;
use pmsim_model::watch::{AccessWatch, Recorded};
use pmsim_traces::TraceHeader;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What crashing one image's recovery found.
#[derive(Debug, Default)]
pub(crate) struct Recrashed {
    /// The recovery's fences crashed at, and the images recovered after them.
    pub(crate) fences: u64,
    pub(crate) images: u64,
    /// The first failure, and where inside recovery the crash was.
    pub(crate) problem: Option<(String, RecoveryCrash)>,
}

/// Crashes the recovery of an image of `tr` (its bytes) at each of its
/// fences, until the first failure.
pub(crate) fn crash_recovery(
    tr: &CrashTrace,
    cx: &Context,
    image: &[u8],
    at: &CrashPoint,
    objs: &[Obj],
) -> Result<Recrashed, CrashError> {
    let mut out = Recrashed::default();
    let err = |e: String| CrashError(format!("crash inside recovery: {e}"));
    // The image itself, as a file: the durable state the recovery starts from.
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let scratch = ScratchHeap::new(&format!("recrash-{}", NEXT.fetch_add(1, Ordering::Relaxed))).map_err(err)?;
    let spath = scratch.path();
    let io = |e: std::io::Error| CrashError(format!("{}: {e}", spath.display()));
    std::fs::write(spath, image).map_err(io)?;
    let mut heap = Heap::open_copy(spath).map_err(|e| err(e.to_string()))?;
    // The recovery's persistence events.
    let watch = Arc::new(AccessWatch::recording([]));
    heap.set_watch(watch.clone());
    let first = catch_unwind(AssertUnwindSafe(|| {
        cx.target.recover_at(&heap, at).map(|r| matches!(r, pmsim_model::family::Recovery::Recovered(_)))
    }));
    drop(heap);
    if !matches!(first, Ok(Ok(true))) {
        return Ok(out); // the image's own check already recovered it (or it was refused); nothing to crash
    }
    let rec = watch.recorded();
    let mut rtr = CrashTrace::new(&tr.path, TraceHeader::default(), spath.to_path_buf(), tr.heap_size);
    for (i, e) in rec.events.iter().enumerate() {
        match *e {
            Recorded::Store { off, len, value, nt } => {
                rtr.push_store(off, &rec.values[value as usize..value as usize + len as usize], 0, nt, i as u64)
            }
            Recorded::Flush { line } => rtr.push(i as u64, Ev::Flush { tid: 0, line, ordered: false, site: 0 }),
            Recorded::Fence => rtr.push(i as u64, Ev::Fence { tid: 0, site: 0 }),
        }
    }
    let file = std::fs::OpenOptions::new().read(true).write(true).open(spath).map_err(io)?;
    // SAFETY: this function's scratch file; nothing else maps it writable.
    let mut img = unsafe { MmapMut::map_mut(&file) }.map_err(io)?;
    let mut ps = PState::default();
    let mut cur = 0usize;
    for (f, &pos) in rtr.fences.iter().enumerate() {
        for e in &rtr.events[cur..pos as usize] {
            ps.apply(&rtr, e, &mut DurableImage(&mut img));
        }
        cur = pos as usize;
        let pend = Lines::of(ps.pending_lines());
        let plan = images::plan(&pend.lens(), cx.opts.recovery_bound.max(1));
        out.fences += 1;
        for j in 0..plan.images {
            let kept = images::choose(&pend, plan, cx.opts.seed, f as u64, j);
            let mut h2 = Heap::open_copy(spath).map_err(|e| err(e.to_string()))?;
            apply_kept(&rtr, &pend, &kept, heap_bytes(&mut h2));
            let r = recover_and_check(&h2, None, cx, at, objs, &mut Snapshot::default());
            out.images += 1;
            if let Err(p) = r {
                let at = RecoveryCrash { fence: f as u64, image: j, images_at_fence: plan.images };
                out.problem = Some((format!("after a crash inside recovery (its fence {f}, image {j}): {p}"), at));
                return Ok(out);
            }
        }
    }
    Ok(out)
}
