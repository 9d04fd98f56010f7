//! Where pmsim writes: one policy for every file a command creates, so that
//! nothing the user had is lost.
//!
//! * [`Policy::check`], called when a command starts (before any work): an
//!   existing file is refused unless the command was given `--force`; a file
//!   the command reads (its inputs), a file inside a directory whose files are
//!   bookkeeping (a sweep's `shards/`, its `experiment.json`) and anything
//!   that is not a regular file (a device node, a directory) are refused
//!   always; two outputs of one command may not be the same file.
//! * [`Output`]: the file is written under a temporary name in the same
//!   directory and renamed into place by [`Output::commit`]; dropped without
//!   a commit (any error path) it removes its temporary file, and a signal
//!   handler removes every temporary file still registered
//!   ([`remove_temporaries`]). Without `--force` the rename does not replace a
//!   file that appeared meanwhile.
//! * [`OutputDir`]: the same for a directory another program fills (gem5's
//!   output directory): made under a temporary name, renamed into place
//!   when the program succeeded, removed otherwise.
//! * [`Lock`]: one writer at a time. A `flock` on a lock file beside the
//!   output (or inside a sweep directory); a second writer is refused at once
//!   with one line naming the holder's pid. The kernel drops the lock when
//!   its process dies, so a killed writer never blocks the next one.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The error of the policy: one line naming the file.
pub type OutputError = String;

/// `name` as a plain file name: not empty, no `/`, not `.` or `..`, no NUL,
/// not hidden (an experiment name becomes a file name in reports and sweep
/// directories, so `../../victim` must not reach outside them).
pub fn plain_name(what: &str, name: &str) -> Result<(), OutputError> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('.')
        && !name.contains(['/', '\\', '\0'])
        && !name.chars().any(char::is_control);
    if ok {
        Ok(())
    } else {
        Err(format!("{what} {name:?} is not a plain file name (letters, digits, '-', '_'; no '/', no leading '.')"))
    }
}

/// Whether process `pid` exists (a stale temporary or lock names a pid that
/// does not).
pub fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 || *libc::__errno_location() == libc::EPERM }
}

/// What a command may write over.
#[derive(Debug, Default)]
pub struct Policy {
    force: bool,
    /// (device, inode, as named) of every input that exists.
    inputs: Vec<(u64, u64, PathBuf)>,
    /// Canonical directories nothing is written into, with why.
    guarded: Vec<(PathBuf, String)>,
    /// Canonical paths of the outputs checked so far.
    outputs: Vec<PathBuf>,
}

impl Policy {
    /// `force`: the command's `--force` (replace an existing regular file).
    pub fn new(force: bool) -> Policy {
        Policy { force, ..Policy::default() }
    }

    pub fn force(&self) -> bool {
        self.force
    }

    /// A file the command reads: it is never written over, even with `--force`.
    pub fn input(&mut self, p: &Path) -> &mut Policy {
        if let Ok(m) = fs::metadata(p) {
            self.inputs.push((m.dev(), m.ino(), p.to_path_buf()));
        }
        self
    }

    /// A directory whose files are another tool's bookkeeping: nothing is
    /// written into it (or below it).
    pub fn guard_dir(&mut self, dir: &Path, why: &str) -> &mut Policy {
        if let Ok(c) = fs::canonicalize(dir) {
            self.guarded.push((c, why.to_string()));
        }
        self
    }

