/*
 * pmtrace: a Valgrind tool that records what an unmodified program does to
 * persistent memory (PM) into a pmsim `.pmt` trace, through the project's one
 * C trace writer (traces/c/pmt_writer.h).
 *
 * What is PM: the mappings of files under --pm-dir (seen at mmap), and ranges
 * the program announces with the client requests of pintools/include/pmtrace.h.
 * What is recorded, per thread (trace thread id = Valgrind thread id - 1):
 *  - stores into PM (and their bytes with --pmt-values=yes); stores of
 *    movnti/movntdq/movntps/movntpd and their VEX forms as non-temporal stores:
 *    VEX turns them into plain stores, so the instruction bytes at the IMark
 *    tell them apart;
 *  - clflush of a PM line. VEX 3.19 ends the block with jump kind
 *    Ijk_InvalICache and writes the line to guest_CMSTART, masked to 256 B:
 *    the exact address is the first operand of the And64 whose result the PUT
 *    writes. When the optimiser folded the address to a constant (a
 *    RIP-relative clflush of a static), only the masked constant is left, so
 *    the address is decoded from the instruction bytes (0F AE /7, mod=00
 *    rm=101: next RIP + disp32). clwb and clflushopt do not exist here: VEX
 *    3.19 cannot decode them (SIGILL) and its CPUID hides them;
 *  - sfence and mfence: both are Ist_MBE(Imbe_Fence) in IR (lfence too), so
 *    the instruction bytes decide; lfence orders no stores and is left out;
 *  - locked read-modify-writes on PM (Ist_CAS: lock cmpxchg, xchg, lock add,
 *    ...) as a LOCKED_RMW ordering point, then the store if the swap happened,
 *    as pmsim's own tracer records its CAS;
 *  - thread starts and ends, regions, operations and markers (client requests);
 *  - every pthread mutex taken and let go, as lock markers: the tool's preload
 *    library (pmtrace_preload.c, which Valgrind loads into the program as
 *    vgpreload_pmtrace) wraps pthread_mutex_lock, _trylock and _unlock;
 *  - the code site of every flush and fence, symbolized from the program's
 *    symbols and debug information (function, file:line) into the trace's
 *    site table. A flush issued inside a shared library (PMDK's libpmem does
 *    every clflush of libpmemobj) is charged, like a #[track_caller] in Rust,
 *    to its caller: the first frame of the guest stack outside that library
 *    whose function has a name (else the first frame outside it); a flush in
 *    the program itself to its own instruction.
 *
 * The trace starts at the first PM mapping, whose base and size the header
 * names as the heap. The header is rewritten in place at exit (it is written
 * padded with spaces) to add what only the end knows: thread count, later PM
 * mappings, the exit status, and "partial": true when the program did not
 * exit (a fatal signal), since its trace then stops mid-run.
 *
 * The instrumentation reads top to bottom in pmt_instrument().
 */
#include "pub_tool_basics.h"
#include "pub_tool_clientstate.h"
#include "pub_tool_debuginfo.h"
#include "pub_tool_stacktrace.h"
#include "pub_tool_libcassert.h"
#include "pub_tool_libcbase.h"
#include "pub_tool_libcfile.h"
#include "pub_tool_libcprint.h"
#include "pub_tool_machine.h"
#include "pub_tool_mallocfree.h"
#include "pub_tool_options.h"
#include "pub_tool_threadstate.h"
#include "pub_tool_tooliface.h"
#include "pub_tool_vki.h"
#include "pub_tool_vkiscnums.h"
#include "pub_tool_xarray.h"
#include "libvex_guest_amd64.h"
#include "valgrind.h"

#define PMT_NO_STDIO
#define PMT_MAX_THREADS 1024
#include "pmt_writer.h"
#include "pmtrace.h"

/* ------------------------------------------------------------------ options */

static const HChar *clo_out = NULL;          /* --pmt-out=FILE (required) */
static const HChar *clo_pm_dir = "/dev/shm"; /* --pm-dir=DIR */
static Bool clo_values = False;              /* --pmt-values=yes|no */
static const HChar *clo_version = "";        /* --pmt-pmsim-version=V */
static const HChar *clo_allocator = "";      /* --pmt-allocator=NAME */
static const HChar *clo_workload = "";       /* --pmt-workload=NAME */
static const HChar *clo_window_at = "";      /* --pmt-window-at=FUNCTION */
static const HChar *clo_image = "";          /* --pmt-image=FILE */
static const HChar *clo_image_name = "";     /* --pmt-image-name=NAME */

static Bool pmt_process_cmd_line_option(const HChar *arg) {
    if VG_STR_CLO (arg, "--pmt-out", clo_out) {
    } else if VG_STR_CLO (arg, "--pm-dir", clo_pm_dir) {
    } else if VG_BOOL_CLO (arg, "--pmt-values", clo_values) {
    } else if VG_STR_CLO (arg, "--pmt-pmsim-version", clo_version) {
    } else if VG_STR_CLO (arg, "--pmt-allocator", clo_allocator) {
    } else if VG_STR_CLO (arg, "--pmt-workload", clo_workload) {
    } else if VG_STR_CLO (arg, "--pmt-window-at", clo_window_at) {
    } else if VG_STR_CLO (arg, "--pmt-image", clo_image) {
    } else if VG_STR_CLO (arg, "--pmt-image-name", clo_image_name) {
    } else
        return False;
    return True;
}

static void pmt_print_usage(void) {
    VG_(printf)("    --pmt-out=FILE            the .pmt trace to write [required]\n"
                "    --pm-dir=DIR              files mapped from under DIR are PM [/dev/shm]\n"
                "    --pmt-values=yes|no       record the bytes of every PM store [no]\n"
                "    --pmt-allocator=NAME      allocator name for the trace header\n"
                "    --pmt-workload=NAME       workload name for the trace header\n"
                "    --pmt-window-at=FUNCTION  record the marker window:FUNCTION at the first call of FUNCTION\n"
                "    --pmt-image=FILE          write the heap's bytes at trace start to FILE (the crash\n"
                "                              explorer's starting image)\n"
                "    --pmt-image-name=NAME     the name the header gives that image [FILE's]\n");
}

