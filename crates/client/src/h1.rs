//! HTTP/1.1 written by hand, so that the bytes and the moment each write
//! reaches the socket are exactly what the user asked for.

use crate::connect::{micros, Io};
use crate::error::{ErrorKind, ProbeError};
use crate::request::{RequestSpec, WritePattern};
use crate::target::Target;
use crate::trace::{self, TraceContext};
use bytes::{Bytes, BytesMut};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use whyslow_proto::http1::{parse_response_prefix, BodyKind, Framer, Step};

/// Response headers larger than this are refused (nginx's large buffers are 4×8 KiB).
const MAX_HEADER_BYTES: usize = 64 * 1024;
const READ_CHUNK: usize = 16 * 1024;

/// `Authorization: Basic …` for credentials in the URL, unless the user set
/// an Authorization header of their own (curl's precedence).
pub(crate) fn basic_auth(target: &Target, spec: &RequestSpec) -> Option<String> {
    use base64::Engine;
    let userinfo = target
        .userinfo
        .as_ref()
        .filter(|_| !spec.has_header("authorization"))?;
    Some(format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(userinfo)
    ))
}

/// Longest header value echoed into a report: enough for any real
/// Content-Encoding or Content-Length, too short to carry a payload.
const SHOWN_VALUE_MAX: usize = 32;

/// A server-sent value as reports may show it: cut to `SHOWN_VALUE_MAX` characters.
pub(crate) fn shown(value: &str) -> String {
    value.chars().take(SHOWN_VALUE_MAX).collect()
}

/// A request serialized once, ready to be sent many times.
#[derive(Debug, Clone)]
pub struct PreparedRequest {
    pub head: Bytes,
    /// Where the `traceparent` value sits in `head`, and its flags.
    pub trace: Option<(usize, TraceContext)>,
    pub body: Bytes,
    pub write: WritePattern,
    pub is_head: bool,
}

impl PreparedRequest {
    pub fn new(target: &Target, spec: &RequestSpec) -> PreparedRequest {
        let mut h = format!("{} {} HTTP/1.1\r\n", spec.method, target.path_and_query);
        if !spec.has_header("host") {
            h.push_str(&format!("Host: {}\r\n", target.authority()));
        }
        if !spec.has_header("user-agent") {
            h.push_str(concat!(
                "User-Agent: whyslow/",
                env!("CARGO_PKG_VERSION"),
                "\r\n"
            ));
        }
        if !spec.has_header("accept") {
            h.push_str("Accept: */*\r\n");
        }
        let has_length = spec.has_header("content-length") || spec.has_header("transfer-encoding");
        if !spec.body.is_empty() && !has_length {
            h.push_str(&format!("Content-Length: {}\r\n", spec.body.len()));
        }
        if !spec.body.is_empty() && !spec.has_header("content-type") {
            h.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
        }
        if let Some(auth) = basic_auth(target, spec) {
            h.push_str(&format!("Authorization: {auth}\r\n"));
        }
        for (name, value) in &spec.headers {
            h.push_str(&format!("{name}: {value}\r\n"));
        }
        // A placeholder each send overwrites with a fresh value.
        let trace = spec.fresh_trace().map(|mode| {
            h.push_str("traceparent: ");
            let at = h.len();
            h.push_str(&trace::fresh(mode));
            h.push_str("\r\n");
            (at, mode)
        });
        h.push_str("\r\n");
        PreparedRequest {
            trace,
            head: Bytes::from(h),
            body: spec.body.clone(),
            write: spec.write,
            is_head: spec.method.eq_ignore_ascii_case("HEAD"),
        }
    }

