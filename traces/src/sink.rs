//! Where events go: a trace file, or straight into a consumer in the same process.

use crate::event::{Event, OwnedEvent};
use std::io;

/// A consumer of events in global order. The trace writers implement it, and so
/// does the simulator, so a run can be replayed without a file in between.
pub trait EventSink: Send {
    fn event(&mut self, tid: u32, ev: &Event<'_>) -> io::Result<()>;
}

/// Collects events in memory: for tests and small tools.
#[derive(Default, Debug)]
pub struct VecSink(pub Vec<(u32, OwnedEvent)>);

impl EventSink for VecSink {
    fn event(&mut self, tid: u32, ev: &Event<'_>) -> io::Result<()> {
        self.0.push((tid, ev.to_owned()));
        Ok(())
    }
}

impl<S: EventSink + ?Sized> EventSink for Box<S> {
    fn event(&mut self, tid: u32, ev: &Event<'_>) -> io::Result<()> {
        (**self).event(tid, ev)
    }
}
