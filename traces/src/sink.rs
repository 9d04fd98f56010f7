//! Where events go: a trace file, or straight into a consumer in the same process.

use crate::event::{Event, OwnedEvent};
use crate::sites::{Site, SiteTable};
use std::io;

/// A consumer of events in global order. The trace writers implement it, and so
/// does the simulator, so a run can be replayed without a file in between.
pub trait EventSink: Send {
    fn event(&mut self, tid: u32, ev: &Event<'_>) -> io::Result<()>;

    /// An event whose flush or fence was issued at code site `site` (0:
    /// unknown; other events ignore it). A sink that keeps no sites treats it
    /// as [`EventSink::event`].
    #[inline]
    fn event_at(&mut self, tid: u32, site: u32, ev: &Event<'_>) -> io::Result<()> {
        let _ = site;
        self.event(tid, ev)
    }

    /// Defines code site `site.id`, before the first event naming it.
    fn define_site(&mut self, site: &Site) -> io::Result<()> {
        let _ = site;
        Ok(())
    }
}

/// Collects events in memory, with the site of each and the sites defined:
/// for tests and small tools.
#[derive(Default, Debug)]
pub struct VecSink(pub Vec<(u32, OwnedEvent)>, pub Vec<u32>, pub SiteTable);

impl EventSink for VecSink {
    fn event(&mut self, tid: u32, ev: &Event<'_>) -> io::Result<()> {
        self.event_at(tid, 0, ev)
    }

    fn event_at(&mut self, tid: u32, site: u32, ev: &Event<'_>) -> io::Result<()> {
        self.0.push((tid, ev.to_owned()));
        self.1.push(site);
        Ok(())
    }

    fn define_site(&mut self, site: &Site) -> io::Result<()> {
        self.2.insert(site.clone());
        Ok(())
    }
}

impl<S: EventSink + ?Sized> EventSink for Box<S> {
    fn event(&mut self, tid: u32, ev: &Event<'_>) -> io::Result<()> {
        (**self).event(tid, ev)
    }

    fn event_at(&mut self, tid: u32, site: u32, ev: &Event<'_>) -> io::Result<()> {
        (**self).event_at(tid, site, ev)
    }

    fn define_site(&mut self, site: &Site) -> io::Result<()> {
        (**self).define_site(site)
    }
}
