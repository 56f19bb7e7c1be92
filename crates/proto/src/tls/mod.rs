//! TLS on the wire: the record layer of one connection, its handshake facts,
//! and, with the session's secrets from a key log, its plaintext fed to the
//! protocol analyzers as if the connection were cleartext.
//!
//! Written here rather than taken from a TLS library: a library terminates a
//! connection it takes part in, while this reads both directions of someone
//! else's, from a capture that may start late, lose bytes or lie about
//! lengths. Each record is opened with the AEAD keys its epoch implies (ring);
//! a record that does not authenticate is never passed on as plaintext.

pub mod crypto;
pub mod handshake;
pub mod keylog;

use crate::{Sniffer, Start, StreamAnalyzer};
use crypto::{RecordKeys, Suite};
use handshake::{ClientHello, ServerHello};
use std::sync::Arc;
use whyslow_model::{Direction, Exchange, Protocol};

pub use keylog::KeyLog;

/// Largest record payload: 2^14 plaintext plus 2048 of expansion (RFC 5246
/// §6.2.3; TLS 1.3 allows 256). A longer length is not TLS.
pub const MAX_RECORD: usize = (1 << 14) + 2048;
/// Handshake bytes held while a message spans records: a certificate chain
/// fits; more is not worth keeping to read two hellos.
pub const MAX_HANDSHAKE: usize = 64 * 1024;
const HEADER: usize = 5;

const CHANGE_CIPHER_SPEC: u8 = 20;
const HANDSHAKE: u8 = 22;
const APPLICATION_DATA: u8 = 23;

/// ServerHello.random of a HelloRetryRequest (RFC 8446 §4.1.3): not the real hello.
const HELLO_RETRY: [u8; 32] = [
    0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
    0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
];

pub use whyslow_model::TlsFacts;

#[derive(Default)]
struct Side {
    /// A partial record.
    buf: Vec<u8>,
    /// A partial handshake message.
    hs: Vec<u8>,
    /// Records are protected from here on (after ServerHello in TLS 1.3,
    /// after ChangeCipherSpec in TLS 1.2).
    protected: bool,
    /// Keys of the current epoch first, then the next (TLS 1.3: handshake,
    /// then application traffic).
    epochs: Vec<RecordKeys>,
    at_us: u64,
    packet: u64,
}

pub struct TlsAnalyzer {
    connection: u32,
    server_port: u16,
    keys: Option<Arc<KeyLog>>,
    sides: [Side; 2],
    client: Option<ClientHello>,
    server: Option<ServerHello>,
    suite: Option<Suite>,
    hello_at_us: Option<u64>,
    facts: TlsFacts,
    inner: Option<Box<Sniffer>>,
    /// Decryption stopped on this connection: why.
    note: Option<String>,
    stopped: bool,
    /// No keys for this session: only record headers are read, for timing.
    locked: bool,
    /// Each side's first protected record (client, server).
    first_protected: [Option<u64>; 2],
}

fn side(d: Direction) -> usize {
    match d {
        Direction::ToServer => 0,
        Direction::ToClient => 1,
    }
}

impl TlsAnalyzer {
    pub fn new(connection: u32, server_port: u16, start: Start, keys: Option<Arc<KeyLog>>) -> Self {
        let mut a = TlsAnalyzer {
            connection,
            server_port,
            keys,
            sides: Default::default(),
            client: None,
            server: None,
            suite: None,
            hello_at_us: None,
            facts: TlsFacts::default(),
            inner: None,
            note: None,
            stopped: false,
            locked: false,
            first_protected: [None; 2],
        };
        if start == Start::MidStream {
            a.stop("TLS: the capture began after the handshake, so no key can be looked up");
        }
        a
    }

    pub fn facts(&self) -> &TlsFacts {
        &self.facts
    }

    /// What the plaintext carries, once decrypted and sniffed.
    pub fn inner_protocol(&self) -> Option<Protocol> {
        self.inner
            .as_ref()
            .map(|s| s.protocol())
            .filter(|p| *p != Protocol::Unknown)
    }

