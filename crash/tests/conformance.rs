//! The conformance suite on the registered allocators with crash recovery,
//! found through the registry as `pmsim run` finds them, each with a broken
//! variant the crash explorer must catch: NVAlloc-LOG without the flush of
//! the destination word; LLFree with `free_from`'s two steps swapped (the
//! frame freed before its destination is cleared); Makalu without the flush
//! of its undo-log entries.

use pmsim_model::family::Family;

fn registered(name: &str) -> &'static dyn Family {
    pmsim_model::registry::find(name, &[]).unwrap_or_else(|| panic!("{name} is registered"))
}

mod nvalloc_log {
    pmsim_crash::conformance_tests!(super::registered("nvalloc-log"), "nvalloc-log", recovery, mutated: "nvalloc-log:mutation=dest-flush");
}

mod makalu {
    pmsim_crash::conformance_tests!(super::registered("makalu"), "makalu", recovery, mutated: "makalu:mutation=undo-entry-flush");
}

mod makalu_shipped {
    pmsim_crash::conformance_tests!(super::registered("makalu"), "makalu:shipped=true", recovery, mutated: "makalu:shipped=true:mutation=undo-entry-flush");
}

mod llfree {
    pmsim_crash::conformance_tests!(super::registered("llfree"), "llfree", recovery, mutated: "llfree:mutation=free-before-unpublish");
}
