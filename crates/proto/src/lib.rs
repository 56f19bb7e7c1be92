//! Protocol analyzers: reassembled TCP byte streams → `Exchange`s.
//! One analyzer per protocol behind one interface (`StreamAnalyzer`), each
//! fed incrementally so memory does not grow with the size of values or the
//! length of a connection; `sniff` picks the analyzer from a stream's first
//! bytes. Callers (the flow table) name no protocol.

pub mod digest;
pub mod dns;
pub mod fuzz;
pub mod http1;
pub mod http2;
pub mod memcached;
pub mod mysql;
pub mod normalize;
pub mod postgres;
pub mod redis;
pub mod sniff;
mod span;
#[cfg(test)]
mod testkit;
pub mod tls;
pub mod trace_context;

pub use sniff::Sniffer;

pub use span::Span;

use whyslow_model::{Direction, Exchange, Protocol, SmolStr};

/// Moves the exchanges of an analyzer's `done` to the end of `out`: the
/// body of every `drain_exchanges`. It runs after each segment and most
/// segments complete nothing, so an empty `done` returns at once.
#[inline]
pub(crate) fn hand_over(done: &mut Vec<Exchange>, out: &mut Vec<Exchange>) {
    if !done.is_empty() {
        out.append(done);
    }
}

/// `bytes` as text, invalid UTF-8 replaced by U+FFFD, borrowed when valid.
/// `String::from_utf8_lossy` checks a byte at a time; `from_utf8` checks
/// ASCII a word at a time, and SQL texts are nearly always ASCII.
pub(crate) fn lossy_text(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// An incremental analyzer for one connection. The flow reassembler calls
/// `on_data` with in-order bytes per direction, `on_gap` when bytes were never
/// captured, and `finish` at the end of the connection or capture.
pub trait StreamAnalyzer {
    /// `at_us`/`packet`: capture time and number of the segment that carried `data`.
    fn on_data(&mut self, direction: Direction, data: &[u8], at_us: u64, packet: u64);
    /// As `on_data`, then `drain_exchanges` into `out`. An analyzer that
    /// builds its exchanges in place (`built_in`) builds them in `out`
    /// itself: an exchange is large, and one moved again is a copy.
    fn on_data_into(
        &mut self,
        direction: Direction,
        data: &[u8],
        at_us: u64,
        packet: u64,
        out: &mut Vec<Exchange>,
    ) {
        let Some(done) = self.built_in() else {
            self.on_data(direction, data, at_us, packet);
            self.drain_exchanges(out);
            return;
        };
        // `out` stands in for the analyzer's own vector while it runs,
        // after what that vector held.
        hand_over(done, out);
        std::mem::swap(done, out);
        self.on_data(direction, data, at_us, packet);
        if let Some(done) = self.built_in() {
            std::mem::swap(done, out);
        }
    }
    /// The vector an analyzer builds its exchanges in, when they go
    /// nowhere else (only through `push_exchange`): `on_data_into` lends
    /// the caller's in its place.
    fn built_in(&mut self) -> Option<&mut Vec<Exchange>> {
        None
    }
    /// Bytes missing from the capture in this direction; the analyzer
    /// resynchronizes on a later message boundary, or gives up on the stream.
    fn on_gap(&mut self, direction: Direction, missing: u64);
    /// Exchanges completed so far are appended to `out` (ids not yet
    /// assigned: 0); the analyzer keeps its own buffer for the next ones.
    fn drain_exchanges(&mut self, out: &mut Vec<Exchange>);
    /// As `drain_exchanges`, into a new vector.
    fn take_exchanges(&mut self) -> Vec<Exchange> {
        let mut out = Vec::new();
        self.drain_exchanges(&mut out);
        out
    }
    /// End of the connection: flush a partial exchange, if any.
    fn finish(&mut self) -> Vec<Exchange>;
    /// First problem met on this stream (parse error, resynchronization),
    /// if any: a note for the report. Exchanges before it are kept.
    fn error(&self) -> Option<&str>;
    /// The stream asked for TLS in-band and the server agreed (PostgreSQL's
    /// SSLRequest answered `S`): what follows is a TLS handshake.
    fn tls_follows(&self) -> bool {
        false
    }
    /// First-byte time of the oldest request not yet taken as an exchange
    /// (unanswered, or partly read), None when none is open. A windowed
    /// analysis cuts before it, so that a request and the calls made for it
    /// land in the same window.
    fn open_since(&self) -> Option<u64>;
}

/// The earlier of two optional times.
pub fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Appends a new exchange to `done` and gives it back to be filled in where
/// it is kept: an exchange is large, and one built aside (even as a
/// function's argument) is copied in with a call to memcpy.
pub(crate) fn push_exchange(
    done: &mut Vec<Exchange>,
    connection: u32,
    protocol: Protocol,
    request: SmolStr,
) -> &mut Exchange {
    done.reserve(1);
    let at = done.len();
    // SAFETY: `reserve` made room for one more; the slot is written whole
    // before the length covers it, and nothing between can panic.
    unsafe {
        done.as_mut_ptr()
            .add(at)
            .write(Exchange::new(connection, protocol, request));
        done.set_len(at + 1);
    }
    &mut done[at]
}

/// Where in a connection an analyzer starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// At the first byte of the connection (its handshake was captured).
    Beginning,
    /// Somewhere in the middle (the capture began after the handshake): the
    /// analyzer skips bytes until a message boundary it can trust.
    MidStream,
}

