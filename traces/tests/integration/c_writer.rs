//! The C writer `traces/c/pmt_writer.h` against the Rust side: the test
//! program `traces/c/test_writer.c` is compiled with the system C compiler
//! (`$CC`, else `cc`), its traces are read back with `TraceReader`, and they
//! must be byte-identical to what `TraceWriter` writes for the same calls with
//! the same header bytes and block size.

use pmsim_traces::{
    Category, Component, EncodeError, FenceKind, FlushKind, HeapInfo, OpKind, OwnedEvent, Region, Site, TraceHeader,
    TraceReader, TraceTotals, TraceWriter, Tracer, WriterOptions,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

// `pmt_status` values of pmt_writer.h.
const OK: i32 = 0;
const ERR_TID: i32 = 3;
const ERR_UNALIGNED: i32 = 4;
const ERR_OP_CODE: i32 = 5;
const ERR_VALUE: i32 = 6;
const ERR_TOO_BIG: i32 = 8;

/// `PMT_MAX_THREADS` as test_writer.c is compiled (the default).
const MAX_THREADS: u32 = 1024;
const HEAP: u64 = 0x7f00_0000_0000;
const CFLAGS: [&str; 5] = ["-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror"];

fn c_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("c")
}

fn compiler() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".to_string())
}

/// Runs `cmd`, failing the test with its output unless it succeeds.
fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Compiles test_writer.c into `dir`.
fn build(dir: &Path) -> PathBuf {
    let exe = dir.join("test_writer");
    run(Command::new(compiler()).args(CFLAGS).arg("-O2").arg("-o").arg(&exe).arg(c_dir().join("test_writer.c")));
    exe
}

/// One call of the C program, and the status it must return: an event (a
/// flush or fence at code site `site`), or the definition of a site (`define`;
/// `tid` and `ev` unused).
#[derive(Clone, Debug)]
struct Call {
    tid: u32,
    ev: OwnedEvent,
    status: i32,
    site: u32,
    define: Option<Site>,
}

/// The value bytes test_writer.c's `fill` makes.
fn fill(key: u64, size: u32) -> Vec<u8> {
    (0..size as u64).map(|j| key.wrapping_mul(131).wrapping_add(j * 7).wrapping_add(1) as u8).collect()
}

/// The operation a C op code names; reserved codes (8–15) become `Other`, which
/// both writers must refuse.
fn op_kind(code: u64) -> OpKind {
    OpKind::from_code(code).unwrap_or(OpKind::Other(code))
}

fn op_code(op: OpKind) -> u64 {
    op.code()
}

const FLUSHES: [FlushKind; 3] = [FlushKind::Clwb, FlushKind::Clflushopt, FlushKind::Clflush];
const FENCES: [FenceKind; 3] = [FenceKind::Sfence, FenceKind::Mfence, FenceKind::LockedRmw];
const CATEGORIES: [Category; 4] = [Category::Meta, Category::Wal, Category::Log, Category::Data];

/// Builds the mirror of test_writer.c's built-in sequence.
struct Seq {
    values: bool,
    calls: Vec<Call>,
}

impl Seq {
    fn call(&mut self, tid: u32, ev: OwnedEvent, status: i32) {
        self.calls.push(Call { tid, ev, status, site: 0, define: None });
    }
    fn at(&mut self, tid: u32, ev: OwnedEvent, site: u32, status: i32) {
        self.calls.push(Call { tid, ev, status, site, define: None });
    }
    fn define(&mut self, site: Site) {
        self.calls.push(Call { tid: 0, ev: OwnedEvent::ThreadStart, status: OK, site: 0, define: Some(site) });
    }
    fn ok(&mut self, tid: u32, ev: OwnedEvent) {
        self.call(tid, ev, OK);
    }
    fn value(&self, key: u64, size: u32) -> Option<Vec<u8>> {
        self.values.then(|| fill(key, size))
    }
    fn store(&mut self, tid: u32, addr: u64, size: u32, key: u64) {
        let value = self.value(key, size);
        self.ok(tid, OwnedEvent::Store { addr, size, value });
    }
    fn ntstore(&mut self, tid: u32, addr: u64, size: u32, key: u64) {
        let value = self.value(key, size);
        self.ok(tid, OwnedEvent::NtStore { addr, size, value });
    }
}

