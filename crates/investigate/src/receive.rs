//! `whyslow receive --otlp ADDR`: an OTLP/HTTP endpoint (`POST /v1/traces`,
//! `application/x-protobuf` or `application/json`, gzip or not) that keeps
//! the spans SDKs and collectors send it, for a duration or until Ctrl-C
//! or SIGTERM.
//! HTTP/1.1 by hand over httparse: one route, bodies bounded, and a
//! client speaking OTLP/gRPC (HTTP/2) to it told what to change instead of
//! being left with a protocol error it cannot explain. OTLP/gRPC is taken
//! on a port of its own (`receive_grpc`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{signal, Signal, SignalKind};
use whyslow_otlp::import::{Encoding, SpanSet, MAX_REQUEST_BYTES};

/// Largest request head read.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Connections served at once; more wait in the listen queue.
const MAX_CONNECTIONS: usize = 64;
/// What a gRPC exporter is told (it opens with HTTP/2's preface).
pub const GRPC_REFUSED: &str = "an OTLP/gRPC client connected to the OTLP/HTTP port: \
     take gRPC with --otlp-grpc ADDR (port 4317 by convention), or set the exporter's protocol \
     to http/protobuf (OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf)";

/// Where spans are taken: OTLP/HTTP, OTLP/gRPC, or both.
#[derive(Debug, Clone, Copy, Default)]
pub struct Listen {
    pub http: Option<SocketAddr>,
    pub grpc: Option<SocketAddr>,
}

impl Listen {
    /// "OTLP/HTTP on http://127.0.0.1:4318/v1/traces and OTLP/gRPC on 127.0.0.1:4317".
    pub fn describe(&self) -> String {
        let http = self
            .http
            .map(|a| format!("OTLP/HTTP on http://{a}/v1/traces"));
        let grpc = self.grpc.map(|a| format!("OTLP/gRPC on {a}"));
        let both: Vec<String> = http.into_iter().chain(grpc).collect();
        both.join(" and ")
    }
}

async fn bind(addr: Option<SocketAddr>) -> Result<Option<TcpListener>, String> {
    match addr {
        None => Ok(None),
        Some(a) => TcpListener::bind(a)
            .await
            .map(Some)
            .map_err(|e| format!("cannot listen on {a}: {e}")),
    }
}

/// Accepts connections until the listener fails for good, serving each
/// with `serve`, at most MAX_CONNECTIONS at once; never returns without one.
async fn accept_all<F, Fut>(listener: Option<TcpListener>, set: Arc<Mutex<SpanSet>>, serve: F)
where
    F: Fn(TcpStream, Arc<Mutex<SpanSet>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let Some(listener) = listener else {
        return std::future::pending().await;
    };
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let served = serve(stream, set.clone());
        tokio::spawn(async move {
            served.await;
            drop(permit);
        });
    }
}

