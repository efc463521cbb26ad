//! The bytes of a run's own temporary files (the spilled events, the spilled rows): varints,
//! signed differences, whole-millisecond times. A leaf: the files live only as long as
//! the run, so these have no version; each file's layout is with its writer.

use crate::model::Millis;

/// Appends `n` as a LEB128 varint: seven bits a byte, the lowest first, the top bit set on
/// every byte but the last.
pub fn put_varint(buf: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        buf.push((n as u8) | 0x80);
        n >>= 7;
    }
    buf.push(n as u8);
}

/// Reads a varint [`put_varint`] wrote at `*at` in `bytes`, moving `*at` past it; `None`
/// when the bytes end first or it runs past 64 bits. Always inline: several a spilled row,
/// where a call costs more than the decoding.
#[inline(always)]
pub fn varint_at(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut n = 0u64;
    let mut shift = 0;
    loop {
        let byte = *bytes.get(*at)?;
        *at += 1;
        if shift > 63 {
            return None;
        }
        n |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(n);
        }
        shift += 7;
    }
}

/// A time as whole milliseconds, when it is one: the integer that gives back the very
/// same `f64` (bit for bit: not `-0.0`, not a NaN).
#[inline(always)]
pub fn whole_ms(t: Millis) -> Option<i64> {
    let n = t as i64;
    ((n as f64).to_bits() == t.to_bits()).then_some(n)
}

/// A signed difference as an unsigned number with its sign in the lowest bit, so that a
/// small difference either way takes one varint byte.
#[inline(always)]
pub fn zigzag(n: i64) -> u64 {
    ((n << 1) ^ (n >> 63)) as u64
}

/// The difference [`zigzag`] made `n` of.
#[inline(always)]
pub fn unzigzag(n: u64) -> i64 {
    (n >> 1) as i64 ^ -((n & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_differences_come_back() {
        let values = [0, 1, 127, 128, 16_383, 16_384, 1 << 21, u64::MAX];
        let mut bytes = Vec::new();
        values.iter().for_each(|&n| put_varint(&mut bytes, n));
        let mut at = 0;
        let back: Vec<u64> = values
            .iter()
            .map(|_| varint_at(&bytes, &mut at).unwrap())
            .collect();
        assert_eq!((back.as_slice(), at), (&values[..], bytes.len()));
        assert_eq!(varint_at(&[0x80, 0x80], &mut 0), None, "cut short");
        assert_eq!(varint_at(&[0xff; 11], &mut 0), None, "past 64 bits");
        for d in [0, 1, -1, 63, -64, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(d)), d);
        }
        assert!(zigzag(-64) < 0x80 && zigzag(63) < 0x80);
        assert_eq!(whole_ms(1_700_000_000_437.0), Some(1_700_000_000_437));
        for not_whole in [0.5, -0.0, f64::NAN, 1e300] {
            assert_eq!(whole_ms(not_whole), None, "{not_whole}");
        }
    }
}
