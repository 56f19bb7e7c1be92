//! A certificate authority and a server certificate for 127.0.0.1 and
//! localhost, made when a TLS scenario starts (nothing is kept on disk),
//! and the key log the lab's TLS endpoints write their secrets to.

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use std::path::PathBuf;
use std::sync::Arc;
use whyslow_client::KeyLogWriter;

pub struct Pki {
    /// The authority's certificate, DER and PEM (for `--cacert`).
    pub ca_der: Vec<u8>,
    pub ca_pem: String,
    /// The server's chain, leaf first.
    pub chain: Vec<Vec<u8>>,
    /// The server's key, PKCS#8 DER.
    pub key_pkcs8: Vec<u8>,
}

impl Pki {
    pub fn generate() -> Result<Pki, rcgen::Error> {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key)?;
        let leaf_key = KeyPair::generate()?;
        let leaf_params = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])?;
        let leaf = leaf_params.signed_by(&leaf_key, &ca, &ca_key)?;
        Ok(Pki {
            ca_der: ca.der().to_vec(),
            ca_pem: ca.pem(),
            chain: vec![leaf.der().to_vec(), ca.der().to_vec()],
            key_pkcs8: leaf_key.serialize_der(),
        })
    }

    /// A client configuration that trusts this authority only, offering `alpn`.
    pub fn client_config(
        &self,
        alpn: &[&[u8]],
        keylog: Arc<KeyLogWriter>,
    ) -> Result<Arc<rustls::ClientConfig>, rustls::Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_der.clone().into())?;
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        cfg.key_log = keylog;
        Ok(Arc::new(cfg))
    }
}

/// A new key log file only this user can read, in the temporary directory:
/// it decrypts every session of the scenario.
pub fn private_keylog() -> std::io::Result<(PathBuf, Arc<KeyLogWriter>)> {
    use std::os::unix::fs::OpenOptionsExt;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let path =
        std::env::temp_dir().join(format!("whyslow-lab-{}-{nanos}.keys", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    let writer = KeyLogWriter::to_file(&path)?;
    Ok((path, Arc::new(writer)))
}

/// TLS for a scenario's two hops under one new authority, every endpoint
/// writing its secrets to one key log.
pub struct TwoHops {
    /// The key log's path (`Running::keylog`).
    pub keylog: PathBuf,
    /// The front door's config: HTTP/1.1.
    pub front: Arc<rustls::ServerConfig>,
    /// The backing server's config, offering `backend_alpn`.
    pub backend: Arc<rustls::ServerConfig>,
    /// The front's client config to the backing server, asking `client_alpn`.
    pub client: Arc<rustls::ClientConfig>,
}

pub fn two_hops(backend_alpn: &[&[u8]], client_alpn: &[&[u8]]) -> std::io::Result<TwoHops> {
    let pki = Pki::generate().map_err(std::io::Error::other)?;
    let (keylog, writer) = private_keylog()?;
    let server = crate::tls_h2::server_config(pki.chain.clone(), pki.key_pkcs8.clone())
        .map_err(std::io::Error::other)?;
    let mut backend = (*server).clone();
    backend.key_log = writer.clone();
    backend.alpn_protocols = backend_alpn.iter().map(|p| p.to_vec()).collect();
    let mut front = backend.clone();
    front.alpn_protocols = vec![b"http/1.1".to_vec()];
    let client = pki
        .client_config(client_alpn, writer)
        .map_err(std::io::Error::other)?;
    Ok(TwoHops {
        keylog,
        front: Arc::new(front),
        backend: Arc::new(backend),
        client,
    })
}
