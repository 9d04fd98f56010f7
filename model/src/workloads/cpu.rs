//! What a run's work costs the CPU, measured natively: the time inside each
//! kind of allocator operation and the time between them (the workload's
//! own work), per operation.
//!
//! pmsim's estimates of a run on Optane add this to the simulator's persist
//! time: nothing may come out faster on Optane than it runs on DRAM, and an
//! allocator that persists almost nothing is bound by its CPU work. The
//! profile is taken on a native run with flushes off (`FlushInsn::None`;
//! PMDK with `PMEM_NO_FLUSH=1`), so it holds the CPU's work and not the
//! DRAM's answer to the flushes, which the simulator models for Optane.
//! The heap (PMDK's pool) is faulted in before the run
//! ([`crate::fault_in::prefault`]): a first touch of a page costs the kernel a
//! fault of a microsecond or more, which the paper's runs (30 s of Larson,
//! 50 warm-up iterations of DBMStest on a reused heap) pay once per page,
//! while a tiny-scale run of 32–512 KB objects, about 1,300 operations on
//! fresh pages, paid it on nearly every operation: it was up to two thirds
//! of every allocator's CPU time per large allocation, and so hid their
//! differences in persistence.
//!
//! How, on a machine shared with other work: each operation is timed with
//! the time-stamp counter (two reads, their own cost subtracted), and each
//! thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`, which stops while the
//! thread is descheduled) is read when its worker starts and ends, so the
//! time between operations is the thread's CPU time less its operations'.
//! An operation during which the thread was descheduled has wall time that
//! is not its work: the kernel took the core away, or the thread slept on a
//! lock whose holder was descheduled. Such an operation is long (a
//! descheduling lasts a scheduler slice, far above an allocator call), so
//! an operation longer than [`LONG_NS`] asks the kernel whether the thread
//! was switched out since the last look (`getrusage`'s context switches);
//! if it was, its time and the lock hold times within it are left out, and
//! the kind's time is the mean of its undisturbed operations times their
//! count. Scaling every span by the thread's CPU time over its wall time,
//! as pmsim did before, assumed the switches fell anywhere: they fall in
//! the operations that block, and 34 threads of PMDK's Prod-con on one core
//! measured 74–450 ns per `malloc` in five runs that way. Waits (barriers,
//! a consumer's wait for its producer, pmsim's own footprint sampling) are
//! neither: the clock pauses over them.
//! The figures are measurements, so they vary a little from run to run;
//! what they are compared with (native throughput) is measured in the same
//! report.
//!
//! A profile's workers share one core (the one the run starts on): the
//! estimates add to the CPU's work what threads wait for one another (at a
//! traced lock, for a DIMM) from the contention model, so the profile must
//! hold the work alone. Run side by side on a machine with fewer cores than
//! threads, the workers spun at each other's locks and evicted each other's
//! lines, and that landed in the profile: 16 profiles of NVAlloc-LOG's
//! Threadtest at 4 threads on 2 cores measured 165–226 ns per operation
//! (free alone 189–324 ns) where the same runs on one core measured
//! 117–122 ns, as one thread does. The cost left out is that of lines moving
//! between cores, which a 2-core machine could not measure for 16 threads
//! anyway.
//!
//! Every run counts its threads' CPU time (two clock reads per worker and
//! per wait, nothing per operation): a native run's throughput per CPU
//! second ([`super::RunReport::ops_per_cpu_s`]) is what it achieves with a
//! core of its own, however loaded the machine it ran on. Timing each
//! operation is what [`super::RunOptions::cpu_profile`] adds.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// The operation kinds of a profile, as the trace names them: `malloc`
/// (`malloc` and `malloc_to`) and `free` (`free` and `free_from`).
pub const KINDS: [&str; 2] = ["malloc", "free"];
/// Index of `malloc` in [`KINDS`].
pub const MALLOC: usize = 0;
/// Index of `free` in [`KINDS`].
pub const FREE: usize = 1;

