//! The format of a trace's crash images: where an allocation may start and
//! where a program publishes its allocations (the words a `malloc_to` is
//! recognised by storing into).

use crate::error::CrashError;
use crate::load::{CrashTrace, Ev};
use crate::persist::write_piece;
use crate::target::CrashTarget;
use pmsim_model::family::ImageFormat;
use pmsim_model::heap::{Heap, HEADER_SIZE};
use pmsim_model::scratch::ScratchHeap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// What the explorer needs to know of the images' format.
#[derive(Clone, Debug)]
pub struct Layout {
    pub format: ImageFormat,
    /// Bytes before the first one an allocation may hold (a pmsim heap's
    /// header page; 0 in an allocator's own format, whose recovery says
    /// where its objects are).
    pub first: u64,
    /// Word ranges `(offset, bytes)` a program publishes allocations in
    /// besides other live blocks ([`CrashTarget::publication_roots`]).
    pub roots: Vec<(u64, u64)>,
}

impl Layout {
    /// A pmsim heap's: the header page, its root slots.
    pub fn pmsim_heap() -> Layout {
        let roots = vec![(Heap::root_offset(0), 8 * pmsim_model::heap::ROOT_SLOTS as u64)];
        Layout { format: ImageFormat::PmsimHeap, first: HEADER_SIZE, roots }
    }

    /// Whether `off` lies in a publication root.
    pub fn in_roots(&self, off: u64) -> bool {
        self.roots.iter().any(|&(o, n)| off >= o && off - o < n)
    }

    /// The layout of `tr`'s images under `target`. A pmsim heap's header is
    /// checked here, as `Heap::open` would, naming the user's image file;
    /// an allocator's own format gives its roots from the trace's last state
    /// (every store persisted), which a scratch file holds meanwhile.
    pub fn of(tr: &CrashTrace, target: &dyn CrashTarget) -> Result<Layout, CrashError> {
        let named = |m: String| CrashError(format!("{}: {m}", tr.image.display()));
        match target.image_format() {
            ImageFormat::PmsimHeap => {
                let mut page = vec![0u8; HEADER_SIZE.min(tr.heap_size) as usize];
                let f =
                    std::fs::File::open(&tr.image).map_err(|e| named(format!("cannot read the heap image: {e}")))?;
                std::os::unix::fs::FileExt::read_exact_at(&f, &mut page, 0)
                    .map_err(|e| named(format!("cannot read the heap image: {e}")))?;
                pmsim_model::heap::check_header(&page, tr.heap_size).map_err(named)?;
                let heap = Heap::open_copy(&tr.image).map_err(|e| CrashError(e.to_string()))?;
                let roots = target.publication_roots(&heap).map_err(named)?;
                Ok(Layout { roots, ..Layout::pmsim_heap() })
            }
            ImageFormat::Own => {
                let mut bytes =
                    std::fs::read(&tr.image).map_err(|e| named(format!("cannot read the heap image: {e}")))?;
                for e in &tr.events {
                    if let Ev::Store { piece, .. } = *e {
                        write_piece(tr, piece, &mut bytes);
                    }
                }
                static NEXT: AtomicU64 = AtomicU64::new(0);
                let scratch =
                    ScratchHeap::new(&format!("last-{}", NEXT.fetch_add(1, Ordering::Relaxed))).map_err(CrashError)?;
                std::fs::write(scratch.path(), &bytes)
                    .map_err(|e| CrashError(format!("{}: {e}", scratch.path().display())))?;
                drop(bytes);
                let heap = Heap::open_raw_copy(scratch.path()).map_err(|e| CrashError(e.to_string()))?;
                let roots =
                    target.publication_roots(&heap).map_err(|e| CrashError(format!("{}: {e}", tr.path.display())))?;
                Ok(Layout { format: ImageFormat::Own, first: 0, roots })
            }
        }
    }

    /// A private copy-on-write view of the image file at `path`.
    pub(crate) fn open(&self, path: &Path) -> Result<Heap, pmsim_model::HeapError> {
        match self.format {
            ImageFormat::PmsimHeap => Heap::open_copy(path),
            ImageFormat::Own => Heap::open_raw_copy(path),
        }
    }

    /// The offsets of the aligned words of the publication roots.
    pub fn root_words(&self) -> impl Iterator<Item = u64> + '_ {
        self.roots.iter().flat_map(|&(o, n)| ((o + 7) & !7..o + n).step_by(8).filter(move |w| w + 8 <= o + n))
    }
}
