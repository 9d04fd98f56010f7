/*
 * pmtrace_pin: the Intel Pin counterpart of the Valgrind tool pmtrace, thin
 * glue over the same C trace writer (traces/c/pmt_writer.h). Pin decodes
 * clwb and clflushopt (Valgrind 3.19 cannot), so it traces binaries built for
 * them as they run natively.
 *
 *   make PIN_ROOT=/path/to/pin                       # obj-intel64/pmtrace_pin.so
 *   $PIN_ROOT/pin -t obj-intel64/pmtrace_pin.so -o t.pmt -pm-dir /dev/shm -- ./prog args
 *
 * Pin cannot be fetched on the machines pmsim is developed on, so this file is
 * not built or tested in CI; the Valgrind tool is the tested one, and both
 * write through the one writer that traces/tests/c_writer.rs checks.
 *
 * Recorded, like the Valgrind tool: stores inside PM (mappings of files under
 * -pm-dir, seen at mmap), non-temporal stores, clwb/clflushopt/clflush of PM
 * lines, sfence/mfence, locked read-modify-writes on PM. Operation markers
 * (client requests) are a Valgrind mechanism and are not seen here. A program
 * killed by a signal leaves a truncated trace (no end block), which pmsim's
 * reader reports as such.
 */
#include "pin.H"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <string>

#include "pmt_writer.h"

static KNOB<std::string> KnobOut(KNOB_MODE_WRITEONCE, "pintool", "o", "trace.pmt", "the .pmt trace to write");
static KNOB<std::string> KnobPmDir(KNOB_MODE_WRITEONCE, "pintool", "pm-dir", "/dev/shm",
                                   "files mapped from under this directory are PM");

static PIN_LOCK lock; /* the writer serialises all threads: their order in the file is the global order */
static pmt_writer writer;
static unsigned char wbuf[PMT_BUF_SIZE(PMT_DEFAULT_BLOCK_SIZE, 4096)];
static bool tracing;
static ADDRINT heap_base, heap_len;
static std::string heap_path;
static UINT32 max_tid;
static long header_len;

struct Range {
    ADDRINT base, len;
};
static Range ranges[64];
static UINT32 n_ranges;

static bool in_pm(ADDRINT a) {
    for (UINT32 i = 0; i < n_ranges; i++)
        if (a - ranges[i].base < ranges[i].len) return true;
    return false;
}

/* Per-thread scratch: the store being executed and the syscall in flight. */
struct Tls {
    ADDRINT ea;
    UINT32 size;
    ADDRINT sys_num, sys_flags, sys_fd, sys_len;
};
static TLS_KEY tls_key;
static Tls *tls(THREADID t) { return static_cast<Tls *>(PIN_GetThreadData(tls_key, t)); }

static std::string header_json(bool final) {
    char num[160];
    std::string h = "{\"tracer\":\"pin\",\"flush_insn\":\"\",\"threads\":";
    snprintf(num, sizeof num, "%u,\"heap\":{\"base\":%llu,\"size\":%llu,\"path\":\"", final ? max_tid + 1 : 0,
             (unsigned long long)heap_base, (unsigned long long)heap_len);
    h += num;
    for (char c : heap_path) h += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    h += "\"},\"values\":false,\"extra\":{\"partial\":false}}";
    return h;
}

static void start_trace() {
    std::string h = header_json(false);
    h.append(1024, ' '); /* room for the final header */
    header_len = (long)h.size();
    if (pmt_writer_open_file(&writer, KnobOut.Value().c_str(), wbuf, sizeof wbuf, 0, h.data(), h.size(), 0) ==
        PMT_OK)
        tracing = true;
    else
        fprintf(stderr, "pmtrace_pin: cannot create %s\n", KnobOut.Value().c_str());
}

/* ---- analysis routines ---- */

static VOID BeforeStore(THREADID t, ADDRINT ea, UINT32 size) {
    tls(t)->ea = ea;
    tls(t)->size = size;
}

