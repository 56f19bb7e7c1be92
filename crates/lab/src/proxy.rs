//! A reverse proxy in front of a lab app, one upstream keep-alive connection
//! per client connection (as HAProxy 1.4 did in `http-server-close` off mode).

use crate::http1::{read_request, MAX_BODY};
use crate::scenario::accept_each;
use bytes::BytesMut;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, Clone)]
pub struct ProxyConfig {
    pub upstream: SocketAddr,
    /// Re-enable quick ACKs on incomplete requests: the HAProxy 1.4.19 fix.
    pub quickack_on_partial: bool,
}

/// Length of the response at the start of `buf` (head and Content-Length body), once its head is in.
pub(crate) fn response_len(buf: &[u8]) -> std::io::Result<Option<usize>> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    let head = match resp.parse(buf).map_err(std::io::Error::other)? {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => return Ok(None),
    };
    let body = resp
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| {
            std::str::from_utf8(h.value)
                .ok()?
                .trim()
                .parse::<usize>()
                .ok()
        })
        .unwrap_or(0);
    if body > MAX_BODY {
        return Err(std::io::Error::other(
            "response body too large for the lab proxy",
        ));
    }
    Ok(Some(head + body))
}

async fn relay(mut client: TcpStream, cfg: Arc<ProxyConfig>) -> std::io::Result<()> {
    let mut upstream = TcpStream::connect(cfg.upstream).await?;
    upstream.set_nodelay(true)?;
    client.set_nodelay(true)?;
    let mut cbuf = BytesMut::with_capacity(8192);
    let mut ubuf = BytesMut::with_capacity(8192);
    while let Some(head) = read_request(&mut client, &mut cbuf, cfg.quickack_on_partial).await? {
        let request = cbuf.split_to(head.head_len + head.content_length);
        upstream.write_all(&request).await?;
        let len = loop {
            if let Some(n) = response_len(&ubuf)? {
                if ubuf.len() >= n {
                    break n;
                }
            }
            if upstream.read_buf(&mut ubuf).await? == 0 {
                return Ok(());
            }
        };
        client.write_all(&ubuf.split_to(len)).await?;
        if head.close {
            break;
        }
    }
    Ok(())
}

pub async fn serve(listener: TcpListener, cfg: ProxyConfig) {
    let cfg = Arc::new(cfg);
    accept_each(listener, |stream| relay(stream, cfg.clone())).await;
}
