//! The Metall datastore on pmsim: where management data lives between runs,
//! the "properly closed" mark, and snapshots.
//!
//! Metall's datastore is a directory holding the application data segment
//! (its backing files) and the management data (files written at close).
//! pmsim keeps one heap file per run, so the mapping is:
//!
//! | Metall | pmsim |
//! |---|---|
//! | application data segment | the heap file `H` after its header page (chunk *i* at `4096 + i × chunk size`) |
//! | named-object directory | the heap header's root table |
//! | management directory | the side directory `H.metall/` |
//! | chunk / bin directory files | `H.metall/chunk_directory`, `H.metall/bin_directory` |
//! | properly-closed mark | the empty file `H.metall/properly_closed_mark` |
//!
//! Opening for writing removes the mark; closing writes the directories
//! (temporary file, fsync, rename), syncs the heap (`msync`) and only then
//! creates the mark. A store without the mark was not closed properly: its
//! management files are older than its heap, and it is refused.
//!
//! Files are little-endian 64-bit words ending with an FNV-1a checksum of
//! everything before it, so a damaged file is refused with its name.

use super::bin_dir::{Bin, SmallChunk};
use super::chunk_dir::{ChunkDirectory, ChunkKind};
use super::NAME;
use crate::error::AllocError;
use crate::mech::bitset::MultiLayerBitset;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

const CHUNK_DIR_FILE: &str = "chunk_directory";
const BIN_DIR_FILE: &str = "bin_directory";
/// The management files [`save`] writes, in the order it returns them.
pub const MANAGEMENT_FILES: [&str; 2] = [CHUNK_DIR_FILE, BIN_DIR_FILE];
const MARK_FILE: &str = "properly_closed_mark";
const MAGIC_CD: u64 = u64::from_le_bytes(*b"PMMT-CD\0");
const MAGIC_BD: u64 = u64::from_le_bytes(*b"PMMT-BD\0");
const VERSION: u64 = 1;

/// The management directory of the datastore whose heap file is `heap`.
pub fn store_dir(heap: &Path) -> PathBuf {
    let mut s = heap.as_os_str().to_os_string();
    s.push(".metall");
    PathBuf::from(s)
}

fn io_err(path: &Path, what: &str, e: io::Error) -> AllocError {
    AllocError::store(NAME, format!("{}: {what}: {e}", path.display()))
}

/// Makes an empty management directory (replacing a stale one).
pub fn create_dir(dir: &Path) -> Result<(), AllocError> {
    if dir.exists() {
        fs::remove_dir_all(dir).map_err(|e| io_err(dir, "cannot remove the old management directory", e))?;
    }
    fs::create_dir_all(dir).map_err(|e| io_err(dir, "cannot create the management directory", e))
}

/// Refuses a store that was not closed properly (one clear line).
pub fn check_properly_closed(heap: &Path, dir: &Path) -> Result<(), AllocError> {
    if !dir.is_dir() {
        return Err(AllocError::not_closed(
            NAME,
            format!("{}: not a Metall datastore (no management directory {})", heap.display(), dir.display()),
        ));
    }
    if !dir.join(MARK_FILE).exists() {
        return Err(AllocError::not_closed(
            NAME,
            format!(
                "{}: Metall datastore was not closed properly (no {MARK_FILE} in {}); its management data does not \
             match the heap: open a snapshot instead",
                heap.display(),
                dir.display()
            ),
        ));
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> Result<(), AllocError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io_err(dir, "cannot sync the directory", e))
}

/// Removes the mark (durably): from now on a crash leaves the store refused.
pub fn remove_mark(dir: &Path) -> Result<(), AllocError> {
    let m = dir.join(MARK_FILE);
    fs::remove_file(&m).map_err(|e| io_err(&m, "cannot remove the properly-closed mark", e))?;
    sync_dir(dir)
}

/// Creates the mark (durably), after everything else is written.
pub fn write_mark(dir: &Path) -> Result<(), AllocError> {
    let m = dir.join(MARK_FILE);
    File::create(&m).and_then(|f| f.sync_all()).map_err(|e| io_err(&m, "cannot write the properly-closed mark", e))?;
    sync_dir(dir)
}

