//! The shared driver: threads, barriers, operation counts, footprint samples
//! and the self-checks every workload uses.
//!
//! A workload gets a [`Shared`] (the allocator and the run's counters) and
//! makes a [`Worker`] per thread: the worker wraps the allocator's thread
//! handle so that every allocator call is counted, its result checked and the
//! footprint sampled without the workload having to remember. Failures are
//! values ([`WorkloadError`]), never silent: the first one stops every other
//! thread (at its next barrier, queue wait or op-count flush) and is what the
//! run returns.

use super::cpu::{self, Clock, CpuProfile, Profiler};
use super::rng::{mix, Rng};
use super::series::{Every, Series};
use super::WorkloadError;
use crate::alloc::{AllocThread, Allocator, Footprint, SlabUtilization};
use crate::pmtrace;
use serde::Serialize;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How far a run is, for a progress display polled from another thread.
#[derive(Debug, Default)]
pub struct Progress {
    done: AtomicU64,
    total: AtomicU64,
    phase: Mutex<String>,
}

impl Progress {
    /// Allocator operations done so far (updated every few thousand operations).
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// The operations the run is expected to do (an estimate; 0 when unknown,
    /// e.g. for time-bounded runs).
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// What the run is doing now (workload and phase).
    pub fn phase(&self) -> String {
        self.phase.lock().unwrap().clone()
    }

    pub(crate) fn set_total(&self, n: u64) {
        self.total.store(n, Ordering::Relaxed);
    }

    pub(crate) fn set_phase(&self, s: impl Into<String>) {
        *self.phase.lock().unwrap() = s.into();
    }
}

/// The state of the heap at the workload's "working set" point (where it
/// holds the data it measures, before its teardown frees everything): the
/// slab breakdown of the NVAlloc paper's Fig. 15b is taken here.
#[derive(Clone, Debug, Serialize)]
pub struct Snapshot {
    /// Where in the workload it was taken.
    pub at: String,
    pub footprint: Footprint,
    pub slabs: Option<SlabUtilization>,
}

/// A point of the run: when, and how many operations were done by then.
pub type Mark = (Instant, u64);

/// Operations a worker batches before adding them to the shared count; also
/// how often it samples the footprint and looks for a failure elsewhere.
const FLUSH_OPS: u64 = 4096;

/// Words in the anchor directory shared by all threads (global structures).
pub const GLOBAL_ANCHORS: usize = 16;
/// Words of the anchor directory per thread.
pub const THREAD_ANCHORS: usize = 8;

/// A barrier that gives up when the run has failed, so a thread whose peer
/// died never waits forever.
struct Barrier {
    n: u32,
    state: Mutex<(u32, u64)>,
    cv: Condvar,
}

impl Barrier {
    fn new(n: u32) -> Barrier {
        Barrier { n, state: Mutex::new((0, 0)), cv: Condvar::new() }
    }

    /// Waits for all `n` threads; `Ok(true)` for exactly one of them (the
    /// last to arrive), which may do the work of the whole group.
    fn wait(&self, abort: &AtomicBool) -> Result<bool, WorkloadError> {
        let mut g = self.state.lock().unwrap();
        let gen = g.1;
        g.0 += 1;
        if g.0 == self.n {
            g.0 = 0;
            g.1 += 1;
            self.cv.notify_all();
            return Ok(true);
        }
        while g.1 == gen {
            if abort.load(Ordering::Relaxed) {
                return Err(WorkloadError::Aborted);
            }
            // The timeout is only a safety net for an abort raised while
            // nobody notifies; normal wake-ups come from the last arrival.
            g = self.cv.wait_timeout(g, Duration::from_millis(20)).unwrap().0;
        }
        Ok(false)
    }

    fn wake(&self) {
        let _g = self.state.lock().unwrap();
        self.cv.notify_all();
    }
}

