//! Crafted bad files: each gives one clear error naming the file, the byte offset
//! and the problem — never a panic, never silent garbage.

use crate::common;

use common::*;
use pmsim_traces::*;

fn sample(values: bool) -> Vec<u8> {
    let mut events = Vec::new();
    for i in 0..3000u64 {
        let addr = 0x1000 + (i * 72) % 8192;
        events.push((i as u32 % 3, OwnedEvent::Store { addr, size: 8, value: values.then(|| vec![i as u8; 8]) }));
        events.push((i as u32 % 3, OwnedEvent::Flush { kind: FlushKind::Clwb, line: addr & !63 }));
        if i % 4 == 0 {
            events.push((i as u32 % 3, OwnedEvent::Fence { kind: FenceKind::Sfence }));
        }
    }
    write_all(&events, &WriterOptions { values, block_size: 2048, ..Default::default() })
}

fn err(bytes: &[u8]) -> TraceError {
    read_all(bytes).expect_err("a damaged trace must not read cleanly")
}

/// Offset of the first block header (just after the preamble).
fn first_block(bytes: &[u8]) -> usize {
    let hlen = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    16 + hlen + 4
}

#[test]
fn wrong_magic() {
    let mut b = sample(false);
    b[1] = b'X';
    let e = err(&b);
    assert_eq!(e.kind, ErrorKind::BadMagic);
    assert_eq!(e.to_string(), "mem.pmt: byte 0: not a pmsim trace (bad magic)");
    let e = err(b"hello");
    assert_eq!(e.kind, ErrorKind::BadMagic);
}

#[test]
fn newer_version() {
    let mut b = sample(false);
    b[8] = 7;
    let e = err(&b);
    assert_eq!(e.kind, ErrorKind::NewerVersion);
    assert_eq!(e.offset, 8);
    assert!(e.to_string().contains("format version 7 is newer than this pmsim reads (3)"), "{e}");
}

#[test]
fn truncated_anywhere() {
    let b = sample(true);
    // Every cut point gives Truncated (or BadMagic for the first 8 bytes), at an offset within the file.
    for cut in (0..b.len()).step_by(97).chain([b.len() - 1, b.len() - 40, first_block(&b)]) {
        let e = err(&b[..cut]);
        if cut < 8 {
            assert_eq!(e.kind, ErrorKind::BadMagic, "cut {cut}: {e}");
        } else {
            assert_eq!(e.kind, ErrorKind::Truncated, "cut {cut}: {e}");
            assert!(e.offset <= cut as u64, "cut {cut}: {e}");
            assert!(e.problem.starts_with("truncated"), "{e}");
        }
    }
}

#[test]
fn missing_end_block_names_the_writer() {
    let b = sample(false);
    let e = err(&b[..b.len() - 40]);
    assert_eq!(e.kind, ErrorKind::Truncated);
    assert_eq!(e.offset as usize, b.len() - 40);
    assert!(e.problem.contains("without an end-of-trace block"), "{e}");
}

#[test]
fn every_flipped_byte_is_caught() {
    // Flip one bit anywhere: the header CRC, a block CRC, a marker or a length check
    // must catch it. (The JSON header and every payload byte are covered by CRCs.)
    let b = sample(false);
    for pos in (0..b.len()).step_by(13) {
        let mut c = b.clone();
        c[pos] ^= 0x10;
        let e = err(&c);
        assert!(
            matches!(e.kind, ErrorKind::Corrupt | ErrorKind::BadMagic | ErrorKind::NewerVersion | ErrorKind::Truncated),
            "{e}"
        );
        assert!(e.offset <= b.len() as u64, "pos {pos}: {e}");
    }
}

#[test]
fn checksum_mismatch_points_at_the_block() {
    let mut b = sample(false);
    let at = first_block(&b);
    b[at + 30] ^= 0xff;
    let e = err(&b);
    assert_eq!(e.kind, ErrorKind::Corrupt);
    assert_eq!(e.offset as usize, at);
    assert!(e.problem.contains("block checksum mismatch"), "{e}");
}

/// Rewrites a block's payload and fixes its CRC, to reach the record decoder.
fn with_payload(b: &[u8], payload: &[u8], events: u32) -> Vec<u8> {
    let at = first_block(b);
    let mut out = b[..at].to_vec();
    let mut h = [0u8; 24];
    h[..4].copy_from_slice(b"PMTB");
    h[8..12].copy_from_slice(&events.to_le_bytes());
    h[12..16].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    h[16..20].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&h[..20]);
    crc.update(payload);
    h[20..].copy_from_slice(&crc.finalize().to_le_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
    out
}

