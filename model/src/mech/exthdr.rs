//! In-place extent headers: the bookkeeping that the log of
//! [`super::bklog`] replaces, kept as the baseline of the ablation.
//!
//! Like PMDK's chunk headers or Makalu's, each chunk of the heap starts with a
//! header area holding one 8-byte [`Record`] per page of the chunk; the record
//! of an allocated extent sits in the slot of its first page, free space has
//! zero slots. Allocating or freeing an extent rewrites the slot of *its*
//! page in *its* chunk: after some churn those writes land all over the heap,
//! the small random writes of the paper's §3.3.

use super::record::{Record, PAGE};
use crate::pm::PmThread;

/// The header areas of chunks of `chunk_bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtentHeaders {
    chunk_bytes: u64,
}

impl ExtentHeaders {
    /// # Panics
    /// If `chunk_bytes` is not a multiple of a page.
    pub fn new(chunk_bytes: u64) -> ExtentHeaders {
        assert!(chunk_bytes & (PAGE - 1) == 0 && chunk_bytes > 0, "chunk size {chunk_bytes} is not whole pages");
        ExtentHeaders { chunk_bytes }
    }

    /// Bytes of the header area at the start of each chunk (rounded to pages,
    /// so the data behind it stays page aligned).
    pub fn area_bytes(&self) -> u64 {
        (self.chunk_bytes / PAGE * 8).next_multiple_of(PAGE)
    }

    fn slot(&self, chunk: u64, start: u64) -> u64 {
        debug_assert!(start >= chunk && start < chunk + self.chunk_bytes);
        chunk + (start - chunk) / PAGE * 8
    }

    /// Records an extent that starts in the chunk at `chunk`; durable on return.
    pub fn record(&self, t: &mut PmThread, chunk: u64, r: Record) {
        let Record::Extent { addr, .. } = r else { panic!("extent headers hold extent records only") };
        let at = self.slot(chunk, addr);
        t.store_u64(at, r.encode());
        t.persist(at, 8);
    }

    /// Erases the record of the extent at `start`; durable on return.
    pub fn clear(&self, t: &mut PmThread, chunk: u64, start: u64) {
        let at = self.slot(chunk, start);
        t.store_u64(at, 0);
        t.persist(at, 8);
    }

    /// Zeroes the header area of the chunk at `chunk` durably (for a chunk
    /// whose area held user data, e.g. a trailing chunk of a huge extent).
    pub fn zero(&self, t: &mut PmThread, chunk: u64) {
        let zeros = vec![0u8; self.area_bytes() as usize];
        t.store_bytes(chunk, &zeros);
        t.persist(chunk, self.area_bytes());
    }

    /// Zeroes, durably, the header areas of the chunks (of a heap whose chunks
    /// start at `chunk_base`) that begin inside `[start, start + size)`: the
    /// trailing chunks of a huge extent, whose header areas held user data.
    /// Done *before* the extent's record is erased: while the record is durable,
    /// a recovery scan skips those chunks, so a crash in between is harmless.
    pub fn zero_covered(&self, t: &mut PmThread, chunk_base: u64, start: u64, size: u64) {
        let mut c = chunk_base + (start - chunk_base).next_multiple_of(self.chunk_bytes);
        while c < start + size {
            self.zero(t, c);
            c += self.chunk_bytes;
        }
    }

    /// The extents recorded in the chunk at `chunk`, by address.
    pub fn scan(&self, t: &PmThread, chunk: u64) -> Result<Vec<Record>, String> {
        let mut out = Vec::new();
        for page in 0..self.chunk_bytes / PAGE {
            let w = t.load_u64(chunk + page * 8);
            match Record::decode(w).map_err(|e| format!("extent header of chunk {chunk:#x} page {page}: {e}"))? {
                None => {}
                Some(r @ Record::Extent { addr, .. }) if addr == chunk + page * PAGE => out.push(r),
                Some(r) => return Err(format!("extent header of chunk {chunk:#x} page {page} holds {r:?}")),
            }
        }
        Ok(out)
    }
}
