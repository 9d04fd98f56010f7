//! The client requests of pmsim's Valgrind tool (`pintools/include/pmtrace.h`)
//! from Rust: a program run under the tool says where its operations begin
//! and end and what its regions hold, which the tool cannot see by itself.
//! PMDK's wrapper ([`crate::pmdk`]) uses them so that `pmsim run --alloc
//! pmdk` traced by the tool has operations and regions like pmsim's own
//! tracer's traces. Outside Valgrind each request is a few no-op
//! instructions.

use crate::arch::valgrind_request;
use pmsim_traces::{Category, OpKind};
use std::sync::OnceLock;

/// `VG_USERREQ_TOOL_BASE('P', 'M')`: the tool's first request code.
const BASE: u64 = (b'P' as u64) << 24 | (b'M' as u64) << 16;
const REGION_ADD: u64 = BASE + 1;
const REGION_REMOVE: u64 = BASE + 2;
const OP_BEGIN: u64 = BASE + 3;
const OP_END: u64 = BASE + 4;
const RUNNING: u64 = BASE + 6;
const THREAD_ID: u64 = BASE + 7;
const JOINED: u64 = BASE + 8;

/// Whether this process runs under the tool (asked once).
pub fn running() -> bool {
    static RUNNING_HERE: OnceLock<bool> = OnceLock::new();
    *RUNNING_HERE.get_or_init(|| valgrind_request(0, &[RUNNING, 0, 0, 0, 0, 0]) == 1)
}

/// Operation `op` begins with `arg` (malloc: size; free: heap offset).
#[inline]
pub fn op_begin(op: OpKind, arg: u64) {
    if running() {
        valgrind_request(0, &[OP_BEGIN, op.code(), arg, 0, 0, 0]);
    }
}

/// Operation `op` ends with `result` (malloc: the heap offset).
#[inline]
pub fn op_end(op: OpKind, result: u64) {
    if running() {
        valgrind_request(0, &[OP_END, op.code(), result, 0, 0, 0]);
    }
}

/// Region `id` of `category`: `len` bytes at address `base`, called `name`.
pub fn region_add(id: u64, category: Category, base: *const u8, len: u64, name: &str) {
    if running() {
        let mut c = name.as_bytes().to_vec();
        c.push(0);
        valgrind_request(0, &[REGION_ADD, id, category as u64, base as u64, len, c.as_ptr() as u64]);
    }
}

/// Region `id` is gone.
pub fn region_remove(id: u64) {
    if running() {
        valgrind_request(0, &[REGION_REMOVE, id, 0, 0, 0, 0]);
    }
}

/// The calling thread's id in the tool's trace (None outside the tool).
pub fn thread_id() -> Option<u32> {
    if !running() {
        return None;
    }
    valgrind_request(0, &[THREAD_ID, 0, 0, 0, 0, 0]).checked_sub(1).map(|t| t as u32)
}

/// The calling thread waited for the end of thread `tid` (a [`thread_id`]):
/// the tool records a join marker ([`pmsim_traces::JOIN_MARKER`]). The tool
/// runs one thread at a time and a joining thread records nothing, so
/// without it a trace's replay cannot tell that the joiner's next work (a
/// Larson generation it spawns, a teardown) comes after that end.
pub fn joined(tid: u32) {
    if running() {
        valgrind_request(0, &[JOINED, tid as u64, 0, 0, 0, 0]);
    }
}
