//! A PostgreSQL lexer, just enough to find where literals, quoted
//! identifiers, dollar quotes and comments begin and end (after PostgreSQL's
//! `scan.l`), with MySQL's differences as a dialect (`Lexer::mysql`). Byte-level, one forward pass, no allocation: tokens are byte
//! ranges of the input. Every token boundary is an ASCII byte or an end of
//! the input, so ranges always fall on `char` boundaries.

/// Longest `$tag$` accepted. PostgreSQL identifiers are at most 63 bytes
/// (NAMEDATALEN - 1); a longer tag turns the rest of the input into one
/// literal (safe: nothing of it is shown) and keeps the closing-tag search
/// linear (at most this many bytes compared per `$`).
const MAX_DOLLAR_TAG: usize = 64;

/// Longest operator scanned: PostgreSQL rejects longer ones (NAMEDATALEN - 1),
/// and the bound keeps `+-+-…` runs (trimmed to one char each) linear.
const MAX_OP_LEN: usize = 63;

/// Longest name in a Python `%(name)s` placeholder looked for.
const MAX_PYFORMAT_NAME: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// Identifier (or a word not in `KEYWORDS`), kept as written.
    Word,
    /// A word of `KEYWORDS`, as its upper-case spelling.
    Keyword(&'static str),
    /// `"Order"`, `U&"d\0061t"`: kept as written.
    QuotedIdent,
    /// Number, string, bit string, dollar-quoted string: printed as `?`.
    Literal,
    /// Bind parameter (`$1`, `?`, `:name`, `%s`, `%(name)s`): kept.
    Placeholder,
    Op,
    /// `::`
    Cast,
    Comma,
    /// `(` or `[`
    Open,
    /// `)` or `]`
    Close,
    /// `[]` as in `::int[]`
    EmptyBrackets,
    Semicolon,
    /// Anything else: `.`, a lone `:` or `$`, `{`, `\`, ...
    Other,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Token {
    pub kind: Kind,
    pub start: usize,
    pub end: usize,
    /// Whitespace or a comment came before the token.
    pub space_before: bool,
}

/// Upper-cased on output; everything else keeps its case. Sorted (binary
/// search). NULL/TRUE/FALSE are here: they stay words, not `?` (as Sentry and
/// Datadog's default obfuscator keep them), because they say little about
/// the values and much about the query's shape (`IS NULL`).
#[rustfmt::skip]
pub(super) const KEYWORDS: &[&str] = &[
    "ABORT", "ALL", "ALTER", "ANALYZE", "AND", "ANY", "ARRAY", "AS", "ASC", "BEGIN",
    "BETWEEN", "BY", "CASE", "CAST", "CHECK", "CLOSE", "COMMIT", "CONFLICT", "CONSTRAINT",
    "COPY", "CREATE", "CROSS", "CURSOR", "DATE", "DEALLOCATE", "DECLARE", "DEFAULT",
    "DELETE", "DESC", "DISTINCT", "DO", "DROP", "ELSE", "END", "EXCEPT", "EXECUTE",
    "EXISTS", "EXPLAIN", "FALSE", "FETCH", "FILTER", "FIRST", "FOR", "FROM", "FULL",
    "GROUP", "HAVING", "ILIKE", "IN", "INDEX", "INNER", "INSERT", "INTERSECT", "INTERVAL",
    "INTO", "IS", "ISOLATION", "JOIN", "KEY", "LAST", "LATERAL", "LEFT", "LEVEL", "LIKE",
    "LIMIT", "LISTEN", "LOCK", "LOCKED", "NOT", "NOTHING", "NOTIFY", "NOWAIT", "NULL",
    "NULLS", "OFFSET", "ON", "ONLY", "OR", "ORDER", "OUTER", "OVER", "PARTITION", "PREPARE",
    "PRIMARY", "READ", "RECURSIVE", "REFERENCES", "RELEASE", "RESET", "RETURNING", "RIGHT",
    "ROLLBACK", "SAVEPOINT", "SELECT", "SET", "SHARE", "SHOW", "SKIP", "SOME", "START",
    "TABLE", "THEN", "TIME", "TIMESTAMP", "TO", "TRANSACTION", "TRUE", "TRUNCATE", "UNION",
    "UNIQUE", "UNLISTEN", "UPDATE", "USING", "VACUUM", "VALUES", "VIEW", "WHEN", "WHERE",
    "WINDOW", "WITH", "WORK", "WRITE",
];

/// Where each initial letter's keywords are in `KEYWORDS` (sorted, so they
/// are contiguous): a word is compared with the few of its initial, not
/// binary-searched over all (the search was a tenth of analyzing pgbench).
const BY_INITIAL: [(usize, usize); 26] = {
    let mut ranges = [(0, 0); 26];
    let mut i = 0;
    while i < KEYWORDS.len() {
        let c = (KEYWORDS[i].as_bytes()[0] - b'A') as usize;
        if ranges[c].1 == 0 {
            ranges[c].0 = i;
        }
        ranges[c].1 = i + 1;
        i += 1;
    }
    ranges
};

/// The upper-case keyword `word` spells, if any (ASCII case-insensitive).
pub(super) fn keyword(word: &[u8]) -> Option<&'static str> {
    let initial = word.first()?.to_ascii_uppercase();
    let &(start, end) = BY_INITIAL.get(usize::from(initial.checked_sub(b'A')?))?;
    KEYWORDS
        .get(start..end)?
        .iter()
        .find(|k| k.len() == word.len() && k.as_bytes().eq_ignore_ascii_case(word))
        .copied()
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
}

