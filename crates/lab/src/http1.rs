//! A keep-alive HTTP/1.1 server whose socket behaviour is set explicitly:
//! how it writes responses, whether it re-enables quick ACKs, how long it works.

use crate::scenario::accept_each;
use bytes::BytesMut;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Request headers larger than this are refused (matches the client's limit).
const MAX_HEAD: usize = 64 * 1024;
/// Request bodies the lab reads whole: the scenarios send small JSON; the
/// bound keeps a hostile Content-Length from growing the buffer.
pub const MAX_BODY: usize = 16 * 1024 * 1024;

#[derive(Debug, Clone)]
pub struct AppConfig {
    /// Time the handler works before answering.
    pub work: Duration,
    pub body: Vec<u8>,
    /// Set TCP_QUICKACK when a request arrives with its body still missing,
    /// as HAProxy does since 1.4.19 (commit 5e205524).
    pub quickack_on_partial: bool,
    /// Write response headers and body in two writes (without TCP_NODELAY).
    pub split_response: bool,
}

impl Default for AppConfig {
    fn default() -> Self {
        AppConfig {
            work: Duration::ZERO,
            body: b"{\"ok\":true}\n".to_vec(),
            quickack_on_partial: false,
            split_response: false,
        }
    }
}

/// A parsed request head: what the lab servers need to know.
pub struct RequestHead {
    pub method: String,
    pub path: String,
    pub head_len: usize,
    pub content_length: usize,
    pub close: bool,
    /// The request's W3C `traceparent`, which a front propagates to its
    /// backing calls as an instrumented service does.
    pub traceparent: Option<String>,
}

/// Parses a request head from `buf`; Ok(None) when more bytes are needed.
pub fn parse_request(buf: &[u8]) -> Result<Option<RequestHead>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => {
            return Err("head too large".into())
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let mut content_length = 0;
    let mut close = req.version == Some(0);
    let mut traceparent = None;
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("traceparent") {
            traceparent = Some(String::from_utf8_lossy(h.value).trim().to_string());
        }
        let v = String::from_utf8_lossy(h.value).trim().to_ascii_lowercase();
        if h.name.eq_ignore_ascii_case("content-length") {
            content_length = v.parse().map_err(|_| "bad content-length".to_string())?;
            if content_length > MAX_BODY {
                return Err(format!("body over {MAX_BODY} bytes"));
            }
        } else if h.name.eq_ignore_ascii_case("connection") {
            close = v.contains("close");
        }
    }
    Ok(Some(RequestHead {
        method: req.method.unwrap_or("").to_string(),
        path: req.path.unwrap_or("/").to_string(),
        head_len,
        content_length,
        close,
        traceparent,
    }))
}

/// Sets TCP_QUICKACK: the next ACK goes out now instead of after the delayed-ACK timer.
pub fn quickack(stream: &TcpStream) {
    use std::os::fd::AsRawFd;
    let one: libc::c_int = 1;
    // SAFETY: valid fd owned by `stream`; option value is a c_int of the given size.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_QUICKACK,
            &one as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// A whole JSON response with its status line ("200 OK").
pub fn json_response(status: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// Reads one whole request (head and Content-Length body) into `buf`.
/// Returns None at a clean end of stream.
pub async fn read_request(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    quickack_on_partial: bool,
) -> std::io::Result<Option<RequestHead>> {
    let head = loop {
        if let Some(h) = parse_request(buf).map_err(std::io::Error::other)? {
            break h;
        }
        if stream.read_buf(buf).await? == 0 {
            return Ok(None);
        }
    };
    let want = head.head_len + head.content_length;
    if buf.len() < want && quickack_on_partial {
        quickack(stream);
    }
    while buf.len() < want {
        if stream.read_buf(buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(Some(head))
}

async fn handle(mut stream: TcpStream, cfg: Arc<AppConfig>) -> std::io::Result<()> {
    let quick = cfg.quickack_on_partial;
    let mut buf = BytesMut::with_capacity(8192);
    loop {
        let Some(head) = read_request(&mut stream, &mut buf, quick).await? else {
            return Ok(());
        };
        if respond(&mut stream, &mut buf, &head, &cfg).await? {
            return Ok(());
        }
    }
}

/// Serves HTTP/1.1 on any byte stream (TLS included); no socket options.
pub async fn handle_io<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    cfg: Arc<AppConfig>,
) -> std::io::Result<()> {
    let mut buf = BytesMut::with_capacity(8192);
    while let Some(head) = read_whole_request(&mut stream, &mut buf).await? {
        if respond(&mut stream, &mut buf, &head, &cfg).await? {
            return Ok(());
        }
    }
    Ok(())
}

/// Reads one whole request from any byte stream (TLS included) into `buf`.
/// Returns None at the end of the stream.
pub async fn read_whole_request<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
) -> std::io::Result<Option<RequestHead>> {
    loop {
        if let Some(h) = parse_request(buf).map_err(std::io::Error::other)? {
            if buf.len() >= h.head_len + h.content_length {
                return Ok(Some(h));
            }
        }
        if stream.read_buf(buf).await? == 0 {
            return Ok(None);
        }
    }
}

/// Writes the response to one request; true when the connection should close.
async fn respond<S: AsyncWrite + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
    head: &RequestHead,
    cfg: &AppConfig,
) -> std::io::Result<bool> {
    let _ = buf.split_to(head.head_len + head.content_length);
    if !cfg.work.is_zero() {
        tokio::time::sleep(cfg.work).await;
    }
    let resp_head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{}\r\n",
        cfg.body.len(),
        if head.close {
            "Connection: close\r\n"
        } else {
            ""
        }
    );
    if cfg.split_response {
        stream.write_all(resp_head.as_bytes()).await?;
        stream.write_all(&cfg.body).await?;
    } else {
        let mut all = resp_head.into_bytes();
        all.extend_from_slice(&cfg.body);
        stream.write_all(&all).await?;
    }
    Ok(head.close)
}

/// Serves until the task is dropped or aborted.
pub async fn serve(listener: TcpListener, cfg: AppConfig) {
    let cfg = Arc::new(cfg);
    accept_each(listener, |stream| handle(stream, cfg.clone())).await;
}
