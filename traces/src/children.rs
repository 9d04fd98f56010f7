//! Processes pmsim starts (Valgrind with the traced program, TLC's JVM,
//! PMDK recovery processes, gem5, compilers): every one is started through
//! [`spawn`], which registers it for as long as it runs, so that a signal
//! that interrupts pmsim (SIGINT, SIGTERM, SIGHUP) is forwarded to it and
//! waited for before pmsim removes its scratch files and ends
//! ([`forward`], [`wait_gone`]); and which asks the kernel to kill it if
//! pmsim itself dies without a chance to forward anything (SIGKILL:
//! `PR_SET_PDEATHSIG`). No child outlives pmsim.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Pids of the children running now.
static RUNNING: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn running() -> std::sync::MutexGuard<'static, Vec<u32>> {
    RUNNING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Refuses every child from now on (the interrupt handler's first step):
/// the process is marked as stopping ([`crate::stop`]) under the list's
/// lock, so a child is either started before this (and forwarded the
/// signal) or refused.
pub(crate) fn close() {
    let _list = running();
    crate::stop::set();
}

/// A child process, registered while it runs; dropped before it was waited
/// for, it is killed and reaped.
#[derive(Debug)]
pub struct Guarded {
    /// `None` once taken by [`Guarded::wait_with_output`].
    child: Option<Child>,
    id: u32,
    reaped: bool,
}

/// Starts `cmd`, registered for signal forwarding and killed when pmsim dies.
pub fn spawn(cmd: &mut Command) -> io::Result<Guarded> {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: prctl, getppid and _exit are async-signal-safe, as pre_exec requires.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent died between fork and prctl: nothing kills us later.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    // Registered under the lock the signal handler's thread takes, so a
    // child is either refused (pmsim is being interrupted) or forwarded to.
    let mut r = running();
    if crate::stop::stopping() {
        return Err(io::Error::new(io::ErrorKind::Interrupted, "pmsim is being interrupted"));
    }
    let child = cmd.spawn()?;
    let id = child.id();
    r.push(id);
    Ok(Guarded { child: Some(child), id, reaped: false })
}

/// Runs `cmd` to its end (as [`Command::status`]), registered meanwhile.
pub fn status(cmd: &mut Command) -> io::Result<ExitStatus> {
    spawn(cmd)?.wait()
}

/// Runs `cmd` to its end collecting its output (as [`Command::output`]),
/// registered meanwhile.
pub fn output(cmd: &mut Command) -> io::Result<Output> {
    use std::process::Stdio;
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    spawn(cmd)?.wait_with_output()
}

impl Guarded {
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The child, for its pipes.
    pub fn child_mut(&mut self) -> &mut Child {
        self.child.as_mut().expect("a child is there until wait_with_output")
    }

    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        let st = self.child_mut().wait();
        if st.is_ok() {
            self.reaped();
        }
        st
    }

    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        let st = self.child_mut().try_wait();
        if let Ok(Some(_)) = st {
            self.reaped();
        }
        st
    }

    pub fn wait_with_output(mut self) -> io::Result<Output> {
        let child = self.child.take().expect("a child is there until wait_with_output");
        let out = child.wait_with_output();
        self.reaped();
        out
    }

    /// Kills the child and reaps it.
    pub fn kill(&mut self) {
        if let (false, Some(c)) = (self.reaped, self.child.as_mut()) {
            let _ = c.kill();
            let _ = self.wait();
        }
    }

    fn reaped(&mut self) {
        if !self.reaped {
            self.reaped = true;
            let mut r = running();
            if let Some(i) = r.iter().position(|&p| p == self.id) {
                r.swap_remove(i);
            }
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.kill();
        // Taken by wait_with_output, which panicked or failed meanwhile.
        self.reaped();
    }
}

/// Sends `sig` to every child running now (the signal handler's thread).
pub fn forward(sig: i32) {
    for &pid in running().iter() {
        // SAFETY: a signal to a child we started and have not reaped.
        unsafe {
            libc::kill(pid as libc::pid_t, sig);
        }
    }
}

/// Waits until every child has been reaped by the thread that started it,
/// at most `limit`; then kills those left and waits a moment more. Returns
/// whether none is left.
pub fn wait_gone(limit: Duration) -> bool {
    let start = Instant::now();
    while !running().is_empty() {
        if start.elapsed() > limit {
            forward(libc::SIGKILL);
            let again = Instant::now();
            while !running().is_empty() && again.elapsed() < Duration::from_secs(2) {
                std::thread::sleep(Duration::from_millis(5));
            }
            return running().is_empty();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_are_registered_while_they_run() {
        let mut c = spawn(Command::new("sleep").arg("5")).unwrap();
        assert!(running().contains(&c.id()));
        forward(libc::SIGTERM);
        let st = c.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(st.signal(), Some(libc::SIGTERM));
        assert!(!running().contains(&c.id()));
        let o = output(Command::new("echo").arg("hi")).unwrap();
        assert_eq!(o.stdout, b"hi\n");
        let id = {
            let c = spawn(Command::new("sleep").arg("5")).unwrap();
            c.id()
        };
        assert!(!running().contains(&id), "a dropped child is killed and reaped");
    }
}
