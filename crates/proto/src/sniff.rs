//! Choosing the analyzer for a TCP stream from its first client bytes. Ports
//! are only a hint: they decide which protocol is asked first, never which
//! one is chosen. Bytes seen while undecided are kept (bounded) and replayed
//! into the chosen analyzer, so no exchange is lost to sniffing.

use crate::dns::DnsAnalyzer;
use crate::http1::Http1Analyzer;
use crate::http2::Http2Analyzer;
use crate::memcached::MemcachedAnalyzer;
use crate::mysql::MysqlAnalyzer;
use crate::postgres::PgAnalyzer;
use crate::redis::RespAnalyzer;
use crate::tls::{KeyLog, TlsAnalyzer, TlsFacts};
use crate::{Sniff, Start, StreamAnalyzer};
use std::sync::Arc;
use whyslow_model::{Direction, Exchange, Protocol};

/// Client bytes looked at before giving up: an HTTP/1 request line, a RESP
/// array head or a PostgreSQL startup message fit many times over, and a
/// mid-stream capture gets a few messages to find a boundary in.
pub const SNIFF_BYTES: usize = 4096;
/// Bytes (both directions) held for replay while undecided: a mid-stream
/// capture may show the server's bytes first.
pub const HELD_BYTES: usize = 2 * SNIFF_BYTES;

/// TLS record content types (RFC 8446 §5.1): change_cipher_spec 20 to
/// application_data 23; handshake 22 starts a connection.
const TLS_HANDSHAKE: u8 = 22;
const TLS_TYPES: std::ops::RangeInclusive<u8> = 20..=23;
/// TLS record versions 3.1–3.4 (TLS 1.0–1.3 record layer; 1.3 writes 3.3).
const TLS_MAJOR: u8 = 3;
const TLS_MINORS: std::ops::RangeInclusive<u8> = 1..=4;

/// Well-known server ports, asked first (IANA and each server's default).
const PORT_HINTS: &[(u16, Protocol)] = &[
    (5432, Protocol::Postgres),
    (6379, Protocol::Redis),
    (6380, Protocol::Redis),
    (11211, Protocol::Memcached),
    (3306, Protocol::Mysql),
    (53, Protocol::Dns),
];

/// The protocols asked, in this order unless a port hint says otherwise:
/// the most distinctive first openings come first.
const ORDER: [Protocol; 7] = [
    Protocol::Http2,
    Protocol::Http1,
    Protocol::Postgres,
    Protocol::Redis,
    Protocol::Memcached,
    Protocol::Mysql,
    Protocol::Dns,
];

/// For a connection first seen mid-stream (no SYN): whether the sender of
/// `payload` is the client. Some(true) for an HTTP/1 request line, the
/// HTTP/2 preface or a backing protocol's request; Some(false) for an HTTP/1
/// status line or a backing protocol's reply; None when the bytes do not
/// tell (the caller falls back to what it knows of ports). Persistent
/// connections to caches and databases are opened before most captures
/// start, often between two ephemeral ports.
pub fn sender_is_client(payload: &[u8]) -> Option<bool> {
    if payload.starts_with(b"HTTP/1.") {
        return Some(false);
    }
    if payload.starts_with(b"PRI * HTTP/2.0") {
        return Some(true);
    }
    if Http1Analyzer::looks_like_request(payload) == Some(true) {
        return Some(true);
    }
    crate::redis::sender_is_client(payload)
        .or_else(|| crate::memcached::sender_is_client(payload))
        .or_else(|| crate::postgres::sender_is_client(payload))
        .or_else(|| crate::mysql::sender_is_client(payload))
        .or_else(|| crate::http2::sender_is_client(payload))
}

/// One chunk held while undecided.
struct Held {
    direction: Direction,
    data: Vec<u8>,
    at_us: u64,
    packet: u64,
}

enum State {
    Undecided {
        held: Vec<Held>,
        bytes: usize,
    },
    Http1(Box<Http1Analyzer>),
    Tls(Box<TlsAnalyzer>),
    Other(Box<dyn StreamAnalyzer + Send>),
    /// Nothing to parse (TLS, an unknown protocol, or sniffing gave up).
    Opaque,
}

