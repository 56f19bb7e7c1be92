//! Finding the next HTTP/1 message start in bytes that may begin anywhere:
//! after a capture gap, or in a capture that began mid-connection. A message
//! starts at a line start with a request line (client) or a status line (server).

use super::Http1Analyzer;
use crate::Sniff;

/// Where a hunt for a line start stands between chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hunt {
    /// Not hunting: the stream is in step.
    Off,
    /// The next byte starts a line.
    AtLineStart,
    /// Inside a line: a start can only follow the next LF.
    InLine,
    /// Right after bytes the capture lost: the next byte may be anywhere in
    /// a message, so it starts one only with a whole start line (a request
    /// line naming HTTP/1, a status line with its code); else as `InLine`.
    AfterGap,
}

/// A status line starts with the version (RFC 9112 §4).
const STATUS_LINE: &[u8] = b"HTTP/1.";

fn is_start(rest: &[u8], request: bool) -> bool {
    if request {
        Http1Analyzer::looks_like_request(rest) == Some(true)
    } else {
        rest.get(..STATUS_LINE.len())
            .is_some_and(|v| v.eq_ignore_ascii_case(STATUS_LINE))
    }
}

/// The first message start in `data` and the hunt state after `data` when
/// none is found. A start split across two chunks is missed (the hunt goes
/// on to the next one).
pub fn find_start(hunt: Hunt, data: &[u8], request: bool) -> (Option<usize>, Hunt) {
    if hunt == Hunt::AtLineStart && is_start(data, request) {
        return (Some(0), Hunt::Off);
    }
    if hunt == Hunt::AfterGap && is_whole_start_line(data, request) {
        return (Some(0), Hunt::Off);
    }
    let mut from = 0;
    while let Some(nl) = data[from..].iter().position(|&b| b == b'\n') {
        let at = from + nl + 1;
        if is_start(&data[at..], request) {
            return (Some(at), Hunt::Off);
        }
        from = at;
    }
    let next = if data.last() == Some(&b'\n') {
        Hunt::AtLineStart
    } else if data.is_empty() {
        hunt
    } else {
        Hunt::InLine
    };
    (None, next)
}

/// Whether `data` begins with a whole start line: a request line whose
/// version is HTTP/1, or `HTTP/1.x NNN`. Body bytes rarely do.
fn is_whole_start_line(data: &[u8], request: bool) -> bool {
    let Some(end) = data.iter().position(|&b| b == b'\n') else {
        return false;
    };
    let line = &data[..end];
    if request {
        is_start(line, true) && line.windows(7).any(|w| w == b" HTTP/1")
    } else {
        let code = line.get(STATUS_LINE.len() + 1..STATUS_LINE.len() + 5);
        let digits = code.is_some_and(|c| c[0] == b' ' && c[1..].iter().all(u8::is_ascii_digit));
        is_start(line, false) && digits
    }
}

/// Mid-stream sniffing: a request line with its HTTP/1 version at a line
/// start somewhere in the first client bytes.
pub fn sniff_mid_stream(client: &[u8]) -> Sniff {
    let mut hunt = Hunt::AtLineStart;
    let mut rest = client;
    loop {
        let (found, _) = find_start(hunt, rest, true);
        let Some(at) = found else {
            return Sniff::NeedMore;
        };
        let line = &rest[at..];
        let Some(end) = line.iter().position(|&b| b == b'\n') else {
            return Sniff::NeedMore;
        };
        if line[..end].windows(7).any(|w| w == b" HTTP/1") {
            return Sniff::Yes;
        }
        rest = &line[1..];
        hunt = Hunt::InLine;
    }
}
