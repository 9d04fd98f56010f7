//! Where pmsim writes: one policy for every file a command creates, so that
//! nothing the user had is lost.
//!
//! * [`Policy::check`], called when a command starts (before any work): an
//!   existing file is refused unless the command was given `--force`; a file
//!   the command reads (its inputs), a file inside a directory whose files are
//!   bookkeeping (a sweep's `shards/`, its `experiment.json`), a symbolic
//!   link (pmsim writes the file a link names only when the user names that
//!   file) and anything that is not a regular file (a device node, a
//!   directory) are refused always; two outputs of one command may not be
//!   the same file. The check also takes the output's [`Lock`]: one writer
//!   per path, whatever the command.
//! * [`Staged`]: an output is made inside a staging directory of this
//!   process's beside it (`.pmsim-PID-TOKEN/`, an [`crate::owned::OwnedDir`],
//!   so its name cannot be one of the user's and a killed process's staging
//!   directory is removed by the next writer there) and renamed into place
//!   by [`Staged::commit`] only when the command succeeded; dropped without a
//!   commit (any error path) it is removed, and the old output, if any, is
//!   as it was. A directory replaced (`--force`) is swapped with the new one
//!   atomically and removed with the staging directory. Without `--force`
//!   the rename does not replace a file that appeared meanwhile, and once
//!   the process is being interrupted nothing is committed.
//! * [`Output`] (a file being written) and [`OutputDir`] (a directory
//!   another program fills, gem5's output directory) are staged outputs;
//!   [`Pending`] holds the finished outputs of a command, committed together
//!   at its end.
//! * [`Lock`]: one writer at a time. A `flock` on a lock file beside the
//!   output (or inside a sweep directory); a second writer is refused at once
//!   with one line naming the holder's pid. The kernel drops the lock when
//!   its process dies, so a killed writer never blocks the next one; a
//!   writer being interrupted marks its locks so (it ends within moments,
//!   once its children are gone), and the next writer waits for it instead
//!   of being refused with the pid of a process about to end. A lock
//!   file says it is pmsim's; a file of that name that does not (the
//!   user's), or a symbolic link, is refused, never written or removed.

use crate::owned::flock;
use crate::owned::OwnedDir;
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The error of the policy: one line naming the file.
pub type OutputError = String;

/// The prefix of staging directories beside outputs.
const STAGE_PREFIX: &str = ".pmsim-";

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
        Err(format!(
            "{what} {} is not a plain file name (letters, digits, '-', '_'; no '/', no leading '.')",
            crate::input::quoted(name)
        ))
    }
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
    /// The locks of the outputs checked, held as long as the policy.
    locks: Vec<Lock>,
}

/// A symbolic link at `path`: refused, naming where it points.
fn refuse_link(path: &Path) -> Result<(), OutputError> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            let to = fs::read_link(path).map(|t| t.display().to_string()).unwrap_or_else(|_| "?".into());
            Err(format!(
                "{}: is a symbolic link (to {to}); pmsim does not write through links: name the file itself",
                path.display()
            ))
        }
        _ => Ok(()),
    }
}