fn is_ident_char(b: u8) -> bool {
    is_ident_start(b) || b.is_ascii_digit() || b == b'$'
}

/// PostgreSQL's operator characters (`scan.l`: `op_chars`).
fn is_op_char(b: u8) -> bool {
    b"~!@#^&|`?+-*/%<>=".contains(&b)
}

pub(super) struct Lexer<'a> {
    src: &'a [u8],
    pos: usize,
    prev: Option<Kind>,
    /// MySQL's lexical rules (`mysql`).
    mysql: bool,
}

impl<'a> Lexer<'a> {
    pub fn new(src: &'a [u8]) -> Self {
        Lexer {
            src,
            pos: 0,
            prev: None,
            mysql: false,
        }
    }

    /// MySQL's rules where they differ (MySQL 8.0 reference, "Schema Object
    /// Names", "String Literals", "Comments"): `"..."` is a string (the
    /// default sql_mode has no ANSI_QUOTES), `\` escapes in strings,
    /// `` `name` `` is an identifier, `#` starts a comment, block comments
    /// do not nest, and `$` quotes nothing.
    pub fn mysql(src: &'a [u8]) -> Self {
        Lexer {
            mysql: true,
            ..Lexer::new(src)
        }
    }

    fn at(&self, i: usize) -> u8 {
        self.src.get(i).copied().unwrap_or(0)
    }

    /// The previous token ends an operand, so a following `-` is binary.
    fn after_operand(&self) -> bool {
        match self.prev {
            Some(Kind::Keyword(k)) => matches!(k, "NULL" | "TRUE" | "FALSE" | "END"),
            Some(k) => matches!(
                k,
                Kind::Word
                    | Kind::QuotedIdent
                    | Kind::Literal
                    | Kind::Placeholder
                    | Kind::Close
                    | Kind::EmptyBrackets
            ),
            None => false,
        }
    }

