//! Client side: commands as arrays of bulk strings ("*2\r\n$3\r\nGET\r\n…")
//! or inline lines ("PING\r\n"). Only the first arguments are kept, each
//! bounded; every argument after the name is hashed into the digest as it
//! streams by, so a 16 MB value costs what a 16-byte one does.

use super::command;
use super::frame::{parse_int, Line, Outcome, MAX_BULK_LEN, MAX_HEADER_LINE};
use crate::digest::StreamHash;
use std::hash::Hasher;

/// Arguments kept for the label: name, then subcommand or key, then the key
/// after a subcommand ("OBJECT ENCODING key").
pub const MAX_KEPT_ARGS: usize = 3;
/// Bytes kept of each kept argument: keys are short; a longer one is labelled
/// from its first KiB and hashed whole.
pub const MAX_ARG_BYTES: usize = 1024;
/// Redis refuses a multibulk count above INT_MAX ("invalid multibulk length").
pub const MAX_ARGS: u64 = i32::MAX as u64;
/// Redis's PROTO_INLINE_MAX_SIZE: longer inline commands are refused.
pub const MAX_INLINE: usize = 64 * 1024;

/// A complete command; its first arguments are in `RequestReader::kept`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Command {
    pub argc: u64,
    /// Digest of the arguments after the name; None for commands carrying
    /// credentials (AUTH, HELLO, ...) or when bytes were missing.
    pub digest: Option<u64>,
    /// The command before it on this reader had the same count and kept
    /// arguments: whatever was read from those holds for this one too.
    pub repeat: bool,
}

/// The first `MAX_KEPT_ARGS` arguments of a command, each cut at
/// `MAX_ARG_BYTES` (only the name for AUTH), and its argument count.
#[derive(Default)]
pub struct Kept {
    pub argc: u64,
    args: [Vec<u8>; MAX_KEPT_ARGS],
    /// Arguments of `args` in use.
    len: usize,
}

impl Kept {
    pub fn arg(&self, i: usize) -> Option<&[u8]> {
        self.args[..self.len].get(i).map(Vec::as_slice)
    }

    fn same(&self, other: &Kept) -> bool {
        self.argc == other.argc && self.args[..self.len] == other.args[..other.len]
    }
}

impl std::fmt::Debug for Kept {
    // Kept arguments may be keys: only their count is shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept")
            .field("argc", &self.argc)
            .field("kept", &self.len)
            .finish_non_exhaustive()
    }
}

/// Receives argument bytes: keeps the first ones, hashes the others.
#[derive(Default, Debug)]
struct ArgSink {
    index: u64,
    /// The command being read; `kept.argc` is set when it is complete.
    kept: Kept,
    len: u64,
    /// One stream for the whole command: each argument's bytes, then its
    /// length. A length after each value keeps the stream unambiguous
    /// (read from the end), as a length before it would, without knowing it
    /// before the value streams by.
    hasher: StreamHash,
    secret: bool,
    /// The arguments after the name are not kept (AUTH: credentials).
    unkept: bool,
    lost: bool,
}

impl ArgSink {
    fn bytes(&mut self, b: &[u8]) {
        if let Some(kept) = self.kept_mut() {
            let room = MAX_ARG_BYTES.saturating_sub(kept.len()).min(b.len());
            kept.extend_from_slice(&b[..room]);
        }
        if self.index >= 1 && !self.secret {
            self.hasher.write(b);
        }
        self.len = self.len.saturating_add(b.len() as u64);
    }

    fn kept_mut(&mut self) -> Option<&mut Vec<u8>> {
        // AUTH's arguments are the credentials themselves: not even kept.
        if self.unkept {
            return None;
        }
        let i = usize::try_from(self.index)
            .ok()
            .filter(|&i| i < MAX_KEPT_ARGS)?;
        let kept = &mut self.kept;
        // Buffers hold an earlier command's bytes until taken into use.
        while kept.len <= i {
            kept.args[kept.len].clear();
            kept.len += 1;
        }
        Some(&mut kept.args[i])
    }

    fn end_arg(&mut self) {
        let _ = self.kept_mut();
        if self.index == 0 {
            let name = self.kept.arg(0);
            self.secret = name.is_some_and(command::is_secret);
            self.unkept = name.is_some_and(|n| n.eq_ignore_ascii_case(b"AUTH"));
        } else if !self.secret {
            self.hasher.write_u64(self.len);
        }
        self.len = 0;
        self.index += 1;
    }

