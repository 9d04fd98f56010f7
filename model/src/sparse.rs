//! Sparse files: which parts of a file hold data, and copies that keep
//! the holes. A heap on tmpfs is sparse ([`crate::Heap::create_with`]):
//! a run touches a sliver of it, and reading or copying the rest byte
//! for byte would allocate a page of memory (or disk) for every 4 KiB of
//! zeros. Heap images and the crash explorer's copies of them read and
//! write only the data.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// The ranges of the first `len` bytes of `file` that hold data, in order
/// (`SEEK_DATA`/`SEEK_HOLE`); everything else reads as zeros. A file
/// system that cannot tell reports the whole file as data.
pub fn data_ranges(file: &File, len: u64) -> Vec<Range<u64>> {
    let fd = file.as_raw_fd();
    let seek = |off: u64, whence: libc::c_int| {
        // SAFETY: lseek on a descriptor the caller owns; it moves only the file offset.
        let r = unsafe { libc::lseek(fd, off as libc::off_t, whence) };
        (r >= 0).then_some(r as u64)
    };
    let mut out = Vec::new();
    let mut at = 0;
    while at < len {
        let Some(start) = seek(at, libc::SEEK_DATA) else {
            // ENXIO: no data past `at`. Anything else: the file system cannot tell.
            if io::Error::last_os_error().raw_os_error() != Some(libc::ENXIO) {
                return std::iter::once(0..len).collect();
            }
            break;
        };
        if start >= len {
            break;
        }
        let end = seek(start, libc::SEEK_HOLE).unwrap_or(len).min(len);
        out.push(start..end);
        at = end;
    }
    out
}

/// The ranges of the file at `path` that hold data ([`data_ranges`]).
pub fn data(path: &Path) -> io::Result<Vec<Range<u64>>> {
    let f = File::open(path)?;
    let len = f.metadata()?.len();
    Ok(data_ranges(&f, len))
}

/// Copies the file `from` to `to` (created or truncated), its holes kept.
pub fn copy(from: &Path, to: &Path) -> io::Result<()> {
    let src = File::open(from)?;
    let len = src.metadata()?.len();
    let dst = File::create(to)?;
    let mut buf = vec![0u8; 1 << 20];
    for r in data_ranges(&src, len) {
        let mut at = r.start;
        while at < r.end {
            let n = ((r.end - at) as usize).min(buf.len());
            src.read_exact_at(&mut buf[..n], at)?;
            dst.write_all_at(&buf[..n], at)?;
            at += n as u64;
        }
    }
    dst.set_len(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holes_are_found_and_kept_by_a_copy() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let f = File::create(&a).unwrap();
        f.set_len(64 << 20).unwrap();
        f.write_all_at(b"x", 8 << 20).unwrap();
        f.write_all_at(b"yz", (64 << 20) - 2).unwrap();
        let ranges = data_ranges(&f, 64 << 20);
        assert!(ranges.iter().any(|r| r.contains(&(8 << 20))), "{ranges:?}");
        let data: u64 = ranges.iter().map(|r| r.end - r.start).sum();
        assert!(data < 1 << 20, "{ranges:?}");
        copy(&a, &b).unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        use std::os::unix::fs::MetadataExt;
        assert!(std::fs::metadata(&b).unwrap().blocks() * 512 < 1 << 20);
    }
}