static void pmt_print_debug_usage(void) {
    VG_(printf)("    (none)\n");
}

/* ------------------------------------------------------------ the PM ranges */

/* PM ranges: file mappings under --pm-dir and announced ranges. Few, so a
 * small array with a bounding box in front for the common miss. */
#define MAX_RANGES 64
typedef struct {
    Addr base;
    SizeT len;
    ULong offset; /* file offset of `base` */
    /* Added to addresses in the range: a second mapping of file bytes that an
     * earlier mapping holds (PMDK maps its pool header twice) is recorded at
     * the earlier one's addresses, since both name the same PM. */
    Long alias;
    HChar path[256];
} PmRange;
static PmRange ranges[MAX_RANGES];
static UInt n_ranges;
static Addr pm_lo = ~(Addr)0, pm_hi = 0;
/* Every PM mapping the run made, for the header (later ones beyond the heap). */
static PmRange seen[16];
static UInt n_seen, n_seen_dropped;

static void recompute_bounds(void) {
    UInt i;
    pm_lo = ~(Addr)0;
    pm_hi = 0;
    for (i = 0; i < n_ranges; i++) {
        if (ranges[i].base < pm_lo) pm_lo = ranges[i].base;
        if (ranges[i].base + ranges[i].len > pm_hi) pm_hi = ranges[i].base + ranges[i].len;
    }
}

/* The PM range holding `a`, or NULL. */
static inline const PmRange *pm_range(Addr a) {
    UInt i;
    if (a < pm_lo || a >= pm_hi) return NULL;
    for (i = 0; i < n_ranges; i++)
        if (a - ranges[i].base < ranges[i].len) return &ranges[i];
    return NULL;
}

/* Removes [a, a+len) from the PM ranges (munmap), splitting where needed. */
static void forget_range(Addr a, SizeT len) {
    UInt i;
    Addr e = a + len;
    for (i = 0; i < n_ranges;) {
        PmRange *r = &ranges[i];
        Addr rb = r->base, re = r->base + r->len;
        if (e <= rb || a >= re) {
            i++;
            continue;
        }
        if (a > rb && e < re && n_ranges < MAX_RANGES) { /* a hole in the middle: keep the tail */
            ranges[n_ranges] = *r;
            ranges[n_ranges].base = e;
            ranges[n_ranges].len = re - e;
            n_ranges++;
        }
        if (a > rb) {
            r->len = a - rb;
            i++;
        } else if (e < re) {
            r->base = e;
            r->len = re - e;
            i++;
        } else {
            ranges[i] = ranges[--n_ranges];
        }
    }
    recompute_bounds();
}

/* ---------------------------------------------------------------- the trace */

static pmt_writer writer;
/* Store values are at most a few KiB (xsave); labels are cut at MAX_TEXT. */
#define MAX_TEXT 4096
static UChar wbuf[PMT_BUF_SIZE(PMT_DEFAULT_BLOCK_SIZE, 8192)];
static Int out_fd = -1;
static Bool tracing;        /* the header is out: events are recorded */
static Bool dead;           /* writing failed: nothing more is recorded */
static Bool exited;         /* the program called exit/exit_group */
static Long exit_status;
static UInt header_len;     /* bytes of the (padded) header on disk */
static UInt max_threads;    /* highest Valgrind thread id seen */
static ULong n_refused;     /* events the writer refused (bad id, text, ...) */
static ULong n_imprecise;   /* clflushes whose exact line could not be recovered */
static Bool live[PMT_MAX_THREADS + 1];

