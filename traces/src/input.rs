//! What pmsim reads: one check for every input file a command opens (a
//! trace, a heap image, a configuration, an experiment, a report, a
//! manifest), so that an input of the wrong kind is refused at once with
//! one line instead of hanging a reader (a FIFO nobody writes) or being
//! read until memory runs out (`/dev/zero`).
//!
//! * [`open`]: a regular file, opened without blocking on a FIFO; anything
//!   else (a pipe, a device, a directory, a socket) is refused naming what
//!   it is.
//! * [`read_text`]: [`open`], then refused before reading when larger than
//!   [`TEXT_LIMIT`] (no text input of pmsim's is near it), then UTF-8.
//! * [`quoted`] and [`one_line`]: text from a damaged file, or a name with
//!   control characters, escaped so that an error stays one line.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The largest text input pmsim reads (configurations, experiments,
/// reports, manifests are kilobytes; a sweep's merged rows megabytes).
pub const TEXT_LIMIT: u64 = 64 << 20;

/// What a file that is not a regular one is.
fn kind(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a pipe"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Opens the input `path` (`what` it is, for the error: "trace",
/// "configuration"): a regular file, or one error line naming the file and
/// what it is instead. A FIFO is opened without blocking, so that a pipe
/// nobody writes is refused instead of hanging.
pub fn open(path: &Path, what: &str) -> Result<File, String> {
    open_unnamed(path, what).map_err(|e| format!("{}: {e}", shown(path)))
}

/// [`open`] with an error that does not name the file (for an error type
/// that names it itself).
pub fn open_unnamed(path: &Path, what: &str) -> Result<File, String> {
    let f = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(|e| {
        let why = match e.kind() {
            io::ErrorKind::NotFound => "no such file".to_string(),
            _ => e.to_string(),
        };
        format!("cannot open the {what}: {why}")
    })?;
    let m = f.metadata().map_err(|e| format!("cannot read the {what}: {e}"))?;
    if !m.is_file() {
        return Err(format!(
            "not a regular file ({}); pmsim reads {} {what} only from a regular file",
            kind(m.file_type()),
            article(what)
        ));
    }
    // Reads of a regular file block as usual.
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let fl = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(f.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
        }
    }
    Ok(f)
}

/// "a" or "an" before `word`.
fn article(word: &str) -> &'static str {
    match word.chars().next() {
        Some(c) if "aeiou".contains(c) => "an",
        _ => "a",
    }
}

/// Checks that `path` is a regular file pmsim may read as a `what`,
/// without keeping it open.
pub fn check(path: &Path, what: &str) -> Result<(), String> {
    open(path, what).map(drop)
}

/// Reads the text input `path` (see [`open`]): refused before reading when
/// larger than [`TEXT_LIMIT`], and when not UTF-8 (with the offset of the
/// first bad byte).
pub fn read_text(path: &Path, what: &str) -> Result<String, String> {
    let bytes = read_limited(path, what, TEXT_LIMIT)?;
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "{}: offset {}: not UTF-8 text ({} {what} is text)",
            shown(path),
            e.utf8_error().valid_up_to(),
            article(what)
        )
    })
}

/// Reads the input `path` whole (see [`open`]), refused before reading when
/// larger than `limit` bytes.
pub fn read_limited(path: &Path, what: &str, limit: u64) -> Result<Vec<u8>, String> {
    let f = open(path, what)?;
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let too_large = |n: u64| {
        format!(
            "{}: {n} bytes: larger than the {} {} {what} may have; is it the right file?",
            shown(path),
            size_text(limit),
            article(what)
        )
    };
    if len > limit {
        return Err(too_large(len));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    f.take(limit + 1).read_to_end(&mut bytes).map_err(|e| format!("{}: cannot read the {what}: {e}", shown(path)))?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// `bytes` in the largest binary unit that divides it (`64 MiB`).
fn size_text(bytes: u64) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{bytes} bytes")
}

/// A command-line parser of a whole number from `min` to `max` (a count that
/// is meaningless at zero or absurd past a bound), refusing others with the
/// range.
pub fn count_in(min: usize, max: usize) -> impl Fn(&str) -> Result<usize, String> + Clone + Send + Sync + 'static {
    move |s: &str| match s.trim().parse::<u128>() {
        Ok(n) if (min as u128..=max as u128).contains(&n) => Ok(n as usize),
        Ok(_) => Err(format!("{s} is out of range: from {min} to {max}")),
        Err(_) => Err(format!("{s:?} is not a whole number (from {min} to {max})")),
    }
}

/// `s` in double quotes, with control characters and quotes escaped, for an
/// error line (a name or a line of a damaged file).
pub fn quoted(s: &str) -> String {
    format!("{s:?}")
}

/// The path `p` as an error line names it: bytes that are not UTF-8
/// escaped (`\xff`), where `Path::display` would print them all as the
/// same replacement character and two names could not be told apart.
pub fn shown(p: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for chunk in p.as_os_str().as_bytes().utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// `s` with every line break and other control character escaped (`\n`,
/// `\u{1b}`), so an error message is one line whatever it quotes.
pub fn one_line(s: &str) -> String {
    let t = s.trim_end_matches(['\n', '\r']);
    if !t.chars().any(char::is_control) {
        return t.to_string();
    }
    t.chars()
        .map(|c| match c {
            '\n' => "\\n".to_string(),
            '\r' => "\\r".to_string(),
            '\t' => " ".to_string(),
            c if c.is_control() => c.escape_unicode().to_string(),
            c => c.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_that_is_not_utf8_is_shown_escaped() {
        use std::os::unix::ffi::OsStrExt;
        let p = Path::new(std::ffi::OsStr::from_bytes(b"a\xffb/c\xfe.pmt"));
        assert_eq!(shown(p), "a\\xffb/c\\xfe.pmt");
        assert_eq!(shown(Path::new("plain/é.pmt")), "plain/é.pmt");
    }

    #[test]
    fn inputs_of_the_wrong_kind_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = open(&fifo, "trace").unwrap_err();
        assert!(e.contains("a pipe") && e.contains("regular file"), "{e}");
        assert!(open(Path::new("/dev/zero"), "configuration").unwrap_err().contains("a device"));
        assert!(open(d.path(), "trace").unwrap_err().contains("a directory"));
        let big = d.path().join("big");
        std::fs::File::create(&big).unwrap().set_len(TEXT_LIMIT + 1).unwrap();
        assert!(read_text(&big, "report").unwrap_err().contains("larger than the 64 MiB"));
        std::fs::write(&big, b"ok\xff").unwrap();
        assert!(read_text(&big, "report").unwrap_err().contains("offset 2"));
        assert_eq!(one_line("a\nb\x1b"), "a\\nb\\u{1b}");
    }
}
