//! Server side: one RESP2/RESP3 reply at a time. Aggregates nest, so the
//! reader keeps a stack of remaining-element counters (no recursion); bulk
//! payloads are skipped by their length and only a few bytes of the top-level
//! value are kept (error word, first element of an array).

/// Nesting bound. Redis replies nest a handful of levels (COMMAND DOCS is the
/// deepest, about 6); hiredis long worked with a fixed 9-level stack.
pub const MAX_DEPTH: usize = 128;
/// Redis refuses bulk strings above proto-max-bulk-len, 512 MB by default.
pub const MAX_BULK_LEN: u64 = 512 * 1024 * 1024;
/// Redis collections hold at most 2^32 - 1 elements (a map counts twice).
pub const MAX_ELEMENTS: u64 = 1 << 33;
/// "$<len>", "*<count>", ":<int>" lines: sign, 19 digits and CR fit in 32.
pub const MAX_HEADER_LINE: usize = 32;
/// Bytes kept of a text that is looked at: error word, pub/sub kind.
pub const MAX_WORD: usize = 32;

/// Parse result of a `feed` call.
#[derive(Debug)]
pub enum Outcome<T> {
    /// All bytes used, value not complete.
    More,
    Done(T),
    /// Value ignored (Redis skips empty commands).
    Skipped,
    Error(String),
}

#[cfg(test)]
impl<T> Outcome<T> {
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Outcome<U> {
        match self {
            Outcome::More => Outcome::More,
            Outcome::Done(v) => Outcome::Done(f(v)),
            Outcome::Skipped => Outcome::Skipped,
            Outcome::Error(e) => Outcome::Error(e),
        }
    }
}

/// One line read across chunks, with only its first `keep` bytes stored.
#[derive(Debug, Default)]
pub struct Line {
    buf: Vec<u8>,
    total: usize,
}

impl Line {
    /// Uses bytes up to and including '\n'; true when the line is complete.
    pub fn feed(&mut self, data: &[u8], keep: usize) -> (usize, bool) {
        let (part, used, done) = match data.iter().position(|&b| b == b'\n') {
            Some(i) => (&data[..i], i + 1, true),
            None => (data, data.len(), false),
        };
        let room = keep.saturating_sub(self.buf.len()).min(part.len());
        self.buf.extend_from_slice(&part[..room]);
        self.total = self.total.saturating_add(part.len());
        (used, done)
    }

    /// Bytes seen so far on this line (before '\n').
    pub fn len(&self) -> usize {
        self.total
    }

    /// The kept text, without the line's trailing '\r'.
    pub fn text(&self) -> &[u8] {
        match self.buf.split_last() {
            Some((b'\r', head)) if self.total == self.buf.len() => head,
            _ => &self.buf,
        }
    }

    pub fn clear(&mut self) {
        self.buf.clear();
        self.total = 0;
    }
}

/// A decimal RESP integer ("-1", "42"); None when malformed or out of range.
pub fn parse_int(text: &[u8]) -> Option<i64> {
    let (neg, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, text),
    };
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    let mut v: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(i64::from(d - b'0'))?;
    }
    Some(if neg { -v } else { v })
}

/// A RESP error's first word ("ERR", "WRONGTYPE"): only an upper-case code
/// is kept, never the message (it may quote keys or values).
pub fn error_word(text: &[u8]) -> String {
    let word = text.split(|&b| b == b' ').next().unwrap_or_default();
    let code = !word.is_empty()
        && word.len() <= MAX_WORD
        && word
            .iter()
            .all(|&b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if code {
        String::from_utf8_lossy(word).into_owned()
    } else {
        "?".into()
    }
}

/// What the analyzer needs to know about a complete top-level reply.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Reply {
    /// RESP type byte of the value (after any attribute).
    pub kind: u8,
    /// Entries of an aggregate (map: pairs); None for null and non-aggregates.
    pub count: Option<u64>,
    /// First word of an error ('-' or '!').
    pub error: Option<String>,
    /// First element of an array/push when a short string (pub/sub kind).
    pub first: Vec<u8>,
    /// Third element when an integer (pub/sub: subscriptions left).
    pub third: Option<i64>,
    /// Simple string starting with a digit (MONITOR's timestamped lines).
    pub digit_line: bool,
}

/// Where the value being read sits.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Ctx {
    Top,
    /// Element of the top-level aggregate, by index.
    Elem(u64),
    Deep,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Capture {
    Nothing,
    First,
    Error,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Start,
    Line(u8),
    Body { remaining: u64, capture: Capture },
    Cr(Capture),
    Lf(Capture),
}

#[derive(Debug)]
struct Frame {
    remaining: u64,
    total: u64,
    attr: bool,
}

/// Incremental reader of replies.
#[derive(Debug)]
pub struct ReplyReader {
    state: State,
    ctx: Ctx,
    line: Line,
    word: Vec<u8>,
    stack: Vec<Frame>,
    reply: Reply,
}