pub use crate::arch::ticks;
use crate::mech::lock;

/// The calling thread's CPU time (user and system), nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime fills the timespec it is given.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What `getrusage` says of `who` (`RUSAGE_THREAD`, `RUSAGE_SELF` or
/// `RUSAGE_CHILDREN`); `None` where it cannot tell.
pub fn rusage(who: libc::c_int) -> Option<libc::rusage> {
    // SAFETY: getrusage only writes the struct it is given; all-zero is a valid rusage.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::getrusage(who, &mut u) } == 0).then_some(u)
}

/// The calling thread's minor page faults so far (0 where it cannot tell).
pub fn thread_minor_faults() -> u64 {
    rusage(libc::RUSAGE_THREAD).map_or(0, |u| u.ru_minflt as u64)
}

/// The calling thread's context switches so far, voluntary and not (0 where
/// it cannot tell).
fn thread_switches() -> u64 {
    rusage(libc::RUSAGE_THREAD).map_or(0, |u| (u.ru_nvcsw + u.ru_nivcsw) as u64)
}

/// An operation at least this long is checked for a descheduling (see the
/// module doc): far below a scheduler slice (0.75 ms and more), above what
/// nearly every allocator call takes, so that the check (a system call) is
/// rare.
pub const LONG_NS: f64 = 10_000.0;

/// [`LONG_NS`] in [`ticks`], measured once per process.
fn long_ticks() -> u64 {
    static LONG: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *LONG.get_or_init(|| {
        let (t, i) = (ticks(), Instant::now());
        while i.elapsed().as_micros() < 200 {
            std::hint::spin_loop();
        }
        let per_ns = ticks().wrapping_sub(t) as f64 / i.elapsed().as_nanos().max(1) as f64;
        (LONG_NS * per_ns) as u64
    })
}

/// The core the calling thread runs on (`None` where it cannot tell).
fn current_core() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments; -1 is its error.
    let c = unsafe { libc::sched_getcpu() };
    usize::try_from(c).ok()
}

