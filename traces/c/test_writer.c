/*
 * test_writer.c: exercises pmt_writer.h for traces/tests/c_writer.rs, which
 * reads what this writes with the Rust reader and compares it byte for byte
 * with what the Rust writer writes for the same calls.
 *
 *   test_writer OUT values|novalues [HEADER]
 *       Writes the built-in event sequence (emit_fixed, emit_random, emit_end;
 *       mirrored in c_writer.rs) with 4096-byte blocks. HEADER is a file with
 *       the JSON header bytes; "-" means an empty header; without it a
 *       built-in header is used. Prints "events E blocks B bytes N".
 *   test_writer OUT replay SCRIPT HEADER BLOCK_SIZE values|novalues
 *       Replays the calls of SCRIPT (format at run_replay) and prints each
 *       call's status on a line of its own.
 *
 * Everything above main() uses no libc, so that c_writer.rs can also build it
 * with -DPMT_NO_STDIO -DPMT_TEST_NO_MAIN -ffreestanding -nostdlib and check
 * that the writer needs nothing from the C library.
 */
#include "pmt_writer.h"

#define HEAP UINT64_C(0x7f0000000000)

/* Where the first unexpected status came from, for main's message. */
static int fail_line;
static int fail_status;

#define EXPECT(call, want)               \
    do {                                 \
        int st_ = (call);                \
        if (st_ != (want)) {             \
            fail_line = __LINE__;        \
            fail_status = st_;           \
            return 1;                    \
        }                                \
    } while (0)
#define CHECK(call) EXPECT(call, PMT_OK)

/* Value bytes of a store: a function of a key, mirrored in c_writer.rs. */
static uint8_t val[8192];
static const uint8_t *fill(uint64_t key, uint32_t size) {
    uint32_t j;
    for (j = 0; j < size; j++) val[j] = (uint8_t)(key * 131u + j * 7u + 1u);
    return val;
}

static size_t text_len(const char *s) {
    size_t n = 0;
    while (s[n]) n++;
    return n;
}

/* Every event kind, the encodings' edge cases, and refused calls (each must
 * leave the trace as it was). c_writer.rs mirrors it call by call, except for
 * the calls marked "C only", which the Rust API cannot express. */
