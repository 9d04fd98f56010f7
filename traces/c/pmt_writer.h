/*
 * pmt_writer.h: a header-only C99 writer of pmsim's `.pmt` trace format,
 * version 3 (specified in traces/FORMAT.md).
 *
 * Why it exists: the DBI tracers in pintools/ (a Valgrind tool, which may not
 * use libc, and an Intel Pin tool) must write traces that pmsim's one reader,
 * `pmsim_traces::TraceReader`, reads. This writer produces byte for byte what
 * the Rust `TraceWriter` writes for the same header bytes, event sequence and
 * block size (raw blocks only: codec 0, no zstd), which
 * traces/tests/c_writer.rs checks.
 *
 * Why it looks the way it does:
 *  - Freestanding: the core includes only <stddef.h> and <stdint.h>, calls no
 *    library function and never allocates. The caller supplies the block buffer
 *    and a write callback. (An optimizing compiler may still emit calls to
 *    memcpy/memset for the copy loops, as it may for any C code; freestanding
 *    environments, Valgrind's core among them, provide those four symbols.)
 *  - Header-only, every function `static inline`: a tool adds one #include and
 *    no build step, and unused functions cost nothing.
 *  - Every function returns a `pmt_status` (0 on success). A refused event
 *    leaves the trace and the writer exactly as they were, so a tracer may log
 *    the error and go on. A failed write is sticky: the trace is then broken,
 *    and every later call says so.
 *  - `PMT_NO_STDIO` removes the stdio convenience functions at the end.
 *  - The header compiles as C++ too (Pin tools are C++).
 *
 * Usage:
 *
 *     static pmt_writer w;                         // ~10 KiB: keep it off small stacks
 *     static unsigned char buf[PMT_BUF_SIZE(PMT_DEFAULT_BLOCK_SIZE, 4096)];
 *     pmt_writer_init(&w, buf, sizeof buf, 0, my_write, my_ctx, json, json_len, PMT_FLAG_VALUES);
 *     pmt_store(&w, tid, addr, 8, &value);
 *     pmt_flush(&w, tid, PMT_CLWB, addr & ~(uint64_t)63);
 *     pmt_fence(&w, tid, PMT_SFENCE);
 *     pmt_site_define(&w, 7, ip, 42, 0, "src/x.c", 7, "f", 1);   // before site 7's first use
 *     pmt_flush_at(&w, tid, PMT_CLWB, line, 7);   // a flush issued at code site 7
 *     pmt_writer_finish(&w);                       // without it the trace reads as truncated
 *
 * Not thread-safe: one writer serializes the events of all threads, and their
 * order in the file is their global order, so callers hold a lock around it.
 */
#ifndef PMT_WRITER_H
#define PMT_WRITER_H

#include <stddef.h>
#include <stdint.h>

/* Threads a writer can name. It sizes the per-thread cursor array inside
 * `pmt_writer` (8 bytes each), so that the writer never allocates; events of a
 * thread id >= PMT_MAX_THREADS are refused with PMT_ERR_TID. Every translation
 * unit sharing a writer must see the same value. */
#ifndef PMT_MAX_THREADS
#define PMT_MAX_THREADS 1024
#endif
#if PMT_MAX_THREADS < 1 || PMT_MAX_THREADS > 65536
#error "PMT_MAX_THREADS must be in 1..65536: the format carries thread ids up to 65535"
#endif

/* The format version this header writes. */
#define PMT_VERSION 3
/* Preamble flag: stores carry their value bytes (needed for crash states). */
#define PMT_FLAG_VALUES 1u
/* The label of the marker recorded on a thread as it creates another (id: the
 * new thread's id), by a tracer that runs one thread at a time (FORMAT.md). */
#define PMT_SPAWN_MARKER "thread:spawn"
/* The label of the marker recorded on a thread that waited for another to end
 * (id: that thread's id), where the program says so (FORMAT.md). */
#define PMT_JOIN_MARKER "thread:join"
/* The labels of the markers recorded on a thread just after it took a lock and
 * just before it let the lock go (id: the lock's address) (FORMAT.md). */
#define PMT_LOCK_ACQUIRE_MARKER "lock:acquire"
#define PMT_LOCK_RELEASE_MARKER "lock:release"
/* Raw payload size at which blocks are cut, as in the Rust writer. */
#define PMT_DEFAULT_BLOCK_SIZE ((size_t)128 << 10)
/* The largest header and block payload a reader accepts (16 MiB). */
#define PMT_MAX_LEN ((size_t)16 << 20)
/* An upper bound on the bytes of one record besides its value, name or label
 * bytes, a thread switch included (the largest is a REGION_ADD: 4 + 41). */
#define PMT_RECORD_MAX 64
/* A block buffer size at which blocks are cut exactly where the Rust writer
 * cuts them: a block is cut once it reaches `block_size`, so the buffer must
 * hold `block_size - 1` bytes plus the largest record (`max_payload` being the
 * largest store value, region name or marker label). With a smaller buffer a
 * block is also cut before an event that does not fit; the trace is as valid. */
#define PMT_BUF_SIZE(block_size, max_payload) ((size_t)(block_size) + PMT_RECORD_MAX + (size_t)(max_payload))

