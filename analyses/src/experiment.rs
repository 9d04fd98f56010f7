//! Experiment definitions: a TOML file (or command-line ranges) naming every
//! parameter of a sweep, each a value or a list of values, and their cross
//! product as an ordered list of [`Point`]s.
//!
//! ```toml
//! [experiment]
//! name = "fig16a-stripes"
//! title = "Estimated persist time and reflush ratio vs bit stripes"
//! mode = "sim"                     # sim | native | both (or a list)
//!
//! [sweep]
//! alloc = ["nvalloc-log"]          # allocator specs, as `pmsim run --alloc`; "all" = every allocator
//! workload = ["threadtest"]        # workload presets, as `pmsim run --workload`
//! threads = [1, 2, 4]
//! scale = "tiny"
//! seed = 42
//! stripes = [1, 2, 4, 8, 16, 32]   # any other bare key: an allocator parameter (`pmsim run --set`)
//! "param.iterations" = [20]        # param.KEY: a workload parameter (`pmsim run --param`)
//! "sim.eadr" = [false, true]       # sim.PATH: a simulator configuration key (sim/optane.toml)
//! ```
//!
//! Keys may also be written as TOML sub-tables (`[sweep.sim] eadr = true`).
//! Every point is checked when the experiment is resolved (allocator specs
//! parsed with their parameters, workloads built and validated, simulator
//! configurations validated), so a misspelt key fails before anything runs,
//! with the file and the key named.

use crate::point::{Mode, Point};
use pmsim_model::runner::AllocSpec;
use pmsim_model::workloads::{Scale, Workload};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// An experiment as written: its description and the sweep's axes.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExperimentFile {
    #[serde(default)]
    pub experiment: Meta,
    #[serde(default)]
    pub sweep: toml::Table,
}

/// What an experiment is for (shown in reports).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Meta {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub description: String,
    /// The default mode when `[sweep]` has no `mode` key.
    #[serde(default)]
    pub mode: Option<Mode>,
    /// The figures `pmsim reproduce` draws from this experiment's rows (ids of
    /// [`crate::figures::FIGURES`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub figures: Vec<String>,
}

/// An experiment with every axis resolved to its list of values.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Experiment {
    pub meta: Meta,
    /// Axis name → its values, as JSON (numbers, booleans, strings).
    pub axes: BTreeMap<String, Vec<Value>>,
}

/// The keys that are not allocator, workload or simulator parameters.
const CORE: [&str; 6] = ["alloc", "workload", "threads", "scale", "seed", "mode"];