/// The canonical directory `path` goes into, checked to be one this
/// process may create entries in.
fn writable_parent(path: &Path) -> Result<PathBuf, OutputError> {
    let name = path.display();
    let parent = parent_of(path);
    let cparent =
        fs::canonicalize(&parent).map_err(|e| format!("{name}: cannot create: directory {}: {e}", parent.display()))?;
    if !cparent.is_dir() {
        return Err(format!("{name}: {} is not a directory", parent.display()));
    }
    let c = std::ffi::CString::new(cparent.as_os_str().as_bytes()).map_err(|e| format!("{name}: {e}"))?;
    // SAFETY: access(2) with a NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        let e = io::Error::last_os_error();
        return Err(format!("{name}: cannot create: directory {}: {e}", parent.display()));
    }
    // What killed writers left there (their staging directories) goes now.
    crate::owned::remove_stale(&cparent, STAGE_PREFIX);
    Ok(cparent)
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

    /// Checks that `path` may be written, before any work starts, and takes
    /// its lock (held as long as this policy).
    pub fn check(&mut self, path: &Path) -> Result<(), OutputError> {
        let name = path.display();
        if path.file_name().is_none() || path.as_os_str().as_bytes().ends_with(b"/") {
            return Err(format!("{name}: not a file name"));
        }
        let cparent = writable_parent(path)?;
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
                refuse_link(path)?;
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
        self.locks.push(Lock::output(path)?);
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

    /// Checks `path` (unless [`Policy::check`] already did) and reserves a
    /// temporary name for it, where the caller makes the file (a heap).
    pub fn stage(&mut self, path: &Path) -> Result<Staged, OutputError> {
        if !self.checked(path) {
            self.check(path)?;
        }
        Staged::new(path, self.force).map_err(|e| format!("{}: cannot create: {e}", path.display()))
    }

    /// Checks that the directory `path` may be made (another program's
    /// output directory, e.g. gem5's `-d`), before any work starts: an
    /// existing directory only with `--force`, never an input or guarded
    /// directory, never something that is not a directory or a link.
    pub fn check_dir(&mut self, path: &Path) -> Result<(), OutputError> {
        let name = path.display();
        let Some(base) = path.file_name() else { return Err(format!("{name}: not a directory name")) };
        let cparent = writable_parent(path)?;
        let full = cparent.join(base);
        for (g, why) in &self.guarded {
            if full.starts_with(g) || g.starts_with(&full) {
                return Err(format!("{name}: inside {} ({why}); write it elsewhere", g.display()));
            }
        }
        if self.outputs.contains(&full) {
            return Err(format!("{name}: named twice as an output of this command"));
        }
        refuse_link(path)?;
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
        self.locks.push(Lock::output(path)?);
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
        self.stage_bytes(path, bytes)?.commit().map_err(|e| format!("{}: cannot write: {e}", path.display()))
    }

    /// Checks `path` and writes `bytes` under its temporary name (synced),
    /// to be committed with the command's other outputs.
    pub fn stage_bytes(&mut self, path: &Path, bytes: &[u8]) -> Result<Staged, OutputError> {
        let mut o = self.create(path)?;
        let named = |e: io::Error| format!("{}: cannot write: {e}", path.display());
        o.write_all(bytes).map_err(named)?;
        o.finish().map_err(named)
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
    } else if t.is_symlink() {
        "a symbolic link"
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

/// An output made under a temporary name: everything made in
/// [`Staged::dir`] (the output itself at [`Staged::tmp_path`], and what an
/// allocator keeps beside it) is renamed into the output's directory by
/// [`Staged::commit`]; dropped before, it is removed.
#[derive(Debug)]
pub struct Staged {
    path: PathBuf,
    stage: OwnedDir,
    replace: bool,
}

impl Staged {
    /// Reserves a temporary name for `path` (nothing is made there);
    /// `replace`: the commit may replace existing entries (the command's
    /// `--force`, already checked).
    pub fn new(path: &Path, replace: bool) -> io::Result<Staged> {
        if path.file_name().is_none() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a file name"));
        }
        let stage = OwnedDir::create(&parent_of(path), STAGE_PREFIX)?;
        fs::create_dir(stage.path().join("o"))?;
        Ok(Staged { path: path.to_path_buf(), stage, replace })
    }

    /// Where the output goes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory whose entries are renamed beside the output.
    pub fn dir(&self) -> PathBuf {
        self.stage.path().join("o")
    }

    /// The output's temporary name.
    pub fn tmp_path(&self) -> PathBuf {
        self.dir().join(self.path.file_name().expect("checked when made"))
    }

    /// Renames everything made into place, the output itself last (so that
    /// it appears with what belongs beside it). Refused once the process is
    /// being interrupted.
    pub fn commit(self) -> io::Result<()> {
        if crate::stop::stopping() {
            return Err(io::Error::new(io::ErrorKind::Interrupted, "interrupted: not written"));
        }
        let parent = parent_of(&self.path);
        let main = self.path.file_name().expect("checked when made").to_os_string();
        let mut names: Vec<OsString> =
            fs::read_dir(self.dir())?.map(|e| e.map(|e| e.file_name())).collect::<Result<_, _>>()?;
        if !names.contains(&main) {
            return Err(io::Error::new(io::ErrorKind::NotFound, "nothing was written"));
        }
        names.retain(|n| *n != main);
        names.sort();
        names.push(main);
        for (k, n) in names.iter().enumerate() {
            let from = self.dir().join(n);
            let to = parent.join(n);
            if fs::symlink_metadata(&from)?.is_dir() {
                commit_dir(&from, &to, self.replace, &self.stage.path().join(format!("old{k}")))?;
            } else {
                rename(&from, &to, self.replace)?;
            }
        }
        drop(self.stage);
        Ok(())
    }
}

/// Renames the directory `from` to `to`; with `replace`, an existing
/// directory `to` is swapped with it atomically (and ends at `from`, to be
/// removed with the staging directory), or moved to `old` first where the
/// file system cannot swap.
fn commit_dir(from: &Path, to: &Path, replace: bool, old: &Path) -> io::Result<()> {
    let existing = fs::symlink_metadata(to).is_ok_and(|m| m.is_dir());
    if !(replace && existing) {
        return rename(from, to, false);
    }
    match renameat2(from, to, libc::RENAME_EXCHANGE) {
        Ok(()) => return Ok(()),
        Err(e) if !matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS)) => return Err(e),
        Err(_) => {}
    }
    fs::rename(to, old)?;
    if let Err(e) = rename(from, to, false) {
        let _ = fs::rename(old, to);
        return Err(e);
    }
    Ok(())
}

