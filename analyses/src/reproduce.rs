//! `pmsim reproduce`: runs the experiment set (the TOML files of
//! `analyses/experiments/`, built into the binary, or a directory of edited
//! copies), draws each experiment's figures from its merged rows, and writes
//! `OUT/index.html` and `OUT/README.md` with every figure, the table behind
//! it, the exact parameters, the pmsim version and the command.
//!
//! ```text
//! OUT/index.html, OUT/README.md
//! OUT/experiments/<name>.toml     the experiment files used (edit, rerun with --experiments)
//! OUT/sweeps/<name>/              each sweep's directory (experiment.json, shards/)
//! OUT/figures/<id>.svg, .png      the figures
//! OUT/results/<name>.csv          each experiment's headline table
//! OUT/claims.json                 the claims scoreboard (crate::claims)
//! ```
//!
//! The report opens with the claims scoreboard: every quantitative claim of
//! the NVAlloc paper beside pmsim's value from this run's rows, with a
//! verdict ([`crate::claims`]); each figure's table of the paper's numbers
//! comes from it.
//!
//! Sweeps resume: running the same command again into the same OUT runs only
//! what is missing (a killed reproduce loses at most the points in flight).
//!
//! Traces of programs pmsim's own tracer cannot see (PMDK, traced by the
//! Valgrind tool in pintools/ and replayed with `pmsim sim --json`) join the
//! report as extra rows of an experiment: see [`Traced`].

use crate::calibration;
use crate::claims::{self, Scored};
use crate::experiment::{self, experiment_files, Experiment, Meta};
use crate::fields;
use crate::figures;
use crate::plot::{self, Figure};
use crate::point::{Mode, Point};
use crate::row::{Env, Results, Row};
use crate::store::{self, SweepDir};
use crate::sweep::{self, host, Shard};
use crate::table::{self, html_escape, Table};
use pmsim_traces::output::Policy;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// A simulator report of a trace made outside pmsim's tracer (`pmsim sim
/// TRACE --json`), given as `ALLOC@WORKLOAD=REPORT.json`: it becomes a row
/// of every experiment whose figures include `compare`, labelled `ALLOC`.
#[derive(Clone, Debug)]
pub struct Traced {
    pub alloc: String,
    pub workload: String,
    pub report: PathBuf,
}

impl std::str::FromStr for Traced {
    type Err = String;
    fn from_str(s: &str) -> Result<Traced, String> {
        let bad = || format!("--traced '{s}': expected ALLOC@WORKLOAD=REPORT.json (a `pmsim sim --json` report)");
        let (lhs, file) = s.split_once('=').ok_or_else(bad)?;
        let (alloc, workload) = lhs.split_once('@').ok_or_else(bad)?;
        if alloc.is_empty() || workload.is_empty() || file.is_empty() {
            return Err(bad());
        }
        Ok(Traced { alloc: alloc.into(), workload: workload.into(), report: file.into() })
    }
}

impl Traced {
    /// The row: a simulated point labelled with the allocator, the report as its result.
    fn row(&self, index: usize, scale: &str) -> Result<Row, String> {
        let name = self.report.display().to_string();
        let text = pmsim_traces::input::read_text(&self.report, "report")?;
        let mut v: Value = serde_json::from_str(&text).map_err(|e| format!("{name}: not JSON: {e}"))?;
        // `pmsim run --sim --json` wraps the report; `pmsim sim --json` is the report.
        if let Some(inner) = v.pointer("/runs/0/sim").cloned() {
            v = inner;
        }
        if v.pointer("/overall/flushes").is_none() {
            return Err(format!("{name}: not a pmsim simulator report (no overall.flushes)"));
        }
        pmsim_sim::diff::check_report(&v).map_err(|e| format!("{name}: not a pmsim simulator report: {e}"))?;
        fields::check(&v, fields::Source::Sim).map_err(|e| format!("{name}: {e}"))?;
        let threads = v.get("threads").and_then(Value::as_array).map_or(1, |t| t.len().max(1)) as u32;
        let dimms = v.as_object_mut().and_then(|o| o.remove("dimms"));
        let point = Point {
            mode: Mode::Sim,
            scale: scale.into(),
            workload: self.workload.clone(),
            workload_params: BTreeMap::new(),
            threads,
            alloc: self.alloc.clone(),
            alloc_params: BTreeMap::new(),
            sim: BTreeMap::from([("trace".to_string(), Value::String(name))]),
            seed: 0,
        };
        Ok(Row {
            index,
            id: point.id(),
            point,
            result: Results { sim: Some(v), ..Results::default() },
            env: Env { sim_dimms: dimms, ..Env::default() },
        })
    }
}