/// test_writer.c's `emit_fixed`, without its "C only" calls.
fn emit_fixed(s: &mut Seq) {
    use OwnedEvent as E;
    let h = HEAP;
    s.ok(0, E::ThreadStart);
    s.ok(0, E::RegionAdd { id: 0, category: Category::Meta, base: h, len: 4096, name: "heap header".into() });
    s.ok(0, E::RegionAdd { id: 1, category: Category::Data, base: h + 4096, len: 1 << 20, name: "données ✓".into() });
    s.ok(0, E::OpBegin { op: OpKind::Malloc, arg: 48 });
    s.store(0, h + 64, 8, 1);
    s.store(0, h + 72, 8, 2);
    s.store(0, h + 80, 24, 3);
    s.store(0, h + 104, 0, 4);
    s.ok(0, E::Flush { kind: FlushKind::Clwb, line: h + 64 });
    s.ok(0, E::Flush { kind: FlushKind::Clflushopt, line: h + 128 });
    s.ok(0, E::Fence { kind: FenceKind::Sfence });
    s.ok(0, E::OpEnd { op: OpKind::Malloc, result: 4096 + 64 });
    s.ntstore(0, h + 4096, 64, 5);
    s.ok(0, E::Load { addr: h + 8, size: 4 });
    s.ok(0, E::Load { addr: h + 12, size: 3 });
    s.ok(0, E::Fence { kind: FenceKind::Mfence });
    s.ok(0, E::Fence { kind: FenceKind::LockedRmw });
    s.ok(0, E::Flush { kind: FlushKind::Clflush, line: h });
    s.store(0, h + 8192, 5000, 6);
    s.ok(3, E::ThreadStart);
    s.store(3, 0xffff_ffff_ffff_fff8, 8, 7);
    s.store(3, 8, 8, 8);
    s.ok(3, E::Flush { kind: FlushKind::Clwb, line: 0 });
    s.ok(3, E::Flush { kind: FlushKind::Clwb, line: 0xffff_ffff_ffff_ffc0 });
    s.ok(15, E::ThreadStart);
    s.store(15, 0x8000_0000_0000_0000, 16, 9);
    s.store(15, 0x1000, 16, 10);
    s.store(15, h, 1, 11);
    s.ok(15, E::OpBegin { op: OpKind::Other(16), arg: 1 });
    s.ok(15, E::OpEnd { op: OpKind::Other(16), result: 2 });
    s.ok(15, E::OpBegin { op: OpKind::Other(1_000_000), arg: u64::MAX });
    s.ok(15, E::OpEnd { op: OpKind::Other(u64::MAX), result: 0 });
    for op in 1..=7 {
        s.ok(14, E::OpBegin { op: op_kind(op), arg: op * 1000 });
        s.ok(14, E::OpEnd { op: op_kind(op), result: op });
    }
    s.ok(16, E::ThreadStart);
    s.ok(MAX_THREADS - 1, E::ThreadStart);
    s.store(MAX_THREADS - 1, h + 128, 2, 12);
    s.ok(MAX_THREADS - 1, E::ThreadEnd);
    s.ok(0, E::Marker { id: 7, label: "checkpoint α".into() });
    s.ok(0, E::Marker { id: u64::MAX, label: String::new() });
    s.ok(0, E::RegionRemove { id: 1 });
    s.ok(0, E::Load { addr: h, size: u32::MAX });
    // Code sites: ids in the tag and after it, kept across events, reset by a
    // thread switch, unchanged by a refused event.
    s.define(Site {
        id: 1,
        addr: 0x401000,
        function: "pmem_flush".into(),
        file: "src/libpmem.c".into(),
        line: 42,
        column: 0,
    });
    s.define(Site { id: 300, ..Site::default() });
    s.define(Site { id: 7, addr: 0, function: "données".into(), file: "é.rs".into(), line: 1, column: 2 });
    s.at(0, E::Flush { kind: FlushKind::Clwb, line: h + 64 }, 1, OK);
    s.at(0, E::Fence { kind: FenceKind::Sfence }, 1, OK);
    s.at(0, E::Flush { kind: FlushKind::Clwb, line: h }, 300, OK);
    s.at(3, E::Fence { kind: FenceKind::Sfence }, 300, OK);
    s.at(3, E::Flush { kind: FlushKind::Clwb, line: h }, 0, OK);
    s.at(5, E::Flush { kind: FlushKind::Clwb, line: h + 3 }, 9, ERR_UNALIGNED);
    s.at(5, E::Fence { kind: FenceKind::Mfence }, 0, OK);
    s.at(0, E::Fence { kind: FenceKind::Mfence }, 7, OK);
    s.call(7, E::Flush { kind: FlushKind::Clwb, line: h + 1 }, ERR_UNALIGNED);
    s.store(7, h + 200, 8, 13);
    s.call(9, E::OpBegin { op: OpKind::Other(8), arg: 0 }, ERR_OP_CODE);
    s.call(9, E::OpEnd { op: OpKind::Other(15), result: 0 }, ERR_OP_CODE);
    s.ok(9, E::ThreadStart);
    let missing = if s.values { ERR_VALUE } else { OK };
    s.call(11, E::Store { addr: h, size: 8, value: None }, missing);
    s.call(11, E::NtStore { addr: h, size: 0, value: None }, missing);
    s.ok(11, E::Fence { kind: FenceKind::Sfence });
    s.call(70000, E::Fence { kind: FenceKind::Sfence }, ERR_TID);
    s.ok(12, E::Marker { id: 2, label: "🦀 ok".into() });
}

