//! LEB128 varints and zigzag deltas: the compact integer coding of records.

/// Appends `v` as an unsigned LEB128 varint.
#[inline(always)]
pub fn put(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// Maps a signed delta to an unsigned integer with small magnitudes kept small.
#[inline(always)]
pub const fn zigzag(d: i64) -> u64 {
    ((d << 1) ^ (d >> 63)) as u64
}

/// Inverse of [`zigzag`].
#[inline(always)]
pub const fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Why a varint could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarintError {
    /// The buffer ends inside the varint.
    Truncated,
    /// More than 10 bytes, or bits beyond 64.
    Overlong,
}

/// Reads a varint at `*pos`, advancing it.
#[inline(always)]
pub fn get(buf: &[u8], pos: &mut usize) -> Result<u64, VarintError> {
    // Fast path: one byte (most deltas and sizes).
    if let Some(&b) = buf.get(*pos) {
        if b < 0x80 {
            *pos += 1;
            return Ok(b as u64);
        }
    }
    let mut v: u64 = 0;
    let mut shift = 0u32;
    loop {
        let Some(&b) = buf.get(*pos) else { return Err(VarintError::Truncated) };
        *pos += 1;
        if shift == 63 && b > 1 {
            return Err(VarintError::Overlong);
        }
        v |= ((b & 0x7f) as u64) << shift;
        if b < 0x80 {
            return Ok(v);
        }
        shift += 7;
        if shift > 63 {
            return Err(VarintError::Overlong);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_edges() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX - 1, u64::MAX] {
            let mut b = Vec::new();
            put(&mut b, v);
            let mut p = 0;
            assert_eq!(get(&b, &mut p), Ok(v));
            assert_eq!(p, b.len());
        }
        for d in [0i64, 1, -1, 63, -64, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(d)), d);
        }
    }

    #[test]
    fn rejects_truncated_and_overlong() {
        let mut p = 0;
        assert_eq!(get(&[0x80, 0x80], &mut p), Err(VarintError::Truncated));
        let mut p = 0;
        assert_eq!(get(&[0xff; 11], &mut p), Err(VarintError::Overlong));
        let mut p = 0;
        let mut b = vec![0xffu8; 9];
        b.push(0x02);
        assert_eq!(get(&b, &mut p), Err(VarintError::Overlong));
    }
}