/// How to reproduce.
#[derive(Clone, Debug)]
pub struct Options {
    pub scale: String,
    pub out: PathBuf,
    pub jobs: usize,
    /// Read the experiment files from here instead of the built-in set.
    pub experiments: Option<PathBuf>,
    /// Run only these experiments (by name).
    pub only: Vec<String>,
    pub traced: Vec<Traced>,
    /// Counts each experiment's points as they end, for a progress display.
    pub tally: std::sync::Arc<sweep::Tally>,
    /// The command line, for the report.
    pub command: String,
}

/// One experiment's part of the report.
#[derive(Clone, Debug, Serialize)]
pub struct Section {
    pub name: String,
    pub title: String,
    pub description: String,
    pub file: String,
    pub points: usize,
    pub ran: usize,
    pub wall_s: f64,
    pub figures: Vec<String>,
    /// Where the section's result rows are, as the report links them
    /// (relative to the report when it lies inside the sweep).
    pub rows: String,
    #[serde(skip)]
    toml: String,
    #[serde(skip)]
    drawn: Vec<Figure>,
    #[serde(skip)]
    headline: Table,
}

/// What `pmsim reproduce` made.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub out: String,
    pub scale: String,
    pub sections: Vec<Section>,
    /// The claims scoreboard.
    pub claims: Vec<Scored>,
    pub wall_s: f64,
}

/// Makes `out` the report directory of this run, or checks that it is one
/// of pmsim's ([`pmsim_traces::output::own_dir`]): a new or empty
/// directory, or one a `pmsim reproduce` wrote (its marker, or from before
/// markers its sweeps); never a directory of the user's, a sweep's, or one
/// inside another run's directory.
pub fn claim_out(out: &Path) -> Result<(), String> {
    if std::fs::symlink_metadata(out).is_err() {
        if let Some((d, kind)) = pmsim_traces::output::inside_own_dir(out) {
            return Err(format!(
                "{}: inside the pmsim {kind} directory {}: the report goes elsewhere",
                out.display(),
                d.display()
            ));
        }
        if let Some(p) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(p).map_err(|e| format!("{}: cannot create: {e}", p.display()))?;
        }
    }
    let legacy = |d: &Path| {
        std::fs::read_dir(d.join("sweeps"))
            .map(|rd| rd.flatten().any(|e| SweepDir::new(e.path()).load().is_ok_and(|r| r.is_some())))
            .unwrap_or(false)
    };
    pmsim_traces::output::own_dir(out, "report", "pmsim report directory\n", legacy).map(drop)
}

/// Makes `out` the directory of a report of the sweep `dir` (`pmsim sweep
/// merge --report`), or checks that it may be: never the sweep directory
/// or its shards, never inside another run's directory except as the
/// sweep's own `DIR/report` (the Slurm merge job's), never a directory of
/// the user's; a report directory that is not empty only with `force`.
pub fn claim_report_dir(out: &Path, dir: &SweepDir, force: bool) -> Result<(), String> {
    let canon = |p: &Path| std::fs::canonicalize(p).ok();
    let root = canon(&dir.root);
    if let (Some(o), Some(d)) = (canon(out), &root) {
        if o == *d || o.starts_with(d.join("shards")) {
            return Err(format!(
                "{}: is the sweep directory {} or its shards: write the report elsewhere",
                out.display(),
                dir.root.display()
            ));
        }
    }
    match std::fs::symlink_metadata(out) {
        Err(_) => {
            if let Some((d, kind)) = pmsim_traces::output::inside_own_dir(out) {
                let own = Some(&d) == root.as_ref() && out.parent().and_then(canon) == root;
                if !own {
                    return Err(format!(
                        "{}: inside the pmsim {kind} directory {}: write the report elsewhere",
                        out.display(),
                        d.display()
                    ));
                }
            }
        }
        Ok(m) if m.is_dir() && !force => {
            if std::fs::read_dir(out).map_err(|e| format!("{}: {e}", out.display()))?.next().is_some() {
                return Err(format!(
                    "{}: a directory that is not empty (--force writes the report over one pmsim wrote)",
                    out.display()
                ));
            }
        }
        Ok(_) => {}
    }
    pmsim_traces::output::own_dir(out, "report", "pmsim report directory\n", |_| false).map(drop)
}

