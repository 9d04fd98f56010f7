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
 *   pmdk_threadtest POOL_DIR [ITERATIONS [OBJECTS [SIZE [THREADS [API]]]]]
 *
 * Defaults: 20 iterations of 5000 objects of 64 B, 1 thread (pmsim's tiny
 * scale). The pool file is created in POOL_DIR and removed at the end.
 *
 * API says how an object is allocated into its slot and freed from it:
 *   atomic       pmemobj_alloc / pmemobj_free on the slot (the default)
 *   tx           in a transaction: pmemobj_tx_add_range_direct on the slot,
 *                pmemobj_tx_alloc / pmemobj_tx_free, the slot stored
 *   tx-unlogged  the same without pmemobj_tx_add_range_direct: the classic
 *                PMDK bug (a store in a transaction that the transaction
 *                neither logs nor flushes at commit), kept as a mutation
 *                that pmsim crash must catch
 * The pool's creation is bracketed as pmtrace's init operation, so that the
 * crash explorer leaves the points before the pool exists out.
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
enum api { API_ATOMIC, API_TX, API_TX_UNLOGGED };
static enum api api = API_ATOMIC;

/* A PMEMoid stored in a slot as two 8-byte stores (a struct copy may be one
 * 16-byte vector store): what a malloc_to publishes is an aligned word. */
static void store_oid(PMEMoid *slot, PMEMoid oid) {
    *(volatile uint64_t *)&slot->pool_uuid_lo = oid.pool_uuid_lo;
    *(volatile uint64_t *)&slot->off = oid.off;
}

/* Allocates SIZE bytes into `slot`; 0 on success. */
static int alloc_into(PMEMoid *slot) {
    int rc = 0;
    if (api == API_ATOMIC) return pmemobj_alloc(pop, slot, size, 0, NULL, NULL);
    TX_BEGIN(pop) {
        if (api == API_TX) pmemobj_tx_add_range_direct(slot, sizeof *slot);
        store_oid(slot, pmemobj_tx_alloc(size, 0));
    }
    TX_ONABORT {
        rc = -1;
    }
    TX_END
    return rc;
}

/* Frees the object in `slot` and clears the slot. */
static void free_from(PMEMoid *slot) {
    if (api == API_ATOMIC) {
        pmemobj_free(slot);
        return;
    }
    TX_BEGIN(pop) {
        if (api == API_TX) pmemobj_tx_add_range_direct(slot, sizeof *slot);
        pmemobj_tx_free(*slot);
        store_oid(slot, OID_NULL);
    }
    TX_END
}

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

/* Each worker's id in the trace (PMTRACE_THREAD_ID), for the join markers. */
static unsigned long traced_ids[256];

static void *worker(void *arg) {
    uint64_t tid = (uint64_t)(uintptr_t)arg, it, i;
    traced_ids[tid] = PMTRACE_THREAD_ID();
    PMEMoid *slots = &root->slots[tid * objects];
    for (it = 0; it < iterations; it++) {
        for (i = 0; i < objects; i++) {
            uint64_t id = tid << 48 | (it & 0xffff) << 32 | i;
            PMTRACE_OP_BEGIN(PMT_OP_MALLOC, size);
            if (alloc_into(&slots[i]) != 0) {
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
            free_from(&slots[i]);
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
    if (argc < 2 || argc > 7) {
        fprintf(stderr, "usage: pmdk_threadtest POOL_DIR [ITERATIONS [OBJECTS [SIZE [THREADS [API]]]]]\n");
        return 2;
    }
    if (argc == 7) {
        if (strcmp(argv[6], "atomic") == 0)
            api = API_ATOMIC;
        else if (strcmp(argv[6], "tx") == 0)
            api = API_TX;
        else if (strcmp(argv[6], "tx-unlogged") == 0)
            api = API_TX_UNLOGGED;
        else {
            fprintf(stderr, "pmdk_threadtest: API '%s' is not one of atomic, tx, tx-unlogged\n", argv[6]);
            return 2;
        }
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
    /* Live objects at most: one batch per thread, plus allocator overhead,
     * plus PMDK's smallest pool (PMEMOBJ_MIN_POOL, 8 MiB) for its lanes and
     * headers: small pools keep crash images small. */
    pool_size = (size_t)(nthreads * objects * (size + 64) * 2 + nthreads * objects * sizeof(PMEMoid)) + PMEMOBJ_MIN_POOL;
    PMTRACE_OP_BEGIN(PMT_OP_INIT, 0);
    pop = pmemobj_create(path, "pmsim-threadtest", pool_size, 0600);
    if (pop == NULL) {
        fprintf(stderr, "pmdk_threadtest: %s: %s\n", path, pmemobj_errormsg());
        return 1;
    }
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
    for (t = 0; t < nthreads; t++) {
        pthread_join(th[t], NULL);
        /* The tool runs one thread at a time and cannot see the wait: the
         * simulator's replay then starts the teardown after the workers. */
        if (traced_ids[t] > 0) PMTRACE_JOINED(traced_ids[t] - 1);
    }
    pmemobj_close(pop);
    unlink(path);
    if (failed) return 1;
    printf("pmdk_threadtest: %" PRIu64 " threads x %" PRIu64 " iterations x %" PRIu64 " objects of %" PRIu64
           " B: ok\n",
           nthreads, iterations, objects, size);
    return 0;
}