/// The protocol layer of one connection: sniffs, then feeds the analyzer.
pub struct Sniffer {
    connection: u32,
    server_port: u16,
    start: Start,
    protocol: Protocol,
    state: State,
    /// Notes of analyzers replaced on the way (HTTP/1 before an h2c upgrade).
    earlier_note: Option<String>,
    done: Vec<Exchange>,
    /// TLS session secrets, to see inside TLS streams.
    keys: Option<Arc<KeyLog>>,
}

impl Sniffer {
    pub fn new(connection: u32, server_port: u16, start: Start) -> Self {
        Sniffer::with_keys(connection, server_port, start, None)
    }

    /// A UDP flow of DNS datagrams (each one length-prefixed message):
    /// nothing to sniff.
    pub fn dns(connection: u32) -> Self {
        let mut s = Sniffer::new(connection, 53, Start::Beginning);
        s.state = State::Other(Box::new(DnsAnalyzer::datagrams(connection)));
        s.protocol = Protocol::Dns;
        s
    }

    /// As `new`; a TLS stream is decrypted with `keys` when they hold its session.
    pub fn with_keys(
        connection: u32,
        server_port: u16,
        start: Start,
        keys: Option<Arc<KeyLog>>,
    ) -> Self {
        Sniffer {
            keys,
            connection,
            server_port,
            start,
            protocol: Protocol::Unknown,
            state: State::Undecided {
                held: Vec::new(),
                bytes: 0,
            },
            earlier_note: None,
            done: Vec::new(),
        }
    }

    /// What the stream was found to carry (`Unknown` while undecided); for
    /// TLS, what its plaintext carries once decrypted.
    pub fn protocol(&self) -> Protocol {
        match &self.state {
            State::Tls(t) => t.inner_protocol().unwrap_or(Protocol::Tls),
            _ => self.protocol,
        }
    }

    /// The TLS handshake's facts, for a TLS stream.
    pub fn tls_facts(&self) -> Option<&TlsFacts> {
        match &self.state {
            State::Tls(t) => Some(t.facts()),
            _ => None,
        }
    }

    fn hold(&mut self, direction: Direction, data: &[u8], at_us: u64, packet: u64) {
        let State::Undecided { held, bytes } = &mut self.state else {
            return;
        };
        // Whole chunks are held (one packet at most past the bound), so the
        // analyzer chosen sees every byte.
        *bytes += data.len();
        held.push(Held {
            direction,
            data: data.to_vec(),
            at_us,
            packet,
        });
        let client = client_bytes(held);
        let full = client.len() >= SNIFF_BYTES || *bytes >= HELD_BYTES;
        if client.is_empty() {
            // The server may speak first: a MySQL greeting tells its
            // protocol; an HTTP/2 server's SETTINGS on accept does not, and
            // other server-first protocols fill the bound and stay opaque.
            match MysqlAnalyzer::sniff_greeting(&server_bytes(held)) {
                Sniff::Yes => return self.choose(Protocol::Mysql),
                Sniff::NeedMore if !full => return,
                _ => {}
            }
            if full {
                self.become_opaque(Protocol::Unknown);
            }
            return;
        }
        match decide(&client, self.start, self.server_port, full) {
            Some(p) => self.choose(p),
            None if full => self.become_opaque(Protocol::Unknown),
            None => {}
        }
    }

    fn become_opaque(&mut self, protocol: Protocol) {
        self.protocol = protocol;
        self.state = State::Opaque;
    }

    /// Starts the analyzer for `p` and replays the held bytes into it.
    fn choose(&mut self, p: Protocol) {
        let (c, start) = (self.connection, self.start);
        let next = match p {
            Protocol::Http1 => State::Http1(Box::new(Http1Analyzer::with_start(c, start))),
            Protocol::Http2 => State::Other(Box::new(Http2Analyzer::new(c, start))),
            Protocol::Postgres => State::Other(Box::new(PgAnalyzer::new(c, start))),
            Protocol::Redis => State::Other(Box::new(RespAnalyzer::new(c, start))),
            Protocol::Memcached => State::Other(Box::new(MemcachedAnalyzer::new(c, start))),
            Protocol::Mysql => State::Other(Box::new(MysqlAnalyzer::new(c, start))),
            Protocol::Dns => State::Other(Box::new(DnsAnalyzer::new(c, start))),
            Protocol::Tls => State::Tls(Box::new(TlsAnalyzer::new(
                c,
                self.server_port,
                start,
                self.keys.clone(),
            ))),
            Protocol::Unknown => State::Opaque,
        };
        self.protocol = p;
        let State::Undecided { held, .. } = std::mem::replace(&mut self.state, next) else {
            return;
        };
        for h in held {
            self.feed(h.direction, &h.data, h.at_us, h.packet);
        }
    }

