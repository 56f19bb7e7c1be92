//! HTTP/2 through the `h2` crate: h2 over TLS (ALPN) or h2c with prior knowledge.

use crate::connect::{micros, Io};
use crate::error::{ErrorKind, ProbeError};
use crate::h1::ExchangeTiming;
use crate::request::RequestSpec;
use crate::target::Target;
use bytes::Bytes;
use std::time::{Duration, Instant};

/// One HTTP/2 connection; its frames are driven by a background task.
/// Clones share the connection: each clone can carry its own stream.
#[derive(Clone)]
pub struct H2Conn {
    send: h2::client::SendRequest<Bytes>,
}

fn h2_err(phase: &'static str, e: h2::Error) -> ProbeError {
    if let Some(io) = e.get_io() {
        return ProbeError::io(phase, io);
    }
    let kind = if e.is_go_away() || e.is_reset() {
        ErrorKind::Reset
    } else {
        ErrorKind::Protocol
    };
    ProbeError::new(phase, kind, e.to_string())
}

impl H2Conn {
    pub async fn handshake(io: Box<dyn Io>, timeout: Duration) -> Result<H2Conn, ProbeError> {
        let (send, conn) = tokio::time::timeout(timeout, h2::client::handshake(io))
            .await
            .map_err(|_| ProbeError::timeout("send", timeout))?
            .map_err(|e| h2_err("send", e))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(H2Conn { send })
    }

    pub async fn exchange(
        &mut self,
        target: &Target,
        spec: &RequestSpec,
    ) -> Result<ExchangeTiming, ProbeError> {
        let timeout = spec.timeout;
        let t_send = Instant::now();
        let request = build_request(target, spec)?;
        let ready = tokio::time::timeout(timeout, self.send.clone().ready())
            .await
            .map_err(|_| ProbeError::timeout("send", timeout))?
            .map_err(|e| h2_err("send", e))?;
        self.send = ready;
        let end_of_stream = spec.body.is_empty();
        let (response, mut stream) = self
            .send
            .send_request(request, end_of_stream)
            .map_err(|e| h2_err("send", e))?;
        if !end_of_stream {
            stream
                .send_data(spec.body.clone(), true)
                .map_err(|e| h2_err("send", e))?;
        }
        let t_sent = Instant::now();
        let response = tokio::time::timeout(timeout, response)
            .await
            .map_err(|_| ProbeError::timeout("wait", timeout))?
            .map_err(|e| h2_err("wait", e))?;
        let t_first = Instant::now();
        let status = response.status().as_u16();
        let content_encoding = response
            .headers()
            .get("content-encoding")
            .and_then(|v| v.to_str().ok())
            .map(crate::h1::shown);
        let header_bytes = response
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str().len() + v.len() + 4) as u64)
            .sum();
        let body_bytes = read_body(response.into_body(), timeout).await?;
        let t_done = Instant::now();
        Ok(ExchangeTiming {
            send_us: micros(t_sent - t_send),
            wait_us: micros(t_first - t_sent),
            receive_us: micros(t_done - t_first),
            status,
            header_bytes,
            body_bytes,
            content_encoding,
            keep_alive: true,
        })
    }
}

/// Reads a response body to its end, giving the flow-control window back as
/// it goes; returns its length.
async fn read_body(mut body: h2::RecvStream, timeout: Duration) -> Result<u64, ProbeError> {
    let mut body_bytes = 0u64;
    while let Some(chunk) = tokio::time::timeout(timeout, body.data())
        .await
        .map_err(|_| ProbeError::timeout("receive", timeout))?
    {
        let chunk = chunk.map_err(|e| h2_err("receive", e))?;
        body_bytes += chunk.len() as u64;
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    Ok(body_bytes)
}

fn build_request(target: &Target, spec: &RequestSpec) -> Result<http::Request<()>, ProbeError> {
    let scheme = if target.https { "https" } else { "http" };
    let uri = format!("{scheme}://{}{}", target.authority(), target.path_and_query);
    let mut b = http::Request::builder()
        .method(spec.method.as_str())
        .uri(uri);
    for (name, value) in &spec.headers {
        // Connection-specific headers are forbidden in HTTP/2 (RFC 9113 §8.2.2).
        let lower = name.to_ascii_lowercase();
        if matches!(
            lower.as_str(),
            "host" | "connection" | "keep-alive" | "transfer-encoding" | "upgrade"
        ) {
            continue;
        }
        b = b.header(name.as_str(), value.as_str());
    }
    if let Some(auth) = crate::h1::basic_auth(target, spec) {
        b = b.header("authorization", auth);
    }
    if !spec.has_header("user-agent") {
        b = b.header("user-agent", concat!("whyslow/", env!("CARGO_PKG_VERSION")));
    }
    if let Some(mode) = spec.fresh_trace() {
        b = b.header("traceparent", crate::trace::fresh(mode));
    }
    b.body(())
        .map_err(|e| ProbeError::new("send", ErrorKind::Protocol, format!("request: {e}")))
}
