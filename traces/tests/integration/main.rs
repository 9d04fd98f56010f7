//! Every integration test of this crate in one binary: one link and one
//! copy of the dependencies' generic code instead of one per file.

mod common;

mod c_writer;
mod errors;
mod roundtrip;
