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

/// Runs `work` while another thread keeps a bar on stderr current: `make`
/// is asked for the bar at every poll until it gives one (a command may
/// show none for its first seconds), `update` then refreshes it every
/// `every`, and the bar is cleared once `work` has ended, however it ends
/// (a panic would otherwise leave the poller running and the scope waiting
/// for it).
pub fn with_bar<T>(
    every: Duration,
    mut make: impl FnMut() -> Option<ProgressBar> + Send,
    mut update: impl FnMut(&ProgressBar) + Send,
    work: impl FnOnce() -> T,
) -> T {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut bar: Option<ProgressBar> = None;
            while !stop.load(Ordering::Relaxed) {
                if bar.is_none() {
                    bar = make();
                }
                if let Some(b) = &bar {
                    update(b);
                }
                std::thread::sleep(every);
            }
            if let Some(b) = bar {
                b.finish_and_clear();
            }
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
    let mut experiment = String::new();
    with_bar(
        Duration::from_millis(100),
        || {
            (!tally.now().0.is_empty())
                .then(|| bar(Some(0), "{prefix} [{elapsed_precise}] {wide_bar} {pos}/{len} points (ETA {eta}) {msg}"))
        },
        |b| {
            let (exp, last) = tally.now();
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
