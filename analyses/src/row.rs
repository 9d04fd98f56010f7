//! One result row per point: every parameter, every result, and — kept apart
//! in [`Env`] — what depends on the machine and the moment rather than on the
//! point (wall times, ops/s, host, which DIMM the heap's first page fell on).
//! Two runs of the same single-threaded point give rows whose `point` and
//! `result` are equal; multi-threaded points depend on the interleaving.

use crate::fields::{self, Field, Source};
use crate::point::Point;
use pmsim_traces::OpKind;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The operations of an allocator's steady state: malloc and free, with the
/// morphing and log GC they start; not the heap's creation, close or
/// recovery, which a run does once.
pub const STEADY_OPS: [OpKind; 5] = [OpKind::Malloc, OpKind::Free, OpKind::Realloc, OpKind::Morph, OpKind::LogGc];

/// The results of one point.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Results {
    /// The allocator instance: spec, name and every parameter it ran with.
    pub allocator: Option<Value>,
    /// The simulator's report (`pmsim run --sim --json`'s `sim`), without
    /// the per-DIMM split (see [`Env::sim_dimms`]).
    pub sim: Option<Value>,
    /// Why the point has no simulator report although its mode asks for one
    /// (an allocator pmsim's tracer cannot see, e.g. PMDK).
    pub sim_skipped: Option<String>,
    /// The access map (Fig. 2), when `sim.access_map.per_category` > 0.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_map: Vec<Value>,
    /// The native run's report without its timings (operations, footprints,
    /// slab breakdown, workload-specific figures).
    pub native: Option<Value>,
    /// A simulated point's traced run's report without its timings, its
    /// heap-shape series and its CPU time (operations, footprints, slab
    /// breakdown): what the simulated run did to the heap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traced: Option<Value>,
}

/// What a row holds that is not a function of its point alone; equality of
/// result sets ignores it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Env {
    pub host: String,
    pub pmsim_version: String,
    /// Seconds since the epoch when the point started.
    pub started_unix: f64,
    /// Wall time of the whole point (simulated and native parts).
    pub wall_s: f64,
    /// The native run's timings: `elapsed_s`, `measured_s`, `ops_per_s` and
    /// any workload-specific rate.
    pub native_timing: Map<String, Value>,
    /// The flush instruction of the native run (the best this CPU has).
    pub flush_insn: Option<String>,
    /// The simulator's per-DIMM figures: which DIMM an address maps to
    /// depends on where the heap was mapped.
    pub sim_dimms: Option<Value>,
    /// What the point's work costs the CPU per operation, measured natively
    /// with flushes off (`pmsim_model::workloads::cpu::CpuProfile`;
    /// [`crate::cpu`]), for simulated points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Value>,
    /// Why a simulated point has no CPU profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_skipped: Option<String>,
    /// The contention model's estimate with that CPU work added (its
    /// report, without the per-DIMM split), for points simulated with
    /// contention: CPU work and persistence together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<Value>,
}

/// One line of a result file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// The point's position in the experiment.
    pub index: usize,
    /// The point's id ([`Point::id`]).
    pub id: String,
    pub point: Point,
    pub result: Results,
    pub env: Env,
}

/// Keys of a native or traced report that are timings (seconds, rates,
/// nanoseconds per operation): they go to [`Env`], or are dropped, so that
/// two runs of one point compare equal (a Slurm sweep's rows against a
/// local one's).
pub fn is_timing_key(k: &str) -> bool {
    k.ends_with("_s") || k.ends_with("_per_s") || k.ends_with("_ns")
}

impl Row {
    /// The row without its [`Env`] (what must be equal across runs).
    pub fn without_env(&self) -> Row {
        Row { env: Env::default(), ..self.clone() }
    }

    /// Checks every document the row holds against the fields the figures
    /// read of it ([`fields::check`]): a statistic missing or renamed is an
    /// error naming its path.
    pub fn check_fields(&self) -> Result<(), String> {
        if let Some(sim) = &self.result.sim {
            fields::check(sim, Source::Sim)?;
        }
        if let Some(native) = &self.result.native {
            fields::check(native, Source::Native)?;
            // A memory point's native run keeps no timing (`Mode::Memory`).
            if self.point.mode.timed() {
                fields::check(&Value::Object(self.env.native_timing.clone()), Source::Timing)?;
            }
        }
        if let Some(t) = &self.result.traced {
            fields::check(t, Source::Traced)?;
        }
        if let Some(cpu) = &self.env.cpu {
            fields::check(cpu, Source::Cpu)?;
        }
        if let Some(e) = &self.env.estimate {
            fields::check(e, Source::Estimate)?;
        }
        self.shape_points().iter().try_for_each(|p| fields::check(p, Source::ShapePoint))?;
        self.sites().iter().try_for_each(|s| fields::check(s, Source::Site))?;
        self.op_kinds().iter().try_for_each(|o| fields::check(o, Source::Op))?;
        self.regions().iter().try_for_each(|g| fields::check(g, Source::Region))?;
        self.result.access_map.iter().try_for_each(|p| fields::check(p, Source::AccessPoint))
    }

