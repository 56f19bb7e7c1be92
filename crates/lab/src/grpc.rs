//! gRPC's unary calls over HTTP/2, without TLS (h2c) or over it (ALPN h2),
//! as small as the lab needs: a server that answers every method after a
//! fixed latency and
//! advertises how many streams a connection may carry at once, and a
//! channel — one HTTP/2 connection, as gRPC clients keep one per target —
//! that frames each call's message behind gRPC's 5-byte prefix and reads
//! `grpc-status` from the trailers. Messages are opaque bytes: whyslow reads
//! their prefixes and hashes them, it never decodes protobuf.

use crate::pool::{Dialer, Stream};
use crate::truth::Calls;
use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue};
use std::io;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::OnceCell;
use tokio_rustls::TlsAcceptor;

/// The largest request message the server reads: the lab's are a few bytes.
const MAX_MESSAGE: usize = 64 * 1024;

/// `message` behind gRPC's prefix: not compressed, its length big-endian.
pub fn framed(message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + message.len());
    out.put_u8(0);
    out.put_u32(message.len() as u32);
    out.put_slice(message);
    out.freeze()
}

/// Serves every call on `listener`: its answer `reply` after `latency`,
/// status 0. `max_streams`: the SETTINGS_MAX_CONCURRENT_STREAMS it sends;
/// `tls`: over TLS (its config offers h2 by ALPN), else h2c.
pub async fn serve(
    listener: TcpListener,
    latency: Duration,
    max_streams: u32,
    reply: Bytes,
    tls: Option<TlsAcceptor>,
) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        // gRPC servers write frames without Nagle's delay.
        let _ = tcp.set_nodelay(true);
        let (reply, tls) = (reply.clone(), tls.clone());
        tokio::spawn(async move {
            match tls {
                None => serve_connection(tcp, latency, max_streams, reply).await,
                Some(acceptor) => {
                    if let Ok(stream) = acceptor.accept(tcp).await {
                        serve_connection(stream, latency, max_streams, reply).await
                    }
                }
            }
        });
    }
}

async fn serve_connection<S: Stream + 'static>(
    tcp: S,
    latency: Duration,
    max_streams: u32,
    reply: Bytes,
) {
    let mut builder = h2::server::Builder::new();
    builder.max_concurrent_streams(max_streams);
    let Ok(mut conn) = builder.handshake(tcp).await else {
        return;
    };
    // Accepting drives the connection: every stream's frames go out from here.
    while let Some(Ok((request, mut respond))) = conn.accept().await {
        let reply = reply.clone();
        tokio::spawn(async move {
            let mut body = request.into_body();
            let mut read = 0;
            while let Some(Ok(chunk)) = body.data().await {
                read += chunk.len();
                let _ = body.flow_control().release_capacity(chunk.len());
                if read > MAX_MESSAGE {
                    return;
                }
            }
            tokio::time::sleep(latency).await;
            let response = http::Response::builder()
                .status(200)
                .header("content-type", "application/grpc")
                .body(())
                .expect("static response");
            let Ok(mut send) = respond.send_response(response, false) else {
                return;
            };
            if send.send_data(framed(&reply), false).is_ok() {
                let mut trailers = HeaderMap::new();
                trailers.insert("grpc-status", HeaderValue::from_static("0"));
                let _ = send.send_trailers(trailers);
            }
        });
    }
}

/// A gRPC channel to one server: one HTTP/2 connection, opened at the first
/// call. A call past the server's stream limit waits in the channel until
/// another call's stream closes.
pub struct Channel {
    dialer: Dialer,
    /// The connection and its local port.
    sender: OnceCell<(h2::client::SendRequest<Bytes>, u16)>,
}

