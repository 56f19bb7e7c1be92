//! The lab app over TLS (ALPN h2 or http/1.1) and over h2c with prior knowledge,
//! for checking what the client reports about TLS and HTTP/2.

use crate::http1::AppConfig;
use bytes::Bytes;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// A rustls server config for the given DER certificate chain and PKCS#8 key,
/// offering h2 and http/1.1 by ALPN.
pub fn server_config(
    cert_chain: Vec<Vec<u8>>,
    key_pkcs8: Vec<u8>,
) -> Result<Arc<rustls::ServerConfig>, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = cert_chain
        .into_iter()
        .map(rustls::pki_types::CertificateDer::from)
        .collect();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key_pkcs8.into());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

async fn serve_h2<T: AsyncRead + AsyncWrite + Unpin>(io: T, cfg: Arc<AppConfig>) {
    let Ok(mut conn) = h2::server::handshake(io).await else {
        return;
    };
    while let Some(Ok((req, mut respond))) = conn.accept().await {
        let cfg = cfg.clone();
        tokio::spawn(async move {
            let mut body = req.into_body();
            while let Some(Ok(chunk)) = body.data().await {
                let _ = body.flow_control().release_capacity(chunk.len());
            }
            if !cfg.work.is_zero() {
                tokio::time::sleep(cfg.work).await;
            }
            let resp = http::Response::builder()
                .status(200)
                .body(())
                .expect("static response");
            if let Ok(mut send) = respond.send_response(resp, false) {
                let _ = send.send_data(Bytes::from(cfg.body.clone()), true);
            }
        });
    }
}

/// TLS listener: ALPN decides between HTTP/2 and HTTP/1.1.
pub async fn serve_tls(listener: TcpListener, tls: Arc<rustls::ServerConfig>, cfg: AppConfig) {
    let acceptor = TlsAcceptor::from(tls);
    let cfg = Arc::new(cfg);
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        // As nginx (tcp_nodelay on): TLS records leave without Nagle's delay.
        let _ = tcp.set_nodelay(true);
        let (acceptor, cfg) = (acceptor.clone(), cfg.clone());
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                serve_h2(stream, cfg).await;
            } else {
                let _ = crate::http1::handle_io(stream, cfg).await;
            }
        });
    }
}

/// Plain TCP listener speaking h2c with prior knowledge.
pub async fn serve_h2c(listener: TcpListener, cfg: AppConfig) {
    let cfg = Arc::new(cfg);
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        // HTTP/2 servers (nginx, nghttpd) write frames without Nagle's delay.
        let _ = tcp.set_nodelay(true);
        tokio::spawn(serve_h2(tcp, cfg.clone()));
    }
}
