//! SQL normalization over the lexer's tokens: literals become `?`, value
//! lists collapse, spacing is made uniform. One pass, state bounded by
//! `MAX_FRAMES` and the output cap, whatever the statement's size.

use super::lex::{Kind, Lexer, Token};
use super::Capped;
use crate::digest::ParamDigest;

/// Brackets tracked for list collapsing; deeper nesting is still matched
/// (by a counter) but its lists are not collapsed. Real statements rarely
/// nest past a dozen levels; 64 keeps the stack tiny for hostile input.
const MAX_FRAMES: usize = 64;

/// Statements `split_sql` returns before handing back the rest as one piece;
/// a simple-query batch of a thousand statements is already a bulk load.
pub const MAX_STATEMENTS: usize = 1000;

/// Where an element of a bracketed list stands: a list collapses only when
/// every element is one value, optionally typed or cast:
/// `[word..] value [:: type [word..] [[]]]..` (`DATE ?`, `?::int[]`, `lower(?)`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Elem {
    Start,
    /// Words before the value (`DATE`, `timestamp with time zone`, `lower`).
    Prefix,
    Value,
    Cast,
    CastType,
    /// A bracket opened inside the element; true if it may still be a value.
    Nested(bool),
    Bad,
}

impl Elem {
    fn ok(self) -> bool {
        matches!(self, Elem::Value | Elem::CastType)
    }

    fn word(self) -> Elem {
        match self {
            Elem::Start | Elem::Prefix => Elem::Prefix,
            Elem::Cast | Elem::CastType => Elem::CastType,
            _ => Elem::Bad,
        }
    }

    fn value(self) -> Elem {
        match self {
            Elem::Start | Elem::Prefix => Elem::Value,
            _ => Elem::Bad,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum FrameKind {
    /// Any bracket; not collapsed.
    Plain,
    /// `IN (..)`, `ARRAY[..]`: collapses to its first element.
    List,
    /// A `VALUES` row.
    Row,
}

/// Progress through `VALUES (..), (..), ..` at one bracket level: the first
/// row is printed, later rows are skipped (their literals still digested).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rows {
    None,
    ExpectRow,
    InRow,
    AfterRow,
    /// A comma after a row, swallowed until we know a row follows.
    ExpectNext,
}

#[derive(Clone, Copy)]
struct Frame {
    kind: FrameKind,
    elem: Elem,
    /// All elements before the current one were values.
    simple: bool,
    elements: u32,
    /// Output length and cap state at the end of the first element.
    first_end: Option<(usize, bool)>,
    rows: Rows,
}

impl Frame {
    fn new(kind: FrameKind) -> Self {
        Frame {
            kind,
            elem: Elem::Start,
            simple: true,
            elements: 0,
            first_end: None,
            rows: Rows::None,
        }
    }
}

struct Normalizer<'a> {
    src: &'a str,
    out: Capped,
    /// Innermost last; `frames[0]` is the statement level and never popped.
    frames: Vec<Frame>,
    /// Brackets open beyond `MAX_FRAMES`.
    overflow: usize,
    /// Depth inside a skipped `VALUES` row (0: not skipping).
    skip_depth: usize,
    last: Option<Kind>,
    /// A `;` not printed yet: dropped if nothing follows.
    semicolon: bool,
}

/// See `normalize::sql`.
pub(super) fn normalize(statement: &str, digest: &mut ParamDigest) -> String {
    normalize_recording(statement, digest, None)
}

/// As `normalize`, by MySQL's lexical rules (`Lexer::mysql`).
pub(super) fn normalize_mysql(statement: &str, digest: &mut ParamDigest) -> String {
    normalize_tokens(statement, Lexer::mysql(statement.as_bytes()), digest, None)
}

/// As `normalize`, also saying where each literal added to `digest` lies
/// in `statement` (start, end).
pub(super) fn normalize_recording(
    statement: &str,
    digest: &mut ParamDigest,
    literals: Option<&mut Vec<(usize, usize)>>,
) -> String {
    normalize_tokens(
        statement,
        Lexer::new(statement.as_bytes()),
        digest,
        literals,
    )
}

fn normalize_tokens(
    statement: &str,
    tokens: Lexer,
    digest: &mut ParamDigest,
    mut literals: Option<&mut Vec<(usize, usize)>>,
) -> String {
    let mut n = Normalizer {
        src: statement,
        out: Capped::for_source(statement.len()),
        frames: vec![Frame::new(FrameKind::Plain)],
        overflow: 0,
        skip_depth: 0,
        last: None,
        semicolon: false,
    };
    for token in tokens {
        if token.kind == Kind::Literal {
            digest.add(n.text(&token).as_bytes());
            if let Some(l) = literals.as_deref_mut() {
                l.push((token.start, token.end));
            }
        }
        n.token(token);
    }
    n.out.finish()
}

/// See `normalize::split_sql`.
pub(super) fn split(text: &str) -> Vec<&str> {
    if plain(text) {
        return split_plain(text);
    }
    split_lexed(text)
}

/// `split` by the lexer, whatever the text.
pub(super) fn split_lexed(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut has_token) = (0, false);
    for token in Lexer::new(text.as_bytes()) {
        if token.kind != Kind::Semicolon {
            has_token = true;
            continue;
        }
        if has_token {
            parts.push(text.get(start..token.start).unwrap_or_default().trim());
        }
        start = token.end;
        has_token = false;
        if parts.len() + 1 >= MAX_STATEMENTS {
            // The rest, unsplit, as the last piece (if there is more than comments).
            has_token = Lexer::new(text.get(start..).unwrap_or_default().as_bytes())
                .next()
                .is_some();
            break;
        }
    }
    if has_token {
        parts.push(text.get(start..).unwrap_or_default().trim());
    }
    parts
}

