//! Directories pmsim made, and the proof of it: pmsim deletes only what it
//! made.
//!
//! Every scratch file (a run's heap, a crash image, TLC's state files, a
//! log) and every temporary output (a trace being written, the old copy of
//! a directory being replaced) lives inside an [`OwnedDir`]: a directory
//! made fresh (`mkdir`, so never one that existed), holding a stamp file
//! [`STAMP`] that names pmsim and that its process keeps `flock`ed for as
//! long as the directory is in use. The kernel drops that lock when the
//! process dies, however it dies. So a directory is a dead pmsim's leftover
//! exactly when its stamp says pmsim and nobody holds the stamp's lock, and
//! [`remove_stale`] removes only such directories: a user's
//! `/tmp/pmsim-1-x`, a file `/dev/shm/pmsim-40001-notes.txt` or a heap kept
//! on purpose carry no stamp and are never touched, whatever their names.
//! One more leftover is removed: a directory whose pmsim was killed between
//! the `mkdir` and the end of its stamp, named exactly as pmsim names them
//! for a process that is gone and holding nothing but that stamp, empty or
//! cut short (nothing a user could have put there).
//!
//! Two kinds live here:
//! * the per-process scratch directories, `pmsim-PID-TOKEN` under
//!   `/dev/shm` (memory, as a DAX mount would be) and under the temporary
//!   directory, made on first use ([`scratch_dir`]);
//! * staging directories beside an output (`.pmsim-PID-TOKEN`), made by
//!   [`crate::output`] so that an output is renamed into place in the same
//!   file system.
//!
//! A process interrupted by a signal removes its own directories
//! ([`remove_all_live`]); one killed outright leaves them to the next pmsim
//! ([`remove_stale_scratch`], and [`remove_stale`] on an output's directory
//! before writing there).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The stamp file inside an owned directory.
pub const STAMP: &str = ".pmsim-owner";

/// The stamp's first line: what proves a directory is pmsim's.
const MAGIC: &str = "pmsim made this directory and removes it when done";

/// Where per-process scratch goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// `/dev/shm` when it is a writable directory (memory, as a DAX mount
    /// would be: heaps, pools, crash images), else the temporary directory.
    Memory,
    /// The temporary directory (`$TMPDIR`, else `/tmp`): logs, TLC's files.
    Temp,
}

/// A directory this process made, stamped and locked. Dropped, it is
/// removed with everything in it.
#[derive(Debug)]
pub struct OwnedDir {
    path: PathBuf,
    /// The stamp, open and `flock`ed: the proof of a live owner.
    _stamp: File,
    /// Removed already (its contents moved away and the directory gone).
    gone: bool,
}

/// A short token that makes a new name unlikely to exist (`mkdir` refuses
/// one that does, and another token is tried).
pub fn token() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mut x = t ^ (u64::from(std::process::id()) << 32) ^ N.fetch_add(1, Ordering::Relaxed).wrapping_mul(0x9e37_79b9);
    // splitmix64's finaliser: neighbouring inputs, unrelated outputs.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    format!("{:08x}", (x ^ (x >> 31)) as u32)
}

/// Paths of the owned directories alive in this process, for the signal
/// handler.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

impl OwnedDir {
    /// Makes a new directory `parent/PREFIXPID-TOKEN` (mode 0700), stamps
    /// it and locks the stamp. Never reuses an existing entry. The directory
    /// is made and listed under the list's lock, which an interrupted
    /// process's handler takes for good: a directory is either listed for
    /// the handler to remove or never made.
    pub fn create(parent: &Path, prefix: &str) -> io::Result<OwnedDir> {
        let mut last = None;
        for _ in 0..16 {
            let path = parent.join(format!("{prefix}{}-{}", std::process::id(), token()));
            {
                let mut l = live();
                if crate::stop::stopping() {
                    return Err(io::Error::new(io::ErrorKind::Interrupted, "interrupted: nothing more is made"));
                }
                match fs::DirBuilder::new().mode(0o700).create(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                        last = Some(e);
                        continue;
                    }
                    Err(e) => return Err(e),
                }
                l.push(path.clone());
            }
            return match stamp(&path) {
                Ok(f) => Ok(OwnedDir { path, _stamp: f, gone: false }),
                Err(e) => {
                    forget(&path);
                    let _ = fs::remove_dir_all(&path);
                    Err(e)
                }
            };
        }
        Err(last.unwrap_or_else(|| io::Error::other("no free name")))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the directory and everything in it now. It stays listed
    /// until it is gone: a process interrupted meanwhile (and ended by its
    /// handler before this thread is done) has its handler remove it too.
    pub fn remove(mut self) -> io::Result<()> {
        self.gone = true;
        let r = remove_contents(&self.path);
        forget(&self.path);
        r
    }
}

