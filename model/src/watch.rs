//! Which bytes of a few chosen cache lines a run reads before it writes them.
//!
//! The crash explorer watches the lines that still have not-yet-durable
//! stores at a crash point: the images of that point differ only there. A
//! recovery run on one image (and the checks after it) reads some of those
//! bytes; any other image that agrees with it on exactly those bytes makes
//! the recovery take the same path and end in the same state. So the bytes a
//! run reads *from the image* (before it overwrote them itself) name the
//! recovery-visible state of the image, and the lines it reads tell which
//! pending lines matter at all.
//!
//! A watch may also *record* the run's persistence events (stores with
//! their bytes, flushes, fences) in program order, with heap offsets: the
//! explorer crashes a recovery at each of its fences from that record.
//!
//! A [`Heap`](crate::Heap) carries an optional watch
//! ([`Heap::set_watch`](crate::Heap::set_watch)); every [`Pm`](crate::Pm)
//! made from that heap hands it to its thread handles, whose loads and stores
//! report to it. Unwatched handles pay one null test per access.

use std::sync::Mutex;

/// Per watched line: the bytes read before being written, and the bytes
/// written (one bit per byte of the 64-byte line).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LineAccess {
    pub read: u64,
    pub written: u64,
}

/// A persistence event of a recorded run (heap offsets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// A machine store of `len` bytes at `off`, its bytes at `value` in
    /// [`Recording::values`]; `nt` for a non-temporal store.
    Store { off: u64, len: u32, value: u32, nt: bool },
    /// A flush of the line at `line` (any flush instruction: the record
    /// treats it as unordered, durable at the next fence).
    Flush { line: u64 },
    /// A fence (or a locked read-modify-write).
    Fence,
}

/// What a recording watch saw, in program order (one thread).
#[derive(Clone, Debug, Default)]
pub struct Recording {
    pub events: Vec<Recorded>,
    pub values: Vec<u8>,
}

/// The accesses to a set of watched lines (see the module documentation).
///
/// An access to a page that holds no watched line costs one bit test and no
/// lock (recovery reads much more than the few lines a crash point leaves
/// pending); one that does looks its lines up by binary search. A watch is
/// reused for every image of a crash point: [`AccessWatch::reset`] forgets
/// the accesses of the last one in time proportional to what it touched.
#[derive(Debug, Default)]
pub struct AccessWatch {
    /// The watched lines, by offset.
    lines: Vec<u64>,
    /// One bit per 4 KiB page holding a watched line.
    pages: Vec<u64>,
    acc: Mutex<Accesses>,
    recording: Option<Mutex<Recording>>,
}

/// The accesses so far, per watched line, and which lines have any.
#[derive(Debug, Default)]
struct Accesses {
    lines: Vec<LineAccess>,
    touched: Vec<u32>,
}

/// The bits of `[off, off + len)` within the line at `line`.
fn mask(line: u64, off: u64, len: u64) -> u64 {
    let a = off.max(line) - line;
    let b = (off + len).min(line + 64) - line;
    if b - a == 64 {
        u64::MAX
    } else {
        ((1u64 << (b - a)) - 1) << a
    }
}

const PAGE_SHIFT: u32 = 12;

impl AccessWatch {
    /// Watches the lines at the heap offsets `lines` (multiples of 64).
    pub fn new(lines: impl IntoIterator<Item = u64>) -> AccessWatch {
        let mut lines: Vec<u64> = lines.into_iter().map(|l| l & !63).collect();
        lines.sort_unstable();
        lines.dedup();
        let npages = lines.last().map_or(0, |&l| (l >> PAGE_SHIFT) as usize + 1);
        let mut pages = vec![0u64; npages.div_ceil(64)];
        for &l in &lines {
            let p = (l >> PAGE_SHIFT) as usize;
            pages[p / 64] |= 1 << (p % 64);
        }
        let acc = Accesses { lines: vec![LineAccess::default(); lines.len()], touched: Vec::new() };
        AccessWatch { lines, pages, acc: Mutex::new(acc), recording: None }
    }

    /// A watch that also records every store, flush and fence.
    pub fn recording(lines: impl IntoIterator<Item = u64>) -> AccessWatch {
        AccessWatch { recording: Some(Mutex::default()), ..AccessWatch::new(lines) }
    }

    /// Forgets every access so far (and the recording), for the next run.
    pub fn reset(&self) {
        let mut acc = self.acc.lock().unwrap_or_else(|e| e.into_inner());
        let Accesses { lines, touched } = &mut *acc;
        for &i in touched.iter() {
            lines[i as usize] = LineAccess::default();
        }
        touched.clear();
        if let Some(r) = &self.recording {
            *r.lock().unwrap_or_else(|e| e.into_inner()) = Recording::default();
        }
    }

    /// A machine store of `bytes` at `off` (after [`AccessWatch::write`]).
    pub fn store(&self, off: u64, bytes: &[u8], nt: bool) {
        if let Some(r) = &self.recording {
            let mut r = r.lock().unwrap_or_else(|e| e.into_inner());
            let value = r.values.len() as u32;
            r.values.extend_from_slice(bytes);
            r.events.push(Recorded::Store { off, len: bytes.len() as u32, value, nt });
        }
    }

