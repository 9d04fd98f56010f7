//! The simulator with the contention model beside it: one pass over a run's
//! events feeds both, so a sweep point (or any in-process stream) gets the
//! simulator's report and, when `Config::contention` asks for it, the
//! estimated makespan and throughput of its threads contending for the DIMMs
//! — persistence alone, and, given the run's CPU costs, with the CPU's work
//! added ([`Timed::with_cpu`]).

use crate::config::Config;
use crate::contention::{Contention, ContentionReport, CpuCosts};
use crate::simulator::Simulator;
use pmsim_traces::{Event, EventSink, Site, TraceHeader};
use std::io;

/// An [`EventSink`] that feeds the [`Simulator`] and, if the configuration
/// says `contention = true`, a [`Contention`] model.
pub struct Timed {
    pub sim: Simulator,
    /// The contention model, persistence alone.
    pub time: Option<Contention>,
    /// The contention model with the CPU's work added.
    pub time_cpu: Option<Contention>,
}

impl Timed {
    pub fn new(cfg: Config, header: &TraceHeader) -> Result<Timed, String> {
        Timed::with_cpu(cfg, header, None)
    }

    /// With `cpu`, a second contention model advances the threads by the
    /// CPU's work as well ([`Contention::set_cpu`]).
    pub fn with_cpu(cfg: Config, header: &TraceHeader, cpu: Option<&CpuCosts>) -> Result<Timed, String> {
        let model = |cpu: Option<&CpuCosts>| -> Result<Contention, String> {
            let mut c = Contention::new(&cfg)?;
            c.set_header(header);
            if let Some(cpu) = cpu {
                c.set_cpu(cpu);
            }
            Ok(c)
        };
        let time = if cfg.contention { Some(model(None)?) } else { None };
        let time_cpu = match cpu {
            Some(cpu) if cfg.contention => Some(model(Some(cpu))?),
            _ => None,
        };
        Ok(Timed { sim: Simulator::new(cfg, header).map_err(|e| e.to_string())?, time, time_cpu })
    }

    /// The contention model's figures (`None` unless it ran).
    pub fn time_report(&mut self) -> Option<ContentionReport> {
        self.time.as_mut().map(Contention::report)
    }

    /// The figures of the model with the CPU's work (`None` unless it ran).
    pub fn cpu_time_report(&mut self) -> Option<ContentionReport> {
        self.time_cpu.as_mut().map(Contention::report)
    }
}

impl EventSink for Timed {
    #[inline]
    fn event(&mut self, tid: u32, ev: &Event<'_>) -> io::Result<()> {
        self.event_at(tid, 0, ev)
    }

    #[inline]
    fn event_at(&mut self, tid: u32, site: u32, ev: &Event<'_>) -> io::Result<()> {
        if let Some(t) = &mut self.time {
            t.push(tid, ev);
        }
        if let Some(t) = &mut self.time_cpu {
            t.push(tid, ev);
        }
        self.sim.event_at(tid, site, ev)
    }

    fn define_site(&mut self, site: &Site) -> io::Result<()> {
        self.sim.define_site(site)
    }
}