/// What a report runs, read and checked before anything runs.
pub struct Loaded {
    /// The experiments (file, text, experiment at the report's scale).
    pub exps: Vec<(String, String, Experiment)>,
    /// The files of experiments they rerun that do not run themselves
    /// (`--only`): copied beside them, so that the report's `experiments/`
    /// reads again as a set.
    pub bases: Vec<(String, String)>,
}

/// The experiments to run, each with its scale set, checked before anything runs.
pub fn load(opts: &Options) -> Result<Loaded, String> {
    opts.scale.parse::<pmsim_model::workloads::Scale>().map_err(|e| format!("--scale: {e}"))?;
    let mut out = Vec::new();
    let files = experiment_files(opts.experiments.as_deref())?;
    for (file, text) in &files {
        let mut e = Experiment::from_toml_in(text, file, &files)?;
        if !opts.only.is_empty() && !opts.only.contains(&e.meta.name) {
            continue;
        }
        e.set_axis(&format!("scale={}", opts.scale))?;
        e.points().map_err(|er| format!("{file}: {er}"))?;
        out.push((file.clone(), text.clone(), e));
    }
    if let Some(n) = opts.only.iter().find(|n| !out.iter().any(|(_, _, e)| &e.meta.name == *n)) {
        return Err(format!("--only: no experiment named '{n}'"));
    }
    if let Some(n) = opts.only.iter().enumerate().find_map(|(i, n)| opts.only[..i].contains(n).then_some(n)) {
        return Err(format!("--only: '{n}' is named twice"));
    }
    // The reports added to the comparison are read now, not after the sweeps.
    if !opts.traced.is_empty() && !out.iter().any(|(_, _, e)| e.meta.figures.iter().any(|f| f == "compare")) {
        return Err("--traced: no experiment of this run draws the allocator comparison it joins".into());
    }
    for (i, t) in opts.traced.iter().enumerate() {
        if opts.traced[..i].iter().any(|o| o.alloc == t.alloc && o.workload == t.workload) {
            return Err(format!("--traced {}@{}: given twice", t.alloc, t.workload));
        }
        t.row(0, &opts.scale)?;
    }
    let bases = experiment::rerun_bases(&out.iter().map(|e| &e.2).collect::<Vec<_>>(), &files);
    Ok(Loaded { exps: out, bases })
}

/// An experiment file's name without its directory: its name in the report's `experiments/`.
fn file_name(file: &str) -> String {
    Path::new(file).file_name().map_or(file.to_string(), |f| f.to_string_lossy().into_owned())
}

/// [`sweep::ensure_native_env`] for every experiment's points.
pub fn ensure_native_env(exps: &[(String, String, Experiment)]) -> Result<(), String> {
    let mut points = Vec::new();
    for (_, _, e) in exps {
        points.extend(e.points()?);
    }
    sweep::ensure_native_env(&points)
}

