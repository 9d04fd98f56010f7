//! The Valgrind tool `pmtrace`: where Valgrind's tool kit is, and building the
//! tool out of Valgrind's tree into a cache directory on first use.
//!
//! A Valgrind tool is a static executable linked with `libcoregrind` and
//! `libvex` (the distribution ships them with the headers); the `valgrind`
//! launcher finds it as `$VALGRIND_LIB/pmtrace-amd64-linux`, next to
//! Valgrind's own files (`vgpreload_core`, suppressions), which the build
//! links into the same folder, and the tool's own preload library
//! (`vgpreload_pmtrace`: its wrappers of the pthread mutex calls report the
//! program's locks), which Valgrind loads into the program from there. The sources are compiled into this crate, so
//! the cache key is a checksum of them and of the Valgrind version: a changed
//! tool or an upgraded Valgrind gets a fresh build, an unchanged one none.

use crate::error::PintoolsError;
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// The files of the tool's build, as (name, contents). The Makefile is the one
/// definition of how the tool is compiled and linked, for `make` by hand and
/// for this build alike.
const SOURCES: [(&str, &str); 5] = [
    ("pmtrace.c", include_str!("../valgrind/pmtrace.c")),
    ("Makefile", include_str!("../valgrind/Makefile")),
    ("pmt_writer.h", include_str!("../../traces/c/pmt_writer.h")),
    ("pmtrace.h", include_str!("../include/pmtrace.h")),
    ("pmtrace_preload.c", include_str!("../valgrind/pmtrace_preload.c")),
];

/// The client-request header programs include (`pintools/include/pmtrace.h`),
/// and the trace writer it takes its constants from.
pub const CLIENT_HEADERS: [(&str, &str); 2] = [SOURCES[3], SOURCES[2]];

/// The platform the tool is built for (Valgrind names tools `TOOL-PLATFORM`).
pub const PLATFORM: &str = "amd64-linux";

/// Where the caches of pmsim live: `$PMSIM_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/pmsim`, else `~/.cache/pmsim`, else a folder under the
/// system's temporary directory.
pub fn cache_dir() -> PathBuf {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(d) = env("PMSIM_CACHE_DIR") {
        return d;
    }
    if let Some(d) = env("XDG_CACHE_HOME") {
        return d.join("pmsim");
    }
    if let Some(h) = env("HOME") {
        return h.join(".cache").join("pmsim");
    }
    std::env::temp_dir().join("pmsim-cache")
}

/// Finds `name` on `$PATH`.
pub(crate) fn which(name: &OsStr) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| is_executable(p))
}

pub(crate) fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Valgrind's launcher, headers, tool-kit archives and own files.
#[derive(Clone, Debug)]
pub struct ValgrindKit {
    pub valgrind: PathBuf,
    /// `pub_tool_*.h`, `valgrind.h`.
    pub include: PathBuf,
    /// `libcoregrind-amd64-linux.a`, `libvex-…`, `libgcc-sup-…`.
    pub kit: PathBuf,
    /// The installed tools, `vgpreload_core-…so` and `default.supp`.
    pub libexec: PathBuf,
    /// `valgrind --version`, e.g. `valgrind-3.19.0`.
    pub version: String,
}

const INCLUDE_DIRS: [&str; 2] = ["/usr/include/valgrind", "/usr/local/include/valgrind"];
const LIB_DIRS: [&str; 6] = [
    "/usr/lib/x86_64-linux-gnu/valgrind",
    "/usr/libexec/valgrind",
    "/usr/lib/valgrind",
    "/usr/lib64/valgrind",
    "/usr/local/libexec/valgrind",
    "/usr/local/lib/valgrind",
];

impl ValgrindKit {
    /// Looks for Valgrind where distributions install it.
    pub fn find() -> Result<ValgrindKit, PintoolsError> {
        let missing = |what: &str| {
            PintoolsError::Missing(format!(
                "{what} not found: install Valgrind with its tool kit (Debian: apt-get install valgrind; \
                 scripts/setup.sh does)"
            ))
        };
        let valgrind = which(OsStr::new("valgrind")).ok_or_else(|| missing("valgrind"))?;
        let find = |dirs: &[&str], file: &str| {
            dirs.iter()
                .map(PathBuf::from)
                .find(|d| d.join(file).is_file())
                .ok_or_else(|| missing(&format!("Valgrind's {file} (looked in {})", dirs.join(", "))))
        };
        let include = find(&INCLUDE_DIRS, "pub_tool_tooliface.h")?;
        let kit = find(&LIB_DIRS, &format!("libcoregrind-{PLATFORM}.a"))?;
        let libexec = find(&LIB_DIRS, &format!("vgpreload_core-{PLATFORM}.so"))?;
        let out = pmsim_traces::children::output(Command::new(&valgrind).arg("--version"))
            .map_err(|e| PintoolsError::io(format!("running {} --version", valgrind.display()), e))?;
        let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Ok(ValgrindKit { valgrind, include, kit, libexec, version })
    }
}