impl Channel {
    /// A channel over h2c to `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        Channel::over(Dialer::plain(addr))
    }

    /// A channel whose connection `dialer` opens (TLS with ALPN h2, or not).
    pub fn over(dialer: Dialer) -> Self {
        Channel {
            dialer,
            sender: OnceCell::new(),
        }
    }

    async fn connect(&self) -> io::Result<(h2::client::SendRequest<Bytes>, u16)> {
        let (tcp, port) = self.dialer.open().await?;
        // One stream until the server's SETTINGS say how many (its own
        // first frame): past its limit the server refuses a stream, and gRPC
        // clients wait for those settings before their first calls.
        let (sender, conn) = h2::client::Builder::new()
            .initial_max_send_streams(1)
            .handshake(tcp)
            .await
            .map_err(io::Error::other)?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok((sender, port))
    }

    /// One unary call of `path` ("/package.Service/Method") with `message`,
    /// read to its trailers; carries `traceparent` if the inbound request
    /// had one; recorded in `calls`.
    pub async fn unary(
        &self,
        path: &str,
        message: &[u8],
        traceparent: Option<&str>,
        calls: &Calls,
    ) -> io::Result<()> {
        let (sender, port) = self.sender.get_or_try_init(|| self.connect()).await?;
        let mut sender = sender.clone().ready().await.map_err(io::Error::other)?;
        let (scheme, addr) = (self.dialer.scheme(), self.dialer.addr);
        let mut request = http::Request::post(format!("{scheme}://{addr}{path}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        if let Some(t) = traceparent {
            request = request.header("traceparent", t);
        }
        let request = request.body(()).map_err(io::Error::other)?;
        let (response, mut send) = sender
            .send_request(request, false)
            .map_err(io::Error::other)?;
        // Past the server's limit the stream waits in the channel, and h2
        // gives a stream no send capacity before it has opened (HEADERS
        // sent): the call is on the wire once its message may go.
        let body = framed(message);
        send.reserve_capacity(body.len());
        match std::future::poll_fn(|cx| send.poll_capacity(cx)).await {
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(io::Error::other(e)),
            None => return Err(io::Error::other(format!("{path}: stream closed"))),
        }
        let call = calls.start(*port).on_stream(response.stream_id().as_u32());
        send.send_data(body, true).map_err(io::Error::other)?;
        let mut body = response.await.map_err(io::Error::other)?.into_body();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(io::Error::other)?;
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        let trailers = body.trailers().await.map_err(io::Error::other)?;
        let status = trailers.as_ref().and_then(|t| t.get("grpc-status"));
        if status.map(HeaderValue::as_bytes) != Some(b"0") {
            return Err(io::Error::other(format!("{path}: grpc-status {status:?}")));
        }
        call.done();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_framed_behind_its_length() {
        assert_eq!(&framed(b"abc")[..], b"\x00\x00\x00\x00\x03abc");
    }

    #[tokio::test]
    async fn a_call_past_the_stream_limit_waits_for_a_stream() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let latency = Duration::from_millis(20);
        tokio::spawn(serve(listener, latency, 1, Bytes::from_static(b"ok"), None));
        let channel = std::sync::Arc::new(Channel::new(addr));
        let started = std::time::Instant::now();
        let mut calls = tokio::task::JoinSet::new();
        for i in 0..3u8 {
            let channel = channel.clone();
            calls.spawn(async move {
                let message = [i];
                channel
                    .unary("/lab.Prices/Quote", &message, None, &Calls::none())
                    .await
            });
        }
        while let Some(done) = calls.join_next().await {
            done.unwrap().unwrap();
        }
        // One stream at a time: three rounds.
        assert!(started.elapsed() >= 3 * latency, "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn a_call_is_recorded_from_when_its_stream_opened() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let latency = Duration::from_millis(20);
        tokio::spawn(serve(listener, latency, 2, Bytes::from_static(b"ok"), None));
        let channel = std::sync::Arc::new(Channel::new(addr));
        let log = crate::truth::CallLog::new();
        let calls = log.request(1);
        let mut set = tokio::task::JoinSet::new();
        // Two streams at a time: three rounds, all sent before any opened.
        for i in 0..6u8 {
            let (channel, calls) = (channel.clone(), calls.clone());
            set.spawn(async move { channel.unary("/lab.Prices/Quote", &[i], None, &calls).await });
        }
        while let Some(done) = set.join_next().await {
            done.unwrap().unwrap();
        }
        calls.served();
        // Each took about its latency on the wire, not its wait for a stream.
        let took: Vec<u64> = log.requests()[0]
            .calls
            .iter()
            .map(|c| c.done_us - c.sent_us)
            .collect();
        assert_eq!(took.len(), 6);
        assert!(took.iter().all(|&t| t < 2 * 20_000), "{took:?}");
    }
}