static int write_all(void *ctx, const void *buf, size_t len) {
    const UChar *p = buf;
    (void)ctx;
    while (len > 0) {
        Int n = VG_(write)(out_fd, p, len > 0x40000000 ? 0x40000000 : (Int)len);
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Reports a refused event; a failed write stops the trace for good. */
static void check(int st) {
    if (st == PMT_OK) return;
    if (st == PMT_ERR_WRITE && !dead) {
        dead = True;
        tracing = False;
        VG_(umsg)("pmtrace: error: writing %s failed; the trace stops here\n", clo_out);
    } else if (st != PMT_ERR_WRITE) {
        if (n_refused++ == 0) VG_(umsg)("pmtrace: warning: an event was refused: %s\n", pmt_strerror(st));
    }
}

static inline UInt trace_tid(ThreadId tid) {
    if (tid > max_threads) max_threads = tid;
    return tid > 0 ? tid - 1 : 0;
}

/* Operations a client began before tracing started (the program brackets
 * the creation of its pool, whose first mapping starts the trace): recorded
 * at the trace's start, so that the explorer knows its crash points lie
 * inside them. */
#define MAX_EARLY_OPS 16
static struct {
    UInt tid;
    UWord op, arg;
} early_ops[MAX_EARLY_OPS];
static UInt n_early_ops;

/* The heap image at trace start (--pmt-image): written, its size and CRC-32. */
static Bool image_written;
static ULong image_size;
static uint32_t image_crc;

/* A tiny JSON builder over a fixed buffer: overflow is remembered, not written. */
typedef struct {
    HChar *p;
    UInt len, cap;
    Bool overflow;
} Json;

static void j_raw(Json *j, const HChar *s) {
    while (*s) {
        if (j->len + 1 >= j->cap) {
            j->overflow = True;
            return;
        }
        j->p[j->len++] = *s++;
    }
    j->p[j->len] = 0;
}

static void j_num(Json *j, ULong v) {
    HChar b[32];
    VG_(sprintf)(b, "%llu", v);
    j_raw(j, b);
}

/* A JSON string; bytes of a non-UTF-8 string are replaced by '?'. */
static void j_str(Json *j, const HChar *s) {
    SizeT n = VG_(strlen)(s), i;
    Bool utf8 = pmt__utf8((const uint8_t *)s, n);
    HChar b[8];
    j_raw(j, "\"");
    for (i = 0; i < n; i++) {
        UChar c = (UChar)s[i];
        if (c == '"' || c == '\\') {
            b[0] = '\\';
            b[1] = (HChar)c;
            b[2] = 0;
        } else if (c < 0x20) {
            VG_(sprintf)(b, "\\u%04x", (UInt)c);
        } else {
            b[0] = (c >= 0x80 && !utf8) ? '?' : (HChar)c;
            b[1] = 0;
        }
        j_raw(j, b);
    }
    j_raw(j, "\"");
}

/* The header JSON; `final` adds what is known at exit. */
static void build_header(Json *j, Bool final) {
    UInt i;
    j_raw(j, "{\"pmsim_version\":");
    j_str(j, clo_version);
    j_raw(j, ",\"tracer\":\"valgrind\",\"flush_insn\":\"clflush\",\"threads\":");
    j_num(j, final ? max_threads : 0);
    if (clo_allocator[0]) {
        j_raw(j, ",\"allocator\":{\"name\":");
        j_str(j, clo_allocator);
        j_raw(j, ",\"params\":{}}");
    }
    if (clo_workload[0]) {
        j_raw(j, ",\"workload\":{\"name\":");
        j_str(j, clo_workload);
        j_raw(j, ",\"params\":{}}");
    }
    j_raw(j, ",\"heap\":{\"path\":");
    j_str(j, seen[0].path);
    j_raw(j, ",\"base\":");
    j_num(j, seen[0].base);
    j_raw(j, ",\"size\":");
    j_num(j, seen[0].len);
    j_raw(j, "},\"regions\":[],\"values\":");
    j_raw(j, clo_values ? "true" : "false");
    j_raw(j, ",\"extra\":{\"command\":[");
    j_str(j, VG_(args_the_exename) ? VG_(args_the_exename) : "");
    for (i = 0; i < VG_(sizeXA)(VG_(args_for_client)); i++) {
        j_raw(j, ",");
        j_str(j, *(HChar **)VG_(indexXA)(VG_(args_for_client), i));
    }
    j_raw(j, "],\"pm_dir\":");
    j_str(j, clo_pm_dir);
    if (image_written) {
        j_raw(j, ",\"heap_image\":{\"file\":");
        j_str(j, clo_image_name[0] ? clo_image_name : clo_image);
        j_raw(j, ",\"size\":");
        j_num(j, image_size);
        j_raw(j, ",\"crc32\":");
        j_num(j, image_crc);
        j_raw(j, "}");
    }
    j_raw(j, ",\"partial\":");
    j_raw(j, final && !exited ? "true" : "false");
    if (final) {
        if (!exited) j_raw(j, ",\"partial_reason\":\"the program was killed by a signal\"");
        if (exited) {
            j_raw(j, ",\"exit_status\":");
            j_num(j, (ULong)exit_status);
        }
        j_raw(j, ",\"imprecise_flushes\":");
        j_num(j, n_imprecise);
        j_raw(j, ",\"refused_events\":");
        j_num(j, n_refused);
        j_raw(j, ",\"pm_mappings\":[");
        for (i = 0; i < n_seen; i++) {
            j_raw(j, i ? ",{\"path\":" : "{\"path\":");
            j_str(j, seen[i].path);
            j_raw(j, ",\"base\":");
            j_num(j, seen[i].base);
            j_raw(j, ",\"size\":");
            j_num(j, seen[i].len);
            j_raw(j, ",\"file_offset\":");
            j_num(j, seen[i].offset);
            if (seen[i].alias) {
                j_raw(j, ",\"recorded_at\":");
                j_num(j, seen[i].base + (ULong)seen[i].alias);
            }
            j_raw(j, "}");
        }
        j_raw(j, "],\"pm_mappings_dropped\":");
        j_num(j, n_seen_dropped);
    }
    j_raw(j, "}}");
}

/* Room kept in the first header for what the final one adds. */
#define HEADER_SLACK 4096
static HChar hbuf[65536];

/* The first PM range: the header goes out and tracing starts. */
static void start_trace(void) {
    Json j = {hbuf, 0, sizeof hbuf - HEADER_SLACK, False};
    UInt t;
    int st;
    build_header(&j, False);
    if (j.overflow) {
        VG_(umsg)("pmtrace: error: the trace header does not fit in %u bytes (command line too long?)\n", j.cap);
        dead = True;
        return;
    }
    header_len = j.len + HEADER_SLACK;
    VG_(memset)(hbuf + j.len, ' ', HEADER_SLACK);
    st = pmt_writer_init(&writer, wbuf, sizeof wbuf, 0, write_all, NULL, hbuf, header_len,
                         clo_values ? PMT_FLAG_VALUES : 0);
    if (st != PMT_OK) {
        check(st == PMT_ERR_WRITE ? st : PMT_ERR_WRITE);
        return;
    }
    tracing = True;
    for (t = 1; t <= PMT_MAX_THREADS; t++)
        if (live[t]) check(pmt_thread_start(&writer, trace_tid(t)));
    for (t = 0; t < n_early_ops; t++) check(pmt_op_begin(&writer, early_ops[t].tid, early_ops[t].op, early_ops[t].arg));
    n_early_ops = 0;
}

/* Bytes the heap image is copied in. */
#define IMAGE_CHUNK (1u << 20)
static UChar image_buf[IMAGE_CHUNK];
static uint32_t image_crc_table[256];

/* --pmt-image: the heap's bytes as tracing starts, the state the trace's
 * stores apply to (the crash explorer's starting image). A file mapping is
 * read from the file (what the program could have written with write(2) or
 * fallocate before mapping it is there; bytes past the file's end, which
 * would fault in the program, are zeros), an announced range from memory. */
static void write_image(Addr base, SizeT len, const HChar *path, ULong offset) {
    SysRes r = VG_(open)(clo_image, VKI_O_CREAT | VKI_O_WRONLY | VKI_O_TRUNC, 0644);
    Int fd, src = -1;
    SizeT done = 0;
    uint32_t crc = 0;
    if (sr_isError(r)) {
        VG_(umsg)("pmtrace: error: cannot create the heap image %s\n", clo_image);
        return;
    }
    fd = (Int)sr_Res(r);
    if (path[0]) {
        SysRes s = VG_(open)(path, VKI_O_RDONLY, 0);
        if (sr_isError(s) || VG_(lseek)((Int)sr_Res(s), (Off64T)offset, VKI_SEEK_SET) != (Off64T)offset) {
            VG_(umsg)("pmtrace: error: cannot read %s for the heap image\n", path);
            if (!sr_isError(s)) VG_(close)((Int)sr_Res(s));
            VG_(close)(fd);
            return;
        }
        src = (Int)sr_Res(s);
    }
    pmt__crc_init(image_crc_table);
    while (done < len) {
        SizeT n = len - done < IMAGE_CHUNK ? len - done : IMAGE_CHUNK, got = 0;
        if (src >= 0) {
            while (got < n) {
                Int k = VG_(read)(src, image_buf + got, (Int)(n - got));
                if (k <= 0) break;
                got += (SizeT)k;
            }
            VG_(memset)(image_buf + got, 0, n - got);
        } else {
            VG_(memcpy)(image_buf, (const void *)(base + done), n);
        }
        crc = pmt__crc(image_crc_table, crc, image_buf, n);
        {
            const UChar *p = image_buf;
            SizeT left = n;
            while (left > 0) {
                Int w = VG_(write)(fd, p, (Int)left);
                if (w <= 0) break;
                p += w;
                left -= (SizeT)w;
            }
            if (left > 0) {
                VG_(umsg)("pmtrace: error: writing the heap image %s failed\n", clo_image);
                break;
            }
        }
        done += n;
    }
    if (src >= 0) VG_(close)(src);
    VG_(close)(fd);
    if (done == len) {
        image_written = True;
        image_size = len;
        image_crc = crc;
    }
}


/* A new PM range: a file mapping (`path`, at file `offset`) or an announced range (path ""). */
static void add_range(Addr base, SizeT len, const HChar *path, ULong offset) {
    PmRange *r;
    UInt i;
    if (len == 0 || dead) return;
    if (n_ranges == MAX_RANGES) {
        VG_(umsg)("pmtrace: warning: more than %d PM ranges; %#lx (+%lu) is not traced\n", MAX_RANGES, base, len);
        return;
    }
    r = &ranges[n_ranges];
    r->base = base;
    r->len = len;
    r->offset = offset;
    r->alias = 0;
    VG_(memset)(r->path, 0, sizeof r->path);
    VG_(strncpy)(r->path, path, sizeof r->path - 1);
    for (i = 0; path[0] && i < n_ranges; i++) {
        const PmRange *o = &ranges[i];
        if (o->alias == 0 && VG_(strcmp)(o->path, r->path) == 0 && offset >= o->offset &&
            offset + len <= o->offset + o->len) {
            r->alias = (Long)(o->base + (offset - o->offset)) - (Long)base;
            break;
        }
    }
    n_ranges++;
    recompute_bounds();
    if (n_seen < sizeof seen / sizeof seen[0])
        seen[n_seen++] = ranges[n_ranges - 1];
    else
        n_seen_dropped++;
    if (!tracing && n_seen == 1 && clo_image[0]) write_image(base, len, path, offset);
    if (!tracing) start_trace();
}

/* ------------------------------------------------------------- code sites */

/* What the site search needs of a code address, cached (open addressing; a
 * full table is answered uncached): its object and whether the symbol table
 * names its function. */
#define IP_SLOTS 65536
typedef struct {
    Addr ip;
    const DebugInfo *di;
    Bool named, used;
} IpInfo;
static IpInfo ip_infos[IP_SLOTS];

static IpInfo ip_info(Addr a) {
    UInt i = (UInt)((a * 0x9E3779B97F4A7C15ULL) >> 48) % IP_SLOTS, k;
    const HChar *f = NULL;
    DiEpoch ep = VG_(current_DiEpoch)();
    IpInfo r;
    for (k = 0; k < 64 && ip_infos[i].used; k++, i = (i + 1) % IP_SLOTS)
        if (ip_infos[i].ip == a) return ip_infos[i];
    r.ip = a;
    r.di = VG_(find_DebugInfo)(ep, a);
    r.named = VG_(get_fnname)(ep, a, &f) && f && f[0];
    r.used = True;
    if (k < 64) ip_infos[i] = r;
    return r;
}

/* Whether `di` is a shared library (it has a soname) rather than the program. */
static Bool is_library(const DebugInfo *di) {
    const HChar *so = di ? VG_(DebugInfo_get_soname)(di) : NULL;
    return so && so[0] && VG_(strcmp)(so, "NONE") != 0;
}

/* Frames the site search walks up from a flush or fence. */
#define SITE_DEPTH 16

/* The code address a flush or fence at instruction `ins` is charged to (see
 * the top of the file). Return addresses are taken minus one, inside the call. */
static Addr site_ip(Addr ins) {
    Addr ips[SITE_DEPTH], outside = 0;
    IpInfo own = ip_info(ins);
    UInt n, i;
    if (!is_library(own.di)) return ins;
    n = VG_(get_StackTrace)(VG_(get_running_tid)(), ips, SITE_DEPTH, NULL, NULL, 0);
    for (i = 1; i < n; i++) {
        IpInfo f = ip_info(ips[i] - 1);
        if (f.di == own.di) continue;
        if (outside == 0) outside = ips[i] - 1;
        if (f.named) return ips[i] - 1;
    }
    return outside ? outside : ins;
}

/* Site ids by code address (open addressing), and per id the address and
 * whether the trace defines it yet. Past MAX_SITES addresses the rest share
 * the unknown site 0. */
#define MAX_SITES 16384
#define SITE_SLOTS (2 * MAX_SITES)
static Addr site_slot_addr[SITE_SLOTS];
static UInt site_slot_id[SITE_SLOTS];
static Addr site_addr[MAX_SITES + 1];
static Bool site_defined[MAX_SITES + 1];
static UInt n_sites;

/* The site id of the instruction at `a` (0 when the table is full). */
static UInt site_of(Addr a) {
    UInt i = (UInt)((a * 0x9E3779B97F4A7C15ULL) >> 49) % SITE_SLOTS;
    while (site_slot_id[i] != 0) {
        if (site_slot_addr[i] == a) return site_slot_id[i];
        i = (i + 1) % SITE_SLOTS;
    }
    if (n_sites == MAX_SITES) return 0;
    site_slot_addr[i] = a;
    site_slot_id[i] = ++n_sites;
    site_addr[n_sites] = a;
    return n_sites;
}

/* Defines site `id` in the trace before its first flush or fence: what the
 * debug information says of its address (a name that is not UTF-8 is left
 * out rather than the site). */
static void define_site(UInt id) {
    static HChar fn[512], path[1024];
    const HChar *f = NULL, *file = NULL, *dir = NULL;
    UInt line = 0;
    DiEpoch ep = VG_(current_DiEpoch)();
    Addr a = site_addr[id];
    int st;
    site_defined[id] = True;
    fn[0] = path[0] = 0;
    /* Copied at once: the next debuginfo call may invalidate the string. */
    if (VG_(get_fnname)(ep, a, &f) && f) VG_(strncpy)(fn, f, sizeof fn - 1);
    fn[sizeof fn - 1] = 0;
    if (VG_(get_filename_linenum)(ep, a, &file, &dir, &line) && file) {
        if (dir && dir[0] && file[0] != '/')
            VG_(snprintf)(path, sizeof path, "%s/%s", dir, file);
        else
            VG_(snprintf)(path, sizeof path, "%s", file);
    } else if (VG_(get_objname)(ep, a, &file) && file) { /* no line table: at least the object */
        VG_(snprintf)(path, sizeof path, "%s", file);
    }
    st = pmt_site_define(&writer, id, a, line, 0, path, VG_(strlen)(path), fn, VG_(strlen)(fn));
    if (st == PMT_ERR_UTF8) st = pmt_site_define(&writer, id, a, line, 0, NULL, 0, NULL, 0);
    check(st);
}

/* The site of a flush or fence at instruction `ins`, defined in the trace
 * first if this is its first use. */
static UInt use_site(Addr ins) {
    UInt id = site_of(site_ip(ins));
    if (id != 0 && !site_defined[id]) define_site(id);
    return id;
}

/* ---------------------------------------------- helpers run by the program */

static void h_store(Addr a, UWord size) {
    const PmRange *r;
    if (!tracing || (r = pm_range(a)) == NULL) return;
    check(pmt_store(&writer, trace_tid(VG_(get_running_tid)()), a + r->alias, (uint32_t)size, (const void *)a));
}

static void h_ntstore(Addr a, UWord size) {
    const PmRange *r;
    if (!tracing || (r = pm_range(a)) == NULL) return;
    check(pmt_ntstore(&writer, trace_tid(VG_(get_running_tid)()), a + r->alias, (uint32_t)size, (const void *)a));
}

static void h_flush(Addr a, Addr ins) {
    const PmRange *r;
    if (!tracing || (r = pm_range(a)) == NULL) return;
    check(pmt_flush_at(&writer, trace_tid(VG_(get_running_tid)()), PMT_CLFLUSH, (a + r->alias) & ~(Addr)63,
                       use_site(ins)));
}

/* A clflush whose line is known only to 256 B: recorded at that granule. */
static void h_flush_imprecise(Addr a, Addr ins) {
    const PmRange *r;
    if (!tracing || (r = pm_range(a)) == NULL) return;
    n_imprecise++;
    check(pmt_flush_at(&writer, trace_tid(VG_(get_running_tid)()), PMT_CLFLUSH, (a + r->alias) & ~(Addr)63,
                       use_site(ins)));
}

static void h_fence(UWord kind, Addr ins) {
    if (!tracing) return;
    check(pmt_fence_at(&writer, trace_tid(VG_(get_running_tid)()), (unsigned)kind, use_site(ins)));
}

static void h_rmw(Addr a, Addr ins) {
    if (!tracing || pm_range(a) == NULL) return;
    check(pmt_fence_at(&writer, trace_tid(VG_(get_running_tid)()), PMT_LOCKED_RMW, use_site(ins)));
}

/* ------------------------------------------------ instruction classification */

typedef enum { INS_OTHER, INS_SFENCE, INS_MFENCE, INS_LFENCE, INS_CLFLUSH, INS_NTSTORE } InsKind;

/* What the instruction at `p` (`len` bytes) is, as far as pmtrace cares.
 * For a RIP-relative clflush, *riprel is set and *disp is its disp32. */
static InsKind classify(const UChar *p, UInt len, Bool *riprel, Int *disp) {
    UInt i = 0;
    Bool has66 = False;
    *riprel = False;
    while (i < len) { /* legacy prefixes */
        UChar b = p[i];
        if (b == 0x66)
            has66 = True;
        else if (!(b == 0x67 || b == 0xF0 || b == 0xF2 || b == 0xF3 || b == 0x2E || b == 0x36 || b == 0x3E ||
                   b == 0x26 || b == 0x64 || b == 0x65))
            break;
        i++;
    }
    if (i < len && (p[i] & 0xF0) == 0x40) i++; /* REX */
    if (i + 2 < len && (p[i] == 0xC5 || p[i] == 0xC4)) { /* VEX: vmovntdq / vmovntps / vmovntpd */
        UInt pp, map, op;
        if (p[i] == 0xC5) {
            pp = p[i + 1] & 3u;
            map = 1;
            op = p[i + 2];
        } else {
            if (i + 3 >= len) return INS_OTHER;
            map = p[i + 1] & 0x1Fu;
            pp = p[i + 2] & 3u;
            op = p[i + 3];
        }
        if (map == 1 && ((op == 0xE7 && pp == 1) || (op == 0x2B && pp <= 1))) return INS_NTSTORE;
        return INS_OTHER;
    }
    if (i + 1 >= len || p[i] != 0x0F) return INS_OTHER;
    switch (p[i + 1]) {
    case 0xC3: /* movnti */
    case 0x2B: /* movntps, movntpd */
    case 0xE7: /* movntq, movntdq */
        return INS_NTSTORE;
    case 0xAE: {
        UInt modrm, mod, reg;
        if (i + 2 >= len) return INS_OTHER;
        modrm = p[i + 2];
        mod = modrm >> 6;
        reg = (modrm >> 3) & 7u;
        if (mod == 3) return reg == 7 ? INS_SFENCE : reg == 6 ? INS_MFENCE : reg == 5 ? INS_LFENCE : INS_OTHER;
        if (reg != 7 || has66) return INS_OTHER;
        if (mod == 0 && (modrm & 7u) == 5 && i + 6 < len) {
            *riprel = True;
            *disp = (Int)((UInt)p[i + 3] | (UInt)p[i + 4] << 8 | (UInt)p[i + 5] << 16 | (UInt)p[i + 6] << 24);
        }
        return INS_CLFLUSH;
    }
    default:
        return INS_OTHER;
    }
}

/* ------------------------------------------------------------ instrumentation */

static void add_call(IRSB *sb, const HChar *name, void *fn, IRExpr **args, IRExpr *guard) {
    IRDirty *di = unsafeIRDirty_0_N(0, name, VG_(fnptr_to_fnentry)(fn), args);
    if (guard) di->guard = guard;
    addStmtToIRSB(sb, IRStmt_Dirty(di));
}

/* The window marker: once, at the first entry of --pmt-window-at's function,
 * so that pmsim sim reports the figures from there on beside the whole run's
 * (the steady state of a program, without its setup). */
static Bool window_opened;
static HChar window_label[256];

static void h_window(void) {
    if (window_opened || !tracing) return;
    window_opened = True;
    check(pmt_marker(&writer, trace_tid(VG_(get_running_tid)()), 0, window_label, VG_(strlen)(window_label)));
}

/* Whether the instruction at `a` is the entry of --pmt-window-at's function. */
static Bool is_window_entry(Addr a) {
    const HChar *f = NULL;
    if (window_opened || clo_window_at[0] == 0) return False;
    return VG_(get_fnname_if_entry)(VG_(current_DiEpoch)(), a, &f) && f && VG_(strcmp)(f, clo_window_at) == 0;
}

/* A store of `data`'s size at `addr` (when `guard` holds), after it happened. */
static void add_store(IRSB *sb, IRExpr *addr, IRExpr *data, IRExpr *guard, Bool nt) {
    Int size = sizeofIRType(typeOfIRExpr(sb->tyenv, data));
    if (nt)
        add_call(sb, "h_ntstore", h_ntstore, mkIRExprVec_2(addr, mkIRExpr_HWord((HWord)size)), guard);
    else
        add_call(sb, "h_store", h_store, mkIRExprVec_2(addr, mkIRExpr_HWord((HWord)size)), guard);
}

/* The expression that defined temp `t` in `sb` before statement `upto`. */
static IRExpr *definition(IRSB *sb, IRTemp t, Int upto) {
    Int k;
    for (k = upto - 1; k >= 0; k--) {
        IRStmt *s = sb->stmts[k];
        if (s->tag == Ist_WrTmp && s->Ist.WrTmp.tmp == t) return s->Ist.WrTmp.data;
    }
    return NULL;
}

static IROp eq_op(IRType ty) {
    switch (ty) {
    case Ity_I8: return Iop_CmpEQ8;
    case Ity_I16: return Iop_CmpEQ16;
    case Ity_I32: return Iop_CmpEQ32;
    default: return Iop_CmpEQ64;
    }
}

static IRSB *pmt_instrument(VgCallbackClosure *closure, IRSB *in, const VexGuestLayout *layout,
                            const VexGuestExtents *vge, const VexArchInfo *archinfo_host, IRType gWordTy,
                            IRType hWordTy) {
    IRSB *out;
    Int i;
    InsKind ins = INS_OTHER;
    Addr ins_addr = 0;
    UInt ins_len = 0;
    Bool riprel = False;
    Int disp = 0;
    (void)closure, (void)layout, (void)vge, (void)archinfo_host, (void)hWordTy;
    if (gWordTy != Ity_I64) VG_(tool_panic)("pmtrace: only amd64 guests are supported");

    out = deepCopyIRSBExceptStmts(in);
    for (i = 0; i < in->stmts_used && in->stmts[i]->tag != Ist_IMark; i++) addStmtToIRSB(out, in->stmts[i]);

    for (; i < in->stmts_used; i++) {
        IRStmt *st = in->stmts[i];
        if (!st || st->tag == Ist_NoOp) continue;
        switch (st->tag) {
        case Ist_IMark: /* a new instruction: what is it? */
            ins_addr = (Addr)st->Ist.IMark.addr;
            ins_len = st->Ist.IMark.len;
            ins = classify((const UChar *)ins_addr, ins_len, &riprel, &disp);
            addStmtToIRSB(out, st);
            if (is_window_entry(ins_addr)) add_call(out, "h_window", h_window, mkIRExprVec_0(), NULL);
            break;

        case Ist_Store: /* a store (movnt* ones are plain stores in IR) */
            addStmtToIRSB(out, st);
            add_store(out, st->Ist.Store.addr, st->Ist.Store.data, NULL, ins == INS_NTSTORE);
            break;

        case Ist_StoreG: { /* a guarded store */
            IRStoreG *sg = st->Ist.StoreG.details;
            addStmtToIRSB(out, st);
            add_store(out, sg->addr, sg->data, sg->guard, ins == INS_NTSTORE);
            break;
        }

        case Ist_Dirty: { /* a helper that writes memory (fxsave, xsave, ...) */
            IRDirty *d = st->Ist.Dirty.details;
            addStmtToIRSB(out, st);
            if (d->mFx == Ifx_Write || d->mFx == Ifx_Modify)
                add_call(out, "h_store", h_store, mkIRExprVec_2(d->mAddr, mkIRExpr_HWord((HWord)d->mSize)),
                         d->guard);
            break;
        }

        case Ist_CAS: { /* a locked read-modify-write: ordering point, then the store if it swapped */
            IRCAS *c = st->Ist.CAS.details;
            IRType ty = typeOfIRExpr(in->tyenv, c->expdLo);
            IRTemp ok = newIRTemp(out->tyenv, Ity_I1);
            IRExpr *eq = IRExpr_Binop(eq_op(ty), IRExpr_RdTmp(c->oldLo), c->expdLo);
            addStmtToIRSB(out, st);
            if (c->oldHi != IRTemp_INVALID) {
                IRTemp lo = newIRTemp(out->tyenv, Ity_I1), hi = newIRTemp(out->tyenv, Ity_I1);
                addStmtToIRSB(out, IRStmt_WrTmp(lo, eq));
                addStmtToIRSB(out,
                              IRStmt_WrTmp(hi, IRExpr_Binop(eq_op(ty), IRExpr_RdTmp(c->oldHi), c->expdHi)));
                eq = IRExpr_Binop(Iop_And1, IRExpr_RdTmp(lo), IRExpr_RdTmp(hi));
            }
            addStmtToIRSB(out, IRStmt_WrTmp(ok, eq));
            add_call(out, "h_rmw", h_rmw, mkIRExprVec_2(c->addr, mkIRExpr_HWord((HWord)ins_addr)), NULL);
            add_call(out, "h_store", h_store,
                     mkIRExprVec_2(c->addr, mkIRExpr_HWord((HWord)(sizeofIRType(ty) *
                                                                    (c->oldHi != IRTemp_INVALID ? 2 : 1)))),
                     IRExpr_RdTmp(ok));
            break;
        }

        case Ist_MBE: /* sfence, mfence and lfence alike: the bytes tell */
            addStmtToIRSB(out, st);
            if (st->Ist.MBE.event == Imbe_Fence && (ins == INS_SFENCE || ins == INS_MFENCE))
                add_call(out, "h_fence", h_fence,
                         mkIRExprVec_2(mkIRExpr_HWord(ins == INS_SFENCE ? PMT_SFENCE : PMT_MFENCE),
                                       mkIRExpr_HWord((HWord)ins_addr)),
                         NULL);
            break;

        case Ist_Put: /* clflush: guest_CMSTART = And64(line address, ~0xFF) */
            if (ins == INS_CLFLUSH && st->Ist.Put.offset == offsetof(VexGuestAMD64State, guest_CMSTART)) {
                IRExpr *data = st->Ist.Put.data, *def = NULL;
                if (data->tag == Iex_RdTmp) def = definition(in, data->Iex.RdTmp.tmp, i);
                IRExpr *site = mkIRExpr_HWord((HWord)ins_addr);
                if (def && def->tag == Iex_Binop && def->Iex.Binop.op == Iop_And64)
                    add_call(out, "h_flush", h_flush, mkIRExprVec_2(def->Iex.Binop.arg1, site), NULL);
                else if (riprel)
                    add_call(out, "h_flush", h_flush,
                             mkIRExprVec_2(mkIRExpr_HWord((HWord)(ins_addr + ins_len + (Long)disp)), site), NULL);
                else
                    add_call(out, "h_flush_imprecise", h_flush_imprecise, mkIRExprVec_2(data, site), NULL);
            }
            addStmtToIRSB(out, st);
            break;

        default:
            addStmtToIRSB(out, st);
            break;
        }
    }
    return out;
}

/* ----------------------------------------------------------- client requests */

/* A NUL-terminated client string, cut at MAX_TEXT bytes. */
static SizeT client_text(const HChar *s) {
    SizeT n = 0;
    if (s == NULL) return 0;
    while (n < MAX_TEXT && s[n]) n++;
    return n;
}

static Bool pmt_handle_client_request(ThreadId tid, UWord *arg, UWord *ret) {
    UInt t;
    if (!VG_IS_TOOL_USERREQ('P', 'M', arg[0])) return False;
    t = trace_tid(tid);
    *ret = 1; /* "pmtrace is here" */
    switch (arg[0]) {
    case PMTRACE_REQ_PM_RANGE:
        add_range(arg[1], arg[2], "", 0);
        break;
    case PMTRACE_REQ_REGION_ADD:
        if (tracing)
            check(pmt_region_add(&writer, t, arg[1], (unsigned)arg[2], arg[3], arg[4], (const char *)arg[5],
                                 client_text((const HChar *)arg[5])));
        break;
    case PMTRACE_REQ_REGION_REMOVE:
        if (tracing) check(pmt_region_remove(&writer, t, arg[1]));
        break;
    case PMTRACE_REQ_OP_BEGIN:
        if (tracing)
            check(pmt_op_begin(&writer, t, arg[1], arg[2]));
        else if (!dead && n_early_ops < MAX_EARLY_OPS) {
            early_ops[n_early_ops].tid = t;
            early_ops[n_early_ops].op = arg[1];
            early_ops[n_early_ops].arg = arg[2];
            n_early_ops++;
        }
        break;
    case PMTRACE_REQ_OP_END:
        if (tracing)
            check(pmt_op_end(&writer, t, arg[1], arg[2]));
        else if (n_early_ops > 0 && early_ops[n_early_ops - 1].tid == t && early_ops[n_early_ops - 1].op == arg[1])
            n_early_ops--; /* begun and ended before the trace: nothing to record */
        break;
    case PMTRACE_REQ_MARKER:
        if (tracing)
            check(pmt_marker(&writer, t, arg[1], (const char *)arg[2], client_text((const HChar *)arg[2])));
        break;
    case PMTRACE_REQ_RUNNING:
        break;
    case PMTRACE_REQ_THREAD_ID:
        *ret = (UWord)t + 1;
        break;
    case PMTRACE_REQ_JOINED:
        if (tracing)
            check(pmt_marker(&writer, t, arg[1], PMT_JOIN_MARKER, sizeof PMT_JOIN_MARKER - 1));
        break;
    case PMTRACE_REQ_LOCKED:
        if (tracing)
            check(pmt_marker(&writer, t, arg[1], PMT_LOCK_ACQUIRE_MARKER, sizeof PMT_LOCK_ACQUIRE_MARKER - 1));
        break;
    case PMTRACE_REQ_UNLOCKING:
        if (tracing)
            check(pmt_marker(&writer, t, arg[1], PMT_LOCK_RELEASE_MARKER, sizeof PMT_LOCK_RELEASE_MARKER - 1));
        break;
    default:
        VG_(umsg)("pmtrace: warning: unknown client request %#lx\n", arg[0]);
        *ret = 0;
        break;
    }
    return True;
}

/* ------------------------------------------------------- syscalls and threads */

/* The program ends by exit_group, or by exit of its last thread; a run that
 * reaches fini without either was killed by a signal. */
static void pmt_pre_syscall(ThreadId tid, UInt sysno, UWord *args, UInt nargs) {
    UInt t, others = 0;
    (void)nargs;
    if (sysno == __NR_exit)
        for (t = 1; t <= PMT_MAX_THREADS; t++) others += live[t] && t != tid;
    if (sysno == __NR_exit_group || (sysno == __NR_exit && others == 0)) {
        exited = True;
        exit_status = (Long)(args[0] & 0xff);
    }
}

/* Whether `path` lies under --pm-dir. */
static Bool under_pm_dir(const HChar *path) {
    SizeT n = VG_(strlen)(clo_pm_dir);
    while (n > 1 && clo_pm_dir[n - 1] == '/') n--;
    return VG_(strncmp)(path, clo_pm_dir, n) == 0 && (path[n] == '/' || n == 1);
}

static void pmt_post_syscall(ThreadId tid, UInt sysno, UWord *args, UInt nargs, SysRes res) {
    (void)tid, (void)nargs;
    if (sr_isError(res)) return;
    if (sysno == __NR_mmap && !(args[3] & VKI_MAP_ANONYMOUS) && (Int)args[4] >= 0) {
        HChar link[64], path[4096];
        SSizeT n;
        VG_(sprintf)(link, "/proc/self/fd/%d", (Int)args[4]);
        n = VG_(readlink)(link, path, sizeof path - 1);
        if (n <= 0) return;
        path[n] = 0;
        if (under_pm_dir(path)) add_range(sr_Res(res), args[1], path, args[5]);
    } else if (sysno == __NR_munmap && n_ranges > 0) {
        forget_range(args[0], args[1]);
    }
}

/* Valgrind runs one thread at a time, so the thread of the latest event is
 * not always the one creating this thread: the spawn marker names it. */
static void pmt_thread_create(ThreadId parent, ThreadId child) {
    if (child <= PMT_MAX_THREADS) live[child] = True;
    if (!tracing) return;
    if (parent != VG_INVALID_THREADID)
        check(pmt_marker(&writer, trace_tid(parent), trace_tid(child), PMT_SPAWN_MARKER,
                         sizeof PMT_SPAWN_MARKER - 1));
    check(pmt_thread_start(&writer, trace_tid(child)));
}

static void pmt_thread_exit(ThreadId tid) {
    if (tid <= PMT_MAX_THREADS) live[tid] = False;
    if (tracing) check(pmt_thread_end(&writer, trace_tid(tid)));
}

/* --------------------------------------------------------------- start, end */

static void pmt_post_clo_init(void) {
    SysRes r;
    if (clo_out == NULL || clo_out[0] == 0) {
        VG_(fmsg_bad_option)("--pmt-out", "pmtrace needs --pmt-out=FILE, the trace to write\n");
    }
    r = VG_(open)(clo_out, VKI_O_CREAT | VKI_O_WRONLY | VKI_O_TRUNC, 0644);
    if (sr_isError(r)) {
        VG_(fmsg)("pmtrace: cannot create the trace %s\n", clo_out);
        VG_(exit)(1);
    }
    out_fd = (Int)sr_Res(r);
    live[1] = True; /* the main thread */
    VG_(snprintf)(window_label, sizeof window_label, "window:%s", clo_window_at);
}

static void pmt_fini(Int exitcode) {
    (void)exitcode;
    if (n_seen == 0) {
        VG_(close)(out_fd);
        VG_(unlink)(clo_out);
        VG_(umsg)("pmtrace: error: no PM mapping seen: the program mapped no file under %s and announced no "
                  "range\n",
                  clo_pm_dir);
        return;
    }
    if (clo_window_at[0] && !window_opened)
        VG_(umsg)("pmtrace: warning: --pmt-window-at=%s: the function was never called; the trace has no window\n",
                  clo_window_at);
    if (tracing) {
        UInt t;
        for (t = 1; t <= PMT_MAX_THREADS; t++)
            if (live[t]) check(pmt_thread_end(&writer, trace_tid(t)));
        check(pmt_writer_finish(&writer));
    }
    if (!dead) { /* the final header, same length, in place */
        Json j = {hbuf, 0, header_len + 1, False};
        UChar crc[4];
        uint32_t c;
        build_header(&j, True);
        while (j.overflow && n_seen > 1) { /* drop later mappings until it fits */
            n_seen--;
            n_seen_dropped++;
            j.len = 0;
            j.overflow = False;
            build_header(&j, True);
        }
        if (!j.overflow) {
            VG_(memset)(hbuf + j.len, ' ', header_len - j.len);
            c = pmt_header_crc(&writer, hbuf, header_len, clo_values ? PMT_FLAG_VALUES : 0);
            pmt__le32(crc, c);
            if (VG_(lseek)(out_fd, 16, VKI_SEEK_SET) != 16 || write_all(NULL, hbuf, header_len) != 0 ||
                write_all(NULL, crc, 4) != 0)
                VG_(umsg)("pmtrace: error: cannot rewrite the header of %s\n", clo_out);
        }
    }
    VG_(close)(out_fd);
    if (!dead) {
        pmt_stats s = pmt_writer_stats(&writer);
        VG_(umsg)("pmtrace: %llu events in %s%s\n", (ULong)s.events, clo_out,
                  exited ? "" : " (partial: the program did not exit)");
    }
}

static void pmt_pre_clo_init(void) {
    VG_(details_name)("pmtrace");
    VG_(details_version)(NULL);
    VG_(details_description)("persistent-memory stores, flushes and fences into pmsim .pmt traces");
    VG_(details_copyright_author)("the pmsim authors");
    VG_(details_bug_reports_to)("the pmsim project");
    VG_(details_avg_translation_sizeB)(300);
    VG_(basic_tool_funcs)(pmt_post_clo_init, pmt_instrument, pmt_fini);
    VG_(needs_command_line_options)(pmt_process_cmd_line_option, pmt_print_usage, pmt_print_debug_usage);
    VG_(needs_client_requests)(pmt_handle_client_request);
    VG_(needs_syscall_wrapper)(pmt_pre_syscall, pmt_post_syscall);
    VG_(track_pre_thread_ll_create)(pmt_thread_create);
    VG_(track_pre_thread_ll_exit)(pmt_thread_exit);
}

VG_DETERMINE_INTERFACE_VERSION(pmt_pre_clo_init)