/// test_writer.c's `emit_random`.
fn emit_random(s: &mut Seq, n: u64) {
    use OwnedEvent as E;
    let tids = [0, 1, 2, 5, 14, 15, 16, 100, MAX_THREADS - 1];
    let sizes = [1u32, 2, 4, 8, 16, 32, 64, 3, 24, 100, 6, 128];
    let ops = [0u64, 1, 2, 3, 4, 5, 6, 7, 16, 17, 300];
    let text = ["", "gc", "phase → 2"];
    let mut rng: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut ptr: [u64; 9] = std::array::from_fn(|j| HEAP + j as u64 * 0x10_0000);
    let mut t = 0usize;
    for i in 0..n {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let (r, r2) = (rng, rng >> 16);
        let k = (r >> 8) % 32;
        if r & 7 == 0 {
            t = ((r >> 3) % 9) as usize;
        }
        let tid = tids[t];
        if k < 16 {
            let size = sizes[(r2 % 12) as usize];
            let addr = match (r2 >> 4) % 4 {
                0 | 1 => ptr[t],
                2 => ptr[t].wrapping_sub((r2 >> 8) % 256),
                _ => HEAP + (r2 >> 8) % (1 << 24),
            };
            ptr[t] = addr.wrapping_add(size as u64);
            if k < 10 {
                s.store(tid, addr, size, i);
            } else if k < 12 {
                s.ntstore(tid, addr, size, i);
            } else {
                s.ok(tid, E::Load { addr, size });
            }
        } else if k < 22 {
            let line = (if r2 & 3 != 0 { ptr[t].wrapping_sub(1) } else { HEAP + (r2 >> 2) % (1 << 24) }) & !63;
            s.at(tid, E::Flush { kind: FLUSHES[((r2 >> 30) % 3) as usize], line }, ((r >> 40) % 20) as u32, OK);
        } else if k < 26 {
            s.at(tid, E::Fence { kind: FENCES[(r2 % 3) as usize] }, ((r >> 40) % 20) as u32, OK);
        } else if k == 26 {
            s.ok(tid, E::OpBegin { op: op_kind(ops[(r2 % 11) as usize]), arg: r2 >> 8 });
        } else if k == 27 {
            s.ok(tid, E::OpEnd { op: op_kind(ops[(r2 % 11) as usize]), result: r2 >> 8 });
        } else if k == 28 {
            s.ok(tid, E::Marker { id: r2 % 1000, label: text[((r2 >> 10) % 3) as usize].into() });
        } else if k == 29 {
            s.ok(
                tid,
                E::RegionAdd {
                    id: r2 % 64,
                    category: CATEGORIES[((r2 >> 6) % 4) as usize],
                    base: HEAP + ((r2 >> 8) % 4096) * 4096,
                    len: 4096 * (1 + (r2 >> 20) % 16),
                    name: text[((r2 >> 2) % 3) as usize].into(),
                },
            );
        } else if k == 30 {
            s.ok(tid, E::RegionRemove { id: r2 % 64 });
        } else if r2 & 1 != 0 {
            s.ok(tid, E::ThreadStart);
        } else {
            s.ok(tid, E::ThreadEnd);
        }
    }
}