    /// The current argument is not kept for the label (a gap may hit it).
    fn only_hashed(&self) -> bool {
        self.index >= MAX_KEPT_ARGS as u64 || (self.index >= 1 && self.len >= MAX_ARG_BYTES as u64)
    }

    /// The command is complete: its kept arguments become `last` (when they
    /// differ; their buffers are swapped, never copied) and the sink starts
    /// over with `last`'s old buffers.
    fn finish(&mut self, last: &mut Kept) -> Command {
        self.kept.argc = self.index;
        let repeat = self.kept.same(last);
        if !repeat {
            std::mem::swap(&mut self.kept, last);
        }
        let command = Command {
            argc: self.index,
            digest: (!self.secret && !self.lost).then(|| self.hasher.finish()),
            repeat,
        };
        self.index = 0;
        self.kept.len = 0;
        self.len = 0;
        self.hasher = StreamHash::default();
        self.secret = false;
        self.unkept = false;
        self.lost = false;
        command
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Start,
    Count,
    ArgType,
    ArgLen,
    ArgBody(u64),
    ArgCr,
    ArgLf,
    Inline { in_token: bool, len: usize },
}

/// Incremental reader of commands.
#[derive(Debug)]
pub struct RequestReader {
    state: State,
    line: Line,
    argc: u64,
    sink: ArgSink,
    /// The last complete command's first arguments.
    last: Kept,
}

impl RequestReader {
    pub fn new() -> Self {
        RequestReader {
            state: State::Start,
            line: Line::default(),
            argc: 0,
            sink: ArgSink::default(),
            last: Kept::default(),
        }
    }

    /// Reads up to the end of one command; returns the bytes used.
    pub fn feed(&mut self, data: &[u8]) -> (usize, Outcome<Command>) {
        if self.state == State::Start {
            if let Some((used, command)) = self.whole_command(data) {
                return (used, Outcome::Done(command));
            }
        }
        let mut i = 0;
        while let Some(rest) = data.get(i..).filter(|r| !r.is_empty()) {
            let (used, step) = match self.state {
                State::Inline { in_token, len } => self.inline(rest, in_token, len),
                _ => self.step(rest),
            };
            i += used;
            match step {
                Outcome::More => {}
                done => return (i, done),
            }
        }
        (i, Outcome::More)
    }

    /// A command that lies whole and well formed in `data`, read in place:
    /// the same `Command` and kept arguments the byte-by-byte states give,
    /// without walking its framing a byte at a time, and with its kept
    /// arguments compared to the last command's where they lie (copied only
    /// when they differ). None leaves everything to those states (partial
    /// commands, errors, inline commands, empty multibulks). The framing is
    /// checked in a first pass, so a command cut short leaves the reader as
    /// it was.
    fn whole_command(&mut self, data: &[u8]) -> Option<(usize, Command)> {
        let (argc, mut at) = length_at(data, 0, b'*', MAX_ARGS)?;
        // Where the first arguments' bodies are, from the first pass.
        let mut bodies = [(0usize, 0usize); REMEMBERED_ARGS];
        for i in 0..argc {
            let (len, body) = length_at(data, at, b'$', MAX_BULK_LEN)?;
            at = body_end(data, body, len)?;
            if let Some(slot) = bodies.get_mut(i as usize) {
                *slot = (body, len as usize);
            }
        }
        let end = at;
        let arg = |(body, len): (usize, usize)| &data[body..body + len];
        let name = arg(bodies[0]);
        let secret = command::is_secret(name);
        // AUTH's arguments are the credentials themselves: not even kept.
        let kept = if name.eq_ignore_ascii_case(b"AUTH") {
            1
        } else {
            (argc as usize).min(MAX_KEPT_ARGS)
        };
        let cut = |i: usize| {
            let value = arg(bodies[i]);
            &value[..value.len().min(MAX_ARG_BYTES)]
        };
        let last = &mut self.last;
        let repeat = last.argc == argc
            && last.len == kept
            && (0..kept).all(|i| same_bytes(&last.args[i], cut(i)));
        if !repeat {
            for i in 0..kept {
                last.args[i].clear();
                last.args[i].extend_from_slice(cut(i));
            }
            last.len = kept;
            last.argc = argc;
        }
        let mut hasher = StreamHash::default();
        if !secret {
            at = bodies[0].0 + bodies[0].1 + 2;
            for i in 1..argc {
                let (body, len) = match bodies.get(i as usize) {
                    Some(&known) => known,
                    None => {
                        length_at(data, at, b'$', MAX_BULK_LEN).map(|(n, b)| (b, n as usize))?
                    }
                };
                hasher.write(&data[body..body + len]);
                hasher.write_u64(len as u64);
                at = body + len + 2;
            }
        }
        let command = Command {
            argc,
            digest: (!secret).then(|| hasher.finish()),
            repeat,
        };
        Some((end, command))
    }