    pub fn len(&self) -> u64 {
        (self.head.len() + self.body.len()) as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What one request/response on an open connection took.
#[derive(Debug, Clone, Default)]
pub struct ExchangeTiming {
    pub send_us: u64,
    pub wait_us: u64,
    pub receive_us: u64,
    pub status: u16,
    pub header_bytes: u64,
    pub body_bytes: u64,
    pub content_encoding: Option<String>,
    /// False when the server asked to close, or the body ran to the close.
    pub keep_alive: bool,
}

struct Head {
    status: u16,
    len: usize,
    body: BodyKind,
    content_encoding: Option<String>,
    close: bool,
}

/// Sends `req` on `io` and reads the whole response. `buf` carries bytes read
/// past the end of one response into the next call.
pub async fn exchange(
    io: &mut dyn Io,
    buf: &mut BytesMut,
    req: &PreparedRequest,
    timeout: Duration,
) -> Result<ExchangeTiming, ProbeError> {
    let t_send = Instant::now();
    write_request(io, req, timeout).await?;
    let t_sent = Instant::now();

    let (head, t_first) = read_head(io, buf, req.is_head, timeout).await?;
    let body_bytes = read_body(io, buf, head.body, timeout).await?;
    let t_done = Instant::now();
    Ok(ExchangeTiming {
        send_us: micros(t_sent - t_send),
        wait_us: micros(t_first.saturating_duration_since(t_sent)),
        receive_us: micros(t_done.saturating_duration_since(t_first)),
        status: head.status,
        header_bytes: head.len as u64,
        body_bytes,
        content_encoding: head.content_encoding,
        keep_alive: !head.close && !matches!(head.body, BodyKind::UntilClose),
    })
}

async fn write_request(
    io: &mut dyn Io,
    req: &PreparedRequest,
    timeout: Duration,
) -> Result<(), ProbeError> {
    let fresh;
    let head: &[u8] = match req.trace {
        Some((at, mode)) => {
            let mut h = req.head.to_vec();
            h[at..at + trace::VALUE_LEN].copy_from_slice(trace::fresh(mode).as_bytes());
            fresh = h;
            &fresh
        }
        None => &req.head,
    };
    let write = async {
        match req.write {
            WritePattern::Split if !req.body.is_empty() => {
                io.write_all(head).await?;
                io.flush().await?;
                io.write_all(&req.body).await?;
            }
            _ if req.body.is_empty() => io.write_all(head).await?,
            _ => {
                let mut all = Vec::with_capacity(head.len() + req.body.len());
                all.extend_from_slice(head);
                all.extend_from_slice(&req.body);
                io.write_all(&all).await?;
            }
        }
        io.flush().await
    };
    tokio::time::timeout(timeout, write)
        .await
        .map_err(|_| ProbeError::timeout("send", timeout))?
        .map_err(|e| ProbeError::io("send", &e))
}

/// Reads more bytes into `buf`; Ok(false) at end of stream.
async fn fill(
    io: &mut dyn Io,
    buf: &mut BytesMut,
    phase: &'static str,
    timeout: Duration,
) -> Result<bool, ProbeError> {
    buf.reserve(READ_CHUNK);
    let n = tokio::time::timeout(timeout, io.read_buf(buf))
        .await
        .map_err(|_| ProbeError::timeout(phase, timeout))?
        .map_err(|e| ProbeError::io(phase, &e))?;
    Ok(n > 0)
}

async fn read_head(
    io: &mut dyn Io,
    buf: &mut BytesMut,
    is_head: bool,
    timeout: Duration,
) -> Result<(Head, Instant), ProbeError> {
    let mut first = None;
    loop {
        if !buf.is_empty() {
            first.get_or_insert_with(Instant::now);
            if let Some(head) = parse_head(buf, is_head)? {
                let _ = buf.split_to(head.len);
                if (100..200).contains(&head.status) && head.status != 101 {
                    continue; // interim response (100 Continue): the real one follows
                }
                return Ok((head, first.unwrap_or_else(Instant::now)));
            }
            if buf.len() > MAX_HEADER_BYTES {
                return Err(ProbeError::new(
                    "receive",
                    ErrorKind::Protocol,
                    "response headers exceed 64 KiB",
                ));
            }
        }
        let phase = if first.is_some() { "receive" } else { "wait" };
        if !fill(io, buf, phase, timeout).await? {
            let kind = ErrorKind::EmptyReply;
            return Err(ProbeError::new(phase, kind, "server closed the connection"));
        }
    }
}

/// The response head at the start of `buf`, framed by the same rules the
/// capture analyzer uses (proto's `parse_response_prefix`).
fn parse_head(buf: &[u8], is_head: bool) -> Result<Option<Head>, ProbeError> {
    let parsed = parse_response_prefix(buf)
        .map_err(|e| ProbeError::new("receive", ErrorKind::Protocol, e))?;
    Ok(parsed.map(|(len, h)| Head {
        status: h.status,
        len,
        body: h.body(is_head),
        content_encoding: h.content_encoding.as_deref().map(shown),
        close: h.close,
    }))
}

/// Reads the body with the same framer the capture analyzer uses (Content-Length,
/// chunked, or to the close); returns its length, chunk framing excluded.
async fn read_body(
    io: &mut dyn Io,
    buf: &mut BytesMut,
    body: BodyKind,
    timeout: Duration,
) -> Result<u64, ProbeError> {
    let mut framer = Framer::new();
    if framer.start_body(body) {
        return Ok(0);
    }
    loop {
        while !buf.is_empty() {
            let (used, step) = framer
                .step(buf)
                .map_err(|e| ProbeError::new("receive", ErrorKind::Protocol, e))?;
            let _ = buf.split_to(used);
            if step == Step::MessageDone {
                return Ok(framer.body_bytes());
            }
        }
        if !fill(io, buf, "receive", timeout).await? {
            if framer.reading_until_close() {
                return Ok(framer.body_bytes());
            }
            let msg = format!("body ended after {} bytes", framer.body_bytes());
            return Err(ProbeError::new("receive", ErrorKind::EmptyReply, msg));
        }
    }
}
