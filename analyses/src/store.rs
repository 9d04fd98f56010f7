//! A sweep's directory on disk:
//!
//! ```text
//! DIR/experiment.json     the resolved experiment: every point with its id,
//!                         and a fingerprint of the list (written by temp file + rename)
//! DIR/shards/<i>.jsonl    rows, one line each, appended by shard i
//! ```
//!
//! A row line is `{"crc32":"xxxxxxxx","row":{…}}` where the checksum covers
//! the exact bytes of the row object; each line goes out in one `write` on
//! an `O_APPEND` file and is `fsync`ed before the point counts as done. A
//! killed run therefore leaves complete rows and at most one torn last line,
//! which readers skip (and the next writer cuts off); a complete line whose
//! checksum fails is corruption and an error. Merging needs nothing but the
//! directory, so shards run on any machines that share it (a Slurm array).

use crate::experiment::Experiment;
use crate::point::{fnv1a64, Point};
use crate::row::Row;
use pmsim_traces::output::{Lock, Output, Policy};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A point as listed in `experiment.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Listed {
    pub index: usize,
    pub id: String,
    pub point: Point,
}

/// `DIR/experiment.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Resolved {
    /// Hash of every point id in order: equal fingerprints, equal sweeps.
    pub fingerprint: String,
    pub pmsim_version: String,
    pub experiment: Experiment,
    pub points: Vec<Listed>,
}

impl Resolved {
    pub fn new(experiment: Experiment, points: &[Point]) -> Resolved {
        let points: Vec<Listed> =
            points.iter().enumerate().map(|(index, p)| Listed { index, id: p.id(), point: p.clone() }).collect();
        let ids: Vec<&str> = points.iter().map(|l| l.id.as_str()).collect();
        Resolved {
            fingerprint: format!("{:016x}", fnv1a64(ids.join(",").as_bytes())),
            pmsim_version: env!("CARGO_PKG_VERSION").into(),
            experiment,
            points,
        }
    }
}

/// The error of the store: one line naming the file.
pub type StoreError = String;

/// Rows read from shard files, each with its file, and the torn lines skipped.
pub type ShardRows = (Vec<(PathBuf, Row)>, Vec<String>);

/// A sweep directory.
#[derive(Clone, Debug)]
pub struct SweepDir {
    pub root: PathBuf,
}

impl SweepDir {
    pub fn new(root: impl Into<PathBuf>) -> SweepDir {
        SweepDir { root: root.into() }
    }

    pub fn experiment_path(&self) -> PathBuf {
        self.root.join("experiment.json")
    }

    pub fn shards_dir(&self) -> PathBuf {
        self.root.join("shards")
    }

    pub fn shard_path(&self, i: usize) -> PathBuf {
        self.shards_dir().join(format!("{i}.jsonl"))
    }