/// Runs everything and writes the report.
pub fn run(opts: &Options, loaded: Loaded) -> Result<Summary, String> {
    let Loaded { exps, bases } = loaded;
    let t0 = Instant::now();
    let out = &opts.out;
    for sub in ["experiments", "sweeps", "figures", "results"] {
        std::fs::create_dir_all(out.join(sub)).map_err(|e| format!("{}: {e}", out.join(sub).display()))?;
    }
    plot::load_font()?;
    // The report's files are replaced on every run (a rerun resumes and
    // redraws), each through a temporary file; the experiment files read
    // are never written over.
    let mut policy = Policy::new(true);
    for (file, _, _) in &exps {
        policy.input(Path::new(file));
    }
    for (file, text) in bases {
        policy.input(Path::new(&file));
        policy.write(&out.join("experiments").join(file_name(&file)), text.as_bytes())?;
    }
    let mut sections = Vec::new();
    let mut by_exp: BTreeMap<String, Vec<Row>> = BTreeMap::new();
    for (file, text, exp) in exps {
        let name = exp.meta.name.clone();
        let t = Instant::now();
        let base = file_name(&file);
        policy.write(&out.join("experiments").join(&base), text.as_bytes())?;
        let dir = SweepDir::new(out.join("sweeps").join(&name));
        let so = sweep::Options { shard: Shard::default(), resume: true, jobs: opts.jobs, tally: opts.tally.clone() };
        let meta = exp.meta.clone();
        let s = sweep::run(&dir, exp, &so)?;
        if !s.failed.is_empty() {
            let (l, e) = &s.failed[0];
            return Err(format!("{name}: {} point(s) failed, e.g. {l}: {e}", s.failed.len()));
        }
        let (_, mut rows, _) = store::merge(&dir)?;
        if meta.figures.iter().any(|f| f == "compare") {
            for tr in &opts.traced {
                rows.push(tr.row(rows.len(), &opts.scale)?);
            }
        }
        let file = format!("experiments/{base}");
        let rows_at = format!("sweeps/{}/", meta.name);
        let counts = (s.points, s.ran, t.elapsed().as_secs_f64());
        let sec = section(&mut policy, out, &meta, file, text, rows_at, &rows, counts)?;
        eprintln!("reproduce: {name}: {} points ({} run now) in {:.1} s", s.points, s.ran, sec.wall_s);
        sections.push(sec);
        by_exp.insert(name, rows);
    }
    let scored = claims::score(&by_exp);
    attach_claims(&mut sections, &scored);
    let json = serde_json::to_vec_pretty(&scored).expect("claims serialize");
    policy.write(&out.join("claims.json"), &json)?;
    eprintln!("reproduce: {}", claims::headline(&scored));
    if opts.only.is_empty() {
        let sec = calibration_section(&mut policy, out)?;
        eprintln!("reproduce: calibration: {} published points in {:.1} s", sec.points, sec.wall_s);
        sections.push(sec);
    }
    let summary = Summary {
        out: out.display().to_string(),
        scale: opts.scale.clone(),
        sections,
        claims: scored,
        wall_s: t0.elapsed().as_secs_f64(),
    };
    write_report(&mut policy, &summary, &opts.command)?;
    Ok(summary)
}

/// Each drawn figure's table of the paper's numbers, from the scoreboard.
fn attach_claims(sections: &mut [Section], scored: &[Scored]) {
    for sec in sections {
        for f in &mut sec.drawn {
            f.paper = claims::figure_table(scored, &f.id);
        }
    }
}

/// One experiment's part of a report: its figures drawn from `rows` into
/// OUT/figures, its headline table into OUT/results/<name>.csv.
/// `counts` is (points, points run now, wall seconds); `rows_at` is where
/// the rows live, as the report should name it.
#[allow(clippy::too_many_arguments)]
fn section(
    policy: &mut Policy,
    out: &Path,
    meta: &Meta,
    file: String,
    params: String,
    rows_at: String,
    rows: &[Row],
    counts: (usize, usize, f64),
) -> Result<Section, String> {
    for sub in ["figures", "results"] {
        std::fs::create_dir_all(out.join(sub)).map_err(|e| format!("{}: {e}", out.join(sub).display()))?;
    }
    let headline = table::headline(rows);
    let csv = out.join("results").join(format!("{}.csv", meta.name));
    let mut text = Vec::new();
    headline.write_csv(&mut text).map_err(|e| format!("{}: {e}", csv.display()))?;
    policy.write(&csv, &text)?;
    let mut drawn = Vec::new();
    for id in &meta.figures {
        let fig_fn = figures::by_id(id).ok_or_else(|| format!("{file}: unknown figure '{id}'"))?;
        if let Some(mut fig) = fig_fn(rows) {
            plot::render(&fig, &out.join("figures"))?;
            fig.caption = format!("{} {}", fig.caption, run_configuration(rows));
            drawn.push(fig);
        }
    }
    Ok(Section {
        name: meta.name.clone(),
        title: if meta.title.is_empty() { meta.name.clone() } else { meta.title.clone() },
        description: meta.description.clone(),
        file,
        points: counts.0,
        ran: counts.1,
        wall_s: counts.2,
        figures: drawn.iter().map(|f| f.id.clone()).collect(),
        rows: rows_at,
        toml: params,
        drawn,
        headline,
    })
}