    /// A flush of the line holding `off`.
    pub fn flush(&self, off: u64) {
        if let Some(r) = &self.recording {
            r.lock().unwrap_or_else(|e| e.into_inner()).events.push(Recorded::Flush { line: off & !63 });
        }
    }

    /// A fence.
    pub fn fence(&self) {
        if let Some(r) = &self.recording {
            r.lock().unwrap_or_else(|e| e.into_inner()).events.push(Recorded::Fence);
        }
    }

    /// The events recorded so far (empty unless made by [`AccessWatch::recording`]).
    pub fn recorded(&self) -> Recording {
        self.recording.as_ref().map(|r| r.lock().unwrap_or_else(|e| e.into_inner()).clone()).unwrap_or_default()
    }

    /// Whether `[off, off + len)` touches a page holding a watched line.
    #[inline]
    fn near(&self, off: u64, len: u64) -> bool {
        let first = (off >> PAGE_SHIFT) as usize;
        let last = (((off + len - 1) >> PAGE_SHIFT) as usize).min(self.pages.len() * 64 - 1);
        (first..=last).any(|p| self.pages[p / 64] >> (p % 64) & 1 == 1)
    }

    /// Applies `f` to every watched line `[off, off + len)` touches, with
    /// the bits it covers.
    #[inline]
    fn each(&self, off: u64, len: u64, mut f: impl FnMut(&mut LineAccess, u64)) {
        if len == 0 || (off >> PAGE_SHIFT) as usize >= self.pages.len() * 64 || !self.near(off, len) {
            return;
        }
        let mut acc = self.acc.lock().unwrap_or_else(|e| e.into_inner());
        let Accesses { lines, touched } = &mut *acc;
        let from = self.lines.partition_point(|&l| l < off & !63);
        for (i, &line) in self.lines.iter().enumerate().skip(from).take_while(|&(_, &l)| l < off + len) {
            let a = &mut lines[i];
            if *a == LineAccess::default() {
                touched.push(i as u32);
            }
            f(a, mask(line, off, len));
            if *a == LineAccess::default() {
                touched.pop();
            }
        }
    }

    /// A load of `[off, off + len)`: the bytes not written before count as read.
    #[inline]
    pub fn read(&self, off: u64, len: u64) {
        self.each(off, len, |a, m| a.read |= m & !a.written);
    }

    /// A store to `[off, off + len)`.
    #[inline]
    pub fn write(&self, off: u64, len: u64) {
        self.each(off, len, |a, m| a.written |= m);
    }

    /// A comparison against the image's bytes of `[off, off + len)` taken
    /// before the run (the explorer's check that recovery kept an object's
    /// contents): of those bytes, the ones the run wrote depend on what the
    /// image held, so they count as read.
    pub fn compared(&self, off: u64, len: u64) {
        self.each(off, len, |a, m| a.read |= m & a.written);
    }

    /// Every watched line with its accesses, by offset.
    pub fn lines(&self) -> Vec<(u64, LineAccess)> {
        let acc = self.acc.lock().unwrap_or_else(|e| e.into_inner());
        self.lines.iter().copied().zip(acc.lines.iter().copied()).collect()
    }

    /// The watched lines the run accessed: (index among the watched lines,
    /// offset, accesses), by offset.
    pub fn touched(&self) -> Vec<(usize, u64, LineAccess)> {
        let acc = self.acc.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<(usize, u64, LineAccess)> =
            acc.touched.iter().map(|&i| (i as usize, self.lines[i as usize], acc.lines[i as usize])).collect();
        v.sort_unstable_by_key(|t| t.0);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_count_until_the_run_writes_the_byte_itself() {
        let w = AccessWatch::new([64, 192]);
        w.read(60, 8); // bytes 60..64 of an unwatched line, 64..68 of a watched one
        w.write(70, 2);
        w.read(68, 8); // 70, 71 were written first
        w.read(0, 4096); // a large read covers both lines
        let l = w.lines();
        assert_eq!(l[0].0, 64);
        assert_eq!(l[0].1.written, 0b11 << 6);
        assert_eq!(l[0].1.read, !(0b11u64 << 6));
        assert_eq!(l[1].1.read, u64::MAX);
        w.compared(64, 64);
        assert_eq!(w.lines()[0].1.read, u64::MAX);
        let t = w.touched();
        assert_eq!(t.iter().map(|x| (x.0, x.1)).collect::<Vec<_>>(), [(0, 64), (1, 192)]);
        w.reset();
        assert!(w.touched().is_empty() && w.lines().iter().all(|l| l.1 == LineAccess::default()));
        w.read(1 << 20, 64); // past every watched page
        w.read(8192, 64); // a page without a watched line
        assert!(w.touched().is_empty());
        w.write(200, 1);
        assert_eq!(w.touched(), [(1, 192, LineAccess { read: 0, written: 1 << 8 })]);
    }
}
