//! LLFree's lower level (paper §3.2.1): the allocation mechanism, and the only
//! persistent state besides the zone page.
//!
//! Every huge frame (2 MiB, 512 base frames) has
//!
//! * a **child entry** of 16 bits in the children array — the free counter
//!   `c_L` (bits 0–9, 0..=512) and the *allocated huge* flag `a` (bit 15);
//!   32 children share one 64 B line, one tree's worth;
//! * a **bit field** of 512 bits (one 64 B line): bit `i` set = base frame `i`
//!   taken.
//!
//! Every transition is one compare-and-swap of one word ([`PmThread::cas_u64`],
//! so the tracer records it); unless the heap runs in eADR mode, the line the
//! CAS changed is flushed and fenced right after it ([`Lower::commit`]).
//! The authoritative change of an operation is a single CAS on a single line:
//!
//! | action (paper Fig. 14, spec `specs/LLFreeSingleCAS`) | CASes, in order | authoritative |
//! |---|---|---|
//! | `get` base | child `c_L -= 1`; bit field: set one zero bit | the bit |
//! | `get` huge | child `(512, a=0) → (0, a=1)` | the child |
//! | `put` base | bit field: clear the bit; child `c_L += 1` | the bit |
//! | `put` huge | child `(0, a=1) → (512, a=0)` | the child |
//!
//! The counters are derived data: a crash between the two CASes of a base
//! operation leaves `c_L` off by one, and [`Lower::rebuild`] recomputes every
//! `c_L` from its bit field (paper §3.2.3). Orders 1–8 are not offered: a
//! `free` here takes no size, and without a per-frame order record (Linux
//! keeps it in `struct page`) the order of a multi-frame block could not be
//! told from the bit field after a restart; see [`super`].

use super::zone::{Zone, CHILD_FRAMES};
use super::Mutation;
use super::NAME;
use crate::error::AllocError;
use crate::mech::pbitmap::PBitmap;
use crate::mech::stripe::StripeMap;
use crate::pm::PmThread;

/// Children per tree (the paper's N): one 64 B line of child entries.
pub const TREE_CHILDREN: u64 = 32;

const COUNT_MASK: u16 = 0x3ff;
const HUGE_FLAG: u16 = 0x8000;

/// A child entry: free counter and huge flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Child(u16);

impl Child {
    pub const FREE: Child = Child(CHILD_FRAMES as u16);
    pub const HUGE: Child = Child(HUGE_FLAG);

    pub fn free(self) -> u32 {
        (self.0 & COUNT_MASK) as u32
    }

    pub fn huge(self) -> bool {
        self.0 & HUGE_FLAG != 0
    }

    fn with_free(n: u32) -> Child {
        Child(n as u16)
    }

    pub fn raw(self) -> u16 {
        self.0
    }
}

/// The lower level of one zone.
#[derive(Clone, Copy, Debug)]
pub struct Lower {
    pub zone: Zone,
    /// All bit fields as one sequential bitmap: frame `pfn` is bit `pfn`.
    bits: PBitmap,
    /// Flush and fence the line of every CAS (off under eADR).
    persist: bool,
    /// Drop the flush after a base allocation's decrement (checkers' test).
    mutation: Mutation,
}

impl Lower {
    pub fn new(zone: Zone, persist: bool) -> Lower {
        Lower { zone, bits: PBitmap::new(zone.bitfields_off, StripeMap::new(1)), persist, mutation: Mutation::None }
    }

    /// The same lower level with one flush removed (see [`Mutation::LlCounterFlush`]).
    pub fn with_mutation(self, mutation: Mutation) -> Lower {
        Lower { mutation, ..self }
    }

    /// Makes the line at `off` durable after a CAS on it (nothing under eADR,
    /// where the cache is in the persistence domain).
    #[inline(always)]
    pub fn commit(&self, t: &mut PmThread, off: u64) {
        if self.persist {
            t.flush(off);
            t.fence();
        }
    }