    /// The resolved experiment stored here, if any.
    pub fn load(&self) -> Result<Option<Resolved>, StoreError> {
        let p = self.experiment_path();
        if fs::symlink_metadata(&p).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
            return Ok(None);
        }
        let text = pmsim_traces::input::read_text(&p, "sweep's experiment file")?;
        let r: Resolved = serde_json::from_str(&text)
            .map_err(|e| format!("{}: not a pmsim sweep's experiment file: {e}", p.display()))?;
        // Rows are matched to points by id: a list edited by hand would make
        // `--resume` skip or misplace points, so it must still be the list
        // its fingerprint was made from.
        let ids_ok = r.points.iter().enumerate().all(|(i, l)| l.index == i && l.id == l.point.id());
        let again = Resolved::new(r.experiment.clone(), &r.points.iter().map(|l| l.point.clone()).collect::<Vec<_>>());
        if !ids_ok || again.fingerprint != r.fingerprint {
            return Err(format!(
                "{}: its points do not match their ids and fingerprint {} (edited by hand?): run the experiment into \
                 a new directory",
                p.display(),
                r.fingerprint
            ));
        }
        let listed: Vec<Point> = r.points.iter().map(|l| l.point.clone()).collect();
        if r.experiment.points().ok().as_ref() != Some(&listed) {
            return Err(format!(
                "{}: its points are not those of its experiment (edited by hand?): run the experiment into a new \
                 directory",
                p.display()
            ));
        }
        pmsim_traces::output::plain_name("experiment name", &r.experiment.meta.name)
            .map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(Some(r))
    }

    /// Makes the directory a sweep's, or checks that it is one
    /// ([`pmsim_traces::output::own_dir`]: a new or empty directory, or one
    /// with a sweep's marker or, from before markers, its experiment file),
    /// and that its points are split into `shards` shards: the scheme is
    /// fixed when the directory is made (its marker says it), and a run with
    /// another is refused, since rows would land in shard files the merge
    /// and `--resume` read with the first.
    pub fn claim(&self, shards: usize) -> Result<(), StoreError> {
        let legacy = |d: &Path| SweepDir::new(d).load().is_ok_and(|r| r.is_some());
        let content = pmsim_traces::output::own_dir(&self.root, "sweep", &marker_text(shards), legacy)?;
        match scheme_of(&content) {
            Some(n) if n == shards => Ok(()),
            Some(n) => Err(format!(
                "{}: its points are split into {n} shard(s) (--shard i/{n}); this run asks for {shards}: run it \
                 with --shard i/{n}, or into a new directory",
                self.root.display()
            )),
            // A marker without a scheme (a sweep from before schemes): this one's.
            None => {
                let mark = pmsim_traces::output::marker(&self.root, "sweep");
                let mut p = Policy::new(true);
                p.input(&self.experiment_path());
                p.write(&mark, marker_text(shards).as_bytes())
            }
        }
    }

    /// The shard scheme fixed when the directory was made (`None` for a
    /// directory that is not a sweep's, or one from before schemes).
    pub fn scheme(&self) -> Option<usize> {
        let text = pmsim_traces::input::read_text(&pmsim_traces::output::marker(&self.root, "sweep"), "marker").ok()?;
        scheme_of(&text)
    }

    /// Locks shard `index` of the directory (which [`SweepDir::claim`] made)
    /// for one writer: a second sweep writing the same shard is refused with
    /// the holder's pid until this one ends, while the other shards of a job
    /// array run at once. Shard 0, which an unsharded sweep writes, is locked
    /// by `DIR/.lock`.
    pub fn lock_shard(&self, index: usize) -> Result<Lock, StoreError> {
        Lock::dir_part(&self.root, &Self::shard_lock_name(index))
    }

    /// Locks the directory for one cluster submission (`DIR/.lock.submit`):
    /// the submitting process waits while the array tasks lock their shards.
    pub fn lock_submit(&self) -> Result<Lock, StoreError> {
        Lock::dir_part(&self.root, ".lock.submit")
    }

    fn shard_lock_name(index: usize) -> String {
        match index {
            0 => ".lock".to_string(),
            i => format!(".lock.{i}"),
        }
    }

    /// Where a command that reads this directory may not write: its
    /// experiment, its lock and its shard files are inputs, and nothing is
    /// written into `shards/` (every `.jsonl` there is read as rows).
    pub fn protect(&self, policy: &mut Policy) {
        policy.input(&self.experiment_path());
        policy.input(&self.root.join(".lock"));
        policy.input(&self.root.join(".lock.submit"));
        policy.input(&pmsim_traces::output::marker(&self.root, "sweep"));
        policy.guard_dir(&self.shards_dir(), "a sweep's shard directory");
    }

    /// Stores `r` here, or checks that the experiment already stored is the
    /// same one (a shard or a `--resume` must run exactly the same points).
    pub fn init(&self, r: &Resolved) -> Result<(), StoreError> {
        let shards = self.shards_dir();
        match fs::symlink_metadata(&shards) {
            Ok(m) if !m.is_dir() => {
                return Err(format!("{}: not a directory; a sweep's shards are its own", shards.display()))
            }
            Ok(_) => {}
            Err(_) => fs::create_dir(&shards).map_err(|e| format!("{}: cannot create: {e}", shards.display()))?,
        }
        if let Some(old) = self.load()? {
            if old.fingerprint != r.fingerprint {
                return Err(format!(
                    "{}: holds another experiment ('{}', {} points, fingerprint {}) than this one ('{}', {} points, \
                     fingerprint {}): use a new --out directory",
                    self.root.display(),
                    old.experiment.meta.name,
                    old.points.len(),
                    old.fingerprint,
                    r.experiment.meta.name,
                    r.points.len(),
                    r.fingerprint
                ));
            }
            return Ok(());
        }
        // Written as every output is (temporary file, sync, rename; nothing
        // left on an error). A shard of the same sweep that got here first
        // wins, and this one checks its experiment as above.
        let p = self.experiment_path();
        let text = serde_json::to_string_pretty(r).expect("experiment serializes");
        let mut o = Output::create(&p, false).map_err(|e| format!("{}: cannot create: {e}", p.display()))?;
        match o.write_all(text.as_bytes()).and_then(|_| o.commit()) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && self.load()?.is_some() => self.init(r),
            Err(e) => Err(format!("{}: cannot write: {e}", p.display())),
        }
    }

    /// Every complete row of every shard file, checked; torn last lines are
    /// skipped and reported in the second list.
    pub fn read_rows(&self) -> Result<ShardRows, StoreError> {
        let dir = self.shards_dir();
        let mut files: Vec<PathBuf> = match fs::read_dir(&dir) {
            Ok(rd) => rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(format!("{}: {e}", dir.display())),
        };
        files.sort();
        let mut rows = Vec::new();
        let mut torn = Vec::new();
        for f in files {
            let text = pmsim_traces::input::read_limited(&f, "shard file", SHARD_LIMIT)?;
            let ends_clean = text.last().is_none_or(|&b| b == b'\n');
            let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
            let n = lines.len();
            for (k, line) in lines.into_iter().enumerate() {
                if line.is_empty() {
                    continue;
                }
                let last_unterminated = k + 1 == n && !ends_clean;
                match decode_line(line) {
                    Ok(row) if !last_unterminated => rows.push((f.clone(), row)),
                    _ if last_unterminated => {
                        torn.push(format!("{}: line {}: torn last row skipped", f.display(), k + 1))
                    }
                    Err(e) => return Err(format!("{}: line {}: {e}", f.display(), k + 1)),
                    Ok(_) => unreachable!(),
                }
            }
        }
        Ok((rows, torn))
    }
}

