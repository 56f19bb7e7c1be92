//! The handshake messages whyslow reads: ClientHello and ServerHello (and,
//! in TLS 1.3, EncryptedExtensions once decrypted) for the randoms that key
//! the session, and the facts a report shows (version, suite, ALPN, SNI,
//! resumption). Parsing is bounds-checked throughout: a short or lying
//! length ends the message, never the process.

/// Handshake message types (RFC 8446 §4).
pub const CLIENT_HELLO: u8 = 1;
pub const SERVER_HELLO: u8 = 2;
pub const ENCRYPTED_EXTENSIONS: u8 = 8;

const EXT_SERVER_NAME: u16 = 0;
const EXT_ALPN: u16 = 16;
const EXT_SESSION_TICKET: u16 = 35;
const EXT_PRE_SHARED_KEY: u16 = 41;
const EXT_SUPPORTED_VERSIONS: u16 = 43;
/// TLS 1.3 in supported_versions.
pub const TLS13: u16 = 0x0304;

/// A cursor over a byte slice; every read is checked.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        let b = self.take(2)?;
        Some(u16::from_be_bytes([b[0], b[1]]))
    }
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()? as usize;
        self.take(n)
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()? as usize;
        self.take(n)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientHello {
    pub random: [u8; 32],
    pub session_id: Vec<u8>,
    pub sni: Option<String>,
    pub alpn: Vec<String>,
    /// Offers to resume: a session ticket or a TLS 1.3 pre-shared key.
    pub offers_resumption: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerHello {
    pub random: [u8; 32],
    pub session_id: Vec<u8>,
    pub suite: u16,
    /// 0x0303 for TLS 1.2, 0x0304 for TLS 1.3 (from supported_versions).
    pub version: u16,
    pub alpn: Option<String>,
    /// TLS 1.3: the server accepted a pre-shared key.
    pub psk_accepted: bool,
}

fn each_extension<'a>(body: &'a [u8], mut f: impl FnMut(u16, &'a [u8])) {
    let mut c = Cursor(body);
    while let (Some(t), Some(b)) = (c.u16(), c.vec16()) {
        f(t, b);
    }
}

fn alpn_list(b: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut c = Cursor(b);
    if let Some(list) = c.vec16() {
        let mut l = Cursor(list);
        while let Some(p) = l.vec8() {
            out.push(String::from_utf8_lossy(p).into_owned());
        }
    }
    out
}

pub fn client_hello(body: &[u8]) -> Option<ClientHello> {
    let mut c = Cursor(body);
    c.u16()?;
    let random = c.take(32)?.try_into().ok()?;
    let session_id = c.vec8()?.to_vec();
    c.vec16()?;
    c.vec8()?;
    let mut hello = ClientHello {
        random,
        session_id,
        ..ClientHello::default()
    };
    let Some(exts) = c.vec16() else {
        return Some(hello);
    };
    each_extension(exts, |t, b| match t {
        EXT_SERVER_NAME => {
            // server_name_list: type 0 (host_name), then a 16-bit name.
            let mut s = Cursor(b);
            if let Some(list) = s.vec16() {
                let mut l = Cursor(list);
                if let (Some(0), Some(name)) = (l.u8(), l.vec16()) {
                    hello.sni = Some(String::from_utf8_lossy(name).into_owned());
                }
            }
        }
        EXT_ALPN => hello.alpn = alpn_list(b),
        EXT_SESSION_TICKET if !b.is_empty() => hello.offers_resumption = true,
        EXT_PRE_SHARED_KEY => hello.offers_resumption = true,
        _ => {}
    });
    Some(hello)
}

pub fn server_hello(body: &[u8]) -> Option<ServerHello> {
    let mut c = Cursor(body);
    let legacy = c.u16()?;
    let random = c.take(32)?.try_into().ok()?;
    let session_id = c.vec8()?.to_vec();
    let suite = c.u16()?;
    c.u8()?;
    let mut hello = ServerHello {
        random,
        session_id,
        suite,
        version: legacy,
        ..ServerHello::default()
    };
    if let Some(exts) = c.vec16() {
        each_extension(exts, |t, b| match t {
            EXT_SUPPORTED_VERSIONS if b.len() == 2 => {
                hello.version = u16::from_be_bytes([b[0], b[1]])
            }
            EXT_ALPN => hello.alpn = alpn_list(b).into_iter().next(),
            EXT_PRE_SHARED_KEY => hello.psk_accepted = true,
            _ => {}
        });
    }
    Some(hello)
}

/// TLS 1.3's EncryptedExtensions: the ALPN the server chose.
pub fn encrypted_extensions_alpn(body: &[u8]) -> Option<String> {
    let mut c = Cursor(body);
    let exts = c.vec16()?;
    let mut alpn = None;
    each_extension(exts, |t, b| {
        if t == EXT_ALPN {
            alpn = alpn_list(b).into_iter().next();
        }
    });
    alpn
}

/// Splits whole handshake messages off the front of `buf`: (type, body).
/// Leaves a partial message in place.
pub fn split_messages(buf: &mut Vec<u8>, mut f: impl FnMut(u8, &[u8])) {
    let mut at = 0;
    while buf.len() - at >= 4 {
        let len = u32::from_be_bytes([0, buf[at + 1], buf[at + 2], buf[at + 3]]) as usize;
        if buf.len() - at - 4 < len {
            break;
        }
        f(buf[at], &buf[at + 4..at + 4 + len]);
        at += 4 + len;
    }
    buf.drain(..at);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello as rustls or curl writes one: SNI, ALPN, a PSK offer.
    fn sample_client_hello() -> Vec<u8> {
        let mut b = vec![3, 3];
        b.extend_from_slice(&[0x11; 32]);
        b.push(0);
        b.extend_from_slice(&[0, 2, 0x13, 0x01, 1, 0]);
        let mut exts = Vec::new();
        let name = b"example.test";
        let mut sni = vec![0, (name.len() + 3) as u8, 0, 0, name.len() as u8];
        sni.extend_from_slice(name);
        exts.extend_from_slice(&[0, 0, 0, sni.len() as u8]);
        exts.extend_from_slice(&sni);
        let alpn = [
            0, 12, 2, b'h', b'2', 8, b'h', b't', b't', b'p', b'/', b'1', b'.', b'1',
        ];
        exts.extend_from_slice(&[0, 16, 0, alpn.len() as u8]);
        exts.extend_from_slice(&alpn);
        exts.extend_from_slice(&[0, 41, 0, 0]);
        b.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        b.extend_from_slice(&exts);
        b
    }

    #[test]
    fn client_hello_facts() {
        let h = client_hello(&sample_client_hello()).unwrap();
        assert_eq!(h.random, [0x11; 32]);
        assert_eq!(h.sni.as_deref(), Some("example.test"));
        assert_eq!(h.alpn, ["h2", "http/1.1"]);
        assert!(h.offers_resumption);
        // Every truncation is a None or a hello, never a panic.
        let full = sample_client_hello();
        for n in 0..full.len() {
            let _ = client_hello(&full[..n]);
            let _ = server_hello(&full[..n]);
        }
    }

    #[test]
    fn messages_split_across_records() {
        let mut buf = vec![1, 0, 0, 3, 9, 9];
        let mut got = Vec::new();
        split_messages(&mut buf, |t, b| got.push((t, b.to_vec())));
        assert!(got.is_empty());
        buf.extend_from_slice(&[9, 2, 0, 0, 0]);
        split_messages(&mut buf, |t, b| got.push((t, b.to_vec())));
        assert_eq!(got, [(1, vec![9, 9, 9]), (2, vec![])]);
        assert!(buf.is_empty());
    }
}
