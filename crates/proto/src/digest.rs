//! Digest of a request's parameter values: equal for the same values in the
//! same order, and never reversible into the values by reading the report.
//! (A short value can still be guessed by hashing candidates; the digest is
//! for telling repeats apart, not for protecting a four-digit PIN.)

use std::hash::Hasher;

/// A byte-stream hash with fixed keys: the same for the same bytes however
/// they were split between writes (a value arrives in pieces, across
/// packets), and the same in every run. Eight bytes per multiply, where
/// SipHash (std's `DefaultHasher`) takes rounds per word: digests are taken
/// of every argument of every command. Not for hash tables an attacker
/// fills; for telling repeated values apart.
#[derive(Clone, Default)]
pub struct StreamHash {
    acc: u64,
    /// Bytes not yet a whole word, little-endian from bit 0.
    tail: u64,
    tail_len: u32,
    total: u64,
}

impl std::fmt::Debug for StreamHash {
    // What was hashed may be a value: not shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamHash").finish_non_exhaustive()
    }
}

/// Digits of π (as in SipHash's and foldhash's constants): fixed keys with
/// no structure of their own.
const K0: u64 = 0x243f_6a88_85a3_08d3;
const K1: u64 = 0x1319_8a2e_0370_7344;

/// The high and low halves of the 128-bit product folded together.
fn folded_multiply(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

impl StreamHash {
    #[inline]
    fn word(&mut self, w: u64) {
        self.acc = folded_multiply(self.acc ^ w ^ K0, K1);
    }

    /// `write` for bytes that fill the tail to a word or more.
    fn write_words(&mut self, mut bytes: &[u8]) {
        if self.tail_len > 0 {
            let take = (8 - self.tail_len as usize).min(bytes.len());
            self.tail |= load_le(&bytes[..take]) << (8 * self.tail_len);
            self.tail_len += take as u32;
            bytes = &bytes[take..];
            if self.tail_len < 8 {
                return;
            }
            let w = std::mem::take(&mut self.tail);
            self.tail_len = 0;
            self.word(w);
        }
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.word(u64::from_le_bytes(w.try_into().expect("8 bytes")));
        }
        self.tail = load_le(words.remainder());
        self.tail_len = words.remainder().len() as u32;
    }
}

impl Hasher for StreamHash {
    /// Inlined for bytes that stay in the tail (short values: most of
    /// them), a call for the rest.
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let n = bytes.len();
        self.total = self.total.wrapping_add(n as u64);
        if n + (self.tail_len as usize) < 8 {
            self.tail |= load_le(bytes) << (8 * self.tail_len);
            self.tail_len += n as u32;
            return;
        }
        self.write_words(bytes);
    }

    fn write_u8(&mut self, i: u8) {
        self.write(&[i]);
    }

    fn write_u32(&mut self, i: u32) {
        self.write(&i.to_le_bytes());
    }

    /// As `write(&i.to_le_bytes())`: the tail and the low bytes of `i`
    /// make one word, the high bytes the next tail, as long as it was.
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.total = self.total.wrapping_add(8);
        if self.tail_len == 0 {
            self.word(i);
            return;
        }
        let shift = 8 * self.tail_len;
        self.word(self.tail | (i << shift));
        self.tail = i >> (64 - shift);
    }

    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }

    fn finish(&self) -> u64 {
        // The tail is padded with zeros: the total length tells "a" from "a\0".
        let last = folded_multiply(self.acc ^ self.tail ^ K1, K0 ^ self.total);
        folded_multiply(last ^ (last >> 29), K1)
    }
}

/// Up to 8 bytes as a little-endian word, zero-padded. Two overlapping
/// loads (or three single bytes) instead of a copy of variable length,
/// which is a call to memcpy per value.
#[inline]
fn load_le(bytes: &[u8]) -> u64 {
    let n = bytes.len();
    debug_assert!(n <= 8);
    let u32_at = |i: usize| {
        u64::from(u32::from_le_bytes(
            bytes[i..i + 4].try_into().expect("4 bytes"),
        ))
    };
    match n {
        0 => 0,
        1..=3 => {
            // Bytes 0, n/2 and n-1 cover every byte of 1 to 3.
            let at = |i: usize| u64::from(bytes[i]) << (8 * i);
            at(0) | at(n / 2) | at(n - 1)
        }
        _ => u32_at(0) | (u32_at(n - 4) << (8 * (n - 4))),
    }
}

