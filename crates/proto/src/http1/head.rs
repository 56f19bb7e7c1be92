//! Parsing a complete HTTP/1.x head into the few facts the analyzer keeps.
//! Header values are inspected for framing only and never stored.

use super::framing::BodyKind;
use crate::digest::ParamDigest;
use crate::normalize;
use std::mem::MaybeUninit;
use whyslow_model::{SmolStr, TraceId};

/// Header fields parsed per head. Apache's LimitRequestFields defaults to
/// 100; a little above that accepts real traffic and bounds stack use.
const MAX_HEADERS: usize = 128;

/// Room for the header fields of one head, left uninitialized: httparse
/// writes only the fields it finds, and zeroing 4 KiB per message was a
/// tenth of the analyzer's time.
type HeaderSlots<'b> = [MaybeUninit<httparse::Header<'b>>; MAX_HEADERS];

fn slots<'b>() -> HeaderSlots<'b> {
    [const { MaybeUninit::uninit() }; MAX_HEADERS]
}

/// Longest normalized request kept ("METHOD /path"). Longer paths are cut:
/// they are mostly ids and tokens, which reports should not carry anyway.
pub const MAX_REQUEST_LABEL: usize = 200;

/// What the body framing of a message depends on, from its header fields.
#[derive(Debug, Default, Clone)]
struct Framing {
    content_length: Option<u64>,
    chunked: bool,
    /// Transfer-Encoding present but not ending in chunked.
    other_te: bool,
    encoded: bool,
    /// Connection: close / keep-alive tokens.
    close: bool,
    keep_alive: bool,
    /// Content-Encoding value, cut short (only for whoever shows it).
    encoding: Option<Box<str>>,
}

/// Longest Content-Encoding value kept: any real coding list fits, a
/// payload smuggled into the header does not.
const ENCODING_SHOWN: usize = 32;

#[derive(Debug, Clone)]
pub struct RequestHead {
    /// "METHOD /path", query and fragment dropped.
    pub label: SmolStr,
    /// Its `traceparent`: absent, the trace it names, or what is wrong with it.
    pub trace: Option<Result<TraceId, &'static str>>,
    pub is_head: bool,
    pub is_connect: bool,
    pub body: BodyKind,
    /// `Upgrade: h2c` asked (RFC 7540 §3.2): a 101 answer switches to HTTP/2.
    pub upgrade_h2c: bool,
    /// Digest of the path's variable segments and the query.
    pub digest: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct ResponseHead {
    pub status: u16,
    pub encoded: bool,
    /// The server will close the connection after this response (Connection:
    /// close, or HTTP/1.0 without keep-alive).
    pub close: bool,
    /// The Content-Encoding value, cut to 32 characters.
    pub content_encoding: Option<Box<str>>,
    framing_chunked: bool,
    framing_other_te: bool,
    content_length: Option<u64>,
}

impl ResponseHead {
    /// Body framing given the request it answers (RFC 9112 §6.3).
    pub fn body(&self, request_is_head: bool) -> BodyKind {
        if request_is_head || self.is_interim() || self.status == 204 || self.status == 304 {
            BodyKind::None
        } else if self.framing_chunked {
            BodyKind::Chunked
        } else if self.framing_other_te {
            BodyKind::UntilClose
        } else if let Some(n) = self.content_length {
            BodyKind::Length(n)
        } else {
            BodyKind::UntilClose
        }
    }