/// Takes spans where `listen` says until `duration` passes, Ctrl-C or
/// SIGTERM. `ready` is called once listening, with the addresses bound.
/// Err: an address cannot be listened on.
pub fn otlp(
    listen: Listen,
    duration: Option<Duration>,
    ready: impl FnOnce(Listen),
) -> Result<SpanSet, String> {
    let rt = crate::runtime(2);
    rt.block_on(async move {
        let http = bind(listen.http).await?;
        let grpc = bind(listen.grpc).await?;
        // SIGTERM (a service manager's stop, `timeout`) ends the run as
        // Ctrl-C does: the spans already in are analyzed. Set up before
        // `ready`, so a stop sent right after it is not missed.
        let mut term = signal(SignalKind::terminate()).ok();
        let bound = |l: &Option<TcpListener>| l.as_ref().and_then(|l| l.local_addr().ok());
        ready(Listen {
            http: bound(&http),
            grpc: bound(&grpc),
        });
        let set = Arc::new(Mutex::new(SpanSet::default()));
        let until = async {
            match duration {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = accept_all(http, set.clone(), |s, set| async move { serve(s, &set).await }) => {}
            _ = accept_all(grpc, set.clone(), crate::receive_grpc::serve) => {}
            _ = until => {}
            _ = crate::ctrl_c() => {}
            _ = received(term.as_mut()) => {}
        }
        // Bodies being read when the run ended are dropped with their tasks.
        let set = std::mem::take(&mut *set.lock().unwrap_or_else(|e| e.into_inner()));
        Ok(set)
    })
}

/// Completes when `signal` arrives; never when it could not be listened for.
async fn received(signal: Option<&mut Signal>) {
    match signal {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

/// One connection: requests one after another (keep-alive).
async fn serve(mut stream: TcpStream, set: &Mutex<SpanSet>) {
    let mut buf = Vec::with_capacity(4096);
    loop {
        let Some(head_len) = read_head(&mut stream, &mut buf).await else {
            return;
        };
        if buf.starts_with(b"PRI * HTTP/2.0") {
            set.lock()
                .unwrap_or_else(|e| e.into_inner())
                .note(GRPC_REFUSED.into());
            eprintln!("whyslow: {GRPC_REFUSED}");
            return;
        }
        let (status, reply, close) = match request(&buf[..head_len]) {
            Err((status, why)) => (status, why.to_string(), true),
            Ok(req) => {
                let Some(body) = read_body(&mut stream, &mut buf, head_len, req.length).await
                else {
                    return;
                };
                let outcome = set.lock().unwrap_or_else(|e| e.into_inner()).add_body(
                    &body,
                    req.encoding,
                    req.gzip,
                );
                match outcome {
                    Ok(()) if req.encoding == Encoding::Json => (200, "{}".into(), false),
                    Ok(()) => (200, String::new(), false),
                    Err(e) => (400, e, false),
                }
            }
        };
        let reason = match status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            411 => "Length Required",
            413 => "Payload Too Large",
            _ => "Unsupported Media Type",
        };
        let head = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\n{}\r\n",
            reply.len(),
            if close { "Connection: close\r\n" } else { "" }
        );
        if stream.write_all(head.as_bytes()).await.is_err()
            || stream.write_all(reply.as_bytes()).await.is_err()
            || close
        {
            return;
        }
    }
}

/// Reads until `buf` holds a whole head: its length. None: the peer closed,
/// or the head is too large (HTTP/2's preface has no blank line of its own
/// soon enough either: it is recognized from its first bytes).
async fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    loop {
        if buf.starts_with(b"PRI * HTTP/2.0") {
            return Some(buf.len());
        }
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(i + 4);
        }
        if buf.len() > MAX_HEAD_BYTES {
            return None;
        }
        let mut chunk = [0u8; 8192];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The body after a head of `head_len` bytes; `buf` keeps what follows it.
async fn read_body(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    head_len: usize,
    length: usize,
) -> Option<Vec<u8>> {
    buf.drain(..head_len);
    while buf.len() < length {
        let mut chunk = vec![0u8; (length - buf.len()).min(1 << 20)];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    Some(buf.drain(..length).collect())
}

struct Request {
    length: usize,
    encoding: Encoding,
    gzip: bool,
}

/// What a head asks for, or the status that refuses it.
fn request(head: &[u8]) -> Result<Request, (u16, &'static str)> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    if !matches!(req.parse(head), Ok(httparse::Status::Complete(_))) {
        return Err((400, "not an HTTP/1.1 request"));
    }
    let path = req.path.unwrap_or("");
    if req.method != Some("POST") || path.split('?').next() != Some("/v1/traces") {
        return Err((404, "OTLP/HTTP traces go to POST /v1/traces"));
    }
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).to_ascii_lowercase())
    };
    let length = header("content-length")
        .and_then(|l| l.trim().parse::<usize>().ok())
        .ok_or((411, "a Content-Length is required"))?;
    if length > MAX_REQUEST_BYTES {
        return Err((413, "a body larger than whyslow reads"));
    }
    let kind = header("content-type").unwrap_or_default();
    let encoding = if kind.starts_with("application/json") {
        Encoding::Json
    } else if kind.starts_with("application/x-protobuf") || kind.starts_with("application/protobuf")
    {
        Encoding::Protobuf
    } else {
        return Err((
            415,
            "Content-Type must be application/x-protobuf or application/json",
        ));
    };
    let gzip = match header("content-encoding").as_deref() {
        None | Some("identity") => false,
        Some("gzip") => true,
        Some(_) => return Err((415, "Content-Encoding must be gzip or none")),
    };
    Ok(Request {
        length,
        encoding,
        gzip,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_read_for_route_length_type_and_encoding() {
        let ok = request(
            b"POST /v1/traces HTTP/1.1\r\nContent-Type: application/x-protobuf\r\nContent-Encoding: gzip\r\nContent-Length: 12\r\n\r\n",
        )
        .ok()
        .unwrap();
        assert_eq!(
            (ok.length, ok.encoding, ok.gzip),
            (12, Encoding::Protobuf, true)
        );
        let refused = |head: &[u8]| request(head).err().map(|e| e.0);
        assert_eq!(refused(b"GET /v1/traces HTTP/1.1\r\n\r\n"), Some(404));
        assert_eq!(
            refused(b"POST /v1/traces HTTP/1.1\r\nContent-Type: application/json\r\n\r\n"),
            Some(411)
        );
        assert_eq!(
            refused(b"POST /v1/traces HTTP/1.1\r\nContent-Type: text/plain\r\nContent-Length: 1\r\n\r\n"),
            Some(415)
        );
        let huge = format!(
            "POST /v1/traces HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            MAX_REQUEST_BYTES + 1
        );
        assert_eq!(refused(huge.as_bytes()), Some(413));
    }
}