/// A built tool: the folder to give Valgrind as `VALGRIND_LIB`.
#[derive(Clone, Debug)]
pub struct ValgrindTool {
    pub kit: ValgrindKit,
    pub lib_dir: PathBuf,
}

impl ValgrindTool {
    /// The tool for this Valgrind, built into `cache` unless it is there.
    /// Concurrent first uses are safe: each builds in a folder of its own and
    /// renames it into place; the loser of the race keeps the winner's.
    pub fn ensure(cache: &Path) -> Result<ValgrindTool, PintoolsError> {
        let kit = ValgrindKit::find()?;
        let mut h = crc32fast::Hasher::new();
        for (name, text) in SOURCES {
            h.update(name.as_bytes());
            h.update(text.as_bytes());
        }
        for p in [&kit.include, &kit.kit, &kit.libexec] {
            h.update(p.as_os_str().as_encoded_bytes());
        }
        h.update(kit.version.as_bytes());
        let dir = cache.join(format!("pmtrace-{:08x}", h.finalize()));
        let lib_dir = dir.join("lib");
        if !lib_dir.join(format!("pmtrace-{PLATFORM}")).is_file() {
            build(&kit, cache, &dir)?;
        }
        Ok(ValgrindTool { kit, lib_dir })
    }
}

/// A fresh folder in `cache` to build in (renamed into place when done).
pub(crate) fn scratch(cache: &Path, what: &str) -> Result<PathBuf, PintoolsError> {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let tmp = cache.join(format!(".{what}-{}-{nanos}", std::process::id()));
    fs::create_dir_all(&tmp).map_err(|e| PintoolsError::io(format!("creating {}", tmp.display()), e))?;
    Ok(tmp)
}

/// Moves a finished build into place, unless a concurrent one got there first.
pub(crate) fn publish(tmp: &Path, dir: &Path) -> Result<(), PintoolsError> {
    match fs::rename(tmp, dir) {
        Ok(()) => Ok(()),
        Err(_) if dir.exists() => {
            let _ = fs::remove_dir_all(tmp);
            Ok(())
        }
        Err(e) => Err(PintoolsError::io(format!("moving {} to {}", tmp.display(), dir.display()), e)),
    }
}

/// Runs a build command; a failure carries the last lines of its output.
pub(crate) fn run_build(cmd: &mut Command, what: &str, dir: &Path) -> Result<(), PintoolsError> {
    let prog = cmd.get_program().to_string_lossy().into_owned();
    let out = pmsim_traces::children::output(cmd).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            PintoolsError::Missing(format!("{prog} not found: install a C toolchain (Debian: build-essential)"))
        } else {
            PintoolsError::io(format!("running {prog}"), e)
        }
    })?;
    if out.status.success() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let log = lines[lines.len().saturating_sub(6)..].join("\n");
    Err(PintoolsError::Build { what: what.to_string(), dir: dir.to_path_buf(), log })
}

fn build(kit: &ValgrindKit, cache: &Path, dir: &Path) -> Result<(), PintoolsError> {
    let tmp = scratch(cache, "pmtrace")?;
    for (name, text) in SOURCES {
        fs::write(tmp.join(name), text).map_err(|e| PintoolsError::io(format!("writing {}", tmp.display()), e))?;
    }
    let mut make = Command::new("make");
    make.arg("-s").arg("-C").arg(&tmp);
    for (var, val) in [("VG_INC", &kit.include), ("VG_KIT", &kit.kit), ("VG_LIBEXEC", &kit.libexec)] {
        make.arg(format!("{var}={}", val.display()));
    }
    make.args(["WRITER=.", "CLREQ=.", "OUT=."]);
    if let Err(e) = run_build(&mut make, "the Valgrind tool pmtrace", &tmp) {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    publish(&tmp, dir)
}
