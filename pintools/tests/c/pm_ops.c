/*
 * pm_ops.c: a program whose PM events are known exactly, for the tests of the
 * Valgrind tool (pintools/tests and the pmsim CLI tests): every kind of store,
 * flush and fence it must recognise, on a file mapped from under a PM
 * directory and on a static announced with a client request.
 *
 *   pm_ops DIR ok|crash|nopm
 *
 * ok: the sequence below, then exit 0. crash: the first half, then SIGSEGV.
 * nopm: no PM at all. The expected events live in the tests (pm_ops_events).
 */
#include <fcntl.h>
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "pmtrace.h"

#define SIZE 65536

static void clflush(volatile void *p) { __asm__ volatile("clflush (%0)" ::"r"(p) : "memory"); }
static void sfence(void) { __asm__ volatile("sfence" ::: "memory"); }
static void mfence(void) { __asm__ volatile("mfence" ::: "memory"); }
static void lfence(void) { __asm__ volatile("lfence" ::: "memory"); }

/* A static that becomes PM through a client request: its clflush is
 * RIP-relative, so VEX folds the address into a 256 B-masked constant. */
static char stat_pm[512] __attribute__((aligned(256)));

int main(int argc, char **argv) {
    char path[4096];
    int fd;
    volatile uint8_t *pm;
    volatile uint64_t *w;
    uint64_t expected;
    if (argc != 3) {
        fprintf(stderr, "usage: pm_ops DIR ok|crash|nopm\n");
        return 2;
    }
    if (strcmp(argv[2], "nopm") == 0) {
        char buf[256];
        memset(buf, 1, sizeof buf);
        sfence();
        return buf[3] - 1;
    }
    snprintf(path, sizeof path, "%s/pm_ops.heap", argv[1]);
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, SIZE) != 0) {
        perror(path);
        return 1;
    }
    pm = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (pm == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    w = (volatile uint64_t *)pm;

    PMTRACE_REGION_ADD(1, PMT_META, (uintptr_t)pm, 4096, "header");
    PMTRACE_OP_BEGIN(PMT_OP_MALLOC, 64);
    w[0] = 0x1111;                       /* store 8 @0 */
    *(volatile uint32_t *)(pm + 64) = 7; /* store 4 @64 */
    clflush(pm + 8);                     /* flush line 0 */
    sfence();
    _mm_stream_si64((long long *)(pm + 128), 5); /* ntstore 8 @128 */
    mfence();
    PMTRACE_OP_END(PMT_OP_MALLOC, 4096);
    expected = 0;
    __atomic_compare_exchange_n((uint64_t *)(pm + 192), &expected, 9, 0, __ATOMIC_SEQ_CST,
                                __ATOMIC_SEQ_CST); /* rmw, store 8 @192 */
    expected = 0;
    __atomic_compare_exchange_n((uint64_t *)(pm + 192), &expected, 10, 0, __ATOMIC_SEQ_CST,
                                __ATOMIC_SEQ_CST); /* rmw only: it fails */
    clflush(pm + 200);                             /* flush line 192 */
    lfence();                                      /* not an ordering point for stores */
    if (strcmp(argv[2], "crash") == 0) {
        volatile int *null = NULL;
        *null = 1;
    }
    __atomic_exchange_n((uint64_t *)(pm + 256), 3, __ATOMIC_SEQ_CST); /* rmw, store 8 @256 */
    _mm_stream_si128((__m128i *)(pm + 320), _mm_set1_epi32(4));       /* ntstore 16 @320 */
    _mm_storeu_si128((__m128i *)(pm + 400), _mm_set1_epi32(5));       /* store 16 @400 */
    sfence();
    PMTRACE_MARKER(7, "phase 2");

    PMTRACE_PM_RANGE((uintptr_t)stat_pm, sizeof stat_pm);
    stat_pm[300] = 1;                                      /* store 1 @static+300 */
    __asm__ volatile("clflush %0" ::"m"(stat_pm[300]));   /* flush line static+256+0x20..: 0x12c -> 0x100+0 */
    __asm__ volatile("clflush %0" ::"m"(stat_pm[200]));   /* flush line static+192 */
    sfence();

    munmap((void *)pm, SIZE);
    close(fd);
    unlink(path);
    return 0;
}
