//! Scratch heaps: the heaps, pools and images a run or a crash worker makes
//! for itself and removes when done. They live in this process's scratch
//! directory under `/dev/shm` (memory, as a DAX mount would be), which
//! carries pmsim's proof of ownership ([`pmsim_traces::owned`]): removed by
//! the process, by its signal handler, or by the next pmsim once the
//! process is gone, and nothing else ever is.

use pmsim_traces::owned::{self, Place};
use std::path::{Path, PathBuf};

/// A heap file made for one run and removed when dropped (also on errors).
#[derive(Debug)]
pub struct ScratchHeap {
    path: PathBuf,
}

impl ScratchHeap {
    /// A fresh file name in this process's scratch directory under
    /// `/dev/shm` (else the temporary directory); `tag` names its use.
    pub fn new(tag: &str) -> Result<ScratchHeap, String> {
        let path = owned::scratch_path(Place::Memory, &format!("{tag}.heap"))
            .map_err(|e| format!("cannot make a scratch directory under /dev/shm or the temporary directory: {e}"))?;
        Ok(ScratchHeap { path })
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
