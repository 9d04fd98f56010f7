//! Which parts of a heap a run faults in before it starts
//! ([`prefault`]), so that a CPU profile measures the
//! allocator's work and not the kernel's first touches of pages.
//!
//! Byte ranges rather than one prefix: an allocator that spreads its threads
//! over the heap (LLFree gives each thread a tree of its own, 64 MiB apart at
//! 16 threads) touches a few MiB at each of many places, and a prefix as far
//! as the last of them had the kernel allocate and zero a whole 1 GiB heap
//! three times per profiled point.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::Range;
use std::str::FromStr;

/// Byte ranges of a heap to fault in, sorted and disjoint; the parts past
/// the mapping's end are left out when applied.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FaultIn(Vec<(u64, u64)>);

impl FaultIn {
    /// The first `len` bytes.
    pub fn prefix(len: u64) -> FaultIn {
        FaultIn::from_ranges(std::iter::once(0..len))
    }

    /// The whole heap.
    pub fn all() -> FaultIn {
        FaultIn::prefix(u64::MAX)
    }

    /// `ranges` (in any order, overlapping or not) sorted and merged.
    pub fn from_ranges(ranges: impl IntoIterator<Item = Range<u64>>) -> FaultIn {
        let mut v: Vec<(u64, u64)> = ranges.into_iter().filter(|r| r.start < r.end).map(|r| (r.start, r.end)).collect();
        v.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
        for (s, e) in v {
            match out.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => out.push((s, e)),
            }
        }
        FaultIn(out)
    }

    /// The ranges, sorted and disjoint.
    pub fn ranges(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.0.iter().map(|&(s, e)| s..e)
    }

    /// Faults in every page of these ranges of the mapping at `base`
    /// (`size` bytes, page-aligned), changing no byte.
    ///
    /// # Safety
    /// `base` must be the start of a writable mapping of `size` bytes.
    pub unsafe fn apply(&self, base: *mut u8, size: u64) -> std::io::Result<()> {
        const PAGE: u64 = 4096;
        for (s, e) in self.0.iter().map(|&(s, e)| (s / PAGE * PAGE, e.min(size))) {
            if s < e {
                // SAFETY: [s, e) lies inside the caller's mapping of `size` bytes.
                prefault(unsafe { base.add(s as usize) }, e - s)?;
            }
        }
        Ok(())
    }
}

/// `START-END,START-END,…` in bytes, or one number for a prefix; what
/// [`FromStr`] reads (`pmsim run --prefault`).
impl fmt::Display for FaultIn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let [(0, e)] = self.0[..] {
            return write!(f, "{e}");
        }
        if self.0.is_empty() {
            return write!(f, "0");
        }
        for (i, (s, e)) in self.0.iter().enumerate() {
            write!(f, "{}{s}-{e}", if i > 0 { "," } else { "" })?;
        }
        Ok(())
    }
}

impl FromStr for FaultIn {
    type Err = String;

    /// `N` (the first N bytes) or `START-END,…` (byte offsets, END exclusive).
    fn from_str(s: &str) -> Result<FaultIn, String> {
        let num = |t: &str| t.trim().parse::<u64>().map_err(|_| format!("`{t}` is not a byte count"));
        if !s.contains('-') && !s.contains(',') {
            return Ok(FaultIn::prefix(num(s)?));
        }
        let mut ranges = Vec::new();
        for part in s.split(',') {
            let (a, b) = part.split_once('-').ok_or_else(|| format!("`{part}` is not START-END"))?;
            let (a, b) = (num(a)?, num(b)?);
            if a >= b {
                return Err(format!("`{part}`: START must be below END"));
            }
            ranges.push(a..b);
        }
        Ok(FaultIn::from_ranges(ranges))
    }
}

/// Faults in every page of the mapping `[base, base + len)` for writing
/// (`MADV_POPULATE_WRITE`), changing no byte: a CPU profile then measures
/// the allocator's work and not the kernel's first-touch page faults, which
/// a run as long as the paper's pays once per page and a tiny-scale run of
/// large objects pays on nearly every operation.
pub fn prefault(base: *mut u8, len: u64) -> std::io::Result<()> {
    // SAFETY: MADV_POPULATE_WRITE only faults pages in; the caller passes a
    // range it has mapped writable.
    let rc = unsafe { libc::madvise(base.cast(), len as usize, libc::MADV_POPULATE_WRITE) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_read_back_as_written() {
        let f = FaultIn::from_ranges([10..20, 0..5, 15..30, 40..41]);
        assert_eq!(f.ranges().collect::<Vec<_>>(), [0..5, 10..30, 40..41]);
        assert_eq!(f.to_string().parse::<FaultIn>().unwrap(), f);
        assert_eq!("4096".parse::<FaultIn>().unwrap(), FaultIn::prefix(4096));
        assert_eq!(FaultIn::prefix(4096).to_string(), "4096");
        assert!(
            "5-3".parse::<FaultIn>().is_err() && "x".parse::<FaultIn>().is_err() && "1-".parse::<FaultIn>().is_err()
        );
    }
}
