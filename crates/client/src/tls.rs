use crate::error::{ErrorKind, ProbeError};
use crate::keylog::KeyLogWriter;
use crate::request::HttpVersion;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    /// Accept any certificate (curl -k).
    pub insecure: bool,
    /// Trust these PEM certificates instead of the built-in roots (curl --cacert).
    pub ca_file: Option<PathBuf>,
    /// Where the sessions' secrets go (curl's SSLKEYLOGFILE), shared by every
    /// connection of the run.
    pub keylog: Option<Arc<KeyLogWriter>>,
}

/// A TLS client configuration built once per run, so that later connections
/// can resume the sessions of earlier ones (as a long-lived client would).
#[derive(Clone)]
pub struct TlsSetup {
    pub config: Arc<ClientConfig>,
}

impl TlsSetup {
    pub fn new(opts: &TlsOptions, version: HttpVersion) -> Result<TlsSetup, ProbeError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| ProbeError::new("tls", ErrorKind::Tls, e.to_string()))?;
        let mut config = if opts.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAnyCert(provider)))
                .with_no_client_auth()
        } else {
            builder
                .with_root_certificates(roots(opts)?)
                .with_no_client_auth()
        };
        if let Some(k) = &opts.keylog {
            config.key_log = k.clone();
        }
        config.alpn_protocols = match version {
            HttpVersion::Auto => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            HttpVersion::Http1 => vec![b"http/1.1".to_vec()],
            HttpVersion::Http2 => vec![b"h2".to_vec()],
        };
        Ok(TlsSetup {
            config: Arc::new(config),
        })
    }
}

fn roots(opts: &TlsOptions) -> Result<RootCertStore, ProbeError> {
    let mut store = RootCertStore::empty();
    match &opts.ca_file {
        Some(path) => {
            let err = |e: String| {
                ProbeError::new("tls", ErrorKind::Tls, format!("{}: {e}", path.display()))
            };
            let certs = CertificateDer::pem_file_iter(path).map_err(|e| err(e.to_string()))?;
            for cert in certs {
                let cert = cert.map_err(|e| err(e.to_string()))?;
                store.add(cert).map_err(|e| err(e.to_string()))?;
            }
            if store.is_empty() {
                return Err(err("no certificate found".into()));
            }
        }
        None => store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    Ok(store)
}

/// curl -k: verify signatures (so the handshake is real) but not the chain or name.
#[derive(Debug)]
struct AcceptAnyCert(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