fn renameat2(from: &Path, to: &Path, flags: libc::c_uint) -> io::Result<()> {
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other);
    let (f, t) = (c(from)?, c(to)?);
    // SAFETY: two NUL-terminated paths relative to the working directory.
    let r = unsafe { libc::renameat2(libc::AT_FDCWD, f.as_ptr(), libc::AT_FDCWD, t.as_ptr(), flags) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Renames `from` to `to`; without `replace`, fails if `to` exists.
fn rename(from: &Path, to: &Path, replace: bool) -> io::Result<()> {
    if replace {
        return fs::rename(from, to);
    }
    let e = match renameat2(from, to, libc::RENAME_NOREPLACE) {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    match e.raw_os_error() {
        Some(libc::EEXIST) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "a file of this name appeared while pmsim was writing it (kept; --force replaces it)",
        )),
        // A file system without RENAME_NOREPLACE: a hard link fails on an
        // existing name just the same.
        Some(libc::EINVAL) | Some(libc::ENOSYS) if !fs::symlink_metadata(from)?.is_dir() => {
            fs::hard_link(from, to).and_then(|_| fs::remove_file(from))
        }
        _ => Err(e),
    }
}

/// Finished outputs of one command, renamed into place together once the
/// command succeeded (dropped, they are removed).
#[derive(Debug, Default)]
pub struct Pending(Vec<Staged>);

impl Pending {
    pub fn push(&mut self, s: Staged) {
        self.0.push(s);
    }

    pub fn extend(&mut self, s: impl IntoIterator<Item = Staged>) {
        self.0.extend(s);
    }