    fn stop(&mut self, why: &str) {
        if self.note.is_none() {
            self.note = Some(why.to_string());
        }
        self.end();
    }

    /// Nothing more is read on this connection; buffers are let go.
    fn end(&mut self) {
        self.stopped = true;
        for s in &mut self.sides {
            s.buf = Vec::new();
            s.hs = Vec::new();
            s.epochs.clear();
        }
    }

    /// Splits whole records off direction `d`'s buffer and handles each.
    fn records(&mut self, d: Direction) {
        let i = side(d);
        let mut at = 0;
        loop {
            let buf = &self.sides[i].buf;
            if buf.len() - at < HEADER {
                break;
            }
            let (ty, ver) = (buf[at], [buf[at + 1], buf[at + 2]]);
            let len = u16::from_be_bytes([buf[at + 3], buf[at + 4]]) as usize;
            if !(CHANGE_CIPHER_SPEC..=APPLICATION_DATA).contains(&ty)
                || ver[0] != 3
                || len > MAX_RECORD
            {
                self.stop(&format!(
                    "TLS: record header {ty} {}.{} of {len} bytes is not TLS: the rest of the connection is skipped",
                    ver[0], ver[1]
                ));
                return;
            }
            if buf.len() - at < HEADER + len {
                break;
            }
            let payload = buf[at + HEADER..at + HEADER + len].to_vec();
            at += HEADER + len;
            self.record(d, ty, ver, payload);
            if self.stopped {
                return;
            }
        }
        self.sides[i].buf.drain(..at);
    }

    fn record(&mut self, d: Direction, ty: u8, ver: [u8; 2], payload: Vec<u8>) {
        let i = side(d);
        let tls13 = self.suite.is_some_and(|s| s.tls13);
        if !self.sides[i].protected {
            match ty {
                HANDSHAKE => self.handshake_bytes(d, &payload),
                // Only after a TLS 1.2 ServerHello: TLS 1.3 sends a dummy
                // CCS too, after a HelloRetryRequest before the real hello.
                CHANGE_CIPHER_SPEC
                    if self
                        .server
                        .as_ref()
                        .is_some_and(|h| h.version != handshake::TLS13) =>
                {
                    self.change_cipher_spec(d)
                }
                _ => {}
            }
            return;
        }
        if ty == CHANGE_CIPHER_SPEC || (tls13 && ty != APPLICATION_DATA) {
            // TLS 1.3's middlebox-compatibility CCS, or a plaintext alert.
            return;
        }
        self.protected_record(i);
        if self.locked {
            return;
        }
        let Some((inner_ty, plain)) = self.open(i, ty, ver, payload) else {
            return;
        };
        match inner_ty {
            APPLICATION_DATA => self.application_data(d, &plain),
            HANDSHAKE if tls13 => self.handshake_bytes(d, &plain),
            _ => {}
        }
    }

    /// Times the handshake by each side's first protected record (see
    /// `TlsFacts::handshake_us`); a stream without keys is given up once
    /// that is known.
    fn protected_record(&mut self, i: usize) {
        let at = self.sides[i].at_us;
        self.first_protected[i].get_or_insert(at);
        if self.facts.handshake_us.is_none() {
            if let ([Some(c), Some(s)], Some(hello)) = (self.first_protected, self.hello_at_us) {
                self.facts.handshake_us = Some(c.max(s).saturating_sub(hello));
            }
        }
        if self.locked && self.facts.handshake_us.is_some() {
            self.end();
        }
    }

