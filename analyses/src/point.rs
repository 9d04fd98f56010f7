//! One point of a sweep: every parameter of one run, settled. A point's id is
//! a hash of its canonical JSON, so the same parameters get the same id in any
//! experiment, on any machine, in any shard.

use pmsim_model::runner::AllocSpec;
use pmsim_model::workloads::{Scale, Workload};
use pmsim_sim::Config as SimConfig;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// What a point measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The run's events streamed into the simulator (reflushes, write
    /// amplification, estimated persist time, access map).
    Sim,
    /// A native run with real flush instructions (ops/s, footprints).
    Native,
    /// Both, one after the other, into one row.
    Both,
    /// A native run for what it maps and allocates (peak memory, slabs by
    /// utilization), not for its time: it shares the machine with other
    /// points, and its row keeps no timing. A one-thread run's footprint is
    /// the same however busy the machine is, and such points then take a
    /// core each instead of the whole machine one after the other.
    Memory,
}

impl Mode {
    pub fn sim(self) -> bool {
        matches!(self, Mode::Sim | Mode::Both)
    }
    pub fn native(self) -> bool {
        matches!(self, Mode::Native | Mode::Both | Mode::Memory)
    }
    /// Whether the native run is timed, and so runs alone.
    pub fn timed(self) -> bool {
        matches!(self, Mode::Native | Mode::Both)
    }
}

/// Every parameter of one run. Field order is the canonical order of the id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Point {
    pub mode: Mode,
    pub scale: String,
    pub workload: String,
    /// Workload parameter overrides (`param.KEY`).
    pub workload_params: BTreeMap<String, Value>,
    pub threads: u32,
    /// The allocator spec as written (`nvalloc-log`, `base:stripes=4`, `pmdk`, …).
    pub alloc: String,
    /// Allocator parameter overrides (`stripes`, `su`, …).
    pub alloc_params: BTreeMap<String, Value>,
    /// Simulator configuration overrides by dotted path (`eadr`, `reflush.threshold`).
    pub sim: BTreeMap<String, Value>,
    pub seed: u64,
}

/// A value as `key=value` text for the parameter setters (strings bare).
pub fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// FNV-1a, 64 bits: a stable hash with no dependency (ids must not change
/// between versions of a hashing crate).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl Point {
    /// Whether `other` is this point run under another seed (or the same):
    /// every other parameter equal. The fields are named, so a new one must
    /// be placed here.
    pub fn same_but_seed(&self, other: &Point) -> bool {
        let Point { mode, scale, workload, workload_params, threads, alloc, alloc_params, sim, seed: _ } = self;
        *mode == other.mode
            && *scale == other.scale
            && *workload == other.workload
            && *workload_params == other.workload_params
            && *threads == other.threads
            && *alloc == other.alloc
            && *alloc_params == other.alloc_params
            && *sim == other.sim
    }

    /// The point's id: 16 hex digits of the hash of its canonical JSON.
    pub fn id(&self) -> String {
        let json = serde_json::to_string(self).expect("points serialize");
        format!("{:016x}", fnv1a64(json.as_bytes()))
    }

    /// A short human label (`nvalloc-log stripes=4 threadtest ×2`).
    pub fn label(&self) -> String {
        let mut s = self.alloc.clone();
        for (k, v) in &self.alloc_params {
            s.push_str(&format!(" {k}={}", value_text(v)));
        }
        s.push_str(&format!(" {} ×{}", self.workload, self.threads));
        for (k, v) in self.workload_params.iter().chain(&self.sim) {
            s.push_str(&format!(" {k}={}", value_text(v)));
        }
        s
    }

    pub fn scale(&self) -> Result<Scale, String> {
        self.scale.parse::<Scale>().map_err(|e| e.to_string())
    }

    /// The allocator with its parameters (through [`AllocSpec::parse`] only,
    /// so every allocator the runner knows can be swept).
    pub fn alloc_spec(&self) -> Result<AllocSpec, String> {
        let mut a = AllocSpec::parse(&self.alloc, std::iter::empty()).map_err(|e| format!("'alloc': {e}"))?;
        let kvs: Vec<String> = self.alloc_params.iter().map(|(k, v)| format!("{k}={}", value_text(v))).collect();
        a.with_overrides(&kvs).map_err(|e| format!("allocator parameters of {}: {e}", self.alloc))?;
        Ok(a)
    }

    /// The workload with its parameters, validated for the thread count.
    pub fn workload(&self) -> Result<Workload, String> {
        let mut w = Workload::preset(&self.workload, self.scale()?).map_err(|e| format!("'workload': {e}"))?;
        for (k, v) in &self.workload_params {
            w.set(k, &value_text(v)).map_err(|e| format!("workload parameter 'param.{k}': {e}"))?;
        }
        w.validate(self.threads).map_err(|e| e.to_string())?;
        Ok(w)
    }

    /// The simulator's configuration: the default with the point's overrides.
    pub fn sim_config(&self) -> Result<SimConfig, String> {
        let mut v = serde_json::to_value(SimConfig::default()).expect("config serializes");
        for (path, val) in &self.sim {
            let mut at = &mut v;
            let parts: Vec<&str> = path.split('.').collect();
            for (i, p) in parts.iter().enumerate() {
                let obj = at.as_object_mut().ok_or_else(|| format!("simulator key 'sim.{path}': not a table"))?;
                if !obj.contains_key(*p) {
                    let known: Vec<&str> = obj.keys().map(String::as_str).collect();
                    return Err(format!("unknown simulator key 'sim.{path}' (known here: {})", known.join(", ")));
                }
                if i + 1 == parts.len() {
                    obj.insert(p.to_string(), val.clone());
                    break;
                }
                at = obj.get_mut(*p).expect("checked");
            }
        }
        let cfg: SimConfig =
            serde_json::from_value(v).map_err(|e| format!("simulator keys {:?}: {e}", self.sim.keys()))?;
        cfg.validate().map_err(|e| format!("simulator configuration: {e}"))?;
        Ok(cfg)
    }

    /// Checks every parameter without running anything.
    pub fn check(&self) -> Result<(), String> {
        self.alloc_spec()?;
        self.workload()?;
        if self.mode.sim() || !self.sim.is_empty() {
            self.sim_config()?;
        }
        if self.threads == 0 {
            return Err("'threads': must be at least 1".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> Point {
        Point {
            mode: Mode::Sim,
            scale: "tiny".into(),
            workload: "threadtest".into(),
            workload_params: BTreeMap::new(),
            threads: 1,
            alloc: "nvalloc-log".into(),
            alloc_params: BTreeMap::from([("stripes".into(), Value::from(4))]),
            sim: BTreeMap::from([("reflush.threshold".into(), Value::from(8))]),
            seed: 42,
        }
    }

    #[test]
    fn ids_are_stable_and_parameter_sensitive() {
        let a = p();
        assert_eq!(a.id(), p().id());
        assert_eq!(a.id().len(), 16);
        let mut b = p();
        b.threads = 2;
        assert_ne!(a.id(), b.id());
        assert_eq!(a.sim_config().unwrap().reflush.threshold, 8);
        let mut c = p();
        c.sim.insert("cache.setz".into(), Value::from(1));
        assert!(c.sim_config().unwrap_err().contains("sim.cache.setz"));
    }
}