    fn feed(&mut self, direction: Direction, data: &[u8], at_us: u64, packet: u64) {
        match &mut self.state {
            State::Http1(a) => {
                a.on_data(direction, data, at_us, packet);
                if let Some(up) = a.take_h2c_upgrade() {
                    self.upgrade_to_h2c(up);
                }
            }
            State::Tls(a) => a.on_data(direction, data, at_us, packet),
            State::Other(a) => {
                a.on_data(direction, data, at_us, packet);
                if a.tls_follows() {
                    self.start_tls();
                }
            }
            State::Undecided { .. } | State::Opaque => {}
        }
    }

    /// TLS negotiated in-band: the analyzer's exchanges so far are kept and
    /// the rest of the stream, from its ClientHello, goes to TLS (whose inner
    /// sniffer finds the protocol again in the plaintext). The server's
    /// one-byte answer ends its segment: the client speaks next.
    fn start_tls(&mut self) {
        let State::Other(mut old) = std::mem::replace(&mut self.state, State::Opaque) else {
            return;
        };
        self.done.append(&mut old.finish());
        let (c, port, keys) = (self.connection, self.server_port, self.keys.clone());
        let tls = TlsAnalyzer::new(c, port, Start::Beginning, keys);
        self.state = State::Tls(Box::new(tls));
        self.protocol = Protocol::Tls;
    }

    /// HTTP/1.1 `Upgrade: h2c` answered 101: the rest of the stream is HTTP/2.
    fn upgrade_to_h2c(&mut self, up: crate::http1::H2cUpgrade) {
        let State::Http1(mut old) = std::mem::replace(&mut self.state, State::Opaque) else {
            return;
        };
        self.done.append(&mut old.finish());
        self.earlier_note = old.error().map(str::to_string);
        let h2 =
            Http2Analyzer::after_h2c_upgrade(self.connection, up.label.to_string(), up.request);
        self.state = State::Other(Box::new(h2));
        self.protocol = Protocol::Http2;
        for (direction, data, at_us, packet) in up.leftover {
            self.feed(direction, &data, at_us, packet);
        }
    }

    fn analyzer(&mut self) -> Option<&mut dyn StreamAnalyzer> {
        match &mut self.state {
            State::Http1(a) => Some(a.as_mut()),
            State::Tls(a) => Some(a.as_mut()),
            State::Other(a) => Some(a.as_mut()),
            State::Undecided { .. } | State::Opaque => None,
        }
    }
}

/// The first server bytes among the held chunks (a greeting fits in 128).
fn server_bytes(held: &[Held]) -> Vec<u8> {
    held.iter()
        .filter(|h| h.direction == Direction::ToClient)
        .flat_map(|h| h.data.iter().copied())
        .take(128)
        .collect()
}

/// The first `SNIFF_BYTES` client bytes among the held chunks.
fn client_bytes(held: &[Held]) -> Vec<u8> {
    held.iter()
        .filter(|h| h.direction == Direction::ToServer)
        .flat_map(|h| h.data.iter().copied())
        .take(SNIFF_BYTES)
        .collect()
}

/// The protocol of a stream whose first client bytes are `client`, or `None`
/// while some analyzer needs more bytes to tell. `last`: no more bytes will
/// come, so "need more" means no.
fn decide(client: &[u8], start: Start, server_port: u16, last: bool) -> Option<Protocol> {
    match tls(client, start) {
        Some(Some(_)) => return Some(Protocol::Tls),
        Some(None) if !last => return None,
        _ => {}
    }
    let hinted = PORT_HINTS
        .iter()
        .find(|(port, _)| *port == server_port)
        .map(|(_, p)| *p);
    let mut undecided = false;
    for p in hinted
        .into_iter()
        .chain(ORDER.into_iter().filter(|p| Some(*p) != hinted))
    {
        match sniff(p, client, start) {
            Sniff::Yes => return Some(p),
            Sniff::NeedMore => undecided = !last,
            Sniff::No => {}
        }
        // A hinted protocol that needs more bytes is waited for before others answer.
        if undecided && Some(p) == hinted {
            return None;
        }
    }
    (!undecided).then_some(Protocol::Unknown)
}

