//! Digest of a request's parameter values: equal for the same values in the
//! same order, and never reversible into the values by reading the report.
//! (A short value can still be guessed by hashing candidates; the digest is
//! for telling repeats apart, not for protecting a four-digit PIN.)

use std::hash::{DefaultHasher, Hasher};

/// Order-sensitive hash of parameter values. `DefaultHasher::new()` is the
/// same in every run of one build, so digests compare across a capture and
/// between runs of the same binary.
#[derive(Clone)]
pub struct ParamDigest {
    hasher: DefaultHasher,
    values: u32,
}

impl Default for ParamDigest {
    fn default() -> Self {
        ParamDigest {
            hasher: DefaultHasher::new(),
            values: 0,
        }
    }
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

    fn of(values: &[&[u8]]) -> u64 {
        let mut d = ParamDigest::new();
        values.iter().for_each(|v| d.add(v));
        d.finish()
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