    /// The first arguments of the last complete command.
    pub fn kept(&self) -> &Kept {
        &self.last
    }

    fn step(&mut self, rest: &[u8]) -> (usize, Outcome<Command>) {
        let b = rest[0];
        match self.state {
            State::Start if b == b'*' => self.next(State::Count),
            State::Start => {
                self.state = State::Inline {
                    in_token: false,
                    len: 0,
                };
                (0, Outcome::More)
            }
            State::Count | State::ArgLen => self.length_line(rest),
            State::ArgType if b == b'$' => self.next(State::ArgLen),
            State::ArgType => (1, Outcome::Error(format!("expected '$', got 0x{b:02x}"))),
            State::ArgBody(remaining) => {
                let n = usize::try_from(remaining)
                    .unwrap_or(usize::MAX)
                    .min(rest.len());
                self.sink.bytes(&rest[..n]);
                let remaining = remaining - n as u64;
                self.state = if remaining == 0 {
                    State::ArgCr
                } else {
                    State::ArgBody(remaining)
                };
                (n, Outcome::More)
            }
            State::ArgCr if b == b'\r' => self.next(State::ArgLf),
            State::ArgLf if b == b'\n' => {
                self.sink.end_arg();
                if self.sink.index < self.argc {
                    return self.next(State::ArgType);
                }
                self.state = State::Start;
                (1, Outcome::Done(self.sink.finish(&mut self.last)))
            }
            State::ArgCr | State::ArgLf => {
                (1, Outcome::Error("argument not followed by CRLF".into()))
            }
            State::Inline { .. } => (0, Outcome::More),
        }
    }

    fn next(&mut self, state: State) -> (usize, Outcome<Command>) {
        self.line.clear();
        self.state = state;
        (1, Outcome::More)
    }

    /// "*<count>" or "$<len>" line.
    fn length_line(&mut self, rest: &[u8]) -> (usize, Outcome<Command>) {
        let (used, done) = self.line.feed(rest, MAX_HEADER_LINE);
        if self.line.len() > MAX_HEADER_LINE {
            return (used, Outcome::Error("RESP length line too long".into()));
        }
        if !done {
            return (used, Outcome::More);
        }
        let Some(n) = parse_int(self.line.text()) else {
            return (used, Outcome::Error("bad RESP length in a command".into()));
        };
        let counting = self.state == State::Count;
        let limit = if counting { MAX_ARGS } else { MAX_BULK_LEN };
        match u64::try_from(n) {
            // Redis answers nothing to an empty multibulk.
            Ok(0) | Err(_) if counting => {
                self.state = State::Start;
                (used, Outcome::Skipped)
            }
            Ok(n) if n <= limit && counting => {
                self.argc = n;
                self.state = State::ArgType;
                (used, Outcome::More)
            }
            Ok(0) => {
                self.state = State::ArgCr;
                (used, Outcome::More)
            }
            Ok(n) if n <= limit => {
                self.state = State::ArgBody(n);
                (used, Outcome::More)
            }
            _ => (
                used,
                Outcome::Error(format!("invalid RESP length {n} in a command")),
            ),
        }
    }

