//! One crash image, built over the point's *base*: a private copy-on-write
//! view of the trace's state with every store persisted, on which each line
//! that keeps fewer of its pending stores gets its durable bytes and the
//! prefix it keeps. The image is recovered and checked with every panic of
//! the allocator's code caught as a violation; then the copy reverts to the
//! base page by page ([`Heap::revert_copy`]): an image costs the lines it
//! varies and the pages its recovery touches, not the heap's size.

use crate::check::{check_image, Before, Context, Kept};
use crate::expect::Obj;
use crate::images::{Keep, Lines};
use crate::load::CrashTrace;
use crate::persist::write_piece;
use pmsim_model::family::CrashPoint;
use pmsim_model::heap::Heap;
use pmsim_model::intmap::IntMap;
use pmsim_model::watch::AccessWatch;
use std::cell::OnceCell;
use std::os::unix::fs::FileExt;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Writes the first `keep[i]` pending stores of each line `i` into `bytes`
/// (an image over the durable state).
pub(crate) fn apply_kept(tr: &CrashTrace, lines: &Lines, keep: &[usize], bytes: &mut [u8]) {
    for (i, &d) in keep.iter().enumerate() {
        for &p in &lines.pieces(i)[..d] {
            write_piece(tr, p, bytes);
        }
    }
}

/// The heap's bytes, writable (a private mapping of the caller's alone).
pub(crate) fn heap_bytes(heap: &mut Heap) -> &mut [u8] {
    // SAFETY: a private copy-on-write mapping that only this caller uses
    // while the slice (which borrows the heap mutably) lives.
    unsafe { std::slice::from_raw_parts_mut(heap.base(), heap.size() as usize) }
}

/// [`check_image`], with a panic of recovery or of the checks as the problem.
pub(crate) fn recover_and_check(
    heap: &Heap,
    watch: Option<&AccessWatch>,
    cx: &Context,
    at: &CrashPoint,
    objs: &[Obj],
    before: &mut dyn Before,
) -> Result<Kept, String> {
    catch_unwind(AssertUnwindSafe(|| check_image(heap, watch, cx, at, objs, before)))
        .unwrap_or_else(|p| Err(panic_message(p)))
}

/// The message of a caught panic.
fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    let m = p
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into());
    format!("recovery or check panicked: {m}")
}

/// The bytes of each pending line of a point with each prefix of its
/// stores (a line written many times over keeps many), made for a line when
/// an image first varies it.
pub(crate) struct Prefixes {
    made: Vec<OnceCell<Box<[[u8; 64]]>>>,
}

impl Prefixes {
    /// For `n` pending lines.
    pub(crate) fn new(n: usize) -> Prefixes {
        Prefixes { made: (0..n).map(|_| OnceCell::new()).collect() }
    }

    /// Line `i` of `lines` with its first 0, 1, … pending stores, over its
    /// durable bytes in `durable`.
    fn of(&self, tr: &CrashTrace, lines: &Lines, durable: &IntMap<u64, [u8; 64]>, i: usize) -> &[[u8; 64]] {
        self.made[i].get_or_init(|| {
            let off = lines.offsets[i];
            let mut b = durable[&off];
            let mut v = Vec::with_capacity(lines.pieces(i).len() + 1);
            v.push(b);
            for &p in lines.pieces(i) {
                let pc = &tr.pieces[p as usize];
                let at = (pc.off - off) as usize;
                b[at..at + pc.len as usize].copy_from_slice(tr.value(pc));
                v.push(b);
            }
            v.into_boxed_slice()
        })
    }
}

/// A point's images over its base: the pending stores, and the durable
/// bytes of each line that has any.
pub(crate) struct Overlay<'a> {
    pub(crate) tr: &'a CrashTrace,
    /// The base: every store persisted.
    pub(crate) base: &'a [u8],
    pub(crate) lines: &'a Lines,
    /// The durable bytes of each line with pending stores.
    pub(crate) durable: &'a IntMap<u64, [u8; 64]>,
    /// Each pending line with each prefix of its stores.
    pub(crate) prefixes: &'a Prefixes,
    /// The image: the lines that keep fewer stores.
    pub(crate) keep: &'a Keep,
    pub(crate) pages: &'a PageMap,
}

