//! PMDK crash images recovered in processes of their own, so that several
//! recover at once (libpmemobj opens a pool's UUID once per process; see
//! [`super::PmdkCrash`]). pmsim re-runs itself with [`ENV`] set, and that
//! process answers requests on its stdin, one line each, on its stdout:
//!
//! * `recover PATH`: [`super::recover_here`] on the pool file at `PATH`
//!   (the requester wrote the image there); the pool stays open. Answers
//!   `ok⇥LIVE⇥CHECK`, `LIVE` the objects as `OFF:SIZE` joined by `,` and
//!   `CHECK` what `pmemobj_check` found wrong (empty: nothing), or
//!   `error⇥MESSAGE` (⇥ a tab).
//! * `malloc SIZE`: a probe allocation in the open pool: `at OFF` or `none`.
//! * `close`: closes the pool: `closed`.
//!
//! It ends when its stdin closes: when the requester drops it or ends.

use super::{recover_here, RecoveredHere};
use pmsim_traces::children::{self, Guarded};
use std::ffi::{CStr, CString};
use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set in a recovery process's environment, to the requester's pid (so a
/// recovery process names the run it serves).
const ENV: &str = "PMSIM_PMDK_RECOVERY";

/// Whether this executable serves recoveries when re-run with [`ENV`].
static SERVES: AtomicBool = AtomicBool::new(false);

/// pmsim's `main` calls this first. With [`ENV`] set this process is a
/// recovery process: it serves requests until its stdin closes, then exits.
/// Otherwise it notes that this executable can be re-run as one (an
/// executable that never calls this, such as a test binary, recovers PMDK
/// crash images in its own process, one at a time).
pub fn serve_if_asked() {
    if std::env::var_os(ENV).is_none() {
        SERVES.store(true, Ordering::Relaxed);
        return;
    }
    let served = serve(std::io::stdin().lock(), std::io::stdout().lock());
    std::process::exit(served.is_err() as i32);
}

/// Whether recovery processes can be started (see [`serve_if_asked`]).
pub(super) fn available() -> bool {
    SERVES.load(Ordering::Relaxed)
}

/// Answers the requests read from `input` on `out` (see the module's documentation).
fn serve(input: impl BufRead, mut out: impl Write) -> std::io::Result<()> {
    let mut open: Option<RecoveredHere> = None;
    for line in input.lines() {
        let line = line?;
        let (request, arg) = line.split_once(' ').unwrap_or((&line, ""));
        let answer = match request {
            "recover" => {
                open = None;
                let path = CString::new(arg).map_err(|_| "the pool's path contains a NUL byte".to_string());
                match path.and_then(|p| recover_here(&p)) {
                    Ok(r) => {
                        let live: Vec<String> = r.live.iter().map(|(o, n)| format!("{o}:{n}")).collect();
                        let check = r.check.as_ref().err().map_or("", String::as_str);
                        let a = format!("ok\t{}\t{check}", live.join(","));
                        open = Some(r);
                        a
                    }
                    Err(e) => format!("error\t{e}"),
                }
            }
            "malloc" => match (&open, arg.parse::<u64>()) {
                (Some(r), Ok(size)) => r.pool.malloc(size).map_or("none".into(), |o| format!("at {o}")),
                (None, _) => "error\tno pool is open".into(),
                (_, Err(_)) => format!("error\tnot a size: '{arg}'"),
            },
            "close" => {
                open = None;
                "closed".into()
            }
            _ => format!("error\tunknown request '{line}'"),
        };
        writeln!(out, "{}", answer.replace(['\n', '\r'], " "))?;
        out.flush()?;
    }
    Ok(())
}

/// What a recovery found: the live objects, and `pmemobj_check`'s verdict.
pub(super) type Found = (Vec<(u64, u64)>, Result<(), String>);

/// Reads the answer to `recover` (see the module's documentation): `Err`
/// with the recovery's failure, or with what is wrong with the answer.
fn parse_recovered(answer: &str) -> Result<Found, String> {
    let mut f = answer.splitn(3, '\t');
    match (f.next(), f.next(), f.next()) {
        (Some("ok"), Some(live), Some(check)) => {
            let pair = |p: &str| {
                let (o, n) = p.split_once(':')?;
                Some((o.parse().ok()?, n.parse().ok()?))
            };
            let live: Result<Vec<_>, _> = live.split(',').filter(|p| !p.is_empty()).map(|p| pair(p).ok_or(p)).collect();
            let live = live.map_err(|p| format!("the PMDK recovery process named an object '{p}'"))?;
            Ok((live, if check.is_empty() { Ok(()) } else { Err(check.to_string()) }))
        }
        (Some("error"), Some(e), _) => Err(e.to_string()),
        _ => Err(format!("the PMDK recovery process answered '{answer}'")),
    }
}

/// A recovery process, started by [`Process::start`]; killed on drop.
pub(super) struct Process {
    child: Guarded,
    to: ChildStdin,
    from: BufReader<ChildStdout>,
    /// Why it stopped answering, once it did.
    ended: Option<String>,
}

impl Process {
    /// Re-runs this executable as a recovery process.
    pub(super) fn start() -> Result<Process, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find pmsim's executable: {e}"))?;
        let mut child = children::spawn(
            Command::new(&exe).env(ENV, std::process::id().to_string()).stdin(Stdio::piped()).stdout(Stdio::piped()),
        )
        .map_err(|e| format!("cannot start a PMDK recovery process ({}): {e}", exe.display()))?;
        let to = child.child_mut().stdin.take().expect("piped");
        let from = BufReader::new(child.child_mut().stdout.take().expect("piped"));
        Ok(Process { child, to, from, ended: None })
    }

    /// Whether it still answers.
    pub(super) fn alive(&self) -> bool {
        self.ended.is_none()
    }

    /// Sends `request`, returns the answer; `Err` when the process does
    /// not answer (it died: say, libpmemobj crashed on the image).
    fn ask(&mut self, request: &str) -> Result<String, String> {
        if let Some(e) = &self.ended {
            return Err(e.clone());
        }
        let mut line = String::new();
        let r =
            writeln!(self.to, "{request}").and_then(|_| self.to.flush()).and_then(|_| self.from.read_line(&mut line));
        if matches!(r, Ok(n) if n > 0) {
            line.truncate(line.trim_end_matches('\n').len());
            return Ok(line);
        }
        // It ended (or is stopped here): its status says how.
        let _ = self.child.child_mut().kill();
        let status = self.child.wait().map_or_else(|e| e.to_string(), |s| s.to_string());
        let what = request.split(' ').next().unwrap_or(request);
        let e = format!("the PMDK recovery process {} ended during '{what}': {status}", self.child.id());
        self.ended = Some(e.clone());
        Err(e)
    }

    /// Recovers the image in the pool file at `path` (see [`super::recover_here`]).
    pub(super) fn recover(&mut self, path: &CStr) -> Result<Found, String> {
        let path = path.to_str().ok().filter(|p| !p.contains('\n'));
        let path = path.ok_or("the scratch pool's path is not one line of UTF-8")?;
        parse_recovered(&self.ask(&format!("recover {path}"))?)
    }

    /// A probe allocation in the recovered pool; panics (the explorer
    /// reports it for the image) when the process died in it.
    pub(super) fn malloc(&mut self, size: u64) -> Option<u64> {
        match self.ask(&format!("malloc {size}")) {
            Ok(a) => a.strip_prefix("at ").and_then(|o| o.parse().ok()),
            Err(e) => panic!("{e}"),
        }
    }

    /// Closes the recovered pool.
    pub(super) fn close(&mut self) -> Result<(), String> {
        match self.ask("close")?.as_str() {
            "closed" => Ok(()),
            a => Err(format!("the PMDK recovery process answered '{a}' to 'close'")),
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // Nothing of it is needed any more: its pool file is the requester's.
        self.child.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_to_recover_are_read_back() {
        let live = vec![(0x1000, 64), (0x2040, 128)];
        assert_eq!(parse_recovered("ok\t4096:64,8256:128\t"), Ok((live, Ok(()))));
        assert_eq!(parse_recovered("ok\t\tlane 3:\tbad log"), Ok((vec![], Err("lane 3:\tbad log".into()))));
        assert_eq!(parse_recovered("error\tpmemobj_open: no"), Err("pmemobj_open: no".into()));
        assert!(parse_recovered("ok\t12\t").unwrap_err().contains("named an object '12'"));
        assert!(parse_recovered("what").unwrap_err().contains("answered 'what'"));
    }

    #[test]
    fn requests_without_a_pool_are_answered_with_errors() {
        let mut out = Vec::new();
        serve(&b"malloc 64\nrecover /nonexistent/pool\nfrob\nclose\n"[..], &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "error\tno pool is open");
        assert!(lines[1].starts_with("error\tpmempool check of the crash image"), "{}", lines[1]);
        assert_eq!(lines[2], "error\tunknown request 'frob'");
        assert_eq!(lines[3], "closed");
    }
}