    /// Inline command: words separated by blanks, up to '\n'.
    fn inline(&mut self, rest: &[u8], mut in_token: bool, len: usize) -> (usize, Outcome<Command>) {
        let blank = |b: &u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
        let b = rest[0];
        let used = if blank(&b) {
            if in_token {
                self.sink.end_arg();
                in_token = false;
            }
            1
        } else {
            let run = rest.iter().position(blank).unwrap_or(rest.len());
            self.sink.bytes(&rest[..run]);
            in_token = true;
            run
        };
        let len = len.saturating_add(used);
        if len > MAX_INLINE {
            return (
                used,
                Outcome::Error("inline command longer than 64 KiB".into()),
            );
        }
        if b != b'\n' {
            self.state = State::Inline { in_token, len };
            return (used, Outcome::More);
        }
        self.state = State::Start;
        if self.sink.index == 0 {
            return (used, Outcome::Skipped);
        }
        (used, Outcome::Done(self.sink.finish(&mut self.last)))
    }

    /// Bytes missing inside an argument that is only hashed: counted, the
    /// digest dropped, parsing goes on. False when the gap is elsewhere.
    pub fn skip_missing(&mut self, missing: u64) -> bool {
        match self.state {
            State::ArgBody(remaining) if missing <= remaining && self.sink.only_hashed() => {
                let remaining = remaining - missing;
                self.sink.lost = true;
                self.sink.len = self.sink.len.saturating_add(missing);
                self.state = if remaining == 0 {
                    State::ArgCr
                } else {
                    State::ArgBody(remaining)
                };
                true
            }
            _ => false,
        }
    }

    /// Bytes missing from inside the last argument through past the end of
    /// the command: the command is whole (its length was known), only its
    /// tail and the digest are lost. Returns it and the bytes of the gap that
    /// lie after it; None when the gap is elsewhere. A kept argument cut
    /// short stays cut: labels read the name and key, which came before.
    pub fn end_in_gap(&mut self, missing: u64) -> Option<(Command, u64)> {
        let last_arg = self.sink.index + 1 == self.argc;
        let tail = match self.state {
            State::ArgBody(remaining) if last_arg => remaining + 2,
            State::ArgCr if last_arg => 2,
            State::ArgLf if last_arg => 1,
            _ => return None,
        };
        if missing < tail {
            return None;
        }
        self.sink.lost = true;
        self.sink.end_arg();
        self.state = State::Start;
        Some((self.sink.finish(&mut self.last), missing - tail))
    }
}

/// `a == b`, inlined for the short names and keys nearly every command
/// has (up to 16 bytes: two overlapping loads each), where the slice
/// comparison is a call to memcmp.
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let u64_at = |s: &[u8], i: usize| u64::from_le_bytes(s[i..i + 8].try_into().expect("8"));
    let u32_at = |s: &[u8], i: usize| u32::from_le_bytes(s[i..i + 4].try_into().expect("4"));
    match n {
        0 => true,
        // Bytes 0, n/2 and n-1 cover every byte of 1 to 3.
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=7 => u32_at(a, 0) == u32_at(b, 0) && u32_at(a, n - 4) == u32_at(b, n - 4),
        8..=16 => u64_at(a, 0) == u64_at(b, 0) && u64_at(a, n - 8) == u64_at(b, n - 8),
        _ => a == b,
    }
}

/// Arguments of a whole command whose place the first pass remembers for
/// the second: a command name and a few keys or values.
const REMEMBERED_ARGS: usize = 8;

/// A "<kind><n>\r\n" line at `at` with 1 <= n <= max (0 too for bulk
/// lengths), as the states read it: the number and where the line ends.
/// Inlined for the usual one or two digits; the rest is a call away, so
/// the common case pays for no saved registers.
#[inline(always)]
fn length_at(data: &[u8], at: usize, kind: u8, max: u64) -> Option<(u64, usize)> {
    // One or two digits, the usual case (names, keys, small values), read
    // from five bytes fetched with one bound check.
    if let Some(&[k, d0, b2, b3, b4]) = data.get(at..at + 5) {
        let (d0, d1) = (d0.wrapping_sub(b'0'), b2.wrapping_sub(b'0'));
        if k == kind && d0 <= 9 {
            let (n, end) = match (b2, b3, b4) {
                (b'\r', b'\n', _) => (u64::from(d0), at + 4),
                (_, b'\r', b'\n') if d1 <= 9 && d0 > 0 => (u64::from(d0 * 10 + d1), at + 5),
                _ => return long_length_at(data, at, kind, max),
            };
            let counting = kind == b'*';
            return (n <= max && !(counting && n == 0)).then_some((n, end));
        }
    }
    long_length_at(data, at, kind, max)
}