static int emit_fixed(pmt_writer *w, int values) {
    const uint64_t H = HEAP;
    uint64_t op;
    /* Thread 0: every kind, cursor runs, negative deltas. */
    CHECK(pmt_thread_start(w, 0));
    CHECK(pmt_region_add(w, 0, 0, PMT_META, H, 4096, "heap header", 11));
    CHECK(pmt_region_add(w, 0, 1, PMT_DATA, H + 4096, 1u << 20, "donn\xc3\xa9" "es \xe2\x9c\x93", 12));
    CHECK(pmt_op_begin(w, 0, PMT_OP_MALLOC, 48));
    CHECK(pmt_store(w, 0, H + 64, 8, fill(1, 8)));
    CHECK(pmt_store(w, 0, H + 72, 8, fill(2, 8)));   /* at the cursor */
    CHECK(pmt_store(w, 0, H + 80, 24, fill(3, 24))); /* size not a power of two */
    CHECK(pmt_store(w, 0, H + 104, 0, fill(4, 0)));  /* empty */
    CHECK(pmt_flush(w, 0, PMT_CLWB, H + 64));        /* the line just stored to */
    CHECK(pmt_flush(w, 0, PMT_CLFLUSHOPT, H + 128));
    CHECK(pmt_fence(w, 0, PMT_SFENCE));
    CHECK(pmt_op_end(w, 0, PMT_OP_MALLOC, 4096 + 64));
    CHECK(pmt_ntstore(w, 0, H + 4096, 64, fill(5, 64)));
    CHECK(pmt_load(w, 0, H + 8, 4)); /* backwards */
    CHECK(pmt_load(w, 0, H + 12, 3));
    CHECK(pmt_fence(w, 0, PMT_MFENCE));
    CHECK(pmt_fence(w, 0, PMT_LOCKED_RMW));
    CHECK(pmt_flush(w, 0, PMT_CLFLUSH, H));
    CHECK(pmt_store(w, 0, H + 8192, 5000, fill(6, 5000))); /* larger than a block */
    /* Thread switches (ids below 15 in the tag, others as varints); huge and wrapping deltas. */
    CHECK(pmt_thread_start(w, 3));
    CHECK(pmt_store(w, 3, UINT64_C(0xfffffffffffffff8), 8, fill(7, 8))); /* the cursor wraps to 0 */
    CHECK(pmt_store(w, 3, 8, 8, fill(8, 8)));
    CHECK(pmt_flush(w, 3, PMT_CLWB, 0));
    CHECK(pmt_flush(w, 3, PMT_CLWB, UINT64_C(0xffffffffffffffc0)));
    CHECK(pmt_thread_start(w, 15));
    CHECK(pmt_store(w, 15, UINT64_C(0x8000000000000000), 16, fill(9, 16)));
    CHECK(pmt_store(w, 15, 0x1000, 16, fill(10, 16)));
    CHECK(pmt_store(w, 15, H, 1, fill(11, 1)));
    CHECK(pmt_op_begin(w, 15, PMT_OP_OTHER, 1));
    CHECK(pmt_op_end(w, 15, PMT_OP_OTHER, 2));
    CHECK(pmt_op_begin(w, 15, 1000000, UINT64_MAX));
    CHECK(pmt_op_end(w, 15, UINT64_MAX, 0));
    for (op = PMT_OP_FREE; op <= PMT_OP_CLOSE; op++) {
        CHECK(pmt_op_begin(w, 14, op, op * 1000));
        CHECK(pmt_op_end(w, 14, op, op));
    }
    CHECK(pmt_thread_start(w, 16));
    CHECK(pmt_thread_start(w, PMT_MAX_THREADS - 1));
    CHECK(pmt_store(w, PMT_MAX_THREADS - 1, H + 128, 2, fill(12, 2)));
    CHECK(pmt_thread_end(w, PMT_MAX_THREADS - 1));
    CHECK(pmt_marker(w, 0, 7, "checkpoint \xce\xb1", 13));
    CHECK(pmt_marker(w, 0, UINT64_MAX, NULL, 0));
    CHECK(pmt_region_remove(w, 0, 1));
    CHECK(pmt_load(w, 0, H, UINT32_MAX));
    /* Code sites: ids in the tag and after it, kept across events, reset by a
     * thread switch, unchanged by a refused event. */
    CHECK(pmt_site_define(w, 1, 0x401000, 42, 0, "src/libpmem.c", 13, "pmem_flush", 10));
    CHECK(pmt_site_define(w, 300, 0, 0, 0, NULL, 0, NULL, 0));
    CHECK(pmt_site_define(w, 7, 0, 1, 2, "\xc3\xa9.rs", 5, "donn\xc3\xa9" "es", 8));
    CHECK(pmt_flush_at(w, 0, PMT_CLWB, H + 64, 1));
    CHECK(pmt_fence_at(w, 0, PMT_SFENCE, 1));
    CHECK(pmt_flush_at(w, 0, PMT_CLWB, H, 300));
    CHECK(pmt_fence_at(w, 3, PMT_SFENCE, 300));
    CHECK(pmt_flush_at(w, 3, PMT_CLWB, H, 0));
    EXPECT(pmt_flush_at(w, 5, PMT_CLWB, H + 3, 9), PMT_ERR_UNALIGNED);
    CHECK(pmt_fence_at(w, 5, PMT_MFENCE, 0));
    CHECK(pmt_fence_at(w, 0, PMT_MFENCE, 7));
    /* Refused calls, several of them switching threads: the next event of that
     * thread must still be attributed to it. */
    EXPECT(pmt_flush(w, 7, PMT_CLWB, H + 1), PMT_ERR_UNALIGNED);
    CHECK(pmt_store(w, 7, H + 200, 8, fill(13, 8)));
    EXPECT(pmt_op_begin(w, 9, 8, 0), PMT_ERR_OP_CODE);
    EXPECT(pmt_op_end(w, 9, 15, 0), PMT_ERR_OP_CODE);
    CHECK(pmt_thread_start(w, 9));
    EXPECT(pmt_store(w, 11, H, 8, NULL), values ? PMT_ERR_VALUE : PMT_OK);
    EXPECT(pmt_ntstore(w, 11, H, 0, NULL), values ? PMT_ERR_VALUE : PMT_OK);
    CHECK(pmt_fence(w, 11, PMT_SFENCE));
    EXPECT(pmt_fence(w, 70000, PMT_SFENCE), PMT_ERR_TID);
    /* C only. */
    EXPECT(pmt_fence(w, PMT_MAX_THREADS, PMT_SFENCE), PMT_ERR_TID);
    EXPECT(pmt_flush(w, 12, 3, H), PMT_ERR_ARG);
    EXPECT(pmt_fence(w, 12, 3), PMT_ERR_ARG);
    EXPECT(pmt_region_add(w, 12, 5, 4, H, 64, "x", 1), PMT_ERR_ARG);
    EXPECT(pmt_region_add(w, 12, 5, PMT_LOG, H, 64, "\xff", 1), PMT_ERR_UTF8);
    EXPECT(pmt_region_add(w, 12, 5, PMT_LOG, H, 64, NULL, 1), PMT_ERR_ARG);
    EXPECT(pmt_marker(w, 12, 1, "\xc0\x80", 2), PMT_ERR_UTF8);         /* overlong */
    EXPECT(pmt_marker(w, 12, 1, "\xed\xa0\x80", 3), PMT_ERR_UTF8);     /* surrogate */
    EXPECT(pmt_marker(w, 12, 1, "\xf4\x90\x80\x80", 4), PMT_ERR_UTF8); /* above U+10FFFF */
    EXPECT(pmt_marker(w, 12, 1, "\xe2\x9c", 2), PMT_ERR_UTF8);         /* cut short */
    EXPECT(pmt_marker(w, 12, 1, "a\x80", 2), PMT_ERR_UTF8);            /* stray continuation */
    /* Back to the mirrored sequence. */
    CHECK(pmt_marker(w, 12, 2, "\xf0\x9f\xa6\x80 ok", 7));
    return 0;
}