impl Drop for OwnedDir {
    fn drop(&mut self) {
        if !self.gone {
            let _ = remove_contents(&self.path);
            forget(&self.path);
        }
    }
}

fn forget(p: &Path) {
    let mut l = live();
    if let Some(i) = l.iter().position(|q| q == p) {
        l.swap_remove(i);
    }
}

/// Creates, locks and fills the stamp of the fresh directory `dir`.
fn stamp(dir: &Path) -> io::Result<File> {
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o600)
        .open(dir.join(STAMP))?;
    // Blocking: a cleaner that opened the stamp before it had content holds
    // the lock only while it reads it (and then leaves the directory alone).
    flock(&f, libc::LOCK_EX)?;
    writeln!(f, "{MAGIC}\npid {}", std::process::id())?;
    Ok(f)
}

/// `flock(2)`, retried when a signal interrupts it.
pub(crate) fn flock(f: &File, op: libc::c_int) -> io::Result<()> {
    loop {
        // SAFETY: a valid open descriptor.
        if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Removes what is in `dir`, then its stamp, then `dir` (so a directory that
/// could not be emptied keeps its stamp and is found again as stale).
fn remove_contents(dir: &Path) -> io::Result<()> {
    let mut first = None;
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_name() == STAMP {
                continue;
            }
            let p = e.path();
            let r = match e.file_type() {
                Ok(t) if t.is_dir() => fs::remove_dir_all(&p),
                _ => fs::remove_file(&p),
            };
            // Gone already: removed by the interrupt handler and the
            // thread that owns the directory at once.
            match r {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    first.get_or_insert(e);
                }
                _ => {}
            }
        }
    }
    if let Some(e) = first {
        return Err(e);
    }
    let _ = fs::remove_file(dir.join(STAMP));
    match fs::remove_dir(dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Whether process `pid` exists (a stale temporary or lock names a pid that
/// does not).
pub fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 || *libc::__errno_location() == libc::EPERM }
}

/// Whether `dir` is a directory pmsim made whose owner is gone; if so it is
/// removed (holding the stamp's lock meanwhile). A user's entry of any name
/// is left alone: it is not a directory of this user, or has no stamp, or
/// its stamp is not pmsim's.
fn remove_if_stale(dir: &Path) -> bool {
    let Ok(m) = fs::symlink_metadata(dir) else { return false };
    // SAFETY: geteuid cannot fail.
    if !m.is_dir() || m.uid() != unsafe { libc::geteuid() } {
        return false;
    }
    let Ok(mut f) =
        OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(dir.join(STAMP))
    else {
        return remove_if_unstamped(dir);
    };
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return false;
    }
    // A live owner holds the lock.
    if flock(&f, libc::LOCK_EX | libc::LOCK_NB).is_err() {
        return false;
    }
    let mut head = [0u8; MAGIC.len()];
    if f.read_exact(&mut head).is_err() || head != *MAGIC.as_bytes() {
        drop(f);
        return remove_if_unstamped(dir);
    }
    remove_contents(dir).is_ok()
}

/// A directory whose pmsim was killed between making it and finishing its
/// stamp ([`OwnedDir::create`]): named as pmsim names them, for a process
/// that is gone, and holding nothing but a stamp still empty or cut short
/// (a beginning of the magic line). Removed; anything else in it, or any
/// other name, and it is left alone: it holds nothing a user could have
/// put there.
fn remove_if_unstamped(dir: &Path) -> bool {
    let Some(pid) = dir.file_name().and_then(|n| n.to_str()).and_then(pid_of_name) else { return false };
    if pid_alive(pid) {
        return false;
    }
    let Ok(rd) = fs::read_dir(dir) else { return false };
    for e in rd.flatten() {
        let partial_stamp = e.file_name() == STAMP
            && e.file_type().is_ok_and(|t| t.is_file())
            && fs::read(e.path()).is_ok_and(|b| MAGIC.as_bytes().starts_with(&b));
        if !partial_stamp {
            return false;
        }
    }
    let _ = fs::remove_file(dir.join(STAMP));
    fs::remove_dir(dir).is_ok()
}