static VOID AfterStore(THREADID t, UINT32 nt) {
    Tls *s = tls(t);
    if (!tracing || !in_pm(s->ea)) return;
    PIN_GetLock(&lock, t + 1);
    if (nt)
        pmt_ntstore(&writer, t, s->ea, s->size, NULL);
    else
        pmt_store(&writer, t, s->ea, s->size, NULL);
    PIN_ReleaseLock(&lock);
}

static VOID Flush(THREADID t, ADDRINT ea, UINT32 kind) {
    if (!tracing || !in_pm(ea)) return;
    PIN_GetLock(&lock, t + 1);
    pmt_flush(&writer, t, kind, ea & ~(ADDRINT)63);
    PIN_ReleaseLock(&lock);
}

static VOID Fence(THREADID t, UINT32 kind, ADDRINT ea) {
    if (!tracing || (kind == PMT_LOCKED_RMW && !in_pm(ea))) return;
    PIN_GetLock(&lock, t + 1);
    pmt_fence(&writer, t, kind);
    PIN_ReleaseLock(&lock);
}

/* ---- instrumentation ---- */

static bool is_ntstore(OPCODE op) {
    return op == XED_ICLASS_MOVNTI || op == XED_ICLASS_MOVNTDQ || op == XED_ICLASS_MOVNTPS ||
           op == XED_ICLASS_MOVNTPD || op == XED_ICLASS_MOVNTQ || op == XED_ICLASS_VMOVNTDQ ||
           op == XED_ICLASS_VMOVNTPS || op == XED_ICLASS_VMOVNTPD;
}

static VOID Instruction(INS ins, VOID *) {
    OPCODE op = INS_Opcode(ins);
    if (op == XED_ICLASS_CLFLUSH || op == XED_ICLASS_CLFLUSHOPT || op == XED_ICLASS_CLWB) {
        UINT32 kind = op == XED_ICLASS_CLWB ? PMT_CLWB : op == XED_ICLASS_CLFLUSHOPT ? PMT_CLFLUSHOPT : PMT_CLFLUSH;
        INS_InsertCall(ins, IPOINT_BEFORE, (AFUNPTR)Flush, IARG_THREAD_ID, IARG_MEMORYOP_EA, 0, IARG_UINT32, kind,
                       IARG_END);
        return;
    }
    if (op == XED_ICLASS_SFENCE || op == XED_ICLASS_MFENCE) {
        INS_InsertCall(ins, IPOINT_BEFORE, (AFUNPTR)Fence, IARG_THREAD_ID, IARG_UINT32,
                       op == XED_ICLASS_SFENCE ? PMT_SFENCE : PMT_MFENCE, IARG_ADDRINT, (ADDRINT)0, IARG_END);
        return;
    }
    if (INS_IsMemoryWrite(ins) && INS_IsStandardMemop(ins)) {
        if (INS_LockPrefix(ins) || (op == XED_ICLASS_XCHG && INS_IsMemoryRead(ins)))
            INS_InsertCall(ins, IPOINT_BEFORE, (AFUNPTR)Fence, IARG_THREAD_ID, IARG_UINT32, PMT_LOCKED_RMW,
                           IARG_MEMORYWRITE_EA, IARG_END);
        INS_InsertCall(ins, IPOINT_BEFORE, (AFUNPTR)BeforeStore, IARG_THREAD_ID, IARG_MEMORYWRITE_EA,
                       IARG_MEMORYWRITE_SIZE, IARG_END);
        if (INS_IsValidForIpointAfter(ins))
            INS_InsertCall(ins, IPOINT_AFTER, (AFUNPTR)AfterStore, IARG_THREAD_ID, IARG_UINT32,
                           (UINT32)is_ntstore(op), IARG_END);
    }
}

/* ---- mappings, threads, end ---- */

