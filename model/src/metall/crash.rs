//! Metall as a `pmsim crash` target: the datastore a crash leaves.
//!
//! A Metall datastore is the heap file plus its management directory
//! ([`super::store`]); a crash leaves the heap's durable bytes (a crash image)
//! and the directory as the last completed file operation left it. A traced
//! run records each of those operations as a marker:
//!
//! | marker | the directory a crash after it leaves |
//! |---|---|
//! | [`CREATED`] (create) | empty: no management files, no mark |
//! | [`MARK_REMOVED`] (open) | the previous close's files, no mark |
//! | [`written`] (close) | this close's files, no mark |
//! | [`marked`] (close, last) | this close's files and the mark |
//!
//! The files a traced close writes are saved with the trace's heap image
//! ([`crate::pm::Pm::save_with_image`]); both close markers carry their
//! CRC-32, so the copies are known to be that close's. For each crash point
//! [`MetallTarget`] lays that directory out beside the image and runs
//! Metall's own open on them. Without the mark the store must be refused
//! ([`Recovery::Refused`]: Metall's consistency is the snapshot's, and a
//! refusal is the correct outcome); with it, it must open, pass Metall's
//! metadata check and hold every completed operation (the explorer's checks).
//! A store that opens without the mark, or a mark beside files that do not
//! load, is a violation.

use super::{store, Metall, MetallConfig};
use crate::error::ErrorKind;
use crate::family::{recovery_target, CrashPoint, CrashTarget, Recovered, Recovery};
use crate::heap::Heap;
use crate::pm::{image_files_dir, FlushInsn, Pm};
use std::path::Path;
use std::sync::OnceLock;

/// The prefix of every Metall marker.
pub const MARKER_PREFIX: &str = "metall: ";
/// Create made an empty management directory.
pub const CREATED: &str = "metall: management directory created";
/// Open removed the properly-closed mark.
pub const MARK_REMOVED: &str = "metall: properly-closed mark removed";
const WRITTEN: &str = "metall: management files written";
const MARKED: &str = "metall: properly-closed mark written";

/// Close wrote the management files whose [`store::files_crc`] is `crc`.
pub fn written(crc: u32) -> String {
    format!("{WRITTEN} (crc32 {crc:#010x})")
}

/// Close wrote the mark, after the files whose CRC is `crc`.
pub fn marked(crc: u32) -> String {
    format!("{MARKED} (crc32 {crc:#010x})")
}

/// The management directory a crash after a marker leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    /// No Metall marker yet: no datastore.
    None,
    /// No management files (created), or files of an earlier close that
    /// the trace does not have (opened): without the mark nothing reads them.
    Unmarked,
    /// The files of the close with this CRC, and whether the mark is there.
    Files { crc: u32, mark: bool },
}

fn parse(marker: Option<&str>) -> Result<Dir, String> {
    let Some(m) = marker else { return Ok(Dir::None) };
    if m == CREATED || m == MARK_REMOVED {
        return Ok(Dir::Unmarked);
    }
    let crc = |rest: &str| {
        rest.strip_prefix(" (crc32 0x")
            .and_then(|r| r.strip_suffix(')'))
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or_else(|| format!("unreadable Metall marker '{m}'"))
    };
    if let Some(rest) = m.strip_prefix(WRITTEN) {
        return Ok(Dir::Files { crc: crc(rest)?, mark: false });
    }
    if let Some(rest) = m.strip_prefix(MARKED) {
        return Ok(Dir::Files { crc: crc(rest)?, mark: true });
    }
    Err(format!("unknown Metall marker '{m}'"))
}

/// The management files saved with the image, with their CRC.
struct Saved {
    crc: u32,
    files: Vec<(&'static str, Vec<u8>)>,
}

/// The crash target of a Metall configuration.
pub struct MetallTarget {
    cfg: MetallConfig,
    /// Recovery as for any allocator: Metall's open on the heap's directory.
    inner: Box<dyn CrashTarget>,
    /// What [`CrashTarget::load_outside`] read (none when no close wrote any).
    saved: OnceLock<Option<Saved>>,
}

impl MetallTarget {
    pub fn new(cfg: MetallConfig) -> MetallTarget {
        MetallTarget { inner: recovery_target::<Metall>(cfg.clone()), cfg, saved: OnceLock::new() }
    }

    fn files(&self, crc: u32) -> Result<&[(&'static str, Vec<u8>)], String> {
        match self.saved.get() {
            Some(Some(s)) if s.crc == crc => Ok(&s.files),
            _ => Err(format!("no management files with crc32 {crc:#010x} were loaded for this trace")),
        }
    }
}

impl CrashTarget for MetallTarget {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn plain_mallocs_durable(&self) -> bool {
        self.inner.plain_mallocs_durable()
    }

