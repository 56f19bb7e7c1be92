//! One DNS message (RFC 1035 §4.1): the header, the first question, and the
//! addresses of A/AAAA answers. Hand-written because a capture's messages
//! are hostile input: every length is checked against the message, a
//! compression pointer must point before the label that holds it (so a
//! chain of them ends), and a name stops at RFC 1035's limits.

use std::net::IpAddr;

/// Header bytes (RFC 1035 §4.1.1).
pub const HEADER: usize = 12;
/// A label is at most 63 bytes, a name at most 255 (RFC 1035 §2.3.4).
const MAX_LABEL: usize = 63;
const MAX_NAME: usize = 255;
/// Compression pointers followed in one name: a name of 255 bytes has at
/// most 127 labels, each worth at most one pointer.
const MAX_HOPS: usize = 127;
/// Addresses kept from one answer: enough to join a lookup to the
/// connection it preceded; a round-robin name rarely returns more.
pub const MAX_ADDRESSES: usize = 8;
/// Records read for addresses; a flood of answers is counted, not read.
const MAX_RECORDS_READ: usize = 64;

/// Record types (IANA "Resource Record (RR) TYPEs").
pub const TYPE_A: u16 = 1;
pub const TYPE_AAAA: u16 = 28;

/// What a message says, as far as it could be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub id: u16,
    pub response: bool,
    pub opcode: u8,
    /// TC: the answer did not fit (RFC 1035 §4.1.1); the client asks again over TCP.
    pub truncated: bool,
    pub rcode: u8,
    pub questions: u16,
    pub answers: u16,
    /// The first question, when the message has one that could be read.
    pub question: Option<Question>,
    /// A and AAAA records of the answer section, at most `MAX_ADDRESSES`.
    pub addresses: Vec<IpAddr>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// Lower case, dotted, without the root's trailing dot ("." for the root).
    pub name: String,
    pub qtype: u16,
}

/// Why a message could not be read at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bad {
    /// Shorter than a header.
    Short,
}

/// Reads what can be read of `msg`: a header always (or `Bad`), the
/// question and addresses when they are whole and well formed.
pub fn parse(msg: &[u8]) -> Result<Message, Bad> {
    let mut m = header(msg)?;
    read_body(msg, &mut m);
    Ok(m)
}

/// The header alone (no question, no addresses): what pairing a response
/// with its query needs.
pub fn header(msg: &[u8]) -> Result<Message, Bad> {
    if msg.len() < HEADER {
        return Err(Bad::Short);
    }
    let be = |at: usize| u16::from_be_bytes([msg[at], msg[at + 1]]);
    let flags = be(2);
    Ok(Message {
        id: be(0),
        response: flags & 0x8000 != 0,
        opcode: ((flags >> 11) & 0xf) as u8,
        truncated: flags & 0x0200 != 0,
        rcode: (flags & 0xf) as u8,
        questions: be(4),
        answers: be(6),
        question: None,
        addresses: Vec::new(),
    })
}

/// The question and, in a response, the addresses.
fn read_body(msg: &[u8], m: &mut Message) {
    let mut at = HEADER;
    if m.questions == 0 {
        return;
    }
    let Some((name, next)) = read_name(msg, at) else {
        return;
    };
    let Some(qtype) = u16_at(msg, next) else {
        return;
    };
    m.question = Some(Question { name, qtype });
    at = next + 4;
    // Further questions (none in practice: RFC 9619) are skipped.
    for _ in 1..m.questions.min(MAX_RECORDS_READ as u16) {
        let Some(next) = skip_name(msg, at) else {
            return;
        };
        at = next + 4;
    }
    if m.response {
        read_addresses(msg, at, m);
    }
}

/// The A/AAAA addresses of a response, its questions skipped unread (no
/// name is built): what pairing an answer with its call needs, at the cost
/// of a walk over its records.
pub fn addresses(msg: &[u8]) -> Vec<IpAddr> {
    let Ok(mut m) = header(msg) else {
        return Vec::new();
    };
    let mut at = HEADER;
    for _ in 0..m.questions.min(MAX_RECORDS_READ as u16) {
        let Some(next) = skip_name(msg, at) else {
            return Vec::new();
        };
        at = next + 4;
    }
    read_addresses(msg, at, &mut m);
    m.addresses
}

fn read_addresses(msg: &[u8], mut at: usize, m: &mut Message) {
    for _ in 0..usize::from(m.answers).min(MAX_RECORDS_READ) {
        let Some(next) = skip_name(msg, at) else {
            return;
        };
        let (Some(rtype), Some(len)) = (u16_at(msg, next), u16_at(msg, next + 8)) else {
            return;
        };
        let data = next + 10;
        let Some(rdata) = msg.get(data..data + usize::from(len)) else {
            return;
        };
        let addr = match (rtype, rdata.len()) {
            (TYPE_A, 4) => Some(IpAddr::from(<[u8; 4]>::try_from(rdata).expect("4 bytes"))),
            (TYPE_AAAA, 16) => Some(IpAddr::from(<[u8; 16]>::try_from(rdata).expect("16 bytes"))),
            _ => None,
        };
        if let Some(a) = addr {
            if m.addresses.len() < MAX_ADDRESSES {
                m.addresses.push(a);
            }
        }
        at = data + usize::from(len);
    }
}

