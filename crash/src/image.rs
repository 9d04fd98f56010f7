//! One crash image: the durable state of a point with a prefix of each
//! line's pending stores written over it, recovered and checked with every
//! panic of the allocator's code caught as a violation.

use crate::check::{check_image, Context, Kept};
use crate::expect::Obj;
use crate::load::CrashTrace;
use crate::persist::write_piece;
use pmsim_model::family::CrashPoint;
use pmsim_model::heap::Heap;
use pmsim_model::watch::AccessWatch;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The pending stores of a point, by line (offset, pieces oldest first).
pub(crate) type Pending = [(u64, Vec<u32>)];

/// Writes the first `keep[i]` pending stores of each line `i` into `bytes`.
pub(crate) fn apply_kept(tr: &CrashTrace, pending: &Pending, keep: &[usize], bytes: &mut [u8]) {
    for ((_, pcs), &d) in pending.iter().zip(keep) {
        for &p in &pcs[..d] {
            write_piece(tr, p, bytes);
        }
    }
}

/// The heap's bytes, writable (a private mapping of the caller's alone).
pub(crate) fn heap_bytes(heap: &mut Heap) -> &mut [u8] {
    // SAFETY: a private copy-on-write mapping that only this caller uses
    // while the slice (which borrows the heap mutably) lives.
    unsafe { std::slice::from_raw_parts_mut(heap.base(), heap.size() as usize) }
}

/// [`check_image`], with a panic of recovery or of the checks as the problem.
pub(crate) fn recover_and_check(
    heap: &Heap,
    watch: Option<&AccessWatch>,
    cx: &Context,
    at: &CrashPoint,
    objs: &[Obj],
) -> Result<Kept, String> {
    catch_unwind(AssertUnwindSafe(|| check_image(heap, watch, cx, at, objs))).unwrap_or_else(|p| Err(panic_message(p)))
}

/// The message of a caught panic.
fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    let m = p
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into());
    format!("recovery or check panicked: {m}")
}