/// The pid in a name pmsim gives its directories (`PREFIX{pid}-{8 hex}`,
/// the prefix `pmsim-` with or without a leading dot).
fn pid_of_name(name: &str) -> Option<u32> {
    let rest = name.strip_prefix('.').unwrap_or(name).strip_prefix(SCRATCH_PREFIX)?;
    let (pid, tok) = rest.split_once('-')?;
    let hex = tok.len() == 8 && tok.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
    (hex && !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit())).then(|| pid.parse().ok()).flatten()
}

/// Removes the directories `parent/PREFIX…` that a pmsim process made and
/// that no living process holds any more; returns how many. Nothing else
/// is touched, whatever its name.
pub fn remove_stale(parent: &Path, prefix: &str) -> usize {
    let Ok(rd) = fs::read_dir(parent) else { return 0 };
    let mut n = 0;
    for e in rd.flatten() {
        if e.file_name().as_encoded_bytes().starts_with(prefix.as_bytes()) && remove_if_stale(&e.path()) {
            n += 1;
        }
    }
    n
}

/// Removes every owned directory of this process now (the signal handler's
/// thread calls it; worker threads may still be running). Returns those
/// that could not be removed entirely.
/// The list stays locked until the process ends, so no thread makes
/// another (see [`OwnedDir::create`]).
pub fn remove_all_live() -> Vec<PathBuf> {
    let l = live();
    let paths: Vec<PathBuf> = l.clone();
    std::mem::forget(l);
    paths.into_iter().filter(|p| remove_contents(p).is_err()).collect()
}

/// Removes what is left in `dir`, a directory the dead pmsim `pid` named as
/// its own (its cleaner calls this): only a directory of this user whose
/// name carries that pid as pmsim's names do.
pub fn remove_left_by(dir: &Path, pid: u32) {
    let ours = dir.file_name().and_then(|n| n.to_str()).and_then(pid_of_name) == Some(pid);
    // SAFETY: geteuid cannot fail.
    let mine = fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && m.uid() == unsafe { libc::geteuid() });
    if ours && mine {
        let _ = remove_contents(dir);
    }
}

/// The prefix of per-process scratch directories (`pmsim-PID-TOKEN`).
pub const SCRATCH_PREFIX: &str = "pmsim-";

/// This process's scratch directories, made on first use, by parent.
static SCRATCH: Mutex<Vec<(PathBuf, OwnedDir)>> = Mutex::new(Vec::new());

/// The parent of the scratch directories of `place`.
fn place_root(place: Place) -> PathBuf {
    let tmp = std::env::temp_dir();
    if place == Place::Memory {
        let shm = Path::new("/dev/shm");
        // SAFETY: access(2) with a NUL-terminated path.
        let writable = unsafe { libc::access(c"/dev/shm".as_ptr(), libc::W_OK | libc::X_OK) } == 0;
        if shm.is_dir() && writable {
            return shm.to_path_buf();
        }
    }
    tmp
}

/// This process's scratch directory in `place` (made, stamped and locked on
/// first use; removed when the process ends normally, by its signal handler
/// when interrupted, or by the next pmsim when it was killed).
pub fn scratch_dir(place: Place) -> io::Result<PathBuf> {
    scratch_dir_in(&place_root(place))
}

/// This process's scratch directory under `parent` (a PM directory of the
/// user's, say), made on first use as [`scratch_dir`] makes its own; the
/// dead processes' ones there are removed first. A `parent` inside a
/// directory this process owns already is private enough: it is returned
/// as it is.
pub fn scratch_dir_in(parent: &Path) -> io::Result<PathBuf> {
    let canon = fs::canonicalize(parent)?;
    if live().iter().any(|d| fs::canonicalize(d).is_ok_and(|d| canon.starts_with(d))) {
        return Ok(parent.to_path_buf());
    }
    let mut s = SCRATCH.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, d)) = s.iter().find(|(p, _)| *p == canon) {
        return Ok(d.path().to_path_buf());
    }
    remove_stale(&canon, SCRATCH_PREFIX);
    let d = OwnedDir::create(&canon, SCRATCH_PREFIX)?;
    let p = d.path().to_path_buf();
    s.push((canon, d));
    // A process other than pmsim's main (a test binary, a program linking
    // the library) ends without calling remove_own_scratch: exit(3) does.
    static AT_EXIT: std::sync::Once = std::sync::Once::new();
    AT_EXIT.call_once(|| {
        extern "C" fn at_exit() {
            remove_own_scratch();
        }
        // SAFETY: registers a function without arguments that only takes
        // a lock and removes directories.
        unsafe { libc::atexit(at_exit) };
    });
    Ok(p)
}