static VOID SyscallEntry(THREADID t, CONTEXT *ctx, SYSCALL_STANDARD std, VOID *) {
    Tls *s = tls(t);
    s->sys_num = PIN_GetSyscallNumber(ctx, std);
    s->sys_len = PIN_GetSyscallArgument(ctx, std, 1);
    s->sys_flags = PIN_GetSyscallArgument(ctx, std, 3);
    s->sys_fd = PIN_GetSyscallArgument(ctx, std, 4);
}

static VOID SyscallExit(THREADID t, CONTEXT *ctx, SYSCALL_STANDARD std, VOID *) {
    Tls *s = tls(t);
    ADDRINT ret = PIN_GetSyscallReturn(ctx, std);
    char link[64], path[4096];
    ssize_t n;
    if (s->sys_num != 9 /* mmap */ || (s->sys_flags & 0x20 /* MAP_ANONYMOUS */) || (INT32)s->sys_fd < 0 ||
        ret >= (ADDRINT)-4095)
        return;
    snprintf(link, sizeof link, "/proc/self/fd/%d", (int)s->sys_fd);
    n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return;
    path[n] = 0;
    const std::string &dir = KnobPmDir.Value();
    if (strncmp(path, dir.c_str(), dir.size()) != 0 || path[dir.size()] != '/') return;
    PIN_GetLock(&lock, t + 1);
    if (n_ranges < 64) ranges[n_ranges++] = Range{ret, s->sys_len};
    if (!tracing && heap_len == 0) {
        heap_base = ret;
        heap_len = s->sys_len;
        heap_path = path;
        start_trace();
    }
    PIN_ReleaseLock(&lock);
}

static VOID ThreadStart(THREADID t, CONTEXT *, INT32, VOID *) {
    PIN_SetThreadData(tls_key, new Tls(), t);
    PIN_GetLock(&lock, t + 1);
    if (t > max_tid) max_tid = t;
    if (tracing) pmt_thread_start(&writer, t);
    PIN_ReleaseLock(&lock);
}

static VOID ThreadFini(THREADID t, const CONTEXT *, INT32, VOID *) {
    PIN_GetLock(&lock, t + 1);
    if (tracing) pmt_thread_end(&writer, t);
    PIN_ReleaseLock(&lock);
    delete tls(t);
}

static VOID Fini(INT32, VOID *) {
    if (!tracing) {
        fprintf(stderr, "pmtrace_pin: no PM mapping seen under %s: no trace written\n", KnobPmDir.Value().c_str());
        return;
    }
    FILE *f = (FILE *)writer.ctx;
    pmt_writer_finish(&writer);
    std::string h = header_json(true);
    if ((long)h.size() <= header_len) { /* the final header, in place */
        unsigned char crc[4];
        h.append(header_len - h.size(), ' ');
        pmt__le32(crc, pmt_header_crc(&writer, h.data(), h.size(), 0));
        fseek(f, 16, SEEK_SET);
        fwrite(h.data(), 1, h.size(), f);
        fwrite(crc, 1, 4, f);
    }
    fclose(f);
}

int main(int argc, char *argv[]) {
    if (PIN_Init(argc, argv)) {
        fprintf(stderr, "usage: pin -t pmtrace_pin.so -o OUT.pmt -pm-dir DIR -- PROG ARGS\n");
        return 1;
    }
    PIN_InitLock(&lock);
    tls_key = PIN_CreateThreadDataKey(NULL);
    INS_AddInstrumentFunction(Instruction, NULL);
    PIN_AddSyscallEntryFunction(SyscallEntry, NULL);
    PIN_AddSyscallExitFunction(SyscallExit, NULL);
    PIN_AddThreadStartFunction(ThreadStart, NULL);
    PIN_AddThreadFiniFunction(ThreadFini, NULL);
    PIN_AddFiniFunction(Fini, NULL);
    PIN_StartProgram();
    return 0;
}