    fn reachability_recovery(&self) -> bool {
        self.inner.reachability_recovery()
    }

    /// Metall's open on `heap` and the directory beside it as it is.
    fn recover(&self, heap: &Heap) -> Result<Box<dyn Recovered>, String> {
        self.inner.recover(heap)
    }

    fn outside_markers(&self) -> Option<&'static str> {
        Some(MARKER_PREFIX)
    }

    fn load_outside(&self, image: &Path, markers: &[&str]) -> Result<(), String> {
        // Create and open always record their step: a trace without one
        // cannot say what a crash leaves beside the heap.
        if !markers.iter().any(|&m| m == CREATED || m == MARK_REMOVED) {
            return Err("the trace records no Metall datastore step (no 'metall: …' marker of create or open); \
                        record it again with this pmsim"
                .into());
        }
        let mut crcs = Vec::new();
        for m in markers {
            if let Dir::Files { crc, .. } = parse(Some(m))? {
                if !crcs.contains(&crc) {
                    crcs.push(crc);
                }
            }
        }
        let saved = match crcs[..] {
            [] => None,
            [crc] => {
                let dir = image_files_dir(image);
                let mut files = Vec::new();
                for name in store::MANAGEMENT_FILES {
                    let p = dir.join(name);
                    let bytes = std::fs::read(&p).map_err(|e| {
                        format!(
                            "{}: cannot read the management file the traced close wrote (saved by `pmsim run … \
                             --values`): {e}",
                            p.display()
                        )
                    })?;
                    files.push((name, bytes));
                }
                let have = store::files_crc(&files);
                if have != crc {
                    return Err(format!(
                        "{}: the management files do not match the trace: crc32 {have:#010x}, the trace's close \
                         wrote {crc:#010x}",
                        dir.display()
                    ));
                }
                Some(Saved { crc, files })
            }
            _ => return Err(format!("the trace closes its Metall store {} times; one close is supported", crcs.len())),
        };
        let _ = self.saved.set(saved);
        Ok(())
    }

    fn recover_at(&self, heap: &Heap, at: &CrashPoint) -> Result<Recovery, String> {
        let dir = store::store_dir(heap.path());
        let mark = match parse(at.marker)? {
            Dir::None => {
                if dir.exists() {
                    std::fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                }
                false
            }
            Dir::Unmarked => {
                store::lay_out(&dir, &[], false).map_err(|e| e.to_string())?;
                false
            }
            Dir::Files { crc, mark } => {
                store::lay_out(&dir, self.files(crc)?, mark).map_err(|e| e.to_string())?;
                mark
            }
        };
        if mark {
            return self.inner.recover(heap).map(Recovery::Recovered);
        }
        let pm = Pm::native(heap, FlushInsn::None).map_err(|e| e.to_string())?;
        match Metall::open(heap, pm, self.cfg.clone()) {
            Err(e) if e.kind == ErrorKind::NotClosed => Ok(Recovery::Refused(e.to_string())),
            Err(e) => Err(format!("a store a crash leaves without its properly-closed mark must be refused as not closed properly; open failed otherwise: {e}")),
            Ok(_) => Err("Metall opened a store that a crash here leaves without its properly-closed mark".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_name_the_directory_a_crash_leaves() {
        assert_eq!(parse(None), Ok(Dir::None));
        assert_eq!(parse(Some(CREATED)), Ok(Dir::Unmarked));
        assert_eq!(parse(Some(MARK_REMOVED)), Ok(Dir::Unmarked));
        assert_eq!(parse(Some(&written(0xdead_beef))), Ok(Dir::Files { crc: 0xdead_beef, mark: false }));
        assert_eq!(parse(Some(&marked(7))), Ok(Dir::Files { crc: 7, mark: true }));
        assert!(parse(Some("metall: something else")).unwrap_err().contains("unknown Metall marker"));
        assert!(parse(Some("metall: management files written (crc32 zz)")).unwrap_err().contains("unreadable"));
    }

    #[test]
    fn a_trace_without_a_datastore_step_is_refused() {
        let t = MetallTarget::new(MetallConfig::default());
        let e = t.load_outside(Path::new("t.pmt.img"), &[]).unwrap_err();
        assert!(e.contains("no Metall datastore step"), "{e}");
        let e = t.load_outside(Path::new("/nonexistent/t.pmt.img"), &[CREATED, &written(1)]).unwrap_err();
        assert!(e.contains("/nonexistent/t.pmt.img.files/chunk_directory") && e.contains("cannot read"), "{e}");
        assert_eq!(t.load_outside(Path::new("t.pmt.img"), &[CREATED]), Ok(()), "no close: no files needed");
    }
}