/// `length_at` for the lines its inlined part leaves: more digits, a sign,
/// a bare LF, a line cut short.
#[cold]
#[inline(never)]
fn long_length_at(data: &[u8], at: usize, kind: u8, max: u64) -> Option<(u64, usize)> {
    let rest = data.get(at..)?;
    if rest.first() != Some(&kind) {
        return None;
    }
    // Plain digits and CRLF, as every client writes them, without a search;
    // anything else (a sign, a bare LF, a cut line) takes the general way.
    let mut n = 0u64;
    let mut end = 1;
    let digits_end = rest.len().min(MAX_FAST_DIGITS + 1);
    while end < digits_end {
        let d = rest[end].wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        n = n * 10 + u64::from(d);
        end += 1;
    }
    if end > 1 && rest.get(end..end + 2) == Some(b"\r\n") {
        let digits = end - 1;
        let counting = kind == b'*';
        if n > max || (counting && n == 0) {
            return None;
        }
        return Some((n, at + digits + 3));
    }
    let window = &rest[1..rest.len().min(MAX_HEADER_LINE + 2)];
    let nl = memchr::memchr(b'\n', window)?;
    let line = &window[..nl];
    if line.len() > MAX_HEADER_LINE {
        return None;
    }
    let text = line.strip_suffix(b"\r").unwrap_or(line);
    let n = u64::try_from(parse_int(text)?).ok()?;
    let counting = kind == b'*';
    if n > max || (counting && n == 0) {
        return None;
    }
    Some((n, at + 1 + nl + 1))
}

/// Digits the fast way reads: 18 cannot overflow a u64.
const MAX_FAST_DIGITS: usize = 18;

/// The end of a bulk body of `len` bytes at `body` and its CRLF.
fn body_end(data: &[u8], body: usize, len: u64) -> Option<usize> {
    let end = body.checked_add(usize::try_from(len).ok()?)?;
    (data.get(end..end + 2)? == b"\r\n").then_some(end + 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `length_at` must give: the line up to LF, CR dropped, parsed
    /// as the states parse it, within the limits.
    fn by_the_line(data: &[u8], kind: u8, max: u64) -> Option<(u64, usize)> {
        let (&k, rest) = data.split_first()?;
        let nl = rest.iter().position(|&b| b == b'\n')?;
        if k != kind || nl > MAX_HEADER_LINE {
            return None;
        }
        let line = &rest[..nl];
        let n = u64::try_from(parse_int(line.strip_suffix(b"\r").unwrap_or(line))?).ok()?;
        (n <= max && !(kind == b'*' && n == 0)).then_some((n, nl + 2))
    }

    #[test]
    fn bytes_compared_inline_equal_bytes_compared_whole() {
        let base: Vec<u8> = (0u8..40).collect();
        for n in 0..40 {
            let a = &base[..n];
            let copy = a.to_vec();
            assert!(same_bytes(a, &copy));
            assert!(!same_bytes(a, &base[..n + 1]));
            for i in 0..n {
                let mut b = a.to_vec();
                b[i] ^= 0x20;
                assert!(!same_bytes(a, &b), "{n} bytes, byte {i} differs");
            }
        }
    }

    #[test]
    fn length_lines_read_the_fast_way_equal_lines_read_whole() {
        let mut lines: Vec<Vec<u8>> = Vec::new();
        for n in 0..=120 {
            lines.push(format!("{n}\r\n").into_bytes());
            lines.push(format!("0{n}\r\n").into_bytes());
            lines.push(format!("{n}\n").into_bytes());
            lines.push(format!("-{n}\r\n").into_bytes());
        }
        lines.push(b"7\rx".to_vec());
        lines.push(b"1x\r\n".to_vec());
        for line in lines {
            for kind in [b'*', b'$'] {
                for max in [5, MAX_BULK_LEN] {
                    let mut data = vec![kind];
                    data.extend_from_slice(&line);
                    // Whole, followed by more bytes, and cut short.
                    let mut more = data.clone();
                    more.extend_from_slice(b"$3\r\nGET\r\n");
                    for d in [&data[..], &more[..], &data[..data.len() - 1]] {
                        assert_eq!(
                            length_at(d, 0, kind, max),
                            by_the_line(d, kind, max),
                            "{:?}",
                            String::from_utf8_lossy(d)
                        );
                    }
                }
            }
        }
    }
}
