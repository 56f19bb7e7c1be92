//! `receive --otlp-grpc ADDR`: OTLP over gRPC, as most SDKs send it by
//! default — `TraceService/Export` calls over HTTP/2 (the h2 crate), each
//! message's protobuf given to the same span set as OTLP/HTTP's bodies.
//! Written on h2 rather than a gRPC framework: one unary method whose
//! answer is empty, and the gRPC framing is five bytes a message.

use bytes::Bytes;
use std::sync::{Arc, Mutex};
use tokio::net::TcpStream;
use whyslow_otlp::import::grpc::messages;
use whyslow_otlp::import::{Encoding, SpanSet, MAX_REQUEST_BYTES};

/// The one method served.
pub const EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
/// gRPC status codes (grpc/doc/statuscodes.md).
const OK: u32 = 0;
const INVALID_ARGUMENT: u32 = 3;
const RESOURCE_EXHAUSTED: u32 = 8;
const UNIMPLEMENTED: u32 = 12;
/// An empty ExportTraceServiceResponse, framed: not compressed, 0 bytes.
const EMPTY_ANSWER: [u8; 5] = [0, 0, 0, 0, 0];

/// Serves one connection's calls until the peer closes it.
pub async fn serve(stream: TcpStream, set: Arc<Mutex<SpanSet>>) {
    let Ok(mut conn) = h2::server::handshake(stream).await else {
        return;
    };
    while let Some(Ok((request, respond))) = conn.accept().await {
        let set = set.clone();
        tokio::spawn(async move {
            let (status, message) = export(request, &set).await;
            let _ = answer(respond, status, &message);
        });
    }
}

/// Reads one call and hands its spans over: its gRPC status, and why when not OK.
async fn export(request: http::Request<h2::RecvStream>, set: &Mutex<SpanSet>) -> (u32, String) {
    if request.uri().path() != EXPORT_PATH {
        return (UNIMPLEMENTED, format!("only {EXPORT_PATH} is served"));
    }
    let gzip = match request.headers().get("grpc-encoding").map(|v| v.as_bytes()) {
        None | Some(b"identity") => false,
        Some(b"gzip") => true,
        Some(_) => {
            return (
                UNIMPLEMENTED,
                "grpc-encoding must be gzip or identity".into(),
            )
        }
    };
    let mut body = request.into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        let Ok(chunk) = chunk else {
            return (INVALID_ARGUMENT, "the call was reset".into());
        };
        let _ = body.flow_control().release_capacity(chunk.len());
        if bytes.len() + chunk.len() > MAX_REQUEST_BYTES + 5 {
            return (
                RESOURCE_EXHAUSTED,
                "a message larger than whyslow reads".into(),
            );
        }
        bytes.extend_from_slice(&chunk);
    }
    let messages = match messages(&bytes) {
        Ok(m) => m,
        Err(e) => return (INVALID_ARGUMENT, e),
    };
    let mut set = set.lock().unwrap_or_else(|e| e.into_inner());
    for m in messages {
        if let Err(e) = set.add_body(m.bytes, Encoding::Protobuf, m.compressed && gzip) {
            return (INVALID_ARGUMENT, e);
        }
    }
    (OK, String::new())
}

fn answer(
    mut respond: h2::server::SendResponse<Bytes>,
    status: u32,
    message: &str,
) -> Result<(), h2::Error> {
    let head = http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .body(())
        .unwrap_or_default();
    let mut stream = respond.send_response(head, false)?;
    if status == OK {
        stream.send_data(Bytes::from_static(&EMPTY_ANSWER), false)?;
    }
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", status.into());
    if let Ok(v) = http::HeaderValue::from_str(message) {
        if !message.is_empty() {
            trailers.insert("grpc-message", v);
        }
    }
    stream.send_trailers(trailers)
}
