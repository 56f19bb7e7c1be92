//! Is a client stream memcached? A known command word (case-sensitive, as
//! memcached reads it) followed by a space or CR LF, on a line that parses
//! as a complete valid command.

use super::command::{self, WORDS};
use crate::{Sniff, Start};

/// Most client bytes `sniff` is given (the sniffer's window).
use crate::sniff::SNIFF_BYTES as SNIFF_WINDOW;

/// First byte of a binary-protocol request (out of scope).
const BINARY_MAGIC: u8 = 0x80;

pub fn sniff(data: &[u8], start: Start) -> Sniff {
    if data.first() == Some(&BINARY_MAGIC) {
        return Sniff::No;
    }
    match start {
        Start::Beginning => line_at(data, false),
        Start::MidStream => mid_stream(data),
    }
}

/// A valid command at 0 or just after a CR LF. Commands without arguments
/// (`version`, `mn`, `stats`) are too short to trust mid-stream.
fn mid_stream(data: &[u8]) -> Sniff {
    let mut at = 0;
    loop {
        let rest = data.get(at..).unwrap_or_default();
        let next = rest.windows(2).position(|w| w == b"\r\n");
        match (line_at(rest, true), next) {
            (Sniff::Yes, _) => return Sniff::Yes,
            // Only a started candidate line is worth waiting for.
            (Sniff::NeedMore, None) if !rest.is_empty() && data.len() < SNIFF_WINDOW => {
                return Sniff::NeedMore
            }
            (_, None) => return Sniff::No,
            (_, Some(i)) => at += i + 2,
        }
    }
}

/// Does a command line start at `d[0]`?
fn line_at(d: &[u8], with_args: bool) -> Sniff {
    let Some(end) = d
        .iter()
        .position(|&b| b == b' ' || b == b'\r' || b == b'\n')
    else {
        let prefix = d.len() < 10 && WORDS.iter().any(|(w, _)| w.as_bytes().starts_with(d));
        return if prefix { Sniff::NeedMore } else { Sniff::No };
    };
    if command::kind_of(&d[..end]).is_none() {
        return Sniff::No;
    }
    match (d[end], d.get(end + 1)) {
        (b' ', _) => {}
        (b'\r', None) => return Sniff::NeedMore,
        (b'\r', Some(b'\n')) if !with_args => {}
        _ => return Sniff::No,
    }
    let Some(nl) = d.iter().position(|&b| b == b'\n') else {
        return if d.len() >= SNIFF_WINDOW && !with_args {
            Sniff::Yes
        } else {
            Sniff::NeedMore
        };
    };
    let line = d[..nl].strip_suffix(b"\r").unwrap_or(&d[..nl]);
    if command::parse(line).is_some() {
        Sniff::Yes
    } else {
        Sniff::No
    }
}
