//! pmsim-specs: checks pmsim's TLA+ specifications (slab morphing, the
//! bookkeeping log's GC, LLFree's single-CAS protocol) with TLC.
//!
//! The specs directory holds one folder per specification, the shared
//! persistency model (`shared/PersistencyModel.tla`) and `models.toml`, which
//! lists every model with its expected outcome. [`check_model`] runs TLC on one
//! model in a fresh temporary directory (so TLC's state files never land in
//! the source tree), reads its figures and judges the outcome against the
//! expectation: a correct model must pass, a broken variant must be refuted
//! by one of the invariants it names, anything else is unexpected.

pub mod manifest;
pub mod tlc;
pub mod validate;

pub use manifest::{Expect, Model, Size};
pub use tlc::{Report, Tlc, Verdict};

use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Folder of the modules every specification may use.
pub const SHARED_DIR: &str = "shared";

/// The specs directory of this source tree.
pub fn default_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// How a model's run compares with its expectation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    /// Expected to pass, and every invariant held.
    Pass,
    /// A broken variant, refuted as expected.
    Refuted,
    /// Anything else: a correct model refuted, a broken one not refuted (or by
    /// the wrong invariant), or TLC failing.
    Unexpected,
}

/// One model's run.
#[derive(Clone, Debug, Serialize)]
pub struct ModelResult {
    pub name: String,
    pub size: Size,
    pub expect: Expect,
    pub status: Status,
    /// States generated, distinct states and search depth, as TLC reported them.
    pub states: Option<u64>,
    pub distinct: Option<u64>,
    pub depth: Option<u64>,
    /// Wall time of the TLC run, measured here.
    pub seconds: f64,
    /// The invariant the counterexample violates, and its length in states.
    pub violated: Option<String>,
    pub trace: Option<usize>,
    /// Why the status is [`Status::Unexpected`].
    pub reason: Option<String>,
}

/// Which models a run checks.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// Include the large models.
    pub large: bool,
    /// Only models whose name contains this (case-insensitive).
    pub filter: Option<String>,
}

/// The models of `all` that `sel` picks, in manifest order.
pub fn select(all: &[Model], sel: &Selection) -> Vec<Model> {
    let filter = sel.filter.as_ref().map(|f| f.to_lowercase());
    all.iter()
        .filter(|m| sel.large || m.size == Size::Small)
        .filter(|m| match &filter {
            Some(f) => m.name.to_lowercase().contains(f),
            None => true,
        })
        .cloned()
        .collect()
}

/// This process's scratch directory in the temporary directory, where TLC
/// runs and writes its state files (removed with the process's scratch,
/// also when it is interrupted or killed).
pub(crate) fn scratch_dir() -> Result<PathBuf, String> {
    pmsim_traces::owned::scratch_dir(pmsim_traces::owned::Place::Temp)
        .map_err(|e| format!("cannot make a scratch directory: {e}"))
}

/// TLC workers for this machine: one per core, at most two (the small models
/// gain nothing from more, and the machine is shared).
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).min(2)
}

/// Runs TLC on `model` of the specs directory `root` and judges the outcome.
/// An error is returned only when TLC cannot be run at all.
pub fn check_model(tlc: &Tlc, root: &Path, model: &Model, workers: usize) -> Result<ModelResult, String> {
    let work = tempfile::Builder::new()
        .prefix("tlc-")
        .tempdir_in(scratch_dir()?)
        .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    for dir in [root.join(&model.dir), root.join(SHARED_DIR)] {
        copy_modules(&dir, work.path())?;
    }
    let cfg = model.cfg_path(root);
    std::fs::copy(&cfg, work.path().join(&model.cfg)).map_err(|e| format!("{}: {e}", cfg.display()))?;
    let start = Instant::now();
    let out = tlc.run(&tlc::Job {
        dir: work.path(),
        module: &model.module,
        cfg: &model.cfg,
        workers,
        options: &[],
        short: model.size == Size::Small,
        heap_mb: None,
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let report = tlc::parse(&out);
    let (status, reason) = judge(model, &report.verdict);
    let (violated, trace) = match &report.verdict {
        Verdict::Violated { invariant, trace } => (Some(invariant.clone()), Some(*trace)),
        _ => (None, None),
    };
    Ok(ModelResult {
        name: model.name.clone(),
        size: model.size,
        expect: model.expect,
        status,
        states: report.states,
        distinct: report.distinct,
        depth: report.depth,
        seconds,
        violated,
        trace,
        reason,
    })
}

/// Compares TLC's verdict with what the manifest expects.
pub fn judge(model: &Model, verdict: &Verdict) -> (Status, Option<String>) {
    match (model.expect, verdict) {
        (Expect::Pass, Verdict::NoError) => (Status::Pass, None),
        (Expect::Refuted, Verdict::Violated { invariant, .. }) if model.violates.contains(invariant) => {
            (Status::Refuted, None)
        }
        (Expect::Refuted, Verdict::Violated { invariant, .. }) => {
            (Status::Unexpected, Some(format!("refuted by {invariant}, expected one of {}", model.violates.join(", "))))
        }
        (Expect::Refuted, Verdict::NoError) => {
            (Status::Unexpected, Some("no error found, expected a counterexample".into()))
        }
        (_, Verdict::Violated { invariant, .. }) => (Status::Unexpected, Some(format!("{invariant} is violated"))),
        (_, Verdict::Deadlock) => (Status::Unexpected, Some("deadlock reached".into())),
        (_, Verdict::Failed(msg)) => (Status::Unexpected, Some(format!("TLC failed: {msg}"))),
    }
}

/// Copies the `.tla` files of `from` into `to`.
pub(crate) fn copy_modules(from: &Path, to: &Path) -> Result<(), String> {
    let entries = std::fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| format!("{}: {e}", from.display()))?.path();
        if path.extension().is_some_and(|x| x == "tla") {
            let name = path.file_name().expect("a file in a directory listing");
            std::fs::copy(&path, to.join(name)).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}
