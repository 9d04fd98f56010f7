//! The conformance suite on a registered allocator: NVAlloc-LOG, found
//! through the registry as `pmsim run` finds it, with the removed flush of
//! the destination word as its broken variant.

use pmsim_model::family::Family;

fn nvalloc() -> &'static dyn Family {
    pmsim_model::registry::find("nvalloc-log", &[]).expect("NVAlloc is registered")
}

pmsim_crash::conformance_tests!(nvalloc(), "nvalloc-log", recovery, mutated: "nvalloc-log:mutation=dest-flush");