/// A fresh path in this process's scratch directory of `place`: `NAME` with
/// a token that keeps concurrent users of one name apart.
pub fn scratch_path(place: Place, name: &str) -> io::Result<PathBuf> {
    Ok(scratch_dir(place)?.join(format!("{}-{name}", token())))
}

/// Removes this process's scratch directories (at the end of `main`).
pub fn remove_own_scratch() {
    let dirs: Vec<(PathBuf, OwnedDir)> = std::mem::take(&mut *SCRATCH.lock().unwrap_or_else(|e| e.into_inner()));
    drop(dirs);
}

/// Removes the scratch directories pmsim processes that are gone left
/// (killed with SIGKILL, or by a crash of the machine); called when a
/// command starts.
pub fn remove_stale_scratch() -> usize {
    let mut roots = vec![place_root(Place::Memory)];
    let t = place_root(Place::Temp);
    if !roots.contains(&t) {
        roots.push(t);
    }
    roots.iter().map(|r| remove_stale(r, SCRATCH_PREFIX)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_stamped_unlocked_directories_are_stale() {
        let d = tempfile::tempdir().unwrap();
        // The user's entries named like pmsim's.
        fs::create_dir(d.path().join("pmsim-1-x")).unwrap();
        fs::write(d.path().join("pmsim-1-x/data"), b"mine").unwrap();
        fs::write(d.path().join("pmsim-2-notes.txt"), b"mine").unwrap();
        fs::create_dir(d.path().join("pmsim-3-fake")).unwrap();
        fs::write(d.path().join("pmsim-3-fake").join(STAMP), b"not pmsim's").unwrap();
        let live = OwnedDir::create(d.path(), "pmsim-").unwrap();
        fs::write(live.path().join("heap"), b"x").unwrap();
        assert_eq!(remove_stale(d.path(), "pmsim-"), 0, "a live owner's directory stays");
        // A dead owner's: its stamp without a lock (the lock is the open
        // description; dropping the File releases it as death would).
        let mut dead = OwnedDir::create(d.path(), "pmsim-").unwrap();
        let dead_path = dead.path().to_path_buf();
        dead.gone = true;
        forget(&dead_path);
        drop(dead);
        assert!(dead_path.join(STAMP).exists());
        assert_eq!(remove_stale(d.path(), "pmsim-"), 1);
        assert!(!dead_path.exists());
        assert!(live.path().join("heap").exists());
        assert_eq!(fs::read(d.path().join("pmsim-1-x/data")).unwrap(), b"mine");
        assert_eq!(fs::read(d.path().join("pmsim-2-notes.txt")).unwrap(), b"mine");
        assert!(d.path().join("pmsim-3-fake").join(STAMP).exists());
        let p = live.path().to_path_buf();
        drop(live);
        assert!(!p.exists(), "dropped, an owned directory is removed");
    }

    /// A pmsim killed between making its directory and finishing the stamp
    /// leaves it bare or with a stamp cut short: removed once its process
    /// is gone; the same with anything else in it, a living process's, or
    /// another name, stays.
    #[test]
    fn a_directory_its_dead_maker_never_stamped_is_removed() {
        let d = tempfile::tempdir().unwrap();
        // No process has pid 0x7fff_fff0 (above the kernel's pid_max).
        let dead = 2147483632u32;
        let bare = d.path().join(format!(".pmsim-{dead}-0a1b2c3d"));
        let cut = d.path().join(format!("pmsim-{dead}-deadbeef"));
        let full = d.path().join(format!(".pmsim-{dead}-01234567"));
        let living = d.path().join(format!(".pmsim-{}-89abcdef", std::process::id()));
        let odd = d.path().join(format!(".pmsim-{dead}-notatokn"));
        for p in [&bare, &cut, &full, &living, &odd] {
            fs::create_dir(p).unwrap();
        }
        fs::write(cut.join(STAMP), &MAGIC.as_bytes()[..10]).unwrap();
        fs::write(full.join(STAMP), b"").unwrap();
        fs::write(full.join("notes"), b"mine").unwrap();
        assert_eq!(remove_stale(d.path(), ".pmsim-") + remove_stale(d.path(), "pmsim-"), 2);
        assert!(!bare.exists() && !cut.exists());
        assert_eq!(fs::read(full.join("notes")).unwrap(), b"mine");
        assert!(living.exists() && odd.exists());
    }
}