/// Whether every `;` of `text` ends a statement and only whitespace lies
/// between tokens: printable ASCII and whitespace, with no string, quoted
/// identifier, dollar quote or comment (what an ORM or pgbench sends).
pub(super) fn plain(text: &str) -> bool {
    let b = text.as_bytes();
    (0..b.len()).all(|i| plain_at(b, i))
}

/// Whether byte `i` of `b` keeps a text plain (see `plain`): one table
/// lookup per byte, and a look at the next byte after `-` and `/`.
pub(super) fn plain_at(b: &[u8], i: usize) -> bool {
    match PLAIN[usize::from(b[i])] {
        Plain::Yes => true,
        Plain::No => false,
        Plain::UnlessComment => !matches!(
            (b[i], b.get(i + 1)),
            (b'-', Some(b'-')) | (b'/', Some(b'*'))
        ),
    }
}

#[derive(Clone, Copy)]
enum Plain {
    Yes,
    No,
    /// `-` and `/`: plain unless they open a comment.
    UnlessComment,
}

/// `plain`'s verdict per byte: printable ASCII and whitespace, but no quote
/// of any kind and no `$`.
const PLAIN: [Plain; 256] = {
    let mut table = [Plain::No; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        table[c] = match b {
            b'\'' | b'"' | b'$' => Plain::No,
            b'-' | b'/' => Plain::UnlessComment,
            b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c => Plain::Yes,
            _ if b.is_ascii_graphic() => Plain::Yes,
            _ => Plain::No,
        };
        c += 1;
    }
    table
};

/// `split` of a `plain` text, without lexing it: the same pieces.
fn split_plain(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    for (i, _) in text.match_indices(';') {
        let piece = text[start..i].trim();
        if !piece.is_empty() {
            parts.push(piece);
        }
        start = i + 1;
        if parts.len() + 1 >= MAX_STATEMENTS {
            break;
        }
    }
    let rest = text[start..].trim();
    if !rest.is_empty() {
        parts.push(rest);
    }
    parts
}