    /// Skips whitespace and comments (`--` to end of line, nested `/* */`);
    /// true when anything was skipped.
    fn skip_space(&mut self) -> bool {
        let start = self.pos;
        while let Some(&b) = self.src.get(self.pos) {
            if matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c) {
                self.pos += 1;
            } else if (b == b'-' && self.at(self.pos + 1) == b'-') || (self.mysql && b == b'#') {
                self.pos = find_byte(self.src, self.pos, b'\n');
            } else if b == b'/' && self.at(self.pos + 1) == b'*' {
                self.pos = self.block_comment_end(self.pos + 2);
            } else {
                break;
            }
        }
        self.pos > start
    }

    /// End of a block comment whose body starts at `i`; PostgreSQL nests them.
    /// Unterminated: the end of the input.
    fn block_comment_end(&self, mut i: usize) -> usize {
        let mut depth = 1usize;
        while i < self.src.len() {
            let pair = (self.at(i), self.at(i + 1));
            if pair == (b'/', b'*') && !self.mysql {
                depth = depth.saturating_add(1);
                i += 2;
            } else if pair == (b'*', b'/') {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return i;
                }
            } else {
                i += 1;
            }
        }
        self.src.len()
    }

    /// Kind and end of the token starting at `self.pos` (not whitespace).
    fn scan_token(&self, b: u8) -> (Kind, usize) {
        let i = self.pos;
        let next = self.at(i + 1);
        if self.mysql {
            match b {
                b'\'' | b'"' => return (Kind::Literal, quoted_end(self.src, i + 1, b, true)),
                b'`' => {
                    return match closing(self.src, i + 1, b'`', false) {
                        Some(end) => (Kind::QuotedIdent, end),
                        None => (Kind::Literal, self.src.len()),
                    }
                }
                b'$' => return (Kind::Other, i + 1),
                _ => {}
            }
        }
        match b {
            b'\'' => (Kind::Literal, quoted_end(self.src, i + 1, b'\'', false)),
            b'"' => self.quoted_ident(i + 1),
            b'$' => self.dollar(i),
            b'0'..=b'9' => (Kind::Literal, number_end(self.src, i)),
            b'.' if next.is_ascii_digit() && !self.after_operand() => {
                (Kind::Literal, number_end(self.src, i))
            }
            b'+' | b'-' if self.signed_number(i) => (Kind::Literal, number_end(self.src, i + 1)),
            b'[' if next == b']' => (Kind::EmptyBrackets, i + 2),
            b'(' | b'[' => (Kind::Open, i + 1),
            b')' | b']' => (Kind::Close, i + 1),
            b',' => (Kind::Comma, i + 1),
            b';' => (Kind::Semicolon, i + 1),
            b':' if next == b':' => (Kind::Cast, i + 2),
            b':' if is_ident_start(next) => (Kind::Placeholder, word_end(self.src, i + 1)),
            b'?' if !is_op_char(next) => (Kind::Placeholder, i + 1),
            b'%' => match self.pyformat(i) {
                Some(end) => (Kind::Placeholder, end),
                None => (Kind::Op, self.op_end(i)),
            },
            _ if is_op_char(b) => (Kind::Op, self.op_end(i)),
            _ if is_ident_start(b) => self.word(i),
            _ => (Kind::Other, i + 1),
        }
    }

    fn quoted_ident(&self, body: usize) -> (Kind, usize) {
        match closing(self.src, body, b'"', false) {
            Some(end) => (Kind::QuotedIdent, end),
            // Unterminated: the rest may hold anything; hide it as a literal.
            None => (Kind::Literal, self.src.len()),
        }
    }

    /// `+1`/`-1` is a signed literal where no operand precedes (`= -1`, `(-1`).
    fn signed_number(&self, i: usize) -> bool {
        let (n1, n2) = (self.at(i + 1), self.at(i + 2));
        !self.after_operand() && (n1.is_ascii_digit() || (n1 == b'.' && n2.is_ascii_digit()))
    }

    /// `$1` parameter, `$$..$$` / `$tag$..$tag$` string, or a lone `$`.
    fn dollar(&self, i: usize) -> (Kind, usize) {
        let mut j = i + 1;
        if self.at(j).is_ascii_digit() {
            while self.at(j).is_ascii_digit() {
                j += 1;
            }
            return (Kind::Placeholder, j);
        }
        if is_ident_start(self.at(j)) {
            while j < self.src.len() && is_ident_char(self.at(j)) && self.at(j) != b'$' {
                j += 1;
                if j - i > MAX_DOLLAR_TAG + 1 {
                    return (Kind::Literal, self.src.len());
                }
            }
        }
        if self.at(j) != b'$' {
            return (Kind::Other, i + 1);
        }
        let delim = self.src.get(i..=j).unwrap_or_default();
        let mut k = j + 1;
        while k < self.src.len() {
            k = find_byte(self.src, k, b'$');
            if self
                .src
                .get(k..)
                .is_some_and(|rest| rest.starts_with(delim))
            {
                return (Kind::Literal, k + delim.len());
            }
            k += 1;
        }
        (Kind::Literal, self.src.len())
    }

    /// `%s` or `%(name)s` (Python DB-API "format"/"pyformat" parameters).
    fn pyformat(&self, i: usize) -> Option<usize> {
        match self.at(i + 1) {
            b's' if !is_ident_char(self.at(i + 2)) => Some(i + 2),
            b'(' => {
                let limit = (i + 2 + MAX_PYFORMAT_NAME).min(self.src.len());
                let close = (i + 2..limit).find(|&j| !is_ident_char(self.at(j)))?;
                (close > i + 2 && self.at(close) == b')' && self.at(close + 1) == b's')
                    .then_some(close + 2)
            }
            _ => None,
        }
    }

    /// A run of operator characters, cut as PostgreSQL does: before a comment
    /// start, before `?` (so `id=?` keeps its placeholder), and without
    /// trailing `+`/`-` unless the run has one of `~!@#%^&|``?` (`=-1`).
    fn op_end(&self, i: usize) -> usize {
        let mut j = i + 1;
        while j < self.src.len() && j - i < MAX_OP_LEN {
            let (b, n) = (self.at(j), self.at(j + 1));
            if !is_op_char(b) || b == b'?' || (b, n) == (b'-', b'-') || (b, n) == (b'/', b'*') {
                break;
            }
            j += 1;
        }
        let run = self.src.get(i..j).unwrap_or_default();
        // A run cut at the bound is no valid operator anyway: taken whole.
        if j - i < MAX_OP_LEN && !run.iter().any(|b| b"~!@#%^&|`?".contains(b)) {
            while j > i + 1 && matches!(self.at(j - 1), b'+' | b'-') {
                j -= 1;
            }
        }
        j
    }

    /// A word, or a prefixed string: `E'..'`, `B'..'`, `X'..'`, `N'..'`,
    /// `U&'..'`, or a `U&"..."` identifier.
    fn word(&self, i: usize) -> (Kind, usize) {
        let end = word_end(self.src, i);
        if end == i + 1 {
            let (b, n, n2) = (self.at(i), self.at(end), self.at(end + 1));
            match (b.to_ascii_uppercase(), n, n2) {
                (b'E', b'\'', _) => return (Kind::Literal, quoted_end(self.src, end + 1, n, true)),
                (b'B' | b'X' | b'N', b'\'', _) => {
                    return (Kind::Literal, quoted_end(self.src, end + 1, n, false))
                }
                (b'U', b'&', b'\'') => {
                    return (Kind::Literal, quoted_end(self.src, end + 2, n2, false))
                }
                (b'U', b'&', b'"') => return self.quoted_ident(end + 2),
                _ => {}
            }
        }
        let text = self.src.get(i..end).unwrap_or_default();
        match keyword(text) {
            Some(k) => (Kind::Keyword(k), end),
            None => (Kind::Word, end),
        }
    }
}