/// A sweep directory's marker: what it is and its shard scheme.
fn marker_text(shards: usize) -> String {
    format!("pmsim sweep directory\nshards {shards}\n")
}

fn scheme_of(marker: &str) -> Option<usize> {
    marker.lines().find_map(|l| l.strip_prefix("shards ")?.trim().parse().ok())
}

/// The line of a row (with its newline).
pub fn encode_line(row: &Row) -> Vec<u8> {
    let body = serde_json::to_string(row).expect("rows serialize");
    let crc = crc32fast::hash(body.as_bytes());
    format!("{{\"crc32\":\"{crc:08x}\",\"row\":{body}}}\n").into_bytes()
}

/// Checks and parses one line (without its newline).
pub fn decode_line(line: &[u8]) -> Result<Row, String> {
    const HEAD: &[u8] = b"{\"crc32\":\"";
    const MID: &[u8] = b"\",\"row\":";
    let bad = || "not a pmsim result row (expected {\"crc32\":\"…\",\"row\":{…}})".to_string();
    if !line.starts_with(HEAD) || line.len() < HEAD.len() + 8 + MID.len() + 1 || !line.ends_with(b"}") {
        return Err(bad());
    }
    let hex = std::str::from_utf8(&line[HEAD.len()..HEAD.len() + 8]).map_err(|_| bad())?;
    let want = u32::from_str_radix(hex, 16).map_err(|_| bad())?;
    if &line[HEAD.len() + 8..HEAD.len() + 8 + MID.len()] != MID {
        return Err(bad());
    }
    let body = &line[HEAD.len() + 8 + MID.len()..line.len() - 1];
    let got = crc32fast::hash(body);
    if got != want {
        return Err(format!("row checksum mismatch (stored {want:08x}, computed {got:08x}): the row is corrupt"));
    }
    serde_json::from_slice(body).map_err(|e| format!("row does not parse: {e}"))
}

/// The largest shard file read (rows are kilobytes each).
const SHARD_LIMIT: u64 = 1 << 30;

/// Appends rows to one shard file, each durable before `append` returns.
pub struct ShardWriter {
    path: PathBuf,
    file: Mutex<File>,
}