#[test]
fn bad_records_are_located() {
    let b = sample(false);
    let at = first_block(&b);
    // fence, then a reserved record kind 14
    let e = err(&with_payload(&b, &[0x04, 0x0e], 2));
    assert_eq!(e.kind, ErrorKind::Corrupt);
    assert_eq!(e.offset as usize, at + 24 + 1);
    assert!(e.problem.contains("unknown record kind 14"), "{e}");
    // a store whose address delta runs off the end
    let e = err(&with_payload(&b, &[0x30, 0x80, 0x80], 1));
    assert!(e.problem.contains("address delta runs past the end"), "{e}");
    // a region name that is not UTF-8
    let e = err(&with_payload(&b, &[0x08, 1, 0, 0, 2, 0xff, 0xfe], 1));
    assert!(e.problem.contains("not UTF-8"), "{e}");
    // a block that holds fewer events than its header says
    let e = err(&with_payload(&b, &[0x04], 2));
    assert!(e.problem.contains("announces 2 events but holds 1"), "{e}");
}

#[test]
fn data_after_the_end_is_refused() {
    let mut b = sample(false);
    b.push(0);
    let e = err(&b);
    assert!(e.problem.contains("after the end-of-trace block"), "{e}");
}

#[test]
fn missing_file_is_an_error_not_a_panic() {
    let e = TraceReader::open("/nonexistent/x.pmt").err().unwrap();
    assert_eq!(e.kind, ErrorKind::Io);
    assert!(e.to_string().starts_with("/nonexistent/x.pmt: byte 0: cannot open"), "{e}");
}

#[test]
fn huge_lengths_do_not_allocate() {
    let mut b = sample(false);
    b[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    let e = err(&b);
    assert_eq!(e.offset, 12);
    assert!(e.problem.contains("exceeds 16 MiB"), "{e}");
}

mod never_panics {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        /// Random bytes after a valid preamble reach the block and record decoders.
        #[test]
        fn arbitrary_tails(tail in proptest::collection::vec(any::<u8>(), 0..600)) {
            let b = sample(false);
            let mut c = b[..first_block(&b)].to_vec();
            c.extend_from_slice(&tail);
            let _ = read_all(&c);
        }

        /// Arbitrary payloads with a valid block header and CRC reach the record decoder.
        #[test]
        fn arbitrary_payloads(payload in proptest::collection::vec(any::<u8>(), 0..300), events in 0u32..50) {
            let b = sample(true);
            let _ = read_all(&with_payload(&b, &payload, events));
            let b = sample(false);
            let _ = read_all(&with_payload(&b, &payload, events));
        }

        /// A few random byte edits of a valid trace.
        #[test]
        fn mutations(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4)) {
            let mut b = sample(false);
            for (pos, v) in edits {
                let n = b.len();
                b[pos % n] = v;
            }
            let _ = read_all(&b);
        }
    }
}

/// The decoder reads most records on a fast path (one bounds check, the tag's
/// shape from a table) and the rest, and every bad one, on a careful path; the
/// iterator of a block uses the careful path alone. On any payload both must
/// give the same events and the same error at the same byte.
mod fast_path_equals_careful_path {
    use pmsim_traces::*;
    use proptest::prelude::*;

    type Outcome = (Vec<(u64, u32, OwnedEvent)>, Option<decode::DecodeError>);

    fn fast(p: &[u8], values: bool) -> Outcome {
        let mut evs = Vec::new();
        let r = BlockDecoder::new(p, values, 7).decode_all(|r| evs.push((r.index, r.tid, r.event.to_owned())));
        (evs, r.err())
    }

    fn careful(p: &[u8], values: bool) -> Outcome {
        let mut evs = Vec::new();
        for r in BlockDecoder::new(p, values, 7) {
            match r {
                Ok(r) => evs.push((r.index, r.tid, r.event.to_owned())),
                Err(e) => return (evs, Some(e)),
            }
        }
        (evs, None)
    }

    /// Bytes that are mostly records: tags of every kind (hot shapes most
    /// often), one- to ten-byte varints, and now and then anything at all.
    fn payload() -> impl Strategy<Value = Vec<u8>> {
        let tag = prop_oneof![
            4 => (0u8..16).prop_map(|x| x << 4),           // stores
            3 => (0u8..16).prop_map(|x| x << 4 | 3),       // flushes
            2 => (0u8..16).prop_map(|x| x << 4 | 4),       // fences (bit 2: with a site)
            2 => (0u8..16).prop_map(|x| x << 4 | 5),       // thread switches
            2 => (0u8..16).prop_map(|x| x << 4 | 10),      // op begins
            2 => (0u8..16).prop_map(|x| x << 4 | 11),      // op ends
            1 => any::<u8>(),
        ];
        let varint = (1usize..11, any::<u64>()).prop_map(|(n, x)| {
            let mut v: Vec<u8> = (0..n).map(|i| (x >> (7 * i)) as u8 | 0x80).collect();
            v[n - 1] &= 0x7f;
            v
        });
        let piece = prop_oneof![
            3 => tag.prop_map(|t| vec![t]),
            2 => varint,
            1 => proptest::collection::vec(any::<u8>(), 0..3),
        ];
        proptest::collection::vec(piece, 0..120).prop_map(|v| v.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn same_events_and_same_error(p in payload(), values in any::<bool>()) {
            prop_assert_eq!(fast(&p, values), careful(&p, values));
        }
    }
}