    /// A number the figures read ([`fields`](crate::fields)): `None` when the
    /// row has no document of the field's source, or the field is absent or
    /// null there. Rows are checked against every field when they are loaded
    /// ([`Row::check_fields`]), so a missing statistic is an error there,
    /// not a `None` here. Access-map, heap-shape and site fields are per
    /// element: read them with [`fields::read`].
    pub fn num(&self, f: Field) -> Option<f64> {
        match f.source {
            Source::Sim => fields::read(self.result.sim.as_ref()?, f),
            Source::Native => fields::read(self.result.native.as_ref()?, f),
            Source::Timing => self.env.native_timing.get(f.path.trim_start_matches('/'))?.as_f64(),
            Source::Traced => fields::read(self.result.traced.as_ref()?, f),
            Source::Cpu => fields::read(self.env.cpu.as_ref()?, f),
            Source::Estimate => fields::read(self.env.estimate.as_ref()?, f),
            Source::AccessPoint | Source::ShapePoint | Source::Site | Source::Op | Source::Region => None,
        }
    }

    /// The heap-shape points of the native run (none for rows made before
    /// runs sampled it); read them with [`fields::read`].
    pub fn shape_points(&self) -> &[Value] {
        self.result.native.as_ref().and_then(|n| n.get("series")).and_then(Value::as_array).map_or(&[], Vec::as_slice)
    }

    /// The code sites of the simulator report, costliest first (none when
    /// the trace named no sites); read them with [`fields::read`].
    pub fn sites(&self) -> &[Value] {
        self.result.sim.as_ref().and_then(|s| s.get("sites")).and_then(Value::as_array).map_or(&[], Vec::as_slice)
    }

    /// The simulator report's figures by kind of operation (none for rows
    /// not simulated); read them with [`fields::read`].
    pub fn op_kinds(&self) -> &[Value] {
        self.result.sim.as_ref().and_then(|s| s.get("ops")).and_then(Value::as_array).map_or(&[], Vec::as_slice)
    }

    /// The simulator report's figures by region of the trace (none for rows
    /// not simulated); read them with [`fields::read`].
    pub fn regions(&self) -> &[Value] {
        self.result.sim.as_ref().and_then(|s| s.get("regions")).and_then(Value::as_array).map_or(&[], Vec::as_slice)
    }

    /// Reflushes / flushes of the flushes issued inside the allocator's
    /// steady-state operations ([`STEADY_OPS`]): what the paper's Fig. 1a
    /// calls allocator-induced flushes. The heap's creation is left out: a
    /// run does it once, and a scaled-down run's few operations would
    /// otherwise weigh it far more than the paper's millions do (PMDK's pool
    /// creation flushes every line of its headers, none twice). `None`
    /// without flushes in those operations.
    pub fn steady_reflush_ratio(&self) -> Option<f64> {
        let steady: Vec<String> = STEADY_OPS.iter().map(|k| k.name()).collect();
        let (mut flushes, mut reflushes) = (0.0, 0.0);
        for o in self.op_kinds() {
            if o.get(fields::OP_NAME).and_then(Value::as_str).is_some_and(|n| steady.iter().any(|s| s == n)) {
                flushes += fields::read(o, fields::OP_FLUSHES).unwrap_or(0.0);
                reflushes += fields::read(o, fields::OP_REFLUSHES).unwrap_or(0.0);
            }
        }
        (flushes > 0.0).then(|| reflushes / flushes)
    }

    /// An allocator parameter as the instance ran with it (`stripes`, `su`, …),
    /// else as the point set it.
    pub fn alloc_param(&self, key: &str) -> Option<Value> {
        self.result
            .allocator
            .as_ref()
            .and_then(|a| a.pointer(&format!("/params/{key}")).cloned())
            .or_else(|| self.point.alloc_params.get(key).cloned())
    }
}