/// Binds the calling thread to `core` (a profile's workers share one core,
/// see the module doc); where the kernel refuses, the thread runs unbound.
fn bind_to(core: usize) {
    // SAFETY: an all-zero cpu_set_t is the empty set; CPU_SET writes within it
    // for any core below CPU_SETSIZE, which sched_getcpu's answer is.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The cost of one timing of an operation (two counter reads), in ticks:
/// the least of a few tries, as an interrupt can only add to it.
fn timing_overhead() -> u64 {
    (0..256)
        .map(|_| {
            let a = ticks();
            let b = ticks();
            b.wrapping_sub(a)
        })
        .min()
        .unwrap_or(0)
}

/// One thread's accounting while its worker lives.
#[derive(Debug)]
pub(crate) struct Clock {
    /// Whether operations are timed (a CPU profile), not only the thread.
    pub(crate) time_ops: bool,
    cpu0: u64,
    faults0: u64,
    tick0: u64,
    in_op: [u64; 2],
    ops: [u64; 2],
    /// Ticks held in traced locks ([`crate::mech::lock`]) and locks taken,
    /// by the kind of operation they fell in, and the thread's counts when
    /// its latest operation ended.
    in_lock: [u64; 2],
    locks: [u64; 2],
    held_seen: (u64, u64),
    /// Of the above, what fell in operations the thread was descheduled
    /// during (see the module doc): left out of the profile.
    disturbed_ticks: [u64; 2],
    disturbed: [u64; 2],
    disturbed_lock_ticks: [u64; 2],
    /// Operations at least this long are checked, and the thread's context
    /// switches when it last looked.
    long: u64,
    switches_seen: u64,
    /// Wall ticks spent looking (counted neither as an operation's nor as
    /// the work between them).
    check_ticks: u64,
    /// Wall ticks and CPU nanoseconds spent paused (waits, sampling).
    paused_ticks: u64,
    paused_cpu: u64,
    pause_at: Option<(u64, u64)>,
}

impl Clock {
    pub(crate) fn start(time_ops: bool) -> Clock {
        lock::time_held(time_ops);
        // Before the clocks are read: the first call measures the counter's
        // rate, which is not the workload's work.
        let long = if time_ops { long_ticks() } else { u64::MAX };
        let switches_seen = if time_ops { thread_switches() } else { 0 };
        Clock {
            time_ops,
            cpu0: thread_cpu_ns(),
            faults0: thread_minor_faults(),
            tick0: ticks(),
            in_op: [0; 2],
            ops: [0; 2],
            in_lock: [0; 2],
            locks: [0; 2],
            held_seen: lock::held(),
            disturbed_ticks: [0; 2],
            disturbed: [0; 2],
            disturbed_lock_ticks: [0; 2],
            long,
            switches_seen,
            check_ticks: 0,
            paused_ticks: 0,
            paused_cpu: 0,
            pause_at: None,
        }
    }

    /// An operation of `kind` that began at `t0` (a [`ticks`] reading) ended now.
    #[inline(always)]
    pub(crate) fn op(&mut self, kind: usize, t0: u64) {
        let t = ticks();
        let d = t.wrapping_sub(t0);
        self.in_op[kind] += d;
        self.ops[kind] += 1;
        // The locks taken since the previous operation ended were taken in
        // this one (the workloads take no traced lock between operations).
        let (held, n) = lock::held();
        let held_here = held - self.held_seen.0;
        self.in_lock[kind] += held_here;
        self.locks[kind] += n - self.held_seen.1;
        self.held_seen = (held, n);
        if d >= self.long {
            self.check(kind, d, held_here, t);
        }
    }

    /// A long operation: was the thread switched out since it last looked?
    #[cold]
    fn check(&mut self, kind: usize, d: u64, held_here: u64, t: u64) {
        let s = thread_switches();
        if s != self.switches_seen {
            self.switches_seen = s;
            self.disturbed[kind] += 1;
            self.disturbed_ticks[kind] += d;
            self.disturbed_lock_ticks[kind] += held_here;
        }
        self.check_ticks += ticks().wrapping_sub(t);
    }

    /// Stops counting (a wait begins); nested pauses count once.
    pub(crate) fn pause(&mut self) {
        if self.pause_at.is_none() {
            self.pause_at = Some((ticks(), thread_cpu_ns()));
        }
    }

    /// Counts again.
    pub(crate) fn resume(&mut self) {
        if let Some((t, c)) = self.pause_at.take() {
            if ticks().wrapping_sub(t) >= self.long {
                // A long wait may have slept: its switches are not an
                // operation's (looked up inside the pause, so not counted).
                self.switches_seen = thread_switches();
            }
            self.paused_ticks += ticks().wrapping_sub(t);
            self.paused_cpu += thread_cpu_ns().saturating_sub(c);
        }
    }
}

/// The threads' figures, summed as their workers end.
#[derive(Debug, Default)]
struct Acc {
    cpu_ns: f64,
    wall_ns: f64,
    in_op_ns: [f64; 2],
    ops: [u64; 2],
    in_lock_ns: [f64; 2],
    locks: [u64; 2],
    disturbed: [u64; 2],
    faults: u64,
    threads: u32,
}

/// A run's CPU profile as it is being measured: one per run, shared by the
/// workers (see the module doc).
#[derive(Debug)]
pub(crate) struct Profiler {
    /// Whether workers time their operations.
    pub(crate) time_ops: bool,
    /// The core a profile's workers share (see the module doc).
    core: Option<usize>,
    /// The cores parallel workers were seen on (bit `core % 64`).
    cores: AtomicU64,
    t0: Instant,
    tick0: u64,
    overhead: u64,
    acc: Mutex<Acc>,
}

impl Profiler {
    pub(crate) fn new(time_ops: bool) -> Profiler {
        Profiler {
            time_ops,
            core: if time_ops { current_core() } else { None },
            cores: AtomicU64::new(0),
            t0: Instant::now(),
            tick0: ticks(),
            overhead: if time_ops { timing_overhead() } else { 0 },
            acc: Mutex::new(Acc::default()),
        }
    }

    /// The threads' CPU time so far (waits excluded), seconds.
    pub(crate) fn cpu_s(&self) -> f64 {
        self.acc.lock().unwrap().cpu_ns * 1e-9
    }

    /// Nanoseconds per tick, from the run's start to now.
    fn ns_per_tick(&self) -> f64 {
        let t = ticks().wrapping_sub(self.tick0);
        let ns = self.t0.elapsed().as_nanos() as f64;
        if t == 0 {
            1.0
        } else {
            ns / t as f64
        }
    }

    /// A worker ends: its thread's figures join the run's.
    pub(crate) fn add(&self, mut c: Clock) {
        c.resume();
        let npt = self.ns_per_tick();
        let check_ns = c.check_ticks as f64 * npt;
        let cpu = (thread_cpu_ns().saturating_sub(c.cpu0).saturating_sub(c.paused_cpu) as f64 - check_ns).max(0.0);
        let wall = ticks().wrapping_sub(c.tick0).saturating_sub(c.paused_ticks) as f64 * npt - check_ns;
        // The undisturbed operations were on a CPU all along (their wall
        // time is CPU time); of the rest of the thread's (unpaused) span, the
        // share it was on one.
        let calm_ticks = |k: usize| c.in_op[k] - c.disturbed_ticks[k];
        let calm_ns: f64 = (0..2).map(|k| calm_ticks(k) as f64 * npt).sum();
        let rest = wall - calm_ns;
        let on_cpu = if rest > 0.0 { ((cpu - calm_ns) / rest).clamp(0.0, 1.0) } else { 1.0 };
        // Per kind: (time inside its operations, inside their locks), ns.
        let kinds = [MALLOC, FREE].map(|k| {
            let calm = c.ops[k] - c.disturbed[k];
            let (n, op_ticks, lock_ticks, scale) = if calm > 0 {
                // The undisturbed operations' mean, for every operation.
                let s = c.ops[k] as f64 / calm as f64;
                (calm, calm_ticks(k), c.in_lock[k] - c.disturbed_lock_ticks[k], s)
            } else {
                // Every operation disturbed (one long busy one, say): the
                // share of the rest of the span on a CPU is all there is to go by.
                (c.ops[k], c.in_op[k], c.in_lock[k], on_cpu)
            };
            let timed = op_ticks.saturating_sub(n * self.overhead) as f64 * npt;
            (timed * scale, lock_ticks as f64 * npt * scale)
        });
        // A mean standing in for disturbed operations can come out above
        // the CPU time they had: the operations never hold more than the
        // thread's CPU time.
        let in_ops: f64 = kinds.iter().map(|k| k.0).sum();
        let fit = if in_ops > cpu { cpu / in_ops } else { 1.0 };
        let mut a = self.acc.lock().unwrap();
        for (k, (op_ns, lock_ns)) in kinds.into_iter().enumerate() {
            a.in_op_ns[k] += op_ns * fit;
            a.ops[k] += c.ops[k];
            a.disturbed[k] += c.disturbed[k];
            a.in_lock_ns[k] += lock_ns * fit;
            a.locks[k] += c.locks[k];
        }
        a.cpu_ns += cpu;
        a.wall_ns += wall;
        a.faults += thread_minor_faults().saturating_sub(c.faults0);
        a.threads += 1;
    }

    /// Runs `f`, the body of a parallel worker: under a profile, on the
    /// profile's core (see the module doc), the cores it is seen on at its
    /// start and end joining [`CpuProfile::cores`].
    pub(crate) fn worker<R>(&self, f: impl FnOnce() -> R) -> R {
        let Some(core) = self.core else { return f() };
        let seen = || {
            let bit = current_core().map_or(0, |c| 1 << (c % 64));
            self.cores.fetch_or(bit, Ordering::Relaxed);
        };
        bind_to(core);
        seen();
        let r = f();
        seen();
        r
    }

    /// The profile of every worker that has ended.
    pub(crate) fn profile(&self) -> Option<CpuProfile> {
        if !self.time_ops {
            return None;
        }
        let a = self.acc.lock().unwrap();
        let ops = a.ops[MALLOC] + a.ops[FREE];
        let per = |ns: f64, n: u64| if n == 0 { 0.0 } else { ns / n as f64 };
        let in_op: f64 = a.in_op_ns.iter().sum();
        let outside = (a.cpu_ns - in_op).max(0.0);
        Some(CpuProfile {
            malloc_ops: a.ops[MALLOC],
            free_ops: a.ops[FREE],
            malloc_ns: per(a.in_op_ns[MALLOC], a.ops[MALLOC]),
            free_ns: per(a.in_op_ns[FREE], a.ops[FREE]),
            malloc_lock_ns: per(a.in_lock_ns[MALLOC], a.ops[MALLOC]),
            free_lock_ns: per(a.in_lock_ns[FREE], a.ops[FREE]),
            malloc_locks: per(a.locks[MALLOC] as f64, a.ops[MALLOC]),
            free_locks: per(a.locks[FREE] as f64, a.ops[FREE]),
            alloc_ns: per(in_op, ops),
            outside_ns: per(outside, ops),
            total_ns: per(a.cpu_ns, ops),
            cpu_s: a.cpu_ns * 1e-9,
            wall_s: a.wall_ns * 1e-9,
            threads: a.threads,
            cores: self.cores.load(Ordering::Relaxed).count_ones(),
            minor_faults: a.faults,
            disturbed_ops: a.disturbed[MALLOC] + a.disturbed[FREE],
            fault_in: None,
        })
    }
}

/// What a run's work cost the CPU, per operation (nanoseconds), measured
/// natively with flushes off (see the module doc).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuProfile {
    /// `malloc` and `malloc_to` calls.
    pub malloc_ops: u64,
    /// `free` and `free_from` calls.
    pub free_ops: u64,
    /// CPU time inside one `malloc` / `malloc_to`.
    pub malloc_ns: f64,
    /// CPU time inside one `free` / `free_from`.
    pub free_ns: f64,
    /// Of `malloc_ns`, the time spent holding traced locks
    /// ([`crate::mech::lock`]): what the replay charges inside them.
    #[serde(default)]
    pub malloc_lock_ns: f64,
    /// Of `free_ns`, the time spent holding traced locks.
    #[serde(default)]
    pub free_lock_ns: f64,
    /// Traced locks taken per `malloc`.
    #[serde(default)]
    pub malloc_locks: f64,
    /// Traced locks taken per `free`.
    #[serde(default)]
    pub free_locks: f64,
    /// CPU time inside the allocator, per operation of either kind.
    pub alloc_ns: f64,
    /// CPU time between operations (the workload's own work), per operation.
    pub outside_ns: f64,
    /// All of the threads' CPU time, per operation: `alloc_ns + outside_ns`.
    pub total_ns: f64,
    /// The threads' CPU time in all (waits excluded), seconds.
    pub cpu_s: f64,
    /// Their wall time (waits excluded), seconds: above `cpu_s` by the time
    /// they were descheduled.
    pub wall_s: f64,
    /// Worker threads measured (setup and teardown workers included).
    pub threads: u32,
    /// The cores the parallel workers were seen on, at their start and end:
    /// 1, as they share one (see the module doc).
    #[serde(default)]
    pub cores: u32,
    /// The minor page faults the worker threads took (waits included): the
    /// kernel's share of `total_ns`, which the heap's prefault exists to keep
    /// out (first touches of pages the prefault did not reach).
    #[serde(default)]
    pub minor_faults: u64,
    /// Operations during which the thread was descheduled, left out of
    /// `malloc_ns` and `free_ns` (their kind's undisturbed mean stands in).
    #[serde(default)]
    pub disturbed_ops: u64,
    /// What of the heap was faulted in before the run (`None`: all of
    /// it). A sweep's native run of the same point faults in the same, so
    /// that both measure without the first touches of a fresh heap's pages.
    #[serde(default)]
    pub fault_in: Option<crate::fault_in::FaultIn>,
}