    /// 1xx other than 101: a final response still follows.
    pub fn is_interim(&self) -> bool {
        (100..200).contains(&self.status) && self.status != 101
    }
}

pub fn parse_request(head: &[u8]) -> Result<RequestHead, String> {
    let mut headers = slots();
    let mut req = httparse::Request::new(&mut []);
    match req.parse_with_uninit_headers(head, &mut headers) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err("incomplete HTTP request head".into()),
        Err(e) => return Err(format!("not an HTTP/1 request ({e})")),
    }
    let method = req.method.unwrap_or("");
    let mut digest = ParamDigest::new();
    let framing = framing(req.headers)?;
    let body = if framing.chunked {
        BodyKind::Chunked
    } else if framing.other_te {
        // RFC 9112 §6.3 item 4: the length of such a request cannot be known.
        return Err("request Transfer-Encoding without chunked".into());
    } else {
        BodyKind::Length(framing.content_length.unwrap_or(0))
    };
    Ok(RequestHead {
        label: request_label_digest(method, req.path.unwrap_or(""), &mut digest).into(),
        digest: (!digest.is_empty()).then(|| digest.finish()),
        is_head: method == "HEAD",
        is_connect: method == "CONNECT",
        body,
        upgrade_h2c: asks_h2c(req.headers),
        trace: trace_of(req.headers),
    })
}

/// The request's `traceparent`, if it has one (the first: a repeated field
/// is malformed by the spec, and the first is what most servers read).
fn trace_of(headers: &[httparse::Header]) -> Option<Result<TraceId, &'static str>> {
    let h = headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("traceparent"))?;
    Some(crate::trace_context::traceparent(h.value).map(|c| c.trace_id))
}

fn asks_h2c(headers: &[httparse::Header]) -> bool {
    headers.iter().any(|h| {
        h.name.eq_ignore_ascii_case("upgrade")
            && h.value
                .split(|&b| b == b',')
                .any(|t| trim(t).eq_ignore_ascii_case(b"h2c"))
    })
}

/// Validates what is there of a request head that is not complete yet, so
/// non-HTTP bytes are refused early instead of filling the head buffer.
pub fn check_partial_request(head: &[u8]) -> Result<(), String> {
    let mut headers = slots();
    let mut req = httparse::Request::new(&mut []);
    match req.parse_with_uninit_headers(head, &mut headers) {
        Err(httparse::Error::TooManyHeaders) => Err("too many HTTP header fields".into()),
        Err(e) => Err(format!("not an HTTP/1 request ({e})")),
        Ok(_) => Ok(()),
    }
}

/// The version of a status line spelled as RFC 9112 §2.3 wants it
/// ("HTTP", case-sensitive): servers that write `http/1.1` exist and
/// clients accept them; httparse does not.
fn canonical_version(head: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    match head.get(..5) {
        Some(v) if v != b"HTTP/" && v.eq_ignore_ascii_case(b"HTTP/") => {
            let mut owned = head.to_vec();
            owned[..5].copy_from_slice(b"HTTP/");
            std::borrow::Cow::Owned(owned)
        }
        _ => std::borrow::Cow::Borrowed(head),
    }
}

pub fn check_partial_response(head: &[u8]) -> Result<(), String> {
    let head = &canonical_version(head)[..];
    let mut headers = slots();
    let mut resp = httparse::Response::new(&mut []);
    match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut resp,
        head,
        &mut headers,
    ) {
        Err(httparse::Error::TooManyHeaders) => Err("too many HTTP header fields".into()),
        Err(e) => Err(format!("not an HTTP/1 response ({e})")),
        Ok(_) => Ok(()),
    }
}

pub fn parse_response(head: &[u8]) -> Result<ResponseHead, String> {
    match parse_response_prefix(head)? {
        Some((_, h)) => Ok(h),
        None => Err("incomplete HTTP response head".into()),
    }
}

/// A response head at the start of `buf` and its length in bytes, or None
/// while it is incomplete: the one reading of response framing that the
/// capture analyzer and the client share.
pub fn parse_response_prefix(buf: &[u8]) -> Result<Option<(usize, ResponseHead)>, String> {
    let buf = &canonical_version(buf)[..];
    let mut headers = slots();
    let mut resp = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut resp,
        buf,
        &mut headers,
    ) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("not an HTTP/1 response ({e})")),
    };
    let f = framing(resp.headers)?;
    let http10 = resp.version == Some(0);
    Ok(Some((
        len,
        ResponseHead {
            status: resp.code.unwrap_or(0),
            encoded: f.encoded,
            close: f.close || (http10 && !f.keep_alive),
            content_encoding: f.encoding,
            framing_chunked: f.chunked,
            framing_other_te: f.other_te,
            content_length: f.content_length,
        },
    )))
}

