//! What an interrupted pmsim leaves: nothing. SIGINT, SIGTERM and SIGHUP are
//! caught by a handler that only writes the signal's number into a pipe (the
//! one thing a handler may safely do); a thread reading the pipe removes this
//! process's temporary outputs and scratch heaps, then ends the process by the
//! same signal. SIGKILL cannot be caught: what it leaves is found by the next
//! command ([`pmsim_model::scratch::remove_stale_scratch`]) and by the next
//! writer of the same output.

use std::sync::atomic::{AtomicI32, Ordering};

/// The pipe's write end, for the handler.
static PIPE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    let b = sig as u8;
    // SAFETY: write(2) is async-signal-safe; the descriptor stays open for the
    // life of the process.
    unsafe {
        libc::write(PIPE.load(Ordering::Relaxed), (&b as *const u8).cast(), 1);
    }
}

/// The environment variable that makes pmsim the cleaner of an interrupted
/// pmsim (its pid): it waits for that process to end, removes its scratch
/// files and exits.
const CLEAN_AFTER: &str = "PMSIM_CLEAN_AFTER";

/// When this process is a cleaner ([`CLEAN_AFTER`]), does its work and exits.
pub fn clean_after_if_asked() {
    let Some(pid) = std::env::var(CLEAN_AFTER).ok().and_then(|v| v.parse::<u32>().ok()) else { return };
    let start = std::time::Instant::now();
    while pmsim_traces::output::pid_alive(pid) && start.elapsed() < std::time::Duration::from_secs(60) {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    if !pmsim_traces::output::pid_alive(pid) {
        pmsim_model::scratch::remove_scratch_of(pid);
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
        pmsim_traces::output::remove_temporaries();
        pmsim_model::scratch::remove_own_scratch();
        // Worker threads still run until the process dies and may make
        // another scratch file meanwhile: a cleaner process removes what is
        // left once this one is gone.
        if let Ok(exe) = std::env::current_exe() {
            let _ = std::process::Command::new(exe)
                .env(CLEAN_AFTER, std::process::id().to_string())
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn();
        }
        // SAFETY: back to the default action, then die of the signal, so the
        // parent sees how the process ended.
        unsafe {
            libc::signal(b as libc::c_int, libc::SIG_DFL);
            libc::raise(b as libc::c_int);
            libc::_exit(128 + b as libc::c_int);
        }
    });
    pmsim_model::scratch::remove_stale_scratch();
}
