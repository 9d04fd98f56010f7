//! Scratch heaps: the heaps, pools and images a run or a crash worker makes
//! for itself and removes when done. They live in this process's scratch
//! directory under `/dev/shm` (memory, as a DAX mount would be), which
//! carries pmsim's proof of ownership ([`pmsim_traces::owned`]): removed by
//! the process, by its signal handler, or by the next pmsim once the
//! process is gone, and nothing else ever is.

use pmsim_traces::owned::{self, Place};
use std::path::{Path, PathBuf};

/// A heap file made for one run, alone in a directory of its own, which is
/// removed when dropped (also on errors): whatever an allocator keeps beside
/// its heap (Metall's datastore directory, say) goes with it, and this
/// module need know no allocator's side files.
#[derive(Debug)]
pub struct ScratchHeap {
    dir: PathBuf,
    path: PathBuf,
}

impl ScratchHeap {
    /// A fresh file name in a fresh directory of this process's scratch
    /// directory under `/dev/shm` (else the temporary directory); `tag`
    /// names its use.
    pub fn new(tag: &str) -> Result<ScratchHeap, String> {
        let err = |e: std::io::Error| {
            format!("cannot make a scratch directory under /dev/shm or the temporary directory: {e}")
        };
        let dir = owned::scratch_path(Place::Memory, tag).map_err(err)?;
        std::fs::create_dir(&dir).map_err(err)?;
        let path = dir.join(format!("{tag}.heap"));
        Ok(ScratchHeap { dir, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchHeap {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