    /// Checks that `path` may be written, before any work starts.
    pub fn check(&mut self, path: &Path) -> Result<(), OutputError> {
        let name = path.display();
        if path.file_name().is_none() || path.as_os_str().as_bytes().ends_with(b"/") {
            return Err(format!("{name}: not a file name"));
        }
        let parent = parent_of(path);
        let cparent = fs::canonicalize(&parent)
            .map_err(|e| format!("{name}: cannot create: directory {}: {e}", parent.display()))?;
        if !cparent.is_dir() {
            return Err(format!("{name}: {} is not a directory", parent.display()));
        }
        for (g, why) in &self.guarded {
            if cparent.starts_with(g) {
                return Err(format!("{name}: inside {} ({why}); write it elsewhere", g.display()));
            }
        }
        let full = cparent.join(path.file_name().expect("checked above"));
        if self.outputs.contains(&full) {
            return Err(format!("{name}: named twice as an output of this command"));
        }
        match fs::metadata(path) {
            Ok(m) => {
                if let Some((_, _, p)) = self.inputs.iter().find(|(d, i, _)| *d == m.dev() && *i == m.ino()) {
                    return Err(format!("{name}: is an input of this command ({}); write it elsewhere", p.display()));
                }
                for (g, why) in &self.guarded {
                    if fs::canonicalize(path).is_ok_and(|c| c.starts_with(g)) {
                        return Err(format!("{name}: inside {} ({why}); write it elsewhere", g.display()));
                    }
                }
                if !m.is_file() {
                    return Err(format!(
                        "{name}: exists and is not a regular file ({}); pmsim writes only regular files",
                        kind(&m)
                    ));
                }
                if !self.force {
                    return Err(format!("{name}: already exists (--force replaces it)"));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if fs::symlink_metadata(path).is_ok() {
                    return Err(format!("{name}: a dangling symbolic link; pmsim writes only regular files"));
                }
            }
            Err(e) => return Err(format!("{name}: {e}")),
        }
        self.outputs.push(full);
        Ok(())
    }

    /// Whether `path` was checked already ([`Policy::check`], [`Policy::check_dir`]).
    fn checked(&self, path: &Path) -> bool {
        fs::canonicalize(parent_of(path))
            .is_ok_and(|p| path.file_name().is_some_and(|n| self.outputs.contains(&p.join(n))))
    }

    /// Checks `path` (unless [`Policy::check`] already did) and opens it for
    /// writing under a temporary name.
    pub fn create(&mut self, path: &Path) -> Result<Output, OutputError> {
        if !self.checked(path) {
            self.check(path)?;
        }
        Output::create(path, self.force).map_err(|e| format!("{}: cannot create: {e}", path.display()))
    }

    /// Checks that the directory `path` may be made (another program's
    /// output directory, e.g. gem5's `-d`), before any work starts: an
    /// existing directory only with `--force`, never an input or guarded
    /// directory, never something that is not a directory.
    pub fn check_dir(&mut self, path: &Path) -> Result<(), OutputError> {
        let name = path.display();
        let Some(base) = path.file_name() else { return Err(format!("{name}: not a directory name")) };
        let parent = parent_of(path);
        let cparent = fs::canonicalize(&parent)
            .map_err(|e| format!("{name}: cannot create: directory {}: {e}", parent.display()))?;
        let full = cparent.join(base);
        for (g, why) in &self.guarded {
            if full.starts_with(g) || g.starts_with(&full) {
                return Err(format!("{name}: inside {} ({why}); write it elsewhere", g.display()));
            }
        }
        if self.outputs.contains(&full) {
            return Err(format!("{name}: named twice as an output of this command"));
        }
        match fs::symlink_metadata(path) {
            Ok(m) if !m.is_dir() => {
                return Err(format!(
                    "{name}: exists and is not a directory ({}); pmsim replaces only directories",
                    kind(&m)
                ))
            }
            Ok(_) => {
                if let Some((_, _, p)) =
                    self.inputs.iter().find(|(_, _, p)| fs::canonicalize(p).is_ok_and(|c| c.starts_with(&full)))
                {
                    return Err(format!(
                        "{name}: holds an input of this command ({}); write it elsewhere",
                        p.display()
                    ));
                }
                if !self.force {
                    return Err(format!("{name}: already exists (--force replaces it)"));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("{name}: {e}")),
        }
        self.outputs.push(full);
        Ok(())
    }

    /// Checks the directory `path` (unless [`Policy::check_dir`] already did)
    /// and makes it under a temporary name.
    pub fn create_dir(&mut self, path: &Path) -> Result<OutputDir, OutputError> {
        if !self.checked(path) {
            self.check_dir(path)?;
        }
        OutputDir::create(path, self.force).map_err(|e| format!("{}: cannot create: {e}", path.display()))
    }

    /// Checks `path`, then writes `bytes` to it (temporary file, sync, rename).
    pub fn write(&mut self, path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
        let mut o = self.create(path)?;
        let named = |e: io::Error| format!("{}: cannot write: {e}", path.display());
        o.write_all(bytes).map_err(named)?;
        o.commit().map_err(named)
    }
}

/// Describes what a non-regular file is.
fn kind(m: &fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_fifo() {
        "a pipe"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// The directory a path is in (`.` for a bare name).
fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A sibling of `path` named `.NAME.PID.SUFFIX` (hidden, so a listing of the
/// directory shows only finished files).
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut n = OsString::from(".");
    n.push(path.file_name().unwrap_or_default());
    n.push(format!(".{}.{suffix}", std::process::id()));
    parent_of(path).join(n)
}

/// Temporary files not yet renamed into place or removed, for the signal handler.
static TEMPORARIES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn register(p: &Path) {
    TEMPORARIES.lock().unwrap_or_else(|e| e.into_inner()).push(p.to_path_buf());
}

fn unregister(p: &Path) {
    let mut t = TEMPORARIES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = t.iter().position(|q| q == p) {
        t.swap_remove(i);
    }
}

/// Removes every temporary file of this process not yet renamed into place
/// (called when the process is interrupted).
pub fn remove_temporaries() {
    let t = TEMPORARIES.lock().unwrap_or_else(|e| e.into_inner());
    for p in t.iter() {
        remove_any(p);
    }
}

/// Removes a temporary file or directory (not following a symbolic link).
fn remove_any(p: &Path) {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => {
            let _ = fs::remove_dir_all(p);
        }
        Ok(_) => {
            let _ = fs::remove_file(p);
        }
        Err(_) => {}
    }
}

/// A file being written: under a temporary name beside its destination until
/// [`Output::commit`]; removed if dropped before.
#[derive(Debug)]
pub struct Output {
    path: PathBuf,
    tmp: PathBuf,
    file: Option<File>,
    replace: bool,
}

impl Output {
    /// Opens a temporary file beside `path`; `replace`: the commit may replace
    /// an existing file (the command's `--force`, already checked).
    pub fn create(path: &Path, replace: bool) -> io::Result<Output> {
        let tmp = sibling(path, "tmp");
        register(&tmp);
        let file = match OpenOptions::new().write(true).create(true).truncate(true).open(&tmp) {
            Ok(f) => f,
            Err(e) => {
                unregister(&tmp);
                return Err(e);
            }
        };
        Ok(Output { path: path.to_path_buf(), tmp, file: Some(file), replace })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The temporary file, for a writer in another process (the Valgrind
    /// tool) that opens it by name; the commit renames whatever it wrote.
    pub fn tmp_path(&self) -> &Path {
        &self.tmp
    }

    pub fn file(&mut self) -> &mut File {
        self.file.as_mut().expect("an output is open until committed")
    }

    /// Takes the open file out (to wrap it in a writer); give it back to
    /// [`Output::commit_file`].
    pub fn take_file(&mut self) -> File {
        self.file.take().expect("an output is open until committed")
    }

    /// Syncs the file and renames it into place.
    pub fn commit(mut self) -> io::Result<()> {
        let f = self.file.take().expect("an output is open until committed");
        self.commit_file(f)
    }

    /// Syncs `f` (the file [`Output::take_file`] took) and renames it into place.
    pub fn commit_file(self, f: File) -> io::Result<()> {
        self.commit_with(f, true)
    }

    /// Renames `f` into place; `sync: false` for derived data made again
    /// from its input if a crash loses it (an export of gigabytes).
    pub fn commit_with(mut self, f: File, sync: bool) -> io::Result<()> {
        if sync {
            f.sync_all()?;
        }
        drop(f);
        rename(&self.tmp, &self.path, self.replace)?;
        unregister(&self.tmp);
        self.tmp = PathBuf::new();
        Ok(())
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file().write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file().flush()
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            let _ = fs::remove_file(&self.tmp);
            unregister(&self.tmp);
        }
    }
}

/// Renames `from` to `to`; without `replace`, fails if `to` exists.
fn rename(from: &Path, to: &Path, replace: bool) -> io::Result<()> {
    if replace {
        return fs::rename(from, to);
    }
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other);
    let (f, t) = (c(from)?, c(to)?);
    // SAFETY: two NUL-terminated paths relative to the working directory.
    let r = unsafe { libc::renameat2(libc::AT_FDCWD, f.as_ptr(), libc::AT_FDCWD, t.as_ptr(), libc::RENAME_NOREPLACE) };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EEXIST) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "a file of this name appeared while pmsim was writing it (kept; --force replaces it)",
        )),
        // A file system without RENAME_NOREPLACE: a hard link fails on an
        // existing name just the same.
        Some(libc::EINVAL) | Some(libc::ENOSYS) => fs::hard_link(from, to).and_then(|_| fs::remove_file(from)),
        _ => Err(e),
    }
}

