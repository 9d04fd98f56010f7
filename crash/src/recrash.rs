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

use crate::explore::{apply_kept, check_image, heap_bytes, panic_message, ImageRun, Pending, RecoveryCrash, Worker};
use crate::images;
use crate::load::{CrashTrace, Ev};
use crate::persist::{write_piece, PState};
use crate::CrashError;
use memmap2::MmapMut;
use pmsim_model::family::CrashPoint;
use pmsim_model::heap::Heap;
use pmsim_model::scratch::ScratchHeap;
use pmsim_model::watch::{AccessWatch, Recorded};
use pmsim_traces::TraceHeader;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Crashes the recovery of the image (`path` with the kept pending stores)
/// at each of its fences; records the first failure in `run`.
pub(crate) fn crash_recovery(
    w: &Worker<'_>,
    path: &Path,
    at: &CrashPoint,
    pending: &Pending,
    keep: &[usize],
    objs: &[crate::expect::Obj],
    run: &mut ImageRun,
) -> Result<(), CrashError> {
    let err = |e: String| CrashError(format!("crash inside recovery: {e}"));
    // The image itself, as a file: the durable state the recovery starts from.
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let scratch = ScratchHeap::new(&format!("recrash-{}", NEXT.fetch_add(1, Ordering::Relaxed))).map_err(err)?;
    let spath = scratch.path();
    let io = |e: std::io::Error| CrashError(format!("{}: {e}", spath.display()));
    let mut heap = Heap::open_copy(path).map_err(|e| err(e.to_string()))?;
    apply_kept(w.tr, pending, keep, heap_bytes(&mut heap));
    std::fs::write(spath, &heap_bytes(&mut heap)[..]).map_err(io)?;
    // The recovery's persistence events.
    let watch = Arc::new(AccessWatch::recording([]));
    heap.set_watch(watch.clone());
    let first = catch_unwind(AssertUnwindSafe(|| {
        w.target.recover_at(&heap, at).map(|r| matches!(r, pmsim_model::family::Recovery::Recovered(_)))
    }));
    drop(heap);
    if !matches!(first, Ok(Ok(true))) {
        return Ok(()); // the image's own check already recovered it (or it was refused); nothing to crash
    }
    let rec = watch.recorded();
    let mut tr = CrashTrace::new(&w.tr.path, TraceHeader::default(), spath.to_path_buf(), w.tr.heap_size);
    for (i, e) in rec.events.iter().enumerate() {
        match *e {
            Recorded::Store { off, len, value, nt } => {
                tr.push_store(off, &rec.values[value as usize..value as usize + len as usize], 0, nt, i as u64)
            }
            Recorded::Flush { line } => tr.push(i as u64, Ev::Flush { tid: 0, line, ordered: false }),
            Recorded::Fence => tr.push(i as u64, Ev::Fence { tid: 0 }),
        }
    }
    let file = std::fs::OpenOptions::new().read(true).write(true).open(spath).map_err(io)?;
    // SAFETY: this function's scratch file; nothing else maps it writable.
    let mut img = unsafe { MmapMut::map_mut(&file) }.map_err(io)?;
    let mut ps = PState::default();
    let mut cur = 0usize;
    for (f, &pos) in tr.fences.iter().enumerate() {
        for e in &tr.events[cur..pos as usize] {
            ps.apply(&tr, e, &mut img);
        }
        cur = pos as usize;
        let pend = ps.pending();
        let order: Vec<Vec<u64>> = pend.iter().map(|(_, p)| p.iter().map(|&x| x as u64).collect()).collect();
        let lens: Vec<usize> = order.iter().map(Vec::len).collect();
        let plan = images::plan(&lens, w.opts.recovery_bound.max(1));
        run.recovery_fences += 1;
        for j in 0..plan.images {
            let kept = images::choose(&order, plan, w.opts.seed, f as u64, j);
            let mut h2 = Heap::open_copy(spath).map_err(|e| err(e.to_string()))?;
            let bytes = heap_bytes(&mut h2);
            for ((_, pcs), &d) in pend.iter().zip(&kept) {
                for &p in &pcs[..d] {
                    write_piece(&tr, p, bytes);
                }
            }
            let r =
                catch_unwind(AssertUnwindSafe(|| check_image(&h2, None, w.target, at, w.layout, objs, w.ops, w.opts)))
                    .unwrap_or_else(|p| Err(panic_message(p)));
            run.recovery_images += 1;
            if let Err(p) = r {
                let at = RecoveryCrash { fence: f as u64, image: j, images_at_fence: plan.images };
                run.problem =
                    Some((format!("after a crash inside recovery (its fence {f}, image {j}): {p}"), Some(at)));
                return Ok(());
            }
        }
    }
    Ok(())
}