/// The calls of test_writer.c's built-in sequence (`emit_builtin`).
fn builtin(values: bool) -> Vec<Call> {
    let mut s = Seq { values, calls: Vec::new() };
    emit_fixed(&mut s);
    emit_random(&mut s, 20000);
    s.ok(15, OwnedEvent::ThreadEnd);
    s.ok(3, OwnedEvent::ThreadEnd);
    s.ok(0, OwnedEvent::ThreadEnd);
    s.calls
}

/// The events a reader must find after `calls`: the accepted ones, without
/// values unless the trace records them.
fn accepted(calls: &[Call], values: bool) -> Vec<(u32, OwnedEvent)> {
    let strip = |ev: &OwnedEvent| match ev {
        OwnedEvent::Store { addr, size, .. } if !values => OwnedEvent::Store { addr: *addr, size: *size, value: None },
        OwnedEvent::NtStore { addr, size, .. } if !values => {
            OwnedEvent::NtStore { addr: *addr, size: *size, value: None }
        }
        ev => ev.clone(),
    };
    calls.iter().filter(|c| c.status == OK && c.define.is_none()).map(|c| (c.tid, strip(&c.ev))).collect()
}

/// A header with every field set.
fn test_header(values: bool) -> TraceHeader {
    let mut params = serde_json::Map::new();
    params.insert("stripes".into(), 6.into());
    let mut extra = serde_json::Map::new();
    extra.insert("writer".into(), "pmt_writer.h".into());
    TraceHeader {
        pmsim_version: "0.1.0".into(),
        tracer: Tracer::Valgrind,
        allocator: Component { name: "nvalloc".into(), variant: "log".into(), params },
        workload: Component { name: "threadtest".into(), ..Component::default() },
        threads: 4,
        flush_insn: "clwb".into(),
        heap: HeapInfo { path: "/dev/shm/x.heap".into(), base: HEAP, size: 64 << 20 },
        regions: vec![Region { id: 0, name: "heap header".into(), category: Category::Meta, base: HEAP, len: 4096 }],
        values,
        extra,
    }
}

/// The C status the Rust writer's answer corresponds to.
fn status(r: io::Result<()>) -> i32 {
    let Err(e) = r else { return OK };
    match e.get_ref().and_then(|e| e.downcast_ref::<EncodeError>()) {
        Some(EncodeError::TidTooLarge(_)) => ERR_TID,
        Some(EncodeError::ValueMismatch { .. }) => ERR_VALUE,
        Some(EncodeError::UnalignedFlush(_)) => ERR_UNALIGNED,
        Some(EncodeError::ReservedOpCode(_)) => ERR_OP_CODE,
        None if e.to_string().contains("larger than a block") => ERR_TOO_BIG,
        _ => panic!("unexpected error from the Rust writer: {e}"),
    }
}

/// What the Rust writer writes for `calls`, and the status of each call.
fn rust_trace(header: &TraceHeader, values: bool, block_size: usize, calls: &[Call]) -> (Vec<u8>, Vec<i32>) {
    let opts = WriterOptions { values, zstd_level: None, block_size };
    let mut w = TraceWriter::new(Vec::new(), header, &opts).unwrap();
    let statuses = calls
        .iter()
        .map(|c| match &c.define {
            Some(site) => status(w.define_site(site)),
            None => status(w.write_at(c.tid, c.site, &c.ev.as_event())),
        })
        .collect();
    (w.finish().unwrap().0, statuses)
}

