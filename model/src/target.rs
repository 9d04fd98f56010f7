//! The crash explorer's view of an allocator: a [`CrashTarget`] recovers a
//! crash image and says which rules hold there, and the [`Recovered`]
//! image answers the checks. pmsim builds the target of every allocator
//! from its seam ([`crate::alloc::Allocator`], `recovery_target` in
//! [`crate::family`]); an allocator writes one of its own only when its
//! images are not a pmsim heap (PMDK's pool) or it keeps state in files
//! beside its heap (Metall's management files).

use crate::heap::Heap;
use std::path::Path;

/// What a target's crash images are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageFormat {
    /// A pmsim heap ([`Heap`]: a header page with the root slots). Recovery
    /// is pmsim code whose every access goes through its `PmThread`, so the
    /// explorer sees what it reads (coverage) and can crash it at its fences.
    PmsimHeap,
    /// The allocator's own file format (PMDK's pool), opened as plain bytes
    /// ([`Heap::open_raw_copy`]). Recovery runs inside a library whose
    /// accesses pmsim does not see: every pending byte of an image counts as
    /// read, and the recovery cannot be crashed in turn.
    Own,
}

/// A crash point as a target whose allocator keeps state outside its heap
/// file sees it ([`CrashTarget::outside_markers`]).
#[derive(Clone, Copy, Debug)]
pub struct CrashPoint<'a> {
    /// The heap image the trace started from; files the traced run saved
    /// with it are in [`crate::pm::image_files_dir`] of it.
    pub image: &'a Path,
    /// The label of the last marker before the point that starts with the
    /// target's [`CrashTarget::outside_markers`] prefix (`None`: none yet).
    pub marker: Option<&'a str>,
}

/// What recovery made of a crash image.
pub enum Recovery {
    /// Recovered: the checks apply.
    Recovered(Box<dyn Recovered>),
    /// Refused, as the allocator's design requires at this point (Metall
    /// refuses a store without its properly-closed mark): a correct outcome,
    /// counted; no check applies to a store nobody may open. The allocator's
    /// message.
    Refused(String),
}

/// An allocator whose crash images can be recovered, as the crash explorer uses it.
pub trait CrashTarget: Send + Sync {
    /// What its images are; a pmsim heap unless it says otherwise.
    fn image_format(&self) -> ImageFormat {
        ImageFormat::PmsimHeap
    }

    /// Where a program publishes its allocations besides inside other live
    /// blocks, as `(offset, bytes)` ranges of words: the heap's root slots;
    /// for an [`ImageFormat::Own`] target, what `image` (the trace's last
    /// state, every store persisted) says, e.g. PMDK's root object. A
    /// `malloc_to` is recognised by storing its result in such a word.
    fn publication_roots(&self, image: &Heap) -> Result<Vec<(u64, u64)>, String> {
        let _ = image;
        Ok(vec![(Heap::root_offset(0), 8 * crate::heap::ROOT_SLOTS as u64)])
    }

    /// A name for reports (the allocator and its variant).
    fn name(&self) -> String;

    /// See [`crate::alloc::CrashRules::plain_mallocs_durable`].
    fn plain_mallocs_durable(&self) -> bool;

    /// See [`crate::alloc::CrashRules::reachability_recovery`].
    fn reachability_recovery(&self) -> bool;

    /// See [`crate::alloc::CrashRules::interrupted_may_lose`].
    fn interrupted_may_lose(&self) -> bool {
        false
    }

    /// See [`crate::alloc::CrashRules::free_from_leaves_dest`].
    fn free_from_leaves_dest(&self) -> bool {
        false
    }

    /// Runs the allocator's own recovery on `heap` (a crash image), as the
    /// next run after a real crash would.
    fn recover(&self, heap: &Heap) -> Result<Box<dyn Recovered>, String>;

    /// For an allocator that keeps state outside its heap file (Metall's
    /// management files and properly-closed mark): the prefix of the trace
    /// markers by which its runs record each change of that state. The
    /// explorer then passes every crash point's last such marker to
    /// [`CrashTarget::recover_at`], and also crashes at the end of the
    /// trace, since that state may change after the last fence (Metall
    /// writes its mark last). `None` (the default): the heap is everything.
    fn outside_markers(&self) -> Option<&'static str> {
        None
    }

    /// Reads, once per exploration, what recovery needs besides the image
    /// (Metall: the management files saved with it), given the labels of
    /// every marker with the [`CrashTarget::outside_markers`] prefix; an
    /// error is one line for the user (a missing or mismatched file).
    fn load_outside(&self, image: &Path, markers: &[&str]) -> Result<(), String> {
        let _ = (image, markers);
        Ok(())
    }

    /// Recovery of `heap` after a crash at `at`: for an allocator with
    /// outside state, that state is first laid out beside `heap`'s file as a
    /// crash at `at` leaves it. By default [`CrashTarget::recover`].
    fn recover_at(&self, heap: &Heap, at: &CrashPoint) -> Result<Recovery, String> {
        let _ = at;
        self.recover(heap).map(Recovery::Recovered)
    }
}

/// An allocator after recovery, for the checks.
pub trait Recovered {
    /// Every live allocation `(offset, usable size)`, by offset.
    fn live_allocations(&mut self) -> Vec<(u64, u64)>;

    /// The allocator's own metadata check ([`crate::alloc::Allocator::check_metadata`]).
    fn check(&mut self) -> Result<(), String>;

    /// Allocates `size` bytes (the checks' probe of the recovered state).
    fn malloc(&mut self, size: u64) -> Option<u64>;

    /// See [`crate::alloc::Allocator::mark_roots`].
    fn mark_roots(&mut self) -> Vec<u64> {
        Vec::new()
    }
}