/// A key of the sweep, by what it sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind<'a> {
    Core(&'a str),
    /// `param.KEY`
    Workload(&'a str),
    /// `sim.PATH`
    Sim(&'a str),
    /// Any other bare key (or `alloc.KEY`).
    Alloc(&'a str),
}

pub fn key_kind(key: &str) -> KeyKind<'_> {
    if let Some(k) = key.strip_prefix("param.") {
        KeyKind::Workload(k)
    } else if let Some(k) = key.strip_prefix("sim.") {
        KeyKind::Sim(k)
    } else if let Some(k) = key.strip_prefix("alloc.") {
        KeyKind::Alloc(k)
    } else if CORE.contains(&key) {
        KeyKind::Core(key)
    } else {
        KeyKind::Alloc(key)
    }
}

/// The error of an experiment: one line naming where.
pub type ExpError = String;

impl Experiment {
    /// Reads an experiment file; errors name the file.
    pub fn from_file(path: &Path) -> Result<Experiment, ExpError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: cannot read: {e}"))?;
        Self::from_toml(&text, &name)
    }

    /// Parses an experiment; `name` (a file name) prefixes every error.
    pub fn from_toml(text: &str, name: &str) -> Result<Experiment, ExpError> {
        let f: ExperimentFile = toml::from_str(text).map_err(|e| {
            let at = e
                .span()
                .map(|s| {
                    let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                    format!(" (line {line})")
                })
                .unwrap_or_default();
            format!("{name}: {}{at}", e.message().trim().replace('\n', ": "))
        })?;
        let mut axes = BTreeMap::new();
        flatten("", &f.sweep, &mut axes).map_err(|e| format!("{name}: {e}"))?;
        let mut exp = Experiment { meta: f.experiment, axes };
        if exp.meta.name.is_empty() {
            exp.meta.name = Path::new(name).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        }
        // The name becomes file and directory names (reports, reproduce's sweeps).
        pmsim_traces::output::plain_name("experiment name", &exp.meta.name).map_err(|e| format!("{name}: {e}"))?;
        for f in &exp.meta.figures {
            if crate::figures::by_id(f).is_none() {
                let known: Vec<&str> = crate::figures::FIGURES.iter().map(|f| f.0).collect();
                return Err(format!("{name}: unknown figure '{f}' (known: {})", known.join(", ")));
            }
        }
        if exp.axes.is_empty() {
            return Err(format!(
                "{name}: no [sweep] table (or an empty one): an experiment names the parameters it sweeps"
            ));
        }
        exp.points().map_err(|e| format!("{name}: {e}"))?;
        Ok(exp)
    }

    /// An experiment with no file: defaults and then `--set`s.
    pub fn empty(name: &str) -> Experiment {
        Experiment { meta: Meta { name: name.into(), ..Meta::default() }, axes: BTreeMap::new() }
    }

    /// Replaces an axis from the command line: `key=v1,v2,…` (each value
    /// read as JSON, else as a string).
    pub fn set_axis(&mut self, kv: &str) -> Result<(), ExpError> {
        let (k, v) = kv.split_once('=').ok_or_else(|| format!("--set '{kv}': expected key=v1,v2,…"))?;
        let k = k.trim();
        if k.is_empty() {
            return Err(format!("--set '{kv}': empty key"));
        }
        if v.trim().is_empty() {
            return Err(format!("--set '{kv}': no values"));
        }
        let vals = v
            .split(',')
            .map(|s| s.trim())
            .map(|s| match s {
                "" => Err(format!("--set '{kv}': an empty value between commas")),
                s => Ok(serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.to_string()))),
            })
            .collect::<Result<Vec<Value>, _>>()?;
        self.axes.insert(k.to_string(), vals);
        Ok(())
    }

    /// The command line's `--set`s in order, each replacing the file's axis;
    /// a key given twice is an error (the second would silently win).
    pub fn set_axes(&mut self, kvs: &[String]) -> Result<(), ExpError> {
        let mut seen = Vec::new();
        for kv in kvs {
            let key = kv.split_once('=').map_or(kv.as_str(), |(k, _)| k).trim();
            if seen.contains(&key) {
                return Err(format!("--set {key}=…: given twice (list every value in one --set {key}=V1,V2,…)"));
            }
            seen.push(key);
            self.set_axis(kv)?;
        }
        Ok(())
    }

    fn axis(&self, key: &str) -> Option<&Vec<Value>> {
        self.axes.get(key)
    }

    fn strings(&self, key: &str, default: &[&str]) -> Result<Vec<String>, ExpError> {
        match self.axis(key) {
            None => Ok(default.iter().map(|s| s.to_string()).collect()),
            Some(vs) => vs
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(format!("'{key}': expected text, got {other}")),
                })
                .collect(),
        }
    }

    fn numbers(&self, key: &str, default: u64) -> Result<Vec<u64>, ExpError> {
        match self.axis(key) {
            None => Ok(vec![default]),
            Some(vs) => vs
                .iter()
                .map(|v| v.as_u64().ok_or_else(|| format!("'{key}': expected a non-negative integer, got {v}")))
                .collect(),
        }
    }

    /// The cross product, in a fixed order that does not depend on how the
    /// file is written: mode, scale, workload, workload parameters, threads,
    /// allocator, allocator parameters, simulator keys, seed (keys of one
    /// kind by name, values as listed). Every point is validated.
    pub fn points(&self) -> Result<Vec<Point>, ExpError> {
        let default_mode = self.meta.mode.unwrap_or(Mode::Sim);
        let modes: Vec<Mode> = match self.axis("mode") {
            None => vec![default_mode],
            Some(vs) => vs
                .iter()
                .map(|v| {
                    serde_json::from_value(v.clone()).map_err(|_| format!("'mode': {v} is not sim, native or both"))
                })
                .collect::<Result<_, _>>()?,
        };
        let scales = self.strings("scale", &["tiny"])?;
        for s in &scales {
            s.parse::<Scale>().map_err(|e| format!("'scale': {e}"))?;
        }
        let mut workloads = Vec::new();
        for w in self.strings("workload", &["threadtest"])? {
            for n in Workload::expand(&w).map_err(|e| format!("'workload': {e}"))? {
                if !workloads.iter().any(|x: &String| x == n) {
                    workloads.push(n.to_string());
                }
            }
        }
        let threads = self.numbers("threads", 1)?;
        let seeds = self.numbers("seed", 42)?;
        let mut allocs = Vec::new();
        for a in self.strings("alloc", &["nvalloc-log"])? {
            if a == "all" {
                allocs.extend(AllocSpec::names().into_iter().map(String::from));
            } else {
                allocs.push(a);
            }
        }
        let mut wl_keys = Vec::new();
        let mut alloc_keys = Vec::new();
        let mut sim_keys = Vec::new();
        for (k, vs) in &self.axes {
            if vs.is_empty() {
                return Err(format!("'{k}': an empty list of values"));
            }
            match key_kind(k) {
                KeyKind::Core(_) => {}
                KeyKind::Workload(p) => wl_keys.push((p, vs)),
                KeyKind::Alloc(p) => alloc_keys.push((p, vs)),
                KeyKind::Sim(p) => sim_keys.push((p, vs)),
            }
        }
        let wl_combos = combos(&wl_keys);
        // A bare key reaches the allocators that have the parameter (as
        // `pmsim run --set` does); one that none of them has is refused.
        let mut alloc_combos = Vec::with_capacity(allocs.len());
        let mut used = vec![false; alloc_keys.len()];
        for a in &allocs {
            let name = a.split(':').next().unwrap_or("");
            let spec = AllocSpec::parse(name, []).map_err(|e| format!("'alloc': {e}"))?;
            let mine: Vec<(&str, &Vec<Value>)> = alloc_keys
                .iter()
                .enumerate()
                .filter(|(_, (k, _))| spec.params().contains_key(*k))
                .map(|(i, kv)| {
                    used[i] = true;
                    *kv
                })
                .collect();
            alloc_combos.push(combos(&mine));
        }
        if let Some(i) = used.iter().position(|u| !u) {
            return Err(format!(
                "'{}': no allocator of the sweep ({}) has this parameter",
                alloc_keys[i].0,
                allocs.join(", ")
            ));
        }
        let sim_combos = combos(&sim_keys);
        let mut out = Vec::new();
        for &mode in &modes {
            for scale in &scales {
                for wl in &workloads {
                    for wp in &wl_combos {
                        for &t in &threads {
                            for (alloc, alloc_combos) in allocs.iter().zip(&alloc_combos) {
                                for ap in alloc_combos {
                                    for sp in &sim_combos {
                                        for &seed in &seeds {
                                            let p = Point {
                                                mode,
                                                scale: scale.clone(),
                                                workload: wl.clone(),
                                                workload_params: wp.clone(),
                                                threads: t as u32,
                                                alloc: alloc.clone(),
                                                alloc_params: ap.clone(),
                                                sim: sp.clone(),
                                                seed,
                                            };
                                            p.check()?;
                                            out.push(p);
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}

/// Every combination of the keys' values (keys in name order, values as listed).
fn combos(keys: &[(&str, &Vec<Value>)]) -> Vec<BTreeMap<String, Value>> {
    let mut out = vec![BTreeMap::new()];
    for (k, vs) in keys {
        let mut next = Vec::with_capacity(out.len() * vs.len());
        for base in &out {
            for v in vs.iter() {
                let mut m = base.clone();
                m.insert(k.to_string(), v.clone());
                next.push(m);
            }
        }
        out = next;
    }
    out
}

/// Flattens `[sweep]` (with sub-tables) into dotted keys → lists of values.
fn flatten(prefix: &str, t: &toml::Table, out: &mut BTreeMap<String, Vec<Value>>) -> Result<(), String> {
    for (k, v) in t {
        let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        match v {
            toml::Value::Table(sub) => flatten(&key, sub, out)?,
            toml::Value::Array(items) => {
                let vals = items.iter().map(|i| scalar(&key, i)).collect::<Result<Vec<_>, _>>()?;
                out.insert(key, vals);
            }
            other => {
                out.insert(key.clone(), vec![scalar(&key, other)?]);
            }
        }
    }
    Ok(())
}

fn scalar(key: &str, v: &toml::Value) -> Result<Value, String> {
    Ok(match v {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => Value::from(*f),
        toml::Value::Boolean(b) => Value::Bool(*b),
        other => return Err(format!("'{key}': {} is not a value a parameter can take", other.type_str())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cross_product_is_ordered_and_validated() {
        let e = Experiment::from_toml(
            "[experiment]\nname='t'\n[sweep]\nthreads=[1,2]\nstripes=[1,4]\nalloc=['base','nvalloc-log']\n",
            "t.toml",
        )
        .unwrap();
        let pts = e.points().unwrap();
        assert_eq!(pts.len(), 8);
        assert_eq!((pts[0].threads, pts[0].alloc.as_str()), (1, "base"));
        assert_eq!(pts[1].alloc_params["stripes"], Value::from(4));
        assert_eq!(pts[2].alloc, "nvalloc-log");
        assert_eq!(pts[4].threads, 2);
    }

    /// A bare key reaches only the allocators that have it (no duplicate
    /// points for the others); a value out of range is refused at planning,
    /// naming the parameter and its range; a key no allocator has is refused.
    #[test]
    fn allocator_keys_reach_their_allocators_and_are_validated() {
        let e = Experiment::from_toml("[sweep]\nstripes=[1,4]\nalloc=['llfree','nvalloc-log']\n", "t.toml").unwrap();
        let pts = e.points().unwrap();
        assert_eq!(pts.len(), 3, "{pts:?}");
        assert!(pts[0].alloc == "llfree" && pts[0].alloc_params.is_empty());
        assert_eq!(pts[2].alloc_params["stripes"], Value::from(4));
        let e = Experiment::from_toml("[sweep]\nstripes=100\nalloc='nvalloc-log'\n", "s.toml").unwrap_err();
        assert!(e.contains("stripes = 100 (must be 1..=64)") && !e.contains('\n'), "{e}");
        let e =
            Experiment::from_toml("[sweep]\nlog_lines=[1,4]\nalloc=['llfree','nvalloc-log']\n", "l.toml").unwrap_err();
        assert!(e.contains("'log_lines': no allocator of the sweep (llfree, nvalloc-log) has this parameter"), "{e}");
    }

    #[test]
    fn unknown_keys_are_named_with_the_file() {
        let e = Experiment::from_toml("[sweep]\nstripez=[1]\n", "x.toml").unwrap_err();
        assert!(e.starts_with("x.toml: ") && e.contains("stripez"), "{e}");
        let e = Experiment::from_toml("[sweep]\n\"param.iteratons\"=[1]\n", "y.toml").unwrap_err();
        assert!(e.starts_with("y.toml: ") && e.contains("iteratons"), "{e}");
        let e = Experiment::from_toml("[sweep.sim]\neadrr=true\n", "z.toml").unwrap_err();
        assert!(e.starts_with("z.toml: ") && e.contains("eadrr"), "{e}");
        let e = Experiment::from_toml("[experimnt]\nname='a'\n", "w.toml").unwrap_err();
        assert!(e.starts_with("w.toml: ") && e.contains("experimnt"), "{e}");
        let e = Experiment::from_toml("[sweep]\nalloc=['nvalloc-lgo']\n", "v.toml").unwrap_err();
        assert!(e.contains("nvalloc-lgo"), "{e}");
    }
}