impl ShardWriter {
    /// Opens (creating) `path` for appending; a torn last line left by a
    /// killed writer is cut off first.
    pub fn open(path: &Path) -> Result<ShardWriter, StoreError> {
        let err = |e: std::io::Error| format!("{}: {e}", path.display());
        let mut f = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(err)?;
        let meta = f.metadata().map_err(err)?;
        if !meta.is_file() {
            return Err(format!("{}: not a regular file; a shard file is pmsim's own", path.display()));
        }
        let len = meta.len();
        if len > 0 {
            let mut text = Vec::new();
            f.seek(SeekFrom::Start(0)).map_err(err)?;
            f.read_to_end(&mut text).map_err(err)?;
            if text.last() != Some(&b'\n') {
                let keep = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
                f.set_len(keep as u64).map_err(err)?;
                f.sync_all().map_err(err)?;
            }
        }
        Ok(ShardWriter { path: path.to_path_buf(), file: Mutex::new(f) })
    }

    /// Writes one row as one line and syncs it.
    pub fn append(&self, row: &Row) -> Result<(), StoreError> {
        let line = encode_line(row);
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        f.write_all(&line).and_then(|_| f.sync_data()).map_err(|e| format!("{}: {e}", self.path.display()))
    }
}

/// The merged result set of a sweep directory: every point's row, in point
/// order. Errors when a row belongs to no point of the experiment, when a
/// point has two rows, when a row lacks a number the figures read
/// ([`crate::fields`]), or when points are missing (with the `--resume` hint).
pub fn merge(dir: &SweepDir) -> Result<(Resolved, Vec<Row>, Vec<String>), StoreError> {
    let r = dir.load()?.ok_or_else(|| format!("{}: no experiment.json: not a sweep directory", dir.root.display()))?;
    let (rows, warnings) = dir.read_rows()?;
    let slots = place_rows(dir, &r, rows)?;
    let missing: Vec<&Listed> = r.points.iter().filter(|l| slots[l.index].is_none()).collect();
    if !missing.is_empty() {
        let some: Vec<String> = missing.iter().take(3).map(|l| l.point.label()).collect();
        return Err(format!(
            "{}: {} of {} points have no row (e.g. {}): run `pmsim sweep --resume {}` to run them",
            dir.root.display(),
            missing.len(),
            r.points.len(),
            some.join("; "),
            dir.root.display()
        ));
    }
    let rows = slots.into_iter().map(|s| s.expect("all present").1).collect();
    Ok((r, rows, warnings))
}

/// The rows of a sweep at their points, checked: each belongs to a point of
/// the experiment, with its parameters, in the shard file of its shard (by
/// the directory's scheme), with every figure the figures read, and no point
/// has two. `--resume` checks them as the merge does, so that a directory
/// whose rows are another sweep's (or copied twice) is refused, not "done".
pub fn place_rows(
    dir: &SweepDir,
    r: &Resolved,
    rows: Vec<(PathBuf, Row)>,
) -> Result<Vec<Option<(PathBuf, Row)>>, StoreError> {
    let by_id: HashMap<&str, usize> = r.points.iter().map(|l| (l.id.as_str(), l.index)).collect();
    let scheme = dir.scheme();
    let mut slots: Vec<Option<(PathBuf, Row)>> = vec![None; r.points.len()];
    for (file, row) in rows {
        if let (Some(n), Some(k)) =
            (scheme, file.file_stem().and_then(|s| s.to_str()).and_then(|s| s.parse::<usize>().ok()))
        {
            if row.index % n != k {
                return Err(format!(
                    "{}: row of point {} (index {}), which belongs to shard {} of {n}, not {k}",
                    file.display(),
                    row.id,
                    row.index,
                    row.index % n
                ));
            }
        }
        let Some(&i) = by_id.get(row.id.as_str()) else {
            return Err(format!("{}: row of point {} which is not in this experiment", file.display(), row.id));
        };
        if row.point != r.points[i].point || row.index != i {
            return Err(format!(
                "{}: row of point {} does not match its parameters in experiment.json",
                file.display(),
                row.id
            ));
        }
        // A row the figures cannot read fails here, naming its file, rather
        // than drawing zeros.
        row.check_fields().map_err(|e| format!("{}: row of point {}: {e}", file.display(), row.id))?;
        if let Some((other, _)) = &slots[i] {
            return Err(format!(
                "point {} ({}) has two rows: in {} and in {}",
                row.id,
                row.point.label(),
                other.display(),
                file.display()
            ));
        }
        slots[i] = Some((file, row));
    }
    Ok(slots)
}