/// What this run measured a figure at, for its caption: the scale, the
/// thread counts and the workloads of its rows (the paper's configuration
/// against pmsim's, claim by claim, is in the figure's table of the paper's
/// numbers).
fn run_configuration(rows: &[Row]) -> String {
    let scales = figures::distinct(rows.iter().map(|r| r.point.scale.as_str()));
    let mut threads = figures::distinct(rows.iter().map(|r| r.point.threads));
    threads.sort_unstable();
    let workloads = figures::distinct(rows.iter().map(|r| r.point.workload.as_str()));
    let threads: Vec<String> = threads.iter().map(u32::to_string).collect();
    format!(
        "Measured here at {} scale ({} of the paper's sizes), {} thread(s) {}, on {}.",
        scales.join("/"),
        match scales.as_slice() {
            ["paper"] => "the",
            _ => "a fraction",
        },
        if threads.len() == 1 { "count" } else { "counts" },
        threads.join(", "),
        workloads.join(", ")
    )
}

/// The Optane model against the published measurements (`pmsim calibrate`
/// at its full size, default constants): one figure per benchmark family,
/// the table of every point into OUT/results/calibration.csv.
fn calibration_section(policy: &mut Policy, out: &Path) -> Result<Section, String> {
    let t = Instant::now();
    let rows = pmsim_sim::calibrate::run_all(&pmsim_sim::Config::default(), pmsim_sim::calibrate::Size::Full)?;
    let drawn = calibration::figures(&rows);
    for fig in &drawn {
        plot::render(fig, &out.join("figures"))?;
    }
    let mut headline = Table::new(&["point", "model", "published", "unit", "error %", "role", "source"]);
    for r in &rows {
        headline.push(vec![
            r.point.clone(),
            format!("{:.4}", r.model),
            table::num(r.published),
            r.unit.into(),
            r.error.map_or("-".into(), |e| format!("{:.1}", 100.0 * e)),
            if r.fitted { "fitted" } else { "validation" }.into(),
            r.source.unwrap_or("-").into(),
        ]);
    }
    let csv = out.join("results").join("calibration.csv");
    let mut text = Vec::new();
    headline.write_csv(&mut text).map_err(|e| format!("{}: {e}", csv.display()))?;
    policy.write(&csv, &text)?;
    let mean = |fitted: bool| {
        let e: Vec<f64> = rows.iter().filter(|r| r.fitted == fitted).filter_map(|r| r.error).collect();
        (100.0 * e.iter().sum::<f64>() / e.len().max(1) as f64, 100.0 * e.iter().copied().fold(0.0, f64::max))
    };
    let ((fm, fw), (vm, vw)) = (mean(true), mean(false));
    Ok(Section {
        name: "calibration".into(),
        title: "The Optane model against published measurements".into(),
        description: format!(
            "FAST '20's microbenchmarks synthesized as traces and replayed through the contention model with the \
             default constants (`pmsim calibrate`). Fitted points: mean error {fm:.1} %, worst {fw:.1} %; \
             validation points (never fitted to): mean error {vm:.1} %, worst {vw:.1} %."
        ),
        file: "sim/optane.toml (pmsim calibrate)".into(),
        points: rows.len(),
        ran: rows.len(),
        wall_s: t.elapsed().as_secs_f64(),
        figures: drawn.iter().map(|f| f.id.clone()).collect(),
        rows: "results/calibration.csv".into(),
        toml: pmsim_sim::DEFAULT_TOML.into(),
        drawn,
        headline,
    })
}

/// Writes OUT/index.html and OUT/README.md.
pub fn write_report(policy: &mut Policy, summary: &Summary, command: &str) -> Result<(), String> {
    let out = Path::new(&summary.out);
    policy.write(&out.join("index.html"), index_html(summary, command).as_bytes())?;
    policy.write(&out.join("README.md"), readme_md(summary, command).as_bytes())?;
    Ok(())
}

