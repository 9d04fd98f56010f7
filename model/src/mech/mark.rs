//! The conservative mark of a recovery-time garbage collector (Makalu §9.2,
//! and NVAlloc-GC after a crash): every word of every reached object that
//! names the start of a live object reaches that object too, starting from
//! the persistent roots. No type information: any word that looks like an
//! object start is taken for a pointer, as bdwgc does in its conservative mode.
//!
//! The allocator supplies the one policy question — "is this word the start
//! of an object, and is this the first time it is reached?" — and keeps its
//! own mark bits; this module owns the traversal.

use crate::heap::{Heap, ROOT_SLOTS};
use crate::pm::PmThread;

/// The heap's persistent root slots (the words the mark starts from).
pub fn root_words(t: &PmThread) -> Vec<u64> {
    (0..ROOT_SLOTS).map(|s| t.load_u64(Heap::root_offset(s))).collect()
}

/// Marks from `roots`. `reach(w)` is asked about every root and every
/// aligned word of every reached object; it returns `Some(len)` when `w` is
/// the start of a live object of `len` bytes not reached before (and records
/// it as reached), else `None`. Returns the number of objects reached.
///
/// The work list is explicit (deep lists do not grow the stack) and objects
/// are read through a bounded buffer.
pub fn mark_from(t: &PmThread, roots: impl IntoIterator<Item = u64>, reach: impl FnMut(u64) -> Option<u64>) -> u64 {
    mark_with(|off, buf| t.load_bytes(off, buf), roots, reach)
}

/// [`mark_from`] reading the heap through `load(off, buf)` (the crash
/// explorer marks a recovered image with it, to check what recovery kept).
pub fn mark_with(
    mut load: impl FnMut(u64, &mut [u8]),
    roots: impl IntoIterator<Item = u64>,
    mut reach: impl FnMut(u64) -> Option<u64>,
) -> u64 {
    let mut work: Vec<(u64, u64)> = Vec::new();
    let mut reached = 0u64;
    for w in roots {
        if let Some(len) = reach(w) {
            work.push((w, len));
        }
    }
    let mut buf = vec![0u8; 64 << 10];
    while let Some((off, len)) = work.pop() {
        reached += 1;
        let mut at = 0;
        while at < len {
            let n = (len - at).min(buf.len() as u64) as usize;
            load(off + at, &mut buf[..n]);
            for w in buf[..n].chunks_exact(8) {
                let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
                if let Some(l) = reach(w) {
                    work.push((w, l));
                }
            }
            at += n as u64;
        }
    }
    reached
}
