//! The one way a command shows progress: a bar on stderr (indicatif draws
//! nothing when stderr is not a terminal), in the template the command
//! gives, updated from the library's counters by a thread that polls them
//! while the work runs on the caller's thread.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use pmsim_analyses::sweep::Tally;
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

/// Runs `work` (a sweep, or the main job's sweeps one after the other) with
/// a bar of the current experiment's points, drawn from `tally`; the bar
/// starts again (its elapsed time and estimate too) with each experiment.
pub fn points<T>(tally: &Tally, work: impl FnOnce() -> T) -> T {
    let mut bar: Option<ProgressBar> = None;
    let mut experiment = String::new();
    polled(
        Duration::from_millis(100),
        |ended| {
            if ended {
                if let Some(b) = bar.take() {
                    b.finish_and_clear();
                }
                return;
            }
            let (exp, last) = tally.now();
            if exp.is_empty() {
                return;
            }
            let b = bar.get_or_insert_with(|| {
                self::bar(Some(0), "{prefix} [{elapsed_precise}] {wide_bar} {pos}/{len} points (ETA {eta}) {msg}")
            });
            if exp != experiment {
                b.reset();
                b.set_prefix(exp.clone());
                experiment = exp;
            }
            b.set_length(tally.total());
            b.set_position(tally.done());
            b.set_message(last);
        },
        work,
    )
}
