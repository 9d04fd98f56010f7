//! Every integration test of this crate in one binary: one link and one
//! copy of the dependencies' generic code instead of one per file.

mod common;

mod heap;
mod llfree;
mod makalu;
mod metall;
mod morphing;
mod native;
mod nvalloc;
mod tracing;
mod workloads;