impl CpuProfile {
    /// CPU time inside one operation of `kind` ([`KINDS`]), nanoseconds.
    pub fn op_ns(&self, kind: usize) -> f64 {
        if kind == MALLOC {
            self.malloc_ns
        } else {
            self.free_ns
        }
    }

    /// Of [`CpuProfile::op_ns`], the time held in traced locks, and the
    /// locks taken, per operation of `kind`.
    pub fn op_locks(&self, kind: usize) -> (f64, f64) {
        if kind == MALLOC {
            (self.malloc_lock_ns, self.malloc_locks)
        } else {
            (self.free_lock_ns, self.free_locks)
        }
    }

    /// Operations in all.
    pub fn ops(&self) -> u64 {
        self.malloc_ops + self.free_ops
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_operation_counts_and_a_wait_does_not() {
        let p = Profiler::new(true);
        let mut c = Clock::start(true);
        let spin = |ms: u64| {
            let t = Instant::now();
            while t.elapsed().as_millis() < ms as u128 {
                std::hint::spin_loop();
            }
        };
        let busy = Instant::now();
        let t0 = ticks();
        spin(20);
        c.op(MALLOC, t0);
        let mut busy_s = busy.elapsed().as_secs_f64();
        c.pause();
        std::thread::sleep(std::time::Duration::from_millis(30));
        c.resume();
        let busy = Instant::now();
        let t0 = ticks();
        spin(5);
        c.op(FREE, t0);
        p.add(c);
        busy_s += busy.elapsed().as_secs_f64();
        let prof = p.profile().unwrap();
        assert_eq!((prof.malloc_ops, prof.free_ops), (1, 1));
        // The sleep is not in the profile; the busy time is, unless the
        // machine took the CPU away meanwhile (then less, never more).
        assert!(prof.malloc_ns <= 25e6 && prof.malloc_ns > 1e6, "{prof:?}");
        assert!(prof.free_ns <= 8e6, "{prof:?}");
        assert!(prof.wall_s < busy_s + 2e-3 && prof.cpu_s <= prof.wall_s + 1e-3, "{busy_s} s busy: {prof:?}");
        assert!((prof.total_ns - prof.alloc_ns - prof.outside_ns).abs() < 1.0);
    }

    #[test]
    fn an_operation_the_thread_slept_in_is_left_out() {
        let spin_us = |us: u128| {
            let t = Instant::now();
            while t.elapsed().as_micros() < us {
                std::hint::spin_loop();
            }
        };
        let p = Profiler::new(true);
        let mut c = Clock::start(true);
        for _ in 0..10 {
            let t0 = ticks();
            spin_us(50);
            c.op(MALLOC, t0);
            spin_us(200); // the work between operations
        }
        // An operation that sleeps, as one blocked on a lock whose holder
        // was descheduled does.
        let t0 = ticks();
        std::thread::sleep(std::time::Duration::from_millis(20));
        c.op(MALLOC, t0);
        p.add(c);
        let prof = p.profile().unwrap();
        assert!(prof.disturbed_ops >= 1, "{prof:?}");
        // 50 µs of work per operation, 200 µs between them (scaling every
        // span by the thread's CPU over wall time gave about 200 and 25).
        assert!(prof.malloc_ns > 40e3 && prof.malloc_ns < 80e3, "{prof:?}");
        assert!(prof.outside_ns > 120e3, "{prof:?}");
    }
}
