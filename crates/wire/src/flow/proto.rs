//! Choosing a protocol analyzer from the first client bytes of a flow.

use whyslow_model::{Direction, Exchange};
use whyslow_proto::http1::Http1Analyzer;
use whyslow_proto::StreamAnalyzer;

/// Client bytes kept while the protocol is undecided: enough for the longest
/// HTTP method plus a space ("OPTIONS ", "CONNECT ") and a TLS record header.
const SNIFF_BYTES: usize = 16;

/// TLS record type handshake (RFC 8446 §5.1) followed by major version 3.
const TLS_HANDSHAKE: u8 = 0x16;
const TLS_MAJOR: u8 = 0x03;

pub enum Proto {
    /// Client bytes seen so far, with the time and packet of each chunk.
    Undecided(Vec<(Vec<u8>, u64, u64)>),
    Http1(Box<Http1Analyzer>),
    Tls,
    Unknown,
}

impl Proto {
    pub fn new() -> Self {
        Proto::Undecided(Vec::new())
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, Proto::Tls)
    }

    /// Feeds in-order bytes; decides the protocol on the first client bytes.
    pub fn on_data(&mut self, conn: u32, dir: Direction, data: &[u8], at: u64, pkt: u64) {
        if let Proto::Undecided(seen) = self {
            if dir == Direction::ToClient {
                // The server spoke first: not HTTP/1 nor TLS.
                *self = Proto::Unknown;
                return;
            }
            seen.push((data.to_vec(), at, pkt));
            let mut head: Vec<u8> = seen
                .iter()
                .flat_map(|(d, _, _)| d.iter().copied())
                .collect();
            head.truncate(SNIFF_BYTES);
            let Some(next) = decide(&head, conn) else {
                if head.len() >= SNIFF_BYTES {
                    *self = Proto::Unknown;
                }
                return;
            };
            let seen = std::mem::take(seen);
            *self = next;
            if let Proto::Http1(a) = self {
                for (d, at, pkt) in seen {
                    a.on_data(Direction::ToServer, &d, at, pkt);
                }
            }
            return;
        }
        if let Proto::Http1(a) = self {
            a.on_data(dir, data, at, pkt);
        }
    }

    pub fn on_gap(&mut self, dir: Direction, missing: u64) {
        match self {
            Proto::Undecided(_) => *self = Proto::Unknown,
            Proto::Http1(a) => a.on_gap(dir, missing),
            _ => {}
        }
    }

    /// Moves completed exchanges to `out`.
    pub fn drain_exchanges(&mut self, out: &mut Vec<Exchange>) {
        if let Proto::Http1(a) = self {
            a.drain_exchanges(out);
        }
    }

    pub fn take_exchanges(&mut self) -> Vec<Exchange> {
        match self {
            Proto::Http1(a) => a.take_exchanges(),
            _ => Vec::new(),
        }
    }

    /// Ends the stream; returns the last exchanges and the parse error, if any.
    pub fn finish(&mut self) -> (Vec<Exchange>, Option<String>) {
        match self {
            Proto::Http1(a) => {
                let ex = a.finish();
                (ex, a.error().map(str::to_string))
            }
            _ => (Vec::new(), None),
        }
    }
}

fn decide(head: &[u8], conn: u32) -> Option<Proto> {
    match head {
        [] | [TLS_HANDSHAKE] => return None,
        [TLS_HANDSHAKE, TLS_MAJOR, ..] => return Some(Proto::Tls),
        _ => {}
    }
    match Http1Analyzer::looks_like_request(head)? {
        true => Some(Proto::Http1(Box::new(Http1Analyzer::new(conn)))),
        false => Some(Proto::Unknown),
    }
}
