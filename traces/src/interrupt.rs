//! What an interrupted pmsim leaves: nothing. SIGINT, SIGTERM and SIGHUP are
//! caught by a handler that only writes the signal's number into a pipe (the
//! one thing a handler may safely do); a thread reading the pipe marks the
//! process as interrupted (no output is committed and no child started
//! from then on) and marks its locks as held by a process that is ending
//! (a pmsim started on the same output meanwhile waits for it rather than
//! being refused), forwards the signal to every process pmsim started
//! ([`crate::children`]) and waits for them, removes this process's
//! temporary outputs, locks and scratch directories ([`crate::owned`]),
//! then ends the process by the same signal. A worker thread still running
//! may make a file meanwhile: a cleaner process removes what is left once
//! this one is gone. SIGKILL cannot be caught: its children die with it
//! (`PR_SET_PDEATHSIG`), and what it leaves is found by the next pmsim
//! ([`crate::owned::remove_stale_scratch`]) and by the next writer into the
//! same directory.

use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// The pipe's write end, for the handler.
static PIPE: AtomicI32 = AtomicI32::new(-1);

/// Whether this process is being interrupted: nothing may be committed or
/// started any more ([`crate::stop`] holds the flag).
pub fn interrupted() -> bool {
    crate::stop::stopping()
}

extern "C" fn on_signal(sig: libc::c_int) {
    let b = sig as u8;
    // SAFETY: write(2) is async-signal-safe; the descriptor stays open for the
    // life of the process.
    unsafe {
        libc::write(PIPE.load(Ordering::Relaxed), (&b as *const u8).cast(), 1);
    }
}

/// The environment variables that make pmsim the cleaner of an interrupted
/// pmsim: its pid, and the directories of its own it could not remove
/// (one per line). The cleaner waits for that process to end, removes them
/// and exits.
const CLEAN_AFTER: &str = "PMSIM_CLEAN_AFTER";
const CLEAN_DIRS: &str = "PMSIM_CLEAN_DIRS";

/// When this process is a cleaner ([`CLEAN_AFTER`]), does its work and
/// exits; `main` calls this first.
pub fn clean_after_if_asked() {
    let Some(pid) = std::env::var(CLEAN_AFTER).ok().and_then(|v| v.parse::<u32>().ok()) else { return };
    let dirs: Vec<PathBuf> =
        std::env::var_os(CLEAN_DIRS).map(|v| std::env::split_paths(&v).collect()).unwrap_or_default();
    let start = std::time::Instant::now();
    while crate::owned::pid_alive(pid) && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(2));
    }
    if !crate::owned::pid_alive(pid) {
        for d in dirs {
            crate::owned::remove_left_by(&d, pid);
        }
    }
    std::process::exit(0);
}

/// Installs the handlers and starts the cleaning thread; then removes what
/// pmsim processes that are gone left behind.
pub fn install() {
    let mut fds = [0; 2];
    // SAFETY: a two-int array for pipe2; the handler is an extern "C" fn.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return;
        }
        PIPE.store(fds[1], Ordering::Relaxed);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::signal(sig, on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t);
        }
    }
    let read_fd = fds[0];
    std::thread::spawn(move || {
        let mut b = 0u8;
        // SAFETY: reads one byte into `b` from the pipe's read end.
        while unsafe { libc::read(read_fd, (&mut b as *mut u8).cast(), 1) } != 1 {}
        let sig = b as libc::c_int;
        crate::children::close();
        crate::output::mark_interrupted();
        crate::children::forward(sig);
        crate::children::wait_gone(Duration::from_secs(10));
        crate::output::remove_temporaries();
        let left = crate::owned::remove_all_live();
        if !left.is_empty() {
            if let Ok(exe) = std::env::current_exe() {
                let _ = std::process::Command::new(exe)
                    .env(CLEAN_AFTER, std::process::id().to_string())
                    .env(CLEAN_DIRS, std::env::join_paths(&left).unwrap_or_default())
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn();
            }
        }
        // SAFETY: back to the default action, then die of the signal, so the
        // parent sees how the process ended.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
            libc::_exit(128 + sig);
        }
    });
    crate::owned::remove_stale_scratch();
}
