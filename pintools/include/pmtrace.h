/*
 * pmtrace.h: client requests of pmsim's Valgrind tool `pmtrace`, for programs
 * that want to tell the tracer more than it can see: PM that is not a file
 * mapping under --pm-dir, what regions of PM hold, and where operations
 * begin and end. Outside Valgrind (natively, or under the Pin tool) every
 * macro is a handful of no-op instructions and evaluates to 0.
 *
 *     #include "pmtrace.h"
 *     PMTRACE_PM_RANGE(base, len);                       // [base, base+len) is PM
 *     PMTRACE_REGION_ADD(1, PMT_META, hdr, 4096, "pool header");
 *     PMTRACE_OP_BEGIN(PMT_OP_MALLOC, 64);
 *     ... p = my_alloc(64) ...
 *     PMTRACE_OP_END(PMT_OP_MALLOC, p - base);           // result: heap offset
 *     PMTRACE_MARKER(7, "phase 2");
 *
 * Names and labels are NUL-terminated UTF-8 strings (cut at 4096 bytes).
 * Build with -I pintools/include -I traces/c.
 */
#ifndef PMTRACE_H
#define PMTRACE_H

#include <valgrind/valgrind.h>

/* Region categories (PMT_META, PMT_WAL, PMT_LOG, PMT_DATA) and operation codes
 * (PMT_OP_MALLOC, PMT_OP_FREE, ..., PMT_OP_OTHER and above) are the trace
 * format's, from the C trace writer (traces/c): the tool passes them through. */
#include "pmt_writer.h"

/* Request codes (tool base 'P','M'). */
enum {
    PMTRACE_REQ_PM_RANGE = VG_USERREQ_TOOL_BASE('P', 'M'),
    PMTRACE_REQ_REGION_ADD,
    PMTRACE_REQ_REGION_REMOVE,
    PMTRACE_REQ_OP_BEGIN,
    PMTRACE_REQ_OP_END,
    PMTRACE_REQ_MARKER,
    PMTRACE_REQ_RUNNING,
    PMTRACE_REQ_THREAD_ID,
    PMTRACE_REQ_JOINED,
    PMTRACE_REQ_LOCKED,
    PMTRACE_REQ_UNLOCKING
};

#define PMTRACE_REQ_(req, a, b, c, d, e) \
    ((unsigned long)VALGRIND_DO_CLIENT_REQUEST_EXPR(0, (req), (a), (b), (c), (d), (e)))

/* 1 when running under pmtrace, else 0. */
#define PMTRACE_RUNNING() PMTRACE_REQ_(PMTRACE_REQ_RUNNING, 0, 0, 0, 0, 0)
/* [base, base + len) is persistent memory: its stores and flushes are traced. */
#define PMTRACE_PM_RANGE(base, len) PMTRACE_REQ_(PMTRACE_REQ_PM_RANGE, (base), (len), 0, 0, 0)
/* Region `id` of `category`, `len` bytes at `base`, called `name`. */
#define PMTRACE_REGION_ADD(id, category, base, len, name) \
    PMTRACE_REQ_(PMTRACE_REQ_REGION_ADD, (id), (category), (base), (len), (name))
#define PMTRACE_REGION_REMOVE(id) PMTRACE_REQ_(PMTRACE_REQ_REGION_REMOVE, (id), 0, 0, 0, 0)
/* Operation `op` begins with `arg` (malloc: size; free: heap offset). */
#define PMTRACE_OP_BEGIN(op, arg) PMTRACE_REQ_(PMTRACE_REQ_OP_BEGIN, (op), (arg), 0, 0, 0)
/* Operation `op` ends with `result` (malloc: heap offset, 0 for failure). */
#define PMTRACE_OP_END(op, result) PMTRACE_REQ_(PMTRACE_REQ_OP_END, (op), (result), 0, 0, 0)
/* A user marker `id` with a label. */
#define PMTRACE_MARKER(id, label) PMTRACE_REQ_(PMTRACE_REQ_MARKER, (id), (label), 0, 0, 0)
/* The calling thread's id in the trace, plus 1 (0: not under the tool). */
#define PMTRACE_THREAD_ID() PMTRACE_REQ_(PMTRACE_REQ_THREAD_ID, 0, 0, 0, 0, 0)
/* The calling thread waited for the end of thread `tid` (an id from
 * PMTRACE_THREAD_ID() - 1), e.g. in pthread_join: the tool runs one thread at
 * a time, so its trace cannot show who waited for whom by itself. */
#define PMTRACE_JOINED(tid) PMTRACE_REQ_(PMTRACE_REQ_JOINED, (tid), 0, 0, 0, 0)
/* The calling thread took the lock at `lock` / is about to let it go: what
 * lets a replay in time of its own make threads wait at the program's locks.
 * The tool's preload library says so for every pthread mutex. */
#define PMTRACE_LOCKED(lock) PMTRACE_REQ_(PMTRACE_REQ_LOCKED, (lock), 0, 0, 0, 0)
#define PMTRACE_UNLOCKING(lock) PMTRACE_REQ_(PMTRACE_REQ_UNLOCKING, (lock), 0, 0, 0, 0)

#endif /* PMTRACE_H */
