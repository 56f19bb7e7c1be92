//! Finding trustworthy message starts: after a gap, when the capture began
//! mid-connection, and when sniffing a stream's first bytes.

use super::frame::starts_reply;
use crate::Sniff;

/// Digits of a "*<count>" worth trusting: Redis caps counts at INT_MAX (10 digits).
const MAX_COUNT_DIGITS: usize = 10;
/// Most client bytes `sniff` is given (the sniffer's window).
pub use crate::sniff::SNIFF_BYTES as SNIFF_WINDOW;

/// Inline commands accepted as a stream's first bytes. Only Redis commands
/// memcached's text protocol lacks (no GET/SET/DELETE/INCR/STATS/VERSION/
/// QUIT/WATCH/SHUTDOWN), none an HTTP method.
const INLINE_WORDS: [&[u8]; 24] = [
    b"PUBLISH",
    b"EXISTS",
    b"HGET",
    b"HSET",
    b"LPUSH",
    b"RPUSH",
    b"EXPIRE",
    b"SCAN",
    b"PING",
    b"HELLO",
    b"AUTH",
    b"SELECT",
    b"INFO",
    b"MULTI",
    b"CLIENT",
    b"COMMAND",
    b"DBSIZE",
    b"ECHO",
    b"MONITOR",
    b"CONFIG",
    b"KEYS",
    b"SUBSCRIBE",
    b"PSUBSCRIBE",
    b"RESET",
];

/// Request side: skips bytes until "*<digits>\r\n$" at a line start.
#[derive(Debug)]
pub struct RequestScan {
    line_start: bool,
    /// The pattern matched so far (at most "*" + 10 digits + "\r\n$").
    pub cand: Vec<u8>,
}

impl RequestScan {
    pub fn new(line_start: bool) -> Self {
        RequestScan {
            line_start,
            cand: Vec::new(),
        }
    }

    /// Bytes used, and whether `cand` now holds a complete command start.
    pub fn scan(&mut self, data: &[u8]) -> (usize, bool) {
        for (i, &b) in data.iter().enumerate() {
            if self.step(b) {
                return (i + 1, true);
            }
        }
        (data.len(), false)
    }

    fn step(&mut self, b: u8) -> bool {
        let ok = match self.cand.as_slice() {
            [] => self.line_start && b == b'*',
            [b'*'] => (b'1'..=b'9').contains(&b),
            [.., b'\r', b'\n'] => b == b'$',
            [.., b'\r'] => b == b'\n',
            [b'*', digits @ ..] => {
                (b.is_ascii_digit() && digits.len() < MAX_COUNT_DIGITS) || b == b'\r'
            }
            _ => false,
        };
        if ok {
            self.cand.push(b);
            return b == b'$';
        }
        // A failed candidate that ended a line leaves `b` at a line start.
        let was_line_end = self.cand.last() == Some(&b'\n');
        self.cand.clear();
        if was_line_end && b == b'*' {
            self.cand.push(b);
        }
        self.line_start = b == b'\n';
        false
    }
}

/// Reply side: a RESP type byte at a line start, looked for only while a
/// request sent after the resynchronization waits for its reply.
#[derive(Debug)]
pub struct ReplyScan {
    line_start: bool,
}

impl ReplyScan {
    pub fn new(line_start: bool) -> Self {
        ReplyScan { line_start }
    }

    /// Bytes to skip, and whether a candidate reply starts right after them.
    pub fn scan(&mut self, data: &[u8], armed: bool) -> (usize, bool) {
        let mut line_start = self.line_start;
        for (i, &b) in data.iter().enumerate() {
            if armed && line_start && starts_reply(b) {
                self.line_start = false;
                return (i, true);
            }
            line_start = b == b'\n';
        }
        self.line_start = line_start;
        (data.len(), false)
    }
}

/// "<digits>\r\n" at `data[at..]` (first digit non-zero when `nonzero`):
/// Some(end) after the LF, Some(0) when not matching, None when `data` ends first.
fn number_line(data: &[u8], mut at: usize, nonzero: bool) -> Option<usize> {
    let first = at;
    loop {
        let b = *data.get(at)?;
        at += 1;
        let digits = at - first - 1;
        match b {
            b'\r' if digits > 0 => {
                return data.get(at).map(|&b| if b == b'\n' { at + 1 } else { 0 })
            }
            b'1'..=b'9' if digits < MAX_COUNT_DIGITS => {}
            b'0' if digits < MAX_COUNT_DIGITS && (digits > 0 || !nonzero) => {}
            _ => return Some(0),
        }
    }
}

/// "*<count>\r\n$" (then, when `full`, "<len>\r\n") at the start of `data`:
/// Some(true) matched, Some(false) not, None when `data` ends first.
fn multibulk_at(data: &[u8], full: bool) -> Option<bool> {
    if *data.first()? != b'*' {
        return Some(false);
    }
    let at = number_line(data, 1, true)?;
    if at == 0 || *data.get(at)? != b'$' {
        return Some(false);
    }
    if !full {
        return Some(true);
    }
    Some(number_line(data, at + 1, false)? != 0)
}

/// Does `data` begin a Redis client stream (`Start::Beginning`)? Blank
/// lines before the first command are skipped, as Redis skips them.
pub fn sniff_beginning(data: &[u8]) -> Sniff {
    let blank = data
        .iter()
        .take_while(|b| matches!(b, b'\r' | b'\n'))
        .count();
    let data = &data[blank..];
    match data.first() {
        None => Sniff::NeedMore,
        Some(b'*') => to_sniff(multibulk_at(data, false)),
        Some(_) => sniff_inline(data),
    }
}

fn to_sniff(m: Option<bool>) -> Sniff {
    match m {
        Some(true) => Sniff::Yes,
        Some(false) => Sniff::No,
        None => Sniff::NeedMore,
    }
}

/// A known inline command word, any case, then a space or CRLF.
fn sniff_inline(data: &[u8]) -> Sniff {
    let mut undecided = false;
    for word in INLINE_WORDS {
        for end in [&b" "[..], b"\r\n"] {
            let whole = word.len() + end.len();
            let n = data.len().min(whole);
            let (w, e) = data[..n].split_at(n.min(word.len()));
            if w.eq_ignore_ascii_case(&word[..w.len()]) && e == &end[..e.len()] {
                if n == whole {
                    return Sniff::Yes;
                }
                undecided = true;
            }
        }
    }
    if undecided {
        Sniff::NeedMore
    } else {
        Sniff::No
    }
}

/// Does `data`, from the middle of a client stream, hold a command start
/// ("*<count>\r\n$<len>\r\n" at position 0 or after a CRLF)?
pub fn sniff_midstream(data: &[u8]) -> Sniff {
    let mut truncated = false;
    let starts = std::iter::once(0).chain(
        data.windows(3)
            .enumerate()
            .filter(|(_, w)| w == b"\r\n*")
            .map(|(i, _)| i + 2),
    );
    for at in starts {
        match multibulk_at(data.get(at..).unwrap_or_default(), true) {
            Some(true) => return Sniff::Yes,
            None => truncated = true,
            Some(false) => {}
        }
    }
    if truncated || data.len() < SNIFF_WINDOW {
        Sniff::NeedMore
    } else {
        Sniff::No
    }
}