/// Reads the framing-relevant fields. Conflicting Content-Length values are
/// refused (RFC 9112 §6.3 item 5: request smuggling).
fn framing(headers: &[httparse::Header]) -> Result<Framing, String> {
    let mut f = Framing::default();
    for h in headers {
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = parse_length(h.value)?;
            if f.content_length.is_some_and(|old| old != n) {
                return Err("conflicting Content-Length values".into());
            }
            f.content_length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            let last = h.value.rsplit(|&b| b == b',').next().unwrap_or(b"");
            let chunked = trim(last).eq_ignore_ascii_case(b"chunked");
            f.chunked = chunked;
            f.other_te = !chunked;
        } else if h.name.eq_ignore_ascii_case("content-encoding") {
            let v = trim(h.value);
            f.encoded |= !v.eq_ignore_ascii_case(b"identity");
            let shown = String::from_utf8_lossy(&v[..v.len().min(ENCODING_SHOWN)]);
            f.encoding = Some(shown.into());
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|&b| b == b',').map(trim) {
                f.close |= token.eq_ignore_ascii_case(b"close");
                f.keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        }
    }
    Ok(f)
}

/// Content-Length: digits only; "1,1"-style lists of one repeated value are
/// accepted as RFC 9110 §8.6 allows. Overflow is an error, not a wrap.
fn parse_length(v: &[u8]) -> Result<u64, String> {
    let mut value: Option<u64> = None;
    for part in v.split(|&b| b == b',') {
        let part = trim(part);
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return Err("invalid Content-Length".into());
        }
        let mut n: u64 = 0;
        for &d in part {
            n = n
                .checked_mul(10)
                .and_then(|n| n.checked_add(u64::from(d - b'0')))
                .ok_or("Content-Length does not fit in 64 bits")?;
        }
        if value.is_some_and(|old| old != n) {
            return Err("conflicting Content-Length values".into());
        }
        value = Some(n);
    }
    value.ok_or_else(|| "invalid Content-Length".into())
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &v[start..end.max(start)]
}

/// "METHOD /path": the query string and fragment are dropped (they carry
/// ids and secrets), an absolute-form target keeps only its path.
pub fn request_label(method: &str, target: &str) -> String {
    request_label_digest(method, target, &mut ParamDigest::new())
}

/// As `request_label`, with the path's variable segments normalized like
/// cache keys ("/item/k42" → "/item/?") and, with the query string, added to
/// `digest`: one request kind per route, repeats told apart by the digest.
pub fn request_label_digest(method: &str, target: &str, digest: &mut ParamDigest) -> String {
    let mut path = target;
    // Absolute form (RFC 9112 §3.2.2), any scheme in any case: drop the
    // scheme and authority, which may carry credentials.
    if let Some(i) = path.find("://").filter(|&i| !path[..i].contains('/')) {
        let rest = &path[i + 3..];
        path = rest.find('/').map_or("/", |j| &rest[j..]);
    }
    // Query, fragment and path parameters (";jsessionid=…") can carry secrets.
    let end = path.find(['?', '#', ';']).unwrap_or(path.len());
    let (path, tail) = path.split_at(end);
    let path = if path == "*" {
        path.to_string()
    } else {
        normalize::key(path.as_bytes(), digest)
    };
    if !tail.is_empty() {
        digest.add(tail.as_bytes());
    }
    let mut label = String::with_capacity((method.len() + 1 + path.len()).min(MAX_REQUEST_LABEL));
    label.push_str(method);
    label.push(' ');
    label.push_str(&path);
    if label.len() > MAX_REQUEST_LABEL {
        let mut cut = MAX_REQUEST_LABEL;
        while !label.is_char_boundary(cut) {
            cut -= 1;
        }
        label.truncate(cut);
    }
    label
}