/* A deterministic pseudo-random mix of every kind over several threads, so
 * that the trace crosses many blocks with cursors in every state at the cuts.
 * xorshift64; mirrored in c_writer.rs. */
static uint64_t rng;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static const uint32_t R_TIDS[9] = {0, 1, 2, 5, 14, 15, 16, 100, PMT_MAX_THREADS - 1};
static const uint32_t R_SIZES[12] = {1, 2, 4, 8, 16, 32, 64, 3, 24, 100, 6, 128};
static const uint64_t R_OPS[11] = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 300};
static const char *const R_TEXT[3] = {"", "gc", "phase \xe2\x86\x92 2"};

static int emit_random(pmt_writer *w, uint64_t n) {
    uint64_t ptr[9], i;
    unsigned t = 0, j;
    rng = UINT64_C(0x9E3779B97F4A7C15);
    for (j = 0; j < 9; j++) ptr[j] = HEAP + (uint64_t)j * 0x100000;
    for (i = 0; i < n; i++) {
        uint64_t r = next_rand(), r2 = r >> 16;
        unsigned k = (unsigned)((r >> 8) % 32);
        uint32_t tid;
        const char *s;
        if ((r & 7) == 0) t = (unsigned)((r >> 3) % 9);
        tid = R_TIDS[t];
        if (k < 16) {
            uint32_t size = R_SIZES[r2 % 12];
            uint64_t addr;
            switch ((r2 >> 4) % 4) {
            case 0:
            case 1: addr = ptr[t]; break;
            case 2: addr = ptr[t] - (r2 >> 8) % 256; break;
            default: addr = HEAP + (r2 >> 8) % (1u << 24); break;
            }
            ptr[t] = addr + size;
            if (k < 10)
                CHECK(pmt_store(w, tid, addr, size, fill(i, size)));
            else if (k < 12)
                CHECK(pmt_ntstore(w, tid, addr, size, fill(i, size)));
            else
                CHECK(pmt_load(w, tid, addr, size));
        } else if (k < 22) {
            uint64_t line = ((r2 & 3) ? ptr[t] - 1 : HEAP + (r2 >> 2) % (1u << 24)) & ~(uint64_t)63;
            CHECK(pmt_flush_at(w, tid, (unsigned)((r2 >> 30) % 3), line, (uint32_t)((r >> 40) % 20)));
        } else if (k < 26) {
            CHECK(pmt_fence_at(w, tid, (unsigned)(r2 % 3), (uint32_t)((r >> 40) % 20)));
        } else if (k == 26) {
            CHECK(pmt_op_begin(w, tid, R_OPS[r2 % 11], r2 >> 8));
        } else if (k == 27) {
            CHECK(pmt_op_end(w, tid, R_OPS[r2 % 11], r2 >> 8));
        } else if (k == 28) {
            s = R_TEXT[(r2 >> 10) % 3];
            CHECK(pmt_marker(w, tid, r2 % 1000, s, text_len(s)));
        } else if (k == 29) {
            s = R_TEXT[(r2 >> 2) % 3];
            CHECK(pmt_region_add(w, tid, r2 % 64, (unsigned)((r2 >> 6) % 4), HEAP + ((r2 >> 8) % 4096) * 4096,
                                 4096 * (1 + (r2 >> 20) % 16), s, text_len(s)));
        } else if (k == 30) {
            CHECK(pmt_region_remove(w, tid, r2 % 64));
        } else if (r2 & 1) {
            CHECK(pmt_thread_start(w, tid));
        } else {
            CHECK(pmt_thread_end(w, tid));
        }
    }
    return 0;
}