fn assert_same_bytes(c: &[u8], rust: &[u8]) {
    if c != rust {
        let at = c.iter().zip(rust).position(|(a, b)| a != b).unwrap_or(c.len().min(rust.len()));
        panic!(
            "the C trace ({} bytes) differs from the Rust writer's ({} bytes), first at byte {at}",
            c.len(),
            rust.len()
        );
    }
}

/// Reads the trace at `path` and checks that it holds exactly `expected`, in
/// order, with consecutive indices; returns its header and totals.
fn check_events(path: &Path, expected: &[(u32, OwnedEvent)]) -> (TraceHeader, TraceTotals) {
    let mut r = TraceReader::open(path).unwrap_or_else(|e| panic!("{e}"));
    let header = r.header().clone();
    let mut n = 0usize;
    let totals = r
        .for_each(|rec| {
            assert_eq!(rec.index, n as u64);
            let (tid, ev) = expected.get(n).unwrap_or_else(|| panic!("event {n} is one too many: {rec:?}"));
            assert!(rec.tid == *tid && rec.event == ev.as_event(), "event {n}: read {rec:?}, wrote {tid}: {ev:?}");
            n += 1;
        })
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(n, expected.len(), "events missing from the trace");
    assert_eq!(totals.events, expected.len() as u64);
    assert_eq!(totals.bytes, fs::metadata(path).unwrap().len());
    (header, totals)
}

fn mode(values: bool) -> &'static str {
    if values {
        "values"
    } else {
        "novalues"
    }
}

/// The built-in sequence: read back exactly, and byte-identical to the Rust writer's.
fn builtin_trace(values: bool) {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path());
    let header = test_header(values);
    let header_path = dir.path().join("header.json");
    fs::write(&header_path, serde_json::to_vec(&header).unwrap()).unwrap();
    let out = dir.path().join("c.pmt");
    let stdout = run(Command::new(&exe).arg(&out).arg(mode(values)).arg(&header_path)).stdout;

    let calls = builtin(values);
    let (read_header, totals) = check_events(&out, &accepted(&calls, values));
    assert_eq!(read_header, header);
    assert!(totals.blocks >= 10, "only {} blocks: the test should cross many", totals.blocks);
    assert_eq!(
        String::from_utf8(stdout).unwrap(),
        format!("events {} blocks {} bytes {}\n", totals.events, totals.blocks, totals.bytes),
        "the C writer's stats"
    );

    let (rust, statuses) = rust_trace(&header, values, 4096, &calls);
    for (c, s) in calls.iter().zip(&statuses) {
        assert_eq!(*s, c.status, "the Rust writer's status for {c:?}");
    }
    assert_same_bytes(&fs::read(&out).unwrap(), &rust);
}

#[test]
fn builtin_sequence_without_values() {
    builtin_trace(false);
}

#[test]
fn builtin_sequence_with_values() {
    builtin_trace(true);
}

/// The header test_writer.c carries, and the empty header written as `{}`.
#[test]
fn headers_written_by_c() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path());
    let out = dir.path().join("own.pmt");
    run(Command::new(&exe).arg(&out).arg("novalues"));
    let (h, _) = check_events(&out, &accepted(&builtin(false), false));
    assert_eq!(h.tracer, Tracer::Valgrind);
    assert_eq!((h.threads, h.flush_insn.as_str(), h.values), (4, "clwb", false));
    assert_eq!(h.extra.get("writer").and_then(|v| v.as_str()), Some("pmt_writer.h"));

    let out = dir.path().join("empty.pmt");
    run(Command::new(&exe).arg(&out).arg("values").arg("-"));
    let (h, _) = check_events(&out, &accepted(&builtin(true), true));
    assert_eq!(h, TraceHeader { values: true, ..TraceHeader::default() });
}