/// Everything the threads of one run share.
pub struct Shared<'a, A: Allocator> {
    pub alloc: &'a Arc<A>,
    /// The workload's name, for error messages.
    pub workload: &'a str,
    pub threads: u32,
    pub seed: u64,
    /// Bytes of one destination slot for `malloc_to` ([`dest_stride`]).
    pub stride: u64,
    progress: &'a Progress,
    abort: AtomicBool,
    error: Mutex<Option<WorkloadError>>,
    barrier: Barrier,
    /// Where the workers of [`Shared::parallel`] wait for each other before
    /// their OS threads end.
    exit: Barrier,
    ops: AtomicU64,
    peak_live: AtomicU64,
    peak_mapped: AtomicU64,
    /// Start of the measured phase.
    measure: Mutex<Option<Mark>>,
    /// End of the measured phase (default: the end of the run).
    measure_end: Mutex<Option<Mark>>,
    snapshot: Mutex<Option<Snapshot>>,
    extra: Mutex<serde_json::Map<String, serde_json::Value>>,
    /// Heap offset of the anchor directory (root slot 0).
    dir: AtomicU64,
    /// The heap's shape every N operations.
    pub(crate) series: Series,
    /// The threads' CPU time, and the CPU profile when the run asks for one
    /// ([`super::cpu`]).
    cpu: Profiler,
    /// Allocator thread handles made by the thread that spawns their
    /// workers ([`Shared::prepare`]), by thread id, until the worker takes it.
    prepared: Mutex<Vec<Option<A::Thread>>>,
}

impl<'a, A: Allocator> Shared<'a, A> {
    pub(crate) fn new(
        alloc: &'a Arc<A>,
        workload: &'a str,
        threads: u32,
        seed: u64,
        progress: &'a Progress,
        every: Every,
        cpu_profile: bool,
    ) -> Self {
        let stride = dest_stride(&alloc.params());
        Shared {
            alloc,
            workload,
            threads,
            seed,
            stride,
            progress,
            abort: AtomicBool::new(false),
            error: Mutex::new(None),
            barrier: Barrier::new(threads),
            exit: Barrier::new(threads),
            ops: AtomicU64::new(0),
            peak_live: AtomicU64::new(0),
            peak_mapped: AtomicU64::new(0),
            measure: Mutex::new(None),
            measure_end: Mutex::new(None),
            snapshot: Mutex::new(None),
            extra: Mutex::new(serde_json::Map::new()),
            dir: AtomicU64::new(0),
            series: Series::new(every, FLUSH_OPS),
            cpu: Profiler::new(cpu_profile),
            prepared: Mutex::new((0..threads).map(|_| None).collect()),
        }
    }

    /// The CPU profile of the workers that have ended (`None` unless the run
    /// asked for one).
    pub fn cpu_profile(&self) -> Option<CpuProfile> {
        self.cpu.profile()
    }

    /// The CPU time of the workers that have ended (waits excluded), seconds.
    pub fn cpu_s(&self) -> f64 {
        self.cpu.cpu_s()
    }

