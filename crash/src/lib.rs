//! `pmsim crash`: the crash states of a real allocator run, recovered with the
//! allocator's own recovery code and checked.
//!
//! # Input
//!
//! A trace recorded with store values (`pmsim run … --trace t.pmt --values`,
//! or a program traced by the Valgrind tool, `pmsim trace-exec --values`)
//! and the heap image saved when tracing started (`t.pmt.img`, named with
//! its CRC-32 in the trace header, so a mismatched image is refused).
//!
//! The images are pmsim heaps, or, for an allocator with its own file format
//! (PMDK's pool; [`pmsim_model::family::ImageFormat`]), that file's bytes:
//! then the target says where the program publishes its allocations (PMDK's
//! root object, read from the trace's last state), its recovery runs in its
//! own library (libpmemobj's `pmemobj_open`, one image at a time), every
//! pending byte counts as read for coverage, and recovery is not crashed.
//!
//! # Crash points and images
//!
//! A crash point is the moment just before a fence or a clflush (which makes
//! its line durable at once): by default every one of the trace, optionally
//! only every N-th, only inside an operation of one
//! kind (`--during morph`, `log_gc`, `malloc`, …) or only after a marker.
//! Points inside the allocator's creation (`init`) are left out unless asked
//! for with `--during init`: the heap is not formatted yet.
//! The persistency model is the one of [`persist`]: each line's
//! not-yet-durable stores form a program-order list, and an image keeps a
//! prefix of each. The images of a point are enumerated exhaustively while
//! there are at most `bound` of them (default 1024), else (beyond the
//! coverage reduction below) `samples` of them (default 128, at most
//! `bound`) are sampled with a seeded generator: all persisted, none, random per-line
//! prefixes, accumulative, reverse, all-or-nothing per line ([`images`]).
//! An image is identified by (point, image, seed): the report of a failure
//! prints the one command that rebuilds exactly it.
//!
//! # Coverage by code path
//!
//! A steady-state run repeats a few code paths, so the selected points are
//! grouped by a signature of what the trace holds there ([`paths`]: the
//! operations in flight, the code sites of the fence crashed before and of
//! each thread's last fence, the classes of the pending stores by region and
//! flush site). Every path is explored, its first point and `per_path - 1`
//! more (default 2 per path); the others are *covered by path*; with
//! [`Options::all_points`] every selected point is explored. A removed flush
//! changes the signature wherever its store is pending, so a mutated run has
//! paths of its own.
//!
//! # Recovery and checks
//!
//! Points are spread over `jobs` workers, which take chunks of them in trace
//! order and replay forward; the report is the same for any number of
//! workers. A worker keeps a scratch file with every store of the trace so
//! far persisted (the *base*) and one private copy-on-write view of it
//! ([`pmsim_model::Heap::open_copy`]): an image is that view with the lines
//! that keep fewer pending stores written over it, and goes back to the base
//! page by page afterwards ([`pmsim_model::Heap::revert_copy`]), so an image
//! costs the lines it varies and the pages recovery touches, not the heap's
//! size. The allocator's recovery runs on it through [`CrashTarget`]. Then:
//!
//! * the live allocations are disjoint and inside the heap;
//! * every `malloc_to` completed before the crash point (and not freed since)
//!   is live with at least its size, its destination word holds it, and its
//!   bytes are what they were in the image before recovery (pointer words
//!   that recovery re-publishes or clears excepted); a completed plain
//!   `malloc` must be live too where the allocator makes it durable (NVAlloc-LOG);
//! * an interrupted `malloc_to` / `free_from` is atomic: its block is live
//!   exactly when its destination holds it — except where the allocator
//!   allocates before it publishes and unpublishes before it frees (LLFree):
//!   there the block may be live and unpublished, a *lost* block, counted
//!   (at most one per thread with an operation in flight), not a violation;
//! * a completed `free` left its block free, and no live allocation is left
//!   that no operation accounts for. Under a reachability-based recovery
//!   (NVAlloc-GC), such a block is *retained* — counted and reported, not a
//!   violation — when the checks' own conservative mark of the recovered
//!   image, from the root slots (and what recovery keeps regardless, e.g.
//!   logged large extents), reaches it: a stale word names it. A block that
//!   mark cannot reach is a leak. `leak_bound` (default 0) tolerates leaks.
//! * the recovered allocator works: a few new allocations overlap nothing live.
//!
//! Recovery errors and panics are violations too.
//!
//! # State outside the heap
//!
//! An allocator that keeps state in files beside its heap (Metall's
//! management files and properly-closed mark) records each change of it as
//! a marker ([`CrashTarget::outside_markers`]); each crash point passes its
//! last such marker to the target, which lays that state out beside the
//! image before its recovery runs, and the end of the trace is a crash point
//! too. A store the allocator must refuse there (Metall's, without the mark)
//! is counted as refused, not a violation, and no check applies to it; it
//! reads nothing of the heap, so such a point has one recovery-visible state
//! ([`Options::full_sample`] samples `samples` images there anyway).
//!
//! # Coverage
//!
//! Every image is recovered under an [`AccessWatch`](pmsim_model::watch) on
//! the point's pending lines: the bytes of them that recovery and the checks
//! read (before recovery wrote them) name the image's *recovery-visible
//! state*; images that agree on those bytes are equivalent. The summary
//! counts distinct states beside images, per point and in total. A point
//! whose images exceed the bound is enumerated over the prefixes of only the
//! pending lines something reads (the rest fully persisted), widening that
//! set when an image reads a new line; when those combinations fit the
//! bound, every recovery-visible state of the point has been explored.
//!
//! # Crashes inside recovery
//!
//! For a seeded sample of images ([`Options::recovery_crashes`]) the
//! recovery itself is crashed at each of its fences and the result recovered
//! and checked again (`recrash.rs`).

pub mod conformance;
pub mod error;
pub mod expect;
pub mod explore;
pub mod images;
pub mod layout;
pub mod load;
pub mod options;
pub mod paths;
pub mod persist;
pub mod points;
pub mod print;
pub mod report;
pub mod target;

mod check;
mod image;
mod recrash;
mod sequence;
mod worker;

pub use error::CrashError;
pub use explore::explore;
pub use load::CrashTrace;
pub use options::Options;
pub use report::{PathCoverage, PointCoverage, Progress, RecoveryCrash, StoreInfo, Summary, Violation};
pub use target::{target_among, target_for, CrashTarget, Recovered};