impl<'a> Normalizer<'a> {
    fn text(&self, t: &Token) -> &'a str {
        self.src.get(t.start..t.end).unwrap_or_default()
    }

    fn frame(&mut self) -> &mut Frame {
        let last = self.frames.len() - 1;
        &mut self.frames[last]
    }

    fn token(&mut self, t: Token) {
        if self.skip_depth > 0 {
            match t.kind {
                Kind::Open => self.skip_depth += 1,
                Kind::Close => self.skip_depth -= 1,
                _ => {}
            }
            if self.skip_depth == 0 {
                self.frame().rows = Rows::AfterRow;
            }
            return;
        }
        if !self.rows(&t) {
            return;
        }
        if self.semicolon {
            self.semicolon = false;
            self.emit(Kind::Semicolon, ";", false);
        }
        match t.kind {
            Kind::Open => self.open(&t),
            Kind::Close => self.close(&t),
            Kind::Comma => self.comma(),
            Kind::Semicolon => {
                self.frames.truncate(1);
                self.frames[0] = Frame::new(FrameKind::Plain);
                self.overflow = 0;
                self.semicolon = true;
                self.last = Some(Kind::Semicolon);
            }
            _ => self.element(&t),
        }
    }

    /// Multi-row `VALUES`; false when the token is consumed here.
    fn rows(&mut self, t: &Token) -> bool {
        let open_paren = t.kind == Kind::Open && self.text(t) == "(";
        let frame = self.frame();
        match (frame.rows, t.kind) {
            (Rows::AfterRow, Kind::Comma) => {
                frame.rows = Rows::ExpectNext;
                return false;
            }
            (Rows::ExpectNext, _) if open_paren => {
                self.skip_depth = 1;
                return false;
            }
            (Rows::ExpectNext, _) => {
                frame.rows = Rows::None;
                self.comma();
            }
            (Rows::ExpectRow, _) if open_paren => frame.rows = Rows::InRow,
            (Rows::ExpectRow | Rows::AfterRow, _) => frame.rows = Rows::None,
            _ => {}
        }
        true
    }

    fn open(&mut self, t: &Token) {
        let text = self.text(t);
        let kind = match (self.last, text, self.frame().rows) {
            (_, "(", Rows::InRow) => FrameKind::Row,
            (Some(Kind::Keyword("IN")), "(", _) => FrameKind::List,
            (Some(Kind::Keyword("ARRAY")), "[", _) => FrameKind::List,
            _ => FrameKind::Plain,
        };
        let closer = if text == "(" { "(" } else { "[" };
        self.emit(Kind::Open, closer, t.space_before);
        if self.overflow > 0 || self.frames.len() >= MAX_FRAMES {
            self.overflow += 1;
            return;
        }
        let frame = self.frame();
        frame.elem = Elem::Nested(matches!(frame.elem, Elem::Start | Elem::Prefix));
        self.frames.push(Frame::new(kind));
    }

    fn close(&mut self, t: &Token) {
        let closer = if self.text(t) == ")" { ")" } else { "]" };
        if self.overflow > 0 {
            self.overflow -= 1;
            if self.overflow == 0 {
                self.frame().elem = Elem::Bad;
            }
            self.emit(Kind::Close, closer, t.space_before);
            return;
        }
        if self.frames.len() == 1 {
            // Unbalanced: print it, nothing to pop.
            self.frame().elem = Elem::Bad;
            self.emit(Kind::Close, closer, t.space_before);
            return;
        }
        let Some(child) = self.frames.pop() else {
            return;
        };
        let simple = child.simple && child.elem.ok();
        if let (FrameKind::List, true, Some((len, dropped))) = (child.kind, simple, child.first_end)
        {
            self.out.truncate(len, dropped);
        }
        self.emit(Kind::Close, closer, t.space_before);
        let parent = self.frame();
        parent.elem = match parent.elem {
            Elem::Nested(ok) if ok && simple => Elem::Value,
            _ => Elem::Bad,
        };
        if child.kind == FrameKind::Row && parent.rows == Rows::InRow {
            parent.rows = Rows::AfterRow;
        }
    }

    fn comma(&mut self) {
        let len = self.out.len();
        let dropped = self.out.dropped();
        let frame = self.frame();
        if frame.elem.ok() {
            frame.elements = frame.elements.saturating_add(1);
        } else {
            frame.simple = false;
        }
        if frame.first_end.is_none() {
            frame.first_end = Some((len, dropped));
        }
        frame.elem = Elem::Start;
        self.emit(Kind::Comma, ",", false);
    }

    fn element(&mut self, t: &Token) {
        let text = self.text(t);
        let frame = self.frame();
        frame.elem = match t.kind {
            Kind::Literal | Kind::Placeholder => frame.elem.value(),
            Kind::Keyword("NULL" | "TRUE" | "FALSE" | "DEFAULT") => frame.elem.value(),
            Kind::Word | Kind::Keyword(_) | Kind::QuotedIdent => frame.elem.word(),
            Kind::Cast if matches!(frame.elem, Elem::Value | Elem::CastType) => Elem::Cast,
            Kind::EmptyBrackets if frame.elem == Elem::CastType => Elem::CastType,
            _ => Elem::Bad,
        };
        if t.kind == Kind::Keyword("VALUES") {
            frame.rows = Rows::ExpectRow;
        }
        let shown = match t.kind {
            Kind::Literal => "?",
            Kind::Keyword(k) => k,
            _ => text,
        };
        self.emit(t.kind, shown, t.space_before);
    }

    /// Appends a token, with one space before it where the input had
    /// whitespace or a comment, except after `(`/`[`/`::` and before
    /// `,`/`)`/`]`/`::`; always after a comma and between two words.
    fn emit(&mut self, kind: Kind, text: &str, space_before: bool) {
        let word = |k: Kind| {
            matches!(
                k,
                Kind::Word
                    | Kind::Keyword(_)
                    | Kind::QuotedIdent
                    | Kind::Literal
                    | Kind::Placeholder
            )
        };
        let space = match (self.last, kind) {
            (None, _) => false,
            (_, Kind::Comma | Kind::Close | Kind::Cast | Kind::Semicolon) => false,
            (Some(Kind::Open | Kind::Cast), _) => false,
            (Some(Kind::Comma | Kind::Semicolon), _) => true,
            // `SELECT'a'` → `SELECT ?`, but `x[lo:hi]` stays.
            (Some(last), _) if word(last) && word(kind) && !text.starts_with(':') => true,
            _ => space_before,
        };
        if space {
            self.out.push(" ");
        }
        self.out.push(text);
        self.last = Some(kind);
    }
}
