/*
 * pmdk_threadtest.c: pmsim's Threadtest (model/src/workloads/threadtest.rs)
 * on PMDK's libpmemobj, for tracing PMDK with the Valgrind tool pmtrace.
 *
 * In each of ITERATIONS rounds, every thread allocates OBJECTS objects of SIZE
 * bytes with pmemobj_alloc straight into a persistent array of slots (the
 * crash-consistent "malloc-to" API, as pmsim's Threadtest uses NVAlloc's
 * malloc_to), stamps each with a checksum, then checks and frees them all
 * with pmemobj_free (which clears the slot). Allocations and frees are
 * bracketed by pmtrace operation markers so that costs can be charged to them.
 *
 *   pmdk_threadtest POOL_DIR [ITERATIONS [OBJECTS [SIZE [THREADS]]]]
 *
 * Defaults: 20 iterations of 5000 objects of 64 B, 1 thread (pmsim's tiny
 * scale). The pool file is created in POOL_DIR and removed at the end.
 * Under Valgrind PMDK flushes with clflush (Valgrind hides clwb/clflushopt);
 * on a non-DAX directory such as /dev/shm set PMEM_IS_PMEM_FORCE=1, or PMDK
 * calls msync instead of flushing cache lines (`pmsim trace-exec --example
 * pmdk-threadtest` does).
 */
#include <inttypes.h>
#include <libpmemobj.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pmtrace.h"

struct root {
    uint64_t threads, objects;
    PMEMoid slots[]; /* threads * objects */
};

static PMEMobjpool *pop;
static struct root *root;
static uint64_t iterations = 20, objects = 5000, size = 64, nthreads = 1;
static int failed;

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    return x;
}

static void stamp(char *p, uint64_t id) {
    uint64_t head = mix(id ^ size), tail = mix(id + size);
    memcpy(p, &id, 8);
    memcpy(p + 8, &head, 8);
    memcpy(p + size - 8, &tail, 8);
}

static int verify(const char *p, uint64_t id) {
    uint64_t a, b, c;
    memcpy(&a, p, 8);
    memcpy(&b, p + 8, 8);
    memcpy(&c, p + size - 8, 8);
    return a == id && b == mix(id ^ size) && c == mix(id + size);
}

static void *worker(void *arg) {
    uint64_t tid = (uint64_t)(uintptr_t)arg, it, i;
    PMEMoid *slots = &root->slots[tid * objects];
    for (it = 0; it < iterations; it++) {
        for (i = 0; i < objects; i++) {
            uint64_t id = tid << 48 | (it & 0xffff) << 32 | i;
            PMTRACE_OP_BEGIN(PMT_OP_MALLOC, size);
            if (pmemobj_alloc(pop, &slots[i], size, 0, NULL, NULL) != 0) {
                fprintf(stderr, "pmdk_threadtest: pmemobj_alloc: %s\n", pmemobj_errormsg());
                failed = 1;
                return NULL;
            }
            PMTRACE_OP_END(PMT_OP_MALLOC, slots[i].off);
            stamp(pmemobj_direct(slots[i]), id);
        }
        for (i = 0; i < objects; i++) {
            uint64_t id = tid << 48 | (it & 0xffff) << 32 | i;
            if (!verify(pmemobj_direct(slots[i]), id)) {
                fprintf(stderr, "pmdk_threadtest: object %" PRIu64 " of thread %" PRIu64 " is corrupt\n", i, tid);
                failed = 1;
                return NULL;
            }
            PMTRACE_OP_BEGIN(PMT_OP_FREE, slots[i].off);
            pmemobj_free(&slots[i]);
            PMTRACE_OP_END(PMT_OP_FREE, 0);
        }
    }
    return NULL;
}

static uint64_t arg_or(int argc, char **argv, int i, uint64_t dflt) {
    char *end;
    uint64_t v;
    if (argc <= i) return dflt;
    v = strtoull(argv[i], &end, 10);
    if (*end || v == 0) {
        fprintf(stderr, "pmdk_threadtest: argument %d ('%s') must be a positive integer\n", i, argv[i]);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    char path[4096];
    pthread_t th[256];
    size_t pool_size;
    uint64_t t;
    if (argc < 2 || argc > 6) {
        fprintf(stderr, "usage: pmdk_threadtest POOL_DIR [ITERATIONS [OBJECTS [SIZE [THREADS]]]]\n");
        return 2;
    }
    iterations = arg_or(argc, argv, 2, iterations);
    objects = arg_or(argc, argv, 3, objects);
    size = arg_or(argc, argv, 4, size);
    nthreads = arg_or(argc, argv, 5, nthreads);
    if (size < 24 || nthreads > 256) {
        fprintf(stderr, "pmdk_threadtest: SIZE must be at least 24 and THREADS at most 256\n");
        return 2;
    }
    snprintf(path, sizeof path, "%s/pmdk-threadtest-%d.pool", argv[1], (int)getpid());
    /* Live objects at most: one batch per thread, plus allocator overhead. */
    pool_size = (size_t)(nthreads * objects * (size + 64) * 2 + nthreads * objects * sizeof(PMEMoid)) + (32u << 20);
    pop = pmemobj_create(path, "pmsim-threadtest", pool_size, 0600);
    if (pop == NULL) {
        fprintf(stderr, "pmdk_threadtest: %s: %s\n", path, pmemobj_errormsg());
        return 1;
    }
    PMTRACE_OP_BEGIN(PMT_OP_INIT, 0);
    root = pmemobj_direct(pmemobj_root(pop, sizeof *root + nthreads * objects * sizeof(PMEMoid)));
    PMTRACE_OP_END(PMT_OP_INIT, 0);
    if (root == NULL) {
        fprintf(stderr, "pmdk_threadtest: pmemobj_root: %s\n", pmemobj_errormsg());
        return 1;
    }
    {
        /* Regions, for the simulator's breakdown: the root object (the slots
         * the allocations are published into, the destinations of pmsim's
         * Threadtest) as data; the rest of the pool (PMDK's heap metadata and
         * logs, and the objects, whose stamps are never flushed) as meta. */
        char *base = (char *)pop, *r = (char *)root;
        size_t rlen = sizeof *root + nthreads * objects * sizeof(PMEMoid);
        PMTRACE_REGION_ADD(1, PMT_META, base, r - base, "pmdk pool");
        PMTRACE_REGION_ADD(2, PMT_DATA, r, rlen, "root object (slots)");
        PMTRACE_REGION_ADD(3, PMT_META, r + rlen, base + pool_size - (r + rlen), "pmdk pool");
    }
    for (t = 0; t < nthreads; t++) pthread_create(&th[t], NULL, worker, (void *)(uintptr_t)t);
    for (t = 0; t < nthreads; t++) pthread_join(th[t], NULL);
    pmemobj_close(pop);
    unlink(path);
    if (failed) return 1;
    printf("pmdk_threadtest: %" PRIu64 " threads x %" PRIu64 " iterations x %" PRIu64 " objects of %" PRIu64
           " B: ok\n",
           nthreads, iterations, objects, size);
    return 0;
}