fn u16_at(msg: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*msg.get(at)?, *msg.get(at + 1)?]))
}

/// The name at `at` and the offset after it (after its first pointer, if
/// compressed). None when malformed: a label type other than plain or
/// pointer, a pointer not strictly before the label holding it, a name
/// over 255 bytes, or past the end.
pub fn read_name(msg: &[u8], at: usize) -> Option<(String, usize)> {
    let mut name = String::with_capacity(64);
    let end = walk_name(msg, at, |label| {
        if !name.is_empty() {
            name.push('.');
        }
        for &b in label {
            push_char(&mut name, b);
        }
    })?;
    if name.is_empty() {
        name.push('.');
    }
    Some((name, end))
}

/// The offset after the name at `at`, as `read_name` without the text.
fn skip_name(msg: &[u8], at: usize) -> Option<usize> {
    walk_name(msg, at, |_| {})
}

fn walk_name(msg: &[u8], mut at: usize, mut label: impl FnMut(&[u8])) -> Option<usize> {
    let mut after = None;
    let mut wire_len = 1usize;
    let mut hops = 0;
    loop {
        let len = *msg.get(at)?;
        match len & 0xc0 {
            0x00 if len == 0 => return Some(after.unwrap_or(at + 1)),
            0x00 => {
                let l = usize::from(len);
                let bytes = msg.get(at + 1..at + 1 + l)?;
                wire_len += l + 1;
                if l > MAX_LABEL || wire_len > MAX_NAME {
                    return None;
                }
                label(bytes);
                at += 1 + l;
            }
            0xc0 => {
                let target = usize::from(u16_at(msg, at)? & 0x3fff);
                // Strictly backwards: every jump lowers `at`, so a chain
                // ends; and a name has at most 127 labels to point at.
                hops += 1;
                if target >= at || hops > MAX_HOPS {
                    return None;
                }
                after.get_or_insert(at + 2);
                at = target;
            }
            // 0x40 (extended label types, RFC 6891 §5) and 0x80 are not names here.
            _ => return None,
        }
    }
}

/// A name's byte as text: letters lower-cased, printable ASCII as is, the
/// rest as `\DDD` (RFC 1035 §5.1's escape).
fn push_char(name: &mut String, b: u8) {
    match b {
        b'A'..=b'Z' => name.push(char::from(b.to_ascii_lowercase())),
        b'.' | b'\\' => {
            name.push('\\');
            name.push(char::from(b));
        }
        0x21..=0x7e => name.push(char::from(b)),
        _ => name.push_str(&format!("\\{b:03}")),
    }
}

/// A key of the first question — its name, case folded, and type — read
/// off the wire without building the name: what pairs an answer with its
/// query besides the id.
pub fn question_key(msg: &[u8]) -> Option<u64> {
    if msg.len() < HEADER || u16_at(msg, 4)? == 0 {
        return None;
    }
    // FNV-1a: a few bytes at a time, no allocation.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut mix = |b: u8| h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    let end = walk_name(msg, HEADER, |label| {
        label.iter().for_each(|b| mix(b.to_ascii_lowercase()));
        mix(b'.');
    })?;
    let qtype = u16_at(msg, end)?;
    qtype.to_be_bytes().into_iter().for_each(&mut mix);
    Some(h)
}

/// A record type's mnemonic (IANA registry), or `TYPE<n>` (RFC 3597 §5).
pub fn type_name(t: u16) -> std::borrow::Cow<'static, str> {
    let known = match t {
        1 => "A",
        2 => "NS",
        5 => "CNAME",
        6 => "SOA",
        12 => "PTR",
        15 => "MX",
        16 => "TXT",
        28 => "AAAA",
        33 => "SRV",
        35 => "NAPTR",
        41 => "OPT",
        43 => "DS",
        46 => "RRSIG",
        48 => "DNSKEY",
        64 => "SVCB",
        65 => "HTTPS",
        252 => "AXFR",
        255 => "ANY",
        _ => return format!("TYPE{t}").into(),
    };
    known.into()
}

/// A response code's mnemonic (RFC 1035 §4.1.1, RFC 2136), or `RCODE<n>`.
pub fn rcode_name(r: u8) -> std::borrow::Cow<'static, str> {
    let known = match r {
        0 => "NOERROR",
        1 => "FORMERR",
        2 => "SERVFAIL",
        3 => "NXDOMAIN",
        4 => "NOTIMP",
        5 => "REFUSED",
        _ => return format!("RCODE{r}").into(),
    };
    known.into()
}

/// Whether `msg` opens as a DNS query or response a client or a server
/// would send: a known opcode, one question (RFC 9619), a query with no
/// answers and a response with its QR bit.
pub fn plausible(msg: &[u8]) -> Option<bool> {
    if msg.len() < HEADER {
        return None;
    }
    let flags = u16::from_be_bytes([msg[2], msg[3]]);
    let opcode = (flags >> 11) & 0xf;
    let response = flags & 0x8000 != 0;
    let qd = u16::from_be_bytes([msg[4], msg[5]]);
    let an = u16::from_be_bytes([msg[6], msg[7]]);
    let z = flags & 0x0040 != 0;
    let ok = opcode <= 5 && opcode != 3 && qd == 1 && !z && (response || an == 0);
    ok.then_some(response)
}
