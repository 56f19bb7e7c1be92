//! Normalized requests: literals out, shape kept. SQL statements and cache
//! keys become the text reports show ("SELECT * FROM t WHERE id = ?",
//! "user:?:name"); the values removed go into a `ParamDigest`.
//!
//! Hand-written byte-level scanners (no regex, no recursion): one forward
//! pass whatever the input's size, output bounded by `MAX_NORMALIZED`, and
//! PostgreSQL's lexical rules (dollar quotes, nested comments, `E''`
//! strings) that generic obfuscators get wrong. The rules follow
//! pg_stat_statements, Sentry's and Datadog's SQL scrubbers; where they
//! differ, the choice made is documented on `sql` and `key`.

mod key;
mod lex;
mod memo;
mod sql;
#[cfg(test)]
mod tests;

use crate::digest::ParamDigest;

pub use memo::{SqlMemo, MAX_SHAPE, MEMO_SHAPES};
pub use sql::MAX_STATEMENTS;

/// Longest normalized text kept; longer ones are cut on a char boundary and end in "…".
pub const MAX_NORMALIZED: usize = 300;

/// A SQL statement with its literals replaced by `?`, `IN (?, ?)` lists and
/// `VALUES` rows collapsed to one, whitespace and keyword case normalized.
/// Each literal removed is added to `digest`.
///
/// - Literals → `?`, their source text (quotes included) added to `digest` in
///   order: numbers (`-1` too when the sign is unary), `'..'`, `E'..'`,
///   `B'..'`, `X'..'`, `N'..'`, `U&'..'`, `$$..$$`, `$tag$..$tag$`. Typed
///   literals keep their type: `DATE '2024-01-01'` → `DATE ?`.
/// - `NULL`, `TRUE`, `FALSE` stay words (they tell the query's shape, not
///   its values); bind parameters (`$1`, `?`, `:name`, `%s`, `%(name)s`) are
///   kept as written: they carry no value.
/// - Keywords of a fixed list are upper-cased; identifiers and `"quoted"`
///   identifiers are kept as written.
/// - Comments are removed (they may hold values, e.g. sqlcommenter tags).
///   Whitespace becomes one space where the input had any, none after `(`
///   `[` `::` or before `,` `)` `]` `::`, always one after `,`. A final `;`
///   is dropped.
/// - `IN (..)` and `ARRAY[..]` lists of values collapse to their first
///   element: `IN (?, ?)` → `IN (?)`, `IN ($1, $2)` → `IN ($1)`.
///   `VALUES (..), (..)` keeps its first row only.
/// - An unterminated string, quoted identifier or comment runs to the end:
///   the rest is one `?` (or removed). Output longer than `MAX_NORMALIZED`
///   bytes is cut and ends in "…"; the digest still sees every literal.
pub fn sql(statement: &str, digest: &mut ParamDigest) -> String {
    sql::normalize(statement, digest)
}

/// As `sql`, for MySQL's dialect: `"..."` is a string literal (→ `?`),
/// `` `name` `` an identifier kept as written, `\` escapes inside strings,
/// `#` starts a comment, `/* */` does not nest.
pub fn mysql(statement: &str, digest: &mut ParamDigest) -> String {
    sql::normalize_mysql(statement, digest)
}

/// The statements of a simple-query string ("BEGIN; SELECT 1; COMMIT"),
/// split on `;` outside strings, quoted identifiers, dollar quotes and comments.
/// Empty statements are dropped.
///
/// Pieces are trimmed; a piece of only comments counts as empty. After
/// `MAX_STATEMENTS - 1` pieces the rest comes back unsplit as the last one.
pub fn split_sql(text: &str) -> Vec<&str> {
    sql::split(text)
}

/// A cache key with its variable parts (ids, hashes, uuids, numbers) replaced
/// by `?`: "user:42:name" → "user:?:name". Each part removed goes into `digest`.
///
/// Parts are separated by any of `:` `/` `|` `#` `.` `,` `=` (kept in the
/// output; `-` and `_` join words: `sku-1234` is one part). A part is
/// variable when it has a digit (except version tags `v1`..`v99`), an `@`
/// or a space, is ≥ 8 hex letters, is a mixed-case token of ≥ 16 chars
/// with frequent case changes (base64), or is longer than 48 bytes. Empty
/// parts stay empty. A key that is not UTF-8 or has control characters is
/// one `?` (and one digest value).
pub fn key(key: &[u8], digest: &mut ParamDigest) -> String {
    key::normalize(key, digest)
}

/// Output text bounded to a little over `MAX_NORMALIZED` bytes however much
/// is pushed; `finish` cuts it to the cap with "…".
#[derive(Default)]
struct Capped {
    text: String,
    /// Something pushed was not kept.
    dropped: bool,
}

const ELLIPSIS: &str = "…";
/// Bytes a normalized text may outgrow its source by before it regrows: a
/// space after each comma written without one, the cut's "…".
const SLACK: usize = 16;

impl Capped {
    /// Room for the normalized form of `source_len` bytes, which is rarely
    /// longer (literals shrink to `?`, whitespace to one space): no regrowth
    /// token by token.
    fn for_source(source_len: usize) -> Self {
        Capped {
            text: String::with_capacity(source_len.min(MAX_NORMALIZED) + SLACK),
            dropped: false,
        }
    }

    fn push(&mut self, s: &str) {
        if self.dropped {
            return;
        }
        // One byte past the cap is enough to know the text must be cut.
        let room = (MAX_NORMALIZED + 1).saturating_sub(self.text.len());
        if s.len() <= room {
            self.text.push_str(s);
        } else {
            self.text
                .push_str(s.get(..floor_boundary(s, room)).unwrap_or_default());
            self.dropped = true;
        }
    }

    fn len(&self) -> usize {
        self.text.len()
    }

    fn dropped(&self) -> bool {
        self.dropped
    }

    /// Back to an earlier state (`len`, `dropped`) of this text.
    fn truncate(&mut self, len: usize, dropped: bool) {
        self.text.truncate(floor_boundary(&self.text, len));
        self.dropped = dropped;
    }

    fn finish(mut self) -> String {
        if self.dropped || self.text.len() > MAX_NORMALIZED {
            let keep = floor_boundary(&self.text, MAX_NORMALIZED - ELLIPSIS.len());
            self.text.truncate(keep);
            self.text.push_str(ELLIPSIS);
        }
        self.text
    }
}

/// The largest char boundary of `s` at or below `i`.
fn floor_boundary(s: &str, i: usize) -> usize {
    let mut i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}