/// An analyzer's answer to "are these the first client bytes of your protocol?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sniff {
    Yes,
    No,
    /// Too few bytes to tell.
    NeedMore,
}

/// The memory bounds of the protocol analyzers, per connection, for
/// `analyze --help`. In total they are bounded by the flows tracked at once.
pub fn bounds_help() -> String {
    use crate::redis as rs;
    use crate::{http1 as h1, http2 as h2, memcached as mc, mysql as my, postgres as pg};
    let kib = |n: usize| n / 1024;
    let lines = [
        "Protocol analyzers (per connection; at most --max-flows connections at once):".to_string(),
        format!(
            "  sniffing       first {} KiB of client bytes looked at, at most {} KiB held",
            kib(sniff::SNIFF_BYTES),
            kib(sniff::HELD_BYTES)
        ),
        format!(
            "  HTTP/1         head {} KiB, {} unanswered requests, last head of {} bytes each way \
             remembered; bodies counted, never kept",
            kib(h1::MAX_HEAD_BYTES),
            h1::MAX_OUTSTANDING,
            h1::HEAD_MEMO_BYTES
        ),
        format!(
            "  HTTP/2         header block {} KiB, HPACK table {} KiB, {} open streams",
            kib(h2::MAX_HEADER_BLOCK),
            kib(h2::MAX_TABLE_BYTES),
            h2::MAX_OPEN_STREAMS
        ),
        format!(
            "  Redis          {} args of {} KiB kept, nesting {}, {} unanswered; values skipped by length",
            rs::MAX_KEPT_ARGS,
            kib(rs::MAX_ARG_BYTES),
            rs::MAX_DEPTH,
            rs::MAX_PENDING
        ),
        format!(
            "  PostgreSQL     query text {} KiB, {} named statements, {} unanswered, {} statement shapes of {} bytes; rows skipped by length",
            kib(pg::MAX_QUERY_TEXT),
            pg::MAX_STATEMENTS,
            pg::MAX_PENDING,
            crate::normalize::MEMO_SHAPES,
            crate::normalize::MAX_SHAPE
        ),
        format!(
            "  MySQL          query text {} KiB, {} prepared statements, {} unanswered; rows skipped by length",
            kib(my::MAX_QUERY_TEXT),
            my::MAX_STATEMENTS,
            my::MAX_PENDING
        ),
        format!(
            "  memcached      line {} KiB, {} unanswered requests; values skipped by length",
            kib(mc::MAX_LINE),
            mc::MAX_PENDING
        ),
    ];
    lines.join("\n")
}

#[cfg(test)]
mod lossy_text_tests {
    use super::lossy_text;

    #[test]
    fn text_is_what_from_utf8_lossy_gives_borrowed_when_valid() {
        let cases: [&[u8]; 6] = [
            b"SELECT 1",
            "SELECT 'é'".as_bytes(),
            b"SELECT '\xff'",
            b"\xe2\x82",
            b"",
            b"a\xc3\x28b",
        ];
        for bytes in cases {
            let text = lossy_text(bytes);
            assert_eq!(text, String::from_utf8_lossy(bytes), "{bytes:?}");
            let valid = std::str::from_utf8(bytes).is_ok();
            assert_eq!(matches!(text, std::borrow::Cow::Borrowed(_)), valid);
        }
    }
}