/// A directory being filled (by pmsim or a program it runs): under a
/// temporary name beside its destination until [`OutputDir::commit`];
/// removed with its contents if dropped before, so a failed run leaves the
/// old directory, if any, as it was.
#[derive(Debug)]
pub struct OutputDir {
    path: PathBuf,
    tmp: PathBuf,
    replace: bool,
}

impl OutputDir {
    /// Makes a temporary directory beside `path`; `replace`: the commit may
    /// replace an existing directory (the command's `--force`, already checked).
    pub fn create(path: &Path, replace: bool) -> io::Result<OutputDir> {
        let tmp = sibling(path, "tmp");
        register(&tmp);
        remove_any(&tmp);
        if let Err(e) = fs::create_dir(&tmp) {
            unregister(&tmp);
            return Err(e);
        }
        Ok(OutputDir { path: path.to_path_buf(), tmp, replace })
    }

    /// Where the directory is filled until the commit.
    pub fn tmp_path(&self) -> &Path {
        &self.tmp
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the directory into place. A directory replaced (`--force`) is
    /// first moved aside and removed only once the new one is in place.
    pub fn commit(mut self) -> io::Result<()> {
        let old = sibling(&self.path, "old");
        let moved = self.replace && fs::symlink_metadata(&self.path).is_ok_and(|m| m.is_dir());
        if moved {
            register(&old);
            fs::rename(&self.path, &old)?;
        }
        if let Err(e) = rename(&self.tmp, &self.path, false) {
            if moved {
                let _ = fs::rename(&old, &self.path);
                unregister(&old);
            }
            return Err(e);
        }
        if moved {
            remove_any(&old);
            unregister(&old);
        }
        unregister(&self.tmp);
        self.tmp = PathBuf::new();
        Ok(())
    }
}

impl Drop for OutputDir {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            remove_any(&self.tmp);
            unregister(&self.tmp);
        }
    }
}