    /// Makes thread `tid`'s allocator handle now, in the thread that is
    /// about to spawn its worker (unless one is waiting already), and hands
    /// its first events to the trace.
    ///
    /// Why: a trace orders threads by when they record, and the contention
    /// replay starts a thread at the virtual time its first event arrives.
    /// On fewer cores than threads, a worker the OS runs late would record
    /// its start late and be replayed after the others, not beside them, by
    /// an amount that changes from run to run. A handle made at spawn
    /// records the start where the program has it.
    pub fn prepare(&self, tid: u32) {
        let mut p = self.prepared.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot @ None) = p.get_mut(tid as usize) {
            let mut t = self.alloc.thread(tid);
            t.idle();
            *slot = Some(t);
        }
    }

    /// A worker (and an allocator thread handle) for thread `tid`: the one
    /// [`Shared::prepare`] made, else a new one.
    pub fn worker(&self, tid: u32) -> Worker<'_, 'a, A> {
        let ready =
            self.prepared.lock().unwrap_or_else(|e| e.into_inner()).get_mut(tid as usize).and_then(Option::take);
        let t = ready.unwrap_or_else(|| self.alloc.thread(tid));
        let cpu = Clock::start(self.cpu.time_ops);
        Worker { tid, t, rng: Rng::new(self.seed, tid as u64), sh: self, pending: 0, cpu: Some(cpu) }
    }

    /// Runs `f` for every thread id `0..threads` on its own OS thread and
    /// returns the first real failure (a panic becomes an error too).
    pub fn parallel<F>(&self, f: F) -> Result<(), WorkloadError>
    where
        F: Fn(u32) -> Result<(), WorkloadError> + Sync,
    {
        for tid in 0..self.threads {
            self.prepare(tid);
        }
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..self.threads)
                .map(|tid| {
                    let f = &f;
                    std::thread::Builder::new()
                        .name(format!("{}-{tid}", self.workload))
                        .spawn_scoped(s, move || {
                            let id = self.cpu.worker(|| reported(|| self.guard(tid, || f(tid))));
                            // No worker's OS thread ends before every worker
                            // is done. An allocator may give what a thread
                            // held back when the thread ends (PMDK returns
                            // its arena to the pool as a thread-local
                            // destructor runs): on fewer cores than
                            // threads, or under the Valgrind tool, which runs
                            // one thread at a time, a worker that ran to its
                            // end before another's first allocation handed
                            // that one its arena, so two pairs of Prod-con
                            // shared one arena's locks, as no machine with a
                            // core per thread would have them, and PMDK's
                            // estimate at 16 threads came out at half its
                            // speed in some runs. The wait is no work of the
                            // run: the worker's events and CPU time end
                            // before it. An aborted run stops waiting.
                            let _ = self.exit.wait(&self.abort);
                            id
                        })
                        .expect("cannot spawn a workload thread")
                })
                .collect();
            for h in handles {
                // `guard` caught panics already; a join error cannot happen.
                joined(h.join());
            }
        });
        // A handle no worker took (a thread that failed first) ends here,
        // not at the end of the run, where it would hold back the replay.
        let unused: Vec<_> =
            self.prepared.lock().unwrap_or_else(|e| e.into_inner()).iter_mut().map(Option::take).collect();
        drop(unused);
        self.take_error()
    }

    /// Runs `f` on this thread (setup and teardown work), with the same
    /// panic-to-error conversion as [`Shared::parallel`].
    pub fn single<R>(
        &self,
        tid: u32,
        f: impl FnOnce(&mut Worker<'_, 'a, A>) -> Result<R, WorkloadError>,
    ) -> Result<R, WorkloadError> {
        let mut out = None;
        self.guard(tid, || {
            let mut w = self.worker(tid);
            out = Some(f(&mut w)?);
            Ok(())
        });
        self.take_error()?;
        Ok(out.expect("set when no error was recorded"))
    }

    /// Runs `f`; records its error or panic and tells every thread to stop.
    pub fn guard(&self, tid: u32, f: impl FnOnce() -> Result<(), WorkloadError>) {
        let r = match catch_unwind(AssertUnwindSafe(f)) {
            Ok(r) => r,
            Err(p) => {
                let msg = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(no message)".into());
                Err(WorkloadError::Panic { workload: self.workload.to_string(), tid, msg })
            }
        };
        if let Err(e) = r {
            self.fail(e);
        }
    }

    /// Records a failure (the first real one wins) and stops the run.
    pub fn fail(&self, e: WorkloadError) {
        {
            let mut g = self.error.lock().unwrap();
            let replace = match &*g {
                None => true,
                Some(WorkloadError::Aborted) => !matches!(e, WorkloadError::Aborted),
                Some(_) => false,
            };
            if replace {
                *g = Some(e);
            }
        }
        self.abort.store(true, Ordering::SeqCst);
        self.barrier.wake();
        self.exit.wake();
    }

    fn take_error(&self) -> Result<(), WorkloadError> {
        match self.error.lock().unwrap().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    pub fn aborted(&self) -> bool {
        self.abort.load(Ordering::Relaxed)
    }

    /// Sets the progress label (the workload and what it is doing).
    pub fn phase(&self, s: &str) {
        self.progress.set_phase(format!("{} {s}", self.workload));
    }

    pub fn set_expected_ops(&self, n: u64) {
        self.progress.set_total(n);
    }

    /// Allocator operations counted so far (workers add theirs in batches).
    pub fn ops(&self) -> u64 {
        self.ops.load(Ordering::Relaxed)
    }

    fn add_ops(&self, n: u64) {
        let total = self.ops.fetch_add(n, Ordering::Relaxed) + n;
        self.progress.done.store(total, Ordering::Relaxed);
    }

    /// Takes a footprint sample towards the peak (and a point of the heap's
    /// shape when one is due).
    pub fn sample(&self) {
        let f = self.alloc.footprint();
        self.peak_live.fetch_max(f.live_bytes, Ordering::Relaxed);
        self.peak_mapped.fetch_max(f.mapped_bytes, Ordering::Relaxed);
        let ops = self.ops();
        if self.series.due(ops) {
            self.series.record(ops, f, self.alloc.slab_utilization(), None);
        }
    }

    /// A point of the heap's shape at the end of a workload phase.
    pub fn mark_phase(&self, phase: &str) {
        self.series.record(self.ops(), self.alloc.footprint(), self.alloc.slab_utilization(), Some(phase));
    }

    /// Peak footprint so far (each field's own maximum over the samples).
    pub fn peak(&self) -> Footprint {
        Footprint {
            live_bytes: self.peak_live.load(Ordering::Relaxed),
            mapped_bytes: self.peak_mapped.load(Ordering::Relaxed),
        }
    }

    /// Records the working-set snapshot (see [`Snapshot`]).
    pub fn snapshot(&self, at: &str) {
        self.sample();
        let s =
            Snapshot { at: at.to_string(), footprint: self.alloc.footprint(), slabs: self.alloc.slab_utilization() };
        *self.snapshot.lock().unwrap() = Some(s);
    }

    /// A workload-specific figure for the report.
    pub fn extra(&self, key: &str, v: impl Into<serde_json::Value>) {
        self.extra.lock().unwrap().insert(key.to_string(), v.into());
    }

    /// Marks the start of the measured phase (after a warm-up): ops/s counts
    /// only what follows. Call it where all threads are stopped (a barrier
    /// leader, or between `parallel` calls), so the count is exact.
    pub fn begin_measure(&self) {
        *self.measure.lock().unwrap() = Some((Instant::now(), self.ops()));
    }

    /// Marks the end of the measured phase (before a teardown that is not
    /// part of the benchmark). Same rule as [`Shared::begin_measure`].
    pub fn end_measure(&self) {
        *self.measure_end.lock().unwrap() = Some((Instant::now(), self.ops()));
    }

    pub fn measured(&self) -> (Option<Mark>, Option<Mark>) {
        (*self.measure.lock().unwrap(), *self.measure_end.lock().unwrap())
    }

    pub(crate) fn take_snapshot(&self) -> Option<Snapshot> {
        self.snapshot.lock().unwrap().take()
    }

    pub(crate) fn take_extra(&self) -> serde_json::Map<String, serde_json::Value> {
        std::mem::take(&mut *self.extra.lock().unwrap())
    }

    pub(crate) fn set_dir(&self, off: u64) {
        self.dir.store(off, Ordering::Relaxed);
    }

    /// Heap offset of the anchor directory.
    pub fn dir_off(&self) -> u64 {
        self.dir.load(Ordering::Relaxed)
    }

    /// Words in the anchor directory.
    pub fn dir_len(threads: u32) -> usize {
        dir_len(threads)
    }
}

