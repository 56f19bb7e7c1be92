//! Statements that differ only in their numbers normalize alike: a driver
//! or pgbench sends the same few texts with other ids and amounts. Their
//! shape (the text with each number's digits replaced by one `#`) is
//! remembered with its normalized text and where its literals lie relative
//! to those numbers, so a statement of a known shape costs one byte scan
//! and the digest of its literals, not a lexer run.
//!
//! Only plain texts qualify (no string, quoted identifier, dollar quote or
//! comment; printable ASCII), whose every digit run that starts a token
//! ends before a non-word byte and lies inside a literal: the lexer then
//! makes the same tokens of every text of one shape, whatever the digits.

use super::sql;
use crate::digest::ParamDigest;
use std::collections::VecDeque;
use whyslow_model::SmolStr;

/// Shapes remembered per connection: pgbench's scripts have at most seven
/// statements, an ORM's hot path a few more.
pub const MEMO_SHAPES: usize = 8;
/// Longest shape remembered, so that a connection's memo stays within
/// MEMO_SHAPES × (this + a normalized text) bytes.
pub const MAX_SHAPE: usize = 512;

/// Where one literal lies: from `before` bytes ahead of number `first` to
/// `after` bytes past number `last`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Literal {
    first: u16,
    before: u16,
    last: u16,
    after: u16,
}

#[derive(Debug)]
struct Shape {
    shape: Vec<u8>,
    label: SmolStr,
    literals: Vec<Literal>,
}

/// Normalized statements by shape (see the module comment).
#[derive(Debug, Default)]
pub struct SqlMemo {
    shapes: VecDeque<Shape>,
    /// The shape and the numbers (start, end) of the statement looked at.
    shape: Vec<u8>,
    numbers: Vec<(usize, usize)>,
    /// MySQL's dialect (`normalize::mysql`): a plain text has no `#` or
    /// backtick either, and then lexes as in PostgreSQL's.
    mysql: bool,
    #[cfg(test)]
    hits: u64,
}

impl SqlMemo {
    /// A memo for MySQL's dialect: as `normalize::mysql`.
    pub fn mysql() -> Self {
        SqlMemo {
            mysql: true,
            ..SqlMemo::default()
        }
    }

    /// As `normalize::sql` (`normalize::mysql` for a `mysql` memo), with
    /// the same text and digest.
    pub fn sql(&mut self, statement: &str, digest: &mut ParamDigest) -> SmolStr {
        if !self.scan(statement) {
            return match self.mysql {
                true => sql::normalize_mysql(statement, digest).into(),
                false => sql::normalize(statement, digest).into(),
            };
        }
        let src = statement.as_bytes();
        if let Some(known) = self.shapes.iter().find(|s| s.shape == self.shape) {
            for l in &known.literals {
                // Same shape, so always there; a slip would be a wrong digest.
                digest.add(self.literal(l, src).unwrap_or_default());
            }
            #[cfg(test)]
            {
                self.hits += 1;
            }
            return known.label.clone();
        }
        let before = digest.clone();
        let mut ranges = Vec::new();
        let label = SmolStr::from(sql::normalize_recording(
            statement,
            digest,
            Some(&mut ranges),
        ));
        if let Some(literals) = self.literals(&ranges) {
            // Kept only when its literals give back the very same digest.
            let mut check = before;
            for l in &literals {
                check.add(self.literal(l, src).unwrap_or_default());
            }
            if check.finish() == digest.finish() && check.len() == digest.len() {
                if self.shapes.len() >= MEMO_SHAPES {
                    self.shapes.pop_back();
                }
                self.shapes.push_front(Shape {
                    shape: self.shape.clone(),
                    label: label.clone(),
                    literals,
                });
            }
        }
        label
    }

