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
//! alloc = ["nvalloc-log"]          # allocator specs, as `pmsim run --alloc`; "all" = every allocator, "-SPEC" leaves one out
//! workload = ["threadtest"]        # workload presets, as `pmsim run --workload`
//! threads = [1, 2, 4]
//! scale = "tiny"
//! seed = 42
//! stripes = [1, 2, 4, 8, 16, 32]   # any other bare key: an allocator parameter (`pmsim run --set`)
//! "param.iterations" = [20]        # param.KEY: a workload parameter (`pmsim run --param`), for
//!                                  # the workloads that have it (one that none has is an error)
//! "sim.eadr" = [false, true]       # sim.PATH: a simulator configuration key (sim/optane.toml)
//!
//! [scale.tiny]                     # axes that replace [sweep]'s at one scale only
//! "param.live_cap" = 20971520
//! ```
//!
//! Keys may also be written as TOML sub-tables (`[sweep.sim] eadr = true`).
//!
//! An experiment that reruns another's points with one term switched (the
//! report's `switch-*` experiments) names it instead of retyping its sweep:
//! `rerun = "large"` in `[experiment]` starts from that experiment's
//! `[sweep]` and `[scale.NAME]` tables (found by name among the files of the
//! same set), and this file's `[sweep]` keys replace its keys at every
//! scale, this file's `[scale.NAME]` tables going over both. So the switch
//! follows the experiment it reruns when that one changes.
//! A `[scale.NAME]` table lets an experiment that `pmsim reproduce` runs at
//! any scale size a workload differently at one of them (the main job's
//! Fragbench at `tiny`, whose preset stays small for the tests) without
//! shrinking it at the others; `--set` replaces a key at every scale.
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

/// The committed experiment files, built in so that `pmsim reproduce` runs anywhere.
pub const BUILTIN: &[(&str, &str)] = &[
    ("flushes.toml", include_str!("../experiments/flushes.toml")),
    ("breakdown.toml", include_str!("../experiments/breakdown.toml")),
    ("access-map.toml", include_str!("../experiments/access-map.toml")),
    ("scaling.toml", include_str!("../experiments/scaling.toml")),
    ("large.toml", include_str!("../experiments/large.toml")),
    ("space.toml", include_str!("../experiments/space.toml")),
    ("fptree.toml", include_str!("../experiments/fptree.toml")),
    ("fragbench.toml", include_str!("../experiments/fragbench.toml")),
    ("fragbench-time.toml", include_str!("../experiments/fragbench-time.toml")),
    ("stripes.toml", include_str!("../experiments/stripes.toml")),
    ("su.toml", include_str!("../experiments/su.toml")),
    ("log-gc.toml", include_str!("../experiments/log-gc.toml")),
    ("recovery.toml", include_str!("../experiments/recovery.toml")),
    ("eadr.toml", include_str!("../experiments/eadr.toml")),
    ("eadr-scaling.toml", include_str!("../experiments/eadr-scaling.toml")),
    ("allocators.toml", include_str!("../experiments/allocators.toml")),
    ("switch-reflush.toml", include_str!("../experiments/switch-reflush.toml")),
    ("switch-xpbuffer.toml", include_str!("../experiments/switch-xpbuffer.toml")),
    ("switch-reflush-distance.toml", include_str!("../experiments/switch-reflush-distance.toml")),
    ("switch-dimms.toml", include_str!("../experiments/switch-dimms.toml")),
    ("switch-presets.toml", include_str!("../experiments/switch-presets.toml")),
    ("switch-locks.toml", include_str!("../experiments/switch-locks.toml")),
    ("switch-writebacks.toml", include_str!("../experiments/switch-writebacks.toml")),
    ("switch-publish.toml", include_str!("../experiments/switch-publish.toml")),
];

/// The files of `set` that experiments of `run` rerun (`rerun = "NAME"`)
/// without NAME itself being among `run`: what a report's copy of the
/// experiments it ran needs beside them to be read again as a set.
pub fn rerun_bases(run: &[&Experiment], set: &[(String, String)]) -> Vec<(String, String)> {
    let mut bases: Vec<(String, String)> = Vec::new();
    for name in run.iter().filter_map(|e| e.meta.rerun.as_deref()) {
        if let Some((entry, _)) = find(set, name).filter(|_| !run.iter().any(|e| e.meta.name == name)) {
            if !bases.contains(entry) {
                bases.push(entry.clone());
            }
        }
    }
    bases
}