/// Words in the anchor directory of a run of `threads` threads.
pub fn dir_len(threads: u32) -> usize {
    GLOBAL_ANCHORS + THREAD_ANCHORS * threads as usize
}

/// Bytes of one destination slot of an allocator with parameters `params`:
/// 8, or what its `dest_bytes` says (16 for PMDK, whose atomic API
/// publishes a 16-byte `PMEMoid`; the offset is the slot's last word).
pub fn dest_stride(params: &crate::alloc::Params) -> u64 {
    params.get("dest_bytes").and_then(|v| v.as_u64()).unwrap_or(8).max(8)
}

/// Anchor index `k` (< [`THREAD_ANCHORS`]) of thread `tid`.
pub fn thread_anchor(tid: u32, k: usize) -> usize {
    assert!(k < THREAD_ANCHORS);
    GLOBAL_ANCHORS + THREAD_ANCHORS * tid as usize + k
}

/// One thread of a workload: the allocator's handle, the thread's random
/// stream, and the counted, checked allocator calls.
pub struct Worker<'s, 'a, A: Allocator> {
    pub tid: u32,
    /// The allocator's thread handle, for reads, writes and persists.
    pub t: A::Thread,
    /// This thread's stream of the run seed.
    pub rng: Rng,
    sh: &'s Shared<'a, A>,
    /// Operations not yet added to the shared count.
    pending: u64,
    /// This thread's CPU accounting (taken by the run's profiler when the
    /// worker ends).
    cpu: Option<Clock>,
}

