//! OTLP/gRPC: each export request one unary call to the signal's
//! `Export` method on a kept HTTP/2 connection (TLS with ALPN h2 where the
//! URL is https://), the message gzip-compressed as `grpc-encoding: gzip`
//! says; the answer's `grpc-status` read from its trailers (or its headers,
//! in a trailers-only answer). Built on the h2 crate the receiver uses,
//! driven by a runtime of its own: the exporter's callers are blocking.

use super::{Destination, PostError, Signal, TIMEOUT};
use bytes::Bytes;
use rustls::pki_types::ServerName;
use std::sync::Arc;

/// gRPC status codes OTLP says to retry (opentelemetry-proto's otlp.md):
/// CANCELLED, DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE, UNAVAILABLE,
/// DATA_LOSS. Not RESOURCE_EXHAUSTED, retryable only where the server says
/// when (RetryInfo, not read here): a message past the server's limit
/// answers it, and would every time.
const RETRYABLE_CODES: [u32; 6] = [1, 4, 10, 11, 14, 15];
/// HTTP statuses a proxy in front of a gRPC server answers that may pass.
const RETRYABLE_HTTP: [u16; 4] = [429, 502, 503, 504];
/// An answer's message is read up to this; a Collector's is a few bytes.
const MAX_ANSWER_BYTES: usize = 1 << 20;

/// A kept HTTP/2 connection and the runtime that drives it.
pub struct Channel {
    rt: tokio::runtime::Runtime,
    send: h2::client::SendRequest<Bytes>,
}

fn method(signal: Signal) -> &'static str {
    match signal {
        Signal::Traces => "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
        Signal::Logs => "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
        Signal::Metrics => "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
    }
}

/// One unary call with the gzipped message `gz`.
pub fn send(
    to: &Destination,
    kept: &mut Option<Channel>,
    signal: Signal,
    gz: &[u8],
) -> Result<(), PostError> {
    let named = format!("{} (gRPC)", to.endpoint.origin());
    let retry = |why: String| PostError {
        why: format!("{named}: {why}"),
        retryable: true,
    };
    let channel = match kept.take() {
        Some(c) => c,
        None => open(to).map_err(retry)?,
    };
    let outcome = channel.rt.block_on(async {
        tokio::time::timeout(TIMEOUT, call(channel.send.clone(), to, signal, gz))
            .await
            .unwrap_or_else(|_| Err(Failure::Transport("no answer in time".into())))
    });
    match outcome {
        Ok(()) => {
            *kept = Some(channel);
            Ok(())
        }
        Err(Failure::Transport(why)) => Err(retry(why)),
        Err(Failure::Status { code, message }) => Err(PostError {
            why: format!("{named}: grpc-status {code} {message}"),
            retryable: RETRYABLE_CODES.contains(&code),
        }),
        Err(Failure::Http(status)) => Err(PostError {
            why: format!("{named}: answered HTTP {status}"),
            retryable: RETRYABLE_HTTP.contains(&status),
        }),
    }
}

enum Failure {
    Transport(String),
    Status { code: u32, message: String },
    Http(u16),
}

fn open(to: &Destination) -> Result<Channel, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let tcp = super::http1::connect_tcp(&to.endpoint.host, to.endpoint.port, "connecting")?;
    tcp.set_nonblocking(true).map_err(|e| e.to_string())?;
    let send = rt.block_on(async {
        let tcp = tokio::net::TcpStream::from_std(tcp).map_err(|e| e.to_string())?;
        let connect = async {
            match &to.tls {
                None => handshake(tcp).await,
                Some(config) => {
                    let name = ServerName::try_from(to.endpoint.host.clone())
                        .map_err(|e| e.to_string())?;
                    let tls = tokio_rustls::TlsConnector::from(Arc::clone(config))
                        .connect(name, tcp)
                        .await
                        .map_err(|e| format!("TLS: {e}"))?;
                    handshake(tls).await
                }
            }
        };
        tokio::time::timeout(TIMEOUT, connect)
            .await
            .unwrap_or_else(|_| Err("no HTTP/2 handshake in time".into()))
    })?;
    Ok(Channel { rt, send })
}

async fn handshake<T>(io: T) -> Result<h2::client::SendRequest<Bytes>, String>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (send, conn) = h2::client::handshake(io)
        .await
        .map_err(|e| format!("HTTP/2: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(send)
}

async fn call(
    send: h2::client::SendRequest<Bytes>,
    to: &Destination,
    signal: Signal,
    gz: &[u8],
) -> Result<(), Failure> {
    let transport = |e: h2::Error| Failure::Transport(e.to_string());
    let mut send = send.ready().await.map_err(transport)?;
    let mut request = http::Request::post(format!("{}{}", to.endpoint.origin(), method(signal)))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-encoding", "gzip")
        .header("grpc-accept-encoding", "gzip")
        .header("grpc-timeout", format!("{}S", TIMEOUT.as_secs()))
        .header("user-agent", concat!("whyslow/", env!("CARGO_PKG_VERSION")));
    for (name, value) in &to.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let request = request
        .body(())
        .map_err(|e| Failure::Transport(format!("a header: {e}")))?;
    let (answer, mut body) = send.send_request(request, false).map_err(transport)?;
    let mut message = Vec::with_capacity(5 + gz.len());
    message.push(1); // compressed
    message.extend_from_slice(&(gz.len() as u32).to_be_bytes());
    message.extend_from_slice(gz);
    body.send_data(Bytes::from(message), true)
        .map_err(transport)?;
    let answer = answer.await.map_err(transport)?;
    let status = answer.status().as_u16();
    if status != 200 {
        return Err(Failure::Http(status));
    }
    if let Some(code) = grpc_status(answer.headers()) {
        return code;
    }
    let mut body = answer.into_body();
    let mut read = 0usize;
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(transport)?;
        read += chunk.len();
        let _ = body.flow_control().release_capacity(chunk.len());
        if read > MAX_ANSWER_BYTES {
            return Err(Failure::Transport("an answer past 1 MiB".into()));
        }
    }
    let trailers = body.trailers().await.map_err(transport)?;
    trailers
        .as_ref()
        .and_then(grpc_status)
        .unwrap_or_else(|| Err(Failure::Transport("no grpc-status".into())))
}

/// The call's outcome from `grpc-status` (and `grpc-message`), if named.
fn grpc_status(h: &http::HeaderMap) -> Option<Result<(), Failure>> {
    let code: u32 = h.get("grpc-status")?.to_str().ok()?.trim().parse().ok()?;
    if code == 0 {
        return Some(Ok(()));
    }
    let message = h
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .chars()
        .take(200)
        .collect();
    Some(Err(Failure::Status { code, message }))
}
