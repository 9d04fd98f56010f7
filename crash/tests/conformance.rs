//! The conformance suite on every registered allocator, found through the
//! registry as `pmsim run` finds them: registering an allocator is what
//! puts it here (see `pmsim_crash::conformance`).

pmsim_crash::conformance_suite!(pmsim_model::registry::ALLOCATORS);