/// The report of one sweep directory (a merged Slurm sweep, say): its rows
/// merged and checked, the experiment's figures drawn, the report written to `out`.
pub fn report_sweep(dir: &SweepDir, out: &Path, command: &str) -> Result<Summary, String> {
    plot::load_font()?;
    let t0 = Instant::now();
    let (r, rows, _) = store::merge(dir)?;
    let params = serde_json::to_string_pretty(&r.experiment).expect("experiments serialize");
    let file = dir.experiment_path().display().to_string();
    let rows_at = match out.parent() {
        Some(p) if p == dir.root => "../".to_string(),
        _ => format!("{}/", dir.root.display()),
    };
    // The command checked the report directory; its files are replaced.
    let mut policy = Policy::new(true);
    dir.protect(&mut policy);
    let mut sec = section(&mut policy, out, &r.experiment.meta, file, params, rows_at, &rows, (rows.len(), 0, 0.0))?;
    let scales = figures_scales(&rows);
    // The claims this one experiment can give (the others: not measured).
    let scored = claims::score(&BTreeMap::from([(r.experiment.meta.name.clone(), rows)]));
    attach_claims(std::slice::from_mut(&mut sec), &scored);
    let summary = Summary {
        out: out.display().to_string(),
        scale: scales,
        sections: vec![sec],
        claims: scored,
        wall_s: t0.elapsed().as_secs_f64(),
    };
    write_report(&mut policy, &summary, command)?;
    Ok(summary)
}

fn figures_scales(rows: &[Row]) -> String {
    let mut v: Vec<&str> = rows.iter().map(|r| r.point.scale.as_str()).collect();
    v.dedup();
    v.sort();
    v.dedup();
    v.join(", ")
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

const CSS: &str = "body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}\
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #ddd}figcaption{font-size:.95em;color:#444}\
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}\
th{background:#f4f4f4}pre{background:#f7f7f7;padding:.6em;overflow-x:auto}section{border-top:2px solid #ccc;margin-top:2em}";

fn index_html(s: &Summary, command: &str) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>pmsim reproduce ({})</title>\n\
         <style>{CSS}</style>\n</head>\n<body>\n<h1>pmsim reproduce — scale {}</h1>\n",
        html_escape(&s.scale),
        html_escape(&s.scale)
    );
    let _ = write!(
        h,
        "<p>pmsim {} · command <code>{}</code> · host {} ({} CPUs) · {:.1} s in all.</p>\n\
         <p>Every number below was measured by this run: simulated points stream the allocator's persistent stores, \
         flushes and fences into pmsim's cache and Optane model; native points run with real flush instructions on \
         a heap file in memory. Rerun with the same command to resume; edit <code>experiments/*.toml</code> and pass \
         <code>--experiments</code> to change them.</p>\n<ul>\n",
        env!("CARGO_PKG_VERSION"),
        html_escape(command),
        html_escape(&host()),
        cpus(),
        s.wall_s
    );
    let _ = writeln!(h, "<li><a href=\"#claims\">The paper's claims, one by one</a></li>");
    for sec in &s.sections {
        let _ =
            writeln!(h, "<li><a href=\"#{}\">{}</a> ({} points)</li>", sec.name, html_escape(&sec.title), sec.points);
    }
    h.push_str("</ul>\n");
    let _ = write!(
        h,
        "<section id=\"claims\">\n<h2>{}</h2>\n<p>{CLAIMS_INTRO}</p>\n{}<p>Also as <a href=\"claims.json\">claims.json</a>.</p>\n</section>\n",
        html_escape(&claims::headline(&s.claims)),
        claims::table(&s.claims).to_html()
    );
    for sec in &s.sections {
        let _ = write!(
            h,
            "<section id=\"{}\">\n<h2>{}</h2>\n<p>{}</p>\n<p>{} points, {:.1} s (results: <a href=\"results/{}.csv\">\
             results/{}.csv</a>, rows: <code>{}</code>).</p>\n",
            sec.name,
            html_escape(&sec.title),
            html_escape(&sec.description),
            sec.points,
            sec.wall_s,
            sec.name,
            sec.name,
            html_escape(&sec.rows)
        );
        for f in &sec.drawn {
            let _ = write!(
                h,
                "<figure>\n<img src=\"figures/{id}.png\" alt=\"{t}\">\n<figcaption><b>{t}.</b> {c} \
                 (<a href=\"figures/{id}.svg\">SVG</a>)</figcaption>\n</figure>\n<h3>Table behind {id}</h3>\n{tab}",
                id = f.id,
                t = html_escape(&f.title),
                c = html_escape(&f.caption),
                tab = f.table.to_html()
            );
            if let Some(p) = &f.paper {
                let _ = write!(h, "<h3>{PAPER_BESIDE} ({})</h3>\n{}", f.id, p.to_html());
            }
        }
        let _ = write!(
            h,
            "<details><summary>Parameters: <code>{}</code></summary>\n<pre>{}</pre>\n</details>\n\
             <details><summary>Every point</summary>\n{}</details>\n</section>\n",
            sec.file,
            html_escape(&sec.toml),
            sec.headline.to_html()
        );
    }
    h.push_str("</body>\n</html>\n");
    h
}