impl Iterator for Lexer<'_> {
    type Item = Token;

    fn next(&mut self) -> Option<Token> {
        let space_before = self.skip_space();
        let &b = self.src.get(self.pos)?;
        let (kind, end) = self.scan_token(b);
        // Every branch consumes at least one byte; guard anyway.
        let end = end.clamp(self.pos + 1, self.src.len());
        let token = Token {
            kind,
            start: self.pos,
            end,
            space_before,
        };
        self.pos = end;
        self.prev = Some(kind);
        Some(token)
    }
}

/// Position of the first `byte` at or after `from`, or the input's end.
fn find_byte(src: &[u8], from: usize, byte: u8) -> usize {
    src.get(from..)
        .and_then(|rest| rest.iter().position(|&b| b == byte))
        .map_or(src.len(), |p| from + p)
}

/// End of a quoted string or identifier whose body starts at `i`, closed by
/// `quote` (doubled inside = escaped); `backslash`: `\x` escapes too (E'..').
/// Unterminated: the end of the input.
fn quoted_end(src: &[u8], i: usize, quote: u8, backslash: bool) -> usize {
    closing(src, i, quote, backslash).unwrap_or(src.len())
}

/// As `quoted_end`, None when unterminated.
fn closing(src: &[u8], mut i: usize, quote: u8, backslash: bool) -> Option<usize> {
    while let Some(&b) = src.get(i) {
        if b == quote {
            if src.get(i + 1) == Some(&quote) {
                i += 2;
                continue;
            }
            return Some(i + 1);
        }
        i += if backslash && b == b'\\' { 2 } else { 1 };
    }
    None
}

fn word_end(src: &[u8], mut i: usize) -> usize {
    while src.get(i).is_some_and(|&b| is_ident_char(b)) {
        i += 1;
    }
    i
}

/// End of a number starting at `i` (after any sign): decimal with fraction
/// and exponent, or `0x`/`0o`/`0b` (PostgreSQL 16), `_` separators allowed.
/// Trailing letters are not taken (`1abc` is `1` then `abc`, as before
/// PostgreSQL 15).
fn number_end(src: &[u8], i: usize) -> usize {
    let at = |j: usize| src.get(j).copied().unwrap_or(0);
    let digits = |mut j: usize| {
        while at(j).is_ascii_digit() || at(j) == b'_' {
            j += 1;
        }
        j
    };
    if at(i) == b'0' && matches!(at(i + 1), b'x' | b'X' | b'o' | b'O' | b'b' | b'B') {
        let mut j = i + 2;
        while at(j).is_ascii_hexdigit() || at(j) == b'_' {
            j += 1;
        }
        return j;
    }
    let mut j = digits(i);
    if at(j) == b'.' && at(j + 1) != b'.' {
        j = digits(j + 1);
    }
    if matches!(at(j), b'e' | b'E') {
        let sign = usize::from(matches!(at(j + 1), b'+' | b'-'));
        if at(j + 1 + sign).is_ascii_digit() {
            j = digits(j + 1 + sign);
        }
    }
    j
}