fn fnv(words: &[u64]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for w in words {
        for b in w.to_le_bytes() {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// Writes `bytes` to `path` durably: a temporary file, fsync, rename.
fn write_file(path: &Path, bytes: &[u8]) -> Result<(), AllocError> {
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp).map_err(|e| io_err(&tmp, "cannot create", e))?;
    f.write_all(bytes).and_then(|_| f.sync_all()).map_err(|e| io_err(&tmp, "cannot write", e))?;
    fs::rename(&tmp, path).map_err(|e| io_err(path, "cannot rename into place", e))
}

/// Writes a word file (its checksum appended); returns its bytes.
fn write_words(path: &Path, mut words: Vec<u64>) -> Result<Vec<u8>, AllocError> {
    words.push(fnv(&words));
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    write_file(path, &bytes)?;
    Ok(bytes)
}

/// One checksum of the management files as [`save`] returns them, which a
/// traced close records in its markers (so the copies saved with a trace's
/// heap image are known to be that close's).
pub fn files_crc(files: &[(&'static str, Vec<u8>)]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for (_, b) in files {
        h.update(b);
    }
    h.finalize()
}

/// Lays out the management directory `dir` afresh with `files` (as
/// [`save`] returned them) and, with `mark`, the properly-closed mark: the
/// datastore a crash leaves at a point of a traced run (`pmsim crash`).
pub fn lay_out(dir: &Path, files: &[(&'static str, Vec<u8>)], mark: bool) -> Result<(), AllocError> {
    create_dir(dir)?;
    for (name, bytes) in files {
        write_file(&dir.join(name), bytes)?;
    }
    if mark {
        write_mark(dir)?;
    }
    Ok(())
}

/// A reader of a word file that names the file and the word in its errors.
struct Words<'a> {
    path: &'a Path,
    w: Vec<u64>,
    at: usize,
}

impl<'a> Words<'a> {
    fn open(path: &'a Path, magic: u64) -> Result<Words<'a>, AllocError> {
        let b = fs::read(path).map_err(|e| io_err(path, "cannot read", e))?;
        let bad = |m: String| AllocError::corrupt(NAME, format!("{}: {m}", path.display()));
        if b.len() % 8 != 0 || b.len() < 24 {
            return Err(bad(format!("{} bytes is not a management file", b.len())));
        }
        let mut w: Vec<u64> = b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
        let sum = w.pop().unwrap();
        if fnv(&w) != sum {
            return Err(bad("checksum mismatch (damaged file)".into()));
        }
        if w[0] != magic {
            return Err(bad("wrong magic".into()));
        }
        if w[1] != VERSION {
            return Err(bad(format!("version {} (expected {VERSION})", w[1])));
        }
        Ok(Words { path, w, at: 2 })
    }

    fn next(&mut self) -> Result<u64, AllocError> {
        let v = self.w.get(self.at).copied().ok_or_else(|| self.bad("truncated"))?;
        self.at += 1;
        Ok(v)
    }

    fn bad(&self, m: &str) -> AllocError {
        AllocError::corrupt(NAME, format!("{}: word {}: {m}", self.path.display(), self.at))
    }
}

/// Writes the chunk directory (with the bitsets of small chunks) and the bin
/// directory; returns each file's name and bytes ([`MANAGEMENT_FILES`]).
pub fn save(
    dir: &Path,
    chunk_size: u64,
    cd: &ChunkDirectory,
    bins: &[Bin],
) -> Result<Vec<(&'static str, Vec<u8>)>, AllocError> {
    let high = cd.high_water();
    let mut w = vec![MAGIC_CD, VERSION, chunk_size, cd.len(), high];
    for c in 0..high {
        let k = cd.get(c);
        w.push(k.pack() as u64);
        if let ChunkKind::Small { bin } = k {
            let sc = &bins[bin as usize].chunks[&c];
            w.push(sc.used);
            w.extend_from_slice(sc.bits.leaves());
        }
    }
    let cd_bytes = write_words(&dir.join(CHUNK_DIR_FILE), w)?;
    let mut w = vec![MAGIC_BD, VERSION, bins.len() as u64];
    for b in bins {
        w.push(b.nonfull.len() as u64);
        w.extend_from_slice(&b.nonfull);
    }
    let bd_bytes = write_words(&dir.join(BIN_DIR_FILE), w)?;
    Ok(vec![(CHUNK_DIR_FILE, cd_bytes), (BIN_DIR_FILE, bd_bytes)])
}

/// Reads the management files into a chunk directory of `nchunks` entries
/// and `nbins` bins; `slots(bin)` is a bin's slots per chunk.
pub fn load(
    dir: &Path,
    chunk_size: u64,
    nchunks: u64,
    nbins: usize,
    slots: impl Fn(usize) -> u64,
) -> Result<(ChunkDirectory, Vec<Bin>), AllocError> {
    let p = dir.join(CHUNK_DIR_FILE);
    let mut r = Words::open(&p, MAGIC_CD)?;
    let cs = r.next()?;
    if cs != chunk_size {
        return Err(r.bad(&format!("chunk size {cs}, but this store is opened with {chunk_size}")));
    }
    let (n, high) = (r.next()?, r.next()?);
    if n != nchunks || high > n {
        return Err(r.bad(&format!("{n} chunks ({high} used) recorded, the heap has {nchunks}")));
    }
    let cd = ChunkDirectory::new(nchunks);
    let mut bins: Vec<Bin> = (0..nbins).map(|_| Bin::default()).collect();
    let mut c = 0;
    while c < high {
        let k = ChunkKind::unpack(r.next()? as u32).ok_or_else(|| r.bad("bad chunk entry"))?;
        cd.set(c, k);
        match k {
            ChunkKind::Small { bin } if (bin as usize) < nbins => {
                let used = r.next()?;
                let s = slots(bin as usize);
                let leaves: Vec<u64> = (0..s.div_ceil(64)).map(|_| r.next()).collect::<Result<_, _>>()?;
                let bits = MultiLayerBitset::from_leaves(s, &leaves).ok_or_else(|| r.bad("bad bitset"))?;
                let count: u64 = (0..s).filter(|&i| bits.test(i)).count() as u64;
                if count != used || used == 0 {
                    return Err(r.bad(&format!("chunk {c}: {used} slots recorded in use, bitset has {count}")));
                }
                bins[bin as usize].chunks.insert(c, SmallChunk { bits, used });
            }
            ChunkKind::LargeHead { span } => {
                if c + span as u64 > high {
                    return Err(r.bad(&format!("chunk {c}: large object past the last chunk")));
                }
                for b in c + 1..c + span as u64 {
                    if ChunkKind::unpack(r.next()? as u32) != Some(ChunkKind::LargeBody) {
                        return Err(r.bad(&format!("chunk {b}: expected the body of a large object")));
                    }
                    cd.set(b, ChunkKind::LargeBody);
                }
                c += span as u64 - 1;
            }
            ChunkKind::Empty => {}
            _ => return Err(r.bad(&format!("chunk {c}: unexpected entry {k:?}"))),
        }
        c += 1;
    }
    let p = dir.join(BIN_DIR_FILE);
    let mut r = Words::open(&p, MAGIC_BD)?;
    if r.next()? != nbins as u64 {
        return Err(r.bad("bin count does not match this configuration"));
    }
    for (i, b) in bins.iter_mut().enumerate() {
        let k = r.next()?;
        for _ in 0..k {
            let c = r.next()?;
            match b.chunks.get(&c) {
                Some(sc) if sc.used < sc.bits.len() => b.nonfull.push(c),
                _ => return Err(r.bad(&format!("bin {i} lists chunk {c}, which is no non-full chunk of it"))),
            }
        }
        let nonfull = b.chunks.values().filter(|sc| sc.used < sc.bits.len()).count();
        if nonfull != b.nonfull.len() {
            return Err(r.bad(&format!("bin {i} lists {} non-full chunks, the chunk directory has {nonfull}", k)));
        }
    }
    Ok((cd, bins))
}

/// How a snapshot copied the heap file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum CopyKind {
    /// `ioctl(FICLONE)`: blocks shared copy-on-write.
    Reflink,
    /// The filesystem cannot reflink: a full copy.
    Copy,
}

/// Copies `src` to a new file `dst`: a reflink where the filesystem supports
/// it (XFS, Btrfs, …), else a plain copy (tmpfs, ext4).
pub fn clone_file(src: &Path, dst: &Path) -> Result<CopyKind, AllocError> {
    let s = File::open(src).map_err(|e| io_err(src, "cannot open", e))?;
    let d = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dst)
        .map_err(|e| io_err(dst, "cannot create the snapshot", e))?;
    // SAFETY: FICLONE takes the source descriptor as its argument; both descriptors are open.
    let rc = unsafe { libc::ioctl(d.as_raw_fd(), libc::FICLONE, s.as_raw_fd()) };
    if rc == 0 {
        d.sync_all().map_err(|e| io_err(dst, "cannot sync", e))?;
        return Ok(CopyKind::Reflink);
    }
    drop(d);
    fs::copy(src, dst).map_err(|e| io_err(dst, "cannot copy the heap", e))?;
    File::open(dst).and_then(|f| f.sync_all()).map_err(|e| io_err(dst, "cannot sync", e))?;
    Ok(CopyKind::Copy)
}
