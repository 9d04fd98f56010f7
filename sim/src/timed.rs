//! The simulator with the contention model beside it: one pass over a run's
//! events feeds both, so a sweep point (or any in-process stream) gets the
//! simulator's report and, when `Config::contention` asks for it, the
//! estimated makespan and throughput of its threads contending for the DIMMs.

use crate::config::Config;
use crate::contention::{Contention, ContentionReport};
use crate::simulator::Simulator;
use pmsim_traces::{Event, EventSink, Site, TraceHeader};
use std::io;

/// An [`EventSink`] that feeds the [`Simulator`] and, if the configuration
/// says `contention = true`, a [`Contention`] model.
pub struct Timed {
    pub sim: Simulator,
    pub time: Option<Contention>,
}

impl Timed {
    pub fn new(cfg: Config, header: &TraceHeader) -> Result<Timed, String> {
        let time = if cfg.contention { Some(Contention::new(&cfg)?) } else { None };
        Ok(Timed { sim: Simulator::new(cfg, header).map_err(|e| e.to_string())?, time })
    }

    /// The contention model's figures (`None` unless it ran).
    pub fn time_report(&mut self) -> Option<ContentionReport> {
        self.time.as_mut().map(Contention::report)
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
        self.sim.event_at(tid, site, ev)
    }

    fn define_site(&mut self, site: &Site) -> io::Result<()> {
        self.sim.define_site(site)
    }
}
