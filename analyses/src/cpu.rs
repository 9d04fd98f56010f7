//! The CPU's work of a simulated point, measured in the same point: the
//! allocator and workload run natively with flushes off and their CPU time
//! per operation is taken ([`pmsim_model::workloads::cpu`]), so that the
//! point's estimated time is CPU work plus persistence, never persistence
//! alone. The profile goes to the row's [`Env`](crate::row::Env) (it depends
//! on the machine), and into a second contention replay as
//! [`CpuCosts`].
//!
//! pmsim's own allocators are profiled in this process. PMDK chooses how it
//! flushes when the library loads, from the environment: its profile is
//! taken by a `pmsim run --flush-insn none --cpu-profile` child with
//! `PMEM_NO_FLUSH=1` (a program other than pmsim, such as a test binary,
//! cannot start one, and its PMDK points go without a CPU profile, saying so).
//!
//! The run is repeated [`REPEATS`] times and the one with the least CPU time
//! per operation is kept: interference from other work on the machine only
//! ever adds time.
//!
//! Each counted run faults its heap in first (see
//! [`pmsim_model::workloads::cpu`]), but only where the run reaches: an
//! uncounted first run with nothing faulted in finds which parts of its
//! heap hold data ([`runner::HEAP_DATA`]), and the counted runs fault in
//! those parts, each twice as long and 16 MiB more ([`fault_in`]). Outside
//! them they touch nothing, so they measure what a whole prefault measures,
//! while the kernel no longer allocates, zeroes and frees every page of
//! heaps sized for the worst case (an 800 MB PMDK pool for a 4-thread
//! Larson-large run that reaches 270 MB; a 1 GiB LLFree heap whose 16
//! threads each touch a few MiB of a tree of their own): that was most of
//! a tiny-scale main job's system time. The profile counts the worker
//! threads' page faults ([`CpuProfile::minor_faults`]), which shows it.
//!
//! A profile is measured once per configuration (allocator and its
//! parameters, workload and its parameters, threads, seed, heap size) in a
//! process and shared by every point of that configuration: the main job
//! simulates one configuration under several models (Fig. 11's ablations
//! again with a switch, PMDK's scaling points again under eADR), and those
//! rows then compare one measurement of the CPU's work, not three.

use pmsim_model::fault_in::FaultIn;
use pmsim_model::runner::{self, AllocSpec, HeapSpec, RunSpec};
use pmsim_model::scratch::ScratchHeap;
use pmsim_model::workloads::cpu::{CpuProfile, FREE, MALLOC};
use pmsim_model::workloads::{Progress, RunOptions, Workload};
use pmsim_model::FlushInsn;
use pmsim_sim::CpuCosts;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Native runs per profile; the least costly is kept.
pub const REPEATS: usize = 3;

/// What became of a point's CPU profile.
pub enum Cpu {
    Measured(CpuProfile),
    /// Why there is none.
    Skipped(String),
}

/// The costs the contention model advances a thread's clock by.
pub fn costs(p: &CpuProfile) -> CpuCosts {
    let mut op_ns = vec![0.0; 2];
    let mut lock_ns = vec![0.0; 2];
    let mut locks = vec![0.0; 2];
    for k in [MALLOC, FREE] {
        op_ns[k] = p.op_ns(k);
        (lock_ns[k], locks[k]) = p.op_locks(k);
    }
    CpuCosts { op_ns, outside_ns: p.outside_ns, lock_ns, locks }
}

/// Profiles allocator `alloc` on `wl` with `opts.threads` threads (the
/// point's run, natively, flushes off), `REPEATS` times, or returns the
/// profile this process already measured of the same configuration.
pub fn profile(alloc: &AllocSpec, wl: &Workload, opts: &RunOptions, heap_size: u64, id: &str) -> Result<Cpu, String> {
    static MEASURED: Mutex<BTreeMap<String, Arc<Mutex<Option<CpuProfile>>>>> = Mutex::new(BTreeMap::new());
    let key = format!(
        "{}{:?} {} {} {:?} t{} s{} h{heap_size}",
        alloc.family().family(),
        alloc.params(),
        wl.name(),
        wl.scale().name(),
        param_args(wl),
        opts.threads,
        opts.seed
    );
    // One entry per configuration, locked while it is measured: a second
    // point of the same configuration waits for the first one's profile.
    let entry = MEASURED.lock().unwrap_or_else(|e| e.into_inner()).entry(key).or_default().clone();
    let mut known = entry.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = known.as_ref() {
        return Ok(Cpu::Measured(p.clone()));
    }
    let cpu = measure(alloc, wl, opts, heap_size, id)?;
    if let Cpu::Measured(p) = &cpu {
        *known = Some(p.clone());
    }
    Ok(cpu)
}

/// What of the heap a counted run faults in, from the parts of an uncounted
/// run's heap that held data (`data`, `[start, end)`): each part from its
/// start (down to whole 2 MiB) twice as far and 16 MiB more (up to whole
/// 2 MiB), so that a run whose threads interleave otherwise and reach
/// further still finds its pages in (the heap's size caps it).
pub fn fault_in(data: &FaultIn) -> FaultIn {
    const HUGE: u64 = 2 << 20;
    FaultIn::from_ranges(data.ranges().map(|r| {
        let end = r.end.saturating_add(r.end - r.start).saturating_add(16 << 20);
        r.start / HUGE * HUGE..end.checked_next_multiple_of(HUGE).unwrap_or(end)
    }))
}

/// A CPU-profile run's profile, and the parts of its heap that held data.
type Ran = (CpuProfile, Option<FaultIn>);

/// The parts of a run's heap that held data, from its report's extra fields.
fn heap_data(extra: Option<&Value>) -> Option<FaultIn> {
    extra.and_then(|v| serde_json::from_value(v.clone()).ok())
}

