//! The one way a command shows progress: a bar on stderr (indicatif draws
//! nothing when stderr is not a terminal), in the template the command
//! gives, updated from the library's counters by a thread that polls them
//! while the work runs on the caller's thread.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A bar on stderr of `len` steps (`None`: not known yet) drawn with `template`.
pub fn bar(len: Option<u64>, template: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(len, ProgressDrawTarget::stderr());
    bar.set_style(ProgressStyle::with_template(template).expect("a valid template").progress_chars("=> "));
    bar
}

/// Runs `work` while another thread calls `poll(false)` every `every`, then
/// `poll(true)` once `work` has ended, however it ends (a panic would
/// otherwise leave the poller running and the scope waiting for it).
pub fn polled<T>(every: Duration, mut poll: impl FnMut(bool) + Send, work: impl FnOnce() -> T) -> T {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                poll(false);
                std::thread::sleep(every);
            }
            poll(true);
        });
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = Stop(&stop);
        work()
    })
}
