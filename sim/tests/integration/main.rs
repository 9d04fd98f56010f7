//! Every integration test of this crate in one binary: one link and one
//! copy of the dependencies' generic code instead of one per file.

mod contention;
mod distance_prop;
mod export;
mod lint;
mod replay;
mod sites;
mod window;