impl<'s, 'a, A: Allocator> Worker<'s, 'a, A> {
    pub fn shared(&self) -> &'s Shared<'a, A> {
        self.sh
    }

    /// Counts one allocator operation; every [`FLUSH_OPS`] publishes the
    /// count, samples the footprint and stops the thread if the run failed.
    #[inline]
    fn count(&mut self) -> Result<(), WorkloadError> {
        self.pending += 1;
        if self.pending >= FLUSH_OPS {
            self.flush_ops()?;
        }
        Ok(())
    }

    /// Publishes the pending count and samples the footprint.
    pub fn flush_ops(&mut self) -> Result<(), WorkloadError> {
        // pmsim's own bookkeeping is not the workload's CPU work.
        self.pause_cpu();
        self.sh.add_ops(std::mem::take(&mut self.pending));
        self.sh.sample();
        self.resume_cpu();
        if self.sh.aborted() {
            return Err(WorkloadError::Aborted);
        }
        Ok(())
    }

    fn oom(&self, size: u64) -> WorkloadError {
        WorkloadError::OutOfMemory { workload: self.sh.workload.to_string(), tid: self.tid, size }
    }

    /// A check failure of this thread, as an error.
    pub fn check_failed(&self, what: String) -> WorkloadError {
        WorkloadError::Check { workload: self.sh.workload.to_string(), tid: self.tid, what }
    }

    /// `malloc`; running out of heap is an error naming the size.
    #[inline]
    pub fn malloc(&mut self, size: u64) -> Result<u64, WorkloadError> {
        let t0 = self.op_start();
        let off = self.t.malloc(size);
        self.op_end(cpu::MALLOC, t0);
        let off = off.ok_or_else(|| self.oom(size))?;
        self.count()?;
        Ok(off)
    }

    /// `malloc_to`, and a check that `dest` now holds the block's offset.
    #[inline]
    pub fn malloc_to(&mut self, size: u64, dest: u64) -> Result<u64, WorkloadError> {
        let t0 = self.op_start();
        let off = self.t.malloc_to(size, dest);
        self.op_end(cpu::MALLOC, t0);
        let off = off.ok_or_else(|| self.oom(size))?;
        let published = self.t.read_u64(dest);
        if published != off {
            return Err(self.check_failed(format!(
                "malloc_to({size}, dest {dest:#x}) returned {off:#x} but dest holds {published:#x}"
            )));
        }
        self.count()?;
        Ok(off)
    }

    #[inline]
    pub fn free(&mut self, off: u64) -> Result<(), WorkloadError> {
        let t0 = self.op_start();
        self.t.free(off);
        self.op_end(cpu::FREE, t0);
        self.count()
    }

    /// `free_from`, and a check that `dest` was cleared. Where the allocator
    /// leaves `dest` as it is ([`AllocThread::free_from_leaves_dest`]), the
    /// workload clears it itself, as a program using such an API does after
    /// the call (a plain store, not persisted).
    #[inline]
    pub fn free_from(&mut self, dest: u64) -> Result<(), WorkloadError> {
        let before = self.t.read_u64(dest);
        let t0 = self.op_start();
        self.t.free_from(dest);
        self.op_end(cpu::FREE, t0);
        let left = self.t.read_u64(dest);
        if left != 0 {
            if left != before || !self.t.free_from_leaves_dest() {
                return Err(self.check_failed(format!("free_from(dest {dest:#x}) left {left:#x} in dest")));
            }
            self.t.write_u64(dest, 0);
        }
        self.count()
    }

