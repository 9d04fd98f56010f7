//! Every allocator pmsim knows, registered once: `pmsim run --alloc`,
//! sweeps, the `--help` text and the crash explorer all look allocators up
//! here. Adding an allocator is its module plus one line in [`ALLOCATORS`]
//! (see ARCHITECTURE.md, "Adding an allocator").

use crate::family::{Family, Native};
use crate::llfree::LlFree;
use crate::makalu::Makalu;
use crate::metall::Metall;
use crate::nvalloc::NvAlloc;
use crate::nvmmalloc::NvmMalloc;
use crate::pallocator::PAllocator;
use crate::pmdk::Pmdk;
use crate::ralloc::Ralloc;

/// The registered allocators, in the order `--help` lists them.
pub static ALLOCATORS: &[&dyn Family] = &[
    &Native::<NvAlloc>::ENTRY,
    &Native::<LlFree>::ENTRY,
    &Native::<Makalu>::ENTRY,
    &Native::<Metall>::ENTRY,
    &Native::<Ralloc>::ENTRY,
    &Native::<NvmMalloc>::ENTRY,
    &Native::<PAllocator>::ENTRY,
    &Native::<Pmdk>::ENTRY,
];

/// If this process was started as a registered allocator's helper
/// ([`crate::Allocator::serve_helper_if_asked`]), serves as one and does not return.
pub fn serve_helper_if_asked() {
    for f in ALLOCATORS {
        f.serve_helper_if_asked();
    }
}

/// Gives this process the environment `families` need to run natively
/// ([`crate::Allocator::process_env`]), by executing pmsim again with it
/// (once) if it differs: then this does not return.
pub fn ensure_process_env<'a>(
    families: impl IntoIterator<Item = &'a dyn Family>,
    flush: Option<crate::FlushInsn>,
    msync: bool,
) -> Result<(), String> {
    let mut want = Vec::new();
    for f in families {
        for kv in f.process_env(flush, msync) {
            if !want.contains(&kv) {
                want.push(kv);
            }
        }
    }
    crate::pmdk::ensure_env(&want)
}

/// The allocator `name` (a preset such as `nvalloc-log`, or a family name
/// such as `llfree` or `nvalloc` as trace headers write it), among `extra`
/// families first (tests register their own that way) and then [`ALLOCATORS`].
pub fn find(name: &str, extra: &[&'static dyn Family]) -> Option<&'static dyn Family> {
    extra
        .iter()
        .chain(ALLOCATORS)
        .copied()
        .find(|f| f.presets().contains(&name))
        .or_else(|| extra.iter().chain(ALLOCATORS).copied().find(|f| f.family() == name))
}

/// Every name `--alloc` accepts, in registry order.
pub fn names() -> Vec<&'static str> {
    ALLOCATORS.iter().flat_map(|f| f.presets().iter().copied()).collect()
}

/// The `--alloc` list for `--help`: one line per allocator with its names.
pub fn help() -> String {
    let mut s = String::from(
        "Allocator(s), each NAME[:key=value:…] (the overrides apply to that one allocator, e.g. \
                              llfree:eadr=true); a comma list runs each. NAME is one of:",
    );
    for f in ALLOCATORS {
        s.push_str(&format!("\n  {}\n      {}", f.presets().join(", "), f.about()));
    }
    s
}
