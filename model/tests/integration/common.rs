//! Helpers shared by the model's integration tests: repeatable randomness,
//! scratch directories in memory, and the victim process of SIGKILL tests
//! (the test binary re-runs itself with one test selected and an
//! environment variable that tells that test to play the victim).

#![allow(dead_code)] // each test binary uses a part

use pmsim_model::mech::mark::mark_with;
use pmsim_model::{AllocThread, Heap, HeapErrorKind};
use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A tiny xorshift64* generator: tests need repeatable randomness, not quality.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A temporary directory under `/dev/shm` (memory, like a DAX mount) when there is one.
pub fn tmpdir() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

/// Opens the heap file, retrying for a while if it is locked: while a
/// SIGKILL test spawns a victim, the child briefly holds copies of this
/// process's descriptors (until its exec closes them), and with them the
/// flock of any heap another test has open at that moment.
pub fn open_heap(path: &Path) -> Heap {
    retry_locked(|| Heap::open(path))
}

/// `f`, retried while it fails because the heap is locked (see [`open_heap`]).
pub fn retry_locked(f: impl Fn() -> Result<Heap, pmsim_model::HeapError>) -> Heap {
    let start = Instant::now();
    loop {
        match f() {
            Err(e) if e.kind == HeapErrorKind::Locked && start.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(2))
            }
            r => return r.unwrap(),
        }
    }
}

/// A victim: the test `test` of this binary, run with `env=value`, which
/// prints `ready` once its heap is open and then works until it is killed.
pub struct Victim<'a> {
    /// The victim test's full name in this binary (`MODULE::NAME`).
    pub test: &'a str,
    pub env: &'a str,
    pub ready: &'a str,
}

impl Victim<'_> {
    /// Starts the victim and SIGKILLs it at a random point: for even
    /// `round`s at a random time from the start (its recovery included), for
    /// odd ones at a random time after it said it was ready. Returns once it
    /// is dead.
    ///
    /// # Panics
    /// If the victim ends by itself (it failed or never got ready).
    pub fn kill_at_random_point(&self, value: &str, round: u64, r: &mut Rng) {
        let exe = std::env::current_exe().unwrap();
        let mut child = Command::new(&exe)
            .args(["--exact", self.test, "--nocapture", "--test-threads=1"])
            .env(self.env, value)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if round % 2 == 1 {
            let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
            let ready = lines.by_ref().map_while(Result::ok).any(|l| l.contains(self.ready));
            assert!(ready, "{value}: the victim ended before it was ready: {:?}", child.wait_with_output());
            std::thread::sleep(Duration::from_micros(r.below(30_000)));
        } else {
            std::thread::sleep(Duration::from_micros(r.below(60_000)));
        }
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            panic!("{value}: the victim exited by itself ({status}): {}", String::from_utf8_lossy(&out.stderr));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        // The victim's scratch directory is left as a killed pmsim's is;
        // removed as the next pmsim command would remove it.
        pmsim_traces::owned::remove_stale_scratch();
    }

    /// Starts the victim and waits until it is ready, then SIGKILLs it.
    pub fn kill_when_ready(&self, value: &str) {
        let mut r = Rng::new(1);
        self.kill_at_random_point(value, 1, &mut r);
    }
}

// ----- self-checking objects ---------------------------------------------------------

pub const OBJ_HEADER: u64 = 24;
/// Bytes at each end of an object that carry data: large objects are only
/// written and checked there, so the tests spend their time in the allocator.
pub const OBJ_ENDS: u64 = 256;

/// The byte ranges of an object of `len` bytes that hold payload.
pub fn payload_ranges(len: u64) -> Vec<(u64, u64)> {
    if len <= OBJ_HEADER + 2 * OBJ_ENDS {
        vec![(OBJ_HEADER, len)]
    } else {
        vec![(OBJ_HEADER, OBJ_HEADER + OBJ_ENDS), (len - OBJ_ENDS, len)]
    }
}

