//! The front's clients to a backing API: an HTTP/1.1 keep-alive pool that
//! allows at most P connections (as runtimes limit connections per host),
//! or one HTTP/2 connection that multiplexes every call; either over plain
//! TCP or over TLS.

use crate::proxy::response_len;
use crate::truth::Calls;
use bytes::{Bytes, BytesMut};
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{OnceCell, Semaphore};
use tokio_rustls::TlsConnector;

/// A connection to the backing API: TCP, or TLS over it.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// How connections to the backing API are opened.
#[derive(Clone)]
pub struct Dialer {
    pub(crate) addr: SocketAddr,
    tls: Option<TlsConnector>,
}

impl Dialer {
    pub fn plain(addr: SocketAddr) -> Dialer {
        Dialer { addr, tls: None }
    }

    /// TLS with `config` (its ALPN picks HTTP/1.1 or HTTP/2).
    pub fn tls(addr: SocketAddr, config: Arc<rustls::ClientConfig>) -> Dialer {
        Dialer {
            addr,
            tls: Some(TlsConnector::from(config)),
        }
    }

    pub(crate) fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// A new connection and its local port.
    pub(crate) async fn open(&self) -> io::Result<(Box<dyn Stream>, u16)> {
        let tcp = TcpStream::connect(self.addr).await?;
        tcp.set_nodelay(true)?;
        let port = tcp.local_addr()?.port();
        let stream: Box<dyn Stream> = match &self.tls {
            None => Box::new(tcp),
            Some(tls) => {
                let name = rustls::pki_types::ServerName::IpAddress(self.addr.ip().into());
                Box::new(tls.connect(name, tcp).await?)
            }
        };
        Ok((stream, port))
    }
}

/// How the front reaches its backing API.
pub enum Upstream {
    Http1(Http1Pool),
    Http2(H2Connection),
}

impl Upstream {
    /// One GET to the backing API, read to the end of the response,
    /// carrying the inbound request's `traceparent` if it had one;
    /// recorded in `calls`.
    pub async fn call(
        &self,
        path: &str,
        traceparent: Option<&str>,
        calls: &Calls,
    ) -> io::Result<()> {
        match self {
            Upstream::Http1(p) => p.call(path, traceparent, calls).await,
            Upstream::Http2(h) => h.call(path, traceparent, calls).await,
        }
    }
}

/// An idle connection: stream, read buffer, local port.
type Idle = (Box<dyn Stream>, BytesMut, u16);

/// At most `size` keep-alive connections; a call waits for a free one.
pub struct Http1Pool {
    dialer: Dialer,
    permits: Semaphore,
    idle: Mutex<Vec<Idle>>,
}

impl Http1Pool {
    pub fn new(dialer: Dialer, size: usize) -> Self {
        Http1Pool {
            dialer,
            permits: Semaphore::new(size),
            idle: Mutex::new(Vec::new()),
        }
    }

    async fn call(&self, path: &str, traceparent: Option<&str>, calls: &Calls) -> io::Result<()> {
        let permit = self.permits.acquire().await.map_err(io::Error::other)?;
        let idle = self
            .idle
            .lock()
            .map_err(|_| io::Error::other("pool"))?
            .pop();
        let (mut stream, mut buf, port) = match idle {
            Some(c) => c,
            None => {
                let (stream, port) = self.dialer.open().await?;
                (stream, BytesMut::with_capacity(8192), port)
            }
        };
        let call = calls.start(port);
        let trace = traceparent.map_or(String::new(), |t| format!("traceparent: {t}\r\n"));
        let host = self.dialer.addr;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{trace}\r\n");
        stream.write_all(request.as_bytes()).await?;
        let len = loop {
            if let Some(n) = response_len(&buf)? {
                if buf.len() >= n {
                    break n;
                }
            }
            if stream.read_buf(&mut buf).await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        };
        let _ = buf.split_to(len);
        call.done();
        // Back to the pool before the permit: the next waiter finds it idle.
        if let Ok(mut idle) = self.idle.lock() {
            idle.push((stream, buf, port));
        }
        drop(permit);
        Ok(())
    }
}

/// One HTTP/2 connection (prior knowledge), opened on the first call so that
/// a capture started before it sees the connection preface.
pub struct H2Connection {
    dialer: Dialer,
    /// The connection and its local port.
    sender: OnceCell<(h2::client::SendRequest<Bytes>, u16)>,
}

impl H2Connection {
    pub fn new(dialer: Dialer) -> Self {
        H2Connection {
            dialer,
            sender: OnceCell::new(),
        }
    }

    async fn connect(&self) -> io::Result<(h2::client::SendRequest<Bytes>, u16)> {
        let (io, port) = self.dialer.open().await?;
        let (sender, conn) = h2::client::handshake(io).await.map_err(io::Error::other)?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok((sender, port))
    }

    async fn call(&self, path: &str, traceparent: Option<&str>, calls: &Calls) -> io::Result<()> {
        let (sender, port) = self.sender.get_or_try_init(|| self.connect()).await?;
        let call = calls.start(*port);
        let mut sender = sender.clone().ready().await.map_err(io::Error::other)?;
        let (scheme, addr) = (self.dialer.scheme(), self.dialer.addr);
        let mut request = http::Request::get(format!("{scheme}://{addr}{path}"));
        if let Some(t) = traceparent {
            request = request.header("traceparent", t);
        }
        let request = request.body(()).map_err(io::Error::other)?;
        let (response, _) = sender
            .send_request(request, true)
            .map_err(io::Error::other)?;
        let call = call.on_stream(response.stream_id().as_u32());
        let mut body = response.await.map_err(io::Error::other)?.into_body();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(io::Error::other)?;
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        call.done();
        Ok(())
    }
}