/* What a call can report. The values are stable (tools may log them). */
typedef enum pmt_status {
    PMT_OK = 0,
    /* The write callback failed. The trace is broken; every later call returns this. */
    PMT_ERR_WRITE = 1,
    /* A NULL pointer, an unknown flush/fence kind, region category or flag, or
     * a buffer smaller than PMT_RECORD_MAX. */
    PMT_ERR_ARG = 2,
    /* A thread id >= PMT_MAX_THREADS. */
    PMT_ERR_TID = 3,
    /* A flush of a line that is not 64-byte aligned. */
    PMT_ERR_UNALIGNED = 4,
    /* Operation codes 8-15 are reserved (0-7 are named, >= 16 are "other"). */
    PMT_ERR_OP_CODE = 5,
    /* A store without its value in a trace that records values. */
    PMT_ERR_VALUE = 6,
    /* A region name or marker label that is not UTF-8 (the reader refuses it). */
    PMT_ERR_UTF8 = 7,
    /* A record larger than the block buffer (or than a block may be), or a
     * header larger than 16 MiB. */
    PMT_ERR_TOO_BIG = 8,
    /* The writer has been finished. */
    PMT_ERR_FINISHED = 9,
    /* pmt_writer_open_file could not create the file. */
    PMT_ERR_OPEN = 10
} pmt_status;

/* Flush instructions (the `kind` of pmt_flush); their costs and effects differ. */
enum { PMT_CLWB = 0, PMT_CLFLUSHOPT = 1, PMT_CLFLUSH = 2 };
/* Ordering points (the `kind` of pmt_fence); a locked read-modify-write orders like mfence. */
enum { PMT_SFENCE = 0, PMT_MFENCE = 1, PMT_LOCKED_RMW = 2 };
/* Region categories (pmt_region_add); statistics are broken down by them. */
enum { PMT_META = 0, PMT_WAL = 1, PMT_LOG = 2, PMT_DATA = 3 };
/* Operation codes (pmt_op_begin/pmt_op_end). Codes >= PMT_OP_OTHER are a
 * tool's own operations; 8-15 are reserved. */
enum {
    PMT_OP_MALLOC = 0,
    PMT_OP_FREE = 1,
    PMT_OP_REALLOC = 2,
    PMT_OP_MORPH = 3,
    PMT_OP_LOG_GC = 4,
    PMT_OP_RECOVERY = 5,
    PMT_OP_INIT = 6,
    PMT_OP_CLOSE = 7,
    PMT_OP_OTHER = 16
};

/* Where the bytes go: writes all `len` bytes of `buf`, returns 0 on success.
 * A callback rather than a file so that the writer needs no libc. */
typedef int (*pmt_write_fn)(void *ctx, const void *buf, size_t len);

/* Counts of what a writer wrote, like the Rust `WriteStats`. */
typedef struct pmt_stats {
    uint64_t events; /* events accepted, the current block's included */
    uint64_t blocks; /* data blocks written */
    uint64_t bytes;  /* bytes written: preamble, blocks and end block */
} pmt_stats;

/* A writer. Its fields are private; it is a plain struct so that it can live
 * in static storage without any allocation. */
typedef struct pmt_writer {
    pmt_write_fn write;
    void *ctx;
    uint8_t *buf;          /* the block payload being built */
    size_t cap;            /* usable bytes of buf: at most PMT_MAX_LEN */
    size_t len;            /* payload bytes so far */
    size_t block_size;     /* payload size at which the block is cut */
    uint32_t block_events; /* events in the current block */
    int values;            /* stores carry values */
    int status;            /* PMT_OK, or the sticky PMT_ERR_WRITE / PMT_ERR_FINISHED */
    /* Encoder state, reset at every block start exactly as the reader's: */
    uint32_t tid;          /* the current thread */
    uint32_t site;         /* the site of the next flush or fence: 0 at block starts and thread switches */
    uint32_t ncursors;     /* cursor[0..ncursors) are valid; the others read as 0 */
    uint64_t events;       /* events in the blocks written */
    uint64_t blocks;
    uint64_t bytes;
    uint32_t crc_table[256];
    uint64_t cursor[PMT_MAX_THREADS];
} pmt_writer;

/* ---- internals (names with a double underscore are not API) ---- */

/* Record kinds (low nibble of a record's tag byte). */
enum {
    PMT__K_STORE = 0,
    PMT__K_NTSTORE = 1,
    PMT__K_LOAD = 2,
    PMT__K_FLUSH = 3,
    PMT__K_FENCE = 4,
    PMT__K_THREAD = 5,
    PMT__K_THREAD_START = 6,
    PMT__K_THREAD_END = 7,
    PMT__K_REGION_ADD = 8,
    PMT__K_REGION_REMOVE = 9,
    PMT__K_OP_BEGIN = 10,
    PMT__K_OP_END = 11,
    PMT__K_MARKER = 12
};
#define PMT__X_SAME 8u      /* tag bit: the address is the cursor (accesses) or its line (flushes) */
#define PMT__X_SITE 4u      /* tag bit: a flush or fence sets the code site, written right after the tag */
#define PMT__SIZE_VARINT 7u /* size code: the size follows as a varint */
#define PMT__CODEC_RAW 0u
#define PMT__CODEC_SITES 2u
#define PMT__CODEC_END 255u
#define PMT__HEADER_LEN 24
#define PMT__MIN_BLOCK ((size_t)64)
#define PMT__MAX_BLOCK (PMT_MAX_LEN / 2) /* the Rust writer clamps block sizes to [64, 8 MiB] */