/// The header compiles on its own with strict warnings, freestanding; the
/// test program's writer code links with no library at all; and the header
/// is valid C++ (Pin tools are C++).
#[test]
fn writer_needs_no_libc() {
    let dir = tempfile::tempdir().unwrap();
    let header = c_dir().join("pmt_writer.h");
    let strict = ["-Wconversion", "-Wsign-conversion", "-Wshadow"];
    run(Command::new(compiler())
        .args(CFLAGS)
        .args(strict)
        .args(["-ffreestanding", "-DPMT_NO_STDIO", "-c", "-x", "c"])
        .arg(&header)
        .arg("-o")
        .arg(dir.path().join("freestanding.o")));
    run(Command::new(compiler())
        .args(CFLAGS)
        .args(strict)
        .args(["-c", "-x", "c"])
        .arg(&header)
        .arg("-o")
        .arg(dir.path().join("hosted.o")));
    if cfg!(target_os = "linux") {
        // A shared object that may leave no symbol undefined: any call into
        // libc (or a stack protector needing it) fails the link.
        for opt in ["-O0", "-O2"] {
            run(Command::new(compiler())
                .args(CFLAGS)
                .arg(opt)
                .args(["-ffreestanding", "-nostdlib", "-fno-stack-protector", "-fPIC", "-shared"])
                .args(["-Wl,--no-undefined", "-DPMT_NO_STDIO", "-DPMT_TEST_NO_MAIN"])
                .arg(c_dir().join("test_writer.c"))
                .arg("-o")
                .arg(dir.path().join(format!("freestanding{opt}.so"))));
        }
    }
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".to_string());
    if Command::new(&cxx).arg("--version").output().is_ok_and(|o| o.status.success()) {
        run(Command::new(&cxx)
            .args(["-std=c++11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-x", "c++"])
            .arg(&header));
    } else {
        eprintln!("no C++ compiler ({cxx}): the C++ check is skipped");
    }
}

/// A replay script for test_writer.c (format at its `run_replay`).
fn script(calls: &[Call]) -> Vec<u8> {
    use OwnedEvent as E;
    let mut s = Vec::new();
    for c in calls {
        let def;
        let (call, a, b, x, y, data): (u8, u64, u64, u64, u64, Option<&[u8]>) = match (&c.define, &c.ev) {
            (Some(site), _) => {
                def = [site.file.as_bytes(), b"\0", site.function.as_bytes()].concat();
                (12, site.id as u64, site.addr, site.line as u64, site.column as u64, Some(&def[..]))
            }
            (None, ev) => match ev {
                E::Store { addr, size, value } => (0, *addr, *size as u64, 0, 0, value.as_deref()),
                E::NtStore { addr, size, value } => (1, *addr, *size as u64, 0, 0, value.as_deref()),
                E::Load { addr, size } => (2, *addr, *size as u64, 0, 0, None),
                E::Flush { kind, line } => (3, *line, *kind as u64, c.site as u64, 0, None),
                E::Fence { kind } => (4, 0, *kind as u64, c.site as u64, 0, None),
                E::ThreadStart => (5, 0, 0, 0, 0, None),
                E::ThreadEnd => (6, 0, 0, 0, 0, None),
                E::RegionAdd { id, category, base, len, name } => {
                    (7, *id, *category as u64, *base, *len, Some(name.as_bytes()))
                }
                E::RegionRemove { id } => (8, *id, 0, 0, 0, None),
                E::OpBegin { op, arg } => (9, op_code(*op), *arg, 0, 0, None),
                E::OpEnd { op, result } => (10, op_code(*op), *result, 0, 0, None),
                E::Marker { id, label } => (11, *id, 0, 0, 0, Some(label.as_bytes())),
            },
        };
        s.push(call);
        s.extend_from_slice(&c.tid.to_le_bytes());
        for v in [a, b, x, y] {
            s.extend_from_slice(&v.to_le_bytes());
        }
        s.extend_from_slice(&data.map_or(u32::MAX, |d| d.len() as u32).to_le_bytes());
        s.extend_from_slice(data.unwrap_or_default());
    }
    s
}