static int emit_end(pmt_writer *w) {
    CHECK(pmt_thread_end(w, 15));
    CHECK(pmt_thread_end(w, 3));
    CHECK(pmt_thread_end(w, 0));
    return 0;
}

/* The whole built-in sequence. */
static int emit_builtin(pmt_writer *w, int values) {
    return emit_fixed(w, values) || emit_random(w, 20000) || emit_end(w);
}

/* A write callback into memory that can be told to fail. */
typedef struct mem_sink {
    uint8_t *buf;
    size_t cap, len, fail_at;
} mem_sink;

static int mem_write(void *ctx, const void *p, size_t n) {
    mem_sink *m = (mem_sink *)ctx;
    const uint8_t *s = (const uint8_t *)p;
    size_t i;
    if (n > m->cap - m->len || m->len + n > m->fail_at) return -1;
    for (i = 0; i < n; i++) m->buf[m->len + i] = s[i];
    m->len += n;
    return 0;
}

/* What the main trace cannot show: bad init arguments, records larger than
 * the buffer, write failures, calls after finish. (C only.) */
static pmt_writer side;
static uint8_t side_buf[PMT_RECORD_MAX + 16];
static uint8_t side_out[4096];

static int side_tests(void) {
    mem_sink m;
    pmt_stats st;
    int i, e;
    m.buf = side_out;
    m.cap = sizeof side_out;
    m.len = 0;
    m.fail_at = (size_t)-1;
    EXPECT(pmt_writer_init(&side, side_buf, PMT_RECORD_MAX - 1, 0, mem_write, &m, "{}", 2, 0), PMT_ERR_ARG);
    EXPECT(pmt_store(&side, 0, 0, 1, NULL), PMT_ERR_ARG); /* a writer whose init failed refuses events */
    EXPECT(pmt_writer_init(&side, side_buf, sizeof side_buf, 0, mem_write, &m, "{}", 2, 2), PMT_ERR_ARG);
    EXPECT(pmt_writer_init(&side, NULL, sizeof side_buf, 0, mem_write, &m, "{}", 2, 0), PMT_ERR_ARG);
    EXPECT(pmt_writer_init(&side, side_buf, sizeof side_buf, 0, NULL, &m, "{}", 2, 0), PMT_ERR_ARG);
    EXPECT(pmt_writer_init(&side, side_buf, sizeof side_buf, 0, mem_write, &m, NULL, 2, 0), PMT_ERR_ARG);
    EXPECT(pmt_writer_init(&side, side_buf, sizeof side_buf, 0, mem_write, &m, "{}", PMT_MAX_LEN + 1, 0),
           PMT_ERR_TOO_BIG);
    EXPECT(pmt_writer_init(NULL, side_buf, sizeof side_buf, 0, mem_write, &m, "{}", 2, 0), PMT_ERR_ARG);
    if (m.len != 0) return fail_line = __LINE__, 1;

    /* An 80-byte buffer, 64-byte blocks, values recorded. */
    CHECK(pmt_writer_init(&side, side_buf, sizeof side_buf, 64, mem_write, &m, NULL, 0, PMT_FLAG_VALUES));
    if (m.len != 16 + 2 + 4) return fail_line = __LINE__, 1; /* the empty header is written as {} */
    /* pmt_header_crc gives the checksum the preamble carries (for rewriting a header in place). */
    if (pmt_header_crc(&side, "{}", 2, PMT_FLAG_VALUES) !=
        ((uint32_t)side_out[18] | (uint32_t)side_out[19] << 8 | (uint32_t)side_out[20] << 16 | (uint32_t)side_out[21] << 24))
        return fail_line = __LINE__, 1;
    if (pmt_header_crc(&side, "{}", 2, 0) == pmt_header_crc(&side, "{}", 2, PMT_FLAG_VALUES))
        return fail_line = __LINE__, 1;
    EXPECT(pmt_store(&side, 0, 0, 100, val), PMT_ERR_TOO_BIG); /* never fits */
    CHECK(pmt_store(&side, 0, 0, 8, val));                      /* 9 bytes */
    CHECK(pmt_store(&side, 0, 8, 70, val)); /* 72 bytes do not fit behind: a block of 9, then one of 73 */
    EXPECT(pmt_store(&side, 0, 0, 8, NULL), PMT_ERR_VALUE);
    st = pmt_writer_stats(&side);
    if (st.events != 2 || st.blocks != 2) return fail_line = __LINE__, 1;
    CHECK(pmt_writer_finish(&side));
    EXPECT(pmt_writer_finish(&side), PMT_ERR_FINISHED);
    EXPECT(pmt_fence(&side, 0, PMT_SFENCE), PMT_ERR_FINISHED);
    st = pmt_writer_stats(&side);
    if (st.events != 2 || st.blocks != 2 || st.bytes != m.len || m.len != 22 + (24 + 9) + (24 + 73) + (24 + 16))
        return fail_line = __LINE__, 1;

    /* A failed write is reported, and sticks. */
    m.len = 0;
    m.fail_at = 100;
    CHECK(pmt_writer_init(&side, side_buf, sizeof side_buf, 64, mem_write, &m, NULL, 0, 0));
    for (i = 0, e = PMT_OK; i < 1000 && e == PMT_OK; i++) e = pmt_store(&side, 0, (uint64_t)i * 8, 8, NULL);
    if (e != PMT_ERR_WRITE) return fail_line = __LINE__, fail_status = e, 1;
    EXPECT(pmt_fence(&side, 0, PMT_SFENCE), PMT_ERR_WRITE);
    EXPECT(pmt_writer_finish(&side), PMT_ERR_WRITE);
    m.len = 0;
    m.fail_at = 10;
    EXPECT(pmt_writer_init(&side, side_buf, sizeof side_buf, 64, mem_write, &m, NULL, 0, 0), PMT_ERR_WRITE);
    EXPECT(pmt_fence(&side, 0, PMT_SFENCE), PMT_ERR_WRITE);
    return 0;
}