pub fn checksum(len: u64, seed: u64, payload: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ len ^ seed.rotate_left(17);
    for &b in payload {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h
}

pub fn payload(len: u64, seed: u64) -> Vec<u8> {
    let mut r = Rng::new(seed);
    let mut v = Vec::with_capacity(len as usize);
    while (v.len() as u64) < len {
        v.extend_from_slice(&r.next().to_le_bytes());
    }
    v.truncate(len as usize);
    v
}

/// Writes an object of `len` bytes (header + payload) at `off` and persists it.
pub fn write_obj(t: &mut impl AllocThread, off: u64, len: u64, seed: u64) {
    let ranges = payload_ranges(len);
    let p = payload(ranges.iter().map(|(a, b)| b - a).sum(), seed);
    let mut header = Vec::with_capacity(OBJ_HEADER as usize);
    header.extend_from_slice(&len.to_le_bytes());
    header.extend_from_slice(&seed.to_le_bytes());
    header.extend_from_slice(&checksum(len, seed, &p).to_le_bytes());
    t.write(off, &header);
    let mut at = 0;
    for (a, b) in ranges {
        t.write(off + a, &p[at..at + (b - a) as usize]);
        t.persist(off + a, b - a);
        at += (b - a) as usize;
    }
    t.persist(off, OBJ_HEADER);
}

/// The object at `off` if its checksum holds: its length.
pub fn check_obj(t: &impl AllocThread, off: u64, limit: u64) -> Result<u64, String> {
    let len = t.read_u64(off);
    let seed = t.read_u64(off + 8);
    let sum = t.read_u64(off + 16);
    if !(OBJ_HEADER..=limit).contains(&len) {
        return Err(format!("object {off:#x}: length {len} out of range (usable {limit})"));
    }
    let mut p = Vec::new();
    for (a, b) in payload_ranges(len) {
        let mut buf = vec![0u8; (b - a) as usize];
        t.read(off + a, &mut buf);
        p.extend_from_slice(&buf);
    }
    if checksum(len, seed, &p) != sum {
        return Err(format!("object {off:#x} of {len} bytes: bad checksum"));
    }
    Ok(len)
}

/// A mixed request size: mostly small, some large, rarely huge (> 2 MiB).
pub fn mixed_size(r: &mut Rng, huge: bool) -> u64 {
    match r.below(100) {
        0..=74 => OBJ_HEADER + r.below(1024),
        75..=89 => OBJ_HEADER + r.below(14 << 10),
        90..=98 => (16 << 10) + r.below(240 << 10),
        _ if huge => (2 << 20) + r.below(2 << 20),
        _ => (16 << 10) + r.below(100 << 10),
    }
}

/// Checks that no two allocations overlap.
pub fn assert_disjoint(allocs: &[(u64, u64)]) {
    for w in allocs.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "allocations {:#x}+{:#x} and {:#x} overlap", w[0].0, w[0].1, w[1].0);
    }
}

/// The allocations reachable from `from` by following every aligned word of
/// every reached allocation (the whole usable size: stale bytes included),
/// with the recovery GCs' own traversal ([`mark_with`]) over the live
/// allocations as the test knows them.
pub fn conservatively_reachable(
    t: &impl AllocThread,
    allocs: &[(u64, u64)],
    from: impl Iterator<Item = u64>,
) -> HashSet<u64> {
    let size: BTreeMap<u64, u64> = allocs.iter().copied().collect();
    let mut seen = HashSet::new();
    mark_with(|off, buf| t.read(off, buf), from, |w| size.get(&w).copied().filter(|_| seen.insert(w)));
    seen
}

/// Every 8-byte word of the first `size` heap bytes that points into one of
/// A word naming a target: its address, its value and the allocation
/// holding it, if any.
pub type Naming = (u64, u64, Option<(u64, u64)>);

/// `targets` (`(offset, length)`): its address, its value and the
/// allocation holding it, if any. For a leak's failure message: what could
/// have kept the block.
pub fn words_naming(t: &impl AllocThread, size: u64, targets: &[(u64, u64)], allocs: &[(u64, u64)]) -> Vec<Naming> {
    let mut hits = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < size {
        let n = (size - at).min(buf.len() as u64) as usize;
        t.read(at, &mut buf[..n]);
        for (i, w) in buf[..n].chunks_exact(8).enumerate() {
            let v = u64::from_le_bytes(w.try_into().unwrap());
            if targets.iter().any(|&(o, l)| v >= o && v < o + l) {
                let a = at + 8 * i as u64;
                hits.push((a, v, allocs.iter().find(|&&(o, l)| a >= o && a < o + l).copied()));
            }
        }
        at += n as u64;
    }
    hits
}

// ----- the victims' root table -------------------------------------------------------

/// Threads of a SIGKILL victim.
pub const CHILD_THREADS: u64 = 2;
/// Object slots per victim thread.
pub const SLOTS: u64 = 48;
/// A victim's root table: per thread SLOTS object slots, then one pending
/// slot per thread (where an allocation is published before it is linked).
pub const TABLE_BYTES: u64 = 8 * (CHILD_THREADS * SLOTS + CHILD_THREADS);

/// Object slot `i` of `thread` in the table at `table`.
pub fn slot(table: u64, thread: u64, i: u64) -> u64 {
    table + 8 * (thread * SLOTS + i)
}

/// The pending slot of `thread` in the table at `table`.
pub fn pending(table: u64, thread: u64) -> u64 {
    table + 8 * (CHILD_THREADS * SLOTS + thread)
}
