//! Helpers the model's integration tests share: repeatable randomness,
//! scratch directories on tmpfs, opening heaps that a freshly spawned victim
//! may briefly hold locked, and the SIGKILL harness of the crash tests (the
//! test binary re-runs itself as the victim, which is killed at a random
//! point).

#![allow(dead_code)]

use pmsim_model::{Heap, HeapErrorKind};
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

/// A scratch directory in memory (`/dev/shm`) where there is one.
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

/// One victim to kill: this test binary running test `role` alone, with
/// `env` set to `value`; it prints `ready` once its heap is open.
pub struct Victim<'a> {
    pub role: &'a str,
    pub env: &'a str,
    pub value: String,
    pub ready: &'a str,
}

/// Runs the victim and kills it with SIGKILL: on odd `round`s at a random
/// time (up to 30 ms) after it said it is ready, on even ones at a random
/// time (up to 60 ms) from its start, so that kills also land in its
/// recovery. Panics (naming `what`) if the victim ends by itself.
pub fn kill_victim(v: &Victim, round: u64, r: &mut Rng, what: &str) {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(&exe)
        .args(["--exact", v.role, "--nocapture", "--test-threads=1"])
        .env(v.env, &v.value)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if round % 2 == 1 {
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = lines.by_ref().map_while(Result::ok).any(|l| l.contains(v.ready));
        assert!(ready, "{what}: the victim ended before it was ready: {:?}", child.wait_with_output());
        std::thread::sleep(Duration::from_micros(r.below(30_000)));
    } else {
        std::thread::sleep(Duration::from_micros(r.below(60_000)));
    }
    if let Some(status) = child.try_wait().unwrap() {
        let out = child.wait_with_output().unwrap();
        panic!("{what}: the victim exited by itself ({status}): {}", String::from_utf8_lossy(&out.stderr));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}