fn is_type(b: u8) -> bool {
    b"+-:$*_#,(!=%~>|".contains(&b)
}

/// A byte that can start a RESP reply (for resynchronization).
pub fn starts_reply(b: u8) -> bool {
    is_type(b)
}

impl ReplyReader {
    pub fn new() -> Self {
        ReplyReader {
            state: State::Start,
            ctx: Ctx::Top,
            line: Line::default(),
            word: Vec::new(),
            stack: Vec::new(),
            reply: Reply::default(),
        }
    }

    /// Reads up to the end of one top-level reply; returns the bytes used.
    pub fn feed(&mut self, data: &[u8]) -> (usize, Outcome<Reply>) {
        if let Some((used, reply)) = self.whole_simple(data) {
            return (used, Outcome::Done(reply));
        }
        let mut i = 0;
        while let Some(rest) = data.get(i..).filter(|r| !r.is_empty()) {
            let (used, step) = self.step(rest);
            i += used;
            match step {
                Ok(Some(reply)) => return (i, Outcome::Done(reply)),
                Ok(None) => {}
                Err(e) => return (i, Outcome::Error(e)),
            }
        }
        (i, Outcome::More)
    }

    /// A whole top-level simple string, integer or bulk string (most
    /// replies: +OK, :1, $3 abc) lying in `data`, read in place: the same
    /// `Reply` the states build, without walking it a byte at a time. None
    /// leaves everything to the states (cut replies, errors, aggregates).
    fn whole_simple(&mut self, data: &[u8]) -> Option<(usize, Reply)> {
        if self.state != State::Start || !self.stack.is_empty() {
            return None;
        }
        let ty = *data.first()?;
        let (nl, line) = match ty {
            b'+' => {
                let nl = memchr::memchr(b'\n', data)?;
                (nl, &data[1..nl])
            }
            b':' | b'$' => {
                let head = &data[..data.len().min(MAX_HEADER_LINE + 2)];
                let nl = memchr::memchr(b'\n', head)?;
                (nl, &data[1..nl])
            }
            _ => return None,
        };
        let text = line.strip_suffix(b"\r").unwrap_or(line);
        let used = match ty {
            b'$' => match parse_int(text)? {
                -1 => nl + 1,
                len => {
                    let len = u64::try_from(len).ok().filter(|&l| l <= MAX_BULK_LEN)?;
                    let end = (nl + 1).checked_add(usize::try_from(len).ok()?)?;
                    (data.get(end..end + 2)? == b"\r\n").then_some(end + 2)?
                }
            },
            b':' => parse_int(text).map(|_| nl + 1)?,
            _ => nl + 1,
        };
        let reply = Reply {
            kind: ty,
            digit_line: ty == b'+' && text.first().is_some_and(u8::is_ascii_digit),
            ..std::mem::take(&mut self.reply)
        };
        Some((used, reply))
    }

    fn step(&mut self, rest: &[u8]) -> (usize, Result<Option<Reply>, String>) {
        match self.state {
            State::Start => (1, self.begin(rest[0]).map(|()| None)),
            State::Line(ty) => {
                // Text lines may be long (MONITOR echoes whole commands): only
                // their start is kept. Length and integer lines are short.
                let text = b"+-(,#_".contains(&ty);
                let keep = if text { MAX_WORD } else { MAX_HEADER_LINE };
                let (used, done) = self.line.feed(rest, keep);
                if !text && self.line.len() > MAX_HEADER_LINE {
                    return (used, Err(format!("RESP '{}' line too long", ty as char)));
                }
                if !done {
                    return (used, Ok(None));
                }
                (used, self.line_done(ty))
            }
            State::Body { remaining, capture } => {
                let n = usize::try_from(remaining)
                    .unwrap_or(usize::MAX)
                    .min(rest.len());
                if capture != Capture::Nothing {
                    let room = MAX_WORD.saturating_sub(self.word.len()).min(n);
                    self.word.extend_from_slice(&rest[..room]);
                }
                let remaining = remaining - n as u64;
                self.state = if remaining == 0 {
                    State::Cr(capture)
                } else {
                    State::Body { remaining, capture }
                };
                (n, Ok(None))
            }
            State::Cr(capture) if rest[0] == b'\r' => {
                self.state = State::Lf(capture);
                (1, Ok(None))
            }
            State::Lf(capture) if rest[0] == b'\n' => {
                self.state = State::Start;
                let word = std::mem::take(&mut self.word);
                match capture {
                    Capture::First => self.reply.first = word,
                    Capture::Error => self.reply.error = Some(error_word(&word)),
                    Capture::Nothing => {}
                }
                (1, Ok(self.value_done(false)))
            }
            State::Cr(_) | State::Lf(_) => (1, Err("RESP bulk string not followed by CRLF".into())),
        }
    }