/// Replays `calls` through the C writer and the Rust writer: same statuses,
/// same bytes, and the reader finds the accepted events. Returns the statuses.
fn replay(exe: &Path, dir: &Path, values: bool, block_size: usize, calls: &[Call]) -> Vec<i32> {
    let header = test_header(values);
    let header_path = dir.join("header.json");
    fs::write(&header_path, serde_json::to_vec(&header).unwrap()).unwrap();
    let script_path = dir.join("script.bin");
    fs::write(&script_path, script(calls)).unwrap();
    let out = dir.join("replay.pmt");
    let stdout = run(Command::new(exe)
        .arg(&out)
        .arg("replay")
        .arg(&script_path)
        .arg(&header_path)
        .arg(block_size.to_string())
        .arg(mode(values)))
    .stdout;
    let c_statuses: Vec<i32> = String::from_utf8(stdout).unwrap().lines().map(|l| l.parse().unwrap()).collect();
    let (rust, statuses) = rust_trace(&header, values, block_size, calls);
    assert_eq!(c_statuses, statuses, "statuses of the C writer (left) and the Rust writer (right)");
    let calls: Vec<Call> = calls.iter().zip(&statuses).map(|(c, &status)| Call { status, ..c.clone() }).collect();
    check_events(&out, &accepted(&calls, values));
    assert_same_bytes(&fs::read(&out).unwrap(), &rust);
    statuses
}

/// Events too large for the block they would end: the block is cut before
/// them, and one too large for any block is refused (after that cut), by both
/// writers alike. Blocks stay within the 16 MiB a reader accepts.
#[test]
fn oversized_events_are_cut_alike() {
    const MIB: u32 = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path());
    let mut s = Seq { values: true, calls: Vec::new() };
    s.store(0, HEAP, 8, 1);
    s.store(0, HEAP + 8, 5 * MIB, 2);
    s.store(0, HEAP, 4 * MIB, 3); // the block reaches 8 MiB: cut after it
    s.store(1, HEAP, 7 * MIB, 4);
    s.store(1, HEAP, 10 * MIB, 5); // 17 MiB would exceed 16: cut before it
    s.store(2, HEAP, 16, 6);
    let too_big = s.value(7, 16 * MIB + 1);
    s.call(2, OwnedEvent::Store { addr: HEAP, size: 16 * MIB + 1, value: too_big }, ERR_TOO_BIG);
    s.store(0, HEAP, 16 * MIB - 16, 8); // just fits an empty block
    s.ok(0, OwnedEvent::Fence { kind: FenceKind::Sfence });
    let statuses = replay(&exe, dir.path(), true, 8 << 20, &s.calls);
    assert_eq!(statuses, s.calls.iter().map(|c| c.status).collect::<Vec<_>>());
}

/// An address relative to the thread's last access, so that runs occur.
#[derive(Clone, Debug)]
enum Addr {
    Next,
    Back(u16),
    At(u64),
}

#[derive(Clone, Debug)]
enum Line {
    /// The line of the thread's last byte.
    Last,
    At(u64),
    Unaligned(u64),
}

#[derive(Clone, Debug)]
enum Gen {
    /// Store, ntstore or load; a store may lack its value.
    Access(u8, Addr, u32, bool),
    Flush(FlushKind, Line),
    Fence(FenceKind),
    Start,
    End,
    RegionAdd(u64, Category, u64, u64, String),
    RegionRemove(u64),
    Op(bool, u64, u64),
    Marker(u64, String),
}

fn gen_strategy() -> impl Strategy<Value = Gen> {
    let addr = prop_oneof![
        3 => Just(Addr::Next),
        1 => (0u16..600).prop_map(Addr::Back),
        1 => (HEAP..HEAP + (1 << 20)).prop_map(Addr::At),
        1 => any::<u64>().prop_map(Addr::At),
    ];
    let size = prop_oneof![
        4 => prop::sample::select(vec![0u32, 1, 2, 3, 4, 8, 16, 24, 32, 64, 65, 100, 128, 1000]),
        1 => any::<u32>(),
    ];
    let line = prop_oneof![
        3 => Just(Line::Last),
        2 => (HEAP..HEAP + (1 << 20)).prop_map(|l| Line::At(l & !63)),
        1 => any::<u64>().prop_map(|l| Line::At(l & !63)),
        1 => any::<u64>().prop_map(|l| Line::Unaligned(l | 1)),
    ];
    let op = prop_oneof![0u64..8, 8u64..16, 16u64..1000, any::<u64>()];
    prop_oneof![
        12 => (0u8..3, addr, size, prop::bool::weighted(0.05)).prop_map(|(k, a, s, m)| Gen::Access(k, a, s, m)),
        5 => (prop::sample::select(FLUSHES.to_vec()), line).prop_map(|(k, l)| Gen::Flush(k, l)),
        2 => prop::sample::select(FENCES.to_vec()).prop_map(Gen::Fence),
        1 => Just(Gen::Start),
        1 => Just(Gen::End),
        1 => (any::<u64>(), prop::sample::select(CATEGORIES.to_vec()), any::<u64>(), any::<u64>(), "\\PC{0,12}")
            .prop_map(|(i, c, b, l, n)| Gen::RegionAdd(i, c, b, l, n)),
        1 => (0u64..300).prop_map(Gen::RegionRemove),
        2 => (any::<bool>(), op, any::<u64>()).prop_map(|(b, o, a)| Gen::Op(b, o, a)),
        1 => (any::<u64>(), "\\PC{0,12}").prop_map(|(i, l)| Gen::Marker(i, l)),
    ]
}

