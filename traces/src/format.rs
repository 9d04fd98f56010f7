//! Constants of the on-disk layout; FORMAT.md is their prose.

/// `\x89PMT\r\n\x1a\n`: the high byte and the line endings catch text-mode mangling.
pub const MAGIC: [u8; 8] = [0x89, b'P', b'M', b'T', b'\r', b'\n', 0x1a, b'\n'];
/// The format version this crate writes and the newest it reads. Version 2
/// added code sites (SITE records and site-table blocks); a version-1 trace
/// reads as one whose flushes and fences are all at the unknown site 0.
/// Version 3 writes a changed site inside the flush or fence record
/// ([`X_SITE`]) instead of a SITE record before it: one record to decode
/// instead of two where, as in most allocators, nearly every flush and fence
/// comes from another line than the one before. SITE records still read.
pub const VERSION: u16 = 3;
/// Preamble flag: stores carry their value bytes.
pub const FLAG_VALUES: u16 = 1;
/// Marker at the start of every block.
pub const BLOCK_MARKER: [u8; 4] = *b"PMTB";
pub const BLOCK_HEADER_LEN: usize = 24;
/// Upper bound on header and block sizes, so corrupt lengths never cause huge allocations.
pub const MAX_LEN: usize = 16 << 20;
/// Raw payload size at which writers cut a block.
pub const DEFAULT_BLOCK_SIZE: usize = 128 << 10;

pub const CODEC_RAW: u8 = 0;
pub const CODEC_ZSTD: u8 = 1;
/// A block of site definitions (raw, not a data block: no events, not counted
/// by the end block).
pub const CODEC_SITES: u8 = 2;
pub const CODEC_END: u8 = 255;

// Record kinds (low nibble of the tag byte).
pub const K_STORE: u8 = 0;
pub const K_NTSTORE: u8 = 1;
pub const K_LOAD: u8 = 2;
pub const K_FLUSH: u8 = 3;
pub const K_FENCE: u8 = 4;
pub const K_THREAD: u8 = 5;
pub const K_THREAD_START: u8 = 6;
pub const K_THREAD_END: u8 = 7;
pub const K_REGION_ADD: u8 = 8;
pub const K_REGION_REMOVE: u8 = 9;
pub const K_OP_BEGIN: u8 = 10;
pub const K_OP_END: u8 = 11;
pub const K_MARKER: u8 = 12;
/// Framing: the code site of the current thread's following flushes and fences.
pub const K_SITE: u8 = 13;

/// Tag bit 3 of accesses and flushes: the address equals the cursor.
pub const X_SAME: u8 = 8;
/// Tag bit 2 of flushes and fences (format version 3): the record sets the
/// code site, written as a varint right after the tag, before anything else.
pub const X_SITE: u8 = 4;
/// The flush or fence kind in the other bits of the tag's `x` (codes 0-2;
/// 3 is reserved).
pub const X_KIND: u8 = 3;
/// Size code meaning "the size follows as a varint".
pub const SIZE_VARINT: u8 = 7;
/// Bytes in a cache line, the unit of flushes.
pub const LINE_BYTES: u64 = 64;
/// Largest thread id the format carries.
pub const MAX_TID: u32 = 65535;