/// What the scoreboard at the head of a report is.
const CLAIMS_INTRO: &str = "Every quantitative claim of the NVAlloc paper's abstract, §3 and §6, with the \
configuration the paper measured it at and pmsim's, the paper's value, pmsim's value from this run's rows and a \
verdict: agrees (within 25 % of the paper's value, or the same direction where the paper gives only a direction), \
off, or not measured (with the reason). For a claim that is off, the why says which model terms, switched one at \
a time (CPU work, contention, thread count, the reflush penalty, the XPBuffer, the reading of an ablation preset), \
move pmsim towards the paper and which away, with their values.";

/// The heading of a figure's table of published numbers.
const PAPER_BESIDE: &str = "What the NVAlloc paper reports, beside pmsim";

fn readme_md(s: &Summary, command: &str) -> String {
    let mut m = String::new();
    let _ = write!(
        m,
        "# pmsim reproduce — scale {}\n\npmsim {} · command `{}` · host {} ({} CPUs) · {:.1} s in all.\n\n\
         Open `index.html` for the figures with their tables. Every number was measured by this run.\n",
        s.scale,
        env!("CARGO_PKG_VERSION"),
        command,
        host(),
        cpus(),
        s.wall_s
    );
    let _ = write!(
        m,
        "\n## {}\n\n{CLAIMS_INTRO} Also as `claims.json`.\n\n{}",
        claims::headline(&s.claims),
        claims::table(&s.claims).to_markdown()
    );
    for sec in &s.sections {
        let _ = write!(
            m,
            "\n## {}\n\n{}\n\n{} points, {:.1} s; parameters in `{}`, rows in `{}`, table in \
             `results/{}.csv`.\n",
            sec.title, sec.description, sec.points, sec.wall_s, sec.file, sec.rows, sec.name
        );
        for f in &sec.drawn {
            let _ = write!(
                m,
                "\n### {}\n\n![{}](figures/{}.png)\n\n{}\n\n{}",
                f.title,
                f.title,
                f.id,
                f.caption,
                f.table.to_markdown()
            );
            if let Some(p) = &f.paper {
                let _ = write!(m, "\n**{PAPER_BESIDE}**\n\n{}", p.to_markdown());
            }
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every built-in experiment parses and plans its points at every scale
    /// (a misspelt allocator, a "-SPEC" that leaves out nothing, a figure
    /// that does not exist fail here, not in the main job).
    #[test]
    fn builtin_experiments_plan_at_every_scale() {
        let set = crate::experiment::builtin_set();
        for (name, text) in crate::experiment::BUILTIN {
            let exp = Experiment::from_toml_in(text, name, &set).unwrap_or_else(|e| panic!("{e}"));
            for id in &exp.meta.figures {
                assert!(figures::by_id(id).is_some(), "{name}: no figure {id}");
            }
            for scale in ["tiny", "small", "paper"] {
                let mut at = exp.clone();
                at.set_axis(&format!("scale={scale}")).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert!(!at.points().unwrap_or_else(|e| panic!("{name} at {scale}: {e}")).is_empty());
            }
        }
    }
}