/// Some(true) for a TLS record at the start, None while one byte short.
fn tls(client: &[u8], start: Start) -> Option<Option<bool>> {
    let first_ok = match start {
        Start::Beginning => client[0] == TLS_HANDSHAKE,
        Start::MidStream => TLS_TYPES.contains(&client[0]),
    };
    if !first_ok {
        return None;
    }
    match client {
        [_] | [_, TLS_MAJOR] => Some(None),
        [_, TLS_MAJOR, minor, ..] if TLS_MINORS.contains(minor) => Some(Some(true)),
        _ => None,
    }
}

fn sniff(p: Protocol, client: &[u8], start: Start) -> Sniff {
    match p {
        Protocol::Http1 => Http1Analyzer::sniff(client, start),
        Protocol::Http2 => Http2Analyzer::sniff(client, start),
        Protocol::Postgres => PgAnalyzer::sniff(client, start),
        Protocol::Redis => RespAnalyzer::sniff(client, start),
        Protocol::Memcached => MemcachedAnalyzer::sniff(client, start),
        Protocol::Mysql => MysqlAnalyzer::sniff(client, start),
        Protocol::Dns => DnsAnalyzer::sniff(client, start),
        Protocol::Tls | Protocol::Unknown => Sniff::No,
    }
}

impl StreamAnalyzer for Sniffer {
    fn on_data(&mut self, direction: Direction, data: &[u8], at_us: u64, packet: u64) {
        if matches!(self.state, State::Undecided { .. }) {
            self.hold(direction, data, at_us, packet);
        } else {
            self.feed(direction, data, at_us, packet);
        }
    }

    /// Redis and PostgreSQL (`Other`) build their exchanges in `out`.
    fn on_data_into(
        &mut self,
        direction: Direction,
        data: &[u8],
        at_us: u64,
        packet: u64,
        out: &mut Vec<Exchange>,
    ) {
        crate::hand_over(&mut self.done, out);
        match &mut self.state {
            State::Other(a) => {
                a.on_data_into(direction, data, at_us, packet, out);
                if a.tls_follows() {
                    self.start_tls();
                }
            }
            _ => self.on_data(direction, data, at_us, packet),
        }
        self.drain_exchanges(out);
    }

    fn on_gap(&mut self, direction: Direction, missing: u64) {
        match &mut self.state {
            // Bytes before the gap were too few to tell; what follows is mid-stream.
            State::Undecided { held, bytes } => {
                held.clear();
                *bytes = 0;
                self.start = Start::MidStream;
            }
            State::Http1(a) => a.on_gap(direction, missing),
            State::Tls(a) => a.on_gap(direction, missing),
            State::Other(a) => a.on_gap(direction, missing),
            State::Opaque => {}
        }
    }

    fn drain_exchanges(&mut self, out: &mut Vec<Exchange>) {
        crate::hand_over(&mut self.done, out);
        if let Some(a) = self.analyzer() {
            a.drain_exchanges(out);
        }
    }

    fn finish(&mut self) -> Vec<Exchange> {
        if let State::Undecided { held, .. } = &self.state {
            // The stream ended before sniffing could tell: decide on what is there.
            let client = client_bytes(held);
            match (!client.is_empty())
                .then(|| decide(&client, self.start, self.server_port, true))
                .flatten()
            {
                Some(p) => self.choose(p),
                None => self.become_opaque(Protocol::Unknown),
            }
        }
        let mut out = std::mem::take(&mut self.done);
        if let Some(a) = self.analyzer() {
            a.drain_exchanges(&mut out);
            out.extend(a.finish());
        }
        out
    }

    fn open_since(&self) -> Option<u64> {
        match &self.state {
            State::Undecided { held, .. } => held
                .iter()
                .filter(|h| h.direction == Direction::ToServer)
                .map(|h| h.at_us)
                .min(),
            State::Http1(a) => a.open_since(),
            State::Tls(a) => a.open_since(),
            State::Other(a) => a.open_since(),
            State::Opaque => None,
        }
    }

    fn error(&self) -> Option<&str> {
        match &self.state {
            State::Http1(a) => a.error(),
            State::Tls(a) => a.error(),
            State::Other(a) => a.error(),
            _ => None,
        }
        .or(self.earlier_note.as_deref())
    }
}

#[cfg(test)]
mod side_tests {
    use super::sender_is_client;