impl Overlay<'_> {
    /// Line `i` keeping `d` of its pending stores.
    pub(crate) fn line(&self, i: usize, d: usize) -> [u8; 64] {
        self.prefixes.of(self.tr, self.lines, self.durable, i)[d]
    }

    /// Line `i` as the image holds it.
    pub(crate) fn image_line(&self, i: usize) -> [u8; 64] {
        match self.keep.binary_search_by_key(&i, |k| k.0) {
            Ok(j) => self.line(i, self.keep[j].1),
            Err(_) => {
                let off = self.lines.offsets[i] as usize;
                self.base[off..off + 64].try_into().expect("a line")
            }
        }
    }

    /// Writes the image over `bytes` (a copy of the base).
    pub(crate) fn build(&self, bytes: &mut [u8]) {
        for &(i, d) in self.keep {
            let off = self.lines.offsets[i] as usize;
            bytes[off..off + 64].copy_from_slice(&self.line(i, d));
        }
    }

    /// `[off, off + len)` of the image before recovery.
    fn bytes(&self, off: u64, len: u64) -> Vec<u8> {
        let mut v = self.base[off as usize..(off + len) as usize].to_vec();
        let first = self.lines.offsets.partition_point(|&l| l + 64 <= off);
        for (i, &l) in self.lines.offsets.iter().enumerate().skip(first).take_while(|&(_, &l)| l < off + len) {
            if self.keep.binary_search_by_key(&i, |k| k.0).is_err() {
                continue;
            }
            let line = self.image_line(i);
            let (a, b) = (l.max(off), (l + 64).min(off + len));
            v[(a - off) as usize..(b - off) as usize].copy_from_slice(&line[(a - l) as usize..(b - l) as usize]);
        }
        v
    }
}

impl Before for Overlay<'_> {
    fn capture(&mut self, _: &Heap, _: &[Obj], _: &[usize]) {}

    /// The objects on a page recovery wrote (the kernel's page map says
    /// which pages of the private copy are copies now): their bytes before
    /// recovery are the base's with the image's lines.
    fn changed(&mut self, heap: &Heap, objs: &[Obj], wanted: &[usize]) -> Vec<Option<Vec<u8>>> {
        let (Some(lo), Some(hi)) =
            (wanted.iter().map(|&i| objs[i].off).min(), wanted.iter().map(|&i| objs[i].off + objs[i].size).max())
        else {
            return Vec::new();
        };
        let private = self.pages.private(heap, lo, hi - lo);
        wanted
            .iter()
            .map(|&i| {
                let o = &objs[i];
                let touched = match &private {
                    Some(p) => (o.off / PAGE..(o.off + o.size).div_ceil(PAGE)).any(|g| p[(g - lo / PAGE) as usize]),
                    None => true,
                };
                touched.then(|| self.bytes(o.off, o.size))
            })
            .collect()
    }
}

const PAGE: u64 = 4096;

/// The kernel's page map of this process (`/proc/self/pagemap`): which
/// pages of a private file mapping were copied on write. `None` where it
/// cannot be read (every page then counts as written).
pub(crate) struct PageMap(Option<std::fs::File>);

impl PageMap {
    pub(crate) fn open() -> PageMap {
        let f = std::fs::File::open("/proc/self/pagemap").ok();
        // A page size other than 4 KiB is not this map's.
        // SAFETY: sysconf reads a constant of the system.
        let ok = f.is_some() && unsafe { libc::sysconf(libc::_SC_PAGESIZE) } == PAGE as i64;
        PageMap(f.filter(|_| ok))
    }

    /// Per page of heap bytes `[off, off + len)` (from the page holding
    /// `off`): whether the private mapping holds a copy of it (or it was
    /// swapped out, which only a copy can be).
    pub(crate) fn private(&self, heap: &Heap, off: u64, len: u64) -> Option<Vec<bool>> {
        let f = self.0.as_ref()?;
        let first = (heap.base() as u64 + off) / PAGE;
        let n = ((heap.base() as u64 + off + len).div_ceil(PAGE) - first) as usize;
        let mut raw = vec![0u8; 8 * n];
        f.read_exact_at(&mut raw, first * 8).ok()?;
        let present_anon = |e: u64| (e >> 63 & 1 == 1 && e >> 61 & 1 == 0) || e >> 62 & 1 == 1;
        Some(raw.chunks(8).map(|c| present_anon(u64::from_le_bytes(c.try_into().expect("8 bytes")))).collect())
    }
}
