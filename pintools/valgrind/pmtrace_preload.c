/*
 * pmtrace_preload: the part of the Valgrind tool pmtrace that runs inside the
 * program. Valgrind loads `vgpreload_pmtrace-amd64-linux.so` from the tool's
 * folder into every program it runs with --tool=pmtrace; its wrappers of the
 * pthread mutex calls tell the tool, through client requests, when a thread
 * took a mutex and when it is about to let it go. The tool records them as the
 * trace's lock markers (traces/FORMAT.md), so that pmsim's contention replay
 * makes threads wait at the program's locks: PMDK's heap takes its locks
 * through pthread mutexes.
 *
 * Wrapped in libc (glibc 2.34 on: the mutex calls live there) and in
 * libpthread (older glibc); the original is called through Valgrind's
 * function-wrapping macros. A wait on a condition variable lets its mutex go
 * and takes it back inside libc, so it is wrapped too. A mutex the program
 * took before the trace began shows only its release.
 */
#include <pthread.h>

#include "pmtrace.h"

/* A call that takes mutex `m` when it returns 0 (lock, trylock). */
#define TAKING(SONAME, FN)                                                             \
    int I_WRAP_SONAME_FNNAME_ZU(SONAME, FN)(pthread_mutex_t * m);                      \
    int I_WRAP_SONAME_FNNAME_ZU(SONAME, FN)(pthread_mutex_t * m) {                     \
        int r;                                                                         \
        OrigFn fn;                                                                     \
        VALGRIND_GET_ORIG_FN(fn);                                                      \
        CALL_FN_W_W(r, fn, m);                                                         \
        if (r == 0) PMTRACE_LOCKED(m);                                                 \
        return r;                                                                      \
    }

/* A wait on a condition (arguments `...`, its mutex `m`): it lets the mutex go
 * and takes it again inside; CALL calls the original. */
#define WAITING(SONAME, FN, CALL, ...)                                                 \
    int I_WRAP_SONAME_FNNAME_ZU(SONAME, FN)(__VA_ARGS__);                              \
    int I_WRAP_SONAME_FNNAME_ZU(SONAME, FN)(__VA_ARGS__) {                             \
        int r;                                                                         \
        OrigFn fn;                                                                     \
        VALGRIND_GET_ORIG_FN(fn);                                                      \
        PMTRACE_UNLOCKING(m);                                                          \
        CALL;                                                                          \
        PMTRACE_LOCKED(m);                                                             \
        return r;                                                                      \
    }

#define LOCK_WRAPPERS(SONAME)                                                          \
    TAKING(SONAME, pthread_mutex_lock)                                                 \
    TAKING(SONAME, pthread_mutex_trylock)                                              \
    int I_WRAP_SONAME_FNNAME_ZU(SONAME, pthread_mutex_unlock)(pthread_mutex_t * m);    \
    int I_WRAP_SONAME_FNNAME_ZU(SONAME, pthread_mutex_unlock)(pthread_mutex_t * m) {   \
        int r;                                                                         \
        OrigFn fn;                                                                     \
        VALGRIND_GET_ORIG_FN(fn);                                                      \
        PMTRACE_UNLOCKING(m);                                                          \
        CALL_FN_W_W(r, fn, m);                                                         \
        return r;                                                                      \
    }                                                                                  \
    WAITING(SONAME, pthread_cond_wait, CALL_FN_W_WW(r, fn, c, m), pthread_cond_t * c, pthread_mutex_t * m)  \
    WAITING(SONAME, pthread_cond_timedwait, CALL_FN_W_WWW(r, fn, c, m, t), pthread_cond_t * c,               \
            pthread_mutex_t * m, const struct timespec * t)

/* libc.so* and libpthread.so.0 */
LOCK_WRAPPERS(libcZdsoZa)
LOCK_WRAPPERS(libpthreadZdsoZd0)