/// The experiment files of `dir` (every `*.toml`, by name), or the built-in
/// set without one: `(file, text)`.
pub fn experiment_files(dir: Option<&Path>) -> Result<Vec<(String, String)>, String> {
    let Some(d) = dir else { return Ok(builtin_set()) };
    let mut v = Vec::new();
    let rd = std::fs::read_dir(d).map_err(|e| format!("{}: {e}", d.display()))?;
    for e in rd {
        let p = e.map_err(|e| format!("{}: {e}", d.display()))?.path();
        if p.extension().is_some_and(|x| x == "toml") {
            let t = pmsim_traces::input::read_text(&p, "experiment file")?;
            v.push((p.display().to_string(), t));
        }
    }
    v.sort();
    if v.is_empty() {
        return Err(format!("{}: no .toml experiment files", d.display()));
    }
    Ok(v)
}

/// [`BUILTIN`] as `(file, text)` pairs, the form an experiment set is read in.
pub fn builtin_set() -> Vec<(String, String)> {
    BUILTIN.iter().map(|(f, t)| (f.to_string(), t.to_string())).collect()
}

/// An experiment as written: its description and the sweep's axes.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExperimentFile {
    #[serde(default)]
    pub experiment: Meta,
    #[serde(default)]
    pub sweep: toml::Table,
    /// `[scale.NAME]`: axes that replace `[sweep]`'s at scale NAME.
    #[serde(default)]
    pub scale: BTreeMap<String, toml::Table>,
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
    /// The experiment (by name, in the same set) whose sweep this one
    /// starts from (see the module doc).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun: Option<String>,
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
    /// Scale → axes that replace those of `axes` for the points at that
    /// scale (`[scale.NAME]`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub at_scale: BTreeMap<String, BTreeMap<String, Vec<Value>>>,
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
    /// The experiment one that reruns another names is looked for among the
    /// `.toml` files beside it, then among the built-in ones.
    pub fn from_file(path: &Path) -> Result<Experiment, ExpError> {
        let name = path.display().to_string();
        let text = pmsim_traces::input::read_text(path, "experiment file")?;
        let mut set = Vec::new();
        if parse(&text, &name)?.experiment.rerun.is_some() {
            let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
            set = experiment_files(Some(dir))?;
            set.extend(builtin_set());
        }
        Self::from_toml_in(&text, &name, &set)
    }

    /// Parses an experiment that reruns none; `name` (a file name) prefixes
    /// every error.
    pub fn from_toml(text: &str, name: &str) -> Result<Experiment, ExpError> {
        Self::from_toml_in(text, name, &[])
    }

    /// Parses an experiment of a set of experiment files (`(file, text)`),
    /// among which the one it reruns is found by name.
    pub fn from_toml_in(text: &str, name: &str, set: &[(String, String)]) -> Result<Experiment, ExpError> {
        let f = parse(text, name)?;
        let (mut axes, mut at_scale) = tables(&f).map_err(|e| format!("{name}: {e}"))?;
        let mut meta = f.experiment;
        if meta.name.is_empty() {
            meta.name = stem(name);
        }
        if let Some(of) = &meta.rerun {
            let ((file, _), base) = find(set, of)
                .ok_or_else(|| format!("{name}: rerun = \"{of}\": no experiment of that name in its set"))?;
            if let Some(again) = &base.experiment.rerun {
                return Err(format!(
                    "{name}: rerun = \"{of}\": {file} reruns \"{again}\" itself (rerun an experiment with a sweep of its own)"
                ));
            }
            let (mut b_axes, mut b_scale) = tables(&base).map_err(|e| format!("{file}: {e}"))?;
            // This file's keys win at every scale; its own scale tables last.
            for over in b_scale.values_mut() {
                over.retain(|k, _| !axes.contains_key(k));
            }
            b_axes.append(&mut axes);
            for (scale, mut over) in std::mem::take(&mut at_scale) {
                b_scale.entry(scale).or_default().append(&mut over);
            }
            (axes, at_scale) = (b_axes, b_scale);
            meta.mode = meta.mode.or(base.experiment.mode);
        }
        let exp = Experiment { meta, axes, at_scale };
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
        // A `[scale.NAME]` table is checked even when NAME is not the scale
        // the file names: a misspelt key there fails now, not at that scale.
        for scale in exp.at_scale.keys() {
            let mut at = exp.clone();
            at.axes.insert("scale".into(), vec![Value::String(scale.clone())]);
            at.points().map_err(|e| format!("{name}: {e}"))?;
        }
        Ok(exp)
    }

    /// An experiment with no file: defaults and then `--set`s.
    pub fn empty(name: &str) -> Experiment {
        Experiment {
            meta: Meta { name: name.into(), ..Meta::default() },
            axes: BTreeMap::new(),
            at_scale: BTreeMap::new(),
        }
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
        no_repeats(k, &vals).map_err(|e| format!("--set '{kv}': {e}"))?;
        self.axes.insert(k.to_string(), vals);
        // The command line wins at every scale.
        for over in self.at_scale.values_mut() {
            over.remove(k);
        }
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

    /// The axes of the points at `scale`: `[sweep]`'s with `[scale.NAME]`'s over them.
    fn axes_at(&self, scale: &str) -> BTreeMap<String, Vec<Value>> {
        let mut axes = self.axes.clone();
        if let Some(over) = self.at_scale.get(scale) {
            axes.extend(over.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        axes
    }

    /// The cross product, in a fixed order that does not depend on how the
    /// file is written: mode, scale, workload, workload parameters, threads,
    /// allocator, allocator parameters, simulator keys, seed (keys of one
    /// kind by name, values as listed). Every point is validated.
    pub fn points(&self) -> Result<Vec<Point>, ExpError> {
        let default_mode = self.meta.mode.unwrap_or(Mode::Sim);
        let modes: Vec<Mode> = match self.axes.get("mode") {
            None => vec![default_mode],
            Some(vs) => vs
                .iter()
                .map(|v| {
                    serde_json::from_value(v.clone())
                        .map_err(|_| format!("'mode': {v} is not sim, native, both or memory"))
                })
                .collect::<Result<_, _>>()?,
        };
        let scales = strings(&self.axes, "scale", &["tiny"])?;
        for s in &scales {
            s.parse::<Scale>().map_err(|e| format!("'scale': {e}"))?;
        }
        let mut out = Vec::new();
        for &mode in &modes {
            for scale in &scales {
                let axes = self.axes_at(scale);
                cross(&axes, mode, scale, &mut out).map_err(|e| match self.at_scale.contains_key(scale) {
                    true => format!("at scale {scale}: {e}"),
                    false => e,
                })?;
            }
        }
        // Values that differ as written may still make one point (a
        // parameter set to its default beside the default).
        let mut seen = std::collections::HashMap::new();
        for (i, p) in out.iter().enumerate() {
            if let Some(j) = seen.insert(p.id(), i) {
                return Err(format!(
                    "points {j} and {i} are the same point ({}): a value repeats in an axis",
                    p.label()
                ));
            }
        }
        Ok(out)
    }
}

fn strings(axes: &BTreeMap<String, Vec<Value>>, key: &str, default: &[&str]) -> Result<Vec<String>, ExpError> {
    match axes.get(key) {
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

fn numbers(axes: &BTreeMap<String, Vec<Value>>, key: &str, default: u64) -> Result<Vec<u64>, ExpError> {
    match axes.get(key) {
        None => Ok(vec![default]),
        Some(vs) => vs
            .iter()
            .map(|v| v.as_u64().ok_or_else(|| format!("'{key}': expected a non-negative integer, got {v}")))
            .collect(),
    }
}

/// The points of one mode and scale, from that scale's axes, appended to `out`.
fn cross(axes: &BTreeMap<String, Vec<Value>>, mode: Mode, scale: &str, out: &mut Vec<Point>) -> Result<(), ExpError> {
    // A value reached twice (`fragbench` and `fragbench-w1`) would run its
    // points twice: refused, naming both ways it was reached.
    let mut workloads: Vec<String> = Vec::new();
    let mut wl_from: Vec<String> = Vec::new();
    for w in strings(axes, "workload", &["threadtest"])? {
        for n in Workload::expand(&w).map_err(|e| format!("'workload': {e}"))? {
            if let Some(i) = workloads.iter().position(|x| x == n) {
                return Err(format!("'workload': {n} is listed twice (as {} and as {w})", wl_from[i]));
            }
            workloads.push(n.to_string());
            wl_from.push(w.clone());
        }
    }
    let threads = numbers(axes, "threads", 1)?;
    let seeds = numbers(axes, "seed", 42)?;
    let mut allocs = Vec::new();
    let mut alloc_from: Vec<String> = Vec::new();
    let mut without = Vec::new();
    for a in strings(axes, "alloc", &["nvalloc-log"])? {
        if let Some(x) = a.strip_prefix('-') {
            without.push(x.to_string());
            continue;
        }
        let names: Vec<String> = match a.as_str() {
            "all" => AllocSpec::names().into_iter().map(String::from).collect(),
            _ => vec![a.clone()],
        };
        for n in names {
            if let Some(i) = allocs.iter().position(|x| *x == n) {
                return Err(format!("'alloc': {n} is listed twice (as {} and as {a})", alloc_from[i]));
            }
            allocs.push(n);
            alloc_from.push(a.clone());
        }
    }
    // "-SPEC" leaves SPEC out (of "all", typically); one that leaves out
    // nothing is a misspelling.
    for x in without {
        let Some(i) = allocs.iter().position(|a| *a == x) else {
            return Err(format!("'alloc': '-{x}' leaves out nothing (no allocator '{x}' in the list)"));
        };
        allocs.remove(i);
        alloc_from.remove(i);
    }
    let mut wl_keys = Vec::new();
    let mut alloc_keys = Vec::new();
    let mut sim_keys = Vec::new();
    for (k, vs) in axes {
        if vs.is_empty() {
            return Err(format!("'{k}': an empty list of values"));
        }
        match key_kind(k) {
            KeyKind::Core(_) => {}
            KeyKind::Workload(p) => wl_keys.push((p, vs)),
            KeyKind::Alloc(p) => {
                if alloc_keys.iter().any(|(q, _)| *q == p) {
                    return Err(format!("'{p}' is given twice (as {p} and alloc.{p}): give it once"));
                }
                alloc_keys.push((p, vs))
            }
            KeyKind::Sim(p) => sim_keys.push((p, vs)),
        }
    }
    // A workload parameter reaches the workloads that have it (a Threadtest
    // `split` leaves Prod-con alone); one that none of them has is refused.
    let sc = scale.parse::<Scale>().map_err(|e| format!("'scale': {e}"))?;
    let mut wl_params = Vec::with_capacity(workloads.len());
    for w in &workloads {
        wl_params.push(Workload::preset(w, sc).map_err(|e| format!("'workload': {e}"))?.params_json());
    }
    let wl_combos = spread(&wl_keys, &wl_params)
        .map_err(|k| format!("'param.{k}': no workload of the sweep ({}) has this parameter", workloads.join(", ")))?;
    // A bare key reaches the allocators that have the parameter (as
    // `pmsim run --set` does); one that none of them has is refused.
    let mut alloc_params = Vec::with_capacity(allocs.len());
    for a in &allocs {
        let name = a.split(':').next().unwrap_or("");
        alloc_params.push(AllocSpec::parse(name, []).map_err(|e| format!("'alloc': {e}"))?.params().clone());
    }
    let alloc_combos = spread(&alloc_keys, &alloc_params)
        .map_err(|k| format!("'{k}': no allocator of the sweep ({}) has this parameter", allocs.join(", ")))?;
    let sim_combos = combos(&sim_keys);
    for (wl, wl_combos) in workloads.iter().zip(&wl_combos) {
        for wp in wl_combos {
            for &t in &threads {
                for (alloc, alloc_combos) in allocs.iter().zip(&alloc_combos) {
                    for ap in alloc_combos {
                        for sp in &sim_combos {
                            for &seed in &seeds {
                                let p = Point {
                                    mode,
                                    scale: scale.to_string(),
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
    Ok(())
}

/// Refuses an axis that lists a value twice (its points would run twice).
fn no_repeats(key: &str, vals: &[Value]) -> Result<(), String> {
    let same = |a: &Value, b: &Value| match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    };
    for (i, v) in vals.iter().enumerate() {
        if vals[..i].iter().any(|w| same(v, w)) {
            return Err(format!("'{key}': {v} is listed twice (a sweep runs each value once)"));
        }
    }
    Ok(())
}

/// Every combination of the keys' values (keys in name order, values as listed).
/// For each owner (a workload, an allocator) whose parameters are `owners`,
/// the combinations of the swept `keys` it has; the first key no owner has
/// is the error.
fn spread<'k>(
    keys: &[(&'k str, &'k Vec<Value>)],
    owners: &[serde_json::Map<String, Value>],
) -> Result<Vec<Vec<BTreeMap<String, Value>>>, &'k str> {
    let mut used = vec![false; keys.len()];
    let per_owner = owners
        .iter()
        .map(|params| {
            let mine: Vec<(&str, &Vec<Value>)> = keys
                .iter()
                .enumerate()
                .filter(|(_, (k, _))| params.contains_key(*k))
                .map(|(i, kv)| {
                    used[i] = true;
                    *kv
                })
                .collect();
            combos(&mine)
        })
        .collect();
    match used.iter().position(|u| !u) {
        Some(i) => Err(keys[i].0),
        None => Ok(per_owner),
    }
}

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

/// An experiment file's text, parsed; errors name `name` and the line.
fn parse(text: &str, name: &str) -> Result<ExperimentFile, ExpError> {
    toml::from_str(text).map_err(|e| {
        let at = e
            .span()
            .map(|s| {
                let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                format!(" (line {line})")
            })
            .unwrap_or_default();
        format!("{name}: {}{at}", e.message().trim().replace('\n', ": "))
    })
}

/// A file name's stem: an experiment's name when it gives none.
fn stem(file: &str) -> String {
    Path::new(file).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
}

/// The entry of `set` holding the experiment named `name`, and that file parsed.
fn find<'a>(set: &'a [(String, String)], name: &str) -> Option<(&'a (String, String), ExperimentFile)> {
    set.iter().find_map(|entry| {
        let f = parse(&entry.1, &entry.0).ok()?;
        (experiment_name(&f, &entry.0) == name).then_some((entry, f))
    })
}

/// The name of the experiment `f` read from `file`.
fn experiment_name(f: &ExperimentFile, file: &str) -> String {
    if f.experiment.name.is_empty() {
        stem(file)
    } else {
        f.experiment.name.clone()
    }
}

/// A file's `[sweep]` axes and `[scale.NAME]` tables, flattened and checked.
type Tables = (BTreeMap<String, Vec<Value>>, BTreeMap<String, BTreeMap<String, Vec<Value>>>);

fn tables(f: &ExperimentFile) -> Result<Tables, ExpError> {
    let mut axes = BTreeMap::new();
    flatten("", &f.sweep, &mut axes)?;
    for (k, vs) in &axes {
        no_repeats(k, vs).map_err(|e| format!("[sweep]: {e}"))?;
    }
    let mut at_scale = BTreeMap::new();
    for (scale, t) in &f.scale {
        scale.parse::<Scale>().map_err(|e| format!("[scale.{scale}]: {e}"))?;
        let mut over = BTreeMap::new();
        flatten("", t, &mut over).map_err(|e| format!("[scale.{scale}]: {e}"))?;
        for (k, vs) in &over {
            no_repeats(k, vs).map_err(|e| format!("[scale.{scale}]: {e}"))?;
        }
        if let Some(k) = over.keys().find(|k| matches!(k.as_str(), "scale" | "mode")) {
            return Err(format!("[scale.{scale}]: '{k}' cannot change with the scale"));
        }
        at_scale.insert(scale.clone(), over);
    }
    Ok((axes, at_scale))
}

/// Flattens `[sweep]` (with sub-tables) into dotted keys → lists of values.
fn flatten(prefix: &str, t: &toml::Table, out: &mut BTreeMap<String, Vec<Value>>) -> Result<(), String> {
    for (k, v) in t {
        let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        match v {
            toml::Value::Table(sub) => flatten(&key, sub, out)?,
            _ if out.contains_key(&key) => {
                return Err(format!("'{key}' is given twice (as \"{key}\" and as a sub-table key): give it once"))
            }
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

    /// "-SPEC" leaves an allocator out of "all"; one that leaves out nothing is refused.
    #[test]
    fn all_but_some_allocators() {
        let e = Experiment::from_toml("[sweep]\nalloc=['all','-base','-+log']\n", "a.toml").unwrap();
        let allocs: Vec<String> = e.points().unwrap().into_iter().map(|p| p.alloc).collect();
        assert!(allocs.contains(&"nvalloc-log".to_string()) && allocs.contains(&"+interleaved".to_string()));
        assert!(!allocs.iter().any(|a| a == "base" || a == "+log"), "{allocs:?}");
        let e = Experiment::from_toml("[sweep]\nalloc=['all','-bsae']\n", "a.toml").unwrap_err();
        assert!(e.contains("'-bsae' leaves out nothing") && !e.contains('\n'), "{e}");
    }

    /// `[scale.NAME]` replaces axes for the points at that scale only, the
    /// command line replaces them at every scale, and mode and scale
    /// themselves cannot change with the scale.
    #[test]
    fn scale_tables_apply_at_their_scale_only() {
        let text = "[sweep]\nworkload='fragbench-w1'\nscale=['tiny','small']\n\"param.live_cap\"=1048576\n\
                    [scale.tiny]\n\"param.live_cap\"=[2097152,4194304]\n";
        let e = Experiment::from_toml(text, "s.toml").unwrap();
        let caps = |e: &Experiment| -> Vec<(String, u64)> {
            let pts = e.points().unwrap();
            pts.iter().map(|p| (p.scale.clone(), p.workload_params["live_cap"].as_u64().unwrap())).collect()
        };
        let want = [("tiny", 2097152), ("tiny", 4194304), ("small", 1048576)];
        assert_eq!(caps(&e), want.map(|(s, c)| (s.to_string(), c)));
        let back: Experiment = serde_json::from_str(&serde_json::to_string(&e).unwrap()).unwrap();
        assert_eq!(back, e, "experiment.json keeps the scale tables");
        let mut set = e.clone();
        set.set_axis("param.live_cap=3000000").unwrap();
        assert!(caps(&set).iter().all(|(_, c)| *c == 3000000), "{:?}", caps(&set));
        for (bad, needle) in [
            ("[sweep]\nthreads=1\n[scale.huge]\nthreads=2\n", "[scale.huge]"),
            ("[sweep]\nthreads=1\n[scale.tiny]\nmode='native'\n", "'mode' cannot change with the scale"),
            ("[sweep]\nthreads=1\n[scale.tiny]\nstripez=2\n", "stripez"),
            ("[sweep]\nthreads=1\n[scale.small]\n\"param.iteratons\"=2\n", "at scale small"),
        ] {
            let e = Experiment::from_toml(bad, "b.toml").unwrap_err();
            assert!(e.starts_with("b.toml: ") && e.contains(needle) && !e.contains('\n'), "{bad:?}: {e}");
        }
    }

    /// A rerun starts from the named experiment's tables: its own sweep keys
    /// replace the base's at every scale, its scale tables go over both.
    #[test]
    fn a_rerun_replaces_the_keys_it_sets_and_keeps_the_rest() {
        let base = "[experiment]\nname='large'\nmode='native'\n[sweep]\nalloc=['nvalloc-log','llfree']\n\
                    workload=['threadtest']\nthreads=[1,2,4]\nseed=7\n\
                    [scale.tiny]\nthreads=[1,2]\n\"param.split\"=true\n";
        let set = vec![("exp/large.toml".to_string(), base.to_string())];
        let sw = "[experiment]\nrerun='large'\n[sweep]\nalloc=['llfree']\n\"sim.eadr\"=[true]\n";
        let e = Experiment::from_toml_in(sw, "exp/switch.toml", &set).unwrap();
        assert_eq!((e.meta.name.as_str(), e.meta.mode), ("switch", Some(Mode::Native)));
        assert_eq!(e.axes["alloc"], vec![Value::from("llfree")]);
        assert_eq!(e.axes["threads"], vec![Value::from(1), Value::from(2), Value::from(4)]);
        assert_eq!((&e.axes["seed"], &e.axes["sim.eadr"]), (&vec![Value::from(7)], &vec![Value::from(true)]));
        // The base's tiny threads stay (the switch does not set threads)...
        assert_eq!(e.at_scale["tiny"]["threads"], vec![Value::from(1), Value::from(2)]);
        // ...and go when it does, while its own scale table applies.
        let sw = "[experiment]\nrerun='large'\n[sweep]\nthreads=[8]\n[scale.small]\nseed=9\n";
        let e = Experiment::from_toml_in(sw, "exp/switch.toml", &set).unwrap();
        assert_eq!(e.axes["threads"], vec![Value::from(8)]);
        assert!(!e.at_scale["tiny"].contains_key("threads") && e.at_scale["tiny"].contains_key("param.split"));
        assert_eq!(e.at_scale["small"]["seed"], vec![Value::from(9)]);
        let mut tiny = e.clone();
        tiny.set_axis("scale=tiny").unwrap();
        assert!(tiny.points().unwrap().iter().all(|p| p.threads == 8));
    }

    #[test]
    fn a_rerun_of_what_is_not_in_the_set_or_reruns_itself_is_one_error_line() {
        let set = vec![
            ("a.toml".to_string(), "[sweep]\nalloc=['llfree']\nworkload=['threadtest']\n".to_string()),
            ("b.toml".to_string(), "[experiment]\nrerun='a'\n[sweep]\nthreads=[2]\n".to_string()),
        ];
        let e = Experiment::from_toml_in("[experiment]\nrerun='nope'\n[sweep]\nseed=1\n", "c.toml", &set).unwrap_err();
        assert!(e.starts_with("c.toml: ") && e.contains("\"nope\"") && !e.contains('\n'), "{e}");
        let e = Experiment::from_toml_in("[experiment]\nrerun='b'\n[sweep]\nseed=1\n", "c.toml", &set).unwrap_err();
        assert!(e.contains("b.toml reruns \"a\""), "{e}");
        // Without its set (a lone file), the name is not found either.
        assert!(Experiment::from_toml("[experiment]\nrerun='a'\n[sweep]\nseed=1\n", "c.toml").is_err());
        assert_eq!(Experiment::from_toml_in(&set[1].1, "b.toml", &set).unwrap().axes["threads"], vec![Value::from(2)]);
    }

    /// A report that ran a switch without the experiment it reruns copies
    /// that one too, so that its experiments can be read again as a set.
    #[test]
    fn the_base_of_a_rerun_that_did_not_run_is_named() {
        let set = builtin_set();
        let only = |names: &[&str]| -> Vec<String> {
            let exps: Vec<Experiment> = set
                .iter()
                .map(|(f, t)| Experiment::from_toml_in(t, f, &set).unwrap())
                .filter(|e| names.contains(&e.meta.name.as_str()))
                .collect();
            rerun_bases(&exps.iter().collect::<Vec<_>>(), &set).into_iter().map(|(f, _)| f).collect()
        };
        assert_eq!(only(&["switch-locks", "switch-writebacks"]), ["large.toml"]);
        assert!(only(&["switch-locks", "large"]).is_empty());
        assert!(only(&["scaling"]).is_empty());
    }

    /// `pmsim sweep FILE` finds the experiment FILE reruns beside it.
    #[test]
    fn a_file_finds_the_experiment_it_reruns_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("mine.toml"), "[sweep]\nalloc=['llfree']\nworkload=['prodcon']\n").unwrap();
        let sw = dir.path().join("sw.toml");
        std::fs::write(&sw, "[experiment]\nrerun='mine'\n[sweep]\nthreads=[2]\n").unwrap();
        let e = Experiment::from_file(&sw).unwrap();
        assert_eq!(e.axes["workload"], vec![Value::from("prodcon")]);
        // A built-in experiment is found when none beside it has the name.
        std::fs::write(&sw, "[experiment]\nrerun='large'\n[sweep]\nthreads=[2]\n").unwrap();
        assert!(Experiment::from_file(&sw).unwrap().axes.contains_key("sim.contention"));
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
