//! The list of TLC models (`specs/models.toml`): which specification and
//! configuration each one checks, whether it is part of the quick (small) set,
//! and what TLC is expected to conclude. Expectations live here, next to the
//! models, so that the runner never needs to know any result in advance.

use serde::Deserialize;
use std::path::{Path, PathBuf};

/// File name of the manifest inside the specs directory.
pub const MANIFEST: &str = "models.toml";

/// Which runs include a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Size {
    /// Checked by every run (and CI); finishes in seconds.
    Small,
    /// Checked only with `--large`; may take minutes.
    Large,
}

/// What TLC must conclude for the model to count as a success.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Expect {
    /// Every invariant holds in every reachable state.
    Pass,
    /// A counterexample violates one of the listed invariants (a broken variant).
    Refuted,
}

/// One TLC model.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Model {
    /// Short unique name, shown in the table and matched by `--filter`.
    pub name: String,
    /// Folder of the specification, relative to the specs directory.
    pub dir: String,
    /// The TLA+ module to check (`<module>.tla` in `dir`).
    pub module: String,
    /// The TLC configuration (`.cfg` in `dir`).
    pub cfg: String,
    pub size: Size,
    pub expect: Expect,
    /// For a refuted model: the invariants an acceptable counterexample violates.
    #[serde(default)]
    pub violates: Vec<String>,
    /// One line on what the model shows.
    #[serde(default)]
    pub about: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    model: Vec<Model>,
}

/// Reads and checks the manifest of the specs directory `root`.
pub fn load(root: &Path) -> Result<Vec<Model>, String> {
    let path = root.join(MANIFEST);
    let text = pmsim_traces::input::read_text(&path, "model manifest")?;
    let m: Manifest = toml::from_str(&text).map_err(|e| format!("{}: {}", path.display(), one_line(&e.to_string())))?;
    let mut seen = std::collections::HashSet::new();
    for model in &m.model {
        let what = format!("{}: model {}", path.display(), model.name);
        if !seen.insert(model.name.as_str()) {
            return Err(format!("{what}: name used twice"));
        }
        for f in [model.tla_path(root), model.cfg_path(root)] {
            if !f.is_file() {
                return Err(format!("{what}: {} does not exist", f.display()));
            }
        }
        match (model.expect, model.violates.is_empty()) {
            (Expect::Refuted, true) => return Err(format!("{what}: expect = \"refuted\" needs `violates`")),
            (Expect::Pass, false) => return Err(format!("{what}: `violates` given for a model expected to pass")),
            _ => {}
        }
    }
    Ok(m.model)
}

impl Model {
    pub fn tla_path(&self, root: &Path) -> PathBuf {
        root.join(&self.dir).join(format!("{}.tla", self.module))
    }

    pub fn cfg_path(&self, root: &Path) -> PathBuf {
        root.join(&self.dir).join(&self.cfg)
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