#ifndef PMT_TEST_NO_MAIN
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pmt_writer w;
static uint8_t block_buf[PMT_BUF_SIZE(4096, sizeof val)];
/* Replays use blocks of up to 16 MiB, as the Rust writer's. */
static uint8_t replay_buf[PMT_BUF_SIZE(PMT_MAX_LEN, 0)];

static const char BUILTIN_HEADER_NOVALUES[] =
    "{\"pmsim_version\":\"0.1.0\",\"tracer\":\"valgrind\",\"threads\":4,\"flush_insn\":\"clwb\","
    "\"values\":false,\"extra\":{\"writer\":\"pmt_writer.h\"}}";
static const char BUILTIN_HEADER_VALUES[] =
    "{\"pmsim_version\":\"0.1.0\",\"tracer\":\"valgrind\",\"threads\":4,\"flush_insn\":\"clwb\","
    "\"values\":true,\"extra\":{\"writer\":\"pmt_writer.h\"}}";

static void *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;
    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(2);
    }
    buf = (char *)malloc((size_t)n + 1);
    if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(2);
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static uint64_t get_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    int i;
    for (i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* The script is a sequence of calls, each
 *   u8 call, u32 tid, u64 a, u64 b, u64 c, u64 d, u32 n, n data bytes
 * (little-endian; n = 0xffffffff: no data, a NULL pointer). Calls: 0 store,
 * 1 ntstore, 2 load (addr a, size b, value data); 3 flush (line a, kind b);
 * 4 fence (kind b), both at site c; 5 thread start; 6 thread end; 7 region add (id a,
 * category b, base c, len d, name data); 8 region remove (id a); 9 op begin,
 * 10 op end (op a, arg/result b); 11 marker (id a, label data); 12 site
 * definition (id a, address b, line c, column d, data "file\0function"). */
static int run_replay(pmt_writer *wr, const uint8_t *s, size_t len) {
    size_t pos = 0;
    while (pos < len) {
        unsigned call;
        uint32_t tid, n;
        uint64_t a, b, c, d;
        const void *data;
        size_t dlen;
        int e;
        if (len - pos < 41) return fprintf(stderr, "script cut short\n"), 1;
        call = s[pos];
        tid = (uint32_t)get_le(s + pos + 1, 4);
        a = get_le(s + pos + 5, 8);
        b = get_le(s + pos + 13, 8);
        c = get_le(s + pos + 21, 8);
        d = get_le(s + pos + 29, 8);
        n = (uint32_t)get_le(s + pos + 37, 4);
        pos += 41;
        data = n == 0xffffffffu ? NULL : s + pos;
        dlen = n == 0xffffffffu ? 0 : n;
        if (len - pos < dlen) return fprintf(stderr, "script cut short\n"), 1;
        pos += dlen;
        switch (call) {
        case 0: e = pmt_store(wr, tid, a, (uint32_t)b, data); break;
        case 1: e = pmt_ntstore(wr, tid, a, (uint32_t)b, data); break;
        case 2: e = pmt_load(wr, tid, a, (uint32_t)b); break;
        case 3: e = pmt_flush_at(wr, tid, (unsigned)b, a, (uint32_t)c); break;
        case 4: e = pmt_fence_at(wr, tid, (unsigned)b, (uint32_t)c); break;
        case 5: e = pmt_thread_start(wr, tid); break;
        case 6: e = pmt_thread_end(wr, tid); break;
        case 7: e = pmt_region_add(wr, tid, a, (unsigned)b, c, d, (const char *)data, dlen); break;
        case 8: e = pmt_region_remove(wr, tid, a); break;
        case 9: e = pmt_op_begin(wr, tid, a, b); break;
        case 10: e = pmt_op_end(wr, tid, a, b); break;
        case 11: e = pmt_marker(wr, tid, a, (const char *)data, dlen); break;
        case 12: { /* site define: id a, address b, line c, column d, data "file\0function" */
            size_t f = 0;
            const char *t = (const char *)data;
            while (f < dlen && t[f] != 0) f++;
            e = pmt_site_define(wr, (uint32_t)a, b, (uint32_t)c, (uint32_t)d, t, f, f < dlen ? t + f + 1 : NULL,
                                f < dlen ? dlen - f - 1 : 0);
            break;
        }
        default: return fprintf(stderr, "unknown call %u in the script\n", call), 1;
        }
        printf("%d\n", e);
    }
    return 0;
}

int main(int argc, char **argv) {
    const void *header;
    size_t header_len;
    int values, e;
    pmt_stats st;
    if (argc >= 7 && strcmp(argv[2], "replay") == 0) {
        size_t script_len;
        uint8_t *script = (uint8_t *)read_file(argv[3], &script_len);
        header = read_file(argv[4], &header_len);
        values = strcmp(argv[6], "values") == 0;
        e = pmt_writer_open_file(&w, argv[1], replay_buf, sizeof replay_buf, (size_t)strtoul(argv[5], NULL, 10),
                                 header, header_len, values ? PMT_FLAG_VALUES : 0);
        if (e) return fprintf(stderr, "%s: %s\n", argv[1], pmt_strerror(e)), 1;
        if (run_replay(&w, script, script_len)) return 1;
        e = pmt_writer_finish_file(&w);
        if (e) return fprintf(stderr, "%s: finish: %s\n", argv[1], pmt_strerror(e)), 1;
        return 0;
    }
    if (argc < 3 || argc > 4 || (strcmp(argv[2], "values") != 0 && strcmp(argv[2], "novalues") != 0)) {
        fprintf(stderr, "usage: %s OUT values|novalues [HEADER|-]\n"
                        "       %s OUT replay SCRIPT HEADER BLOCK_SIZE values|novalues\n",
                argv[0], argv[0]);
        return 2;
    }
    values = strcmp(argv[2], "values") == 0;
    if (argc == 3) {
        header = values ? BUILTIN_HEADER_VALUES : BUILTIN_HEADER_NOVALUES;
        header_len = strlen((const char *)header);
    } else if (strcmp(argv[3], "-") == 0) {
        header = NULL;
        header_len = 0;
    } else {
        header = read_file(argv[3], &header_len);
    }
    if (side_tests()) {
        fprintf(stderr, "side tests: unexpected status %d (%s) at line %d\n", fail_status, pmt_strerror(fail_status),
                fail_line);
        return 1;
    }
    e = pmt_writer_open_file(&w, argv[1], block_buf, sizeof block_buf, 4096, header, header_len,
                             values ? PMT_FLAG_VALUES : 0);
    if (e) return fprintf(stderr, "%s: %s\n", argv[1], pmt_strerror(e)), 1;
    if (emit_builtin(&w, values)) {
        fprintf(stderr, "unexpected status %d (%s) at line %d\n", fail_status, pmt_strerror(fail_status), fail_line);
        return 1;
    }
    e = pmt_writer_finish_file(&w);
    if (e) return fprintf(stderr, "%s: finish: %s\n", argv[1], pmt_strerror(e)), 1;
    st = pmt_writer_stats(&w);
    printf("events %llu blocks %llu bytes %llu\n", (unsigned long long)st.events, (unsigned long long)st.blocks,
           (unsigned long long)st.bytes);
    return 0;
}
#else
/* Freestanding build: something that uses every function, so that the
 * linker sees all the code and any library symbol it needs. */
int pmt_test_entry(pmt_writer *w, int values);
int pmt_test_entry(pmt_writer *w, int values) {
    return side_tests() || emit_builtin(w, values) || pmt_writer_finish(w);
}
#endif