    pub fn append(&mut self, mut other: Pending) {
        self.0.append(&mut other.0);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Renames every output into place, in the order they were added.
    pub fn commit(self) -> Result<(), OutputError> {
        for s in self.0 {
            let p = s.path().display().to_string();
            s.commit().map_err(|e| format!("{p}: {e}"))?;
        }
        Ok(())
    }
}

/// A file being written: under a temporary name beside its destination until
/// [`Output::commit`]; removed if dropped before.
#[derive(Debug)]
pub struct Output {
    staged: Staged,
    file: Option<File>,
}

impl Output {
    /// Opens a temporary file beside `path`; `replace`: the commit may replace
    /// an existing file (the command's `--force`, already checked).
    pub fn create(path: &Path, replace: bool) -> io::Result<Output> {
        let staged = Staged::new(path, replace)?;
        let file = OpenOptions::new()
            .write(true)
            .read(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(staged.tmp_path())?;
        Ok(Output { staged, file: Some(file) })
    }

    pub fn path(&self) -> &Path {
        self.staged.path()
    }

    /// The temporary file, for a writer in another process (the Valgrind
    /// tool) that opens it by name; the commit renames whatever it wrote.
    pub fn tmp_path(&self) -> PathBuf {
        self.staged.tmp_path()
    }

    pub fn file(&mut self) -> &mut File {
        self.file.as_mut().expect("an output is open until committed")
    }

    /// Takes the open file out (to wrap it in a writer); give it back to
    /// [`Output::commit_file`] or [`Output::finish_file`].
    pub fn take_file(&mut self) -> File {
        self.file.take().expect("an output is open until committed")
    }

    /// Syncs the file; the output is then ready to be committed.
    pub fn finish(mut self) -> io::Result<Staged> {
        let f = self.file.take().expect("an output is open until committed");
        self.finish_file(f, true)
    }

    /// [`Output::finish`] with the file [`Output::take_file`] took; `sync:
    /// false` for derived data made again from its input if a crash loses it
    /// (an export of gigabytes).
    pub fn finish_file(self, f: File, sync: bool) -> io::Result<Staged> {
        if sync {
            f.sync_all()?;
        }
        drop(f);
        Ok(self.staged)
    }

    /// Syncs the file and renames it into place.
    pub fn commit(self) -> io::Result<()> {
        self.finish()?.commit()
    }

    /// Syncs `f` (the file [`Output::take_file`] took) and renames it into place.
    pub fn commit_file(self, f: File) -> io::Result<()> {
        self.finish_file(f, true)?.commit()
    }

    /// Renames `f` into place, synced or not (see [`Output::finish_file`]).
    pub fn commit_with(self, f: File, sync: bool) -> io::Result<()> {
        self.finish_file(f, sync)?.commit()
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

/// A directory being filled (by pmsim or a program it runs): under a
/// temporary name beside its destination until [`OutputDir::commit`];
/// removed with its contents if dropped before, so a failed run leaves the
/// old directory, if any, as it was.
#[derive(Debug)]
pub struct OutputDir {
    staged: Staged,
}

impl OutputDir {
    /// Makes a temporary directory beside `path`; `replace`: the commit may
    /// replace an existing directory (the command's `--force`, already checked).
    pub fn create(path: &Path, replace: bool) -> io::Result<OutputDir> {
        let staged = Staged::new(path, replace)?;
        fs::create_dir(staged.tmp_path())?;
        Ok(OutputDir { staged })
    }

    /// Where the directory is filled until the commit.
    pub fn tmp_path(&self) -> PathBuf {
        self.staged.tmp_path()
    }

    pub fn path(&self) -> &Path {
        self.staged.path()
    }

    /// Ready to be committed with other outputs.
    pub fn into_staged(self) -> Staged {
        self.staged
    }

    /// Renames the directory into place (swapped with the one it replaces).
    pub fn commit(self) -> io::Result<()> {
        self.staged.commit()
    }
}

/// The marker file that makes a directory pmsim's own directory of `kind`
/// (`sweep`, `report`): `DIR/.pmsim-KIND`.
pub fn marker(dir: &Path, kind: &str) -> PathBuf {
    dir.join(format!(".pmsim-{kind}"))
}

/// The kinds of directories pmsim fills over several runs.
pub const DIR_KINDS: [&str; 2] = ["sweep", "report"];

/// Makes `path` a directory of pmsim's of `kind`, or checks that it is one:
/// a new directory is made with its marker ([`marker`], holding `content`)
/// in place at once; an empty one gets the marker; one that holds the
/// marker is pmsim's already, and so is one `legacy` recognises (written
/// by a pmsim from before markers: it gets the marker too). Anything else
/// is refused with one line: a directory of the user's (not empty, no
/// marker), pmsim's directory of another kind, a symbolic link, a file.
/// Returns the marker's content.
pub fn own_dir(path: &Path, what: &str, content: &str, legacy: impl Fn(&Path) -> bool) -> Result<String, OutputError> {
    let name = path.display();
    let mark = marker(path, what);
    for _ in 0..3 {
        match fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => {
                refuse_link(path)?;
            }
            Ok(m) if !m.is_dir() => {
                return Err(format!("{name}: exists and is not a directory ({})", kind(&m)));
            }
            Ok(_) => {
                match fs::symlink_metadata(&mark) {
                    Ok(m) if m.is_file() => {
                        return crate::input::read_text(&mark, "directory marker");
                    }
                    Ok(_) => return Err(format!("{}: not a regular file; pmsim leaves it alone", mark.display())),
                    Err(_) => {}
                }
                if let Some(other) = DIR_KINDS.iter().find(|k| **k != what && marker(path, k).is_file()) {
                    return Err(format!(
                        "{name}: is a pmsim {other} directory, not a {what} directory: use another directory"
                    ));
                }
                let empty = fs::read_dir(path).map_err(|e| format!("{name}: {e}"))?.next().is_none();
                if !empty && !legacy(path) {
                    return Err(format!(
                        "{name}: a directory that is not empty and not pmsim's (it has no {}): pmsim writes a {what} \
                         only into a new or empty directory, or one it made: use another directory",
                        mark.file_name().unwrap_or_default().to_string_lossy()
                    ));
                }
                let mut o =
                    Output::create(&mark, false).map_err(|e| format!("{}: cannot create: {e}", mark.display()))?;
                o.write_all(content.as_bytes()).map_err(|e| format!("{}: cannot write: {e}", mark.display()))?;
                return match o.commit() {
                    Ok(()) => Ok(content.to_string()),
                    // Another pmsim marked it meanwhile: read its marker.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                    Err(e) => Err(format!("{}: cannot write: {e}", mark.display())),
                };
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                writable_parent(path)?;
                // Made with its marker under a temporary name, then renamed
                // into place: the directory never exists without it.
                let staged = Staged::new(path, false).map_err(|e| format!("{name}: cannot create: {e}"))?;
                let tmp = staged.tmp_path();
                fs::create_dir(&tmp)
                    .and_then(|_| fs::write(marker(&tmp, what), content))
                    .map_err(|e| format!("{name}: cannot create: {e}"))?;
                match staged.commit() {
                    Ok(()) => return Ok(content.to_string()),
                    // Made by another pmsim meanwhile: check it as any existing one.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(format!("{name}: cannot create: {e}")),
                }
            }
            Err(e) => return Err(format!("{name}: {e}")),
        }
    }
    Err(format!("{name}: keeps changing while pmsim makes it its own"))
}

/// The directory of pmsim's (a sweep's or a report's, by its marker) that
/// `path` would be inside, if any: nothing is made in another run's
/// bookkeeping.
pub fn inside_own_dir(path: &Path) -> Option<(PathBuf, &'static str)> {
    let parent = fs::canonicalize(parent_of(path)).ok()?;
    parent.ancestors().find_map(|a| DIR_KINDS.iter().find(|k| marker(a, k).is_file()).map(|k| (a.to_path_buf(), *k)))
}

/// The line that makes a file pmsim's lock file (its second line; the first
/// names the holder's pid, empty when nobody holds it).
const LOCK_MAGIC: &str = "pmsim lock file: pmsim writes what this names while a pmsim process holds it";

/// The third line of a lock file whose holder is being interrupted: it
/// ends within moments, once its children are gone (see
/// [`mark_interrupted`]), and a writer that finds it waits for that instead
/// of being refused.
const LOCK_STOPPING: &str = "interrupted: ending";

/// How long a writer waits for a holder that is being interrupted: longer
/// than the interrupt handler waits for the holder's children
/// ([`crate::children::wait_gone`]: 10 s, then 2 s after SIGKILL).
const STOPPING_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// How long a writer watches a holder that is writing before it is refused
/// (see [`Lock::acquire`]).
const WRITING_GRACE: std::time::Duration = std::time::Duration::from_millis(300);

/// How long a writer waits for a lock whose holder named in it has ended,
/// or that names none: a lock being released (its file emptied, or a child
/// between fork and exec holding a copy) or just taken (its pid not yet
/// written).
const RELEASING_WAIT: std::time::Duration = std::time::Duration::from_millis(1500);

/// A lock this process holds, as the interrupt handler sees it.
struct Held {
    path: PathBuf,
    fd: std::os::fd::RawFd,
    /// The length of what the lock file says (pid and magic line).
    len: u64,
    /// Removed on release (a lock beside an output).
    remove: bool,
}

/// The locks this process holds. A lock is taken and listed under this
/// list's lock, and unlisted before its descriptor closes, so the interrupt
/// handler, which takes the list for good, writes only to open lock files.
static HELD: Mutex<Vec<Held>> = Mutex::new(Vec::new());

fn held() -> std::sync::MutexGuard<'static, Vec<Held>> {
    HELD.lock().unwrap_or_else(|e| e.into_inner())
}

/// The lock files to remove once an interrupted process's children are
/// gone ([`remove_temporaries`]), set by [`mark_interrupted`].
static TO_REMOVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Marks every lock of this process as held by a process that is ending
/// (the interrupt handler's step right after refusing new children): a
/// pmsim started meanwhile on the same output waits for this one to end
/// rather than being refused with the pid of a process about to be gone.
/// The list stays locked until the process ends, so no thread takes or
/// releases a lock after this (see [`Lock::acquire`]).
pub fn mark_interrupted() {
    let l = held();
    let mut rm = TO_REMOVE.lock().unwrap_or_else(|e| e.into_inner());
    let line = format!("{LOCK_STOPPING}\n");
    for h in l.iter() {
        // SAFETY: the descriptor is open: its lock is listed, and it is
        // unlisted before it closes, which no thread can do any more.
        unsafe {
            libc::pwrite(h.fd, line.as_ptr().cast(), line.len(), h.len as libc::off_t);
        }
        if h.remove {
            rm.push(h.path.clone());
        }
    }
    std::mem::forget(l);
}

/// Removes this process's lock files beside its outputs (called when the
/// interrupted process's children are gone, after [`mark_interrupted`]; its
/// staging directories go with its other owned directories). A directory's
/// own lock file stays; the kernel releases its lock with the process.
pub fn remove_temporaries() {
    for p in TO_REMOVE.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        let _ = fs::remove_file(p);
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

fn same_file(f: &File, path: &Path) -> bool {
    match (f.metadata(), fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// What a lock file says: this process's pid and the magic line.
fn lock_content() -> String {
    format!("{}\n{LOCK_MAGIC}\n", std::process::id())
}

/// Makes the lock file `lock` holding this process's pid, locked, unless a
/// file of that name exists (`Ok(None)`). The file appears with its content
/// and its lock at once (`O_TMPFILE`, then a link), so no reader ever sees
/// a pmsim lock file that does not say so.
fn create_lock_file(lock: &Path) -> io::Result<Option<File>> {
    let content = lock_content();
    let tmp = OpenOptions::new().read(true).write(true).custom_flags(libc::O_TMPFILE).mode(0o644).open(parent_of(lock));
    match tmp {
        Ok(mut f) => {
            f.write_all(content.as_bytes())?;
            flock(&f, libc::LOCK_EX)?;
            let from = std::ffi::CString::new(format!("/proc/self/fd/{}", f.as_raw_fd())).map_err(io::Error::other)?;
            let to = std::ffi::CString::new(lock.as_os_str().as_bytes()).map_err(io::Error::other)?;
            // SAFETY: two NUL-terminated paths.
            let r = unsafe {
                libc::linkat(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::AT_SYMLINK_FOLLOW)
            };
            if r == 0 {
                return Ok(Some(f));
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EEXIST) {
                return Ok(None);
            }
            // No /proc: made by name below.
            if e.raw_os_error() != Some(libc::ENOENT) {
                return Err(e);
            }
        }
        // A file system without O_TMPFILE: made by name below.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP) | Some(libc::EISDIR) | Some(libc::EINVAL)) => {}
        Err(e) => return Err(e),
    }
    match OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o644)
        .open(lock)
    {
        Ok(mut f) => {
            f.write_all(content.as_bytes())?;
            flock(&f, libc::LOCK_EX)?;
            Ok(Some(f))
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(None),
        Err(e) => Err(e),
    }
}

/// Who holds a lock, as its file says.
#[derive(Debug, PartialEq)]
enum Holder {
    /// No pid (a lock being released empties its file, one just taken has
    /// not said whose it is yet).
    Unnamed,
    /// A live process, writing.
    Writing(u32),
    /// A live process that is being interrupted: it ends within moments.
    Ending(u32),
    /// A process that has ended (its lock is held by what it left: a child
    /// between fork and exec, or a process that took it since and has not
    /// written its pid yet).
    Gone(u32),
}

impl Holder {
    fn of(text: &str) -> Holder {
        let mut lines = text.lines();
        let Some(pid) = lines.next().and_then(|l| l.trim().parse::<u32>().ok()) else { return Holder::Unnamed };
        if !crate::owned::pid_alive(pid) {
            Holder::Gone(pid)
        } else if lines.nth(1) == Some(LOCK_STOPPING) || stop_signal_pending(pid) {
            Holder::Ending(pid)
        } else {
            Holder::Writing(pid)
        }
    }
}

/// Whether SIGINT, SIGTERM or SIGHUP has been sent to process `pid` and not
/// yet delivered (`/proc/PID/status`): a holder signalled a moment ago,
/// before its handler could mark its locks.
fn stop_signal_pending(pid: u32) -> bool {
    let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else { return false };
    let mask: u64 = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP].iter().map(|s| 1u64 << (s - 1)).sum();
    status.lines().any(|l| {
        let (k, v) = l.split_once(':').unwrap_or_default();
        matches!(k, "SigPnd" | "ShdPnd") && u64::from_str_radix(v.trim(), 16).is_ok_and(|p| p & mask != 0)
    })
}

impl Lock {
    /// Locks the output `path` through `.NAME.lock` beside it (removed on
    /// release); `Err` names the holder's pid.
    pub fn output(path: &Path) -> Result<Lock, OutputError> {
        let mut n = OsString::from(".");
        n.push(path.file_name().unwrap_or_default());
        n.push(".lock");
        Self::acquire(&path.with_file_name(n), path, true)
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

    /// Takes the lock `lock` of `target`. The lock is made and listed under
    /// the list of held locks ([`HELD`]), which is let go only while
    /// waiting, so that a lock is either listed for the interrupt handler
    /// or never taken: once this process is being interrupted, none is.
    fn acquire(lock: &Path, target: &Path, remove: bool) -> Result<Lock, OutputError> {
        use std::time::{Duration, Instant};
        let name = target.display();
        let ln = lock.display();
        let foreign = || {
            format!(
                "{name}: {ln} exists and is not a pmsim lock file; pmsim leaves it alone: remove it, or write elsewhere"
            )
        };
        let interrupted = || format!("{name}: interrupted: not written");
        let mut list = Some(held());
        // Waits a moment with the list let go (the interrupt handler may
        // take it meanwhile), then takes it again.
        let pause = |list: &mut Option<std::sync::MutexGuard<'static, Vec<Held>>>| {
            *list = None;
            std::thread::sleep(Duration::from_millis(10));
            *list = Some(held());
        };
        let start = Instant::now();
        // When the holder first seemed to be releasing the lock, and to be
        // writing.
        let mut releasing: Option<Instant> = None;
        let mut writing: Option<Instant> = None;
        loop {
            if crate::stop::stopping() {
                return Err(interrupted());
            }
            let made = create_lock_file(lock).map_err(|e| format!("{name}: cannot create its lock file {ln}: {e}"))?;
            let file = match made {
                Some(file) => file,
                None => {
                    let mut file = match OpenOptions::new()
                        .read(true)
                        .write(true)
                        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                        .open(lock)
                    {
                        Ok(f) => f,
                        // Released and removed meanwhile: make it again.
                        Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                            return Err(format!(
                                "{name}: its lock file {ln} is a symbolic link; pmsim does not follow it (remove it)"
                            ))
                        }
                        Err(e) => return Err(format!("{name}: cannot open its lock file {ln}: {e}")),
                    };
                    if !file.metadata().is_ok_and(|m| m.is_file()) {
                        return Err(format!("{name}: its lock file {ln} is not a regular file; pmsim leaves it alone"));
                    }
                    let mut text = String::new();
                    let _ = (&mut file).take(4096).read_to_string(&mut text);
                    // A directory's own lock (inside pmsim's own sweep directory) may
                    // also be empty, as an older pmsim left it.
                    let pmsims = text.lines().nth(1) == Some(LOCK_MAGIC) || (!remove && text.is_empty());
                    if !pmsims {
                        // Not pmsim's (a file made by name is written just after it
                        // appears: a moment's patience first).
                        if text.is_empty() && start.elapsed() < Duration::from_millis(200) {
                            pause(&mut list);
                            continue;
                        }
                        return Err(foreign());
                    }
                    if let Err(e) = flock(&file, libc::LOCK_EX | libc::LOCK_NB) {
                        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                            return Err(format!("{name}: cannot lock {ln}: {e}"));
                        }
                        let holder = Holder::of(&text);
                        let wait = match holder {
                            Holder::Ending(_) => start.elapsed() < STOPPING_WAIT,
                            Holder::Unnamed | Holder::Gone(_) => {
                                releasing.get_or_insert_with(Instant::now).elapsed() < RELEASING_WAIT
                            }
                            // Refused once it has been seen writing for a
                            // moment: a pid read just before its lock changed
                            // hands would name the wrong process, and a holder
                            // signalled just now marks its locks as ending
                            // only once its handler's thread runs.
                            Holder::Writing(_) => writing.get_or_insert_with(Instant::now).elapsed() < WRITING_GRACE,
                        };
                        if wait {
                            pause(&mut list);
                            continue;
                        }
                        return Err(match holder {
                            Holder::Writing(p) => {
                                format!("{name}: being written by another pmsim (pid {p}); wait for it to end")
                            }
                            Holder::Ending(p) => format!(
                                "{name}: being written by another pmsim (pid {p}), interrupted but still ending after \
                                 {} s; wait for it to end",
                                STOPPING_WAIT.as_secs()
                            ),
                            Holder::Gone(p) => format!(
                                "{name}: locked by a process left by pmsim pid {p}, which has ended; wait for it to \
                                 end"
                            ),
                            Holder::Unnamed => {
                                format!("{name}: being written by another process; wait for it to end")
                            }
                        });
                    }
                    // A releasing writer may have removed the file between our open
                    // and our lock: then the lock is on a name nobody else sees.
                    if !same_file(&file, lock) {
                        continue;
                    }
                    let _ = file.set_len(0);
                    let _ = file.rewind();
                    let _ = file.write_all(lock_content().as_bytes());
                    file
                }
            };
            // Taken: listed (the list is held), unless this process is being
            // interrupted meanwhile, when it is let go at once.
            if crate::stop::stopping() {
                if remove && same_file(&file, lock) {
                    let _ = fs::remove_file(lock);
                }
                return Err(interrupted());
            }
            let l = list.as_mut().expect("the list is held but while pausing");
            l.push(Held { path: lock.to_path_buf(), fd: file.as_raw_fd(), len: lock_content().len() as u64, remove });
            return Ok(Lock { file, path: lock.to_path_buf(), remove });
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        // Unlisted first (the file is still open), so the interrupt handler
        // never writes to a closed descriptor.
        {
            let mut l = held();
            if let Some(i) = l.iter().position(|h| h.fd == self.file.as_raw_fd()) {
                l.swap_remove(i);
            }
        }
        if self.remove {
            // Removed while still locked, so no one locks the old inode
            // after; and only if it is still this lock's file.
            if same_file(&self.file, &self.path) {
                let _ = fs::remove_file(&self.path);
            }
        } else {
            // A directory's own lock file stays, empty (as pmsim always left it).
            let _ = self.file.set_len(0);
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    /// The names in `d`, sorted.
    fn names(d: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

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
        // A link is never written through, even with --force.
        let l = d.path().join("l");
        std::os::unix::fs::symlink(&a, &l).unwrap();
        assert!(Policy::new(true).check(&l).unwrap_err().contains("symbolic link"));
        assert!(Policy::new(true).check_dir(&l).unwrap_err().contains("symbolic link"));
        assert_eq!(fs::read(&a).unwrap(), b"x");
    }

    #[test]
    fn output_is_renamed_or_removed() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        let mut o = Output::create(&a, false).unwrap();
        o.write_all(b"data").unwrap();
        drop(o);
        assert_eq!(names(d.path()), Vec::<String>::new(), "an uncommitted output leaves nothing");
        let mut o = Output::create(&a, false).unwrap();
        o.write_all(b"data").unwrap();
        o.commit().unwrap();
        assert_eq!(fs::read(&a).unwrap(), b"data");
        let o = Output::create(&a, false).unwrap();
        assert!(o.commit().is_err(), "no replace without force");
        assert_eq!(fs::read(&a).unwrap(), b"data");
        assert_eq!(names(d.path()), ["a"]);
        // Outputs committed together, the user's files named like pmsim's
        // temporaries untouched.
        fs::write(d.path().join(".a.1.tmp"), b"mine").unwrap();
        let mut pending = Pending::default();
        for (n, t) in [("b", b"bb"), ("a", b"aa")] {
            let mut o = Output::create(&d.path().join(n), true).unwrap();
            o.write_all(t).unwrap();
            pending.push(o.finish().unwrap());
        }
        assert_eq!(fs::read(&a).unwrap(), b"data", "nothing in place before the commit");
        pending.commit().unwrap();
        assert_eq!(fs::read(&a).unwrap(), b"aa");
        assert_eq!(names(d.path()), [".a.1.tmp", "a", "b"]);
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
        {
            let mut p = Policy::new(true);
            let o = p.create_dir(&a).unwrap();
            fs::write(o.tmp_path().join("new"), b"new").unwrap();
            drop(o);
        }
        assert_eq!(fs::read(a.join("old")).unwrap(), b"old", "a dropped directory leaves the old one");
        assert_eq!(names(d.path()), ["file", "out"], "and no temporary or lock");
        let o = OutputDir::create(&a, true).unwrap();
        fs::write(o.tmp_path().join("new"), b"new").unwrap();
        o.commit().unwrap();
        assert!(a.join("new").exists() && !a.join("old").exists());
        assert_eq!(names(d.path()), ["file", "out"]);
        let o = OutputDir::create(&a, false).unwrap();
        assert!(o.commit().is_err(), "no replace without force");
        assert!(a.join("new").exists());
        assert_eq!(names(d.path()), ["file", "out"]);
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
        assert_eq!(names(d.path()), Vec::<String>::new(), "the lock file goes with the lock");
        let _l = Lock::output(&a).unwrap();
        let dl = Lock::dir(d.path()).unwrap();
        assert!(Lock::dir(d.path()).is_err());
        drop(dl);
        let _again = Lock::dir(d.path()).unwrap();
    }

    /// A holder being interrupted (its lock file says so) is waited for;
    /// one writing is refused at once.
    #[test]
    fn a_holder_that_is_ending_is_waited_for() {
        let d = tempfile::tempdir().unwrap();
        let l = Lock::dir(d.path()).unwrap();
        assert!(Lock::dir(d.path()).unwrap_err().contains(&format!("pid {}", std::process::id())));
        let mut f = OpenOptions::new().append(true).open(d.path().join(".lock")).unwrap();
        writeln!(f, "{LOCK_STOPPING}").unwrap();
        let t = std::time::Instant::now();
        let ender = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            drop(l);
        });
        let _l = Lock::dir(d.path()).unwrap();
        assert!(t.elapsed() >= std::time::Duration::from_millis(200));
        ender.join().unwrap();
        let text = fs::read_to_string(d.path().join(".lock")).unwrap();
        assert_eq!(text, lock_content(), "the new holder's pid, no longer marked as ending");
    }

    #[test]
    fn a_lock_file_of_the_users_is_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let mine = d.path().join(".n.lock");
        fs::write(&mine, b"my notes\n").unwrap();
        let e = Lock::output(&d.path().join("n")).unwrap_err();
        assert!(e.contains("not a pmsim lock file"), "{e}");
        assert_eq!(fs::read(&mine).unwrap(), b"my notes\n");
        let target = d.path().join("target");
        fs::write(&target, b"precious").unwrap();
        std::os::unix::fs::symlink(&target, d.path().join(".m.lock")).unwrap();
        let e = Lock::output(&d.path().join("m")).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(fs::read(&target).unwrap(), b"precious");
    }
}
