//! Criterion benchmarks of pmsim's hot paths, run with `cargo bench -p pmsim-benches`
//! (or `--bench codec|sim|primitives`):
//!
//! - `codec.rs`: encoding and decoding `.pmt` event streams;
//! - `sim.rs`: the simulator's replay of the synthetic metadata stream, per model;
//! - `primitives.rs`: the persistence primitives on a tmpfs heap, native and traced.
//!
//! They live in a crate of their own so that building the tests
//! (`cargo test --workspace`) does not build criterion and its dependencies.