    /// Writes the checksum of object `id` of `size` bytes at `off`: the first
    /// 16 bytes (id, hash of id and size) and the last 8 (another hash), so
    /// a block handed out twice, or overlapping another, or of the wrong size,
    /// fails [`Worker::verify`]. Through [`AllocThread::write`], so a traced
    /// run records these user-data stores. Not persisted: the benchmarks do
    /// not persist their payload (FPTree persists its own).
    #[inline]
    pub fn stamp(&mut self, off: u64, size: u64, id: u64) {
        let (head, tail) = stamp_words(size, id);
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&id.to_le_bytes());
        b[8..].copy_from_slice(&head.to_le_bytes());
        self.t.write(off, &b);
        self.t.write(off + size - 8, &tail.to_le_bytes());
    }

    /// Checks the checksum [`Worker::stamp`] wrote, before the object is freed.
    #[inline]
    pub fn verify(&self, off: u64, size: u64, id: u64) -> Result<(), WorkloadError> {
        let (head, tail) = stamp_words(size, id);
        let mut b = [0u8; 16];
        self.t.read(off, &mut b);
        let mut tb = [0u8; 8];
        self.t.read(off + size - 8, &mut tb);
        let got = (u64::from_le_bytes(b[..8].try_into().unwrap()), u64::from_le_bytes(b[8..].try_into().unwrap()));
        let got_tail = u64::from_le_bytes(tb);
        if got != (id, head) || got_tail != tail {
            return Err(WorkloadError::Corrupt {
                workload: self.sh.workload.to_string(),
                tid: self.tid,
                off,
                size,
                what: format!(
                    "expected object {id:#x} (head {head:#x}, tail {tail:#x}), found id {:#x}, head {:#x}, tail {got_tail:#x}",
                    got.0, got.1
                ),
            });
        }
        Ok(())
    }

    /// Waits for all threads of the run (after handing over buffered trace
    /// events: a blocked thread must not hold back the others' events).
    /// `Ok(true)` for one thread of the group.
    pub fn barrier(&mut self) -> Result<bool, WorkloadError> {
        self.flush_ops()?;
        self.pause_cpu();
        self.t.idle();
        let r = self.sh.barrier.wait(&self.sh.abort);
        self.resume_cpu();
        r
    }

    /// The start of an allocator call, for the CPU profile (0 when none is taken).
    #[inline(always)]
    fn op_start(&self) -> u64 {
        if self.cpu.as_ref().is_some_and(|c| c.time_ops) {
            cpu::ticks()
        } else {
            0
        }
    }

    /// The allocator call of `kind` that began at `t0` returned.
    #[inline(always)]
    fn op_end(&mut self, kind: usize, t0: u64) {
        if let Some(c) = self.cpu.as_mut().filter(|c| c.time_ops) {
            c.op(kind, t0);
        }
    }

    /// The thread waits (for other threads, or on pmsim's bookkeeping): its
    /// time until [`Worker::resume_cpu`] is not the workload's CPU work.
    pub fn pause_cpu(&mut self) {
        if let Some(c) = &mut self.cpu {
            c.pause();
        }
    }

    /// The wait [`Worker::pause_cpu`] began is over.
    pub fn resume_cpu(&mut self) {
        if let Some(c) = &mut self.cpu {
            c.resume();
        }
    }

    /// Writes `off` into anchor `idx` of the directory (durably), so the
    /// structure is reachable from the heap's root as a real persistent
    /// program's would be (matters for GC-style recovery).
    pub fn anchor(&mut self, idx: usize, off: u64) {
        let dir = self.sh.dir.load(Ordering::Relaxed);
        assert!(idx < Shared::<A>::dir_len(self.sh.threads), "anchor {idx} outside the directory");
        self.t.write_u64(dir + 8 * idx as u64, off);
        self.t.persist(dir + 8 * idx as u64, 8);
    }

    /// Zeroes `[off, off + len)` (in 64 KiB writes) without persisting.
    pub fn zero(&mut self, off: u64, len: u64) {
        let z = [0u8; 1 << 16];
        let mut at = 0;
        while at < len {
            let n = (len - at).min(z.len() as u64);
            self.t.write(off + at, &z[..n as usize]);
            at += n;
        }
    }
}

impl<A: Allocator> Drop for Worker<'_, '_, A> {
    fn drop(&mut self) {
        self.sh.add_ops(std::mem::take(&mut self.pending));
        if let Some(c) = self.cpu.take() {
            self.sh.cpu.add(c);
        }
    }
}