    /// The word holding child `c` and the lane's shift.
    #[inline(always)]
    fn child_word(&self, c: u64) -> (u64, u32) {
        (self.zone.children_off + (c / 4) * 8, (c % 4) as u32 * 16)
    }

    /// Child `c`'s entry (as the cache holds it).
    #[inline]
    pub fn child(&self, t: &PmThread, c: u64) -> Child {
        let (w, sh) = self.child_word(c);
        Child((t.load_u64(w) >> sh) as u16)
    }

    /// Changes child `c` by one CAS of its word to what `f` makes of the
    /// current entry (retried when another lane of the word changed), or
    /// gives up when `f` says `None`. Returns the entry it replaced.
    #[inline]
    fn update_child(&self, t: &mut PmThread, c: u64, f: impl Fn(Child) -> Option<Child>) -> Option<Child> {
        self.update_child_then(t, c, f, Lower::commit)
    }

    /// [`Lower::update_child`] with `then` in place of [`Lower::commit`].
    #[inline]
    fn update_child_then(
        &self,
        t: &mut PmThread,
        c: u64,
        f: impl Fn(Child) -> Option<Child>,
        then: impl Fn(&Lower, &mut PmThread, u64),
    ) -> Option<Child> {
        let (w, sh) = self.child_word(c);
        let mut cur = t.load_u64(w);
        loop {
            let old = Child((cur >> sh) as u16);
            let new = f(old)?;
            let next = (cur & !(0xffff << sh)) | (new.0 as u64) << sh;
            match t.cas_u64(w, cur, next) {
                Ok(_) => {
                    then(self, t, w);
                    return Some(old);
                }
                Err(now) => cur = now,
            }
        }
    }

    /// Writes every child entry as free (a fresh zone; bit fields are zero).
    pub fn format(&self, t: &mut PmThread) {
        let lane = Child::FREE.0 as u64;
        let full = lane | lane << 16 | lane << 32 | lane << 48;
        for c in (0..self.zone.nhuge).step_by(4) {
            let n = (self.zone.nhuge - c).min(4);
            let v = if n == 4 { full } else { full & ((1u64 << (16 * n)) - 1) };
            t.store_u64(self.child_word(c).0, v);
        }
        t.persist(self.zone.children_off, self.zone.children_bytes());
    }

    /// `get` of a base frame in child `c`: reserve one by decrementing
    /// `c_L` (prevents races for the last free frame), then take a zero bit
    /// of its bit field. `None` if the child has no free base frame.
    #[inline]
    pub fn get_base(&self, t: &mut PmThread, c: u64) -> Option<u64> {
        let dec = |e: Child| (!e.huge() && e.free() > 0).then(|| Child::with_free(e.free() - 1));
        if self.mutation == Mutation::LlCounterFlush {
            // The mutation: the fence stays, the flush goes.
            self.update_child_then(t, c, dec, |l, t, _| {
                if l.persist {
                    t.fence()
                }
            })?;
        } else {
            self.update_child(t, c, dec)?;
        }
        let first = c * CHILD_FRAMES as u64;
        // The decrement guarantees a zero bit: frees clear theirs before
        // incrementing, and nobody else may take ours.
        loop {
            for word in 0..8 {
                let (w, _) = self.bits.word_of((first + word * 64) as u32);
                let mut cur = t.load_u64(w);
                while cur != u64::MAX {
                    let bit = (!cur).trailing_zeros() as u64;
                    match t.cas_u64(w, cur, cur | 1 << bit) {
                        Ok(_) => {
                            self.commit(t, w);
                            return Some(first + word * 64 + bit);
                        }
                        Err(now) => cur = now,
                    }
                }
            }
        }
    }

    /// `get` of the huge frame of child `c`: `(512, a=0) → (0, a=1)`.
    #[inline]
    pub fn get_huge(&self, t: &mut PmThread, c: u64) -> bool {
        self.update_child(t, c, |e| (e == Child::FREE).then_some(Child::HUGE)).is_some()
    }

