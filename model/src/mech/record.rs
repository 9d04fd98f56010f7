//! The 8-byte record of an extent (NVAlloc §5.3): what the bookkeeping log
//! appends and what in-place extent headers hold, in one encoding.
//!
//! | bits | field |
//! |---|---|
//! | 0..26 | size in 4 KiB pages (up to 256 GiB) |
//! | 26..62 | address: heap offset >> 12 (36 bits, 4 KiB aligned, up to 256 TiB) |
//! | 62..64 | type: 0 normal extent, 1 slab, 2 tombstone, 3 reserved |
//!
//! The all-zero word is "no record": a real extent has at least one page, so
//! a zeroed log chunk or header slot never reads as one. A tombstone's low 62
//! bits name the log position of the record it deletes instead.

/// Extents are 4 KiB aligned and sized: the unit of a record.
pub const PAGE: u64 = 4096;
const SIZE_BITS: u32 = 26;
const ADDR_BITS: u32 = 36;
const TYPE_SHIFT: u32 = 62;
/// Largest extent a record can describe.
pub const MAX_EXTENT: u64 = ((1 << SIZE_BITS) - 1) * PAGE;
/// Largest address a record can describe (exclusive).
pub const ADDR_LIMIT: u64 = (1 << ADDR_BITS) * PAGE;

/// What an extent is used for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExtentKind {
    /// A large allocation handed to the user.
    Normal,
    /// A slab of small blocks (its header says which class).
    Slab,
}

/// A decoded 8-byte record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    Extent {
        kind: ExtentKind,
        addr: u64,
        size: u64,
    },
    /// Deletes the record at log position `target` (see the bookkeeping log).
    Tombstone {
        target: u64,
    },
}

impl Record {
    /// The word for this record.
    ///
    /// # Panics
    /// If an extent is not page aligned, empty, or beyond the encodable range.
    pub fn encode(self) -> u64 {
        match self {
            Record::Extent { kind, addr, size } => {
                assert!(
                    addr % PAGE == 0 && size % PAGE == 0 && size > 0,
                    "extent {addr:#x}+{size:#x} not page aligned"
                );
                assert!(size <= MAX_EXTENT && addr < ADDR_LIMIT, "extent {addr:#x}+{size:#x} beyond a record's range");
                let ty = match kind {
                    ExtentKind::Normal => 0,
                    ExtentKind::Slab => 1,
                };
                (ty << TYPE_SHIFT) | ((addr / PAGE) << SIZE_BITS) | (size / PAGE)
            }
            Record::Tombstone { target } => {
                assert!(target < 1 << TYPE_SHIFT, "tombstone target {target:#x} too large");
                2 << TYPE_SHIFT | target
            }
        }
    }

    /// The record in `w`, `None` for the empty word, or an error for a word no
    /// writer produces (type 3, or an extent of size 0).
    pub fn decode(w: u64) -> Result<Option<Record>, String> {
        if w == 0 {
            return Ok(None);
        }
        let payload = w & ((1 << TYPE_SHIFT) - 1);
        let extent = |kind| {
            let size = (payload & ((1 << SIZE_BITS) - 1)) * PAGE;
            let addr = (payload >> SIZE_BITS) * PAGE;
            if size == 0 {
                Err(format!("extent record {w:#018x} has size 0"))
            } else {
                Ok(Some(Record::Extent { kind, addr, size }))
            }
        };
        match w >> TYPE_SHIFT {
            0 => extent(ExtentKind::Normal),
            1 => extent(ExtentKind::Slab),
            2 => Ok(Some(Record::Tombstone { target: payload })),
            _ => Err(format!("record {w:#018x} has the reserved type 3")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for r in [
            Record::Extent { kind: ExtentKind::Normal, addr: 4096, size: 16384 },
            Record::Extent { kind: ExtentKind::Slab, addr: (1 << 40) + 65536, size: 65536 },
            Record::Extent { kind: ExtentKind::Normal, addr: ADDR_LIMIT - PAGE, size: MAX_EXTENT },
            Record::Tombstone { target: 12345 << 7 | 127 },
        ] {
            let w = r.encode();
            assert_ne!(w, 0);
            assert_eq!(Record::decode(w), Ok(Some(r)));
        }
        assert_eq!(Record::decode(0), Ok(None));
        assert!(Record::decode(3 << 62).is_err());
        assert!(Record::decode(1 << 26).is_err(), "size 0");
    }
}