    /// The bytes of literal `l` in `src`, from the numbers found by `scan`.
    fn literal<'s>(&self, l: &Literal, src: &'s [u8]) -> Option<&'s [u8]> {
        let start = self.numbers.get(usize::from(l.first))?.0;
        let end = self.numbers.get(usize::from(l.last))?.1;
        let start = start.checked_sub(usize::from(l.before))?;
        src.get(start..end + usize::from(l.after))
    }

    /// Builds the statement's shape and finds its numbers, in one pass that
    /// also checks the text is plain; false when the statement does not
    /// qualify (shape and numbers are then partial).
    fn scan(&mut self, statement: &str) -> bool {
        self.shape.clear();
        self.numbers.clear();
        let src = statement.as_bytes();
        if src.len() > MAX_SHAPE {
            return false;
        }
        let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$';
        // Bytes from `copied` on are not in the shape yet: runs without a
        // number go in whole.
        let (mut i, mut copied) = (0, 0);
        while i < src.len() {
            if !sql::plain_at(src, i) || (self.mysql && matches!(src[i], b'#' | b'`')) {
                return false;
            }
            let b = src[i];
            let starts = b.is_ascii_digit() && (i == 0 || !word(src[i - 1]));
            if !starts {
                i += 1;
                continue;
            }
            let end = i + src[i..].iter().take_while(|d| d.is_ascii_digit()).count();
            if src.get(end).is_some_and(|&n| word(n)) {
                return false;
            }
            self.shape.extend_from_slice(&src[copied..i]);
            self.numbers.push((i, end));
            self.shape.push(b'#');
            i = end;
            copied = end;
        }
        self.shape.extend_from_slice(&src[copied..]);
        self.numbers.len() <= usize::from(u16::MAX)
    }

    /// Each literal of `ranges` (byte ranges in the statement) as numbers
    /// and offsets; None when a number lies outside every literal or a
    /// literal holds none.
    fn literals(&self, ranges: &[(usize, usize)]) -> Option<Vec<Literal>> {
        let mut out = Vec::with_capacity(ranges.len());
        let mut next = 0;
        for &(start, end) in ranges {
            let first = next;
            while self.numbers.get(next).is_some_and(|n| n.1 <= end) {
                if self.numbers[next].0 < start {
                    return None;
                }
                next += 1;
            }
            if next == first {
                return None;
            }
            let last = next - 1;
            out.push(Literal {
                first: u16::try_from(first).ok()?,
                before: u16::try_from(self.numbers[first].0 - start).ok()?,
                last: u16::try_from(last).ok()?,
                after: u16::try_from(end - self.numbers[last].1).ok()?,
            });
        }
        (next == self.numbers.len()).then_some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pseudo-random numbers: a few digits, sometimes leading zeros.
    struct Numbers(u64);

    impl Numbers {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
        fn unsigned(&mut self) -> String {
            let digits = 1 + self.next() % 6;
            let n = self.next() % 10u64.pow(digits as u32);
            if self.next().is_multiple_of(8) {
                format!("{n:0width$}", width = digits as usize + 1)
            } else {
                n.to_string()
            }
        }
        fn fill(&mut self, template: &str) -> String {
            let mut out = String::new();
            for (i, part) in template.split('#').enumerate() {
                if i > 0 {
                    out.push_str(&self.unsigned());
                }
                out.push_str(part);
            }
            out
        }
    }

    const TEMPLATES: &[&str] = &[
        "UPDATE pgbench_accounts SET abalance = abalance + -# WHERE aid = #;",
        "SELECT abalance FROM pgbench_accounts WHERE aid = #",
        "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (#, #, #, -#, CURRENT_TIMESTAMP)",
        "SELECT * FROM t1 WHERE x1 = # AND y IN (#, #, #) LIMIT #",
        "SELECT #.#, .#, #.e5, #::int4, a-#, a - - #, x[#], #+#*#/#%#^#",
        "VALUES (#, #), (#, #)",
        "SELECT ?, %s, :name, :# FROM t WHERE b = #",
        // Not remembered: a number glued to a word, a string, a parameter.
        "SELECT 0x# + #",
        "SELECT #e# FROM t",
        "SELECT #_000",
        "SELECT 'x#' || #",
        "SELECT * FROM t WHERE id = $# AND a = #",
        // Comments (`-` and `/` that open none are in a template above).
        "SELECT # -- a note #",
        "SELECT /* # */ #",
        "BEGIN",
    ];

    #[test]
    fn remembered_shapes_give_what_the_normalizer_gives() {
        let mut memo = SqlMemo::default();
        let mut n = Numbers(99);
        for round in 0..20_000 {
            let template = TEMPLATES[round % TEMPLATES.len()];
            let text = n.fill(template);
            let (mut via_memo, mut direct) = (ParamDigest::new(), ParamDigest::new());
            let label = memo.sql(&text, &mut via_memo);
            assert_eq!(label, sql::normalize(&text, &mut direct), "{text}");
            assert_eq!(via_memo.len(), direct.len(), "{text}");
            assert_eq!(via_memo.finish(), direct.finish(), "{text}");
        }
        // Seven templates and BEGIN are remembered (one shape each, numbers
        // aside) and looked up ever after; the rest are not.
        assert_eq!(memo.shapes.len(), MEMO_SHAPES);
        assert!(memo.hits > 10_000, "{} hits", memo.hits);
        for s in &memo.shapes {
            let text = String::from_utf8_lossy(&s.shape);
            assert!(
                !["0x", "#e", "#_", "'", "$"]
                    .iter()
                    .any(|p| text.contains(p)),
                "{text}"
            );
        }
    }

    #[test]
    fn numbers_outside_literals_and_long_texts_are_not_remembered() {
        let mut memo = SqlMemo::default();
        let mut d = ParamDigest::new();
        memo.sql("SELECT * FROM t WHERE id = $1", &mut d);
        memo.sql("SELECT 1 -- 2", &mut d);
        let long = format!("SELECT {}", "1, ".repeat(MAX_SHAPE));
        memo.sql(&long, &mut d);
        assert!(memo.shapes.is_empty());
        memo.sql("SELECT 1", &mut d);
        assert_eq!(memo.shapes.len(), 1);
    }
}
