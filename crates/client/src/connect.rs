use crate::error::{ErrorKind, ProbeError};
use crate::request::RequestSpec;
use crate::target::Target;
use crate::tls::TlsSetup;
use rustls::pki_types::ServerName;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use whyslow_model::TlsInfo;

/// A byte stream to the server: plain TCP or TLS over TCP.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A connection just opened, with the time each step took.
pub struct Connected {
    pub io: Box<dyn Io>,
    pub remote: SocketAddr,
    pub local: SocketAddr,
    pub dns_us: u64,
    pub connect_us: u64,
    pub tls_us: u64,
    pub tls: Option<TlsInfo>,
}

impl Connected {
    /// True when TLS negotiated h2 by ALPN.
    pub fn alpn_h2(&self) -> bool {
        self.tls
            .as_ref()
            .and_then(|t| t.alpn.as_deref())
            .is_some_and(|a| a == "h2")
    }
}

pub(crate) fn micros(d: Duration) -> u64 {
    d.as_micros().min(u64::MAX as u128) as u64
}

async fn within<T>(
    phase: &'static str,
    limit: Duration,
    fut: impl std::future::Future<Output = Result<T, ProbeError>>,
) -> Result<T, ProbeError> {
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| ProbeError::timeout(phase, limit))?
}

async fn resolve(target: &Target) -> Result<Vec<SocketAddr>, ProbeError> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((target.host.as_str(), target.port))
        .await
        .map_err(|e| ProbeError::new("dns", ErrorKind::Dns, format!("{}: {e}", target.host)))?
        .collect();
    if addrs.is_empty() {
        return Err(ProbeError::new(
            "dns",
            ErrorKind::Dns,
            format!("{}: no address", target.host),
        ));
    }
    Ok(addrs)
}

/// Opens a connection: resolve, TCP connect (first address that answers), TLS.
pub async fn connect(
    target: &Target,
    spec: &RequestSpec,
    tls: Option<&TlsSetup>,
) -> Result<Connected, ProbeError> {
    let t0 = Instant::now();
    let addrs = within("dns", spec.timeout, resolve(target)).await?;
    let dns_us = micros(t0.elapsed());

    let t1 = Instant::now();
    let tcp = within("connect", spec.timeout, tcp_connect(&addrs)).await?;
    let connect_us = micros(t1.elapsed());
    tcp.set_nodelay(spec.nodelay)
        .map_err(|e| ProbeError::io("connect", &e))?;
    let remote = tcp.peer_addr().map_err(|e| ProbeError::io("connect", &e))?;
    let local = tcp
        .local_addr()
        .map_err(|e| ProbeError::io("connect", &e))?;

    if !target.https {
        return Ok(Connected {
            io: Box::new(tcp),
            remote,
            local,
            dns_us,
            connect_us,
            tls_us: 0,
            tls: None,
        });
    }
    let setup = tls.ok_or_else(|| ProbeError::new("tls", ErrorKind::Tls, "no TLS setup"))?;
    let t2 = Instant::now();
    let (io, info) = within("tls", spec.timeout, tls_handshake(target, tcp, setup)).await?;
    Ok(Connected {
        io,
        remote,
        local,
        dns_us,
        connect_us,
        tls_us: micros(t2.elapsed()),
        tls: Some(info),
    })
}

async fn tcp_connect(addrs: &[SocketAddr]) -> Result<TcpStream, ProbeError> {
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(ProbeError::io("connect", &e)),
        }
    }
    Err(last.unwrap_or_else(|| ProbeError::new("connect", ErrorKind::Io, "no address")))
}

async fn tls_handshake(
    target: &Target,
    tcp: TcpStream,
    setup: &TlsSetup,
) -> Result<(Box<dyn Io>, TlsInfo), ProbeError> {
    let name = ServerName::try_from(target.host.clone())
        .map_err(|e| ProbeError::new("tls", ErrorKind::Tls, format!("{}: {e}", target.host)))?;
    let connector = tokio_rustls::TlsConnector::from(setup.config.clone());
    let stream = connector.connect(name, tcp).await.map_err(|e| {
        let mut pe = ProbeError::io("tls", &e);
        if !matches!(pe.kind, ErrorKind::Reset | ErrorKind::Refused) {
            pe.kind = ErrorKind::Tls;
        }
        pe
    })?;
    let (_, conn) = stream.get_ref();
    let info = TlsInfo {
        version: conn
            .protocol_version()
            .map(|v| match v {
                rustls::ProtocolVersion::TLSv1_3 => "TLSv1.3".to_string(),
                rustls::ProtocolVersion::TLSv1_2 => "TLSv1.2".to_string(),
                other => format!("{other:?}"),
            })
            .unwrap_or_default(),
        cipher: conn
            .negotiated_cipher_suite()
            .map(|c| format!("{:?}", c.suite()))
            .unwrap_or_default(),
        alpn: conn
            .alpn_protocol()
            .map(|p| String::from_utf8_lossy(p).into_owned()),
        resumed: conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed),
    };
    Ok((Box::new(stream), info))
}