/// An exclusive `flock` held while one writer writes a file or a directory.
#[derive(Debug)]
pub struct Lock {
    file: File,
    path: PathBuf,
    /// Remove the lock file on release (a lock beside a single output).
    remove: bool,
}

impl Lock {
    /// Locks the output `path` through `.NAME.lock` beside it (removed on
    /// release); `Err` names the holder's pid.
    pub fn output(path: &Path) -> Result<Lock, OutputError> {
        let mut n = OsString::from(".");
        n.push(path.file_name().unwrap_or_default());
        n.push(".lock");
        let lock = Self::acquire(&parent_of(path).join(n), path, true)?;
        register(&lock.path);
        remove_stale_temporaries(path);
        Ok(lock)
    }

    /// Locks a directory through its lock file `DIR/.lock` (kept: it is the
    /// directory's own bookkeeping).
    pub fn dir(dir: &Path) -> Result<Lock, OutputError> {
        Self::dir_part(dir, ".lock")
    }

    /// Locks one part of a directory through the lock file `DIR/NAME` (kept),
    /// so writers of different parts (a sweep's shards) may run at once.
    pub fn dir_part(dir: &Path, name: &str) -> Result<Lock, OutputError> {
        Self::acquire(&dir.join(name), dir, false)
    }

    fn acquire(lock: &Path, target: &Path, remove: bool) -> Result<Lock, OutputError> {
        let name = target.display();
        loop {
            let mut file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(lock)
                .map_err(|e| format!("{name}: cannot open its lock file {}: {e}", lock.display()))?;
            // SAFETY: a valid open descriptor.
            if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                    return Err(format!("{name}: cannot lock {}: {e}", lock.display()));
                }
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let holder = match pid.trim() {
                    "" => "another process".to_string(),
                    p => format!("pid {p}"),
                };
                return Err(format!("{name}: being written by another pmsim ({holder}); wait for it to end"));
            }
            // A releasing writer may have removed the file between our open
            // and our lock: then the lock is on a name nobody else sees.
            let same = match (file.metadata(), fs::metadata(lock)) {
                (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
                _ => false,
            };
            if !same {
                continue;
            }
            let pid = format!("{}\n", std::process::id());
            let _ = file.set_len(0);
            let _ = file.rewind();
            let _ = file.write_all(pid.as_bytes());
            return Ok(Lock { file, path: lock.to_path_buf(), remove });
        }
    }
}