    /// Opens a protected record with the current epoch, or the next one (a
    /// TLS 1.3 key change the records themselves announce).
    fn open(
        &mut self,
        i: usize,
        ty: u8,
        ver: [u8; 2],
        mut payload: Vec<u8>,
    ) -> Option<(u8, Vec<u8>)> {
        if self.sides[i].epochs.is_empty() {
            // No keys: record headers are still read until the handshake is timed.
            let why = self.why_no_keys();
            self.note.get_or_insert(why);
            self.locked = true;
            if self.facts.handshake_us.is_some() {
                self.end();
            }
            return None;
        }
        let tries = self.sides[i].epochs.len().min(2);
        for e in 0..tries {
            // Opening is in place: only an attempt that may fail before the
            // last one works on a copy.
            let mut attempt = match e + 1 < tries {
                true => payload.clone(),
                false => std::mem::take(&mut payload),
            };
            if let Some((t, plain)) = self.sides[i].epochs[e].open(ty, ver, &mut attempt) {
                let plain = plain.to_vec();
                self.sides[i].epochs.drain(..e);
                self.facts.decrypted = true;
                return Some((t, plain));
            }
        }
        self.stop(
            "TLS: records do not authenticate with the key log's secrets for this session \
             (a wrong or stale key log?): left encrypted",
        );
        None
    }

    fn why_no_keys(&self) -> String {
        let Some(c) = &self.client else {
            return "TLS: no ClientHello seen: no key can be looked up".into();
        };
        let random: String = c.random[..6].iter().map(|b| format!("{b:02x}")).collect();
        match (&self.keys, self.suite) {
            (None, _) => "TLS: no key log given (--keylog): left encrypted".into(),
            (_, None) => "TLS: cipher suite not supported for decryption: left encrypted".into(),
            (Some(_), Some(_)) => {
                format!("TLS: no key for client random {random}… in the key log: left encrypted")
            }
        }
    }

    fn handshake_bytes(&mut self, d: Direction, bytes: &[u8]) {
        let i = side(d);
        if self.sides[i].hs.len() + bytes.len() > MAX_HANDSHAKE {
            // A long certificate chain, or not a handshake: the hellos are behind us.
            self.sides[i].hs.clear();
            return;
        }
        self.sides[i].hs.extend_from_slice(bytes);
        let mut hs = std::mem::take(&mut self.sides[i].hs);
        let mut msgs = Vec::new();
        handshake::split_messages(&mut hs, |t, b| msgs.push((t, b.to_vec())));
        self.sides[i].hs = hs;
        for (t, body) in msgs {
            self.message(d, t, &body);
        }
    }

    fn message(&mut self, d: Direction, t: u8, body: &[u8]) {
        match (d, t) {
            (Direction::ToServer, handshake::CLIENT_HELLO) => {
                if let Some(h) = handshake::client_hello(body) {
                    self.facts.sni = h.sni.clone();
                    self.hello_at_us.get_or_insert(self.sides[0].at_us);
                    self.client = Some(h);
                }
            }
            (Direction::ToClient, handshake::SERVER_HELLO) => {
                if let Some(h) = handshake::server_hello(body) {
                    if h.random != HELLO_RETRY {
                        self.server_hello(h);
                    }
                }
            }
            (Direction::ToClient, handshake::ENCRYPTED_EXTENSIONS) => {
                if let Some(alpn) = handshake::encrypted_extensions_alpn(body) {
                    self.facts.alpn = Some(alpn);
                }
            }
            _ => {}
        }
    }

    fn server_hello(&mut self, h: ServerHello) {
        let tls13 = h.version == handshake::TLS13;
        self.facts.version = Some(if tls13 { "1.3" } else { "1.2" }.into());
        self.facts.alpn = h.alpn.clone();
        self.suite = Suite::find(h.suite);
        self.facts.cipher = Some(match self.suite {
            Some(s) => s.name.to_string(),
            None => format!("0x{:04x}", h.suite),
        });
        let client_offered = self.client.as_ref().map(|c| c.session_id.clone());
        self.facts.resumed = if tls13 {
            h.psk_accepted
        } else {
            client_offered.is_some_and(|id| !id.is_empty() && id == h.session_id)
        };
        if tls13 {
            // Everything after the ServerHello is protected, both ways.
            self.sides[0].protected = true;
            self.sides[1].protected = true;
            self.sides[0].hs.clear();
            self.sides[1].hs.clear();
            self.tls13_keys();
        }
        self.server = Some(h);
    }

