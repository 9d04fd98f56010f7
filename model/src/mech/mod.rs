//! Mechanisms that persistent-memory allocators share, free of any one
//! allocator's policy: NVAlloc uses all of them, and the LLFree-, Makalu- and
//! Metall-style allocators reuse what fits.
//!
//! * [`sizeclass`] — jemalloc-style size classes over a cache-line quantum.
//! * [`stripe`] — the interleaved block → bit mapping of bit stripes.
//! * [`bitset`] — a multi-layer bitset in DRAM (Metall's), first free slot in one word per layer.
//! * [`pbitmap`] — a persistent bitmap through that mapping (CAS updates).
//! * [`wal`] — a per-thread redo WAL of `{op, target, dest}` entries, with
//!   sequential or interleaved slot order.
//! * [`record`] — the 8-byte extent record (size, address, type).
//! * [`bklog`] — the log-structured bookkeeping of extent records, with
//!   tombstones, fast and slow GC.
//! * [`exthdr`] — in-place extent headers per chunk (the baseline).
//! * [`regions`] — keeps the trace's region table tiling a changing layout.
//! * [`undo`] — a versioned undo log for failure-atomic core-metadata updates
//!   (Makalu's: entries persisted synchronously, a section's lines flushed at commit).
//! * [`mark`] — the conservative mark from the persistent roots of a recovery-time GC.
//! * [`dirty`] — eventual visibility: a direct-mapped table of dirty lines flushed lazily.
//! * [`lock`] — a lock of the modelled system whose taking and letting go the trace records.

pub mod bitset;
pub mod bklog;
pub mod dirty;
pub mod exthdr;
pub mod lock;
pub mod mark;
pub mod pbitmap;
pub mod record;
pub mod regions;
pub mod sizeclass;
pub mod stripe;
pub mod undo;
pub mod wal;