/// The least costly of `REPEATS` native runs, after one uncounted run that
/// finds how much of the heap they need faulted in (see the module doc).
fn measure(alloc: &AllocSpec, wl: &Workload, opts: &RunOptions, heap_size: u64, id: &str) -> Result<Cpu, String> {
    if !alloc.traceable() {
        if let Err(why) = child_exe(alloc) {
            return Ok(Cpu::Skipped(why));
        }
    }
    let once = |opts: &RunOptions, tag: &str| -> Result<Ran, String> {
        if alloc.traceable() {
            in_process(alloc, wl, opts, heap_size, &format!("{id}-{tag}"))
        } else {
            in_child(alloc, wl, opts, heap_size)
        }
    };
    let probe = RunOptions { fault_in: Some(FaultIn::default()), ..opts.clone() };
    let (_, data) = once(&probe, "reach")?;
    let counted = RunOptions { fault_in: data.as_ref().map(fault_in), ..opts.clone() };
    let mut best: Option<CpuProfile> = None;
    for k in 0..REPEATS {
        let (p, _) = once(&counted, &format!("cpu{k}"))?;
        if best.as_ref().is_none_or(|b| p.total_ns < b.total_ns) {
            best = Some(CpuProfile { fault_in: counted.fault_in.clone(), ..p });
        }
    }
    Ok(best.map_or_else(|| Cpu::Skipped("no run".into()), Cpu::Measured))
}

fn in_process(alloc: &AllocSpec, wl: &Workload, opts: &RunOptions, size: u64, id: &str) -> Result<Ran, String> {
    let scratch = ScratchHeap::new(&format!("sweep-{id}"))?;
    let hs = HeapSpec { path: scratch.path().to_path_buf(), size, overwrite: true, shown: None };
    let opts = RunOptions { cpu_profile: true, ..opts.clone() };
    let progress = Progress::default();
    let spec = RunSpec { alloc, workload: wl, opts: &opts, heap: &hs, flush: FlushInsn::None, progress: &progress };
    let o = runner::run_native(&spec).map_err(|e| format!("CPU profile (native, flushes off): {e}"))?;
    let data = heap_data(o.run.extra.get(runner::HEAP_DATA));
    let p = o.run.cpu.ok_or_else(|| "CPU profile: the run measured none".to_string())?;
    Ok((p, data))
}

/// Every parameter of `wl` as `KEY=VALUE` for `pmsim run --param`, so
/// that a child process runs exactly this workload.
pub fn param_args(wl: &Workload) -> Vec<String> {
    wl.params_json()
        .into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => format!("{k}={s}"),
            v => format!("{k}={v}"),
        })
        .collect()
}

/// The profile of an allocator whose flush instruction is chosen by its
/// library at load time (PMDK), from a `pmsim run` child set up for it.
fn in_child(alloc: &AllocSpec, wl: &Workload, opts: &RunOptions, size: u64) -> Result<Ran, String> {
    let exe = child_exe(alloc)?;
    let mut cmd = std::process::Command::new(&exe);
    // The library's environment set here, so that the child need not
    // re-execute itself for it.
    for (k, v) in pmsim_model::pmdk::required_env(false, Some(FlushInsn::None)) {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.args(["run", "--alloc", alloc.label(), "--workload", wl.name(), "--scale", wl.scale().name()]);
    cmd.args(["--threads", &opts.threads.to_string(), "--seed", &opts.seed.to_string()]);
    cmd.args(["--heap-size", &size.to_string(), "--flush-insn", "none", "--cpu-profile", "--json"]);
    if let Some(f) = &opts.fault_in {
        cmd.args(["--prefault", &f.to_string()]);
    }
    for kv in param_args(wl) {
        cmd.arg("--param").arg(kv);
    }
    let out = pmsim_traces::children::output(&mut cmd).map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("CPU profile of {}: {}", alloc.label(), err.trim()));
    }
    let v: Value = serde_json::from_slice(&out.stdout).map_err(|e| format!("CPU profile: not JSON: {e}"))?;
    let cpu = v.pointer("/runs/0/run/cpu").cloned().ok_or("CPU profile: the run reported none")?;
    let data = heap_data(v.pointer(&format!("/runs/0/run/extra/{}", runner::HEAP_DATA)));
    let p = serde_json::from_value(cpu).map_err(|e| format!("CPU profile: {e}"))?;
    Ok((p, data))
}

/// This executable, if it is pmsim (which can run a profile child); else
/// why `alloc`'s profile is skipped.
fn child_exe(alloc: &AllocSpec) -> Result<std::path::PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    if exe.file_stem().and_then(|s| s.to_str()) != Some("pmsim") {
        return Err(format!(
            "{}'s CPU profile needs a pmsim process with its library's flushes off (this is {})",
            alloc.label(),
            exe.display()
        ));
    }
    Ok(exe)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn each_part_is_faulted_in_twice_as_far_and_16_mib_more() {
        // One part from the start: the prefix it always was.
        assert_eq!(fault_in(&FaultIn::prefix(10 * MIB)), FaultIn::prefix(36 * MIB));
        // Threads' trees 64 MiB apart: each its own range, in whole 2 MiB.
        let f = fault_in(&FaultIn::from_ranges([0..40 << 10, 65 * MIB..66 * MIB + 1, 129 * MIB..130 * MIB]));
        let r: Vec<_> = f.ranges().collect();
        assert_eq!(r, [0..18 * MIB, 64 * MIB..84 * MIB, 128 * MIB..148 * MIB]);
        // Parts closer than their slack merge.
        assert_eq!(fault_in(&FaultIn::from_ranges([0..MIB, 4 * MIB..5 * MIB])).ranges().count(), 1);
    }
}