    fn secrets(&self) -> Option<&keylog::SessionSecrets> {
        let random = self.client.as_ref()?.random;
        self.keys.as_ref()?.session(&random)
    }

    fn tls13_keys(&mut self) {
        let (Some(suite), Some(s)) = (self.suite, self.secrets()) else {
            return;
        };
        let epochs = |hs: &Option<Vec<u8>>, app: &Option<Vec<u8>>| -> Vec<RecordKeys> {
            [hs, app]
                .into_iter()
                .flatten()
                .filter_map(|secret| RecordKeys::tls13(suite, secret))
                .collect()
        };
        let client = epochs(&s.client_handshake, &s.client_traffic);
        let server = epochs(&s.server_handshake, &s.server_traffic);
        self.sides[0].epochs = client;
        self.sides[1].epochs = server;
    }

    /// TLS 1.2: from here on this direction is protected.
    fn change_cipher_spec(&mut self, d: Direction) {
        let i = side(d);
        self.sides[i].protected = true;
        self.sides[i].hs.clear();
        let (Some(suite), Some(c), Some(sv)) = (self.suite, &self.client, &self.server) else {
            return;
        };
        let Some(master) = self.secrets().and_then(|s| s.master.clone()) else {
            return;
        };
        if let Some((ck, sk)) = RecordKeys::tls12(suite, &master, &c.random, &sv.random) {
            self.sides[i].epochs = vec![if i == 0 { ck } else { sk }];
        }
    }

    fn application_data(&mut self, d: Direction, plain: &[u8]) {
        let i = side(d);
        let (at_us, packet) = (self.sides[i].at_us, self.sides[i].packet);
        let (c, port) = (self.connection, self.server_port);
        let inner = self
            .inner
            .get_or_insert_with(|| Box::new(Sniffer::new(c, port, Start::Beginning)));
        inner.on_data(d, plain, at_us, packet);
    }
}

impl StreamAnalyzer for TlsAnalyzer {
    fn on_data(&mut self, direction: Direction, data: &[u8], at_us: u64, packet: u64) {
        if self.stopped {
            return;
        }
        let i = side(direction);
        // A record is delivered with the time of the segment that completed it.
        self.sides[i].at_us = at_us;
        self.sides[i].packet = packet;
        self.sides[i].buf.extend_from_slice(data);
        self.records(direction);
    }

    fn on_gap(&mut self, direction: Direction, missing: u64) {
        if let Some(inner) = &mut self.inner {
            inner.on_gap(direction, missing);
        }
        self.stop(&format!(
            "TLS: {missing} bytes missing from the capture: record boundaries and sequence \
             numbers are lost, so the rest of the connection stays encrypted"
        ));
    }

    fn drain_exchanges(&mut self, out: &mut Vec<Exchange>) {
        if let Some(s) = &mut self.inner {
            s.drain_exchanges(out);
        }
    }

    fn finish(&mut self) -> Vec<Exchange> {
        if !self.stopped && !self.facts.decrypted && self.server.is_some() {
            let why = self.why_no_keys();
            self.note.get_or_insert(why);
        }
        self.inner.as_mut().map(|s| s.finish()).unwrap_or_default()
    }

    fn open_since(&self) -> Option<u64> {
        self.inner.as_ref().and_then(|s| s.open_since())
    }

