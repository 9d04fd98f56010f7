//! The persistent zone of an LLFree heap (paper §3.2.3, Fig. 4): one zone
//! page with a magic, the size of the region and a startup/shutdown marker,
//! then the lower level — the children array and the bit fields — and the
//! frames it hands out. Nothing of the upper level is persistent.
//!
//! ```text
//! 0x0000  heap header page (pmsim's: magic, clean flag, root table)
//! 0x1000  zone page
//!           +0   magic "LLFREE01"
//!           +8   heap size in bytes
//!           +16  number of huge frames (= children = bit fields)
//!           +24  offset of the children array (2 B per child, 32 per line)
//!           +32  offset of the bit fields (64 B = 512 bits per child)
//!           +40  offset of the first frame (2 MiB aligned)
//!           +64  marker: 1 running, 2 clean shutdown (its own line)
//! 0x2000  children array, then bit fields, then frames up to the heap end
//! ```

use super::NAME;
use crate::error::AllocError;
use crate::heap::HEADER_SIZE;
use crate::pm::PmThread;

/// The zone page's offset.
pub const ZONE: u64 = HEADER_SIZE;
const ZONE_BYTES: u64 = 4096;
const MAGIC: u64 = u64::from_le_bytes(*b"LLFREE01");
const OFF_SIZE: u64 = 8;
const OFF_HUGE: u64 = 16;
const OFF_CHILDREN: u64 = 24;
const OFF_BITFIELDS: u64 = 32;
const OFF_FRAMES: u64 = 40;
const OFF_MARKER: u64 = 64;

/// A base frame (order 0).
pub const FRAME: u64 = 4096;
/// Base frames per huge frame (one child, one bit field).
pub const CHILD_FRAMES: u32 = 512;
/// A huge frame (order 9).
pub const HUGE: u64 = FRAME * CHILD_FRAMES as u64;

/// The startup/shutdown marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum Marker {
    /// Opened and not yet closed: seeing this at open means a crash.
    Running = 1,
    /// Closed by [`super::LlFree::close`]: the child counters can be trusted.
    Shutdown = 2,
}

/// Where the lower level lies in one heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Zone {
    pub heap_size: u64,
    /// Huge frames, i.e. children and bit fields.
    pub nhuge: u64,
    pub children_off: u64,
    pub bitfields_off: u64,
    pub frames_off: u64,
}

impl Zone {
    /// The layout for a heap of `heap_size` bytes: as many huge frames as
    /// fit after the metadata they need.
    pub fn plan(heap_size: u64) -> Result<Zone, AllocError> {
        let children_off = ZONE + ZONE_BYTES;
        let place = |n: u64| {
            let bitfields_off = children_off + (2 * n).next_multiple_of(64);
            let frames_off = (bitfields_off + 64 * n).next_multiple_of(HUGE);
            (bitfields_off, frames_off)
        };
        // Metadata for the upper bound of frames, then the frames that fit.
        let (_, frames_off) = place(heap_size / HUGE);
        let nhuge = heap_size.saturating_sub(frames_off) / HUGE;
        if nhuge == 0 {
            return Err(AllocError::too_small(
                NAME,
                format!(
                    "heap of {heap_size} bytes holds no 2 MiB frame after LLFree's metadata (needs at least {} bytes)",
                    frames_off + HUGE
                ),
            ));
        }
        let (bitfields_off, frames_off) = place(nhuge);
        Ok(Zone { heap_size, nhuge, children_off, bitfields_off, frames_off })
    }

    /// Base frames in the zone.
    pub fn frames(&self) -> u64 {
        self.nhuge * CHILD_FRAMES as u64
    }

    /// Bytes of the children array.
    pub fn children_bytes(&self) -> u64 {
        (2 * self.nhuge).next_multiple_of(64)
    }

    /// The heap offset of frame `pfn`.
    #[inline(always)]
    pub fn frame_off(&self, pfn: u64) -> u64 {
        self.frames_off + pfn * FRAME
    }

    /// The frame number of heap offset `off`, if it is a frame start.
    #[inline(always)]
    pub fn pfn_of(&self, off: u64) -> Option<u64> {
        let rel = off.checked_sub(self.frames_off)?;
        (rel % FRAME == 0 && rel / FRAME < self.frames()).then_some(rel / FRAME)
    }

    /// Writes a new zone page durably, the magic last (a crash before it
    /// leaves a heap that `open` refuses), marked running.
    pub fn write(&self, t: &mut PmThread) {
        t.store_u64(ZONE + OFF_SIZE, self.heap_size);
        t.store_u64(ZONE + OFF_HUGE, self.nhuge);
        t.store_u64(ZONE + OFF_CHILDREN, self.children_off);
        t.store_u64(ZONE + OFF_BITFIELDS, self.bitfields_off);
        t.store_u64(ZONE + OFF_FRAMES, self.frames_off);
        t.store_u64(ZONE + OFF_MARKER, Marker::Running as u64);
        t.persist(ZONE, 128);
        t.store_u64(ZONE, MAGIC);
        t.persist(ZONE, 8);
    }

    /// Reads and checks the zone page of an existing heap.
    pub fn read(t: &PmThread) -> Result<Zone, AllocError> {
        if t.heap_size() < ZONE + ZONE_BYTES || t.load_u64(ZONE) != MAGIC {
            return Err(AllocError::corrupt(NAME, "not an LLFree heap (no LLFree zone page)"));
        }
        let z = Zone {
            heap_size: t.load_u64(ZONE + OFF_SIZE),
            nhuge: t.load_u64(ZONE + OFF_HUGE),
            children_off: t.load_u64(ZONE + OFF_CHILDREN),
            bitfields_off: t.load_u64(ZONE + OFF_BITFIELDS),
            frames_off: t.load_u64(ZONE + OFF_FRAMES),
        };
        if z.heap_size != t.heap_size() {
            return Err(AllocError::corrupt(
                NAME,
                format!("zone page: size {} but the heap file has {}", z.heap_size, t.heap_size()),
            ));
        }
        let planned = Zone::plan(z.heap_size)?;
        if z != planned {
            return Err(AllocError::corrupt(
                NAME,
                format!("zone page: impossible layout {z:?} (expected {planned:?})"),
            ));
        }
        Ok(z)
    }

    pub fn marker(t: &PmThread) -> u64 {
        t.load_u64(ZONE + OFF_MARKER)
    }

    /// Sets the startup/shutdown marker durably.
    pub fn set_marker(t: &mut PmThread, m: Marker) {
        t.store_u64(ZONE + OFF_MARKER, m as u64);
        t.persist(ZONE + OFF_MARKER, 8);
    }
}