    /// A type byte: note where the value sits and start reading its line.
    fn begin(&mut self, ty: u8) -> Result<(), String> {
        if !is_type(ty) {
            return Err(format!(
                "unexpected byte 0x{ty:02x} where a RESP value starts"
            ));
        }
        self.ctx = match self.stack.as_slice() {
            [] => Ctx::Top,
            [f] if !f.attr => Ctx::Elem(f.total - f.remaining),
            _ => Ctx::Deep,
        };
        if self.ctx == Ctx::Top {
            self.reply.kind = ty;
        }
        self.line.clear();
        self.state = State::Line(ty);
        Ok(())
    }

    fn line_done(&mut self, ty: u8) -> Result<Option<Reply>, String> {
        self.state = State::Start;
        let text = self.line.text();
        match ty {
            b'+' => {
                if self.ctx == Ctx::Top {
                    self.reply.digit_line = text.first().is_some_and(u8::is_ascii_digit);
                } else if self.ctx == Ctx::Elem(0) {
                    self.reply.first = text.to_vec();
                }
            }
            b'-' if self.ctx == Ctx::Top => self.reply.error = Some(error_word(text)),
            b':' => {
                let v = parse_int(text).ok_or("bad RESP integer")?;
                if self.ctx == Ctx::Elem(2) {
                    self.reply.third = Some(v);
                }
            }
            b'$' | b'!' | b'=' => return self.bulk_header(ty),
            b'*' | b'~' | b'%' | b'>' | b'|' => return self.aggregate_header(ty),
            _ => {}
        }
        Ok(self.value_done(false))
    }

    fn bulk_header(&mut self, ty: u8) -> Result<Option<Reply>, String> {
        let len = parse_int(self.line.text()).ok_or("bad RESP bulk length")?;
        if len == -1 {
            return Ok(self.value_done(false));
        }
        let len = u64::try_from(len).map_err(|_| format!("negative RESP bulk length {len}"))?;
        if len > MAX_BULK_LEN {
            return Err(format!("RESP bulk length {len} above 512 MB"));
        }
        let capture = match (ty, self.ctx) {
            (b'!', Ctx::Top) => Capture::Error,
            (b'$', Ctx::Elem(0)) => Capture::First,
            _ => Capture::Nothing,
        };
        self.word.clear();
        self.state = if len == 0 {
            State::Cr(capture)
        } else {
            State::Body {
                remaining: len,
                capture,
            }
        };
        Ok(None)
    }

    fn aggregate_header(&mut self, ty: u8) -> Result<Option<Reply>, String> {
        let count = parse_int(self.line.text()).ok_or("bad RESP aggregate length")?;
        if count == -1 && b"*~%".contains(&ty) {
            return Ok(self.value_done(false));
        }
        let count = u64::try_from(count).map_err(|_| format!("negative RESP length {count}"))?;
        let attr = ty == b'|';
        let elements = if b"%|".contains(&ty) {
            count.saturating_mul(2)
        } else {
            count
        };
        if elements > MAX_ELEMENTS {
            return Err(format!("RESP aggregate of {count} elements"));
        }
        if self.ctx == Ctx::Top && !attr {
            self.reply.count = Some(count);
        }
        if elements == 0 {
            return Ok(self.value_done(attr));
        }
        if self.stack.len() >= MAX_DEPTH {
            return Err(format!("RESP nesting deeper than {MAX_DEPTH}"));
        }
        self.stack.push(Frame {
            remaining: elements,
            total: elements,
            attr,
        });
        Ok(None)
    }

    /// A value is complete: count it in its parent, closing finished
    /// aggregates. An attribute is not an element (nor the reply).
    fn value_done(&mut self, mut was_attr: bool) -> Option<Reply> {
        loop {
            let Some(top) = self.stack.last_mut() else {
                if was_attr {
                    self.reply = Reply::default();
                    return None;
                }
                return Some(std::mem::take(&mut self.reply));
            };
            if was_attr {
                return None;
            }
            top.remaining = top.remaining.saturating_sub(1);
            if top.remaining > 0 {
                return None;
            }
            was_attr = top.attr;
            self.stack.pop();
        }
    }

    /// Bytes missing inside a bulk payload being skipped: counted, and
    /// parsing goes on. False when the gap is anywhere else.
    pub fn skip_missing(&mut self, missing: u64) -> bool {
        match self.state {
            State::Body {
                remaining,
                capture: Capture::Nothing,
            } if missing <= remaining => {
                let remaining = remaining - missing;
                self.state = if remaining == 0 {
                    State::Cr(Capture::Nothing)
                } else {
                    State::Body {
                        remaining,
                        capture: Capture::Nothing,
                    }
                };
                true
            }
            _ => false,
        }
    }
}
