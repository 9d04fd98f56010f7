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
    // Next: up to eight bytes read as one word, without a loop (store address
    // deltas take two or three).
    if let Some(word) = buf.get(*pos..*pos + 8) {
        if let Some((x, n)) = from_word(u64::from_le_bytes(word.try_into().unwrap())) {
            *pos += n;
            return Ok(x);
        }
    }
    get_bytewise(buf, pos)
}

/// The varint at the start of `word` (eight bytes read little-endian) and its
/// length in bytes, or `None` if it is longer than eight bytes. No loop: up to
/// three bytes (nearly every address delta of a trace), each 7-bit group is
/// shifted into place; longer ones, the bytes up to the first without a
/// continuation bit have their groups packed together pairwise, then by
/// fours, then all.
#[inline(always)]
pub fn from_word(word: u64) -> Option<(u64, usize)> {
    let (g0, g1, g2) = (word & 0x7f, (word >> 1) & 0x3f80, (word >> 2) & 0x1f_c000);
    if word & 0x80 == 0 {
        return Some((g0, 1));
    }
    if word & 0x8000 == 0 {
        return Some((g0 | g1, 2));
    }
    if word & 0x80_0000 == 0 {
        return Some((g0 | g1 | g2, 3));
    }
    from_long_word(word)
}

/// [`from_word`] for four bytes and more.
#[inline(always)]
fn from_long_word(word: u64) -> Option<(u64, usize)> {
    let stops = !word & 0x8080_8080_8080_8080;
    if stops == 0 {
        return None;
    }
    let x = word & (stops ^ (stops - 1)) & 0x7f7f_7f7f_7f7f_7f7f;
    let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
    let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
    let x = (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4);
    Some((x, (stops.trailing_zeros() / 8 + 1) as usize))
}

/// The general case of [`get`]: near the end of the buffer, or more than
/// eight bytes.
#[inline(never)]
fn get_bytewise(buf: &[u8], pos: &mut usize) -> Result<u64, VarintError> {
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
    fn word_path_equals_bytewise() {
        // Every length from 1 to 10 bytes, at every distance from the end of
        // the buffer (so both paths run), and random bytes (errors included).
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = x >> (i % 64);
            let mut b = Vec::new();
            put(&mut b, v);
            b.resize(b.len() + (i % 12) as usize, 0xa5);
            let (mut p, mut q) = (0, 0);
            assert_eq!(get(&b, &mut p), Ok(v));
            assert_eq!(get_bytewise(&b, &mut q), Ok(v));
            assert_eq!(p, q);
            let junk = x.to_le_bytes();
            let junk = &junk[..(i % 9) as usize];
            let (mut p, mut q) = (0, 0);
            assert_eq!(get(junk, &mut p), get_bytewise(junk, &mut q));
            assert_eq!(p, q);
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