/// Order-sensitive hash of parameter values, the same in every run, so
/// digests compare across a capture and between runs.
#[derive(Clone, Default)]
pub struct ParamDigest {
    hasher: StreamHash,
    values: u32,
}

impl ParamDigest {
    pub fn new() -> Self {
        Self::default()
    }

    /// One more value; its length is hashed too, so ("ab","c") ≠ ("a","bc").
    pub fn add(&mut self, value: &[u8]) {
        self.hasher.write_usize(value.len());
        self.hasher.write(value);
        self.values += 1;
    }

    /// A missing value (SQL NULL), distinct from an empty one.
    pub fn add_null(&mut self) {
        self.hasher.write_u8(0xff);
        self.hasher.write_usize(usize::MAX);
        self.values += 1;
    }

    /// Values added so far.
    pub fn len(&self) -> u32 {
        self.values
    }

    pub fn is_empty(&self) -> bool {
        self.values == 0
    }

    pub fn finish(&self) -> u64 {
        self.hasher.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_word_loads_as_its_bytes_zero_padded() {
        let bytes = [0x11u8, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88];
        for n in 0..=8 {
            let mut word = [0u8; 8];
            word[..n].copy_from_slice(&bytes[..n]);
            assert_eq!(load_le(&bytes[..n]), u64::from_le_bytes(word), "{n} bytes");
        }
    }

    fn of(values: &[&[u8]]) -> u64 {
        let mut d = ParamDigest::new();
        values.iter().for_each(|v| d.add(v));
        d.finish()
    }

    /// xorshift: pseudo-random bytes and split points.
    fn next(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    #[test]
    fn a_stream_hashes_the_same_however_it_is_split() {
        let mut x = 88172645463325252u64;
        for len in 0..200usize {
            let bytes: Vec<u8> = (0..len).map(|_| next(&mut x) as u8).collect();
            let mut whole = StreamHash::default();
            whole.write(&bytes);
            for _ in 0..5 {
                let mut pieces = StreamHash::default();
                let mut rest = &bytes[..];
                while !rest.is_empty() {
                    let n = (next(&mut x) as usize % 11).min(rest.len());
                    pieces.write(&rest[..n]);
                    rest = &rest[n..];
                }
                assert_eq!(pieces.finish(), whole.finish(), "{len} bytes");
            }
        }
    }

    #[test]
    fn a_number_hashes_as_its_little_endian_bytes_whatever_the_tail() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for tail in 0..=17usize {
            let before: Vec<u8> = (0..tail).map(|_| next(&mut x) as u8).collect();
            let n = next(&mut x);
            let mut as_number = StreamHash::default();
            as_number.write(&before);
            as_number.write_u64(n);
            as_number.write(b"after");
            let mut as_bytes = StreamHash::default();
            as_bytes.write(&before);
            as_bytes.write(&n.to_le_bytes());
            as_bytes.write(b"after");
            assert_eq!(as_number.finish(), as_bytes.finish(), "tail {tail}");
        }
    }

    #[test]
    fn distinct_short_streams_do_not_collide() {
        // Every value up to 3 bytes, trailing zeros included, and counters
        // as decimal text: no two alike.
        let mut seen = std::collections::HashSet::new();
        let mut n = 0;
        for len in 0..=3u32 {
            for v in 0..(1u64 << (8 * len)).min(1 << 20) {
                let mut h = StreamHash::default();
                h.write(&v.to_le_bytes()[..len as usize]);
                assert!(seen.insert(h.finish()), "{len} bytes: {v}");
                n += 1;
            }
        }
        for v in 0..200_000u64 {
            let mut h = StreamHash::default();
            h.write(format!("user:{v}").as_bytes());
            assert!(seen.insert(h.finish()), "user:{v}");
        }
        assert!(n > 1 << 20);
    }

    #[test]
    fn equal_values_equal_digests_and_boundaries_count() {
        assert_eq!(of(&[b"42", b"x"]), of(&[b"42", b"x"]));
        assert_ne!(of(&[b"42", b"x"]), of(&[b"43", b"x"]));
        assert_ne!(of(&[b"ab", b"c"]), of(&[b"a", b"bc"]));
        let mut null = ParamDigest::new();
        null.add_null();
        assert_ne!(null.finish(), of(&[b""]));
    }
}