    #[test]
    fn http_openings_tell_the_sides_apart() {
        assert_eq!(sender_is_client(b"GET /rate HTTP/1.1\r\n"), Some(true));
        assert_eq!(sender_is_client(b"HTTP/1.1 200 OK\r\n"), Some(false));
        assert_eq!(
            sender_is_client(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
            Some(true)
        );
        assert_eq!(sender_is_client(b""), None);
        assert_eq!(sender_is_client(b"xxxxxxxx"), None);
    }

    #[test]
    fn backing_protocol_openings_tell_the_sides_apart() {
        // RESP: a command (the head of a large SET), then replies.
        let set = b"*3\r\n$3\r\nSET\r\n$16\r\nstash:product:42\r\n$16777216\r\nxxxx";
        assert_eq!(sender_is_client(set), Some(true));
        assert_eq!(
            sender_is_client(b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n"),
            Some(true)
        );
        for reply in [
            &b"+OK\r\n"[..],
            b"$-1\r\n",
            b"$5\r\nhello\r\n",
            b":12\r\n",
            b"-ERR x\r\n",
        ] {
            assert_eq!(sender_is_client(reply), Some(false), "{reply:?}");
        }
        // memcached text.
        assert_eq!(sender_is_client(b"get hot:config\r\n"), Some(true));
        assert_eq!(sender_is_client(b"set k 0 0 5\r\nhello\r\n"), Some(true));
        assert_eq!(sender_is_client(b"STORED\r\n"), Some(false));
        assert_eq!(
            sender_is_client(b"VALUE k 0 2\r\nok\r\nEND\r\n"),
            Some(false)
        );
        assert_eq!(sender_is_client(b"42\r\n"), None);
        // PostgreSQL: a simple query, then ReadyForQuery.
        assert_eq!(sender_is_client(b"Q\0\0\0\x0eSELECT 1;\0"), Some(true));
        assert_eq!(sender_is_client(b"Z\0\0\0\x05I"), Some(false));
        assert_eq!(sender_is_client(b"Z\0\0\0\x09I"), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first(bytes: &[u8], port: u16) -> Option<Protocol> {
        decide(bytes, Start::Beginning, port, false)
    }

    #[test]
    fn http1_and_tls_from_their_first_bytes() {
        assert_eq!(first(b"GET / HTTP/1.1\r\n", 9999), Some(Protocol::Http1));
        assert_eq!(first(b"\x16\x03\x01\x02\x00", 443), Some(Protocol::Tls));
        assert_eq!(first(b"\x16", 443), None);
        assert_eq!(first(b"GE", 80), None);
    }

    #[test]
    fn replayed_bytes_become_exchanges() {
        let mut s = Sniffer::new(3, 8080, Start::Beginning);
        s.on_data(Direction::ToServer, b"GE", 10, 1);
        s.on_data(Direction::ToServer, b"T /a HTTP/1.1\r\n\r\n", 20, 2);
        s.on_data(
            Direction::ToClient,
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
            30,
            3,
        );
        let ex = s.finish();
        assert_eq!(s.protocol(), Protocol::Http1);
        assert_eq!(ex.len(), 1);
        assert_eq!(ex[0].request, "GET /a");
        assert_eq!(ex[0].request_first_at_us, 10);
    }

    #[test]
    fn a_server_that_speaks_first_waits_for_the_client() {
        let settings = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00";
        let mut s = Sniffer::new(1, 8080, Start::Beginning);
        s.on_data(Direction::ToClient, settings, 1, 1);
        s.on_data(
            Direction::ToServer,
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            2,
            2,
        );
        assert_eq!(s.protocol(), Protocol::Http2);
        // A server-first protocol that never hears from the client stays opaque.
        let mut s = Sniffer::new(1, 3306, Start::Beginning);
        for i in 0..10 {
            s.on_data(Direction::ToClient, &[0x4a; 1000], i, i);
        }
        assert!(matches!(s.state, State::Opaque));
        assert!(s.finish().is_empty());
    }

    #[test]
    fn garbage_gives_up_within_the_bound() {
        let mut s = Sniffer::new(1, 1234, Start::MidStream);
        for i in 0..100 {
            s.on_data(Direction::ToServer, &[0xAB; 1000], i, i);
        }
        assert_eq!(s.protocol(), Protocol::Unknown);
        assert!(matches!(s.state, State::Opaque));
    }
}