/* One event, as the public functions hand it to pmt__write. */
typedef struct pmt__ev {
    unsigned kind;     /* PMT__K_* */
    unsigned x;        /* flush/fence kind, region category */
    uint64_t a, b, c;  /* kind-specific: addr/size, line, id/base/len, op/arg, id */
    const void *data;  /* value bytes, region name or marker label */
    size_t data_len;   /* bytes of data written after the record */
    uint32_t site;     /* code site of a flush or fence (0: unknown) */
} pmt__ev;

/* Copies bytes; the core may not call memcpy. */
static inline void pmt__copy(uint8_t *dst, const uint8_t *src, size_t n) {
    size_t i;
    for (i = 0; i < n; i++) dst[i] = src[i];
}

/* Stores a little-endian u32/u64: the format's byte order, whatever the host's. */
static inline void pmt__le32(uint8_t *p, uint32_t v) {
    unsigned i;
    for (i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void pmt__le64(uint8_t *p, uint64_t v) {
    unsigned i;
    for (i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Fills the CRC-32 table (IEEE 802.3, reflected polynomial 0xEDB88320, as
 * zlib and crc32fast): computed, not spelled out, and kept in the writer so
 * that no static data is needed. */
static inline void pmt__crc_init(uint32_t *table) {
    uint32_t i, c;
    int k;
    for (i = 0; i < 256; i++) {
        c = i;
        for (k = 0; k < 8; k++) c = (c & 1u) ? (0xEDB88320u ^ (c >> 1)) : (c >> 1);
        table[i] = c;
    }
}

/* Continues a CRC-32 over `n` more bytes; `crc` is 0 to start, like zlib's crc32(). */
static inline uint32_t pmt__crc(const uint32_t *table, uint32_t crc, const void *p, size_t n) {
    const uint8_t *s = (const uint8_t *)p;
    size_t i;
    crc = ~crc;
    for (i = 0; i < n; i++) crc = table[(crc ^ s[i]) & 0xffu] ^ (crc >> 8);
    return ~crc;
}

/* Appends `v` as a LEB128 varint at `p`; returns the bytes written (at most 10). */
static inline size_t pmt__varint(uint8_t *p, uint64_t v) {
    size_t n = 0;
    while (v >= 0x80u) {
        p[n++] = (uint8_t)(v | 0x80u);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

/* zigzag of the signed delta whose two's complement is `d`: (d << 1) ^ (d >> 63). */
static inline uint64_t pmt__zigzag(uint64_t d) {
    return (d << 1) ^ (0u - (d >> 63));
}

/* Whether `s` is UTF-8 by the rules of Rust's str::from_utf8 (no overlong
 * forms, surrogates or code points above U+10FFFF): the reader refuses a
 * trace whose names are not, so the writer refuses the event instead. */
static inline int pmt__utf8(const uint8_t *s, size_t n) {
    size_t i = 0, k, j;
    while (i < n) {
        uint8_t c = s[i], lo = 0x80u, hi = 0xBFu;
        if (c < 0x80u) {
            i++;
            continue;
        } else if (c >= 0xC2u && c <= 0xDFu) {
            k = 1;
        } else if (c >= 0xE0u && c <= 0xEFu) {
            k = 2;
            if (c == 0xE0u) lo = 0xA0u;
            if (c == 0xEDu) hi = 0x9Fu;
        } else if (c >= 0xF0u && c <= 0xF4u) {
            k = 3;
            if (c == 0xF0u) lo = 0x90u;
            if (c == 0xF4u) hi = 0x8Fu;
        } else {
            return 0;
        }
        if (n - i - 1 < k || s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (j = 2; j <= k; j++)
            if ((s[i + j] & 0xC0u) != 0x80u) return 0;
        i += k + 1;
    }
    return 1;
}

/* Hands bytes to the callback; a failure makes the writer dead for good,
 * since the file now holds a partial block. */
static inline int pmt__out(pmt_writer *w, const void *p, size_t n) {
    if (w->write(w->ctx, p, n) != 0) {
        w->status = PMT_ERR_WRITE;
        return PMT_ERR_WRITE;
    }
    w->bytes += n;
    return PMT_OK;
}

/* Writes one block (header with lengths and checksum, then the payload). */
static inline int pmt__block(pmt_writer *w, unsigned codec, uint32_t events, const uint8_t *payload, size_t n) {
    uint8_t h[PMT__HEADER_LEN];
    uint32_t crc;
    int e;
    h[0] = 'P';
    h[1] = 'M';
    h[2] = 'T';
    h[3] = 'B';
    h[4] = (uint8_t)codec;
    h[5] = h[6] = h[7] = 0;
    pmt__le32(h + 8, events);
    pmt__le32(h + 12, (uint32_t)n); /* raw_len */
    pmt__le32(h + 16, (uint32_t)n); /* stored_len: raw blocks only */
    crc = pmt__crc(w->crc_table, 0, h, 20);
    crc = pmt__crc(w->crc_table, crc, payload, n);
    pmt__le32(h + 20, crc);
    e = pmt__out(w, h, sizeof h);
    return e ? e : pmt__out(w, payload, n);
}

/* Writes the current block, if it holds events, and starts a new one. The
 * encoder state restarts with it (thread 0, all cursors 0) as the reader's
 * decoder does, which is what makes every block decodable on its own. */
static inline int pmt__cut(pmt_writer *w) {
    int e;
    if (w->block_events == 0) return PMT_OK;
    e = pmt__block(w, PMT__CODEC_RAW, w->block_events, w->buf, w->len);
    if (e) return e;
    w->events += w->block_events;
    w->blocks += 1;
    w->block_events = 0;
    w->len = 0;
    w->tid = 0;
    w->site = 0;
    w->ncursors = 1;
    w->cursor[0] = 0;
    return PMT_OK;
}

/* The checks every event shares: a live writer and a thread id it can name. */
static inline int pmt__check(const pmt_writer *w, uint32_t tid) {
    if (w == NULL) return PMT_ERR_ARG;
    if (w->status != PMT_OK) return w->status;
    if (tid >= (uint32_t)PMT_MAX_THREADS) return PMT_ERR_TID;
    return PMT_OK;
}

/* Encodes `ev` of thread `tid` as the Rust encoder does (traces/src/encode.rs).
 * The fixed part of the record is built in a scratch array from the current
 * state first, so that nothing changes until the whole record is known to fit;
 * if it does not fit behind the events already in the block, the block is cut
 * and the record built again from the fresh state (as the Rust writer does
 * when a block would exceed 16 MiB); a record that does not fit even an empty
 * buffer is refused, so an oversized event costs an early block cut, nothing
 * else. */
static inline int pmt__write(pmt_writer *w, uint32_t tid, const pmt__ev *ev) {
    for (;;) {
        uint8_t rec[PMT_RECORD_MAX];
        size_t n = 0;
        uint64_t cur = tid < w->ncursors ? w->cursor[tid] : 0;
        uint64_t next = cur;
        /* A thread switch resets the site the reader attributes flushes and fences to. */
        uint32_t site = tid != w->tid ? 0u : w->site;
        int e;
        if (tid != w->tid) { /* a THREAD framing record */
            if (tid < 15) {
                rec[n++] = (uint8_t)(PMT__K_THREAD | (tid << 4));
            } else {
                rec[n++] = (uint8_t)(PMT__K_THREAD | 0xF0u);
                n += pmt__varint(rec + n, tid);
            }
        }
        switch (ev->kind) {
        case PMT__K_STORE:
        case PMT__K_NTSTORE:
        case PMT__K_LOAD: {
            uint64_t addr = ev->a;
            uint32_t size = (uint32_t)ev->b;
            unsigned code = PMT__SIZE_VARINT, same = addr == cur;
            if (size != 0 && (size & (size - 1)) == 0 && size <= 64) {
                code = 0;
                while ((1u << code) != size) code++;
            }
            rec[n++] = (uint8_t)(ev->kind | ((code | (same ? PMT__X_SAME : 0u)) << 4));
            if (!same) n += pmt__varint(rec + n, pmt__zigzag(addr - cur));
            if (code == PMT__SIZE_VARINT) n += pmt__varint(rec + n, size);
            next = addr + size;
            break;
        }
        case PMT__K_FLUSH:
        case PMT__K_FENCE: {
            /* A flush relative to the line of the last byte accessed, (cursor - 1) >> 6:
             * flushing the line just stored to is `same` and keeps the cursor. A site
             * other than the current one goes right after the tag, which says so. */
            uint64_t line = ev->a;
            uint64_t d = (line >> 6) - ((cur - 1) >> 6);
            unsigned x = ev->x;
            if (ev->kind == PMT__K_FLUSH && d == 0) x |= PMT__X_SAME;
            if (ev->site != site) x |= PMT__X_SITE;
            rec[n++] = (uint8_t)(ev->kind | (x << 4));
            if (ev->site != site) {
                site = ev->site;
                n += pmt__varint(rec + n, site);
            }
            if (ev->kind == PMT__K_FLUSH && d != 0) {
                n += pmt__varint(rec + n, pmt__zigzag(d));
                next = line + 64;
            }
            break;
        }
        case PMT__K_THREAD_START:
        case PMT__K_THREAD_END:
            rec[n++] = (uint8_t)ev->kind;
            break;
        case PMT__K_REGION_ADD:
            rec[n++] = (uint8_t)(PMT__K_REGION_ADD | (ev->x << 4));
            n += pmt__varint(rec + n, ev->a);
            n += pmt__varint(rec + n, ev->b);
            n += pmt__varint(rec + n, ev->c);
            n += pmt__varint(rec + n, ev->data_len);
            break;
        case PMT__K_REGION_REMOVE:
            rec[n++] = (uint8_t)PMT__K_REGION_REMOVE;
            n += pmt__varint(rec + n, ev->a);
            break;
        case PMT__K_OP_BEGIN:
        case PMT__K_OP_END:
            if (ev->a < 16) {
                rec[n++] = (uint8_t)(ev->kind | (unsigned)(ev->a << 4));
            } else {
                rec[n++] = (uint8_t)(ev->kind | 0xF0u);
                n += pmt__varint(rec + n, ev->a);
            }
            n += pmt__varint(rec + n, ev->b);
            break;
        default: /* PMT__K_MARKER */
            rec[n++] = (uint8_t)PMT__K_MARKER;
            n += pmt__varint(rec + n, ev->a);
            n += pmt__varint(rec + n, ev->data_len);
            break;
        }
        if (n > w->cap - w->len || ev->data_len > w->cap - w->len - n) {
            if (w->len == 0) return PMT_ERR_TOO_BIG;
            e = pmt__cut(w);
            if (e) return e;
            continue;
        }
        /* Commit: the state changes only now. */
        if (tid != w->tid) {
            while (w->ncursors <= tid) w->cursor[w->ncursors++] = 0;
            w->tid = tid;
        }
        w->site = site;
        w->cursor[tid] = next;
        pmt__copy(w->buf + w->len, rec, n);
        w->len += n;
        if (ev->data_len) pmt__copy(w->buf + w->len, (const uint8_t *)ev->data, ev->data_len);
        w->len += ev->data_len;
        w->block_events += 1;
        if (w->len >= w->block_size || w->block_events == UINT32_MAX) return pmt__cut(w);
        return PMT_OK;
    }
}

/* An event without a body beyond its tag and integers; a flush or fence is
 * attributed to code site `site`. */
static inline int pmt__simple_at(pmt_writer *w, uint32_t tid, unsigned kind, unsigned x, uint64_t a, uint64_t b,
                                 uint32_t site) {
    pmt__ev ev;
    int e = pmt__check(w, tid);
    if (e) return e;
    ev.kind = kind;
    ev.x = x;
    ev.a = a;
    ev.b = b;
    ev.c = 0;
    ev.data = NULL;
    ev.data_len = 0;
    ev.site = site;
    return pmt__write(w, tid, &ev);
}

/* An access event (store, ntstore or load): shared checks and encoding. */
static inline int pmt__access(pmt_writer *w, uint32_t tid, unsigned kind, uint64_t addr, uint32_t size,
                              const void *value) {
    pmt__ev ev;
    int e = pmt__check(w, tid);
    if (e) return e;
    ev.kind = kind;
    ev.x = 0;
    ev.a = addr;
    ev.b = size;
    ev.c = 0;
    ev.data = NULL;
    ev.data_len = 0;
    ev.site = 0;
    if (kind != PMT__K_LOAD && w->values) {
        if (value == NULL) return PMT_ERR_VALUE;
        ev.data = value;
        ev.data_len = size;
    }
    return pmt__write(w, tid, &ev);
}

/* An event without a body beyond its tag and integers (a flush or fence at site 0). */
static inline int pmt__simple(pmt_writer *w, uint32_t tid, unsigned kind, unsigned x, uint64_t a, uint64_t b) {
    return pmt__simple_at(w, tid, kind, x, a, b, 0);
}

/* Validates a name or label: NULL only when empty, UTF-8. */
static inline int pmt__text(const char *s, size_t len) {
    if (s == NULL) return len == 0 ? PMT_OK : PMT_ERR_ARG;
    return pmt__utf8((const uint8_t *)s, len) ? PMT_OK : PMT_ERR_UTF8;
}

/* An operation boundary: named codes go in the tag, "other" codes after it. */
static inline int pmt__op(pmt_writer *w, uint32_t tid, unsigned kind, uint64_t op, uint64_t v) {
    if (op >= 8 && op < 16) {
        int e = pmt__check(w, tid);
        return e ? e : PMT_ERR_OP_CODE;
    }
    return pmt__simple(w, tid, kind, 0, op, v);
}

/* The 16-byte preamble before a header of `header_len` bytes: magic, version, flags, length. */
static inline void pmt__preamble(uint8_t *pre, size_t header_len, unsigned flags) {
    pre[0] = 0x89;
    pre[1] = 'P';
    pre[2] = 'M';
    pre[3] = 'T';
    pre[4] = '\r';
    pre[5] = '\n';
    pre[6] = 0x1a;
    pre[7] = '\n';
    pre[8] = PMT_VERSION;
    pre[9] = 0;
    pre[10] = (uint8_t)flags;
    pre[11] = 0;
    pmt__le32(pre + 12, (uint32_t)header_len);
}

/* ---- API ---- */

/* Starts a trace: sets up `w` and writes the preamble (magic, version, flags,
 * the caller's JSON header and its checksum) through `write`.
 *  - `buf`/`buf_cap`: memory for one block payload, owned by the caller so
 *    that the writer never allocates; at least PMT_RECORD_MAX bytes, see
 *    PMT_BUF_SIZE for the size at which blocks match the Rust writer's.
 *  - `block_size`: payload bytes at which a block is cut; 0 means
 *    PMT_DEFAULT_BLOCK_SIZE. Clamped to [64, 8 MiB] as in the Rust writer, so
 *    that the same value gives the same blocks.
 *  - `header_json`/`header_len`: a UTF-8 JSON object describing the run
 *    (FORMAT.md, "The JSON header"), written as given; its "values" field
 *    should mirror PMT_FLAG_VALUES. An empty header is written as `{}`, which a
 *    reader takes as all defaults.
 *  - `flags`: 0 or PMT_FLAG_VALUES (stores then carry their value bytes). */
static inline int pmt_writer_init(pmt_writer *w, void *buf, size_t buf_cap, size_t block_size,
                                  pmt_write_fn write, void *ctx, const void *header_json, size_t header_len,
                                  unsigned flags) {
    uint8_t pre[16];
    uint8_t crc_le[4];
    static const char empty[2] = {'{', '}'};
    uint32_t crc;
    int e;
    if (w == NULL) return PMT_ERR_ARG;
    w->status = PMT_ERR_ARG; /* until the preamble is out, no events */
    if (buf == NULL || write == NULL || buf_cap < PMT_RECORD_MAX || (flags & ~PMT_FLAG_VALUES) != 0)
        return PMT_ERR_ARG;
    if (header_json == NULL && header_len != 0) return PMT_ERR_ARG;
    if (header_len > PMT_MAX_LEN) return PMT_ERR_TOO_BIG;
    if (header_len == 0) {
        header_json = empty;
        header_len = sizeof empty;
    }
    if (block_size == 0) block_size = PMT_DEFAULT_BLOCK_SIZE;
    if (block_size < PMT__MIN_BLOCK) block_size = PMT__MIN_BLOCK;
    if (block_size > PMT__MAX_BLOCK) block_size = PMT__MAX_BLOCK;
    w->write = write;
    w->ctx = ctx;
    w->buf = (uint8_t *)buf;
    w->cap = buf_cap < PMT_MAX_LEN ? buf_cap : PMT_MAX_LEN;
    w->len = 0;
    w->block_size = block_size;
    w->block_events = 0;
    w->values = (flags & PMT_FLAG_VALUES) != 0;
    w->tid = 0;
    w->site = 0;
    w->ncursors = 1;
    w->cursor[0] = 0;
    w->events = 0;
    w->blocks = 0;
    w->bytes = 0;
    pmt__crc_init(w->crc_table);
    w->status = PMT_OK;
    pmt__preamble(pre, header_len, flags);
    crc = pmt__crc(w->crc_table, 0, pre, sizeof pre);
    crc = pmt__crc(w->crc_table, crc, header_json, header_len);
    pmt__le32(crc_le, crc);
    if ((e = pmt__out(w, pre, sizeof pre)) != 0) return e;
    if ((e = pmt__out(w, header_json, header_len)) != 0) return e;
    return pmt__out(w, crc_le, sizeof crc_le);
}

/* A store of `size` bytes at `addr` by thread `tid`. When the writer records
 * values, `value` must point to the `size` bytes stored (the crash explorer
 * rebuilds memory from them); otherwise it is ignored and may be NULL. */
static inline int pmt_store(pmt_writer *w, uint32_t tid, uint64_t addr, uint32_t size, const void *value) {
    return pmt__access(w, tid, PMT__K_STORE, addr, size, value);
}

/* A non-temporal store (it bypasses the cache and is durable after the next
 * fence, so the simulator treats it apart from stores); `value` as for pmt_store. */
static inline int pmt_ntstore(pmt_writer *w, uint32_t tid, uint64_t addr, uint32_t size, const void *value) {
    return pmt__access(w, tid, PMT__K_NTSTORE, addr, size, value);
}

/* A load of `size` bytes at `addr`; loads never carry values. For tracers
 * asked to export full memory traces. */
static inline int pmt_load(pmt_writer *w, uint32_t tid, uint64_t addr, uint32_t size) {
    return pmt__access(w, tid, PMT__K_LOAD, addr, size, NULL);
}

/* pmt_flush issued at code site `site` (defined with pmt_site_define; 0 is
 * "unknown"), so that costs can be charged to the code that caused them. */
static inline int pmt_flush_at(pmt_writer *w, uint32_t tid, unsigned kind, uint64_t line, uint32_t site) {
    int e = pmt__check(w, tid);
    if (e) return e;
    if (kind > PMT_CLFLUSH) return PMT_ERR_ARG;
    if (line & 63u) return PMT_ERR_UNALIGNED;
    return pmt__simple_at(w, tid, PMT__K_FLUSH, kind, line, 0, site);
}

/* pmt_fence issued at code site `site`. */
static inline int pmt_fence_at(pmt_writer *w, uint32_t tid, unsigned kind, uint32_t site) {
    int e = pmt__check(w, tid);
    if (e) return e;
    if (kind > PMT_LOCKED_RMW) return PMT_ERR_ARG;
    return pmt__simple_at(w, tid, PMT__K_FENCE, kind, 0, 0, site);
}

/* Defines code site `id` (>= 1): instruction address `addr` (0 if none),
 * source `line` and `column` (0 if unknown), UTF-8 `file` and `function`
 * names (NULL if empty). Written at once as a site-table block, so it precedes
 * the data block being filled, the first that can name the site: define a
 * site before its first pmt_flush_at/pmt_fence_at. */
static inline int pmt_site_define(pmt_writer *w, uint32_t id, uint64_t addr, uint32_t line, uint32_t column,
                                  const char *file, size_t file_len, const char *function, size_t function_len) {
    uint8_t h[PMT__HEADER_LEN], head[40], mid[10];
    size_t nh = 0, nm, total;
    uint32_t crc;
    int e = pmt__check(w, 0);
    if (e) return e;
    if (id == 0) return PMT_ERR_ARG;
    if ((e = pmt__text(file, file_len)) != 0) return e;
    if ((e = pmt__text(function, function_len)) != 0) return e;
    if (file_len > PMT_MAX_LEN / 2 || function_len > PMT_MAX_LEN / 2) return PMT_ERR_TOO_BIG;
    nh += pmt__varint(head + nh, id);
    nh += pmt__varint(head + nh, addr);
    nh += pmt__varint(head + nh, line);
    nh += pmt__varint(head + nh, column);
    nh += pmt__varint(head + nh, file_len);
    nm = pmt__varint(mid, function_len);
    total = nh + file_len + nm + function_len;
    h[0] = 'P';
    h[1] = 'M';
    h[2] = 'T';
    h[3] = 'B';
    h[4] = (uint8_t)PMT__CODEC_SITES;
    h[5] = h[6] = h[7] = 0;
    pmt__le32(h + 8, 0);
    pmt__le32(h + 12, (uint32_t)total);
    pmt__le32(h + 16, (uint32_t)total);
    crc = pmt__crc(w->crc_table, 0, h, 20);
    crc = pmt__crc(w->crc_table, crc, head, nh);
    crc = pmt__crc(w->crc_table, crc, file, file_len);
    crc = pmt__crc(w->crc_table, crc, mid, nm);
    crc = pmt__crc(w->crc_table, crc, function, function_len);
    pmt__le32(h + 20, crc);
    if ((e = pmt__out(w, h, sizeof h)) != 0 || (e = pmt__out(w, head, nh)) != 0) return e;
    if (file_len && (e = pmt__out(w, file, file_len)) != 0) return e;
    if ((e = pmt__out(w, mid, nm)) != 0) return e;
    if (function_len && (e = pmt__out(w, function, function_len)) != 0) return e;
    return PMT_OK;
}

/* A write-back of the 64-byte line at `line` with PMT_CLWB, PMT_CLFLUSHOPT
 * or PMT_CLFLUSH (their costs and effects on the cache differ). `line` must be
 * 64-aligned: the format stores line numbers, so an unaligned address would
 * silently read back as another one; it is refused with PMT_ERR_UNALIGNED. */
static inline int pmt_flush(pmt_writer *w, uint32_t tid, unsigned kind, uint64_t line) {
    return pmt_flush_at(w, tid, kind, line, 0);
}

/* An ordering point: PMT_SFENCE, PMT_MFENCE or PMT_LOCKED_RMW (a locked
 * read-modify-write such as lock cmpxchg, which orders flushes like mfence). */
static inline int pmt_fence(pmt_writer *w, uint32_t tid, unsigned kind) {
    return pmt_fence_at(w, tid, kind, 0);
}

/* Thread `tid` starts, so that the simulator knows its lifetime. */
static inline int pmt_thread_start(pmt_writer *w, uint32_t tid) {
    return pmt__simple(w, tid, PMT__K_THREAD_START, 0, 0, 0);
}

/* Thread `tid` ends. */
static inline int pmt_thread_end(pmt_writer *w, uint32_t tid) {
    return pmt__simple(w, tid, PMT__K_THREAD_END, 0, 0, 0);
}

/* Registers region `id`, `len` bytes at `base`, of `category` (PMT_META,
 * PMT_WAL, PMT_LOG or PMT_DATA) with a UTF-8 `name` of `name_len` bytes (NULL
 * if empty), so that statistics can be broken down by what memory holds. */
static inline int pmt_region_add(pmt_writer *w, uint32_t tid, uint64_t id, unsigned category, uint64_t base,
                                 uint64_t len, const char *name, size_t name_len) {
    pmt__ev ev;
    int e = pmt__check(w, tid);
    if (e) return e;
    if (category > PMT_DATA) return PMT_ERR_ARG;
    if ((e = pmt__text(name, name_len)) != 0) return e;
    ev.kind = PMT__K_REGION_ADD;
    ev.x = category;
    ev.a = id;
    ev.b = base;
    ev.c = len;
    ev.data = name;
    ev.data_len = name_len;
    ev.site = 0;
    return pmt__write(w, tid, &ev);
}

/* Region `id` is gone (its memory may be reused for something else). */
static inline int pmt_region_remove(pmt_writer *w, uint32_t tid, uint64_t id) {
    return pmt__simple(w, tid, PMT__K_REGION_REMOVE, 0, id, 0);
}

/* Thread `tid` begins operation `op` (PMT_OP_MALLOC ... PMT_OP_CLOSE, or a
 * code >= PMT_OP_OTHER) with `arg` (malloc: the requested size; free: the
 * offset freed), so that costs can be charged to operations. Operations nest
 * per thread. Codes 8-15 are reserved: PMT_ERR_OP_CODE. */
static inline int pmt_op_begin(pmt_writer *w, uint32_t tid, uint64_t op, uint64_t arg) {
    return pmt__op(w, tid, PMT__K_OP_BEGIN, op, arg);
}

/* Thread `tid` ends operation `op` with `result` (malloc: the heap offset
 * handed out, 0 for failure). */
static inline int pmt_op_end(pmt_writer *w, uint32_t tid, uint64_t op, uint64_t result) {
    return pmt__op(w, tid, PMT__K_OP_END, op, result);
}

/* A user marker `id` with a UTF-8 `label` of `label_len` bytes (NULL if
 * empty): a point in the run a user wants to find again in the analyses. */
static inline int pmt_marker(pmt_writer *w, uint32_t tid, uint64_t id, const char *label, size_t label_len) {
    pmt__ev ev;
    int e = pmt__check(w, tid);
    if (e) return e;
    if ((e = pmt__text(label, label_len)) != 0) return e;
    ev.kind = PMT__K_MARKER;
    ev.x = 0;
    ev.a = id;
    ev.b = 0;
    ev.c = 0;
    ev.data = label;
    ev.data_len = label_len;
    ev.site = 0;
    return pmt__write(w, tid, &ev);
}

/* Ends the trace: writes the last block and the end block (total events and
 * blocks). Without it a reader reports the trace as truncated, which is how a
 * crashed tracer's trace is told from a complete one. Later calls return
 * PMT_ERR_FINISHED; the writer does not close anything of the caller's. */
static inline int pmt_writer_finish(pmt_writer *w) {
    uint8_t end[16];
    int e;
    if (w == NULL) return PMT_ERR_ARG;
    if (w->status != PMT_OK) return w->status;
    if ((e = pmt__cut(w)) != 0) return e;
    pmt__le64(end, w->events);
    pmt__le64(end + 8, w->blocks);
    if ((e = pmt__block(w, PMT__CODEC_END, 0, end, sizeof end)) != 0) return e;
    w->status = PMT_ERR_FINISHED;
    return PMT_OK;
}

/* The checksum that follows header bytes `header_json` in a preamble with
 * `flags` (stored little-endian after the header). For a tracer that learns
 * things about the run only at its end (thread count, whether the program was
 * killed) and rewrites its header in place: it writes the first header padded
 * with JSON whitespace, then overwrites header and checksum with a header of
 * the same length. `w` is any initialised writer (it lends its CRC table). */
static inline uint32_t pmt_header_crc(const pmt_writer *w, const void *header_json, size_t header_len,
                                      unsigned flags) {
    uint8_t pre[16];
    pmt__preamble(pre, header_len, flags);
    return pmt__crc(w->crc_table, pmt__crc(w->crc_table, 0, pre, sizeof pre), header_json, header_len);
}

/* What the writer wrote so far, for a tracer's summary line. */
static inline pmt_stats pmt_writer_stats(const pmt_writer *w) {
    pmt_stats s;
    s.events = w->events + w->block_events;
    s.blocks = w->blocks;
    s.bytes = w->bytes;
    return s;
}

/* A one-line description of a status, for a tracer's error message. */
static inline const char *pmt_strerror(int status) {
    switch (status) {
    case PMT_OK: return "ok";
    case PMT_ERR_WRITE: return "writing the trace failed";
    case PMT_ERR_ARG: return "invalid argument";
    case PMT_ERR_TID: return "thread id exceeds PMT_MAX_THREADS";
    case PMT_ERR_UNALIGNED: return "flush of a line that is not 64-byte aligned";
    case PMT_ERR_OP_CODE: return "operation codes 8-15 are reserved";
    case PMT_ERR_VALUE: return "store without its value in a trace that records values";
    case PMT_ERR_UTF8: return "name or label is not UTF-8";
    case PMT_ERR_TOO_BIG: return "record or header too large";
    case PMT_ERR_FINISHED: return "the trace is finished";
    case PMT_ERR_OPEN: return "cannot create the trace file";
    default: return "unknown error";
    }
}

#ifndef PMT_NO_STDIO
#include <stdio.h>

/* The write callback of pmt_writer_open_file: ctx is the FILE. */
static inline int pmt__file_write(void *ctx, const void *buf, size_t len) {
    return (len == 0 || fwrite(buf, 1, len, (FILE *)ctx) == len) ? 0 : -1;
}

/* For hosted tools (the Pin tool, tests): pmt_writer_init writing to a new
 * file at `path`, the other arguments as there. If the preamble cannot be
 * written the file is closed and removed. End with pmt_writer_finish_file. */
static inline int pmt_writer_open_file(pmt_writer *w, const char *path, void *buf, size_t buf_cap,
                                       size_t block_size, const void *header_json, size_t header_len,
                                       unsigned flags) {
    FILE *f;
    int e;
    if (w == NULL || path == NULL) return PMT_ERR_ARG;
    f = fopen(path, "wb");
    if (f == NULL) {
        w->status = PMT_ERR_OPEN;
        w->ctx = NULL;
        return PMT_ERR_OPEN;
    }
    e = pmt_writer_init(w, buf, buf_cap, block_size, pmt__file_write, f, header_json, header_len, flags);
    if (e) {
        fclose(f);
        remove(path);
        w->ctx = NULL;
    }
    return e;
}

/* Finishes a trace opened with pmt_writer_open_file and closes its file,
 * even after an error (so that a failing tracer does not leak it); returns
 * the first error, a failed close included, since buffered data may be lost. */
static inline int pmt_writer_finish_file(pmt_writer *w) {
    FILE *f;
    int e;
    if (w == NULL || w->ctx == NULL) return PMT_ERR_ARG;
    f = (FILE *)w->ctx;
    e = pmt_writer_finish(w);
    if (fclose(f) != 0 && e == PMT_OK) e = PMT_ERR_WRITE;
    w->ctx = NULL;
    return e;
}
#endif /* PMT_NO_STDIO */

#endif /* PMT_WRITER_H */