/// The two checksum words of object `id` of `size` bytes.
#[inline]
pub(crate) fn stamp_words(size: u64, id: u64) -> (u64, u64) {
    (mix(id ^ size.rotate_left(32)), mix(id.wrapping_add(size.wrapping_mul(0x9E37_79B9))))
}

/// Where a workload keeps the offsets of its live objects, by index: in a
/// persistent array of destination slots (published with `malloc_to`,
/// cleared by `free_from`, as NVAlloc's and PMDK's atomic APIs intend), or in
/// DRAM (plain `malloc` / `free`, as volatile benchmarks do).
///
/// Shared by reference between threads (prod-con hands objects over through
/// it): the DRAM words are atomics, and the workload orders accesses to one
/// index (relaxed here; the hand-over itself is release/acquire).
pub struct Slots {
    len: usize,
    /// Heap offset of the persistent array (0 in DRAM mode).
    base: u64,
    stride: u64,
    anchor: usize,
    dram: Box<[AtomicU64]>,
}

impl Slots {
    /// `len` slots, persistent (an array allocated from the allocator and
    /// anchored at `anchor`) or in DRAM.
    pub fn new<A: Allocator>(
        w: &mut Worker<'_, '_, A>,
        len: usize,
        persistent: bool,
        anchor: usize,
    ) -> Result<Slots, WorkloadError> {
        let stride = w.sh.stride;
        if persistent {
            let bytes = (len as u64 * stride).max(64);
            let base = w.malloc(bytes)?;
            w.zero(base, bytes);
            w.t.persist(base, bytes);
            w.anchor(anchor, base);
            Ok(Slots { len, base, stride, anchor, dram: Box::new([]) })
        } else {
            let dram = (0..len).map(|_| AtomicU64::new(0)).collect();
            Ok(Slots { len, base: 0, stride, anchor, dram })
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn persistent(&self) -> bool {
        self.base != 0
    }

    /// The destination word of slot `i` (the last word of its stride).
    #[inline]
    pub fn dest(&self, i: usize) -> u64 {
        debug_assert!(i < self.len);
        self.base + i as u64 * self.stride + self.stride - 8
    }

    /// Allocates `size` bytes into slot `i` (which must be empty).
    #[inline]
    pub fn alloc<A: Allocator>(&self, w: &mut Worker<'_, '_, A>, i: usize, size: u64) -> Result<u64, WorkloadError> {
        if self.base != 0 {
            w.malloc_to(size, self.dest(i))
        } else {
            let off = w.malloc(size)?;
            self.dram[i].store(off, Ordering::Relaxed);
            Ok(off)
        }
    }

    /// The offset in slot `i` (0 if empty).
    #[inline]
    pub fn get<A: Allocator>(&self, w: &Worker<'_, '_, A>, i: usize) -> u64 {
        if self.base != 0 {
            w.t.read_u64(self.dest(i))
        } else {
            self.dram[i].load(Ordering::Relaxed)
        }
    }

    /// Frees the object in slot `i` and empties the slot.
    #[inline]
    pub fn free<A: Allocator>(&self, w: &mut Worker<'_, '_, A>, i: usize) -> Result<(), WorkloadError> {
        if self.base != 0 {
            w.free_from(self.dest(i))
        } else {
            let off = self.dram[i].swap(0, Ordering::Relaxed);
            w.free(off)
        }
    }

    /// Frees the persistent array (every slot must be empty by now).
    pub fn destroy<A: Allocator>(self, w: &mut Worker<'_, '_, A>) -> Result<(), WorkloadError> {
        if self.base != 0 {
            w.anchor(self.anchor, 0);
            w.free(self.base)?;
        }
        Ok(())
    }
}

/// Runs `f`, the body of a spawned thread, and returns the thread's id in
/// the Valgrind tool's trace (None outside the tool), for [`joined`].
pub(crate) fn reported(f: impl FnOnce()) -> Option<u32> {
    let id = pmtrace::thread_id();
    f();
    id
}

/// Tells the Valgrind tool (if it runs the program) that this thread joined
/// the one whose [`reported`] id the join returned.
pub(crate) fn joined(join: std::thread::Result<Option<u32>>) {
    if let Ok(Some(tid)) = join {
        pmtrace::joined(tid);
    }
}