/// Removes the temporary files `.NAME.PID.tmp` beside `path` whose writer is
/// gone (killed with SIGKILL); called by the next writer, holding the lock.
fn remove_stale_temporaries(path: &Path) {
    let Some(name) = path.file_name() else { return };
    let mut prefix = b".".to_vec();
    prefix.extend_from_slice(name.as_bytes());
    prefix.push(b'.');
    let Ok(rd) = fs::read_dir(parent_of(path)) else { return };
    for e in rd.flatten() {
        let n = e.file_name();
        let Some(rest) = n.as_bytes().strip_prefix(prefix.as_slice()) else { continue };
        let Some(pid) = rest
            .strip_suffix(b".tmp")
            .or_else(|| rest.strip_suffix(b".old"))
            .and_then(|p| std::str::from_utf8(p).ok()?.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !pid_alive(pid) {
            remove_any(&e.path());
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if self.remove {
            unregister(&self.path);
            // Removed while still locked, so no one locks the old inode after.
            let _ = fs::remove_file(&self.path);
        } else {
            let _ = self.file.set_len(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_refuses_what_it_must() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        fs::write(&a, b"x").unwrap();
        let mut p = Policy::new(false);
        assert!(p.check(&a).unwrap_err().contains("already exists"));
        let mut p = Policy::new(true);
        p.input(&a);
        assert!(p.check(&a).unwrap_err().contains("input"));
        let mut p = Policy::new(true);
        assert!(p.check(Path::new("/dev/null")).unwrap_err().contains("not a regular file"));
        let mut p = Policy::new(true);
        p.guard_dir(d.path(), "bookkeeping");
        assert!(p.check(&d.path().join("new")).unwrap_err().contains("bookkeeping"));
        let mut p = Policy::new(false);
        let b = d.path().join("b");
        p.check(&b).unwrap();
        assert!(p.check(&b).unwrap_err().contains("twice"));
        assert!(plain_name("name", "../x").is_err() && plain_name("name", "ok-1").is_ok());
    }

    #[test]
    fn output_is_renamed_or_removed() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        let mut o = Output::create(&a, false).unwrap();
        o.write_all(b"data").unwrap();
        drop(o);
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 0, "an uncommitted output leaves nothing");
        let mut o = Output::create(&a, false).unwrap();
        o.write_all(b"data").unwrap();
        o.commit().unwrap();
        assert_eq!(fs::read(&a).unwrap(), b"data");
        let o = Output::create(&a, false).unwrap();
        assert!(o.commit().is_err(), "no replace without force");
        assert_eq!(fs::read(&a).unwrap(), b"data");
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn output_dir_is_renamed_or_removed_and_replaces_only_with_force() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("out");
        fs::create_dir(&a).unwrap();
        fs::write(a.join("old"), b"old").unwrap();
        assert!(Policy::new(false).check_dir(&a).unwrap_err().contains("already exists"));
        let f = d.path().join("file");
        fs::write(&f, b"x").unwrap();
        assert!(Policy::new(true).check_dir(&f).unwrap_err().contains("not a directory"));
        let mut p = Policy::new(true);
        let o = p.create_dir(&a).unwrap();
        fs::write(o.tmp_path().join("new"), b"new").unwrap();
        drop(o);
        assert_eq!(fs::read(a.join("old")).unwrap(), b"old", "a dropped directory leaves the old one");
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 2, "and no temporary");
        let o = OutputDir::create(&a, true).unwrap();
        fs::write(o.tmp_path().join("new"), b"new").unwrap();
        o.commit().unwrap();
        assert!(a.join("new").exists() && !a.join("old").exists());
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 2);
        let o = OutputDir::create(&a, false).unwrap();
        assert!(o.commit().is_err(), "no replace without force");
        assert!(a.join("new").exists());
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 2);
    }

    #[test]
    fn second_lock_names_the_holder() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        let l = Lock::output(&a).unwrap();
        // flock locks belong to open file descriptions: a second open in this
        // process conflicts as another process would.
        let e = Lock::output(&a).unwrap_err();
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        drop(l);
        let _l = Lock::output(&a).unwrap();
        let dl = Lock::dir(d.path()).unwrap();
        assert!(Lock::dir(d.path()).is_err());
        drop(dl);
    }
}
