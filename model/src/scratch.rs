//! Scratch files: the heaps, pools and images a run or a crash worker makes
//! for itself and removes when done. They are named `pmsim-PID-…` under
//! `/dev/shm` (memory, as a DAX mount would be) or the temporary directory,
//! so that an interrupted process's files are found by its pid: removed by
//! its signal handler, by the cleaner that outlives it, or by the next pmsim
//! once the process is gone.

use std::path::{Path, PathBuf};

/// A heap file made for one run and removed when dropped (also on errors).
#[derive(Debug)]
pub struct ScratchHeap {
    path: PathBuf,
}

/// The directories scratch files go to: `/dev/shm` (memory, as a DAX mount
/// would be) and the temporary directory.
fn scratch_dirs() -> Vec<PathBuf> {
    let mut v = vec![PathBuf::from("/dev/shm")];
    let t = std::env::temp_dir();
    if !v.contains(&t) {
        v.push(t);
    }
    v.into_iter().filter(|d| d.is_dir()).collect()
}

/// The pid in a scratch name `pmsim-PID-…`.
fn scratch_pid(name: &std::ffi::OsStr) -> Option<u32> {
    let rest = name.to_str()?.strip_prefix("pmsim-")?;
    rest.split_once('-')?.0.parse().ok()
}

/// Removes the scratch files (`pmsim-PID-…`) of the processes `which` picks;
/// returns how many entries were removed.
fn remove_scratch(which: impl Fn(u32) -> bool) -> usize {
    let mut n = 0;
    for dir in scratch_dirs() {
        let Ok(rd) = std::fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            if scratch_pid(&e.file_name()).is_some_and(&which) {
                let p = e.path();
                let r = if e.file_type().is_ok_and(|t| t.is_dir()) {
                    std::fs::remove_dir_all(&p)
                } else {
                    std::fs::remove_file(&p)
                };
                n += r.is_ok() as usize;
            }
        }
    }
    n
}

/// Removes this process's scratch heaps, images and traces (an interrupted
/// run calls it from its signal handler's thread).
pub fn remove_own_scratch() -> usize {
    let me = std::process::id();
    remove_scratch(|pid| pid == me)
}

/// Removes the scratch files of process `pid` (an interrupted pmsim's
/// cleaner calls it once that process is gone).
pub fn remove_scratch_of(pid: u32) -> usize {
    remove_scratch(|p| p == pid)
}

/// Removes the scratch files left by pmsim processes that are gone (killed
/// with SIGKILL, or by a crash of the machine); called when a command starts.
pub fn remove_stale_scratch() -> usize {
    let me = std::process::id();
    remove_scratch(|pid| pid != me && !pmsim_traces::output::pid_alive(pid))
}

impl ScratchHeap {
    /// A fresh file name under `/dev/shm` or else the temporary directory,
    /// named by the process's pid (so [`remove_own_scratch`] and
    /// [`remove_stale_scratch`] find it); `tag` keeps concurrent runs of one
    /// process apart.
    pub fn new(tag: &str) -> ScratchHeap {
        let dir = scratch_dirs().into_iter().next().unwrap_or_else(std::env::temp_dir);
        ScratchHeap { path: dir.join(format!("pmsim-{}-{tag}.heap", std::process::id())) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchHeap {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        // A Metall datastore's management directory beside the heap.
        let _ = std::fs::remove_dir_all(crate::metall::store::store_dir(&self.path));
    }
}