    fn error(&self) -> Option<&str> {
        self.note
            .as_deref()
            .or_else(|| self.inner.as_ref().and_then(|s| s.error()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz::{collect_chunks, feed_chunks};

    /// Sessions recorded between Python's ssl (OpenSSL) client and server,
    /// with the client's key log (fuzz/seeds/make_seeds.py): the request
    /// inside each comes out as an HTTP exchange; without the key, none does
    /// and the connection says why.
    #[test]
    fn real_sessions_decrypt_with_their_key_log() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/tls");
        for name in ["tls13", "tls13_hrr", "tls12_gcm", "tls12_chacha"] {
            let seed = std::fs::read(dir.join(name)).unwrap();
            let n = usize::from(u16::from_be_bytes([seed[0], seed[1]]));
            let (text, chunks) = seed[2..].split_at(n);
            let (keys, bad) = KeyLog::parse(std::str::from_utf8(text).unwrap());
            assert_eq!(bad, 0);
            let mut a = TlsAnalyzer::new(0, 443, Start::Beginning, Some(Arc::new(keys)));
            let out = collect_chunks(&mut a, chunks, true);
            assert_eq!(out.len(), 1, "{name}: {:?}", a.error());
            assert_eq!(out[0].request, "GET /seed", "{name}");
            let f = a.facts();
            assert!(
                f.decrypted && f.alpn.as_deref() == Some("http/1.1"),
                "{name}: {f:?}"
            );
            assert_eq!(f.sni.as_deref(), Some("seed.test"));
            assert_eq!(
                f.version.as_deref(),
                Some(&name[3..5]).map(|v| if v == "13" { "1.3" } else { "1.2" })
            );
            assert!(a.error().is_none(), "{name}: {:?}", a.error());

            let mut locked = TlsAnalyzer::new(0, 443, Start::Beginning, None);
            feed_chunks(&mut locked, chunks);
            assert!(locked.error().unwrap().contains("no key log"), "{name}");
            // The handshake is timed and described the same without the keys.
            assert!(f.handshake_us.is_some(), "{name}");
            assert_eq!(locked.facts().handshake_us, f.handshake_us, "{name}");
            assert_eq!(locked.facts().cipher, f.cipher, "{name}");
            // A flipped bit in a protected record fails authentication: named, no exchange.
            let mut wrong = text.to_vec();
            let last = wrong.len() - 2;
            wrong[last] = if wrong[last] == b'0' { b'1' } else { b'0' };
            let (keys, _) = KeyLog::parse(std::str::from_utf8(&wrong).unwrap());
            let mut bad = TlsAnalyzer::new(0, 443, Start::Beginning, Some(Arc::new(keys)));
            let out = collect_chunks(&mut bad, chunks, true);
            assert!(out.is_empty(), "{name}");
            assert!(
                bad.error().unwrap().contains("authenticate"),
                "{name}: {:?}",
                bad.error()
            );
        }
    }

    /// PostgreSQL's SSLRequest answered `S`, then TLS 1.3 from Python's ssl
    /// carrying the startup and one query (fuzz/seeds/make_seeds.py): the
    /// sniffer hands the stream to TLS, and the query inside is an exchange.
    #[test]
    fn postgres_after_sslrequest_is_decrypted() {
        use crate::sniff::Sniffer;
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/seeds/tls/postgres_ssl");
        let seed = std::fs::read(path).unwrap();
        let n = usize::from(u16::from_be_bytes([seed[0], seed[1]]));
        let (text, chunks) = seed[2..].split_at(n);
        let (keys, _) = KeyLog::parse(std::str::from_utf8(text).unwrap());
        let mut s = Sniffer::with_keys(0, 5432, Start::Beginning, Some(Arc::new(keys)));
        let out = collect_chunks(&mut s, chunks, true);
        assert!(s.error().is_none(), "{:?}", s.error());
        assert_eq!(s.protocol(), Protocol::Postgres);
        assert!(s.tls_facts().is_some_and(|f| f.decrypted));
        let queries: Vec<&str> = out.iter().map(|e| e.request.as_str()).collect();
        assert_eq!(queries, ["SELECT ? AS a"], "{out:?}");
        assert_eq!(out[0].rows, Some(1));

        let mut locked = Sniffer::with_keys(0, 5432, Start::Beginning, None);
        assert!(collect_chunks(&mut locked, chunks, true).is_empty());
        assert_eq!(locked.protocol(), Protocol::Tls);
        assert!(locked.error().unwrap().contains("no key log"));
    }
}