    /// `put` of base frame `pfn`: clear its bit, then `c_L += 1`.
    ///
    /// # Panics
    /// If the frame is not allocated (a double free).
    #[inline]
    pub fn put_base(&self, t: &mut PmThread, pfn: u64) {
        let c = pfn / CHILD_FRAMES as u64;
        let inc = |t: &mut PmThread| {
            self.update_child(t, c, |e| {
                assert!(!e.huge() && e.free() < CHILD_FRAMES, "child {c} counter {e:?} at a base free");
                Some(Child::with_free(e.free() + 1))
            });
        };
        // The mutation swaps the two steps.
        let swapped = self.mutation == Mutation::LlIncBeforeClear;
        if swapped {
            inc(t);
        }
        let was = self.bits.clear(t, pfn as u32);
        assert!(was, "free of frame {pfn}: not allocated (double free?)");
        self.commit(t, self.bits.line_of(pfn as u32));
        if !swapped {
            inc(t);
        }
    }

    /// `put` of the huge frame of child `c`: `(0, a=1) → (512, a=0)`.
    ///
    /// # Panics
    /// If the child is not an allocated huge frame.
    #[inline]
    pub fn put_huge(&self, t: &mut PmThread, c: u64) {
        let old = self.update_child(t, c, |e| (e == Child::HUGE).then_some(Child::FREE));
        assert!(old.is_some(), "free of huge frame {c}: not allocated as a huge frame");
    }

    /// Whether base frame `pfn`'s bit is set.
    pub fn is_taken(&self, t: &PmThread, pfn: u64) -> bool {
        self.bits.test(t, pfn as u32)
    }

    /// Taken base frames of child `c` (the popcount of its bit field).
    pub fn taken(&self, t: &PmThread, c: u64) -> u32 {
        let (w, _) = self.bits.word_of((c * CHILD_FRAMES as u64) as u32);
        (0..8).map(|k| t.load_u64(w + 8 * k).count_ones()).sum()
    }

    /// Checks every child against its bit field: a huge child has an empty
    /// bit field and `c_L = 0`; any other has `c_L = 512 − taken`. The first
    /// disagreement as an error (the recovery invariant).
    pub fn check(&self, t: &PmThread) -> Result<(), String> {
        for c in 0..self.zone.nhuge {
            let (e, taken) = (self.child(t, c), self.taken(t, c));
            let ok = if e.huge() { taken == 0 && e.free() == 0 } else { e.free() + taken == CHILD_FRAMES };
            if !ok {
                return Err(format!("child {c}: entry {:#06x} but {taken} bits set in its bit field", e.raw()));
            }
        }
        Ok(())
    }

    /// Recovery (paper §3.2.3): a child with the huge flag is authoritative
    /// (its bit field must be empty); for every other the bit field is, and
    /// `c_L` is recomputed from it. Rewritten entries are persisted. Returns
    /// how many children were corrected.
    ///
    /// A huge child with bits set is rejected, not cleared: with every CAS
    /// flushed and fenced ([`Lower::commit`]) no crash of this code leaves
    /// one (TLC, `specs/llfree-single-cas` model `huge_bits_kept_cas`), while
    /// the paper's flush-per-operation protocol can; see that spec's README.
    pub fn rebuild(&self, t: &mut PmThread) -> Result<u64, AllocError> {
        let mut fixed = 0;
        for c in 0..self.zone.nhuge {
            let e = self.child(t, c);
            let taken = self.taken(t, c);
            let want = if e.huge() {
                if taken != 0 {
                    return Err(AllocError::corrupt(
                        NAME,
                        format!("child {c} is an allocated huge frame but its bit field has {taken} bits set"),
                    ));
                }
                Child::HUGE
            } else {
                Child::with_free(CHILD_FRAMES - taken)
            };
            if want != e {
                let (w, sh) = self.child_word(c);
                let cur = t.load_u64(w);
                t.store_u64(w, (cur & !(0xffff << sh)) | (want.0 as u64) << sh);
                fixed += 1;
            }
        }
        t.persist(self.zone.children_off, self.zone.children_bytes());
        Ok(fixed)
    }
}