fn tid_strategy() -> impl Strategy<Value = u32> {
    prop_oneof![
        6 => 0u32..3,
        3 => 13u32..18,
        1 => 0u32..MAX_THREADS,
        1 => Just(MAX_THREADS - 1),
        1 => Just(70000u32),
    ]
}

/// Turns generated calls into events, following each thread's last access.
fn to_calls(gens: &[(u32, Gen)], values: bool) -> Vec<Call> {
    use OwnedEvent as E;
    let mut next: HashMap<u32, u64> = HashMap::new();
    let mut key = 0u64;
    gens.iter()
        .map(|(tid, g)| {
            let tid = *tid;
            let cursor = next.entry(tid).or_insert(HEAP);
            let ev = match g {
                Gen::Access(kind, addr, size, missing) => {
                    let addr = match addr {
                        Addr::Next => *cursor,
                        Addr::Back(d) => cursor.wrapping_sub(*d as u64),
                        Addr::At(a) => *a,
                    };
                    // Store sizes stay small: their values go through the script.
                    let size = if *kind < 2 && *size > 2000 { size % 2000 } else { *size };
                    *cursor = addr.wrapping_add(size as u64);
                    key += 1;
                    let value = (*kind < 2 && values && !missing).then(|| fill(key, size));
                    match kind {
                        0 => E::Store { addr, size, value },
                        1 => E::NtStore { addr, size, value },
                        _ => E::Load { addr, size },
                    }
                }
                Gen::Flush(kind, line) => {
                    let line = match line {
                        Line::Last => cursor.wrapping_sub(1) & !63,
                        Line::At(l) | Line::Unaligned(l) => *l,
                    };
                    E::Flush { kind: *kind, line }
                }
                Gen::Fence(kind) => E::Fence { kind: *kind },
                Gen::Start => E::ThreadStart,
                Gen::End => E::ThreadEnd,
                Gen::RegionAdd(id, category, base, len, name) => {
                    E::RegionAdd { id: *id, category: *category, base: *base, len: *len, name: name.clone() }
                }
                Gen::RegionRemove(id) => E::RegionRemove { id: *id },
                Gen::Op(true, op, arg) => E::OpBegin { op: op_kind(*op), arg: *arg },
                Gen::Op(false, op, result) => E::OpEnd { op: op_kind(*op), result: *result },
                Gen::Marker(id, label) => E::Marker { id: *id, label: label.clone() },
            };
            // The status is whatever the Rust writer says; `replay` compares.
            Call { tid, ev, status: OK, site: 0, define: None }
        })
        .collect()
}

/// Random call sequences, block sizes and value modes: the C writer answers
/// every call as the Rust writer does and writes the same bytes.
#[test]
fn random_calls_match_the_rust_writer() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path());
    let mut runner = TestRunner::new(Config { cases: 64, failure_persistence: None, ..Config::default() });
    let strategy = (prop::collection::vec((tid_strategy(), gen_strategy()), 0..400), any::<bool>(), 1usize..700);
    runner
        .run(&strategy, |(gens, values, block_size)| {
            replay(&exe, dir.path(), values, block_size, &to_calls(&gens, values));
            Ok(())
        })
        .unwrap();
}
